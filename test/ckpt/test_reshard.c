/* Resharding on load across model-parallel layouts. A GPT-like state
 * (embeddings, per-layer attention/MLP weights and biases, norms, AdamW
 * moments) is saved by every rank of a tp x pp x dp layout (zero stage 0 or
 * 1), each rank on its own thread with its own handle, and read back under
 * other layouts (tp1.dp4, tp4.pp1.dp2, one rank, ...): every element must
 * equal the original global tensor exactly. Megatron-style placement:
 *  - column-parallel weights/biases (qkv, fc, vocab embedding) split dim 0
 *    over tp, row-parallel weights (attn proj, mlp proj) split dim 1,
 *    norms and row-parallel biases replicated over tp (tp rank 0 saves);
 *  - layer l lives on pipeline stage l * pp / L, embeddings on stage 0,
 *    the final norm on the last stage;
 *  - parameters are replicated over dp (dp rank 0 saves them);
 *  - zero 0: optimizer moments like the parameters; zero 1: each dp rank
 *    saves rows [n*i/dp, n*(i+1)/dp) of its tp block's moments.
 * Also checks that a row block is read without reading the whole chunk. */
#include <pthread.h>
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

static int run_layout(const layout *y, const char *root, int64_t step, int load)
{
    int world = y->tp * y->pp * y->dp;
    pthread_t th[64];
    job jobs[64];
    for (int r = 0; r < world; r++) {
        jobs[r] = (job){y, root, r, world, step, 0, load};
        pthread_create(&th[r], NULL, run_rank, &jobs[r]);
    }
    int ok = 1;
    for (int r = 0; r < world; r++) {
        pthread_join(th[r], NULL);
        ok &= jobs[r].ok;
    }
    if (!ok)
        fprintf(stderr, "layout %s (%s step %lld) failed\n", y->tag, load ? "load" : "save",
                (long long)step);
    return ok;
}

/* Bytes this process has read so far (Linux /proc/self/io rchar). */
static long long rchar(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    long long v = -1;
    char line[128];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "rchar: %lld", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

static void test_partial_read(void)
{
    char *root = tmpdir_make(NULL, "partial");
    enum { R = 1024, K = 1024 };
    float *x = malloc((size_t)R * K * sizeof(float));
    for (int64_t i = 0; i < (int64_t)R * K; i++)
        x[i] = (float)i;
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.verify = LLMT_CKPT_VERIFY_NONE;
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(NULL, root, &o, &ck), LLMT_OK);
    int64_t shp[2] = {R, K};
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, shp, x, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_begin(ck, 1), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "big", &v, NULL, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_open_latest(ck, NULL), LLMT_OK);
    /* rows [512, 768): 1 MiB of the 4 MiB chunk */
    int64_t bs[2] = {256, K}, bo[2] = {512, 0};
    float *y = malloc((size_t)256 * K * sizeof(float));
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, bs, y, LLMT_DEVICE_CPU, 0);
    long long before = rchar();
    CHECK_STATUS(llmt_ckpt_read(ck, "big", &v, bo), LLMT_OK);
    long long read = rchar() - before;
    CHECK(!memcmp(y, x + 512 * K, (size_t)256 * K * sizeof(float)));
    if (before >= 0) {
        fprintf(stderr, "partial read: %lld bytes for a 1 MiB block of a 4 MiB chunk\n", read);
        CHECK(read >= 256 * K * 4 && read < 256 * K * 4 + 65536);
    }
    /* with VERIFY_READ the span widens to the hashed 1 MiB blocks only */
    llmt_ckpt_destroy(ck);
    o.verify = LLMT_CKPT_VERIFY_READ;
    CHECK_STATUS(llmt_ckpt_create(NULL, root, &o, &ck), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_open_latest(ck, NULL), LLMT_OK);
    bo[0] = 600; /* rows 600..855: crosses into a third block */
    before = rchar();
    CHECK_STATUS(llmt_ckpt_read(ck, "big", &v, bo), LLMT_OK);
    read = rchar() - before;
    CHECK(!memcmp(y, x + 600 * K, (size_t)256 * K * sizeof(float)));
    if (before >= 0)
        CHECK(read <= 2 * (1 << 20) + 65536);
    llmt_ckpt_destroy(ck);
    free(x);
    free(y);
    tmpdir_remove(root);
    free(root);
}

int main(void)
{
    build_model();
    static const layout tp2pp2dp2z1 = {2, 2, 2, 1, "tp2.pp2.dp2.zero1"};
    static const layout tp1dp4 = {1, 1, 4, 0, "tp1.dp4"};
    static const layout tp1dp4z1 = {1, 1, 4, 1, "tp1.dp4.zero1"};
    static const layout tp4pp1dp2 = {4, 1, 2, 1, "tp4.pp1.dp2.zero1"};
    static const layout tp4pp1dp2z0 = {4, 1, 2, 0, "tp4.pp1.dp2"};
    static const layout one = {1, 1, 1, 0, "one rank"};
    static const layout tp2pp4 = {2, 4, 1, 0, "tp2.pp4.dp1"};
    static const layout odd = {1, 2, 3, 1, "tp1.pp2.dp3.zero1"};
    const layout *loads[] = {&tp1dp4, &tp1dp4z1, &tp4pp1dp2, &tp4pp1dp2z0, &one, &tp2pp4,
                             &odd, &tp2pp2dp2z1};
    char *root = tmpdir_make(NULL, "reshard-mp");
    CHECK(root != NULL);
    CHECK(run_layout(&tp2pp2dp2z1, root, 100, 0));
    for (size_t i = 0; i < sizeof loads / sizeof loads[0]; i++)
        CHECK(run_layout(loads[i], root, 100, 1));
    /* the other way round: saved under tp4.pp1.dp2 zero-1 and under one rank */
    CHECK(run_layout(&tp4pp1dp2, root, 200, 0));
    CHECK(run_layout(&tp2pp2dp2z1, root, 200, 1));
    CHECK(run_layout(&one, root, 200, 1));
    CHECK(run_layout(&odd, root, 200, 1));
    CHECK(run_layout(&one, root, 300, 0));
    CHECK(run_layout(&tp2pp2dp2z1, root, 300, 1));
    CHECK(run_layout(&tp4pp1dp2, root, 300, 1));
    /* the placement as saved: chunks, ranks, offsets */
    {
        llmt_ckpt *ck = NULL;
        CHECK_STATUS(llmt_ckpt_create(NULL, root, NULL, &ck), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_open_step(ck, 100), LLMT_OK);
        int32_t world = 0;
        size_t nc = 0;
        CHECK_STATUS(llmt_ckpt_open_info(ck, &world, NULL, NULL), LLMT_OK);
        CHECK_EQ_INT(world, 8);
        CHECK_STATUS(llmt_ckpt_tensor_info(ck, "param/wte", NULL, NULL, NULL, &nc), LLMT_OK);
        CHECK_EQ_INT(nc, 2); /* tp 2, dp replicas not saved */
        CHECK_STATUS(llmt_ckpt_tensor_info(ck, "adam_m/wte", NULL, NULL, NULL, &nc), LLMT_OK);
        CHECK_EQ_INT(nc, 4); /* tp 2 x dp 2 (zero-1) */
        int32_t r = -1;
        int64_t off[LLMT_MAX_DIMS], shp[LLMT_MAX_DIMS];
        uint64_t bytes = 0;
        CHECK_STATUS(llmt_ckpt_chunk_info(ck, "param/wte", 1, &r, off, shp, &bytes), LLMT_OK);
        CHECK(r == 1 && off[0] == 20 && shp[0] == 20 && shp[1] == C && bytes == 20 * C * 4);
        llmt_ckpt_destroy(ck);
    }
    tmpdir_remove(root);
    free(root);
    test_partial_read();
    return check_exit("test_reshard");
}
