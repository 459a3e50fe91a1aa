/* What the MoE engine tests (test_moe_pp.c, test_moe_tppp.c, ...) share
 * beside rank_fixture.h: the small Llama they train and the comparison of
 * one MoE layer's tallies with the single-rank run's, so every layout is
 * held to the same bounds by the same code. Header only: each test is one
 * translation unit. */
#ifndef LLMT_TEST_MOE_FIXTURE_H
#define LLMT_TEST_MOE_FIXTURE_H

#include <math.h>
#include <stdint.h>

#include "check.h"
#include "llmtrain.h"

/* n tokens and their targets for the MoE tests: runs of tok*5+1 (a
 * pattern the model learns) broken by a random token one time in 8, every
 * 13th target ignored (-1); seed picks the stream. */
static inline void moe_fixture_data(int32_t *in, int32_t *tg, int n, int vocab, uint64_t seed)
{
    uint64_t s = seed;
    int32_t tok = 0;
    for (int i = 0; i <= n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(s >> 33);
        tok = (r & 7) == 0 ? (int32_t)((r >> 3) % (uint32_t)vocab) : (tok * 5 + 1) % vocab;
        if (i < n)
            in[i] = tok;
        if (i > 0)
            tg[i - 1] = (i % 13 == 5) ? -1 : tok;
    }
}

/* The dense part of the model: Llama of width 32, 4 heads (2 kv), ffn 32,
 * padded vocabulary 64; the MoE fields are the caller's. */
static inline void moe_fixture_llama(llmt_model_config *c, int vocab, int seq, int layers,
                                     uint64_t seed)
{
    llmt_model_config_init(c, sizeof *c);
    c->arch = LLMT_ARCH_LLAMA;
    c->vocab_size = vocab;
    c->padded_vocab_size = 64;
    c->max_seq_len = seq;
    c->layers = layers;
    c->width = 32;
    c->heads = 4;
    c->kv_heads = 2;
    c->ffn_hidden = 32;
    c->seed = seed;
}

/* One MoE layer's last-step tallies (kept per expert of n, dropped, aux and
 * z loss) against the reference's: counts equal, aux and z within 1e-5
 * relative; the larger relative difference raises *worst (a NaN shows). */
static inline void moe_fixture_tallies(const int64_t *counts, int64_t dropped, double aux,
                                       double z, const int64_t *ref_counts, int64_t ref_dropped,
                                       double ref_aux, double ref_z, int n, double *worst)
{
    for (int x = 0; x < n; x++)
        CHECK_EQ_INT(counts[x], ref_counts[x]);
    CHECK_EQ_INT(dropped, ref_dropped);
    double da = fabs(aux - ref_aux) / fabs(ref_aux);
    double dz = fabs(z - ref_z) / fabs(ref_z);
    if (!(fmax(da, dz) <= *worst))
        *worst = fmax(da, dz);
    CHECK(da <= 1e-5 && dz <= 1e-5);
}

#endif
