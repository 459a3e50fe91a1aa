/* llmt_data_normalize: line endings, every class of invalid UTF-8 (maximal
 * subparts), NULs, valid sequences at the range boundaries, the 3 * len
 * bound, short buffers; and random bytes against the WHATWG reference
 * decoder in utf8_ref.h. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"
#include "utf8_ref.h"

static char out[4096];

/* Normalise `in` (n bytes) and compare with `want` and `want_bad`. */
static void expect(const char *in, size_t n, const char *want, size_t want_n,
                   int64_t want_bad, int line)
{
    size_t len = 0;
    int64_t bad = -1;
    llmt_status s = llmt_data_normalize(in, n, out, sizeof out, &len, &bad);
    int ok = s == LLMT_OK && len == want_n && !memcmp(out, want, want_n) &&
             bad == want_bad;
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "  (case at line %d: status %d len %zu bad %lld)\n", line,
                (int)s, len, (long long)bad);
}

#define EXPECT(in, want, bad) \
    expect(in, sizeof(in) - 1, want, sizeof(want) - 1, bad, __LINE__)
#define R "\xEF\xBF\xBD" /* U+FFFD */

static void test_line_endings(void)
{
    EXPECT("a\r\nb\rc\n", "a\nb\nc\n", 0);
    EXPECT("\r\r\n\r", "\n\n\n", 0);
    EXPECT("x\r", "x\n", 0);
    EXPECT("\n\r\n\n", "\n\n\n", 0);
    EXPECT("", "", 0);
}

static void test_invalid(void)
{
    /* Lone continuation bytes and bytes that never occur. */
    EXPECT("\x80", R, 1);
    EXPECT("a\xBF" "b", "a" R "b", 1);
    EXPECT("\xFE\xFF", R R, 2);
    EXPECT("\xF5\x80\x80\x80", R R R R, 4);
    /* Overlong encodings: C0/C1 leads, E0 80..9F, F0 80..8F. */
    EXPECT("\xC0\xAF", R R, 2);
    EXPECT("\xC1\xBF", R R, 2);
    EXPECT("\xE0\x80\xAF", R R R, 3);
    EXPECT("\xE0\x9F\xBF", R R R, 3);
    EXPECT("\xF0\x80\x80\xAF", R R R R, 4);
    EXPECT("\xF0\x8F\xBF\xBF", R R R R, 4);
    /* Surrogates U+D800..DFFF. */
    EXPECT("\xED\xA0\x80", R R R, 3);
    EXPECT("\xED\xBF\xBF", R R R, 3);
    /* Above U+10FFFF. */
    EXPECT("\xF4\x90\x80\x80", R R R R, 4);
    /* Truncated sequences: one U+FFFD for the whole maximal subpart. */
    EXPECT("\xC3", R, 1);
    EXPECT("\xE2\x82" "A", R "A", 1);
    EXPECT("\xF0\x9F\x98", R, 1);
    EXPECT("\xF0\x9F\x98\n", R "\n", 1);
    EXPECT("\xF0\x9F\r\n", R "\n", 1);
    EXPECT("\xE2\xE2\x82\xAC", R "\xE2\x82\xAC", 1);
    /* Unicode 15, Table 3-8 (and 3-11): U+FFFD per maximal subpart. */
    EXPECT("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64",
           "a" R R R "b" R "c" R R "d", 6);
}

static void test_nul_and_valid(void)
{
    /* NULs are dropped and counted. */
    EXPECT("a\0b\0", "ab", 2);
    EXPECT("\0\0\0", "", 3);
    /* Valid sequences at every range boundary are kept byte for byte. */
    static const char valid[] =
        "\xC2\x80\xDF\xBF\xE0\xA0\x80\xEC\xBF\xBF\xED\x80\x80\xED\x9F\xBF"
        "\xEE\x80\x80\xEF\xBF\xBF\xF0\x90\x80\x80\xF3\xBF\xBF\xBF"
        "\xF4\x80\x80\x80\xF4\x8F\xBF\xBF" "\x7F\x01\t" "caf\xC3\xA9 \xE2\x82\xAC"
        "\xF0\x9F\x98\x80 \xE6\x97\xA5\xE6\x9C\xAC";
    EXPECT(valid, valid, 0);
    /* In place, valid text never grows. */
    char buf[64];
    memcpy(buf, "caf\xC3\xA9\r\nx\0y", 10);
    size_t len;
    int64_t bad;
    CHECK_STATUS(llmt_data_normalize(buf, 10, buf, sizeof buf, &len, &bad), LLMT_OK);
    CHECK_EQ_INT(len, 8);
    CHECK(!memcmp(buf, "caf\xC3\xA9\nxy", 8));
    CHECK_EQ_INT(bad, 1);
}

static void test_bounds(void)
{
    /* The worst case is exactly 3 * len: every byte invalid. */
    char in[100];
    memset(in, 0x80, sizeof in);
    size_t len;
    CHECK_STATUS(llmt_data_normalize(in, sizeof in, out, 3 * sizeof in, &len, NULL),
                 LLMT_OK);
    CHECK_EQ_INT(len, 3 * sizeof in);
    /* One byte short: BUFFER_TOO_SMALL, *out_len the size needed. */
    CHECK_STATUS(llmt_data_normalize(in, sizeof in, out, 3 * sizeof in - 1, &len, NULL),
                 LLMT_ERR_BUFFER_TOO_SMALL);
    CHECK_EQ_INT(len, 3 * sizeof in);
    CHECK_STATUS(llmt_data_normalize("abc", 3, out, 2, &len, NULL),
                 LLMT_ERR_BUFFER_TOO_SMALL);
    CHECK_EQ_INT(len, 3);
    CHECK_STATUS(llmt_data_normalize("abc", 3, out, 3, &len, NULL), LLMT_OK);
    /* NULL pointers. */
    CHECK_STATUS(llmt_data_normalize(NULL, 3, out, 9, &len, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_data_normalize("abc", 3, NULL, 9, &len, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_data_normalize("abc", 3, out, 9, NULL, NULL), LLMT_ERR_NULL_POINTER);
}

/* Reference: decode with the WHATWG decoder, drop U+0000, fold CR LF and
 * CR to LF, encode. */
static size_t reference(const unsigned char *in, size_t n, unsigned char *o,
                        int64_t *bad)
{
    uint32_t *cps = malloc((n + 1) * sizeof *cps);
    size_t errors;
    size_t m = ref_utf8_decode(in, n, cps, &errors);
    size_t k = 0;
    int64_t nul = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t c = cps[i];
        if (c == 0) {
            nul++;
            continue;
        }
        if (c == '\r') {
            c = '\n';
            if (i + 1 < m && cps[i + 1] == '\n')
                i++;
        }
        if (c < 0x80) {
            o[k++] = (unsigned char)c;
        } else if (c < 0x800) {
            o[k++] = (unsigned char)(0xC0 | c >> 6);
            o[k++] = (unsigned char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            o[k++] = (unsigned char)(0xE0 | c >> 12);
            o[k++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            o[k++] = (unsigned char)(0x80 | (c & 0x3F));
        } else {
            o[k++] = (unsigned char)(0xF0 | c >> 18);
            o[k++] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
            o[k++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            o[k++] = (unsigned char)(0x80 | (c & 0x3F));
        }
    }
    free(cps);
    *bad = (int64_t)errors + nul;
    return k;
}

static void test_random_vs_reference(void)
{
    /* Bytes biased towards the interesting ones: leads, continuations,
     * CR, LF, NUL, ASCII. */
    static const unsigned char pick[] = {
        0x00, '\r', '\n', 'a', ' ', 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF,
        0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0,
        0xF1, 0xF3, 0xF4, 0xF5, 0xFF};
    uint64_t st = 12345;
    unsigned char in[64], want[256];
    int mismatches = 0, over = 0;
    for (int t = 0; t < 20000; t++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = (size_t)(st >> 58); /* 0..63 */
        for (size_t i = 0; i < n; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            in[i] = (st >> 40) & 1 ? pick[(st >> 33) % sizeof pick]
                                   : (unsigned char)(st >> 48);
        }
        int64_t want_bad, bad;
        size_t want_n = reference(in, n, want, &want_bad), len;
        llmt_status s = llmt_data_normalize((const char *)in, n, out, 3 * n, &len, &bad);
        if (s != LLMT_OK || len != want_n || memcmp(out, want, len) || bad != want_bad)
            mismatches++;
        if (len > 3 * n || !ref_utf8_valid((unsigned char *)out, len) ||
            memchr(out, '\r', len) || memchr(out, 0, len))
            over++;
    }
    CHECK_EQ_INT(mismatches, 0);
    CHECK_EQ_INT(over, 0);
}

int main(void)
{
    test_line_endings();
    test_invalid();
    test_nul_and_valid();
    test_bounds();
    test_random_vs_reference();
    return check_exit("data-normalize");
}
