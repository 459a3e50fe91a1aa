/* Forward-only passes of a MoE model under pipeline parallelism
 * (lib/train/pp_infer.c) at a binding capacity (factor 0.75: tokens are
 * dropped) against the single-rank engine, fp32 CPU backend, ranks as
 * threads on one in-process communicator.
 *
 * A pipeline pass runs the engine's whole micro-batch B x T, the real
 * rows padded; a MoE layer must route the real rows alone, with the
 * capacity of their count, as one rank's pass of them does (padding
 * routed too takes slots and raises the capacity, so the tokens kept
 * differ). Llama, 4 layers, 4 experts of 24, top-2, every rank trained
 * alone for 30 steps on 2 sequences first (the same parameters on every
 * rank), then the layout attached. Without the fix every case's
 * generation and loss differ. Checks, on every rank:
 *   - greedy generation of 20 tokens after a 3-token prompt (past the
 *     16-token window) gives exactly one rank's tokens;
 *   - evaluate on 3 sequences (blocks of B 2: the last one padded with an
 *     ignored row) gives one rank's loss within 1e-5 relative;
 * under pp 2 (1F1B), pp 2 x dp 2 x ep 2 (expert parallel exchange of the
 * real rows), and cp 2 x pp 2 against cp 2 alone (context parallelism
 * pads the window to the sequence on one rank too: the pipeline must
 * route what that pass routes).
 *
 * test_moe_ppgen emul: the same on the bf16 host emulation (the MoE layers
 * through the op table, lib/train/moe_dev.c and moe_dev_ep.c), every rank
 * and the reference emulated, pp 2 and pp 2 x dp 2 x ep 2 against one
 * emulated rank, cp 2 x pp 2 against emulated cp 2 (an engine trained
 * alone first, then context and pipeline parallelism attached: the
 * context parallel state bound to the engine made again). Each token's row
 * takes the same bf16 operations in the same order on one rank and on a
 * stage: the emulation's GEMMs sum an output element in one order whatever
 * the row count, attention and the norms are per row, the expert
 * exchange moves rows unchanged (bf16 in, bf16 out), and the padded pass
 * routes the real rows alone as one rank does. So generation must be
 * token for token one emulated rank's, and evaluate's loss differs only
 * in how its fp32 sum of per-token losses is split over blocks and stages:
 * the fp32 bound, 1e-5 relative (a bf16 rounding would be 2^-9 = 2e-3). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "moe_fixture.h"
#include "rank_fixture.h"
#include "train/device.h"

enum { B = 2, T = 16, V = 61, E = 4, K = 2, FE = 24, L = 4 };
enum { SEQS = 3, NP = 3, NGEN = 20, STEPS = 30 };

static llmt_model_config g_cfg;
static int32_t g_in[SEQS * T], g_tg[SEQS * T];
/* not the start of a training sequence: the continuation is less certain */
static const int32_t g_prompt[NP] = {3, 4, 5};
static const llmt__dev_ops *g_ops; /* NULL: the fp32 CPU engine */

typedef struct rank_arg {
    llmt_comm *world; /* NULL: one rank */
    int rank, cp, pp, dp, ep;
    int32_t gen[NGEN];
    float eval;
    llmt_status st;
    char err[1024];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *cpc = NULL, *ppc = NULL, *dpc = NULL, *epc = NULL;
    int cp = a->cp, pp = a->pp, dp = a->dp;
    int cr = a->rank % cp, st = a->rank / cp % pp, dr = a->rank / (cp * pp);
    llmt_trainer_opts o;
    rank_fixture_opts(&o, B, 1, T, 1e-2f);
    if (g_ops) {
        o.device = LLMT_DEVICE_CUDA; /* the op table g_ops stands for it */
        o.deterministic = 1;
        a->st = llmt_model_create(NULL, &g_cfg, &m);
        if (a->st == LLMT_OK)
            a->st = llmt__trainer_create_dev(m, &o, g_ops, &tr);
    } else {
        a->st = rank_fixture_open(&g_cfg, &o, &m, &tr);
    }
    /* trained alone first, the same on every rank, so that the logits are
     * sharp enough for a dropped token to change the greedy choice */
    llmt_batch tb = {sizeof tb, g_in, g_tg, B, T};
    for (int k = 0; k < STEPS && a->st == LLMT_OK; k++) {
        float loss;
        a->st = rank_fixture_step(tr, &tb, &loss);
    }
    if (a->st == LLMT_OK && a->world && cp > 1)
        a->st = llmt_comm_split(a->world, dr * pp + st, cr, &cpc);
    if (a->st == LLMT_OK && a->world && pp > 1)
        a->st = llmt_comm_split(a->world, dr * cp + cr, st, &ppc);
    if (a->st == LLMT_OK && a->world && dp > 1)
        a->st = llmt_comm_split(a->world, st * cp + cr, dr, &dpc);
    if (a->st == LLMT_OK && dpc && a->ep > 1)
        a->st = llmt_comm_split(dpc, dr / a->ep, dr, &epc);
    rank_fixture_groups g = {.cp = cpc, .pp = ppc, .dp = dpc, .ep = epc};
    if (a->st == LLMT_OK)
        a->st = rank_fixture_attach(tr, &g);
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_generate(tr, g_prompt, NP, NGEN, 0.0f, 0, 1, a->gen);
    llmt_batch b = {sizeof b, g_in, g_tg, SEQS, T};
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_evaluate(tr, &b, &a->eval);
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m, NULL, NULL);
    llmt_comm_destroy(epc);
    llmt_comm_destroy(dpc);
    llmt_comm_destroy(ppc);
    llmt_comm_destroy(cpc);
    return NULL;
}

/* cp x pp x dp ranks (rank = (dp index x pp + stage) x cp + cp index). */
static void run(int cp, int pp, int dp, int ep, rank_arg *a)
{
    int n = cp * pp * dp;
    for (int r = 0; r < n; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].rank = r;
        a[r].cp = cp;
        a[r].pp = pp;
        a[r].dp = dp;
        a[r].ep = ep;
    }
    rank_fixture_run(a, sizeof *a, n, n > 1, offsetof(rank_arg, world), rank_main);
}

/* Every rank of a case against the reference ref. */
static void compare(const char *name, const rank_arg *ref, const rank_arg *a, int n)
{
    CHECK_STATUS(ref->st, LLMT_OK);
    double worst = 0;
    int differ = 0;
    for (int r = 0; r < n; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s rank %d: %s\n", name, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        int same = memcmp(a[r].gen, ref->gen, sizeof ref->gen) == 0;
        if (!same) {
            fprintf(stderr, "%s rank %d: generated", name, r);
            for (int i = 0; i < NGEN; i++)
                fprintf(stderr, " %d/%d", (int)a[r].gen[i], (int)ref->gen[i]);
            fprintf(stderr, " (here/reference)\n");
        }
        CHECK(same);
        differ += !same;
        double d = fabs((double)a[r].eval - ref->eval) / fabs((double)ref->eval);
        if (!(d <= 1e-5))
            fprintf(stderr, "%s rank %d: evaluate %.9g, reference %.9g\n", name, r,
                    (double)a[r].eval, (double)ref->eval);
        CHECK(d <= 1e-5);
        worst = d > worst ? d : worst;
    }
    printf("%s: %d ranks: generation %s, evaluate %.7f (reference %.7f, rel diff <= %.1e)\n",
           name, n, differ ? "DIFFERS" : "equal", (double)a[0].eval, (double)ref->eval, worst);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "cpu";
    if (!strcmp(mode, "emul")) {
        g_ops = llmt__dev_emul();
    } else if (strcmp(mode, "cpu")) {
        fprintf(stderr, "usage: test_moe_ppgen [cpu|emul]\n");
        return 2;
    }
    moe_fixture_llama(&g_cfg, V, T, L, 29);
    g_cfg.moe_experts = E;
    g_cfg.moe_top_k = K;
    g_cfg.moe_ffn = FE;
    g_cfg.moe_every = 1;
    g_cfg.moe_capacity_factor = 0.75f;
    uint64_t x = 12345;
    for (int i = 0; i < SEQS * T; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        g_in[i] = (int32_t)((x >> 33) % V);
    }
    for (int i = 0; i < SEQS * T; i++)
        g_tg[i] = i % T == T - 1 ? (int32_t)((g_in[i] * 7 + 3) % V) : g_in[i + 1];
    rank_arg ref, cpref[2], a[8];
    run(1, 1, 1, 1, &ref);
    if (ref.st != LLMT_OK)
        fprintf(stderr, "one rank: %s\n", ref.err);
    run(1, 2, 1, 1, a);
    compare("pp 2", &ref, a, 2);
    run(1, 2, 2, 2, a);
    compare("pp 2 x dp 2 x ep 2", &ref, a, 4);
    run(2, 1, 1, 1, cpref);
    for (int r = 0; r < 2; r++) {
        if (cpref[r].st != LLMT_OK)
            fprintf(stderr, "cp 2 rank %d: %s\n", r, cpref[r].err);
        CHECK_STATUS(cpref[r].st, LLMT_OK);
    }
    run(2, 2, 1, 1, a);
    compare("cp 2 x pp 2 (against cp 2)", &cpref[0], a, 4);
    return check_exit(g_ops ? "moe-ppgen-emul" : "moe-ppgen");
}
