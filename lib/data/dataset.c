/* A dataset: token shards (ours and llm.c's) read with pread. Every header
 * is checked against the file's size before a byte behind it is trusted
 * (llm.c's own loader skips most of this), and every error names the file
 * and the byte offset of the field that is wrong. The files are not
 * mapped: one truncated while open would raise SIGBUS in the host; a read
 * reports it instead (doc/data.md, "Files changed while open"). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "data_internal.h"
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

static int is_shard_name(const char *name)
{
    return name[0] != '.' && (has_suffix(name, ".tok") || has_suffix(name, ".bin"));
}

int llmt__data_dir_first_shard(const char *dir, char *found, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    int hit = 0;
    while (!hit && (de = readdir(d)))
        if ((hit = is_shard_name(de->d_name)) && found)
            snprintf(found, cap, "%s/%s", dir, de->d_name);
    closedir(d);
    return hit;
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
            if (!is_shard_name(de->d_name))
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

/* ---- reading the files ---- */

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

static void note_identity(ds_shard *sh, const struct stat *st)
{
    sh->size = (uint64_t)st->st_size;
    sh->dev = (uint64_t)st->st_dev;
    sh->ino = (uint64_t)st->st_ino;
    sh->mtime_s = (int64_t)st->st_mtim.tv_sec;
    sh->mtime_ns = (int64_t)st->st_mtim.tv_nsec;
}

/* The file no longer is what was opened: named with both sizes and times. */
static llmt_status changed(llmt_err *e, const ds_shard *sh, const struct stat *st,
                           const char *how, const char *hint)
{
    return llmt__err_set(e, LLMT_ERR_FORMAT,
                         "dataset: %s %s since the dataset opened it: it had %" PRIu64
                         " bytes (modified %" PRId64 ".%09" PRId64 "), now %" PRIu64
                         " bytes (modified %" PRId64 ".%09" PRId64 "); %s",
                         sh->path, how, sh->size, sh->mtime_s, sh->mtime_ns,
                         (uint64_t)st->st_size, (int64_t)st->st_mtim.tv_sec,
                         (int64_t)st->st_mtim.tv_nsec, hint);
}

/* A read that found the end of the file before `n` bytes: truncated while
 * open. `tok` >= 0 names the first token asked for. */
static llmt_status short_read(llmt_err *e, const ds_shard *sh, int fd, uint64_t off, size_t n,
                              int64_t tok)
{
    struct stat st;
    uint64_t now = fstat(fd, &st) ? 0 : (uint64_t)st.st_size;
    char what[96] = "";
    if (tok >= 0)
        snprintf(what, sizeof what, "tokens [%" PRId64 ", %" PRId64 ") = ", tok,
                 tok + (int64_t)(n / sh->width));
    return llmt__err_set(e, LLMT_ERR_FORMAT,
                         "dataset: %s: %sbytes [%" PRIu64 ", %" PRIu64 ") are past the "
                         "file's end: it had %" PRIu64 " bytes when the dataset opened it, "
                         "now %" PRIu64 " (truncated while open)",
                         sh->path, what, off, off + n, sh->size, now);
}

/* Bytes [off, off + n) of the file into buf, all of them or an error. */
static llmt_status read_at(llmt_err *e, const ds_shard *sh, int fd, uint64_t off, void *buf,
                           size_t n, int64_t tok)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return llmt__err_set(e, LLMT_ERR_IO,
                                 "dataset: %s: read of bytes [%" PRIu64 ", %" PRIu64 "): %s",
                                 sh->path, off + got, off + n, strerror(errno));
        if (r == 0)
            return short_read(e, sh, fd, off, n, tok);
        got += (size_t)r;
    }
    return LLMT_OK;
}

/* ---- the open files: at most max_open at once, the least recently read
 * closed first. A file reopened by path must be the one first opened. ---- */

static void close_lru(llmt_dataset *ds)
{
    ds_shard *victim = NULL;
    for (int32_t i = 0; i < ds->n; i++) {
        ds_shard *sh = &ds->shards[i];
        if (sh->fd >= 0 && !sh->users && (!victim || sh->used < victim->used))
            victim = sh;
    }
    if (victim) { /* else every open file is being read: exceed the cap */
        close(victim->fd);
        victim->fd = -1;
        ds->open_files--;
    }
}

/* Under ds->mu. */
static llmt_status reopen(llmt_dataset *ds, ds_shard *sh, llmt_err *e)
{
    if (ds->open_files >= ds->max_open)
        close_lru(ds);
    int fd = open(sh->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return llmt__err_set(e, LLMT_ERR_IO,
                             "dataset: reopen %s: %s (it was read when the "
                             "dataset opened it)",
                             sh->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        int en = errno;
        close(fd);
        return llmt__err_set(e, LLMT_ERR_IO, "dataset: stat %s: %s", sh->path, strerror(en));
    }
    if ((uint64_t)st.st_dev != sh->dev || (uint64_t)st.st_ino != sh->ino ||
        (uint64_t)st.st_size != sh->size || (int64_t)st.st_mtim.tv_sec != sh->mtime_s ||
        (int64_t)st.st_mtim.tv_nsec != sh->mtime_ns) {
        close(fd);
        return changed(e, sh, &st, "was replaced or changed",
                       "the dataset had closed it (it keeps a quarter of RLIMIT_NOFILE "
                       "open) and its path now names another file: open the dataset "
                       "again to read the new data");
    }
    sh->fd = fd;
    ds->open_files++;
    return LLMT_OK;
}

static llmt_status file_get(llmt_dataset *ds, ds_shard *sh, llmt_err *e, int *fd)
{
    pthread_mutex_lock(&ds->mu);
    llmt_status s = sh->fd >= 0 ? LLMT_OK : reopen(ds, sh, e);
    if (s == LLMT_OK) {
        sh->users++;
        sh->used = ++ds->clock;
        *fd = sh->fd;
    }
    pthread_mutex_unlock(&ds->mu);
    return s;
}

static void file_put(llmt_dataset *ds, ds_shard *sh)
{
    pthread_mutex_lock(&ds->mu);
    sh->users--;
    pthread_mutex_unlock(&ds->mu);
}

/* A quarter of the descriptors this process may open, within [16, 1024]:
 * enough for every shard a loader reads at once, and room for the rest of
 * the host (sockets, checkpoint writers). */
static int32_t open_file_cap(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY)
        return 1024;
    rlim_t q = rl.rlim_cur / 4;
    return q < 16 ? 16 : q > 1024 ? 1024 : (int32_t)q;
}

/* ---- header validation ---- */

#define CHUNK_BYTES (1u << 20) /* reads of the index and of verify */

/* The document index: starts from 0, never decreasing, within the tokens. */
static llmt_status check_index(llmt_err *e, const ds_shard *sh, int fd, uint64_t idx_off,
                               uint64_t n_docs, uint64_t n_tokens, unsigned char *buf)
{
    uint64_t prev = 0;
    for (uint64_t d0 = 0; d0 < n_docs; d0 += CHUNK_BYTES / 8u) {
        uint64_t k = n_docs - d0 < CHUNK_BYTES / 8u ? n_docs - d0 : CHUNK_BYTES / 8u;
        llmt_status s = read_at(e, sh, fd, idx_off + d0 * 8u, buf, (size_t)k * 8u, -1);
        if (s != LLMT_OK)
            return s;
        for (uint64_t j = 0; j < k; j++) {
            uint64_t d = d0 + j, v = sh_rd64(buf + j * 8u);
            if ((d == 0 && v != 0) || v < prev || v > n_tokens)
                return bad(e, LLMT_ERR_FORMAT, sh->path, idx_off + d * 8u,
                           "document %" PRIu64 " starts at token %" PRIu64 " (previous %" PRIu64
                           ", %" PRIu64 " tokens)",
                           d, v, prev, n_tokens);
            prev = v;
        }
    }
    return LLMT_OK;
}

static llmt_status check_ours(llmt_err *e, ds_shard *sh, int fd, unsigned char *buf)
{
    const char *p = sh->path;
    uint64_t size = sh->size;
    if (size < SH_HEADER_BYTES)
        return bad(e, LLMT_ERR_FORMAT, p, size,
                   "truncated header: the file has %" PRIu64 " bytes, the header needs %u",
                   size, SH_HEADER_BYTES);
    unsigned char m[SH_HEADER_BYTES];
    llmt_status s = read_at(e, sh, fd, 0, m, sizeof m, -1);
    if (s != LLMT_OK)
        return s;
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
    unsigned char pad[8];
    uint64_t pad0 = h.tok_offset + need, npad = h.idx_offset - pad0;
    if ((s = read_at(e, sh, fd, pad0, pad, (size_t)npad, -1)) != LLMT_OK)
        return s;
    for (uint64_t i = 0; i < npad; i++)
        if (pad[i])
            return bad(e, LLMT_ERR_FORMAT, p, pad0 + i,
                       "padding byte before the document index is "
                       "not zero");
    s = check_index(e, sh, fd, h.idx_offset, h.n_docs, h.n_tokens, buf);
    if (s != LLMT_OK)
        return s;
    sh->width = h.dtype;
    sh->vocab_size = h.vocab_size;
    sh->n_tokens = (int64_t)h.n_tokens;
    sh->n_docs = (int64_t)h.n_docs;
    sh->tok_off = h.tok_offset;
    sh->tok_xxh = h.tok_xxh;
    sh->idx_xxh = h.idx_xxh;
    return LLMT_OK;
}

/* An llm.c file has no checksum: its size and both ends stand for it in
 * the dataset's fingerprint. */
static llmt_status hash_edges(llmt_err *e, ds_shard *sh, int fd, unsigned char *buf)
{
    size_t edge = sh->size < FP_EDGE_BYTES ? (size_t)sh->size : FP_EDGE_BYTES;
    llmt_status s = read_at(e, sh, fd, 0, buf, edge, -1);
    if (s != LLMT_OK)
        return s;
    sh->edge_xxh[0] = XXH64(buf, edge, sh->size);
    if ((s = read_at(e, sh, fd, sh->size - edge, buf, edge, -1)) != LLMT_OK)
        return s;
    sh->edge_xxh[1] = XXH64(buf, edge, sh->size);
    return LLMT_OK;
}

static llmt_status check_llmc(llmt_err *e, ds_shard *sh, int fd, unsigned char *buf)
{
    const char *p = sh->path;
    uint64_t size = sh->size;
    if (size < LLMC_HEADER_BYTES)
        return bad(e, LLMT_ERR_FORMAT, p, size,
                   "truncated llm.c header: the file has %" PRIu64 " bytes, the header "
                   "needs %u", size, LLMC_HEADER_BYTES);
    unsigned char m[12]; /* magic, version, token count */
    llmt_status s = read_at(e, sh, fd, 0, m, sizeof m, -1);
    if (s != LLMT_OK)
        return s;
    int32_t version = (int32_t)sh_rd32(m + 4), n = (int32_t)sh_rd32(m + 8);
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
    sh->tok_off = LLMC_HEADER_BYTES;
    return hash_edges(e, sh, fd, buf);
}

/* Largest of n token ids, for each stored width. Sixteen lane maxima in
 * fixed-count loops are vectorised even under -O2's very-cheap cost model
 * (see widen below); one body, instantiated per element type. */
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

/* The bound on the ids of a shard, 0 for none: its own vocab_size, or the
 * dataset's id_limit where lower. llm.c files carry no vocabulary, and no
 * uint16 reaches a bound of 65536 or more. */
static uint32_t id_bound(const llmt_dataset *ds, const ds_shard *sh)
{
    uint32_t lim = sh->vocab_size > 0 ? (uint32_t)sh->vocab_size : 0;
    if (ds && ds->id_limit > 0 && (!lim || (uint32_t)ds->id_limit < lim))
        lim = (uint32_t)ds->id_limit;
    return sh->width == 2 && lim >= 65536 ? 0 : lim;
}

static uint32_t id_at(const ds_shard *sh, const unsigned char *src, size_t i)
{
    return sh->width == 2 ? (uint32_t)sh_rd16(src + 2 * i) : sh_rd32(src + 4 * i);
}

/* Index of the first of n tokens at src (aligned to its width) not below
 * `limit` (0: no bound), or -1: one vectorised pass, a second only to find
 * a bad one. */
static int64_t first_out_of_vocab(const ds_shard *sh, uint32_t limit, const void *src, size_t n)
{
    if (!limit)
        return -1;
    uint32_t mx = sh->width == 2 ? max_u16(src, n) : max_u32(src, n);
    if (mx < limit)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (id_at(sh, src, i) >= limit)
            return (int64_t)i;
    return -1;
}

/* Token `tok` of shard s holds `id`, at or above `limit`. */
static llmt_status bad_token(llmt_err *e, const ds_shard *sh, int64_t tok, uint32_t id,
                             uint32_t limit)
{
    int tokenizer = (int64_t)limit != sh->vocab_size;
    return bad(e, LLMT_ERR_FORMAT, sh->path, sh->tok_off + (uint64_t)tok * sh->width,
               "token %" PRId64 " is id %" PRIu32 ", outside the %s vocabulary [0, %" PRIu32
               ")%s",
               tok, id, tokenizer ? "tokenizer's" : "shard's", limit,
               tokenizer ? (sh->llmc ? " (an llm.c file names no vocabulary: it was written "
                                       "with another tokenizer, or is corrupt)"
                                     : "")
                         : ": the token data is corrupt (llmt_dataset_open with verify "
                           "checks every token)");
}

/* Every token against the stored checksum and the shard's vocabulary,
 * then the document index; read in chunks through buf. */
static llmt_status verify_shard(llmt_err *e, ds_shard *sh, int fd, unsigned char *buf)
{
    if (sh->llmc)
        return LLMT_OK; /* llm.c files carry no checksum */
    uint64_t tb = (uint64_t)sh->n_tokens * sh->width, ib = (uint64_t)sh->n_docs * 8u;
    uint32_t limit = id_bound(NULL, sh);
    XXH64_state_t *st = XXH64_createState();
    if (!st)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "dataset: out of memory");
    llmt_status s = LLMT_OK;
    int64_t bad_at = -1;
    uint32_t bad_id = 0;
    XXH64_reset(st, 0);
    for (uint64_t at = 0; s == LLMT_OK && at < tb; at += CHUNK_BYTES) {
        size_t k = (size_t)(tb - at < CHUNK_BYTES ? tb - at : CHUNK_BYTES);
        s = read_at(e, sh, fd, sh->tok_off + at, buf, k, -1);
        if (s != LLMT_OK)
            break;
        XXH64_update(st, buf, k);
        int64_t i = bad_at < 0 ? first_out_of_vocab(sh, limit, buf, k / sh->width) : -1;
        if (i >= 0) {
            bad_at = (int64_t)(at / sh->width) + i;
            bad_id = id_at(sh, buf, (size_t)i);
        }
    }
    uint64_t t = XXH64_digest(st), ix = 0;
    if (s == LLMT_OK && t != sh->tok_xxh)
        s = bad(e, LLMT_ERR_CHECKSUM, sh->path, SH_HEADER_BYTES,
                "the tokens (%" PRIu64 " bytes) hash to %016" PRIx64 ", the header "
                "(offset %u) says %016" PRIx64 ": the token data is corrupt",
                tb, t, SH_OFF_TOK_XXH, sh->tok_xxh);
    if (s == LLMT_OK && bad_at >= 0)
        s = bad_token(e, sh, bad_at, bad_id, limit);
    uint64_t idx_off = sh_align8(sh->tok_off + tb);
    XXH64_reset(st, 0);
    for (uint64_t at = 0; s == LLMT_OK && at < ib; at += CHUNK_BYTES) {
        size_t k = (size_t)(ib - at < CHUNK_BYTES ? ib - at : CHUNK_BYTES);
        if ((s = read_at(e, sh, fd, idx_off + at, buf, k, -1)) == LLMT_OK)
            XXH64_update(st, buf, k);
    }
    ix = XXH64_digest(st);
    XXH64_freeState(st);
    if (s == LLMT_OK && ix != sh->idx_xxh)
        s = bad(e, LLMT_ERR_CHECKSUM, sh->path, idx_off,
                "the document index hashes to %016" PRIx64 ", the header (offset %u) "
                "says %016" PRIx64 ": the index is corrupt",
                ix, SH_OFF_IDX_XXH, sh->idx_xxh);
    return s;
}

/* Open, check (and with verify, hash) one shard; its file stays open while
 * the dataset has room for it. */
static llmt_status open_shard(llmt_dataset *ds, llmt_err *e, ds_shard *sh, int verify,
                              unsigned char *buf)
{
    int fd = open(sh->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return llmt__err_set(e, LLMT_ERR_IO, "dataset: open %s: %s", sh->path, strerror(errno));
    struct stat st;
    llmt_status s = LLMT_OK;
    if (fstat(fd, &st))
        s = llmt__err_set(e, LLMT_ERR_IO, "dataset: stat %s: %s", sh->path, strerror(errno));
    else
        note_identity(sh, &st);
    unsigned char m[8];
    if (s == LLMT_OK && sh->size < 8)
        s = bad(e, LLMT_ERR_FORMAT, sh->path, sh->size,
                "the file has %" PRIu64 " bytes, too short for a header", sh->size);
    if (s == LLMT_OK)
        s = read_at(e, sh, fd, 0, m, sizeof m, -1);
    if (s == LLMT_OK) {
        if (!memcmp(m, SH_MAGIC, 8))
            s = check_ours(e, sh, fd, buf);
        else if ((int32_t)sh_rd32(m) == LLMC_MAGIC)
            s = check_llmc(e, sh, fd, buf);
        else
            s = bad(e, LLMT_ERR_FORMAT, sh->path, 0,
                    "bad magic: neither a token shard (\"LLMTTOK\") nor an llm.c token file "
                    "(%d)",
                    LLMC_MAGIC);
    }
    if (s == LLMT_OK && verify)
        s = verify_shard(e, sh, fd, buf);
    if (s == LLMT_OK && ds->open_files < ds->max_open) {
        sh->fd = fd;
        sh->used = ++ds->clock;
        ds->open_files++;
    } else {
        close(fd);
    }
    return s;
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
        rec[3] = sh->llmc ? sh->edge_xxh[0] : sh->tok_xxh;
        rec[4] = sh->llmc ? sh->edge_xxh[1] : sh->idx_xxh;
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
        if (ds->shards[i].fd >= 0)
            close(ds->shards[i].fd);
        free(ds->shards[i].path);
    }
    pthread_mutex_destroy(&ds->mu);
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
    unsigned char *buf = malloc(CHUNK_BYTES);
    if (ds)
        ds->shards = calloc(l.n, sizeof *ds->shards);
    if (!ds || !ds->shards || !buf) {
        if (ds)
            free(ds->shards);
        free(ds);
        free(buf);
        list_free(&l);
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "dataset: out of memory");
    }
    ds->ctx = ctx;
    pthread_mutex_init(&ds->mu, NULL);
    ds->max_open = open_file_cap();
    /* The dataset owns the path strings from here on. */
    for (size_t i = 0; i < l.n; i++) {
        ds->shards[i].path = l.v[i];
        ds->shards[i].fd = -1;
    }
    ds->n = (int32_t)l.n;
    free(l.v);
    for (int32_t i = 0; s == LLMT_OK && i < ds->n; i++) {
        ds_shard *sh = &ds->shards[i];
        s = open_shard(ds, ce, sh, verify, buf);
        if (s == LLMT_OK) {
            ds->tokens += sh->n_tokens;
            ds->documents += sh->n_docs;
            if (sh->vocab_size > ds->vocab_size)
                ds->vocab_size = sh->vocab_size;
        }
    }
    free(buf);
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

llmt_status llmt__data_dataset_fetch(llmt_dataset *ds, int32_t s, int64_t off, size_t n,
                                     void *raw, llmt_err *e)
{
    ds_shard *sh = &ds->shards[s];
    int fd = -1;
    llmt_status st = file_get(ds, sh, e, &fd);
    if (st != LLMT_OK)
        return st;
    st = read_at(e, sh, fd, sh->tok_off + (uint64_t)off * sh->width, raw, n * sh->width, off);
    file_put(ds, sh);
    if (st != LLMT_OK)
        return st;
    /* The range check reads the window again, from cache. */
    uint32_t limit = id_bound(ds, sh);
    int64_t at = first_out_of_vocab(sh, limit, raw, n);
    if (at >= 0)
        return bad_token(e, sh, off + at, id_at(sh, raw, (size_t)at), limit);
    return LLMT_OK;
}

void llmt__data_dataset_widen(const llmt_dataset *ds, int32_t s, const void *raw, size_t n,
                              int32_t *restrict dst)
{
    if (ds->shards[s].width == 4) {
        memcpy(dst, raw, n * sizeof *dst);
        return;
    }
    const uint16_t *restrict src = raw;
    /* The loader's inner loop. Blocks of a fixed 16 are vectorised even
     * under -O2's very-cheap cost model (a loop of unknown count is not):
     * twice the loader's tokens/s of the plain loop. */
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (size_t k = 0; k < 16; k++)
            dst[i + k] = src[i + k];
    for (; i < n; i++)
        dst[i] = src[i];
}

llmt_status llmt__data_shard_check(llmt_dataset *ds, int32_t s, llmt_err *e)
{
    ds_shard *sh = &ds->shards[s];
    int fd = -1;
    llmt_status st = file_get(ds, sh, e, &fd);
    if (st != LLMT_OK)
        return st;
    struct stat now;
    if (fstat(fd, &now))
        st = llmt__err_set(e, LLMT_ERR_IO, "dataset: stat %s: %s", sh->path, strerror(errno));
    else if ((uint64_t)now.st_size != sh->size || (int64_t)now.st_mtim.tv_sec != sh->mtime_s ||
             (int64_t)now.st_mtim.tv_nsec != sh->mtime_ns)
        st =
            changed(e, sh, &now, (uint64_t)now.st_size < sh->size ? "was truncated" : "changed",
                    "a writer must publish a new file by rename, not rewrite one in use");
    file_put(ds, sh);
    return st;
}

llmt_status llmt__data_dataset_limit_ids(llmt_dataset *ds, int32_t vocab)
{
    if (vocab < 0)
        return llmt__err_set(&ds->err, LLMT_ERR_INVALID_ARGUMENT,
                             "dataset: id limit %d is negative (0: none)", (int)vocab);
    ds->id_limit = vocab;
    return LLMT_OK;
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
    if (sh->width == 4) /* stored as the caller wants them */
        return llmt__data_dataset_fetch(ds, index, offset, n, ids, &ds->err);
    uint16_t raw[16384];
    for (size_t at = 0; at < n; at += 16384) {
        size_t k = n - at < 16384 ? n - at : 16384;
        llmt_status s =
            llmt__data_dataset_fetch(ds, index, offset + (int64_t)at, k, raw, &ds->err);
        if (s != LLMT_OK)
            return s;
        llmt__data_dataset_widen(ds, index, raw, k, ids + at);
    }
    return LLMT_OK;
}

LLMT_API const char *llmt_dataset_last_error(const llmt_dataset *ds)
{
    return ds ? ds->err.msg : "dataset: NULL dataset";
}
