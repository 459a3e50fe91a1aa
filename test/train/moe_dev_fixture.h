/* What the MoE tests on the bf16 emulation's op table (test_moe_emul.c,
 * test_moe_fp8.c) share beside moe_fixture.h and rank_fixture.h: the
 * model's MoE fields, a trainer on a table standing for CUDA, a step's
 * batch, and one layout rank (its groups from one world, its slice of the
 * global batch, its end) with its comparison against one rank's run, so
 * both hold their layouts to the same bounds by the same code. Header
 * only: each test is one translation unit. */
#ifndef LLMT_TEST_MOE_DEV_FIXTURE_H
#define LLMT_TEST_MOE_DEV_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "moe_fixture.h"
#include "rank_fixture.h"
#include "train/device.h"

#define MOE_DEV_MAX_STEPS 16 /* the most steps a layout rank keeps losses of */

/* moe_fixture_llama's model (seed 7) with MoE layers in every `every`-th
 * layer (0: every one) of e experts of fe, top-k, `shared` shared experts,
 * the capacity factor (0: dropless), raw gates or not; aux and z loss
 * coefficients 0.01 and 0.001. */
static inline void moe_dev_config(llmt_model_config *c, int vocab, int seq, int layers, int e,
                                  int k, int fe, int every, int shared, float capacity, int raw)
{
    moe_fixture_llama(c, vocab, seq, layers, 7);
    c->moe_experts = e;
    c->moe_top_k = k;
    c->moe_ffn = fe;
    c->moe_every = every > 0 ? every : 1;
    c->moe_shared_experts = shared;
    c->moe_capacity_factor = capacity; /* 0 with dropless: a factor is refused */
    c->moe_dropless = capacity <= 0;
    c->moe_raw_gates = raw;
    c->moe_aux_loss_coef = 0.01f;
    c->moe_z_loss_coef = 0.001f;
}

/* A deterministic trainer for c on the op table ops, which stands for
 * CUDA (micro-batches of b sequences of t tokens, acc a step, lr; fp8
 * GEMMs where fp8). */
static inline llmt_status moe_dev_open(const llmt_model_config *c, const llmt__dev_ops *ops,
                                       int b, int acc, int t, float lr, int fp8, llmt_model **m,
                                       llmt_trainer **tr)
{
    *tr = NULL;
    llmt_status s = llmt_model_create(NULL, c, m);
    if (s != LLMT_OK)
        return s;
    llmt_trainer_opts o;
    rank_fixture_opts(&o, b, acc, t, lr);
    o.device = LLMT_DEVICE_CUDA; /* the op table stands for it */
    o.deterministic = 1;
    o.fp8 = fp8;
    return llmt__trainer_create_dev(*m, &o, ops, tr);
}

/* Step k's global batch of step_seqs sequences of t tokens from in/tg:
 * seqs of them from sequence off on (a data parallel rank takes its
 * share; one rank all). */
static inline llmt_batch moe_dev_batch(const int32_t *in, const int32_t *tg, int t,
                                       int step_seqs, int k, int seqs, int off)
{
    size_t at = ((size_t)k * step_seqs + (size_t)off) * t;
    llmt_batch b = {sizeof b, in + at, tg + at, seqs, t};
    return b;
}

/* One rank of a layout, or the one rank all are compared with (world
 * NULL): what it runs and what it ends with. */
typedef struct moe_dev_rank {
    llmt_comm *world;
    int rank, W, zero, ep;
    int tp, sp, cp, pp; /* the world is the TP (with SP or not), CP or PP group */
    float loss[MOE_DEV_MAX_STEPS];
    float *params; /* after llmt_trainer_sync_params */
    int64_t numel;
    llmt_status st;
    char err[512];
} moe_dev_rank;

/* The ranks the global batch is split over: the data parallel world's
 * (TP, CP and PP ranks take all of it: the engine splits the rows, the
 * sequence or the layers), 1 for the one rank. */
static inline int moe_dev_split(const moe_dev_rank *a)
{
    int split = a->tp > 1 || a->cp > 1 || a->pp > 1;
    return a->world && !split ? a->W : 1;
}

/* A rank's model, trainer and EP group (NULL without ep). */
typedef struct moe_dev_handles {
    llmt_model *m;
    llmt_trainer *tr;
    llmt_comm *epc;
} moe_dev_handles;

/* Step k on rank a's share of its global batch (step_seqs sequences of t
 * from in/tg), its loss into a->loss[k]; into a->st. */
static inline void moe_dev_rank_step(moe_dev_rank *a, const moe_dev_handles *h,
                                     const int32_t *in, const int32_t *tg, int t, int step_seqs,
                                     int k)
{
    int W = moe_dev_split(a), per = step_seqs / W;
    llmt_batch b = moe_dev_batch(in, tg, t, step_seqs, k, per, W > 1 ? a->rank * per : 0);
    a->st = rank_fixture_step(h->tr, &b, &a->loss[k]);
}

/* Attaches the world to h->tr as the layout's group (TP with SP or not,
 * CP, PP, or else DP with a->zero) and, under ep, the EP group of
 * consecutive ranks (h->epc), where a->st is LLMT_OK. */
static inline void moe_dev_rank_attach(moe_dev_rank *a, moe_dev_handles *h)
{
    llmt_trainer *tr = h->tr;
    h->epc = NULL;
    if (a->st == LLMT_OK && a->world) {
        int split = a->tp > 1 || a->cp > 1 || a->pp > 1;
        rank_fixture_groups g = {0};
        g.tp = a->tp > 1 ? a->world : NULL;
        g.sp = a->sp;
        g.cp = a->cp > 1 ? a->world : NULL;
        g.pp = a->pp > 1 ? a->world : NULL;
        g.dp = !split ? a->world : NULL;
        g.zero = a->zero;
        a->st = rank_fixture_attach(tr, &g);
    }
    if (a->st == LLMT_OK && a->ep > 1) {
        a->st = llmt_comm_split(a->world, a->rank / a->ep, a->rank, &h->epc);
        if (a->st == LLMT_OK)
            a->st = llmt_trainer_set_ep_comm(tr, h->epc);
    }
}

/* The rank's parameters (synced) into a->params, its error where it
 * failed; trainer, model and EP group destroyed. */
static inline void moe_dev_rank_end(moe_dev_rank *a, const moe_dev_handles *h)
{
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(h->tr);
    rank_fixture_close(a->st, a->err, sizeof a->err, h->tr, h->m,
                       a->st == LLMT_OK ? &a->params : NULL, &a->numel);
    llmt_comm_destroy(h->epc);
}

/* The one rank the layouts are compared with: fn on arg (zeroed, size
 * bytes, its moe_dev_rank at off) without a world; its status, one check.
 * Returns whether it ran. */
static inline int moe_dev_ref(void *arg, size_t size, size_t off, void *(*fn)(void *))
{
    memset(arg, 0, size);
    fn(arg);
    const moe_dev_rank *a = (const moe_dev_rank *)((const char *)arg + off);
    CHECK_STATUS(a->st, LLMT_OK);
    return a->st == LLMT_OK;
}

/* Runs fn on W ranks as threads on one world, rank r's moe_dev_rank at
 * off in args (size bytes apart, cap of them zeroed first) the layout
 * lay as rank r of W. */
static inline void moe_dev_run(void *args, size_t size, int cap, size_t off, int W,
                               const moe_dev_rank *lay, void *(*fn)(void *))
{
    memset(args, 0, (size_t)cap * size);
    for (int r = 0; r < W; r++) {
        moe_dev_rank *a = (moe_dev_rank *)((char *)args + (size_t)r * size + off);
        *a = *lay;
        a->rank = r;
        a->W = W;
    }
    rank_fixture_run(args, size, W, 1, off + offsetof(moe_dev_rank, world), fn);
}

/* Rank r of a layout (what: its name for stderr) against the one rank
 * ref: its status (one check; on failure its error to stderr), its losses
 * of steps, and where it holds the whole model its masters within bound,
 * into w. Returns whether it ran. */
static inline int moe_dev_rank_ok(const char *what, int r, const moe_dev_rank *a,
                                  const moe_dev_rank *ref, int steps, int whole, double bound,
                                  rank_fixture_worst *w)
{
    CHECK_STATUS(a->st, LLMT_OK);
    if (a->st != LLMT_OK) {
        fprintf(stderr, "%s rank %d: %s\n", what, r, a->err);
        return 0;
    }
    rank_fixture_losses(w, a->loss, ref->loss, 0, steps, 1);
    if (whole)
        rank_fixture_params_check(w, a->params, a->numel, ref->params, ref->numel, 1, bound);
    return 1;
}

/* pp 2 with layer l on stage l: both stages' parameters against ref's
 * within bound (w->abs, one check), where both stages have them. */
static inline void moe_dev_stages_check(const llmt_model_config *c, const moe_dev_rank *a0,
                                        const moe_dev_rank *a1, const float *ref, double bound,
                                        rank_fixture_worst *w)
{
    if (!a0->params || !a1->params)
        return;
    int first[] = {0, 1, 2};
    float *ps[] = {a0->params, a1->params};
    rank_fixture_stage_diff(c, first, 2, 2, ps, ref, &w->abs);
    CHECK(w->abs <= bound);
}

#endif
