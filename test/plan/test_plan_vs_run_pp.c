/* The planner agrees with the run under pipeline parallelism (issue 17):
 * for a layout with pp > 1, the planner's model of one rank of each stage
 * (lib/plan/engine.c, llmt__plan_engine_stage: the stage's layers, the
 * embeddings on the first, the head on the last) against what the trainer
 * does when it runs that layout in-process (ranks as threads, groups
 * from the plan, the public llmt_trainer_set_pp_comm):
 *
 *   - per step, on every rank, the calls, payload bytes and bus bytes of
 *     the TP, CP and DP groups' communicators (llmt_comm_get_stats, reset
 *     before each step) equal its stage's plan exactly (bus bytes within
 *     1e-12 relative);
 *   - the rank's parameter + gradient + optimizer bytes (device_in_use -
 *     device_activations - comm_buffers) equal its stage's plan plus the
 *     engine's token, target and loss buffers of the step (3 A N int32 or
 *     fp32, in the step's transfer blocks with their alignment gaps:
 *     plan_run_io) and, with dp > 1, dp.c's count and norm scalars (dp +
 *     1 int64 and a float): not parameters, not activations, and so not
 *     in the planner's fields,
 *     and its activations (llmt_trainer_memory's activations +
 *     device_activations) equal;
 *   - each stage holds the plan's layers (llmt_trainer_pp_stats);
 *   - llmt_plan_get_estimate's engine_* fields are those of the stage
 *     holding the most bytes (llmt__plan_engine_top_stage), and engine_
 *     modeled is 1.
 *
 * Layouts (4 layers, width 64, 16 tokens, micro-batches of 2, 4 per
 * step): GPT-2 pp 2 1F1B (the tied wte's copy on the last stage); Llama
 * pp 2 x tp 2 GPipe; GPT-2 pp 2 x dp 2 ZeRO-1; Llama tp 2 SP x pp 2 x v 2
 * (interleaved) x dp 2 ZeRO-0 with full recomputation; GPT-2 pp 2 x cp 2
 * ring with selective recomputation; Llama pp 4 x dp 2 ZeRO-1; Llama pp 2
 * x dp 2 ZeRO-1 with a vocabulary of 1000 (the head weighs 1.8 layers:
 * stages of 3 and 1 layers); Llama MoE (every layer: 4 experts of 32,
 * top-2, one shared, dropless) pp 2 x dp 2 ZeRO-1, pp 2 x dp 4 x ep 2
 * ZeRO-1 and pp 2 x dp 2 x ep 2 GPipe (the expert data parallel group's
 * collectives, on the trainer's own group, counted with the DP group's
 * as the plan counts them).
 *
 *   test_plan_vs_run_pp        the fp32 CPU backend (train.device cpu)
 *   test_plan_vs_run_pp emul   the bf16 host emulation (bf16 storage and
 *                              copies, 8-element alignment) against a plan
 *                              for train.device cuda, bf16 parameters
 *                              (the MoE layouts through the op table:
 *                              lib/train/moe_dev.c, moe_dev_ep.c) */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "plan/plan.h"
#include "plan_run_fixture.h"
#include "train/device.h"
#include "train/trainer_state.h"

#define STEPS PLAN_RUN_STEPS
#define MAXW 8
#define LAYERS 4
#define WIDTH 64
#define FFN 128
#define SEQ 16
#define MICRO 2
#define ACCUM 4
#define MAXV 1000

static int g_emul;

typedef struct layout {
    const char *name;
    int llama, kv, tp, cp, pp, dp, zero;
    int v;         /* virtual stages (interleaved) */
    int gpipe;     /* the GPipe schedule (else 1F1B, or interleaved with v) */
    int recompute; /* 0 none, 1 full, 2 selective */
    int sp;        /* sequence parallel over the TP group */
    int moe;       /* MoE layers: 4 experts of 32, top-2, 1 shared, dropless */
    int vocab;
    int ep; /* expert parallelism inside dp (0: none) */
} layout;

static const char *const rc_names[] = {"none", "full", "selective"};

static const char *sched_name(const layout *l)
{
    return l->v > 1 ? "interleaved" : l->gpipe ? "gpipe" : "1f1b";
}

static void spec_json(const layout *l, char *buf, size_t n)
{
    snprintf(buf, n,
             "{\"name\": \"pp\", \"model\": {\"arch\": \"%s\", \"layers\": %d, \"hidden\": %d, "
             "\"heads\": 4, \"kv_heads\": %d, \"ffn\": %d, \"vocab\": %d, \"seq_len\": %d, "
             "\"tied_embeddings\": %s%s}, "
             "\"parallelism\": {\"tp\": %d, \"cp\": %d, \"pp\": %d, \"dp\": %d, \"ep\": %d, "
             "\"zero\": %d, "
             "\"virtual_stages\": %d, \"pp_schedule\": \"%s\", \"recompute\": \"%s\", "
             "\"sequence_parallel\": %s}, "
             "\"precision\": {\"param\": \"%s\", \"master\": \"fp32\", \"gemm\": \"%s\"}, "
             "\"batch\": {\"micro\": %d, \"grad_accum\": %d}, "
             "\"train\": {\"device\": \"%s\"}, \"hardware\": {\"gpu\": \"%s\"}}",
             l->llama ? "llama" : "gpt2", LAYERS, WIDTH, l->kv, FFN, l->vocab, SEQ,
             l->llama ? "false" : "true",
             l->moe ? ", \"moe\": {\"experts\": 4, \"top_k\": 2, \"expert_ffn\": 32, "
                      "\"shared_experts\": 1, \"dropless\": true}"
                    : "",
             l->tp, l->cp, l->pp, l->dp, l->ep > 1 ? l->ep : 1, l->zero, l->v > 1 ? l->v : 1,
             sched_name(l), rc_names[l->recompute], l->sp ? "true" : "false",
             g_emul ? "bf16" : "fp32", g_emul ? "bf16" : "fp32", MICRO, ACCUM,
             g_emul ? "cuda" : "cpu", g_emul ? "h100" : "cpu");
}

static void *rank_main(void *p)
{
    plan_run_arg *a = p;
    const layout *l = a->lo;
    plan_run_rank r;
    const int deg[5] = {l->tp, l->cp, l->dp, l->pp, l->ep};
    if (!plan_run_rank_begin(a, deg, &r))
        return NULL;
    plan_run_rank_model(a, &r, l->llama, LAYERS, WIDTH, 4, l->kv, FFN, l->vocab, SEQ,
                        l->moe ? 32 : 0);
    if (a->st == LLMT_OK)
        a->st = plan_run_trainer(r.m, MICRO, ACCUM, SEQ, l->recompute, g_emul, &r.tr);
    llmt_pp_opts po;
    llmt_pp_opts_init(&po, sizeof po);
    po.schedule = l->v > 1 ? LLMT_PP_INTERLEAVED : l->gpipe ? LLMT_PP_GPIPE : LLMT_PP_1F1B;
    po.virtual_stages = l->v > 1 ? l->v : 1;
    plan_run_rank_attach(a, &r, l->sp, LLMT_CP_RING, l->zero, &po);
    plan_run_rank_train(a, &r, l->dp, MICRO, ACCUM, SEQ);
    llmt_pp_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.struct_size = sizeof ps;
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_pp_stats(r.tr, &ps);
    a->layers = ps.layers;
    return plan_run_rank_end(a, &r);
}

static void check_layout(const layout *l, const int32_t *in, const int32_t *tg)
{
    char js[2048];
    spec_json(l, js, sizeof js);
    llmt_spec *s = NULL;
    llmt_plan *p = NULL;
    int W = l->tp * l->cp * l->pp * l->dp;
    plan_run_spec_plan(l->name, js, W, &s, &p);
    if (!p) {
        llmt_spec_destroy(s);
        return;
    }
    llmt_plan_estimate e, top;
    plan_run_estimate(p, &e);
    /* the public fields: the stage holding the most bytes */
    int64_t ts = llmt__plan_engine_top_stage(s);
    memset(&top, 0, sizeof top);
    llmt__plan_engine_stage(s, ts, &top);
    double pe[3][3], pt[3][3];
    plan_run_plan_groups(&e, pe);
    plan_run_plan_groups(&top, pt);
    CHECK(!memcmp(pe, pt, sizeof pe) && plan_run_state_of(&e) == plan_run_state_of(&top) &&
          e.engine_mem_activations == top.engine_mem_activations);
    plan_run_arg a[MAXW];
    int ok = plan_run_ranks(l->name, a, sizeof *a, MAXW, 0, W, 1, l, p, in, tg, rank_main);
    int bytes_ok = 1;
    double worst = 0, worst_a = 0;
    /* the engine's token, target and loss buffers of a step's rows (its
     * transfer blocks); dp.c's scalars (xbuf, dsum) */
    double io = plan_run_io(ACCUM, MICRO * (SEQ / l->cp), 0, l->dp);
    char lay[64] = "";
    for (int stg = 0; ok && stg < l->pp; stg++) {
        llmt_plan_estimate x;
        memset(&x, 0, sizeof x);
        llmt__plan_engine_stage(s, stg, &x);
        double pl[3][3];
        plan_run_plan_groups(&x, pl);
        if (g_emul && l->dp > 1)
            plan_run_agree_dp(pl, l->dp);
        for (int r = 0; r < W; r++) {
            if (a[r].stage != stg)
                continue;
            for (int k = 0; k < STEPS; k++)
                bytes_ok &= plan_run_groups_equal(l->name, r, stg, k + 1,
                                                  (const double(*)[3])a[r].g[k], pl);
            double ds = fabs(a[r].state - io - plan_run_state_of(&x));
            worst = fmax(worst, ds);
            worst_a = fmax(worst_a, fabs(a[r].acts - x.engine_mem_activations));
            CHECK_EQ_INT(a[r].layers, llmt__plan_stage_total(s, stg));
            if (ds > 0 || a[r].acts != x.engine_mem_activations)
                fprintf(stderr,
                        "%s rank %d (stage %d): state %.0f B, plan %.0f; activations %.0f B, "
                        "plan %.0f\n",
                        l->name, r, stg, a[r].state, plan_run_state_of(&x), a[r].acts,
                        x.engine_mem_activations);
        }
        int r0 = stg * l->tp * l->cp; /* the stage's first rank (dp 0) */
        snprintf(lay + strlen(lay), sizeof lay - strlen(lay), "%s%d", stg ? "," : "",
                 (int)llmt__plan_stage_total(s, stg));
        printf("%-40s stage %d: TP %3.0f calls %7.0f B, CP %3.0f / %7.0f B, DP %3.0f / %8.0f "
               "B; state %8.0f B (plan %8.0f + %.0f), activations %7.0f B (plan %7.0f)\n",
               l->name, stg, pl[0][0], pl[0][1], pl[1][0], pl[1][1], pl[2][0], pl[2][1],
               a[r0].state, plan_run_state_of(&x), io, a[r0].acts, x.engine_mem_activations);
    }
    if (ok && l->vocab == MAXV) /* the head's weight moved a layer off the last stage */
        CHECK(!strcmp(lay, "3,1"));
    CHECK(bytes_ok);
    CHECK(worst == 0);
    CHECK(worst_a == 0);
    printf("%-40s layers %s; %s; state and activations %s; estimate = stage %d's\n", l->name,
           lay, bytes_ok ? "bytes equal on every rank and step" : "bytes DIFFERENT",
           worst == 0 && worst_a == 0 ? "equal" : "DIFFERENT", (int)ts);
    llmt_plan_destroy(p);
    llmt_spec_destroy(s);
}

int main(int argc, char **argv)
{
    g_emul = plan_run_emul_arg(argc, argv, "test_plan_vs_run_pp");
    if (g_emul < 0)
        return 2;
    const char *name = g_emul ? "plan-vs-run-pp-emul" : "plan-vs-run-pp";
    size_t n = (size_t)STEPS * 4 * MICRO * ACCUM * SEQ; /* dp up to 4 */
    int32_t *in = NULL, *tg = NULL;
    if (!plan_run_stream(n, 7, 250, &in, &tg)) /* below every layout's vocabulary */
        return check_exit(name);
    /* name, llama, kv, tp, cp, pp, dp, zero, v, gpipe, recompute, sp, moe, vocab, ep */
    static const layout ls[] = {
        {"gpt2 pp2 1f1b", 0, 4, 1, 1, 2, 1, 0, 1, 0, 0, 0, 0, 250, 0},
        {"llama tp2 x pp2 gpipe", 1, 2, 2, 1, 2, 1, 0, 1, 1, 0, 0, 0, 250, 0},
        {"gpt2 pp2 x dp2 zero1", 0, 4, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 250, 0},
        {"llama tp2 SP x pp2 v2 x dp2 full", 1, 2, 2, 1, 2, 2, 0, 2, 0, 1, 1, 0, 250, 0},
        {"gpt2 cp2 x pp2 selective", 0, 4, 1, 2, 2, 1, 0, 1, 0, 2, 0, 0, 250, 0},
        {"llama pp4 x dp2 zero1", 1, 2, 1, 1, 4, 2, 1, 1, 0, 0, 0, 0, 250, 0},
        {"llama pp2 x dp2 zero1, heavy head", 1, 2, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, MAXV, 0},
        {"llama moe pp2 x dp2 zero1", 1, 2, 1, 1, 2, 2, 1, 1, 0, 0, 0, 1, 250, 0},
        {"llama moe pp2 x dp4 ep2 zero1", 1, 2, 1, 1, 2, 4, 1, 1, 0, 0, 0, 1, 250, 2},
        {"llama moe pp2 x dp2 ep2 gpipe", 1, 2, 1, 1, 2, 2, 0, 1, 1, 0, 0, 1, 250, 2},
    };
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++)
        check_layout(&ls[i], in, tg);
    free(in);
    free(tg);
    return check_exit(name);
}
