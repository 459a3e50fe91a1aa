/* The planner against the fp32 CPU backend (train.device cpu) under
 * expert parallelism, where an owner's rows are fewer than the exchange's
 * E x capacity: each rank's state and activations equal the plan's to
 * the byte (lib/plan/engine.c moe_owner, moe_saved, moe_scratch; the run
 * through lib/train/moe_dev_ep.c on the CPU table, whose owner's rows are
 * min(E x capacity, ep x N x top_k), as the host layer's, moe_ep.c, are:
 * llmt__moe_ep_owner_room), and its groups' bytes of each step too.
 *
 * Llama MoE (width 64, 4 heads, ffn 128, 2 layers, 16 tokens, micro-
 * batches of 2, 2 per step; every layer E experts of 32, top-2, one
 * shared), dp = ep, ranks as threads: E 8 at ep 2 and E 16 at ep 4,
 * dropless (owner rows ep x N x top_k = 128 and 256, half of E x
 * capacity) and at capacity factor 1.25 (E x capacity the less: 80 and
 * 80 rows). plan-vs-run-pp's MoE layouts (4 experts, ep 2, dropless)
 * have the two equal, so a planner or a run that took E x capacity
 * passes there and fails here. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"
#include "plan/plan.h"
#include "plan_run_fixture.h"
#include "train/moe.h"
#include "train/moe_ep.h"

#define STEPS PLAN_RUN_STEPS
#define MAXW 4
#define WIDTH 64
#define FFN 128
#define EFFN 32
#define LAYERS 2
#define SEQ 16
#define MICRO 2
#define ACCUM 2
#define VOCAB 250

typedef struct layout {
    const char *name;
    int experts, ep; /* dp = ep */
    float cf;        /* capacity factor; 0: dropless */
} layout;

static void spec_json(const layout *l, char *buf, size_t n)
{
    char rt[96];
    if (l->cf > 0)
        snprintf(rt, sizeof rt, "\"dropless\": false, \"capacity_factor\": %g", l->cf);
    else
        snprintf(rt, sizeof rt, "\"dropless\": true");
    snprintf(buf, n,
             "{\"name\": \"ep-cpu\", \"model\": {\"arch\": \"llama\", \"layers\": %d, "
             "\"hidden\": %d, \"heads\": 4, \"kv_heads\": 2, \"ffn\": %d, \"vocab\": %d, "
             "\"seq_len\": %d, \"tied_embeddings\": false, \"moe\": {\"experts\": %d, "
             "\"top_k\": 2, \"expert_ffn\": %d, \"shared_experts\": 1, %s}}, "
             "\"parallelism\": {\"tp\": 1, \"cp\": 1, \"pp\": 1, \"dp\": %d, \"ep\": %d, "
             "\"zero\": 0}, "
             "\"precision\": {\"param\": \"fp32\", \"master\": \"fp32\", \"gemm\": \"fp32\"}, "
             "\"batch\": {\"micro\": %d, \"grad_accum\": %d}, "
             "\"train\": {\"device\": \"cpu\"}, \"hardware\": {\"gpu\": \"cpu\"}}",
             LAYERS, WIDTH, FFN, VOCAB, SEQ, l->experts, EFFN, rt, l->ep, l->ep, MICRO, ACCUM);
}

static void *rank_main(void *p)
{
    plan_run_arg *a = p;
    const layout *l = a->lo;
    plan_run_rank r;
    const int deg[5] = {1, 1, l->ep, 1, l->ep}; /* TP, CP, DP, PP, EP */
    if (!plan_run_rank_begin(a, deg, &r))
        return plan_run_rank_end(a, &r);
    llmt_model_config c;
    plan_run_model_config(&c, 1, LAYERS, WIDTH, 4, 2, FFN, VOCAB, 0, SEQ);
    plan_run_moe_config(&c, EFFN);
    c.moe_experts = l->experts;
    c.moe_dropless = l->cf <= 0;
    if (l->cf > 0)
        c.moe_capacity_factor = l->cf;
    a->st = llmt_model_create(NULL, &c, &r.m);
    if (a->st == LLMT_OK)
        a->st = plan_run_trainer(r.m, MICRO, ACCUM, SEQ, 0, 0, &r.tr);
    plan_run_rank_attach(a, &r, 0, LLMT_CP_RING, 0, NULL);
    plan_run_rank_train(a, &r, l->ep, MICRO, ACCUM, SEQ);
    return plan_run_rank_end(a, &r);
}

static void check_layout(const layout *l, const int32_t *in, const int32_t *tg)
{
    char js[2048];
    spec_json(l, js, sizeof js);
    llmt_spec *s = NULL;
    llmt_plan *p = NULL;
    int W = l->ep;
    if (plan_run_spec_plan(l->name, js, W, &s, &p) != LLMT_OK) {
        CHECK(!"plan");
        llmt_plan_destroy(p);
        llmt_spec_destroy(s);
        return;
    }
    llmt_plan_estimate x;
    plan_run_get_estimate(p, &x);
    plan_run_arg a[MAXW];
    int ok = plan_run_ranks(l->name, a, sizeof *a, MAXW, 0, W, 1, l, p, in, tg, rank_main);
    double io = plan_run_io(ACCUM, MICRO * SEQ, 0, l->ep), state = plan_run_state_of(&x);
    double pl[3][3];
    plan_run_plan_groups(&x, pl);
    int same = 1, mem = 1;
    for (int k = 0; ok && k < W; k++) {
        for (int j = 0; j < STEPS; j++)
            same &=
                plan_run_groups_equal(l->name, k, -1, j + 1, (const double(*)[3])a[k].g[j], pl);
        double ds = a[k].state - io - state, da = a[k].acts - x.engine_mem_activations;
        if (ds != 0 || da != 0)
            fprintf(stderr,
                    "%s rank %d: state %.0f B, plan %.0f + %.0f (%+.0f B); activations %.0f "
                    "B, plan %.0f (%+.0f B)\n",
                    l->name, k, a[k].state, state, io, ds, a[k].acts, x.engine_mem_activations,
                    da);
        mem &= ds == 0 && da == 0;
    }
    CHECK(ok);
    CHECK(same);
    CHECK(mem);
    llmt__moe_shape sh = {l->experts, 2, WIDTH, EFFN, l->cf > 0 ? l->cf : 1.0f, l->cf <= 0, 0};
    int N = MICRO * SEQ;
    size_t room = llmt__moe_ep_owner_room(&sh, N, l->ep),
           blocks = (size_t)l->experts * (size_t)llmt__moe_capacity(&sh, N);
    printf("%-32s: owner rows %zu (E x capacity %zu, ep x N x top_k %d); rank 0 activations "
           "%.0f B (plan %.0f), state %.0f B (plan %.0f + %.0f); plan and run %s\n",
           l->name, room, blocks, l->ep * N * 2, ok ? a[0].acts : 0, x.engine_mem_activations,
           ok ? a[0].state : 0, state, io, ok && same && mem ? "equal" : "DIFFERENT");
    llmt_plan_destroy(p);
    llmt_spec_destroy(s);
}

int main(void)
{
    const char *name = "plan-vs-run-ep-cpu";
    size_t n = (size_t)STEPS * MAXW * MICRO * ACCUM * SEQ;
    int32_t *in = NULL, *tg = NULL;
    if (!plan_run_stream(n, 13, VOCAB, &in, &tg))
        return check_exit(name);
    static const layout ls[] = {
        {"moe E 8 ep 2 dropless", 8, 2, 0},
        {"moe E 16 ep 4 dropless", 16, 4, 0},
        {"moe E 8 ep 2 capacity 1.25", 8, 2, 1.25f},
        {"moe E 16 ep 4 capacity 1.25", 16, 4, 1.25f},
    };
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++)
        check_layout(&ls[i], in, tg);
    free(in);
    free(tg);
    return check_exit(name);
}
