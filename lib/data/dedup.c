/* Deduplication: exact (a set of XXH64 hashes of the text) and near
 * (MinHash signatures of word-shingle sets, LSH banding for candidates, the
 * share of equal signature entries as the Jaccard estimate).
 *
 * Memory is linear in the documents kept and independent of their length:
 * per kept document its signature (8 * permutations bytes), one bucket
 * entry per band (16 bytes) and its key in the band table (16 bytes a
 * slot, at load 1/4 to 1/2), 8 bytes of "seen" stamp and the exact hash
 * (16 bytes a slot, same load). With the defaults that is 1.8 to 2.4 KiB a
 * document: 1e6 kept documents take about 2 GiB. Removed documents are not
 * remembered. Exact duplicates are decided by the 64-bit hash alone
 * (a false match needs ~2^32 documents). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "data_internal.h"

#define MERSENNE61 ((1ull << 61) - 1)

/* A hash table of 64-bit keys to one int64 value each; value -1: empty. */
typedef struct u64map {
    uint64_t *key;
    int64_t *val;
    size_t cap, n; /* cap a power of two, or 0 */
} u64map;

typedef struct bucket_entry {
    int64_t doc;  /* kept document index */
    int64_t next; /* next entry of the same bucket, -1 at the end */
} bucket_entry;

struct llmt_dedup {
    llmt_err err;
    llmt_context *ctx;
    llmt_dedup_opts o;
    int32_t rows;
    uint64_t *a, *b;        /* the hash functions (a*x + b) mod 2^61-1 */
    u64map exact;           /* text hash -> 1 */
    u64map buckets;         /* (band, band hash) -> first bucket entry */
    bucket_entry *entries;
    size_t nentries, entries_cap;
    uint64_t *sigs;         /* kept signatures, permutations each */
    size_t nkept, sigs_cap; /* in documents */
    int64_t *seen;          /* per kept doc: last query that checked it */
    int64_t query;
    /* scratch reused across calls */
    uint64_t *sig;
    unsigned char *words;   /* lowercased words joined by single spaces */
    size_t words_cap;
    size_t *wstart;         /* start of each word in `words` */
    size_t wstart_cap;
};

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t mod61(uint64_t x)
{
    x = (x & MERSENNE61) + (x >> 61);
    return x >= MERSENNE61 ? x - MERSENNE61 : x;
}

/* (a * x + b) mod 2^61-1 for a, b, x < 2^61-1. */
static inline uint64_t perm_hash(uint64_t a, uint64_t b, uint64_t x)
{
    unsigned __int128 p = (unsigned __int128)a * x + b;
    uint64_t lo = (uint64_t)p & MERSENNE61;
    uint64_t hi = (uint64_t)(p >> 61);
    return mod61(lo + hi);
}

static inline size_t map_home(uint64_t k, size_t mask)
{
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 17) & mask;
}

static int map_grow(u64map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint64_t *key = malloc(cap * sizeof *key);
    int64_t *val = malloc(cap * sizeof *val);
    if (!key || !val) {
        free(key);
        free(val);
        return -1;
    }
    for (size_t i = 0; i < cap; i++)
        val[i] = -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->val[i] < 0)
            continue;
        size_t j = map_home(m->key[i], cap - 1);
        while (val[j] >= 0)
            j = (j + 1) & (cap - 1);
        key[j] = m->key[i];
        val[j] = m->val[i];
    }
    free(m->key);
    free(m->val);
    m->key = key;
    m->val = val;
    m->cap = cap;
    return 0;
}

/* The slot of k: its value (>= 0) when present, else an empty slot. */
static size_t map_find(const u64map *m, uint64_t k)
{
    size_t mask = m->cap - 1, i = map_home(k, mask);
    while (m->val[i] >= 0 && m->key[i] != k)
        i = (i + 1) & mask;
    return i;
}

static int map_reserve(u64map *m)
{
    if (2 * (m->n + 1) > m->cap)
        return map_grow(m);
    return 0;
}

static void map_free(u64map *m)
{
    free(m->key);
    free(m->val);
}

LLMT_API llmt_status llmt_dedup_opts_init(llmt_dedup_opts *opts, size_t size)
{
    llmt_dedup_opts d = {0};
    d.exact = 1;
    d.near = 1;
    d.shingle = 5;
    d.permutations = 128;
    d.bands = 16;
    d.threshold = 0.8;
    d.seed = 42;
    return llmt__opts_init(opts, size, 0, &d, sizeof d, "dedup opts");
}

static llmt_status check_opts(llmt_err *e, const llmt_dedup_opts *o)
{
    if ((o->exact != 0 && o->exact != 1) || (o->near != 0 && o->near != 1))
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "dedup: exact (%d) and near (%d) must be 0 or 1",
                             (int)o->exact, (int)o->near);
    if (o->shingle < 1 || o->shingle > 1024)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "dedup: shingle %d outside [1, 1024] words",
                             (int)o->shingle);
    if (o->permutations < 1 || o->permutations > 65536)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "dedup: permutations %d outside [1, 65536]",
                             (int)o->permutations);
    if (o->bands < 1 || o->bands > o->permutations ||
        o->permutations % o->bands)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "dedup: bands %d must divide permutations %d",
                             (int)o->bands, (int)o->permutations);
    if (!(o->threshold > 0 && o->threshold <= 1))
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "dedup: threshold %g outside (0, 1]", o->threshold);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_dedup_create(llmt_context *ctx,
                                       const llmt_dedup_opts *opts,
                                       llmt_dedup **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "dedup: create", out);
    *out = NULL;
    if (!opts)
        return llmt__err_set(ce, LLMT_ERR_NULL_POINTER, "dedup: create: opts is NULL");
    llmt_dedup_opts o;
    llmt_dedup_opts_init(&o, sizeof o);
    llmt_status s = llmt__opts_copy(ce, "dedup opts", &o, sizeof o, opts);
    if (s != LLMT_OK)
        return s;
    s = check_opts(ce, &o);
    if (s != LLMT_OK)
        return s;
    llmt_dedup *d = calloc(1, sizeof *d);
    if (!d)
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "dedup: out of memory");
    d->ctx = ctx;
    d->o = o;
    d->rows = o.permutations / o.bands;
    size_t np = (size_t)o.permutations;
    d->a = malloc(np * sizeof *d->a);
    d->b = malloc(np * sizeof *d->b);
    d->sig = malloc(np * sizeof *d->sig);
    if (!d->a || !d->b || !d->sig || map_grow(&d->exact) || map_grow(&d->buckets)) {
        llmt_dedup_destroy(d);
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "dedup: out of memory");
    }
    /* a in [1, p), b in [0, p): a universal family of hash functions over
     * the field of 2^61-1, each a min-wise permutation stand-in. */
    uint64_t st = o.seed;
    for (size_t i = 0; i < np; i++) {
        uint64_t a;
        do
            a = splitmix64(&st) & MERSENNE61;
        while (a == 0 || a == MERSENNE61);
        uint64_t b;
        do
            b = splitmix64(&st) & MERSENNE61;
        while (b == MERSENNE61);
        d->a[i] = a;
        d->b[i] = b;
    }
    *out = d;
    return LLMT_OK;
}

LLMT_API void llmt_dedup_destroy(llmt_dedup *d)
{
    if (!d)
        return;
    free(d->a);
    free(d->b);
    map_free(&d->exact);
    map_free(&d->buckets);
    free(d->entries);
    free(d->sigs);
    free(d->seen);
    free(d->sig);
    free(d->words);
    free(d->wstart);
    free(d);
}

LLMT_API const char *llmt_dedup_last_error(const llmt_dedup *d)
{
    return d ? d->err.msg : "dedup: NULL handle";
}

/* Lowercase the words of text (runs of non-space bytes, ASCII-lowercased)
 * into d->words joined by one space each, so a shingle is a contiguous
 * byte range. Returns the number of words, or -1 when out of memory. */
static int64_t split_words(llmt_dedup *d, const unsigned char *s, size_t n)
{
    if (d->words_cap < n + 1) {
        unsigned char *w = realloc(d->words, n + 1);
        if (!w)
            return -1;
        d->words = w;
        d->words_cap = n + 1;
    }
    size_t nw = 0, o = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && llmt__data_is_space(s[i]))
            i++;
        if (i >= n)
            break;
        if (nw == d->wstart_cap) {
            size_t cap = d->wstart_cap ? 2 * d->wstart_cap : 256;
            size_t *ws = realloc(d->wstart, cap * sizeof *ws);
            if (!ws)
                return -1;
            d->wstart = ws;
            d->wstart_cap = cap;
        }
        if (nw)
            d->words[o++] = ' ';
        d->wstart[nw++] = o;
        while (i < n && !llmt__data_is_space(s[i])) {
            unsigned char c = s[i++];
            d->words[o++] = (c >= 'A' && c <= 'Z') ? (unsigned char)(c | 0x20) : c;
        }
    }
    /* wstart[nw] marks the end (one past the last word, plus the space a
     * next word would have). */
    if (nw == d->wstart_cap) {
        size_t *ws = realloc(d->wstart, (nw + 1) * sizeof *ws);
        if (!ws)
            return -1;
        d->wstart = ws;
        d->wstart_cap = nw + 1;
    }
    d->wstart[nw] = o + 1;
    return (int64_t)nw;
}

/* The MinHash signature of text into d->sig. A text with no words has the
 * all-maximum signature (the empty shingle set). */
static llmt_status signature(llmt_dedup *d, const unsigned char *s, size_t n)
{
    int64_t nw = split_words(d, s, n);
    if (nw < 0)
        return llmt__err_set(&d->err, LLMT_ERR_OUT_OF_MEMORY,
                             "dedup: out of memory for a document of %zu bytes", n);
    size_t np = (size_t)d->o.permutations;
    for (size_t i = 0; i < np; i++)
        d->sig[i] = UINT64_MAX;
    if (nw == 0)
        return LLMT_OK;
    size_t k = (size_t)d->o.shingle, w = (size_t)nw;
    size_t nsh = w >= k ? w - k + 1 : 1;
    size_t span = w >= k ? k : w;
    const uint64_t *a = d->a, *b = d->b;
    uint64_t *sig = d->sig;
    /* Shingle hashes a block at a time, then each function over the block:
     * a and b stay in registers and four independent minima hide the
     * latency of the 128-bit multiply. */
    uint64_t xs[64];
    for (size_t i0 = 0; i0 < nsh; i0 += 64) {
        size_t m = nsh - i0 < 64 ? nsh - i0 : 64;
        for (size_t i = 0; i < m; i++) {
            size_t beg = d->wstart[i0 + i], end = d->wstart[i0 + i + span] - 1;
            xs[i] = mod61(XXH64(d->words + beg, end - beg, 0));
        }
        for (size_t p = 0; p < np; p++) {
            uint64_t ap = a[p], bp = b[p];
            uint64_t m0 = sig[p], m1 = m0, m2 = m0, m3 = m0;
            size_t i = 0;
            for (; i + 4 <= m; i += 4) {
                uint64_t h0 = perm_hash(ap, bp, xs[i]);
                uint64_t h1 = perm_hash(ap, bp, xs[i + 1]);
                uint64_t h2 = perm_hash(ap, bp, xs[i + 2]);
                uint64_t h3 = perm_hash(ap, bp, xs[i + 3]);
                m0 = h0 < m0 ? h0 : m0;
                m1 = h1 < m1 ? h1 : m1;
                m2 = h2 < m2 ? h2 : m2;
                m3 = h3 < m3 ? h3 : m3;
            }
            for (; i < m; i++) {
                uint64_t h = perm_hash(ap, bp, xs[i]);
                m0 = h < m0 ? h : m0;
            }
            m0 = m1 < m0 ? m1 : m0;
            m2 = m3 < m2 ? m3 : m2;
            sig[p] = m2 < m0 ? m2 : m0;
        }
    }
    return LLMT_OK;
}

LLMT_API llmt_status llmt_dedup_signature(llmt_dedup *d, const char *text,
                                          size_t len, uint64_t *sig, size_t cap)
{
    if (!d)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&d->err, "dedup: signature", text);
    LLMT__NONNULL(&d->err, "dedup: signature", sig);
    if (cap < (size_t)d->o.permutations)
        return llmt__err_set(&d->err, LLMT_ERR_BUFFER_TOO_SMALL,
                             "dedup: signature needs %d values, cap is %zu",
                             (int)d->o.permutations, cap);
    llmt_status s = signature(d, (const unsigned char *)text, len);
    if (s != LLMT_OK)
        return s;
    memcpy(sig, d->sig, (size_t)d->o.permutations * sizeof *sig);
    return LLMT_OK;
}

static uint64_t band_key(const llmt_dedup *d, int32_t band)
{
    size_t r = (size_t)d->rows;
    return XXH64(d->sig + (size_t)band * r, r * sizeof *d->sig,
                 (uint64_t)band * 0x9E3779B97F4A7C15ull + 1);
}

/* The best estimated Jaccard among the LSH candidates, or -1 if none. */
static double best_candidate(llmt_dedup *d)
{
    double best = -1;
    size_t np = (size_t)d->o.permutations;
    int64_t q = ++d->query;
    for (int32_t band = 0; band < d->o.bands; band++) {
        size_t slot = map_find(&d->buckets, band_key(d, band));
        for (int64_t e = d->buckets.val[slot]; e >= 0; e = d->entries[e].next) {
            int64_t doc = d->entries[e].doc;
            if (d->seen[doc] == q)
                continue;
            d->seen[doc] = q;
            const uint64_t *o = d->sigs + (size_t)doc * np;
            size_t eq = 0;
            for (size_t p = 0; p < np; p++)
                eq += o[p] == d->sig[p];
            double j = (double)eq / (double)np;
            if (j > best)
                best = j;
        }
    }
    return best;
}

static llmt_status remember_near(llmt_dedup *d)
{
    size_t np = (size_t)d->o.permutations, nb = (size_t)d->o.bands;
    if (d->nkept == d->sigs_cap) {
        size_t cap = d->sigs_cap ? 2 * d->sigs_cap : 256;
        uint64_t *s = realloc(d->sigs, cap * np * sizeof *s);
        if (!s)
            goto oom;
        d->sigs = s;
        int64_t *seen = realloc(d->seen, cap * sizeof *seen);
        if (!seen)
            goto oom;
        d->seen = seen;
        d->sigs_cap = cap;
    }
    if (d->nentries + nb > d->entries_cap) {
        size_t cap = d->entries_cap ? 2 * d->entries_cap : 1024;
        while (cap < d->nentries + nb)
            cap *= 2;
        bucket_entry *e = realloc(d->entries, cap * sizeof *e);
        if (!e)
            goto oom;
        d->entries = e;
        d->entries_cap = cap;
    }
    int64_t doc = (int64_t)d->nkept;
    for (size_t band = 0; band < nb; band++) {
        if (map_reserve(&d->buckets))
            goto oom;
        uint64_t k = band_key(d, (int32_t)band);
        size_t slot = map_find(&d->buckets, k);
        int64_t e = (int64_t)d->nentries++;
        d->entries[e].doc = doc;
        d->entries[e].next = d->buckets.val[slot];
        if (d->buckets.val[slot] < 0) {
            d->buckets.key[slot] = k;
            d->buckets.n++;
        }
        d->buckets.val[slot] = e;
    }
    memcpy(d->sigs + d->nkept * np, d->sig, np * sizeof *d->sig);
    d->seen[d->nkept] = 0;
    d->nkept++;
    return LLMT_OK;
oom:
    return llmt__err_set(&d->err, LLMT_ERR_OUT_OF_MEMORY,
                         "dedup: out of memory after %zu kept documents",
                         d->nkept);
}

LLMT_API llmt_status llmt_dedup_add(llmt_dedup *d, const char *text,
                                    size_t len, int32_t *verdict,
                                    double *similar)
{
    if (!d)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&d->err, "dedup: add", text);
    LLMT__NONNULL(&d->err, "dedup: add", verdict);
    *verdict = LLMT_DATA_KEEP;
    if (similar)
        *similar = 0;
    uint64_t h = 0;
    size_t hslot = 0;
    if (d->o.exact) {
        if (map_reserve(&d->exact))
            return llmt__err_set(&d->err, LLMT_ERR_OUT_OF_MEMORY,
                                 "dedup: out of memory for the exact hash set");
        h = XXH64(text, len, 0);
        hslot = map_find(&d->exact, h);
        if (d->exact.val[hslot] >= 0) {
            *verdict = LLMT_DATA_EXACT_DUP;
            if (similar)
                *similar = 1;
            return LLMT_OK;
        }
    }
    if (d->o.near) {
        llmt_status s = signature(d, (const unsigned char *)text, len);
        if (s != LLMT_OK)
            return s;
        double best = d->nkept ? best_candidate(d) : -1;
        if (best >= d->o.threshold) {
            *verdict = LLMT_DATA_NEAR_DUP;
            if (similar)
                *similar = best;
            return LLMT_OK;
        }
        s = remember_near(d);
        if (s != LLMT_OK)
            return s;
    }
    if (d->o.exact) {
        d->exact.key[hslot] = h;
        d->exact.val[hslot] = 1;
        d->exact.n++;
    }
    return LLMT_OK;
}
