/* llmt_job with MoE layers under tensor (with and without sequence
 * parallelism) and context parallelism (issue 18), in process: one thread
 * per rank on an in-process communicator, each layout against the
 * single-rank job on the same spec (same data and seed, global batch 8 =
 * micro 2 x accum x dp, so every layout trains on the same sequences). A
 * capacity that drops nothing (capacity_factor 2 with 4 experts, top-2:
 * every expert can take every row its rank routes), so no layout changes
 * a routing decision:
 * (a) tp 2, tp 2 SP, cp 2, tp 2 SP x dp 2 ZeRO-1, cp 2 x dp 2, tp 2 x dp 2
 *     x ep 2, cp 2 x dp 2 x ep 2: 6 AdamW steps, every rank's loss within
 *     1e-5 relative of the single rank's (test/train/test_moe_tpcp.c
 *     checks the parameters and the tallies);
 * (b) a tp 2 SP x dp 2 checkpoint (step 4) resumed by one rank: steps 5-6
 *     within 1e-5 of the uninterrupted run's;
 * (c) tp 2 x pp 2 x dp 2 ZeRO-1, tp 2 SP x pp 2 x dp 2, tp 2 SP x pp 2 x
 *     dp 2 x ep 2 ZeRO-1 and tp 2 SP x cp 2 x pp 2 (each stage's layers
 *     tensor parallel, test/train/test_moe_tppp.c checks the parameters
 *     and tallies): every rank's losses as in (a), the TP, PP (and EP,
 *     CP) groups timed;
 * (d) a tp 2 x pp 2 checkpoint (step 4) resumed by one rank, as (b).
 * usage: test_job_moetp CORPUS_DIR (any directory of text files) */
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

/* A 2-layer llama, every layer 4 experts top-2 and a shared expert. */
static void spec(char *out, size_t cap, int tp, int sp, int cp, int dp, int ep, int pp,
                 int zero)
{
    snprintf(out, cap,
             "{\"name\": \"moetp\", \"model\": {\"arch\": \"llama\", \"layers\": 2, "
             "\"hidden\": 32, \"heads\": 4, \"kv_heads\": 2, \"ffn\": 32, \"vocab\": 320, "
             "\"seq_len\": 16, \"moe\": {\"experts\": 4, \"top_k\": 2, \"expert_ffn\": 24, "
             "\"shared_experts\": 1, \"capacity_factor\": 2.0}},"
             " \"batch\": {\"micro\": 2, \"global\": 8},"
             " \"parallelism\": {\"tp\": %d, \"sequence_parallel\": %s, \"cp\": %d, "
             "\"dp\": %d, \"ep\": %d, \"pp\": %d, \"zero\": %d},"
             " \"optimizer\": {\"lr\": 3e-3}, \"schedule\": {\"kind\": \"cosine\", "
             "\"warmup_steps\": 2},"
             " \"train\": {\"steps\": %d, \"seed\": 5, \"eval_interval\": 0, "
             "\"eval_batches\": 1, \"log_interval\": 0, \"threads\": 1, \"sample_tokens\": 0, "
             "\"device\": \"cpu\"},"
             " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
             " \"checkpoint\": {\"interval\": 2, \"async\": false}, \"hardware\": {\"gpu\": "
             "\"cpu\"}}",
             tp, sp ? "true" : "false", cp, dp, ep, pp, zero, STEPS, prep);
}

int main(int argc, char **argv)
{
    jt_cfg = (jt_config){STEPS, 0, 0, 28, 1e-5, 0};
    if (argc < 2) {
        fprintf(stderr, "usage: test_job_moetp CORPUS_DIR\n");
        return 2;
    }
    snprintf(tmp, sizeof tmp, "/tmp/llmt-job-moetp-XXXXXX");
    if (!mkdtemp(tmp))
        return 1;
    char json[4096], dir[800];
    {
        snprintf(prep, sizeof prep, "%s", argv[1]);
        spec(json, sizeof json, 1, 0, 1, 1, 1, 1, 0);
        snprintf(dir, sizeof dir, "%s/prep", tmp);
        llmt_status s = jt_prepare(json, dir);
        snprintf(prep, sizeof prep, "%s/prep/data", tmp);
        if (s != LLMT_OK)
            return check_exit("job-moetp");
    }
    static jt_rank ref[1], a[JT_MAXR];
    spec(json, sizeof json, 1, 0, 1, 1, 1, 1, 0);
    snprintf(dir, sizeof dir, "%s/one", tmp);
    if (!run_layout("one rank", json, 1, dir, 0, 0, ref))
        return check_exit("job-moetp");
    printf("one rank: loss %.6f -> %.6f\n", ref->loss[1], ref->loss[STEPS]);
    static const struct {
        const char *name;
        int tp, sp, cp, dp, ep, zero;
    } lay[] = {
        {"tp 2", 2, 0, 1, 1, 1, 0},
        {"tp 2 SP", 2, 1, 1, 1, 1, 0},
        {"cp 2", 1, 0, 2, 1, 1, 0},
        {"tp 2 SP x dp 2 ZeRO-1", 2, 1, 1, 2, 1, 1},
        {"cp 2 x dp 2", 1, 0, 2, 2, 1, 0},
        {"tp 2 x dp 2 x ep 2", 2, 0, 1, 2, 2, 0},
        {"cp 2 x dp 2 x ep 2", 1, 0, 2, 2, 2, 0},
    };
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) {
        int n = lay[i].tp * lay[i].cp * lay[i].dp;
        spec(json, sizeof json, lay[i].tp, lay[i].sp, lay[i].cp, lay[i].dp, lay[i].ep, 1,
             lay[i].zero);
        snprintf(dir, sizeof dir, "%s/l%zu", tmp, i);
        if (!run_layout(lay[i].name, json, n, dir, 0, 0, a))
            continue;
        check_losses(lay[i].name, a, n, ref, 1, STEPS);
        /* the layout ran: its groups' collectives were waited on */
        for (int r = 0; r < n; r++) {
            CHECK(lay[i].tp > 1 ? a[r].comm_s[LLMT_JOB_GROUP_TP] > 0 : 1);
            CHECK(lay[i].cp > 1 ? a[r].comm_s[LLMT_JOB_GROUP_CP] > 0 : 1);
            CHECK(lay[i].ep > 1 ? a[r].comm_s[LLMT_JOB_GROUP_EP] > 0 : 1);
        }
    }
    /* (b) tp 2 SP x dp 2 saves at step 4, one rank resumes */
    snprintf(dir, sizeof dir, "%s/reshard", tmp);
    spec(json, sizeof json, 2, 1, 1, 2, 1, 1, 1);
    if (run_layout("tp 2 SP x dp 2 steps 1-4", json, 4, dir, 0, 4, a)) {
        check_losses("tp 2 SP x dp 2, then", a, 4, ref, 1, 4);
        spec(json, sizeof json, 1, 0, 1, 1, 1, 1, 0);
        if (run_layout("one rank resumes", json, 1, dir, 1, 0, a))
            check_losses("one rank resumes its checkpoint", a, 1, ref, 5, STEPS);
    }
    /* (c) tp x pp x dp: each stage's layers tensor parallel */
    static const struct {
        const char *name;
        int sp, zero, ep, cp, dp;
    } tppp[] = {{"tp 2 x pp 2 x dp 2 ZeRO-1", 0, 1, 1, 1, 2},
                {"tp 2 SP x pp 2 x dp 2", 1, 0, 1, 1, 2},
                {"tp 2 SP x pp 2 x dp 2 x ep 2", 1, 1, 2, 1, 2},
                {"tp 2 SP x cp 2 x pp 2", 1, 0, 1, 2, 1}};
    for (size_t i = 0; i < sizeof tppp / sizeof tppp[0]; i++) {
        spec(json, sizeof json, 2, tppp[i].sp, tppp[i].cp, tppp[i].dp, tppp[i].ep, 2,
             tppp[i].zero);
        snprintf(dir, sizeof dir, "%s/tppp%zu", tmp, i);
        if (!run_layout(tppp[i].name, json, 8, dir, 0, 0, a))
            continue;
        check_losses(tppp[i].name, a, 8, ref, 1, STEPS);
        for (int r = 0; r < 8; r++) {
            CHECK(a[r].comm_s[LLMT_JOB_GROUP_TP] > 0 && a[r].comm_s[LLMT_JOB_GROUP_PP] > 0);
            CHECK(tppp[i].ep > 1 ? a[r].comm_s[LLMT_JOB_GROUP_EP] > 0 : 1);
            CHECK(tppp[i].cp > 1 ? a[r].comm_s[LLMT_JOB_GROUP_CP] > 0 : 1);
        }
    }
    /* (d) tp 2 x pp 2 saves at step 4, one rank resumes */
    snprintf(dir, sizeof dir, "%s/reshard-pp", tmp);
    spec(json, sizeof json, 2, 0, 1, 1, 1, 2, 0);
    if (run_layout("tp 2 x pp 2 steps 1-4", json, 4, dir, 0, 4, a)) {
        check_losses("tp 2 x pp 2, then", a, 4, ref, 1, 4);
        spec(json, sizeof json, 1, 0, 1, 1, 1, 1, 0);
        if (run_layout("one rank resumes", json, 1, dir, 1, 0, a))
            check_losses("one rank resumes tp x pp's", a, 1, ref, 5, STEPS);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    return check_exit("job-moetp");
}
