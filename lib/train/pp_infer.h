/* Forward-only pipeline passes (pp_infer.c) for a trainer under pipeline
 * parallelism: evaluate's loss and generate's next-token logits, each a
 * chain of stage forwards (lib/train/stage.h's engine) over the pipeline
 * group, the loss or logits taken on the last stage and broadcast, so
 * every stage returns what the single-rank trainer would. Collective over
 * the pipeline group; between steps only (they use activation set 0). */
#ifndef LLMT_TRAIN_PP_INFER_H
#define LLMT_TRAIN_PP_INFER_H

#include "train/stage.h"

/* The engine's seams (device.c). A forward of B x T rows (the engine's
 * micro-batch) without a backward: tokens on the first stage, x (the
 * previous stage's output, best received into llmt__devtrain_stage_in(g,
 * 0)) elsewhere; the last stage ends with the logits and, with targets
 * (tgt not NULL), *loss_sum of the rows' losses (targets < 0 add 0).
 * Only the first `active` of the B x T rows are real (the rest pad it):
 * the MoE layers route those alone, with their capacity, as one rank's
 * pass of them does (moe_net.h; under sequence parallelism the blocks are
 * routed whole). */
llmt_status llmt__devtrain_stage_infer(llmt__devtrain *g, const int32_t *tok,
                                       const int32_t *tgt, const void *x, int active,
                                       double *loss_sum);
/* The last stage: the logits of row `row` (of B x T) of the last forward,
 * padded_vocab_size floats, whole over a tensor parallel group
 * (collective over it). */
llmt_status llmt__devtrain_stage_row_logits(llmt__devtrain *g, int row, float *logits);

/* The sum of the losses of `rows` sequences of T tokens (B x T at a time,
 * the last block padded with ignored rows), the same on every stage. */
llmt_status llmt__pp_evaluate(llmt_err *e, llmt_comm *comm, llmt_dtype store, llmt__devtrain *g,
                              const int32_t *in, const int32_t *tg, int rows, int B, int T,
                              double *loss_sum);
/* The logits (Vp floats) of row `row` after a forward of tok[0..len) (len
 * <= T; the rest of the B x T rows 0), the same on every stage: the
 * next-token logits after the window with row len - 1. row < 0: zeros
 * (context parallelism: the row of the window's last position is on
 * another rank of the CP group; the same on every rank of a TP group). */
llmt_status llmt__pp_logits(llmt_err *e, llmt_comm *comm, llmt_dtype store, llmt__devtrain *g,
                            const int32_t *tok, int len, int row, int B, int T, int Vp,
                            float *logits);

#endif
