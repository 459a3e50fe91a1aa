/* What lib/train/state.c (checkpoint state of a trainer) needs from the
 * trainer (lib/train/trainer.c) beyond the public API. */
#ifndef LLMT_TRAIN_TRAINER_STATE_H
#define LLMT_TRAIN_TRAINER_STATE_H

#include "core/internal.h"

llmt_err *llmt__trainer_err(llmt_trainer *tr);
/* The engine made from the recorded parallel layout if it is not made
 * yet (trainer_build.c): collective over the recorded groups; every call
 * that needs the engine makes it so. */
llmt_status llmt__trainer_ready(llmt_trainer *tr);
llmt_model *llmt__trainer_model(llmt_trainer *tr);
/* This rank's part of parameter `index`; returns 1 when m and v hold only
 * this rank's shares (ZeRO >= 1). */
int llmt__trainer_share(llmt_trainer *tr, int32_t index, int64_t *rel, int64_t *n,
                        float *ptr[3]);
int llmt__trainer_has_comm(const llmt_trainer *tr);
/* Tensor or pipeline parallelism: parameter i's shard on this rank (see
 * llmt__devtrain_shard), its data parallel share [*rel, *rel + *n) as a
 * flat range of the LOCAL shard's row-major layout (the whole shard
 * without data parallelism), and the host copies of the moments' shares
 * in that local layout when they are sharded (ZeRO >= 1: mv[0], mv[1];
 * else NULL: the host's whole m and v hold them). Returns the segment
 * count (0 for another pipeline stage's tensor), 0 without tensor or
 * pipeline parallelism. */
int llmt__trainer_tp_shard(llmt_trainer *tr, int32_t i, int *cols, int64_t *R, int64_t *K,
                           int64_t lo[3], int64_t n[3], int own[3], int64_t *rel, int64_t *cnt,
                           float *mv[2]);
int llmt__trainer_has_tp(const llmt_trainer *tr);
const llmt_trainer_opts *llmt__trainer_opts(const llmt_trainer *tr);
/* Data parallelism's host time outside ops and counted waits
 * (llmt__dp_host_s); 0 without it. */
double llmt__trainer_dp_host_s(const llmt_trainer *tr);
/* Multiply the schedule's peak and floor learning rate by factor (> 0):
 * every later step's LR scales by it (the anomaly policy lower_lr). */
llmt_status llmt__trainer_scale_lr(llmt_trainer *tr, double factor);
llmt_context *llmt__trainer_ctx(llmt_trainer *tr);
/* After the host parameters (and moments) were written: the engine and
 * data parallelism take them up. shares: only this rank's ZeRO-3 share
 * of each parameter was written (llmt__trainer_params_shared): the rest
 * is dropped and gathered again from the owners before its next use. */
llmt_status llmt__trainer_params_written(llmt_trainer *tr, int shares);
/* ZeRO-3 without tensor, pipeline or expert parallelism: a restore reads
 * only this rank's share of each parameter (its other ranks read theirs),
 * then llmt__trainer_params_written(tr, 1). */
int llmt__trainer_params_shared(llmt_trainer *tr);
/* The tensor reads llmt_trainer_ckpt_read makes, made against ck with
 * nothing else done (state.c): what a gathered open records as this
 * rank's restore plan (ckpt/memtier.c), before the reads themselves. */
llmt_status llmt__trainer_ckpt_plan(llmt_trainer *tr, llmt_ckpt *ck);
/* Parameters and moments on the host, current. */
llmt_status llmt__trainer_host_sync(llmt_trainer *tr);
/* The same but, under expert parallelism, this rank's expert rows only
 * (not collective over the EP group; the host's other rows stay as they
 * are and the parameters count as stale): what a checkpoint saves. */
llmt_status llmt__trainer_host_sync_own(llmt_trainer *tr);
/* Whether the engine trains the model's host parameters in place (the
 * fp32 CPU engine without tensor or pipeline parallelism). Otherwise it
 * trains its own copy: a write to the model's tensors takes effect only
 * between llmt__trainer_host_sync and llmt__trainer_params_written. */
int llmt__trainer_host_resident(const llmt_trainer *tr);
/* Fault drills on an engine that trains its own copy: this rank's part
 * of the first parameter its engine holds (its tensor-parallel shard, in
 * the engine's layout), read into a new host buffer (*buf, *n floats;
 * the caller frees it) and written back (to the engine and to this
 * rank's part of the host copy). */
llmt_status llmt__trainer_poke_get(llmt_trainer *tr, int32_t *idx, float **buf, int64_t *n);
/* Parameter i's part in the engine (as above; *n = 0, *buf = NULL for
 * another pipeline stage's tensor): what the SDC check hashes on an engine
 * that trains its own copy, where replicas hold equal shards. */
llmt_status llmt__trainer_local_read(llmt_trainer *tr, int32_t i, float **buf, int64_t *n);
llmt_status llmt__trainer_poke_put(llmt_trainer *tr, int32_t idx, const float *buf);
/* llmt_trainer_generate drawing only from the first `vocab` tokens (0:
 * the model's vocabulary): a model whose vocabulary is larger than its
 * tokenizer's (model.vocab 320 with the byte tokenizer's 257) has ids
 * no text holds: the tokenizer cannot decode one drawn there. */
llmt_status llmt__trainer_generate(llmt_trainer *tr, const int32_t *prompt, int32_t n_prompt,
                                   int32_t n_new, float temperature, int32_t top_k,
                                   uint64_t seed, int32_t vocab, int32_t *out);
/* The fp8 recipe's state (NULL without fp8) and its restore. */
float *llmt__trainer_fp8_state(llmt_trainer *tr, int64_t shape[2]);
llmt_status llmt__trainer_fp8_restore(llmt_trainer *tr, const float *in);

/* This rank's place in its context parallel group (0 without one;
 * cp_api.c): checkpoints are saved by rank 0 of the group only. */
int llmt__trainer_cp_rank(llmt_trainer *tr);
/* Context parallel attention's compute seconds so far (0 without CP;
 * llmt__cp_compute_s; the op table times the block ops as compute too,
 * so lib/job/perf.c does not add them again). */
double llmt__trainer_cp_compute_s(llmt_trainer *tr);

/* Pipeline parallelism is attached (each stage saves and reads only its
 * tensors' blocks). */
int llmt__trainer_has_pp(const llmt_trainer *tr);

/* Expert parallelism (moe_attach.c): the EP group (NULL: none); data
 * parallelism made again over its group and options (a no-op without it:
 * collective), so that it reduces the experts over the group the EP group
 * now gives; the expert data parallel group (NULL: none; tests read its
 * traffic). */
llmt_comm *llmt__trainer_ep_comm(llmt_trainer *tr);
llmt_status llmt__trainer_dp_renew(llmt_trainer *tr);
llmt_comm *llmt__trainer_expert_dp_comm(const llmt_trainer *tr);
/* Expert parallelism on the fp32 CPU backend, after an update (the host
 * copies are stale): the model's rows of other EP ranks' experts given
 * back to the OS (whole pages; the edges NaN) until a download gathers
 * them (llmt_trainer_sync_params). moe_attach.c. */
void llmt__trainer_ep_release(llmt_trainer *tr);

#endif
