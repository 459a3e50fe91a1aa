// Flash-style causal attention (online softmax; no T x T matrix is ever
// stored). Forward: a block takes ROWS query rows of one (batch, head), one
// warp per row; key/value tiles of KT rows go through shared memory as fp32,
// lane j scores key j of the tile, the warp folds the tile into running
// (max, sum, output) with lane-owned output channels. The backward recomputes
// the probabilities from the saved log-sum-exp in two kernels: dQ (warp per
// query row, walking key tiles) and dK/dV (warp per key row, walking query
// tiles and, for grouped-query heads, every query head of the group), so no
// atomics are needed and the result is deterministic. CUDA-core fp32 math,
// not tensor cores: see doc/gpu.md for how it compares with PyTorch's SDPA.
#include <math.h>
#include <stdint.h>

#include "../common.cuh"

namespace {

constexpr int ROWS = 8;     /* warps (rows) per block */
constexpr int KT = 32;      /* keys (or queries) per tile: one per lane */
constexpr int HDMAX = 128;
constexpr int HDP = HDMAX + 1; /* padded row: lane-j row reads hit distinct banks */
constexpr int NPL = HDMAX / 32; /* output channels per lane */

__device__ __forceinline__ void load_tile(float (*dst)[HDP], const __nv_bfloat16 *base,
                                          size_t qs, int row0, int nrows, int T,
                                          int hd)
{
    /* rows row0..row0+nrows-1 of a (b) sequence, hd channels, bf16 pairs */
    int half = hd / 2;
    for (int e = threadIdx.x; e < nrows * half; e += blockDim.x) {
        int r = e / half, c = (e % half) * 2;
        int t = row0 + r;
        float2 f = make_float2(0.0f, 0.0f);
        if (t < T) f = __bfloat1622float2(*(const __nv_bfloat162 *)(base + (size_t)t * qs + c));
        dst[r][c] = f.x;
        dst[r][c + 1] = f.y;
    }
}

__device__ __forceinline__ float dot_row(const float *a, const float *b, int hd)
{
    float s0 = 0.0f, s1 = 0.0f;
    for (int d = 0; d < hd; d += 2) {
        s0 += a[d] * b[d];
        s1 += a[d + 1] * b[d + 1];
    }
    return s0 + s1;
}

__global__ void __launch_bounds__(ROWS * 32)
attn_fwd_kernel(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q,
                const __nv_bfloat16 *k, const __nv_bfloat16 *v, size_t qs, int T,
                int nh, int nkv, int hd, float scale)
{
    __shared__ float Qs[ROWS][HDP];
    __shared__ float Ks[KT][HDP];
    __shared__ float Vs[KT][HDP];
    int b = blockIdx.z, h = blockIdx.y, kh = h / (nh / nkv);
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = blockIdx.x * ROWS;
    int t = r0 + w;
    const __nv_bfloat16 *qb = q + (size_t)b * T * qs + (size_t)h * hd;
    const __nv_bfloat16 *kb = k + (size_t)b * T * qs + (size_t)kh * hd;
    const __nv_bfloat16 *vb = v + (size_t)b * T * qs + (size_t)kh * hd;
    load_tile(Qs, qb, qs, r0, ROWS, T, hd);
    float m = -INFINITY, l = 0.0f, o[NPL];
#pragma unroll
    for (int i = 0; i < NPL; i++) o[i] = 0.0f;
    int last = min(T - 1, r0 + ROWS - 1);
    for (int j0 = 0; j0 <= last; j0 += KT) {
        __syncthreads();
        load_tile(Ks, kb, qs, j0, KT, T, hd);
        load_tile(Vs, vb, qs, j0, KT, T, hd);
        __syncthreads();
        if (t >= T || j0 > t) continue;
        int j = j0 + lane;
        float s = j <= t ? dot_row(Qs[w], Ks[lane], hd) * scale : -INFINITY;
        float mt = warp_max(s);
        float mn = fmaxf(m, mt);
        float corr = expf(m - mn);
        float p = j <= t ? expf(s - mn) : 0.0f;
        l = l * corr + warp_sum(p);
        m = mn;
#pragma unroll
        for (int i = 0; i < NPL; i++) o[i] *= corr;
        int jn = min(KT, t - j0 + 1);
        for (int jj = 0; jj < jn; jj++) {
            float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
            for (int i = 0; i < NPL; i++) {
                int d = lane + 32 * i;
                if (d < hd) o[i] += pj * Vs[jj][d];
            }
        }
    }
    if (t >= T) return;
    float inv = 1.0f / l;
    __nv_bfloat16 *orow = out + ((size_t)b * T + t) * nh * hd + (size_t)h * hd;
#pragma unroll
    for (int i = 0; i < NPL; i++) {
        int d = lane + 32 * i;
        if (d < hd) orow[d] = f2bf(o[i] * inv);
    }
    if (lane == 0) lse[((size_t)b * nh + h) * T + t] = m + logf(l);
}

/* Dd[b,h,t] = sum_d dout * out (the softmax backward's row term). */
__global__ void attn_bwd_d_kernel(float *Dd, const __nv_bfloat16 *dout,
                                  const __nv_bfloat16 *out, int B, int T, int nh,
                                  int hd)
{
    int lane = threadIdx.x & 31;
    size_t idx = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (idx >= (size_t)B * T * nh) return;
    int h = (int)(idx % nh);
    size_t bt = idx / nh;
    const __nv_bfloat16 *a = dout + bt * nh * hd + (size_t)h * hd;
    const __nv_bfloat16 *c = out + bt * nh * hd + (size_t)h * hd;
    float s = 0.0f;
    for (int d = lane; d < hd; d += 32) s += bf2f(a[d]) * bf2f(c[d]);
    s = warp_sum(s);
    int b = (int)(bt / T), t = (int)(bt % T);
    if (lane == 0) Dd[((size_t)b * nh + h) * T + t] = s;
}

__global__ void __launch_bounds__(ROWS * 32)
attn_bwd_dq_kernel(__nv_bfloat16 *dq, const __nv_bfloat16 *dout, const float *lse,
                   const float *Dd, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                   const __nv_bfloat16 *v, size_t qs, int T, int nh, int nkv,
                   int hd, float scale)
{
    __shared__ float Qs[ROWS][HDP];
    __shared__ float dOs[ROWS][HDP];
    __shared__ float Ks[KT][HDP];
    __shared__ float Vs[KT][HDP];
    int b = blockIdx.z, h = blockIdx.y, kh = h / (nh / nkv);
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = blockIdx.x * ROWS;
    int t = r0 + w;
    const __nv_bfloat16 *qb = q + (size_t)b * T * qs + (size_t)h * hd;
    const __nv_bfloat16 *kb = k + (size_t)b * T * qs + (size_t)kh * hd;
    const __nv_bfloat16 *vb = v + (size_t)b * T * qs + (size_t)kh * hd;
    load_tile(Qs, qb, qs, r0, ROWS, T, hd);
    load_tile(dOs, dout + (size_t)b * T * nh * hd + (size_t)h * hd, (size_t)nh * hd,
              r0, ROWS, T, hd);
    float L = 0.0f, Dt = 0.0f;
    if (t < T) {
        L = lse[((size_t)b * nh + h) * T + t];
        Dt = Dd[((size_t)b * nh + h) * T + t];
    }
    float acc[NPL];
#pragma unroll
    for (int i = 0; i < NPL; i++) acc[i] = 0.0f;
    int last = min(T - 1, r0 + ROWS - 1);
    for (int j0 = 0; j0 <= last; j0 += KT) {
        __syncthreads();
        load_tile(Ks, kb, qs, j0, KT, T, hd);
        load_tile(Vs, vb, qs, j0, KT, T, hd);
        __syncthreads();
        if (t >= T || j0 > t) continue;
        int j = j0 + lane;
        float ds = 0.0f;
        if (j <= t) {
            float p = expf(dot_row(Qs[w], Ks[lane], hd) * scale - L);
            float dp = dot_row(dOs[w], Vs[lane], hd);
            ds = p * (dp - Dt);
        }
        int jn = min(KT, t - j0 + 1);
        for (int jj = 0; jj < jn; jj++) {
            float dj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
            for (int i = 0; i < NPL; i++) {
                int d = lane + 32 * i;
                if (d < hd) acc[i] += dj * Ks[jj][d];
            }
        }
    }
    if (t >= T) return;
    __nv_bfloat16 *row = dq + ((size_t)b * T + t) * qs + (size_t)h * hd;
#pragma unroll
    for (int i = 0; i < NPL; i++) {
        int d = lane + 32 * i;
        if (d < hd) row[d] = f2bf(acc[i] * scale);
    }
}

__global__ void __launch_bounds__(ROWS * 32)
attn_bwd_dkv_kernel(__nv_bfloat16 *dk, __nv_bfloat16 *dv, const __nv_bfloat16 *dout,
                    const float *lse, const float *Dd, const __nv_bfloat16 *q,
                    const __nv_bfloat16 *k, const __nv_bfloat16 *v, size_t qs,
                    int T, int nh, int nkv, int hd, float scale)
{
    __shared__ float Qs[KT][HDP];
    __shared__ float dOs[KT][HDP];
    __shared__ float Kw[ROWS][HDP];
    __shared__ float Vw[ROWS][HDP];
    __shared__ float Ls[KT], Ds[KT];
    int b = blockIdx.z, kh = blockIdx.y, group = nh / nkv;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = blockIdx.x * ROWS;
    int j = r0 + w; /* this warp's key row */
    load_tile(Kw, k + (size_t)b * T * qs + (size_t)kh * hd, qs, r0, ROWS, T, hd);
    load_tile(Vw, v + (size_t)b * T * qs + (size_t)kh * hd, qs, r0, ROWS, T, hd);
    float dka[NPL], dva[NPL];
#pragma unroll
    for (int i = 0; i < NPL; i++) dka[i] = dva[i] = 0.0f;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        const __nv_bfloat16 *qb = q + (size_t)b * T * qs + (size_t)h * hd;
        const __nv_bfloat16 *db = dout + (size_t)b * T * nh * hd + (size_t)h * hd;
        const float *lb = lse + ((size_t)b * nh + h) * T;
        const float *Db = Dd + ((size_t)b * nh + h) * T;
        for (int i0 = r0; i0 < T; i0 += KT) {
            __syncthreads();
            load_tile(Qs, qb, qs, i0, KT, T, hd);
            load_tile(dOs, db, (size_t)nh * hd, i0, KT, T, hd);
            if (threadIdx.x < KT) {
                int i = i0 + threadIdx.x;
                Ls[threadIdx.x] = i < T ? lb[i] : 0.0f;
                Ds[threadIdx.x] = i < T ? Db[i] : 0.0f;
            }
            __syncthreads();
            if (j >= T) continue;
            int i = i0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (i < T && i >= j) {
                p = expf(dot_row(Kw[w], Qs[lane], hd) * scale - Ls[lane]);
                float dp = dot_row(dOs[lane], Vw[w], hd);
                ds = p * (dp - Ds[lane]);
            }
            int in = min(KT, T - i0);
            for (int ii = 0; ii < in; ii++) {
                float pi = __shfl_sync(0xffffffffu, p, ii);
                float di = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
                for (int x = 0; x < NPL; x++) {
                    int d = lane + 32 * x;
                    if (d < hd) {
                        dva[x] += pi * dOs[ii][d];
                        dka[x] += di * Qs[ii][d];
                    }
                }
            }
        }
    }
    if (j >= T) return;
    __nv_bfloat16 *kr = dk + ((size_t)b * T + j) * qs + (size_t)kh * hd;
    __nv_bfloat16 *vr = dv + ((size_t)b * T + j) * qs + (size_t)kh * hd;
#pragma unroll
    for (int x = 0; x < NPL; x++) {
        int d = lane + 32 * x;
        if (d < hd) {
            kr[d] = f2bf(dka[x] * scale);
            vr[d] = f2bf(dva[x]);
        }
    }
}

llmt_status check_shape(llmt__cuda_ctx *ctx, const char *name, size_t qs, int nh,
                        int nkv, int hd)
{
    if (hd <= 0 || hd > HDMAX || hd % 2 || nkv <= 0 || nh % nkv || qs % 2)
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "cuda: %s: hd=%d (even, <= %d), nh=%d, nkv=%d, qs=%zu "
                             "(even) not supported", name, hd, HDMAX, nh, nkv, qs);
    return LLMT_OK;
}

} // namespace

extern "C" {

llmt_status llmt__cuda_attention_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                     float *lse, const llmt__bf16 *q,
                                     const llmt__bf16 *k, const llmt__bf16 *v,
                                     size_t qs, int B, int T, int nh, int nkv,
                                     int hd)
{
    llmt_status st = check_shape(ctx, "attention_fwd", qs, nh, nkv, hd);
    if (st) return st;
    if (B == 0 || T == 0) return LLMT_OK;
    dim3 grid((T + ROWS - 1) / ROWS, nh, B);
    attn_fwd_kernel<<<grid, ROWS * 32, 0, ctx->compute>>>(
        BF(out), lse, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, hd,
        1.0f / sqrtf((float)hd));
    LLMT_LAUNCHED(ctx, "attention_fwd");
}

llmt_status llmt__cuda_attention_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dq,
                                     llmt__bf16 *dk, llmt__bf16 *dv,
                                     const llmt__bf16 *dout,
                                     const llmt__bf16 *out, const float *lse,
                                     const llmt__bf16 *q, const llmt__bf16 *k,
                                     const llmt__bf16 *v, size_t qs, int B,
                                     int T, int nh, int nkv, int hd)
{
    llmt_status st = check_shape(ctx, "attention_bwd", qs, nh, nkv, hd);
    if (st) return st;
    if (B == 0 || T == 0) return LLMT_OK;
    float *Dd = NULL;
    st = llmt__cuda_alloc(ctx, (void **)&Dd, (size_t)B * nh * T * sizeof(float));
    if (st) return st;
    float scale = 1.0f / sqrtf((float)hd);
    size_t rows = (size_t)B * T * nh;
    attn_bwd_d_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, ctx->compute>>>(
        Dd, CBF(dout), CBF(out), B, T, nh, hd);
    attn_bwd_dq_kernel<<<dim3((T + ROWS - 1) / ROWS, nh, B), ROWS * 32, 0, ctx->compute>>>(
        BF(dq), CBF(dout), lse, Dd, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, hd, scale);
    attn_bwd_dkv_kernel<<<dim3((T + ROWS - 1) / ROWS, nkv, B), ROWS * 32, 0, ctx->compute>>>(
        BF(dk), BF(dv), CBF(dout), lse, Dd, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, hd,
        scale);
    llmt__cuda_free(ctx, Dd);
    LLMT_LAUNCHED(ctx, "attention_bwd");
}

} // extern "C"
