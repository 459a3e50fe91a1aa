/* Our tokenizer file: one text file, see doc/tokenizers.md.
 *   llmtrain-tokenizer 1
 *   kind bpe|gpt2|bytes
 *   vocab_size V
 *   eot E
 *   tokens V            then V lines: the bytes of token i in hex
 *   merges M            then M lines: left right result rank
 *   end */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tok.h"

static const char *kind_name[] = {"bytes", "gpt2", "bpe"};

/* llm.c's tokenizer.bin starts with this int32 (llmc/tokenizer.h). */
#define LLMC_TOKENIZER_MAGIC 20240328

LLMT_API llmt_status llmt_tokenizer_save(llmt_tokenizer *t, const char *path)
{
    if (!t)
        return LLMT_ERR_NULL_POINTER;
    if (!path)
        return llmt__err_set(&t->err, LLMT_ERR_NULL_POINTER, "tokenizer: save: path is NULL");
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 16);
    if (!tmp)
        return llmt__err_set(&t->err, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    snprintf(tmp, pl + 16, "%s.tmp%d", path, (int)getpid() % 100000);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        llmt_status s = llmt__err_set(&t->err, LLMT_ERR_IO, "tokenizer: cannot create %s: %s",
                                      tmp, strerror(errno));
        free(tmp);
        return s;
    }
    static const char hex[] = "0123456789abcdef";
    fprintf(f, "llmtrain-tokenizer 1\nkind %s\nvocab_size %d\neot %d\ntokens %d\n",
            kind_name[t->kind], (int)t->vocab_size, (int)t->eot, (int)t->vocab_size);
    for (int32_t i = 0; i < t->vocab_size; i++) {
        for (uint32_t k = t->tok_off[i]; k < t->tok_off[i + 1]; k++) {
            fputc(hex[t->tok_blob[k] >> 4], f);
            fputc(hex[t->tok_blob[k] & 15], f);
        }
        fputc('\n', f);
    }
    fprintf(f, "merges %d\n", (int)t->n_merges);
    for (int32_t k = 0; k < t->n_merges; k++)
        fprintf(f, "%d %d %d %d\n", (int)t->merges[k].left, (int)t->merges[k].right,
                (int)t->merges[k].result, (int)t->merges[k].rank);
    fprintf(f, "end\n");
    int bad = ferror(f);
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        llmt_status s = llmt__err_set(&t->err, LLMT_ERR_IO, "tokenizer: cannot write %s: %s",
                                      path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return s;
    }
    free(tmp);
    return LLMT_OK;
}

typedef struct reader {
    const char *path;
    char *p, *end;
    long line;
    llmt_err *e;
} reader;

/* Next line (without '\n'), NUL-terminated in place; NULL at the end. */
static char *next_line(reader *r)
{
    if (r->p >= r->end)
        return NULL;
    char *l = r->p, *nl = memchr(l, '\n', (size_t)(r->end - l));
    if (nl) {
        *nl = 0;
        r->p = nl + 1;
    } else {
        r->p = r->end;
    }
    r->line++;
    return l;
}

static llmt_status bad(reader *r, const char *what)
{
    return llmt__err_set(r->e, LLMT_ERR_FORMAT, "tokenizer: %s: line %ld: %s", r->path,
                         r->line, what);
}

/* "key N" with 0 <= N <= max */
static llmt_status key_int(reader *r, const char *key, long max, long *out)
{
    char *l = next_line(r);
    size_t kl = strlen(key);
    if (!l)
        return llmt__err_set(r->e, LLMT_ERR_FORMAT,
                             "tokenizer: %s: truncated: expected \"%s\" at line %ld",
                             r->path, key, r->line + 1);
    char *end;
    if (strncmp(l, key, kl) || l[kl] != ' ')
        goto fail;
    errno = 0;
    long v = strtol(l + kl + 1, &end, 10);
    if (errno || *end || end == l + kl + 1 || v < 0 || v > max)
        goto fail;
    *out = v;
    return LLMT_OK;
fail:
    llmt__err_set(r->e, LLMT_ERR_FORMAT,
                  "tokenizer: %s: line %ld: expected \"%s N\" with 0 <= N <= %ld", r->path,
                  r->line, key, max);
    return LLMT_ERR_FORMAT;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

LLMT_API llmt_status llmt_tokenizer_load(llmt_context *ctx, const char *path,
                                         llmt_tokenizer **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "tokenizer: load", out);
    *out = NULL;
    if (!path)
        return llmt__err_set(ce, LLMT_ERR_NULL_POINTER, "tokenizer: load: path is NULL");
    char *buf;
    size_t len;
    llmt_status s = llmt__tok_read_file(ce, path, &buf, &len);
    if (s != LLMT_OK)
        return s;
    llmt_tokenizer *t = NULL;
    uint32_t *off = NULL;
    unsigned char *blob = NULL;
    tok_merge *m = NULL;
    reader r = {path, buf, buf + len, 0, ce};
    int32_t magic = 0;
    if (len >= 4)
        memcpy(&magic, buf, sizeof magic);
    if (magic == LLMC_TOKENIZER_MAGIC) {
        s = llmt__err_set(ce, LLMT_ERR_FORMAT,
                          "tokenizer: %s is llm.c's tokenizer.bin (magic %d): it holds "
                          "only the token bytes, not the merges needed to encode; load "
                          "GPT-2's encoder.json and vocab.bpe instead (gpt2:DIR)",
                          path, LLMC_TOKENIZER_MAGIC);
        goto fail;
    }
    const char *nul = memchr(buf, 0, len);
    if (nul) {
        /* A NUL would end a line early under the string functions below:
         * the rest of that line would be dropped unseen. */
        long line = 1;
        for (const char *c = buf; c < nul; c++)
            line += *c == '\n';
        s = llmt__err_set(ce, LLMT_ERR_FORMAT,
                          "tokenizer: %s: line %ld: NUL byte at offset "
                          "%zu (a text file has none)",
                          path, line, (size_t)(nul - buf));
        goto fail;
    }
    char *l = next_line(&r);
    if (!l || strncmp(l, "llmtrain-tokenizer ", 19)) {
        s = llmt__err_set(ce, LLMT_ERR_FORMAT,
                          "tokenizer: %s: not a llmtrain tokenizer file (bad magic at "
                          "line 1)", path);
        goto fail;
    }
    if (strcmp(l + 19, "1")) {
        s = llmt__err_set(ce, LLMT_ERR_VERSION,
                          "tokenizer: %s: version %.16s is not supported (this library "
                          "reads version 1)", path, l + 19);
        goto fail;
    }
    l = next_line(&r);
    int kind = -1;
    for (int k = 0; l && k < 3; k++)
        if (!strncmp(l, "kind ", 5) && !strcmp(l + 5, kind_name[k]))
            kind = k;
    if (kind < 0) {
        s = bad(&r, "expected \"kind bytes|gpt2|bpe\"");
        goto fail;
    }
    long V, eot, nt, nm;
    if ((s = key_int(&r, "vocab_size", 1 << 24, &V)) || (s = key_int(&r, "eot", V - 1, &eot)) ||
        (s = key_int(&r, "tokens", V, &nt)))
        goto fail;
    if (nt != V || V < 257) {
        s = bad(&r, "the token count must equal vocab_size (at least 257)");
        goto fail;
    }
    /* Counts from the file size before the arrays they size are allocated:
     * a token line has at least 3 bytes ("00\n"). */
    if ((size_t)V > (size_t)(r.end - r.p) / 3) {
        s = bad(&r, "vocab_size needs more token lines than the rest of the file holds");
        goto fail;
    }
    off = malloc(((size_t)V + 1) * sizeof *off);
    blob = malloc(len / 2 + 16);
    if (!off || !blob) {
        s = llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        goto fail;
    }
    size_t q = 0;
    for (long i = 0; i < V; i++) {
        l = next_line(&r);
        if (!l) {
            s = llmt__err_set(ce, LLMT_ERR_FORMAT,
                              "tokenizer: %s: truncated in the tokens (token %ld of %ld)",
                              path, i, V);
            goto fail;
        }
        size_t ll = strlen(l);
        if (ll == 0 || ll % 2) {
            s = bad(&r, "a token must be a non-empty even number of hex digits");
            goto fail;
        }
        off[i] = (uint32_t)q;
        for (size_t k = 0; k < ll; k += 2) {
            int hi = hexval(l[k]), lo = hexval(l[k + 1]);
            if (hi < 0 || lo < 0) {
                s = bad(&r, "not lower-case hex");
                goto fail;
            }
            blob[q++] = (unsigned char)(hi << 4 | lo);
        }
    }
    off[V] = (uint32_t)q;
    if ((s = key_int(&r, "merges", V, &nm)))
        goto fail;
    if ((size_t)nm > (size_t)(r.end - r.p) / 8) { /* "0 0 0 0\n" */
        s = bad(&r, "the merge count needs more lines than the rest of the file holds");
        goto fail;
    }
    m = malloc(((size_t)nm + 1) * sizeof *m);
    if (!m) {
        s = llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        goto fail;
    }
    for (long k = 0; k < nm; k++) {
        l = next_line(&r);
        long v[4];
        char *p = l;
        int ok = l != NULL;
        for (int j = 0; ok && j < 4; j++) {
            char *end;
            errno = 0;
            v[j] = strtol(p, &end, 10);
            ok = !errno && end != p && v[j] >= 0 && v[j] < V &&
                 (j == 3 ? *end == 0 : *end == ' ');
            p = end + 1;
        }
        if (!ok) {
            s = l ? bad(&r, "expected \"left right result rank\" with ids < vocab_size")
                  : llmt__err_set(ce, LLMT_ERR_FORMAT,
                                  "tokenizer: %s: truncated in the merges (merge %ld of %ld)",
                                  path, k, nm);
            goto fail;
        }
        m[k] = (tok_merge){(int32_t)v[0], (int32_t)v[1], (int32_t)v[2], (int32_t)v[3]};
    }
    l = next_line(&r);
    if (!l || strcmp(l, "end") || next_line(&r)) {
        s = l ? bad(&r, "expected \"end\" as the last line")
              : llmt__err_set(ce, LLMT_ERR_FORMAT, "tokenizer: %s: truncated: no \"end\" line",
                              path);
        goto fail;
    }
    if ((s = llmt__tok_new(ce, ctx, &t)))
        goto fail;
    t->kind = (tok_kind)kind;
    s = llmt__tok_set_vocab(t, (int32_t)V, off, blob, (int32_t)eot);
    off = NULL;
    blob = NULL;
    if (s == LLMT_OK) {
        s = llmt__tok_set_merges(t, m, (int32_t)nm);
        m = NULL;
    }
    if (s != LLMT_OK) {
        char msg[LLMT_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", t->err.msg + (strncmp(t->err.msg, "tokenizer: ", 11) ? 0 : 11));
        llmt__err_set(ce, s, "tokenizer: %s: %s", path, msg);
        goto fail;
    }
    free(buf);
    *out = t;
    return LLMT_OK;
fail:
    llmt_tokenizer_destroy(t);
    free(off);
    free(blob);
    free(m);
    free(buf);
    return s;
}
