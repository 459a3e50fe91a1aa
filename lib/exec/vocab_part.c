/* The vocabulary split of tensor parallelism on host memory (dev.h's
 * embedding_part_* and xent_part_*), for the fp32 CPU backend and the
 * bf16 emulation: one plain C reference, the storage type a flag. A rank
 * holds vocabulary rows [lo, lo + Vl) of the embedding and the same
 * columns of the logits; the cross-entropy is Megatron-LM's
 * vocab-parallel one: each rank reduces its columns to a row max, then to
 * a sum of exponentials and the target's logit, the group combines those
 * N (then 2N) floats, and nobody ever holds a full row of logits. Sums
 * are in double, as the single-rank softmax_xent's. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "exec/dev.h"

static inline float ld(int bf16, const void *p, size_t i)
{
    return bf16 ? llmt__bf16_to_f32(((const llmt__bf16 *)p)[i]) : ((const float *)p)[i];
}
static inline void st(int bf16, void *p, size_t i, float v)
{
    if (bf16)
        ((llmt__bf16 *)p)[i] = llmt__f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

void llmt__vp_embedding_fwd(int bf16, void *out, const int32_t *tok, const void *wte,
                            const void *wpe, int B, int T, int C, int lo, int Vl)
{
#pragma omp parallel for
    for (int r = 0; r < B * T; r++) {
        int t = tok[r] - lo;
        int in = t >= 0 && t < Vl;
        for (int c = 0; c < C; c++) {
            float e = in ? ld(bf16, wte, (size_t)t * C + c) : 0.0f;
            if (wpe)
                e += ld(bf16, wpe, (size_t)(r % T) * C + c);
            st(bf16, out, (size_t)r * C + c, e);
        }
    }
}

void llmt__vp_embedding_bwd(int bf16, float *dwte, float *dwpe, const void *dout,
                            const int32_t *tok, int B, int T, int C, int lo, int Vl)
{
    /* rows of the same token collide: split the work by channels */
#pragma omp parallel for
    for (int c = 0; c < C; c++)
        for (int r = 0; r < B * T; r++) {
            float d = ld(bf16, dout, (size_t)r * C + c);
            int t = tok[r] - lo;
            if (t >= 0 && t < Vl)
                dwte[(size_t)t * C + c] += d;
            if (dwpe)
                dwpe[(size_t)(r % T) * C + c] += d;
        }
}

void llmt__vp_xent_max(int bf16, float *mx, const void *logits, int N, int Vl, int nv)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float m = -FLT_MAX;
        for (int i = 0; i < nv; i++) {
            float x = ld(bf16, logits, (size_t)n * Vl + i);
            if (x > m)
                m = x;
        }
        mx[n] = m;
    }
}

void llmt__vp_xent_sum(int bf16, float *st_, const void *logits, const float *mx,
                       const int32_t *targets, int N, int Vl, int nv, int lo)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        double s = 0.0;
        for (int i = 0; i < nv; i++)
            s += expf(ld(bf16, logits, (size_t)n * Vl + i) - mx[n]);
        st_[n] = (float)s;
        int t = targets ? targets[n] - lo : -1;
        st_[N + n] = t >= 0 && t < nv ? ld(bf16, logits, (size_t)n * Vl + t) : 0.0f;
    }
}

void llmt__vp_xent_fin(int bf16, float *losses, void *logits, const float *mx, const float *st_,
                       const int32_t *targets, int N, int Vl, int nv, int lo, float dloss)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        int tg = targets ? targets[n] : -1;
        losses[n] = tg >= 0 ? (float)(log((double)st_[n]) + mx[n] - st_[N + n]) : 0.0f;
        if (dloss == 0.0f)
            continue;
        float inv = (float)(1.0 / (double)st_[n]);
        for (int i = 0; i < Vl; i++) {
            size_t k = (size_t)n * Vl + i;
            float gv = 0.0f;
            if (tg >= 0 && i < nv) {
                gv = expf(ld(bf16, logits, k) - mx[n]) * inv * dloss;
                if (tg - lo == i)
                    gv -= dloss;
            }
            st(bf16, logits, k, gv);
        }
    }
}

/* The table entries of the fp32 CPU backend and the bf16 emulation: the
 * same reference, the storage type fixed (the backend's state unused). */
/* clang-format off */
#define VP_TABLE(sfx, bf16)                                                                   \
    llmt_status llmt__vp_embedding_part_fwd_##sfx(llmt__dev *d, void *out, const int32_t *tok, \
                                                  const void *wte, const void *wpe, int B,     \
                                                  int T, int C, int lo, int Vl)                \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__vp_embedding_fwd(bf16, out, tok, wte, wpe, B, T, C, lo, Vl);                    \
        return LLMT_OK;                                                                       \
    }                                                                                         \
    llmt_status llmt__vp_embedding_part_bwd_##sfx(llmt__dev *d, float *dwte, float *dwpe,      \
                                                  const void *dout, const int32_t *tok, int B, \
                                                  int T, int C, int lo, int Vl)                \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__vp_embedding_bwd(bf16, dwte, dwpe, dout, tok, B, T, C, lo, Vl);                 \
        return LLMT_OK;                                                                       \
    }                                                                                         \
    llmt_status llmt__vp_xent_part_max_##sfx(llmt__dev *d, float *mx, const void *logits,      \
                                             int N, int Vl, int nv)                            \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__vp_xent_max(bf16, mx, logits, N, Vl, nv);                                       \
        return LLMT_OK;                                                                       \
    }                                                                                         \
    llmt_status llmt__vp_xent_part_sum_##sfx(llmt__dev *d, float *st, const void *logits,      \
                                             const float *mx, const int32_t *targets, int N,   \
                                             int Vl, int nv, int lo)                           \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__vp_xent_sum(bf16, st, logits, mx, targets, N, Vl, nv, lo);                      \
        return LLMT_OK;                                                                       \
    }                                                                                         \
    llmt_status llmt__vp_xent_part_fin_##sfx(llmt__dev *d, float *losses, void *logits,        \
                                             const float *mx, const float *st,                 \
                                             const int32_t *targets, int N, int Vl, int nv,    \
                                             int lo, float dloss)                              \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__vp_xent_fin(bf16, losses, logits, mx, st, targets, N, Vl, nv, lo, dloss);       \
        return LLMT_OK;                                                                       \
    }

VP_TABLE(f32, 0)
VP_TABLE(bf16, 1)
/* clang-format on */
