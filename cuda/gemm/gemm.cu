// GEMM through cuBLASLt: bf16 (or fp8) operands, fp32 accumulation, fused
// epilogues. Row-major C = op(A) op(B) is computed as the column-major
// C^T = op(B)^T op(A)^T, so cuBLASLt's "A" is our B and its "B" our A:
// m = N, n = M, k = K. Descriptors and the heuristic's algorithm are cached
// per configuration (shape, leading dimensions, types, epilogue, pointer
// alignment) in a small open-addressing table on the context.
#include <stdint.h>
#include <string.h>

#include "../common.cuh"

namespace {

int align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (!a) return 16;
    int r = 1;
    while (r < 16 && !(a & r)) r <<= 1;
    return r;
}
int align_code(int a) { return a >= 16 ? 4 : a >= 8 ? 3 : a >= 4 ? 2 : a >= 2 ? 1 : 0; }

cudaDataType_t dt(llmt__gemm_type t)
{
    switch (t) {
    case LLMT_GEMM_F32: return CUDA_R_32F;
    case LLMT_GEMM_E4M3: return CUDA_R_8F_E4M3;
    case LLMT_GEMM_E5M2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_16BF;
    }
}
size_t elsize(llmt__gemm_type t)
{
    return t == LLMT_GEMM_F32 ? 4 : (t == LLMT_GEMM_E4M3 || t == LLMT_GEMM_E5M2) ? 1 : 2;
}

uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

} // namespace

void llmt__cuda_gemm_cache_clear(llmt__cuda_ctx *ctx)
{
    for (int i = 0; i < LLMT_GEMM_CACHE_SLOTS; i++) {
        llmt__gemm_cache_entry *e = &ctx->gemm_cache[i];
        if (!e->used) continue;
        if (e->desc) cublasLtMatmulDescDestroy(e->desc);
        if (e->la) cublasLtMatrixLayoutDestroy(e->la);
        if (e->lb) cublasLtMatrixLayoutDestroy(e->lb);
        if (e->lc) cublasLtMatrixLayoutDestroy(e->lc);
        memset(e, 0, sizeof *e);
    }
}

extern "C" {

void llmt__gemm_args_init(llmt__gemm_args *g)
{
    memset(g, 0, sizeof *g);
    g->alpha = 1.0f;
    g->ab_type = LLMT_GEMM_BF16;
    g->c_type = LLMT_GEMM_BF16;
}

void llmt__cuda_gemm_cache_stats(const llmt__cuda_ctx *ctx, uint64_t *lookups,
                                 uint64_t *misses)
{
    if (lookups) *lookups = ctx->gemm_lookups;
    if (misses) *misses = ctx->gemm_misses;
}

#define LT(call)                                                              \
    do {                                                                      \
        cublasStatus_t s_ = (call);                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                    \
            st = llmt__err_set(&ctx->err, LLMT_ERR_CUDA,                      \
                               "cublasLt: %s: status %d (gemm M=%d N=%d K=%d)", \
                               #call, (int)s_, g->M, g->N, g->K);             \
            goto fail;                                                        \
        }                                                                     \
    } while (0)

/* Builds the descriptors and picks the algorithm for one configuration. */
static llmt_status gemm_setup(llmt__cuda_ctx *ctx, const llmt__gemm_args *g,
                              int lda, int ldb, int ldc, llmt__gemm_cache_entry *e)
{
    llmt_status st = LLMT_OK;
    int fp8 = g->ab_type == LLMT_GEMM_E4M3 || g->ab_type == LLMT_GEMM_E5M2;
    cublasOperation_t ta = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N; /* Lt A = our B */
    cublasOperation_t tb = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N; /* Lt B = our A */
    cudaDataType_t at = fp8 ? CUDA_R_8F_E4M3 : dt(g->ab_type);  /* our B */
    cudaDataType_t bt = dt(g->ab_type);                          /* our A */
    cudaDataType_t ct = dt(g->c_type);
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[4];
    int nres = 0;
    size_t ws = ctx->workspace_size;
    uint32_t a_al, b_al, c_al;

    LT(cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    switch (g->epi) {
    case LLMT_GEMM_EPI_BIAS: epi = CUBLASLT_EPILOGUE_BIAS; break;
    case LLMT_GEMM_EPI_GELU: epi = CUBLASLT_EPILOGUE_GELU; break;
    case LLMT_GEMM_EPI_GELU_BIAS: epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS; break;
    case LLMT_GEMM_EPI_DGELU: epi = CUBLASLT_EPILOGUE_DGELU; break;
    case LLMT_GEMM_EPI_BGRAD: epi = CUBLASLT_EPILOGUE_BGRADB; break;
    default: break;
    }
    LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g->epi == LLMT_GEMM_EPI_GELU_BIAS || g->epi == LLMT_GEMM_EPI_DGELU) {
        int64_t ld = g->N;
        LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    if (fp8) {
        int8_t fast = 0;
        LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    }
    LT(cublasLtMatrixLayoutCreate(&e->la, at, g->trans_b ? g->K : g->N,
                                  g->trans_b ? g->N : g->K, ldb));
    LT(cublasLtMatrixLayoutCreate(&e->lb, bt, g->trans_a ? g->M : g->K,
                                  g->trans_a ? g->K : g->M, lda));
    LT(cublasLtMatrixLayoutCreate(&e->lc, ct, g->N, g->M, ldc));

    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &ws, sizeof ws));
    a_al = (uint32_t)align_of(g->B);
    b_al = (uint32_t)align_of(g->A);
    c_al = (uint32_t)align_of(g->C);
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_al, sizeof a_al));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_al, sizeof b_al));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_al, sizeof c_al));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c_al, sizeof c_al));
    if (ctx->deterministic) {
        uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE;
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                &mask, sizeof mask));
    }
    LT(cublasLtMatmulAlgoGetHeuristic(ctx->lt, e->desc, e->la, e->lb, e->lc, e->lc,
                                      pref, 4, res, &nres));
    if (nres == 0) {
        st = llmt__err_set(&ctx->err, LLMT_ERR_UNSUPPORTED,
                           "cublasLt: no algorithm for gemm M=%d N=%d K=%d ta=%d tb=%d "
                           "epi=%d ab=%d c=%d", g->M, g->N, g->K, g->trans_a, g->trans_b,
                           (int)g->epi, (int)g->ab_type, (int)g->c_type);
        goto fail;
    }
    e->algo = res[0].algo;
    e->ok = 1;
    cublasLtMatmulPreferenceDestroy(pref);
    return LLMT_OK;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    return st;
}

llmt_status llmt__cuda_gemm(llmt__cuda_ctx *ctx, const llmt__gemm_args *g)
{
    llmt_status st = LLMT_OK;
    if (!ctx || !g) return LLMT_ERR_NULL_POINTER;
    if (g->M <= 0 || g->N <= 0 || g->K <= 0)
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "cuda: gemm: M=%d N=%d K=%d must be positive", g->M, g->N, g->K);
    int fp8 = g->ab_type == LLMT_GEMM_E4M3 || g->ab_type == LLMT_GEMM_E5M2;
    if (fp8 && (ctx->sm < 89 || g->trans_a || !g->trans_b || !g->a_scale || !g->b_scale))
        return llmt__err_set(&ctx->err, LLMT_ERR_UNSUPPORTED,
                             "cuda: gemm: fp8 needs sm_89+ (have sm_%d), trans_a=0, "
                             "trans_b=1 and both scales", ctx->sm);
    if (fp8 && g->c_type != LLMT_GEMM_BF16 && g->c_type != LLMT_GEMM_F32)
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT, "cuda: gemm: fp8 output type");
    if ((g->epi == LLMT_GEMM_EPI_BIAS || g->epi == LLMT_GEMM_EPI_GELU_BIAS) && !g->bias)
        return llmt__err_set(&ctx->err, LLMT_ERR_NULL_POINTER, "cuda: gemm: epilogue needs bias");
    if ((g->epi == LLMT_GEMM_EPI_GELU_BIAS || g->epi == LLMT_GEMM_EPI_DGELU) && !g->aux)
        return llmt__err_set(&ctx->err, LLMT_ERR_NULL_POINTER, "cuda: gemm: epilogue needs aux");
    if (g->epi == LLMT_GEMM_EPI_BGRAD && !g->bias_grad)
        return llmt__err_set(&ctx->err, LLMT_ERR_NULL_POINTER, "cuda: gemm: BGRAD needs bias_grad");
    int lda = g->lda ? g->lda : (g->trans_a ? g->M : g->K);
    int ldb = g->ldb ? g->ldb : (g->trans_b ? g->K : g->N);
    int ldc = g->ldc ? g->ldc : g->N;

    const void *epp = g->epi == LLMT_GEMM_EPI_BGRAD ? g->bias_grad
                      : (g->epi == LLMT_GEMM_EPI_BIAS || g->epi == LLMT_GEMM_EPI_GELU_BIAS) ? g->bias
                      : NULL;
    uint64_t k0 = (uint64_t)(uint32_t)g->M | ((uint64_t)(uint32_t)g->N << 32);
    uint64_t k1 = (uint64_t)(uint32_t)g->K | ((uint64_t)(uint32_t)lda << 32);
    uint64_t k2 = (uint64_t)(uint32_t)ldb | ((uint64_t)(uint32_t)ldc << 32);
    uint64_t k3 = (uint64_t)g->trans_a | ((uint64_t)g->trans_b << 1) |
                  ((uint64_t)g->ab_type << 2) | ((uint64_t)g->c_type << 6) |
                  ((uint64_t)g->epi << 10) | ((uint64_t)(g->beta != 0.0f) << 14) |
                  ((uint64_t)align_code(align_of(g->A)) << 16) |
                  ((uint64_t)align_code(align_of(g->B)) << 20) |
                  ((uint64_t)align_code(align_of(g->C)) << 24) |
                  ((uint64_t)align_code(align_of(epp)) << 28) |
                  ((uint64_t)align_code(align_of(g->aux)) << 32);
    uint64_t h = mix(mix(mix(mix(0, k0), k1), k2), k3);
    ctx->gemm_lookups++;
    llmt__gemm_cache_entry tmp, *e = NULL;
    for (int probe = 0; probe < LLMT_GEMM_CACHE_SLOTS; probe++) {
        llmt__gemm_cache_entry *c = &ctx->gemm_cache[(h + probe) % LLMT_GEMM_CACHE_SLOTS];
        if (!c->used) {
            e = c;
            break;
        }
        if (c->key[0] == k0 && c->key[1] == k1 && c->key[2] == k2 && c->key[3] == k3) {
            e = c;
            break;
        }
    }
    int temp = 0;
    if (!e) { /* table full: a one-off entry */
        memset(&tmp, 0, sizeof tmp);
        e = &tmp;
        temp = 1;
    }
    if (!e->used) {
        ctx->gemm_misses++;
        e->used = 1;
        e->key[0] = k0; e->key[1] = k1; e->key[2] = k2; e->key[3] = k3;
        st = gemm_setup(ctx, g, lda, ldb, ldc, e);
        if (st) {
            /* keep the failed entry (ok=0) so the error repeats cheaply */
            if (temp) goto fail;
            return st;
        }
    } else if (!e->ok) {
        return llmt__err_set(&ctx->err, LLMT_ERR_UNSUPPORTED,
                             "cublasLt: no algorithm for gemm M=%d N=%d K=%d (cached)",
                             g->M, g->N, g->K);
    }
    {
        if (g->epi == LLMT_GEMM_EPI_BIAS || g->epi == LLMT_GEMM_EPI_GELU_BIAS ||
            g->epi == LLMT_GEMM_EPI_BGRAD)
            LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                              &epp, sizeof epp));
        if (g->epi == LLMT_GEMM_EPI_GELU_BIAS || g->epi == LLMT_GEMM_EPI_DGELU)
            LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                              &g->aux, sizeof g->aux));
        if (fp8) {
            /* cuBLASLt refuses scale pointers that are not 16-byte aligned
             * at cublasLtMatmul (status 15, NOT_SUPPORTED; seen on an
             * H200): such a scale is copied to an aligned slot first, in
             * stream order, so the slots are free again for the next GEMM */
            const float *sa = g->a_scale, *sb = g->b_scale;
            cudaError_t ce = cudaSuccess;
            if ((uintptr_t)sa & 15) {
                ce = cudaMemcpyAsync(ctx->scale_slots, sa, sizeof(float),
                                     cudaMemcpyDeviceToDevice, ctx->compute);
                sa = ctx->scale_slots;
            }
            if (ce == cudaSuccess && ((uintptr_t)sb & 15)) {
                ce = cudaMemcpyAsync(ctx->scale_slots + 4, sb, sizeof(float),
                                     cudaMemcpyDeviceToDevice, ctx->compute);
                sb = ctx->scale_slots + 4;
            }
            if (ce != cudaSuccess) {
                st = llmt__err_set(&ctx->err, LLMT_ERR_CUDA, "cuda: gemm: fp8 scale copy: %s",
                                   cudaGetErrorString(ce));
                goto fail;
            }
            LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                              &sb, sizeof sb));
            LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                              &sa, sizeof sa));
        }
        float alpha = g->alpha, beta = g->beta;
        LT(cublasLtMatmul(ctx->lt, e->desc, &alpha, g->B, e->la, g->A, e->lb, &beta,
                          g->C, e->lc, g->C, e->lc, &e->algo, ctx->workspace,
                          ctx->workspace_size, ctx->compute));
    }
    if (temp) {
        cublasLtMatmulDescDestroy(tmp.desc);
        cublasLtMatrixLayoutDestroy(tmp.la);
        cublasLtMatrixLayoutDestroy(tmp.lb);
        cublasLtMatrixLayoutDestroy(tmp.lc);
    }
    return LLMT_OK;
fail:
    if (temp) {
        if (tmp.desc) cublasLtMatmulDescDestroy(tmp.desc);
        if (tmp.la) cublasLtMatrixLayoutDestroy(tmp.la);
        if (tmp.lb) cublasLtMatrixLayoutDestroy(tmp.lb);
        if (tmp.lc) cublasLtMatrixLayoutDestroy(tmp.lc);
    }
    return st;
}

} // extern "C"
