/* The MoE layer's threaded loops (lib/train/moe.c) against its serial run:
 * one forward + backward at 2 OpenMP threads (one region over the
 * experts, the per-token loops split over tokens) gives the outputs, input
 * gradients and parameter gradients of the same call at 1 thread, where
 * every loop runs serially. The shapes are above moe.c's thresholds for
 * splitting, so each threaded loop runs. The expert GEMMs are whole in
 * both runs; only the router's GEMMs are split over rows or columns,
 * which need not round alike, so the comparison allows 1e-6 of the
 * tensor's largest magnitude. The dense case (one expert) splits its
 * GEMMs over the team instead: 1e-5. Outputs are poisoned (NaN) before
 * each run, so a row no thread wrote fails. Exit 77 without OpenMP. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/exec.h"
#include "train/moe.h"

enum { C = 64, N = 1024 };

static uint64_t rs = 0x2545f4914f6cdd1dull;
static float rnd(float scale)
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return scale * ((float)((rs >> 40) & 0xffffff) / 16777216.0f - 0.5f);
}

typedef struct out {
    float *y, *dx, *g; /* [N,C], [N,C], the gradients (all tensors) */
} out;

/* One call at `threads`: forward, backward into zeroed gradients. */
static int run(const llmt__moe_shape *sh, const float *w, size_t nw, const float *x,
               const float *dy, int threads, out *o, int *split)
{
    llmt__exec_cpu_set_threads(threads);
    llmt__moe *s = llmt__moe_new(sh, N);
    if (!s)
        return -1;
    size_t e1 = (size_t)sh->E * C, ef = (size_t)sh->E * sh->F * C;
    float *wm = (float *)w;
    llmt__moe_w pw = {wm, wm + e1, wm + e1 + ef, wm + e1 + 2 * ef};
    llmt__moe_w pg = {o->g, o->g + e1, o->g + e1 + ef, o->g + e1 + 2 * ef};
    for (size_t i = 0; i < (size_t)N * C; i++)
        o->y[i] = o->dx[i] = NAN;
    memset(o->g, 0, nw * sizeof(float));
    llmt_status st = llmt__moe_fwd(s, &pw, x, o->y, N);
    if (st == LLMT_OK)
        st = llmt__moe_bwd(s, &pw, &pg, x, dy, o->dx, 0.01f, 0.001f);
    *split = llmt__moe_over_experts(s->kept, sh->E);
    llmt__moe_free(s);
    return st == LLMT_OK ? 0 : -1;
}

/* max |a - b| over max |b|; NaN anywhere gives infinity */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i]))
            return INFINITY;
        double e = fabs((double)a[i] - b[i]);
        d = e > d ? e : d;
        m = fabs(b[i]) > m ? fabs(b[i]) : m;
    }
    return m > 0 ? d / m : d;
}

static void one_case(const char *name, int E, int K, int F, int dropless, double tol,
                     int want_split)
{
    llmt__moe_shape sh = {E, K, C, F, 1.25f, dropless, 0};
    size_t nw = (size_t)E * C + 3 * (size_t)E * F * C, nx = (size_t)N * C;
    float *w = malloc(nw * sizeof(float)), *x = malloc(nx * sizeof(float)),
          *dy = malloc(nx * sizeof(float));
    out o[2];
    for (int t = 0; t < 2; t++) {
        o[t].y = malloc(nx * sizeof(float));
        o[t].dx = malloc(nx * sizeof(float));
        o[t].g = malloc(nw * sizeof(float));
    }
    if (!w || !x || !dy || !o[0].y || !o[0].dx || !o[0].g || !o[1].y || !o[1].dx || !o[1].g) {
        CHECK(!"out of memory");
        return;
    }
    for (size_t i = 0; i < nw; i++)
        w[i] = rnd(0.5f);
    for (size_t i = 0; i < nx; i++) {
        x[i] = rnd(2.0f);
        dy[i] = rnd(0.02f);
    }
    int split1 = 0, split2 = 0;
    CHECK(run(&sh, w, nw, x, dy, 1, &o[0], &split1) == 0);
    CHECK(run(&sh, w, nw, x, dy, 2, &o[1], &split2) == 0);
    CHECK_EQ_INT(split1, 0);
    CHECK_EQ_INT(split2, want_split);
    double dyr = rel_diff(o[1].y, o[0].y, nx), ddx = rel_diff(o[1].dx, o[0].dx, nx),
           dg = rel_diff(o[1].g, o[0].g, nw);
    printf("%s: 2 threads vs 1: y %.2e dx %.2e grads %.2e (tol %.0e)\n", name, dyr, ddx, dg,
           tol);
    CHECK(dyr <= tol);
    CHECK(ddx <= tol);
    CHECK(dg <= tol);
    for (int t = 0; t < 2; t++) {
        free(o[t].y);
        free(o[t].dx);
        free(o[t].g);
    }
    free(w);
    free(x);
    free(dy);
}

int main(void)
{
    /* 2 threads must be able to split the experts, or nothing is tested */
    llmt__exec_cpu_set_threads(2);
    int64_t rows[4] = {1, 1, 1, 1};
    if (!llmt__moe_over_experts(rows, 4)) {
        printf("SKIP: no OpenMP team of 2 in this build\n");
        return 77;
    }
    one_case("8 experts top-2, capacity 1.25", 8, 2, 32, 0, 1e-6, 1);
    one_case("6 experts top-3, dropless", 6, 3, 16, 1, 1e-6, 1);
    one_case("dense (1 expert)", 1, 1, 128, 1, 1e-5, 0);
    return check_exit("moe-threads");
}
