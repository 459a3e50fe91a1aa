/* Runs the MoE layer (lib/train/moe.c) forward and backward on random
 * weights, tokens and output gradients, and writes everything the PyTorch
 * reference (moe_equiv.py) recomputes: inputs, outputs, losses, counts and
 * gradients, one raw little-endian fp32 file per tensor plus case.json.
 * usage: moe_driver OUTDIR CASE (CASE 0..3, see cases[]) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/moe.h"

typedef struct mcase {
    int N, E, K, C, F, dropless;
    float cf, aux, z;
} mcase;

/* capacity with drops; dropless; top-1; a tight capacity with top-3 */
static const mcase cases[] = {
    {24, 4, 2, 16, 12, 0, 1.0f, 0.5f, 0.1f},
    {32, 8, 2, 16, 8, 1, 1.0f, 0.3f, 0.05f},
    {20, 4, 1, 8, 12, 0, 1.25f, 0.5f, 0.1f},
    {30, 6, 3, 12, 10, 0, 0.5f, 0.2f, 0.2f},
};

static uint64_t rs = 0x1234567ull;
static float rnd(float scale)
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return scale * ((float)((rs >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f);
}

static float *rand_buf(size_t n, float scale)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n && p; i++)
        p[i] = rnd(scale);
    return p;
}

static int put(const char *dir, const char *name, const float *x, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.f32", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(x, sizeof(float), n, f) != n) {
        fprintf(stderr, "moe_driver: cannot write %s\n", path);
        if (f)
            fclose(f);
        return 1;
    }
    return fclose(f) != 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: moe_driver OUTDIR CASE\n");
        return 2;
    }
    int ci = atoi(argv[2]);
    if (ci < 0 || ci >= (int)(sizeof cases / sizeof cases[0]))
        return 2;
    const mcase *c = &cases[ci];
    rs += (uint64_t)ci * 977;
    size_t N = c->N, E = c->E, C = c->C, F = c->F;
    llmt__moe_shape sh = {c->E, c->K, c->C, c->F, c->cf, c->dropless, 0};
    llmt__moe *s = llmt__moe_new(&sh, c->N);
    float *x = rand_buf(N * C, 1.0f), *dy = rand_buf(N * C, 1.0f);
    llmt__moe_w w = {rand_buf(E * C, 0.5f), rand_buf(E * F * C, 0.3f),
                     rand_buf(E * F * C, 0.3f), rand_buf(E * C * F, 0.3f)};
    llmt__moe_w dw = {calloc(E * C, 4), calloc(E * F * C, 4), calloc(E * F * C, 4),
                      calloc(E * C * F, 4)};
    float *y = malloc(N * C * 4), *dx = malloc(N * C * 4);
    if (!s || !x || !dy || !w.router || !w.w1 || !w.w3 || !w.w2 || !dw.router || !dw.w1 ||
        !dw.w3 || !dw.w2 || !y || !dx) {
        fprintf(stderr, "moe_driver: no memory\n");
        return 1;
    }
    if (llmt__moe_fwd(s, &w, x, y, c->N) != LLMT_OK ||
        llmt__moe_bwd(s, &w, &dw, x, dy, dx, c->aux, c->z) != LLMT_OK) {
        fprintf(stderr, "moe_driver: the layer failed\n");
        return 1;
    }
    const char *d = argv[1];
    int bad = put(d, "x", x, N * C) || put(d, "dy", dy, N * C) ||
              put(d, "router", w.router, E * C) || put(d, "w1", w.w1, E * F * C) ||
              put(d, "w3", w.w3, E * F * C) || put(d, "w2", w.w2, E * C * F) ||
              put(d, "y", y, N * C) || put(d, "dx", dx, N * C) ||
              put(d, "drouter", dw.router, E * C) || put(d, "dw1", dw.w1, E * F * C) ||
              put(d, "dw3", dw.w3, E * F * C) || put(d, "dw2", dw.w2, E * C * F);
    char path[4096];
    snprintf(path, sizeof path, "%s/case.json", d);
    FILE *f = fopen(path, "w");
    if (bad || !f)
        return 1;
    fprintf(f,
            "{\"N\": %d, \"E\": %d, \"K\": %d, \"C\": %d, \"F\": %d, \"dropless\": %d, "
            "\"capacity_factor\": %.9g, \"aux_coef\": %.9g, \"z_coef\": %.9g, "
            "\"capacity\": %d, \"aux\": %.17g, \"z\": %.17g, \"dropped\": %lld, \"kept\": [",
            c->N, c->E, c->K, c->C, c->F, c->dropless, c->cf, c->aux, c->z, s->cap, s->aux,
            s->z, (long long)s->dropped);
    for (int e = 0; e < c->E; e++)
        fprintf(f, "%s%lld", e ? ", " : "", (long long)s->kept[e]);
    fprintf(f, "]}\n");
    fclose(f);
    llmt__moe_free(s);
    free(x), free(dy), free(y), free(dx);
    free(w.router), free(w.w1), free(w.w3), free(w.w2);
    free(dw.router), free(dw.w1), free(dw.w3), free(dw.w2);
    return 0;
}
