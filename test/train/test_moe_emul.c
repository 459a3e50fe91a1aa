/* Mixture-of-experts layers on the bf16 host emulation (lib/train/moe_dev.c
 * through the op table, lib/exec/dev_emul.c: bf16 activations and
 * parameters, fp32 master weights and gradients) against the fp32 engine
 * (lib/train/moe.c on host fp32 buffers) from the same initial weights, a
 * small Llama (width 32, 2 layers, both MoE: no dense MLP anywhere; 4
 * experts of 24, top-2), micro-batch 2 x 16 tokens, 2 micro-batches a
 * step. Cases: capacity 1.0 (tokens dropped), dropless with one shared
 * expert, raw gates with two shared experts at capacity 1.25, and a MoE
 * layer beside a dense one (moe.every 2) at capacity 1.0.
 *
 * Checks, per case (the bounds of test_device_trainer.c, which holds the
 * dense model's emulation to the fp32 engine the same way: bf16 stores
 * round at 2^-9 relative each, so the two runs agree to a few of those
 * and drift slowly apart):
 *   - one forward_backward from the same weights: loss within 1%, every
 *     parameter's gradient (router, experts, shared experts included)
 *     within 3% relative L2;
 *   - the routing of the first step (2 micro-batches x 32 tokens x top-2
 *     x 2 layers: 256 choices): kept tokens per expert and dropped choices
 *     equal but for at most 2 choices sent to another expert (the router's
 *     logits come from bf16 inputs and weights: a choice flips on a near
 *     tie; measured: none in two cases, one in the raw gates case, the
 *     drops equal in all three), aux and z losses within 1%;
 *   - 10 AdamW steps: losses within 0.03 + 2%, the final fp32 masters
 *     within 2 x lr x steps absolute of the fp32 engine's (AdamW moves an
 *     element about lr a step, so a gradient of the other sign for a few
 *     steps parts two runs by at most that);
 *   - data parallelism: dp 2 (ZeRO 0 and 1, ranks as threads on an
 *     in-process communicator) against one emulated rank on the same
 *     global batch: losses within 2^-9 relative, masters within 2 x lr x
 *     steps (test_device_dp.c's bounds, and why), kept counts and drops of
 *     the last step (summed over the group) equal, aux and z within 1e-5;
 *   - pipeline parallelism (pp 2, 1F1B: a layer a stage, each stage's
 *     MoE layer with a routing state per micro-batch in flight), in both
 *     cases, tensor parallelism (tp 2, with and without sequence
 *     parallelism) and context parallelism (cp 2), dropless with a
 *     shared expert,
 *     against one emulated rank: the same bounds (test_device_tp.c's,
 *     test_device_cp.c's); the last step's tallies come from weights
 *     that differ as the losses may, so: kept counts equal but for at
 *     most 2 choices, aux and z within 2^-9 (measured: counts equal, z
 *     2.4e-5 under tp);
 *   - expert parallelism (lib/train/moe_dev_ep.c: the exchange in bf16)
 *     with data parallelism: dp 2 x ep 2 (ZeRO 0 and 1), dp 4 x ep 2
 *     (two replicas of each expert, ZeRO 1), dp 4 x ep 4 (ZeRO 0), with
 *     drops and dropless, against one emulated rank: the bounds of dp;
 *     an expert's gradient sums its rows in the owner's order, so the
 *     last step's tallies as under tp (measured: counts equal); the EP
 *     group's all-to-all bytes of a step equal the closed form of the
 *     fixed-shape exchange in bf16 (moe_ep.h: 4 x layers x micro x
 *     (ep-1)/ep x E x capacity x C x 2 bytes). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "moe_dev_fixture.h"
#include "moe_fixture.h"
#include "rank_fixture.h"
#include "train/device.h"

/* C: the width moe_fixture_llama gives the model */
enum { B = 2, T = 16, V = 61, ACC = 2, STEPS = 10, E = 4, K = 2, FE = 24, L = 2, C = 32 };
#define LR 1e-3f
_Static_assert(STEPS <= MOE_DEV_MAX_STEPS, "a layout rank keeps STEPS losses");

typedef struct mcase {
    const char *name;
    float capacity; /* 0: dropless */
    int shared, raw;
    int every; /* MoE in every n-th layer (0: 1) */
} mcase;

static const mcase *g_case;
static int32_t g_in[(STEPS + 1) * 2 * ACC * B * T], g_tg[(STEPS + 1) * 2 * ACC * B * T];

static void cfg(llmt_model_config *c)
{
    moe_dev_config(c, V, T, L, E, K, FE, g_case->every, g_case->shared, g_case->capacity,
                   g_case->raw);
}

static void make_data(void)
{
    moe_fixture_data(g_in, g_tg, (int)(sizeof g_in / sizeof g_in[0]), V, 0x6d6f65u);
}

/* A trainer on backend ops (micro B, accum acc). */
static llmt_status open_dev(const llmt__dev_ops *ops, int acc, llmt_model **m,
                            llmt_trainer **tr)
{
    llmt_model_config c;
    cfg(&c);
    return moe_dev_open(&c, ops, B, acc, T, LR, 0, m, tr);
}

static double rel_l2(const float *a, const float *b, int64_t n)
{
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* The routing tallies of the last step: counts[E], dropped, aux, z. */
typedef struct tallies {
    int64_t counts[E], dropped;
    double aux, z;
} tallies;

static llmt_status get_tallies(llmt_trainer *tr, tallies *t)
{
    return llmt_trainer_moe_stats(tr, -1, t->counts, E, &t->dropped, &t->aux, &t->z);
}

/* a's tallies against ref's: kept counts and drops equal but for at most
 * `flips` choices that went to another expert (each moves one count from
 * one expert to another, and may move one drop), aux and z within tol. */
static void check_tallies(const char *what, const tallies *a, const tallies *ref, double tol,
                          int flips)
{
    int64_t moved = 0;
    for (int x = 0; x < E; x++)
        moved += llabs(a->counts[x] - ref->counts[x]);
    CHECK(moved <= 2 * flips);
    CHECK(llabs(a->dropped - ref->dropped) <= flips);
    CHECK_CLOSE(a->aux, ref->aux, tol, 0);
    CHECK_CLOSE(a->z, ref->z, tol, 0);
    printf("  %s: kept %lld %lld %lld %lld (ref %lld %lld %lld %lld), dropped %lld (ref %lld), "
           "aux %.6f (ref %.6f), z %.6f (ref %.6f)\n",
           what, (long long)a->counts[0], (long long)a->counts[1], (long long)a->counts[2],
           (long long)a->counts[3], (long long)ref->counts[0], (long long)ref->counts[1],
           (long long)ref->counts[2], (long long)ref->counts[3], (long long)a->dropped,
           (long long)ref->dropped, a->aux, ref->aux, a->z, ref->z);
}

/* Step k's global batch: 2 x ACC micro-batches of B sequences (dp 2's
 * ranks take half each; one rank takes it as 2 x ACC micro-batches). */
static llmt_batch batch(int k, int seqs, int off)
{
    return moe_dev_batch(g_in, g_tg, T, 2 * ACC * B, k, seqs, off);
}

static void emul_vs_fp32(void)
{
    llmt_model *mf = NULL, *me = NULL;
    llmt_trainer *tf = NULL, *te = NULL;
    CHECK_STATUS(open_dev(llmt__dev_cpu(), ACC, &mf, &tf), LLMT_OK);
    llmt_status s = open_dev(llmt__dev_emul(), ACC, &me, &te);
    CHECK_STATUS(s, LLMT_OK);
    if (s != LLMT_OK || !tf) {
        fprintf(stderr, "%s: %s\n", g_case->name,
                te ? llmt_trainer_last_error(te) : llmt_model_last_error(me));
        goto done;
    }
    /* one forward_backward from the same weights */
    llmt_batch b0 = batch(STEPS, ACC * B, 0);
    float lf = 0, le = 0;
    CHECK_STATUS(llmt_trainer_forward_backward(tf, &b0, &lf), LLMT_OK);
    CHECK_STATUS(llmt_trainer_forward_backward(te, &b0, &le), LLMT_OK);
    CHECK_CLOSE(le, lf, 0.01, 0);
    int32_t np = 0;
    llmt_model_param_count(me, &np, NULL);
    double worst = 0;
    const char *wn = "";
    for (int32_t i = 0; i < np; i++) {
        llmt_tensor gf, ge;
        const char *pn = NULL;
        llmt_model_param(me, i, &pn, &ge);
        CHECK_STATUS(llmt_trainer_grad(tf, i, &gf), LLMT_OK);
        CHECK_STATUS(llmt_trainer_grad(te, i, &ge), LLMT_OK);
        int64_t n = 0;
        llmt_tensor_numel(&gf, &n);
        double r = rel_l2(ge.data, gf.data, n);
        if (!(r <= worst)) {
            worst = r;
            wn = pn;
        }
    }
    CHECK(worst < 0.03);
    printf("%s: one forward_backward: loss %.6f (fp32 %.6f), gradients worst relative L2 "
           "%.4f (%s)\n",
           g_case->name, le, lf, worst, wn);
    /* 10 steps side by side (the first one's routing compared) */
    float lsf[STEPS], lse[STEPS];
    double dl = 0;
    for (int k = 0; k < STEPS; k++) {
        llmt_batch b = batch(k, ACC * B, 0);
        CHECK_STATUS(rank_fixture_step(tf, &b, &lsf[k]), LLMT_OK);
        CHECK_STATUS(rank_fixture_step(te, &b, &lse[k]), LLMT_OK);
        CHECK_CLOSE(lse[k], lsf[k], 0.02, 0.03);
        dl = fmax(dl, fabs((double)lse[k] - lsf[k]));
        if (k == 0) {
            tallies tf0, te0;
            CHECK_STATUS(get_tallies(tf, &tf0), LLMT_OK);
            CHECK_STATUS(get_tallies(te, &te0), LLMT_OK);
            check_tallies("step 1 routing, emulation vs fp32", &te0, &tf0, 0.01, 2);
            if (g_case->capacity > 0 && g_case->capacity < 1.1f)
                CHECK(tf0.dropped > 0); /* the capacity binds */
        }
    }
    CHECK_STATUS(llmt_trainer_sync_params(tf), LLMT_OK);
    CHECK_STATUS(llmt_trainer_sync_params(te), LLMT_OK);
    int64_t nf = 0, ne = 0;
    float *pf = rank_fixture_params(mf, &nf), *pe = rank_fixture_params(me, &ne);
    CHECK(pf && pe && nf == ne);
    double pa = 0;
    for (int64_t i = 0; pf && pe && i < nf && nf == ne; i++)
        pa = fmax(pa, fabs((double)pe[i] - pf[i]));
    CHECK(pa <= 2.0 * LR * STEPS);
    printf("  10 steps: losses %.5f .. %.5f (fp32 %.5f .. %.5f), largest |diff| %.2e; masters "
           "largest |diff| %.2e (bound %.0e)\n",
           lse[0], lse[STEPS - 1], lsf[0], lsf[STEPS - 1], dl, pa, 2.0 * LR * STEPS);
    free(pf);
    free(pe);
done:
    llmt_trainer_destroy(tf);
    llmt_trainer_destroy(te);
    llmt_model_destroy(mf);
    llmt_model_destroy(me);
}

typedef struct rank_arg {
    moe_dev_rank a;
    int64_t acts;    /* device activations (llmt_trainer_memory_usage) */
    double ep_bytes; /* the EP group's all-to-all bus bytes of the last step */
    tallies t;
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *ra = p;
    moe_dev_rank *a = &ra->a;
    moe_dev_handles h = {NULL, NULL, NULL};
    a->st = open_dev(llmt__dev_emul(), 2 * ACC / moe_dev_split(a), &h.m, &h.tr);
    moe_dev_rank_attach(a, &h);
    for (int k = 0; k < STEPS && a->st == LLMT_OK; k++) {
        if (h.epc && k == STEPS - 1)
            llmt_comm_reset_stats(h.epc);
        moe_dev_rank_step(a, &h, g_in, g_tg, T, 2 * ACC * B, k);
    }
    if (a->st == LLMT_OK)
        a->st = get_tallies(h.tr, &ra->t);
    if (a->st == LLMT_OK && h.epc) {
        llmt_comm_stats cs;
        memset(&cs, 0, sizeof cs);
        cs.struct_size = sizeof cs;
        a->st = llmt_comm_get_stats(h.epc, &cs);
        ra->ep_bytes = (double)cs.bus_bytes[LLMT_COMM_STAT_ALL_TO_ALL];
    }
    llmt_trainer_memory mem;
    memset(&mem, 0, sizeof mem);
    mem.struct_size = sizeof mem;
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_memory_usage(h.tr, &mem);
    ra->acts = mem.device_activations;
    moe_dev_rank_end(a, &h);
    return NULL;
}

static void data_parallel(void)
{
    rank_arg ref;
    if (!moe_dev_ref(&ref, sizeof ref, offsetof(rank_arg, a), rank_main)) {
        fprintf(stderr, "%s: one emulated rank: %s\n", g_case->name, ref.a.err);
        return;
    }
    /* data and expert parallelism: W ranks, the data parallel group the
     * world, the EP groups consecutive ranks; every rank routes its own
     * micro-batches, which are one rank's, so drops and all equal it */
    static const struct {
        int W, zero, ep;
    } dps[] = {{2, 0, 1}, {2, 1, 1}, {2, 0, 2}, {2, 1, 2}, {4, 1, 2}, {4, 0, 4}};
    for (size_t i = 0; i < sizeof dps / sizeof dps[0]; i++) {
        rank_arg a[4];
        int W = dps[i].W;
        const moe_dev_rank lay = {.zero = dps[i].zero, .ep = dps[i].ep};
        moe_dev_run(a, sizeof a[0], 4, offsetof(rank_arg, a), W, &lay, rank_main);
        rank_fixture_worst w = {0, 0, 0, 0};
        char name[128];
        snprintf(name, sizeof name, "%s dp %d ep %d", g_case->name, W, dps[i].ep);
        for (int r = 0; r < W; r++) {
            if (!moe_dev_rank_ok(name, r, &a[r].a, &ref.a, STEPS, 1, 2.0 * LR * STEPS, &w))
                continue;
            char what[64];
            snprintf(what, sizeof what, "dp %d ep %d zero %d rank %d, last step", W, dps[i].ep,
                     dps[i].zero, r);
            /* ep: each expert's gradient sums its rows in the owner's
             * order, not one rank's: the runs differ at bf16 level */
            if (dps[i].ep > 1)
                check_tallies(what, &a[r].t, &ref.t, 1.0 / 512, 2);
            else
                check_tallies(what, &a[r].t, &ref.t, 1e-5, 0);
            /* the exchange took place in bf16 at its fixed shape: 4
             * all-to-alls per MoE layer and micro-batch of E x capacity
             * rows of C, (ep-1)/ep of them to other ranks (moe_ep.h) */
            int ep = dps[i].ep, N = B * T, micro = 2 * ACC / W;
            double cap = g_case->capacity > 0
                             ? fmin(N, fmax(1, ceil((double)g_case->capacity * N * K / E)))
                             : N;
            double want = ep > 1 ? 4.0 * L * micro * (ep - 1) / ep * E * cap * C * 2 : 0;
            CHECK_CLOSE(a[r].ep_bytes, want, 1e-12, 0);
            free(a[r].a.params);
        }
        printf("  dp %d ep %d zero %d vs one emulated rank: losses rel <= %.2e, masters |diff| "
               "<= %.2e; EP all-to-all %.0f B/step\n",
               W, dps[i].ep, dps[i].zero, w.loss, w.abs, a[0].ep_bytes);
    }
    /* tensor (with and without sequence parallelism) and context
     * parallelism: dropless only, where each rank's routing of its own
     * rows equals one rank's (doc/moe.md: a binding capacity is per rank
     * under SP and CP) */
    static const struct {
        const char *name;
        int tp, sp, cp, pp;
    } lays[] = {{"tp 2", 2, 0, 0, 0},
                {"tp 2 SP", 2, 1, 0, 0},
                {"cp 2", 0, 0, 2, 0},
                {"pp 2", 0, 0, 0, 2}};
    int64_t tp_acts = 0;
    for (size_t i = 0; i < sizeof lays / sizeof lays[0]; i++) {
        if (g_case->capacity > 0 && !lays[i].pp)
            continue; /* pipeline stages route whole micro-batches: any capacity */
        rank_arg a[2];
        const moe_dev_rank lay = {
            .tp = lays[i].tp, .sp = lays[i].sp, .cp = lays[i].cp, .pp = lays[i].pp};
        moe_dev_run(a, sizeof a[0], 2, offsetof(rank_arg, a), 2, &lay, rank_main);
        rank_fixture_worst w = {0, 0, 0, 0};
        char name[128];
        snprintf(name, sizeof name, "%s %s", g_case->name, lays[i].name);
        for (int r = 0; r < 2; r++) {
            /* a stage trains its own layers only: below */
            if (!moe_dev_rank_ok(name, r, &a[r].a, &ref.a, STEPS, !lays[i].pp, 2.0 * LR * STEPS,
                                 &w))
                continue;
            char what[64];
            snprintf(what, sizeof what, "%s rank %d, last step", lays[i].name, r);
            /* the weights of the last step are those of two bf16 runs
             * that differ as their losses may (2^-9), not bit for bit */
            check_tallies(what, &a[r].t, &ref.t, 1.0 / 512, 2);
        }
        if (lays[i].pp) { /* layer l on stage l */
            llmt_model_config c;
            cfg(&c);
            moe_dev_stages_check(&c, &a[0].a, &a[1].a, ref.a.params, 2.0 * LR * STEPS, &w);
        }
        for (int r = 0; r < 2; r++)
            free(a[r].a.params);
        /* the layout took effect: its rows (tp: the attention's heads;
         * SP: the residual stream's and the MoE layers' rows too) are
         * fewer than one rank's */
        CHECK(a[0].acts > 0 && a[0].acts < ref.acts);
        CHECK(a[1].acts > 0 && a[1].acts < ref.acts);
        if (lays[i].tp && !lays[i].sp)
            tp_acts = a[0].acts;
        if (lays[i].sp)
            CHECK(a[0].acts < tp_acts);
        printf("  %s vs one emulated rank: losses rel <= %.2e, masters |diff| <= %.2e; "
               "activations %lld B (one rank %lld)\n",
               lays[i].name, w.loss, w.abs, (long long)a[0].acts, (long long)ref.acts);
    }
    free(ref.a.params);
}

int main(void)
{
    static const mcase cases[] = {
        {"capacity 1.0", 1.0f, 0, 0, 1},
        {"dropless, 1 shared expert", 0.0f, 1, 0, 1},
        {"raw gates, capacity 1.25, 2 shared experts", 1.25f, 2, 1, 1},
        {"every 2nd layer MoE (layer 1 dense), capacity 1.0", 1.0f, 0, 0, 2},
    };
    make_data();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        g_case = &cases[i];
        emul_vs_fp32();
        if (i < 2)
            data_parallel();
    }
    return check_exit("moe-emul");
}
