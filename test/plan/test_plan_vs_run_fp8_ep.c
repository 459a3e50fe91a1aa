/* fp8 MoE experts under expert parallelism: a rank's fp8 scratch holds
 * its own E/ep experts, and the planner predicts it (lib/train/moe_dev.c
 * f8_room, lib/plan/engine.c fp8_bytes; doc/fp8.md, "Mixture of
 * experts"). Llama MoE (width 64, 4 heads, ffn 128, 2 layers, 16 tokens,
 * micro-batches of 2, 2 per step; every layer E experts of 32, top-2,
 * one shared, dropless) on the bf16 emulation (the backend standing for
 * CUDA), ranks as threads, dp = ep = k, precision.gemm fp8 and bf16:
 *
 *   - plan against run: each rank's state (device_in_use less the
 *     activations and comm buffers) and activations equal the plan's to
 *     the byte, fp8 and bf16, as test plan-vs-run-fp8 holds them;
 *   - what fp8 adds to a rank's device memory, measured by the backend's
 *     allocator (device_in_use of the fp8 run less the bf16 run's, less
 *     the step transfer blocks' scale slots), equals the plan's fp8
 *     activations less its bf16 ones;
 *   - against the same model at ep 1, independent of the planner: the
 *     measured fp8 bytes move by the experts' part alone, which for a
 *     rank multiplying El experts (E at ep 1, E/k at ep k) on R rows (N x
 *     top_k at ep 1; at ep k the owner's: E x capacity, or k x N x
 *     top_k if less) is (R + 15 El)
 *     rows of max(64, 32) elements at 2 x 2 + 3 bytes plus El x 32 x 64
 *     bytes of codes; with the codes sized for all E experts on every
 *     rank (before 2026-11-27) this fails at each ep > 1.
 *
 *
 * And a MoE context (lib/train/moe_dev.c) whose fp8 experts were set
 * before expert parallelism came, as a runtime re-layout does: its fp8
 * room, by the allocator and by its own count, is the experts' part above
 * at ep k, and at ep 1 again after ep went.
 *
 * Layouts: E 4 at ep 2, E 8 at ep 4, E 64 at ep 8 (each with its ep 1
 * run; E 64 also with capacity factors 1.25 and 12, where the owner's
 * rows are E x capacity and ep x N x top_k). The emulation only: fp8
 * GEMMs need a bf16 backend.
 *
 * The owner's bf16 rows under expert parallelism (lib/train/moe_dev_ep.c,
 * fp8 or not), by the allocator of a MoE context at 64 experts, ep 8,
 * dropless and with capacity factors 1.25 and 12: set_ep adds the
 * exchange's send and receive buffers, E x capacity rows of width 64
 * each (the all-to-all's fixed shape), and the owner's outputs and
 * backward scratch, yo, dyo, dxo of width 64 and the three of width 32,
 * on O rows; each layer's exchange state, xo of width 64 and h1, h3, act
 * of width 32 on O rows; O = min(E x capacity, ep x N x top_k): the rows
 * an owner can receive. With O = E x capacity (before 2026-11-27: 2,048
 * rows where 512 do, dropless) this fails at capacity 12 and dropless. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "plan/plan.h"
#include "plan_run_fixture.h"
#include "train/device.h"
#include "train/moe_dev.h"
#include "train/trainer_state.h"

#define STEPS PLAN_RUN_STEPS
#define MAXW 8
#define WIDTH 64
#define FFN 128
#define EFFN 32
#define LAYERS 2
#define SEQ 16
#define MICRO 2
#define ACCUM 2
#define VOCAB 250

typedef struct layout {
    const char *name;
    int experts, ep; /* dp = ep */
    int fp8;
    float cf; /* capacity factor; 0: dropless */
} layout;

/* "dropless": true, or the capacity factor. */
static void routing_json(float cf, char *buf, size_t n)
{
    if (cf > 0)
        snprintf(buf, n, "\"dropless\": false, \"capacity_factor\": %g", cf);
    else
        snprintf(buf, n, "\"dropless\": true");
}

static void spec_json(const layout *l, char *buf, size_t n)
{
    char rt[96];
    routing_json(l->cf, rt, sizeof rt);
    snprintf(buf, n,
             "{\"name\": \"fp8-ep\", \"model\": {\"arch\": \"llama\", \"layers\": %d, "
             "\"hidden\": %d, \"heads\": 4, \"kv_heads\": 2, \"ffn\": %d, \"vocab\": %d, "
             "\"seq_len\": %d, \"tied_embeddings\": false, \"moe\": {\"experts\": %d, "
             "\"top_k\": 2, \"expert_ffn\": %d, \"shared_experts\": 1, %s}}, "
             "\"parallelism\": {\"tp\": 1, \"cp\": 1, \"pp\": 1, \"dp\": %d, \"ep\": %d, "
             "\"zero\": 0}, "
             "\"precision\": {\"param\": \"bf16\", \"master\": \"fp32\", \"gemm\": \"%s\"}, "
             "\"batch\": {\"micro\": %d, \"grad_accum\": %d}, "
             "\"train\": {\"device\": \"cuda\"}, \"hardware\": {\"gpu\": \"h100\"}}",
             LAYERS, WIDTH, FFN, VOCAB, SEQ, l->experts, EFFN, rt, l->ep, l->ep,
             l->fp8 ? "fp8" : "bf16", MICRO, ACCUM);
}

typedef struct rank_arg {
    plan_run_arg a;
    double in_use; /* device_in_use: the backend allocator's bytes */
    int fp8_ran;
} rank_arg;

/* Both fp8 GEMM counts of the engine's last step above 0. */
static int fp8_ran(llmt_trainer *tr)
{
    const float *sc = NULL;
    int n = 0, f = 0, b = 0;
    llmt__devtrain *d = llmt__trainer_devtrain(tr);
    return d && llmt__devtrain_fp8_state(d, &sc, &n, &f, &b) && f > 0 && b > 0;
}

/* The layout's model: plan_run_model_config's Llama with its MoE layers
 * of l->experts experts, dropless or of capacity factor l->cf. */
static void model_config(const layout *l, llmt_model_config *c)
{
    plan_run_model_config(c, 1, LAYERS, WIDTH, 4, 2, FFN, VOCAB, 0, SEQ);
    plan_run_moe_config(c, EFFN);
    c->moe_experts = l->experts;
    c->moe_dropless = l->cf <= 0;
    if (l->cf > 0)
        c->moe_capacity_factor = l->cf;
}

/* The device engine on the emulation, fp8 GEMMs as the layout says. */
static llmt_status make_trainer(const layout *l, llmt_model *m, llmt_trainer **tr)
{
    llmt_trainer_opts o;
    plan_run_trainer_opts(&o, MICRO, ACCUM, SEQ, 0);
    o.fp8 = l->fp8;
    return llmt__trainer_create_dev(m, &o, llmt__dev_emul(), tr);
}

/* A rank of dp = ep (plan_run_rank_*), then its device memory in use and
 * whether its fp8 GEMMs ran. */
static void *rank_main(void *p)
{
    rank_arg *ra = p;
    plan_run_arg *a = &ra->a;
    const layout *l = a->lo;
    plan_run_rank r;
    const int deg[5] = {1, 1, l->ep, 1, l->ep}; /* TP, CP, DP, PP, EP */
    if (!plan_run_rank_begin(a, deg, &r))
        return plan_run_rank_end(a, &r);
    llmt_model_config c;
    model_config(l, &c);
    a->st = llmt_model_create(NULL, &c, &r.m);
    if (a->st == LLMT_OK)
        a->st = make_trainer(l, r.m, &r.tr);
    plan_run_rank_attach(a, &r, 0, LLMT_CP_RING, 0, NULL);
    plan_run_rank_train(a, &r, l->ep, MICRO, ACCUM, SEQ);
    if (a->st == LLMT_OK) {
        llmt_trainer_memory mem;
        memset(&mem, 0, sizeof mem);
        mem.struct_size = sizeof mem;
        a->st = llmt_trainer_memory_usage(r.tr, &mem);
        ra->in_use = (double)mem.device_in_use;
        ra->fp8_ran = fp8_ran(r.tr);
    }
    return plan_run_rank_end(a, &r);
}

/* One layout's ranks into r[0..ep) and its plan's estimate into *x (every
 * rank's: no pipeline). Returns whether all ranks ran, agree with the plan
 * to the byte (groups, state, activations) and, with fp8, ran fp8 GEMMs. */
static int run_layout(const layout *l, const int32_t *in, const int32_t *tg, rank_arg *r,
                      llmt_plan_estimate *x)
{
    char js[2048];
    spec_json(l, js, sizeof js);
    llmt_spec *s = NULL;
    llmt_plan *p = NULL;
    int W = l->ep;
    if (plan_run_spec_plan(l->name, js, W, &s, &p) != LLMT_OK || W > MAXW) {
        llmt_plan_destroy(p);
        llmt_spec_destroy(s);
        return 0;
    }
    plan_run_get_estimate(p, x);
    int ok = plan_run_ranks(l->name, r, sizeof *r, MAXW, offsetof(rank_arg, a), W, W > 1, l, p,
                            in, tg, rank_main);
    double nf = l->fp8 ? 15.0 * LAYERS : 0;
    double io = plan_run_io(ACCUM, MICRO * SEQ, nf, l->ep);
    double pl[3][3];
    plan_run_plan_groups(x, pl);
    double state = plan_run_state_of(x);
    for (int k = 0; ok && k < W; k++) {
        int same = 1;
        for (int j = 0; j < STEPS; j++)
            same &= plan_run_groups_equal(l->name, k, -1, j + 1,
                                          (const double(*)[3])r[k].a.g[j], pl);
        double ds = r[k].a.state - io - state, da = r[k].a.acts - x->engine_mem_activations;
        if (ds != 0 || da != 0)
            fprintf(stderr,
                    "%s rank %d: state %.0f B, plan %.0f + %.0f (%+.0f B); activations %.0f "
                    "B, plan %.0f (%+.0f B)\n",
                    l->name, k, r[k].a.state, state, io, ds, r[k].a.acts,
                    x->engine_mem_activations, da);
        ok &= same && ds == 0 && da == 0 && (!l->fp8 || r[k].fp8_ran);
    }
    llmt_plan_destroy(p);
    llmt_spec_destroy(s);
    return ok;
}

/* An expert's capacity in a call of the test's N = MICRO x SEQ tokens
 * (ceil(cf x N x top_k / E), at least 1, at most N; dropless: N). */
static double capacity(int E, float cf)
{
    double N = MICRO * SEQ;
    return cf > 0 ? fmin(N, fmax(1, ceil((double)cf * N * 2 / E))) : N;
}

/* The rows an expert parallel owner can receive: E blocks of the
 * capacity, or what the ep sources route (N x top_k each), whichever is
 * less. */
static double owner_rows(int E, int ep, float cf)
{
    return fmin(E * capacity(E, cf), ep * (MICRO * SEQ) * 2.0);
}

/* The experts' fp8 bytes of a rank of E experts at ep (dp = ep) from
 * what it multiplies (the file's opening comment): El experts' codes of
 * one projection, R + 15 El padded rows of max(width, expert ffn). */
static double experts_fp8(int E, int ep, float cf)
{
    double N = MICRO * SEQ, El = (double)E / ep, W = fmax(WIDTH, EFFN);
    double R = ep > 1 ? owner_rows(E, ep, cf) : N * 2;
    return (R + 15 * El) * W * (2 * 2 + 3) + El * EFFN * WIDTH;
}

/* A rank's measured fp8 bytes: its device memory in use less the bf16
 * run's, less the scale slots of the step transfer blocks (not the
 * planner's activations: plan_run_io). */
static double fp8_added(const rank_arg *f, const rank_arg *b, int ep)
{
    double io = plan_run_io(ACCUM, MICRO * SEQ, 15.0 * LAYERS, ep) -
                plan_run_io(ACCUM, MICRO * SEQ, 0, ep);
    return f->in_use - b->in_use - io;
}

/* E experts at ep against the same model at ep 1 (cf: the capacity
 * factor, 0 dropless). */
static void check_ep(int E, int ep, float cf, const int32_t *in, const int32_t *tg)
{
    char nm[4][80], how[32];
    layout l[4];
    snprintf(how, sizeof how, cf > 0 ? "capacity %g" : "dropless", cf);
    for (int i = 0; i < 4; i++) {
        int k = i < 2 ? 1 : ep, f8 = !(i & 1);
        snprintf(nm[i], sizeof nm[i], "moe E %d ep %d %s %s", E, k, how, f8 ? "fp8" : "bf16");
        l[i] = (layout){nm[i], E, k, f8, cf};
    }
    rank_arg r[4][MAXW];
    llmt_plan_estimate x[4];
    int ok = 1;
    for (int i = 0; i < 4; i++)
        ok &= run_layout(&l[i], in, tg, r[i], &x[i]);
    CHECK(ok);
    if (!ok)
        return;
    double one = fp8_added(&r[0][0], &r[1][0], 1);
    double plan = x[2].engine_mem_activations - x[3].engine_mem_activations;
    double want = one + experts_fp8(E, ep, cf) - experts_fp8(E, 1, cf);
    int planned = 1, local = 1;
    for (int k = 0; k < ep; k++) {
        double got = fp8_added(&r[2][k], &r[3][k], ep);
        if (got != plan || got != want)
            fprintf(stderr,
                    "moe E %d ep %d %s rank %d: fp8 adds %.0f B of device memory; plan "
                    "%.0f, expected %.0f (ep 1: %.0f, experts' part %.0f there, %.0f here)\n",
                    E, ep, how, k, got, plan, want, one, experts_fp8(E, 1, cf),
                    experts_fp8(E, ep, cf));
        planned &= got == plan;
        local &= got == want;
    }
    CHECK(planned);
    CHECK(local);
    printf("moe E %2d ep %d %s: device in use per rank %.0f B fp8 (%.0f B bf16): fp8 adds "
           "%.0f B (plan %.0f B; at ep 1 %.0f B); plan and run equal to the byte on every "
           "rank: %s; fp8 bytes for the rank's own %d experts: %s\n",
           E, ep, how, r[2][0].in_use, r[3][0].in_use, fp8_added(&r[2][0], &r[3][0], ep), plan,
           one, ok ? "yes" : "NO", E / ep, local ? "yes" : "NO");
}

/* The fp8 experts' bytes of a MoE context, by the backend's allocator:
 * what set_fp8(NULL) frees (made again after); the context's own count
 * of its scratch must move by as much. */
static double dctx_fp8(llmt__moe_dctx *x, const llmt__moe_fp8 *f)
{
    const llmt__dev_ops *op = llmt__moe_dctx_ops(x);
    llmt__dev *d = llmt__moe_dctx_dev(x);
    size_t u0 = 0, u1 = 0, pk = 0, sc0 = llmt__moe_dctx_scratch_bytes(x);
    op->mem_stats(d, &u0, &pk);
    CHECK_STATUS(llmt__moe_dctx_set_fp8(x, NULL), LLMT_OK);
    op->mem_stats(d, &u1, &pk);
    CHECK(sc0 - llmt__moe_dctx_scratch_bytes(x) == u0 - u1);
    CHECK_STATUS(llmt__moe_dctx_set_fp8(x, f), LLMT_OK);
    return (double)(u0 - u1);
}

/* A MoE context on a fresh emulated device and an in-process world of
 * ep communicators beside it, for the context tests below. */
typedef struct dctx_env {
    const llmt__dev_ops *op;
    llmt__dev *d;
    llmt_err err;
    llmt__moe_dctx *x;
    llmt_comm *c[MAXW];
} dctx_env;

/* The device, the context of shape sh on it and the world (one check
 * each; the context's only where the device came). Returns whether the
 * context and the world are there; where the context is not, its error
 * goes to stderr after who. */
static int dctx_env_open(dctx_env *e, const llmt__moe_shape *sh, int ep, const char *who)
{
    char msg[256];
    llmt__dev_opts dopt = {0, 1};
    memset(e, 0, sizeof *e);
    e->op = llmt__dev_emul();
    CHECK_STATUS(e->op->create(&dopt, &e->d, msg, sizeof msg), LLMT_OK);
    if (e->d)
        CHECK_STATUS(llmt__moe_dctx_new(e->op, e->d, &e->err, sh, 0, MICRO * SEQ, &e->x),
                     LLMT_OK);
    CHECK_STATUS(llmt_comm_create_inproc(NULL, ep, NULL, e->c), LLMT_OK);
    if (!e->x)
        fprintf(stderr, "%s: %s\n", who, e->err.msg);
    return e->x && e->c[0];
}

/* The context, the world and the device freed. */
static void dctx_env_close(dctx_env *e, int ep)
{
    llmt__moe_dctx_free(e->x);
    for (int r = 0; r < ep; r++)
        llmt_comm_destroy(e->c[r]);
    if (e->d)
        e->op->destroy(e->d);
}

/* A context with fp8 experts before expert parallelism comes (and goes):
 * its fp8 room follows the layout both ways, to the experts' part of
 * experts_fp8 (a runtime re-layout, llmt_trainer_set_ep_comm after the
 * engine's fp8 experts were set). */
static void relayout(int E, int ep)
{
    llmt__moe_shape sh = {E, 2, WIDTH, EFFN, 1.0f, 1, 0};
    llmt__moe_fp8 f;
    memset(&f, 0, sizeof f); /* nothing runs: the room only */
    dctx_env e;
    if (dctx_env_open(&e, &sh, ep, "relayout")) {
        llmt__moe_dctx *x = e.x;
        CHECK_STATUS(llmt__moe_dctx_set_fp8(x, &f), LLMT_OK);
        double one = dctx_fp8(x, &f);
        CHECK_STATUS(llmt__moe_dctx_set_ep(x, e.c[0]), LLMT_OK);
        double k = dctx_fp8(x, &f);
        CHECK_STATUS(llmt__moe_dctx_set_ep(x, NULL), LLMT_OK);
        double back = dctx_fp8(x, &f);
        double w1 = experts_fp8(E, 1, 0), wk = experts_fp8(E, ep, 0);
        CHECK(one == w1 && k == wk && back == w1);
        printf("moe E %2d: fp8 experts' room %.0f B at ep 1, %.0f B after ep %d came "
               "(expected %.0f), %.0f B after it went (expected %.0f)\n",
               E, one, k, ep, wk, back, w1);
    }
    dctx_env_close(&e, ep);
}

/* A bf16 MoE context's bytes by the backend's allocator, and the
 * context's own count of them (scratch, one layer's saved), into u. */
typedef struct dctx_bytes {
    size_t in_use, scratch, saved;
} dctx_bytes;

static dctx_bytes dctx_now(llmt__moe_dctx *x)
{
    const llmt__dev_ops *op = llmt__moe_dctx_ops(x);
    dctx_bytes b = {0, llmt__moe_dctx_scratch_bytes(x), llmt__moe_dlay_saved_bytes(x)};
    size_t pk = 0;
    op->mem_stats(llmt__moe_dctx_dev(x), &b.in_use, &pk);
    return b;
}

/* The owner's rows of a context of E experts at ep (bf16, capacity
 * factor cf, 0 dropless) against the file's opening comment: what set_ep
 * and one layer's exchange state (dep_new) allocate, by the allocator and
 * by the context's counts (which the planner follows). */
static void owner_bytes(int E, int ep, float cf)
{
    llmt__moe_shape sh = {E, 2, WIDTH, EFFN, cf > 0 ? cf : 1.0f, cf <= 0, 0};
    llmt__moe_dep *q = NULL;
    dctx_env e;
    if (dctx_env_open(&e, &sh, ep, "owner_bytes")) {
        llmt__moe_dctx *x = e.x;
        double es = e.op->store == LLMT_DTYPE_FP32 ? 4 : 2, B = capacity(E, cf);
        double O = owner_rows(E, ep, cf);
        double want_ep = es * (2 * E * B * WIDTH + O * (3 * WIDTH + 3 * EFFN));
        double want_dep = es * O * (WIDTH + 3 * EFFN);
        dctx_bytes b0 = dctx_now(x), b1, b2;
        CHECK_STATUS(llmt__moe_dctx_set_ep(x, e.c[0]), LLMT_OK);
        b1 = dctx_now(x);
        CHECK_STATUS(llmt__moe_dep_new(x, &q), LLMT_OK);
        b2 = dctx_now(x);
        double got_ep = (double)(b1.in_use - b0.in_use),
               got_dep = (double)(b2.in_use - b1.in_use);
        CHECK(got_ep == want_ep);
        CHECK(got_dep == want_dep);
        CHECK((double)(b1.scratch - b0.scratch) == got_ep);
        CHECK((double)(b1.saved - b0.saved) == got_dep);
        char how[32];
        snprintf(how, sizeof how, cf > 0 ? "capacity %g" : "dropless", cf);
        printf("moe E %d ep %d %s: owner rows %.0f (E x capacity %.0f, ep x N x top_k %d): "
               "set_ep adds %.0f B (expected %.0f, the exchange's %.0f of it), a layer's "
               "exchange state %.0f B (expected %.0f)\n",
               E, ep, how, O, E * B, ep * MICRO * SEQ * 2, got_ep, want_ep,
               es * 2 * E * B * WIDTH, got_dep, want_dep);
    }
    llmt__moe_dep_free(e.x, q);
    dctx_env_close(&e, ep);
}

int main(void)
{
    const char *name = "plan-vs-run-fp8-ep";
    size_t n = (size_t)STEPS * MAXW * MICRO * ACCUM * SEQ;
    int32_t *in = NULL, *tg = NULL;
    if (!plan_run_stream(n, 11, VOCAB, &in, &tg))
        return check_exit(name);
    static const int cases[][2] = {{4, 2}, {8, 4}, {64, 8}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_ep(cases[i][0], cases[i][1], 0, in, tg);
    static const float cfs[] = {0, 1.25f, 12};
    for (size_t i = 1; i < sizeof cfs / sizeof cfs[0]; i++)
        check_ep(64, 8, cfs[i], in, tg);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        relayout(cases[i][0], cases[i][1]);
    for (size_t i = 0; i < sizeof cfs / sizeof cfs[0]; i++)
        owner_bytes(64, 8, cfs[i]);
    free(in);
    free(tg);
    return check_exit(name);
}
