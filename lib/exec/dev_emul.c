/* The device op table (dev.h) emulated on the host: the same storage types
 * and the same bf16 roundings as the CUDA backend, so that the
 * mixed-precision engine (lib/train/device.c) runs, and is tested, on machines
 * without a GPU. Each op follows its CUDA kernel (cuda/kernels/, the GEMM's
 * cuBLASLt epilogues in cuda/gemm/gemm.cu): values are read from bf16 into
 * fp32, computed in fp32 and rounded to bf16 (nearest even) wherever the
 * kernel stores bf16, including the read-add-round of accumulating bf16
 * outputs. Attention follows the CUDA-core kernels (fp32 probabilities),
 * not the tensor-core ones, which also round P to bf16 before P @ V.
 *
 * Memory is host memory. Fresh blocks are filled with 0xFF bytes (NaN in
 * both bf16 and fp32), as cudaMalloc promises nothing either: an engine that
 * reads memory it never wrote sees NaN here instead of a lucky zero. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "exec/attn_cp.h"
#include "exec/dev.h"
#include "exec/fp8.h"

#ifdef _OPENMP
#include <omp.h>
#endif

struct llmt__dev {
    llmt_err err;
    int deterministic; /* kept for the record: every op here is deterministic */
    size_t in_use, peak;
    float *scratch; /* the ops' per-thread rows (scratch_take), kept between calls */
    size_t scratch_n;
    atomic_int scratch_busy;
};

#define E(d) (&(d)->err)
#define BF(x) llmt__bf16_to_f32(x)
#define TOBF(x) llmt__f32_to_bf16(x)

/* Threads of the next parallel loop, so that per-thread scratch can be
 * sized before it. */
static int team_size(void)
{
#ifdef _OPENMP
    return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
}
static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* ---- context and memory --------------------------------------------------- */

/* Each device block carries a header with its size, so that free can keep
 * the statistics without a table; the magic catches foreign pointers and
 * double frees. */
#define HDR 64
#define MAGIC_LIVE 0x656d756c616c6976ull /* "emulaliv" */
#define MAGIC_DEAD 0x656d756c64656164ull
typedef struct blk_hdr {
    uint64_t magic;
    size_t bytes;
} blk_hdr;

static llmt_status em_create(const llmt__dev_opts *o, llmt__dev **out, char *err,
                             size_t errlen)
{
    if (!out) {
        if (err && errlen) snprintf(err, errlen, "emulated: create: out is NULL");
        return LLMT_ERR_NULL_POINTER;
    }
    *out = NULL;
    llmt__dev *d = calloc(1, sizeof *d);
    if (!d) {
        if (err && errlen) snprintf(err, errlen, "emulated: create: out of host memory");
        return LLMT_ERR_OUT_OF_MEMORY;
    }
    d->deterministic = o ? o->deterministic : 0; /* the ordinal means nothing here */
    *out = d;
    return LLMT_OK;
}

static void em_destroy(llmt__dev *d)
{
    if (d)
        free(d->scratch);
    free(d);
}

/* n floats of scratch: the context's block, grown on demand and kept, so
 * that the GEMMs and attention do not allocate on every call. A second
 * host thread using the same context at the same time (or a failed
 * growth) gets a block of its own; *own says which to give back. */
static float *scratch_take(llmt__dev *d, size_t n, int *own)
{
    *own = 0;
    if (!atomic_exchange(&d->scratch_busy, 1)) {
        if (d->scratch_n >= n)
            return d->scratch;
        float *p = realloc(d->scratch, n * sizeof(float));
        if (p) {
            d->scratch = p;
            d->scratch_n = n;
            return p;
        }
        atomic_store(&d->scratch_busy, 0);
    }
    *own = 1;
    return malloc(n * sizeof(float));
}
static void scratch_give(llmt__dev *d, float *p, int own)
{
    if (own)
        free(p);
    else
        atomic_store(&d->scratch_busy, 0);
}

static const char *em_last_error(const llmt__dev *d)
{
    return d ? d->err.msg : "emulated: no context";
}

static llmt_status em_alloc(llmt__dev *d, void **p, size_t bytes)
{
    if (!d) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(E(d), "emulated: alloc", p);
    *p = NULL;
    if (bytes > SIZE_MAX - 2 * HDR)
        return llmt__err_set(E(d), LLMT_ERR_OUT_OF_MEMORY, "emulated: alloc(%zu): too large",
                             bytes);
    size_t body = (bytes + HDR - 1) / HDR * HDR;
    unsigned char *raw = NULL;
    if (posix_memalign((void **)&raw, HDR, HDR + body) != 0 || !raw)
        return llmt__err_set(E(d), LLMT_ERR_OUT_OF_MEMORY,
                             "emulated: alloc(%zu): out of host memory", bytes);
    blk_hdr *h = (blk_hdr *)(void *)raw;
    h->magic = MAGIC_LIVE;
    h->bytes = bytes;
    memset(raw + HDR, 0xff, body);
    d->in_use += bytes;
    if (d->in_use > d->peak) d->peak = d->in_use;
    *p = raw + HDR;
    return LLMT_OK;
}

static void em_free(llmt__dev *d, void *p)
{
    if (!d || !p) return;
    unsigned char *raw = (unsigned char *)p - HDR;
    blk_hdr *h = (blk_hdr *)(void *)raw;
    if (h->magic != MAGIC_LIVE) {
        /* nothing to return a status through: leave a message and leak */
        llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                      "emulated: free: %p was not returned by alloc, or was freed already", p);
        return;
    }
    h->magic = MAGIC_DEAD;
    d->in_use -= h->bytes;
    free(raw);
}

static llmt_status em_host_alloc(llmt__dev *d, void **p, size_t bytes)
{
    if (!d) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(E(d), "emulated: host_alloc", p);
    *p = NULL;
    if (posix_memalign(p, HDR, bytes ? bytes : 1) != 0 || !*p) {
        *p = NULL;
        return llmt__err_set(E(d), LLMT_ERR_OUT_OF_MEMORY,
                             "emulated: host_alloc(%zu): out of host memory", bytes);
    }
    return LLMT_OK;
}

static void em_host_free(llmt__dev *d, void *p)
{
    (void)d;
    free(p);
}

static void em_mem_stats(const llmt__dev *d, size_t *in_use, size_t *peak)
{
    if (in_use) *in_use = d ? d->in_use : 0;
    if (peak) *peak = d ? d->peak : 0;
}

static llmt_status copy_(llmt__dev *d, const char *what, void *dst, const void *src,
                         size_t bytes)
{
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (!bytes) return LLMT_OK;
    if (!dst || !src)
        return llmt__err_set(E(d), LLMT_ERR_NULL_POINTER, "emulated: %s: %s is NULL", what,
                             dst ? "src" : "dst");
    memmove(dst, src, bytes);
    return LLMT_OK;
}
static llmt_status em_h2d(llmt__dev *d, void *dst, const void *src, size_t bytes)
{
    return copy_(d, "h2d", dst, src, bytes);
}
static llmt_status em_d2h(llmt__dev *d, void *dst, const void *src, size_t bytes)
{
    return copy_(d, "d2h", dst, src, bytes);
}
static llmt_status em_memset0(llmt__dev *d, void *dst, size_t bytes)
{
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (!bytes) return LLMT_OK;
    LLMT__NONNULL(E(d), "emulated: memset0", dst);
    memset(dst, 0, bytes);
    return LLMT_OK;
}
static llmt_status em_d2d(llmt__dev *d, void *dst, const void *src, size_t bytes)
{
    return copy_(d, "d2d", dst, src, bytes);
}
static llmt_status em_fill_nan(llmt__dev *d, void *dst, size_t bytes)
{
    if (!d)
        return LLMT_ERR_NULL_POINTER;
    if (!bytes)
        return LLMT_OK;
    LLMT__NONNULL(E(d), "emulated: fill_nan", dst);
    memset(dst, 0xff, bytes);
    return LLMT_OK;
}
static llmt_status em_sync(llmt__dev *d) { return d ? LLMT_OK : LLMT_ERR_NULL_POINTER; }

/* ---- shared math ------------------------------------------------------------ */

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

/* tanh GELU and its derivative, as cuda/kernels/elementwise.cu writes them */
static inline float gelu_f(float x)
{
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube)));
}
static inline float gelu_grad(float x)
{
    float cube = 0.044715f * x * x * x;
    float th = tanhf(GELU_SCALE * (x + cube));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) +
           x * 0.5f * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

/* a size argument out of range */
#define BAD(d, fmt, ...) \
    llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT, "emulated: " fmt, __VA_ARGS__)

/* NULL pointer argument of an op with work to do */
#define NEED(d, what, p)                                                        \
    do {                                                                        \
        if (!(p))                                                               \
            return llmt__err_set(E(d), LLMT_ERR_NULL_POINTER,                   \
                                 "emulated: %s: %s is NULL", (what), #p);       \
    } while (0)

/* ---- GEMM ------------------------------------------------------------------- */

/* One element of a c_type array (bf16 or fp32). */
static inline float ld_c(const void *p, size_t i, int f32)
{
    return f32 ? ((const float *)p)[i] : BF(((const llmt__bf16 *)p)[i]);
}
static inline void st_c(void *p, size_t i, float v, int f32)
{
    if (f32)
        ((float *)p)[i] = v;
    else
        ((llmt__bf16 *)p)[i] = TOBF(v);
}

/* fp8 operands: what the CUDA backend accepts (trans_a = 0, trans_b = 1,
 * both dequantisation scales; no epilogue here, the engine adds bias and
 * GELU with their own ops), computed as the product of the decoded codes
 * times alpha * a_scale * b_scale, accumulated in fp32 (cuBLASLt with
 * FAST_ACCUM off), one rounding at the store. A is E4M3, or E5M2 for
 * LLMT_GEMM_E5M2; B is E4M3. */
static llmt_status gemm_fp8(llmt__dev *d, const llmt__gemm_args *g)
{
    if (g->trans_a || !g->trans_b || !g->a_scale || !g->b_scale)
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                             "emulated: gemm: fp8 needs trans_a=0, trans_b=1 and both scales");
    if (g->epi != LLMT_GEMM_EPI_NONE)
        return llmt__err_set(E(d), LLMT_ERR_UNSUPPORTED,
                             "emulated: gemm: fp8 with an epilogue is not emulated");
    if (g->c_type != LLMT_GEMM_BF16 && g->c_type != LLMT_GEMM_F32)
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT, "emulated: gemm: fp8 output type");
    if (!g->A || !g->B || !g->C)
        return llmt__err_set(E(d), LLMT_ERR_NULL_POINTER, "emulated: gemm: %s is NULL",
                             !g->A ? "A" : !g->B ? "B" : "C");
    const int M = g->M, N = g->N, K = g->K;
    int lda = g->lda ? g->lda : K, ldb = g->ldb ? g->ldb : K, ldc = g->ldc ? g->ldc : N;
    if (lda < K || ldb < K || ldc < N)
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                             "emulated: gemm: fp8 leading dimensions lda=%d ldb=%d ldc=%d",
                             lda, ldb, ldc);
    const int a5 = g->ab_type == LLMT_GEMM_E5M2, f32 = g->c_type == LLMT_GEMM_F32;
    const uint8_t *A = g->A, *Bm = g->B;
    const float sc = g->alpha * g->a_scale[0] * g->b_scale[0], beta = g->beta;
    int nt = team_size(), own;
    float *scratch = scratch_take(d, (size_t)nt * K, &own);
    if (!scratch)
        return llmt__err_set(E(d), LLMT_ERR_OUT_OF_MEMORY, "emulated: gemm: fp8 scratch");
    /* every code's value once (the same decode, so the same bits): the
     * inner loop decoded B's codes M times over */
    float la[256], lb[256];
    for (int c = 0; c < 256; c++) {
        la[c] = llmt__fp8_decode((uint8_t)c, a5);
        lb[c] = llmt__fp8_decode((uint8_t)c, 0);
    }
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int i = 0; i < M; i++) {
        float *a = scratch + (size_t)thread_id() * K;
        for (int k = 0; k < K; k++)
            a[k] = la[A[(size_t)i * lda + k]];
        for (int j = 0; j < N; j++) {
            const uint8_t *br = Bm + (size_t)j * ldb;
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc += a[k] * lb[br[k]];
            float v = sc * acc;
            if (beta != 0.0f) v += beta * ld_c(g->C, (size_t)i * ldc + j, f32);
            st_c(g->C, (size_t)i * ldc + j, v, f32);
        }
    }
    scratch_give(d, scratch, own);
    return LLMT_OK;
}

/* cuBLASLt's order: acc = alpha * op(A) op(B) + beta * C (C not read when
 * beta is 0), then the epilogue: + bias, gelu, or * gelu'(aux), in fp32, and
 * one rounding at each store. GELU_BIAS stores the pre-activation into aux
 * (rounded to c_type) and applies gelu to the unrounded value. bias, aux and
 * bias_grad have c_type's type (cuBLASLt's default for a bf16 or fp32 D);
 * aux is [M, N] packed (gemm.cu sets EPILOGUE_AUX_LD = N). */
static llmt_status em_gemm(llmt__dev *d, const llmt__gemm_args *g)
{
    if (!d) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(E(d), "emulated: gemm", g);
    if (g->M <= 0 || g->N <= 0 || g->K <= 0)
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                             "emulated: gemm: M=%d N=%d K=%d must be positive", g->M, g->N,
                             g->K);
    if (g->ab_type == LLMT_GEMM_E4M3 || g->ab_type == LLMT_GEMM_E5M2)
        return gemm_fp8(d, g);
    if (g->ab_type != LLMT_GEMM_BF16)
        return llmt__err_set(E(d), LLMT_ERR_UNSUPPORTED,
                             "emulated: gemm: A and B must be bf16 (ab_type %d)", (int)g->ab_type);
    if (g->c_type != LLMT_GEMM_BF16 && g->c_type != LLMT_GEMM_F32)
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                             "emulated: gemm: c_type %d is neither BF16 nor F32", (int)g->c_type);
    if ((int)g->epi < LLMT_GEMM_EPI_NONE || (int)g->epi > LLMT_GEMM_EPI_BGRAD)
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT, "emulated: gemm: epilogue %d",
                             (int)g->epi);
    if ((g->epi == LLMT_GEMM_EPI_BIAS || g->epi == LLMT_GEMM_EPI_GELU_BIAS) && !g->bias)
        return llmt__err_set(E(d), LLMT_ERR_NULL_POINTER, "emulated: gemm: epilogue needs bias");
    if ((g->epi == LLMT_GEMM_EPI_GELU_BIAS || g->epi == LLMT_GEMM_EPI_DGELU) && !g->aux)
        return llmt__err_set(E(d), LLMT_ERR_NULL_POINTER, "emulated: gemm: epilogue needs aux");
    if (g->epi == LLMT_GEMM_EPI_BGRAD && !g->bias_grad)
        return llmt__err_set(E(d), LLMT_ERR_NULL_POINTER,
                             "emulated: gemm: BGRAD needs bias_grad");
    if (!g->A || !g->B || !g->C)
        return llmt__err_set(E(d), LLMT_ERR_NULL_POINTER, "emulated: gemm: %s is NULL",
                             !g->A ? "A" : !g->B ? "B" : "C");
    const int M = g->M, N = g->N, K = g->K, ta = g->trans_a, tb = g->trans_b;
    /* row-major: a stored row holds K (M when transposed) elements of A */
    int arow = ta ? M : K, brow = tb ? K : N;
    int lda = g->lda ? g->lda : arow, ldb = g->ldb ? g->ldb : brow, ldc = g->ldc ? g->ldc : N;
    if (lda < arow || ldb < brow || ldc < N)
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                             "emulated: gemm: leading dimensions lda=%d ldb=%d ldc=%d below the "
                             "rows (%d, %d, %d) of M=%d N=%d K=%d ta=%d tb=%d",
                             lda, ldb, ldc, arow, brow, N, M, N, K, ta, tb);

    int nt = team_size(), own;
    float *scratch = scratch_take(d, (size_t)nt * ((size_t)K + N), &own);
    if (!scratch)
        return llmt__err_set(E(d), LLMT_ERR_OUT_OF_MEMORY,
                             "emulated: gemm: scratch for M=%d N=%d K=%d", M, N, K);
    const llmt__bf16 *A = g->A, *Bm = g->B;
    const int f32 = g->c_type == LLMT_GEMM_F32;
    const float alpha = g->alpha, beta = g->beta;
    const llmt__gemm_epi epi = g->epi;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int i = 0; i < M; i++) {
        float *a = scratch + (size_t)thread_id() * ((size_t)K + N), *acc = a + K;
        for (int k = 0; k < K; k++)
            a[k] = BF(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
        if (tb) {
            /* four columns at once: four sums, each over k in the one-column
             * loop's order (the same bits), not one chain of dependent adds */
            int j = 0;
            for (; j + 4 <= N; j += 4) {
                const llmt__bf16 *b0 = Bm + (size_t)j * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb,
                                 *b3 = b2 + ldb;
                float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
                for (int k = 0; k < K; k++) {
                    float ak = a[k];
                    s0 += ak * BF(b0[k]);
                    s1 += ak * BF(b1[k]);
                    s2 += ak * BF(b2[k]);
                    s3 += ak * BF(b3[k]);
                }
                acc[j] = s0;
                acc[j + 1] = s1;
                acc[j + 2] = s2;
                acc[j + 3] = s3;
            }
            for (; j < N; j++) {
                const llmt__bf16 *br = Bm + (size_t)j * ldb;
                float s = 0.0f;
                for (int k = 0; k < K; k++) s += a[k] * BF(br[k]);
                acc[j] = s;
            }
        } else {
            for (int j = 0; j < N; j++) acc[j] = 0.0f;
            for (int k = 0; k < K; k++) {
                const llmt__bf16 *br = Bm + (size_t)k * ldb;
                float ak = a[k];
                /* vectorised (-O2 alone leaves it scalar: 70% of the GEMM's
                 * time); each element's operations are unchanged */
#pragma omp simd
                for (int j = 0; j < N; j++) acc[j] += ak * BF(br[j]);
            }
        }
        size_t crow = (size_t)i * ldc, xrow = (size_t)i * N;
        for (int j = 0; j < N; j++) {
            float v = alpha * acc[j];
            if (beta != 0.0f) v += beta * ld_c(g->C, crow + j, f32);
            switch (epi) {
            case LLMT_GEMM_EPI_BIAS: v += ld_c(g->bias, (size_t)j, f32); break;
            case LLMT_GEMM_EPI_GELU: v = gelu_f(v); break;
            case LLMT_GEMM_EPI_GELU_BIAS:
                v += ld_c(g->bias, (size_t)j, f32);
                st_c(g->aux, xrow + j, v, f32);
                v = gelu_f(v);
                break;
            case LLMT_GEMM_EPI_DGELU: v *= gelu_grad(ld_c(g->aux, xrow + j, f32)); break;
            default: break;
            }
            st_c(g->C, crow + j, v, f32);
        }
        if (epi == LLMT_GEMM_EPI_BGRAD) { /* sum over k of op(A)[i, :], overwritten */
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += a[k];
            st_c(g->bias_grad, (size_t)i, s, f32);
        }
    }
    scratch_give(d, scratch, own);
    return LLMT_OK;
}

/* ---- embedding -------------------------------------------------------------- */

static llmt_status check_tokens(llmt__dev *d, const char *what, const int32_t *tok, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tok[i] < 0)
            return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                                 "emulated: %s: token %zu is %d (negative)", what, i,
                                 (int)tok[i]);
    return LLMT_OK;
}

static llmt_status em_embedding_fwd(llmt__dev *d, void *out_, const int32_t *tok,
                                    const void *wte_, const void *wpe_, int B,
                                    int T, int C)
{
    llmt__bf16 *out = out_;
    const llmt__bf16 *wte = wte_;
    const llmt__bf16 *wpe = wpe_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (B < 0 || T < 0 || C < 0 || (long long)B * T > INT32_MAX)
        return BAD(d, "embedding_fwd: B=%d T=%d C=%d", B, T, C);
    if ((size_t)B * T == 0 || C == 0) return LLMT_OK;
    NEED(d, "embedding_fwd", out);
    NEED(d, "embedding_fwd", tok);
    NEED(d, "embedding_fwd", wte);
    int BT = B * T;
    llmt_status st = check_tokens(d, "embedding_fwd", tok, (size_t)BT);
    if (st) return st;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++) {
        const llmt__bf16 *e = wte + (size_t)tok[r] * C;
        llmt__bf16 *o = out + (size_t)r * C;
        if (wpe) {
            const llmt__bf16 *p = wpe + (size_t)(r % T) * C;
            for (int c = 0; c < C; c++) o[c] = TOBF(BF(e[c]) + BF(p[c]));
        } else {
            memcpy(o, e, sizeof *o * (size_t)C);
        }
    }
    return LLMT_OK;
}

/* Deterministic order, as the CUDA kernels in deterministic mode: dwpe gets
 * one fp32 sum over the batch per element, dwte the rows in token order. */
static llmt_status em_embedding_bwd(llmt__dev *d, float *dwte, float *dwpe,
                                    const void *dout_, const int32_t *tok, int B, int T,
                                    int C)
{
    const llmt__bf16 *dout = dout_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (B < 0 || T < 0 || C < 0 || (long long)B * T > INT32_MAX)
        return BAD(d, "embedding_bwd: B=%d T=%d C=%d", B, T, C);
    if ((size_t)B * T == 0 || C == 0) return LLMT_OK;
    NEED(d, "embedding_bwd", dwte);
    NEED(d, "embedding_bwd", dout);
    NEED(d, "embedding_bwd", tok);
    int BT = B * T;
    llmt_status st = check_tokens(d, "embedding_bwd", tok, (size_t)BT);
    if (st) return st;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        if (dwpe)
            for (int t = 0; t < T; t++) {
                float s = 0.0f;
                for (int b = 0; b < B; b++) s += BF(dout[((size_t)b * T + t) * C + c]);
                dwpe[(size_t)t * C + c] += s;
            }
        for (int r = 0; r < BT; r++) dwte[(size_t)tok[r] * C + c] += BF(dout[(size_t)r * C + c]);
    }
    return LLMT_OK;
}

/* ---- layernorm / rmsnorm ----------------------------------------------------- */

static void norm_fwd(llmt__bf16 *out, float *mean, float *rstd, const llmt__bf16 *inp,
                     const llmt__bf16 *w, const llmt__bf16 *b, int N, int C, float eps,
                     int rms)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const llmt__bf16 *x = inp + (size_t)n * C;
        llmt__bf16 *o = out + (size_t)n * C;
        float m = 0.0f;
        if (!rms) {
            float s = 0.0f;
            for (int c = 0; c < C; c++) s += BF(x[c]);
            m = s / C;
        }
        float v = 0.0f;
        for (int c = 0; c < C; c++) {
            float dd = BF(x[c]) - m;
            v += dd * dd;
        }
        float r = 1.0f / sqrtf(v / C + eps);
        for (int c = 0; c < C; c++) {
            float y = (BF(x[c]) - m) * r * BF(w[c]);
            if (!rms && b) y += BF(b[c]);
            o[c] = TOBF(y);
        }
        if (!rms && mean) mean[n] = m;
        rstd[n] = r;
    }
}

/* dinp: bf16 read, fp32 add, bf16 store; dw, db: one fp32 column sum added
 * to the accumulator (the CUDA partials are summed before the +=). */
static void norm_bwd(llmt__bf16 *dinp, float *dw, float *db, const llmt__bf16 *dout,
                     const llmt__bf16 *inp, const llmt__bf16 *w, const float *mean,
                     const float *rstd, int N, int C, int rms)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const llmt__bf16 *x = inp + (size_t)n * C, *dd = dout + (size_t)n * C;
        llmt__bf16 *di = dinp + (size_t)n * C;
        float m = rms ? 0.0f : mean[n], s = rstd[n];
        float a = 0.0f, bs = 0.0f;
        for (int c = 0; c < C; c++) {
            float xh = (BF(x[c]) - m) * s;
            float dn = BF(w[c]) * BF(dd[c]);
            a += dn;
            bs += dn * xh;
        }
        float sa = rms ? 0.0f : a / C, sb = bs / C;
        for (int c = 0; c < C; c++) {
            float xh = (BF(x[c]) - m) * s;
            float dn = BF(w[c]) * BF(dd[c]);
            float gi = (dn - sa - xh * sb) * s;
            di[c] = TOBF(BF(di[c]) + gi);
        }
    }
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        float sw = 0.0f, sbias = 0.0f;
        for (int n = 0; n < N; n++) {
            float m = rms ? 0.0f : mean[n];
            float xh = (BF(inp[(size_t)n * C + c]) - m) * rstd[n];
            float g = BF(dout[(size_t)n * C + c]);
            sw += g * xh;
            sbias += g;
        }
        dw[c] += sw;
        if (!rms && db) db[c] += sbias;
    }
}

static llmt_status em_layernorm_fwd(llmt__dev *d, void *out_, float *mean, float *rstd,
                                    const void *inp_, const void *w_,
                                    const void *b_, int N, int C, float eps)
{
    llmt__bf16 *out = out_;
    const llmt__bf16 *inp = inp_;
    const llmt__bf16 *w = w_;
    const llmt__bf16 *b = b_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (N < 0 || C < 0 || (N > 0 && C == 0)) return BAD(d, "layernorm_fwd: N=%d C=%d", N, C);
    if (N == 0) return LLMT_OK;
    NEED(d, "layernorm_fwd", out);
    NEED(d, "layernorm_fwd", rstd);
    NEED(d, "layernorm_fwd", inp);
    NEED(d, "layernorm_fwd", w);
    norm_fwd(out, mean, rstd, inp, w, b, N, C, eps, 0);
    return LLMT_OK;
}

static llmt_status em_layernorm_bwd(llmt__dev *d, void *dinp_, float *dw, float *db,
                                    const void *dout_, const void *inp_,
                                    const void *w_, const float *mean, const float *rstd,
                                    int N, int C)
{
    llmt__bf16 *dinp = dinp_;
    const llmt__bf16 *dout = dout_;
    const llmt__bf16 *inp = inp_;
    const llmt__bf16 *w = w_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (N < 0 || C < 0) return BAD(d, "layernorm_bwd: N=%d C=%d", N, C);
    if (N == 0 || C == 0) return LLMT_OK;
    NEED(d, "layernorm_bwd", dinp);
    NEED(d, "layernorm_bwd", dw);
    NEED(d, "layernorm_bwd", dout);
    NEED(d, "layernorm_bwd", inp);
    NEED(d, "layernorm_bwd", w);
    NEED(d, "layernorm_bwd", mean);
    NEED(d, "layernorm_bwd", rstd);
    norm_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, C, 0);
    return LLMT_OK;
}

static llmt_status em_rmsnorm_fwd(llmt__dev *d, void *out_, float *rstd,
                                  const void *inp_, const void *w_, int N, int C,
                                  float eps)
{
    llmt__bf16 *out = out_;
    const llmt__bf16 *inp = inp_;
    const llmt__bf16 *w = w_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (N < 0 || C < 0 || (N > 0 && C == 0)) return BAD(d, "rmsnorm_fwd: N=%d C=%d", N, C);
    if (N == 0) return LLMT_OK;
    NEED(d, "rmsnorm_fwd", out);
    NEED(d, "rmsnorm_fwd", rstd);
    NEED(d, "rmsnorm_fwd", inp);
    NEED(d, "rmsnorm_fwd", w);
    norm_fwd(out, NULL, rstd, inp, w, NULL, N, C, eps, 1);
    return LLMT_OK;
}

static llmt_status em_rmsnorm_bwd(llmt__dev *d, void *dinp_, float *dw,
                                  const void *dout_, const void *inp_,
                                  const void *w_, const float *rstd, int N, int C)
{
    llmt__bf16 *dinp = dinp_;
    const llmt__bf16 *dout = dout_;
    const llmt__bf16 *inp = inp_;
    const llmt__bf16 *w = w_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (N < 0 || C < 0) return BAD(d, "rmsnorm_bwd: N=%d C=%d", N, C);
    if (N == 0 || C == 0) return LLMT_OK;
    NEED(d, "rmsnorm_bwd", dinp);
    NEED(d, "rmsnorm_bwd", dw);
    NEED(d, "rmsnorm_bwd", dout);
    NEED(d, "rmsnorm_bwd", inp);
    NEED(d, "rmsnorm_bwd", w);
    NEED(d, "rmsnorm_bwd", rstd);
    norm_bwd(dinp, dw, NULL, dout, inp, w, NULL, rstd, N, C, 1);
    return LLMT_OK;
}

/* ---- element-wise ------------------------------------------------------------ */

static llmt_status em_swiglu_fwd(llmt__dev *d, void *out_, const void *gate_,
                                 const void *up_, size_t n)
{
    llmt__bf16 *out = out_;
    const llmt__bf16 *gate = gate_;
    const llmt__bf16 *up = up_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (!n) return LLMT_OK;
    NEED(d, "swiglu_fwd", out);
    NEED(d, "swiglu_fwd", gate);
    NEED(d, "swiglu_fwd", up);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = BF(gate[i]);
        out[i] = TOBF(g / (1.0f + expf(-g)) * BF(up[i]));
    }
    return LLMT_OK;
}

static llmt_status em_swiglu_bwd(llmt__dev *d, void *dgate_, void *dup_, void *h_,
                                 const void *dout_, const void *gate_, const void *up_,
                                 size_t n)
{
    llmt__bf16 *dgate = dgate_, *dup = dup_, *h = h_;
    const llmt__bf16 *dout = dout_, *gate = gate_, *up = up_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (!n) return LLMT_OK;
    NEED(d, "swiglu_bwd", dgate);
    NEED(d, "swiglu_bwd", dup);
    NEED(d, "swiglu_bwd", dout);
    NEED(d, "swiglu_bwd", gate);
    NEED(d, "swiglu_bwd", up);
    /* dgate may alias dout: each element is read before it is written */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float dd = BF(dout[i]), g = BF(gate[i]), u = BF(up[i]);
        float s = 1.0f / (1.0f + expf(-g));
        float dg = 0.0f, du = 0.0f; /* written: dev.h */
        du += dd * g * s;
        dg += dd * u * s * (1.0f + g * (1.0f - s));
        dgate[i] = TOBF(dg);
        dup[i] = TOBF(du);
        if (h)
            h[i] = TOBF(g / (1.0f + expf(-g)) * u); /* em_swiglu_fwd's */
    }
    return LLMT_OK;
}

static llmt_status em_residual_fwd(llmt__dev *d, void *out_, const void *a_,
                                   const void *b_, size_t n)
{
    llmt__bf16 *out = out_;
    const llmt__bf16 *a = a_;
    const llmt__bf16 *b = b_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (!n) return LLMT_OK;
    NEED(d, "residual_fwd", out);
    NEED(d, "residual_fwd", a);
    NEED(d, "residual_fwd", b);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = TOBF(BF(a[i]) + BF(b[i]));
    return LLMT_OK;
}

static llmt_status em_bias_bwd(llmt__dev *d, float *dbias, const void *dout_, int N,
                               int C)
{
    const llmt__bf16 *dout = dout_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (N < 0 || C < 0) return BAD(d, "bias_bwd: N=%d C=%d", N, C);
    if (N == 0 || C == 0) return LLMT_OK;
    NEED(d, "bias_bwd", dbias);
    NEED(d, "bias_bwd", dout);
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        float s = 0.0f;
        for (int n = 0; n < N; n++) s += BF(dout[(size_t)n * C + c]);
        dbias[c] += s;
    }
    return LLMT_OK;
}

static llmt_status em_rope(llmt__dev *d, void *x_, int B, int T, int nh, int hd,
                           size_t stride, float theta, int inverse)
{
    llmt__bf16 *x = x_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (B < 0 || T < 0 || nh < 0 || hd < 0 || hd % 2)
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                             "emulated: rope: B=%d T=%d nh=%d hd=%d (even) not supported", B, T,
                             nh, hd);
    size_t rows = (size_t)B * T;
    if (rows == 0 || nh == 0 || hd == 0) return LLMT_OK;
    if (rows > 1 && stride < (size_t)nh * hd)
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                             "emulated: rope: stride %zu below nh*hd = %d", stride, nh * hd);
    NEED(d, "rope", x);
    int half = hd / 2;
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        float pos = (float)(r % (size_t)T);
        for (int i = 0; i < half; i++) {
            float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
            float a = pos * inv_freq, c = cosf(a), s = sinf(a);
            if (inverse) s = -s;
            for (int h = 0; h < nh; h++) {
                llmt__bf16 *p = x + r * stride + (size_t)h * hd;
                float x1 = BF(p[i]), x2 = BF(p[i + half]);
                p[i] = TOBF(x1 * c - x2 * s);
                p[i + half] = TOBF(x2 * c + x1 * s);
            }
        }
    }
    return LLMT_OK;
}

/* ---- attention ----------------------------------------------------------------- */

#define HDMAX 128

static llmt_status attn_check(llmt__dev *d, const char *what, size_t qs, int B, int T,
                              int nh, int nkv, int hd)
{
    if (B < 0 || T < 0 || nh < 0 || hd <= 0 || hd > HDMAX || hd % 2 || nkv <= 0 ||
        nh % nkv || qs % 2 || qs < (size_t)nh * hd)
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                             "emulated: %s: B=%d T=%d hd=%d (even, <= %d), nh=%d, nkv=%d, "
                             "qs=%zu (even, >= nh*hd) not supported",
                             what, B, T, hd, HDMAX, nh, nkv, qs);
    return LLMT_OK;
}

/* fp32 dot product in the CUDA-core kernels' order: two interleaved sums */
static inline float dot_bf(const llmt__bf16 *a, const llmt__bf16 *b, int hd)
{
    float s0 = 0.0f, s1 = 0.0f;
    for (int i = 0; i < hd; i += 2) {
        s0 += BF(a[i]) * BF(b[i]);
        s1 += BF(a[i + 1]) * BF(b[i + 1]);
    }
    return s0 + s1;
}

/* out = softmax(q k^T * scale) v, causal; lse = natural-log log-sum-exp of
 * the scaled scores (max + log(sum exp(s - max))). */
static llmt_status em_attention_fwd(llmt__dev *d, void *out_, float *lse,
                                    const void *q_, const void *k_,
                                    const void *v_, size_t qs, int B, int T, int nh,
                                    int nkv, int hd)
{
    llmt__bf16 *out = out_;
    const llmt__bf16 *q = q_;
    const llmt__bf16 *k = k_;
    const llmt__bf16 *v = v_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    llmt_status st = attn_check(d, "attention_fwd", qs, B, T, nh, nkv, hd);
    if (st) return st;
    if (B == 0 || T == 0 || nh == 0) return LLMT_OK;
    NEED(d, "attention_fwd", out);
    NEED(d, "attention_fwd", lse);
    NEED(d, "attention_fwd", q);
    NEED(d, "attention_fwd", k);
    NEED(d, "attention_fwd", v);
    int nt = team_size(), own;
    float *scratch = scratch_take(d, (size_t)nt * T, &own);
    if (!scratch)
        return llmt__err_set(E(d), LLMT_ERR_OUT_OF_MEMORY,
                             "emulated: attention_fwd: scratch for T=%d", T);
    const int group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    const long long total = (long long)B * nh * T;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (long long idx = 0; idx < total; idx++) {
        int t = (int)(idx % T), h = (int)(idx / T % nh), b = (int)(idx / T / nh);
        int kh = h / group;
        float *s = scratch + (size_t)thread_id() * T;
        const llmt__bf16 *qr = q + ((size_t)b * T + t) * qs + (size_t)h * hd;
        float m = -INFINITY;
        for (int j = 0; j <= t; j++) {
            s[j] = dot_bf(qr, k + ((size_t)b * T + j) * qs + (size_t)kh * hd, hd) * scale;
            if (s[j] > m) m = s[j];
        }
        float l = 0.0f, o[HDMAX];
        for (int i = 0; i < hd; i++) o[i] = 0.0f;
        for (int j = 0; j <= t; j++) {
            float p = expf(s[j] - m);
            const llmt__bf16 *vr = v + ((size_t)b * T + j) * qs + (size_t)kh * hd;
            l += p;
            for (int i = 0; i < hd; i++) o[i] += p * BF(vr[i]);
        }
        float inv = 1.0f / l;
        llmt__bf16 *orow = out + ((size_t)b * T + t) * nh * hd + (size_t)h * hd;
        for (int i = 0; i < hd; i++) orow[i] = TOBF(o[i] * inv);
        lse[((size_t)b * nh + h) * T + t] = m + logf(l);
    }
    scratch_give(d, scratch, own);
    return LLMT_OK;
}

/* Flash-attention backward from the saved lse: P = exp(s - lse),
 * D = rowsum(dout * out), dS = P (dout v^T - D). dq = scale dS k, dk = scale
 * dS^T q (summed over the query heads of the kv group), dv = P^T dout; all
 * three overwritten. */
static llmt_status em_attention_bwd(llmt__dev *d, void *dq_, void *dk_,
                                    void *dv_, const void *dout_,
                                    const void *out_, const float *lse,
                                    const void *q_, const void *k_,
                                    const void *v_, size_t qs, int B, int T, int nh,
                                    int nkv, int hd)
{
    llmt__bf16 *dq = dq_;
    llmt__bf16 *dk = dk_;
    llmt__bf16 *dv = dv_;
    const llmt__bf16 *dout = dout_;
    const llmt__bf16 *out = out_;
    const llmt__bf16 *q = q_;
    const llmt__bf16 *k = k_;
    const llmt__bf16 *v = v_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    llmt_status st = attn_check(d, "attention_bwd", qs, B, T, nh, nkv, hd);
    if (st) return st;
    if (B == 0 || T == 0 || nh == 0) return LLMT_OK;
    NEED(d, "attention_bwd", dq);
    NEED(d, "attention_bwd", dk);
    NEED(d, "attention_bwd", dv);
    NEED(d, "attention_bwd", dout);
    NEED(d, "attention_bwd", out);
    NEED(d, "attention_bwd", lse);
    NEED(d, "attention_bwd", q);
    NEED(d, "attention_bwd", k);
    NEED(d, "attention_bwd", v);
    const size_t nrow = (size_t)B * nh * T;
    float *Dd = malloc(sizeof(float) * nrow);
    if (!Dd)
        return llmt__err_set(E(d), LLMT_ERR_OUT_OF_MEMORY,
                             "emulated: attention_bwd: scratch for B*nh*T = %zu", nrow);
    const int group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t orow = (size_t)nh * hd; /* out and dout are packed */

    /* D[b,h,t] = sum_d dout * out */
#pragma omp parallel for schedule(static)
    for (size_t idx = 0; idx < nrow; idx++) {
        size_t t = idx % T, h = idx / T % nh, b = idx / T / nh;
        const llmt__bf16 *a = dout + (b * T + t) * orow + h * hd;
        const llmt__bf16 *c = out + (b * T + t) * orow + h * hd;
        float s = 0.0f;
        for (int i = 0; i < hd; i++) s += BF(a[i]) * BF(c[i]);
        Dd[idx] = s;
    }

    /* dq: per query row, over keys 0..t */
#pragma omp parallel for schedule(static)
    for (size_t idx = 0; idx < nrow; idx++) {
        int t = (int)(idx % T), h = (int)(idx / T % nh), b = (int)(idx / T / nh);
        int kh = h / group;
        const llmt__bf16 *qr = q + ((size_t)b * T + t) * qs + (size_t)h * hd;
        const llmt__bf16 *dor = dout + ((size_t)b * T + t) * orow + (size_t)h * hd;
        float L = lse[idx], Dt = Dd[idx], acc[HDMAX];
        for (int i = 0; i < hd; i++) acc[i] = 0.0f;
        for (int j = 0; j <= t; j++) {
            const llmt__bf16 *kr = k + ((size_t)b * T + j) * qs + (size_t)kh * hd;
            const llmt__bf16 *vr = v + ((size_t)b * T + j) * qs + (size_t)kh * hd;
            float p = expf(dot_bf(qr, kr, hd) * scale - L);
            float ds = p * (dot_bf(dor, vr, hd) - Dt);
            for (int i = 0; i < hd; i++) acc[i] += ds * BF(kr[i]);
        }
        llmt__bf16 *dqr = dq + ((size_t)b * T + t) * qs + (size_t)h * hd;
        for (int i = 0; i < hd; i++) dqr[i] = TOBF(acc[i] * scale);
    }

    /* dk, dv: per key row, over the group's query heads and queries j..T-1 */
    const size_t nkrow = (size_t)B * nkv * T;
#pragma omp parallel for schedule(static)
    for (size_t idx = 0; idx < nkrow; idx++) {
        int j = (int)(idx % T), kh = (int)(idx / T % nkv), b = (int)(idx / T / nkv);
        const llmt__bf16 *kr = k + ((size_t)b * T + j) * qs + (size_t)kh * hd;
        const llmt__bf16 *vr = v + ((size_t)b * T + j) * qs + (size_t)kh * hd;
        float dka[HDMAX], dva[HDMAX];
        for (int i = 0; i < hd; i++) dka[i] = dva[i] = 0.0f;
        for (int h = kh * group; h < (kh + 1) * group; h++) {
            const float *lb = lse + ((size_t)b * nh + h) * T, *Db = Dd + ((size_t)b * nh + h) * T;
            for (int t = j; t < T; t++) {
                const llmt__bf16 *qr = q + ((size_t)b * T + t) * qs + (size_t)h * hd;
                const llmt__bf16 *dor = dout + ((size_t)b * T + t) * orow + (size_t)h * hd;
                float p = expf(dot_bf(kr, qr, hd) * scale - lb[t]);
                float ds = p * (dot_bf(dor, vr, hd) - Db[t]);
                for (int i = 0; i < hd; i++) {
                    dva[i] += p * BF(dor[i]);
                    dka[i] += ds * BF(qr[i]);
                }
            }
        }
        llmt__bf16 *dkr = dk + ((size_t)b * T + j) * qs + (size_t)kh * hd;
        llmt__bf16 *dvr = dv + ((size_t)b * T + j) * qs + (size_t)kh * hd;
        for (int i = 0; i < hd; i++) {
            dkr[i] = TOBF(dka[i] * scale);
            dvr[i] = TOBF(dva[i]);
        }
    }
    free(Dd);
    return LLMT_OK;
}

/* ---- loss, optimizer, reductions ------------------------------------------------ */

static llmt_status em_softmax_xent(llmt__dev *d, float *losses, void *logits_,
                                   const int32_t *targets, int N, int V, int Vp, float dloss)
{
    llmt__bf16 *logits = logits_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (N < 0) return BAD(d, "softmax_xent: N=%d", N);
    if (N == 0) return LLMT_OK;
    if (V <= 0 || Vp < V)
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT, "emulated: softmax_xent: V=%d Vp=%d",
                             V, Vp);
    NEED(d, "softmax_xent", losses);
    NEED(d, "softmax_xent", logits);
    NEED(d, "softmax_xent", targets);
    for (int n = 0; n < N; n++)
        if (targets[n] >= V)
            return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                                 "emulated: softmax_xent: target %d of row %d not below V=%d",
                                 (int)targets[n], n, V);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        llmt__bf16 *x = logits + (size_t)n * Vp;
        float m = -INFINITY, s = 0.0f;
        for (int c = 0; c < V; c++) {
            float xc = BF(x[c]);
            if (xc > m) m = xc;
        }
        for (int c = 0; c < V; c++) s += expf(BF(x[c]) - m);
        float lse = m + logf(s);
        int tgt = targets[n];
        losses[n] = tgt >= 0 ? lse - BF(x[tgt]) : 0.0f;
        if (dloss == 0.0f) continue;
        float sc = tgt >= 0 ? dloss : 0.0f;
        for (int c = 0; c < Vp; c++) {
            float p = c < V ? expf(BF(x[c]) - lse) : 0.0f;
            x[c] = TOBF((p - (c == tgt ? 1.0f : 0.0f)) * sc);
        }
    }
    return LLMT_OK;
}

/* cuda/kernels/optim.cu's adam1, operation for operation */
static llmt_status em_adamw(llmt__dev *d, float *master, void *param_bf16_,
                            const float *grad, float *m, float *v, size_t n, float lr,
                            float beta1, float beta2, float eps, float wd, float grad_scale,
                            int64_t t)
{
    llmt__bf16 *param_bf16 = param_bf16_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (!n) return LLMT_OK;
    if (t < 1)
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                             "emulated: adamw: step t=%lld (1-based)", (long long)t);
    NEED(d, "adamw", master);
    NEED(d, "adamw", grad);
    NEED(d, "adamw", m);
    NEED(d, "adamw", v);
    const float bc1 = 1.0f - powf(beta1, (float)t);
    const float bc2 = 1.0f - powf(beta2, (float)t);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale, p = master[i];
        float mm = beta1 * m[i] + (1.0f - beta1) * g;
        float vv = beta2 * v[i] + (1.0f - beta2) * g * g;
        float mh = mm / bc1, vh = vv / bc2;
        p = p - lr * (mh / (sqrtf(vh) + eps) + wd * p);
        master[i] = p;
        m[i] = mm;
        v[i] = vv;
        if (param_bf16) param_bf16[i] = TOBF(p);
    }
    return LLMT_OK;
}

/* Sums in double, in index order, rounded once to fp32: deterministic, and
 * at least as accurate as the CUDA tree of fp32 partials. */
static llmt_status em_sumsq(llmt__dev *d, float *out, const float *const *xs,
                            const size_t *ns, int count)
{
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (count < 0) /* any count, as on CUDA (a rank's norm runs) */
        return llmt__err_set(E(d), LLMT_ERR_INVALID_ARGUMENT,
                             "emulated: sumsq: count %d is negative", count);
    NEED(d, "sumsq", out);
    if (count) {
        NEED(d, "sumsq", xs);
        NEED(d, "sumsq", ns);
    }
    double total = 0.0;
    for (int a = 0; a < count; a++) {
        if (!ns[a]) continue;
        if (!xs[a])
            return llmt__err_set(E(d), LLMT_ERR_NULL_POINTER,
                                 "emulated: sumsq: xs[%d] is NULL (n=%zu)", a, ns[a]);
        const float *x = xs[a];
        double s = 0.0;
        for (size_t i = 0; i < ns[a]; i++) s += (double)x[i] * x[i];
        total += s;
    }
    out[0] = (float)total;
    return LLMT_OK;
}

static llmt_status em_sum(llmt__dev *d, float *out, const float *x, size_t n)
{
    if (!d) return LLMT_ERR_NULL_POINTER;
    NEED(d, "sum", out);
    if (n) NEED(d, "sum", x);
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    out[0] = (float)s;
    return LLMT_OK;
}

static llmt_status em_f32_to_bf16(llmt__dev *d, llmt__bf16 *y, const float *x, size_t n)
{
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (!n) return LLMT_OK;
    NEED(d, "f32_to_bf16", y);
    NEED(d, "f32_to_bf16", x);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = TOBF(x[i]);
    return LLMT_OK;
}

/* ---- fp8 support ops --------------------------------------------------------- */

static llmt_status em_amax(llmt__dev *d, float *out, const void *x_, size_t n)
{
    const llmt__bf16 *x = x_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    NEED(d, "amax", out);
    if (n) NEED(d, "amax", x);
    float m = 0.0f; /* fmaxf skips NaN, as the kernel's reduction does */
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(BF(x[i])));
    out[0] = m;
    return LLMT_OK;
}

static llmt_status em_quantize_fp8(llmt__dev *d, uint8_t *y, const void *x_,
                                   const float *scale, size_t n, int e5m2)
{
    const llmt__bf16 *x = x_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (!n) return LLMT_OK;
    NEED(d, "quantize_fp8", y);
    NEED(d, "quantize_fp8", x);
    NEED(d, "quantize_fp8", scale);
    const float s = scale[0];
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = llmt__fp8_encode(BF(x[i]) * s, e5m2);
    return LLMT_OK;
}

static llmt_status em_cast_transpose_fp8(llmt__dev *d, uint8_t *y, uint8_t *yt, float *amax,
                                         const void *x_, const float *scale, int R, int C,
                                         int e5m2)
{
    const llmt__bf16 *x = x_;
    if (!d)
        return LLMT_ERR_NULL_POINTER;
    if (R < 0 || C < 0 || C % 4 || (yt && R % 4))
        return BAD(d,
                   "cast_transpose_fp8: R=%d C=%d (C a multiple of 4, R too for the transpose)",
                   R, C);
    if (amax)
        amax[0] = 0.0f;
    if (!R || !C || (!y && !yt && !amax))
        return LLMT_OK;
    NEED(d, "cast_transpose_fp8", x);
    NEED(d, "cast_transpose_fp8", scale);
    const float s = scale[0];
    float m = 0.0f; /* fmaxf skips NaN, as em_amax and the kernel do */
#pragma omp parallel for schedule(static) reduction(max : m)
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            float v = BF(x[(size_t)r * C + c]);
            uint8_t q = llmt__fp8_encode(v * s, e5m2);
            m = fmaxf(m, fabsf(v));
            if (y)
                y[(size_t)r * C + c] = q;
            if (yt)
                yt[(size_t)c * R + r] = q;
        }
    if (amax)
        amax[0] = m;
    return LLMT_OK;
}

static llmt_status em_gelu_bwd_mul(llmt__dev *d, void *dx_, const void *pre_, size_t n)
{
    llmt__bf16 *dx = dx_;
    const llmt__bf16 *pre = pre_;
    if (!d)
        return LLMT_ERR_NULL_POINTER;
    if (!n)
        return LLMT_OK;
    NEED(d, "gelu_bwd_mul", dx);
    NEED(d, "gelu_bwd_mul", pre);
    for (size_t i = 0; i < n; i++)
        dx[i] = TOBF(BF(dx[i]) * gelu_grad(BF(pre[i])));
    return LLMT_OK;
}

static llmt_status em_bias_add(llmt__dev *d, void *x_, const void *bias_, int N,
                               int C)
{
    llmt__bf16 *x = x_;
    const llmt__bf16 *bias = bias_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (N < 0 || C < 0) return BAD(d, "bias_add: N=%d C=%d", N, C);
    if (!N || !C) return LLMT_OK;
    NEED(d, "bias_add", x);
    NEED(d, "bias_add", bias);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < C; j++) {
            llmt__bf16 *p = x + (size_t)i * C + j;
            *p = TOBF(BF(*p) + BF(bias[j]));
        }
    return LLMT_OK;
}

static llmt_status em_gelu_fwd(llmt__dev *d, void *out_, const void *inp_, size_t n)
{
    llmt__bf16 *out = out_;
    const llmt__bf16 *inp = inp_;
    if (!d) return LLMT_ERR_NULL_POINTER;
    if (!n) return LLMT_OK;
    NEED(d, "gelu_fwd", out);
    NEED(d, "gelu_fwd", inp);
    for (size_t i = 0; i < n; i++) out[i] = TOBF(gelu_f(BF(inp[i])));
    return LLMT_OK;
}

/* one log-sum-exp per (sequence, head, position) */
static size_t em_attn_state(int B, int nh, int T) { return (size_t)B * nh * T; }

static const llmt__dev_ops emul_ops;
static llmt_status em_moe_experts(llmt__dev *d, const llmt__moe_xargs *a)
{
    return llmt__moe_op_experts(&emul_ops, d, a); /* moe_ops.c */
}

static const llmt__dev_ops emul_ops = {
    .name = "emulated",
    .store = LLMT_DTYPE_BF16,
    .host_memory = 1,
    .align = 8,
    .attn_state = em_attn_state,
    .create = em_create,
    .destroy = em_destroy,
    .last_error = em_last_error,
    .alloc = em_alloc,
    .free = em_free,
    .host_alloc = em_host_alloc,
    .host_free = em_host_free,
    .mem_stats = em_mem_stats,
    .h2d = em_h2d,
    .d2h = em_d2h,
    .memset0 = em_memset0,
    .d2d = em_d2d,
    .fill_nan = em_fill_nan,
    .sync = em_sync,
    .gemm = em_gemm,
    .embedding_fwd = em_embedding_fwd,
    .embedding_bwd = em_embedding_bwd,
    .layernorm_fwd = em_layernorm_fwd,
    .layernorm_bwd = em_layernorm_bwd,
    .rmsnorm_fwd = em_rmsnorm_fwd,
    .rmsnorm_bwd = em_rmsnorm_bwd,
    .swiglu_fwd = em_swiglu_fwd,
    .swiglu_bwd = em_swiglu_bwd,
    .residual_fwd = em_residual_fwd,
    .bias_bwd = em_bias_bwd,
    .rope = em_rope,
    .attention_fwd = em_attention_fwd,
    .attention_bwd = em_attention_bwd,
    .softmax_xent = em_softmax_xent,
    .adamw = em_adamw,
    .sumsq = em_sumsq,
    .sum = em_sum,
    .f32_to_bf16 = em_f32_to_bf16,
    .amax = em_amax,
    .quantize_fp8 = em_quantize_fp8,
    .cast_transpose_fp8 = em_cast_transpose_fp8,
    .gelu_bwd_mul = em_gelu_bwd_mul,
    .bias_add = em_bias_add,
    .gelu_fwd = em_gelu_fwd,
    .embedding_part_fwd = llmt__vp_embedding_part_fwd_bf16, /* vocab_part.c */
    .embedding_part_bwd = llmt__vp_embedding_part_bwd_bf16,
    .xent_part_max = llmt__vp_xent_part_max_bf16,
    .xent_part_sum = llmt__vp_xent_part_sum_bf16,
    .xent_part_fin = llmt__vp_xent_part_fin_bf16,
    .moe_gather = llmt__moe_gather_bf16, /* moe_ops.c */
    .moe_gather_bwd = llmt__moe_gather_bwd_bf16,
    .moe_combine = llmt__moe_combine_bf16,
    .moe_combine_bwd = llmt__moe_combine_bwd_bf16,
    .moe_experts = em_moe_experts,
    .attn_cp_rope = llmt__attn_cp_rope_bf16, /* attn_cp.c */
    .attn_cp_fwd = llmt__attn_cp_fwd_bf16,
    .attn_cp_delta = llmt__attn_cp_delta_bf16,
    .attn_cp_bwd = llmt__attn_cp_bwd_bf16,
    .attn_cp_rows = llmt__attn_cp_rows_bf16,
};

const llmt__dev_ops *llmt__dev_emul(void) { return &emul_ops; }

static llmt__dev_ops emul_staged_ops;
static pthread_once_t emul_staged_once = PTHREAD_ONCE_INIT;

static void emul_staged_init(void)
{
    emul_staged_ops = emul_ops;
    emul_staged_ops.host_memory = 0;
}

const llmt__dev_ops *llmt__dev_emul_staged(void)
{
    pthread_once(&emul_staged_once, emul_staged_init);
    return &emul_staged_ops;
}
