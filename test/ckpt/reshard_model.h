/* The GPT-like state and the tp x pp x dp x zero placements shared by the
 * resharding tests (threads: test_reshard.c; processes under mpirun:
 * test_reshard_mpi.c). See test_reshard.c for the placement rules. */
#ifndef LLMT_TEST_RESHARD_MODEL_H
#define LLMT_TEST_RESHARD_MODEL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt_util.h"

enum { REP, COL, ROW };
enum { C = 16, V = 40, T = 12, L = 4 };

typedef struct {
    char name[64];
    int ndim;
    int64_t shape[2];
    int split;  /* REP, COL (dim 0), ROW (dim 1) */
    int stage;  /* -1: first, -2: last, else layer index */
    int seed;
} pspec;

static pspec P[64];
static int NP;

static void add(const char *name, int nd, int64_t a, int64_t b, int split, int layer)
{
    pspec *p = &P[NP];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = nd;
    p->shape[0] = a;
    p->shape[1] = b;
    p->split = split;
    p->stage = layer;
    p->seed = 100 + NP;
    NP++;
}

static void build_model(void)
{
    char n[64];
    add("wte", 2, V, C, COL, -1);
    add("wpe", 2, T, C, REP, -1);
    for (int l = 0; l < L; l++) {
#define A(suffix, nd, a, b, sp) snprintf(n, sizeof n, "h.%d." suffix, l), add(n, nd, a, b, sp, l)
        A("ln_1.weight", 1, C, 0, REP);
        A("attn.c_attn.weight", 2, 3 * C, C, COL);
        A("attn.c_attn.bias", 1, 3 * C, 0, COL);
        A("attn.c_proj.weight", 2, C, C, ROW);
        A("attn.c_proj.bias", 1, C, 0, REP);
        A("mlp.c_fc.weight", 2, 4 * C, C, COL);
        A("mlp.c_fc.bias", 1, 4 * C, 0, COL);
        A("mlp.c_proj.weight", 2, C, 4 * C, ROW);
#undef A
    }
    add("ln_f.weight", 1, C, 0, REP, -2);
}

typedef struct {
    int tp, pp, dp, zero;
    const char *tag;
} layout;

typedef struct {
    int64_t off[2], shp[2];
    int saves; /* this rank saves the block (for replicas: only one does) */
    int owns;  /* this rank holds the block */
} block;

static int stage_of(const pspec *p, int pp)
{
    if (p->stage == -1)
        return 0;
    if (p->stage == -2)
        return pp - 1;
    return p->stage * pp / L;
}

/* Block of parameter p (which = 0) or its moments (which = 1, 2) on rank r. */
static block block_of(const layout *y, const pspec *p, int r, int which)
{
    block b;
    memset(&b, 0, sizeof b);
    int tpi = r % y->tp, ppi = r / y->tp % y->pp, dpi = r / (y->tp * y->pp);
    for (int d = 0; d < p->ndim; d++) {
        b.off[d] = 0;
        b.shp[d] = p->shape[d];
    }
    b.owns = stage_of(p, y->pp) == ppi;
    int sd = p->split == COL ? 0 : p->split == ROW ? 1 : -1;
    if (sd >= 0) {
        int64_t n = p->shape[sd];
        b.off[sd] = n * tpi / y->tp;
        b.shp[sd] = n * (tpi + 1) / y->tp - b.off[sd];
    }
    b.saves = b.owns && dpi == 0 && (sd >= 0 || tpi == 0);
    if (which && y->zero == 1) {
        /* rows of the tp block, split over dp; tp replicas: tp rank 0's */
        int64_t n = b.shp[0], o = b.off[0];
        b.off[0] = o + n * dpi / y->dp;
        b.shp[0] = n * (dpi + 1) / y->dp - n * dpi / y->dp;
        b.saves = b.owns && (sd >= 0 || tpi == 0);
    }
    return b;
}

static float expect(const pspec *p, int which, int64_t gi)
{
    return gval(p->seed * 3 + which, gi);
}

static void fill(float *buf, const pspec *p, int which, const block *b)
{
    int64_t rows = b->shp[0], cols = p->ndim == 2 ? b->shp[1] : 1;
    int64_t gcols = p->ndim == 2 ? p->shape[1] : 1;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            int64_t gi = (b->off[0] + i) * gcols + (p->ndim == 2 ? b->off[1] + j : 0);
            buf[i * cols + j] = expect(p, which, gi);
        }
}

static const char *const PREF[3] = {"param/", "adam_m/", "adam_v/"};

typedef struct {
    const layout *y;
    const char *root;
    int rank, world;
    int64_t step;
    int ok;
    int load; /* 0: save, 1: load and compare */
} job;

static void *run_rank(void *arg)
{
    job *j = arg;
    const layout *y = j->y;
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.rank = j->rank;
    o.world_size = j->world;
    o.keep_last = 0;
    llmt_ckpt *ck = NULL;
    if (llmt_ckpt_create(NULL, j->root, &o, &ck) != LLMT_OK) {
        j->ok = 0;
        return NULL;
    }
    float *bufs[64 * 3] = {0};
    int ok = 1;
    if (!j->load) {
        ok &= llmt_ckpt_begin(ck, j->step) == LLMT_OK;
        char plan[128];
        snprintf(plan, sizeof plan, "{\"tp\":%d,\"pp\":%d,\"dp\":%d,\"zero\":%d}", y->tp, y->pp,
                 y->dp, y->zero);
        ok &= llmt_ckpt_set_plan_json(ck, plan) == LLMT_OK;
    } else {
        int64_t got = -1;
        ok &= llmt_ckpt_open_step(ck, j->step) == LLMT_OK;
        ok &= llmt_ckpt_open_step_of(ck, &got) == LLMT_OK && got == j->step;
        if (!ok)
            fprintf(stderr, "[%s] rank %d open: %s\n", y->tag, j->rank, llmt_ckpt_last_error(ck));
    }
    for (int i = 0; ok && i < NP; i++)
        for (int w = 0; ok && w < 3; w++) {
            block b = block_of(y, &P[i], j->rank, w);
            if (!(j->load ? b.owns : b.saves))
                continue;
            int64_t n = b.shp[0] * (P[i].ndim == 2 ? b.shp[1] : 1);
            float *buf = bufs[i * 3 + w] = malloc((size_t)(n ? n : 1) * sizeof(float));
            llmt_tensor v;
            llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, P[i].ndim, b.shp, buf,
                             LLMT_DEVICE_CPU, 0);
            char name[96];
            snprintf(name, sizeof name, "%s%s", PREF[w], P[i].name);
            if (!j->load) {
                fill(buf, &P[i], w, &b);
                llmt_status s = llmt_ckpt_add_tensor(ck, name, &v, P[i].shape, b.off);
                if (s != LLMT_OK) {
                    fprintf(stderr, "[%s] rank %d add %s: %s\n", y->tag, j->rank, name,
                            llmt_ckpt_last_error(ck));
                    ok = 0;
                }
            } else {
                memset(buf, 0xA5, (size_t)n * sizeof(float));
                llmt_status s = llmt_ckpt_read(ck, name, &v, b.off);
                float *want = malloc((size_t)(n ? n : 1) * sizeof(float));
                fill(want, &P[i], w, &b);
                if (s != LLMT_OK || memcmp(want, buf, (size_t)n * sizeof(float))) {
                    fprintf(stderr, "[%s] rank %d read %s at [%lld, %lld]: %s %s\n", y->tag,
                            j->rank, name, (long long)b.off[0], (long long)b.off[1],
                            llmt_status_string(s), s ? llmt_ckpt_last_error(ck) : "values differ");
                    ok = 0;
                }
                free(want);
            }
        }
    if (ok && !j->load) {
        llmt_status s = llmt_ckpt_save(ck, 1);
        if (s == LLMT_OK)
            s = llmt_ckpt_wait(ck, -1);
        if (s != LLMT_OK) {
            fprintf(stderr, "[%s] rank %d save: %s\n", y->tag, j->rank, llmt_ckpt_last_error(ck));
            ok = 0;
        }
    }
    llmt_ckpt_destroy(ck);
    for (int i = 0; i < NP * 3; i++)
        free(bufs[i]);
    j->ok = ok;
    return NULL;
}

#endif
