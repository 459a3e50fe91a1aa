// fp8 cast with transpose: the operands of the fp8 backward GEMMs.
//
// cuBLASLt's fp8 GEMMs take only the "TN" layout (both operands with K
// contiguous), so the data gradient dX = dY W needs W transposed and the
// weight gradient dW = dY^T X needs dY and X transposed, each quantised.
// One pass over a bf16 tensor writes its codes in place order and/or
// transposed (TransformerEngine's cast_transpose does the same), through a
// 64 x 64 tile in shared memory so that both the reads and the transposed
// writes are coalesced. The encoding is quantize_fp8's (optim.cu): x *
// scale in fp32, round to nearest even, saturating. The same read gives
// max |x| (the delayed recipe's amax, recorded while the tensor is
// quantised with an earlier scale): one pass where amax + quantize took
// two.
#include <stdint.h>
#include <cuda_fp8.h>

#include "../common.cuh"

namespace {

constexpr int TILE = 64, THREADS = 256, PAD = 4;

struct alignas(8) bf4 { __nv_bfloat16 v[4]; };

__device__ __forceinline__ uint8_t enc(float a, int e5m2)
{
    return (uint8_t)__nv_cvt_float_to_fp8(a, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
}

/* x [R, C] bf16 -> y [R, C] and yt [C, R] codes, amax[0] = max |x| (zeroed
 * before the launch; each warp's maximum goes in by an integer atomicMax,
 * exact for floats >= 0 and independent of order); C a multiple of 4 (R
 * too when yt is written) and the pointers 8-byte (x) and 4-byte (y, yt)
 * aligned, so that each thread moves four elements at a time. */
__global__ void __launch_bounds__(THREADS)
cast_transpose_kernel(uint8_t *y, uint8_t *yt, float *amax, const __nv_bfloat16 *x,
                      const float *scale, int R, int C, int e5m2)
{
    __shared__ uint8_t tile[TILE][TILE + PAD];
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
    const int lane4 = threadIdx.x % 16, row = threadIdx.x / 16; /* 16 x 4 = 64 wide */
    const float s = scale[0];
    float m = 0.0f; /* fmaxf skips NaN, as llmt__cuda_amax's reduction */
#pragma unroll
    for (int p = 0; p < TILE / 16; p++) {
        int tr = row + 16 * p, r = r0 + tr, c = c0 + 4 * lane4;
        if (r >= R || c >= C) continue;
        bf4 v = *(const bf4 *)(x + (size_t)r * C + c);
        uint32_t packed = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float f = bf2f(v.v[k]);
            uint8_t q = enc(f * s, e5m2);
            m = fmaxf(m, fabsf(f));
            tile[tr][4 * lane4 + k] = q;
            packed |= (uint32_t)q << (8 * k);
        }
        if (y) *(uint32_t *)(y + (size_t)r * C + c) = packed;
    }
    if (amax) {
        m = warp_max(m);
        if ((threadIdx.x & 31) == 0) atomicMax((int *)amax, __float_as_int(m));
    }
    if (!yt) return;
    __syncthreads();
#pragma unroll
    for (int p = 0; p < TILE / 16; p++) {
        int tc = row + 16 * p, c = c0 + tc, r = r0 + 4 * lane4;
        if (c >= C || r >= R) continue;
        uint32_t packed = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) packed |= (uint32_t)tile[4 * lane4 + k][tc] << (8 * k);
        *(uint32_t *)(yt + (size_t)c * R + r) = packed;
    }
}

} // namespace

extern "C" {

llmt_status llmt__cuda_cast_transpose_fp8(llmt__cuda_ctx *ctx, uint8_t *y, uint8_t *yt,
                                          float *amax, const llmt__bf16 *x,
                                          const float *scale, int R, int C, int e5m2)
{
    if (R < 0 || C < 0 || C % 4 || (yt && R % 4))
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "cuda: cast_transpose_fp8: R=%d C=%d (C a multiple of 4, R too "
                             "for the transpose)",
                             R, C);
    if (((uintptr_t)x & 7) || ((uintptr_t)y & 3) || ((uintptr_t)yt & 3))
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "cuda: cast_transpose_fp8: x must be 8-byte and y, yt 4-byte "
                             "aligned");
    if (amax) LLMT_CU(ctx, cudaMemsetAsync(amax, 0, sizeof *amax, ctx->compute));
    if (!R || !C || (!y && !yt && !amax)) return LLMT_OK;
    if ((R + TILE - 1) / TILE > 65535)
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "cuda: cast_transpose_fp8: R=%d rows exceed the grid", R);
    dim3 grid((unsigned)((C + TILE - 1) / TILE), (unsigned)((R + TILE - 1) / TILE));
    cast_transpose_kernel<<<grid, THREADS, 0, ctx->compute>>>(y, yt, amax, CBF(x), scale, R, C,
                                                              e5m2);
    LLMT_LAUNCHED(ctx, "cast_transpose_fp8");
}

} // extern "C"
