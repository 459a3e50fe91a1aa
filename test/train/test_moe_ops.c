/* One MoE layer through the op table (lib/train/moe_dev.c with the MoE ops
 * of lib/exec/moe_ops.c, the gemms and SwiGLU of the backend) against the
 * host fp32 layer (lib/train/moe.c, moe_shared.c) on random inputs:
 *
 *   fp32 CPU table (lib/exec/dev_cpu.c): y, dx and every gradient (router,
 *     experts, shared experts) within 1e-5 of the largest magnitude of
 *     the reference's (the same arithmetic up to the order OpenBLAS sums
 *     in and where the shared experts' output is added), kept counts,
 *     drops, aux and z equal (aux and z within 1e-6 relative);
 *   bf16 emulation (lib/exec/dev_emul.c) on inputs and weights rounded to
 *     bf16, the reference on the same rounded values: y, dx and gradients
 *     within 2e-2 of the largest magnitude (each bf16 store rounds at
 *     2^-9 relative, and the layer stores the packed rows, h1, h3, the
 *     SwiGLU, the experts' outputs, y and each backward counterpart:
 *     a few such roundings), routing equal (the logits are fp32 sums of the
 *     same bf16 products);
 * with a binding capacity (drops), dropless with a shared expert, and raw
 * gates with two shared experts. On both tables the layer runs at 2
 * threads (its experts as one region over experts: the table's
 * moe_experts) and again at 1 (the per-expert gemm and swiglu calls):
 * y, dx and every gradient equal bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "check.h"
#include "exec/dev.h"
#include "train/moe.h"
#include "train/moe_dev.h"
#include "train/moe_shared.h"

enum { N = 40, C = 16, F = 12, E = 4, K = 2 };

typedef struct ocase {
    const char *name;
    float capacity; /* 0: dropless */
    int shared, raw;
} ocase;

static uint64_t g_rng = 0x5eed;
static float rnd(float scale)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return scale * ((float)((g_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f);
}

/* The layer's tensors in one fp32 array: router [E,C], w1, w3 [E*F,C],
 * w2 [E*C,F], sw1, sw3 [Fs,C], sw2 [C,Fs]. */
typedef struct lay {
    size_t router, w1, w3, w2, sw1, sw3, sw2, total;
} lay;

static lay layout(int Fs)
{
    lay o;
    o.router = 0;
    o.w1 = o.router + (size_t)E * C;
    o.w3 = o.w1 + (size_t)E * F * C;
    o.w2 = o.w3 + (size_t)E * F * C;
    o.sw1 = o.w2 + (size_t)E * C * F;
    o.sw3 = o.sw1 + (size_t)Fs * C;
    o.sw2 = o.sw3 + (size_t)Fs * C;
    o.total = o.sw2 + (size_t)C * Fs;
    return o;
}

static double worst_rel(const float *a, const float *ref, size_t n)
{
    double m = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)ref[i]));
        double x = fabs((double)a[i] - ref[i]);
        if (!(x <= d))
            d = x; /* NaN shows */
    }
    return m > 0 ? d / m : d;
}

static float rbf(float x)
{
    return llmt__bf16_to_f32(llmt__f32_to_bf16(x));
}

/* Host array (fp32) into backend memory of the table's storage type. */
static void *to_dev(const llmt__dev_ops *op, llmt__dev *d, const float *x, size_t n)
{
    void *p = NULL;
    size_t es = op->store == LLMT_DTYPE_FP32 ? 4 : 2;
    CHECK_STATUS(op->alloc(d, &p, n * es), LLMT_OK);
    if (!p)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (es == 4)
            ((float *)p)[i] = x[i];
        else
            ((llmt__bf16 *)p)[i] = llmt__f32_to_bf16(x[i]);
    }
    return p;
}

static void from_dev(const llmt__dev_ops *op, const void *p, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = op->store == LLMT_DTYPE_FP32 ? ((const float *)p)[i]
                                            : llmt__bf16_to_f32(((const llmt__bf16 *)p)[i]);
}

static void run_case(const ocase *oc, const llmt__dev_ops *op)
{
    int bf = op->store != LLMT_DTYPE_FP32, Fs = oc->shared * F;
    llmt__moe_shape sh = {
        E, K, C, F, oc->capacity > 0 ? oc->capacity : 1.0f, oc->capacity <= 0, oc->raw};
    lay o = layout(Fs);
    size_t NC = (size_t)N * C;
    float *w = malloc(o.total * 4), *x = malloc(NC * 4), *dy = malloc(NC * 4);
    float *gr = calloc(o.total, 4), *yr = malloc(NC * 4), *dxr = malloc(NC * 4);
    float *gd = NULL, *yd = calloc(NC, 4), *dxd = calloc(NC, 4);
    for (size_t i = 0; i < o.total; i++)
        w[i] = rnd(i < o.w1 ? 0.5f : 0.3f);
    for (size_t i = 0; i < NC; i++) {
        x[i] = rnd(1.0f);
        dy[i] = rnd(0.1f);
    }
    if (bf) { /* both sides on the values bf16 holds */
        for (size_t i = 0; i < o.total; i++)
            w[i] = rbf(w[i]);
        for (size_t i = 0; i < NC; i++) {
            x[i] = rbf(x[i]);
            dy[i] = rbf(dy[i]);
        }
    }
    const float ac = 0.01f, zc = 0.001f;
    /* the reference: moe.c and moe_shared.c */
    llmt__moe *rs = llmt__moe_new(&sh, N);
    llmt__moe_shared *ss = Fs ? llmt__moe_shared_new(C, Fs, N) : NULL;
    llmt__moe_w rw = {w + o.router, w + o.w1, w + o.w3, w + o.w2};
    llmt__moe_w rg = {gr + o.router, gr + o.w1, gr + o.w3, gr + o.w2};
    CHECK(rs != NULL);
    CHECK_STATUS(llmt__moe_fwd(rs, &rw, x, yr, N), LLMT_OK);
    if (ss)
        llmt__moe_shared_fwd(ss, w + o.sw1, w + o.sw3, w + o.sw2, x, yr, N);
    CHECK_STATUS(llmt__moe_bwd(rs, &rw, &rg, x, dy, dxr, ac, zc), LLMT_OK);
    if (ss)
        llmt__moe_shared_bwd(ss, w + o.sw1, w + o.sw3, w + o.sw2, gr + o.sw1, gr + o.sw3,
                             gr + o.sw2, x, dy, dxr);
    /* the op table */
    llmt__dev *d = NULL;
    llmt__dev_opts dopt = {0, 1};
    char msg[256] = "";
    CHECK_STATUS(op->create(&dopt, &d, msg, sizeof msg), LLMT_OK);
    llmt_err err;
    memset(&err, 0, sizeof err);
    llmt__moe_dctx *cx = NULL;
    llmt__moe_dlay *pl = NULL;
    llmt__moe *s = llmt__moe_new_rows(&sh, N, 0);
    CHECK_STATUS(llmt__moe_dctx_new(op, d, &err, &sh, Fs, N, &cx), LLMT_OK);
    if (cx)
        CHECK_STATUS(llmt__moe_dlay_new(cx, &pl), LLMT_OK);
    void *wd = to_dev(op, d, w, o.total), *xd = to_dev(op, d, x, NC),
         *dyd = to_dev(op, d, dy, NC);
    void *yb = to_dev(op, d, yd, NC), *dxb = to_dev(op, d, dxd, NC);
    CHECK_STATUS(op->alloc(d, (void **)&gd, o.total * 4), LLMT_OK);
    if (!cx || !pl || !s || !wd || !xd || !dyd || !yb || !dxb || !gd)
        goto done;
    memset(gd, 0, o.total * 4);
    size_t es = bf ? 2 : 4;
    char *wb = wd;
    llmt__moe_dw pw = {wb + o.router * es,
                       wb + o.w1 * es,
                       wb + o.w3 * es,
                       wb + o.w2 * es,
                       Fs ? wb + o.sw1 * es : NULL,
                       Fs ? wb + o.sw3 * es : NULL,
                       Fs ? wb + o.sw2 * es : NULL};
    llmt__moe_dw pg = {gd + o.router,
                       gd + o.w1,
                       gd + o.w3,
                       gd + o.w2,
                       Fs ? gd + o.sw1 : NULL,
                       Fs ? gd + o.sw3 : NULL,
                       Fs ? gd + o.sw2 : NULL};
#ifdef _OPENMP
    int nth = omp_get_max_threads();
    omp_set_num_threads(2); /* the experts as one region over experts */
#endif
    CHECK_STATUS(llmt__moe_dev_fwd(cx, pl, s, &pw, xd, yb, N), LLMT_OK);
    CHECK_STATUS(llmt__moe_dev_bwd(cx, pl, s, &pw, &pg, xd, dyd, dxb, ac, zc), LLMT_OK);
    from_dev(op, yb, yd, NC);
    from_dev(op, dxb, dxd, NC);
#ifdef _OPENMP
    /* the region over experts (the table's moe_experts) against the
     * per-expert gemm and swiglu calls of one thread: bit for bit (each
     * expert's GEMMs are whole on its thread; exec's GEMM split is by
     * output rows or columns, so every element sums in the same order) */
    CHECK(op->moe_experts != NULL);
    CHECK(llmt__moe_over_experts(s->kept, E)); /* the region ran */
    {
        float *g1 = NULL, *y1 = calloc(NC, 4), *dx1 = calloc(NC, 4);
        void *yb1 = to_dev(op, d, y1, NC), *dxb1 = to_dev(op, d, dx1, NC);
        CHECK_STATUS(op->alloc(d, (void **)&g1, o.total * 4), LLMT_OK);
        if (g1 && yb1 && dxb1) {
            memset(g1, 0, o.total * 4);
            llmt__moe_dw pg1 = pg;
            void **gp[] = {&pg1.router, &pg1.w1,  &pg1.w3, &pg1.w2,
                           &pg1.sw1,    &pg1.sw3, &pg1.sw2};
            for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
                if (*gp[i])
                    *gp[i] = g1 + ((float *)*gp[i] - gd);
            omp_set_num_threads(1);
            CHECK(!llmt__moe_over_experts(s->kept, E));
            CHECK_STATUS(llmt__moe_dev_fwd(cx, pl, s, &pw, xd, yb1, N), LLMT_OK);
            CHECK_STATUS(llmt__moe_dev_bwd(cx, pl, s, &pw, &pg1, xd, dyd, dxb1, ac, zc),
                         LLMT_OK);
            from_dev(op, yb1, y1, NC);
            from_dev(op, dxb1, dx1, NC);
            CHECK(memcmp(y1, yd, NC * 4) == 0);
            CHECK(memcmp(dx1, dxd, NC * 4) == 0);
            CHECK(memcmp(g1, gd, o.total * 4) == 0);
        }
        void *b1[] = {g1, yb1, dxb1};
        for (size_t i = 0; i < 3; i++)
            if (b1[i])
                op->free(d, b1[i]);
        free(y1);
        free(dx1);
    }
    omp_set_num_threads(nth);
#endif
    for (int e = 0; e < E; e++)
        CHECK_EQ_INT(s->kept[e], rs->kept[e]);
    CHECK_EQ_INT(s->dropped, rs->dropped);
    CHECK_CLOSE(s->aux, rs->aux, bf ? 1e-3 : 1e-6, 0);
    CHECK_CLOSE(s->z, rs->z, bf ? 1e-3 : 1e-6, 0);
    double tol = bf ? 2e-2 : 1e-5;
    struct {
        const char *name;
        size_t at, n;
    } parts[] = {{"router", o.router, (size_t)E * C},  {"w1", o.w1, (size_t)E * F * C},
                 {"w3", o.w3, (size_t)E * F * C},      {"w2", o.w2, (size_t)E * C * F},
                 {"shared w1", o.sw1, (size_t)Fs * C}, {"shared w3", o.sw3, (size_t)Fs * C},
                 {"shared w2", o.sw2, (size_t)C * Fs}};
    double wy = worst_rel(yd, yr, NC), wx = worst_rel(dxd, dxr, NC), wg = 0;
    const char *wn = "";
    CHECK(wy <= tol);
    CHECK(wx <= tol);
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (!parts[i].n)
            continue;
        double r = worst_rel(gd + parts[i].at, gr + parts[i].at, parts[i].n);
        CHECK(r <= tol);
        if (!(r <= wg)) {
            wg = r;
            wn = parts[i].name;
        }
    }
    printf("%-36s %-8s kept %lld %lld %lld %lld dropped %lld: y %.2e dx %.2e grads %.2e (%s) "
           "of the largest (tol %.0e)\n",
           oc->name, op->name, (long long)s->kept[0], (long long)s->kept[1],
           (long long)s->kept[2], (long long)s->kept[3], (long long)s->dropped, wy, wx, wg, wn,
           tol);
    if (oc->capacity > 0 && oc->capacity < 1.1f)
        CHECK(rs->dropped > 0); /* the capacity binds */
done:
    if (!cx || !pl)
        fprintf(stderr, "%s: %s\n", oc->name, err.msg);
    void *bufs[] = {wd, xd, dyd, yb, dxb, gd};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            op->free(d, bufs[i]);
    llmt__moe_dlay_free(cx, pl);
    llmt__moe_dctx_free(cx);
    if (d)
        op->destroy(d);
    llmt__moe_free(s);
    llmt__moe_free(rs);
    llmt__moe_shared_free(ss);
    free(w);
    free(x);
    free(dy);
    free(gr);
    free(yr);
    free(dxr);
    free(yd);
    free(dxd);
}

int main(void)
{
    static const ocase cases[] = {
        {"capacity 1.0", 1.0f, 0, 0},
        {"dropless, 1 shared expert", 0.0f, 1, 0},
        {"raw gates, capacity 1.25, 2 shared", 1.25f, 2, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], llmt__dev_cpu());
        run_case(&cases[i], llmt__dev_emul());
    }
    return check_exit("moe-ops");
}
