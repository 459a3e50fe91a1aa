/* Mixture-of-experts layers on pipeline stages whose layers are tensor
 * parallel (lib/train/device.c's stage path with tp_shards' whole experts,
 * moe_net.c's activation sets and token group), composed with data and
 * expert parallelism, against the single-rank engine on the same batches;
 * fp32 CPU backend, ranks as threads on one in-process communicator in the
 * plan's order (TP innermost, then PP, DP outermost: rank = tpr + tp *
 * (stage + pp * dpr)); the EP groups consecutive DP ranks.
 *
 * Llama, 4 layers (every one MoE: 4 experts of 24, top-2, one shared
 * expert), width 32, 4 heads (2 kv), sequences of 16; a step is m 4
 * micro-batches of 2 sequences per data parallel replica, the single
 * rank's grad_accum dp x m micro-batches of the same sequences in order.
 * Without sequence parallelism every TP rank routes the same rows as the
 * single rank (a binding capacity is the same); with it each routes its
 * block of rows and the router statistics are summed over the TP group,
 * the capacity then per rank's rows (doc/moe.md): those cases run
 * dropless or with a capacity that drops nothing (factor E / top_k).
 * Cases: tp 2 x pp 2 1F1B (capacity 1.0, binding), tp 2 SP x pp 2 1F1B
 * (capacity 2: none dropped), with full recompute and interleaved (v 2,
 * a layer a chunk), tp 2 SP x pp 2 x
 * dp 2 ZeRO 1 (dropless), tp 2 x pp 2 x ep 2 (dp 2) GPipe (capacity 1.0),
 * tp 2 SP x pp 2 x ep 2 ZeRO 1 (capacity 2).
 * Ten AdamW steps with clipping. Checks on every rank:
 *   - per-step losses within 1e-5 relative of the single rank's;
 *   - final parameters (each from a rank of the stage that holds it,
 *     gathered over its TP group by llmt_trainer_sync_params) within
 *     1e-5 relative L2 and 1e-4 absolute (rank_fixture_stage_diff);
 *   - the last step's tallies of every MoE layer (gathered over the
 *     pipeline group: every rank reports all of them): kept counts per
 *     expert and drops equal, aux and z within 1e-5 relative;
 *   - a checkpoint of tp 2 x pp 2 after step 5 resumed by one rank: its
 *     last five losses those of the uninterrupted run within 1e-5;
 *   - the planner agrees with each stage of every layout (check_plan): TP
 *     calls, payload and bus bytes of the last step equal, activations
 *     equal. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"
#include "moe_fixture.h"
#include "plan/plan.h"
#include "rank_fixture.h"
#include "stage_fixture.h"

enum { B = 2, T = 16, V = 61, STEPS = 10, M = 4, E = 4, K = 2, L = 4, MAXR = 8 };

static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static double g_worst_loss, g_worst_rel;

/* capacity factor cf (0: dropless) */
static void config(float cf)
{
    llmt_model_config *c = &g_cfg;
    moe_fixture_llama(c, V, T, L, 13);
    c->moe_experts = E;
    c->moe_top_k = K;
    c->moe_ffn = 24;
    c->moe_shared_experts = 1;
    c->moe_dropless = cf == 0.0f;
    c->moe_capacity_factor = cf; /* 0 with dropless: a factor there is refused */
    c->moe_aux_loss_coef = 0.01f;
    c->moe_z_loss_coef = 0.001f;
}

typedef struct rank_arg {
    llmt_comm *world; /* NULL: the single rank */
    int tp, sp, pp, dp, ep, zero, sched, m, recompute;
    int v;    /* virtual stages (interleaved; layers split evenly), 0: 1 */
    int plan; /* check_layout: also against the planner (check_plan) */
    int tpr, stage, dpr;
    int k0, k1;              /* steps [k0, k1) (0, 0: all) */
    const char *load, *save; /* checkpoint read before k0 / written after k1 */
    float loss[STEPS];
    int64_t counts[L][E], dropped[L];
    double aux[L], z[L];
    float *params;
    int64_t numel;
    int64_t act;   /* activation bytes (llmt_trainer_memory) after the run */
    double tpb[3]; /* the last step's TP group calls, payload, bus bytes */
    llmt_pp_stats ps;
    llmt_status st;
    char err[1024];
} rank_arg;

/* A group's counters since its last reset: calls, payload, bus bytes. */
static void tp_stats(llmt_comm *c, double out[3])
{
    llmt_comm_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    out[0] = out[1] = out[2] = 0;
    if (llmt_comm_get_stats(c, &st) != LLMT_OK)
        return;
    for (int k = 0; k < LLMT_COMM_STAT_SLOTS; k++)
        out[1] += (double)st.payload_bytes[k];
    out[0] = (double)st.total_calls;
    out[2] = st.total_bus_bytes;
}

static int world_of(const rank_arg *a)
{
    return a->tp * a->pp * a->dp;
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *tpc = NULL, *ppc = NULL, *dpc = NULL, *epc = NULL;
    int rank = a->tpr + a->tp * (a->stage + a->pp * a->dpr);
    llmt_trainer_opts o;
    rank_fixture_opts(&o, B, a->m, T, 3e-3f);
    o.recompute = a->recompute;
    a->st = rank_fixture_open(&g_cfg, &o, &m, &tr);
    if (a->world) { /* every rank takes part in every split, in one order */
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(a->world, a->stage + a->pp * a->dpr, a->tpr, &tpc);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(a->world, a->tpr + a->tp * a->dpr, a->stage, &ppc);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(a->world, a->tpr + a->tp * a->stage, a->dpr, &dpc);
        if (a->st == LLMT_OK && a->ep > 1)
            a->st = llmt_comm_split(dpc, a->dpr / a->ep, a->dpr, &epc);
    }
    llmt_pp_opts po;
    stage_fixture_pp_opts(&po, a->sched, a->v, NULL, 0);
    rank_fixture_groups g = {.tp = a->tp > 1 ? tpc : NULL,
                             .pp = a->pp > 1 ? ppc : NULL,
                             .dp = a->dp > 1 ? dpc : NULL,
                             .ep = a->ep > 1 ? epc : NULL,
                             .sp = a->sp,
                             .zero = a->zero,
                             .pp_opts = &po};
    if (a->st == LLMT_OK)
        a->st = rank_fixture_attach(tr, &g);
    if (a->st == LLMT_OK && a->load)
        a->st = rank_fixture_ckpt(tr, a->load, rank, world_of(a), 0, a->k0);
    /* a step's batch: dp x m micro-batches, this replica's the dpr-th m */
    int k1 = a->k1 ? a->k1 : STEPS;
    size_t per = (size_t)a->m * B * T;
    for (int k = a->k0; k < k1 && a->st == LLMT_OK; k++) {
        size_t at = ((size_t)k * a->dp + (size_t)a->dpr) * per;
        llmt_batch b = {sizeof b, g_in + at, g_tg + at, a->m * B, T};
        if (tpc)
            llmt_comm_reset_stats(tpc);
        a->st = rank_fixture_step(tr, &b, &a->loss[k]);
    }
    if (tpc && a->st == LLMT_OK)
        tp_stats(tpc, a->tpb);
    for (int l = 0; l < L && a->st == LLMT_OK; l++)
        a->st = llmt_trainer_moe_stats(tr, l, a->counts[l], E, &a->dropped[l], &a->aux[l],
                                       &a->z[l]);
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr);
    if (a->st == LLMT_OK && a->save)
        a->st = rank_fixture_ckpt(tr, a->save, rank, world_of(a), 1, k1);
    rank_fixture_pp_stats(tr, &a->st, &a->ps, &a->act);
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m,
                       a->st == LLMT_OK ? &a->params : NULL, &a->numel);
    llmt_comm_destroy(epc);
    llmt_comm_destroy(dpc);
    llmt_comm_destroy(ppc);
    llmt_comm_destroy(tpc);
    return NULL;
}

/* The ranks of proto's layout (a[rank], the plan's order); one rank
 * without a communicator when every degree is 1. */
static void run(const rank_arg *proto, rank_arg *a)
{
    rank_arg q = *proto;
    q.tp = q.tp > 1 ? q.tp : 1;
    q.pp = q.pp > 1 ? q.pp : 1;
    q.dp = q.dp > 1 ? q.dp : 1;
    int n = world_of(&q);
    for (int r = 0; r < n; r++) {
        a[r] = q;
        a[r].world = NULL;
        a[r].tpr = r % q.tp;
        a[r].stage = r / q.tp % q.pp;
        a[r].dpr = r / (q.tp * q.pp);
    }
    rank_fixture_run(a, sizeof *a, n, n > 1, offsetof(rank_arg, world), rank_main);
    for (int r = 0; r < n; r++)
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "rank %d of %d: %s\n", r, n, a[r].err);
}

static void free_args(rank_arg *a, int n)
{
    for (int r = 0; r < n; r++) {
        free(a[r].params);
        a[r].params = NULL;
    }
}

/* Every rank of a against the single rank ref: losses, every MoE layer's
 * tallies, and each (TP rank, replica)'s parameters from their stages. */
static void compare(const char *name, const rank_arg *ref, const rank_arg *a)
{
    int tp = a[0].tp, pp = a[0].pp, dp = a[0].dp, n = world_of(&a[0]);
    int ok = ref->st == LLMT_OK;
    CHECK_STATUS(ref->st, LLMT_OK);
    rank_fixture_worst wl = {0};
    double wp = 0.0, wt = 0.0, wr = 0.0;
    int64_t kept = 0, dropped = 0;
    for (int r = 0; r < n; r++) {
        CHECK_STATUS(a[r].st, LLMT_OK);
        ok = ok && a[r].st == LLMT_OK;
        if (!ok)
            continue;
        rank_fixture_losses(&wl, a[r].loss, ref->loss, 0, STEPS, 0);
        for (int l = 0; l < L; l++)
            moe_fixture_tallies(a[r].counts[l], a[r].dropped[l], a[r].aux[l], a[r].z[l],
                                ref->counts[l], ref->dropped[l], ref->aux[l], ref->z[l], E,
                                &wt);
    }
    for (int l = 0; l < L; l++) {
        for (int x = 0; x < E; x++)
            kept += ref->counts[l][x];
        dropped += ref->dropped[l];
    }
    /* every (token, choice) of the global batch kept or dropped once */
    CHECK_EQ_INT(kept + dropped, (int64_t)L * dp * a[0].m * B * T * K);
    for (int d = 0; ok && d < dp; d++)
        for (int t = 0; t < tp; t++) {
            /* the virtual stages' layers: L / (pp v) each, chunk j on
             * stage j % pp */
            int v = a[0].v > 1 ? a[0].v : 1, nv = pp * v, first[2 * MAXR + 1] = {0};
            float *params[MAXR];
            for (int s = 0; s < pp; s++) {
                const rank_arg *x = &a[t + tp * (s + pp * d)];
                params[s] = x->params;
                CHECK_EQ_INT(x->ps.layers, L / pp);
            }
            for (int j = 0; j < nv; j++)
                first[j + 1] = first[j] + L / nv;
            double rel =
                rank_fixture_stage_diff(&g_cfg, first, nv, pp, params, ref->params, &wp);
            CHECK(rel <= 1e-5);
            wr = fmax(wr, rel);
        }
    CHECK(wp <= 1e-4);
    if (ok)
        CHECK(ref->loss[STEPS - 1] < ref->loss[0]); /* it trained */
    printf("%-40s loss rel %.2e, params rel L2 %.2e max abs %.2e, aux/z rel %.2e; kept %lld "
           "dropped %lld\n",
           name, wl.loss, wr, wp, wt, (long long)kept, (long long)dropped);
    g_worst_loss = fmax(g_worst_loss, wl.loss);
    g_worst_rel = fmax(g_worst_rel, wr);
}

/* The planner's model of each stage (lib/plan/engine.c) against what its
 * ranks ran: the last step's TP group calls, payload and bus bytes
 * (llmt__plan_engine_stage_tp) equal on every rank, the activation bytes
 * (llmt__plan_engine_stage_act: the schedule's sets, each MoE layer's
 * routing state per set, the trainer's window) to the byte. */
static void check_plan(const char *name, const rank_arg *a)
{
    char json[2048], moe[64];
    /* dropless alone: with it a capacity factor is refused */
    if (g_cfg.moe_dropless)
        snprintf(moe, sizeof moe, "\"dropless\": true");
    else
        snprintf(moe, sizeof moe, "\"capacity_factor\": %g, \"dropless\": false",
                 (double)g_cfg.moe_capacity_factor);
    snprintf(json, sizeof json,
             "{\"model\": {\"arch\": \"llama\", \"layers\": %d, \"hidden\": 32, "
             "\"heads\": 4, \"kv_heads\": 2, \"ffn\": 32, \"vocab\": %d, \"seq_len\": %d, "
             "\"moe\": {\"experts\": %d, \"top_k\": %d, \"expert_ffn\": 24, "
             "\"shared_experts\": 1, %s}}, "
             "\"parallelism\": {\"tp\": %d, \"sequence_parallel\": %s, \"pp\": %d, "
             "\"dp\": %d, \"ep\": %d, \"zero\": %d, \"recompute\": \"%s\", "
             "\"pp_schedule\": \"%s\", \"virtual_stages\": %d}, "
             "\"batch\": {\"micro\": %d, \"grad_accum\": %d}, "
             "\"train\": {\"device\": \"cpu\"}}",
             L, V, T, E, K, moe, a->tp, a->sp ? "true" : "false", a->pp, a->dp,
             a->ep > 1 ? a->ep : 1, a->zero, a->recompute ? "full" : "none",
             a->sched == LLMT_PP_GPIPE         ? "gpipe"
             : a->sched == LLMT_PP_INTERLEAVED ? "interleaved"
                                               : "1f1b",
             a->v > 1 ? a->v : 1, B, a->m);
    llmt_spec *sp = NULL;
    CHECK_STATUS(llmt_spec_parse_json(NULL, json, strlen(json), &sp), LLMT_OK);
    int n = world_of(a), same = 1;
    double worst = 0.0;
    for (int st = 0; sp && st < a->pp; st++) {
        double pt[3];
        llmt__plan_engine_stage_tp(sp, st, pt);
        double act = llmt__plan_engine_stage_act(sp, st);
        for (int r = 0; r < n; r++) {
            if (a[r].stage != st || a[r].st != LLMT_OK)
                continue;
            for (int k = 0; k < 3; k++)
                same &= fabs(a[r].tpb[k] - pt[k]) <= 1e-12 * pt[k];
            double err = (act - (double)a[r].act) / (double)a[r].act;
            worst = fabs(err) > fabs(worst) ? err : worst;
            CHECK(act == (double)a[r].act);
        }
        printf("  stage %d: TP %.0f calls %.0f B (bus %.0f) per step, plan %.0f / %.0f / "
               "%.0f; activations %lld B, plan %.0f\n",
               st, a[st * a->tp].tpb[0], a[st * a->tp].tpb[1], a[st * a->tp].tpb[2], pt[0],
               pt[1], pt[2], (long long)a[st * a->tp].act, act);
    }
    CHECK(same);
    printf("  %s: TP bytes %s, activations worst %+.1f%%\n", name,
           same ? "equal the plan's on every rank" : "DIFFER from the plan's", 100 * worst);
    llmt_spec_destroy(sp);
}

/* proto's layout against its single-rank run (grad_accum dp x m). */
static void check_layout(const char *name, rank_arg proto)
{
    rank_arg ref[1], a[MAXR];
    memset(ref, 0, sizeof ref);
    memset(a, 0, sizeof a);
    rank_arg one = {.m = proto.m * (proto.dp > 1 ? proto.dp : 1)};
    run(&one, ref);
    run(&proto, a);
    compare(name, ref, a);
    if (proto.plan)
        check_plan(name, a);
    free_args(ref, 1);
    free_args(a, MAXR);
}

/* tp 2 x pp 2 saves after step 5, one rank resumes: the last five losses
 * and the final parameters those of the uninterrupted run. */
static void check_ckpt(void)
{
    config(0.0f);
    char root[] = "/tmp/llmt_moe_tppp_XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    rank_arg ref[1] = {0}, a[MAXR] = {0}, one[1] = {0};
    run(&(rank_arg){.m = M}, ref);
    run(&(rank_arg){.tp = 2, .pp = 2, .m = M, .sched = LLMT_PP_1F1B, .k1 = 5, .save = root}, a);
    run(&(rank_arg){.m = M, .k0 = 5, .load = root}, one);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    CHECK_STATUS(one[0].st, LLMT_OK);
    for (int r = 0; r < 4; r++)
        CHECK_STATUS(a[r].st, LLMT_OK);
    rank_fixture_worst w =
        rank_fixture_roundtrip(&RANK_FIXTURE_FIELDS(rank_arg), ref, a, 4, one, 5, STEPS,
                               "checkpoint tp 2 x pp 2 -> one rank");
    g_worst_loss = fmax(g_worst_loss, w.loss);
    free_args(ref, 1);
    free_args(a, MAXR);
    free_args(one, 1);
    rank_fixture_rmtree(root);
}

int main(void)
{
    tp_fixture_data((size_t)STEPS * 2 * M * B * T, V, &g_in, &g_tg);
    CHECK(g_in && g_tg);
    config(1.0f); /* binding: without SP each TP rank routes the single rank's rows */
    check_layout("tp 2 x pp 2 1f1b capacity 1.0",
                 (rank_arg){.tp = 2, .pp = 2, .m = M, .sched = LLMT_PP_1F1B, .plan = 1});
    rank_arg tpep = {.tp = 2, .pp = 2, .dp = 2, .ep = 2, .m = M, .sched = LLMT_PP_GPIPE};
    tpep.plan = 1;
    check_layout("tp 2 x pp 2 x ep 2 (dp 2) gpipe cap 1.0", tpep);
    config(2.0f); /* E / top_k: an expert can take every row of its rank */
    rank_arg sp = {.tp = 2, .sp = 1, .pp = 2, .m = M, .sched = LLMT_PP_1F1B, .plan = 1};
    check_layout("tp 2 sp x pp 2 1f1b capacity 2", sp);
    rank_arg spep = sp;
    spep.dp = spep.ep = 2;
    spep.zero = 1;
    check_layout("tp 2 sp x pp 2 x ep 2 zero 1 cap 2", spep);
    rank_arg spv = sp;
    spv.sched = LLMT_PP_INTERLEAVED;
    spv.v = 2;
    check_layout("tp 2 sp x pp 2 x v 2 interleaved cap 2", spv);
    rank_arg sprc = sp;
    sprc.recompute = 1;
    check_layout("tp 2 sp x pp 2 1f1b cap 2, full recompute", sprc);
    config(0.0f);
    rank_arg spdp = sp;
    spdp.dp = 2;
    spdp.zero = 1;
    check_layout("tp 2 sp x pp 2 x dp 2 zero 1 dropless", spdp);
    check_ckpt();
    printf("worst: loss rel %.2e, params rel L2 %.2e\n", g_worst_loss, g_worst_rel);
    free(g_in);
    free(g_tg);
    return check_exit("moe-tppp");
}
