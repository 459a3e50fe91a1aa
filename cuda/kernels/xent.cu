// Fused softmax cross-entropy over bf16 logits: one block per row, an online
// max/sum pass, then (when a gradient is wanted) the gradient written over the
// logits in place. The row is re-read from L2 for the second pass.
#include <math.h>
#include <stdint.h>

#include "../common.cuh"

namespace {

struct alignas(16) bf8 { __nv_bfloat16 v[8]; };

__device__ __forceinline__ void ms_merge(float &m, float &s, float m2, float s2)
{
    float mn = fmaxf(m, m2);
    if (mn == -INFINITY) return;
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

constexpr int XT = 512;

__global__ void __launch_bounds__(XT)
xent_kernel(float *losses, __nv_bfloat16 *logits, const int32_t *targets, int N,
            int V, int Vp, float dloss, bool vec)
{
    __shared__ float shm[32], shs[32];
    int row = blockIdx.x;
    __nv_bfloat16 *x = logits + (size_t)row * Vp;
    float m = -INFINITY, s = 0.0f;
    int V8 = vec ? V / 8 : 0;
    for (int c = threadIdx.x; c < V8; c += XT) {
        bf8 a = ((const bf8 *)x)[c];
        float mx = m;
#pragma unroll
        for (int k = 0; k < 8; k++) mx = fmaxf(mx, bf2f(a.v[k]));
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) acc += expf(bf2f(a.v[k]) - mx);
        s = s * expf(m - mx) + acc;
        m = mx;
    }
    for (int c = V8 * 8 + threadIdx.x; c < V; c += XT) {
        float v = bf2f(x[c]);
        float mx = fmaxf(m, v);
        s = s * expf(m - mx) + expf(v - mx);
        m = mx;
    }
    /* warp then block merge of (m, s) */
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_merge(m, s, m2, s2);
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) { shm[wid] = m; shs[wid] = s; }
    __syncthreads();
    m = lane < XT / 32 ? shm[lane] : -INFINITY;
    s = lane < XT / 32 ? shs[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_merge(m, s, m2, s2);
    }
    float lse = m + logf(s);
    int tgt = targets[row];
    if (threadIdx.x == 0) losses[row] = tgt >= 0 ? lse - bf2f(x[tgt]) : 0.0f;
    if (dloss == 0.0f) return;
    __syncthreads(); /* everyone has read x[tgt] before it is overwritten */
    float sc = tgt >= 0 ? dloss : 0.0f;
    if (vec) {
        for (int c = threadIdx.x; c < Vp / 8; c += XT) {
            bf8 a = ((const bf8 *)x)[c], r;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int j = c * 8 + k;
                float p = j < V ? expf(bf2f(a.v[k]) - lse) : 0.0f;
                r.v[k] = f2bf((p - (j == tgt ? 1.0f : 0.0f)) * sc);
            }
            ((bf8 *)x)[c] = r;
        }
    } else {
        for (int c = threadIdx.x; c < Vp; c += XT) {
            float p = c < V ? expf(bf2f(x[c]) - lse) : 0.0f;
            x[c] = f2bf((p - (c == tgt ? 1.0f : 0.0f)) * sc);
        }
    }
}

} // namespace

extern "C" llmt_status llmt__cuda_softmax_xent(llmt__cuda_ctx *ctx, float *losses,
                                               llmt__bf16 *logits,
                                               const int32_t *targets, int N,
                                               int V, int Vp, float dloss)
{
    if (N == 0) return LLMT_OK;
    if (V <= 0 || Vp < V)
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "cuda: softmax_xent: V=%d Vp=%d", V, Vp);
    bool vec = Vp % 8 == 0 && ((uintptr_t)logits & 15) == 0;
    xent_kernel<<<N, XT, 0, ctx->compute>>>(losses, BF(logits), targets, N, V, Vp,
                                            dloss, vec);
    LLMT_LAUNCHED(ctx, "softmax_xent");
}
