/* Context parallelism's attention on host memory: see attn_cp.h. One plain
 * C reference for both host backends (the storage type a flag), fp32
 * accumulation; the single-rank attention ops of dev_cpu.c and
 * dev_emul.c are what test/train/test_attn_cp.c checks it against. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/attn_cp.h"
#include "exec/dev.h"

#define HDMAX 128

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
static inline float dot(int bf16, const void *a, size_t ai, const void *b, size_t bi, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += ld(bf16, a, ai + i) * ld(bf16, b, bi + i);
    return s;
}

void llmt__attn_cp_rope(int bf16, void *x, int B, int T, int nh, int hd, size_t stride,
                        float theta, int inverse, const int32_t *pos)
{
    int half = hd / 2;
#pragma omp parallel for
    for (int r = 0; r < B * T; r++) {
        float p = (float)pos[r % T];
        size_t row = (size_t)r * stride;
        for (int i = 0; i < half; i++) {
            float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
            float a = p * inv_freq, c = cosf(a), s = sinf(a);
            if (inverse)
                s = -s;
            for (int h = 0; h < nh; h++) {
                size_t o = row + (size_t)h * hd;
                float x1 = ld(bf16, x, o + i), x2 = ld(bf16, x, o + i + half);
                st(bf16, x, o + i, x1 * c - x2 * s);
                st(bf16, x, o + i + half, x2 * c + x1 * s);
            }
        }
    }
}

void llmt__attn_cp_fwd(int bf16, float *o, float *lse, const void *q, size_t qs, const void *kv,
                       size_t kvs, int B, int Tq, int Tk, int nh, int nkv, int hd,
                       const int32_t *qpos, const int32_t *kpos)
{
    const int group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    const long long total = (long long)B * nh * Tq;
    /* one pass over the keys, rescaling the partial sums when the max
     * grows (no per-row score buffer) */
#pragma omp parallel for schedule(static)
    for (long long idx = 0; idx < total; idx++) {
        int t = (int)(idx % Tq), h = (int)(idx / Tq % nh), b = (int)(idx / Tq / nh);
        int kh = h / group;
        size_t qi = ((size_t)b * Tq + t) * qs + (size_t)h * hd;
        float m = -INFINITY, l = 0.0f, acc[HDMAX];
        for (int i = 0; i < hd; i++)
            acc[i] = 0.0f;
        for (int j = 0; j < Tk; j++) {
            if (kpos[j] > qpos[t])
                continue;
            size_t ki = ((size_t)b * Tk + j) * kvs + (size_t)kh * hd;
            size_t vi = ki + (size_t)nkv * hd;
            float sc = dot(bf16, q, qi, kv, ki, hd) * scale;
            if (sc > m) {
                float r = expf(m - sc);
                l *= r;
                for (int i = 0; i < hd; i++)
                    acc[i] *= r;
                m = sc;
            }
            float p = expf(sc - m);
            l += p;
            for (int i = 0; i < hd; i++)
                acc[i] += p * ld(bf16, kv, vi + i);
        }
        if (m == -INFINITY)
            continue; /* no key of this block is visible */
        /* fold the block (lse m + log l) into the running (L, orow) */
        float *L = &lse[((size_t)b * nh + h) * Tq + t];
        float Lb = m + logf(l);
        float Ln = *L > Lb ? *L + log1pf(expf(Lb - *L)) : Lb + log1pf(expf(*L - Lb));
        float wo = expf(*L - Ln), wb = expf(Lb - Ln) / l;
        float *orow = o + ((size_t)b * Tq + t) * nh * hd + (size_t)h * hd;
        for (int i = 0; i < hd; i++)
            orow[i] = orow[i] * wo + acc[i] * wb;
        *L = Ln;
    }
}

void llmt__attn_cp_delta(int bf16, float *D, const void *dout, const void *out, int B, int T,
                         int nh, int hd)
{
    const size_t nrow = (size_t)B * nh * T, orow = (size_t)nh * hd;
#pragma omp parallel for schedule(static)
    for (size_t idx = 0; idx < nrow; idx++) {
        size_t t = idx % T, h = idx / T % nh, b = idx / T / nh;
        size_t i0 = (b * T + t) * orow + h * hd;
        D[idx] = dot(bf16, dout, i0, out, i0, hd);
    }
}

void llmt__attn_cp_bwd(int bf16, float *dq, float *dkv, const float *D, const float *lse,
                       const void *dout, const void *q, size_t qs, const void *kv, size_t kvs,
                       int B, int Tq, int Tk, int nh, int nkv, int hd, const int32_t *qpos,
                       const int32_t *kpos)
{
    const int group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t orow = (size_t)nh * hd, kvrow = 2 * (size_t)nkv * hd;
    const size_t nq = (size_t)B * nh * Tq, nk = (size_t)B * nkv * Tk;
    /* dq: per query row over the block's visible keys */
#pragma omp parallel for schedule(static)
    for (size_t idx = 0; idx < nq; idx++) {
        int t = (int)(idx % Tq), h = (int)(idx / Tq % nh), b = (int)(idx / Tq / nh);
        int kh = h / group;
        size_t qi = ((size_t)b * Tq + t) * qs + (size_t)h * hd;
        size_t di = ((size_t)b * Tq + t) * orow + (size_t)h * hd;
        float Lt = lse[idx], Dt = D[idx], acc[HDMAX];
        for (int i = 0; i < hd; i++)
            acc[i] = 0.0f;
        for (int j = 0; j < Tk; j++) {
            if (kpos[j] > qpos[t])
                continue;
            size_t ki = ((size_t)b * Tk + j) * kvs + (size_t)kh * hd;
            size_t vi = ki + (size_t)nkv * hd;
            float p = expf(dot(bf16, q, qi, kv, ki, hd) * scale - Lt);
            float ds = p * (dot(bf16, dout, di, kv, vi, hd) - Dt);
            for (int i = 0; i < hd; i++)
                acc[i] += ds * ld(bf16, kv, ki + i);
        }
        float *dqr = dq + di;
        for (int i = 0; i < hd; i++)
            dqr[i] += acc[i] * scale;
    }
    /* dk, dv: per key row over the group's query heads and the queries
     * that see it */
#pragma omp parallel for schedule(static)
    for (size_t idx = 0; idx < nk; idx++) {
        int j = (int)(idx % Tk), kh = (int)(idx / Tk % nkv), b = (int)(idx / Tk / nkv);
        size_t ki = ((size_t)b * Tk + j) * kvs + (size_t)kh * hd;
        size_t vi = ki + (size_t)nkv * hd;
        float dka[HDMAX], dva[HDMAX];
        for (int i = 0; i < hd; i++)
            dka[i] = dva[i] = 0.0f;
        for (int h = kh * group; h < (kh + 1) * group; h++)
            for (int t = 0; t < Tq; t++) {
                if (kpos[j] > qpos[t])
                    continue;
                size_t r = ((size_t)b * nh + h) * Tq + t;
                size_t qi = ((size_t)b * Tq + t) * qs + (size_t)h * hd;
                size_t di = ((size_t)b * Tq + t) * orow + (size_t)h * hd;
                float p = expf(dot(bf16, q, qi, kv, ki, hd) * scale - lse[r]);
                float ds = p * (dot(bf16, dout, di, kv, vi, hd) - D[r]);
                for (int i = 0; i < hd; i++) {
                    dva[i] += p * ld(bf16, dout, di + i);
                    dka[i] += ds * ld(bf16, q, qi + i);
                }
            }
        float *dk = dkv + ((size_t)b * Tk + j) * kvrow + (size_t)kh * hd;
        float *dv = dk + (size_t)nkv * hd;
        for (int i = 0; i < hd; i++) {
            dk[i] += dka[i] * scale;
            dv[i] += dva[i];
        }
    }
}

void llmt__attn_cp_rows(int bf16, void *dst, size_t ds, const void *src, size_t ss, int src_f32,
                        size_t rows, size_t cols)
{
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            float v = src_f32 ? ((const float *)src)[r * ss + c] : ld(bf16, src, r * ss + c);
            st(bf16, dst, r * ds + c, v);
        }
}

/* The table entries: the same reference, the storage type fixed. */
/* clang-format off */
#define CP_TABLE(sfx, bf16)                                                                   \
    llmt_status llmt__attn_cp_rope_##sfx(llmt__dev *d, void *x, int B, int T, int nh, int hd, \
                                         size_t stride, float theta, int inverse,             \
                                         const int32_t *pos)                                  \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__attn_cp_rope(bf16, x, B, T, nh, hd, stride, theta, inverse, pos);               \
        return LLMT_OK;                                                                       \
    }                                                                                         \
    llmt_status llmt__attn_cp_fwd_##sfx(llmt__dev *d, float *o, float *lse, const void *q,    \
                                        size_t qs, const void *kv, size_t kvs, int B, int Tq, \
                                        int Tk, int nh, int nkv, int hd, const int32_t *qpos, \
                                        const int32_t *kpos)                                  \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__attn_cp_fwd(bf16, o, lse, q, qs, kv, kvs, B, Tq, Tk, nh, nkv, hd, qpos, kpos);  \
        return LLMT_OK;                                                                       \
    }                                                                                         \
    llmt_status llmt__attn_cp_delta_##sfx(llmt__dev *d, float *D, const void *dout,           \
                                          const void *out, int B, int T, int nh, int hd)      \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__attn_cp_delta(bf16, D, dout, out, B, T, nh, hd);                                \
        return LLMT_OK;                                                                       \
    }                                                                                         \
    llmt_status llmt__attn_cp_bwd_##sfx(llmt__dev *d, float *dq, float *dkv, const float *D,  \
                                        const float *lse, const void *dout, const void *q,    \
                                        size_t qs, const void *kv, size_t kvs, int B, int Tq, \
                                        int Tk, int nh, int nkv, int hd, const int32_t *qpos, \
                                        const int32_t *kpos)                                  \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__attn_cp_bwd(bf16, dq, dkv, D, lse, dout, q, qs, kv, kvs, B, Tq, Tk, nh, nkv,    \
                          hd, qpos, kpos);                                                    \
        return LLMT_OK;                                                                       \
    }                                                                                         \
    llmt_status llmt__attn_cp_rows_##sfx(llmt__dev *d, void *dst, size_t ds, const void *src, \
                                         size_t ss, int src_f32, size_t rows, size_t cols)    \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__attn_cp_rows(bf16, dst, ds, src, ss, src_f32, rows, cols);                      \
        return LLMT_OK;                                                                       \
    }

CP_TABLE(f32, 0)
CP_TABLE(bf16, 1)
/* clang-format on */
