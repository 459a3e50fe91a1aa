/* GPU benchmarks of the CUDA backend (internal API): GEMM TFLOP/s on the
 * GPT-2 124M shapes (B*T = 16384 tokens), memory-bound kernels' GB/s
 * against the measured device-to-device copy bandwidth, flash attention
 * forward/backward time (GPT-2 124M and Llama 1B head shapes, hd 64 and
 * 128, T 1024-8192; the default kernels (the mma.sync ones for hd 64
 * and 128), and the wmma register kernels they replaced as NAME_wmma). Timed with CUDA events on the compute stream: warm-up, then
 * the median of `repeats` calls. bench/gpu/torch_peer.py measures PyTorch
 * on the same cases; bench/gpu/compare.py makes ratios.
 *
 *   bench_gpu [--json FILE] [--repeats N] [--quick] [--only WORD]
 *
 * --only WORD runs only the groups whose name holds WORD (copy, gemm,
 * layernorm, gelu, adamw, rope, sumsq, xent, attention).
 *
 * Exits 77 without a GPU. Inputs are random (never zeros). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cuda/kernels/attention_mma.h"
#include "../../test/gpu/gpu_util.h"

static llmt__cuda_ctx *X;
static const char *ONLY;
/* the group runs under --only */
/* --only takes one word or several separated by spaces or commas: a
 * group runs when one of them is a word of its name */
static int want(const char *group)
{
    if (!ONLY)
        return 1;
    char w[64];
    for (const char *p = ONLY; *p;) {
        size_t n = strcspn(p, " ,");
        if (n && n < sizeof w) {
            memcpy(w, p, n);
            w[n] = 0;
            if (strstr(group, w))
                return 1;
        }
        p += n + (p[n] != 0);
    }
    return 0;
}
static int REPEATS = 30, WARMUP = 5;
static FILE *J;
static int first = 1;

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    if (llmt__cuda_alloc(X, &p, bytes)) {
        fprintf(stderr, "alloc %zu: %s\n", bytes, llmt__cuda_ctx_last_error(X));
        exit(1);
    }
    return p;
}
/* Device buffer of random bf16 (or fp32) values in [-a, a), filled on the
 * host in chunks. */
static void *drand_bf(size_t n, float a)
{
    uint16_t *d = dalloc(n * 2);
    size_t chunk = (size_t)1 << 22;
    uint16_t *h = malloc(chunk * 2);
    for (size_t off = 0; off < n; off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        for (size_t i = 0; i < m; i++) h[i] = h_f2bf(rng_f(a));
        llmt__cuda_h2d(X, d + off, h, m * 2);
    }
    free(h);
    return d;
}
static float *drand_f(size_t n, float a, int positive)
{
    float *d = dalloc(n * 4);
    size_t chunk = (size_t)1 << 22;
    float *h = malloc(chunk * 4);
    for (size_t off = 0; off < n; off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        for (size_t i = 0; i < m; i++) h[i] = positive ? fabsf(rng_f(a)) : rng_f(a);
        llmt__cuda_h2d(X, d + off, h, m * 4);
    }
    free(h);
    return d;
}

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static int g_fail;
/* Median ms per call of QUEUED calls launched back to back between two
 * events, over REPEATS batches: the GPU never waits for the host's next
 * launch, as in a training step, where the stream is always ahead of the
 * device. The per-call timing (an event, one call, an event) also counts
 * the launch latency, which weighs on kernels of 20-70 us. */
#define QUEUED 20
typedef struct {
    void (*fn)(void *);
    void *arg;
} batch_arg;
static void time_queued_batch(void *p)
{
    batch_arg *b = p;
    for (int i = 0; i < QUEUED; i++)
        b->fn(b->arg);
}
/* Runs fn, returns median ms; prints and records one JSON entry. queued:
 * also the back-to-back median ("queued_ms"). */
static double timeit_(const char *name, void (*fn)(void *), void *arg, double flops,
                      double bytes, int queued)
{
    float *ms = malloc(REPEATS * sizeof *ms), *mq = malloc(REPEATS * sizeof *mq);
    batch_arg ba = {fn, arg};
    if (llmt__cuda_time(X, fn, arg, WARMUP, REPEATS, ms) != LLMT_OK || g_fail ||
        (queued &&
         (llmt__cuda_time(X, time_queued_batch, &ba, 1, REPEATS, mq) != LLMT_OK || g_fail))) {
        fprintf(stderr, "%s: %s\n", name, llmt__cuda_ctx_last_error(X));
        exit(1);
    }
    qsort(ms, REPEATS, sizeof *ms, cmpf);
    double med = ms[REPEATS / 2], mn = ms[0], mx = ms[REPEATS - 1], qmed = 0;
    printf("%-34s median %9.4f ms (min %.4f max %.4f)", name, med, mn, mx);
    if (flops > 0) printf("  %7.1f TFLOP/s", flops / (med * 1e-3) / 1e12);
    if (bytes > 0) printf("  %7.1f GB/s", bytes / (med * 1e-3) / 1e9);
    if (queued) {
        qsort(mq, REPEATS, sizeof *mq, cmpf);
        qmed = mq[REPEATS / 2] / QUEUED;
        printf("; queued %.4f ms", qmed);
        if (bytes > 0)
            printf("  %7.1f GB/s", bytes / (qmed * 1e-3) / 1e9);
    }
    printf("\n");
    if (J) {
        fprintf(J,
                "%s\n  {\"name\": \"%s\", \"median_ms\": %.6f, \"min_ms\": %.6f, "
                "\"max_ms\": %.6f, \"repeats\": %d, \"flops\": %.6g, \"bytes\": %.6g",
                first ? "" : ",", name, med, mn, mx, REPEATS, flops, bytes);
        if (queued)
            fprintf(J, ", \"queued_ms\": %.6f, \"queued_calls\": %d", qmed, QUEUED);
        fprintf(J, "}");
        first = 0;
    }
    free(ms);
    free(mq);
    return med;
}
static double timeit(const char *name, void (*fn)(void *), void *arg, double flops,
                     double bytes)
{
    return timeit_(name, fn, arg, flops, bytes, 0);
}

#define RUN(call)                                                              \
    do {                                                                       \
        if ((call) != LLMT_OK) g_fail = 1;                                     \
    } while (0)

/* ---- cases -------------------------------------------------------------- */

typedef struct { void *dst, *src; size_t bytes; } copy_arg;
static void f_copy(void *p)
{
    copy_arg *a = p;
    RUN(llmt__cuda_d2d(X, a->dst, a->src, a->bytes));
}

typedef struct { llmt__gemm_args g; } gemm_arg;
static void f_gemm(void *p) { RUN(llmt__cuda_gemm(X, &((gemm_arg *)p)->g)); }

/* fp8 operands from bf16 x[R, C] (the trainer's cast_transpose_fp8) */
typedef struct {
    uint8_t *y, *yt;
    float *amax, *scale;
    const void *x;
    int R, C;
} cast_arg;
static void f_cast(void *p)
{
    cast_arg *a = p;
    RUN(llmt__cuda_cast_transpose_fp8(X, a->y, a->yt, a->amax, a->x, a->scale, a->R, a->C, 1));
}
/* the same tensor's amax and codes by the separate kernels (the fp8
 * forward before 2026-11-27) */
static void f_amax_quant(void *p)
{
    cast_arg *a = p;
    size_t n = (size_t)a->R * a->C;
    RUN(llmt__cuda_amax(X, a->amax, a->x, n));
    RUN(llmt__cuda_quantize_fp8(X, a->y, a->x, a->scale, n, 1));
}

typedef struct {
    void *out, *inp, *w, *b, *dout, *dinp; float *mean, *rstd, *dw, *db; int N, C;
} ln_arg;
static void f_ln_fwd(void *p)
{
    ln_arg *a = p;
    RUN(llmt__cuda_layernorm_fwd(X, a->out, a->mean, a->rstd, a->inp, a->w, a->b, a->N, a->C, 1e-5f));
}
static void f_ln_bwd(void *p)
{
    ln_arg *a = p;
    RUN(llmt__cuda_layernorm_bwd(X, a->dinp, a->dw, a->db, a->dout, a->inp, a->w, a->mean,
                                 a->rstd, a->N, a->C));
}
/* NSETS buffer sets of one norm case taken in turn (rms: RMSNorm), so
 * that back-to-back calls do not find the previous call's operands in L2
 * (an H100's 50 MB holds one 16384 x 768 set) */
#define NSETS 4
typedef struct {
    ln_arg s[NSETS];
    int i, rms;
} norm_rot;
static void f_norm_fwd(void *p)
{
    norm_rot *r = p;
    ln_arg *a = &r->s[r->i++ % NSETS];
    if (r->rms)
        RUN(llmt__cuda_rmsnorm_fwd(X, a->out, a->rstd, a->inp, a->w, a->N, a->C, 1e-5f));
    else
        f_ln_fwd(a);
}
static void f_norm_bwd(void *p)
{
    norm_rot *r = p;
    ln_arg *a = &r->s[r->i++ % NSETS];
    if (r->rms)
        RUN(llmt__cuda_rmsnorm_bwd(X, a->dinp, a->dw, a->dout, a->inp, a->w, a->rstd, a->N,
                                   a->C));
    else
        f_ln_bwd(a);
}
typedef struct { void *out, *inp, *dout; size_t n; } ew_arg;
static void f_gelu_fwd(void *p) { ew_arg *a = p; RUN(llmt__cuda_gelu_fwd(X, a->out, a->inp, a->n)); }
static void f_gelu_bwd(void *p) { ew_arg *a = p; RUN(llmt__cuda_gelu_bwd(X, a->out, a->inp, a->dout, a->n)); }
static void f_resid(void *p) { ew_arg *a = p; RUN(llmt__cuda_residual_fwd(X, a->out, a->inp, a->dout, a->n)); }
typedef struct { float *master, *grad, *m, *v; void *pb; size_t n; } adam_arg;
static void f_adamw(void *p)
{
    adam_arg *a = p;
    RUN(llmt__cuda_adamw(X, a->master, a->pb, a->grad, a->m, a->v, a->n, 1e-4f, 0.9f, 0.95f,
                         1e-8f, 0.0f, 1.0f, 3));
}
/* RoPE over the q and k heads of a fused qkv row (Llama's layout) */
typedef struct {
    void *qkv;
    int B, T, nh, hd;
    size_t stride;
} rope_arg;
static void f_rope(void *p)
{
    rope_arg *a = p;
    RUN(llmt__cuda_rope(X, a->qkv, a->B, a->T, a->nh, a->hd, a->stride, 10000.0f, 0));
}
typedef struct {
    float *out, *x;
    size_t n;
} sumsq_arg;
static void f_sumsq(void *p)
{
    sumsq_arg *a = p;
    const float *xs[1] = {a->x};
    size_t ns[1] = {a->n};
    RUN(llmt__cuda_sumsq(X, a->out, xs, ns, 1));
}
typedef struct { float *losses; void *logits; int32_t *tg; int N, V, Vp; } xent_arg;
static void f_xent(void *p)
{
    xent_arg *a = p;
    RUN(llmt__cuda_softmax_xent(X, a->losses, a->logits, a->tg, a->N, a->V, a->Vp, 0.0f));
}
typedef struct {
    void *qkv, *out, *dout, *dqkv;
    float *lse;
    size_t qs;
    int B, T, nh, nkv, hd;
} attn_arg;
static void f_attn_fwd(void *p)
{
    attn_arg *a = p;
    uint16_t *q = a->qkv;
    size_t o = (size_t)a->nh * a->hd, ok = (size_t)a->nkv * a->hd;
    RUN(llmt__cuda_attention_fwd(X, a->out, a->lse, q, q + o, q + o + ok, a->qs, a->B, a->T,
                                 a->nh, a->nkv, a->hd));
}
static void f_attn_bwd(void *p)
{
    attn_arg *a = p;
    uint16_t *q = a->qkv, *d = a->dqkv;
    size_t o = (size_t)a->nh * a->hd, ok = (size_t)a->nkv * a->hd;
    RUN(llmt__cuda_attention_bwd(X, d, d + o, d + o + ok, a->dout, a->out, a->lse, q, q + o,
                                 q + o + ok, a->qs, a->B, a->T, a->nh, a->nkv, a->hd));
}
/* n bf16 values of a device buffer, on the host (exits on failure) */
static uint16_t *to_host(const void *d, size_t n)
{
    uint16_t *h = malloc(n * 2);
    if (!h || llmt__cuda_d2h(X, h, d, n * 2) != LLMT_OK || llmt__cuda_sync(X) != LLMT_OK) {
        fprintf(stderr, "attention: copy to the host: %s\n", llmt__cuda_ctx_last_error(X));
        exit(1);
    }
    return h;
}
static int g_cfg_bad; /* tile configurations whose output differed */
/* The mma.sync kernels' other tile configurations of one shape
 * (attention_mma.cu's lists; entry 0, the default, timed above as NAME):
 * the forward's as NAME_fI, dQ's as attention_bwd_..._qI, dK/dV's as
 * attention_bwd_..._kvI, each beside the default with the others at 0.
 * Each is checked against the default's output: the backward's bits
 * equal (the same sums in the same order), the forward's within 2^-7 of
 * the largest |out| (bf16 rounding of differently rescaled sums). */
static void bench_attention_cfgs(attn_arg *a, const char *shape, double fl)
{
    const int hd = a->hd;
    const size_t no = (size_t)a->B * a->T * a->nh * hd;
    const size_t nd = (size_t)a->B * a->T * a->qs;
    f_attn_fwd(a); /* the default's outputs, the references */
    uint16_t *ro = to_host(a->out, no);
    f_attn_bwd(a);
    uint16_t *rd = to_host(a->dqkv, nd);
    char name[128], what[96];
    for (int kind = 0; kind < 3; kind++)
        for (int i = 1; i < llmt__cuda_attn_mma_cfgs(hd, kind); i++) {
            if (llmt__cuda_attn_mma_set_cfg(X, hd, kind, i) != LLMT_OK) {
                fprintf(stderr, "%s\n", llmt__cuda_ctx_last_error(X));
                exit(1);
            }
            llmt__cuda_attn_mma_cfg_name(hd, kind, i, what, sizeof what);
            snprintf(name, sizeof name, "attention_%s_%s_%s%d", kind ? "bwd" : "fwd", shape,
                     (const char *[]){"f", "q", "kv"}[kind], i);
            printf("(%s: %s)\n", name, what);
            timeit(name, kind ? f_attn_bwd : f_attn_fwd, a, kind ? 2.5 * fl : fl, 0);
            if (kind == 0) {
                uint16_t *o = to_host(a->out, no);
                double mx = 0, md = 0;
                for (size_t e = 0; e < no; e++) {
                    double r = h_bf2f(ro[e]), d = fabs(h_bf2f(o[e]) - r);
                    mx = fabs(r) > mx ? fabs(r) : mx;
                    md = d > md ? d : md;
                }
                if (!(md <= mx / 128)) {
                    fprintf(stderr, "%s: |out - default| %.3g > 2^-7 of %.3g\n", name, md, mx);
                    g_cfg_bad++;
                }
                free(o);
                llmt__cuda_attn_mma_set_cfg(X, hd, 0, 0);
                f_attn_fwd(a); /* the default's out again, for the backward's D */
            } else {
                uint16_t *d = to_host(a->dqkv, nd);
                size_t diff = 0;
                for (size_t e = 0; e < nd; e++)
                    diff += d[e] != rd[e];
                if (diff) {
                    fprintf(stderr,
                            "%s: %zu of %zu gradient values differ from the default's\n", name,
                            diff, nd);
                    g_cfg_bad++;
                }
                free(d);
                llmt__cuda_attn_mma_set_cfg(X, hd, kind, 0);
            }
        }
    free(ro);
    free(rd);
}

/* The dQ-atomics backward's other tile configurations (kind 3) on ctx X
 * (attn_scalar 5) as attention_bwd_..._mmaqI, each beside its default:
 * dK and dV must equal the default's bit for bit (the same sums in the
 * same order), dQ within 2^-7 of its largest |value| (fp32 atomic adds
 * in another order, then bf16). */
static void bench_attention_mmaq_cfgs(attn_arg *a, const char *shape, double fl)
{
    const int hd = a->hd;
    const size_t nd = (size_t)a->B * a->T * a->qs, qw = (size_t)a->nh * hd;
    uint16_t *rd = to_host(a->dqkv, nd); /* the default's, timed last */
    char name[128], what[96];
    for (int i = 1; i < llmt__cuda_attn_mma_cfgs(hd, 3); i++) {
        if (llmt__cuda_attn_mma_set_cfg(X, hd, 3, i) != LLMT_OK) {
            fprintf(stderr, "%s\n", llmt__cuda_ctx_last_error(X));
            exit(1);
        }
        llmt__cuda_attn_mma_cfg_name(hd, 3, i, what, sizeof what);
        snprintf(name, sizeof name, "attention_bwd_%s_mmaq%d", shape, i);
        printf("(%s: %s)\n", name, what);
        timeit(name, f_attn_bwd, a, 2.5 * fl, 0);
        uint16_t *d = to_host(a->dqkv, nd);
        size_t diff = 0;
        double mx = 0, md = 0;
        for (size_t e = 0; e < nd; e++) {
            if (e % a->qs >= qw) { /* dK, dV */
                diff += d[e] != rd[e];
                continue;
            }
            double r = h_bf2f(rd[e]), x = fabs(h_bf2f(d[e]) - r);
            mx = fabs(r) > mx ? fabs(r) : mx;
            md = x > md ? x : md;
        }
        if (diff || !(md <= mx / 128)) {
            fprintf(stderr,
                    "%s: %zu dK/dV values differ from the default's; |dQ - default| "
                    "%.3g (bound 2^-7 of %.3g)\n",
                    name, diff, md, mx);
            g_cfg_bad++;
        }
        free(d);
        llmt__cuda_attn_mma_set_cfg(X, hd, 3, 0);
    }
    free(rd);
}

/* One causal attention shape: the default kernels (ctx X; they must be
 * the mma.sync ones on sm_80+) as NAME, the wmma register kernels (ctx
 * xw, attn_scalar 4) as NAME_wmma, and the backward with dQ by atomics
 * (ctx xq, attn_scalar 5; not deterministic) as attention_bwd_..._mmaq.
 * NAME is attention_{fwd,bwd}_bB_tT_hNH[_kvNKV]_dHD, torch_peer.py's
 * names. */
static void bench_attention(llmt__cuda_ctx *xw, llmt__cuda_ctx *xq, int B, int T, int nh,
                            int nkv, int hd)
{
    size_t qs = (size_t)(nh + 2 * nkv) * hd, n = (size_t)B * T * qs;
    size_t no = (size_t)B * T * nh * hd;
    attn_arg a = {drand_bf(n, 1.0f),
                  dalloc(no * 2),
                  drand_bf(no, 1.0f),
                  dalloc(n * 2),
                  dalloc((size_t)B * nh * T * 4),
                  qs,
                  B,
                  T,
                  nh,
                  nkv,
                  hd};
    char shape[64], name[96];
    if (nkv == nh)
        snprintf(shape, sizeof shape, "b%d_t%d_h%d_d%d", B, T, nh, hd);
    else
        snprintf(shape, sizeof shape, "b%d_t%d_h%d_kv%d_d%d", B, T, nh, nkv, hd);
    /* causal: half of 4*B*nh*T*T*hd; the backward 2.5x the forward */
    double fl = 2.0 * B * nh * (double)T * T * hd;
    llmt__cuda_ctx *x0 = X;
    for (int v = 0; v < (xw ? 2 : 1); v++) {
        X = v ? xw : x0;
        uint64_t calls = llmt__cuda_attn_mma_calls(X);
        snprintf(name, sizeof name, "attention_fwd_%s%s", shape, v ? "_wmma" : "");
        timeit(name, f_attn_fwd, &a, fl, 0);
        snprintf(name, sizeof name, "attention_bwd_%s%s", shape, v ? "_wmma" : "");
        timeit(name, f_attn_bwd, &a, 2.5 * fl, 0);
        /* the kernels named ran, not a fallback */
        int mma = llmt__cuda_attn_mma_calls(X) != calls;
        if (mma != (!v && llmt__cuda_ctx_sm(X) >= 80)) {
            fprintf(stderr, "%s: the mma.sync kernels %s\n", name, mma ? "ran" : "did not run");
            exit(1);
        }
    }
    if (xq) { /* a.out and a.lse: the forward timed above */
        X = xq;
        uint64_t calls = llmt__cuda_attn_mmaq_calls(X);
        snprintf(name, sizeof name, "attention_bwd_%s_mmaq", shape);
        timeit(name, f_attn_bwd, &a, 2.5 * fl, 0);
        if (llmt__cuda_attn_mmaq_calls(X) == calls) {
            fprintf(stderr, "%s: the dQ-atomics kernels did not run\n", name);
            exit(1);
        }
        if (llmt__cuda_ctx_sm(X) >= 80)
            bench_attention_mmaq_cfgs(&a, shape, fl);
    }
    X = x0;
    if (llmt__cuda_ctx_sm(X) >= 80 && llmt__cuda_attn_mma_cfgs(hd, 0) > 0)
        bench_attention_cfgs(&a, shape, fl);
    llmt__cuda_free(X, a.qkv);
    llmt__cuda_free(X, a.out);
    llmt__cuda_free(X, a.dout);
    llmt__cuda_free(X, a.dqkv);
    llmt__cuda_free(X, a.lse);
}

int main(int argc, char **argv)
{
    const char *json = NULL;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) REPEATS = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            ONLY = argv[++i];
        else {
            fprintf(stderr,
                    "usage: bench_gpu [--json FILE] [--repeats N] [--quick] [--only WORD]\n");
            return 2;
        }
    }
    if (quick) { REPEATS = 5; WARMUP = 2; }
    int32_t ndev = 0;
    char err[256] = "";
    if (llmt__cuda_device_count(&ndev, err, sizeof err) != LLMT_OK || ndev == 0) {
        printf("SKIP: no CUDA device (%s)\n", err);
        return 77;
    }
    llmt__cuda_ctx_opts o = {0, 0, 0, 0, NULL, 0};
    if (llmt__cuda_ctx_create(&o, &X) != LLMT_OK) return 1;
    if (json) {
        J = fopen(json, "w");
        if (!J) { perror(json); return 1; }
        fprintf(J, "{\"suite\": \"gpu\", \"sm\": %d, \"results\": [", llmt__cuda_ctx_sm(X));
    }
    int BT = quick ? 4096 : 16384;

    /* device copy bandwidth: 1 GiB (bytes counted read + write) */
    if (want("copy")) {
        size_t bytes = quick ? ((size_t)256 << 20) : ((size_t)1 << 30);
        copy_arg a = {dalloc(bytes), drand_bf(bytes / 2, 1.0f), bytes};
        timeit("copy_d2d", f_copy, &a, 0, 2.0 * bytes);
        llmt__cuda_free(X, a.dst);
        llmt__cuda_free(X, a.src);
    }
    /* GEMMs: Linear forward out[BT,OC] = inp[BT,C] @ W[OC,C]^T, and the two
     * backward GEMMs dinp[BT,C] = dout @ W, dW[OC,C] = dout^T @ inp (fp32
     * accumulate into dW as a trainer does). */
    if (want("gemm")) {
        int shapes[5][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50304}};
        for (int s = 0; s < 5; s++) {
            int C = shapes[s][0], OC = shapes[s][1];
            void *inp = drand_bf((size_t)BT * C, 1.0f), *w = drand_bf((size_t)OC * C, 0.05f);
            void *out = dalloc((size_t)BT * OC * 2), *dinp = dalloc((size_t)BT * C * 2);
            float *dw = drand_f((size_t)OC * C, 0.01f, 0);
            double fl = 2.0 * BT * C * OC;
            char name[64];
            gemm_arg g;
            llmt__gemm_args_init(&g.g);
            g.g.trans_b = 1; g.g.M = BT; g.g.N = OC; g.g.K = C;
            g.g.A = inp; g.g.B = w; g.g.C = out;
            snprintf(name, sizeof name, "gemm_fwd_%dx%d", C, OC);
            timeit(name, f_gemm, &g, fl, 0);
            llmt__gemm_args_init(&g.g);
            g.g.M = BT; g.g.N = C; g.g.K = OC;
            g.g.A = out; g.g.B = w; g.g.C = dinp;
            snprintf(name, sizeof name, "gemm_bwd_dinp_%dx%d", C, OC);
            timeit(name, f_gemm, &g, fl, 0);
            llmt__gemm_args_init(&g.g);
            g.g.trans_a = 1; g.g.M = OC; g.g.N = C; g.g.K = BT;
            g.g.A = out; g.g.B = inp; g.g.C = dw; g.g.c_type = LLMT_GEMM_F32; g.g.beta = 1.0f;
            snprintf(name, sizeof name, "gemm_bwd_dw_%dx%d", C, OC);
            timeit(name, f_gemm, &g, fl, 0);
            if (s == 2) { /* fc1 with the fused bias + GELU epilogue */
                void *bias = drand_bf(OC, 0.1f), *aux = dalloc((size_t)BT * OC * 2);
                llmt__gemm_args_init(&g.g);
                g.g.trans_b = 1; g.g.M = BT; g.g.N = OC; g.g.K = C;
                g.g.A = inp; g.g.B = w; g.g.C = out;
                g.g.epi = LLMT_GEMM_EPI_GELU_BIAS; g.g.bias = bias; g.g.aux = aux;
                timeit("gemm_fwd_768x3072_bias_gelu", f_gemm, &g, fl, 0);
                llmt__cuda_free(X, bias);
                llmt__cuda_free(X, aux);
            }
            if (s == 0 && llmt__cuda_ctx_sm(X) >= 89) { /* fp8 E4M3 forward */
                float one = 1.0f;
                float *sc = dalloc(4);
                llmt__cuda_h2d(X, sc, &one, 4);
                uint8_t *a8 = dalloc((size_t)BT * C), *w8 = dalloc((size_t)OC * C);
                llmt__cuda_quantize_fp8(X, a8, inp, sc, (size_t)BT * C, 0);
                llmt__cuda_quantize_fp8(X, w8, w, sc, (size_t)OC * C, 0);
                llmt__gemm_args_init(&g.g);
                g.g.trans_b = 1; g.g.M = BT; g.g.N = OC; g.g.K = C;
                g.g.A = a8; g.g.B = w8; g.g.C = out; g.g.ab_type = LLMT_GEMM_E4M3;
                g.g.a_scale = sc; g.g.b_scale = sc;
                timeit("gemm_fwd_768x2304_fp8_e4m3", f_gemm, &g, fl, 0);
                /* the fp8 backward (since 2026-11-27): the output gradient
                 * E5M2, quantised and transposed with its amax in one
                 * pass; then the data and weight gradient GEMMs in the
                 * one layout fp8 takes (K-contiguous operands) */
                uint8_t *g8 = dalloc((size_t)BT * OC), *g8t = dalloc((size_t)BT * OC),
                        *a8t = dalloc((size_t)BT * C), *w8t = dalloc((size_t)OC * C);
                float *am = dalloc(4);
                cast_arg ca = {g8, g8t, am, sc, out, BT, OC};
                double cb = (double)BT * OC * (2 + 1 + 1); /* read bf16, write both */
                snprintf(name, sizeof name, "fp8_cast_transpose_amax_%dx%d", BT, OC);
                timeit(name, f_cast, &ca, 0, cb);
                ca.yt = NULL;
                snprintf(name, sizeof name, "fp8_cast_amax_%dx%d", BT, OC);
                timeit(name, f_cast, &ca, 0, (double)BT * OC * 3);
                snprintf(name, sizeof name, "fp8_amax_then_quantize_%dx%d", BT, OC);
                timeit(name, f_amax_quant, &ca, 0, (double)BT * OC * 3);
                llmt__cuda_cast_transpose_fp8(X, NULL, a8t, NULL, inp, sc, BT, C, 0);
                llmt__cuda_cast_transpose_fp8(X, NULL, w8t, NULL, w, sc, OC, C, 0);
                g.g = llmt__gemm_fp8(BT, C, OC, g8, 1, sc, w8t, sc, dinp, 0, 0.0f);
                timeit("gemm_bwd_dinp_768x2304_fp8_e5m2", f_gemm, &g, fl, 0);
                g.g = llmt__gemm_fp8(OC, C, BT, g8t, 1, sc, a8t, sc, dw, 1, 1.0f);
                timeit("gemm_bwd_dw_768x2304_fp8_e5m2", f_gemm, &g, fl, 0);
                llmt__cuda_free(X, g8);
                llmt__cuda_free(X, g8t);
                llmt__cuda_free(X, a8t);
                llmt__cuda_free(X, w8t);
                llmt__cuda_free(X, am);
                llmt__cuda_free(X, sc);
                llmt__cuda_free(X, a8);
                llmt__cuda_free(X, w8);
            }
            llmt__cuda_free(X, inp); llmt__cuda_free(X, w); llmt__cuda_free(X, out);
            llmt__cuda_free(X, dinp); llmt__cuda_free(X, dw);
        }
    }
    /* memory-bound kernels. Norms: LayerNorm at GPT-2's width (16384 and
     * 65536 rows), RMSNorm at GPT-2's and Llama 1B's (16384 rows); each
     * also timed queued (back to back over NSETS buffer sets) */
    static const struct {
        int rms, C, N;
        const char *name;
    } norms[] = {{0, 768, 16384, "layernorm_%s_768"},
                 {0, 768, 65536, "layernorm_%s_768_n65536"},
                 {1, 768, 16384, "rmsnorm_%s_768"},
                 {1, 2048, 16384, "rmsnorm_%s_2048"}};
    for (size_t c = 0; c < sizeof norms / sizeof norms[0]; c++) {
        if (!want(norms[c].rms ? "rmsnorm" : "layernorm"))
            continue;
        int C = norms[c].C, BT = quick ? norms[c].N / 8 : norms[c].N;
        size_t n = (size_t)BT * C;
        norm_rot *r = calloc(1, sizeof *r);
        r->rms = norms[c].rms;
        for (int k = 0; k < NSETS; k++)
            r->s[k] = (ln_arg){dalloc(n * 2),
                               drand_bf(n, 2.0f),
                               drand_bf(C, 1.0f),
                               drand_bf(C, 1.0f),
                               drand_bf(n, 1.0f),
                               drand_bf(n, 1.0f),
                               dalloc(BT * 4),
                               dalloc(BT * 4),
                               drand_f(C, 1.0f, 0),
                               drand_f(C, 1.0f, 0),
                               BT,
                               C};
        char name[64];
        /* bytes: read inp, write out (bf16) + stats (LayerNorm: mean too) */
        snprintf(name, sizeof name, norms[c].name, "fwd");
        timeit_(name, f_norm_fwd, r, 0, 2.0 * n * 2 + (r->rms ? 4.0 : 8.0) * BT, 1);
        /* read dout, inp, dinp; write dinp (bf16) */
        snprintf(name, sizeof name, norms[c].name, "bwd");
        timeit_(name, f_norm_bwd, r, 0, 4.0 * n * 2 + (r->rms ? 4.0 : 8.0) * BT, 1);
        /* the fast paths' variants (llmt__cuda_norm_set_cfg) as NAME_vN:
         * the forward's two rows a warp (up to C 1024); the backward's
         * dinp read again in the second pass (v1; the default loads it
         * early) and its weight-gradient sums in registers (v2, up to C
         * 768); gpu-kernels holds them to the CPU reference */
        for (int kind = 0; kind < 2; kind++)
            for (int v = 1; v < llmt__cuda_norm_cfgs(kind); v++) {
                if ((kind == 0 && C > 1024) || (kind == 1 && v == 2 && C > 768))
                    continue; /* where a variant applies (llmt_cuda.h) */
                if (llmt__cuda_norm_set_cfg(X, kind, v) != LLMT_OK) {
                    fprintf(stderr, "%s\n", llmt__cuda_ctx_last_error(X));
                    return 1;
                }
                char vn[80];
                snprintf(name, sizeof name, norms[c].name, kind ? "bwd" : "fwd");
                snprintf(vn, sizeof vn, "%s_v%d", name, v);
                timeit_(vn, kind ? f_norm_bwd : f_norm_fwd, r, 0,
                        (kind ? 4.0 : 2.0) * n * 2 + (r->rms ? 4.0 : 8.0) * BT, 1);
                llmt__cuda_norm_set_cfg(X, kind, 0);
            }
        for (int k = 0; k < NSETS; k++) {
            ln_arg *a = &r->s[k];
            void *bufs[] = {a->out,  a->inp,  a->w,    a->b,  a->dout,
                            a->dinp, a->mean, a->rstd, a->dw, a->db};
            for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
                llmt__cuda_free(X, bufs[i]);
        }
        free(r);
    }
    if (want("gelu residual")) {
        size_t n = (size_t)BT * 3072;
        ew_arg a = {drand_bf(n, 1.0f), drand_bf(n, 3.0f), drand_bf(n, 1.0f), n};
        timeit("gelu_fwd_3072", f_gelu_fwd, &a, 0, 2.0 * n * 2);
        timeit("gelu_bwd_3072", f_gelu_bwd, &a, 0, 4.0 * n * 2);
        timeit("residual_3072", f_resid, &a, 0, 3.0 * n * 2);
        llmt__cuda_free(X, a.out); llmt__cuda_free(X, a.inp); llmt__cuda_free(X, a.dout);
    }
    if (want("adamw")) {
        size_t n = 124475904; /* GPT-2 124M parameters (padded vocab) */
        if (quick) n /= 8;
        adam_arg a = {drand_f(n, 1.0f, 0), drand_f(n, 1.0f, 0), drand_f(n, 0.1f, 0),
                      drand_f(n, 0.01f, 1), dalloc(n * 2), n};
        /* read master, grad, m, v; write master, m, v (fp32) and bf16 param */
        timeit("adamw_124M", f_adamw, &a, 0, (4.0 * 4 + 3.0 * 4 + 2.0) * n);
        llmt__cuda_free(X, a.master); llmt__cuda_free(X, a.grad); llmt__cuda_free(X, a.m);
        llmt__cuda_free(X, a.v); llmt__cuda_free(X, a.pb);
    }
    /* RoPE at Llama 1B's q and k (32 + 4 heads of 64 in a 40-head qkv
     * row, 16384 rows); the gradient norm's sum of squares over 1 GiB of
     * fp32 (a quarter of Llama 1B's gradients) */
    if (want("rope")) {
        int T = 2048, B = BT / T > 0 ? BT / T : 1, nh = 36, hd = 64;
        size_t stride = 40 * 64, n = (size_t)B * T * stride;
        rope_arg a = {drand_bf(n, 1.0f), B, T, nh, hd, stride};
        /* read and write the rotated heads (bf16) */
        timeit("rope_36x64_in_40x64", f_rope, &a, 0, 2.0 * 2 * B * T * nh * hd);
        llmt__cuda_free(X, a.qkv);
    }
    if (want("sumsq")) {
        size_t n = quick ? ((size_t)1 << 26) : ((size_t)1 << 28);
        sumsq_arg a = {dalloc(4), drand_f(n, 1.0f, 0), n};
        timeit("sumsq_fp32", f_sumsq, &a, 0, 4.0 * n);
        llmt__cuda_free(X, a.out);
        llmt__cuda_free(X, a.x);
    }
    if (want("softmax_xent")) {
        int N = quick ? 1024 : 8192, V = 50257, Vp = 50304;
        int32_t *tg = malloc(N * 4);
        for (int i = 0; i < N; i++) tg[i] = (int32_t)(rng_u64() % V);
        xent_arg a = {dalloc(N * 4), drand_bf((size_t)N * Vp, 4.0f), dalloc(N * 4), N, V, Vp};
        llmt__cuda_h2d(X, a.tg, tg, N * 4);
        /* loss only (dloss 0): one read of the logits */
        timeit("softmax_xent_fwd_50304", f_xent, &a, 0, (double)N * Vp * 2);
        llmt__cuda_free(X, a.losses); llmt__cuda_free(X, a.logits); llmt__cuda_free(X, a.tg);
        free(tg);
    }
    /* attention, 16384 tokens per call (--quick: 4096, T 1024 only):
     * GPT-2 124M (12 heads of 64), Llama 1B (TinyLlama: 32 heads of 64, 4
     * kv heads), and hd 128 (16 heads, 4 kv heads); the wmma register
     * kernels beside the default ones (what the mma.sync kernels gained)
     * and the backward with dQ atomics (attn_scalar 5) */
    if (want("attention")) {
        llmt__cuda_ctx *xw = NULL, *xq = NULL; /* tensor cores need sm_80 */
        llmt__cuda_ctx_opts ow = {0, 0, 0, 4, NULL, 0}, oq = {0, 0, 0, 5, NULL, 0};
        if (llmt__cuda_ctx_sm(X) >= 80 && (llmt__cuda_ctx_create(&ow, &xw) != LLMT_OK ||
                                           llmt__cuda_ctx_create(&oq, &xq) != LLMT_OK)) {
            fprintf(stderr, "attention: context for the wmma or dQ-atomics kernels failed\n");
            return 1;
        }
        static const int shapes[3][3] = {{12, 12, 64}, {32, 4, 64}, {16, 4, 128}};
        for (int s = 0; s < 3; s++)
            for (int T = 1024; T <= (quick ? 1024 : 8192); T *= 2)
                bench_attention(xw, xq, (quick ? 4096 : 16384) / T, T, shapes[s][0],
                                shapes[s][1], shapes[s][2]);
        llmt__cuda_ctx_destroy(xw);
        llmt__cuda_ctx_destroy(xq);
    }
    if (J) {
        fprintf(J, "\n]}\n");
        fclose(J);
    }
    llmt__cuda_ctx_destroy(X);
    if (g_cfg_bad)
        fprintf(stderr, "%d attention tile configurations differ from the default\n",
                g_cfg_bad);
    return g_cfg_bad ? 1 : 0;
}
