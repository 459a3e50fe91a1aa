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
 * stays clear. Groups a MoE model cannot use on a device table are
 * refused by name, each checked attached before the engine is made and
 * after (the trainer then keeps training alone): expert parallelism
 * (lib/train/moe_dev_ep.c hands the exchange's buffers to the
 * communicator unstaged), data and pipeline parallelism (moe_net.c sums
 * the router's tallies as host arrays over those groups, which are NCCL
 * on a GPU), and context parallelism (MoE has not run with it on a device
 * table); ep, dp, pp and cp 2 as two threads on one GPU. Last, a
 * checkpoint of the MoE trainer saved at step 5 and read into a fresh one:
 * steps 6-10 equal the uninterrupted run's bit for bit.
 *
 * `test_gpu_moe emul` (unit suite: moe-engine-emul, no GPU needed) runs the
 * same harness with the emulation in place of CUDA, its table copied with
 * host_memory = 0 so that moe_dev.c takes the device path (the routing
 * tables copied to the backend by h2d, as on CUDA): it must equal the
 * host-memory emulation bit for bit (losses, evaluation, tallies, every
 * parameter); the refusals are checked on it too (the MoE one on a copy
 * marked unverified_moe with a test string). */
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
#include "train/device.h"

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
static atomic_size_t g_h2d_dev, g_h2d_em;

static llmt_status h2d_dev(llmt__dev *d, void *dst, const void *src, size_t n)
{
    atomic_fetch_add(&g_h2d_dev, n);
    return g_inner->h2d(d, dst, src, n);
}

static llmt_status h2d_em(llmt__dev *d, void *dst, const void *src, size_t n)
{
    atomic_fetch_add(&g_h2d_em, n);
    return llmt__dev_emul()->h2d(d, dst, src, n);
}

static void cfg(llmt_model_config *c)
{
    moe_fixture_llama(c, V, T, g_case->layers, 11);
    c->moe_experts = E;
    c->moe_top_k = K;
    c->moe_ffn = FE;
    c->moe_every = g_case->every;
    c->moe_shared_experts = g_case->shared;
    c->moe_capacity_factor = g_case->capacity > 0 ? g_case->capacity : 1.0f;
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
    a->st = open_dev(&g_dev, &m, &tr);
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

/* ep, dp, pp or cp 2 on g_dev (two ranks as threads, an in-process
 * group): refused naming the key, attached before or after the engine is
 * made (the expert exchange is not staged through host memory,
 * moe_dev_ep.c; the router's tallies are host arrays summed over the data
 * parallel and pipeline groups, moe_net.c, which are NCCL on a device;
 * MoE with a context parallel group never ran on a device table). */
static void check_groups_refused(void)
{
    static const char *key[4] = {"parallelism.ep 2", "parallelism.dp 2", "parallelism.pp 2",
                                 "parallelism.cp"};
    static const char *why[4] = {"moe_dev_ep.c", "expert tallies", "expert tallies",
                                 "gpu-moe-engine"};
    for (int kind = 0; kind < 4; kind++)
        for (int late = 0; late < 2; late++) {
            ep_arg a[2];
            memset(a, 0, sizeof a);
            a[0].late = a[1].late = late;
            a[0].kind = a[1].kind = kind;
            rank_fixture_run(a, sizeof a[0], 2, 1, offsetof(ep_arg, c), ep_rank);
            for (int r = 0; r < 2; r++) {
                printf("%s on %s (host_memory 0), attached %s the engine, rank %d: %s\n",
                       key[kind], g_dev.name, late ? "after" : "before", r, a[r].err);
                CHECK_STATUS(a[r].st, LLMT_ERR_UNSUPPORTED);
                CHECK(strstr(a[r].err, key[kind]) && strstr(a[r].err, why[kind]));
                if (late)
                    CHECK_STATUS(a[r].after, LLMT_OK);
            }
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
    }
    g_dev.h2d = h2d_dev;
    check_groups_refused();
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
        g_case = &g_cases[i];
        compare();
    }
    g_case = &g_cases[0];
    check_resume();
    return check_exit(name);
}
