// The MoE ops on the GPU (moe.h): rows between the tokens' order and the
// experts' packed order. One block per row (or per token choice), threads
// over the channels; every sum is one thread's, in the order of the host
// reference (lib/exec/moe_ops.c): the combine over k, the input gradient
// over the token's packed rows in ascending order, fp32 with the products
// unfused, one rounding at the store; the gate gradient's dot product in
// double, per-thread partial sums reduced in a fixed order (its order
// differs from the host's sequential sum: rounding-level differences).
// Never run on a GPU yet (moe.h).
#include <stdint.h>

#include "../common.cuh"
#include "moe.h"

namespace {

constexpr int MT = 128; /* threads per row block */

__global__ void gather_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *x, const int32_t *tok,
                              int C)
{
    const __nv_bfloat16 *src = x + (size_t)tok[blockIdx.x] * C;
    __nv_bfloat16 *dst = out + (size_t)blockIdx.x * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

__global__ void gather_bwd_kernel(__nv_bfloat16 *dx, const __nv_bfloat16 *dxe,
                                  const int32_t *row, int K, int C)
{
    const int32_t *rw = row + (size_t)blockIdx.x * K;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float s = 0.0f;
        for (int32_t last = -1;;) { /* the token's rows, ascending */
            int32_t r = -1;
            for (int k = 0; k < K; k++)
                if (rw[k] > last && (r < 0 || rw[k] < r)) r = rw[k];
            if (r < 0) break;
            s = __fadd_rn(s, bf2f(dxe[(size_t)r * C + c]));
            last = r;
        }
        dx[(size_t)blockIdx.x * C + c] = f2bf(s);
    }
}

__global__ void combine_kernel(__nv_bfloat16 *y, const __nv_bfloat16 *ye, const int32_t *row,
                               const float *gate, int K, int C)
{
    size_t n = blockIdx.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < K; k++) {
            int32_t r = row[n * K + k];
            if (r >= 0) s = __fadd_rn(s, __fmul_rn(gate[n * K + k], bf2f(ye[(size_t)r * C + c])));
        }
        y[n * C + c] = f2bf(s);
    }
}

/* one block per (token, choice): dye row and the gate's gradient */
__global__ void __launch_bounds__(MT)
combine_bwd_kernel(__nv_bfloat16 *dye, float *dgate, const __nv_bfloat16 *dy,
                   const __nv_bfloat16 *ye, const int32_t *row, const float *gate, int K, int C)
{
    __shared__ double sh[MT];
    size_t i = blockIdx.x, n = i / K;
    int32_t r = row[i];
    double acc = 0.0;
    if (r >= 0) {
        float g = gate[i];
        for (int c = threadIdx.x; c < C; c += MT) {
            float d = bf2f(dy[n * C + c]);
            dye[(size_t)r * C + c] = f2bf(__fmul_rn(g, d));
            acc += (double)d * (double)bf2f(ye[(size_t)r * C + c]);
        }
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int o = MT / 2; o > 0; o >>= 1) { /* fixed order: deterministic */
        if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) dgate[i] = (float)sh[0];
}

llmt_status bad(llmt__cuda_ctx *ctx, const char *op, int a, int b, int c)
{
    return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                         "cuda: %s: sizes %d, %d, %d must be >= 0 (K >= 1)", op, a, b, c);
}

} // namespace

extern "C" llmt_status llmt__cuda_moe_gather(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                             const llmt__bf16 *x, const int32_t *tok, int R,
                                             int C)
{
    if (R < 0 || C < 0) return bad(ctx, "moe_gather", R, C, 1);
    if (R == 0 || C == 0) return LLMT_OK;
    gather_kernel<<<R, MT, 0, ctx->compute>>>(BF(out), CBF(x), tok, C);
    LLMT_LAUNCHED(ctx, "moe_gather");
}

extern "C" llmt_status llmt__cuda_moe_gather_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dx,
                                                 const llmt__bf16 *dxe, const int32_t *row,
                                                 int N, int K, int C)
{
    if (N < 0 || K < 1 || C < 0) return bad(ctx, "moe_gather_bwd", N, K, C);
    if (N == 0 || C == 0) return LLMT_OK;
    gather_bwd_kernel<<<N, MT, 0, ctx->compute>>>(BF(dx), CBF(dxe), row, K, C);
    LLMT_LAUNCHED(ctx, "moe_gather_bwd");
}

extern "C" llmt_status llmt__cuda_moe_combine(llmt__cuda_ctx *ctx, llmt__bf16 *y,
                                              const llmt__bf16 *ye, const int32_t *row,
                                              const float *gate, int N, int K, int C)
{
    if (N < 0 || K < 1 || C < 0) return bad(ctx, "moe_combine", N, K, C);
    if (N == 0 || C == 0) return LLMT_OK;
    combine_kernel<<<N, MT, 0, ctx->compute>>>(BF(y), CBF(ye), row, gate, K, C);
    LLMT_LAUNCHED(ctx, "moe_combine");
}

extern "C" llmt_status llmt__cuda_moe_combine_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dye,
                                                  float *dgate, const llmt__bf16 *dy,
                                                  const llmt__bf16 *ye, const int32_t *row,
                                                  const float *gate, int N, int K, int C)
{
    if (N < 0 || K < 1 || C < 0) return bad(ctx, "moe_combine_bwd", N, K, C);
    if (N == 0) return LLMT_OK;
    combine_bwd_kernel<<<(unsigned)((size_t)N * K), MT, 0, ctx->compute>>>(
        BF(dye), dgate, CBF(dy), CBF(ye), row, gate, K, C);
    LLMT_LAUNCHED(ctx, "moe_combine_bwd");
}
