/* The memory tier across ranks. Under data parallelism a rank's snapshot
 * holds only its share of the replicated state (each replica's share is
 * saved once), so no rank can restore from its own snapshot alone; the
 * ranks together hold all of it. This opens a step from every rank's part
 * held in memory: a rank with a snapshot of the step contributes it from
 * host memory, a rank without one (a replaced process) the spans asked
 * of its part file in ROOT/step-N (pread, never the whole file); nothing
 * else is read from disk. Collective over a
 * communicator whose rank i is checkpoint rank i (as the peer tier).
 *
 * Two exchanges: every rank's part manifest to every rank (small), then
 * only the data each rank's restore reads. The caller's plan runs the
 * restore's reads against the merged manifest with the handle recording
 * their byte spans; each rank then asks the owners for exactly those
 * spans. Sending every part to every rank instead made each rank hold
 * the whole checkpoint (all tensor, pipeline and data parallel shares)
 * for a moment, which does not fit in host memory at scale: with tp x pp
 * model shards a rank reads about 1/(tp pp) of it. */
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

static uint64_t pad8(uint64_t n)
{
    return (n + 7) / 8 * 8;
}

/* This rank's part: its manifest as JSON and its data file's bytes,
 * either in memory (the snapshot buffer) or in the part's data file,
 * read span by span when asked (a replaced rank never holds its whole
 * part file, which is as large as its share of the checkpoint). */
typedef struct own_part {
    char *json;          /* malloc'ed */
    const uint8_t *data; /* the snapshot buffer, or NULL */
    int fd;              /* else the data file (-1: none) */
    uint64_t bytes;
} own_part;

static void own_free(own_part *o)
{
    free(o->json);
    if (o->fd >= 0)
        close(o->fd);
    memset(o, 0, sizeof *o);
    o->fd = -1;
}

/* A part's manifest goes to every rank: only what the rank holds, not
 * the empty blocks by which the trainer names every tensor on every rank
 * (a part listing every tensor, times every rank, is gigabytes at
 * thousands of ranks); the merged manifest is read from, never written,
 * so the tensors' order does not matter here. */
static llmt_status own_from_snapshot(llmt_ckpt *ck, own_part *o)
{
    o->json = llmt__ckpt_manifest_to_json_held(&ck->job);
    if (!o->json)
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    o->data = ck->buf;
    o->bytes = ck->job_bytes;
    return LLMT_OK;
}

/* The part manifest (read whole: small) and the data file, opened for the
 * spans the others ask. A missing or unreadable file fails here, naming
 * it; a damaged one is caught by the readers' block hashes. */
static llmt_status own_from_dir(llmt_ckpt *ck, const char *dir, int32_t me, own_part *o)
{
    char path[4096], e[LLMT_ERR_MSG_MAX];
    snprintf(path, sizeof path, "%s/rank-%05d.json", dir, (int)me);
    char *js = NULL;
    size_t jl = 0;
    llmt_status s = llmt__ckpt_read_small(path, (size_t)1 << 30, &js, &jl, e, sizeof e);
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: memory tier: %s", e);
    ck_manifest m;
    s = llmt__ckpt_manifest_parse(js, jl, 1, &m, e, sizeof e);
    free(js);
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: %s: %s", path, e);
    o->json = llmt__ckpt_manifest_to_json_held(&m);
    llmt__ckpt_manifest_free(&m);
    if (!o->json)
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    snprintf(path, sizeof path, "%s/rank-%05d.bin", dir, (int)me);
    struct stat st;
    o->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (o->fd < 0 || fstat(o->fd, &st))
        return llmt__err_set(&ck->err, errno == ENOENT ? LLMT_ERR_NOT_FOUND : LLMT_ERR_IO,
                             "ckpt: memory tier: %s: %s", path, strerror(errno));
    o->bytes = (uint64_t)st.st_size;
    return LLMT_OK;
}

/* With a node-local root: whether this node's part of `step` for `rank`
 * is the one the durable tier committed (its part manifest, which holds
 * every hash, the same bytes: save.c copies it verbatim). Another
 * attempt at the step, written here in an earlier generation by a rank
 * that has since moved, is not. */
static int same_as_durable(llmt_ckpt *ck, int64_t step, int32_t rank)
{
    char a[4096], b[4096], e[256];
    snprintf(a, sizeof a, "%s/step-%012" PRId64 "/rank-%05d.json", ck->root, step, (int)rank);
    snprintf(b, sizeof b, "%s/step-%012" PRId64 "/rank-%05d.json", ck->durable, step,
             (int)rank);
    char *x = NULL, *y = NULL;
    size_t xl = 0, yl = 0;
    int same = llmt__ckpt_read_small(a, (size_t)1 << 30, &x, &xl, e, sizeof e) == LLMT_OK &&
               llmt__ckpt_read_small(b, (size_t)1 << 30, &y, &yl, e, sizeof e) == LLMT_OK &&
               xl == yl && memcmp(x, y, xl) == 0;
    free(x);
    free(y);
    return same;
}

/* This rank's part of `step`: its snapshot when it holds that step, else
 * its part file (with node-local roots: this node's copy when it is the
 * committed one, else the durable tier's). */
static llmt_status own_part_of(llmt_ckpt *ck, int64_t step, int32_t me, own_part *o,
                               int *from_memory)
{
    if (ck->have_snapshot && ck->job.step == step) {
        *from_memory = 1;
        return own_from_snapshot(ck, o);
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/step-%012" PRId64, ck->root, step);
    llmt_status s = ck->node_local && !same_as_durable(ck, step, me)
                        ? LLMT_ERR_NOT_FOUND
                        : own_from_dir(ck, dir, me, o);
    if (s != LLMT_OK && ck->node_local) { /* a rank now on another node: its */
        own_free(o);                      /* copy in the durable tier */
        snprintf(dir, sizeof dir, "%s/step-%012" PRId64, ck->durable, step);
        s = own_from_dir(ck, dir, me, o);
    }
    return s;
}

/* Every rank's buffer to every rank: sizes first, then one all-to-all.
 * `n` is a multiple of 8. */
static llmt_status all_gatherv(llmt_ckpt *ck, llmt_comm *comm, int32_t w, const uint8_t *mine,
                               uint64_t n, uint8_t **all, int64_t *sizes)
{
    int64_t me = (int64_t)n;
    llmt_status s = llmt_comm_all_gather(comm, &me, sizes, 1, LLMT_DTYPE_INT64, NULL);
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: memory tier: %s", llmt_comm_last_error(comm));
    size_t *sc = calloc((size_t)w * 4, sizeof *sc);
    uint64_t total = 0;
    for (int32_t r = 0; r < w; r++)
        total += (uint64_t)sizes[r];
    *all = malloc(total ? (size_t)total : 8);
    if (!sc || !*all) {
        free(sc);
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    }
    size_t *sd = sc + w, *rc = sc + 2 * w, *rd = sc + 3 * w;
    uint64_t off = 0;
    for (int32_t r = 0; r < w; r++) { /* in int64 elements */
        sc[r] = n / 8;
        sd[r] = 0;
        rc[r] = (size_t)sizes[r] / 8;
        rd[r] = off / 8;
        off += (uint64_t)sizes[r];
    }
    s = llmt_comm_all_to_allv(comm, mine, sc, sd, *all, rc, rd, LLMT_DTYPE_INT64, NULL);
    free(sc);
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: memory tier: %s", llmt_comm_last_error(comm));
    return LLMT_OK;
}

/* The manifest exchange's unit: u64 json length, u64 data length, u64
 * xxh64 of the json, the json, zero padding to 8. Empty: no part. */
static uint8_t *head_of(const own_part *o, uint64_t *n)
{
    uint64_t jl = strlen(o->json);
    *n = 24 + pad8(jl);
    uint8_t *h = calloc(1, (size_t)*n);
    if (!h)
        return NULL;
    uint64_t x = XXH64(o->json, (size_t)jl, 0);
    memcpy(h, &jl, 8);
    memcpy(h + 8, &o->bytes, 8);
    memcpy(h + 16, &x, 8);
    memcpy(h + 24, o->json, (size_t)jl);
    return h;
}

/* Every rank's part manifest from the gathered heads, merged into *merged;
 * *parts_bytes: every part's data together. The same bytes on every rank,
 * so every rank reaches the same verdict. */
static llmt_status merge_heads(llmt_ckpt *ck, int32_t w, int64_t step, const uint8_t *all,
                               const int64_t *sizes, ck_manifest *merged, uint64_t *parts_bytes)
{
    ck_manifest *parts = calloc((size_t)w, sizeof *parts);
    ck_manifest **pp = calloc((size_t)w, sizeof *pp);
    llmt_status g =
        parts && pp ? LLMT_OK
                    : llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    uint64_t off = 0;
    int32_t parsed = 0;
    *parts_bytes = 0;
    for (int32_t r = 0; g == LLMT_OK && r < w; r++) {
        const uint8_t *b = all + off;
        uint64_t len = (uint64_t)sizes[r], jl = 0, bl = 0, h = 0;
        off += len;
        if (len < 24) {
            g = llmt__err_set(&ck->err, LLMT_ERR_NOT_FOUND,
                              "ckpt: memory tier: rank %d has no part of step %" PRId64, (int)r,
                              step);
            break;
        }
        memcpy(&jl, b, 8);
        memcpy(&bl, b + 8, 8);
        memcpy(&h, b + 16, 8);
        if (jl > len - 24 || bl > CK_MAX_BYTES || XXH64(b + 24, (size_t)jl, 0) != h) {
            g = llmt__err_set(&ck->err, LLMT_ERR_CHECKSUM,
                              "ckpt: memory tier: rank %d's part manifest damaged in transit",
                              (int)r);
            break;
        }
        char e[LLMT_ERR_MSG_MAX];
        g = llmt__ckpt_manifest_parse((const char *)b + 24, (size_t)jl, 1, &parts[r], e,
                                      sizeof e);
        if (g != LLMT_OK) {
            llmt__err_set(&ck->err, g, "ckpt: memory tier: rank %d: %s", (int)r, e);
            break;
        }
        parsed = r + 1;
        pp[r] = &parts[r];
        *parts_bytes += bl;
        if (parts[r].rank != r || parts[r].step != step)
            g = llmt__err_set(&ck->err, LLMT_ERR_FORMAT,
                              "ckpt: memory tier: rank %d sent rank %d's part of step %" PRId64
                              ", not of step %" PRId64,
                              (int)r, (int)parts[r].rank, parts[r].step, step);
        for (size_t t = 0; g == LLMT_OK && t < parts[r].ntensors; t++)
            for (size_t c = 0; c < parts[r].tensors[t].nchunks; c++) {
                const ck_chunk *k = &parts[r].tensors[t].chunks[c];
                if (k->offset > bl || k->length > bl - k->offset) {
                    g = llmt__err_set(&ck->err, LLMT_ERR_FORMAT,
                                      "ckpt: memory tier: rank %d's tensor '%s' lies outside "
                                      "its %" PRIu64 " bytes of data",
                                      (int)r, parts[r].tensors[t].name, bl);
                    break;
                }
            }
    }
    if (g == LLMT_OK) {
        char e[LLMT_ERR_MSG_MAX];
        g = llmt__ckpt_manifest_merge(pp, (size_t)w, merged, e, sizeof e);
        if (g != LLMT_OK)
            llmt__err_set(&ck->err, g, "ckpt: memory tier: step %" PRId64 ": %s", step, e);
    }
    for (int32_t r = 0; r < parsed; r++)
        llmt__ckpt_manifest_free(&parts[r]);
    free(parts);
    free(pp);
    return g;
}

static int span_cmp(const void *a, const void *b)
{
    const ck_span *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Sorted by rank and offset, overlapping or touching spans joined. */
static void join_spans(llmt_ckpt *ck)
{
    if (!ck->mem_nspans)
        return;
    qsort(ck->mem_spans, ck->mem_nspans, sizeof *ck->mem_spans, span_cmp);
    size_t n = 0;
    for (size_t i = 1; i < ck->mem_nspans; i++) {
        ck_span *a = &ck->mem_spans[n], *b = &ck->mem_spans[i];
        if (b->rank == a->rank && b->off <= a->off + a->len) {
            uint64_t end =
                b->off + b->len > a->off + a->len ? b->off + b->len : a->off + a->len;
            a->len = end - a->off;
        } else {
            ck->mem_spans[++n] = *b;
        }
    }
    ck->mem_nspans = n + 1;
}

/* What rank `r` asks (off, len pairs at req, n of them) from this rank's
 * part, packed: each span's bytes padded to 8, then its xxh64. A span
 * outside the part (a bug, or a damaged manifest) goes as zeros with a
 * hash that cannot match, so the asker fails naming it. */
static void serve(const own_part *o, const int64_t *req, int64_t n, uint8_t *out)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t off = (uint64_t)req[2 * i], len = (uint64_t)req[2 * i + 1], h;
        int in = off <= o->bytes && len <= o->bytes - off;
        if (in && o->data) {
            memcpy(out, o->data + off, (size_t)len);
            h = XXH64(out, (size_t)len, 0);
        } else if (in && o->fd >= 0 && llmt__ckpt_pread_all(o->fd, out, len, off) == LLMT_OK) {
            h = XXH64(out, (size_t)len, 0);
        } else {
            memset(out, 0, (size_t)len);
            h = ~XXH64(out, (size_t)len, 0);
        }
        memset(out + len, 0, (size_t)(pad8(len) - len));
        memcpy(out + pad8(len), &h, 8);
        out += pad8(len) + 8;
    }
}

/* The data exchange: every rank asks each owner for the spans recorded
 * (ck->mem_spans, joined), the owners answer from their parts. Every rank
 * makes the same three collectives whatever its plan did (a rank whose
 * plan failed asks nothing but answers). */
static llmt_status fetch(llmt_ckpt *ck, llmt_comm *comm, int32_t w, const own_part *o)
{
    join_spans(ck);
    size_t ns = ck->mem_nspans;
    /* counts and displacements (int64 elements): requests sent, received;
     * answers sent, received */
    size_t *c = calloc((size_t)w * 8, sizeof *c);
    /* ask[q]: how many spans this rank asks of rank q; asked[r]: how many
     * rank r asks of this one (one all-to-all of counts: O(w) per rank) */
    int64_t *ask = calloc((size_t)w * 2, sizeof *ask), *asked = ask ? ask + w : NULL;
    int64_t *req = malloc((ns ? ns : 1) * 2 * sizeof *req);
    int64_t *in = NULL;
    uint8_t *out = NULL;
    llmt_status s = c && ask && req ? LLMT_OK : LLMT_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; s == LLMT_OK && i < ns; i++) {
        ask[ck->mem_spans[i].rank]++;
        req[2 * i] = (int64_t)ck->mem_spans[i].off;
        req[2 * i + 1] = (int64_t)ck->mem_spans[i].len;
    }
    size_t *qsc = c, *qsd = c + w, *qrc = c + 2 * w, *qrd = c + 3 * w;
    size_t *asc = c + 4 * w, *asd = c + 5 * w, *arc = c + 6 * w, *ard = c + 7 * w;
    for (int32_t q = 0; s == LLMT_OK && q < w; q++) {
        qsc[q] = qrc[q] = 1;
        qsd[q] = qrd[q] = (size_t)q;
    }
    if (s == LLMT_OK)
        s = llmt_comm_all_to_allv(comm, ask, qsc, qsd, asked, qrc, qrd, LLMT_DTYPE_INT64, NULL);
    size_t so = 0, ro = 0;
    for (int32_t q = 0; s == LLMT_OK && q < w; q++) {
        qsc[q] = (size_t)ask[q] * 2;
        qsd[q] = so;
        so += qsc[q];
        qrc[q] = (size_t)asked[q] * 2;
        qrd[q] = ro;
        ro += qrc[q];
    }
    if (s == LLMT_OK && !(in = malloc((ro ? ro : 1) * sizeof *in)))
        s = LLMT_ERR_OUT_OF_MEMORY;
    if (s == LLMT_OK)
        s = llmt_comm_all_to_allv(comm, req, qsc, qsd, in, qrc, qrd, LLMT_DTYPE_INT64, NULL);
    /* the answers' sizes: each span padded to 8 bytes, then its hash */
    uint64_t out_bytes = 0, in_bytes = 0;
    size_t at = 0;
    for (int32_t q = 0; s == LLMT_OK && q < w; q++) {
        uint64_t b = 0;
        for (size_t i = 0; i < qrc[q] / 2; i++) {
            int64_t len = in[qrd[q] + 2 * i + 1];
            if (len < 0 || (uint64_t)len > CK_MAX_BYTES)
                len = 0; /* hostile: answered as an empty span that fails */
            in[qrd[q] + 2 * i + 1] = len;
            b += pad8((uint64_t)len) + 8;
        }
        asc[q] = (size_t)(b / 8);
        asd[q] = (size_t)(out_bytes / 8);
        out_bytes += b;
        b = 0;
        for (int64_t i = 0; i < ask[q]; i++, at++)
            b += pad8(ck->mem_spans[at].len) + 8;
        arc[q] = (size_t)(b / 8);
        ard[q] = (size_t)(in_bytes / 8);
        in_bytes += b;
    }
    if (s == LLMT_OK) {
        out = malloc(out_bytes ? (size_t)out_bytes : 8);
        ck->mem_data = malloc(in_bytes ? (size_t)in_bytes : 8);
        if (!out || !ck->mem_data)
            s = LLMT_ERR_OUT_OF_MEMORY;
    }
    for (int32_t q = 0; s == LLMT_OK && q < w; q++)
        serve(o, in + qrd[q], (int64_t)qrc[q] / 2, out + asd[q] * 8);
    if (s == LLMT_OK)
        s = llmt_comm_all_to_allv(comm, out, asc, asd, ck->mem_data, arc, ard, LLMT_DTYPE_INT64,
                                  NULL);
    free(out);
    free(in);
    free(req);
    free(ask);
    free(c);
    if (s == LLMT_ERR_OUT_OF_MEMORY)
        return llmt__err_set(&ck->err, s, "ckpt: memory tier: out of memory");
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: memory tier: %s", llmt_comm_last_error(comm));
    /* check each answer and point the spans at it */
    const uint8_t *p = ck->mem_data;
    ck->mem_fetched = 0;
    for (size_t i = 0; i < ns; i++) {
        ck_span *sp = &ck->mem_spans[i];
        uint64_t h;
        memcpy(&h, p + pad8(sp->len), 8);
        if (XXH64(p, (size_t)sp->len, 0) != h)
            return llmt__err_set(&ck->err, LLMT_ERR_CHECKSUM,
                                 "ckpt: memory tier: bytes [%" PRIu64 ", +%" PRIu64
                                 ") of rank %d's part damaged in transit (or outside it)",
                                 sp->off, sp->len, (int)sp->rank);
        sp->data = p;
        ck->mem_fetched += sp->len;
        p += pad8(sp->len) + 8;
    }
    return LLMT_OK;
}

const uint8_t *llmt__ckpt_gathered_span(llmt_ckpt *ck, int32_t rank, uint64_t off, uint64_t len,
                                        llmt_status *err)
{
    *err = LLMT_OK;
    if (ck->mem_plan) {
        if (ck->mem_nspans == ck->mem_spancap) {
            size_t cap = ck->mem_spancap ? 2 * ck->mem_spancap : 64;
            ck_span *v = realloc(ck->mem_spans, cap * sizeof *v);
            if (!v) {
                *err = llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
                return NULL;
            }
            ck->mem_spans = v;
            ck->mem_spancap = cap;
        }
        ck->mem_spans[ck->mem_nspans++] = (ck_span){rank, off, len, NULL};
        return NULL;
    }
    /* the last span that starts at or before off */
    size_t lo = 0, hi = ck->mem_nspans;
    ck_span key = {rank, off, 0, NULL};
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (span_cmp(&ck->mem_spans[mid], &key) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const ck_span *sp = &ck->mem_spans[lo - 1];
    if (sp->rank != rank || !sp->data || off + len > sp->off + sp->len)
        return NULL;
    return sp->data + (off - sp->off);
}

void llmt__ckpt_gathered_bytes(const llmt_ckpt *ck, uint64_t *fetched, uint64_t *parts)
{
    *fetched = ck->mem_fetched;
    *parts = ck->mem_parts;
}

llmt_status llmt__ckpt_open_gathered(llmt_ckpt *ck, llmt_comm *comm, int64_t step,
                                     int *from_memory, llmt__ckpt_plan_fn plan, void *arg)
{
    *from_memory = 0;
    ck->mem_fetched = ck->mem_parts = 0;
    int32_t w = 0, me = -1;
    if (llmt_comm_size(comm, &w) != LLMT_OK || llmt_comm_rank(comm, &me) != LLMT_OK || w < 1)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: memory tier: bad communicator");
    llmt_ckpt_wait(ck, -1);
    if (ck->have_snapshot && ck->job_status != LLMT_OK)
        llmt__ckpt_hash_job(ck); /* the write failed, perhaps before hashing */
    own_part o;
    memset(&o, 0, sizeof o);
    o.fd = -1;
    llmt_status s = own_part_of(ck, step, me, &o, from_memory);
    uint64_t hn = 0;
    uint8_t *head = s == LLMT_OK ? head_of(&o, &hn) : NULL;
    if (s == LLMT_OK && !head)
        s = llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    /* a rank without its part still takes part (0 bytes), then fails */
    char why[LLMT_ERR_MSG_MAX] = "";
    if (s != LLMT_OK) {
        snprintf(why, sizeof why, "%s", ck->err.msg);
        hn = 0;
    }
    int64_t *sizes = calloc((size_t)w, sizeof *sizes);
    uint8_t *all = NULL;
    llmt_status g =
        sizes ? all_gatherv(ck, comm, w, head ? head : (const uint8_t *)"", hn, &all, sizes)
              : llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: no memory");
    free(head);
    if (g == LLMT_OK && s != LLMT_OK)
        g = llmt__err_set(&ck->err, s, "%s", why);
    ck_manifest merged;
    memset(&merged, 0, sizeof merged);
    uint64_t parts_bytes = 0;
    if (g == LLMT_OK)
        g = merge_heads(ck, w, step, all, sizes, &merged, &parts_bytes);
    free(all);
    free(sizes);
    if (g != LLMT_OK) { /* the same verdict on every rank: no more collectives */
        own_free(&o);
        return g;
    }
    llmt__ckpt_close_open(ck);
    ck->open = merged;
    ck->is_open = 1;
    ck->open_mem = 1;
    ck->mem_n = w;
    ck->mem_parts = parts_bytes;
    /* the restore's reads, recorded */
    llmt_status p = LLMT_OK;
    char pwhy[LLMT_ERR_MSG_MAX] = "";
    if (plan) {
        ck->mem_plan = 1;
        p = plan(arg, ck);
        ck->mem_plan = 0;
        if (p != LLMT_OK) {
            snprintf(pwhy, sizeof pwhy, "%s", ck->err.msg);
            ck->mem_nspans = 0; /* asks nothing, but answers */
        }
    }
    g = fetch(ck, comm, w, &o);
    own_free(&o);
    if (g == LLMT_OK && p != LLMT_OK)
        g = llmt__err_set(&ck->err, p, "%s", pwhy);
    if (g != LLMT_OK) {
        llmt__ckpt_close_open(ck);
        ck->mem_fetched = ck->mem_parts = 0;
    }
    return g;
}
