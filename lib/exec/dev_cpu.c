/* The fp32 CPU backend of the device op table (dev.h): storage fp32, memory
 * the host's, every op one of lib/exec/cpu.c's kernels (OpenBLAS GEMMs
 * split over the OpenMP team, OpenMP loops), so that the one engine runs on
 * the CPU at the speed the fp32 trainer had, with the same arithmetic in
 * the same order (the engine's step-0 loss equals the old trainer's bit for
 * bit, test/train/test_dev_cpu.c).
 *
 * Where the table differs from cpu.c's ops:
 *  - attention keeps the T x T probabilities as its saved state
 *    (attn_state), as cpu.c's backward wants them, instead of the GPU's
 *    log-sum-exps; the backward's T x T scratch lives in the context;
 *  - GEMM epilogues (bias, GELU, GELU') run as separate passes after the
 *    sgemm, in the order the fp32 trainer ran them as separate ops;
 *  - no fp8: the fp8 entries fail with LLMT_ERR_UNSUPPORTED. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "exec/attn_cp.h"
#include "exec/dev.h"
#include "exec/exec.h"

struct llmt__dev {
    llmt_err err;
    const llmt__exec_ops *k; /* cpu.c's kernels */
    float *scratch;          /* attention backward's T x T gradients */
    size_t scratch_n;
    size_t in_use, peak;
};

#define BAD(d, ...) llmt__err_set(&(d)->err, LLMT_ERR_INVALID_ARGUMENT, "cpu: " __VA_ARGS__)

/* Every block carries its size in a 64-byte header, so that free keeps the
 * statistics without a table. */
#define HDR 64

static llmt_status dc_create(const llmt__dev_opts *o, llmt__dev **out, char *err,
                             size_t errlen)
{
    *out = NULL;
    if (!o) {
        snprintf(err, errlen, "cpu: options are NULL");
        return LLMT_ERR_NULL_POINTER;
    }
    llmt__dev *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "cpu: no memory for the context");
        return LLMT_ERR_OUT_OF_MEMORY;
    }
    d->k = llmt__exec_cpu();
    *out = d;
    return LLMT_OK;
}

static void dc_destroy(llmt__dev *d)
{
    if (!d) return;
    free(d->scratch);
    free(d);
}

static const char *dc_last_error(const llmt__dev *d) { return d ? d->err.msg : "cpu: NULL"; }

static llmt_status dc_alloc(llmt__dev *d, void **p, size_t bytes)
{
    void *b = NULL;
    if (posix_memalign(&b, HDR, HDR + bytes) != 0) {
        *p = NULL;
        return llmt__err_set(&d->err, LLMT_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes",
                             bytes);
    }
    memcpy(b, &bytes, sizeof bytes);
    d->in_use += bytes;
    if (d->in_use > d->peak) d->peak = d->in_use;
    *p = (char *)b + HDR;
    return LLMT_OK;
}

static void dc_free(llmt__dev *d, void *p)
{
    if (!p) return;
    char *b = (char *)p - HDR;
    size_t bytes;
    memcpy(&bytes, b, sizeof bytes);
    d->in_use -= bytes;
    free(b);
}

static llmt_status dc_host_alloc(llmt__dev *d, void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    return *p ? LLMT_OK : llmt__err_set(&d->err, LLMT_ERR_OUT_OF_MEMORY,
                                        "cpu: cannot allocate %zu bytes", bytes);
}
static void dc_host_free(llmt__dev *d, void *p)
{
    (void)d;
    free(p);
}
static void dc_mem_stats(const llmt__dev *d, size_t *in_use, size_t *peak)
{
    *in_use = d->in_use;
    *peak = d->peak;
}
static llmt_status dc_copy(llmt__dev *d, void *dst, const void *src, size_t bytes)
{
    if (bytes && (!dst || !src)) return BAD(d, "copy of %zu bytes with a NULL pointer", bytes);
    if (bytes && dst != src) memcpy(dst, src, bytes);
    return LLMT_OK;
}
static llmt_status dc_memset0(llmt__dev *d, void *dst, size_t bytes)
{
    if (bytes && !dst) return BAD(d, "memset0 of a NULL pointer");
    if (bytes) d->k->zero(dst, bytes / sizeof(float));
    if (bytes % sizeof(float)) memset((char *)dst + bytes / 4 * 4, 0, bytes % 4);
    return LLMT_OK;
}
static llmt_status dc_fill_nan(llmt__dev *d, void *dst, size_t bytes)
{
    if (bytes && !dst)
        return BAD(d, "fill_nan of a NULL pointer");
    if (bytes)
        memset(dst, 0xff, bytes);
    return LLMT_OK;
}
static llmt_status dc_sync(llmt__dev *d) { return d ? LLMT_OK : LLMT_ERR_NULL_POINTER; }

/* ---- GEMM */

static llmt_status dc_gemm(llmt__dev *d, const llmt__gemm_args *g)
{
    if (g->ab_type != LLMT_GEMM_F32 || g->c_type != LLMT_GEMM_F32)
        return llmt__err_set(&d->err, LLMT_ERR_UNSUPPORTED,
                             "cpu: gemm: A/B type %d, C type %d: the CPU backend is fp32 "
                             "(LLMT_GEMM_F32) only", (int)g->ab_type, (int)g->c_type);
    int M = g->M, N = g->N, K = g->K;
    if (M < 0 || N < 0 || K < 0) return BAD(d, "gemm: M=%d N=%d K=%d", M, N, K);
    if (!M || !N) return LLMT_OK;
    int lda = g->lda ? g->lda : (g->trans_a ? M : K);
    int ldb = g->ldb ? g->ldb : (g->trans_b ? K : N);
    int ldc = g->ldc ? g->ldc : N;
    float *C = g->C;
    size_t MN = (size_t)M * N;
    int gelu = g->epi == LLMT_GEMM_EPI_GELU || g->epi == LLMT_GEMM_EPI_GELU_BIAS;
    if ((gelu || g->epi == LLMT_GEMM_EPI_DGELU) && ldc != N)
        return llmt__err_set(&d->err, LLMT_ERR_UNSUPPORTED,
                             "cpu: gemm: GELU epilogues want a packed C (ldc %d, N %d)", ldc, N);
    if (g->epi == LLMT_GEMM_EPI_DGELU && !g->aux) return BAD(d, "gemm: DGELU without aux");
    if (K == 0) {
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float *c = C + (size_t)m * ldc + n;
                *c = g->beta != 0.0f ? g->beta * *c : 0.0f;
            }
    } else {
        llmt__cpu_gemm(g->trans_a, g->trans_b, M, N, K, g->alpha, g->A, lda, g->B, ldb, g->beta,
                       C, ldc);
    }
    const float *bias = g->bias;
    switch (g->epi) {
    case LLMT_GEMM_EPI_NONE:
        return LLMT_OK;
    case LLMT_GEMM_EPI_BIAS:
    case LLMT_GEMM_EPI_GELU_BIAS:
        if (!bias) return BAD(d, "gemm: bias epilogue without a bias");
#pragma omp parallel for
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) C[(size_t)m * ldc + n] += bias[n];
        if (g->epi == LLMT_GEMM_EPI_BIAS) return LLMT_OK;
        /* then GELU of the pre-activation, kept in aux */
        /* fall through */
    case LLMT_GEMM_EPI_GELU:
        if (g->aux) {
            d->k->copy(g->aux, C, MN);
            d->k->gelu_fwd(C, g->aux, MN);
        } else {
            d->k->gelu_fwd(C, C, MN); /* elementwise: in place is safe */
        }
        return LLMT_OK;
    case LLMT_GEMM_EPI_DGELU:
        llmt__cpu_gelu_grad_mul(C, g->aux, MN);
        return LLMT_OK;
    case LLMT_GEMM_EPI_BGRAD: {
        if (!g->bias_grad) return BAD(d, "gemm: BGRAD without bias_grad");
        const float *A = g->A;
        float *bg = g->bias_grad;
#pragma omp parallel for
        for (int m = 0; m < M; m++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++)
                s += g->trans_a ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k];
            bg[m] = s;
        }
        return LLMT_OK;
    }
    }
    return BAD(d, "gemm: epilogue %d unknown", (int)g->epi);
}

/* ---- the other ops: cpu.c's kernels */

static llmt_status dc_embedding_fwd(llmt__dev *d, void *out, const int32_t *tok,
                                    const void *wte, const void *wpe, int B, int T, int C)
{
    d->k->embedding_fwd(out, tok, wte, wpe, B, T, C);
    return LLMT_OK;
}
static llmt_status dc_embedding_bwd(llmt__dev *d, float *dwte, float *dwpe, const void *dout,
                                    const int32_t *tok, int B, int T, int C)
{
    d->k->embedding_bwd(dwte, dwpe, dout, tok, B, T, C);
    return LLMT_OK;
}
static llmt_status dc_layernorm_fwd(llmt__dev *d, void *out, float *mean, float *rstd,
                                    const void *inp, const void *w, const void *b, int N,
                                    int C, float eps)
{
    d->k->layernorm_fwd(out, mean, rstd, inp, w, b, N, C, eps);
    return LLMT_OK;
}
static llmt_status dc_layernorm_bwd(llmt__dev *d, void *dinp, float *dw, float *db,
                                    const void *dout, const void *inp, const void *w,
                                    const float *mean, const float *rstd, int N, int C)
{
    d->k->layernorm_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    return LLMT_OK;
}
static llmt_status dc_rmsnorm_fwd(llmt__dev *d, void *out, float *rstd, const void *inp,
                                  const void *w, int N, int C, float eps)
{
    d->k->rmsnorm_fwd(out, rstd, inp, w, N, C, eps);
    return LLMT_OK;
}
static llmt_status dc_rmsnorm_bwd(llmt__dev *d, void *dinp, float *dw, const void *dout,
                                  const void *inp, const void *w, const float *rstd, int N,
                                  int C)
{
    d->k->rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, N, C);
    return LLMT_OK;
}
static llmt_status dc_swiglu_fwd(llmt__dev *d, void *out, const void *gate, const void *up,
                                 size_t n)
{
    d->k->swiglu_fwd(out, gate, up, n);
    return LLMT_OK;
}
static llmt_status dc_swiglu_bwd(llmt__dev *d, void *dgate_, void *dup_, void *h_,
                                 const void *dout_, const void *gate_, const void *up_,
                                 size_t n)
{
    (void)d;
    float *dgate = dgate_, *dup = dup_, *h = h_;
    const float *dout = dout_, *gate = gate_, *up = up_;
    /* cpu.c's swiglu kernels' arithmetic, written (from 0, dev.h) rather
     * than added, with h as swiglu_fwd's out; dgate may alias dout */
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], dd = dout[i];
        float s = 1.0f / (1.0f + expf(-g));
        float silu = g * s;
        if (h)
            h[i] = g / (1.0f + expf(-g)) * up[i];
        dgate[i] = 0.0f + dd * up[i] * (s + g * s * (1.0f - s));
        dup[i] = 0.0f + dd * silu;
    }
    return LLMT_OK;
}
static llmt_status dc_residual_fwd(llmt__dev *d, void *out, const void *a, const void *b,
                                   size_t n)
{
    d->k->residual_fwd(out, a, b, n);
    return LLMT_OK;
}
/* The column sums of cpu.c's matmul backward, same loop, same order. */
static llmt_status dc_bias_bwd(llmt__dev *d, float *dbias, const void *dout_, int N, int C)
{
    (void)d;
    const float *dout = dout_;
#pragma omp parallel for
    for (int o = 0; o < C; o++) {
        float s = 0.0f;
        for (int n = 0; n < N; n++) s += dout[(size_t)n * C + o];
        dbias[o] += s;
    }
    return LLMT_OK;
}
static llmt_status dc_rope(llmt__dev *d, void *x, int B, int T, int nh, int hd, size_t stride,
                           float theta, int inverse)
{
    d->k->rope(x, B, T, nh, hd, stride, theta, inverse);
    return LLMT_OK;
}

static size_t dc_attn_state(int B, int nh, int T) { return (size_t)B * nh * T * T; }

static llmt_status dc_attention_fwd(llmt__dev *d, void *out, float *probs, const void *q,
                                    const void *k, const void *v, size_t qs, int B, int T,
                                    int nh, int nkv, int hd)
{
    if (nkv < 1 || nh % nkv) return BAD(d, "attention: %d heads, %d kv heads", nh, nkv);
    d->k->attention_fwd(out, probs, q, k, v, qs, B, T, nh, nkv, hd);
    return LLMT_OK;
}

/* Rows of `w` columns at stride qs set to zero. */
static void zero_rows(float *x, size_t rows, size_t w, size_t qs)
{
#pragma omp parallel for
    for (size_t r = 0; r < rows; r++) memset(x + r * qs, 0, w * sizeof(float));
}

static llmt_status dc_attention_bwd(llmt__dev *d, void *dq, void *dk, void *dv,
                                    const void *dout, const void *out, const float *probs,
                                    const void *q, const void *k, const void *v, size_t qs,
                                    int B, int T, int nh, int nkv, int hd)
{
    (void)out;
    if (nkv < 1 || nh % nkv) return BAD(d, "attention: %d heads, %d kv heads", nh, nkv);
    size_t need = dc_attn_state(B, nh, T);
    if (need > d->scratch_n) {
        float *s = realloc(d->scratch, need * sizeof(float));
        if (!s)
            return llmt__err_set(&d->err, LLMT_ERR_OUT_OF_MEMORY,
                                 "cpu: attention backward: cannot allocate %zu bytes",
                                 need * sizeof(float));
        d->scratch = s;
        d->scratch_n = need;
    }
    size_t rows = (size_t)B * T;
    zero_rows(dq, rows, (size_t)nh * hd, qs);
    zero_rows(dk, rows, (size_t)nkv * hd, qs);
    zero_rows(dv, rows, (size_t)nkv * hd, qs);
    d->k->attention_bwd(dq, dk, dv, d->scratch, dout, probs, q, k, v, qs, B, T, nh, nkv, hd);
    return LLMT_OK;
}

static llmt_status dc_softmax_xent(llmt__dev *d, float *losses, void *logits,
                                   const int32_t *targets, int N, int V, int Vp, float dloss)
{
    d->k->softmax_xent_fwd(losses, logits, targets, N, V, Vp);
    if (dloss != 0.0f) d->k->softmax_xent_bwd(logits, targets, dloss, N, V, Vp);
    return LLMT_OK;
}

static llmt_status dc_adamw(llmt__dev *d, float *master, void *param, const float *grad,
                            float *m, float *v, size_t n, float lr, float beta1, float beta2,
                            float eps, float wd, float grad_scale, int64_t t)
{
    if (param && param != master)
        return BAD(d, "adamw: fp32 storage has no separate parameter copy");
    d->k->adamw(master, grad, m, v, n, lr, beta1, beta2, eps, wd, grad_scale, t);
    return LLMT_OK;
}

static llmt_status dc_sumsq(llmt__dev *d, float *out, const float *const *xs, const size_t *ns,
                            int count)
{
    double s = 0.0;
    for (int i = 0; i < count; i++) s += d->k->sumsq(xs[i], ns[i]);
    out[0] = (float)s;
    return LLMT_OK;
}

static llmt_status dc_sum(llmt__dev *d, float *out, const float *x, size_t n)
{
    (void)d;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    out[0] = (float)s;
    return LLMT_OK;
}

static llmt_status dc_f32_to_bf16(llmt__dev *d, llmt__bf16 *y, const float *x, size_t n)
{
    (void)d;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = llmt__f32_to_bf16(x[i]);
    return LLMT_OK;
}

static llmt_status dc_amax(llmt__dev *d, float *out, const void *x_, size_t n)
{
    (void)d;
    const float *x = x_;
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    out[0] = m;
    return LLMT_OK;
}

static llmt_status dc_quantize_fp8(llmt__dev *d, uint8_t *y, const void *x, const float *scale,
                                   size_t n, int e5m2)
{
    (void)y, (void)x, (void)scale, (void)n, (void)e5m2;
    return llmt__err_set(&d->err, LLMT_ERR_UNSUPPORTED,
                         "cpu: fp8 is not in the fp32 CPU backend (CUDA sm_89+ has it)");
}

static llmt_status dc_cast_transpose_fp8(llmt__dev *d, uint8_t *y, uint8_t *yt, float *amax,
                                         const void *x, const float *scale, int R, int C,
                                         int e5m2)
{
    (void)y, (void)yt, (void)amax, (void)x, (void)scale, (void)R, (void)C, (void)e5m2;
    return dc_quantize_fp8(d, NULL, NULL, NULL, 0, 0);
}

/* The fp8 path's GELU backward: the fp32 engine fuses it into its GEMM. */
static llmt_status dc_gelu_bwd_mul(llmt__dev *d, void *dx, const void *pre, size_t n)
{
    (void)dx, (void)pre, (void)n;
    return dc_quantize_fp8(d, NULL, NULL, NULL, 0, 0);
}

static llmt_status dc_bias_add(llmt__dev *d, void *x_, const void *bias_, int N, int C)
{
    (void)d;
    float *x = x_;
    const float *bias = bias_;
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) x[(size_t)n * C + c] += bias[c];
    return LLMT_OK;
}

static llmt_status dc_gelu_fwd(llmt__dev *d, void *out, const void *inp, size_t n)
{
    d->k->gelu_fwd(out, inp, n);
    return LLMT_OK;
}

static const llmt__dev_ops cpu_ops;
static llmt_status dc_moe_experts(llmt__dev *d, const llmt__moe_xargs *a)
{
    return llmt__moe_op_experts(&cpu_ops, d, a); /* moe_ops.c */
}

static const llmt__dev_ops cpu_ops = {
    .name = "cpu",
    .store = LLMT_DTYPE_FP32,
    .host_memory = 1,
    .align = 1,
    .attn_state = dc_attn_state,
    .create = dc_create,
    .destroy = dc_destroy,
    .last_error = dc_last_error,
    .alloc = dc_alloc,
    .free = dc_free,
    .host_alloc = dc_host_alloc,
    .host_free = dc_host_free,
    .mem_stats = dc_mem_stats,
    .h2d = dc_copy,
    .d2h = dc_copy,
    .memset0 = dc_memset0,
    .d2d = dc_copy,
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
    .embedding_part_fwd = llmt__vp_embedding_part_fwd_f32, /* vocab_part.c */
    .embedding_part_bwd = llmt__vp_embedding_part_bwd_f32,
    .xent_part_max = llmt__vp_xent_part_max_f32,
    .xent_part_sum = llmt__vp_xent_part_sum_f32,
    .xent_part_fin = llmt__vp_xent_part_fin_f32,
    .moe_gather = llmt__moe_gather_f32, /* moe_ops.c */
    .moe_gather_bwd = llmt__moe_gather_bwd_f32,
    .moe_combine = llmt__moe_combine_f32,
    .moe_combine_bwd = llmt__moe_combine_bwd_f32,
    .moe_experts = dc_moe_experts,
    .attn_cp_rope = llmt__attn_cp_rope_f32, /* attn_cp.c */
    .attn_cp_fwd = llmt__attn_cp_fwd_f32,
    .attn_cp_delta = llmt__attn_cp_delta_f32,
    .attn_cp_bwd = llmt__attn_cp_bwd_f32,
    .attn_cp_rows = llmt__attn_cp_rows_f32,
};

const llmt__dev_ops *llmt__dev_cpu(void) { return &cpu_ops; }
