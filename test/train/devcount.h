/* A counting op table for tests: a copy of a backend's llmt__dev_ops
 * whose every op slot counts its calls, then calls the backend's own op on
 * the same context (nothing is wrapped but the table). The engine
 * (lib/train/device.c) is created on it through llmt__trainer_create_dev.
 *
 * "Host waits" are the ops that make the host wait for the device on
 * CUDA (cuda/mem/mem.cu): h2d and d2h (cudaMemcpyAsync then
 * cudaStreamSynchronize), sync (cudaStreamSynchronize of both streams);
 * alloc (cudaMalloc on a miss of the caching allocator) and host_alloc
 * (cudaMallocHost) are counted beside them. Each such call also records
 * its caller's address, so a test can say where it came from
 * (devcount_sites: addr2line-ready module offsets).
 *
 * The op list is lib/obs/devops.c's (every op taking the context first). */
#ifndef LLMT_TEST_DEVCOUNT_H
#define LLMT_TEST_DEVCOUNT_H

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "exec/dev.h"

/* clang-format off */
#define DC_OPS(X)                                                                             \
    X(h2d, COMPUTE, (llmt__dev * d, void *dst, const void *src, size_t n),                     \
      (d, dst, src, n))                                                                    \
    X(d2h, COMPUTE, (llmt__dev * d, void *dst, const void *src, size_t n),                     \
      (d, dst, src, n))                                                                    \
    X(memset0, COMPUTE, (llmt__dev * d, void *dst, size_t n), (d, dst, n))                 \
    X(d2d, COMPUTE, (llmt__dev * d, void *dst, const void *src, size_t n),                     \
      (d, dst, src, n))                                                                    \
    X(fill_nan, COMPUTE, (llmt__dev * d, void *dst, size_t n), (d, dst, n))                \
    X(sync, COMPUTE, (llmt__dev * d), (d))                                                 \
    X(gemm, COMPUTE, (llmt__dev * d, const llmt__gemm_args *g), (d, g))                    \
    X(embedding_fwd, COMPUTE,                                                                  \
      (llmt__dev * d, void *out, const int32_t *tok, const void *wte, const void *wpe, int B,  \
       int T, int C),                                                                          \
      (d, out, tok, wte, wpe, B, T, C))                                                    \
    X(embedding_bwd, COMPUTE,                                                                  \
      (llmt__dev * d, float *dwte, float *dwpe, const void *dout, const int32_t *tok, int B,   \
       int T, int C),                                                                          \
      (d, dwte, dwpe, dout, tok, B, T, C))                                                 \
    X(layernorm_fwd, COMPUTE,                                                                  \
      (llmt__dev * d, void *out, float *mean, float *rstd, const void *inp, const void *w,     \
       const void *b, int N, int C, float eps),                                                \
      (d, out, mean, rstd, inp, w, b, N, C, eps))                                          \
    X(layernorm_bwd, COMPUTE,                                                                  \
      (llmt__dev * d, void *dinp, float *dw, float *db, const void *dout, const void *inp,     \
       const void *w, const float *mean, const float *rstd, int N, int C),                     \
      (d, dinp, dw, db, dout, inp, w, mean, rstd, N, C))                                   \
    X(rmsnorm_fwd, COMPUTE,                                                                    \
      (llmt__dev * d, void *out, float *rstd, const void *inp, const void *w, int N, int C,    \
       float eps),                                                                             \
      (d, out, rstd, inp, w, N, C, eps))                                                   \
    X(rmsnorm_bwd, COMPUTE,                                                                    \
      (llmt__dev * d, void *dinp, float *dw, const void *dout, const void *inp, const void *w, \
       const float *rstd, int N, int C),                                                       \
      (d, dinp, dw, dout, inp, w, rstd, N, C))                                             \
    X(swiglu_fwd, COMPUTE,                                                                     \
      (llmt__dev * d, void *out, const void *gate, const void *up, size_t n),                  \
      (d, out, gate, up, n))                                                               \
    X(swiglu_bwd, COMPUTE,                                                                     \
      (llmt__dev * d, void *dgate, void *dup, void *h, const void *dout, const void *gate,     \
       const void *up, size_t n),                                                              \
      (d, dgate, dup, h, dout, gate, up, n))                                               \
    X(residual_fwd, COMPUTE,                                                                   \
      (llmt__dev * d, void *out, const void *a, const void *b, size_t n),                      \
      (d, out, a, b, n))                                                                   \
    X(bias_bwd, COMPUTE, (llmt__dev * d, float *dbias, const void *dout, int N, int C),        \
      (d, dbias, dout, N, C))                                                              \
    X(rope, COMPUTE,                                                                           \
      (llmt__dev * d, void *x, int B, int T, int nh, int hd, size_t stride, float theta,       \
       int inverse),                                                                           \
      (d, x, B, T, nh, hd, stride, theta, inverse))                                        \
    X(attention_fwd, COMPUTE,                                                                  \
      (llmt__dev * d, void *out, float *lse, const void *q, const void *k, const void *v,      \
       size_t qs, int B, int T, int nh, int nkv, int hd),                                      \
      (d, out, lse, q, k, v, qs, B, T, nh, nkv, hd))                                       \
    X(attention_bwd, COMPUTE,                                                                  \
      (llmt__dev * d, void *dq, void *dk, void *dv, const void *dout, const void *out,         \
       const float *lse, const void *q, const void *k, const void *v, size_t qs, int B, int T, \
       int nh, int nkv, int hd),                                                               \
      (d, dq, dk, dv, dout, out, lse, q, k, v, qs, B, T, nh, nkv, hd))                     \
    X(softmax_xent, COMPUTE,                                                                   \
      (llmt__dev * d, float *losses, void *logits, const int32_t *targets, int N, int V,       \
       int Vp, float dloss),                                                                   \
      (d, losses, logits, targets, N, V, Vp, dloss))                                       \
    X(adamw, OPTIMIZER,                                                                        \
      (llmt__dev * d, float *master, void *param_bf16, const float *grad, float *m, float *v,  \
       size_t n, float lr, float beta1, float beta2, float eps, float wd, float grad_scale,    \
       int64_t t),                                                                             \
      (d, master, param_bf16, grad, m, v, n, lr, beta1, beta2, eps, wd, grad_scale, t))    \
    X(sumsq, OPTIMIZER,                                                                        \
      (llmt__dev * d, float *out, const float *const *xs, const size_t *ns, int count),        \
      (d, out, xs, ns, count))                                                             \
    X(sum, COMPUTE, (llmt__dev * d, float *out, const float *x, size_t n), (d, out, x, n)) \
    X(f32_to_bf16, COMPUTE, (llmt__dev * d, llmt__bf16 * y, const float *x, size_t n),         \
      (d, y, x, n))                                                                        \
    X(amax, COMPUTE, (llmt__dev * d, float *out, const void *x, size_t n), (d, out, x, n)) \
    X(quantize_fp8, COMPUTE,                                                                   \
      (llmt__dev * d, uint8_t * y, const void *x, const float *scale, size_t n, int e5m2),     \
      (d, y, x, scale, n, e5m2))                                                           \
    X(cast_transpose_fp8, COMPUTE,                                                             \
      (llmt__dev * d, uint8_t * y, uint8_t * yt, float *amax, const void *x,                   \
       const float *scale, int R, int C, int e5m2),                                            \
      (d, y, yt, amax, x, scale, R, C, e5m2))                                              \
    X(gelu_bwd_mul, COMPUTE, (llmt__dev * d, void *dx, const void *pre, size_t n),             \
      (d, dx, pre, n))                                                                     \
    X(bias_add, COMPUTE, (llmt__dev * d, void *x, const void *bias, int N, int C),             \
      (d, x, bias, N, C))                                                                  \
    X(gelu_fwd, COMPUTE, (llmt__dev * d, void *out, const void *inp, size_t n),                \
      (d, out, inp, n))                                                                    \
    DC_OPS_VOCAB(X)

/* The vocabulary split of tensor parallelism. */
#define DC_OPS_VOCAB(X)                                                                      \
    X(embedding_part_fwd, COMPUTE,                                                            \
      (llmt__dev * d, void *out, const int32_t *tok, const void *wte, const void *wpe, int B, \
       int T, int C, int lo, int Vl),                                                         \
      (d, out, tok, wte, wpe, B, T, C, lo, Vl))                                           \
    X(embedding_part_bwd, COMPUTE,                                                            \
      (llmt__dev * d, float *dwte, float *dwpe, const void *dout, const int32_t *tok, int B,  \
       int T, int C, int lo, int Vl),                                                         \
      (d, dwte, dwpe, dout, tok, B, T, C, lo, Vl))                                        \
    X(xent_part_max, COMPUTE,                                                                 \
      (llmt__dev * d, float *mx, const void *logits, int N, int Vl, int nv),                  \
      (d, mx, logits, N, Vl, nv))                                                         \
    X(xent_part_sum, COMPUTE,                                                                 \
      (llmt__dev * d, float *st, const void *logits, const float *mx, const int32_t *targets, \
       int N, int Vl, int nv, int lo),                                                        \
      (d, st, logits, mx, targets, N, Vl, nv, lo))                                        \
    X(xent_part_fin, COMPUTE,                                                                 \
      (llmt__dev * d, float *losses, void *logits, const float *mx, const float *st,          \
       const int32_t *targets, int N, int Vl, int nv, int lo, float dloss),                   \
      (d, losses, logits, mx, st, targets, N, Vl, nv, lo, dloss))                         \
    X(moe_gather, COMPUTE,                                                                    \
      (llmt__dev * d, void *out, const void *x, const int32_t *tok, int R, int C),            \
      (d, out, x, tok, R, C))                                                             \
    X(moe_gather_bwd, COMPUTE,                                                                \
      (llmt__dev * d, void *dx, const void *dxe, const int32_t *row, int N, int K, int C),    \
      (d, dx, dxe, row, N, K, C))                                                         \
    X(moe_combine, COMPUTE,                                                                   \
      (llmt__dev * d, void *y, const void *ye, const int32_t *row, const float *gate, int N,  \
       int K, int C),                                                                         \
      (d, y, ye, row, gate, N, K, C))                                                     \
    X(moe_combine_bwd, COMPUTE,                                                               \
      (llmt__dev * d, void *dye, float *dgate, const void *dy, const void *ye,                \
       const int32_t *row, const float *gate, int N, int K, int C),                           \
      (d, dye, dgate, dy, ye, row, gate, N, K, C))                                        \
    X(moe_experts, COMPUTE, (llmt__dev * d, const llmt__moe_xargs *a), (d, a))            \
    DC_OPS_CP(X)

/* Context parallelism's attention pieces. */
#define DC_OPS_CP(X)                                                                         \
    X(attn_cp_rope, COMPUTE,                                                                  \
      (llmt__dev * d, void *x, int B, int T, int nh, int hd, size_t stride, float theta,      \
       int inverse, const int32_t *pos),                                                      \
      (d, x, B, T, nh, hd, stride, theta, inverse, pos))                                  \
    X(attn_cp_fwd, COMPUTE,                                                                   \
      (llmt__dev * d, float *o, float *lse, const void *q, size_t qs, const void *kv,         \
       size_t kvs, int B, int Tq, int Tk, int nh, int nkv, int hd, const int32_t *qpos,       \
       const int32_t *kpos),                                                                  \
      (d, o, lse, q, qs, kv, kvs, B, Tq, Tk, nh, nkv, hd, qpos, kpos))                    \
    X(attn_cp_delta, COMPUTE,                                                                 \
      (llmt__dev * d, float *D, const void *dout, const void *out, int B, int T, int nh,      \
       int hd),                                                                               \
      (d, D, dout, out, B, T, nh, hd))                                                    \
    X(attn_cp_bwd, COMPUTE,                                                                   \
      (llmt__dev * d, float *dq, float *dkv, const float *D, const float *lse,                \
       const void *dout, const void *q, size_t qs, const void *kv, size_t kvs, int B, int Tq, \
       int Tk, int nh, int nkv, int hd, const int32_t *qpos, const int32_t *kpos),            \
      (d, dq, dkv, D, lse, dout, q, qs, kv, kvs, B, Tq, Tk, nh, nkv, hd, qpos, kpos))     \
    X(attn_cp_rows, COMPUTE,                                                                  \
      (llmt__dev * d, void *dst, size_t ds, const void *src, size_t ss, int src_f32,          \
       size_t rows, size_t cols),                                                             \
      (d, dst, ds, src, ss, src_f32, rows, cols))

/* clang-format on */

enum {
#define X(name, kind, params, args) DC_##name,
    DC_OPS(X)
#undef X
        DC_alloc,
    DC_free,
    DC_host_alloc,
    DC_host_free,
    DC_COUNT
};

static const char *const dc_names[DC_COUNT] = {
#define X(name, kind, params, args) #name,
    DC_OPS(X)
#undef X
        "alloc",
    "free", "host_alloc", "host_free"};

#define DC_SITES 256
typedef struct devcount {
    const llmt__dev_ops *in; /* the backend's */
    llmt__dev_ops table;     /* handed to the engine */
    long n[DC_COUNT];
    struct {
        int op;
        void *ret;
        long n;
        size_t bytes;
    } site[DC_SITES];
    int nsite;
} devcount;

static devcount g_dc; /* one counted table per program */

/* An op the host waits on (on CUDA) */
static int dc_waits(int op)
{
    return op == DC_h2d || op == DC_d2h || op == DC_sync || op == DC_alloc ||
           op == DC_host_alloc;
}

static void dc_site(int op, void *ret, size_t bytes)
{
    for (int i = 0; i < g_dc.nsite; i++)
        if (g_dc.site[i].op == op && g_dc.site[i].ret == ret) {
            g_dc.site[i].n++;
            g_dc.site[i].bytes += bytes;
            return;
        }
    if (g_dc.nsite < DC_SITES) {
        g_dc.site[g_dc.nsite].op = op;
        g_dc.site[g_dc.nsite].ret = ret;
        g_dc.site[g_dc.nsite].n = 1;
        g_dc.site[g_dc.nsite++].bytes = bytes;
    }
}

#define DC_NOTE(op, bytes)                                     \
    do {                                                       \
        g_dc.n[op]++;                                          \
        if (dc_waits(op))                                      \
            dc_site(op, __builtin_return_address(0), (bytes)); \
    } while (0)

/* the bytes of a copy, for the site table (0 for the others) */
#define DC_BYTES_h2d n
#define DC_BYTES_d2h n

#define X(name, kind, params, args)                              \
    __attribute__((unused)) static llmt_status dcw_##name params \
    {                                                            \
        g_dc.n[DC_##name]++;                                     \
        return g_dc.in->name args;                               \
    }
DC_OPS(X)
#undef X

/* the copies and sync again, with their sites (defined after the
 * generic ones so that the table takes these) */
static llmt_status dcs_h2d(llmt__dev *d, void *dst, const void *src, size_t n)
{
    DC_NOTE(DC_h2d, n);
    return g_dc.in->h2d(d, dst, src, n);
}
static llmt_status dcs_d2h(llmt__dev *d, void *dst, const void *src, size_t n)
{
    DC_NOTE(DC_d2h, n);
    return g_dc.in->d2h(d, dst, src, n);
}
static llmt_status dcs_sync(llmt__dev *d)
{
    DC_NOTE(DC_sync, 0);
    return g_dc.in->sync(d);
}
static llmt_status dcs_alloc(llmt__dev *d, void **p, size_t bytes)
{
    DC_NOTE(DC_alloc, bytes);
    return g_dc.in->alloc(d, p, bytes);
}
static void dcs_free(llmt__dev *d, void *p)
{
    DC_NOTE(DC_free, 0);
    g_dc.in->free(d, p);
}
static llmt_status dcs_host_alloc(llmt__dev *d, void **p, size_t bytes)
{
    DC_NOTE(DC_host_alloc, bytes);
    return g_dc.in->host_alloc(d, p, bytes);
}
static void dcs_host_free(llmt__dev *d, void *p)
{
    DC_NOTE(DC_host_free, 0);
    g_dc.in->host_free(d, p);
}

/* The counted table over `in` (its descriptive fields and create,
 * destroy, last_error, mem_stats as they are). */
static const llmt__dev_ops *devcount_table(const llmt__dev_ops *in)
{
    memset(&g_dc, 0, sizeof g_dc);
    g_dc.in = in;
    g_dc.table = *in;
#define X(name, kind, params, args) g_dc.table.name = in->name ? dcw_##name : NULL;
    DC_OPS(X)
#undef X
    g_dc.table.h2d = dcs_h2d;
    g_dc.table.d2h = dcs_d2h;
    g_dc.table.sync = dcs_sync;
    g_dc.table.alloc = dcs_alloc;
    g_dc.table.free = dcs_free;
    g_dc.table.host_alloc = dcs_host_alloc;
    g_dc.table.host_free = dcs_host_free;
    return &g_dc.table;
}

static void devcount_reset(void)
{
    memset(g_dc.n, 0, sizeof g_dc.n);
    g_dc.nsite = 0;
}

/* Calls since the last reset of the ops the host waits on. */
static long devcount_waits(void)
{
    long w = 0;
    for (int i = 0; i < DC_COUNT; i++)
        if (dc_waits(i))
            w += g_dc.n[i];
    return w;
}

/* Every op called since the last reset, "name n" per line; then the sites
 * of the waits: op, calls, bytes, module and offset of the return address
 * (`addr2line -f -i -e MODULE OFFSET-1` names the call). */
static void devcount_print(FILE *f, const char *title)
{
    fprintf(f, "== %s\n", title);
    for (int i = 0; i < DC_COUNT; i++)
        if (g_dc.n[i])
            fprintf(f, "  op %-20s %6ld%s\n", dc_names[i], g_dc.n[i],
                    dc_waits(i) ? "  (host waits)" : "");
    for (int i = 0; i < g_dc.nsite; i++) {
        Dl_info di;
        memset(&di, 0, sizeof di);
        dladdr(g_dc.site[i].ret, &di);
        fprintf(f, "  site %-10s x%ld %zu B  %s 0x%lx\n", dc_names[g_dc.site[i].op],
                g_dc.site[i].n, g_dc.site[i].bytes, di.dli_fname ? di.dli_fname : "?",
                (unsigned long)((char *)g_dc.site[i].ret - (char *)di.dli_fbase));
    }
}

#endif
