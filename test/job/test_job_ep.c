/* llmt_job under data and expert parallelism with MoE layers (issue 18),
 * in process: one thread per rank on an in-process communicator, each
 * layout against the single-rank job on the same spec (same data and
 * seed, global batch 8 = micro 2 x accum x dp, so every layout trains on
 * the same sequences):
 * (a) dp 2 (ep 1), ep 2 (dp 2), ep 2 x dp 4 ZeRO-1, ep 4 (dp 4): 6 AdamW
 *     steps, every rank's loss within 1e-5 relative of the single rank's
 *     (ep and dp change only the order of fp32 sums; test/train/
 *     test_moe_ep.c checks the parameters tensor by tensor);
 * (b) resharding through the job's checkpoint: ep 2 (dp 2) runs steps
 *     1-4 and saves, ep 1 on one rank resumes for 5-6: losses within 1e-5
 *     of the uninterrupted run's (experts are rows of one global tensor,
 *     whole on every rank);
 * (c) bad input refused at creation naming the key: ep not dividing the
 *     experts or dp, top_k > experts, capacity_factor <= 0;
 * (d) ep 2 x dp 4 with the silent data corruption check every 2 steps
 *     (fault_tolerance.sdc_interval): the replicas' parameter hashes agree
 *     although each rank's engine holds only its EP rank's experts (the
 *     whole host tensors are hashed), so the run goes on, losses equal.
 * usage: test_job_ep CORPUS_DIR (any directory of text files) */
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
static void spec(char *out, size_t cap, int dp, int ep, int zero, const char *moe_extra)
{
    char moe[512], par[128];
    snprintf(moe, sizeof moe, "\"capacity_factor\": 1.0%s", moe_extra ? moe_extra : "");
    snprintf(par, sizeof par, "\"dp\": %d, \"ep\": %d, \"zero\": %d", dp, ep, zero);
    jt_moe_spec(out, cap, "epjob", moe, par, prep);
}

/* Creation of `json` on `n` ranks must fail on every rank naming `key`. */
static void refused(const char *json, int n, const char *key)
{
    static jt_rank a[JT_MAXR];
    char dir[800];
    snprintf(dir, sizeof dir, "%s/bad", tmp);
    run_ranks(key, json, n, dir, 0, 0, a, 0);
    for (int r = 0; r < n; r++) {
        CHECK(a[r].st != LLMT_OK && strstr(a[r].err, key) != NULL);
        if (r == 0)
            printf("refused (%s): %.160s\n", key, a[r].err);
    }
}

/* The single rank's spec: the corpus is prepared and the reference run
 * with it. */
static void spec_one(char *out, size_t cap)
{
    spec(out, cap, 1, 1, 0, NULL);
}

int main(int argc, char **argv)
{
    static jt_rank ref[1], a[JT_MAXR];
    int rc = jt_start(argc, argv, "job-ep", (jt_config){STEPS, 0, 0, 28, 1e-5, 0}, spec_one,
                      tmp, sizeof tmp, prep, sizeof prep, ref);
    if (rc >= 0)
        return rc;
    char json[4096], dir[800];
    static const struct {
        int dp, ep, zero;
    } lay[] = {{2, 1, 0}, {2, 2, 0}, {4, 2, 1}, {4, 4, 0}};
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "dp %d x ep %d ZeRO-%d", lay[i].dp, lay[i].ep, lay[i].zero);
        spec(json, sizeof json, lay[i].dp, lay[i].ep, lay[i].zero, NULL);
        snprintf(dir, sizeof dir, "%s/l%zu", tmp, i);
        if (run_layout(what, json, lay[i].dp, dir, 0, 0, a)) {
            check_losses(what, a, lay[i].dp, ref, 1, STEPS);
            /* the EP group ran the exchange (its waits are timed), or
             * there is none */
            for (int r = 0; r < lay[i].dp; r++)
                CHECK(lay[i].ep > 1 ? a[r].comm_s[LLMT_JOB_GROUP_EP] > 0
                                    : a[r].comm_s[LLMT_JOB_GROUP_EP] == 0);
            printf("  rank 0 exposed EP time of the last step: %.3g s\n",
                   a[0].comm_s[LLMT_JOB_GROUP_EP]);
        }
    }
    /* (b) ep 2 saves at step 4, ep 1 resumes */
    snprintf(dir, sizeof dir, "%s/reshard", tmp);
    spec(json, sizeof json, 2, 2, 0, NULL);
    if (run_layout("ep 2 steps 1-4", json, 2, dir, 0, 4, a)) {
        check_losses("ep 2 (dp 2), then", a, 2, ref, 1, 4);
        spec(json, sizeof json, 1, 1, 0, NULL);
        if (run_layout("ep 1 resumes", json, 1, dir, 1, 0, a))
            check_losses("ep 1 resumes its checkpoint", a, 1, ref, 5, STEPS);
    }
    /* (c) bad input, named */
    spec(json, sizeof json, 4, 3, 0, NULL);
    refused(json, 4, "parallelism.ep");
    spec(json, sizeof json, 2, 4, 0, NULL);
    refused(json, 2, "parallelism.ep"); /* 4 does not divide dp 2 */
    spec(json, sizeof json, 2, 2, 0, NULL);
    char *p = strstr(json, "\"top_k\": 2");
    if (p)
        p[9] = '5';
    refused(json, 2, "model.moe.top_k");
    spec(json, sizeof json, 2, 2, 0, NULL);
    p = strstr(json, "\"capacity_factor\": 1.0");
    if (p)
        memcpy(p + 19, "0.0", 3);
    refused(json, 2, "model.moe.capacity_factor");
    /* (d) the SDC check under ep */
    spec(json, sizeof json, 4, 2, 0, NULL);
    p = strstr(json, "\"hardware\"");
    const char *ft = "\"fault_tolerance\": {\"sdc_interval\": 2}, ";
    size_t at = p ? (size_t)(p - json) : 0, fl = strlen(ft);
    CHECK(p && strlen(json) + fl < sizeof json);
    if (p && strlen(json) + fl < sizeof json) {
        memmove(json + at + fl, json + at, strlen(json + at) + 1);
        memcpy(json + at, ft, fl);
        snprintf(dir, sizeof dir, "%s/sdc", tmp);
        if (run_layout("dp 4 x ep 2, sdc_interval 2", json, 4, dir, 0, 0, a))
            check_losses("dp 4 x ep 2, sdc_interval 2", a, 4, ref, 1, STEPS);
    }
    return check_exit("job-ep");
}
