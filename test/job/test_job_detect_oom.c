/* A rank without memory for a check's small arrays (lib/job/detect.c):
 * the straggler report's step times and the SDC check's hashes and vote.
 * 4 ranks as threads on an in-process communicator (collective timeout
 * 15 s), a tiny model; at step 2 (the report's or the check's step) rank
 * 2's first allocation of one such array fails (this test's calloc or
 * malloc, armed on rank 2's thread for that step only):
 *
 *   straggler-times, straggler-sorted: the report's two arrays (the
 *   report at every 2 steps);
 *   sdc-hashes: the check's gathered hashes (zero 0, sdc_interval 2);
 *   sdc-vote: the majority vote's scratch (it was taken after the gather);
 *   sdc-zero3: the gathered share hashes (zero 3, deterministic);
 *   sdc-engine: under tp 2 (the engine's own copy) the copy of a shard
 *   the hash reads: that part was left out of the hash, which then
 *   differed from its replica's, and rank 2 was named as corrupted and
 *   repaired (every rank's step 2 returned OK).
 *
 * Every rank's step 2 fails promptly (in under 5 s) with
 * LLMT_ERR_OUT_OF_MEMORY and a message naming rank 2. Before, rank 2
 * returned alone and the 3 others waited in the collective it never
 * joined until the timeout (LLMT_ERR_TIMEOUT after 15 s; in a real job
 * the collective timeout, 300 s by default).
 * usage: test_job_detect_oom CORPUS_DIR */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "job_threads.h"
#include "llmtrain.h"

#define N 4
#define VICTIM 2
#define W 11 /* the straggler report's floats a rank: busy, wall, the split's 9 */

void *__libc_calloc(size_t n, size_t size);
void *__libc_malloc(size_t size);

/* The allocation that fails on the victim's thread while armed: the
 * fail_at-th (from 0; -1: none, counting only) calloc(fail_n, fail_size),
 * or malloc(fail_bytes) when fail_n is 0. */
static _Thread_local int armed;
static size_t fail_n, fail_size, fail_bytes;
static int matched, fail_at; /* matching allocations while armed */

void *calloc(size_t n, size_t size)
{
    if (armed && fail_n && n == fail_n && size == fail_size && matched++ == fail_at)
        return NULL;
    return __libc_calloc(n, size);
}

void *malloc(size_t size)
{
    if (armed && !fail_n && size == fail_bytes && matched++ == fail_at)
        return NULL;
    return __libc_malloc(size);
}

typedef struct rank_run {
    llmt_comm *comm;
    int rank;
    const char *json, *dir;
    llmt_status st; /* step 2's */
    double secs;    /* step 2's */
    int64_t steps;  /* steps that succeeded */
    char err[1024];
} rank_run;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *rank_main(void *p)
{
    rank_run *a = p;
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_context_set_log_level(ctx, LLMT_LOG_ERROR);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = a->dir;
    jo.comm = a->comm;
    jo.world_size = 1;
    jo.rank = 0;
    llmt_job *job = NULL;
    a->st = llmt_job_create_from_json(ctx, a->json, strlen(a->json), &jo, &job);
    if (a->st != LLMT_OK) {
        snprintf(a->err, sizeof a->err, "create: %s", llmt_context_last_error(ctx));
        llmt_context_destroy(ctx);
        return NULL;
    }
    llmt_job_metrics m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    for (int k = 1; k <= 2 && a->st == LLMT_OK; k++) {
        double t0 = now();
        armed = k == 2 && a->rank == VICTIM;
        a->st = llmt_job_step(job, &m);
        armed = 0;
        a->secs = now() - t0;
        a->steps += a->st == LLMT_OK;
    }
    if (a->st != LLMT_OK)
        snprintf(a->err, sizeof a->err, "%s", llmt_job_last_error(job));
    else
        a->st = llmt_job_finish(job);
    llmt_job_destroy(job);
    llmt_context_destroy(ctx);
    return NULL;
}

static void spec(char *out, size_t cap, const char *data, int full, const char *ft)
{
    snprintf(
        out, cap,
        "{\"name\": \"detectoom\", \"model\": {\"arch\": \"gpt2\", \"layers\": 1, "
        "\"hidden\": 32, \"heads\": 2, \"vocab\": 320, \"seq_len\": 16},"
        " \"batch\": {\"micro\": 1, \"global\": %d}, \"optimizer\": {\"lr\": 1e-2},"
        " \"train\": {\"steps\": 4, \"seed\": 3, \"eval_interval\": 0, \"log_interval\": 0,"
        " \"threads\": 1, \"sample_tokens\": 0, \"deterministic\": true},"
        " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
        " \"checkpoint\": {\"interval\": 0}, \"hardware\": {\"gpu\": \"cpu\"}%s%s}",
        full ? N : 1, data, full ? ", " : "", full ? ft : "");
}

/* Steps 1 and 2 on every rank, the at-th matching allocation of rank
 * 2's step 2 failing (-1: none). */
static void run_ranks_oom(const char *json, const char *dir, int at, rank_run *a)
{
    fail_at = at;
    matched = 0;
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.timeout_ms = 15000;
    llmt_comm *comms[N];
    pthread_t th[N];
    CHECK_STATUS(llmt_comm_create_inproc(NULL, N, &co, comms), LLMT_OK);
    for (int r = 0; r < N; r++) {
        a[r] = (rank_run){.comm = comms[r], .rank = r, .json = json, .dir = dir};
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    for (int r = 0; r < N; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < N; r++)
        llmt_comm_destroy(comms[r]);
}

/* last: the last matching allocation of step 2 fails (a run that fails
 * none counts them first), else the first. */
static void run(const char *what, const char *tmp, const char *data, const char *ft, size_t n,
                size_t size, int last)
{
    char json[4096], dir[700];
    rank_run a[N];
    spec(json, sizeof json, data, 1, ft);
    fail_n = n;
    fail_size = size;
    fail_bytes = size;
    int at = 0;
    if (last) {
        snprintf(dir, sizeof dir, "%s/count-%s", tmp, what);
        run_ranks_oom(json, dir, -1, a);
        at = matched - 1;
    }
    snprintf(dir, sizeof dir, "%s/run-%s", tmp, what);
    run_ranks_oom(json, dir, at, a);
    double slowest = 0;
    for (int r = 0; r < N; r++)
        slowest = a[r].secs > slowest ? a[r].secs : slowest;
    printf("%-16s %d matching allocation(s) on rank %d in step 2, number %d failed; step 2 "
           "took up to %.2f s\n",
           what, matched, VICTIM, at + 1, slowest);
    CHECK(matched >= 1 && at >= 0);
    for (int r = 0; r < N; r++) {
        int named = strstr(a[r].err, "rank 2 ") != NULL;
        if (a[r].st != LLMT_ERR_OUT_OF_MEMORY || !named || a[r].secs >= 5.0)
            fprintf(stderr, "FAIL %s rank %d: step 2 %s after %.2f s: %s\n", what, r,
                    llmt_status_string(a[r].st), a[r].secs, a[r].err);
        else
            printf("  rank %d: %s\n", r, a[r].err);
        CHECK_EQ_INT((int)a[r].steps, 1);
        CHECK_STATUS(a[r].st, LLMT_ERR_OUT_OF_MEMORY);
        CHECK(named);
        CHECK(a[r].secs < 5.0);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    char tmp[] = "/tmp/llmt-detectoom-XXXXXX";
    if (!mkdtemp(tmp))
        return 1;
    char json[4096], dir[600], data[700];
    spec(json, sizeof json, argv[1], 0, "");
    snprintf(dir, sizeof dir, "%s/prep", tmp);
    if (jt_prepare(json, dir) != LLMT_OK)
        return check_exit("job-detect-oom");
    snprintf(data, sizeof data, "%s/prep/data", tmp);
    const char *strag = "\"fault_tolerance\": {\"straggler\": {\"interval\": 2, \"margin\": 10,"
                        " \"patience\": 0}}";
    const char *sdc = "\"fault_tolerance\": {\"sdc_interval\": 2}";
    const char *sdc3 =
        "\"parallelism\": {\"zero\": 3}, \"fault_tolerance\": {\"sdc_interval\": 2}";
    run("straggler-times", tmp, data, strag, N * W, sizeof(float), 0);
    run("straggler-sorted", tmp, data, strag, N, sizeof(double), 0);
    run("sdc-hashes", tmp, data, sdc, N, sizeof(uint64_t), 0);
    /* the vote's scratch is the size of the trainer's loss sums (lib/train
     * dp.c), allocated first in the step: its last of that size */
    run("sdc-vote", tmp, data, sdc, 0, 2 * N * sizeof(int32_t), 1);
    run("sdc-zero3", tmp, data, sdc3, N, sizeof(uint64_t), 0);
    const char *sdctp =
        "\"parallelism\": {\"tp\": 2}, \"fault_tolerance\": {\"sdc_interval\": 2}";
    /* the copy of its tensor parallel shard of wte (320 x 32, halved) that
     * the hash reads */
    run("sdc-engine", tmp, data, sdctp, 0, 320 * 32 / 2 * sizeof(float), 1);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (!check_failures && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_exit("job-detect-oom");
}
