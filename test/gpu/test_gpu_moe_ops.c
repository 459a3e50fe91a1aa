/* The MoE ops of the op table (lib/exec/dev.h: moe_gather, moe_gather_bwd,
 * moe_combine, moe_combine_bwd) of a backend against the bf16 emulation's
 * (lib/exec/moe_ops.c) on the same random inputs and routing tables
 * (random choices under a capacity, so some are dropped and some tokens
 * keep no row):
 *
 *   test_gpu_moe_ops cuda   (gpu suite: gpu-moe-ops; SKIP without a GPU)
 *                           the CUDA kernels (cuda/kernels/moe.cu), which
 *                           have never run on a GPU before this test does
 *   test_gpu_moe_ops emul   (unit suite) the same harness with the
 *                           emulation on both sides: every bound holds at 0
 *                           (the harness's own check)
 *
 * Bounds, and why: the kernels sum in the reference's order with unfused
 * fp32 products and round once, so every bf16 output is expected bit for
 * bit; the gate gradient is a double dot product whose order differs
 * (per-thread partial sums reduced in a tree): within 1e-6 relative +
 * 1e-7. Rows an op must not write (dye's rows of dropped choices: none
 * exist; a token without rows in gather_bwd and combine: exactly 0) are
 * checked too. Outputs start poisoned (NaN). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}
static float rndf(float a)
{
    return a * (2.0f * (float)(rnd() >> 8) / 16777216.0f - 1.0f);
}

typedef struct side {
    const llmt__dev_ops *op;
    llmt__dev *d;
} side;

/* n bytes of src into a fresh buffer of the side (NULL: out of memory). */
static void *put(const side *s, const void *src, size_t n)
{
    void *p = NULL;
    if (s->op->alloc(s->d, &p, n ? n : 16) != LLMT_OK)
        return NULL;
    if (src)
        s->op->h2d(s->d, p, src, n);
    else
        s->op->fill_nan(s->d, p, n ? n : 16);
    return p;
}

static void get(const side *s, void *dst, const void *p, size_t n)
{
    CHECK_STATUS(s->op->d2h(s->d, dst, p, n), LLMT_OK);
}

typedef struct mcase {
    int N, K, E, C, cap;
} mcase;

/* Random routing of N tokens x K choices over E experts under a capacity
 * (slot-major, as lib/train/moe.c dispatches): row [N*K], tok [R]. */
static int route(const mcase *c, int32_t *row, int32_t *tok)
{
    int *kept = calloc((size_t)c->E, sizeof *kept),
        *start = calloc((size_t)c->E + 1, sizeof *start);
    int32_t *ex = malloc((size_t)c->N * c->K * sizeof *ex);
    for (int n = 0; n < c->N; n++)
        for (int k = 0; k < c->K; k++) { /* distinct experts per token */
            int e;
            int dup;
            do {
                e = (int)(rnd() % (uint32_t)c->E);
                dup = 0;
                for (int j = 0; j < k; j++)
                    dup |= ex[(size_t)n * c->K + j] == e;
            } while (dup);
            ex[(size_t)n * c->K + k] = e;
        }
    for (int k = 0; k < c->K; k++)
        for (int n = 0; n < c->N; n++) {
            size_t i = (size_t)n * c->K + k;
            int e = ex[i];
            row[i] = kept[e] < c->cap ? kept[e]++ : -1;
        }
    for (int e = 0; e < c->E; e++)
        start[e + 1] = start[e] + kept[e];
    for (int n = 0; n < c->N; n++)
        for (int k = 0; k < c->K; k++) {
            size_t i = (size_t)n * c->K + k;
            if (row[i] < 0)
                continue;
            row[i] += start[ex[i]];
            tok[row[i]] = n;
        }
    int R = start[c->E];
    free(kept);
    free(start);
    free(ex);
    return R;
}

/* differing bf16 elements of a and b (n) */
static size_t bf_diff(const llmt__bf16 *a, const llmt__bf16 *b, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += a[i] != b[i];
    return d;
}

static void one_case(const side *g, const side *em, const mcase *c)
{
    size_t N = (size_t)c->N, K = (size_t)c->K, C = (size_t)c->C, NK = N * K;
    int32_t *row = malloc(NK * sizeof *row), *tok = malloc(NK * sizeof *tok);
    int R = route(c, row, tok);
    size_t RC = (size_t)(R ? R : 1) * C;
    float *gate = malloc(NK * sizeof *gate);
    llmt__bf16 *x = malloc(N * C * 2), *ye = malloc(RC * 2), *dy = malloc(N * C * 2),
               *dxe = malloc(RC * 2);
    for (size_t i = 0; i < NK; i++)
        gate[i] = (float)(rnd() >> 8) / 16777216.0f;
    for (size_t i = 0; i < N * C; i++) {
        x[i] = llmt__f32_to_bf16(rndf(2.0f));
        dy[i] = llmt__f32_to_bf16(rndf(0.5f));
    }
    for (size_t i = 0; i < RC; i++) {
        ye[i] = llmt__f32_to_bf16(rndf(1.0f));
        dxe[i] = llmt__f32_to_bf16(rndf(1.0f));
    }
    /* outputs of each side, read back: xe, dx, y, dye, dgate */
    llmt__bf16 *o[2][4];
    float *dg[2];
    const side *sd[2] = {g, em};
    for (int j = 0; j < 2; j++) {
        const side *s = sd[j];
        void *X = put(s, x, N * C * 2), *YE = put(s, ye, RC * 2), *DY = put(s, dy, N * C * 2),
             *DXE = put(s, dxe, RC * 2), *ROW = put(s, row, NK * 4), *TOK = put(s, tok, NK * 4),
             *GATE = put(s, gate, NK * 4);
        void *XE = put(s, NULL, RC * 2), *DX = put(s, NULL, N * C * 2),
             *Y = put(s, NULL, N * C * 2), *DYE = put(s, NULL, RC * 2),
             *DG = put(s, NULL, NK * 4);
        CHECK(X && YE && DY && DXE && ROW && TOK && GATE && XE && DX && Y && DYE && DG);
        if (R > 0)
            CHECK_STATUS(s->op->moe_gather(s->d, XE, X, TOK, R, c->C), LLMT_OK);
        CHECK_STATUS(s->op->moe_gather_bwd(s->d, DX, DXE, ROW, c->N, c->K, c->C), LLMT_OK);
        CHECK_STATUS(s->op->moe_combine(s->d, Y, YE, ROW, GATE, c->N, c->K, c->C), LLMT_OK);
        CHECK_STATUS(s->op->moe_combine_bwd(s->d, DYE, DG, DY, YE, ROW, GATE, c->N, c->K, c->C),
                     LLMT_OK);
        CHECK_STATUS(s->op->sync(s->d), LLMT_OK);
        size_t sz[4] = {RC, N * C, N * C, RC};
        void *src[4] = {XE, DX, Y, DYE};
        for (int q = 0; q < 4; q++) {
            o[j][q] = malloc(sz[q] * 2);
            get(s, o[j][q], src[q], sz[q] * 2);
        }
        dg[j] = malloc(NK * 4);
        get(s, dg[j], DG, NK * 4);
        void *all[] = {X, YE, DY, DXE, ROW, TOK, GATE, XE, DX, Y, DYE, DG};
        for (size_t q = 0; q < sizeof all / sizeof all[0]; q++)
            if (all[q])
                s->op->free(s->d, all[q]);
    }
    size_t sz[4] = {(size_t)R * C, N * C, N * C, (size_t)R * C};
    size_t d[4];
    for (int q = 0; q < 4; q++)
        d[q] = bf_diff(o[0][q], o[1][q], sz[q]);
    double wg = 0;
    for (size_t i = 0; i < NK; i++) {
        double a = dg[0][i], b = dg[1][i];
        double e = fabs(a - b) / (1e-6 * fabs(b) + 1e-7);
        if (!(e <= wg))
            wg = e;
    }
    /* a token without kept rows: 0 in dx and y on the side under test */
    size_t zero_bad = 0;
    for (size_t n = 0; n < N; n++) {
        int any = 0;
        for (size_t k = 0; k < K; k++)
            any |= row[n * K + k] >= 0;
        for (size_t ch = 0; !any && ch < C; ch++)
            zero_bad += o[0][1][n * C + ch] != 0 || o[0][2][n * C + ch] != 0;
    }
    for (int q = 0; q < 4; q++)
        CHECK(d[q] == 0);
    CHECK(wg <= 1.0);
    CHECK(zero_bad == 0);
    printf("N %4d K %d E %2d C %4d cap %4d: %d rows; differing elements gather %zu gather_bwd "
           "%zu combine %zu dye %zu; gate gradient worst %.2f of its bound\n",
           c->N, c->K, c->E, c->C, c->cap, R, d[0], d[1], d[2], d[3], wg);
    for (int j = 0; j < 2; j++) {
        for (int q = 0; q < 4; q++)
            free(o[j][q]);
        free(dg[j]);
    }
    free(row), free(tok), free(gate), free(x), free(ye), free(dy), free(dxe);
}

static int run(int self)
{
    const llmt__dev_ops *op = self ? llmt__dev_emul() : llmt__dev_cuda();
    if (!op) {
        printf("SKIP: a build without CUDA\n");
        return CHECK_SKIP;
    }
    char err[512] = "";
    llmt__dev_opts o = {0, 1};
    side em = {llmt__dev_emul(), NULL}, g = {op, NULL};
    if (em.op->create(&o, &em.d, err, sizeof err) != LLMT_OK) {
        fprintf(stderr, "emulation: %s\n", err);
        return 1;
    }
    if (op->create(&o, &g.d, err, sizeof err) != LLMT_OK) {
        printf("SKIP: %s\n", err);
        em.op->destroy(em.d);
        return CHECK_SKIP;
    }
    static const mcase cs[] = {
        {32, 2, 4, 32, 16}, {64, 2, 8, 128, 4},    {7, 3, 6, 40, 7},
        {1, 1, 1, 8, 1},    {256, 2, 16, 768, 40}, {33, 4, 8, 100, 1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        one_case(&g, &em, &cs[i]);
    op->destroy(g.d);
    em.op->destroy(em.d);
    return check_exit(self ? "moe-ops-emul" : "gpu-moe-ops");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    const char *seed = getenv("LLMT_SEED");
    if (seed && *seed)
        g_rng = strtoull(seed, NULL, 10) * 2654435761ull + 1;
    if (!strcmp(mode, "emul"))
        return run(1);
    if (!strcmp(mode, "cuda"))
        return run(0);
    fprintf(stderr, "usage: test_gpu_moe_ops emul|cuda\n");
    return 2;
}
