/* Pipeline schedules as data (pp_sched.c): the ordered list of forwards
 * and backwards each stage runs, with the activation set each micro-batch
 * occupies, built without a model so that a schedule can be checked (and
 * simulated) on its own. lib/train/pp.c runs the lists; the planner
 * (pp_pool.c) reads them, which is why they live here: the plan does not
 * depend on the trainer. */
#ifndef LLMT_PLAN_PP_SCHED_H
#define LLMT_PLAN_PP_SCHED_H

#include "core/internal.h"

/* llmt_pp_opts.schedule (include/llmtrain.h: the same values) */
enum { LLMT__PP_1F1B = 0, LLMT__PP_GPIPE = 1, LLMT__PP_INTERLEAVED = 2 };

/* Bytes a pipeline stage's boundary tensors (lib/train/stage.h: stage_in's,
 * stage_out's, stage_dx's) have after their elements: the schedule's clock
 * stamp (lib/train/pp.c) rides there, in the tensor's own message rather
 * than a second one, and the planner counts it (pp_pool.c). A multiple of
 * every storage type's size. */
#define LLMT__STAGE_TAIL 8

/* One op of a stage: the forward or backward of micro-batch `micro`
 * through the stage's model chunk `chunk` (virtual stage chunk * p +
 * stage), its activations held in set `slot` from the forward to the
 * backward. */
typedef struct llmt__pp_op {
    int bwd, chunk, micro, slot;
} llmt__pp_op;

/* What a schedule needs of p stages, v chunks per stage and m
 * micro-batches; the error names the key (llmt_pp_opts.virtual_stages,
 * train.grad_accum). sched: LLMT__PP_* above. */
llmt_status llmt__pp_sched_check(llmt_err *e, int sched, int p, int v, int m);

/* Stage `stage`'s 2 * m * v ops, in order, into ops: GPipe (all forwards,
 * then all backwards), 1F1B (p - stage - 1 warm-up forwards, then one
 * forward one backward, then the remaining backwards) or interleaved
 * (Megatron-LM's virtual pipeline). Slots: the lowest free set at each
 * forward. Returns the sets the stage needs (its peak of micro-batch
 * chunks in flight), -1 without memory. */
int llmt__pp_sched_ops(int sched, int p, int v, int m, int stage, llmt__pp_op *ops);

/* Run every stage's list on an ideal machine: a forward of a chunk takes
 * tf, a backward tb, messages are free; each op starts when its stage is
 * free and its input is there. stage_time[s] (p entries, may be NULL): the
 * end of stage s's last op; idle[s]: of it, the time stage s waited.
 * Checks what pp.c's transport assumes: per (kind, sender, receiver) the
 * messages are received in the order they are sent (activations and
 * gradients travel on two communicators). Returns 0, or -1 when the lists
 * deadlock or break that order (or without memory). */
int llmt__pp_sched_sim(int sched, int p, int v, int m, double tf, double tb, double *stage_time,
                       double *idle);

#endif
