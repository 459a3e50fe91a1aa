/* The training engine (lib/train/device.c): a GPT-2 or Llama-style model
 * trained through the backend op table (lib/exec/dev.h) in the backend's
 * storage type: fp32 on the CPU (lib/exec/dev_cpu.c), bf16 parameters and
 * activations with fp32 master weights, gradients and AdamW state on CUDA
 * and the host emulation. lib/train/trainer.c drives it; the host keeps
 * the model's fp32 parameters and mirrors of the gradients and moments,
 * brought up to date on demand (llmt__devtrain_download) rather than every
 * step. On the fp32 CPU backend there is nothing to bring: the engine
 * trains the model's parameters in place and the mirrors are its buffers.
 *
 * Device layout: the parameters in the model's order, each tensor starting
 * on the backend's alignment (8 elements on CUDA and the emulation, 1 on
 * the CPU: there the layout is the model's own). */
#ifndef LLMT_TRAIN_DEVICE_H
#define LLMT_TRAIN_DEVICE_H

#include "exec/dev.h"
#include "model/model.h"

typedef struct llmt__devtrain llmt__devtrain;

/* ---- The graph's split points: how tensor parallelism plugs in
 *
 * The graph is written once; a parallel split is a property of the ops in
 * it, never a second copy. Every Linear of GPT-2 and Llama (per layer: qkv,
 * proj, fc, fc3 on Llama, fcproj; and the output head) is an llmt__linear:
 * its weight [out, in] and bias [out] offsets in the device layout, its
 * features, and a split kind. The embedding and the loss are one
 * llmt__vocab. Today every split is NONE (the whole tensor on every rank)
 * and no hook runs: the graph does exactly what it did before.
 *
 * Tensor parallelism (the next issue) over a group of t ranks sets, per
 * Megatron-LM's pairing of a column-parallel Linear with the row-parallel
 * one that consumes its output (one all-reduce per pair and direction):
 *   qkv, fc, fc3: COLUMN: this rank's out/t output features (heads h*nh/t
 *     .. for qkv, the kv heads likewise; attention is per head, so it runs
 *     unchanged on nh/t heads); the input is whole.
 *   proj, fcproj: ROW: this rank's in/t input features; the output is a
 *     partial sum.
 *   lm_head + loss, wte: the vocabulary split in t ranges (llmt__vocab lo,
 *     hi): the embedding looks up only its rows (others give 0), the head
 *     produces only its logits, the cross-entropy reduces its per-row max
 *     and sum of exponentials over the group.
 * and gives the engine a hook (llmt__devtrain_set_split_hook) that runs
 * the collective at each named point (LLMT__AT_*) below; with sequence
 * parallelism the all-reduces become reduce-scatter / all-gather pairs at
 * the same points. The weight offsets then address the rank's shard (the
 * model's parameters get a placement per dimension); the GEMMs take `in`
 * and `out` from the descriptor, so nothing else in the graph changes. */
typedef enum llmt__split {
    LLMT__SPLIT_NONE = 0,   /* whole on every rank */
    LLMT__SPLIT_COLUMN = 1, /* output features (or vocabulary rows) split */
    LLMT__SPLIT_ROW = 2     /* input features split; output partial sums */
} llmt__split;

/* Where a split op needs its group's collective (dir +1: forward, -1:
 * backward). */
typedef enum llmt__point {
    /* before a COLUMN Linear: forward, x is whole (identity; sequence
     * parallel: all-gather); backward, after its dx: all-reduce */
    LLMT__AT_COLUMN_IN = 0,
    /* after a ROW Linear: forward, all-reduce of out (sequence parallel:
     * reduce-scatter); backward, before it: dout is whole (identity) */
    LLMT__AT_ROW_OUT = 1,
    /* after a vocabulary-split embedding's forward: all-reduce of the rows
     * (sequence parallel: reduce-scatter; backward: all-gather of dout) */
    LLMT__AT_EMBED_OUT = 2,
    /* vocabulary-split cross-entropy: per-row max, then sum of exp */
    LLMT__AT_LOSS_MAX = 3,
    LLMT__AT_LOSS_SUM = 4,
    /* a sum over the group of an fp32 buffer (rows x cols floats): the
     * gradient norm's parts, the gradients of kv heads several ranks hold
     * (grouped-query attention with kv_heads < tp), the gathers of the
     * host copies (each element from the one rank that owns it) */
    LLMT__AT_GRAD_SUM = 5,
    /* the same sum of a buffer in HOST memory on every backend (the
     * gathers of the host copies, the row logits of last_logits and of a
     * pipeline's last stage): the hook must not stage it (tp.c) */
    LLMT__AT_HOST_SUM = 6,
    /* the element-wise maximum over the group of a HOST fp32 buffer: the
     * fp8 amaxes of a step, so that every rank's delayed scales are those
     * of the whole tensors (each rank saw only its shard of a split
     * weight, of a column split Linear's output gradient and of a row
     * split one's input) */
    LLMT__AT_HOST_MAX = 7
} llmt__point;

typedef struct llmt__linear {
    const char *name; /* "qkv", "proj", "fc", "fc3", "fcproj", "lm_head" */
    size_t w, b;      /* device offsets: weight [out, in], bias [out] or NOPARAM */
    int in, out;      /* features (of this rank's part when split) */
    llmt__split split;
    int fp8_slot; /* fp8 scaling slot, -1: never fp8 (the head) */
    int gelu;     /* GELU after it, fused into the GEMM (GPT-2's fc) */
    /* its input is the previous Linear's (Llama's fc3 shares fc's): the
     * LLMT__AT_COLUMN_IN collectives run once for both, at the other's
     * forward and after the other's backward (which sums both dx) */
    int shares_input;
} llmt__linear;

typedef struct llmt__vocab {
    size_t wte, wpe;   /* device offsets; wpe NOPARAM on Llama */
    int V, Vp, C;      /* vocabulary, padded, width */
    llmt__split split; /* NONE, or COLUMN: this rank has rows [lo, hi) */
    int lo, hi;
} llmt__vocab;

/* The collective at point `at` on buf [rows, cols] (storage type; fp32 for
 * the loss points), for Linear `lin` (NULL at the vocabulary points).
 * Runs only for split ops. */
typedef llmt_status (*llmt__split_hook)(void *ctx, llmt__point at, int dir,
                                        const llmt__linear *lin, void *buf, size_t rows,
                                        size_t cols);

/* Tensor parallelism over a group of `size` ranks, this one `rank`; the
 * hook runs the group's collectives (lib/train/tp.c). NULL or size 1: no
 * split. What is split, where each collective sits and how the host
 * copies relate to the shards: device.c's tp_shards and doc/parallelism.md. */
typedef struct llmt__devtrain_tp {
    int rank, size;
    llmt__split_hook hook;
    void *ctx;
    /* sequence parallelism (Megatron-LM, Korthikanti et al. 2022): the
     * residual stream, norms and the embedding output hold this rank's
     * B*T/size rows (contiguous blocks of the flattened B x T rows, rank
     * r the r-th; size must divide T), and the hook's COLUMN_IN, ROW_OUT
     * and EMBED_OUT points work on buffers of B*T rows whose r-th block is
     * this rank's: all-gather (COLUMN_IN forward, ROW_OUT and EMBED_OUT
     * backward) and reduce-scatter (COLUMN_IN backward, ROW_OUT and
     * EMBED_OUT forward), in place. */
    int seq;
    /* the group's communicator (NULL: none), for what is not one of the
     * split points: the MoE layers' router statistics under sequence
     * parallelism (moe_group.h) */
    llmt_comm *comm;
    /* once the engine has made its context: ctx bound to the engine's op
     * table and context d, returned as the hook's context for this engine
     * (so that the hook can stage device buffers through host memory:
     * tp.c), NULL when out of memory; unbind frees it as the engine goes.
     * NULL: the hook takes ctx as it is. */
    void *(*bind)(void *ctx, const llmt__dev_ops *op, llmt__dev *d);
    void (*unbind)(void *bound);
} llmt__devtrain_tp;

/* llmt_trainer_opts.recompute values */
enum { LLMT__RECOMPUTE_NONE = 0, LLMT__RECOMPUTE_FULL = 1, LLMT__RECOMPUTE_SELECTIVE = 2 };

/* fp8 forward GEMMs: the Linear layers of the blocks (qkv, attention
 * output, MLP in and out) quantise their input and weight to E4M3 with
 * per-tensor delayed scaling (lib/exec/fp8.h, history and margin as
 * given), run the fp8 GEMM, then add the bias (and GELU) with separate
 * ops. A Linear whose dims are not multiples of 16 stays bf16 (cuBLASLt's
 * fp8 layout rule), as do the output head and the whole backward. */
typedef struct llmt__devtrain_fp8 {
    int on, history, margin;
    int format; /* LLMT__FP8_FORMAT_* (exec/fp8.h): the gradients' */
} llmt__devtrain_fp8;

/* Creates the backend context and every device buffer for micro-batches of
 * B x T (and A micro-batches per step), then uploads the model's
 * parameters (moments zero). recompute: LLMT__RECOMPUTE_FULL keeps only
 * the layers' inputs and recomputes each layer's activations before its
 * backward; LLMT__RECOMPUTE_SELECTIVE keeps all but the attention core's
 * output and state (the T x T part), recomputed before each backward. fp8 may be NULL
 * (off). Errors go to `e`. */
llmt_status llmt__devtrain_create(llmt_err *e, const llmt__dev_ops *ops,
                                  const llmt__dev_opts *dopts, llmt_model *m,
                                  int B, int T, int A, int recompute,
                                  const llmt__devtrain_fp8 *fp8, llmt__devtrain **out);
/* The same with tensor parallelism (tp may be NULL): the device holds
 * only this rank's shards of the parameters, gradients and moments, and
 * the activations of its heads, MLP columns and vocabulary columns. The
 * host copies stay in the model's full layout: upload slices them,
 * download gathers them over the group (collective: every rank of the
 * group downloads the same things together). Refused where the backend
 * has no vocabulary-split ops, or the model does not divide by tp. */
llmt_status llmt__devtrain_create_tp(llmt_err *e, const llmt__dev_ops *ops,
                                     const llmt__dev_opts *dopts, llmt_model *m, int B, int T,
                                     int A, int recompute, const llmt__devtrain_fp8 *fp8,
                                     const llmt__devtrain_tp *tp, llmt__devtrain **out);
/* Does tp divide the model? LLMT_OK, or an error naming the key. */
llmt_status llmt__tp_check(llmt_err *e, const llmt_model_config *c, int tp);
/* What creating an engine on this backend would refuse before it
 * allocates anything (the head dim, the device context: one is made and
 * destroyed): the trainer's creation asks, as it makes its engine later. */
llmt_status llmt__devtrain_probe(llmt_err *e, const llmt__dev_ops *ops,
                                 const llmt__dev_opts *dopts, const llmt_model *m);
/* Can this backend run tensor parallelism? LLMT_OK, or an error saying
 * what is missing. */
llmt_status llmt__devtrain_tp_supported(llmt_err *e, const llmt__dev_ops *ops);
void llmt__devtrain_destroy(llmt__devtrain *g);

/* Host mirrors (pinned where the backend has pinned memory), model->total
 * floats each, in the host model's layout. */
float *llmt__devtrain_host_grads(llmt__devtrain *g);
float *llmt__devtrain_host_m(llmt__devtrain *g);
/* Parameter i's tensor parallel shard (lib/train/state.c's checkpoint
 * blocks): the tensor seen as [*R, *K]; cols = 0: nseg segments of rows
 * [lo[j], lo[j] + n[j]) concatenated in the local layout; cols = 1: the
 * columns [lo[0], lo[0] + n[0]) of every row (local [R, n[0]]). own[j]:
 * this rank alone writes that segment (replicas: the first holder).
 * Returns the segment count (1 and whole rows without tensor
 * parallelism). */
int llmt__devtrain_shard(const llmt__devtrain *g, int i, int *cols, int64_t *R, int64_t *K,
                         int64_t lo[3], int64_t n[3], int own[3]);
float *llmt__devtrain_host_v(llmt__devtrain *g);

/* Host -> device: the model's parameters and, when m and v are not NULL,
 * the moments (else they are zeroed). */
llmt_status llmt__devtrain_upload(llmt__devtrain *g, const float *params,
                                  const float *m, const float *v);
/* Device -> host into the model's parameters and the mirrors; each of
 * params / moments / grads selects what to copy. */
llmt_status llmt__devtrain_download(llmt__devtrain *g, int params,
                                    int moments, int grads);
/* The parameters' download of this rank's part only: under expert
 * parallelism without the other EP ranks' rows (no gather, not
 * collective); the model's other rows stay as they are. */
llmt_status llmt__devtrain_download_own(llmt__devtrain *g);

/* Zero the gradients, then forward and backward over `micro` micro-batches
 * of B x T tokens (inputs/targets on the host, micro*B*T each), the loss
 * gradient scaled by 1/count (count = targets >= 0 in the whole step).
 * Returns the sum of the per-token losses and the gradients' sum of
 * squares (one synchronisation). */
llmt_status llmt__devtrain_fwd_bwd(llmt__devtrain *g, const int32_t *inputs,
                                   const int32_t *targets, int micro,
                                   int64_t count, double *loss_sum,
                                   double *grad_sumsq);
/* AdamW on every parameter: grads * scale, weight decay `wd` on the
 * decayed group, step t (1-based). */
llmt_status llmt__devtrain_update(llmt__devtrain *g, float lr, float beta1,
                                  float beta2, float eps, float wd,
                                  float scale, int64_t t);
/* Sum of the losses of `rows` sequences (rows <= B) of length T <= the
 * T the engine was made for; no gradients. */
llmt_status llmt__devtrain_loss(llmt__devtrain *g, const int32_t *inputs,
                                const int32_t *targets, int rows, int T,
                                double *loss_sum);
/* Logits (fp32, padded_vocab_size values) of the last position of one
 * sequence of `len` tokens (len <= the engine's T). */
llmt_status llmt__devtrain_last_logits(llmt__devtrain *g, const int32_t *tok,
                                       int len, float *logits);

typedef struct llmt__devtrain_mem {
    size_t activations; /* activations + backward scratch, planned for B x T */
    size_t in_use, peak; /* the backend allocator's view */
} llmt__devtrain_mem;
void llmt__devtrain_memory(const llmt__devtrain *g, llmt__devtrain_mem *out);
const char *llmt__devtrain_backend(const llmt__devtrain *g);
/* fp8 state, for tests: the current quantisation scales (*n of them: per
 * Linear slot its input 2*slot and weight 2*slot + 1, then from index
 * 2 * slots the output gradients, one per slot), how many Linear
 * forwards ran in fp8 since the last forward pass began (recomputed
 * layers count again) and how many fp8 GEMMs the last backward pass ran
 * (a Linear's weight and data gradients: two, one when it needs no dx).
 * Returns 0 when fp8 is off. */
int llmt__devtrain_fp8_state(const llmt__devtrain *g, const float **scales, int *n, int *gemms,
                             int *bwd_gemms);
/* The fp8 recipe's state as a [n, history + 2] fp32 host array (see
 * llmt__fp8_delayed_export), valid until the next call; NULL when fp8 is
 * off. import restores it (and the device's scales). */
float *llmt__devtrain_fp8_export(llmt__devtrain *g, int64_t shape[2]);
llmt_status llmt__devtrain_fp8_import(llmt__devtrain *g, const float *in);

/* The graph's Linears (per layer qkv, proj, fc, fc3, fcproj: *n = layers
 * x 5, unused slots have w NOPARAM; then the head) and the vocabulary op,
 * for tests and the parallel layers; set_split_hook: the collectives of
 * split ops (NULL: none; nothing is split today). */
const llmt__linear *llmt__devtrain_linears(const llmt__devtrain *g, int *n);
const llmt__vocab *llmt__devtrain_vocab(const llmt__devtrain *g);
void llmt__devtrain_set_split_hook(llmt__devtrain *g, llmt__split_hook hook, void *ctx);

/* Data parallelism (lib/train/trainer.c attaches it, lib/train/dp.c runs
 * it on the engine's device buffers through the op table, any backend).
 * host_resident: the engine trains the model's parameters in place in host
 * memory (the fp32 CPU backend). dp_store: the buffers dp works on (master,
 * compute copy, gradients, full moments, the device offset map). set_dp:
 * the engine calls dp's hooks at the graph's named points (NULL: none).
 * drop_moments: ZeRO >= 1 holds the rank's shares of m and v, the engine's
 * full ones go (the host mirrors too when they are the same memory);
 * restore_moments: zeroed full ones again (detach fills them, moments
 * gives them). */
int llmt__devtrain_host_resident(const llmt__devtrain *g);
struct llmt__dp;
struct llmt__dp_store;
void llmt__devtrain_dp_store(llmt__devtrain *g, struct llmt__dp_store *st);
void llmt__devtrain_moments(llmt__devtrain *g, float **m, float **v);
void llmt__devtrain_set_dp(llmt__devtrain *g, struct llmt__dp *dp);
/* The data parallel group attached (NULL: none): the pipeline's step end
 * (pp.c) agrees on failures over it. */
struct llmt__dp *llmt__devtrain_dp(const llmt__devtrain *g);
void llmt__devtrain_drop_moments(llmt__devtrain *g);
llmt_status llmt__devtrain_restore_moments(llmt__devtrain *g);

/* lib/train/trainer.c, for tests: a device trainer on the given op table
 * (e.g. llmt__dev_emul()), whatever opts->device says. */
llmt_status llmt__trainer_create_dev(llmt_model *model, const llmt_trainer_opts *opts,
                                     const llmt__dev_ops *ops, llmt_trainer **out);
/* The engine of a device trainer (NULL for a CPU trainer), for tests. */
llmt__devtrain *llmt__trainer_devtrain(llmt_trainer *tr);
/* Parameter i's part in this engine (its tensor-parallel shard, nothing
 * for another pipeline stage's tensor), in the engine's local layout:
 * read and written through the host as fp32 (the bf16 compute copy is
 * refreshed; a write reaches this rank's part of the host model too,
 * without a collective). Fault drills (lib/job/fault.c) corrupt an engine that
 * trains its own copy this way. */
int64_t llmt__devtrain_local_numel(const llmt__devtrain *g, int i);
llmt_status llmt__devtrain_local_get(llmt__devtrain *g, int i, float *out);
llmt_status llmt__devtrain_local_put(llmt__devtrain *g, int i, const float *in);
/* The engine's mixture-of-experts layers (moe_net.h), NULL when dense. */
struct llmt__moe_net *llmt__devtrain_moe(llmt__devtrain *g);
/* Expert parallelism over comm (NULL or one rank: none; the MoE layers'
 * exchange, moe_net.h): the engine then holds only this EP rank's rows of
 * each expert tensor (E/ep experts) in its parameter, gradient and moment
 * buffers, made again for that layout and loaded from the host copies
 * (the model's parameters, the mirrors' moments: the caller brings them
 * up to date first). Host downloads gather the other EP ranks' rows
 * (collective over comm). Needs the engine's full moments (no ZeRO >= 1
 * attached). On a failure to allocate, the engine is unusable. ep: the
 * group's size (1: none). */
llmt_status llmt__devtrain_set_ep(llmt__devtrain *g, llmt_comm *comm);
int llmt__devtrain_ep(const llmt__devtrain *g);
/* Where parameter i's part here starts in the global tensor (flat): an
 * expert tensor's EP rows under expert parallelism, else 0. */
int64_t llmt__devtrain_ep_row0(const llmt__devtrain *g, int i);

#endif
