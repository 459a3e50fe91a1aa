/* Data parallelism of the device engine (lib/train/dp.c over the op table)
 * against the single-rank device run on the same global batch:
 *
 *   test_device_dp emul   the bf16 host emulation (lib/exec/dev_emul.c),
 *                         ranks as threads with an in-process communicator,
 *                         dp 2 and 4 with ZeRO 0, 1, 2, 3 (and dp 3, whose
 *                         units need the padded staging path); unit suite
 *   test_device_dp cuda   CUDA through the public ABI, ranks as threads on
 *                         GPUs 0..dp-1 with NCCL communicators made from one
 *                         unique id; gpu suite, SKIPs (77) without NCCL or
 *                         with fewer than 2 GPUs
 *   test_device_dp staged the emulation's table copied with host_memory 0,
 *                         in-process communicators: dp.c stages every
 *                         collective through host memory (x_all_reduce);
 *                         the same comparisons, and each rank's losses and
 *                         parameters equal the unstaged emulation's bit for
 *                         bit (dp 2 ZeRO 0-3, dp 3 ZeRO 2-3); unit suite
 *   test_device_dp cuda-host  CUDA's table with unverified_dp cleared (the
 *                         opt-in), every rank on GPU 0 over in-process
 *                         communicators, staged: the comparisons above
 *                         against one CUDA rank; gpu suite (gpu-dp-host),
 *                         SKIPs without a GPU; passed on an H100
 *                         (2026-11-27), which cleared CUDA's unverified_dp
 *
 * fp8 GEMMs (emul): the ranks' amaxes are maximised over the group, so
 * after step 1 every rank's scales equal one rank's over the whole global
 * batch bit for bit (without the reduction none do: 0 of 2 ranks,
 * measured), and the losses follow the reference (measured: equal).
 *
 * Also: a DP run checkpointed and resumed by fresh ranks continues bit for
 * bit (ZeRO 1, 2, 3) and detaching gathers the sharded moments; the
 * graph's Linear descriptors and split points (device.h) on the
 * emulation.
 *
 * The bound, and why. Rank r runs micro-batches r*ACCUM .. r*ACCUM+ACCUM-1
 * of the reference's dp*ACCUM, each of the same B x T, so at step 1 every
 * activation (bf16) is bit for bit the reference's: only the fp32 sums
 * differ in order (the reference adds the micro-batches' weight gradients
 * one after another, DP adds each rank's partial sum, then the ranks'), a
 * few ulps of fp32. The step-1 loss therefore matches to 1e-6 relative
 * (its double sum is regrouped by rank). AdamW turns those ulps into fp32
 * master weights a few ulps apart; the bf16 compute copy rounds each master
 * to 8 bits, and a master that sits within those ulps of a rounding
 * boundary lands on the other bf16 neighbour: one bf16 ulp (2^-8 relative)
 * on a few weights, which moves later activations by at most bf16's own
 * rounding. Later losses are held to 2^-9 relative (half a bf16 rounding
 * of the loss, 2e-3) and the final fp32 masters to 2 x lr x steps absolute
 * (AdamW moves an element by at most about lr per step, so two runs that
 * take opposite signs on a near-zero gradient part by at most that); the
 * measured differences are printed (at most 5e-5 and 3e-3 here, for
 * dp 3 whose chunks do not tile the units). Every rank
 * ends with bitwise the same parameters. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "model_params.h"
#include "tp_fixture.h"
#include "train/device.h"

#define STEPS 6
#define MICRO 2
#define ACCUM 2
#define T 16
#define V 97
#define LR 1e-3f
#define MAXDP 4

static const llmt__dev_ops *g_ops; /* NULL: CUDA through the public ABI */
static llmt__dev_ops g_staged;     /* staged, cuda-host: the table under test */
static int g_one_gpu;              /* cuda-host: every rank on device 0 */
static int g_fp8;                  /* fp8 GEMMs (emul only: compare_fp8) */
static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static unsigned char g_uid[LLMT_COMM_UNIQUE_ID_BYTES];

static void make_data(int dp)
{
    size_t n = (size_t)STEPS * dp * ACCUM * MICRO * T;
    free(g_in);
    free(g_tg);
    tp_fixture_stream(n, V, 4242, 13, 7, 1, &g_in, &g_tg);
}

static void config(int llama)
{
    llmt_model_config_init(&g_cfg, sizeof g_cfg);
    g_cfg.arch = llama ? LLMT_ARCH_LLAMA : LLMT_ARCH_GPT2;
    g_cfg.vocab_size = V;
    g_cfg.padded_vocab_size = 128;
    g_cfg.max_seq_len = T;
    g_cfg.layers = 2;
    g_cfg.width = 64;
    g_cfg.heads = 4;
    g_cfg.kv_heads = llama ? 2 : 0;
    g_cfg.seed = 11;
}

static llmt_status make_trainer(llmt_model *m, int accum, int device, llmt_trainer **tr)
{
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = MICRO;
    o.grad_accum = accum;
    o.seq_len = T;
    o.schedule = LLMT_LR_CONSTANT;
    o.lr = LR;
    o.weight_decay = 0.1f;
    o.grad_clip = 1.0f;
    o.threads = 1;
    o.device = LLMT_DEVICE_CUDA;
    o.device_index = g_one_gpu ? 0 : device;
    o.deterministic = 1;
    o.fp8 = g_fp8;
    if (g_ops)
        return llmt__trainer_create_dev(m, &o, g_ops, tr);
    return llmt_trainer_create(m, &o, tr);
}

typedef struct rank_arg {
    llmt_comm *c;
    int rank, dp, zero;
    int k0, k1;              /* steps run: [k0, k1) (0, 0: all) */
    const char *load, *save; /* checkpoint roots: read before k0, write after k1 */
    int detach;              /* set_comm(NULL) at the end, then read m whole */
    float loss[STEPS];
    float *params;
    int64_t numel;
    llmt_trainer_memory mem;
    float *f8; /* fp8: the scales after step 1 (nf8 of them) */
    int nf8;
    llmt_status st;
    char err[1024];
} rank_arg;

/* A checkpoint of the trainer (every rank its shares) written after step
 * k1 or read before step k0. */
static llmt_status ckpt_io(rank_arg *a, llmt_trainer *tr, int save)
{
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.rank = a->rank;
    o.world_size = a->c ? a->dp : 1;
    o.keep_last = 0;
    llmt_ckpt *ck = NULL;
    llmt_status s = llmt_ckpt_create(NULL, save ? a->save : a->load, &o, &ck);
    if (s == LLMT_OK && save) {
        s = llmt_ckpt_begin(ck, a->k1);
        if (s == LLMT_OK)
            s = llmt_trainer_ckpt_add(tr, ck);
        if (s == LLMT_OK)
            s = llmt_ckpt_save(ck, 0);
    } else if (s == LLMT_OK) {
        int64_t step = -1;
        s = llmt_ckpt_open_latest(ck, &step);
        if (s == LLMT_OK && step != a->k0)
            s = LLMT_ERR_INTERNAL;
        if (s == LLMT_OK)
            s = llmt_trainer_ckpt_read(tr, ck);
    }
    if (s != LLMT_OK && ck)
        fprintf(stderr, "ckpt: %s\n", llmt_ckpt_last_error(ck));
    llmt_ckpt_destroy(ck);
    return s;
}

/* Rank r of dp (dp 1: the reference, all dp*ACCUM micro-batches). */
static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    int ref = a->c == NULL;
    a->st = llmt_model_create(NULL, &g_cfg, &m);
    if (a->st == LLMT_OK)
        a->st = make_trainer(m, ref ? ACCUM * a->dp : ACCUM, ref ? 0 : a->rank, &tr);
    if (!ref && a->st == LLMT_OK) {
        llmt_dp_opts o;
        llmt_dp_opts_init(&o, sizeof o);
        o.zero_stage = a->zero;
        o.bucket_bytes = 8 << 10; /* several buckets even for this model */
        a->st = llmt_trainer_set_comm(tr, a->c, &o);
    }
    a->mem.struct_size = sizeof a->mem;
    if (tr)
        llmt_trainer_memory_usage(tr, &a->mem);
    /* ZeRO-3 reads only the rank's share of each parameter: parameters
     * gathered before (here by sync_params, as after an evaluation or a
     * hash) must be gathered again from the restored shares */
    if (a->st == LLMT_OK && a->load && !ref)
        a->st = llmt_trainer_sync_params(tr);
    if (a->st == LLMT_OK && a->load)
        a->st = ckpt_io(a, tr, 0);
    size_t per = (size_t)ACCUM * MICRO * T;
    int seqs = ref ? a->dp * ACCUM * MICRO : ACCUM * MICRO;
    int k1 = a->k1 ? a->k1 : STEPS;
    for (int k = a->k0; k < k1 && a->st == LLMT_OK; k++) {
        size_t off = ((size_t)k * a->dp + (ref ? 0 : a->rank)) * per;
        llmt_batch b = {sizeof b, g_in + off, g_tg + off, seqs, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        a->st = llmt_trainer_step(tr, &b, &met);
        a->loss[k] = met.loss;
        const float *sc = NULL;
        int g0, g1;
        if (a->st == LLMT_OK && k == 0 && g_fp8 &&
            llmt__devtrain_fp8_state(llmt__trainer_devtrain(tr), &sc, &a->nf8, &g0, &g1) == 1) {
            a->f8 = malloc((size_t)a->nf8 * sizeof *sc);
            if (a->f8)
                memcpy(a->f8, sc, (size_t)a->nf8 * sizeof *sc);
        }
    }
    if (a->st == LLMT_OK && a->save)
        a->st = ckpt_io(a, tr, 1);
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr);
    if (a->st == LLMT_OK && a->detach) { /* every rank's shares back whole */
        a->st = llmt_trainer_set_comm(tr, NULL, NULL);
        llmt_tensor v;
        if (a->st == LLMT_OK)
            a->st = llmt_trainer_optim_state(tr, 0, 0, &v);
    }
    if (a->st != LLMT_OK)
        snprintf(a->err, sizeof a->err, "%s",
                 tr  ? llmt_trainer_last_error(tr)
                 : m ? llmt_model_last_error(m)
                     : "create");
    if (m) {
        int32_t np;
        llmt_model_param_count(m, &np, &a->numel);
        a->params = malloc((size_t)a->numel * sizeof(float));
        test_params_flatten(m, a->params);
    }
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return NULL;
}

static llmt_status make_comms(int dp, llmt_comm **c);

typedef struct nccl_arg {
    int rank, dp;
    llmt_comm *c;
    llmt_status st;
} nccl_arg;

static void *nccl_main(void *p)
{
    nccl_arg *a = p;
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.backend = LLMT_COMM_NCCL;
    co.cuda_device = a->rank;
    co.timeout_ms = 120000;
    a->st =
        llmt_comm_create_from_unique_id(NULL, g_uid, sizeof g_uid, a->rank, a->dp, &co, &a->c);
    return NULL;
}

static llmt_status make_comms(int dp, llmt_comm **c)
{
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.timeout_ms = 120000;
    if (g_ops)
        return llmt_comm_create_inproc(NULL, dp, &co, c);
    /* NCCL: every rank joins from its own thread */
    llmt_status s = llmt_comm_unique_id(g_uid, sizeof g_uid);
    if (s != LLMT_OK)
        return s;
    nccl_arg a[MAXDP];
    pthread_t th[MAXDP];
    for (int r = 0; r < dp; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].rank = r;
        a[r].dp = dp;
        pthread_create(&th[r], NULL, nccl_main, &a[r]);
    }
    for (int r = 0; r < dp; r++) {
        pthread_join(th[r], NULL);
        c[r] = a[r].c;
        if (a[r].st != LLMT_OK)
            s = a[r].st;
    }
    return s;
}

/* dp ranks (threads) of the device engine running `proto` with each rank's
 * index filled in; 0 when every rank ran. */
static int run_ranks(int dp, const rank_arg *proto, rank_arg *a)
{
    llmt_comm *c[MAXDP] = {NULL};
    llmt_status cs = make_comms(dp, c);
    CHECK_STATUS(cs, LLMT_OK);
    pthread_t th[MAXDP];
    for (int r = 0; r < dp && cs == LLMT_OK; r++) {
        a[r] = *proto;
        a[r].c = c[r];
        a[r].rank = r;
        a[r].dp = dp;
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    for (int r = 0; r < dp && cs == LLMT_OK; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < dp; r++)
        llmt_comm_destroy(c[r]);
    return cs == LLMT_OK ? 0 : -1;
}

/* A DP run of the device engine checkpointed after step 3 and resumed by
 * fresh trainers continues bit for bit like the uninterrupted one (the
 * rank's shares of parameters and moments map between the device layout
 * and the checkpoint's flat tensors); detaching gathers the moments. */
static void check_resume(const char *name, int dp, int zero, const char *tmp)
{
    char root[600];
    snprintf(root, sizeof root, "%s/%s-dp%d-z%d", tmp, name, dp, zero);
    rank_arg whole[MAXDP], first[MAXDP], second[MAXDP], p;
    memset(&p, 0, sizeof p);
    p.zero = zero;
    make_data(dp);
    if (run_ranks(dp, &p, whole))
        return;
    p.k1 = 3;
    p.save = root;
    if (run_ranks(dp, &p, first))
        return;
    p.k0 = 3;
    p.k1 = 0;
    p.save = NULL;
    p.load = root;
    p.detach = 1;
    if (run_ranks(dp, &p, second))
        return;
    int same = 1;
    for (int r = 0; r < dp; r++) {
        CHECK_STATUS(whole[r].st, LLMT_OK);
        CHECK_STATUS(first[r].st, LLMT_OK);
        CHECK_STATUS(second[r].st, LLMT_OK);
        if (second[r].st != LLMT_OK)
            fprintf(stderr, "%s resume: %s\n", name, second[r].err);
        if (whole[r].st || second[r].st || whole[r].numel != second[r].numel) {
            same = 0;
            continue;
        }
        same &= memcmp(whole[r].loss + 3, second[r].loss + 3, (STEPS - 3) * sizeof(float)) == 0;
        same &= memcmp(whole[r].params, second[r].params,
                       (size_t)whole[r].numel * sizeof(float)) == 0;
    }
    fprintf(stderr, "%s dp=%d zero=%d: resumed at step 3 %s\n", name, dp, zero,
            same ? "bit for bit" : "DIFFERS");
    CHECK(same);
    for (int r = 0; r < dp; r++) {
        free(whole[r].params);
        free(first[r].params);
        free(second[r].params);
    }
}

static double g_worst_loss, g_worst_param;

/* The single-rank reference of dp ranks: all dp*ACCUM micro-batches of
 * each step. It does not depend on the ZeRO stage, so one run serves the
 * ZeRO cases of a model and dp. */
static void run_reference(int dp, rank_arg *ref)
{
    memset(ref, 0, sizeof *ref);
    ref->dp = dp;
    make_data(dp);
    rank_main(ref);
}

static void compare(const char *name, int dp, int zero, const rank_arg *ref)
{
    make_data(dp);
    CHECK_STATUS(ref->st, LLMT_OK);
    if (ref->st != LLMT_OK) {
        fprintf(stderr, "%s reference: %s\n", name, ref->err);
        return;
    }
    rank_arg proto, a[MAXDP];
    memset(&proto, 0, sizeof proto);
    proto.zero = zero;
    int cs = run_ranks(dp, &proto, a);
    double ml0 = 0, ml = 0, mp = 0;
    for (int r = 0; r < dp && cs == 0; r++) {
        CHECK_STATUS(a[r].st, LLMT_OK);
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s rank %d: %s\n", name, r, a[r].err);
        CHECK_EQ_INT(a[r].numel, ref->numel);
        if (a[r].st != LLMT_OK || a[r].numel != ref->numel)
            continue;
        for (int k = 0; k < STEPS; k++) {
            double d = fabs(a[r].loss[k] - ref->loss[k]) / fabs(ref->loss[k]);
            if (!(d <= (k ? ml : ml0)))
                *(k ? &ml : &ml0) = isnan(d) ? INFINITY : d;
        }
        for (int64_t i = 0; i < ref->numel; i++) {
            double d = fabs((double)a[r].params[i] - ref->params[i]);
            if (!(d <= mp))
                mp = isnan(d) ? INFINITY : d;
        }
        if (r > 0)
            CHECK(memcmp(a[r].params, a[0].params, (size_t)ref->numel * sizeof(float)) == 0);
        /* ZeRO >= 1: a rank holds about 1/dp of the optimizer state */
        if (zero >= 1)
            CHECK(a[r].mem.optimizer > 0 &&
                  a[r].mem.optimizer <= ref->mem.optimizer / dp + 64 * (g_cfg.layers + 2));
    }
    fprintf(stderr,
            "%s dp=%d zero=%d: step-1 loss rel diff %.3g, later losses %.3g, "
            "params abs %.3g\n",
            name, dp, zero, ml0, ml, mp);
    CHECK(ml0 <= 1e-6);
    CHECK(ml <= 1.0 / 512);
    CHECK(mp <= 2.0 * LR * STEPS);
    if (ml > g_worst_loss)
        g_worst_loss = ml;
    if (mp > g_worst_param)
        g_worst_param = mp;
    for (int r = 0; r < dp && cs == 0; r++)
        free(a[r].params);
}

/* fp8 GEMMs under data parallelism: the ranks take the maximum of their
 * amaxes over the group, so after step 1 (whose activations are the
 * reference's bit for bit) every rank's scales equal, bit for bit, those
 * one rank picked from the whole global batch; without that reduction
 * each rank would size its activation and gradient scales from its own
 * micro-batches. The losses then follow the reference within the same
 * bound as bf16's (fp8's rounding is the same on both sides; only the
 * fp32 sums' order differs). */
static void compare_fp8(const char *name, int dp, int zero)
{
    rank_arg ref;
    g_fp8 = 1;
    run_reference(dp, &ref);
    CHECK(ref.f8 != NULL && ref.nf8 > 0);
    rank_arg proto, a[MAXDP];
    memset(&proto, 0, sizeof proto);
    proto.zero = zero;
    int cs = run_ranks(dp, &proto, a);
    double ml = 0;
    int same = 0, moved = 0;
    for (int r = 0; r < dp && cs == 0; r++) {
        CHECK_STATUS(a[r].st, LLMT_OK);
        if (a[r].st != LLMT_OK) {
            fprintf(stderr, "%s fp8 rank %d: %s\n", name, r, a[r].err);
            continue;
        }
        for (int k = 0; k < STEPS; k++)
            ml = fmax(ml, fabs(a[r].loss[k] - ref.loss[k]) / fabs(ref.loss[k]));
        if (a[r].f8 && ref.f8 && a[r].nf8 == ref.nf8) {
            same += memcmp(a[r].f8, ref.f8, (size_t)ref.nf8 * sizeof(float)) == 0;
            for (int i = 0; r == 0 && i < ref.nf8; i++)
                moved += ref.f8[i] != 1.0f;
        }
        free(a[r].f8);
        free(a[r].params);
    }
    fprintf(stderr,
            "%s fp8 dp=%d zero=%d: %d of %d ranks' scales after step 1 equal the reference's "
            "(%d of %d moved off 1), losses within %.3g relative\n",
            name, dp, zero, same, dp, moved, ref.nf8, ml);
    CHECK_EQ_INT(same, dp);
    CHECK(moved > 0);
    CHECK(ml <= 1.0 / 512);
    free(ref.f8);
    free(ref.params);
    g_fp8 = 0;
}

/* staged: dp ranks on the staged table against the same on the
 * emulation as it is, bit for bit. */
static void compare_staged(const char *name, int dp, int zero)
{
    make_data(dp);
    rank_arg proto, a[MAXDP], b[MAXDP];
    memset(&proto, 0, sizeof proto);
    proto.zero = zero;
    const llmt__dev_ops *keep = g_ops;
    g_ops = llmt__dev_emul();
    int ok = run_ranks(dp, &proto, b) == 0;
    g_ops = keep;
    ok = run_ranks(dp, &proto, a) == 0 && ok;
    CHECK(ok);
    int same = ok;
    for (int r = 0; r < dp && ok; r++) {
        CHECK_STATUS(a[r].st, LLMT_OK);
        CHECK_STATUS(b[r].st, LLMT_OK);
        if (a[r].st != LLMT_OK || b[r].st != LLMT_OK) {
            fprintf(stderr, "%s dp=%d zero=%d rank %d: %s | %s\n", name, dp, zero, r, a[r].err,
                    b[r].err);
            same = 0;
            continue;
        }
        int eq = !memcmp(a[r].loss, b[r].loss, sizeof a[r].loss) && a[r].numel == b[r].numel &&
                 !memcmp(a[r].params, b[r].params, (size_t)a[r].numel * sizeof(float));
        CHECK(eq);
        same = same && eq;
    }
    fprintf(stderr, "%s dp=%d zero=%d staged: %s the unstaged emulation bit for bit\n", name,
            dp, zero, same ? "equals" : "DIFFERS from");
    for (int r = 0; r < dp && ok; r++) {
        free(a[r].params);
        free(b[r].params);
    }
}

/* The graph's split points (device.h): every Linear is a descriptor with
 * split NONE today; marking qkv COLUMN and proj ROW with an identity hook
 * (what tensor parallelism of one rank does) runs the hook at the named
 * points and changes nothing in the run; without a hook a split op is
 * refused by name. */
typedef struct hook_count {
    int at[5][2];
} hook_count;

static llmt_status count_hook(void *ctx, llmt__point at, int dir, const llmt__linear *lin,
                              void *buf, size_t rows, size_t cols)
{
    hook_count *h = ctx;
    (void)lin;
    (void)buf;
    (void)rows;
    (void)cols;
    h->at[at][dir > 0]++;
    return LLMT_OK;
}

static int run_split(int mark, int hook, hook_count *h, float *loss, char *err, size_t errlen)
{
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_status s = llmt_model_create(NULL, &g_cfg, &m);
    if (s == LLMT_OK)
        s = make_trainer(m, ACCUM, 0, &tr);
    llmt__devtrain *g = tr ? llmt__trainer_devtrain(tr) : NULL;
    int n = 0;
    llmt__linear *lin = g ? (llmt__linear *)llmt__devtrain_linears(g, &n) : NULL;
    for (int l = 0; mark && lin && l < g_cfg.layers; l++) {
        lin[l * 5 + 0].split = LLMT__SPLIT_COLUMN; /* qkv */
        lin[l * 5 + 1].split = LLMT__SPLIT_ROW;    /* proj */
    }
    if (g && hook)
        llmt__devtrain_set_split_hook(g, count_hook, h);
    make_data(1);
    for (int k = 0; k < 2 && s == LLMT_OK; k++) {
        size_t off = (size_t)k * ACCUM * MICRO * T;
        llmt_batch b = {sizeof b, g_in + off, g_tg + off, ACCUM * MICRO, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        s = llmt_trainer_step(tr, &b, &met);
        loss[k] = met.loss;
    }
    if (s != LLMT_OK && tr)
        snprintf(err, errlen, "%s", llmt_trainer_last_error(tr));
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return (int)s;
}

static void check_split_points(void)
{
    config(0);
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt_model_create(NULL, &g_cfg, &m), LLMT_OK);
    CHECK_STATUS(make_trainer(m, ACCUM, 0, &tr), LLMT_OK);
    if (!tr) {
        llmt_model_destroy(m);
        return;
    }
    int n = 0, C = g_cfg.width, L = g_cfg.layers;
    const llmt__linear *lin = llmt__devtrain_linears(llmt__trainer_devtrain(tr), &n);
    CHECK_EQ_INT(n, L * 5 + 1);
    for (int i = 0; i < n; i++)
        CHECK_EQ_INT(lin[i].split, LLMT__SPLIT_NONE);
    CHECK(!strcmp(lin[0].name, "qkv") && lin[0].in == C && lin[0].out == 3 * C);
    CHECK(!strcmp(lin[1].name, "proj") && lin[1].in == C && lin[1].out == C);
    CHECK(!strcmp(lin[2].name, "fc") && lin[2].in == C && lin[2].out == 4 * C && lin[2].gelu);
    CHECK(!strcmp(lin[4].name, "fcproj") && lin[4].in == 4 * C && lin[4].out == C);
    CHECK(!strcmp(lin[n - 1].name, "lm_head") && lin[n - 1].out == 128 &&
          lin[n - 1].fp8_slot < 0);
    CHECK_EQ_INT(llmt__devtrain_vocab(llmt__trainer_devtrain(tr))->split, LLMT__SPLIT_NONE);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);

    float l0[2] = {0}, l1[2] = {0}, l2[2] = {0};
    char err[512] = "";
    hook_count h;
    memset(&h, 0, sizeof h);
    CHECK_STATUS(run_split(0, 0, &h, l0, err, sizeof err), LLMT_OK);
    CHECK_STATUS(run_split(1, 1, &h, l1, err, sizeof err), LLMT_OK);
    CHECK(memcmp(l0, l1, sizeof l0) == 0); /* identity collectives: the same run */
    /* per micro-batch and layer: one column input and one row output each
     * way (2 steps x ACCUM micro-batches) */
    int per = 2 * ACCUM * L;
    CHECK_EQ_INT(h.at[LLMT__AT_COLUMN_IN][1], per);
    CHECK_EQ_INT(h.at[LLMT__AT_COLUMN_IN][0], per);
    CHECK_EQ_INT(h.at[LLMT__AT_ROW_OUT][1], per);
    CHECK_EQ_INT(h.at[LLMT__AT_ROW_OUT][0], per);
    CHECK_STATUS(run_split(1, 0, &h, l2, err, sizeof err), LLMT_ERR_UNSUPPORTED);
    CHECK(strstr(err, "qkv is split") != NULL);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "emul";
    int cuda = !strcmp(mode, "cuda"), host = !strcmp(mode, "cuda-host");
    int stg = !strcmp(mode, "staged");
    g_ops = cuda ? NULL : llmt__dev_emul();
    int dps[] = {2, 4, 3};
    int ndp = 3;
    if (stg || host) {
        const llmt__dev_ops *base = stg ? llmt__dev_emul() : llmt__dev_cuda();
        if (!base) {
            printf("SKIP: a build without CUDA\n");
            return CHECK_SKIP;
        }
        g_staged = *base;
        g_staged.host_memory = 0;
        g_staged.unverified_dp = NULL; /* the opt-in: this test is the verification */
        g_ops = &g_staged;
        g_one_gpu = host;
        if (host) { /* a GPU at all? */
            config(0);
            llmt_model *m = NULL;
            llmt_trainer *tr = NULL;
            llmt_status s = llmt_model_create(NULL, &g_cfg, &m);
            if (s == LLMT_OK)
                s = make_trainer(m, 1, 0, &tr);
            if (s != LLMT_OK)
                printf("SKIP: %s\n", llmt_model_last_error(m));
            llmt_trainer_destroy(tr);
            llmt_model_destroy(m);
            if (s != LLMT_OK)
                return CHECK_SKIP;
        }
        ndp = host ? 3 : 0; /* staged: the bitwise comparisons below */
    }
    if (stg) {
        config(0);
        for (int zero = 0; zero <= 3; zero++)
            compare_staged("gpt2", 2, zero);
        config(1);
        compare_staged("llama", 3, 2);
        compare_staged("llama", 3, 3);
    }
    if (cuda) {
        if (!(llmt_build_features() & LLMT_FEATURE_NCCL)) {
            fprintf(stderr, "SKIP: this build has no NCCL\n");
            return CHECK_SKIP;
        }
        /* two GPUs at least: a trainer on device 1 */
        config(0);
        llmt_model *m = NULL;
        llmt_trainer *tr = NULL;
        llmt_status s = llmt_model_create(NULL, &g_cfg, &m);
        if (s == LLMT_OK)
            s = make_trainer(m, 1, 1, &tr);
        llmt_trainer_destroy(tr);
        llmt_model_destroy(m);
        if (s != LLMT_OK) {
            fprintf(stderr, "SKIP: fewer than 2 usable GPUs (device 1: %s)\n",
                    llmt_status_string(s));
            return CHECK_SKIP;
        }
        llmt_model_create(NULL, &g_cfg, &m);
        tr = NULL;
        if (make_trainer(m, 1, 3, &tr) != LLMT_OK)
            ndp = 1; /* dp 2 only */
        llmt_trainer_destroy(tr);
        llmt_model_destroy(m);
    }
    if (!cuda && !stg && !host)
        check_split_points();
    char tmp[] = "/tmp/llmt-device-dp-XXXXXX";
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    for (int llama = 0; llama <= 1; llama++) {
        config(llama);
        const char *name = llama ? "llama" : "gpt2";
        for (int i = 0; i < ndp; i++) {
            rank_arg ref;
            run_reference(dps[i], &ref);
            for (int zero = 0; zero <= 3; zero++) {
                if (dps[i] == 3 && zero < 2)
                    continue; /* the padded path: ZeRO 2, 3 */
                compare(name, dps[i], zero, &ref);
            }
            free(ref.params);
        }
    }
    if (!cuda && !stg && !host) {
        config(0);
        compare_fp8("gpt2", 2, 1);
        compare_fp8("gpt2", 2, 3);
        config(1);
        compare_fp8("llama", 2, 0);
    }
    config(0);
    check_resume("gpt2", 2, 2, tmp);
    check_resume("gpt2", 2, 3, tmp);
    config(1);
    check_resume("llama", 2, 1, tmp);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    fprintf(stderr, "worst: later losses %.3g relative, params %.3g absolute\n", g_worst_loss,
            g_worst_param);
    free(g_in);
    free(g_tg);
    return check_exit(stg ? "device-dp-staged" : host ? "gpu-dp-host" : "device-dp");
}
