/* The engine's pipeline stage (lib/train/device.c), which the pipeline
 * schedules of lib/train/pp.c drive: a stage of pp holds the parameters,
 * gradients, AdamW state and activations of its layers only, plus the
 * embedding on the first stage and the final norm, head and loss on the
 * last (a tied head keeps a copy of wte there whose gradient the two
 * stages sum). A step is begin, then any order of forwards and backwards
 * of its micro-batches that runs each micro-batch's forward before its
 * backward and the backwards in micro-batch order, then end.
 *
 * The engine holds `slots` activation sets, one per micro-batch in flight
 * (micro-batch a in set a % slots, from its forward to its backward): the
 * schedule must never have more in flight. A stage's memory is its
 * parameters and that many activation sets of its layers (with
 * recompute, of what recompute keeps). */
#ifndef LLMT_TRAIN_STAGE_H
#define LLMT_TRAIN_STAGE_H

#include "plan/pp_sched.h"
#include "train/device.h"

typedef struct llmt__devtrain_stage {
    int stage, stages; /* this one of `stages` (1: the whole model) */
    int l0, l1;        /* its layers [l0, l1) */
    int slots;         /* activation sets: micro-batches in flight (>= 1) */
    /* interleaving: nchunks > 1 model chunks, chunk c holding layers
     * [chunk_l0[c], chunk_l1[c]) (l0, l1: the first's start and the
     * last's end); a set then holds one micro-batch chunk */
    int nchunks;
    const int *chunk_l0, *chunk_l1;
} llmt__devtrain_stage;

/* llmt__devtrain_create_tp for one pipeline stage (st NULL: the whole
 * model). */
llmt_status llmt__devtrain_create_stage(llmt_err *e, const llmt__dev_ops *ops,
                                        const llmt__dev_opts *dopts, llmt_model *m, int B,
                                        int T, int A, int recompute,
                                        const llmt__devtrain_fp8 *fp8,
                                        const llmt__devtrain_tp *tp,
                                        const llmt__devtrain_stage *st, llmt__devtrain **out);
/* The same with expert parallelism over ep (NULL or one rank: none): the
 * engine made from the start for this EP rank's experts (as
 * llmt__devtrain_set_ep lays it out), so the whole model's buffers are
 * never held: the trainer's one build of its engine (trainer_build.c). */
llmt_status llmt__devtrain_create_layout(
    llmt_err *e, const llmt__dev_ops *ops, const llmt__dev_opts *dopts, llmt_model *m, int B,
    int T, int A, int recompute, const llmt__devtrain_fp8 *fp8, const llmt__devtrain_tp *tp,
    const llmt__devtrain_stage *st, llmt_comm *ep, llmt__devtrain **out);

/* A step of `micro` micro-batches (inputs and targets on the host, all of
 * the step's; count: targets >= 0 in the whole step): uploads them, zeroes
 * the gradients. */
llmt_status llmt__devtrain_stage_begin(llmt__devtrain *g, const int32_t *inputs,
                                       const int32_t *targets, int micro, int64_t count);
/* The chunk (interleaving) and the activation set the next forward or
 * backward uses: the embedding only in chunk 0 of the first stage, the
 * head only in the last chunk of the last; chunk -1 returns to the whole
 * stage (and to micro-batch a's set a % slots) before the step's end. */
llmt_status llmt__devtrain_stage_chunk(llmt__devtrain *g, int chunk, int set);
/* The stage's model chunks (1 without interleaving). */
int llmt__devtrain_stage_nchunks(const llmt__devtrain *g);
/* Micro-batch a's forward: from its tokens on the first stage, else from
 * x (the previous stage's output, B*T*width storage-typed elements; best
 * received straight into llmt__devtrain_stage_in(g, a)); the last stage
 * ends with the loss (and its gradient in place). */
llmt_status llmt__devtrain_stage_fwd(llmt__devtrain *g, int a, const void *x);
/* Where micro-batch a's input lives (its activation set's; NULL on the
 * first stage). */
void *llmt__devtrain_stage_in(llmt__devtrain *g, int a);
/* The output of the last forward (not on the last stage). */
void *llmt__devtrain_stage_out(llmt__devtrain *g);
/* Micro-batch a's backward from dy (the next stage's input gradient; NULL
 * on the last stage), after its forward. Leaves the input gradient in
 * llmt__devtrain_stage_dx. */
llmt_status llmt__devtrain_stage_bwd(llmt__devtrain *g, int a, const void *dy);
void *llmt__devtrain_stage_dx(llmt__devtrain *g);
/* After the backwards: the sum of the step's losses (0 but on the last
 * stage); with data parallelism its reductions are waited for and the sum
 * is over its group. */
llmt_status llmt__devtrain_stage_loss(llmt__devtrain *g, double *loss_sum);
/* After the step (every stage, each collective over pp): the MoE layers'
 * tallies summed over the data parallel group and then over the pipeline
 * group pp, so every stage reports every layer's (moe_net.h); fp8: the
 * step's amaxes maximised over pp (each stage has its layers'), then over
 * the other groups, into every stage's whole recipe state. */
llmt_status llmt__devtrain_stage_end(llmt__devtrain *g, llmt_comm *pp);
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
/* dst = src (device buffers, bytes each; they do not overlap). */
llmt_status llmt__devtrain_stage_copy(llmt__devtrain *g, void *dst, const void *src,
                                      size_t bytes);
/* Bytes a pipeline stage's boundary tensors (stage_in's, stage_out's,
 * stage_dx's) have after their elements: LLMT__STAGE_TAIL (plan/pp_sched.h). */
/* Host bytes into a device buffer, and back. */
llmt_status llmt__devtrain_stage_put(llmt__devtrain *g, void *dst, const void *src,
                                     size_t bytes);
llmt_status llmt__devtrain_stage_get(llmt__devtrain *g, void *dst, const void *src,
                                     size_t bytes);
/* 1: the engine's memory is the host's (its op table's host_memory). */
int llmt__devtrain_stage_host(const llmt__devtrain *g);
/* *p: a host buffer of at least `bytes` (capacity *cap), grown on demand
 * (plain malloc: it may outlive the engine's context); no memory is said
 * on the engine's error. */
llmt_status llmt__devtrain_stage_hostbuf(llmt__devtrain *g, void **p, size_t *cap,
                                         size_t bytes);
/* fp32 parameters on the device (this stage's). */
size_t llmt__devtrain_param_floats(const llmt__devtrain *g);

#endif
