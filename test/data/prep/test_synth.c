/* The synthetic Markov corpus: its stated entropy rate against the
 * conditional entropy H(X2 | X1) measured from bigram counts of >= 2 MB of
 * its own text (within 2%); branching 1 is a zero-entropy cycle; the same
 * seed gives the same bytes; argument errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"

/* H(X2 | X1) = H(X1, X2) - H(X1) in nats, from the n - 1 bigrams. */
static double empirical_rate(const char *s, size_t n)
{
    static double pair[256][256];
    static double first[256];
    memset(pair, 0, sizeof pair);
    memset(first, 0, sizeof first);
    for (size_t i = 0; i + 1 < n; i++) {
        pair[(unsigned char)s[i]][(unsigned char)s[i + 1]] += 1;
        first[(unsigned char)s[i]] += 1;
    }
    double m = (double)(n - 1), h2 = 0, h1 = 0;
    for (int a = 0; a < 256; a++) {
        if (first[a] > 0)
            h1 -= first[a] / m * log(first[a] / m);
        for (int b = 0; b < 256; b++)
            if (pair[a][b] > 0)
                h2 -= pair[a][b] / m * log(pair[a][b] / m);
    }
    return h2 - h1;
}

static void test_entropy(void)
{
    const size_t n = 3u << 20; /* 3 MiB */
    char *buf = malloc(n);
    static const int alphabets[] = {27, 12, 5};
    for (int ai = 0; ai < 3; ai++) {
        for (int b = 3; b <= 5; b++) {
            int a = alphabets[ai];
            double h = -1;
            CHECK_STATUS(llmt_data_synth_markov(7 + (uint64_t)b, a, b, buf, n, &h),
                         LLMT_OK);
            double e = empirical_rate(buf, n);
            fprintf(stderr, "alphabet %2d branching %d: exact %.5f nats, "
                    "measured %.5f (%.3f%%)\n", a, b, h, e, 100 * (e - h) / h);
            CHECK(h > 0 && h <= log((double)b) + 1e-12);
            CHECK_CLOSE(e, h, 0.02, 0);
            /* Only the first a-1 letters and space occur. */
            int ok = 1;
            for (size_t i = 0; i < n; i++)
                ok &= buf[i] == ' ' ||
                      (memchr("etaoinshrdlucmfwypvbgkqjxz", buf[i], (size_t)a - 1) != NULL);
            CHECK(ok);
        }
    }
    free(buf);
}

static void test_cycle_and_determinism(void)
{
    char a[1000], b[1000];
    double h = -1;
    CHECK_STATUS(llmt_data_synth_markov(1, 27, 1, a, sizeof a, &h), LLMT_OK);
    CHECK(h == 0);
    /* A cycle through all 27 symbols in order. */
    static const char order[] = "etaoinshrdlucmfwypvbgkqjxz ";
    const char *p = strchr(order, a[0]);
    CHECK(p != NULL);
    int ok = p != NULL;
    for (size_t i = 0; ok && i < sizeof a; i++)
        ok &= a[i] == order[((size_t)(p - order) + i) % 27];
    CHECK(ok);
    CHECK_STATUS(llmt_data_synth_markov(1, 4, 1, a, sizeof a, &h), LLMT_OK);
    CHECK(h == 0);
    ok = 1;
    for (size_t i = 0; i + 4 < sizeof a; i++)
        ok &= a[i] == a[i + 4] && a[i] != a[i + 1];
    CHECK(ok);
    /* Same seed, same bytes and rate; another seed, other bytes. */
    double h1, h2, h3;
    CHECK_STATUS(llmt_data_synth_markov(99, 27, 4, a, sizeof a, &h1), LLMT_OK);
    CHECK_STATUS(llmt_data_synth_markov(99, 27, 4, b, sizeof b, &h2), LLMT_OK);
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(h1 == h2);
    CHECK_STATUS(llmt_data_synth_markov(100, 27, 4, b, sizeof b, &h3), LLMT_OK);
    CHECK(memcmp(a, b, sizeof a) != 0);
    /* A prefix of a longer text is the shorter text. */
    CHECK_STATUS(llmt_data_synth_markov(99, 27, 4, b, 10, &h2), LLMT_OK);
    CHECK(!memcmp(a, b, 10));
    /* branching == alphabet: every symbol may follow every symbol. */
    CHECK_STATUS(llmt_data_synth_markov(5, 2, 2, a, sizeof a, &h), LLMT_OK);
    CHECK(h > 0 && h <= log(2.0) + 1e-12);
    /* len 0: only the rate. */
    CHECK_STATUS(llmt_data_synth_markov(5, 27, 3, NULL, 0, &h), LLMT_OK);
}

static void test_errors(void)
{
    char buf[16];
    double h;
    CHECK_STATUS(llmt_data_synth_markov(1, 1, 1, buf, 16, &h), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_data_synth_markov(1, 28, 3, buf, 16, &h), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_data_synth_markov(1, 27, 0, buf, 16, &h), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_data_synth_markov(1, 5, 6, buf, 16, &h), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_data_synth_markov(1, -3, 2, buf, 16, &h), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_data_synth_markov(1, 27, 3, NULL, 16, &h), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_data_synth_markov(1, 27, 3, buf, 16, NULL), LLMT_ERR_NULL_POINTER);
}

int main(void)
{
    test_entropy();
    test_cycle_and_determinism();
    test_errors();
    return check_exit("data-synth");
}
