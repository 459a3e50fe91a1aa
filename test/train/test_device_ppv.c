/* Interleaved pipeline parallelism (Megatron-LM's virtual stages; the op
 * lists of lib/plan/pp_sched.c run by lib/train/pp.c) against the
 * single-rank engine on the same batches, fp32 CPU backend, stages as
 * threads over an in-process communicator.
 *
 *   test_device_ppv quick (unit suite): GPT-2 (tied head) and Llama, pp 2
 *   and 4, v 2 and 3, m in {pp, 2 pp, 4 pp} (m == pp: Megatron's all
 *   forwards first), even chunks and uneven ones given per virtual stage
 *   (7 layers as 2,2,2,1 on pp 2 x v 2) or balanced (7 on pp 3 x v 2).
 *   test_device_ppv full (slow suite): the matrix, GPT-2 and Llama
 *   x pp 2, 4 x m pp, 2pp, 4pp x GPipe, 1F1B (v 1) and interleaved (v 1,
 *   2), plus 7 layers on 4 stages (v 1, uneven 1,2,3,1) under each.
 *
 * Ten AdamW steps each, clipping on: per-step losses within 1e-5
 * relative on every stage, the final parameters (each from the stage of
 * its chunk) within 1e-5 relative L2 and 1e-4 absolute
 * (test_device_pp.c explains the bounds: each chunk accumulates its
 * gradients in the single-rank order, so only the norm's summation order
 * and a tied wte's two-stage sum differ); then evaluate (a forward-only
 * pass through the chunks) gives every stage the single rank's loss
 * within 1e-5 relative. Also the activation sets: a
 * stage holds the schedule's in-flight count (pp_sched.h), and stage 0 of
 * pp 2 x v 2 m 4 holds fewer bytes of activations than under GPipe and
 * more than under 1F1B, as the formulas say. */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "stage_fixture.h"
#include "plan/plan.h"
#include "train/device.h"
#include "train/pp.h"

#define STEPS 10
#define MICRO 2
#define MAXM 16
#define T 16
#define V 97
#define LR 1e-3f
#define MAXPP 4

static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static double g_worst_loss, g_worst_param;

typedef struct rank_arg {
    llmt_comm *c;
    /* tp x pp: the world (rank = tp rank + tp x stage), split here into
     * the stage's TP group and the pipeline of its TP rank */
    llmt_comm *world;
    int tp, tpr, sp;
    int rank, pp, v, m, sched;
    const int32_t *layers;  /* per virtual stage, or NULL: the balance */
    float loss[STEPS], val; /* val: evaluate on the first batch after training */
    float *params;
    int64_t numel, act_bytes;
    llmt_pp_stats ps;
    llmt_status st;
    char err[1024];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_trainer_opts o;
    rank_fixture_opts(&o, MICRO, a->m, T, LR);
    a->st = stage_fixture_open(&g_cfg, &o, llmt__dev_cpu(), &m, &tr);
    llmt_comm *tpc = NULL;
    if (a->st == LLMT_OK && a->world) {
        a->st = llmt_comm_split(a->world, a->rank, a->tpr, &tpc);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(a->world, a->tpr, a->rank, &a->c);
        if (a->st == LLMT_OK)
            a->st = llmt_trainer_set_tp_comm(tr, tpc);
        if (a->st == LLMT_OK && a->sp)
            a->st = llmt_trainer_set_sequence_parallel(tr, 1);
    }
    if (a->st == LLMT_OK && a->c) {
        llmt_pp_opts po;
        stage_fixture_pp_opts(&po, a->sched, a->v, a->layers, a->pp * a->v);
        a->st = llmt_trainer_set_pp_comm(tr, a->c, &po);
    }
    if (a->st == LLMT_OK)
        a->st = stage_fixture_steps(tr, g_in, g_tg, 0, STEPS, 1, 0, a->m, MICRO, T, a->loss);
    if (a->st == LLMT_OK) { /* a forward-only pass through the chunks */
        llmt_batch b = {sizeof b, g_in, g_tg, a->m * MICRO, T};
        a->st = llmt_trainer_evaluate(tr, &b, &a->val);
    }
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr);
    rank_fixture_pp_stats(tr, &a->st, &a->ps, &a->act_bytes);
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m, &a->params, &a->numel);
    if (a->world) {
        llmt_comm_destroy(a->c);
        llmt_comm_destroy(tpc);
    }
    return NULL;
}

static void run(int pp, int v, int m, int sched, const int32_t *layers, rank_arg *a)
{
    memset(a, 0, (size_t)pp * sizeof *a);
    for (int r = 0; r < pp; r++) {
        a[r].rank = r;
        a[r].pp = pp;
        a[r].v = v;
        a[r].m = m;
        a[r].sched = sched;
        a[r].layers = layers;
    }
    rank_fixture_run(a, sizeof *a, pp, pp > 1, offsetof(rank_arg, c), rank_main);
}

static void free_args(rank_arg *a, int n)
{
    for (int r = 0; r < n; r++)
        free(a[r].params);
}

static const char *sched_name(int s)
{
    return s == LLMT_PP_GPIPE ? "gpipe" : s == LLMT_PP_1F1B ? "1f1b" : "interleaved";
}

static void compare(int llama, int layers, int pp, int v, int m, int sched,
                    const int32_t *split)
{
    tp_fixture_config(&g_cfg, llama, 2, V, T);
    g_cfg.layers = layers;
    rank_arg ref[1], a[MAXPP];
    run(1, 1, m, sched, NULL, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    run(pp, v, m, sched, split, a);
    rank_fixture_worst wl = {0};
    int ok = ref[0].st == LLMT_OK;
    for (int r = 0; r < pp; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s %s pp %d v %d m %d rank %d: %s\n", llama ? "llama" : "gpt2",
                    sched_name(sched), pp, v, m, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        ok = ok && a[r].st == LLMT_OK;
        if (a[r].st == LLMT_OK)
            rank_fixture_losses(&wl, a[r].loss, ref[0].loss, 0, STEPS, 0);
        if (a[r].st == LLMT_OK)
            CHECK(fabs((double)a[r].val - ref[0].val) <= 1e-5 * fabs((double)ref[0].val));
    }
    int first[4 * MAXPP + 1];
    llmt_err e = {0};
    CHECK_STATUS(llmt__pp_layout(&e, &g_cfg, T, pp * v, split, split ? pp * v : 0, first),
                 LLMT_OK);
    if (!ok) {
        free_args(ref, 1);
        free_args(a, pp);
        return;
    }
    /* a stage's layers and sets: its chunks' sum; the schedule's count */
    for (int r = 0; r < pp; r++) {
        int held = 0;
        for (int c = 0; c < v; c++)
            held += first[c * pp + r + 1] - first[c * pp + r];
        CHECK(a[r].ps.layers == held && a[r].ps.first_layer == first[r]);
        CHECK_EQ_INT(a[r].ps.in_flight, llmt__pp_inflight(sched, v, m, pp, r));
    }
    /* the final parameters, each from the stage of its virtual stage */
    float *params[MAXPP];
    for (int r = 0; r < pp; r++)
        params[r] = a[r].params;
    double wp = 0.0;
    double rel = rank_fixture_stage_diff(&g_cfg, first, pp * v, pp, params, ref[0].params, &wp);
    CHECK(rel <= 1e-5);
    CHECK(wp <= 1e-4);
    CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
    char lay[96] = "";
    for (int j = 0; j < pp * v; j++)
        snprintf(lay + strlen(lay), sizeof lay - strlen(lay), "%s%d", j ? "," : "",
                 first[j + 1] - first[j]);
    printf("%-5s %-11s pp %d v %d m %2d layers %-16s: loss %.3f -> %.3f, rel diff %.2e; "
           "params rel L2 %.2e, max abs %.2e; stage 0 sets %d\n",
           llama ? "llama" : "gpt2", sched_name(sched), pp, v, m, lay, (double)ref[0].loss[0],
           (double)ref[0].loss[STEPS - 1], wl.loss, rel, wp, (int)a[0].ps.in_flight);
    if (wl.loss > g_worst_loss)
        g_worst_loss = wl.loss;
    if (wp > g_worst_param)
        g_worst_param = wp;
    free_args(ref, 1);
    free_args(a, pp);
}

/* Stage 0's activation bytes, pp 2 m 4 on 4 layers: GPipe holds 4 sets of
 * its 2 layers, 1F1B 2, interleaved v 2 (chunks of 1 layer) 2 (p - 1) +
 * p + 1 = 5 sets of 1 layer: between the two. */
static void check_memory(void)
{
    tp_fixture_config(&g_cfg, 0, 2, V, T);
    g_cfg.layers = 4;
    rank_arg g[2], f[2], i[2];
    run(2, 1, 4, LLMT_PP_GPIPE, NULL, g);
    run(2, 1, 4, LLMT_PP_1F1B, NULL, f);
    run(2, 2, 4, LLMT_PP_INTERLEAVED, NULL, i);
    for (int r = 0; r < 2; r++)
        CHECK(g[r].st == LLMT_OK && f[r].st == LLMT_OK && i[r].st == LLMT_OK);
    CHECK_EQ_INT(i[0].ps.in_flight, 5);
    CHECK(i[0].act_bytes < g[0].act_bytes && i[0].act_bytes > f[0].act_bytes);
    printf("activations, stage 0 of pp 2 m 4: GPipe %lld bytes, 1F1B %lld, interleaved v 2 "
           "%lld\n",
           (long long)g[0].act_bytes, (long long)f[0].act_bytes, (long long)i[0].act_bytes);
    free_args(g, 2);
    free_args(f, 2);
    free_args(i, 2);
}

/* tp 2 x pp 2 x v 2 (four threads; with sequence parallelism or not)
 * against one rank: every rank's losses within 1e-5 relative, the
 * parameters (each from TP rank 0 of the stage of its chunk: sync_params
 * gathers the stage's tensors over its TP group) within 1e-5 relative L2
 * and 1e-4 absolute (test_device_tp.c's bounds: TP changes the order of
 * the sums). */
static void compare_tp(int llama, int layers, int m, int sp)
{
    enum { TP = 2, PP = 2, VS = 2 };
    tp_fixture_config(&g_cfg, llama, 2, V, T);
    g_cfg.layers = layers;
    rank_arg ref[1], a[TP * PP];
    run(1, 1, m, LLMT_PP_INTERLEAVED, NULL, ref);
    memset(a, 0, sizeof a);
    for (int r = 0; r < TP * PP; r++) {
        a[r].tp = TP;
        a[r].tpr = r % TP;
        a[r].sp = sp;
        a[r].rank = r / TP;
        a[r].pp = PP;
        a[r].v = VS;
        a[r].m = m;
        a[r].sched = LLMT_PP_INTERLEAVED;
    }
    rank_fixture_run(a, sizeof *a, TP * PP, 1, offsetof(rank_arg, world), rank_main);
    rank_fixture_worst wl = {0};
    double wp = 0.0, rel = 0.0;
    int ok = ref[0].st == LLMT_OK;
    for (int r = 0; r < TP * PP; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "tp 2 x pp 2 x v 2 rank %d: %s\n", r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        ok = ok && a[r].st == LLMT_OK;
        if (a[r].st == LLMT_OK)
            rank_fixture_losses(&wl, a[r].loss, ref[0].loss, 0, STEPS, 0);
    }
    int first[PP * VS + 1];
    llmt_err e = {0};
    CHECK_STATUS(llmt__pp_layout(&e, &g_cfg, T, PP * VS, NULL, 0, first), LLMT_OK);
    if (ok) {
        /* each stage's parameters from its first tensor-parallel rank */
        float *params[PP];
        for (int st = 0; st < PP; st++)
            params[st] = a[st * TP].params;
        rel = rank_fixture_stage_diff(&g_cfg, first, PP * VS, PP, params, ref[0].params, &wp);
        CHECK(rel <= 1e-5);
        CHECK(wp <= 1e-4);
    }
    printf("%-5s tp 2 x pp 2 x v 2%s m %d: loss rel diff %.2e; params rel L2 %.2e, max abs "
           "%.2e\n",
           llama ? "llama" : "gpt2", sp ? " (sp)" : "", m, wl.loss, rel, wp);
    if (wl.loss > g_worst_loss)
        g_worst_loss = wl.loss;
    if (wp > g_worst_param)
        g_worst_param = wp;
    free_args(ref, 1);
    free_args(a, TP * PP);
}

/* The planner's model of the engine's stage memory (lib/plan/engine.c,
 * llmt__plan_engine_stage_act: the schedule's in-flight sets, by the
 * planner's own formulas, of the stage's longest chunk, plus scratch and
 * the trainer's window) against the activations stage 0 reports
 * (llmt_trainer_memory), to the byte: GPT-2 and Llama (ffn 176), GPipe,
 * 1F1B and interleaved, pp 2 and 4. */
static void check_plan_memory(void)
{
    static const struct {
        int llama, layers, pp, v, m, gpipe;
    } cases[] = {{0, 4, 2, 1, 4, 0}, {0, 4, 2, 2, 4, 0}, {1, 8, 4, 2, 8, 0},
                 {1, 8, 4, 1, 8, 0}, {1, 4, 2, 2, 2, 0}, {0, 7, 2, 2, 8, 0},
                 {0, 4, 2, 1, 4, 1}, {1, 8, 4, 1, 8, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int llama = cases[k].llama, pp = cases[k].pp, v = cases[k].v, m = cases[k].m;
        tp_fixture_config(&g_cfg, llama, 2, V, T);
        g_cfg.layers = cases[k].layers;
        g_cfg.ffn_hidden = llama ? 176 : 0;
        rank_arg a[MAXPP];
        int sched = cases[k].gpipe ? LLMT_PP_GPIPE : v > 1 ? LLMT_PP_INTERLEAVED : LLMT_PP_1F1B;
        run(pp, v, m, sched, NULL, a);
        char json[1024];
        snprintf(
            json, sizeof json,
            "{\"model\": {\"arch\": \"%s\", \"layers\": %d, \"hidden\": 64, "
            "\"heads\": 4%s, \"ffn\": %d, \"vocab\": %d, \"seq_len\": %d}, "
            "\"parallelism\": {\"pp\": %d, \"virtual_stages\": %d, \"pp_schedule\": \"%s\"}, "
            "\"batch\": {\"micro\": %d, \"grad_accum\": %d}, "
            "\"train\": {\"device\": \"cpu\"}}",
            llama ? "llama" : "gpt2", cases[k].layers, llama ? ", \"kv_heads\": 2" : "",
            llama ? 176 : 256, V, T, pp, v,
            cases[k].gpipe ? "gpipe"
            : v > 1        ? "interleaved"
                           : "1f1b",
            MICRO, m);
        llmt_spec *sp = NULL;
        CHECK_STATUS(llmt_spec_parse_json(NULL, json, strlen(json), &sp), LLMT_OK);
        if (sp && a[0].st == LLMT_OK) {
            double plan = llmt__plan_engine_stage_act(sp, 0);
            double err = (plan - (double)a[0].act_bytes) / (double)a[0].act_bytes;
            printf("stage 0 activations, %s %d layers %s pp %d v %d m %d: measured %lld bytes, "
                   "planned %.0f (%+.1f%%)\n",
                   llama ? "llama" : "gpt2", cases[k].layers, sched_name(sched), pp, v, m,
                   (long long)a[0].act_bytes, plan, 100 * err);
            CHECK(plan == (double)a[0].act_bytes);
        }
        CHECK_STATUS(a[0].st, LLMT_OK);
        llmt_spec_destroy(sp);
        free_args(a, pp);
    }
    g_cfg.ffn_hidden = 0;
}

/* Refused naming the key: more virtual stages than layers, a layer list
 * of pp (not pp x v) entries, m not a multiple of pp. */
static void check_bad(void)
{
    tp_fixture_config(&g_cfg, 1, 2, V, T);
    g_cfg.layers = 4;
    struct {
        int v, m, n;
        const char *key;
    } cases[] = {{4, 4, 0, "parallelism.virtual_stages"},
                 {2, 4, 2, "parallelism.stage_layers"},
                 {2, 3, 0, "train.grad_accum"},
                 {2, 1, 0, "train.grad_accum"}};
    static const int32_t two[2] = {2, 2};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        llmt_model *m = NULL;
        llmt_trainer *tr = NULL;
        CHECK_STATUS(llmt_model_create(NULL, &g_cfg, &m), LLMT_OK);
        llmt_trainer_opts o;
        llmt_trainer_opts_init(&o, sizeof o);
        o.micro_batch = MICRO;
        o.grad_accum = cases[k].m;
        o.seq_len = T;
        CHECK_STATUS(llmt__trainer_create_dev(m, &o, llmt__dev_cpu(), &tr), LLMT_OK);
        llmt_comm *c[2] = {NULL};
        CHECK_STATUS(llmt_comm_create_inproc(NULL, 2, NULL, c), LLMT_OK);
        llmt_pp_opts po;
        llmt_pp_opts_init(&po, sizeof po);
        po.schedule = LLMT_PP_INTERLEAVED;
        po.virtual_stages = cases[k].v;
        po.stage_layers = cases[k].n ? two : NULL;
        po.n_stage_layers = cases[k].n;
        CHECK_STATUS(llmt_trainer_set_pp_comm(tr, c[0], &po), LLMT_ERR_INVALID_ARGUMENT);
        printf("v %d m %d%s: %s\n", cases[k].v, cases[k].m, cases[k].n ? " 2 layer counts" : "",
               llmt_trainer_last_error(tr));
        CHECK(strstr(llmt_trainer_last_error(tr), cases[k].key) != NULL);
        llmt_comm_destroy(c[0]);
        llmt_comm_destroy(c[1]);
        llmt_trainer_destroy(tr);
        llmt_model_destroy(m);
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "quick";
    tp_fixture_data((size_t)STEPS * MAXM * MICRO * T, V, &g_in, &g_tg);
    static const int32_t uneven_v[4] = {2, 2, 2, 1}, uneven[4] = {1, 2, 3, 1};
    if (!strcmp(mode, "full")) {
        static const int ps[2] = {2, 4};
        for (int llama = 0; llama < 2; llama++)
            for (int i = 0; i < 2; i++)
                for (int mult = 1; mult <= 4; mult *= 2) {
                    int p = ps[i], m = mult * p, L = 2 * p;
                    compare(llama, L, p, 1, m, LLMT_PP_GPIPE, NULL);
                    compare(llama, L, p, 1, m, LLMT_PP_1F1B, NULL);
                    compare(llama, L, p, 1, m, LLMT_PP_INTERLEAVED, NULL);
                    compare(llama, L, p, 2, m, LLMT_PP_INTERLEAVED, NULL);
                }
        for (int llama = 0; llama < 2; llama++) {
            compare(llama, 7, 4, 1, 8, LLMT_PP_GPIPE, uneven);
            compare(llama, 7, 4, 1, 8, LLMT_PP_1F1B, uneven);
            compare(llama, 7, 4, 1, 8, LLMT_PP_INTERLEAVED, uneven);
            compare(llama, 7, 2, 2, 4, LLMT_PP_INTERLEAVED, uneven_v);
        }
    } else if (!strcmp(mode, "quick")) {
        compare(0, 4, 2, 2, 4, LLMT_PP_INTERLEAVED, NULL);
        compare(1, 4, 2, 2, 2, LLMT_PP_INTERLEAVED, NULL);
        compare(1, 8, 4, 2, 8, LLMT_PP_INTERLEAVED, NULL);
        compare(0, 8, 4, 2, 16, LLMT_PP_INTERLEAVED, NULL);
        compare(0, 6, 2, 3, 4, LLMT_PP_INTERLEAVED, NULL);
        compare(1, 7, 2, 2, 4, LLMT_PP_INTERLEAVED, uneven_v);
        compare(0, 7, 3, 2, 6, LLMT_PP_INTERLEAVED, NULL);
        compare(1, 7, 4, 1, 4, LLMT_PP_INTERLEAVED, uneven);
        compare_tp(0, 4, 4, 0);
        compare_tp(1, 6, 2, 1);
        check_memory();
        check_plan_memory();
        check_bad();
    } else {
        fprintf(stderr, "usage: test_device_ppv [quick|full]\n");
        return 2;
    }
    printf("worst: loss %.2e relative, parameters %.2e absolute\n", g_worst_loss,
           g_worst_param);
    free(g_in);
    free(g_tg);
    return check_exit("device-ppv");
}
