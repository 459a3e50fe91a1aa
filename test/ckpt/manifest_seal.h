/* A deliberate editor of checkpoint manifests, for the tests: the writer
 * ends every manifest with "digest" (doc/checkpoint-format.md), the XXH64
 * of the file's bytes with its own 16 digits read as '0's, and a reader
 * refuses a manifest whose bytes no longer match. A test that edits a
 * manifest to reach a field check reseals it; manifest_unseal makes it a
 * manifest of before digests. Needs xxhash (xxhash_dep). */
#ifndef LLMT_TEST_MANIFEST_SEAL_H
#define LLMT_TEST_MANIFEST_SEAL_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <xxhash.h>

/* Where the 16 digits of the digest start (after the last "digest":"), or
 * -1 when the text has none. */
static inline long manifest_digest_at(const char *text, size_t len)
{
    static const char key[] = "\"digest\":\"";
    const size_t kl = sizeof key - 1;
    for (size_t i = len >= kl + 16 ? len - kl - 16 + 1 : 0; i-- > 0;)
        if (!memcmp(text + i, key, kl))
            return (long)(i + kl);
    return -1;
}

/* The digest of text recomputed in place (text keeps its length). 0: the
 * text has no digest. */
static inline int manifest_reseal(char *text, size_t len)
{
    long at = manifest_digest_at(text, len);
    if (at < 0)
        return 0;
    char b[17];
    memcpy(text + at, "0000000000000000", 16);
    snprintf(b, sizeof b, "%016" PRIx64, (uint64_t)XXH64(text, len, 0));
    memcpy(text + at, b, 16);
    return 1;
}

/* The digest field removed (a manifest as written before digests); the
 * new length, or 0 when the text had none where the writer puts it. */
static inline size_t manifest_unseal(char *text, size_t len)
{
    long at = manifest_digest_at(text, len);
    static const char key[] = ",\"digest\":\"";
    size_t kl = sizeof key - 1;
    if (at < (long)kl || memcmp(text + at - kl, key, kl))
        return 0;
    size_t from = (size_t)at - kl, to = (size_t)at + 17; /* digits and '"' */
    memmove(text + from, text + to, len - to);
    text[len - (to - from)] = 0;
    return len - (to - from);
}

#endif
