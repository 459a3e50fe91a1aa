/* The state of the op-table MoE layers (moe_dev.c) shared with their
 * expert parallel exchange (moe_dev_ep.c). Internal to those two files. */
#ifndef LLMT_TRAIN_MOE_DEV_IMPL_H
#define LLMT_TRAIN_MOE_DEV_IMPL_H

#include "train/moe_dev.h"
#include "train/moe_ep.h"

struct llmt__moe_dctx {
    const llmt__dev_ops *op;
    llmt__dev *d;
    llmt_err *e;
    llmt__moe_shape sh;
    int Fs, Nmax;
    size_t es; /* bytes of a stored element */
    int host;  /* the backend's memory is the host's: tables used in place */
    /* the backward's scratch (storage type): packed rows' dye, dxe [R, C]
     * and dact, dh1, dh3 [R, F]; the shared experts' dact, dh1, dh3 [N,
     * Fs]; the router logits' gradient in the storage type [N, E] (bf16
     * only; fp32 storage uses dlog itself) */
    void *dye, *dxe, *dact, *dh1, *dh3, *sdact, *sdh1, *sdh3, *dlogs;
    /* a device backend's copies of the host's fp32 dlog [N, E] and dgate
     * [N K] (NULL on a host-memory backend) */
    float *dlog, *dgate;
    /* expert parallelism (moe_dev_ep.c; ep_size 1: none): the exchange's
     * send and receive buffers [E][block][C], the owner's outputs and
     * backward scratch (llmt__moe_dctx_owner_rows rows of C or F),
     * storage type */
    int ep_rank, ep_size, block;
    void *sbuf, *rbuf, *yo, *dyo, *dxo, *edact, *edh1, *edh3;
    /* fp8 experts (llmt__moe_dctx_set_fp8; f8on 0: bf16): the layer
     * running; scratch for f8rows padded rows of up to max(C, F) columns:
     * f8pad, f8out the padded inputs and outputs (storage type), f8qa
     * codes as is, f8qat and f8qbt per expert transposed; f8qw a stacked
     * weight's codes for the f8n experts this rank multiplies (f8n x F x
     * C: all E, or its E/ep under expert parallelism); f8p0 the padded
     * first rows (host, f8n + 1) */
    int f8on, layer, f8n;
    llmt__moe_fp8 f8;
    size_t f8rows;
    void *f8pad, *f8out;
    uint8_t *f8qa, *f8qat, *f8qbt, *f8qw;
    int64_t *f8p0;
    /* a device backend's host copies of sbuf and rbuf (one malloc: the
     * exchange staged through host memory; NULL on a host-memory one) */
    void *hstage;
};

struct llmt__moe_dlay {
    /* packed rows: xe, ye [R, C], h1, h3, act [R, F]; shared experts' h1,
     * h3, act [N, Fs] (storage type) */
    void *xe, *ye, *h1, *h3, *act, *sh1, *sh3, *sact;
    /* a device backend's copies: logits [N, E] fp32, tok [R], row and
     * gate [N K] (NULL on a host-memory backend: the host's are used) */
    float *logits, *dgate;
    int32_t *dtok, *drow;
    /* the tables the ops read: the host's or the device copies */
    const int32_t *tok, *row;
    const float *gate;
};

/* One layer's exchange under expert parallelism (moe_dev_ep.c): the
 * tables (moe_ep.h, made without rows) and the owner's rows kept for the
 * backward, xo [O, C], h1, h3, act [O, F], O llmt__moe_dctx_owner_rows;
 * r0, nr: the owner's packing of each local expert (first row, rows). */
struct llmt__moe_dep {
    llmt__moe_ep *t;
    void *xo, *h1, *h3, *act;
    int64_t *r0, *nr;
};

/* The stages of a layer (moe_dev.c), shared by the two files. route:
 * router, routing, the tables and the packed rows p->xe; experts: n
 * experts (w's row blocks 0..n-1) on packed rows, expert e's nr[e] rows
 * from r0[e] (r0[0] = 0, contiguous); combine: y, the losses and the
 * shared experts. Backward: combine_bwd fills x->dye and s->dgate;
 * router_bwd: dx from x->dxe, the router's and shared experts'
 * gradients. */
llmt_status llmt__moe_dev_route(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe *s,
                                const llmt__moe_dw *w, const void *xin, int N);
llmt_status llmt__moe_dev_experts_fwd(llmt__moe_dctx *x, const llmt__moe_dw *w, int n,
                                      const int64_t *r0, const int64_t *nr, const void *xe,
                                      void *h1, void *h3, void *act, void *ye);
llmt_status llmt__moe_dev_combine(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe *s,
                                  const llmt__moe_dw *w, const void *xin, void *y, int N);
llmt_status llmt__moe_dev_combine_bwd(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe *s,
                                      const void *dy);
llmt_status llmt__moe_dev_experts_bwd(llmt__moe_dctx *x, const llmt__moe_dw *w,
                                      const llmt__moe_dw *g, int n, const int64_t *r0,
                                      const int64_t *nr, const void *xe, const void *h1,
                                      const void *h3, const void *act, const void *dye,
                                      void *dact, void *dh1, void *dh3, void *dxe);
llmt_status llmt__moe_dev_router_bwd(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe *s,
                                     const llmt__moe_dw *w, const llmt__moe_dw *g,
                                     const void *xin, const void *dy, void *dx, float aux_coef,
                                     float z_coef);

/* The most rows an expert parallel owner holds in a group of `size`
 * ranks (x->block set): it packs the kept rows it receives contiguously,
 * expert-major (moe_ep.c's counts), at most block from each source for
 * each of its E/size experts (E x block in all) and at most the Nmax x
 * top_k a source routes over all experts (size x Nmax x top_k), whichever
 * is less: dropless, 64 experts at ep 8 on N tokens of top-2, 16 N rows
 * instead of 64 N. The exchange's send and receive buffers keep E x
 * block: the all-to-all's shape is fixed. */
size_t llmt__moe_dctx_owner_rows(const llmt__moe_dctx *x, int size);

/* fp8 experts: the scratch made afresh for the experts and the largest
 * call after expert parallelism changed them (moe_dev.c; smaller too: a
 * rank's E/ep experts; nothing when they are bf16). */
llmt_status llmt__moe_dctx_fp8_resize(llmt__moe_dctx *x);

/* Element i of a storage-typed array. */
static inline void *llmt__moe_dat(const llmt__moe_dctx *x, const void *p, size_t i)
{
    return (char *)p + i * x->es;
}

/* A failed op of the backend, its message on x->e. */
static inline llmt_status llmt__moe_dfail(llmt__moe_dctx *x, llmt_status s, const char *what)
{
    return llmt__err_set(x->e, s, "trainer: moe: device %s: %s: %s", x->op->name, what,
                         x->op->last_error(x->d));
}
#define LLMT__MOE_OP(x, call, what)                  \
    do {                                             \
        llmt_status s_ = (call);                     \
        if (s_ != LLMT_OK)                           \
            return llmt__moe_dfail((x), s_, (what)); \
    } while (0)

/* bytes (0: 16) of backend memory into *p; the message on x->e */
llmt_status llmt__moe_dalloc(llmt__moe_dctx *x, void **p, size_t bytes);
void llmt__moe_dfree(llmt__moe_dctx *x, void *p);

#endif
