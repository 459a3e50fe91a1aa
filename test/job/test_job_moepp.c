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
 *     rank (dropless: a CP rank's capacity is of its rows, doc/moe.md);
 * (e) the automatic stage balance of a MoE model (8 layers, moe.every 2,
 *     a head of 1024 rows, no stage_layers): pp 2 and pp 4 run the
 *     plan's split (llmt_plan_stage_layers; each stage's "layers" in its
 *     pp metrics lines), which weighs each layer by its FLOPs (4,4 and
 *     2,2,2,2 here, where weighing the layers alike gives 5,3 and
 *     2,2,3,1: test plan-pp), with the single rank's losses.
 * usage: test_job_moepp CORPUS_DIR (any directory of text files) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "files.h"
#include "job_threads.h"
#include "llmtrain.h"

#define STEPS 6
_Static_assert(STEPS <= JT_MAXSTEPS, "jt_rank records steps 1..JT_MAXSTEPS");

static char tmp[512], prep[700];

/* A 2-layer llama, every layer 4 experts top-2, capacity 1.0 (drops), or
 * dropless (no capacity: a factor beside it is refused). */
static void spec(char *out, size_t cap, const char *par, int dropless)
{
    jt_moe_spec(out, cap, "moeppjob",
                dropless ? "\"dropless\": true"
                         : "\"capacity_factor\": 1.0, \"dropless\": false",
                par, prep);
}

/* (e)'s model: 8 llama layers, the even ones MoE (4 experts top-2 of
 * 352 each, dropless), a 1024-row head. */
static void spec8(char *out, size_t cap, const char *par)
{
    snprintf(out, cap,
             "{\"name\": \"moebal\", \"model\": {\"arch\": \"llama\", \"layers\": 8, "
             "\"hidden\": 64, \"heads\": 4, \"kv_heads\": 2, \"ffn\": 176, \"vocab\": 1024, "
             "\"seq_len\": 16, \"moe\": {\"experts\": 4, \"top_k\": 2, \"expert_ffn\": 352, "
             "\"every\": 2, \"dropless\": true}}, \"batch\": {\"micro\": 2, \"global\": 8},"
             " \"parallelism\": {%s}, \"optimizer\": {\"lr\": 3e-3}, \"schedule\": "
             "{\"kind\": \"cosine\", \"warmup_steps\": 2}, \"train\": {\"steps\": %d, "
             "\"seed\": 5, \"eval_interval\": 0, \"eval_batches\": 1, \"log_interval\": 0, "
             "\"threads\": 1, \"sample_tokens\": 0, \"device\": \"cpu\"}, \"data\": "
             "{\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}}, \"checkpoint\": "
             "{\"interval\": 0, \"async\": false}, \"hardware\": {\"gpu\": \"cpu\"}}",
             par, STEPS, prep);
}

/* The layers the last pp line of a rank's metrics.jsonl names, -1 none. */
static int pp_layers(const char *metrics)
{
    char *txt = test_slurp(metrics, NULL);
    int n = -1;
    for (char *at = txt; at && (at = strstr(at, "\"event\":\"pp\"")) != NULL; at++) {
        char *l = strstr(at, "\"layers\":");
        if (l)
            n = atoi(l + strlen("\"layers\":"));
    }
    free(txt);
    return n;
}

/* (e): each stage of a pp `pp` job holds the plan's layers. */
static void balance(int pp, const jt_rank *ref, jt_rank *a)
{
    char json[4096], par[32], dir[800], what[64], lay[64] = "";
    snprintf(par, sizeof par, "\"pp\": %d", pp);
    spec8(json, sizeof json, par);
    llmt_spec *s = NULL;
    llmt_plan *p = NULL;
    CHECK_STATUS(llmt_spec_parse_json(NULL, json, strlen(json), &s), LLMT_OK);
    if (s)
        CHECK_STATUS(llmt_plan_create(NULL, s, pp, &p), LLMT_OK);
    snprintf(what, sizeof what, "moe every 2, pp %d, automatic stages", pp);
    snprintf(dir, sizeof dir, "%s/bal%d", tmp, pp);
    if (p && run_layout(what, json, pp, dir, 0, 0, a)) {
        check_losses(what, a, pp, ref, 1, STEPS);
        for (int r = 0; r < pp; r++) {
            int32_t f = 0, n = -1;
            CHECK_STATUS(llmt_plan_stage_layers(p, r, 0, &f, &n), LLMT_OK);
            CHECK_EQ_INT(pp_layers(a[r].metrics), n);
            snprintf(lay + strlen(lay), sizeof lay - strlen(lay), "%s%d", r ? "," : "",
                     pp_layers(a[r].metrics));
        }
        printf("%s: the stages run %s layers, the plan's\n", what, lay);
    }
    llmt_plan_destroy(p);
    llmt_spec_destroy(s);
}

/* The single rank's spec: the corpus is prepared and the reference run
 * with it. */
static void spec_one(char *out, size_t cap)
{
    spec(out, cap, "\"dp\": 1", 0);
}

int main(int argc, char **argv)
{
    static jt_rank ref[1], a[JT_MAXR];
    int rc = jt_start(argc, argv, "job-moepp", (jt_config){STEPS, 0, 0, 34, 1e-5, 0}, spec_one,
                      tmp, sizeof tmp, prep, sizeof prep, ref);
    if (rc >= 0)
        return rc;
    char json[4096], dir[800];
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
    /* (e) */
    static jt_rank bref[1];
    spec8(json, sizeof json, "\"dp\": 1");
    snprintf(dir, sizeof dir, "%s/bal1", tmp);
    if (run_layout("moe every 2, one rank", json, 1, dir, 0, 0, bref)) {
        balance(2, bref, a);
        balance(4, bref, a);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    return check_exit("job-moepp");
}
