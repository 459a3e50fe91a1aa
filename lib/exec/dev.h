/* The backend op table: everything the training engine (lib/train/device.c)
 * needs from a backend, as plain function pointers. Three backends fill it:
 * the fp32 CPU backend (lib/exec/dev_cpu.c, over the OpenBLAS/OpenMP
 * kernels of lib/exec/cpu.c), CUDA (cuda/exec/dev_cuda.c, a thin layer over
 * cuda/llmt_cuda.h) and a bf16 host emulation (lib/exec/dev_emul.c) that
 * runs the CUDA ops on the CPU with the same storage types and roundings,
 * the reference the GPU is tested against. One table, so that the engine
 * above it, and the model graph in it, is written once for every backend
 * and precision.
 *
 * Storage: each backend says in `store` which type its activations and the
 * parameters' compute copy have (LLMT_DTYPE_BF16: CUDA and the emulation;
 * LLMT_DTYPE_FP32: the CPU). Pointers to such arrays are `void *` below
 * ("act" in the comments); the engine sizes and offsets them by that type.
 * Master weights, gradients of parameters, optimizer state, norm
 * statistics and losses are fp32 everywhere. With fp32 storage the compute
 * copy IS the master (adamw's param_bf16 is NULL). fp8 exists where an op
 * says so (the forward GEMMs of CUDA and the emulation).
 *
 * Row-major; N rows of C channels. Backward ops ACCUMULATE (+=) into fp32
 * parameter gradients and into input gradients unless they say
 * "overwritten". "Device" memory is whatever `alloc` returns (host memory
 * for the CPU and the emulation: host_memory = 1). Everything is queued in
 * order on one stream; `d2h`/`h2d` synchronise. */
#ifndef LLMT_EXEC_DEV_H
#define LLMT_EXEC_DEV_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "llmtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t llmt__bf16; /* bit pattern of a bfloat16 */

#ifndef LLMT__GEMM_TYPES
#define LLMT__GEMM_TYPES
typedef enum llmt__gemm_epi {
    LLMT_GEMM_EPI_NONE = 0,
    LLMT_GEMM_EPI_BIAS = 1,      /* + bias[N] (bf16) */
    LLMT_GEMM_EPI_GELU = 2,      /* gelu(.) */
    LLMT_GEMM_EPI_GELU_BIAS = 3, /* gelu(. + bias); pre-activation into aux */
    LLMT_GEMM_EPI_DGELU = 4,     /* . * gelu'(aux) (aux: forward's pre-act) */
    LLMT_GEMM_EPI_BGRAD = 5      /* also bias_grad[M] = sum_k op(A)[m,k] */
} llmt__gemm_epi;

typedef enum llmt__gemm_type {
    LLMT_GEMM_BF16 = 0,
    LLMT_GEMM_F32 = 1,
    LLMT_GEMM_E4M3 = 2,
    LLMT_GEMM_E5M2 = 3   /* A (e.g. a gradient) E5M2, B E4M3 */
} llmt__gemm_type;

/* Row-major C[M,N] = alpha * op(A) @ op(B) + beta * C, op(A) [M,K] (A stored
 * [K,M] when trans_a), op(B) [K,N] (B stored [N,K] when trans_b). lda/ldb/ldc
 * 0 mean packed. A and B are bf16 (or both fp8 with a_scale/b_scale: device
 * pointers to fp32 per-tensor dequantisation factors; fp8 needs sm_89+ and
 * trans_a=0, trans_b=1, which is the Linear forward inp @ W^T). C is bf16 or
 * fp32 (c_type). fp32 accumulation always. Epilogue order (cuBLASLt's):
 * alpha*op(A)op(B) + beta*C (C not read when beta is 0), then + bias, then
 * gelu / * gelu'(aux). bias, aux and bias_grad have C's type; aux is [M,N]
 * packed whatever ldc is; bias_grad is not scaled by alpha. */
typedef struct llmt__gemm_args {
    int trans_a, trans_b;
    int M, N, K;
    const void *A; int lda;
    const void *B; int ldb;
    void *C; int ldc;
    llmt__gemm_type ab_type, c_type;
    float alpha, beta;
    llmt__gemm_epi epi;
    const void *bias;  /* EPI_BIAS / GELU_BIAS: bf16 [N] (c_type's type) */
    void *aux;         /* GELU_BIAS: out pre-act; DGELU: in pre-act [M,N] */
    void *bias_grad;   /* BGRAD: [M] of c_type's type (overwritten) */
    const float *a_scale, *b_scale; /* fp8 only (device) */
} llmt__gemm_args;

/* A packed GEMM without epilogue, alpha 1: A and B fp32 (bf16 0) or bf16,
 * C fp32 (cf32) or A's type. The engine's, the MoE layer's and the MoE
 * experts op's GEMMs start from it. */
static inline llmt__gemm_args llmt__gemm_plain(int bf16, int ta, int tb, int M, int N, int K,
                                               const void *A, const void *B, void *C, int cf32,
                                               float beta)
{
    llmt__gemm_args a;
    memset(&a, 0, sizeof a);
    a.trans_a = ta;
    a.trans_b = tb;
    a.M = M;
    a.N = N;
    a.K = K;
    a.A = A;
    a.B = B;
    a.C = C;
    a.ab_type = bf16 ? LLMT_GEMM_BF16 : LLMT_GEMM_F32;
    a.c_type = cf32 ? LLMT_GEMM_F32 : a.ab_type;
    a.alpha = 1.0f;
    a.beta = beta;
    return a;
}

/* An fp8 GEMM in the one layout fp8 takes, C[M,N] (+)= dequant(A B^T): A
 * [M,K] codes (E5M2 when a5, else E4M3), B [N,K] E4M3 codes, sa and sb
 * their dequantisation scales (device); C fp32 (cf32) or bf16. */
static inline llmt__gemm_args llmt__gemm_fp8(int M, int N, int K, const void *A, int a5,
                                             const float *sa, const void *B, const float *sb,
                                             void *C, int cf32, float beta)
{
    llmt__gemm_args a = llmt__gemm_plain(1, 0, 1, M, N, K, A, B, C, cf32, beta);
    a.ab_type = a5 ? LLMT_GEMM_E5M2 : LLMT_GEMM_E4M3;
    a.a_scale = sa;
    a.b_scale = sb;
    return a;
}
#endif

typedef struct llmt__dev llmt__dev; /* a backend's context (opaque) */

typedef struct llmt__dev_opts {
    int device;        /* ordinal */
    int deterministic; /* bitwise-reproducible runs */
} llmt__dev_opts;

/* moe_experts' arguments: n experts, expert e's nr[e] packed rows from
 * row r0[e] (contiguous, r0[0] = 0), weights w1, w3 [n, F, C] and w2
 * [n, C, F] in the storage type. Forward (bwd 0): h1 = xe w1^T, h3 = xe
 * w3^T, act = swiglu(h1, h3), ye = act w2^T, all OVERWRITTEN. Backward
 * (bwd 1; h1, h3, act read): g2 += dye^T act, dact = dye w2, dh1, dh3 =
 * swiglu_bwd(dact), g1 += dh1^T xe, g3 += dh3^T xe (fp32 gradients), dxe
 * = dh1 w1 + dh3 w3. Each expert's arithmetic is the per-expert gemm and
 * swiglu ops' of the same table. */
typedef struct llmt__moe_xargs {
    int bwd, n, C, F;
    const int64_t *r0, *nr;
    const void *w1, *w2, *w3, *xe, *dye;
    void *h1, *h3, *act, *ye, *dact, *dh1, *dh3, *dxe;
    float *g1, *g2, *g3;
} llmt__moe_xargs;

typedef struct llmt__dev_ops {
    const char *name; /* "cpu", "cuda", "emulated" */
    llmt_dtype store; /* activations and compute copies: FP32 or BF16 */
    int host_memory;  /* alloc gives host memory the CPU may address */
    int align;        /* elements each parameter tensor starts on */
    /* Floats of attention's saved state per layer (the `lse` argument):
     * B*nh*T log-sum-exps, or the CPU's B*nh*T*T probabilities. */
    size_t (*attn_state)(int B, int nh, int T);
    /* Tensor parallelism on this backend has not run on its hardware as
     * the trainer runs it (through lib/train/tp.c's staging): the engine
     * refuses tp > 1 with this reason (NULL: no such doubt). No table
     * sets it since CUDA's ran on a GPU (2026-11-26, H100: gpu-tp-engine);
     * a new backend's TP starts marked. A test that verifies it runs on a
     * copy of the table with it cleared, the explicit opt-in
     * (test/gpu/test_gpu_tp.c). Kept before `create`: lib/obs/devops.c
     * checks every slot from there on is a function it wraps. */
    const char *unverified_tp;
    /* The same for pipeline parallelism (lib/train/pp.c's boundary
     * messages, staged through host memory over in-process, Gloo and MPI
     * groups by lib/train/pp_xfer.c): set_pp_comm refuses pp > 1 with this
     * reason. No table sets it since CUDA's passed test gpu-pp-engine (pp 2
     * as two threads on one GPU against one CUDA rank) on an H100
     * (2026-11-27); a new backend's pipeline starts marked. */
    const char *unverified_pp;
    /* The same for data parallelism over a host communicator (in-process,
     * Gloo, MPI) on a device engine, its collectives staged through host
     * memory by lib/train/dp.c (x_all_reduce): set_comm refuses such a
     * group with this reason (NCCL groups are not affected). No table sets
     * it since CUDA's passed test gpu-dp-host (dp 2 as two threads on one
     * GPU against one CUDA rank) on an H100 (2026-11-27). */
    const char *unverified_dp;
    /* The same for context parallelism (the attn_cp_* ops and the staged
     * exchange of lib/train/cp.c): set_cp_comm refuses with this reason.
     * No table sets it since CUDA's ran on a GPU (2026-11-26); a new
     * backend's CP starts marked (test/gpu/test_gpu_cp.c checks the
     * refusal on a marked copy of the emulation's table). */
    const char *unverified_cp;
    /* The same for mixture-of-experts layers (lib/train/moe_dev.c and its
     * moe_* ops, run by the engine): the engine refuses a MoE model with
     * this reason. No table sets it since CUDA's ran on a GPU
     * (2026-11-26, gpu-moe-engine); test/gpu/test_gpu_moe.c checks the
     * refusal on a marked copy of the emulation's table. */
    const char *unverified_moe;
    /* The same for a MoE model's expert, pipeline and context parallel
     * groups over host communicators (moe_dev_ep.c's exchange staged
     * through host memory by d2h and h2d; moe_net.c's router tallies and
     * moe_group.c's statistics, host arrays, summed over the group as they
     * are): set_ep_comm, set_pp_comm and set_cp_comm refuse ep, pp or cp >
     * 1 for a MoE model with this reason. No table sets it since CUDA's
     * passed test gpu-moe-engine's group comparisons (one layer at ep 2,
     * ep 2 x dp 2, dp 2, pp 2, cp 2, as two threads on one GPU against the
     * emulation) on an H100 (2026-11-27); test_gpu_moe.c's emulation mode
     * checks the refusal on a marked copy of the emulation's table. */
    const char *unverified_moe_groups;

    /* -- context and memory */
    /* o is required. On failure *out is NULL and err (errlen bytes) says
     * why. */
    llmt_status (*create)(const llmt__dev_opts *o, llmt__dev **out, char *err,
                          size_t errlen);
    void (*destroy)(llmt__dev *d);
    const char *(*last_error)(const llmt__dev *d);
    llmt_status (*alloc)(llmt__dev *d, void **p, size_t bytes);
    void (*free)(llmt__dev *d, void *p);
    /* Pinned host memory (the engine's host mirrors for snapshots). */
    llmt_status (*host_alloc)(llmt__dev *d, void **p, size_t bytes);
    void (*host_free)(llmt__dev *d, void *p);
    /* Bytes allocated now and at most so far (the allocator's view). */
    void (*mem_stats)(const llmt__dev *d, size_t *in_use, size_t *peak);
    llmt_status (*h2d)(llmt__dev *d, void *dst, const void *src, size_t bytes);
    llmt_status (*d2h)(llmt__dev *d, void *dst, const void *src, size_t bytes);
    llmt_status (*memset0)(llmt__dev *d, void *dst, size_t bytes);
    /* Device to device (the ranges do not overlap). */
    llmt_status (*d2d)(llmt__dev *d, void *dst, const void *src, size_t bytes);
    /* Every byte 0xff: NaN in fp32 and in bf16. Poisons memory that must
     * not be read before it is rewritten (ZeRO-3's released parameters). */
    llmt_status (*fill_nan)(llmt__dev *d, void *dst, size_t bytes);
    /* Wait for everything queued; surfaces asynchronous errors. */
    llmt_status (*sync)(llmt__dev *d);

    /* -- compute */
    llmt_status (*gemm)(llmt__dev *d, const llmt__gemm_args *g);
    /* out[B*T,C] = wte[tok] (+ wpe[t]); wpe may be NULL. */
    llmt_status (*embedding_fwd)(llmt__dev *d, void *out,
                                 const int32_t *tok, const void *wte,
                                 const void *wpe, int B, int T, int C);
    /* dwte[tok] += dout rows; dwpe[t] += sum over b (dwpe may be NULL). */
    llmt_status (*embedding_bwd)(llmt__dev *d, float *dwte, float *dwpe,
                                 const void *dout, const int32_t *tok,
                                 int B, int T, int C);
    /* mean/rstd [N] fp32; b may be NULL. */
    llmt_status (*layernorm_fwd)(llmt__dev *d, void *out, float *mean,
                                 float *rstd, const void *inp,
                                 const void *w, const void *b,
                                 int N, int C, float eps);
    /* dinp (bf16) += ; dw, db (fp32) += ; db may be NULL. */
    llmt_status (*layernorm_bwd)(llmt__dev *d, void *dinp, float *dw,
                                 float *db, const void *dout,
                                 const void *inp, const void *w,
                                 const float *mean, const float *rstd, int N,
                                 int C);
    llmt_status (*rmsnorm_fwd)(llmt__dev *d, void *out, float *rstd,
                               const void *inp, const void *w,
                               int N, int C, float eps);
    llmt_status (*rmsnorm_bwd)(llmt__dev *d, void *dinp, float *dw,
                               const void *dout, const void *inp,
                               const void *w, const float *rstd, int N,
                               int C);
    /* out = silu(gate) * up; bwd: dgate =, dup = (written, not added to:
     * computed as 0 + the product, bit for bit what zeroed buffers and an
     * accumulation gave, without the two zeroing passes and reads of
     * tokens x ffn each); h (NULL: not written) = swiglu_fwd's out, bit
     * for bit, from the same read of gate and up (the backward's SwiGLU
     * output for the down projection's weight gradient); dgate may alias
     * dout (each element read before it is written). */
    llmt_status (*swiglu_fwd)(llmt__dev *d, void *out,
                              const void *gate, const void *up,
                              size_t n);
    llmt_status (*swiglu_bwd)(llmt__dev *d, void *dgate, void *dup, void *h, const void *dout,
                              const void *gate, const void *up, size_t n);
    /* out = a + b (out may alias a). */
    llmt_status (*residual_fwd)(llmt__dev *d, void *out,
                                const void *a, const void *b,
                                size_t n);
    /* dbias[C] += column sums of dout[N,C]. */
    llmt_status (*bias_bwd)(llmt__dev *d, float *dbias, const void *dout,
                            int N, int C);
    /* In place on nh heads of hd per row, B*T rows of stride `stride`,
     * position = row % T, pairs (i, i+hd/2); inverse=1 is the backward. */
    llmt_status (*rope)(llmt__dev *d, void *x, int B, int T, int nh,
                        int hd, size_t stride, float theta, int inverse);
    /* Causal attention, q/k/v rows of stride qs, grouped-query heads (head
     * h reads kv head h/(nh/nkv)); out [B*T, nh*hd] packed; lse: the
     * attention state (attn_state floats). */
    llmt_status (*attention_fwd)(llmt__dev *d, void *out, float *lse,
                                 const void *q, const void *k,
                                 const void *v, size_t qs, int B, int T,
                                 int nh, int nkv, int hd);
    /* dq, dk, dv (stride qs) are OVERWRITTEN. */
    llmt_status (*attention_bwd)(llmt__dev *d, void *dq, void *dk,
                                 void *dv, const void *dout,
                                 const void *out, const float *lse,
                                 const void *q, const void *k,
                                 const void *v, size_t qs, int B, int T,
                                 int nh, int nkv, int hd);
    /* losses[n] = logsumexp - logit[target] (0 where target < 0); when
     * dloss != 0 the logits are OVERWRITTEN by (softmax - onehot) * dloss
     * (0 in padded columns and ignored rows). */
    llmt_status (*softmax_xent)(llmt__dev *d, float *losses, void *logits,
                                const int32_t *targets, int N, int V, int Vp,
                                float dloss);
    /* AdamW on fp32 master weights; writes the bf16 copy (round to nearest
     * even) when param_bf16 is not NULL. grad * grad_scale; t 1-based. */
    llmt_status (*adamw)(llmt__dev *d, float *master, void *param_bf16,
                         const float *grad, float *m, float *v, size_t n,
                         float lr, float beta1, float beta2, float eps,
                         float wd, float grad_scale, int64_t t);
    /* out[0] (device fp32) = sum of squares over `count` (>= 0, any
     * number) arrays. */
    llmt_status (*sumsq)(llmt__dev *d, float *out, const float *const *xs,
                         const size_t *ns, int count);
    /* out[0] (device fp32) = sum of x. */
    llmt_status (*sum)(llmt__dev *d, float *out, const float *x, size_t n);
    llmt_status (*f32_to_bf16)(llmt__dev *d, llmt__bf16 *y, const float *x,
                               size_t n);

    /* -- fp8 GEMMs (and what they need without fused epilogues) */
    /* out[0] (device fp32) = max |x|. */
    llmt_status (*amax)(llmt__dev *d, float *out, const void *x, size_t n);
    /* y = fp8(x * scale[0]) (scale on the device), round to nearest even,
     * saturating; e5m2 = 0 gives E4M3 (lib/exec/fp8.h has the encoding). */
    llmt_status (*quantize_fp8)(llmt__dev *d, uint8_t *y, const void *x,
                                const float *scale, size_t n, int e5m2);
    /* fp8 operands in both layouts: cuBLASLt's fp8 GEMMs take only A[M,K]
     * B[N,K]^T (both K-contiguous), so the data and weight gradients need
     * fp8 copies of their operands transposed. For bf16 x[R,C]: y[R,C] =
     * fp8(x * scale[0]) (NULL: skipped) and yt[C,R] = the same codes
     * transposed (NULL: skipped), the encoding of quantize_fp8; amax[0]
     * (device, NULL: skipped) = max |x| as the amax op computes it, from
     * the same read of x (the delayed recipe records it as it quantises
     * with an earlier scale). C a multiple of 4, R too when yt is
     * written. */
    llmt_status (*cast_transpose_fp8)(llmt__dev *d, uint8_t *y, uint8_t *yt, float *amax,
                                      const void *x, const float *scale, int R, int C,
                                      int e5m2);
    /* dx[i] *= gelu'(pre[i]) in place (tanh GELU): the DGELU epilogue of
     * an fp8 data gradient, whose GEMM takes no epilogue here */
    llmt_status (*gelu_bwd_mul)(llmt__dev *d, void *dx, const void *pre, size_t n);
    /* x[N,C] += bias[C] */
    llmt_status (*bias_add)(llmt__dev *d, void *x, const void *bias,
                            int N, int C);
    /* tanh GELU (fp8 path) */
    llmt_status (*gelu_fwd)(llmt__dev *d, void *out, const void *inp,
                            size_t n);

    /* -- the vocabulary split of tensor parallelism (lib/train/device.h):
     * this rank holds vocabulary rows [lo, lo + Vl) of the embedding and
     * the logits' columns [lo, lo + Vl), of which the first nv (<= Vl)
     * are real tokens (the rest: padding). NULL where a backend has none
     * (the engine then refuses tensor parallelism). lib/exec/vocab_part.c
     * is the plain C reference (fp32 and bf16 storage). */
    /* out[B*T,C] = wte[tok - lo] for tokens in [lo, lo + Vl), else 0;
     * + wpe[t] when wpe is not NULL. */
    llmt_status (*embedding_part_fwd)(llmt__dev *d, void *out, const int32_t *tok,
                                      const void *wte, const void *wpe, int B, int T, int C,
                                      int lo, int Vl);
    /* dwte[tok - lo] += dout rows of tokens in range; dwpe as
     * embedding_bwd (may be NULL). */
    llmt_status (*embedding_part_bwd)(llmt__dev *d, float *dwte, float *dwpe, const void *dout,
                                      const int32_t *tok, int B, int T, int C, int lo, int Vl);
    /* Vocabulary-parallel cross-entropy in three stages around the
     * group's reductions (the full logits are never gathered):
     * max: mx[n] = max of row n's first nv columns (-FLT_MAX if none);
     *   (the group then takes the max over ranks)
     * sum: st[n] = sum of exp(x - mx[n]) over them, st[N + n] = the
     *   target's logit when the target is in [lo, lo + nv), else 0;
     *   (the group then sums st over ranks)
     * fin: losses[n] = log st[n] + mx[n] - st[N + n] (0 where target <
     *   0); when dloss != 0 the logits are OVERWRITTEN by (softmax -
     *   onehot) * dloss (0 in padded columns and ignored rows). */
    llmt_status (*xent_part_max)(llmt__dev *d, float *mx, const void *logits, int N, int Vl,
                                 int nv);
    llmt_status (*xent_part_sum)(llmt__dev *d, float *st, const void *logits, const float *mx,
                                 const int32_t *targets, int N, int Vl, int nv, int lo);
    llmt_status (*xent_part_fin)(llmt__dev *d, float *losses, void *logits, const float *mx,
                                 const float *st, const int32_t *targets, int N, int Vl, int nv,
                                 int lo, float dloss);

    /* -- mixture-of-experts layers (lib/train/moe_dev.h): rows between the
     * tokens' order and the experts' packed order. tok [R]: packed row
     * r's token; row [N*K]: token n's choice k's packed row (-1:
     * dropped); gate [N*K] fp32, the choices' weights. tok, row and gate
     * are device arrays. Sums in fp32, one rounding at the store.
     * lib/exec/moe_ops.c is the plain C reference (fp32 and bf16 storage).
     * gather: out[r] = x[tok[r]] (R rows of C). */
    llmt_status (*moe_gather)(llmt__dev *d, void *out, const void *x, const int32_t *tok, int R,
                              int C);
    /* dx[n] OVERWRITTEN = the sum of dxe over token n's kept rows, in
     * ascending packed order (0 if none). */
    llmt_status (*moe_gather_bwd)(llmt__dev *d, void *dx, const void *dxe, const int32_t *row,
                                  int N, int K, int C);
    /* y[n] OVERWRITTEN = sum over k (in k order) of gate[n,k] ye[row[n,k]]
     * over the kept choices (0 if none). */
    llmt_status (*moe_combine)(llmt__dev *d, void *y, const void *ye, const int32_t *row,
                               const float *gate, int N, int K, int C);
    /* Its backward: dye[row[n,k]] OVERWRITTEN = gate[n,k] dy[n] for kept
     * choices (other rows untouched), dgate[n,k] (fp32, OVERWRITTEN) =
     * dy[n] . ye[row[n,k]] (0 for a dropped choice). */
    llmt_status (*moe_combine_bwd)(llmt__dev *d, void *dye, float *dgate, const void *dy,
                                   const void *ye, const int32_t *row, const float *gate, int N,
                                   int K, int C);
    /* Optional (NULL: lib/train/moe_dev.c calls gemm and swiglu_* per
     * expert): every expert's SwiGLU chain on its packed rows
     * (llmt__moe_xargs), the experts as one parallel region over experts
     * on a host-memory backend, each expert's GEMMs whole on its thread
     * (lib/exec/moe_ops.c, llmt__moe_op_experts). */
    llmt_status (*moe_experts)(llmt__dev *d, const struct llmt__moe_xargs *a);

    /* -- context parallelism's attention pieces (lib/train/cp.h): the
     * contracts of lib/exec/attn_cp.h (its plain C reference, fp32 and
     * bf16 storage, the storage type the backend's `store`), on the
     * backend's memory; pos, qpos and kpos are device arrays. */
    llmt_status (*attn_cp_rope)(llmt__dev *d, void *x, int B, int T, int nh, int hd,
                                size_t stride, float theta, int inverse, const int32_t *pos);
    llmt_status (*attn_cp_fwd)(llmt__dev *d, float *o, float *lse, const void *q, size_t qs,
                               const void *kv, size_t kvs, int B, int Tq, int Tk, int nh,
                               int nkv, int hd, const int32_t *qpos, const int32_t *kpos);
    llmt_status (*attn_cp_delta)(llmt__dev *d, float *D, const void *dout, const void *out,
                                 int B, int T, int nh, int hd);
    llmt_status (*attn_cp_bwd)(llmt__dev *d, float *dq, float *dkv, const float *D,
                               const float *lse, const void *dout, const void *q, size_t qs,
                               const void *kv, size_t kvs, int B, int Tq, int Tk, int nh,
                               int nkv, int hd, const int32_t *qpos, const int32_t *kpos);
    llmt_status (*attn_cp_rows)(llmt__dev *d, void *dst, size_t ds, const void *src, size_t ss,
                                int src_f32, size_t rows, size_t cols);
} llmt__dev_ops;

/* The CUDA table, or NULL in a build without CUDA. */
const llmt__dev_ops *llmt__dev_cuda(void);
/* The fp32 CPU backend (always available). */
const llmt__dev_ops *llmt__dev_cpu(void);
/* The host emulation (always available; internal, for tests). */
const llmt__dev_ops *llmt__dev_emul(void);
/* The same with host_memory 0: the engine's groups over host
 * communicators stage its buffers through d2h/h2d copies as they do a
 * GPU's (host_stage.c), so a run on it takes every path a CUDA run on
 * those groups takes. llmt_job's train.device "emulated". */
const llmt__dev_ops *llmt__dev_emul_staged(void);

/* lib/exec/vocab_part.c: the reference of the vocabulary-split ops on
 * host memory, storage fp32 (bf16 = 0) or bf16 (bf16 = 1). */
void llmt__vp_embedding_fwd(int bf16, void *out, const int32_t *tok, const void *wte,
                            const void *wpe, int B, int T, int C, int lo, int Vl);
void llmt__vp_embedding_bwd(int bf16, float *dwte, float *dwpe, const void *dout,
                            const int32_t *tok, int B, int T, int C, int lo, int Vl);
void llmt__vp_xent_max(int bf16, float *mx, const void *logits, int N, int Vl, int nv);
void llmt__vp_xent_sum(int bf16, float *st, const void *logits, const float *mx,
                       const int32_t *targets, int N, int Vl, int nv, int lo);
void llmt__vp_xent_fin(int bf16, float *losses, void *logits, const float *mx, const float *st,
                       const int32_t *targets, int N, int Vl, int nv, int lo, float dloss);

/* The same ops as table entries of the two host backends: _f32 for the
 * fp32 CPU backend, _bf16 for the emulation (vocab_part.c). */
/* clang-format off */
#define LLMT__VP_TABLE_DECL(sfx)                                                           \
    llmt_status llmt__vp_embedding_part_fwd_##sfx(llmt__dev *d, void *out, const int32_t *tok, \
                                                  const void *wte, const void *wpe, int B,     \
                                                  int T, int C, int lo, int Vl);               \
    llmt_status llmt__vp_embedding_part_bwd_##sfx(llmt__dev *d, float *dwte, float *dwpe,      \
                                                  const void *dout, const int32_t *tok, int B, \
                                                  int T, int C, int lo, int Vl);               \
    llmt_status llmt__vp_xent_part_max_##sfx(llmt__dev *d, float *mx, const void *logits,      \
                                             int N, int Vl, int nv);                           \
    llmt_status llmt__vp_xent_part_sum_##sfx(llmt__dev *d, float *st, const void *logits,      \
                                             const float *mx, const int32_t *targets, int N,   \
                                             int Vl, int nv, int lo);                          \
    llmt_status llmt__vp_xent_part_fin_##sfx(llmt__dev *d, float *losses, void *logits,        \
                                             const float *mx, const float *st,                 \
                                             const int32_t *targets, int N, int Vl, int nv,    \
                                             int lo, float dloss);
LLMT__VP_TABLE_DECL(f32)
LLMT__VP_TABLE_DECL(bf16)
/* clang-format on */

/* lib/exec/moe_ops.c: the reference of the MoE ops on host memory, storage
 * fp32 (bf16 = 0) or bf16 (bf16 = 1), and their table entries (_f32: the
 * CPU backend, _bf16: the emulation). */
void llmt__moe_op_gather(int bf16, void *out, const void *x, const int32_t *tok, int R, int C);
void llmt__moe_op_gather_bwd(int bf16, void *dx, const void *dxe, const int32_t *row, int N,
                             int K, int C);
void llmt__moe_op_combine(int bf16, void *y, const void *ye, const int32_t *row,
                          const float *gate, int N, int K, int C);
void llmt__moe_op_combine_bwd(int bf16, void *dye, float *dgate, const void *dy, const void *ye,
                              const int32_t *row, const float *gate, int N, int K, int C);
/* clang-format off */
#define LLMT__MOE_TABLE_DECL(sfx)                                                             \
    llmt_status llmt__moe_gather_##sfx(llmt__dev *d, void *out, const void *x,                \
                                       const int32_t *tok, int R, int C);                     \
    llmt_status llmt__moe_gather_bwd_##sfx(llmt__dev *d, void *dx, const void *dxe,           \
                                           const int32_t *row, int N, int K, int C);          \
    llmt_status llmt__moe_combine_##sfx(llmt__dev *d, void *y, const void *ye,                \
                                        const int32_t *row, const float *gate, int N, int K,  \
                                        int C);                                               \
    llmt_status llmt__moe_combine_bwd_##sfx(llmt__dev *d, void *dye, float *dgate,            \
                                            const void *dy, const void *ye,                   \
                                            const int32_t *row, const float *gate, int N,     \
                                            int K, int C);
LLMT__MOE_TABLE_DECL(f32)
LLMT__MOE_TABLE_DECL(bf16)
/* clang-format on */
/* moe_experts on host memory through table t's own gemm, swiglu_fwd,
 * swiglu_bwd and memset0 (the backend's, not a wrapper's: they run on
 * several threads at once): one `omp parallel for` over the experts. */
llmt_status llmt__moe_op_experts(const llmt__dev_ops *t, llmt__dev *d,
                                 const llmt__moe_xargs *a);

/* Host-side bf16 helpers shared by the emulation and the engine. */
static inline float llmt__bf16_to_f32(llmt__bf16 h)
{
    union { uint32_t u; float f; } x;
    x.u = (uint32_t)h << 16;
    return x.f;
}
static inline llmt__bf16 llmt__f32_to_bf16(float f)
{
    union { uint32_t u; float f; } x;
    x.f = f;
    if ((x.u & 0x7fffffffu) > 0x7f800000u) return (llmt__bf16)((x.u >> 16) | 0x40);
    x.u += 0x7fffu + ((x.u >> 16) & 1u); /* round to nearest even */
    return (llmt__bf16)(x.u >> 16);
}

/* Host staging (lib/exec/host_stage.c). A group whose communicator reads
 * host memory (in-process, Gloo, MPI) takes a device engine's buffers
 * through host copies: llmt__staged says when (the engine's table has
 * host_memory 0 and c is not NCCL); llmt__host_stage keeps the copy's
 * buffer, *p of capacity *cap, grown to at least `bytes` (plain malloc:
 * it may outlive a device context; LLMT_ERR_OUT_OF_MEMORY, nothing said,
 * when there is none). */
int llmt__staged(int host_memory, const llmt_comm *c);
llmt_status llmt__host_stage(void **p, size_t *cap, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
