/* The memory tier across ranks. Under data parallelism a rank's snapshot
 * holds only its share of the replicated state (each replica's share is
 * saved once), so no rank can restore from its own snapshot alone; the
 * ranks together hold all of it. This opens a step from every rank's part
 * gathered in memory: a rank with a snapshot of the step contributes it
 * from host memory, a rank without one (a replaced process) its part file
 * from ROOT/step-N; nothing else is read from disk. Collective over a
 * communicator whose rank i is checkpoint rank i (as the peer tier). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "ckpt_internal.h"

/* This rank's part as a blob (the peer tier's format), from the snapshot. */
static llmt_status snapshot_blob(llmt_ckpt *ck, uint8_t **blob, uint64_t *len)
{
    char *js = llmt__ckpt_manifest_to_json(&ck->job);
    if (!js)
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    uint64_t jl = strlen(js), bl = ck->job_bytes;
    uint64_t total = (24 + jl + bl + 7) / 8 * 8;
    *blob = calloc(1, (size_t)total);
    if (!*blob) {
        free(js);
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    }
    memcpy(*blob, &jl, 8);
    memcpy(*blob + 8, &bl, 8);
    memcpy(*blob + 24, js, (size_t)jl);
    memcpy(*blob + 24 + jl, ck->buf, (size_t)bl);
    uint64_t h = XXH64(*blob + 24, (size_t)(jl + bl), 0);
    memcpy(*blob + 16, &h, 8);
    *len = total;
    free(js);
    return LLMT_OK;
}

/* Every rank's blob to every rank: sizes first, then one all-to-all. */
static llmt_status gather_blobs(llmt_ckpt *ck, llmt_comm *comm, int32_t w, const uint8_t *mine,
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
    for (int32_t r = 0; r < w; r++) { /* in int64 elements: blobs are padded to 8 */
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

llmt_status llmt__ckpt_open_gathered(llmt_ckpt *ck, llmt_comm *comm, int64_t step,
                                     int *from_memory)
{
    *from_memory = 0;
    int32_t w = 0, me = -1;
    if (llmt_comm_size(comm, &w) != LLMT_OK || llmt_comm_rank(comm, &me) != LLMT_OK || w < 1)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: memory tier: bad communicator");
    llmt_ckpt_wait(ck, -1);
    if (ck->have_snapshot && ck->job_status != LLMT_OK)
        llmt__ckpt_hash_job(ck); /* the write failed, perhaps before hashing */
    uint8_t *mine = NULL, *all = NULL;
    uint64_t n = 0;
    llmt_status s;
    if (ck->have_snapshot && ck->job.step == step) {
        s = snapshot_blob(ck, &mine, &n);
        *from_memory = 1;
    } else {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/step-%012" PRId64, ck->root, step);
        s = ck->node_local && !same_as_durable(ck, step, me)
                ? LLMT_ERR_NOT_FOUND
                : llmt__ckpt_load_part(ck, dir, me, &mine, &n);
        if (s != LLMT_OK && ck->node_local) { /* a rank now on another node: its */
            snprintf(dir, sizeof dir, "%s/step-%012" PRId64, ck->durable, step); /* copy */
            s = llmt__ckpt_load_part(ck, dir, me, &mine, &n);
        }
    }
    /* a rank without its part still takes part (0 bytes), then fails */
    char why[LLMT_ERR_MSG_MAX] = "";
    if (s != LLMT_OK) {
        snprintf(why, sizeof why, "%s", ck->err.msg);
        n = 0;
    }
    int64_t *sizes = calloc((size_t)w, sizeof *sizes);
    ck_manifest *parts = calloc((size_t)w, sizeof *parts);
    ck_manifest **pp = calloc((size_t)w, sizeof *pp);
    uint64_t *offs = calloc((size_t)w, sizeof *offs);
    llmt_status g =
        sizes && parts && pp && offs
            ? gather_blobs(ck, comm, w, mine ? mine : (const uint8_t *)"", n, &all, sizes)
            : llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: no memory");
    free(mine);
    if (g == LLMT_OK && s != LLMT_OK)
        g = llmt__err_set(&ck->err, s, "%s", why);
    uint64_t off = 0;
    int32_t parsed = 0;
    for (int32_t r = 0; g == LLMT_OK && r < w; r++) {
        const uint8_t *b = all + off;
        uint64_t at = off, len = (uint64_t)sizes[r], jl = 0, bl = 0, h = 0;
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
        if (jl > len - 24 || bl > len - 24 - jl || XXH64(b + 24, (size_t)(jl + bl), 0) != h) {
            g = llmt__err_set(&ck->err, LLMT_ERR_CHECKSUM,
                              "ckpt: memory tier: rank %d's part damaged in transit", (int)r);
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
        offs[r] = at + 24 + jl;
        if (parts[r].rank != r || parts[r].step != step)
            g = llmt__err_set(&ck->err, LLMT_ERR_FORMAT,
                              "ckpt: memory tier: rank %d sent rank %d's part of step %" PRId64
                              ", not of step %" PRId64,
                              (int)r, (int)parts[r].rank, parts[r].step, step);
    }
    ck_manifest merged;
    memset(&merged, 0, sizeof merged);
    if (g == LLMT_OK) {
        char e[LLMT_ERR_MSG_MAX];
        g = llmt__ckpt_manifest_merge(pp, (size_t)w, &merged, e, sizeof e);
        if (g != LLMT_OK)
            llmt__err_set(&ck->err, g, "ckpt: memory tier: step %" PRId64 ": %s", step, e);
    }
    for (int32_t r = 0; r < parsed; r++)
        llmt__ckpt_manifest_free(&parts[r]);
    free(parts);
    free(pp);
    free(sizes);
    if (g != LLMT_OK) {
        free(all);
        free(offs);
        return g;
    }
    llmt__ckpt_close_open(ck);
    ck->open = merged;
    ck->is_open = 1;
    ck->open_mem = 1;
    ck->mem_all = all;
    ck->mem_off = offs;
    ck->mem_n = w;
    return LLMT_OK;
}
