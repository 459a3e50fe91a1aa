/* Pipeline parallelism composed with tensor parallelism (and data
 * parallelism) in the engine: each stage's layers split over its tensor
 * parallel group (lib/train/device.c's column and row splits), the
 * activations passed between stages the TP-replicated hidden states (with
 * sequence parallelism, each rank's sequence shard of them), against the
 * single-rank engine on the same batches; fp32 CPU backend, ranks as
 * threads over one in-process communicator split as the plan orders them
 * (TP innermost, then PP, DP outermost: rank = tpr + tp * (stage + pp * dpr)).
 *
 *   GPT-2 (tied head: the last stage's copy of wte's vocabulary shard)
 *   and Llama (kv 2: heads split; kv 1: one kv head shared by both TP
 *   ranks, its gradient summed over them); tp 2 x pp 2 x dp 2 (8 ranks,
 *   ZeRO 0 and 1), tp 2 x pp 2 with sequence parallelism, GPipe and 1F1B.
 *
 * Ten AdamW steps (clipping on). A stage's gradients are the tensor
 * parallel run's (test_device_tp.c) of its layers; the pipeline changes
 * only the gradient norm's summation order and a tied wte's sum (the
 * bound of test_device_pp.c): per-step losses within 1e-5 relative, every
 * rank's final parameters of its stage (gathered over its TP group by
 * llmt_trainer_sync_params) within 1e-5 relative L2 and 1e-4 absolute
 * per element (an element whose gradient is within rounding of zero takes
 * an AdamW step those ulps decide; test_device_tp.c). Then evaluate and
 * generate run as forward-only pipeline passes: the validation loss of
 * every rank within 1e-5 relative of the single rank's (on parameters
 * that close), 8 greedy tokens equal. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "stage_fixture.h"
#include "train/device.h"

#define STEPS 10
#define MICRO 2
#define T 16
#define V 97
#define LR 1e-3f
#define MAXR 8

static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static double g_worst_loss, g_worst_rel, g_worst_abs;

typedef struct rank_arg {
    llmt_comm *world;
    int tp, pp, dp, tpr, stage, dpr, m, sched, zero, sp;
    float loss[STEPS];
    float *params; /* the host model after sync_params */
    float val;     /* llmt_trainer_evaluate of the held-out batch after training */
    int32_t gen[8];
    llmt_pp_stats ps;
    llmt_status st;
    char err[1024];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *tpc = NULL, *ppc = NULL, *dpc = NULL;
    llmt_trainer_opts o;
    rank_fixture_opts(&o, MICRO, a->m, T, LR);
    a->st = stage_fixture_open(&g_cfg, &o, llmt__dev_cpu(), &m, &tr);
    /* the groups: every rank takes part in every split (collective) */
    int pos = a->stage + a->pp * a->dpr, rest = a->tpr + a->tp * a->dpr;
    if (a->world) {
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(a->world, pos, a->tpr, &tpc);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(a->world, rest, a->stage, &ppc);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(a->world, a->tpr + a->tp * a->stage, a->dpr, &dpc);
    }
    llmt_pp_opts po;
    stage_fixture_pp_opts(&po, a->sched, 1, NULL, 0);
    rank_fixture_groups g = {.tp = a->tp > 1 ? tpc : NULL,
                             .pp = a->pp > 1 ? ppc : NULL,
                             .dp = a->dp > 1 ? dpc : NULL,
                             .sp = a->sp,
                             .zero = a->zero,
                             .pp_opts = &po};
    if (a->st == LLMT_OK)
        a->st = rank_fixture_attach(tr, &g);
    if (a->st == LLMT_OK)
        a->st = stage_fixture_steps(tr, g_in, g_tg, 0, STEPS, a->dp, a->dpr, a->m, MICRO, T,
                                    a->loss);
    /* forward-only passes through the pipeline (pp_infer.c): 3 sequences
     * (not a multiple of the micro-batch: the last pass padded) past the
     * training data, and 8 greedy tokens */
    if (a->st == LLMT_OK) {
        size_t at = (size_t)STEPS * 2 * 4 * MICRO * T;
        llmt_batch b = {sizeof b, g_in + at, g_tg + at, 3, T};
        a->st = llmt_trainer_evaluate(tr, &b, &a->val);
    }
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_generate(tr, g_in, 5, 8, 0.0f, 0, 1, a->gen);
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr);
    rank_fixture_pp_stats(tr, &a->st, &a->ps, NULL);
    int64_t numel = 0;
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m, &a->params, &numel);
    llmt_comm_destroy(tpc);
    llmt_comm_destroy(ppc);
    llmt_comm_destroy(dpc);
    return NULL;
}

/* tp x pp x dp ranks as threads (1 x 1 x 1: the single-rank reference,
 * given dp x m micro-batches a step). */
static void run(int tp, int pp, int dp, int m, int sched, int zero, int sp, rank_arg *a)
{
    int n = tp * pp * dp;
    for (int r = 0; r < n; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].tp = tp;
        a[r].pp = pp;
        a[r].dp = dp;
        a[r].tpr = r % tp;
        a[r].stage = r / tp % pp;
        a[r].dpr = r / (tp * pp);
        a[r].m = m;
        a[r].sched = sched;
        a[r].zero = zero;
        a[r].sp = sp;
    }
    rank_fixture_run(a, sizeof *a, n, n > 1, offsetof(rank_arg, world), rank_main);
}

static void compare(const char *name, int llama, int kv, int dp, int m, int sched, int zero,
                    int sp)
{
    enum { TP = 2, PP = 2 };
    tp_fixture_config(&g_cfg, llama, kv, V, T);
    g_cfg.layers = 4;
    rank_arg ref[1], a[MAXR];
    int n = TP * PP * dp;
    run(1, 1, 1, dp * m, sched, 0, 0, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    run(TP, PP, dp, m, sched, zero, sp, a);
    rank_fixture_worst w = {0};
    double wa = 0.0, wrel = 0.0, wv = 0.0;
    int ok = ref[0].st == LLMT_OK;
    for (int r = 0; r < n; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s rank %d: %s\n", name, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        ok = ok && a[r].st == LLMT_OK;
        if (a[r].st == LLMT_OK)
            rank_fixture_losses(&w, a[r].loss, ref[0].loss, 0, STEPS, 0);
    }
    llmt_model *mm = NULL;
    CHECK_STATUS(llmt_model_create(NULL, &g_cfg, &mm), LLMT_OK);
    int32_t np = 0;
    llmt_model_param_count(mm, &np, NULL);
    const int first[PP + 1] = {0, 2, 4}; /* 4 layers, 2 a stage */
    for (int r = 0; ok && r < n; r++) {
        CHECK(a[r].ps.stages == PP && a[r].ps.stage == a[r].stage);
        CHECK(a[r].ps.layers == 2 && a[r].ps.first_layer == first[a[r].stage]);
        /* this rank's stage's tensors, packed, against the reference's */
        float *mine = malloc(sizeof(float) * 200000), *want = malloc(sizeof(float) * 200000);
        int64_t at = 0, k = 0;
        for (int32_t i = 0; i < np; i++) {
            const char *pn = NULL;
            llmt_tensor v;
            int64_t ne = 0;
            llmt_model_param(mm, i, &pn, &v);
            llmt_tensor_numel(&v, &ne);
            if (rank_fixture_stage_of(pn, first, PP, PP) == a[r].stage && k + ne <= 200000) {
                memcpy(mine + k, a[r].params + at, (size_t)ne * sizeof(float));
                memcpy(want + k, ref[0].params + at, (size_t)ne * sizeof(float));
                k += ne;
            }
            at += ne;
        }
        int64_t over = 0;
        double rel = tp_fixture_param_diff(mine, want, k, &wa, &over);
        CHECK(k > 0 && rel <= 1e-5);
        /* the stage's layers split over tp 2: about half its tensors'
         * bytes (norms, biases and wpe stay whole) */
        CHECK(a[r].ps.param_bytes < 0.6 * 4.0 * (double)k);
        /* evaluate and generate: every stage as the single rank */
        double dv = fabs((double)a[r].val - ref[0].val) / ref[0].val;
        CHECK(dv <= 1e-5);
        if (!(dv <= wv))
            wv = dv;
        CHECK(memcmp(a[r].gen, ref[0].gen, sizeof a[r].gen) == 0);
        if (!(rel <= wrel))
            wrel = rel;
        free(mine);
        free(want);
    }
    llmt_model_destroy(mm);
    CHECK(wa <= 1e-4);
    /* training moved: the comparison is not of two untouched inits */
    CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
    printf("%-9s tp 2 x pp 2 x dp %d%s ZeRO-%d %-5s m %d: loss %.3f -> %.3f, loss rel diff "
           "%.2e; params rel L2 %.2e, max abs %.2e; val %.4f rel diff %.2e\n",
           name, dp, sp ? " (sp)" : "", zero, sched == LLMT_PP_GPIPE ? "gpipe" : "1f1b", m,
           (double)ref[0].loss[0], (double)ref[0].loss[STEPS - 1], w.loss, wrel, wa,
           (double)ref[0].val, wv);
    if (w.loss > g_worst_loss)
        g_worst_loss = w.loss;
    if (wrel > g_worst_rel)
        g_worst_rel = wrel;
    if (wa > g_worst_abs)
        g_worst_abs = wa;
    for (int r = 0; r < n; r++)
        free(a[r].params);
    free(ref[0].params);
}

/* Sequence parallelism switched on after the pipeline is attached is
 * refused (the stage's engine would be made again without it). */
static void check_order(void)
{
    tp_fixture_config(&g_cfg, 0, 2, V, T);
    g_cfg.layers = 4;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt_model_create(NULL, &g_cfg, &m), LLMT_OK);
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = MICRO;
    o.seq_len = T;
    CHECK_STATUS(llmt__trainer_create_dev(m, &o, llmt__dev_cpu(), &tr), LLMT_OK);
    CHECK_STATUS(llmt_trainer_set_sequence_parallel(tr, 1), LLMT_ERR_STATE);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
}

int main(void)
{
    size_t n = ((size_t)STEPS * 2 * 4 * MICRO + 3) * T;
    tp_fixture_data(n, V, &g_in, &g_tg);
    CHECK(g_in && g_tg);
    compare("gpt2", 0, 0, 2, 2, LLMT_PP_1F1B, 0, 0);
    compare("llama kv2", 1, 2, 2, 4, LLMT_PP_GPIPE, 1, 0);
    compare("llama kv1", 1, 1, 1, 2, LLMT_PP_1F1B, 0, 1);
    compare("gpt2", 0, 0, 2, 4, LLMT_PP_1F1B, 1, 1);
    check_order();
    printf("worst: loss rel diff %.2e, params rel L2 %.2e, max abs %.2e\n", g_worst_loss,
           g_worst_rel, g_worst_abs);
    free(g_in);
    free(g_tg);
    return check_exit("device-pptp");
}
