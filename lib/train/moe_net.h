/* The engine's mixture-of-experts layers (lib/train/device.c): one
 * llmt__moe (moe.h) per MoE layer of the model, run on the parameter and
 * gradient buffers of the fp32 host backend, and the step's tallies the
 * trainer reports (tokens kept per expert, dropped choices, aux and z
 * losses). */
#ifndef LLMT_TRAIN_MOE_NET_H
#define LLMT_TRAIN_MOE_NET_H

#include "core/internal.h"
#include "exec/dev.h"
#include "model/model.h"

typedef struct llmt__moe_net llmt__moe_net;

/* For calls of up to Nmax tokens. */
llmt_status llmt__moe_net_new(llmt_err *e, const llmt_model_config *c, int Nmax,
                              llmt__moe_net **out);
void llmt__moe_net_free(llmt__moe_net *n);
/* Run the layers through the op table of backend `op` (moe_dev.h)
 * instead of on host fp32 buffers: param, x, y, dy and dx below are then
 * the backend's memory in its storage type (grad stays fp32). Once, right
 * after llmt__moe_net_new; pipeline stages (llmt__moe_net_sets) and
 * expert parallelism are refused on it. */
llmt_status llmt__moe_net_set_dev(llmt__moe_net *n, llmt_err *e, const llmt__dev_ops *op,
                                  llmt__dev *d);
/* fp8 GEMMs for the routed experts through the op table (after set_dev;
 * moe_dev.h: llmt__moe_fp8; NULL: bf16). */
struct llmt__moe_fp8;
llmt_status llmt__moe_net_set_fp8(llmt__moe_net *n, llmt_err *e, const struct llmt__moe_fp8 *f);
/* Layer l (a MoE layer) on x[N, width] into y (overwritten); w: its
 * offsets into param (elements: fp32 floats, or the op table's storage
 * type). */
llmt_status llmt__moe_net_fwd(llmt__moe_net *n, llmt_err *e, int l, const llmt__layer_offs *w,
                              const void *param, const void *x, void *y, int N);
/* The next forwards route only their first `rows` rows (0: all, as a
 * training step's): a forward-only pass padded to the engine's
 * micro-batch (pp_infer.c) gives its padding rows no expert slot, no
 * share of the capacity (computed on `rows`, as one rank's pass of the
 * real rows alone) and an output of 0. */
void llmt__moe_net_set_active(llmt__moe_net *n, int rows);
/* Its backward after its forward on the same x: dx OVERWRITTEN, gradients
 * added into grad (same offsets); the aux and z losses weighted by their
 * coefficients times `scale` (1 / micro-batches of the step). */
llmt_status llmt__moe_net_bwd(llmt__moe_net *n, llmt_err *e, int l, const llmt__layer_offs *w,
                              const void *param, float *grad, const void *x, const void *dy,
                              void *dx, float scale);
/* Expert parallelism over comm (moe_ep.h; NULL or one rank: off). comm
 * must outlive the engine; its size must divide the experts. */
llmt_status llmt__moe_net_set_ep(llmt__moe_net *n, llmt_err *e, llmt_comm *comm);
int llmt__moe_net_ep_size(const llmt__moe_net *n);
llmt_comm *llmt__moe_net_ep_comm(const llmt__moe_net *n); /* NULL: none */
/* The tokens of each micro-batch are split over comm too (sequence or
 * context parallelism; moe_group.h): every rank routes its own rows, the
 * router statistics and the step's tallies are summed over it (NULL or one
 * rank: nothing). comm must outlive the engine. The gradients' sum over it
 * is the engine's (device.c). */
void llmt__moe_net_add_group(llmt__moe_net *n, llmt_comm *comm);
/* Start a step of `micro` micro-batches on this rank, under the data
 * parallel group dp (NULL: none): *scale gets the aux and z losses'
 * gradient weight (1 / (micro x dp ranks)). Refused when expert
 * parallelism has no data parallel group to sum the expert gradients
 * over. step_end: the tallies summed over dp (collective). tally: add
 * every MoE layer's last forward to the tallies. */
llmt_status llmt__moe_net_step_begin(llmt__moe_net *n, llmt_err *e, int micro, llmt_comm *dp,
                                     float *scale);
llmt_status llmt__moe_net_step_end(llmt__moe_net *n, llmt_err *e);
void llmt__moe_net_tally(llmt__moe_net *n);
/* The last step's tallies (over the data parallel group) of MoE layer
 * `layer` (-1: summed over the MoE layers): tokens kept per expert (counts[experts]), dropped (token,
 * choice) pairs, aux and z losses (mean over micro-batches, summed over
 * layers). Any output may be NULL. */
llmt_status llmt__moe_net_stats(const llmt__moe_net *n, llmt_err *e, int layer, int64_t *counts,
                                int nexp, int64_t *dropped, double *aux, double *z);

/* Pipeline stages: `sets` copies of the forward state of the MoE layers
 * the stage holds (held[l] != 0; layers entries), one per activation set
 * of the engine (once, before set_ep; the other layers keep only their
 * tallies); use: set k's for the next forward or backward. */
llmt_status llmt__moe_net_sets(llmt__moe_net *n, llmt_err *e, int sets,
                               const unsigned char *held);
void llmt__moe_net_use(llmt__moe_net *n, int k);
/* tally for layers [l0, l1) only (a stage's chunk), not counting a
 * micro-batch; step_end_pp: the step had `micro` micro-batches: sums over
 * the data parallel group (step_end), then over the pipeline group pp
 * (NULL: none; collective), so every stage reports every MoE layer. */
void llmt__moe_net_tally_layers(llmt__moe_net *n, int l0, int l1);
/* Bytes the MoE layers held here keep from their forwards for their
 * backwards, over every activation set (activations, as the engine
 * reports them). */
size_t llmt__moe_net_saved_bytes(const llmt__moe_net *n);
/* What the engine reports for its MoE layers: *acts the activations
 * (the saved bytes, and through the op table its backward scratch), *host
 * the part of them outside the backend's allocator (all of it on the
 * fp32 host path, the routing state through the op table). */
void llmt__moe_net_mem(const llmt__moe_net *n, size_t *acts, size_t *host);
llmt_status llmt__moe_net_step_end_pp(llmt__moe_net *n, llmt_err *e, int micro, llmt_comm *pp);

#endif
