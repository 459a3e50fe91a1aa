/* What a run left on disk, read back by the tests: a file whole
 * (exports, metrics, traces, manifests), or the names and sizes of the
 * files under a directory (to show that nothing was moved or deleted).
 * Header only, like check.h. */
#ifndef LLMT_TEST_FILES_H
#define LLMT_TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>

/* The bytes of file path, NUL-terminated (text can be read as a string),
 * malloc'd; NULL when it cannot be read. *len (unless len is NULL) gets
 * their count, -1 on failure. */
static inline char *test_slurp(const char *path, long *len)
{
    if (len)
        *len = -1;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        if (len)
            *len = n;
    }
    return b;
}

/* The files under dir, one "./path size" line each, sorted, into out (cap
 * bytes, truncated to fit); empty when dir cannot be listed. */
static inline void test_listing(const char *dir, char *out, size_t cap)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "cd '%s' && find . -type f -printf '%%p %%s\\n' | sort", dir);
    out[0] = 0;
    FILE *f = popen(cmd, "r");
    if (!f)
        return;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    pclose(f);
}

#endif
