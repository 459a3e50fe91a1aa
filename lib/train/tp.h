/* Tensor parallelism for the trainer (tp.c): the collectives at the
 * engine's split points (lib/train/device.h, LLMT__AT_*) over a host
 * memory communicator of the tensor parallel group (in-process, Gloo,
 * MPI; NCCL is refused), on any backend: a device backend's buffers are
 * staged through host memory by the engine's op table. */
#ifndef LLMT_TRAIN_TP_H
#define LLMT_TRAIN_TP_H

#include "train/device.h"

typedef struct llmt__tp llmt__tp;

/* store: the engine's storage type (activations' collectives); seq:
 * sequence parallelism (the engine then shards its rows, device.h);
 * errors of the collectives go to `e` (the trainer's). A NCCL
 * communicator is refused (LLMT_ERR_UNSUPPORTED, naming it). */
llmt_status llmt__tp_create(llmt_err *e, llmt_comm *comm, llmt_dtype store, int seq,
                            llmt__tp **out);
void llmt__tp_destroy(llmt__tp *tp);
/* The engine's description of the group (rank, size, hook, ctx, bind):
 * each engine made from it binds its own hook context (its op table and
 * device context); the host staging buffer is the group's, as the
 * trainer runs one engine at a time. */
void llmt__tp_engine(llmt__tp *tp, llmt__devtrain_tp *out);
llmt_comm *llmt__tp_comm(const llmt__tp *tp);
/* Sequence parallel? (0 for NULL) */
int llmt__tp_seq(const llmt__tp *tp);

#endif
