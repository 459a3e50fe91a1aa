/* Whether every rank of the job sees one checkpoint root.
 *
 * A step commits when every rank's part is in one directory: the last
 * rank to write finds them all and merges them into manifest.json
 * (lib/ckpt/save.c). A root that is not one directory for every rank (the
 * same path on each node's own disk) would never commit a step: each
 * node's last rank finds only its own ranks' parts, every save is written
 * and none becomes a checkpoint, and the user learns of it at the first
 * restart, which starts from step 0. So the job checks at its start, once
 * the world group exists: rank 0 writes a file named by a fresh token into
 * the root, every rank looks for it (a shared filesystem's client may take
 * a moment to show a new name: looked for again for up to 2 s, 0.3 s
 * when a durable tier makes a miss harmless, below), and the
 * first rank that cannot see it is named. The peer tier's directory is
 * node-local on purpose and not checked.
 *
 * A node-local root is fine when there is a durable tier every rank sees
 * (checked the same way): the root then becomes each node's write buffer
 * and the steps commit in the durable tier (lib/ckpt/save.c,
 * llmt__ckpt_set_node_local), from which a restart reads them (ckpt.c).
 * Checked again at every in-place recovery: ranks may have moved. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "job/job.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

static uint64_t fresh_token(const llmt_job *j)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)j;
    x ^= x >> 33; /* splitmix64's finaliser: every bit of the inputs moves */
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x ? x : 1;
}

static void probe_path(char *p, size_t cap, const char *dir, uint64_t token)
{
    snprintf(p, cap, "%s/.llmt-shared-%016" PRIx64, dir, token);
}

/* 1 when the probe file is there and holds the token. */
static int sees(const char *p, uint64_t token, int tries_max)
{
    for (int tries = 0; tries < tries_max; tries++) {
        FILE *f = fopen(p, "r");
        uint64_t got = 0;
        int ok = f && fscanf(f, "%" SCNx64, &got) == 1 && got == token;
        if (f)
            fclose(f);
        if (ok)
            return 1;
        struct timespec nap = {0, 100 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    return 0;
}

/* Whether every rank sees a file rank 0 writes into `dir`: *first is the
 * first rank that does not (-1: all do), *blind how many do not.
 * Collective over the job's communicator. */
static llmt_status probe(llmt_job *j, const char *dir, const char *key, int32_t n, int32_t r,
                         int32_t *first, int32_t *blind, uint64_t *token)
{
    *first = -1;
    *blind = 0;
    /* rank 0's token and whether it could write the file */
    struct {
        uint64_t token; /* sent as an int64: the same 8 bytes */
        int64_t written;
    } msg = {0, 0};
    char p[JOB_PATH_MAX + 64], why[256] = "";
    if (r == 0) {
        msg.token = fresh_token(j);
        probe_path(p, sizeof p, dir, msg.token);
        FILE *f = fopen(p, "w");
        msg.written = f && fprintf(f, "%016" PRIx64 "\n", msg.token) > 0;
        if (!f || fclose(f) != 0)
            msg.written = 0;
        if (!msg.written)
            snprintf(why, sizeof why, "%s", strerror(errno));
    }
    llmt_status s = llmt_comm_broadcast(j->comm, &msg, 2, LLMT_DTYPE_INT64, 0, NULL);
    if (s != LLMT_OK) {
        if (r == 0 && msg.written)
            unlink(p);
        return FAIL(s, "%s: checking that every rank sees one root: %s", key,
                    llmt_comm_last_error(j->comm));
    }
    if (!msg.written)
        return FAIL(LLMT_ERR_IO, "%s: rank 0 cannot write into %s%s%s", key, dir,
                    why[0] ? ": " : "", why);
    probe_path(p, sizeof p, dir, msg.token);
    *token = msg.token;
    /* a shared filesystem's client may show a new name late: 2 s. With a
     * durable tier a rank that misses it is no harm (the roots are taken
     * as node-local: parts in the root, commits in the durable tier, both
     * right for a shared root too), so it looks for 0.3 s: a node-local
     * start or restart does not wait 2 s */
    int tries = j->durable_dir[0] && !strcmp(key, "checkpoint.dir") ? 3 : 21;
    int32_t mine = sees(p, msg.token, tries), all[LLMT_JOB_PROBE_MAX];
    int32_t *seen = n <= LLMT_JOB_PROBE_MAX ? all : malloc((size_t)n * sizeof *seen);
    if (!seen)
        return FAIL(LLMT_ERR_OUT_OF_MEMORY, "job: no memory");
    s = llmt_comm_all_gather(j->comm, &mine, seen, 1, LLMT_DTYPE_INT32, NULL);
    if (s != LLMT_OK) {
        if (seen != all)
            free(seen);
        if (r == 0)
            unlink(p);
        return FAIL(s, "%s: checking that every rank sees one root: %s", key,
                    llmt_comm_last_error(j->comm));
    }
    for (int32_t k = 0; k < n; k++)
        if (!seen[k]) {
            ++*blind;
            if (*first < 0)
                *first = k;
        }
    if (seen != all)
        free(seen);
    if (r == 0) /* every rank has looked (the all-gather) */
        unlink(p);
    return LLMT_OK;
}

llmt_status llmt__job_ckpt_shared(llmt_job *j)
{
    int32_t n = 1, r = 0, first = -1, blind = 0;
    if (!j->comm || llmt_comm_size(j->comm, &n) != LLMT_OK || n <= 1)
        return LLMT_OK;
    llmt_comm_rank(j->comm, &r);
    uint64_t token = 0;
    llmt_status s = probe(j, j->ckpt_dir, "checkpoint.dir", n, r, &first, &blind, &token);
    if (s != LLMT_OK)
        return s;
    /* rank 0's fresh token, which every rank now has, names the attempt
     * the saves from here on belong to: a part an earlier run (or the
     * generation before an in-place recovery) left in a step directory
     * carries another, and no rank commits the step with it (save.c) */
    llmt__ckpt_set_attempt(j->ck, token);
    /* shared (again, after a recovery that moved ranks): commit in the root */
    if (first < 0)
        return llmt__ckpt_set_node_local(j->ck, 0);
    if (!j->durable_dir[0])
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "checkpoint.dir: rank %d%s cannot see the file rank 0 wrote into the "
                    "checkpoint root (%s, as rank %d names it): the ranks' roots are not one "
                    "shared directory (a node's own disk under the same path?). A step "
                    "commits when every rank's part is in one directory, so no checkpoint "
                    "would ever be complete: put checkpoint.dir on a filesystem every node "
                    "shares, or add a durable tier on one (checkpoint.tiers, kind durable): "
                    "the steps then commit there and checkpoint.dir may stay node-local",
                    (int)first, blind > 1 ? " (and others)" : "", j->ckpt_dir, (int)r);
    int32_t dfirst = -1, dblind = 0;
    s = probe(j, j->durable_dir, "checkpoint.tiers durable", n, r, &dfirst, &dblind, &token);
    if (s != LLMT_OK)
        return s;
    if (dfirst >= 0)
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "checkpoint.tiers durable: rank %d%s cannot see the file rank 0 wrote into "
                    "the durable tier (%s), nor into checkpoint.dir (%s): with a node-local "
                    "checkpoint.dir the steps commit in the durable tier, which must be one "
                    "directory every rank shares",
                    (int)dfirst, dblind > 1 ? " (and others)" : "", j->durable_dir,
                    j->ckpt_dir);
    if (llmt__ckpt_set_node_local(j->ck, 1) != LLMT_OK)
        return FAIL(LLMT_ERR_INTERNAL, "checkpoint: %s", llmt_ckpt_last_error(j->ck));
    if (r == 0)
        llmt__log(j->ctx, LLMT_LOG_INFO, "job",
                  "checkpoint.dir %s is node-local (rank %d%s cannot see rank 0's): each "
                  "rank's part is written there and copied to the durable tier %s, where "
                  "the steps commit",
                  j->ckpt_dir, (int)first, blind > 1 ? " and others" : "", j->durable_dir);
    return LLMT_OK;
}
