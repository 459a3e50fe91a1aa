/* A pipeline rank's start, as the tests that run pipeline stages as
 * threads share it (test_device_pp.c, test_device_pptp.c,
 * test_device_ppv.c, test_moe_pp.c, test_moe_tppp.c, test_pp_msgs.c,
 * test_pp_bubble.c): the model and its
 * trainer made on an engine, the pipeline's options, the steps of one
 * data parallel replica (the end is rank_fixture_close). Header only, as
 * rank_fixture.h, whose step it uses; apart from it because it needs the
 * library's internal headers (a backend's engine). */
#ifndef LLMT_TEST_STAGE_FIXTURE_H
#define LLMT_TEST_STAGE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "exec/dev.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "train/device.h"

/* cfg's model into *m and a trainer for it with o into *tr on the engine
 * of ops (llmt__trainer_create_dev; NULL: rank_fixture_open). The first
 * failure's status; what was not made stays NULL. */
static inline llmt_status stage_fixture_open(const llmt_model_config *cfg,
                                             const llmt_trainer_opts *o,
                                             const llmt__dev_ops *ops, llmt_model **m,
                                             llmt_trainer **tr)
{
    if (!ops)
        return rank_fixture_open(cfg, o, m, tr);
    *m = NULL;
    *tr = NULL;
    llmt_status s = llmt_model_create(NULL, cfg, m);
    if (s == LLMT_OK)
        s = llmt__trainer_create_dev(*m, o, ops, tr);
    return s;
}

/* The pipeline's options: schedule sched, v virtual stages (0: 1), the
 * layers of each of n virtual stages (layers NULL: the balance). */
static inline void stage_fixture_pp_opts(llmt_pp_opts *po, int sched, int v,
                                         const int32_t *layers, int n)
{
    llmt_pp_opts_init(po, sizeof *po);
    po->schedule = sched;
    po->virtual_stages = v > 1 ? v : 1;
    po->stage_layers = layers;
    po->n_stage_layers = layers ? n : 0;
}

/* Steps [k0, k1) of data parallel replica dpr of dp: step k's global batch
 * is dp x m micro-batches of micro x T tokens at in/tg from batch k on,
 * this replica's the dpr-th m of them; step k's loss to loss[k]. Stops at
 * the first failure and returns its status. */
static inline llmt_status stage_fixture_steps(llmt_trainer *tr, const int32_t *in,
                                              const int32_t *tg, int k0, int k1, int dp,
                                              int dpr, int m, int micro, int T, float *loss)
{
    size_t per = (size_t)m * micro * T;
    llmt_status s = LLMT_OK;
    for (int k = k0; k < k1 && s == LLMT_OK; k++) {
        size_t at = ((size_t)k * dp + (size_t)dpr) * per;
        llmt_batch b = {sizeof b, in + at, tg + at, m * micro, T};
        s = rank_fixture_step(tr, &b, &loss[k]);
    }
    return s;
}

#endif
