/* llmt_job under pipeline parallelism (issue 17), in process: one thread
 * per rank on an in-process communicator, each layout against the
 * single-rank job on the same spec (the same data and seed, global batch
 * 8 = micro 2 x accum x dp, so every layout trains on the same sequences).
 * (a) pp 2 (1F1B, the automatic balance), pp 2 x dp 2 (GPipe, stages of 1
 *     and 3 layers from parallelism.stage_layers) and tp 2 x pp 2 x dp 2
 *     (ZeRO-1), GPT-2 with 4 layers, 8 AdamW steps: every rank's per-step
 *     loss within 1e-5 relative of the single rank's, its validation
 *     losses (evaluate as forward-only pipeline passes) within 1e-5, the
 *     same sampled text (generate through the pipeline), and a "pp" line
 *     per step in the metrics with the stage's bubble (and the perf
 *     split's bubble_s > 0);
 * (b) checkpoints across layouts in one run directory: pp 2 x dp 2 runs
 *     steps 1-4 and saves, tp 2 x pp 2 x dp 2 resumes for 5-8; each
 *     step's loss within 1e-5 of the uninterrupted single rank's;
 * (a') interleaved (issue 17's virtual stages): pp 2 x v 2 (m 4), pp 2 x
 *     dp 2 x v 2 with the chunks given per virtual stage (m 2 == pp), pp 2
 *     interleaved with v 1, pp 2 x dp 2 x v 2 ZeRO-1, tp 2 x pp 2 x v 2: the
 *     same checks against the single rank;
 * (c) bad input refused at creation naming the key: pp_schedule unknown,
 *     virtual stages with gpipe, stage_layers not one per virtual
 *     stage, stage_layers not summing to the layers or not one
 *     per stage, pp larger than the layers, ZeRO-2 with pp, a world that
 *     tp x pp does not divide, the SDC check (whole models compared).
 * Why 1e-5: pipeline stages run the single rank's ops on their layers in
 * the same micro-batch order; tp and dp change only the order of fp32
 * sums, and AdamW at lr 1e-3 moves a weight by about lr a step whatever
 * its gradient (test/train/test_device_pp.c, test_device_pptp.c).
 * usage: test_job_pp CORPUS_DIR (any directory of text files) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "job_threads.h"
#include "llmtrain.h"

#define STEPS 8
_Static_assert(STEPS <= JT_MAXSTEPS, "jt_rank records steps 1..JT_MAXSTEPS");
#define TOL 1e-5

static char tmp[512], prep[700];

/* The run every layout shares: GPT-2, 4 layers, a validation every 4
 * steps, 8 sampled tokens; `par` is the parallelism object's body. */
static void spec(char *out, size_t cap, const char *par)
{
    snprintf(out, cap,
             "{\"name\": \"ppjob\", \"model\": {\"arch\": \"gpt2\", \"layers\": 4, "
             "\"hidden\": 32, \"heads\": 4, \"vocab\": 320, \"seq_len\": 16},"
             " \"batch\": {\"micro\": 2, \"global\": 8},"
             " \"parallelism\": {%s},"
             " \"optimizer\": {\"lr\": 1e-3}, \"schedule\": {\"kind\": \"cosine\", "
             "\"warmup_steps\": 2},"
             " \"train\": {\"steps\": %d, \"seed\": 3, \"eval_interval\": 4, "
             "\"eval_batches\": 2, \"log_interval\": 0, \"threads\": 1, \"sample_tokens\": 8},"
             " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
             " \"checkpoint\": {\"interval\": 2, \"async\": false}, \"hardware\": {\"gpu\": "
             "\"cpu\"}}",
             par, STEPS, prep);
}

/* Every rank's losses of steps [first, last] (and validation losses)
 * against the reference's; returns the worst relative difference. */
static double check_pp_losses(const char *what, const jt_rank *a, int n, const jt_rank *ref,
                              int64_t first, int64_t last)
{
    double worst = 0, wv = 0;
    int nval = 0;
    for (int r = 0; r < n; r++) {
        CHECK_EQ_INT(a[r].first, first);
        CHECK_EQ_INT(a[r].last, last);
        for (int64_t k = first; k <= last && k <= STEPS; k++) {
            double d = jt_rel(a[r].loss[k], ref->loss[k]);
            if (!(d <= TOL))
                fprintf(stderr, "FAIL %s rank %d step %lld: loss %.9g vs %.9g\n", what, r,
                        (long long)k, (double)a[r].loss[k], (double)ref->loss[k]);
            CHECK(d <= TOL);
            worst = d > worst || isnan(d) ? d : worst;
            if (isnan(ref->val[k])) {
                CHECK(isnan(a[r].val[k]));
                continue;
            }
            double v = jt_rel(a[r].val[k], ref->val[k]);
            CHECK(v <= TOL);
            wv = v > wv || isnan(v) ? v : wv;
            nval++;
        }
    }
    printf("%-32s steps %lld-%lld: worst loss difference %.3g, validation %.3g relative "
           "(%d validations; bound %.0e)\n",
           what, (long long)first, (long long)last, worst, wv, nval, TOL);
    return worst;
}

/* The pipeline lines of a rank's metrics: one per step, with a bubble in
 * [0, 1]; returns the last one's. */
static double pp_lines(const char *path, int want)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f)
        return -1;
    char line[4096];
    int n = 0;
    double bubble = -1;
    while (fgets(line, sizeof line, f)) {
        const char *b = strstr(line, "\"event\":\"pp\"") ? strstr(line, "\"bubble\":") : NULL;
        if (!b)
            continue;
        n++;
        bubble = atof(b + 9);
        CHECK(bubble >= 0 && bubble <= 1);
    }
    fclose(f);
    CHECK_EQ_INT(n, want);
    return bubble;
}

static void compare(const char *what, const char *par, int n, const jt_rank *ref, jt_rank *a)
{
    char json[4096], dir[800];
    spec(json, sizeof json, par);
    snprintf(dir, sizeof dir, "%s/%.40s", tmp, what);
    for (char *c = dir + strlen(tmp) + 1; *c; c++)
        if (*c == ' ')
            *c = '_';
    if (!run_layout(what, json, n, dir, 0, 0, a))
        return;
    check_pp_losses(what, a, n, ref, 1, STEPS);
    for (int r = 0; r < n; r++) {
        CHECK(strcmp(a[r].sample, ref->sample) == 0 && ref->sample[0]);
        double b = pp_lines(a[r].metrics, STEPS);
        CHECK(a[r].bubble_s > 0); /* the perf split names the pipeline's waits */
        if (r == 0)
            printf("%-32s rank 0 bubble (last step) %.2f; sample %s\n", what, b,
                   strcmp(a[0].sample, ref->sample) ? "DIFFERS" : "equal");
    }
}

/* A layout refused at creation: the message names every string of want
 * (NULL-terminated) and the run directory was not made. */
static void refused(const char *what, const char *par, int world, const char *const *want)
{
    char json[4096], dir[700];
    spec(json, sizeof json, par);
    snprintf(dir, sizeof dir, "%s/bad", tmp);
    jt_refused(what, json, world, want, dir, 26, 1);
}

/* The single rank's spec: the corpus is prepared (into byte-token
 * shards every run reads) and the reference run with it. */
static void spec_one(char *out, size_t cap)
{
    spec(out, cap, "\"pp\": 1");
}

int main(int argc, char **argv)
{
    /* the reference: one rank, 8 steps */
    static jt_rank ref[1], a[JT_MAXR];
    int rc = jt_start(argc, argv, "job-pp",
                      (jt_config){STEPS, 4, JT_SAMPLE_AFTER_FINISH, 32, TOL, 0}, spec_one, tmp,
                      sizeof tmp, prep, sizeof prep, ref);
    if (rc >= 0)
        return rc;
    char json[4096], dir[800];
    CHECK(!isnan(ref[0].val[4]) && !isnan(ref[0].val[8]));
    printf("one rank: loss %.4f -> %.4f, validation %.4f -> %.4f, sample \"%s\"\n",
           (double)ref[0].loss[1], (double)ref[0].loss[STEPS], (double)ref[0].val[4],
           (double)ref[0].val[8], ref[0].sample);

    /* (a) */
    compare("pp 2 1f1b", "\"pp\": 2", 2, ref, a);
    compare("pp 2 x dp 2 gpipe 1+3",
            "\"pp\": 2, \"pp_schedule\": \"gpipe\", \"stage_layers\": [1, 3]", 4, ref, a);
    compare("tp 2 x pp 2 x dp 2 zero 1", "\"tp\": 2, \"pp\": 2, \"zero\": 1", 8, ref, a);
    /* interleaved: virtual stages (their default schedule), m 4; pp 2 x
     * dp 2 with the chunks given (m 2 == pp: every forward first); v 1 */
    compare("pp 2 interleaved v 2", "\"pp\": 2, \"virtual_stages\": 2", 2, ref, a);
    compare("pp 2 x dp 2 interleaved v 2 1,1,1,1",
            "\"pp\": 2, \"pp_schedule\": \"interleaved\", \"virtual_stages\": 2, "
            "\"stage_layers\": [1, 1, 1, 1]",
            4, ref, a);
    compare("pp 2 interleaved v 1", "\"pp\": 2, \"pp_schedule\": \"interleaved\"", 2, ref, a);
    compare("pp 2 x dp 2 interleaved v 2 zero 1",
            "\"pp\": 2, \"virtual_stages\": 2, \"zero\": 1", 4, ref, a);
    compare("tp 2 x pp 2 interleaved v 2", "\"tp\": 2, \"pp\": 2, \"virtual_stages\": 2", 4,
            ref, a);

    /* (b) the checkpoint chain in one run directory */
    snprintf(dir, sizeof dir, "%s/chain", tmp);
    spec(json, sizeof json, "\"pp\": 2");
    if (run_layout("chain pp 2 x dp 2", json, 4, dir, 0, 4, a))
        check_pp_losses("chain pp 2 x dp 2", a, 4, ref, 1, 4);
    spec(json, sizeof json, "\"tp\": 2, \"pp\": 2");
    if (run_layout("chain tp 2 x pp 2 x dp 2 (resumed)", json, 8, dir, 1, STEPS, a))
        check_pp_losses("chain tp 2 x pp 2 x dp 2 (resumed)", a, 8, ref, 5, STEPS);

    /* (c) bad input, named */
    {
        static const char *const w_sched[] = {"parallelism.pp_schedule", "zigzag", NULL};
        static const char *const w_vg[] = {"parallelism.virtual_stages", "interleaved", NULL};
        static const char *const w_vlen[] = {"parallelism.stage_layers", "virtual_stages",
                                             NULL};
        static const char *const w_sum[] = {"parallelism.stage_layers", "model.layers", NULL};
        static const char *const w_len[] = {"parallelism.stage_layers", "parallelism.pp", NULL};
        static const char *const w_big[] = {"parallelism.pp", "model.layers", NULL};
        static const char *const w_zero[] = {"parallelism.zero", "parallelism.pp", NULL};
        static const char *const w_world[] = {"parallelism.pp", "world size 3", NULL};
        refused("pp_schedule zigzag", "\"pp\": 2, \"pp_schedule\": \"zigzag\"", 2, w_sched);
        refused("virtual_stages with gpipe",
                "\"pp\": 2, \"virtual_stages\": 2, \"pp_schedule\": \"gpipe\"", 2, w_vg);
        refused("stage_layers of pp entries for pp 2 x v 2",
                "\"pp\": 2, \"virtual_stages\": 2, \"stage_layers\": [2, 2]", 2, w_vlen);
        refused("stage_layers 1+2 of 4", "\"pp\": 2, \"stage_layers\": [1, 2]", 2, w_sum);
        refused("stage_layers 3 entries, pp 2", "\"pp\": 2, \"stage_layers\": [1, 2, 1]", 2,
                w_len);
        refused("pp 8 of 4 layers", "\"pp\": 8", 8, w_big);
        refused("ZeRO-2 with pp 2", "\"pp\": 2, \"zero\": 2", 4, w_zero);
        refused("pp 2 on 3 ranks", "\"pp\": 2", 3, w_world);
        /* (sdc_interval with pp runs: each stage's replicas compare it,
         * test launch-sdc) */
    }

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (check_failures) /* the evidence stays */
        fprintf(stderr, "kept %s\n", tmp);
    else if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_exit("job-pp");
}
