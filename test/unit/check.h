/* A minimal test harness: CHECK records a failure and goes on, so one run
 * reports every broken expectation. main() returns check_exit(). */
#ifndef LLMT_TEST_CHECK_H
#define LLMT_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                          \
    do {                                                                     \
        check_count++;                                                       \
        if (!(cond)) {                                                       \
            check_failures++;                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
        }                                                                    \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                   \
    do {                                                                     \
        long long va_ = (long long)(a), vb_ = (long long)(b);                \
        check_count++;                                                       \
        if (va_ != vb_) {                                                    \
            check_failures++;                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n", \
                    __FILE__, __LINE__, #a, #b, va_, vb_);                   \
        }                                                                    \
    } while (0)

#define CHECK_STATUS(expr, want)                                             \
    do {                                                                     \
        int got_ = (int)(expr);                                              \
        check_count++;                                                       \
        if (got_ != (int)(want)) {                                           \
            check_failures++;                                                \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %s\n",     \
                    __FILE__, __LINE__, #expr, got_,                         \
                    llmt_status_string((llmt_status)got_), #want);           \
        }                                                                    \
    } while (0)

/* |a-b| <= atol + rtol*|b| */
#define CHECK_CLOSE(a, b, rtol, atol)                                        \
    do {                                                                     \
        double va_ = (double)(a), vb_ = (double)(b);                         \
        check_count++;                                                       \
        if (!(fabs(va_ - vb_) <= (atol) + (rtol)*fabs(vb_))) {               \
            check_failures++;                                                \
            fprintf(stderr, "%s:%d: CHECK_CLOSE failed: %s=%.9g %s=%.9g\n",  \
                    __FILE__, __LINE__, #a, va_, #b, vb_);                   \
        }                                                                    \
    } while (0)

static inline int check_exit(const char *name)
{
    if (check_count == 0) {
        fprintf(stderr, "%s: no checks ran\n", name);
        return 1;
    }
    fprintf(stderr, "%s: %d checks, %d failed\n", name, check_count,
            check_failures);
    return check_failures ? 1 : 0;
}

/* Exit code meson reads as SKIP. */
#define CHECK_SKIP 77

#endif
