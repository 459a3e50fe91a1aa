// The vocabulary split of tensor parallelism on the GPU (lib/exec/dev.h's
// embedding_part_* and xent_part_*): a rank holds vocabulary rows
// [lo, lo + Vl) of the embedding and the same columns of the logits, of
// which the first nv are real. The embedding kernels are embedding_fwd/bwd's
// (elementwise.cu) with a range test; the cross-entropy is xent.cu's fused
// kernel cut at the two points where the tensor parallel group reduces (the
// row max, then the sums), one block per row.
//
// Roundings follow the host emulation (lib/exec/vocab_part.c with bf16
// storage) so that the GPU test can hold the two close: the sum of
// exponentials and the loss's log in double, the gradient's products
// unfused (no FMA contraction), the positional gradient added b by b in
// order. What still differs: CUDA's expf (2 ulp) against the host's, the
// order of the per-row double sum, and the token gradient's atomics outside
// deterministic mode.
#include <float.h>
#include <stdint.h>

#include "../common.cuh"

namespace {

struct alignas(16) bf8 { __nv_bfloat16 v[8]; };

constexpr int VT = 256; /* threads per row block */

__device__ __forceinline__ bool in_part(int t, int Vl) { return t >= 0 && t < Vl; }

/* out row = wte[tok - lo] or 0, + wpe[t] when given, rounded once */
__global__ void emb_part_fwd(__nv_bfloat16 *out, const int32_t *tok, const __nv_bfloat16 *wte,
                             const __nv_bfloat16 *wpe, int T, int C, int lo, int Vl, bool vec)
{
    int row = blockIdx.x;
    int t = tok[row] - lo;
    bool in = in_part(t, Vl);
    const __nv_bfloat16 *e = in ? wte + (size_t)t * C : nullptr;
    const __nv_bfloat16 *p = wpe ? wpe + (size_t)(row % T) * C : nullptr;
    __nv_bfloat16 *o = out + (size_t)row * C;
    if (vec) {
        for (int c = threadIdx.x; c < C / 8; c += blockDim.x) {
            bf8 a, b, r;
            if (e) a = ((const bf8 *)e)[c];
            if (p) b = ((const bf8 *)p)[c];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float v = e ? bf2f(a.v[k]) : 0.0f;
                if (p) v += bf2f(b.v[k]);
                r.v[k] = f2bf(v);
            }
            ((bf8 *)o)[c] = r;
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float v = e ? bf2f(e[c]) : 0.0f;
            if (p) v += bf2f(p[c]);
            o[c] = f2bf(v);
        }
    }
}

/* dwpe[t,c] += dout[b,t,c] for b = 0, 1, ... one add at a time (the
 * emulation's order), one thread per (t, c) */
__global__ void emb_part_bwd_pos(float *dwpe, const __nv_bfloat16 *dout, int B, int T, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    float s = dwpe[i];
    for (int b = 0; b < B; b++) s += bf2f(dout[(size_t)b * T * C + i]);
    dwpe[i] = s;
}
__global__ void emb_part_bwd_atomic(float *dwte, const __nv_bfloat16 *dout, const int32_t *tok,
                                    int C, int lo, int Vl)
{
    int row = blockIdx.x;
    int t = tok[row] - lo;
    if (!in_part(t, Vl)) return;
    const __nv_bfloat16 *d = dout + (size_t)row * C;
    float *w = dwte + (size_t)t * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(&w[c], bf2f(d[c]));
}
/* deterministic: one thread per channel walks the rows in order */
__global__ void emb_part_bwd_det(float *dwte, const __nv_bfloat16 *dout, const int32_t *tok,
                                 int BT, int C, int lo, int Vl)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int r = 0; r < BT; r++) {
        int t = tok[r] - lo;
        if (in_part(t, Vl)) dwte[(size_t)t * C + c] += bf2f(dout[(size_t)r * C + c]);
    }
}

/* A block-wide double sum (fixed order); every thread gets it. */
__device__ double block_sum_d(double v)
{
    __shared__ double sh[VT / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < VT / 32 ? sh[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void __launch_bounds__(VT)
xent_part_max_kernel(float *mx, const __nv_bfloat16 *logits, int Vl, int nv, bool vec)
{
    __shared__ float sh[32];
    const __nv_bfloat16 *x = logits + (size_t)blockIdx.x * Vl;
    float m = -FLT_MAX;
    int n8 = vec ? nv / 8 : 0;
    for (int c = threadIdx.x; c < n8; c += VT) {
        bf8 a = ((const bf8 *)x)[c];
#pragma unroll
        for (int k = 0; k < 8; k++) m = fmaxf(m, bf2f(a.v[k]));
    }
    for (int c = n8 * 8 + threadIdx.x; c < nv; c += VT) m = fmaxf(m, bf2f(x[c]));
    m = block_max(m, sh);
    if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

__global__ void __launch_bounds__(VT)
xent_part_sum_kernel(float *st, const __nv_bfloat16 *logits, const float *mx,
                     const int32_t *targets, int N, int Vl, int nv, int lo, bool vec)
{
    int row = blockIdx.x;
    const __nv_bfloat16 *x = logits + (size_t)row * Vl;
    float m = mx[row];
    double s = 0.0;
    int n8 = vec ? nv / 8 : 0;
    for (int c = threadIdx.x; c < n8; c += VT) {
        bf8 a = ((const bf8 *)x)[c];
#pragma unroll
        for (int k = 0; k < 8; k++) s += (double)expf(bf2f(a.v[k]) - m);
    }
    for (int c = n8 * 8 + threadIdx.x; c < nv; c += VT) s += (double)expf(bf2f(x[c]) - m);
    s = block_sum_d(s);
    if (threadIdx.x == 0) {
        st[row] = (float)s;
        int t = targets ? targets[row] - lo : -1;
        st[N + row] = t >= 0 && t < nv ? bf2f(x[t]) : 0.0f;
    }
}

/* (softmax - onehot) * dloss for one logit; products rounded one by one
 * as on the host (no FMA) */
__device__ __forceinline__ float part_grad(float x, int i, int tl, float m, float inv, float dloss)
{
    float g = __fmul_rn(__fmul_rn(expf(x - m), inv), dloss);
    return i == tl ? __fsub_rn(g, dloss) : g;
}

__global__ void __launch_bounds__(VT)
xent_part_fin_kernel(float *losses, __nv_bfloat16 *logits, const float *mx, const float *st,
                     const int32_t *targets, int N, int Vl, int nv, int lo, float dloss,
                     bool vec)
{
    int row = blockIdx.x;
    int tg = targets ? targets[row] : -1;
    if (threadIdx.x == 0)
        losses[row] = tg >= 0 ? (float)(log((double)st[row]) + mx[row] - st[N + row]) : 0.0f;
    if (dloss == 0.0f) return;
    __nv_bfloat16 *x = logits + (size_t)row * Vl;
    float m = mx[row];
    float inv = (float)(1.0 / (double)st[row]);
    int tl = tg - lo;
    /* an ignored row, and the padding past nv, get 0 */
    int real = tg >= 0 ? nv : 0;
    if (vec) {
        for (int c = threadIdx.x; c < Vl / 8; c += VT) {
            bf8 a = ((const bf8 *)x)[c], r;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int i = c * 8 + k;
                r.v[k] = f2bf(i < real ? part_grad(bf2f(a.v[k]), i, tl, m, inv, dloss) : 0.0f);
            }
            ((bf8 *)x)[c] = r;
        }
    } else {
        for (int i = threadIdx.x; i < Vl; i += VT)
            x[i] = f2bf(i < real ? part_grad(bf2f(x[i]), i, tl, m, inv, dloss) : 0.0f);
    }
}

bool al16(const void *a, const void *b = nullptr, const void *c = nullptr)
{
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

llmt_status bad_part(llmt__cuda_ctx *ctx, const char *op, int Vl, int nv)
{
    return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                         "cuda: %s: Vl=%d nv=%d (need 0 <= nv <= Vl)", op, Vl, nv);
}

} // namespace

extern "C" {

llmt_status llmt__cuda_embedding_part_fwd(llmt__cuda_ctx *ctx, llmt__bf16 *out,
                                          const int32_t *tok, const llmt__bf16 *wte,
                                          const llmt__bf16 *wpe, int B, int T, int C, int lo,
                                          int Vl)
{
    if (B * T == 0 || C == 0) return LLMT_OK;
    bool vec = C % 8 == 0 && al16(out, wte, wpe);
    int threads = vec && C / 8 < 128 ? 128 : 256;
    emb_part_fwd<<<B * T, threads, 0, ctx->compute>>>(BF(out), tok, CBF(wte), CBF(wpe), T, C,
                                                      lo, Vl, vec);
    LLMT_LAUNCHED(ctx, "embedding_part_fwd");
}

llmt_status llmt__cuda_embedding_part_bwd(llmt__cuda_ctx *ctx, float *dwte, float *dwpe,
                                          const llmt__bf16 *dout, const int32_t *tok, int B,
                                          int T, int C, int lo, int Vl)
{
    if (B * T == 0 || C == 0) return LLMT_OK;
    if (dwpe) {
        size_t n = (size_t)T * C;
        emb_part_bwd_pos<<<(unsigned)((n + 255) / 256), 256, 0, ctx->compute>>>(dwpe, CBF(dout),
                                                                               B, T, C);
        LLMT_CU(ctx, cudaGetLastError());
    }
    if (ctx->deterministic)
        emb_part_bwd_det<<<(C + 63) / 64, 64, 0, ctx->compute>>>(dwte, CBF(dout), tok, B * T, C,
                                                                 lo, Vl);
    else
        emb_part_bwd_atomic<<<B * T, 256, 0, ctx->compute>>>(dwte, CBF(dout), tok, C, lo, Vl);
    LLMT_LAUNCHED(ctx, "embedding_part_bwd");
}

llmt_status llmt__cuda_xent_part_max(llmt__cuda_ctx *ctx, float *mx, const llmt__bf16 *logits,
                                     int N, int Vl, int nv)
{
    if (nv < 0 || nv > Vl) return bad_part(ctx, "xent_part_max", Vl, nv);
    if (N == 0) return LLMT_OK;
    bool vec = Vl % 8 == 0 && al16(logits);
    xent_part_max_kernel<<<N, VT, 0, ctx->compute>>>(mx, CBF(logits), Vl, nv, vec);
    LLMT_LAUNCHED(ctx, "xent_part_max");
}

llmt_status llmt__cuda_xent_part_sum(llmt__cuda_ctx *ctx, float *st, const llmt__bf16 *logits,
                                     const float *mx, const int32_t *targets, int N, int Vl,
                                     int nv, int lo)
{
    if (nv < 0 || nv > Vl) return bad_part(ctx, "xent_part_sum", Vl, nv);
    if (N == 0) return LLMT_OK;
    bool vec = Vl % 8 == 0 && al16(logits);
    xent_part_sum_kernel<<<N, VT, 0, ctx->compute>>>(st, CBF(logits), mx, targets, N, Vl, nv,
                                                     lo, vec);
    LLMT_LAUNCHED(ctx, "xent_part_sum");
}

llmt_status llmt__cuda_xent_part_fin(llmt__cuda_ctx *ctx, float *losses, llmt__bf16 *logits,
                                     const float *mx, const float *st, const int32_t *targets,
                                     int N, int Vl, int nv, int lo, float dloss)
{
    if (nv < 0 || nv > Vl) return bad_part(ctx, "xent_part_fin", Vl, nv);
    if (N == 0) return LLMT_OK;
    bool vec = Vl % 8 == 0 && al16(logits);
    xent_part_fin_kernel<<<N, VT, 0, ctx->compute>>>(losses, BF(logits), mx, st, targets, N, Vl,
                                                     nv, lo, dloss, vec);
    LLMT_LAUNCHED(ctx, "xent_part_fin");
}

} // extern "C"
