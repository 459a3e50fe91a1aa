/* Normalisation: one line-ending convention and well-formed UTF-8, so every
 * later stage (filters, dedup hashes, the tokenizer) sees one spelling of a
 * text. Invalid sequences become U+FFFD one maximal subpart at a time, as
 * Unicode (sec. 3.9, "U+FFFD Substitution of Maximal Subparts") and the
 * WHATWG decoder do, so the count of replacements is the same as any
 * conforming decoder's. */
#include <string.h>

#include "data_internal.h"

int llmt__data_utf8_next(const unsigned char *s, size_t n, uint32_t *cp,
                         size_t *len)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        *len = 1;
        return 1;
    }
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        v = c & 0x0F;
        if (c == 0xE0)
            lo = 0xA0;      /* overlong below U+0800 */
        else if (c == 0xED)
            hi = 0x9F;      /* surrogates U+D800..DFFF */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        v = c & 0x07;
        if (c == 0xF0)
            lo = 0x90;      /* overlong below U+10000 */
        else if (c == 0xF4)
            hi = 0x8F;      /* above U+10FFFF */
    } else {
        /* 80..C1 (continuation or overlong lead), F5..FF: never valid. */
        *len = 1;
        return 0;
    }
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n)
            break;
        unsigned b = s[i];
        unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h)
            break;
        v = (v << 6) | (b & 0x3F);
    }
    *len = i;
    if (i <= need)
        return 0;
    *cp = v;
    return 1;
}

size_t llmt__data_normalize(const unsigned char *in, size_t len,
                            unsigned char *out, size_t cap, int64_t *invalid,
                            size_t *needed)
{
    static const unsigned char fffd[3] = {0xEF, 0xBF, 0xBD};
    size_t o = 0;
    int64_t bad = 0;
    int fits = 1;
#define EMIT(p, k)                                                      \
    do {                                                                \
        if (fits && o + (k) <= cap)                                     \
            memmove(out + o, (p), (k));                                 \
        else                                                            \
            fits = 0;                                                   \
        o += (k);                                                       \
    } while (0)
    size_t i = 0;
    while (i < len) {
        /* Runs of printable ASCII are the common case: copy them whole. */
        size_t j = i;
        while (j < len && in[j] >= 0x20 && in[j] < 0x80)
            j++;
        if (j > i) {
            EMIT(in + i, j - i);
            i = j;
            continue;
        }
        unsigned char c = in[i];
        if (c == '\r') {
            unsigned char lf = '\n';
            EMIT(&lf, 1);
            i += (i + 1 < len && in[i + 1] == '\n') ? 2 : 1;
        } else if (c == 0) {
            bad++;
            i++;
        } else {
            uint32_t cp;
            size_t l;
            if (llmt__data_utf8_next(in + i, len - i, &cp, &l)) {
                EMIT(in + i, l);
            } else {
                bad++;
                EMIT(fffd, 3);
            }
            i += l;
        }
    }
#undef EMIT
    if (invalid)
        *invalid += bad;
    if (needed)
        *needed = o;
    return fits ? o : SIZE_MAX;
}

LLMT_API llmt_status llmt_data_normalize(const char *text, size_t len,
                                         char *out, size_t cap,
                                         size_t *out_len, int64_t *invalid)
{
    if (!text || !out || !out_len)
        return LLMT_ERR_NULL_POINTER;
    int64_t bad = 0;
    size_t need = 0;
    size_t n = llmt__data_normalize((const unsigned char *)text, len,
                                    (unsigned char *)out, cap, &bad, &need);
    /* On a short buffer *out_len tells the caller how much to allocate. */
    *out_len = need;
    if (invalid)
        *invalid = bad;
    return n == SIZE_MAX ? LLMT_ERR_BUFFER_TOO_SMALL : LLMT_OK;
}
