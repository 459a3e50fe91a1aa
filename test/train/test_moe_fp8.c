/* fp8 GEMMs for the routed experts (lib/train/moe_dev.c, doc/fp8.md
 * "Mixture of experts") on the bf16 emulation (lib/exec/dev_emul.c):
 *
 *   padding: one projection stack (3 experts receiving 5, 0 and 19 rows)
 *     through llmt__moe_dev_experts_fwd / _bwd on a table whose GEMM
 *     counts the fp8 GEMMs and checks cuBLASLt's rule (every dimension a
 *     multiple of 16: each expert's rows are padded with zero rows; run
 *     twice: with a context made for those rows, and for 1 row, whose
 *     padded scratch then grows inside the call), against
 *     a host reference of the same quantisation without padding (codes of
 *     fp8.h's encoder, products in double): h1, h3, ye, dact, dxe within
 *     the bf16 stores' rounding (2^-8 / 2^-7 of the largest magnitude), the
 *     fp32 weight gradients within 1e-5, the expert with no rows' gradient
 *     blocks untouched, rows past the last real one untouched, the amaxes
 *     recorded equal max |x| of each tensor (the up projection's input
 *     left to the gate's: one tensor);
 *   a small Llama (width 32, 2 MoE layers of 4 experts of 32, top-2,
 *     dropless, one shared expert), 10 steps of 2 micro-batches: fp8 against
 *     the bf16 MoE run from the same weights, losses within fp8's bound of
 *     test_device_trainer.c (0.05 + 2%) and not all equal (fp8 acting); the
 *     last micro-batch's fp8 GEMMs counted: 2 per layer (qkv, proj) + 3 per
 *     busy expert forward, 4 + 6 per busy expert backward; each MoE layer's
 *     8 expert tensors' scales moved off 1 (its up projection's input
 *     scale stays 1: it reads the gate's codes); the same fp8 run on the
 *     emulation's table marked as device memory (host_memory 0: the path
 *     CUDA takes) equal bit for bit;
 *   layouts (ranks as threads): dp 2 x ep 2, tp 2 and pp 2 in fp8 against
 *     one fp8 rank on the same global batch: losses within 2^-9 relative
 *     and masters within 2 x lr x steps (test_moe_emul.c's and
 *     test_device_dp.c's fp8 bounds), the scales after step 1 equal to
 *     one rank's bit for bit (amaxes maximised over the groups);
 *   checkpoint: an fp8 MoE run saved at step 5 and read into a fresh
 *     trainer continues bit for bit (the recipe state, expert slots
 *     included, has the dense model's shape: 3 x layers x 5 rows). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/dev.h"
#include "exec/fp8.h"
#include "llmtrain.h"
#include "moe_dev_fixture.h"
#include "moe_fixture.h"
#include "rank_fixture.h"
#include "train/device.h"
#include "train/moe_dev_impl.h"

enum { B = 2, T = 16, V = 61, ACC = 2, STEPS = 10, E = 4, K = 2, FE = 32, L = 2 };
#define LR 1e-3f
_Static_assert(STEPS <= MOE_DEV_MAX_STEPS, "a layout rank keeps STEPS losses");

static int32_t g_in[(STEPS + 1) * 2 * ACC * B * T], g_tg[(STEPS + 1) * 2 * ACC * B * T];

/* ------------------------------------------------------------ padding */

static const llmt__dev_ops *g_em;
static int g_f8, g_bf, g_bad;

/* the emulation's GEMM, counting fp8 GEMMs and holding them to
 * cuBLASLt's fp8 rule (M, N, K multiples of 16) */
static llmt_status strict_gemm(llmt__dev *d, const llmt__gemm_args *a)
{
    if (a->ab_type == LLMT_GEMM_E4M3 || a->ab_type == LLMT_GEMM_E5M2) {
        g_f8++;
        if (a->M % 16 || a->N % 16 || a->K % 16) {
            g_bad++;
            fprintf(stderr, "fp8 gemm M=%d N=%d K=%d: not multiples of 16\n", a->M, a->N, a->K);
        }
    } else {
        g_bf++;
    }
    return g_em->gemm(d, a);
}

static uint64_t g_rng = 0xf8f8;
static float rnd(float scale)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return scale * ((float)((g_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f);
}

enum { PE = 3, PC = 32, PF = 32, PR = 24, PX = 8 }; /* PX: rows past the last */
static const int64_t g_nr[PE] = {5, 0, 19}, g_r0[PE] = {0, 5, 5};

static llmt__bf16 *bf_new(const llmt__dev_ops *op, llmt__dev *d, size_t n, float scale)
{
    llmt__bf16 *p = NULL;
    CHECK_STATUS(op->alloc(d, (void **)&p, n * 2), LLMT_OK);
    for (size_t i = 0; p && i < n; i++)
        p[i] = llmt__f32_to_bf16(rnd(scale));
    return p;
}

static float bf(const llmt__bf16 *p, size_t i)
{
    return llmt__bf16_to_f32(p[i]);
}

/* The dequantised value of x under tensor t's scale s (fp8.h's codes). */
static double dq(float x, float s, int e5)
{
    return (double)llmt__fp8_decode(llmt__fp8_encode(x * s, e5), e5) * (double)(1.0f / s);
}

/* out[M,N] = sum_k dq(a[m,k]) dq(b[n,k]), a and b bf16 with their strides */
static double dot(const llmt__bf16 *a, size_t as, float sa, int a5, const llmt__bf16 *b,
                  size_t bs, float sb, int k)
{
    double acc = 0;
    for (int i = 0; i < k; i++)
        acc += dq(bf(a, i * as), sa, a5) * dq(bf(b, i * bs), sb, 0);
    return acc;
}

static double g_worst;
static void close_to(const char *what, double got, double want, double mag, double tol)
{
    double d = fabs(got - want) / mag;
    if (!(d <= g_worst))
        g_worst = d;
    if (!(d <= tol)) {
        CHECK(!"padded expert result off the host reference");
        fprintf(stderr, "%s: %.9g vs %.9g (|d| / max %.3g > %.3g)\n", what, got, want, d, tol);
    }
}

static float maxabs_bf(const llmt__bf16 *p, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmaxf(m, fabsf(bf(p, i)));
    return m;
}

/* nmax: the rows the context is made for; 1 makes the call's padded rows
 * exceed what set_fp8 sized, so the scratch grows during the call. */
static void padding(int nmax)
{
    static llmt__dev_ops op;
    g_em = llmt__dev_emul();
    op = *g_em;
    op.gemm = strict_gemm;
    llmt__dev *d = NULL;
    char msg[256];
    llmt__dev_opts dopt = {0, 1};
    CHECK_STATUS(op.create(&dopt, &d, msg, sizeof msg), LLMT_OK);
    llmt_err err;
    memset(&err, 0, sizeof err);
    llmt__moe_shape sh = {PE, 1, PC, PF, 1.0f, 1, 0};
    llmt__moe_dctx *x = NULL;
    CHECK_STATUS(llmt__moe_dctx_new(&op, d, &err, &sh, 0, nmax, &x), LLMT_OK);
    if (!x) {
        fprintf(stderr, "padding: %s\n", err.msg);
        return;
    }
    /* 9 tensors: slots 0..2 (gate, up, down), inputs 2s, weights 2s + 1,
     * gradients 6 + s (E5M2) */
    float sc[9] = {16, 1024, 7, 1024, 64, 1024, 4096, 2048, 8192}, inv[9 * 4] = {0};
    float *dsc = NULL, *dinv = NULL, *dam = NULL;
    CHECK_STATUS(op.alloc(d, (void **)&dsc, sizeof sc), LLMT_OK);
    CHECK_STATUS(op.alloc(d, (void **)&dinv, sizeof inv), LLMT_OK);
    CHECK_STATUS(op.alloc(d, (void **)&dam, 9 * sizeof(float)), LLMT_OK);
    for (int i = 0; i < 9; i++) {
        inv[4 * i] = 1.0f / sc[i];
        dam[i] = -1.0f; /* not recorded */
    }
    memcpy(dsc, sc, sizeof sc);
    memcpy(dinv, inv, sizeof inv);
    int row = 0, gemms = 0, bwd = 0;
    llmt__moe_fp8 f = {dsc, dinv, 4, dam, &row, 9, 3, 0, 6, 1, &gemms, &bwd};
    CHECK_STATUS(llmt__moe_dctx_set_fp8(x, &f), LLMT_OK);
    llmt__moe_dctx_set_layer(x, 0);
    size_t RC = (size_t)(PR + PX) * PC, RF = (size_t)(PR + PX) * PF, W = (size_t)PE * PF * PC;
    llmt__bf16 *xe = bf_new(&op, d, RC, 1.0f), *h1 = bf_new(&op, d, RF, 3.0f),
               *h3 = bf_new(&op, d, RF, 3.0f), *act = bf_new(&op, d, RF, 3.0f),
               *ye = bf_new(&op, d, RC, 3.0f), *w1 = bf_new(&op, d, W, 0.2f),
               *w3 = bf_new(&op, d, W, 0.2f), *w2 = bf_new(&op, d, W, 0.2f),
               *dye = bf_new(&op, d, RC, 0.01f), *dact = bf_new(&op, d, RF, 3.0f),
               *dh1 = bf_new(&op, d, RF, 3.0f), *dh3 = bf_new(&op, d, RF, 3.0f),
               *dxe = bf_new(&op, d, RC, 3.0f);
    /* the rows past the last real one: their sentinels must stay */
    llmt__bf16 keep[4][PX * PC];
    llmt__bf16 *outs[4] = {h1, ye, dact, dxe};
    for (int i = 0; i < 4; i++)
        memcpy(keep[i], outs[i] + (size_t)PR * PC, sizeof keep[i]);
    float *g1 = NULL, *g3 = NULL, *g2 = NULL;
    CHECK_STATUS(op.alloc(d, (void **)&g1, W * 4), LLMT_OK);
    CHECK_STATUS(op.alloc(d, (void **)&g3, W * 4), LLMT_OK);
    CHECK_STATUS(op.alloc(d, (void **)&g2, W * 4), LLMT_OK);
    for (size_t i = 0; i < W; i++)
        g1[i] = g3[i] = g2[i] = 0.5f;
    llmt__moe_dw w = {NULL, w1, w3, w2, NULL, NULL, NULL},
                 g = {NULL, g1, g3, g2, NULL, NULL, NULL};
    g_f8 = g_bf = g_bad = 0;
    CHECK_STATUS(llmt__moe_dev_experts_fwd(x, &w, PE, g_r0, g_nr, xe, h1, h3, act, ye),
                 LLMT_OK);
    int f8_fwd = g_f8;
    CHECK_STATUS(llmt__moe_dev_experts_bwd(x, &w, &g, PE, g_r0, g_nr, xe, h1, h3, act, dye,
                                           dact, dh1, dh3, dxe),
                 LLMT_OK);
    if (err.status != LLMT_OK)
        fprintf(stderr, "padding: %s\n", err.msg);
    /* every expert GEMM fp8 with padded dimensions: 3 forward and 6
     * backward GEMMs for each of the 2 experts with rows */
    CHECK_EQ_INT(g_bad, 0);
    CHECK_EQ_INT(g_bf, 0);
    CHECK_EQ_INT(f8_fwd, 6);
    CHECK_EQ_INT(g_f8, 18);
    CHECK_EQ_INT(gemms, 6);
    CHECK_EQ_INT(bwd, 12);
    g_worst = 0;
    double wg = 0;
    float m1 = maxabs_bf(h1, (size_t)PR * PF), m3 = maxabs_bf(h3, (size_t)PR * PF),
          my = maxabs_bf(ye, (size_t)PR * PC), ma = maxabs_bf(dact, (size_t)PR * PF),
          mx = maxabs_bf(dxe, (size_t)PR * PC);
    for (int e = 0; e < PE; e++) {
        const llmt__bf16 *w1e = w1 + (size_t)e * PF * PC, *w3e = w3 + (size_t)e * PF * PC,
                         *w2e = w2 + (size_t)e * PC * PF;
        for (int64_t r = g_r0[e]; r < g_r0[e] + g_nr[e]; r++) {
            const llmt__bf16 *xr = xe + r * PC, *ar = act + r * PF, *dr = dye + r * PC,
                             *d1 = dh1 + r * PF, *d3 = dh3 + r * PF;
            for (int j = 0; j < PF; j++) {
                close_to("h1", bf(h1, r * PF + j),
                         dot(xr, 1, sc[0], 0, w1e + j * PC, 1, sc[1], PC), m1, 1.0 / 256);
                close_to("h3", bf(h3, r * PF + j),
                         dot(xr, 1, sc[0], 0, w3e + j * PC, 1, sc[3], PC), m3, 1.0 / 256);
                close_to("dact", bf(dact, r * PF + j),
                         dot(dr, 1, sc[8], 1, w2e + j, PF, sc[5], PC), ma, 1.0 / 256);
            }
            for (int c = 0; c < PC; c++) {
                close_to("ye", bf(ye, r * PC + c),
                         dot(ar, 1, sc[4], 0, w2e + c * PF, 1, sc[5], PF), my, 1.0 / 256);
                double v = dot(d1, 1, sc[6], 1, w1e + c, PC, sc[1], PF) +
                           dot(d3, 1, sc[7], 1, w3e + c, PC, sc[3], PF);
                close_to("dxe", bf(dxe, r * PC + c), v, mx, 1.0 / 128);
            }
        }
        /* the weight gradients: 0.5 + the expert's rows' sum (none: 0.5) */
        double gw = g_worst;
        g_worst = wg;
        for (int i = 0; i < PF; i++)
            for (int c = 0; c < PC; c++) {
                double s1 = 0, s3 = 0, s2 = 0;
                for (int64_t r = g_r0[e]; r < g_r0[e] + g_nr[e]; r++) {
                    double xq = dq(bf(xe, r * PC + c), sc[0], 0);
                    s1 += dq(bf(dh1, r * PF + i), sc[6], 1) * xq;
                    s3 += dq(bf(dh3, r * PF + i), sc[7], 1) * xq;
                    s2 += dq(bf(dye, r * PC + c), sc[8], 1) * dq(bf(act, r * PF + i), sc[4], 0);
                }
                size_t o = (size_t)e * PF * PC;
                close_to("gw1", g1[o + (size_t)i * PC + c], 0.5 + s1, 1.0, 1e-5);
                close_to("gw3", g3[o + (size_t)i * PC + c], 0.5 + s3, 1.0, 1e-5);
                close_to("gw2", g2[o + (size_t)c * PF + i], 0.5 + s2, 1.0, 1e-5);
                if (g_nr[e] == 0)
                    CHECK(g1[o + (size_t)i * PC + c] == 0.5f &&
                          g3[o + (size_t)i * PC + c] == 0.5f &&
                          g2[o + (size_t)c * PF + i] == 0.5f);
            }
        wg = g_worst;
        g_worst = gw;
    }
    for (int i = 0; i < 4; i++)
        CHECK(memcmp(keep[i], outs[i] + (size_t)PR * PC, sizeof keep[i]) == 0);
    /* amaxes: the gate's input, the weights, act, the gradients; the up
     * projection's input not recorded (the gate's codes serve it) */
    float want[9] = {maxabs_bf(xe, RC - PX * PC),
                     maxabs_bf(w1, W),
                     -1.0f,
                     maxabs_bf(w3, W),
                     maxabs_bf(act, (size_t)PR * PF),
                     maxabs_bf(w2, W),
                     maxabs_bf(dh1, (size_t)PR * PF),
                     maxabs_bf(dh3, (size_t)PR * PF),
                     maxabs_bf(dye, (size_t)PR * PC)};
    for (int i = 0; i < 9; i++)
        if (dam[i] != want[i]) {
            CHECK(!"amax recorded");
            fprintf(stderr, "padding: amax of tensor %d %g, want %g\n", i, dam[i], want[i]);
        }
    printf("padding (context for %d rows): experts of 5, 0, 19 rows: %d fp8 GEMMs (all dims "
           "multiples of 16), worst |diff| / max %.3g (outputs), weight gradients %.3g; amaxes "
           "recorded\n",
           nmax, g_f8, g_worst, wg);
    void *ps[] = {xe,  h1,  h3,  act, ye, w1, w3,  w2,   dye, dact,
                  dh1, dh3, dxe, g1,  g3, g2, dsc, dinv, dam};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        op.free(d, ps[i]);
    llmt__moe_dctx_free(x);
    op.destroy(d);
}

/* ------------------------------------------------------------ training */

/* every layer MoE, one shared expert, dropless */
static void cfg(llmt_model_config *c)
{
    moe_dev_config(c, V, T, L, E, K, FE, 1, 1, 0, 0);
}

/* The emulation's table marked as device memory (host_memory 0): moe_dev.c
 * takes the path CUDA takes (tables sent by h2d, logits back by d2h). */
static llmt__dev_ops g_devmem;
static const llmt__dev_ops *g_table;

static llmt_status open_dev(int fp8, int acc, llmt_model **m, llmt_trainer **tr)
{
    llmt_model_config c;
    cfg(&c);
    return moe_dev_open(&c, g_table ? g_table : llmt__dev_emul(), B, acc, T, LR, fp8, m, tr);
}

static llmt_batch batch(int k, int seqs, int off)
{
    return moe_dev_batch(g_in, g_tg, T, 2 * ACC * B, k, seqs, off);
}

static void fp8_vs_bf16(void)
{
    llmt_model *m8 = NULL, *mb = NULL;
    llmt_trainer *t8 = NULL, *tb = NULL;
    llmt_status s = open_dev(1, ACC, &m8, &t8);
    CHECK_STATUS(s, LLMT_OK);
    CHECK_STATUS(open_dev(0, ACC, &mb, &tb), LLMT_OK);
    if (!t8 || !tb) {
        fprintf(stderr, "fp8 MoE trainer: %s\n", m8 ? llmt_model_last_error(m8) : "");
        goto done;
    }
    float l8[STEPS], lb[STEPS];
    double dl = 0;
    int differ = 0;
    for (int k = 0; k < STEPS; k++) {
        llmt_batch b = batch(k, ACC * B, 0);
        CHECK_STATUS(rank_fixture_step(t8, &b, &l8[k]), LLMT_OK);
        CHECK_STATUS(rank_fixture_step(tb, &b, &lb[k]), LLMT_OK);
        CHECK_CLOSE(l8[k], lb[k], 0.02, 0.05);
        dl = fmax(dl, fabs((double)l8[k] - lb[k]));
        differ += l8[k] != lb[k];
    }
    CHECK(differ > 0);
    CHECK(l8[STEPS - 1] < l8[0]);
    const float *sc = NULL;
    int n = 0, gemms = 0, bwd = 0, S = 5 * L;
    CHECK(llmt__devtrain_fp8_state(llmt__trainer_devtrain(t8), &sc, &n, &gemms, &bwd) == 1);
    CHECK_EQ_INT(n, 3 * S);
    /* the last micro-batch: qkv and proj fp8 in each layer, 3 GEMMs per
     * busy expert (at least one, at most E a layer); twice that backward */
    CHECK(gemms >= 2 * L + 3 * L && gemms <= 2 * L + 3 * E * L);
    CHECK(bwd >= 4 * L + 6 * L && bwd <= 4 * L + 6 * E * L);
    CHECK(bwd - 4 * L == 2 * (gemms - 2 * L));
    int moved = 0, up_in = 0;
    for (int l = 0; sc && n == 3 * S && l < L; l++)
        for (int k = 2; k < 5; k++) {
            int s5 = l * 5 + k;
            if (k == 3)
                up_in += sc[2 * s5] == 1.0f;
            else
                moved += sc[2 * s5] != 1.0f;
            moved += (sc[2 * s5 + 1] != 1.0f) + (sc[2 * S + s5] != 1.0f);
        }
    CHECK_EQ_INT(moved, 8 * L);
    CHECK_EQ_INT(up_in, L);
    /* the same fp8 run on the table as device memory: bit for bit */
    llmt_model *md = NULL;
    llmt_trainer *td = NULL;
    float ld[STEPS];
    g_devmem = *llmt__dev_emul();
    g_devmem.host_memory = 0;
    g_table = &g_devmem;
    CHECK_STATUS(open_dev(1, ACC, &md, &td), LLMT_OK);
    g_table = NULL;
    for (int k = 0; td && k < STEPS; k++) {
        llmt_batch b = batch(k, ACC * B, 0);
        CHECK_STATUS(rank_fixture_step(td, &b, &ld[k]), LLMT_OK);
    }
    CHECK(td && memcmp(ld, l8, sizeof ld) == 0);
    llmt_trainer_destroy(td);
    llmt_model_destroy(md);
    printf("fp8 MoE vs bf16 MoE: losses %.4f .. %.4f (bf16 %.4f .. %.4f), largest |diff| %.4f, "
           "%d of %d steps differ; last micro-batch %d fp8 GEMMs forward, %d backward; %d "
           "expert scales moved\n",
           l8[0], l8[STEPS - 1], lb[0], lb[STEPS - 1], dl, differ, STEPS, gemms, bwd, moved);
done:
    llmt_trainer_destroy(t8);
    llmt_trainer_destroy(tb);
    llmt_model_destroy(m8);
    llmt_model_destroy(mb);
}

typedef struct rank_arg {
    moe_dev_rank a;
    float *f8; /* the scales after step 1 */
    int nf8;
} rank_arg;

/* The rank's scales (after step 1) into a malloc'd copy. */
static void keep_scales(rank_arg *ra, llmt_trainer *tr)
{
    const float *sc = NULL;
    int g0, g1;
    if (llmt__devtrain_fp8_state(llmt__trainer_devtrain(tr), &sc, &ra->nf8, &g0, &g1) == 1 &&
        (ra->f8 = malloc((size_t)ra->nf8 * sizeof(float))))
        memcpy(ra->f8, sc, (size_t)ra->nf8 * sizeof(float));
}

static void *rank_main(void *p)
{
    rank_arg *ra = p;
    moe_dev_rank *a = &ra->a;
    moe_dev_handles h = {NULL, NULL, NULL};
    a->st = open_dev(1, 2 * ACC / moe_dev_split(a), &h.m, &h.tr);
    moe_dev_rank_attach(a, &h);
    for (int k = 0; k < STEPS && a->st == LLMT_OK; k++) {
        moe_dev_rank_step(a, &h, g_in, g_tg, T, 2 * ACC * B, k);
        if (a->st == LLMT_OK && k == 0)
            keep_scales(ra, h.tr);
    }
    moe_dev_rank_end(a, &h);
    return NULL;
}

/* How many of the MoE layers' expert weight scales (slots LFC..LFCP of
 * each layer: tensors 2s + 1) left 1: all of them when the experts ran
 * fp8. */
static int experts_moved(const float *sc, int n)
{
    int moved = 0;
    for (int l = 0; sc && n == 3 * 5 * L && l < L; l++)
        for (int k = 2; k < 5; k++)
            moved += sc[2 * (l * 5 + k) + 1] != 1.0f;
    return moved;
}

/* A layout rank's scales after step 1 against one rank's: bit for bit
 * where its activations are one rank's (dp x ep, pp: the amaxes maximised
 * over the groups give one rank's over the global batch); under tp (tol)
 * as test_device_tp.c holds the dense model's: every rank the same, the
 * weights' equal to one rank's, the others within 2^-4 relative (their
 * amaxes come from fp8 GEMM outputs summed in another order). *ws: the
 * largest relative difference of those. */
static int scales_match(const rank_arg *a, const rank_arg *a0, const rank_arg *ref, int tol,
                        double *ws)
{
    if (!a->f8 || !a0->f8 || a->nf8 != ref->nf8)
        return 0;
    if (!tol)
        return memcmp(a->f8, ref->f8, (size_t)ref->nf8 * sizeof(float)) == 0;
    int ok = 1, fwd = ref->nf8 / 3 * 2;
    for (int i = 0; i < ref->nf8; i++) {
        ok &= a->f8[i] == a0->f8[i];
        if (i < fwd && i % 2 == 1) {
            ok &= a->f8[i] == ref->f8[i];
        } else {
            double d = fabs((double)a->f8[i] / ref->f8[i] - 1.0);
            ok &= d <= 1.0 / 16;
            *ws = fmax(*ws, d);
        }
    }
    return ok;
}

static void layouts(void)
{
    rank_arg ref;
    if (!moe_dev_ref(&ref, sizeof ref, offsetof(rank_arg, a), rank_main) || !ref.f8) {
        fprintf(stderr, "one fp8 rank: %s\n", ref.a.err);
        return;
    }
    static const struct {
        const char *name;
        int ep, tp, pp;
    } lays[] = {{"dp 2 x ep 2", 2, 0, 0}, {"tp 2", 0, 2, 0}, {"pp 2", 0, 0, 2}};
    for (size_t i = 0; i < sizeof lays / sizeof lays[0]; i++) {
        rank_arg a[2];
        const moe_dev_rank lay = {.ep = lays[i].ep, .tp = lays[i].tp, .pp = lays[i].pp};
        moe_dev_run(a, sizeof a[0], 2, offsetof(rank_arg, a), 2, &lay, rank_main);
        rank_fixture_worst w = {0, 0, 0, 0};
        int same = 0;
        double ws = 0;
        char name[64];
        snprintf(name, sizeof name, "fp8 %s", lays[i].name);
        for (int r = 0; r < 2; r++) {
            if (!moe_dev_rank_ok(name, r, &a[r].a, &ref.a, STEPS, !lays[i].pp, 2.0 * LR * STEPS,
                                 &w))
                continue;
            same += scales_match(&a[r], &a[0], &ref, lays[i].tp > 1, &ws);
            CHECK_EQ_INT(experts_moved(a[r].f8, a[r].nf8), 3 * L);
        }
        if (lays[i].pp) { /* layer l on stage l */
            llmt_model_config c;
            cfg(&c);
            moe_dev_stages_check(&c, &a[0].a, &a[1].a, ref.a.params, 2.0 * LR * STEPS, &w);
        }
        CHECK_EQ_INT(same, 2);
        printf(
            "fp8 MoE %s vs one fp8 rank: losses rel <= %.2e, masters |diff| <= %.2e; %d of 2 "
            "ranks' scales after step 1 match one rank's (activations' and gradients' "
            "within %.2e relative)\n",
            lays[i].name, w.loss, w.abs, same, ws);
        for (int r = 0; r < 2; r++) {
            free(a[r].a.params);
            free(a[r].f8);
        }
    }
    free(ref.a.params);
    free(ref.f8);
}

/* An fp8 MoE run saved at step 5, read by a fresh trainer: the same
 * losses as the uninterrupted run's, bit for bit. */
static void checkpoint(void)
{
    char dir[] = "/tmp/llmt-moe-fp8-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    llmt_model *ma = NULL, *mb = NULL;
    llmt_trainer *ta = NULL, *tb = NULL;
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(open_dev(1, ACC, &ma, &ta), LLMT_OK);
    CHECK_STATUS(open_dev(1, ACC, &mb, &tb), LLMT_OK);
    llmt_ckpt_opts co;
    llmt_ckpt_opts_init(&co, sizeof co);
    CHECK_STATUS(llmt_ckpt_create(NULL, dir, &co, &ck), LLMT_OK);
    float la[STEPS], lb[STEPS];
    if (ta && tb && ck) {
        for (int k = 0; k < 5; k++) {
            llmt_batch b = batch(k, ACC * B, 0);
            CHECK_STATUS(rank_fixture_step(ta, &b, &la[k]), LLMT_OK);
        }
        CHECK_STATUS(llmt_ckpt_begin(ck, 5), LLMT_OK);
        CHECK_STATUS(llmt_trainer_ckpt_add(ta, ck), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_wait(ck, -1), LLMT_OK);
        for (int k = 5; k < STEPS; k++) {
            llmt_batch b = batch(k, ACC * B, 0);
            CHECK_STATUS(rank_fixture_step(ta, &b, &la[k]), LLMT_OK);
        }
        int64_t step = -1, shape[LLMT_MAX_DIMS] = {0}; /* the API writes them all */
        int32_t nd = 0;
        CHECK_STATUS(llmt_ckpt_open_latest(ck, &step), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_tensor_info(ck, "fp8/delayed_scaling", NULL, &nd, shape, NULL),
                     LLMT_OK);
        CHECK(nd == 2 && shape[0] == 3 * 5 * L);
        CHECK_STATUS(llmt_trainer_ckpt_read(tb, ck), LLMT_OK);
        /* the read restored the experts' scales (a fresh trainer's are 1) */
        const float *sc = NULL;
        int n = 0, g0, g1;
        CHECK(llmt__devtrain_fp8_state(llmt__trainer_devtrain(tb), &sc, &n, &g0, &g1) == 1);
        CHECK_EQ_INT(experts_moved(sc, n), 3 * L);
        for (int k = 5; k < STEPS; k++) {
            llmt_batch b = batch(k, ACC * B, 0);
            CHECK_STATUS(rank_fixture_step(tb, &b, &lb[k]), LLMT_OK);
        }
        CHECK(memcmp(lb + 5, la + 5, sizeof(float) * (STEPS - 5)) == 0);
        printf("checkpoint: fp8 MoE resumed at step 5: losses %.6f .. %.6f (uninterrupted "
               "%.6f .. %.6f), recipe state %lld x %lld\n",
               lb[5], lb[STEPS - 1], la[5], la[STEPS - 1], (long long)shape[0],
               (long long)shape[1]);
    } else {
        fprintf(stderr, "checkpoint: %s\n", ma ? llmt_model_last_error(ma) : "");
    }
    llmt_ckpt_destroy(ck);
    llmt_trainer_destroy(ta);
    llmt_trainer_destroy(tb);
    llmt_model_destroy(ma);
    llmt_model_destroy(mb);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "checkpoint: could not remove %s\n", dir);
}

int main(void)
{
    moe_fixture_data(g_in, g_tg, (int)(sizeof g_in / sizeof g_in[0]), V, 0x6d6f65u);
    padding(PR);
    padding(1);
    fp8_vs_bf16();
    layouts();
    checkpoint();
    return check_exit("moe-fp8");
}
