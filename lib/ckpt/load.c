/* Loading: find the newest complete checkpoint, validate it, read regions
 * of global tensors under any placement (resharding), verify, export. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "ckpt_internal.h"

#define MAX_PATH 4096
#define MAX_MANIFEST ((size_t)1 << 30)

void llmt__ckpt_close_open(llmt_ckpt *ck)
{
    llmt__ckpt_manifest_free(&ck->open);
    free(ck->open_dir);
    ck->open_dir = NULL;
    ck->is_open = 0;
    ck->open_mem = 0;
    free(ck->mem_spans);
    free(ck->mem_data);
    ck->mem_spans = NULL;
    ck->mem_data = NULL;
    ck->mem_nspans = ck->mem_spancap = 0;
    ck->mem_plan = 0;
    ck->mem_n = 0;
    free(ck->rbuf);
    ck->rbuf = NULL;
    ck->rbufcap = 0;
    llmt__ckpt_close_files(ck);
}

void llmt__ckpt_close_files(llmt_ckpt *ck)
{
    for (int32_t i = 0; i < ck->fd_cap; i++)
        if (ck->fds[i] >= 0)
            close(ck->fds[i]);
    free(ck->fds);
    free(ck->fd_rank);
    ck->fds = NULL;
    ck->fd_rank = NULL;
    ck->fd_cap = 0;
}

static int open_data(const char *dir, int32_t rank);

/* The open checkpoint's data file of `rank`, from the handle's cache
 * (closed with the checkpoint; at most 256 kept, one slot per rank
 * modulo that, so a process never holds more descriptors than that);
 * -1 with errno set on failure. */
static int cached_data(llmt_ckpt *ck, int32_t rank)
{
    if (!ck->fds) {
        int32_t cap = ck->open.nfiles < 256 ? (int32_t)ck->open.nfiles : 256;
        cap = cap > 0 ? cap : 1;
        ck->fds = malloc((size_t)cap * sizeof *ck->fds);
        ck->fd_rank = malloc((size_t)cap * sizeof *ck->fd_rank);
        if (!ck->fds || !ck->fd_rank) {
            free(ck->fds);
            free(ck->fd_rank);
            ck->fds = NULL;
            ck->fd_rank = NULL;
            errno = ENOMEM;
            return -1;
        }
        for (int32_t i = 0; i < cap; i++)
            ck->fds[i] = ck->fd_rank[i] = -1;
        ck->fd_cap = cap;
    }
    int32_t slot = rank % ck->fd_cap;
    if (ck->fds[slot] >= 0 && ck->fd_rank[slot] == rank)
        return ck->fds[slot];
    if (ck->fds[slot] >= 0)
        close(ck->fds[slot]);
    ck->files_opened++;
    ck->fds[slot] = open_data(ck->open_dir, rank);
    ck->fd_rank[slot] = rank;
    return ck->fds[slot];
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

llmt_status llmt__ckpt_pread_all(int fd, void *buf, uint64_t len, uint64_t off)
{
    uint64_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, (uint8_t *)buf + done, (size_t)(len - done), (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? LLMT_ERR_IO : LLMT_ERR_FORMAT;
        done += (uint64_t)r;
    }
    return LLMT_OK;
}

static int open_data(const char *dir, int32_t rank)
{
    char p[MAX_PATH];
    snprintf(p, sizeof p, "%s/rank-%05d.bin", dir, (int)rank);
    return open(p, O_RDONLY | O_CLOEXEC);
}

/* Check every data file: present, as long as listed, a valid header. */
static llmt_status check_files(llmt_ckpt *ck, const char *dir, const ck_manifest *m)
{
    for (size_t i = 0; i < m->nfiles; i++) {
        int32_t r = m->files[i].rank;
        if (ck->file_parts > 1 && r % ck->file_parts != ck->file_part)
            continue; /* another rank's share of the checks */
        ck->files_checked++;
        int fd = open_data(dir, r);
        if (fd < 0)
            return llmt__err_set(&ck->err, errno == ENOENT ? LLMT_ERR_FORMAT : LLMT_ERR_IO,
                                 "ckpt: %s/rank-%05d.bin: %s", dir, (int)r, strerror(errno));
        struct stat st;
        uint8_t h[64];
        llmt_status s = LLMT_OK;
        if (fstat(fd, &st) || (uint64_t)st.st_size != m->files[i].bytes)
            s = llmt__err_set(&ck->err, LLMT_ERR_FORMAT,
                              "ckpt: %s/rank-%05d.bin is %lld bytes, the manifest says %" PRIu64
                              " (truncated or replaced)", dir, (int)r,
                              (long long)st.st_size, m->files[i].bytes);
        else if (llmt__ckpt_pread_all(fd, h, sizeof h, 0) != LLMT_OK ||
                 memcmp(h, CK_MAGIC, 8) || get_u64(h + 48) != XXH64(h, 48, 0))
            s = llmt__err_set(&ck->err, LLMT_ERR_FORMAT,
                              "ckpt: %s/rank-%05d.bin: bad header (magic or header hash)",
                              dir, (int)r);
        else if (get_u32(h + 8) != CK_FORMAT_VERSION)
            s = llmt__err_set(&ck->err, LLMT_ERR_VERSION,
                              "ckpt: %s/rank-%05d.bin: format version %u", dir, (int)r,
                              get_u32(h + 8));
        else if ((int64_t)get_u64(h + 16) != m->step || (int32_t)get_u32(h + 24) != r ||
                 (int32_t)get_u32(h + 28) != m->world_size || get_u64(h + 32) != m->files[i].bytes)
            s = llmt__err_set(&ck->err, LLMT_ERR_FORMAT,
                              "ckpt: %s/rank-%05d.bin: header names another step, rank or size",
                              dir, (int)r);
        close(fd);
        if (s != LLMT_OK)
            return s;
    }
    return LLMT_OK;
}

static llmt_status ensure_rbuf(llmt_ckpt *ck, uint64_t n)
{
    if (n <= ck->rbufcap)
        return LLMT_OK;
    void *p = realloc(ck->rbuf, n ? n : 1);
    if (!p)
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY,
                             "ckpt: cannot allocate a %" PRIu64 "-byte read buffer", n);
    ck->rbuf = p;
    ck->rbufcap = n;
    return LLMT_OK;
}

/* Hash a whole chunk in block-sized reads. */
static llmt_status verify_chunk(llmt_ckpt *ck, const char *dir, const ck_tensor *t,
                                size_t ci)
{
    const ck_chunk *k = &t->chunks[ci];
    int fd = open_data(dir, k->rank);
    if (fd < 0)
        return llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: open rank-%05d.bin: %s",
                             (int)k->rank, strerror(errno));
    /* a chunk shorter than its block (one block) needs only its length:
     * a manifest may say blocks of up to 1 GiB */
    llmt_status s = ensure_rbuf(ck, k->block < k->length ? k->block : k->length);
    XXH64_state_t *hs = XXH64_createState();
    if (!hs)
        s = LLMT_ERR_OUT_OF_MEMORY;
    else
        XXH64_reset(hs, 0);
    for (uint64_t b = 0; s == LLMT_OK && b < k->nblocks; b++) {
        uint64_t o = b * k->block;
        uint64_t n = k->length - o < k->block ? k->length - o : k->block;
        s = llmt__ckpt_pread_all(fd, ck->rbuf, n, k->offset + o);
        if (s != LLMT_OK) {
            s = llmt__err_set(&ck->err, s, "ckpt: short read of rank-%05d.bin", (int)k->rank);
            break;
        }
        if (XXH64(ck->rbuf, (size_t)n, 0) != k->bxxh[b]) {
            s = llmt__err_set(&ck->err, LLMT_ERR_CHECKSUM,
                              "ckpt: tensor '%s' chunk %zu (rank-%05d.bin) block %" PRIu64
                              ": checksum mismatch", t->name, ci, (int)k->rank, b);
            break;
        }
        XXH64_update(hs, ck->rbuf, (size_t)n);
    }
    if (s == LLMT_OK && XXH64_digest(hs) != k->xxh)
        s = llmt__err_set(&ck->err, LLMT_ERR_CHECKSUM,
                          "ckpt: tensor '%s' chunk %zu (rank-%05d.bin): checksum mismatch",
                          t->name, ci, (int)k->rank);
    if (hs)
        XXH64_freeState(hs);
    close(fd);
    return s;
}

static llmt_status verify_all(llmt_ckpt *ck, const char *dir, const ck_manifest *m)
{
    for (size_t i = 0; i < m->ntensors; i++)
        for (size_t c = 0; c < m->tensors[i].nchunks; c++) {
            int32_t r = m->tensors[i].chunks[c].rank; /* another rank's share */
            if (ck->file_parts > 1 && r % ck->file_parts != ck->file_part)
                continue;
            llmt_status s = verify_chunk(ck, dir, &m->tensors[i], c);
            if (s != LLMT_OK)
                return s;
        }
    return LLMT_OK;
}

/* The step that dir's last component names (step- and 12 digits, as
 * every tier writes them), or -1 when it is no such name (a path a tool
 * opens, a quarantined step-N.TIME). */
static int64_t dir_step(const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/')
        b--;
    if (n - b != 17 || strncmp(dir + b, "step-", 5))
        return -1;
    int64_t v = 0;
    for (size_t i = b + 5; i < n; i++) {
        if (dir[i] < '0' || dir[i] > '9')
            return -1;
        v = v * 10 + (dir[i] - '0');
    }
    return v;
}

/* Parse the manifest text of dir and check the data files (and every
 * hash when full); *m is filled on success. Failures go to ck->err. */
static llmt_status load_text(llmt_ckpt *ck, const char *dir, const char *text, size_t len,
                             int full, ck_manifest *m)
{
    char e[LLMT_ERR_MSG_MAX];
    llmt_status s = llmt__ckpt_manifest_parse(text, len, 0, m, e, sizeof e);
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: %s/manifest.json: %s", dir, e);
    /* A step directory copied or renamed under another step's name holds a
     * whole valid checkpoint (its data files name the manifest's step):
     * resuming "step N" from it would restore another step's state. */
    int64_t named = dir_step(dir);
    if (named >= 0 && named != m->step) {
        s = llmt__err_set(&ck->err, LLMT_ERR_FORMAT,
                          "ckpt: %s/manifest.json is a checkpoint of step %" PRId64
                          ", its directory names step %" PRId64 " (copied or renamed?)",
                          dir, m->step, named);
        llmt__ckpt_manifest_free(m);
        return s;
    }
    s = check_files(ck, dir, m);
    if (s == LLMT_OK && full)
        s = verify_all(ck, dir, m);
    if (s != LLMT_OK)
        llmt__ckpt_manifest_free(m);
    return s;
}

llmt_status llmt__ckpt_read_manifest(llmt_ckpt *ck, const char *dir, char **text, size_t *len)
{
    char p[MAX_PATH];
    char e[LLMT_ERR_MSG_MAX];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    llmt_status s = llmt__ckpt_read_small(p, MAX_MANIFEST, text, len, e, sizeof e);
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s == LLMT_ERR_NOT_FOUND ? LLMT_ERR_NOT_FOUND : s,
                             "%s (not committed)", e);
    return LLMT_OK;
}

/* dir/manifest.json read, parsed and checked (load_text). */
static llmt_status load_dir(llmt_ckpt *ck, const char *dir, int full, ck_manifest *m)
{
    char *text = NULL;
    size_t len = 0;
    llmt_status s = llmt__ckpt_read_manifest(ck, dir, &text, &len);
    if (s != LLMT_OK)
        return s;
    s = load_text(ck, dir, text, len, full, m);
    free(text);
    return s;
}

llmt_status llmt__ckpt_check_dir(llmt_ckpt *ck, const char *dir, int full)
{
    ck_manifest m;
    llmt_status s = load_dir(ck, dir, full, &m);
    if (s == LLMT_OK)
        llmt__ckpt_manifest_free(&m);
    return s;
}

/* The checkpoint of dir, parsed into m, becomes the open one. */
static llmt_status open_parsed(llmt_ckpt *ck, const char *dir, ck_manifest *m)
{
    char *d = strdup(dir);
    if (!d) {
        llmt__ckpt_manifest_free(m);
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    }
    llmt__ckpt_close_open(ck);
    ck->open = *m;
    ck->open_dir = d;
    ck->is_open = 1;
    return LLMT_OK;
}

static llmt_status open_path(llmt_ckpt *ck, const char *dir)
{
    ck_manifest m;
    llmt_status s = load_dir(ck, dir, ck->opts.verify >= LLMT_CKPT_VERIFY_FULL, &m);
    return s != LLMT_OK ? s : open_parsed(ck, dir, &m);
}

llmt_status llmt__ckpt_open_step_text(llmt_ckpt *ck, int64_t step, const char *text, size_t len)
{
    char d[MAX_PATH];
    snprintf(d, sizeof d, "%s/step-%012" PRId64, ck->root, step);
    ck_manifest m;
    llmt_status s = load_text(ck, d, text, len, ck->opts.verify >= LLMT_CKPT_VERIFY_FULL, &m);
    return s != LLMT_OK ? s : open_parsed(ck, d, &m);
}

LLMT_API llmt_status llmt_ckpt_open_dir(llmt_ckpt *ck, const char *dir)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: open_dir", dir);
    return open_path(ck, dir);
}

LLMT_API llmt_status llmt_ckpt_open_step(llmt_ckpt *ck, int64_t step)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    char d[MAX_PATH];
    snprintf(d, sizeof d, "%s/step-%012" PRId64, ck->root, step);
    return open_path(ck, d);
}

void llmt__ckpt_skip_note(llmt_ckpt *ck, ck_tried *t, int64_t step, const char *reason)
{
    llmt__log(ck->ctx, LLMT_LOG_WARN, "ckpt", "skipping step %" PRId64 ": %s", step, reason);
    t->n++;
    if (t->len < sizeof t->why) {
        int k = snprintf(t->why + t->len, sizeof t->why - t->len, "\n  step %" PRId64 ": %s",
                         step, reason);
        t->len += k > 0 ? (size_t)k : 0;
    }
}

llmt_status llmt__ckpt_none_usable(llmt_ckpt *ck, const ck_tried *t, const char *where)
{
    if (t->n == 0)
        return llmt__err_set(&ck->err, LLMT_ERR_NOT_FOUND, "ckpt: no checkpoint in %s",
                             ck->root);
    return llmt__err_set(&ck->err, LLMT_ERR_NOT_FOUND,
                         "ckpt: no usable checkpoint in %s: %zu step director%s, none a "
                         "valid committed checkpoint%s:%s",
                         ck->root, t->n, t->n == 1 ? "y" : "ies", where, t->why);
}

llmt_status llmt__ckpt_open_latest_below(llmt_ckpt *ck, int64_t below, ck_tried *t,
                                         int64_t *step)
{
    size_t n = 0;
    /* The directory scan is the truth; `latest` is a pointer for people and
     * tools that a crash may leave one step behind. */
    int64_t *v = llmt__ckpt_scan(ck->root, 0, &n);
    if (!v)
        return llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: cannot list %s: %s", ck->root,
                             strerror(errno));
    /* Why each newer step was unusable: the message a caller shows when
     * nothing is left to resume from (the user decides, not the library). */
    ck_tried own = {.len = 0};
    if (!t)
        t = &own;
    size_t skipped = 0;
    for (size_t i = n; i-- > 0;) {
        if (v[i] >= below)
            continue;
        llmt_status s = llmt_ckpt_open_step(ck, v[i]);
        if (s == LLMT_OK) {
            if (step)
                *step = v[i];
            if (skipped)
                llmt__log(ck->ctx, LLMT_LOG_WARN, "ckpt",
                          "using step %" PRId64 " after skipping %zu newer one(s)", v[i],
                          skipped);
            free(v);
            return LLMT_OK;
        }
        skipped++;
        llmt__ckpt_skip_note(ck, t, v[i], ck->err.msg);
    }
    free(v);
    return llmt__ckpt_none_usable(ck, t, "");
}

LLMT_API llmt_status llmt_ckpt_open_latest(llmt_ckpt *ck, int64_t *step)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    return llmt__ckpt_open_latest_below(ck, INT64_MAX, NULL, step);
}

LLMT_API llmt_status llmt_ckpt_open_snapshot(llmt_ckpt *ck, int64_t *step)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    llmt_ckpt_wait(ck, -1); /* the writer reads the buffer and fills the hashes */
    if (!ck->have_snapshot)
        return llmt__err_set(&ck->err, LLMT_ERR_NOT_FOUND,
                             "ckpt: no snapshot in host memory (no save on this handle yet)");
    if (ck->job_status != LLMT_OK)
        llmt__ckpt_hash_job(ck); /* the write failed, perhaps before hashing */
    ck_manifest *part = &ck->job, copy;
    char e[LLMT_ERR_MSG_MAX];
    llmt_status s = llmt__ckpt_manifest_merge(&part, 1, &copy, e, sizeof e);
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: snapshot: %s", e);
    llmt__ckpt_close_open(ck);
    ck->open = copy;
    ck->is_open = 1;
    ck->open_mem = 1;
    if (step)
        *step = copy.step;
    return LLMT_OK;
}

llmt_status llmt__ckpt_need_open(llmt_ckpt *ck)
{
    if (!ck->is_open)
        return llmt__err_set(&ck->err, LLMT_ERR_STATE, "ckpt: no checkpoint is open");
    return LLMT_OK;
}

llmt_status llmt__ckpt_open_tensor(llmt_ckpt *ck, const char *name, const ck_tensor **t)
{
    *t = NULL;
    llmt_status s = llmt__ckpt_need_open(ck);
    if (s != LLMT_OK)
        return s;
    if (!(*t = llmt__ckpt_find_tensor(&ck->open, name)))
        return llmt__err_set(&ck->err, LLMT_ERR_NOT_FOUND,
                             "ckpt: no tensor '%.255s' in step %" PRId64, name, ck->open.step);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_open_step_of(llmt_ckpt *ck, int64_t *step)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: open_step_of", step);
    *step = ck->is_open ? ck->open.step : -1;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_tensor_count(llmt_ckpt *ck, size_t *out)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: tensor_count", out);
    llmt_status s = llmt__ckpt_need_open(ck);
    *out = s == LLMT_OK ? ck->open.ntensors : 0;
    return s;
}

LLMT_API llmt_status llmt_ckpt_tensor_name(llmt_ckpt *ck, size_t index, const char **name)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: tensor_name", name);
    *name = NULL;
    llmt_status s = llmt__ckpt_need_open(ck);
    if (s != LLMT_OK)
        return s;
    if (index >= ck->open.ntensors)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: tensor index %zu >= %zu", index, ck->open.ntensors);
    *name = ck->open.tensors[index].name;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_tensor_info(llmt_ckpt *ck, const char *name,
                                           llmt_dtype *dtype, int32_t *ndim,
                                           int64_t *global_shape, size_t *nchunks)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: tensor_info", name);
    const ck_tensor *t;
    llmt_status s = llmt__ckpt_open_tensor(ck, name, &t);
    if (s != LLMT_OK)
        return s;
    if (dtype)
        *dtype = t->dtype;
    if (ndim)
        *ndim = t->ndim;
    if (global_shape)
        for (int d = 0; d < LLMT_MAX_DIMS; d++)
            global_shape[d] = d < t->ndim ? t->gshape[d] : 0;
    if (nchunks)
        *nchunks = t->nchunks;
    return LLMT_OK;
}

static int same_box(const ck_chunk *a, const ck_chunk *b, int nd)
{
    for (int d = 0; d < nd; d++)
        if (a->goff[d] != b->goff[d] || a->lshape[d] != b->lshape[d])
            return 0;
    return 1;
}

/* Whether chunk k holds some element of the block [doff, doff + shape). */
static int block_overlaps(const ck_chunk *k, const int64_t *doff, const int64_t *shape, int nd)
{
    for (int d = 0; d < nd; d++)
        if (k->goff[d] >= doff[d] + shape[d] || doff[d] >= k->goff[d] + k->lshape[d])
            return 0;
    return 1;
}

/* Copy the intersection [lo, hi) (global coordinates) from a chunk whose bytes
 * [span0, ...) are in `src` into the dst block at doff (strides dstr, in
 * elements). */
static void copy_box(uint8_t *dst, const int64_t *doff, const int64_t *dstr, const uint8_t *src,
                     uint64_t span0, const ck_chunk *k, int nd, size_t es, const int64_t *lo,
                     const int64_t *hi)
{
    int64_t cstr[LLMT_MAX_DIMS];
    int64_t cs = 1;
    for (int d = nd - 1; d >= 0; d--) {
        cstr[d] = cs;
        cs *= k->lshape[d];
    }
    if (nd == 0) {
        memcpy(dst, src, es);
        return;
    }
    int64_t idx[LLMT_MAX_DIMS];
    memcpy(idx, lo, sizeof idx[0] * (size_t)nd);
    int64_t run = hi[nd - 1] - lo[nd - 1];
    for (;;) {
        int64_t ci = 0, di = 0;
        for (int d = 0; d < nd; d++) {
            ci += (idx[d] - k->goff[d]) * cstr[d];
            di += (idx[d] - doff[d]) * dstr[d];
        }
        const uint8_t *from = src + (uint64_t)ci * es - span0;
        if (dstr[nd - 1] == 1)
            memcpy(dst + di * (int64_t)es, from, (size_t)(run * (int64_t)es));
        else
            for (int64_t i = 0; i < run; i++)
                memcpy(dst + (di + i * dstr[nd - 1]) * (int64_t)es, from + i * (int64_t)es, es);
        int d = nd - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < hi[d])
                break;
            idx[d] = lo[d];
        }
        if (d < 0)
            break;
    }
}

/* Read the overlap of chunk ci with the caller's block. Returns the number
 * of elements copied through *copied. */
static llmt_status read_chunk(llmt_ckpt *ck, const ck_tensor *t, size_t ci,
                              const llmt_tensor *dst, const int64_t *doff,
                              int64_t *copied)
{
    const ck_chunk *k = &t->chunks[ci];
    int nd = t->ndim;
    int64_t lo[LLMT_MAX_DIMS], hi[LLMT_MAX_DIMS], vol = 1;
    for (int d = 0; d < nd; d++) {
        lo[d] = k->goff[d] > doff[d] ? k->goff[d] : doff[d];
        int64_t a = k->goff[d] + k->lshape[d], b = doff[d] + dst->shape[d];
        hi[d] = a < b ? a : b;
        if (hi[d] <= lo[d])
            return LLMT_OK; /* no overlap */
        vol *= hi[d] - lo[d];
    }
    size_t es = llmt_dtype_size(t->dtype);
    /* Byte span from the first to the last element of the overlap, widened
     * to hashed blocks when verifying. */
    int64_t first = 0, last = 0, cs = 1;
    for (int d = nd - 1; d >= 0; d--) {
        first += (lo[d] - k->goff[d]) * cs;
        last += (hi[d] - 1 - k->goff[d]) * cs;
        cs *= k->lshape[d];
    }
    uint64_t s0 = (uint64_t)first * es, s1 = (uint64_t)(last + 1) * es;
    int verify = ck->opts.verify >= LLMT_CKPT_VERIFY_READ;
    uint64_t b0 = 0, b1 = 0;
    if (verify) {
        b0 = s0 / k->block;
        b1 = (s1 + k->block - 1) / k->block;
        s0 = b0 * k->block;
        s1 = b1 * k->block < k->length ? b1 * k->block : k->length;
    }
    const uint8_t *span;
    llmt_status s;
    if (ck->mem_n > 0) { /* gathered: the span fetched for this rank's plan */
        if (k->rank < 0 || k->rank >= ck->mem_n)
            return llmt__err_set(&ck->err, LLMT_ERR_FORMAT,
                                 "ckpt: tensor '%s': rank %d's part was not gathered", t->name,
                                 (int)k->rank);
        span = llmt__ckpt_gathered_span(ck, k->rank, k->offset + s0, s1 - s0, &s);
        if (ck->mem_plan) { /* recorded; nothing copied */
            *copied = s == LLMT_OK ? vol : 0;
            return s;
        }
        if (!span)
            return llmt__err_set(&ck->err, LLMT_ERR_STATE,
                                 "ckpt: tensor '%s': bytes [%" PRIu64 ", +%" PRIu64 ") of rank "
                                 "%d's part were not fetched (the read is not in this rank's "
                                 "restore plan)",
                                 t->name, k->offset + s0, s1 - s0, (int)k->rank);
    } else if (ck->open_mem) {
        span = ck->buf + k->offset + s0; /* host tier: the snapshot buffer */
    } else {
        s = ensure_rbuf(ck, s1 - s0);
        if (s != LLMT_OK)
            return s;
        int fd = cached_data(ck, k->rank);
        if (fd < 0)
            return llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: open %s/rank-%05d.bin: %s",
                                 ck->open_dir, (int)k->rank, strerror(errno));
        s = llmt__ckpt_pread_all(fd, ck->rbuf, s1 - s0, k->offset + s0);
        if (s != LLMT_OK)
            return llmt__err_set(&ck->err, s, "ckpt: short read of %s/rank-%05d.bin "
                                 "(truncated?)", ck->open_dir, (int)k->rank);
        span = ck->rbuf;
    }
    if (verify) {
        for (uint64_t b = b0; b < b1; b++) {
            uint64_t o = b * k->block - s0;
            uint64_t n = k->length - b * k->block < k->block ? k->length - b * k->block : k->block;
            if (XXH64(span + o, (size_t)n, 0) != k->bxxh[b])
                return llmt__err_set(&ck->err, LLMT_ERR_CHECKSUM,
                                     "ckpt: tensor '%s' chunk %zu (%s/rank-%05d.bin) block %"
                                     PRIu64 ": checksum mismatch", t->name, ci,
                                     ck->open_mem ? "host snapshot" : ck->open_dir,
                                     (int)k->rank, b);
        }
    }
    copy_box(dst->data, doff, dst->strides, span, s0, k, nd, es, lo, hi);
    *copied = vol;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_read(llmt_ckpt *ck, const char *name,
                                    const llmt_tensor *dst,
                                    const int64_t *global_offsets)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: read", name);
    LLMT__NONNULL(&ck->err, "ckpt: read", dst);
    const ck_tensor *t;
    llmt_status s = llmt__ckpt_open_tensor(ck, name, &t);
    if (s != LLMT_OK)
        return s;
    if ((s = llmt_tensor_validate(dst)) != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: read '%s': invalid destination view", name);
    if (dst->device == LLMT_DEVICE_CUDA)
        return llmt__err_set(&ck->err, LLMT_ERR_UNSUPPORTED,
                             "ckpt: read '%s': the destination must be host memory", name);
    for (int d = 0; d < dst->ndim; d++) /* two elements in one place: not a block */
        if (dst->shape[d] > 1 && dst->strides[d] == 0)
            return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "ckpt: read '%s': destination dim %d has stride 0", name, d);
    if (dst->dtype != t->dtype || dst->ndim != t->ndim)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: read '%s': saved as %s with %d dims, destination is %s "
                             "with %d dims", name, llmt_dtype_name(t->dtype), (int)t->ndim,
                             llmt_dtype_name(dst->dtype), (int)dst->ndim);
    int64_t doff[LLMT_MAX_DIMS] = {0}, want = 1;
    for (int d = 0; d < t->ndim; d++) {
        doff[d] = global_offsets ? global_offsets[d] : 0;
        if (doff[d] < 0 || doff[d] > t->gshape[d] || dst->shape[d] > t->gshape[d] - doff[d])
            return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "ckpt: read '%s' dim %d: block [%" PRId64 ", +%" PRId64
                                 ") outside global size %" PRId64, name, d, doff[d],
                                 dst->shape[d], t->gshape[d]);
        want *= dst->shape[d];
    }
    if (want == 0)
        return LLMT_OK;
    /* The chunks that overlap the block, in order (a data parallel share
     * of a tensor among thousands touches few); a replica (same box) is
     * read only when no earlier copy was: hit[] holds the read ones. */
    size_t *hit = malloc((t->nchunks ? t->nchunks : 1) * sizeof *hit);
    size_t *bad = malloc((t->nchunks ? t->nchunks : 1) * sizeof *bad);
    if (!hit || !bad) {
        free(hit);
        free(bad);
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    }
    size_t nhit = 0, nbad = 0;
    int64_t got = 0;
    llmt_status first_bad = LLMT_OK;
    char bad_msg[LLMT_ERR_MSG_MAX] = "";
    for (size_t c = 0; c < t->nchunks; c++) {
        if (!block_overlaps(&t->chunks[c], doff, dst->shape, t->ndim))
            continue;
        int dup = 0;
        for (size_t j = 0; j < nhit && !dup; j++)
            dup = same_box(&t->chunks[hit[j]], &t->chunks[c], t->ndim);
        if (dup)
            continue;
        int64_t n = 0;
        s = read_chunk(ck, t, c, dst, doff, &n);
        if (s == LLMT_OK) {
            hit[nhit++] = c;
            got += n;
        } else {
            bad[nbad++] = c;
            if (first_bad == LLMT_OK) {
                first_bad = s;
                snprintf(bad_msg, sizeof bad_msg, "%s", ck->err.msg);
            }
        }
    }
    /* A failed chunk is forgiven only if a replica covered the same box. */
    for (size_t i = 0; i < nbad; i++) {
        int covered = 0;
        for (size_t j = 0; j < nhit && !covered; j++)
            covered = same_box(&t->chunks[hit[j]], &t->chunks[bad[i]], t->ndim);
        if (!covered) {
            free(hit);
            free(bad);
            return llmt__err_set(&ck->err, first_bad, "%s", bad_msg);
        }
    }
    free(hit);
    free(bad);
    if (got != want)
        return llmt__err_set(&ck->err, LLMT_ERR_NOT_FOUND,
                             "ckpt: read '%s': only %" PRId64 " of %" PRId64
                             " elements of the block were saved", name, got, want);
    return LLMT_OK;
}

static llmt_status put_text(llmt_ckpt *ck, const char *v, char *buf, size_t buflen,
                            size_t *needed)
{
    size_t n = strlen(v) + 1;
    if (needed)
        *needed = n;
    if (buflen < n) {
        if (buf && buflen) {
            memcpy(buf, v, buflen - 1);
            buf[buflen - 1] = 0;
        }
        return llmt__err_set(&ck->err, LLMT_ERR_BUFFER_TOO_SMALL,
                             "ckpt: value needs %zu bytes, buffer has %zu", n, buflen);
    }
    memcpy(buf, v, n);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_get_kv(llmt_ckpt *ck, const char *key, char *buf,
                                      size_t buflen, size_t *needed)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: get_kv", key);
    if (buflen)
        LLMT__NONNULL(&ck->err, "ckpt: get_kv", buf);
    llmt_status s = llmt__ckpt_need_open(ck);
    if (s != LLMT_OK)
        return s;
    for (size_t i = 0; i < ck->open.nkv; i++)
        if (!strcmp(ck->open.kv[i].key, key))
            return put_text(ck, ck->open.kv[i].val, buf, buflen, needed);
    return llmt__err_set(&ck->err, LLMT_ERR_NOT_FOUND, "ckpt: no key '%.255s' in step %" PRId64,
                         key, ck->open.step);
}

LLMT_API llmt_status llmt_ckpt_get_plan_json(llmt_ckpt *ck, char *buf, size_t buflen,
                                             size_t *needed)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    if (buflen)
        LLMT__NONNULL(&ck->err, "ckpt: get_plan_json", buf);
    llmt_status s = llmt__ckpt_need_open(ck);
    if (s != LLMT_OK)
        return s;
    return put_text(ck, ck->open.plan ? ck->open.plan : "null", buf, buflen, needed);
}

LLMT_API llmt_status llmt_ckpt_verify(llmt_ckpt *ck)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    llmt_status s = llmt__ckpt_need_open(ck);
    if (s == LLMT_OK && ck->open_mem) {
        /* gathered (memtier.c): the chunks this rank fetched whole; the
         * others are their owners' and were not sent here */
        const ck_manifest *m = &ck->open;
        for (size_t i = 0; i < m->ntensors; i++)
            for (size_t c = 0; c < m->tensors[i].nchunks; c++) {
                const ck_chunk *k = &m->tensors[i].chunks[c];
                const uint8_t *at = ck->buf + k->offset;
                llmt_status e = LLMT_OK;
                if (ck->mem_n > 0 &&
                    !(at = llmt__ckpt_gathered_span(ck, k->rank, k->offset, k->length, &e)))
                    continue;
                if (XXH64(at, (size_t)k->length, 0) != k->xxh)
                    return llmt__err_set(&ck->err, LLMT_ERR_CHECKSUM,
                                         "ckpt: tensor '%s' (host snapshot): checksum "
                                         "mismatch", m->tensors[i].name);
            }
        return LLMT_OK;
    }
    if (s == LLMT_OK)
        s = check_files(ck, ck->open_dir, &ck->open);
    if (s == LLMT_OK)
        s = verify_all(ck, ck->open_dir, &ck->open);
    return s;
}

static const char *st_dtype(llmt_dtype d)
{
    switch (d) {
    case LLMT_DTYPE_FP32: return "F32";
    case LLMT_DTYPE_BF16: return "BF16";
    case LLMT_DTYPE_FP16: return "F16";
    case LLMT_DTYPE_FP8_E4M3: return "F8_E4M3";
    case LLMT_DTYPE_FP8_E5M2: return "F8_E5M2";
    case LLMT_DTYPE_INT32: return "I32";
    case LLMT_DTYPE_INT64: return "I64";
    case LLMT_DTYPE_UINT16: return "U16";
    case LLMT_DTYPE_UINT8: return "U8";
    default: return NULL;
    }
}

/* JSON-escape into a growing string (names are already free of '"' and
 * '\\' and control characters; values of kv are not). */
static int sb_add(char **s, size_t *len, size_t *cap, const char *t, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap * 2 : 4096;
        while (nc < *len + n + 1)
            nc *= 2;
        char *p = realloc(*s, nc);
        if (!p)
            return 0;
        *s = p;
        *cap = nc;
    }
    memcpy(*s + *len, t, n);
    *len += n;
    (*s)[*len] = 0;
    return 1;
}

static int sb_str(char **s, size_t *len, size_t *cap, const char *v)
{
    if (!sb_add(s, len, cap, "\"", 1))
        return 0;
    for (const char *p = v; *p; p++) {
        char esc[8];
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            if (!sb_add(s, len, cap, esc, 2))
                return 0;
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            if (!sb_add(s, len, cap, esc, 6))
                return 0;
        } else if (!sb_add(s, len, cap, p, 1))
            return 0;
    }
    return sb_add(s, len, cap, "\"", 1);
}

LLMT_API llmt_status llmt_ckpt_export_safetensors(llmt_ckpt *ck, const char *path)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: export_safetensors", path);
    llmt_status s = llmt__ckpt_need_open(ck);
    if (s != LLMT_OK)
        return s;
    const ck_manifest *m = &ck->open;
    /* a name the header already has would be a duplicate JSON key there:
     * readers refuse the file or take either entry */
    for (size_t i = 0; i < m->ntensors; i++)
        if (!strcmp(m->tensors[i].name, "__metadata__"))
            return llmt__err_set(&ck->err, LLMT_ERR_UNSUPPORTED,
                                 "ckpt: export safetensors: tensor '__metadata__' has the name "
                                 "safetensors keeps for the metadata");
    for (size_t i = 0; i < m->nkv; i++)
        if (!strcmp(m->kv[i].key, "llmtrain.step"))
            return llmt__err_set(
                &ck->err, LLMT_ERR_UNSUPPORTED,
                "ckpt: export safetensors: key 'llmtrain.step' is the metadata "
                "entry the export writes the step to");
    char *h = NULL, num[160];
    size_t hl = 0, hc = 0;
    uint64_t off = 0;
    int ok = sb_add(&h, &hl, &hc, "{\"__metadata__\":{", 17);
    snprintf(num, sizeof num, "\"llmtrain.step\":\"%" PRId64 "\"", m->step);
    ok = ok && sb_add(&h, &hl, &hc, num, strlen(num));
    for (size_t i = 0; ok && i < m->nkv; i++) {
        ok = sb_add(&h, &hl, &hc, ",", 1) && sb_str(&h, &hl, &hc, m->kv[i].key) &&
             sb_add(&h, &hl, &hc, ":", 1) && sb_str(&h, &hl, &hc, m->kv[i].val);
    }
    ok = ok && sb_add(&h, &hl, &hc, "}", 1);
    for (size_t i = 0; ok && i < m->ntensors; i++) {
        const ck_tensor *t = &m->tensors[i];
        uint64_t nb = llmt_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++)
            nb *= (uint64_t)t->gshape[d];
        ok = sb_add(&h, &hl, &hc, ",", 1) && sb_str(&h, &hl, &hc, t->name);
        const char *sd = st_dtype(t->dtype);
        snprintf(num, sizeof num, ":{\"dtype\":\"%s\",\"shape\":[", sd ? sd : "U8");
        ok = ok && sb_add(&h, &hl, &hc, num, strlen(num));
        for (int d = 0; ok && d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%" PRId64, d ? "," : "", t->gshape[d]);
            ok = sb_add(&h, &hl, &hc, num, strlen(num));
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + nb);
        ok = ok && sb_add(&h, &hl, &hc, num, strlen(num));
        off += nb;
    }
    ok = ok && sb_add(&h, &hl, &hc, "}", 1);
    while (ok && hl % 8)
        ok = sb_add(&h, &hl, &hc, " ", 1);
    if (!ok) {
        free(h);
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    }
    char tmp[MAX_PATH];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(h);
        return llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: open %s: %s", tmp, strerror(errno));
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h, 1, hl, f) == hl;
    free(h);
    s = ok ? LLMT_OK : llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: write %s failed", tmp);
    for (size_t i = 0; s == LLMT_OK && i < m->ntensors; i++) {
        const ck_tensor *t = &m->tensors[i];
        llmt_tensor v;
        int64_t nb = (int64_t)llmt_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++)
            nb *= t->gshape[d]; /* bounded by the manifest checks */
        void *data = malloc(nb ? (size_t)nb : 1);
        if (data && (s = llmt_tensor_init(&v, sizeof v, t->dtype, t->ndim, t->gshape, data,
                                          LLMT_DEVICE_CPU, 0)) != LLMT_OK) {
            free(data);
            break;
        }
        if (!data) {
            s = llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY,
                              "ckpt: export: cannot hold tensor '%s' (%" PRId64 " bytes)",
                              t->name, nb);
            break;
        }
        s = llmt_ckpt_read(ck, t->name, &v, NULL);
        if (s == LLMT_OK && fwrite(v.data, 1, (size_t)nb, f) != (size_t)nb)
            s = llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: write %s failed", tmp);
        free(v.data);
    }
    if (fflush(f) || fsync(fileno(f)))
        if (s == LLMT_OK)
            s = llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: flush %s: %s", tmp, strerror(errno));
    fclose(f);
    if (s == LLMT_OK && rename(tmp, path))
        s = llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: rename to %s: %s", path, strerror(errno));
    if (s != LLMT_OK)
        unlink(tmp);
    return s;
}
