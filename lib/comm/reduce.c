/* Host reductions for the in-process and MPI backends: fp32, bf16, fp16,
 * int32, int64; sum, avg, max, min. Reduced-precision values are widened to
 * fp32 per element and rounded once (round to nearest even). */
#include <math.h>
#include <string.h>

#include "comm/comm_internal.h"

float llmt__bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t llmt__f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float llmt__fp16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0) {
        if (m == 0) {
            u = s;
        } else { /* subnormal */
            float f = (float)m * 5.9604644775390625e-8f; /* 2^-24 */
            memcpy(&u, &f, 4);
            u |= s;
        }
    } else if (e == 31) {
        u = s | 0x7f800000u | (m << 13);
    } else {
        u = s | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t llmt__f32_to_fp16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u); /* overflow/inf */
    if (a < 0x38800000u) {                                 /* subnormal */
        float af;
        memcpy(&af, &a, 4);
        /* af * 2^24 rounded to nearest even */
        float q = rintf(af * 16777216.0f);
        return (uint16_t)(s | (uint16_t)q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(s | (uint16_t)((r - 0x38000000u) >> 13));
}

int llmt__dtype_reducible(llmt_dtype dt)
{
    return dt == LLMT_DTYPE_FP32 || dt == LLMT_DTYPE_BF16 ||
           dt == LLMT_DTYPE_FP16 || dt == LLMT_DTYPE_INT32 ||
           dt == LLMT_DTYPE_INT64;
}

static inline float ld16(llmt_dtype dt, const uint16_t *p, size_t i)
{
    return dt == LLMT_DTYPE_BF16 ? llmt__bf16_to_f32(p[i])
                                 : llmt__fp16_to_f32(p[i]);
}

static inline uint16_t st16(llmt_dtype dt, float f)
{
    return dt == LLMT_DTYPE_BF16 ? llmt__f32_to_bf16(f) : llmt__f32_to_fp16(f);
}

#define COMBINE(op, a, b) \
    ((op) == LLMT_REDUCE_MAX ? ((b) > (a) ? (b) : (a)) \
     : (op) == LLMT_REDUCE_MIN ? ((b) < (a) ? (b) : (a)) : (a) + (b))

void llmt__reduce(llmt_dtype dt, llmt_reduce_op op, void *dst, const void *src,
                  size_t n)
{
    switch (dt) {
    case LLMT_DTYPE_FP32: {
        float *d = dst;
        const float *s = src;
        if (op == LLMT_REDUCE_SUM || op == LLMT_REDUCE_AVG) {
            for (size_t i = 0; i < n; i++) d[i] += s[i];
        } else {
            for (size_t i = 0; i < n; i++) d[i] = COMBINE(op, d[i], s[i]);
        }
        break;
    }
    case LLMT_DTYPE_BF16:
    case LLMT_DTYPE_FP16: {
        uint16_t *d = dst;
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) {
            float a = ld16(dt, d, i), b = ld16(dt, s, i);
            d[i] = st16(dt, COMBINE(op, a, b));
        }
        break;
    }
    case LLMT_DTYPE_INT32: {
        int32_t *d = dst;
        const int32_t *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = (op == LLMT_REDUCE_SUM || op == LLMT_REDUCE_AVG)
                       ? (int32_t)((uint32_t)d[i] + (uint32_t)s[i])
                       : COMBINE(op, d[i], s[i]);
        break;
    }
    case LLMT_DTYPE_INT64: {
        int64_t *d = dst;
        const int64_t *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = (op == LLMT_REDUCE_SUM || op == LLMT_REDUCE_AVG)
                       ? (int64_t)((uint64_t)d[i] + (uint64_t)s[i])
                       : COMBINE(op, d[i], s[i]);
        break;
    }
    default:
        break;
    }
}

void llmt__reduce_many(llmt_dtype dt, llmt_reduce_op op, void *dst,
                       const void *const *src, size_t nsrc, size_t off,
                       size_t n)
{
    int avg = op == LLMT_REDUCE_AVG;
    int sum = op == LLMT_REDUCE_SUM || avg;
    switch (dt) {
    case LLMT_DTYPE_FP32: {
        float *d = (float *)dst + off;
        for (size_t i = 0; i < n; i++) {
            float a = ((const float *)src[0])[off + i];
            for (size_t r = 1; r < nsrc; r++) {
                float b = ((const float *)src[r])[off + i];
                a = sum ? a + b : COMBINE(op, a, b);
            }
            d[i] = avg ? a / (float)nsrc : a;
        }
        break;
    }
    case LLMT_DTYPE_BF16:
    case LLMT_DTYPE_FP16: {
        uint16_t *d = (uint16_t *)dst + off;
        for (size_t i = 0; i < n; i++) {
            float a = ld16(dt, src[0], off + i);
            for (size_t r = 1; r < nsrc; r++) {
                float b = ld16(dt, src[r], off + i);
                a = sum ? a + b : COMBINE(op, a, b);
            }
            d[i] = st16(dt, avg ? a / (float)nsrc : a);
        }
        break;
    }
    case LLMT_DTYPE_INT32: {
        int32_t *d = (int32_t *)dst + off;
        for (size_t i = 0; i < n; i++) {
            int64_t a = ((const int32_t *)src[0])[off + i];
            for (size_t r = 1; r < nsrc; r++) {
                int64_t b = ((const int32_t *)src[r])[off + i];
                a = sum ? a + b : COMBINE(op, a, b);
            }
            d[i] = (int32_t)(avg ? a / (int64_t)nsrc : a);
        }
        break;
    }
    case LLMT_DTYPE_INT64: {
        int64_t *d = (int64_t *)dst + off;
        for (size_t i = 0; i < n; i++) {
            int64_t a = ((const int64_t *)src[0])[off + i];
            for (size_t r = 1; r < nsrc; r++) {
                int64_t b = ((const int64_t *)src[r])[off + i];
                a = sum ? (int64_t)((uint64_t)a + (uint64_t)b)
                        : COMBINE(op, a, b);
            }
            d[i] = avg ? a / (int64_t)nsrc : a;
        }
        break;
    }
    default:
        break;
    }
}

void llmt__scale_div(llmt_dtype dt, void *buf, size_t n, int32_t div)
{
    switch (dt) {
    case LLMT_DTYPE_FP32:
        for (size_t i = 0; i < n; i++) ((float *)buf)[i] /= (float)div;
        break;
    case LLMT_DTYPE_BF16:
    case LLMT_DTYPE_FP16: {
        uint16_t *d = buf;
        for (size_t i = 0; i < n; i++)
            d[i] = st16(dt, ld16(dt, d, i) / (float)div);
        break;
    }
    case LLMT_DTYPE_INT32:
        for (size_t i = 0; i < n; i++) ((int32_t *)buf)[i] /= div;
        break;
    case LLMT_DTYPE_INT64:
        for (size_t i = 0; i < n; i++) ((int64_t *)buf)[i] /= div;
        break;
    default:
        break;
    }
}
