/* A step saved again (after a crash, a rollback, a gang restart) while an
 * earlier attempt's part of it is still in its step directory,
 * uncommitted: two ranks (handles in one process) on one shared root, each
 * attempt's saves given the attempt identity every rank of it shares
 * (llmt__ckpt_set_attempt, as lib/job does with rank 0's token). Checked:
 *  - rank 1 saving the step before rank 0 saves it again does not commit
 *    it with rank 0's old part (before: committed, rank 0's block the old
 *    one, and the step verified); rank 0's save then commits it, both
 *    blocks the new attempt's;
 *  - the same with rank 0's save made first and its writer held before
 *    it has done anything (its first unlink or rename of its old part
 *    manifest, interposed
 *    here): rank 1's save does not commit the step meanwhile (before: it
 *    did, with rank 0's old part, which rank 0's writer then rewrote
 *    inside the committed step);
 *  - a part written without an identity (as before the field; "attempt"
 *    absent from its part manifest) does not commit with an attempt that
 *    has one; saves without one on every rank commit and load as before;
 *    a part of an attempt names it ("attempt": 16 hex digits), and so
 *    does the step's manifest when every part has the same;
 *  - without an identity (the C API's saves) rank 1 does commit a step
 *    with rank 0's old part while rank 0's writer has not started (the
 *    documented limit: call llmt_ckpt_quarantine_newer at resume), and
 *    rank 0's writer then leaves that commit as it is, its save failing
 *    with LLMT_ERR_STATE (before: it rewrote its part inside the
 *    committed step);
 *  - the same with rank 0's writer held past its look at the step's
 *    manifest, at its first removal of its old part manifest: the step
 *    rank 1 commits meanwhile stays byte for byte as committed and
 *    verifies, rank 0's save fails with LLMT_ERR_STATE, and no file of it
 *    stays there (before: the writer removed the committed step's part
 *    manifest and rewrote its data file with O_TRUNC: the committed step
 *    no longer verified);
 *  - a durable tier (not node-local) holding the step committed by an
 *    earlier attempt: the new commit's copy never leaves a committed
 *    durable step with files of both (uncommitted first, every file
 *    renamed into place), and ends as the new attempt's. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>

#include "check.h"
#include "ckpt/ckpt_internal.h"
#include "ckpt_util.h"

enum { N = 1024 };

/* -- rank 0's writer held at its first unlink (or stat) of a chosen path,
 * on a chosen thread (or any) -- */
enum { AT_UNLINK = 1, AT_STAT, AT_REMOVE };
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static char hold_path[4200];
static int hold_fn, hold_armed, hold_reached, hold_released, hold_any_thread;
static pthread_t hold_thread;

static void hold_point(int fn, const char *p)
{
    pthread_mutex_lock(&hold_mu);
    if (hold_armed && fn == hold_fn && !strcmp(p, hold_path) &&
        (hold_any_thread || pthread_equal(pthread_self(), hold_thread))) {
        hold_armed = 0;
        hold_reached = 1;
        pthread_cond_broadcast(&hold_cv);
        while (!hold_released)
            pthread_cond_wait(&hold_cv, &hold_mu);
    }
    pthread_mutex_unlock(&hold_mu);
}

int unlink(const char *p)
{
    hold_point(AT_UNLINK, p);
    hold_point(AT_REMOVE, p);
    return unlinkat(AT_FDCWD, p, 0);
}

/* AT_REMOVE: the first unlink of the path or rename of it elsewhere (a
 * writer setting its old part manifest aside) */
int rename(const char *from, const char *to)
{
    hold_point(AT_REMOVE, from);
    return renameat(AT_FDCWD, from, AT_FDCWD, to);
}

int stat(const char *restrict p, struct stat *restrict st)
{
    hold_point(AT_STAT, p);
    return fstatat(AT_FDCWD, p, st, 0);
}

/* the next `fn` of step's `file` (on rank ck's writer thread, or any when
 * ck is NULL) waits for hold_release */
static void hold_arm(int fn, const char *root, int64_t step, const char *file,
                     const llmt_ckpt *ck)
{
    pthread_mutex_lock(&hold_mu);
    snprintf(hold_path, sizeof hold_path, "%s/step-%012lld/%s", root, (long long)step, file);
    hold_fn = fn;
    hold_any_thread = ck == NULL;
    if (ck)
        hold_thread = ck->thread;
    hold_armed = 1;
    hold_reached = hold_released = 0;
    pthread_mutex_unlock(&hold_mu);
}

/* 1 when the writer reached the hold within 10 s */
static int hold_wait(void)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    pthread_mutex_lock(&hold_mu);
    while (!hold_reached && pthread_cond_timedwait(&hold_cv, &hold_mu, &dl) != ETIMEDOUT) {
    }
    int r = hold_reached;
    pthread_mutex_unlock(&hold_mu);
    return r;
}

static void hold_release(void)
{
    pthread_mutex_lock(&hold_mu);
    hold_armed = 0;
    hold_released = 1;
    pthread_cond_broadcast(&hold_cv);
    pthread_mutex_unlock(&hold_mu);
}

/* The text of step's `file`, malloc'ed ("" when unreadable). */
static char *slurp(const char *root, int64_t step, const char *file)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/step-%012lld/%s", root, (long long)step, file);
    FILE *f = fopen(p, "r");
    char *t = calloc(1, 1 << 20);
    if (f && t)
        t[fread(t, 1, (1 << 20) - 1, f)] = 0;
    if (f)
        fclose(f);
    return t;
}

/* Whether the committed step verifies and its "w" is seed `seed0` in
 * rank 0's block and `seed1` in rank 1's: read through a fresh handle. */
static int step_is(const char *root, int64_t step, int seed0, int seed1)
{
    float *x = committed_w(root, step, 2 * N, 1);
    int ok = x != NULL;
    for (int64_t i = 0; ok && i < 2 * N; i++)
        ok = x[i] == gval(i < N ? seed0 : seed1, i);
    free(x);
    return ok;
}

/* The seed rank 0's committed block of step holds (-1: none of these) */
static int block0_seed(const char *root, int64_t step, int a, int b)
{
    float *x = committed_w(root, step, 2 * N, 0);
    int seed = !x ? -1 : x[0] == gval(a, 0) ? a : x[0] == gval(b, 0) ? b : -1;
    free(x);
    return seed;
}

static void set_attempt(llmt_ckpt *r0, llmt_ckpt *r1, uint64_t a)
{
    llmt__ckpt_set_attempt(r0, a);
    llmt__ckpt_set_attempt(r1, a);
}

static void not_committed(const char *root, int64_t step, const char *what, int old, int now)
{
    int committed = step_has(root, step, "manifest.json");
    CHECK(!committed);
    if (committed)
        fprintf(stderr,
                "%s: step %lld committed by rank 1 alone, rank 0's block of seed %d (old "
                "attempt %d, new %d); verifies: %d\n",
                what, (long long)step, block0_seed(root, step, old, now), old, now,
                step_is(root, step, old, now));
}

/* Rank 1 saves step (attempt B) before rank 0 saves it again. */
static void rank1_first(const char *root, llmt_ckpt *r0, llmt_ckpt *r1)
{
    const int64_t step = 100;
    set_attempt(r0, r1, 0xa11ce);
    CHECK_STATUS(save_block(r0, step, 11, 0, 2, N, 0), LLMT_OK);
    set_attempt(r0, r1, 0xb0b);
    CHECK_STATUS(save_block(r1, step, 22, 1, 2, N, 0), LLMT_OK);
    not_committed(root, step, "rank 1 first", 11, 22);
    CHECK_STATUS(save_block(r0, step, 22, 0, 2, N, 0), LLMT_OK);
    CHECK(step_has(root, step, "manifest.json"));
    CHECK(step_is(root, step, 22, 22));
    char *m = slurp(root, step, "manifest.json");
    CHECK(m && strstr(m, "\"attempt\":\"0000000000000b0b\""));
    free(m);
}

static llmt_status save0_async(llmt_ckpt *r0, int64_t step, int seed)
{
    return save_block_nowait(r0, step, seed, 0, 2, N);
}

/* Rank 0 saves step again first, its writer held before it did anything;
 * rank 1 saves it meanwhile. */
static void writer_held(const char *root, llmt_ckpt *r0, llmt_ckpt *r1)
{
    const int64_t step = 200;
    set_attempt(r0, r1, 0xa11ce);
    CHECK_STATUS(save_block(r0, step, 33, 0, 2, N, 0), LLMT_OK);
    set_attempt(r0, r1, 0xb0b);
    hold_arm(AT_REMOVE, root, step, "rank-00000.json", NULL);
    CHECK_STATUS(save0_async(r0, step, 44), LLMT_OK);
    int held = hold_wait();
    CHECK(held);
    CHECK(step_has(root, step, "rank-00000.json")); /* the old part, not yet removed */
    CHECK_STATUS(save_block(r1, step, 44, 1, 2, N, 0), LLMT_OK);
    not_committed(root, step, "writer held", 33, 44);
    hold_release();
    CHECK_STATUS(llmt_ckpt_wait(r0, -1), LLMT_OK);
    CHECK(step_has(root, step, "manifest.json"));
    CHECK(step_is(root, step, 44, 44));
}

/* The two limit cases' start: step saved by rank 0 without an identity
 * (seed 88), then saved again by it (seed 99), its writer held at the
 * next `fn` of step's `file` on its thread. */
static void limit_held(const char *root, llmt_ckpt *r0, llmt_ckpt *r1, int64_t step, int fn,
                       const char *file)
{
    set_attempt(r0, r1, 0);
    CHECK_STATUS(save_block(r0, step, 88, 0, 2, N, 0), LLMT_OK);
    hold_arm(fn, root, step, file, r0);
    CHECK_STATUS(save0_async(r0, step, 99), LLMT_OK);
    int held = hold_wait();
    CHECK(held);
}

/* Rank 1 saving step commits it with rank 0's old part (the documented
 * limit). */
static void limit_committed(const char *root, llmt_ckpt *r1, int64_t step)
{
    CHECK_STATUS(save_block(r1, step, 99, 1, 2, N, 0), LLMT_OK);
    CHECK(step_has(root, step, "manifest.json")); /* the documented limit */
    CHECK(step_is(root, step, 88, 99));
}

/* Rank 0's writer released: its save fails saying the step was
 * committed before it wrote, and the step is still the one committed
 * (else said: what, then "step S how under its commit"). */
static void limit_refused(const char *root, llmt_ckpt *r0, int64_t step, const char *what,
                          const char *how)
{
    hold_release();
    CHECK_STATUS(llmt_ckpt_wait(r0, -1), LLMT_ERR_STATE);
    int said = strstr(llmt_ckpt_last_error(r0), "was committed before rank 0 wrote") != NULL;
    CHECK(said);
    if (!said)
        fprintf(stderr, "rank 0's save: %s\n", llmt_ckpt_last_error(r0));
    int kept = step_is(root, step, 88, 99);
    CHECK(kept);
    if (!kept)
        fprintf(stderr,
                "%sstep %lld %s under its commit: rank 0's block of seed %d, verifies: %d\n",
                what, (long long)step, how, block0_seed(root, step, 88, 99),
                step_is(root, step, block0_seed(root, step, 88, 99), 99));
}

/* The limit without an identity (the C API's saves): rank 1 commits the
 * step with rank 0's old part while rank 0's writer has not started (held
 * at its first look at the step's manifest); rank 0's writer then leaves
 * the committed step as it is and its save fails saying so (before, it
 * removed its part manifest from the committed step and rewrote its data
 * file there). */
static void limit_without_identity(const char *root, llmt_ckpt *r0, llmt_ckpt *r1)
{
    const int64_t step = 500;
    limit_held(root, r0, r1, step, AT_STAT, "manifest.json");
    limit_committed(root, r1, step);
    limit_refused(root, r0, step, "", "rewritten");
}

/* The step directory's entries, hidden ones (temporary names) counted
 * apart. */
static int entries(const char *root, int64_t step, int *hidden)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/step-%012lld", root, (long long)step);
    DIR *d = opendir(p);
    int n = 0;
    *hidden = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            e->d_name[0] == '.' ? ++*hidden : ++n;
    if (d)
        closedir(d);
    return n;
}

/* The same limit, with rank 0's writer held past its look at the step's
 * manifest (at its first removal of its old part manifest, the first
 * thing it does to the step after that look): rank 1 commits the step
 * with rank 0's old part meanwhile. Rank 0's writer must still leave that
 * commit as it is (before: it removed the committed step's rank-00000.json
 * and rewrote rank-00000.bin there with O_TRUNC: the committed step no
 * longer verified), fail saying so, and leave no file of its own there. */
static void held_past_guard(const char *root, llmt_ckpt *r0, llmt_ckpt *r1)
{
    const int64_t step = 600;
    limit_held(root, r0, r1, step, AT_REMOVE, "rank-00000.json");
    CHECK(!step_has(root, step, "manifest.json")); /* past its look: not committed */
    limit_committed(root, r1, step);
    char *before = slurp(root, step, "rank-00000.bin");
    limit_refused(root, r0, step, "held past the guard: ", "changed");
    char *after = slurp(root, step, "rank-00000.bin");
    CHECK(before && after && before[0] && !memcmp(before, after, 1 << 20)); /* slurp: 1 MiB */
    free(before);
    free(after);
    CHECK(step_has(root, step, "rank-00000.json")); /* the committed part, as it was */
    int hidden = 0, n = entries(root, step, &hidden);
    CHECK(n == 5 && hidden == 0); /* manifest and two parts; no temporary file */
    if (n != 5 || hidden)
        fprintf(stderr, "step %lld holds %d files and %d hidden ones\n", (long long)step, n,
                hidden);
}

/* Whether step of `root` is uncommitted, or committed and verifying with
 * "w" of seeds s0/s1: what a reader may find at any time. */
static int never_broken(const char *root, int64_t step, int s0, int s1)
{
    return !step_has(root, step, "manifest.json") || step_is(root, step, s0, s1);
}

/* The durable tier (not node-local) holds step committed by an earlier
 * attempt; this attempt commits the step again in the root and the
 * committing rank copies it there. Held at the copy's rename of rank 1's
 * data file (rank 0's already copied): the durable step is not a
 * committed step with files of two attempts (it was uncommitted first);
 * at the end it is this attempt's, verifying, with no temporary file. */
static void durable_replaced(const char *root)
{
    const int64_t step = 700;
    char dur[4200];
    snprintf(dur, sizeof dur, "%s/durable", root);
    llmt_ckpt *h[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) {
        llmt_ckpt_opts o;
        llmt_ckpt_opts_init(&o, sizeof o);
        o.rank = r;
        o.world_size = 2;
        o.keep_last = 0;
        o.durable_dir = dur;
        CHECK_STATUS(llmt_ckpt_create(NULL, root, &o, &h[r]), LLMT_OK);
    }
    if (!h[0] || !h[1])
        return;
    set_attempt(h[0], h[1], 0xa11ce);
    CHECK_STATUS(save_block(h[0], step, 12, 0, 2, N, 0), LLMT_OK);
    CHECK_STATUS(save_block(h[1], step, 12, 1, 2, N, 0), LLMT_OK);
    CHECK(step_is(dur, step, 12, 12));
    /* a rollback: the root's step moved aside, the durable tier's not */
    char p[4200], q[4200];
    snprintf(p, sizeof p, "%s/step-%012lld", root, (long long)step);
    snprintf(q, sizeof q, "%s/old-%012lld", root, (long long)step);
    CHECK(rename(p, q) == 0);
    set_attempt(h[0], h[1], 0xb0b);
    CHECK_STATUS(save_block(h[0], step, 34, 0, 2, N, 0), LLMT_OK);
    char t[100];
    snprintf(t, sizeof t, ".rank-00001.bin.tmp.%ld.%lx", (long)getpid(),
             (unsigned long)h[1]->thread);
    hold_arm(AT_REMOVE, dur, step, t, h[1]);
    CHECK_STATUS(save_block_nowait(h[1], step, 34, 1, 2, N), LLMT_OK);
    int held = hold_wait();
    CHECK(held);
    int ok = never_broken(dur, step, 12, 12) && never_broken(dur, step, 34, 34);
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "durable step %lld committed mid-copy, rank 0's block of seed %d\n",
                (long long)step, block0_seed(dur, step, 12, 34));
    hold_release();
    CHECK_STATUS(llmt_ckpt_wait(h[1], -1), LLMT_OK);
    CHECK(step_is(dur, step, 34, 34));
    int hidden = 0, n = entries(dur, step, &hidden);
    CHECK(n == 5 && hidden == 0);
    llmt_ckpt_destroy(h[0]);
    llmt_ckpt_destroy(h[1]);
}

/* Parts without an identity: an old one does not commit with an attempt
 * that has one; all without one commit as before. */
static void without_identity(const char *root, llmt_ckpt *r0, llmt_ckpt *r1)
{
    set_attempt(r0, r1, 0);
    CHECK_STATUS(save_block(r0, 300, 55, 0, 2, N, 0), LLMT_OK);
    char *p = slurp(root, 300, "rank-00000.json");
    CHECK(p && p[0] && !strstr(p, "attempt")); /* the format as before */
    free(p);
    set_attempt(r0, r1, 0xc0ffee);
    CHECK_STATUS(save_block(r1, 300, 66, 1, 2, N, 0), LLMT_OK);
    not_committed(root, 300, "old part without identity", 55, 66);
    p = slurp(root, 300, "rank-00001.json");
    CHECK(p && strstr(p, "\"attempt\":\"0000000000c0ffee\""));
    free(p);
    CHECK_STATUS(save_block(r0, 300, 66, 0, 2, N, 0), LLMT_OK);
    CHECK(step_is(root, 300, 66, 66));
    /* no identity on either rank: commits and loads as it always did */
    set_attempt(r0, r1, 0);
    CHECK_STATUS(save_block(r0, 400, 77, 0, 2, N, 0), LLMT_OK);
    CHECK_STATUS(save_block(r1, 400, 77, 1, 2, N, 0), LLMT_OK);
    CHECK(step_is(root, 400, 77, 77));
    char *m = slurp(root, 400, "manifest.json");
    CHECK(m && m[0] && !strstr(m, "attempt"));
    free(m);
}

int main(void)
{
    char *root = tmpdir_make(NULL, "stale-attempt");
    llmt_ckpt *r0 = NULL, *r1 = NULL;
    CHECK_STATUS(rank_ckpt(0, 2, root, 0, &r0), LLMT_OK);
    CHECK_STATUS(rank_ckpt(1, 2, root, 0, &r1), LLMT_OK);
    if (!root || !r0 || !r1)
        return check_exit("test_stale_attempt");
    rank1_first(root, r0, r1);
    writer_held(root, r0, r1);
    without_identity(root, r0, r1);
    limit_without_identity(root, r0, r1);
    held_past_guard(root, r0, r1);
    durable_replaced(root);
    llmt_ckpt_destroy(r0);
    llmt_ckpt_destroy(r1);
    tmpdir_remove(root);
    free(root);
    return check_exit("test_stale_attempt");
}
