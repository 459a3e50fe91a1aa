/* llmt_job under context parallelism composed with pipeline parallelism
 * (issue 18), in process: one thread per rank on an in-process
 * communicator, each layout against the single-rank job on the same spec
 * (the independent reference: the same data and seed, global batch 8 =
 * micro 2 x accum x dp, so every layout trains on the same sequences; the
 * plan orders ranks TP, CP, PP, DP, so world rank r is CP rank r % 2,
 * stage r / 2 % 2, replica r / 4; a stage's CP ranks read the same
 * sequences and each trains on its two chunks of them).
 * (a) cp 2 x pp 2 (1F1B, ring and all-gather), cp 2 x pp 2 x dp 2 ZeRO-1
 *     and cp 2 x tp 2 x pp 2 with sequence parallelism (the order tp, SP,
 *     cp, pp) on GPT-2 (learned positions, tied head), Llama (RoPE, kv 2)
 *     cp 2 x pp 2: every rank's loss of every step and its validation
 *     losses within 1e-5 relative of the single rank's; the sampled text
 *     (llmt_job_sample: the windows through the stages, the last
 *     position's row on one CP rank) the single rank's; the perf split
 *     times both the CP and the PP group;
 * (b) checkpoints across the layouts in one run directory: cp 2 x pp 2
 *     runs steps 1-2, one rank resumes for 3-4, cp 2 x pp 2 x dp 2 for
 *     5-6: each step's loss within 1e-5 of the uninterrupted single
 *     rank's;
 * (c) bad layouts refused at creation, naming the key: cp 2 x pp 2 on 6
 *     ranks (the world), dp 2 given on 4 ranks.
 * Why 1e-5: cp and pp change only the order of fp32 sums (attention merged
 * by log-sum-exp over blocks, gradients summed over the CP group, the
 * gradient norm summed per stage), as in test_job_cp.c and test_job_pp.c.
 * usage: test_job_cppp CORPUS_DIR (any directory of text files) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "job_threads.h"
#include "llmtrain.h"

#define STEPS 6
_Static_assert(STEPS <= JT_MAXSTEPS, "jt_rank records steps 1..JT_MAXSTEPS");

static jt_suite g;

#define GPT2 "\"arch\": \"gpt2\", \"layers\": 2, \"hidden\": 32, \"heads\": 4"
#define LLAMA \
    "\"arch\": \"llama\", \"layers\": 2, \"hidden\": 32, \"heads\": 4, \"kv_heads\": 2"

/* The run every layout shares (job_threads.h, as test_job_cp.c's); par:
 * the "parallelism" keys. */
static void spec(char *out, size_t cap, const char *model, const char *par)
{
    jt_suite_spec(&g, out, cap, model, par, 16);
}

/* The perf split times both the CP and the PP group on every rank. */
static const int cppp_groups[] = {LLMT_JOB_GROUP_CP, LLMT_JOB_GROUP_PP, -1};

static void compare(const char *name, const char *model, const char *par, int n,
                    const jt_rank *ref, jt_rank *a)
{
    jt_suite_compare(&g, name, model, par, n, ref, a, cppp_groups);
}

/* The plan of cp 2 x pp 2 on 8 ranks (dp left out): dp derived as 2,
 * the batch's accumulation from it, each rank's coordinates in the order
 * TP, CP, PP, DP and its CP and PP groups those of the layout the threads
 * run (the job cuts its groups from them). */
static void plan_check(void)
{
    char json[4096];
    spec(json, sizeof json, GPT2, "\"cp\": 2, \"pp\": 2");
    llmt_spec *sp = NULL;
    llmt_plan *pl = NULL;
    CHECK_STATUS(llmt_spec_parse_json(NULL, json, strlen(json), &sp), LLMT_OK);
    CHECK_STATUS(llmt_plan_create(NULL, sp, 8, &pl), LLMT_OK);
    if (!pl) {
        llmt_spec_destroy(sp);
        return;
    }
    int32_t deg[LLMT_PLAN_NDIMS], co[LLMT_PLAN_NDIMS], g[8];
    CHECK_STATUS(llmt_plan_degrees(pl, deg), LLMT_OK);
    CHECK(deg[LLMT_DIM_TP] == 1 && deg[LLMT_DIM_CP] == 2 && deg[LLMT_DIM_PP] == 2 &&
          deg[LLMT_DIM_DP] == 2);
    llmt_plan_estimate e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    CHECK_STATUS(llmt_plan_get_estimate(pl, &e), LLMT_OK);
    CHECK(e.dp == 2 && e.micro == 2 && e.grad_accum == 2); /* 8 = 2 x 2 x dp 2 */
    for (int32_t r = 0; r < 8; r++) {
        CHECK_STATUS(llmt_plan_coords(pl, r, co), LLMT_OK);
        CHECK(co[LLMT_DIM_TP] == 0 && co[LLMT_DIM_CP] == r % 2 &&
              co[LLMT_DIM_PP] == r / 2 % 2 && co[LLMT_DIM_DP] == r / 4);
        size_t n = 0;
        CHECK_STATUS(llmt_plan_group(pl, LLMT_DIM_CP, r, g, 8, &n, NULL), LLMT_OK);
        CHECK(n == 2 && g[0] == r - r % 2 && g[1] == g[0] + 1);
        CHECK_STATUS(llmt_plan_group(pl, LLMT_DIM_PP, r, g, 8, &n, NULL), LLMT_OK);
        CHECK(n == 2 && g[0] == r % 2 + 4 * (r / 4) && g[1] == g[0] + 2);
    }
    printf("plan cp 2 x pp 2 on 8 ranks: dp %d, micro %d x accum %d; coordinates and groups "
           "checked\n",
           (int)e.dp, (int)e.micro, (int)e.grad_accum);
    llmt_plan_destroy(pl);
    llmt_spec_destroy(sp);
}

int main(int argc, char **argv)
{
    char json[4096];
    static jt_rank ref[1], lref[1], a[JT_MAXR];
    int rc =
        jt_suite_start(&g, argc, argv, "cpppjob", "job-cp-pp",
                       (jt_config){STEPS, 3, JT_SAMPLE_BEFORE_FINISH, 34, 1e-5, 0}, GPT2, ref);
    if (rc >= 0)
        return rc;

    plan_check();
    /* (a) */
    compare("cp 2 x pp 2 ring", GPT2, "\"cp\": 2, \"pp\": 2", 4, ref, a);
    compare("cp 2 x pp 2 allgather", GPT2,
            "\"cp\": 2, \"pp\": 2, \"cp_variant\": \"allgather\"", 4, ref, a);
    compare("cp 2 x pp 2 x dp 2 ZeRO-1", GPT2, "\"cp\": 2, \"pp\": 2, \"zero\": 1", 8, ref, a);
    compare("cp 2 x tp 2 x pp 2 SP", GPT2,
            "\"cp\": 2, \"tp\": 2, \"pp\": 2, \"sequence_parallel\": true", 8, ref, a);
    if (jt_suite_one(&g, "llama one rank", LLAMA, "llama-one", lref))
        compare("llama kv 2, cp 2 x pp 2 ring", LLAMA, "\"cp\": 2, \"pp\": 2", 4, lref, a);

    /* (b) the chain through checkpoints, the layout changing */
    {
        static const jt_link ch[] = {
            {"chain cp 2 x pp 2", "\"cp\": 2, \"pp\": 2", 4},
            {"chain one rank (resumed)", "\"tp\": 1", 1},
            {"chain cp 2 x pp 2 x dp 2 (resumed)", "\"cp\": 2, \"pp\": 2", 8}};
        jt_suite_chain(&g, GPT2, ch, 3, ref, a);
    }

    /* (c) bad input, named */
    {
        static const char *const w_world[] = {"parallelism.cp", "world size 6", NULL};
        static const char *const w_dp[] = {"parallelism.dp", "parallelism.pp", NULL};
        spec(json, sizeof json, GPT2, "\"cp\": 2, \"pp\": 2");
        jt_suite_refused(&g, "cp 2 x pp 2 on 6 ranks", json, 6, w_world);
        spec(json, sizeof json, GPT2, "\"cp\": 2, \"pp\": 2, \"dp\": 2");
        jt_suite_refused(&g, "cp 2 x pp 2 x dp 2 on 4 ranks", json, 4, w_dp);
    }

    return jt_suite_close(&g, "job-cp-pp");
}
