/* Mixture-of-experts layers under pipeline parallelism (lib/train/device.c's
 * stage path, moe_net.c's activation sets) against the single-rank engine
 * on the same batches, fp32 CPU backend, ranks as threads on one
 * in-process communicator (rank = dp index x pp + stage).
 *
 * Llama, 4 layers, 4 experts of 24, top-2; a step is m 4 micro-batches of
 * 2 sequences per data parallel replica, the single rank's grad_accum
 * dp x m micro-batches of the same sequences in the same order. A MoE
 * layer routes each micro-batch on its own, so capacities (1.0, binding:
 * tokens are dropped) and drops are those of the single rank's
 * micro-batches. Cases:
 *   pp 2 1F1B (capacity; again with full recompute: a stage's backward
 *   runs each MoE layer's forward again, against a reference without),
 *   GPipe (dropless), interleaved v 2 (one layer
 *   a chunk, capacity), uneven stages 1 + 3 with MoE only on layer 0
 *   (stage 1 has none); pp 2 x dp 2 ZeRO 0 and 1; pp 2 x ep 2 (EP inside
 *   the stage's data parallel group of 2, ZeRO 0 and 1); a shared expert
 *   once.
 * Ten AdamW steps with clipping. Checks on every rank:
 *   - per-step losses within 1e-5 relative of the single rank's;
 *   - final parameters (each from the stage that holds it) within 1e-5
 *     relative L2 and 1e-4 absolute (rank_fixture_stage_diff);
 *   - the last step's tallies of every MoE layer (llmt_trainer_moe_stats,
 *     each layer's from its stage, gathered over the pipeline group, so
 *     every stage reports all of them): kept counts per expert and drops
 *     equal, aux and z within 1e-5 relative;
 *   - the checkpoint reshards: pp 2 x dp 2 saves after step 5, one rank
 *     (pp 1) resumes from it; pp 1 saves, pp 2 resumes: the following
 *     losses equal the uninterrupted run's within 1e-5 relative;
 *   - set_pp_comm after set_ep_comm is refused naming the order;
 *   - each stage's activation bytes (its sets and its MoE layers' routing
 *     state per set) within 15% of the planner's (check_plan_memory). */
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

enum { B = 2, T = 16, V = 61, STEPS = 10, M = 4, E = 4, K = 2, FE = 24, L = 4, MAXR = 4 };

static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static double g_worst_loss, g_worst_param;

static void config(int dropless, int every, int shared)
{
    llmt_model_config *c = &g_cfg;
    moe_fixture_llama(c, V, T, L, 13);
    c->moe_experts = E;
    c->moe_top_k = K;
    c->moe_ffn = FE;
    c->moe_every = every;
    c->moe_shared_experts = shared;
    c->moe_capacity_factor = dropless ? 0.0f : 1.0f; /* a factor with dropless is refused */
    c->moe_dropless = dropless;
    c->moe_aux_loss_coef = 0.01f;
    c->moe_z_loss_coef = 0.001f;
}

typedef struct rank_arg {
    llmt_comm *world; /* NULL: the single rank */
    int stage, dpr, pp, dp, ep, zero, sched, v, m, recompute;
    const int32_t *layers; /* per virtual stage, or NULL: the balance */
    /* steps [k0, k1) (0, 0: all), after reading the checkpoint under load
     * (step k0, before the pipeline is attached); saved under save */
    int k0, k1;
    const char *load, *save;
    float loss[STEPS];
    int64_t act; /* activation bytes (llmt_trainer_memory) after the run */
    int64_t counts[L][E], dropped[L];
    double aux[L], z[L];
    float *params;
    int64_t numel;
    llmt_pp_stats ps;
    llmt_status st;
    char err[1024];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *ppc = NULL, *dpc = NULL, *epc = NULL;
    llmt_trainer_opts o;
    rank_fixture_opts(&o, B, a->m, T, 3e-3f);
    o.recompute = a->recompute;
    a->st = rank_fixture_open(&g_cfg, &o, &m, &tr);
    if (a->st == LLMT_OK && a->world) {
        a->st = llmt_comm_split(a->world, a->dpr, a->stage, &ppc);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(a->world, a->stage, a->dpr, &dpc);
    }
    if (a->st == LLMT_OK && dpc && a->dp > 1 && a->ep > 1)
        a->st = llmt_comm_split(dpc, a->dpr / a->ep, a->dpr, &epc);
    llmt_pp_opts po;
    stage_fixture_pp_opts(&po, a->sched, a->v, a->layers, a->pp * (a->v > 1 ? a->v : 1));
    rank_fixture_groups g = {.pp = a->pp > 1 ? ppc : NULL,
                             .dp = a->dp > 1 ? dpc : NULL,
                             .ep = epc,
                             .zero = a->zero,
                             .pp_opts = &po};
    if (a->st == LLMT_OK)
        a->st = rank_fixture_attach(tr, &g);
    /* read after the layout is attached: each stage reads its blocks */
    if (a->st == LLMT_OK && a->load)
        a->st =
            rank_fixture_ckpt(tr, a->load, a->dpr * a->pp + a->stage, a->pp * a->dp, 0, a->k0);
    int k1 = a->k1 ? a->k1 : STEPS;
    if (a->st == LLMT_OK)
        a->st = stage_fixture_steps(tr, g_in, g_tg, a->k0, k1, a->dp > 1 ? a->dp : 1, a->dpr,
                                    a->m, B, T, a->loss);
    for (int l = 0; l < L && a->st == LLMT_OK; l++)
        if (l % g_cfg.moe_every == 0)
            a->st = llmt_trainer_moe_stats(tr, l, a->counts[l], E, &a->dropped[l], &a->aux[l],
                                           &a->z[l]);
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr);
    if (a->st == LLMT_OK && a->save)
        a->st = rank_fixture_ckpt(tr, a->save, a->dpr * a->pp + a->stage, a->pp * a->dp, 1, k1);
    rank_fixture_pp_stats(tr, &a->st, &a->ps, &a->act);
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m, &a->params, &a->numel);
    llmt_comm_destroy(epc);
    llmt_comm_destroy(ppc);
    llmt_comm_destroy(dpc);
    return NULL;
}

/* pp x dp ranks from proto (rank = dpr x pp + stage); one rank without a
 * communicator when both are 1. */
static void run(const rank_arg *proto, rank_arg *a)
{
    int pp = proto->pp > 1 ? proto->pp : 1, dp = proto->dp > 1 ? proto->dp : 1, n = pp * dp;
    for (int r = 0; r < n; r++) {
        a[r] = *proto;
        a[r].world = NULL;
        a[r].stage = r % pp;
        a[r].dpr = r / pp;
        a[r].pp = pp;
        a[r].dp = dp;
    }
    rank_fixture_run(a, sizeof *a, n, n > 1, offsetof(rank_arg, world), rank_main);
}

static void free_args(rank_arg *a, int n)
{
    for (int r = 0; r < n; r++)
        free(a[r].params);
}

/* Every rank of a against the single rank ref: losses, the MoE tallies
 * of every MoE layer, and each replica's parameters from their stages. */
static void compare(const char *name, const rank_arg *ref, const rank_arg *a)
{
    int pp = a[0].pp, dp = a[0].dp, v = a[0].v > 1 ? a[0].v : 1, ok = ref->st == LLMT_OK;
    rank_fixture_worst wl = {0};
    double wp = 0.0, wt = 0.0, wr = 0.0;
    int64_t kept = 0, dropped = 0;
    if (ref->st != LLMT_OK)
        fprintf(stderr, "%s reference: %s\n", name, ref->err);
    for (int r = 0; r < pp * dp; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s rank %d: %s\n", name, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        ok = ok && a[r].st == LLMT_OK;
        if (!ok)
            continue;
        rank_fixture_losses(&wl, a[r].loss, ref->loss, 0, STEPS, 0);
        for (int l = 0; l < L; l += g_cfg.moe_every)
            moe_fixture_tallies(a[r].counts[l], a[r].dropped[l], a[r].aux[l], a[r].z[l],
                                ref->counts[l], ref->dropped[l], ref->aux[l], ref->z[l], E,
                                &wt);
    }
    for (int l = 0; l < L; l += g_cfg.moe_every) {
        for (int x = 0; x < E; x++)
            kept += ref->counts[l][x];
        dropped += ref->dropped[l];
    }
    /* every (token, choice) of the step is kept or dropped, once */
    CHECK(kept + dropped ==
          (int64_t)((L + g_cfg.moe_every - 1) / g_cfg.moe_every) * dp * a[0].m * B * T * K);
    if (ok) {
        for (int d = 0; d < dp; d++) {
            /* replica d's stages: their virtual stages' layers */
            int first[MAXR * 2 + 1] = {0}, nv = pp * v;
            float *params[MAXR];
            for (int r = 0; r < pp; r++)
                params[r] = a[d * pp + r].params;
            for (int j = 0; j < nv; j++)
                first[j + 1] = first[j] + (a[0].layers ? a[0].layers[j]
                                           : j % pp    ? a[d * pp + 1].ps.layers
                                                       : a[d * pp].ps.layers);
            CHECK(first[nv] == L);
            double rel =
                rank_fixture_stage_diff(&g_cfg, first, nv, pp, params, ref->params, &wp);
            CHECK(rel <= 1e-5);
            wr = fmax(wr, rel);
        }
        CHECK(wp <= 1e-4);
        CHECK(ref->loss[STEPS - 1] < ref->loss[0]);
    }
    printf("%-36s loss rel %.2e, params rel L2 %.2e max abs %.2e, aux/z rel %.2e; kept %lld "
           "dropped %lld\n",
           name, wl.loss, wr, wp, wt, (long long)kept, (long long)dropped);
    g_worst_loss = fmax(g_worst_loss, wl.loss);
    g_worst_param = fmax(g_worst_param, wp);
}

/* One layout against its single-rank run (grad_accum dp x m). */
static void check_layout(const char *name, rank_arg proto)
{
    rank_arg ref[1], a[MAXR];
    rank_arg one = proto;
    one.pp = one.dp = one.ep = one.v = 1;
    one.layers = NULL;
    one.zero = 0;
    one.recompute = 0; /* recomputing changes no number */
    one.m = proto.m * (proto.dp > 1 ? proto.dp : 1);
    run(&one, ref);
    run(&proto, a);
    compare(name, ref, a);
    free_args(ref, 1);
    free_args(a, proto.pp * (proto.dp > 1 ? proto.dp : 1));
}

/* pp 2 x dp 2 saves after step 5, pp 1 (the same global batch as
 * grad_accum dp x m) resumes; and pp 1 saves, pp 2 x dp 2 resumes: the
 * last five losses as the uninterrupted pp 1 run's. */
static void check_reshard(void)
{
    config(0, 1, 0);
    char da[] = "/tmp/moe_pp_ckA_XXXXXX", db[] = "/tmp/moe_pp_ckB_XXXXXX";
    CHECK(mkdtemp(da) != NULL && mkdtemp(db) != NULL);
    rank_arg ref[1], a[MAXR], one[1], b[MAXR];
    rank_arg p1 = {.pp = 1, .dp = 1, .m = 2 * M, .sched = LLMT_PP_1F1B};
    run(&p1, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    rank_arg p2 = {.pp = 2, .dp = 2, .m = M, .sched = LLMT_PP_1F1B, .k1 = 5, .save = da};
    run(&p2, a);
    rank_arg r1 = p1;
    r1.k0 = 5;
    r1.load = da;
    r1.k1 = 0;
    run(&r1, one);
    rank_arg s1 = p1;
    s1.k1 = 5;
    s1.save = db;
    rank_arg s1r[1];
    run(&s1, s1r);
    rank_arg r2 = {.pp = 2, .dp = 2, .m = M, .sched = LLMT_PP_GPIPE, .k0 = 5, .load = db};
    run(&r2, b);
    rank_fixture_worst w = {0};
    for (int r = 0; r < 4; r++) {
        CHECK_STATUS(a[r].st, LLMT_OK);
        CHECK_STATUS(b[r].st, LLMT_OK);
        if (a[r].st == LLMT_OK && b[r].st == LLMT_OK && ref[0].st == LLMT_OK) {
            rank_fixture_losses(&w, a[r].loss, ref[0].loss, 0, 5, 0);
            rank_fixture_losses(&w, b[r].loss, ref[0].loss, 5, STEPS, 0);
        }
    }
    CHECK_STATUS(one[0].st, LLMT_OK);
    CHECK_STATUS(s1r[0].st, LLMT_OK);
    if (one[0].st == LLMT_OK && ref[0].st == LLMT_OK)
        rank_fixture_losses(&w, one[0].loss, ref[0].loss, 5, STEPS, 0);
    printf("reshard pp 2 x dp 2 -> pp 1, pp 1 -> pp 2 x dp 2 (GPipe): losses rel %.2e\n",
           w.loss);
    g_worst_loss = fmax(g_worst_loss, w.loss);
    free_args(ref, 1);
    free_args(a, 4);
    free_args(one, 1);
    free_args(s1r, 1);
    free_args(b, 4);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", da, db);
    CHECK(system(cmd) == 0);
}

/* The planner's model of a stage's activations (lib/plan/engine.c,
 * llmt__plan_engine_stage_act: the schedule's in-flight sets, each MoE
 * layer's routing state once per set) against what each stage holds
 * (llmt_trainer_memory: its activation sets plus its MoE layers' saved
 * buffers), to the byte as device-ppv checks the dense model: 1F1B, GPipe
 * (dropless), interleaved v 2, and pp 2 x ep 2 (the exchange's rows). */
static void check_plan_memory(void)
{
    static const int32_t chunks[4] = {1, 1, 1, 1};
    static const struct {
        int sched, v, dp, ep, dropless;
        const char *name;
    } cases[] = {{LLMT_PP_1F1B, 1, 1, 1, 0, "1f1b"},
                 {LLMT_PP_GPIPE, 1, 1, 1, 1, "gpipe"},
                 {LLMT_PP_INTERLEAVED, 2, 1, 1, 0, "interleaved"},
                 {LLMT_PP_1F1B, 1, 2, 2, 0, "1f1b"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        config(cases[k].dropless, 1, 0);
        rank_arg a[MAXR];
        rank_arg proto = {.pp = 2,
                          .dp = cases[k].dp,
                          .ep = cases[k].ep,
                          .m = M,
                          .v = cases[k].v,
                          .sched = cases[k].sched,
                          .layers = cases[k].v > 1 ? chunks : NULL};
        run(&proto, a);
        char json[2048];
        snprintf(json, sizeof json,
                 "{\"model\": {\"arch\": \"llama\", \"layers\": %d, \"hidden\": 32, "
                 "\"heads\": 4, \"kv_heads\": 2, \"ffn\": 32, \"vocab\": %d, \"seq_len\": %d, "
                 "\"moe\": {\"experts\": %d, \"top_k\": %d, \"expert_ffn\": %d, "
                 "%s}}, "
                 "\"parallelism\": {\"pp\": 2, \"dp\": %d, \"ep\": %d, "
                 "\"virtual_stages\": %d, \"pp_schedule\": \"%s\"%s}, "
                 "\"batch\": {\"micro\": %d, \"grad_accum\": %d}, "
                 "\"train\": {\"device\": \"cpu\"}}",
                 L, V, T, E, K, FE,
                 cases[k].dropless ? "\"dropless\": true"
                                   : "\"capacity_factor\": 1.0, \"dropless\": false",
                 cases[k].dp, cases[k].ep, cases[k].v, cases[k].name,
                 cases[k].v > 1 ? ", \"stage_layers\": [1, 1, 1, 1]" : "", B, M);
        llmt_spec *sp = NULL;
        CHECK_STATUS(llmt_spec_parse_json(NULL, json, strlen(json), &sp), LLMT_OK);
        for (int st = 0; st < 2 && sp; st++) {
            CHECK_STATUS(a[st].st, LLMT_OK);
            if (a[st].st != LLMT_OK) {
                fprintf(stderr, "%s: %s\n", cases[k].name, a[st].err);
                continue;
            }
            double plan = llmt__plan_engine_stage_act(sp, st);
            double err = (plan - (double)a[st].act) / (double)a[st].act;
            printf("stage %d activations, MoE %s pp 2 v %d x ep %d m %d%s: measured %lld "
                   "bytes, planned %.0f (%+.1f%%)\n",
                   st, cases[k].name, cases[k].v, cases[k].ep, M,
                   cases[k].dropless ? " dropless" : "", (long long)a[st].act, plan, 100 * err);
            CHECK(plan == (double)a[st].act);
        }
        llmt_spec_destroy(sp);
        free_args(a, 2 * cases[k].dp);
    }
}

/* Expert parallelism attached before the pipeline on a made engine (the
 * first call that needs it made it: here sync_params on one rank, with
 * no group recorded yet): the stage's new engine would start without it,
 * so set_pp_comm refuses, naming the order (no collective runs: one
 * thread holds rank 0 of both groups). Before the engine is made the
 * order is free (test_engine_once.c). */
static void check_order(void)
{
    config(0, 1, 0);
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *c[2] = {NULL}, *p[2] = {NULL};
    llmt_trainer_opts o;
    rank_fixture_opts(&o, B, M, T, 3e-3f);
    CHECK_STATUS(llmt_model_create(NULL, &g_cfg, &m), LLMT_OK);
    CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 2, NULL, c), LLMT_OK);
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 2, NULL, p), LLMT_OK);
    CHECK_STATUS(llmt_trainer_sync_params(tr), LLMT_OK); /* makes the engine */
    CHECK_STATUS(llmt_trainer_set_ep_comm(tr, c[0]), LLMT_OK);
    CHECK_STATUS(llmt_trainer_set_pp_comm(tr, p[0], NULL), LLMT_ERR_STATE);
    printf("set_pp_comm after set_ep_comm: %s\n", llmt_trainer_last_error(tr));
    CHECK(strstr(llmt_trainer_last_error(tr), "llmt_trainer_set_ep_comm") != NULL);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    for (int r = 0; r < 2; r++) {
        llmt_comm_destroy(c[r]);
        llmt_comm_destroy(p[r]);
    }
}

int main(void)
{
    tp_fixture_data((size_t)STEPS * 2 * M * B * T, V, &g_in, &g_tg);
    static const int32_t chunks[4] = {1, 1, 1, 1}, uneven[2] = {1, 3};
    config(0, 1, 0);
    check_layout("pp 2 1f1b capacity 1.0",
                 (rank_arg){.pp = 2, .dp = 1, .m = M, .sched = LLMT_PP_1F1B});
    check_layout(
        "pp 2 x v 2 interleaved capacity 1.0",
        (rank_arg){.pp = 2, .m = M, .v = 2, .sched = LLMT_PP_INTERLEAVED, .layers = chunks});
    check_layout("pp 2 1f1b capacity, full recompute",
                 (rank_arg){.pp = 2, .m = M, .sched = LLMT_PP_1F1B, .recompute = 1});
    check_layout("pp 2 x dp 2 zero 1 1f1b capacity",
                 (rank_arg){.pp = 2, .dp = 2, .zero = 1, .m = M, .sched = LLMT_PP_1F1B});
    check_layout("pp 2 x ep 2 (dp 2) 1f1b capacity",
                 (rank_arg){.pp = 2, .dp = 2, .ep = 2, .m = M, .sched = LLMT_PP_1F1B});
    config(1, 1, 0);
    check_layout("pp 2 gpipe dropless", (rank_arg){.pp = 2, .m = M, .sched = LLMT_PP_GPIPE});
    check_layout("pp 2 x dp 2 zero 0 gpipe dropless",
                 (rank_arg){.pp = 2, .dp = 2, .m = M, .sched = LLMT_PP_GPIPE});
    check_layout(
        "pp 2 x ep 2 (dp 2) zero 1 gpipe dropless",
        (rank_arg){.pp = 2, .dp = 2, .ep = 2, .zero = 1, .m = M, .sched = LLMT_PP_GPIPE});
    config(0, 4, 1); /* MoE on layer 0 only (+ a shared expert): stage 1 has none */
    check_layout("pp 2 uneven 1+3 1f1b, shared expert",
                 (rank_arg){.pp = 2, .m = M, .sched = LLMT_PP_1F1B, .layers = uneven});
    check_reshard();
    check_plan_memory();
    check_order();
    printf("worst: loss rel %.2e, params max abs %.2e\n", g_worst_loss, g_worst_param);
    free(g_in);
    free(g_tg);
    return check_exit("moe-pp");
}
