/* The fp32 CPU backend of the device op table (lib/exec/dev_cpu.c) against
 * plain references on small awkward shapes: the GEMM (every transpose,
 * leading dimensions, alpha/beta, every epilogue) against the plain loops
 * of llmt__cpu_gemm_ref; the other ops against the fp32 op table
 * (llmt__exec_cpu_ref) as the engine used it before, including what the
 * device table overwrites (attention's input gradients) where the fp32
 * table accumulated; the allocator's statistics; fp8 refused with a
 * message. Tolerances: relative L2 1e-5 where only the order of fp32 sums
 * can differ (OpenBLAS vs loops), exact equality where the same kernel
 * runs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmtrain.h"
#include "check.h"
#include "exec/dev.h"
#include "exec/exec.h"

static const llmt__dev_ops *X;
static const llmt__exec_ops *R;
static llmt__dev *D;

static uint32_t rng = 777u;
static float urand(void)
{
    rng = rng * 1103515245u + 12345u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}
static float *rnd(size_t n)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = urand();
    return p;
}
static double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static float gelu_ref(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

static void test_gemm(void)
{
    const int M = 13, N = 37, K = 70, ld = 80;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int epi = 0; epi <= 5; epi++) {
                float *A = rnd((size_t)ld * ld), *B = rnd((size_t)ld * ld);
                float *C = rnd((size_t)M * ld), *Cr = malloc(sizeof(float) * M * ld);
                float *bias = rnd(N), *aux = rnd((size_t)M * N), *auxr = malloc(sizeof(float) * M * N);
                float bg[13], bgr[13];
                memcpy(Cr, C, sizeof(float) * M * ld);
                memcpy(auxr, aux, sizeof(float) * M * N);
                int gelu = epi == LLMT_GEMM_EPI_GELU || epi == LLMT_GEMM_EPI_GELU_BIAS ||
                           epi == LLMT_GEMM_EPI_DGELU;
                int ldc = gelu ? N : ld;
                float beta = epi == 0 ? 0.5f : epi == 5 ? 1.0f : 0.0f;
                llmt__gemm_args g;
                memset(&g, 0, sizeof g);
                g.trans_a = ta, g.trans_b = tb, g.M = M, g.N = N, g.K = K;
                g.A = A, g.lda = ld, g.B = B, g.ldb = ld, g.C = C, g.ldc = ldc;
                g.ab_type = g.c_type = LLMT_GEMM_F32;
                g.alpha = epi == 0 ? 0.75f : 1.0f, g.beta = beta;
                g.epi = (llmt__gemm_epi)epi, g.bias = bias, g.aux = aux, g.bias_grad = bg;
                CHECK_STATUS(X->gemm(D, &g), LLMT_OK);
                llmt__cpu_gemm_ref(ta, tb, M, N, K, g.alpha, A, ld, B, ld, beta, Cr, ldc);
                for (int m = 0; m < M; m++) {
                    float s = 0.0f;
                    for (int k = 0; k < K; k++) s += ta ? A[(size_t)k * ld + m] : A[(size_t)m * ld + k];
                    bgr[m] = s;
                    for (int n = 0; n < N; n++) {
                        float *c = Cr + (size_t)m * ldc + n;
                        if (epi == 1 || epi == 3) *c += bias[n];
                        if (epi == 3) auxr[(size_t)m * N + n] = *c;
                        if (epi == 2 || epi == 3) *c = gelu_ref(*c);
                        if (epi == 4) {
                            float x = auxr[(size_t)m * N + n], h = 1e-2f;
                            *c *= (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h);
                        }
                    }
                }
                double e = rel_l2(C, Cr, (size_t)M * ldc);
                if (!(e < (epi == 4 ? 1e-3 : 1e-5)))
                    fprintf(stderr, "gemm ta %d tb %d epi %d: rel err %g\n", ta, tb, epi, e);
                CHECK(e < (epi == 4 ? 1e-3 : 1e-5));
                if (epi == 3) CHECK(rel_l2(aux, auxr, (size_t)M * N) < 1e-5);
                if (epi == 5) CHECK(rel_l2(bg, bgr, M) < 1e-5);
                if (!gelu) /* columns past N in each ldc row are left alone */
                    for (int m = 0; m < M; m++)
                        CHECK(memcmp(C + (size_t)m * ld + N, Cr + (size_t)m * ld + N,
                                     sizeof(float) * (ld - N)) == 0);
                free(A), free(B), free(C), free(Cr), free(bias), free(aux), free(auxr);
            }
    llmt__gemm_args g;
    memset(&g, 0, sizeof g);
    g.M = g.N = g.K = 1;
    g.ab_type = LLMT_GEMM_E4M3;
    CHECK_STATUS(X->gemm(D, &g), LLMT_ERR_UNSUPPORTED);
    CHECK(strstr(X->last_error(D), "fp32") != NULL);
}

/* Attention over a GQA layout with row stride qs: output and probabilities
 * as the fp32 table computes them; the backward OVERWRITES dq/dk/dv (the
 * fp32 table accumulates) and leaves the row padding alone. */
static void test_attention(void)
{
    const int B = 2, T = 7, nh = 4, nkv = 2, hd = 6;
    size_t qs = (size_t)(nh + 2 * nkv) * hd + 3, rows = (size_t)B * T;
    float *qkv = rnd(rows * qs), *dout = rnd(rows * nh * hd);
    float *q = qkv, *k = q + nh * hd, *v = k + nkv * hd;
    size_t S = X->attn_state(B, nh, T);
    CHECK(S == (size_t)B * nh * T * T);
    float *out = malloc(sizeof(float) * rows * nh * hd), *outr = malloc(sizeof(float) * rows * nh * hd);
    float *st = malloc(sizeof(float) * S), *str = malloc(sizeof(float) * S), *dat = malloc(sizeof(float) * S);
    CHECK_STATUS(X->attention_fwd(D, out, st, q, k, v, qs, B, T, nh, nkv, hd), LLMT_OK);
    R->attention_fwd(outr, str, q, k, v, qs, B, T, nh, nkv, hd);
    CHECK(memcmp(out, outr, sizeof(float) * rows * nh * hd) == 0);
    CHECK(memcmp(st, str, sizeof(float) * S) == 0);
    float *d = rnd(rows * qs), *dr = calloc(rows * qs, sizeof(float));
    float pad = d[qs - 1];
    for (size_t r = 0; r < rows; r++) memcpy(dr + r * qs + qs - 3, d + r * qs + qs - 3, 3 * sizeof(float));
    CHECK_STATUS(X->attention_bwd(D, d, d + nh * hd, d + (nh + nkv) * hd, dout, out, st, q, k,
                                  v, qs, B, T, nh, nkv, hd),
                 LLMT_OK);
    R->attention_bwd(dr, dr + nh * hd, dr + (nh + nkv) * hd, dat, dout, str, q, k, v, qs, B, T,
                     nh, nkv, hd);
    CHECK(memcmp(d, dr, sizeof(float) * rows * qs) == 0);
    CHECK(d[qs - 1] == pad);
    free(qkv), free(dout), free(out), free(outr), free(st), free(str), free(dat), free(d), free(dr);
}

/* softmax cross-entropy: the fp32 table's forward then backward, fused. */
static void test_xent(void)
{
    const int N = 5, V = 11, Vp = 16;
    float *l = rnd((size_t)N * Vp), *lr = malloc(sizeof(float) * N * Vp);
    memcpy(lr, l, sizeof(float) * N * Vp);
    int32_t tg[5] = {3, -1, 10, 0, 7};
    float loss[5], lossr[5];
    CHECK_STATUS(X->softmax_xent(D, loss, l, tg, N, V, Vp, 0.25f), LLMT_OK);
    R->softmax_xent_fwd(lossr, lr, tg, N, V, Vp);
    R->softmax_xent_bwd(lr, tg, 0.25f, N, V, Vp);
    CHECK(memcmp(loss, lossr, sizeof loss) == 0);
    CHECK(memcmp(l, lr, sizeof(float) * N * Vp) == 0);
    CHECK(loss[1] == 0.0f);
    free(l), free(lr);
}

static void test_misc(void)
{
    /* AdamW: the fp32 table's update; a separate compute copy is refused */
    size_t n = 1000;
    float *w = rnd(n), *wr = malloc(sizeof(float) * n), *g = rnd(n);
    float *m = calloc(n, 4), *v = calloc(n, 4), *mr = calloc(n, 4), *vr = calloc(n, 4);
    memcpy(wr, w, sizeof(float) * n);
    CHECK_STATUS(X->adamw(D, w, NULL, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3),
                 LLMT_OK);
    R->adamw(wr, g, mr, vr, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    CHECK(memcmp(w, wr, sizeof(float) * n) == 0 && memcmp(v, vr, sizeof(float) * n) == 0);
    CHECK_STATUS(X->adamw(D, w, wr, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3),
                 LLMT_ERR_INVALID_ARGUMENT);
    /* sums in double, one fp32 result */
    const float *xs[2] = {w, g};
    size_t ns[2] = {n, 10};
    float out;
    CHECK_STATUS(X->sumsq(D, &out, xs, ns, 2), LLMT_OK);
    CHECK(out == (float)(R->sumsq(w, n) + R->sumsq(g, 10)));
    /* bias gradient: column sums, accumulated */
    float db[3] = {1, 2, 3}, dout[6] = {1, 2, 3, 4, 5, 6};
    CHECK_STATUS(X->bias_bwd(D, db, dout, 2, 3), LLMT_OK);
    CHECK(db[0] == 6 && db[1] == 9 && db[2] == 12);
    /* layernorm without bias = with a zero bias; no bias gradient */
    float x[12], wt[6], zb[6] = {0}, o1[12], o2[12], mu[2], rs[2];
    for (int i = 0; i < 12; i++) x[i] = urand();
    for (int i = 0; i < 6; i++) wt[i] = urand();
    CHECK_STATUS(X->layernorm_fwd(D, o1, mu, rs, x, wt, NULL, 2, 6, 1e-5f), LLMT_OK);
    R->layernorm_fwd(o2, mu, rs, x, wt, zb, 2, 6, 1e-5f);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
    float di[12] = {0}, dw[6] = {0};
    CHECK_STATUS(X->layernorm_bwd(D, di, dw, NULL, o1, x, wt, mu, rs, 2, 6), LLMT_OK);
    /* memory: statistics, fresh blocks 64-byte aligned */
    size_t use0, peak0, use1, peak1;
    X->mem_stats(D, &use0, &peak0);
    void *p = NULL;
    CHECK_STATUS(X->alloc(D, &p, 1000), LLMT_OK);
    CHECK(((uintptr_t)p & 63) == 0);
    X->mem_stats(D, &use1, &peak1);
    CHECK(use1 == use0 + 1000 && peak1 >= use1);
    X->free(D, p);
    X->mem_stats(D, &use1, &peak1);
    CHECK(use1 == use0);
    /* fp8 is not here, and says so */
    uint8_t q8[4];
    float sc = 1.0f;
    CHECK_STATUS(X->quantize_fp8(D, q8, w, &sc, 4, 0), LLMT_ERR_UNSUPPORTED);
    CHECK(strstr(X->last_error(D), "fp8") != NULL);
    free(w), free(wr), free(g), free(m), free(v), free(mr), free(vr);
}

int main(void)
{
    X = llmt__dev_cpu();
    R = llmt__exec_cpu_ref();
    CHECK(X && X->store == LLMT_DTYPE_FP32 && X->host_memory && X->align == 1);
    CHECK(llmt__dev_emul()->store == LLMT_DTYPE_BF16);
    llmt__dev_opts o = {0, 1};
    char err[256] = "";
    CHECK_STATUS(X->create(&o, &D, err, sizeof err), LLMT_OK);
    if (!D) return 1;
    test_gemm();
    test_attention();
    test_xent();
    test_misc();
    X->destroy(D);
    return check_exit("dev-cpu");
}
