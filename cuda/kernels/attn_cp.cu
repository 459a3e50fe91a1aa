// Context parallelism's attention pieces on the GPU: the device twins of
// lib/exec/attn_cp.c (attn_cp.h has the contracts) with bf16 storage, for a
// CUDA context parallel engine that does not exist yet (doc/gpu.md, "Not
// done": lib/train/cp.c's exchange and blocks still run on host memory).
// Written in a session without a GPU: compiled, never run.
//
// Each kernel is the host loop's structure, one thread per row of the
// host's outer loop (a query row of a head, a key row of a kv head, an
// element), and the same float operations in the same order, rounded one
// by one (explicit _rn intrinsics: no FMA contraction), so that the GPU
// test can hold them to the host reference closely; only expf, logf,
// log1pf, sinf, cosf and powf differ by an ulp or two. That is not the fast
// way (flash tiling as attention.cu's); it is the way to a checked
// reference on the device first.
#include <math.h>
#include <stdint.h>

#include "../common.cuh"

namespace {

constexpr int HDMAX = 128;
constexpr int NT = 128;

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }

/* sum of a[i] * b[i] in order, each product and sum rounded (attn_cp.c's
 * dot) */
__device__ float dot(const __nv_bfloat16 *a, const __nv_bfloat16 *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++) s = add(s, mul(bf2f(a[i]), bf2f(b[i])));
    return s;
}

__global__ void cp_rope_kernel(__nv_bfloat16 *x, int BT, int T, int nh, int hd, size_t stride,
                               float theta, int inverse, const int32_t *pos)
{
    int half = hd / 2;
    size_t n = (size_t)BT * half;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx % half);
        size_t r = idx / half;
        float p = (float)pos[r % T];
        float inv_freq = __fdiv_rn(1.0f, powf(theta, __fdiv_rn((float)(2 * i), (float)hd)));
        float a = mul(p, inv_freq), c = cosf(a), s = sinf(a);
        if (inverse) s = -s;
        for (int h = 0; h < nh; h++) {
            __nv_bfloat16 *o = x + r * stride + (size_t)h * hd;
            float x1 = bf2f(o[i]), x2 = bf2f(o[i + half]);
            o[i] = f2bf(sub(mul(x1, c), mul(x2, s)));
            o[i + half] = f2bf(add(mul(x2, c), mul(x1, s)));
        }
    }
}

__global__ void __launch_bounds__(NT)
cp_fwd_kernel(float *o, float *lse, const __nv_bfloat16 *q, size_t qs, const __nv_bfloat16 *kv,
              size_t kvs, int B, int Tq, int Tk, int nh, int nkv, int hd, const int32_t *qpos,
              const int32_t *kpos)
{
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)B * nh * Tq) return;
    int group = nh / nkv;
    float scale = __fdiv_rn(1.0f, sqrtf((float)hd));
    int t = (int)(idx % Tq), h = (int)(idx / Tq % nh), b = (int)(idx / Tq / nh);
    int kh = h / group;
    const __nv_bfloat16 *qr = q + ((size_t)b * Tq + t) * qs + (size_t)h * hd;
    float m = -INFINITY, l = 0.0f, acc[HDMAX];
    for (int i = 0; i < hd; i++) acc[i] = 0.0f;
    for (int j = 0; j < Tk; j++) {
        if (kpos[j] > qpos[t]) continue;
        const __nv_bfloat16 *kr = kv + ((size_t)b * Tk + j) * kvs + (size_t)kh * hd;
        const __nv_bfloat16 *vr = kr + (size_t)nkv * hd;
        float sc = mul(dot(qr, kr, hd), scale);
        if (sc > m) {
            float r = expf(sub(m, sc));
            l = mul(l, r);
            for (int i = 0; i < hd; i++) acc[i] = mul(acc[i], r);
            m = sc;
        }
        float p = expf(sub(sc, m));
        l = add(l, p);
        for (int i = 0; i < hd; i++) acc[i] = add(acc[i], mul(p, bf2f(vr[i])));
    }
    if (m == -INFINITY) return; /* no key of this block is visible */
    float *L = &lse[((size_t)b * nh + h) * Tq + t];
    float Lb = add(m, logf(l));
    float Lo = *L;
    float Ln = Lo > Lb ? add(Lo, log1pf(expf(sub(Lb, Lo)))) : add(Lb, log1pf(expf(sub(Lo, Lb))));
    float wo = expf(sub(Lo, Ln)), wb = __fdiv_rn(expf(sub(Lb, Ln)), l);
    float *orow = o + ((size_t)b * Tq + t) * nh * hd + (size_t)h * hd;
    for (int i = 0; i < hd; i++) orow[i] = add(mul(orow[i], wo), mul(acc[i], wb));
    *L = Ln;
}

__global__ void cp_delta_kernel(float *D, const __nv_bfloat16 *dout, const __nv_bfloat16 *out,
                                int B, int T, int nh, int hd)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * nh * T) return;
    size_t t = idx % T, h = idx / T % nh, b = idx / T / nh;
    size_t i0 = (b * T + t) * (size_t)nh * hd + h * hd;
    D[idx] = dot(dout + i0, out + i0, hd);
}

__global__ void __launch_bounds__(NT)
cp_bwd_dq_kernel(float *dq, const float *D, const float *lse, const __nv_bfloat16 *dout,
                 const __nv_bfloat16 *q, size_t qs, const __nv_bfloat16 *kv, size_t kvs, int B,
                 int Tq, int Tk, int nh, int nkv, int hd, const int32_t *qpos,
                 const int32_t *kpos)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * nh * Tq) return;
    int group = nh / nkv;
    float scale = __fdiv_rn(1.0f, sqrtf((float)hd));
    int t = (int)(idx % Tq), h = (int)(idx / Tq % nh), b = (int)(idx / Tq / nh);
    int kh = h / group;
    const __nv_bfloat16 *qr = q + ((size_t)b * Tq + t) * qs + (size_t)h * hd;
    size_t di = ((size_t)b * Tq + t) * (size_t)nh * hd + (size_t)h * hd;
    float Lt = lse[idx], Dt = D[idx], acc[HDMAX];
    for (int i = 0; i < hd; i++) acc[i] = 0.0f;
    for (int j = 0; j < Tk; j++) {
        if (kpos[j] > qpos[t]) continue;
        const __nv_bfloat16 *kr = kv + ((size_t)b * Tk + j) * kvs + (size_t)kh * hd;
        const __nv_bfloat16 *vr = kr + (size_t)nkv * hd;
        float p = expf(sub(mul(dot(qr, kr, hd), scale), Lt));
        float ds = mul(p, sub(dot(dout + di, vr, hd), Dt));
        for (int i = 0; i < hd; i++) acc[i] = add(acc[i], mul(ds, bf2f(kr[i])));
    }
    float *dqr = dq + di;
    for (int i = 0; i < hd; i++) dqr[i] = add(dqr[i], mul(acc[i], scale));
}

__global__ void __launch_bounds__(NT)
cp_bwd_dkv_kernel(float *dkv, const float *D, const float *lse, const __nv_bfloat16 *dout,
                  const __nv_bfloat16 *q, size_t qs, const __nv_bfloat16 *kv, size_t kvs, int B,
                  int Tq, int Tk, int nh, int nkv, int hd, const int32_t *qpos,
                  const int32_t *kpos)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * nkv * Tk) return;
    int group = nh / nkv;
    float scale = __fdiv_rn(1.0f, sqrtf((float)hd));
    int j = (int)(idx % Tk), kh = (int)(idx / Tk % nkv), b = (int)(idx / Tk / nkv);
    const __nv_bfloat16 *kr = kv + ((size_t)b * Tk + j) * kvs + (size_t)kh * hd;
    const __nv_bfloat16 *vr = kr + (size_t)nkv * hd;
    float dka[HDMAX], dva[HDMAX];
    for (int i = 0; i < hd; i++) dka[i] = dva[i] = 0.0f;
    for (int h = kh * group; h < (kh + 1) * group; h++)
        for (int t = 0; t < Tq; t++) {
            if (kpos[j] > qpos[t]) continue;
            size_t r = ((size_t)b * nh + h) * Tq + t;
            const __nv_bfloat16 *qr = q + ((size_t)b * Tq + t) * qs + (size_t)h * hd;
            const __nv_bfloat16 *dr = dout + ((size_t)b * Tq + t) * (size_t)nh * hd + (size_t)h * hd;
            float p = expf(sub(mul(dot(qr, kr, hd), scale), lse[r]));
            float ds = mul(p, sub(dot(dr, vr, hd), D[r]));
            for (int i = 0; i < hd; i++) {
                dva[i] = add(dva[i], mul(p, bf2f(dr[i])));
                dka[i] = add(dka[i], mul(ds, bf2f(qr[i])));
            }
        }
    float *dk = dkv + ((size_t)b * Tk + j) * 2 * (size_t)nkv * hd + (size_t)kh * hd;
    float *dv = dk + (size_t)nkv * hd;
    for (int i = 0; i < hd; i++) {
        dk[i] = add(dk[i], mul(dka[i], scale));
        dv[i] = add(dv[i], dva[i]);
    }
}

__global__ void cp_rows_kernel(__nv_bfloat16 *dst, size_t ds, const void *src, size_t ss,
                               int src_f32, size_t rows, size_t cols)
{
    size_t n = rows * cols;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (size_t)gridDim.x * blockDim.x) {
        size_t r = idx / cols, c = idx % cols;
        float v = src_f32 ? ((const float *)src)[r * ss + c]
                          : bf2f(((const __nv_bfloat16 *)src)[r * ss + c]);
        dst[r * ds + c] = f2bf(v);
    }
}

llmt_status bad_heads(llmt__cuda_ctx *ctx, const char *op, int nh, int nkv, int hd)
{
    return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                         "cuda: %s: nh=%d nkv=%d hd=%d (nkv must divide nh, hd even <= %d)", op,
                         nh, nkv, hd, HDMAX);
}
bool heads_ok(int nh, int nkv, int hd)
{
    return nkv > 0 && nh % nkv == 0 && hd > 0 && hd % 2 == 0 && hd <= HDMAX;
}
unsigned blocks(size_t n) { return (unsigned)((n + NT - 1) / NT); }

} // namespace

extern "C" {

llmt_status llmt__cuda_attn_cp_rope(llmt__cuda_ctx *ctx, llmt__bf16 *x, int B, int T, int nh,
                                    int hd, size_t stride, float theta, int inverse,
                                    const int32_t *pos)
{
    size_t n = (size_t)B * T * (hd / 2);
    if (n == 0) return LLMT_OK;
    cp_rope_kernel<<<llmt__grid(n, 256, ctx->num_sms * 16), 256, 0, ctx->compute>>>(
        BF(x), B * T, T, nh, hd, stride, theta, inverse, pos);
    LLMT_LAUNCHED(ctx, "attn_cp_rope");
}

llmt_status llmt__cuda_attn_cp_fwd(llmt__cuda_ctx *ctx, float *o, float *lse,
                                   const llmt__bf16 *q, size_t qs, const llmt__bf16 *kv,
                                   size_t kvs, int B, int Tq, int Tk, int nh, int nkv, int hd,
                                   const int32_t *qpos, const int32_t *kpos)
{
    if (!heads_ok(nh, nkv, hd)) return bad_heads(ctx, "attn_cp_fwd", nh, nkv, hd);
    size_t n = (size_t)B * nh * Tq;
    if (n == 0 || Tk == 0) return LLMT_OK;
    cp_fwd_kernel<<<blocks(n), NT, 0, ctx->compute>>>(o, lse, CBF(q), qs, CBF(kv), kvs, B, Tq, Tk,
                                                      nh, nkv, hd, qpos, kpos);
    LLMT_LAUNCHED(ctx, "attn_cp_fwd");
}

llmt_status llmt__cuda_attn_cp_delta(llmt__cuda_ctx *ctx, float *D, const llmt__bf16 *dout,
                                     const llmt__bf16 *out, int B, int T, int nh, int hd)
{
    size_t n = (size_t)B * nh * T;
    if (n == 0) return LLMT_OK;
    cp_delta_kernel<<<blocks(n), NT, 0, ctx->compute>>>(D, CBF(dout), CBF(out), B, T, nh, hd);
    LLMT_LAUNCHED(ctx, "attn_cp_delta");
}

llmt_status llmt__cuda_attn_cp_bwd(llmt__cuda_ctx *ctx, float *dq, float *dkv, const float *D,
                                   const float *lse, const llmt__bf16 *dout,
                                   const llmt__bf16 *q, size_t qs, const llmt__bf16 *kv,
                                   size_t kvs, int B, int Tq, int Tk, int nh, int nkv, int hd,
                                   const int32_t *qpos, const int32_t *kpos)
{
    if (!heads_ok(nh, nkv, hd)) return bad_heads(ctx, "attn_cp_bwd", nh, nkv, hd);
    size_t nq = (size_t)B * nh * Tq, nk = (size_t)B * nkv * Tk;
    if (nq == 0 || nk == 0) return LLMT_OK;
    cp_bwd_dq_kernel<<<blocks(nq), NT, 0, ctx->compute>>>(dq, D, lse, CBF(dout), CBF(q), qs,
                                                          CBF(kv), kvs, B, Tq, Tk, nh, nkv, hd,
                                                          qpos, kpos);
    LLMT_CU(ctx, cudaGetLastError());
    cp_bwd_dkv_kernel<<<blocks(nk), NT, 0, ctx->compute>>>(dkv, D, lse, CBF(dout), CBF(q), qs,
                                                           CBF(kv), kvs, B, Tq, Tk, nh, nkv, hd,
                                                           qpos, kpos);
    LLMT_LAUNCHED(ctx, "attn_cp_bwd");
}

llmt_status llmt__cuda_attn_cp_rows(llmt__cuda_ctx *ctx, llmt__bf16 *dst, size_t ds,
                                    const void *src, size_t ss, int src_f32, size_t rows,
                                    size_t cols)
{
    size_t n = rows * cols;
    if (n == 0) return LLMT_OK;
    cp_rows_kernel<<<llmt__grid(n, 256, ctx->num_sms * 16), 256, 0, ctx->compute>>>(
        BF(dst), ds, src, ss, src_f32, rows, cols);
    LLMT_LAUNCHED(ctx, "attn_cp_rows");
}

} // extern "C"
