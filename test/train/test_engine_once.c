/* The trainer makes its engine once, from every group attached before the
 * first call that needs it (lib/train/trainer_build.c), so the order of
 * the attach calls does not matter: the same layout attached in different
 * orders trains exactly like the plan's order (tp, sequence parallelism,
 * cp, pp, dp, ep) and, within the parallel tests' bounds, like one rank.
 *
 * Ranks are threads on one in-process communicator; world rank r is TP
 * rank r % tp, CP rank (r / tp) % cp, stage (r / (tp cp)) % pp and DP rank
 * r / (tp cp pp) (TP innermost); the EP groups are consecutive DP ranks,
 * split off the DP group. Model: Llama, 2 layers, width 64, 4 heads (2
 * kv), sequences of 32, both layers MoE (4 experts of 32, top-2, one
 * shared expert, dropless: no capacity makes layouts route differently).
 * A step is 4 sequences, 2 micro-batches of 2 on one rank.
 *
 * Checks, 10 AdamW steps with clipping, per layout and order:
 *   - every rank's losses and final parameters bitwise equal to the same
 *     layout attached in the plan's order (the same engine, the same
 *     arithmetic: any other order that made a different engine, or
 *     dropped a group, shows);
 *   - losses within 1e-5 relative of one rank's; without a pipeline the
 *     final parameters within rank_fixture.h's bounds (1e-5 relative L2)
 *     of one rank's (a stage trains only its layers: the pipeline's
 *     parameters are held to one rank's by moe-tppp and device-pp);
 *   - orders that were refused while each attach made the engine again
 *     (tp after ep, cp after dp, pp after ep, dp before cp) are accepted. */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"
#include "rank_fixture.h"

#define STEPS 10
#define SEQS 4
#define MICRO 2
#define T 32
#define V 97
#define LR 2e-3f
#define MAXW 8

static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;

/* A layout and the order its groups are attached in: t tp, s sequence
 * parallelism, c cp, p pp, d dp, e ep. */
typedef struct lay {
    int tp, cp, pp, dp, ep;
    const char *order;
} lay;

typedef struct rank_arg {
    llmt_comm *world;
    int rank;
    lay L;
    float loss[STEPS];
    float *params;
    int64_t numel;
    int64_t param_bytes; /* llmt_pp_stats: the parameters the engine holds */
    int stages, cp_size; /* llmt_trainer_pp_stats, llmt_trainer_cp_stats */
    llmt_status st;
    char err[1024];
} rank_arg;

static llmt_status attach_in_order(llmt_trainer *tr, const lay *L, llmt_comm *const g[5])
{
    llmt_status s = LLMT_OK;
    for (const char *c = L->order; *c && s == LLMT_OK; c++) {
        if (*c == 't') {
            s = llmt_trainer_set_tp_comm(tr, g[0]);
        } else if (*c == 's') {
            s = llmt_trainer_set_sequence_parallel(tr, 1);
        } else if (*c == 'c') {
            s = llmt_trainer_set_cp_comm(tr, g[1], NULL);
        } else if (*c == 'p') {
            s = llmt_trainer_set_pp_comm(tr, g[2], NULL);
        } else if (*c == 'd') {
            llmt_dp_opts d;
            llmt_dp_opts_init(&d, sizeof d);
            s = llmt_trainer_set_comm(tr, g[3], &d);
        } else if (*c == 'e') {
            s = llmt_trainer_set_ep_comm(tr, g[4]);
        } else {
            s = LLMT_ERR_INTERNAL; /* a typo in the table below */
        }
    }
    return s;
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    const lay *L = &a->L;
    int tp = L->tp, cp = L->cp, pp = L->pp, r = a->rank;
    int tpr = r % tp, cpr = r / tp % cp, ppr = r / (tp * cp) % pp, dpr = r / (tp * cp * pp);
    llmt_comm *g[5] = {NULL};
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    a->st = LLMT_OK;
    if (a->world) { /* every rank makes every split, in the same order */
        a->st = llmt_comm_split(a->world, r / tp, tpr, &g[0]);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(a->world, tpr + tp * (r / (tp * cp)), cpr, &g[1]);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(a->world, r % (tp * cp) + tp * cp * dpr, ppr, &g[2]);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(a->world, r % (tp * cp * pp), dpr, &g[3]);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(g[3], dpr / L->ep, dpr, &g[4]);
    }
    llmt_trainer_opts o;
    rank_fixture_opts(&o, MICRO, SEQS / MICRO / L->dp, T, LR);
    if (a->st == LLMT_OK)
        a->st = rank_fixture_open(&g_cfg, &o, &m, &tr);
    if (a->st == LLMT_OK)
        a->st = attach_in_order(tr, L, g);
    for (int k = 0; k < STEPS && a->st == LLMT_OK; k++) {
        size_t at = ((size_t)k * SEQS + (size_t)dpr * (SEQS / L->dp)) * T;
        llmt_batch b = {sizeof b, g_in + at, g_tg + at, SEQS / L->dp, T};
        a->st = rank_fixture_step(tr, &b, &a->loss[k]);
    }
    llmt_pp_stats ps;
    llmt_cp_stats cs;
    memset(&ps, 0, sizeof ps);
    memset(&cs, 0, sizeof cs);
    ps.struct_size = sizeof ps;
    cs.struct_size = sizeof cs;
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_pp_stats(tr, &ps);
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_cp_stats(tr, &cs);
    a->param_bytes = ps.param_bytes;
    a->stages = ps.stages;
    a->cp_size = cs.size;
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr);
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m,
                       a->st == LLMT_OK ? &a->params : NULL, &a->numel);
    for (int i = 4; i >= 0; i--)
        llmt_comm_destroy(g[i]);
    return NULL;
}

static int ranks(const lay *L)
{
    return L->tp * L->cp * L->pp * L->dp;
}

static void run(const lay *L, rank_arg *a)
{
    int n = ranks(L);
    memset(a, 0, (size_t)n * sizeof *a);
    for (int r = 0; r < n; r++) {
        a[r].L = *L;
        a[r].rank = r;
    }
    rank_fixture_run(a, sizeof *a, n, n > 1, offsetof(rank_arg, world), rank_main);
    for (int r = 0; r < n; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "order %s rank %d: %s\n", L->order, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
    }
}

static void free_run(rank_arg *a, int n)
{
    for (int r = 0; r < n; r++)
        free(a[r].params);
}

/* The groups took effect: CP and PP sizes as asked, and the engine holds
 * less than one rank's parameters where tp, pp or ep split them. */
static void check_applied(const lay *L, const rank_arg *a, const rank_arg *ref)
{
    for (int r = 0; r < ranks(L); r++) {
        if (a[r].st != LLMT_OK)
            continue;
        CHECK_EQ_INT(a[r].cp_size, L->cp);
        CHECK_EQ_INT(a[r].stages, L->pp);
        if (L->tp > 1 || L->pp > 1 || L->ep > 1)
            CHECK(a[r].param_bytes < ref->param_bytes);
    }
}

/* Layout L in the plan's order (orders[0]) and in the others, each
 * against it and against one rank (ref). */
static void check_orders(const char *name, lay L, const char *const *orders, int n_orders,
                         const rank_arg *ref)
{
    int n = ranks(&L);
    rank_arg canon[MAXW], a[MAXW];
    L.order = orders[0];
    run(&L, canon);
    check_applied(&L, canon, ref);
    rank_fixture_worst w = {0, 0, 0, 0};
    for (int r = 0; r < n; r++) {
        if (canon[r].st != LLMT_OK || ref->st != LLMT_OK)
            continue;
        rank_fixture_losses(&w, canon[r].loss, ref->loss, 0, STEPS, 0);
        if (L.pp == 1)
            rank_fixture_params_check(&w, canon[r].params, canon[r].numel, ref->params,
                                      ref->numel, 0, 0);
    }
    printf("%s, order %s: losses %.3g relative, params %.3g relative L2 of one rank's\n", name,
           orders[0], w.loss, w.rel);
    for (int k = 1; k < n_orders; k++) {
        L.order = orders[k];
        run(&L, a);
        check_applied(&L, a, ref);
        int same = 1;
        for (int r = 0; r < n; r++) {
            if (a[r].st != LLMT_OK || canon[r].st != LLMT_OK)
                continue;
            same &= !memcmp(a[r].loss, canon[r].loss, sizeof a[r].loss);
            same &= a[r].numel == canon[r].numel &&
                    !memcmp(a[r].params, canon[r].params, (size_t)a[r].numel * sizeof(float));
        }
        CHECK(same);
        printf("%s, order %s: %s order %s's\n", name, orders[k],
               same ? "equal to" : "DIFFERS from", orders[0]);
        free_run(a, n);
    }
    free_run(canon, n);
}

int main(void)
{
    tp_fixture_data((size_t)STEPS * SEQS * T, V, &g_in, &g_tg);
    tp_fixture_config(&g_cfg, 1, 2, V, T);
    g_cfg.moe_experts = 4;
    g_cfg.moe_top_k = 2;
    g_cfg.moe_ffn = 32;
    g_cfg.moe_shared_experts = 1;
    g_cfg.moe_dropless = 1;
    g_cfg.seed = 3; /* no routing tie within rounding (test_moe_tpcp.c) */
    rank_arg ref;
    lay one = {1, 1, 1, 1, 1, ""};
    run(&one, &ref);
    /* expert parallelism first or last, around tensor and data parallelism */
    static const char *const tpdpep[] = {"tde", "etd", "dte", "edt"};
    check_orders("tp 2 x dp 2 x ep 2", (lay){2, 1, 1, 2, 2, NULL}, tpdpep, 4, &ref);
    /* data before context parallelism, ep in between */
    static const char *const cpdp[] = {"cde", "dce", "ecd"};
    check_orders("cp 2 x dp 2 x ep 2", (lay){1, 2, 1, 2, 2, NULL}, cpdp, 3, &ref);
    /* the pipeline before tensor and sequence parallelism */
    static const char *const tppp[] = {"tsp", "pts", "tps"};
    check_orders("tp 2 SP x pp 2", (lay){2, 1, 2, 1, 1, NULL}, tppp, 3, &ref);
    /* the pipeline after expert and data parallelism */
    static const char *const ppep[] = {"pde", "edp", "dep"};
    check_orders("pp 2 x dp 2 x ep 2", (lay){1, 1, 2, 2, 2, NULL}, ppep, 3, &ref);
    free_run(&ref, 1);
    free(g_in);
    free(g_tg);
    return check_exit("engine-once");
}
