/* The CUDA backend behind the device op table (lib/exec/dev.h): each entry
 * forwards to the function of the same name in cuda/llmt_cuda.h. A C file,
 * so the table is built by the C compiler like the rest of lib/. */
#include <stdio.h>

#include "../kernels/moe.h"
#include "../llmt_cuda.h"
#include "core/internal.h" /* llmt__cuda_device_count */

#define CTX(d) ((llmt__cuda_ctx *)(void *)(d))

static llmt_status dc_create(const llmt__dev_opts *o, llmt__dev **out, char *err,
                             size_t errlen)
{
    *out = NULL;
    int32_t n = 0;
    llmt_status s = llmt__cuda_device_count(&n, err, errlen);
    if (s != LLMT_OK) return s;
    if (o->device < 0 || o->device >= n) {
        snprintf(err, errlen, "cuda: device %d requested, %d visible%s", o->device, (int)n,
                 n ? "" : " (no GPU on this machine, or CUDA_VISIBLE_DEVICES hides it)");
        return LLMT_ERR_UNSUPPORTED;
    }
    llmt__cuda_ctx_opts co = {o->device, o->deterministic, 0, 0, err, errlen};
    llmt__cuda_ctx *c = NULL;
    s = llmt__cuda_ctx_create(&co, &c);
    if (s != LLMT_OK) return s;
    *out = (llmt__dev *)(void *)c;
    return LLMT_OK;
}
static void dc_destroy(llmt__dev *d) { llmt__cuda_ctx_destroy(CTX(d)); }
static const char *dc_last_error(const llmt__dev *d)
{
    return llmt__cuda_ctx_last_error((const llmt__cuda_ctx *)(const void *)d);
}
static llmt_status dc_alloc(llmt__dev *d, void **p, size_t n) { return llmt__cuda_alloc(CTX(d), p, n); }
static void dc_free(llmt__dev *d, void *p) { llmt__cuda_free(CTX(d), p); }
static llmt_status dc_host_alloc(llmt__dev *d, void **p, size_t n)
{
    return llmt__cuda_host_alloc(CTX(d), p, n);
}
static void dc_host_free(llmt__dev *d, void *p) { (void)d; llmt__cuda_host_free(p); }
static void dc_mem_stats(const llmt__dev *d, size_t *in_use, size_t *peak)
{
    llmt__cuda_mem_stats st;
    llmt__cuda_mem_stats_get((const llmt__cuda_ctx *)(const void *)d, &st);
    *in_use = st.in_use;
    *peak = st.peak_in_use;
}
static llmt_status dc_h2d(llmt__dev *d, void *dst, const void *src, size_t n)
{
    return llmt__cuda_h2d(CTX(d), dst, src, n);
}
static llmt_status dc_d2h(llmt__dev *d, void *dst, const void *src, size_t n)
{
    return llmt__cuda_d2h(CTX(d), dst, src, n);
}
static llmt_status dc_memset0(llmt__dev *d, void *dst, size_t n)
{
    return llmt__cuda_memset0(CTX(d), dst, n);
}
static llmt_status dc_d2d(llmt__dev *d, void *dst, const void *src, size_t n)
{
    return llmt__cuda_d2d(CTX(d), dst, src, n);
}
static llmt_status dc_fill_nan(llmt__dev *d, void *dst, size_t n)
{
    return llmt__cuda_fill_nan(CTX(d), dst, n);
}
static llmt_status dc_sync(llmt__dev *d)
{
    llmt_status s = llmt__cuda_sync(CTX(d));
    return s != LLMT_OK ? s : llmt__cuda_check(CTX(d), "sync");
}
static llmt_status dc_gemm(llmt__dev *d, const llmt__gemm_args *g) { return llmt__cuda_gemm(CTX(d), g); }
static llmt_status dc_embedding_fwd(llmt__dev *d, void *out, const int32_t *tok,
                                    const void *wte, const void *wpe, int B, int T,
                                    int C)
{
    return llmt__cuda_embedding_fwd(CTX(d), out, tok, wte, wpe, B, T, C);
}
static llmt_status dc_embedding_bwd(llmt__dev *d, float *dwte, float *dwpe,
                                    const void *dout, const int32_t *tok, int B, int T,
                                    int C)
{
    return llmt__cuda_embedding_bwd(CTX(d), dwte, dwpe, dout, tok, B, T, C);
}
static llmt_status dc_layernorm_fwd(llmt__dev *d, void *out, float *mean, float *rstd,
                                    const void *inp, const void *w,
                                    const void *b, int N, int C, float eps)
{
    return llmt__cuda_layernorm_fwd(CTX(d), out, mean, rstd, inp, w, b, N, C, eps);
}
static llmt_status dc_layernorm_bwd(llmt__dev *d, void *dinp, float *dw, float *db,
                                    const void *dout, const void *inp,
                                    const void *w, const float *mean,
                                    const float *rstd, int N, int C)
{
    return llmt__cuda_layernorm_bwd(CTX(d), dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
static llmt_status dc_rmsnorm_fwd(llmt__dev *d, void *out, float *rstd,
                                  const void *inp, const void *w, int N, int C,
                                  float eps)
{
    return llmt__cuda_rmsnorm_fwd(CTX(d), out, rstd, inp, w, N, C, eps);
}
static llmt_status dc_rmsnorm_bwd(llmt__dev *d, void *dinp, float *dw,
                                  const void *dout, const void *inp,
                                  const void *w, const float *rstd, int N, int C)
{
    return llmt__cuda_rmsnorm_bwd(CTX(d), dinp, dw, dout, inp, w, rstd, N, C);
}
static llmt_status dc_swiglu_fwd(llmt__dev *d, void *out, const void *gate,
                                 const void *up, size_t n)
{
    return llmt__cuda_swiglu_fwd(CTX(d), out, gate, up, n);
}
static llmt_status dc_swiglu_bwd(llmt__dev *d, void *dgate, void *dup, void *h,
                                 const void *dout, const void *gate, const void *up, size_t n)
{
    return llmt__cuda_swiglu_bwd(CTX(d), dgate, dup, h, dout, gate, up, n);
}
static llmt_status dc_residual_fwd(llmt__dev *d, void *out, const void *a,
                                   const void *b, size_t n)
{
    return llmt__cuda_residual_fwd(CTX(d), out, a, b, n);
}
static llmt_status dc_bias_bwd(llmt__dev *d, float *dbias, const void *dout, int N, int C)
{
    return llmt__cuda_bias_bwd(CTX(d), dbias, dout, N, C);
}
static llmt_status dc_rope(llmt__dev *d, void *x, int B, int T, int nh, int hd,
                           size_t stride, float theta, int inverse)
{
    return llmt__cuda_rope(CTX(d), x, B, T, nh, hd, stride, theta, inverse);
}
static llmt_status dc_attention_fwd(llmt__dev *d, void *out, float *lse,
                                    const void *q, const void *k,
                                    const void *v, size_t qs, int B, int T, int nh,
                                    int nkv, int hd)
{
    return llmt__cuda_attention_fwd(CTX(d), out, lse, q, k, v, qs, B, T, nh, nkv, hd);
}
static llmt_status dc_attention_bwd(llmt__dev *d, void *dq, void *dk,
                                    void *dv, const void *dout,
                                    const void *out, const float *lse,
                                    const void *q, const void *k,
                                    const void *v, size_t qs, int B, int T, int nh,
                                    int nkv, int hd)
{
    return llmt__cuda_attention_bwd(CTX(d), dq, dk, dv, dout, out, lse, q, k, v, qs, B, T, nh,
                                    nkv, hd);
}
static llmt_status dc_softmax_xent(llmt__dev *d, float *losses, void *logits,
                                   const int32_t *targets, int N, int V, int Vp, float dloss)
{
    return llmt__cuda_softmax_xent(CTX(d), losses, logits, targets, N, V, Vp, dloss);
}
static llmt_status dc_adamw(llmt__dev *d, float *master, void *param_bf16,
                            const float *grad, float *m, float *v, size_t n, float lr,
                            float beta1, float beta2, float eps, float wd, float grad_scale,
                            int64_t t)
{
    return llmt__cuda_adamw(CTX(d), master, param_bf16, grad, m, v, n, lr, beta1, beta2, eps,
                            wd, grad_scale, t);
}
static llmt_status dc_sumsq(llmt__dev *d, float *out, const float *const *xs,
                            const size_t *ns, int count)
{
    return llmt__cuda_sumsq(CTX(d), out, xs, ns, count);
}
static llmt_status dc_sum(llmt__dev *d, float *out, const float *x, size_t n)
{
    return llmt__cuda_sum(CTX(d), out, x, n);
}
static llmt_status dc_f32_to_bf16(llmt__dev *d, llmt__bf16 *y, const float *x, size_t n)
{
    return llmt__cuda_f32_to_bf16(CTX(d), y, x, n);
}

static llmt_status dc_amax(llmt__dev *d, float *out, const void *x, size_t n)
{
    return llmt__cuda_amax(CTX(d), out, x, n);
}
static llmt_status dc_quantize_fp8(llmt__dev *d, uint8_t *y, const void *x,
                                   const float *scale, size_t n, int e5m2)
{
    return llmt__cuda_quantize_fp8(CTX(d), y, x, scale, n, e5m2);
}
static llmt_status dc_cast_transpose_fp8(llmt__dev *d, uint8_t *y, uint8_t *yt, float *amax,
                                         const void *x, const float *scale, int R, int C,
                                         int e5m2)
{
    return llmt__cuda_cast_transpose_fp8(CTX(d), y, yt, amax, x, scale, R, C, e5m2);
}
static llmt_status dc_gelu_bwd_mul(llmt__dev *d, void *dx, const void *pre, size_t n)
{
    return llmt__cuda_gelu_bwd_mul(CTX(d), dx, pre, n);
}
static llmt_status dc_bias_add(llmt__dev *d, void *x, const void *bias, int N, int C)
{
    return llmt__cuda_bias_add(CTX(d), x, bias, N, C);
}
static llmt_status dc_gelu_fwd(llmt__dev *d, void *out, const void *inp, size_t n)
{
    return llmt__cuda_gelu_fwd(CTX(d), out, inp, n);
}

/* the vocabulary split of tensor parallelism (cuda/kernels/vocab_part.cu) */
static llmt_status dc_embedding_part_fwd(llmt__dev *d, void *out, const int32_t *tok,
                                         const void *wte, const void *wpe, int B, int T, int C,
                                         int lo, int Vl)
{
    return llmt__cuda_embedding_part_fwd(CTX(d), out, tok, wte, wpe, B, T, C, lo, Vl);
}
static llmt_status dc_embedding_part_bwd(llmt__dev *d, float *dwte, float *dwpe,
                                         const void *dout, const int32_t *tok, int B, int T,
                                         int C, int lo, int Vl)
{
    return llmt__cuda_embedding_part_bwd(CTX(d), dwte, dwpe, dout, tok, B, T, C, lo, Vl);
}
static llmt_status dc_xent_part_max(llmt__dev *d, float *mx, const void *logits, int N, int Vl,
                                    int nv)
{
    return llmt__cuda_xent_part_max(CTX(d), mx, logits, N, Vl, nv);
}
static llmt_status dc_xent_part_sum(llmt__dev *d, float *st, const void *logits,
                                    const float *mx, const int32_t *targets, int N, int Vl,
                                    int nv, int lo)
{
    return llmt__cuda_xent_part_sum(CTX(d), st, logits, mx, targets, N, Vl, nv, lo);
}
static llmt_status dc_xent_part_fin(llmt__dev *d, float *losses, void *logits, const float *mx,
                                    const float *st, const int32_t *targets, int N, int Vl,
                                    int nv, int lo, float dloss)
{
    return llmt__cuda_xent_part_fin(CTX(d), losses, logits, mx, st, targets, N, Vl, nv, lo,
                                    dloss);
}

/* mixture-of-experts rows (cuda/kernels/moe.cu; never run on a GPU yet) */
static llmt_status dc_moe_gather(llmt__dev *d, void *out, const void *x, const int32_t *tok,
                                 int R, int C)
{
    return llmt__cuda_moe_gather(CTX(d), out, x, tok, R, C);
}
static llmt_status dc_moe_gather_bwd(llmt__dev *d, void *dx, const void *dxe,
                                     const int32_t *row, int N, int K, int C)
{
    return llmt__cuda_moe_gather_bwd(CTX(d), dx, dxe, row, N, K, C);
}
static llmt_status dc_moe_combine(llmt__dev *d, void *y, const void *ye, const int32_t *row,
                                  const float *gate, int N, int K, int C)
{
    return llmt__cuda_moe_combine(CTX(d), y, ye, row, gate, N, K, C);
}
static llmt_status dc_moe_combine_bwd(llmt__dev *d, void *dye, float *dgate, const void *dy,
                                      const void *ye, const int32_t *row, const float *gate,
                                      int N, int K, int C)
{
    return llmt__cuda_moe_combine_bwd(CTX(d), dye, dgate, dy, ye, row, gate, N, K, C);
}

/* context parallelism's attention pieces (cuda/kernels/attn_cp.cu; never
 * run on a GPU yet: test gpu-cp-ops) */
static llmt_status dc_attn_cp_rope(llmt__dev *d, void *x, int B, int T, int nh, int hd,
                                   size_t stride, float theta, int inverse, const int32_t *pos)
{
    return llmt__cuda_attn_cp_rope(CTX(d), x, B, T, nh, hd, stride, theta, inverse, pos);
}
static llmt_status dc_attn_cp_fwd(llmt__dev *d, float *o, float *lse, const void *q, size_t qs,
                                  const void *kv, size_t kvs, int B, int Tq, int Tk, int nh,
                                  int nkv, int hd, const int32_t *qpos, const int32_t *kpos)
{
    return llmt__cuda_attn_cp_fwd(CTX(d), o, lse, q, qs, kv, kvs, B, Tq, Tk, nh, nkv, hd, qpos,
                                  kpos);
}
static llmt_status dc_attn_cp_delta(llmt__dev *d, float *D, const void *dout, const void *out,
                                    int B, int T, int nh, int hd)
{
    return llmt__cuda_attn_cp_delta(CTX(d), D, dout, out, B, T, nh, hd);
}
static llmt_status dc_attn_cp_bwd(llmt__dev *d, float *dq, float *dkv, const float *D,
                                  const float *lse, const void *dout, const void *q, size_t qs,
                                  const void *kv, size_t kvs, int B, int Tq, int Tk, int nh,
                                  int nkv, int hd, const int32_t *qpos, const int32_t *kpos)
{
    return llmt__cuda_attn_cp_bwd(CTX(d), dq, dkv, D, lse, dout, q, qs, kv, kvs, B, Tq, Tk, nh,
                                  nkv, hd, qpos, kpos);
}
static llmt_status dc_attn_cp_rows(llmt__dev *d, void *dst, size_t ds, const void *src,
                                   size_t ss, int src_f32, size_t rows, size_t cols)
{
    return llmt__cuda_attn_cp_rows(CTX(d), dst, ds, src, ss, src_f32, rows, cols);
}

/* one log-sum-exp per (sequence, head, position) */
static size_t dc_attn_state(int B, int nh, int T) { return (size_t)B * nh * T; }

static const llmt__dev_ops dev_cuda = {
    .name = "cuda",
    .store = LLMT_DTYPE_BF16,
    .host_memory = 0,
    .align = 8,
    .attn_state = dc_attn_state,
    /* no unverified_tp: tensor parallelism (cuda/kernels/vocab_part.cu,
     * lib/train/tp.c's host staging of the collectives) ran on an H100 on
     * 2026-11-26 (gpu-tp-ops, gpu-tp-engine through tp.c's staging: tp 2
     * losses within 1.8e-4 of tp 1, with and without sequence parallelism) */
    /* no unverified_pp, no unverified_dp: pipeline parallelism's boundary
     * messages (lib/train/pp_xfer.c's staging) and data parallelism over a
     * host communicator (lib/train/dp.c's staging) ran on an H100 on
     * 2026-11-27 (gpu-pp-engine, gpu-dp-host), and again on an H200 the
     * same day with llmt_job's pp 2 under `llmtrain launch`
     * (gpu-job-launch-pp; bench/results/gpu-h100-20261127.json) */
    /* no unverified_cp: context parallelism (cuda/kernels/attn_cp.cu,
     * cp.c's host staging of the exchange) ran on an H200 on 2026-11-26
     * (gpu-cp-ops, gpu-cp-engine) */
    /* no unverified_moe: the MoE ops (gpu-moe-ops) and the layer through
     * the engine (gpu-moe-engine) ran on an H200 on 2026-11-26; no
     * unverified_moe_groups: its ep 2 x dp 2, dp 2, pp 2 and cp 2
     * comparisons (moe_dev_ep.c's staged exchange, the router's tallies
     * over host groups) passed on an H100 on 2026-11-27 */
    .create = dc_create,
    .destroy = dc_destroy,
    .last_error = dc_last_error,
    .alloc = dc_alloc,
    .free = dc_free,
    .host_alloc = dc_host_alloc,
    .host_free = dc_host_free,
    .mem_stats = dc_mem_stats,
    .h2d = dc_h2d,
    .d2h = dc_d2h,
    .memset0 = dc_memset0,
    .d2d = dc_d2d,
    .fill_nan = dc_fill_nan,
    .sync = dc_sync,
    .gemm = dc_gemm,
    .embedding_fwd = dc_embedding_fwd,
    .embedding_bwd = dc_embedding_bwd,
    .layernorm_fwd = dc_layernorm_fwd,
    .layernorm_bwd = dc_layernorm_bwd,
    .rmsnorm_fwd = dc_rmsnorm_fwd,
    .rmsnorm_bwd = dc_rmsnorm_bwd,
    .swiglu_fwd = dc_swiglu_fwd,
    .swiglu_bwd = dc_swiglu_bwd,
    .residual_fwd = dc_residual_fwd,
    .bias_bwd = dc_bias_bwd,
    .rope = dc_rope,
    .attention_fwd = dc_attention_fwd,
    .attention_bwd = dc_attention_bwd,
    .softmax_xent = dc_softmax_xent,
    .adamw = dc_adamw,
    .sumsq = dc_sumsq,
    .sum = dc_sum,
    .f32_to_bf16 = dc_f32_to_bf16,
    .amax = dc_amax,
    .quantize_fp8 = dc_quantize_fp8,
    .cast_transpose_fp8 = dc_cast_transpose_fp8,
    .gelu_bwd_mul = dc_gelu_bwd_mul,
    .bias_add = dc_bias_add,
    .gelu_fwd = dc_gelu_fwd,
    .embedding_part_fwd = dc_embedding_part_fwd,
    .embedding_part_bwd = dc_embedding_part_bwd,
    .xent_part_max = dc_xent_part_max,
    .xent_part_sum = dc_xent_part_sum,
    .xent_part_fin = dc_xent_part_fin,
    .moe_gather = dc_moe_gather,
    .moe_gather_bwd = dc_moe_gather_bwd,
    .moe_combine = dc_moe_combine,
    .moe_combine_bwd = dc_moe_combine_bwd,
    .attn_cp_rope = dc_attn_cp_rope,
    .attn_cp_fwd = dc_attn_cp_fwd,
    .attn_cp_delta = dc_attn_cp_delta,
    .attn_cp_bwd = dc_attn_cp_bwd,
    .attn_cp_rows = dc_attn_cp_rows,
};

const llmt__dev_ops *llmt__dev_cuda(void) { return &dev_cuda; }
