/* Runs the MoE layer (lib/train/moe.c) forward and backward on random
 * weights, tokens and output gradients, and writes everything the PyTorch
 * reference (moe_equiv.py) recomputes: inputs, outputs, losses, counts and
 * gradients, one raw little-endian fp32 file per tensor plus case.json.
 * Cases 0..3 call the layer itself; cases 4.. call the engine's MoE layer
 * (lib/train/moe_net.c: the routed experts plus the shared experts of
 * moe_shared.c, with raw or renormalised gates) on a flat parameter
 * buffer, as the trainer does.
 * usage: moe_driver OUTDIR CASE (CASE 0..6, see cases[]) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/moe.h"
#include "train/moe_net.h"

typedef struct mcase {
    int N, E, K, C, F, dropless;
    float cf, aux, z;
    int S, raw; /* shared experts; raw (not renormalised) gates */
} mcase;

/* capacity with drops; dropless; top-1; a tight capacity with top-3;
 * through moe_net: a shared expert with top-2 under drops, two shared
 * experts with top-1 raw gates (dropless), top-2 raw gates under drops */
static const mcase cases[] = {
    {24, 4, 2, 16, 12, 0, 1.0f, 0.5f, 0.1f, 0, 0},
    {32, 8, 2, 16, 8, 1, 1.0f, 0.3f, 0.05f, 0, 0},
    {20, 4, 1, 8, 12, 0, 1.25f, 0.5f, 0.1f, 0, 0},
    {30, 6, 3, 12, 10, 0, 0.5f, 0.2f, 0.2f, 0, 0},
    {24, 4, 2, 16, 12, 0, 1.0f, 0.5f, 0.1f, 1, 0},
    {28, 8, 1, 12, 8, 1, 1.0f, 0.3f, 0.05f, 2, 1},
    {26, 6, 2, 12, 10, 0, 1.0f, 0.4f, 0.1f, 0, 1},
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

/* The engine's layer (moe_net) on one MoE layer whose tensors sit in one
 * flat buffer, as the trainer lays them: writes y, dx, the gradients (into
 * dw's pointers), and the tallies. */
static int run_net(const mcase *c, const llmt__moe_w *w, const float *sw[3], llmt__moe_w *dw,
                   float *dsw[3], const float *x, const float *dy, float *y, float *dx,
                   int64_t *kept, int64_t *dropped, double *aux, double *z)
{
    size_t E = c->E, C = c->C, F = c->F, Fs = (size_t)c->S * F;
    size_t n[7] = {E * C, E * F * C, E * F * C, E * C * F, Fs * C, Fs * C, C * Fs};
    llmt__layer_offs o;
    memset(&o, 0xff, sizeof o);
    size_t *off[7] = {&o.router, &o.ew1, &o.ew3, &o.ew2, &o.sw1, &o.sw3, &o.sw2}, tot = 0;
    for (int i = 0; i < 7; i++) {
        *off[i] = tot;
        tot += n[i];
    }
    float *par = calloc(tot, 4), *grad = calloc(tot, 4);
    const float *src[7] = {w->router, w->w1, w->w3, w->w2, sw[0], sw[1], sw[2]};
    float *dst[7] = {dw->router, dw->w1, dw->w3, dw->w2, dsw[0], dsw[1], dsw[2]};
    llmt_model_config mc;
    llmt_model_config_init(&mc, sizeof mc);
    mc.arch = LLMT_ARCH_LLAMA;
    mc.layers = 1;
    mc.width = c->C;
    mc.moe_experts = c->E;
    mc.moe_top_k = c->K;
    mc.moe_ffn = c->F;
    mc.moe_every = 1;
    mc.moe_dropless = c->dropless;
    mc.moe_capacity_factor = c->cf;
    mc.moe_aux_loss_coef = c->aux;
    mc.moe_z_loss_coef = c->z;
    mc.moe_shared_experts = c->S;
    mc.moe_raw_gates = c->raw;
    llmt_err e;
    memset(&e, 0, sizeof e);
    llmt__moe_net *net = NULL;
    float scale = 0;
    if (!par || !grad || llmt__moe_net_new(&e, &mc, c->N, &net) != LLMT_OK)
        return 1;
    for (int i = 0; i < 7; i++)
        if (n[i])
            memcpy(par + *off[i], src[i], n[i] * 4);
    int bad = llmt__moe_net_step_begin(net, &e, 1, NULL, &scale) != LLMT_OK || scale != 1.0f ||
              llmt__moe_net_fwd(net, &e, 0, &o, par, x, y, c->N) != LLMT_OK ||
              llmt__moe_net_bwd(net, &e, 0, &o, par, grad, x, dy, dx, scale) != LLMT_OK;
    if (!bad) {
        llmt__moe_net_tally(net);
        bad = llmt__moe_net_step_end(net, &e) != LLMT_OK ||
              llmt__moe_net_stats(net, &e, 0, kept, c->E, dropped, aux, z) != LLMT_OK;
    }
    if (bad)
        fprintf(stderr, "moe_driver: moe_net: %s\n", e.msg);
    for (int i = 0; i < 7; i++)
        if (n[i])
            memcpy(dst[i], grad + *off[i], n[i] * 4);
    llmt__moe_net_free(net);
    free(par);
    free(grad);
    return bad;
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
    llmt__moe_shape sh = {c->E, c->K, c->C, c->F, c->cf, c->dropless, c->raw};
    llmt__moe *s = llmt__moe_new(&sh, c->N);
    float *x = rand_buf(N * C, 1.0f), *dy = rand_buf(N * C, 1.0f);
    llmt__moe_w w = {rand_buf(E * C, 0.5f), rand_buf(E * F * C, 0.3f),
                     rand_buf(E * F * C, 0.3f), rand_buf(E * C * F, 0.3f)};
    llmt__moe_w dw = {calloc(E * C, 4), calloc(E * F * C, 4), calloc(E * F * C, 4),
                      calloc(E * C * F, 4)};
    size_t Fs = (size_t)c->S * F, ns = Fs * C + 1; /* + 1: never malloc(0) */
    const float *sw[3] = {rand_buf(ns, 0.3f), rand_buf(ns, 0.3f), rand_buf(ns, 0.3f)};
    float *dsw[3] = {calloc(ns, 4), calloc(ns, 4), calloc(ns, 4)};
    float *y = malloc(N * C * 4), *dx = malloc(N * C * 4);
    if (!s || !x || !dy || !w.router || !w.w1 || !w.w3 || !w.w2 || !dw.router || !dw.w1 ||
        !dw.w3 || !dw.w2 || !y || !dx || !sw[0] || !sw[1] || !sw[2] || !dsw[0] || !dsw[1] ||
        !dsw[2]) {
        fprintf(stderr, "moe_driver: no memory\n");
        return 1;
    }
    int64_t kept[64], dropped = 0;
    double aux = 0, z = 0;
    if (ci >= 4) {
        if (run_net(c, &w, sw, &dw, dsw, x, dy, y, dx, kept, &dropped, &aux, &z))
            return 1;
    } else if (llmt__moe_fwd(s, &w, x, y, c->N) != LLMT_OK ||
               llmt__moe_bwd(s, &w, &dw, x, dy, dx, c->aux, c->z) != LLMT_OK) {
        fprintf(stderr, "moe_driver: the layer failed\n");
        return 1;
    } else {
        memcpy(kept, s->kept, E * sizeof *kept);
        dropped = s->dropped, aux = s->aux, z = s->z;
    }
    const char *d = argv[1];
    int bad = put(d, "x", x, N * C) || put(d, "dy", dy, N * C) ||
              put(d, "router", w.router, E * C) || put(d, "w1", w.w1, E * F * C) ||
              put(d, "w3", w.w3, E * F * C) || put(d, "w2", w.w2, E * C * F) ||
              put(d, "y", y, N * C) || put(d, "dx", dx, N * C) ||
              put(d, "drouter", dw.router, E * C) || put(d, "dw1", dw.w1, E * F * C) ||
              put(d, "dw3", dw.w3, E * F * C) || put(d, "dw2", dw.w2, E * C * F) ||
              put(d, "sw1", sw[0], Fs * C) || put(d, "sw3", sw[1], Fs * C) ||
              put(d, "sw2", sw[2], C * Fs) || put(d, "dsw1", dsw[0], Fs * C) ||
              put(d, "dsw3", dsw[1], Fs * C) || put(d, "dsw2", dsw[2], C * Fs);
    char path[4096];
    snprintf(path, sizeof path, "%s/case.json", d);
    FILE *f = fopen(path, "w");
    if (bad || !f)
        return 1;
    fprintf(f,
            "{\"N\": %d, \"E\": %d, \"K\": %d, \"C\": %d, \"F\": %d, \"dropless\": %d, "
            "\"capacity_factor\": %.9g, \"aux_coef\": %.9g, \"z_coef\": %.9g, "
            "\"S\": %d, \"raw\": %d, "
            "\"capacity\": %d, \"aux\": %.17g, \"z\": %.17g, \"dropped\": %lld, \"kept\": [",
            c->N, c->E, c->K, c->C, c->F, c->dropless, c->cf, c->aux, c->z, c->S, c->raw,
            llmt__moe_capacity(&sh, c->N), aux, z, (long long)dropped);
    for (int e = 0; e < c->E; e++)
        fprintf(f, "%s%lld", e ? ", " : "", (long long)kept[e]);
    fprintf(f, "]}\n");
    fclose(f);
    llmt__moe_free(s);
    free(x), free(dy), free(y), free(dx);
    free(w.router), free(w.w1), free(w.w3), free(w.w2);
    free(dw.router), free(dw.w1), free(dw.w3), free(dw.w2);
    for (int i = 0; i < 3; i++)
        free((void *)sw[i]), free(dsw[i]);
    return 0;
}
