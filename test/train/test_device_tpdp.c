/* Tensor parallelism composed with data parallelism and ZeRO 0-3
 * (lib/train/device.c, tp.c, dp.c) against the single-rank engine on the
 * same global batches:
 *
 *   test_device_tpdp cpu    the fp32 CPU backend; unit suite
 *   test_device_tpdp emul   the bf16 host emulation; unit suite
 *
 * Four ranks as threads on one in-process communicator, placed by an
 * llmt_plan of tp 2 x dp 2 (TP innermost: ranks 0,1 and 2,3 share layers);
 * each rank's TP and DP groups come from llmt_comm_create_plan_group. Every
 * TP rank of a DP replica reads that replica's half of each global batch
 * (2 of the 4 sequences); the single rank reads all 4 (2 micro-batches of
 * 2). Cases: GPT-2 and Llama with kv heads split (kv_heads 2 = tp) and
 * shared (kv_heads 1 < tp: the kv heads' gradients are summed over the TP
 * group after data parallelism's reduction), ZeRO 0, 1, 2, 3; ten AdamW
 * steps with clipping (the gradient norm counts each element once across
 * TP, by owner, and DP, by share).
 *
 * Bounds: test_device_tp.c's, for the same reasons (tp and dp change only
 * the order of fp32 sums): losses within 1e-5 relative, final parameters
 * within 1e-5 relative L2 and 1e-5 absolute except at most 1 element in
 * 10^4 (within 1e-4); the emulation within the bf16 bound (2^-9 on the
 * losses, 2 x lr x steps on the fp32 masters). The measured worst cases are
 * printed. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "train/device.h"

#define STEPS 10
#define SEQS 4 /* sequences per global step */
#define T 16
#define V 97
#define LR 1e-3f
#define TP 2
#define DP 2
#define W (TP * DP)

static const llmt__dev_ops *g_ops;
static int g_bf16;
static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static llmt_plan *g_plan;
static double g_worst_loss, g_worst_param;

static void make_data(void)
{
    size_t n = (size_t)STEPS * SEQS * T;
    g_in = malloc(n * sizeof *g_in);
    g_tg = malloc(n * sizeof *g_tg);
    uint64_t s = 777;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        g_in[i] = (int32_t)((s >> 33) % V);
        g_tg[i] = (s >> 20) % 11 == 0 ? -1 : (g_in[i] * 5 + 3) % V;
    }
}

static void config(int llama, int kv)
{
    llmt_model_config_init(&g_cfg, sizeof g_cfg);
    g_cfg.arch = llama ? LLMT_ARCH_LLAMA : LLMT_ARCH_GPT2;
    g_cfg.vocab_size = V;
    g_cfg.padded_vocab_size = 128;
    g_cfg.max_seq_len = T;
    g_cfg.layers = 2;
    g_cfg.width = 64;
    g_cfg.heads = 4;
    g_cfg.kv_heads = llama ? kv : 0;
    g_cfg.seed = 5;
}

typedef struct rank_arg {
    llmt_comm *world; /* NULL: the single-rank reference */
    int rank, zero;
    float loss[STEPS];
    float *params;
    int64_t numel;
    int ckpt_refused;
    llmt_status st;
    char err[1024];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *tpc = NULL, *dpc = NULL;
    int32_t co[LLMT_PLAN_NDIMS] = {0};
    int dp = a->world ? DP : 1;
    if (a->world) {
        a->st = llmt_plan_coords(g_plan, a->rank, co);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_create_plan_group(a->world, g_plan, LLMT_DIM_TP, &tpc);
        if (a->st == LLMT_OK)
            a->st = llmt_comm_create_plan_group(a->world, g_plan, LLMT_DIM_DP, &dpc);
        if (a->st != LLMT_OK) {
            snprintf(a->err, sizeof a->err, "groups: %s", llmt_comm_last_error(a->world));
            fprintf(stderr, "rank %d: %s\n", a->rank, a->err);
            return NULL; /* the comparison reports it */
        }
    }
    if (a->st == LLMT_OK)
        a->st = llmt_model_create(NULL, &g_cfg, &m);
    if (a->st == LLMT_OK) {
        llmt_trainer_opts o;
        llmt_trainer_opts_init(&o, sizeof o);
        o.micro_batch = 2;
        o.grad_accum = SEQS / 2 / dp;
        o.seq_len = T;
        o.schedule = LLMT_LR_CONSTANT;
        o.lr = LR;
        o.weight_decay = 0.1f;
        o.grad_clip = 1.0f;
        o.threads = 1;
        a->st = llmt__trainer_create_dev(m, &o, g_ops, &tr);
    }
    if (a->st == LLMT_OK && tpc)
        a->st = llmt_trainer_set_tp_comm(tr, tpc);
    if (a->st == LLMT_OK && dpc) {
        llmt_dp_opts d;
        llmt_dp_opts_init(&d, sizeof d);
        d.zero_stage = a->zero;
        d.bucket_bytes = 16 << 10; /* several buckets */
        a->st = llmt_trainer_set_comm(tr, dpc, &d);
    }
    size_t per = (size_t)SEQS / dp * T;
    for (int k = 0; k < STEPS && a->st == LLMT_OK; k++) {
        size_t at = (size_t)k * SEQS * T + (size_t)co[LLMT_DIM_DP] * per;
        llmt_batch b = {sizeof b, g_in + at, g_tg + at, SEQS / dp, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        a->st = llmt_trainer_step(tr, &b, &met);
        a->loss[k] = met.loss;
    }
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr); /* gathers over dp, then tp */
    /* checkpoints of tp x dp: refused (not collective), never wrong blocks */
    if (a->st == LLMT_OK && a->world && a->rank == 0 && a->zero == 1) {
        char dir[] = "/tmp/llmt_tpdp_XXXXXX";
        llmt_ckpt_opts co;
        llmt_ckpt_opts_init(&co, sizeof co);
        llmt_ckpt *ck = NULL;
        if (mkdtemp(dir) && llmt_ckpt_create(NULL, dir, &co, &ck) == LLMT_OK) {
            a->ckpt_refused = llmt_trainer_ckpt_add(tr, ck) == LLMT_ERR_UNSUPPORTED &&
                              strstr(llmt_trainer_last_error(tr), "issue 16 step 3");
            llmt_ckpt_destroy(ck);
        }
        rmdir(dir);
    }
    if (a->st != LLMT_OK)
        snprintf(a->err, sizeof a->err, "%s",
                 tr  ? llmt_trainer_last_error(tr)
                 : m ? llmt_model_last_error(m)
                     : "create");
    if (m && a->st == LLMT_OK) {
        int32_t np;
        llmt_model_param_count(m, &np, &a->numel);
        a->params = malloc((size_t)a->numel * sizeof(float));
        int64_t at = 0;
        for (int32_t i = 0; i < np; i++) {
            llmt_tensor v;
            int64_t n = 0;
            llmt_model_param(m, i, NULL, &v);
            llmt_tensor_numel(&v, &n);
            memcpy(a->params + at, v.data, (size_t)n * sizeof(float));
            at += n;
        }
    }
    llmt_trainer_destroy(tr);
    llmt_comm_destroy(dpc);
    llmt_comm_destroy(tpc);
    llmt_model_destroy(m);
    return NULL;
}

static void run(int world, int zero, rank_arg *a)
{
    llmt_comm *c[W] = {NULL};
    int n = world ? W : 1;
    memset(a, 0, (size_t)n * sizeof *a);
    if (world)
        CHECK_STATUS(llmt_comm_create_inproc(NULL, W, NULL, c), LLMT_OK);
    pthread_t th[W];
    for (int r = 0; r < n; r++) {
        a[r].world = c[r];
        a[r].rank = r;
        a[r].zero = zero;
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++)
        llmt_comm_destroy(c[r]);
}

static void compare(const char *name, int llama, int kv)
{
    config(llama, kv);
    rank_arg ref[1];
    run(0, 0, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    if (ref[0].st != LLMT_OK) {
        fprintf(stderr, "%s reference: %s\n", name, ref[0].err);
        return;
    }
    /* training moved: the comparison is not of two untouched inits */
    CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
    for (int zero = 0; zero <= 3; zero++) {
        rank_arg a[W];
        run(1, zero, a);
        double wl = 0.0, wp = 0.0, wr = 0.0;
        int64_t wo = 0;
        if (zero == 1)
            CHECK(a[0].ckpt_refused);
        for (int r = 0; r < W; r++) {
            if (a[r].st != LLMT_OK)
                fprintf(stderr, "%s zero %d rank %d: %s\n", name, zero, r, a[r].err);
            CHECK_STATUS(a[r].st, LLMT_OK);
            if (a[r].st != LLMT_OK)
                continue;
            for (int k = 0; k < STEPS; k++) {
                double d =
                    fabs((double)a[r].loss[k] - ref[0].loss[k]) / fabs((double)ref[0].loss[k]);
                if (!(d <= wl))
                    wl = d;
                CHECK(d <= (g_bf16 ? 1.0 / 512 : 1e-5));
            }
            CHECK(a[r].numel == ref[0].numel);
            double dd = 0.0, rr = 0.0;
            int64_t over = 0;
            for (int64_t i = 0; i < a[r].numel && a[r].numel == ref[0].numel; i++) {
                double d = fabs((double)a[r].params[i] - ref[0].params[i]);
                if (!(d <= wp))
                    wp = d; /* NaN shows */
                over += !(d <= 1e-5);
                dd += d * d;
                rr += (double)ref[0].params[i] * ref[0].params[i];
            }
            double rel = sqrt(dd / rr);
            if (!(rel <= wr))
                wr = rel;
            if (over > wo)
                wo = over;
            if (g_bf16) {
                CHECK(wp <= 2.0 * LR * STEPS);
            } else {
                CHECK(rel <= 1e-5);
                CHECK(wp <= 1e-4);
                CHECK(over * 10000 <= a[r].numel);
            }
        }
        printf("%-20s tp %d x dp %d ZeRO %d: loss %.3f -> %.3f, loss rel diff %.2e; params: "
               "rel L2 diff %.2e, max abs diff %.2e, %lld of %lld above 1e-5\n",
               name, TP, DP, zero, (double)ref[0].loss[0], (double)ref[0].loss[STEPS - 1], wl,
               wr, wp, (long long)wo, (long long)ref[0].numel);
        if (wl > g_worst_loss)
            g_worst_loss = wl;
        if (wp > g_worst_param)
            g_worst_param = wp;
        for (int r = 0; r < W; r++)
            free(a[r].params);
    }
    free(ref[0].params);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "cpu";
    if (!strcmp(mode, "cpu"))
        g_ops = llmt__dev_cpu();
    else if (!strcmp(mode, "emul")) {
        g_ops = llmt__dev_emul();
        g_bf16 = 1;
    } else {
        fprintf(stderr, "usage: test_device_tpdp cpu|emul\n");
        return 2;
    }
    const char *js = "{\"name\": \"tpdp\", \"model\": {\"arch\": \"gpt2\", \"layers\": 2, "
                     "\"hidden\": 64, \"heads\": 4, \"vocab\": 97, \"seq_len\": 16}, "
                     "\"parallelism\": {\"tp\": 2, \"dp\": 2}, "
                     "\"batch\": {\"micro\": 2, \"grad_accum\": 1}}";
    llmt_spec *spec = NULL;
    llmt_status s = llmt_spec_parse_json(NULL, js, strlen(js), &spec);
    if (s == LLMT_OK)
        s = llmt_plan_create(NULL, spec, W, &g_plan);
    CHECK_STATUS(s, LLMT_OK);
    llmt_spec_destroy(spec);
    if (s != LLMT_OK)
        return check_exit("device-tpdp");
    /* TP innermost: rank 1 is rank 0's TP peer, rank 2 its DP peer */
    int32_t c1[LLMT_PLAN_NDIMS], c2[LLMT_PLAN_NDIMS];
    llmt_plan_coords(g_plan, 1, c1);
    llmt_plan_coords(g_plan, 2, c2);
    CHECK(c1[LLMT_DIM_TP] == 1 && c1[LLMT_DIM_DP] == 0);
    CHECK(c2[LLMT_DIM_TP] == 0 && c2[LLMT_DIM_DP] == 1);
    make_data();
    compare("gpt2", 0, 0);
    compare("llama kv2 (split)", 1, 2);
    compare("llama kv1 (shared)", 1, 1);
    printf("worst: loss %.2e relative, parameters %.2e absolute\n", g_worst_loss,
           g_worst_param);
    llmt_plan_destroy(g_plan);
    free(g_in);
    free(g_tg);
    return check_exit("device-tpdp");
}
