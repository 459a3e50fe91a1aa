/* Data parallelism for the trainer (dp.c): bucketed gradient reduction
 * overlapped with the backward, ZeRO-1/2/3, on any backend of the op table
 * (lib/exec/dev.h). The engine (lib/train/device.c) calls these hooks at
 * the named points of its graph when the trainer has a communicator
 * (llmt_trainer_set_comm). Units: 0 = the embeddings (head), 1..L = layer
 * l-1, L+1 = the final norm and untied output (tail); each is a contiguous
 * range of the engine's device layout (the model's order, every tensor on
 * the backend's alignment: the offset map `doff`). */
#ifndef LLMT_TRAIN_DP_H
#define LLMT_TRAIN_DP_H

#include "exec/dev.h"
#include "model/model.h"

typedef struct llmt__dp llmt__dp;

/* The engine's storage dp works on: device buffers of `total` floats in
 * the device layout, reached only through the op table. */
typedef struct llmt__dp_store {
    const llmt__dev_ops *op;
    llmt__dev *d;
    float *master;        /* fp32 parameters */
    void *param;          /* the compute copy (op->store); == master for fp32 */
    float *grads, *m, *v; /* fp32 gradients and the engine's full moments */
    size_t total;         /* floats of the device layout */
    const size_t *doff;   /* device offset of each of the model's parameters */
    /* elements of each parameter on the device: this rank's tensor
     * parallel shard (lib/train/device.c); NULL: the model's numel */
    const size_t *numel;
    /* the gradient norm counts only these runs of the device layout
     * (offsets, lengths; tensor parallelism: what this rank owns, so the
     * sum over the tensor parallel group counts each element once);
     * norm_count < 0: all of it */
    const size_t *norm_lo, *norm_n;
    int norm_count;
    int host_params; /* master IS the model's data (host memory) */
    /* expert parallelism (lib/train/moe_ep.h; NULL or one rank: none): the
     * EP group, consecutive ranks of the data parallel group. Each MoE
     * layer's expert tensors are then units of their own: the engine
     * holds only this rank's rows of them (EP rank j holds block j of
     * E/ep experts; numel gives their size), reduced and ZeRO-sharded
     * over the expert data parallel group, the dp/ep ranks of equal EP
     * rank (split from the DP group here). */
    llmt_comm *ep;
} llmt__dp_store;

/* What llmt__dp_create checks before it needs the engine: the
 * communicator's memory against the backend's (as below) and the options
 * (copied into *o, defaults where opts is NULL). The trainer checks an
 * attach with it before its engine is made. */
llmt_status llmt__dp_check(llmt_err *e, llmt_comm *comm, const llmt_dp_opts *opts,
                           const llmt__dev_ops *op, llmt_dp_opts *o);
/* The communicator must take the store's memory: host memory (the CPU
 * backend, the emulation) goes with in-process and MPI communicators,
 * device memory (CUDA) with NCCL; anything else is refused with a message.
 * With ZeRO >= 1 the create copies this rank's shares of m and v into its
 * own (device) buffers and no longer uses the full ones (the trainer frees
 * them). */
llmt_status llmt__dp_create(llmt_err *e, llmt_comm *comm, const llmt_dp_opts *opts,
                            llmt_model *model, const llmt__dp_store *st, llmt__dp **out);
void llmt__dp_destroy(llmt__dp *dp);
const llmt_err *llmt__dp_err(const llmt__dp *dp);
/* The data parallel group (the MoE layers sum their step tallies over it). */
llmt_comm *llmt__dp_comm(const llmt__dp *dp);

/* fwd_bwd: sum the step's target count over the ranks (collective). */
llmt_status llmt__dp_begin(llmt__dp *dp, int64_t *count);
/* Before each micro-batch; last = 1 for the final one (reduce then). */
void llmt__dp_micro(llmt__dp *dp, int last);
/* ZeRO-3: the parameters of `unit` are needed now (dir +1 forward, -1
 * backward: which unit to prefetch next); done: release them (whole pages
 * outside the rank's share back to the OS, the rest NaN; see dp.c). */
void llmt__dp_use(llmt__dp *dp, int unit, int dir);
void llmt__dp_done(llmt__dp *dp, int unit);
/* The gradients of `unit` are final for this micro-batch. */
void llmt__dp_ready(llmt__dp *dp, int unit);
/* After the last micro-batch: wait for the reductions, sum the loss over
 * the ranks (in rank order). */
llmt_status llmt__dp_end(llmt__dp *dp, double *loss_sum);
/* Sum of squares of the reduced gradients over the data parallel group
 * (only the store's norm runs: with tensor parallelism the caller sums the
 * result over the tensor parallel group). */
llmt_status llmt__dp_sumsq(llmt__dp *dp, double *ss);
/* x[n] (host floats) replaced by their maximum over the group: the fp8
 * amaxes, so that every replica quantises with the scales one rank would
 * pick from the whole global batch. dev: n floats of device scratch, used
 * when the communicator takes device memory (NCCL). */
llmt_status llmt__dp_max(llmt__dp *dp, float *x, float *dev, size_t n);
/* x (n host floats) maximised over comm in place; on_device: the
 * communicator takes device memory (NCCL), so through dev (n floats of
 * op's device memory). The comm's status (its message on comm). Serves
 * the data parallel group and the engine's pipeline group. */
llmt_status llmt__group_max(const llmt__dev_ops *op, llmt__dev *d, llmt_comm *comm,
                            int on_device, float *x, float *dev, size_t n);
/* AdamW on this rank's share, then share the parameters (ZeRO-1/2) or
 * leave them sharded (ZeRO-3). t is the 1-based step. */
llmt_status llmt__dp_update(llmt__dp *dp, const llmt_trainer_opts *o, float lr,
                            float scale, int64_t t);
/* ZeRO-3: gather every unit (collective). */
llmt_status llmt__dp_sync(llmt__dp *dp);
/* The options it was made with, and the expert data parallel group (NULL
 * without expert parallelism): the trainer makes data parallelism again
 * when the EP group changes; tests read the group's traffic. */
const llmt_dp_opts *llmt__dp_opts(const llmt__dp *dp);
llmt_comm *llmt__dp_expert_comm(const llmt__dp *dp);
/* The parameters were just written whole (a checkpoint read, uploaded by
 * the engine) and the host copies of the moment shares too: the shares go
 * to the device, ZeRO-3 releases the ungathered units again. Not
 * collective. */
llmt_status llmt__dp_params_written(llmt__dp *dp, int shares);
/* The host copies of this rank's moment shares (llmt__dp_param_share's m
 * and v) brought up to date from the device; a no-op where the device
 * memory is host memory. */
llmt_status llmt__dp_state_download(llmt__dp *dp);

int llmt__dp_zero_stage(const llmt__dp *dp);
/* This rank's part of parameter `param`: its elements [*rel, *rel + *n)
 * in row-major order (n = 0: none), and where its AdamW state is on the
 * host (m, v may be NULL when not wanted; with ZeRO >= 1 the host copies
 * of the shares, current after llmt__dp_state_download). With ZeRO 0 the
 * range is still the rank's share (checkpoints save it) and m/v are NULL:
 * the trainer's full moments hold it. */
void llmt__dp_param_share(const llmt__dp *dp, int param, size_t *rel, size_t *n, float **m,
                          float **v);
/* Bytes of optimizer state held here (ZeRO >= 1; 0 otherwise: the trainer
 * holds it) and of the communication staging buffers. */
size_t llmt__dp_state_bytes(const llmt__dp *dp);
size_t llmt__dp_buffer_bytes(const llmt__dp *dp);
/* ZeRO-3: bytes of the parameter buffer given back to the OS now (whole
 * pages outside the rank's shares of the ungathered units); 0 otherwise. */
size_t llmt__dp_released_bytes(const llmt__dp *dp);
/* ZeRO >= 1: all-gather every rank's shares into the full-size m and v
 * (device buffers in the device layout; collective). A no-op when the
 * state is not sharded. */
llmt_status llmt__dp_unshard_state(llmt__dp *dp, float *m, float *v);
/* Seconds (monotonic, since creation) of this rank's data parallel host
 * work that is neither an op of the table nor a wait the communicator
 * counts as exposed (llmt_comm_work_wait, blocking collectives): issuing
 * async collectives, giving ZeRO-3 pages back. The job's time split counts
 * it as exposed data parallel communication. 0 for NULL. */
double llmt__dp_host_s(const llmt__dp *dp);

#endif
