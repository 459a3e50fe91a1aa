/* What the plan-against-run tests (test_plan_vs_run.c and
 * test_plan_vs_run_cp.c) share: the model and trainer as llmt_job builds
 * them from the spec, a group's per-step collective counters and the
 * rank's state and activation bytes as the planner counts them, so both
 * compare the plan with the same measurements. Ranks run as threads on
 * test/train/rank_fixture.h's runner. Header only. */
#ifndef LLMT_TEST_PLAN_RUN_FIXTURE_H
#define LLMT_TEST_PLAN_RUN_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../train/rank_fixture.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "train/device.h"

/* The model of the spec both tests write (lib/job/job.c's mapping):
 * Llama untied, GPT-2 tied; the vocabulary padded to 64; seed 7. */
static inline void plan_run_model_config(llmt_model_config *c, int llama, int layers, int width,
                                         int heads, int kv, int ffn, int vocab, int seq)
{
    llmt_model_config_init(c, sizeof *c);
    c->arch = llama ? LLMT_ARCH_LLAMA : LLMT_ARCH_GPT2;
    c->layers = layers;
    c->width = width;
    c->heads = heads;
    c->kv_heads = kv;
    c->ffn_hidden = ffn;
    c->vocab_size = vocab;
    c->padded_vocab_size = (vocab + 63) / 64 * 64;
    c->max_seq_len = seq;
    c->tie_embeddings = !llama;
    c->seed = 7;
}

/* The trainer: the public one (fp32 CPU), or the device engine on the
 * bf16 host emulation standing for CUDA. */
static inline llmt_status plan_run_trainer(llmt_model *m, int micro, int accum, int seq,
                                           int recompute, int emul, llmt_trainer **tr)
{
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = micro;
    o.grad_accum = accum;
    o.seq_len = seq;
    o.lr = 1e-3f;
    o.threads = 1;
    o.recompute = recompute;
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

/* Equal but for the rounding of a sum of doubles. */
static inline int plan_run_same(double a, double b)
{
    return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b));
}

#endif
