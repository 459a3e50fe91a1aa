/* The MoE layers' token group (moe_group.h). */
#include "train/moe_group.h"

void llmt__moe_group_add(llmt__moe_group *g, llmt_comm *comm)
{
    int32_t n = 1;
    if (!comm || llmt_comm_size(comm, &n) != LLMT_OK || n <= 1)
        return;
    if (g->n >= LLMT__MOE_GROUPS) {
        g->extra++;
        return;
    }
    if (g->n == 0)
        g->size = 1;
    g->c[g->n++] = comm;
    g->size *= (int)n;
}

static llmt_status sum(llmt__moe_group *g, void *buf, size_t n, llmt_dtype dt)
{
    for (int i = 0; i < g->n; i++) {
        llmt_status s = llmt_comm_all_reduce(g->c[i], buf, buf, n, dt, LLMT_REDUCE_SUM, NULL);
        if (s != LLMT_OK)
            return llmt__err_set(g->e, s,
                                 "trainer: moe: summing the router statistics over the ranks "
                                 "that share a micro-batch's tokens (sequence or context "
                                 "parallel group %d of %d): %s",
                                 i + 1, g->n, llmt_comm_last_error(g->c[i]));
    }
    return LLMT_OK;
}

llmt_status llmt__moe_group_sum(void *g, float *buf, size_t n)
{
    return sum(g, buf, n, LLMT_DTYPE_FP32);
}

llmt_status llmt__moe_group_sum_i64(llmt__moe_group *g, int64_t *buf, size_t n)
{
    return sum(g, buf, n, LLMT_DTYPE_INT64);
}

llmt_status llmt__moe_group_check(const llmt__moe_group *g, llmt_err *e, int64_t choices)
{
    if (g->extra)
        return llmt__err_set(e, LLMT_ERR_INTERNAL,
                             "trainer: moe: the tokens of a micro-batch are split over more "
                             "than %d groups",
                             LLMT__MOE_GROUPS);
    if (g->n && choices * g->size >= (int64_t)1 << 24)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: moe: %lld routing choices a call on each of the %d "
                             "ranks sharing a micro-batch's tokens: the router statistics "
                             "are summed in fp32, exact below 2^24 choices (use a smaller "
                             "train.micro_batch or model.moe.top_k)",
                             (long long)choices, g->size);
    return LLMT_OK;
}
