/* Data parallelism equivalence: dp = 2 and 4 ranks (threads, in-process
 * communicator) with ZeRO 0/1/2/3 train to the same losses and the same
 * final parameters as one rank on the same global batch (micro x accum x
 * dp sequences). The reduction order differs (the ranks' partial gradients
 * are summed after each rank's own sum), so the match is to a tolerance:
 * losses to 2e-6 relative, parameters to 2e-5 absolute after STEPS AdamW
 * steps (AdamW's update of a gradient near zero amplifies rounding). */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "check.h"
#include "ckpt_util.h"
#include "llmtrain.h"
#include "model_params.h"

#include "../train/tp_fixture.h"

#define STEPS 4
#define MICRO 2
#define ACCUM 2
#define T 16
#define V 64

static llmt_model_config cfg;
static llmt_trainer_opts topts;

/* dp.c cuts the flat parameters into units: the embeddings, each layer,
 * the final norm (and untied head). The largest unit's element count, and
 * whether dp divides every unit (then its chunks tile it and no staging is
 * needed). Parameters are in flat order; a layer's names carry its index
 * after the first dot (h.3.ln_1.weight, layers.3.ffn_norm.weight). */
static void unit_stats(llmt_model *m, int dp, int64_t *largest, int *tiles)
{
    int32_t np = 0;
    int64_t tot = 0, cur = 0;
    llmt_model_param_count(m, &np, &tot);
    int unit = -1, seen_layer = 0;
    *largest = 0;
    *tiles = 1;
    for (int32_t i = 0; i <= np; i++) {
        int u = -3; /* past the end: closes the last unit */
        int64_t n = 0;
        if (i < np) {
            const char *name = NULL;
            llmt_tensor v;
            llmt_model_param(m, i, &name, &v);
            llmt_tensor_numel(&v, &n);
            const char *dot = name ? strchr(name, '.') : NULL;
            if ((!strncmp(name, "h.", 2) || !strncmp(name, "layers.", 7)) && dot)
                u = atoi(dot + 1);
            else
                u = seen_layer ? -2 : -1; /* tail : head */
            seen_layer |= u >= 0;
        }
        if (i > 0 && u != unit) {
            if (cur > *largest) *largest = cur;
            if (cur % dp) *tiles = 0;
            cur = 0;
        }
        unit = u;
        cur += n;
    }
}

/* Bytes of communication staging a rank may hold (bucket: bucket_bytes):
 * none where dp divides every unit (reduce-scatters and gathers run in
 * place); else a padded unit's slots of chunk x dp elements: ZeRO-2 two
 * for its reduce-scatters plus the update's two pieces of at most
 * bucket_bytes, ZeRO-3 two reduce-scatter slots and one gather slot (its
 * update does not gather), ZeRO-1 the two pieces. */
static void check_staging(const llmt_trainer_memory *mr, int dp, int zero,
                          int64_t largest, int tiles, int64_t bucket)
{
    int64_t padded = (largest + dp - 1) / dp * dp * (int64_t)sizeof(float);
    int64_t cap = zero == 0 ? 0
                : zero == 1 ? 2 * bucket
                : zero == 2 ? 2 * padded + 2 * bucket
                            : 3 * padded;
    CHECK(mr->comm_buffers >= 0 && mr->comm_buffers <= cap);
    if (tiles) CHECK(mr->comm_buffers == 0);
    else if (zero >= 1) CHECK(mr->comm_buffers > 0); /* the padded path is taken */
    if (mr->comm_buffers > cap || (tiles && mr->comm_buffers))
        fprintf(stderr, "dp=%d zero=%d: staging %lld bytes, bound %lld (largest "
                "unit %lld elements, %s)\n", dp, zero, (long long)mr->comm_buffers,
                (long long)cap, (long long)largest, tiles ? "dp divides every unit"
                                                         : "padded units");
}

static int32_t *g_in, *g_tg; /* the global batch of each step */

#ifdef __linux__
static int64_t rl_resident(uintptr_t a, uintptr_t b, int64_t *pages);
#endif

static void make_data(int dp)
{
    size_t n = (size_t)STEPS * dp * ACCUM * MICRO * T;
    free(g_in);
    free(g_tg);
    /* a learnable rule plus ignored targets, unevenly spread */
    tp_fixture_stream(n, V, 12345, 11, 5, 3, &g_in, &g_tg);
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
    llmt_trainer_memory mem;
    llmt_status st;
    char err[1024];
} rank_arg;

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
    a->mem.struct_size = sizeof a->mem;
    if (tr) llmt_trainer_memory_usage(tr, &a->mem);
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
    test_params_flatten(m, a->params);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return NULL;
}

static double g_max_loss_rel, g_max_param_abs;
static int64_t g_largest_unit;
static int g_tiles;

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
        check_staging(&a[r].mem, dp, zero, g_largest_unit, g_tiles, 16 << 10);
    }
    for (int r = 0; r < dp; r++) {
        free(a[r].params);
        llmt_comm_destroy(c[r]);
    }
    fprintf(stderr, "dp=%d zero=%d overlap=%d: max loss rel diff %.3g, max "
            "param abs diff %.3g, staging %lld bytes\n", dp, zero, overlap, ml,
            mp, (long long)a[0].mem.comm_buffers);
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
    test_params_flatten(m, ref);
    unit_stats(m, dp, &g_largest_unit, &g_tiles);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    /* the same, split over dp ranks */
    topts.grad_accum = ACCUM;
    for (int zero = 0; zero <= 3; zero++) compare(dp, zero, 1, ref_loss, ref, numel);
    if (dp == 2) compare(dp, 1, 0, ref_loss, ref, numel);
    free(ref);
}

/* ---- ZeRO memory and sharded checkpoints -------------------------------
 * The same global batch of GDP * ACCUM * MICRO sequences per step, cut
 * over dp = 1, 2 or 4 ranks (grad_accum ACCUM * GDP / dp each). */
#define GDP 4

typedef struct phase {
    llmt_comm *c;          /* NULL: one rank without a communicator */
    int rank, dp, zero;
    int k0, k1;            /* global steps run: [k0, k1) */
    const char *load, *save; /* checkpoint roots (NULL: none) */
    int detach;            /* set_comm(NULL) at the end (collective) */
    float loss[STEPS];
    llmt_trainer_memory mem, mem_after;
    llmt_trainer_memory mem_loaded; /* right after the checkpoint read */
    int64_t loaded_resident;        /* of its whole pages then (mincore; -1: unknown) */
    llmt_status optim_state_st; /* of llmt_trainer_optim_state at the end */
    float *m_all;          /* shares written here at their flat position */
    float *m_full;         /* after detach: the full m (rank's own copy) */
    int64_t numel;
    llmt_status st;
    char err[1024];
} phase;

static llmt_status ck_open(phase *a, const char *root, llmt_ckpt **ck)
{
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.rank = a->rank;
    o.world_size = a->c ? a->dp : 1;
    o.keep_last = 0;
    return llmt_ckpt_create(NULL, root, &o, ck);
}

static llmt_status phase_ckpt(phase *a, llmt_trainer *tr, int save)
{
    llmt_ckpt *ck = NULL;
    llmt_status s = ck_open(a, save ? a->save : a->load, &ck);
    if (s == LLMT_OK && save) {
        s = llmt_ckpt_begin(ck, a->k1);
        if (s == LLMT_OK) s = llmt_trainer_ckpt_add(tr, ck);
        if (s == LLMT_OK) s = llmt_ckpt_save(ck, 0);
    } else if (s == LLMT_OK) {
        int64_t step = -1;
        s = llmt_ckpt_open_latest(ck, &step);
        if (s == LLMT_OK && step != a->k0) s = LLMT_ERR_INTERNAL;
        if (s == LLMT_OK) s = llmt_trainer_ckpt_read(tr, ck);
    }
    if (s != LLMT_OK && ck)
        snprintf(a->err, sizeof a->err, "ckpt: %s / %s", llmt_ckpt_last_error(ck),
                 llmt_trainer_last_error(tr));
    llmt_ckpt_destroy(ck);
    return s;
}

/* This rank's shares of m into the global flat array (ZeRO 0: rank 0). */
static void collect_m(phase *a, llmt_model *m, llmt_trainer *tr)
{
    int32_t np = 0;
    int64_t tot = 0, base = 0;
    llmt_model_param_count(m, &np, &tot);
    for (int32_t i = 0; i < np; i++) {
        llmt_tensor pv, sv;
        int64_t n = 0, off = 0;
        llmt_model_param(m, i, NULL, &pv);
        llmt_tensor_numel(&pv, &n);
        if (llmt_trainer_optim_shard(tr, i, 0, &sv, &off) == LLMT_OK &&
            (a->zero >= 1 || a->rank == 0))
            memcpy(a->m_all + base + off, sv.data, (size_t)sv.shape[0] * sizeof(float));
        base += n;
    }
}

static void *phase_main(void *p)
{
    phase *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_trainer_opts to = topts;
    to.grad_accum = ACCUM * GDP / a->dp;
    a->st = llmt_model_create(NULL, &cfg, &m);
    if (a->st == LLMT_OK) a->st = llmt_trainer_create(m, &to, &tr);
    llmt_dp_opts o;
    llmt_dp_opts_init(&o, sizeof o);
    o.zero_stage = a->zero;
    o.bucket_bytes = 16 << 10;
    if (a->st == LLMT_OK && a->c) a->st = llmt_trainer_set_comm(tr, a->c, &o);
    if (a->st == LLMT_OK && a->load) a->st = phase_ckpt(a, tr, 0);
    a->mem_loaded.struct_size = sizeof a->mem_loaded;
    if (a->st == LLMT_OK && a->load) llmt_trainer_memory_usage(tr, &a->mem_loaded);
    a->loaded_resident = -1;
#ifdef __linux__
    if (a->st == LLMT_OK && a->load) {
        llmt_tensor v0;
        int64_t pages = 0, res;
        llmt_model_param(m, 0, NULL, &v0);
        res = rl_resident((uintptr_t)v0.data,
                          (uintptr_t)v0.data + (uintptr_t)a->mem_loaded.params, &pages);
        if (res >= 0) a->loaded_resident = res * (int64_t)sysconf(_SC_PAGESIZE);
    }
#endif
    size_t seqs = (size_t)GDP * ACCUM * MICRO, mine = seqs / (size_t)a->dp;
    for (int k = a->k0; k < a->k1 && a->st == LLMT_OK; k++) {
        size_t off = ((size_t)k * seqs + (size_t)a->rank * mine) * T;
        llmt_batch b = {sizeof b, g_in + off, g_tg + off, (int32_t)mine, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        a->st = llmt_trainer_step(tr, &b, &met);
        a->loss[k] = met.loss;
    }
    if (a->st == LLMT_OK && a->save) a->st = phase_ckpt(a, tr, 1);
    a->mem.struct_size = sizeof a->mem;
    if (tr) llmt_trainer_memory_usage(tr, &a->mem);
    llmt_tensor v;
    if (tr) a->optim_state_st = llmt_trainer_optim_state(tr, 0, 0, &v);
    if (a->st == LLMT_OK && a->m_all) collect_m(a, m, tr);
    if (a->st == LLMT_OK && a->detach) {
        a->st = llmt_trainer_set_comm(tr, NULL, NULL);
        a->mem_after.struct_size = sizeof a->mem_after;
        llmt_trainer_memory_usage(tr, &a->mem_after);
        int32_t np = 0;
        llmt_model_param_count(m, &np, &a->numel);
        a->m_full = malloc((size_t)a->numel * sizeof(float));
        size_t at = 0;
        for (int32_t i = 0; a->st == LLMT_OK && i < np; i++) {
            a->st = llmt_trainer_optim_state(tr, i, 0, &v);
            int64_t n = 0;
            llmt_tensor_numel(&v, &n);
            if (a->st == LLMT_OK) memcpy(a->m_full + at, v.data, (size_t)n * sizeof(float));
            at += (size_t)n;
        }
    }
    if (a->st != LLMT_OK && !a->err[0])
        snprintf(a->err, sizeof a->err, "%s", tr ? llmt_trainer_last_error(tr) : "create");
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return NULL;
}

/* Run one phase on dp ranks (threads over an in-process communicator), or
 * on one rank without one (dp = 1, zero < 0). */
static void run_phase(phase *tmpl, int dp, int zero, phase *out)
{
    llmt_comm *c[GDP];
    pthread_t th[GDP];
    int comm = zero >= 0;
    if (comm) {
        llmt_comm_opts co;
        llmt_comm_opts_init(&co, sizeof co);
        co.timeout_ms = 60000;
        CHECK_STATUS(llmt_comm_create_inproc(NULL, dp, &co, c), LLMT_OK);
    }
    for (int r = 0; r < dp; r++) {
        out[r] = *tmpl;
        out[r].c = comm ? c[r] : NULL;
        out[r].rank = r;
        out[r].dp = dp;
        out[r].zero = comm ? zero : 0;
        if (comm) pthread_create(&th[r], NULL, phase_main, &out[r]);
        else phase_main(&out[r]);
    }
    for (int r = 0; comm && r < dp; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < dp; r++) {
        CHECK_STATUS(out[r].st, LLMT_OK);
        if (out[r].st != LLMT_OK)
            fprintf(stderr, "dp=%d zero=%d rank %d: %s\n", dp, zero, r, out[r].err);
        if (comm) llmt_comm_destroy(c[r]);
    }
}

static void setup_small(void)
{
    llmt_model_config_init(&cfg, sizeof cfg);
    cfg.vocab_size = V;
    cfg.max_seq_len = T;
    cfg.layers = 3;
    cfg.width = 32;
    cfg.heads = 4;
    cfg.seed = 7;
    llmt_trainer_opts_init(&topts, sizeof topts);
    topts.seq_len = T;
    topts.micro_batch = MICRO;
    topts.schedule = LLMT_LR_CONSTANT;
    topts.lr = 1e-3f;
    topts.threads = 1;
    make_data(GDP);
}

/* Optimizer memory per rank is the rank's share: dp ranks together hold
 * exactly one copy of m and v, each within the rounding of the shares
 * (at most dp - 1 elements per unit) of 1/dp; parameters, gradients and
 * activations stay as one rank's. The state the shares hold is the state:
 * detaching (collective) all-gathers a full m equal to the shares, and
 * the plain accessor refuses while sharded. */
/* Argument checks of the accessors added for sharding. */
static void test_args(void)
{
    setup_small();
    llmt_model *m = new_model();
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt_trainer_create(m, &topts, &tr), LLMT_OK);
    llmt_tensor v;
    int64_t off = -1;
    llmt_trainer_memory mem;
    CHECK_STATUS(llmt_trainer_optim_shard(NULL, 0, 0, &v, &off), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_trainer_optim_shard(tr, 0, 0, NULL, &off), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_trainer_optim_shard(tr, 0, 0, &v, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_trainer_optim_shard(tr, -1, 0, &v, &off), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_trainer_optim_shard(tr, 0, 2, &v, &off), LLMT_ERR_INVALID_ARGUMENT);
    /* no communicator: the whole parameter, flat */
    CHECK_STATUS(llmt_trainer_optim_shard(tr, 1, 1, &v, &off), LLMT_OK);
    llmt_tensor pv;
    int64_t n = 0;
    llmt_model_param(m, 1, NULL, &pv);
    llmt_tensor_numel(&pv, &n);
    CHECK(off == 0 && v.ndim == 1 && v.shape[0] == n);
    CHECK_STATUS(llmt_trainer_memory_usage(NULL, &mem), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_trainer_memory_usage(tr, NULL), LLMT_ERR_NULL_POINTER);
    mem.struct_size = 2;
    CHECK_STATUS(llmt_trainer_memory_usage(tr, &mem), LLMT_ERR_STRUCT_SIZE);
    /* an older, shorter struct: fields past struct_size are not written */
    llmt_trainer_memory old;
    memset(&old, 0x5a, sizeof old);
    old.struct_size = offsetof(llmt_trainer_memory, grads);
    CHECK_STATUS(llmt_trainer_memory_usage(tr, &old), LLMT_OK);
    CHECK(old.params > 0);
    int64_t untouched;
    memset(&untouched, 0x5a, sizeof untouched);
    CHECK(old.grads == untouched && old.total == untouched);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
}

static void test_memory(void)
{
    setup_small();
    phase t;
    memset(&t, 0, sizeof t);
    t.k0 = 0;
    t.k1 = 1;
    phase one[1];
    run_phase(&t, 1, -1, one);
    const llmt_trainer_memory *m1 = &one[0].mem;
    int64_t units = cfg.layers + 2;
    fprintf(stderr, "memory per rank (bytes): params grads optimizer activations "
            "comm_buffers total\n  dp=1 no comm: %lld %lld %lld %lld %lld %lld\n",
            (long long)m1->params, (long long)m1->grads, (long long)m1->optimizer,
            (long long)m1->activations, (long long)m1->comm_buffers, (long long)m1->total);
    CHECK(m1->optimizer == 2 * m1->params && m1->grads == m1->params);
    CHECK(m1->comm_buffers == 0);
    CHECK(m1->total == m1->params + m1->grads + m1->optimizer + m1->activations);
    for (int dp = 2; dp <= 4; dp += 2)
        for (int zero = 0; zero <= 3; zero++) {
            int64_t largest = 0;
            int tiles = 0;
            llmt_model *um = new_model();
            unit_stats(um, dp, &largest, &tiles);
            llmt_model_destroy(um);
            phase a[GDP];
            int64_t numel = m1->params / 4;
            float *all = calloc((size_t)numel, sizeof(float));
            for (int64_t i = 0; i < numel; i++) all[i] = NAN;
            t.m_all = all;
            t.detach = 1;
            run_phase(&t, dp, zero, a);
            t.m_all = NULL;
            int64_t sum = 0;
            for (int r = 0; r < dp; r++) {
                const llmt_trainer_memory *mr = &a[r].mem;
                sum += mr->optimizer;
                CHECK(mr->params == m1->params && mr->grads == m1->grads);
                CHECK(mr->activations == m1->activations); /* sized by micro x seq_len */
                if (zero == 0) {
                    CHECK(mr->optimizer == m1->optimizer);
                    CHECK_STATUS(a[r].optim_state_st, LLMT_OK);
                } else {
                    int64_t d = mr->optimizer - m1->optimizer / dp;
                    CHECK(d <= 0 ? -d <= 8 * units * dp : d <= 8 * units);
                    CHECK_STATUS(a[r].optim_state_st, LLMT_ERR_STATE);
                }
                /* dp 2 and 4 divide every unit of this model: everything
                 * in place, no staging at any stage (dp 3 in the
                 * equivalence runs takes the padded path) */
                CHECK(tiles);
                check_staging(mr, dp, zero, largest, tiles, 16 << 10);
                /* detached: one rank's memory again, m all-gathered */
                CHECK(a[r].mem_after.optimizer == m1->optimizer);
                CHECK(a[r].mem_after.comm_buffers == 0);
                CHECK(a[r].m_full &&
                      memcmp(a[r].m_full, all, (size_t)numel * sizeof(float)) == 0);
                free(a[r].m_full);
                if (r == 0 || r == dp - 1)
                    fprintf(stderr, "  dp=%d zero=%d rank %d: %lld %lld %lld %lld %lld %lld\n",
                            dp, zero, r, (long long)mr->params, (long long)mr->grads,
                            (long long)mr->optimizer, (long long)mr->activations,
                            (long long)mr->comm_buffers, (long long)mr->total);
            }
            CHECK(zero == 0 ? sum == dp * m1->optimizer : sum == m1->optimizer);
            int finite = 1;
            for (int64_t i = 0; i < numel; i++) finite &= isfinite(all[i]) != 0;
            CHECK(finite); /* the shares cover every element */
            free(all);
        }
}

static double max_rel(const float *a, const float *b, int k0, int k1)
{
    double m = 0;
    for (int k = k0; k < k1; k++) {
        double d = fabs((double)a[k] - b[k]) / fabs((double)b[k]);
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* Save after 2 of 4 steps under one layout, load under another, continue:
 * the losses of steps 3-4 equal the uninterrupted dp=4 ZeRO-1 run's to
 * 2e-6 relative (the gradient sums of another dp size add in another
 * order), bitwise when the layout is the same. */
static void resume_case(const char *root, int dp, int zero, const float *ref,
                        int bitwise, const char *what)
{
    phase t, a[GDP];
    memset(&t, 0, sizeof t);
    t.k0 = 2;
    t.k1 = STEPS;
    t.load = root;
    run_phase(&t, dp, zero, a);
    double d = max_rel(a[0].loss, ref, 2, STEPS);
    fprintf(stderr, "  %s: losses of steps 3-4 vs the uninterrupted run: max rel "
            "diff %.3g%s\n", what, d, bitwise ? " (must be 0)" : "");
    CHECK(bitwise ? d == 0 : d <= 2e-6);
    for (int r = 1; r < dp; r++) CHECK(memcmp(a[r].loss, a[0].loss, sizeof a[0].loss) == 0);
#ifdef __linux__
    /* ZeRO-3 reads the parameters whole, then gives the non-owned pages
     * back again (this model's layers are about 12 pages): fewer are
     * resident than the buffer has, and no more than reported */
    for (int r = 0; zero == 3 && r < dp; r++) {
        const llmt_trainer_memory *ml = &a[r].mem_loaded;
        CHECK(ml->params_resident < ml->params);
        if (a[r].loaded_resident >= 0) CHECK(a[r].loaded_resident <= ml->params_resident);
    }
#endif
}

static void save_case(const char *root, int dp, int zero)
{
    phase t, a[GDP];
    memset(&t, 0, sizeof t);
    t.k0 = 0;
    t.k1 = 2;
    t.save = root;
    run_phase(&t, dp, zero, a);
}

/* Each rank's part of a sharded checkpoint: about 1/dp of the bytes, no
 * tensor missing, one world of `world` files; a single rank's: one chunk
 * per tensor, as before sharding existed. */
static void check_layout(const char *root, int world)
{
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(NULL, root, NULL, &ck), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_open_latest(ck, NULL), LLMT_OK);
    int32_t w = 0;
    uint64_t bytes[GDP] = {0}, total = 0;
    llmt_ckpt_open_info(ck, &w, NULL, NULL);
    CHECK_EQ_INT(w, world);
    size_t nt = 0, multi = 0;
    llmt_ckpt_tensor_count(ck, &nt);
    CHECK_EQ_INT(nt, 3 * (4 + 12 * cfg.layers)); /* GPT-2: wte wpe ln_f.w/b, 12 per layer */
    for (size_t i = 0; i < nt; i++) {
        const char *name = NULL;
        size_t nc = 0;
        llmt_ckpt_tensor_name(ck, i, &name);
        llmt_ckpt_tensor_info(ck, name, NULL, NULL, NULL, &nc);
        if (world == 1) CHECK_EQ_INT(nc, 1);
        int per_rank[GDP] = {0};
        for (size_t c = 0; c < nc; c++) {
            int32_t r = -1;
            uint64_t b = 0;
            llmt_ckpt_chunk_info(ck, name, c, &r, NULL, NULL, &b);
            if (r >= 0 && r < GDP) {
                bytes[r] += b;
                per_rank[r]++;
            }
            total += b;
        }
        for (int r = 0; r < world; r++) multi += per_rank[r] > 1;
    }
    for (int r = 0; r < world; r++) {
        double f = (double)bytes[r] / (double)total;
        CHECK(fabs(f - 1.0 / world) < 0.01);
    }
    if (world > 1) CHECK(multi > 0); /* some shares cross rows: several boxes */
    fprintf(stderr, "  checkpoint of %d rank(s): %llu bytes of tensors, rank 0 %.4f of "
            "them, %zu (tensor, rank) pairs of several blocks\n", world,
            (unsigned long long)total, (double)bytes[0] / (double)total, multi);
    llmt_ckpt_destroy(ck);
}

static void test_sharded_ckpt(void)
{
    setup_small();
    /* uninterrupted runs: dp=4 ZeRO-1 and one rank */
    phase t, u[GDP], u1[1];
    memset(&t, 0, sizeof t);
    t.k0 = 0;
    t.k1 = STEPS;
    run_phase(&t, 4, 1, u);
    run_phase(&t, 1, -1, u1);
    CHECK(max_rel(u1[0].loss, u[0].loss, 0, STEPS) <= 2e-6);
    char *a = tmpdir_make(NULL, "dpz1"), *b = tmpdir_make(NULL, "dp1"),
         *c = tmpdir_make(NULL, "dpz3");
    fprintf(stderr, "sharded checkpoints:\n");
    { /* control: steps 3-4 from the initial state are far off */
        phase n[1];
        memset(&t, 0, sizeof t);
        t.k0 = 2;
        t.k1 = STEPS;
        run_phase(&t, 1, -1, n);
        CHECK(max_rel(n[0].loss, u[0].loss, 2, STEPS) > 1e-3);
    }
    save_case(a, 4, 1);
    check_layout(a, 4);
    resume_case(a, 4, 1, u[0].loss, 1, "dp=4 ZeRO-1 -> dp=4 ZeRO-1");
    resume_case(a, 2, 2, u[0].loss, 0, "dp=4 ZeRO-1 -> dp=2 ZeRO-2");
    resume_case(a, 1, -1, u[0].loss, 0, "dp=4 ZeRO-1 -> one rank, no comm");
    resume_case(a, 4, 3, u[0].loss, 0, "dp=4 ZeRO-1 -> dp=4 ZeRO-3");
    resume_case(a, 2, 0, u[0].loss, 0, "dp=4 ZeRO-1 -> dp=2 ZeRO-0");
    save_case(b, 1, -1);
    check_layout(b, 1);
    resume_case(b, 1, -1, u1[0].loss, 1, "one rank -> one rank (vs its own run)");
    resume_case(b, 4, 1, u[0].loss, 0, "one rank -> dp=4 ZeRO-1");
    /* ZeRO-3 saves its parameter shares as they are (no gather) */
    save_case(c, 2, 3);
    check_layout(c, 2);
    resume_case(c, 4, 1, u[0].loss, 0, "dp=2 ZeRO-3 -> dp=4 ZeRO-1");
    tmpdir_remove(a);
    tmpdir_remove(b);
    tmpdir_remove(c);
    free(a);
    free(b);
    free(c);
}

/* ---- ZeRO-3 gives the non-owned pages back -------------------------------
 * Between uses a ZeRO-3 rank needs only its share of each unit: dp.c hands
 * the whole pages of the rest back to the OS (madvise) and poisons the
 * partial pages at the edges. Checked with mincore(2) on the parameter
 * buffer of a model whose layers span many pages: after a step no
 * non-owned interior page of any unit is resident on any rank and
 * params_resident says so; after llmt_trainer_sync_params every page is
 * resident again and the parameters are bitwise those of the same run with
 * LLMT_DP_POISON=1 (NaN poisoning, nothing released: the behaviour before
 * pages were released) and of a run whose context has a user allocator,
 * whose memory is never released (only poisoned). */
#define RL_MAXU 8
enum { RL_RELEASE, RL_POISON, RL_HOOK };

typedef struct rl_rank {
    llmt_comm *c;
    int rank, dp, mode;
    float loss[2];
    float *params;
    int64_t numel;
    int nunits;
    int64_t ulo[RL_MAXU], un[RL_MAXU]; /* units, in elements */
    /* after the steps, over the non-owned interior pages of each unit */
    int64_t pages[RL_MAXU], resident[RL_MAXU], nan_vals, vals;
    int64_t buf_pages, buf_resident_after; /* whole buffer, after sync */
    int mincore_ok;
    llmt_trainer_memory mem, mem_sync;
    llmt_status st;
    char err[512];
} rl_rank;

static long rl_hook_allocs;
static pthread_mutex_t rl_mu = PTHREAD_MUTEX_INITIALIZER;

static void *rl_alloc(void *user, size_t size, size_t align)
{
    (void)user;
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : 1)) return NULL;
    pthread_mutex_lock(&rl_mu);
    rl_hook_allocs++;
    pthread_mutex_unlock(&rl_mu);
    return p;
}

static void rl_free(void *user, void *ptr, size_t size)
{
    (void)user;
    (void)size;
    free(ptr);
}

/* Units as dp.c cuts them (embeddings, each layer, final norm), as flat
 * element ranges, from the parameter names (see unit_stats). */
static int rl_units(llmt_model *m, const float *base, int64_t *lo, int64_t *n)
{
    int32_t np = 0;
    int64_t tot = 0;
    llmt_model_param_count(m, &np, &tot);
    int nu = 0, unit = -100, seen_layer = 0;
    for (int32_t i = 0; i < np; i++) {
        const char *name = NULL;
        llmt_tensor v;
        int64_t k = 0;
        llmt_model_param(m, i, &name, &v);
        llmt_tensor_numel(&v, &k);
        const char *dot = strchr(name, '.');
        int u = (!strncmp(name, "h.", 2) && dot) ? atoi(dot + 1)
                                                 : seen_layer ? -2 : -1;
        seen_layer |= u >= 0;
        int64_t off = (const float *)v.data - base;
        if (u != unit) {
            if (nu == RL_MAXU) return -1;
            lo[nu] = off;
            n[nu] = 0;
            nu++;
            unit = u;
        }
        n[nu - 1] = off + k - lo[nu - 1];
    }
    return nu;
}

#ifdef __linux__
/* Resident pages among the whole pages inside [a, b) (bytes); -1: mincore
 * is not available. */
static int64_t rl_resident(uintptr_t a, uintptr_t b, int64_t *pages)
{
    uintptr_t P = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t ia = (a + P - 1) / P * P, ib = b / P * P;
    *pages = ib > ia ? (int64_t)((ib - ia) / P) : 0;
    if (*pages == 0) return 0;
    unsigned char *vec = malloc((size_t)*pages);
    if (!vec) return -1;
    int64_t res = 0;
    if (mincore((void *)ia, ib - ia, vec) != 0) {
        free(vec);
        return -1;
    }
    for (int64_t i = 0; i < *pages; i++) res += vec[i] & 1;
    free(vec);
    return res;
}
#endif

static void *rl_main(void *p)
{
    rl_rank *a = p;
    llmt_context *ctx = NULL;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    a->st = LLMT_OK;
    if (a->mode == RL_HOOK) {
        static const llmt_allocator hook = {sizeof hook, NULL, rl_alloc, rl_free};
        llmt_context_opts co;
        llmt_context_opts_init(&co, sizeof co);
        co.allocator = &hook;
        a->st = llmt_context_create(&co, &ctx);
    }
    if (a->st == LLMT_OK) a->st = llmt_model_create(ctx, &cfg, &m);
    if (a->st == LLMT_OK) a->st = llmt_trainer_create(m, &topts, &tr);
    llmt_dp_opts o;
    llmt_dp_opts_init(&o, sizeof o);
    o.zero_stage = 3;
    o.bucket_bytes = 16 << 10;
    if (a->st == LLMT_OK) a->st = llmt_trainer_set_comm(tr, a->c, &o);
    size_t per = (size_t)ACCUM * MICRO * T;
    for (int k = 0; k < 2 && a->st == LLMT_OK; k++) {
        size_t off = ((size_t)k * a->dp + a->rank) * per;
        llmt_batch b = {sizeof b, g_in + off, g_tg + off, ACCUM * MICRO, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        a->st = llmt_trainer_step(tr, &b, &met);
        a->loss[k] = met.loss;
    }
    llmt_tensor v0;
    const float *base = NULL;
    if (a->st == LLMT_OK) {
        llmt_model_param(m, 0, NULL, &v0);
        base = v0.data;
        a->nunits = rl_units(m, base, a->ulo, a->un);
        if (a->nunits < 0) a->st = LLMT_ERR_INTERNAL;
        int32_t np;
        llmt_model_param_count(m, &np, &a->numel);
    }
    a->mem.struct_size = sizeof a->mem;
    if (a->st == LLMT_OK) a->st = llmt_trainer_memory_usage(tr, &a->mem);
#ifdef __linux__
    a->mincore_ok = a->st == LLMT_OK;
    for (int u = 0; a->st == LLMT_OK && u < a->nunits; u++) {
        /* the non-owned parts of unit u: before and after the rank's chunk */
        int64_t chunk = (a->un[u] + a->dp - 1) / a->dp;
        int64_t olo = a->ulo[u] + (int64_t)a->rank * chunk;
        int64_t ohi = olo + chunk;
        int64_t end = a->ulo[u] + a->un[u];
        if (olo > end) olo = end;
        if (ohi > end) ohi = end;
        int64_t r[2][2] = {{a->ulo[u], olo}, {ohi, end}};
        for (int k = 0; k < 2; k++) {
            if (r[k][0] >= r[k][1]) continue;
            int64_t pg = 0;
            uintptr_t ba = (uintptr_t)(base + r[k][0]), bb = (uintptr_t)(base + r[k][1]);
            int64_t res = rl_resident(ba, bb, &pg);
            if (res < 0) a->mincore_ok = 0;
            a->pages[u] += pg;
            a->resident[u] += res > 0 ? res : 0;
            /* the values there (read after mincore: reading maps pages);
             * poisoned ones must be NaN; released ones are not read */
            if (a->mode != RL_RELEASE)
                for (int64_t i = r[k][0]; i < r[k][1]; i++) {
                    a->vals++;
                    a->nan_vals += isnan(base[i]) != 0;
                }
        }
    }
#endif
    if (a->st == LLMT_OK) a->st = llmt_trainer_sync_params(tr);
    a->mem_sync.struct_size = sizeof a->mem_sync;
    if (a->st == LLMT_OK) a->st = llmt_trainer_memory_usage(tr, &a->mem_sync);
#ifdef __linux__
    if (a->st == LLMT_OK) {
        uintptr_t ba = (uintptr_t)base, bb = (uintptr_t)(base + a->numel);
        int64_t res = rl_resident(ba, bb, &a->buf_pages);
        if (res < 0) a->mincore_ok = 0;
        a->buf_resident_after = res;
    }
#endif
    if (a->st == LLMT_OK) {
        a->params = malloc((size_t)a->numel * sizeof(float));
        test_params_flatten(m, a->params);
    }
    if (a->st != LLMT_OK)
        snprintf(a->err, sizeof a->err, "%s", tr ? llmt_trainer_last_error(tr) : "create");
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    llmt_context_destroy(ctx);
    return NULL;
}

static void rl_run(int dp, int mode, rl_rank *a)
{
    llmt_comm *c[GDP];
    pthread_t th[GDP];
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.timeout_ms = 60000;
    CHECK_STATUS(llmt_comm_create_inproc(NULL, dp, &co, c), LLMT_OK);
    /* read by dp.c when the communicator is attached (no thread runs) */
    if (mode == RL_POISON) setenv("LLMT_DP_POISON", "1", 1);
    else unsetenv("LLMT_DP_POISON");
    for (int r = 0; r < dp; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].c = c[r];
        a[r].rank = r;
        a[r].dp = dp;
        a[r].mode = mode;
        pthread_create(&th[r], NULL, rl_main, &a[r]);
    }
    for (int r = 0; r < dp; r++) pthread_join(th[r], NULL);
    unsetenv("LLMT_DP_POISON");
    for (int r = 0; r < dp; r++) {
        CHECK_STATUS(a[r].st, LLMT_OK);
        if (a[r].st != LLMT_OK) fprintf(stderr, "dp=%d mode %d rank %d: %s\n", dp,
                                        mode, r, a[r].err);
        llmt_comm_destroy(c[r]);
    }
}

static void test_release(void)
{
    llmt_model_config_init(&cfg, sizeof cfg);
    cfg.vocab_size = V;
    cfg.max_seq_len = T;
    cfg.layers = 2;
    cfg.width = 128; /* a layer: 198,272 floats, about 194 pages of 4 KiB */
    cfg.heads = 4;
    cfg.seed = 11;
    llmt_trainer_opts_init(&topts, sizeof topts);
    topts.seq_len = T;
    topts.micro_batch = MICRO;
    topts.grad_accum = ACCUM;
    topts.schedule = LLMT_LR_CONSTANT;
    topts.lr = 1e-3f;
    topts.threads = 1;
    fprintf(stderr, "ZeRO-3 page release:\n");
    /* dp 2 and 4 tile every unit (in-place gathers), 3 pads them (the
     * gathers go through a slot and are copied into place) */
    for (int dp = 2; dp <= 4; dp++) {
        make_data(dp);
        rl_rank rel[GDP], poi[GDP], hk[GDP];
        rl_run(dp, RL_RELEASE, rel);
        rl_run(dp, RL_POISON, poi);
        long allocs0 = rl_hook_allocs;
        rl_run(dp, RL_HOOK, hk);
        CHECK(rl_hook_allocs > allocs0); /* the hook did allocate the model */
        int mc = 1;
        for (int r = 0; r < dp; r++)
            mc &= rel[r].mincore_ok && poi[r].mincore_ok && hk[r].mincore_ok;
        if (!mc) fprintf(stderr, "  mincore(2) unavailable: residency not checked\n");
        for (int r = 0; r < dp; r++) {
            rl_rank *x = &rel[r];
            if (x->st != LLMT_OK || poi[r].st != LLMT_OK || hk[r].st != LLMT_OK)
                continue;
            CHECK_EQ_INT(x->nunits, cfg.layers + 2);
            /* the numerics do not depend on what the gaps hold */
            CHECK(memcmp(x->loss, poi[r].loss, sizeof x->loss) == 0);
            CHECK(memcmp(x->loss, hk[r].loss, sizeof x->loss) == 0);
            CHECK(memcmp(x->params, poi[r].params, (size_t)x->numel * sizeof(float)) == 0);
            CHECK(memcmp(x->params, hk[r].params, (size_t)x->numel * sizeof(float)) == 0);
            CHECK(memcmp(x->params, rel[0].params, (size_t)x->numel * sizeof(float)) == 0);
            /* what is reported: the interior pages of every unit's
             * non-owned parts are given back (all units are released at
             * the end of a step), nothing after the sync; poisoning only
             * gives nothing back */
            int64_t pg = 0, res = 0, lpg = 0, lres = 0;
            long P = 4096;
#ifdef __linux__
            P = sysconf(_SC_PAGESIZE);
#endif
            for (int u = 0; u < x->nunits; u++) {
                pg += x->pages[u];
                res += x->resident[u];
                if (u >= 1 && u <= cfg.layers) {
                    lpg += x->pages[u];
                    lres += x->resident[u];
#ifdef __linux__
                    CHECK(x->pages[u] >= 40); /* a layer spans many pages */
#endif
                }
            }
            CHECK_EQ_INT(x->mem.params_resident, x->mem.params - pg * P);
            CHECK_EQ_INT(x->mem_sync.params_resident, x->mem_sync.params);
            CHECK_EQ_INT(poi[r].mem.params_resident, poi[r].mem.params);
            CHECK_EQ_INT(hk[r].mem.params_resident, hk[r].mem.params);
            /* poisoned, not released: every non-owned value is NaN */
            CHECK(poi[r].vals > 0 && poi[r].nan_vals == poi[r].vals);
            CHECK(hk[r].vals > 0 && hk[r].nan_vals == hk[r].vals);
            if (mc) {
                CHECK_EQ_INT(lres, 0);
                CHECK_EQ_INT(res, 0);
                CHECK_EQ_INT(x->buf_resident_after, x->buf_pages);
                int64_t hp = 0, hr = 0;
                for (int u = 0; u < x->nunits; u++) {
                    hp += hk[r].pages[u] + poi[r].pages[u];
                    hr += hk[r].resident[u] + poi[r].resident[u];
                }
                CHECK(hp > 0 && hr == hp); /* nothing was given back */
            }
            if (r == 0 || r == dp - 1)
                fprintf(stderr, "  dp=%d rank %d: layers' non-owned interior pages "
                        "%lld, resident after a step %lld%s; params %lld bytes, "
                        "resident %lld (%lld after sync)\n", dp, r,
                        (long long)lpg, (long long)lres, mc ? "" : " (not measured)",
                        (long long)x->mem.params, (long long)x->mem.params_resident,
                        (long long)x->mem_sync.params_resident);
        }
        for (int r = 0; r < dp; r++) {
            free(rel[r].params);
            free(poi[r].params);
            free(hk[r].params);
        }
    }
}

int main(void)
{
    test_release();
    test_args();
    test_memory();
    test_sharded_ckpt();
    run(2, LLMT_ARCH_GPT2);
    run(4, LLMT_ARCH_GPT2);
    /* 3 divides no unit of this model: every reduce-scatter and gather
     * goes through the padded staging slots */
    run(3, LLMT_ARCH_GPT2);
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
