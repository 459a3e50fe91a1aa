/* The engine's pipeline stage (lib/train/device.c), which the pipeline
 * schedules of lib/train/pp.c drive: a stage of pp holds the parameters,
 * gradients, AdamW state and activations of its layers only, plus the
 * embedding on the first stage and the final norm, head and loss on the
 * last (a tied head keeps a copy of wte there whose gradient the two
 * stages sum). A step is begin, then any order of forwards and backwards
 * of its micro-batches that runs each micro-batch's forward before its
 * backward and the backwards in micro-batch order, then end.
 *
 * The engine holds the activations of one micro-batch: the schedule keeps
 * the input of every micro-batch in flight, and the backward of a
 * micro-batch the engine does not hold re-runs the stage's forward from
 * that input first (recompute at stage granularity), so a stage's memory
 * is its parameters, one activation set and one boundary tensor (B x T x
 * width) per micro-batch in flight. */
#ifndef LLMT_TRAIN_STAGE_H
#define LLMT_TRAIN_STAGE_H

#include "train/device.h"

typedef struct llmt__devtrain_stage {
    int stage, stages; /* this one of `stages` (1: the whole model) */
    int l0, l1;        /* its layers [l0, l1) */
} llmt__devtrain_stage;

/* llmt__devtrain_create_tp for one pipeline stage (st NULL: the whole
 * model). */
llmt_status llmt__devtrain_create_stage(llmt_err *e, const llmt__dev_ops *ops,
                                        const llmt__dev_opts *dopts, llmt_model *m, int B,
                                        int T, int A, int recompute,
                                        const llmt__devtrain_fp8 *fp8,
                                        const llmt__devtrain_tp *tp,
                                        const llmt__devtrain_stage *st, llmt__devtrain **out);

/* A step of `micro` micro-batches (inputs and targets on the host, all of
 * the step's; count: targets >= 0 in the whole step): uploads them, zeroes
 * the gradients. */
llmt_status llmt__devtrain_stage_begin(llmt__devtrain *g, const int32_t *inputs,
                                       const int32_t *targets, int micro, int64_t count);
/* Micro-batch a's forward: from its tokens on the first stage, else from
 * x (the previous stage's output, B*T*width storage-typed elements); the
 * last stage ends with the loss (and its gradient in place). */
llmt_status llmt__devtrain_stage_fwd(llmt__devtrain *g, int a, const void *x);
/* The output of the last forward (not on the last stage). */
void *llmt__devtrain_stage_out(llmt__devtrain *g);
/* Micro-batch a's backward from dy (the next stage's input gradient; NULL
 * on the last stage); x as for its forward (re-run when the engine does
 * not hold a's activations). Leaves the input gradient in
 * llmt__devtrain_stage_dx. */
llmt_status llmt__devtrain_stage_bwd(llmt__devtrain *g, int a, const void *x, const void *dy);
void *llmt__devtrain_stage_dx(llmt__devtrain *g);
/* After the backwards: the sum of the step's losses (0 but on the last
 * stage); with data parallelism its reductions are waited for and the sum
 * is over its group. */
llmt_status llmt__devtrain_stage_loss(llmt__devtrain *g, double *loss_sum);
/* Then (after the tied wte's gradient sum): the sum of squares of the
 * gradients this stage owns (with data parallelism: of the reduced ones,
 * over its group). */
llmt_status llmt__devtrain_stage_sumsq(llmt__devtrain *g, double *sumsq);
/* The gradient of the tied wte on the first and last stage (NULL
 * elsewhere, and without a tied head), fp32, *n floats. */
float *llmt__devtrain_stage_tied_grad(llmt__devtrain *g, size_t *n);
/* Elements of a boundary tensor (storage type) and device buffers for
 * them, counted as activations. */
size_t llmt__devtrain_stage_elems(const llmt__devtrain *g);
llmt_status llmt__devtrain_stage_buf(llmt__devtrain *g, void **p, size_t bytes);
void llmt__devtrain_stage_buf_free(llmt__devtrain *g, void *p);
/* fp32 parameters on the device (this stage's). */
size_t llmt__devtrain_param_floats(const llmt__devtrain *g);

#endif
