/* Quarantine: a step directory that is not a valid committed checkpoint
 * (a crash before commit, a truncated data file, a garbage manifest) is
 * moved aside to ROOT/quarantine/ with a REASON file, never deleted. A run
 * that fell back to an older step will reach the bad step's number again;
 * before this existed the save refused ("already committed") on every
 * retry and the run was wedged. Moving rather than deleting keeps the
 * evidence (and any bytes a person may still want) until someone decides;
 * the directory scan ignores the quarantine, so nothing there is ever
 * resumed from by accident. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
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

/* Whether `name` is a temporary file a writer of a step directory makes
 * (llmt__ckpt_tmp_name: .NAME.tmp.PID.TID, NAME a step's own file:
 * manifest.json, rank-NNNNN.bin, .json or .json.old); *pid gets PID. */
static int step_tmp_name(const char *name, long *pid)
{
    const char *at = strstr(name, ".tmp.");
    if (name[0] != '.' || !at)
        return 0;
    size_t n = (size_t)(at - name - 1);
    const char *f = name + 1;
    int ours = n == 13 && !strncmp(f, "manifest.json", 13);
    if (!ours && n >= 14 && !strncmp(f, "rank-", 5)) {
        int digits = 1;
        for (int i = 5; i < 10; i++)
            digits &= isdigit((unsigned char)f[i]) != 0;
        ours = digits && ((n == 14 && !strncmp(f + 10, ".bin", 4)) ||
                          (n == 15 && !strncmp(f + 10, ".json", 5)) ||
                          (n == 19 && !strncmp(f + 10, ".json.old", 9)));
    }
    const char *p = at + 5, *q = p;
    while (isdigit((unsigned char)*q))
        q++;
    if (!ours || q == p || q - p > 9 || *q != '.' || !isxdigit((unsigned char)q[1]))
        return 0;
    for (const char *t = q + 1; *t; t++)
        if (!isxdigit((unsigned char)*t))
            return 0;
    *pid = strtol(p, NULL, 10);
    return 1;
}

/* Whether a writer with this process id may still be running: this
 * process (another handle's writer thread), or a live process of that
 * id on this host. A process on another node sharing the root is not
 * seen from here: the caller's rule that no rank saves meanwhile covers
 * it. */
static int writer_may_live(long pid)
{
    if (pid <= 0 || pid == (long)getpid())
        return 1;
    return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
}

/* Remove the temporary files that writers which are gone left in the
 * committed step directories up to `upto` (a crash between a write and
 * its rename, in a step another attempt committed later): they held
 * their space until retention removed the step. Only files named as a
 * step writer's temporaries, only in committed steps (an uncommitted
 * one is quarantined or reused whole), never one whose writer may still
 * rename it. Returns how many went. */
static size_t remove_leftovers(llmt_ckpt *ck, int64_t upto)
{
    size_t n = 0, removed = 0;
    int64_t *v = llmt__ckpt_scan(ck->root, 1, &n);
    for (size_t i = 0; v && i < n && v[i] <= upto; i++) {
        char d[MAX_PATH];
        snprintf(d, sizeof d, "%s/step-%012" PRId64, ck->root, v[i]);
        DIR *dir = opendir(d);
        struct dirent *e;
        size_t here = 0;
        while (dir && (e = readdir(dir))) {
            long pid = 0;
            char p[MAX_PATH];
            struct stat st;
            snprintf(p, sizeof p, "%s/%s", d, e->d_name);
            if (!step_tmp_name(e->d_name, &pid) || writer_may_live(pid) || lstat(p, &st) ||
                !S_ISREG(st.st_mode) || unlink(p))
                continue;
            here++;
        }
        if (dir)
            closedir(dir);
        if (here)
            llmt__log(ck->ctx, LLMT_LOG_INFO, "ckpt",
                      "removed %zu temporary file(s) that gone writers left in %s", here, d);
        removed += here;
    }
    free(v);
    return removed;
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
    if (s == LLMT_OK) /* no rank saves now (the caller's rule): the steps kept */
        remove_leftovers(ck, step);
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
