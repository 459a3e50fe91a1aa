/* The pipeline's measured bubble against the planner's (issue 17): pp 2,
 * stages as threads over an in-process communicator, fp32 CPU engine, on
 * a model whose layers take equal times and whose embedding and head are
 * small (width 256, T 64, micro 4, vocabulary 64: the head is about 1/40
 * of a layer's work), 4 layers split 2 + 2 (v 2: 1 + 1 + 1 + 1).
 *
 * What is measured (lib/train/pp.c, "the bubble in compute time"): every
 * stage's share of the step's span it did not compute, on clocks that run
 * on each op's thread CPU time and move on to a message's stamp when it
 * arrives later: the wait each stage would have with a core of its own,
 * for the real op lists, op costs and messages. Wall time is printed too
 * (with the load average) but not checked: on this shared 2-core machine
 * it moves by tens of points with the load (doc/parallelism.md).
 *
 *   1F1B m 2, 4, 8 and interleaved v 2 m 2, 4, 8: every stage within 5
 *   points of the plan's bubble_fraction, (p-1)/(m+p-1) or
 *   (p-1)/(v m+p-1) (the median of steps 2-8, the first warming caches,
 *   over those whose stages computed for equal CPU times: see BALANCE);
 *   GPipe m 4: within 3 points of 1F1B m 4 (the same bubble, more memory);
 *   interleaved m 4 below 1F1B m 4 by at least half the planned gap;
 *   uneven stages (3 + 1 layers, 1F1B m 4): stage 1 idles at least 20
 *   points more than the plan's balanced bubble (the clock sees the
 *   imbalance, so it is not the formula read back).
 * Timing-based, a minute or two on a loaded machine: slow suite. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "stage_fixture.h"
#include "train/device.h"
#include "train/pp.h"

#define STEPS 8
#define MICRO 4
#define T 64
#define V 64
#define MAXM 8

static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;

typedef struct stage_arg {
    llmt_comm *c;
    int sched, v, m;
    const int32_t *layers; /* per stage, or NULL: the balance */
    double cpu[STEPS][2];  /* busy, span (thread CPU seconds) */
    double wall[STEPS];    /* llmt_pp_stats.bubble */
    llmt_status st;
    char err[512];
} stage_arg;

static void *stage_main(void *p)
{
    stage_arg *a = p;
    llmt_model *md = NULL;
    llmt_trainer *tr = NULL;
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = MICRO;
    o.grad_accum = a->m;
    o.seq_len = T;
    o.threads = 1; /* the stage computes on its own thread: its CPU time */
    a->st = stage_fixture_open(&g_cfg, &o, llmt__dev_cpu(), &md, &tr);
    llmt_pp_opts po;
    stage_fixture_pp_opts(&po, a->sched, a->v, a->layers, 2);
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_set_pp_comm(tr, a->c, &po);
    for (int k = 0; k < STEPS && a->st == LLMT_OK; k++) {
        llmt_batch b = {sizeof b, g_in, g_tg, a->m * MICRO, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        a->st = llmt_trainer_step(tr, &b, &met);
        llmt_pp_stats ps;
        memset(&ps, 0, sizeof ps);
        ps.struct_size = sizeof ps;
        if (a->st == LLMT_OK)
            a->st = llmt_trainer_pp_stats(tr, &ps);
        /* the public numbers are the engine's */
        llmt__pp_info pi;
        memset(&pi, 0, sizeof pi);
        if (a->st == LLMT_OK &&
            (!llmt__trainer_pp_info(tr, &pi) || pi.busy_cpu_s != ps.busy_cpu_seconds ||
             pi.span_cpu_s != ps.span_cpu_seconds))
            a->st = LLMT_ERR_INTERNAL;
        a->cpu[k][0] = ps.busy_cpu_seconds;
        a->cpu[k][1] = ps.span_cpu_seconds;
        a->wall[k] = ps.bubble;
    }
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, md, NULL, NULL);
    return NULL;
}

/* The median of steps 2..STEPS, of those use[] marks (NULL: all). */
static double median(const double *x, const int *use)
{
    double b[STEPS - 1];
    int n = 0;
    for (int k = 1; k < STEPS; k++)
        if (!use || use[k])
            b[n++] = x[k];
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (b[j] < b[i]) {
                double t = b[i];
                b[i] = b[j];
                b[j] = t;
            }
    return n % 2 ? b[n / 2] : 0.5 * (b[n / 2 - 1] + b[n / 2]);
}

/* The plan's formula holds for stages of equal work that take equal
 * time. The clock counts each op's thread CPU time, and on a shared
 * machine an op whose core's neighbour runs a cache- and memory-heavy
 * phase takes more CPU time for the same work: the other stage then
 * waits longer and its bubble moves with the imbalance (measured with
 * two runs of this test and a GEMM loop beside: busy ratios of 0.94-1.05
 * moved a stage by up to 3 points at m 2; one case's median 3.2 points
 * off). So a balanced case's median is over the steps whose two stages'
 * busy times are within BALANCE of each other, where at least MIN_EQUAL
 * of the 7 are; else over all (and said). When fewer are, the machine
 * broke the premise for most of the case (seen once with a build
 * relinking ~100 programs beside it: stage 1's busy time 18% above stage
 * 0's in every step, interleaved m 2 +12 points), so a balanced case is
 * measured again, up to TRIES times, before its median is checked. */
#define BALANCE 0.03
#define MIN_EQUAL 3
#define TRIES 3

/* The plan's bubble_fraction for pp 2 with v chunks and m micro-batches. */
static double planned(int sched, int v, int m)
{
    char json[600];
    snprintf(json, sizeof json,
             "{\"model\": {\"arch\": \"gpt2\", \"layers\": 4, \"hidden\": 256, "
             "\"heads\": 4, \"vocab\": %d, \"seq_len\": %d}, \"parallelism\": {\"pp\": 2, "
             "\"virtual_stages\": %d, \"pp_schedule\": \"%s\"}, \"batch\": {\"micro\": %d, "
             "\"grad_accum\": %d}, \"train\": {\"device\": \"cpu\"}, "
             "\"hardware\": {\"gpu\": \"cpu\"}}",
             V, T, v,
             sched == LLMT_PP_GPIPE  ? "gpipe"
             : sched == LLMT_PP_1F1B ? "1f1b"
                                     : "interleaved",
             MICRO, m);
    llmt_spec *sp = NULL;
    llmt_plan *pl = NULL;
    llmt_plan_estimate e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    e.bubble_fraction = -1.0;
    CHECK_STATUS(llmt_spec_parse_json(NULL, json, strlen(json), &sp), LLMT_OK);
    if (sp)
        CHECK_STATUS(llmt_plan_create(NULL, sp, 2, &pl), LLMT_OK);
    if (pl)
        CHECK_STATUS(llmt_plan_get_estimate(pl, &e), LLMT_OK);
    llmt_plan_destroy(pl);
    llmt_spec_destroy(sp);
    return e.bubble_fraction;
}

typedef struct result {
    double cpu[2], wall[2], plan; /* per stage: medians */
    double steps[2][STEPS];       /* per stage: every step's compute-time bubble */
    int balanced;                 /* at least MIN_EQUAL steps with equal stages */
} result;

static const char *name_of(int sched)
{
    return sched == LLMT_PP_GPIPE ? "gpipe" : sched == LLMT_PP_1F1B ? "1f1b" : "interleaved";
}

static int run(int sched, int v, int m, const int32_t *layers, result *out)
{
    llmt_comm *c[2] = {NULL, NULL};
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 2, NULL, c), LLMT_OK);
    stage_arg a[2];
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].c = c[r];
        a[r].sched = sched;
        a[r].v = v;
        a[r].m = m;
        a[r].layers = layers;
        pthread_create(&th[r], NULL, stage_main, &a[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    llmt_comm_destroy(c[0]);
    llmt_comm_destroy(c[1]);
    int ok = 1;
    for (int r = 0; r < 2; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s v %d m %d stage %d: %s\n", name_of(sched), v, m, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        ok = ok && a[r].st == LLMT_OK;
    }
    if (!ok)
        return 0;
    int equal[STEPS], nequal = 0;
    for (int k = 0; k < STEPS; k++) {
        double b0 = a[0].cpu[k][0], b1 = a[1].cpu[k][0];
        equal[k] = !layers && b0 > 0.0 && fabs(b1 / b0 - 1.0) <= BALANCE;
        nequal += k > 0 && equal[k];
    }
    const int *use = nequal >= MIN_EQUAL ? equal : NULL;
    out->balanced = use != NULL;
    for (int r = 0; r < 2; r++) {
        double b[STEPS];
        for (int k = 0; k < STEPS; k++) {
            CHECK(a[r].cpu[k][1] > 0.0 && a[r].cpu[k][0] <= a[r].cpu[k][1]);
            /* every stage agrees on the span */
            CHECK(a[r].cpu[k][1] == a[1 - r].cpu[k][1]);
            b[k] = a[r].cpu[k][1] > 0.0 ? 1.0 - a[r].cpu[k][0] / a[r].cpu[k][1] : -1.0;
            out->steps[r][k] = b[k];
        }
        out->cpu[r] = median(b, use);
        out->wall[r] = median(a[r].wall, NULL);
    }
    out->plan = planned(sched, v, m);
    double load[1] = {0.0};
    getloadavg(load, 1);
    char over[80] = "";
    if (!layers)
        snprintf(over, sizeof over, ", over %d of %d steps%s", use ? nequal : STEPS - 1,
                 STEPS - 1, use ? " with equal stages" : " (too few with equal stages)");
    printf("bubble, pp 2 %-11s v %d m %d%s: compute-time %.3f, %.3f (stages 0, 1), planned "
           "%.3f (%+.1f, %+.1f points%s); wall %.3f, %.3f at load %.1f\n",
           name_of(sched), v, m, layers ? " layers 3,1" : "", out->cpu[0], out->cpu[1],
           out->plan, 100 * (out->cpu[0] - out->plan), 100 * (out->cpu[1] - out->plan), over,
           out->wall[0], out->wall[1], load[0]);
    return 1;
}

/* A case whose median missed: every step's bubble of both stages, so a
 * failure on a loaded machine shows whether one step or all moved. */
static void explain(const char *what, const result *r)
{
    for (int s = 0; s < 2; s++) {
        fprintf(stderr, "%s, stage %d, steps 1-%d (the first not counted):", what, s, STEPS);
        for (int k = 0; k < STEPS; k++)
            fprintf(stderr, " %.3f", r->steps[s][k]);
        fprintf(stderr, " (planned %.3f)\n", r->plan);
    }
}

int main(void)
{
    llmt_model_config_init(&g_cfg, sizeof g_cfg);
    g_cfg.arch = LLMT_ARCH_GPT2;
    g_cfg.vocab_size = V;
    g_cfg.padded_vocab_size = V;
    g_cfg.max_seq_len = T;
    g_cfg.layers = 4;
    g_cfg.width = 256;
    g_cfg.heads = 4;
    g_cfg.seed = 5;
    size_t n = (size_t)MAXM * MICRO * T;
    g_in = malloc(n * sizeof *g_in);
    g_tg = malloc(n * sizeof *g_tg);
    if (!g_in || !g_tg)
        return 1;
    for (size_t i = 0; i < n; i++) {
        g_in[i] = (int32_t)((i * 7 + 3) % V);
        g_tg[i] = (int32_t)((i * 5 + 1) % V);
    }
    static const struct {
        int sched, v, m;
    } cases[] = {{LLMT_PP_1F1B, 1, 2},        {LLMT_PP_1F1B, 1, 4},
                 {LLMT_PP_1F1B, 1, 8},        {LLMT_PP_INTERLEAVED, 2, 2},
                 {LLMT_PP_INTERLEAVED, 2, 4}, {LLMT_PP_INTERLEAVED, 2, 8}};
    result res[6], gp, un;
    int ok[6];
    for (int k = 0; k < 6; k++) {
        ok[k] = run(cases[k].sched, cases[k].v, cases[k].m, NULL, &res[k]);
        for (int t = 1; t < TRIES && ok[k] && !res[k].balanced; t++) {
            printf("  (stages unequal in most steps: measured again, try %d of %d)\n", t + 1,
                   TRIES);
            ok[k] = run(cases[k].sched, cases[k].v, cases[k].m, NULL, &res[k]);
        }
        int near = 1;
        for (int r = 0; ok[k] && r < 2; r++) {
            int in = res[k].cpu[r] >= res[k].plan - 0.05 && res[k].cpu[r] <= res[k].plan + 0.05;
            CHECK(in);
            near &= in;
        }
        if (!near) {
            char what[64];
            snprintf(what, sizeof what, "%s v %d m %d", name_of(cases[k].sched), cases[k].v,
                     cases[k].m);
            explain(what, &res[k]);
        }
    }
    /* GPipe idles as 1F1B does; interleaving less */
    if (run(LLMT_PP_GPIPE, 1, 4, NULL, &gp) && ok[1]) {
        int near = gp.cpu[0] >= res[1].cpu[0] - 0.03 && gp.cpu[0] <= res[1].cpu[0] + 0.03;
        CHECK(near);
        if (!near) {
            explain("gpipe m 4", &gp);
            explain("1f1b m 4", &res[1]);
        }
    }
    if (ok[1] && ok[4]) {
        int below = res[1].cpu[0] - res[4].cpu[0] >= 0.5 * (res[1].plan - res[4].plan);
        CHECK(below);
        if (!below) {
            explain("1f1b m 4", &res[1]);
            explain("interleaved m 4", &res[4]);
        }
    }
    /* an uneven split: the clock sees stage 1 wait for stage 0 */
    static const int32_t uneven[2] = {3, 1};
    if (run(LLMT_PP_1F1B, 1, 4, uneven, &un)) {
        CHECK(un.cpu[1] >= un.plan + 0.20);
        if (un.cpu[1] < un.plan + 0.20)
            explain("1f1b m 4 layers 3,1", &un);
    }
    free(g_in);
    free(g_tg);
    return check_exit("pp-bubble");
}
