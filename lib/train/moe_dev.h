/* A mixture-of-experts layer through the backend op table (lib/exec/dev.h),
 * so that the bf16 emulation and CUDA run the layer the fp32 host code
 * (moe.h) defines, in their storage type, with fp32 parameter gradients:
 *
 *   router logits  gemm x @ router^T, fp32 out
 *   routing        on the host (moe.h: llmt__moe_route_logits): softmax,
 *                  top-k, capacity, drops, statistics; a host-memory
 *                  backend's logits are read in place, another's are
 *                  copied back (d2h) and the tables sent (h2d)
 *   experts        moe_gather of the kept rows, per expert the gemms of
 *                  w1 and w3 on its packed rows, swiglu over all rows, the
 *                  gemm of w2, moe_combine with the gate weights
 *   shared experts gemms and swiglu on every token, the output added by
 *                  the last gemm (beta 1)
 *   backward       moe_combine_bwd (dye, and the gates' gradient, which
 *                  goes back to the host for the router's: moe.h's
 *                  llmt__moe_router_dlog), the experts' gemms in moe.c's
 *                  order accumulating fp32 weight gradients, swiglu_bwd,
 *                  moe_gather_bwd of the rows' input gradients, the
 *                  router's gemms on the logits' gradient (in the storage
 *                  type, as every other activation gradient).
 *
 * Expert parallelism: moe_dev_ep.c, the exchange of moe_ep.h on the
 * table's rows. Pipeline stages: moe_net.c keeps a forward state (dlay,
 * dep) per activation set, as it does the host layers'. */
#ifndef LLMT_TRAIN_MOE_DEV_H
#define LLMT_TRAIN_MOE_DEV_H

#include "core/internal.h"
#include "exec/dev.h"
#include "train/moe.h"

/* A layer's parameters (storage type) or gradients (fp32), as device
 * pointers; sw1 NULL: no shared experts. */
typedef struct llmt__moe_dw {
    void *router, *w1, *w3, *w2, *sw1, *sw3, *sw2;
} llmt__moe_dw;

/* The backend and the backward's scratch, one per engine. */
typedef struct llmt__moe_dctx llmt__moe_dctx;
/* One layer's forward state kept for its backward (backend memory). */
typedef struct llmt__moe_dlay llmt__moe_dlay;

/* For layers of shape sh with Fs shared hidden units (0: none), calls of
 * up to Nmax tokens. e gets the message of a failure. */
llmt_status llmt__moe_dctx_new(const llmt__dev_ops *op, llmt__dev *d, llmt_err *e,
                               const llmt__moe_shape *sh, int Fs, int Nmax,
                               llmt__moe_dctx **out);
void llmt__moe_dctx_free(llmt__moe_dctx *x);
/* Where the next calls' failures are recorded. */
void llmt__moe_dctx_set_err(llmt__moe_dctx *x, llmt_err *e);
const llmt__dev_ops *llmt__moe_dctx_ops(const llmt__moe_dctx *x);
llmt__dev *llmt__moe_dctx_dev(const llmt__moe_dctx *x);
llmt_status llmt__moe_dlay_new(llmt__moe_dctx *x, llmt__moe_dlay **out);
void llmt__moe_dlay_free(llmt__moe_dctx *x, llmt__moe_dlay *p);
/* Bytes a layer keeps from its forward for its backward (the routing
 * state on the host included; under expert parallelism the owner's rows
 * too), for the engine's activations. */
size_t llmt__moe_dlay_saved_bytes(const llmt__moe_dctx *x);
/* Of those, the routing state's on the host (not the backend's memory). */
size_t llmt__moe_dlay_host_bytes(const llmt__moe_dctx *x);
/* The backward's scratch (and the exchange's), once per engine, in the
 * backend's memory. */
size_t llmt__moe_dctx_scratch_bytes(const llmt__moe_dctx *x);

/* Expert parallelism (moe_dev_ep.c; moe_ep.h says what is exchanged):
 * set_ep makes the exchange's scratch for this rank of comm (NULL or one
 * rank: frees it; a NCCL group is refused: the exchange goes through host
 * memory); each layer then has its own exchange state (dep). fp8 experts
 * (set_fp8, before or after) get their room for this rank's E/size
 * experts, and for all E again when the group goes. */
typedef struct llmt__moe_dep llmt__moe_dep;
llmt_status llmt__moe_dctx_set_ep(llmt__moe_dctx *x, llmt_comm *comm);
llmt_status llmt__moe_dep_new(llmt__moe_dctx *x, llmt__moe_dep **out);
void llmt__moe_dep_free(llmt__moe_dctx *x, llmt__moe_dep *q);
/* The layer under expert parallelism, as llmt__moe_dev_fwd / _bwd: w's
 * (and g's) expert tensors hold this rank's E/size experts only (row
 * block el is expert rank*E/size + el). Collective over comm. */
llmt_status llmt__moe_dev_ep_fwd(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe_dep *q,
                                 llmt__moe *s, llmt_comm *comm, const llmt__moe_dw *w,
                                 const void *xin, void *y, int N);
llmt_status llmt__moe_dev_ep_bwd(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe_dep *q,
                                 llmt__moe *s, llmt_comm *comm, const llmt__moe_dw *w,
                                 const llmt__moe_dw *g, const void *xin, const void *dy,
                                 void *dx, float aux_coef, float z_coef);

/* fp8 GEMMs for the routed experts (doc/fp8.md, "Mixture of experts"),
 * on the engine's delayed scaling state (device.c): its device scale
 * arrays and amax rows. Layer l's gate (w1), up (w3) and down (w2)
 * projections take its Linear slots s = l * nlin + slot0 + {0, 1, 2}
 * (the slots of the dense MLP a MoE layer does not have): tensor 2s is
 * the input, 2s + 1 the stacked [experts, ...] weight, g0 + s the output
 * gradient, each one per-tensor scale (the gate's input is the
 * dispatched rows, which the up projection reads with the same codes:
 * its own input tensor stays unrecorded). Each expert's rows are padded
 * with zero rows to a multiple of 16 for every fp8 GEMM. */
typedef struct llmt__moe_fp8 {
    const float *scale; /* device [tensors]: quantisation multipliers */
    const float *inv;   /* device: tensor i's dequantisation at inv[i * inv_stride] */
    int inv_stride;
    float *amax;         /* device [rows][tensors] */
    const int *amax_row; /* the row the running pass records into */
    int tensors, nlin, slot0, g0, g5;
    int *gemms, *bwd_gemms; /* the engine's counters of fp8 GEMMs */
} llmt__moe_fp8;
/* f NULL: bf16 experts. Copied; needs C and F multiples of 16 and the
 * backend's cast_transpose_fp8 (INVALID_ARGUMENT / UNSUPPORTED else). */
llmt_status llmt__moe_dctx_set_fp8(llmt__moe_dctx *x, const llmt__moe_fp8 *f);
/* The MoE layer the next calls run (its fp8 slots). */
void llmt__moe_dctx_set_layer(llmt__moe_dctx *x, int l);

/* y[N,C] OVERWRITTEN = the layer (and its shared experts) on x[N,C]; s:
 * the layer's routing state (llmt__moe_new_rows with rows 0): its
 * tables, counts, aux and z losses are set as llmt__moe_fwd sets them. */
llmt_status llmt__moe_dev_fwd(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe *s,
                              const llmt__moe_dw *w, const void *xin, void *y, int N);
/* After the forward on the same x: dx OVERWRITTEN, gradients ADDED into
 * g (fp32), the aux and z losses with their (scaled) coefficients. */
llmt_status llmt__moe_dev_bwd(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe *s,
                              const llmt__moe_dw *w, const llmt__moe_dw *g, const void *xin,
                              const void *dy, void *dx, float aux_coef, float z_coef);

#endif
