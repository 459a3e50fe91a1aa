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

#include <mma.h>

#include "../common.cuh"
#include "attention_mma.h"

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

/* The same with G = hd/8 lanes a row, 16 bytes of each operand a lane
 * (hd/8 a power of two up to 32, 16-byte aligned rows). A warp a row with
 * two 2-byte loads a lane ran at ~1.1 TB/s (60 us a call at Llama 1B's
 * 32 x 64 heads for B 4: ncu, H200, 2026-11-27). */
template <int G>
__global__ void attn_bwd_d_vec(float *Dd, const __nv_bfloat16 *dout, const __nv_bfloat16 *out,
                               int B, int T, int nh)
{
    const size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t row = gid / G, rows = (size_t)B * T * nh;
    const int part = (int)(gid % G);
    float s = 0.0f;
    if (row < rows) {
        const uint4 a = ((const uint4 *)dout)[row * G + part];
        const uint4 c = ((const uint4 *)out)[row * G + part];
        const __nv_bfloat162 *a2 = (const __nv_bfloat162 *)&a, *c2 = (const __nv_bfloat162 *)&c;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 x = __bfloat1622float2(a2[k]), y = __bfloat1622float2(c2[k]);
            s += x.x * y.x + x.y * y.y;
        }
    }
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (row < rows && part == 0) {
        const int h = (int)(row % nh);
        const size_t bt = row / nh;
        Dd[((size_t)(bt / T) * nh + h) * T + bt % T] = s;
    }
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

/* ---- tensor-core path (wmma bf16 16x16x16, fp32 accumulate) --------------
 * For hd in {32, 64, 128}, qs % 8 == 0 and 16-byte aligned bases. Blocks of
 * 4 warps take 64 rows (queries in the forward and dQ, keys in dK/dV), each
 * warp 16 of them; the other side streams through shared memory in tiles of
 * 64. Score tiles go through shared memory (fp32) for the softmax, the
 * probabilities back as bf16 operands. Exponentials in base 2. */
namespace tc {

using namespace nvcuda;
constexpr int BR = 64, BC = 64, NW = 4;
constexpr float LOG2E = 1.4426950408889634f;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> FragBr;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> FragBc;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

template <int HD> struct L {
    static constexpr int LD = HD + 8;      /* bf16 tiles */
    static constexpr int SLD = BC + 4;     /* fp32 score tiles */
    static constexpr int PLD = BC + 8;     /* bf16 probability tiles */
    static constexpr int OLD = HD + 4;     /* fp32 output tiles */
};

/* rows r0.. of a [T, *] bf16 matrix (row stride ld elements) into dst[64][LD] */
template <int HD>
__device__ __forceinline__ void load64(__nv_bfloat16 *dst, const __nv_bfloat16 *base,
                                       size_t ld, int r0, int T)
{
    constexpr int CH = HD / 8; /* 16-byte chunks per row */
    for (int e = threadIdx.x; e < 64 * CH; e += blockDim.x) {
        int r = e / CH, c = (e % CH) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r0 + r < T) v = *(const uint4 *)(base + (size_t)(r0 + r) * ld + c);
        *(uint4 *)(dst + r * L<HD>::LD + c) = v;
    }
}

/* C[16 x 64] (fp32, ld SLD) = A[16 x HD] (row-major) . B[64 x HD]^T */
template <int HD>
__device__ __forceinline__ void mm_abt(float *C, const __nv_bfloat16 *A, const __nv_bfloat16 *B)
{
#pragma unroll
    for (int n = 0; n < BC / 16; n++) {
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int k = 0; k < HD / 16; k++) {
            FragA a;
            FragBc b;
            wmma::load_matrix_sync(a, A + k * 16, L<HD>::LD);
            wmma::load_matrix_sync(b, B + n * 16 * L<HD>::LD + k * 16, L<HD>::LD);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(C + n * 16, acc, L<HD>::SLD, wmma::mem_row_major);
    }
}

template <int HD>
__global__ void __launch_bounds__(NW * 32)
fwd(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
    const __nv_bfloat16 *v, size_t qs, int T, int nh, int nkv, float scale)
{
    typedef L<HD> Ly;
    extern __shared__ __align__(16) unsigned char smem[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smem;
    __nv_bfloat16 *Ks = Qs + BR * Ly::LD;
    __nv_bfloat16 *Vs = Ks + BC * Ly::LD;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sf = (float *)(Vs + BC * Ly::LD) + w * (16 * Ly::SLD + 16 * Ly::OLD);
    float *Of = Sf + 16 * Ly::SLD;
    __nv_bfloat16 *Pb = (__nv_bfloat16 *)((float *)(Vs + BC * Ly::LD) + NW * (16 * Ly::SLD + 16 * Ly::OLD)) + w * 16 * Ly::PLD;
    int b = blockIdx.z, h = blockIdx.y, kh = h / (nh / nkv);
    int q0 = (gridDim.x - 1 - blockIdx.x) * BR; /* longest rows first */
    const __nv_bfloat16 *qb = q + (size_t)b * T * qs + (size_t)h * HD;
    const __nv_bfloat16 *kb = k + (size_t)b * T * qs + (size_t)kh * HD;
    const __nv_bfloat16 *vb = v + (size_t)b * T * qs + (size_t)kh * HD;
    load64<HD>(Qs, qb, qs, q0, T);
    for (int i = lane; i < 16 * Ly::OLD; i += 32) Of[i] = 0.0f;
    int r = lane >> 1, half = lane & 1;
    int qi = q0 + w * 16 + r;
    float m = -INFINITY, l = 0.0f;
    const float sc = scale * LOG2E;
    int last = min(T - 1, q0 + BR - 1);
    for (int j0 = 0; j0 <= last; j0 += BC) {
        __syncthreads();
        load64<HD>(Ks, kb, qs, j0, T);
        load64<HD>(Vs, vb, qs, j0, T);
        __syncthreads();
        if (q0 + w * 16 >= T || j0 > q0 + w * 16 + 15) continue; /* warp-uniform */
        mm_abt<HD>(Sf, Qs + w * 16 * Ly::LD, Ks);
        __syncwarp();
        float mt = -INFINITY;
        float *srow = Sf + r * Ly::SLD + half * 32;
        for (int c = 0; c < 32; c++) {
            int key = j0 + half * 32 + c;
            float s = (key <= qi && key < T) ? srow[c] * sc : -INFINITY;
            srow[c] = s;
            mt = fmaxf(mt, s);
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        float mn = fmaxf(m, mt);
        float corr = mn == -INFINITY ? 1.0f : exp2f(m - mn);
        float ps = 0.0f;
        __nv_bfloat16 *prow = Pb + r * Ly::PLD + half * 32;
        for (int c = 0; c < 32; c++) {
            float p = mn == -INFINITY ? 0.0f : exp2f(srow[c] - mn);
            __nv_bfloat16 pb = f2bf(p);
            prow[c] = pb;
            ps += bf2f(pb);
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        l = l * corr + ps;
        m = mn;
        float *orow = Of + r * Ly::OLD + half * (HD / 2);
        for (int c = 0; c < HD / 2; c++) orow[c] *= corr;
        __syncwarp();
#pragma unroll
        for (int n = 0; n < HD / 16; n++) {
            FragC acc;
            wmma::load_matrix_sync(acc, Of + n * 16, Ly::OLD, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {
                FragA a;
                FragBr bb;
                wmma::load_matrix_sync(a, Pb + kk * 16, Ly::PLD);
                wmma::load_matrix_sync(bb, Vs + kk * 16 * Ly::LD + n * 16, Ly::LD);
                wmma::mma_sync(acc, a, bb, acc);
            }
            wmma::store_matrix_sync(Of + n * 16, acc, Ly::OLD, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (qi >= T) return;
    float inv = 1.0f / l;
    __nv_bfloat16 *og = out + ((size_t)b * T + qi) * nh * HD + (size_t)h * HD + half * (HD / 2);
    const float *orow = Of + r * Ly::OLD + half * (HD / 2);
    for (int c = 0; c < HD / 2; c += 2)
        *(__nv_bfloat162 *)(og + c) = __floats2bfloat162_rn(orow[c] * inv, orow[c + 1] * inv);
    if (half == 0) lse[((size_t)b * nh + h) * T + qi] = (m + log2f(l)) / LOG2E;
}

template <int HD> constexpr size_t fwd_smem()
{
    return (size_t)(BR + 2 * BC) * L<HD>::LD * 2 +
           (size_t)NW * (16 * L<HD>::SLD + 16 * L<HD>::OLD) * 4 + (size_t)NW * 16 * L<HD>::PLD * 2;
}

/* dQ: warp w owns query rows q0+16w..; loops over key tiles to the diagonal. */
template <int HD>
__global__ void __launch_bounds__(NW * 32)
bwd_dq(__nv_bfloat16 *dq, const __nv_bfloat16 *dout, const float *lse, const float *Dd,
       const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v, size_t qs,
       int T, int nh, int nkv, float scale)
{
    typedef L<HD> Ly;
    extern __shared__ __align__(16) unsigned char smem[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smem;
    __nv_bfloat16 *dOs = Qs + BR * Ly::LD;
    __nv_bfloat16 *Ks = dOs + BR * Ly::LD;
    __nv_bfloat16 *Vs = Ks + BC * Ly::LD;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sf = (float *)(Vs + BC * Ly::LD) + w * 2 * 16 * Ly::SLD;
    float *dPf = Sf + 16 * Ly::SLD;
    __nv_bfloat16 *dSb = (__nv_bfloat16 *)((float *)(Vs + BC * Ly::LD) + NW * 2 * 16 * Ly::SLD) + w * 16 * Ly::PLD;
    int b = blockIdx.z, h = blockIdx.y, kh = h / (nh / nkv);
    int q0 = (gridDim.x - 1 - blockIdx.x) * BR;
    const __nv_bfloat16 *kb = k + (size_t)b * T * qs + (size_t)kh * HD;
    const __nv_bfloat16 *vb = v + (size_t)b * T * qs + (size_t)kh * HD;
    load64<HD>(Qs, q + (size_t)b * T * qs + (size_t)h * HD, qs, q0, T);
    load64<HD>(dOs, dout + (size_t)b * T * nh * HD + (size_t)h * HD, (size_t)nh * HD, q0, T);
    int r = lane >> 1, half = lane & 1;
    int qi = q0 + w * 16 + r;
    const float sc = scale * LOG2E;
    float L2 = 0.0f, Dt = 0.0f;
    if (qi < T) {
        L2 = lse[((size_t)b * nh + h) * T + qi] * LOG2E;
        Dt = Dd[((size_t)b * nh + h) * T + qi];
    }
    FragC acc[HD / 16];
#pragma unroll
    for (int n = 0; n < HD / 16; n++) wmma::fill_fragment(acc[n], 0.0f);
    int last = min(T - 1, q0 + BR - 1);
    for (int j0 = 0; j0 <= last; j0 += BC) {
        __syncthreads();
        load64<HD>(Ks, kb, qs, j0, T);
        load64<HD>(Vs, vb, qs, j0, T);
        __syncthreads();
        if (q0 + w * 16 >= T || j0 > q0 + w * 16 + 15) continue;
        mm_abt<HD>(Sf, Qs + w * 16 * Ly::LD, Ks);
        mm_abt<HD>(dPf, dOs + w * 16 * Ly::LD, Vs);
        __syncwarp();
        const float *srow = Sf + r * Ly::SLD + half * 32, *prow = dPf + r * Ly::SLD + half * 32;
        __nv_bfloat16 *drow = dSb + r * Ly::PLD + half * 32;
        for (int c = 0; c < 32; c++) {
            int key = j0 + half * 32 + c;
            float ds = 0.0f;
            if (key <= qi && key < T && qi < T) {
                float p = exp2f(srow[c] * sc - L2);
                ds = p * (prow[c] - Dt);
            }
            drow[c] = f2bf(ds);
        }
        __syncwarp();
#pragma unroll
        for (int n = 0; n < HD / 16; n++)
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {
                FragA a;
                FragBr bb;
                wmma::load_matrix_sync(a, dSb + kk * 16, Ly::PLD);
                wmma::load_matrix_sync(bb, Ks + kk * 16 * Ly::LD + n * 16, Ly::LD);
                wmma::mma_sync(acc[n], a, bb, acc[n]);
            }
    }
    /* out through this warp's Sf area (16 x SLD >= 16 x HD floats when HD <= 64;
     * for HD = 128 use Sf and dPf back to back: 2 * 16 * 68 >= 16 * 128) */
    __syncwarp();
    float *Of = Sf;
    constexpr int OLD2 = HD;
#pragma unroll
    for (int n = 0; n < HD / 16; n++)
        wmma::store_matrix_sync(Of + n * 16, acc[n], OLD2, wmma::mem_row_major);
    __syncwarp();
    if (qi >= T) return;
    __nv_bfloat16 *g = dq + ((size_t)b * T + qi) * qs + (size_t)h * HD + half * (HD / 2);
    const float *orow = Of + r * OLD2 + half * (HD / 2);
    for (int c = 0; c < HD / 2; c += 2)
        *(__nv_bfloat162 *)(g + c) = __floats2bfloat162_rn(orow[c] * scale, orow[c + 1] * scale);
}

template <int HD> constexpr size_t dq_smem()
{
    return (size_t)(2 * BR + 2 * BC) * L<HD>::LD * 2 + (size_t)NW * 2 * 16 * L<HD>::SLD * 4 +
           (size_t)NW * 16 * L<HD>::PLD * 2;
}

/* dK, dV: warp w owns key rows j0+16w..; loops over the query heads of the
 * group and the query tiles from the diagonal on. */
template <int HD>
__global__ void __launch_bounds__(NW * 32)
bwd_dkv(__nv_bfloat16 *dk, __nv_bfloat16 *dv, const __nv_bfloat16 *dout, const float *lse,
        const float *Dd, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
        const __nv_bfloat16 *v, size_t qs, int T, int nh, int nkv, float scale)
{
    typedef L<HD> Ly;
    extern __shared__ __align__(16) unsigned char smem[];
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)smem;
    __nv_bfloat16 *Vs = Ks + BR * Ly::LD;
    __nv_bfloat16 *Qs = Vs + BR * Ly::LD;
    __nv_bfloat16 *dOs = Qs + BC * Ly::LD;
    float *Ls = (float *)(dOs + BC * Ly::LD);
    float *Ds = Ls + BC;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *St = Ds + BC + w * 2 * 16 * Ly::SLD;
    float *dPt = St + 16 * Ly::SLD;
    __nv_bfloat16 *Pb = (__nv_bfloat16 *)(Ds + BC + NW * 2 * 16 * Ly::SLD) + w * 2 * 16 * Ly::PLD;
    __nv_bfloat16 *dSb = Pb + 16 * Ly::PLD;
    int b = blockIdx.z, kh = blockIdx.y, group = nh / nkv;
    int j0 = (gridDim.x - 1 - blockIdx.x) * BR;
    load64<HD>(Ks, k + (size_t)b * T * qs + (size_t)kh * HD, qs, j0, T);
    load64<HD>(Vs, v + (size_t)b * T * qs + (size_t)kh * HD, qs, j0, T);
    int r = lane >> 1, half = lane & 1;
    int kj = j0 + w * 16 + r;
    const float sc = scale * LOG2E;
    FragC adk[HD / 16], adv[HD / 16];
#pragma unroll
    for (int n = 0; n < HD / 16; n++) {
        wmma::fill_fragment(adk[n], 0.0f);
        wmma::fill_fragment(adv[n], 0.0f);
    }
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        const __nv_bfloat16 *qb = q + (size_t)b * T * qs + (size_t)h * HD;
        const __nv_bfloat16 *db = dout + (size_t)b * T * nh * HD + (size_t)h * HD;
        const float *lb = lse + ((size_t)b * nh + h) * T;
        const float *Db = Dd + ((size_t)b * nh + h) * T;
        for (int i0 = j0; i0 < T; i0 += BC) {
            __syncthreads();
            load64<HD>(Qs, qb, qs, i0, T);
            load64<HD>(dOs, db, (size_t)nh * HD, i0, T);
            for (int e = threadIdx.x; e < BC; e += blockDim.x) {
                Ls[e] = i0 + e < T ? lb[i0 + e] * LOG2E : 0.0f;
                Ds[e] = i0 + e < T ? Db[i0 + e] : 0.0f;
            }
            __syncthreads();
            if (j0 + w * 16 >= T) continue;
            /* S^T [16 keys x 64 queries], dP^T = V dO^T */
            mm_abt<HD>(St, Ks + w * 16 * Ly::LD, Qs);
            mm_abt<HD>(dPt, Vs + w * 16 * Ly::LD, dOs);
            __syncwarp();
            const float *srow = St + r * Ly::SLD + half * 32, *prow = dPt + r * Ly::SLD + half * 32;
            __nv_bfloat16 *pr = Pb + r * Ly::PLD + half * 32, *dr = dSb + r * Ly::PLD + half * 32;
            for (int c = 0; c < 32; c++) {
                int qi = i0 + half * 32 + c;
                float p = 0.0f, ds = 0.0f;
                if (qi >= kj && qi < T && kj < T) {
                    p = exp2f(srow[c] * sc - Ls[half * 32 + c]);
                    ds = p * (prow[c] - Ds[half * 32 + c]);
                }
                pr[c] = f2bf(p);
                dr[c] = f2bf(ds);
            }
            __syncwarp();
#pragma unroll
            for (int n = 0; n < HD / 16; n++)
#pragma unroll
                for (int kk = 0; kk < BC / 16; kk++) {
                    FragA a, a2;
                    FragBr bq, bo;
                    wmma::load_matrix_sync(a, Pb + kk * 16, Ly::PLD);
                    wmma::load_matrix_sync(bo, dOs + kk * 16 * Ly::LD + n * 16, Ly::LD);
                    wmma::mma_sync(adv[n], a, bo, adv[n]);
                    wmma::load_matrix_sync(a2, dSb + kk * 16, Ly::PLD);
                    wmma::load_matrix_sync(bq, Qs + kk * 16 * Ly::LD + n * 16, Ly::LD);
                    wmma::mma_sync(adk[n], a2, bq, adk[n]);
                }
        }
    }
    __syncwarp();
    float *Of = St; /* 2 * 16 * SLD floats >= 16 * HD for HD <= 128 */
#pragma unroll
    for (int pass = 0; pass < 2; pass++) {
#pragma unroll
        for (int n = 0; n < HD / 16; n++)
            wmma::store_matrix_sync(Of + n * 16, pass ? adv[n] : adk[n], HD, wmma::mem_row_major);
        __syncwarp();
        if (kj < T) {
            __nv_bfloat16 *g = (pass ? dv : dk) + ((size_t)b * T + kj) * qs + (size_t)kh * HD + half * (HD / 2);
            const float *orow = Of + r * HD + half * (HD / 2);
            float s = pass ? 1.0f : scale;
            for (int c = 0; c < HD / 2; c += 2)
                *(__nv_bfloat162 *)(g + c) = __floats2bfloat162_rn(orow[c] * s, orow[c + 1] * s);
        }
        __syncwarp();
    }
}

template <int HD> constexpr size_t dkv_smem()
{
    return (size_t)(2 * BR + 2 * BC) * L<HD>::LD * 2 + 2 * BC * 4 +
           (size_t)NW * 2 * 16 * L<HD>::SLD * 4 + (size_t)NW * 2 * 16 * L<HD>::PLD * 2;
}

template <int HD>
llmt_status run_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out, float *lse, const llmt__bf16 *q,
                    const llmt__bf16 *k, const llmt__bf16 *v, size_t qs, int B, int T, int nh,
                    int nkv)
{
    size_t sm = fwd_smem<HD>();
    LLMT_CU(ctx, cudaFuncSetAttribute(fwd<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    dim3 grid((T + BR - 1) / BR, nh, B);
    fwd<HD><<<grid, NW * 32, sm, ctx->compute>>>(BF(out), lse, CBF(q), CBF(k), CBF(v), qs, T, nh,
                                                 nkv, 1.0f / sqrtf((float)HD));
    LLMT_LAUNCHED(ctx, "attention_fwd (tensor cores)");
}

template <int HD>
llmt_status run_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dq, llmt__bf16 *dk, llmt__bf16 *dv,
                    const llmt__bf16 *dout, const float *lse, const float *Dd,
                    const llmt__bf16 *q, const llmt__bf16 *k, const llmt__bf16 *v, size_t qs,
                    int B, int T, int nh, int nkv)
{
    float scale = 1.0f / sqrtf((float)HD);
    size_t s1 = dq_smem<HD>(), s2 = dkv_smem<HD>();
    LLMT_CU(ctx, cudaFuncSetAttribute(bwd_dq<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1));
    LLMT_CU(ctx, cudaFuncSetAttribute(bwd_dkv<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2));
    bwd_dq<HD><<<dim3((T + BR - 1) / BR, nh, B), NW * 32, s1, ctx->compute>>>(
        BF(dq), CBF(dout), lse, Dd, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, scale);
    bwd_dkv<HD><<<dim3((T + BR - 1) / BR, nkv, B), NW * 32, s2, ctx->compute>>>(
        BF(dk), BF(dv), CBF(dout), lse, Dd, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, scale);
    LLMT_LAUNCHED(ctx, "attention_bwd (tensor cores)");
}

bool usable(int hd, size_t qs, const void *a, const void *b, const void *c, const void *d)
{
    uintptr_t al = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d;
    return (hd == 32 || hd == 64 || hd == 128) && qs % 8 == 0 && (al & 15) == 0;
}

} // namespace tc

/* ---- register-resident variant (FA2 style) --------------------------------
 * Uses the accumulator and matrix_a fragment layouts of wmma 16x16x16 on
 * sm_80+ (element i of lane: row g + 8*((i>>1)&1), column 2t + (i&1) +
 * 8*(i>>2), g = lane/4, t = lane%4), which lets the softmax run on the
 * score fragments in registers and turn them into the next product's A
 * operand without a trip through shared memory. The layout is not part of
 * the wmma contract, so a probe kernel checks it once per context; on a
 * mismatch the shared-memory kernels above are used. */
namespace tcr {
using namespace tc;

__device__ __forceinline__ int frow(int lane, int i) { return (lane >> 2) + 8 * ((i >> 1) & 1); }
__device__ __forceinline__ int fcol(int lane, int i) { return (lane & 3) * 2 + (i & 1) + 8 * (i >> 2); }

__global__ void probe(int *bad)
{
    __shared__ float f[256];
    __shared__ __nv_bfloat16 hb[256];
    int lane = threadIdx.x;
    for (int e = lane; e < 256; e += 32) { f[e] = (float)e; hb[e] = __float2bfloat16((float)e); }
    __syncwarp();
    FragC c;
    FragA a;
    wmma::load_matrix_sync(c, f, 16, wmma::mem_row_major);
    wmma::load_matrix_sync(a, hb, 16);
    int err = c.num_elements != 8 || a.num_elements != 8;
    for (int i = 0; i < 8 && !err; i++) {
        float want = (float)(frow(lane, i) * 16 + fcol(lane, i));
        if (c.x[i] != want || __bfloat162float(a.x[i]) != want) err = 1;
    }
    if (err) atomicOr(bad, 1);
}

/* S[4] (16 x 64) = A (16 x HD, row-major smem) . B^T (B: 64 x HD smem) */
template <int HD>
__device__ __forceinline__ void mm_abt_r(FragC *S, const __nv_bfloat16 *A, const __nv_bfloat16 *B)
{
#pragma unroll
    for (int n = 0; n < 4; n++) wmma::fill_fragment(S[n], 0.0f);
#pragma unroll
    for (int k = 0; k < HD / 16; k++) {
        FragA a;
        wmma::load_matrix_sync(a, A + k * 16, L<HD>::LD);
#pragma unroll
        for (int n = 0; n < 4; n++) {
            FragBc b;
            wmma::load_matrix_sync(b, B + n * 16 * L<HD>::LD + k * 16, L<HD>::LD);
            wmma::mma_sync(S[n], a, b, S[n]);
        }
    }
}
/* acc[HD/16] (16 x HD) += P (4 A-fragments, 16 x 64) . B (64 x HD smem) */
template <int HD>
__device__ __forceinline__ void mm_pb_r(FragC *acc, const FragA *P, const __nv_bfloat16 *B)
{
#pragma unroll
    for (int n = 0; n < HD / 16; n++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            FragBr b;
            wmma::load_matrix_sync(b, B + kk * 16 * L<HD>::LD + n * 16, L<HD>::LD);
            wmma::mma_sync(acc[n], P[kk], b, acc[n]);
        }
}
/* cp.async (sm_80+): 16-byte global->shared copies that complete in the
 * background, zero-filling rows past T; tiles are double-buffered so the
 * next tile's load overlaps this tile's math. */
__device__ __forceinline__ void cp16(void *dst, const void *src, bool valid)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
template <int HD>
__device__ __forceinline__ void load64a(__nv_bfloat16 *dst, const __nv_bfloat16 *base,
                                        size_t ld, int r0, int T)
{
    constexpr int CH = HD / 8;
    for (int e = threadIdx.x; e < 64 * CH; e += blockDim.x) {
        int r = e / CH, c = (e % CH) * 8;
        bool ok = r0 + r < T;
        cp16(dst + r * L<HD>::LD + c, ok ? base + (size_t)(r0 + r) * ld + c : base, ok);
    }
}
/* S[4] = A (held as HD/16 fragments) . B^T */
template <int HD>
__device__ __forceinline__ void mm_abt_q(FragC *S, const FragA *qa, const __nv_bfloat16 *B)
{
#pragma unroll
    for (int n = 0; n < 4; n++) wmma::fill_fragment(S[n], 0.0f);
#pragma unroll
    for (int k = 0; k < HD / 16; k++)
#pragma unroll
        for (int n = 0; n < 4; n++) {
            FragBc b;
            wmma::load_matrix_sync(b, B + n * 16 * L<HD>::LD + k * 16, L<HD>::LD);
            wmma::mma_sync(S[n], qa[k], b, S[n]);
        }
}

/* rows (g, g+8) of acc (16 x HD) * s[row] to global rows base[row] */
template <int HD>
__device__ __forceinline__ void store_rows(const FragC *acc, __nv_bfloat16 *r0, __nv_bfloat16 *r1,
                                           float s0, float s1, int lane)
{
#pragma unroll
    for (int n = 0; n < HD / 16; n++)
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
            int hi = (i >> 1) & 1;
            __nv_bfloat16 *r = hi ? r1 : r0;
            float s = hi ? s1 : s0;
            if (r)
                *(__nv_bfloat162 *)(r + n * 16 + fcol(lane, i)) =
                    __floats2bfloat162_rn(acc[n].x[i] * s, acc[n].x[i + 1] * s);
        }
}

template <int HD>
__global__ void __launch_bounds__(NW * 32)
fwd(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
    const __nv_bfloat16 *v, size_t qs, int T, int nh, int nkv, float scale)
{
    typedef L<HD> Ly;
    extern __shared__ __align__(16) unsigned char smem[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smem;
    __nv_bfloat16 *Kb = Qs + BR * Ly::LD, *Vb = Kb + 2 * BC * Ly::LD; /* [2] each */
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int b = blockIdx.z, h = blockIdx.y, kh = h / (nh / nkv);
    int q0 = (gridDim.x - 1 - blockIdx.x) * BR;
    const __nv_bfloat16 *kb = k + (size_t)b * T * qs + (size_t)kh * HD;
    const __nv_bfloat16 *vb = v + (size_t)b * T * qs + (size_t)kh * HD;
    load64a<HD>(Qs, q + (size_t)b * T * qs + (size_t)h * HD, qs, q0, T);
    load64a<HD>(Kb, kb, qs, 0, T);
    load64a<HD>(Vb, vb, qs, 0, T);
    cp_commit();
    FragA qa[HD / 16];
    int rw = q0 + w * 16; /* warp's first row */
    int qr[2] = {rw + (lane >> 2), rw + (lane >> 2) + 8};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const float sc = scale * LOG2E;
    FragC o[HD / 16];
#pragma unroll
    for (int n = 0; n < HD / 16; n++) wmma::fill_fragment(o[n], 0.0f);
    int last = min(T - 1, q0 + BR - 1), nt = last / BC + 1;
    for (int t = 0; t < nt; t++) {
        int j0 = t * BC;
        const __nv_bfloat16 *Ks = Kb + (t & 1) * BC * Ly::LD, *Vs = Vb + (t & 1) * BC * Ly::LD;
        if (t + 1 < nt) {
            load64a<HD>(Kb + ((t + 1) & 1) * BC * Ly::LD, kb, qs, j0 + BC, T);
            load64a<HD>(Vb + ((t + 1) & 1) * BC * Ly::LD, vb, qs, j0 + BC, T);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        if (t == 0)
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++)
                wmma::load_matrix_sync(qa[kk], Qs + w * 16 * Ly::LD + kk * 16, Ly::LD);
        if (rw < T && j0 <= rw + 15) { /* warp-uniform */
        FragC s[4];
        mm_abt_q<HD>(s, qa, Ks);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int hi = (i >> 1) & 1, key = j0 + n * 16 + fcol(lane, i);
                float x = (key <= qr[hi] && key < T) ? s[n].x[i] * sc : -INFINITY;
                s[n].x[i] = x;
                mx[hi] = fmaxf(mx[hi], x);
            }
        float corr[2], mn[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            mn[r] = fmaxf(m[r], mx[r]);
            corr[r] = mn[r] == -INFINITY ? 1.0f : exp2f(m[r] - mn[r]);
        }
        FragA pa[4];
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int hi = (i >> 1) & 1;
                float p = mn[hi] == -INFINITY ? 0.0f : exp2f(s[n].x[i] - mn[hi]);
                __nv_bfloat16 pb = __float2bfloat16_rn(p);
                pa[n].x[i] = pb;
                rs[hi] += __bfloat162float(pb);
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], 1);
            rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], 2);
            l[r] = l[r] * corr[r] + rs[r];
            m[r] = mn[r];
        }
#pragma unroll
        for (int n = 0; n < HD / 16; n++)
#pragma unroll
            for (int i = 0; i < 8; i++) o[n].x[i] *= corr[(i >> 1) & 1];
        mm_pb_r<HD>(o, pa, Vs);
        }
        __syncthreads();
    }
    __nv_bfloat16 *r0 = NULL, *r1 = NULL;
    if (qr[0] < T) r0 = out + ((size_t)b * T + qr[0]) * nh * HD + (size_t)h * HD;
    if (qr[1] < T) r1 = out + ((size_t)b * T + qr[1]) * nh * HD + (size_t)h * HD;
    store_rows<HD>(o, r0, r1, r0 ? 1.0f / l[0] : 0.0f, r1 ? 1.0f / l[1] : 0.0f, lane);
    if ((lane & 3) == 0)
        for (int r = 0; r < 2; r++)
            if (qr[r] < T) lse[((size_t)b * nh + h) * T + qr[r]] = (m[r] + log2f(l[r])) / LOG2E;
}

template <int HD>
__global__ void __launch_bounds__(NW * 32)
bwd_dq(__nv_bfloat16 *dq, const __nv_bfloat16 *dout, const float *lse, const float *Dd,
       const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v, size_t qs,
       int T, int nh, int nkv, float scale)
{
    typedef L<HD> Ly;
    extern __shared__ __align__(16) unsigned char smem[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smem;
    __nv_bfloat16 *dOs = Qs + BR * Ly::LD;
    __nv_bfloat16 *Kb = dOs + BR * Ly::LD, *Vb = Kb + 2 * BC * Ly::LD; /* [2] each */
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int b = blockIdx.z, h = blockIdx.y, kh = h / (nh / nkv);
    int q0 = (gridDim.x - 1 - blockIdx.x) * BR;
    const __nv_bfloat16 *kb = k + (size_t)b * T * qs + (size_t)kh * HD;
    const __nv_bfloat16 *vb = v + (size_t)b * T * qs + (size_t)kh * HD;
    load64a<HD>(Qs, q + (size_t)b * T * qs + (size_t)h * HD, qs, q0, T);
    load64a<HD>(dOs, dout + (size_t)b * T * nh * HD + (size_t)h * HD, (size_t)nh * HD, q0, T);
    load64a<HD>(Kb, kb, qs, 0, T);
    load64a<HD>(Vb, vb, qs, 0, T);
    cp_commit();
    int rw = q0 + w * 16;
    int qr[2] = {rw + (lane >> 2), rw + (lane >> 2) + 8};
    const float sc = scale * LOG2E;
    float L2[2] = {0.0f, 0.0f}, Dt[2] = {0.0f, 0.0f};
    for (int r = 0; r < 2; r++)
        if (qr[r] < T) {
            L2[r] = lse[((size_t)b * nh + h) * T + qr[r]] * LOG2E;
            Dt[r] = Dd[((size_t)b * nh + h) * T + qr[r]];
        }
    FragC acc[HD / 16];
#pragma unroll
    for (int n = 0; n < HD / 16; n++) wmma::fill_fragment(acc[n], 0.0f);
    int last = min(T - 1, q0 + BR - 1), nt = last / BC + 1;
    for (int t = 0; t < nt; t++) {
        int j0 = t * BC;
        const __nv_bfloat16 *Ks = Kb + (t & 1) * BC * Ly::LD, *Vs = Vb + (t & 1) * BC * Ly::LD;
        if (t + 1 < nt) {
            load64a<HD>(Kb + ((t + 1) & 1) * BC * Ly::LD, kb, qs, j0 + BC, T);
            load64a<HD>(Vb + ((t + 1) & 1) * BC * Ly::LD, vb, qs, j0 + BC, T);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        if (rw < T && j0 <= rw + 15) {
        FragC s[4], dp[4];
        mm_abt_r<HD>(s, Qs + w * 16 * Ly::LD, Ks);
        mm_abt_r<HD>(dp, dOs + w * 16 * Ly::LD, Vs);
        FragA da[4];
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int hi = (i >> 1) & 1, key = j0 + n * 16 + fcol(lane, i);
                float ds = 0.0f;
                if (key <= qr[hi] && key < T && qr[hi] < T) {
                    float p = exp2f(s[n].x[i] * sc - L2[hi]);
                    ds = p * (dp[n].x[i] - Dt[hi]);
                }
                da[n].x[i] = __float2bfloat16_rn(ds);
            }
        mm_pb_r<HD>(acc, da, Ks);
        }
        __syncthreads();
    }
    __nv_bfloat16 *r0 = NULL, *r1 = NULL;
    if (qr[0] < T) r0 = dq + ((size_t)b * T + qr[0]) * qs + (size_t)h * HD;
    if (qr[1] < T) r1 = dq + ((size_t)b * T + qr[1]) * qs + (size_t)h * HD;
    store_rows<HD>(acc, r0, r1, scale, scale, lane);
}

template <int HD>
__global__ void __launch_bounds__(NW * 32)
bwd_dkv(__nv_bfloat16 *dk, __nv_bfloat16 *dv, const __nv_bfloat16 *dout, const float *lse,
        const float *Dd, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
        const __nv_bfloat16 *v, size_t qs, int T, int nh, int nkv, float scale)
{
    typedef L<HD> Ly;
    extern __shared__ __align__(16) unsigned char smem[];
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)smem;
    __nv_bfloat16 *Vs = Ks + BR * Ly::LD;
    __nv_bfloat16 *Qb = Vs + BR * Ly::LD, *dOb = Qb + 2 * BC * Ly::LD; /* [2] each */
    float *Lb = (float *)(dOb + 2 * BC * Ly::LD), *Db = Lb + 2 * BC;   /* [2][BC] each */
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int b = blockIdx.z, kh = blockIdx.y, group = nh / nkv;
    int j0 = (gridDim.x - 1 - blockIdx.x) * BR;
    int ntq = (T - j0 + BC - 1) / BC, nt = ntq * group;
    /* tile t: query head kh*group + t/ntq, query rows j0 + (t%ntq)*BC */
    auto issue = [&](int t) {
        int h = kh * group + t / ntq, i0 = j0 + (t % ntq) * BC, buf = t & 1;
        load64a<HD>(Qb + buf * BC * Ly::LD, q + (size_t)b * T * qs + (size_t)h * HD, qs, i0, T);
        load64a<HD>(dOb + buf * BC * Ly::LD, dout + (size_t)b * T * nh * HD + (size_t)h * HD,
                    (size_t)nh * HD, i0, T);
        cp_commit();
        const float *lb = lse + ((size_t)b * nh + h) * T, *db = Dd + ((size_t)b * nh + h) * T;
        for (int e = threadIdx.x; e < BC; e += blockDim.x) {
            Lb[buf * BC + e] = i0 + e < T ? lb[i0 + e] * LOG2E : 0.0f;
            Db[buf * BC + e] = i0 + e < T ? db[i0 + e] : 0.0f;
        }
    };
    load64a<HD>(Ks, k + (size_t)b * T * qs + (size_t)kh * HD, qs, j0, T);
    load64a<HD>(Vs, v + (size_t)b * T * qs + (size_t)kh * HD, qs, j0, T);
    issue(0);
    int rw = j0 + w * 16;
    int kr[2] = {rw + (lane >> 2), rw + (lane >> 2) + 8};
    const float sc = scale * LOG2E;
    FragC adk[HD / 16], adv[HD / 16];
#pragma unroll
    for (int n = 0; n < HD / 16; n++) {
        wmma::fill_fragment(adk[n], 0.0f);
        wmma::fill_fragment(adv[n], 0.0f);
    }
    for (int t = 0; t < nt; t++) {
        if (t + 1 < nt) {
            issue(t + 1);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        int i0 = j0 + (t % ntq) * BC, buf = t & 1;
        const __nv_bfloat16 *Qs = Qb + buf * BC * Ly::LD, *dOs = dOb + buf * BC * Ly::LD;
        const float *Ls = Lb + buf * BC, *Ds = Db + buf * BC;
        if (rw < T) {
            FragC st[4], dpt[4];
            mm_abt_r<HD>(st, Ks + w * 16 * Ly::LD, Qs);
            mm_abt_r<HD>(dpt, Vs + w * 16 * Ly::LD, dOs);
            FragA pa[4], da[4];
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    int hi = (i >> 1) & 1, c = n * 16 + fcol(lane, i), qi = i0 + c;
                    float p = 0.0f, ds = 0.0f;
                    if (qi >= kr[hi] && qi < T && kr[hi] < T) {
                        p = exp2f(st[n].x[i] * sc - Ls[c]);
                        ds = p * (dpt[n].x[i] - Ds[c]);
                    }
                    pa[n].x[i] = __float2bfloat16_rn(p);
                    da[n].x[i] = __float2bfloat16_rn(ds);
                }
            mm_pb_r<HD>(adv, pa, dOs);
            mm_pb_r<HD>(adk, da, Qs);
        }
        __syncthreads();
    }
    __nv_bfloat16 *k0 = NULL, *k1 = NULL, *v0 = NULL, *v1 = NULL;
    if (kr[0] < T) {
        k0 = dk + ((size_t)b * T + kr[0]) * qs + (size_t)kh * HD;
        v0 = dv + ((size_t)b * T + kr[0]) * qs + (size_t)kh * HD;
    }
    if (kr[1] < T) {
        k1 = dk + ((size_t)b * T + kr[1]) * qs + (size_t)kh * HD;
        v1 = dv + ((size_t)b * T + kr[1]) * qs + (size_t)kh * HD;
    }
    store_rows<HD>(adk, k0, k1, scale, scale, lane);
    store_rows<HD>(adv, v0, v1, 1.0f, 1.0f, lane);
}

template <int HD> constexpr size_t fwd_smem() { return (size_t)(BR + 4 * BC) * L<HD>::LD * 2; }
template <int HD> constexpr size_t dq_smem() { return (size_t)(2 * BR + 4 * BC) * L<HD>::LD * 2; }
template <int HD> constexpr size_t dkv_smem() { return (size_t)(2 * BR + 4 * BC) * L<HD>::LD * 2 + 4 * BC * 4; }

template <int HD>
llmt_status run_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out, float *lse, const llmt__bf16 *q,
                    const llmt__bf16 *k, const llmt__bf16 *v, size_t qs, int B, int T, int nh,
                    int nkv)
{
    size_t sm = fwd_smem<HD>();
    LLMT_CU(ctx, cudaFuncSetAttribute(fwd<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    fwd<HD><<<dim3((T + BR - 1) / BR, nh, B), NW * 32, sm, ctx->compute>>>(
        BF(out), lse, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, 1.0f / sqrtf((float)HD));
    LLMT_LAUNCHED(ctx, "attention_fwd (tensor cores, registers)");
}
template <int HD>
llmt_status run_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dq, llmt__bf16 *dk, llmt__bf16 *dv,
                    const llmt__bf16 *dout, const float *lse, const float *Dd,
                    const llmt__bf16 *q, const llmt__bf16 *k, const llmt__bf16 *v, size_t qs,
                    int B, int T, int nh, int nkv)
{
    float scale = 1.0f / sqrtf((float)HD);
    size_t s1 = dq_smem<HD>(), s2 = dkv_smem<HD>();
    LLMT_CU(ctx, cudaFuncSetAttribute(bwd_dq<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1));
    LLMT_CU(ctx, cudaFuncSetAttribute(bwd_dkv<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2));
    bwd_dq<HD><<<dim3((T + BR - 1) / BR, nh, B), NW * 32, s1, ctx->compute>>>(
        BF(dq), CBF(dout), lse, Dd, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, scale);
    if constexpr (HD == 128) { /* two 16x128 accumulators per warp do not fit in registers */
        s2 = tc::dkv_smem<HD>();
        LLMT_CU(ctx, cudaFuncSetAttribute(tc::bwd_dkv<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2));
        tc::bwd_dkv<HD><<<dim3((T + BR - 1) / BR, nkv, B), NW * 32, s2, ctx->compute>>>(
            BF(dk), BF(dv), CBF(dout), lse, Dd, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, scale);
    } else {
        bwd_dkv<HD><<<dim3((T + BR - 1) / BR, nkv, B), NW * 32, s2, ctx->compute>>>(
            BF(dk), BF(dv), CBF(dout), lse, Dd, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, scale);
    }
    LLMT_LAUNCHED(ctx, "attention_bwd (tensor cores, registers)");
}

} // namespace tcr

/* 1: the register variant's fragment layout holds on this device. */
static bool layout_ok(llmt__cuda_ctx *ctx)
{
    if (ctx->attn_layout == 0) {
        int *d = NULL, h = 1;
        ctx->attn_layout = 2;
        if (llmt__cuda_alloc(ctx, (void **)&d, sizeof(int)) != LLMT_OK) return false;
        if (cudaMemsetAsync(d, 0, sizeof(int), ctx->compute) == cudaSuccess) {
            tcr::probe<<<1, 32, 0, ctx->compute>>>(d);
            if (cudaMemcpyAsync(&h, d, sizeof(int), cudaMemcpyDeviceToHost, ctx->compute) ==
                    cudaSuccess &&
                cudaStreamSynchronize(ctx->compute) == cudaSuccess && h == 0)
                ctx->attn_layout = 1;
        }
        cudaGetLastError();
        llmt__cuda_free(ctx, d);
    }
    return ctx->attn_layout == 1;
}

/* The mma.sync kernels (attention_mma.cu) are the default where they apply
 * (hd 64/128, sm_80+, aligned): on an H100 (2026-11-26, bench_gpu) they
 * ran 1.9-2.7x faster forward and 1.9-3.8x backward than the wmma
 * register kernels, which stay for hd 32 and as attn_scalar 4. */
static bool mma_wanted(const llmt__cuda_ctx *ctx)
{
    return ctx->attn_scalar == 0 || ctx->attn_scalar == 3 || ctx->attn_scalar == 5;
}
/* attn_scalar 5: the backward with dQ by atomics (FlashAttention-2's;
 * llmt__cuda_attn_mma_bwd_atomic, not yet run on a GPU). Never in
 * deterministic mode: its dQ sums in a varying order, so there the
 * deterministic mma.sync kernels run instead. */
static bool mmaq_wanted(const llmt__cuda_ctx *ctx)
{
    return ctx->attn_scalar == 5 && !ctx->deterministic;
}

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
    if (mma_wanted(ctx) && llmt__cuda_attn_mma_usable(ctx->sm, hd, qs, q, k, v, out))
        return llmt__cuda_attn_mma_fwd(ctx, out, lse, q, k, v, qs, B, T, nh, nkv, hd);
    if (ctx->sm >= 80 && ctx->attn_scalar != 1 && tc::usable(hd, qs, q, k, v, out)) {
        if (ctx->attn_scalar != 2 && layout_ok(ctx)) { /* 0, 3, 5 (other hd), 4 */
            if (hd == 32) return tcr::run_fwd<32>(ctx, out, lse, q, k, v, qs, B, T, nh, nkv);
            if (hd == 64) return tcr::run_fwd<64>(ctx, out, lse, q, k, v, qs, B, T, nh, nkv);
            return tcr::run_fwd<128>(ctx, out, lse, q, k, v, qs, B, T, nh, nkv);
        }
        if (hd == 32) return tc::run_fwd<32>(ctx, out, lse, q, k, v, qs, B, T, nh, nkv);
        if (hd == 64) return tc::run_fwd<64>(ctx, out, lse, q, k, v, qs, B, T, nh, nkv);
        return tc::run_fwd<128>(ctx, out, lse, q, k, v, qs, B, T, nh, nkv);
    }
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
    const bool vec = (((uintptr_t)dout | (uintptr_t)out) & 15) == 0;
    const unsigned vgrid = (unsigned)((rows * (hd / 8) + 255) / 256);
    if (vec && hd == 64)
        attn_bwd_d_vec<8><<<vgrid, 256, 0, ctx->compute>>>(Dd, CBF(dout), CBF(out), B, T, nh);
    else if (vec && hd == 128)
        attn_bwd_d_vec<16><<<vgrid, 256, 0, ctx->compute>>>(Dd, CBF(dout), CBF(out), B, T, nh);
    else
        attn_bwd_d_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, ctx->compute>>>(
            Dd, CBF(dout), CBF(out), B, T, nh, hd);
    if (mma_wanted(ctx) && llmt__cuda_attn_mma_usable(ctx->sm, hd, qs, q, k, v, dq) &&
        llmt__cuda_attn_mma_usable(ctx->sm, hd, qs, dk, dv, dout, out)) {
        if (mmaq_wanted(ctx))
            st = llmt__cuda_attn_mma_bwd_atomic(ctx, dq, dk, dv, dout, lse, Dd, q, k, v, qs, B,
                                                T, nh, nkv, hd);
        else
            st = llmt__cuda_attn_mma_bwd(ctx, dq, dk, dv, dout, lse, Dd, q, k, v, qs, B, T, nh,
                                         nkv, hd);
        llmt__cuda_free(ctx, Dd);
        return st;
    }
    if (ctx->sm >= 80 && ctx->attn_scalar != 1 && tc::usable(hd, qs, q, k, v, dq) &&
        tc::usable(hd, qs, dk, dv, dout, out)) {
        if (ctx->attn_scalar != 2 && layout_ok(ctx)) {
            if (hd == 32) st = tcr::run_bwd<32>(ctx, dq, dk, dv, dout, lse, Dd, q, k, v, qs, B, T, nh, nkv);
            else if (hd == 64) st = tcr::run_bwd<64>(ctx, dq, dk, dv, dout, lse, Dd, q, k, v, qs, B, T, nh, nkv);
            else st = tcr::run_bwd<128>(ctx, dq, dk, dv, dout, lse, Dd, q, k, v, qs, B, T, nh, nkv);
            llmt__cuda_free(ctx, Dd);
            return st;
        }
        if (hd == 32) st = tc::run_bwd<32>(ctx, dq, dk, dv, dout, lse, Dd, q, k, v, qs, B, T, nh, nkv);
        else if (hd == 64) st = tc::run_bwd<64>(ctx, dq, dk, dv, dout, lse, Dd, q, k, v, qs, B, T, nh, nkv);
        else st = tc::run_bwd<128>(ctx, dq, dk, dv, dout, lse, Dd, q, k, v, qs, B, T, nh, nkv);
        llmt__cuda_free(ctx, Dd);
        return st;
    }
    attn_bwd_dq_kernel<<<dim3((T + ROWS - 1) / ROWS, nh, B), ROWS * 32, 0, ctx->compute>>>(
        BF(dq), CBF(dout), lse, Dd, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, hd, scale);
    attn_bwd_dkv_kernel<<<dim3((T + ROWS - 1) / ROWS, nkv, B), ROWS * 32, 0, ctx->compute>>>(
        BF(dk), BF(dv), CBF(dout), lse, Dd, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, hd,
        scale);
    llmt__cuda_free(ctx, Dd);
    LLMT_LAUNCHED(ctx, "attention_bwd");
}

} // extern "C"
