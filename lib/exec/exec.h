/* The backend op table: every op the training engine runs, forward and
 * backward, as plain function pointers so a backend (CPU here, CUDA later)
 * fills one table and the engine in lib/train never knows which it drives.
 *
 * Conventions: row-major fp32; N = rows (tokens), C = channels. Backward ops
 * ACCUMULATE (+=) into parameter gradients and into input gradients, so that
 * micro-batches and residual branches sum without extra copies; callers zero
 * what must start at zero. Pointers are backend memory (host for the CPU). */
#ifndef LLMT_EXEC_H
#define LLMT_EXEC_H

#include <stddef.h>
#include <stdint.h>

typedef struct llmt__exec_ops {
    const char *name;
    /* out[N,OC] = inp[N,C] @ w[OC,C]^T (+ bias[OC]); bias may be NULL. */
    void (*matmul_fwd)(float *out, const float *inp, const float *w,
                       const float *bias, int N, int C, int OC);
    /* dinp += dout @ w; dw += dout^T @ inp; dbias += colsum(dout).
     * dinp or dbias may be NULL (not needed). */
    void (*matmul_bwd)(float *dinp, float *dw, float *dbias, const float *dout,
                       const float *inp, const float *w, int N, int C, int OC);
    void (*layernorm_fwd)(float *out, float *mean, float *rstd,
                          const float *inp, const float *w, const float *b,
                          int N, int C, float eps);
    void (*layernorm_bwd)(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, const float *mean,
                          const float *rstd, int N, int C);
    void (*rmsnorm_fwd)(float *out, float *rstd, const float *inp,
                        const float *w, int N, int C, float eps);
    void (*rmsnorm_bwd)(float *dinp, float *dw, const float *dout,
                        const float *inp, const float *w, const float *rstd,
                        int N, int C);
    /* tanh-approximated GELU (GPT-2). dinp += gelu'(inp) * dout. */
    void (*gelu_fwd)(float *out, const float *inp, size_t n);
    void (*gelu_bwd)(float *dinp, const float *inp, const float *dout, size_t n);
    /* out = silu(gate) * up; dgate += ..., dup += ... */
    void (*swiglu_fwd)(float *out, const float *gate, const float *up, size_t n);
    void (*swiglu_bwd)(float *dgate, float *dup, const float *dout,
                       const float *gate, const float *up, size_t n);
    /* Rotary embedding in place on `nh` heads of size hd per row, rows
     * B*T with row stride `stride`, position = row % T; rotate-half pairing
     * (i, i+hd/2). inverse=1 applies the transpose (the backward). */
    void (*rope)(float *x, int B, int T, int nh, int hd, size_t stride,
                 float theta, int inverse);
    /* Causal attention with grouped-query heads (nkv divides nh). q, k, v
     * rows of B*T with row strides qs (q, k and v share it), head h of q
     * uses kv head h/(nh/nkv). out[B*T, nh*hd]; att[B,nh,T,T] keeps the
     * probabilities for the backward. */
    void (*attention_fwd)(float *out, float *att, const float *q,
                          const float *k, const float *v, size_t qs, int B,
                          int T, int nh, int nkv, int hd);
    /* dq, dk, dv (stride qs, accumulated) from dout; datt is scratch of
     * the size of att. */
    void (*attention_bwd)(float *dq, float *dk, float *dv, float *datt,
                          const float *dout, const float *att, const float *q,
                          const float *k, const float *v, size_t qs, int B,
                          int T, int nh, int nkv, int hd);
    /* out[B*T,C] = wte[tok] (+ wpe[t]); wpe may be NULL. */
    void (*embedding_fwd)(float *out, const int32_t *tok, const float *wte,
                          const float *wpe, int B, int T, int C);
    void (*embedding_bwd)(float *dwte, float *dwpe, const float *dout,
                          const int32_t *tok, int B, int T, int C);
    /* In place: logits[N, Vp] -> probabilities over the first V columns;
     * losses[n] = -log p[target] (0 where target < 0). */
    void (*softmax_xent_fwd)(float *losses, float *logits,
                             const int32_t *targets, int N, int V, int Vp);
    /* In place: probs -> dlogits = (p - onehot) * dloss (0 for padded
     * columns and ignored rows). */
    void (*softmax_xent_bwd)(float *probs, const int32_t *targets,
                             float dloss, int N, int V, int Vp);
    /* Decoupled AdamW on n elements; t is the 1-based step for bias
     * correction. grad is pre-scaled by the caller (clipping). */
    void (*adamw)(float *param, const float *grad, float *m, float *v,
                  size_t n, float lr, float beta1, float beta2, float eps,
                  float wd, float grad_scale, int64_t t);
    /* sum of squares, in double */
    double (*sumsq)(const float *x, size_t n);
    void (*residual_fwd)(float *out, const float *a, const float *b, size_t n);
    void (*zero)(float *x, size_t n);
    void (*copy)(float *dst, const float *src, size_t n);
    void (*add)(float *dst, const float *src, size_t n); /* dst += src */
} llmt__exec_ops;

/* The CPU backend: fp32, OpenBLAS sgemm when built with it, OpenMP loops. */
const llmt__exec_ops *llmt__exec_cpu(void);
/* The CPU table with plain-loop matmuls: the reference the GEMM path is
 * tested against (test/train/test_exec.c). */
const llmt__exec_ops *llmt__exec_cpu_ref(void);
/* Set the thread count of OpenMP and OpenBLAS together (so that they do
 * not oversubscribe: sgemm is only called outside parallel regions). 0
 * keeps the defaults. */
void llmt__exec_cpu_set_threads(int threads);

/* For the fp32 device table (lib/exec/dev_cpu.c). Row-major C[M,N] =
 * alpha op(A) op(B) + beta C (op(A) [M,K], stored [K,M] when ta; op(B)
 * [K,N], stored [N,K] when tb): OpenBLAS split over the OpenMP team when
 * the build has it, else the plain loops of llmt__cpu_gemm_ref. */
void llmt__cpu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc);
void llmt__cpu_gemm_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* d[i] = gelu'(x[i]) * d[i] (the tanh GELU of gelu_fwd). */
void llmt__cpu_gelu_grad_mul(float *d, const float *x, size_t n);

#endif
