/* What the tensor-parallel tests (test_device_tp.c, test_device_tpdp.c,
 * test_device_sp.c, and the pp and cp tests) share: the model they split,
 * the token stream they train on, and the comparison of a rank's final
 * parameters with the single-rank run's, so every layout is checked on the
 * same problem by the same measure. */
#ifndef LLMT_TEST_TP_FIXTURE_H
#define LLMT_TEST_TP_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "llmtrain.h"

/* n tokens of a fixed pseudo-random stream over a vocabulary of v; about
 * one target in 11 is -1 (ignored), the others a function of the input so
 * that the loss can fall. */
static inline void tp_fixture_data(size_t n, int v, int32_t **in, int32_t **tg)
{
    *in = malloc(n * sizeof **in);
    *tg = malloc(n * sizeof **tg);
    uint64_t s = 777;
    for (size_t i = 0; *in && *tg && i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        (*in)[i] = (int32_t)((s >> 33) % (uint64_t)v);
        (*tg)[i] = (s >> 20) % 11 == 0 ? -1 : ((*in)[i] * 5 + 3) % v;
    }
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
