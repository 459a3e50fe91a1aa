/* The mixture-of-experts layer on this machine (issue 18): tokens/s of
 * one MoE layer's forward + backward (lib/train/moe.c) under expert
 * parallelism ep 2 (two ranks as threads of an in-process communicator,
 * one compute thread each, lib/train/moe_ep.c) against ep 1 (one thread,
 * and two OpenMP threads: the same two cores), and against the dense
 * SwiGLU layer of the same active size (one expert of top_k x
 * expert_ffn, dropless: the same code path, the GEMM FLOPs per token of
 * the MoE's experts). fp32, width 256, 8 experts of 256, top-2, capacity
 * 1.25, 2048 tokens a call on each rank (ep 2 processes twice the tokens
 * of ep 1 per call: the count is per rank, as in data parallelism). The
 * MoE and the dense layer run at 1 and 2 threads, and the MoE/dense
 * ratio of tokens/s at equal threads is printed (medians of this run).
 * Items are tokens (all ranks'); the EP exchange (all-gather of counts
 * and four all-to-alls) is inside the timing.
 *
 *   bench_moe_ep [--quick] [--json FILE]    (internal entry points) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "harness.h"
#include "llmtrain.h"
#include "train/moe.h"
#include "train/moe_ep.h"

#define C 256
#define E 8
#define K 2
#define FE 256
#define N 2048

typedef struct layer {
    llmt__moe_shape sh;
    llmt__moe *s;
    llmt__moe_ep *ep;
    llmt_comm *comm;
    float *w, *g, *x, *y, *dy, *dx;
    llmt__moe_w pw, pg;
    llmt_err err;
    int threads, reps;
    llmt_status st;
} layer;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) - 0.5f;
}

static int layer_init(layer *L, int experts, int top_k, int ffn, int dropless, llmt_comm *comm,
                      int rank, int size)
{
    memset(L, 0, sizeof *L);
    llmt__moe_shape sh = {experts, top_k, C, ffn, 1.25f, dropless, 0};
    L->sh = sh;
    L->comm = comm;
    size_t nw = (size_t)experts * C + 3 * (size_t)experts * ffn * C;
    L->w = malloc(nw * sizeof(float));
    L->g = calloc(nw, sizeof(float));
    L->x = malloc((size_t)N * C * sizeof(float));
    L->y = malloc((size_t)N * C * sizeof(float));
    L->dy = malloc((size_t)N * C * sizeof(float));
    L->dx = malloc((size_t)N * C * sizeof(float));
    L->s = llmt__moe_new(&sh, N);
    if (size > 1)
        L->ep = llmt__moe_ep_new(&sh, N, rank, size);
    if (!L->w || !L->g || !L->x || !L->y || !L->dy || !L->dx || !L->s || (size > 1 && !L->ep))
        return -1;
    for (size_t i = 0; i < nw; i++)
        L->w[i] = 0.1f * urand();
    for (size_t i = 0; i < (size_t)N * C; i++) {
        L->x[i] = urand();
        L->dy[i] = 0.01f * urand();
    }
    size_t e1 = (size_t)experts * C, ef = (size_t)experts * ffn * C;
    /* under expert parallelism the experts' rows are this rank's block
     * (moe_ep.h: the engine holds only its experts) */
    size_t at = size > 1 ? (size_t)rank * (size_t)(experts / size) * ffn * C : 0;
    llmt__moe_w pw = {L->w, L->w + e1 + at, L->w + e1 + ef + at, L->w + e1 + 2 * ef + at};
    llmt__moe_w pg = {L->g, L->g + e1 + at, L->g + e1 + ef + at, L->g + e1 + 2 * ef + at};
    L->pw = pw;
    L->pg = pg;
    return 0;
}

static void layer_free(layer *L)
{
    llmt__moe_free(L->s);
    llmt__moe_ep_free(L->ep);
    free(L->w);
    free(L->g);
    free(L->x);
    free(L->y);
    free(L->dy);
    free(L->dx);
}

static void *layer_run(void *p)
{
    layer *L = p;
    llmt__exec_cpu_set_threads(L->threads);
    for (int r = 0; r < L->reps && L->st == LLMT_OK; r++) {
        if (L->ep) {
            L->st = llmt__moe_ep_fwd(L->ep, L->s, L->comm, &L->err, &L->pw, L->x, L->y, N);
            if (L->st == LLMT_OK)
                L->st = llmt__moe_ep_bwd(L->ep, L->s, L->comm, &L->err, &L->pw, &L->pg, L->x,
                                         L->dy, L->dx, 0.01f, 0.001f);
        } else {
            L->st = llmt__moe_fwd(L->s, &L->pw, L->x, L->y, N);
            if (L->st == LLMT_OK)
                L->st = llmt__moe_bwd(L->s, &L->pw, &L->pg, L->x, L->dy, L->dx, 0.01f, 0.001f);
        }
    }
    return NULL;
}

typedef struct job {
    layer *L;
    int n; /* ranks (threads) */
} job;

static void run_job(void *p)
{
    job *j = p;
    pthread_t th[2];
    for (int r = 1; r < j->n; r++)
        pthread_create(&th[r], NULL, layer_run, &j->L[r]);
    layer_run(&j->L[0]);
    for (int r = 1; r < j->n; r++)
        pthread_join(th[r], NULL);
}

int main(int argc, char **argv)
{
    bench_ctx b;
    if (bench_init(&b, "moe", argc, argv))
        return 2;
    int reps = b.quick ? 1 : 4, bad = 0;
    double moe_s[3] = {0, 0, 0}, dense_s[3] = {0, 0, 0}; /* median s by threads */
    layer L[2];
    job j;
    /* ep 1, one thread and two */
    for (int t = 1; t <= 2; t++) {
        if (layer_init(&L[0], E, K, FE, 0, NULL, 0, 1))
            return 1;
        L[0].threads = t;
        L[0].reps = reps;
        j.L = L;
        j.n = 1;
        char name[64];
        snprintf(name, sizeof name, "moe ep 1, %d thread%s", t, t > 1 ? "s" : "");
        const bench_result *res = bench_run(&b, name, run_job, &j, (double)N * reps, "tokens");
        moe_s[t] = res ? res->median_s : 0;
        bad |= L[0].st != LLMT_OK;
        layer_free(&L[0]);
    }
    /* ep 2: two ranks of one thread, each with its N tokens */
    llmt_comm *c[2] = {NULL, NULL};
    if (llmt_comm_create_inproc(NULL, 2, NULL, c) != LLMT_OK)
        return 1;
    for (int r = 0; r < 2; r++) {
        if (layer_init(&L[r], E, K, FE, 0, c[r], r, 2))
            return 1;
        L[r].threads = 1;
        L[r].reps = reps;
    }
    j.L = L;
    j.n = 2;
    bench_run(&b, "moe ep 2, 1 thread each", run_job, &j, 2.0 * N * reps, "tokens");
    for (int r = 0; r < 2; r++) {
        bad |= L[r].st != LLMT_OK;
        if (L[r].st != LLMT_OK)
            fprintf(stderr, "ep 2 rank %d: %s\n", r, L[r].err.msg);
        layer_free(&L[r]);
        llmt_comm_destroy(c[r]);
    }
    /* the dense layer of the same active size: one expert of K x FE */
    for (int t = 1; t <= 2; t++) {
        if (layer_init(&L[0], 1, 1, K * FE, 1, NULL, 0, 1))
            return 1;
        L[0].threads = t;
        L[0].reps = reps;
        j.L = L;
        j.n = 1;
        char name[64];
        snprintf(name, sizeof name, "dense swiglu of the active size, %d thread%s", t,
                 t > 1 ? "s" : "");
        const bench_result *res = bench_run(&b, name, run_job, &j, (double)N * reps, "tokens");
        dense_s[t] = res ? res->median_s : 0;
        bad |= L[0].st != LLMT_OK;
        layer_free(&L[0]);
    }
    /* same tokens a call: the ratio of tokens/s is that of the times */
    for (int t = 1; t <= 2; t++)
        if (moe_s[t] > 0 && dense_s[t] > 0)
            printf("moe / dense tokens/s, %d thread%s: %.2f\n", t, t > 1 ? "s" : "",
                   dense_s[t] / moe_s[t]);
    if (bad)
        fprintf(stderr, "bench_moe_ep: a run failed\n");
    return bad ? 1 : bench_finish(&b);
}
