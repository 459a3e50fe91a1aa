/* Context parallelism composed with pipeline parallelism (issue 18:
 * llmt__trainer_set_cp, then llmt_trainer_set_pp_comm: each stage's
 * engine holds this rank's T / cp rows of every sequence and runs the CP
 * exchange in its layers' attention) against the single-rank engine on the
 * same global batches, fp32 CPU backend, ranks as threads on one
 * in-process communicator split as the plan orders them (CP innermost
 * here, as there is no TP; then PP, then DP): world rank r is CP rank
 * r % cp, stage r / cp % pp, replica r / (cp pp).
 *
 * Cases, 10 AdamW steps each (clipping on), 4 sequences of 64 tokens a
 * step in micro-batches of 1 (the pipeline's 4 micro-batches; 2 for each
 * of two replicas):
 *   cp 2 x pp 2, 1F1B, GPT-2 (learned positions, tied head: the last
 *   stage's wte copy) and Llama with 2 kv heads (RoPE), ring and
 *   all-gather each;
 *   cp 2 x pp 2 interleaved (2 virtual stages of a 4-layer Llama: each
 *   chunk's layers run the exchange);
 *   cp 2 x pp 2 x dp 2, ZeRO-1, GPT-2 ring (8 ranks), its checkpoint after
 *   step 5 (each stage's first CP rank its blocks, the moments' shares of
 *   its replica) resumed by one rank;
 *   GPipe with full recompute (the exchange runs again in the backward).
 * Checked on every rank: the losses of the 10 steps within 1e-5
 * relative, the evaluate loss of one global batch before training within
 * 1e-5 relative, the final parameters (each from a rank of the stage that
 * holds it, every CP rank's copy) within 1e-5 relative L2 and 1e-4
 * absolute. Why these hold: CP and PP each change only the order of fp32
 * sums (attention's log-sum-exp merge of blocks, the CP group's sum of the
 * replicated weights' gradients, the gradient norm summed per stage, a
 * tied wte's two halves) a few ulps a step, which AdamW (at most about lr
 * per weight a step) does not amplify in 10 steps: device-cp and
 * device-pp hold each alone to the same bounds. The worst cases print.
 *
 * Also: greedy generation past the window under cp 2 x pp 2 equals the
 * trainer's own before attaching (the last position's row on one CP rank
 * of the last stage); a checkpoint saved after step 5 under cp 2 x pp 2
 * (each stage's first CP rank its blocks) resumed by one rank, and by
 * cp 2 x pp 2 all-gather, continues the uninterrupted losses of steps
 * 6-10 within 1e-5 relative; CP after the pipeline is refused
 * (LLMT_ERR_STATE, naming the order).
 *
 * test_device_cppp emul: the bf16 host emulation on cp 2 x pp 2 1F1B
 * (GPT-2 ring, Llama all-gather) with device-cp's bf16 bounds: losses and
 * evaluate within 2^-9 relative, the fp32 masters within 2 x lr x steps
 * absolute (activations round to bf16 at other points of the sums). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "train/cp.h"
#include "train/device.h"

#define STEPS 10
#define SAVE_AT 5
#define SEQS 4
#define T 64
#define V 97
#define LR 1e-3f
#define MAXW 8
#define NGEN (T + 4) /* new tokens: past the window */

static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static const llmt__dev_ops *g_ops;
static int g_bf16; /* the emulation: bf16 bounds */

typedef struct rank_arg {
    llmt_comm *world; /* NULL: the single-rank reference */
    int rank, cp, pp, dp, variant, sched, v, zero, recompute;
    int gen;                 /* generate before and after attaching */
    const char *save, *load; /* save after SAVE_AT; resume from SAVE_AT */
    float loss[STEPS];
    float eval;
    int32_t gen_one[NGEN], gen_split[NGEN];
    float *params;
    int64_t numel;
    int first_layer, layers, stages; /* this rank's stage (llmt_pp_stats) */
    int cp_size, local_seq;          /* llmt_trainer_cp_stats */
    llmt_status st, cp_after_pp;
    char err[1024];
} rank_arg;

static llmt_status one_step(llmt_trainer *tr, const llmt_batch *b, float *loss)
{
    llmt_step_metrics met;
    memset(&met, 0, sizeof met);
    met.struct_size = sizeof met;
    llmt_status s = llmt_trainer_step(tr, b, &met);
    *loss = met.loss;
    return s;
}

/* The CP, PP and DP groups off the world, every rank calling each split;
 * attached CP, then PP, then DP. */
static llmt_status attach(rank_arg *a, llmt_trainer *tr, llmt_comm **c)
{
    int cr = a->rank % a->cp, st = a->rank / a->cp % a->pp, dr = a->rank / (a->cp * a->pp);
    llmt_status s = llmt_comm_split(a->world, dr * a->pp + st, cr, &c[0]);
    if (s == LLMT_OK)
        s = llmt_comm_split(a->world, dr * a->cp + cr, st, &c[1]);
    if (s == LLMT_OK && a->dp > 1)
        s = llmt_comm_split(a->world, st * a->cp + cr, dr, &c[2]);
    if (s != LLMT_OK)
        return s;
    if ((s = llmt__trainer_set_cp(tr, c[0], a->variant)) != LLMT_OK)
        return s;
    llmt_pp_opts po;
    llmt_pp_opts_init(&po, sizeof po);
    po.schedule = a->sched;
    po.virtual_stages = a->v > 1 ? a->v : 1;
    if ((s = llmt_trainer_set_pp_comm(tr, c[1], &po)) != LLMT_OK)
        return s;
    /* before the engine is made the order is free: CP again after the
     * pipeline is recorded again (the engine is made once, at the first
     * call that needs it: lib/train/trainer_build.c), and the run below
     * must still equal the reference; once it is made (gen: generate ran
     * first), the order is CP first and this is refused (not collective) */
    a->cp_after_pp = llmt__trainer_set_cp(tr, c[0], a->variant);
    if (a->gen && (a->cp_after_pp != LLMT_ERR_STATE ||
                   !strstr(llmt_trainer_last_error(tr), "before pipeline")))
        a->cp_after_pp = LLMT_ERR_INTERNAL;
    if (c[2]) {
        llmt_dp_opts d;
        llmt_dp_opts_init(&d, sizeof d);
        d.zero_stage = a->zero;
        s = llmt_trainer_set_comm(tr, c[2], &d);
    }
    return s;
}

static llmt_status ckpt_io(rank_arg *a, llmt_trainer *tr, int save)
{
    int world = a->world ? a->cp * a->pp * a->dp : 1;
    return rank_fixture_ckpt(tr, save ? a->save : a->load, a->world ? a->rank : 0, world, save,
                             SAVE_AT);
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *c[3] = {NULL, NULL, NULL};
    int dp = a->dp > 1 ? a->dp : 1, dr = a->world ? a->rank / (a->cp * a->pp) : 0;
    a->st = llmt_model_create(NULL, &g_cfg, &m);
    if (a->st == LLMT_OK) {
        llmt_trainer_opts o;
        rank_fixture_opts(&o, 1, SEQS / dp, T, LR);
        o.recompute = a->recompute;
        a->st = llmt__trainer_create_dev(m, &o, g_ops, &tr);
    }
    if (a->st == LLMT_OK && a->gen)
        a->st = llmt_trainer_generate(tr, g_in, 3, NGEN, 0.0f, 0, 1, a->gen_one);
    if (a->st == LLMT_OK && a->world)
        a->st = attach(a, tr, c);
    if (a->st == LLMT_OK && a->load) /* after the layout: each stage its blocks */
        a->st = ckpt_io(a, tr, 0);
    if (a->st == LLMT_OK && a->gen)
        a->st = llmt_trainer_generate(tr, g_in, 3, NGEN, 0.0f, 0, 1, a->gen_split);
    if (a->st == LLMT_OK && !a->load) { /* one global batch; DP is attached */
        llmt_batch b = {sizeof b, g_in, g_tg, SEQS, T};
        a->st = llmt_trainer_evaluate(tr, &b, &a->eval);
    }
    for (int k = a->load ? SAVE_AT : 0; k < STEPS && a->st == LLMT_OK; k++) {
        /* this replica's share of the global batch */
        size_t at = ((size_t)k * SEQS + (size_t)dr * (SEQS / dp)) * T;
        llmt_batch b = {sizeof b, g_in + at, g_tg + at, SEQS / dp, T};
        a->st = one_step(tr, &b, &a->loss[k]);
        if (a->st == LLMT_OK && a->save && k + 1 == SAVE_AT)
            a->st = ckpt_io(a, tr, 1);
    }
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr);
    llmt_pp_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.struct_size = sizeof ps;
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_pp_stats(tr, &ps);
    a->first_layer = ps.first_layer;
    a->layers = ps.layers;
    a->stages = ps.stages;
    llmt_cp_stats cs;
    memset(&cs, 0, sizeof cs);
    cs.struct_size = sizeof cs;
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_cp_stats(tr, &cs);
    a->cp_size = cs.size;
    a->local_seq = cs.local_seq_len;
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m,
                       a->st == LLMT_OK ? &a->params : NULL, &a->numel);
    for (int i = 0; i < 3; i++)
        llmt_comm_destroy(c[i]);
    return NULL;
}

/* proto's case over cp x pp x dp ranks (cp 0: the single rank). */
static void run(const rank_arg *proto, int cp, int pp, int dp, rank_arg *a)
{
    int n = cp ? cp * pp * dp : 1;
    for (int r = 0; r < n; r++) {
        a[r] = *proto;
        a[r].rank = r;
        a[r].cp = cp;
        a[r].pp = pp;
        a[r].dp = dp;
        a[r].world = NULL;
    }
    rank_fixture_run(a, sizeof *a, n, cp > 0, offsetof(rank_arg, world), rank_main);
}

static int g_layers;

static void config(int llama, int layers)
{
    tp_fixture_config(&g_cfg, llama, 2, V, T);
    g_cfg.layers = layers;
    g_layers = layers;
}

/* A layout's ranks against the reference: losses of steps [k0, STEPS),
 * evaluate (k0 0), the parameters by stage for each CP rank and replica. */
static void check_layout(const char *name, const rank_arg *ref, rank_arg *a, int k0)
{
    int cp = a[0].cp, pp = a[0].pp, dp = a[0].dp, n = cp * pp * dp, v = a[0].v > 1 ? a[0].v : 1;
    rank_fixture_worst w = {0};
    double we = 0.0, wp = 0.0, wrel = 0.0;
    int ok = 1;
    for (int r = 0; r < n; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s rank %d: %s\n", name, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        ok &= a[r].st == LLMT_OK;
        if (a[r].st != LLMT_OK)
            continue;
        CHECK_STATUS(a[r].cp_after_pp, a[r].gen ? LLMT_ERR_STATE : LLMT_OK);
        /* the layout is the one asked for: each rank T / cp rows, a stage */
        CHECK(a[r].cp_size == cp && a[r].local_seq == T / cp && a[r].stages == pp);
        rank_fixture_losses(&w, a[r].loss, ref->loss, k0, STEPS, g_bf16);
        if (k0 == 0) {
            double e = fabs((double)a[r].eval - ref->eval) / ref->eval;
            if (!(e <= we))
                we = e;
        }
        CHECK(a[r].numel == ref->numel);
    }
    /* each (CP rank, replica)'s stages against the reference; the chunks'
     * first layers from the stages' stats (interleaved: v chunks a stage,
     * equal under the automatic balance of layers divisible by pp v) */
    for (int cr = 0; ok && cr < cp; cr++)
        for (int d = 0; d < dp; d++) {
            float *params[MAXW];
            int first[MAXW + 1];
            for (int s = 0; s < pp; s++)
                params[s] = a[(d * pp + s) * cp + cr].params;
            int chunks = pp * v, per = g_layers / chunks;
            for (int j = 0; j <= chunks; j++)
                first[j] = j * per;
            if (v == 1)
                for (int s = 0; s < pp; s++) {
                    const rank_arg *x = &a[(d * pp + s) * cp + cr];
                    CHECK(x->first_layer == first[s] && x->layers == first[s + 1] - first[s]);
                }
            double rel =
                rank_fixture_stage_diff(&g_cfg, first, chunks, pp, params, ref->params, &wp);
            if (!(rel <= wrel))
                wrel = rel;
        }
    printf("%s: losses %.3g, evaluate %.3g relative; params %.3g relative L2, %.3g max abs\n",
           name, w.loss, we, wrel, wp);
    if (g_bf16) {
        CHECK(we <= 1.0 / 512);
        CHECK(wp <= 2.0 * LR * STEPS);
    } else {
        CHECK(we <= 1e-5);
        CHECK(wrel <= 1e-5);
        CHECK(wp <= 1e-4);
    }
    for (int r = 0; r < n; r++) {
        free(a[r].params);
        a[r].params = NULL;
    }
}

static void reference(rank_arg *ref)
{
    rank_arg proto;
    memset(&proto, 0, sizeof proto);
    run(&proto, 0, 1, 1, ref);
    CHECK_STATUS(ref->st, LLMT_OK);
    if (ref->st != LLMT_OK)
        fprintf(stderr, "reference: %s\n", ref->err);
    /* training moved: the comparison is not of two untouched inits */
    CHECK(ref->loss[STEPS - 1] < ref->loss[0]);
}

/* The checkpoint under root (saved after step SAVE_AT) resumed by one rank:
 * steps 6-10 and the final parameters against the uninterrupted run. */
static void resume_one(const char *root, const rank_arg *ref, const char *what)
{
    rank_arg proto, one;
    memset(&proto, 0, sizeof proto);
    proto.load = root;
    run(&proto, 0, 1, 1, &one);
    if (one.st != LLMT_OK)
        fprintf(stderr, "one-rank resume of %s: %s\n", what, one.err);
    CHECK_STATUS(one.st, LLMT_OK);
    rank_fixture_worst w = {0};
    if (one.st == LLMT_OK)
        rank_fixture_losses(&w, one.loss, ref->loss, SAVE_AT, STEPS, 0);
    if (one.st == LLMT_OK)
        rank_fixture_params_check(&w, one.params, one.numel, ref->params, ref->numel, 0, 0);
    printf("%s checkpoint resumed by one rank: steps 6-10 losses %.3g relative, params %.3g "
           "relative L2, %.3g max abs\n",
           what, w.loss, w.rel, w.abs);
    free(one.params);
}

/* A case's settings, the rest zero. */
static rank_arg proto_of(int sched, int variant)
{
    rank_arg p;
    memset(&p, 0, sizeof p);
    p.sched = sched;
    p.variant = variant;
    return p;
}

/* The model (Llama or GPT-2 with `layers` layers) and its single-rank
 * reference; 0 when that failed. */
static int begin(int llama, int layers, rank_arg *ref)
{
    config(llama, layers);
    reference(ref);
    return ref->st == LLMT_OK;
}

/* proto on cp 2 x pp 2 (x dp) against ref from step k0, as `name`. */
static void layout(const char *name, const rank_arg *proto, int dp, const rank_arg *ref,
                   rank_arg *a, int k0)
{
    run(proto, 2, 2, dp, a);
    check_layout(name, ref, a, k0);
}

/* A checkpoint root of its own under /tmp, and its removal. */
static void root_make(char *root)
{
    CHECK(mkdtemp(root) != NULL);
}

static void root_remove(const char *root)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
}

static void cases(const char *model, int llama)
{
    rank_arg ref[1], a[MAXW];
    if (!begin(llama, 2, ref))
        return;
    char name[128];
    for (int var = 0; var < 2; var++) {
        rank_arg p = proto_of(LLMT_PP_1F1B, var);
        snprintf(name, sizeof name, "%s cp 2 x pp 2 1F1B %s", model,
                 var == LLMT__CP_RING ? "ring" : "all-gather");
        layout(name, &p, 1, ref, a, 0);
    }
    if (!llama) { /* 8 ranks: GPT-2 ring, ZeRO-1 (moments sharded), saved */
        char root[] = "/tmp/llmt-cppp-XXXXXX";
        root_make(root);
        rank_arg p = proto_of(LLMT_PP_1F1B, LLMT__CP_RING);
        p.zero = 1;
        p.save = root;
        layout("gpt2 cp 2 x pp 2 x dp 2 ZeRO-1 1F1B ring", &p, 2, ref, a, 0);
        resume_one(root, ref, "  its");
        root_remove(root);
    } else { /* GPipe with full recompute: the exchange again in the backward */
        rank_arg p = proto_of(LLMT_PP_GPIPE, LLMT__CP_ALL_GATHER);
        p.recompute = 1;
        layout("llama kv 2 cp 2 x pp 2 GPipe full recompute all-gather", &p, 1, ref, a, 0);
    }
    free(ref->params);
}

/* Interleaved: a 4-layer Llama, 2 chunks a stage. */
static void interleaved(void)
{
    rank_arg ref[1], a[MAXW];
    if (!begin(1, 4, ref))
        return;
    rank_arg p = proto_of(LLMT_PP_INTERLEAVED, LLMT__CP_RING);
    p.v = 2;
    layout("llama kv 2 4 layers cp 2 x pp 2 interleaved v 2 ring", &p, 1, ref, a, 0);
    free(ref->params);
}

/* Generation and checkpoints (GPT-2: the tied head's two copies). */
static void gen_and_ckpt(void)
{
    rank_arg ref[1], a[MAXW], b[MAXW];
    if (!begin(0, 2, ref))
        return;
    char root[] = "/tmp/llmt-cppp-XXXXXX";
    root_make(root);
    rank_arg p = proto_of(LLMT_PP_1F1B, LLMT__CP_RING);
    p.gen = 1;
    p.save = root;
    run(&p, 2, 2, 1, a);
    for (int r = 0; r < 4; r++) /* the greedy tokens past the window */
        CHECK(a[r].st != LLMT_OK ||
              !memcmp(a[r].gen_one, a[r].gen_split, (size_t)NGEN * sizeof(int32_t)));
    int same = a[0].st == LLMT_OK && !memcmp(a[0].gen_one, a[0].gen_split, sizeof a[0].gen_one);
    printf("greedy generation of %d tokens under cp 2 x pp 2: %s the single rank's\n", NGEN,
           same ? "equal to" : "DIFFERENT from");
    check_layout("gpt2 cp 2 x pp 2 1F1B ring (saves after step 5)", ref, a, 0);
    /* resumed by one rank, and by cp 2 x pp 2 all-gather */
    resume_one(root, ref, "cp 2 x pp 2");
    p = proto_of(LLMT_PP_1F1B, LLMT__CP_ALL_GATHER);
    p.load = root;
    layout("  resumed under cp 2 x pp 2 all-gather", &p, 1, ref, b, SAVE_AT);
    root_remove(root);
    free(ref->params);
}

/* The emulation: GPT-2 ring and Llama all-gather, cp 2 x pp 2 1F1B. */
static void emul_cases(void)
{
    for (int llama = 0; llama < 2; llama++) {
        rank_arg ref[1], a[MAXW];
        if (!begin(llama, 2, ref))
            return;
        rank_arg p = proto_of(LLMT_PP_1F1B, llama ? LLMT__CP_ALL_GATHER : LLMT__CP_RING);
        layout(llama ? "emul llama kv 2 cp 2 x pp 2 1F1B all-gather"
                     : "emul gpt2 cp 2 x pp 2 1F1B ring",
               &p, 1, ref, a, 0);
        free(ref->params);
    }
}

int main(int argc, char **argv)
{
    g_bf16 = argc > 1 && strcmp(argv[1], "emul") == 0;
    g_ops = g_bf16 ? llmt__dev_emul() : llmt__dev_cpu();
    tp_fixture_data((size_t)STEPS * SEQS * T, V, &g_in, &g_tg);
    if (!g_in || !g_tg)
        return 1;
    if (g_bf16) {
        emul_cases();
        free(g_in);
        free(g_tg);
        return check_exit("device-cp-pp emul");
    }
    cases("gpt2", 0);
    cases("llama kv 2", 1);
    interleaved();
    gen_and_ckpt();
    free(g_in);
    free(g_tg);
    return check_exit("device-cp-pp");
}
