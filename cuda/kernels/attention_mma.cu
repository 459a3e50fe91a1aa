// Causal flash attention on mma.sync tensor cores (FlashAttention-2 style),
// attention.cu's default for hd 64/128 (attn_scalar 0 or 3). Written
// without a GPU; first ran on an H100 on 2026-11-26: gpu-kernels held it to
// the CPU reference on three seeds, and bench_gpu timed it against
// PyTorch's flash SDPA at 1.05-1.13x forward for hd 64 (0.68-0.73x for hd
// 128) and 0.62-1.0x backward (doc/gpu.md).
//
// Why another variant: attention.cu's tensor-core kernels go through wmma,
// whose loads are plain shared-memory reads and whose fragments the softmax
// can only use through a probed layout; here every operand comes from
// ldmatrix (.trans for the B operands stored [k][n]), products are
// mma.sync.m16n8k16 bf16 -> fp32 through inline PTX, whose fragment layouts
// the PTX ISA fixes (attention_mma_idx.h, checked on the host by
// test/unit/test_attn_mma_idx.c), and K/V (or Q/dO) tiles are
// double-buffered with cp.async. Causal masks are applied only on tiles
// that cross the diagonal (or T).
//
// Forward: a block takes BR = 16 * MW * NW query rows of one (b, h); warp w
// owns MW m16 tiles of rows. Scores stay in registers: online softmax (base
// 2, running max and per-thread partial row sums), then the accumulator of
// two n8 score tiles is re-packed as the A operand of P.V (the FA2 register
// trick: C rows/cols of tiles 2k, 2k+1 are exactly A's 16x16 layout).
// lse = ln sum exp(scale q.k) as attention.cu writes it.
//
// Backward, deterministic, no atomics (as attention.cu): D = rowsum(dO * O)
// comes from attention.cu's attn_bwd_d_kernel; a dQ kernel per query block
// walks key tiles to the diagonal (S, dP, then dQ += dS K); a dK/dV kernel
// per key block of a kv head walks, for every query head of its GQA group,
// the query tiles from the diagonal to T (S^T = K Q^T, dP^T = V dO^T, then
// dV += P^T dO and dK += dS^T Q with P^T and dS^T re-packed in registers).
// GQA: query head h reads kv head h / (nh / nkv). Rows at or past T are
// zero-filled by cp.async and masked (never stored, never summed).
//
// Backward with dQ by atomics (attn_scalar 5, never in deterministic mode;
// first ran on an H100 on 2026-11-27, held to the CPU reference by
// gpu-kernels, 0-9% faster than the two-kernel backward it was measured
// beside, which has since been tuned past it): FlashAttention-2's. The dK/dV kernel with DQ set
// also stores each tile's dS^T in shared memory and, after the barrier
// that ends the tile, adds dS K for its 128 keys to an fp32 [B, T, nh, HD]
// scratch (red.global.add.v2.f32 on sm_90); dq_convert then writes dq.
// Five block products per (query tile, key tile) instead of seven.
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <type_traits>

#include "../common.cuh"
#include "attention_mma.h"
#include "attention_mma_idx.h"

namespace
{
namespace fa
{

typedef __nv_bfloat16 bf16;
constexpr float LOG2E = 1.4426950408889634f;

/* ---- PTX ---------------------------------------------------------------- */

__device__ __forceinline__ uint32_t sptr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
/* d += a . b (16x16 bf16 row-major times 16x8 bf16 column-major, fp32) */
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* two fp32 -> one bf16x2 register, lo in the low half (the smaller column) */
__device__ __forceinline__ uint32_t pack(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
/* 2^x; ex2.approx of -inf is +0, which the masks rely on */
__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ void cp16(uint32_t dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp4(uint32_t dst, const void *src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* ---- tiles --------------------------------------------------------------- */

/* rows r0..r0+ROWS-1 of a row-major bf16 matrix (row stride ld) into
 * dst[ROWS][HD + 8]; rows at or past T are zero-filled, never read. The
 * 8-element pad puts the 8 rows an ldmatrix phase reads in distinct banks. */
template <int HD, int ROWS, int NTH>
__device__ __forceinline__ void load_rows(bf16 *dst, const bf16 *base, size_t ld, int r0, int T)
{
    constexpr int CH = HD / 8, LD = HD + 8;
    static_assert(ROWS * CH % NTH == 0, "tile rows split evenly over the threads");
#pragma unroll
    for (int it = 0; it < ROWS * CH / NTH; it++) {
        int e = it * NTH + (int)threadIdx.x, r = e / CH, c = (e % CH) * 8;
        bool ok = r0 + r < T;
        cp16(sptr(dst + r * LD + c), ok ? base + (size_t)(r0 + r) * ld + c : base, ok);
    }
}
/* N floats src[i0..] into dst (zero past T) */
template <int N, int NTH>
__device__ __forceinline__ void load_vec(float *dst, const float *src, int i0, int T)
{
    for (int e = threadIdx.x; e < N; e += NTH) {
        bool ok = i0 + e < T;
        cp4(sptr(dst + e), ok ? src + i0 + e : src, ok);
    }
}
/* A fragment of rows r.., cols k.. of a [*][LD] tile */
template <int LD>
__device__ __forceinline__ void lda(uint32_t (&a)[4], const bf16 *tile, int r, int k, int lane)
{
    ldsm4(a, sptr(tile + (r + fa_lda_row(lane)) * LD + k + fa_lda_col(lane)));
}
/* B fragments of n8 tiles n, n+8 (k.., 16 deep) of a tile stored [n][k] */
template <int LD>
__device__ __forceinline__ void ldb(uint32_t (&b)[4], const bf16 *tile, int n, int k, int lane)
{
    ldsm4(b, sptr(tile + (n + fa_ldb_row(lane)) * LD + k + fa_ldb_col(lane)));
}
/* the same from a tile stored [k][n] */
template <int LD>
__device__ __forceinline__ void ldbt(uint32_t (&b)[4], const bf16 *tile, int k, int n, int lane)
{
    ldsm4t(b, sptr(tile + (k + fa_ldbt_row(lane)) * LD + n + fa_ldbt_col(lane)));
}
/* A fragment (rows m.., k.. 16 deep) from a tile stored [k][m]: ldbt's
 * matrices are (k 0, m 0), (k 8, m 0), (k 0, m 8), (k 8, m 8), each
 * transposed to (m, k); A wants (m 0, k 0), (m 8, k 0), (m 0, k 8),
 * (m 8, k 8), so the middle two swap */
template <int LD>
__device__ __forceinline__ void ldat(uint32_t (&a)[4], const bf16 *tile, int k, int m, int lane)
{
    uint32_t r[4];
    ldbt<LD>(r, tile, k, m, lane);
    a[0] = r[0];
    a[1] = r[2];
    a[2] = r[1];
    a[3] = r[3];
}
/* p[0] += x, p[1] += y (p 8-byte aligned, global), atomically; one vector
 * reduction (no value returned) on sm_90 */
__device__ __forceinline__ void add2(float *p, float x, float y)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(x), "f"(y) : "memory");
#else
    atomicAdd(p, x);
    atomicAdd(p + 1, y);
#endif
}
template <int N> __device__ __forceinline__ void zero(float (&a)[N][4])
{
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            a[n][e] = 0.0f;
}
/* A operand (16 x 16, k = columns 16kk..) from C tiles 2kk and 2kk+1 */
__device__ __forceinline__ void repack(uint32_t (&a)[4], const float (&c0)[4],
                                       const float (&c1)[4])
{
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const float(&c)[4] = fa_repack_tile(r) ? c1 : c0;
        a[r] = pack(c[fa_repack_elem(r)], c[fa_repack_elem(r) + 1]);
    }
}
/* rows (g, g+8) of a 16 x HD accumulator times s to row pointers r0, r1 */
template <int HD>
__device__ __forceinline__ void store_acc(const float (&acc)[HD / 8][4], bf16 *r0, bf16 *r1,
                                          float s0, float s1, int lane)
{
#pragma unroll
    for (int n = 0; n < HD / 8; n++) {
        int c = n * 8 + fa_acc_col(lane, 0);
        if (r0)
            *(__nv_bfloat162 *)(r0 + c) = __floats2bfloat162_rn(acc[n][0] * s0, acc[n][1] * s0);
        if (r1)
            *(__nv_bfloat162 *)(r1 + c) = __floats2bfloat162_rn(acc[n][2] * s1, acc[n][3] * s1);
    }
}

/* ---- configurations (tuning lives here) ---------------------------------- */

/* Each kernel kind has a list of tile configurations per hd; entry 0 is
 * the default, the others are there to be measured against it
 * (llmt__cuda_attn_mma_set_cfg; bench_gpu's NAME_fN / _qN / _kvN cases,
 * test_gpu_kernels holds every entry to the CPU reference). Register
 * counts from `nvcc -arch=sm_90 -Xptxas -v`; a default may not spill. */
/* One configuration of any kind: NW warps of MW m16 tiles of rows (the
 * forward's and dQ's queries, dK/dV's keys), TILE columns a step (keys;
 * dK/dV: queries), the rows' fragments kept in registers (REG) or re-read
 * from shared memory. */
struct TileCfg {
    int nw, mw, tile;
    bool reg;
};
enum { FWD, DQ_K, DKV_K, DKVQ_K }; /* the kinds, as llmt__cuda_attn_mma_set_cfg numbers them */
template <int HD, int KIND> struct Cfgs;
/* forward. hd 128: MW = 2 spills (255 registers + 36 bytes with Q re-read
 * from shared memory), so do 2 warps (4 bytes); 4 warps ran in
 * 0.85-0.87x the time of 8 on an H200 (2026-11-27) and became the
 * default; then 32 keys a tile (4 warps) ran in 0.98-1.0x the time of 64
 * on every hd 128 shape (H200, tools/gpu-tune.sh, later the same day) and
 * is the default, 64 keys entry 4. hd 128 dK/dV's entry 4 (16 queries, 4
 * warps) ran in 1.18-1.26x its default's time there. */
template <> struct Cfgs<64, FWD> {
    static constexpr int N = 4;
    static constexpr TileCfg c[N] = {{4, 2, 64, true}, {8, 1, 64, true}, {4, 1, 128, true},
                                     {8, 2, 64, true}};
};
template <> struct Cfgs<128, FWD> {
    static constexpr int N = 5;
    static constexpr TileCfg c[N] = {
        {4, 1, 32, true}, {8, 1, 64, true}, {8, 1, 32, true}, {4, 1, 128, false}, {4, 1, 64, true}};
};
/* dQ. hd 64 entries 4 and 5 (two row tiles a warp: a K or V fragment
 * serves both) ran in 0.98-1.01x and 1.00-1.03x the default's time on an
 * H200 (2026-11-27; 4 slower only at T 1024): no win on every shape. */
template <> struct Cfgs<64, DQ_K> {
    static constexpr int N = 6;
    static constexpr TileCfg c[N] = {{4, 1, 64, true}, {8, 1, 64, true}, {4, 1, 128, true},
                                     {4, 1, 32, true}, {4, 2, 32, true}, {4, 2, 32, false}};
};
template <> struct Cfgs<128, DQ_K> {
    static constexpr int N = 4;
    static constexpr TileCfg c[N] = {
        {4, 1, 32, true}, {4, 1, 64, false}, {8, 1, 64, false}, {4, 1, 32, false}};
};
/* dK/dV. hd 64: 4 warps (three blocks of 168 registers per SM) ran the
 * backward in 0.92-0.93x the time of 8 on an H200 (2026-11-27) and became
 * the default; entries 5 and 6 (two key tiles per warp: a Q or dO
 * fragment serves both, a quarter to a half fewer shared-memory reads per
 * product; 255 registers and a 4-byte spill) ran the backward in
 * 1.00-1.07x and 1.13-1.23x its time (H200, later the same day).
 * hd 128: 4 warps at 64 queries and K/V in registers at 32 spill. */
template <> struct Cfgs<64, DKV_K> {
    static constexpr int N = 7;
    static constexpr TileCfg c[N] = {{4, 1, 64, true},  {8, 1, 64, true}, {8, 1, 32, true},
                                     {4, 1, 32, true},  {8, 1, 128, false},
                                     {4, 2, 32, false}, {4, 2, 16, true}};
};
template <> struct Cfgs<128, DKV_K> {
    static constexpr int N = 5;
    static constexpr TileCfg c[N] = {{8, 1, 64, false}, {8, 1, 32, false}, {4, 1, 32, false},
                                     {8, 1, 16, false}, {4, 1, 16, false}};
};
/* dK/dV with dQ by atomics (one key tile per warp). Entry 0 ran on an
 * H100 (2026-11-27: 0-9% faster than the two-kernel backward of then,
 * whose dK/dV has since gained 7-8% from 4 warps a block); the others, 4
 * warps (as the two-kernel dK/dV's default) and 32 queries a tile (sm_90:
 * 221-255 registers, no spill but hd 128 at 4 warps x 64 queries, 16
 * bytes), were slower still on an H200 (2026-11-27: 1.03-1.29x the
 * two-kernel backward's time; entry 0 0.98-1.10x). */
template <> struct Cfgs<64, DKVQ_K> {
    static constexpr int N = 4;
    static constexpr TileCfg c[N] = {
        {8, 1, 64, true}, {4, 1, 64, true}, {4, 1, 32, true}, {8, 1, 32, true}};
};
template <> struct Cfgs<128, DKVQ_K> {
    static constexpr int N = 3;
    static constexpr TileCfg c[N] = {{8, 1, 64, false}, {4, 1, 64, false}, {4, 1, 32, false}};
};

/* ---- forward -------------------------------------------------------------- */

template <int HD, int NW, int MW, int BC, bool QREG>
__global__ void __launch_bounds__(NW * 32)
    fwd(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, size_t qs, int T,
        int nh, int nkv, float sc)
{
    constexpr int BR = NW * 16 * MW, LD = HD + 8, KS = HD / 16, NS = BC / 8, NO = HD / 8;
    constexpr int NTH = NW * 32;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem;
    bf16 *Kb = Qs + BR * LD, *Vb = Kb + 2 * BC * LD; /* [2] each */
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.z, h = blockIdx.y, kh = h / (nh / nkv);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR; /* longest rows first */
    const bf16 *kb = k + (size_t)b * T * qs + (size_t)kh * HD;
    const bf16 *vb = v + (size_t)b * T * qs + (size_t)kh * HD;
    load_rows<HD, BR, NTH>(Qs, q + (size_t)b * T * qs + (size_t)h * HD, qs, q0, T);
    load_rows<HD, BC, NTH>(Kb, kb, qs, 0, T);
    load_rows<HD, BC, NTH>(Vb, vb, qs, 0, T);
    cp_commit();
    const int rl = w * 16 * MW, rw = q0 + rl; /* warp's first row (local, global) */
    float o[MW][NO][4], m[MW][2], l[MW][2];
#pragma unroll
    for (int mi = 0; mi < MW; mi++) {
        zero(o[mi]);
        m[mi][0] = m[mi][1] = -INFINITY;
        l[mi][0] = l[mi][1] = 0.0f;
    }
    uint32_t qf[MW][QREG ? KS : 1][4];
    const int nt = fa_key_tiles(q0, BR, BC, T);
    for (int it = 0; it < nt; it++) {
        const int j0 = it * BC;
        const bf16 *Kt = Kb + (it & 1) * BC * LD, *Vt = Vb + (it & 1) * BC * LD;
        if (it + 1 < nt) {
            load_rows<HD, BC, NTH>(Kb + ((it + 1) & 1) * BC * LD, kb, qs, j0 + BC, T);
            load_rows<HD, BC, NTH>(Vb + ((it + 1) & 1) * BC * LD, vb, qs, j0 + BC, T);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        if (QREG && it == 0) {
#pragma unroll
            for (int mi = 0; mi < MW; mi++)
#pragma unroll
                for (int kk = 0; kk < (QREG ? KS : 1); kk++)
                    lda<LD>(qf[mi][kk], Qs, rl + mi * 16, kk * 16, lane);
        }
        if (rw < T && fa_tile_live(j0, rw, 16 * MW)) { /* warp-uniform */
            float s[MW][NS][4];
#pragma unroll
            for (int mi = 0; mi < MW; mi++)
                zero(s[mi]);
                /* S = Q K^T */
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                if (!QREG)
#pragma unroll
                    for (int mi = 0; mi < MW; mi++)
                        lda<LD>(qf[mi][0], Qs, rl + mi * 16, kk * 16, lane);
                const int kq = QREG ? kk : 0;
#pragma unroll
                for (int np = 0; np < NS / 2; np++) {
                    uint32_t bk[4];
                    ldb<LD>(bk, Kt, np * 16, kk * 16, lane);
#pragma unroll
                    for (int mi = 0; mi < MW; mi++) {
                        mma(s[mi][2 * np], qf[mi][kq], bk[0], bk[1]);
                        mma(s[mi][2 * np + 1], qf[mi][kq], bk[2], bk[3]);
                    }
                }
            }
            if (fa_tile_diag(j0, BC, rw)) {
#pragma unroll
                for (int mi = 0; mi < MW; mi++)
#pragma unroll
                    for (int n = 0; n < NS; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            if (j0 + n * 8 + fa_acc_col(lane, e) >
                                rw + mi * 16 + fa_acc_row(lane, e))
                                s[mi][n][e] = -INFINITY;
            }
            /* online softmax: the 4 lanes of a quad share a row */
#pragma unroll
            for (int mi = 0; mi < MW; mi++) {
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    float mx = -INFINITY;
#pragma unroll
                    for (int n = 0; n < NS; n++)
                        mx = fmaxf(mx, fmaxf(s[mi][n][2 * hh], s[mi][n][2 * hh + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float mn = fmaxf(m[mi][hh], mx * sc);
                    const float corr = mn == -INFINITY ? 1.0f : ex2(m[mi][hh] - mn);
                    const float msub = mn == -INFINITY ? 0.0f : mn;
                    m[mi][hh] = mn;
                    float rs = 0.0f;
#pragma unroll
                    for (int n = 0; n < NS; n++) {
                        float p0 = ex2(fmaf(s[mi][n][2 * hh], sc, -msub));
                        float p1 = ex2(fmaf(s[mi][n][2 * hh + 1], sc, -msub));
                        s[mi][n][2 * hh] = p0;
                        s[mi][n][2 * hh + 1] = p1;
                        rs += p0 + p1;
                    }
                    l[mi][hh] = l[mi][hh] * corr + rs;
#pragma unroll
                    for (int n = 0; n < NO; n++) {
                        o[mi][n][2 * hh] *= corr;
                        o[mi][n][2 * hh + 1] *= corr;
                    }
                }
            }
            /* O += P V */
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {
                uint32_t pa[MW][4];
#pragma unroll
                for (int mi = 0; mi < MW; mi++)
                    repack(pa[mi], s[mi][2 * kk], s[mi][2 * kk + 1]);
#pragma unroll
                for (int np = 0; np < NO / 2; np++) {
                    uint32_t bv[4];
                    ldbt<LD>(bv, Vt, kk * 16, np * 16, lane);
#pragma unroll
                    for (int mi = 0; mi < MW; mi++) {
                        mma(o[mi][2 * np], pa[mi], bv[0], bv[1]);
                        mma(o[mi][2 * np + 1], pa[mi], bv[2], bv[3]);
                    }
                }
            }
        }
        __syncthreads(); /* the next iteration's loads overwrite this buffer */
    }
#pragma unroll
    for (int mi = 0; mi < MW; mi++) {
        bf16 *r[2];
        float inv[2];
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            float ls = l[mi][hh];
            ls += __shfl_xor_sync(0xffffffffu, ls, 1);
            ls += __shfl_xor_sync(0xffffffffu, ls, 2);
            const int row = rw + mi * 16 + fa_acc_row(lane, 2 * hh);
            r[hh] = NULL;
            inv[hh] = 0.0f;
            if (row < T) {
                r[hh] = out + ((size_t)b * T + row) * nh * HD + (size_t)h * HD;
                inv[hh] = 1.0f / ls;
                if ((lane & 3) == 0)
                    lse[((size_t)b * nh + h) * T + row] = (m[mi][hh] + log2f(ls)) / LOG2E;
            }
        }
        store_acc<HD>(o[mi], r[0], r[1], inv[0], inv[1], lane);
    }
}

/* ---- backward: dQ --------------------------------------------------------- */

/* MW m16 query tiles per warp: each K and V fragment read from shared
 * memory then serves MW of them */
template <int HD, int NW, int MW, int BC, bool QREG>
__global__ void __launch_bounds__(NW * 32)
    bwd_dq(bf16 *dq, const bf16 *dout, const float *lse, const float *Dd, const bf16 *q,
           const bf16 *k, const bf16 *v, size_t qs, int T, int nh, int nkv, float scale)
{
    constexpr int BR = NW * 16 * MW, LD = HD + 8, KS = HD / 16, NS = BC / 8, NO = HD / 8;
    constexpr int NTH = NW * 32;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem;
    bf16 *dOs = Qs + BR * LD;
    bf16 *Kb = dOs + BR * LD, *Vb = Kb + 2 * BC * LD; /* [2] each */
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.z, h = blockIdx.y, kh = h / (nh / nkv);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;
    const bf16 *kb = k + (size_t)b * T * qs + (size_t)kh * HD;
    const bf16 *vb = v + (size_t)b * T * qs + (size_t)kh * HD;
    load_rows<HD, BR, NTH>(Qs, q + (size_t)b * T * qs + (size_t)h * HD, qs, q0, T);
    load_rows<HD, BR, NTH>(dOs, dout + (size_t)b * T * nh * HD + (size_t)h * HD,
                           (size_t)nh * HD, q0, T);
    load_rows<HD, BC, NTH>(Kb, kb, qs, 0, T);
    load_rows<HD, BC, NTH>(Vb, vb, qs, 0, T);
    cp_commit();
    const int rl = w * 16 * MW, rw = q0 + rl; /* warp's first row (local, global) */
    const float sc = scale * LOG2E;
    float L2[MW][2], Dv[MW][2];
#pragma unroll
    for (int mi = 0; mi < MW; mi++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int row = rw + mi * 16 + fa_acc_row(lane, 2 * hh);
            /* +inf: rows past T get p = 0 */
            L2[mi][hh] = row < T ? lse[((size_t)b * nh + h) * T + row] * LOG2E : INFINITY;
            Dv[mi][hh] = row < T ? Dd[((size_t)b * nh + h) * T + row] : 0.0f;
        }
    float acc[MW][NO][4];
#pragma unroll
    for (int mi = 0; mi < MW; mi++)
        zero(acc[mi]);
    uint32_t qf[MW][QREG ? KS : 1][4], df[MW][QREG ? KS : 1][4];
    const int nt = fa_key_tiles(q0, BR, BC, T);
    for (int it = 0; it < nt; it++) {
        const int j0 = it * BC;
        const bf16 *Kt = Kb + (it & 1) * BC * LD, *Vt = Vb + (it & 1) * BC * LD;
        if (it + 1 < nt) {
            load_rows<HD, BC, NTH>(Kb + ((it + 1) & 1) * BC * LD, kb, qs, j0 + BC, T);
            load_rows<HD, BC, NTH>(Vb + ((it + 1) & 1) * BC * LD, vb, qs, j0 + BC, T);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        if (QREG && it == 0) {
#pragma unroll
            for (int mi = 0; mi < MW; mi++)
#pragma unroll
                for (int kk = 0; kk < (QREG ? KS : 1); kk++) {
                    lda<LD>(qf[mi][kk], Qs, rl + mi * 16, kk * 16, lane);
                    lda<LD>(df[mi][kk], dOs, rl + mi * 16, kk * 16, lane);
                }
        }
        if (rw < T && fa_tile_live(j0, rw, 16 * MW)) { /* warp-uniform */
            float s[MW][NS][4], dp[MW][NS][4];
#pragma unroll
            for (int mi = 0; mi < MW; mi++) {
                zero(s[mi]);
                zero(dp[mi]);
            }
            /* S = Q K^T, dP = dO V^T */
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                if (!QREG)
#pragma unroll
                    for (int mi = 0; mi < MW; mi++) {
                        lda<LD>(qf[mi][0], Qs, rl + mi * 16, kk * 16, lane);
                        lda<LD>(df[mi][0], dOs, rl + mi * 16, kk * 16, lane);
                    }
                const int kq = QREG ? kk : 0;
#pragma unroll
                for (int np = 0; np < NS / 2; np++) {
                    uint32_t bk[4], bv[4];
                    ldb<LD>(bk, Kt, np * 16, kk * 16, lane);
                    ldb<LD>(bv, Vt, np * 16, kk * 16, lane);
#pragma unroll
                    for (int mi = 0; mi < MW; mi++) {
                        mma(s[mi][2 * np], qf[mi][kq], bk[0], bk[1]);
                        mma(s[mi][2 * np + 1], qf[mi][kq], bk[2], bk[3]);
                        mma(dp[mi][2 * np], df[mi][kq], bv[0], bv[1]);
                        mma(dp[mi][2 * np + 1], df[mi][kq], bv[2], bv[3]);
                    }
                }
            }
            const bool diag = fa_tile_diag(j0, BC, rw);
            /* dS = P * (dP - D); dQ += dS K */
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {
                uint32_t da[MW][4];
#pragma unroll
                for (int mi = 0; mi < MW; mi++) {
#pragma unroll
                    for (int n = 2 * kk; n < 2 * kk + 2; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            float p = ex2(fmaf(s[mi][n][e], sc, -L2[mi][e >> 1]));
                            if (diag && j0 + n * 8 + fa_acc_col(lane, e) >
                                            rw + mi * 16 + fa_acc_row(lane, e))
                                p = 0.0f;
                            s[mi][n][e] = p * (dp[mi][n][e] - Dv[mi][e >> 1]);
                        }
                    repack(da[mi], s[mi][2 * kk], s[mi][2 * kk + 1]);
                }
#pragma unroll
                for (int np = 0; np < NO / 2; np++) {
                    uint32_t bk[4];
                    ldbt<LD>(bk, Kt, kk * 16, np * 16, lane);
#pragma unroll
                    for (int mi = 0; mi < MW; mi++) {
                        mma(acc[mi][2 * np], da[mi], bk[0], bk[1]);
                        mma(acc[mi][2 * np + 1], da[mi], bk[2], bk[3]);
                    }
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int mi = 0; mi < MW; mi++) {
        bf16 *r[2];
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int row = rw + mi * 16 + fa_acc_row(lane, 2 * hh);
            r[hh] = row < T ? dq + ((size_t)b * T + row) * qs + (size_t)h * HD : NULL;
        }
        store_acc<HD>(acc[mi], r[0], r[1], scale, scale, lane);
    }
}

/* ---- backward: dK, dV ----------------------------------------------------- */

/* dQ += dS K of one query tile, the dS^T of every warp in dSs [BKV][BQ + 8]
 * (keys x queries), added by fp32 atomics to dqa (query row 0 of one
 * (b, h) of a [B, T, nh, HD] buffer; rows ld apart). Warp w
 * takes the m16 query tile w % (BQ / 16) and HD / (NW / (BQ / 16)) of the
 * columns; key slices of warps with nothing live (fa_qtile_live) are
 * skipped, never read. Rows at or past T are never added. */
template <int HD, int NW, int BQ>
__device__ __forceinline__ void dq_atomic(float *dqa, size_t ld, const bf16 *dSs,
                                          const bf16 *Ks, int i0, int j0, int T, int w,
                                          int lane)
{
    constexpr int LD = HD + 8, LDS = BQ + 8, MT = BQ / 16, NC = HD / (NW / MT);
    static_assert(NW % MT == 0 && NC % 16 == 0, "dQ tiles split evenly over the warps");
    const int mt = w % MT, n0 = (w / MT) * NC;
    float acc[NC / 8][4];
    zero(acc);
#pragma unroll
    for (int kk = 0; kk < NW; kk++) {
        const int kw = j0 + kk * 16; /* warp kk's keys */
        if (kw >= T || !fa_qtile_live(i0, BQ, kw))
            break; /* block-uniform; later warps have later keys */
        uint32_t a[4];
        ldat<LDS>(a, dSs, kk * 16, mt * 16, lane);
#pragma unroll
        for (int np = 0; np < NC / 16; np++) {
            uint32_t bk[4];
            ldbt<LD>(bk, Ks, kk * 16, n0 + np * 16, lane);
            mma(acc[2 * np], a, bk[0], bk[1]);
            mma(acc[2 * np + 1], a, bk[2], bk[3]);
        }
    }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int qi = i0 + mt * 16 + fa_acc_row(lane, 2 * hh);
        if (qi >= T)
            continue;
        float *r = dqa + (size_t)qi * ld + n0 + fa_acc_col(lane, 0);
#pragma unroll
        for (int n = 0; n < NC / 8; n++)
            add2(r + n * 8, acc[n][2 * hh], acc[n][2 * hh + 1]);
    }
}

/* DQ: also dQ (the non-deterministic variant): dS^T goes through shared
 * memory and dq_atomic adds dS K to dqa (fp32 [B, T, nh, HD], zeroed by
 * the caller; dq_convert scales and stores it). dq is then unused.
 * MW: m16 key tiles per warp (a block holds NW * 16 * MW keys): each Q and
 * dO fragment read from shared memory then serves MW of them (MW 1 with
 * DQ only). */
template <int HD, int NW, int MW, int BQ, bool KVREG, bool DQ>
__global__ void __launch_bounds__(NW * 32)
    bwd_dkv(bf16 *dk, bf16 *dv, float *dqa, const bf16 *dout, const float *lse, const float *Dd,
            const bf16 *q, const bf16 *k, const bf16 *v, size_t qs, int T, int nh, int nkv,
            float scale)
{
    static_assert(!DQ || MW == 1, "dQ by atomics takes one key tile per warp");
    constexpr int BKV = NW * 16 * MW, LD = HD + 8, KS = HD / 16, NS = BQ / 8, NO = HD / 8;
    constexpr int NTH = NW * 32, LDS = BQ + 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Ks = (bf16 *)smem;
    bf16 *Vs = Ks + BKV * LD;
    bf16 *Qb = Vs + BKV * LD, *dOb = Qb + 2 * BQ * LD;           /* [2] each */
    float *Lb = (float *)(dOb + 2 * BQ * LD), *Db = Lb + 2 * BQ; /* [2][BQ] each */
    bf16 *dSs = (bf16 *)(Db + 2 * BQ);                           /* [BKV][LDS], DQ only */
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.z, kh = blockIdx.y, group = nh / nkv;
    const int j0 = (gridDim.x - 1 - blockIdx.x) * BKV; /* most query tiles first */
    const int ntq = fa_query_tiles(j0, BQ, T), nt = ntq * group;
    /* tile t: query head kh * group + t / ntq, query rows j0 + (t % ntq) * BQ */
    auto issue = [&](int t) {
        const int h = kh * group + t / ntq, i0 = j0 + (t % ntq) * BQ, buf = t & 1;
        load_rows<HD, BQ, NTH>(Qb + buf * BQ * LD, q + (size_t)b * T * qs + (size_t)h * HD, qs,
                               i0, T);
        load_rows<HD, BQ, NTH>(dOb + buf * BQ * LD,
                               dout + (size_t)b * T * nh * HD + (size_t)h * HD, (size_t)nh * HD,
                               i0, T);
        load_vec<BQ, NTH>(Lb + buf * BQ, lse + ((size_t)b * nh + h) * T, i0, T);
        load_vec<BQ, NTH>(Db + buf * BQ, Dd + ((size_t)b * nh + h) * T, i0, T);
        cp_commit();
    };
    load_rows<HD, BKV, NTH>(Ks, k + (size_t)b * T * qs + (size_t)kh * HD, qs, j0, T);
    load_rows<HD, BKV, NTH>(Vs, v + (size_t)b * T * qs + (size_t)kh * HD, qs, j0, T);
    issue(0);                                 /* one group: K, V and the first query tile */
    const int kl = w * 16 * MW, kw = j0 + kl; /* warp's first key (local, global) */
    const float sc = scale * LOG2E;
    float adk[MW][NO][4], adv[MW][NO][4];
#pragma unroll
    for (int mi = 0; mi < MW; mi++) {
        zero(adk[mi]);
        zero(adv[mi]);
    }
    uint32_t kf[MW][KVREG ? KS : 1][4], vf[MW][KVREG ? KS : 1][4];
    for (int t = 0; t < nt; t++) {
        if (t + 1 < nt) {
            issue(t + 1);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        if (KVREG && t == 0) {
#pragma unroll
            for (int mi = 0; mi < MW; mi++)
#pragma unroll
                for (int kk = 0; kk < (KVREG ? KS : 1); kk++) {
                    lda<LD>(kf[mi][kk], Ks, kl + mi * 16, kk * 16, lane);
                    lda<LD>(vf[mi][kk], Vs, kl + mi * 16, kk * 16, lane);
                }
        }
        const int i0 = j0 + (t % ntq) * BQ, buf = t & 1;
        const bf16 *Qt = Qb + buf * BQ * LD, *dOt = dOb + buf * BQ * LD;
        const float *Lt = Lb + buf * BQ, *Dt = Db + buf * BQ;
        if (kw < T && fa_qtile_live(i0, BQ, kw)) { /* warp-uniform */
            float s[MW][NS][4], dp[MW][NS][4];
#pragma unroll
            for (int mi = 0; mi < MW; mi++) {
                zero(s[mi]);
                zero(dp[mi]);
            }
            /* S^T = K Q^T, dP^T = V dO^T (rows: this warp's 16 MW keys) */
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                if (!KVREG)
#pragma unroll
                    for (int mi = 0; mi < MW; mi++) {
                        lda<LD>(kf[mi][0], Ks, kl + mi * 16, kk * 16, lane);
                        lda<LD>(vf[mi][0], Vs, kl + mi * 16, kk * 16, lane);
                    }
                const int kq = KVREG ? kk : 0;
#pragma unroll
                for (int np = 0; np < NS / 2; np++) {
                    uint32_t bq[4], bo[4];
                    ldb<LD>(bq, Qt, np * 16, kk * 16, lane);
                    ldb<LD>(bo, dOt, np * 16, kk * 16, lane);
#pragma unroll
                    for (int mi = 0; mi < MW; mi++) {
                        mma(s[mi][2 * np], kf[mi][kq], bq[0], bq[1]);
                        mma(s[mi][2 * np + 1], kf[mi][kq], bq[2], bq[3]);
                        mma(dp[mi][2 * np], vf[mi][kq], bo[0], bo[1]);
                        mma(dp[mi][2 * np + 1], vf[mi][kq], bo[2], bo[3]);
                    }
                }
            }
            const bool edge = fa_qtile_edge(i0, BQ, kw, 16 * MW, T);
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++) {
                uint32_t pa[MW][4], da[MW][4];
#pragma unroll
                for (int n = 2 * kk; n < 2 * kk + 2; n++) {
                    const int c = n * 8 + fa_acc_col(lane, 0); /* this lane's columns c, c+1 */
                    const float2 Lv = *(const float2 *)(Lt + c),
                                 Dq2 = *(const float2 *)(Dt + c);
#pragma unroll
                    for (int mi = 0; mi < MW; mi++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const float Li = (e & 1) ? Lv.y : Lv.x,
                                        Di = (e & 1) ? Dq2.y : Dq2.x;
                            float p = ex2(fmaf(s[mi][n][e], sc, -Li * LOG2E));
                            if (edge) {
                                const int qi = i0 + c + (e & 1),
                                          key = kw + mi * 16 + fa_acc_row(lane, e);
                                if (qi < key || qi >= T)
                                    p = 0.0f;
                            }
                            s[mi][n][e] = p;
                            dp[mi][n][e] = p * (dp[mi][n][e] - Di);
                        }
                }
#pragma unroll
                for (int mi = 0; mi < MW; mi++) {
                    repack(pa[mi], s[mi][2 * kk], s[mi][2 * kk + 1]);
                    repack(da[mi], dp[mi][2 * kk], dp[mi][2 * kk + 1]);
                }
                if constexpr (DQ) /* dS^T rows kl.., columns 16kk.. (A register r's place) */
#pragma unroll
                    for (int r = 0; r < 4; r++)
                        *(uint32_t *)(dSs + (kl + fa_acc_row(lane, 2 * (r & 1))) * LDS +
                                      kk * 16 + 8 * (r >> 1) + fa_acc_col(lane, 0)) = da[0][r];
                        /* dV += P^T dO, dK += dS^T Q (k: the tile's queries 16kk..) */
#pragma unroll
                for (int np = 0; np < NO / 2; np++) {
                    uint32_t bo[4], bq[4];
                    ldbt<LD>(bo, dOt, kk * 16, np * 16, lane);
                    ldbt<LD>(bq, Qt, kk * 16, np * 16, lane);
#pragma unroll
                    for (int mi = 0; mi < MW; mi++) {
                        mma(adv[mi][2 * np], pa[mi], bo[0], bo[1]);
                        mma(adv[mi][2 * np + 1], pa[mi], bo[2], bo[3]);
                        mma(adk[mi][2 * np], da[mi], bq[0], bq[1]);
                        mma(adk[mi][2 * np + 1], da[mi], bq[2], bq[3]);
                    }
                }
            }
        }
        /* the next issue() overwrites this buffer; DQ: dSs is whole, and
         * the next write to it follows the next iteration's barrier */
        __syncthreads();
        if constexpr (DQ)
            dq_atomic<HD, NW, BQ>(dqa + ((size_t)b * T * nh + kh * group + t / ntq) * HD,
                                  (size_t)nh * HD, dSs, Ks, i0, j0, T, w, lane);
    }
#pragma unroll
    for (int mi = 0; mi < MW; mi++) {
        bf16 *kr[2], *vr[2];
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int key = kw + mi * 16 + fa_acc_row(lane, 2 * hh);
            const size_t off = ((size_t)b * T + key) * qs + (size_t)kh * HD;
            kr[hh] = key < T ? dk + off : NULL;
            vr[hh] = key < T ? dv + off : NULL;
        }
        store_acc<HD>(adk[mi], kr[0], kr[1], scale, scale, lane);
        store_acc<HD>(adv[mi], vr[0], vr[1], 1.0f, 1.0f, lane);
    }
}

/* ---- launches -------------------------------------------------------------- */

template <int HD> constexpr size_t fwd_smem(int nw, int mw, int bc)
{
    return (size_t)(nw * 16 * mw + 4 * bc) * (HD + 8) * 2;
}
template <int HD> constexpr size_t dq_smem(int nw, int mw, int bc)
{
    return (size_t)(2 * nw * 16 * mw + 4 * bc) * (HD + 8) * 2;
}
template <int HD> constexpr size_t dkv_smem(int nw, int mw, int bq, bool dq)
{
    return (size_t)(2 * nw * 16 * mw + 4 * bq) * (HD + 8) * 2 + (size_t)4 * bq * 4 +
           (dq ? (size_t)nw * 16 * (bq + 8) * 2 : 0);
}

/* kern on grid g of nth threads with sm bytes of dynamic shared memory
 * (the attribute set first: the configurations need more than 48 KiB) */
template <typename... P, typename... A>
cudaError_t launch(void (*kern)(P...), dim3 g, int nth, size_t sm, cudaStream_t st, A... a)
{
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess)
        return e;
    kern<<<g, nth, sm, st>>>(a...);
    return cudaGetLastError();
}

/* the forward with configuration I of Cfgs<HD, FWD> */
template <int HD, int I>
cudaError_t launch_fwd(cudaStream_t st, llmt__bf16 *out, float *lse, const llmt__bf16 *q,
                       const llmt__bf16 *k, const llmt__bf16 *v, size_t qs, int B, int T,
                       int nh, int nkv)
{
    constexpr TileCfg C = Cfgs<HD, FWD>::c[I];
    constexpr int BR = C.nw * 16 * C.mw;
    return launch(fwd<HD, C.nw, C.mw, C.tile, C.reg>, dim3((T + BR - 1) / BR, nh, B), C.nw * 32,
                  fwd_smem<HD>(C.nw, C.mw, C.tile), st, BF(out), lse, CBF(q), CBF(k), CBF(v), qs,
                  T, nh, nkv, LOG2E / sqrtf((float)HD));
}
template <int HD, int I>
cudaError_t launch_dq(cudaStream_t st, llmt__bf16 *dq, const llmt__bf16 *dout, const float *lse,
                      const float *Dd, const llmt__bf16 *q, const llmt__bf16 *k,
                      const llmt__bf16 *v, size_t qs, int B, int T, int nh, int nkv)
{
    constexpr TileCfg C = Cfgs<HD, DQ_K>::c[I];
    constexpr int BR = C.nw * 16 * C.mw;
    return launch(bwd_dq<HD, C.nw, C.mw, C.tile, C.reg>, dim3((T + BR - 1) / BR, nh, B),
                  C.nw * 32, dq_smem<HD>(C.nw, C.mw, C.tile), st, BF(dq), CBF(dout), lse, Dd,
                  CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, 1.0f / sqrtf((float)HD));
}
template <int HD, int I>
cudaError_t launch_dkv(cudaStream_t st, llmt__bf16 *dk, llmt__bf16 *dv, const llmt__bf16 *dout,
                       const float *lse, const float *Dd, const llmt__bf16 *q,
                       const llmt__bf16 *k, const llmt__bf16 *v, size_t qs, int B, int T,
                       int nh, int nkv)
{
    constexpr TileCfg C = Cfgs<HD, DKV_K>::c[I];
    constexpr int BKV = C.nw * 16 * C.mw;
    return launch(bwd_dkv<HD, C.nw, C.mw, C.tile, C.reg, false>,
                  dim3((T + BKV - 1) / BKV, nkv, B), C.nw * 32,
                  dkv_smem<HD>(C.nw, C.mw, C.tile, false), st, BF(dk), BF(dv), (float *)NULL,
                  CBF(dout), lse, Dd, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv,
                  1.0f / sqrtf((float)HD));
}

/* configuration cfg (checked by llmt__cuda_attn_mma_set_cfg) of a kind:
 * launch(std::integral_constant<int, cfg>), by recursion over the list */
template <int HD, int KIND, int I = 0, typename F> cudaError_t pick(int cfg, F launch)
{
    if constexpr (I < Cfgs<HD, KIND>::N)
        return cfg == I ? launch(std::integral_constant<int, I>{})
                        : pick<HD, KIND, I + 1>(cfg, launch);
    else
        return cudaErrorInvalidValue;
}

/* the context's configuration of kind (0 forward, 1 dQ, 2 dK/dV, 3 dK/dV
 * with dQ atomics) for hd */
int cfg_of(const llmt__cuda_ctx *ctx, int hd, int kind)
{
    return ctx->attn_cfg[hd == 128][kind];
}

template <int HD>
llmt_status run_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out, float *lse, const llmt__bf16 *q,
                    const llmt__bf16 *k, const llmt__bf16 *v, size_t qs, int B, int T, int nh,
                    int nkv)
{
    const int cfg = cfg_of(ctx, HD, 0);
    cudaError_t e = pick<HD, FWD>(cfg, [&](auto i) {
        return launch_fwd<HD, decltype(i)::value>(ctx->compute, out, lse, q, k, v, qs, B, T, nh,
                                                   nkv);
    });
    if (e != cudaSuccess)
        return llmt__err_set(&ctx->err, LLMT_ERR_CUDA,
                             "cuda: attention_fwd (mma.sync, hd %d, tile configuration %d): %s",
                             HD, cfg, cudaGetErrorString(e));
    return LLMT_OK;
}

template <int HD>
llmt_status run_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dq, llmt__bf16 *dk, llmt__bf16 *dv,
                    const llmt__bf16 *dout, const float *lse, const float *Dd,
                    const llmt__bf16 *q, const llmt__bf16 *k, const llmt__bf16 *v, size_t qs,
                    int B, int T, int nh, int nkv)
{
    const int c1 = cfg_of(ctx, HD, 1), c2 = cfg_of(ctx, HD, 2);
    cudaError_t e = pick<HD, DQ_K>(c1, [&](auto i) {
        return launch_dq<HD, decltype(i)::value>(ctx->compute, dq, dout, lse, Dd, q, k, v, qs,
                                                  B, T, nh, nkv);
    });
    if (e == cudaSuccess)
        e = pick<HD, DKV_K>(c2, [&](auto i) {
            return launch_dkv<HD, decltype(i)::value>(ctx->compute, dk, dv, dout, lse, Dd, q, k,
                                                       v, qs, B, T, nh, nkv);
        });
    if (e != cudaSuccess)
        return llmt__err_set(&ctx->err, LLMT_ERR_CUDA,
                             "cuda: attention_bwd (mma.sync, hd %d, tile configurations dQ %d, "
                             "dK/dV %d): %s",
                             HD, c1, c2, cudaGetErrorString(e));
    return LLMT_OK;
}

/* dq[b, t, h, :] (rows qs apart) = scale * dqa[b, t, h, :]; n4 = B T nh HD / 4 */
__global__ void dq_convert(bf16 *dq, const float *dqa, size_t n4, int hd4, int nh, size_t qs,
                           float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / hd4; /* (b t) nh + h */
        const size_t c = (i % hd4) * 4, bt = row / nh, h = row % nh;
        const float4 x = ((const float4 *)dqa)[i];
        bf16 *o = dq + bt * qs + h * (size_t)(hd4 * 4) + c;
        *(__nv_bfloat162 *)o = __floats2bfloat162_rn(x.x * scale, x.y * scale);
        *(__nv_bfloat162 *)(o + 2) = __floats2bfloat162_rn(x.z * scale, x.w * scale);
    }
}

/* The FA2 backward with configuration I of Cfgs<HD, DKVQ_K>: one kernel
 * per key block for dK, dV and (atomics into dqa, zeroed first) dQ. */
template <int HD, int I>
cudaError_t launch_dkvq(cudaStream_t st, llmt__bf16 *dk, llmt__bf16 *dv, float *dqa,
                        const llmt__bf16 *dout, const float *lse, const float *Dd,
                        const llmt__bf16 *q, const llmt__bf16 *k, const llmt__bf16 *v,
                        size_t qs, int B, int T, int nh, int nkv)
{
    constexpr TileCfg C = Cfgs<HD, DKVQ_K>::c[I];
    static_assert(C.mw == 1, "dQ by atomics takes one key tile per warp");
    return launch(bwd_dkv<HD, C.nw, 1, C.tile, C.reg, true>,
                  dim3((T + C.nw * 16 - 1) / (C.nw * 16), nkv, B), C.nw * 32,
                  dkv_smem<HD>(C.nw, 1, C.tile, true), st, BF(dk), BF(dv), dqa, CBF(dout), lse,
                  Dd, CBF(q), CBF(k), CBF(v), qs, T, nh, nkv, 1.0f / sqrtf((float)HD));
}

/* The FA2 backward: one kernel per key block for dK, dV and (atomics into
 * an fp32 scratch zeroed first) dQ, then dq_convert. */
template <int HD>
llmt_status run_bwd_atomic(llmt__cuda_ctx *ctx, llmt__bf16 *dq, llmt__bf16 *dk, llmt__bf16 *dv,
                           const llmt__bf16 *dout, const float *lse, const float *Dd,
                           const llmt__bf16 *q, const llmt__bf16 *k, const llmt__bf16 *v,
                           size_t qs, int B, int T, int nh, int nkv)
{
    const float scale = 1.0f / sqrtf((float)HD);
    const int cfg = cfg_of(ctx, HD, DKVQ_K);
    const size_t n = (size_t)B * T * nh * HD;
    float *dqa = NULL;
    llmt_status st = llmt__cuda_alloc(ctx, (void **)&dqa, n * sizeof(float));
    if (st)
        return st;
    cudaError_t e = cudaMemsetAsync(dqa, 0, n * sizeof(float), ctx->compute);
    if (e == cudaSuccess)
        e = pick<HD, DKVQ_K>(cfg, [&](auto i) {
            return launch_dkvq<HD, decltype(i)::value>(ctx->compute, dk, dv, dqa, dout, lse, Dd,
                                                        q, k, v, qs, B, T, nh, nkv);
        });
    if (e == cudaSuccess) {
        dq_convert<<<llmt__grid(n / 4, 256, (unsigned)ctx->num_sms * 16), 256, 0,
                     ctx->compute>>>(BF(dq), dqa, n / 4, HD / 4, nh, qs, scale);
        e = cudaGetLastError();
    }
    llmt__cuda_free(ctx, dqa); /* stream-ordered: reused only by later work */
    if (e != cudaSuccess)
        return llmt__err_set(&ctx->err, LLMT_ERR_CUDA,
                             "cuda: attention_bwd (mma.sync, dQ atomics, tile configuration "
                             "%d): %s",
                             cfg, cudaGetErrorString(e));
    return LLMT_OK;
}

} // namespace fa
} // namespace

extern "C" {

int llmt__cuda_attn_mma_usable(int sm, int hd, size_t qs, const void *a, const void *b,
                               const void *c, const void *d)
{
    uintptr_t al = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d;
    return sm >= 80 && (hd == 64 || hd == 128) && qs % 8 == 0 && (al & 15) == 0;
}

llmt_status llmt__cuda_attn_mma_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out, float *lse,
                                    const llmt__bf16 *q, const llmt__bf16 *k,
                                    const llmt__bf16 *v, size_t qs, int B, int T, int nh,
                                    int nkv, int hd)
{
    if (B == 0 || T == 0)
        return LLMT_OK;
    ctx->attn_mma_calls++;
    if (hd == 64)
        return fa::run_fwd<64>(ctx, out, lse, q, k, v, qs, B, T, nh, nkv);
    if (hd == 128)
        return fa::run_fwd<128>(ctx, out, lse, q, k, v, qs, B, T, nh, nkv);
    return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                         "cuda: attention_fwd (mma.sync): hd=%d (64 or 128 only)", hd);
}

llmt_status llmt__cuda_attn_mma_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dq, llmt__bf16 *dk,
                                    llmt__bf16 *dv, const llmt__bf16 *dout, const float *lse,
                                    const float *Dd, const llmt__bf16 *q, const llmt__bf16 *k,
                                    const llmt__bf16 *v, size_t qs, int B, int T, int nh,
                                    int nkv, int hd)
{
    if (B == 0 || T == 0)
        return LLMT_OK;
    ctx->attn_mma_calls++;
    if (hd == 64)
        return fa::run_bwd<64>(ctx, dq, dk, dv, dout, lse, Dd, q, k, v, qs, B, T, nh, nkv);
    if (hd == 128)
        return fa::run_bwd<128>(ctx, dq, dk, dv, dout, lse, Dd, q, k, v, qs, B, T, nh, nkv);
    return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                         "cuda: attention_bwd (mma.sync): hd=%d (64 or 128 only)", hd);
}

llmt_status llmt__cuda_attn_mma_bwd_atomic(llmt__cuda_ctx *ctx, llmt__bf16 *dq, llmt__bf16 *dk,
                                           llmt__bf16 *dv, const llmt__bf16 *dout,
                                           const float *lse, const float *Dd,
                                           const llmt__bf16 *q, const llmt__bf16 *k,
                                           const llmt__bf16 *v, size_t qs, int B, int T, int nh,
                                           int nkv, int hd)
{
    if (B == 0 || T == 0)
        return LLMT_OK;
    if (hd != 64 && hd != 128)
        return llmt__err_set(
            &ctx->err, LLMT_ERR_INVALID_ARGUMENT,
            "cuda: attention_bwd (mma.sync, dQ atomics): hd=%d (64 or 128 only)", hd);
    ctx->attn_mma_calls++;
    ctx->attn_mmaq_calls++;
    if (hd == 64)
        return fa::run_bwd_atomic<64>(ctx, dq, dk, dv, dout, lse, Dd, q, k, v, qs, B, T, nh,
                                      nkv);
    return fa::run_bwd_atomic<128>(ctx, dq, dk, dv, dout, lse, Dd, q, k, v, qs, B, T, nh, nkv);
}

/* entry idx of a kind's list for hd, or NULL; *n: the list's length */
static const fa::TileCfg *cfg_entry(int hd, int kind, int idx, int *n)
{
    using namespace fa;
    const TileCfg *c = NULL;
    *n = 0;
#define L(H, K)                                                                              \
    if (hd == H && kind == K) {                                                              \
        c = Cfgs<H, K>::c;                                                                   \
        *n = Cfgs<H, K>::N;                                                                  \
    }
    L(64, FWD) L(128, FWD) L(64, DQ_K) L(128, DQ_K) L(64, DKV_K) L(128, DKV_K)
    L(64, DKVQ_K) L(128, DKVQ_K)
#undef L
    return c && idx >= 0 && idx < *n ? c + idx : NULL;
}

int llmt__cuda_attn_mma_cfgs(int hd, int kind)
{
    int n;
    cfg_entry(hd, kind, 0, &n);
    return n;
}

int llmt__cuda_attn_mma_cfg_name(int hd, int kind, int idx, char *buf, size_t n)
{
    int len;
    const fa::TileCfg *c = cfg_entry(hd, kind, idx, &len);
    if (!c || !buf || !n)
        return 0;
    /* the rows a warp's m16 tiles hold, the columns a step walks, the
     * fragments kept: per kind */
    static const char *rows[] = {"rows", "rows", "keys", "keys"},
                      *cols[] = {"keys", "keys", "queries", "queries"},
                      *kept[] = {"Q", "Q/dO", "K/V", "K/V"};
    snprintf(buf, n, "%d warps x %d m16 %s, %d %s/tile, %s %s", c->nw, c->mw, rows[kind],
             c->tile, cols[kind], kept[kind], c->reg ? "in registers" : "re-read");
    return 1;
}

llmt_status llmt__cuda_attn_mma_set_cfg(llmt__cuda_ctx *ctx, int hd, int kind, int idx)
{
    if (idx < 0 || idx >= llmt__cuda_attn_mma_cfgs(hd, kind))
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "cuda: attention (mma.sync): no tile configuration %d of kind %d "
                             "for hd %d (%d of them)",
                             idx, kind, hd, llmt__cuda_attn_mma_cfgs(hd, kind));
    ctx->attn_cfg[hd == 128][kind] = idx;
    return LLMT_OK;
}

uint64_t llmt__cuda_attn_mma_calls(const llmt__cuda_ctx *ctx)
{
    return ctx->attn_mma_calls;
}

uint64_t llmt__cuda_attn_mmaq_calls(const llmt__cuda_ctx *ctx)
{
    return ctx->attn_mmaq_calls;
}

} // extern "C"
