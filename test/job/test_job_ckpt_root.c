/* The job's check that every rank sees one checkpoint root
 * (lib/job/ckpt_shared.c), two ranks as threads on an in-process
 * communicator:
 *
 *   each rank its own run directory (so its own checkpoint.dir, as
 *   node-local disks under one path would be): refused on every rank at
 *   creation, naming checkpoint.dir and rank 1, the first that cannot see
 *   rank 0's file (before this check such a job ran and no step of it ever
 *   committed);
 *
 *   one run directory: created, the probe file gone afterwards, and a
 *   save of step 2 commits (llmt_ckpt_list finds it);
 *
 *   checkpoint.interval 0 and no resume: refused alike, since the run
 *   still saves its final step (and llmt_job_save or a stop saves too):
 *   before 6b18aaf it ran, and its final step never committed.
 *
 * usage: test_job_ckpt_root CORPUS_DIR */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "job_threads.h"
#include "llmtrain.h"

static char g_prep[700];

static void spec(char *out, size_t cap, int interval)
{
    snprintf(
        out, cap,
        "{\"name\": \"ckroot\", \"model\": {\"arch\": \"gpt2\", \"layers\": 1, "
        "\"hidden\": 32, \"heads\": 2, \"vocab\": 320, \"seq_len\": 16},"
        " \"batch\": {\"micro\": 2, \"global\": 4},"
        " \"optimizer\": {\"lr\": 1e-3},"
        " \"train\": {\"steps\": 2, \"seed\": 3, \"eval_interval\": 0, \"log_interval\": 0,"
        " \"threads\": 1, \"sample_tokens\": 0},"
        " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
        " \"checkpoint\": {\"interval\": %d, \"async\": false}, \"hardware\": {\"gpu\": "
        "\"cpu\"}}",
        g_prep, interval);
}

/* Probe files left in dir (none once a job's creation returned). */
static int probes_left(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strncmp(e->d_name, ".llmt-shared-", 13) == 0;
    if (d)
        closedir(d);
    return n;
}

static int committed(const char *ckpt_dir)
{
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_context_set_log_level(ctx, LLMT_LOG_OFF);
    llmt_ckpt *ck = NULL;
    size_t have = 0;
    if (llmt_ckpt_create(ctx, ckpt_dir, NULL, &ck) == LLMT_OK)
        llmt_ckpt_list(ck, NULL, 0, &have);
    llmt_ckpt_destroy(ck);
    llmt_context_destroy(ctx);
    return (int)have;
}

/* json on two ranks (threads, an in-process communicator), each in its
 * own run directory tmp/NAME0 and tmp/NAME1. */
static void two_dirs(const char *tmp, const char *name, const char *json, jt_rank *a)
{
    llmt_comm *c[2] = {NULL, NULL};
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 2, NULL, c), LLMT_OK);
    char d[2][600];
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        snprintf(d[r], sizeof d[r], "%s/%s%d", tmp, name, r);
        memset(&a[r], 0, sizeof a[r]);
        a[r].comm = c[r];
        a[r].rank = r;
        a[r].json = json;
        a[r].dir = d[r];
        pthread_create(&th[r], NULL, jt_rank_main, &a[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++)
        llmt_comm_destroy(c[r]);
}

int main(int argc, char **argv)
{
    jt_cfg = (jt_config){2, 0, 0, 30, 1e-5, 1};
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    char tmp[] = "/tmp/llmt-ckroot-XXXXXX";
    if (!mkdtemp(tmp))
        return 1;
    char json[2048], dir[600], ck[700];
    snprintf(g_prep, sizeof g_prep, "%s", argv[1]);
    spec(json, sizeof json, 2);
    snprintf(dir, sizeof dir, "%s/prep", tmp);
    if (jt_prepare(json, dir) != LLMT_OK)
        return check_exit("job-ckpt-root");
    snprintf(g_prep, sizeof g_prep, "%s/prep/data", tmp);

    /* two roots: refused on both ranks, rank 1 named */
    spec(json, sizeof json, 2);
    jt_rank a[2];
    two_dirs(tmp, "node", json, a);
    for (int r = 0; r < 2; r++) {
        printf("two roots, rank %d: %s\n", r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(a[r].err, "checkpoint.dir") && strstr(a[r].err, "rank 1 cannot see") &&
              strstr(a[r].err, "shared"));
    }
    snprintf(ck, sizeof ck, "%s/node0/ckpt", tmp);
    CHECK_EQ_INT(probes_left(ck), 0);

    /* one root: runs, and its save of step 2 commits */
    snprintf(dir, sizeof dir, "%s/shared", tmp);
    int ok = run_ranks("one root", json, 2, dir, 0, 0, a, 1);
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    CHECK(ok);
    CHECK_EQ_INT(probes_left(ck), 0);
    CHECK_EQ_INT(committed(ck), 1);
    printf("one root: %s, %d committed checkpoint(s), %d probe file(s) left\n",
           ok ? "ran" : "failed", committed(ck), probes_left(ck));

    /* no periodic saves: the final one would not commit either */
    spec(json, sizeof json, 0);
    two_dirs(tmp, "quiet", json, a);
    for (int r = 0; r < 2; r++) {
        printf("two roots, interval 0, rank %d: %s\n", r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(a[r].err, "checkpoint.dir") && strstr(a[r].err, "rank 1 cannot see"));
    }

    /* llmt_job_save's async is 0 or 1: 2 is refused naming it, before a
     * save is begun (it used to reach llmt_ckpt_save after the trainer's
     * and the loader's tensors were added); the job saves afterwards */
    {
        spec(json, sizeof json, 2);
        snprintf(dir, sizeof dir, "%s/async", tmp);
        llmt_context *ctx = NULL;
        llmt_job *job = NULL;
        CHECK_STATUS(jt_create_one(json, dir, &ctx, &job), LLMT_OK);
        if (job) {
            CHECK_STATUS(llmt_job_step(job, NULL), LLMT_OK);
            CHECK_STATUS(llmt_job_save(job, 2), LLMT_ERR_INVALID_ARGUMENT);
            CHECK(strstr(llmt_job_last_error(job), "job: save: async 2") != NULL);
            CHECK_STATUS(llmt_job_save(job, -1), LLMT_ERR_INVALID_ARGUMENT);
            snprintf(ck, sizeof ck, "%s/ckpt", dir);
            CHECK_EQ_INT(committed(ck), 0);
            CHECK_STATUS(llmt_job_save(job, 0), LLMT_OK);
            CHECK_EQ_INT(committed(ck), 1);
        }
        llmt_job_destroy(job);
        llmt_context_destroy(ctx);
    }

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (!check_failures && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_exit("job-ckpt-root");
}
