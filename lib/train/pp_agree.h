/* A failed step agreed over a group (pp_agree.c): a rank whose step failed
 * after its last message to a peer, or one that learnt of a failure, says
 * so where every rank of the group meets anyway at the step's end, so its
 * peers return naming it instead of waiting for it in a later collective
 * (the data parallel reductions, the next step's receives) until the
 * communicator's timeout. */
#ifndef LLMT_TRAIN_PP_AGREE_H
#define LLMT_TRAIN_PP_AGREE_H

#include <stddef.h>
#include <stdint.h>

#include "llmtrain.h"

/* The bytes of a rank's error text that travel (its start). */
#define LLMT__PP_TEXT 256

/* Whether c carries host memory (the agreement's buffers are host
 * memory; a NCCL group would need device ones and is left out). */
int llmt__pp_agree_host(llmt_comm *c);

/* Every rank's code over c (0: its step went well) into codes[size]: one
 * all-gather of an int64 a rank, the healthy path's whole cost. */
llmt_status llmt__pp_agree_codes(llmt_comm *c, int64_t code, int64_t *codes);

/* After codes that hold a failure: every rank's text (its error's start,
 * LLMT__PP_TEXT bytes) into texts[size * LLMT__PP_TEXT]. */
llmt_status llmt__pp_agree_texts(llmt_comm *c, const char *mine, char *texts);

#endif
