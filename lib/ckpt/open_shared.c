/* Opening the newest usable step of a shared root from many ranks at once.
 *
 * A step is usable when its manifest parses and every data file it lists
 * exists with its size and a header naming the step, rank and world size.
 * llmt_ckpt_open_latest checks every file on every rank: with W ranks
 * that is W^2 opens and header reads on the shared file system at each
 * restore (16k ranks: 268M), and every rank read the manifest from it.
 * Here rank 0 reads each step's manifest and broadcasts it, the ranks
 * share the checks (rank k of the communicator checks the files of ranks
 * k, k + size, ...) and agree on the verdict, step by step, newest first,
 * so every rank opens the same step (or none does). The steps a rank tries come from its own listing;
 * a step some rank does not list fails there and is skipped by all. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"

/* The largest step below `below` in the ascending list v (-1: none). */
static int64_t next_below(const int64_t *v, size_t n, int64_t below)
{
    for (size_t i = n; i-- > 0;)
        if (v[i] < below)
            return v[i];
    return -1;
}

/* Step `cand` opened on every rank from the manifest rank 0 read and
 * broadcast (one read of it from the shared file system, not one per
 * rank), this rank checking its share of the data files. A status of
 * this rank's: the verdict is agreed on by the caller. */
static llmt_status open_candidate(llmt_ckpt *ck, llmt_comm *comm, int32_t me, int32_t w,
                                  int64_t cand)
{
    char *text = NULL;
    size_t len = 0;
    int64_t head[2] = {LLMT_OK, 0}; /* rank 0's read: status, length */
    if (me == 0) {
        char d[4200];
        snprintf(d, sizeof d, "%s/step-%012" PRId64, ck->root, cand);
        head[0] = llmt__ckpt_read_manifest(ck, d, &text, &len);
        head[1] = (int64_t)len;
    }
    llmt_status s = llmt_comm_broadcast(comm, head, 2, LLMT_DTYPE_INT64, 0, NULL);
    if (s == LLMT_OK && head[0] == LLMT_OK) {
        /* as int64 words (what every backend broadcasts): padded to 8 */
        size_t words = ((size_t)head[1] + 8) / 8;
        char *buf = calloc(words, 8);
        if (!buf)
            s = LLMT_ERR_OUT_OF_MEMORY; /* no way out of the collective: it fails */
        else if (me == 0)
            memcpy(buf, text, len);
        free(text);
        text = buf;
        if (s == LLMT_OK)
            s = llmt_comm_broadcast(comm, text, words, LLMT_DTYPE_INT64, 0, NULL);
        len = (size_t)head[1];
    }
    if (s != LLMT_OK) {
        free(text);
        return llmt__err_set(
            &ck->err, s, "ckpt: step %" PRId64 ": its manifest from rank 0: %s", cand,
            s == LLMT_ERR_OUT_OF_MEMORY ? "out of memory" : llmt_comm_last_error(comm));
    }
    if (head[0] != LLMT_OK) {
        free(text);
        if (me == 0)
            return (llmt_status)head[0]; /* its reason is on ck->err */
        return llmt__err_set(&ck->err, (llmt_status)head[0],
                             "ckpt: step %" PRId64 ": rank 0 could not read its manifest "
                             "(not committed?)",
                             cand);
    }
    ck->file_part = me;
    ck->file_parts = w;
    s = llmt__ckpt_open_step_text(ck, cand, text, len);
    ck->file_part = ck->file_parts = 0;
    free(text);
    return s;
}

llmt_status llmt__ckpt_open_latest_shared(llmt_ckpt *ck, llmt_comm *comm, int64_t below,
                                          ck_tried *t, int64_t *step)
{
    int32_t w = 0, me = -1;
    if (llmt_comm_size(comm, &w) != LLMT_OK || llmt_comm_rank(comm, &me) != LLMT_OK || w < 1)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: shared open: bad communicator");
    size_t n = 0;
    int64_t *v = llmt__ckpt_scan(ck->root, 0, &n);
    ck_tried own = {.len = 0};
    if (!t)
        t = &own;
    size_t skipped = 0;
    int listed = v != NULL;
    if (!listed && t->len < sizeof t->why) { /* takes part all the same, offering nothing */
        int k =
            snprintf(t->why + t->len, sizeof t->why - t->len, "\n  cannot list %s", ck->root);
        t->len += k > 0 ? (size_t)k : 0;
    }
    ck->files_checked = 0;
    for (;;) {
        /* the newest step any rank lists below the last one tried */
        int64_t cand = listed ? next_below(v, n, below) : -1;
        llmt_status s = llmt_comm_all_reduce(comm, &cand, &cand, 1, LLMT_DTYPE_INT64,
                                             LLMT_REDUCE_MAX, NULL);
        if (s != LLMT_OK) {
            free(v);
            return llmt__err_set(&ck->err, s, "ckpt: shared open: %s",
                                 llmt_comm_last_error(comm));
        }
        if (cand < 0)
            break;
        s = open_candidate(ck, comm, me, w, cand);
        /* the lowest rank whose share failed, or INT64_MAX */
        int64_t bad = s == LLMT_OK ? INT64_MAX : me;
        char mine[LLMT_ERR_MSG_MAX];
        snprintf(mine, sizeof mine, "%s", s == LLMT_OK ? "" : ck->err.msg);
        llmt_status a =
            llmt_comm_all_reduce(comm, &bad, &bad, 1, LLMT_DTYPE_INT64, LLMT_REDUCE_MIN, NULL);
        if (a != LLMT_OK) {
            free(v);
            return llmt__err_set(&ck->err, a, "ckpt: shared open: %s",
                                 llmt_comm_last_error(comm));
        }
        if (bad == INT64_MAX) {
            free(v);
            if (step)
                *step = cand;
            if (skipped)
                llmt__log(ck->ctx, LLMT_LOG_WARN, "ckpt",
                          "using step %" PRId64 " after skipping %zu newer one(s)", cand,
                          skipped);
            return LLMT_OK;
        }
        if (s == LLMT_OK)
            llmt__ckpt_close_open(ck);
        /* every rank says why: the reason of the lowest rank that found
         * the step unusable, from that rank (a file only it checked) */
        int64_t said[LLMT_ERR_MSG_MAX / 8];
        memset(said, 0, sizeof said);
        if (me == bad)
            snprintf((char *)said, sizeof said, "%s", mine);
        a = llmt_comm_broadcast(comm, said, sizeof said / 8, LLMT_DTYPE_INT64, (int32_t)bad,
                                NULL);
        ((char *)said)[sizeof said - 1] = 0;
        char one[LLMT_ERR_MSG_MAX];
        if (s != LLMT_OK) /* this rank's own reason */
            snprintf(one, sizeof one, "%s", mine);
        else if (a != LLMT_OK)
            snprintf(one, sizeof one, "rank %lld found it unusable", (long long)bad);
        else
            snprintf(one, sizeof one, "rank %lld: %.*s", (long long)bad, (int)sizeof one - 32,
                     (const char *)said);
        skipped++;
        llmt__ckpt_skip_note(ck, t, cand, one);
        below = cand;
    }
    if (t->n == 0 && !listed) /* nothing tried, and this rank could not look (v NULL) */
        return llmt__err_set(&ck->err, LLMT_ERR_NOT_FOUND,
                             "ckpt: no usable checkpoint in %s:%s", ck->root, t->why);
    free(v);
    return llmt__ckpt_none_usable(ck, t, " on every rank");
}
