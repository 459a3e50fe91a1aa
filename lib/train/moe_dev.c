/* A MoE layer through the op table (moe_dev.h says what runs where). */
#include "train/moe_dev.h"

#include "train/moe_dev_impl.h"

#include <stdlib.h>
#include <string.h>

#define OP(call, what) LLMT__MOE_OP(x, call, what)

static void *at(const llmt__moe_dctx *x, const void *p, size_t i)
{
    return llmt__moe_dat(x, p, i);
}

llmt_status llmt__moe_dalloc(llmt__moe_dctx *x, void **p, size_t bytes)
{
    if (x->op->alloc(x->d, p, bytes ? bytes : 16) != LLMT_OK) {
        *p = NULL;
        return llmt__err_set(x->e, LLMT_ERR_OUT_OF_MEMORY,
                             "trainer: moe: device %s: cannot allocate %zu bytes for the MoE "
                             "layers (%d tokens, %d experts of %d): %s",
                             x->op->name, bytes, x->Nmax, x->sh.E, x->sh.F,
                             x->op->last_error(x->d));
    }
    return LLMT_OK;
}

void llmt__moe_dfree(llmt__moe_dctx *x, void *p)
{
    if (p)
        x->op->free(x->d, p);
}

static llmt_status dalloc(llmt__moe_dctx *x, void **p, size_t bytes)
{
    return llmt__moe_dalloc(x, p, bytes);
}

static void dfree(llmt__moe_dctx *x, void *p)
{
    llmt__moe_dfree(x, p);
}

void llmt__moe_dctx_set_err(llmt__moe_dctx *x, llmt_err *e)
{
    x->e = e;
}

const llmt__dev_ops *llmt__moe_dctx_ops(const llmt__moe_dctx *x)
{
    return x->op;
}

llmt__dev *llmt__moe_dctx_dev(const llmt__moe_dctx *x)
{
    return x->d;
}

void llmt__moe_dctx_free(llmt__moe_dctx *x)
{
    if (!x)
        return;
    llmt__moe_dctx_set_fp8(x, NULL); /* first: set_ep would remake its room */
    llmt__moe_dctx_set_ep(x, NULL);
    void *b[] = {x->dye,  x->dxe,  x->dact,  x->dh1,  x->dh3,  x->sdact,
                 x->sdh1, x->sdh3, x->dlogs, x->dlog, x->dgate};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        dfree(x, b[i]);
    free(x);
}

llmt_status llmt__moe_dctx_new(const llmt__dev_ops *op, llmt__dev *d, llmt_err *e,
                               const llmt__moe_shape *sh, int Fs, int Nmax,
                               llmt__moe_dctx **out)
{
    *out = NULL;
    if (!op->moe_gather || !op->moe_gather_bwd || !op->moe_combine || !op->moe_combine_bwd)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: model.moe: device %s has no MoE ops (dev.h moe_*)",
                             op->name);
    llmt__moe_dctx *x = calloc(1, sizeof *x);
    if (!x)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: moe: no memory");
    x->op = op;
    x->d = d;
    x->e = e;
    x->sh = *sh;
    x->Fs = Fs;
    x->Nmax = Nmax;
    x->es = op->store == LLMT_DTYPE_FP32 ? sizeof(float) : sizeof(llmt__bf16);
    x->host = op->host_memory;
    x->ep_size = 1;
    size_t N = (size_t)Nmax, R = N * (size_t)sh->K, C = (size_t)sh->C, F = (size_t)sh->F,
           E = (size_t)sh->E, es = x->es;
    llmt_status s = LLMT_OK;
    void **rc[] = {&x->dye, &x->dxe};
    void **rf[] = {&x->dact, &x->dh1, &x->dh3};
    void **sf[] = {&x->sdact, &x->sdh1, &x->sdh3};
    for (int i = 0; s == LLMT_OK && i < 2; i++)
        s = dalloc(x, rc[i], R * C * es);
    for (int i = 0; s == LLMT_OK && i < 3; i++)
        s = dalloc(x, rf[i], R * F * es);
    for (int i = 0; s == LLMT_OK && Fs > 0 && i < 3; i++)
        s = dalloc(x, sf[i], N * (size_t)Fs * es);
    if (s == LLMT_OK && es != sizeof(float))
        s = dalloc(x, &x->dlogs, N * E * es);
    if (s == LLMT_OK && !x->host)
        s = dalloc(x, (void **)&x->dlog, N * E * sizeof(float));
    if (s == LLMT_OK && !x->host)
        s = dalloc(x, (void **)&x->dgate, R * sizeof(float));
    if (s != LLMT_OK) {
        llmt__moe_dctx_free(x);
        return s;
    }
    *out = x;
    return LLMT_OK;
}

void llmt__moe_dlay_free(llmt__moe_dctx *x, llmt__moe_dlay *p)
{
    if (!p)
        return;
    void *b[] = {p->xe,  p->ye,   p->h1,   p->h3,     p->act,  p->sh1,
                 p->sh3, p->sact, p->dtok, p->logits, p->drow, p->dgate};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        dfree(x, b[i]);
    free(p);
}

llmt_status llmt__moe_dlay_new(llmt__moe_dctx *x, llmt__moe_dlay **out)
{
    *out = NULL;
    llmt__moe_dlay *p = calloc(1, sizeof *p);
    if (!p)
        return llmt__err_set(x->e, LLMT_ERR_OUT_OF_MEMORY, "trainer: moe: no memory");
    size_t N = (size_t)x->Nmax, R = N * (size_t)x->sh.K, C = (size_t)x->sh.C,
           F = (size_t)x->sh.F, E = (size_t)x->sh.E, es = x->es, Fs = (size_t)x->Fs;
    llmt_status s = LLMT_OK;
    void **rc[] = {&p->xe, &p->ye};
    void **rf[] = {&p->h1, &p->h3, &p->act};
    void **sf[] = {&p->sh1, &p->sh3, &p->sact};
    for (int i = 0; s == LLMT_OK && i < 2; i++)
        s = dalloc(x, rc[i], R * C * es);
    for (int i = 0; s == LLMT_OK && i < 3; i++)
        s = dalloc(x, rf[i], R * F * es);
    for (int i = 0; s == LLMT_OK && Fs > 0 && i < 3; i++)
        s = dalloc(x, sf[i], N * Fs * es);
    if (s == LLMT_OK && !x->host)
        s = dalloc(x, (void **)&p->logits, N * E * sizeof(float));
    if (s == LLMT_OK && !x->host)
        s = dalloc(x, (void **)&p->dtok, R * sizeof(int32_t));
    if (s == LLMT_OK && !x->host)
        s = dalloc(x, (void **)&p->drow, R * sizeof(int32_t));
    if (s == LLMT_OK && !x->host)
        s = dalloc(x, (void **)&p->dgate, R * sizeof(float));
    if (s != LLMT_OK) {
        llmt__moe_dlay_free(x, p);
        return s;
    }
    *out = p;
    return LLMT_OK;
}

size_t llmt__moe_dlay_saved_bytes(const llmt__moe_dctx *x)
{
    /* as moe_net.c's count of the host layer (and the planner's,
     * lib/plan/engine.c moe_saved): the routing (probs, lse, gate, idx,
     * row, tok) in 4-byte words, the rows in the storage type */
    size_t N = (size_t)x->Nmax, E = (size_t)x->sh.E, R = N * (size_t)x->sh.K,
           C = (size_t)x->sh.C, F = (size_t)x->sh.F;
    size_t b =
        4 * (N * E + N + 4 * R) + x->es * (2 * R * C + 3 * R * F + 3 * N * (size_t)x->Fs);
    if (x->ep_size > 1) /* the owner's rows (moe_dev_ep.c) */
        b += x->es * llmt__moe_dctx_owner_rows(x, x->ep_size) * (C + 3 * F);
    return b;
}

size_t llmt__moe_dlay_host_bytes(const llmt__moe_dctx *x)
{
    size_t N = (size_t)x->Nmax, R = N * (size_t)x->sh.K;
    return 4 * (N * (size_t)x->sh.E + N + 4 * R);
}

size_t llmt__moe_dctx_scratch_bytes(const llmt__moe_dctx *x)
{
    size_t N = (size_t)x->Nmax, E = (size_t)x->sh.E, R = N * (size_t)x->sh.K,
           C = (size_t)x->sh.C, F = (size_t)x->sh.F;
    size_t b = x->es * (2 * R * C + 3 * R * F + 3 * N * (size_t)x->Fs);
    if (x->dlogs)
        b += x->es * N * E;
    if (!x->host) /* the device copies of dlog and dgate */
        b += 4 * (N * E + R);
    if (x->ep_size > 1) /* moe_dev_ep.c's exchange and owner scratch */
        b += x->es * (E * (size_t)x->block * 2 * C +
                      llmt__moe_dctx_owner_rows(x, x->ep_size) * (3 * C + 3 * F));
    if (x->f8on) /* the fp8 experts' padded rows and codes (f8_room) */
        b += x->f8rows * (C > F ? C : F) * (2 * x->es + 3) + (size_t)x->f8n * F * C;
    return b;
}

/* ---- fp8 experts (moe_dev.h: llmt__moe_fp8) */

static void f8_free(llmt__moe_dctx *x)
{
    void *b[] = {x->f8pad, x->f8out, x->f8qa, x->f8qat, x->f8qbt, x->f8qw};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        dfree(x, b[i]);
    x->f8pad = x->f8out = NULL;
    x->f8qa = x->f8qat = x->f8qbt = x->f8qw = NULL;
    free(x->f8p0);
    x->f8p0 = NULL;
    x->f8rows = 0;
    x->f8n = 0;
}

/* The experts whose weights this rank casts and multiplies: all E, or
 * under expert parallelism its own E/ep (moe_dev_ep.c runs the experts
 * on the owner's rows of its local experts only; set_ep refuses an ep
 * that does not divide E). */
static int f8_experts(const llmt__moe_dctx *x)
{
    return x->sh.E / (x->ep_size > 1 ? x->ep_size : 1);
}

/* Room for `rows` padded rows (grown only) and the codes of f8_experts'
 * weights (made afresh when they changed). */
static llmt_status f8_room(llmt__moe_dctx *x, size_t rows)
{
    if (rows <= x->f8rows && x->f8n == f8_experts(x))
        return LLMT_OK;
    f8_free(x);
    size_t C = (size_t)x->sh.C, F = (size_t)x->sh.F, W = C > F ? C : F,
           E = (size_t)f8_experts(x);
    llmt_status s = LLMT_OK;
    void **bf[] = {&x->f8pad, &x->f8out};
    void **q8[] = {(void **)&x->f8qa, (void **)&x->f8qat, (void **)&x->f8qbt};
    for (int i = 0; s == LLMT_OK && i < 2; i++)
        s = dalloc(x, bf[i], rows * W * x->es);
    for (int i = 0; s == LLMT_OK && i < 3; i++)
        s = dalloc(x, q8[i], rows * W);
    if (s == LLMT_OK)
        s = dalloc(x, (void **)&x->f8qw, E * F * C);
    if (s == LLMT_OK && !(x->f8p0 = calloc(E + 1, sizeof *x->f8p0)))
        s = llmt__err_set(x->e, LLMT_ERR_OUT_OF_MEMORY, "trainer: moe: no memory");
    if (s != LLMT_OK) {
        f8_free(x);
        return s;
    }
    x->f8rows = rows;
    x->f8n = (int)E;
    return LLMT_OK;
}

/* moe_ep.h's one formula (the tables-only exchange of moe_dev_ep.c checks
 * its counts against the same room); none before set_ep made an exchange
 * (block 0) */
size_t llmt__moe_dctx_owner_rows(const llmt__moe_dctx *x, int size)
{
    return x->block > 0 ? llmt__moe_ep_owner_room(&x->sh, x->Nmax, size) : 0;
}

/* The largest padded row count of a call: its packed rows plus up to 15
 * padding rows for each expert of the call. The packed rows: N x K of
 * the E experts; under expert parallelism the owner's rows of its E/ep
 * (the routed rows themselves never reach the fp8 GEMMs there). */
static size_t f8_bound(const llmt__moe_dctx *x)
{
    size_t R = x->ep_size > 1 ? llmt__moe_dctx_owner_rows(x, x->ep_size)
                              : (size_t)x->Nmax * (size_t)x->sh.K;
    return R + 15 * (size_t)f8_experts(x);
}

llmt_status llmt__moe_dctx_set_fp8(llmt__moe_dctx *x, const llmt__moe_fp8 *f)
{
    if (!f) {
        f8_free(x);
        x->f8on = 0;
        return LLMT_OK;
    }
    if (x->sh.C % 16 || x->sh.F % 16)
        return llmt__err_set(x->e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: moe: fp8 experts need width (%d) and moe_ffn (%d) "
                             "multiples of 16",
                             x->sh.C, x->sh.F);
    if (!x->op->cast_transpose_fp8 || x->es == sizeof(float))
        return llmt__err_set(x->e, LLMT_ERR_UNSUPPORTED,
                             "trainer: moe: fp8 experts: device %s has no fp8 ops or stores "
                             "fp32",
                             x->op->name);
    x->f8 = *f;
    llmt_status s = f8_room(x, f8_bound(x));
    x->f8on = s == LLMT_OK;
    return s;
}

void llmt__moe_dctx_set_layer(llmt__moe_dctx *x, int l)
{
    x->layer = l;
}

/* Expert parallelism changed the experts and the largest call
 * (moe_dev_ep.c): made afresh, so that a rank holds its experts' room
 * only, whichever of set_ep and set_fp8 came first. */
llmt_status llmt__moe_dctx_fp8_resize(llmt__moe_dctx *x)
{
    if (!x->f8on)
        return LLMT_OK;
    f8_free(x);
    return f8_room(x, f8_bound(x));
}

static size_t pad16(int64_t n)
{
    return (size_t)((n + 15) / 16 * 16);
}

/* The padded layout of n experts' rows (f8p0, n + 1 entries), the padded
 * total (Rp) and the real one (R). */
static llmt_status f8_layout(llmt__moe_dctx *x, int n, const int64_t *nr, size_t *Rp,
                             int64_t *R)
{
    *Rp = 0;
    *R = 0;
    for (int e = 0; e < n; e++) {
        *Rp += pad16(nr[e]);
        *R += nr[e];
    }
    /* the room first: growing it allocates f8p0 afresh (zeros) */
    llmt_status s = f8_room(x, *Rp);
    if (s != LLMT_OK)
        return s;
    if (n > x->f8n) /* f8qw and f8p0 hold f8_experts' */
        return llmt__err_set(x->e, LLMT_ERR_INTERNAL,
                             "trainer: moe: fp8 experts: a call of %d experts on room for %d "
                             "(experts %d, ep %d)",
                             n, x->f8n, x->sh.E, x->ep_size);
    x->f8p0[0] = 0;
    for (int e = 0; e < n; e++)
        x->f8p0[e + 1] = x->f8p0[e] + (int64_t)pad16(nr[e]);
    return LLMT_OK;
}

/* f8pad [Rp, cols] = src's experts' rows (from r0[e]) at their padded
 * places, zero rows after each. */
static llmt_status f8_pad(llmt__moe_dctx *x, int n, const int64_t *r0, const int64_t *nr,
                          const void *src, int cols, size_t Rp)
{
    size_t c = (size_t)cols;
    OP(x->op->memset0(x->d, x->f8pad, Rp * c * x->es), "fp8 padding");
    for (int e = 0; e < n; e++)
        if (nr[e] > 0)
            OP(x->op->d2d(x->d, at(x, x->f8pad, (size_t)x->f8p0[e] * c),
                          at(x, src, (size_t)r0[e] * c), (size_t)nr[e] * c * x->es),
               "fp8 padding");
    return LLMT_OK;
}

/* dst's experts' rows = f8out's real rows (the padding ones dropped). */
static llmt_status f8_unpad(llmt__moe_dctx *x, int n, const int64_t *r0, const int64_t *nr,
                            void *dst, int cols)
{
    size_t c = (size_t)cols;
    for (int e = 0; e < n; e++)
        if (nr[e] > 0)
            OP(x->op->d2d(x->d, at(x, dst, (size_t)r0[e] * c),
                          at(x, x->f8out, (size_t)x->f8p0[e] * c), (size_t)nr[e] * c * x->es),
               "fp8 padding");
    return LLMT_OK;
}

/* Layer's Linear slot k (0 gate, 1 up, 2 down). */
static int f8_slot(const llmt__moe_dctx *x, int k)
{
    return x->layer * x->f8.nlin + x->f8.slot0 + k;
}

/* The running pass's amax of tensor t. */
static float *f8_amax(const llmt__moe_dctx *x, int t)
{
    return x->f8.amax + (size_t)*x->f8.amax_row * (size_t)x->f8.tensors + (size_t)t;
}

/* cast_transpose_fp8 of X [R, C] with tensor t's scale (e5: E5M2). */
static llmt_status f8_cast(llmt__moe_dctx *x, uint8_t *y, uint8_t *yt, float *amax,
                           const void *X, int t, size_t R, int C, int e5)
{
    OP(x->op->cast_transpose_fp8(x->d, y, yt, amax, X, x->f8.scale + t, (int)R, C, e5),
       "fp8 quantise");
    return LLMT_OK;
}

/* f8pad's codes with tensor t's scale: y [Rp, cols] as is with the
 * tensor's amax recorded (y NULL: neither), and each expert's block
 * transposed into yt at f8p0[e] x cols ([cols, rows of e]; NULL: none). */
static llmt_status f8_codes(llmt__moe_dctx *x, int n, uint8_t *y, uint8_t *yt, int t, int cols,
                            size_t Rp, int e5)
{
    llmt_status s;
    if (y && (s = f8_cast(x, y, NULL, f8_amax(x, t), x->f8pad, t, Rp, cols, e5)) != LLMT_OK)
        return s;
    for (int e = 0; yt && e < n; e++) {
        size_t p = (size_t)x->f8p0[e], rows = (size_t)x->f8p0[e + 1] - p;
        if (rows && (s = f8_cast(x, NULL, yt + p * cols, NULL, at(x, x->f8pad, p * cols), t,
                                 rows, cols, e5)) != LLMT_OK)
            return s;
    }
    return LLMT_OK;
}

/* An fp8 GEMM out[M,N] (+)= dequant(a b^T): a [M,K] codes of tensor ta
 * (E5M2 when a5), b [N,K] of tensor tb. */
static llmt_status f8_mm(llmt__moe_dctx *x, int M, int N, int K, const uint8_t *a, int ta,
                         int a5, const uint8_t *b, int tb, void *out, int cf32, float beta)
{
    size_t st = (size_t)x->f8.inv_stride;
    llmt__gemm_args g = llmt__gemm_fp8(M, N, K, a, a5, x->f8.inv + (size_t)ta * st, b,
                                       x->f8.inv + (size_t)tb * st, out, cf32, beta);
    OP(x->op->gemm(x->d, &g), "expert fp8 gemm");
    return LLMT_OK;
}

/* One projection's forward over the experts: f8out's rows [rows of e
 * padded, N] = the input codes f8qa (tensor ti, K columns) times expert
 * e's block of weight W [n x N, K] (tensor tw, amax recorded). */
static llmt_status f8_proj_fwd(llmt__moe_dctx *x, int n, const void *W, int N, int K, int ti,
                               int tw)
{
    llmt_status s;
    if ((s = f8_cast(x, x->f8qw, NULL, f8_amax(x, tw), W, tw, (size_t)n * N, K, 0)) != LLMT_OK)
        return s;
    for (int e = 0; e < n; e++) {
        size_t p = (size_t)x->f8p0[e], rows = (size_t)x->f8p0[e + 1] - p;
        if (!rows)
            continue;
        if ((s = f8_mm(x, (int)rows, N, K, x->f8qa + p * K, ti, 0, x->f8qw + (size_t)e * N * K,
                       tw, at(x, x->f8out, p * N), 0, 0.0f)) != LLMT_OK)
            return s;
        (*x->f8.gemms)++;
    }
    return LLMT_OK;
}

static llmt_status experts_fwd_fp8(llmt__moe_dctx *x, const llmt__moe_dw *w, int n,
                                   const int64_t *r0, const int64_t *nr, const void *xe,
                                   void *h1, void *h3, void *act, void *ye)
{
    int C = x->sh.C, F = x->sh.F, sg = f8_slot(x, 0), su = sg + 1, sd = sg + 2;
    size_t Rp = 0;
    int64_t R = 0; /* the real rows */
    llmt_status s = f8_layout(x, n, nr, &Rp, &R);
    if (s != LLMT_OK)
        return s;
    if (R == 0) { /* no rows here: the inputs' amaxes 0, the weights' measured */
        const void *ws[] = {w->w1, w->w3, w->w2};
        int ts[] = {2 * sg + 1, 2 * su + 1, 2 * sd + 1};
        OP(x->op->memset0(x->d, f8_amax(x, 2 * sg), sizeof(float)), "fp8 amax");
        OP(x->op->memset0(x->d, f8_amax(x, 2 * sd), sizeof(float)), "fp8 amax");
        for (int i = 0; i < 3; i++)
            if ((s = f8_cast(x, x->f8qw, NULL, f8_amax(x, ts[i]), ws[i], ts[i],
                             (size_t)n * (i < 2 ? F : C), i < 2 ? C : F, 0)) != LLMT_OK)
                return s;
        return LLMT_OK;
    }
    /* gate and up on the dispatched rows' codes (one tensor: the gate's) */
    if ((s = f8_pad(x, n, r0, nr, xe, C, Rp)) != LLMT_OK ||
        (s = f8_codes(x, n, x->f8qa, NULL, 2 * sg, C, Rp, 0)) != LLMT_OK ||
        (s = f8_proj_fwd(x, n, w->w1, F, C, 2 * sg, 2 * sg + 1)) != LLMT_OK ||
        (s = f8_unpad(x, n, r0, nr, h1, F)) != LLMT_OK ||
        (s = f8_proj_fwd(x, n, w->w3, F, C, 2 * sg, 2 * su + 1)) != LLMT_OK ||
        (s = f8_unpad(x, n, r0, nr, h3, F)) != LLMT_OK)
        return s;
    OP(x->op->swiglu_fwd(x->d, act, h1, h3, (size_t)R * F), "expert swiglu");
    if ((s = f8_pad(x, n, r0, nr, act, F, Rp)) != LLMT_OK ||
        (s = f8_codes(x, n, x->f8qa, NULL, 2 * sd, F, Rp, 0)) != LLMT_OK ||
        (s = f8_proj_fwd(x, n, w->w2, C, F, 2 * sd, 2 * sd + 1)) != LLMT_OK)
        return s;
    return f8_unpad(x, n, r0, nr, ye, C);
}

/* One projection's backward over the experts (weight W [n x OC, IC],
 * slot's tensors tx, tw, tg): the output gradient's codes are in f8qa
 * (as is) and f8qat (transposed per expert), the input's transposed in
 * f8qbt; g (fp32) += dout^T x per expert, f8out's rows = dout W (beta:
 * added to what is there). */
static llmt_status f8_proj_bwd(llmt__moe_dctx *x, int n, const void *W, float *gw, int OC,
                               int IC, int tx, int tw, int tg, float beta)
{
    int g5 = x->f8.g5;
    llmt_status s;
    for (int e = 0; e < n; e++) {
        size_t p = (size_t)x->f8p0[e], rows = (size_t)x->f8p0[e + 1] - p,
               wo = (size_t)e * OC * IC;
        if (!rows)
            continue;
        /* the weight gradient: K = the expert's padded rows */
        if ((s = f8_mm(x, OC, IC, (int)rows, x->f8qat + p * OC, tg, g5, x->f8qbt + p * IC, tx,
                       gw + wo, 1, 1.0f)) != LLMT_OK)
            return s;
        /* the data gradient: the expert's weight block transposed */
        if ((s = f8_cast(x, NULL, x->f8qw, NULL, at(x, W, wo), tw, (size_t)OC, IC, 0)) !=
                LLMT_OK ||
            (s = f8_mm(x, (int)rows, IC, OC, x->f8qa + p * OC, tg, g5, x->f8qw, tw,
                       at(x, x->f8out, p * IC), 0, beta)) != LLMT_OK)
            return s;
        *x->f8.bwd_gemms += 2;
    }
    return LLMT_OK;
}

/* The output gradient dout [rows, cols] of tensor tg padded and coded
 * (f8qa, f8qat; its amax recorded). */
static llmt_status f8_dout(llmt__moe_dctx *x, int n, const int64_t *r0, const int64_t *nr,
                           const void *dout, int cols, int tg, size_t Rp)
{
    llmt_status s = f8_pad(x, n, r0, nr, dout, cols, Rp);
    return s == LLMT_OK ? f8_codes(x, n, x->f8qa, x->f8qat, tg, cols, Rp, x->f8.g5) : s;
}

/* An input X [rows, cols] of tensor tx padded, its per-expert transposes
 * coded into f8qbt with the forward's scale. */
static llmt_status f8_xin(llmt__moe_dctx *x, int n, const int64_t *r0, const int64_t *nr,
                          const void *X, int cols, int tx, size_t Rp)
{
    llmt_status s = f8_pad(x, n, r0, nr, X, cols, Rp);
    return s == LLMT_OK ? f8_codes(x, n, NULL, x->f8qbt, tx, cols, Rp, 0) : s;
}

static llmt_status experts_bwd_fp8(llmt__moe_dctx *x, const llmt__moe_dw *w,
                                   const llmt__moe_dw *g, int n, const int64_t *r0,
                                   const int64_t *nr, const void *xe, const void *h1,
                                   const void *h3, const void *act, const void *dye, void *dact,
                                   void *dh1, void *dh3, void *dxe)
{
    int C = x->sh.C, F = x->sh.F, sg = f8_slot(x, 0), su = sg + 1, sd = sg + 2, g0 = x->f8.g0;
    size_t Rp = 0;
    int64_t R = 0; /* the real rows */
    llmt_status s = f8_layout(x, n, nr, &Rp, &R);
    if (s != LLMT_OK)
        return s;
    if (R == 0) {
        int ts[] = {g0 + sg, g0 + su, g0 + sd};
        for (int i = 0; i < 3; i++)
            OP(x->op->memset0(x->d, f8_amax(x, ts[i]), sizeof(float)), "fp8 amax");
        return LLMT_OK;
    }
    /* down: dye's codes, act's transposed; dact from f8out */
    if ((s = f8_dout(x, n, r0, nr, dye, C, g0 + sd, Rp)) != LLMT_OK ||
        (s = f8_xin(x, n, r0, nr, act, F, 2 * sd, Rp)) != LLMT_OK ||
        (s = f8_proj_bwd(x, n, w->w2, (float *)g->w2, C, F, 2 * sd, 2 * sd + 1, g0 + sd,
                         0.0f)) != LLMT_OK ||
        (s = f8_unpad(x, n, r0, nr, dact, F)) != LLMT_OK)
        return s;
    OP(x->op->swiglu_bwd(x->d, dh1, dh3, NULL, dact, h1, h3, (size_t)R * F),
       "expert swiglu backward");
    /* gate, then up (dxe summed in f8out): both on xe's codes (the gate's
     * input tensor), transposed once */
    if ((s = f8_xin(x, n, r0, nr, xe, C, 2 * sg, Rp)) != LLMT_OK ||
        (s = f8_dout(x, n, r0, nr, dh1, F, g0 + sg, Rp)) != LLMT_OK ||
        (s = f8_proj_bwd(x, n, w->w1, (float *)g->w1, F, C, 2 * sg, 2 * sg + 1, g0 + sg,
                         0.0f)) != LLMT_OK ||
        (s = f8_dout(x, n, r0, nr, dh3, F, g0 + su, Rp)) != LLMT_OK ||
        (s = f8_proj_bwd(x, n, w->w3, (float *)g->w3, F, C, 2 * sg, 2 * su + 1, g0 + su,
                         1.0f)) != LLMT_OK)
        return s;
    return f8_unpad(x, n, r0, nr, dxe, C);
}

/* The experts as one parallel region over experts (the table's
 * moe_experts) where moe.c's layer would run them so
 * (llmt__moe_over_experts: at level 0, at least two busy experts a
 * thread); else one expert after another, each GEMM split over the
 * threads at level 0 (doc/moe.md, "On the op table"). */
static int over_experts(const llmt__moe_dctx *x, int n, const int64_t *nr)
{
    return x->host && x->op->moe_experts && llmt__moe_over_experts(nr, n);
}

/* gemm of storage-typed A, B; C fp32 (cf32) or the storage type. */
static llmt_status mm(llmt__moe_dctx *x, int ta, int tb, int M, int N, int K, const void *A,
                      const void *B, void *C, int cf32, float beta, const char *what)
{
    llmt__gemm_args a =
        llmt__gemm_plain(x->es != sizeof(float), ta, tb, M, N, K, A, B, C, cf32, beta);
    OP(x->op->gemm(x->d, &a), what);
    return LLMT_OK;
}

/* The shared experts: one SwiGLU of hidden Fs on every token, added. */
static llmt_status shared_fwd(llmt__moe_dctx *x, llmt__moe_dlay *p, const llmt__moe_dw *w,
                              const void *xin, void *y, int N)
{
    int C = x->sh.C, Fs = x->Fs;
    llmt_status s;
    if ((s = mm(x, 0, 1, N, Fs, C, xin, w->sw1, p->sh1, 0, 0.0f, "shared gate")) != LLMT_OK ||
        (s = mm(x, 0, 1, N, Fs, C, xin, w->sw3, p->sh3, 0, 0.0f, "shared up")) != LLMT_OK)
        return s;
    OP(x->op->swiglu_fwd(x->d, p->sact, p->sh1, p->sh3, (size_t)N * Fs), "shared swiglu");
    return mm(x, 0, 1, N, C, Fs, p->sact, w->sw2, y, 0, 1.0f, "shared down");
}

llmt_status llmt__moe_dev_route(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe *s,
                                const llmt__moe_dw *w, const void *xin, int N)
{
    int E = x->sh.E, K = x->sh.K, C = x->sh.C;
    if (N < 1 || N > x->Nmax || N > s->Nmax)
        return llmt__err_set(x->e, LLMT_ERR_INTERNAL, "trainer: moe: %d tokens (made for %d)",
                             N, x->Nmax);
    llmt_status st;
    /* the router's logits into the routing state's probs (a device
     * backend: through its own buffer and back) */
    float *lg = x->host ? s->probs : p->logits;
    if ((st = mm(x, 0, 1, N, E, C, xin, w->router, lg, 1, 0.0f, "router")) != LLMT_OK)
        return st;
    if (!x->host)
        OP(x->op->d2h(x->d, s->probs, lg, (size_t)N * E * sizeof(float)), "router logits");
    if ((st = llmt__moe_route_logits(s, N)) != LLMT_OK)
        return st; /* the token group's sum (moe_group.h) set the message */
    int R = (int)s->start[E];
    p->tok = s->tok;
    p->row = s->row;
    p->gate = s->gate;
    if (!x->host) { /* the dispatch tables to the device */
        size_t nk = (size_t)N * K;
        OP(x->op->h2d(x->d, p->dtok, s->tok, (size_t)R * sizeof(int32_t)), "moe tables");
        OP(x->op->h2d(x->d, p->drow, s->row, nk * sizeof(int32_t)), "moe tables");
        OP(x->op->h2d(x->d, p->dgate, s->gate, nk * sizeof(float)), "moe tables");
        p->tok = p->dtok;
        p->row = p->drow;
        p->gate = p->dgate;
    }
    if (R > 0)
        OP(x->op->moe_gather(x->d, p->xe, xin, p->tok, R, C), "moe gather");
    return LLMT_OK;
}

llmt_status llmt__moe_dev_experts_fwd(llmt__moe_dctx *x, const llmt__moe_dw *w, int n,
                                      const int64_t *r0, const int64_t *nr, const void *xe,
                                      void *h1, void *h3, void *act, void *ye)
{
    int C = x->sh.C, F = x->sh.F;
    llmt_status st;
    if (x->f8on)
        return experts_fwd_fp8(x, w, n, r0, nr, xe, h1, h3, act, ye);
    if (over_experts(x, n, nr)) {
        llmt__moe_xargs a = {.n = n,
                             .C = C,
                             .F = F,
                             .r0 = r0,
                             .nr = nr,
                             .w1 = w->w1,
                             .w2 = w->w2,
                             .w3 = w->w3,
                             .xe = xe,
                             .h1 = h1,
                             .h3 = h3,
                             .act = act,
                             .ye = ye};
        OP(x->op->moe_experts(x->d, &a), "moe experts");
        return LLMT_OK;
    }
    int64_t R = 0;
    for (int e = 0; e < n; e++) {
        int rows = (int)nr[e];
        size_t a = (size_t)r0[e], wo = (size_t)e * F * C;
        R += rows;
        if (rows < 1)
            continue;
        const void *xr = at(x, xe, a * C);
        if ((st = mm(x, 0, 1, rows, F, C, xr, at(x, w->w1, wo), at(x, h1, a * F), 0, 0.0f,
                     "expert gate")) != LLMT_OK ||
            (st = mm(x, 0, 1, rows, F, C, xr, at(x, w->w3, wo), at(x, h3, a * F), 0, 0.0f,
                     "expert up")) != LLMT_OK)
            return st;
    }
    if (R > 0) /* the experts' rows are packed from row r0[0] = 0 on */
        OP(x->op->swiglu_fwd(x->d, act, h1, h3, (size_t)R * F), "expert swiglu");
    for (int e = 0; e < n; e++) {
        int rows = (int)nr[e];
        size_t a = (size_t)r0[e];
        if (rows > 0 &&
            (st = mm(x, 0, 1, rows, C, F, at(x, act, a * F), at(x, w->w2, (size_t)e * C * F),
                     at(x, ye, a * C), 0, 0.0f, "expert down")) != LLMT_OK)
            return st;
    }
    return LLMT_OK;
}

llmt_status llmt__moe_dev_combine(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe *s,
                                  const llmt__moe_dw *w, const void *xin, void *y, int N)
{
    OP(x->op->moe_combine(x->d, y, p->ye, p->row, p->gate, N, x->sh.K, x->sh.C), "moe combine");
    llmt__moe_losses(s);
    return x->Fs > 0 && w->sw1 ? shared_fwd(x, p, w, xin, y, N) : LLMT_OK;
}

llmt_status llmt__moe_dev_fwd(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe *s,
                              const llmt__moe_dw *w, const void *xin, void *y, int N)
{
    llmt_status st = llmt__moe_dev_route(x, p, s, w, xin, N);
    if (st == LLMT_OK)
        st = llmt__moe_dev_experts_fwd(x, w, x->sh.E, s->start, s->kept, p->xe, p->h1, p->h3,
                                       p->act, p->ye);
    return st == LLMT_OK ? llmt__moe_dev_combine(x, p, s, w, xin, y, N) : st;
}

static llmt_status shared_bwd(llmt__moe_dctx *x, llmt__moe_dlay *p, const llmt__moe_dw *w,
                              const llmt__moe_dw *g, const void *xin, const void *dy, void *dx,
                              int N)
{
    int C = x->sh.C, Fs = x->Fs;
    size_t n = (size_t)N * Fs;
    llmt_status s;
    if ((s = mm(x, 1, 0, C, Fs, N, dy, p->sact, g->sw2, 1, 1.0f, "shared down grad")) !=
            LLMT_OK ||
        (s = mm(x, 0, 0, N, Fs, C, dy, w->sw2, x->sdact, 0, 0.0f, "shared down dx")) != LLMT_OK)
        return s;
    OP(x->op->swiglu_bwd(x->d, x->sdh1, x->sdh3, NULL, x->sdact, p->sh1, p->sh3, n),
       "shared swiglu backward");
    if ((s = mm(x, 1, 0, Fs, C, N, x->sdh1, xin, g->sw1, 1, 1.0f, "shared gate grad")) !=
            LLMT_OK ||
        (s = mm(x, 1, 0, Fs, C, N, x->sdh3, xin, g->sw3, 1, 1.0f, "shared up grad")) !=
            LLMT_OK ||
        (s = mm(x, 0, 0, N, C, Fs, x->sdh1, w->sw1, dx, 0, 1.0f, "shared gate dx")) != LLMT_OK)
        return s;
    return mm(x, 0, 0, N, C, Fs, x->sdh3, w->sw3, dx, 0, 1.0f, "shared up dx");
}

llmt_status llmt__moe_dev_combine_bwd(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe *s,
                                      const void *dy)
{
    size_t nk = (size_t)s->N * x->sh.K;
    float *dgate = x->host ? s->dgate : x->dgate;
    OP(x->op->moe_combine_bwd(x->d, x->dye, dgate, dy, p->ye, p->row, p->gate, s->N, x->sh.K,
                              x->sh.C),
       "moe combine backward");
    if (!x->host) /* the gates' gradient to the host, for the router's */
        OP(x->op->d2h(x->d, s->dgate, dgate, nk * sizeof(float)), "moe gate gradients");
    return LLMT_OK;
}

llmt_status llmt__moe_dev_experts_bwd(llmt__moe_dctx *x, const llmt__moe_dw *w,
                                      const llmt__moe_dw *g, int n, const int64_t *r0,
                                      const int64_t *nr, const void *xe, const void *h1,
                                      const void *h3, const void *act, const void *dye,
                                      void *dact, void *dh1, void *dh3, void *dxe)
{
    int C = x->sh.C, F = x->sh.F;
    llmt_status st;
    if (x->f8on)
        return experts_bwd_fp8(x, w, g, n, r0, nr, xe, h1, h3, act, dye, dact, dh1, dh3, dxe);
    if (over_experts(x, n, nr)) {
        llmt__moe_xargs a = {.bwd = 1,
                             .n = n,
                             .C = C,
                             .F = F,
                             .r0 = r0,
                             .nr = nr,
                             .w1 = w->w1,
                             .w2 = w->w2,
                             .w3 = w->w3,
                             .xe = xe,
                             .dye = dye,
                             .h1 = (void *)h1,
                             .h3 = (void *)h3,
                             .act = (void *)act,
                             .dact = dact,
                             .dh1 = dh1,
                             .dh3 = dh3,
                             .dxe = dxe,
                             .g1 = (float *)g->w1,
                             .g2 = (float *)g->w2,
                             .g3 = (float *)g->w3};
        OP(x->op->moe_experts(x->d, &a), "moe experts backward");
        return LLMT_OK;
    }
    int64_t R = 0;
    for (int e = 0; e < n; e++) {
        int rows = (int)nr[e];
        size_t a = (size_t)r0[e], wo = (size_t)e * C * F;
        R += rows;
        if (rows < 1)
            continue;
        const void *dr = at(x, dye, a * C);
        if ((st = mm(x, 1, 0, C, F, rows, dr, at(x, act, a * F), (float *)g->w2 + wo, 1, 1.0f,
                     "expert down grad")) != LLMT_OK ||
            (st = mm(x, 0, 0, rows, F, C, dr, at(x, w->w2, wo), at(x, dact, a * F), 0, 0.0f,
                     "expert down dx")) != LLMT_OK)
            return st;
    }
    if (R > 0) {
        size_t m = (size_t)R * F;
        OP(x->op->swiglu_bwd(x->d, dh1, dh3, NULL, dact, h1, h3, m), "expert swiglu backward");
    }
    for (int e = 0; e < n; e++) {
        int rows = (int)nr[e];
        size_t a = (size_t)r0[e], wo = (size_t)e * F * C;
        if (rows < 1)
            continue;
        const void *xr = at(x, xe, a * C), *d1 = at(x, dh1, a * F), *d3 = at(x, dh3, a * F);
        void *dxr = at(x, dxe, a * C);
        if ((st = mm(x, 1, 0, F, C, rows, d1, xr, (float *)g->w1 + wo, 1, 1.0f,
                     "expert gate grad")) != LLMT_OK ||
            (st = mm(x, 1, 0, F, C, rows, d3, xr, (float *)g->w3 + wo, 1, 1.0f,
                     "expert up grad")) != LLMT_OK ||
            (st = mm(x, 0, 0, rows, C, F, d1, at(x, w->w1, wo), dxr, 0, 0.0f,
                     "expert gate dx")) != LLMT_OK ||
            (st = mm(x, 0, 0, rows, C, F, d3, at(x, w->w3, wo), dxr, 0, 1.0f,
                     "expert up dx")) != LLMT_OK)
            return st;
    }
    return LLMT_OK;
}

llmt_status llmt__moe_dev_router_bwd(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe *s,
                                     const llmt__moe_dw *w, const llmt__moe_dw *g,
                                     const void *xin, const void *dy, void *dx, float aux_coef,
                                     float z_coef)
{
    int N = s->N, E = x->sh.E, K = x->sh.K, C = x->sh.C;
    llmt_status st;
    OP(x->op->moe_gather_bwd(x->d, dx, x->dxe, p->row, N, K, C), "moe gather backward");
    /* the router: its logits' gradient on the host (moe.c), then in the
     * storage type to the backend for its two gemms */
    llmt__moe_router_dlog(s, aux_coef, z_coef);
    const void *dl = s->dlog;
    size_t ne = (size_t)N * E;
    if (!x->host) {
        OP(x->op->h2d(x->d, x->dlog, s->dlog, ne * sizeof(float)), "router gradient");
        dl = x->dlog;
    }
    if (x->dlogs) {
        OP(x->op->f32_to_bf16(x->d, x->dlogs, dl, ne), "router gradient");
        dl = x->dlogs;
    }
    if ((st = mm(x, 1, 0, E, C, N, dl, xin, g->router, 1, 1.0f, "router grad")) != LLMT_OK ||
        (st = mm(x, 0, 0, N, C, E, dl, w->router, dx, 0, 1.0f, "router dx")) != LLMT_OK)
        return st;
    return x->Fs > 0 && w->sw1 ? shared_bwd(x, p, w, g, xin, dy, dx, N) : LLMT_OK;
}

llmt_status llmt__moe_dev_bwd(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe *s,
                              const llmt__moe_dw *w, const llmt__moe_dw *g, const void *xin,
                              const void *dy, void *dx, float aux_coef, float z_coef)
{
    llmt_status st = llmt__moe_dev_combine_bwd(x, p, s, dy);
    if (st == LLMT_OK)
        st = llmt__moe_dev_experts_bwd(x, w, g, x->sh.E, s->start, s->kept, p->xe, p->h1, p->h3,
                                       p->act, x->dye, x->dact, x->dh1, x->dh3, x->dxe);
    return st == LLMT_OK
               ? llmt__moe_dev_router_bwd(x, p, s, w, g, xin, dy, dx, aux_coef, z_coef)
               : st;
}
