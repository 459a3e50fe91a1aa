/* Checkpoint metadata at scale: what a save's commit and a restore cost
 * in manifests alone, as the world grows (lib/ckpt/manifest.c, load.c).
 * No data is written: every rank's part manifest is made in memory for a
 * tp x pp x dp layout of T weight matrices [R, C] (tp splits the rows of
 * even tensors and the columns of odd ones; stage t * pp / T holds tensor
 * t; dp ranks save a row range of their tp shard, as ZeRO shares; every
 * rank names every tensor with an empty block first, as the trainer
 * does), then timed:
 *   merge   the parts merged into the step's manifest (the commit)
 *   json    the merged manifest written as JSON, its size
 *   parse   that JSON parsed back (every restore opens it)
 *   reads   rank 0's reads of its shard of every tensor of its stage,
 *           planned against the merged manifest (the chunk lookups of a
 *           restore, no data copied)
 *   part    one rank's part manifest as JSON, whole and as the memory
 *           tier sends it to every rank (only the blocks it holds)
 * usage: bench_ckpt_meta [--quick] [TP PP T W...]
 * Prints one JSON line per world size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/ckpt_internal.h"

enum { R = 8192, C = 8192 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int add_chunk(ck_tensor *t, int32_t rank, uint64_t *off, const int64_t *goff,
                     const int64_t *lshape)
{
    if (t->nchunks == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 2;
        ck_chunk *v = realloc(t->chunks, cap * sizeof *v);
        if (!v)
            return 0;
        t->chunks = v;
        t->cap = cap;
    }
    ck_chunk *k = &t->chunks[t->nchunks++];
    memset(k, 0, sizeof *k);
    k->rank = rank;
    k->goff[0] = goff[0];
    k->goff[1] = goff[1];
    k->lshape[0] = lshape[0];
    k->lshape[1] = lshape[1];
    k->length = (uint64_t)(lshape[0] * lshape[1]) * 4;
    k->offset = *off;
    *off += (k->length + CK_ALIGN - 1) / CK_ALIGN * CK_ALIGN;
    k->block = CK_BLOCK_BYTES;
    k->nblocks = (k->length + k->block - 1) / k->block;
    k->bxxh = calloc(k->nblocks ? k->nblocks : 1, sizeof *k->bxxh);
    return k->bxxh != NULL;
}

/* Rank `rank`'s box of tensor t (its tp shard's dp share); 0 when its
 * stage does not hold t. */
static int box_of(int rank, int tp, int pp, int dp, int T, int t, int64_t *goff, int64_t *sh)
{
    int ti = rank % tp, pi = rank / tp % pp, di = rank / (tp * pp);
    if (t * pp / T != pi)
        return 0;
    int64_t r0 = 0, c0 = 0, rows = R, cols = C;
    if (t % 2 == 0) {
        rows = R / tp;
        r0 = rows * ti;
    } else {
        cols = C / tp;
        c0 = cols * ti;
    }
    int64_t share = rows / dp;
    goff[0] = r0 + share * di;
    goff[1] = c0;
    sh[0] = share;
    sh[1] = cols;
    return 1;
}

static int make_part(ck_manifest *m, int rank, int W, int tp, int pp, int T)
{
    memset(m, 0, sizeof *m);
    int dp = W / (tp * pp);
    m->is_part = 1;
    m->step = 100;
    m->world_size = W;
    m->rank = rank;
    m->files = calloc(1, sizeof *m->files);
    m->tensors = calloc((size_t)T, sizeof *m->tensors);
    if (!m->files || !m->tensors)
        return 0;
    m->nfiles = m->filecap = 1;
    m->tcap = (size_t)T;
    uint64_t off = CK_HEADER_BYTES;
    for (int t = 0; t < T; t++) {
        ck_tensor *x = &m->tensors[m->ntensors++];
        char name[64];
        snprintf(name, sizeof name, "%s/layers.%d.w%d", t % 3 == 0 ? "param" : "adam_m", t / 6,
                 t % 6);
        x->name = strdup(name);
        x->dtype = LLMT_DTYPE_FP32;
        x->ndim = 2;
        x->gshape[0] = R;
        x->gshape[1] = C;
        int64_t g[2] = {0, 0}, z[2] = {0, C}, s[2];
        if (!x->name || !add_chunk(x, rank, &off, g, z))
            return 0;
        if (box_of(rank, tp, pp, dp, T, t, g, s) && !add_chunk(x, rank, &off, g, s))
            return 0;
    }
    m->files[0].rank = rank;
    m->files[0].bytes = off;
    return 1;
}

static void run(int tp, int pp, int T, int W)
{
    ck_manifest *parts = calloc((size_t)W, sizeof *parts);
    ck_manifest **pp_ = calloc((size_t)W, sizeof *pp_);
    for (int r = 0; r < W; r++) {
        if (!make_part(&parts[r], r, W, tp, pp, T)) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        pp_[r] = &parts[r];
    }
    /* one rank's part manifest as the memory tier sends it to every rank
     * (only what the rank holds) against the whole part (every tensor
     * named): the all-gather moves W times that */
    char *pj = llmt__ckpt_manifest_to_json(&parts[W - 1]);
    char *ph = llmt__ckpt_manifest_to_json_held(&parts[W - 1]);
    size_t part_bytes = pj ? strlen(pj) : 0, held_bytes = ph ? strlen(ph) : 0;
    free(pj);
    free(ph);
    char err[512];
    ck_manifest merged;
    double t0 = now();
    llmt_status s = llmt__ckpt_manifest_merge(pp_, (size_t)W, &merged, err, sizeof err);
    double t_merge = now() - t0;
    if (s != LLMT_OK) {
        fprintf(stderr, "merge: %s\n", err);
        exit(1);
    }
    size_t chunks = 0;
    for (size_t t = 0; t < merged.ntensors; t++)
        chunks += merged.tensors[t].nchunks;
    t0 = now();
    char *js = llmt__ckpt_manifest_to_json(&merged);
    double t_json = now() - t0;
    ck_manifest back;
    t0 = now();
    s = llmt__ckpt_manifest_parse(js, strlen(js), 0, &back, err, sizeof err);
    double t_parse = now() - t0;
    if (s != LLMT_OK) {
        fprintf(stderr, "parse: %s\n", err);
        exit(1);
    }
    llmt__ckpt_manifest_free(&back);
    /* rank 0's reads, planned (no data): its tp shard of each tensor */
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    llmt_ckpt *ck = NULL;
    char root[] = "/tmp/llmt-meta-XXXXXX";
    if (!mkdtemp(root) || llmt_ckpt_create(NULL, root, &o, &ck) != LLMT_OK) {
        fprintf(stderr, "ckpt handle\n");
        exit(1);
    }
    ck->open = merged;
    ck->is_open = 1;
    ck->open_mem = 1;
    ck->mem_n = W;
    ck->mem_plan = 1;
    static float dummy[1];
    int reads = 0;
    t0 = now();
    for (int t = 0; t < T; t++) {
        if (t * pp / T != 0)
            continue;
        int64_t goff[2] = {0, 0}, sh[2] = {R, C};
        if (t % 2 == 0)
            sh[0] = R / tp;
        else
            sh[1] = C / tp;
        llmt_tensor v;
        llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, sh, dummy, LLMT_DEVICE_CPU, 0);
        if (llmt_ckpt_read(ck, merged.tensors[t].name, &v, goff) != LLMT_OK) {
            fprintf(stderr, "read: %s\n", llmt_ckpt_last_error(ck));
            exit(1);
        }
        reads++;
    }
    double t_reads = now() - t0;
    printf(
        "{\"world\": %d, \"tp\": %d, \"pp\": %d, \"dp\": %d, \"tensors\": %d, \"chunks\": %zu, "
        "\"merge_s\": %.4f, \"json_s\": %.4f, \"json_bytes\": %zu, \"parse_s\": %.4f, "
        "\"reads\": %d, \"reads_s\": %.4f, \"part_json_bytes\": %zu, "
        "\"part_held_json_bytes\": %zu}\n",
        W, tp, pp, W / (tp * pp), T, chunks, t_merge, t_json, strlen(js), t_parse, reads,
        t_reads, part_bytes, held_bytes);
    fflush(stdout);
    llmt_ckpt_destroy(ck); /* frees the merged manifest it holds */
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    free(js);
    for (int r = 0; r < W; r++)
        llmt__ckpt_manifest_free(&parts[r]);
    free(parts);
    free(pp_);
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    int a = quick ? 2 : 1;
    int tp = argc > a ? atoi(argv[a]) : 8, pp = argc > a + 1 ? atoi(argv[a + 1]) : 4;
    int T = argc > a + 2 ? atoi(argv[a + 2]) : 240;
    if (argc > a + 3) {
        for (int i = a + 3; i < argc; i++)
            run(tp, pp, T, atoi(argv[i]));
    } else if (quick) {
        run(tp, pp, T, 64);
    } else {
        for (int W = 64; W <= 2048; W *= 2)
            run(tp, pp, T, W);
    }
    return 0;
}
