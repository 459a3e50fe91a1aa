/* Helpers shared by the shard, dataset and loader tests: a scratch
 * directory, files as bytes, and a shard filled with seeded tokens. */
#ifndef LLMT_TEST_SHARDS_UTIL_H
#define LLMT_TEST_SHARDS_UTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llmtrain.h"

static inline char *tu_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/llmt-shards-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(p)) {
        perror("mkdtemp");
        exit(1);
    }
    return p;
}

/* rm -r of a flat (or two-level) scratch directory. */
static inline void tu_rmtree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[4400];
        snprintf(p, sizeof p, "%.4000s/%s", dir, e->d_name);
        struct stat st;
        if (!lstat(p, &st) && S_ISDIR(st.st_mode))
            tu_rmtree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static inline int tu_exists(const char *p)
{
    struct stat st;
    return !stat(p, &st);
}

static inline unsigned char *tu_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)l + 1);
    *n = fread(b, 1, (size_t)l, f);
    fclose(f);
    return b;
}

static inline void tu_spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (n)
        fwrite(b, 1, n, f);
    fclose(f);
}

static inline uint64_t tu_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A shard of n_tokens seeded tokens (< vocab) in documents of 1..max_doc
 * tokens; the tokens are returned (malloc) when want_ids. */
static inline int32_t *tu_write_shard(const char *path, int32_t vocab, int64_t n_tokens,
                               int64_t max_doc, uint64_t seed, int64_t *n_docs)
{
    llmt_shard_writer *w = NULL;
    if (llmt_shard_writer_create(NULL, path, vocab, &w) != LLMT_OK) {
        fprintf(stderr, "create %s failed\n", path);
        exit(1);
    }
    int32_t *ids = malloc((size_t)(n_tokens ? n_tokens : 1) * sizeof *ids);
    for (int64_t i = 0; i < n_tokens; i++)
        ids[i] = (int32_t)(tu_rng(&seed) % (uint64_t)vocab);
    int64_t at = 0, docs = 0;
    while (at < n_tokens) {
        int64_t k = 1 + (int64_t)(tu_rng(&seed) % (uint64_t)max_doc);
        if (k > n_tokens - at)
            k = n_tokens - at;
        if (llmt_shard_writer_add(w, ids + at, (size_t)k) != LLMT_OK) {
            fprintf(stderr, "add: %s\n", llmt_shard_writer_last_error(w));
            exit(1);
        }
        at += k;
        docs++;
    }
    if (llmt_shard_writer_finish(w) != LLMT_OK) {
        fprintf(stderr, "finish: %s\n", llmt_shard_writer_last_error(w));
        exit(1);
    }
    llmt_shard_writer_destroy(w);
    if (n_docs)
        *n_docs = docs;
    return ids;
}

#endif
