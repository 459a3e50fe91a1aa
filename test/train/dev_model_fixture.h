/* What the device engine's single-trainer tests on the emulation
 * (test_device_mem.c, test_device_syncs.c) share: their small GPT-2 or
 * Llama and a device engine trainer for it on an op table standing for
 * CUDA, made and torn down the same way (a step: rank_fixture_step); and
 * the cpu|emul argument of the tests run on either table
 * (test_device_tp.c, _sp.c, _tpdp.c). Header only: each test is one
 * translation unit. */
#ifndef LLMT_TEST_DEV_MODEL_FIXTURE_H
#define LLMT_TEST_DEV_MODEL_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "exec/dev.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "train/device.h"

/* main's argument: "cpu" (the default: the fp32 host ops) or "emul" (the
 * bf16 emulation, *bf16 set) into *ops; -1 after the usage line of prog
 * for anything else. */
static inline int dev_model_mode(int argc, char **argv, const char *prog,
                                 const llmt__dev_ops **ops, int *bf16)
{
    const char *mode = argc > 1 ? argv[1] : "cpu";
    if (!strcmp(mode, "cpu")) {
        *ops = llmt__dev_cpu();
    } else if (!strcmp(mode, "emul")) {
        *ops = llmt__dev_emul();
        *bf16 = 1;
    } else {
        fprintf(stderr, "usage: %s cpu|emul\n", prog);
        return -1;
    }
    return 0;
}

/* GPT-2 (4 kv heads) or Llama (2): width 64, 4 heads, a vocabulary of 97
 * padded to 128, seq tokens; ffn hidden units (0: the model's default)
 * and seed the caller's. */
static inline void dev_model_config(llmt_model_config *mc, int llama, int layers, int seq,
                                    int ffn, uint64_t seed)
{
    llmt_model_config_init(mc, sizeof *mc);
    mc->arch = llama ? LLMT_ARCH_LLAMA : LLMT_ARCH_GPT2;
    mc->vocab_size = 97;
    mc->padded_vocab_size = 128;
    mc->max_seq_len = seq;
    mc->layers = layers;
    mc->width = 64;
    mc->heads = 4;
    mc->kv_heads = llama ? 2 : 0;
    if (ffn > 0)
        mc->ffn_hidden = ffn;
    mc->seed = seed;
}

/* The options both train with: micro-batches of micro sequences of seq
 * tokens, accum a step, lr 1e-3, one thread, on a device (the op table
 * stands for CUDA); the rest llmt_trainer_opts_init's. */
static inline void dev_model_opts(llmt_trainer_opts *o, int micro, int accum, int seq)
{
    rank_fixture_opts_base(o, micro, accum, seq, 1e-3f);
    o->device = LLMT_DEVICE_CUDA;
}

/* The model of mc in ctx and a device engine trainer for it on ops with
 * o. Returns 0, or -1 with nothing left to destroy (a trainer's failure
 * to stderr). */
static inline int dev_model_open(llmt_context *ctx, const llmt_model_config *mc,
                                 const llmt_trainer_opts *o, const llmt__dev_ops *ops,
                                 llmt_model **m, llmt_trainer **tr)
{
    *m = NULL;
    *tr = NULL;
    if (llmt_model_create(ctx, mc, m) != LLMT_OK)
        return -1;
    if (llmt__trainer_create_dev(*m, o, ops, tr) != LLMT_OK) {
        fprintf(stderr, "trainer: %s\n", llmt_model_last_error(*m));
        llmt_model_destroy(*m);
        *m = NULL;
        return -1;
    }
    return 0;
}

#endif
