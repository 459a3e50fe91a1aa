/* Helpers shared by the GPU tests and benchmarks: host bf16 rounding, a
 * seeded generator, device upload/download through the CUDA context. */
#ifndef LLMT_TEST_GPU_UTIL_H
#define LLMT_TEST_GPU_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "../../cuda/llmt_cuda.h"

static inline uint16_t h_f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                      /* round to nearest even */
    return (uint16_t)(u >> 16);
}
static inline float h_bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float h_round_bf(float f) { return h_bf2f(h_f2bf(f)); }

static uint64_t g_rng = 88172645463325252ull;
static inline uint64_t rng_u64(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
/* uniform in [-a, a) */
static inline float rng_f(float a)
{
    return a * (2.0f * (float)((rng_u64() >> 40) * (1.0 / 16777216.0)) - 1.0f);
}

/* Random bf16-representable values: the float array holds exactly what the
 * bf16 array holds, so CPU references see the GPU's inputs. */
static inline void fill_bf(float *f, uint16_t *b, size_t n, float a)
{
    for (size_t i = 0; i < n; i++) {
        b[i] = h_f2bf(rng_f(a));
        f[i] = h_bf2f(b[i]);
    }
}

/* ||a - b|| / ||b|| in double; NaN anywhere gives INFINITY. */
static inline double rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}
static inline void bf_to_f(float *f, const uint16_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) f[i] = h_bf2f(b[i]);
}

#endif
