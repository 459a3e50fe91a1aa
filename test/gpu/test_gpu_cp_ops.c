/* Context parallelism's attention pieces on the GPU (cuda/kernels/
 * attn_cp.cu; gpu suite: gpu-cp-ops, never run; SKIPs without a GPU)
 * against their host reference (lib/exec/attn_cp.c, bf16 storage) on the
 * same random bf16 inputs: the load-balanced layout of cp 2 and 4 (rank r
 * holds chunks r and 2 cp - 1 - r of each sequence), this rank's queries
 * against every rank's key/value block in turn (the running output and
 * log-sum-exp merged block by block), the backward's row term and each
 * block's dq and dk/dv, RoPE at the rank's positions, and the row copies.
 * GQA (nh 4, nkv 2 and 4), head dims 16, 64 and 128, strided q rows.
 *
 * Bounds: the kernels repeat the host's float operations in its order,
 * rounded one by one (attn_cp.cu's top); only expf, logf, log1pf, sinf,
 * cosf and powf differ (CUDA's are within 2 ulp). So: D and the row
 * copies bitwise; the output, log-sum-exp, dq and dk/dv within 1e-5
 * relative L2 (a few ulp of fp32 through a chain of dozens of roundings;
 * not measured yet); RoPE's bf16 outputs within one bf16 step each.
 * Seed: LLMT_SEED, else fixed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/attn_cp.h"
#include "gpu_util.h"

static llmt__cuda_ctx *X;

static void *dput(const void *h, size_t bytes)
{
    void *p = NULL;
    if (llmt__cuda_alloc(X, &p, bytes ? bytes : 1) != LLMT_OK) {
        fprintf(stderr, "alloc: %s\n", llmt__cuda_ctx_last_error(X));
        exit(1);
    }
    if (h && bytes)
        CHECK_STATUS(llmt__cuda_h2d(X, p, h, bytes), LLMT_OK);
    return p;
}
static void dget(void *h, const void *d, size_t bytes)
{
    CHECK_STATUS(llmt__cuda_d2h(X, h, d, bytes), LLMT_OK);
}

/* rank r's positions of a sequence of T under cp (cp.c's chunk_pos) */
static void positions(int32_t *pos, int r, int cp, int T)
{
    int Tc = T / (2 * cp), Tl = T / cp;
    for (int t = 0; t < Tl; t++) {
        int c = t / Tc;
        pos[t] = (c == 0 ? r : 2 * cp - 1 - r) * Tc + t % Tc;
    }
}

static void rand_bf(uint16_t *b, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        b[i] = h_f2bf(rng_f(a));
}

static size_t bf_steps(const uint16_t *a, const uint16_t *b, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float x = h_bf2f(a[i]), y = h_bf2f(b[i]);
        if (!(fabsf(x - y) <= ldexpf(fmaxf(fabsf(x), fabsf(y)), -8)))
            bad++;
    }
    return bad;
}

/* One rank (me) of cp: its queries against each rank's block, forward
 * then backward, on the GPU and on the host. */
static void attn_case(int cp, int me, int B, int T, int nh, int nkv, int hd)
{
    int Tl = T / cp;
    size_t qs = (size_t)(nh + 2 * nkv) * hd + 8; /* strided rows */
    size_t kvs = 2 * (size_t)nkv * hd;
    size_t nq = (size_t)B * Tl * qs, nkvb = (size_t)B * Tl * kvs;
    size_t no = (size_t)B * Tl * nh * hd, nl = (size_t)B * nh * Tl;
    uint16_t *q = malloc(nq * 2), *kv = malloc(nkvb * 2 * cp), *dout = malloc(no * 2);
    uint16_t *outb = malloc(no * 2);
    int32_t *qpos = malloc((size_t)Tl * 4), *kpos = malloc((size_t)cp * Tl * 4);
    float *o_h = calloc(no, 4), *l_h = malloc(nl * 4), *o_g = malloc(no * 4),
          *l_g = malloc(nl * 4);
    float *D_h = malloc(nl * 4), *D_g = malloc(nl * 4);
    float *dq_h = calloc(no, 4), *dq_g = malloc(no * 4);
    float *dkv_h = calloc((size_t)B * Tl * kvs * cp, 4),
          *dkv_g = malloc((size_t)B * Tl * kvs * cp * 4);
    rand_bf(q, nq, 1.0f);
    rand_bf(kv, nkvb * cp, 1.0f);
    rand_bf(dout, no, 1.0f);
    positions(qpos, me, cp, T);
    for (int r = 0; r < cp; r++)
        positions(kpos + (size_t)r * Tl, r, cp, T);
    for (size_t i = 0; i < nl; i++)
        l_h[i] = -INFINITY;
    uint16_t *dq_ = dput(q, nq * 2), *dkv_ = dput(kv, nkvb * 2 * cp),
             *ddout = dput(dout, no * 2);
    int32_t *dqpos = dput(qpos, (size_t)Tl * 4), *dkpos = dput(kpos, (size_t)cp * Tl * 4);
    float *go = dput(o_h, no * 4), *gl = dput(l_h, nl * 4);
    /* forward: every block in rank order, merged */
    for (int r = 0; r < cp; r++) {
        llmt__attn_cp_fwd(1, o_h, l_h, q, qs, kv + (size_t)r * nkvb, kvs, B, Tl, Tl, nh, nkv,
                          hd, qpos, kpos + (size_t)r * Tl);
        CHECK_STATUS(llmt__cuda_attn_cp_fwd(X, go, gl, dq_, qs, dkv_ + (size_t)r * nkvb, kvs, B,
                                            Tl, Tl, nh, nkv, hd, dqpos, dkpos + (size_t)r * Tl),
                     LLMT_OK);
    }
    dget(o_g, go, no * 4);
    dget(l_g, gl, nl * 4);
    double eo = rel_err(o_g, o_h, no), el = rel_err(l_g, l_h, nl);
    /* backward from the host's final output (as bf16) and lse */
    for (size_t i = 0; i < no; i++)
        outb[i] = h_f2bf(o_h[i]);
    uint16_t *dout_b = dput(outb, no * 2);
    llmt__attn_cp_delta(1, D_h, dout, outb, B, Tl, nh, hd);
    float *gD = dput(NULL, nl * 4), *glh = dput(l_h, nl * 4);
    CHECK_STATUS(llmt__cuda_attn_cp_delta(X, gD, ddout, dout_b, B, Tl, nh, hd), LLMT_OK);
    dget(D_g, gD, nl * 4);
    int D_eq = !memcmp(D_g, D_h, nl * 4);
    float *gdq = dput(dq_h, no * 4), *gdkv = dput(dkv_h, (size_t)B * Tl * kvs * cp * 4);
    for (int r = 0; r < cp; r++) {
        float *dkr_h = dkv_h + (size_t)r * B * Tl * kvs;
        llmt__attn_cp_bwd(1, dq_h, dkr_h, D_h, l_h, dout, q, qs, kv + (size_t)r * nkvb, kvs, B,
                          Tl, Tl, nh, nkv, hd, qpos, kpos + (size_t)r * Tl);
        /* the GPU takes the host's D (its own was compared above) */
        CHECK_STATUS(llmt__cuda_h2d(X, gD, D_h, nl * 4), LLMT_OK);
        CHECK_STATUS(llmt__cuda_attn_cp_bwd(X, gdq, gdkv + (size_t)r * B * Tl * kvs, gD, glh,
                                            ddout, dq_, qs, dkv_ + (size_t)r * nkvb, kvs, B, Tl,
                                            Tl, nh, nkv, hd, dqpos, dkpos + (size_t)r * Tl),
                     LLMT_OK);
    }
    dget(dq_g, gdq, no * 4);
    dget(dkv_g, gdkv, (size_t)B * Tl * kvs * cp * 4);
    double edq = rel_err(dq_g, dq_h, no),
           edkv = rel_err(dkv_g, dkv_h, (size_t)B * Tl * kvs * cp);
    printf("attn_cp cp %d rank %d B=%d T=%d nh=%d nkv=%d hd=%d: out %.2e, lse %.2e, D %s, dq "
           "%.2e, dkv %.2e\n",
           cp, me, B, T, nh, nkv, hd, eo, el, D_eq ? "bitwise" : "DIFFERS", edq, edkv);
    CHECK(eo <= 1e-5);
    CHECK(el <= 1e-5);
    CHECK(D_eq);
    CHECK(edq <= 1e-5);
    CHECK(edkv <= 1e-5);
    void *all[] = {dq_, dkv_, ddout, dqpos, dkpos, go, gl, dout_b, gD, glh, gdq, gdkv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        llmt__cuda_free(X, all[i]);
    free(q), free(kv), free(dout), free(outb), free(qpos), free(kpos), free(o_h), free(l_h);
    free(o_g), free(l_g), free(D_h), free(D_g), free(dq_h), free(dq_g), free(dkv_h),
        free(dkv_g);
}

static void rope_case(int cp, int me, int B, int T, int nh, int hd, int inverse)
{
    int Tl = T / cp;
    size_t stride = (size_t)nh * hd + 6, n = (size_t)B * Tl * stride;
    uint16_t *x = malloc(n * 2), *g = malloc(n * 2);
    int32_t *pos = malloc((size_t)Tl * 4);
    rand_bf(x, n, 1.0f);
    positions(pos, me, cp, T);
    uint16_t *dx = dput(x, n * 2);
    int32_t *dpos = dput(pos, (size_t)Tl * 4);
    llmt__attn_cp_rope(1, x, B, Tl, nh, hd, stride, 10000.0f, inverse, pos);
    CHECK_STATUS(llmt__cuda_attn_cp_rope(X, dx, B, Tl, nh, hd, stride, 10000.0f, inverse, dpos),
                 LLMT_OK);
    dget(g, dx, n * 2);
    size_t bad = bf_steps(g, x, n);
    printf("attn_cp_rope cp %d rank %d hd=%d inverse=%d: %zu beyond one bf16 step\n", cp, me,
           hd, inverse, bad);
    CHECK(bad == 0);
    llmt__cuda_free(X, dx);
    llmt__cuda_free(X, dpos);
    free(x), free(g), free(pos);
}

static void rows_case(int src_f32)
{
    size_t rows = 37, cols = 70, ss = 81, ds = 75;
    size_t ns = rows * ss, nd = rows * ds;
    float *sf = malloc(ns * 4);
    uint16_t *sb = malloc(ns * 2), *h = malloc(nd * 2), *g = malloc(nd * 2);
    for (size_t i = 0; i < ns; i++) {
        sf[i] = rng_f(3.0f);
        sb[i] = h_f2bf(sf[i]);
    }
    rand_bf(h, nd, 1.0f); /* the gaps between rows stay as they were */
    memcpy(g, h, nd * 2);
    void *dsrc = src_f32 ? dput(sf, ns * 4) : dput(sb, ns * 2);
    uint16_t *ddst = dput(g, nd * 2);
    llmt__attn_cp_rows(1, h, ds, src_f32 ? (const void *)sf : sb, ss, src_f32, rows, cols);
    CHECK_STATUS(llmt__cuda_attn_cp_rows(X, ddst, ds, dsrc, ss, src_f32, rows, cols), LLMT_OK);
    dget(g, ddst, nd * 2);
    int eq = !memcmp(g, h, nd * 2);
    printf("attn_cp_rows from %s: %s\n", src_f32 ? "fp32" : "bf16", eq ? "bitwise" : "DIFFERS");
    CHECK(eq);
    llmt__cuda_free(X, dsrc);
    llmt__cuda_free(X, ddst);
    free(sf), free(sb), free(h), free(g);
}

int main(void)
{
    int32_t ndev = 0;
    char err[256] = "";
    if (llmt__cuda_device_count(&ndev, err, sizeof err) != LLMT_OK || ndev == 0) {
        printf("SKIP: no CUDA device (%s)\n", err);
        return CHECK_SKIP;
    }
    const char *se = getenv("LLMT_SEED");
    if (se && *se)
        g_rng ^= strtoull(se, NULL, 10) * 0x9e3779b97f4a7c15ull;
    if (!g_rng)
        g_rng = 1;
    llmt__cuda_ctx_opts o = {0, 1, 0, 0, err, sizeof err};
    if (llmt__cuda_ctx_create(&o, &X) != LLMT_OK) {
        fprintf(stderr, "ctx create failed: %s\n", err);
        return 1;
    }
    attn_case(2, 0, 2, 32, 4, 2, 16);
    attn_case(2, 1, 2, 32, 4, 4, 64);
    attn_case(4, 3, 1, 64, 4, 2, 128);
    attn_case(4, 1, 2, 64, 2, 1, 64);
    for (int inv = 0; inv < 2; inv++) {
        rope_case(2, 1, 2, 32, 4, 64, inv);
        rope_case(4, 0, 1, 64, 2, 128, inv);
    }
    rows_case(0);
    rows_case(1);
    llmt__cuda_mem_stats ms;
    llmt__cuda_mem_stats_get(X, &ms);
    CHECK(ms.in_use == 0);
    llmt__cuda_ctx_destroy(X);
    return check_exit("gpu-cp-ops");
}
