/* Sends that do not wait for their receiver (lib/comm/comm.c), for the
 * library's own schedules: the interleaved pipeline (lib/train/pp.c)
 * wraps its messages round the stages, so a stage may send to the next
 * while the stage before sends to it; when each send waits for its
 * receiver (MPI's rendezvous, Gloo) such a ring waits forever. A send left
 * in flight breaks the ring. Internal: not in the ABI yet (NCCL has no
 * such send here). */
#ifndef LLMT_COMM_P2P_H
#define LLMT_COMM_P2P_H

#include "core/internal.h"

typedef struct llmt__isend llmt__isend;

/* How sends on c finish: LLMT__ISEND_COPY: a send copies its buffer and
 * returns at once (in-process mailboxes): llmt__comm_isend never leaves
 * one in flight; LLMT__ISEND_POSTED: posted, the buffer in use until it is
 * done (MPI, Gloo); LLMT__ISEND_NONE: every send waits for its receiver
 * (NCCL). */
enum { LLMT__ISEND_NONE = 0, LLMT__ISEND_COPY = 1, LLMT__ISEND_POSTED = 2 };
int llmt__comm_isend_kind(const llmt_comm *c);

/* Post a send of count x dtype from buf to peer (matched in order with
 * the blocking sends of the pair, as llmt_comm_send). *out: NULL when it
 * is done already, else the send in flight: buf must stay untouched until
 * llmt__comm_isend_test says done or llmt__comm_isend_wait returns, then
 * llmt__comm_isend_free. Errors go on c (LLMT_ERR_UNSUPPORTED under
 * LLMT__ISEND_NONE). */
llmt_status llmt__comm_isend(llmt_comm *c, const void *buf, size_t count, llmt_dtype dtype,
                             int32_t peer, llmt__isend **out);
/* *done = 1 once finished (never blocks; a backend that cannot ask says
 * 0 until waited for). Returns the send's status when done. */
llmt_status llmt__comm_isend_test(llmt__isend *w, int *done);
/* Until finished, bounded by the communicator's timeout (which aborts it
 * and dumps the flight recorder, as a blocking send's would). */
llmt_status llmt__comm_isend_wait(llmt__isend *w);
/* After test said done or wait returned (NULL: a no-op). A send that
 * never finished (its communicator timed out or aborted) leaves its
 * request to the communicator: its buffer must then never be freed. */
void llmt__comm_isend_free(llmt__isend *w);

#endif
