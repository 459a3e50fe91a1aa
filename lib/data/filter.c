/* Quality filters: the document-level heuristics of Gopher (Rae et al. 2021,
 * appendix A.1.1) that need no word lists: length, share of non-letters,
 * repeated lines and the coverage of the most frequent word 2-gram. They
 * take the text as given (normalise first); a byte of invalid UTF-8 counts
 * as one non-letter code point. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "data_internal.h"
#include "tok/tok.h"

LLMT_API const char *llmt_data_verdict_name(int32_t verdict)
{
    static const char *const names[LLMT_DATA_VERDICTS] = {
        "keep", "too_short", "too_long", "nonalpha",
        "dup_lines", "top_ngram", "exact_dup", "near_dup",
    };
    if (verdict < 0 || verdict >= LLMT_DATA_VERDICTS)
        return "unknown";
    return names[verdict];
}

LLMT_API llmt_status llmt_data_filter_opts_init(llmt_data_filter_opts *opts, size_t size)
{
    llmt_data_filter_opts d = {0};
    d.min_chars = 16;
    d.max_chars = 0;
    d.max_nonalpha_frac = 0.5;
    d.max_dup_line_frac = 0.3;
    d.max_top_ngram_frac = 0.2;
    d.ngram_min_words = 50;
    return llmt__opts_init(opts, size, 0, &d, sizeof d, "data filter opts");
}

/* Open-addressing table of 64-bit keys with a count each; a slot with
 * count 0 is empty. Sized to a power of two at least twice the entries. */
typedef struct ftab {
    uint64_t *key;
    uint32_t *count;
    uint32_t *first; /* index of the first occurrence (a line or a word) */
    size_t mask;
} ftab;

static int ftab_init(ftab *t, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n + 2)
        cap <<= 1;
    t->key = malloc(cap * sizeof *t->key);
    t->count = calloc(cap, sizeof *t->count);
    t->first = malloc(cap * sizeof *t->first);
    t->mask = cap - 1;
    return t->key && t->count && t->first ? 0 : -1;
}

static void ftab_free(ftab *t)
{
    free(t->key);
    free(t->count);
    free(t->first);
}

/* The slot of `key`, claimed for it (count 0) when absent. */
static size_t ftab_slot(ftab *t, uint64_t key, uint32_t first)
{
    size_t i = (size_t)(key ^ (key >> 29)) & t->mask;
    while (t->count[i] && t->key[i] != key)
        i = (i + 1) & t->mask;
    if (!t->count[i]) {
        t->key[i] = key;
        t->first[i] = first;
    }
    return i;
}

typedef struct span {
    size_t off, len;  /* bytes */
    size_t chars;     /* code points */
} span;

static size_t count_chars(const unsigned char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += (s[i] & 0xC0) != 0x80;
    return c;
}

/* Code points, and the share of non-space ones that are not letters. */
static void scan_chars(const unsigned char *s, size_t n, int64_t *chars,
                       double *nonalpha)
{
    int64_t total = 0, nonspace = 0, letters = 0;
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            total++;
            if (!llmt__data_is_space(c)) {
                nonspace++;
                letters += (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
            }
            i++;
            continue;
        }
        size_t l;
        int cls = llmt__tok_class(s + i, n - i, &l);
        total++;
        nonspace++;
        letters += cls == TOK_CLS_L;
        i += l;
    }
    *chars = total;
    *nonalpha = nonspace ? (double)(nonspace - letters) / (double)nonspace : 0;
}

/* Lines equal to an earlier line, over all lines; blank (whitespace-only)
 * lines count in neither, so paragraph breaks never look like repetition.
 * Equal hashes are compared byte for byte: the verdict is exact. */
static int dup_line_frac(const unsigned char *s, size_t n, double *frac)
{
    size_t nlines = 1;
    for (size_t i = 0; i < n; i++)
        nlines += s[i] == '\n';
    span *lines = malloc(nlines * sizeof *lines);
    if (!lines)
        return -1;
    ftab t;
    if (ftab_init(&t, nlines)) {
        free(lines);
        ftab_free(&t);
        return -1;
    }
    size_t nl = 0, counted = 0, dups = 0, start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '\n')
            continue;
        const unsigned char *l = s + start;
        size_t len = i - start;
        start = i + 1;
        size_t k = 0;
        while (k < len && llmt__data_is_space(l[k]))
            k++;
        if (k == len)
            continue;
        counted++;
        uint64_t h = XXH64(l, len, 0);
        size_t mask = t.mask, j = (size_t)(h ^ (h >> 29)) & mask;
        int dup = 0;
        /* Probe every slot holding this hash: equal hashes of different
         * lines are kept apart by comparing bytes. */
        while (t.count[j]) {
            if (t.key[j] == h) {
                const span *o = &lines[t.first[j]];
                if (o->len == len && !memcmp(s + o->off, l, len)) {
                    dup = 1;
                    break;
                }
            }
            j = (j + 1) & mask;
        }
        if (dup) {
            dups++;
        } else {
            lines[nl] = (span){(size_t)(l - s), len, 0};
            t.key[j] = h;
            t.count[j] = 1;
            t.first[j] = (uint32_t)nl++;
        }
    }
    *frac = counted ? (double)dups / (double)counted : 0;
    free(lines);
    ftab_free(&t);
    return 0;
}

/* Share of word characters (code points of words, spaces excluded) covered
 * by the occurrences of the most frequent word 2-gram, when it occurs more
 * than once. Ties go to the 2-gram of more characters. 2-grams are told
 * apart by a 64-bit hash of their words: a collision needs ~2^32 distinct
 * 2-grams in one document. */
static int top_ngram_frac(const unsigned char *s, size_t n, int64_t min_words,
                          double *frac)
{
    size_t nw = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && llmt__data_is_space(s[i]))
            i++;
        if (i < n)
            nw++;
        while (i < n && !llmt__data_is_space(s[i]))
            i++;
    }
    *frac = 0;
    if (nw < 3) /* a 2-gram can repeat only from 3 words on ("a a a") */
        return 0;
    if (min_words > 0 && (int64_t)nw < min_words)
        return 0;
    span *w = malloc(nw * sizeof *w);
    uint64_t *wh = malloc(nw * sizeof *wh);
    unsigned char *cover = calloc(nw, 1);
    ftab t = {0};
    if (!w || !wh || !cover || ftab_init(&t, nw)) {
        free(w);
        free(wh);
        free(cover);
        ftab_free(&t);
        return -1;
    }
    size_t k = 0, total = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && llmt__data_is_space(s[i]))
            i++;
        if (i >= n)
            break;
        size_t b = i;
        while (i < n && !llmt__data_is_space(s[i]))
            i++;
        w[k].off = b;
        w[k].len = i - b;
        w[k].chars = count_chars(s + b, i - b);
        total += w[k].chars;
        wh[k] = XXH64(s + b, i - b, 0);
        k++;
    }
    uint32_t best_count = 1;
    size_t best_chars = 0, best_first = 0;
    for (size_t i = 0; i + 1 < nw; i++) {
        uint64_t key = XXH64(&wh[i], 2 * sizeof *wh, 0x5eed);
        size_t j = ftab_slot(&t, key, (uint32_t)i);
        uint32_t c = ++t.count[j];
        size_t chars = w[i].chars + w[i + 1].chars;
        if (c > best_count || (c == best_count && c > 1 && chars > best_chars)) {
            best_count = c;
            best_chars = chars;
            best_first = t.first[j];
        }
    }
    if (best_count > 1 && total) {
        /* Mark the words of every occurrence; overlapping occurrences
         * ("a a a") cover a word once. */
        uint64_t a = wh[best_first], b = wh[best_first + 1];
        size_t covered = 0;
        for (size_t i = 0; i + 1 < nw; i++) {
            if (wh[i] != a || wh[i + 1] != b)
                continue;
            for (size_t m = i; m < i + 2; m++)
                if (!cover[m]) {
                    cover[m] = 1;
                    covered += w[m].chars;
                }
        }
        *frac = (double)covered / (double)total;
    }
    free(w);
    free(wh);
    free(cover);
    ftab_free(&t);
    return 0;
}

static int bad_frac(double f)
{
    return !(f >= 0) || isinf(f);
}

LLMT_API llmt_status llmt_data_filter_check(const llmt_data_filter_opts *opts,
                                            const char *text, size_t len,
                                            int32_t *verdict)
{
    if (!opts || !text || !verdict)
        return LLMT_ERR_NULL_POINTER;
    llmt_data_filter_opts o;
    llmt_data_filter_opts_init(&o, sizeof o);
    llmt_status st = llmt__opts_copy(NULL, "data filter opts", &o, sizeof o, opts);
    if (st != LLMT_OK)
        return st;
    if (o.min_chars < 0 || o.max_chars < 0 || o.ngram_min_words < 0 ||
        bad_frac(o.max_nonalpha_frac) ||
        bad_frac(o.max_dup_line_frac) || bad_frac(o.max_top_ngram_frac))
        return LLMT_ERR_INVALID_ARGUMENT;
    const unsigned char *s = (const unsigned char *)text;
    int64_t chars;
    double nonalpha;
    scan_chars(s, len, &chars, &nonalpha);
    *verdict = LLMT_DATA_KEEP;
    if (o.min_chars > 0 && chars < o.min_chars) {
        *verdict = LLMT_DATA_TOO_SHORT;
        return LLMT_OK;
    }
    if (o.max_chars > 0 && chars > o.max_chars) {
        *verdict = LLMT_DATA_TOO_LONG;
        return LLMT_OK;
    }
    if (o.max_nonalpha_frac > 0 && nonalpha > o.max_nonalpha_frac) {
        *verdict = LLMT_DATA_NONALPHA;
        return LLMT_OK;
    }
    double f;
    if (o.max_dup_line_frac > 0) {
        if (dup_line_frac(s, len, &f))
            return LLMT_ERR_OUT_OF_MEMORY;
        if (f > o.max_dup_line_frac) {
            *verdict = LLMT_DATA_DUP_LINES;
            return LLMT_OK;
        }
    }
    if (o.max_top_ngram_frac > 0) {
        if (top_ngram_frac(s, len, o.ngram_min_words, &f))
            return LLMT_ERR_OUT_OF_MEMORY;
        if (f > o.max_top_ngram_frac) {
            *verdict = LLMT_DATA_TOP_NGRAM;
            return LLMT_OK;
        }
    }
    return LLMT_OK;
}
