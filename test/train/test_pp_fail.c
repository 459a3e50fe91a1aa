/* A pipeline stage that fails in the middle of a step (lib/train/pp.c,
 * fail_on): its peers learn of it at once, from the message it sends in
 * place of the next boundary tensor they wait for, instead of waiting out
 * the communicator's timeout in their receive and then naming a timeout.
 *
 * Stage 0's engine runs on a copy of the fp32 CPU op table whose GEMM
 * fails on its 12th call of the step on that thread (stage 0 holds 2 of
 * the 4 layers, 8 GEMMs a forward: the failure is in micro-batch 1's
 * forward, with micro-batches 1-3 still to send). The communicators wait
 * up to 120 s, so every stage's step returning within 30 s proves it was
 * not the timeout. Cases: pp 2 (GPipe, 1F1B, interleaved v 2) and pp 2 x
 * dp 2 (1F1B; stage 0 of both replicas fails, as a data parallel job's
 * replicas fail alike on the same data) as threads on in-process
 * communicators; `gloo`: pp 2 1F1B over Gloo (the stages' threads meeting
 * in a file store; posted sends; SKIP, 77, without Gloo); `mpi`: the
 * same under `mpirun -np 2`, one stage a process (test pp-fail-mpi).
 *
 * Checked: stage 0's step fails with the injected error; every other
 * stage's fails naming stage 0 and its error; a second step on the same
 * trainers is refused at once, saying to remake the trainer and its
 * pipeline communicator; trainers and communicators made again then take
 * a step (losses finite, the stages agreeing on it).
 *
 * Failures no boundary message can carry, on communicators that wait only
 * 10 s (a regression then fails in the time check rather than hanging):
 * after stage 0's last send of the step (its gradient norm's sumsq op, its
 * AdamW update) and on one data parallel replica only (pp 2 x dp 2, rank
 * 0's GEMM: replica 1 learns of it at the step's end, pp.c's step_end);
 * and in the forward-only passes (pp_infer.c): evaluate with stage 0's or
 * the last stage's GEMM failing, generate with the last stage's. There
 * every stage fails naming the stage and its error, and the next pass,
 * whose messages all matched, runs and agrees. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "stage_fixture.h"
#include "train/device.h"

#define MICRO 2
#define T 16
#define V 64
#define M 4
#define WIDTH 32
#define FAIL_AT 12 /* stage 0's failing GEMM call of the step */
#define TIMEOUT_MS 120000
#define QUICK_S 30.0 /* a step returning later than this waited for something */

static llmt_model_config g_cfg;
static llmt__dev_ops g_ops; /* the CPU table, gemm wrapped */
static llmt_status (*g_gemm)(llmt__dev *d, const llmt__gemm_args *g);
static char g_store[64]; /* gloo: the store's directory ("": in-process) */
static int g_case;
static int32_t g_in[2 * M * MICRO * T], g_tg[2 * M * MICRO * T];

#define SHORT_MS 10000 /* the communicators of the cases below */
#define SHORT_S 8.0    /* their bound: less than the timeout */

enum { OP_GEMM, OP_SUMSQ, OP_ADAMW }; /* the op that fails */
enum { K_STEP, K_EVAL, K_GEN };       /* in what */
static llmt_status (*g_sumsq)(llmt__dev *d, float *out, const float *const *xs,
                              const size_t *ns, int count);
static llmt_status (*g_adamw)(llmt__dev *d, float *master, void *param_bf16, const float *grad,
                              float *m, float *v, size_t n, float lr, float beta1, float beta2,
                              float eps, float wd, float grad_scale, int64_t t);
static int g_timeout_ms = TIMEOUT_MS;

static _Thread_local int tl_fail_at, tl_calls, tl_op;

/* The injected failure: call tl_fail_at of op tl_op on this thread. */
static int fails(int op)
{
    return tl_fail_at && tl_op == op && ++tl_calls == tl_fail_at;
}

static llmt_status failing_gemm(llmt__dev *d, const llmt__gemm_args *g)
{
    if (fails(OP_GEMM))
        return LLMT_ERR_INTERNAL;
    return g_gemm(d, g);
}

static llmt_status failing_sumsq(llmt__dev *d, float *out, const float *const *xs,
                                 const size_t *ns, int count)
{
    if (fails(OP_SUMSQ))
        return LLMT_ERR_INTERNAL;
    return g_sumsq(d, out, xs, ns, count);
}

static llmt_status failing_adamw(llmt__dev *d, float *master, void *param_bf16,
                                 const float *grad, float *m, float *v, size_t n, float lr,
                                 float beta1, float beta2, float eps, float wd,
                                 float grad_scale, int64_t t)
{
    if (fails(OP_ADAMW))
        return LLMT_ERR_INTERNAL;
    return g_adamw(d, master, param_bf16, grad, m, v, n, lr, beta1, beta2, eps, wd, grad_scale,
                   t);
}

typedef struct rank_arg {
    llmt_comm *world;
    int rank, pp, dp, sched, v, inject;
    int op, at, kind;       /* the failing op, its call, in a step, evaluate or generate */
    int zero;               /* the data parallel group's ZeRO stage */
    llmt_status s1, s2, s3; /* the failing step, the step after, a remade trainer's */
    double t1, t2;          /* their seconds */
    float loss;
    char e1[1024], e2[1024], e3[512];
} rank_arg;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* This rank's pipeline (and data parallel) groups: over world in-process
 * (rank = stage + pp * dpr), or over a Gloo store (pp 2 only). */
static llmt_status groups(rank_arg *a, int round, llmt_comm **pp, llmt_comm **dp)
{
    *pp = *dp = NULL;
    int stage = a->rank % a->pp, dpr = a->rank / a->pp;
    if (g_store[0]) {
        llmt_comm_opts co;
        llmt_comm_opts_init(&co, sizeof co);
        co.timeout_ms = g_timeout_ms;
        char pre[32];
        snprintf(pre, sizeof pre, "case%d-%d", g_case, round);
        return llmt_comm_create_from_store(NULL, g_store, pre, a->rank, 2, &co, pp);
    }
    llmt_status s = llmt_comm_split(a->world, dpr, stage, pp);
    if (s == LLMT_OK && a->dp > 1)
        s = llmt_comm_split(a->world, a->dp > 1 ? stage : -1, dpr, dp);
    return s;
}

/* A trainer on the wrapped table with its groups attached. */
static llmt_status open_rank(rank_arg *a, int round, llmt_model **md, llmt_trainer **tr,
                             llmt_comm **pp, llmt_comm **dp)
{
    llmt_trainer_opts o;
    rank_fixture_opts(&o, MICRO, M, T, 1e-3f);
    llmt_status s = stage_fixture_open(&g_cfg, &o, &g_ops, md, tr);
    if (s == LLMT_OK)
        s = groups(a, round, pp, dp);
    llmt_pp_opts po;
    stage_fixture_pp_opts(&po, a->sched, a->v, NULL, 0);
    rank_fixture_groups g = {.pp = *pp, .dp = *dp, .pp_opts = &po, .zero = a->zero};
    if (s == LLMT_OK)
        s = rank_fixture_attach(*tr, &g);
    /* the engine made now (its pipeline creation is collective over pp:
     * an all-reduce and the embedding group's split), then a barrier, so
     * that the step alone fails and no stage is still in the split when
     * the failing one, done with it, fails and closes its groups (seen on
     * Gloo in CI: stage 1 failed in the split, not on the message) */
    if (s == LLMT_OK)
        s = llmt_trainer_sync_params(*tr);
    if (s == LLMT_OK)
        s = llmt_comm_barrier(*pp);
    return s;
}

static void close_rank(llmt_model *md, llmt_trainer *tr, llmt_comm *pp, llmt_comm *dp)
{
    llmt_trainer_destroy(tr);
    llmt_model_destroy(md);
    llmt_comm_destroy(pp);
    llmt_comm_destroy(dp);
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *md = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *pp = NULL, *dp = NULL;
    int dpr = a->rank / a->pp;
    size_t per = (size_t)M * MICRO * T;
    llmt_batch b = {sizeof b, g_in + dpr * per, g_tg + dpr * per, M * MICRO, T};
    float loss = 0.0f;
    llmt_status s = open_rank(a, 0, &md, &tr, &pp, &dp);
    if (s != LLMT_OK) {
        a->s1 = a->s2 = a->s3 = s;
        rank_fixture_error(a->e1, sizeof a->e1, tr, md);
        close_rank(md, tr, pp, dp);
        return NULL;
    }
    tl_calls = 0;
    tl_op = a->op;
    tl_fail_at = a->inject ? a->at : 0;
    double t0 = now_s();
    int32_t prompt[3] = {1, 2, 3}, out[2];
    if (a->kind == K_STEP)
        a->s1 = rank_fixture_step(tr, &b, &loss);
    else if (a->kind == K_EVAL)
        a->s1 = llmt_trainer_evaluate(tr, &b, &loss);
    else
        a->s1 = llmt_trainer_generate(tr, prompt, 3, 2, 0.0f, 0, 1, out);
    a->t1 = now_s() - t0;
    tl_fail_at = 0;
    rank_fixture_error(a->e1, sizeof a->e1, tr, md);
    t0 = now_s();
    if (a->kind == K_STEP) {
        a->s2 = rank_fixture_step(tr, &b, &loss);
    } else { /* a forward-only pass's messages all matched: the next runs */
        a->s2 = llmt_trainer_evaluate(tr, &b, &loss);
        a->loss = loss;
    }
    a->t2 = now_s() - t0;
    rank_fixture_error(a->e2, sizeof a->e2, tr, md);
    close_rank(md, tr, pp, dp);
    if (a->kind != K_STEP) {
        a->s3 = LLMT_OK;
        return NULL;
    }
    /* made again: a step runs */
    md = NULL;
    tr = NULL;
    pp = dp = NULL;
    a->s3 = open_rank(a, 1, &md, &tr, &pp, &dp);
    if (a->s3 == LLMT_OK)
        a->s3 = rank_fixture_step(tr, &b, &a->loss);
    if (a->s3 != LLMT_OK)
        rank_fixture_error(a->e3, sizeof a->e3, tr, md);
    close_rank(md, tr, pp, dp);
    return NULL;
}

/* A case: the layout, what fails where, and on which ranks (only: -1 the
 * first stage of every replica, else that rank alone; fstage: the stage
 * whose op fails). */
typedef struct fcase {
    const char *name;
    int sched, v, dp, op, at, kind, only, fstage, timeout_ms;
    int zero; /* the data parallel group's ZeRO stage */
} fcase;

/* The rank whose error rank r names (its source): the failing stage of
 * r's replica; under `only`, in the other replica, r's data parallel peer
 * in the failing rank's replica (which tells it at the step's end). */
static int source_of(const fcase *c, int r)
{
    int stage = r % 2, dpr = r / 2;
    /* a failure after the schedule (the norm) reaches the other replica
     * through the failing stage's data parallel peer only, and from it
     * its pipeline */
    if (c->only >= 0 && dpr != c->only / 2 && c->op == OP_SUMSQ && stage != c->fstage)
        return dpr * 2 + c->fstage;
    if (c->only >= 0 && dpr != c->only / 2)
        return c->only / 2 * 2 + stage;
    return dpr * 2 + c->fstage;
}

/* One rank's checks after run (other: the other stage's loss: the remade
 * trainer's step, or the forward-only cases' second evaluate). */
static void check_rank(const fcase *c, const rank_arg *a, const rank_arg *all, float other)
{
    int r = a->rank, stage = r % 2;
    double quick = c->timeout_ms < TIMEOUT_MS ? SHORT_S : QUICK_S;
    printf("%s dp %d rank %d (stage %d): failing %s %.2f s: %s\n", c->name, c->dp, r, stage,
           c->kind == K_STEP   ? "step"
           : c->kind == K_EVAL ? "evaluate"
                               : "generate",
           a->t1, a->e1);
    printf("%s dp %d rank %d: the %s after %.3f s: %s\n", c->name, c->dp, r,
           c->kind == K_STEP ? "step" : "evaluate", a->t2, a->s2 == LLMT_OK ? "ok" : a->e2);
    if (c->kind == K_STEP)
        printf("%s dp %d rank %d: remade: %s loss %.5f\n", c->name, c->dp, r,
               a->s3 == LLMT_OK ? "ok" : a->e3, a->loss);
    CHECK(a->s1 != LLMT_OK);
    CHECK(a->t1 < quick);
    if (a->inject) {
        CHECK(strstr(a->e1, "failed in") == NULL); /* its own error, not a peer's */
    } else {
        char want[128];
        int src = source_of(c, r);
        if (src / 2 != r / 2) /* told by its data parallel peer */
            snprintf(want, sizeof want, "pipeline stage %d: data parallel rank %d failed in",
                     stage, src / 2);
        else
            snprintf(want, sizeof want, "pipeline stage %d: %sstage %d failed in", stage,
                     c->kind == K_STEP ? "" : "forward-only pass: ", src % 2);
        CHECK(strstr(a->e1, want) != NULL);
        /* and the source's error, its text carried over */
        snprintf(want, sizeof want,
                 "Stage %d's error: ", src / 2 != r / 2 ? c->fstage : src % 2);
        const char *said = strstr(a->e1, want), *own = all[src].e1;
        CHECK(said != NULL);
        if (said && own[0])
            CHECK(strncmp(said + strlen(want), own, 40) == 0);
    }
    if (c->kind != K_STEP) { /* the next pass runs, the stages agreeing */
        CHECK_STATUS(a->s2, LLMT_OK);
        CHECK(isfinite(a->loss) && a->loss > 0.0f);
        CHECK(a->loss == other);
        return;
    }
    CHECK(a->s2 != LLMT_OK);
    CHECK(a->t2 < quick);
    CHECK(strstr(a->e2, "remake the trainer and its pipeline communicator") != NULL);
    CHECK_STATUS(a->s3, LLMT_OK);
    CHECK(isfinite(a->loss) && a->loss > 0.0f);
    CHECK(a->loss == other);
}

static void run_case(const fcase *c)
{
    enum { MAXR = 4 };
    int n = 2 * c->dp;
    rank_arg a[MAXR];
    llmt_comm *world[MAXR] = {NULL};
    pthread_t th[MAXR];
    memset(a, 0, sizeof a);
    g_case++;
    g_timeout_ms = c->timeout_ms;
    if (!g_store[0]) {
        llmt_comm_opts co;
        llmt_comm_opts_init(&co, sizeof co);
        co.timeout_ms = c->timeout_ms;
        CHECK_STATUS(llmt_comm_create_inproc(NULL, n, &co, world), LLMT_OK);
    }
    for (int r = 0; r < n; r++) {
        a[r].world = world[r];
        a[r].rank = r;
        a[r].pp = 2;
        a[r].dp = c->dp;
        a[r].sched = c->sched;
        a[r].v = c->v;
        a[r].op = c->op;
        a[r].at = c->at;
        a[r].kind = c->kind;
        a[r].zero = c->zero;
        a[r].inject = c->only < 0 ? r % 2 == c->fstage : r == c->only;
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++)
        llmt_comm_destroy(world[r]);
    for (int r = 0; r < n; r++)
        check_rank(c, &a[r], a, a[r ^ 1].loss);
}

/* The mid-schedule cases (stage 0's GEMM, 120 s communicators). */
static void run(const char *name, int sched, int v, int dp)
{
    fcase c = {name, sched, v, dp, OP_GEMM, FAIL_AT, K_STEP, -1, 0, TIMEOUT_MS, 0};
    run_case(&c);
}

/* The cases no boundary message carries (10 s communicators); gloo: those
 * of pp 2 alone (groups() makes no data parallel group over the store). */
static void run_late(int gloo)
{
    static const fcase cs[] = {
        /* after stage 0's last send: its gradient norm (the clipping's) */
        {"norm", LLMT_PP_1F1B, 1, 1, OP_SUMSQ, 1, K_STEP, -1, 0, SHORT_MS, 0},
        {"norm dp", LLMT_PP_1F1B, 1, 2, OP_SUMSQ, 1, K_STEP, -1, 0, SHORT_MS, 0},
        {"norm one replica", LLMT_PP_1F1B, 1, 2, OP_SUMSQ, 1, K_STEP, 0, 0, SHORT_MS, 0},
        /* ZeRO-1 (the update's parameter gathers) */
        {"norm one replica zero 1", LLMT_PP_1F1B, 1, 2, OP_SUMSQ, 1, K_STEP, 0, 0, SHORT_MS, 1},
        /* its update */
        {"adamw", LLMT_PP_1F1B, 1, 1, OP_ADAMW, 1, K_STEP, -1, 0, SHORT_MS, 0},
        {"adamw interleaved", LLMT_PP_INTERLEAVED, 2, 1, OP_ADAMW, 1, K_STEP, -1, 0, SHORT_MS,
         0},
        /* one data parallel replica's stage 0 only, mid-schedule */
        {"one replica", LLMT_PP_1F1B, 1, 2, OP_GEMM, FAIL_AT, K_STEP, 0, 0, SHORT_MS, 0},
        {"one replica gpipe", LLMT_PP_GPIPE, 1, 2, OP_GEMM, FAIL_AT, K_STEP, 0, 0, SHORT_MS, 0},
        /* the forward-only passes */
        {"evaluate stage 0", LLMT_PP_1F1B, 1, 1, OP_GEMM, 2, K_EVAL, -1, 0, SHORT_MS, 0},
        {"evaluate last", LLMT_PP_1F1B, 1, 1, OP_GEMM, 2, K_EVAL, -1, 1, SHORT_MS, 0},
        {"evaluate v 2", LLMT_PP_INTERLEAVED, 2, 1, OP_GEMM, 5, K_EVAL, -1, 0, SHORT_MS, 0},
        {"generate last", LLMT_PP_1F1B, 1, 1, OP_GEMM, 6, K_GEN, -1, 1, SHORT_MS, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        if (!gloo || cs[i].dp == 1)
            run_case(&cs[i]);
}

/* mpi: this process is stage `rank` of pp 2 (under mpirun -np 2), case c
 * (on the world's 120 s communicators: checked against QUICK_S). */
static void run_mpi(llmt_comm *world, int rank, const fcase *c)
{
    rank_arg a;
    memset(&a, 0, sizeof a);
    a.world = world;
    a.rank = rank;
    a.pp = 2;
    a.dp = 1;
    a.sched = c->sched;
    a.v = c->v;
    a.inject = rank == c->fstage;
    a.op = c->op;
    a.at = c->at;
    a.kind = c->kind;
    rank_main(&a);
    /* the other stage's loss and error text, for the checks */
    rank_arg all[2];
    memset(all, 0, sizeof all);
    all[rank] = a;
    int32_t peer = 1 - rank;
    for (int k = 0; k < 2; k++) {
        if (k == rank) {
            CHECK_STATUS(llmt_comm_send(world, &a.loss, 1, LLMT_DTYPE_FP32, peer, NULL),
                         LLMT_OK);
            int32_t w[32];
            memcpy(w, a.e1, sizeof w);
            CHECK_STATUS(llmt_comm_send(world, w, 32, LLMT_DTYPE_INT32, peer, NULL), LLMT_OK);
        } else {
            CHECK_STATUS(llmt_comm_recv(world, &all[peer].loss, 1, LLMT_DTYPE_FP32, peer, NULL),
                         LLMT_OK);
            int32_t w[32];
            CHECK_STATUS(llmt_comm_recv(world, w, 32, LLMT_DTYPE_INT32, peer, NULL), LLMT_OK);
            memcpy(all[peer].e1, w, sizeof w);
        }
    }
    all[peer].e1[127] = '\0';
    check_rank(c, &a, all, all[peer].loss);
}

static void run_mpi_all(llmt_comm *world, int rank)
{
    static const fcase cs[] = {
        {"mpi 1f1b", LLMT_PP_1F1B, 1, 1, OP_GEMM, FAIL_AT, K_STEP, -1, 0, TIMEOUT_MS, 0},
        {"mpi norm", LLMT_PP_1F1B, 1, 1, OP_SUMSQ, 1, K_STEP, -1, 0, TIMEOUT_MS, 0},
        {"mpi adamw", LLMT_PP_1F1B, 1, 1, OP_ADAMW, 1, K_STEP, -1, 0, TIMEOUT_MS, 0},
        {"mpi evaluate last", LLMT_PP_1F1B, 1, 1, OP_GEMM, 2, K_EVAL, -1, 1, TIMEOUT_MS, 0},
        {"mpi generate last", LLMT_PP_1F1B, 1, 1, OP_GEMM, 6, K_GEN, -1, 1, TIMEOUT_MS, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        g_case++;
        run_mpi(world, rank, &cs[i]);
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "cpu";
    if (!strcmp(mode, "gloo")) {
        if (!(llmt_build_features() & LLMT_FEATURE_GLOO)) {
            printf("no Gloo in this build: skipped\n");
            return 77;
        }
        snprintf(g_store, sizeof g_store, "/tmp/llmt-ppfail-XXXXXX");
        if (!mkdtemp(g_store))
            return 1;
    } else if (strcmp(mode, "cpu") && strcmp(mode, "mpi")) {
        fprintf(stderr, "usage: test_pp_fail [cpu|gloo|mpi]\n");
        return 2;
    }
    g_ops = *llmt__dev_cpu();
    g_gemm = g_ops.gemm;
    g_ops.gemm = failing_gemm;
    g_sumsq = g_ops.sumsq;
    g_ops.sumsq = failing_sumsq;
    g_adamw = g_ops.adamw;
    g_ops.adamw = failing_adamw;
    llmt_model_config_init(&g_cfg, sizeof g_cfg);
    g_cfg.arch = LLMT_ARCH_GPT2;
    g_cfg.vocab_size = V;
    g_cfg.padded_vocab_size = V;
    g_cfg.max_seq_len = T;
    g_cfg.layers = 4;
    g_cfg.width = WIDTH;
    g_cfg.heads = 4;
    g_cfg.seed = 3;
    for (int i = 0; i < 2 * M * MICRO * T; i++) {
        g_in[i] = (int32_t)((i * 7 + 3) % V);
        g_tg[i] = (int32_t)((i * 5 + 1) % V);
    }
    if (!strcmp(mode, "mpi")) {
        llmt_comm_opts co;
        llmt_comm_opts_init(&co, sizeof co);
        co.timeout_ms = TIMEOUT_MS;
        llmt_comm *world = NULL;
        int32_t rank = 0, size = 0;
        CHECK_STATUS(llmt_comm_create_from_env(NULL, &co, &world), LLMT_OK);
        if (world && llmt_comm_rank(world, &rank) == LLMT_OK &&
            llmt_comm_size(world, &size) == LLMT_OK && size == 2)
            run_mpi_all(world, rank);
        else
            CHECK(!"mpi: run under mpirun -np 2");
        if (world)
            llmt_comm_finalize(world);
        llmt_comm_destroy(world);
        return check_exit("pp-fail-mpi");
    }
    if (g_store[0]) {
        run("gloo 1f1b", LLMT_PP_1F1B, 1, 1);
        run_late(1);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_store);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", g_store);
        return check_exit("pp-fail-gloo");
    }
    run("gpipe", LLMT_PP_GPIPE, 1, 1);
    run("1f1b", LLMT_PP_1F1B, 1, 1);
    run("interleaved v 2", LLMT_PP_INTERLEAVED, 2, 1);
    run("1f1b", LLMT_PP_1F1B, 1, 2);
    run_late(0);
    return check_exit("pp-fail");
}
