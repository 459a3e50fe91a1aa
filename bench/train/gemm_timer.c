/* LD_PRELOAD shim for the benchmark: times every cblas_sgemm call of the
 * process (wall clock, outside-parallel callers as ours are) and prints the
 * total at exit, so the GEMM share of a training step is measured in the
 * real run rather than estimated. Output: "gemm_seconds S calls N" on
 * stderr, or appended to $GEMM_TIMER_OUT. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *,
                         int, const float *, int, float, float *, int);
static sgemm_fn real;
static double total;
static long calls;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta,
                 float *c, int ldc)
{
    if (!real) real = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm");
    double t0 = now();
    real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    total += now() - t0;
    calls++;
}

__attribute__((destructor)) static void report(void)
{
    const char *p = getenv("GEMM_TIMER_OUT");
    FILE *f = p ? fopen(p, "a") : NULL;
    fprintf(f ? f : stderr, "gemm_seconds %.6f calls %ld\n", total, calls);
    if (f) fclose(f);
}
