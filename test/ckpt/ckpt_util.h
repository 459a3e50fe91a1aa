/* Helpers shared by the checkpoint tests. */
#ifndef LLMT_TEST_CKPT_UTIL_H
#define LLMT_TEST_CKPT_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#endif
