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
    char par[256];
    snprintf(par, sizeof par,
             "\"tp\": %d, \"sequence_parallel\": %s, \"cp\": %d, \"dp\": %d, \"ep\": %d, "
             "\"pp\": %d, \"zero\": %d",
             tp, sp ? "true" : "false", cp, dp, ep, pp, zero);
    jt_moe_spec(out, cap, "moetp", "\"shared_experts\": 1, \"capacity_factor\": 2.0", par,
                prep);
}

/* A layout: its degrees and ZeRO stage. */
typedef struct moe_lay {
    const char *name;
    int tp, sp, cp, dp, ep, pp, zero;
} moe_lay;

/* Layout l in run directory tmp/dirname against the single rank ref:
 * every rank's losses, and every group it has timed on some rank (its
 * collectives were waited on; a rank whose messages were always there
 * before it asked can time 0: the clean-clone CI saw it once on a loaded
 * machine for a TP or PP group). */
static void check_layout(const moe_lay *l, const char *dirname, const jt_rank *ref, jt_rank *a)
{
    char json[4096], dir[800];
    int n = l->tp * l->cp * l->dp * l->pp;
    spec(json, sizeof json, l->tp, l->sp, l->cp, l->dp, l->ep, l->pp, l->zero);
    snprintf(dir, sizeof dir, "%s/%s", tmp, dirname);
    if (!run_layout(l->name, json, n, dir, 0, 0, a))
        return;
    check_losses(l->name, a, n, ref, 1, STEPS);
    static const struct {
        int g;
        const char *name;
    } gs[] = {{LLMT_JOB_GROUP_TP, "tp"},
              {LLMT_JOB_GROUP_PP, "pp"},
              {LLMT_JOB_GROUP_CP, "cp"},
              {LLMT_JOB_GROUP_EP, "ep"}};
    const int deg[] = {l->tp, l->pp, l->cp, l->ep};
    for (int k = 0; k < 4; k++) {
        int timed = 0;
        for (int r = 0; r < n; r++)
            timed += a[r].comm_s[gs[k].g] > 0;
        if (deg[k] > 1 && !timed)
            fprintf(stderr, "FAIL %s: no rank timed its %s group\n", l->name, gs[k].name);
        CHECK(deg[k] > 1 ? timed > 0 : 1);
    }
}

/* The single rank's spec: the corpus is prepared and the reference run
 * with it. */
static void spec_one(char *out, size_t cap)
{
    spec(out, cap, 1, 0, 1, 1, 1, 1, 0);
}

/* Layout l trains steps 1-4 in run directory tmp/dirname and saves, one
 * rank resumes its checkpoint there for the rest (`resumed`): both
 * against the uninterrupted single rank ref. */
static void check_resume(const moe_lay *l, const char *dirname, const char *resumed,
                         const jt_rank *ref, jt_rank *a)
{
    char json[4096], dir[800], what[96], then[96];
    int n = l->tp * l->cp * l->dp * l->pp;
    snprintf(dir, sizeof dir, "%s/%s", tmp, dirname);
    snprintf(what, sizeof what, "%s steps 1-4", l->name);
    snprintf(then, sizeof then, "%s, then", l->name);
    spec(json, sizeof json, l->tp, l->sp, l->cp, l->dp, l->ep, l->pp, l->zero);
    if (!run_layout(what, json, n, dir, 0, 4, a))
        return;
    check_losses(then, a, n, ref, 1, 4);
    spec_one(json, sizeof json);
    if (run_layout("one rank resumes", json, 1, dir, 1, 0, a))
        check_losses(resumed, a, 1, ref, 5, STEPS);
}

int main(int argc, char **argv)
{
    static jt_rank ref[1], a[JT_MAXR];
    int rc = jt_start(argc, argv, "job-moetp", (jt_config){STEPS, 0, 0, 28, 1e-5, 0}, spec_one,
                      tmp, sizeof tmp, prep, sizeof prep, ref);
    if (rc >= 0)
        return rc;
    char dir[800];
    static const moe_lay lay[] = {
        {"tp 2", 2, 0, 1, 1, 1, 1, 0},
        {"tp 2 SP", 2, 1, 1, 1, 1, 1, 0},
        {"cp 2", 1, 0, 2, 1, 1, 1, 0},
        {"tp 2 SP x dp 2 ZeRO-1", 2, 1, 1, 2, 1, 1, 1},
        {"cp 2 x dp 2", 1, 0, 2, 2, 1, 1, 0},
        {"tp 2 x dp 2 x ep 2", 2, 0, 1, 2, 2, 1, 0},
        {"cp 2 x dp 2 x ep 2", 1, 0, 2, 2, 2, 1, 0},
    };
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) {
        snprintf(dir, sizeof dir, "l%zu", i);
        check_layout(&lay[i], dir, ref, a);
    }
    /* (b) tp 2 SP x dp 2 saves at step 4, one rank resumes */
    static const moe_lay spdp = {"tp 2 SP x dp 2", 2, 1, 1, 2, 1, 1, 1};
    check_resume(&spdp, "reshard", "one rank resumes its checkpoint", ref, a);
    /* (c) tp x pp x dp: each stage's layers tensor parallel */
    static const moe_lay tppp[] = {{"tp 2 x pp 2 x dp 2 ZeRO-1", 2, 0, 1, 2, 1, 2, 1},
                                   {"tp 2 SP x pp 2 x dp 2", 2, 1, 1, 2, 1, 2, 0},
                                   {"tp 2 SP x pp 2 x dp 2 x ep 2", 2, 1, 1, 2, 2, 2, 1},
                                   {"tp 2 SP x cp 2 x pp 2", 2, 1, 2, 1, 1, 2, 0}};
    for (size_t i = 0; i < sizeof tppp / sizeof tppp[0]; i++) {
        snprintf(dir, sizeof dir, "tppp%zu", i);
        check_layout(&tppp[i], dir, ref, a);
    }
    /* (d) tp 2 x pp 2 saves at step 4, one rank resumes */
    static const moe_lay tp_pp = {"tp 2 x pp 2", 2, 0, 1, 1, 1, 2, 0};
    check_resume(&tp_pp, "reshard-pp", "one rank resumes tp x pp's", ref, a);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    return check_exit("job-moetp");
}
