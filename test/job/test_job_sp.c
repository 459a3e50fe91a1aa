/* parallelism.sequence_parallel in llmt_job (lib/job/job.c attaches it to
 * the trainer's tensor parallel group; lib/train/device.c runs it): the
 * per-step losses of a job with tp 2 x dp 2 and of one with tp 4 x dp 1
 * (Llama, kv heads shared by two ranks), both with sequence parallelism,
 * against the same job on one rank, ranks as threads on an in-process
 * communicator. Bound: 1e-5 relative, test_device_sp.c's (sequence
 * parallelism changes only the order of fp32 sums; the final parameters
 * are held to its bound there). A tp that does not divide model.seq_len
 * is refused at creation, naming both keys (the trainer's own check,
 * llmt_trainer_set_sequence_parallel: the job reaches the switch).
 * usage: test_job_sp CORPUS_DIR (any directory of text files) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "job_threads.h"
#include "llmtrain.h"

#define STEPS 6
_Static_assert(STEPS <= JT_MAXSTEPS, "jt_rank records steps 1..JT_MAXSTEPS");
#define TOL 1e-5

static char tmp[512], prep[700];

#define GPT2 "\"arch\": \"gpt2\", \"layers\": 2, \"hidden\": 32, \"heads\": 4"
#define LLAMA \
    "\"arch\": \"llama\", \"layers\": 2, \"hidden\": 32, \"heads\": 4, \"kv_heads\": 2"

/* A small job on the byte tokenizer's shards (prep), tp x dp with or
 * without sequence parallelism. */
static void spec(char *out, size_t cap, const char *model, int tp, int sp, int seq)
{
    snprintf(out, cap,
             "{\"name\": \"spjob\", \"model\": {%s, \"vocab\": 320, \"seq_len\": %d},"
             " \"batch\": {\"micro\": 2, \"global\": 8},"
             " \"parallelism\": {\"tp\": %d, \"sequence_parallel\": %s},"
             " \"optimizer\": {\"lr\": 1e-3}, \"schedule\": {\"kind\": \"cosine\", "
             "\"warmup_steps\": 2},"
             " \"train\": {\"steps\": %d, \"seed\": 3, \"eval_interval\": 0, "
             "\"eval_batches\": 1, \"log_interval\": 0, \"threads\": 1, \"sample_tokens\": 0},"
             " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
             " \"checkpoint\": {\"interval\": 100, \"async\": false}, \"hardware\": {\"gpu\": "
             "\"cpu\"}}",
             model, seq, tp, sp ? "true" : "false", STEPS, prep);
}

/* `json` on n ranks in run directory tmp/name; every rank's status. */
static void run(const char *name, const char *json, int n, jt_rank *a)
{
    char dir[800];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    run_ranks(name, json, n, dir, 0, 0, a, 0);
}

/* model with sequence parallelism at tp x (n / tp) against one rank. */
static void compare(const char *what, const char *model, int tp, int n)
{
    char json[4096];
    static jt_rank ref[1], a[JT_MAXR];
    char name[64];
    snprintf(name, sizeof name, "one-%d", tp);
    spec(json, sizeof json, model, 1, 0, 16);
    run(name, json, 1, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    if (ref[0].st != LLMT_OK) {
        fprintf(stderr, "%s one rank: %s\n", what, ref[0].err);
        return;
    }
    CHECK(ref[0].loss[STEPS] < ref[0].loss[1]); /* it trained */
    spec(json, sizeof json, model, tp, 1, 16);
    snprintf(name, sizeof name, "sp-%d", tp);
    run(name, json, n, a);
    double worst = 0;
    for (int r = 0; r < n; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s rank %d: %s\n", what, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        for (int k = 1; k <= STEPS && a[r].st == LLMT_OK; k++) {
            double d =
                fabs((double)a[r].loss[k] - ref[0].loss[k]) / fabs((double)ref[0].loss[k]);
            if (!(d <= worst))
                worst = d;
            CHECK(d <= TOL);
        }
    }
    printf("%-32s steps 1-%d: loss %.4f -> %.4f, worst difference %.2e relative (bound "
           "%.0e)\n",
           what, STEPS, (double)ref[0].loss[1], (double)ref[0].loss[STEPS], worst, TOL);
}

int main(int argc, char **argv)
{
    jt_cfg = (jt_config){STEPS, 0, 0, 32, TOL, 1};
    if (argc < 2) {
        fprintf(stderr, "usage: test_job_sp CORPUS_DIR\n");
        return 2;
    }
    snprintf(tmp, sizeof tmp, "/tmp/llmt-job-sp-XXXXXX");
    if (!mkdtemp(tmp))
        return 1;
    char json[4096];
    /* the corpus made into byte-token shards once, by a first one-rank
     * run (a job prepares its data into its run directory) */
    {
        snprintf(prep, sizeof prep, "%s", argv[1]);
        spec(json, sizeof json, GPT2, 1, 0, 16);
        char dir[800];
        snprintf(dir, sizeof dir, "%s/prep", tmp);
        llmt_status st = jt_prepare(json, dir);
        snprintf(prep, sizeof prep, "%s/prep/data", tmp);
        if (st != LLMT_OK)
            return check_exit("job-sp");
    }
    compare("gpt2 tp 2 x dp 2 SP", GPT2, 2, 4);
    compare("llama kv 2, tp 4 x dp 1 SP", LLAMA, 4, 4);
    /* seq_len 18: tp 4 divides everything else, not the sequence */
    {
        spec(json, sizeof json, GPT2, 4, 1, 18);
        static jt_rank a[JT_MAXR];
        run("bad", json, 4, a);
        for (int r = 0; r < 4; r++) {
            CHECK(a[r].st != LLMT_OK);
            CHECK(strstr(a[r].err, "parallelism.sequence_parallel") != NULL);
            CHECK(strstr(a[r].err, "model.seq_len") != NULL);
        }
        /* the library's message, without the harness's "create: " */
        const char *msg = a[0].err;
        printf("tp 4, seq_len 18: %s\n", strncmp(msg, "create: ", 8) ? msg : msg + 8);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_exit("job-sp");
}
