/* The SDC check's rank lists (detect.c, sdc_replay.c: llmt__sbuf) on a
 * rank whose list cannot grow: the check goes on with every rank, so no
 * rank leaves the collectives that follow alone (the repair's broadcast,
 * the replay, the next step). 4 ranks as threads on an in-process
 * communicator, rank 1's parameters flipped after step 2 (LLMT_FAULT
 * flipout), the check at steps 2 and 4; rank 2's first growth of a list
 * (a realloc of NULL to 256 bytes on its thread while armed, this test's
 * realloc) fails:
 *
 *   zero 0 (replicas: rank 1's bad, repaired from its group's majority);
 *   zero 3, deterministic (each rank's shares replayed: sdc_replay).
 *
 * Every rank ends its 4 steps with LLMT_OK (before: rank 2 returned
 * LLMT_ERR_OUT_OF_MEMORY from the check and the 3 others waited in the
 * next collective for it: the watchdog's 120 s), rank 0's metrics name
 * rank 1. usage: test_job_sdc_oom CORPUS_DIR */

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "job_threads.h"
#include "llmtrain.h"

#define N 4
#define VICTIM 2

void *__libc_realloc(void *p, size_t n);

static _Thread_local int victim;
static atomic_int armed, failed_allocs;

/* The victim rank's first growth of a list from nothing fails while armed
 * (llmt__sb_printf asks 256 bytes first). */
void *realloc(void *p, size_t n)
{
    if (victim && !p && n == 256 && atomic_load(&armed)) {
        atomic_fetch_add(&failed_allocs, 1);
        return NULL;
    }
    return __libc_realloc(p, n);
}

static void *rank_main(void *p)
{
    jt_rank *a = p;
    victim = a->rank == VICTIM;
    return jt_rank_main(a);
}

static void spec(char *out, size_t cap, const char *data, int full, int zero3)
{
    char ft[256];
    snprintf(ft, sizeof ft,
             ", \"parallelism\": {\"zero\": %d}, \"fault_tolerance\": {\"sdc_interval\": 2}",
             zero3 ? 3 : 0);
    snprintf(
        out, cap,
        "{\"name\": \"sdcoom\", \"model\": {\"arch\": \"gpt2\", \"layers\": 1, "
        "\"hidden\": 32, \"heads\": 2, \"vocab\": 320, \"seq_len\": 16},"
        " \"batch\": {\"micro\": 1, \"global\": %d}, \"optimizer\": {\"lr\": 1e-2},"
        " \"train\": {\"steps\": 4, \"seed\": 3, \"eval_interval\": 0, \"log_interval\": 0,"
        " \"threads\": 1, \"sample_tokens\": 0, \"deterministic\": %s},"
        " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
        " \"checkpoint\": {\"interval\": 0}, \"hardware\": {\"gpu\": \"cpu\"}%s}",
        full ? N : 1, zero3 ? "true" : "false", data, full ? ft : "");
}

/* Whether rank 0's metrics file holds an sdc or sdc_replay line naming rank 1. */
static int names_rank1(const char *path, int zero3)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    int hit = 0;
    const char *key = zero3 ? "\"not_reproducible\":[1]" : "\"bad_ranks\":[1]";
    while (f && getline(&line, &cap, f) > 0)
        hit |= strstr(line, key) != NULL;
    free(line);
    if (f)
        fclose(f);
    return hit;
}

static void run(const char *what, const char *tmp, const char *data, int zero3)
{
    char json[4096], dir[700];
    spec(json, sizeof json, data, 1, zero3);
    snprintf(dir, sizeof dir, "%s/run-%s", tmp, what);
    llmt_comm *comms[N];
    jt_rank *a = calloc(N, sizeof *a);
    pthread_t th[N];
    CHECK_STATUS(llmt_comm_create_inproc(NULL, N, NULL, comms), LLMT_OK);
    atomic_store(&failed_allocs, 0);
    atomic_store(&armed, 1);
    for (int r = 0; r < N; r++) {
        a[r] = (jt_rank){.comm = comms[r], .rank = r, .json = json, .dir = dir};
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 120;
    for (int r = 0; r < N; r++)
        if (pthread_timedjoin_np(th[r], NULL, &until)) {
            printf("FAIL %s: rank %d did not end in 120 s (a rank left the check alone: %s)\n",
                   what, r, a[VICTIM].st != LLMT_OK ? a[VICTIM].err : "?");
            fflush(stdout);
            _exit(1); /* the others wait in a collective: no teardown */
        }
    atomic_store(&armed, 0);
    printf("%s: %d list growth(s) failed on rank %d\n", what, atomic_load(&failed_allocs),
           VICTIM);
    CHECK(atomic_load(&failed_allocs) > 0);
    for (int r = 0; r < N; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s rank %d: %s\n", what, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        CHECK_EQ_INT((int)a[r].last, 4);
    }
    CHECK(names_rank1(a[0].metrics, zero3));
    for (int r = 0; r < N; r++)
        llmt_comm_destroy(comms[r]);
    free(a);
}

int main(int argc, char **argv)
{
    jt_cfg = (jt_config){4, 0, 0, 30, 1e-5, 1};
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    char tmp[] = "/tmp/llmt-sdcoom-XXXXXX";
    if (!mkdtemp(tmp))
        return 1;
    char json[4096], dir[600], data[700];
    spec(json, sizeof json, argv[1], 0, 0);
    snprintf(dir, sizeof dir, "%s/prep", tmp);
    if (jt_prepare(json, dir) != LLMT_OK)
        return check_exit("job-sdc-oom");
    snprintf(data, sizeof data, "%s/prep/data", tmp);
    setenv("LLMT_FAULT", "flipout:1:2", 1);
    run("zero0", tmp, data, 0);
    run("zero3", tmp, data, 1);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_exit("job-sdc-oom");
}
