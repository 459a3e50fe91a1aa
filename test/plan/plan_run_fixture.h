/* What the plan-against-run tests (test_plan_vs_run.c, _cp.c, _pp.c,
 * _fp8.c and _fp8_ep.c) share (and test_plan_pp.c the model config): the
 * model and trainer as llmt_job builds them from the spec, the plan's
 * groups, a group's per-step collective counters and the rank's state
 * and activation bytes as the planner counts them, so all compare the
 * plan with the same measurements; the harness around them (the
 * argument, the token stream, spec and plan, the ranks' statuses, the
 * per-group comparison); and one rank's life in the cp, pp, fp8 and
 * fp8-ep tests (its groups, model, attached groups, steps and end), so
 * each test holds only its layouts, its trainer and its checks. Ranks
 * run as threads on test/train/rank_fixture.h's runner. Header only. */
#ifndef LLMT_TEST_PLAN_RUN_FIXTURE_H
#define LLMT_TEST_PLAN_RUN_FIXTURE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../train/rank_fixture.h"
#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "train/device.h"
#include "train/trainer_state.h"

/* The model of the spec the tests write (lib/job/job.c's mapping):
 * Llama untied, GPT-2 tied; the vocabulary padded to `padded`, or to 64
 * where padded is 0; seed 7. Returns llmt_model_config_init's status. */
static inline llmt_status plan_run_model_config(llmt_model_config *c, int llama, int layers,
                                                int width, int heads, int kv, int ffn,
                                                int vocab, int padded, int seq)
{
    llmt_status st = llmt_model_config_init(c, sizeof *c);
    c->arch = llama ? LLMT_ARCH_LLAMA : LLMT_ARCH_GPT2;
    c->layers = layers;
    c->width = width;
    c->heads = heads;
    c->kv_heads = kv;
    c->ffn_hidden = ffn;
    c->vocab_size = vocab;
    c->padded_vocab_size = padded > 0 ? padded : (vocab + 63) / 64 * 64;
    c->max_seq_len = seq;
    c->tie_embeddings = !llama;
    c->seed = 7;
    return st;
}

/* The trainer options every test trains with. */
static inline void plan_run_trainer_opts(llmt_trainer_opts *o, int micro, int accum, int seq,
                                         int recompute)
{
    rank_fixture_opts_base(o, micro, accum, seq, 1e-3f);
    o->recompute = recompute;
}

/* The trainer: the public one (fp32 CPU), or the device engine on the
 * bf16 host emulation standing for CUDA. */
static inline llmt_status plan_run_trainer(llmt_model *m, int micro, int accum, int seq,
                                           int recompute, int emul, llmt_trainer **tr)
{
    llmt_trainer_opts o;
    plan_run_trainer_opts(&o, micro, accum, seq, recompute);
    return emul ? llmt__trainer_create_dev(m, &o, llmt__dev_emul(), tr)
                : llmt_trainer_create(m, &o, tr);
}

/* A group's counters since its last reset: calls, payload bytes, bus
 * bytes (zeros without a group). */
static inline void plan_run_read_stats(llmt_comm *c, double out[3])
{
    out[0] = out[1] = out[2] = 0;
    llmt_comm_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    if (!c || llmt_comm_get_stats(c, &st) != LLMT_OK)
        return;
    for (int k = 0; k < LLMT_COMM_STAT_SLOTS; k++)
        out[1] += (double)st.payload_bytes[k];
    out[0] = (double)st.total_calls;
    out[2] = st.total_bus_bytes;
}

/* The rank's state bytes (parameters, gradients, optimizer) and
 * activation bytes (all llmt_trainer_memory reports: the host's, the
 * trainer's generation window included, and the device's) as the planner
 * counts them. */
static inline llmt_status plan_run_memory(llmt_trainer *tr, double *state, double *acts)
{
    llmt_trainer_memory mem;
    memset(&mem, 0, sizeof mem);
    mem.struct_size = sizeof mem;
    llmt_status s = llmt_trainer_memory_usage(tr, &mem);
    if (mem.device_in_use > 0) { /* the engine's own buffers (the shards), less
                                    DP's staging of padded units (comm_buffers,
                                    not planned) */
        *state = (double)(mem.device_in_use - mem.device_activations - mem.comm_buffers);
    } else { /* tp 1 trains the model's host arrays in place */
        *state = (double)(mem.params + mem.grads + mem.optimizer);
    }
    *acts = (double)(mem.activations + mem.device_activations);
    return s;
}

/* The engine's bytes that are none of the planner's fields, per rank:
 * its step transfer blocks (lib/train/device.c, io_layout) less what it
 * counts as activations. up: A x N tokens and targets (int32), then with
 * fp8 the nf scales and nf inverse scales 4 floats apart, each from a
 * 64-word boundary; down: A x N losses, the sum of squares from a 64-word
 * boundary, the (A + 1) x nf amaxes 64 words after it. The sum, scales
 * and amaxes are activations; the tokens, targets, losses and the gaps
 * are not. With dp > 1 also dp.c's count and norm scalars (dp + 1 int64
 * and a float). N: a micro-batch's rows here (B x T / cp); nf: the fp8
 * tensors (0 without fp8). */
static inline double plan_run_io(double A, double N, double nf, int dp)
{
    double r64 = (double)(((int64_t)(2 * A * N) + 63) / 64 * 64),
           l64 = (double)(((int64_t)(A * N) + 63) / 64 * 64),
           f64 = (double)(((int64_t)nf + 63) / 64 * 64);
    double up = nf > 0 ? r64 + f64 + 4 * nf - 5 * nf : 2 * A * N;
    double down = l64 + 64 - 1; /* the amaxes after the gap are activations */
    return 4 * (up + down) + (dp > 1 ? (dp + 1) * 8 + 4 : 0);
}

/* Equal but for the rounding of a sum of doubles. */
static inline int plan_run_same(double a, double b)
{
    return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b));
}

/* model.moe as llmt_job maps it (lib/job/job.c) for the tests' MoE
 * layouts: 4 experts of ffn, top-2, one shared expert, dropless. */
static inline void plan_run_moe_config(llmt_model_config *c, int ffn)
{
    c->moe_experts = 4;
    c->moe_top_k = 2;
    c->moe_ffn = ffn;
    c->moe_shared_experts = 1;
    c->moe_dropless = 1;
}

/* One training step of rows sequences of seq tokens from in/tg + at,
 * with the groups' counters (TP, CP, DP; NULL where absent) reset before
 * it and read after into g; extra (the expert data parallel group, or
 * NULL) is counted with the DP group's, as the plan counts it. */
static inline llmt_status plan_run_step(llmt_trainer *tr, llmt_comm *const gc[3],
                                        llmt_comm *extra, const int32_t *in, const int32_t *tg,
                                        size_t at, int rows, int seq, double g[3][3])
{
    for (int j = 0; j < 3; j++)
        if (gc[j])
            llmt_comm_reset_stats(gc[j]);
    if (extra)
        llmt_comm_reset_stats(extra);
    llmt_batch b = {sizeof b, in + at, tg + at, rows, seq};
    llmt_step_metrics met;
    memset(&met, 0, sizeof met);
    met.struct_size = sizeof met;
    llmt_status st = llmt_trainer_step(tr, &b, &met);
    for (int j = 0; j < 3; j++)
        plan_run_read_stats(gc[j], g[j]);
    double x[3];
    plan_run_read_stats(extra, x);
    for (int j = 0; j < 3; j++)
        g[2][j] += x[j];
    return st;
}

/* main's argument: none (the fp32 CPU backend) or "emul" (the bf16 host
 * emulation); -1 after the usage line for anything else. */
static inline int plan_run_emul_arg(int argc, char **argv, const char *prog)
{
    int emul = argc > 1 && !strcmp(argv[1], "emul");
    if (argc > 1 && !emul) {
        fprintf(stderr, "usage: %s [emul]\n", prog);
        return -1;
    }
    return emul;
}

/* The token stream the layouts read: an LCG from seed, tokens below
 * vocab, each target a fixed function of its token (learnable). */
static inline void plan_run_tokens(int32_t *in, int32_t *tg, size_t n, uint64_t seed, int vocab)
{
    uint64_t x = seed;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        in[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
        tg[i] = (in[i] * 7 + 1) % vocab;
    }
}

/* The spec of js and its plan for world ranks, one check; on failure the
 * layout's name and the library's message go to stderr. */
static inline llmt_status plan_run_spec_plan(const char *name, const char *js, int world,
                                             llmt_spec **s, llmt_plan **p)
{
    llmt_status st = llmt_spec_parse_json(NULL, js, strlen(js), s);
    if (st == LLMT_OK)
        st = llmt_plan_create(NULL, *s, world, p);
    if (st != LLMT_OK)
        fprintf(stderr, "%s: spec/plan: %s\n", name, llmt_last_error());
    CHECK_STATUS(st, LLMT_OK);
    return st;
}

/* The plan's groups (dims[k] where deg[k] > 1, else NULL) of this rank;
 * on failure err says why. */
static inline llmt_status plan_run_groups_create(llmt_comm *world, const llmt_plan *plan, int n,
                                                 const llmt_plan_dim *dims, const int *deg,
                                                 llmt_comm **gc, char *err, size_t errn)
{
    llmt_status st = LLMT_OK;
    for (int k = 0; k < n && st == LLMT_OK; k++)
        if (deg[k] > 1)
            st = llmt_comm_create_plan_group(world, plan, dims[k], &gc[k]);
    if (st != LLMT_OK)
        snprintf(err, errn, "groups: %s", llmt_comm_last_error(world));
    return st;
}

/* A rank's error: the trainer's, else the model's. */
static inline void plan_run_rank_error(char *err, size_t n, llmt_trainer *tr, llmt_model *m)
{
    snprintf(err, n, "%s",
             tr  ? llmt_trainer_last_error(tr)
             : m ? llmt_model_last_error(m)
                 : "create");
}

/* One rank of the cp, pp, fp8 and fp8-ep tests (each defines its own
 * struct layout): what it runs, its status and error, and what it measured. */
#define PLAN_RUN_STEPS 2 /* the steps each of them runs */
struct layout;
typedef struct plan_run_arg {
    const struct layout *lo;
    llmt_comm *world;
    const llmt_plan *plan;
    int rank;
    const int32_t *in, *tg;
    llmt_status st;
    char err[512];
    double g[PLAN_RUN_STEPS][3][3]; /* per step: TP, CP, DP x calls, payload, bus */
    double state, acts;             /* bytes */
    llmt_cp_stats cs;               /* cp: the trainer's CP stats */
    int32_t cp_coord;               /* cp: the plan's CP coordinate */
    int32_t stage;                  /* pp: the rank's pipeline stage */
    int32_t layers;                 /* pp: the stage's (llmt_pp_stats) */
} plan_run_arg;

/* The ranks' results live in each test's rank argument: a status and an
 * error string at these offsets, ranks size bytes apart. */
#define PLAN_RUN_ST(a, size, r, off) \
    (*(const llmt_status *)((const char *)(a) + (r) * (size) + (off)))
#define PLAN_RUN_ERR(a, size, r, off) ((const char *)(a) + (r) * (size) + (off))

/* Every rank ran (one check); each one that did not is named. */
static inline int plan_run_ranks_ok(const char *name, const void *a, size_t size, int n,
                                    size_t st_off, size_t err_off)
{
    int ok = 1;
    for (int r = 0; r < n; r++)
        if (PLAN_RUN_ST(a, size, r, st_off) != LLMT_OK) {
            fprintf(stderr, "%s rank %d: %s\n", name, r, PLAN_RUN_ERR(a, size, r, err_off));
            ok = 0;
        }
    CHECK(ok);
    return ok;
}

/* The plan's numbers: TP, CP, DP x calls, payload, bus. */
static inline void plan_run_plan_groups(const llmt_plan_estimate *e, double pl[3][3])
{
    const double v[3][3] = {
        {e->engine_tp_calls, e->engine_tp_payload_bytes, e->engine_tp_bus_bytes},
        {e->engine_cp_calls, e->engine_cp_payload_bytes, e->engine_cp_bus_bytes},
        {e->engine_dp_calls, e->engine_dp_payload_bytes, e->engine_dp_bus_bytes}};
    memcpy(pl, v, sizeof v);
}

/* One rank's step against the plan, group by group (TP, CP, DP); each
 * group that differs goes to stderr (with its stage where stage >= 0).
 * Returns whether all three are equal. */
static inline int plan_run_groups_equal(const char *name, int rank, int stage, int step,
                                        const double m[3][3], const double pl[3][3])
{
    static const char *const gn[3] = {"TP", "CP", "DP"};
    int all = 1;
    for (int j = 0; j < 3; j++) {
        int good = plan_run_same(m[j][0], pl[j][0]) && plan_run_same(m[j][1], pl[j][1]) &&
                   plan_run_same(m[j][2], pl[j][2]);
        if (!good) {
            char at[32] = "";
            if (stage >= 0)
                snprintf(at, sizeof at, " (stage %d)", stage);
            fprintf(stderr,
                    "%s rank %d%s step %d %s: measured %.0f calls %.0f B payload %.1f B bus; "
                    "plan %.0f / %.0f / %.1f\n",
                    name, rank, at, step, gn[j], m[j][0], m[j][1], m[j][2], pl[j][0], pl[j][1],
                    pl[j][2]);
        }
        all &= good;
    }
    return all;
}

/* The plan's estimate into *e (one check). */
static inline void plan_run_get_estimate(const llmt_plan *p, llmt_plan_estimate *e)
{
    memset(e, 0, sizeof *e);
    e->struct_size = sizeof *e;
    CHECK_STATUS(llmt_plan_get_estimate(p, e), LLMT_OK);
}

/* The plan's estimate into *e (one check), its engine model used (one
 * more). */
static inline void plan_run_estimate(const llmt_plan *p, llmt_plan_estimate *e)
{
    plan_run_get_estimate(p, e);
    CHECK(e->engine_modeled == 1);
}

/* The plan's parameter + gradient + optimizer bytes. */
static inline double plan_run_state_of(const llmt_plan_estimate *e)
{
    return e->engine_mem_params + e->engine_mem_grads + e->engine_mem_optimizer;
}

/* A pipeline stage's step agreement over its data parallel replicas
 * (pp_agree.c) added to the plan's DP group pl[2]: a plan for CUDA leaves
 * it out (NCCL skips it), the emulation's in-process group makes it, one
 * int64 a rank. */
static inline void plan_run_agree_dp(double pl[3][3], int dp)
{
    pl[2][0] += 1;
    pl[2][1] += 8;
    pl[2][2] += (dp - 1) * 8;
}

/* The token stream of n tokens and targets (plan_run_tokens), malloc'd;
 * one check that both were. Returns whether they were. */
static inline int plan_run_stream(size_t n, uint64_t seed, int vocab, int32_t **in,
                                  int32_t **tg)
{
    *in = malloc(n * sizeof **in);
    *tg = malloc(n * sizeof **tg);
    CHECK(*in && *tg);
    if (!*in || !*tg)
        return 0;
    plan_run_tokens(*in, *tg, n, seed, vocab);
    return 1;
}

/* Runs fn on n ranks as threads (sharing a world group where comm), rank
 * r's plan_run_arg at off in args (size bytes apart, cap of them, all
 * zeroed first) set to the layout, the plan, r and the stream; whether
 * every rank ran (plan_run_ranks_ok's check). */
static inline int plan_run_ranks(const char *name, void *args, size_t size, int cap, size_t off,
                                 int n, int comm, const struct layout *lo, const llmt_plan *p,
                                 const int32_t *in, const int32_t *tg, void *(*fn)(void *))
{
    memset(args, 0, (size_t)cap * size);
    for (int r = 0; r < n && r < cap; r++)
        *(plan_run_arg *)((char *)args + (size_t)r * size + off) =
            (plan_run_arg){.lo = lo, .plan = p, .rank = r, .in = in, .tg = tg};
    rank_fixture_run(args, size, n, comm, off + offsetof(plan_run_arg, world), fn);
    return plan_run_ranks_ok(name, args, size, n, off + offsetof(plan_run_arg, st),
                             off + offsetof(plan_run_arg, err));
}

/* A rank of the cp, pp, fp8 and fp8-ep tests: its model, trainer, the
 * plan's groups (TP, CP, DP, PP, EP; NULL where the degree is 1) and its
 * coordinates. */
typedef struct plan_run_rank {
    llmt_model *m;
    llmt_trainer *tr;
    llmt_comm *gc[5];
    int32_t co[LLMT_PLAN_NDIMS];
} plan_run_rank;

/* The rank's coordinates (its stage into a->stage) and its groups of the
 * degrees deg (TP, CP, DP, PP, EP). Returns whether a->st is LLMT_OK. */
static inline int plan_run_rank_begin(plan_run_arg *a, const int deg[5], plan_run_rank *r)
{
    static const llmt_plan_dim dims[5] = {LLMT_DIM_TP, LLMT_DIM_CP, LLMT_DIM_DP, LLMT_DIM_PP,
                                          LLMT_DIM_EP};
    memset(r, 0, sizeof *r);
    a->st = llmt_plan_coords(a->plan, a->rank, r->co);
    a->stage = r->co[LLMT_DIM_PP];
    if (a->st == LLMT_OK)
        a->st = plan_run_groups_create(a->world, a->plan, 5, dims, deg, r->gc, a->err,
                                       sizeof a->err);
    return a->st == LLMT_OK;
}

/* The rank's model as llmt_job builds it from the spec (plan_run_model_
 * config, the vocabulary padded to 64; MoE layers of moe_ffn where
 * moe_ffn > 0, plan_run_moe_config), into r->m and a->st. */
static inline void plan_run_rank_model(plan_run_arg *a, plan_run_rank *r, int llama, int layers,
                                       int width, int heads, int kv, int ffn, int vocab,
                                       int seq, int moe_ffn)
{
    llmt_model_config c;
    plan_run_model_config(&c, llama, layers, width, heads, kv, ffn, vocab, 0, seq);
    if (moe_ffn > 0)
        plan_run_moe_config(&c, moe_ffn);
    a->st = llmt_model_create(NULL, &c, &r->m);
}

/* Attaches the rank's groups to its trainer (rank_fixture_attach) where
 * a->st is LLMT_OK. */
static inline void plan_run_rank_attach(plan_run_arg *a, const plan_run_rank *r, int sp,
                                        int cp_variant, int zero, const llmt_pp_opts *po)
{
    rank_fixture_groups g = {.tp = r->gc[0],
                             .cp = r->gc[1],
                             .pp = r->gc[3],
                             .dp = r->gc[2],
                             .ep = r->gc[4],
                             .sp = sp,
                             .cp_variant = cp_variant,
                             .zero = zero,
                             .pp_opts = po};
    if (a->st == LLMT_OK)
        a->st = rank_fixture_attach(r->tr, &g);
}

/* PLAN_RUN_STEPS steps, each on the rank's DP replica's rows (dp
 * replicas, micro x accum sequences of seq tokens a step), the groups'
 * counters into a->g; under ep the expert units' collectives run over the
 * expert data parallel group, counted with the DP group's (as the plan
 * counts them). Then the rank's state and activation bytes. */
static inline void plan_run_rank_train(plan_run_arg *a, const plan_run_rank *r, int dp,
                                       int micro, int accum, int seq)
{
    llmt_comm *xc = a->st == LLMT_OK && r->gc[4] ? llmt__trainer_expert_dp_comm(r->tr) : NULL;
    size_t per = (size_t)micro * accum * seq; /* tokens per step and replica */
    for (int k = 0; k < PLAN_RUN_STEPS && a->st == LLMT_OK; k++) {
        size_t at = ((size_t)k * dp + (size_t)r->co[LLMT_DIM_DP]) * per;
        a->st = plan_run_step(r->tr, r->gc, xc, a->in, a->tg, at, micro * accum, seq, a->g[k]);
    }
    if (a->st == LLMT_OK)
        a->st = plan_run_memory(r->tr, &a->state, &a->acts);
}

/* The rank's error where it failed; its trainer, model and groups
 * destroyed. Returns NULL (the thread's result). */
static inline void *plan_run_rank_end(plan_run_arg *a, plan_run_rank *r)
{
    if (a->st != LLMT_OK)
        plan_run_rank_error(a->err, sizeof a->err, r->tr, r->m);
    llmt_trainer_destroy(r->tr);
    llmt_model_destroy(r->m);
    for (int j = 0; j < 5; j++)
        llmt_comm_destroy(r->gc[j]);
    return NULL;
}

#endif
