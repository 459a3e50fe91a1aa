/* An independent UTF-8 reference for the data tests: the WHATWG Encoding
 * Standard's decoder (a state machine of "bytes needed" and the bounds of
 * the next byte), which replaces maximal subparts exactly as Unicode
 * recommends. Written from the standard, not from lib/data/normalize.c. */
#ifndef LLMT_TEST_UTF8_REF_H
#define LLMT_TEST_UTF8_REF_H

#include <stddef.h>
#include <stdint.h>

/* Decode s into code points (U+FFFD for each error); returns how many code
 * points were written to cps (cps may be NULL) and the errors in *errors. */
static size_t ref_utf8_decode(const unsigned char *s, size_t n, uint32_t *cps,
                              size_t *errors)
{
    size_t out = 0, err = 0;
    uint32_t cp = 0;
    int needed = 0, seen = 0;
    unsigned lower = 0x80, upper = 0xBF;
    size_t i = 0;
    while (i <= n) {
        if (i == n) {
            if (needed) { /* end of input inside a sequence */
                if (cps) cps[out] = 0xFFFD;
                out++;
                err++;
            }
            break;
        }
        unsigned b = s[i];
        if (needed == 0) {
            if (b <= 0x7F) {
                if (cps) cps[out] = b;
                out++;
            } else if (b >= 0xC2 && b <= 0xDF) {
                needed = 1;
                cp = b & 0x1F;
            } else if (b >= 0xE0 && b <= 0xEF) {
                if (b == 0xE0) lower = 0xA0;
                if (b == 0xED) upper = 0x9F;
                needed = 2;
                cp = b & 0xF;
            } else if (b >= 0xF0 && b <= 0xF4) {
                if (b == 0xF0) lower = 0x90;
                if (b == 0xF4) upper = 0x8F;
                needed = 3;
                cp = b & 0x7;
            } else {
                if (cps) cps[out] = 0xFFFD;
                out++;
                err++;
            }
            i++;
            continue;
        }
        if (b < lower || b > upper) {
            /* Error; the byte is processed again from the start state. */
            cp = 0;
            needed = seen = 0;
            lower = 0x80;
            upper = 0xBF;
            if (cps) cps[out] = 0xFFFD;
            out++;
            err++;
            continue;
        }
        lower = 0x80;
        upper = 0xBF;
        cp = (cp << 6) | (b & 0x3F);
        seen++;
        i++;
        if (seen == needed) {
            if (cps) cps[out] = cp;
            out++;
            cp = 0;
            needed = seen = 0;
        }
    }
    if (errors)
        *errors = err;
    return out;
}

/* 1 when s is well-formed UTF-8. */
static int ref_utf8_valid(const unsigned char *s, size_t n)
{
    size_t err;
    ref_utf8_decode(s, n, NULL, &err);
    return err == 0;
}

#endif
