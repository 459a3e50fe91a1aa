// Element-wise and gather kernels: embedding, GELU, SwiGLU, residual, bias,
// RoPE, conversions. Memory-bound: 16-byte accesses (8 bf16) where the
// pointers are aligned and the length allows, a scalar tail otherwise.
#include <math.h>
#include <stdint.h>

#include "../common.cuh"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

namespace {

struct alignas(16) bf8 { __nv_bfloat16 v[8]; };

__device__ __forceinline__ float gelu_f(float x)
{
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube)));
}
__device__ __forceinline__ float gelu_grad(float x)
{
    float cube = 0.044715f * x * x * x;
    float ta = GELU_SCALE * (x + cube);
    float th = tanhf(ta);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) +
           x * 0.5f * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

/* One generic vectorised map over n elements: f(i8 block) on 8-wide chunks
 * when every pointer is aligned, element-wise otherwise. */
template <typename F>
__global__ void map_kernel(size_t n, bool vec, F f)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        size_t n8 = n / 8;
        for (size_t i = tid; i < n8; i += stride) f.vec8(i);
        for (size_t i = n8 * 8 + tid; i < n; i += stride) f.one(i);
    } else {
        for (size_t i = tid; i < n; i += stride) f.one(i);
    }
}

struct GeluFwd {
    __nv_bfloat16 *out; const __nv_bfloat16 *inp;
    __device__ void one(size_t i) const { out[i] = f2bf(gelu_f(bf2f(inp[i]))); }
    __device__ void vec8(size_t i) const {
        bf8 x = ((const bf8 *)inp)[i], y;
#pragma unroll
        for (int k = 0; k < 8; k++) y.v[k] = f2bf(gelu_f(bf2f(x.v[k])));
        ((bf8 *)out)[i] = y;
    }
};
struct GeluBwd {
    __nv_bfloat16 *dinp; const __nv_bfloat16 *inp, *dout;
    __device__ void one(size_t i) const {
        dinp[i] = f2bf(bf2f(dinp[i]) + gelu_grad(bf2f(inp[i])) * bf2f(dout[i]));
    }
    __device__ void vec8(size_t i) const {
        bf8 x = ((const bf8 *)inp)[i], d = ((const bf8 *)dout)[i], a = ((bf8 *)dinp)[i];
#pragma unroll
        for (int k = 0; k < 8; k++)
            a.v[k] = f2bf(bf2f(a.v[k]) + gelu_grad(bf2f(x.v[k])) * bf2f(d.v[k]));
        ((bf8 *)dinp)[i] = a;
    }
};
/* dx *= gelu'(pre): the fp8 data gradient's GELU, outside its GEMM */
struct GeluBwdMul {
    __nv_bfloat16 *dx; const __nv_bfloat16 *pre;
    __device__ void one(size_t i) const { dx[i] = f2bf(bf2f(dx[i]) * gelu_grad(bf2f(pre[i]))); }
    __device__ void vec8(size_t i) const {
        bf8 x = ((const bf8 *)pre)[i], a = ((bf8 *)dx)[i];
#pragma unroll
        for (int k = 0; k < 8; k++) a.v[k] = f2bf(bf2f(a.v[k]) * gelu_grad(bf2f(x.v[k])));
        ((bf8 *)dx)[i] = a;
    }
};
struct SwigluFwd {
    __nv_bfloat16 *out; const __nv_bfloat16 *gate, *up;
    __device__ void one(size_t i) const { out[i] = f2bf(silu_f(bf2f(gate[i])) * bf2f(up[i])); }
    __device__ void vec8(size_t i) const {
        bf8 g = ((const bf8 *)gate)[i], u = ((const bf8 *)up)[i], y;
#pragma unroll
        for (int k = 0; k < 8; k++) y.v[k] = f2bf(silu_f(bf2f(g.v[k])) * bf2f(u.v[k]));
        ((bf8 *)out)[i] = y;
    }
};
struct SwigluBwd {
    __nv_bfloat16 *dgate, *dup, *h; const __nv_bfloat16 *dout, *gate, *up;
    __device__ void el(float d, float g, float u, float &dg, float &du) const {
        float s = 1.0f / (1.0f + expf(-g));
        du += d * g * s;
        dg += d * u * s * (1.0f + g * (1.0f - s));
    }
    /* written, not added to (dev.h): from 0, as zeroed buffers gave */
    /* h: SwigluFwd's value; dgate may alias dout (read first) */
    __device__ void one(size_t i) const {
        float dg = 0.0f, du = 0.0f, g = bf2f(gate[i]), u = bf2f(up[i]);
        el(bf2f(dout[i]), g, u, dg, du);
        dgate[i] = f2bf(dg);
        dup[i] = f2bf(du);
        if (h) h[i] = f2bf(silu_f(g) * u);
    }
    __device__ void vec8(size_t i) const {
        bf8 d = ((const bf8 *)dout)[i], g = ((const bf8 *)gate)[i], u = ((const bf8 *)up)[i];
        bf8 a, b, y;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float dg = 0.0f, du = 0.0f;
            el(bf2f(d.v[k]), bf2f(g.v[k]), bf2f(u.v[k]), dg, du);
            a.v[k] = f2bf(dg);
            b.v[k] = f2bf(du);
            y.v[k] = f2bf(silu_f(bf2f(g.v[k])) * bf2f(u.v[k]));
        }
        ((bf8 *)dgate)[i] = a;
        ((bf8 *)dup)[i] = b;
        if (h) ((bf8 *)h)[i] = y;
    }
};
struct Residual {
    __nv_bfloat16 *out; const __nv_bfloat16 *a, *b;
    __device__ void one(size_t i) const { out[i] = f2bf(bf2f(a[i]) + bf2f(b[i])); }
    __device__ void vec8(size_t i) const {
        bf8 x = ((const bf8 *)a)[i], y = ((const bf8 *)b)[i], z;
#pragma unroll
        for (int k = 0; k < 8; k++) z.v[k] = f2bf(bf2f(x.v[k]) + bf2f(y.v[k]));
        ((bf8 *)out)[i] = z;
    }
};
struct F32ToBf16 {
    __nv_bfloat16 *y; const float *x;
    __device__ void one(size_t i) const { y[i] = f2bf(x[i]); }
    __device__ void vec8(size_t i) const {
        float4 a = ((const float4 *)x)[2 * i], b = ((const float4 *)x)[2 * i + 1];
        bf8 z;
        z.v[0] = f2bf(a.x); z.v[1] = f2bf(a.y); z.v[2] = f2bf(a.z); z.v[3] = f2bf(a.w);
        z.v[4] = f2bf(b.x); z.v[5] = f2bf(b.y); z.v[6] = f2bf(b.z); z.v[7] = f2bf(b.w);
        ((bf8 *)y)[i] = z;
    }
};
struct Bf16ToF32 {
    float *y; const __nv_bfloat16 *x;
    __device__ void one(size_t i) const { y[i] = bf2f(x[i]); }
    __device__ void vec8(size_t i) const {
        bf8 z = ((const bf8 *)x)[i];
        ((float4 *)y)[2 * i] = make_float4(bf2f(z.v[0]), bf2f(z.v[1]), bf2f(z.v[2]), bf2f(z.v[3]));
        ((float4 *)y)[2 * i + 1] = make_float4(bf2f(z.v[4]), bf2f(z.v[5]), bf2f(z.v[6]), bf2f(z.v[7]));
    }
};

bool aligned(const void *a, const void *b = nullptr, const void *c = nullptr,
             const void *d = nullptr, const void *e = nullptr, const void *f = nullptr)
{
    uintptr_t m = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | (uintptr_t)e |
                  (uintptr_t)f;
    return (m & 15) == 0;
}

template <typename F>
llmt_status launch_map(llmt__cuda_ctx *ctx, const char *name, size_t n, bool vec, F f)
{
    if (n == 0) return LLMT_OK;
    unsigned threads = 256;
    size_t work = vec ? (n + 7) / 8 : n;
    unsigned grid = llmt__grid(work, threads, (unsigned)ctx->num_sms * 16);
    map_kernel<<<grid, threads, 0, ctx->compute>>>(n, vec, f);
    LLMT_LAUNCHED(ctx, name);
}

/* ---- embedding ------------------------------------------------------------ */

__global__ void embedding_fwd_kernel(__nv_bfloat16 *out, const int32_t *tok,
                                     const __nv_bfloat16 *wte,
                                     const __nv_bfloat16 *wpe, int BT, int T, int C,
                                     bool vec)
{
    int row = blockIdx.x;
    if (row >= BT) return;
    int t = row % T;
    const __nv_bfloat16 *e = wte + (size_t)tok[row] * C;
    const __nv_bfloat16 *p = wpe ? wpe + (size_t)t * C : nullptr;
    __nv_bfloat16 *o = out + (size_t)row * C;
    if (vec) {
        for (int c = threadIdx.x; c < C / 8; c += blockDim.x) {
            bf8 a = ((const bf8 *)e)[c], r;
            if (p) {
                bf8 b = ((const bf8 *)p)[c];
#pragma unroll
                for (int k = 0; k < 8; k++) r.v[k] = f2bf(bf2f(a.v[k]) + bf2f(b.v[k]));
            } else {
                r = a;
            }
            ((bf8 *)o)[c] = r;
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            o[c] = p ? f2bf(bf2f(e[c]) + bf2f(p[c])) : e[c];
    }
}

/* dwpe[t,c] += sum_b dout[b,t,c]: one thread per (t,c), fixed order. */
__global__ void embedding_bwd_pos_kernel(float *dwpe, const __nv_bfloat16 *dout,
                                         int B, int T, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    float s = 0.0f;
    for (int b = 0; b < B; b++) s += bf2f(dout[(size_t)b * T * C + i]);
    dwpe[i] += s;
}
__global__ void embedding_bwd_tok_atomic(float *dwte, const __nv_bfloat16 *dout,
                                         const int32_t *tok, int BT, int C)
{
    int row = blockIdx.x;
    const __nv_bfloat16 *d = dout + (size_t)row * C;
    float *w = dwte + (size_t)tok[row] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(&w[c], bf2f(d[c]));
}
/* Deterministic: one thread per channel walks every token in order. */
__global__ void embedding_bwd_tok_det(float *dwte, const __nv_bfloat16 *dout,
                                      const int32_t *tok, int BT, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int r = 0; r < BT; r++)
        dwte[(size_t)tok[r] * C + c] += bf2f(dout[(size_t)r * C + c]);
}

/* ---- RoPE ----------------------------------------------------------------- */

/* The rotation of position pos, pair i: cs[pos * hd/2 + i] = (cos, sin) of
 * pos * theta^(-2i/hd), made once per call (T * hd/2 values, L2-resident)
 * by the same expressions the rotation used to evaluate per element. That
 * per-element powf and sincosf, and the 64-bit divisions that split the
 * flat index, made the kernel compute-bound: 92 us a call at Llama 1B's
 * q and k for B 4 (ncu, H200, 2026-11-27) where its 75 MB of traffic
 * take ~18 us. */
__global__ void rope_table_kernel(float2 *cs, int T, int hd, float theta)
{
    int half = hd / 2;
    size_t total = (size_t)T * half;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx % half);
        float pos = (float)(idx / half);
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
        float s, c;
        sincosf(pos * inv_freq, &s, &c);
        cs[idx] = make_float2(c, s);
    }
}

/* One token row a block step, its heads' pairs (i, i + hd/2) over the
 * threads; PAIR2: two neighbouring pairs a thread (bf16x2 accesses, when
 * hd/2 is even and the rows 4-byte aligned). */
template <bool PAIR2>
__global__ void rope_kernel(__nv_bfloat16 *x, const float2 *cs, int BT, int T, int nh,
                            int hd, size_t stride, int inverse)
{
    const int half = hd / 2, per = PAIR2 ? half / 2 : half, items = nh * per;
    const float sg = inverse ? -1.0f : 1.0f;
    for (int r = blockIdx.x; r < BT; r += gridDim.x) {
        const float2 *rc = cs + (size_t)(r % T) * half;
        __nv_bfloat16 *row = x + (size_t)r * stride;
        for (int j = threadIdx.x; j < items; j += blockDim.x) {
            const int h = j / per, i = (j - h * per) * (PAIR2 ? 2 : 1);
            __nv_bfloat16 *p = row + (size_t)h * hd + i;
            if (PAIR2) {
                const float2 c0 = rc[i], c1 = rc[i + 1];
                __nv_bfloat162 a = *(const __nv_bfloat162 *)p;
                __nv_bfloat162 b = *(const __nv_bfloat162 *)(p + half);
                const float a0 = __low2float(a), a1 = __high2float(a);
                const float b0 = __low2float(b), b1 = __high2float(b);
                const float s0 = sg * c0.y, s1 = sg * c1.y;
                *(__nv_bfloat162 *)p =
                    __halves2bfloat162(f2bf(a0 * c0.x - b0 * s0), f2bf(a1 * c1.x - b1 * s1));
                *(__nv_bfloat162 *)(p + half) =
                    __halves2bfloat162(f2bf(b0 * c0.x + a0 * s0), f2bf(b1 * c1.x + a1 * s1));
            } else {
                const float2 c = rc[i];
                const float s = sg * c.y, x1 = bf2f(p[0]), x2 = bf2f(p[half]);
                p[0] = f2bf(x1 * c.x - x2 * s);
                p[half] = f2bf(x2 * c.x + x1 * s);
            }
        }
    }
}

/* ---- bias ------------------------------------------------------------------ */

__global__ void bias_add_kernel(__nv_bfloat16 *x, const __nv_bfloat16 *bias,
                                int N, int C)
{
    size_t total = (size_t)N * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = f2bf(bf2f(x[i]) + bf2f(bias[i % C]));
}

/* Column sums in two deterministic stages: block (cx, ry) sums rows
 * ry, ry+gy, ... of 32 columns with 8 row-lanes, then partial[ry][c]. */
__global__ void colsum_partial(float *partial, const __nv_bfloat16 *d, int N, int C)
{
    __shared__ float sh[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < C)
        for (int r = blockIdx.y * 8 + threadIdx.y; r < N; r += gridDim.y * 8)
            s += bf2f(d[(size_t)r * C + c]);
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
        for (int k = 0; k < 8; k++) t += sh[k][threadIdx.x];
        partial[(size_t)blockIdx.y * C + c] = t;
    }
}
__global__ void colsum_final(float *dbias, const float *partial, int G, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int g = 0; g < G; g++) s += partial[(size_t)g * C + c];
    dbias[c] += s;
}

} // namespace

extern "C" {

llmt_status llmt__cuda_gelu_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                const llmt__bf16 *inp, size_t n)
{
    return launch_map(ctx, "gelu_fwd", n, aligned(out, inp), GeluFwd{BF(out), CBF(inp)});
}
llmt_status llmt__cuda_gelu_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dinp,
                                const llmt__bf16 *inp, const llmt__bf16 *dout,
                                size_t n)
{
    return launch_map(ctx, "gelu_bwd", n, aligned(dinp, inp, dout),
                      GeluBwd{BF(dinp), CBF(inp), CBF(dout)});
}
llmt_status llmt__cuda_gelu_bwd_mul(llmt__cuda_ctx *ctx, llmt__bf16 *dx,
                                    const llmt__bf16 *pre, size_t n)
{
    return launch_map(ctx, "gelu_bwd_mul", n, aligned(dx, pre), GeluBwdMul{BF(dx), CBF(pre)});
}
llmt_status llmt__cuda_swiglu_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                  const llmt__bf16 *gate, const llmt__bf16 *up,
                                  size_t n)
{
    return launch_map(ctx, "swiglu_fwd", n, aligned(out, gate, up),
                      SwigluFwd{BF(out), CBF(gate), CBF(up)});
}
llmt_status llmt__cuda_swiglu_bwd(llmt__cuda_ctx *ctx, llmt__bf16 *dgate,
                                  llmt__bf16 *dup, llmt__bf16 *h, const llmt__bf16 *dout,
                                  const llmt__bf16 *gate, const llmt__bf16 *up,
                                  size_t n)
{
    return launch_map(ctx, "swiglu_bwd", n, aligned(dgate, dup, h, dout, gate, up),
                      SwigluBwd{BF(dgate), BF(dup), BF(h), CBF(dout), CBF(gate), CBF(up)});
}
llmt_status llmt__cuda_residual_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                    const llmt__bf16 *a, const llmt__bf16 *b,
                                    size_t n)
{
    return launch_map(ctx, "residual_fwd", n, aligned(out, a, b),
                      Residual{BF(out), CBF(a), CBF(b)});
}
llmt_status llmt__cuda_f32_to_bf16(llmt__cuda_ctx *ctx, llmt__bf16 *y,
                                   const float *x, size_t n)
{
    return launch_map(ctx, "f32_to_bf16", n, aligned(y, x), F32ToBf16{BF(y), x});
}
llmt_status llmt__cuda_bf16_to_f32(llmt__cuda_ctx *ctx, float *y,
                                   const llmt__bf16 *x, size_t n)
{
    return launch_map(ctx, "bf16_to_f32", n, aligned(y, x), Bf16ToF32{y, CBF(x)});
}

llmt_status llmt__cuda_embedding_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                     const int32_t *tok, const llmt__bf16 *wte,
                                     const llmt__bf16 *wpe, int B, int T, int C)
{
    if (B * T == 0 || C == 0) return LLMT_OK;
    bool vec = C % 8 == 0 && aligned(out, wte, wpe);
    int threads = vec ? (C / 8 < 128 ? 128 : 256) : 256;
    embedding_fwd_kernel<<<B * T, threads, 0, ctx->compute>>>(
        BF(out), tok, CBF(wte), CBF(wpe), B * T, T, C, vec);
    LLMT_LAUNCHED(ctx, "embedding_fwd");
}

llmt_status llmt__cuda_embedding_bwd(llmt__cuda_ctx *ctx, float *dwte,
                                     float *dwpe, const llmt__bf16 *dout,
                                     const int32_t *tok, int B, int T, int C)
{
    if (B * T == 0 || C == 0) return LLMT_OK;
    if (dwpe) {
        size_t n = (size_t)T * C;
        embedding_bwd_pos_kernel<<<(unsigned)((n + 255) / 256), 256, 0, ctx->compute>>>(
            dwpe, CBF(dout), B, T, C);
        LLMT_CU(ctx, cudaGetLastError());
    }
    if (ctx->deterministic)
        embedding_bwd_tok_det<<<(C + 63) / 64, 64, 0, ctx->compute>>>(dwte, CBF(dout), tok, B * T, C);
    else
        embedding_bwd_tok_atomic<<<B * T, 256, 0, ctx->compute>>>(dwte, CBF(dout), tok, B * T, C);
    LLMT_LAUNCHED(ctx, "embedding_bwd");
}

llmt_status llmt__cuda_rope(llmt__cuda_ctx *ctx, llmt__bf16 *x, int B, int T,
                            int nh, int hd, size_t stride, float theta,
                            int inverse)
{
    size_t total = (size_t)B * T * nh * (hd / 2);
    if (total == 0) return LLMT_OK;
    float2 *cs = NULL;
    size_t ncs = (size_t)T * (hd / 2);
    llmt_status st = llmt__cuda_alloc(ctx, (void **)&cs, ncs * sizeof *cs);
    if (st) return st;
    rope_table_kernel<<<llmt__grid(ncs, 256, ctx->num_sms * 4), 256, 0, ctx->compute>>>(
        cs, T, hd, theta);
    const bool pair2 = (hd / 2) % 2 == 0 && stride % 2 == 0 && ((uintptr_t)x & 3) == 0;
    const int rows = B * T;
    const unsigned grid = (unsigned)(rows < ctx->num_sms * 16 ? rows : ctx->num_sms * 16);
    if (pair2)
        rope_kernel<true><<<grid, 256, 0, ctx->compute>>>(BF(x), cs, rows, T, nh, hd, stride,
                                                          inverse);
    else
        rope_kernel<false><<<grid, 256, 0, ctx->compute>>>(BF(x), cs, rows, T, nh, hd, stride,
                                                           inverse);
    llmt__cuda_free(ctx, cs);
    LLMT_LAUNCHED(ctx, "rope");
}

llmt_status llmt__cuda_bias_add(llmt__cuda_ctx *ctx, llmt__bf16 *x,
                                const llmt__bf16 *bias, int N, int C)
{
    size_t total = (size_t)N * C;
    if (total == 0) return LLMT_OK;
    bias_add_kernel<<<llmt__grid(total, 256, ctx->num_sms * 16), 256, 0, ctx->compute>>>(
        BF(x), CBF(bias), N, C);
    LLMT_LAUNCHED(ctx, "bias_add");
}

llmt_status llmt__cuda_bias_bwd(llmt__cuda_ctx *ctx, float *dbias,
                                const llmt__bf16 *dout, int N, int C)
{
    if (N == 0 || C == 0) return LLMT_OK;
    int cx = (C + 31) / 32;
    int gy = (ctx->num_sms * 8 + cx - 1) / cx;
    if (gy > (N + 7) / 8) gy = (N + 7) / 8;
    if (gy < 1) gy = 1;
    float *partial = NULL;
    llmt_status st = llmt__cuda_alloc(ctx, (void **)&partial, (size_t)gy * C * sizeof(float));
    if (st) return st;
    colsum_partial<<<dim3(cx, gy), dim3(32, 8), 0, ctx->compute>>>(partial, CBF(dout), N, C);
    colsum_final<<<(C + 255) / 256, 256, 0, ctx->compute>>>(dbias, partial, gy, C);
    llmt__cuda_free(ctx, partial);
    LLMT_LAUNCHED(ctx, "bias_bwd");
}

} // extern "C"
