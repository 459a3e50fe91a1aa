/* The host emulation of the device op table (lib/exec/dev_emul.c) against
 * the fp32 CPU op table (llmt__exec_cpu_ref) on small awkward shapes: every
 * op's values, what it overwrites and what it accumulates into, the bf16
 * roundings, strides and padding it must leave alone, and the allocator's
 * statistics.
 *
 * Inputs are bf16-representable, so the fp32 reference sees exactly what the
 * emulation reads. Tolerances are relative L2 errors:
 *   TOL_BF  1e-2  a bf16 output: one rounding (relative 2^-9 on average,
 *                 2^-8 at worst per element) over fp32 math; a little more
 *                 where a bf16-rounded intermediate feeds the result (the
 *                 attention backward's D = rowsum(dout * out) reads out in
 *                 bf16).
 *   TOL_F32 1e-5  an fp32 output computed from the same bf16 inputs: only
 *                 the order of fp32 sums differs (K <= 16 terms here).
 * Exact equality where nothing is rounded (copies, padding, zeros). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "exec/fp8.h"
#include "exec/exec.h"

#define TOL_BF 1e-2
#define TOL_F32 1e-5

static const llmt__dev_ops *X;
static const llmt__exec_ops *R;
static llmt__dev *D;

/* ---- helpers ------------------------------------------------------------ */

static uint32_t rng = 12345u;
static float urand(void) /* [-1, 1) */
{
    rng = rng * 1103515245u + 12345u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}
/* n random bf16 values, also as floats */
static void fill_bf(float *f, llmt__bf16 *b, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) {
        b[i] = llmt__f32_to_bf16(urand() * scale);
        f[i] = llmt__bf16_to_f32(b[i]);
    }
}
static void fill_f(float *f, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) f[i] = urand() * scale;
}
static void to_f(float *f, const llmt__bf16 *b, size_t n)
{
    for (size_t i = 0; i < n; i++) f[i] = llmt__bf16_to_f32(b[i]);
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    CHECK_STATUS(X->alloc(D, &p, bytes), LLMT_OK);
    return p;
}
static void *dup_(const void *h, size_t bytes)
{
    void *p = dalloc(bytes);
    if (p) CHECK_STATUS(X->h2d(D, p, h, bytes), LLMT_OK);
    return p;
}
static void down(void *h, const void *p, size_t bytes)
{
    CHECK_STATUS(X->d2h(D, h, p, bytes), LLMT_OK);
}
/* a device bf16 array read back as floats */
static void down_bf(float *f, const llmt__bf16 *p, size_t n)
{
    llmt__bf16 *b = malloc(n * 2);
    down(b, p, n * 2);
    to_f(f, b, n);
    free(b);
}

static double rel_l2(const float *a, const float *ref, size_t n)
{
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double dd = (double)a[i] - ref[i];
        e += dd * dd;
        r += (double)ref[i] * ref[i];
    }
    if (e != e) return INFINITY; /* NaN: fails every tolerance */
    return sqrt(e) / (r > 0 ? sqrt(r) : 1.0);
}

static int reported;
static void report(const char *name, double err, double tol)
{
    int ok = err <= tol;
    CHECK(ok);
    reported++;
    printf("%-62s %9.2e  (tol %.0e) %s\n", name, err, tol, ok ? "ok" : "FAIL");
}
static void cmp(const char *name, const float *a, const float *ref, size_t n, double tol)
{
    report(name, rel_l2(a, ref, n), tol);
}

/* ---- allocator and copies ----------------------------------------------- */

static void test_memory(void)
{
    size_t in_use = 1, peak = 1;
    X->mem_stats(D, &in_use, &peak);
    CHECK_EQ_INT(in_use, 0);
    CHECK_EQ_INT(peak, 0);
    void *a = dalloc(100), *b = dalloc(1000), *c = NULL;
    CHECK(((uintptr_t)a & 63) == 0 && ((uintptr_t)b & 63) == 0);
    X->mem_stats(D, &in_use, &peak);
    CHECK_EQ_INT(in_use, 1100);
    CHECK_EQ_INT(peak, 1100);
    /* fresh memory is NaN in both float types (0xFF bytes) */
    const unsigned char *pb = b;
    int all_ff = 1;
    for (int i = 0; i < 1000; i++) all_ff &= pb[i] == 0xff;
    CHECK(all_ff);
    CHECK(isnan(((const float *)b)[0]) && isnan(llmt__bf16_to_f32(((const llmt__bf16 *)b)[1])));
    X->free(D, a);
    X->mem_stats(D, &in_use, &peak);
    CHECK_EQ_INT(in_use, 1000);
    CHECK_EQ_INT(peak, 1100);
    c = dalloc(50);
    X->mem_stats(D, &in_use, &peak);
    CHECK_EQ_INT(in_use, 1050);
    CHECK_EQ_INT(peak, 1100); /* below the old peak */
    a = dalloc(200);
    X->mem_stats(D, &in_use, &peak);
    CHECK_EQ_INT(in_use, 1250);
    CHECK_EQ_INT(peak, 1250);
    /* copies and memset0 */
    unsigned char h[1000], back[1000];
    for (int i = 0; i < 1000; i++) h[i] = (unsigned char)(i * 7);
    CHECK_STATUS(X->h2d(D, b, h, 1000), LLMT_OK);
    down(back, b, 1000);
    CHECK(memcmp(h, back, 1000) == 0);
    CHECK_STATUS(X->memset0(D, (char *)b + 10, 20), LLMT_OK);
    down(back, b, 1000);
    int zeros = 1;
    for (int i = 10; i < 30; i++) zeros &= back[i] == 0;
    CHECK(zeros && back[9] == h[9] && back[30] == h[30]);
    CHECK_STATUS(X->sync(D), LLMT_OK);
    X->free(D, a);
    X->free(D, b);
    X->free(D, c);
    X->free(D, NULL); /* no-op */
    X->mem_stats(D, &in_use, &peak);
    CHECK_EQ_INT(in_use, 0);
    CHECK_EQ_INT(peak, 1250);
    /* pinned host memory is not device memory */
    void *hp = NULL;
    CHECK_STATUS(X->host_alloc(D, &hp, 4096), LLMT_OK);
    CHECK(hp != NULL);
    if (hp) memset(hp, 1, 4096);
    X->mem_stats(D, &in_use, &peak);
    CHECK_EQ_INT(in_use, 0);
    X->host_free(D, hp);
    /* a zero-byte block is a valid, distinct pointer */
    void *z = dalloc(0);
    CHECK(z != NULL);
    X->free(D, z);
    printf("%-62s %s\n", "allocator: stats, alignment, NaN fill, copies", "done");
}

/* ---- GEMM --------------------------------------------------------------- */

/* op(A) [M,K] with A stored row-major [M,K] (or [K,M] when ta), leading dim
 * lda, into a packed float matrix */
static void op_mat(float *out, const float *S, int rows, int cols, int trans, int ld)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            out[(size_t)i * cols + j] = trans ? S[(size_t)j * ld + i] : S[(size_t)i * ld + j];
}

/* Random bf16 [rows, ld] with columns >= cols set to NaN (padding that must
 * not be read). */
static void fill_padded(float *f, llmt__bf16 *b, int rows, int cols, int ld)
{
    fill_bf(f, b, (size_t)rows * ld, 1.0f);
    for (int i = 0; i < rows; i++)
        for (int j = cols; j < ld; j++) {
            b[(size_t)i * ld + j] = 0xffff;
            f[(size_t)i * ld + j] = NAN;
        }
}

static void test_gemm(int M, int N, int K, int ta, int tb, int cf32, llmt__gemm_epi epi,
                      float alpha, float beta, int pad)
{
    char name[128];
    /* stored shapes: A [M,K] or [K,M]; B [K,N] or [N,K]; padded leading dims */
    int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    size_t na = (size_t)ar * lda, nb = (size_t)br * ldb, nc = (size_t)M * ldc, nx = (size_t)M * N;
    float *Af = malloc(na * 4), *Bf = malloc(nb * 4), *C0 = malloc(nc * 4), *bias = malloc(N * 4);
    float *opA = malloc((size_t)M * K * 4), *Wt = malloc((size_t)N * K * 4);
    float *mm = malloc(nx * 4), *ref = malloc(nx * 4), *aux = malloc(nx * 4), *got = malloc(nc * 4);
    float *zero = calloc(nx, 4), *auxref = malloc(nx * 4);
    llmt__bf16 *Ab = malloc(na * 2), *Bb = malloc(nb * 2), *C0b = malloc(nc * 2),
               *biasb = malloc(N * 2), *auxb = malloc(nx * 2);
    fill_padded(Af, Ab, ar, ac, lda);
    fill_padded(Bf, Bb, br, bc, ldb);
    fill_bf(C0, C0b, nc, 1.0f);
    fill_bf(bias, biasb, N, 1.0f);
    fill_bf(aux, auxb, nx, 2.0f);
    /* reference: the fp32 table's matmul (out = inp @ w^T) on op(A), op(B)^T */
    op_mat(opA, Af, M, K, ta, lda);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++)
            Wt[(size_t)j * K + k] = tb ? Bf[(size_t)j * ldb + k] : Bf[(size_t)k * ldb + j];
    R->matmul_fwd(mm, opA, Wt, NULL, M, K, N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            size_t x = (size_t)i * N + j;
            float v = alpha * mm[x] + beta * C0[(size_t)i * ldc + j];
            if (epi == LLMT_GEMM_EPI_BIAS || epi == LLMT_GEMM_EPI_GELU_BIAS) v += bias[j];
            ref[x] = v;
        }
    if (epi == LLMT_GEMM_EPI_GELU_BIAS) memcpy(auxref, ref, nx * 4);
    if (epi == LLMT_GEMM_EPI_GELU || epi == LLMT_GEMM_EPI_GELU_BIAS) R->gelu_fwd(ref, ref, nx);
    if (epi == LLMT_GEMM_EPI_DGELU) { /* zero += gelu'(aux) * acc */
        R->gelu_bwd(zero, aux, ref, nx);
        memcpy(ref, zero, nx * 4);
    }

    /* device side: C (and bias, aux) in c_type; beta 0 leaves C's NaN fill */
    void *dA = dup_(Ab, na * 2), *dB = dup_(Bb, nb * 2), *dC, *dbias = NULL, *daux = NULL,
         *dbg = NULL;
    size_t cel = cf32 ? 4 : 2;
    dC = beta != 0.0f ? dup_(cf32 ? (void *)C0 : (void *)C0b, nc * cel) : dalloc(nc * cel);
    if (epi == LLMT_GEMM_EPI_BIAS || epi == LLMT_GEMM_EPI_GELU_BIAS)
        dbias = cf32 ? dup_(bias, N * 4) : dup_(biasb, N * 2);
    if (epi == LLMT_GEMM_EPI_GELU_BIAS) daux = dalloc(nx * cel);
    if (epi == LLMT_GEMM_EPI_DGELU) /* bf16 values: exact in either type */
        daux = cf32 ? dup_(aux, nx * 4) : dup_(auxb, nx * 2);
    if (epi == LLMT_GEMM_EPI_BGRAD) dbg = dalloc(M * cel);
    llmt__gemm_args g;
    memset(&g, 0, sizeof g);
    g.trans_a = ta; g.trans_b = tb; g.M = M; g.N = N; g.K = K;
    g.A = dA; g.lda = pad ? lda : 0;
    g.B = dB; g.ldb = pad ? ldb : 0;
    g.C = dC; g.ldc = pad ? ldc : 0;
    g.ab_type = LLMT_GEMM_BF16;
    g.c_type = cf32 ? LLMT_GEMM_F32 : LLMT_GEMM_BF16;
    g.alpha = alpha; g.beta = beta; g.epi = epi;
    g.bias = dbias; g.aux = daux; g.bias_grad = dbg;
    snprintf(name, sizeof name, "gemm %dx%dx%d t=%d%d %s epi=%d a=%g b=%g pad=%d", M, N, K, ta,
             tb, cf32 ? "f32 " : "bf16", (int)epi, alpha, beta, pad);
    llmt_status st = X->gemm(D, &g);
    CHECK_STATUS(st, LLMT_OK);
    if (st != LLMT_OK) printf("%s: %s\n", name, X->last_error(D));
    /* C, unpacked from ldc; its padding untouched */
    float *gp = malloc(nx * 4);
    int pad_ok = 1;
    if (cf32) {
        down(got, dC, nc * 4);
    } else {
        llmt__bf16 *cb = malloc(nc * 2);
        down(cb, dC, nc * 2);
        for (size_t i = 0; i < nc; i++) {
            int j = (int)(i % ldc);
            if (j >= N) pad_ok &= cb[i] == (beta != 0.0f ? C0b[i] : 0xffff);
        }
        to_f(got, cb, nc);
        free(cb);
    }
    for (int i = 0; i < M; i++) {
        memcpy(gp + (size_t)i * N, got + (size_t)i * ldc, N * 4);
        if (cf32)
            for (int j = N; j < ldc; j++) {
                float v = got[(size_t)i * ldc + j];
                pad_ok &= beta != 0.0f ? v == C0[(size_t)i * ldc + j] : isnan(v);
            }
    }
    CHECK(pad_ok);
    cmp(name, gp, ref, nx, cf32 ? TOL_F32 : TOL_BF);
    if (epi == LLMT_GEMM_EPI_GELU_BIAS) {
        float *ga = malloc(nx * 4);
        if (cf32) down(ga, daux, nx * 4); else down_bf(ga, daux, nx);
        snprintf(name, sizeof name, "gemm GELU_BIAS pre-activation aux %s",
                 cf32 ? "f32 " : "bf16");
        cmp(name, ga, auxref, nx, cf32 ? TOL_F32 : TOL_BF);
        /* the aux store rounds like C: bf16 aux holds bf16 values exactly */
        free(ga);
    }
    if (epi == LLMT_GEMM_EPI_BGRAD) {
        float *bg = malloc(M * 4), *bgr = malloc(M * 4);
        for (int i = 0; i < M; i++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += opA[(size_t)i * K + k];
            bgr[i] = (float)s;
        }
        if (cf32) down(bg, dbg, M * 4); else down_bf(bg, dbg, M);
        cmp("gemm BGRAD bias_grad[M] = rowsum op(A)", bg, bgr, M, cf32 ? TOL_F32 : TOL_BF);
        free(bg); free(bgr);
    }
    X->free(D, dA); X->free(D, dB); X->free(D, dC);
    X->free(D, dbias); X->free(D, daux); X->free(D, dbg);
    free(Af); free(Bf); free(C0); free(bias); free(opA); free(Wt); free(mm); free(ref);
    free(aux); free(got); free(zero); free(auxref); free(gp);
    free(Ab); free(Bb); free(C0b); free(biasb); free(auxb);
}

static void test_gemm_errors(void)
{
    llmt__bf16 *a = dalloc(64), *b = dalloc(64), *c = dalloc(64);
    llmt__gemm_args g;
    memset(&g, 0, sizeof g);
    g.M = g.N = g.K = 2;
    g.A = a; g.B = b; g.C = c; g.alpha = 1.0f;
    g.ab_type = LLMT_GEMM_E4M3; /* fp8 without its scales */
    g.trans_b = 1;
    CHECK_STATUS(X->gemm(D, &g), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(X->last_error(D), "emulated: gemm: fp8 needs") != NULL);
    g.ab_type = LLMT_GEMM_BF16;
    g.M = 0;
    CHECK_STATUS(X->gemm(D, &g), LLMT_ERR_INVALID_ARGUMENT);
    g.M = 2;
    g.epi = LLMT_GEMM_EPI_BIAS;
    CHECK_STATUS(X->gemm(D, &g), LLMT_ERR_NULL_POINTER);
    g.epi = LLMT_GEMM_EPI_DGELU;
    CHECK_STATUS(X->gemm(D, &g), LLMT_ERR_NULL_POINTER);
    g.epi = LLMT_GEMM_EPI_NONE;
    g.lda = 1; /* below K = 2 */
    CHECK_STATUS(X->gemm(D, &g), LLMT_ERR_INVALID_ARGUMENT);
    g.lda = 0;
    CHECK_STATUS(X->gemm(D, &g), LLMT_OK);
    X->free(D, a); X->free(D, b); X->free(D, c);
}

/* ---- embedding ------------------------------------------------------------ */

static void test_embedding(int B, int T, int C, int V, int with_wpe)
{
    char name[128];
    int BT = B * T;
    int32_t *tok = malloc(BT * 4);
    for (int i = 0; i < BT; i++) {
        rng = rng * 1103515245u + 12345u;
        tok[i] = (int32_t)((rng >> 8) % (unsigned)V);
    }
    tok[0] = V - 1;
    if (BT > 2) tok[2] = tok[1]; /* a repeated token accumulates twice */
    float *wte = malloc((size_t)V * C * 4), *wpe = malloc((size_t)T * C * 4);
    llmt__bf16 *wteb = malloc((size_t)V * C * 2), *wpeb = malloc((size_t)T * C * 2);
    fill_bf(wte, wteb, (size_t)V * C, 1.0f);
    fill_bf(wpe, wpeb, (size_t)T * C, 1.0f);
    float *ref = malloc((size_t)BT * C * 4), *got = malloc((size_t)BT * C * 4);
    R->embedding_fwd(ref, tok, wte, with_wpe ? wpe : NULL, B, T, C);
    int32_t *dtok = dup_(tok, BT * 4);
    llmt__bf16 *dwte = dup_(wteb, (size_t)V * C * 2), *dwpe = dup_(wpeb, (size_t)T * C * 2);
    llmt__bf16 *dout = dalloc((size_t)BT * C * 2);
    CHECK_STATUS(X->embedding_fwd(D, dout, dtok, dwte, with_wpe ? dwpe : NULL, B, T, C), LLMT_OK);
    down_bf(got, dout, (size_t)BT * C);
    snprintf(name, sizeof name, "embedding_fwd B=%d T=%d C=%d V=%d%s", B, T, C, V,
             with_wpe ? " +wpe" : "");
    /* without wpe it is a copy: exact */
    cmp(name, got, ref, (size_t)BT * C, with_wpe ? TOL_BF : 0.0);

    /* backward accumulates into fp32 gradients that start nonzero */
    float *g = malloc((size_t)BT * C * 4), *gw = malloc((size_t)V * C * 4),
          *gp = malloc((size_t)T * C * 4), *gw2 = malloc((size_t)V * C * 4),
          *gp2 = malloc((size_t)T * C * 4);
    llmt__bf16 *gb = malloc((size_t)BT * C * 2);
    fill_bf(g, gb, (size_t)BT * C, 1.0f);
    fill_f(gw, (size_t)V * C, 1.0f);
    fill_f(gp, (size_t)T * C, 1.0f);
    float *dgw = dup_(gw, (size_t)V * C * 4), *dgp = dup_(gp, (size_t)T * C * 4);
    llmt__bf16 *dg = dup_(gb, (size_t)BT * C * 2);
    if (with_wpe) {
        R->embedding_bwd(gw, gp, g, tok, B, T, C);
    } else {
        R->embedding_bwd(gw, NULL, g, tok, B, T, C);
    }
    CHECK_STATUS(X->embedding_bwd(D, dgw, with_wpe ? dgp : NULL, dg, dtok, B, T, C), LLMT_OK);
    down(gw2, dgw, (size_t)V * C * 4);
    down(gp2, dgp, (size_t)T * C * 4);
    snprintf(name, sizeof name, "embedding_bwd dwte += (B=%d T=%d)", B, T);
    cmp(name, gw2, gw, (size_t)V * C, TOL_F32);
    snprintf(name, sizeof name, "embedding_bwd dwpe %s", with_wpe ? "+=" : "(NULL: untouched)");
    cmp(name, gp2, gp, (size_t)T * C, with_wpe ? TOL_F32 : 0.0);
    X->free(D, dtok); X->free(D, dwte); X->free(D, dwpe); X->free(D, dout);
    X->free(D, dgw); X->free(D, dgp); X->free(D, dg);
    free(tok); free(wte); free(wpe); free(wteb); free(wpeb); free(ref); free(got);
    free(g); free(gw); free(gp); free(gw2); free(gp2); free(gb);
}

/* ---- norms -------------------------------------------------------------- */

static void test_norm(int N, int C, int rms)
{
    char name[128];
    const char *nm = rms ? "rmsnorm" : "layernorm";
    size_t n = (size_t)N * C;
    float *x = malloc(n * 4), *w = malloc(C * 4), *b = malloc(C * 4), *ref = malloc(n * 4),
          *got = malloc(n * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4),
          *gm = malloc(N * 4), *gr = malloc(N * 4);
    llmt__bf16 *xb = malloc(n * 2), *wb = malloc(C * 2), *bb = malloc(C * 2);
    fill_bf(x, xb, n, 2.0f);
    for (size_t i = 0; i < n; i++) { /* an offset, so that the mean matters */
        xb[i] = llmt__f32_to_bf16(x[i] + 0.5f);
        x[i] = llmt__bf16_to_f32(xb[i]);
    }
    fill_bf(w, wb, C, 1.0f);
    fill_bf(b, bb, C, 1.0f);
    const float eps = 1e-5f;
    llmt__bf16 *dx = dup_(xb, n * 2), *dw = dup_(wb, C * 2), *db = dup_(bb, C * 2),
               *dout = dalloc(n * 2);
    float *dmean = dalloc(N * 4), *drstd = dalloc(N * 4);
    if (rms) {
        R->rmsnorm_fwd(ref, rstd, x, w, N, C, eps);
        CHECK_STATUS(X->rmsnorm_fwd(D, dout, drstd, dx, dw, N, C, eps), LLMT_OK);
    } else {
        R->layernorm_fwd(ref, mean, rstd, x, w, b, N, C, eps);
        CHECK_STATUS(X->layernorm_fwd(D, dout, dmean, drstd, dx, dw, db, N, C, eps), LLMT_OK);
        down(gm, dmean, N * 4);
        snprintf(name, sizeof name, "%s_fwd mean N=%d C=%d", nm, N, C);
        cmp(name, gm, mean, N, TOL_F32);
    }
    down_bf(got, dout, n);
    snprintf(name, sizeof name, "%s_fwd out N=%d C=%d", nm, N, C);
    cmp(name, got, ref, n, TOL_BF);
    down(gr, drstd, N * 4);
    snprintf(name, sizeof name, "%s_fwd rstd N=%d C=%d", nm, N, C);
    cmp(name, gr, rstd, N, TOL_F32);

    /* backward: dinp prefilled (zeros, then ones) is accumulated into;
     * dw, db start nonzero */
    float *g = malloc(n * 4), *di = malloc(n * 4), *gw = malloc(C * 4), *gb = malloc(C * 4),
          *gw2 = malloc(C * 4), *gb2 = malloc(C * 4), *d0 = malloc(n * 4), *d1 = malloc(n * 4);
    llmt__bf16 *gbf = malloc(n * 2), *ones = malloc(n * 2);
    fill_bf(g, gbf, n, 1.0f);
    fill_f(gw, C, 1.0f);
    fill_f(gb, C, 1.0f);
    for (size_t i = 0; i < n; i++) { di[i] = 1.0f; ones[i] = llmt__f32_to_bf16(1.0f); }
    llmt__bf16 *dg = dup_(gbf, n * 2), *ddi = dup_(ones, n * 2);
    float *dgw = dup_(gw, C * 4), *dgb = dup_(gb, C * 4);
    if (rms) {
        R->rmsnorm_bwd(di, gw, g, x, w, rstd, N, C);
        CHECK_STATUS(X->rmsnorm_bwd(D, ddi, dgw, dg, dx, dw, drstd, N, C), LLMT_OK);
    } else {
        R->layernorm_bwd(di, gw, gb, g, x, w, mean, rstd, N, C);
        CHECK_STATUS(X->layernorm_bwd(D, ddi, dgw, dgb, dg, dx, dw, dmean, drstd, N, C), LLMT_OK);
    }
    down_bf(d1, ddi, n);
    down(gw2, dgw, C * 4);
    down(gb2, dgb, C * 4);
    snprintf(name, sizeof name, "%s_bwd dinp (bf16, 1 +=) N=%d C=%d", nm, N, C);
    cmp(name, d1, di, n, TOL_BF);
    snprintf(name, sizeof name, "%s_bwd dw += N=%d C=%d", nm, N, C);
    cmp(name, gw2, gw, C, TOL_F32);
    if (!rms) {
        snprintf(name, sizeof name, "%s_bwd db += N=%d C=%d", nm, N, C);
        cmp(name, gb2, gb, C, TOL_F32);
    }
    /* the same from zeros: the two differ by the ones, element by element
     * (each side rounded once to bf16 near |1 + g|: 2^-8 * 2 per element) */
    CHECK_STATUS(X->memset0(D, ddi, n * 2), LLMT_OK);
    if (rms)
        CHECK_STATUS(X->rmsnorm_bwd(D, ddi, dgw, dg, dx, dw, drstd, N, C), LLMT_OK);
    else
        CHECK_STATUS(X->layernorm_bwd(D, ddi, dgw, dgb, dg, dx, dw, dmean, drstd, N, C), LLMT_OK);
    down_bf(d0, ddi, n);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)d1[i] - d0[i] - 1.0) / (1.0 + fabs(d0[i]));
        if (!(e <= worst)) worst = e;
    }
    snprintf(name, sizeof name, "%s_bwd accumulates: (ones run) - (zeros run) = 1", nm);
    report(name, worst, 1e-2);
    X->free(D, dx); X->free(D, dw); X->free(D, db); X->free(D, dout); X->free(D, dmean);
    X->free(D, drstd); X->free(D, dg); X->free(D, ddi); X->free(D, dgw); X->free(D, dgb);
    free(x); free(w); free(b); free(ref); free(got); free(mean); free(rstd); free(gm); free(gr);
    free(xb); free(wb); free(bb); free(g); free(di); free(gw); free(gb); free(gw2); free(gb2);
    free(d0); free(d1); free(gbf); free(ones);
}

/* ---- element-wise --------------------------------------------------------- */

static void test_elementwise(size_t n)
{
    char name[128];
    float *a = malloc(n * 4), *b = malloc(n * 4), *g = malloc(n * 4), *ref = malloc(n * 4),
          *got = malloc(n * 4), *r2 = malloc(n * 4), *got2 = malloc(n * 4);
    llmt__bf16 *ab = malloc(n * 2), *bb = malloc(n * 2), *gb = malloc(n * 2),
               *ones = malloc(n * 2);
    fill_bf(a, ab, n, 3.0f);
    fill_bf(b, bb, n, 1.0f);
    fill_bf(g, gb, n, 1.0f);
    for (size_t i = 0; i < n; i++) ones[i] = llmt__f32_to_bf16(1.0f);
    llmt__bf16 *da = dup_(ab, n * 2), *db = dup_(bb, n * 2), *dg = dup_(gb, n * 2),
               *dout = dalloc(n * 2), *d1 = dup_(ones, n * 2), *d2 = dup_(ones, n * 2);

    R->swiglu_fwd(ref, a, b, n);
    CHECK_STATUS(X->swiglu_fwd(D, dout, da, db, n), LLMT_OK);
    down_bf(got, dout, n);
    snprintf(name, sizeof name, "swiglu_fwd n=%zu", n);
    cmp(name, got, ref, n, TOL_BF);
    /* the op writes (dev.h): the ones it finds in d1, d2 are overwritten;
     * the reference adds to zeros */
    for (size_t i = 0; i < n; i++)
        ref[i] = r2[i] = 0.0f;
    R->swiglu_bwd(ref, r2, g, a, b, n);
    CHECK_STATUS(X->swiglu_bwd(D, d1, d2, NULL, dg, da, db, n), LLMT_OK);
    down_bf(got, d1, n);
    down_bf(got2, d2, n);
    snprintf(name, sizeof name, "swiglu_bwd dgate (written over ones) n=%zu", n);
    cmp(name, got, ref, n, TOL_BF);
    snprintf(name, sizeof name, "swiglu_bwd dup (written over ones) n=%zu", n);
    cmp(name, got2, r2, n, TOL_BF);
    /* again with dgate over dout (in place) and h: dgate and dup bit for
     * bit the run above's, h swiglu_fwd's */
    {
        llmt__bf16 *e1 = dup_(gb, n * 2), *e2 = dup_(ones, n * 2), *eh = dalloc(n * 2);
        llmt__bf16 *h1 = malloc(n * 2), *h2 = malloc(n * 2), *f1 = malloc(n * 2),
                   *f2 = malloc(n * 2);
        CHECK_STATUS(X->swiglu_bwd(D, e1, e2, eh, e1, da, db, n), LLMT_OK);
        CHECK_STATUS(X->swiglu_fwd(D, dout, da, db, n), LLMT_OK);
        down(h1, eh, n * 2);
        down(h2, dout, n * 2);
        down(f1, e1, n * 2);
        down(f2, d1, n * 2);
        snprintf(name, sizeof name, "swiglu_bwd in place with h: dgate, h bitwise n=%zu", n);
        report(name, (memcmp(f1, f2, n * 2) != 0) + (memcmp(h1, h2, n * 2) != 0), 0);
        down(f1, e2, n * 2);
        down(f2, d2, n * 2);
        report("swiglu_bwd in place with h: dup bitwise", memcmp(f1, f2, n * 2) != 0, 0);
        X->free(D, e1);
        X->free(D, e2);
        X->free(D, eh);
        free(h1);
        free(h2);
        free(f1);
        free(f2);
    }

    R->residual_fwd(ref, a, b, n);
    CHECK_STATUS(X->residual_fwd(D, da, da, db, n), LLMT_OK); /* out aliases a */
    down_bf(got, da, n);
    snprintf(name, sizeof name, "residual_fwd (out = a) n=%zu", n);
    cmp(name, got, ref, n, TOL_BF);

    /* bias_bwd: dbias[C] += column sums of dout[N,C] */
    int C = 12, N = (int)(n / 12);
    float *bias = malloc(C * 4), *bref = malloc(C * 4);
    fill_f(bias, C, 1.0f);
    memcpy(bref, bias, C * 4);
    for (int c = 0; c < C; c++)
        for (int r = 0; r < N; r++) bref[c] += g[(size_t)r * C + c];
    float *dbias = dup_(bias, C * 4);
    CHECK_STATUS(X->bias_bwd(D, dbias, dg, N, C), LLMT_OK);
    down(bias, dbias, C * 4);
    snprintf(name, sizeof name, "bias_bwd dbias += N=%d C=%d", N, C);
    cmp(name, bias, bref, C, TOL_F32);

    /* f32_to_bf16: the helper's rounding, bit for bit (ties to even) */
    float *f = malloc(n * 4);
    fill_f(f, n, 10.0f);
    union { uint32_t u; float f; } t1 = {0x3f808000u}, t2 = {0x3f818000u}, t3 = {0x3f808001u};
    f[0] = t1.f; f[1] = t2.f; f[2] = t3.f; f[3] = -0.0f;
    float *df = dup_(f, n * 4);
    llmt__bf16 *dy = dalloc(n * 2), *y = malloc(n * 2);
    CHECK_STATUS(X->f32_to_bf16(D, dy, df, n), LLMT_OK);
    down(y, dy, n * 2);
    int same = 1;
    for (size_t i = 0; i < n; i++) same &= y[i] == llmt__f32_to_bf16(f[i]);
    CHECK(same);
    CHECK(y[0] == 0x3f80 && y[1] == 0x3f82 && y[2] == 0x3f81 && y[3] == 0x8000);

    X->free(D, da); X->free(D, db); X->free(D, dg); X->free(D, dout); X->free(D, d1);
    X->free(D, d2); X->free(D, dbias); X->free(D, df); X->free(D, dy);
    free(a); free(b); free(g); free(ref); free(got); free(r2); free(got2); free(ab); free(bb);
    free(gb); free(ones); free(bias); free(bref); free(f); free(y);
}

/* ---- rope ----------------------------------------------------------------- */

static void test_rope(int B, int T, int nh, int hd, size_t stride)
{
    char name[128];
    size_t n = (size_t)B * T * stride;
    float *x = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4);
    llmt__bf16 *xb = malloc(n * 2), *yb = malloc(n * 2);
    fill_bf(x, xb, n, 1.0f);
    memcpy(ref, x, n * 4);
    R->rope(ref, B, T, nh, hd, stride, 10000.0f, 0);
    llmt__bf16 *dx = dup_(xb, n * 2);
    CHECK_STATUS(X->rope(D, dx, B, T, nh, hd, stride, 10000.0f, 0), LLMT_OK);
    down(yb, dx, n * 2);
    to_f(got, yb, n);
    snprintf(name, sizeof name, "rope B=%d T=%d nh=%d hd=%d stride=%zu", B, T, nh, hd, stride);
    cmp(name, got, ref, n, TOL_BF);
    int pad_same = 1; /* the columns past nh*hd are not touched */
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (size_t c = (size_t)nh * hd; c < stride; c++)
            pad_same &= yb[r * stride + c] == xb[r * stride + c];
    CHECK(pad_same);
    CHECK_STATUS(X->rope(D, dx, B, T, nh, hd, stride, 10000.0f, 1), LLMT_OK);
    down_bf(got, dx, n);
    cmp("rope inverse undoes the forward (two bf16 roundings)", got, x, n, 2 * TOL_BF);
    X->free(D, dx);
    free(x); free(ref); free(got); free(xb); free(yb);
}

/* ---- attention ------------------------------------------------------------ */

static void test_attention(int B, int T, int nh, int nkv, int hd, int colpad)
{
    char name[160];
    size_t qs = (size_t)(nh + 2 * nkv) * hd + colpad;
    size_t nq = (size_t)B * T * qs, no = (size_t)B * T * nh * hd, nl = (size_t)B * nh * T;
    float *qkv = malloc(nq * 4), *out = malloc(no * 4), *att = malloc((size_t)B * nh * T * T * 4),
          *got = malloc(nq * 4), *lse = malloc(nl * 4), *gl = malloc(nl * 4);
    llmt__bf16 *qkvb = malloc(nq * 2);
    fill_bf(qkv, qkvb, nq, 1.5f);
    const float *q = qkv, *k = q + (size_t)nh * hd, *v = k + (size_t)nkv * hd;
    R->attention_fwd(out, att, q, k, v, qs, B, T, nh, nkv, hd);
    /* lse: natural log of sum exp of the scaled causal scores, in double */
    double scale = 1.0 / sqrt((double)hd);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nh; h++)
            for (int t = 0; t < T; t++) {
                int kh = h / (nh / nkv);
                double s[64], m = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double dot = 0;
                    for (int i = 0; i < hd; i++)
                        dot += (double)q[(size_t)(b * T + t) * qs + h * hd + i] *
                               k[(size_t)(b * T + j) * qs + kh * hd + i];
                    s[j] = dot * scale;
                    if (s[j] > m) m = s[j];
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - m);
                lse[((size_t)b * nh + h) * T + t] = (float)(m + log(sum));
            }
    llmt__bf16 *dqkv = dup_(qkvb, nq * 2);
    const llmt__bf16 *dq_ = dqkv, *dk_ = dq_ + (size_t)nh * hd, *dv_ = dk_ + (size_t)nkv * hd;
    llmt__bf16 *dout = dalloc(no * 2);
    float *dlse = dalloc(nl * 4);
    CHECK_STATUS(X->attention_fwd(D, dout, dlse, dq_, dk_, dv_, qs, B, T, nh, nkv, hd), LLMT_OK);
    down_bf(got, dout, no);
    snprintf(name, sizeof name, "attention_fwd out B=%d T=%d nh=%d nkv=%d hd=%d qs=%zu", B, T,
             nh, nkv, hd, qs);
    cmp(name, got, out, no, TOL_BF);
    down(gl, dlse, nl * 4);
    snprintf(name, sizeof name, "attention_fwd lse (natural log, scaled scores) T=%d", T);
    cmp(name, gl, lse, nl, TOL_F32);

    /* backward against the fp32 op, which accumulates into zeroed grads
     * and reads the fp32 out through att; the emulation reads the bf16 out
     * (D = rowsum(dout * out)) and lse */
    float *go = malloc(no * 4), *gq = calloc(nq, 4), *datt = malloc((size_t)B * nh * T * T * 4);
    llmt__bf16 *gob = malloc(no * 2);
    fill_bf(go, gob, no, 1.0f);
    R->attention_bwd(gq, gq + (size_t)nh * hd, gq + (size_t)(nh + nkv) * hd, datt, go, att, q, k,
                     v, qs, B, T, nh, nkv, hd);
    /* dq/dk/dv overwritten: the buffer starts as the NaN fill, except for
     * the column padding, which holds a known value that must survive */
    llmt__bf16 *dgrad = dalloc(nq * 2), *dgo = dup_(gob, no * 2);
    if (colpad) {
        llmt__bf16 *h = malloc(nq * 2);
        down(h, dgrad, nq * 2);
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (size_t c = qs - colpad; c < qs; c++) h[r * qs + c] = 0x1234;
        CHECK_STATUS(X->h2d(D, dgrad, h, nq * 2), LLMT_OK);
        free(h);
    }
    llmt__bf16 *gdq = dgrad, *gdk = gdq + (size_t)nh * hd, *gdv = gdk + (size_t)nkv * hd;
    CHECK_STATUS(X->attention_bwd(D, gdq, gdk, gdv, dgo, dout, dlse, dq_, dk_, dv_, qs, B, T,
                                  nh, nkv, hd),
                 LLMT_OK);
    llmt__bf16 *hb = malloc(nq * 2);
    down(hb, dgrad, nq * 2);
    to_f(got, hb, nq);
    int pad_ok = 1;
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (size_t c = qs - colpad; c < qs; c++) pad_ok &= hb[r * qs + c] == 0x1234;
    CHECK(pad_ok);
    /* per part: gather the q, k and v columns */
    static const char *part[3] = {"dq", "dk", "dv"};
    size_t off[3] = {0, (size_t)nh * hd, (size_t)(nh + nkv) * hd};
    size_t wid[3] = {(size_t)nh * hd, (size_t)nkv * hd, (size_t)nkv * hd};
    for (int p = 0; p < 3; p++) {
        size_t m = (size_t)B * T * wid[p];
        float *a = malloc(m * 4), *r = malloc(m * 4);
        for (size_t row = 0; row < (size_t)B * T; row++) {
            memcpy(a + row * wid[p], got + row * qs + off[p], wid[p] * 4);
            memcpy(r + row * wid[p], gq + row * qs + off[p], wid[p] * 4);
        }
        snprintf(name, sizeof name, "attention_bwd %s (overwritten) T=%d nh=%d nkv=%d", part[p], T,
                 nh, nkv);
        cmp(name, a, r, m, 2 * TOL_BF);
        free(a); free(r);
    }
    X->free(D, dqkv); X->free(D, dout); X->free(D, dlse); X->free(D, dgrad); X->free(D, dgo);
    free(qkv); free(out); free(att); free(got); free(lse); free(gl); free(qkvb); free(go);
    free(gq); free(datt); free(gob); free(hb);
}

/* ---- softmax cross-entropy -------------------------------------------------- */

static void test_xent(int N, int V, int Vp, float dloss)
{
    char name[128];
    size_t n = (size_t)N * Vp;
    float *x = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4), *loss = malloc(N * 4),
          *gl = malloc(N * 4);
    llmt__bf16 *xb = malloc(n * 2), *yb = malloc(n * 2);
    fill_bf(x, xb, n, 4.0f);
    for (int r = 0; r < N; r++)
        for (int c = V; c < Vp; c++) { /* padded columns: garbage that must not count */
            xb[(size_t)r * Vp + c] = llmt__f32_to_bf16(50.0f);
            x[(size_t)r * Vp + c] = 50.0f;
        }
    int32_t *tg = malloc(N * 4);
    for (int r = 0; r < N; r++) tg[r] = (r * 5 + 3) % V;
    tg[1 % N] = -1; /* an ignored row */
    tg[0] = V - 1;
    memcpy(ref, x, n * 4);
    R->softmax_xent_fwd(loss, ref, tg, N, V, Vp);
    R->softmax_xent_bwd(ref, tg, dloss, N, V, Vp);
    llmt__bf16 *dx = dup_(xb, n * 2);
    int32_t *dtg = dup_(tg, N * 4);
    float *dl = dalloc(N * 4);
    /* dloss 0: losses only, logits untouched */
    CHECK_STATUS(X->softmax_xent(D, dl, dx, dtg, N, V, Vp, 0.0f), LLMT_OK);
    down(yb, dx, n * 2);
    CHECK(memcmp(yb, xb, n * 2) == 0);
    down(gl, dl, N * 4);
    snprintf(name, sizeof name, "softmax_xent losses N=%d V=%d Vp=%d", N, V, Vp);
    cmp(name, gl, loss, N, TOL_F32);
    CHECK(gl[1 % N] == 0.0f);
    CHECK_STATUS(X->softmax_xent(D, dl, dx, dtg, N, V, Vp, dloss), LLMT_OK);
    down(gl, dl, N * 4);
    cmp("softmax_xent losses again, with the gradient", gl, loss, N, TOL_F32);
    down(yb, dx, n * 2);
    to_f(got, yb, n);
    snprintf(name, sizeof name, "softmax_xent dlogits (overwritten) dloss=%g", dloss);
    cmp(name, got, ref, n, TOL_BF);
    int zeros = 1; /* exact zeros in padded columns and the ignored row */
    for (int r = 0; r < N; r++)
        for (int c = 0; c < Vp; c++)
            if (c >= V || tg[r] < 0) zeros &= got[(size_t)r * Vp + c] == 0.0f;
    CHECK(zeros);
    /* a target past V is refused */
    tg[0] = V;
    CHECK_STATUS(X->h2d(D, dtg, tg, N * 4), LLMT_OK);
    CHECK_STATUS(X->softmax_xent(D, dl, dx, dtg, N, V, Vp, dloss), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(X->softmax_xent(D, dl, dx, dtg, N, V, V - 1, dloss), LLMT_ERR_INVALID_ARGUMENT);
    X->free(D, dx); X->free(D, dtg); X->free(D, dl);
    free(x); free(ref); free(got); free(loss); free(gl); free(xb); free(yb); free(tg);
}

/* ---- AdamW and reductions ----------------------------------------------------- */

static void test_adamw(size_t n, int64_t t, int with_bf16)
{
    char name[128];
    float *p = malloc(n * 4), *g = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4),
          *gp = malloc(n * 4), *gm = malloc(n * 4), *gv = malloc(n * 4);
    fill_f(p, n, 1.0f);
    fill_f(g, n, 1.0f);
    fill_f(m, n, 0.1f);
    for (size_t i = 0; i < n; i++) v[i] = 0.01f * (1.0f + urand());
    float *dp = dup_(p, n * 4), *dg = dup_(g, n * 4), *dm = dup_(m, n * 4), *dv = dup_(v, n * 4);
    llmt__bf16 *dpb = with_bf16 ? dalloc(n * 2) : NULL, *pb = malloc(n * 2);
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
    R->adamw(p, g, m, v, n, lr, b1, b2, eps, wd, gs, t);
    CHECK_STATUS(X->adamw(D, dp, dpb, dg, dm, dv, n, lr, b1, b2, eps, wd, gs, t), LLMT_OK);
    down(gp, dp, n * 4);
    down(gm, dm, n * 4);
    down(gv, dv, n * 4);
    /* the same fp32 formula: only contraction into FMAs may differ */
    snprintf(name, sizeof name, "adamw master n=%zu t=%lld", n, (long long)t);
    cmp(name, gp, p, n, 1e-6);
    cmp("adamw m", gm, m, n, 1e-6);
    cmp("adamw v", gv, v, n, 1e-6);
    if (with_bf16) {
        down(pb, dpb, n * 2);
        int same = 1;
        for (size_t i = 0; i < n; i++) same &= pb[i] == llmt__f32_to_bf16(gp[i]);
        CHECK(same);
    }
    X->free(D, dp); X->free(D, dg); X->free(D, dm); X->free(D, dv); X->free(D, dpb);
    free(p); free(g); free(m); free(v); free(gp); free(gm); free(gv); free(pb);
}

static void test_reduce(void)
{
    size_t ns[3] = {37, 0, 1000};
    float *h[3], *dx[3];
    double ss = 0, s0 = 0;
    for (int i = 0; i < 3; i++) {
        h[i] = malloc((ns[i] + 1) * 4);
        fill_f(h[i], ns[i], 2.0f);
        for (size_t j = 0; j < ns[i]; j++) ss += (double)h[i][j] * h[i][j];
        dx[i] = ns[i] ? dup_(h[i], ns[i] * 4) : NULL;
    }
    for (size_t j = 0; j < ns[2]; j++) s0 += h[2][j];
    float *dout = dalloc(4), got = -1.0f;
    CHECK_STATUS(X->sumsq(D, dout, (const float *const *)dx, ns, 3), LLMT_OK);
    down(&got, dout, 4);
    float want = (float)ss;
    report("sumsq over 3 arrays (one empty)", fabs(got - want) / want, 1e-6);
    CHECK_STATUS(X->sumsq(D, dout, NULL, NULL, 0), LLMT_OK);
    down(&got, dout, 4);
    CHECK(got == 0.0f);
    /* any count: a rank's norm runs (68 for GPT-2's 4 layers at tp 2 were
     * refused by a cap of 64, failing the first step) */
    {
        const float *many[100];
        size_t mn[100];
        double mw = 0;
        for (int i = 0; i < 100; i++) {
            many[i] = dx[i % 3];
            mn[i] = ns[i % 3];
            for (size_t j = 0; j < mn[i]; j++)
                mw += (double)h[i % 3][j] * h[i % 3][j];
        }
        CHECK_STATUS(X->sumsq(D, dout, many, mn, 100), LLMT_OK);
        down(&got, dout, 4);
        report("sumsq over 100 arrays", fabs(got - mw) / mw, 1e-6);
    }
    CHECK_STATUS(X->sumsq(D, dout, (const float *const *)dx, ns, -1),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(X->sum(D, dout, dx[2], ns[2]), LLMT_OK);
    down(&got, dout, 4);
    want = (float)s0;
    report("sum n=1000", fabs(got - want) / (fabs(want) + 1e-3), 1e-6);
    /* the fp32 table's sumsq agrees */
    double rs = R->sumsq(h[2], ns[2]);
    CHECK_STATUS(X->sumsq(D, dout, (const float *const *)&dx[2], &ns[2], 1), LLMT_OK);
    down(&got, dout, 4);
    report("sumsq vs the fp32 table's", fabs(got - rs) / rs, 1e-6);
    for (int i = 0; i < 3; i++) {
        X->free(D, dx[i]);
        free(h[i]);
    }
    X->free(D, dout);
}

/* ---- argument checks ---------------------------------------------------------- */

/* ---- fp8 support ops ------------------------------------------------------- */

/* amax exact; quantise-then-decode (lib/exec/fp8.c's decoder, tested on its
 * own against an independent Python enumeration) within one fp8 rounding
 * (E4M3 2^-4, E5M2 2^-3 relative per element; L2 tolerances 4e-2 / 8e-2
 * as the GPU test's); the fp8 GEMM against the decoded operands in double
 * (bf16 output: 1e-2); bias_add and gelu_fwd against fp32 references. */
static void test_fp8_ops(void)
{
    enum { M = 5, N = 7, K = 32, NX = M * K, NW = N * K };
    float xf[NX], wf[NW], ref[M * N], got[M * N], deq[NX];
    llmt__bf16 xb[NX], wb[NW];
    fill_bf(xf, xb, NX, 3.0f);
    fill_bf(wf, wb, NW, 0.05f);
    llmt__bf16 *dx = dup_(xb, sizeof xb), *dw = dup_(wb, sizeof wb);
    float *dam = dalloc(2 * sizeof(float)), am[2];
    CHECK_STATUS(X->amax(D, dam, dx, NX), LLMT_OK);
    CHECK_STATUS(X->amax(D, dam + 1, dw, NW), LLMT_OK);
    down(am, dam, sizeof am);
    float mx = 0, mw = 0;
    for (int i = 0; i < NX; i++) mx = fmaxf(mx, fabsf(xf[i]));
    for (int i = 0; i < NW; i++) mw = fmaxf(mw, fabsf(wf[i]));
    report("amax (activation, weight)", fabs(am[0] - mx) + fabs(am[1] - mw), 0.0);
    /* scales as the delayed recipe would pick them: 448 / amax */
    float sc[2] = {448.0f / mx, 448.0f / mw}, inv[2] = {mx / 448.0f, mw / 448.0f};
    float *dsc = dup_(sc, sizeof sc), *dinv = dup_(inv, sizeof inv);
    uint8_t *qx = dalloc(NX), *qw = dalloc(NW), hq[NX > NW ? NX : NW];
    for (int e5 = 0; e5 < 2; e5++) {
        CHECK_STATUS(X->quantize_fp8(D, qx, dx, dsc, NX, e5), LLMT_OK);
        down(hq, qx, NX);
        for (int i = 0; i < NX; i++) deq[i] = llmt__fp8_decode(hq[i], e5) * inv[0];
        cmp(e5 ? "quantize_fp8 E5M2 (decoded vs x)" : "quantize_fp8 E4M3 (decoded vs x)", deq,
            xf, NX, e5 ? 8e-2 : 4e-2);
    }
    CHECK_STATUS(X->quantize_fp8(D, qx, dx, dsc, NX, 0), LLMT_OK);
    CHECK_STATUS(X->quantize_fp8(D, qw, dw, dsc + 1, NW, 0), LLMT_OK);
    uint8_t ha[NX], hb[NW];
    down(ha, qx, NX);
    down(hb, qw, NW);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++)
                acc += (double)llmt__fp8_decode(ha[i * K + k], 0) *
                       llmt__fp8_decode(hb[j * K + k], 0);
            ref[i * N + j] = (float)(acc * inv[0] * inv[1]);
        }
    llmt__bf16 *dc = dalloc(M * N * 2);
    llmt__gemm_args g = llmt__gemm_fp8(M, N, K, qx, 0, dinv, qw, dinv + 1, dc, 0, 0.0f);
    CHECK_STATUS(X->gemm(D, &g), LLMT_OK);
    down_bf(got, dc, M * N);
    cmp("gemm fp8 E4M3 x E4M3 5x7x32 (vs decoded operands)", got, ref, M * N, TOL_BF);
    g.trans_b = 0; /* the backend's rule: Linear forward layout only */
    CHECK_STATUS(X->gemm(D, &g), LLMT_ERR_INVALID_ARGUMENT);

    /* bias_add on the GEMM's output; gelu on it */
    float bias_f[N], plus[M * N], gl[M * N];
    llmt__bf16 bias_b[N];
    fill_bf(bias_f, bias_b, N, 1.0f);
    llmt__bf16 *db = dup_(bias_b, sizeof bias_b), *dg = dalloc(M * N * 2);
    CHECK_STATUS(X->bias_add(D, dc, db, M, N), LLMT_OK);
    float after[M * N];
    down_bf(after, dc, M * N);
    for (int i = 0; i < M * N; i++) plus[i] = got[i] + bias_f[i % N];
    cmp("bias_add", after, plus, M * N, TOL_BF);
    CHECK_STATUS(X->gelu_fwd(D, dg, dc, M * N), LLMT_OK);
    down_bf(got, dg, M * N);
    R->gelu_fwd(gl, after, M * N);
    cmp("gelu_fwd (vs the fp32 table's)", got, gl, M * N, TOL_BF);
    void *ps[] = {dx, dw, dam, dsc, dinv, qx, qw, dc, db, dg};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) X->free(D, ps[i]);
}

/* The fp8 backward's ops: cast_transpose_fp8's codes equal quantize_fp8's,
 * in place and transposed, and its amax the amax op's (exactly); the two backward GEMMs in the only
 * layout fp8 takes, on transposed codes: the weight gradient E5M2 x E4M3
 * accumulated into fp32 (beta 1), the data gradient into bf16, each
 * against the decoded operands in double; gelu_bwd_mul against the fp32
 * table's GELU backward. */
static void test_fp8_backward_ops(void)
{
    enum { NR = 12, Cc = 8 }; /* dout [NR, Cc]; x [NR, Cc] as well */
    float gf[NR * Cc], xf[NR * Cc];
    llmt__bf16 gb[NR * Cc], xb[NR * Cc];
    fill_bf(gf, gb, NR * Cc, 1e-3f);
    fill_bf(xf, xb, NR * Cc, 2.0f);
    llmt__bf16 *dg = dup_(gb, sizeof gb), *dxx = dup_(xb, sizeof xb);
    float sc[2] = {57344.0f / 1e-3f, 448.0f / 2.0f}, inv[2] = {1e-3f / 57344.0f, 2.0f / 448.0f};
    float *dsc = dup_(sc, sizeof sc), *dinv = dup_(inv, sizeof inv);
    uint8_t *q = dalloc(NR * Cc), *qt = dalloc(NR * Cc), *qx = dalloc(NR * Cc);
    uint8_t hq[NR * Cc], hqt[NR * Cc], href[NR * Cc], hx[NR * Cc];
    CHECK_STATUS(X->quantize_fp8(D, q, dg, dsc, NR * Cc, 1), LLMT_OK);
    down(href, q, sizeof href);
    float *dam = dalloc(2 * sizeof(float)), am[2];
    CHECK_STATUS(X->cast_transpose_fp8(D, q, qt, dam, dg, dsc, NR, Cc, 1), LLMT_OK);
    CHECK_STATUS(X->amax(D, dam + 1, dg, NR * Cc), LLMT_OK);
    down(am, dam, sizeof am);
    report("cast_transpose_fp8 amax (vs the amax op's)", fabs(am[0] - am[1]), 0.0);
    CHECK(am[0] > 0);
    down(hq, q, sizeof hq);
    down(hqt, qt, sizeof hqt);
    int same = memcmp(hq, href, sizeof hq) == 0, tr = 1;
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < Cc; c++)
            tr &= hqt[c * NR + r] == href[r * Cc + c];
    report("cast_transpose_fp8 E5M2: codes as quantize_fp8's", same ? 0.0 : 1.0, 0.0);
    report("cast_transpose_fp8 E5M2: transposed codes", tr ? 0.0 : 1.0, 0.0);
    CHECK_STATUS(X->cast_transpose_fp8(D, NULL, qx, NULL, dxx, dsc + 1, NR, Cc, 0), LLMT_OK);
    down(hx, qx, sizeof hx);
    /* rows not a multiple of 4: refused with the transpose, taken without
     * (the forward's y alone: a 6-row micro-batch's codes) */
    CHECK_STATUS(X->cast_transpose_fp8(D, q, qt, NULL, dg, dsc, 6, 8, 1),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(X->cast_transpose_fp8(D, q, NULL, NULL, dg, dsc, 6, 8, 1), LLMT_OK);
    down(hq, q, sizeof hq);
    report("cast_transpose_fp8 E5M2 6 rows, no transpose: codes as quantize_fp8's",
           memcmp(hq, href, 6 * 8) != 0, 0.0);

    /* dW[Cc, Cc] += dout^T x: A = dout^T codes [Cc, NR] E5M2, B = x^T [Cc, NR] */
    float w0[Cc * Cc], ref[Cc * Cc], got[Cc * Cc];
    for (int i = 0; i < Cc * Cc; i++)
        w0[i] = 0.25f * (float)(i % 7) - 0.5f;
    float *dw = dup_(w0, sizeof w0);
    for (int i = 0; i < Cc; i++)
        for (int j = 0; j < Cc; j++) {
            double acc = 0;
            for (int r = 0; r < NR; r++)
                acc += (double)llmt__fp8_decode(hqt[i * NR + r], 1) *
                       llmt__fp8_decode(hx[j * NR + r], 0);
            ref[i * Cc + j] = (float)(w0[i * Cc + j] + acc * inv[0] * inv[1]);
        }
    llmt__gemm_args g = llmt__gemm_fp8(Cc, Cc, NR, qt, 1, dinv, qx, dinv + 1, dw, 1, 1.0f);
    CHECK_STATUS(X->gemm(D, &g), LLMT_OK);
    down(got, dw, sizeof got);
    cmp("gemm fp8 E5M2 x E4M3 weight gradient, fp32 C, beta 1", got, ref, Cc * Cc, TOL_F32);

    /* dx[NR, Cc] = dout W: A = dout codes [NR, Cc], B = W^T codes [Cc, Cc] */
    float wf[Cc * Cc], dref[NR * Cc], dgot[NR * Cc];
    llmt__bf16 wb[Cc * Cc];
    fill_bf(wf, wb, Cc * Cc, 0.05f);
    llmt__bf16 *dwb = dup_(wb, sizeof wb), *ddx = dalloc(NR * Cc * 2);
    uint8_t *qwt = dalloc(Cc * Cc), hwt[Cc * Cc];
    float wsc = 448.0f / 0.05f, winv = 0.05f / 448.0f;
    float *dwsc = dup_(&wsc, sizeof wsc), *dwinv = dup_(&winv, sizeof winv);
    CHECK_STATUS(X->cast_transpose_fp8(D, NULL, qwt, NULL, dwb, dwsc, Cc, Cc, 0), LLMT_OK);
    down(hwt, qwt, sizeof hwt);
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < Cc; j++) {
            double acc = 0;
            for (int k = 0; k < Cc; k++)
                acc += (double)llmt__fp8_decode(hq[r * Cc + k], 1) *
                       llmt__fp8_decode(hwt[j * Cc + k], 0);
            dref[r * Cc + j] = (float)(acc * inv[0] * winv);
        }
    g = llmt__gemm_fp8(NR, Cc, Cc, q, 1, dinv, qwt, dwinv, ddx, 0, 0.0f);
    CHECK_STATUS(X->gemm(D, &g), LLMT_OK);
    down_bf(dgot, ddx, NR * Cc);
    cmp("gemm fp8 E5M2 x E4M3 data gradient, bf16 C", dgot, dref, NR * Cc, TOL_BF);

    /* dx *= gelu'(pre), against the fp32 table's gelu backward from zero */
    float pre[NR * Cc], gl[NR * Cc];
    llmt__bf16 preb[NR * Cc], *dpre;
    fill_bf(pre, preb, NR * Cc, 3.0f);
    dpre = dup_(preb, sizeof preb);
    memset(gl, 0, sizeof gl);
    R->gelu_bwd(gl, pre, dgot, NR * Cc);
    CHECK_STATUS(X->gelu_bwd_mul(D, ddx, dpre, NR * Cc), LLMT_OK);
    float gm[NR * Cc];
    down_bf(gm, ddx, NR * Cc);
    cmp("gelu_bwd_mul (vs the fp32 table's gelu backward)", gm, gl, NR * Cc, TOL_BF);
    void *ps[] = {dg, dxx, dsc, dinv, q, qt, qx, dw, dwb, ddx, qwt, dwsc, dwinv, dpre, dam};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        X->free(D, ps[i]);
}

static void test_errors(void)
{
    llmt__bf16 *b = dalloc(4096);
    float *f = dalloc(4096);
    CHECK_STATUS(X->attention_fwd(D, b, f, b, b, b, 24, 1, 2, 4, 3, 6), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strncmp(X->last_error(D), "emulated: attention_fwd", 23) == 0);
    CHECK_STATUS(X->attention_fwd(D, b, f, b, b, b, 24, 1, 2, 4, 2, 5), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(X->attention_bwd(D, b, b, b, b, b, f, b, b, b, 24, 1, 2, 4, 2, 130),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(X->layernorm_fwd(D, b, f, f, b, b, b, -1, 4, 1e-5f), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(X->layernorm_fwd(D, b, f, f, b, b, b, 0, 4, 1e-5f), LLMT_OK); /* nothing to do */
    CHECK_STATUS(X->rope(D, b, 1, 2, 2, 5, 10, 1e4f, 0), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(X->rope(D, b, 1, 2, 2, 4, 6, 1e4f, 0), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(X->embedding_fwd(D, b, NULL, b, NULL, 1, 2, 4), LLMT_ERR_NULL_POINTER);
    int32_t neg[2] = {0, -3};
    int32_t *dneg = dup_(neg, sizeof neg);
    CHECK_STATUS(X->embedding_fwd(D, b, dneg, b, NULL, 1, 2, 4), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(X->adamw(D, f, NULL, f, f, f, 4, 1e-3f, 0.9f, 0.99f, 1e-8f, 0, 1, 0),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(X->bias_bwd(D, f, b, 3, -1), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(X->alloc(D, NULL, 8), LLMT_ERR_NULL_POINTER);
    X->free(D, b);
    X->free(D, f);
    X->free(D, dneg);
}

int main(void)
{
    X = llmt__dev_emul();
    R = llmt__exec_cpu_ref();
    CHECK(X != NULL && strcmp(X->name, "emulated") == 0);
    char err[256] = "";
    llmt__dev_opts o = {.device = 3, .deterministic = 1}; /* any ordinal */
    CHECK_STATUS(X->create(&o, &D, err, sizeof err), LLMT_OK);
    if (!D) {
        fprintf(stderr, "create: %s\n", err);
        return check_exit("dev-emul");
    }
    CHECK(X->last_error(D) != NULL && X->last_error(D)[0] == '\0');

    test_memory();

    static const llmt__gemm_epi epis[] = {LLMT_GEMM_EPI_NONE, LLMT_GEMM_EPI_BIAS,
                                          LLMT_GEMM_EPI_GELU, LLMT_GEMM_EPI_GELU_BIAS,
                                          LLMT_GEMM_EPI_DGELU, LLMT_GEMM_EPI_BGRAD};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int cf = 0; cf < 2; cf++)
                for (int bi = 0; bi < 2; bi++)
                    for (size_t e = 0; e < sizeof epis / sizeof epis[0]; e++)
                        test_gemm(5, 7, 3, ta, tb, cf, epis[e], 1.0f, (float)bi, 0);
    /* alpha, padded leading dimensions, a longer K */
    test_gemm(5, 7, 3, 0, 1, 0, LLMT_GEMM_EPI_BIAS, 0.5f, 1.0f, 3);
    test_gemm(5, 7, 3, 1, 0, 1, LLMT_GEMM_EPI_NONE, -2.0f, 1.0f, 2);
    test_gemm(5, 7, 3, 1, 1, 0, LLMT_GEMM_EPI_GELU_BIAS, 1.0f, 0.0f, 1);
    test_gemm(9, 4, 16, 0, 0, 1, LLMT_GEMM_EPI_DGELU, 1.0f, 0.0f, 5);
    test_gemm(64, 48, 64, 0, 1, 0, LLMT_GEMM_EPI_GELU_BIAS, 1.0f, 0.0f, 0);
    test_gemm_errors();

    test_embedding(2, 5, 12, 11, 1);
    test_embedding(1, 1, 12, 11, 0);
    test_norm(7, 12, 0);
    test_norm(1, 5, 0);
    test_norm(7, 12, 1);
    test_elementwise(84);
    test_rope(2, 5, 4, 6, 30);
    test_rope(1, 1, 2, 8, 16);
    test_attention(2, 5, 4, 2, 6, 0);
    test_attention(2, 1, 4, 2, 6, 2);
    test_attention(1, 9, 2, 2, 8, 2);
    test_attention(2, 7, 4, 1, 6, 0);
    test_xent(7, 11, 16, 1.0f / 7);
    test_xent(2, 5, 5, 0.5f);
    test_adamw(37, 1, 1);
    test_adamw(37, 3, 0);
    test_reduce();
    test_fp8_ops();
    test_fp8_backward_ops();
    test_errors();

    size_t in_use = 1, peak = 0;
    X->mem_stats(D, &in_use, &peak);
    CHECK_EQ_INT(in_use, 0); /* every test freed what it allocated */
    CHECK(peak >= 1250);
    X->destroy(D);
    X->destroy(NULL);
    printf("dev-emul: %d comparisons, %d checks, %d failed\n", reported, check_count,
           check_failures);
    return check_exit("dev-emul");
}
