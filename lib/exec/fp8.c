/* fp8 formats, delayed scaling and per-block quantisation on the host; see
 * fp8.h for the definitions and the recipes' formulas. */
#include "exec/fp8.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* One format: exponent bias, mantissa bits, smallest unbiased exponent, the
 * code of the largest finite value. */
typedef struct fmt {
    int bias, mbits, emin;
    uint8_t maxcode;
} fmt;

static const fmt E4M3 = {7, 3, -6, 0x7E};
static const fmt E5M2 = {15, 2, -14, 0x7B};

static const fmt *format(int e5m2)
{
    return e5m2 ? &E5M2 : &E4M3;
}

float llmt__fp8_max(int e5m2)
{
    return e5m2 ? LLMT__FP8_E5M2_MAX : LLMT__FP8_E4M3_MAX;
}

uint8_t llmt__fp8_encode(float x, int e5m2)
{
    const fmt *f = format(e5m2);
    if (isnan(x))
        return 0x7F;
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (a >= llmt__fp8_max(e5m2)) /* includes inf; everything past max */
        return sign | f->maxcode;  /* rounds to max or beyond it */
    if (a == 0.0f)
        return sign;
    int ex;
    frexpf(a, &ex);
    int e = ex - 1; /* a in [2^e, 2^(e+1)) */
    if (e < f->emin)
        e = f->emin; /* subnormal: the quantum stops shrinking */
    /* t = a / quantum, exact (a power-of-two scaling of a normal result);
     * below 2^(mbits+1), so n fits and the rounding is done by hand to be
     * independent of the FP rounding mode. */
    float t = ldexpf(a, f->mbits - e);
    float fl = floorf(t);
    float r = t - fl;
    unsigned n = (unsigned)fl;
    if (r > 0.5f || (r == 0.5f && (n & 1u)))
        n++;
    unsigned implicit = 1u << f->mbits;
    unsigned code;
    if (n < implicit) {
        code = n; /* subnormal (e == emin), or zero */
    } else {
        if (n == 2 * implicit) { /* rounded up into the next binade */
            n = implicit;
            e++;
        }
        code = ((unsigned)(e + f->bias) << f->mbits) | (n - implicit);
    }
    if (code > f->maxcode)
        code = f->maxcode;
    return (uint8_t)(sign | code);
}

float llmt__fp8_decode(uint8_t b, int e5m2)
{
    const fmt *f = format(e5m2);
    float s = (b & 0x80) ? -1.0f : 1.0f;
    unsigned mmask = (1u << f->mbits) - 1u;
    unsigned m = b & mmask;
    unsigned ef = (b & 0x7Fu) >> f->mbits;
    unsigned etop = (0x7Fu >> f->mbits); /* all-ones exponent field */
    if (e5m2 && ef == etop)
        return m ? NAN : s * INFINITY;
    if (!e5m2 && (b & 0x7F) == 0x7F)
        return NAN;
    if (ef == 0)
        return s * ldexpf((float)m, f->emin - f->mbits);
    return s * ldexpf((float)(m | (1u << f->mbits)),
                      (int)ef - f->bias - f->mbits);
}

int llmt__fp8_format_e5m2(int format, int is_grad)
{
    return format == LLMT__FP8_FORMAT_HYBRID && is_grad;
}

/* ------------------------------------------------------ delayed scaling */

struct llmt__fp8_delayed {
    llmt_context *ctx;
    int n, history, margin, algo;
    float *hist;          /* [n][history], a ring per tensor */
    int *len, *head;      /* filled entries, next slot to write */
    float *scale, *scale_inv;
    unsigned char *e5m2;
};

float llmt__fp8_scale_from_amax(float amax, int e5m2, int margin, float prev)
{
    if (!(amax > 0.0f) || !isfinite(amax))
        return prev;
    float s = ldexpf(llmt__fp8_max(e5m2) / amax, -margin);
    return isinf(s) ? FLT_MAX : s;
}

static void delayed_free(llmt__fp8_delayed *d)
{
    llmt_context *ctx = d->ctx;
    size_t n = (size_t)d->n;
    llmt__free(ctx, d->hist, n * (size_t)d->history * sizeof(float));
    llmt__free(ctx, d->len, n * sizeof(int));
    llmt__free(ctx, d->head, n * sizeof(int));
    llmt__free(ctx, d->scale, n * sizeof(float));
    llmt__free(ctx, d->scale_inv, n * sizeof(float));
    llmt__free(ctx, d->e5m2, n);
    llmt__free(ctx, d, sizeof *d);
}

llmt_status llmt__fp8_delayed_create(llmt_context *ctx, int n, int history,
                                     int margin, int algo,
                                     const unsigned char *e5m2,
                                     llmt__fp8_delayed **out)
{
    llmt_err *e = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(e, "fp8: delayed_create", out);
    *out = NULL;
    if (n < 1)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "fp8: delayed_create: n=%d must be >= 1", n);
    if (history < 1 || history > 1024)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "fp8: delayed_create: history=%d must be in "
                             "[1, 1024]", history);
    if (margin < 0 || margin > 16)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "fp8: delayed_create: margin=%d must be in "
                             "[0, 16]", margin);
    if (algo != LLMT__FP8_AMAX_MAX && algo != LLMT__FP8_AMAX_MOST_RECENT)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "fp8: delayed_create: algo=%d is not max (0) or "
                             "most_recent (1)", algo);
    llmt__fp8_delayed *d = llmt__calloc(ctx, 1, sizeof *d);
    if (!d)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "fp8: out of memory");
    size_t nn = (size_t)n;
    d->ctx = ctx;
    d->n = n;
    d->history = history;
    d->margin = margin;
    d->algo = algo;
    d->hist = llmt__calloc(ctx, nn * (size_t)history, sizeof(float));
    d->len = llmt__calloc(ctx, nn, sizeof(int));
    d->head = llmt__calloc(ctx, nn, sizeof(int));
    d->scale = llmt__calloc(ctx, nn, sizeof(float));
    d->scale_inv = llmt__calloc(ctx, nn, sizeof(float));
    d->e5m2 = llmt__calloc(ctx, nn, 1);
    if (!d->hist || !d->len || !d->head || !d->scale || !d->scale_inv ||
        !d->e5m2) {
        delayed_free(d);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "fp8: out of memory");
    }
    for (int i = 0; i < n; i++) {
        d->scale[i] = d->scale_inv[i] = 1.0f;
        d->e5m2[i] = e5m2 && e5m2[i];
    }
    *out = d;
    return LLMT_OK;
}

void llmt__fp8_delayed_destroy(llmt__fp8_delayed *d)
{
    if (d)
        delayed_free(d);
}

int llmt__fp8_delayed_update(llmt__fp8_delayed *d, const float *amax_now)
{
    if (!d || !amax_now)
        return -1;
    int bad = 0, H = d->history;
    for (int i = 0; i < d->n; i++) {
        float a = amax_now[i];
        if (!isfinite(a) || a < 0.0f) {
            bad++;
            continue;
        }
        float *h = d->hist + (size_t)i * (size_t)H;
        h[d->head[i]] = a;
        d->head[i] = (d->head[i] + 1) % H;
        if (d->len[i] < H)
            d->len[i]++;
        float use = a;
        if (d->algo == LLMT__FP8_AMAX_MAX)
            for (int j = 0; j < d->len[i]; j++)
                use = h[j] > use ? h[j] : use;
        d->scale[i] = llmt__fp8_scale_from_amax(use, d->e5m2[i], d->margin,
                                                d->scale[i]);
        d->scale_inv[i] = 1.0f / d->scale[i];
    }
    return bad;
}

void llmt__fp8_delayed_export(const llmt__fp8_delayed *d, float *out)
{
    int H = d->history;
    for (int i = 0; i < d->n; i++) {
        float *row = out + (size_t)i * (size_t)(H + 2);
        const float *h = d->hist + (size_t)i * (size_t)H;
        int len = d->len[i];
        row[0] = d->scale[i];
        row[1] = (float)len;
        /* the ring's oldest entry sits at head when full, at 0 otherwise */
        int start = len == H ? d->head[i] : 0;
        for (int j = 0; j < H; j++) row[2 + j] = j < len ? h[(start + j) % H] : 0.0f;
    }
}

llmt_status llmt__fp8_delayed_import(llmt__fp8_delayed *d, const float *in)
{
    int H = d->history;
    for (int i = 0; i < d->n; i++) {
        const float *row = in + (size_t)i * (size_t)(H + 2);
        float len = row[1];
        int ok = isfinite(row[0]) && row[0] > 0.0f && len >= 0.0f && len <= (float)H &&
                 len == floorf(len);
        for (int j = 0; ok && j < H; j++) ok = isfinite(row[2 + j]) && row[2 + j] >= 0.0f;
        if (!ok)
            return llmt__err_set(d->ctx ? &d->ctx->err : NULL, LLMT_ERR_INVALID_ARGUMENT,
                                 "fp8: delayed scaling state: row %d (scale %g, %g "
                                 "amaxes) is not a valid state", i, (double)row[0],
                                 (double)len);
    }
    for (int i = 0; i < d->n; i++) {
        const float *row = in + (size_t)i * (size_t)(H + 2);
        float *h = d->hist + (size_t)i * (size_t)H;
        int len = (int)row[1];
        float use = 0.0f; /* the amax the next update would start from */
        for (int j = 0; j < H; j++) {
            h[j] = j < len ? row[2 + j] : 0.0f;
            if (j < len && (d->algo == LLMT__FP8_AMAX_MAX || j == len - 1))
                use = h[j] > use ? h[j] : use;
        }
        d->len[i] = len;
        d->head[i] = len % H;
        /* the scale from the history with this state's format and margin:
         * the saved one when they are the saved run's; right for the
         * tensor when they changed (a gradient saved under E5M2, resumed
         * under E4M3, would otherwise saturate for a step) */
        d->scale[i] = llmt__fp8_scale_from_amax(use, d->e5m2[i], d->margin, row[0]);
        d->scale_inv[i] = 1.0f / d->scale[i];
    }
    return LLMT_OK;
}

int llmt__fp8_delayed_history(const llmt__fp8_delayed *d)
{
    return d ? d->history : 0;
}

int llmt__fp8_delayed_count(const llmt__fp8_delayed *d)
{
    return d ? d->n : 0;
}

const float *llmt__fp8_delayed_scales(const llmt__fp8_delayed *d)
{
    return d ? d->scale : NULL;
}

const float *llmt__fp8_delayed_scale_invs(const llmt__fp8_delayed *d)
{
    return d ? d->scale_inv : NULL;
}

int llmt__fp8_delayed_e5m2(const llmt__fp8_delayed *d, int i)
{
    return d && i >= 0 && i < d->n ? d->e5m2[i] : 0;
}

/* ----------------------------------------------- per-block (tile) scaling */

static llmt_status check_blocks(const void *a, const void *b, const void *c,
                                int64_t rows, int64_t cols, int64_t br,
                                int64_t bc)
{
    if (!a || !b || !c)
        return LLMT_ERR_NULL_POINTER;
    if (rows < 1 || cols < 1 || br < 1 || bc < 1)
        return LLMT_ERR_INVALID_ARGUMENT;
    return LLMT_OK;
}

llmt_status llmt__fp8_quantize_blocks(const float *x, int64_t rows,
                                      int64_t cols, int64_t br, int64_t bc,
                                      int e5m2, uint8_t *codes,
                                      float *dequant)
{
    llmt_status st = check_blocks(x, codes, dequant, rows, cols, br, bc);
    if (st != LLMT_OK)
        return st;
    int64_t tc = (cols + bc - 1) / bc;
    float fmax = llmt__fp8_max(e5m2);
    for (int64_t r0 = 0; r0 < rows; r0 += br) {
        int64_t r1 = r0 + br < rows ? r0 + br : rows;
        for (int64_t c0 = 0; c0 < cols; c0 += bc) {
            int64_t c1 = c0 + bc < cols ? c0 + bc : cols;
            float amax = 0.0f;
            int nan = 0;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) {
                    float v = fabsf(x[r * cols + c]);
                    nan |= isnan(v);
                    amax = v > amax ? v : amax;
                }
            float s = (!nan && amax > 0.0f && isfinite(amax)) ? fmax / amax
                                                             : 1.0f;
            if (isinf(s))
                s = FLT_MAX;
            dequant[(r0 / br) * tc + c0 / bc] = 1.0f / s;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++)
                    codes[r * cols + c] =
                        llmt__fp8_encode(x[r * cols + c] * s, e5m2);
        }
    }
    return LLMT_OK;
}

llmt_status llmt__fp8_dequantize_blocks(const uint8_t *codes, int64_t rows,
                                        int64_t cols, int64_t br, int64_t bc,
                                        int e5m2, const float *dequant,
                                        float *y)
{
    llmt_status st = check_blocks(codes, dequant, y, rows, cols, br, bc);
    if (st != LLMT_OK)
        return st;
    int64_t tc = (cols + bc - 1) / bc;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            y[r * cols + c] = llmt__fp8_decode(codes[r * cols + c], e5m2) *
                              dequant[(r / br) * tc + c / bc];
    return LLMT_OK;
}
