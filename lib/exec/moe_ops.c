/* The mixture-of-experts ops of the op table (dev.h: moe_gather,
 * moe_gather_bwd, moe_combine, moe_combine_bwd) on host memory, for the
 * fp32 CPU backend and the bf16 emulation: one plain C reference, the
 * storage type a flag, as vocab_part.c's. They move rows between the
 * tokens' order and the experts' packed order (lib/train/moe.h: packed
 * row r holds token tok[r]; token n's choice k went to packed row
 * row[n*K + k], -1 when dropped); the experts themselves are GEMMs and
 * SwiGLU of the table. Sums are fp32 in the order of lib/train/moe.c's
 * host loops (the combine over k, the input gradient over packed rows in
 * ascending order), one rounding at the store, so that the fp32 entries
 * are that code's arithmetic exactly and the bf16 ones round once per
 * stored element, as a GPU kernel of the same op would. */
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

void llmt__moe_op_gather(int bf16, void *out, const void *x, const int32_t *tok, int R, int C)
{
    size_t es = bf16 ? sizeof(llmt__bf16) : sizeof(float);
#pragma omp parallel for schedule(static) if ((size_t)R * C >= 65536)
    for (int r = 0; r < R; r++)
        memcpy((char *)out + (size_t)r * C * es, (const char *)x + (size_t)tok[r] * C * es,
               (size_t)C * es);
}

void llmt__moe_op_gather_bwd(int bf16, void *dx, const void *dxe, const int32_t *row, int N,
                             int K, int C)
{
#pragma omp parallel for schedule(static) if ((size_t)N * K * C >= 65536)
    for (int n = 0; n < N; n++) {
        const int32_t *rw = row + (size_t)n * K;
        for (int c = 0; c < C; c++) {
            float s = 0.0f;
            /* the token's rows in ascending packed order (K is small) */
            for (int32_t last = -1;;) {
                int32_t r = -1;
                for (int k = 0; k < K; k++)
                    if (rw[k] > last && (r < 0 || rw[k] < r))
                        r = rw[k];
                if (r < 0)
                    break;
                s += ld(bf16, dxe, (size_t)r * C + c);
                last = r;
            }
            st(bf16, dx, (size_t)n * C + c, s);
        }
    }
}

void llmt__moe_op_combine(int bf16, void *y, const void *ye, const int32_t *row,
                          const float *gate, int N, int K, int C)
{
#pragma omp parallel for schedule(static) if ((size_t)N * K * C >= 65536)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) {
                int32_t r = row[(size_t)n * K + k];
                if (r >= 0)
                    s += gate[(size_t)n * K + k] * ld(bf16, ye, (size_t)r * C + c);
            }
            st(bf16, y, (size_t)n * C + c, s);
        }
}

void llmt__moe_op_combine_bwd(int bf16, void *dye, float *dgate, const void *dy, const void *ye,
                              const int32_t *row, const float *gate, int N, int K, int C)
{
#pragma omp parallel for schedule(static) if ((size_t)N * K * C >= 65536)
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)n * K + k;
            int32_t r = row[i];
            double dg = 0;
            for (int c = 0; r >= 0 && c < C; c++) {
                float d = ld(bf16, dy, (size_t)n * C + c);
                st(bf16, dye, (size_t)r * C + c, gate[i] * d);
                dg += (double)d * ld(bf16, ye, (size_t)r * C + c);
            }
            dgate[i] = (float)dg;
        }
}

/* One expert's chain (llmt__moe_xargs), the per-expert gemm and swiglu
 * calls of lib/train/moe_dev.c in its order. */
static llmt_status xgemm(const llmt__dev_ops *t, llmt__dev *d, int ta, int tb, int M, int N,
                         int K, const void *A, const void *B, void *C, int cf32, float beta)
{
    llmt__gemm_args g =
        llmt__gemm_plain(t->store != LLMT_DTYPE_FP32, ta, tb, M, N, K, A, B, C, cf32, beta);
    return t->gemm(d, &g);
}

static llmt_status expert(const llmt__dev_ops *t, llmt__dev *d, const llmt__moe_xargs *a, int e)
{
    int rows = (int)a->nr[e], C = a->C, F = a->F;
    if (rows < 1)
        return LLMT_OK;
    size_t es = t->store == LLMT_DTYPE_FP32 ? sizeof(float) : sizeof(llmt__bf16);
    size_t r0 = (size_t)a->r0[e], wo = (size_t)e * F * C, m = (size_t)rows * F;
#define AT(p, i) ((char *)(p) + (i)*es)
    const void *xr = AT(a->xe, r0 * C), *w1 = AT(a->w1, wo), *w2 = AT(a->w2, wo),
               *w3 = AT(a->w3, wo);
    void *h1 = AT(a->h1, r0 * F), *h3 = AT(a->h3, r0 * F), *act = AT(a->act, r0 * F);
    llmt_status s;
    if (!a->bwd) {
        if ((s = xgemm(t, d, 0, 1, rows, F, C, xr, w1, h1, 0, 0.0f)) != LLMT_OK ||
            (s = xgemm(t, d, 0, 1, rows, F, C, xr, w3, h3, 0, 0.0f)) != LLMT_OK ||
            (s = t->swiglu_fwd(d, act, h1, h3, m)) != LLMT_OK)
            return s;
        return xgemm(t, d, 0, 1, rows, C, F, act, w2, AT(a->ye, r0 * C), 0, 0.0f);
    }
    const void *dr = AT(a->dye, r0 * C);
    void *dact = AT(a->dact, r0 * F), *d1 = AT(a->dh1, r0 * F), *d3 = AT(a->dh3, r0 * F),
         *dxr = AT(a->dxe, r0 * C);
#undef AT
    if ((s = xgemm(t, d, 1, 0, C, F, rows, dr, act, a->g2 + wo, 1, 1.0f)) != LLMT_OK ||
        (s = xgemm(t, d, 0, 0, rows, F, C, dr, w2, dact, 0, 0.0f)) != LLMT_OK ||
        (s = t->swiglu_bwd(d, d1, d3, NULL, dact, h1, h3, m)) != LLMT_OK ||
        (s = xgemm(t, d, 1, 0, F, C, rows, d1, xr, a->g1 + wo, 1, 1.0f)) != LLMT_OK ||
        (s = xgemm(t, d, 1, 0, F, C, rows, d3, xr, a->g3 + wo, 1, 1.0f)) != LLMT_OK ||
        (s = xgemm(t, d, 0, 0, rows, C, F, d1, w1, dxr, 0, 0.0f)) != LLMT_OK)
        return s;
    return xgemm(t, d, 0, 0, rows, C, F, d3, w3, dxr, 0, 1.0f);
}

llmt_status llmt__moe_op_experts(const llmt__dev_ops *t, llmt__dev *d, const llmt__moe_xargs *a)
{
    /* each expert's rows, weights and gradients are its own; each GEMM
     * runs whole on its thread (exec/cpu.c and the emulation split only
     * outside a parallel region), so every element is the serial loop's */
    llmt_status first = LLMT_OK;
    int bad = a->n;
#pragma omp parallel for schedule(dynamic, 1)
    for (int e = 0; e < a->n; e++) {
        llmt_status s = expert(t, d, a, e);
        if (s != LLMT_OK) {
#pragma omp critical(llmt_moe_experts)
            if (e < bad) { /* the first expert's failure, as the serial loop */
                bad = e;
                first = s;
            }
        }
    }
    return first;
}

/* The table entries of the fp32 CPU backend and the bf16 emulation. */
/* clang-format off */
#define MOE_TABLE(sfx, bf16)                                                                  \
    llmt_status llmt__moe_gather_##sfx(llmt__dev *d, void *out, const void *x,                \
                                       const int32_t *tok, int R, int C)                      \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__moe_op_gather(bf16, out, x, tok, R, C);                                         \
        return LLMT_OK;                                                                       \
    }                                                                                         \
    llmt_status llmt__moe_gather_bwd_##sfx(llmt__dev *d, void *dx, const void *dxe,           \
                                           const int32_t *row, int N, int K, int C)           \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__moe_op_gather_bwd(bf16, dx, dxe, row, N, K, C);                                 \
        return LLMT_OK;                                                                       \
    }                                                                                         \
    llmt_status llmt__moe_combine_##sfx(llmt__dev *d, void *y, const void *ye,                \
                                        const int32_t *row, const float *gate, int N, int K,  \
                                        int C)                                                \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__moe_op_combine(bf16, y, ye, row, gate, N, K, C);                                \
        return LLMT_OK;                                                                       \
    }                                                                                         \
    llmt_status llmt__moe_combine_bwd_##sfx(llmt__dev *d, void *dye, float *dgate,            \
                                            const void *dy, const void *ye,                   \
                                            const int32_t *row, const float *gate, int N,     \
                                            int K, int C)                                     \
    {                                                                                         \
        (void)d;                                                                              \
        llmt__moe_op_combine_bwd(bf16, dye, dgate, dy, ye, row, gate, N, K, C);               \
        return LLMT_OK;                                                                       \
    }

MOE_TABLE(f32, 0)
MOE_TABLE(bf16, 1)
/* clang-format on */
