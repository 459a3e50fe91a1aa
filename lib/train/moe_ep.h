/* Expert parallelism of one MoE layer (moe_ep.c): the layer's E experts
 * split over an EP group of `size` ranks, rank j running experts
 * [j*E/size, (j+1)*E/size) on the tokens every rank of the group routes
 * to them.
 *
 * Each rank routes its own tokens exactly as one rank does (router, top-k
 * and the capacity are computed on its N tokens: dropping and dropless
 * are those of ep 1), then the packed rows go to the ranks that hold
 * their experts by one all-to-all, the experts run there, and a second
 * all-to-all brings the outputs back to be combined in the tokens'
 * order; the backward does the same with the output gradients (owner
 * side: the expert weight gradients) and the input gradients.
 *
 * The exchange has a fixed shape, as GShard's: every (rank, expert) pair
 * sends a block of `block` rows (the capacity of the largest call,
 * capacity(Nmax); dropless: Nmax), its kept rows first, zeros after, so
 * the bytes of a step are a function of the layout alone (E x block x
 * width floats per all-to-all, four per layer and micro-batch), which the
 * planner predicts (llmt_plan_estimate.comm_bytes_ep). One all-gather
 * of every rank's kept counts per layer and micro-batch (E int64 each)
 * tells the owner how many rows of each block are real: it computes on
 * those only, so the padding costs bytes, never FLOPs. */
#ifndef LLMT_TRAIN_MOE_EP_H
#define LLMT_TRAIN_MOE_EP_H

#include "core/internal.h"
#include "train/moe.h"

typedef struct llmt__moe_ep llmt__moe_ep;

/* For calls of up to Nmax tokens on rank `rank` of `size` (size divides
 * sh->E). NULL when out of memory. */
llmt__moe_ep *llmt__moe_ep_new(const llmt__moe_shape *sh, int Nmax, int rank, int size);
void llmt__moe_ep_free(llmt__moe_ep *p);
/* rows 0: the exchange's tables only (cnt, off, rows), for a layer run
 * through the op table (moe_dev_ep.c, which keeps the rows itself). */
llmt__moe_ep *llmt__moe_ep_new_rows(const llmt__moe_shape *sh, int Nmax, int rank, int size,
                                    int rows);
/* The most rows an owner can receive in calls of up to Nmax tokens on a
 * group of `size`: a block from each source for each of its E/size
 * experts (E x block in all), and no more than the Nmax x top_k rows
 * each source routes (size x Nmax x top_k), whichever is less. What the
 * owner's packed rows and backward scratch hold; the exchange's buffers
 * keep E x block (the all-to-all's fixed shape). llmt__moe_ep_counts
 * refuses a call past it (on every rank of the group alike). */
size_t llmt__moe_ep_owner_room(const llmt__moe_shape *sh, int Nmax, int size);
/* The bytes p allocated for its rows (0 and 0 for a tables-only p):
 * saved, kept from a forward for its backward (the owner's xo, h1, h3,
 * act: owner room x (C + 3F) floats); scratch, the rest (the exchange's
 * send and receive buffers, 2 x E x block x C floats, and the owner's
 * yo, dyo, dxo, dact, dh1, dh3: owner room x (3C + 3F) floats). */
void llmt__moe_ep_bytes(const llmt__moe_ep *p, size_t *saved, size_t *scratch);
/* Rows of one (rank, expert) block of the exchange. */
int llmt__moe_ep_block(const llmt__moe_ep *p);
/* After llmt__moe_ep_counts: this rank's local experts (E / size); the
 * owner's rows of local expert el (from every source), where source
 * src's rows of it start in the owner's packing and how many they are. */
int llmt__moe_ep_local(const llmt__moe_ep *p);
int64_t llmt__moe_ep_owner_rows(const llmt__moe_ep *p, int el);
int64_t llmt__moe_ep_owner_off(const llmt__moe_ep *p, int el, int src);
int64_t llmt__moe_ep_owner_cnt(const llmt__moe_ep *p, int el, int src);
/* The all-gather of every rank's kept counts (after routing s) and the
 * owner's packing of them. Collective over comm. */
llmt_status llmt__moe_ep_counts(llmt__moe_ep *p, const llmt__moe *s, llmt_comm *comm,
                                llmt_err *e);
/* The layer on x[N,C] into y (overwritten), as llmt__moe_fwd; collective
 * over comm (every rank of the group calls it for the same layer). w's
 * (and dw's) expert tensors hold this rank's experts only: row block el
 * is expert rank*E/size + el (the router is whole). */
llmt_status llmt__moe_ep_fwd(llmt__moe_ep *p, llmt__moe *s, llmt_comm *comm, llmt_err *e,
                             const llmt__moe_w *w, const float *x, float *y, int N);
/* Its backward, as llmt__moe_bwd: gradients of this rank's experts (from
 * every rank's tokens) and of the router added into dw. Collective. */
llmt_status llmt__moe_ep_bwd(llmt__moe_ep *p, llmt__moe *s, llmt_comm *comm, llmt_err *e,
                             const llmt__moe_w *w, llmt__moe_w *dw, const float *x,
                             const float *dy, float *dx, float aux_coef, float z_coef);

#endif
