/* The memory tier's gathered open (lib/ckpt/memtier.c): 4 ranks as
 * threads, each saving its part of step 5 asynchronously (the snapshot
 * stays in memory):
 *   "w" [4 x N]   rank r saves block r (a replicated parameter's shares)
 *   "m" [4, M]    rank r saves row r (a sharded moment), M floats > 1 MiB
 *   "e" [4]       rank 0 saves it, the others name it with an empty block
 *                 (as the trainer names every tensor on every rank)
 *   "z" [0]       no elements: every rank names it
 * Each rank's restore plan reads all of "w", elements [1000, 2000) of its
 * own row of "m", "e" and "z". Checked:
 *  - the values read equal the saved ones (gval), on every rank;
 *  - each rank receives exactly the spans its plan reads: all of "w"'s
 *    chunks and the hashed 1 MiB block of its row holding [1000, 2000)
 *    (reads are widened to whole hashed blocks), far less than every
 *    part together;
 *  - a read outside the plan fails naming the span, and copies nothing;
 *  - a rank without a snapshot (a replaced process) gives its part file;
 *  - a rank whose plan fails gets its plan's error; the others (which it
 *    still answers) restore;
 *  - a rank with no part makes every rank fail, naming it;
 *  - a part file damaged on disk fails the reads of its bytes with a
 *    checksum error (the owner hashes what it sends, the reader checks
 *    the saved block hashes). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt/ckpt_internal.h"
#include "ckpt_util.h"

enum { W = 4, N = 3000, M = 300000, LO = 1000, HI = 2000 };

typedef struct {
    CK_RANK_FIELDS;
    llmt_ckpt *ck;
    int bad_plan; /* this rank's plan reads a tensor that is not there */
    int outside;  /* also read outside the plan (after the open) */
    llmt_status st, read_st, outside_st;
    int from_memory, values_ok;
    uint64_t fetched, parts;
    char err[512], outside_err[512];
    float *w, *m, e[4];
} rk;

static llmt_status read_w(llmt_ckpt *ck, float *buf)
{
    int64_t sh = (int64_t)W * N, off = 0;
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &sh, buf, LLMT_DEVICE_CPU, 0);
    return llmt_ckpt_read(ck, "w", &v, &off);
}

/* elements [lo, hi) of row r of "m" */
static llmt_status read_m(llmt_ckpt *ck, int r, int64_t lo, int64_t hi, float *buf)
{
    int64_t sh[2] = {1, hi - lo}, off[2] = {r, lo};
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, sh, buf, LLMT_DEVICE_CPU, 0);
    return llmt_ckpt_read(ck, "m", &v, off);
}

/* all of "e" into e[4], and "z" (nothing to copy, but it must be there) */
static llmt_status read_small(llmt_ckpt *ck, float *e)
{
    int64_t four = 4, none = 0, zero = 0;
    llmt_tensor v, z;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &four, e, LLMT_DEVICE_CPU, 0);
    llmt_tensor_init(&z, sizeof z, LLMT_DTYPE_FP32, 1, &none, e, LLMT_DEVICE_CPU, 0);
    llmt_status s = llmt_ckpt_read(ck, "e", &v, &zero);
    return s == LLMT_OK ? llmt_ckpt_read(ck, "z", &z, &zero) : s;
}

static llmt_status plan(void *arg, llmt_ckpt *ck)
{
    rk *k = arg;
    llmt_status s = read_w(ck, k->w);
    if (s == LLMT_OK)
        s = read_m(ck, k->rank, LO, HI, k->m);
    if (s == LLMT_OK)
        s = read_small(ck, k->e);
    if (s == LLMT_OK && k->bad_plan) {
        int64_t one = 1, zero = 0;
        float x;
        llmt_tensor v;
        llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &one, &x, LLMT_DEVICE_CPU, 0);
        s = llmt_ckpt_read(ck, "nope", &v, &zero);
    }
    return s;
}

static llmt_status save_part(llmt_ckpt *ck, int rank)
{
    float *w = malloc(N * sizeof *w), *m = malloc((size_t)M * sizeof *m);
    if (!w || !m) {
        free(w);
        free(m);
        return LLMT_ERR_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < N; i++)
        w[i] = gval(1, (int64_t)rank * N + i);
    for (int64_t i = 0; i < M; i++)
        m[i] = gval(2, (int64_t)rank * M + i);
    int64_t n = N, gw = (int64_t)W * N, ow = (int64_t)rank * N;
    int64_t ms[2] = {1, M}, gm[2] = {W, M}, om[2] = {rank, 0};
    llmt_tensor vw, vm;
    llmt_tensor_init(&vw, sizeof vw, LLMT_DTYPE_FP32, 1, &n, w, LLMT_DEVICE_CPU, 0);
    llmt_tensor_init(&vm, sizeof vm, LLMT_DTYPE_FP32, 2, ms, m, LLMT_DEVICE_CPU, 0);
    llmt_status s = llmt_ckpt_begin(ck, 5);
    if (s == LLMT_OK)
        s = llmt_ckpt_add_tensor(ck, "w", &vw, &gw, &ow);
    if (s == LLMT_OK)
        s = llmt_ckpt_add_tensor(ck, "m", &vm, gm, om);
    int64_t four = 4, none = 0, zero = 0;
    llmt_tensor ve, vz;
    llmt_tensor_init(&ve, sizeof ve, LLMT_DTYPE_FP32, 1, rank ? &none : &four, w,
                     LLMT_DEVICE_CPU, 0);
    llmt_tensor_init(&vz, sizeof vz, LLMT_DTYPE_FP32, 1, &none, w, LLMT_DEVICE_CPU, 0);
    if (s == LLMT_OK) /* rank 0: gval(1, 0..3), as its w */
        s = llmt_ckpt_add_tensor(ck, "e", &ve, &four, &zero);
    if (s == LLMT_OK)
        s = llmt_ckpt_add_tensor(ck, "z", &vz, &none, &zero);
    if (s == LLMT_OK)
        s = llmt_ckpt_save(ck, 1);
    if (s == LLMT_OK)
        s = llmt_ckpt_wait(ck, -1);
    free(w);
    free(m);
    return s;
}

static void *run_save(void *arg)
{
    rk *k = arg;
    k->st = save_part(k->ck, k->rank);
    snprintf(k->err, sizeof k->err, "%s", llmt_ckpt_last_error(k->ck));
    return NULL;
}

static void *run_open(void *arg)
{
    rk *k = arg;
    memset(k->w, 0, (size_t)W * N * sizeof *k->w);
    memset(k->m, 0, (HI - LO) * sizeof *k->m);
    k->from_memory = -1;
    k->st = llmt__ckpt_open_gathered(k->ck, k->comm, 5, &k->from_memory, plan, k);
    snprintf(k->err, sizeof k->err, "%s", llmt_ckpt_last_error(k->ck));
    llmt__ckpt_gathered_bytes(k->ck, &k->fetched, &k->parts);
    k->values_ok = 0;
    if (k->st != LLMT_OK)
        return NULL;
    for (int64_t i = 0; i < (int64_t)W * N; i++) /* the plan copied nothing */
        if (k->w[i] != 0.0f)
            return NULL;
    k->read_st = read_w(k->ck, k->w);
    if (k->read_st == LLMT_OK)
        k->read_st = read_m(k->ck, k->rank, LO, HI, k->m);
    memset(k->e, 0, sizeof k->e);
    if (k->read_st == LLMT_OK)
        k->read_st = read_small(k->ck, k->e);
    if (k->read_st != LLMT_OK)
        snprintf(k->err, sizeof k->err, "%s", llmt_ckpt_last_error(k->ck));
    int ok = k->read_st == LLMT_OK;
    for (int64_t i = 0; ok && i < (int64_t)W * N; i++)
        ok = k->w[i] == gval(1, i);
    for (int64_t i = LO; ok && i < HI; i++)
        ok = k->m[i - LO] == gval(2, (int64_t)k->rank * M + i);
    for (int i = 0; ok && i < 4; i++)
        ok = k->e[i] == gval(1, i);
    k->values_ok = ok;
    if (k->outside) { /* in the same row, the next hashed block */
        float x[100];
        memset(x, 0, sizeof x);
        k->outside_st = read_m(k->ck, k->rank, 270000, 270100, x);
        snprintf(k->outside_err, sizeof k->outside_err, "%s", llmt_ckpt_last_error(k->ck));
        for (int i = 0; i < 100; i++)
            if (x[i] != 0.0f)
                k->outside_st = LLMT_OK; /* copied after all: fail below */
    }
    return NULL;
}

static void fresh_handle(rk *k)
{
    llmt_ckpt_destroy(k->ck);
    k->ck = NULL;
    CHECK_STATUS(rank_ckpt(k->rank, W, k->root, 3, &k->ck), LLMT_OK);
}

int main(void)
{
    char *base = tmpdir_make(NULL, "gathered");
    llmt_comm *comms[W];
    rk ks[W];
    CHECK_STATUS(inproc_ranks(ks, sizeof *ks, W, comms, base, "shared", 0), LLMT_OK);
    for (int r = 0; r < W; r++) {
        ks[r].w = malloc((size_t)W * N * sizeof(float));
        ks[r].m = malloc((HI - LO) * sizeof(float));
        CHECK_STATUS(rank_ckpt(r, W, ks[r].root, 3, &ks[r].ck), LLMT_OK);
    }
    run_threads(run_save, ks, sizeof *ks, W);
    for (int r = 0; r < W; r++)
        CHECK_STATUS(ks[r].st, LLMT_OK);

    /* 1: every rank from its snapshot; one read outside the plan */
    for (int r = 0; r < W; r++)
        ks[r].outside = 1;
    run_threads(run_open, ks, sizeof *ks, W);
    /* a rank's plan: all of w's chunks, the first hashed block of its
     * row of m (the read [1000, 2000) lies in it) and e's 16 bytes */
    uint64_t want = (uint64_t)W * N * 4 + CK_BLOCK_BYTES + 16;
    for (int r = 0; r < W; r++) {
        CHECK_STATUS(ks[r].st, LLMT_OK);
        CHECK_STATUS(ks[r].read_st, LLMT_OK);
        if (ks[r].st || ks[r].read_st)
            fprintf(stderr, "rank %d: %s\n", r, ks[r].err);
        CHECK_EQ_INT(ks[r].from_memory, 1);
        CHECK(ks[r].values_ok);
        CHECK_EQ_INT(ks[r].fetched, want);
        /* every part: its header block, w's and m's chunks */
        CHECK(ks[r].parts >= (uint64_t)W * (N + M) * 4);
        CHECK(ks[r].fetched * 4 < ks[r].parts);
        CHECK_STATUS(ks[r].outside_st, LLMT_ERR_STATE);
        CHECK(strstr(ks[r].outside_err, "not fetched") != NULL);
        ks[r].outside = 0;
    }
    printf("fetched %llu of %llu bytes per rank\n", (unsigned long long)ks[0].fetched,
           (unsigned long long)ks[0].parts);

    /* 2: rank 2 is a replaced process (no snapshot): its part file */
    fresh_handle(&ks[2]);
    run_threads(run_open, ks, sizeof *ks, W);
    for (int r = 0; r < W; r++) {
        CHECK_STATUS(ks[r].st, LLMT_OK);
        CHECK(ks[r].values_ok);
        CHECK_EQ_INT(ks[r].from_memory, r != 2);
        CHECK_EQ_INT(ks[r].fetched, want);
    }

    /* 3: rank 3's plan fails; the others restore all the same */
    ks[3].bad_plan = 1;
    run_threads(run_open, ks, sizeof *ks, W);
    for (int r = 0; r < W; r++) {
        if (r == 3) {
            CHECK_STATUS(ks[r].st, LLMT_ERR_NOT_FOUND);
            CHECK(strstr(ks[r].err, "nope") != NULL);
            CHECK_EQ_INT(ks[r].fetched, 0);
        } else {
            CHECK_STATUS(ks[r].st, LLMT_OK);
            CHECK(ks[r].values_ok);
        }
    }
    ks[3].bad_plan = 0;

    /* 4: rank 1 has no part (a new process, its file gone): all fail */
    char cmd[4500];
    snprintf(cmd, sizeof cmd, "mv '%s/step-000000000005/rank-00001.bin' '%s/r1.bin'",
             ks[1].root, base);
    CHECK(system(cmd) == 0);
    fresh_handle(&ks[1]);
    run_threads(run_open, ks, sizeof *ks, W);
    for (int r = 0; r < W; r++) { /* rank 1 names its own cause, the file */
        CHECK(ks[r].st != LLMT_OK);
        CHECK(strstr(ks[r].err, r == 1 ? "rank-00001" : "rank 1 has no part of step 5") !=
              NULL);
        if (!strstr(ks[r].err, "rank"))
            fprintf(stderr, "rank %d: %s\n", r, ks[r].err);
    }
    snprintf(cmd, sizeof cmd, "mv '%s/r1.bin' '%s/step-000000000005/rank-00001.bin'", base,
             ks[1].root);
    CHECK(system(cmd) == 0);

    /* 5: rank 2's file damaged inside w's chunk: every rank's read of w
     * fails its block hash; nothing is taken for good */
    char bin[4200];
    snprintf(bin, sizeof bin, "%s/step-000000000005/rank-00002.bin", ks[2].root);
    FILE *f = fopen(bin, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, CK_HEADER_BYTES + 100, SEEK_SET); /* w's chunk comes first */
        int c = fgetc(f);
        fseek(f, CK_HEADER_BYTES + 100, SEEK_SET);
        fputc(c ^ 0x40, f);
        fclose(f);
    }
    run_threads(run_open, ks, sizeof *ks, W);
    for (int r = 0; r < W; r++) {
        CHECK_STATUS(ks[r].st, LLMT_OK);
        CHECK_STATUS(ks[r].read_st, LLMT_ERR_CHECKSUM);
        CHECK(!ks[r].values_ok);
    }

    for (int r = 0; r < W; r++) {
        llmt_ckpt_destroy(ks[r].ck);
        llmt_comm_destroy(comms[r]);
        free(ks[r].w);
        free(ks[r].m);
    }
    tmpdir_remove(base);
    free(base);
    return check_exit("ckpt-gathered");
}
