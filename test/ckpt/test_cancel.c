/* llmt_ckpt_cancel: every state it can be called in, and what a cancelled
 * save leaves behind: never a committed step, the previous commit (and
 * `latest`) untouched, a resume that picks the previous step, a handle
 * that saves again, and a root that `llmtrain ckpt ls` reports cleanly.
 *   test_cancel [LLMTRAIN]          states, two ranks, the CLI's report
 *   test_cancel --slow-write        a save stopped in its data write (run
 *                                   under slow_write_shim: every pwrite is
 *                                   slow)
 *   test_cancel --slow-aio          the same through O_DIRECT and libaio
 *                                   (every io_getevents slow; SKIP where
 *                                   the writer falls back to pwrite) */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "check.h"
#include "ckpt_util.h"

static atomic_int stopping; /* the cancel's "stopping the save" line was logged */
static atomic_int in_hook;  /* the peer tier hook holds the writer */
static pthread_mutex_t note_mu = PTHREAD_MUTEX_INITIALIZER;
static char note[1024]; /* the writer's "save of step N cancelled (...)" line */

static void on_log(void *user, llmt_log_level level, const char *module, const char *msg)
{
    (void)user;
    (void)level;
    (void)module;
    if (strstr(msg, "cancel: stopping the save"))
        atomic_store(&stopping, 1);
    if (strstr(msg, " cancelled (")) {
        pthread_mutex_lock(&note_mu);
        snprintf(note, sizeof note, "%s", msg);
        pthread_mutex_unlock(&note_mu);
    }
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* The peer tier hook runs on the writer thread once this rank's part is
 * written, before the commit: with *user set it holds the writer there
 * (busy, the step not committed) until the cancel says it is stopping the
 * save, 10 s at most. */
static llmt_status hold_hook(void *user, llmt_ckpt_tier tier, int64_t step, const char *path)
{
    (void)step;
    (void)path;
    if (tier != LLMT_CKPT_TIER_PEER || !*(int *)user)
        return LLMT_OK;
    atomic_store(&in_hook, 1);
    for (int i = 0; i < 10000 && !atomic_load(&stopping); i++)
        sleep_ms(1);
    return LLMT_OK;
}

static int exists(const char *root, int64_t step, const char *file)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/step-%012lld%s%s", root, (long long)step, file ? "/" : "",
             file ? file : "");
    return stat(p, &st) == 0;
}

/* Whether step's data file `file` is being written: under its temporary
 * name (.FILE.tmp.PID.TID), renamed into place once written. */
static int writing(const char *root, int64_t step, const char *file)
{
    char p[4200], pre[300];
    snprintf(p, sizeof p, "%s/step-%012lld", root, (long long)step);
    snprintf(pre, sizeof pre, ".%s.tmp.", file);
    DIR *d = opendir(p);
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d)))
        found = !strncmp(e->d_name, pre, strlen(pre));
    if (d)
        closedir(d);
    return found;
}

/* `s` is LLMT_ERR_STATE and the handle's message holds `needle`. */
static void check_state(llmt_ckpt *ck, llmt_status s, const char *needle)
{
    CHECK_STATUS(s, LLMT_ERR_STATE);
    const char *m = llmt_ckpt_last_error(ck);
    int ok = strstr(m, needle) != NULL;
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "  message \"%s\" does not say \"%s\"\n", m, needle);
}

/* Describe and save `step`: a 1-D "w" of n elements gval(seed, .). */
static llmt_status save_w(llmt_ckpt *ck, int64_t step, int seed, int64_t n, int async)
{
    float *x = malloc((size_t)n * sizeof *x);
    if (!x)
        return LLMT_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; i < n; i++)
        x[i] = gval(seed, i);
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, x, LLMT_DEVICE_CPU, 0);
    llmt_status s = llmt_ckpt_begin(ck, step);
    if (s == LLMT_OK)
        s = llmt_ckpt_add_tensor(ck, "w", &v, NULL, NULL);
    if (s == LLMT_OK)
        s = llmt_ckpt_save(ck, async); /* async: the snapshot is taken, x may go */
    free(x);
    return s;
}

/* A resume: a fresh handle opens the newest usable step of `root`, which
 * must be `step` holding world x n elements gval(seed, .), fully verified. */
static void check_resume(llmt_context *ctx, const char *root, int64_t step, int seed, int64_t n)
{
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(ctx, root, NULL, &ck), LLMT_OK);
    if (!ck)
        return;
    int64_t got = -1;
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &got), LLMT_OK);
    CHECK_EQ_INT(got, step);
    CHECK_STATUS(llmt_ckpt_verify(ck), LLMT_OK);
    float *x = calloc((size_t)n, sizeof *x);
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, x, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(ck, "w", &v, NULL), LLMT_OK);
    int64_t bad = 0;
    for (int64_t i = 0; x && i < n; i++)
        bad += x[i] != gval(seed, i);
    CHECK_EQ_INT(bad, 0);
    free(x);
    llmt_ckpt_destroy(ck);
}

static void check_latest_file(const char *root, int64_t step)
{
    char p[4200], want[64], got[64] = "";
    snprintf(p, sizeof p, "%s/latest", root);
    snprintf(want, sizeof want, "step-%012lld", (long long)step);
    FILE *f = fopen(p, "r");
    CHECK(f != NULL);
    if (f) {
        CHECK(fgets(got, sizeof got, f) != NULL);
        fclose(f);
    }
    CHECK(strncmp(got, want, strlen(want)) == 0);
}

/* One rank: every state a cancel can meet. */
static void test_states(llmt_context *ctx)
{
    char *root = tmpdir_make(NULL, "cancel");
    int hold = 0;
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.tier_fn = hold_hook;
    o.tier_user = &hold;
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(ctx, root, &o, &ck), LLMT_OK);
    if (!ck)
        return;
    const int64_t n = 4096;
    /* nothing on the handle yet */
    check_state(ck, llmt_ckpt_cancel(ck), "nothing was begun");
    CHECK_STATUS(llmt_ckpt_cancel(NULL), LLMT_ERR_NULL_POINTER);

    /* begun, not saved: the description goes, nothing is written */
    float one = 1;
    int64_t sh = 1;
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &sh, &one, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_begin(ck, 5), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "x", &v, NULL, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_cancel(ck), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "y", &v, NULL, NULL), LLMT_ERR_STATE);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_ERR_STATE);
    CHECK(!exists(root, 5, NULL));

    /* committed: not withdrawn, and the error says so */
    CHECK_STATUS(save_w(ck, 10, 10, n, 0), LLMT_OK);
    check_state(ck, llmt_ckpt_cancel(ck), "step 10 was committed");
    CHECK(exists(root, 10, "manifest.json"));

    /* in flight, the writer busy between this rank's part and the commit */
    hold = 1;
    atomic_store(&in_hook, 0);
    atomic_store(&stopping, 0);
    CHECK_STATUS(save_w(ck, 20, 20, n, 1), LLMT_OK);
    for (int i = 0; i < 10000 && !atomic_load(&in_hook); i++)
        sleep_ms(1);
    CHECK(atomic_load(&in_hook));
    CHECK(exists(root, 20, "rank-00000.json")); /* written, held before the commit */
    CHECK_STATUS(llmt_ckpt_cancel(ck), LLMT_OK);
    CHECK(atomic_load(&stopping));
    hold = 0;
    CHECK(!exists(root, 20, NULL)); /* one rank: every file and the directory go */
    int64_t steps[4] = {-1, -1, -1, -1}, last = -2;
    size_t count = 0;
    CHECK_STATUS(llmt_ckpt_list(ck, steps, 4, &count), LLMT_OK);
    CHECK_EQ_INT(count, 1);
    CHECK_EQ_INT(steps[0], 10);
    check_latest_file(root, 10);
    CHECK_STATUS(llmt_ckpt_save_status(ck, &last), LLMT_OK); /* the save before it */
    CHECK_EQ_INT(last, 10);
    CHECK_STATUS(llmt_ckpt_wait(ck, 0), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_open_snapshot(ck, NULL), LLMT_ERR_NOT_FOUND);
    check_resume(ctx, root, 10, 10, n);
    check_state(ck, llmt_ckpt_cancel(ck), "cancelled already");

    /* the handle saves again, the same step too */
    CHECK_STATUS(save_w(ck, 20, 21, n, 1), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_wait(ck, -1), LLMT_OK);
    check_resume(ctx, root, 20, 21, n);
    check_state(ck, llmt_ckpt_cancel(ck), "step 20 was committed");

    /* a description begun after a save that committed: only it goes */
    CHECK_STATUS(llmt_ckpt_begin(ck, 30), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_cancel(ck), LLMT_OK);
    CHECK(exists(root, 20, "manifest.json"));
    llmt_ckpt_destroy(ck);
    tmpdir_remove(root);
    free(root);
}

/* `llmtrain ckpt ls ROOT`: exit 0, step `good` ok, step `partial` shown
 * as incomplete (never committed), not as a bad checkpoint. */
static void check_cli(const char *exe, const char *root, int64_t good, int64_t partial)
{
    char cmd[8400], line[512];
    snprintf(cmd, sizeof cmd, "'%s' ckpt ls '%s' 2>&1", exe, root);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    if (!p)
        return;
    int saw_good = 0, saw_partial = 0, saw_bad = 0;
    while (fgets(line, sizeof line, p)) {
        fputs(line, stderr);
        long long s = -1;
        if (sscanf(line, "%lld", &s) != 1)
            continue;
        saw_good += s == good && strstr(line, " ok") != NULL;
        saw_partial += s == partial && strstr(line, "incomplete") != NULL;
        saw_bad += strstr(line, "BAD") != NULL;
    }
    int st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ_INT(saw_good, 1);
    CHECK_EQ_INT(saw_partial, 1);
    CHECK_EQ_INT(saw_bad, 0);
}

/* Two ranks (two handles of one root): a rank's save is cancelled while
 * its part is not written yet; once written, the other ranks may be
 * committing with it, so a cancel says so (LLMT_ERR_STATE) and withdraws
 * nothing: the step commits when the other part lands, or stays an
 * uncommitted directory that resume ignores; a step the other rank
 * committed first is not withdrawn; a later save of the same step goes
 * through (each rank replaces its leftover part). */
static void test_two_ranks(llmt_context *ctx, const char *exe)
{
    char *root = tmpdir_make(NULL, "cancel2");
    llmt_ckpt *r0 = NULL, *r1 = NULL;
    CHECK_STATUS(rank_ckpt(0, 2, root, 3, &r0), LLMT_OK);
    CHECK_STATUS(rank_ckpt(1, 2, root, 3, &r1), LLMT_OK);
    if (!r0 || !r1)
        return;
    const int64_t n = 1024;
    CHECK_STATUS(save_block(r0, 10, 1, 0, 2, n, 0), LLMT_OK);
    CHECK_STATUS(save_block(r1, 10, 1, 1, 2, n, 0), LLMT_OK);
    CHECK(exists(root, 10, "manifest.json"));

    /* rank 0's part written, rank 1's not yet: rank 1 may be about to
     * commit with it, so it stays, and the step commits when rank 1's
     * lands (a withdrawal here once raced that commit: cancel said OK on
     * rank 0 while rank 1 committed the step) */
    CHECK_STATUS(save_block(r0, 20, 2, 0, 2, n, 0), LLMT_OK);
    CHECK(exists(root, 20, "rank-00000.json"));
    check_state(r0, llmt_ckpt_cancel(r0), "part of step 20 is written");
    CHECK(exists(root, 20, "rank-00000.json"));
    CHECK_STATUS(save_block(r1, 20, 2, 1, 2, n, 0), LLMT_OK);
    CHECK(exists(root, 20, "manifest.json"));
    check_resume(ctx, root, 20, 2, 2 * n);

    /* in flight on rank 0, its writer held after its part is written and
     * before its commit attempt: the stop is not taken there (rank 1 may
     * read the part), the attempt finds rank 1's part missing, and the
     * cancel says the part is written; rank 1's part then commits step 22 */
    {
        int hold = 1;
        llmt_ckpt_opts o;
        llmt_ckpt_opts_init(&o, sizeof o);
        o.rank = 0;
        o.world_size = 2;
        o.keep_last = 3;
        o.tier_fn = hold_hook;
        o.tier_user = &hold;
        llmt_ckpt *h0 = NULL;
        CHECK_STATUS(llmt_ckpt_create(ctx, root, &o, &h0), LLMT_OK);
        float *x = malloc((size_t)n * sizeof *x);
        int64_t g = 2 * n, off = 0;
        for (int64_t i = 0; x && i < n; i++)
            x[i] = gval(6, i);
        llmt_tensor v;
        llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, x, LLMT_DEVICE_CPU, 0);
        atomic_store(&in_hook, 0);
        atomic_store(&stopping, 0);
        if (h0 && x) {
            CHECK_STATUS(llmt_ckpt_begin(h0, 22), LLMT_OK);
            CHECK_STATUS(llmt_ckpt_add_tensor(h0, "w", &v, &g, &off), LLMT_OK);
            CHECK_STATUS(llmt_ckpt_save(h0, 1), LLMT_OK);
            for (int i = 0; i < 10000 && !atomic_load(&in_hook); i++)
                sleep_ms(1);
            CHECK(atomic_load(&in_hook));
            check_state(h0, llmt_ckpt_cancel(h0), "part of step 22 is written");
            CHECK(atomic_load(&stopping));
            CHECK(exists(root, 22, "rank-00000.json"));
            CHECK(!exists(root, 22, "manifest.json"));
            CHECK_STATUS(save_block(r1, 22, 6, 1, 2, n, 0), LLMT_OK);
            CHECK(exists(root, 22, "manifest.json"));
            check_resume(ctx, root, 22, 6, 2 * n);
        }
        hold = 0;
        free(x);
        llmt_ckpt_destroy(h0);
    }

    /* rank 0's part of step 25 written and rank 1's never: uncommitted,
     * resume keeps step 22, and the CLI lists 25 as incomplete */
    CHECK_STATUS(save_block(r0, 25, 4, 0, 2, n, 0), LLMT_OK);
    check_state(r0, llmt_ckpt_cancel(r0), "part of step 25 is written");
    CHECK(!exists(root, 25, "manifest.json"));
    check_resume(ctx, root, 22, 6, 2 * n);
    if (exe)
        check_cli(exe, root, 22, 25);

    /* committed by rank 1 before rank 0 cancels: it stands */
    CHECK_STATUS(save_block(r0, 30, 3, 0, 2, n, 0), LLMT_OK);
    CHECK_STATUS(save_block(r1, 30, 3, 1, 2, n, 0), LLMT_OK);
    check_state(r0, llmt_ckpt_cancel(r0), "step 30 was committed");
    check_resume(ctx, root, 30, 3, 2 * n);
    CHECK(!exists(root, 25, NULL)); /* retention took the leftovers at the commit */

    /* step 25 saved again after the abandoned attempt: each rank replaces
     * its part, and the step commits with the new data */
    CHECK_STATUS(save_block(r0, 25, 5, 0, 2, n, 0), LLMT_OK);
    CHECK_STATUS(save_block(r1, 25, 5, 1, 2, n, 0), LLMT_OK);
    CHECK(exists(root, 25, "manifest.json"));
    CHECK_STATUS(llmt_ckpt_open_step(r0, 25), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_verify(r0), LLMT_OK);
    float x[2048];
    int64_t two_n = 2 * n;
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &two_n, x, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_read(r0, "w", &v, NULL), LLMT_OK);
    int bad = 0;
    for (int64_t i = 0; i < two_n; i++)
        bad += x[i] != gval(5, i);
    CHECK_EQ_INT(bad, 0);
    llmt_ckpt_destroy(r0);
    llmt_ckpt_destroy(r1);
    tmpdir_remove(root);
    free(root);
}

/* The data file's write stopped between pieces (every pwrite, and every
 * libaio completion wait, is slowed by the shim): the writer says where,
 * and nothing of the step remains. aio: O_DIRECT through libaio, whose
 * IO_DEPTH x 8 MiB = 64 MiB in flight must be drained, so the file is
 * larger (96 MiB) and the stop lands after the first requests' completion. */
static int test_mid_write(llmt_context *ctx, int aio)
{
    const char *d = getenv("LLMT_TEST_PWRITE_DELAY_MS");
    if (!d || atol(d) < 50) {
        fprintf(stderr, "SKIP: needs slow_write_shim and LLMT_TEST_PWRITE_DELAY_MS >= 50\n");
        return CHECK_SKIP;
    }
    char *root = tmpdir_make(NULL, "cancelw");
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.direct_io = aio; /* pwrite or libaio, which the shim slows */
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(ctx, root, &o, &ck), LLMT_OK);
    if (!ck)
        return 1;
    CHECK_STATUS(save_w(ck, 10, 10, 1024, 0), LLMT_OK);
    /* 32 MiB: 5 pieces of 8 MiB; aio: 96 MiB, 13 pieces */
    const int64_t n = (int64_t)(aio ? 24 : 8) << 20;
    CHECK_STATUS(save_w(ck, 20, 20, n, 1), LLMT_OK);
    for (int i = 0; i < 10000 && !writing(root, 20, "rank-00000.bin"); i++)
        sleep_ms(1);
    CHECK(writing(root, 20, "rank-00000.bin")); /* the first piece is being written */
    CHECK(!exists(root, 20, "rank-00000.bin")); /* under its temporary name */
    CHECK_STATUS(llmt_ckpt_cancel(ck), LLMT_OK);
    pthread_mutex_lock(&note_mu);
    const char *at = strstr(note, "stopped at ");
    long long off = at ? atoll(at + strlen("stopped at ")) : -1;
    pthread_mutex_unlock(&note_mu);
    CHECK(at != NULL);
    fprintf(stderr, "writer: %s\n", note);
    /* before the end (at 0 when the cancel beat the first piece's
     * completion: libaio under CI's load, 2026-11-27) */
    CHECK(off >= 0 && off < n * 4);
    CHECK(!exists(root, 20, NULL));
    check_latest_file(root, 10);
    check_resume(ctx, root, 10, 10, 1024);
    llmt_ckpt_destroy(ck);
    tmpdir_remove(root);
    free(root);
    if (aio) { /* O_DIRECT refused here (tmpfs): the buffered path ran */
        const int *calls = dlsym(RTLD_DEFAULT, "slow_write_shim_aio_calls");
        if (!calls || !*calls) {
            fprintf(stderr, "SKIP: the checkpoint writer did not use libaio here\n");
            return CHECK_SKIP;
        }
        fprintf(stderr, "io_getevents calls: %d\n", *calls);
    }
    return check_exit(aio ? "test_cancel --slow-aio" : "test_cancel --slow-write");
}

int main(int argc, char **argv)
{
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_fn = on_log;
    co.log_level = LLMT_LOG_DEBUG;
    llmt_context *ctx = NULL;
    if (llmt_context_create(&co, &ctx) != LLMT_OK)
        return 1;
    int rc;
    if (argc > 1 && !strcmp(argv[1], "--slow-write")) {
        rc = test_mid_write(ctx, 0);
    } else if (argc > 1 && !strcmp(argv[1], "--slow-aio")) {
        rc = test_mid_write(ctx, 1);
    } else {
        test_states(ctx);
        test_two_ranks(ctx, argc > 1 ? argv[1] : NULL);
        rc = check_exit("test_cancel");
    }
    llmt_context_destroy(ctx);
    return rc;
}
