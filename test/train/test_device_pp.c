/* Pipeline parallelism of the engine (lib/train/pp.c over the stage seams
 * of lib/train/device.c) against the single-rank engine on the same
 * batches, fp32 CPU backend, stages as threads over an in-process
 * communicator:
 *
 *   GPT-2 (tied embeddings: the last stage's copy of wte, summed with the
 *   first's) and Llama (grouped-query attention, untied head); pp 2 and 4;
 *   m = grad_accum micro-batches in {pp, 2 pp}; GPipe and 1F1B; even
 *   stages (4 layers), uneven ones given explicitly (7 layers as 1, 2, 3,
 *   1 on 4 stages) and the automatic balance of 7 layers on 4.
 *
 * Ten AdamW steps each (clipping on). The bound, and why: a stage
 * accumulates its gradients over the micro-batches in the single-rank
 * order and runs the same ops, so its gradients are the single-rank ones
 * bit for bit except (a) the gradient norm, a sum of per-stage sums of
 * squares instead of one sum, and (b) a tied wte's gradient, the head's
 * part summed over the micro-batches plus the embedding's instead of the
 * two interleaved per micro-batch. Both are a few ulps; AdamW moves each
 * weight by at most about lr a step whatever the gradient's size, so ten
 * steps of lr 1e-3 cannot amplify them much: losses to 1e-5 relative (the
 * issue's bound; measured worst printed), the final parameters (each
 * from the stage that owns it) to 1e-5 relative L2 and 1e-4 absolute per
 * element (an element whose gradient is within rounding of zero gets an
 * AdamW step m / (sqrt(v) + eps) those ulps decide; test_device_tp.c
 * explains the same bound). Also: every stage holds fewer parameter bytes
 * than the whole model, and the stages' bytes sum to the model's (plus
 * the tied copy); bad input is refused naming the key.
 *
 * pp 2 x dp 2 (four threads; each stage's replicas reduce over their DP
 * group, ZeRO 0 and 1): against one rank training on the two replicas'
 * batches concatenated (grad_accum dp x m), the same bounds; ZeRO-2 after
 * a pipeline is refused on every rank.
 *
 * test_device_pp emul: the bf16 host emulation (CUDA's storage types) on
 * three of the cases (pp 2 1F1B, uneven pp 4 GPipe, pp 2 x dp 2 ZeRO-1),
 * with test_device_tp.c's bf16 bounds: losses within 2^-9 relative, the
 * fp32 masters within 2 x lr x steps absolute. */
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
#define MAXM 8
#define T 16
#define V 97
#define LR 1e-3f
#define MAXPP 4

static const llmt__dev_ops *g_ops;
static int g_bf16; /* the emulation: bf16 bounds */
static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static double g_worst_loss, g_worst_param;

/* The parameters' bound (file comment): fp32, or the emulation's bf16
 * storage, where the fp32 masters' last-ulp differences can flip a bf16
 * rounding of the compute copy (test_device_tp.c's bf16 bounds); the
 * losses' is rank_fixture_losses' (1e-5, bf16 2^-9). */
static double param_tol(void)
{
    return g_bf16 ? 2.0 * LR * STEPS : 1e-4;
}

#define NF8 128 /* fp8 scaled tensors kept: 3 per Linear slot, 5 slots a layer */

typedef struct rank_arg {
    llmt_comm *c;
    int rank, pp, m, sched;
    int v;               /* virtual stages (0: 1) */
    int fp8;             /* fp8 GEMMs */
    float scale1[NF8];   /* fp8: the scales chosen after step 1 */
    float scale_at[NF8]; /* fp8: the scales after loading (load) or the last step */
    int nf8;             /* fp8: scaled tensors */
    /* pp x dp: the world's communicator, split here into the pipeline
     * group (the ranks of DP index dpr) and the data parallel one (those
     * of stage rank) */
    llmt_comm *world;
    int dp, dpr, zero, refused;
    /* a checkpoint: one rank saves after step k1, the stages read it
     * before attaching the pipeline and train from step k0 */
    const char *save, *load;
    int k0, k1;
    const int32_t *layers; /* per stage, or NULL: the automatic balance */
    float loss[STEPS];
    float *params; /* the host model after sync_params */
    int64_t numel;
    llmt_pp_stats ps;
    int64_t act_bytes;  /* llmt_trainer_memory's activations */
    int64_t mem_params; /* llmt_trainer_memory's params: the stage's */
    llmt_status st;
    char err[1024];
} rank_arg;

static void config(int llama, int layers)
{
    tp_fixture_config(&g_cfg, llama, 2, V, T);
    g_cfg.layers = layers;
}

/* A checkpoint of one rank's state written after step k1, or read before
 * step k0 (by every stage, before the pipeline is attached). */
static llmt_status ckpt_io(rank_arg *a, llmt_trainer *tr, int save)
{
    int pp = save && a->pp > 1 && !a->world; /* every stage saves its blocks */
    return rank_fixture_ckpt(tr, save ? a->save : a->load, pp ? a->rank : 0, pp ? a->pp : 1,
                             save, save ? a->k1 : a->k0);
}

/* fp8: the trainer's scales now into out[NF8] (and their count) */
static void fp8_scales(llmt_trainer *tr, float *out, int *n)
{
    const float *sc = NULL;
    int gemms, bwd;
    if (llmt__devtrain_fp8_state(llmt__trainer_devtrain(tr), &sc, n, &gemms, &bwd) && *n <= NF8)
        memcpy(out, sc, (size_t)*n * sizeof *sc);
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_trainer_opts o;
    rank_fixture_opts(&o, MICRO, a->m, T, LR);
    o.fp8 = a->fp8;
    a->st = stage_fixture_open(&g_cfg, &o, g_ops, &m, &tr);
    if (a->st == LLMT_OK && a->load)
        a->st = ckpt_io(a, tr, 0);
    if (a->st == LLMT_OK && a->load && a->fp8)
        fp8_scales(tr, a->scale_at, &a->nf8);
    llmt_comm *dpc = NULL;
    if (a->st == LLMT_OK && a->world) {
        a->st = llmt_comm_split(a->world, a->dpr, a->rank, &a->c);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_split(a->world, a->rank, a->dpr, &dpc);
    }
    if (a->st == LLMT_OK && a->c) {
        llmt_pp_opts po;
        stage_fixture_pp_opts(&po, a->sched, a->v, a->layers, a->pp * (a->v > 1 ? a->v : 1));
        a->st = llmt_trainer_set_pp_comm(tr, a->c, &po);
    }
    if (a->st == LLMT_OK && dpc) {
        llmt_dp_opts d;
        llmt_dp_opts_init(&d, sizeof d);
        d.zero_stage = a->zero;
        a->st = llmt_trainer_set_comm(tr, dpc, &d);
        if (a->zero >= 2) { /* refused (not collective), naming the stage */
            a->refused = a->st == LLMT_ERR_UNSUPPORTED &&
                         strstr(llmt_trainer_last_error(tr), "ZeRO-2") != NULL;
            printf("pp 2 x dp 2 ZeRO-2: %s\n", llmt_trainer_last_error(tr));
            a->st = LLMT_ERR_STATE; /* nothing to train */
        }
    }
    /* fp8: step 1 alone first, for the scales it chose */
    int k0 = a->k0, dp = a->dp > 1 ? a->dp : 1;
    if (a->st == LLMT_OK && a->fp8 && k0 == 0) {
        a->st = stage_fixture_steps(tr, g_in, g_tg, 0, 1, dp, a->dpr, a->m, MICRO, T, a->loss);
        if (a->st == LLMT_OK)
            fp8_scales(tr, a->scale1, &a->nf8);
        k0 = 1;
    }
    if (a->st == LLMT_OK)
        a->st = stage_fixture_steps(tr, g_in, g_tg, k0, a->k1 ? a->k1 : STEPS, dp, a->dpr, a->m,
                                    MICRO, T, a->loss);
    if (a->st == LLMT_OK && a->fp8 && !a->load)
        fp8_scales(tr, a->scale_at, &a->nf8);
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr);
    if (a->st == LLMT_OK && a->save)
        a->st = ckpt_io(a, tr, 1);
    rank_fixture_pp_stats(tr, &a->st, &a->ps, &a->act_bytes);
    llmt_trainer_memory mem = {.struct_size = sizeof mem};
    if (a->st == LLMT_OK && llmt_trainer_memory_usage(tr, &mem) == LLMT_OK)
        a->mem_params = mem.params;
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m, &a->params, &a->numel);
    if (a->world) {
        llmt_comm_destroy(a->c);
        llmt_comm_destroy(dpc);
    }
    return NULL;
}

static void run_from(int pp, int m, int sched, const int32_t *layers, rank_arg *a,
                     const rank_arg *proto)
{
    for (int r = 0; r < pp; r++) {
        a[r] = *proto;
        a[r].c = NULL;
        a[r].rank = r;
        a[r].pp = pp;
        a[r].m = m;
        a[r].sched = sched;
        a[r].layers = layers;
    }
    rank_fixture_run(a, sizeof *a, pp, pp > 1, offsetof(rank_arg, c), rank_main);
}

static void run(int pp, int m, int sched, const int32_t *layers, rank_arg *a)
{
    rank_arg proto;
    memset(&proto, 0, sizeof proto);
    run_from(pp, m, sched, layers, a, &proto);
}

static void free_args(rank_arg *a, int n)
{
    for (int r = 0; r < n; r++)
        free(a[r].params);
}

static void compare(const char *name, int llama, int layers, int pp, int m, int sched,
                    const int32_t *split)
{
    config(llama, layers);
    rank_arg ref[1], a[MAXPP];
    run(1, m, sched, NULL, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    run(pp, m, sched, split, a);
    rank_fixture_worst wl = {0};
    int ok = ref[0].st == LLMT_OK;
    for (int r = 0; r < pp; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s pp %d rank %d: %s\n", name, pp, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        ok = ok && a[r].st == LLMT_OK;
        if (a[r].st == LLMT_OK)
            rank_fixture_losses(&wl, a[r].loss, ref[0].loss, 0, STEPS, g_bf16);
    }
    if (!ok) {
        free_args(ref, 1);
        free_args(a, pp);
        return;
    }
    /* the layout: contiguous, every layer once, the given split when given */
    char lay[64] = "";
    int first[MAXPP + 1] = {0};
    float *params[MAXPP];
    for (int r = 0, next = 0; r < pp; r++) {
        CHECK(a[r].ps.stage == r && a[r].ps.stages == pp);
        CHECK(a[r].ps.first_layer == next && a[r].ps.layers >= 1);
        if (split)
            CHECK(a[r].ps.layers == split[r]);
        /* activation sets: every micro-batch under GPipe, p - s under 1F1B */
        int fl = sched == LLMT_PP_GPIPE ? m : pp - r < m ? pp - r : m;
        CHECK(a[r].ps.in_flight == fl);
        next += a[r].ps.layers;
        first[r + 1] = next;
        params[r] = a[r].params;
        if (r == pp - 1)
            CHECK(next == layers);
        snprintf(lay + strlen(lay), sizeof lay - strlen(lay), "%s%d", r ? "," : "",
                 (int)a[r].ps.layers);
    }
    /* the final parameters, each from the stage that owns it */
    double wp = 0.0;
    double rel = rank_fixture_stage_diff(&g_cfg, first, pp, pp, params, ref[0].params, &wp);
    CHECK(g_bf16 || rel <= 1e-5);
    CHECK(wp <= param_tol());
    /* each stage holds only its part: the parts add up to the model, plus
     * GPT-2's tied head (the last stage's copy of wte [padded vocab, width]) */
    int64_t stage_bytes = 0;
    int64_t tied =
        g_cfg.arch == LLMT_ARCH_GPT2 ? (int64_t)g_cfg.padded_vocab_size * g_cfg.width : 0;
    for (int r = 0; r < pp; r++) {
        CHECK(a[r].ps.param_bytes < ref[0].ps.param_bytes);
        stage_bytes += a[r].ps.param_bytes;
        /* llmt_trainer_memory_usage reports the stage's parameters too
         * (it reported the whole model's on every stage) */
        CHECK(a[r].mem_params == a[r].ps.param_bytes);
    }
    CHECK(ref[0].mem_params == ref[0].ps.param_bytes);
    CHECK(stage_bytes == ref[0].ps.param_bytes + tied * (int64_t)sizeof(float));
    /* training moved: the comparison is not of two untouched inits */
    CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
    printf("%-6s %-5s pp %d m %d layers %-8s: loss %.3f -> %.3f, loss rel diff %.2e; "
           "params rel L2 %.2e, max abs %.2e; param bytes stage 0 %lld of %lld; bubble "
           "stage 0 %.2f (balanced %.2f)\n",
           name, sched == LLMT_PP_GPIPE ? "gpipe" : "1f1b", pp, m, lay, (double)ref[0].loss[0],
           (double)ref[0].loss[STEPS - 1], wl.loss, rel, wp, (long long)a[0].ps.param_bytes,
           (long long)ref[0].ps.param_bytes, a[0].ps.bubble, a[0].ps.bubble_balanced);
    if (wl.loss > g_worst_loss)
        g_worst_loss = wl.loss;
    if (wp > g_worst_param)
        g_worst_param = wp;
    free_args(ref, 1);
    free_args(a, pp);
}

/* fp8 GEMMs (delayed scaling) over pipeline stages, against the
 * single-rank fp8 run: each stage records its layers' amaxes (zeros for
 * the others) and the step's maxima over the pipeline group give every
 * stage the whole recipe state. Step 1 computes what the single rank
 * computes, op for op, so after it every scale of every stage equals the
 * single rank's bit for bit; the losses of 10 steps within 2^-9 relative
 * (the emulation's bound: the gradient norm is summed by stage). */
static void compare_fp8(const char *name, int llama, int layers, int pp, int v, int m,
                        int sched, const int32_t *split)
{
    config(llama, layers);
    rank_arg ref[1], a[MAXPP], proto;
    memset(&proto, 0, sizeof proto);
    proto.fp8 = 1;
    run_from(1, m, sched, NULL, ref, &proto);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    proto.v = v;
    run_from(pp, m, sched, split, a, &proto);
    int nf = ref[0].nf8, equal = 1;
    CHECK(nf == 3 * 5 * layers && nf <= NF8); /* device.c's NLIN Linear slots a layer */
    double wl = 0.0;
    for (int r = 0; r < pp; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s fp8 pp %d rank %d: %s\n", name, pp, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        if (a[r].st != LLMT_OK)
            continue;
        CHECK(a[r].nf8 == nf);
        for (int i = 0; i < nf && i < NF8; i++) {
            CHECK(a[r].scale1[i] == ref[0].scale1[i]);
            equal &= a[r].scale1[i] == ref[0].scale1[i];
        }
        for (int k = 0; k < STEPS; k++) {
            double d = fabs((double)a[r].loss[k] - ref[0].loss[k]) / ref[0].loss[k];
            CHECK(d <= 1.0 / 512);
            wl = d > wl ? d : wl;
        }
    }
    /* the scales moved from their start (1): amaxes were recorded */
    int moved = 0;
    for (int i = 0; i < nf && i < NF8; i++)
        moved += ref[0].scale1[i] != 1.0f;
    CHECK(moved >= 3 * 4 * layers); /* every tensor of 4 Linears a layer at least */
    CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
    printf("%-6s fp8 %-11s pp %d v %d m %d: loss %.3f -> %.3f, loss rel diff %.2e; step 1 "
           "scales (%d of %d set) %s the single rank's on every stage\n",
           name,
           sched == LLMT_PP_GPIPE  ? "gpipe"
           : sched == LLMT_PP_1F1B ? "1f1b"
                                   : "interleaved",
           pp, v ? v : 1, m, (double)ref[0].loss[0], (double)ref[0].loss[STEPS - 1], wl, moved,
           nf, equal ? "equal" : "DIFFER from");
    free_args(ref, 1);
    free_args(a, pp);
}

/* fp8's recipe state in a pipeline checkpoint: pp 2 (interleaved, v 2)
 * saves after step 5, every stage its blocks; each stage holds the whole
 * state (the maxima over the pipeline group), so the checkpoint holds it
 * once and one rank resumes with the scales the stages had, bit for bit,
 * and the following losses equal the uninterrupted single-rank run's
 * within the emulation's bound (2^-9). */
static void check_fp8_resume(const char *tmp)
{
    config(0, 4);
    rank_arg ref[1], one[1], a[2], proto;
    memset(&proto, 0, sizeof proto);
    proto.fp8 = 1;
    run_from(1, 4, LLMT_PP_INTERLEAVED, NULL, ref, &proto);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    proto.k1 = STEPS / 2;
    proto.save = tmp;
    proto.v = 2;
    run_from(2, 4, LLMT_PP_INTERLEAVED, NULL, a, &proto);
    for (int r = 0; r < 2; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "fp8 pp 2 save, stage %d: %s\n", r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
    }
    memset(&proto, 0, sizeof proto);
    proto.fp8 = 1;
    proto.k0 = STEPS / 2;
    proto.load = tmp;
    run_from(1, 4, LLMT_PP_INTERLEAVED, NULL, one, &proto);
    CHECK_STATUS(one[0].st, LLMT_OK);
    int equal = one[0].nf8 == a[0].nf8 && one[0].nf8 > 0, moved = 0;
    for (int i = 0; i < one[0].nf8 && i < NF8; i++) {
        CHECK(one[0].scale_at[i] == a[0].scale_at[i] && a[1].scale_at[i] == a[0].scale_at[i]);
        equal &= one[0].scale_at[i] == a[0].scale_at[i];
        moved += one[0].scale_at[i] != 1.0f;
    }
    CHECK(equal && moved > 0);
    rank_fixture_worst w = {0};
    if (one[0].st == LLMT_OK)
        rank_fixture_losses(&w, one[0].loss, ref[0].loss, STEPS / 2, STEPS, g_bf16);
    printf("fp8: saved under pp 2 v 2 at step %d, resumed by one rank: %d scales (%d set) %s "
           "the stages', worst loss rel diff %.2e\n",
           STEPS / 2, one[0].nf8, moved, equal ? "equal" : "DIFFER from", w.loss);
    free_args(ref, 1);
    free_args(one, 1);
    free_args(a, 2);
}

enum { PP = 2, DP = 2 };

/* pp 2 x dp 2: four ranks as threads, rank = dpr * 2 + stage. */
static void run_dp(int m, int sched, int zero, rank_arg *a)
{
    memset(a, 0, PP * DP * sizeof *a);
    for (int r = 0; r < PP * DP; r++) {
        a[r].rank = r % PP;
        a[r].dpr = r / PP;
        a[r].pp = PP;
        a[r].dp = DP;
        a[r].m = m;
        a[r].sched = sched;
        a[r].zero = zero;
    }
    rank_fixture_run(a, sizeof *a, PP * DP, 1, offsetof(rank_arg, world), rank_main);
}

/* ZeRO-2 after a pipeline: refused on every rank, naming the stage. */
static void check_dp_refused(void)
{
    config(0, 4);
    rank_arg a[PP * DP];
    run_dp(2, LLMT_PP_1F1B, 2, a);
    for (int r = 0; r < PP * DP; r++)
        CHECK(a[r].refused);
    free_args(a, PP * DP);
}

/* pp 2 x dp 2 (ZeRO `zero`): four ranks as threads, rank = dpr * 2 +
 * stage; against one rank training on the concatenated batch (grad_accum
 * dp x m), each replica's parameters from the stage that owns them. */
static void compare_dp(const char *name, int llama, int m, int sched, int zero)
{
    config(llama, 4);
    rank_arg ref[1], a[PP * DP];
    run(1, DP * m, sched, NULL, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    run_dp(m, sched, zero, a);
    rank_fixture_worst wl = {0};
    double wp = 0.0;
    int ok = ref[0].st == LLMT_OK;
    for (int r = 0; r < PP * DP; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s pp 2 x dp 2 rank %d: %s\n", name, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        ok = ok && a[r].st == LLMT_OK;
        if (a[r].st == LLMT_OK)
            rank_fixture_losses(&wl, a[r].loss, ref[0].loss, 0, STEPS, g_bf16);
    }
    if (ok) {
        for (int d = 0; d < DP; d++) {
            /* replica d's stages: their layers and parameters */
            int first[PP + 1] = {0};
            float *params[PP];
            for (int r = 0; r < PP; r++) {
                const rank_arg *st = &a[d * PP + r];
                CHECK(st->ps.first_layer == first[r]);
                first[r + 1] = first[r] + st->ps.layers;
                params[r] = st->params;
            }
            rank_fixture_stage_diff(&g_cfg, first, PP, PP, params, ref[0].params, &wp);
        }
        CHECK(wp <= param_tol());
        CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
    }
    printf("%-6s %-5s pp 2 x dp 2 ZeRO-%d m %d: loss rel diff %.2e, params max abs %.2e\n",
           name, sched == LLMT_PP_GPIPE ? "gpipe" : "1f1b", zero, m, wl.loss, wp);
    if (wl.loss > g_worst_loss)
        g_worst_loss = wl.loss;
    if (wp > g_worst_param)
        g_worst_param = wp;
    free_args(ref, 1);
    free_args(a, PP * DP);
}

/* A checkpoint of one rank after step 5, read by the stages of pp 2 and
 * pp 4 before they attach the pipeline: the following losses equal the
 * uninterrupted run's (the resharding pp 1 -> pp 2, 4; checkpoints saved
 * and read under pp: test_device_ppckpt.c). */
static void check_resume(const char *tmp)
{
    config(1, 4);
    rank_arg ref[1], one[1], a[MAXPP], proto;
    run(1, 4, LLMT_PP_1F1B, NULL, ref);
    memset(&proto, 0, sizeof proto);
    proto.k1 = STEPS / 2;
    proto.save = tmp;
    run_from(1, 4, LLMT_PP_1F1B, NULL, one, &proto);
    CHECK_STATUS(one[0].st, LLMT_OK);
    free_args(one, 1);
    rank_fixture_worst worst = {0};
    int pps[2] = {2, 4};
    for (int j = 0; j < 2; j++) {
        memset(&proto, 0, sizeof proto);
        proto.k0 = STEPS / 2;
        proto.load = tmp;
        run_from(pps[j], 4, LLMT_PP_1F1B, NULL, a, &proto);
        for (int r = 0; r < pps[j]; r++) {
            if (a[r].st != LLMT_OK)
                fprintf(stderr, "resume pp %d stage %d: %s\n", pps[j], r, a[r].err);
            CHECK_STATUS(a[r].st, LLMT_OK);
            if (a[r].st == LLMT_OK)
                rank_fixture_losses(&worst, a[r].loss, ref[0].loss, STEPS / 2, STEPS, g_bf16);
        }
        free_args(a, pps[j]);
    }
    printf("saved by one rank at step %d, resumed under pp 2 and pp 4: worst loss rel diff "
           "%.2e\n",
           STEPS / 2, worst.loss);
    free_args(ref, 1);
}

/* The schedules differ in memory: stage 0 of pp 2 holds the activations
 * of m = 4 micro-batches under GPipe, of 2 under 1F1B (and each set is
 * its layers' share of one rank's: the stages' sets sum to one rank's). */
static void check_memory(void)
{
    config(0, 4);
    rank_arg g[2], f[2], one[1];
    run(2, 4, LLMT_PP_GPIPE, NULL, g);
    run(2, 4, LLMT_PP_1F1B, NULL, f);
    run(1, 4, LLMT_PP_1F1B, NULL, one);
    for (int r = 0; r < 2; r++)
        CHECK(g[r].st == LLMT_OK && f[r].st == LLMT_OK);
    CHECK(one[0].st == LLMT_OK);
    /* one set of stage 0: (GPipe - 1F1B) / 2 sets; stage 1 (last) under
     * 1F1B holds one set */
    int64_t set0 = (g[0].act_bytes - f[0].act_bytes) / 2;
    CHECK(g[0].act_bytes > f[0].act_bytes);
    CHECK(g[1].act_bytes > f[1].act_bytes);
    CHECK(set0 > 0 && set0 < one[0].act_bytes);
    printf("activations, pp 2 m 4, stage 0: GPipe %lld bytes (4 sets), 1F1B %lld (2 sets); "
           "stage 1: %lld, %lld; one rank: %lld\n",
           (long long)g[0].act_bytes, (long long)f[0].act_bytes, (long long)g[1].act_bytes,
           (long long)f[1].act_bytes, (long long)one[0].act_bytes);
    free_args(g, 2);
    free_args(f, 2);
    free_args(one, 1);
}

/* Refused before any collective, naming the key; the trainer still works. */
static void check_bad(void)
{
    config(1, 2);
    llmt_model *m = NULL;
    CHECK_STATUS(llmt_model_create(NULL, &g_cfg, &m), LLMT_OK);
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = MICRO;
    o.grad_accum = 2;
    o.seq_len = T;
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt__trainer_create_dev(m, &o, g_ops, &tr), LLMT_OK);
    llmt_comm *c[4] = {NULL};
    llmt_pp_opts po;
    /* on 4 stages: more stages than layers; interleaved with fewer
     * micro-batches (2) than stages */
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 4, NULL, c), LLMT_OK);
    llmt_pp_opts_init(&po, sizeof po);
    CHECK_STATUS(llmt_trainer_set_pp_comm(tr, c[0], &po), LLMT_ERR_INVALID_ARGUMENT);
    printf("pp 4, 2 layers: %s\n", llmt_trainer_last_error(tr));
    CHECK(strstr(llmt_trainer_last_error(tr), "parallelism.pp") != NULL);
    po.schedule = LLMT_PP_INTERLEAVED;
    po.virtual_stages = 2;
    CHECK_STATUS(llmt_trainer_set_pp_comm(tr, c[0], &po), LLMT_ERR_INVALID_ARGUMENT);
    printf("interleaved, m 2 on 4 stages: %s\n", llmt_trainer_last_error(tr));
    CHECK(strstr(llmt_trainer_last_error(tr), "train.grad_accum") != NULL);
    for (int r = 0; r < 4; r++)
        llmt_comm_destroy(c[r]);
    /* on 2 stages: a stage without layers; layers not summing to the
     * model's; more virtual stages than layers; virtual stages without
     * interleaving; after
     * data parallelism */
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 2, NULL, c), LLMT_OK);
    const int32_t lists[2][2] = {{2, 0}, {1, 2}};
    llmt_pp_opts_init(&po, sizeof po);
    for (int i = 0; i < 2; i++) {
        po.stage_layers = lists[i];
        po.n_stage_layers = 2;
        CHECK_STATUS(llmt_trainer_set_pp_comm(tr, c[0], &po), LLMT_ERR_INVALID_ARGUMENT);
        printf("stage_layers %d,%d of 2: %s\n", (int)lists[i][0], (int)lists[i][1],
               llmt_trainer_last_error(tr));
        CHECK(strstr(llmt_trainer_last_error(tr), "parallelism.stage_layers") != NULL);
    }
    po.stage_layers = NULL;
    po.n_stage_layers = 0;
    po.schedule = LLMT_PP_INTERLEAVED;
    po.virtual_stages = 2;
    CHECK_STATUS(llmt_trainer_set_pp_comm(tr, c[0], &po), LLMT_ERR_INVALID_ARGUMENT);
    printf("interleaved, 2 x 2 virtual stages of 2 layers: %s\n", llmt_trainer_last_error(tr));
    CHECK(strstr(llmt_trainer_last_error(tr), "parallelism.virtual_stages") != NULL);
    po.schedule = LLMT_PP_GPIPE;
    CHECK_STATUS(llmt_trainer_set_pp_comm(tr, c[0], &po), LLMT_ERR_INVALID_ARGUMENT);
    printf("gpipe, 2 virtual stages: %s\n", llmt_trainer_last_error(tr));
    CHECK(strstr(llmt_trainer_last_error(tr), "virtual_stages") != NULL);
    /* after data parallelism on a made engine (before it is made, groups
     * are recorded in any order: test_engine_once.c) */
    CHECK_STATUS(llmt_trainer_sync_params(tr), LLMT_OK); /* makes the engine */
    llmt_comm *one[1] = {NULL};
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 1, NULL, one), LLMT_OK);
    CHECK_STATUS(llmt_trainer_set_comm(tr, one[0], NULL), LLMT_OK);
    po.virtual_stages = 1;
    CHECK_STATUS(llmt_trainer_set_pp_comm(tr, c[0], &po), LLMT_ERR_STATE);
    printf("after set_comm: %s\n", llmt_trainer_last_error(tr));
    CHECK(strstr(llmt_trainer_last_error(tr), "llmt_trainer_set_comm") != NULL);
    CHECK_STATUS(llmt_trainer_set_comm(tr, NULL, NULL), LLMT_OK);
    llmt_comm_destroy(one[0]);
    for (int r = 0; r < 2; r++)
        llmt_comm_destroy(c[r]);
    /* the trainer still works untouched */
    llmt_batch b = {sizeof b, g_in, g_tg, 2 * MICRO, T};
    float loss = 0.0f;
    CHECK_STATUS(llmt_trainer_forward_backward(tr, &b, &loss), LLMT_OK);
    CHECK(isfinite(loss) && loss > 0.0f);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
}

/* fn on a new temporary directory, removed after */
static void in_tmpdir(void (*fn)(const char *))
{
    char tmp[] = "/tmp/llmt_pp_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    fn(tmp);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "cpu";
    tp_fixture_data((size_t)STEPS * MAXM * MICRO * T, V, &g_in, &g_tg);
    static const int32_t uneven[4] = {1, 2, 3, 1};
    if (!strcmp(mode, "emul")) { /* the bf16 storage of CUDA, on the host */
        g_ops = llmt__dev_emul();
        g_bf16 = 1;
        compare("gpt2", 0, 4, 2, 2, LLMT_PP_1F1B, NULL);
        compare("llama", 1, 7, 4, 4, LLMT_PP_GPIPE, uneven);
        compare_dp("gpt2", 0, 2, LLMT_PP_1F1B, 1);
        compare_fp8("gpt2", 0, 4, 2, 1, 2, LLMT_PP_1F1B, NULL);
        compare_fp8("llama", 1, 7, 4, 1, 4, LLMT_PP_GPIPE, uneven);
        compare_fp8("gpt2", 0, 4, 2, 2, 4, LLMT_PP_INTERLEAVED, NULL);
        in_tmpdir(check_fp8_resume);
        printf("worst: loss %.2e relative, parameters %.2e absolute\n", g_worst_loss,
               g_worst_param);
        free(g_in);
        free(g_tg);
        return check_exit("device-pp-emul");
    }
    if (strcmp(mode, "cpu")) {
        fprintf(stderr, "usage: test_device_pp [cpu|emul]\n");
        return 2;
    }
    g_ops = llmt__dev_cpu();
    compare("gpt2", 0, 4, 2, 2, LLMT_PP_GPIPE, NULL);
    compare("gpt2", 0, 4, 2, 4, LLMT_PP_1F1B, NULL);
    compare("gpt2", 0, 4, 4, 4, LLMT_PP_1F1B, NULL);
    compare("gpt2", 0, 4, 4, 8, LLMT_PP_GPIPE, NULL);
    compare("gpt2", 0, 7, 4, 8, LLMT_PP_1F1B, uneven);
    compare("llama", 1, 4, 2, 4, LLMT_PP_GPIPE, NULL);
    compare("llama", 1, 4, 2, 2, LLMT_PP_1F1B, NULL);
    compare("llama", 1, 4, 4, 8, LLMT_PP_1F1B, NULL);
    compare("llama", 1, 4, 4, 4, LLMT_PP_GPIPE, NULL);
    compare("llama", 1, 7, 4, 4, LLMT_PP_GPIPE, uneven);
    compare("llama", 1, 7, 4, 4, LLMT_PP_1F1B, NULL); /* the automatic balance */
    compare_dp("gpt2", 0, 2, LLMT_PP_1F1B, 0);
    compare_dp("llama", 1, 4, LLMT_PP_GPIPE, 1);
    compare_dp("gpt2", 0, 4, LLMT_PP_1F1B, 1);
    check_dp_refused();
    check_memory();
    in_tmpdir(check_resume);
    check_bad();
    printf("worst: loss %.2e relative, parameters %.2e absolute\n", g_worst_loss,
           g_worst_param);
    free(g_in);
    free(g_tg);
    return check_exit("device-pp");
}
