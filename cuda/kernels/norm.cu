// LayerNorm and RMSNorm, forward and backward, bf16 activations with fp32
// statistics. Forward: one warp per row. Backward: one block per group of
// rows; weight gradients go through per-block partials reduced in a fixed
// order (deterministic, no atomics).
#include <math.h>
#include <stdint.h>

#include "../common.cuh"

namespace {

struct alignas(16) bf8 { __nv_bfloat16 v[8]; };

/* Warp per row. vec: C % 8 == 0 and 16-byte aligned rows. */
template <bool RMS>
__global__ void norm_fwd_kernel(__nv_bfloat16 *out, float *mean, float *rstd,
                                const __nv_bfloat16 *inp, const __nv_bfloat16 *w,
                                const __nv_bfloat16 *b, int N, int C, float eps,
                                bool vec)
{
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    const __nv_bfloat16 *x = inp + (size_t)row * C;
    __nv_bfloat16 *o = out + (size_t)row * C;
    float m = 0.0f;
    if (!RMS) {
        float s = 0.0f;
        if (vec) {
            for (int c = lane; c < C / 8; c += 32) {
                bf8 a = ((const bf8 *)x)[c];
#pragma unroll
                for (int k = 0; k < 8; k++) s += bf2f(a.v[k]);
            }
        } else {
            for (int c = lane; c < C; c += 32) s += bf2f(x[c]);
        }
        m = warp_sum(s) / C;
    }
    float v = 0.0f;
    if (vec) {
        for (int c = lane; c < C / 8; c += 32) {
            bf8 a = ((const bf8 *)x)[c];
#pragma unroll
            for (int k = 0; k < 8; k++) { float d = bf2f(a.v[k]) - m; v += d * d; }
        }
    } else {
        for (int c = lane; c < C; c += 32) { float d = bf2f(x[c]) - m; v += d * d; }
    }
    float s = rsqrtf(warp_sum(v) / C + eps);
    if (vec) {
        for (int c = lane; c < C / 8; c += 32) {
            bf8 a = ((const bf8 *)x)[c], ww = ((const bf8 *)w)[c], bb, r;
            if (!RMS && b) bb = ((const bf8 *)b)[c];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float y = (bf2f(a.v[k]) - m) * s * bf2f(ww.v[k]);
                if (!RMS && b) y += bf2f(bb.v[k]);
                r.v[k] = f2bf(y);
            }
            ((bf8 *)o)[c] = r;
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            float y = (bf2f(x[c]) - m) * s * bf2f(w[c]);
            if (!RMS && b) y += bf2f(b[c]);
            o[c] = f2bf(y);
        }
    }
    if (lane == 0) {
        if (!RMS && mean) mean[row] = m;
        rstd[row] = s;
    }
}

/* Block g handles rows g, g+G, ...; thread owns channels c = tid + k*bdim
 * and keeps their dw/db sums in shared memory (dyn: 2*C floats). */
template <bool RMS>
__global__ void norm_bwd_kernel(__nv_bfloat16 *dinp, float *pdw, float *pdb,
                                const __nv_bfloat16 *dout,
                                const __nv_bfloat16 *inp, const __nv_bfloat16 *w,
                                const float *mean, const float *rstd, int N, int C)
{
    extern __shared__ float dyn[];
    __shared__ float red[32];
    float *sdw = dyn, *sdb = dyn + C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) { sdw[c] = 0.0f; sdb[c] = 0.0f; }
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        const __nv_bfloat16 *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
        __nv_bfloat16 *di = dinp + (size_t)row * C;
        float m = RMS ? 0.0f : mean[row], s = rstd[row];
        float a = 0.0f, bsum = 0.0f;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float xh = (bf2f(x[c]) - m) * s;
            float dn = bf2f(w[c]) * bf2f(d[c]);
            a += dn;
            bsum += dn * xh;
        }
        float sa = RMS ? 0.0f : block_sum(a, red) / C;
        __syncthreads();
        float sb = block_sum(bsum, red) / C;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float dd = bf2f(d[c]);
            float xh = (bf2f(x[c]) - m) * s;
            float dn = bf2f(w[c]) * dd;
            sdw[c] += dd * xh;
            if (!RMS) sdb[c] += dd;
            float g = (dn - sa - xh * sb) * s;
            di[c] = f2bf(bf2f(di[c]) + g);
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        pdw[(size_t)blockIdx.x * C + c] = sdw[c];
        if (!RMS) pdb[(size_t)blockIdx.x * C + c] = sdb[c];
    }
}

/* dw[c] += sum over g of pdw[g][c] (db likewise): block (32, PF_ROWS)
 * takes 32 columns, thread (x, y) sums partials y, y + PF_ROWS, ... of
 * column x, then row 0 adds the PF_ROWS sums in order: deterministic, and
 * PF_ROWS times the loads in flight of one thread per column (the sums
 * run over 3-4 partials per SM; one thread per column left the kernel
 * waiting on latency) */
constexpr int PF_ROWS = 16;
__global__ void __launch_bounds__(32 * PF_ROWS)
partial_final(float *dw, float *db, const float *pdw, const float *pdb, int G, int C)
{
    __shared__ float sw[PF_ROWS][33], sb[PF_ROWS][33];
    const int x = threadIdx.x, y = threadIdx.y, c = blockIdx.x * 32 + x;
    float s = 0.0f, t = 0.0f;
    if (c < C)
        for (int g = y; g < G; g += PF_ROWS) {
            s += pdw[(size_t)g * C + c];
            if (pdb) t += pdb[(size_t)g * C + c];
        }
    sw[y][x] = s;
    sb[y][x] = t;
    __syncthreads();
    if (y || c >= C) return;
    s = 0.0f;
    t = 0.0f;
    for (int r = 0; r < PF_ROWS; r++) {
        s += sw[r][x];
        t += sb[r][x];
    }
    dw[c] += s;
    if (db) db[c] += t;
}
/* the launch of partial_final over C columns */
#define PARTIAL_FINAL(dw, db, pdw, pdb, G, C)                                          \
    partial_final<<<((C) + 31) / 32, dim3(32, PF_ROWS), 0, ctx->compute>>>(dw, db, pdw, \
                                                                         pdb, G, C)

/* Fast paths for C = NV * 256 (768, 1024, 2048, ...): the row lives in
 * registers (NV 16-byte chunks per lane), one DRAM read and one write;
 * the backward's up to C 2048 (Llama 1B's width), the forward's too. */
/* R rows per warp (R 2: a tuning variant, llmt__cuda_norm_set_cfg: both
 * rows' loads in flight before either's reduction) */
template <int NV, bool RMS, int R>
__global__ void __launch_bounds__(256)
norm_fwd_reg(__nv_bfloat16 *out, float *mean, float *rstd, const __nv_bfloat16 *inp,
             const __nv_bfloat16 *w, const __nv_bfloat16 *b, int N, float eps)
{
    constexpr int C = NV * 256;
    int lane = threadIdx.x & 31;
    int row0 = (blockIdx.x * 8 + (threadIdx.x >> 5)) * R;
    if (row0 >= N) return;
    bf8 a[R][NV];
#pragma unroll
    for (int j = 0; j < R; j++)
#pragma unroll
        for (int i = 0; i < NV; i++)
            if (row0 + j < N)
                a[j][i] = ((const bf8 *)(inp + (size_t)(row0 + j) * C))[lane + 32 * i];
#pragma unroll
    for (int j = 0; j < R; j++) {
        const int row = row0 + j;
        if (row >= N) break; /* warp-uniform */
        float v[NV][8];
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int k = 0; k < 8; k++) { v[i][k] = bf2f(a[j][i].v[k]); s += v[i][k]; }
        float m = RMS ? 0.0f : warp_sum(s) * (1.0f / C);
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int k = 0; k < 8; k++) { float d = v[i][k] - m; q += d * d; }
        float r = rsqrtf(warp_sum(q) * (1.0f / C) + eps);
        bf8 *o = (bf8 *)(out + (size_t)row * C);
#pragma unroll
        for (int i = 0; i < NV; i++) {
            bf8 ww = ((const bf8 *)w)[lane + 32 * i], bb, y;
            if (!RMS && b) bb = ((const bf8 *)b)[lane + 32 * i];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float t = (v[i][k] - m) * r * bf2f(ww.v[k]);
                if (!RMS && b) t += bf2f(bb.v[k]);
                y.v[k] = f2bf(t);
            }
            o[lane + 32 * i] = y;
        }
        if (lane == 0) {
            if (!RMS && mean) mean[row] = m;
            rstd[row] = r;
        }
    }
}

/* Backward fast path: warp per row (rows strided over the grid). Each
 * warp keeps its dw/db partial sums in its own slice of shared memory
 * (laid out [k][C/8] so a warp's accesses are consecutive), then the block
 * sums its 8 warps in a fixed order into part[blockIdx.x][C]. Registers stay
 * low so that enough warps are resident to cover memory latency. */
/* resident blocks per SM the backward's registers are capped for, the
 * most at which nothing spills (nvcc -Xptxas -v, sm_90): 3 up to C 768
 * (85 registers), 2 up to C 1536 (128), 1 above (255; 8 warps of 2 NV
 * 16-byte loads in flight per lane still cover the latency) */
template <int NV> constexpr int bwd_minb()
{
    return NV <= 3 ? 3 : NV <= 6 ? 2 : 1;
}
/* VAR, the kernel's variants: 1 dinp loaded with x and dout, before the
 * row's reductions (configuration 0, the default again since an H200 ran
 * it in 0.67x the time of VAR 0 at RMSNorm 16384 x 2048 and 0.98x at
 * 768, LayerNorm 0.98-1.0x: more loads in flight outweigh its spills at C
 * 768 and 1024, tools/gpu-tune.sh, 2026-11-27); 0 (configuration 1) dinp
 * read chunk by chunk in the second pass; 2 (configuration 2, C <= 768:
 * it spills at LayerNorm's 1024) the weight-gradient sums in registers,
 * written to shared memory once at the end (0.95-1.09x VAR 0's time,
 * same run). The sums run in the same order: the same bits. */
template <int NV, int VAR> constexpr int bwd_blocks()
{
    return VAR == 2 ? 2 : bwd_minb<NV>();
}
template <int NV, bool RMS, int VAR>
__global__ void __launch_bounds__(256, bwd_blocks<NV, VAR>())
norm_bwd_reg(__nv_bfloat16 *dinp, float *pdw, float *pdb, const __nv_bfloat16 *dout,
             const __nv_bfloat16 *inp, const __nv_bfloat16 *w, const float *mean,
             const float *rstd, int N)
{
    constexpr int C = NV * 256, C8 = NV * 32;
    extern __shared__ float sh[]; /* dw [8][C], db [8][C] (RMS: dw only) */
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    constexpr bool PRE = VAR == 1, ACC = VAR == 2;
    float *mw = sh + wid * C, *mb = sh + (8 + wid) * C;
    float aw[ACC ? NV : 1][8], ab[ACC && !RMS ? NV : 1][8];
#pragma unroll
    for (int i = 0; i < NV; i++)
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (ACC) {
                aw[i][k] = 0.0f;
                if (!RMS) ab[i][k] = 0.0f;
                continue;
            }
            mw[k * C8 + lane + 32 * i] = 0.0f;
            if (!RMS) mb[k * C8 + lane + 32 * i] = 0.0f;
        }
    for (int row = blockIdx.x * 8 + wid; row < N; row += gridDim.x * 8) {
        const bf8 *x = (const bf8 *)(inp + (size_t)row * C);
        const bf8 *d = (const bf8 *)(dout + (size_t)row * C);
        bf8 *di = (bf8 *)(dinp + (size_t)row * C);
        float m = RMS ? 0.0f : mean[row], r = rstd[row];
        /* dinp is read chunk by chunk in the second pass: holding it too
         * (12 NV registers for the three operands) spilled from C 768 on */
        bf8 xa[NV], da[NV], gp[PRE ? NV : 1];
#pragma unroll
        for (int i = 0; i < NV; i++) {
            xa[i] = x[lane + 32 * i];
            da[i] = d[lane + 32 * i];
            if (PRE) gp[i] = di[lane + 32 * i];
        }
        float sa = 0.0f, sb = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            bf8 ww = ((const bf8 *)w)[lane + 32 * i];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float xh = (bf2f(xa[i].v[k]) - m) * r;
                float dn = bf2f(ww.v[k]) * bf2f(da[i].v[k]);
                sa += dn;
                sb += dn * xh;
            }
        }
        sa = RMS ? 0.0f : warp_sum(sa) * (1.0f / C);
        sb = warp_sum(sb) * (1.0f / C);
#pragma unroll
        for (int i = 0; i < NV; i++) {
            bf8 ww = ((const bf8 *)w)[lane + 32 * i], ga = PRE ? gp[i] : di[lane + 32 * i];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float xh = (bf2f(xa[i].v[k]) - m) * r;
                float dd = bf2f(da[i].v[k]);
                if (ACC) {
                    aw[i][k] += dd * xh;
                    if (!RMS) ab[i][k] += dd;
                } else {
                    mw[k * C8 + lane + 32 * i] += dd * xh;
                    if (!RMS) mb[k * C8 + lane + 32 * i] += dd;
                }
                float t = (bf2f(ww.v[k]) * dd - sa - xh * sb) * r;
                ga.v[k] = f2bf(bf2f(ga.v[k]) + t);
            }
            di[lane + 32 * i] = ga;
        }
    }
    if (ACC)
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int k = 0; k < 8; k++) {
                mw[k * C8 + lane + 32 * i] = aw[i][k];
                if (!RMS) mb[k * C8 + lane + 32 * i] = ab[i][k];
            }
    __syncthreads();
    for (int pass = 0; pass < (RMS ? 1 : 2); pass++) {
        float *dst = pass ? pdb : pdw;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            int j = c >> 3, k = c & 7;
            float t = 0.0f;
            for (int q = 0; q < 8; q++) t += sh[(pass * 8 + q) * C + k * C8 + j];
            dst[(size_t)blockIdx.x * C + c] = t;
        }
    }
}

template <int NV, bool RMS, int VAR>
llmt_status norm_bwd_fast(llmt__cuda_ctx *ctx, llmt__bf16 *dinp, float *dw, float *db,
                          const llmt__bf16 *dout, const llmt__bf16 *inp,
                          const llmt__bf16 *w, const float *mean, const float *rstd,
                          int N, const char *name)
{
    constexpr int C = NV * 256;
    size_t smem = (RMS ? 8 : 16) * (size_t)C * sizeof(float);
    if (smem > 48 * 1024)
        LLMT_CU(ctx, cudaFuncSetAttribute(norm_bwd_reg<NV, RMS, VAR>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)smem));
    int G = ctx->num_sms * (C <= 512 ? 4 : bwd_blocks<NV, VAR>());
    if (G > (N + 7) / 8) G = (N + 7) / 8;
    float *part = NULL;
    llmt_status st = llmt__cuda_alloc(ctx, (void **)&part, 2 * (size_t)G * C * sizeof(float));
    if (st) return st;
    norm_bwd_reg<NV, RMS, VAR><<<G, 256, smem, ctx->compute>>>(
        BF(dinp), part, part + (size_t)G * C, CBF(dout), CBF(inp), CBF(w), mean, rstd, N);
    PARTIAL_FINAL(dw, RMS ? NULL : db, part, (RMS || !db) ? NULL : part + (size_t)G * C, G, C);
    llmt__cuda_free(ctx, part);
    LLMT_LAUNCHED(ctx, name);
}

template <bool RMS>
llmt_status norm_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out, float *mean, float *rstd,
                     const llmt__bf16 *inp, const llmt__bf16 *w, const llmt__bf16 *b,
                     int N, int C, float eps)
{
    if (N == 0) return LLMT_OK;
    uintptr_t al = (uintptr_t)out | (uintptr_t)inp | (uintptr_t)w | (uintptr_t)b;
    bool vec = C % 8 == 0 && (al & 15) == 0;
    int wpb = 8;
    if (vec && C % 256 == 0 && C <= 2048) {
        /* two rows a warp (configuration 1) up to C 1024: the row pair's
         * registers above that would spill */
        const bool two = ctx->norm_cfg[0] == 1 && C <= 1024;
        unsigned g = (unsigned)(two ? (N + 15) / 16 : (N + 7) / 8);
        switch (C / 256) {
#define F(nv) case nv: if (two) norm_fwd_reg<nv, RMS, 2><<<g, 256, 0, ctx->compute>>>(BF(out), mean, rstd, CBF(inp), CBF(w), CBF(b), N, eps); else norm_fwd_reg<nv, RMS, 1><<<g, 256, 0, ctx->compute>>>(BF(out), mean, rstd, CBF(inp), CBF(w), CBF(b), N, eps); break;
        F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8)
#undef F
        }
        LLMT_LAUNCHED(ctx, RMS ? "rmsnorm_fwd" : "layernorm_fwd");
    }
    norm_fwd_kernel<RMS><<<(N + wpb - 1) / wpb, wpb * 32, 0, ctx->compute>>>(
        BF(out), mean, rstd, CBF(inp), CBF(w), CBF(b), N, C, eps, vec);
    LLMT_LAUNCHED(ctx, RMS ? "rmsnorm_fwd" : "layernorm_fwd");
}

template <bool RMS>
llmt_status norm_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dinp, float *dw, float *db,
                     const llmt__bf16 *dout, const llmt__bf16 *inp,
                     const llmt__bf16 *w, const float *mean, const float *rstd,
                     int N, int C)
{
    if (N == 0 || C == 0) return LLMT_OK;
    const char *name = RMS ? "rmsnorm_bwd" : "layernorm_bwd";
    uintptr_t al = (uintptr_t)dinp | (uintptr_t)dout | (uintptr_t)inp | (uintptr_t)w;
    if ((al & 15) == 0 && C % 256 == 0 && C <= 2048) {
        switch (C / 256) {
#define B(nv) case nv: return ctx->norm_cfg[1] == 1 ? norm_bwd_fast<nv, RMS, 0>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, name) : ctx->norm_cfg[1] == 2 ? norm_bwd_fast<nv, RMS, (nv <= 3 ? 2 : 0)>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, name) : norm_bwd_fast<nv, RMS, 1>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, name);
        B(1) B(2) B(3) B(4) B(5) B(6) B(7) B(8)
#undef B
        }
    }
    size_t smem = 2 * (size_t)C * sizeof(float);
    if (smem > 200 * 1024)
        return llmt__err_set(&ctx->err, LLMT_ERR_UNSUPPORTED,
                             "cuda: %s: C=%d over 25600 channels", name, C);
    if (smem > 48 * 1024)
        LLMT_CU(ctx, cudaFuncSetAttribute(norm_bwd_kernel<RMS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)smem));
    int G = ctx->num_sms * 4;
    if (G > N) G = N;
    float *part = NULL;
    llmt_status st = llmt__cuda_alloc(ctx, (void **)&part, 2 * (size_t)G * C * sizeof(float));
    if (st) return st;
    int threads = C >= 1024 ? 512 : 256;
    norm_bwd_kernel<RMS><<<G, threads, smem, ctx->compute>>>(
        BF(dinp), part, part + (size_t)G * C, CBF(dout), CBF(inp), CBF(w), mean, rstd, N, C);
    PARTIAL_FINAL(dw, RMS ? NULL : db, part, (RMS || !db) ? NULL : part + (size_t)G * C, G, C);
    llmt__cuda_free(ctx, part);
    LLMT_LAUNCHED(ctx, name);
}

} // namespace

extern "C" {

int llmt__cuda_norm_cfgs(int kind)
{
    return kind == 0 ? 2 : kind == 1 ? 3 : 0;
}

llmt_status llmt__cuda_norm_set_cfg(llmt__cuda_ctx *ctx, int kind, int idx)
{
    if (idx < 0 || idx >= llmt__cuda_norm_cfgs(kind))
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "cuda: norm: no configuration %d of kind %d (kind 0 forward: 2 "
                             "configurations, kind 1 backward: 3)",
                             idx, kind);
    ctx->norm_cfg[kind] = idx;
    return LLMT_OK;
}

llmt_status llmt__cuda_layernorm_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                     float *mean, float *rstd,
                                     const llmt__bf16 *inp, const llmt__bf16 *w,
                                     const llmt__bf16 *b, int N, int C,
                                     float eps)
{
    return norm_fwd<false>(ctx, out, mean, rstd, inp, w, b, N, C, eps);
}
llmt_status llmt__cuda_layernorm_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dinp,
                                     float *dw, float *db,
                                     const llmt__bf16 *dout,
                                     const llmt__bf16 *inp, const llmt__bf16 *w,
                                     const float *mean, const float *rstd,
                                     int N, int C)
{
    return norm_bwd<false>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
llmt_status llmt__cuda_rmsnorm_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                   float *rstd, const llmt__bf16 *inp,
                                   const llmt__bf16 *w, int N, int C, float eps)
{
    return norm_fwd<true>(ctx, out, NULL, rstd, inp, w, NULL, N, C, eps);
}
llmt_status llmt__cuda_rmsnorm_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dinp,
                                   float *dw, const llmt__bf16 *dout,
                                   const llmt__bf16 *inp, const llmt__bf16 *w,
                                   const float *rstd, int N, int C)
{
    return norm_bwd<true>(ctx, dinp, dw, NULL, dout, inp, w, NULL, rstd, N, C);
}

} // extern "C"
