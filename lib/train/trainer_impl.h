/* The trainer's state, shared by its files: trainer.c (creation, steps,
 * evaluation, sampling, state access, data parallelism) and
 * trainer_parallel.c (attaching tensor, sequence, pipeline and context
 * parallelism). Private to lib/train. */
#ifndef LLMT_TRAIN_TRAINER_IMPL_H
#define LLMT_TRAIN_TRAINER_IMPL_H

#include "train/cp.h"
#include "train/device.h"
#include "train/dp.h"
#include "train/pp.h"
#include "train/tp.h"

struct llmt_trainer {
    llmt_err err;
    llmt_model *model;
    llmt_context *ctx;
    llmt_trainer_opts o;
    float *grads, *m, *v;
    int B, T; /* micro_batch, seq_len: the sizes buffers are made for */
    int32_t *gen_ctx;
    int64_t step;
    llmt__dp *dp;       /* data parallelism (lib/train/dp.c), or NULL */
    llmt__tp *tp;       /* tensor parallelism (lib/train/tp.c), or NULL */
    llmt__pp *pp;       /* pipeline parallelism (lib/train/pp.c), or NULL */
    llmt_comm *pp_comm; /* its group (the caller's), for pp_infer.c's passes */
    /* context parallelism (lib/train/cp.c), or NULL: the engine is made
     * for T / cp rows of each sequence; cp_in, cp_tg hold this rank's
     * rows of a step's batch */
    llmt__cp *cp;
    int32_t *cp_in, *cp_tg;
    const llmt__dev_ops *ops; /* the engine's backend */
    /* the engine (lib/train/device.c): grads, m and v are its host
     * mirrors, brought up to date from the device on demand (they ARE its
     * buffers on the fp32 CPU backend) */
    llmt__devtrain *dev;
    int stale_params, stale_moments, stale_grads; /* host behind device */
    double dev_sumsq;                             /* of the last forward_backward's gradients */
};

#endif
