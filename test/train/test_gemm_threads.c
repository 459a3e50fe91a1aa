/* Which threads run the CPU backend's GEMM pieces (lib/exec/cpu.c). This
 * program defines cblas_sgemm itself (exported, so the backend's lookup in
 * the global scope finds it): each call records the calling thread and
 * forwards to the real OpenBLAS. At 2 OpenMP threads:
 *  - a GEMM outside any parallel region runs as 2 pieces on 2 threads,
 *    and equals the plain-loop reference;
 *  - a GEMM inside `omp parallel if (0)` runs whole on the calling thread
 *    (libgomp would start a fresh thread for every nested team);
 *  - the dense MoE layer (lib/train/moe.c, one expert) runs its GEMMs on
 *    the level-0 team's threads only, and splits some of them: its expert
 *    loop must not wrap them in an inactive region; so does the expert
 *    parallel layer's loop over its local experts (lib/train/moe_ep.c,
 *    one expert on a group of one).
 * Exit 77 without OpenMP or without OpenBLAS (the plain loops then run). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "check.h"
#include "exec/exec.h"
#include "train/moe.h"
#include "train/moe_ep.h"

typedef __typeof__(cblas_sgemm) sgemm_fn;

enum { MAX_CALLS = 4096, MAX_TIDS = 64 };
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t callers[MAX_CALLS];
static int ncalls;

void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                 const enum CBLAS_TRANSPOSE tb, const blasint M, const blasint N,
                 const blasint K, const float alpha, const float *A, const blasint lda,
                 const float *B, const blasint ldb, const float beta, float *C,
                 const blasint ldc)
{
    static sgemm_fn *real;
    pthread_mutex_lock(&mu);
    if (!real)
        real = (sgemm_fn *)dlsym(RTLD_NEXT, "cblas_sgemm");
    if (ncalls < MAX_CALLS)
        callers[ncalls] = pthread_self();
    ncalls++;
    sgemm_fn *f = real;
    pthread_mutex_unlock(&mu);
    if (f)
        f(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void calls_reset(void)
{
    pthread_mutex_lock(&mu);
    ncalls = 0;
    pthread_mutex_unlock(&mu);
}

/* distinct threads among the recorded calls */
static int distinct(pthread_t *out, int max)
{
    int n = 0;
    for (int i = 0; i < ncalls && i < MAX_CALLS; i++) {
        int seen = 0;
        for (int j = 0; j < n; j++)
            seen |= pthread_equal(out[j], callers[i]);
        if (!seen && n < max)
            out[n++] = callers[i];
    }
    return n;
}

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static float rnd(void)
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rs >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

enum { M = 192, NC = 256, KK = 128 };

/* C = A B^T at 2 threads outside any region: 2 pieces on 2 threads */
static void top_level(void)
{
    static float A[M * KK], B[NC * KK], C[M * NC], R[M * NC];
    for (int i = 0; i < M * KK; i++)
        A[i] = rnd();
    for (int i = 0; i < NC * KK; i++)
        B[i] = rnd();
    calls_reset();
    llmt__cpu_gemm(0, 1, M, NC, KK, 1.0f, A, KK, B, KK, 0.0f, C, NC);
    pthread_t t[MAX_TIDS];
    int nt = distinct(t, MAX_TIDS);
    printf("top level: %d sgemm calls on %d threads\n", ncalls, nt);
    CHECK_EQ_INT(ncalls, 2);
    CHECK_EQ_INT(nt, 2);
    llmt__cpu_gemm_ref(0, 1, M, NC, KK, 1.0f, A, KK, B, KK, 0.0f, R, NC);
    double d = 0, m = 0;
    for (int i = 0; i < M * NC; i++) {
        d = fmax(d, fabs((double)C[i] - R[i]));
        m = fmax(m, fabs((double)R[i]));
    }
    printf("top level: max |C - ref| %.2e of max |ref| %.2e\n", d, m);
    CHECK(d <= 1e-5 * m); /* K = 128 sums of products below 0.25 */

    /* inside an inactive region: whole, on this thread */
    calls_reset();
    pthread_t self = pthread_self();
    int level = 0;
#pragma omp parallel if (M < 0)
    {
        level = omp_get_level();
        llmt__cpu_gemm(0, 1, M, NC, KK, 1.0f, A, KK, B, KK, 0.0f, C, NC);
    }
    nt = distinct(t, MAX_TIDS);
    printf("in an inactive region (level %d): %d sgemm calls on %d threads\n", level, ncalls,
           nt);
    CHECK_EQ_INT(level, 1);
    CHECK_EQ_INT(ncalls, 1);
    CHECK(nt == 1 && pthread_equal(t[0], self));
}

/* the level-0 team of 2 threads: libgomp reuses these for every level-0
 * region of this thread with 2 threads */
static int team_threads(pthread_t team[2])
{
    int n = 0;
#pragma omp parallel num_threads(2)
    {
#pragma omp critical
        if (n < 2)
            team[n++] = pthread_self();
    }
    return n;
}

/* ep: through llmt__moe_ep_fwd/bwd on a group of one (its exchange a
 * copy), else llmt__moe_fwd/bwd. */
static void dense_moe(int ep)
{
    enum { C = 128, F = 256, N = 1024 };
    llmt__moe_shape sh = {1, 1, C, F, 1.25f, 1, 0};
    size_t nw = (size_t)C + 3 * (size_t)F * C, nx = (size_t)N * C;
    float *w = malloc(nw * sizeof(float)), *g = calloc(nw, sizeof(float)),
          *x = malloc(nx * sizeof(float)), *y = malloc(nx * sizeof(float)),
          *dy = malloc(nx * sizeof(float)), *dx = malloc(nx * sizeof(float));
    llmt__moe *s = llmt__moe_new(&sh, N);
    llmt__moe_ep *p = ep ? llmt__moe_ep_new(&sh, N, 0, 1) : NULL;
    llmt_comm *comm = NULL;
    llmt_err e = {0};
    if (ep)
        CHECK_STATUS(llmt_comm_create_inproc(NULL, 1, NULL, &comm), LLMT_OK);
    if (!w || !g || !x || !y || !dy || !dx || !s || (ep && (!p || !comm))) {
        CHECK(!"out of memory");
        return;
    }
    for (size_t i = 0; i < nw; i++)
        w[i] = 0.1f * rnd();
    for (size_t i = 0; i < nx; i++) {
        x[i] = rnd();
        dy[i] = 0.01f * rnd();
    }
    llmt__moe_w pw = {w, w + C, w + C + (size_t)F * C, w + C + 2 * (size_t)F * C};
    llmt__moe_w pg = {g, g + C, g + C + (size_t)F * C, g + C + 2 * (size_t)F * C};
    pthread_t team[2];
    CHECK_EQ_INT(team_threads(team), 2);
    calls_reset();
    if (ep) {
        CHECK_STATUS(llmt__moe_ep_fwd(p, s, comm, &e, &pw, x, y, N), LLMT_OK);
        CHECK_STATUS(llmt__moe_ep_bwd(p, s, comm, &e, &pw, &pg, x, dy, dx, 0.01f, 0.001f),
                     LLMT_OK);
    } else {
        CHECK_STATUS(llmt__moe_fwd(s, &pw, x, y, N), LLMT_OK);
        CHECK_STATUS(llmt__moe_bwd(s, &pw, &pg, x, dy, dx, 0.01f, 0.001f), LLMT_OK);
    }
    int outside = 0, on_worker = 0;
    for (int i = 0; i < ncalls && i < MAX_CALLS; i++) {
        int in0 = pthread_equal(callers[i], team[0]), in1 = pthread_equal(callers[i], team[1]);
        outside += !in0 && !in1;
        on_worker += !pthread_equal(callers[i], pthread_self()) && (in0 || in1);
    }
    printf("dense MoE layer%s: %d sgemm calls, %d on the team's other thread, %d on "
           "threads outside the team\n",
           ep ? " (expert parallel, a group of one)" : "", ncalls, on_worker, outside);
    CHECK(ncalls > 0 && ncalls <= MAX_CALLS);
    CHECK_EQ_INT(outside, 0);
    CHECK(on_worker > 0);
    llmt__moe_ep_free(p);
    llmt_comm_destroy(comm);
    llmt__moe_free(s);
    free(w);
    free(g);
    free(x);
    free(y);
    free(dy);
    free(dx);
}

int main(void)
{
#ifndef _OPENMP
    printf("SKIP: no OpenMP in this build\n");
    return 77;
#else
    llmt__exec_cpu_set_threads(2);
    if (omp_get_max_threads() < 2) {
        printf("SKIP: no team of 2 threads\n");
        return 77;
    }
    float a = 1, b = 1, c = 0;
    llmt__cpu_gemm(0, 1, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
    if (ncalls == 0 || !dlsym(RTLD_NEXT, "cblas_sgemm")) {
        printf("SKIP: the CPU backend runs without OpenBLAS here\n");
        return 77;
    }
    top_level();
    dense_moe(0);
    dense_moe(1);
    return check_exit("gemm-threads");
#endif
}
