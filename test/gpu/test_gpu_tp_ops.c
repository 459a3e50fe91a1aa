/* The vocabulary split of tensor parallelism (lib/exec/dev.h's
 * embedding_part_fwd/bwd and xent_part_max/sum/fin), op by op, on random
 * inputs:
 *
 *   test_gpu_tp_ops emul   (unit suite, any machine) the emulation's split
 *                          ops (lib/exec/vocab_part.c, bf16 storage) run
 *                          for every rank of tp 1, 2, 4 and combined as the
 *                          group's reductions combine them, against the
 *                          emulation's unsplit embedding and softmax_xent
 *                          (separate code in lib/exec/dev_emul.c); then
 *                          the cuda mode's harness with the emulation on
 *                          both sides (its bounds hold at 0)
 *   test_gpu_tp_ops cuda   (gpu suite: gpu-tp-ops; SKIP without a GPU) the
 *                          CUDA ops (cuda/kernels/vocab_part.cu) against
 *                          the emulation's on the same inputs, in a
 *                          deterministic context and in a default one
 *
 * Bounds, and why. emul: the embedding is one rounding either way (bitwise,
 * but the positional gradient, added row by row on the split side and as
 * one batch sum on the unsplit one: 1e-6 relative); the loss within 1e-5
 * relative (the split side sums exponentials in double and takes the
 * group's sum, the unsplit one sums in float); each gradient element within
 * one bf16 step of the other (2^-8 of its magnitude: the two compute the
 * softmax through different float expressions, then round to bf16).
 * cuda: the GPU follows the emulation's roundings (vocab_part.cu's top),
 * so the embedding forward, the row max and the target logit are bitwise,
 * and so is the token gradient in deterministic mode (1e-6 relative with
 * atomics); the sums of exponentials within 1e-6 relative (CUDA's expf is
 * within 2 ulp, the double sum's order differs); losses within 1e-6
 * relative + 1e-6; gradients within one bf16 step. Padding and ignored
 * rows: exactly 0 on both. Outputs start poisoned (NaN) where an op
 * overwrites. Seed: LLMT_SEED, else fixed. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}
static float rndf(float a) /* uniform in [-a, a) */
{
    return a * (2.0f * (float)(rnd() >> 8) / 16777216.0f - 1.0f);
}
static void fill_bf(llmt__bf16 *x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        x[i] = llmt__f32_to_bf16(rndf(a));
}
static void fill_f(float *x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rndf(a);
}
static float bf(llmt__bf16 h)
{
    return llmt__bf16_to_f32(h);
}

/* |a - b| <= rel * max(|a|, |b|) + abs, NaN fails; counts the misses */
static size_t close_count(const float *a, const float *b, size_t n, double rel, double abs_,
                          double *worst)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]), m = fmax(fabs(a[i]), fabs(b[i]));
        if (!(d <= rel * m + abs_))
            bad++;
        if (!(d <= *worst))
            *worst = d;
    }
    return bad;
}
/* two bf16 arrays within one bf16 step (2^-8 relative) of each other;
 * exact zeros must agree */
static size_t bf_step_count(const llmt__bf16 *a, const llmt__bf16 *b, size_t n,
                            size_t *zero_bad)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float x = bf(a[i]), y = bf(b[i]);
        if ((x == 0.0f) != (y == 0.0f))
            (*zero_bad)++;
        if (!(fabsf(x - y) <= ldexpf(fmaxf(fabsf(x), fabsf(y)), -8)))
            bad++;
    }
    return bad;
}

/* ---- a backend and its memory */

typedef struct side {
    const llmt__dev_ops *op;
    llmt__dev *d;
} side;

static void *put(side *s, const void *h, size_t bytes)
{
    void *p = NULL;
    if (s->op->alloc(s->d, &p, bytes ? bytes : 1) != LLMT_OK) {
        fprintf(stderr, "%s: alloc %zu: %s\n", s->op->name, bytes, s->op->last_error(s->d));
        exit(1);
    }
    if (h && bytes)
        CHECK_STATUS(s->op->h2d(s->d, p, h, bytes), LLMT_OK);
    else if (bytes)
        CHECK_STATUS(s->op->fill_nan(s->d, p, bytes), LLMT_OK);
    return p;
}
static void get(side *s, void *h, const void *p, size_t bytes)
{
    if (bytes)
        CHECK_STATUS(s->op->d2h(s->d, h, p, bytes), LLMT_OK);
}

/* ---- cuda: each op on the device against the emulation's */

/* misalignment: `off` elements into a larger allocation */
typedef struct emb_case {
    int B, T, C, lo, Vl, wpe, off;
} emb_case;

static void emb_vs(side *g, side *e, const emb_case *k, int det)
{
    int BT = k->B * k->T, C = k->C, Vtot = k->lo + k->Vl + 7;
    size_t nw = (size_t)k->Vl * C + k->off, np = (size_t)k->T * C + k->off;
    size_t no = (size_t)BT * C + k->off;
    llmt__bf16 *wte = malloc(nw * 2), *wpe = malloc(np * 2), *dout = malloc(no * 2);
    llmt__bf16 *o1 = malloc(no * 2), *o2 = malloc(no * 2);
    int32_t *tok = malloc((size_t)BT * 4);
    float *dw0 = malloc(nw * 4), *dp0 = malloc(np * 4);
    float *dw1 = malloc(nw * 4), *dw2 = malloc(nw * 4), *dp1 = malloc(np * 4),
          *dp2 = malloc(np * 4);
    fill_bf(wte, nw, 1.0f);
    fill_bf(wpe, np, 1.0f);
    fill_bf(dout, no, 1.0f);
    fill_f(dw0, nw, 1.0f);
    fill_f(dp0, np, 1.0f);
    for (int r = 0; r < BT; r++) /* about half in this part */
        tok[r] =
            rnd() % 2 ? k->lo + (int)(rnd() % (unsigned)k->Vl) : (int)(rnd() % (unsigned)Vtot);
    side *s[2] = {g, e};
    llmt__bf16 *outs[2] = {o1, o2};
    float *dws[2] = {dw1, dw2}, *dps[2] = {dp1, dp2};
    for (int j = 0; j < 2; j++) {
        void *dwte = put(s[j], wte, nw * 2), *dwpe = put(s[j], wpe, np * 2);
        void *ddout = put(s[j], dout, no * 2), *dtok = put(s[j], tok, (size_t)BT * 4);
        void *dout_ = put(s[j], NULL, no * 2);
        float *gw = put(s[j], dw0, nw * 4), *gp = put(s[j], dp0, np * 4);
        int o = k->off;
        CHECK_STATUS(s[j]->op->embedding_part_fwd(
                         s[j]->d, (llmt__bf16 *)dout_ + o, dtok, (llmt__bf16 *)dwte + o,
                         k->wpe ? (llmt__bf16 *)dwpe + o : NULL, k->B, k->T, C, k->lo, k->Vl),
                     LLMT_OK);
        CHECK_STATUS(s[j]->op->embedding_part_bwd(s[j]->d, gw + o, k->wpe ? gp + o : NULL,
                                                  (llmt__bf16 *)ddout + o, dtok, k->B, k->T, C,
                                                  k->lo, k->Vl),
                     LLMT_OK);
        CHECK_STATUS(s[j]->op->sync(s[j]->d), LLMT_OK);
        get(s[j], outs[j], dout_, no * 2);
        get(s[j], dws[j], gw, nw * 4);
        get(s[j], dps[j], gp, np * 4);
        void *all[] = {dwte, dwpe, ddout, dtok, dout_, gw, gp};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            s[j]->op->free(s[j]->d, all[i]);
    }
    size_t o = (size_t)k->off;
    int fwd_eq = !memcmp(o1 + o, o2 + o, (size_t)BT * C * 2);
    double w1 = 0, w2 = 0;
    size_t bw = close_count(dw1 + o, dw2 + o, nw - o, det ? 0.0 : 1e-6, det ? 0.0 : 1e-6, &w1);
    size_t bp = close_count(dp1 + o, dp2 + o, np - o, 0.0, 0.0, &w2);
    printf("embedding_part B=%d T=%d C=%d lo=%d Vl=%d wpe=%d off=%d %s: fwd %s, dwte %zu "
           "off (max %.2e), dwpe %zu off (max %.2e)\n",
           k->B, k->T, C, k->lo, k->Vl, k->wpe, k->off, det ? "det" : "atomic",
           fwd_eq ? "bitwise" : "DIFFERS", bw, w1, bp, w2);
    CHECK(fwd_eq);
    CHECK(bw == 0);
    CHECK(bp == 0);
    free(wte), free(wpe), free(dout), free(o1), free(o2), free(tok);
    free(dw0), free(dp0), free(dw1), free(dw2), free(dp1), free(dp2);
}

typedef struct xent_case {
    int N, Vl, nv, lo, off, notgt;
} xent_case;

static void xent_vs(side *g, side *e, const xent_case *k)
{
    int N = k->N, Vl = k->Vl;
    size_t nl = (size_t)N * Vl + k->off, o = (size_t)k->off;
    llmt__bf16 *lg = malloc(nl * 2), *g1 = malloc(nl * 2), *g2 = malloc(nl * 2);
    llmt__bf16 *u1 = malloc(nl * 2);
    int32_t *tg = malloc((size_t)N * 4);
    float *mx[2], *st[2], *ls[2], *ls0[2];
    for (int j = 0; j < 2; j++) {
        mx[j] = malloc((size_t)N * 4);
        st[j] = malloc((size_t)2 * N * 4);
        ls[j] = malloc((size_t)N * 4);
        ls0[j] = malloc((size_t)N * 4);
    }
    fill_bf(lg, nl, 4.0f);
    for (int n = 0; n < N; n++) { /* in the part, elsewhere, or ignored */
        unsigned c = rnd() % 8;
        tg[n] = c == 0               ? -1
                : c < 5 && k->nv > 0 ? k->lo + (int)(rnd() % (unsigned)k->nv)
                                     : (int)(rnd() % (unsigned)(k->lo + Vl + 5));
    }
    const float dloss = 1.0f / (float)N;
    side *s[2] = {g, e};
    llmt__bf16 *gr[2] = {g1, g2};
    for (int j = 0; j < 2; j++) { /* stage 1: the row max */
        llmt__bf16 *dl = put(s[j], lg, nl * 2);
        float *dmx = put(s[j], NULL, (size_t)N * 4);
        CHECK_STATUS(s[j]->op->xent_part_max(s[j]->d, dmx, dl + o, N, Vl, k->nv), LLMT_OK);
        get(s[j], mx[j], dmx, (size_t)N * 4);
        s[j]->op->free(s[j]->d, dl);
        s[j]->op->free(s[j]->d, dmx);
    }
    /* stages 2 and 3 take the emulation's mx, then its st, on both sides:
     * each op is compared on its own */
    size_t bmx = 0;
    for (int n = 0; n < N; n++)
        bmx += memcmp(&mx[0][n], &mx[1][n], 4) != 0;
    /* fin's input: the emulation's st as if another rank of the group
     * added 1 to each sum (the group's sum is positive even where this
     * part has no real column, nv = 0) */
    float *st_in = malloc((size_t)2 * N * 4);
    for (int stage = 2; stage <= 3; stage++)
        for (int j = 1; j >= 0; j--) { /* the emulation first: its st feeds fin */
            if (stage == 3 && j == 1) {
                memcpy(st_in, st[1], (size_t)2 * N * 4);
                for (int n = 0; n < N; n++)
                    st_in[n] += 1.0f;
            }
            llmt__bf16 *dl = put(s[j], lg, nl * 2);
            int32_t *dt = put(s[j], tg, (size_t)N * 4);
            float *dmx = put(s[j], mx[1], (size_t)N * 4);
            float *dst = stage == 2 ? put(s[j], NULL, (size_t)2 * N * 4)
                                    : put(s[j], st_in, (size_t)2 * N * 4);
            float *dls = put(s[j], NULL, (size_t)N * 4);
            const int32_t *tt = k->notgt ? NULL : dt;
            if (stage == 2) {
                CHECK_STATUS(
                    s[j]->op->xent_part_sum(s[j]->d, dst, dl + o, dmx, tt, N, Vl, k->nv, k->lo),
                    LLMT_OK);
                get(s[j], st[j], dst, (size_t)2 * N * 4);
            } else {
                /* dloss 0: losses only, the logits untouched */
                CHECK_STATUS(s[j]->op->xent_part_fin(s[j]->d, dls, dl + o, dmx, dst, tt, N, Vl,
                                                     k->nv, k->lo, 0.0f),
                             LLMT_OK);
                get(s[j], ls0[j], dls, (size_t)N * 4);
                if (j == 0)
                    get(s[j], u1, dl, nl * 2);
                CHECK_STATUS(s[j]->op->xent_part_fin(s[j]->d, dls, dl + o, dmx, dst, tt, N, Vl,
                                                     k->nv, k->lo, dloss),
                             LLMT_OK);
                get(s[j], ls[j], dls, (size_t)N * 4);
                get(s[j], gr[j], dl, nl * 2);
            }
            CHECK_STATUS(s[j]->op->sync(s[j]->d), LLMT_OK);
            void *all[] = {dl, dt, dmx, dst, dls};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++)
                s[j]->op->free(s[j]->d, all[i]);
        }
    double wst = 0, wl = 0;
    size_t bst = close_count(st[0], st[1], (size_t)N, 1e-6, 0.0, &wst);
    size_t btl = 0;
    for (int n = 0; n < N; n++)
        btl += memcmp(&st[0][N + n], &st[1][N + n], 4) != 0;
    size_t bl = close_count(ls[0], ls[1], (size_t)N, 1e-6, 1e-6, &wl);
    bl += close_count(ls0[0], ls[1], (size_t)N, 1e-6, 1e-6, &wl);
    size_t zb = 0, bg = bf_step_count(g1 + o, g2 + o, (size_t)N * Vl, &zb);
    int untouched = !memcmp(u1, lg, nl * 2);
    /* the emulation's gradient is 0 exactly where it must be: padding
     * past nv and ignored rows (the GPU's agreement with it is zb) */
    size_t pad_bad = 0;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < Vl; i++)
            if ((i >= k->nv || k->notgt || tg[n] < 0) && bf(g2[o + (size_t)n * Vl + i]) != 0.0f)
                pad_bad++;
    printf("xent_part N=%d Vl=%d nv=%d lo=%d off=%d%s: max %zu off, sum %zu off (max %.2e), "
           "target logit %zu off, loss %zu off (max %.2e), grad %zu beyond one bf16 step, "
           "%zu zero mismatches, logits %s at dloss 0\n",
           N, Vl, k->nv, k->lo, k->off, k->notgt ? " (no targets)" : "", bmx, bst, wst, btl, bl,
           wl, bg, zb, untouched ? "untouched" : "CHANGED");
    CHECK(bmx == 0);
    CHECK(bst == 0);
    CHECK(btl == 0);
    CHECK(bl == 0);
    CHECK(bg == 0);
    CHECK(zb == 0);
    CHECK(pad_bad == 0);
    CHECK(untouched);
    free(lg), free(g1), free(g2), free(u1), free(tg), free(st_in);
    for (int j = 0; j < 2; j++)
        free(mx[j]), free(st[j]), free(ls[j]), free(ls0[j]);
}

/* cuda: the CUDA table against the emulation; self: the emulation against
 * itself (the harness's own check, run by the emul mode: every bound holds
 * at 0) */
static int run_pair(int self)
{
    const llmt__dev_ops *cu = self ? llmt__dev_emul() : llmt__dev_cuda();
    if (!cu) {
        printf("SKIP: a build without CUDA\n");
        return CHECK_SKIP;
    }
    char err[512] = "";
    llmt__dev_opts eo = {0, 1};
    side em = {llmt__dev_emul(), NULL};
    if (em.op->create(&eo, &em.d, err, sizeof err) != LLMT_OK) {
        fprintf(stderr, "emulation: %s\n", err);
        return 1;
    }
    static const emb_case ec[] = {
        {2, 5, 37, 0, 11, 1, 0}, {3, 7, 64, 16, 16, 0, 0},
        {2, 3, 64, 8, 8, 1, 1},  {4, 16, 768, 25152, 25152, 1, 0},
        {1, 1, 8, 0, 1, 0, 0},   {8, 64, 256, 1000, 500, 1, 0},
    };
    static const xent_case xc[] = {
        {1, 8, 8, 0, 0, 0},
        {7, 37, 30, 37, 0, 0},
        {33, 64, 64, 64, 1, 0},
        {4, 32, 0, 96, 0, 0},
        {5, 128, 1, 127, 0, 0},
        {64, 1000, 997, 1000, 0, 0},
        {8, 25152, 25152, 25152, 0, 0},
        {3, 4100, 4000, 8200, 0, 0},
        {6, 40, 40, 0, 0, 1},
    };
    for (int det = 1; det >= 0; det--) {
        side g = {cu, NULL};
        llmt__dev_opts go = {0, det};
        if (cu->create(&go, &g.d, err, sizeof err) != LLMT_OK) {
            printf("SKIP: %s\n", err);
            em.op->destroy(em.d);
            return CHECK_SKIP;
        }
        for (size_t i = 0; i < sizeof ec / sizeof *ec; i++)
            emb_vs(&g, &em, &ec[i], det);
        if (det)
            for (size_t i = 0; i < sizeof xc / sizeof *xc; i++)
                xent_vs(&g, &em, &xc[i]);
        size_t in_use = 0, peak = 0;
        cu->mem_stats(g.d, &in_use, &peak);
        CHECK(in_use == 0);
        cu->destroy(g.d);
    }
    em.op->destroy(em.d);
    return self ? 0 : check_exit("gpu-tp-ops");
}

/* ---- emul: the split ops over the ranks of tp against the unsplit ops */

#define EV 97   /* vocabulary */
#define EVP 128 /* padded */

static void emul_vs_unsplit(side *e, int tp, int wpe_on)
{
    const int B = 3, T = 9, C = 40, BT = B * T, N = BT, Vl = EVP / tp;
    size_t nw = (size_t)EVP * C, np = (size_t)T * C, no = (size_t)BT * C, nl = (size_t)N * EVP;
    llmt__bf16 *wte = malloc(nw * 2), *wpe = malloc(np * 2), *dout = malloc(no * 2);
    llmt__bf16 *ref = malloc(no * 2), *part = malloc(no * 2), *sum = malloc(no * 2);
    int32_t *tok = malloc((size_t)BT * 4), *tg = malloc((size_t)N * 4);
    float *dw_ref = calloc(nw, 4), *dw = calloc(nw, 4), *dp_ref = malloc(np * 4),
          *dp = malloc(np * 4);
    llmt__bf16 *lg = malloc(nl * 2), *lgr = malloc(nl * 2), *lgs = malloc(nl * 2);
    float *lref = malloc((size_t)N * 4), *mx = malloc((size_t)N * 4),
          *mxr = malloc((size_t)N * 4);
    float *st = malloc((size_t)2 * N * 4), *str = malloc((size_t)2 * N * 4);
    float *ls = malloc((size_t)N * 4), *lsum = calloc((size_t)N, 4);
    fill_bf(wte, nw, 1.0f);
    fill_bf(wpe, np, 1.0f);
    fill_bf(dout, no, 1.0f);
    fill_f(dp_ref, np, 1.0f);
    memcpy(dp, dp_ref, np * 4);
    fill_bf(lg, nl, 4.0f);
    for (int r = 0; r < BT; r++) {
        tok[r] = (int)(rnd() % EV);
        tg[r] = rnd() % 9 == 0 ? -1 : (int)(rnd() % EV);
    }
    const float dloss = 1.0f / (float)N;
    /* the unsplit references */
    CHECK_STATUS(e->op->embedding_fwd(e->d, ref, tok, wte, wpe_on ? wpe : NULL, B, T, C),
                 LLMT_OK);
    CHECK_STATUS(e->op->embedding_bwd(e->d, dw_ref, wpe_on ? dp_ref : NULL, dout, tok, B, T, C),
                 LLMT_OK);
    memcpy(lgr, lg, nl * 2);
    CHECK_STATUS(e->op->softmax_xent(e->d, lref, lgr, tg, N, EV, EVP, dloss), LLMT_OK);
    /* the group: rank r holds rows / columns [r Vl, (r + 1) Vl); wpe on
     * rank 0 only (as the engine); the activation sum in bf16 */
    memset(sum, 0, no * 2);
    for (int i = 0; i < N; i++)
        mx[i] = -FLT_MAX;
    for (int r = 0; r < tp; r++) {
        int lo = r * Vl;
        const void *w0 = wpe_on && r == 0 ? wpe : NULL;
        CHECK_STATUS(e->op->embedding_part_fwd(e->d, part, tok, wte + (size_t)lo * C, w0, B, T,
                                               C, lo, Vl),
                     LLMT_OK);
        for (size_t i = 0; i < no; i++)
            sum[i] = llmt__f32_to_bf16(bf(sum[i]) + bf(part[i]));
        CHECK_STATUS(e->op->embedding_part_bwd(e->d, dw + (size_t)lo * C,
                                               wpe_on && r == 0 ? dp : NULL, dout, tok, B, T, C,
                                               lo, Vl),
                     LLMT_OK);
    }
    /* the logits' columns of each rank, packed [N, Vl] */
    llmt__bf16 *pl[4];
    int nvs[4];
    for (int r = 0; r < tp; r++) {
        int lo = r * Vl, nv = EV - lo < 0 ? 0 : EV - lo > Vl ? Vl : EV - lo;
        nvs[r] = nv;
        pl[r] = malloc((size_t)N * Vl * 2);
        for (int n = 0; n < N; n++)
            memcpy(pl[r] + (size_t)n * Vl, lg + (size_t)n * EVP + lo, (size_t)Vl * 2);
        CHECK_STATUS(e->op->xent_part_max(e->d, mxr, pl[r], N, Vl, nv), LLMT_OK);
        for (int n = 0; n < N; n++)
            mx[n] = fmaxf(mx[n], mxr[n]);
    }
    memset(st, 0, (size_t)2 * N * 4);
    for (int r = 0; r < tp; r++) {
        CHECK_STATUS(e->op->xent_part_sum(e->d, str, pl[r], mx, tg, N, Vl, nvs[r], r * Vl),
                     LLMT_OK);
        for (int i = 0; i < 2 * N; i++)
            st[i] += str[i];
    }
    for (int r = 0; r < tp; r++) {
        CHECK_STATUS(
            e->op->xent_part_fin(e->d, ls, pl[r], mx, st, tg, N, Vl, nvs[r], r * Vl, dloss),
            LLMT_OK);
        for (int n = 0; n < N; n++) {
            memcpy(lgs + (size_t)n * EVP + r * Vl, pl[r] + (size_t)n * Vl, (size_t)Vl * 2);
            if (r == 0)
                lsum[n] = ls[n];
            else
                CHECK(ls[n] == lsum[n]); /* every rank has the same losses */
        }
        free(pl[r]);
    }
    int fwd_eq = !memcmp(sum, ref, no * 2), dw_eq = !memcmp(dw, dw_ref, nw * 4);
    double wdp = 0, wl = 0;
    size_t bdp = wpe_on ? close_count(dp, dp_ref, np, 1e-6, 1e-6, &wdp) : 0;
    size_t bl = close_count(lsum, lref, (size_t)N, 1e-5, 1e-6, &wl);
    size_t zb = 0, bg = bf_step_count(lgs, lgr, nl, &zb), diff = 0;
    for (size_t i = 0; i < nl; i++)
        diff += lgs[i] != lgr[i];
    printf("emul tp %d wpe %d vs unsplit: embedding fwd %s, dwte %s, dwpe %zu off (max %.2e); "
           "loss %zu off (max %.2e); grad %zu beyond one bf16 step, %zu zero mismatches, %zu "
           "of %zu not bitwise\n",
           tp, wpe_on, fwd_eq ? "bitwise" : "DIFFERS", dw_eq ? "bitwise" : "DIFFERS", bdp, wdp,
           bl, wl, bg, zb, diff, nl);
    CHECK(fwd_eq);
    CHECK(dw_eq);
    CHECK(bdp == 0);
    CHECK(bl == 0);
    CHECK(bg == 0);
    CHECK(zb == 0);
    free(wte), free(wpe), free(dout), free(ref), free(part), free(sum), free(tok), free(tg);
    free(dw_ref), free(dw), free(dp_ref), free(dp), free(lg), free(lgr), free(lgs);
    free(lref), free(mx), free(mxr), free(st), free(str), free(ls), free(lsum);
}

static int run_emul(void)
{
    char err[512] = "";
    llmt__dev_opts eo = {0, 1};
    side em = {llmt__dev_emul(), NULL};
    if (em.op->create(&eo, &em.d, err, sizeof err) != LLMT_OK) {
        fprintf(stderr, "emulation: %s\n", err);
        return 1;
    }
    int tps[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++)
        for (int w = 0; w < 2; w++)
            emul_vs_unsplit(&em, tps[i], w);
    em.op->destroy(em.d);
    run_pair(1);
    return check_exit("vp-ops-emul");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    const char *seed = getenv("LLMT_SEED");
    if (seed && *seed)
        g_rng = strtoull(seed, NULL, 10) * 2654435761ull + 1;
    printf("seed state %llu (LLMT_SEED repeats a run)\n", (unsigned long long)g_rng);
    if (!strcmp(mode, "emul"))
        return run_emul();
    if (!strcmp(mode, "cuda"))
        return run_pair(0);
    fprintf(stderr, "usage: test_gpu_tp_ops emul|cuda\n");
    return 2;
}
