/* CPU backend of the op table: fp32 reference loops parallelised with
 * OpenMP, GEMMs through OpenBLAS sgemm when the build has it. Loops follow
 * llm.c's train_gpt2.c, which is the reference these were checked against. */
#include <math.h>
#include <string.h>

#include "exec/exec.h"

#ifdef LLMT_HAVE_OPENBLAS
#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef LLMT_HAVE_OPENBLAS
/* OpenBLAS is loaded at first use, not linked: it picks its kernels for
 * the CPU when it is loaded, and the Debian build (0.3.21) runs AVX2
 * (Haswell) kernels on AMD CPUs that have AVX-512, at half the speed of its
 * SkylakeX kernels there (measured: 108 vs 205 GFLOP/s per core on the
 * EPYC of doc/training.md). So, when the CPU has AVX-512 F/BW/DQ/VL and the
 * user did not choose (OPENBLAS_CORETYPE unset), OPENBLAS_CORETYPE is set to
 * SkylakeX for the moment of the dlopen and removed again. A process that
 * already loaded OpenBLAS keeps its own; LLMT_BLAS_LIB names another
 * library with the CBLAS ABI. Without one the plain loops run. */
typedef __typeof__(cblas_sgemm) sgemm_fn;
typedef void set_threads_fn(int);
static sgemm_fn *blas_sgemm;
static set_threads_fn *blas_set_threads;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_load(void)
{
    int forced = 0;
    __builtin_cpu_init();
    const char *ct = getenv("OPENBLAS_CORETYPE");
    if (!(ct && *ct) && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        forced = setenv("OPENBLAS_CORETYPE", "SkylakeX", 1) == 0;
    const char *want = getenv("LLMT_BLAS_LIB");
    void *h = dlopen(want && *want ? want : "libopenblas.so.0",
                     RTLD_NOW | RTLD_GLOBAL);
    if (!h && !(want && *want)) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_GLOBAL);
    if (forced) unsetenv("OPENBLAS_CORETYPE");
    if (!h) return;
    /* through the global scope, so that an LD_PRELOADed wrapper (the
     * benchmark's GEMM timer) sees the calls */
    blas_sgemm = (sgemm_fn *)dlsym(RTLD_DEFAULT, "cblas_sgemm");
    if (!blas_sgemm) blas_sgemm = (sgemm_fn *)dlsym(h, "cblas_sgemm");
    blas_set_threads = (set_threads_fn *)dlsym(h, "openblas_set_num_threads");
    if (blas_set_threads) blas_set_threads(1);
}

static int blas_ready(void)
{
    pthread_once(&blas_once, blas_load);
    return blas_sgemm != NULL;
}

/* C[M,Nc] = alpha op(A) op(B) + beta C, row-major, split along the larger
 * output dimension over the OpenMP team with a single-threaded sgemm per
 * piece. One thread pool (OpenMP's) runs everything: OpenBLAS' own pthreads
 * would spin after each GEMM and fight the OpenMP threads of the next op
 * for the cores. Pieces are whole output blocks, so there is no reduction
 * across threads and the result does not depend on the timing.
 *
 * Only a GEMM outside every parallel region is split, including inactive
 * ones (`omp parallel if (0)`, a team of one): libgomp reuses its idle
 * threads only for regions at level 0 and starts fresh ones with
 * pthread_create for each nested team, and exits them after it, while the
 * level-0 team's idle workers spin for the cores. A dense MoE layer's
 * GEMMs under such an `if` ran 1.4-1.7x slower at 2 threads than at 1
 * (doc/moe.md). */
static void gemm_a(int ta, int tb, int M, int Nc, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE TB = tb ? CblasTrans : CblasNoTrans;
    int nt = 1;
#ifdef _OPENMP
    nt = omp_get_level() > 0 ? 1 : omp_get_max_threads();
#endif
    if (nt <= 1 || (double)M * Nc * K < 262144.0) {
        blas_sgemm(CblasRowMajor, TA, TB, M, Nc, K, alpha, A, lda, B, ldb, beta,
                   C, ldc);
        return;
    }
    int split_n = Nc >= M;
    int D = split_n ? Nc : M;
    int chunk = (D + nt - 1) / nt;
    chunk = (chunk + 15) / 16 * 16;
#pragma omp parallel for schedule(static, 1) num_threads(nt)
    for (int t = 0; t < nt; t++) {
        int d0 = t * chunk;
        if (d0 >= D) continue;
        int dn = D - d0 < chunk ? D - d0 : chunk;
        if (split_n) {
            /* columns d0..d0+dn of C and of op(B) */
            const float *Bp = tb ? B + (size_t)d0 * ldb : B + d0;
            blas_sgemm(CblasRowMajor, TA, TB, M, dn, K, alpha, A, lda, Bp, ldb,
                       beta, C + d0, ldc);
        } else {
            /* rows d0..d0+dn of C and of op(A) */
            const float *Ap = ta ? A + d0 : A + (size_t)d0 * lda;
            blas_sgemm(CblasRowMajor, TA, TB, dn, Nc, K, alpha, Ap, lda, B, ldb,
                       beta, C + (size_t)d0 * ldc, ldc);
        }
    }
}

static void gemm(int ta, int tb, int M, int Nc, int K, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc)
{
    gemm_a(ta, tb, M, Nc, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}
#endif

/* Plain loops for a general GEMM (no OpenBLAS), and the reference the
 * fp32 device table's GEMM is tested against. */
void llmt__cpu_gemm_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
#pragma omp parallel for
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++)
                s += (ta ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k]) *
                     (tb ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n]);
            float *c = C + (size_t)m * ldc + n;
            *c = alpha * s + (beta != 0.0f ? beta * *c : 0.0f);
        }
}

void llmt__cpu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc)
{
#ifdef LLMT_HAVE_OPENBLAS
    if (blas_ready()) {
        gemm_a(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    llmt__cpu_gemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* The plain loops: the reference the GEMM path is tested against, and the
 * backend when the build has no OpenBLAS. */
static void ref_matmul_fwd(float *out, const float *inp, const float *w,
                           const float *bias, int N, int C, int OC)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        for (int o = 0; o < OC; o++) {
            const float *wr = w + (size_t)o * C;
            float s = bias ? bias[o] : 0.0f;
            for (int c = 0; c < C; c++) s += x[c] * wr[c];
            out[(size_t)n * OC + o] = s;
        }
    }
}

static void ref_matmul_bwd(float *dinp, float *dw, float *dbias,
                           const float *dout, const float *inp, const float *w,
                           int N, int C, int OC)
{
    if (dinp) {
#pragma omp parallel for
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                float d = dout[(size_t)n * OC + o];
                const float *wr = w + (size_t)o * C;
                float *di = dinp + (size_t)n * C;
                for (int c = 0; c < C; c++) di[c] += wr[c] * d;
            }
    }
#pragma omp parallel for
    for (int o = 0; o < OC; o++)
        for (int n = 0; n < N; n++) {
            float d = dout[(size_t)n * OC + o];
            const float *x = inp + (size_t)n * C;
            float *dwr = dw + (size_t)o * C;
            for (int c = 0; c < C; c++) dwr[c] += x[c] * d;
        }
}

static void ref_matmul_bwd_full(float *dinp, float *dw, float *dbias,
                                const float *dout, const float *inp,
                                const float *w, int N, int C, int OC)
{
    ref_matmul_bwd(dinp, dw, dbias, dout, inp, w, N, C, OC);
    if (dbias)
        for (int o = 0; o < OC; o++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
            dbias[o] += s;
        }
}

static void cpu_matmul_fwd(float *out, const float *inp, const float *w,
                           const float *bias, int N, int C, int OC)
{
#ifdef LLMT_HAVE_OPENBLAS
    if (blas_ready()) {
        gemm(0, 1, N, OC, C, inp, C, w, C, 0.0f, out, OC);
        if (bias) {
#pragma omp parallel for
            for (int n = 0; n < N; n++)
                for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += bias[o];
        }
        return;
    }
#endif
    ref_matmul_fwd(out, inp, w, bias, N, C, OC);
}

static void cpu_matmul_bwd(float *dinp, float *dw, float *dbias,
                           const float *dout, const float *inp, const float *w,
                           int N, int C, int OC)
{
#ifdef LLMT_HAVE_OPENBLAS
    if (blas_ready()) {
        if (dinp) gemm(0, 0, N, C, OC, dout, OC, w, C, 1.0f, dinp, C);
        gemm(1, 0, OC, C, N, dout, OC, inp, C, 1.0f, dw, C);
    } else
#endif
    ref_matmul_bwd(dinp, dw, dbias, dout, inp, w, N, C, OC);
    if (dbias) {
#pragma omp parallel for
        for (int o = 0; o < OC; o++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
            dbias[o] += s;
        }
    }
}

static void cpu_layernorm_fwd(float *out, float *mean, float *rstd,
                              const float *inp, const float *w, const float *b,
                              int N, int C, float eps)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            v += d * d;
        }
        v /= C;
        float s = 1.0f / sqrtf(v + eps);
        float *o = out + (size_t)n * C;
        if (b)
            for (int c = 0; c < C; c++) o[c] = (s * (x[c] - m)) * w[c] + b[c];
        else
            for (int c = 0; c < C; c++) o[c] = (s * (x[c] - m)) * w[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

static void cpu_layernorm_bwd(float *dinp, float *dw, float *db,
                              const float *dout, const float *inp,
                              const float *w, const float *mean,
                              const float *rstd, int N, int C)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float dnm = 0.0f, dnnm = 0.0f;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dn = w[c] * d[c];
            dnm += dn;
            dnnm += dn * norm;
        }
        dnm /= C;
        dnnm /= C;
        float *di = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            di[c] += (w[c] * d[c] - dnm - norm * dnnm) * s;
        }
    }
#pragma omp parallel for
    for (int c = 0; c < C; c++) {
        float sw = 0.0f, sb = 0.0f;
        for (int n = 0; n < N; n++) {
            float norm = (inp[(size_t)n * C + c] - mean[n]) * rstd[n];
            float d = dout[(size_t)n * C + c];
            sw += norm * d;
            sb += d;
        }
        dw[c] += sw;
        if (db) db[c] += sb;
    }
}

static void cpu_rmsnorm_fwd(float *out, float *rstd, const float *inp,
                            const float *w, int N, int C, float eps)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float s = 1.0f / sqrtf(ss / C + eps);
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] * s) * w[c];
        rstd[n] = s;
    }
}

static void cpu_rmsnorm_bwd(float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w,
                            const float *rstd, int N, int C)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float s = rstd[n], dot = 0.0f;
        for (int c = 0; c < C; c++) dot += w[c] * d[c] * x[c];
        dot /= C;
        float *di = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++)
            di[c] += s * (w[c] * d[c] - x[c] * s * s * dot);
    }
#pragma omp parallel for
    for (int c = 0; c < C; c++) {
        float sw = 0.0f;
        for (int n = 0; n < N; n++)
            sw += dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
        dw[c] += sw;
    }
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

/* tanh through one expf: glibc's tanhf (and the coshf the derivative
 * would need) cost several times an expf, and GELU runs on every FFN
 * activation twice per step. Absolute error ~1e-7, which is what GELU's
 * 0.5 * x * (1 + tanh) sees. */
static inline float fast_tanh(float a)
{
    if (a > 15.0f) return 1.0f;
    if (a < -15.0f) return -1.0f;
    return 1.0f - 2.0f / (expf(2.0f * a) + 1.0f);
}

static void cpu_gelu_fwd(float *out, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + fast_tanh(GELU_SCALE * (x + cube)));
    }
}

static inline float gelu_grad(float x)
{
    float cube = 0.044715f * x * x * x;
    float th = fast_tanh(GELU_SCALE * (x + cube));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) +
           x * 0.5f * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

static void cpu_gelu_bwd(float *dinp, const float *inp, const float *dout,
                         size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dinp[i] += gelu_grad(inp[i]) * dout[i];
}

void llmt__cpu_gelu_grad_mul(float *d, const float *x, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) d[i] = gelu_grad(x[i]) * d[i];
}

static void cpu_swiglu_fwd(float *out, const float *gate, const float *up,
                           size_t n)
{
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void cpu_swiglu_bwd(float *dgate, float *dup, const float *dout,
                           const float *gate, const float *up, size_t n)
{
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float s = 1.0f / (1.0f + expf(-g));
        float silu = g * s;
        dgate[i] += dout[i] * up[i] * (s + g * s * (1.0f - s));
        dup[i] += dout[i] * silu;
    }
}

static void cpu_rope(float *x, int B, int T, int nh, int hd, size_t stride,
                     float theta, int inverse)
{
    int half = hd / 2;
#pragma omp parallel for
    for (int r = 0; r < B * T; r++) {
        float pos = (float)(r % T);
        float *row = x + (size_t)r * stride;
        for (int i = 0; i < half; i++) {
            float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
            float a = pos * inv_freq;
            float c = cosf(a), s = sinf(a);
            if (inverse) s = -s;
            for (int h = 0; h < nh; h++) {
                float *p = row + (size_t)h * hd;
                float x1 = p[i], x2 = p[i + half];
                p[i] = x1 * c - x2 * s;
                p[i + half] = x2 * c + x1 * s;
            }
        }
    }
}

static void cpu_attention_fwd(float *out, float *att, const float *q,
                              const float *k, const float *v, size_t qs, int B,
                              int T, int nh, int nkv, int hd)
{
    int group = nh / nkv;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh; h++) {
                const float *qr = q + (size_t)(b * T + t) * qs + (size_t)h * hd;
                int kh = h / group;
                float *ar = att + (((size_t)b * nh + h) * T + t) * T;
                float mx = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *kr = k + (size_t)(b * T + t2) * qs + (size_t)kh * hd;
                    float s = 0.0f;
                    for (int i = 0; i < hd; i++) s += qr[i] * kr[i];
                    s *= scale;
                    ar[t2] = s;
                    if (s > mx) mx = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    float e = expf(ar[t2] - mx);
                    ar[t2] = e;
                    sum += e;
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 < T; t2++)
                    ar[t2] = t2 <= t ? ar[t2] * inv : 0.0f;
                float *o = out + (size_t)(b * T + t) * nh * hd + (size_t)h * hd;
                for (int i = 0; i < hd; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *vr = v + (size_t)(b * T + t2) * qs + (size_t)kh * hd;
                    float p = ar[t2];
                    for (int i = 0; i < hd; i++) o[i] += p * vr[i];
                }
            }
}

static void cpu_attention_bwd(float *dq, float *dk, float *dv, float *datt,
                              const float *dout, const float *att,
                              const float *q, const float *k, const float *v,
                              size_t qs, int B, int T, int nh, int nkv, int hd)
{
    int group = nh / nkv;
    float scale = 1.0f / sqrtf((float)hd);
    /* One task per (batch, kv head): the query heads of a group write the
     * same dk/dv rows, so they stay in one thread. */
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < nkv; kh++)
            for (int h = kh * group; h < (kh + 1) * group; h++)
                for (int t = 0; t < T; t++) {
                    size_t ai = (((size_t)b * nh + h) * T + t) * T;
                    const float *ar = att + ai;
                    float *dar = datt + ai;
                    const float *qr = q + (size_t)(b * T + t) * qs + (size_t)h * hd;
                    float *dqr = dq + (size_t)(b * T + t) * qs + (size_t)h * hd;
                    const float *dor = dout + (size_t)(b * T + t) * nh * hd + (size_t)h * hd;
                    float dot = 0.0f;
                    for (int t2 = 0; t2 <= t; t2++) {
                        size_t r2 = (size_t)(b * T + t2) * qs + (size_t)kh * hd;
                        const float *vr = v + r2;
                        float *dvr = dv + r2;
                        float s = 0.0f, p = ar[t2];
                        for (int i = 0; i < hd; i++) {
                            s += dor[i] * vr[i];
                            dvr[i] += p * dor[i];
                        }
                        dar[t2] = s;
                        dot += p * s;
                    }
                    for (int t2 = 0; t2 <= t; t2++) {
                        size_t r2 = (size_t)(b * T + t2) * qs + (size_t)kh * hd;
                        float dpre = ar[t2] * (dar[t2] - dot) * scale;
                        const float *kr = k + r2;
                        float *dkr = dk + r2;
                        for (int i = 0; i < hd; i++) {
                            dqr[i] += dpre * kr[i];
                            dkr[i] += dpre * qr[i];
                        }
                    }
                }
}

static void cpu_embedding_fwd(float *out, const int32_t *tok, const float *wte,
                              const float *wpe, int B, int T, int C)
{
#pragma omp parallel for
    for (int r = 0; r < B * T; r++) {
        const float *e = wte + (size_t)tok[r] * C;
        float *o = out + (size_t)r * C;
        if (wpe) {
            const float *p = wpe + (size_t)(r % T) * C;
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        } else {
            memcpy(o, e, sizeof(float) * (size_t)C);
        }
    }
}

static void cpu_embedding_bwd(float *dwte, float *dwpe, const float *dout,
                              const int32_t *tok, int B, int T, int C)
{
    /* Rows of the same token collide: split the work by channels. */
#pragma omp parallel for
    for (int c = 0; c < C; c++)
        for (int r = 0; r < B * T; r++) {
            float d = dout[(size_t)r * C + c];
            dwte[(size_t)tok[r] * C + c] += d;
            if (dwpe) dwpe[(size_t)(r % T) * C + c] += d;
        }
}

static void cpu_softmax_xent_fwd(float *losses, float *logits,
                                 const int32_t *targets, int N, int V, int Vp)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float *l = logits + (size_t)n * Vp;
        float mx = -INFINITY;
        for (int i = 0; i < V; i++)
            if (l[i] > mx) mx = l[i];
        double sum = 0.0;
        for (int i = 0; i < V; i++) {
            float e = expf(l[i] - mx);
            l[i] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int i = 0; i < V; i++) l[i] *= inv;
        for (int i = V; i < Vp; i++) l[i] = 0.0f;
        int tg = targets ? targets[n] : -1;
        losses[n] = tg >= 0 ? -logf(l[tg]) : 0.0f;
    }
}

static void cpu_softmax_xent_bwd(float *probs, const int32_t *targets,
                                 float dloss, int N, int V, int Vp)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float *p = probs + (size_t)n * Vp;
        int tg = targets[n];
        if (tg < 0) {
            memset(p, 0, sizeof(float) * (size_t)Vp);
            continue;
        }
        for (int i = 0; i < V; i++) p[i] *= dloss;
        p[tg] -= dloss;
        for (int i = V; i < Vp; i++) p[i] = 0.0f;
    }
}

static void cpu_adamw(float *param, const float *grad, float *m, float *v,
                      size_t n, float lr, float beta1, float beta2, float eps,
                      float wd, float grad_scale, int64_t t)
{
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mh = mi / bc1, vh = vi / bc2;
        param[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * param[i]);
    }
}

/* Fixed blocks summed in a fixed order: an OpenMP reduction combines the
 * threads' partials in arrival order, which changes the last bits of the
 * grad norm (and so the clip scale) from run to run. */
#define SUMSQ_BLOCK 65536
static double cpu_sumsq(const float *x, size_t n)
{
    size_t nb = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    double part[256];
    double total = 0.0;
    for (size_t b0 = 0; b0 < nb; b0 += 256) {
        size_t cnt = nb - b0 < 256 ? nb - b0 : 256;
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < cnt; j++) {
            size_t lo = (b0 + j) * SUMSQ_BLOCK;
            size_t hi = lo + SUMSQ_BLOCK < n ? lo + SUMSQ_BLOCK : n;
            double s = 0.0;
            for (size_t i = lo; i < hi; i++) s += (double)x[i] * x[i];
            part[j] = s;
        }
        for (size_t j = 0; j < cnt; j++) total += part[j];
    }
    return total;
}

static void cpu_residual_fwd(float *out, const float *a, const float *b,
                             size_t n)
{
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* Large fills and copies (the gradients: 4 bytes per parameter) are split
 * over the team; small ones stay on the calling thread. */
#define PAR_MIN ((size_t)1 << 18)
static void cpu_zero(float *x, size_t n)
{
    if (n < PAR_MIN) {
        memset(x, 0, n * sizeof(float));
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < n; b += PAR_MIN)
        memset(x + b, 0, (n - b < PAR_MIN ? n - b : PAR_MIN) * sizeof(float));
}
static void cpu_copy(float *d, const float *s, size_t n)
{
    if (n < PAR_MIN) {
        memcpy(d, s, n * sizeof(float));
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < n; b += PAR_MIN)
        memcpy(d + b, s + b, (n - b < PAR_MIN ? n - b : PAR_MIN) * sizeof(float));
}
static void cpu_add(float *d, const float *s, size_t n)
{
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) d[i] += s[i];
}

static const llmt__exec_ops cpu_ops = {
    .name = "cpu",
    .matmul_fwd = cpu_matmul_fwd,
    .matmul_bwd = cpu_matmul_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .rope = cpu_rope,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .softmax_xent_fwd = cpu_softmax_xent_fwd,
    .softmax_xent_bwd = cpu_softmax_xent_bwd,
    .adamw = cpu_adamw,
    .sumsq = cpu_sumsq,
    .residual_fwd = cpu_residual_fwd,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .add = cpu_add,
};

const llmt__exec_ops *llmt__exec_cpu(void) { return &cpu_ops; }

/* The same table with the plain-loop matmuls (tests compare against it). */
const llmt__exec_ops *llmt__exec_cpu_ref(void)
{
    static llmt__exec_ops ref;
    ref = cpu_ops;
    ref.name = "cpu-ref";
    ref.matmul_fwd = ref_matmul_fwd;
    ref.matmul_bwd = ref_matmul_bwd_full;
    return &ref;
}

void llmt__exec_cpu_set_threads(int threads)
{
#ifdef LLMT_HAVE_OPENBLAS
    /* GEMMs are split over the OpenMP team (see gemm above): OpenBLAS
     * itself runs single-threaded inside each piece (set by blas_load). */
    blas_ready();
#endif
    if (threads <= 0) return;
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
}
