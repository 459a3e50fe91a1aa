/* A pipeline stage's boundary messages over its group (pp.c, pp_send.c,
 * pp_infer.c), staged through host memory where they must be.
 *
 * The engine's boundary tensors live in its memory: the device's on a
 * backend whose op table says host_memory 0 (CUDA). A NCCL group takes
 * them as they are; an in-process, Gloo or MPI group reads and writes
 * host memory, so there each message goes through a host copy, as tp.c
 * and cp.c stage theirs: a send copies the tensor (its stamp tail with
 * it) out by the table's d2h and sends the copy; a receive takes the
 * message into a host copy and puts it into the tensor by h2d. The
 * table's copies are queued on the engine's one stream and synchronise
 * it (lib/exec/dev.h), so a copy out reads what the kernels before wrote
 * and a copy in is there for the kernels after. Correct, not fast: each
 * message makes a round trip through the host.
 *
 * A posted send (lib/comm/p2p.h) reads its buffer until it is done: its
 * host copy is the caller's own (an llmt__pp_hbuf per message slot),
 * kept untouched until then; blocking sends and receives may share one. */
#ifndef LLMT_TRAIN_PP_XFER_H
#define LLMT_TRAIN_PP_XFER_H

#include "comm/p2p.h"
#include "train/stage.h"

/* A host copy of a message, grown on demand; {NULL, 0} is empty. */
typedef struct llmt__pp_hbuf {
    void *p;
    size_t cap;
} llmt__pp_hbuf;

void llmt__pp_hbuf_free(llmt__pp_hbuf *h);

/* 1 when messages of g's boundary tensors over c go through host copies
 * (g's memory is not the host's and c is not NCCL). */
int llmt__pp_staged(const llmt__devtrain *g, const llmt_comm *c);

/* The message buf (count elements of dt: the tensor and its stamp tail)
 * to or from peer on c, through h when staged. LLMT_ERR_COMM: the
 * communicator failed, nothing said (the caller names the message; c's
 * last error says why); any other failure (no host memory, a copy of the
 * table) has its message on g's error already. */
llmt_status llmt__pp_xsend(llmt__devtrain *g, llmt_comm *c, const void *buf, size_t count,
                           llmt_dtype dt, int peer, llmt__pp_hbuf *h);
llmt_status llmt__pp_xrecv(llmt__devtrain *g, llmt_comm *c, void *buf, size_t count,
                           llmt_dtype dt, int peer, llmt__pp_hbuf *h);
/* The sum over c of n fp32 at buf, in place (the tied embedding's
 * gradient); failures as above. */
llmt_status llmt__pp_xsum(llmt__devtrain *g, llmt_comm *c, float *buf, size_t n,
                          llmt__pp_hbuf *h);
/* Posted: *w as llmt__comm_isend's; h stays in use until it is done. */
llmt_status llmt__pp_xisend(llmt__devtrain *g, llmt_comm *c, const void *buf, size_t count,
                            llmt_dtype dt, int peer, llmt__pp_hbuf *h, llmt__isend **w);

#endif
