/* llmt_trainer_set_ep_comm: the trainer's side of expert parallelism
 * (the layer's exchange is moe_ep.c, the engine's MoE layers moe_net.c,
 * its layout of this rank's experts device.c). */
#include "train/device.h"
#include "train/moe_net.h"
#include "train/trainer_impl.h"
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
    /* data parallelism attached first: its units are of the old layout,
     * so it is detached (every rank's moment shares back in the engine's
     * full moments) and made again after, its experts then units of their
     * own group (dp.c) */
    llmt_comm *dpc = tr->dp ? llmt__dp_comm(tr->dp) : NULL;
    llmt_dp_opts o;
    if (tr->dp)
        o = *llmt__dp_opts(tr->dp);
    llmt_status s = dpc ? llmt_trainer_set_comm(tr, NULL, NULL) : LLMT_OK;
    /* the engine made again for this rank's experts from the host copies */
    if (s == LLMT_OK)
        s = llmt__trainer_host_sync(tr);
    if (s == LLMT_OK)
        s = llmt__devtrain_set_ep(g, comm);
    tr->grads = llmt__devtrain_host_grads(g);
    tr->m = llmt__devtrain_host_m(g);
    tr->v = llmt__devtrain_host_v(g);
    tr->stale_params = tr->stale_moments = 0;
    tr->stale_grads = 1;
    if (s == LLMT_OK && dpc)
        s = llmt_trainer_set_comm(tr, dpc, &o);
    return s;
}

llmt_comm *llmt__trainer_ep_comm(llmt_trainer *tr)
{
    llmt__devtrain *g = llmt__trainer_devtrain(tr);
    llmt__moe_net *m = g ? llmt__devtrain_moe(g) : NULL;
    return m ? llmt__moe_net_ep_comm(m) : NULL;
}
