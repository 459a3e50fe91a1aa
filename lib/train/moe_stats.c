/* llmt_trainer_moe_stats: the trainer's view of its engine's MoE tallies
 * (moe_net.h). */
#include "train/device.h"
#include "train/moe_net.h"
#include "train/trainer_state.h"

LLMT_API llmt_status llmt_trainer_moe_stats(llmt_trainer *tr, int32_t layer, int64_t *counts,
                                            int32_t n, int64_t *dropped, double *aux_loss,
                                            double *z_loss)
{
    if (!tr)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = llmt__trainer_err(tr);
    llmt__devtrain *g = llmt__trainer_devtrain(tr);
    llmt__moe_net *m = g ? llmt__devtrain_moe(g) : NULL;
    if (!m)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: moe_stats: the model has no mixture-of-experts layers "
                             "(llmt_model_config.moe_experts 0)");
    return llmt__moe_net_stats(m, e, layer, counts, n, dropped, aux_loss, z_loss);
}
