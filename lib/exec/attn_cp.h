/* Context parallelism's attention pieces on host memory (attn_cp.c): the
 * plain C reference for the fp32 CPU backend and the bf16 emulation, the
 * storage type a flag (bf16 = 1: q, k, v, out, dout and x are bf16; the
 * accumulators are fp32 either way).
 *
 * Under context parallelism a rank holds some rows of every sequence, at
 * global positions it is told (qpos, kpos: per-sequence position of each
 * local row, the same for every sequence of the micro-batch). Attention
 * of its queries is computed block by block against the keys and values
 * of each rank (its own and the others', exchanged by lib/train/cp.c),
 * causal on the global positions (key j is seen by query t when kpos[j]
 * <= qpos[t]), and the blocks are merged with the online softmax: each
 * block's output and log-sum-exp fold into the running ones, so the
 * result is softmax attention over all the keys whatever the order of
 * the blocks (up to fp32 rounding). The backward is flash attention's
 * from the final output and log-sum-exp, one block at a time: dq sums
 * over the blocks here, a block's dk and dv go back to its owner. */
#ifndef LLMT_EXEC_ATTN_CP_H
#define LLMT_EXEC_ATTN_CP_H

#include <stddef.h>
#include <stdint.h>

#include "exec/dev.h"

/* RoPE in place (rotate-half pairs (i, i + hd/2), as dev.h's rope) on nh
 * heads of B*T rows of stride `stride`, row r at position pos[r % T];
 * inverse = 1 is the backward. */
void llmt__attn_cp_rope(int bf16, void *x, int B, int T, int nh, int hd, size_t stride,
                        float theta, int inverse, const int32_t *pos);

/* One key/value block into the running attention: queries q (B*Tq rows
 * of stride qs, nh heads of hd), keys at kv and values at kv + nkv*hd
 * (B*Tk rows of stride kvs; query head h reads kv head h / (nh / nkv)).
 * o [B*Tq, nh*hd] fp32 and lse [B, nh, Tq] fp32 are the running output
 * and log-sum-exp: start them at 0 and -INFINITY. A query row that sees
 * no key of the block is left as it was. */
void llmt__attn_cp_fwd(int bf16, float *o, float *lse, const void *q, size_t qs, const void *kv,
                       size_t kvs, int B, int Tq, int Tk, int nh, int nkv, int hd,
                       const int32_t *qpos, const int32_t *kpos);

/* D[b, h, t] = sum over the head's hd of dout * out (both [B*T, nh*hd],
 * storage type): the backward's per-row term, once per layer. */
void llmt__attn_cp_delta(int bf16, float *D, const void *dout, const void *out, int B, int T,
                         int nh, int hd);

/* One block's backward, from the final lse and D: dq [B*Tq, nh*hd] fp32
 * and dkv [B*Tk, 2*nkv*hd] fp32 (dk then dv per row) ACCUMULATE. dout
 * [B*Tq, nh*hd] is packed, storage type. */
void llmt__attn_cp_bwd(int bf16, float *dq, float *dkv, const float *D, const float *lse,
                       const void *dout, const void *q, size_t qs, const void *kv, size_t kvs,
                       int B, int Tq, int Tk, int nh, int nkv, int hd, const int32_t *qpos,
                       const int32_t *kpos);

/* rows x cols between strided host arrays: src fp32 (src_f32) or
 * storage, dst storage; rounds to bf16 when bf16 = 1. */
void llmt__attn_cp_rows(int bf16, void *dst, size_t ds, const void *src, size_t ss, int src_f32,
                        size_t rows, size_t cols);

/* The same pieces as op-table entries (dev.h attn_cp_*) of the two host
 * backends, the storage type fixed: _f32 for the fp32 CPU backend, _bf16
 * for the emulation (the backend's context unused). */
/* clang-format off */
#define LLMT__CP_TABLE_DECL(sfx)                                                              \
    llmt_status llmt__attn_cp_rope_##sfx(llmt__dev *d, void *x, int B, int T, int nh, int hd, \
                                         size_t stride, float theta, int inverse,             \
                                         const int32_t *pos);                                 \
    llmt_status llmt__attn_cp_fwd_##sfx(llmt__dev *d, float *o, float *lse, const void *q,    \
                                        size_t qs, const void *kv, size_t kvs, int B, int Tq, \
                                        int Tk, int nh, int nkv, int hd, const int32_t *qpos, \
                                        const int32_t *kpos);                                 \
    llmt_status llmt__attn_cp_delta_##sfx(llmt__dev *d, float *D, const void *dout,           \
                                          const void *out, int B, int T, int nh, int hd);     \
    llmt_status llmt__attn_cp_bwd_##sfx(llmt__dev *d, float *dq, float *dkv, const float *D,  \
                                        const float *lse, const void *dout, const void *q,    \
                                        size_t qs, const void *kv, size_t kvs, int B, int Tq, \
                                        int Tk, int nh, int nkv, int hd, const int32_t *qpos, \
                                        const int32_t *kpos);                                 \
    llmt_status llmt__attn_cp_rows_##sfx(llmt__dev *d, void *dst, size_t ds, const void *src, \
                                         size_t ss, int src_f32, size_t rows, size_t cols);
LLMT__CP_TABLE_DECL(f32)
LLMT__CP_TABLE_DECL(bf16)
/* clang-format on */

#endif
