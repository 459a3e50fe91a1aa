/* llmt_trainer_set_ep_comm: the trainer's side of expert parallelism
 * (the layer's exchange is moe_ep.c, the engine's MoE layers moe_net.c). */
#include "train/device.h"
#include "train/moe_net.h"
#include "train/trainer_state.h"

LLMT_API llmt_status llmt_trainer_set_ep_comm(llmt_trainer *tr, llmt_comm *comm)
{
    if (!tr)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = llmt__trainer_err(tr);
    llmt__devtrain *g = llmt__trainer_devtrain(tr);
    llmt__moe_net *m = g ? llmt__devtrain_moe(g) : NULL;
    int32_t n = 1;
    if (comm && llmt_comm_size(comm, &n) != LLMT_OK)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT, "trainer: set_ep_comm: %s",
                             llmt_comm_last_error(comm));
    if (!m && n > 1)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: set_ep_comm: parallelism.ep %d needs mixture-of-experts "
                             "layers (llmt_model_config.moe_experts 0)",
                             (int)n);
    if (!m)
        return LLMT_OK;
    llmt_status s = llmt__moe_net_set_ep(m, e, comm);
    /* data parallelism attached first: made again, its experts now units
     * of their own group (dp.c) */
    return s == LLMT_OK ? llmt__trainer_dp_renew(tr) : s;
}

llmt_comm *llmt__trainer_ep_comm(llmt_trainer *tr)
{
    llmt__devtrain *g = llmt__trainer_devtrain(tr);
    llmt__moe_net *m = g ? llmt__devtrain_moe(g) : NULL;
    return m ? llmt__moe_net_ep_comm(m) : NULL;
}
