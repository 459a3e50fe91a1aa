/* Expert parallelism in the job: the EP group from the plan (consecutive
 * data parallel ranks: the plan's LLMT_DIM_EP), attached to the trainer
 * beside the data parallel group it is carved out of, as
 * llmt_trainer_set_ep_comm asks. The spec has checked that ep divides
 * model.moe.experts and dp; every rank of the group reads its own
 * sequences (it is a data parallel replica) and sends the rows its tokens
 * route to the group's experts. */
#include "job/job.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

llmt_status llmt__job_attach_ep(llmt_job *j)
{
    int ep = (int)j->spec->parallelism.ep;
    llmt_status s = llmt_comm_create_plan_group(j->comm, j->plan, LLMT_DIM_EP, &j->ep_comm);
    if (s != LLMT_OK)
        return FAIL(s, "job: the ep %d groups: %s", ep, llmt_comm_last_error(j->comm));
    s = llmt_trainer_set_ep_comm(j->tr, j->ep_comm);
    if (s != LLMT_OK)
        return FAIL(s, "parallelism.ep: %d: %s", ep, llmt_trainer_last_error(j->tr));
    j->group_comm[LLMT_JOB_GROUP_EP] = j->ep_comm;
    return LLMT_OK;
}
