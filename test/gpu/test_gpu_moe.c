/* Mixture-of-experts layers on the CUDA engine (gpu suite: gpu-moe-engine;
 * SKIPs without a GPU): the whole MoE layer through the op table
 * (lib/train/moe_dev.c: router, top-k, capacity, the packed experts, the
 * shared experts, combine, the aux and z losses, and their backward) in a
 * small Llama (width 32, 4 experts of 24, top-2, one shared expert, aux
 * 0.01 and z 0.001) trained for ten AdamW steps (two micro-batches of 2 x
 * 16 tokens each, clipping on), then evaluated, in three cases: every
 * layer MoE at capacity 1.0 (tokens dropped), every 2nd layer MoE
 * dropless (a dense layer between), and every layer MoE at capacity 1.25
 * with raw gates and two shared experts. Against
 *
 *   - the bf16 emulation's same run from the same weights (lib/exec/
 *     dev_emul.c): losses and the evaluation within 1e-2 relative, the
 *     bound of the other GPU engine tests (the GPU and the emulation
 *     knowingly differ: cuBLASLt's sum order, the tensor-core attention,
 *     expf; doc/gpu.md), the final fp32 masters within 2 x lr x steps
 *     absolute (AdamW moves an element about lr a step); the first step's
 *     routing (2 micro-batches x 32 tokens x top-2 x each MoE layer, from
 *     the same weights): kept tokens per expert and drops equal but for at
 *     most 2 choices sent to another expert, aux and z within 1e-2
 *     relative. Why not exactly: the router's logits are a bf16 GEMM
 *     whose fp32 sum order differs between cuBLASLt and the emulation, so
 *     a token whose two best experts are within that rounding may pick the
 *     other one (each such flip moves one count, and at a binding capacity
 *     at most one drop);
 *   - the fp32 CPU engine (lib/exec/cpu.c): losses within 0.03 + 2%, the
 *     bound test/train/test_device_trainer.c holds the dense model to.
 *
 * This test is what cleared the CUDA table's unverified_moe: it passed on
 * an H200 on 2026-11-26 (86 checks; losses within 3.9e-5 relative of the
 * emulation's, the first step's routing equal); it now checks the field
 * stays clear. Groups of a MoE model on a device table: ep 2 inside dp 2, dp
 * 2 (dp.c's staging), pp 2 and cp 2 (two threads, in-process groups) trained
 * ten steps against the same layout on the host-memory emulation, and one
 * MoE layer at ep 2 (its exchange staged through host memory,
 * lib/train/moe_dev_ep.c) against the emulation's ep 2; what stays refused
 * is checked by name, attached before the engine is made and after (the
 * trainer then keeps training alone): ep, pp and cp 2 on a copy marked
 * unverified_moe_groups, and a NCCL EP group (where a GPU can make a one-
 * rank one). In this cuda mode the ep 2 layer, ep 2 x dp 2, dp 2, pp 2 and
 * cp 2 are compared within 1e-2; they passed on an H100 on 2026-11-27
 * (losses within 3.9e-5 relative), which cleared the CUDA table's
 * unverified_moe_groups, and the test checks it (and unverified_pp and
 * unverified_dp) stays clear.
 * Last, a checkpoint of the MoE trainer saved at step 5 and read into a fresh one:
 * steps 6-10 equal the uninterrupted run's bit for bit.
 *
 * `test_gpu_moe emul` (unit suite: moe-engine-emul, no GPU needed) runs the
 * same harness with the emulation in place of CUDA, its table copied with
 * host_memory = 0 so that moe_dev.c takes the device path (the routing
 * tables copied to the backend by h2d, as on CUDA): it must equal the
 * host-memory emulation bit for bit (losses, evaluation, tallies, every
 * parameter), pp 2, cp 2 and the ep 2 layer bit for bit too, with more
 * bytes through d2h (the ep 2 layer: at least the four exchanges' send
 * buffers, which only the staging moves); the refusals are checked on it
 * too (the MoE one on a copy marked unverified_moe with a test string). */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "moe_fixture.h"
#include "rank_fixture.h"
#include "gpu_engine_probe.h"
#include "gpu_counted.h"
#include "train/device.h"
#include "train/moe_dev.h"

enum { B = 2, T = 16, V = 61, ACC = 2, STEPS = 10, E = 4, K = 2, FE = 24 };
#define LR 1e-3f

typedef struct mcase {
    const char *name;
    int layers;
    float capacity; /* 0: dropless */
    int shared, raw, every;
} mcase;

static const mcase *g_case;
static int32_t g_in[(STEPS + 1) * ACC * B * T], g_tg[(STEPS + 1) * ACC * B * T];
static llmt__dev_ops g_dev; /* CUDA (unverified_moe cleared) or the emulation, host_memory 0 */
static int g_fake;          /* emul mode */
/* the emulation's table, its h2d counted as g_dev's is */
static llmt__dev_ops g_em;
static const llmt__dev_ops *g_inner; /* the table g_dev's h2d forwards to */
static atomic_size_t g_h2d_dev, g_h2d_em, g_d2h_dev, g_d2h_em;

GPU_COUNTED_COPY(h2d_dev, h2d, g_h2d_dev, g_inner)
GPU_COUNTED_COPY(h2d_em, h2d, g_h2d_em, llmt__dev_emul())
GPU_COUNTED_COPY(d2h_dev, d2h, g_d2h_dev, g_inner)
GPU_COUNTED_COPY(d2h_em, d2h, g_d2h_em, llmt__dev_emul())

static void cfg(llmt_model_config *c)
{
    moe_fixture_llama(c, V, T, g_case->layers, 11);
    c->moe_experts = E;
    c->moe_top_k = K;
    c->moe_ffn = FE;
    c->moe_every = g_case->every;
    c->moe_shared_experts = g_case->shared;
    c->moe_capacity_factor = g_case->capacity; /* 0 with dropless: a factor is refused */
    c->moe_dropless = g_case->capacity <= 0;
    c->moe_raw_gates = g_case->raw;
    c->moe_aux_loss_coef = 0.01f;
    c->moe_z_loss_coef = 0.001f;
}

static void make_data(void)
{
    moe_fixture_data(g_in, g_tg, (int)(sizeof g_in / sizeof g_in[0]), V, 0x67707565u);
}

static llmt_batch batch(int k)
{
    size_t at = (size_t)k * ACC * B * T;
    llmt_batch b = {sizeof b, g_in + at, g_tg + at, ACC * B, T};
    return b;
}

/* A trainer on backend ops (micro B, accum ACC, deterministic). */
static llmt_status open_dev(const llmt__dev_ops *ops, llmt_model **m, llmt_trainer **tr)
{
    llmt_model_config c;
    cfg(&c);
    *m = NULL;
    *tr = NULL;
    llmt_status s = llmt_model_create(NULL, &c, m);
    if (s != LLMT_OK)
        return s;
    llmt_trainer_opts o;
    rank_fixture_opts(&o, B, ACC, T, LR);
    o.device = LLMT_DEVICE_CUDA; /* the op table stands for it */
    o.deterministic = 1;
    return llmt__trainer_create_dev(*m, &o, ops, tr);
}

/* The tallies of the last step, summed over the MoE layers. */
typedef struct tallies {
    int64_t counts[E], dropped;
    double aux, z;
} tallies;

typedef struct run_out {
    float loss[STEPS], eval;
    tallies first; /* step 1's routing */
    float *params;
    int64_t numel;
    llmt_status st;
    char err[512];
} run_out;

/* STEPS steps on ops, then evaluate on the first batch. */
static void run(const llmt__dev_ops *ops, run_out *o)
{
    memset(o, 0, sizeof *o);
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    o->st = open_dev(ops, &m, &tr);
    for (int k = 0; k < STEPS && o->st == LLMT_OK; k++) {
        llmt_batch b = batch(k);
        o->st = rank_fixture_step(tr, &b, &o->loss[k]);
        if (o->st == LLMT_OK && k == 0)
            o->st = llmt_trainer_moe_stats(tr, -1, o->first.counts, E, &o->first.dropped,
                                           &o->first.aux, &o->first.z);
    }
    if (o->st == LLMT_OK) {
        llmt_batch b = batch(STEPS);
        o->st = llmt_trainer_evaluate(tr, &b, &o->eval);
    }
    if (o->st == LLMT_OK)
        o->st = llmt_trainer_sync_params(tr);
    rank_fixture_close(o->st, o->err, sizeof o->err, tr, m,
                       o->st == LLMT_OK ? &o->params : NULL, &o->numel);
    if (o->st != LLMT_OK)
        fprintf(stderr, "%s on %s: %s\n", g_case->name, ops->name, o->err);
}

static double rel(double a, double b)
{
    return fabs(a - b) / fabs(b);
}

/* a's first-step routing against ref's: counts and drops equal but for
 * `flips` choices sent elsewhere, aux and z within tol relative. */
static void check_routing(const tallies *a, const tallies *ref, int flips, double tol)
{
    int64_t moved = 0;
    for (int x = 0; x < E; x++)
        moved += llabs(a->counts[x] - ref->counts[x]);
    CHECK(moved <= 2 * flips);
    CHECK(llabs(a->dropped - ref->dropped) <= flips);
    CHECK(rel(a->aux, ref->aux) <= tol);
    CHECK(rel(a->z, ref->z) <= tol);
    printf(
        "  step 1 routing: kept %lld %lld %lld %lld (emulation %lld %lld %lld %lld), dropped "
        "%lld (%lld), aux %.6f (%.6f), z %.6f (%.6f)\n",
        (long long)a->counts[0], (long long)a->counts[1], (long long)a->counts[2],
        (long long)a->counts[3], (long long)ref->counts[0], (long long)ref->counts[1],
        (long long)ref->counts[2], (long long)ref->counts[3], (long long)a->dropped,
        (long long)ref->dropped, a->aux, ref->aux, a->z, ref->z);
}

static void compare(void)
{
    run_out dv, em, f32;
    atomic_store(&g_h2d_dev, 0);
    atomic_store(&g_h2d_em, 0);
    run(&g_dev, &dv);
    run(&g_em, &em);
    run(llmt__dev_cpu(), &f32);
    CHECK_STATUS(dv.st, LLMT_OK);
    CHECK_STATUS(em.st, LLMT_OK);
    CHECK_STATUS(f32.st, LLMT_OK);
    if (dv.st != LLMT_OK || em.st != LLMT_OK || f32.st != LLMT_OK)
        goto done;
    double tol = g_fake ? 0.0 : 1e-2, vs_em = 0, vs_f32 = 0, pa = 0;
    for (int k = 0; k < STEPS; k++) {
        vs_em = fmax(vs_em, rel(dv.loss[k], em.loss[k]));
        vs_f32 = fmax(vs_f32, fabs((double)dv.loss[k] - f32.loss[k]));
        CHECK_CLOSE(dv.loss[k], f32.loss[k], 0.02, 0.03);
    }
    CHECK(vs_em <= tol);
    CHECK(rel(dv.eval, em.eval) <= tol);
    CHECK_CLOSE(dv.eval, f32.eval, 0.02, 0.03);
    CHECK(dv.numel == em.numel && dv.numel == f32.numel);
    for (int64_t i = 0; dv.numel == em.numel && i < dv.numel; i++)
        pa = fmax(pa, fabs((double)dv.params[i] - em.params[i]));
    CHECK(pa <= (g_fake ? 0.0 : 2.0 * LR * STEPS));
    if (g_fake) { /* the same arithmetic on the same table: the same bits */
        CHECK(!memcmp(dv.loss, em.loss, sizeof dv.loss) && dv.eval == em.eval);
        CHECK(!memcmp(&dv.first, &em.first, sizeof dv.first));
        CHECK(dv.numel == em.numel &&
              !memcmp(dv.params, em.params, (size_t)dv.numel * sizeof(float)));
        /* and the device path ran: the routing tables went to the
         * backend by h2d, which the host-memory run reads in place */
        CHECK(atomic_load(&g_h2d_dev) > atomic_load(&g_h2d_em));
    }
    check_routing(&dv.first, &em.first, g_fake ? 0 : 2, tol);
    if (g_case->capacity > 0 && g_case->capacity < 1.1f)
        CHECK(em.first.dropped > 0); /* the capacity binds */
    if (g_case->capacity <= 0)
        CHECK(dv.first.dropped == 0 && em.first.dropped == 0);
    CHECK(dv.loss[STEPS - 1] < dv.loss[0]); /* training moved */
    printf("%s on %s: loss %.4f -> %.4f, eval %.5f (emulation %.5f, fp32 %.5f); losses vs "
           "emulation rel <= %.2e (bound %.0e), vs fp32 |diff| <= %.2e (bound 0.03 + 2%%); "
           "masters vs emulation |diff| <= %.2e; h2d bytes %zu (emulation %zu)\n",
           g_case->name, g_dev.name, (double)dv.loss[0], (double)dv.loss[STEPS - 1],
           (double)dv.eval, (double)em.eval, (double)f32.eval, vs_em, tol, vs_f32, pa,
           atomic_load(&g_h2d_dev), atomic_load(&g_h2d_em));
done:
    free(dv.params);
    free(em.params);
    free(f32.params);
}

/* A table marked unverified_moe refuses the MoE model, naming why, at
 * the first call that makes the engine. */
static void check_refused(const llmt__dev_ops *ops, const char *want)
{
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_status s = open_dev(ops, &m, &tr);
    float loss = 0;
    llmt_batch b = batch(0);
    if (s == LLMT_OK)
        s = rank_fixture_step(tr, &b, &loss);
    char err[512];
    rank_fixture_error(err, sizeof err, tr, m);
    printf("MoE on the %s table with unverified_moe: %s\n", ops->name, err);
    CHECK_STATUS(s, LLMT_ERR_UNSUPPORTED);
    CHECK(strstr(err, "model.moe") && strstr(err, want));
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
}

typedef struct ep_arg {
    llmt_comm *c;
    const llmt__dev_ops *ops;
    int late; /* attach ep after the engine is made */
    int kind; /* the group: 0 expert, 1 data, 2 pipeline, 3 context parallel */
    llmt_status st, after;
    char err[512];
} ep_arg;

static void *ep_rank(void *p)
{
    ep_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    float loss = 0;
    llmt_batch b = batch(0);
    a->after = LLMT_ERR_STATE;
    a->st = open_dev(a->ops, &m, &tr);
    if (a->st == LLMT_OK && a->late)
        a->st = rank_fixture_step(tr, &b, &loss); /* the engine made at ep 1 */
    if (a->st == LLMT_OK)
        a->st = a->kind == 0   ? llmt_trainer_set_ep_comm(tr, a->c)
                : a->kind == 1 ? llmt_trainer_set_comm(tr, a->c, NULL)
                : a->kind == 2 ? llmt_trainer_set_pp_comm(tr, a->c, NULL)
                               : llmt_trainer_set_cp_comm(tr, a->c, NULL);
    if (a->st == LLMT_OK)
        a->st = rank_fixture_step(tr, &b, &loss);
    rank_fixture_error(a->err, sizeof a->err, tr, m);
    if (a->late && tr) /* refused on a made engine: it trains on at ep 1 */
        a->after = rank_fixture_step(tr, &b, &loss);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return NULL;
}

/* Groups of kind (0 ep, 1 dp, 2 pp, 3 cp) 2 on ops (two ranks as threads,
 * an in-process group), attached before and after the engine is made:
 * refused naming key and why (after: the trainer trains on alone). */
static void check_kind_refused(const llmt__dev_ops *ops, int kind, const char *key,
                               const char *why)
{
    for (int late = 0; late < 2; late++) {
        ep_arg a[2];
        memset(a, 0, sizeof a);
        for (int r = 0; r < 2; r++) {
            a[r].ops = ops;
            a[r].late = late;
            a[r].kind = kind;
        }
        rank_fixture_run(a, sizeof a[0], 2, 1, offsetof(ep_arg, c), ep_rank);
        for (int r = 0; r < 2; r++) {
            printf("%s on %s (host_memory 0%s), attached %s the engine, rank %d: %s\n", key,
                   ops->name, ops->unverified_moe_groups ? ", marked" : "",
                   late ? "after" : "before", r, a[r].err);
            CHECK_STATUS(a[r].st, LLMT_ERR_UNSUPPORTED);
            CHECK(strstr(a[r].err, key) && strstr(a[r].err, why));
            if (late)
                CHECK_STATUS(a[r].after, LLMT_OK);
        }
    }
}

/* On a copy of g_dev marked unverified_moe_groups, ep, pp and cp are
 * refused with its reason. */
static void check_groups_refused(void)
{
    llmt__dev_ops marked = g_dev;
    marked.unverified_moe_groups = "MoE groups have not run on its hardware (test marker)";
    static const char *key[3] = {"parallelism.ep 2", "parallelism.pp 2", "parallelism.cp 2"};
    static const int kind[3] = {0, 2, 3};
    for (int i = 0; i < 3; i++)
        check_kind_refused(&marked, kind[i], key[i], "(test marker)");
}

/* A NCCL group as the expert exchange's (moe_dev_ep.c) is refused by
 * name: the exchange and its counts go through host memory. Needs a
 * build with NCCL and a GPU to make the one-rank group; else not checked. */
static void check_nccl_refused(void)
{
    llmt_comm *c = NULL;
    if (!gpu_nccl_one_rank(&c, 0))
        return;
    llmt__moe_shape sh = {E, K, 32, FE, 1.0f, 0, 0};
    llmt__dev *d = NULL;
    llmt__dev_opts dopt = {0, 1};
    char msg[256] = "";
    llmt_err e;
    memset(&e, 0, sizeof e);
    llmt__moe_dctx *x = NULL;
    CHECK_STATUS(g_dev.create(&dopt, &d, msg, sizeof msg), LLMT_OK);
    if (d)
        CHECK_STATUS(llmt__moe_dctx_new(&g_dev, d, &e, &sh, 0, 16, &x), LLMT_OK);
    if (x) {
        CHECK_STATUS(llmt__moe_dctx_set_ep(x, c), LLMT_ERR_UNSUPPORTED);
        CHECK(strstr(e.msg, "NCCL") && strstr(e.msg, "moe_dev_ep.c"));
        printf("expert exchange over NCCL: %s\n", e.msg);
    }
    llmt__moe_dctx_free(x);
    if (d)
        g_dev.destroy(d);
    llmt_comm_destroy(c);
}

/* ---- expert parallelism of one MoE layer through the op table
 * (moe_dev_ep.c), ep 2 as two threads: LN tokens a rank, width LC,
 * capacity 1.0 (drops), no shared experts. */
enum { LN = 32, LC = 32 };

typedef struct lep_arg {
    llmt_comm *c;
    const llmt__dev_ops *op;
    const llmt__dev_ops *raw; /* op's uncounted copies: the results read back */
    int rank;
    /* y, dx [LN, LC] and the gradients: router [E, LC], this rank's
     * experts' w1, w3 [E/2 FE, LC], w2 [E/2 LC, FE] (fp32 on the host) */
    float y[LN * LC], dx[LN * LC], g[E * LC + 3 * (E / 2) * FE * LC];
    llmt_status st;
    char err[512];
} lep_arg;

static float lrnd(uint64_t *s, float scale)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return scale * ((float)((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f);
}

/* n values of scale from seed into backend memory of op's storage type */
static void *lep_put(lep_arg *a, llmt__dev *d, uint64_t seed, size_t n, float scale)
{
    size_t es = a->op->store == LLMT_DTYPE_FP32 ? 4 : 2;
    unsigned char *h = malloc(n * es);
    void *p = NULL;
    if (h && a->op->alloc(d, &p, n * es) == LLMT_OK) {
        for (size_t i = 0; i < n; i++) {
            float v = lrnd(&seed, scale);
            if (es == 4)
                memcpy(h + 4 * i, &v, 4);
            else {
                llmt__bf16 b = llmt__f32_to_bf16(v);
                memcpy(h + 2 * i, &b, 2);
            }
        }
        if (a->op->h2d(d, p, h, n * es) != LLMT_OK) {
            a->op->free(d, p);
            p = NULL;
        }
    }
    free(h);
    return p;
}

static void lep_get(lep_arg *a, llmt__dev *d, const void *p, float *out, size_t n, int f32)
{
    size_t es = f32 || a->op->store == LLMT_DTYPE_FP32 ? 4 : 2;
    unsigned char *h = malloc(n * es);
    if (!h || a->raw->d2h(d, h, p, n * es) != LLMT_OK) {
        a->st = LLMT_ERR_INTERNAL;
        free(h);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (es == 4)
            memcpy(out + i, h + 4 * i, 4);
        else {
            llmt__bf16 b;
            memcpy(&b, h + 2 * i, 2);
            out[i] = llmt__bf16_to_f32(b);
        }
    }
    free(h);
}

static void *lep_rank(void *p)
{
    lep_arg *a = p;
    const llmt__dev_ops *op = a->op;
    llmt__moe_shape sh = {E, K, LC, FE, 1.0f, 0, 0};
    int El = E / 2;
    size_t nr = (size_t)E * LC, ne = (size_t)El * FE * LC, nx = (size_t)LN * LC;
    llmt__dev *d = NULL;
    llmt__dev_opts dopt = {0, 1};
    llmt_err e;
    memset(&e, 0, sizeof e);
    llmt__moe_dctx *x = NULL;
    llmt__moe_dlay *pl = NULL;
    llmt__moe_dep *q = NULL;
    llmt__moe *s = llmt__moe_new_rows(&sh, LN, 0);
    void *w[4] = {NULL}, *xin = NULL, *dy = NULL, *y = NULL, *dx = NULL, *g = NULL;
    a->st = op->create(&dopt, &d, a->err, sizeof a->err);
    if (a->st == LLMT_OK)
        a->st = llmt__moe_dctx_new(op, d, &e, &sh, 0, LN, &x);
    if (a->st == LLMT_OK)
        a->st = llmt__moe_dlay_new(x, &pl);
    if (a->st == LLMT_OK)
        a->st = llmt__moe_dctx_set_ep(x, a->c);
    if (a->st == LLMT_OK)
        a->st = llmt__moe_dep_new(x, &q);
    if (a->st == LLMT_OK) {
        /* the router whole, this rank's experts (rows rank El .. of the
         * full tensors: each from its own seed), its own tokens */
        uint64_t r = (uint64_t)a->rank;
        w[0] = lep_put(a, d, 11, nr, 0.5f);
        w[1] = lep_put(a, d, 21 + r, ne, 0.3f);
        w[2] = lep_put(a, d, 31 + r, ne, 0.3f);
        w[3] = lep_put(a, d, 41 + r, ne, 0.3f);
        xin = lep_put(a, d, 51 + r, nx, 1.0f);
        dy = lep_put(a, d, 61 + r, nx, 0.1f);
        y = lep_put(a, d, 71, nx, 0.0f);
        dx = lep_put(a, d, 71, nx, 0.0f);
        if (op->alloc(d, &g, (nr + 3 * ne) * sizeof(float)) != LLMT_OK ||
            op->memset0(d, g, (nr + 3 * ne) * sizeof(float)) != LLMT_OK)
            g = NULL;
        if (!s || !w[0] || !w[1] || !w[2] || !w[3] || !xin || !dy || !y || !dx || !g)
            a->st = LLMT_ERR_OUT_OF_MEMORY;
    }
    if (a->st == LLMT_OK) {
        float *gf = g;
        llmt__moe_dw pw = {w[0], w[1], w[2], w[3], NULL, NULL, NULL};
        llmt__moe_dw pg = {gf, gf + nr, gf + nr + ne, gf + nr + 2 * ne, NULL, NULL, NULL};
        a->st = llmt__moe_dev_ep_fwd(x, pl, q, s, a->c, &pw, xin, y, LN);
        if (a->st == LLMT_OK)
            a->st =
                llmt__moe_dev_ep_bwd(x, pl, q, s, a->c, &pw, &pg, xin, dy, dx, 0.01f, 0.001f);
        if (a->st == LLMT_OK && s->dropped == 0)
            a->st = LLMT_ERR_INTERNAL; /* the capacity binds: rows dropped */
    }
    if (a->st == LLMT_OK) {
        lep_get(a, d, y, a->y, nx, 0);
        lep_get(a, d, dx, a->dx, nx, 0);
        lep_get(a, d, g, a->g, nr + 3 * ne, 1);
    }
    if (a->st != LLMT_OK && !a->err[0])
        snprintf(a->err, sizeof a->err, "%.500s", e.msg[0] ? e.msg : llmt_status_string(a->st));
    void *b[] = {w[0], w[1], w[2], w[3], xin, dy, y, dx, g};
    for (size_t i = 0; d && i < sizeof b / sizeof b[0]; i++)
        if (b[i])
            op->free(d, b[i]);
    llmt__moe_dep_free(x, q);
    llmt__moe_dlay_free(x, pl);
    llmt__moe_dctx_free(x);
    llmt__moe_free(s);
    if (d)
        op->destroy(d);
    return NULL;
}

static double lep_diff(const float *a, const float *b, size_t n)
{
    double m = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)b[i]));
        double x = fabs((double)a[i] - b[i]);
        if (!(x <= d))
            d = x; /* NaN shows */
    }
    return m > 0 ? d / m : d;
}

/* ep 2 of one layer on g_dev (its exchange staged through host memory)
 * against the host-memory emulation's ep 2 (unstaged): y, dx and every
 * gradient of each rank bit for bit on the emulation (tol 0), within tol
 * of the largest magnitude on CUDA; on g_dev the staging's d2h moved at
 * least the four exchanges' send buffers of each rank. */
static void check_ep_layer(double tol)
{
    lep_arg *dv = calloc(2, sizeof *dv), *em = calloc(2, sizeof *em);
    if (!dv || !em) {
        CHECK(0);
        free(dv);
        free(em);
        return;
    }
    for (int r = 0; r < 2; r++) {
        dv[r].op = &g_dev;
        em[r].op = &g_em;
        dv[r].raw = g_inner;
        em[r].raw = llmt__dev_emul();
        dv[r].rank = em[r].rank = r;
    }
    atomic_store(&g_d2h_dev, 0);
    rank_fixture_run(dv, sizeof dv[0], 2, 1, offsetof(lep_arg, c), lep_rank);
    size_t staged = atomic_load(&g_d2h_dev);
    atomic_store(&g_d2h_em, 0);
    rank_fixture_run(em, sizeof em[0], 2, 1, offsetof(lep_arg, c), lep_rank);
    llmt__moe_shape sh = {E, K, LC, FE, 1.0f, 0, 0};
    size_t es = g_dev.store == LLMT_DTYPE_FP32 ? 4 : 2;
    size_t ex = 2 * 4 * (size_t)E * (size_t)llmt__moe_capacity(&sh, LN) * LC * es;
    double worst = 0;
    for (int r = 0; r < 2; r++) {
        if (dv[r].st != LLMT_OK || em[r].st != LLMT_OK)
            fprintf(stderr, "ep 2 layer, rank %d: %s | %s\n", r, dv[r].err, em[r].err);
        CHECK_STATUS(dv[r].st, LLMT_OK);
        CHECK_STATUS(em[r].st, LLMT_OK);
        worst = fmax(worst, lep_diff(dv[r].y, em[r].y, LN * LC));
        worst = fmax(worst, lep_diff(dv[r].dx, em[r].dx, LN * LC));
        worst = fmax(worst, lep_diff(dv[r].g, em[r].g, sizeof dv[r].g / sizeof(float)));
        if (g_fake)
            CHECK(!memcmp(dv[r].y, em[r].y, sizeof dv[r].y) &&
                  !memcmp(dv[r].dx, em[r].dx, sizeof dv[r].dx) &&
                  !memcmp(dv[r].g, em[r].g, sizeof dv[r].g));
    }
    CHECK(worst <= tol);
    /* the staging ran: the exchanges' bytes, and the routing's logits and
     * gate gradients (far less) */
    CHECK(staged >= ex && staged < 2 * ex);
    printf("ep 2 of one MoE layer on %s (host_memory 0, exchange staged) vs the host-memory "
           "emulation: y, dx, gradients |diff| <= %.2e of the largest (bound %.0e); d2h bytes "
           "%zu (the exchanges' %zu)\n",
           g_dev.name, worst, tol, staged, ex);
    free(dv);
    free(em);
}

/* ---- pipeline and context parallelism with MoE on g_dev */
typedef struct grp_arg {
    llmt_comm *c;
    const llmt__dev_ops *ops;
    int kind; /* 0 ep 2 inside dp 2, 1 dp, 2 pp, 3 cp */
    llmt_comm *ep;
    float loss[STEPS];
    float *params;
    int64_t numel;
    llmt_status st;
    char err[512];
} grp_arg;

static void *grp_rank(void *p)
{
    grp_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    a->st = open_dev(a->ops, &m, &tr);
    if (a->st == LLMT_OK)
        a->st = a->kind <= 1   ? llmt_trainer_set_comm(tr, a->c, NULL)
                : a->kind == 2 ? llmt_trainer_set_pp_comm(tr, a->c, NULL)
                               : llmt_trainer_set_cp_comm(tr, a->c, NULL);
    if (a->st == LLMT_OK && a->kind == 0) { /* the EP group: the same two ranks */
        int32_t r = 0;
        llmt_comm_rank(a->c, &r);
        a->st = llmt_comm_split(a->c, 0, r, &a->ep);
        if (a->st == LLMT_OK)
            a->st = llmt_trainer_set_ep_comm(tr, a->ep);
    }
    for (int k = 0; k < STEPS && a->st == LLMT_OK; k++) {
        llmt_batch b = batch(k);
        a->st = rank_fixture_step(tr, &b, &a->loss[k]);
    }
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr);
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m,
                       a->st == LLMT_OK ? &a->params : NULL, &a->numel);
    llmt_comm_destroy(a->ep);
    return NULL;
}

/* ep 2 inside dp 2, dp, pp or cp 2 (kind 0, 1, 2, 3) on g_dev against the same layout on the
 * host-memory emulation: each rank's losses and parameters bit for bit
 * on the emulation; on CUDA losses within tol relative, parameters within
 * 2 x lr x steps. g_dev's d2h bytes exceed the emulation's. */
static void check_group(int kind, double tol)
{
    const char *key = kind == 0   ? "ep 2 x dp 2"
                      : kind == 1 ? "dp 2"
                      : kind == 2 ? "pp 2"
                                  : "cp 2";
    grp_arg dv[2], em[2];
    memset(dv, 0, sizeof dv);
    memset(em, 0, sizeof em);
    for (int r = 0; r < 2; r++) {
        dv[r].ops = &g_dev;
        em[r].ops = &g_em;
        dv[r].kind = em[r].kind = kind;
    }
    atomic_store(&g_d2h_dev, 0);
    atomic_store(&g_d2h_em, 0);
    rank_fixture_run(dv, sizeof dv[0], 2, 1, offsetof(grp_arg, c), grp_rank);
    rank_fixture_run(em, sizeof em[0], 2, 1, offsetof(grp_arg, c), grp_rank);
    double lw = 0, pw = 0;
    for (int r = 0; r < 2; r++) {
        if (dv[r].st != LLMT_OK || em[r].st != LLMT_OK)
            fprintf(stderr, "%s, %s, rank %d: %s | %s\n", g_case->name, key, r, dv[r].err,
                    em[r].err);
        CHECK_STATUS(dv[r].st, LLMT_OK);
        CHECK_STATUS(em[r].st, LLMT_OK);
        if (dv[r].st != LLMT_OK || em[r].st != LLMT_OK)
            continue;
        for (int k = 0; k < STEPS; k++)
            lw = fmax(lw, rel(dv[r].loss[k], em[r].loss[k]));
        CHECK(dv[r].numel == em[r].numel);
        for (int64_t i = 0; dv[r].numel == em[r].numel && i < dv[r].numel; i++)
            pw = fmax(pw, fabs((double)dv[r].params[i] - em[r].params[i]));
        if (g_fake)
            CHECK(!memcmp(dv[r].loss, em[r].loss, sizeof dv[r].loss) &&
                  dv[r].numel == em[r].numel &&
                  !memcmp(dv[r].params, em[r].params, (size_t)dv[r].numel * sizeof(float)));
        CHECK(dv[r].loss[STEPS - 1] < dv[r].loss[0]);
    }
    CHECK(lw <= tol);
    CHECK(pw <= (g_fake ? 0.0 : 2.0 * LR * STEPS));
    CHECK(atomic_load(&g_d2h_dev) > atomic_load(&g_d2h_em));
    printf("%s, %s with MoE on %s (host_memory 0) vs the host-memory emulation: losses rel "
           "<= %.2e (bound %.0e), parameters |diff| <= %.2e; loss %.4f -> %.4f; d2h bytes %zu "
           "(emulation %zu)\n",
           g_case->name, key, g_dev.name, lw, tol, pw, (double)dv[0].loss[0],
           (double)dv[0].loss[STEPS - 1], atomic_load(&g_d2h_dev), atomic_load(&g_d2h_em));
    for (int r = 0; r < 2; r++) {
        free(dv[r].params);
        free(em[r].params);
    }
}

/* A checkpoint of a MoE trainer on g_dev (the experts, the router, the
 * moments and the step) read into a fresh one: the next steps equal the
 * uninterrupted run's bit for bit (deterministic mode). */
static void check_resume(void)
{
    enum { AT = STEPS / 2 };
    char dir[] = "/tmp/llmt-moe-ckpt-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    llmt_model *ma = NULL, *mb = NULL;
    llmt_trainer *ta = NULL, *tb = NULL;
    llmt_ckpt *ck = NULL;
    float la[STEPS], lb[STEPS];
    memset(lb, 0, sizeof lb);
    llmt_status s = open_dev(&g_dev, &ma, &ta);
    if (s == LLMT_OK)
        s = open_dev(&g_dev, &mb, &tb);
    llmt_ckpt_opts co;
    llmt_ckpt_opts_init(&co, sizeof co);
    if (s == LLMT_OK)
        s = llmt_ckpt_create(NULL, dir, &co, &ck);
    for (int k = 0; k < STEPS && s == LLMT_OK; k++) {
        if (k == AT) {
            s = llmt_ckpt_begin(ck, AT);
            if (s == LLMT_OK)
                s = llmt_trainer_ckpt_add(ta, ck);
            if (s == LLMT_OK)
                s = llmt_ckpt_save(ck, 0);
            if (s == LLMT_OK)
                s = llmt_ckpt_wait(ck, -1);
        }
        llmt_batch b = batch(k);
        if (s == LLMT_OK)
            s = rank_fixture_step(ta, &b, &la[k]);
    }
    int64_t step = -1;
    if (s == LLMT_OK)
        s = llmt_ckpt_open_latest(ck, &step);
    if (s == LLMT_OK)
        s = llmt_trainer_ckpt_read(tb, ck);
    for (int k = AT; k < STEPS && s == LLMT_OK; k++) {
        llmt_batch b = batch(k);
        s = rank_fixture_step(tb, &b, &lb[k]);
    }
    char err[512];
    rank_fixture_error(err, sizeof err, tb ? tb : ta, tb ? mb : ma);
    if (s != LLMT_OK)
        fprintf(stderr, "%s: checkpoint and resume on %s: %s\n", g_case->name, g_dev.name,
                ck ? llmt_ckpt_last_error(ck) : err);
    CHECK_STATUS(s, LLMT_OK);
    CHECK(step == AT);
    CHECK(!memcmp(la + AT, lb + AT, sizeof(float) * (STEPS - AT)));
    printf("%s: saved at step %d on %s, read into a fresh trainer: steps %d-%d %s\n",
           g_case->name, AT, g_dev.name, AT + 1, STEPS,
           memcmp(la + AT, lb + AT, sizeof(float) * (STEPS - AT)) ? "DIFFER"
                                                                  : "equal bit for bit");
    llmt_ckpt_destroy(ck);
    llmt_trainer_destroy(ta);
    llmt_trainer_destroy(tb);
    llmt_model_destroy(ma);
    llmt_model_destroy(mb);
    rank_fixture_rmtree(dir);
}

static const mcase g_cases[] = {
    {"every layer MoE, capacity 1.0, 1 shared expert", 2, 1.0f, 1, 0, 1},
    {"every 2nd layer MoE, dropless, 1 shared expert", 3, 0.0f, 1, 0, 2},
    {"every layer MoE, capacity 1.25, raw gates, 2 shared experts", 2, 1.25f, 2, 1, 1},
};

int main(int argc, char **argv)
{
    const llmt__dev_ops *cu = llmt__dev_cuda();
    const char *name = "gpu-moe-engine";
    make_data();
    g_case = &g_cases[0];
    g_em = *llmt__dev_emul();
    g_em.h2d = h2d_em;
    g_em.d2h = d2h_em;
    if (argc > 1 && !strcmp(argv[1], "emul")) {
        name = "moe-engine-emul";
        g_fake = 1;
        g_inner = llmt__dev_emul();
        g_dev = *g_inner;
        g_dev.host_memory = 0; /* moe_dev.c's device path, as on CUDA */
        llmt__dev_ops marked = g_dev;
        marked.unverified_moe = "MoE layers have not run on its hardware (test marker)";
        check_refused(&marked, marked.unverified_moe);
    } else {
        if (!cu) {
            printf("SKIP: a build without CUDA\n");
            return CHECK_SKIP;
        }
        /* a dense model makes a context: is there a GPU? */
        llmt_model_config c;
        moe_fixture_llama(&c, V, T, 1, 11);
        if (!gpu_engine_probe(cu, &c, B, ACC, T, LR))
            return CHECK_SKIP;
        CHECK(cu->unverified_moe == NULL); /* cleared after this test passed on a GPU */
        g_inner = cu;
        g_dev = *cu;
        /* the groups' comparisons below are what cleared its
         * unverified_moe_groups (H100, 2026-11-27) */
        CHECK(cu->unverified_moe_groups == NULL && cu->unverified_pp == NULL &&
              cu->unverified_dp == NULL);
    }
    g_dev.h2d = h2d_dev;
    g_dev.d2h = d2h_dev;
    check_groups_refused();
    check_nccl_refused();
    double tol = g_fake ? 0.0 : 1e-2;
    check_ep_layer(tol);
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
        g_case = &g_cases[i];
        compare();
        check_group(0, tol);
        check_group(1, tol);
        check_group(2, tol);
        check_group(3, tol);
    }
    g_case = &g_cases[0];
    check_resume();
    return check_exit(name);
}
