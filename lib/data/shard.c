/* Writing token shards: our format (header, tokens, document index) and
 * llm.c's. Both go to PATH.tmp first; only a complete, fsynced file is
 * renamed to PATH, so a reader never sees half a shard. Layout in
 * doc/formats/token-shard.md. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "shard_internal.h"

#define WR_BUF_BYTES (1u << 20)   /* tokens are streamed through this */

struct llmt_shard_writer {
    llmt_err err;
    llmt_context *ctx;
    char *path, *tmp;
    int fd;                    /* -1 once closed */
    int finished;
    int failed;                /* a write failed: the file is unusable */
    int32_t vocab_size;
    uint32_t width;
    unsigned char *buf;
    size_t buf_len;
    uint64_t pos;              /* bytes written to fd after the header */
    XXH64_state_t *xxh;        /* of the token bytes */
    int64_t n_tokens;
    uint64_t *docs;            /* start of each document, in tokens */
    size_t n_docs, docs_cap;
};

/* ---- header encoding, shared with dataset.c ---- */

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, sizeof v); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, sizeof v); }

uint64_t llmt__data_shard_header_xxh(const unsigned char *in)
{
    return XXH64(in, SH_OFF_HEADER_XXH, 0);
}

void llmt__data_shard_header_encode(const sh_header *h, unsigned char *out)
{
    memset(out, 0, SH_HEADER_BYTES);
    memcpy(out + SH_OFF_MAGIC, SH_MAGIC, 8);
    put32(out + SH_OFF_VERSION, h->version);
    put32(out + SH_OFF_HEADER_SIZE, h->header_size);
    put32(out + SH_OFF_DTYPE, h->dtype);
    put32(out + SH_OFF_VOCAB, (uint32_t)h->vocab_size);
    put64(out + SH_OFF_NTOKENS, h->n_tokens);
    put64(out + SH_OFF_NDOCS, h->n_docs);
    put64(out + SH_OFF_TOK_OFFSET, h->tok_offset);
    put64(out + SH_OFF_TOK_BYTES, h->tok_bytes);
    put64(out + SH_OFF_IDX_OFFSET, h->idx_offset);
    put64(out + SH_OFF_IDX_BYTES, h->idx_bytes);
    put64(out + SH_OFF_TOK_XXH, h->tok_xxh);
    put64(out + SH_OFF_IDX_XXH, h->idx_xxh);
    put64(out + SH_OFF_HEADER_XXH, llmt__data_shard_header_xxh(out));
}

void llmt__data_shard_header_decode(const unsigned char *in, sh_header *h)
{
    h->version = sh_rd32(in + SH_OFF_VERSION);
    h->header_size = sh_rd32(in + SH_OFF_HEADER_SIZE);
    h->dtype = sh_rd32(in + SH_OFF_DTYPE);
    h->vocab_size = (int32_t)sh_rd32(in + SH_OFF_VOCAB);
    h->n_tokens = sh_rd64(in + SH_OFF_NTOKENS);
    h->n_docs = sh_rd64(in + SH_OFF_NDOCS);
    h->tok_offset = sh_rd64(in + SH_OFF_TOK_OFFSET);
    h->tok_bytes = sh_rd64(in + SH_OFF_TOK_BYTES);
    h->idx_offset = sh_rd64(in + SH_OFF_IDX_OFFSET);
    h->idx_bytes = sh_rd64(in + SH_OFF_IDX_BYTES);
    h->tok_xxh = sh_rd64(in + SH_OFF_TOK_XXH);
    h->idx_xxh = sh_rd64(in + SH_OFF_IDX_XXH);
}

/* ---- atomic files ---- */

static char *str_dup(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = suffix ? strlen(suffix) : 0;
    char *p = malloc(a + b + 1);
    if (p) {
        memcpy(p, s, a);
        if (b)
            memcpy(p + a, suffix, b);
        p[a + b] = '\0';
    }
    return p;
}

/* Write all of buf at the current position, retrying short writes. */
static int write_all(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
    const unsigned char *p = buf;
    while (n) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return 0;
}


/* fsync, close, rename tmp -> path, fsync the directory. Closes fd always. */
static llmt_status commit_file(llmt_err *e, const char *what, int fd,
                               const char *tmp, const char *path)
{
    if (fsync(fd)) {
        int en = errno;
        close(fd);
        return llmt__err_set(e, LLMT_ERR_IO, "%s: fsync %s: %s", what, tmp, strerror(en));
    }
    if (close(fd))
        return llmt__err_set(e, LLMT_ERR_IO, "%s: close %s: %s", what, tmp, strerror(errno));
    if (rename(tmp, path))
        return llmt__err_set(e, LLMT_ERR_IO, "%s: rename %s to %s: %s", what, tmp, path,
                             strerror(errno));
    if (llmt__fsync_parent(path))
        return llmt__err_set(e, LLMT_ERR_IO, "%s: fsync the directory of %s: %s", what,
                             path, strerror(errno));
    return LLMT_OK;
}

/* ---- our format ---- */

LLMT_API llmt_status llmt_shard_writer_create(llmt_context *ctx, const char *path,
                                              int32_t vocab_size,
                                              llmt_shard_writer **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "shard: writer_create", path);
    LLMT__NONNULL(ce, "shard: writer_create", out);
    *out = NULL;
    if (vocab_size < 1)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "shard: %s: vocab_size %d must be at least 1", path,
                             (int)vocab_size);
    if (!*path)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT, "shard: the path is empty");
    llmt_shard_writer *w = calloc(1, sizeof *w);
    if (!w)
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "shard: out of memory");
    w->ctx = ctx;
    w->fd = -1;
    w->vocab_size = vocab_size;
    w->width = vocab_size <= 65536 ? SH_DTYPE_U16 : SH_DTYPE_U32;
    w->path = str_dup(path, NULL);
    w->tmp = str_dup(path, ".tmp");
    w->buf = malloc(WR_BUF_BYTES);
    w->xxh = XXH64_createState();
    if (!w->path || !w->tmp || !w->buf || !w->xxh) {
        llmt_shard_writer_destroy(w);
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "shard: out of memory");
    }
    XXH64_reset(w->xxh, 0);
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        llmt_status s = llmt__err_set(ce, LLMT_ERR_IO, "shard: create %s: %s", w->tmp,
                                      strerror(errno));
        llmt_shard_writer_destroy(w);
        return s;
    }
    /* The header is written last (it holds the counts and checksums); until
     * then its bytes are zero, which no reader accepts. */
    unsigned char zero[SH_HEADER_BYTES] = {0};
    if (write_all(w->fd, zero, sizeof zero)) {
        llmt_status s = llmt__err_set(ce, LLMT_ERR_IO, "shard: write %s: %s", w->tmp,
                                      strerror(errno));
        llmt_shard_writer_destroy(w);
        return s;
    }
    *out = w;
    return LLMT_OK;
}

static llmt_status flush_buf(llmt_shard_writer *w)
{
    if (!w->buf_len)
        return LLMT_OK;
    XXH64_update(w->xxh, w->buf, w->buf_len);
    if (write_all(w->fd, w->buf, w->buf_len)) {
        w->failed = 1;
        return llmt__err_set(&w->err, LLMT_ERR_IO, "shard: write %s at offset %" PRIu64 ": %s",
                             w->tmp, (uint64_t)SH_HEADER_BYTES + w->pos, strerror(errno));
    }
    w->pos += w->buf_len;
    w->buf_len = 0;
    return LLMT_OK;
}

static llmt_status usable(llmt_shard_writer *w)
{
    if (w->finished)
        return llmt__err_set(&w->err, LLMT_ERR_STATE, "shard: %s is already finished",
                             w->path);
    if (w->failed)
        return llmt__err_set(&w->err, LLMT_ERR_STATE,
                             "shard: %s: an earlier write failed; destroy the writer", w->path);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_shard_writer_add(llmt_shard_writer *w, const int32_t *ids, size_t n)
{
    if (!w)
        return LLMT_ERR_NULL_POINTER;
    if (n)
        LLMT__NONNULL(&w->err, "shard: writer_add", ids);
    llmt_status s = usable(w);
    if (s != LLMT_OK)
        return s;
    /* Check the whole document first so a bad id adds nothing. */
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= w->vocab_size)
            return llmt__err_set(&w->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "shard: %s: document %zu, token %zu: id %d is outside "
                                 "[0, %d)", w->path, w->n_docs, i, (int)ids[i],
                                 (int)w->vocab_size);
    if (w->n_docs == w->docs_cap) {
        size_t cap = w->docs_cap ? w->docs_cap * 2 : 1024;
        uint64_t *d = realloc(w->docs, cap * sizeof *d);
        if (!d)
            return llmt__err_set(&w->err, LLMT_ERR_OUT_OF_MEMORY, "shard: out of memory");
        w->docs = d;
        w->docs_cap = cap;
    }
    w->docs[w->n_docs++] = (uint64_t)w->n_tokens;
    size_t per = WR_BUF_BYTES / w->width;
    while (n) {
        size_t room = per - w->buf_len / w->width;
        size_t k = n < room ? n : room;
        if (w->width == SH_DTYPE_U16) {
            uint16_t *d = (uint16_t *)(void *)(w->buf + w->buf_len);
            for (size_t i = 0; i < k; i++)
                d[i] = (uint16_t)ids[i];
        } else {
            memcpy(w->buf + w->buf_len, ids, k * sizeof *ids);
        }
        w->buf_len += k * w->width;
        w->n_tokens += (int64_t)k;
        ids += k;
        n -= k;
        if (w->buf_len == WR_BUF_BYTES && (s = flush_buf(w)) != LLMT_OK)
            return s;
    }
    return LLMT_OK;
}

LLMT_API llmt_status llmt_shard_writer_count(const llmt_shard_writer *w, int64_t *tokens,
                                             int64_t *documents)
{
    if (!w)
        return LLMT_ERR_NULL_POINTER;
    if (tokens)
        *tokens = w->n_tokens;
    if (documents)
        *documents = (int64_t)w->n_docs;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_shard_writer_finish(llmt_shard_writer *w)
{
    if (!w)
        return LLMT_ERR_NULL_POINTER;
    llmt_status s = usable(w);
    if (s != LLMT_OK || (s = flush_buf(w)) != LLMT_OK)
        return s;
    sh_header h;
    memset(&h, 0, sizeof h);
    h.version = SH_VERSION;
    h.header_size = SH_HEADER_BYTES;
    h.dtype = w->width;
    h.vocab_size = w->vocab_size;
    h.n_tokens = (uint64_t)w->n_tokens;
    h.n_docs = w->n_docs;
    h.tok_offset = SH_HEADER_BYTES;
    h.tok_bytes = h.n_tokens * w->width;
    h.idx_offset = sh_align8(h.tok_offset + h.tok_bytes);
    h.idx_bytes = h.n_docs * 8u;
    h.tok_xxh = XXH64_digest(w->xxh);
    h.idx_xxh = XXH64(w->docs, h.idx_bytes, 0);
    unsigned char pad[8] = {0}, hdr[SH_HEADER_BYTES];
    size_t npad = (size_t)(h.idx_offset - h.tok_offset - h.tok_bytes);
    llmt__data_shard_header_encode(&h, hdr);
    if (write_all(w->fd, pad, npad) || (h.idx_bytes && write_all(w->fd, w->docs, h.idx_bytes)) ||
        pwrite_all(w->fd, hdr, sizeof hdr, 0)) {
        w->failed = 1;
        return llmt__err_set(&w->err, LLMT_ERR_IO, "shard: write %s: %s", w->tmp,
                             strerror(errno));
    }
    int fd = w->fd;
    w->fd = -1;
    s = commit_file(&w->err, "shard", fd, w->tmp, w->path);
    if (s != LLMT_OK) {
        w->failed = 1;
        return s;
    }
    w->finished = 1;
    return LLMT_OK;
}

LLMT_API void llmt_shard_writer_destroy(llmt_shard_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    /* Unfinished (or failed): the partial file must not outlive the writer. */
    if (!w->finished && w->tmp)
        unlink(w->tmp);
    if (w->xxh)
        XXH64_freeState(w->xxh);
    free(w->docs);
    free(w->buf);
    free(w->tmp);
    free(w->path);
    free(w);
}

LLMT_API const char *llmt_shard_writer_last_error(const llmt_shard_writer *w)
{
    return w ? w->err.msg : "shard: NULL writer";
}

/* ---- llm.c's format ---- */

LLMT_API llmt_status llmt_shard_write_llmc(llmt_context *ctx, const char *path,
                                           const int32_t *ids, size_t n)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "shard: write_llmc", path);
    if (n)
        LLMT__NONNULL(ce, "shard: write_llmc", ids);
    /* llm.c keeps the count in one int32 of its header. */
    if (n > (size_t)INT32_MAX)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "shard: llm.c file %s: %zu tokens, its header holds at most %d",
                             path, n, INT32_MAX);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] > 65535)
            return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                                 "shard: llm.c file %s: token %zu: id %d does not fit its "
                                 "uint16 tokens", path, i, (int)ids[i]);
    char *tmp = str_dup(path, ".tmp");
    uint16_t *buf = malloc(WR_BUF_BYTES);
    if (!tmp || !buf) {
        free(tmp);
        free(buf);
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "shard: out of memory");
    }
    llmt_status s = LLMT_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        s = llmt__err_set(ce, LLMT_ERR_IO, "shard: create %s: %s", tmp, strerror(errno));
        goto done;
    }
    int32_t header[256] = {0};
    header[0] = LLMC_MAGIC;
    header[1] = LLMC_VERSION;
    header[2] = (int32_t)n;
    int bad = write_all(fd, header, sizeof header);
    size_t per = WR_BUF_BYTES / sizeof *buf;
    for (size_t at = 0; !bad && at < n; at += per) {
        size_t k = n - at < per ? n - at : per;
        for (size_t i = 0; i < k; i++)
            buf[i] = (uint16_t)ids[at + i];
        bad = write_all(fd, buf, k * sizeof *buf);
    }
    if (bad) {
        s = llmt__err_set(ce, LLMT_ERR_IO, "shard: write %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        goto done;
    }
    s = commit_file(ce, "shard", fd, tmp, path);
    if (s != LLMT_OK)
        unlink(tmp);
done:
    free(buf);
    free(tmp);
    return s;
}
