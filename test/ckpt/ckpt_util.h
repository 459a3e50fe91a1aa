/* Helpers shared by the checkpoint tests. */
#ifndef LLMT_TEST_CKPT_UTIL_H
#define LLMT_TEST_CKPT_UTIL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llmtrain.h"

/* A fresh directory under $TMPDIR (or /tmp), or under `base` if not NULL. */
static inline char *tmpdir_make(const char *base, const char *tag)
{
    const char *b = base ? base : getenv("TMPDIR");
    if (!b || !*b)
        b = "/tmp";
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/llmt-%s-XXXXXX", b, tag);
    if (!mkdtemp(p)) {
        free(p);
        return NULL;
    }
    return p;
}

static inline void tmpdir_remove(const char *p)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", p);
}

/* Deterministic fill: value of global element i of tensor `seed`. */
static inline float gval(int seed, int64_t i)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)seed * 0xD1B54A32D192ED03ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (float)((int64_t)(x % 2000001) - 1000000) / 1024.0f;
}

/* Rank `rank` of `world`'s handle on `root` (keep_last as given). */
static inline llmt_status rank_ckpt(int rank, int world, const char *root, int keep_last,
                                    llmt_ckpt **out)
{
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.rank = rank;
    o.world_size = world;
    o.keep_last = keep_last;
    return llmt_ckpt_create(NULL, root, &o, out);
}

/* Rank `rank`'s block of n elements of tensor `seed` (gval(seed, .) of
 * its global elements), malloc'ed; NULL without memory. */
static inline float *block_data(int seed, int rank, int64_t n)
{
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; x && i < n; i++)
        x[i] = gval(seed, (int64_t)rank * n + i);
    return x;
}

/* Rank `rank`'s block x (n elements) added to ck's step as its part of
 * "w" of world x n elements: llmt_ckpt_add_tensor's status. */
static inline llmt_status block_add(llmt_ckpt *ck, float *x, int rank, int world, int64_t n)
{
    int64_t g = (int64_t)world * n, off = (int64_t)rank * n;
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, x, LLMT_DEVICE_CPU, 0);
    return llmt_ckpt_add_tensor(ck, "w", &v, &g, &off);
}

/* Save `step` of a 1-D tensor "w" of world x n elements (gval(seed, .)),
 * this rank's block of n: the peer tier tests' part of a rank. */
static inline llmt_status save_block(llmt_ckpt *ck, int64_t step, int seed, int rank, int world,
                                     int64_t n, int async)
{
    float *x = block_data(seed, rank, n);
    if (!x)
        return LLMT_ERR_OUT_OF_MEMORY;
    llmt_ckpt_begin(ck, step);
    block_add(ck, x, rank, world, n);
    llmt_status s = llmt_ckpt_save(ck, async);
    if (async && s == LLMT_OK)
        s = llmt_ckpt_wait(ck, -1); /* the snapshot is taken; x may go */
    free(x);
    return s;
}

/* save_block's part, saved async and not waited for: the writer persists
 * its snapshot (x may go at once). begin's, add's or save's status. */
static inline llmt_status save_block_nowait(llmt_ckpt *ck, int64_t step, int seed, int rank,
                                            int world, int64_t n)
{
    float *x = block_data(seed, rank, n);
    if (!x)
        return LLMT_ERR_OUT_OF_MEMORY;
    llmt_status s = llmt_ckpt_begin(ck, step);
    if (s == LLMT_OK)
        s = block_add(ck, x, rank, world, n);
    if (s == LLMT_OK)
        s = llmt_ckpt_save(ck, 1);
    free(x);
    return s;
}

/* Whether step's `file` is in root (by stat(), which a test may
 * interpose). */
static inline int step_has(const char *root, int64_t step, const char *file)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/step-%012lld/%s", root, (long long)step, file);
    return stat(p, &st) == 0;
}

/* Step's committed "w" of g elements (every rank's block), read through a
 * fresh handle on root, verified first when verify: malloc'ed, NULL where
 * any of that failed. */
static inline float *committed_w(const char *root, int64_t step, int64_t g, int verify)
{
    llmt_ckpt *ck = NULL;
    if (llmt_ckpt_create(NULL, root, NULL, &ck) != LLMT_OK)
        return NULL;
    float *x = calloc((size_t)g, sizeof *x);
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &g, x, LLMT_DEVICE_CPU, 0);
    int ok = x && llmt_ckpt_open_step(ck, step) == LLMT_OK &&
             (!verify || llmt_ckpt_verify(ck) == LLMT_OK) &&
             llmt_ckpt_read(ck, "w", &v, NULL) == LLMT_OK;
    llmt_ckpt_destroy(ck);
    if (!ok) {
        free(x);
        return NULL;
    }
    return x;
}

/* fn on each of the n elements (sz bytes each) of the array at base, one
 * thread each (the ranks of an in-process world), all joined. */
static inline void run_threads(void *(*fn)(void *), void *base, size_t sz, int n)
{
    pthread_t th[64];
    for (int r = 0; r < n && r < 64; r++)
        pthread_create(&th[r], NULL, fn, (char *)base + (size_t)r * sz);
    for (int r = 0; r < n && r < 64; r++)
        pthread_join(th[r], NULL);
}

/* The fields every in-process rank of these tests has, first in each
 * test's per-rank struct, so that inproc_ranks can set them. */
#define CK_RANK_FIELDS \
    int rank;          \
    llmt_comm *comm;   \
    char root[4096]
typedef struct ck_rank {
    CK_RANK_FIELDS;
} ck_rank;

/* w in-process communicators (ranks as threads) with a 30 s timeout. */
static inline llmt_status inproc_world(int w, llmt_comm **comms)
{
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.timeout_ms = 30000;
    return llmt_comm_create_inproc(NULL, w, &co, comms);
}

/* n per-rank structs (sz bytes each, CK_RANK_FIELDS first) zeroed, each
 * given its rank, its communicator of one in-process world (comms) and a
 * checkpoint root: base/name, or base/name<rank> with per_rank (each
 * rank a node of its own). */
static inline llmt_status inproc_ranks(void *ks, size_t sz, int n, llmt_comm **comms,
                                       const char *base, const char *name, int per_rank)
{
    memset(ks, 0, sz * (size_t)n);
    llmt_status s = inproc_world(n, comms);
    for (int r = 0; s == LLMT_OK && r < n; r++) {
        ck_rank *k = (ck_rank *)((char *)ks + (size_t)r * sz);
        k->rank = r;
        k->comm = comms[r];
        if (per_rank)
            snprintf(k->root, sizeof k->root, "%s/%s%d", base, name, r);
        else
            snprintf(k->root, sizeof k->root, "%s/%s", base, name);
    }
    return s;
}

#endif
