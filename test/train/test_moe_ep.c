/* Mixture of experts under data and expert parallelism (lib/train/moe_net.c,
 * moe_ep.c) against the single-rank engine on the same global batches:
 * ranks are threads on one in-process communicator, the data parallel
 * group is the world, the EP groups consecutive ranks (the plan's
 * LLMT_DIM_EP: dp index / ep), made by llmt_comm_split.
 *
 * Each global step is 8 sequences; the single rank takes them as 4
 * micro-batches of 2, a rank of W its 8/W in order (4/W micro-batches).
 * Cases (Llama, 2 layers, both MoE, 4 experts of 24, top-2):
 *   W 2: dp 2 ZeRO 0 and 1 (ep 1), ep 2 ZeRO 0 and 2;
 *   W 4: ep 2 (x 2 replicas of each expert) ZeRO 1 and 3, ep 4 ZeRO 0;
 * with capacity 1.0 (tokens dropped) and dropless. Six AdamW steps with
 * clipping. Checks, against the single rank:
 *   - losses within 1e-5 relative, every parameter tensor (the expert
 *     tensors included) within 1e-5 relative L2 on every rank;
 *   - the last step's expert counts and drops (llmt_trainer_moe_stats,
 *     summed over the group) equal, aux and z within 1e-5 relative;
 *   - the EP group's all-to-all bytes of a step equal the planner's
 *     comm_bytes_ep for the same layout (llmt_plan_get_estimate on the
 *     same model as a spec) and the closed form 4 x MoE layers x micro x
 *     (ep-1)/ep x experts x capacity x width x 4 bytes;
 *   - the expert gradients travel over the expert data parallel group
 *     (the dp/ep ranks holding the same experts; lib/train/dp.c), not the
 *     DP group: its bytes of a step equal the closed form of each ZeRO
 *     stage on this rank's E/ep experts (W 4 ep 2 adds ZeRO 0 and 2);
 *   - resharding: ep 2 x 2 replicas (ZeRO 1, and 0) trains 2 steps and
 *     saves, one rank resumes for 2 steps and saves, ep 4 (ZeRO 2, and 0)
 *     resumes for the last 2: losses and parameters those of the
 *     uninterrupted run (each checkpoint holds each expert block once,
 *     from its owners);
 *   - the engine holds only E/ep experts: 1/ep of each expert tensor, its
 *     EP rank's rows (llmt__trainer_local_read), and the trainer's
 *     parameter, gradient and optimizer bytes equal the plan's
 *     engine_mem_* on every layout; at dp 4 ZeRO 0 their experts' part is
 *     1/ep of ep 1's (ep 1, 2, 4; within 5%);
 *   - leaving ep mid-run (llmt_trainer_set_ep_comm NULL after 3 steps of
 *     ep 2 x 2, ZeRO 0 and 1; data parallelism made again without it):
 *     the other ranks' experts and their moments are gathered, and the
 *     last 3 steps under dp 4 alone continue the run;
 *   - refusals: set_ep_comm on a dense model, ep not dividing the experts,
 *     a step under ep without a data parallel group. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"
#include "moe_fixture.h"
#include "rank_fixture.h"
#include "train/trainer_state.h"

enum { B = 2, T = 16, V = 61, SEQS = 8, STEPS = 6, E = 4, K = 2, FE = 24, C = 32, L = 2 };
_Static_assert(C == 32, "the width moe_fixture_llama gives the model");

static llmt_context *ctx;
static int32_t g_in[STEPS * SEQS * T], g_tg[STEPS * SEQS * T];
static double g_plan_params, g_plan_active;
static int g_shared; /* shared experts of every MoE model (the last cases) */

static void cfg(llmt_model_config *c, int experts, int dropless)
{
    moe_fixture_llama(c, V, T, L, 11);
    c->moe_experts = experts;
    c->moe_top_k = experts ? K : 0;
    c->moe_ffn = experts ? FE : 0;
    c->moe_shared_experts = experts ? g_shared : 0;
    if (experts) {
        /* dropless has no capacity: a factor with it is refused */
        c->moe_capacity_factor = dropless ? 0.0f : 1.0f;
        c->moe_dropless = dropless;
    }
}

/* Mostly tok' = 5 tok + 1 mod V, one token in 8 random. */
static void make_data(void)
{
    uint64_t s = 0x5eedu;
    int32_t tok = 0;
    int n = STEPS * SEQS * T;
    for (int i = 0; i <= n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(s >> 33);
        tok = (r & 7) == 0 ? (int32_t)((r >> 3) % V) : (tok * 5 + 1) % V;
        if (i < n)
            g_in[i] = tok;
        if (i > 0)
            g_tg[i - 1] = tok;
    }
}

typedef struct run {
    llmt_comm *world; /* NULL: one rank */
    int rank, W, ep, zero, dropless;
    llmt_model_config c;
    float loss[STEPS];
    int64_t counts[E], dropped;
    double aux, z;
    double ep_bytes; /* all-to-all bus bytes of the EP group in the last step */
    double x_bytes;  /* bus bytes of the expert data parallel group, same step */
    /* calls, payload and bus bytes of the data parallel traffic of that
     * step: the DP group's and the expert data parallel group's */
    double dp[3];
    llmt_trainer_memory mem; /* after the last step */
    int x_size;              /* the expert data parallel group's ranks (0: none) */
    /* steps [k0, k1) (0, 0: all), after reading the checkpoint under load
     * (step k0), then saved under save (step k1) */
    int k0, k1;
    const char *load, *save;
    int leave_at; /* > 0: expert parallelism detached before that step */
    /* under ep, after the sync: elements of the expert tensors the engine
     * holds (llmt__trainer_local_read), of the model's, and how many of
     * them differ from this EP rank's rows of the synced tensors */
    int64_t held, all, differ;
    /* under ep, before the sync: elements of the model's other EP ranks'
     * expert rows, and how many of them still hold a value (neither a page
     * given back, 0, nor NaN) */
    int64_t others, stale;
    float *params;
    int64_t total;
    llmt_status st;
    char err[512];
} run;

/* Advances *i to the model's next expert tensor (its name holds
 * ".experts."), from -1 for the first; 0 after the last. */
static int next_expert(llmt_model *m, int32_t *i, llmt_tensor *v)
{
    int32_t np = 0;
    llmt_model_param_count(m, &np, NULL);
    while (++*i < np) {
        const char *name;
        memset(v, 0, sizeof *v);
        v->struct_size = sizeof *v;
        llmt_model_param(m, *i, &name, v);
        if (strstr(name, ".experts."))
            return 1;
    }
    return 0;
}

static void *rank_main(void *p)
{
    run *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *epc = NULL, *xc = NULL;
    int W = a->world ? a->W : 1, per = SEQS / W;
    int k0 = a->k0, k1 = a->k1 ? a->k1 : STEPS;
    a->st = llmt_model_create(ctx, &a->c, &m);
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = B;
    o.grad_accum = per / B;
    o.seq_len = T;
    o.lr = 3e-3f;
    o.warmup_steps = 1;
    o.total_steps = STEPS;
    o.threads = 1;
    o.grad_clip = 1.0f;
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_create(m, &o, &tr);
    if (a->st == LLMT_OK && a->world) {
        llmt_dp_opts d;
        llmt_dp_opts_init(&d, sizeof d);
        d.zero_stage = a->zero;
        a->st = llmt_trainer_set_comm(tr, a->world, &d);
        if (a->st == LLMT_OK && a->ep > 1)
            a->st = llmt_comm_split(a->world, a->rank / a->ep, a->rank, &epc);
        if (a->st == LLMT_OK && a->ep > 1)
            a->st = llmt_trainer_set_ep_comm(tr, epc);
        xc = llmt__trainer_expert_dp_comm(tr);
        if (xc)
            llmt_comm_size(xc, &a->x_size);
    }
    if (a->st == LLMT_OK && a->load)
        a->st = rank_fixture_ckpt(tr, a->load, a->rank, W, 0, k0);
    for (int k = k0; k < k1 && a->st == LLMT_OK; k++) {
        if (a->leave_at && k == a->leave_at) {
            a->st = llmt_trainer_set_ep_comm(tr, NULL);
            xc = llmt__trainer_expert_dp_comm(tr);
            a->x_size = 0;
            if (xc)
                llmt_comm_size(xc, &a->x_size);
            if (a->st != LLMT_OK)
                break;
        }
        size_t off = ((size_t)k * SEQS + (size_t)a->rank * per) * T;
        llmt_batch b = {sizeof b, g_in + off, g_tg + off, per, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        if (epc && k == k1 - 1)
            llmt_comm_reset_stats(epc);
        if (xc && k == k1 - 1)
            llmt_comm_reset_stats(xc);
        if (a->world && k == k1 - 1)
            llmt_comm_reset_stats(a->world);
        a->st = llmt_trainer_step(tr, &b, &met);
        a->loss[k] = met.loss;
    }
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_moe_stats(tr, -1, a->counts, E, &a->dropped, &a->aux, &a->z);
    if (a->st == LLMT_OK && epc) {
        llmt_comm_stats cs;
        memset(&cs, 0, sizeof cs);
        cs.struct_size = sizeof cs;
        llmt_comm_get_stats(epc, &cs);
        a->ep_bytes = cs.bus_bytes[LLMT_COMM_STAT_ALL_TO_ALL];
    }
    for (int g = 0; g < 2 && a->st == LLMT_OK; g++) {
        llmt_comm *gc = g ? xc : a->world;
        if (!gc)
            continue;
        llmt_comm_stats cs;
        memset(&cs, 0, sizeof cs);
        cs.struct_size = sizeof cs;
        llmt_comm_get_stats(gc, &cs);
        for (int op = 0; op < LLMT_COMM_STAT_SLOTS; op++) {
            a->dp[0] += (double)cs.calls[op];
            a->dp[1] += (double)cs.payload_bytes[op];
            a->dp[2] += cs.bus_bytes[op];
        }
        if (g)
            a->x_bytes = cs.bus_bytes[LLMT_COMM_STAT_ALL_REDUCE] +
                         cs.bus_bytes[LLMT_COMM_STAT_ALL_GATHER] +
                         cs.bus_bytes[LLMT_COMM_STAT_REDUCE_SCATTER];
    }
    a->mem.struct_size = sizeof a->mem;
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_memory_usage(tr, &a->mem);
    if (a->st == LLMT_OK && a->save)
        a->st = rank_fixture_ckpt(tr, a->save, a->rank, W, 1, k1);
    llmt_tensor v;
    for (int32_t i = -1;
         a->st == LLMT_OK && a->ep > 1 && !a->leave_at && next_expert(m, &i, &v);) {
        int64_t n = v.shape[0] * v.shape[1], per = n / a->ep, er = a->rank % a->ep;
        const float *x = v.data;
        for (int64_t j = 0; j < n; j++)
            if (j / per != er) {
                a->others++;
                a->stale += x[j] == x[j] && x[j] != 0;
            }
    }
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr);
    /* the engine holds only this EP rank's rows of each expert tensor:
     * block rank % ep of the whole (synced) tensor */
    for (int32_t i = -1;
         a->st == LLMT_OK && a->ep > 1 && !a->leave_at && next_expert(m, &i, &v);) {
        int64_t n = v.shape[0] * v.shape[1], per = n / a->ep, got = 0;
        float *mine = NULL;
        a->st = llmt__trainer_local_read(tr, i, &mine, &got);
        const float *want = (const float *)v.data + (a->rank % a->ep) * per;
        a->all += n;
        a->held += got;
        for (int64_t j = 0; mine && got == per && j < per; j++)
            a->differ += mine[j] != want[j];
        free(mine);
    }
    int32_t np = 0;
    if (a->st == LLMT_OK)
        a->st = llmt_model_param_count(m, &np, &a->total);
    if (a->st == LLMT_OK && (a->params = malloc((size_t)a->total * sizeof(float)))) {
        int64_t at = 0;
        for (int32_t i = 0; i < np; i++) {
            llmt_tensor v;
            memset(&v, 0, sizeof v);
            v.struct_size = sizeof v;
            llmt_model_param(m, i, NULL, &v);
            int64_t n = 1;
            for (int d = 0; d < v.ndim; d++)
                n *= v.shape[d];
            memcpy(a->params + at, v.data, (size_t)n * sizeof(float));
            at += n;
        }
    }
    if (a->st != LLMT_OK)
        snprintf(a->err, sizeof a->err, "%s", tr ? llmt_trainer_last_error(tr) : "model");
    llmt_trainer_destroy(tr);
    llmt_comm_destroy(epc);
    llmt_model_destroy(m);
    return NULL;
}

/* The planner's estimate for this layout (the same model as a spec, fp32
 * on the cpu profile): its EP bytes of a step returned, the rest in
 * *out when given. */
static llmt_plan_estimate g_est;
static double plan_ep_bytes_z(int W, int ep, int zero, int dropless)
{
    char js[2048];
    snprintf(js, sizeof js,
             "{\"model\": {\"arch\": \"llama\", \"layers\": %d, \"hidden\": %d, \"heads\": 4,"
             " \"kv_heads\": 2, \"ffn\": 32, \"vocab\": %d, \"seq_len\": %d,"
             " \"moe\": {\"experts\": %d, \"top_k\": %d, \"expert_ffn\": %d,"
             " %s, \"shared_experts\": %d}},"
             " \"parallelism\": {\"dp\": %d, \"ep\": %d, \"zero\": %d},"
             " \"batch\": {\"micro\": %d, \"global\": %d},"
             " \"precision\": {\"param\": \"fp32\", \"gemm\": \"fp32\"},"
             " \"hardware\": {\"gpu\": \"cpu\"}, \"train\": {\"device\": \"cpu\"}}",
             L, C, V, T, E, K, FE,
             dropless ? "\"dropless\": true" : "\"capacity_factor\": 1.0, \"dropless\": false",
             g_shared, W, ep, zero, B, SEQS);
    llmt_spec *sp = NULL;
    llmt_plan *pl = NULL;
    double out = -1;
    if (llmt_spec_parse_json(ctx, js, strlen(js), &sp) != LLMT_OK) {
        fprintf(stderr, "spec: %s\n", llmt_context_last_error(ctx));
        return -1;
    }
    if (llmt_plan_create(ctx, sp, W, &pl) == LLMT_OK) {
        llmt_plan_estimate e;
        memset(&e, 0, sizeof e);
        e.struct_size = sizeof e;
        if (llmt_plan_get_estimate(pl, &e) == LLMT_OK) {
            out = e.comm_bytes_ep;
            g_est = e;
            g_plan_params = e.params;
            g_plan_active = e.params_active;
        }
    } else {
        fprintf(stderr, "plan: %s\n", llmt_context_last_error(ctx));
    }
    llmt_plan_destroy(pl);
    llmt_spec_destroy(sp);
    return out;
}

static double plan_ep_bytes(int W, int ep, int dropless)
{
    return plan_ep_bytes_z(W, ep, 0, dropless);
}

static void run_ranks(run *r, int W)
{
    llmt_comm *c[4] = {0};
    pthread_t th[4];
    if (llmt_comm_create_inproc(NULL, W, NULL, c) != LLMT_OK) {
        CHECK(0);
        return;
    }
    for (int i = 0; i < W; i++) {
        r[i].world = c[i];
        r[i].rank = i;
        r[i].W = W;
        pthread_create(&th[i], NULL, rank_main, &r[i]);
    }
    for (int i = 0; i < W; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < W; i++)
        llmt_comm_destroy(c[i]);
}

static double rel_l2(const float *a, const float *b, int64_t n)
{
    double d = 0, nn = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        nn += (double)b[i] * b[i];
    }
    return nn > 0 ? sqrt(d / nn) : sqrt(d);
}

/* A rank's losses of steps k0..k1-1 against the single rank's, each
 * within 1e-5 relative (a check each); the largest relative difference
 * in *worst. */
static void check_losses(const run *r, const run *ref, int k0, int k1, double *worst)
{
    for (int k = k0; k < k1; k++) {
        CHECK_CLOSE(r->loss[k], ref->loss[k], 1e-5, 0);
        double d = fabs(r->loss[k] - ref->loss[k]) / fabs(ref->loss[k]);
        *worst = d > *worst ? d : *worst;
    }
}

/* A rank's final parameters against the single rank's: relative L2
 * within 1e-5 (one check); the largest in *worst. */
static void check_params(const run *r, const run *ref, double *worst)
{
    double d = rel_l2(r->params, ref->params, r->total);
    CHECK(d <= 1e-5);
    *worst = d > *worst ? d : *worst;
}

static void one_case(const run *ref, int W, int ep, int zero, int dropless)
{
    run r[4];
    memset(r, 0, sizeof r);
    for (int i = 0; i < W; i++) {
        cfg(&r[i].c, E, dropless);
        r[i].ep = ep;
        r[i].zero = zero;
        r[i].dropless = dropless;
    }
    run_ranks(r, W);
    double wl = 0, wp = 0;
    for (int i = 0; i < W; i++) {
        if (r[i].st != LLMT_OK) {
            fprintf(stderr, "  W %d ep %d rank %d: %s\n", W, ep, i, r[i].err);
            CHECK(0);
            continue;
        }
        check_losses(&r[i], ref, 0, STEPS, &wl);
        /* tensor by tensor (the expert tensors among them) */
        llmt_model *m = NULL;
        llmt_model_create(ctx, &r[i].c, &m);
        int32_t np = 0;
        llmt_model_param_count(m, &np, NULL);
        int64_t at = 0;
        for (int32_t j = 0; j < np; j++) {
            llmt_tensor v;
            const char *name;
            memset(&v, 0, sizeof v);
            v.struct_size = sizeof v;
            llmt_model_param(m, j, &name, &v);
            int64_t n = 1;
            for (int d = 0; d < v.ndim; d++)
                n *= v.shape[d];
            double d = rel_l2(r[i].params + at, ref->params + at, n);
            if (!(d <= 1e-5))
                fprintf(stderr, "  rank %d %s: relative L2 %.3e\n", i, name, d);
            CHECK(d <= 1e-5);
            wp = d > wp ? d : wp;
            at += n;
        }
        llmt_model_destroy(m);
        for (int x = 0; x < E; x++)
            CHECK_EQ_INT(r[i].counts[x], ref->counts[x]);
        CHECK_EQ_INT(r[i].dropped, ref->dropped);
        CHECK_CLOSE(r[i].aux, ref->aux, 1e-5, 0);
        CHECK_CLOSE(r[i].z, ref->z, 1e-5, 0);
    }
    double want = 0, plan = 0;
    if (ep > 1) {
        int N = B * T;
        int cap = dropless ? N : (int)ceil(1.0 * N * K / E);
        if (cap > N)
            cap = N;
        int micro = SEQS / W / B;
        want = 4.0 * L * micro * (ep - 1) / ep * E * cap * C * 4;
        plan = plan_ep_bytes(W, ep, dropless);
        for (int i = 0; i < W; i++)
            CHECK_CLOSE(r[i].ep_bytes, want, 1e-12, 0);
        CHECK_CLOSE(plan, want, 1e-12, 0);
    }
    /* the expert data parallel group: X = W / ep ranks, 3 tensors of
     * E/ep experts per MoE layer (w1, w3 [E*FE, C], w2 [E*C, FE]), each a
     * unit of n = E/ep x FE x C floats, chunk c = n / X per rank */
    double xwant = 0;
    if (ep > 1) {
        double X = (double)W / ep, n = (double)E / ep * FE * C, c = n / X;
        double units = 3.0 * L, micro = (double)SEQS / W / B;
        double rs = (X - 1) * c * 4, ag = (X - 1) * c * 4;
        double per = zero < 2 ? 2 * (X - 1) / X * n * 4 + (zero == 1 ? ag : 0)
                              : rs + (zero == 2 ? ag : 2 * micro * ag);
        xwant = units * per;
        for (int i = 0; i < W; i++) {
            CHECK_EQ_INT(r[i].x_size, W / ep);
            CHECK_CLOSE(r[i].x_bytes, xwant, 1e-12, 0);
        }
    }
    /* the plan's model of this engine (engine_dp_*): the DP and expert
     * data parallel groups' calls, payload and bus bytes of a step */
    plan_ep_bytes_z(W, ep, zero, dropless);
    CHECK(g_est.engine_modeled == 1);
    const double pdp[3] = {g_est.engine_dp_calls, g_est.engine_dp_payload_bytes,
                           g_est.engine_dp_bus_bytes};
    for (int i = 0; i < W; i++)
        for (int q = 0; q < 3; q++) {
            if (fabs(r[i].dp[q] - pdp[q]) > 1e-9 * pdp[q])
                fprintf(stderr, "  rank %d dp %s: run %.0f, plan %.0f\n", i,
                        q == 0   ? "calls"
                        : q == 1 ? "payload"
                                 : "bus",
                        r[i].dp[q], pdp[q]);
            CHECK_CLOSE(r[i].dp[q], pdp[q], 1e-12, 0);
        }
    /* the engine holds E/ep experts: 1/ep of every expert tensor, its EP
     * rank's rows */
    for (int i = 0; ep > 1 && i < W; i++) {
        CHECK(r[i].all > 0);
        CHECK_EQ_INT(r[i].held * ep, r[i].all);
        CHECK_EQ_INT(r[i].differ, 0);
    }
    /* and the model's host copy of the others' rows is given back between
     * steps (0 or NaN until the sync) */
    for (int i = 0; ep > 1 && i < W; i++) {
        CHECK(r[i].others > 0);
        CHECK_EQ_INT(r[i].stale, 0);
    }
    if (ep > 1)
        printf("  the engine holds %lld of the %lld expert tensor elements on rank 0 (its EP "
               "rank's rows); %lld of the model's %lld elements of other ranks' rows still "
               "held before the sync\n",
               (long long)r[0].held, (long long)r[0].all, (long long)r[0].stale,
               (long long)r[0].others);
    /* and its memory: parameter and gradient buffers of the dense tensors
     * and this rank's experts, AdamW state as large (ZeRO 0) or the
     * rank's shares, its experts' only over the expert data parallel group
     * (DP rank 0's: every rank's here, as no unit is padded) */
    for (int i = 0; i < W; i++) {
        CHECK_CLOSE((double)r[i].mem.params, g_est.engine_mem_params, 0, 0);
        CHECK_CLOSE((double)r[i].mem.grads, g_est.engine_mem_grads, 0, 0);
        CHECK_CLOSE((double)r[i].mem.optimizer, g_est.engine_mem_optimizer, 0, 0);
    }
    int64_t kept = 0;
    for (int x = 0; x < E; x++)
        kept += r[0].counts[x];
    printf("W %d ep %d zero %d %s: losses rel <= %.2e, params rel L2 <= %.2e, kept %lld "
           "dropped %lld (ref %lld), ep all-to-all %.0f B/step (formula %.0f, plan %.0f)\n",
           W, ep, zero, dropless ? "dropless" : "capacity 1.0", wl, wp, (long long)kept,
           (long long)r[0].dropped, (long long)ref->dropped, r[0].ep_bytes, want, plan);
    if (ep > 1)
        printf("  expert data parallel group of %d: %.0f B/step (formula %.0f)\n", r[0].x_size,
               r[0].x_bytes, xwant);
    printf("  data parallel traffic of a step (DP + expert DP groups): %.0f calls, %.0f B "
           "payload, %.0f B bus; plan engine_dp_*: %.0f, %.0f, %.0f\n",
           r[0].dp[0], r[0].dp[1], r[0].dp[2], pdp[0], pdp[1], pdp[2]);
    printf("  memory: params %lld (resident %lld), grads %lld, optimizer %lld B (plan %.0f, "
           "%.0f, %.0f)\n",
           (long long)r[0].mem.params, (long long)r[0].mem.params_resident,
           (long long)r[0].mem.grads, (long long)r[0].mem.optimizer, g_est.engine_mem_params,
           g_est.engine_mem_grads, g_est.engine_mem_optimizer);
    for (int i = 0; i < W; i++)
        free(r[i].params);
}

/* The planner's total and active parameters against the model's tensors
 * (vocabulary unpadded, as the spec counts it): active = every tensor but
 * the experts', plus top_k of the E experts of each MoE layer. */
static void param_counts(void)
{
    llmt_model_config c;
    cfg(&c, E, 0);
    c.padded_vocab_size = V;
    llmt_model *m = NULL;
    CHECK_STATUS(llmt_model_create(ctx, &c, &m), LLMT_OK);
    if (!m)
        return;
    int32_t np = 0;
    int64_t total = 0;
    llmt_model_param_count(m, &np, &total);
    double experts = 0;
    for (int32_t j = 0; j < np; j++) {
        llmt_tensor v;
        const char *name;
        memset(&v, 0, sizeof v);
        v.struct_size = sizeof v;
        llmt_model_param(m, j, &name, &v);
        if (strstr(name, ".experts."))
            experts += (double)v.shape[0] * (double)v.shape[1];
    }
    double active = (double)total - experts + experts * K / E;
    plan_ep_bytes(2, 2, 0);
    printf("parameters: model %lld total, %.0f active; plan %.0f, %.0f\n", (long long)total,
           active, g_plan_params, g_plan_active);
    CHECK_CLOSE(g_plan_params, (double)total, 0, 0.5);
    CHECK_CLOSE(g_plan_active, active, 0, 0.5);
    /* ep 2: a rank holds half of the routed experts, the rest whole */
    CHECK_CLOSE(g_est.params_per_gpu, (double)total - experts / 2, 0, 0.5);
    llmt_model_destroy(m);
}

/* One rank of ep 2 with no data parallel group (refusals): the statuses
 * of set_ep_comm, a step (refused), leaving ep and a step alone, and
 * whether the refusal named parallelism.ep; checked by the caller. */
typedef struct no_dp {
    llmt_comm *w;
    llmt_status st[5];
    int named;
} no_dp;

static void *no_dp_rank(void *p)
{
    no_dp *a = p;
    llmt_model_config c;
    cfg(&c, E, 0);
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = B;
    o.seq_len = T;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_batch b = {sizeof b, g_in, g_tg, B, T};
    a->st[0] = llmt_model_create(ctx, &c, &m);
    if (a->st[0] == LLMT_OK)
        a->st[0] = llmt_trainer_create(m, &o, &tr);
    if (a->st[0] == LLMT_OK)
        a->st[0] = llmt_trainer_set_ep_comm(tr, a->w);
    if (a->st[0] == LLMT_OK) {
        a->st[1] = llmt_trainer_step(tr, &b, NULL);
        a->named = strstr(llmt_trainer_last_error(tr), "parallelism.ep") != NULL;
        a->st[2] = llmt_trainer_set_ep_comm(tr, NULL);
        a->st[3] = llmt_trainer_step(tr, &b, NULL);
    }
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return NULL;
}

static void refusals(void)
{
    llmt_model_config c;
    llmt_comm *w[2] = {0};
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 2, NULL, w), LLMT_OK);
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = B;
    o.seq_len = T;
    /* dense: nothing to split */
    cfg(&c, 0, 0);
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt_model_create(ctx, &c, &m), LLMT_OK);
    CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
    CHECK_STATUS(llmt_trainer_set_ep_comm(tr, w[0]), LLMT_ERR_UNSUPPORTED);
    CHECK(strstr(llmt_trainer_last_error(tr), "moe_experts") != NULL);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    /* 3 experts over 2 ranks */
    cfg(&c, 3, 0);
    CHECK_STATUS(llmt_model_create(ctx, &c, &m), LLMT_OK);
    CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
    CHECK_STATUS(llmt_trainer_set_ep_comm(tr, w[0]), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_trainer_last_error(tr), "parallelism.ep") != NULL);
    CHECK_STATUS(llmt_trainer_set_ep_comm(tr, NULL), LLMT_OK);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    /* ep 2 without a data parallel group: the step refuses before any
     * exchange; detached (collective: the other rank's experts come
     * back), it runs alone */
    pthread_t th[2];
    no_dp nd[2];
    memset(nd, 0, sizeof nd);
    for (int i = 0; i < 2; i++) {
        nd[i].w = w[i];
        pthread_create(&th[i], NULL, no_dp_rank, &nd[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK_STATUS(nd[i].st[0], LLMT_OK);
        CHECK_STATUS(nd[i].st[1], LLMT_ERR_STATE);
        CHECK(nd[i].named);
        CHECK_STATUS(nd[i].st[2], LLMT_OK);
        CHECK_STATUS(nd[i].st[3], LLMT_OK);
    }
    llmt_comm_destroy(w[0]);
    llmt_comm_destroy(w[1]);
}

/* One stage of the resharding chain: W ranks (W 1: one rank, no
 * communicator) of ep over steps [k0, k1). */
static void stage(run *r, int W, int ep, int zero, int k0, int k1, const char *load,
                  const char *save)
{
    memset(r, 0, 4 * sizeof *r);
    for (int i = 0; i < W; i++) {
        cfg(&r[i].c, E, 0);
        r[i].ep = ep;
        r[i].zero = zero;
        r[i].k0 = k0;
        r[i].k1 = k1;
        r[i].load = load;
        r[i].save = save;
    }
    if (W > 1) {
        run_ranks(r, W);
    } else {
        r[0].W = 1;
        rank_main(&r[0]);
    }
}

/* ep 2 x 2 replicas -> one rank -> ep 4, through checkpoints, against the
 * uninterrupted single rank (capacity 1.0). */
static void reshard(const run *ref, int za, int zb)
{
    char a[] = "/tmp/moe_ep_ckA_XXXXXX", b[] = "/tmp/moe_ep_ckB_XXXXXX";
    CHECK(mkdtemp(a) != NULL);
    CHECK(mkdtemp(b) != NULL);
    const struct {
        int W, ep, zero, k0, k1;
        const char *load, *save;
    } chain[3] = {{4, 2, za, 0, 2, NULL, a}, {1, 1, 0, 2, 4, a, b}, {4, 4, zb, 4, 6, b, NULL}};
    double wl = 0, wp = 0;
    for (int c = 0; c < 3; c++) {
        run r[4];
        stage(r, chain[c].W, chain[c].ep, chain[c].zero, chain[c].k0, chain[c].k1,
              chain[c].load, chain[c].save);
        for (int i = 0; i < chain[c].W; i++) {
            if (r[i].st != LLMT_OK) {
                fprintf(stderr, "  reshard stage %d rank %d: %s\n", c, i, r[i].err);
                CHECK(0);
                continue;
            }
            check_losses(&r[i], ref, chain[c].k0, chain[c].k1, &wl);
            if (c == 2)
                check_params(&r[i], ref, &wp);
            free(r[i].params);
        }
    }
    printf("reshard ep 2 x 2 (ZeRO %d, steps 0-1) -> 1 rank (2-3) -> ep 4 (ZeRO %d, 4-5): "
           "losses rel <= %.2e, final params rel L2 <= %.2e\n",
           za, zb, wl, wp);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", a, b);
    CHECK(system(cmd) == 0);
}

/* Expert parallelism left after 3 steps of ep 2 x 2 (ZeRO z): the run
 * goes on under dp 4 alone, as the single rank's. */
static void leave_case(const run *ref, int zero)
{
    run r[4];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 4; i++) {
        cfg(&r[i].c, E, 0);
        r[i].ep = 2;
        r[i].zero = zero;
        r[i].leave_at = 3;
    }
    run_ranks(r, 4);
    double wl = 0, wp = 0;
    for (int i = 0; i < 4; i++) {
        if (r[i].st != LLMT_OK) {
            fprintf(stderr, "  leave ep rank %d: %s\n", i, r[i].err);
            CHECK(0);
            continue;
        }
        CHECK_EQ_INT(r[i].x_size, 0); /* no expert data parallel group now */
        check_losses(&r[i], ref, 0, STEPS, &wl);
        check_params(&r[i], ref, &wp);
        free(r[i].params);
    }
    printf("ep 2 x 2 ZeRO %d, ep detached after step 3, dp 4 for 3 more: losses rel <= %.2e, "
           "params rel L2 <= %.2e\n",
           zero, wl, wp);
}

/* The memory expert parallelism saves: dp 4 at ZeRO 0 under ep 1, 2 and
 * 4. A rank's parameter, gradient and AdamW bytes (llmt_trainer_memory)
 * less the dense part (ep 1's less the experts' 4 fp32 buffers, counted
 * from the model's tensors) are the experts' part: 1/ep of ep 1's,
 * within 5%. */
static void mem_scaling(void)
{
    llmt_model_config c;
    cfg(&c, E, 0);
    llmt_model *m = NULL;
    CHECK_STATUS(llmt_model_create(ctx, &c, &m), LLMT_OK);
    double xf = 0; /* expert floats of the model */
    llmt_tensor v;
    for (int32_t i = -1; next_expert(m, &i, &v);)
        xf += (double)v.shape[0] * (double)v.shape[1];
    llmt_model_destroy(m);
    double state[3] = {0}, dense = 0;
    const int eps[3] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        run r[4];
        memset(r, 0, sizeof r);
        for (int i = 0; i < 4; i++) {
            cfg(&r[i].c, E, 0);
            r[i].ep = eps[k];
        }
        run_ranks(r, 4);
        for (int i = 0; i < 4; i++) {
            CHECK(r[i].st == LLMT_OK);
            free(r[i].params);
        }
        state[k] = (double)(r[0].mem.params + r[0].mem.grads + r[0].mem.optimizer);
        if (k == 0)
            dense = state[0] - 16 * xf;
        double ex = state[k] - dense, want = 16 * xf / eps[k];
        CHECK(xf > 0 && dense > 0);
        CHECK(fabs(ex / want - 1) <= 0.05);
        printf("memory, dp 4 ZeRO 0 ep %d: params %lld + grads %lld + optimizer %lld = %.0f B "
               "per rank; the experts' part %.0f B (%.3f of ep 1's; 1/ep = %.3f), the dense "
               "part %.0f B\n",
               eps[k], (long long)r[0].mem.params, (long long)r[0].mem.grads,
               (long long)r[0].mem.optimizer, state[k], ex, ex / (16 * xf), 1.0 / eps[k],
               dense);
    }
}

int main(void)
{
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    make_data();
    for (int dl = 0; dl < 2; dl++) {
        run ref;
        memset(&ref, 0, sizeof ref);
        cfg(&ref.c, E, dl);
        ref.W = 1;
        rank_main(&ref);
        if (ref.st != LLMT_OK) {
            fprintf(stderr, "single rank: %s\n", ref.err);
            CHECK(0);
            return check_exit("moe-ep");
        }
        printf("%s: single rank losses %.6f .. %.6f, dropped %lld\n",
               dl ? "dropless" : "capacity 1.0", ref.loss[0], ref.loss[STEPS - 1],
               (long long)ref.dropped);
        if (!dl) {
            CHECK(ref.dropped > 0); /* the capacity bites */
            one_case(&ref, 2, 1, 0, dl);
            one_case(&ref, 2, 1, 1, dl);
            one_case(&ref, 2, 2, 0, dl);
            one_case(&ref, 4, 2, 1, dl);
            one_case(&ref, 4, 4, 0, dl);
            one_case(&ref, 2, 2, 2, dl);
            one_case(&ref, 4, 2, 3, dl);
            one_case(&ref, 4, 2, 0, dl);
            one_case(&ref, 4, 2, 2, dl);
            reshard(&ref, 1, 2);
            reshard(&ref, 0, 0); /* the moments' host copies: a rank's rows */
            leave_case(&ref, 0);
            leave_case(&ref, 1);
        } else {
            CHECK_EQ_INT(ref.dropped, 0);
            one_case(&ref, 2, 2, 1, dl);
            one_case(&ref, 4, 4, 0, dl);
        }
        free(ref.params);
    }
    param_counts();
    /* a shared expert (replicated, reduced over the whole DP group like the
     * dense weights) beside the routed ones: ep 2 and ep 2 x 2 replicas */
    g_shared = 1;
    run sref;
    memset(&sref, 0, sizeof sref);
    cfg(&sref.c, E, 0);
    sref.W = 1;
    rank_main(&sref);
    CHECK(sref.st == LLMT_OK);
    if (sref.st == LLMT_OK) {
        printf("shared expert, capacity 1.0: single rank losses %.6f .. %.6f\n", sref.loss[0],
               sref.loss[STEPS - 1]);
        one_case(&sref, 2, 2, 0, 0);
        one_case(&sref, 4, 2, 1, 0);
        param_counts();
    }
    free(sref.params);
    g_shared = 0;
    mem_scaling();
    refusals();
    llmt_context_destroy(ctx);
    return check_exit("moe-ep");
}
