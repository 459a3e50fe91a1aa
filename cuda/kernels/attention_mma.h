/* Causal attention on mma.sync tensor cores (cuda/kernels/attention_mma.cu),
 * the variant cuda/kernels/attention.cu's entry points take by default
 * where it applies (attn_scalar 0 or 3; ran on an H100 since 2026-11-26).
 * Same arguments, strides and outputs as llmt__cuda_attention_fwd/_bwd in
 * cuda/llmt_cuda.h. */
#ifndef LLMT_CUDA_KERNELS_ATTENTION_MMA_H
#define LLMT_CUDA_KERNELS_ATTENTION_MMA_H

#include <stdint.h>

#include "../llmt_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the variant takes this call: sm_80 or newer, hd 64 or 128,
 * qs % 8 == 0 and every pointer 16-byte aligned (cp.async and ldmatrix
 * move 16-byte rows). NULL pointers are ignored. */
int llmt__cuda_attn_mma_usable(int sm, int hd, size_t qs, const void *a, const void *b,
                               const void *c, const void *d);

llmt_status llmt__cuda_attn_mma_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out, float *lse,
                                    const llmt__bf16 *q, const llmt__bf16 *k,
                                    const llmt__bf16 *v, size_t qs, int B, int T, int nh,
                                    int nkv, int hd);

/* Dd: [B, nh, T] rowsum(dout * out), as attention.cu's attn_bwd_d_kernel
 * writes it. dq, dk, dv are overwritten. */
llmt_status llmt__cuda_attn_mma_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dq, llmt__bf16 *dk,
                                    llmt__bf16 *dv, const llmt__bf16 *dout, const float *lse,
                                    const float *Dd, const llmt__bf16 *q, const llmt__bf16 *k,
                                    const llmt__bf16 *v, size_t qs, int B, int T, int nh,
                                    int nkv, int hd);

/* The same backward as FlashAttention-2's (attn_scalar 5 outside
 * deterministic mode): one kernel per key block computes dK, dV and adds
 * its dS K to an fp32 [B, T, nh, hd] scratch (allocated here, zeroed on
 * the compute stream) by atomics, then a small kernel stores dq. Five
 * block products per (query tile, key tile) instead of seven, but the
 * order of dQ's sums varies from run to run: NOT deterministic. Ran on an
 * H100 (2026-11-27, gpu-kernels). */
llmt_status llmt__cuda_attn_mma_bwd_atomic(llmt__cuda_ctx *ctx, llmt__bf16 *dq, llmt__bf16 *dk,
                                           llmt__bf16 *dv, const llmt__bf16 *dout,
                                           const float *lse, const float *Dd,
                                           const llmt__bf16 *q, const llmt__bf16 *k,
                                           const llmt__bf16 *v, size_t qs, int B, int T, int nh,
                                           int nkv, int hd);

/* Tile configurations (tuning). Each kernel kind (0 forward, 1 dQ, 2
 * dK/dV, 3 dK/dV with dQ by atomics: llmt__cuda_attn_mma_bwd_atomic) has
 * a list per hd (64, 128); entry 0 is the default, and a
 * context takes entry idx of one kind and hd after set_cfg. Every entry
 * computes the same function (test_gpu_kernels holds each to the CPU
 * reference); the backward's entries give the same bits (the sums run in
 * the same order; kind 3's dQ only up to the order of its atomic adds),
 * the forward's differ in rounding (its online softmax rescales per key
 * tile). _cfgs: how many (0 for another hd or kind);
 * _cfg_name: a description into buf (1; 0 for no such entry); set_cfg
 * refuses an index out of range naming it. */
int llmt__cuda_attn_mma_cfgs(int hd, int kind);
int llmt__cuda_attn_mma_cfg_name(int hd, int kind, int idx, char *buf, size_t n);
llmt_status llmt__cuda_attn_mma_set_cfg(llmt__cuda_ctx *ctx, int hd, int kind, int idx);

/* How many fwd/bwd calls on ctx these kernels took (tests check that the
 * variant they asked for ran, not a fallback); _mmaq_: how many of the
 * backward calls took llmt__cuda_attn_mma_bwd_atomic (counted in both). */
uint64_t llmt__cuda_attn_mma_calls(const llmt__cuda_ctx *ctx);
uint64_t llmt__cuda_attn_mmaq_calls(const llmt__cuda_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif
