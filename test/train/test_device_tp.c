/* Tensor parallelism of the engine (lib/train/device.c, lib/train/tp.c)
 * against the single-rank engine on the same batches:
 *
 *   test_device_tp cpu    the fp32 CPU backend, ranks as threads with an
 *                         in-process communicator; unit suite
 *   test_device_tp emul   the bf16 host emulation (CUDA's storage and
 *                         roundings), the same ranks; unit suite
 *
 * Cases: GPT-2 (tied embeddings, biases, learned positions) and Llama
 * (RMSNorm, RoPE, SwiGLU, untied head) with grouped-query attention whose
 * kv heads are split (kv_heads >= tp) or shared by several ranks
 * (kv_heads < tp), tp 2 and 4; the padded vocabulary leaves the last
 * rank of tp 4 with one real column of 32. Every rank holds only its
 * shards; the engine's parameters start as slices of the full seeded
 * init. Ten AdamW steps (two micro-batches each, clipping on).
 *
 * The bound, and why: tp changes only the order of fp32 sums (a GEMM over
 * in/t features then the group's sum, the softmax's sum of exponentials
 * per rank then over ranks, the gradient norm by owner), a few ulps per
 * op; AdamW then moves each weight by at most about lr per step whatever
 * the gradient's size, so ten steps of lr 1e-3 cannot amplify those ulps
 * much. Losses are held to 1e-5 relative (measured: 1.2e-7). The final
 * parameters (gathered over the group): the relative L2 difference to
 * 1e-5, and each element to 1e-5 absolute except at most 1 in 10^4
 * (measured: 1 of 109k), which must stay within 1e-4: an element whose
 * gradient is within fp32 rounding of zero at some step gets an AdamW
 * step m / (sqrt(v) + eps) that those ulps decide (up to lr either way);
 * measured 2.2e-5 on one fcproj weight of GPT-2 tp 2. The measured worst
 * cases are printed.
 *
 * The emulation stores activations in bf16 and its row-parallel outputs
 * are summed over the group in bf16 (as Megatron-LM's all-reduce does),
 * so each rank's partial sum is rounded before the sum: test_device_dp's
 * bf16 bound applies, losses within 2^-9 relative and the fp32 masters
 * within 2 x lr x steps absolute (measured: 1.5e-4 and 1.3e-2).
 * Also: a tp that does not divide the model is refused naming the key, and
 * the engine's device memory per rank shrinks with tp. */
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
#define MICRO 2
#define ACCUM 2
#define T 16
#define V 97
#define LR 1e-3f
#define MAXTP 4

static const llmt__dev_ops *g_ops;
static int g_bf16; /* the emulation: bf16 bounds */
static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static double g_worst_loss, g_worst_param;

static void make_data(void)
{
    tp_fixture_data((size_t)STEPS * ACCUM * MICRO * T, V, &g_in, &g_tg);
}

static void config(int llama, int kv)
{
    tp_fixture_config(&g_cfg, llama, kv, V, T);
}

#define NF8 64 /* fp8 scaled tensors kept: 3 per Linear slot, 5 slots a layer */

typedef struct rank_arg {
    llmt_comm *c;
    int rank, tp;
    int fp8, seq;              /* fp8 GEMMs; sequence parallelism */
    float scale1[NF8];         /* fp8: the scales chosen after step 1 */
    int nf8, gemms, bwd_gemms; /* fp8: scaled tensors; GEMMs of the last step */
    int k0, k1;                /* steps run: [k0, k1) (0, 0: all) */
    const char *load, *save;   /* checkpoint roots: read before k0, written after k1 */
    float loss[STEPS];
    float *params;
    int64_t numel;
    size_t dev_bytes; /* the engine's device memory in use */
    llmt_status st;
    char err[1024];
} rank_arg;

/* A checkpoint of the state, written by every rank (its blocks of the
 * global tensors) after step k1 or read by every rank before step k0
 * (each reads its shards from whatever blocks saved them). */
static llmt_status ckpt_io(rank_arg *a, llmt_trainer *tr, int save)
{
    return rank_fixture_ckpt(tr, save ? a->save : a->load, a->c ? a->rank : 0, a->c ? a->tp : 1,
                             save, save ? a->k1 : a->k0);
}

/* fp8: the scales after step 1 (the first chosen from amaxes) and the
 * counts of fp8 GEMMs of the step. */
static void fp8_record(rank_arg *a, llmt_trainer *tr, int k)
{
    const float *sc = NULL;
    int n = 0;
    if (!llmt__devtrain_fp8_state(llmt__trainer_devtrain(tr), &sc, &n, &a->gemms,
                                  &a->bwd_gemms))
        return;
    a->nf8 = n;
    if (k == 0 && n <= NF8)
        memcpy(a->scale1, sc, (size_t)n * sizeof *sc);
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    a->st = llmt_model_create(NULL, &g_cfg, &m);
    if (a->st == LLMT_OK) {
        llmt_trainer_opts o;
        rank_fixture_opts(&o, MICRO, ACCUM, T, LR);
        o.fp8 = a->fp8;
        a->st = llmt__trainer_create_dev(m, &o, g_ops, &tr);
    }
    if (a->st == LLMT_OK && a->c)
        a->st = llmt_trainer_set_tp_comm(tr, a->c);
    if (a->st == LLMT_OK && a->c && a->seq)
        a->st = llmt_trainer_set_sequence_parallel(tr, 1);
    if (a->st == LLMT_OK) {
        llmt__devtrain_mem dm;
        llmt__devtrain_memory(llmt__trainer_devtrain(tr), &dm);
        a->dev_bytes = dm.in_use;
    }
    if (a->st == LLMT_OK && a->load)
        a->st = ckpt_io(a, tr, 0);
    size_t per = (size_t)ACCUM * MICRO * T;
    int k1 = a->k1 ? a->k1 : STEPS;
    for (int k = a->k0; k < k1 && a->st == LLMT_OK; k++) {
        llmt_batch b = {sizeof b, g_in + k * per, g_tg + k * per, ACCUM * MICRO, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        a->st = llmt_trainer_step(tr, &b, &met);
        a->loss[k] = met.loss;
        if (a->st == LLMT_OK && a->fp8)
            fp8_record(a, tr, k);
    }
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr); /* gathers (collective) */
    /* every rank saves its blocks (collective) */
    if (a->st == LLMT_OK && a->save)
        a->st = ckpt_io(a, tr, 1);
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m, &a->params, &a->numel);
    return NULL;
}

static void run_from(int tp, rank_arg *a, const rank_arg *proto)
{
    for (int r = 0; r < tp; r++) {
        a[r] = *proto;
        a[r].c = NULL;
        a[r].rank = r;
        a[r].tp = tp;
    }
    rank_fixture_run(a, sizeof *a, tp, tp > 1, offsetof(rank_arg, c), rank_main);
}

static void run(int tp, rank_arg *a)
{
    rank_arg proto;
    memset(&proto, 0, sizeof proto);
    run_from(tp, a, &proto);
}

static void free_args(rank_arg *a, int n)
{
    for (int r = 0; r < n; r++)
        free(a[r].params);
}

/* Each rank saves one block per segment of its shard: a column shard
 * (a row-parallel weight) is one strided chunk, not one per row (which
 * grew the manifest with the width and padded every row to the file
 * alignment). Every tensor: at most 3 segments per rank (a kv head
 * shared, the padded vocabulary); the empty blocks that name a tensor on
 * a rank that holds none of it are not listed in the merged manifest. */
static void check_chunks(const char *root, int world)
{
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    llmt_ckpt *ck = NULL;
    int64_t at = -1;
    size_t n = 0, worst = 0, total = 0;
    CHECK_STATUS(llmt_ckpt_create(NULL, root, &o, &ck), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &at), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_tensor_count(ck, &n), LLMT_OK);
    for (size_t i = 0; i < n; i++) {
        const char *name = NULL;
        size_t nc = 0;
        llmt_ckpt_tensor_name(ck, i, &name);
        CHECK_STATUS(llmt_ckpt_tensor_info(ck, name, NULL, NULL, NULL, &nc), LLMT_OK);
        total += nc;
        if (nc > worst)
            worst = nc;
    }
    CHECK(n > 0);
    CHECK(worst <= (size_t)(3 * world));
    printf("tp %d checkpoint: %zu tensors, %zu chunks, at most %zu per tensor\n", world, n,
           total, worst);
    llmt_ckpt_destroy(ck);
}

/* Saved under tp 2 after step 5 (each rank its blocks), resumed under tp 1
 * and tp 4 (each rank reads its shards): the following losses equal the
 * uninterrupted single-rank run's within the bound above. */
static void check_resume(const char *tmp)
{
    config(1, 2);
    rank_arg ref[1], a[MAXTP], proto;
    run(1, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    memset(&proto, 0, sizeof proto);
    proto.k1 = STEPS / 2;
    proto.save = tmp;
    run_from(2, a, &proto);
    for (int r = 0; r < 2; r++)
        CHECK_STATUS(a[r].st, LLMT_OK);
    free_args(a, 2);
    check_chunks(tmp, 2);
    int tps[2] = {1, 4};
    rank_fixture_worst w = {0};
    for (int j = 0; j < 2; j++) {
        memset(&proto, 0, sizeof proto);
        proto.k0 = STEPS / 2;
        proto.load = tmp;
        run_from(tps[j], a, &proto);
        for (int r = 0; r < tps[j]; r++) {
            if (a[r].st != LLMT_OK)
                fprintf(stderr, "resume tp %d: %s\n", tps[j], a[r].err);
            CHECK_STATUS(a[r].st, LLMT_OK);
            if (a[r].st == LLMT_OK)
                rank_fixture_losses(&w, a[r].loss, ref[0].loss, STEPS / 2, STEPS, g_bf16);
        }
        free_args(a, tps[j]);
    }
    printf("saved under tp 2 at step %d, resumed under tp 1 and tp 4: worst loss rel diff "
           "%.2e\n",
           STEPS / 2, w.loss);
    free_args(ref, 1);
}

static void compare(const char *name, int llama, int kv, int tp)
{
    config(llama, kv);
    rank_arg ref[1], a[MAXTP];
    run(1, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    run(tp, a);
    rank_fixture_worst w = {0};
    for (int r = 0; r < tp; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s tp %d rank %d: %s\n", name, tp, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        if (a[r].st != LLMT_OK)
            continue;
        rank_fixture_losses(&w, a[r].loss, ref[0].loss, 0, STEPS, g_bf16);
        rank_fixture_params_check(&w, a[r].params, a[r].numel, ref[0].params, ref[0].numel,
                                  g_bf16, 2.0 * LR * STEPS);
        /* the engine holds shards: its memory shrinks with tp */
        CHECK(a[r].dev_bytes < ref[0].dev_bytes);
    }
    printf("%-20s tp %d: loss %.3f -> %.3f, loss rel diff %.2e; params: rel L2 diff %.2e, "
           "max abs diff %.2e, %lld of %lld above 1e-5; device bytes per rank %zu (tp 1: "
           "%zu)\n",
           name, tp, (double)ref[0].loss[0], (double)ref[0].loss[STEPS - 1], w.loss, w.rel,
           w.abs, (long long)w.over, (long long)ref[0].numel, a[0].dev_bytes, ref[0].dev_bytes);
    /* training moved: the comparison is not of two untouched inits */
    CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
    if (w.loss > g_worst_loss)
        g_worst_loss = w.loss;
    if (w.abs > g_worst_param)
        g_worst_param = w.abs;
    free_args(ref, 1);
    free_args(a, tp);
}

/* fp8 GEMMs (delayed scaling, forward and backward) under tensor
 * parallelism (sequence parallel or not) against the single-rank fp8 run.
 * Each rank sees only its shard of a split weight, of a column split
 * Linear's output gradient and of a row split one's input; the step's
 * amaxes are maximised over the group (device.c's fp8_step), so the
 * scales are the whole tensors'. Checked:
 * - after step 1 every weight's scale equals the single-rank run's bit
 *   for bit (the same init, the same maximum), and every rank holds the
 *   same scales (without the maximum each rank's weight scales are its
 *   shard's);
 * - the activations' and gradients' scales within 2^-4 relative: their
 *   amaxes come from values an fp8 GEMM made, and at step 1 (scales 1)
 *   gradients near 1e-5 sit at E5M2's subnormal steps, where a bf16 ulp
 *   of another summation order flips a code (measured: 3.0e-2). A shared
 *   kv head's gradient (kv_heads < tp) is a partial sum on each rank (its
 *   query heads' part, summed over the group afterwards), so that qkv
 *   output gradient's amax is the largest partial sum's: within a factor
 *   2 (measured: 0.22);
 * - every block Linear ran in fp8 on every rank;
 * - the losses of 10 steps within 2^-9 relative, the bf16 bound of the
 *   unquantised comparison above (measured: 6.3e-4). */
static void compare_fp8(const char *name, int llama, int kv, int tp, int seq)
{
    config(llama, kv);
    rank_arg ref[1], a[MAXTP], proto;
    memset(&proto, 0, sizeof proto);
    proto.fp8 = 1;
    run_from(1, ref, &proto);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    proto.seq = seq;
    run_from(tp, a, &proto);
    int nf = ref[0].nf8, L = g_cfg.layers, slots = 5 * L; /* device.c's NLIN a layer */
    CHECK(nf == 3 * slots && nf <= NF8);
    /* every block Linear (GPT-2 4 a layer, Llama 5) ran in fp8 in the last
     * micro-batch's forward, and twice (dW and dx) in its backward */
    CHECK(ref[0].gemms == (llama ? 5 : 4) * L && ref[0].bwd_gemms == 2 * ref[0].gemms);
    double wloss = 0.0, wscale = 0.0;
    int weq = 1; /* every weight's scale equal to the single rank's */
    for (int r = 0; r < tp; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s fp8 tp %d rank %d: %s\n", name, tp, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        if (a[r].st != LLMT_OK)
            continue;
        CHECK(a[r].nf8 == nf);
        CHECK(a[r].gemms == ref[0].gemms && a[r].bwd_gemms == ref[0].bwd_gemms);
        for (int i = 0; i < nf && i < NF8; i++) {
            CHECK(a[r].scale1[i] == a[0].scale1[i]); /* one choice on every rank */
            if (i < 2 * slots && i % 2 == 1) {
                CHECK(a[r].scale1[i] == ref[0].scale1[i]); /* a weight's */
                weq &= a[r].scale1[i] == ref[0].scale1[i];
            } else {
                double d = fabs((double)a[r].scale1[i] / ref[0].scale1[i] - 1.0);
                /* a shared kv head's gradient is a partial sum on each
                 * rank (its query heads' part; the group sums it after),
                 * so the qkv output gradient's amax is of partial sums */
                int partial = kv < tp && i >= 2 * slots && (i - 2 * slots) % 5 == 0;
                CHECK(d <= (partial ? 0.5 : 1.0 / 16));
                if (!partial)
                    wscale = d > wscale ? d : wscale;
            }
        }
        for (int k = 0; k < STEPS; k++) {
            double d =
                fabs((double)a[r].loss[k] - ref[0].loss[k]) / fabs((double)ref[0].loss[k]);
            CHECK(d <= 1.0 / 512);
            wloss = d > wloss ? d : wloss;
        }
    }
    CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
    printf("%-20s fp8 tp %d%s: loss %.3f -> %.3f, loss rel diff %.2e; step 1 scales: "
           "weights %s, others rel diff %.2e; %d + %d fp8 GEMMs a step per rank\n",
           name, tp, seq ? " sp" : "", (double)ref[0].loss[0], (double)ref[0].loss[STEPS - 1],
           wloss, weq ? "equal" : "DIFFER", wscale, a[0].gemms, a[0].bwd_gemms);
    free_args(ref, 1);
    free_args(a, tp);
}

/* tp that does not divide the model: refused before any work, naming the
 * key. */
static void check_bad(void)
{
    config(1, 2);
    llmt_model *m = NULL;
    CHECK_STATUS(llmt_model_create(NULL, &g_cfg, &m), LLMT_OK);
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = MICRO;
    o.seq_len = T;
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt__trainer_create_dev(m, &o, g_ops, &tr), LLMT_OK);
    llmt_comm *c[3] = {NULL};
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 3, NULL, c), LLMT_OK);
    /* not collective when refused: one rank may ask */
    CHECK_STATUS(llmt_trainer_set_tp_comm(tr, c[0]), LLMT_ERR_INVALID_ARGUMENT);
    const char *msg = llmt_trainer_last_error(tr);
    printf("tp 3: %s\n", msg);
    CHECK(strstr(msg, "parallelism.tp") && strstr(msg, "model.heads"));
    for (int r = 0; r < 3; r++)
        llmt_comm_destroy(c[r]);
    /* the trainer still works untouched */
    llmt_batch b = {sizeof b, g_in, g_tg, MICRO, T};
    float loss = 0.0f;
    CHECK_STATUS(llmt_trainer_forward_backward(tr, &b, &loss), LLMT_OK);
    CHECK(isfinite(loss) && loss > 0.0f);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
}

int main(int argc, char **argv)
{
    if (dev_model_mode(argc, argv, "test_device_tp", &g_ops, &g_bf16) != 0)
        return 2;
    make_data();
    compare("gpt2", 0, 0, 2);
    compare("gpt2", 0, 0, 4);
    compare("llama kv2 (split)", 1, 2, 2);
    compare("llama kv2 (shared)", 1, 2, 4);
    compare("llama kv4 (split)", 1, 4, 4);
    if (g_bf16) { /* fp8 GEMMs need a bf16 backend */
        compare_fp8("gpt2", 0, 0, 2, 0);
        compare_fp8("gpt2", 0, 0, 4, 1);
        compare_fp8("llama kv2 (split)", 1, 2, 2, 1);
        compare_fp8("llama kv2 (shared)", 1, 2, 4, 0);
    }
    check_bad();
    char tmp[] = "/tmp/llmt_tp_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    check_resume(tmp);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    printf("worst: loss %.2e relative, parameters %.2e absolute\n", g_worst_loss,
           g_worst_param);
    free(g_in);
    free(g_tg);
    return check_exit("device-tp");
}
