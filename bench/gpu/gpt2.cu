// A GPT-2 training step on the GPU, the benchmark's own (bench/gpu/gpt2.h
// says why it is not in the library): bf16 parameters and activations, fp32 master weights,
// gradients and AdamW state, cuBLASLt GEMMs with fused bias / GELU epilogues,
// the flash attention kernels, fused softmax cross-entropy. Layout and
// initialisation follow llm.c (weights N(0, 0.02), residual projections
// scaled by 1/sqrt(2L), biases 0, LayerNorm 1/0), so the two can be run side
// by side on the same configuration.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../cuda/common.cuh"
#include "gpt2.h"

namespace {

enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPW, FCPB,
       LNFW, LNFB, NT };

__device__ __forceinline__ uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
__global__ void init_kernel(float *p, size_t n, float std, float cval, uint64_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (std == 0.0f) { p[i] = cval; continue; }
        uint64_t r = splitmix(seed ^ (i * 0x2545F4914F6CDD1Dull));
        float u1 = ((r >> 40) + 1) * (1.0f / 16777217.0f), u2 = ((r & 0xffffff) + 0.5f) * (1.0f / 16777216.0f);
        p[i] = std * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
    }
}

} // namespace

struct llmt__cuda_gpt2 {
    llmt__cuda_ctx *ctx;
    llmt__cuda_gpt2_cfg cfg;
    size_t off[NT], size[NT], P;
    float *master, *grad, *m, *v;
    __nv_bfloat16 *param;
    /* activations */
    __nv_bfloat16 *x0, *ln1, *qkv, *atty, *res2, *ln2, *fch, *fchg, *res3, *lnf, *logits;
    float *ln1m, *ln1r, *ln2m, *ln2r, *lse, *lnfm, *lnfr, *losses, *dsum;
    /* gradient scratch */
    __nv_bfloat16 *dres, *dtmp, *dqkv, *dfch;
    int32_t *tok, *tgt;
    int64_t step;
    size_t act_bytes;
};

static llmt_status galloc(llmt__cuda_gpt2 *g, void **p, size_t bytes, size_t *acc)
{
    if (acc) *acc += bytes;
    return llmt__cuda_alloc(g->ctx, p, bytes);
}

extern "C" {

void llmt__cuda_gpt2_cfg_init(llmt__cuda_gpt2_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->L = 12; c->C = 768; c->nh = 12; c->V = 50257; c->Vp = 50304; c->maxT = 1024;
    c->B = 4; c->T = 1024;
    c->lr = 3e-4f; c->beta1 = 0.9f; c->beta2 = 0.95f; c->eps = 1e-8f; c->wd = 0.0f;
    c->clip = 1.0f; c->seed = 42;
}

llmt_status llmt__cuda_gpt2_create(llmt__cuda_ctx *ctx, const llmt__cuda_gpt2_cfg *cfg,
                                   llmt__cuda_gpt2 **out)
{
    *out = NULL;
    const llmt__cuda_gpt2_cfg c = *cfg;
    if (c.C % c.nh || c.T > c.maxT || c.Vp < c.V || c.C % 8 || c.B <= 0 || c.T <= 0)
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "cuda: gpt2: bad config (C=%d nh=%d T=%d maxT=%d V=%d Vp=%d)",
                             c.C, c.nh, c.T, c.maxT, c.V, c.Vp);
    llmt__cuda_gpt2 *g = (llmt__cuda_gpt2 *)calloc(1, sizeof *g);
    if (!g) return LLMT_ERR_OUT_OF_MEMORY;
    g->ctx = ctx;
    g->cfg = c;
    size_t L = c.L, C = c.C;
    size_t sz[NT] = {(size_t)c.Vp * C, (size_t)c.maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
                     L * C * C, L * C, L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C,
                     C, C};
    size_t P = 0;
    for (int i = 0; i < NT; i++) {
        g->off[i] = P;
        g->size[i] = sz[i];
        P += (sz[i] + 7) & ~(size_t)7; /* keep every tensor 16-byte aligned in bf16 */
    }
    g->P = P;
    size_t BT = (size_t)c.B * c.T, nh = c.nh;
    llmt_status st;
#define A(ptr, bytes, acc) do { if ((st = galloc(g, (void **)&(ptr), (bytes), (acc)))) goto fail; } while (0)
    A(g->master, P * 4, NULL);
    A(g->grad, P * 4, NULL);
    A(g->m, P * 4, NULL);
    A(g->v, P * 4, NULL);
    A(g->param, P * 2, NULL);
    A(g->x0, BT * C * 2, &g->act_bytes);
    A(g->ln1, L * BT * C * 2, &g->act_bytes);
    A(g->qkv, L * BT * 3 * C * 2, &g->act_bytes);
    A(g->atty, L * BT * C * 2, &g->act_bytes);
    A(g->res2, L * BT * C * 2, &g->act_bytes);
    A(g->ln2, L * BT * C * 2, &g->act_bytes);
    A(g->fch, L * BT * 4 * C * 2, &g->act_bytes);
    A(g->fchg, L * BT * 4 * C * 2, &g->act_bytes);
    A(g->res3, L * BT * C * 2, &g->act_bytes);
    A(g->lnf, BT * C * 2, &g->act_bytes);
    A(g->logits, BT * c.Vp * 2, &g->act_bytes);
    A(g->ln1m, L * BT * 4, &g->act_bytes);
    A(g->ln1r, L * BT * 4, &g->act_bytes);
    A(g->ln2m, L * BT * 4, &g->act_bytes);
    A(g->ln2r, L * BT * 4, &g->act_bytes);
    A(g->lse, L * c.B * nh * c.T * 4, &g->act_bytes);
    A(g->lnfm, BT * 4, &g->act_bytes);
    A(g->lnfr, BT * 4, &g->act_bytes);
    A(g->losses, BT * 4, &g->act_bytes);
    A(g->dsum, 64, &g->act_bytes);
    A(g->dres, BT * C * 2, &g->act_bytes);
    A(g->dtmp, BT * C * 2, &g->act_bytes);
    A(g->dqkv, BT * 3 * C * 2, &g->act_bytes);
    A(g->dfch, BT * 4 * C * 2, &g->act_bytes);
    A(g->tok, BT * 4, &g->act_bytes);
    A(g->tgt, BT * 4, &g->act_bytes);
#undef A
    /* init (llm.c's scheme; its exact random stream is not reproduced) */
    {
        float rs = 0.02f / sqrtf(2.0f * c.L);
        for (int i = 0; i < NT; i++) {
            float std = 0.0f, cv = 0.0f;
            if (i == WTE || i == WPE || i == QKVW || i == FCW) std = 0.02f;
            if (i == PROJW || i == FCPW) std = rs;
            if (i == LN1W || i == LN2W || i == LNFW) cv = 1.0f;
            float *p = g->master + g->off[i];
            init_kernel<<<llmt__grid(g->size[i], 256, ctx->num_sms * 8), 256, 0, ctx->compute>>>(
                p, g->size[i], std, cv, c.seed * 1000003ull + (uint64_t)i);
        }
        if ((st = llmt__cuda_check(ctx, "gpt2 init"))) goto fail;
        if ((st = llmt__cuda_f32_to_bf16(ctx, (llmt__bf16 *)g->param, g->master, P))) goto fail;
        if ((st = llmt__cuda_memset0(ctx, g->m, P * 4))) goto fail;
        if ((st = llmt__cuda_memset0(ctx, g->v, P * 4))) goto fail;
    }
    *out = g;
    return LLMT_OK;
fail:
    llmt__cuda_gpt2_destroy(g);
    return st;
}

void llmt__cuda_gpt2_destroy(llmt__cuda_gpt2 *g)
{
    if (!g) return;
    void *ps[] = {g->master, g->grad, g->m, g->v, g->param, g->x0, g->ln1, g->qkv, g->atty,
                  g->res2, g->ln2, g->fch, g->fchg, g->res3, g->lnf, g->logits, g->ln1m,
                  g->ln1r, g->ln2m, g->ln2r, g->lse, g->lnfm, g->lnfr, g->losses, g->dsum,
                  g->dres, g->dtmp, g->dqkv, g->dfch, g->tok, g->tgt};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) llmt__cuda_free(g->ctx, ps[i]);
    free(g);
}

size_t llmt__cuda_gpt2_num_params(const llmt__cuda_gpt2 *g)
{
    size_t n = 0;
    for (int i = 0; i < NT; i++) n += g->size[i];
    return n;
}
size_t llmt__cuda_gpt2_activation_bytes(const llmt__cuda_gpt2 *g) { return g->act_bytes; }

llmt_status llmt__cuda_gpt2_load(llmt__cuda_gpt2 *g, const float *flat, size_t n)
{
    llmt__cuda_ctx *ctx = g->ctx;
    if (n != g->P)
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "cuda: gpt2 load: %zu floats given, the model has %zu", n, g->P);
    llmt_status st;
    if ((st = llmt__cuda_h2d(ctx, g->master, flat, n * 4))) return st;
    if ((st = llmt__cuda_f32_to_bf16(ctx, (llmt__bf16 *)g->param, g->master, n))) return st;
    if ((st = llmt__cuda_memset0(ctx, g->m, n * 4))) return st;
    if ((st = llmt__cuda_memset0(ctx, g->v, n * 4))) return st;
    g->step = 0;
    return LLMT_OK;
}

static llmt_status mm(llmt__cuda_ctx *ctx, int ta, int tb, int M, int N, int K, const void *A,
                      const void *B, void *C, int cf32, float beta, int epi, const void *bias,
                      void *aux)
{
    llmt__gemm_args a;
    llmt__gemm_args_init(&a);
    a.trans_a = ta; a.trans_b = tb; a.M = M; a.N = N; a.K = K;
    a.A = A; a.B = B; a.C = C;
    a.c_type = cf32 ? LLMT_GEMM_F32 : LLMT_GEMM_BF16;
    a.beta = beta;
    a.epi = (llmt__gemm_epi)epi;
    a.bias = bias; a.aux = aux;
    return llmt__cuda_gemm(ctx, &a);
}

llmt_status llmt__cuda_gpt2_step(llmt__cuda_gpt2 *g, const int32_t *tokens,
                                 const int32_t *targets, int host_inputs, float *loss,
                                 float *grad_norm)
{
    llmt__cuda_ctx *ctx = g->ctx;
    const llmt__cuda_gpt2_cfg &c = g->cfg;
    int B = c.B, T = c.T, C = c.C, nh = c.nh, Vp = c.Vp, L = c.L;
    int BT = B * T, hd = C / nh;
    size_t bc = (size_t)BT * C;
    llmt_status st;
#define S(x) do { if ((st = (x))) return st; } while (0)
    const int32_t *tok = tokens, *tgt = targets;
    if (host_inputs) {
        S(llmt__cuda_h2d(ctx, g->tok, tokens, (size_t)BT * 4));
        S(llmt__cuda_h2d(ctx, g->tgt, targets, (size_t)BT * 4));
        tok = g->tok;
        tgt = g->tgt;
    }
    __nv_bfloat16 *P = g->param;
    float *G = g->grad;
#define W(i) ((const void *)(P + g->off[i]))
#define WL(i, l, per) ((const void *)(P + g->off[i] + (size_t)(l) * (per)))
#define GL(i, l, per) (G + g->off[i] + (size_t)(l) * (per))
    size_t CC = (size_t)C * C;
    /* ---- forward ---- */
    S(llmt__cuda_embedding_fwd(ctx, (llmt__bf16 *)g->x0, tok, (const llmt__bf16 *)W(WTE),
                               (const llmt__bf16 *)W(WPE), B, T, C));
    for (int l = 0; l < L; l++) {
        const __nv_bfloat16 *xin = l ? g->res3 + (size_t)(l - 1) * bc : g->x0;
        __nv_bfloat16 *ln1 = g->ln1 + l * bc, *qkv = g->qkv + 3 * l * bc, *atty = g->atty + l * bc,
                      *res2 = g->res2 + l * bc, *ln2 = g->ln2 + l * bc,
                      *fch = g->fch + 4 * l * bc, *fchg = g->fchg + 4 * l * bc,
                      *res3 = g->res3 + l * bc;
        float *m1 = g->ln1m + (size_t)l * BT, *r1 = g->ln1r + (size_t)l * BT,
              *m2 = g->ln2m + (size_t)l * BT, *r2 = g->ln2r + (size_t)l * BT;
        float *lse = g->lse + (size_t)l * B * nh * T;
        S(llmt__cuda_layernorm_fwd(ctx, (llmt__bf16 *)ln1, m1, r1, (const llmt__bf16 *)xin,
                                   (const llmt__bf16 *)WL(LN1W, l, C),
                                   (const llmt__bf16 *)WL(LN1B, l, C), BT, C, 1e-5f));
        S(mm(ctx, 0, 1, BT, 3 * C, C, ln1, WL(QKVW, l, 3 * CC), qkv, 0, 0.0f, LLMT_GEMM_EPI_BIAS,
             WL(QKVB, l, 3 * C), NULL));
        S(llmt__cuda_attention_fwd(ctx, (llmt__bf16 *)atty, lse, (const llmt__bf16 *)qkv,
                                   (const llmt__bf16 *)(qkv + C), (const llmt__bf16 *)(qkv + 2 * C),
                                   (size_t)3 * C, B, T, nh, nh, hd));
        S(mm(ctx, 0, 1, BT, C, C, atty, WL(PROJW, l, CC), g->dtmp, 0, 0.0f, LLMT_GEMM_EPI_BIAS,
             WL(PROJB, l, C), NULL));
        S(llmt__cuda_residual_fwd(ctx, (llmt__bf16 *)res2, (const llmt__bf16 *)xin,
                                  (const llmt__bf16 *)g->dtmp, bc));
        S(llmt__cuda_layernorm_fwd(ctx, (llmt__bf16 *)ln2, m2, r2, (const llmt__bf16 *)res2,
                                   (const llmt__bf16 *)WL(LN2W, l, C),
                                   (const llmt__bf16 *)WL(LN2B, l, C), BT, C, 1e-5f));
        S(mm(ctx, 0, 1, BT, 4 * C, C, ln2, WL(FCW, l, 4 * CC), fchg, 0, 0.0f,
             LLMT_GEMM_EPI_GELU_BIAS, WL(FCB, l, 4 * C), fch));
        S(mm(ctx, 0, 1, BT, C, 4 * C, fchg, WL(FCPW, l, 4 * CC), g->dtmp, 0, 0.0f,
             LLMT_GEMM_EPI_BIAS, WL(FCPB, l, C), NULL));
        S(llmt__cuda_residual_fwd(ctx, (llmt__bf16 *)res3, (const llmt__bf16 *)res2,
                                  (const llmt__bf16 *)g->dtmp, bc));
    }
    const __nv_bfloat16 *xl = g->res3 + (size_t)(L - 1) * bc;
    S(llmt__cuda_layernorm_fwd(ctx, (llmt__bf16 *)g->lnf, g->lnfm, g->lnfr, (const llmt__bf16 *)xl,
                               (const llmt__bf16 *)W(LNFW), (const llmt__bf16 *)W(LNFB), BT, C,
                               1e-5f));
    S(mm(ctx, 0, 1, BT, Vp, C, g->lnf, W(WTE), g->logits, 0, 0.0f, 0, NULL, NULL));
    S(llmt__cuda_softmax_xent(ctx, g->losses, (llmt__bf16 *)g->logits, tgt, BT, c.V, Vp,
                              1.0f / BT));
    S(llmt__cuda_sum(ctx, g->dsum, g->losses, (size_t)BT));
    /* ---- backward ---- */
    S(llmt__cuda_memset0(ctx, G, g->P * 4));
    S(mm(ctx, 1, 0, Vp, C, BT, g->logits, g->lnf, G + g->off[WTE], 1, 1.0f, 0, NULL, NULL));
    S(mm(ctx, 0, 0, BT, C, Vp, g->logits, W(WTE), g->dtmp, 0, 0.0f, 0, NULL, NULL));
    S(llmt__cuda_memset0(ctx, g->dres, bc * 2));
    S(llmt__cuda_layernorm_bwd(ctx, (llmt__bf16 *)g->dres, G + g->off[LNFW], G + g->off[LNFB],
                               (const llmt__bf16 *)g->dtmp, (const llmt__bf16 *)xl,
                               (const llmt__bf16 *)W(LNFW), g->lnfm, g->lnfr, BT, C));
    for (int l = L - 1; l >= 0; l--) {
        const __nv_bfloat16 *xin = l ? g->res3 + (size_t)(l - 1) * bc : g->x0;
        __nv_bfloat16 *ln1 = g->ln1 + l * bc, *qkv = g->qkv + 3 * l * bc, *atty = g->atty + l * bc,
                      *res2 = g->res2 + l * bc, *ln2 = g->ln2 + l * bc,
                      *fch = g->fch + 4 * l * bc, *fchg = g->fchg + 4 * l * bc;
        float *m1 = g->ln1m + (size_t)l * BT, *r1 = g->ln1r + (size_t)l * BT,
              *m2 = g->ln2m + (size_t)l * BT, *r2 = g->ln2r + (size_t)l * BT;
        float *lse = g->lse + (size_t)l * B * nh * T;
        /* MLP */
        S(mm(ctx, 1, 0, C, 4 * C, BT, g->dres, fchg, GL(FCPW, l, 4 * CC), 1, 1.0f, 0, NULL, NULL));
        S(llmt__cuda_bias_bwd(ctx, GL(FCPB, l, C), (const llmt__bf16 *)g->dres, BT, C));
        S(mm(ctx, 0, 0, BT, 4 * C, C, g->dres, WL(FCPW, l, 4 * CC), g->dfch, 0, 0.0f,
             LLMT_GEMM_EPI_DGELU, NULL, fch));
        S(mm(ctx, 1, 0, 4 * C, C, BT, g->dfch, ln2, GL(FCW, l, 4 * CC), 1, 1.0f, 0, NULL, NULL));
        S(llmt__cuda_bias_bwd(ctx, GL(FCB, l, 4 * C), (const llmt__bf16 *)g->dfch, BT, 4 * C));
        S(mm(ctx, 0, 0, BT, C, 4 * C, g->dfch, WL(FCW, l, 4 * CC), g->dtmp, 0, 0.0f, 0, NULL, NULL));
        S(llmt__cuda_layernorm_bwd(ctx, (llmt__bf16 *)g->dres, GL(LN2W, l, C), GL(LN2B, l, C),
                                   (const llmt__bf16 *)g->dtmp, (const llmt__bf16 *)res2,
                                   (const llmt__bf16 *)WL(LN2W, l, C), m2, r2, BT, C));
        /* attention */
        S(mm(ctx, 1, 0, C, C, BT, g->dres, atty, GL(PROJW, l, CC), 1, 1.0f, 0, NULL, NULL));
        S(llmt__cuda_bias_bwd(ctx, GL(PROJB, l, C), (const llmt__bf16 *)g->dres, BT, C));
        S(mm(ctx, 0, 0, BT, C, C, g->dres, WL(PROJW, l, CC), g->dtmp, 0, 0.0f, 0, NULL, NULL));
        S(llmt__cuda_attention_bwd(ctx, (llmt__bf16 *)g->dqkv, (llmt__bf16 *)(g->dqkv + C),
                                   (llmt__bf16 *)(g->dqkv + 2 * C), (const llmt__bf16 *)g->dtmp,
                                   (const llmt__bf16 *)atty, lse, (const llmt__bf16 *)qkv,
                                   (const llmt__bf16 *)(qkv + C), (const llmt__bf16 *)(qkv + 2 * C),
                                   (size_t)3 * C, B, T, nh, nh, hd));
        S(mm(ctx, 1, 0, 3 * C, C, BT, g->dqkv, ln1, GL(QKVW, l, 3 * CC), 1, 1.0f, 0, NULL, NULL));
        S(llmt__cuda_bias_bwd(ctx, GL(QKVB, l, 3 * C), (const llmt__bf16 *)g->dqkv, BT, 3 * C));
        S(mm(ctx, 0, 0, BT, C, 3 * C, g->dqkv, WL(QKVW, l, 3 * CC), g->dtmp, 0, 0.0f, 0, NULL, NULL));
        S(llmt__cuda_layernorm_bwd(ctx, (llmt__bf16 *)g->dres, GL(LN1W, l, C), GL(LN1B, l, C),
                                   (const llmt__bf16 *)g->dtmp, (const llmt__bf16 *)xin,
                                   (const llmt__bf16 *)WL(LN1W, l, C), m1, r1, BT, C));
    }
    S(llmt__cuda_embedding_bwd(ctx, G + g->off[WTE], G + g->off[WPE], (const llmt__bf16 *)g->dres,
                               tok, B, T, C));
    /* ---- global norm, clip, AdamW ---- */
    const float *xs[1] = {G};
    size_t ns[1] = {g->P};
    S(llmt__cuda_sumsq(ctx, g->dsum + 1, xs, ns, 1));
    float h[2];
    S(llmt__cuda_d2h(ctx, h, g->dsum, sizeof h));
    float norm = sqrtf(h[1]);
    float scale = (c.clip > 0 && norm > c.clip) ? c.clip / norm : 1.0f;
    g->step++;
    S(llmt__cuda_adamw(ctx, g->master, (llmt__bf16 *)g->param, G, g->m, g->v, g->P, c.lr,
                       c.beta1, c.beta2, c.eps, c.wd, scale, g->step));
    if (loss) *loss = h[0] / BT;
    if (grad_norm) *grad_norm = norm;
    return llmt__cuda_check(ctx, "gpt2 step");
#undef S
#undef W
#undef WL
#undef GL
}

} // extern "C"
