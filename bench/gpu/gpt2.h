/* GPT-2 training step on the GPU (bench/gpu/gpt2.cu): a second, GPT-2-only
 * copy of the model graph over the CUDA kernels, kept out of the library
 * (issue 15: one graph, lib/train/device.c) and kept here only as the speed
 * reference the engine must match on a GPU (bench_gpt2 --engine trainer
 * against --engine gpt2); delete it once it does. The model, its optimizer
 * state and activations for one (B, T) live on the device;
 * llmt__cuda_gpt2_step runs forward, backward, global-norm clipping and
 * AdamW. bench/gpu/bench_gpt2.c times it against llm.c and PyTorch. */
#ifndef LLMT_CUDA_GPT2_H
#define LLMT_CUDA_GPT2_H

#include "../../cuda/llmt_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llmt__cuda_gpt2_cfg {
    int L, C, nh, V, Vp, maxT; /* model */
    int B, T;                  /* batch this instance is sized for */
    float lr, beta1, beta2, eps, wd, clip;
    uint64_t seed;
} llmt__cuda_gpt2_cfg;

typedef struct llmt__cuda_gpt2 llmt__cuda_gpt2;

/* GPT-2 124M, B=4, T=1024, lr 3e-4, betas (0.9, 0.95), clip 1. */
void llmt__cuda_gpt2_cfg_init(llmt__cuda_gpt2_cfg *c);
llmt_status llmt__cuda_gpt2_create(llmt__cuda_ctx *ctx, const llmt__cuda_gpt2_cfg *cfg,
                                   llmt__cuda_gpt2 **out);
void llmt__cuda_gpt2_destroy(llmt__cuda_gpt2 *g);
size_t llmt__cuda_gpt2_num_params(const llmt__cuda_gpt2 *g);
/* Activation and gradient-scratch bytes planned for (B, T). */
size_t llmt__cuda_gpt2_activation_bytes(const llmt__cuda_gpt2 *g);
/* Replaces the parameters (and resets the optimizer) with n fp32 values in
 * llm.c's order: wte[Vp,C], wpe[maxT,C], then each tensor kind over all
 * layers (ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb,
 * fcprojw, fcprojb), ln_f weight, bias. n must equal num_params (C % 8 == 0). */
llmt_status llmt__cuda_gpt2_load(llmt__cuda_gpt2 *g, const float *flat, size_t n);
/* One step on B*T tokens and targets (device pointers, or host ones when
 * host_inputs). Writes the mean loss and the pre-clip gradient norm
 * (synchronises once, to read them). */
llmt_status llmt__cuda_gpt2_step(llmt__cuda_gpt2 *g, const int32_t *tokens,
                                 const int32_t *targets, int host_inputs, float *loss,
                                 float *grad_norm);

#ifdef __cplusplus
}
#endif

#endif
