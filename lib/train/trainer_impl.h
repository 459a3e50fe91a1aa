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
    /* the layout recorded while the engine is not made yet (dev NULL;
     * trainer_build.c): tp and cp above are recorded as themselves (they
     * need no engine), pipeline parallelism as pp_comm (pp NULL) with its
     * options (stage_layers copied), expert and data parallelism as their
     * groups; the first call that needs the engine makes it once from all
     * of them (llmt__trainer_ready) */
    llmt_pp_opts pp_o;
    int *pp_layers;
    llmt_comm *ep_rec, *dp_rec;
    llmt_dp_opts dp_o;
};

/* Attach calls on a trainer whose engine is not made yet: the group
 * checked and recorded (trainer_build.c). */
llmt_status llmt__trainer_record_tp(llmt_trainer *tr, llmt_comm *comm, int seq);
/* A data parallel or pipeline group of size > 1 for a MoE model on a
 * device-memory engine: refused naming key (moe_attach.c). */
llmt_status llmt__moe_device_group_check(llmt_trainer *tr, llmt_comm *comm, const char *what,
                                         const char *key);
llmt_status llmt__trainer_record_pp(llmt_trainer *tr, llmt_comm *comm, const llmt_pp_opts *o);
/* This rank's pipeline stage over comm (its layers, activation sets and
 * chunks; the layout checked, errors naming the keys): *first (the first
 * layer of every virtual stage; st's chunk arrays live in the same block)
 * to free. */
llmt_status llmt__trainer_pp_stage(llmt_trainer *tr, llmt_comm *comm, const llmt_pp_opts *o,
                                   int **first, llmt__devtrain_stage *st);

#endif
