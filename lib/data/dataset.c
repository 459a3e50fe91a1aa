/* A dataset: token shards (ours and llm.c's) mapped read-only. Every header
 * is checked against the file's size before a byte behind it is trusted
 * (llm.c's own loader skips most of this), and every error names the file
 * and the byte offset of the field that is wrong. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "shard_internal.h"

#define FP_EDGE_BYTES 65536u   /* llm.c files: bytes hashed at each end */

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A growing list of paths. */
typedef struct path_list {
    char **v;
    size_t n, cap;
} path_list;

static int list_add(path_list *l, const char *a, const char *b)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    size_t na = strlen(a), nb = b ? strlen(b) : 0;
    char *p = malloc(na + nb + 2);
    if (!p)
        return -1;
    memcpy(p, a, na);
    if (b) {
        p[na] = '/';
        memcpy(p + na + 1, b, nb);
        p[na + 1 + nb] = '\0';
    } else {
        p[na] = '\0';
    }
    l->v[l->n++] = p;
    return 0;
}

static void list_free(path_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

static int is_regular(const char *path)
{
    struct stat st;
    return !stat(path, &st) && S_ISREG(st.st_mode);
}

/* The shard files `path` names: itself, a directory's *.tok and *.bin
 * (PATH.tmp files of unfinished writers end in .tmp and are never taken),
 * or the matches of a glob pattern. */
static llmt_status list_shards(llmt_err *e, const char *path, path_list *l)
{
    struct stat st;
    if (!stat(path, &st)) {
        if (S_ISREG(st.st_mode))
            return list_add(l, path, NULL) ? LLMT_ERR_OUT_OF_MEMORY : LLMT_OK;
        if (!S_ISDIR(st.st_mode))
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "dataset: %s is neither a file nor a directory", path);
        DIR *d = opendir(path);
        if (!d)
            return llmt__err_set(e, LLMT_ERR_IO, "dataset: open directory %s: %s", path,
                                 strerror(errno));
        struct dirent *de;
        llmt_status s = LLMT_OK;
        while (s == LLMT_OK && (de = readdir(d))) {
            if (de->d_name[0] == '.' ||
                !(has_suffix(de->d_name, ".tok") || has_suffix(de->d_name, ".bin")))
                continue;
            if (list_add(l, path, de->d_name))
                s = LLMT_ERR_OUT_OF_MEMORY;
            else if (!is_regular(l->v[l->n - 1]))
                free(l->v[--l->n]);
        }
        closedir(d);
        if (s != LLMT_OK)
            return llmt__err_set(e, s, "dataset: out of memory");
        if (!l->n)
            return llmt__err_set(e, LLMT_ERR_NOT_FOUND,
                                 "dataset: directory %s has no *.tok or *.bin files", path);
        qsort(l->v, l->n, sizeof *l->v, cmp_str);
        return LLMT_OK;
    }
    if (!strpbrk(path, "*?["))
        return llmt__err_set(e, LLMT_ERR_NOT_FOUND, "dataset: %s: %s", path, strerror(errno));
    glob_t g;
    int r = glob(path, 0, NULL, &g);
    if (r == GLOB_NOSPACE)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "dataset: out of memory");
    llmt_status s = LLMT_OK;
    for (size_t i = 0; r == 0 && s == LLMT_OK && i < g.gl_pathc; i++) {
        const char *p = g.gl_pathv[i];
        if (has_suffix(p, ".tmp") || !is_regular(p))
            continue;
        if (list_add(l, p, NULL))
            s = llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "dataset: out of memory");
    }
    if (r == 0)
        globfree(&g);
    if (s == LLMT_OK && !l->n)
        s = llmt__err_set(e, LLMT_ERR_NOT_FOUND,
                          "dataset: the pattern %s matches no shard file", path);
    return s;
}

/* ---- header validation ---- */

static llmt_status bad(llmt_err *e, llmt_status s, const char *path, uint64_t off,
                       const char *fmt, ...) LLMT_PRINTF(5, 6);

static llmt_status bad(llmt_err *e, llmt_status s, const char *path, uint64_t off,
                       const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return llmt__err_set(e, s, "dataset: %s: offset %" PRIu64 ": %s", path, off, msg);
}

static llmt_status check_ours(llmt_err *e, ds_shard *sh)
{
    const char *p = sh->path;
    const unsigned char *m = sh->map;
    uint64_t size = sh->map_len;
    if (size < SH_HEADER_BYTES)
        return bad(e, LLMT_ERR_FORMAT, p, size,
                   "truncated header: the file has %" PRIu64 " bytes, the header needs %u",
                   size, SH_HEADER_BYTES);
    sh_header h;
    llmt__data_shard_header_decode(m, &h);
    if (h.version != SH_VERSION)
        return bad(e, LLMT_ERR_VERSION, p, SH_OFF_VERSION,
                   "format version %" PRIu32 ", this library reads version %u", h.version,
                   SH_VERSION);
    if (h.header_size != SH_HEADER_BYTES)
        return bad(e, LLMT_ERR_FORMAT, p, SH_OFF_HEADER_SIZE,
                   "header size %" PRIu32 ", version 1 has %u", h.header_size,
                   SH_HEADER_BYTES);
    uint64_t hx = sh_rd64(m + SH_OFF_HEADER_XXH), want = llmt__data_shard_header_xxh(m);
    if (hx != want)
        return bad(e, LLMT_ERR_CHECKSUM, p, SH_OFF_HEADER_XXH,
                   "header checksum %016" PRIx64 " does not match the header's bytes "
                   "(%016" PRIx64 "): a header field is corrupt", hx, want);
    if (h.dtype != SH_DTYPE_U16 && h.dtype != SH_DTYPE_U32)
        return bad(e, LLMT_ERR_FORMAT, p, SH_OFF_DTYPE,
                   "dtype %" PRIu32 " is neither 2 (uint16) nor 4 (uint32)", h.dtype);
    if (h.vocab_size < 1 || (h.dtype == SH_DTYPE_U16 && h.vocab_size > 65536))
        return bad(e, LLMT_ERR_FORMAT, p, SH_OFF_VOCAB,
                   "vocab_size %d does not fit dtype %" PRIu32, (int)h.vocab_size, h.dtype);
    /* Counts beyond what a file can hold would overflow the arithmetic. */
    if (h.n_tokens > (UINT64_C(1) << 56))
        return bad(e, LLMT_ERR_FORMAT, p, SH_OFF_NTOKENS, "token count %" PRIu64
                   " is impossible", h.n_tokens);
    if (h.n_docs > (UINT64_C(1) << 56) || (h.n_tokens && !h.n_docs))
        return bad(e, LLMT_ERR_FORMAT, p, SH_OFF_NDOCS, "document count %" PRIu64
                   " with %" PRIu64 " tokens", h.n_docs, h.n_tokens);
    if (h.tok_offset != SH_HEADER_BYTES)
        return bad(e, LLMT_ERR_FORMAT, p, SH_OFF_TOK_OFFSET,
                   "tokens start at %" PRIu64 ", version 1 puts them at %u", h.tok_offset,
                   SH_HEADER_BYTES);
    uint64_t need = h.n_tokens * h.dtype;
    if (h.tok_offset + need > size)
        return bad(e, LLMT_ERR_FORMAT, p, SH_OFF_NTOKENS,
                   "token count %" PRIu64 " needs %" PRIu64 " bytes but the file has %" PRIu64,
                   h.n_tokens, h.tok_offset + need, size);
    if (h.tok_bytes != need)
        return bad(e, LLMT_ERR_FORMAT, p, SH_OFF_TOK_BYTES,
                   "token bytes %" PRIu64 ", but %" PRIu64 " tokens of %" PRIu32
                   " bytes are %" PRIu64, h.tok_bytes, h.n_tokens, h.dtype, need);
    if (h.idx_offset != sh_align8(h.tok_offset + need))
        return bad(e, LLMT_ERR_FORMAT, p, SH_OFF_IDX_OFFSET,
                   "document index at %" PRIu64 ", expected %" PRIu64 " (after the tokens)",
                   h.idx_offset, sh_align8(h.tok_offset + need));
    if (h.idx_bytes != h.n_docs * 8u)
        return bad(e, LLMT_ERR_FORMAT, p, SH_OFF_IDX_BYTES,
                   "index bytes %" PRIu64 ", but %" PRIu64 " documents need %" PRIu64,
                   h.idx_bytes, h.n_docs, h.n_docs * 8u);
    if (h.idx_offset + h.idx_bytes != size)
        return bad(e, LLMT_ERR_FORMAT, p, SH_OFF_NDOCS,
                   "document count %" PRIu64 " needs %" PRIu64 " bytes but the file has %"
                   PRIu64, h.n_docs, h.idx_offset + h.idx_bytes, size);
    for (unsigned i = SH_OFF_RESERVED; i < SH_OFF_HEADER_XXH; i++)
        if (m[i])
            return bad(e, LLMT_ERR_FORMAT, p, i, "reserved header byte is not zero");
    /* The padding before the index is zero: no byte of the file goes
     * unchecked (the checksums cover only the tokens and the index). */
    for (uint64_t i = h.tok_offset + need; i < h.idx_offset; i++)
        if (m[i])
            return bad(e, LLMT_ERR_FORMAT, p, i,
                       "padding byte before the document index is "
                       "not zero");
    /* The index: starts from 0, never decreasing, within the tokens. */
    uint64_t prev = 0;
    for (uint64_t d = 0; d < h.n_docs; d++) {
        uint64_t at = h.idx_offset + d * 8u, v = sh_rd64(m + at);
        if ((d == 0 && v != 0) || v < prev || v > h.n_tokens)
            return bad(e, LLMT_ERR_FORMAT, p, at,
                       "document %" PRIu64 " starts at token %" PRIu64 " (previous %" PRIu64
                       ", %" PRIu64 " tokens)", d, v, prev, h.n_tokens);
        prev = v;
    }
    sh->width = h.dtype;
    sh->vocab_size = h.vocab_size;
    sh->n_tokens = (int64_t)h.n_tokens;
    sh->n_docs = (int64_t)h.n_docs;
    sh->tokens = m + h.tok_offset;
    sh->index = m + h.idx_offset;
    sh->tok_xxh = h.tok_xxh;
    sh->idx_xxh = h.idx_xxh;
    return LLMT_OK;
}

static llmt_status check_llmc(llmt_err *e, ds_shard *sh)
{
    const char *p = sh->path;
    uint64_t size = sh->map_len;
    if (size < LLMC_HEADER_BYTES)
        return bad(e, LLMT_ERR_FORMAT, p, size,
                   "truncated llm.c header: the file has %" PRIu64 " bytes, the header "
                   "needs %u", size, LLMC_HEADER_BYTES);
    int32_t version = (int32_t)sh_rd32(sh->map + 4), n = (int32_t)sh_rd32(sh->map + 8);
    if (version != LLMC_VERSION)
        return bad(e, LLMT_ERR_VERSION, p, 4,
                   "llm.c token file version %d, this library reads version 1 (uint16)",
                   (int)version);
    if (n < 0)
        return bad(e, LLMT_ERR_FORMAT, p, 8, "llm.c token count %d is negative", (int)n);
    uint64_t need = LLMC_HEADER_BYTES + 2u * (uint64_t)n;
    if (need != size)
        return bad(e, LLMT_ERR_FORMAT, p, 8,
                   "token count %d needs %" PRIu64 " bytes but the file has %" PRIu64,
                   (int)n, need, size);
    sh->llmc = 1;
    sh->width = 2;
    sh->vocab_size = 0;
    sh->n_tokens = n;
    sh->n_docs = 1;
    sh->tokens = sh->map + LLMC_HEADER_BYTES;
    return LLMT_OK;
}

/* Largest of n token ids, for each stored width. Sixteen lane maxima in
 * fixed-count loops are vectorised even under -O2's very-cheap cost model
 * (see copy below); one body, instantiated per element type. */
#define DEFINE_MAX_IDS(name, T)                                  \
    static uint32_t name(const T *restrict src, size_t n)        \
    {                                                            \
        T mx[16] = {0};                                          \
        size_t i = 0;                                            \
        for (; i + 16 <= n; i += 16)                             \
            for (size_t k = 0; k < 16; k++)                      \
                mx[k] = src[i + k] > mx[k] ? src[i + k] : mx[k]; \
        uint32_t m = 0;                                          \
        for (; i < n; i++)                                       \
            m = src[i] > m ? src[i] : m;                         \
        for (size_t k = 0; k < 16; k++)                          \
            m = mx[k] > m ? mx[k] : m;                           \
        return m;                                                \
    }
DEFINE_MAX_IDS(max_u16, uint16_t)
DEFINE_MAX_IDS(max_u32, uint32_t)
#undef DEFINE_MAX_IDS

/* Does the shard's vocab_size bound its ids? llm.c files carry no
 * vocabulary (any uint16 may be an id), nor does a full uint16 one. */
static int vocab_checked(const ds_shard *sh)
{
    return sh->vocab_size > 0 && (sh->width == 4 || sh->vocab_size < 65536);
}

/* Index of the first of n tokens at src not below the shard's vocab_size,
 * or -1: one vectorised pass, a second only to find a bad one. */
static int64_t first_out_of_vocab(const ds_shard *sh, const unsigned char *src, size_t n)
{
    uint32_t limit = (uint32_t)sh->vocab_size;
    if (!vocab_checked(sh))
        return -1;
    uint32_t mx = sh->width == 2 ? max_u16((const uint16_t *)(const void *)src, n)
                                 : max_u32((const uint32_t *)(const void *)src, n);
    if (mx < limit)
        return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = sh->width == 2 ? (uint32_t)sh_rd16(src + 2 * i) : sh_rd32(src + 4 * i);
        if (v >= limit)
            return (int64_t)i;
    }
    return -1;
}

static llmt_status verify_shard(llmt_err *e, const ds_shard *sh)
{
    if (sh->llmc)
        return LLMT_OK; /* llm.c files carry no checksum */
    uint64_t tb = (uint64_t)sh->n_tokens * sh->width, ib = (uint64_t)sh->n_docs * 8u;
    uint64_t t = XXH64(sh->tokens, tb, 0);
    if (t != sh->tok_xxh)
        return bad(e, LLMT_ERR_CHECKSUM, sh->path, SH_HEADER_BYTES,
                   "the tokens (%" PRIu64 " bytes) hash to %016" PRIx64 ", the header "
                   "(offset %u) says %016" PRIx64 ": the token data is corrupt", tb, t,
                   SH_OFF_TOK_XXH, sh->tok_xxh);
    int64_t at = first_out_of_vocab(sh, sh->tokens, (size_t)sh->n_tokens);
    if (at >= 0) {
        const unsigned char *q = sh->tokens + (size_t)at * sh->width;
        return bad(e, LLMT_ERR_FORMAT, sh->path, (uint64_t)(q - sh->map),
                   "token %" PRId64 " is id %" PRIu32 ", outside the shard's vocabulary "
                   "[0, %d) (header offset %u)",
                   at, sh->width == 2 ? (uint32_t)sh_rd16(q) : sh_rd32(q), (int)sh->vocab_size,
                   SH_OFF_VOCAB);
    }
    uint64_t i = XXH64(sh->index, ib, 0);
    if (i != sh->idx_xxh)
        return bad(e, LLMT_ERR_CHECKSUM, sh->path, (uint64_t)(sh->index - sh->map),
                   "the document index hashes to %016" PRIx64 ", the header (offset %u) "
                   "says %016" PRIx64 ": the index is corrupt", i, SH_OFF_IDX_XXH,
                   sh->idx_xxh);
    return LLMT_OK;
}

static llmt_status map_shard(llmt_err *e, ds_shard *sh)
{
    int fd = open(sh->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return llmt__err_set(e, LLMT_ERR_IO, "dataset: open %s: %s", sh->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        int en = errno;
        close(fd);
        return llmt__err_set(e, LLMT_ERR_IO, "dataset: stat %s: %s", sh->path, strerror(en));
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        close(fd);
        return bad(e, LLMT_ERR_FORMAT, sh->path, size,
                   "the file has %" PRIu64 " bytes, too short for a header", size);
    }
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    int en = errno;
    close(fd);
    if (m == MAP_FAILED)
        return llmt__err_set(e, LLMT_ERR_IO, "dataset: mmap %s: %s", sh->path, strerror(en));
    sh->map = m;
    sh->map_len = (size_t)size;
    if (!memcmp(m, SH_MAGIC, 8))
        return check_ours(e, sh);
    if ((int32_t)sh_rd32(m) == LLMC_MAGIC)
        return check_llmc(e, sh);
    return bad(e, LLMT_ERR_FORMAT, sh->path, 0,
               "bad magic: neither a token shard (\"LLMTTOK\") nor an llm.c token file (%d)",
               LLMC_MAGIC);
}

/* Identity of the data, not of where it lies: a copied or renamed dataset
 * keeps its fingerprint, so a checkpoint resumes on it. */
static uint64_t fingerprint(const llmt_dataset *ds)
{
    XXH64_state_t *st = XXH64_createState();
    if (!st)
        return 0;
    XXH64_reset(st, 0);
    for (int32_t i = 0; i < ds->n; i++) {
        const ds_shard *sh = &ds->shards[i];
        uint64_t rec[5];
        rec[0] = (uint64_t)sh->llmc;
        rec[1] = (uint64_t)sh->n_tokens;
        rec[2] = (uint64_t)sh->n_docs;
        if (sh->llmc) {
            /* No stored checksum: the size and both ends stand for the file. */
            size_t edge = sh->map_len < FP_EDGE_BYTES ? sh->map_len : FP_EDGE_BYTES;
            rec[3] = XXH64(sh->map, edge, (uint64_t)sh->map_len);
            rec[4] = XXH64(sh->map + sh->map_len - edge, edge, (uint64_t)sh->map_len);
        } else {
            rec[3] = sh->tok_xxh;
            rec[4] = sh->idx_xxh;
        }
        XXH64_update(st, rec, sizeof rec);
    }
    uint64_t h = XXH64_digest(st);
    XXH64_freeState(st);
    return h;
}

LLMT_API void llmt_dataset_destroy(llmt_dataset *ds)
{
    if (!ds)
        return;
    for (int32_t i = 0; i < ds->n; i++) {
        if (ds->shards[i].map)
            munmap((void *)ds->shards[i].map, ds->shards[i].map_len);
        free(ds->shards[i].path);
    }
    free(ds->shards);
    free(ds);
}

LLMT_API llmt_status llmt_dataset_open(llmt_context *ctx, const char *path, int32_t verify,
                                       llmt_dataset **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "dataset: open", path);
    LLMT__NONNULL(ce, "dataset: open", out);
    *out = NULL;
    path_list l = {0};
    llmt_status s = list_shards(ce, path, &l);
    if (s != LLMT_OK) {
        if (s == LLMT_ERR_OUT_OF_MEMORY)
            llmt__err_set(ce, s, "dataset: out of memory");
        list_free(&l);
        return s;
    }
    if (l.n > (size_t)INT32_MAX) {
        list_free(&l);
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT, "dataset: %s: too many shards",
                             path);
    }
    llmt_dataset *ds = calloc(1, sizeof *ds);
    if (ds)
        ds->shards = calloc(l.n, sizeof *ds->shards);
    if (!ds || !ds->shards) {
        free(ds);
        list_free(&l);
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "dataset: out of memory");
    }
    ds->ctx = ctx;
    /* The dataset owns the path strings from here on. */
    for (size_t i = 0; i < l.n; i++)
        ds->shards[i].path = l.v[i];
    ds->n = (int32_t)l.n;
    free(l.v);
    for (int32_t i = 0; s == LLMT_OK && i < ds->n; i++) {
        ds_shard *sh = &ds->shards[i];
        s = map_shard(ce, sh);
        if (s == LLMT_OK && verify)
            s = verify_shard(ce, sh);
        if (s == LLMT_OK) {
            ds->tokens += sh->n_tokens;
            ds->documents += sh->n_docs;
            if (sh->vocab_size > ds->vocab_size)
                ds->vocab_size = sh->vocab_size;
        }
    }
    if (s != LLMT_OK) {
        llmt_dataset_destroy(ds);
        return s;
    }
    ds->fingerprint = fingerprint(ds);
    *out = ds;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_dataset_get_info(const llmt_dataset *ds, llmt_dataset_info *info)
{
    if (!ds)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&ds->err, "dataset: get_info", info);
    llmt_status s = llmt__check_struct_size((llmt_err *)&ds->err, "dataset: get_info: info",
                                            info->struct_size, sizeof *info);
    if (s != LLMT_OK)
        return s;
    info->shards = ds->n;
    info->vocab_size = ds->vocab_size;
    info->tokens = ds->tokens;
    info->documents = ds->documents;
    info->fingerprint = ds->fingerprint;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_dataset_shard(const llmt_dataset *ds, int32_t index,
                                        const char **path, int64_t *tokens,
                                        int64_t *documents)
{
    if (!ds)
        return LLMT_ERR_NULL_POINTER;
    if (index < 0 || index >= ds->n)
        return llmt__err_set((llmt_err *)&ds->err, LLMT_ERR_INVALID_ARGUMENT,
                             "dataset: shard %d does not exist (%d shards)", (int)index,
                             (int)ds->n);
    const ds_shard *sh = &ds->shards[index];
    if (path)
        *path = sh->path;
    if (tokens)
        *tokens = sh->n_tokens;
    if (documents)
        *documents = sh->n_docs;
    return LLMT_OK;
}

int64_t llmt__data_dataset_copy(const llmt_dataset *ds, int32_t s, int64_t off, size_t n,
                                int32_t *restrict dst)
{
    const ds_shard *sh = &ds->shards[s];
    if (sh->width == 2) {
        const uint16_t *restrict src = (const uint16_t *)(const void *)sh->tokens + off;
        /* The loader's inner loop. Blocks of a fixed 16 are vectorised even
         * under -O2's very-cheap cost model (a loop of unknown count is
         * not): twice the loader's tokens/s of the plain loop. */
        size_t i = 0;
        for (; i + 16 <= n; i += 16)
            for (size_t k = 0; k < 16; k++)
                dst[i + k] = src[i + k];
        for (; i < n; i++)
            dst[i] = src[i];
    } else {
        memcpy(dst, sh->tokens + (size_t)off * 4u, n * sizeof *dst);
    }
    /* The range check reads the window again, from cache. */
    int64_t at = first_out_of_vocab(sh, sh->tokens + (size_t)off * sh->width, n);
    return at < 0 ? -1 : off + at;
}

llmt_status llmt__data_bad_token(llmt_err *e, const llmt_dataset *ds, int32_t s, int64_t tok)
{
    const ds_shard *sh = &ds->shards[s];
    const unsigned char *p = sh->tokens + (size_t)tok * sh->width;
    uint32_t v = sh->width == 2 ? (uint32_t)sh_rd16(p) : sh_rd32(p);
    return bad(e, LLMT_ERR_FORMAT, sh->path, (uint64_t)(p - sh->map),
               "token %" PRId64 " is id %" PRIu32 ", outside the shard's vocabulary [0, %d): "
               "the token data is corrupt (llmt_dataset_open with verify checks every "
               "token)",
               tok, v, (int)sh->vocab_size);
}

LLMT_API llmt_status llmt_dataset_read(llmt_dataset *ds, int32_t index, int64_t offset,
                                       int32_t *ids, size_t n)
{
    if (!ds)
        return LLMT_ERR_NULL_POINTER;
    if (n)
        LLMT__NONNULL(&ds->err, "dataset: read", ids);
    if (index < 0 || index >= ds->n)
        return llmt__err_set(&ds->err, LLMT_ERR_INVALID_ARGUMENT,
                             "dataset: shard %d does not exist (%d shards)", (int)index,
                             (int)ds->n);
    const ds_shard *sh = &ds->shards[index];
    if (offset < 0 || offset > sh->n_tokens || n > (uint64_t)(sh->n_tokens - offset))
        return llmt__err_set(&ds->err, LLMT_ERR_INVALID_ARGUMENT,
                             "dataset: %s: tokens [%" PRId64 ", %" PRId64 ") are outside the "
                             "shard's %" PRId64, sh->path, offset, offset + (int64_t)n,
                             sh->n_tokens);
    int64_t bad_at = llmt__data_dataset_copy(ds, index, offset, n, ids);
    if (bad_at >= 0)
        return llmt__data_bad_token(&ds->err, ds, index, bad_at);
    return LLMT_OK;
}

LLMT_API const char *llmt_dataset_last_error(const llmt_dataset *ds)
{
    return ds ? ds->err.msg : "dataset: NULL dataset";
}
