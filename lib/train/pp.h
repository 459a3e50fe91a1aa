/* Pipeline parallelism for the trainer (pp.c): which layers each stage
 * holds, and the schedules that run a step's micro-batches through the
 * stages (lib/train/stage.h) with activations and their gradients passed
 * by point-to-point send/recv over the pipeline group. */
#ifndef LLMT_TRAIN_PP_H
#define LLMT_TRAIN_PP_H

#include "plan/pp_sched.h"
#include "train/stage.h"

typedef struct llmt__pp llmt__pp;

/* The first layer of every stage (first[0..stages], first[stages] =
 * layers): counts[i] layers on stage i when counts is not NULL (n
 * entries), else the automatic balance. Errors name the key. */
llmt_status llmt__pp_layout(llmt_err *e, const llmt_model_config *c, int T, int stages,
                            const int32_t *counts, int n, int *first);

/* Micro-batch chunks in flight on `stage` under the schedule (the
 * engine's activation sets; pp_sched.h): m under GPipe, min(m, stages -
 * stage) under 1F1B, Megatron-LM's count interleaved with v chunks; -1
 * without memory. */
int llmt__pp_inflight(int schedule, int v, int micro, int stages, int stage);

/* The schedule over `comm` (this rank's stage = its rank) for the engine
 * g of that stage (it must outlive the llmt__pp), `micro` micro-batches a
 * step, v chunks a stage (interleaved; first: the first layer of each of
 * the stages * v virtual stages, chunk c of stage s being virtual stage
 * c * stages + s). Collective over comm (a tied head's embedding group is
 * split off it, and under interleaving a second group for the
 * gradients). */
llmt_status llmt__pp_create(llmt_err *e, llmt_comm *comm, int schedule, int v, int micro,
                            llmt_dtype store, const int *first, llmt__devtrain *g,
                            llmt__pp **out);
/* Frees the boundary buffers (before the engine goes). */
void llmt__pp_destroy(llmt__pp *pp);

/* A step: zero the gradients, run the schedule, sum a tied wte's gradient
 * over its two stages; every stage gets the step's loss sum (the last
 * stage's) and the gradients' global sum of squares. */
llmt_status llmt__pp_fwd_bwd(llmt__pp *pp, const int32_t *inputs, const int32_t *targets,
                             int64_t count, double *loss_sum, double *sumsq);

/* After the optimizer's update (status s): every stage's s agreed over
 * the pipeline group (one all-gather of an int64 a stage), so that a
 * stage whose update failed does not leave the others a step ahead of it
 * (their next step waiting for it until the communicator's timeout): it
 * returns its own error, the others one naming it, and later steps are
 * refused. Not over the data parallel group: a replica's failure there
 * reaches only its own pipeline. */
llmt_status llmt__pp_step_done(llmt__pp *pp, llmt_status s);

/* The last step's measurements and this stage's place. */
typedef struct llmt__pp_info {
    int stage, stages, l0, l1, micro, schedule, slots; /* l1 - l0: its layers */
    int v;                                             /* chunks a stage */
    double step_s, idle_s; /* the schedule's wall time; of it, waiting in recv */
    /* the bubble in compute time (pp.c's clock): this stage's ops' thread
     * CPU time, the step's span on the stages' clocks (0: not measured) */
    double busy_cpu_s, span_cpu_s;
    int64_t sent_bytes, recv_bytes;
    int grad_copies; /* input gradient copies pooled for sends in flight
                        (pp_send.h; 0 where sends are not left in flight) */
} llmt__pp_info;
void llmt__pp_info_get(const llmt__pp *pp, llmt__pp_info *out);
/* The same of a trainer's pipeline (lib/train/trainer.c): 0 without one. */
int llmt__trainer_pp_info(const llmt_trainer *tr, llmt__pp_info *out);

#endif
