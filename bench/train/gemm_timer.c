/* LD_PRELOAD shim for the benchmark: times the cblas_sgemm calls of the
 * process and prints the total at exit, so the GEMM share of a training
 * step is measured in the real run rather than estimated. Calls made at
 * the same time by several threads (our GEMMs are split over the OpenMP
 * team) count once: the total is the wall time during which at least one
 * sgemm was running. Output: "gemm_seconds S calls N" on stderr, or
 * appended to $GEMM_TIMER_OUT. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *,
                         int, const float *, int, float, float *, int);
static sgemm_fn real;
static double total, since;
static long calls;
static int inflight;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

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
    pthread_mutex_lock(&mu);
    if (inflight++ == 0) since = now();
    calls++;
    pthread_mutex_unlock(&mu);
    real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    pthread_mutex_lock(&mu);
    if (--inflight == 0) total += now() - since;
    pthread_mutex_unlock(&mu);
}

__attribute__((destructor)) static void report(void)
{
    const char *p = getenv("GEMM_TIMER_OUT");
    FILE *f = p ? fopen(p, "a") : NULL;
    fprintf(f ? f : stderr, "gemm_seconds %.6f calls %ld\n", total, calls);
    if (f) fclose(f);
}
