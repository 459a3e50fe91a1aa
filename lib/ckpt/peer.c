/* Peer tier: every rank keeps a replica of its partner's part of a step
 * (the data file and part manifest under ROOT/peer/step-N/, or the
 * directory llmt__ckpt_peer_config names), so a rank whose local disk is
 * lost gets its part back from the partner without shared storage. The
 * partners form a ring that alternates between nodes (below): rank r's
 * successor is on another node where there is one, so a node lost with its
 * disk leaves each of its ranks' replicas on a surviving node; on one node
 * the ring is r -> r+1. Both calls are collective over
 * a communicator whose ranks are the checkpoint ranks. The transport is a
 * small internal interface (ck_xport) with one implementation over
 * llmt_comm (all_gather + all_to_allv, in pieces), so another transport can
 * be dropped in. doc/checkpointing.md, "Tiers". */
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
#define PIECE ((size_t)16 << 20)

/* ---- the transport ---- */
typedef struct ck_xport {
    void *impl;
    int32_t rank, size;
    /* every rank contributes k u64; out gets size x k of them, rank r's
     * at out + r * k */
    llmt_status (*gather_u64)(void *impl, const uint64_t *v, size_t k, uint64_t *out);
    /* send `n` bytes to rank `to` and receive `m` bytes from rank `from`
     * (either may be 0 bytes); collective, every rank calls it */
    llmt_status (*shift)(void *impl, const void *send, size_t n, int32_t to,
                         void *recv, size_t m, int32_t from);
    const char *(*last_error)(void *impl);
} ck_xport;

typedef struct comm_impl {
    llmt_comm *comm;
    size_t *sc, *sd, *rc, *rd;
} comm_impl;

static llmt_status comm_gather(void *p, const uint64_t *v, size_t k, uint64_t *out)
{
    comm_impl *c = p;
    return llmt_comm_all_gather(c->comm, v, out, k, LLMT_DTYPE_INT64, NULL);
}

static llmt_status comm_shift(void *p, const void *send, size_t n, int32_t to, void *recv,
                              size_t m, int32_t from)
{
    comm_impl *c = p;
    int32_t w = 0;
    llmt_comm_size(c->comm, &w);
    for (int32_t i = 0; i < w; i++)
        c->sc[i] = c->sd[i] = c->rc[i] = c->rd[i] = 0;
    /* sizes are multiples of 8 bytes: moved as int64 elements (the
     * backends reduce and move the arithmetic types only) */
    if (n)
        c->sc[to] = n / 8;
    if (m)
        c->rc[from] = m / 8;
    static int64_t dummy_s, dummy_r;
    return llmt_comm_all_to_allv(c->comm, n ? send : &dummy_s, c->sc, c->sd,
                                 m ? recv : &dummy_r, c->rc, c->rd, LLMT_DTYPE_INT64, NULL);
}

static const char *comm_err(void *p)
{
    return llmt_comm_last_error(((comm_impl *)p)->comm);
}

static llmt_status xport_from_comm(llmt_ckpt *ck, llmt_comm *comm, ck_xport *x, comm_impl *c)
{
    memset(x, 0, sizeof *x);
    memset(c, 0, sizeof *c);
    int32_t r = -1, w = 0;
    if (llmt_comm_rank(comm, &r) != LLMT_OK || llmt_comm_size(comm, &w) != LLMT_OK)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT, "ckpt: peer: bad communicator");
    if (r != ck->opts.rank || w != ck->opts.world_size)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: peer: communicator rank %d of %d, the handle is rank %d "
                             "of %d", (int)r, (int)w, (int)ck->opts.rank,
                             (int)ck->opts.world_size);
    c->comm = comm;
    c->sc = calloc((size_t)w * 4, sizeof(size_t));
    if (!c->sc)
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    c->sd = c->sc + w;
    c->rc = c->sd + w;
    c->rd = c->rc + w;
    x->impl = c;
    x->rank = r;
    x->size = w;
    x->gather_u64 = comm_gather;
    x->shift = comm_shift;
    x->last_error = comm_err;
    return LLMT_OK;
}

/* ---- part files ---- */
static void part_path(char *buf, size_t n, const char *dir, int32_t rank, const char *ext)
{
    snprintf(buf, n, "%s/rank-%05d.%s", dir, (int)rank, ext);
}

static llmt_status slurp(llmt_ckpt *ck, const char *path, uint8_t **out, uint64_t *len)
{
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        llmt_status s = llmt__err_set(&ck->err, errno == ENOENT ? LLMT_ERR_NOT_FOUND : LLMT_ERR_IO,
                                      "ckpt: peer: %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return s;
    }
    uint8_t *b = malloc((size_t)st.st_size + 1);
    uint64_t got = 0;
    while (b && got < (uint64_t)st.st_size) {
        ssize_t r = pread(fd, b + got, (size_t)((uint64_t)st.st_size - got), (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (uint64_t)r;
    }
    close(fd);
    if (!b || got != (uint64_t)st.st_size) {
        free(b);
        return llmt__err_set(&ck->err, b ? LLMT_ERR_IO : LLMT_ERR_OUT_OF_MEMORY,
                             "ckpt: peer: cannot read %s", path);
    }
    *out = b;
    *len = got;
    return LLMT_OK;
}

/* Blob of a rank's part (ckpt_internal.h). */
llmt_status llmt__ckpt_load_part(llmt_ckpt *ck, const char *dir, int32_t rank, uint8_t **blob,
                                 uint64_t *len)
{
    char p[MAX_PATH];
    uint8_t *js = NULL, *bin = NULL;
    uint64_t jl = 0, bl = 0;
    part_path(p, sizeof p, dir, rank, "json");
    llmt_status s = slurp(ck, p, &js, &jl);
    if (s == LLMT_OK) {
        part_path(p, sizeof p, dir, rank, "bin");
        s = slurp(ck, p, &bin, &bl);
    }
    if (s == LLMT_OK) {
        uint64_t total = (24 + jl + bl + 7) / 8 * 8;
        *blob = calloc(1, (size_t)total);
        if (!*blob)
            s = llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
        else {
            memcpy(*blob, &jl, 8);
            memcpy(*blob + 8, &bl, 8);
            memcpy(*blob + 24, js, (size_t)jl);
            memcpy(*blob + 24 + jl, bin, (size_t)bl);
            uint64_t h = XXH64(*blob + 24, (size_t)(jl + bl), 0);
            memcpy(*blob + 16, &h, 8);
            *len = total;
        }
    }
    free(js);
    free(bin);
    return s;
}

/* Check a received blob (hash, part manifest of `rank` and `step`, data
 * size and chunk hashes) and write it into dir: data file first, then the
 * part manifest atomically. */
static llmt_status store_part(llmt_ckpt *ck, const char *dir, int32_t rank, int64_t step,
                              const uint8_t *blob, uint64_t len)
{
    uint64_t jl, bl, h;
    if (len < 24)
        return llmt__err_set(&ck->err, LLMT_ERR_FORMAT, "ckpt: peer: replica of rank %d is "
                             "%" PRIu64 " bytes", (int)rank, len);
    memcpy(&jl, blob, 8);
    memcpy(&bl, blob + 8, 8);
    memcpy(&h, blob + 16, 8);
    if (jl > len - 24 || bl > len - 24 - jl || XXH64(blob + 24, (size_t)(jl + bl), 0) != h)
        return llmt__err_set(&ck->err, LLMT_ERR_CHECKSUM,
                             "ckpt: peer: replica of rank %d step %" PRId64
                             " damaged in transit or storage", (int)rank, step);
    const uint8_t *bin = blob + 24 + jl;
    ck_manifest m;
    char e[LLMT_ERR_MSG_MAX];
    llmt_status s = llmt__ckpt_manifest_parse((const char *)blob + 24, (size_t)jl, 1, &m, e,
                                              sizeof e);
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: peer: replica of rank %d: %s", (int)rank, e);
    if (m.rank != rank || m.step != step || m.files[0].bytes != bl) {
        s = llmt__err_set(&ck->err, LLMT_ERR_FORMAT,
                          "ckpt: peer: replica holds rank %d step %" PRId64 " (%" PRIu64
                          " bytes), expected rank %d step %" PRId64 " (%" PRIu64 " bytes)",
                          (int)m.rank, m.step, m.files[0].bytes, (int)rank, step, bl);
    }
    for (size_t t = 0; s == LLMT_OK && t < m.ntensors; t++)
        for (size_t c = 0; s == LLMT_OK && c < m.tensors[t].nchunks; c++) {
            const ck_chunk *k = &m.tensors[t].chunks[c];
            if (XXH64(bin + k->offset, (size_t)k->length, 0) != k->xxh)
                s = llmt__err_set(&ck->err, LLMT_ERR_CHECKSUM,
                                  "ckpt: peer: replica of rank %d: tensor '%s' checksum "
                                  "mismatch", (int)rank, m.tensors[t].name);
        }
    llmt__ckpt_manifest_free(&m);
    if (s != LLMT_OK)
        return s;
    if (llmt__ckpt_mkdirs(dir))
        return llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: peer: mkdir %s: %s", dir,
                             strerror(errno));
    char p[MAX_PATH], name[32];
    part_path(p, sizeof p, dir, rank, "bin");
    /* write_file wants a multiple of CK_ALIGN from an aligned buffer: the
     * data file is one (the saver pads it); copy to an aligned buffer */
    uint8_t *al = NULL;
    if (bl % CK_ALIGN || posix_memalign((void **)&al, CK_ALIGN, bl ? (size_t)bl : CK_ALIGN))
        return llmt__err_set(&ck->err, bl % CK_ALIGN ? LLMT_ERR_FORMAT : LLMT_ERR_OUT_OF_MEMORY,
                             "ckpt: peer: replica data of rank %d: %" PRIu64 " bytes",
                             (int)rank, bl);
    memcpy(al, bin, (size_t)bl);
    int direct = 0;
    s = llmt__ckpt_write_file(p, al, bl, ck->opts.direct_io, &direct, NULL, e, sizeof e);
    free(al);
    if (s == LLMT_OK) {
        snprintf(name, sizeof name, "rank-%05d.json", (int)rank);
        s = llmt__ckpt_write_atomic(dir, name, (const char *)blob + 24, (size_t)jl, e,
                                    sizeof e);
    }
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: peer: %s", e);
    return LLMT_OK;
}

/* Move blobs: this rank sends `send` (n bytes) to `to` (-1: nothing)
 * and receives from `from` into a malloc'ed buffer, every rank's size and
 * destination being known (sizes[i], dests[i]: -1 sends nothing). In
 * pieces, the same number on every rank (collective). */
static llmt_status ring_exchange(llmt_ckpt *ck, ck_xport *x, const uint8_t *send, uint64_t n,
                                 int32_t to, int32_t from, const uint64_t *sizes,
                                 const int64_t *dests, uint8_t **recv, uint64_t *m)
{
    *recv = NULL;
    *m = 0;
    llmt_status s = LLMT_OK;
    uint64_t most = 0;
    for (int32_t i = 0; i < x->size; i++)
        most = sizes[i] > most ? sizes[i] : most;
    if (from >= 0 && dests[from] == x->rank) {
        *m = sizes[from];
        *recv = malloc(*m ? (size_t)*m : 1);
        if (!*recv)
            s = LLMT_ERR_OUT_OF_MEMORY;
    }
    /* a failure above still takes part so the others do not hang */
    for (uint64_t off = 0; off < most; off += PIECE) {
        size_t a = to >= 0 && off < n ? (size_t)(n - off < PIECE ? n - off : PIECE) : 0;
        size_t b = *recv && off < *m ? (size_t)(*m - off < PIECE ? *m - off : PIECE) : 0;
        llmt_status r = x->shift(x->impl, send + (a ? off : 0), a, to < 0 ? 0 : to,
                                 *recv ? *recv + (b ? off : 0) : NULL, b, from);
        if (r != LLMT_OK && s == LLMT_OK)
            s = r;
    }
    if (s != LLMT_OK) {
        free(*recv);
        *recv = NULL;
        return llmt__err_set(&ck->err, s, "ckpt: peer: exchange failed: %s",
                             s == LLMT_ERR_OUT_OF_MEMORY ? "out of memory"
                             : x->last_error             ? x->last_error(x->impl)
                                                         : llmt_status_string(s));
    }
    return LLMT_OK;
}

/* ring_exchange after gathering every rank's size and destination. */
static llmt_status ring_move(llmt_ckpt *ck, ck_xport *x, const uint8_t *send, uint64_t n,
                             int32_t to, int32_t from, uint8_t **recv, uint64_t *m)
{
    *recv = NULL;
    *m = 0;
    uint64_t *all = calloc(2 * (size_t)x->size, sizeof *all);
    uint64_t *sizes = calloc((size_t)x->size, sizeof *sizes);
    int64_t *dests = calloc((size_t)x->size, sizeof *dests);
    uint64_t v[2] = {n, (uint64_t)(to < 0 ? -1 : to)};
    llmt_status s =
        all && sizes && dests ? x->gather_u64(x->impl, v, 2, all) : LLMT_ERR_OUT_OF_MEMORY;
    for (int32_t i = 0; s == LLMT_OK && i < x->size; i++) {
        sizes[i] = all[2 * i];
        dests[i] = (int64_t)all[2 * i + 1];
    }
    if (s == LLMT_OK)
        s = ring_exchange(ck, x, send, n, to, from, sizes, dests, recv, m);
    else
        llmt__err_set(&ck->err, s, "ckpt: peer: exchange failed: %s",
                      s == LLMT_ERR_OUT_OF_MEMORY ? "out of memory"
                      : x->last_error             ? x->last_error(x->impl)
                                                  : llmt_status_string(s));
    free(all);
    free(sizes);
    free(dests);
    return s;
}

llmt_status llmt__ckpt_peer_config(llmt_ckpt *ck, const char *dir, uint64_t node, int node_set)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    char *d = NULL;
    if (dir && *dir) {
        if (strlen(dir) > MAX_PATH - 64)
            return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "ckpt: peer: directory path too long");
        if (!(d = strdup(dir)))
            return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
        if (llmt__ckpt_mkdirs(d)) {
            llmt_status s = llmt__err_set(&ck->err, LLMT_ERR_IO,
                                          "ckpt: peer: cannot create "
                                          "%s: %s",
                                          d, strerror(errno));
            free(d);
            return s;
        }
    }
    free(ck->peer_root);
    ck->peer_root = d;
    ck->peer_node = node;
    ck->peer_node_set = node_set;
    return LLMT_OK;
}

/* The directory of the replicas this rank keeps. */
static void peer_base(const llmt_ckpt *ck, char *buf, size_t n)
{
    if (ck->peer_root)
        snprintf(buf, n, "%s", ck->peer_root);
    else
        snprintf(buf, n, "%s/peer", ck->root);
}

static void peer_dir(const llmt_ckpt *ck, char *buf, size_t n, int64_t step)
{
    char b[MAX_PATH];
    peer_base(ck, b, sizeof b);
    snprintf(buf, n, "%s/step-%012" PRId64, b, step);
}

/* This rank's node: the key it was given, else its host name's hash
 * (ranks of one host are one node under any launcher). */
static uint64_t node_key(const llmt_ckpt *ck)
{
    if (ck->peer_node_set)
        return ck->peer_node;
    char h[256] = {0};
    if (gethostname(h, sizeof h - 1))
        return 0;
    return XXH64(h, strlen(h), 0);
}

/* A rank's node key and rank, sorted by key then rank (qsort). */
typedef struct {
    uint64_t key;
    int64_t ord;
    int32_t rank;
} ring_ent;

static int by_key(const void *a, const void *b)
{
    const ring_ent *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static int by_ord(const void *a, const void *b)
{
    const ring_ent *x = a, *y = b;
    if (x->ord != y->ord)
        return x->ord < y->ord ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The replica ring from every rank's node key: ranks are ordered by
 * (their index among their node's ranks, their node's lowest rank), so
 * the ring visits the first rank of every node, then the second of every
 * node, ...: consecutive ranks are on different nodes wherever the nodes
 * have ranks left (a node with more ranks than the others ends the ring
 * with neighbours of its own). ck->peer_succ[r] holds rank r's replica.
 * Two sorts, O(w log w), and only when the keys differ from the last
 * ring's: the keys travel with the sizes in the one all-gather a save
 * needs anyway (llmt_ckpt_peer_replicate), so a new communicator or a
 * rank moved to another node is seen at once, and a job of thousands of
 * ranks does not sort at every save. */
static llmt_status ring_update(llmt_ckpt *ck, int32_t w, const uint64_t *key)
{
    if (ck->peer_w == w && !memcmp(ck->peer_keys, key, (size_t)w * sizeof *key))
        return LLMT_OK;
    free(ck->peer_keys);
    free(ck->peer_succ);
    ck->peer_w = 0;
    ck->peer_keys = malloc((size_t)w * sizeof *ck->peer_keys);
    ck->peer_succ = malloc((size_t)w * sizeof *ck->peer_succ);
    ring_ent *e = calloc((size_t)w, sizeof *e);
    if (!ck->peer_keys || !ck->peer_succ || !e) {
        free(e);
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: peer: out of memory");
    }
    for (int32_t i = 0; i < w; i++)
        e[i] = (ring_ent){key[i], 0, i};
    qsort(e, (size_t)w, sizeof *e, by_key);
    /* within a node (a run of one key): its lowest rank first */
    for (int32_t i = 0, first = 0; i < w; i++) {
        if (i == 0 || e[i].key != e[i - 1].key)
            first = i;
        e[i].ord = (int64_t)(i - first) * w + e[first].rank;
    }
    qsort(e, (size_t)w, sizeof *e, by_ord);
    for (int32_t i = 0; i < w; i++)
        ck->peer_succ[e[i].rank] = e[(i + 1) % w].rank;
    free(e);
    memcpy(ck->peer_keys, key, (size_t)w * sizeof *key);
    ck->peer_w = w;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_peer_replicate(llmt_ckpt *ck, llmt_comm *comm, int64_t step)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: peer_replicate", comm);
    llmt_ckpt_wait(ck, -1); /* this rank's part must be on disk */
    ck_xport x;
    comm_impl ci;
    llmt_status s = xport_from_comm(ck, comm, &x, &ci);
    if (s != LLMT_OK)
        return s;
    char dir[MAX_PATH], pd[MAX_PATH];
    snprintf(dir, sizeof dir, "%s/step-%012" PRId64, ck->root, step);
    uint8_t *mine = NULL, *got = NULL;
    uint64_t n = 0, m = 0;
    int32_t w = x.size, r = x.rank;
    llmt_status own = llmt__ckpt_load_part(ck, dir, r, &mine, &n);
    char own_err[LLMT_ERR_MSG_MAX];
    snprintf(own_err, sizeof own_err, "%s", ck->err.msg);
    if (w == 1) {
        free(mine);
        free(ci.sc);
        return own == LLMT_OK ? LLMT_OK : own;
    }
    /* one all-gather: every rank's size (0: it has no part, sends
     * nothing, and its partner says so) and node key, from which the ring
     * (kept while the keys stay) gives each rank's destination */
    int32_t to = -1, from = -1;
    uint64_t v[2] = {own == LLMT_OK ? n : 0, node_key(ck)};
    uint64_t *kv = calloc(2 * (size_t)w, sizeof *kv);
    uint64_t *sizes = calloc((size_t)w, sizeof *sizes);
    int64_t *dests = calloc((size_t)w, sizeof *dests);
    s = kv && sizes && dests ? x.gather_u64(x.impl, v, 2, kv) : LLMT_ERR_OUT_OF_MEMORY;
    if (s != LLMT_OK)
        llmt__err_set(&ck->err, s, "ckpt: peer: node keys: %s",
                      s == LLMT_ERR_OUT_OF_MEMORY ? "out of memory" : x.last_error(x.impl));
    for (int32_t i = 0; s == LLMT_OK && i < w; i++) {
        sizes[i] = kv[2 * i];
        kv[i] = kv[2 * i + 1]; /* the keys, packed */
    }
    if (s == LLMT_OK)
        s = ring_update(ck, w, kv);
    for (int32_t i = 0; s == LLMT_OK && i < w; i++) {
        dests[i] = sizes[i] ? ck->peer_succ[i] : -1;
        if (ck->peer_succ[i] == r)
            from = i;
    }
    if (s == LLMT_OK) {
        to = own == LLMT_OK ? ck->peer_succ[r] : -1;
        s = ring_exchange(ck, &x, own == LLMT_OK ? mine : NULL, own == LLMT_OK ? n : 0, to,
                          from, sizes, dests, &got, &m);
    }
    free(kv);
    free(sizes);
    free(dests);
    free(mine);
    if (s == LLMT_OK && !got)
        s = llmt__err_set(&ck->err, LLMT_ERR_NOT_FOUND,
                          "ckpt: peer: rank %d sent no part of step %" PRId64, (int)from, step);
    if (s == LLMT_OK) {
        peer_dir(ck, pd, sizeof pd, step);
        s = store_part(ck, pd, from, step, got, m);
    }
    free(got);
    free(ci.sc);
    if (s == LLMT_OK && own != LLMT_OK)
        s = llmt__err_set(&ck->err, own, "%s", own_err);
    if (s == LLMT_OK) {
        char proot[MAX_PATH];
        peer_base(ck, proot, sizeof proot);
        /* replicas of older steps go; a replica directory never gets a
         * manifest.json, so keep only the newest steps by name */
        size_t cnt = 0;
        int64_t *all = llmt__ckpt_scan(proot, 0, &cnt);
        int keep = ck->opts.keep_last > 0 ? ck->opts.keep_last : 0;
        for (size_t i = 0; all && keep && i + (size_t)keep < cnt; i++) {
            char old[MAX_PATH];
            peer_dir(ck, old, sizeof old, all[i]);
            llmt__ckpt_rmdir(old);
        }
        free(all);
    }
    return s;
}

/* Is the replica of `rank`'s part of `step` kept here? */
static int holds_replica(const llmt_ckpt *ck, int64_t step, int32_t rank)
{
    char pd[MAX_PATH], p[MAX_PATH];
    struct stat st;
    peer_dir(ck, pd, sizeof pd, step);
    part_path(p, sizeof p, pd, rank, "json");
    if (stat(p, &st))
        return 0;
    part_path(p, sizeof p, pd, rank, "bin");
    return stat(p, &st) == 0;
}

/* The restore asks who holds each lost part instead of assuming the
 * ring's partner: the replicas were placed by the layout that saved them,
 * and the ranks may since have moved to other nodes (a spare promoted on
 * another node, a node lost). One round per lost part, every rank taking
 * part: the ranks say whether they keep its replica, the lowest one that
 * does (the owner itself first, whose replica directory a shared root may
 * hold) sends it. */
LLMT_API llmt_status llmt_ckpt_peer_restore(llmt_ckpt *ck, llmt_comm *comm, int64_t step,
                                            int32_t *restored)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: peer_restore", comm);
    if (restored)
        *restored = 0;
    llmt_ckpt_wait(ck, -1);
    ck_xport x;
    comm_impl ci;
    llmt_status s = xport_from_comm(ck, comm, &x, &ci);
    if (s != LLMT_OK)
        return s;
    int32_t w = x.size, r = x.rank;
    char dir[MAX_PATH], pd[MAX_PATH], p[MAX_PATH];
    snprintf(dir, sizeof dir, "%s/step-%012" PRId64, ck->root, step);
    peer_dir(ck, pd, sizeof pd, step);
    struct stat st;
    part_path(p, sizeof p, dir, r, "json");
    int have = stat(p, &st) == 0;
    part_path(p, sizeof p, dir, r, "bin");
    have = have && stat(p, &st) == 0;
    uint64_t *need = calloc((size_t)w, sizeof *need);
    uint64_t *hold = calloc((size_t)w, sizeof *hold);
    if (!need || !hold) {
        free(need);
        free(hold);
        free(ci.sc);
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    }
    uint64_t one = have ? 0 : 1;
    s = x.gather_u64(x.impl, &one, 1, need);
    llmt_status mine = LLMT_OK; /* this rank's own restore */
    for (int32_t q = 0; s == LLMT_OK && w > 1 && q < w; q++) {
        if (!need[q])
            continue;
        one = (uint64_t)holds_replica(ck, step, q);
        s = x.gather_u64(x.impl, &one, 1, hold);
        int32_t src = s == LLMT_OK && hold[q] ? q : -1;
        for (int32_t i = 0; s == LLMT_OK && src < 0 && i < w; i++)
            if (hold[i])
                src = i;
        if (s != LLMT_OK)
            break;
        uint8_t *blob = NULL, *got = NULL;
        uint64_t n = 0, m = 0;
        if (src == r) {
            if (llmt__ckpt_load_part(ck, pd, q, &blob, &n) != LLMT_OK)
                llmt__log(ck->ctx, LLMT_LOG_ERROR, "ckpt",
                          "peer: replica of rank %d step %" PRId64 " here: %s", (int)q, step,
                          ck->err.msg);
        }
        if (src == q && r == q) { /* its own replica directory holds it */
            got = blob;
            m = n;
            blob = NULL;
        } else if (src >= 0 && src != q) {
            /* the sender sends nothing when its replica is unreadable:
             * the owner then has none and says so */
            s = ring_move(ck, &x, blob, blob ? n : 0, src == r && blob ? q : -1, src, &got, &m);
        }
        free(blob);
        if (s == LLMT_OK && r == q) {
            if (!got)
                mine = llmt__err_set(&ck->err, LLMT_ERR_NOT_FOUND,
                                     "ckpt: peer: this rank's part of step %" PRId64
                                     " is lost and no replica of it is on any rank%s",
                                     step, src >= 0 ? " that could send it" : "");
            else {
                mine = store_part(ck, dir, r, step, got, m);
                if (mine == LLMT_OK && restored)
                    *restored = 1;
                if (mine == LLMT_OK && src == r)
                    llmt__log(ck->ctx, LLMT_LOG_WARN, "ckpt",
                              "peer: restored rank %d's part of "
                              "step %" PRId64 " from the replica in %s",
                              (int)r, step, pd);
                else if (mine == LLMT_OK)
                    llmt__log(ck->ctx, LLMT_LOG_WARN, "ckpt",
                              "peer: restored rank %d's part of "
                              "step %" PRId64 " from rank %d",
                              (int)r, step, (int)src);
            }
        }
        free(got);
    }
    free(need);
    free(hold);
    free(ci.sc);
    return s != LLMT_OK ? s : mine;
}
