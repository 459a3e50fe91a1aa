/* Hang test: rank 1 skips collective seq 3 (fault injection through
 * LLMT_FAULT_SKIP_COLLECTIVE=1:3). Every other rank must get
 * LLMT_ERR_TIMEOUT at seq 3 within the configured time, naming rank 1 and
 * the sequence number, with the flight recorders dumped; rank 1 itself
 * times out at seq 4 naming the others; later calls return ABORTED.
 * Without an MPI launcher the 4 ranks are threads (in-process backend);
 * under mpirun they are processes (MPI backend). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "llmtrain.h"

#define TIMEOUT_MS 1500
#define WORLD 4

static char dump_base[256];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int contains_file(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, what) != NULL;
}

/* Returns the number of failed expectations of one rank. */
static int rank_run(llmt_comm *c)
{
    int32_t r, n;
    llmt_comm_rank(c, &r);
    llmt_comm_size(c, &n);
    int fails = 0;
    float v[16];
    llmt_status s = LLMT_OK;
    int at = 0;
    double dt = 0;
    for (int k = 1; k <= 6 && s == LLMT_OK; k++) {
        for (int i = 0; i < 16; i++) v[i] = (float)(r + i);
        double t0 = now();
        s = llmt_comm_all_reduce(c, v, v, 16, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM,
                                 NULL);
        dt = now() - t0;
        at = k;
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", llmt_comm_last_error(c));
    int skipper = r == 1;
    int want_seq = skipper ? 4 : 3;
    char want[128];
    if (skipper) {
        size_t w = (size_t)snprintf(want, sizeof want, "did not reach seq 4: ");
        for (int q = 0, first = 1; q < n; q++)
            if (q != 1) {
                w += (size_t)snprintf(want + w, sizeof want - w, "%s%d",
                                      first ? "" : ",", q);
                first = 0;
            }
    } else {
        snprintf(want, sizeof want, "did not reach seq 3: 1");
    }
    if (s != LLMT_ERR_TIMEOUT) {
        fprintf(stderr, "rank %d: status %s, want a timeout\n", r, llmt_status_string(s));
        fails++;
    }
    if (at != want_seq) {
        fprintf(stderr, "rank %d: failed at call %d, want %d\n", r, at, want_seq);
        fails++;
    }
    if (!strstr(msg, want)) {
        fprintf(stderr, "rank %d: message lacks \"%s\": %s\n", r, want, msg);
        fails++;
    }
    if (dt < TIMEOUT_MS / 1000.0 * 0.9 || dt > TIMEOUT_MS / 1000.0 + 3.0) {
        fprintf(stderr, "rank %d: the timeout took %.2f s (configured %.1f)\n",
                r, dt, TIMEOUT_MS / 1000.0);
        fails++;
    }
    /* the communicator is aborted now */
    s = llmt_comm_barrier(c);
    if (s != LLMT_ERR_ABORTED) {
        fprintf(stderr, "rank %d: after the timeout: %s, want ABORTED\n", r,
                llmt_status_string(s));
        fails++;
    }
    /* the dump of this rank holds every reachable rank's recorder,
     * including rank 1's skipped entry */
    char path[300];
    snprintf(path, sizeof path, "%s.%d", dump_base, (int)r);
    if (!contains_file(path, "rank 1: seq=3 op=all_reduce dtype=fp32 count=16") ||
        !contains_file(path, "state=skipped") ||
        !contains_file(path, "state=timeout")) {
        fprintf(stderr, "rank %d: dump %s incomplete\n", r, path);
        fails++;
    }
    fprintf(stderr, "rank %d: %s after %.2f s: %s\n", r,
            fails ? "FAIL" : "ok", dt, msg);
    return fails;
}

static void *thr(void *p)
{
    return (void *)(intptr_t)rank_run(p);
}

int main(void)
{
    llmt_comm_env env;
    llmt_comm_env_discover(&env, sizeof env);
    int under_mpi = strcmp(env.launcher, "none") != 0;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if (under_mpi) {
        /* all ranks must agree on the path: use the launcher's job id */
        const char *job = getenv("OMPI_MCA_ess_base_jobid");
        snprintf(dump_base, sizeof dump_base, "%s/llmt-hang-%s-%d", tmp,
                 job ? job : "x", (int)getppid());
        if (!(llmt_build_features() & LLMT_FEATURE_MPI)) return 77;
    } else {
        snprintf(dump_base, sizeof dump_base, "%s/llmt-hang-%d", tmp, (int)getpid());
    }
    setenv("LLMT_FAULT_SKIP_COLLECTIVE", "1:3", 1);
    setenv("LLMT_LOG_LEVEL", "off", 0);
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_context_set_log_level(ctx, LLMT_LOG_OFF);
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    o.timeout_ms = TIMEOUT_MS;
    o.dump_path = dump_base;
    int fails = 0;
    double t0 = now();
    if (under_mpi) {
        llmt_comm *c = NULL;
        llmt_status s = llmt_comm_create_from_env(ctx, &o, &c);
        if (s != LLMT_OK) {
            fprintf(stderr, "create: %s\n", llmt_context_last_error(ctx));
            return 1;
        }
        fails = rank_run(c);
        char path[300];
        snprintf(path, sizeof path, "%s.%d", dump_base, (int)env.rank);
        llmt_comm_destroy(c);
        unlink(path);
    } else {
        llmt_comm *c[WORLD];
        if (llmt_comm_create_inproc(ctx, WORLD, &o, c) != LLMT_OK) return 1;
        pthread_t th[WORLD];
        for (int r = 0; r < WORLD; r++) pthread_create(&th[r], NULL, thr, c[r]);
        for (int r = 0; r < WORLD; r++) {
            void *res;
            pthread_join(th[r], &res);
            fails += (int)(intptr_t)res;
        }
        for (int r = 0; r < WORLD; r++) {
            llmt_comm_destroy(c[r]);
            char path[300];
            snprintf(path, sizeof path, "%s.%d", dump_base, r);
            unlink(path);
        }
    }
    llmt_context_destroy(ctx);
    fprintf(stderr, "hang test: %s in %.2f s\n", fails ? "FAILED" : "passed",
            now() - t0);
    return fails ? 1 : 0;
}
