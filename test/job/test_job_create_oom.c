/* A rank without memory for what a job takes before its first collective
 * step: data parallelism's buffers made with the trainer's engine at the
 * job's creation (lib/train/dp.c: ZeRO's optimizer state shares, the
 * padded units' staging) and the ZeRO-3 SDC check's copy of the shares
 * (lib/job/sdc_step.c, llmt__job_shares_keep; "window" and "step"
 * replays), the validation sequences (lib/job/job.c's buffers, taken
 * after the engine and its agreement). 4 ranks as threads on an in-process communicator (collective
 * timeout 10 s), a tiny model; on rank 2's thread one allocation of the
 * buffer's size fails (this test's posix_memalign, which the CPU device
 * allocates with, or malloc) from the job's creation through step 2.
 *
 * Every rank fails at the same point (the creation, where the buffers are
 * now taken) with LLMT_ERR_OUT_OF_MEMORY and a message naming rank 2, in
 * under 5 s. Before, rank 2 failed alone (the creation, or step 1 where
 * the SDC copy was taken) and the 3 others went on into a collective it
 * never joined, waiting there until the timeout (LLMT_ERR_TIMEOUT after
 * 10 s; in a real job the collective timeout, 300 s by default).
 *
 * Failures of rank 2's own earlier in the creation, before any collective
 * (lib/job/job.c's own_parts: its run directory a file, its data missing,
 * its model's parameters without memory, a tokenizer its spec disagrees
 * with; own_late, after the engine: its metrics.jsonl a directory): every rank fails
 * its creation together, rank 2 with its message prefixed "rank 2: ", the
 * others with its status and message. Before, rank 2 returned alone and
 * the others waited in the engine's agreement until the 10 s timeout.
 * Data missing on every rank: each fails with its own message, unprefixed.
 * usage: test_job_create_oom CORPUS_DIR */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "check.h"
#include "job_threads.h"
#include "llmtrain.h"

#define N 4
#define VICTIM 2
#define HDR 64
#define W32 \
    "\"arch\": \"gpt2\", \"hidden\": 32, \"heads\": 2" /* the CPU device's header before each buffer (dev_cpu.c) */

void *__libc_malloc(size_t size);
void *__libc_memalign(size_t align, size_t size);

/* While armed on the victim's thread the fail_at-th (from 0; -1: none,
 * counting only) allocation of fail_bytes fails: a posix_memalign when
 * aligned, else a malloc. LLMT_TEST_SIZES=1 prints every size. */
static _Thread_local int armed;
static size_t fail_bytes;
static int aligned, matched, fail_at, show;

static int failing(size_t size, int is_aligned)
{
    if (!armed)
        return 0;
    if (show)
        fprintf(stderr, "  %s %zu\n", is_aligned ? "posix_memalign" : "malloc", size);
    return is_aligned == aligned && size == fail_bytes && matched++ == fail_at;
}

void *malloc(size_t size)
{
    return failing(size, 0) ? NULL : __libc_malloc(size);
}

int posix_memalign(void **p, size_t align, size_t size)
{
    if (failing(size, 1))
        return 12; /* ENOMEM */
    *p = __libc_memalign(align, size);
    return *p ? 0 : 12;
}

typedef struct rank_run {
    llmt_comm *comm;
    int rank;
    const char *json, *dir;
    llmt_status st; /* the first failure's (or the last step's) */
    int phase;      /* where it failed: 0 creation, k step k, 3 none */
    double secs;    /* that phase's */
    char err[1024];
} rank_run;

/* rank 2's own spec (NULL: the others') */
static const char *victim_json;

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
    armed = a->rank == VICTIM;
    const char *json = a->rank == VICTIM && victim_json ? victim_json : a->json;
    double t0 = now();
    a->st = llmt_job_create_from_json(ctx, json, strlen(json), &jo, &job);
    a->secs = now() - t0;
    a->phase = 0;
    if (a->st != LLMT_OK)
        snprintf(a->err, sizeof a->err, "%s", llmt_context_last_error(ctx));
    llmt_job_metrics m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    for (int k = 1; k <= 2 && a->st == LLMT_OK; k++) {
        t0 = now();
        a->st = llmt_job_step(job, &m);
        a->secs = now() - t0;
        a->phase = k;
        if (a->st != LLMT_OK)
            snprintf(a->err, sizeof a->err, "%s", llmt_job_last_error(job));
    }
    armed = 0;
    if (a->st == LLMT_OK)
        a->phase = 3;
    llmt_job_destroy(job);
    llmt_context_destroy(ctx);
    return NULL;
}

/* width: the model's arch, hidden and heads */
static void spec(char *out, size_t cap, const char *width, const char *data, int full,
                 const char *more)
{
    snprintf(
        out, cap,
        "{\"name\": \"createoom\", \"model\": {\"layers\": 1, %s, "
        "\"vocab\": 320, \"seq_len\": 16},"
        " \"batch\": {\"micro\": 1, \"global\": %d}, \"optimizer\": {\"lr\": 1e-2},"
        " \"train\": {\"steps\": 4, \"seed\": 3, \"eval_interval\": 0, \"eval_batches\": 37,"
        " \"log_interval\": 0,"
        " \"threads\": 1, \"sample_tokens\": 0, \"deterministic\": true},"
        " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
        " \"checkpoint\": {\"interval\": 0}, \"hardware\": {\"gpu\": \"cpu\"}%s%s}",
        width, full ? N : 1, data, full ? ", " : "", full ? more : "");
}

static void run_all(const char *json, const char *dir, int at, rank_run *a)
{
    fail_at = at;
    matched = 0;
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.timeout_ms = 10000;
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

/* The run of `more` with rank 2's first allocation of `bytes` (device
 * memory when is_aligned: the size asked of the CPU device) failing;
 * want: how many such allocations a run without the failure makes on
 * rank 2 (checked first: the size is the buffer's). */
static void run(const char *what, const char *tmp, const char *width, const char *data,
                const char *more, size_t bytes, int is_aligned, int want)
{
    char json[4096], dir[700];
    rank_run a[N];
    spec(json, sizeof json, width, data, 1, more);
    fail_bytes = bytes + (is_aligned ? HDR : 0);
    aligned = is_aligned;
    snprintf(dir, sizeof dir, "%s/count-%s", tmp, what);
    run_all(json, dir, -1, a);
    int counted = matched;
    for (int r = 0; r < N; r++)
        CHECK_STATUS(a[r].st, LLMT_OK);
    snprintf(dir, sizeof dir, "%s/run-%s", tmp, what);
    run_all(json, dir, 0, a);
    printf("%-12s %d allocation(s) of %zu bytes on rank %d (want %d), the first failed\n", what,
           counted, bytes, VICTIM, want);
    CHECK_EQ_INT(counted, want);
    for (int r = 0; r < N; r++) {
        int named = strstr(a[r].err, "rank 2") != NULL;
        if (a[r].st != LLMT_ERR_OUT_OF_MEMORY || !named || a[r].secs >= 5.0 || a[r].phase)
            fprintf(stderr, "FAIL %s rank %d: %s %d: %s after %.2f s: %s\n", what, r,
                    a[r].phase ? "step" : "creation", a[r].phase, llmt_status_string(a[r].st),
                    a[r].secs, a[r].err);
        else
            printf("  rank %d: creation failed in %.2f s: %s\n", r, a[r].secs, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_ERR_OUT_OF_MEMORY);
        CHECK_EQ_INT(a[r].phase, 0); /* every rank at its creation */
        CHECK(named);
        CHECK(a[r].secs < 5.0);
    }
}

/* Every rank runs `json`, rank 2 its own `vjson` (NULL: the same), and
 * rank 2 fails its own part of the creation: by its spec, or its first
 * allocation of `bytes` failing (aligned: the host allocator's
 * posix_memalign, else malloc). all: every rank fails so. Every rank fails
 * its creation with `want` in under 5 s, its message holding rank 2's
 * reason `why`; alone, naming rank 2; all, each its own, as one rank's. */
static void run_early(const char *what, const char *tmp, const char *json, const char *vjson,
                      int all, size_t bytes, int is_aligned, llmt_status want, const char *why)
{
    char dir[700];
    rank_run a[N];
    fail_bytes = bytes;
    aligned = is_aligned;
    victim_json = vjson;
    snprintf(dir, sizeof dir, "%s/early-%s", tmp, what);
    run_all(json, dir, bytes ? 0 : -1, a);
    victim_json = NULL;
    for (int r = 0; r < N; r++) {
        int named = strstr(a[r].err, "rank 2") != NULL, has = strstr(a[r].err, why) != NULL;
        int ok = a[r].st == want && !a[r].phase && a[r].secs < 5.0 && has &&
                 (all ? strncmp(a[r].err, "rank ", 5) != 0 : named);
        printf("%s %-14s rank %d: %s %d: %s after %.2f s: %s\n", ok ? "ok  " : "FAIL", what, r,
               a[r].phase ? "step" : "creation", a[r].phase, llmt_status_string(a[r].st),
               a[r].secs, a[r].err);
        CHECK_STATUS(a[r].st, want);
        CHECK_EQ_INT(a[r].phase, 0); /* every rank at its creation */
        CHECK(a[r].secs < 5.0);
        CHECK(has);
        if (all) /* as one rank's: no rank named */
            CHECK(strncmp(a[r].err, "rank ", 5) != 0 && !strstr(a[r].err, "rank 2 failed"));
        else
            CHECK(named);
    }
    if (!all) /* its own message, prefixed */
        CHECK(strncmp(a[VICTIM].err, "rank 2: ", 8) == 0);
}

/* Rank 2's run directory a file, its metrics.jsonl a directory, its data
 * missing, its model's parameters without memory (23520 fp32, the host
 * allocator's), its spec's tokenizer kind not its data's. */
static void early(const char *tmp, const char *data)
{
    char miss[4096], full[4096], bpe[4096], nowhere[700];
    snprintf(nowhere, sizeof nowhere, "%s/nowhere", tmp);
    const char *z0 = "\"parallelism\": {\"zero\": 0}";
    spec(miss, sizeof miss, W32, nowhere, 1, z0);
    spec(full, sizeof full, W32, data, 1, z0);
    char rd[800];
    snprintf(rd, sizeof rd, "%s/early-run-dir", tmp);
    CHECK(mkdir(rd, 0755) == 0);
    snprintf(rd, sizeof rd, "%s/early-run-dir/rank-2", tmp); /* its run_dir */
    FILE *f = fopen(rd, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    run_early("run-dir", tmp, full, NULL, 0, 0, 0, LLMT_ERR_IO, "cannot create");
    snprintf(rd, sizeof rd, "%s/early-jsonl/rank-2/metrics.jsonl", tmp); /* a directory */
    char cmd[900];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", rd);
    CHECK(system(cmd) == 0);
    run_early("jsonl", tmp, full, NULL, 0, 0, 0, LLMT_ERR_IO, "metrics.jsonl: open");
    run_early("data-missing", tmp, full, miss, 0, 0, 0, LLMT_ERR_NOT_FOUND, nowhere);
    run_early("data-all", tmp, miss, NULL, 1, 0, 0, LLMT_ERR_NOT_FOUND, nowhere);
    run_early("model", tmp, full, NULL, 0, 23520 * sizeof(float), 1, LLMT_ERR_OUT_OF_MEMORY,
              "cannot allocate 23520 parameters");
    const char *byte = "\"kind\": \"byte\"", *other = "\"kind\": \"bpe\" ";
    spec(bpe, sizeof bpe, W32, data, 1, z0);
    char *k = strstr(bpe, byte);
    CHECK(k != NULL && strlen(byte) == strlen(other));
    if (k)
        memcpy(k, other, strlen(other));
    run_early("tokenizer", tmp, full, bpe, 0, 0, 0, LLMT_ERR_SPEC, "data.tokenizer.kind");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    const char *sv = getenv("LLMT_TEST_SIZES");
    show = sv && sv[0] == '1';
    char tmp[] = "/tmp/llmt-createoom-XXXXXX";
    if (!mkdtemp(tmp))
        return 1;
    char json[4096], dir[600], data[700];
    spec(json, sizeof json, W32, argv[1], 0, "");
    snprintf(dir, sizeof dir, "%s/prep", tmp);
    if (jt_prepare(json, dir) != LLMT_OK)
        return check_exit("job-create-oom");
    snprintf(data, sizeof data, "%s/prep/data", tmp);
    /* ZeRO-1 on 4 ranks: rank 2's shares of m and v, 5880 floats each
     * (the embeddings' 10752, the layer's 12704 and the final norm's 64
     * parameters, a quarter of each); the first fails */
    const char *z1 = "\"parallelism\": {\"zero\": 1}";
    run("dp-shares", tmp, W32, data, z1, 5880 * sizeof(float), 1, 2);
    /* the staging of padded units: llama's untied head with the final
     * norm (34 + 320 x 34 floats) is not a multiple of 4, so 4 chunks of
     * 2729 floats, two slots of 4 */
    run("dp-stage", tmp, "\"arch\": \"llama\", \"hidden\": 34, \"heads\": 1", data, z1,
        2 * 2729 * N * sizeof(float), 1, 1);
    /* the ZeRO-3 check's copy of rank 2's shares: 3 x 5880 floats (its
     * parameters, m and v) */
    run("sdc-window", tmp, W32, data,
        "\"parallelism\": {\"zero\": 3}, \"fault_tolerance\": {\"sdc_interval\": 2}",
        3 * 5880 * sizeof(float), 0, 1);
    run("sdc-step", tmp, W32, data,
        "\"parallelism\": {\"zero\": 3}, \"fault_tolerance\": {\"sdc_interval\": 2, "
        "\"sdc_replay\": \"step\"}",
        3 * 5880 * sizeof(float), 0, 1);
    /* the engine's own: the first of its full-size buffers (23520
     * parameters, fp32) */
    run("engine", tmp, W32, data, "\"parallelism\": {\"zero\": 0}", 23520 * sizeof(float), 1,
        3);
    /* the validation sequences' tokens: train.eval_batches 37 x batch.micro
     * 1 x 16 int32 (then as many targets) */
    run("val-buffers", tmp, W32, data, "\"parallelism\": {\"zero\": 0}",
        37 * 16 * sizeof(int32_t), 0, 2);
    early(tmp, data);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (!check_failures && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_exit("job-create-oom");
}
