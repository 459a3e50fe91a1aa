/* Byte-level BPE trainer: GPT-2 pre-tokenization, then repeatedly merge the
 * most frequent adjacent pair inside words (ties: smallest left id, then
 * smallest right id). Pair counts are updated incrementally: only the words
 * that hold the merged pair are recounted, found through per-pair word
 * lists, and a max-heap with lazy deletion picks the next pair. */
#include <stdlib.h>
#include <string.h>

#include "tok.h"

typedef struct heap_e {
    int64_t count;
    int32_t a, b;
} heap_e;

typedef struct trainer {
    /* unique words */
    uint64_t *wh;            /* word hash table: (hash) */
    int32_t *wslot;          /* word index, -1 empty */
    size_t wcap;
    const unsigned char **wptr;
    uint32_t *wbytes;
    int64_t *wfreq;
    uint32_t *woff, *wlen;   /* symbols of word w: sym[woff[w] .. +wlen[w]) */
    uint32_t *wstamp;
    size_t nw, wvcap;
    int32_t *sym;
    /* pairs */
    uint64_t *pkey;          /* hash table of pair keys, 0 empty */
    int32_t *pslot;
    size_t pcap;
    int64_t *pcount;
    uint32_t **plist;
    uint32_t *plen, *plcap;
    uint32_t *ptouch;
    int32_t *pa, *pb;
    size_t np, pvcap;
    int32_t *touched;
    size_t ntouched, touched_cap;
    heap_e *heap;
    size_t hn, hcap;
} trainer;

static int heap_before(const heap_e *x, const heap_e *y)
{
    if (x->count != y->count)
        return x->count > y->count;
    if (x->a != y->a)
        return x->a < y->a;
    return x->b < y->b;
}

static int hpush(trainer *T, int64_t count, int32_t a, int32_t b)
{
    if (llmt__tok_grow((void **)&T->heap, &T->hcap, T->hn + 1, sizeof *T->heap))
        return -1;
    heap_e e = {count, a, b};
    size_t i = T->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_before(&e, &T->heap[p]))
            break;
        T->heap[i] = T->heap[p];
        i = p;
    }
    T->heap[i] = e;
    return 0;
}

static heap_e hpop(trainer *T)
{
    heap_e top = T->heap[0], e = T->heap[--T->hn];
    size_t i = 0, n = T->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && heap_before(&T->heap[c + 1], &T->heap[c]))
            c++;
        if (!heap_before(&T->heap[c], &e))
            break;
        T->heap[i] = T->heap[c];
        i = c;
    }
    if (n)
        T->heap[i] = e;
    return top;
}

static int rehash_words(trainer *T)
{
    size_t nc = T->wcap ? T->wcap * 2 : 1 << 14;
    int32_t *ns = malloc(nc * sizeof *ns);
    uint64_t *nh = malloc(nc * sizeof *nh);
    if (!ns || !nh) {
        free(ns);
        free(nh);
        return -1;
    }
    memset(ns, 0xff, nc * sizeof *ns);
    for (size_t i = 0; i < T->wcap; i++) {
        if (T->wslot[i] < 0)
            continue;
        size_t j = T->wh[i] & (nc - 1);
        while (ns[j] >= 0)
            j = (j + 1) & (nc - 1);
        ns[j] = T->wslot[i];
        nh[j] = T->wh[i];
    }
    free(T->wslot);
    free(T->wh);
    T->wslot = ns;
    T->wh = nh;
    T->wcap = nc;
    return 0;
}

static int add_word(trainer *T, const unsigned char *w, size_t len)
{
    if ((T->nw + 1) * 2 > T->wcap && rehash_words(T))
        return -1;
    uint64_t h = llmt__tok_hash_bytes(w, len);
    size_t i = h & (T->wcap - 1);
    for (; T->wslot[i] >= 0; i = (i + 1) & (T->wcap - 1)) {
        int32_t k = T->wslot[i];
        if (T->wh[i] == h && T->wbytes[k] == len && !memcmp(T->wptr[k], w, len)) {
            T->wfreq[k]++;
            return 0;
        }
    }
    if (T->nw == T->wvcap) {
        size_t nc = T->wvcap ? T->wvcap * 2 : 1 << 12;
        const unsigned char **p = realloc(T->wptr, nc * sizeof *p);
        if (!p)
            return -1;
        T->wptr = p;
        uint32_t *q = realloc(T->wbytes, nc * sizeof *q);
        if (!q)
            return -1;
        T->wbytes = q;
        int64_t *f = realloc(T->wfreq, nc * sizeof *f);
        if (!f)
            return -1;
        T->wfreq = f;
        T->wvcap = nc;
    }
    T->wslot[i] = (int32_t)T->nw;
    T->wh[i] = h;
    T->wptr[T->nw] = w;
    T->wbytes[T->nw] = (uint32_t)len;
    T->wfreq[T->nw] = 1;
    T->nw++;
    return 0;
}

/* Index of pair (a, b), created with count 0 when `create`; -1 if absent
 * (or out of memory when creating: -2). */
static int32_t pair_index(trainer *T, int32_t a, int32_t b, int create)
{
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    if (create && (T->np + 1) * 2 > T->pcap) {
        size_t nc = T->pcap ? T->pcap * 2 : 1 << 14;
        uint64_t *nk = calloc(nc, sizeof *nk);
        int32_t *ns = malloc(nc * sizeof *ns);
        if (!nk || !ns) {
            free(nk);
            free(ns);
            return -2;
        }
        for (size_t i = 0; i < T->pcap; i++) {
            if (!T->pkey[i])
                continue;
            size_t j = llmt__tok_mix64(T->pkey[i]) & (nc - 1);
            while (nk[j])
                j = (j + 1) & (nc - 1);
            nk[j] = T->pkey[i];
            ns[j] = T->pslot[i];
        }
        free(T->pkey);
        free(T->pslot);
        T->pkey = nk;
        T->pslot = ns;
        T->pcap = nc;
    }
    if (!T->pcap)
        return -1;
    size_t i = llmt__tok_mix64(key) & (T->pcap - 1);
    for (; T->pkey[i]; i = (i + 1) & (T->pcap - 1))
        if (T->pkey[i] == key)
            return T->pslot[i];
    if (!create)
        return -1;
    if (T->np == T->pvcap) {
        size_t nc = T->pvcap ? T->pvcap * 2 : 1 << 14;
#define GROW_ARR(arr)                                            \
    do {                                                         \
        void *q_ = realloc(T->arr, nc * sizeof *T->arr);         \
        if (!q_)                                                 \
            return -2;                                           \
        T->arr = q_;                                             \
    } while (0)
        GROW_ARR(pcount);
        GROW_ARR(plist);
        GROW_ARR(plen);
        GROW_ARR(plcap);
        GROW_ARR(ptouch);
        GROW_ARR(pa);
        GROW_ARR(pb);
#undef GROW_ARR
        T->pvcap = nc;
    }
    int32_t p = (int32_t)T->np++;
    T->pcount[p] = 0;
    T->plist[p] = NULL;
    T->plen[p] = 0;
    T->plcap[p] = 0;
    T->ptouch[p] = 0;
    T->pa[p] = a;
    T->pb[p] = b;
    T->pkey[i] = key;
    T->pslot[i] = p;
    return p;
}

/* Add `delta` occurrences of (a, b) in word w; record it as touched. */
static int pair_add(trainer *T, int32_t a, int32_t b, int64_t delta, uint32_t w,
                    uint32_t stamp)
{
    int32_t p = pair_index(T, a, b, delta > 0);
    if (p < 0)
        return p == -2 ? -1 : 0;
    T->pcount[p] += delta;
    if (delta > 0 && (T->plen[p] == 0 || T->plist[p][T->plen[p] - 1] != w)) {
        if (T->plen[p] == T->plcap[p]) {
            uint32_t nc = T->plcap[p] ? T->plcap[p] * 2 : 4;
            uint32_t *q = realloc(T->plist[p], nc * sizeof *q);
            if (!q)
                return -1;
            T->plist[p] = q;
            T->plcap[p] = nc;
        }
        T->plist[p][T->plen[p]++] = w;
    }
    if (T->ptouch[p] != stamp) {
        T->ptouch[p] = stamp;
        size_t tc = T->touched_cap;
        if (llmt__tok_grow((void **)&T->touched, &tc, T->ntouched + 1, sizeof(int32_t)))
            return -1;
        T->touched_cap = tc;
        T->touched[T->ntouched++] = p;
    }
    return 0;
}

static void trainer_free(trainer *T)
{
    free(T->wh);
    free(T->wslot);
    free(T->wptr);
    free(T->wbytes);
    free(T->wfreq);
    free(T->woff);
    free(T->wlen);
    free(T->wstamp);
    free(T->sym);
    free(T->pkey);
    free(T->pslot);
    free(T->pcount);
    for (size_t p = 0; p < T->np; p++)
        free(T->plist[p]);
    free(T->plist);
    free(T->plen);
    free(T->plcap);
    free(T->ptouch);
    free(T->pa);
    free(T->pb);
    free(T->touched);
    free(T->heap);
}

/* Learn up to max_merges merges; m gets (left, right, result, rank). */
static llmt_status learn(llmt_err *e, const unsigned char *s, size_t len,
                         int32_t max_merges, tok_merge *m, int32_t *n_merges)
{
    trainer T;
    memset(&T, 0, sizeof T);
    llmt_status st = LLMT_ERR_OUT_OF_MEMORY;
    *n_merges = 0;
    if (rehash_words(&T))
        goto done;
    for (size_t i = 0; i < len;) {
        size_t j = llmt__tok_next_chunk(s, len, i);
        if (add_word(&T, s + i, j - i))
            goto done;
        i = j;
    }
    size_t nsym = 0;
    for (size_t w = 0; w < T.nw; w++)
        nsym += T.wbytes[w];
    T.woff = malloc((T.nw + 1) * sizeof *T.woff);
    T.wlen = malloc((T.nw + 1) * sizeof *T.wlen);
    T.wstamp = calloc(T.nw + 1, sizeof *T.wstamp);
    T.sym = malloc((nsym + 1) * sizeof *T.sym);
    if (!T.woff || !T.wlen || !T.wstamp || !T.sym)
        goto done;
    nsym = 0;
    for (size_t w = 0; w < T.nw; w++) {
        T.woff[w] = (uint32_t)nsym;
        T.wlen[w] = T.wbytes[w];
        for (uint32_t k = 0; k < T.wbytes[w]; k++)
            T.sym[nsym++] = T.wptr[w][k];
        const int32_t *y = T.sym + T.woff[w];
        for (uint32_t k = 0; k + 1 < T.wlen[w]; k++)
            if (pair_add(&T, y[k], y[k + 1], T.wfreq[w], (uint32_t)w, 1))
                goto done;
    }
    for (size_t p = 0; p < T.np; p++)
        if (hpush(&T, T.pcount[p], T.pa[p], T.pb[p]))
            goto done;
    int32_t nm = 0;
    while (nm < max_merges && T.hn) {
        heap_e top = hpop(&T);
        int32_t p = pair_index(&T, top.a, top.b, 0);
        if (p < 0 || T.pcount[p] != top.count)
            continue; /* stale */
        if (top.count < 2)
            break;
        int32_t a = top.a, b = top.b, id = 256 + nm;
        uint32_t stamp = (uint32_t)nm + 2;
        m[nm] = (tok_merge){a, b, id, nm};
        nm++;
        T.ntouched = 0;
        /* the list of p does not grow while we walk it: no merge forms (a, b) */
        uint32_t *list = T.plist[p], nl = T.plen[p];
        for (uint32_t li = 0; li < nl; li++) {
            uint32_t w = list[li];
            if (T.wstamp[w] == stamp)
                continue;
            T.wstamp[w] = stamp;
            int32_t *y = T.sym + T.woff[w];
            uint32_t L = T.wlen[w], k;
            for (k = 0; k + 1 < L; k++)
                if (y[k] == a && y[k + 1] == b)
                    break;
            if (k + 1 >= L)
                continue;
            int64_t f = T.wfreq[w];
            for (k = 0; k + 1 < L; k++)
                if (pair_add(&T, y[k], y[k + 1], -f, w, stamp))
                    goto done;
            uint32_t o = 0;
            for (k = 0; k < L;) {
                if (k + 1 < L && y[k] == a && y[k + 1] == b) {
                    y[o++] = id;
                    k += 2;
                } else {
                    y[o++] = y[k++];
                }
            }
            T.wlen[w] = L = o;
            for (k = 0; k + 1 < L; k++)
                if (pair_add(&T, y[k], y[k + 1], f, w, stamp))
                    goto done;
        }
        free(T.plist[p]);
        T.plist[p] = NULL;
        T.plen[p] = T.plcap[p] = 0;
        for (size_t i = 0; i < T.ntouched; i++) {
            int32_t q = T.touched[i];
            if (T.pcount[q] > 0 && hpush(&T, T.pcount[q], T.pa[q], T.pb[q]))
                goto done;
        }
    }
    *n_merges = nm;
    st = LLMT_OK;
done:
    trainer_free(&T);
    if (st != LLMT_OK)
        llmt__err_set(e, st, "tokenizer: train_bpe: out of memory");
    return st;
}

/* Build a BPE tokenizer from merges whose results are 256, 257, ... */
llmt_status llmt__tok_from_merges(llmt_err *ce, llmt_context *ctx, tok_merge *m,
                                  int32_t nm, llmt_tokenizer **out)
{
    llmt_tokenizer *t = NULL;
    llmt_status s = llmt__tok_new(ce, ctx, &t);
    if (s != LLMT_OK) {
        free(m);
        return s;
    }
    t->kind = TOK_KIND_BPE;
    int32_t V = 256 + nm + 1;
    uint32_t *off = malloc(((size_t)V + 1) * sizeof *off);
    uint32_t *len = malloc((size_t)V * sizeof *len);
    size_t total = 256 + sizeof TOK_EOT_TEXT;
    if (off && len) {
        for (int32_t i = 0; i < 256; i++)
            len[i] = 1;
        for (int32_t k = 0; k < nm; k++) {
            len[256 + k] = len[m[k].left] + len[m[k].right];
            total += len[256 + k];
        }
    }
    unsigned char *blob = off && len && total < UINT32_MAX ? malloc(total) : NULL;
    if (!blob) {
        free(off), free(len), free(m);
        llmt_tokenizer_destroy(t);
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    uint32_t q = 0;
    for (int32_t i = 0; i < 256; i++) {
        off[i] = q;
        blob[q++] = (unsigned char)i;
    }
    for (int32_t k = 0; k < nm; k++) {
        off[256 + k] = q;
        uint32_t la = len[m[k].left], lb = len[m[k].right];
        memcpy(blob + q, blob + off[m[k].left], la);
        memcpy(blob + q + la, blob + off[m[k].right], lb);
        q += la + lb;
    }
    off[V - 1] = q;
    memcpy(blob + q, TOK_EOT_TEXT, sizeof TOK_EOT_TEXT - 1);
    q += sizeof TOK_EOT_TEXT - 1;
    off[V] = q;
    free(len);
    s = llmt__tok_set_vocab(t, V, off, blob, V - 1);
    if (s == LLMT_OK)
        s = llmt__tok_set_merges(t, m, nm);
    else
        free(m);
    if (s != LLMT_OK) {
        llmt__err_forward(ce, &t->err, NULL);
        llmt_tokenizer_destroy(t);
        return s;
    }
    *out = t;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_tokenizer_train_bpe(llmt_context *ctx, const char *text,
                                              size_t len, int32_t vocab_size,
                                              llmt_tokenizer **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "tokenizer: train_bpe", out);
    *out = NULL;
    if (!text && len)
        return llmt__err_set(ce, LLMT_ERR_NULL_POINTER, "tokenizer: train_bpe: text is NULL");
    if (vocab_size < 257 || vocab_size > (1 << 24))
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "tokenizer: train_bpe: vocab_size %d outside [257, 2^24]",
                             (int)vocab_size);
    if (len > UINT32_MAX / 2)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "tokenizer: train_bpe: corpus of %zu bytes is too large "
                             "(at most 2 GiB)", len);
    int32_t max = vocab_size - 257, nm = 0;
    tok_merge *m = malloc(((size_t)max + 1) * sizeof *m);
    if (!m)
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    llmt_status s = learn(ce, (const unsigned char *)text, len, max, m, &nm);
    if (s != LLMT_OK) {
        free(m);
        return s;
    }
    return llmt__tok_from_merges(ce, ctx, m, nm, out);
}
