/* What the tensor-parallel tests (test_device_tp.c, test_device_tpdp.c,
 * test_device_sp.c, and the pp and cp tests) share: the model they split,
 * the token stream they train on, and the comparison of a rank's final
 * parameters with the single-rank run's, so every layout is checked on the
 * same problem by the same measure; and for the tp x dp layouts (tpdp,
 * sp) a rank's groups from the plan, its DP group's options and its share
 * of a step's batch. */
#ifndef LLMT_TEST_TP_FIXTURE_H
#define LLMT_TEST_TP_FIXTURE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "llmtrain.h"

/* n tokens of the pseudo-random stream of seed over a vocabulary of v
 * (malloc'd into *in and *tg); about one target in `every` is -1
 * (ignored), the others (token * mul + add) % v, a function of the input
 * so that the loss can fall. */
static inline void tp_fixture_stream(size_t n, int v, uint64_t seed, int every, int mul,
                                     int add, int32_t **in, int32_t **tg)
{
    *in = malloc(n * sizeof **in);
    *tg = malloc(n * sizeof **tg);
    uint64_t s = seed;
    for (size_t i = 0; *in && *tg && i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        (*in)[i] = (int32_t)((s >> 33) % (uint64_t)v);
        (*tg)[i] = (s >> 20) % (uint64_t)every == 0 ? -1 : ((*in)[i] * mul + add) % v;
    }
}

/* The tensor-parallel tests' stream: seed 777, one target in 11 ignored,
 * the others token * 5 + 3. */
static inline void tp_fixture_data(size_t n, int v, int32_t **in, int32_t **tg)
{
    tp_fixture_stream(n, v, 777, 11, 5, 3, in, tg);
}

/* GPT-2, or Llama with kv key/value heads: 2 layers, width 64, 4 heads,
 * vocabulary v padded to 128, sequences of t, seed 5. */
static inline void tp_fixture_config(llmt_model_config *c, int llama, int kv, int v, int t)
{
    llmt_model_config_init(c, sizeof *c);
    c->arch = llama ? LLMT_ARCH_LLAMA : LLMT_ARCH_GPT2;
    c->vocab_size = v;
    c->padded_vocab_size = 128;
    c->max_seq_len = t;
    c->layers = 2;
    c->width = 64;
    c->heads = 4;
    c->kv_heads = llama ? kv : 0;
    c->seed = 5;
}

/* A rank's groups from plan: its coordinates (co), the plan's dp (*dp),
 * its TP group and, where dp > 1, its DP group (*tpc, *dpc); on failure
 * err says why. */
static inline llmt_status tp_fixture_groups(llmt_comm *world, const llmt_plan *plan, int rank,
                                            int32_t *co, int *dp, llmt_comm **tpc,
                                            llmt_comm **dpc, char *err, size_t errn)
{
    int32_t dims[LLMT_PLAN_NDIMS];
    llmt_status st = llmt_plan_coords(plan, rank, co);
    if (st == LLMT_OK)
        st = llmt_plan_degrees(plan, dims);
    if (st == LLMT_OK)
        *dp = dims[LLMT_DIM_DP];
    if (st == LLMT_OK)
        st = llmt_comm_create_plan_group(world, plan, LLMT_DIM_TP, tpc);
    if (st == LLMT_OK && *dp > 1)
        st = llmt_comm_create_plan_group(world, plan, LLMT_DIM_DP, dpc);
    if (st != LLMT_OK)
        snprintf(err, errn, "groups: %s", llmt_comm_last_error(world));
    return st;
}

/* dpc attached to tr as its DP group: ZeRO stage zero, buckets of 16 KiB
 * (several a step). */
static inline llmt_status tp_fixture_set_dp(llmt_trainer *tr, llmt_comm *dpc, int zero)
{
    llmt_dp_opts d;
    llmt_dp_opts_init(&d, sizeof d);
    d.zero_stage = zero;
    d.bucket_bytes = 16 << 10;
    return llmt_trainer_set_comm(tr, dpc, &d);
}

/* Step k's share of DP rank dpr (of dp) in a global step of seqs
 * sequences of t tokens from in/tg. */
static inline llmt_batch tp_fixture_batch(const int32_t *in, const int32_t *tg, int k, int seqs,
                                          int t, int dp, int dpr)
{
    size_t per = (size_t)seqs / dp * t;
    size_t at = (size_t)k * seqs * t + (size_t)dpr * per;
    llmt_batch b = {sizeof b, in + at, tg + at, seqs / dp, t};
    return b;
}

/* A layout's final parameters p against the single-rank run's ref (n
 * elements each; 0 when their counts differ): the relative L2 distance is
 * returned, *wp raised to the largest absolute difference (a NaN shows),
 * *over set to the count of elements more than 1e-5 apart. */
static inline double tp_fixture_param_diff(const float *p, const float *ref, int64_t n,
                                           double *wp, int64_t *over)
{
    double dd = 0.0, rr = 0.0;
    *over = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)p[i] - ref[i]);
        if (!(d <= *wp))
            *wp = d;
        *over += !(d <= 1e-5);
        dd += d * d;
        rr += (double)ref[i] * ref[i];
    }
    return sqrt(dd / rr);
}

#endif
