/* Checkpointing: round trips, async saves, resharding across simulated
 * ranks, retention, tiers, corruption and hostile manifests, write errors,
 * export. Ranks are simulated in one process (one handle per rank). */
#include <dlfcn.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "ckpt_util.h"
#include "manifest_seal.h"
#include "llmtrain.h"

static int warn_count, saw_direct, saw_buffered;
static char last_warn[1024];
static void capture_log(void *user, llmt_log_level level, const char *module,
                        const char *msg)
{
    (void)user;
    (void)module;
    if (strstr(msg, "O_DIRECT)"))
        saw_direct++;
    if (strstr(msg, "buffered)"))
        saw_buffered++;
    if (level >= LLMT_LOG_WARN) {
        warn_count++;
        snprintf(last_warn, sizeof last_warn, "%s", msg);
    }
}

static llmt_context *make_ctx(void)
{
    llmt_context_opts o;
    llmt_context_opts_init(&o, sizeof o);
    o.log_fn = capture_log;
    o.log_level = LLMT_LOG_WARN;
    llmt_context *ctx = NULL;
    llmt_context_create(&o, &ctx);
    return ctx;
}

static llmt_ckpt *make_ck(llmt_context *ctx, const char *root, int rank, int world,
                          int verify, int keep_last)
{
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.rank = rank;
    o.world_size = world;
    o.verify = verify;
    o.keep_last = keep_last;
    llmt_ckpt *ck = NULL;
    llmt_status s = llmt_ckpt_create(ctx, root, &o, &ck);
    if (s != LLMT_OK)
        fprintf(stderr, "create: %s %s\n", llmt_status_string(s), llmt_context_last_error(ctx));
    return ck;
}

/* ---- global tensors and layouts ---- */
typedef struct {
    const char *name;
    llmt_dtype dtype;
    int ndim;
    int64_t shape[3];
    int seed;
} gt;
static const gt G[] = {
    {"layers.0.w", LLMT_DTYPE_FP32, 2, {12, 10}, 1},
    {"layers.0.b", LLMT_DTYPE_UINT16, 1, {10}, 2},
    {"optim.m/emb", LLMT_DTYPE_FP32, 3, {4, 6, 8}, 3},
    {"rng", LLMT_DTYPE_INT64, 0, {0}, 4},
};
#define NG (sizeof G / sizeof G[0])

typedef struct {
    int world;
    int parts[NG][3]; /* per tensor and dim; product * replicas == world */
} layout;

static int prod(const int *p, int n)
{
    int r = 1;
    for (int i = 0; i < n; i++)
        r *= p[i] ? p[i] : 1;
    return r;
}

/* Block of rank r for tensor t under layout L: offsets and shape; returns 0
 * if this rank is a replica that should not save (replicas beyond the first
 * save too when save_replicas). */
static int block_of(const layout *L, int t, int r, int64_t *off, int64_t *shp, int *replica)
{
    int nd = G[t].ndim;
    int p[3] = {1, 1, 1};
    for (int d = 0; d < nd; d++)
        p[d] = L->parts[t][d] ? L->parts[t][d] : 1;
    int np = prod(p, nd);
    int g = r % np;
    *replica = r / np;
    for (int d = nd - 1; d >= 0; d--) {
        int i = g % p[d];
        g /= p[d];
        int64_t n = G[t].shape[d];
        int64_t a = n * i / p[d], b = n * (i + 1) / p[d];
        off[d] = a;
        shp[d] = b - a;
    }
    return 1;
}

static void fill_block(void *buf, int t, const int64_t *off, const int64_t *shp)
{
    int nd = G[t].ndim;
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= shp[d];
    for (int64_t i = 0; i < n; i++) {
        /* global linear index of local element i */
        int64_t rem = i, gi = 0, mul = 1;
        int64_t idx[3];
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = rem % shp[d];
            rem /= shp[d];
        }
        for (int d = nd - 1; d >= 0; d--) {
            gi += (idx[d] + off[d]) * mul;
            mul *= G[t].shape[d];
        }
        float v = gval(G[t].seed, gi);
        switch (G[t].dtype) {
        case LLMT_DTYPE_FP32: ((float *)buf)[i] = v; break;
        case LLMT_DTYPE_UINT16: ((uint16_t *)buf)[i] = (uint16_t)(int)v; break;
        case LLMT_DTYPE_INT64: ((int64_t *)buf)[i] = (int64_t)(v * 1e6); break;
        default: break;
        }
    }
}

static int save_layout(llmt_context *ctx, const char *root, const layout *L, int64_t step,
                       int async)
{
    int ok = 1;
    llmt_ckpt **cks = calloc((size_t)L->world, sizeof *cks);
    void *bufs[64][NG];
    memset(bufs, 0, sizeof bufs);
    for (int r = 0; r < L->world; r++) {
        cks[r] = make_ck(ctx, root, r, L->world, LLMT_CKPT_VERIFY_READ, 0);
        if (!cks[r])
            return 0;
        ok &= llmt_ckpt_begin(cks[r], step) == LLMT_OK;
        for (size_t t = 0; t < NG; t++) {
            int64_t off[3] = {0}, shp[3] = {0};
            int rep;
            block_of(L, (int)t, r, off, shp, &rep);
            if (G[t].ndim == 0 && r != 0)
                continue;
            int64_t n = 1;
            for (int d = 0; d < G[t].ndim; d++)
                n *= shp[d];
            bufs[r][t] = calloc((size_t)(n ? n : 1), llmt_dtype_size(G[t].dtype));
            fill_block(bufs[r][t], (int)t, off, shp);
            llmt_tensor v;
            llmt_tensor_init(&v, sizeof v, G[t].dtype, G[t].ndim, shp, bufs[r][t],
                             LLMT_DEVICE_CPU, 0);
            ok &= llmt_ckpt_add_tensor(cks[r], G[t].name, &v, G[t].shape, off) == LLMT_OK;
        }
        char val[32];
        snprintf(val, sizeof val, "r%d", r);
        ok &= llmt_ckpt_set_kv(cks[r], "who", val) == LLMT_OK;
        if (r == 0)
            ok &= llmt_ckpt_set_plan_json(cks[r], "{\"tp\": 2, \"pp\": 2, \"dp\": 2}") == LLMT_OK;
        llmt_status s = llmt_ckpt_save(cks[r], async);
        if (s != LLMT_OK) {
            fprintf(stderr, "save rank %d: %s\n", r, llmt_ckpt_last_error(cks[r]));
            ok = 0;
        }
    }
    for (int r = 0; r < L->world; r++) {
        if (async)
            ok &= llmt_ckpt_wait(cks[r], -1) == LLMT_OK;
        llmt_ckpt_destroy(cks[r]);
        for (size_t t = 0; t < NG; t++)
            free(bufs[r][t]);
    }
    free(cks);
    return ok;
}

/* Load every tensor under layout L on every simulated rank and compare. */
static int load_layout(llmt_context *ctx, const char *root, const layout *L, int64_t step)
{
    int ok = 1;
    for (int r = 0; r < L->world; r++) {
        llmt_ckpt *ck = make_ck(ctx, root, r, L->world, LLMT_CKPT_VERIFY_READ, 0);
        int64_t got = -1;
        if (!ck || llmt_ckpt_open_latest(ck, &got) != LLMT_OK || got != step) {
            fprintf(stderr, "open_latest: got %lld: %s\n", (long long)got,
                    ck ? llmt_ckpt_last_error(ck) : "");
            llmt_ckpt_destroy(ck);
            return 0;
        }
        for (size_t t = 0; t < NG; t++) {
            int64_t off[3] = {0}, shp[3] = {0};
            int rep;
            block_of(L, (int)t, r, off, shp, &rep);
            int64_t n = 1;
            for (int d = 0; d < G[t].ndim; d++)
                n *= shp[d];
            size_t es = llmt_dtype_size(G[t].dtype);
            void *want = calloc((size_t)(n ? n : 1), es), *have = calloc((size_t)(n ? n : 1), es);
            fill_block(want, (int)t, off, shp);
            memset(have, 0xAB, (size_t)n * es);
            llmt_tensor v;
            llmt_tensor_init(&v, sizeof v, G[t].dtype, G[t].ndim, shp, have, LLMT_DEVICE_CPU, 0);
            llmt_status s = llmt_ckpt_read(ck, G[t].name, &v, off);
            if (s != LLMT_OK || memcmp(want, have, (size_t)n * es)) {
                fprintf(stderr, "layout world %d rank %d tensor %s: %s %s\n", L->world, r,
                        G[t].name, llmt_status_string(s), llmt_ckpt_last_error(ck));
                ok = 0;
            }
            free(want);
            free(have);
        }
        char buf[64];
        ok &= llmt_ckpt_get_kv(ck, "who", buf, sizeof buf, NULL) == LLMT_OK && !strcmp(buf, "r0");
        size_t need = 0;
        ok &= llmt_ckpt_get_plan_json(ck, NULL, 0, &need) == LLMT_ERR_BUFFER_TOO_SMALL && need > 10;
        llmt_ckpt_destroy(ck);
    }
    return ok;
}

static void test_reshard(llmt_context *ctx)
{
    char *root = tmpdir_make(NULL, "reshard");
    /* tp2 x pp2 x dp2 style: w split 2x2 and replicated twice (dp), b split
     * 2 replicated 4x, emb split across 2x1x2 then 2 replicas (zero-1-like:
     * optimizer state split along dim 0 among the 8 ranks would be 4x...). */
    layout save8 = {8, {{2, 2}, {2}, {2, 1, 2}, {0}}};
    layout save8z = {8, {{4, 2}, {8}, {2, 2, 2}, {0}}}; /* everything sharded, no replicas */
    layout one = {1, {{1, 1}, {1}, {1, 1, 1}, {0}}};
    layout tp1dp4 = {4, {{1, 1}, {1}, {1, 1, 1}, {0}}}; /* full copies on 4 ranks */
    layout tp4dp2 = {8, {{1, 4}, {2}, {4, 1, 1}, {0}}};
    layout odd3 = {3, {{3, 1}, {3}, {1, 3, 1}, {0}}};   /* uneven blocks */
    layout col5 = {5, {{1, 5}, {5}, {1, 1, 5}, {0}}};
    CHECK(save_layout(ctx, root, &save8, 10, 0));
    CHECK(load_layout(ctx, root, &one, 10));
    CHECK(load_layout(ctx, root, &tp1dp4, 10));
    CHECK(load_layout(ctx, root, &tp4dp2, 10));
    CHECK(load_layout(ctx, root, &odd3, 10));
    CHECK(load_layout(ctx, root, &col5, 10));
    CHECK(load_layout(ctx, root, &save8, 10));
    /* A second layout, saved asynchronously at a later step. */
    CHECK(save_layout(ctx, root, &save8z, 20, 1));
    CHECK(load_layout(ctx, root, &odd3, 20));
    CHECK(load_layout(ctx, root, &one, 20));
    tmpdir_remove(root);
    free(root);
}

/* A rank may name a tensor with an empty block (the trainer does, so the
 * merged manifest lists tensors in the model's order whatever stage holds
 * them): the tensor keeps its place, and the empty blocks are not listed
 * in the merged manifest nor in the parts of ranks other than 0 (each
 * rank of each tensor grew them with the world). Rank 0 names "late"
 * first but holds only "early"; rank 1 holds "late". */
/* Replicas must be the same bytes: two ranks each save a whole "norm"
 * (the same block, as tensor parallel ranks save a replicated norm
 * weight). Equal, step 1 commits; one element apart at step 2, the save
 * is refused with LLMT_ERR_CHECKSUM naming the tensor and both ranks, and
 * step 1 stays the newest. */
static void test_diverged_replicas(llmt_context *ctx)
{
    char *root = tmpdir_make(NULL, "replicas");
    int64_t eight = 8, zero = 0;
    for (int64_t step = 1; step <= 2; step++) {
        llmt_status last = LLMT_OK;
        char msg[1024] = "";
        for (int r = 0; r < 2; r++) {
            float w[8] = {1, 2, 3, 4, 5, 6, 7, 8};
            if (step == 2 && r == 1)
                w[5] = 6.0000005f; /* one ulp-ish apart */
            llmt_ckpt *ck = make_ck(ctx, root, r, 2, LLMT_CKPT_VERIFY_READ, 0);
            CHECK(ck != NULL);
            if (!ck) {
                free(root);
                return;
            }
            llmt_tensor v;
            llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &eight, w, LLMT_DEVICE_CPU, 0);
            CHECK_STATUS(llmt_ckpt_begin(ck, step), LLMT_OK);
            CHECK_STATUS(llmt_ckpt_add_tensor(ck, "norm", &v, &eight, &zero), LLMT_OK);
            llmt_status s = llmt_ckpt_save(ck, 0);
            if (s != LLMT_OK) {
                last = s;
                snprintf(msg, sizeof msg, "%s", llmt_ckpt_last_error(ck));
            }
            llmt_ckpt_destroy(ck);
        }
        if (step == 1) {
            CHECK_STATUS(last, LLMT_OK);
        } else {
            CHECK_STATUS(last, LLMT_ERR_CHECKSUM);
            CHECK(strstr(msg, "'norm'") && strstr(msg, "ranks 0 and 1"));
            fprintf(stderr, "diverged replicas: %s\n", msg);
        }
    }
    llmt_ckpt *ck = make_ck(ctx, root, 0, 1, LLMT_CKPT_VERIFY_READ, 0);
    int64_t at = -1;
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &at), LLMT_OK);
    CHECK_EQ_INT((int)at, 1);
    llmt_ckpt_destroy(ck);
    tmpdir_remove(root);
    free(root);
}

static void test_empty_blocks(llmt_context *ctx)
{
    char *root = tmpdir_make(NULL, "empty");
    float x[4] = {1, 2, 3, 4}, y[4] = {5, 6, 7, 8};
    int64_t four = 4, none = 0, zero = 0;
    for (int r = 0; r < 2; r++) {
        llmt_ckpt *ck = make_ck(ctx, root, r, 2, LLMT_CKPT_VERIFY_READ, 0);
        CHECK(ck != NULL);
        if (!ck)
            break;
        llmt_tensor v, e;
        llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &four, r ? y : x, LLMT_DEVICE_CPU,
                         0);
        llmt_tensor_init(&e, sizeof e, LLMT_DTYPE_FP32, 1, &none, x, LLMT_DEVICE_CPU, 0);
        CHECK_STATUS(llmt_ckpt_begin(ck, 3), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_add_tensor(ck, "late", r ? &v : &e, &four, &zero), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_add_tensor(ck, "early", r ? &e : &v, &four, &zero), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
        llmt_ckpt_destroy(ck);
    }
    llmt_ckpt *ck = make_ck(ctx, root, 0, 1, LLMT_CKPT_VERIFY_READ, 0);
    int64_t at = -1;
    const char *name = NULL;
    size_t nc = 99;
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &at), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_tensor_name(ck, 0, &name), LLMT_OK);
    CHECK(name && !strcmp(name, "late"));
    CHECK_STATUS(llmt_ckpt_tensor_info(ck, "late", NULL, NULL, NULL, &nc), LLMT_OK);
    CHECK_EQ_INT(nc, 1);
    CHECK_STATUS(llmt_ckpt_tensor_info(ck, "early", NULL, NULL, NULL, &nc), LLMT_OK);
    CHECK_EQ_INT(nc, 1);
    float got[4] = {0};
    llmt_tensor g;
    llmt_tensor_init(&g, sizeof g, LLMT_DTYPE_FP32, 1, &four, got, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(ck, "late", &g, NULL), LLMT_OK);
    CHECK(memcmp(got, y, sizeof got) == 0);
    CHECK_STATUS(llmt_ckpt_verify(ck), LLMT_OK);
    llmt_ckpt_destroy(ck);
    char path[4200], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/step-000000000003/manifest.json", root);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (f) {
        text = calloc(1, 1 << 16);
        len = fread(text, 1, (1 << 16) - 1, f);
        fclose(f);
        CHECK(len > 0 && strstr(text, "\"local_shape\":[0]") == NULL &&
              strstr(text, "\"local_shape\": [0]") == NULL);
    }
    free(text);
    /* the parts: rank 0's names "late" with its empty block (the order),
     * rank 1's lists only what it holds ("late", not "early") */
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/step-000000000003/rank-%05d.json", root, r);
        f = fopen(path, "rb");
        CHECK(f != NULL);
        if (!f)
            continue;
        text = calloc(1, 1 << 16);
        len = fread(text, 1, (1 << 16) - 1, f);
        fclose(f);
        CHECK(len > 0);
        if (r == 0)
            CHECK(strstr(text, "\"name\":\"late\"") && strstr(text, "\"local_shape\":[0]"));
        else
            CHECK(strstr(text, "\"name\":\"late\"") && !strstr(text, "\"name\":\"early\"") &&
                  !strstr(text, "\"local_shape\":[0]"));
        free(text);
    }
    tmpdir_remove(root);
    free(root);
}

static void test_roundtrip(llmt_context *ctx, const char *base, const char *tag)
{
    char *root = tmpdir_make(base, tag);
    CHECK(root != NULL);
    if (!root)
        return;
    llmt_ckpt *ck = make_ck(ctx, root, 0, 1, LLMT_CKPT_VERIFY_FULL, 3);
    CHECK(ck != NULL);
    /* big enough for several hashed blocks and aio pieces */
    int64_t n = (int64_t)3 << 20; /* 12 MiB of fp32 */
    float *a = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        a[i] = gval(7, i);
    /* a strided view: every other column of a [4, 6] int32 matrix */
    int32_t m[24];
    for (int i = 0; i < 24; i++)
        m[i] = i * 3 - 7;
    llmt_tensor va, vs;
    int64_t sa[2] = {1024, 3072};
    llmt_tensor_init(&va, sizeof va, LLMT_DTYPE_FP32, 2, sa, a, LLMT_DEVICE_CPU, 0);
    int64_t ss[2] = {4, 3};
    llmt_tensor_init(&vs, sizeof vs, LLMT_DTYPE_INT32, 2, ss, m, LLMT_DEVICE_CPU, 0);
    vs.strides[0] = 6;
    vs.strides[1] = 2;
    for (int64_t step = 100; step <= 500; step += 100) {
        a[0] = (float)step;
        CHECK_STATUS(llmt_ckpt_begin(ck, step), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_add_tensor(ck, "params/a", &va, NULL, NULL), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_add_tensor(ck, "strided", &vs, NULL, NULL), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_set_kv(ck, "data.cursor", "12345"), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_set_kv(ck, "quote", "a \"quoted\" \\ value\n"), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_save(ck, step == 300), LLMT_OK);
        if (step == 300) {
            a[0] = -1; /* the snapshot is taken: the caller may change its state */
            CHECK_STATUS(llmt_ckpt_wait(ck, -1), LLMT_OK);
            int64_t last = -2;
            CHECK_STATUS(llmt_ckpt_save_status(ck, &last), LLMT_OK);
            CHECK_EQ_INT(last, 300);
        }
    }
    int64_t steps[8];
    size_t cnt = 0;
    CHECK_STATUS(llmt_ckpt_list(ck, steps, 8, &cnt), LLMT_OK);
    CHECK_EQ_INT(cnt, 3); /* keep_last 3 */
    CHECK_EQ_INT(steps[0], 300);
    /* Re-saving a committed step is refused. */
    CHECK_STATUS(llmt_ckpt_begin(ck, 500), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_ERR_STATE);
    llmt_ckpt_destroy(ck);

    ck = make_ck(ctx, root, 0, 1, LLMT_CKPT_VERIFY_FULL, 3);
    int64_t step = -1;
    CHECK_STATUS(llmt_ckpt_open_step(ck, 300), LLMT_OK);
    float *b = malloc((size_t)n * 4);
    llmt_tensor vb;
    llmt_tensor_init(&vb, sizeof vb, LLMT_DTYPE_FP32, 2, sa, b, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(ck, "params/a", &vb, NULL), LLMT_OK);
    CHECK(b[0] == 300.0f);
    CHECK(memcmp(a + 1, b + 1, (size_t)(n - 1) * 4) == 0);
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &step), LLMT_OK);
    CHECK_EQ_INT(step, 500);
    CHECK_STATUS(llmt_ckpt_read(ck, "params/a", &vb, NULL), LLMT_OK);
    CHECK(b[0] == 500.0f);
    /* a sub-block read: rows 100..103, columns 1000..1099 */
    float sub[4 * 100];
    int64_t subs[2] = {4, 100}, subo[2] = {100, 1000};
    llmt_tensor vsub;
    llmt_tensor_init(&vsub, sizeof vsub, LLMT_DTYPE_FP32, 2, subs, sub, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(ck, "params/a", &vsub, subo), LLMT_OK);
    int same = 1;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 100; c++)
            same &= sub[r * 100 + c] == a[(100 + r) * 3072 + 1000 + c];
    CHECK(same);
    int32_t got[12], want[12];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            want[r * 3 + c] = m[r * 6 + c * 2];
    llmt_tensor vg;
    llmt_tensor_init(&vg, sizeof vg, LLMT_DTYPE_INT32, 2, ss, got, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(ck, "strided", &vg, NULL), LLMT_OK);
    CHECK(memcmp(got, want, sizeof got) == 0);
    /* into a strided destination: rows 100..103, columns 1000..1099 of
     * params/a into every other column of a [4, 200] buffer, whose other
     * columns must stay as they were; a stride 0 is refused */
    float wide[4 * 200];
    for (int i = 0; i < 800; i++)
        wide[i] = -7.0f;
    llmt_tensor vw;
    llmt_tensor_init(&vw, sizeof vw, LLMT_DTYPE_FP32, 2, subs, wide + 1, LLMT_DEVICE_CPU, 0);
    vw.strides[0] = 200;
    vw.strides[1] = 2;
    CHECK_STATUS(llmt_ckpt_read(ck, "params/a", &vw, subo), LLMT_OK);
    same = 1;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 200; c++)
            same &= wide[r * 200 + c] == (c % 2 ? a[(100 + r) * 3072 + 1000 + c / 2] : -7.0f);
    CHECK(same);
    vw.strides[1] = 1; /* rows 200 apart, contiguous within (a column block) */
    CHECK_STATUS(llmt_ckpt_read(ck, "params/a", &vw, subo), LLMT_OK);
    CHECK(wide[1] == a[100 * 3072 + 1000] && wide[100] == a[100 * 3072 + 1099] &&
          wide[201] == a[101 * 3072 + 1000] && wide[0] == -7.0f && wide[101] != -7.0f);
    vw.strides[1] = 0;
    CHECK_STATUS(llmt_ckpt_read(ck, "params/a", &vw, subo), LLMT_ERR_INVALID_ARGUMENT);
    char buf[64];
    CHECK_STATUS(llmt_ckpt_get_kv(ck, "quote", buf, sizeof buf, NULL), LLMT_OK);
    CHECK(!strcmp(buf, "a \"quoted\" \\ value\n"));
    CHECK_STATUS(llmt_ckpt_get_kv(ck, "nope", buf, sizeof buf, NULL), LLMT_ERR_NOT_FOUND);
    CHECK_STATUS(llmt_ckpt_verify(ck), LLMT_OK);
    /* wrong dtype / out-of-range block / unknown tensor */
    llmt_tensor bad;
    llmt_tensor_init(&bad, sizeof bad, LLMT_DTYPE_BF16, 2, subs, sub, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(ck, "params/a", &bad, subo), LLMT_ERR_INVALID_ARGUMENT);
    int64_t far[2] = {1022, 0};
    CHECK_STATUS(llmt_ckpt_read(ck, "params/a", &vsub, far), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_ckpt_read(ck, "params/zz", &vsub, NULL), LLMT_ERR_NOT_FOUND);
    size_t nt = 0;
    CHECK_STATUS(llmt_ckpt_tensor_count(ck, &nt), LLMT_OK);
    CHECK_EQ_INT(nt, 2);
    /* export and read the safetensors header back */
    char out[4200];
    snprintf(out, sizeof out, "%s/x.safetensors", root);
    CHECK_STATUS(llmt_ckpt_export_safetensors(ck, out), LLMT_OK);
    FILE *f = fopen(out, "rb");
    uint8_t l8[8] = {0};
    CHECK(f && fread(l8, 1, 8, f) == 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | l8[i];
    char *hdr = calloc(1, hl + 1);
    CHECK(f && fread(hdr, 1, hl, f) == hl);
    CHECK(strstr(hdr, "\"params/a\":{\"dtype\":\"F32\",\"shape\":[1024,3072],\"data_offsets\":[0,12582912]}") != NULL);
    float first[2];
    CHECK(f && fread(first, 4, 2, f) == 2 && first[0] == 500.0f && first[1] == a[1]);
    if (f)
        fclose(f);
    free(hdr);
    llmt_ckpt_destroy(ck);
    free(a);
    free(b);
    tmpdir_remove(root);
    free(root);
}

static void test_bad_args(llmt_context *ctx)
{
    char *root = tmpdir_make(NULL, "args");
    llmt_ckpt *ck = NULL;
    llmt_ckpt_opts o;
    CHECK_STATUS(llmt_ckpt_opts_init(NULL, sizeof o), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_ckpt_opts_init(&o, 2), LLMT_ERR_STRUCT_SIZE);
    llmt_ckpt_opts_init(&o, sizeof o);
    o.rank = 3;
    o.world_size = 2;
    CHECK_STATUS(llmt_ckpt_create(ctx, root, &o, &ck), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "rank 3") != NULL);
    CHECK_STATUS(llmt_ckpt_create(ctx, NULL, NULL, &ck), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_ckpt_create(ctx, root, NULL, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_ckpt_create(ctx, root, NULL, &ck), LLMT_OK);
    float x[4] = {1, 2, 3, 4};
    llmt_tensor v;
    int64_t s4 = 4;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &s4, x, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "x", &v, NULL, NULL), LLMT_ERR_STATE);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_ERR_STATE);
    CHECK_STATUS(llmt_ckpt_begin(ck, -1), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_ckpt_begin(ck, 1), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "", &v, NULL, NULL), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "a\"b", &v, NULL, NULL), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "x", NULL, NULL, NULL), LLMT_ERR_NULL_POINTER);
    int64_t gs = 6, go = 3;
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "x", &v, &gs, &go), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "x", &v, NULL, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "x", &v, NULL, NULL), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_ckpt_set_plan_json(ck, "[1]"), LLMT_ERR_INVALID_ARGUMENT);
    /* text that is not JSON was kept, and saved as "plan": null */
    CHECK_STATUS(llmt_ckpt_set_plan_json(ck, " {\"tp\": 2}"), LLMT_OK);
    static const char *const not_json[] = {"{oops", "{\"tp\": 1} x", "{\"tp\": }", ""};
    for (size_t i = 0; i < sizeof not_json / sizeof not_json[0]; i++) {
        CHECK_STATUS(llmt_ckpt_set_plan_json(ck, not_json[i]), LLMT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(llmt_ckpt_last_error(ck), "set_plan_json") != NULL);
    }
    CHECK_STATUS(llmt_ckpt_read(ck, "x", &v, NULL), LLMT_ERR_STATE);
    /* async takes 0 or 1 (2 was a save that returned before it was durable) */
    CHECK_STATUS(llmt_ckpt_save(ck, 2), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_ckpt_last_error(ck), "async") != NULL);
    CHECK_STATUS(llmt_ckpt_save(ck, -1), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_ckpt_save_status(ck, NULL), LLMT_OK); /* nothing started */
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
    /* a tensor only half saved (global 8, only [0,4) present) is not a
     * checkpoint: the commit refuses it, naming the coverage, and the
     * previous step stays the newest */
    CHECK_STATUS(llmt_ckpt_begin(ck, 2), LLMT_OK);
    int64_t g8 = 8;
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "half", &v, &g8, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_ERR_FORMAT);
    CHECK(strstr(llmt_ckpt_last_error(ck), "cover 4 of 8") != NULL);
    int64_t got_step = -1;
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &got_step), LLMT_OK);
    CHECK_EQ_INT(got_step, 1);
    /* the plan set before the refused texts is the one saved */
    char plan[64] = "";
    CHECK_STATUS(llmt_ckpt_get_plan_json(ck, plan, sizeof plan, NULL), LLMT_OK);
    CHECK(strstr(plan, "\"tp\"") && strstr(plan, "2"));
    /* bounded buffer */
    llmt_ckpt_destroy(ck);
    o.rank = 0;
    o.world_size = 1;
    o.host_buffer_bytes = 4096;
    CHECK_STATUS(llmt_ckpt_create(ctx, root, &o, &ck), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_begin(ck, 3), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "x", &v, NULL, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_ERR_BUFFER_TOO_SMALL);
    llmt_ckpt_destroy(ck);
    llmt_ckpt_destroy(NULL);
    tmpdir_remove(root);
    free(root);
}

/* Save steps 1 and 2 of a 2-rank checkpoint in `root`. */
static void save_two(llmt_context *ctx, const char *root)
{
    layout L = {2, {{2, 1}, {2}, {1, 1, 2}, {0}}};
    CHECK(save_layout(ctx, root, &L, 1, 0));
    CHECK(save_layout(ctx, root, &L, 2, 0));
}

static int64_t latest_of(llmt_context *ctx, const char *root, int verify)
{
    llmt_ckpt *ck = make_ck(ctx, root, 0, 1, verify, 0);
    int64_t step = -1;
    llmt_status s = llmt_ckpt_open_latest(ck, &step);
    llmt_ckpt_destroy(ck);
    return s == LLMT_OK ? step : -1;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = calloc(1, (size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

/* Replace the first occurrence of `from` in the step-2 manifest by `to`,
 * resealed (a deliberate edit: the field checks, not the digest, refuse
 * it). */
static int edit_manifest(const char *root, const char *from, const char *to)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/step-000000000002/manifest.json", root);
    char *t = read_text(p);
    if (!t)
        return 0;
    char *at = strstr(t, from);
    if (!at) {
        free(t);
        return 0;
    }
    size_t n = strlen(t) + strlen(to) + 1;
    char *o = malloc(n);
    memcpy(o, t, (size_t)(at - t));
    strcpy(o + (at - t), to);
    strcat(o, at + strlen(from));
    CHECK(manifest_reseal(o, strlen(o)));
    write_text(p, o);
    free(t);
    free(o);
    return 1;
}

static void corrupt_case(llmt_context *ctx, const char *what, int verify, int64_t want,
                         void (*damage)(const char *root))
{
    char *root = tmpdir_make(NULL, "corrupt");
    save_two(ctx, root);
    CHECK_EQ_INT(latest_of(ctx, root, verify), 2);
    damage(root);
    warn_count = 0;
    int64_t got = latest_of(ctx, root, verify);
    if (got != want)
        fprintf(stderr, "corruption case '%s': got step %lld, want %lld (last warning: %s)\n",
                what, (long long)got, (long long)want, last_warn);
    CHECK_EQ_INT(got, want);
    if (want == 1) {
        CHECK(warn_count >= 1); /* the skipped checkpoint is named with a reason */
        CHECK(strstr(last_warn, "step") != NULL);
    }
    tmpdir_remove(root);
    free(root);
}

static void flip_bit(const char *root)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/step-000000000002/rank-00001.bin", root);
    int fd = open(p, O_RDWR);
    unsigned char c;
    if (pread(fd, &c, 1, 4096 + 5) == 1) {
        c ^= 0x10;
        if (pwrite(fd, &c, 1, 4096 + 5) != 1)
            perror("pwrite");
    }
    close(fd);
}
static void truncate_file(const char *root)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/step-000000000002/rank-00000.bin", root);
    if (truncate(p, 5000))
        perror("truncate");
}
static void delete_file(const char *root)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/step-000000000002/rank-00001.bin", root);
    unlink(p);
}
static void delete_manifest(const char *root)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/step-000000000002/manifest.json", root);
    unlink(p);
}
static void garbage_manifest(const char *root)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/step-000000000002/manifest.json", root);
    write_text(p, "{\"format\": \"llmtrain-checkpoint\", \"version\": 1, \"step\": 2, garbage");
}
static void bad_header(const char *root)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/step-000000000002/rank-00000.bin", root);
    int fd = open(p, O_RDWR);
    if (pwrite(fd, "XX", 2, 0) != 2)
        perror("pwrite");
    close(fd);
}
static void huge_size(const char *root)
{
    CHECK(edit_manifest(root, "\"global_shape\":[12,10]", "\"global_shape\":[12,1e300]"));
}
static void huge_length(const char *root)
{
    CHECK(edit_manifest(root, "\"bytes\":", "\"bytes\":9007199254740993"));
}
static void negative_offset(const char *root)
{
    CHECK(edit_manifest(root, "\"offset\":", "\"offset\":-4096000,\"x\":"));
}
static void traversal(const char *root)
{
    CHECK(edit_manifest(root, "\"file\":\"rank-00000.bin\"", "\"file\":\"../../etc/passwd\""));
}
static void newer_version(const char *root)
{
    CHECK(edit_manifest(root, "\"version\":1", "\"version\":99"));
}
static void overlap(const char *root)
{
    /* move rank 1's block of layers.0.w onto rank 0's */
    CHECK(edit_manifest(root, "\"global_offsets\":[6,0]", "\"global_offsets\":[5,0]"));
}

static void test_corruption(llmt_context *ctx)
{
    /* VERIFY_FULL hashes everything at open: a flipped bit skips step 2. */
    corrupt_case(ctx, "flipped bit", LLMT_CKPT_VERIFY_FULL, 1, flip_bit);
    corrupt_case(ctx, "truncated file", LLMT_CKPT_VERIFY_READ, 1, truncate_file);
    corrupt_case(ctx, "deleted file", LLMT_CKPT_VERIFY_READ, 1, delete_file);
    corrupt_case(ctx, "no manifest (partial)", LLMT_CKPT_VERIFY_READ, 1, delete_manifest);
    corrupt_case(ctx, "garbage manifest", LLMT_CKPT_VERIFY_READ, 1, garbage_manifest);
    corrupt_case(ctx, "bad data header", LLMT_CKPT_VERIFY_READ, 1, bad_header);
    corrupt_case(ctx, "huge size", LLMT_CKPT_VERIFY_READ, 1, huge_size);
    corrupt_case(ctx, "huge file length", LLMT_CKPT_VERIFY_READ, 1, huge_length);
    corrupt_case(ctx, "negative offset", LLMT_CKPT_VERIFY_READ, 1, negative_offset);
    corrupt_case(ctx, "path traversal", LLMT_CKPT_VERIFY_READ, 1, traversal);
    corrupt_case(ctx, "newer format version", LLMT_CKPT_VERIFY_READ, 1, newer_version);
    corrupt_case(ctx, "overlapping chunks", LLMT_CKPT_VERIFY_READ, 1, overlap);

    /* With VERIFY_READ the flipped bit is found when the block is read. */
    char *root = tmpdir_make(NULL, "flipread");
    save_two(ctx, root);
    flip_bit(root);
    llmt_ckpt *ck = make_ck(ctx, root, 0, 1, LLMT_CKPT_VERIFY_READ, 0);
    CHECK_STATUS(llmt_ckpt_open_latest(ck, NULL), LLMT_OK);
    float w[120];
    int64_t ws[2] = {12, 10};
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, ws, w, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(ck, "layers.0.w", &v, NULL), LLMT_ERR_CHECKSUM);
    CHECK(strstr(llmt_ckpt_last_error(ck), "checksum") != NULL);
    CHECK_STATUS(llmt_ckpt_verify(ck), LLMT_ERR_CHECKSUM);
    /* reading the untouched half still works */
    int64_t hs[2] = {6, 10};
    v.shape[0] = 6;
    (void)hs;
    CHECK_STATUS(llmt_ckpt_read(ck, "layers.0.w", &v, NULL), LLMT_OK);
    llmt_ckpt_destroy(ck);
    tmpdir_remove(root);
    free(root);
}

/* A save that hits RLIMIT_FSIZE fails with an error, the earlier checkpoint
 * stays loadable, and a later (smaller) save succeeds. Runs in a child so
 * the limit does not leak into the other tests. */
static void test_write_error(llmt_context *ctx)
{
    char *root = tmpdir_make(NULL, "fsize");
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        llmt_ckpt *ck = make_ck(ctx, root, 0, 1, LLMT_CKPT_VERIFY_FULL, 0);
        static float big[1 << 20];
        for (int i = 0; i < (1 << 20); i++)
            big[i] = (float)i;
        llmt_tensor v;
        int64_t small = 1000, n = 1 << 20;
        llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &small, big, LLMT_DEVICE_CPU, 0);
        int bad = 0;
        bad |= llmt_ckpt_begin(ck, 1) || llmt_ckpt_add_tensor(ck, "w", &v, NULL, NULL) ||
               llmt_ckpt_save(ck, 0);
        struct rlimit rl = {1 << 20, 1 << 20}; /* 1 MiB per file */
        setrlimit(RLIMIT_FSIZE, &rl);
        v.shape[0] = n;
        llmt_ckpt_begin(ck, 2);
        llmt_ckpt_add_tensor(ck, "w", &v, NULL, NULL);
        llmt_status s = llmt_ckpt_save(ck, 1);
        s = s == LLMT_OK ? llmt_ckpt_wait(ck, -1) : s;
        if (s != LLMT_ERR_IO) {
            fprintf(stderr, "expected IO error, got %s\n", llmt_status_string(s));
            bad = 1;
        } else if (!strstr(llmt_ckpt_last_error(ck), "rank-00000.bin"))
            bad = 1;
        int64_t step = -1;
        bad |= llmt_ckpt_open_latest(ck, &step) != LLMT_OK || step != 1;
        /* training continues: the next save fits */
        v.shape[0] = small;
        bad |= llmt_ckpt_begin(ck, 3) || llmt_ckpt_add_tensor(ck, "w", &v, NULL, NULL) ||
               llmt_ckpt_save(ck, 0);
        bad |= llmt_ckpt_open_latest(ck, &step) != LLMT_OK || step != 3;
        llmt_ckpt_destroy(ck);
        _exit(bad);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    tmpdir_remove(root);
    free(root);
}

typedef struct {
    int peer, durable;
    char last[4200];
} hook_log;
static llmt_status hook(void *user, llmt_ckpt_tier tier, int64_t step, const char *path)
{
    hook_log *h = user;
    (void)step;
    if (tier == LLMT_CKPT_TIER_PEER)
        h->peer++;
    if (tier == LLMT_CKPT_TIER_DURABLE) {
        h->durable++;
        snprintf(h->last, sizeof h->last, "%s", path);
    }
    return LLMT_OK;
}

static void test_tiers(llmt_context *ctx)
{
    char *root = tmpdir_make(NULL, "local");
    char *dur = tmpdir_make(NULL, "durable");
    hook_log h = {0};
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.keep_last = 2;
    o.keep_every = 4;
    o.durable_dir = dur;
    o.durable_keep_last = 1;
    o.tier_fn = hook;
    o.tier_user = &h;
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(ctx, root, &o, &ck), LLMT_OK);
    float x[16] = {0};
    int64_t n = 16;
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, x, LLMT_DEVICE_CPU, 0);
    for (int s = 1; s <= 10; s++) {
        x[0] = (float)s;
        llmt_ckpt_begin(ck, s);
        llmt_ckpt_add_tensor(ck, "x", &v, NULL, NULL);
        CHECK_STATUS(llmt_ckpt_save(ck, 1), LLMT_OK);
    }
    CHECK_STATUS(llmt_ckpt_wait(ck, 10000), LLMT_OK);
    int64_t steps[16];
    size_t cnt = 0;
    CHECK_STATUS(llmt_ckpt_list(ck, steps, 16, &cnt), LLMT_OK);
    /* keep last 2 (9, 10) and every 4th (4, 8) */
    CHECK_EQ_INT(cnt, 4);
    CHECK(cnt == 4 && steps[0] == 4 && steps[1] == 8 && steps[2] == 9 && steps[3] == 10);
    CHECK_EQ_INT(h.peer, 10);
    CHECK_EQ_INT(h.durable, 10);
    CHECK(strstr(h.last, dur) == h.last);
    llmt_ckpt_destroy(ck);
    /* the durable copy loads on its own */
    llmt_ckpt *d = make_ck(ctx, dur, 0, 1, LLMT_CKPT_VERIFY_FULL, 0);
    int64_t step = -1;
    CHECK_STATUS(llmt_ckpt_open_latest(d, &step), LLMT_OK);
    CHECK_EQ_INT(step, 10);
    float y[16];
    llmt_tensor vy;
    llmt_tensor_init(&vy, sizeof vy, LLMT_DTYPE_FP32, 1, &n, y, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(d, "x", &vy, NULL), LLMT_OK);
    CHECK(y[0] == 10.0f);
    CHECK_STATUS(llmt_ckpt_list(d, steps, 16, &cnt), LLMT_OK);
    CHECK_EQ_INT(cnt, 1); /* durable_keep_last 1 */
    llmt_ckpt_destroy(d);
    char lp[4200];
    snprintf(lp, sizeof lp, "%s/latest", root);
    char *lt = read_text(lp);
    CHECK(lt && !strcmp(lt, "step-000000000010\n"));
    free(lt);
    tmpdir_remove(root);
    tmpdir_remove(dur);
    free(root);
    free(dur);
}

/* Disk full (under the shim, LLMT_TEST_ENOSPC_AFTER): the save fails with
 * an I/O error naming ENOSPC, leaves no partial data file behind, the
 * earlier checkpoint loads, and once space is back the next save works. */
static void test_enospc(llmt_context *ctx)
{
    char *root = tmpdir_make(NULL, "enospc");
    llmt_ckpt *ck = make_ck(ctx, root, 0, 1, LLMT_CKPT_VERIFY_FULL, 0);
    static float big[1 << 18];
    for (int i = 0; i < (1 << 18); i++)
        big[i] = (float)i;
    int64_t n = 1000;
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, big, LLMT_DEVICE_CPU, 0);
    setenv("LLMT_TEST_ENOSPC_AFTER", "65536", 1);
    CHECK_STATUS(llmt_ckpt_begin(ck, 1), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "w", &v, NULL, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
    n = 1 << 18; /* 1 MiB: does not fit */
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, big, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_begin(ck, 2), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "w", &v, NULL, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 1), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_wait(ck, -1), LLMT_ERR_IO);
    CHECK(strstr(llmt_ckpt_last_error(ck), "No space left") != NULL);
    CHECK(strstr(llmt_ckpt_last_error(ck), "rank-00000.bin") != NULL);
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/step-000000000002/rank-00000.bin", root);
    CHECK(stat(p, &st) != 0); /* the partial file was removed */
    int64_t step = -1;
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &step), LLMT_OK);
    CHECK_EQ_INT(step, 1);
    float back[1000];
    n = 1000;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, back, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(ck, "w", &v, NULL), LLMT_OK);
    CHECK(!memcmp(back, big, sizeof back));
    /* the host-memory tier still holds step 2, which never reached the disk */
    big[5] = -1.0f; /* the caller's tensor moved on */
    CHECK_STATUS(llmt_ckpt_open_snapshot(ck, &step), LLMT_OK);
    CHECK_EQ_INT(step, 2);
    float *b2 = malloc(sizeof(float) << 18);
    int64_t n2 = 1 << 18;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n2, b2, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(ck, "w", &v, NULL), LLMT_OK);
    CHECK(b2[5] == 5.0f && b2[(1 << 18) - 1] == (float)((1 << 18) - 1));
    CHECK_STATUS(llmt_ckpt_verify(ck), LLMT_OK);
    free(b2);
    big[5] = 5.0f;
    /* space comes back: training goes on saving */
    setenv("LLMT_TEST_ENOSPC_AFTER", "-1", 1);
    n = 1 << 18;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, big, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_begin(ck, 3), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "w", &v, NULL, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &step), LLMT_OK);
    CHECK_EQ_INT(step, 3);
    CHECK_STATUS(llmt_ckpt_verify(ck), LLMT_OK);
    unsetenv("LLMT_TEST_ENOSPC_AFTER");
    llmt_ckpt_destroy(ck);
    tmpdir_remove(root);
    free(root);
}

/* Disk full under libaio (the aio_short_shim): a write completion comes
 * back short, which carries no errno; the writer retries the remainder and
 * reports what the retry hit (ENOSPC), with the file and offset, instead
 * of "short write". The earlier step is still the newest. */
static int test_aio_enospc(llmt_context *ctx)
{
    char *root = tmpdir_make(NULL, "aiofull");
    llmt_ckpt *ck = make_ck(ctx, root, 0, 1, LLMT_CKPT_VERIFY_FULL, 0);
    static float big[1 << 20];
    for (int i = 0; i < (1 << 20); i++)
        big[i] = (float)i;
    int64_t n = 1000;
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, big, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_begin(ck, 1), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "w", &v, NULL, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
    if (saw_direct == 0) { /* this filesystem refuses O_DIRECT: no aio path */
        llmt_ckpt_destroy(ck);
        tmpdir_remove(root);
        free(root);
        fprintf(stderr, "SKIP: O_DIRECT is refused in the temporary directory\n");
        return 77;
    }
    int *shorts = (int *)dlsym(RTLD_DEFAULT, "llmt_test_aio_short_count");
    CHECK(shorts != NULL);
    setenv("LLMT_TEST_AIO_FULL_AT", "1048576", 1); /* 1 MiB fits, 4 MiB not */
    n = 1 << 20;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, big, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_begin(ck, 2), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "w", &v, NULL, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_ERR_IO);
    const char *msg = llmt_ckpt_last_error(ck);
    fprintf(stderr, "aio disk full: %s\n", msg);
    CHECK(strstr(msg, "No space left") != NULL);
    /* the data file, written under its temporary name, and the offset */
    CHECK(strstr(msg, "/.rank-00000.bin.tmp.") != NULL && strstr(msg, " at 1048576:") != NULL);
    CHECK(shorts && *shorts > 0);
    unsetenv("LLMT_TEST_AIO_FULL_AT");
    int64_t step = -1;
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &step), LLMT_OK);
    CHECK_EQ_INT(step, 1);
    llmt_ckpt_destroy(ck);
    tmpdir_remove(root);
    free(root);
    return 0;
}

/* Host tier: the last snapshot, read from memory; a new save closes it. */
static void test_host_tier(llmt_context *ctx)
{
    char *root = tmpdir_make(NULL, "host");
    llmt_ckpt *ck = make_ck(ctx, root, 0, 1, LLMT_CKPT_VERIFY_READ, 0);
    float x[16] = {0}, y[16];
    int64_t n = 16, hs = -1;
    llmt_tensor v, vy;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, x, LLMT_DEVICE_CPU, 0);
    llmt_tensor_init(&vy, sizeof vy, LLMT_DTYPE_FP32, 1, &n, y, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_open_snapshot(ck, &hs), LLMT_ERR_NOT_FOUND);
    x[0] = 10.0f;
    CHECK_STATUS(llmt_ckpt_begin(ck, 10), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "x", &v, NULL, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 1), LLMT_OK);
    x[0] = 99.0f; /* the caller moves on */
    CHECK_STATUS(llmt_ckpt_open_snapshot(ck, &hs), LLMT_OK); /* waits for the write */
    CHECK_EQ_INT(hs, 10);
    CHECK_STATUS(llmt_ckpt_read(ck, "x", &vy, NULL), LLMT_OK);
    CHECK(y[0] == 10.0f);
    CHECK_STATUS(llmt_ckpt_verify(ck), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_begin(ck, 11), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "x", &v, NULL, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 1), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_read(ck, "x", &vy, NULL), LLMT_ERR_STATE);
    CHECK_STATUS(llmt_ckpt_open_snapshot(ck, &hs), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_read(ck, "x", &vy, NULL), LLMT_OK);
    CHECK(hs == 11 && y[0] == 99.0f);
    llmt_ckpt_destroy(ck);
    tmpdir_remove(root);
    free(root);
}

/* One rank may add several blocks of one tensor (a ZeRO share crossing
 * rows is a few boxes): a [4, 6] tensor cut at the flat index 9 into two
 * ranks' boxes, each rank adding two; same-rank overlaps and a different
 * global shape are refused; the whole tensor and a box straddling both
 * ranks' blocks read back exactly, and the chunks keep their boxes. */
static void test_multi_block(llmt_context *ctx)
{
    char *root = tmpdir_make(NULL, "multi");
    float g[24];
    for (int i = 0; i < 24; i++)
        g[i] = (float)i + 0.5f;
    int64_t gs[2] = {4, 6};
    /* rank 0: [0, 9) = row 0, row 1 cols 0..2; rank 1: [9, 24) = row 1
     * cols 3..5, rows 2..3 */
    const int64_t off[4][2] = {{0, 0}, {1, 0}, {1, 3}, {2, 0}};
    const int64_t shp[4][2] = {{1, 6}, {1, 3}, {1, 3}, {2, 6}};
    const int at[4] = {0, 6, 9, 12};
    for (int r = 0; r < 2; r++) {
        llmt_ckpt *ck = make_ck(ctx, root, r, 2, LLMT_CKPT_VERIFY_READ, 0);
        CHECK_STATUS(llmt_ckpt_begin(ck, 5), LLMT_OK);
        for (int b = 2 * r; b < 2 * r + 2; b++) {
            llmt_tensor v;
            llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, shp[b], g + at[b],
                             LLMT_DEVICE_CPU, 0);
            CHECK_STATUS(llmt_ckpt_add_tensor(ck, "m", &v, gs, off[b]), LLMT_OK);
            /* the same block again, or one overlapping it: refused */
            CHECK_STATUS(llmt_ckpt_add_tensor(ck, "m", &v, gs, off[b]),
                         LLMT_ERR_INVALID_ARGUMENT);
            CHECK(strstr(llmt_ckpt_last_error(ck), "overlaps") != NULL);
        }
        llmt_tensor one;
        int64_t s1[2] = {1, 1}, o1[2] = {3, 5}, gbad[2] = {4, 7};
        llmt_tensor_init(&one, sizeof one, LLMT_DTYPE_FP32, 2, s1, g, LLMT_DEVICE_CPU, 0);
        CHECK_STATUS(llmt_ckpt_add_tensor(ck, "m", &one, gbad, NULL), LLMT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(llmt_ckpt_last_error(ck), "global shape") != NULL);
        if (r == 0) /* rank 1 owns [3, 5]: only a same-rank overlap is refused here */
            CHECK_STATUS(llmt_ckpt_add_tensor(ck, "m", &one, gs, o1), LLMT_OK);
        /* rank 1 commits: the merged manifest has overlapping chunks */
        CHECK_STATUS(llmt_ckpt_save(ck, 0), r == 0 ? LLMT_OK : LLMT_ERR_FORMAT);
        llmt_ckpt_destroy(ck);
    }
    /* rank 0's extra [3, 5] overlaps rank 1's box: the commit refuses it */
    llmt_ckpt *ck = make_ck(ctx, root, 0, 1, LLMT_CKPT_VERIFY_READ, 0);
    int64_t step = -1;
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &step), LLMT_ERR_NOT_FOUND);
    llmt_ckpt_destroy(ck);
    tmpdir_remove(root);
    free(root);
    root = tmpdir_make(NULL, "multi2");
    for (int r = 0; r < 2; r++) {
        ck = make_ck(ctx, root, r, 2, LLMT_CKPT_VERIFY_READ, 0);
        CHECK_STATUS(llmt_ckpt_begin(ck, 6), LLMT_OK);
        for (int b = 2 * r; b < 2 * r + 2; b++) {
            llmt_tensor v;
            llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, shp[b], g + at[b],
                             LLMT_DEVICE_CPU, 0);
            CHECK_STATUS(llmt_ckpt_add_tensor(ck, "m", &v, gs, off[b]), LLMT_OK);
        }
        CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
        llmt_ckpt_destroy(ck);
    }
    ck = make_ck(ctx, root, 0, 3, LLMT_CKPT_VERIFY_READ, 0);
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &step), LLMT_OK);
    CHECK_EQ_INT(step, 6);
    size_t nch = 0;
    CHECK_STATUS(llmt_ckpt_tensor_info(ck, "m", NULL, NULL, NULL, &nch), LLMT_OK);
    CHECK_EQ_INT(nch, 4);
    for (size_t c = 0; c < nch; c++) {
        int32_t rk = -1;
        int64_t go[LLMT_MAX_DIMS], ls[LLMT_MAX_DIMS];
        CHECK_STATUS(llmt_ckpt_chunk_info(ck, "m", c, &rk, go, ls, NULL), LLMT_OK);
        CHECK_EQ_INT(rk, (int)c / 2);
        CHECK(go[0] == off[c][0] && go[1] == off[c][1] && ls[0] == shp[c][0] &&
              ls[1] == shp[c][1]);
    }
    float all[24], mid[6];
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, gs, all, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(ck, "m", &v, NULL), LLMT_OK);
    CHECK(memcmp(all, g, sizeof g) == 0);
    /* rows 1..2, cols 2..4: parts of three boxes of both ranks */
    int64_t ms[2] = {2, 3}, mo[2] = {1, 2};
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, ms, mid, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(ck, "m", &v, mo), LLMT_OK);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            CHECK(mid[i * 3 + j] == g[(1 + i) * 6 + 2 + j]);
    llmt_ckpt_destroy(ck);
    tmpdir_remove(root);
    free(root);
}

int main(int argc, char **argv)
{
    llmt_context *ctx = make_ctx();
    test_bad_args(ctx);
    /* Where O_DIRECT works the data goes through it (ext4, xfs, tmpfs since
     * Linux 6.6); --no-odirect runs under a shim that refuses O_DIRECT, so
     * the buffered fallback must carry the same round trip. */
    llmt_context_set_log_level(ctx, LLMT_LOG_DEBUG);
    if (argc > 1 && !strcmp(argv[1], "--no-odirect")) {
        test_roundtrip(ctx, NULL, "rtbuf");
        CHECK(saw_buffered > 0);
        CHECK_EQ_INT(saw_direct, 0);
        llmt_context_set_log_level(ctx, LLMT_LOG_OFF);
        test_enospc(ctx);
        llmt_context_destroy(ctx);
        return check_exit("test_ckpt --no-odirect");
    }
    if (argc > 1 && !strcmp(argv[1], "--aio-enospc")) {
        int rc = test_aio_enospc(ctx);
        llmt_context_destroy(ctx);
        return rc == 77 ? 77 : check_exit("test_ckpt --aio-enospc");
    }
    test_roundtrip(ctx, NULL, "rt");
    fprintf(stderr, "tmp dir: %d O_DIRECT writes, %d buffered\n", saw_direct, saw_buffered);
    struct stat st;
    if (stat("/dev/shm", &st) == 0)
        test_roundtrip(ctx, "/dev/shm", "rtshm");
    llmt_context_set_log_level(ctx, LLMT_LOG_WARN);
    test_reshard(ctx);
    test_empty_blocks(ctx);
    test_diverged_replicas(ctx);
    test_tiers(ctx);
    test_host_tier(ctx);
    test_multi_block(ctx);
    test_corruption(ctx);
    test_write_error(ctx);
    llmt_context_destroy(ctx);
    return check_exit("test_ckpt");
}
