/* Sequence parallelism of the engine (lib/train/device.c, lib/train/tp.c;
 * llmt_trainer_set_sequence_parallel) against the single-rank engine on
 * the same global batches:
 *
 *   test_device_sp cpu    the fp32 CPU backend; unit suite
 *   test_device_sp emul   the bf16 host emulation; unit suite
 *
 * Ranks are threads on one in-process communicator, placed by an
 * llmt_plan of tp x dp (TP innermost); each rank's TP and DP groups come
 * from llmt_comm_create_plan_group. Every TP rank of a DP replica reads
 * that replica's share of each global batch of 4 sequences of 16 tokens
 * (micro-batches of 2). Cases: GPT-2 (LayerNorm with biases, learned
 * positions, tied embeddings) and Llama (RMSNorm, RoPE, SwiGLU) with
 * grouped-query attention whose kv heads are split (kv_heads >= tp) or
 * shared (kv_heads < tp), at tp 2 and 4, dp 1 and 2, ZeRO 0-3, one with
 * full recompute (the layers' forwards, collectives included, run again in
 * the backward). Ten AdamW steps with clipping.
 *
 * Bounds, and why: sequence parallelism changes only the order of fp32
 * sums (a norm's weight gradient summed per block of rows, then over the
 * group; reduce-scatter and all-gather in place of all-reduce add the same
 * partial sums), so test_device_tp.c's bounds hold: losses within 1e-5
 * relative, final parameters within 1e-5 relative L2 and 1e-5 absolute
 * except at most 1 element in 10^4 (within 1e-4: an element whose
 * gradient is within rounding of zero gets an AdamW step those ulps
 * decide); the emulation within the bf16 bound (2^-9 on the losses,
 * 2 x lr x steps on the fp32 masters). The measured worst cases print.
 *
 * Before training, in the dp 1 cases, the loss of one sequence of 7 tokens
 * and the logits of its last position (a length tp does not divide: the
 * engine pads it; causal attention makes that exact) against the single
 * rank's: loss within 1e-5 relative, logits within 1e-5 x (1 + max |logit|).
 *
 * Memory (llmt_trainer_memory_usage, activations + device_activations,
 * per rank): with SP below without it at the same tp, equal again after
 * switching it off, and
 *   act_sp(tp) <= act(tp 1) / tp + 2 N C e + 12 N + 4 + 4 T + kvx
 * where N = micro x T rows, e the stored element's bytes: what SP keeps
 * whole is the gathered input / partial output scratch (two N x C), the
 * vocabulary-split loss's per-row scratch (3 N floats), the norm's 4-byte
 * sum, the host's generation row (4 T) and, with kv_heads < tp, the kv
 * heads every rank of a group holds (kvx = (layers + 1) x 2 N hd e x
 * (1 - kv_heads / tp): qkv and its gradient).
 *
 * Refusals: without a tensor parallel group, after data parallelism, a tp
 * that does not divide model.seq_len, on other than 0/1. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dev_model_fixture.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "train/device.h"

#define STEPS 10
#define SEQS 4 /* sequences per global step */
#define MICRO 2
#define T 16
#define V 97
#define LR 1e-3f
#define MAXW 8
#define PROBE 7 /* tokens of the probe sequence */

static const llmt__dev_ops *g_ops;
static int g_bf16;
static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static double g_worst_loss, g_worst_param;

typedef struct rank_arg {
    llmt_comm *world; /* NULL: the single-rank reference */
    const llmt_plan *plan;
    int rank, zero, sp, recompute, probe;
    float loss[STEPS];
    float *params;
    int64_t numel;
    int64_t act_tp, act_sp, act_off; /* activation bytes: tp alone, SP, SP off */
    double probe_loss;
    float logits[128];
    uint64_t ag, rs, ar; /* the TP group's collectives during the steps */
    llmt_status st;
    char err[1024];
} rank_arg;

/* The probe: loss of PROBE tokens and the logits of the last (collective
 * over the TP group). */
static llmt_status probe(rank_arg *a, llmt_trainer *tr)
{
    llmt__devtrain *g = llmt__trainer_devtrain(tr);
    llmt_status s = llmt__devtrain_loss(g, g_in, g_tg, 1, PROBE, &a->probe_loss);
    if (s == LLMT_OK)
        s = llmt__devtrain_last_logits(g, g_in, PROBE, a->logits);
    return s;
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *tpc = NULL, *dpc = NULL;
    int32_t co[LLMT_PLAN_NDIMS] = {0};
    int dp = 1;
    a->st = LLMT_OK;
    if (a->world) {
        a->st = tp_fixture_groups(a->world, a->plan, a->rank, co, &dp, &tpc, &dpc, a->err,
                                  sizeof a->err);
        if (a->st != LLMT_OK)
            return NULL;
    }
    a->st = llmt_model_create(NULL, &g_cfg, &m);
    if (a->st == LLMT_OK) {
        llmt_trainer_opts o;
        rank_fixture_opts(&o, MICRO, SEQS / MICRO / dp, T, LR);
        o.recompute = a->recompute;
        a->st = llmt__trainer_create_dev(m, &o, g_ops, &tr);
    }
    if (a->st == LLMT_OK && tpc)
        a->st = llmt_trainer_set_tp_comm(tr, tpc);
    a->act_tp = tr ? rank_fixture_act_bytes(tr) : -1;
    /* on, off (the engine as tp alone again), on */
    if (a->st == LLMT_OK && a->sp) {
        a->st = llmt_trainer_set_sequence_parallel(tr, 1);
        a->act_sp = rank_fixture_act_bytes(tr);
        if (a->st == LLMT_OK)
            a->st = llmt_trainer_set_sequence_parallel(tr, 0);
        a->act_off = rank_fixture_act_bytes(tr);
        if (a->st == LLMT_OK)
            a->st = llmt_trainer_set_sequence_parallel(tr, 1);
    }
    if (a->st == LLMT_OK && dpc)
        a->st = tp_fixture_set_dp(tr, dpc, a->zero);
    if (a->st == LLMT_OK && a->probe)
        a->st = probe(a, tr);
    if (tpc)
        llmt_comm_reset_stats(tpc);
    for (int k = 0; k < STEPS && a->st == LLMT_OK; k++) {
        llmt_batch b = tp_fixture_batch(g_in, g_tg, k, SEQS, T, dp, co[LLMT_DIM_DP]);
        a->st = rank_fixture_step(tr, &b, &a->loss[k]);
    }
    llmt_comm_stats cs;
    memset(&cs, 0, sizeof cs);
    cs.struct_size = sizeof cs;
    if (tpc && llmt_comm_get_stats(tpc, &cs) == LLMT_OK) {
        a->ag = cs.calls[LLMT_COMM_STAT_ALL_GATHER];
        a->rs = cs.calls[LLMT_COMM_STAT_REDUCE_SCATTER];
        a->ar = cs.calls[LLMT_COMM_STAT_ALL_REDUCE];
    }
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr); /* gathers over dp, then tp */
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m,
                       a->st == LLMT_OK ? &a->params : NULL, &a->numel);
    llmt_comm_destroy(dpc);
    llmt_comm_destroy(tpc);
    return NULL;
}

static llmt_plan *make_plan(int tp, int dp)
{
    char js[512];
    snprintf(js, sizeof js,
             "{\"name\": \"sp\", \"model\": {\"arch\": \"gpt2\", \"layers\": 2, "
             "\"hidden\": 64, \"heads\": 4, \"vocab\": 97, \"seq_len\": 16}, "
             "\"parallelism\": {\"tp\": %d, \"dp\": %d, \"sequence_parallel\": true}, "
             "\"batch\": {\"micro\": 2, \"grad_accum\": 1}}",
             tp, dp);
    llmt_spec *spec = NULL;
    llmt_plan *plan = NULL;
    llmt_status s = llmt_spec_parse_json(NULL, js, strlen(js), &spec);
    if (s == LLMT_OK)
        s = llmt_plan_create(NULL, spec, tp * dp, &plan);
    CHECK_STATUS(s, LLMT_OK);
    llmt_spec_destroy(spec);
    return plan;
}

/* One layout's run (tp 0: the single rank). */
static void run(int tp, int dp, int zero, int recompute, int probe_it, rank_arg *a)
{
    int n = tp ? tp * dp : 1;
    llmt_plan *plan = tp ? make_plan(tp, dp) : NULL;
    memset(a, 0, (size_t)n * sizeof *a);
    for (int r = 0; r < n; r++) {
        a[r].plan = plan;
        a[r].rank = r;
        a[r].zero = zero;
        a[r].sp = tp > 1;
        a[r].recompute = recompute;
        a[r].probe = probe_it;
    }
    rank_fixture_run(a, sizeof *a, n, tp != 0, offsetof(rank_arg, world), rank_main);
    llmt_plan_destroy(plan);
}

static void compare(const char *name, int llama, int kv, int tp, int dp, int zero,
                    int recompute)
{
    tp_fixture_config(&g_cfg, llama, kv, V, T);
    rank_arg ref[1], a[MAXW];
    int probe_it = dp == 1 && !g_bf16;
    run(0, 1, 0, 0, probe_it, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    if (ref[0].st != LLMT_OK) {
        fprintf(stderr, "%s reference: %s\n", name, ref[0].err);
        return;
    }
    /* training moved: the comparison is not of two untouched inits */
    CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
    run(tp, dp, zero, recompute, probe_it, a);
    int n = tp * dp;
    rank_fixture_worst w = {0};
    double wpl = 0.0, wlg = 0.0;
    /* the memory bound (see the top) */
    double N = (double)MICRO * T, C = g_cfg.width, es = g_bf16 ? 2.0 : 4.0;
    double hd = (double)g_cfg.width / g_cfg.heads, kvx = 0.0;
    if (llama && kv < tp)
        kvx = (g_cfg.layers + 1) * 2.0 * N * hd * es * (1.0 - (double)kv / tp);
    double bound = (double)ref[0].act_tp / tp + 2 * N * C * es + 12 * N + 4 + 4 * T + kvx;
    /* the TP group's collectives per micro-batch (L layers): forward,
     * all-gathers before qkv, fc (per layer) and the head, reduce-scatters
     * after proj, fcproj and the embedding; backward, all-gathers of the
     * row split Linears' dout and the embedding's, and again of qkv's,
     * fc's and the head's inputs (the weight gradients), reduce-scatters of
     * qkv's, fc's and the head's dx; a recomputed layer's forward again */
    int L = g_cfg.layers, micro = SEQS / MICRO / dp;
    uint64_t ag = (uint64_t)STEPS * micro * (6 * L + 3 + (recompute ? 2 * L : 0));
    uint64_t rs = (uint64_t)STEPS * micro * (4 * L + 2 + (recompute ? 2 * L : 0));
    for (int r = 0; r < n; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s rank %d: %s\n", name, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        if (a[r].st != LLMT_OK)
            continue;
        rank_fixture_losses(&w, a[r].loss, ref->loss, 0, STEPS, g_bf16);
        rank_fixture_params_check(&w, a[r].params, a[r].numel, ref->params, ref->numel, g_bf16,
                                  2.0 * LR * STEPS);
        if (probe_it) {
            double d = fabs(a[r].probe_loss - ref->probe_loss) / fabs(ref->probe_loss);
            if (!(d <= wpl))
                wpl = d;
            CHECK(d <= 1e-5);
            double mx = 0.0, dl = 0.0;
            for (int i = 0; i < g_cfg.vocab_size; i++) {
                double x = fabs((double)ref->logits[i]),
                       e = fabs((double)a[r].logits[i] - ref->logits[i]);
                if (x > mx)
                    mx = x;
                if (!(e <= dl))
                    dl = e;
            }
            if (!(dl <= wlg))
                wlg = dl;
            CHECK(dl <= 1e-5 * (1.0 + mx));
        }
        CHECK(a[r].act_sp > 0 && a[r].act_sp < a[r].act_tp);
        CHECK(a[r].act_off == a[r].act_tp);
        CHECK(a[r].ag == ag && a[r].rs == rs);
        CHECK((double)a[r].act_sp <= bound);
    }
    printf("%-19s tp %d x dp %d ZeRO %d%s: loss %.3f -> %.3f, loss rel diff %.2e; params: "
           "rel L2 %.2e, max abs %.2e, %lld of %lld above 1e-5",
           name, tp, dp, zero, recompute ? " recompute" : "", (double)ref->loss[0],
           (double)ref->loss[STEPS - 1], w.loss, w.rel, w.abs, (long long)w.over,
           (long long)ref->numel);
    if (probe_it)
        printf("; probe of %d tokens: loss rel %.2e, logits abs %.2e", PROBE, wpl, wlg);
    printf("\n    activation bytes per rank: tp 1 %lld, tp %d %lld, with SP %lld (bound %.0f); "
           "TP collectives in %d steps: %llu all-gathers, %llu reduce-scatters, %llu "
           "all-reduces\n",
           (long long)ref->act_tp, tp, (long long)a[0].act_tp, (long long)a[0].act_sp, bound,
           STEPS, (unsigned long long)a[0].ag, (unsigned long long)a[0].rs,
           (unsigned long long)a[0].ar);
    if (w.loss > g_worst_loss)
        g_worst_loss = w.loss;
    if (w.abs > g_worst_param)
        g_worst_param = w.abs;
    free(ref[0].params);
    for (int r = 0; r < n; r++)
        free(a[r].params);
}

/* ---- refusals */

typedef struct bad_arg {
    llmt_comm *c;
    int T0;
    llmt_status seq, state, one;
    char msg[2][512];
} bad_arg;

/* tp 4 over seq_len T0 (which 4 does not divide), then data parallelism
 * attached: both refused. */
static void *bad_main(void *p)
{
    bad_arg *b = p;
    llmt_model_config c;
    tp_fixture_config(&c, 0, 0, V, b->T0);
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *one[1] = {NULL};
    b->seq = b->state = b->one = LLMT_ERR_INTERNAL;
    llmt_status s = llmt_model_create(NULL, &c, &m);
    if (s == LLMT_OK) {
        llmt_trainer_opts o;
        llmt_trainer_opts_init(&o, sizeof o);
        o.micro_batch = 1;
        o.seq_len = b->T0;
        o.threads = 1;
        s = llmt__trainer_create_dev(m, &o, g_ops, &tr);
    }
    if (s == LLMT_OK)
        s = llmt_trainer_set_tp_comm(tr, b->c);
    if (s == LLMT_OK) {
        b->seq = llmt_trainer_set_sequence_parallel(tr, 1);
        snprintf(b->msg[0], sizeof b->msg[0], "%s", llmt_trainer_last_error(tr));
    }
    /* the engine made (collective over the tp group): attaching in the
     * wrong order is refused from then on; before, groups are recorded in
     * any order (test_engine_once.c) */
    if (s == LLMT_OK)
        s = llmt_trainer_sync_params(tr);
    if (s == LLMT_OK)
        s = llmt_comm_create_inproc(NULL, 1, NULL, one);
    if (s == LLMT_OK) {
        llmt_dp_opts d;
        llmt_dp_opts_init(&d, sizeof d);
        s = llmt_trainer_set_comm(tr, one[0], &d);
    }
    if (s == LLMT_OK) {
        b->state = llmt_trainer_set_sequence_parallel(tr, 1);
        snprintf(b->msg[1], sizeof b->msg[1], "%s", llmt_trainer_last_error(tr));
        b->one = llmt_trainer_set_sequence_parallel(tr, 0); /* the current setting */
    }
    llmt_trainer_destroy(tr);
    llmt_comm_destroy(one[0]);
    llmt_model_destroy(m);
    return NULL;
}

static void check_bad(void)
{
    /* no tensor parallel group */
    tp_fixture_config(&g_cfg, 0, 0, V, T);
    llmt_model *m = NULL;
    CHECK_STATUS(llmt_model_create(NULL, &g_cfg, &m), LLMT_OK);
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = MICRO;
    o.seq_len = T;
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt__trainer_create_dev(m, &o, g_ops, &tr), LLMT_OK);
    CHECK_STATUS(llmt_trainer_set_sequence_parallel(tr, 1), LLMT_ERR_STATE);
    const char *msg = llmt_trainer_last_error(tr);
    printf("no tp group: %s\n", msg);
    CHECK(strstr(msg, "llmt_trainer_set_tp_comm") != NULL);
    CHECK_STATUS(llmt_trainer_set_sequence_parallel(tr, 2), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_trainer_set_sequence_parallel(tr, 0), LLMT_OK); /* already off */
    CHECK_STATUS(llmt_trainer_set_sequence_parallel(NULL, 1), LLMT_ERR_NULL_POINTER);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    /* tp 4 over seq_len 6; then after data parallelism */
    bad_arg b[4];
    memset(b, 0, sizeof b);
    for (int r = 0; r < 4; r++)
        b[r].T0 = 6;
    rank_fixture_run(b, sizeof *b, 4, 1, offsetof(bad_arg, c), bad_main);
    for (int r = 0; r < 4; r++) {
        CHECK_STATUS(b[r].seq, LLMT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(b[r].msg[0], "model.seq_len") != NULL);
        CHECK_STATUS(b[r].state, LLMT_ERR_STATE);
        CHECK(strstr(b[r].msg[1], "llmt_trainer_set_comm") != NULL);
        CHECK_STATUS(b[r].one, LLMT_OK);
    }
    printf("tp 4, seq_len 6: %s\nafter data parallelism: %s\n", b[0].msg[0], b[0].msg[1]);
}

int main(int argc, char **argv)
{
    if (dev_model_mode(argc, argv, "test_device_sp", &g_ops, &g_bf16) != 0)
        return 2;
    tp_fixture_data((size_t)STEPS * SEQS * T, V, &g_in, &g_tg);
    if (g_bf16) {
        compare("llama kv2 (split)", 1, 2, 2, 1, 0, 0);
    } else {
        compare("gpt2", 0, 0, 2, 1, 0, 0);
        compare("gpt2", 0, 0, 4, 2, 1, 0);
        compare("llama kv2 (split)", 1, 2, 2, 2, 3, 0);
        compare("llama kv2 (shared)", 1, 2, 4, 1, 0, LLMT__RECOMPUTE_FULL);
        compare("llama kv1 (shared)", 1, 1, 2, 2, 2, 0);
        compare("llama kv4 (split)", 1, 4, 4, 1, 0, 0);
        check_bad();
    }
    printf("worst: loss %.2e relative, parameters %.2e absolute\n", g_worst_loss,
           g_worst_param);
    free(g_in);
    free(g_tg);
    return check_exit(g_bf16 ? "device-sp-emul" : "device-sp");
}
