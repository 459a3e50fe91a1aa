/* A file read whole, for the tests that read back what a run wrote
 * (exports, metrics, traces, manifests). Header only, like check.h. */
#ifndef LLMT_TEST_SLURP_H
#define LLMT_TEST_SLURP_H

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

#endif
