/* Context parallelism for the engine (cp.c): the sequence of every
 * micro-batch split over the CP group, with the causal load balance of
 * Megatron-Core and Llama 3: the T positions in 2 x cp chunks of
 * T / (2 cp), rank r holding chunks r and 2 cp - 1 - r (so every rank
 * has the same share of the causal triangle), in that order as its
 * T / cp rows of each sequence. Everything but attention is row-wise and
 * runs unchanged on those rows; cp.c gives the engine the global
 * positions (RoPE, learned position embeddings) and runs attention's
 * exchange of keys and values (the op table's attn_cp_* compute the
 * blocks: lib/exec/attn_cp.c on the host backends, cuda/kernels/attn_cp.cu
 * on CUDA):
 *
 *   LLMT__CP_RING        cp - 1 ring steps of every rank's K/V block
 *                        (send to r + 1, receive from r - 1); the backward
 *                        passes each block around again with its dK/dV
 *                        accumulating, one last step returns them home
 *   LLMT__CP_ALL_GATHER   (Llama 3) one all-gather of K/V, every block
 *                        computed; the backward gathers again and
 *                        reduce-scatters dK/dV to their owners
 *
 * Weights are replicated over the group: their gradients, and the
 * losses, are summed over it (llmt__cp_sum, llmt__cp_sum_dev). The
 * blocks and scratch are in the engine's memory; on a backend whose memory
 * is not the host's every exchange is staged through host buffers by the
 * table's copies (cp.c). */
#ifndef LLMT_TRAIN_CP_H
#define LLMT_TRAIN_CP_H

#include <stdint.h>

#include "core/internal.h"
#include "exec/dev.h"
#include "llmtrain.h"

typedef struct llmt__cp llmt__cp;

enum { LLMT__CP_RING = 0, LLMT__CP_ALL_GATHER = 1 };

/* T: the global sequence length (2 cp must divide it); bf16: the engine
 * stores bf16 (else fp32). Errors go to e (the trainer's). */
llmt_status llmt__cp_create(llmt_err *e, llmt_comm *comm, int variant, int T, int bf16,
                            llmt__cp **out);
void llmt__cp_destroy(llmt__cp *cp);
/* The engine whose op table and memory the attention uses (its scratch
 * is made there on first use; what a previous engine's held is freed
 * first, so bind the new engine before destroying the old one, or unbind
 * the old). llmt__devtrain_set_cp binds; llmt__devtrain_destroy unbinds
 * its own context (a no-op when cp is bound elsewhere). */
void llmt__cp_bind(llmt__cp *cp, const llmt__dev_ops *op, llmt__dev *d);
void llmt__cp_unbind(llmt__cp *cp, const llmt__dev *d);
int llmt__cp_size(const llmt__cp *cp);
int llmt__cp_rank(const llmt__cp *cp);
llmt_comm *llmt__cp_comm(const llmt__cp *cp);
int llmt__cp_variant(const llmt__cp *cp);
/* The T / cp global positions of this rank's rows of a sequence. */
const int32_t *llmt__cp_pos(const llmt__cp *cp);
/* This rank's rows of `rows` sequences of T tokens: out[b, t] = in[b,
 * pos[t]] (rows x T / cp). */
void llmt__cp_local(const llmt__cp *cp, const int32_t *in, int32_t *out, int rows);

/* Attention of this rank's B x Tl rows of qkv (row stride Q: nh q heads,
 * then nkv k, then nkv v heads of hd, roped) over the whole sequence:
 * out [B*Tl, nh*hd] (storage type), lse [B, nh, Tl] fp32 kept for the
 * backward. Collective over the group. */
llmt_status llmt__cp_attn_fwd(llmt__cp *cp, void *out, float *lse, const void *qkv, size_t Q,
                              int B, int Tl, int nh, int nkv, int hd);
/* Its backward: dqkv (stride Q, storage type) OVERWRITTEN with this
 * rank's rows' dq, dk, dv (dk, dv summed over every rank's queries). */
llmt_status llmt__cp_attn_bwd(llmt__cp *cp, void *dqkv, const void *dout, const void *out,
                              const float *lse, const void *qkv, size_t Q, int B, int Tl,
                              int nh, int nkv, int hd);
/* RoPE at this rank's global positions (the table's attn_cp_rope) on nh
 * heads of hd in B x T rows of stride `stride` of x (engine memory). */
llmt_status llmt__cp_rope(llmt__cp *cp, void *x, int B, int T, int nh, int hd, size_t stride,
                          float theta, int inverse);
/* Seconds spent so far in attention (fwd and bwd) outside the exchange's
 * calls (the block ops, now timed by the op table too, and the staging). */
double llmt__cp_compute_s(const llmt__cp *cp);
/* buf (n fp32, host) summed over the group, in place. */
llmt_status llmt__cp_sum(llmt__cp *cp, float *buf, size_t n);
/* buf (n fp32, host) maximised over the group, in place (fp8 amaxes:
 * each rank saw its rows of the activations and their gradients). */
llmt_status llmt__cp_max(llmt__cp *cp, float *buf, size_t n);
/* The same on the bound engine's memory (the gradients): staged through
 * a host copy where that is not the host's. */
llmt_status llmt__cp_sum_dev(llmt__cp *cp, float *buf, size_t n);
/* *x summed over the group, in double: every rank adds the same values
 * in rank order, so all get the same sum. */
llmt_status llmt__cp_sum_double(llmt__cp *cp, double *x);

/* The engine's side (lib/train/device.c): attach cp (NULL: none) to an
 * engine made for B x T / cp rows; it then takes this rank's rows of
 * every sequence (llmt__cp_local) and sums losses and gradients over the
 * group. */
struct llmt__devtrain;
void llmt__devtrain_set_cp(struct llmt__devtrain *g, llmt__cp *cp);

/* lib/train/trainer.c: context parallelism over comm (the plan's CP
 * group; NULL or a group of one: none), variant LLMT__CP_RING or
 * LLMT__CP_ALL_GATHER. Collective over comm: every rank calls
 * llmt_trainer_step with the same whole sequences and trains on its
 * rows. Tensor parallelism attached before composes (each CP rank holds
 * its TP shard; the CP group joins ranks of equal TP rank); data
 * parallelism attached after composes, any ZeRO stage (its reductions
 * first, then the CP sum of what they left: linear, so any order of the
 * two sums is the global batch's gradient). Sequence parallelism set on
 * the TP group before composes: SP's row blocks split this rank's
 * B x T / cp rows (tp must divide T / cp, refused naming the keys), and
 * attention runs on the gathered qkv as without it. Pipeline parallelism
 * attached after composes (llmt_trainer_set_pp_comm makes each stage's
 * engine for the T / cp rows and attaches the group to it: the CP ranks
 * of a stage run the same schedule, so their exchanges pair up op by op;
 * a stage sums its gradients and loss over the group after the data
 * parallel reductions, as without a pipeline). Refused with fp8, on a
 * backend without the attn_cp_* ops or whose table says they never ran
 * there (unverified_cp; none today), after data or pipeline parallelism
 * (LLMT_ERR_STATE) and, naming model.seq_len, when 2 x cp does not divide
 * it. */
llmt_status llmt__trainer_set_cp(llmt_trainer *tr, llmt_comm *comm, int variant);
/* The trainer's context parallelism (NULL: none; lib/train/cp_api.c and
 * the checkpoint's save-once rule in state.c read it). */
const llmt__cp *llmt__trainer_cp(const llmt_trainer *tr);

#endif
