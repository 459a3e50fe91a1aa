/* The planner agrees with the run under context parallelism (issue 18):
 * for a layout with cp > 1, llmt_plan's engine_cp_* predictions
 * (lib/plan/engine.c, cp_step) against what the trainer does when it runs
 * that layout in-process (ranks as threads, groups from the plan, the
 * public llmt_trainer_set_cp_comm):
 *
 *   - per step, on every rank, the calls, payload bytes and bus bytes of
 *     the CP group's communicator (llmt_comm_get_stats, reset before each
 *     step) equal the plan's exactly (bus bytes within 1e-12 relative),
 *     and so do the TP and DP groups' (the engine runs seq_len / cp rows);
 *   - the rank's parameter + gradient + optimizer bytes within 10% of the
 *     plan's, as test plan-vs-run bounds them (measured: within 0.04%),
 *     and its activations (the engine's buffers for seq_len / cp rows; the
 *     exchange's scratch lives outside them) equal.
 *
 * Layouts: GPT-2 cp 2 ring, cp 2 all-gather, cp 4 ring; tp 2 x cp 2 x dp 2
 * ZeRO-1 ring (8 ranks); Llama kv 4 cp 2 x dp 2 ZeRO-2 all-gather with
 * full recomputation (each attention's exchange runs again); Llama kv 2
 * tp 2 x cp 2 ring with selective recomputation (all but the last layer's
 * attention again); with sequence parallelism (the TP group's all-gathers
 * and reduce-scatters of the seq_len / cp rows): GPT-2 tp 2 x cp 2 x dp 2
 * ring, Llama kv 2 tp 2 x cp 2 all-gather with full recomputation; with
 * MoE layers (4 experts of 64, top-2, one shared expert, dropless: the
 * fc/fcproj collectives of the MoE layers gone, the router statistics and
 * tallies summed over the CP group and, under SP, the TP group, the MoE
 * gradients' sum over the TP group under SP; doc/moe.md): Llama tp 2 x
 * cp 2 SP ring with full recomputation, tp 2 x cp 2 x dp 2 ZeRO-1
 * all-gather (TP without SP: the experts run whole on every TP rank).
 *
 *   test_plan_vs_run_cp        the fp32 CPU backend (train.device cpu)
 *   test_plan_vs_run_cp emul   the bf16 host emulation (bf16 K/V blocks,
 *                              fp32 dK/dV; the MoE layers through the op
 *                              table, lib/train/moe_dev.c, their rows kept
 *                              in bf16) against a plan for train.device
 *                              cuda, bf16 parameters */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "plan_run_fixture.h"
#include "train/device.h"

#define STEPS PLAN_RUN_STEPS
#define MAXW 8
#define LAYERS 2
#define WIDTH 128
#define FFN 256
#define VOCAB 250
#define SEQ 32
#define MICRO 2
#define ACCUM 2

static int g_emul;

typedef struct layout {
    const char *name;
    int llama, heads, kv, tp, cp, dp, zero;
    int ag;        /* the all-gather variant */
    int recompute; /* 0 none, 1 full, 2 selective */
    int sp;        /* sequence parallel over the TP group */
    int moe;       /* MoE layers: 4 experts of 64, top-2, 1 shared, dropless */
} layout;

static const char *const rc_names[] = {"none", "full", "selective"};

static void spec_json(const layout *l, char *buf, size_t n)
{
    snprintf(buf, n,
             "{\"name\": \"cp\", \"model\": {\"arch\": \"%s\", \"layers\": %d, \"hidden\": %d, "
             "\"heads\": %d, \"kv_heads\": %d, \"ffn\": %d, \"vocab\": %d, \"seq_len\": %d, "
             "\"tied_embeddings\": %s%s}, "
             "\"parallelism\": {\"tp\": %d, \"cp\": %d, \"dp\": %d, \"zero\": %d, "
             "\"cp_variant\": \"%s\", \"recompute\": \"%s\", \"sequence_parallel\": %s}, "
             "\"precision\": {\"param\": \"%s\", \"master\": \"fp32\", \"gemm\": \"%s\"}, "
             "\"batch\": {\"micro\": %d, \"grad_accum\": %d}, "
             "\"train\": {\"device\": \"%s\"}, \"hardware\": {\"gpu\": \"%s\"}}",
             l->llama ? "llama" : "gpt2", LAYERS, WIDTH, l->heads, l->kv, FFN, VOCAB, SEQ,
             l->llama ? "false" : "true",
             l->moe ? ", \"moe\": {\"experts\": 4, \"top_k\": 2, \"expert_ffn\": 64, "
                      "\"shared_experts\": 1, \"dropless\": true}"
                    : "",
             l->tp, l->cp, l->dp, l->zero, l->ag ? "allgather" : "ring", rc_names[l->recompute],
             l->sp ? "true" : "false", g_emul ? "bf16" : "fp32", g_emul ? "bf16" : "fp32",
             MICRO, ACCUM, g_emul ? "cuda" : "cpu", g_emul ? "h100" : "cpu");
}

static void *rank_main(void *p)
{
    plan_run_arg *a = p;
    const layout *l = a->lo;
    plan_run_rank r;
    const int deg[5] = {l->tp, l->cp, l->dp, 1, 1};
    if (!plan_run_rank_begin(a, deg, &r))
        return NULL;
    plan_run_rank_model(a, &r, l->llama, LAYERS, WIDTH, l->heads, l->kv, FFN, VOCAB, SEQ,
                        l->moe ? 64 : 0);
    if (a->st == LLMT_OK)
        a->st = plan_run_trainer(r.m, MICRO, ACCUM, SEQ, l->recompute, g_emul, &r.tr);
    /* sequence parallelism before CP, as the job sets it */
    plan_run_rank_attach(a, &r, l->sp, l->ag ? LLMT_CP_ALL_GATHER : LLMT_CP_RING, l->zero,
                         NULL);
    if (a->st == LLMT_OK) { /* the trainer says what it holds */
        a->cs.struct_size = sizeof a->cs;
        a->st = llmt_trainer_cp_stats(r.tr, &a->cs);
        a->cp_coord = r.co[LLMT_DIM_CP];
    }
    plan_run_rank_train(a, &r, l->dp, MICRO, ACCUM, SEQ);
    return plan_run_rank_end(a, &r);
}

static void check_layout(const layout *l, const int32_t *in, const int32_t *tg)
{
    char js[2048];
    spec_json(l, js, sizeof js);
    llmt_spec *s = NULL;
    llmt_plan *p = NULL;
    int W = l->tp * l->cp * l->dp;
    plan_run_spec_plan(l->name, js, W, &s, &p);
    llmt_spec_destroy(s);
    if (!p)
        return;
    llmt_plan_estimate e;
    plan_run_estimate(p, &e);
    CHECK(e.engine_cp_calls > 0);
    plan_run_arg a[MAXW];
    if (!plan_run_ranks(l->name, a, sizeof *a, MAXW, 0, W, 1, l, p, in, tg, rank_main)) {
        llmt_plan_destroy(p);
        return;
    }
    for (int r = 0; r < W; r++) { /* the trainer says what it holds */
        const llmt_cp_stats *c = &a[r].cs;
        CHECK_EQ_INT(c->size, l->cp);
        CHECK_EQ_INT(c->rank, a[r].cp_coord);
        CHECK_EQ_INT(c->seq_len, SEQ);
        CHECK_EQ_INT(c->local_seq_len, SEQ / l->cp);
        CHECK_EQ_INT(c->chunk_len, SEQ / (2 * l->cp));
        CHECK_EQ_INT(c->chunks[0], a[r].cp_coord);
        CHECK_EQ_INT(c->chunks[1], 2 * l->cp - 1 - a[r].cp_coord);
        CHECK_EQ_INT(c->variant, l->ag ? LLMT_CP_ALL_GATHER : LLMT_CP_RING);
    }
    double pl[3][3];
    plan_run_plan_groups(&e, pl);
    int bytes_ok = 1;
    for (int r = 0; r < W; r++)
        for (int k = 0; k < STEPS; k++)
            bytes_ok &=
                plan_run_groups_equal(l->name, r, -1, k + 1, (const double(*)[3])a[r].g[k], pl);
    CHECK(bytes_ok);
    double pstate = plan_run_state_of(&e);
    double worst = 0, worst_a = 0;
    for (int r = 0; r < W; r++) {
        worst = fmax(worst, fabs(a[r].state / pstate - 1));
        worst_a = fmax(worst_a, fabs(a[r].acts / e.engine_mem_activations - 1));
    }
    CHECK(worst <= 0.10);
    CHECK(worst_a == 0);
    printf("%-38s CP %3.0f calls %9.0f B (bus %9.0f) per step, TP %3.0f / %8.0f B, DP %3.0f / "
           "%8.0f B: %s; state %8.0f B (plan %8.0f, %+.2f%%), activations %7.0f B (plan %7.0f, "
           "%+.2f%%)\n",
           l->name, pl[1][0], pl[1][1], pl[1][2], pl[0][0], pl[0][1], pl[2][0], pl[2][1],
           bytes_ok ? "equal on every rank and step" : "DIFFERENT", a[0].state, pstate,
           100 * (a[0].state / pstate - 1), a[0].acts, e.engine_mem_activations,
           100 * (a[0].acts / e.engine_mem_activations - 1));
    llmt_plan_destroy(p);
}

int main(int argc, char **argv)
{
    g_emul = plan_run_emul_arg(argc, argv, "test_plan_vs_run_cp");
    if (g_emul < 0)
        return 2;
    const char *name = g_emul ? "plan-vs-run-cp-emul" : "plan-vs-run-cp";
    size_t n = (size_t)STEPS * 2 * MICRO * ACCUM * SEQ;
    int32_t *in = NULL, *tg = NULL;
    if (!plan_run_stream(n, 99, VOCAB, &in, &tg))
        return check_exit(name);
    static const layout ls[] = {
        {"gpt2 cp2 ring", 0, 4, 4, 1, 2, 1, 0, 0, 0, 0, 0},
        {"gpt2 cp2 allgather", 0, 4, 4, 1, 2, 1, 0, 1, 0, 0, 0},
        {"gpt2 cp4 ring", 0, 4, 4, 1, 4, 1, 0, 0, 0, 0, 0},
        {"gpt2 tp2 x cp2 x dp2 zero1 ring", 0, 4, 4, 2, 2, 2, 1, 0, 0, 0, 0},
        {"llama kv4 cp2 x dp2 zero2 ag full", 1, 8, 4, 1, 2, 2, 2, 1, 1, 0, 0},
        {"llama kv2 tp2 x cp2 ring selective", 1, 8, 2, 2, 2, 1, 0, 0, 2, 0, 0},
        {"gpt2 tp2 x cp2 x dp2 SP ring", 0, 4, 4, 2, 2, 2, 0, 0, 0, 1, 0},
        {"llama kv2 tp2 x cp2 SP allgather full", 1, 8, 2, 2, 2, 1, 0, 1, 1, 1, 0},
        {"llama moe tp2 x cp2 SP ring full", 1, 8, 2, 2, 2, 1, 0, 0, 1, 1, 1},
        {"llama moe tp2 x cp2 x dp2 zero1 ag", 1, 8, 2, 2, 2, 2, 1, 1, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++)
        check_layout(&ls[i], in, tg);
    free(in);
    free(tg);
    return check_exit(name);
}
