/* Context parallelism of the engine (lib/train/cp.c, lib/exec/attn_cp.c;
 * llmt__trainer_set_cp) against the single-rank engine on the same global
 * batches:
 *
 *   test_device_cp cpu    the fp32 CPU backend; unit suite
 *   test_device_cp emul   the bf16 host emulation; unit suite
 *   run-mpi.sh N test_device_cp mpi ring|all-gather
 *                         one rank per process (llmt_comm_create_from_env
 *                         under mpirun); mpi suite: np 2 both, np 4 ring
 *
 * Ranks are threads on one in-process communicator, the CP group. Every
 * rank is given the same whole sequences (4 of 64 tokens a step,
 * micro-batches of 2) and trains on its two chunks of each (chunks r and
 * 2 cp - 1 - r of 2 cp). Cases: GPT-2 (learned positions: wpe rows by
 * global position) and Llama with grouped-query attention (RoPE at global
 * positions), cp 2 and 4, both exchanges (ring, all-gather of K/V), and
 * cp 2 x tp 2 (GPT-2 ring, Llama all-gather; world rank r is TP rank
 * r % 2, CP rank r / 2; the vocabulary-split embedding takes wpe by
 * chunk too), cp 2 x dp 2 (GPT-2 ZeRO-1 ring, Llama ZeRO-3 all-gather;
 * CP rank r % 2, DP rank r / 2, each replica given its half of the
 * global batch); cp 4 ring with selective recompute and cp 2 x tp 2 with
 * full recompute (the exchange runs again inside the backward); cp 2 x
 * tp 2 with sequence parallelism, both exchanges (the TP group splits each
 * CP rank's B x T / cp rows for the norms and residuals, gathering them
 * before the column split Linears; GPT-2's embedding then writes wpe by
 * chunk into the gathered rows), with its activation memory (sp_memory).
 * Ten AdamW steps with clipping (the gradient norm is the summed
 * gradient's).
 *
 * Bounds, and why: context parallelism changes only the order of fp32
 * sums (attention's softmax merged block by block by log-sum-exp, the
 * replicated weights' gradients summed over the group), so the tensor
 * parallel tests' bounds hold: losses within 1e-5 relative, final
 * parameters within 1e-5 relative L2 and 1e-4 absolute. Before the steps
 * the evaluate loss of one global batch, within 1e-5 relative. The
 * emulation (cp 2 ring, cp 4 all-gather, the tp cases, one SP) within the
 * bf16 bound (2^-9 relative on the losses, 2 x lr x
 * steps absolute on the fp32 masters): its activations round to bf16 at
 * other points of the sums. The measured worst cases print.
 *
 * fp8 GEMMs on the emulation (compare_fp8): cp 2 ring and cp 2 x tp 2
 * all-gather against the single-rank fp8 run.
 *
 * Refusals: 2 x cp not dividing the sequence (cp 3 of 64: the message
 * names parallelism.cp and model.seq_len), an unknown variant, tensor
 * parallelism after CP, sequence parallelism after CP (LLMT_ERR_STATE:
 * it goes on before). Generation under CP (cp 2): the greedy tokens of
 * the trainer before attaching, past the window. */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "train/cp.h"
#include "train/device.h"
#include "train/trainer_state.h"

#define STEPS 10
#define SEQS 4 /* sequences per step */
#define MICRO 2
#define T 64
#define V 97
#define LR 1e-3f
#define MAXW 4
#define NF8 64 /* fp8 scaled tensors kept: 3 per Linear slot, 5 slots a layer */

static llmt_model_config g_cfg;
static const llmt__dev_ops *g_ops;
static int g_bf16;
static int g_fp8; /* the runs use fp8 GEMMs */
static int32_t *g_in, *g_tg;

typedef struct rank_arg {
    llmt_comm *comm; /* NULL: the single-rank reference */
    llmt_comm *tpc;  /* the tensor parallel group, or NULL */
    llmt_comm *dpc;  /* the data parallel group, or NULL */
    int variant, dp, dprank, zero, recompute;
    int sp;                  /* sequence parallel over tpc */
    int fp8;                 /* fp8 GEMMs */
    float scale1[NF8];       /* fp8: the scales chosen after step 1 */
    int nf8, gemms;          /* fp8: scaled tensors; forward fp8 GEMMs */
    int64_t act, act_nosp;   /* activation bytes under CP (SP: and without SP) */
    llmt_status sp_after_cp; /* set_sequence_parallel after CP (refused) */
    float loss[STEPS];
    float eval;
    float *params;
    int64_t numel;
    llmt_status st;
    char err[1024];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    a->st = llmt_model_create(NULL, &g_cfg, &m);
    if (a->st == LLMT_OK) {
        llmt_trainer_opts o;
        rank_fixture_opts(&o, MICRO, SEQS / MICRO / a->dp, T, LR);
        o.recompute = a->recompute;
        o.fp8 = a->fp8;
        a->st = llmt__trainer_create_dev(m, &o, g_ops, &tr);
    }
    if (a->st == LLMT_OK && a->tpc)
        a->st = llmt_trainer_set_tp_comm(tr, a->tpc);
    if (a->st == LLMT_OK && a->comm)
        a->st = llmt__trainer_set_cp(tr, a->comm, a->variant);
    if (a->st == LLMT_OK && a->sp) {
        /* sequence parallelism goes on before CP (refused after it): the
         * CP engine without SP measured, CP detached, SP, CP again */
        a->act_nosp = rank_fixture_act_bytes(tr);
        a->sp_after_cp = llmt_trainer_set_sequence_parallel(tr, 1);
        a->st = llmt__trainer_set_cp(tr, NULL, a->variant);
        if (a->st == LLMT_OK)
            a->st = llmt_trainer_set_sequence_parallel(tr, 1);
        if (a->st == LLMT_OK)
            a->st = llmt__trainer_set_cp(tr, a->comm, a->variant);
    }
    if (a->st == LLMT_OK && tr)
        a->act = rank_fixture_act_bytes(tr);
    if (a->st == LLMT_OK) {
        llmt_batch b = {sizeof b, g_in, g_tg, SEQS, T};
        a->st = llmt_trainer_evaluate(tr, &b, &a->eval);
    }
    if (a->st == LLMT_OK && a->dpc) { /* after CP, as after TP */
        llmt_dp_opts d;
        llmt_dp_opts_init(&d, sizeof d);
        d.zero_stage = a->zero;
        d.bucket_bytes = 16 << 10; /* several buckets */
        a->st = llmt_trainer_set_comm(tr, a->dpc, &d);
    }
    for (int k = 0; k < STEPS && a->st == LLMT_OK; k++) {
        /* this replica's share of the global batch */
        size_t at = (size_t)k * SEQS * T + (size_t)a->dprank * (SEQS / a->dp) * T;
        llmt_batch b = {sizeof b, g_in + at, g_tg + at, SEQS / a->dp, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        a->st = llmt_trainer_step(tr, &b, &met);
        a->loss[k] = met.loss;
        const float *sc = NULL;
        int bwd = 0;
        if (a->st == LLMT_OK && k == 0 && a->fp8 &&
            llmt__devtrain_fp8_state(llmt__trainer_devtrain(tr), &sc, &a->nf8, &a->gemms,
                                     &bwd) &&
            a->nf8 <= NF8)
            memcpy(a->scale1, sc, (size_t)a->nf8 * sizeof *sc);
    }
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr);
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m,
                       a->st == LLMT_OK ? &a->params : NULL, &a->numel);
    return NULL;
}

typedef struct split_arg {
    llmt_comm *world, *inner, *outer;
    int rank, isz;
    llmt_status st;
} split_arg;

/* Two dimensions, the plan's order (TP innermost, then CP, then DP):
 * world rank r is rank r % isz of the inner group, r / isz of the outer. */
static void *split_main(void *p)
{
    split_arg *a = p;
    a->st = llmt_comm_split(a->world, a->rank / a->isz, a->rank, &a->inner);
    if (a->st == LLMT_OK)
        a->st = llmt_comm_split(a->world, a->rank % a->isz, a->rank, &a->outer);
    return NULL;
}

/* cp 0: the single rank; tp and dp 1: context parallelism alone (at most
 * one of them > 1); sp: sequence parallel over the TP group. */
static void run(int cp, int tp, int dp, int zero, int variant, int recompute, int sp,
                rank_arg *a)
{
    int n = cp ? cp * tp * dp : 1, two = tp > 1 || dp > 1;
    llmt_comm *c[MAXW] = {NULL};
    split_arg sa[MAXW];
    memset(a, 0, (size_t)n * sizeof *a);
    memset(sa, 0, sizeof sa);
    pthread_t th[MAXW];
    if (cp)
        CHECK_STATUS(llmt_comm_create_inproc(NULL, n, NULL, c), LLMT_OK);
    for (int r = 0; cp && two && r < n; r++) {
        sa[r] = (split_arg){c[r], NULL, NULL, r, tp > 1 ? tp : cp, LLMT_OK};
        pthread_create(&th[r], NULL, split_main, &sa[r]);
    }
    for (int r = 0; cp && two && r < n; r++) {
        pthread_join(th[r], NULL);
        CHECK_STATUS(sa[r].st, LLMT_OK);
    }
    for (int r = 0; r < n; r++) {
        a[r].comm = tp > 1 ? sa[r].outer : dp > 1 ? sa[r].inner : c[r];
        a[r].tpc = tp > 1 ? sa[r].inner : NULL;
        a[r].dpc = dp > 1 ? sa[r].outer : NULL;
        a[r].dp = dp;
        a[r].dprank = dp > 1 ? r / cp : 0;
        a[r].zero = zero;
        a[r].recompute = recompute;
        a[r].variant = variant;
        a[r].sp = sp;
        a[r].fp8 = g_fp8;
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++) {
        llmt_comm_destroy(sa[r].inner);
        llmt_comm_destroy(sa[r].outer);
        llmt_comm_destroy(c[r]);
    }
}

/* Sequence parallelism under CP keeps the SP-only case's memory drop
 * (test_device_sp.c's bound, on the engine's B x T / cp rows): per rank,
 *   act_sp <= act(cp alone) / tp + 2 N C e + 12 N + 4 + 4 T
 * with N = micro x T / cp, e the stored element's bytes (what SP keeps
 * whole: the gathered input / partial output scratch, the split loss's
 * per-row scratch, the norm's sum, the generation row), and below the
 * same layout without SP; SP after CP was refused (LLMT_ERR_STATE). */
static void sp_memory(const rank_arg *a, int n, int tp, int64_t act_cp)
{
    double N = (double)MICRO * T / (n / tp), C = g_cfg.width, es = g_bf16 ? 2.0 : 4.0;
    double bound = (double)act_cp / tp + 2 * N * C * es + 12 * N + 4 + 4.0 * T;
    for (int r = 0; r < n; r++) {
        if (a[r].st != LLMT_OK)
            continue;
        CHECK_STATUS(a[r].sp_after_cp, LLMT_ERR_STATE);
        CHECK(act_cp > 0 && a[r].act > 0 && a[r].act < a[r].act_nosp);
        CHECK((double)a[r].act <= bound);
    }
    printf("    activation bytes per rank: cp 2 alone %lld, cp 2 x tp %d %lld, with SP %lld "
           "(bound %.0f)\n",
           (long long)act_cp, tp, (long long)a[0].act_nosp, (long long)a[0].act, bound);
}

static void compare(const char *name, int llama, int kv)
{
    tp_fixture_config(&g_cfg, llama, kv, V, T);
    rank_arg ref[1], a[MAXW];
    run(0, 1, 1, 0, 0, 0, 0, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    if (ref[0].st != LLMT_OK) {
        fprintf(stderr, "%s reference: %s\n", name, ref[0].err);
        return;
    }
    /* training moved: the comparison is not of two untouched inits */
    CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
    /* cp 2, 4 alone, both variants; then cp 2 x tp 2 and cp 2 x dp 2
     * (GPT-2 ZeRO-1, Llama ZeRO-3), one variant each; cp 2 x tp 2 with
     * sequence parallelism, both variants */
    int64_t act_cp = 0; /* cp 2 alone's activation bytes (k 0) */
    for (int k = 0; k < 8; k++) {
        int cp = k < 4 ? 2 << (k / 2) : 2, tp = k == 4 || k >= 6 ? 2 : 1, dp = k == 5 ? 2 : 1;
        int var = k < 4 ? k % 2 : k >= 6 ? k - 6 : llama, zero = llama ? 3 : 1, sp = k >= 6;
        if (g_bf16 && (k == 1 || k == 2 || k == 7 - llama))
            continue; /* the emulation runs cp 2 ring, cp 4 all-gather and
                       * one SP variant (GPT-2 ring, Llama all-gather): time */
        {
            /* cp 4 ring recomputes the attention core (selective), cp 2 x tp 2
             * whole layers (full): the exchange runs again in the backward */
            run(cp, tp, dp, zero, var, k == 2 ? 2 : k == 4 ? 1 : 0, sp, a);
            if (k == 0)
                act_cp = a[0].act;
            rank_fixture_worst w = {0};
            double we = 0.0;
            for (int r = 0; r < cp * tp * dp; r++) {
                if (a[r].st != LLMT_OK)
                    fprintf(stderr, "%s cp %d rank %d: %s\n", name, cp, r, a[r].err);
                CHECK_STATUS(a[r].st, LLMT_OK);
                if (a[r].st != LLMT_OK)
                    continue;
                rank_fixture_losses(&w, a[r].loss, ref->loss, 0, STEPS, g_bf16);
                double e = fabs((double)a[r].eval - ref->eval) / ref->eval;
                if (!(e <= we))
                    we = e;
                CHECK(a[r].numel == ref->numel);
                /* the relative L2 and largest difference (not the count
                 * over 1e-5: the bounds below hold every element) */
                int64_t over = 0;
                double rel = tp_fixture_param_diff(a[r].params, ref->params,
                                                   a[r].numel == ref->numel ? a[r].numel : 0,
                                                   &w.abs, &over);
                if (!(rel <= w.rel))
                    w.rel = rel;
                free(a[r].params);
            }
            printf("%s cp %d x tp %d x dp %d%s%s %s: losses %.3g, evaluate %.3g relative; "
                   "params %.3g relative L2, %.3g max abs\n",
                   name, cp, tp, dp, dp > 1 ? (zero == 3 ? " ZeRO-3" : " ZeRO-1") : "",
                   sp ? " SP" : "", var == LLMT__CP_RING ? "ring" : "all-gather", w.loss, we,
                   w.rel, w.abs);
            if (sp)
                sp_memory(a, cp * tp, tp, act_cp);
            /* the losses are held step by step above */
            if (g_bf16) {
                CHECK(we <= 1.0 / 512);
                CHECK(w.abs <= 2.0 * LR * STEPS);
            } else {
                CHECK(we <= 1e-5);
                CHECK(w.rel <= 1e-5);
                CHECK(w.abs <= 1e-4);
            }
        }
    }
    free(ref[0].params);
}

/* fp8 GEMMs (delayed scaling) under context parallelism, against the
 * single-rank fp8 run: each rank sees only its rows of the activations
 * and their gradients, so the step's amaxes are maximised over the CP
 * group (device.c's fp8_step) as well as the TP group. After step 1 every
 * weight's scale equals the single rank's bit for bit and every rank
 * holds the same scales; the others within 2^-4 relative (amaxes of
 * values fp8 GEMMs made, summed in another order; test_device_tp.c says
 * why that much); every block Linear ran in fp8; the losses of 10 steps
 * within 2^-9 relative (the emulation's bound above). Cases: cp 2 ring,
 * cp 2 x tp 2 all-gather. */
static void compare_fp8(const char *name, int llama, int kv)
{
    tp_fixture_config(&g_cfg, llama, kv, V, T);
    g_fp8 = 1;
    rank_arg ref[1], a[MAXW];
    run(0, 1, 1, 0, 0, 0, 0, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    int slots = 5 * g_cfg.layers, nf = ref[0].nf8; /* device.c's NLIN a layer */
    CHECK(nf == 3 * slots && nf <= NF8);
    CHECK(ref[0].gemms == (llama ? 5 : 4) * g_cfg.layers);
    for (int tp = 1; tp <= 2; tp++) {
        int var = tp == 1 ? LLMT__CP_RING : LLMT__CP_ALL_GATHER;
        run(2, tp, 1, 0, var, 0, 0, a);
        double wl = 0.0, ws = 0.0;
        int weq = 1; /* every weight's scale equal on every rank */
        for (int r = 0; r < 2 * tp; r++) {
            if (a[r].st != LLMT_OK)
                fprintf(stderr, "%s fp8 cp 2 x tp %d rank %d: %s\n", name, tp, r, a[r].err);
            CHECK_STATUS(a[r].st, LLMT_OK);
            if (a[r].st != LLMT_OK)
                continue;
            CHECK(a[r].nf8 == nf && a[r].gemms == ref[0].gemms);
            for (int i = 0; i < nf && i < NF8; i++) {
                CHECK(a[r].scale1[i] == a[0].scale1[i]);
                double d = fabs((double)a[r].scale1[i] / ref[0].scale1[i] - 1.0);
                if (i < 2 * slots && i % 2 == 1) { /* a weight's */
                    CHECK(d == 0.0);
                    weq &= d == 0.0;
                }
                CHECK(d <= 1.0 / 16);
                ws = d > ws ? d : ws;
            }
            for (int k = 0; k < STEPS; k++) {
                double d = fabs((double)a[r].loss[k] - ref[0].loss[k]) / ref[0].loss[k];
                CHECK(d <= 1.0 / 512);
                wl = d > wl ? d : wl;
            }
            free(a[r].params);
        }
        printf("%s fp8 cp 2 x tp %d %s: losses %.3g relative; step 1 scales %.3g relative "
               "(weights' %s); %d fp8 GEMMs a forward\n",
               name, tp, var == LLMT__CP_RING ? "ring" : "all-gather", wl, ws,
               weq ? "equal" : "DIFFER", a[0].gemms);
    }
    CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
    free(ref[0].params);
    g_fp8 = 0;
}

/* Refusals on one rank of a group (none reaches a collective). */
static void refusals(void)
{
    tp_fixture_config(&g_cfg, 1, 2, V, T);
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = MICRO;
    o.seq_len = T;
    CHECK_STATUS(llmt_model_create(NULL, &g_cfg, &m), LLMT_OK);
    CHECK_STATUS(llmt__trainer_create_dev(m, &o, llmt__dev_cpu(), &tr), LLMT_OK);
    llmt_comm *c[3] = {NULL};
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 3, NULL, c), LLMT_OK);
    CHECK_STATUS(llmt__trainer_set_cp(tr, c[0], LLMT__CP_RING), LLMT_ERR_INVALID_ARGUMENT);
    const char *msg = llmt_trainer_last_error(tr);
    printf("cp 3 of seq_len 64: %s\n", msg);
    CHECK(strstr(msg, "parallelism.cp") && strstr(msg, "model.seq_len"));
    CHECK_STATUS(llmt__trainer_set_cp(tr, c[1], 7), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_trainer_last_error(tr), "variant"));
    for (int r = 0; r < 3; r++)
        llmt_comm_destroy(c[r]);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
}

/* Generation under CP equals the trainer's own before it; tensor
 * parallelism is refused after CP (cp 2, both ranks). */
static void *refuse_rank(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = MICRO;
    o.seq_len = T;
    a->st = llmt_model_create(NULL, &g_cfg, &m);
    if (a->st == LLMT_OK)
        a->st = llmt__trainer_create_dev(m, &o, llmt__dev_cpu(), &tr);
    /* greedy generation past the window (3 + T tokens: the last windows
     * are whole sequences), before and after attaching: the split engine
     * runs each window padded to T, the same tokens come out */
    int32_t one[3 + T], split[3 + T];
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_generate(tr, g_in, 3, T, 0.0f, 0, 1, one);
    if (a->st == LLMT_OK)
        a->st = llmt__trainer_set_cp(tr, a->comm, LLMT__CP_RING);
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_generate(tr, g_in, 3, T, 0.0f, 0, 1, split);
    if (a->st == LLMT_OK) {
        int ok = !memcmp(one, split, (size_t)T * sizeof one[0]);
        /* the block kernels' time is counted for the job's compute split */
        ok &= llmt__trainer_cp_compute_s(tr) > 0;
        ok &= llmt_trainer_set_tp_comm(tr, a->comm) == LLMT_ERR_STATE; /* tp goes on first */
        ok &= strstr(llmt_trainer_last_error(tr), "context parallelism") != NULL;
        a->numel = ok;
    }
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return NULL;
}

/* Under mpirun (test_device_cp mpi ring|all-gather): the world is the CP
 * group, one rank per process (MPI's send and receive, not the in-process
 * mailbox); each process runs the one-rank reference itself and checks
 * its own run against it with the fp32 bounds. */
static int mpi_main(const char *variant)
{
    if (!(llmt_build_features() & LLMT_FEATURE_MPI))
        return CHECK_SKIP;
    int var = strcmp(variant, "ring") == 0 ? LLMT__CP_RING : LLMT__CP_ALL_GATHER;
    llmt_comm *c = NULL;
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.timeout_ms = 60000;
    if (llmt_comm_create_from_env(NULL, &co, &c) != LLMT_OK)
        return 1;
    int32_t rank = 0, n = 0;
    llmt_comm_rank(c, &rank);
    llmt_comm_size(c, &n);
    for (int llama = 0; llama < 2; llama++) {
        tp_fixture_config(&g_cfg, llama, 2, V, T);
        rank_arg ref, a;
        memset(&ref, 0, sizeof ref);
        memset(&a, 0, sizeof a);
        ref.dp = a.dp = 1;
        a.comm = c;
        a.variant = var;
        rank_main(&ref);
        rank_main(&a);
        CHECK_STATUS(ref.st, LLMT_OK);
        CHECK_STATUS(a.st, LLMT_OK);
        if (a.st != LLMT_OK || ref.st != LLMT_OK) {
            fprintf(stderr, "rank %d: %s %s\n", (int)rank, ref.err, a.err);
            break;
        }
        double wl = 0.0, wp = 0.0;
        for (int k = 0; k < STEPS; k++) {
            double d = fabs((double)a.loss[k] - ref.loss[k]) / ref.loss[k];
            if (!(d <= wl))
                wl = d;
        }
        for (int64_t i = 0; i < a.numel && a.numel == ref.numel; i++) {
            double d = fabs((double)a.params[i] - ref.params[i]);
            if (!(d <= wp))
                wp = d;
        }
        printf("mpi rank %d of %d, %s %s: losses %.3g relative, params %.3g max abs\n",
               (int)rank, (int)n, llama ? "llama kv 2" : "gpt2", variant, wl, wp);
        CHECK(a.numel == ref.numel);
        CHECK(wl <= 1e-5);
        CHECK(wp <= 1e-4);
        free(ref.params);
        free(a.params);
    }
    llmt_comm_destroy(c);
    return check_exit("device-cp mpi");
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "mpi") == 0) {
        g_ops = llmt__dev_cpu();
        tp_fixture_data((size_t)STEPS * SEQS * T, V, &g_in, &g_tg);
        return g_in && g_tg ? mpi_main(argv[2]) : 1;
    }
    g_bf16 = argc > 1 && strcmp(argv[1], "emul") == 0;
    g_ops = g_bf16 ? llmt__dev_emul() : llmt__dev_cpu();
    tp_fixture_data((size_t)STEPS * SEQS * T, V, &g_in, &g_tg);
    if (!g_in || !g_tg)
        return 1;
    compare("gpt2", 0, 0);
    compare("llama kv 2", 1, 2);
    if (g_bf16) { /* fp8 GEMMs need a bf16 backend */
        compare_fp8("gpt2", 0, 0);
        compare_fp8("llama kv 2", 1, 2);
    }
    refusals();
    rank_arg a[2];
    memset(a, 0, sizeof a);
    rank_fixture_run(a, sizeof *a, 2, 1, offsetof(rank_arg, comm), refuse_rank);
    for (int r = 0; r < 2; r++) {
        CHECK_STATUS(a[r].st, LLMT_OK);
        CHECK(a[r].numel == 1);
    }
    free(g_in);
    free(g_tg);
    return check_exit("device-cp");
}
