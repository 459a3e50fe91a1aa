/* Crash consistency: run the child (crash_child.c), SIGKILL it at a random
 * moment, then check that the newest complete checkpoint loads, verifies
 * (every hash) and holds exactly the state of its step; repeat, each child
 * resuming from what the previous one left. Finally run one child to the end
 * and check that the resumed run ends bit-identical to an uninterrupted
 * replay. usage: test_crash CHILD TRIALS [seed] */
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../ckpt/ckpt_util.h"
#include "check.h"
#include "crash_state.h"
#include "llmtrain.h"

static cr_state ref; /* replay cursor: advanced, or restarted when behind */

static const cr_state *reference(int64_t step)
{
    if (ref.step > step)
        cr_init(&ref);
    while (ref.step < step)
        cr_step(&ref);
    return &ref;
}

/* Load the newest complete checkpoint and compare it with the replay. */
static int verify_latest(const char *root, int64_t *step_out)
{
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.verify = LLMT_CKPT_VERIFY_FULL;
    llmt_ckpt *ck = NULL;
    if (llmt_ckpt_create(NULL, root, &o, &ck))
        return 0;
    int64_t step = -1;
    llmt_status s = llmt_ckpt_open_latest(ck, &step);
    *step_out = step;
    if (s == LLMT_ERR_NOT_FOUND) { /* killed before the first commit */
        llmt_ckpt_destroy(ck);
        return 1;
    }
    int ok = s == LLMT_OK;
    if (!ok)
        fprintf(stderr, "open_latest: %s\n", llmt_ckpt_last_error(ck));
    const cr_state *want = reference(step);
    static float p[CR_RANKS * CR_PARAMS];
    static uint64_t rng[CR_RANKS * 2];
    static uint32_t bulk[CR_BULK * CR_RANKS], wb[CR_BULK];
    llmt_tensor tp, tr, tb;
    int64_t np = CR_PARAMS * CR_RANKS, nr = 2 * CR_RANKS, nb = (int64_t)CR_BULK * CR_RANKS;
    llmt_tensor_init(&tp, sizeof tp, LLMT_DTYPE_FP32, 1, &np, p, LLMT_DEVICE_CPU, 0);
    llmt_tensor_init(&tr, sizeof tr, LLMT_DTYPE_INT64, 1, &nr, rng, LLMT_DEVICE_CPU, 0);
    llmt_tensor_init(&tb, sizeof tb, LLMT_DTYPE_INT32, 1, &nb, bulk, LLMT_DEVICE_CPU, 0);
    ok = ok && llmt_ckpt_read(ck, "params", &tp, NULL) == LLMT_OK &&
         llmt_ckpt_read(ck, "rng", &tr, NULL) == LLMT_OK &&
         llmt_ckpt_read(ck, "bulk", &tb, NULL) == LLMT_OK;
    ok = ok && !memcmp(p, want->p, sizeof p) && !memcmp(rng, want->rng, sizeof rng);
    for (int r = 0; ok && r < CR_RANKS; r++) {
        cr_bulk(wb, step, r);
        ok = !memcmp(bulk + (size_t)r * CR_BULK, wb, sizeof wb);
    }
    char cur[32];
    ok = ok && llmt_ckpt_get_kv(ck, "loader.cursor", cur, sizeof cur, NULL) == LLMT_OK &&
         strtoull(cur, NULL, 10) == want->cursor;
    if (!ok)
        fprintf(stderr, "step %" PRId64 ": loaded state differs from the replay\n", step);
    llmt_ckpt_destroy(ck);
    return ok;
}

/* What the kill interrupted, judged from the directory of the step after the
 * newest committed one. */
static int classify(const char *root, int64_t committed)
{
    char d[4200], p[4300];
    snprintf(d, sizeof d, "%s/step-%012" PRId64, root, committed + 1);
    struct stat st;
    if (stat(d, &st))
        return 0; /* between saves or during a snapshot */
    int bins = 0, parts = 0;
    for (int r = 0; r < CR_RANKS; r++) {
        snprintf(p, sizeof p, "%s/rank-%05d.bin", d, r);
        bins += stat(p, &st) == 0;
        snprintf(p, sizeof p, "%s/rank-%05d.json", d, r);
        parts += stat(p, &st) == 0;
    }
    if (parts == CR_RANKS)
        return 3; /* all parts durable, manifest not yet renamed */
    if (parts)
        return 2; /* some ranks done */
    return 1;     /* data being written */
}

static int run_child(const char *child, const char *root, int64_t steps, int kill_ms,
                     int64_t *ready)
{
    int fds[2];
    if (pipe(fds))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        char s[32];
        snprintf(s, sizeof s, "%" PRId64, steps);
        execl(child, child, root, s, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[64] = {0};
    FILE *f = fdopen(fds[0], "r");
    if (!fgets(line, sizeof line, f) || sscanf(line, "ready %" SCNd64, ready) != 1)
        *ready = -1;
    if (kill_ms >= 0) {
        struct timespec ts = {kill_ms / 1000, (long)(kill_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    fclose(f);
    if (WIFSIGNALED(status))
        return WTERMSIG(status) == SIGKILL ? 0 : -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_crash CHILD TRIALS [seed]\n");
        return 2;
    }
    const char *child = argv[1];
    int trials = atoi(argv[2]);
    unsigned seed = argc > 3 ? (unsigned)atoi(argv[3]) : (unsigned)time(NULL);
    srand(seed);
    fprintf(stderr, "test_crash: %d trials, seed %u\n", trials, seed);
    char *root = tmpdir_make(NULL, "crash");
    cr_init(&ref);
    int kinds[4] = {0};
    int64_t last = -1;
    for (int t = 0; t < trials; t++) {
        int64_t ready = -1, step = -1;
        int kill_ms = rand() % 120;
        int rc = run_child(child, root, 1000000, kill_ms, &ready);
        if (rc != 0) {
            fprintf(stderr, "trial %d: child failed (%d)\n", t, rc);
            CHECK(rc == 0);
            break;
        }
        /* the child resumed from what the previous trial left */
        CHECK(ready == (last < 0 ? 0 : last));
        int ok = verify_latest(root, &step);
        CHECK(ok);
        if (!ok) {
            fprintf(stderr, "trial %d: killed after %d ms: bad checkpoint\n", t, kill_ms);
            break;
        }
        CHECK(step >= last); /* progress is never lost */
        kinds[classify(root, step)]++;
        last = step < 0 ? -1 : step;
    }
    fprintf(stderr,
            "killed: %d between saves/in snapshot, %d writing data, %d some parts done, "
            "%d all parts durable before the manifest rename; newest step %" PRId64 "\n",
            kinds[0], kinds[1], kinds[2], kinds[3], last);
    /* An uninterrupted finish: resume and run 5 more steps, compare. */
    int64_t ready = -1, step = -1, target = (last < 0 ? 0 : last) + 5;
    CHECK_EQ_INT(run_child(child, root, target, -1, &ready), 0);
    CHECK(verify_latest(root, &step));
    CHECK_EQ_INT(step, target);
    tmpdir_remove(root);
    free(root);
    return check_exit("test_crash");
}
