/* Data parallelism equivalence: dp = 2 and 4 ranks (threads, in-process
 * communicator) with ZeRO 0/1/2/3 train to the same losses and the same
 * final parameters as one rank on the same global batch (micro x accum x
 * dp sequences). The reduction order differs (the ranks' partial gradients
 * are summed after each rank's own sum), so the match is to a tolerance:
 * losses to 2e-6 relative, parameters to 2e-5 absolute after STEPS AdamW
 * steps (AdamW's update of a gradient near zero amplifies rounding). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"

#define STEPS 4
#define MICRO 2
#define ACCUM 2
#define T 16
#define V 64

static llmt_model_config cfg;
static llmt_trainer_opts topts;

static int32_t *g_in, *g_tg; /* the global batch of each step */

static void make_data(int dp)
{
    size_t n = (size_t)STEPS * dp * ACCUM * MICRO * T;
    free(g_in);
    free(g_tg);
    g_in = malloc(n * sizeof *g_in);
    g_tg = malloc(n * sizeof *g_tg);
    uint64_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        g_in[i] = (int32_t)((s >> 33) % V);
        /* a learnable rule plus ignored targets, unevenly spread */
        g_tg[i] = (s >> 20) % 11 == 0 ? -1 : (g_in[i] * 5 + 3) % V;
    }
}

static llmt_model *new_model(void)
{
    llmt_model *m = NULL;
    CHECK_STATUS(llmt_model_create(NULL, &cfg, &m), LLMT_OK);
    return m;
}

/* One rank: global step batch k is dp*ACCUM*MICRO sequences; rank r gets
 * its contiguous ACCUM*MICRO of them. */
typedef struct rank_arg {
    llmt_comm *c;
    int rank, dp, zero, overlap;
    float loss[STEPS];
    float *params; /* final, flattened */
    int64_t numel;
    int poisoned;
    llmt_status st;
    char err[1024];
} rank_arg;

static void flatten(llmt_model *m, float *out)
{
    int32_t np = 0;
    int64_t tot = 0;
    llmt_model_param_count(m, &np, &tot);
    size_t at = 0;
    for (int32_t i = 0; i < np; i++) {
        llmt_tensor v;
        llmt_model_param(m, i, NULL, &v);
        int64_t n = 0;
        llmt_tensor_numel(&v, &n);
        memcpy(out + at, v.data, (size_t)n * sizeof(float));
        at += (size_t)n;
    }
}

static int any_nan(llmt_model *m)
{
    int32_t np = 0;
    int64_t tot = 0;
    llmt_model_param_count(m, &np, &tot);
    for (int32_t i = 0; i < np; i++) {
        llmt_tensor v;
        llmt_model_param(m, i, NULL, &v);
        int64_t n = 0;
        llmt_tensor_numel(&v, &n);
        for (int64_t k = 0; k < n; k++)
            if (isnan(((float *)v.data)[k])) return 1;
    }
    return 0;
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    a->st = llmt_model_create(NULL, &cfg, &m);
    if (a->st == LLMT_OK) a->st = llmt_trainer_create(m, &topts, &tr);
    llmt_dp_opts o;
    llmt_dp_opts_init(&o, sizeof o);
    o.zero_stage = a->zero;
    o.overlap = a->overlap;
    o.bucket_bytes = 16 << 10; /* several buckets even for this tiny model */
    if (a->st == LLMT_OK) a->st = llmt_trainer_set_comm(tr, a->c, &o);
    size_t per = (size_t)ACCUM * MICRO * T;
    for (int k = 0; k < STEPS && a->st == LLMT_OK; k++) {
        size_t off = ((size_t)k * a->dp + a->rank) * per;
        llmt_batch b = {sizeof b, g_in + off, g_tg + off, ACCUM * MICRO, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        a->st = llmt_trainer_step(tr, &b, &met);
        a->loss[k] = met.loss;
    }
    if (a->st == LLMT_OK) {
        a->poisoned = any_nan(m);
        a->st = llmt_trainer_sync_params(tr);
    }
    if (a->st != LLMT_OK)
        snprintf(a->err, sizeof a->err, "%s", tr ? llmt_trainer_last_error(tr) : "create");
    int32_t np;
    llmt_model_param_count(m, &np, &a->numel);
    a->params = malloc((size_t)a->numel * sizeof(float));
    flatten(m, a->params);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return NULL;
}

static double g_max_loss_rel, g_max_param_abs;

static void compare(int dp, int zero, int overlap, const float *ref_loss,
                    const float *ref_params, int64_t numel)
{
    llmt_comm *c[8];
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.timeout_ms = 60000;
    CHECK_STATUS(llmt_comm_create_inproc(NULL, dp, &co, c), LLMT_OK);
    rank_arg a[8];
    pthread_t th[8];
    for (int r = 0; r < dp; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].c = c[r];
        a[r].rank = r;
        a[r].dp = dp;
        a[r].zero = zero;
        a[r].overlap = overlap;
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    for (int r = 0; r < dp; r++) pthread_join(th[r], NULL);
    double ml = 0, mp = 0;
    for (int r = 0; r < dp; r++) {
        CHECK_STATUS(a[r].st, LLMT_OK);
        if (a[r].st != LLMT_OK) fprintf(stderr, "rank %d: %s\n", r, a[r].err);
        CHECK_EQ_INT(a[r].numel, numel);
        for (int k = 0; k < STEPS; k++) {
            double d = fabs(a[r].loss[k] - ref_loss[k]) / fabs(ref_loss[k]);
            if (d > ml) ml = d;
        }
        for (int64_t i = 0; i < numel && a[r].numel == numel; i++) {
            double d = fabs((double)a[r].params[i] - ref_params[i]);
            if (!(d <= mp)) mp = isnan(d) ? INFINITY : d;
        }
        /* all ranks hold bitwise the same parameters */
        if (r > 0) {
            int same = memcmp(a[r].params, a[0].params, (size_t)numel * sizeof(float)) == 0;
            CHECK(same);
            for (int64_t i = 0, shown = 0; !same && i < numel && shown < 5; i++)
                if (a[r].params[i] != a[0].params[i]) {
                    fprintf(stderr, "rank %d differs from rank 0 at element %lld: %.9g vs %.9g\n",
                            r, (long long)i, a[r].params[i], a[0].params[i]);
                    shown++;
                }
        }
        /* ZeRO-3 keeps only shares between steps */
        if (zero == 3) CHECK(a[r].poisoned);
        else CHECK(!a[r].poisoned);
    }
    for (int r = 0; r < dp; r++) {
        free(a[r].params);
        llmt_comm_destroy(c[r]);
    }
    fprintf(stderr, "dp=%d zero=%d overlap=%d: max loss rel diff %.3g, max "
            "param abs diff %.3g\n", dp, zero, overlap, ml, mp);
    CHECK(ml <= 2e-6);
    CHECK(mp <= 2e-5);
    if (ml > g_max_loss_rel) g_max_loss_rel = ml;
    if (mp > g_max_param_abs) g_max_param_abs = mp;
}

static void run_opts(int dp, int arch, int recompute, float clip);

static void run(int dp, int arch) { run_opts(dp, arch, 0, 1.0f); }

static void run_opts(int dp, int arch, int recompute, float clip)
{
    llmt_model_config_init(&cfg, sizeof cfg);
    cfg.arch = arch;
    cfg.vocab_size = V;
    cfg.max_seq_len = T;
    cfg.layers = 3;
    cfg.width = 32;
    cfg.heads = 4;
    if (arch == LLMT_ARCH_LLAMA) cfg.kv_heads = 2;
    cfg.seed = 7;
    llmt_trainer_opts_init(&topts, sizeof topts);
    topts.seq_len = T;
    topts.schedule = LLMT_LR_CONSTANT;
    topts.lr = 1e-3f;
    topts.grad_clip = clip;
    topts.recompute = recompute;
    topts.threads = 1;
    make_data(dp);
    /* the reference: one rank, micro x (accum*dp) */
    topts.micro_batch = MICRO;
    topts.grad_accum = ACCUM * dp;
    llmt_model *m = new_model();
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt_trainer_create(m, &topts, &tr), LLMT_OK);
    float ref_loss[STEPS];
    size_t per = (size_t)dp * ACCUM * MICRO * T;
    for (int k = 0; k < STEPS; k++) {
        llmt_batch b = {sizeof b, g_in + k * per, g_tg + k * per,
                        dp * ACCUM * MICRO, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        CHECK_STATUS(llmt_trainer_step(tr, &b, &met), LLMT_OK);
        ref_loss[k] = met.loss;
        if (clip < 0.5f) CHECK(met.grad_norm > clip); /* the clip acts */
    }
    CHECK(ref_loss[STEPS - 1] < ref_loss[0]); /* it learns */
    int32_t np;
    int64_t numel;
    llmt_model_param_count(m, &np, &numel);
    float *ref = malloc((size_t)numel * sizeof(float));
    flatten(m, ref);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    /* the same, split over dp ranks */
    topts.grad_accum = ACCUM;
    for (int zero = 0; zero <= 3; zero++) compare(dp, zero, 1, ref_loss, ref, numel);
    if (dp == 2) compare(dp, 1, 0, ref_loss, ref, numel);
    free(ref);
}

int main(void)
{
    run(2, LLMT_ARCH_GPT2);
    run(4, LLMT_ARCH_GPT2);
    run(2, LLMT_ARCH_LLAMA);
    /* layers recomputed in the backward (ZeRO-3 gathers them once more),
     * and a clip small enough to act on every step (the global norm of the
     * sharded gradients must be right) */
    run_opts(2, LLMT_ARCH_GPT2, 1, 0.05f);
    fprintf(stderr, "overall: max loss rel diff %.3g, max param abs diff %.3g\n",
            g_max_loss_rel, g_max_param_abs);
    free(g_in);
    free(g_tg);
    return check_exit("test_dp");
}
