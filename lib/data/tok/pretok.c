/* The GPT-2 pre-tokenizer, written out by hand: UTF-8 decoding, the code
 * point classes of unicode_tab.c, and the alternatives of the regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * tried in order at each position, as JavaScript's /gu matchAll does. */
#include "tok.h"

static const unsigned char ascii_cls[128] = {
    /* 0x00-0x1f: \t \n \v \f \r are \s */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3, 3, 3, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* ' ' and punctuation, digits */
    3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0,
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
};

static int cp_class(uint32_t cp)
{
    size_t lo = 0, hi = llmt__uni_nranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < llmt__uni_ranges[mid][0])
            hi = mid;
        else if (cp > llmt__uni_ranges[mid][1])
            lo = mid + 1;
        else
            return (int)llmt__uni_ranges[mid][2];
    }
    return TOK_CLS_OTHER;
}

int llmt__tok_class(const unsigned char *s, size_t n, size_t *len)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *len = 1;
        return ascii_cls[c];
    }
    uint32_t cp;
    size_t k;
    if (c >= 0xc2 && c <= 0xdf) {
        k = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        k = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        k = 4;
        cp = c & 0x07;
    } else {
        *len = 1;
        return TOK_CLS_OTHER;
    }
    if (k > n) {
        *len = 1;
        return TOK_CLS_OTHER;
    }
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *len = 1;
            return TOK_CLS_OTHER;
        }
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (k == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
        *len = 1;
        return TOK_CLS_OTHER;
    }
    *len = k;
    return cp_class(cp);
}

/* End of the run of class `cls` starting at j. */
static size_t run_end(const unsigned char *s, size_t n, size_t j, int cls)
{
    while (j < n) {
        size_t l;
        if (s[j] < 0x80) {
            if (ascii_cls[s[j]] != cls)
                break;
            j++;
            continue;
        }
        if (llmt__tok_class(s + j, n - j, &l) != cls)
            break;
        j += l;
    }
    return j;
}

size_t llmt__tok_next_chunk(const unsigned char *s, size_t n, size_t i)
{
    unsigned c = s[i];
    if (c == '\'' && i + 1 < n) {
        unsigned d = s[i + 1];
        if (d == 's' || d == 't' || d == 'm' || d == 'd')
            return i + 2;
        if (i + 2 < n) {
            unsigned e = s[i + 2];
            if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') ||
                (d == 'l' && e == 'l'))
                return i + 3;
        }
    }
    size_t len;
    int cls = llmt__tok_class(s + i, n - i, &len);
    if (c == ' ' && i + 1 < n) {
        size_t l2;
        int c2 = llmt__tok_class(s + i + 1, n - i - 1, &l2);
        if (c2 != TOK_CLS_S)
            return run_end(s, n, i + 1 + l2, c2);
    }
    if (cls != TOK_CLS_S)
        return run_end(s, n, i + len, cls);
    /* whitespace: \s+(?!\S) leaves the last white space before a non-space
     * to the next chunk (" ?\p{L}+" and friends take a space); a single one
     * before a non-space is \s+ alone. */
    size_t j = i + len, last = i;
    while (j < n) {
        size_t l;
        if (llmt__tok_class(s + j, n - j, &l) != TOK_CLS_S)
            break;
        last = j;
        j += l;
    }
    if (j == n)
        return n;
    return last > i ? last : j;
}
