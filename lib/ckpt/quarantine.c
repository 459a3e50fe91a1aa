/* Quarantine: a step directory that is not a valid committed checkpoint
 * (a crash before commit, a truncated data file, a garbage manifest) is
 * moved aside to ROOT/quarantine/ with a REASON file, never deleted. A run
 * that fell back to an older step will reach the bad step's number again;
 * before this existed the save refused ("already committed") on every
 * retry and the run was wedged. Moving rather than deleting keeps the
 * evidence (and any bytes a person may still want) until someone decides;
 * the directory scan ignores the quarantine, so nothing there is ever
 * resumed from by accident. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_internal.h"

#define MAX_PATH 4096

llmt_status llmt__ckpt_quarantine(llmt_ckpt *ck, int64_t step, const char *reason,
                                  char *dst, size_t dstlen)
{
    char src[MAX_PATH], qdir[MAX_PATH], to[MAX_PATH], stamp[32];
    snprintf(src, sizeof src, "%s/step-%012" PRId64, ck->root, step);
    snprintf(qdir, sizeof qdir, "%s/quarantine", ck->root);
    if (llmt__ckpt_mkdirs(qdir))
        return llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: quarantine: mkdir %s: %s", qdir,
                             strerror(errno));
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    /* a second quarantine of the same step in the same second gets .1, .2 */
    struct stat st;
    snprintf(to, sizeof to, "%s/step-%012" PRId64 ".%s", qdir, step, stamp);
    for (int k = 1; stat(to, &st) == 0; k++)
        snprintf(to, sizeof to, "%s/step-%012" PRId64 ".%s.%d", qdir, step, stamp, k);
    if (rename(src, to))
        return llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: quarantine: rename %s to %s: %s",
                             src, to, strerror(errno));
    llmt__ckpt_fsync_dir(qdir);
    llmt__ckpt_fsync_dir(ck->root);
    char text[LLMT_ERR_MSG_MAX + 128], e[256];
    int n = snprintf(text, sizeof text, "step %" PRId64 " quarantined %s\nreason: %s\n", step,
                     stamp, reason);
    if (llmt__ckpt_write_atomic(to, "REASON", text, (size_t)n < sizeof text ? (size_t)n
                                : sizeof text - 1, e, sizeof e) != LLMT_OK)
        llmt__log(ck->ctx, LLMT_LOG_WARN, "ckpt", "quarantine: %s", e);
    llmt__log(ck->ctx, LLMT_LOG_WARN, "ckpt", "moved step %" PRId64 " to %s: %s", step, to,
              reason);
    if (dst)
        snprintf(dst, dstlen, "%s", to);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_quarantine_newer(llmt_ckpt *ck, int64_t step, size_t *moved)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    if (moved)
        *moved = 0;
    if (step < -1)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: quarantine_newer: step %" PRId64 " (want >= -1)", step);
    pthread_mutex_lock(&ck->mu);
    int pending = ck->pending;
    pthread_mutex_unlock(&ck->mu);
    if (pending)
        return llmt__err_set(&ck->err, LLMT_ERR_STATE,
                             "ckpt: quarantine_newer while a save is in flight (wait first)");
    size_t n = 0;
    int64_t *v = llmt__ckpt_scan(ck->root, 0, &n);
    if (!v)
        return llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: cannot list %s: %s", ck->root,
                             strerror(errno));
    /* First decide, then move: a valid checkpoint among them means the
     * caller's idea of "newest usable" is wrong, and nothing is touched.
     * Newest first (v is ascending), so that the error names the newest
     * valid step, the one a resume would use, and the search ends there
     * (it once named the oldest valid one: "step 30" with 40 valid). */
    llmt_status s = LLMT_OK;
    for (size_t i = n; i-- > 0 && v[i] > step;) {
        char d[MAX_PATH];
        snprintf(d, sizeof d, "%s/step-%012" PRId64, ck->root, v[i]);
        if (llmt__ckpt_check_dir(ck, d, 1) != LLMT_OK)
            continue;
        if (step < 0)
            s = llmt__err_set(&ck->err, LLMT_ERR_STATE,
                              "ckpt: %s holds a valid checkpoint (the newest: step %" PRId64
                              "): not quarantining anything",
                              ck->root, v[i]);
        else
            s = llmt__err_set(&ck->err, LLMT_ERR_STATE,
                              "ckpt: step %" PRId64 " in %s is a valid checkpoint newer than "
                              "step %" PRId64 " (the newest valid one): not quarantining "
                              "anything",
                              v[i], ck->root, step);
        break;
    }
    for (size_t i = 0; i < n && s == LLMT_OK; i++) {
        if (v[i] <= step)
            continue;
        char d[MAX_PATH], why[LLMT_ERR_MSG_MAX];
        snprintf(d, sizeof d, "%s/step-%012" PRId64, ck->root, v[i]);
        llmt__ckpt_check_dir(ck, d, 1);
        snprintf(why, sizeof why, "%s", ck->err.msg);
        s = llmt__ckpt_quarantine(ck, v[i], why, NULL, 0);
        if (s == LLMT_OK && moved)
            (*moved)++;
    }
    free(v);
    return s;
}

/* Before a save writes root/step-<step>: a valid commit there is refused
 * (never overwrite saved data); anything else is quarantined. With several
 * ranks only rank 0 moves a directory that holds a (broken) manifest and
 * the others wait for it, so no rank moves a directory another rank has
 * already started to fill; an uncommitted directory of a multi-rank save
 * is reused as before (each rank replaces its own part), since a rank
 * cannot tell a stale part from a peer's fresh one. */
llmt_status llmt__ckpt_prepare_step(llmt_ckpt *ck, int64_t step)
{
    char d[MAX_PATH], mf[MAX_PATH];
    struct stat st;
    /* a node-local root's steps commit in the durable tier: one committed
     * there is never written again (a restore moves the broken ones aside
     * before the run saves, ckpt.c) */
    if (ck->node_local) {
        snprintf(mf, sizeof mf, "%s/step-%012" PRId64 "/manifest.json", ck->durable, step);
        if (stat(mf, &st) == 0)
            return llmt__err_set(&ck->err, LLMT_ERR_STATE,
                                 "ckpt: step %" PRId64 " is already committed in the durable "
                                 "tier %s (the node-local root's commits are there; resume "
                                 "from it or choose another directory)",
                                 step, ck->durable);
    }
    snprintf(d, sizeof d, "%s/step-%012" PRId64, ck->root, step);
    snprintf(mf, sizeof mf, "%s/manifest.json", d);
    if (stat(d, &st) != 0)
        return LLMT_OK;
    int multi = ck->opts.world_size > 1;
    if (stat(mf, &st) != 0) {
        if (multi)
            return LLMT_OK;
        return llmt__ckpt_quarantine(ck, step, "not committed (an interrupted save)", NULL, 0);
    }
    if (llmt__ckpt_check_dir(ck, d, 1) == LLMT_OK)
        return llmt__err_set(&ck->err, LLMT_ERR_STATE,
                             "ckpt: step %" PRId64 " is already committed in %s (a valid "
                             "checkpoint; resume from it or choose another directory)",
                             step, ck->root);
    char why[LLMT_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", ck->err.msg);
    if (!multi || ck->opts.rank == 0)
        return llmt__ckpt_quarantine(ck, step, why, NULL, 0);
    for (int i = 0; i < 6000; i++) { /* 60 s for rank 0 to move it */
        if (stat(mf, &st) != 0)
            return LLMT_OK;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return llmt__err_set(&ck->err, LLMT_ERR_TIMEOUT,
                         "ckpt: step %" PRId64 " in %s holds a broken checkpoint (%s) that "
                         "rank 0 did not quarantine within 60 s", step, ck->root, why);
}
