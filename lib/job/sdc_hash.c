/* What the silent-data-corruption checks share (detect.c, sdc_replay.c,
 * sdc_shares.c): one xxh64 over a rank's tensors, walked in the model's
 * order, and every rank's replica group.
 *
 * The replica groups follow from the layout alone (the plan's data
 * parallel group, under expert parallelism split by EP rank), which a
 * process never changes: an in-place recovery keeps the world and the plan,
 * and a smaller world is a new gang (new processes). They took O(world)
 * plan queries at every check and every replay, so they are made once and
 * kept on the job; dropped with the communicators all the same (inplace.c),
 * so a layout that one day changes in place cannot keep stale groups. */
#include <stdlib.h>
#include <xxhash.h>

#include "job/job.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

llmt_status llmt__job_xxh_walk(llmt_job *j, job_hash_part part, uint64_t *out)
{
    *out = 0;
    int32_t n = 0;
    llmt_model_param_count(j->model, &n, NULL);
    XXH64_state_t *h = XXH64_createState();
    if (!h)
        return FAIL(LLMT_ERR_OUT_OF_MEMORY, "sdc: rank %d has no memory for a hash state",
                    (int)j->rank);
    XXH64_reset(h, 0);
    llmt_status s = LLMT_OK;
    for (int32_t i = 0; i < n && s == LLMT_OK; i++)
        s = part(j, i, h); /* its message on the job */
    *out = XXH64_digest(h);
    XXH64_freeState(h);
    return s;
}

const int32_t *llmt__job_replica_groups(llmt_job *j)
{
    if (j->replica_grp)
        return j->replica_grp;
    int32_t deg[LLMT_PLAN_NDIMS] = {0}, c[LLMT_PLAN_NDIMS] = {0};
    llmt_plan_degrees(j->plan, deg);
    int32_t ep = deg[LLMT_DIM_EP] > 1 ? deg[LLMT_DIM_EP] : 1;
    int32_t *grp = malloc((size_t)j->world * sizeof *grp);
    for (int32_t r = 0; grp && r < j->world; r++) {
        size_t n = 0;
        grp[r] = -1;
        llmt_plan_group(j->plan, LLMT_DIM_DP, r, NULL, 0, &n, &grp[r]);
        /* under ep only the ranks of one EP rank hold the same experts */
        if (ep > 1 && llmt_plan_coords(j->plan, r, c) == LLMT_OK)
            grp[r] = grp[r] * ep + c[LLMT_DIM_EP];
    }
    j->replica_grp = grp;
    return grp;
}

void llmt__job_replica_forget(llmt_job *j)
{
    free(j->replica_grp);
    j->replica_grp = NULL;
}
