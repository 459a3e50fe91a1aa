/* The timed op table: a forwarding llmt__dev_ops around the backend's own.
 * Every op is timed on the host and counted as compute or optimizer, and
 * while a trace is on it also becomes an event of the trace. The engine
 * (lib/train/device.c) is created on this table through the trainer's
 * llmt__trainer_create_dev, so it needs no hook of its own.
 *
 * The backend's context is wrapped (ctx below); `create` gets no pointer
 * to its table, so the observer being created is handed to it through a
 * thread-local slot that lives only for the duration of the trainer's
 * creation on the creating thread. An op added to llmt__dev_ops that is
 * not listed here would be called with the wrapped context: creation
 * checks every slot and falls back to the plain table instead. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "obs/obs.h"
#include "obs/obs_internal.h"
#include "train/device.h"

typedef struct ctx {
    llmt__dev *in;
    llmt__obs *o;
} ctx;

static _Thread_local llmt__obs *creating;

double llmt__obs_unix_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)(ts.tv_sec - LLMT__OBS_EPOCH) + 1e-9 * (double)ts.tv_nsec;
}

static void op_done(llmt__obs *o, int op, int kind, double t0)
{
    double t1 = llmt__obs_unix_s();
    o->op_s[kind] += t1 - t0;
    if (o->tracing)
        llmt__obs_trace_op(o, op, t0, t1);
}

/* X(name, kind, (params), (args)): every op taking the context first. */
#define OBS_OPS(X)                                                                             \
    X(h2d, COMPUTE, (llmt__dev * d, void *dst, const void *src, size_t n),                     \
      (c->in, dst, src, n))                                                                    \
    X(d2h, COMPUTE, (llmt__dev * d, void *dst, const void *src, size_t n),                     \
      (c->in, dst, src, n))                                                                    \
    X(memset0, COMPUTE, (llmt__dev * d, void *dst, size_t n), (c->in, dst, n))                 \
    X(d2d, COMPUTE, (llmt__dev * d, void *dst, const void *src, size_t n),                     \
      (c->in, dst, src, n))                                                                    \
    X(fill_nan, COMPUTE, (llmt__dev * d, void *dst, size_t n), (c->in, dst, n))                \
    X(sync, COMPUTE, (llmt__dev * d), (c->in))                                                 \
    X(gemm, COMPUTE, (llmt__dev * d, const llmt__gemm_args *g), (c->in, g))                    \
    X(embedding_fwd, COMPUTE,                                                                  \
      (llmt__dev * d, void *out, const int32_t *tok, const void *wte, const void *wpe, int B,  \
       int T, int C),                                                                          \
      (c->in, out, tok, wte, wpe, B, T, C))                                                    \
    X(embedding_bwd, COMPUTE,                                                                  \
      (llmt__dev * d, float *dwte, float *dwpe, const void *dout, const int32_t *tok, int B,   \
       int T, int C),                                                                          \
      (c->in, dwte, dwpe, dout, tok, B, T, C))                                                 \
    X(layernorm_fwd, COMPUTE,                                                                  \
      (llmt__dev * d, void *out, float *mean, float *rstd, const void *inp, const void *w,     \
       const void *b, int N, int C, float eps),                                                \
      (c->in, out, mean, rstd, inp, w, b, N, C, eps))                                          \
    X(layernorm_bwd, COMPUTE,                                                                  \
      (llmt__dev * d, void *dinp, float *dw, float *db, const void *dout, const void *inp,     \
       const void *w, const float *mean, const float *rstd, int N, int C),                     \
      (c->in, dinp, dw, db, dout, inp, w, mean, rstd, N, C))                                   \
    X(rmsnorm_fwd, COMPUTE,                                                                    \
      (llmt__dev * d, void *out, float *rstd, const void *inp, const void *w, int N, int C,    \
       float eps),                                                                             \
      (c->in, out, rstd, inp, w, N, C, eps))                                                   \
    X(rmsnorm_bwd, COMPUTE,                                                                    \
      (llmt__dev * d, void *dinp, float *dw, const void *dout, const void *inp, const void *w, \
       const float *rstd, int N, int C),                                                       \
      (c->in, dinp, dw, dout, inp, w, rstd, N, C))                                             \
    X(swiglu_fwd, COMPUTE,                                                                     \
      (llmt__dev * d, void *out, const void *gate, const void *up, size_t n),                  \
      (c->in, out, gate, up, n))                                                               \
    X(swiglu_bwd, COMPUTE,                                                                     \
      (llmt__dev * d, void *dgate, void *dup, void *h, const void *dout, const void *gate,     \
       const void *up, size_t n),                                                              \
      (c->in, dgate, dup, h, dout, gate, up, n))                                               \
    X(residual_fwd, COMPUTE,                                                                   \
      (llmt__dev * d, void *out, const void *a, const void *b, size_t n),                      \
      (c->in, out, a, b, n))                                                                   \
    X(bias_bwd, COMPUTE, (llmt__dev * d, float *dbias, const void *dout, int N, int C),        \
      (c->in, dbias, dout, N, C))                                                              \
    X(rope, COMPUTE,                                                                           \
      (llmt__dev * d, void *x, int B, int T, int nh, int hd, size_t stride, float theta,       \
       int inverse),                                                                           \
      (c->in, x, B, T, nh, hd, stride, theta, inverse))                                        \
    X(attention_fwd, COMPUTE,                                                                  \
      (llmt__dev * d, void *out, float *lse, const void *q, const void *k, const void *v,      \
       size_t qs, int B, int T, int nh, int nkv, int hd),                                      \
      (c->in, out, lse, q, k, v, qs, B, T, nh, nkv, hd))                                       \
    X(attention_bwd, COMPUTE,                                                                  \
      (llmt__dev * d, void *dq, void *dk, void *dv, const void *dout, const void *out,         \
       const float *lse, const void *q, const void *k, const void *v, size_t qs, int B, int T, \
       int nh, int nkv, int hd),                                                               \
      (c->in, dq, dk, dv, dout, out, lse, q, k, v, qs, B, T, nh, nkv, hd))                     \
    X(softmax_xent, COMPUTE,                                                                   \
      (llmt__dev * d, float *losses, void *logits, const int32_t *targets, int N, int V,       \
       int Vp, float dloss),                                                                   \
      (c->in, losses, logits, targets, N, V, Vp, dloss))                                       \
    X(adamw, OPTIMIZER,                                                                        \
      (llmt__dev * d, float *master, void *param_bf16, const float *grad, float *m, float *v,  \
       size_t n, float lr, float beta1, float beta2, float eps, float wd, float grad_scale,    \
       int64_t t),                                                                             \
      (c->in, master, param_bf16, grad, m, v, n, lr, beta1, beta2, eps, wd, grad_scale, t))    \
    X(sumsq, OPTIMIZER,                                                                        \
      (llmt__dev * d, float *out, const float *const *xs, const size_t *ns, int count),        \
      (c->in, out, xs, ns, count))                                                             \
    X(sum, COMPUTE, (llmt__dev * d, float *out, const float *x, size_t n), (c->in, out, x, n)) \
    X(f32_to_bf16, COMPUTE, (llmt__dev * d, llmt__bf16 * y, const float *x, size_t n),         \
      (c->in, y, x, n))                                                                        \
    X(amax, COMPUTE, (llmt__dev * d, float *out, const void *x, size_t n), (c->in, out, x, n)) \
    X(quantize_fp8, COMPUTE,                                                                   \
      (llmt__dev * d, uint8_t * y, const void *x, const float *scale, size_t n, int e5m2),     \
      (c->in, y, x, scale, n, e5m2))                                                           \
    X(cast_transpose_fp8, COMPUTE,                                                             \
      (llmt__dev * d, uint8_t * y, uint8_t * yt, float *amax, const void *x,                   \
       const float *scale, int R, int C, int e5m2),                                            \
      (c->in, y, yt, amax, x, scale, R, C, e5m2))                                              \
    X(gelu_bwd_mul, COMPUTE, (llmt__dev * d, void *dx, const void *pre, size_t n),             \
      (c->in, dx, pre, n))                                                                     \
    X(bias_add, COMPUTE, (llmt__dev * d, void *x, const void *bias, int N, int C),             \
      (c->in, x, bias, N, C))                                                                  \
    X(gelu_fwd, COMPUTE, (llmt__dev * d, void *out, const void *inp, size_t n),                \
      (c->in, out, inp, n))                                                                    \
    OBS_OPS_VOCAB(X)

/* The vocabulary split of tensor parallelism. */
#define OBS_OPS_VOCAB(X)                                                                      \
    X(embedding_part_fwd, COMPUTE,                                                            \
      (llmt__dev * d, void *out, const int32_t *tok, const void *wte, const void *wpe, int B, \
       int T, int C, int lo, int Vl),                                                         \
      (c->in, out, tok, wte, wpe, B, T, C, lo, Vl))                                           \
    X(embedding_part_bwd, COMPUTE,                                                            \
      (llmt__dev * d, float *dwte, float *dwpe, const void *dout, const int32_t *tok, int B,  \
       int T, int C, int lo, int Vl),                                                         \
      (c->in, dwte, dwpe, dout, tok, B, T, C, lo, Vl))                                        \
    X(xent_part_max, COMPUTE,                                                                 \
      (llmt__dev * d, float *mx, const void *logits, int N, int Vl, int nv),                  \
      (c->in, mx, logits, N, Vl, nv))                                                         \
    X(xent_part_sum, COMPUTE,                                                                 \
      (llmt__dev * d, float *st, const void *logits, const float *mx, const int32_t *targets, \
       int N, int Vl, int nv, int lo),                                                        \
      (c->in, st, logits, mx, targets, N, Vl, nv, lo))                                        \
    X(xent_part_fin, COMPUTE,                                                                 \
      (llmt__dev * d, float *losses, void *logits, const float *mx, const float *st,          \
       const int32_t *targets, int N, int Vl, int nv, int lo, float dloss),                   \
      (c->in, losses, logits, mx, st, targets, N, Vl, nv, lo, dloss))                         \
    X(moe_gather, COMPUTE,                                                                    \
      (llmt__dev * d, void *out, const void *x, const int32_t *tok, int R, int C),            \
      (c->in, out, x, tok, R, C))                                                             \
    X(moe_gather_bwd, COMPUTE,                                                                \
      (llmt__dev * d, void *dx, const void *dxe, const int32_t *row, int N, int K, int C),    \
      (c->in, dx, dxe, row, N, K, C))                                                         \
    X(moe_combine, COMPUTE,                                                                   \
      (llmt__dev * d, void *y, const void *ye, const int32_t *row, const float *gate, int N,  \
       int K, int C),                                                                         \
      (c->in, y, ye, row, gate, N, K, C))                                                     \
    X(moe_combine_bwd, COMPUTE,                                                               \
      (llmt__dev * d, void *dye, float *dgate, const void *dy, const void *ye,                \
       const int32_t *row, const float *gate, int N, int K, int C),                           \
      (c->in, dye, dgate, dy, ye, row, gate, N, K, C))                                        \
    X(moe_experts, COMPUTE, (llmt__dev * d, const llmt__moe_xargs *a), (c->in, a))            \
    OBS_OPS_CP(X)

/* Context parallelism's attention pieces. */
#define OBS_OPS_CP(X)                                                                         \
    X(attn_cp_rope, COMPUTE,                                                                  \
      (llmt__dev * d, void *x, int B, int T, int nh, int hd, size_t stride, float theta,      \
       int inverse, const int32_t *pos),                                                      \
      (c->in, x, B, T, nh, hd, stride, theta, inverse, pos))                                  \
    X(attn_cp_fwd, COMPUTE,                                                                   \
      (llmt__dev * d, float *o, float *lse, const void *q, size_t qs, const void *kv,         \
       size_t kvs, int B, int Tq, int Tk, int nh, int nkv, int hd, const int32_t *qpos,       \
       const int32_t *kpos),                                                                  \
      (c->in, o, lse, q, qs, kv, kvs, B, Tq, Tk, nh, nkv, hd, qpos, kpos))                    \
    X(attn_cp_delta, COMPUTE,                                                                 \
      (llmt__dev * d, float *D, const void *dout, const void *out, int B, int T, int nh,      \
       int hd),                                                                               \
      (c->in, D, dout, out, B, T, nh, hd))                                                    \
    X(attn_cp_bwd, COMPUTE,                                                                   \
      (llmt__dev * d, float *dq, float *dkv, const float *D, const float *lse,                \
       const void *dout, const void *q, size_t qs, const void *kv, size_t kvs, int B, int Tq, \
       int Tk, int nh, int nkv, int hd, const int32_t *qpos, const int32_t *kpos),            \
      (c->in, dq, dkv, D, lse, dout, q, qs, kv, kvs, B, Tq, Tk, nh, nkv, hd, qpos, kpos))     \
    X(attn_cp_rows, COMPUTE,                                                                  \
      (llmt__dev * d, void *dst, size_t ds, const void *src, size_t ss, int src_f32,          \
       size_t rows, size_t cols),                                                             \
      (c->in, dst, ds, src, ss, src_f32, rows, cols))

enum {
#define X(name, kind, params, args) OP_##name,
    OBS_OPS(X)
#undef X
        OP_COUNT
};

static const char *const op_names[] = {
#define X(name, kind, params, args) #name,
    OBS_OPS(X)
#undef X
};

void llmt__obs_op_timing(llmt__obs *o, int on)
{
    o->untimed = !on;
}

const char *llmt__obs_op_name(int op)
{
    return op >= 0 && op < OP_COUNT ? op_names[op] : "op";
}

#define X(name, kind, params, args)                     \
    static llmt_status w_##name params                  \
    {                                                   \
        ctx *c = (ctx *)d;                              \
        if (c->o->untimed && !c->o->tracing)            \
            return c->o->inner->name args;              \
        double t0 = llmt__obs_unix_s();                 \
        llmt_status s = c->o->inner->name args;         \
        op_done(c->o, OP_##name, LLMT__OBS_##kind, t0); \
        return s;                                       \
    }
OBS_OPS(X)
#undef X

static llmt_status w_create(const llmt__dev_opts *o, llmt__dev **out, char *err, size_t errlen)
{
    llmt__obs *ob = creating;
    *out = NULL;
    if (!ob) {
        snprintf(err, errlen, "obs: the timed op table was created outside its trainer");
        return LLMT_ERR_INTERNAL;
    }
    ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "obs: no memory");
        return LLMT_ERR_OUT_OF_MEMORY;
    }
    llmt_status s = ob->inner->create(o, &c->in, err, errlen);
    if (s != LLMT_OK) {
        free(c);
        return s;
    }
    c->o = ob;
    *out = (llmt__dev *)c;
    return LLMT_OK;
}

static void w_destroy(llmt__dev *d)
{
    ctx *c = (ctx *)d;
    if (!c)
        return;
    c->o->inner->destroy(c->in);
    free(c);
}

static const char *w_last_error(const llmt__dev *d)
{
    const ctx *c = (const ctx *)d;
    return c->o->inner->last_error(c->in);
}

static llmt_status w_alloc(llmt__dev *d, void **p, size_t bytes)
{
    ctx *c = (ctx *)d;
    return c->o->inner->alloc(c->in, p, bytes);
}

static void w_free(llmt__dev *d, void *p)
{
    ctx *c = (ctx *)d;
    c->o->inner->free(c->in, p);
}

static llmt_status w_host_alloc(llmt__dev *d, void **p, size_t bytes)
{
    ctx *c = (ctx *)d;
    return c->o->inner->host_alloc(c->in, p, bytes);
}

static void w_host_free(llmt__dev *d, void *p)
{
    ctx *c = (ctx *)d;
    c->o->inner->host_free(c->in, p);
}

static void w_mem_stats(const llmt__dev *d, size_t *in_use, size_t *peak)
{
    const ctx *c = (const ctx *)d;
    c->o->inner->mem_stats(c->in, in_use, peak);
}

/* Build o->table around `in`; 0 when `in` has an op not listed here. */
static int build(llmt__obs *o, const llmt__dev_ops *in)
{
    if (!o->table && !(o->table = malloc(sizeof *o->table)))
        return 0;
    llmt__dev_ops *t = o->table;
    *t = *in;
    o->inner = in;
#define SET(name) t->name = in->name ? w_##name : NULL
    SET(create);
    SET(destroy);
    SET(last_error);
    SET(alloc);
    SET(free);
    SET(host_alloc);
    SET(host_free);
    SET(mem_stats);
#define X(name, kind, params, args) SET(name);
    OBS_OPS(X)
#undef X
#undef SET
    /* every function slot after the descriptive fields must be ours */
    typedef void (*fn)(void);
    size_t first = offsetof(llmt__dev_ops, create);
    for (size_t at = first; at + sizeof(fn) <= sizeof *t; at += sizeof(fn)) {
        fn a, b;
        memcpy(&a, (const char *)t + at, sizeof a);
        memcpy(&b, (const char *)in + at, sizeof b);
        if (a && a == b)
            return 0;
    }
    return 1;
}

llmt_status llmt__obs_trainer_create(llmt__obs *o, llmt_model *model,
                                     const llmt_trainer_opts *opts, const llmt__dev_ops *table,
                                     llmt_trainer **out, int *timed)
{
    *timed = 0;
    const llmt__dev_ops *in = table                                      ? table
                              : opts && opts->device == LLMT_DEVICE_CUDA ? llmt__dev_cuda()
                                                                         : llmt__dev_cpu();
    /* no CUDA: the trainer says why; fp8 on an fp32 table: the trainer
     * refuses; a table the caller chose is kept, timed or not */
    if (!o || !in || (opts && opts->fp8 && in->store != LLMT_DTYPE_BF16) || !build(o, in))
        return table ? llmt__trainer_create_dev(model, opts, table, out)
                     : llmt_trainer_create(model, opts, out);
    creating = o;
    llmt_status s = llmt__trainer_create_dev(model, opts, o->table, out);
    creating = NULL;
    *timed = s == LLMT_OK;
    return s;
}

void llmt__obs_remake_begin(llmt__obs *o)
{
    creating = o;
}

void llmt__obs_remake_end(void)
{
    creating = NULL;
}

void llmt__obs_op_seconds(const llmt__obs *o, double out[LLMT__OBS_KINDS])
{
    for (int k = 0; k < LLMT__OBS_KINDS; k++)
        out[k] = o ? o->op_s[k] : 0;
}

llmt_status llmt__obs_create(llmt__obs **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? LLMT_OK : LLMT_ERR_OUT_OF_MEMORY;
}

void llmt__obs_destroy(llmt__obs *o)
{
    if (!o)
        return;
    llmt__obs_serve_stop(o);
    llmt__obs_trace_close(o);
    free(o->ev);
    free(o->fr);
    free(o->table);
    free(o);
}
