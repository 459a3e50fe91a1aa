/* A model's parameters as one flat array, in the model's order, for the
 * tests that compare a layout's final parameters with a reference run's
 * (test/comm/test_dp.c, test/mpi/test_mpi_dp.c, test/train/
 * test_device_dp.c, rank_fixture.h). Needs only llmtrain.h (the MPI test
 * has no check.h). Header only. */
#ifndef LLMT_TEST_MODEL_PARAMS_H
#define LLMT_TEST_MODEL_PARAMS_H

#include <stdint.h>
#include <string.h>

#include "llmtrain.h"

/* m's parameters copied one after another into out (room for all of
 * them: llmt_model_param_count's total); after llmt_trainer_sync_params,
 * the full tensors on every rank. */
static inline void test_params_flatten(llmt_model *m, float *out)
{
    int32_t np = 0;
    int64_t tot = 0, at = 0;
    llmt_model_param_count(m, &np, &tot);
    for (int32_t i = 0; i < np; i++) {
        llmt_tensor v;
        int64_t n = 0;
        llmt_model_param(m, i, NULL, &v);
        llmt_tensor_numel(&v, &n);
        memcpy(out + at, v.data, (size_t)n * sizeof(float));
        at += n;
    }
}

#endif
