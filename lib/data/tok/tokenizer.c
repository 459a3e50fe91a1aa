/* Tokenizer handle, byte-level BPE encoding with a word cache, decoding. */
#include <stdlib.h>
#include <string.h>

#include "tok.h"

#define CACHE_MAX_ENTRIES (1u << 20) /* cleared when full */
#define CACHE_MAX_WORD 256           /* longer chunks are not cached */
#define CACHE_MAX_BYTES (64u << 20)  /* keys + ids; cleared beyond */

uint64_t llmt__tok_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

uint64_t llmt__tok_hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = llmt__tok_mix64(h ^ v) + 0x632be59bd9b4e019ULL;
        p += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, p, n);
    h = llmt__tok_mix64(h ^ v ^ ((uint64_t)n << 56));
    return h ? h : 1;
}

llmt_status llmt__tok_new(llmt_err *ce, llmt_context *ctx, llmt_tokenizer **out)
{
    llmt_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    t->ctx = ctx;
    t->eot = -1;
    *out = t;
    return LLMT_OK;
}

llmt_status llmt__tok_set_vocab(llmt_tokenizer *t, int32_t vocab_size,
                                uint32_t *off, unsigned char *blob, int32_t eot)
{
    t->vocab_size = vocab_size;
    t->tok_off = off;
    t->tok_blob = blob;
    t->eot = eot;
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    for (int32_t i = 0; i < vocab_size; i++) {
        if (i == eot || off[i + 1] - off[i] != 1)
            continue;
        unsigned b = blob[off[i]];
        if (t->byte_id[b] >= 0)
            return llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                                 "tokenizer: tokens %d and %d are both byte 0x%02x",
                                 (int)t->byte_id[b], (int)i, b);
        t->byte_id[b] = i;
    }
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0)
            return llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                                 "tokenizer: no token for byte 0x%02x", b);
    return LLMT_OK;
}

static size_t hslot(uint64_t key, size_t cap)
{
    return (size_t)llmt__tok_mix64(key) & (cap - 1);
}

const tok_hent *llmt__tok_find_merge(const llmt_tokenizer *t, int32_t left, int32_t right)
{
    if (!t->hcap)
        return NULL;
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    for (size_t i = hslot(key, t->hcap);; i = (i + 1) & (t->hcap - 1)) {
        const tok_hent *e = &t->htab[i];
        if (e->key == key)
            return e;
        if (!e->key)
            return NULL;
    }
}

llmt_status llmt__tok_set_merges(llmt_tokenizer *t, tok_merge *m, int32_t n)
{
    t->merges = m;
    t->n_merges = n;
    size_t cap = 16;
    while (cap < (size_t)n * 2 + 2)
        cap *= 2;
    t->htab = calloc(cap, sizeof *t->htab);
    if (!t->htab)
        return llmt__err_set(&t->err, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    t->hcap = cap;
    const uint32_t *off = t->tok_off;
    for (int32_t k = 0; k < n; k++) {
        tok_merge *e = &m[k];
        int32_t V = t->vocab_size;
        if (e->left < 0 || e->left >= V || e->right < 0 || e->right >= V ||
            e->result < 0 || e->result >= V || e->left == t->eot ||
            e->right == t->eot || e->result == t->eot)
            return llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                                 "tokenizer: merge %d (%d %d -> %d) has an id out of range",
                                 (int)k, (int)e->left, (int)e->right, (int)e->result);
        if (k > 0 && e->rank < m[k - 1].rank)
            return llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                                 "tokenizer: merge %d is not in rank order", (int)k);
        uint32_t ll = off[e->left + 1] - off[e->left];
        uint32_t rl = off[e->right + 1] - off[e->right];
        if (off[e->result + 1] - off[e->result] != ll + rl ||
            memcmp(t->tok_blob + off[e->result], t->tok_blob + off[e->left], ll) ||
            memcmp(t->tok_blob + off[e->result] + ll, t->tok_blob + off[e->right], rl))
            return llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                                 "tokenizer: merge %d: token %d is not token %d + token %d",
                                 (int)k, (int)e->result, (int)e->left, (int)e->right);
        uint64_t key = (((uint64_t)(uint32_t)e->left << 32) | (uint32_t)e->right) + 1;
        size_t i = hslot(key, cap);
        while (t->htab[i].key && t->htab[i].key != key)
            i = (i + 1) & (cap - 1);
        if (t->htab[i].key)
            return llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                                 "tokenizer: merge %d repeats the pair %d %d", (int)k,
                                 (int)e->left, (int)e->right);
        t->htab[i].key = key;
        t->htab[i].rank = e->rank;
        t->htab[i].result = e->result;
    }
    return LLMT_OK;
}

/* ---- BPE of one word ---------------------------------------------------- */

int llmt__tok_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int heap_less(const tok_heap_entry *a, const tok_heap_entry *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(tok_heap_entry *h, size_t *n, tok_heap_entry e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static tok_heap_entry heap_pop(tok_heap_entry *h, size_t *n)
{
    tok_heap_entry top = h[0], e = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c]))
            c++;
        if (!heap_less(&h[c], &e))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = e;
    return top;
}

/* Push the pair starting at symbol p if it merges. */
static int push_pair(llmt_tokenizer *t, size_t *hn, int32_t p)
{
    if (p < 0)
        return 0;
    int32_t q = t->w_next[p];
    if (q < 0)
        return 0;
    const tok_hent *h = llmt__tok_find_merge(t, t->w_tok[p], t->w_tok[q]);
    if (!h)
        return 0;
    if (llmt__tok_grow((void **)&t->w_heap, &t->heap_cap, *hn + 1, sizeof *t->w_heap))
        return -1;
    tok_heap_entry e = {h->rank, p, t->w_tok[p], t->w_tok[q]};
    heap_push(t->w_heap, hn, e);
    return 0;
}

static int valid(const llmt_tokenizer *t, const tok_heap_entry *e)
{
    int32_t q = t->w_next[e->pos];
    return t->w_tok[e->pos] == e->left && q >= 0 && t->w_tok[q] == e->right;
}

static int cmp_pos(const void *a, const void *b)
{
    const tok_heap_entry *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* The reference encoder's loop: take the lowest rank among the word's
 * pairs (ties, which only aliases produce: the last such pair in the word),
 * merge every occurrence of that pair left to right, repeat. With a heap:
 * pop every entry of the lowest rank, keep the valid ones, merge those of
 * the chosen pair in word order, then push the pairs the merges formed. */
long llmt__tok_bpe_word(llmt_tokenizer *t, const unsigned char *w, size_t len,
                        int32_t *out)
{
    if (len == 1) {
        out[0] = t->byte_id[w[0]];
        return 1;
    }
    if (llmt__tok_grow((void **)&t->w_tok, &t->w_cap, len, sizeof(int32_t)))
        return -1;
    size_t cap = t->w_cap;
    int32_t *np = realloc(t->w_prev, cap * sizeof *np);
    if (!np)
        return -1;
    t->w_prev = np;
    int32_t *nn = realloc(t->w_next, cap * sizeof *nn);
    if (!nn)
        return -1;
    t->w_next = nn;
    for (size_t i = 0; i < len; i++) {
        t->w_tok[i] = t->byte_id[w[i]];
        t->w_prev[i] = (int32_t)i - 1;
        t->w_next[i] = i + 1 < len ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < len; i++)
        if (push_pair(t, &hn, (int32_t)i))
            return -1;
    while (hn) {
        int32_t rank = t->w_heap[0].rank;
        size_t rn = 0;
        while (hn && t->w_heap[0].rank == rank) {
            tok_heap_entry e = heap_pop(t->w_heap, &hn);
            if (!valid(t, &e))
                continue;
            if (llmt__tok_grow((void **)&t->w_round, &t->round_cap, rn + 1, sizeof e))
                return -1;
            t->w_round[rn++] = e;
        }
        if (!rn)
            continue;
        if (rn > 16) {
            qsort(t->w_round, rn, sizeof *t->w_round, cmp_pos);
        } else {
            for (size_t i = 1; i < rn; i++) {
                tok_heap_entry e = t->w_round[i];
                size_t j = i;
                for (; j > 0 && t->w_round[j - 1].pos > e.pos; j--)
                    t->w_round[j] = t->w_round[j - 1];
                t->w_round[j] = e;
            }
        }
        int32_t cl = t->w_round[rn - 1].left, cr = t->w_round[rn - 1].right;
        int32_t result = llmt__tok_find_merge(t, cl, cr)->result;
        size_t nm = 0; /* merged positions, compacted to the front */
        for (size_t i = 0; i < rn; i++) {
            tok_heap_entry e = t->w_round[i];
            if (i > 0 && e.pos == t->w_round[i - 1].pos &&
                e.left == t->w_round[i - 1].left && e.right == t->w_round[i - 1].right)
                continue;
            if (e.left != cl || e.right != cr) {
                /* another pair of this rank (an alias): next round */
                if (llmt__tok_grow((void **)&t->w_heap, &t->heap_cap, hn + 1, sizeof e))
                    return -1;
                heap_push(t->w_heap, &hn, e);
                continue;
            }
            if (!valid(t, &e))
                continue;
            int32_t p = e.pos, q = t->w_next[p];
            t->w_tok[p] = result;
            t->w_next[p] = t->w_next[q];
            if (t->w_next[q] >= 0)
                t->w_prev[t->w_next[q]] = p;
            t->w_tok[q] = -1;
            t->w_round[nm++].pos = p;
        }
        for (size_t i = 0; i < nm; i++) {
            int32_t p = t->w_round[i].pos;
            if (push_pair(t, &hn, t->w_prev[p]) || push_pair(t, &hn, p))
                return -1;
        }
    }
    long n = 0;
    for (int32_t p = 0; p >= 0; p = t->w_next[p])
        out[n++] = t->w_tok[p];
    return n;
}

/* ---- encode cache ------------------------------------------------------- */

static void cache_clear(llmt_tokenizer *t)
{
    if (t->cache)
        memset(t->cache, 0, t->cache_cap * sizeof *t->cache);
    t->cache_count = 0;
    t->ckeys_len = 0;
    t->cids_len = 0;
}

static const tok_cache_entry *cache_find(const llmt_tokenizer *t, uint64_t h,
                                         const unsigned char *w, size_t len)
{
    if (!t->cache_cap)
        return NULL;
    for (size_t i = h & (t->cache_cap - 1);; i = (i + 1) & (t->cache_cap - 1)) {
        const tok_cache_entry *e = &t->cache[i];
        if (!e->hash)
            return NULL;
        if (e->hash == h && e->key_len == len && !memcmp(t->ckeys + e->key_off, w, len))
            return e;
    }
}

/* Best effort: a failed allocation only means the word is not cached. */
static void cache_put(llmt_tokenizer *t, uint64_t h, const unsigned char *w,
                      size_t len, const int32_t *ids, size_t n)
{
    if (t->ckeys_len + t->cids_len * sizeof(int32_t) > CACHE_MAX_BYTES)
        cache_clear(t);
    if (t->cache_count + 1 > t->cache_cap / 2) {
        if (t->cache_cap >= CACHE_MAX_ENTRIES) {
            cache_clear(t);
        } else {
            size_t nc = t->cache_cap ? t->cache_cap * 2 : 4096;
            tok_cache_entry *nt = calloc(nc, sizeof *nt);
            if (!nt)
                return;
            for (size_t i = 0; i < t->cache_cap; i++) {
                tok_cache_entry *e = &t->cache[i];
                if (!e->hash)
                    continue;
                size_t j = e->hash & (nc - 1);
                while (nt[j].hash)
                    j = (j + 1) & (nc - 1);
                nt[j] = *e;
            }
            free(t->cache);
            t->cache = nt;
            t->cache_cap = nc;
        }
    }
    if (llmt__tok_grow((void **)&t->ckeys, &t->ckeys_cap, t->ckeys_len + len, 1) ||
        llmt__tok_grow((void **)&t->cids, &t->cids_cap, t->cids_len + n, sizeof(int32_t)))
        return;
    size_t i = h & (t->cache_cap - 1);
    while (t->cache[i].hash)
        i = (i + 1) & (t->cache_cap - 1);
    tok_cache_entry *e = &t->cache[i];
    e->hash = h;
    e->key_off = (uint32_t)t->ckeys_len;
    e->key_len = (uint32_t)len;
    e->ids_off = (uint32_t)t->cids_len;
    e->n_ids = (uint32_t)n;
    memcpy(t->ckeys + t->ckeys_len, w, len);
    memcpy(t->cids + t->cids_len, ids, n * sizeof *ids);
    t->ckeys_len += len;
    t->cids_len += n;
    t->cache_count++;
}

/* ---- public API --------------------------------------------------------- */

LLMT_API llmt_status llmt_tokenizer_encode(llmt_tokenizer *t, const char *text,
                                           size_t len, int32_t *ids, size_t cap,
                                           size_t *n_out)
{
    if (!t)
        return LLMT_ERR_NULL_POINTER;
    if (!n_out || (!text && len))
        return llmt__err_set(&t->err, LLMT_ERR_NULL_POINTER,
                             "tokenizer: encode: %s is NULL", n_out ? "text" : "n_out");
    const unsigned char *s = (const unsigned char *)text;
    size_t n = 0;
    if (t->n_merges == 0) {
        n = len;
        if (ids && n <= cap)
            for (size_t i = 0; i < len; i++)
                ids[i] = t->byte_id[s[i]];
    } else {
        size_t i = 0;
        while (i < len) {
            size_t j = llmt__tok_next_chunk(s, len, i);
            size_t wl = j - i;
            const int32_t *wids;
            size_t k;
            uint64_t h = 0;
            const tok_cache_entry *e = NULL;
            if (wl == 1) {
                if (ids && n < cap)
                    ids[n] = t->byte_id[s[i]];
                n++;
                i = j;
                continue;
            }
            if (wl <= CACHE_MAX_WORD) {
                h = llmt__tok_hash_bytes(s + i, wl);
                e = cache_find(t, h, s + i, wl);
            }
            if (e) {
                wids = t->cids + e->ids_off;
                k = e->n_ids;
            } else {
                long r = -1;
                if (!llmt__tok_grow((void **)&t->w_out, &t->out_cap, wl, sizeof(int32_t)))
                    r = llmt__tok_bpe_word(t, s + i, wl, t->w_out);
                if (r < 0)
                    return llmt__err_set(&t->err, LLMT_ERR_OUT_OF_MEMORY,
                                         "tokenizer: encode: out of memory at byte %zu", i);
                wids = t->w_out;
                k = (size_t)r;
                if (wl <= CACHE_MAX_WORD)
                    cache_put(t, h, s + i, wl, wids, k);
            }
            if (ids && n + k <= cap)
                memcpy(ids + n, wids, k * sizeof *ids);
            n += k;
            i = j;
        }
    }
    *n_out = n;
    if (ids && n > cap)
        return llmt__err_set(&t->err, LLMT_ERR_BUFFER_TOO_SMALL,
                             "tokenizer: encode: %zu ids do not fit in %zu", n, cap);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_tokenizer_decode(llmt_tokenizer *t, const int32_t *ids,
                                           size_t n, char *buf, size_t cap,
                                           size_t *len_out)
{
    if (!t)
        return LLMT_ERR_NULL_POINTER;
    if (!len_out || (!ids && n))
        return llmt__err_set(&t->err, LLMT_ERR_NULL_POINTER,
                             "tokenizer: decode: %s is NULL", len_out ? "ids" : "len_out");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->vocab_size)
            return llmt__err_set(&t->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "tokenizer: decode: id %ld at position %zu is outside "
                                 "[0, %d)", (long)id, i, (int)t->vocab_size);
        uint32_t a = t->tok_off[id], l = t->tok_off[id + 1] - a;
        if (buf && total + l <= cap)
            memcpy(buf + total, t->tok_blob + a, l);
        total += l;
    }
    *len_out = total;
    if (buf && total > cap)
        return llmt__err_set(&t->err, LLMT_ERR_BUFFER_TOO_SMALL,
                             "tokenizer: decode: %zu bytes do not fit in %zu", total, cap);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_tokenizer_vocab_size(const llmt_tokenizer *t, int32_t *out)
{
    if (!t)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&t->err, "tokenizer: vocab_size", out);
    *out = t->vocab_size;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_tokenizer_eot(const llmt_tokenizer *t, int32_t *out)
{
    if (!t)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&t->err, "tokenizer: eot", out);
    *out = t->eot;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_tokenizer_token_bytes(const llmt_tokenizer *t, int32_t id,
                                                char *buf, size_t cap, size_t *len_out)
{
    if (!t)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = (llmt_err *)&t->err;
    LLMT__NONNULL(e, "tokenizer: token_bytes", len_out);
    if (id < 0 || id >= t->vocab_size)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "tokenizer: token_bytes: id %ld is outside [0, %d)", (long)id,
                             (int)t->vocab_size);
    uint32_t a = t->tok_off[id], l = t->tok_off[id + 1] - a;
    *len_out = l;
    if (!buf)
        return LLMT_OK;
    if (cap < l)
        return llmt__err_set(e, LLMT_ERR_BUFFER_TOO_SMALL,
                             "tokenizer: token_bytes: %lu bytes do not fit in %zu",
                             (unsigned long)l, cap);
    memcpy(buf, t->tok_blob + a, l);
    return LLMT_OK;
}

static void *dup_mem(const void *p, size_t n)
{
    void *q = malloc(n ? n : 1);
    if (q && n)
        memcpy(q, p, n);
    return q;
}

LLMT_API llmt_status llmt_tokenizer_clone(llmt_context *ctx, const llmt_tokenizer *t,
                                          llmt_tokenizer **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "tokenizer: clone", out);
    *out = NULL;
    if (!t)
        return llmt__err_set(ce, LLMT_ERR_NULL_POINTER, "tokenizer: clone: NULL handle");
    llmt_tokenizer *c = calloc(1, sizeof *c);
    if (!c)
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    c->ctx = ctx;
    c->kind = t->kind;
    c->vocab_size = t->vocab_size;
    c->eot = t->eot;
    memcpy(c->byte_id, t->byte_id, sizeof c->byte_id);
    size_t V = (size_t)t->vocab_size;
    c->tok_off = dup_mem(t->tok_off, (V + 1) * sizeof *t->tok_off);
    c->tok_blob = dup_mem(t->tok_blob, t->tok_off[V]);
    c->merges = dup_mem(t->merges, (size_t)t->n_merges * sizeof *t->merges);
    c->n_merges = t->n_merges;
    c->hcap = t->hcap;
    c->htab = dup_mem(t->htab, t->hcap * sizeof *t->htab);
    if (!c->tok_off || !c->tok_blob || !c->merges || (t->hcap && !c->htab)) {
        llmt_tokenizer_destroy(c);
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    *out = c;
    return LLMT_OK;
}

LLMT_API void llmt_tokenizer_destroy(llmt_tokenizer *t)
{
    if (!t)
        return;
    free(t->tok_off);
    free(t->tok_blob);
    free(t->merges);
    free(t->htab);
    free(t->cache);
    free(t->ckeys);
    free(t->cids);
    free(t->w_tok);
    free(t->w_prev);
    free(t->w_next);
    free(t->w_heap);
    free(t->w_round);
    free(t->w_out);
    free(t);
}

LLMT_API const char *llmt_tokenizer_last_error(const llmt_tokenizer *t)
{
    return t ? t->err.msg : "tokenizer: NULL handle";
}

LLMT_API llmt_status llmt_tokenizer_create_bytes(llmt_context *ctx, llmt_tokenizer **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "tokenizer: create_bytes", out);
    *out = NULL;
    llmt_tokenizer *t = NULL;
    llmt_status s = llmt__tok_new(ce, ctx, &t);
    if (s != LLMT_OK)
        return s;
    t->kind = TOK_KIND_BYTES;
    uint32_t *off = malloc(258 * sizeof *off);
    unsigned char *blob = malloc(256 + sizeof TOK_EOT_TEXT);
    if (!off || !blob) {
        free(off);
        free(blob);
        llmt_tokenizer_destroy(t);
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    for (int i = 0; i < 256; i++) {
        off[i] = (uint32_t)i;
        blob[i] = (unsigned char)i;
    }
    off[256] = 256;
    memcpy(blob + 256, TOK_EOT_TEXT, sizeof TOK_EOT_TEXT - 1);
    off[257] = 256 + sizeof TOK_EOT_TEXT - 1;
    s = llmt__tok_set_vocab(t, 257, off, blob, 256);
    if (s != LLMT_OK) {
        llmt__err_forward(ce, &t->err, NULL);
        llmt_tokenizer_destroy(t);
        return s;
    }
    *out = t;
    return LLMT_OK;
}
