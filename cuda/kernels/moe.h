/* The MoE ops of the op table on the GPU (lib/exec/dev.h's moe_*; the
 * plain C reference is lib/exec/moe_ops.c with bf16 storage). bf16 rows,
 * fp32 gate weights and gate gradients, int32 tables, all device memory,
 * on the context's compute stream. These kernels compile but have never
 * run on a GPU: the CUDA engine refuses model.moe until the GPU test
 * gpu-moe-ops (test/gpu/test_gpu_moe_ops.c) has held them to the
 * emulation (doc/moe.md). */
#ifndef LLMT_CUDA_KERNELS_MOE_H
#define LLMT_CUDA_KERNELS_MOE_H

#include "../llmt_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

llmt_status llmt__cuda_moe_gather(llmt__cuda_ctx *ctx, llmt__bf16 *out, const llmt__bf16 *x,
                                  const int32_t *tok, int R, int C);
llmt_status llmt__cuda_moe_gather_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dx,
                                      const llmt__bf16 *dxe, const int32_t *row, int N, int K,
                                      int C);
llmt_status llmt__cuda_moe_combine(llmt__cuda_ctx *ctx, llmt__bf16 *y, const llmt__bf16 *ye,
                                   const int32_t *row, const float *gate, int N, int K, int C);
llmt_status llmt__cuda_moe_combine_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dye, float *dgate,
                                       const llmt__bf16 *dy, const llmt__bf16 *ye,
                                       const int32_t *row, const float *gate, int N, int K,
                                       int C);

#ifdef __cplusplus
}
#endif

#endif
