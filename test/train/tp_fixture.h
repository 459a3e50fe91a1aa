/* What the tensor-parallel tests (test_device_tp.c, test_device_tpdp.c)
 * share: the model they split and the token stream they train on, so a
 * tp run and a tp x dp run are checked on the same problem. */
#ifndef LLMT_TEST_TP_FIXTURE_H
#define LLMT_TEST_TP_FIXTURE_H

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

#endif
