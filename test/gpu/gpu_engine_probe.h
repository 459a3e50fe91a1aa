/* What the GPU engine tests (test_gpu_tp.c, test_gpu_cp.c, test_gpu_moe.c)
 * ask before their runs: can the CUDA op table make an engine here at
 * all (a GPU, a driver)? Header only, after rank_fixture.h. */
#ifndef LLMT_TEST_GPU_ENGINE_PROBE_H
#define LLMT_TEST_GPU_ENGINE_PROBE_H

#include <stdio.h>

#include "exec/dev.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "train/device.h"

/* A one-rank CUDA trainer of config c made and destroyed: 1, or 0 with
 * "SKIP: why" printed (the caller exits CHECK_SKIP). */
static inline int gpu_engine_probe(const llmt__dev_ops *cu, const llmt_model_config *c,
                                   int micro, int accum, int seq, float lr)
{
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_trainer_opts o;
    rank_fixture_opts(&o, micro, accum, seq, lr);
    o.device = LLMT_DEVICE_CUDA;
    CHECK_STATUS(llmt_model_create(NULL, c, &m), LLMT_OK);
    if (!m)
        return 0;
    llmt_status s = llmt__trainer_create_dev(m, &o, cu, &tr);
    if (s != LLMT_OK)
        printf("SKIP: %s\n", llmt_model_last_error(m));
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return s == LLMT_OK;
}

/* A one-rank NCCL communicator into *c (1), or 0 with why printed (a
 * build without NCCL; no GPU, which with strict is a failure): the tests
 * that check a NCCL group's refusal. */
static inline int gpu_nccl_one_rank(llmt_comm **c, int strict)
{
    *c = NULL;
    if (!(llmt_build_features() & LLMT_FEATURE_NCCL)) {
        printf("no NCCL in this build: its refusal is not checked\n");
        return 0;
    }
    unsigned char id[LLMT_COMM_UNIQUE_ID_BYTES];
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.backend = LLMT_COMM_NCCL;
    llmt_status s = llmt_comm_unique_id(id, sizeof id);
    if (s == LLMT_OK)
        s = llmt_comm_create_from_unique_id(NULL, id, sizeof id, 0, 1, &co, c);
    if (strict)
        CHECK_STATUS(s, LLMT_OK);
    if (s != LLMT_OK || !*c) {
        printf("no NCCL communicator here (%s): its refusal is not checked\n",
               llmt_status_string(s));
        llmt_comm_destroy(*c);
        *c = NULL;
        return 0;
    }
    return 1;
}

#endif
