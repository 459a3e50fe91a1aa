/* The step engine: forward and backward of a GPT-2 or Llama-style model
 * through the backend op table, gradient accumulation over micro-batches,
 * global-norm clipping, AdamW and the LR schedule; evaluation and sampling.
 *
 * Activations: resid[l] is the input of layer l (resid[0] the embeddings,
 * resid[L] the input of the final norm). Each layer keeps its own
 * activations, or, with recompute, all layers share one set that is
 * refilled from resid[l] just before the layer's backward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/exec.h"
#include "model/model.h"
#include "train/device.h"
#include "train/dp.h"

typedef struct acts {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch3, *fcact;
} acts;

struct llmt_trainer {
    llmt_err err;
    llmt_model *model;
    llmt_context *ctx;
    llmt_trainer_opts o;
    const llmt__exec_ops *ops;
    float *grads, *m, *v;
    int B, T;      /* micro_batch, seq_len: the sizes buffers are made for */
    int nacts;     /* layers, or 1 with recompute */
    acts *A;
    float **resid; /* L+1 buffers of B*T*C */
    float *lnf, *lnf_mean, *lnf_rstd, *logits, *losses, *tmpc;
    /* backward scratch */
    float *dres, *dln, *datty, *dqkv, *datt, *dfch, *dfch3, *dfcact;
    int32_t *gen_ctx;
    int64_t step;
    llmt__dp *dp;  /* data parallelism (lib/train/dp.c), or NULL */
    /* device trainer (lib/train/device.c): grads, m and v are its host
     * mirrors, brought up to date from the device on demand */
    llmt__devtrain *dev;
    int stale_params, stale_moments, stale_grads; /* host behind device */
    double dev_sumsq; /* of the last forward_backward's gradients */
    /* all buffers come from one arena */
    float *arena;
    size_t arena_floats;
};

llmt_status llmt_trainer_opts_init(llmt_trainer_opts *o, size_t size)
{
    if (!o) return LLMT_ERR_NULL_POINTER;
    llmt_status s = llmt__check_struct_size(NULL, "llmt_trainer_opts", size,
                                            sizeof(size_t));
    if (s != LLMT_OK) return s;
    llmt_trainer_opts d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.micro_batch = 4;
    d.seq_len = 64;
    d.grad_accum = 1;
    d.schedule = LLMT_LR_COSINE;
    d.lr = 3e-4f;
    d.min_lr = 0.0f;
    d.warmup_steps = 0;
    d.total_steps = 1000;
    d.decay_fraction = 0.2f;
    d.beta1 = 0.9f;
    d.beta2 = 0.95f;
    d.eps = 1e-8f;
    d.weight_decay = 0.1f;
    d.grad_clip = 1.0f;
    d.recompute = 0;
    d.threads = 0;
    d.device = LLMT_DEVICE_CPU;
    d.device_index = 0;
    d.deterministic = 0;
    d.fp8 = 0;
    d.fp8_amax_history = 16;
    d.fp8_margin = 0;
    memcpy(o, &d, size < sizeof d ? size : sizeof d);
    o->struct_size = size;
    return LLMT_OK;
}

const char *llmt_trainer_last_error(const llmt_trainer *tr)
{
    return tr ? tr->err.msg : "trainer: NULL handle";
}

/* ---- buffers */

static float *take(llmt_trainer *tr, size_t *cursor, size_t n)
{
    size_t at = *cursor;
    *cursor += (n + 15) / 16 * 16; /* 64-byte aligned pieces */
    return tr->arena ? tr->arena + at : NULL;
}

/* Lays out (or, with arena == NULL, sizes) every activation buffer. */
static size_t layout(llmt_trainer *tr)
{
    const llmt_model *m = tr->model;
    const llmt_model_config *c = &m->cfg;
    size_t N = (size_t)tr->B * tr->T, C = (size_t)c->width;
    size_t F = (size_t)c->ffn_hidden, Q = (size_t)m->qkv_dim;
    size_t ATT = (size_t)tr->B * c->heads * tr->T * tr->T;
    size_t Vp = (size_t)c->padded_vocab_size;
    int llama = c->arch == LLMT_ARCH_LLAMA;
    size_t cur = 0;
    for (int l = 0; l < tr->nacts; l++) {
        acts *a = &tr->A[l];
        a->ln1 = take(tr, &cur, N * C);
        a->ln1_mean = take(tr, &cur, N);
        a->ln1_rstd = take(tr, &cur, N);
        a->qkv = take(tr, &cur, N * Q);
        a->att = take(tr, &cur, ATT);
        a->atty = take(tr, &cur, N * C);
        a->res2 = take(tr, &cur, N * C);
        a->ln2 = take(tr, &cur, N * C);
        a->ln2_mean = take(tr, &cur, N);
        a->ln2_rstd = take(tr, &cur, N);
        a->fch = take(tr, &cur, N * F);
        a->fch3 = llama ? take(tr, &cur, N * F) : NULL;
        a->fcact = take(tr, &cur, N * F);
    }
    for (int l = 0; l <= c->layers; l++) tr->resid[l] = take(tr, &cur, N * C);
    tr->lnf = take(tr, &cur, N * C);
    tr->lnf_mean = take(tr, &cur, N);
    tr->lnf_rstd = take(tr, &cur, N);
    tr->logits = take(tr, &cur, N * Vp);
    tr->losses = take(tr, &cur, N);
    tr->tmpc = take(tr, &cur, N * C);
    tr->dres = take(tr, &cur, N * C);
    tr->dln = take(tr, &cur, N * C);
    tr->datty = take(tr, &cur, N * C);
    tr->dqkv = take(tr, &cur, N * Q);
    tr->datt = take(tr, &cur, ATT);
    tr->dfch = take(tr, &cur, N * F);
    tr->dfch3 = llama ? take(tr, &cur, N * F) : NULL;
    tr->dfcact = take(tr, &cur, N * F);
    return cur;
}

void llmt_trainer_destroy(llmt_trainer *tr)
{
    if (!tr) return;
    llmt_context *ctx = tr->ctx;
    size_t P = tr->model->total * sizeof(float);
    llmt__dp_destroy(tr->dp);
    if (tr->dev) { /* grads, m and v are the engine's mirrors */
        llmt__devtrain_destroy(tr->dev);
        tr->grads = tr->m = tr->v = NULL;
    }
    if (tr->grads) llmt__free(ctx, tr->grads, P);
    if (tr->m) llmt__free(ctx, tr->m, P);
    if (tr->v) llmt__free(ctx, tr->v, P);
    if (tr->arena) llmt__free(ctx, tr->arena, tr->arena_floats * sizeof(float));
    if (tr->A) llmt__free(ctx, tr->A, (size_t)tr->nacts * sizeof *tr->A);
    if (tr->resid)
        llmt__free(ctx, tr->resid,
                   (size_t)(tr->model->cfg.layers + 1) * sizeof *tr->resid);
    if (tr->gen_ctx) llmt__free(ctx, tr->gen_ctx, (size_t)tr->T * sizeof(int32_t));
    llmt__free(ctx, tr, sizeof *tr);
}

/* The device engine behind a device trainer; its mirrors stand in for
 * grads, m and v. */
static llmt_status create_device(llmt_trainer *tr, const llmt__dev_ops *ops)
{
    llmt_err *me = &tr->model->err;
    tr->gen_ctx = llmt__alloc(tr->ctx, (size_t)tr->T * sizeof(int32_t), 64);
    if (!tr->gen_ctx)
        return llmt__err_set(me, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    llmt__dev_opts d = {tr->o.device_index, tr->o.deterministic};
    llmt__devtrain_fp8 f8 = {tr->o.fp8, tr->o.fp8_amax_history, tr->o.fp8_margin};
    llmt_status s = llmt__devtrain_create(&tr->err, ops, &d, tr->model, tr->B, tr->T,
                                          tr->o.grad_accum, tr->o.recompute, &f8,
                                          &tr->dev);
    if (s != LLMT_OK) return llmt__err_set(me, s, "%s", tr->err.msg);
    tr->grads = llmt__devtrain_host_grads(tr->dev);
    tr->m = llmt__devtrain_host_m(tr->dev);
    tr->v = llmt__devtrain_host_v(tr->dev);
    return LLMT_OK;
}

static llmt_status create_with(llmt_model *model, const llmt_trainer_opts *opts,
                               const llmt__dev_ops *dev_ops, llmt_trainer **out);

llmt_status llmt_trainer_create(llmt_model *model,
                                const llmt_trainer_opts *opts,
                                llmt_trainer **out)
{
    return create_with(model, opts, NULL, out);
}

/* Tests: a device trainer on the given op table (e.g. the host emulation,
 * llmt__dev_emul()), whatever opts->device says. */
llmt_status llmt__trainer_create_dev(llmt_model *model, const llmt_trainer_opts *opts,
                                     const llmt__dev_ops *ops, llmt_trainer **out)
{
    return create_with(model, opts, ops, out);
}

static llmt_status create_with(llmt_model *model, const llmt_trainer_opts *opts,
                               const llmt__dev_ops *dev_ops, llmt_trainer **out)
{
    if (!model) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&model->err, "trainer: create", out);
    *out = NULL;
    llmt_err *me = &model->err;
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    if (opts) {
        llmt_status s = llmt__opts_copy(me, "llmt_trainer_opts", &o, sizeof o,
                                        opts);
        if (s != LLMT_OK) return s;
    }
    o.struct_size = sizeof o;
    const llmt_model_config *c = &model->cfg;
    if (o.micro_batch < 1 || o.grad_accum < 1 || o.seq_len < 1)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: micro_batch %d, grad_accum %d and "
                             "seq_len %d must be >= 1", (int)o.micro_batch,
                             (int)o.grad_accum, (int)o.seq_len);
    if (o.seq_len > c->max_seq_len)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: seq_len %d exceeds the model's "
                             "max_seq_len %d", (int)o.seq_len,
                             (int)c->max_seq_len);
    if (o.schedule < LLMT_LR_CONSTANT || o.schedule > LLMT_LR_WSD)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: schedule %d unknown", (int)o.schedule);
    if (!(o.lr >= 0.0f) || !(o.beta1 >= 0.0f && o.beta1 < 1.0f) ||
        !(o.beta2 >= 0.0f && o.beta2 < 1.0f) || !(o.eps > 0.0f) ||
        !(o.weight_decay >= 0.0f) || !(o.grad_clip >= 0.0f) ||
        o.total_steps < 1 || o.warmup_steps < 0 ||
        !(o.decay_fraction >= 0.0f && o.decay_fraction <= 1.0f))
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: optimizer options out of range (lr "
                             ">= 0, betas in [0,1), eps > 0, weight_decay "
                             ">= 0, grad_clip >= 0, total_steps >= 1, "
                             "decay_fraction in [0,1])");
    if (o.device != LLMT_DEVICE_CPU && o.device != LLMT_DEVICE_CUDA)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: device %d is not LLMT_DEVICE_CPU (0) or "
                             "LLMT_DEVICE_CUDA (1)", (int)o.device);
    if (o.device == LLMT_DEVICE_CUDA && !dev_ops) {
        dev_ops = llmt__dev_cuda();
        if (!dev_ops)
            return llmt__err_set(me, LLMT_ERR_UNSUPPORTED,
                                 "trainer: device cuda: this build of llmtrain has "
                                 "no CUDA backend (build with nvcc on PATH; "
                                 "doc/gpu.md)");
    }
    if (o.fp8 && !dev_ops)
        return llmt__err_set(me, LLMT_ERR_UNSUPPORTED,
                             "trainer: fp8 GEMMs run on a device trainer only "
                             "(device cuda); the CPU trainer is fp32");
    if (o.fp8 != 0 && o.fp8 != 1)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: fp8 %d is not 0 (off) or 1 (delayed "
                             "per-tensor scaling)", (int)o.fp8);
    if (o.fp8 && (o.fp8_amax_history < 1 || o.fp8_amax_history > 1024 ||
                  o.fp8_margin < 0 || o.fp8_margin > 16))
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: fp8_amax_history %d (1..1024) or "
                             "fp8_margin %d (0..16) out of range",
                             (int)o.fp8_amax_history, (int)o.fp8_margin);
    if (dev_ops && o.device_index < 0)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: device_index %d < 0", (int)o.device_index);
    llmt_context *ctx = model->ctx;
    llmt_trainer *tr = llmt__calloc(ctx, 1, sizeof *tr);
    if (!tr) return llmt__err_set(me, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    tr->ctx = ctx;
    tr->model = model;
    tr->o = o;
    tr->ops = llmt__exec_cpu();
    tr->B = o.micro_batch;
    tr->T = o.seq_len;
    tr->nacts = o.recompute ? 1 : c->layers;
    if (dev_ops) {
        llmt_status s = create_device(tr, dev_ops);
        if (s != LLMT_OK) {
            llmt_trainer_destroy(tr);
            return s;
        }
        *out = tr;
        return LLMT_OK;
    }
    size_t P = model->total * sizeof(float);
    tr->grads = llmt__alloc(ctx, P, 64);
    tr->m = llmt__alloc(ctx, P, 64);
    tr->v = llmt__alloc(ctx, P, 64);
    tr->A = llmt__calloc(ctx, (size_t)tr->nacts, sizeof *tr->A);
    tr->resid = llmt__calloc(ctx, (size_t)c->layers + 1, sizeof *tr->resid);
    tr->gen_ctx = llmt__alloc(ctx, (size_t)tr->T * sizeof(int32_t), 64);
    if (tr->A && tr->resid) {
        tr->arena_floats = layout(tr);
        tr->arena = llmt__alloc(ctx, tr->arena_floats * sizeof(float), 64);
    }
    if (!tr->grads || !tr->m || !tr->v || !tr->arena || !tr->gen_ctx) {
        size_t want = tr->arena_floats * sizeof(float) + 3 * P;
        llmt_trainer_destroy(tr);
        return llmt__err_set(me, LLMT_ERR_OUT_OF_MEMORY,
                             "trainer: cannot allocate %zu bytes", want);
    }
    layout(tr);
    memset(tr->grads, 0, P);
    memset(tr->m, 0, P);
    memset(tr->v, 0, P);
    memset(tr->arena, 0, tr->arena_floats * sizeof(float));
    llmt__exec_cpu_set_threads(o.threads);
    *out = tr;
    return LLMT_OK;
}

/* ---- forward and backward */

#define PW(off) (mdl->data + (off))
#define PG(off) (tr->grads + (off))
#define PWN(off) ((off) == LLMT__NOPARAM ? NULL : mdl->data + (off))
#define PGN(off) ((off) == LLMT__NOPARAM ? NULL : tr->grads + (off))

static void norm_fwd(llmt_trainer *tr, float *out, float *mean, float *rstd,
                     const float *x, size_t w, size_t b, int N)
{
    const llmt_model *mdl = tr->model;
    int C = mdl->cfg.width;
    if (mdl->cfg.arch == LLMT_ARCH_GPT2)
        tr->ops->layernorm_fwd(out, mean, rstd, x, PW(w), PW(b), N, C,
                               mdl->cfg.norm_eps);
    else
        tr->ops->rmsnorm_fwd(out, rstd, x, PW(w), N, C, mdl->cfg.norm_eps);
}

static void norm_bwd(llmt_trainer *tr, float *dinp, const float *dout,
                     const float *x, const float *mean, const float *rstd,
                     size_t w, size_t b, int N)
{
    const llmt_model *mdl = tr->model;
    int C = mdl->cfg.width;
    if (mdl->cfg.arch == LLMT_ARCH_GPT2)
        tr->ops->layernorm_bwd(dinp, PG(w), PG(b), dout, x, PW(w), mean, rstd,
                               N, C);
    else
        tr->ops->rmsnorm_bwd(dinp, PG(w), dout, x, PW(w), rstd, N, C);
}

static void layer_fwd(llmt_trainer *tr, int l, acts *a, int B, int T)
{
    const llmt_model *mdl = tr->model;
    const llmt_model_config *c = &mdl->cfg;
    const llmt__exec_ops *op = tr->ops;
    const llmt__layer_offs *L = &mdl->layer[l];
    int N = B * T, C = c->width, F = c->ffn_hidden, Q = mdl->qkv_dim;
    int nh = c->heads, nkv = c->kv_heads, hd = mdl->head_dim;
    const float *x = tr->resid[l];
    norm_fwd(tr, a->ln1, a->ln1_mean, a->ln1_rstd, x, L->ln1w, L->ln1b, N);
    op->matmul_fwd(a->qkv, a->ln1, PW(L->qkvw), PWN(L->qkvb), N, C, Q);
    float *q = a->qkv, *k = a->qkv + (size_t)nh * hd;
    float *v = k + (size_t)nkv * hd;
    if (c->arch == LLMT_ARCH_LLAMA) {
        op->rope(q, B, T, nh, hd, (size_t)Q, c->rope_theta, 0);
        op->rope(k, B, T, nkv, hd, (size_t)Q, c->rope_theta, 0);
    }
    op->attention_fwd(a->atty, a->att, q, k, v, (size_t)Q, B, T, nh, nkv, hd);
    op->matmul_fwd(tr->tmpc, a->atty, PW(L->projw), PWN(L->projb), N, C, C);
    op->residual_fwd(a->res2, x, tr->tmpc, (size_t)N * C);
    norm_fwd(tr, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, L->ln2w, L->ln2b, N);
    op->matmul_fwd(a->fch, a->ln2, PW(L->fcw), PWN(L->fcb), N, C, F);
    if (c->arch == LLMT_ARCH_GPT2) {
        op->gelu_fwd(a->fcact, a->fch, (size_t)N * F);
    } else {
        op->matmul_fwd(a->fch3, a->ln2, PW(L->fc3w), NULL, N, C, F);
        op->swiglu_fwd(a->fcact, a->fch, a->fch3, (size_t)N * F);
    }
    op->matmul_fwd(tr->tmpc, a->fcact, PW(L->fcprojw), PWN(L->fcprojb), N, F, C);
    op->residual_fwd(tr->resid[l + 1], a->res2, tr->tmpc, (size_t)N * C);
}

/* dres holds d(resid[l+1]) on entry and d(resid[l]) on return. */
static void layer_bwd(llmt_trainer *tr, int l, acts *a, int B, int T)
{
    const llmt_model *mdl = tr->model;
    const llmt_model_config *c = &mdl->cfg;
    const llmt__exec_ops *op = tr->ops;
    const llmt__layer_offs *L = &mdl->layer[l];
    int N = B * T, C = c->width, F = c->ffn_hidden, Q = mdl->qkv_dim;
    int nh = c->heads, nkv = c->kv_heads, hd = mdl->head_dim;
    size_t NC = (size_t)N * C, NF = (size_t)N * F;
    op->zero(tr->dfcact, NF);
    op->matmul_bwd(tr->dfcact, PG(L->fcprojw), PGN(L->fcprojb), tr->dres,
                   a->fcact, PW(L->fcprojw), N, F, C);
    op->zero(tr->dfch, NF);
    op->zero(tr->dln, NC);
    if (c->arch == LLMT_ARCH_GPT2) {
        op->gelu_bwd(tr->dfch, a->fch, tr->dfcact, NF);
    } else {
        op->zero(tr->dfch3, NF);
        op->swiglu_bwd(tr->dfch, tr->dfch3, tr->dfcact, a->fch, a->fch3, NF);
        op->matmul_bwd(tr->dln, PG(L->fc3w), NULL, tr->dfch3, a->ln2,
                       PW(L->fc3w), N, C, F);
    }
    op->matmul_bwd(tr->dln, PG(L->fcw), PGN(L->fcb), tr->dfch, a->ln2,
                   PW(L->fcw), N, C, F);
    norm_bwd(tr, tr->dres, tr->dln, a->res2, a->ln2_mean, a->ln2_rstd,
             L->ln2w, L->ln2b, N);
    op->zero(tr->datty, NC);
    op->matmul_bwd(tr->datty, PG(L->projw), PGN(L->projb), tr->dres, a->atty,
                   PW(L->projw), N, C, C);
    op->zero(tr->dqkv, (size_t)N * Q);
    float *q = a->qkv, *k = a->qkv + (size_t)nh * hd;
    float *v = k + (size_t)nkv * hd;
    float *dq = tr->dqkv, *dk = tr->dqkv + (size_t)nh * hd;
    float *dv = dk + (size_t)nkv * hd;
    op->attention_bwd(dq, dk, dv, tr->datt, tr->datty, a->att, q, k, v,
                      (size_t)Q, B, T, nh, nkv, hd);
    if (c->arch == LLMT_ARCH_LLAMA) {
        op->rope(dq, B, T, nh, hd, (size_t)Q, c->rope_theta, 1);
        op->rope(dk, B, T, nkv, hd, (size_t)Q, c->rope_theta, 1);
    }
    op->zero(tr->dln, NC);
    op->matmul_bwd(tr->dln, PG(L->qkvw), PGN(L->qkvb), tr->dqkv, a->ln1,
                   PW(L->qkvw), N, C, Q);
    norm_bwd(tr, tr->dres, tr->dln, tr->resid[l], a->ln1_mean, a->ln1_rstd,
             L->ln1w, L->ln1b, N);
}

/* Embeddings, layers, final norm. */
static void trunk_fwd(llmt_trainer *tr, const int32_t *inp, int B, int T)
{
    const llmt_model *mdl = tr->model;
    const llmt_model_config *c = &mdl->cfg;
    if (tr->dp) llmt__dp_use(tr->dp, 0, 1);
    tr->ops->embedding_fwd(tr->resid[0], inp, PW(mdl->wte), PWN(mdl->wpe), B,
                           T, c->width);
    for (int l = 0; l < c->layers; l++) {
        if (tr->dp) llmt__dp_use(tr->dp, 1 + l, 1);
        layer_fwd(tr, l, &tr->A[tr->nacts == 1 ? 0 : l], B, T);
        if (tr->dp) llmt__dp_done(tr->dp, 1 + l);
    }
    norm_fwd(tr, tr->lnf, tr->lnf_mean, tr->lnf_rstd, tr->resid[c->layers],
             mdl->lnfw, mdl->lnfb, B * T);
}

/* Sum of the per-position losses of one micro-batch; counts targets. */
static double loss_fwd(llmt_trainer *tr, const int32_t *inp,
                       const int32_t *tgt, int B, int T, int64_t *count)
{
    const llmt_model *mdl = tr->model;
    const llmt_model_config *c = &mdl->cfg;
    int N = B * T;
    trunk_fwd(tr, inp, B, T);
    tr->ops->matmul_fwd(tr->logits, tr->lnf, PW(mdl->lm_head), NULL, N,
                        c->width, c->padded_vocab_size);
    tr->ops->softmax_xent_fwd(tr->losses, tr->logits, tgt, N, c->vocab_size,
                              c->padded_vocab_size);
    double s = 0.0;
    for (int i = 0; i < N; i++)
        if (tgt[i] >= 0) {
            s += tr->losses[i];
            (*count)++;
        }
    return s;
}

static void loss_bwd(llmt_trainer *tr, const int32_t *inp, const int32_t *tgt,
                     int B, int T, float dloss)
{
    const llmt_model *mdl = tr->model;
    const llmt_model_config *c = &mdl->cfg;
    const llmt__exec_ops *op = tr->ops;
    int N = B * T, C = c->width;
    op->softmax_xent_bwd(tr->logits, tgt, dloss, N, c->vocab_size,
                         c->padded_vocab_size);
    op->zero(tr->dln, (size_t)N * C);
    op->matmul_bwd(tr->dln, PG(mdl->lm_head), NULL, tr->logits, tr->lnf,
                   PW(mdl->lm_head), N, C, c->padded_vocab_size);
    op->zero(tr->dres, (size_t)N * C);
    norm_bwd(tr, tr->dres, tr->dln, tr->resid[c->layers], tr->lnf_mean,
             tr->lnf_rstd, mdl->lnfw, mdl->lnfb, N);
    if (tr->dp) llmt__dp_ready(tr->dp, c->layers + 1);
    for (int l = c->layers - 1; l >= 0; l--) {
        acts *a = &tr->A[tr->nacts == 1 ? 0 : l];
        if (tr->dp) llmt__dp_use(tr->dp, 1 + l, -1);
        if (tr->o.recompute) layer_fwd(tr, l, a, B, T);
        layer_bwd(tr, l, a, B, T);
        if (tr->dp) {
            llmt__dp_done(tr->dp, 1 + l);
            llmt__dp_ready(tr->dp, 1 + l);
        }
    }
    op->embedding_bwd(PG(mdl->wte), PGN(mdl->wpe), tr->dres, inp, B, T, C);
    if (tr->dp) llmt__dp_ready(tr->dp, 0);
}

/* `what` names the public call ("trainer: step") for the messages. */
static llmt_status check_batch(llmt_trainer *tr, const char *what,
                               const llmt_batch *b, int exact)
{
    if (!b || !b->inputs || !b->targets)
        return llmt__err_set(&tr->err, LLMT_ERR_NULL_POINTER, "%s: %s is NULL", what,
                             !b ? "batch" : !b->inputs ? "batch->inputs" : "batch->targets");
    if (b->struct_size < sizeof *b)
        return llmt__err_set(&tr->err, LLMT_ERR_STRUCT_SIZE,
                             "%s: llmt_batch.struct_size %zu < %zu", what,
                             b->struct_size, sizeof *b);
    int want = tr->B * tr->o.grad_accum;
    if (b->seq_len != tr->T || b->sequences < 1 ||
        (exact && b->sequences != want))
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: batch is %d x %d tokens, expected "
                             "%s%d x %d", (int)b->sequences, (int)b->seq_len,
                             exact ? "" : "n x ", exact ? want : 1, tr->T);
    int V = tr->model->cfg.vocab_size;
    size_t n = (size_t)b->sequences * b->seq_len;
    for (size_t i = 0; i < n; i++) {
        if (b->inputs[i] < 0 || b->inputs[i] >= V)
            return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "trainer: input token %d at %zu outside the "
                                 "vocabulary [0, %d)", (int)b->inputs[i], i, V);
        if (b->targets[i] >= V)
            return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "trainer: target token %d at %zu outside the "
                                 "vocabulary [0, %d)", (int)b->targets[i], i, V);
    }
    return LLMT_OK;
}

static llmt_status fwd_bwd(llmt_trainer *tr, const char *what, const llmt_batch *b,
                           float *loss, int64_t *tokens)
{
    llmt_status s = check_batch(tr, what, b, 1);
    if (s != LLMT_OK) return s;
    int64_t count = 0;
    size_t per = (size_t)tr->B * tr->T;
    for (size_t i = 0; i < per * (size_t)tr->o.grad_accum; i++)
        count += b->targets[i] >= 0;
    if (tr->dp && llmt__dp_begin(tr->dp, &count) != LLMT_OK)
        return llmt__err_forward(&tr->err, llmt__dp_err(tr->dp), "trainer");
    if (count == 0)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: the batch has no target to learn "
                             "(all < 0)");
    if (tr->dev) {
        double sum = 0.0;
        s = llmt__devtrain_fwd_bwd(tr->dev, b->inputs, b->targets, tr->o.grad_accum,
                                   count, &sum, &tr->dev_sumsq);
        if (s != LLMT_OK) return s;
        tr->stale_grads = 1;
        *loss = (float)(sum / (double)count);
        if (tokens) *tokens = count;
        return LLMT_OK;
    }
    tr->ops->zero(tr->grads, tr->model->total);
    float dloss = 1.0f / (float)count;
    double sum = 0.0;
    int64_t seen = 0;
    for (int mb = 0; mb < tr->o.grad_accum; mb++) {
        const int32_t *in = b->inputs + per * mb, *tg = b->targets + per * mb;
        if (tr->dp) llmt__dp_micro(tr->dp, mb == tr->o.grad_accum - 1);
        sum += loss_fwd(tr, in, tg, tr->B, tr->T, &seen);
        loss_bwd(tr, in, tg, tr->B, tr->T, dloss);
    }
    if (tr->dp && llmt__dp_end(tr->dp, &sum) != LLMT_OK)
        return llmt__err_forward(&tr->err, llmt__dp_err(tr->dp), "trainer");
    *loss = (float)(sum / (double)count);
    if (tokens) *tokens = count;
    return LLMT_OK;
}

llmt_status llmt_trainer_forward_backward(llmt_trainer *tr,
                                          const llmt_batch *b, float *loss)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&tr->err, "trainer: forward_backward", loss);
    return fwd_bwd(tr, "trainer: forward_backward", b, loss, NULL);
}

/* ---- optimizer */

static float lr_at(const llmt_trainer_opts *o, int64_t s)
{
    if (o->warmup_steps > 0 && s < o->warmup_steps)
        return o->lr * (float)(s + 1) / (float)o->warmup_steps;
    if (o->schedule == LLMT_LR_CONSTANT) return o->lr;
    int64_t total = o->total_steps;
    if (s >= total) return o->min_lr;
    if (o->schedule == LLMT_LR_WSD) {
        int64_t decay = (int64_t)((double)o->decay_fraction * total + 0.5);
        int64_t start = total - decay;
        if (start < o->warmup_steps) start = o->warmup_steps;
        if (s < start || total <= start) return o->lr;
        double p = (double)(s - start) / (double)(total - start);
        return (float)(o->lr - (o->lr - o->min_lr) * p);
    }
    int64_t span = total - o->warmup_steps;
    double p = span > 0 ? (double)(s - o->warmup_steps) / (double)span : 1.0;
    if (o->schedule == LLMT_LR_LINEAR)
        return (float)(o->lr - (o->lr - o->min_lr) * p);
    return (float)(o->min_lr +
                   0.5 * (1.0 + cos(3.14159265358979323846 * p)) *
                       (o->lr - o->min_lr));
}

llmt_status llmt_trainer_lr_at(const llmt_trainer *tr, int64_t step, float *lr)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&tr->err, "trainer: lr_at", lr);
    *lr = lr_at(&tr->o, step < 0 ? 0 : step);
    return LLMT_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

llmt_status llmt_trainer_step(llmt_trainer *tr, const llmt_batch *b,
                              llmt_step_metrics *met)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    if (met && met->struct_size < sizeof *met)
        return llmt__err_set(&tr->err, LLMT_ERR_STRUCT_SIZE,
                             "trainer: llmt_step_metrics.struct_size %zu < %zu",
                             met->struct_size, sizeof *met);
    double t0 = now_s();
    float loss;
    int64_t tokens = 0;
    llmt_status s = fwd_bwd(tr, "trainer: step", b, &loss, &tokens);
    if (s != LLMT_OK) return s;
    llmt_model *mdl = tr->model;
    double ss;
    if (tr->dev) ss = tr->dev_sumsq;
    else if (!tr->dp) ss = tr->ops->sumsq(tr->grads, mdl->total);
    else if (llmt__dp_sumsq(tr->dp, &ss) != LLMT_OK)
        return llmt__err_forward(&tr->err, llmt__dp_err(tr->dp), "trainer");
    float norm = (float)sqrt(ss);
    if (!isfinite(loss) || !isfinite(norm))
        return llmt__err_set(&tr->err, LLMT_ERR_NUMERIC,
                             "trainer: step %lld: loss %g, grad norm %g is not "
                             "finite; parameters not updated",
                             (long long)tr->step + 1, (double)loss,
                             (double)norm);
    float scale = 1.0f;
    if (tr->o.grad_clip > 0.0f && norm > tr->o.grad_clip)
        scale = tr->o.grad_clip / norm;
    float lr = lr_at(&tr->o, tr->step);
    if (tr->dev) {
        s = llmt__devtrain_update(tr->dev, lr, tr->o.beta1, tr->o.beta2, tr->o.eps,
                                  tr->o.weight_decay, scale, tr->step + 1);
        if (s != LLMT_OK) return s;
        tr->stale_params = tr->stale_moments = 1;
    }
    tr->step++;
    if (tr->dp) {
        if (llmt__dp_update(tr->dp, &tr->o, lr, scale, tr->step) != LLMT_OK)
            return llmt__err_forward(&tr->err, llmt__dp_err(tr->dp),
                                     "trainer");
    }
    for (int i = 0; !tr->dp && !tr->dev && i < mdl->nparams; i++) {
        const llmt__param *p = &mdl->params[i];
        tr->ops->adamw(mdl->data + p->offset, tr->grads + p->offset,
                       tr->m + p->offset, tr->v + p->offset, p->numel, lr,
                       tr->o.beta1, tr->o.beta2, tr->o.eps,
                       p->decay ? tr->o.weight_decay : 0.0f, scale, tr->step);
    }
    if (met) {
        met->step = tr->step;
        met->loss = loss;
        met->grad_norm = norm;
        met->lr = lr;
        met->seconds = now_s() - t0;
        met->tokens = tokens;
    }
    return LLMT_OK;
}

llmt_status llmt_trainer_evaluate(llmt_trainer *tr, const llmt_batch *b,
                                  float *loss)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&tr->err, "trainer: evaluate", loss);
    llmt_status s = check_batch(tr, "trainer: evaluate", b, 0);
    if (s != LLMT_OK) return s;
    double sum = 0.0;
    int64_t count = 0;
    size_t per = (size_t)tr->T;
    for (int r = 0; r < b->sequences; r += tr->B) {
        int Bc = b->sequences - r < tr->B ? b->sequences - r : tr->B;
        const int32_t *in = b->inputs + per * r, *tg = b->targets + per * r;
        if (tr->dev) {
            double part = 0.0;
            s = llmt__devtrain_loss(tr->dev, in, tg, Bc, tr->T, &part);
            if (s != LLMT_OK) return s;
            sum += part;
            for (size_t i = 0; i < per * (size_t)Bc; i++) count += tg[i] >= 0;
            continue;
        }
        sum += loss_fwd(tr, in, tg, Bc, tr->T, &count);
    }
    if (count == 0)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: evaluate: no target >= 0 in the batch");
    *loss = (float)(sum / (double)count);
    return LLMT_OK;
}

/* ---- access */

/* A device trainer: bring the host copies that are behind the device up
 * to date (each flag selects one kind). */
static llmt_status host_sync(llmt_trainer *tr, int params, int moments, int grads)
{
    if (!tr->dev) return LLMT_OK;
    params = params && tr->stale_params;
    moments = moments && tr->stale_moments;
    grads = grads && tr->stale_grads;
    if (!params && !moments && !grads) return LLMT_OK;
    llmt_status s = llmt__devtrain_download(tr->dev, params, moments, grads);
    if (s != LLMT_OK) return s;
    if (params) tr->stale_params = 0;
    if (moments) tr->stale_moments = 0;
    if (grads) tr->stale_grads = 0;
    return LLMT_OK;
}

/* For lib/train/state.c: parameters and moments on the host, current. */
llmt_status llmt__trainer_host_sync(llmt_trainer *tr)
{
    return host_sync(tr, 1, 1, 0);
}

llmt_status llmt_trainer_grad(llmt_trainer *tr, int32_t index, llmt_tensor *v)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&tr->err, "trainer: grad", v);
    if (index < 0 || index >= tr->model->nparams)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: parameter index %d out of range",
                             (int)index);
    llmt_status s = host_sync(tr, 0, 0, 1);
    if (s != LLMT_OK) return s;
    v->struct_size = sizeof *v;
    return llmt__model_view(tr->model, index, tr->grads, v);
}

llmt_status llmt_trainer_optim_state(llmt_trainer *tr, int32_t index,
                                     int32_t which, llmt_tensor *v)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&tr->err, "trainer: optim_state", v);
    if (index < 0 || index >= tr->model->nparams || which < 0 || which > 1)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: optimizer state (%d, %d) out of range",
                             (int)index, (int)which);
    if (!tr->m)
        return llmt__err_set(&tr->err, LLMT_ERR_STATE,
                             "trainer: the optimizer state is sharded over "
                             "the data-parallel ranks (ZeRO-%d): this rank "
                             "holds only its share, read it with "
                             "llmt_trainer_optim_shard",
                             llmt__dp_zero_stage(tr->dp));
    llmt_status s = host_sync(tr, 0, 1, 0);
    if (s != LLMT_OK) return s;
    v->struct_size = sizeof *v;
    return llmt__model_view(tr->model, index, which ? tr->v : tr->m, v);
}

/* This rank's part of parameter `index` (the whole parameter without a
 * communicator): the flat range [*rel, *rel + *n) of its elements in
 * row-major order and where that range lives in the parameters, m and v.
 * Returns 1 when m and v hold only this rank's shares (ZeRO >= 1). For
 * lib/train/state.c. */
int llmt__trainer_share(llmt_trainer *tr, int32_t index, int64_t *rel,
                        int64_t *n, float *ptr[3])
{
    const llmt__param *p = &tr->model->params[index];
    size_t lo = p->offset, cnt = p->numel;
    float *m = tr->m ? tr->m + lo : NULL, *v = tr->v ? tr->v + lo : NULL;
    if (tr->dp) llmt__dp_param_share(tr->dp, index, &lo, &cnt, &m, &v);
    if (tr->m && tr->dp) { /* ZeRO 0: the full buffers hold every share */
        m = tr->m + lo;
        v = tr->v + lo;
    }
    *rel = (int64_t)(lo - p->offset);
    *n = (int64_t)cnt;
    ptr[0] = tr->model->data + lo;
    ptr[1] = m;
    ptr[2] = v;
    return tr->m == NULL;
}

llmt_status llmt_trainer_optim_shard(llmt_trainer *tr, int32_t index,
                                     int32_t which, llmt_tensor *v,
                                     int64_t *flat_offset)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&tr->err, "trainer: optim_shard", v);
    LLMT__NONNULL(&tr->err, "trainer: optim_shard", flat_offset);
    if (index < 0 || index >= tr->model->nparams || which < 0 || which > 1)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: optimizer state (%d, %d) out of range",
                             (int)index, (int)which);
    const llmt__param *p = &tr->model->params[index];
    int64_t rel = 0, n = (int64_t)p->numel;
    float *ptr[3] = {NULL, NULL, NULL};
    llmt_status s = host_sync(tr, 0, 1, 0);
    if (s != LLMT_OK) return s;
    if (tr->m) { /* not sharded: every rank holds all of it */
        ptr[1] = tr->m + p->offset;
        ptr[2] = tr->v + p->offset;
    } else {
        llmt__trainer_share(tr, index, &rel, &n, ptr);
    }
    *flat_offset = rel;
    return llmt_tensor_init(v, sizeof *v, LLMT_DTYPE_FP32, 1, &n,
                            ptr[1 + which], LLMT_DEVICE_CPU, 0);
}

llmt_status llmt_trainer_memory_usage(const llmt_trainer *tr,
                                      llmt_trainer_memory *out)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&tr->err, "trainer: memory_usage", out);
    if (out->struct_size < sizeof(size_t))
        return llmt__err_set((llmt_err *)&tr->err, LLMT_ERR_STRUCT_SIZE,
                             "trainer: memory_usage: out: struct_size is %zu; set it to "
                             "sizeof the struct", out->struct_size);
    size_t P = tr->model->total * sizeof(float);
    llmt_trainer_memory r;
    memset(&r, 0, sizeof r);
    r.struct_size = out->struct_size;
    r.params = (int64_t)P;
    r.grads = (int64_t)P;
    r.optimizer = tr->m ? (int64_t)(2 * P) : 0;
    if (tr->dp) r.optimizer += (int64_t)llmt__dp_state_bytes(tr->dp);
    r.activations = (int64_t)(tr->arena_floats * sizeof(float) +
                              (size_t)tr->T * sizeof(int32_t));
    r.comm_buffers = tr->dp ? (int64_t)llmt__dp_buffer_bytes(tr->dp) : 0;
    r.total = r.params + r.grads + r.optimizer + r.activations +
              r.comm_buffers;
    r.params_resident = r.params;
    if (tr->dp) r.params_resident -= (int64_t)llmt__dp_released_bytes(tr->dp);
    if (tr->dev) {
        llmt__devtrain_mem dm;
        llmt__devtrain_memory(tr->dev, &dm);
        r.activations = (int64_t)((size_t)tr->T * sizeof(int32_t)); /* host: gen */
        r.total = r.params + r.grads + r.optimizer + r.activations;
        r.device_activations = (int64_t)dm.activations;
        r.device_in_use = (int64_t)dm.in_use;
        r.device_peak = (int64_t)dm.peak;
    }
    size_t n = out->struct_size < sizeof r ? out->struct_size : sizeof r;
    memcpy(out, &r, n);
    return LLMT_OK;
}

llmt_status llmt_trainer_get_step(const llmt_trainer *tr, int64_t *step)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&tr->err, "trainer: get_step", step);
    *step = tr->step;
    return LLMT_OK;
}

llmt_status llmt_trainer_set_step(llmt_trainer *tr, int64_t step)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    if (step < 0)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: step %lld < 0", (long long)step);
    tr->step = step;
    return LLMT_OK;
}

/* ---- sampling */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

llmt_status llmt_trainer_generate(llmt_trainer *tr, const int32_t *prompt,
                                  int32_t n_prompt, int32_t n_new,
                                  float temperature, int32_t top_k,
                                  uint64_t seed, int32_t *out)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&tr->err, "trainer: generate", prompt);
    if (n_new > 0)
        LLMT__NONNULL(&tr->err, "trainer: generate", out);
    llmt_model *mdl = tr->model;
    const llmt_model_config *c = &mdl->cfg;
    int V = c->vocab_size, Vp = c->padded_vocab_size;
    if (n_prompt < 1 || n_new < 0)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: generate needs n_prompt >= 1 and "
                             "n_new >= 0");
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "trainer: prompt token %d outside [0, %d)",
                                 (int)prompt[i], V);
    float *sorted = malloc(sizeof(float) * (size_t)V);
    double *pr = malloc(sizeof(double) * (size_t)V);
    float *devlg = tr->dev ? malloc(sizeof(float) * (size_t)Vp) : NULL;
    if (!sorted || !pr || (tr->dev && !devlg)) {
        free(sorted);
        free(pr);
        free(devlg);
        return llmt__err_set(&tr->err, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    }
    uint64_t rs = seed;
    for (int g = 0; g < n_new; g++) {
        /* the window: the last T tokens of prompt + generated so far */
        int total = n_prompt + g;
        int len = total < tr->T ? total : tr->T;
        for (int i = 0; i < len; i++) {
            int at = total - len + i;
            tr->gen_ctx[i] = at < n_prompt ? prompt[at] : out[at - n_prompt];
        }
        float *lg = tr->logits;
        if (tr->dev) {
            llmt_status s = llmt__devtrain_last_logits(tr->dev, tr->gen_ctx, len, devlg);
            if (s != LLMT_OK) {
                free(sorted);
                free(pr);
                free(devlg);
                return s;
            }
            lg = devlg;
        } else {
            trunk_fwd(tr, tr->gen_ctx, 1, len);
            tr->ops->matmul_fwd(lg, tr->lnf + (size_t)(len - 1) * c->width,
                                PW(mdl->lm_head), NULL, 1, c->width, Vp);
        }
        int next = 0;
        if (temperature <= 0.0f) {
            for (int i = 1; i < V; i++)
                if (lg[i] > lg[next]) next = i;
        } else {
            float cut = -INFINITY;
            if (top_k > 0 && top_k < V) {
                memcpy(sorted, lg, sizeof(float) * (size_t)V);
                qsort(sorted, (size_t)V, sizeof(float), cmp_desc);
                cut = sorted[top_k - 1];
            }
            float mx = -INFINITY;
            for (int i = 0; i < V; i++)
                if (lg[i] > mx) mx = lg[i];
            double sum = 0.0;
            for (int i = 0; i < V; i++) {
                pr[i] = lg[i] >= cut ? exp((double)(lg[i] - mx) / temperature) : 0.0;
                sum += pr[i];
            }
            double u = ((rng_next(&rs) >> 11) * (1.0 / 9007199254740992.0)) * sum;
            double acc = 0.0;
            next = V - 1;
            for (int i = 0; i < V; i++) {
                acc += pr[i];
                if (pr[i] > 0.0 && u < acc) {
                    next = i;
                    break;
                }
            }
        }
        out[g] = next;
    }
    free(sorted);
    free(pr);
    free(devlg);
    return LLMT_OK;
}

llmt__devtrain *llmt__trainer_devtrain(llmt_trainer *tr) { return tr->dev; }

/* For lib/train/state.c: the fp8 recipe's state (NULL without fp8). */
float *llmt__trainer_fp8_state(llmt_trainer *tr, int64_t shape[2])
{
    return tr->dev ? llmt__devtrain_fp8_export(tr->dev, shape) : NULL;
}
llmt_status llmt__trainer_fp8_restore(llmt_trainer *tr, const float *in)
{
    return tr->dev ? llmt__devtrain_fp8_import(tr->dev, in) : LLMT_OK;
}

/* For lib/train/state.c, which otherwise uses only the public API. */
llmt_err *llmt__trainer_err(llmt_trainer *tr) { return &tr->err; }
llmt_model *llmt__trainer_model(llmt_trainer *tr) { return tr->model; }
int llmt__trainer_has_comm(const llmt_trainer *tr) { return tr->dp != NULL; }
const llmt_trainer_opts *llmt__trainer_opts(const llmt_trainer *tr) { return &tr->o; }
llmt_context *llmt__trainer_ctx(llmt_trainer *tr) { return tr->ctx; }
llmt_status llmt__trainer_params_written(llmt_trainer *tr)
{
    if (tr->dp) llmt__dp_params_written(tr->dp);
    if (!tr->dev) return LLMT_OK;
    /* the host copies are the truth now (llmt__trainer_host_sync ran
     * before they were written) */
    llmt_status s = llmt__devtrain_upload(tr->dev, tr->model->data, tr->m, tr->v);
    if (s != LLMT_OK) return s;
    tr->stale_params = tr->stale_moments = tr->stale_grads = 0;
    return LLMT_OK;
}

/* ---- data parallelism (lib/train/dp.c) */

/* Leave data parallelism. Collective over the old communicator: whole
 * parameters (ZeRO-3) and, when the optimizer state is sharded, every
 * rank's shares all-gathered back into full-size m and v, so the trainer
 * can go on alone or under another stage or dp size. On a failure the
 * communicator stays attached. */
static llmt_status detach(llmt_trainer *tr)
{
    llmt_status s = llmt_trainer_sync_params(tr);
    if (s != LLMT_OK) return s;
    if (!tr->m) {
        size_t P = tr->model->total * sizeof(float);
        float *m = llmt__alloc(tr->ctx, P, 64), *v = llmt__alloc(tr->ctx, P, 64);
        if (!m || !v) {
            if (m) llmt__free(tr->ctx, m, P);
            if (v) llmt__free(tr->ctx, v, P);
            return llmt__err_set(&tr->err, LLMT_ERR_OUT_OF_MEMORY,
                                 "trainer: detaching needs %zu bytes for the "
                                 "full optimizer state", 2 * P);
        }
        s = llmt__dp_unshard_state(tr->dp, m, v);
        if (s != LLMT_OK) {
            llmt__free(tr->ctx, m, P);
            llmt__free(tr->ctx, v, P);
            return llmt__err_forward(&tr->err, llmt__dp_err(tr->dp), "trainer");
        }
        tr->m = m;
        tr->v = v;
    }
    llmt__dp_destroy(tr->dp);
    tr->dp = NULL;
    return LLMT_OK;
}

llmt_status llmt_trainer_set_comm(llmt_trainer *tr, llmt_comm *comm,
                                  const llmt_dp_opts *opts)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    if (tr->dp) {
        llmt_status s = detach(tr);
        if (s != LLMT_OK) return s;
    }
    if (!comm) return LLMT_OK;
    if (tr->dev)
        return llmt__err_set(&tr->err, LLMT_ERR_UNSUPPORTED,
                             "trainer: set_comm: data parallelism of a device "
                             "(%s) trainer is not implemented yet; use CPU "
                             "trainers (doc/gpu.md, \"Not done\")",
                             llmt__devtrain_backend(tr->dev));
    llmt_status s = llmt__dp_create(&tr->err, comm, opts, tr->model, tr->ops,
                                    tr->grads, tr->m, tr->v, &tr->dp);
    if (s != LLMT_OK || llmt__dp_state_bytes(tr->dp) == 0) return s;
    /* ZeRO >= 1: the dp layer took this rank's shares of m and v */
    size_t P = tr->model->total * sizeof(float);
    llmt__free(tr->ctx, tr->m, P);
    llmt__free(tr->ctx, tr->v, P);
    tr->m = tr->v = NULL;
    return LLMT_OK;
}

llmt_status llmt_trainer_sync_params(llmt_trainer *tr)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    if (tr->dev) return host_sync(tr, 1, 1, 0);
    if (!tr->dp) return LLMT_OK;
    if (llmt__dp_sync(tr->dp) != LLMT_OK)
        return llmt__err_forward(&tr->err, llmt__dp_err(tr->dp), "trainer");
    return LLMT_OK;
}
