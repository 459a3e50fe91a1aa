/* The CUDA backend's plain C entry points (internal; not installed).
 *
 * Everything here takes explicit device pointers and shapes and runs on the
 * context's compute stream; nothing synchronises unless it says so. Types:
 * activations and parameters are bf16 (passed as uint16_t bit patterns, so C
 * callers need no CUDA headers), master weights, optimizer state, gradients
 * of parameters, statistics and losses are fp32. Layouts are row-major with
 * the same conventions as lib/exec/exec.h (N rows of C channels; backward
 * ops ACCUMULATE (+=) into fp32 parameter gradients; rope pairs (i, i+hd/2);
 * attention takes packed rows with stride qs and grouped-query heads).
 *
 * Determinism: every kernel below is bitwise deterministic for fixed shapes
 * (fixed-order reductions, no floating-point atomics) except
 * llmt__cuda_embedding_bwd outside deterministic mode, which uses atomics,
 * and llmt__cuda_attention_bwd with attn_scalar 5 outside it (dQ by atomics).
 * The GEMM restricts cuBLASLt's reduction schemes in deterministic mode. */
#ifndef LLMT_CUDA_H
#define LLMT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "llmtrain.h"
#include "../lib/exec/dev.h" /* llmt__bf16, the GEMM argument types */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llmt__cuda_ctx llmt__cuda_ctx;

/* ---- context, streams, memory (cuda/mem/mem.cu; devices: cuda/core/device.cu) ------------- */

typedef struct llmt__cuda_ctx_opts {
    int device;           /* CUDA ordinal */
    int deterministic;    /* bitwise-reproducible runs */
    size_t workspace;     /* cuBLASLt workspace bytes (0: 32 MiB) */
    int attn_scalar;      /* attention kernels: 0 best available (the
                             mma.sync kernels of attention_mma.cu for
                             hd 64/128, else the wmma register ones),
                             1 CUDA cores only, 2 tensor cores through
                             shared memory only, 3 mma.sync where they
                             apply (else as 0), 4 the wmma register
                             kernels (the default before 2026-11-26)
                             (tests and comparisons), 5 as 3 with the
                             backward's dQ by fp32 atomics (FlashAttention-
                             2's; not deterministic, so with deterministic
                             set the backward is 3's; ran on an H100,
                             2026-11-27); other values are refused */
    char *err;            /* optional: receives the message when creation
                             fails (the context is gone then) */
    size_t err_len;
} llmt__cuda_ctx_opts;

/* Creates the compute and communication streams (non-blocking), the
 * cuBLASLt handle, its workspace and the caching allocator. */
llmt_status llmt__cuda_ctx_create(const llmt__cuda_ctx_opts *opts,
                                  llmt__cuda_ctx **out);
void llmt__cuda_ctx_destroy(llmt__cuda_ctx *ctx);
const char *llmt__cuda_ctx_last_error(const llmt__cuda_ctx *ctx);
void *llmt__cuda_ctx_compute_stream(llmt__cuda_ctx *ctx); /* cudaStream_t */
void *llmt__cuda_ctx_comm_stream(llmt__cuda_ctx *ctx);
/* Compute capability as major*10+minor. */
int llmt__cuda_ctx_sm(const llmt__cuda_ctx *ctx);
/* The comm stream waits for all work queued so far on compute (an event),
 * and the reverse: the hand-offs around an overlapped collective. */
llmt_status llmt__cuda_comm_wait_compute(llmt__cuda_ctx *ctx);
llmt_status llmt__cuda_compute_wait_comm(llmt__cuda_ctx *ctx);
llmt_status llmt__cuda_sync(llmt__cuda_ctx *ctx); /* both streams */
/* Surfaces an asynchronous kernel error (cudaGetLastError). */
llmt_status llmt__cuda_check(llmt__cuda_ctx *ctx, const char *what);

/* Caching device allocator (per context; blocks are reused on the compute
 * stream's order, so a freed block may be handed out again at once for work
 * queued after the free). Sizes round up to 512 B (small) or 2 MiB (large).
 * On cudaMalloc failure the cache is released and the call retried. */
llmt_status llmt__cuda_alloc(llmt__cuda_ctx *ctx, void **p, size_t bytes);
void llmt__cuda_free(llmt__cuda_ctx *ctx, void *p);
/* Return cached free blocks to the driver. */
void llmt__cuda_cache_release(llmt__cuda_ctx *ctx);
typedef struct llmt__cuda_mem_stats {
    size_t in_use, cached, peak_in_use, device_bytes;
    uint64_t mallocs, hits;
} llmt__cuda_mem_stats;
void llmt__cuda_mem_stats_get(const llmt__cuda_ctx *ctx,
                              llmt__cuda_mem_stats *out);
/* Pinned host memory (checkpoint snapshots, staging). */
llmt_status llmt__cuda_host_alloc(llmt__cuda_ctx *ctx, void **p, size_t bytes);
void llmt__cuda_host_free(void *p);
/* Copies on the compute stream; h2d/d2h synchronise (test and setup use). */
llmt_status llmt__cuda_h2d(llmt__cuda_ctx *ctx, void *dst, const void *src,
                           size_t bytes);
llmt_status llmt__cuda_d2h(llmt__cuda_ctx *ctx, void *dst, const void *src,
                           size_t bytes);
llmt_status llmt__cuda_d2d(llmt__cuda_ctx *ctx, void *dst, const void *src,
                           size_t bytes);
llmt_status llmt__cuda_memset0(llmt__cuda_ctx *ctx, void *dst, size_t bytes);
/* Every byte 0xff (NaN in fp32 and bf16), on the compute stream. */
llmt_status llmt__cuda_fill_nan(llmt__cuda_ctx *ctx, void *dst, size_t bytes);
/* Times `fn(arg)` queued on the compute stream with events: `iters` calls
 * after `warmup`, returning per-call milliseconds in ms[iters]. */
llmt_status llmt__cuda_time(llmt__cuda_ctx *ctx, void (*fn)(void *), void *arg,
                            int warmup, int iters, float *ms);

/* ---- GEMM through cuBLASLt (cuda/gemm/gemm.cu) --------------------------- */

/* llmt__gemm_epi, llmt__gemm_type and llmt__gemm_args: lib/exec/dev.h */
void llmt__gemm_args_init(llmt__gemm_args *g);
llmt_status llmt__cuda_gemm(llmt__cuda_ctx *ctx, const llmt__gemm_args *g);
/* Heuristic cache statistics: (lookups, misses). */
void llmt__cuda_gemm_cache_stats(const llmt__cuda_ctx *ctx, uint64_t *lookups,
                                 uint64_t *misses);

/* ---- kernels (cuda/kernels/) ---------------------------------------------- */

/* out[B*T,C] = wte[tok] (+ wpe[t]); wpe may be NULL. */
llmt_status llmt__cuda_embedding_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                     const int32_t *tok, const llmt__bf16 *wte,
                                     const llmt__bf16 *wpe, int B, int T, int C);
/* dwte[V,C] += scatter(dout); dwpe[T,C] += sum over b (dwpe may be NULL). */
llmt_status llmt__cuda_embedding_bwd(llmt__cuda_ctx *ctx, float *dwte,
                                     float *dwpe, const llmt__bf16 *dout,
                                     const int32_t *tok, int B, int T, int C);

/* mean/rstd [N] fp32 outputs (mean unused by rmsnorm). b may be NULL. */
llmt_status llmt__cuda_layernorm_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                     float *mean, float *rstd,
                                     const llmt__bf16 *inp, const llmt__bf16 *w,
                                     const llmt__bf16 *b, int N, int C,
                                     float eps);
/* dinp (bf16) += ; dw, db (fp32) += ; db may be NULL. */
llmt_status llmt__cuda_layernorm_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dinp,
                                     float *dw, float *db,
                                     const llmt__bf16 *dout,
                                     const llmt__bf16 *inp, const llmt__bf16 *w,
                                     const float *mean, const float *rstd,
                                     int N, int C);
llmt_status llmt__cuda_rmsnorm_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                   float *rstd, const llmt__bf16 *inp,
                                   const llmt__bf16 *w, int N, int C, float eps);
llmt_status llmt__cuda_rmsnorm_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dinp,
                                   float *dw, const llmt__bf16 *dout,
                                   const llmt__bf16 *inp, const llmt__bf16 *w,
                                   const float *rstd, int N, int C);

/* The norms' fast-path variants, to be measured against the default
 * (0): kind 0 the forward (1: two rows a warp, up to C 1024), kind 1 the
 * backward (0: dinp loaded with inp and dout, before the reductions; 1:
 * dinp read again in the second pass; 2: up to C 768, the weight-gradient
 * sums in registers). Same results bit for bit; another kind or index is
 * refused. _cfgs: how many of a kind (0 for another kind). */
int llmt__cuda_norm_cfgs(int kind);
llmt_status llmt__cuda_norm_set_cfg(llmt__cuda_ctx *ctx, int kind, int idx);

/* tanh GELU; bwd: dinp += gelu'(inp) * dout. */
llmt_status llmt__cuda_gelu_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                const llmt__bf16 *inp, size_t n);
llmt_status llmt__cuda_gelu_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dinp,
                                const llmt__bf16 *inp, const llmt__bf16 *dout,
                                size_t n);
/* dx[i] *= gelu'(pre[i]) in place (the fp8 path's DGELU). */
llmt_status llmt__cuda_gelu_bwd_mul(llmt__cuda_ctx *ctx, llmt__bf16 *dx, const llmt__bf16 *pre,
                                    size_t n);
/* out = silu(gate) * up; bwd accumulates into dgate, dup. */
llmt_status llmt__cuda_swiglu_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                  const llmt__bf16 *gate, const llmt__bf16 *up,
                                  size_t n);
/* dgate = dout * d silu(gate) up, dup = dout * silu(gate): written (from 0),
 * not added to; h (NULL: not written) = swiglu_fwd's out; dgate may alias
 * dout. */
llmt_status llmt__cuda_swiglu_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dgate, llmt__bf16 *dup,
                                  llmt__bf16 *h, const llmt__bf16 *dout, const llmt__bf16 *gate,
                                  const llmt__bf16 *up, size_t n);
/* out = a + b (out may alias a). */
llmt_status llmt__cuda_residual_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                    const llmt__bf16 *a, const llmt__bf16 *b,
                                    size_t n);
/* x[N,C] += bias[C] */
llmt_status llmt__cuda_bias_add(llmt__cuda_ctx *ctx, llmt__bf16 *x,
                                const llmt__bf16 *bias, int N, int C);
/* dbias[C] += sum over rows of dout[N,C] (deterministic column sums). */
llmt_status llmt__cuda_bias_bwd(llmt__cuda_ctx *ctx, float *dbias,
                                const llmt__bf16 *dout, int N, int C);
/* In place on nh heads of hd per row, rows B*T of stride `stride` elements,
 * position = row % T; inverse=1 is the backward. */
llmt_status llmt__cuda_rope(llmt__cuda_ctx *ctx, llmt__bf16 *x, int B, int T,
                            int nh, int hd, size_t stride, float theta,
                            int inverse);

/* Flash-style causal attention (online softmax; no T x T matrix). Tensor
 * cores (wmma bf16) when hd is 32, 64 or 128, qs % 8 == 0 and the pointers
 * are 16-byte aligned, CUDA-core fp32 kernels otherwise. q, k, v
 * rows of B*T with stride qs elements; q has nh heads, k/v nkv heads (head h
 * reads kv head h/(nh/nkv)); hd <= 128 and even. out [B*T, nh*hd] packed;
 * lse [B, nh, T] fp32 log-sum-exp kept for the backward. */
llmt_status llmt__cuda_attention_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                     float *lse, const llmt__bf16 *q,
                                     const llmt__bf16 *k, const llmt__bf16 *v,
                                     size_t qs, int B, int T, int nh, int nkv,
                                     int hd);
/* dq, dk, dv (stride qs) are OVERWRITTEN (they are activation gradients of
 * a fresh qkv buffer); uses B*nh*T floats of scratch from the allocator. */
llmt_status llmt__cuda_attention_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dq,
                                     llmt__bf16 *dk, llmt__bf16 *dv,
                                     const llmt__bf16 *dout,
                                     const llmt__bf16 *out, const float *lse,
                                     const llmt__bf16 *q, const llmt__bf16 *k,
                                     const llmt__bf16 *v, size_t qs, int B,
                                     int T, int nh, int nkv, int hd);

/* Fused softmax cross-entropy over logits[N, Vp] (first V columns real):
 * losses[n] = logsumexp - logit[target] (0 where target < 0), and, when
 * dloss != 0, logits are overwritten in place by (softmax - onehot) * dloss
 * (0 in padded columns and ignored rows): one read, one write. */
llmt_status llmt__cuda_softmax_xent(llmt__cuda_ctx *ctx, float *losses,
                                    llmt__bf16 *logits, const int32_t *targets,
                                    int N, int V, int Vp, float dloss);

/* The vocabulary split of tensor parallelism (cuda/kernels/vocab_part.cu;
 * contracts: lib/exec/dev.h's embedding_part_* and xent_part_*): this rank
 * holds vocabulary rows [lo, lo + Vl) of wte and the logits' columns
 * [lo, lo + Vl), the first nv real. Roundings as lib/exec/vocab_part.c's
 * bf16 path (the emulation). embedding_part_bwd uses atomics outside
 * deterministic mode, as embedding_bwd. */
llmt_status llmt__cuda_embedding_part_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                          const int32_t *tok, const llmt__bf16 *wte,
                                          const llmt__bf16 *wpe, int B, int T, int C, int lo,
                                          int Vl);
llmt_status llmt__cuda_embedding_part_bwd(llmt__cuda_ctx *ctx, float *dwte, float *dwpe,
                                          const llmt__bf16 *dout, const int32_t *tok, int B,
                                          int T, int C, int lo, int Vl);
llmt_status llmt__cuda_xent_part_max(llmt__cuda_ctx *ctx, float *mx, const llmt__bf16 *logits,
                                     int N, int Vl, int nv);
llmt_status llmt__cuda_xent_part_sum(llmt__cuda_ctx *ctx, float *st, const llmt__bf16 *logits,
                                     const float *mx, const int32_t *targets, int N, int Vl,
                                     int nv, int lo);
llmt_status llmt__cuda_xent_part_fin(llmt__cuda_ctx *ctx, float *losses, llmt__bf16 *logits,
                                     const float *mx, const float *st, const int32_t *targets,
                                     int N, int Vl, int nv, int lo, float dloss);

/* Context parallelism's attention pieces (cuda/kernels/attn_cp.cu): the
 * device twins of lib/exec/attn_cp.h's llmt__attn_cp_rope / _fwd /
 * _delta / _bwd / _rows with bf16 storage, same contracts (positions,
 * running fp32 output and log-sum-exp, accumulating fp32 dq and dk/dv);
 * qpos, kpos and pos are device arrays. One thread per row, the host's
 * operations in its order: a reference on the device, not a fast kernel.
 * The CUDA op table's attn_cp_* (cuda/exec/dev_cuda.c); first ran on an
 * H200 on 2026-11-26 (gpu-cp-ops, gpu-cp-engine). */
llmt_status llmt__cuda_attn_cp_rope(llmt__cuda_ctx *ctx, llmt__bf16 *x, int B, int T, int nh,
                                    int hd, size_t stride, float theta, int inverse,
                                    const int32_t *pos);
llmt_status llmt__cuda_attn_cp_fwd(llmt__cuda_ctx *ctx, float *o, float *lse,
                                   const llmt__bf16 *q, size_t qs, const llmt__bf16 *kv,
                                   size_t kvs, int B, int Tq, int Tk, int nh, int nkv, int hd,
                                   const int32_t *qpos, const int32_t *kpos);
llmt_status llmt__cuda_attn_cp_delta(llmt__cuda_ctx *ctx, float *D, const llmt__bf16 *dout,
                                     const llmt__bf16 *out, int B, int T, int nh, int hd);
llmt_status llmt__cuda_attn_cp_bwd(llmt__cuda_ctx *ctx, float *dq, float *dkv, const float *D,
                                   const float *lse, const llmt__bf16 *dout,
                                   const llmt__bf16 *q, size_t qs, const llmt__bf16 *kv,
                                   size_t kvs, int B, int Tq, int Tk, int nh, int nkv, int hd,
                                   const int32_t *qpos, const int32_t *kpos);
llmt_status llmt__cuda_attn_cp_rows(llmt__cuda_ctx *ctx, llmt__bf16 *dst, size_t ds,
                                    const void *src, size_t ss, int src_f32, size_t rows,
                                    size_t cols);

/* AdamW on fp32 master weights; writes the bf16 copy (RNE) when param_bf16
 * is not NULL. grad fp32, scaled by grad_scale (clipping). t is 1-based. */
llmt_status llmt__cuda_adamw(llmt__cuda_ctx *ctx, float *master,
                             llmt__bf16 *param_bf16, const float *grad,
                             float *m, float *v, size_t n, float lr,
                             float beta1, float beta2, float eps, float wd,
                             float grad_scale, int64_t t);
/* out[0] (device fp32) = sum of x[i]^2 over several arrays, fixed order. */
llmt_status llmt__cuda_sumsq(llmt__cuda_ctx *ctx, float *out,
                             const float *const *xs, const size_t *ns,
                             int count);
/* out[0] (device fp32) = sum of x[i] (fixed order). */
llmt_status llmt__cuda_sum(llmt__cuda_ctx *ctx, float *out, const float *x,
                           size_t n);
/* out[0] (device fp32) = max |x[i]| of bf16 x (fp8 scaling). */
llmt_status llmt__cuda_amax(llmt__cuda_ctx *ctx, float *out,
                            const llmt__bf16 *x, size_t n);
/* y = fp8(x * scale[0]) with saturation; e5m2=0 gives E4M3. */
llmt_status llmt__cuda_quantize_fp8(llmt__cuda_ctx *ctx, uint8_t *y,
                                    const llmt__bf16 *x, const float *scale,
                                    size_t n, int e5m2);
/* fp8 operands: for bf16 x[R,C], y[R,C] = fp8(x * scale[0]) and yt[C,R]
 * its transpose (either may be NULL); quantize_fp8's encoding; amax[0] =
 * max |x| from the same read (NULL: not computed; NaN skipped, as
 * llmt__cuda_amax). C a multiple of 4, R too when yt is written; x 8-byte,
 * y and yt 4-byte aligned. */
llmt_status llmt__cuda_cast_transpose_fp8(llmt__cuda_ctx *ctx, uint8_t *y, uint8_t *yt,
                                          float *amax, const llmt__bf16 *x, const float *scale,
                                          int R, int C, int e5m2);
/* bf16 <-> fp32 conversions on the device. */
llmt_status llmt__cuda_f32_to_bf16(llmt__cuda_ctx *ctx, llmt__bf16 *y,
                                   const float *x, size_t n);
llmt_status llmt__cuda_bf16_to_f32(llmt__cuda_ctx *ctx, float *y,
                                   const llmt__bf16 *x, size_t n);

#ifdef __cplusplus
}
#endif

#endif
