/* A pipeline stage's sends left in flight (pp_send.c), over processes
 * (MPI, Gloo): every schedule's sends then overlap the next op, and the
 * interleaved schedule needs them. Its messages go round the ring of
 * stages (the last stage's chunk c feeds the first stage's chunk c + 1),
 * so while stage s sends to s + 1, the stage before may be sending to
 * s: when each send waits for its receiver (MPI's rendezvous, Gloo) the
 * ring waits forever. Posted sends (lib/comm/p2p.h) break it: a stage
 * then waits only in its receives, for data that pp_sched.c's simulation
 * shows arrives (every op's input is produced by an earlier op of a
 * list).
 *
 * An activation is sent from its activation set's memory, which stays
 * untouched until that micro-batch chunk's backward: by then the next
 * stage has received it (the gradient coming back proves it), so waiting
 * for the send there costs nothing. An input gradient lives in the
 * engine's one gradient buffer, which the next backward rewrites: it is
 * copied into a buffer of a pool first, reused once its send is done. */
#ifndef LLMT_TRAIN_PP_SEND_H
#define LLMT_TRAIN_PP_SEND_H

#include "train/stage.h"

typedef struct llmt__pp_sends llmt__pp_sends;

/* For stage `stage`'s engine g: its boundary tensors (count x dtype, and
 * tail more elements after them for the stamp: pp.c; 0 sends none) and
 * its `sets` activation sets; errors go on e. */
llmt_status llmt__pp_sends_create(llmt_err *e, int stage, llmt__devtrain *g, int sets,
                                  size_t count, size_t tail, llmt_dtype dtype,
                                  llmt__pp_sends **out);
/* Frees the pool; sends that never finished keep their buffers (leaked:
 * their communicator may still read them). */
void llmt__pp_sends_destroy(llmt__pp_sends *s);

/* Post set `set`'s output buf (micro-batch a) to peer on c, its stamp
 * (the sender's clock: pp.c) written into buf's tail and sent with it. */
llmt_status llmt__pp_sends_act(llmt__pp_sends *s, llmt_comm *c, void *buf, int peer, int set,
                               int a, double stamp);
/* Before set `set` is rewritten (its backward): its send done. */
llmt_status llmt__pp_sends_set_done(llmt__pp_sends *s, int set);
/* Copy the input gradient dx (micro-batch a) and post the copy with its
 * stamp. */
llmt_status llmt__pp_sends_grad(llmt__pp_sends *s, llmt_comm *c, const void *dx, int peer,
                                int a, double stamp);
/* The step's end: every send done. */
llmt_status llmt__pp_sends_drain(llmt__pp_sends *s);
/* The gradient copies the pool holds: the most input gradients of a step
 * in flight at once so far (the planner's bound:
 * llmt__plan_pp_grad_copies). */
int llmt__pp_sends_copies(const llmt__pp_sends *s);
/* Seconds spent waiting for sends since the last call (idle time). */
double llmt__pp_sends_wait_s(llmt__pp_sends *s);

/* The stamp in a boundary buffer's tail (LLMT__STAGE_TAIL bytes after its
 * `bytes` of tensor; g's device memory). */
llmt_status llmt__pp_stamp_put(llmt__devtrain *g, void *buf, size_t bytes, double stamp);
llmt_status llmt__pp_stamp_get(llmt__devtrain *g, const void *buf, size_t bytes, double *stamp);

#endif
