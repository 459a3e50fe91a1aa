/* Every kind of operation is bounded: rank 1 never calls anything, rank 0
 * runs one operation per communicator and must get LLMT_ERR_TIMEOUT after
 * the configured time, naming rank 1 (collectives) or the peer (recv),
 * then LLMT_ERR_ABORTED on the same communicator. Rank 1 then destroys its
 * communicators without hanging (the MPI backend sees that rank 0 aborted)
 * and both exit. Threads without a launcher, processes under mpirun -np 2. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmtrain.h"

#define TMO 300
enum { NOPS = 10 };
static const char *names[NOPS] = {"all_reduce", "all_gather", "reduce_scatter",
                                  "all_to_all", "all_to_allv", "broadcast",
                                  "barrier", "recv", "split", "iall_reduce"};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int rank0(llmt_comm **c)
{
    int fails = 0;
    float x[8] = {0}, y[16];
    size_t cnt[2] = {1, 1}, dis[2] = {0, 1};
    for (int k = 0; k < NOPS; k++) {
        double t0 = now();
        llmt_status s;
        llmt_comm *sub = NULL;
        llmt_comm_work *w = NULL;
        switch (k) {
        case 0: s = llmt_comm_all_reduce(c[k], x, y, 4, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL); break;
        case 1: s = llmt_comm_all_gather(c[k], x, y, 4, LLMT_DTYPE_FP32, NULL); break;
        case 2: s = llmt_comm_reduce_scatter(c[k], x, y, 4, LLMT_DTYPE_FP32, LLMT_REDUCE_MAX, NULL); break;
        case 3: s = llmt_comm_all_to_all(c[k], x, y, 4, LLMT_DTYPE_FP32, NULL); break;
        case 4: s = llmt_comm_all_to_allv(c[k], x, cnt, dis, y, cnt, dis, LLMT_DTYPE_FP32, NULL); break;
        case 5: s = llmt_comm_broadcast(c[k], x, 4, LLMT_DTYPE_FP32, 1, NULL); break;
        case 6: s = llmt_comm_barrier(c[k]); break;
        case 7: s = llmt_comm_recv(c[k], y, 4, LLMT_DTYPE_FP32, 1, NULL); break;
        case 8: s = llmt_comm_split(c[k], 0, 0, &sub); break;
        default:
            s = llmt_comm_iall_reduce(c[k], x, y, 4, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, &w);
            if (s == LLMT_OK) s = llmt_comm_work_wait(w, -1);
            llmt_comm_work_free(w);
            break;
        }
        double dt = now() - t0;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", llmt_comm_last_error(c[k]));
        const char *want = k == 7 ? "peer 1 did not match it" : "did not reach seq 1: 1";
        int ok = s == LLMT_ERR_TIMEOUT && strstr(msg, want) &&
                 dt >= TMO / 1000.0 * 0.9 && dt < TMO / 1000.0 + 2.0;
        llmt_status after = llmt_comm_barrier(c[k]);
        ok = ok && after == LLMT_ERR_ABORTED && sub == NULL;
        fprintf(stderr, "%-15s %s after %.2f s: %s\n", names[k], ok ? "ok  " : "FAIL", dt, msg);
        fails += !ok;
    }
    return fails;
}

typedef struct arg {
    llmt_comm **c;
    int rank, fails;
} arg;

static void *thr(void *p)
{
    arg *a = p;
    if (a->rank == 0) a->fails = rank0(a->c);
    return NULL;
}

int main(void)
{
    llmt_comm_env env;
    llmt_comm_env_discover(&env, sizeof env);
    int mpi = env.world_size > 1;
    if (mpi && !(llmt_build_features() & LLMT_FEATURE_MPI)) return 77;
    if (mpi && env.world_size != 2) {
        fprintf(stderr, "run with 2 ranks\n");
        return 1;
    }
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_context_set_log_level(ctx, LLMT_LOG_OFF);
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    o.timeout_ms = TMO;
    int fails = 0;
    double t0 = now();
    if (mpi) {
        llmt_comm *c[NOPS];
        for (int k = 0; k < NOPS; k++)
            if (llmt_comm_create_from_env(ctx, &o, &c[k]) != LLMT_OK) return 1;
        if (env.rank == 0) fails = rank0(c);
        for (int k = 0; k < NOPS; k++) llmt_comm_destroy(c[k]);
    } else {
        llmt_comm *c[NOPS][2], *r0[NOPS], *r1[NOPS];
        for (int k = 0; k < NOPS; k++) {
            if (llmt_comm_create_inproc(ctx, 2, &o, c[k]) != LLMT_OK) return 1;
            r0[k] = c[k][0];
            r1[k] = c[k][1];
        }
        arg a[2] = {{r0, 0, 0}, {r1, 1, 0}};
        pthread_t th[2];
        for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, thr, &a[r]);
        for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
        fails = a[0].fails;
        for (int k = 0; k < NOPS; k++) {
            llmt_comm_destroy(c[k][0]);
            llmt_comm_destroy(c[k][1]);
        }
    }
    llmt_context_destroy(ctx);
    fprintf(stderr, "rank %d: %s in %.2f s\n", (int)env.rank,
            fails ? "FAILED" : "passed", now() - t0);
    return fails ? 1 : 0;
}
