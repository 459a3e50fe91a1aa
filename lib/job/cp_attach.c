/* Context parallelism in the job: the CP group from the plan's
 * coordinates (TP innermost, then CP: the ranks of a group differ only in
 * their CP coordinate and hold the same TP shard), attached to the
 * trainer after tensor parallelism and before data parallelism, as
 * llmt_trainer_set_cp_comm asks. Every rank of a CP group belongs to the
 * same data parallel replica (the same DP coordinate), so it reads the
 * same sequences from the loader and trains on its chunks of them. */
#include "job/job.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

llmt_status llmt__job_attach_cp(llmt_job *j)
{
    llmt_status s = llmt_comm_create_plan_group(j->comm, j->plan, LLMT_DIM_CP, &j->cp_comm);
    /* with tensor or pipeline parallelism the caller cut the DP group
     * already */
    if (s == LLMT_OK && !j->dp_comm && j->dp > 1)
        s = llmt_comm_create_plan_group(j->comm, j->plan, LLMT_DIM_DP, &j->dp_comm);
    if (s != LLMT_OK)
        return FAIL(s, "job: the cp %d x dp %d groups: %s", (int)j->cp, (int)j->dp,
                    llmt_comm_last_error(j->comm));
    llmt_cp_opts o;
    llmt_cp_opts_init(&o, sizeof o);
    o.variant = j->spec->parallelism.cp_variant == LLMT_SPEC_CP_ALLGATHER ? LLMT_CP_ALL_GATHER
                                                                          : LLMT_CP_RING;
    llmt__obs_remake_begin(j->obs); /* the engine is made again, timed */
    s = llmt_trainer_set_cp_comm(j->tr, j->cp_comm, &o);
    llmt__obs_remake_end();
    if (s != LLMT_OK)
        return FAIL(s, "parallelism.cp: %d: %s", (int)j->cp, llmt_trainer_last_error(j->tr));
    j->group_comm[LLMT_JOB_GROUP_CP] = j->cp_comm;
    return LLMT_OK;
}
