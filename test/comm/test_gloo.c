/* The Gloo backend across processes (forked here, meeting in a file store):
 * the collective matrix of coll_check.h; then a peer that dies (SIGKILL)
 * and a peer that stops (SIGSTOP) in the middle of a run of all-reduces:
 * the survivors get an error within the timeout (the stopped rank named),
 * never a hang, and form a new communicator under a new prefix without the
 * lost rank, on which an all-reduce is right again. A process that has
 * SIGPIPE at its default action is warned once (a send to a dead peer
 * would kill it); the survivors of the drills ignore SIGPIPE.
 * Usage: test_gloo [NPROC] (default 4). SKIP (77) without Gloo. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coll_check.h"
#include "llmtrain.h"

#define TMO_MS 3000

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* warnings that SIGPIPE has its default action, in this process */
static int g_pipe_warnings;

static void log_fn(void *user, llmt_log_level level, const char *module, const char *msg)
{
    (void)user;
    (void)level;
    if (strstr(msg, "SIGPIPE has its default action"))
        g_pipe_warnings++;
    fprintf(stderr, "llmtrain [%s]: %s\n", module, msg);
}

static llmt_comm *make(const char *dir, const char *prefix, int r, int n, int64_t tmo)
{
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    o.timeout_ms = tmo;
    llmt_comm *c = NULL;
    llmt_context *ctx = NULL;
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_fn = log_fn;
    llmt_context_create(&co, &ctx);
    llmt_status s = llmt_comm_create_from_store(ctx, dir, prefix, r, n, &o, &c);
    if (s != LLMT_OK)
        fprintf(stderr, "rank %d: create_from_store %s: %s: %s\n", r, prefix,
                llmt_status_string(s), llmt_context_last_error(ctx));
    return c;
}

static int matrix(const char *dir, int r, int n)
{
    llmt_comm *c = make(dir, "matrix", r, n, 60000);
    if (!c)
        return 1;
    cc_state st;
    memset(&st, 0, sizeof st);
    st.rank = r;
    st.size = n;
    llmt_comm_backend be;
    llmt_comm_backend_of(c, &be);
    st.checks++;
    if (be != LLMT_COMM_GLOO)
        CC_FAIL(&st, "backend %d, want GLOO", (int)be);
    /* SIGPIPE at its default here: a peer's death during a send would
     * kill this process, and the library says so, once per process */
    st.checks++;
    llmt_comm *c2 = make(dir, "matrix-again", r, n, 60000);
    if (g_pipe_warnings != 1)
        CC_FAIL(&st, "%d SIGPIPE warnings for two communicators, want 1", g_pipe_warnings);
    if (c2)
        llmt_comm_destroy(c2);
    cc_run_all(&st, c, 0);
    llmt_comm_destroy(c);
    if (r == 0)
        printf("matrix np %d: %d checks, %d failures\n", n, st.checks, st.fails);
    return st.fails ? 1 : 0;
}

/* Rank `victim` dies (sig SIGKILL) or stops (SIGSTOP) before its 4th
 * all-reduce; the others must fail within the timeout, then regroup. */
static int lose_one(const char *dir, const char *tag, int r, int n, int victim, int sig)
{
    char pre[64];
    snprintf(pre, sizeof pre, "%s-gen1", tag);
    /* as a worker must: a send to the dead peer then fails the collective
     * instead of killing the survivor */
    signal(SIGPIPE, SIG_IGN);
    llmt_comm *c = make(dir, pre, r, n, TMO_MS);
    if (!c)
        return 1;
    if (g_pipe_warnings != 0) {
        fprintf(stderr, "rank %d: SIGPIPE warning although it is ignored\n", r);
        return 1;
    }
    int64_t x = r + 1, y = 0;
    llmt_status s = LLMT_OK;
    double t0 = 0;
    int k;
    for (k = 0; k < 10 && s == LLMT_OK; k++) {
        if (k == 3 && r == victim)
            raise(sig);
        t0 = now();
        s = llmt_comm_all_reduce(c, &x, &y, 1, LLMT_DTYPE_INT64, LLMT_REDUCE_SUM, NULL);
    }
    double waited = now() - t0;
    int fails = 0;
    if (s == LLMT_OK) {
        fprintf(stderr, "rank %d: %s: 10 all-reduces succeeded without rank %d\n", r, tag,
                victim);
        fails++;
    } else {
        printf("rank %d: %s: all-reduce %d failed after %.2f s: %s: %s\n", r, tag, k, waited,
               llmt_status_string(s), llmt_comm_last_error(c));
        if (waited > TMO_MS / 1000.0 + 5) {
            fprintf(stderr, "rank %d: the failure took %.2f s (timeout %d ms)\n", r, waited,
                    TMO_MS);
            fails++;
        }
        /* a stopped rank is found by the timeout's diagnosis */
        char want[32];
        snprintf(want, sizeof want, ": %d", victim);
        if (s == LLMT_ERR_TIMEOUT && sig == SIGSTOP &&
            !strstr(llmt_comm_last_error(c), "did not reach")) {
            fprintf(stderr, "rank %d: the timeout does not name rank %d\n", r, victim);
            fails++;
        }
        if (llmt_comm_barrier(c) != LLMT_ERR_ABORTED) {
            fprintf(stderr, "rank %d: communicator not aborted after the failure\n", r);
            fails++;
        }
    }
    llmt_comm_destroy(c);
    /* the survivors regroup: new prefix, ranks renumbered */
    int nr = r < victim ? r : r - 1;
    snprintf(pre, sizeof pre, "%s-gen2", tag);
    llmt_comm *c2 = make(dir, pre, nr, n - 1, 20000);
    if (!c2)
        return 1;
    int64_t want = 0;
    for (int i = 0; i < n; i++)
        if (i != victim)
            want += i + 1;
    s = llmt_comm_all_reduce(c2, &x, &y, 1, LLMT_DTYPE_INT64, LLMT_REDUCE_SUM, NULL);
    if (s != LLMT_OK || y != want) {
        fprintf(stderr, "rank %d: %s: after regrouping: %s, sum %lld want %lld\n", r, tag,
                llmt_status_string(s), (long long)y, (long long)want);
        fails++;
    }
    llmt_comm_destroy(c2);
    return fails ? 1 : 0;
}

typedef int (*phase_fn)(const char *dir, int r, int n, int arg);

static int ph_matrix(const char *dir, int r, int n, int arg)
{
    (void)arg;
    return matrix(dir, r, n);
}

static int ph_kill(const char *dir, int r, int n, int arg)
{
    return lose_one(dir, "kill", r, n, arg, SIGKILL);
}

static int ph_stop(const char *dir, int r, int n, int arg)
{
    return lose_one(dir, "stop", r, n, arg, SIGSTOP);
}

/* Fork n ranks running fn; the victim's death is expected. */
static int gang(const char *name, phase_fn fn, const char *dir, int n, int victim)
{
    pid_t pid[64];
    double t0 = now();
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            alarm(100);
            _exit(fn(dir, r, n, victim));
        }
    }
    int fails = 0;
    for (int r = 0; r < n; r++) {
        if (r == victim) {
            /* stopped: wait until the others are done, then end it */
            continue;
        }
        int st = 0;
        waitpid(pid[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "%s: rank %d ended with status 0x%x\n", name, r, st);
            fails++;
        }
    }
    if (victim >= 0) {
        kill(pid[victim], SIGKILL);
        waitpid(pid[victim], NULL, 0);
    }
    printf("%s: np %d, %.1f s, %s\n", name, n, now() - t0, fails ? "FAIL" : "ok");
    return fails;
}

int main(int argc, char **argv)
{
    if (!(llmt_build_features() & LLMT_FEATURE_GLOO)) {
        fprintf(stderr, "no Gloo in this build (libgloo-dev)\n");
        return 77;
    }
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (n < 2 || n > 64)
        return 2;
    char dir[] = "/tmp/llmt-gloo-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    setvbuf(stdout, NULL, _IONBF, 0);
    int fails = 0;
    fails += gang("matrix", ph_matrix, dir, n, -1);
    fails += gang("sigkill", ph_kill, dir, n, n - 1);
    fails += gang("sigstop", ph_stop, dir, n, 1);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    return fails ? 1 : 0;
}
