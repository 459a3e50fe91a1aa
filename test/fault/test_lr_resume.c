/* The anomaly policy lower_lr survives a resume (issue 19): a loss spike
 * injected at step 10 (LLMT_FAULT spike, the token embedding x20 for that
 * step) lowers the LR x0.1; a run stopped at step 12 and resumed from its
 * checkpoint must train steps 13-14 with the same lowered LR as a run that
 * never stopped (before, the resumed job rebuilt its trainer from the spec
 * and silently went back to the full LR). A run without the spike gives
 * the full LR of those steps, to show the lowered one is lower. A run
 * stopped at step 8, before the spike, and resumed sees the spike too
 * (the detector's history is in the checkpoint) and lowers the LR alike.
 * usage: test_lr_resume CORPUS_DIR (any directory of text files) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "corpus_tmp.h"
#include "llmtrain.h"

#define STEPS 14
#define STOP 12
#define FACTOR 0.1

static char corpus[512], tmp[512];

static const char *spec(void)
{
    static char b[2048];
    snprintf(b, sizeof b,
             "{\"name\": \"lr\", \"model\": {\"arch\": \"gpt2\", \"layers\": 1, \"hidden\": 32,"
             " \"heads\": 2, \"vocab\": 320, \"seq_len\": 16},"
             " \"batch\": {\"micro\": 2, \"grad_accum\": 1}, \"optimizer\": {\"lr\": 1e-2},"
             " \"schedule\": {\"kind\": \"cosine\", \"warmup_steps\": 1},"
             " \"train\": {\"steps\": %d, \"seed\": 3, \"threads\": 1},"
             " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
             " \"checkpoint\": {\"interval\": 2}, \"hardware\": {\"gpu\": \"cpu\"},"
             " \"fault_tolerance\": {\"anomaly\": {\"policy\": \"lower_lr\", \"zscore\": 4,"
             " \"lr_factor\": %g}}}",
             STEPS, corpus, FACTOR);
    return b;
}

/* Steps of one job in dir until stop (0: train.steps); lr[s] of step s.
 * Returns the step it started from (-1: failed). */
static int64_t run(const char *dir, int resume, int64_t stop, float *lr, int64_t *anomalies)
{
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_level = LLMT_LOG_ERROR;
    llmt_context *ctx = NULL;
    llmt_context_create(&co, &ctx);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = dir;
    jo.resume = resume;
    jo.stop_at = stop;
    llmt_job *job = NULL;
    const char *js = spec();
    llmt_status s = llmt_job_create_from_json(ctx, js, strlen(js), &jo, &job);
    if (s != LLMT_OK) {
        fprintf(stderr, "%s: create: %s\n", dir, llmt_context_last_error(ctx));
        llmt_context_destroy(ctx);
        return -1;
    }
    llmt_job_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    llmt_job_get_info(job, &info);
    int64_t start = info.start_step;
    llmt_job_metrics m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    for (int64_t at = start; s == LLMT_OK && at < info.stop_at; at++) {
        s = llmt_job_step(job, &m);
        if (s == LLMT_OK && m.step >= 1 && m.step <= STEPS)
            lr[m.step] = m.lr;
    }
    if (s == LLMT_OK)
        s = llmt_job_finish(job);
    if (s != LLMT_OK) {
        fprintf(stderr, "%s: %s\n", dir, llmt_job_last_error(job));
        start = -1;
    }
    *anomalies = m.anomalies;
    llmt_job_destroy(job);
    llmt_context_destroy(ctx);
    return start;
}

/* The value of "key": in the last line of path containing `has`. */
static double last_value(const char *path, const char *has, const char *key)
{
    FILE *f = fopen(path, "r");
    double v = NAN;
    if (!f)
        return v;
    char ln[4096], pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    while (fgets(ln, sizeof ln, f)) {
        char *k = strstr(ln, pat);
        if (strstr(ln, has) && k)
            v = strtod(k + strlen(pat), NULL);
    }
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    int rc = corpus_tmp_open(argc, argv, "test_lr_resume", "lr", corpus, sizeof corpus, tmp,
                             sizeof tmp);
    if (rc)
        return rc;
    float full[STEPS + 1], whole[STEPS + 1], resumed[STEPS + 1];
    memset(full, 0, sizeof full);
    memset(whole, 0, sizeof whole);
    memset(resumed, 0, sizeof resumed);
    int64_t an = 0;
    char d_full[600], d_whole[600], d_res[600];
    snprintf(d_full, sizeof d_full, "%s/full", tmp);
    snprintf(d_whole, sizeof d_whole, "%s/whole", tmp);
    snprintf(d_res, sizeof d_res, "%s/resumed", tmp);

    /* no spike: the full LR */
    unsetenv("LLMT_FAULT");
    CHECK(run(d_full, 0, 0, full, &an) == 0);
    CHECK_EQ_INT(an, 0);
    setenv("LLMT_FAULT", "spike:0:10", 1);
    /* the spike lowers the LR; the run goes on to the end */
    CHECK(run(d_whole, 0, 0, whole, &an) == 0);
    CHECK_EQ_INT(an, 1);
    /* stopped at 12 (checkpoint), resumed, steps 13-14 */
    CHECK(run(d_res, 0, STOP, resumed, &an) == 0);
    CHECK_EQ_INT(an, 1);
    CHECK(run(d_res, 1, 0, resumed, &an) == STOP);
    /* stopped at 8, before the spike, and resumed: the detector judges step
     * 10 against the history the checkpoint saved (job.anomaly_window), as
     * the run that never stopped did; with empty windows (before) 2 values
     * were too few for a z-score and the spike went unseen */
    float early[STEPS + 1];
    memset(early, 0, sizeof early);
    char d_early[600];
    snprintf(d_early, sizeof d_early, "%s/early", tmp);
    CHECK(run(d_early, 0, 8, early, &an) == 0);
    CHECK_EQ_INT(an, 0);
    CHECK(run(d_early, 1, 0, early, &an) == 8);
    CHECK_EQ_INT(an, 1);
    unsetenv("LLMT_FAULT");

    for (int s = 1; s <= STEPS; s++)
        fprintf(stderr, "step %2d: lr full %.6g, lowered %.6g, stopped and resumed %.6g\n", s,
                (double)full[s], (double)whole[s], (double)resumed[s]);
    /* before the spike the same LR; after it x0.1 in both */
    CHECK(whole[9] == full[9] && resumed[9] == full[9]);
    for (int s = 11; s <= STEPS; s++) {
        CHECK(full[s] > 0);
        CHECK(fabs((double)whole[s] - FACTOR * (double)full[s]) <= 1e-5 * (double)full[s]);
        CHECK(resumed[s] == whole[s]); /* the same sequence of float scalings */
        CHECK(early[s] == whole[s]);
    }
    /* the resumed job says so in its goodput line */
    char path[700];
    snprintf(path, sizeof path, "%s/metrics.jsonl", d_res);
    double mult = last_value(path, "\"event\":\"goodput\"", "lr_mult");
    fprintf(stderr, "resumed run: lr_mult %.6g in its last goodput line\n", mult);
    CHECK(fabs(mult - FACTOR) <= 1e-9);

    return corpus_tmp_close(tmp, "lr-resume");
}
