/* The CUDA engine's device groups (issues 16 and 19).
 *
 * The job's own collectives (losses, the loader's cursor, checkpoint
 * agreement, SDC hashes, straggler times) are small and on host memory,
 * so they stay on the host communicator the launcher gave (MPI, Gloo).
 * The CUDA engine's gradients and parameters are device memory, which
 * only NCCL takes (lib/train/dp.c refuses anything else). So for each
 * group the engine reduces over, the job makes a NCCL twin: the same
 * ranks in the same order, its unique id made by the group's rank 0 and
 * sent over the host group. An in-place recovery (inplace.c) aborts the
 * twin with the rest and makes a new one from the new generation's host
 * group: NCCL's abort and re-initialisation with a new unique id,
 * through the launcher's store.
 *
 * Each rank drives the GPU of its local rank (modulo the GPUs it sees),
 * as NCCL's own device choice does (lib/comm/nccl.c), so the engine and
 * its communicator are on one device. */
#include <string.h>

#include "job/job.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

int32_t llmt__job_cuda_ordinal(const llmt_job *j)
{
    int32_t n = 0;
    if (llmt_cuda_device_count(&n) != LLMT_OK || n < 1)
        return 0; /* no device: the trainer's creation says so */
    return (j->local_rank > 0 ? j->local_rank : 0) % n;
}

llmt_status llmt__job_device_group(llmt_job *j, llmt_comm *host, const char *what,
                                   llmt_comm **dev)
{
    *dev = NULL;
    int32_t r = 0, n = 1;
    llmt_comm_rank(host, &r);
    llmt_comm_size(host, &n);
    /* rank 0's outcome travels with its id: no rank waits for an id
     * that never comes, and every rank names the same failure */
    struct {
        int32_t st; /* rank 0's llmt_comm_unique_id status */
        unsigned char id[LLMT_COMM_UNIQUE_ID_BYTES];
    } msg;
    /* sent as int32 words: the collectives take no byte type (a uint8
     * broadcast was refused by every backend, so no multi-process CUDA
     * job could make its NCCL group) */
    _Static_assert(sizeof msg % sizeof(int32_t) == 0, "the message is whole int32 words");
    memset(&msg, 0, sizeof msg);
    if (r == 0)
        msg.st = (int32_t)llmt_comm_unique_id(msg.id, sizeof msg.id);
    llmt_status s = llmt_comm_broadcast(host, &msg, sizeof msg / sizeof(int32_t),
                                        LLMT_DTYPE_INT32, 0, NULL);
    if (s != LLMT_OK)
        return FAIL(s, "job: the NCCL %s group's unique id: %s", what,
                    llmt_comm_last_error(host));
    if (msg.st != LLMT_OK)
        return FAIL(LLMT_ERR_NCCL,
                    "train.device cuda: the NCCL %s group: rank 0 of the group could not "
                    "make a unique id (%s): a CUDA engine reduces over NCCL only; is this "
                    "a build with NCCL (llmtrain features), and is a GPU visible?",
                    what, llmt_status_string((llmt_status)msg.st));
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.backend = LLMT_COMM_NCCL;
    co.cuda_device = j->to.device_index;
    if (llmt__spec_given(j->spec, "fault_tolerance.collective_timeout_s"))
        co.timeout_ms = (int64_t)(j->spec->fault_tolerance.collective_timeout_s * 1000.0);
    s = llmt_comm_create_from_unique_id(j->ctx, msg.id, sizeof msg.id, r, n, &co, dev);
    if (s != LLMT_OK)
        return FAIL(s, "train.device cuda: the NCCL %s group (rank %d of %d, GPU %d): %s", what,
                    (int)r, (int)n, (int)j->to.device_index, llmt_context_last_error(j->ctx));
    return LLMT_OK;
}
