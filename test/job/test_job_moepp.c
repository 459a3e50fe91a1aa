/* llmt_job with MoE layers under pipeline parallelism (issue 18 x 17), in
 * process: one thread per rank on an in-process communicator, each layout
 * against the single-rank job on the same spec (same data and seed, global
 * batch 8 = micro 2 x accum x dp: the pipeline's micro-batches are the
 * single rank's accumulation micro-batches, so each MoE call routes the
 * same tokens and capacity 1.0 drops the same choices):
 * (a) pp 2 (1F1B), pp 2 GPipe x dp 2 ZeRO-1, pp 2 x dp 2 x ep 2 (EP
 *     inside each stage's data parallel group): 6 AdamW steps, every
 *     rank's loss within 1e-5 relative of the single rank's
 *     (test/train/test_moe_pp.c checks parameters and tallies);
 * (b) resharding through the job's checkpoint: pp 2 x dp 2 runs steps 1-4
 *     and saves, one rank (pp 1) resumes for 5-6; and pp 1 saves at 4,
 *     pp 2 x dp 2 resumes: losses within 1e-5 of the uninterrupted run's;
 * (c) tp x pp with MoE runs: test_job_moetp.c checks it;
 * (d) cp 2 x pp 2 and cp 2 x pp 2 x dp 2 (GPipe), dropless, against one
 *     rank (dropless: a CP rank's capacity is of its rows, doc/moe.md).
 * usage: test_job_moepp CORPUS_DIR (any directory of text files) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "job_threads.h"
#include "llmtrain.h"

#define STEPS 6
_Static_assert(STEPS <= JT_MAXSTEPS, "jt_rank records steps 1..JT_MAXSTEPS");

static char tmp[512], prep[700];

/* A 2-layer llama, every layer 4 experts top-2, capacity 1.0 (drops). */
static void spec(char *out, size_t cap, const char *par, int dropless)
{
    snprintf(
        out, cap,
        "{\"name\": \"moeppjob\", \"model\": {\"arch\": \"llama\", \"layers\": 2, \"hidden\": "
        "32, \"heads\": 4, \"kv_heads\": 2, \"ffn\": 32, \"vocab\": 320, \"seq_len\": 16,"
        " \"moe\": {\"experts\": 4, \"top_k\": 2, \"expert_ffn\": 24, "
        "\"capacity_factor\": 1.0, \"dropless\": %s}},"
        " \"batch\": {\"micro\": 2, \"global\": 8},"
        " \"parallelism\": {%s},"
        " \"optimizer\": {\"lr\": 3e-3}, \"schedule\": {\"kind\": \"cosine\", "
        "\"warmup_steps\": 2},"
        " \"train\": {\"steps\": %d, \"seed\": 5, \"eval_interval\": 0, \"eval_batches\": 1,"
        " \"log_interval\": 0, \"threads\": 1, \"sample_tokens\": 0, \"device\": \"cpu\"},"
        " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
        " \"checkpoint\": {\"interval\": 2, \"async\": false}, \"hardware\": {\"gpu\": "
        "\"cpu\"}}",
        dropless ? "true" : "false", par, STEPS, prep);
}

int main(int argc, char **argv)
{
    jt_cfg = (jt_config){STEPS, 0, 0, 34, 1e-5, 0};
    if (argc < 2) {
        fprintf(stderr, "usage: test_job_moepp CORPUS_DIR\n");
        return 2;
    }
    snprintf(tmp, sizeof tmp, "/tmp/llmt-job-moepp-XXXXXX");
    if (!mkdtemp(tmp))
        return 1;
    char json[4096], dir[800];
    snprintf(prep, sizeof prep, "%s", argv[1]);
    spec(json, sizeof json, "\"dp\": 1", 0);
    snprintf(dir, sizeof dir, "%s/prep", tmp);
    if (jt_prepare(json, dir) != LLMT_OK)
        return check_exit("job-moepp");
    snprintf(prep, sizeof prep, "%s/prep/data", tmp);
    static jt_rank ref[1], a[JT_MAXR];
    spec(json, sizeof json, "\"dp\": 1", 0);
    snprintf(dir, sizeof dir, "%s/one", tmp);
    if (!run_layout("one rank", json, 1, dir, 0, 0, ref))
        return check_exit("job-moepp");
    printf("one rank: loss %.6f -> %.6f\n", ref->loss[1], ref->loss[STEPS]);
    /* (a) */
    static const struct {
        const char *what, *par;
        int n;
    } lay[] = {
        {"pp 2 1f1b", "\"pp\": 2", 2},
        {"pp 2 gpipe x dp 2 ZeRO-1",
         "\"pp\": 2, \"dp\": 2, \"zero\": 1, \"pp_schedule\": \"gpipe\"", 4},
        {"pp 2 x dp 2 x ep 2", "\"pp\": 2, \"dp\": 2, \"ep\": 2", 4},
    };
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) {
        spec(json, sizeof json, lay[i].par, 0);
        snprintf(dir, sizeof dir, "%s/l%zu", tmp, i);
        if (run_layout(lay[i].what, json, lay[i].n, dir, 0, 0, a))
            check_losses(lay[i].what, a, lay[i].n, ref, 1, STEPS);
    }
    /* (b) pp 2 x dp 2 saves at step 4, pp 1 resumes; pp 1 saves, pp 2 x
     * dp 2 resumes */
    snprintf(dir, sizeof dir, "%s/reshard", tmp);
    spec(json, sizeof json, "\"pp\": 2, \"dp\": 2", 0);
    if (run_layout("pp 2 x dp 2 steps 1-4", json, 4, dir, 0, 4, a)) {
        check_losses("pp 2 x dp 2, then", a, 4, ref, 1, 4);
        spec(json, sizeof json, "\"dp\": 1", 0);
        if (run_layout("pp 1 resumes", json, 1, dir, 1, 0, a))
            check_losses("pp 1 resumes its checkpoint", a, 1, ref, 5, STEPS);
    }
    snprintf(dir, sizeof dir, "%s/reshard2", tmp);
    spec(json, sizeof json, "\"dp\": 1", 0);
    if (run_layout("pp 1 steps 1-4", json, 1, dir, 0, 4, a)) {
        spec(json, sizeof json, "\"pp\": 2, \"dp\": 2", 0);
        if (run_layout("pp 2 x dp 2 resumes", json, 4, dir, 1, 0, a))
            check_losses("pp 2 x dp 2 resumes pp 1's", a, 4, ref, 5, STEPS);
    }
    /* (d) context parallelism inside the stages, dropless (under cp each
     * rank's capacity is of its rows: a binding one drops other choices
     * than one rank, doc/moe.md) */
    static jt_rank dref[1];
    spec(json, sizeof json, "\"dp\": 1", 1);
    snprintf(dir, sizeof dir, "%s/done", tmp);
    if (run_layout("one rank, dropless", json, 1, dir, 0, 0, dref)) {
        static const struct {
            const char *what, *par;
            int n;
        } cl[] = {{"cp 2 x pp 2 dropless", "\"cp\": 2, \"pp\": 2", 4},
                  {"cp 2 x pp 2 x dp 2 gpipe dropless",
                   "\"cp\": 2, \"pp\": 2, \"dp\": 2, \"pp_schedule\": \"gpipe\"", 8}};
        for (size_t i = 0; i < sizeof cl / sizeof cl[0]; i++) {
            spec(json, sizeof json, cl[i].par, 1);
            snprintf(dir, sizeof dir, "%s/c%zu", tmp, i);
            if (run_layout(cl[i].what, json, cl[i].n, dir, 0, 0, a))
                check_losses(cl[i].what, a, cl[i].n, dref, 1, STEPS);
        }
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    return check_exit("job-moepp");
}
