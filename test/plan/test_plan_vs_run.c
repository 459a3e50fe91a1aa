/* The planner agrees with the run (issue 16): for a layout, llmt_plan's
 * engine_* predictions (lib/plan/engine.c) against what the real trainer
 * does when it runs that layout in-process (ranks as threads, the fp32 CPU
 * backend, TP and DP groups from the plan):
 *
 *   - per step, on every rank, the calls, payload bytes and bus bytes of
 *     the TP group's and the DP group's communicator (llmt_comm_get_stats,
 *     reset before each step) equal the plan's exactly (bus bytes are
 *     sums of fractions of integers in double: within 1e-12 relative);
 *   - the rank's parameter + gradient + optimizer bytes (the engine's
 *     allocator: device_in_use - device_activations of
 *     llmt_trainer_memory_usage, less comm_buffers, data parallelism's
 *     staging of units dp does not divide, which the plan does not
 *     predict; host-resident tp 1: params + grads + optimizer) within 10%
 *     of the plan's, and activations (llmt_trainer_memory's activations
 *     and device_activations) equal;
 *   - those state bytes shrink as 1/tp against the tp 1 run within 5%
 *     where only norms, wpe and the row split biases are replicated.
 *
 * Layouts: GPT-2 tp 2 x dp 1, tp 2 x dp 2 ZeRO 0, 1 and 2, tp 4 x dp 1;
 * Llama with grouped-query attention, kv heads split (8 heads, 4 kv heads:
 * tp 2 x dp 2 ZeRO 3 with full recomputation, tp 4) and shared (2 kv
 * heads < tp 4: each held by 2 ranks, their gradients summed over the TP
 * group every step); with sequence parallelism GPT-2 tp 2 x dp 2 ZeRO 1,
 * Llama tp 4, Llama shared kv tp 4 with full recomputation (their
 * activations checked below the same layouts' without); data
 * parallelism's own cases: GPT-2 tp 1 x dp 2 (two gradient buckets),
 * GPT-2 tp 2 x dp 3 ZeRO 1 and Llama tp 2 x dp 3 ZeRO 2 (units dp does
 * not divide: padded collectives). The generic
 * cost model's comm_bytes_tp (any framework, this layout) must equal the
 * engine's TP bus bytes too: both count every TP collective at the
 * storage type (doc/planner.md, "The engine's own numbers").
 *
 *   test_plan_vs_run        the fp32 CPU backend (train.device cpu)
 *   test_plan_vs_run emul   the bf16 host emulation, which stores,
 *                           aligns and keeps attention state as the CUDA
 *                           backend does, against a plan for
 *                           train.device cuda, bf16 parameters */
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

#define STEPS 3 /* at most; the emulation (slow) checks 1 */
#define MAXW 6
#define MAXDP 3

static int g_emul; /* the bf16 emulation of the CUDA backend */
static int g_steps = STEPS;
/* rank 0's activation bytes of the last layout run, and of the two
 * layouts the sequence parallel ones are compared with */
static double g_last_acts, g_acts[2];

typedef struct layout {
    const char *name;
    int llama, heads, kv, tp, dp, zero, full;
    int sp; /* sequence parallelism */
} layout;

/* the model shared by every layout: 2 layers, width 256, ffn 512, a
 * vocabulary of 250 (padded to 256 as llmt_job pads it), 32 tokens;
 * micro-batches of 2, 2 per step and DP rank */
#define LAYERS 2
#define WIDTH 256
#define FFN 512
#define VOCAB 250
#define SEQ 32
#define MICRO 2
#define ACCUM 2

typedef struct rank_arg {
    const layout *lo;
    llmt_comm *world;
    const llmt_plan *plan;
    int rank;
    const int32_t *in, *tg;
    llmt_status st;
    char err[512];
    /* per step: calls, payload, bus of the TP and the DP group */
    double tp[STEPS][3], dp[STEPS][3];
    double state, acts; /* bytes */
} rank_arg;

static void spec_json(const layout *l, char *buf, size_t n)
{
    snprintf(buf, n,
             "{\"name\": \"%s\", \"model\": {\"arch\": \"%s\", \"layers\": %d, \"hidden\": %d, "
             "\"heads\": %d, \"kv_heads\": %d, \"ffn\": %d, \"vocab\": %d, \"seq_len\": %d, "
             "\"tied_embeddings\": %s}, "
             "\"parallelism\": {\"tp\": %d, \"dp\": %d, \"zero\": %d, \"recompute\": \"%s\", "
             "\"sequence_parallel\": %s}, "
             "\"precision\": {\"param\": \"%s\", \"master\": \"fp32\", \"gemm\": \"%s\"}, "
             "\"batch\": {\"micro\": %d, \"grad_accum\": %d}, "
             "\"train\": {\"device\": \"%s\"}, \"hardware\": {\"gpu\": \"%s\"}}",
             l->name, l->llama ? "llama" : "gpt2", LAYERS, WIDTH, l->heads, l->kv, FFN, VOCAB,
             SEQ, l->llama ? "false" : "true", l->tp, l->dp, l->zero, l->full ? "full" : "none",
             l->sp ? "true" : "false", g_emul ? "bf16" : "fp32", g_emul ? "bf16" : "fp32",
             MICRO, ACCUM, g_emul ? "cuda" : "cpu", g_emul ? "h100" : "cpu");
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    const layout *l = a->lo;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *tpc = NULL, *dpc = NULL;
    int32_t co[LLMT_PLAN_NDIMS] = {0};
    a->st = LLMT_OK;
    if (a->world) {
        a->st = llmt_plan_coords(a->plan, a->rank, co);
        if (a->st == LLMT_OK && l->tp > 1)
            a->st = llmt_comm_create_plan_group(a->world, a->plan, LLMT_DIM_TP, &tpc);
        if (a->st == LLMT_OK && l->dp > 1)
            a->st = llmt_comm_create_plan_group(a->world, a->plan, LLMT_DIM_DP, &dpc);
        if (a->st != LLMT_OK) {
            snprintf(a->err, sizeof a->err, "groups: %s", llmt_comm_last_error(a->world));
            return NULL;
        }
    }
    /* the model as llmt_job builds it from the spec (lib/job/job.c) */
    llmt_model_config c;
    plan_run_model_config(&c, l->llama, LAYERS, WIDTH, l->heads, l->kv, FFN, VOCAB, 0, SEQ);
    a->st = llmt_model_create(NULL, &c, &m);
    if (a->st == LLMT_OK)
        a->st = plan_run_trainer(m, MICRO, ACCUM, SEQ, l->full ? 1 : 0, g_emul, &tr);
    if (a->st == LLMT_OK && tpc)
        a->st = llmt_trainer_set_tp_comm(tr, tpc);
    if (a->st == LLMT_OK && l->sp)
        a->st = llmt_trainer_set_sequence_parallel(tr, 1);
    if (a->st == LLMT_OK && dpc) {
        llmt_dp_opts d;
        llmt_dp_opts_init(&d, sizeof d); /* the default buckets, as llmt_job */
        d.zero_stage = l->zero;
        a->st = llmt_trainer_set_comm(tr, dpc, &d);
    }
    size_t per = (size_t)MICRO * ACCUM * SEQ; /* tokens per step and DP rank */
    for (int k = 0; k < g_steps && a->st == LLMT_OK; k++) {
        if (tpc)
            llmt_comm_reset_stats(tpc);
        if (dpc)
            llmt_comm_reset_stats(dpc);
        size_t at = ((size_t)k * l->dp + (size_t)co[LLMT_DIM_DP]) * per;
        llmt_batch b = {sizeof b, a->in + at, a->tg + at, MICRO * ACCUM, SEQ};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        a->st = llmt_trainer_step(tr, &b, &met);
        plan_run_read_stats(tpc, a->tp[k]);
        plan_run_read_stats(dpc, a->dp[k]);
    }
    if (a->st == LLMT_OK)
        a->st = plan_run_memory(tr, &a->state, &a->acts);
    if (a->st != LLMT_OK)
        plan_run_rank_error(a->err, sizeof a->err, tr, m);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    llmt_comm_destroy(tpc);
    llmt_comm_destroy(dpc);
    return NULL;
}

static llmt_plan *plan_of(const layout *l)
{
    char js[2048];
    spec_json(l, js, sizeof js);
    llmt_spec *s = NULL;
    llmt_plan *p = NULL;
    plan_run_spec_plan(l->name, js, l->tp * l->dp, &s, &p);
    llmt_spec_destroy(s);
    return p;
}

/* Runs the layout; returns rank 0's state bytes (0 on failure) and the
 * plan's in *planned. */
static double check_layout(const layout *l, const int32_t *in, const int32_t *tg,
                           double *planned)
{
    *planned = 0;
    llmt_plan *p = plan_of(l);
    if (!p)
        return 0;
    llmt_plan_estimate e;
    plan_run_estimate(p, &e);
    int W = l->tp * l->dp;
    rank_arg a[MAXW];
    memset(a, 0, sizeof a);
    for (int r = 0; r < W && r < MAXW; r++)
        a[r] = (rank_arg){.lo = l, .plan = p, .rank = r, .in = in, .tg = tg};
    rank_fixture_run(a, sizeof *a, W, W > 1, offsetof(rank_arg, world), rank_main);
    if (!plan_run_ranks_ok(l->name, a, sizeof *a, W, offsetof(rank_arg, st),
                           offsetof(rank_arg, err))) {
        llmt_plan_destroy(p);
        return 0;
    }
    const double ptp[3] = {e.engine_tp_calls, e.engine_tp_payload_bytes, e.engine_tp_bus_bytes};
    const double pdp[3] = {e.engine_dp_calls, e.engine_dp_payload_bytes, e.engine_dp_bus_bytes};
    int bytes_ok = 1;
    for (int r = 0; r < W; r++)
        for (int k = 0; k < g_steps; k++)
            for (int j = 0; j < 3; j++) {
                int good = plan_run_same(a[r].tp[k][j], ptp[j]) &&
                           plan_run_same(a[r].dp[k][j], pdp[j]);
                if (!good && bytes_ok)
                    fprintf(stderr,
                            "%s rank %d step %d: measured TP %.0f calls %.0f B payload "
                            "%.1f B bus, DP %.0f / %.0f / %.1f; plan TP %.0f / %.0f / %.1f, "
                            "DP %.0f / %.0f / %.1f\n",
                            l->name, r, k + 1, a[r].tp[k][0], a[r].tp[k][1], a[r].tp[k][2],
                            a[r].dp[k][0], a[r].dp[k][1], a[r].dp[k][2], ptp[0], ptp[1], ptp[2],
                            pdp[0], pdp[1], pdp[2]);
                bytes_ok &= good;
            }
    CHECK(bytes_ok);
    /* the generic model's TP bytes: every collective, at the storage type
     * (not with sequence parallelism: it counts 4 all-reduces' worth per
     * layer, where the engine, as Megatron-LM, gathers each column split
     * input again in the backward; doc/planner.md) */
    if (!l->sp)
        CHECK(plan_run_same(e.comm_bytes_tp, e.engine_tp_bus_bytes));
    double pstate = plan_run_state_of(&e);
    *planned = pstate;
    g_last_acts = a[0].acts;
    double worst_s = 0, worst_a = 0;
    for (int r = 0; r < W; r++) {
        double ds = fabs(a[r].state / pstate - 1),
               da = fabs(a[r].acts / e.engine_mem_activations - 1);
        worst_s = fmax(worst_s, ds);
        worst_a = fmax(worst_a, da);
    }
    CHECK(worst_s <= 0.10);
    CHECK(worst_a == 0); /* every buffer counted: equal to the byte */
    printf("%-26s TP %3.0f calls %9.0f B (bus %9.0f) DP %3.0f calls %9.0f B (bus %9.0f) "
           "per step: %s; state %8.0f B (plan %8.0f, %+.2f%%), activations %8.0f B (plan "
           "%8.0f, %+.2f%%; generic model %8.0f)\n",
           l->name, ptp[0], ptp[1], ptp[2], pdp[0], pdp[1], pdp[2],
           bytes_ok ? "equal on every rank and step" : "DIFFERENT", a[0].state, pstate,
           100 * (a[0].state / pstate - 1), a[0].acts, e.engine_mem_activations,
           100 * (a[0].acts / e.engine_mem_activations - 1), e.mem_activations);
    llmt_plan_destroy(p);
    return a[0].state;
}

int main(int argc, char **argv)
{
    g_emul = plan_run_emul_arg(argc, argv, "test_plan_vs_run");
    if (g_emul < 0)
        return 2;
    if (g_emul)
        g_steps = 1;
    size_t n = (size_t)STEPS * MAXDP * MICRO * ACCUM * SEQ;
    int32_t *in = NULL, *tg = NULL;
    if (!plan_run_stream(n, 99, VOCAB, &in, &tg))
        return check_exit(g_emul ? "plan-vs-run-emul" : "plan-vs-run");
    static const layout gpt[] = {
        {"gpt2 tp1", 0, 4, 4, 1, 1, 0, 0, 0},
        {"gpt2 tp2 x dp1", 0, 4, 4, 2, 1, 0, 0, 0},
        {"gpt2 tp2 x dp2 zero0", 0, 4, 4, 2, 2, 0, 0, 0},
        {"gpt2 tp2 x dp2 zero1", 0, 4, 4, 2, 2, 1, 0, 0},
        {"gpt2 tp2 x dp2 zero2", 0, 4, 4, 2, 2, 2, 0, 0},
        {"gpt2 tp4 x dp1", 0, 4, 4, 4, 1, 0, 0, 0},
    };
    static const layout lla[] = {
        {"llama kv4 tp1", 1, 8, 4, 1, 1, 0, 0, 0},
        {"llama kv4 tp2 x dp2 zero3 full", 1, 8, 4, 2, 2, 3, 1, 0},
        {"llama kv4 tp4 x dp1", 1, 8, 4, 4, 1, 0, 0, 0},
    };
    static const layout shared = {"llama kv2 tp4 (shared kv)", 1, 8, 2, 4, 1, 0, 0, 0};
    /* sequence parallelism, each after its layout without it */
    static const layout sp[][2] = {
        {{"gpt2 tp2 x dp2 zero1", 0, 4, 4, 2, 2, 1, 0, 0},
         {"gpt2 tp2 x dp2 zero1 sp", 0, 4, 4, 2, 2, 1, 0, 1}},
        {{"llama kv4 tp4 x dp1", 1, 8, 4, 4, 1, 0, 0, 0},
         {"llama kv4 tp4 sp", 1, 8, 4, 4, 1, 0, 0, 1}},
        {{"llama kv2 tp4 full (shared kv)", 1, 8, 2, 4, 1, 0, 1, 0},
         {"llama kv2 tp4 full sp (shared kv)", 1, 8, 2, 4, 1, 0, 1, 1}},
    };
    const layout *sets[2] = {gpt, lla};
    const int counts[2] = {6, 3};
    for (int k = 0; k < 2; k++) {
        double one = 0, pone = 0;
        for (int i = 0; i < counts[k]; i++) {
            const layout *l = &sets[k][i];
            double pst = 0, st = check_layout(l, in, tg, &pst);
            if (!strcmp(l->name, "gpt2 tp2 x dp2 zero1"))
                g_acts[0] = g_last_acts;
            if (!strcmp(l->name, "llama kv4 tp4 x dp1"))
                g_acts[1] = g_last_acts;
            if (l->tp == 1) {
                one = st;
                pone = pst;
                continue;
            }
            if (one <= 0 || st <= 0 || l->dp > 1)
                continue; /* ZeRO shares: not a 1/tp question */
            double ratio = one / st, pratio = pone / pst;
            printf("%-26s state bytes tp 1 / tp %d = %.3f (plan %.3f; 1/tp within 5%%: %s)\n",
                   l->name, l->tp, ratio, pratio,
                   fabs(ratio / l->tp - 1) <= 0.05 ? "yes" : "NO");
            CHECK(fabs(ratio / l->tp - 1) <= 0.05);
            CHECK(fabs(ratio / pratio - 1) <= 0.01);
        }
    }
    double unused;
    check_layout(&shared, in, tg, &unused);
    /* data parallelism's own cases: more than one gradient bucket (tp 1:
     * 4.5 MB of gradients, buckets of 4 MiB), and dp 3, whose units do not
     * split evenly (padded reduce-scatters and gathers, ceil(n/3) each) */
    static const layout dpx[] = {
        {"gpt2 tp1 x dp2 zero0", 0, 4, 4, 1, 2, 0, 0, 0},
        {"gpt2 tp2 x dp3 zero1", 0, 4, 4, 2, 3, 1, 0, 0},
        {"llama kv4 tp2 x dp3 zero2", 1, 8, 4, 2, 3, 2, 0, 0},
    };
    for (size_t i = 0; i < sizeof dpx / sizeof dpx[0]; i++)
        check_layout(&dpx[i], in, tg, &unused);
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        double acts[2];
        for (int k = 0; k < 2; k++) {
            if (k == 0 && i < 2) { /* run above already */
                acts[0] = g_acts[i];
                continue;
            }
            check_layout(&sp[i][k], in, tg, &unused);
            acts[k] = g_last_acts;
        }
        /* what sequence parallelism is for: fewer activation bytes */
        printf("%-26s activations with / without sequence parallelism: %.3f\n", sp[i][1].name,
               acts[1] / acts[0]);
        CHECK(acts[1] < acts[0]);
    }
    free(in);
    free(tg);
    return check_exit(g_emul ? "plan-vs-run-emul" : "plan-vs-run");
}
