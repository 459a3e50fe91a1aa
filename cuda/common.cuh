// Shared by the CUDA backend's .cu files: the context struct and helpers.
#ifndef LLMT_CUDA_COMMON_CUH
#define LLMT_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cublasLt.h>

extern "C" {
#include "../lib/core/internal.h"
}
#include "llmt_cuda.h"

struct llmt__cuda_block {
    void *ptr;
    size_t size;
    int in_use;
};

/* One GEMM configuration: its cuBLASLt descriptors and the heuristic's
 * algorithm, kept for the context's life (cuda/gemm/gemm.cu). */
struct llmt__gemm_cache_entry {
    uint64_t key[4];
    int used, ok;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};
/* Frees the cached descriptors (called by llmt__cuda_ctx_destroy). */
void llmt__cuda_gemm_cache_clear(llmt__cuda_ctx *ctx);

#define LLMT_GEMM_CACHE_SLOTS 512

struct llmt__cuda_ctx {
    llmt_err err;
    int device, sm, num_sms, deterministic;
    int attn_scalar; /* 1: CUDA-core attention kernels only, 2: tensor cores
                        through shared memory only, 3: the mma.sync kernels
                        (attention_mma.cu) where they apply (tests, bench) */
    uint64_t attn_mma_calls; /* calls the mma.sync kernels took: tests check
                                the variant they asked for really ran */
    uint64_t attn_mmaq_calls; /* of those, backward calls with dQ atomics */
    int attn_layout; /* wmma fragment layout probe: 0 not run, 1 ok, 2 no */
    int attn_cfg[2][4]; /* attention_mma.cu's tile configuration of each kind
                           (forward, dQ, dK/dV, dK/dV with dQ atomics) for
                           hd 64 and 128; 0 the default
                           (llmt__cuda_attn_mma_set_cfg) */
    int norm_cfg[2]; /* norm.cu's variant of the forward and backward fast
                        paths, 0 the default (llmt__cuda_norm_set_cfg) */
    cudaStream_t compute, comm;
    cudaEvent_t ev_compute, ev_comm;
    cublasLtHandle_t lt;
    void *workspace;
    size_t workspace_size;
    float *scale_slots; /* 2 x 16 bytes past the workspace: fp8 scales that
                           were not 16-byte aligned, copied (cuBLASLt
                           refuses such scale pointers with status 15) */
    llmt__gemm_cache_entry *gemm_cache;
    uint64_t gemm_lookups, gemm_misses;
    /* caching allocator */
    llmt__cuda_block *blocks;
    int nblocks, cap_blocks;
    size_t in_use, cached, peak, device_bytes;
    uint64_t mallocs, hits;
};

#define LLMT_CU(ctx, call)                                                    \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        if (e_ != cudaSuccess)                                                \
            return llmt__err_set(&(ctx)->err, LLMT_ERR_CUDA, "cuda: %s: %s",  \
                                 #call, cudaGetErrorString(e_));              \
    } while (0)

/* After a launch: report configuration errors at once. */
#define LLMT_LAUNCHED(ctx, name)                                              \
    do {                                                                      \
        cudaError_t e_ = cudaGetLastError();                                  \
        if (e_ != cudaSuccess)                                                \
            return llmt__err_set(&(ctx)->err, LLMT_ERR_CUDA,                  \
                                 "cuda: launch %s: %s", name,                 \
                                 cudaGetErrorString(e_));                     \
        return LLMT_OK;                                                       \
    } while (0)

static inline __device__ float bf2f(__nv_bfloat16 x) { return __bfloat162float(x); }
static inline __device__ __nv_bfloat16 f2bf(float x) { return __float2bfloat16_rn(x); }
#define BF(p) ((__nv_bfloat16 *)(p))
#define CBF(p) ((const __nv_bfloat16 *)(p))

static inline unsigned llmt__grid(size_t n, unsigned block, unsigned cap)
{
    size_t g = (n + block - 1) / block;
    if (g < 1) g = 1;
    return (unsigned)(g > cap ? cap : g);
}

/* Warp and block reductions (fixed shuffle order: deterministic). */
static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* All threads get the block-wide sum; blockDim.x a multiple of 32, <= 1024. */
static __device__ __forceinline__ float block_sum(float v, float *sh32)
{
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh32[wid] = v;
    __syncthreads();
    v = lane < nw ? sh32[lane] : 0.0f;
    return warp_sum(v);
}
static __device__ __forceinline__ float block_max(float v, float *sh32)
{
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh32[wid] = v;
    __syncthreads();
    v = lane < nw ? sh32[lane] : -INFINITY;
    return warp_max(v);
}

#endif
