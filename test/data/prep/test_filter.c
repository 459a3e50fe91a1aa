/* Quality filters: each one just below and just above its threshold (the
 * others off), defaults, verdict order, code points not bytes, names, and
 * argument errors. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"

static char doc[1 << 16];
static size_t dlen;

static void put(const char *s)
{
    size_t n = strlen(s);
    memcpy(doc + dlen, s, n);
    dlen += n;
    doc[dlen] = 0;
}

static void reset(void)
{
    dlen = 0;
    doc[0] = 0;
}

/* A distinct 4-letter word for i < 26^3 ("qaaa", "qaab", ...). */
static const char *word(int i)
{
    static char w[8];
    w[0] = 'q';
    w[1] = (char)('a' + i / 676 % 26);
    w[2] = (char)('a' + i / 26 % 26);
    w[3] = (char)('a' + i % 26);
    w[4] = 0;
    return w;
}

static int32_t verdict(const llmt_data_filter_opts *o)
{
    int32_t v = -1;
    CHECK_STATUS(llmt_data_filter_check(o, doc, dlen, &v), LLMT_OK);
    return v;
}

/* Options with every filter off. */
static llmt_data_filter_opts off(void)
{
    llmt_data_filter_opts o;
    llmt_data_filter_opts_init(&o, sizeof o);
    o.min_chars = 0;
    o.max_chars = 0;
    o.max_nonalpha_frac = 0;
    o.max_dup_line_frac = 0;
    o.max_top_ngram_frac = 0;
    return o;
}

static void test_defaults_and_names(void)
{
    llmt_data_filter_opts o;
    CHECK_STATUS(llmt_data_filter_opts_init(&o, sizeof o), LLMT_OK);
    CHECK_EQ_INT(o.struct_size, sizeof o);
    CHECK_EQ_INT(o.min_chars, 16);
    CHECK_EQ_INT(o.max_chars, 0);
    CHECK(o.max_nonalpha_frac == 0.5);
    CHECK(o.max_dup_line_frac == 0.3);
    CHECK(o.max_top_ngram_frac == 0.2);
    CHECK_EQ_INT(o.ngram_min_words, 50);
    CHECK(!strcmp(llmt_data_verdict_name(LLMT_DATA_KEEP), "keep"));
    CHECK(!strcmp(llmt_data_verdict_name(LLMT_DATA_TOO_SHORT), "too_short"));
    CHECK(!strcmp(llmt_data_verdict_name(LLMT_DATA_TOO_LONG), "too_long"));
    CHECK(!strcmp(llmt_data_verdict_name(LLMT_DATA_NONALPHA), "nonalpha"));
    CHECK(!strcmp(llmt_data_verdict_name(LLMT_DATA_DUP_LINES), "dup_lines"));
    CHECK(!strcmp(llmt_data_verdict_name(LLMT_DATA_TOP_NGRAM), "top_ngram"));
    CHECK(!strcmp(llmt_data_verdict_name(LLMT_DATA_EXACT_DUP), "exact_dup"));
    CHECK(!strcmp(llmt_data_verdict_name(LLMT_DATA_NEAR_DUP), "near_dup"));
    CHECK(!strcmp(llmt_data_verdict_name(LLMT_DATA_VERDICTS), "unknown"));
    CHECK(!strcmp(llmt_data_verdict_name(-1), "unknown"));
    /* An ordinary paragraph passes the defaults. */
    reset();
    put("The quick brown fox jumps over the lazy dog.\nIt was not amused, "
        "and went back to sleep under the old oak tree.\n");
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
}

static void test_length(void)
{
    llmt_data_filter_opts o = off();
    o.min_chars = 16;
    reset();
    put("abcdefghijklmnop"); /* 16 */
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
    reset();
    put("abcdefghijklmno"); /* 15 */
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_TOO_SHORT);
    /* Code points, not bytes: 15 e-acute are 30 bytes but too short. */
    reset();
    for (int i = 0; i < 15; i++)
        put("\xC3\xA9");
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_TOO_SHORT);
    put("\xE6\x97\xA5"); /* 16 code points */
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
    o = off();
    o.max_chars = 20;
    reset();
    put("abcdefghij \xF0\x9F\x98\x80" "bcdefgh\n"); /* 20 */
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
    put("x"); /* 21 */
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_TOO_LONG);
}

static void test_nonalpha(void)
{
    llmt_data_filter_opts o = off();
    o.max_nonalpha_frac = 0.5;
    /* 50 letters and 50 digits among spaces: exactly 0.5, kept. */
    reset();
    for (int i = 0; i < 10; i++)
        put("abcde 12345\n");
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
    put("6"); /* 51 of 101 */
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_NONALPHA);
    /* Letters of any script count as letters; symbols do not. */
    reset();
    put("\xE6\x97\xA5\xE6\x9C\xAC\xD0\xB4\xCE\xB1 \xF0\x9F\x98\x80\xF0\x9F\x98\x80"
        "\xF0\x9F\x98\x80\xF0\x9F\x98\x80");
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP); /* 4 letters, 4 emoji */
    put("!");
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_NONALPHA);
    /* 0 turns it off. */
    o.max_nonalpha_frac = 0;
    reset();
    put("1234567890 !!!! ???? 0000");
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
}

static void test_dup_lines(void)
{
    llmt_data_filter_opts o = off();
    o.max_dup_line_frac = 0.3;
    /* 70 distinct lines and 30 repeats: 0.3, kept. */
    reset();
    for (int i = 0; i < 70; i++) {
        put(word(i));
        put(" line\n");
        if (i % 7 == 0)
            put("   \n\n"); /* blank lines count for nothing */
    }
    for (int i = 0; i < 30; i++) {
        put(word(i % 3));
        put(" line\n");
    }
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
    put(word(5));
    put(" line"); /* 31 of 101, no final newline */
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_DUP_LINES);
    /* A line is equal only when all its bytes are. */
    reset();
    for (int i = 0; i < 10; i++)
        put(i % 2 ? "same line\n" : "same line \n");
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_DUP_LINES); /* 8 of 10 */
    reset();
    put("same line\nsame line \nsame linE\n");
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
}

static void test_top_ngram(void)
{
    llmt_data_filter_opts o = off();
    o.max_top_ngram_frac = 0.2;
    /* 100 four-letter words; "aaaa bbbb" 10 times covers 80 of 400 word
     * characters: 0.2, kept. */
    reset();
    int u = 100;
    for (int r = 0; r < 10; r++) {
        put("aaaa bbbb ");
        for (int k = 0; k < 8; k++) {
            put(word(u++));
            put(k == 3 ? "\n" : " ");
        }
    }
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
    /* Replace two unique words by an 11th "aaaa bbbb": 88 of 400. */
    reset();
    u = 100;
    for (int r = 0; r < 10; r++) {
        put("aaaa bbbb ");
        for (int k = 0; k < 8; k++) {
            if (r == 9 && k < 2) {
                if (k == 0)
                    put("aaaa bbbb ");
                continue;
            }
            put(word(u++));
            put(" ");
        }
    }
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_TOP_NGRAM);
    /* Overlapping occurrences cover each word once: "zz zz zz zz" and six
     * other 2-letter words: 8 of 20 characters are covered (0.4). */
    reset();
    put("zz zz zz zz ab cd ef gh ij kl");
    /* 10 words: under the default ngram_min_words (50) the filter does not
     * look at it; with 0 it looks at every document. */
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
    o.ngram_min_words = 11;
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
    o.ngram_min_words = 10;
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_TOP_NGRAM);
    o.ngram_min_words = 0;
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_TOP_NGRAM);
    o.max_top_ngram_frac = 0.4;
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
    o.max_top_ngram_frac = 0.39;
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_TOP_NGRAM);
    /* A 2-gram seen once is not repetition. */
    o.max_top_ngram_frac = 0.01;
    reset();
    put("one two");
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_KEEP);
}

static void test_order_and_errors(void)
{
    llmt_data_filter_opts o;
    llmt_data_filter_opts_init(&o, sizeof o);
    /* Short and non-alphabetic: the first filter in enum order wins. */
    reset();
    put("1234");
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_TOO_SHORT);
    /* Repeated lines of digits: non-alpha comes before dup lines. */
    reset();
    for (int i = 0; i < 10; i++)
        put("12345 67890\n");
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_NONALPHA);
    /* Repeated lines of words: dup lines comes before the 2-gram. */
    reset();
    for (int i = 0; i < 10; i++)
        put("hello there world\n");
    CHECK_EQ_INT(verdict(&o), LLMT_DATA_DUP_LINES);
    int32_t v;
    CHECK_STATUS(llmt_data_filter_check(NULL, "x", 1, &v), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_data_filter_check(&o, NULL, 1, &v), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_data_filter_check(&o, "x", 1, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_data_filter_opts_init(NULL, sizeof o), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_data_filter_opts_init(&o, 4), LLMT_ERR_STRUCT_SIZE);
    llmt_data_filter_opts z;
    memset(&z, 0, sizeof z);
    CHECK_STATUS(llmt_data_filter_check(&z, "x", 1, &v), LLMT_ERR_STRUCT_SIZE);
    llmt_data_filter_opts_init(&o, sizeof o);
    o.min_chars = -1;
    CHECK_STATUS(llmt_data_filter_check(&o, "x", 1, &v), LLMT_ERR_INVALID_ARGUMENT);
    llmt_data_filter_opts_init(&o, sizeof o);
    o.max_dup_line_frac = -0.1;
    CHECK_STATUS(llmt_data_filter_check(&o, "x", 1, &v), LLMT_ERR_INVALID_ARGUMENT);
    o.max_dup_line_frac = NAN;
    CHECK_STATUS(llmt_data_filter_check(&o, "x", 1, &v), LLMT_ERR_INVALID_ARGUMENT);
    /* An older caller's shorter struct: the fields it lacks keep defaults. */
    llmt_data_filter_opts_init(&o, offsetof(llmt_data_filter_opts, max_chars));
    CHECK_EQ_INT(o.struct_size, offsetof(llmt_data_filter_opts, max_chars));
    o.min_chars = 2;
    CHECK_STATUS(llmt_data_filter_check(&o, "abc", 3, &v), LLMT_OK);
    CHECK_EQ_INT(v, LLMT_DATA_KEEP);
}

int main(void)
{
    test_defaults_and_names();
    test_length();
    test_nonalpha();
    test_dup_lines();
    test_top_ngram();
    test_order_and_errors();
    return check_exit("data-filter");
}
