/* The engine: forward, backward and AdamW of a GPT-2 or Llama-style model
 * through the one backend op table (lib/exec/dev.h), in the backend's
 * storage type: fp32 on the CPU, bf16 activations and parameters with
 * fp32 master weights on CUDA and its host emulation (see device.h). The
 * graph is written once; what a backend changes is fusion (bias and
 * bias+GELU GEMM epilogues, softmax cross-entropy writing its gradient in
 * place) and what attention saves for its backward (attn_state).
 *
 * Activations for B x T: resid[0..L] (N x C each: the input of every layer
 * and of the final norm), and per layer qkv, atty, lse, res2, the norms'
 * statistics, fch (GPT-2: the fc pre-activation; Llama: the gate), fch3
 * (Llama: the up projection), fchg (GPT-2: the GELU output; a MoE layer
 * has no fch, fch3, fchg: its experts keep their own, moe_net.h). The
 * norms' outputs and Llama's SwiGLU output are made again in the backward
 * (the buffer plan in llmt__devtrain_create_layout). With full recompute
 * all layers share one such set, refilled from resid[l] by re-running the
 * layer's forward just before its backward; with selective recompute only
 * the attention core's output and state (atty, lse: T x T probabilities on
 * the CPU) are shared, recomputed from the layer's saved qkv. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/fp8.h"
#include "train/device.h"
#include "train/dp.h"
#include "train/moe_dev.h"
#include "train/moe_net.h"
#include "train/cp.h"
#include "train/pp_agree.h"
#include "train/stage.h"

#define NOP LLMT__NOPARAM

/* llmt_trainer_opts.fp8_format is passed through as exec/fp8.h's value */
_Static_assert((int)LLMT_FP8_E4M3 == (int)LLMT__FP8_FORMAT_E4M3 &&
                   (int)LLMT_FP8_HYBRID == (int)LLMT__FP8_FORMAT_HYBRID,
               "public and internal fp8 formats");

/* fp8 slots: each Linear of each layer has three scaled tensors, its input
 * (2*slot) and its weight (2*slot + 1) in the forward, and its output's
 * gradient (f8g0 + slot, after every forward tensor: a checkpoint of the
 * forward-only engine is this one's first rows) in the backward. */
enum { LQKV, LPROJ, LFC, LFC3, LFCP, NLIN };
#define SLOT(l, kind) ((l) * NLIN + (kind))
#define F8_STRIDE 4 /* floats between two inverse scales: 16 bytes */

/* A parameter's part on this rank under tensor parallelism, the tensor
 * seen as [R, K] (1-D: [R, 1]): WHOLE (replicated), ROWS (segments of
 * rows, concatenated: the q, k and v heads of qkv, the rows of a column
 * split Linear, the vocabulary rows) or COLS (columns [lo, lo + n): a row
 * split Linear's weight). own: this rank is the first that holds the
 * segment (it alone adds it to the gradient norm and to the gathers). */
enum { SH_WHOLE, SH_ROWS, SH_COLS };
typedef struct tshard {
    int kind, nseg;
    int64_t R, K, lo[3], n[3];
    int own[3];
    size_t numel;
} tshard;

/* A layer's activations (storage type; `lse`: attention's saved state,
 * attn_state floats). Its norms' outputs are not kept (the engine's nrmx,
 * made again from the norm's input and statistics for the backward), nor
 * is a Llama layer's SwiGLU output (dfch, from fch and fch3). */
typedef struct dlayer {
    void *qkv, *atty, *res2, *fch, *fch3, *fchg;
    float *ln1m, *ln1r, *ln2m, *ln2r, *lse;
} dlayer;

/* One micro-batch's activations on a pipeline stage (the engine's L,
 * resid, lnfm, lnfr and logits point at the current one); micro: the
 * micro-batch it holds (-1: none). */
typedef struct actset {
    dlayer *L;
    void **resid, *logits;
    float *lnfm, *lnfr;
    int micro;
} actset;

struct llmt__devtrain {
    const llmt__dev_ops *op;
    llmt__dev *d;
    llmt_err *e;
    llmt_model *m;
    int B, T, A, llama;
    int nacts;             /* layer activation sets: layers, or 1 (full recompute) */
    int selective;         /* recompute the attention core only */
    size_t es;             /* bytes of one stored element (ops->store) */
    int alias;             /* fp32 host backend: master IS the model's data and
                              the host mirrors ARE the device buffers */
    size_t *doff;          /* device offset of host parameter i */
    size_t P;              /* device floats */
    int nruns;             /* AdamW runs: tensors next to each other with */
    size_t *run_lo, *run_n; /* the same weight decay, one launch each */
    int *run_decay;
    llmt__layer_offs *lay; /* device offsets */
    size_t wte, wpe, lnfw, lnfb, lm;
    /* the graph's split-able ops (device.h): layer l's Linears at
     * lin[l * NLIN + kind], the head at lin[L * NLIN]; the vocabulary op;
     * the collectives of split ops (none today) */
    llmt__linear *lin;
    llmt__vocab voc;
    llmt__split_hook hook;
    void *hook_ctx;
    /* tensor parallelism's binding to this engine's context (device.h):
     * tpbound, made by tpbind, is the hook's context once made */
    void *(*tpbind)(void *ctx, const llmt__dev_ops *op, llmt__dev *d);
    void (*tpunbind)(void *bound);
    void *tpbound;
    float *master, *grad, *mom1, *mom2;
    void *param;           /* compute copy (storage type); master for fp32 */
    float *hg, *hm, *hv;   /* host mirrors */
    int pinned;
    dlayer *L;
    void **resid, *logits; /* the final norm's output: nrmx, as a layer's */
    void *dres, *dtmp, *dqkv, *dfch, *dfch3, *dfchg;
    void *nrmx; /* a layer's norm output (ln1, ln2): made again for its backward */
    /* What the host sends and reads back in a step, each one device
     * block so that a step makes the host wait twice (io_layout): up =
     * tok [A x B x T] | tgt [the same] | f8scale [nf8] | f8inv [nf8 x
     * F8_STRIDE]; down = losses [A x B x T] | sums [1] | f8amax. tgt,
     * f8scale, f8inv, sums and f8amax point into them (never freed). */
    float *lnfm, *lnfr, *losses, *sums; /* losses: A x B x T; sums: sumsq */
    float *hloss;                       /* host copy of `down` (losses summed in double) */
    int32_t *tok, *tgt;
    int32_t *hup;               /* host staging of `up` */
    size_t up_sc, up_inv, up_n; /* up's scales, inverse scales, size (words) */
    size_t dn_sum, dn_am, dn_n; /* down's sums, amaxes, size (floats) */
    int scales_stale;           /* the recipe's scales moved, not yet uploaded */
    void *hrow;            /* host row of logits for last_logits */
    size_t act_bytes;
    /* fp8 GEMMs, forward and backward */
    int fp8, nf8, f8g0;     /* on; scaled tensors (3 per Linear slot); the
                              first gradient tensor's index */
    llmt__fp8_delayed *rec; /* the recipe (host) */
    float *f8scale, *f8inv; /* device [nf8], [nf8 x F8_STRIDE]: quantisation /
                               dequantisation (put_scales) */
    float *f8amax;         /* device [(A + 1) x nf8]: a row per micro-batch,
                              row A for forwards outside a step */
    float *h8amax;         /* host [A x nf8] */
    uint8_t *qx, *qw;      /* device: quantised input and weight (the
                              backward: both transposed) */
    uint8_t *qg, *qgt;     /* device: quantised output gradient, as is and
                              transposed */
    float *h8state;        /* host: the recipe's state for checkpoints */
    int amax_row, fp8_gemms, fp8_bwd_gemms;
    /* tensor parallelism (device.h; tp 1: none): this rank's heads (q, kv),
     * attention width, MLP columns, vocabulary columns [vlo, vlo + Vl) of
     * which nv are real; kvrep: kv heads held by several ranks (kv_heads <
     * tp); each parameter's shard; the runs of the device layout whose
     * gradients this rank adds to the norm; scratch of the split loss and
     * of the kv heads' gradient sums */
    int tp, tpr, nh_l, nkv_l, C_l, Q_l, F_l, Vl, vlo, nv, kvrep;
    struct tshard *sh;
    int nnrm;
    const float **nrm_x;
    size_t *nrm_n, *nrm_lo, *dnumel; /* runs' device offsets; shard sizes */
    float *xmx, *xst, *kvbuf;
    size_t kvn;
    /* sequence parallelism (device.h): the residual stream, the norms and
     * their outputs hold rows [tpr * N / tp, ..) of the N = B x T; gat:
     * a whole N x C buffer (storage type) for what the group gathers (a
     * column split Linear's input, a row split one's dout) and the
     * embedding's partial rows; nrmbuf: the norms' gradients packed for
     * their sum over the group; ptok, ptgt: host rows padded to a multiple
     * of tp for evaluate and generate */
    int sp;
    void *gat;
    float *nrmbuf;
    size_t *nrmoff;
    int nnrmp;
    int32_t *ptok, *ptgt;
    /* data parallelism (lib/train/dp.c), or NULL: its hooks run at the
     * named points of the graph (a unit's parameters used / done, its
     * gradients ready), units 0 = embeddings, 1..L = layers, L+1 = tail */
    llmt__dp *dp;
    /* pipeline parallelism (lib/train/pp.c; pp 1: none): this stage's
     * layers [l0, l1), the embedding on the first stage, the final norm,
     * head and loss on the last; tiedcp: the last stage's copy of a tied
     * wte (its gradient is summed with the first stage's, which alone
     * counts it in the norm); micro: the step's micro-batches; dloss: the
     * step's loss gradient scale */
    int pp, l0, l1, first, last, tiedcp, micro;
    float dloss;
    /* a pipeline stage's activation sets, one per micro-batch in flight
     * (micro-batch a in slot a % nslot; 0 without pipeline parallelism) */
    actset *slot;
    int nslot, cur;
    /* interleaving (pp_sched.h): the stage's model chunks, chunk c holding
     * [cl0[c], cl1[c]); one chunk without it. A set holds the layers of
     * the longest chunk, [ca0, ca1), the others' layers aliasing them, so
     * a set serves any chunk (the engine keeps the schedule's peak of
     * micro-batch chunks in flight, not chunks x sets). sel: the set the
     * next stage op uses (-1: micro-batch a's, a % nslot). */
    int nch, ca0, ca1, sel, sl0, sl1, sfirst, slast;
    int *cl0, *cl1;
    /* context parallelism (lib/train/cp.h), or NULL: T is this rank's
     * rows of each sequence, at the global positions cp gives */
    llmt__cp *cp;
    /* mixture of experts (moe_net.h; NULL: dense) and the step's weight
     * of its aux losses (1 / micro-batches) */
    llmt__moe_net *moe;
    float moe_scale;
    /* expert parallelism (llmt__devtrain_set_ep; ep 1: none): this rank's
     * place in the EP group; the MoE layers' expert tensors then hold only
     * its E/ep experts' rows (ep_shards) */
    int ep, epr;
};

/* Forward the backend's message for a failed op. */
static llmt_status dev_fail(llmt__devtrain *g, llmt_status s, const char *what)
{
    return llmt__err_set(g->e, s, "trainer: device %s: %s: %s", g->op->name, what,
                         g->op->last_error(g->d));
}
#define S(x, what)                                                   \
    do {                                                             \
        llmt_status s_ = (x);                                        \
        if (s_ != LLMT_OK) return dev_fail(g, s_, what);             \
    } while (0)

/* Element i of a storage-typed array. */
static inline void *at(const llmt__devtrain *g, const void *p, size_t i)
{
    return (char *)p + i * g->es;
}
/* The compute copy of the parameter at device offset `off`. */
static inline void *pw(const llmt__devtrain *g, size_t off) { return at(g, g->param, off); }

static size_t map_off(const llmt_model *m, const size_t *doff, size_t host)
{
    if (host == NOP) return NOP;
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].offset == host) return doff[i];
    return NOP; /* not reached: every offset is a parameter's start */
}

static llmt_status dalloc(llmt__devtrain *g, void **p, size_t bytes, int act)
{
    if (act) g->act_bytes += bytes;
    llmt_status s = g->op->alloc(g->d, p, bytes ? bytes : 16);
    if (s != LLMT_OK) {
        *p = NULL;
        return llmt__err_set(g->e, s, "trainer: device %s: cannot allocate %zu bytes "
                             "(%zu of activations planned for %d x %d tokens): %s",
                             g->op->name, bytes, g->act_bytes, g->B, g->T,
                             g->op->last_error(g->d));
    }
    return LLMT_OK;
}

static void free_slots(llmt__devtrain *g);
static void ep_shards(llmt__devtrain *g);

struct llmt__moe_net *llmt__devtrain_moe(llmt__devtrain *g)
{
    return g->moe;
}

void llmt__devtrain_destroy(llmt__devtrain *g)
{
    if (!g) return;
    llmt__cp_unbind(g->cp, g->d); /* its scratch, when in this engine's memory */
    if (g->tpbound)
        g->tpunbind(g->tpbound);
    llmt__moe_net_free(g->moe);
    if (g->d) {
        if (g->param == (void *)g->master) g->param = NULL; /* fp32: one buffer */
        if (g->alias) g->master = NULL;                     /* the model's */
        if (g->dqkv == g->dfch)
            g->dqkv = NULL; /* dfch's memory */
        g->tgt = NULL;      /* tok's, sums' and f8amax's blocks (io_layout) */
        g->f8scale = g->f8inv = g->sums = g->f8amax = NULL;
        void **bufs[] = {
            (void **)&g->master, (void **)&g->grad,   (void **)&g->mom1,    (void **)&g->mom2,
            (void **)&g->param,  (void **)&g->logits, (void **)&g->dres,    (void **)&g->dtmp,
            (void **)&g->dqkv,   (void **)&g->dfch,   (void **)&g->dfch3,   (void **)&g->dfchg,
            (void **)&g->lnfm,   (void **)&g->lnfr,   (void **)&g->losses,  (void **)&g->sums,
            (void **)&g->tok,    (void **)&g->tgt,    (void **)&g->f8scale, (void **)&g->f8inv,
            (void **)&g->f8amax, (void **)&g->qx,     (void **)&g->qw,      (void **)&g->xmx,
            (void **)&g->xst,    (void **)&g->kvbuf,  (void **)&g->gat,     (void **)&g->nrmbuf,
            (void **)&g->nrmx,   (void **)&g->qg,     (void **)&g->qgt};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (*bufs[i]) g->op->free(g->d, *bufs[i]);
        free_slots(g);
        for (int l = 0; g->L && l < g->nacts; l++) {
            dlayer *a = &g->L[l];
            if (g->nacts > 1 && (l < g->ca0 || l >= g->ca1))
                continue; /* another stage's layer, or an alias (interleaving) */
            int shared = g->selective && l > g->ca0; /* layer ca0's, freed there */
            void *ps[] = {a->qkv,
                          shared ? NULL : a->atty,
                          a->res2,
                          a->fch,
                          a->fch3,
                          a->fchg,
                          a->ln1m,
                          a->ln1r,
                          a->ln2m,
                          a->ln2r,
                          shared ? NULL : a->lse};
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                if (ps[i]) g->op->free(g->d, ps[i]);
        }
        for (int l = g->ca0; g->resid && l <= g->ca1; l++)
            if (g->resid[l]) g->op->free(g->d, g->resid[l]);
        float *hs[] = {g->hg, g->hm, g->hv};
        for (int i = 0; i < 3 && !g->alias; i++)
            if (hs[i]) {
                if (g->pinned) g->op->host_free(g->d, hs[i]);
                else free(hs[i]);
            }
        g->op->destroy(g->d);
    }
    free(g->L);
    free(g->resid);
    free(g->cl0);
    free(g->cl1);
    free(g->lay);
    free(g->lin);
    free(g->doff);
    free(g->hloss);
    free(g->hup);
    free(g->hrow);
    free(g->run_lo);
    free(g->run_n);
    free(g->run_decay);
    free(g->h8amax);
    free(g->h8state);
    free(g->sh);
    free(g->nrm_x);
    free(g->nrm_n);
    free(g->nrm_lo);
    free(g->dnumel);
    free(g->ptok);
    free(g->ptgt);
    free(g->nrmoff);
    llmt__fp8_delayed_destroy(g->rec);
    free(g);
}

/* The step's two transfer blocks (the struct's `up` and `down`), for A
 * micro-batches of N tokens and nf fp8 tensors (0: none); the scales and
 * the sum start 256 bytes aligned, so each inverse scale is 16-byte
 * aligned as cuBLASLt wants its scale pointers (put_scales). Their host
 * copies: hup, hloss (zeroed: a transfer may carry a gap of unused
 * words). */
static int io_layout(llmt__devtrain *g, size_t A, size_t N, size_t nf)
{
    size_t tok = 2 * A * N;
    g->up_sc = (tok + 63) / 64 * 64;
    g->up_inv = g->up_sc + (nf + 63) / 64 * 64;
    g->up_n = nf ? g->up_inv + nf * F8_STRIDE : tok;
    g->dn_sum = (A * N + 63) / 64 * 64;
    g->dn_am = g->dn_sum + 64;
    g->dn_n = g->dn_am + (A + 1) * nf;
    g->hup = calloc(g->up_n, sizeof *g->hup);
    g->hloss = calloc(g->dn_n, sizeof *g->hloss);
    return g->hup && g->hloss;
}

static llmt_status host_mirror(llmt__devtrain *g, float **p, size_t floats)
{
    size_t bytes = floats * sizeof(float);
    if (g->pinned && g->op->host_alloc(g->d, (void **)p, bytes) == LLMT_OK) {
        memset(*p, 0, bytes);
        return LLMT_OK;
    }
    if (g->pinned) return llmt__err_set(g->e, LLMT_ERR_OUT_OF_MEMORY,
                                        "trainer: device %s: cannot allocate %zu "
                                        "bytes of pinned host memory: %s", g->op->name,
                                        bytes, g->op->last_error(g->d));
    *p = calloc(floats ? floats : 1, sizeof(float));
    return *p ? LLMT_OK : llmt__err_set(g->e, LLMT_ERR_OUT_OF_MEMORY,
                                        "trainer: cannot allocate %zu bytes", bytes);
}

llmt_status llmt__tp_check(llmt_err *e, const llmt_model_config *c, int tp)
{
    if (tp <= 1)
        return LLMT_OK;
    struct {
        const char *key;
        int v;
    } k[] = {{"model.heads", c->heads},
             {"model.width", c->width},
             {"model.ffn_hidden", c->ffn_hidden},
             {"model.padded_vocab_size", c->padded_vocab_size}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].v % tp)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "parallelism.tp: %d does not divide %s %d (tensor "
                                 "parallelism splits it evenly)",
                                 tp, k[i].key, k[i].v);
    if (c->kv_heads % tp && tp % c->kv_heads)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "parallelism.tp: %d and model.kv_heads %d: one must divide the "
                             "other (kv heads are split when kv_heads >= tp, else each is "
                             "held by tp / kv_heads ranks)",
                             tp, c->kv_heads);
    return LLMT_OK;
}

/* Host parameter index at float offset `off` (-1: none). */
static int pidx(const llmt_model *m, size_t off)
{
    if (off == NOP)
        return -1;
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].offset == off)
            return i;
    return -1;
}

static void sh_rows(tshard *s, int64_t lo, int64_t n, int own)
{
    s->kind = SH_ROWS;
    s->lo[s->nseg] = lo;
    s->n[s->nseg] = n;
    s->own[s->nseg++] = own;
}

/* Each parameter's shard on tensor parallel rank tpr of tp (tp 1: all
 * whole), the local dims, and the runs the gradient norm adds here.
 * Megatron-LM's layout: qkv, fc, fc3 column split (their rows; qkv's q
 * heads, and its kv heads split when kv_heads >= tp, else kv head
 * tpr / (tp / kv_heads) whole, shared by tp / kv_heads ranks); proj and
 * fcproj row split (their columns), their biases whole (added by rank 0
 * only, after the partial sums are reduced); wte and an untied lm_head by
 * vocabulary rows; norms and wpe whole. */
static void tp_shards(llmt__devtrain *g)
{
    const llmt_model *m = g->m;
    const llmt_model_config *c = &m->cfg;
    int t = g->tp, r = g->tpr, hd = m->head_dim, nh = c->heads, nkv = c->kv_heads;
    g->nh_l = nh / t;
    g->kvrep = t > 1 && nkv < t;
    g->nkv_l = g->kvrep ? 1 : nkv / t;
    g->C_l = g->nh_l * hd;
    g->Q_l = (g->nh_l + 2 * g->nkv_l) * hd;
    g->F_l = c->ffn_hidden / t;
    g->Vl = c->padded_vocab_size / t;
    g->vlo = r * g->Vl;
    g->nv = c->vocab_size - g->vlo;
    if (g->nv > g->Vl)
        g->nv = g->Vl;
    if (g->nv < 0)
        g->nv = 0;
    for (int i = 0; i < m->nparams; i++) {
        const llmt__param *p = &m->params[i];
        tshard *s = &g->sh[i];
        s->R = p->shape[0];
        s->K = p->ndim > 1 ? p->shape[1] : 1;
        s->kind = SH_WHOLE;
        s->nseg = 1;
        s->lo[0] = 0;
        s->n[0] = s->R;
        s->own[0] = t == 1 || r == 0;
    }
    if (t > 1) {
        int kvh = g->kvrep ? r / (t / nkv) : r * g->nkv_l; /* first kv head here */
        int kvown = !g->kvrep || r % (t / nkv) == 0;
        int64_t qn = (int64_t)g->nh_l * hd, kn = (int64_t)g->nkv_l * hd;
        for (int l = 0; l < c->layers; l++) {
            const llmt__layer_offs *o = &m->layer[l];
            size_t qkv[2] = {o->qkvw, o->qkvb};
            for (int j = 0; j < 2; j++) {
                int i = pidx(m, qkv[j]);
                if (i < 0)
                    continue;
                tshard *s = &g->sh[i];
                s->nseg = 0;
                sh_rows(s, (int64_t)r * qn, qn, 1);
                sh_rows(s, (int64_t)nh * hd + (int64_t)kvh * hd, kn, kvown);
                sh_rows(s, (int64_t)(nh + nkv) * hd + (int64_t)kvh * hd, kn, kvown);
            }
            size_t cols[] = {o->fcw, o->fcb, o->fc3w};
            for (size_t j = 0; j < sizeof cols / sizeof cols[0]; j++) {
                int i = pidx(m, cols[j]);
                if (i < 0)
                    continue;
                g->sh[i].nseg = 0;
                sh_rows(&g->sh[i], (int64_t)r * g->F_l, g->F_l, 1);
            }
            size_t rows[] = {o->projw, o->fcprojw};
            for (size_t j = 0; j < 2; j++) {
                int i = pidx(m, rows[j]);
                if (i < 0)
                    continue;
                tshard *s = &g->sh[i];
                s->kind = SH_COLS;
                s->n[0] = s->K / t;
                s->lo[0] = r * s->n[0];
                s->own[0] = 1;
            }
        }
        size_t voc[2] = {m->wte, m->lm_head};
        for (int j = 0; j < 2; j++) {
            int i = pidx(m, voc[j]);
            if (i < 0)
                continue;
            g->sh[i].nseg = 0;
            sh_rows(&g->sh[i], g->vlo, g->Vl, 1);
        }
    }
    for (int i = 0; i < m->nparams; i++) {
        tshard *s = &g->sh[i];
        int64_t n = 0;
        for (int j = 0; j < s->nseg; j++)
            n += s->n[j];
        s->numel = (size_t)(s->kind == SH_COLS ? s->R * s->n[0] : n * s->K);
    }
}

/* The runs of the device layout whose gradients this rank adds to the
 * norm: what it owns (device.h), so the group's sum counts each element
 * once. After plan_layout. */
static void tp_norm_runs(llmt__devtrain *g)
{
    g->nnrm = 0;
    for (int i = 0; i < g->m->nparams; i++) {
        const tshard *s = &g->sh[i];
        size_t at_ = g->doff[i];
        for (int j = 0; j < s->nseg; j++) {
            size_t n = (size_t)(s->kind == SH_COLS ? s->R * s->n[0] : s->n[j] * s->K);
            if (s->own[j] && n) {
                g->nrm_x[g->nnrm] = g->grad + at_;
                g->nrm_lo[g->nnrm] = at_;
                g->nrm_n[g->nnrm++] = n;
            }
            at_ += n;
        }
    }
}

/* Pipeline activation sets (actset): slot k's pointers saved, a fresh
 * empty set made current (for the next slot's allocation), slot k made
 * current. */
static void save_slot(llmt__devtrain *g, int k)
{
    actset *a = &g->slot[k];
    a->L = g->L;
    a->resid = g->resid;
    a->logits = g->logits;
    a->lnfm = g->lnfm;
    a->lnfr = g->lnfr;
    a->micro = -1;
    g->cur = k;
}

static llmt_status new_slot(llmt__devtrain *g)
{
    int L = g->m->cfg.layers;
    g->L = calloc((size_t)L, sizeof *g->L);
    g->resid = calloc((size_t)L + 1, sizeof *g->resid);
    g->logits = NULL;
    g->lnfm = g->lnfr = NULL;
    if (!g->L || !g->resid) {
        free(g->L);
        free(g->resid);
        g->L = NULL;
        g->resid = NULL;
        return llmt__err_set(g->e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    }
    return LLMT_OK;
}

static void use_slot(llmt__devtrain *g, int k)
{
    const actset *a = &g->slot[k];
    g->L = a->L;
    g->resid = a->resid;
    g->logits = a->logits;
    g->lnfm = a->lnfm;
    g->lnfr = a->lnfr;
    g->cur = k;
    if (g->moe) /* the set's MoE routing state (moe_net.h) */
        llmt__moe_net_use(g->moe, k);
}

/* Destroy: the slots other than the current set (which the engine's own
 * frees take), each freed as the current one is. */
static void free_slots(llmt__devtrain *g)
{
    actset now = {g->L, g->resid, g->logits, g->lnfm, g->lnfr, -1};
    for (int k = 0; k < g->nslot; k++) {
        actset *a = &g->slot[k];
        if (!a->L || a->L == now.L)
            continue;
        void *bufs[] = {a->logits, a->lnfm, a->lnfr};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i])
                g->op->free(g->d, bufs[i]);
        for (int l = 0; l < g->nacts; l++) {
            dlayer *d = &a->L[l];
            if (g->nacts > 1 && (l < g->ca0 || l >= g->ca1))
                continue;
            int shared = g->selective && l > g->ca0;
            void *ps[] = {d->qkv,
                          shared ? NULL : d->atty,
                          d->res2,
                          d->fch,
                          d->fch3,
                          d->fchg,
                          d->ln1m,
                          d->ln1r,
                          d->ln2m,
                          d->ln2r,
                          shared ? NULL : d->lse};
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                if (ps[i])
                    g->op->free(g->d, ps[i]);
        }
        for (int l = g->ca0; l <= g->ca1; l++)
            if (a->resid[l])
                g->op->free(g->d, a->resid[l]);
        free(a->L);
        free(a->resid);
    }
    free(g->slot);
    g->slot = NULL;
    g->L = now.L;
    g->resid = now.resid;
}

/* Whether layer l is one of this pipeline stage's (in one of its chunks). */
static int stage_has(const llmt__devtrain *g, int l)
{
    for (int c = 0; c < g->nch; c++)
        if (l >= g->cl0[c] && l < g->cl1[c])
            return 1;
    return 0;
}

/* Whether a dense MLP runs in layer l here (a MoE layer runs its experts
 * on ln2 into dtmp instead: moe_net.h), so what it saves and the
 * backward's MLP scratch are allocated only where one does. */
static int stage_dense(const llmt__devtrain *g, int l)
{
    return stage_has(g, l) && !llmt__model_moe_layer(&g->m->cfg, l);
}

static int any_dense(const llmt__devtrain *g)
{
    int any = 0;
    for (int l = 0; l < g->m->cfg.layers; l++)
        any = any || stage_dense(g, l);
    return any;
}

/* Whether activation set layer l needs the dense MLP's buffers: under
 * full recompute (one set) if any layer here is dense; else if a layer
 * it stands for is (interleaving: the layer at its place in every chunk,
 * alias_chunks). */
static int set_dense(const llmt__devtrain *g, int l)
{
    int any = 0;
    if (g->nacts == 1)
        return any_dense(g);
    for (int c = 0; c < g->nch; c++) {
        int j = g->cl0[c] + (l - g->ca0);
        any = any || (j < g->cl1[c] && stage_dense(g, j));
    }
    return any;
}

/* Interleaving: the chunks' layers of the current set made to alias the
 * longest chunk's (a set holds one micro-batch chunk at a time). */
static void alias_chunks(llmt__devtrain *g)
{
    for (int c = 0; c < g->nch; c++) {
        int n = g->cl1[c] - g->cl0[c];
        if (g->cl0[c] == g->ca0)
            continue;
        for (int j = 0; j <= n; j++) {
            g->resid[g->cl0[c] + j] = g->resid[g->ca0 + j];
            if (g->nacts > 1 && j < n)
                g->L[g->cl0[c] + j] = g->L[g->ca0 + j];
        }
    }
}

/* Pipeline parallelism: the parameters of other stages get no device
 * memory (an empty shard); the last stage's copy of a tied wte is not its
 * owner (the first stage counts it in the norm and downloads it). */
static void stage_params(llmt__devtrain *g)
{
    const llmt_model *m = g->m;
    if (g->pp == 1)
        return;
    for (int i = 0; i < m->nparams; i++) {
        size_t off = m->params[i].offset;
        int keep = (g->first && (off == m->wte || off == m->wpe)) ||
                   (g->last && (off == m->lnfw || off == m->lnfb || off == m->lm_head));
        for (int l = 0; l < m->cfg.layers && !keep; l++) {
            if (!stage_has(g, l))
                continue;
            const llmt__layer_offs *o = &m->layer[l];
            size_t offs[] = {o->ln1w,  o->ln1b,    o->qkvw,    o->qkvb,   o->projw,
                             o->projb, o->ln2w,    o->ln2b,    o->fcw,    o->fcb,
                             o->fc3w,  o->fcprojw, o->fcprojb, o->router, o->ew1,
                             o->ew3,   o->ew2,     o->sw1,     o->sw3,    o->sw2};
            for (size_t j = 0; j < sizeof offs / sizeof offs[0]; j++)
                keep = keep || offs[j] == off;
        }
        tshard *s = &g->sh[i];
        if (!keep) {
            s->nseg = 0;
            s->numel = 0;
        } else if (g->tiedcp && !g->first && off == m->wte) {
            s->own[0] = 0;
        }
    }
}

/* A pipeline stage's MoE layers: a routing state per activation set
 * (moe_net.h), for the layers of its chunks. */
static llmt_status stage_moe_sets(llmt__devtrain *g)
{
    int L = g->m->cfg.layers;
    unsigned char *held = malloc((size_t)L);
    if (!held)
        return llmt__err_set(g->e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    for (int l = 0; l < L; l++)
        held[l] = (unsigned char)stage_has(g, l);
    llmt_status s = llmt__moe_net_sets(g->moe, g->e, g->nslot, held);
    free(held);
    return s;
}

/* Device offsets: the model's order (so that a layer is one contiguous
 * range, the unit data parallelism reduces and shards), each tensor on the
 * backend's alignment (8 elements: 16-byte bf16 vectors on CUDA); then the
 * runs of neighbours with the same weight decay, one AdamW launch each. */
static void plan_layout(llmt__devtrain *g)
{
    const llmt_model *m = g->m;
    size_t al = g->op->align > 0 ? (size_t)g->op->align : 8, at_ = 0;
    for (int i = 0; i < m->nparams; i++) {
        g->doff[i] = at_;
        at_ += (g->sh[i].numel + al - 1) / al * al;
    }
    g->P = at_;
    g->nruns = 0;
    for (int i = 0; i < m->nparams; i++) {
        int dec = m->params[i].decay;
        size_t end = i + 1 < m->nparams ? g->doff[i + 1] : g->P;
        if (g->nruns && g->run_decay[g->nruns - 1] == dec) {
            g->run_n[g->nruns - 1] = end - g->run_lo[g->nruns - 1];
            continue;
        }
        g->run_lo[g->nruns] = g->doff[i];
        g->run_n[g->nruns] = end - g->doff[i];
        g->run_decay[g->nruns++] = dec;
    }
    int L = m->cfg.layers;
    for (int l = 0; l < L; l++) {
        const llmt__layer_offs *h = &m->layer[l];
        llmt__layer_offs *o = &g->lay[l];
        o->ln1w = map_off(m, g->doff, h->ln1w);
        o->ln1b = map_off(m, g->doff, h->ln1b);
        o->qkvw = map_off(m, g->doff, h->qkvw);
        o->qkvb = map_off(m, g->doff, h->qkvb);
        o->projw = map_off(m, g->doff, h->projw);
        o->projb = map_off(m, g->doff, h->projb);
        o->ln2w = map_off(m, g->doff, h->ln2w);
        o->ln2b = map_off(m, g->doff, h->ln2b);
        o->fcw = map_off(m, g->doff, h->fcw);
        o->fcb = map_off(m, g->doff, h->fcb);
        o->fc3w = map_off(m, g->doff, h->fc3w);
        o->fcprojw = map_off(m, g->doff, h->fcprojw);
        o->fcprojb = map_off(m, g->doff, h->fcprojb);
        o->router = map_off(m, g->doff, h->router);
        o->ew1 = map_off(m, g->doff, h->ew1);
        o->ew3 = map_off(m, g->doff, h->ew3);
        o->ew2 = map_off(m, g->doff, h->ew2);
        o->sw1 = map_off(m, g->doff, h->sw1);
        o->sw3 = map_off(m, g->doff, h->sw3);
        o->sw2 = map_off(m, g->doff, h->sw2);
    }
    g->wte = map_off(m, g->doff, m->wte);
    g->wpe = map_off(m, g->doff, m->wpe);
    g->lnfw = map_off(m, g->doff, m->lnfw);
    g->lnfb = map_off(m, g->doff, m->lnfb);
    g->lm = map_off(m, g->doff, m->lm_head);
    /* the Linears and the vocabulary op, unsplit (device.h says how
     * tensor parallelism will set them) */
    const llmt_model_config *c = &m->cfg;
    int C = c->width, F = g->F_l, Q = g->Q_l, Ca = g->C_l, llama = g->llama;
    /* tensor parallelism: Megatron-LM's pairs, a column split Linear
     * feeding a row split one (device.h) */
    llmt__split col = g->tp > 1 ? LLMT__SPLIT_COLUMN : LLMT__SPLIT_NONE;
    llmt__split row = g->tp > 1 ? LLMT__SPLIT_ROW : LLMT__SPLIT_NONE;
    for (int l = 0; l < L; l++) {
        const llmt__layer_offs *o = &g->lay[l];
        llmt__linear *q = &g->lin[l * NLIN];
        const llmt__linear k[NLIN] = {
            [LQKV] = {"qkv", o->qkvw, o->qkvb, C, Q, col, SLOT(l, LQKV), 0, 0},
            [LPROJ] = {"proj", o->projw, o->projb, Ca, C, row, SLOT(l, LPROJ), 0, 0},
            [LFC] = {"fc", o->fcw, llama ? NOP : o->fcb, C, F, col, SLOT(l, LFC), !llama, 0},
            /* fc3 reads fc's input; its backward runs first, fc's adds */
            [LFC3] = {"fc3", llama ? o->fc3w : NOP, NOP, C, F, col, SLOT(l, LFC3), 0, 1},
            [LFCP] = {"fcproj", o->fcprojw, o->fcprojb, F, C, row, SLOT(l, LFCP), 0, 0},
        };
        memcpy(q, k, sizeof k);
    }
    const llmt__linear head = {"lm_head", g->lm, NOP, C, g->Vl, col, -1, 0, 0};
    g->lin[L * NLIN] = head;
    const llmt__vocab voc = {g->wte, g->wpe, c->vocab_size, c->padded_vocab_size,
                             C,      col,    g->vlo,        g->vlo + g->Vl};
    g->voc = voc;
}

/* The norms' weights and biases (device offsets into off, width floats
 * each; returns the count): under sequence parallelism each rank's
 * gradient of them sums only its rows, the group sums the parts. */
static int norm_params(const llmt__devtrain *g, size_t *off)
{
    int n = 0, L = g->m->cfg.layers;
    for (int l = 0; l <= L; l++) {
        /* a pipeline stage: its layers' norms, the final one on the last */
        if (l < L ? !stage_has(g, l) : !g->last)
            continue;
        const llmt__layer_offs *w = &g->lay[l < L ? l : 0];
        size_t o[4] = {g->lnfw, g->lnfb, NOP, NOP};
        if (l < L) {
            o[0] = w->ln1w;
            o[1] = w->ln1b;
            o[2] = w->ln2w;
            o[3] = w->ln2b;
        }
        for (int j = 0; j < 4; j++)
            if (o[j] != NOP)
                off[n++] = o[j];
    }
    return n;
}

/* Every op the fp8 GEMMs need besides the GEMM itself. */
static int fp8_ops(const llmt__dev_ops *o)
{
    return o->cast_transpose_fp8 && o->gelu_bwd_mul && o->bias_add && o->gelu_fwd;
}

/* The recipe's scales into up's host copy. The inverse scales are the
 * GEMM's scale pointers, which cuBLASLt wants 16-byte aligned
 * (cuda/gemm/gemm.cu copies others, two small copies per GEMM), so they
 * sit F8_STRIDE floats apart. */
static void stage_scales(llmt__devtrain *g)
{
    size_t n = (size_t)g->nf8;
    float *sc = (float *)(void *)(g->hup + g->up_sc);
    float *inv = (float *)(void *)(g->hup + g->up_inv);
    const float *iv = llmt__fp8_delayed_scale_invs(g->rec);
    memcpy(sc, llmt__fp8_delayed_scales(g->rec), n * sizeof *sc);
    for (size_t i = 0; i < n; i++)
        inv[i * F8_STRIDE] = iv[i];
    g->scales_stale = 0;
}

/* Scales to the device now, both kinds in one copy (at creation, from a
 * checkpoint, or before an fp8 GEMM when no batch's upload took the ones
 * the last step's recipe moved: fresh_scales). */
static llmt_status put_scales(llmt__devtrain *g)
{
    stage_scales(g);
    S(g->op->h2d(g->d, g->tok + g->up_sc, g->hup + g->up_sc, (g->up_n - g->up_sc) * 4),
      "fp8 scales");
    return LLMT_OK;
}

static llmt_status fresh_scales(llmt__devtrain *g)
{
    return g->scales_stale ? put_scales(g) : LLMT_OK;
}

/* n inputs and n targets to tok and tgt in one copy (a step's host waits
 * are two: this and read_step's), the fp8 scales with them when the
 * recipe moved them at the end of the last step (fp8_step). */
static llmt_status upload(llmt__devtrain *g, const int32_t *in, const int32_t *tg, size_t n)
{
    size_t at = (size_t)(g->tgt - g->tok), words = at + n;
    memcpy(g->hup, in, n * sizeof *in);
    memcpy(g->hup + at, tg, n * sizeof *tg);
    if (g->scales_stale) {
        stage_scales(g);
        words = g->up_n;
    }
    S(g->op->h2d(g->d, g->tok, g->hup, words * 4), "upload tokens");
    return LLMT_OK;
}

/* The MoE layers' routed experts in fp8 (moe_dev.h: llmt__moe_fp8): a
 * MoE layer's gate, up and down projections take the scaling slots of the
 * dense MLP it does not have (LFC, LFC3, LFCP), so the recipe's state has
 * the dense model's shape. Widths that are not multiples of 16 keep them
 * bf16, as they keep a dense Linear (fp8_on). */
static llmt_status moe_fp8(llmt__devtrain *g)
{
    const llmt_model_config *c = &g->m->cfg;
    if (!g->moe || c->width % 16 || c->moe_ffn % 16)
        return LLMT_OK;
    llmt__moe_fp8 f = {.scale = g->f8scale,
                       .inv = g->f8inv,
                       .inv_stride = F8_STRIDE,
                       .amax = g->f8amax,
                       .amax_row = &g->amax_row,
                       .tensors = g->nf8,
                       .nlin = NLIN,
                       .slot0 = LFC,
                       .g0 = g->f8g0,
                       .g5 = llmt__fp8_delayed_e5m2(g->rec, g->f8g0),
                       .gemms = &g->fp8_gemms,
                       .bwd_gemms = &g->fp8_bwd_gemms};
    _Static_assert(LFC3 == LFC + 1 && LFCP == LFC + 2, "the experts' three slots");
    return llmt__moe_net_set_fp8(g->moe, g->e, &f);
}

llmt_status llmt__devtrain_create(llmt_err *e, const llmt__dev_ops *ops,
                                  const llmt__dev_opts *dopts, llmt_model *m,
                                  int B, int T, int A, int recompute,
                                  const llmt__devtrain_fp8 *fp8, llmt__devtrain **out)
{
    return llmt__devtrain_create_tp(e, ops, dopts, m, B, T, A, recompute, fp8, NULL, out);
}

llmt_status llmt__devtrain_create_tp(llmt_err *e, const llmt__dev_ops *ops,
                                     const llmt__dev_opts *dopts, llmt_model *m, int B, int T,
                                     int A, int recompute, const llmt__devtrain_fp8 *fp8,
                                     const llmt__devtrain_tp *tp, llmt__devtrain **out)
{
    return llmt__devtrain_create_stage(e, ops, dopts, m, B, T, A, recompute, fp8, tp, NULL,
                                       out);
}

static llmt_status head_dim_ok(llmt_err *e, const llmt__dev_ops *ops, const llmt_model *m)
{
    int hd = m->head_dim;
    if (hd > 128 || hd % 2)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: device %s: head dim %d (width %d / heads %d): the "
                             "attention kernels take an even head dim <= 128",
                             ops->name, hd, (int)m->cfg.width, (int)m->cfg.heads);
    return LLMT_OK;
}

llmt_status llmt__devtrain_probe(llmt_err *e, const llmt__dev_ops *ops,
                                 const llmt__dev_opts *dopts, const llmt_model *m)
{
    llmt_status s = head_dim_ok(e, ops, m);
    if (s != LLMT_OK)
        return s;
    char msg[512] = "";
    llmt__dev *d = NULL;
    s = ops->create(dopts, &d, msg, sizeof msg);
    if (s != LLMT_OK)
        return llmt__err_set(e, s, "trainer: device %s %d: %s", ops->name, dopts->device,
                             msg[0] ? msg : "cannot create the context");
    ops->destroy(d);
    return LLMT_OK;
}

llmt_status llmt__devtrain_tp_supported(llmt_err *e, const llmt__dev_ops *ops)
{
    if (!ops->embedding_part_fwd || !ops->embedding_part_bwd || !ops->xent_part_max ||
        !ops->xent_part_sum || !ops->xent_part_fin)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: tensor parallelism: the %s backend has no "
                             "vocabulary-split embedding and cross-entropy ops yet "
                             "(the cpu and emulated backends have them)",
                             ops->name);
    if (ops->unverified_tp) /* the ops exist but never ran there (dev.h) */
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: tensor parallelism: the %s backend %s", ops->name,
                             ops->unverified_tp);
    return LLMT_OK;
}

llmt_status llmt__devtrain_create_stage(llmt_err *e, const llmt__dev_ops *ops,
                                        const llmt__dev_opts *dopts, llmt_model *m, int B,
                                        int T, int A, int recompute,
                                        const llmt__devtrain_fp8 *fp8,
                                        const llmt__devtrain_tp *tp,
                                        const llmt__devtrain_stage *st, llmt__devtrain **out)
{
    return llmt__devtrain_create_layout(e, ops, dopts, m, B, T, A, recompute, fp8, tp, st, NULL,
                                        out);
}

llmt_status llmt__devtrain_create_layout(
    llmt_err *e, const llmt__dev_ops *ops, const llmt__dev_opts *dopts, llmt_model *m, int B,
    int T, int A, int recompute, const llmt__devtrain_fp8 *fp8, const llmt__devtrain_tp *tp,
    const llmt__devtrain_stage *st, llmt_comm *ep, llmt__devtrain **out)
{
    *out = NULL;
    const llmt_model_config *c = &m->cfg;
    int hd = m->head_dim;
    int tps = tp && tp->size > 1 ? tp->size : 1;
    if (tps > 1) {
        llmt_status ts = llmt__tp_check(e, c, tps);
        if (ts != LLMT_OK)
            return ts;
        if (!tp->hook || tp->rank < 0 || tp->rank >= tps)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "trainer: tensor parallelism: rank %d of %d, hook %s",
                                 tp->rank, tps, tp->hook ? "set" : "missing");
        if ((ts = llmt__devtrain_tp_supported(e, ops)) != LLMT_OK)
            return ts;
    }
    int32_t epr = 0, eps = 1;
    if (ep && (llmt_comm_rank(ep, &epr) != LLMT_OK || llmt_comm_size(ep, &eps) != LLMT_OK))
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT, "trainer: set_ep_comm: %s",
                             llmt_comm_last_error(ep));
    if (eps > 1 && c->moe_experts <= 0)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: set_ep_comm: parallelism.ep %d needs mixture-of-experts "
                             "layers (llmt_model_config.moe_experts 0)",
                             (int)eps);
    int sp = tp && tp->seq;
    if (sp && tps == 1)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: parallelism.sequence_parallel needs a tensor parallel "
                             "group of more than one rank (parallelism.tp > 1)");
    if (sp && T % tps)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: parallelism.sequence_parallel: parallelism.tp %d does "
                             "not divide model.seq_len %d (the B x T rows are split in tp "
                             "equal blocks; shorter evaluate and generate calls are padded "
                             "to a multiple of tp)",
                             tps, T);
    llmt_status hs = head_dim_ok(e, ops, m);
    if (hs != LLMT_OK)
        return hs;
    llmt__devtrain *g = calloc(1, sizeof *g);
    if (!g) return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    g->op = ops;
    g->e = e;
    g->m = m;
    g->B = B;
    g->T = T;
    g->A = A;
    g->llama = c->arch == LLMT_ARCH_LLAMA;
    /* expert parallelism known from the start: the buffers are made for
     * this rank's experts only (never the whole model's first) */
    g->ep = eps > 1 ? eps : 1;
    g->epr = eps > 1 ? epr : 0;
    int L = c->layers;
    g->nacts = recompute == LLMT__RECOMPUTE_FULL ? 1 : L;
    g->selective = recompute == LLMT__RECOMPUTE_SELECTIVE;
    g->doff = calloc((size_t)m->nparams, sizeof *g->doff);
    g->lay = calloc((size_t)L, sizeof *g->lay);
    g->lin = calloc((size_t)L * NLIN + 1, sizeof *g->lin);
    g->L = calloc((size_t)L, sizeof *g->L);
    g->resid = calloc((size_t)L + 1, sizeof *g->resid);
    g->es = ops->store == LLMT_DTYPE_FP32 ? sizeof(float) : sizeof(llmt__bf16);
    g->hrow = malloc((size_t)c->padded_vocab_size * g->es);
    int f8 = fp8 && fp8->on;
    int io = io_layout(g, (size_t)A, (size_t)B * T, f8 ? (size_t)3 * L * NLIN : 0);
    g->run_lo = calloc((size_t)m->nparams, sizeof *g->run_lo);
    g->run_n = calloc((size_t)m->nparams, sizeof *g->run_n);
    g->run_decay = calloc((size_t)m->nparams, sizeof *g->run_decay);
    g->sh = calloc((size_t)m->nparams, sizeof *g->sh);
    g->nrm_x = calloc((size_t)m->nparams * 3, sizeof *g->nrm_x);
    g->nrm_n = calloc((size_t)m->nparams * 3, sizeof *g->nrm_n);
    g->nrm_lo = calloc((size_t)m->nparams * 3, sizeof *g->nrm_lo);
    g->dnumel = calloc((size_t)m->nparams, sizeof *g->dnumel);
    g->tp = tps;
    g->pp = st && st->stages > 1 ? st->stages : 1;
    g->l0 = g->pp > 1 ? st->l0 : 0;
    g->l1 = g->pp > 1 ? st->l1 : L;
    g->first = g->pp == 1 || st->stage == 0;
    g->last = g->pp == 1 || st->stage == st->stages - 1;
    g->tiedcp = g->pp > 1 && g->last && m->lm_head == m->wte;
    g->nslot = g->pp > 1 ? (st->slots > 1 ? st->slots : 1) : 0;
    g->slot = g->nslot ? calloc((size_t)g->nslot, sizeof *g->slot) : NULL;
    /* the stage's model chunks (interleaving), else the one [l0, l1) */
    g->nch = g->pp > 1 && st->nchunks > 1 ? st->nchunks : 1;
    g->cl0 = malloc((size_t)g->nch * sizeof *g->cl0);
    g->cl1 = malloc((size_t)g->nch * sizeof *g->cl1);
    g->sel = -1;
    for (int c = 0; g->cl0 && g->cl1 && c < g->nch; c++) {
        g->cl0[c] = g->nch > 1 ? st->chunk_l0[c] : g->l0;
        g->cl1[c] = g->nch > 1 ? st->chunk_l1[c] : g->l1;
        if (g->cl1[c] - g->cl0[c] > g->ca1 - g->ca0) {
            g->ca0 = g->cl0[c];
            g->ca1 = g->cl1[c];
        }
    }
    g->sl0 = g->l0;
    g->sl1 = g->l1;
    g->sfirst = g->first;
    g->slast = g->last;
    if (tps > 1) {
        g->tpr = tp->rank;
        g->hook = tp->hook;
        g->hook_ctx = tp->ctx;
        g->tpbind = tp->bind;
        g->tpunbind = tp->unbind;
        g->sp = sp;
    }
    if ((g->nslot && !g->slot) || !g->cl0 || !g->cl1 || !g->sh || !g->nrm_x || !g->nrm_n ||
        !g->nrm_lo || !g->dnumel || !g->doff || !g->lay || !g->lin || !g->L || !g->resid ||
        !g->hrow || !io || !g->run_lo || !g->run_n || !g->run_decay) {
        llmt__devtrain_destroy(g);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    }
    char msg[512] = "";
    llmt_status s = ops->create(dopts, &g->d, msg, sizeof msg);
    if (s != LLMT_OK) {
        llmt__devtrain_destroy(g);
        return llmt__err_set(e, s, "trainer: device %s %d: %s", ops->name, dopts->device,
                             msg[0] ? msg : "cannot create the context");
    }
    if (g->tpbind) { /* tp.c stages device buffers by this table and context */
        if (!(g->tpbound = g->tpbind(g->hook_ctx, ops, g->d))) {
            llmt__devtrain_destroy(g);
            return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
        }
        g->hook_ctx = g->tpbound;
    }
    g->pinned = 1;
    tp_shards(g);
    stage_params(g);
    ep_shards(g);
    plan_layout(g);
    int f32 = ops->store == LLMT_DTYPE_FP32;
    /* the fp32 host backend trains the model's own parameters in place
     * (not a tensor parallel shard of them) */
    g->alias =
        f32 && ops->host_memory && g->P == m->total && tps == 1 && g->pp == 1 && g->ep == 1;
    /* MoE layers run through the op table on every backend (moe_dev.h;
     * the fp32 CPU's too since issue 18's one-path change: moe_net.c's
     * host layer is the reference torch-moe and moe-ops test against);
     * a table that says they never ran on its hardware is refused (dev.h
     * unverified_moe) */
    if (c->moe_experts > 0 && ops->unverified_moe) {
        s = llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                          "trainer: model.moe: mixture-of-experts layers on device %s: %s; "
                          "use train.device cpu",
                          ops->name, ops->unverified_moe);
        llmt__devtrain_destroy(g);
        return s;
    }
    /* the rows a MoE layer takes here: its block under sequence parallelism */
    int moe_rows = sp ? B * T / tps : B * T;
    if (c->moe_experts > 0 && (s = llmt__moe_net_new(e, c, moe_rows, &g->moe)) != LLMT_OK) {
        llmt__devtrain_destroy(g);
        return s;
    }
    if (g->moe && (s = llmt__moe_net_set_dev(g->moe, e, ops, g->d)) != LLMT_OK) {
        llmt__devtrain_destroy(g);
        return s;
    }
    if (g->moe && sp) /* each rank routes its block of rows: the token group */
        llmt__moe_net_add_group(g->moe, tp->comm);
    if (g->moe && g->pp > 1 && (s = stage_moe_sets(g)) != LLMT_OK) {
        llmt__devtrain_destroy(g);
        return s;
    }
    if (g->moe && g->ep > 1 && (s = llmt__moe_net_set_ep(g->moe, e, ep)) != LLMT_OK) {
        llmt__devtrain_destroy(g);
        return s;
    }
    size_t P = g->P, N = (size_t)B * T, C = (size_t)c->width, Ca = (size_t)g->C_l;
    /* rows of the residual stream and the norms held here */
    size_t Nr = sp ? N / (size_t)tps : N;
    size_t Q = (size_t)g->Q_l, F = (size_t)g->F_l, Vp = (size_t)g->Vl;
    int nhl = g->nh_l;
    size_t NH = ops->attn_state ? ops->attn_state(B, nhl, T) : (size_t)B * nhl * T;
    size_t bf = g->es;
    /* a pipeline stage's boundary tensors carry its clock after them */
    size_t tail = g->pp > 1 ? LLMT__STAGE_TAIL : 0;
    /* The buffer plan. TinyLlama-1.1B on bf16 (22 layers, C 2048, Q 2560,
     * F 5632, V 32000, B 4 x T 2048: N 8192), MiB; lifetime: R whole run,
     * K per layer kept for its backward (x 22; one set under full
     * recompute), S scratch (one, reused by every layer), P per step:
     *   master, grad, m, v (fp32)  4 x 4196   R   param (bf16)     2098 R
     *   resid[0..L] N x C           23 x 32   K   lnfm, lnfr      2 x 1/32 P
     *   qkv (q, k roped; v)             40   K   logits (dlogits)  500 P
     *   atty 32, lse 1, res2 32         65   K   dres, dtmp      32+32 S
     *   fch (gate), fch3 (up)       2 x 88   K   dfch, dfch3, dfchg  3 x 88 S
     *   ln1m/r, ln2m/r (rstd)       4 x 1/32 K   dqkv: in dfch (Q <= F)  S
     *   nrmx (ln1, ln2 or lnf output)   32   S
     * A layer keeps what flash-attention training must: its norms'
     * inputs (resid[l], res2) and statistics, q, k, v, the attention
     * output and its log-sum-exp, SwiGLU's gate and up (281 MiB here).
     * Made again in the backward instead of kept: the norms' outputs (a
     * norm over the kept input and rstd, into nrmx) and SwiGLU's output
     * (into dfch); dq, dk, dv take dfch's memory after the MLP backward:
     * 22 x (32 + 32 + 88) + 32 (lnf) + 40 (dqkv) - 32 (nrmx) = 3384 MiB
     * less (6768 at B 8), activations 11165 -> 7781 MiB at B 4. GPT-2
     * keeps fc's GELU output (fchg): its GEMM's epilogue makes it. */
#define DA(ptr, bytes, act)                                              \
    do {                                                                 \
        if ((s = dalloc(g, (void **)&(ptr), (bytes), (act))) != LLMT_OK) \
            goto fail;                                                   \
    } while (0)
    if (g->alias)
        g->master = m->data;
    else
        DA(g->master, P * 4, 0);
    DA(g->grad, P * 4, 0);
    DA(g->mom1, P * 4, 0);
    DA(g->mom2, P * 4, 0);
    if (f32) g->param = g->master;
    else DA(g->param, P * bf, 0);
    for (int k = 0; k < (g->nslot ? g->nslot : 1); k++) {
        if (k > 0 && (s = new_slot(g)) != LLMT_OK)
            goto fail;
        for (int l = g->ca0; l <= g->ca1; l++)
            DA(g->resid[l], Nr * C * bf + tail, 1);
        for (int l = 0; l < g->nacts; l++) {
            if (g->nacts > 1 && (l < g->ca0 || l >= g->ca1))
                continue; /* another pipeline stage's layer (or chunk's) */
            dlayer *a = &g->L[l];
            DA(a->ln1m, Nr * 4, 1);
            DA(a->ln1r, Nr * 4, 1);
            DA(a->qkv, N * Q * bf, 1);
            if (g->selective && l > g->ca0) { /* one attention core output for all */
                a->atty = g->L[g->ca0].atty;
                a->lse = g->L[g->ca0].lse;
            } else {
                DA(a->atty, N * Ca * bf, 1);
                DA(a->lse, NH * 4, 1);
            }
            DA(a->res2, Nr * C * bf, 1);
            DA(a->ln2m, Nr * 4, 1);
            DA(a->ln2r, Nr * 4, 1);
            if (!set_dense(g, l))
                continue; /* MoE layers only: no dense MLP's outputs */
            DA(a->fch, N * F * bf, 1);
            if (g->llama)
                DA(a->fch3, N * F * bf, 1);
            else /* GPT-2's GELU output: fused into fc's GEMM, kept */
                DA(a->fchg, N * F * bf, 1);
        }
        if (g->nch > 1)
            alias_chunks(g);
        if (g->last) { /* the final norm and the head: the last pipeline stage */
            DA(g->lnfm, Nr * 4, 1);
            DA(g->lnfr, Nr * 4, 1);
            DA(g->logits, N * Vp * bf, 1);
        }
        if (g->nslot)
            save_slot(g, k);
    }
    /* per step, not per micro-batch; with the sum of squares and the fp8
     * amaxes after them, counted as activations as before (io_layout) */
    DA(g->losses, g->dn_n * 4, 0);
    g->sums = g->losses + g->dn_sum;
    g->f8amax = f8 ? g->losses + g->dn_am : NULL;
    g->act_bytes += 4 + (g->dn_n - g->dn_am) * 4;
    DA(g->dres, Nr * C * bf + tail, 1);
    if (sp) {
        DA(g->gat, N * C * bf, 1);
        g->nrmoff = malloc(((size_t)L * 4 + 2) * sizeof *g->nrmoff);
        g->ptok = malloc(N * sizeof *g->ptok);
        g->ptgt = malloc(N * sizeof *g->ptgt);
        if (g->nrmoff)
            g->nnrmp = norm_params(g, g->nrmoff);
        if (g->nrmoff)
            DA(g->nrmbuf, (size_t)g->nnrmp * C * 4, 0);
        if (!g->nrmoff || !g->ptok || !g->ptgt) {
            s = llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
            goto fail;
        }
    }
    DA(g->dtmp, N * C * bf, 1);
    DA(g->nrmx, Nr * C * bf, 1);
    if (any_dense(g)) { /* a dense MLP's backward scratch */
        DA(g->dfch, N * F * bf, 1);
        if (g->llama) {
            DA(g->dfch3, N * F * bf, 1);
            DA(g->dfchg, N * F * bf, 1);
        }
    }
    /* the attention backward's dq, dk, dv run after the MLP backward is
     * done with dfch: its memory when it holds them */
    if (g->dfch && Q <= F)
        g->dqkv = g->dfch;
    else
        DA(g->dqkv, N * Q * bf, 1);
    /* inputs, targets and the fp8 scales, the scales counted as
     * activations as before (io_layout) */
    DA(g->tok, g->up_n * 4, 0);
    g->tgt = g->tok + (size_t)A * N;
    if (f8) {
        g->f8scale = (float *)(void *)(g->tok + g->up_sc);
        g->f8inv = (float *)(void *)(g->tok + g->up_inv);
        g->act_bytes += (size_t)3 * L * NLIN * (1 + F8_STRIDE) * 4;
    }
    if (tps > 1) {
        DA(g->xmx, N * 4, 1);
        DA(g->xst, 2 * N * 4, 1);
        if (g->kvrep) { /* every kv head's k and v rows (and biases) */
            g->kvn = 2 * (size_t)c->kv_heads * hd * (C + 1);
            DA(g->kvbuf, g->kvn * 4, 0);
        }
    }
    tp_norm_runs(g);
    if (fp8 && fp8->on && f32) {
        s = llmt__err_set(e, LLMT_ERR_UNSUPPORTED, "trainer: fp8: the %s backend stores "
                          "fp32; fp8 GEMMs need a bf16 backend (device cuda)", ops->name);
        goto fail;
    }
    if (fp8 && fp8->on && !fp8_ops(ops)) {
        s = llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                          "trainer: fp8: the %s backend has no "
                          "fp8 ops (cast-transpose, GELU backward)",
                          ops->name);
        goto fail;
    }
    if (fp8 && fp8->on) {
        g->fp8 = 1;
        g->f8g0 = 2 * L * NLIN;
        g->nf8 = 3 * L * NLIN;
        /* the largest input, output and weight of a block Linear */
        size_t in = 0, outw = 0, wn = 0, nf = (size_t)g->nf8;
        for (int i = 0; i < L * NLIN; i++) {
            const llmt__linear *q = &g->lin[i];
            in = (size_t)q->in > in ? (size_t)q->in : in;
            outw = (size_t)q->out > outw ? (size_t)q->out : outw;
            wn = (size_t)q->in * q->out > wn ? (size_t)q->in * q->out : wn;
        }
        /* a tensor no forward records (an fp8 slot left unused: GPT-2's
         * fc3, a Linear whose dims keep it in bf16, another pipeline
         * stage's layers) keeps amax 0, which the recipe skips and the
         * maxima over the groups leave to the rank that has it */
        if ((s = ops->memset0(g->d, g->f8amax, ((size_t)A + 1) * nf * 4)) != LLMT_OK) {
            s = llmt__err_set(e, s, "trainer: fp8: %s", ops->last_error(g->d));
            goto fail;
        }
        DA(g->qx, N * in, 1);
        DA(g->qw, wn, 1);
        DA(g->qg, N * outw, 1);
        DA(g->qgt, N * outw, 1);
        g->h8amax = calloc((size_t)A * nf, sizeof(float));
        g->h8state = calloc(nf * ((size_t)fp8->history + 2), sizeof(float));
        if (!g->h8amax || !g->h8state) {
            s = llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
            goto fail;
        }
        unsigned char *e5 = calloc(nf, 1);
        if (!e5) {
            s = llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
            goto fail;
        }
        for (size_t i = 0; i < nf; i++)
            e5[i] = (unsigned char)llmt__fp8_format_e5m2(fp8->format, (int)i >= g->f8g0);
        s = llmt__fp8_delayed_create(NULL, g->nf8, fp8->history, fp8->margin,
                                     LLMT__FP8_AMAX_MAX, e5, &g->rec);
        free(e5);
        if (s != LLMT_OK) {
            s = llmt__err_set(e, s, "trainer: fp8: amax history %d, margin %d: bad "
                              "recipe settings", fp8->history, fp8->margin);
            goto fail;
        }
        if ((s = put_scales(g)) != LLMT_OK) goto fail;
        if ((s = moe_fp8(g)) != LLMT_OK)
            goto fail;
    }
#undef DA
    if (g->alias) {
        g->hg = g->grad;
        g->hm = g->mom1;
        g->hv = g->mom2;
    } else if (g->ep > 1 && ops->host_memory) {
        /* as llmt__devtrain_set_ep's: host copies left untouched (zero
         * pages) but for this rank's expert rows; pinning is moot here */
        g->pinned = 0;
        g->hg = calloc(m->total ? m->total : 1, sizeof(float));
        g->hm = calloc(m->total ? m->total : 1, sizeof(float));
        g->hv = calloc(m->total ? m->total : 1, sizeof(float));
        if (!g->hg || !g->hm || !g->hv) {
            s = llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY,
                              "trainer: no memory for the host copies");
            goto fail;
        }
    } else if ((s = host_mirror(g, &g->hg, m->total)) != LLMT_OK ||
               (s = host_mirror(g, &g->hm, m->total)) != LLMT_OK ||
               (s = host_mirror(g, &g->hv, m->total)) != LLMT_OK)
        goto fail;
    if ((s = llmt__devtrain_upload(g, m->data, NULL, NULL)) != LLMT_OK) goto fail;
    *out = g;
    return LLMT_OK;
fail:
    llmt__devtrain_destroy(g);
    return s;
}

int llmt__devtrain_fp8_state(const llmt__devtrain *g, const float **scales, int *n, int *gemms,
                             int *bwd_gemms)
{
    if (!g->fp8) return 0;
    *scales = llmt__fp8_delayed_scales(g->rec);
    *n = g->nf8;
    *gemms = g->fp8_gemms;
    *bwd_gemms = g->fp8_bwd_gemms;
    return 1;
}

float *llmt__devtrain_fp8_export(llmt__devtrain *g, int64_t shape[2])
{
    if (!g->fp8) return NULL;
    llmt__fp8_delayed_export(g->rec, g->h8state);
    shape[0] = g->nf8;
    shape[1] = llmt__fp8_delayed_history(g->rec) + 2;
    return g->h8state;
}

llmt_status llmt__devtrain_fp8_import(llmt__devtrain *g, const float *in)
{
    if (!g->fp8) return LLMT_OK;
    llmt_status s = llmt__fp8_delayed_import(g->rec, in);
    if (s != LLMT_OK)
        return llmt__err_set(g->e, s, "trainer: the checkpoint's fp8 scaling state is "
                             "not valid (a scale not finite and positive, or an amax "
                             "count or value out of range)");
    return put_scales(g);
}

float *llmt__devtrain_host_grads(llmt__devtrain *g) { return g->hg; }
float *llmt__devtrain_host_m(llmt__devtrain *g) { return g->hm; }
int llmt__devtrain_shard(const llmt__devtrain *g, int i, int *cols, int64_t *R, int64_t *K,
                         int64_t lo[3], int64_t n[3], int own[3])
{
    const tshard *s = &g->sh[i];
    *cols = s->kind == SH_COLS;
    *R = s->R;
    *K = s->K;
    for (int j = 0; j < s->nseg; j++) {
        lo[j] = s->lo[j];
        n[j] = s->n[j];
        own[j] = s->own[j];
    }
    return s->nseg;
}
float *llmt__devtrain_host_v(llmt__devtrain *g) { return g->hv; }
const char *llmt__devtrain_backend(const llmt__devtrain *g) { return g->op->name; }

void llmt__devtrain_memory(const llmt__devtrain *g, llmt__devtrain_mem *out)
{
    /* and the MoE layers' (moe_net.h), whose host part is in use beside
     * the backend's buffers too (so that in use less the activations
     * stays the parameters' and optimizer's state) */
    size_t moe = 0, host = 0;
    if (g->moe)
        llmt__moe_net_mem(g->moe, &moe, &host);
    out->activations = g->act_bytes + moe;
    g->op->mem_stats(g->d, &out->in_use, &out->peak);
    out->in_use += host;
    out->peak += host;
}

/* Parameter i's shard between the host's full tensor and the device
 * (to_dev: upload, else download); a download copies only the segments
 * this rank owns. */
static llmt_status shard_copy(llmt__devtrain *g, int i, float *dev, float *host, int to_dev)
{
    const tshard *s = &g->sh[i];
    float *h = host + g->m->params[i].offset, *d = dev + g->doff[i];
    for (int j = 0; j < s->nseg; j++) {
        size_t K = (size_t)s->K, lo = (size_t)s->lo[j], n = (size_t)s->n[j];
        if (s->kind == SH_COLS) { /* a row split Linear: every row's columns */
            for (size_t r = 0; r < (size_t)s->R; r++)
                if (to_dev)
                    S(g->op->h2d(g->d, d + r * n, h + r * K + lo, n * 4), "upload");
                else
                    S(g->op->d2h(g->d, h + r * K + lo, d + r * n, n * 4), "download");
        } else if (to_dev) {
            S(g->op->h2d(g->d, d, h + lo * K, n * K * 4), "upload");
        } else if (s->own[j]) {
            S(g->op->d2h(g->d, h + lo * K, d, n * K * 4), "download");
        }
        d += n * K;
    }
    return LLMT_OK;
}

/* Tensor parallelism: the host's full array from every rank's shards:
 * each writes what it owns over zeros, the group sums (collective). */
static llmt_status tp_gather(llmt__devtrain *g, float *host, const float *dev)
{
    const llmt_model *m = g->m;
    llmt_status s;
    /* a pipeline stage gathers into a scratch array and copies out only
     * the tensors it owns: the host's others stay as they are */
    float *to = host;
    if (g->pp > 1 && !(to = malloc(m->total * sizeof(float))))
        return llmt__err_set(g->e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    memset(to, 0, m->total * sizeof(float));
    s = LLMT_OK;
    for (int i = 0; i < m->nparams && s == LLMT_OK; i++)
        s = shard_copy(g, i, (float *)dev, to, 0);
    if (s == LLMT_OK)
        s = g->hook(g->hook_ctx, LLMT__AT_HOST_SUM, 1, NULL, to, m->total, 1);
    for (int i = 0; to != host && s == LLMT_OK && i < m->nparams; i++) {
        /* the stage's tensors (every tp rank holds shards of them), but
         * not the last stage's copy of a tied wte (the first's is it) */
        size_t off = m->params[i].offset;
        if (g->sh[i].numel > 0 && !(g->tiedcp && !g->first && off == m->wte))
            memcpy(host + m->params[i].offset, to + m->params[i].offset,
                   m->params[i].numel * sizeof(float));
    }
    if (to != host)
        free(to);
    return s;
}

static llmt_status ep_gather(llmt__devtrain *g, float *host, const float *dev);

/* One fp32 host array in the host layout <-> the device layout. */
static llmt_status put(llmt__devtrain *g, float *dev, const float *host)
{
    const llmt_model *m = g->m;
    if (dev == host) return LLMT_OK; /* aliased: the same memory */
    if (g->tp > 1 || g->pp > 1 || g->ep > 1) {
        llmt_status s;
        S(g->op->memset0(g->d, dev, g->P * 4), "memset");
        for (int i = 0; i < m->nparams; i++)
            if ((s = shard_copy(g, i, dev, (float *)host, 1)) != LLMT_OK)
                return s;
        return LLMT_OK;
    }
    if (g->alias) {
        S(g->op->h2d(g->d, dev, host, g->P * 4), "upload");
        return LLMT_OK;
    }
    S(g->op->memset0(g->d, dev, g->P * 4), "memset");
    for (int i = 0; i < m->nparams; i++) {
        const llmt__param *p = &m->params[i];
        S(g->op->h2d(g->d, dev + g->doff[i], host + p->offset, p->numel * 4), "upload");
    }
    return LLMT_OK;
}

static llmt_status get_own(llmt__devtrain *g, float *host, const float *dev)
{
    const llmt_model *m = g->m;
    if (g->tp > 1)
        return tp_gather(g, host, dev);
    if (g->pp > 1 || g->ep > 1) { /* this stage's parameters, this EP rank's
                                   * experts; the others' stay as they are */
        llmt_status s;
        for (int i = 0; i < m->nparams; i++)
            if ((s = shard_copy(g, i, (float *)dev, host, 0)) != LLMT_OK)
                return s;
        return LLMT_OK;
    }
    if (g->alias) {
        S(g->op->d2h(g->d, host, dev, g->P * 4), "download");
        return LLMT_OK;
    }
    for (int i = 0; i < m->nparams; i++) {
        const llmt__param *p = &m->params[i];
        S(g->op->d2h(g->d, host + p->offset, dev + g->doff[i], p->numel * 4), "download");
    }
    return LLMT_OK;
}

/* Under expert parallelism the parameters' download is collective over
 * the EP group: the other EP ranks' expert rows are gathered too (the
 * model's tensors are whole after a sync). The gradients' and moments'
 * host copies take this rank's rows only, as ZeRO's shares do: what
 * checkpoints save of them, and the others' rows take no memory there. */
static llmt_status get(llmt__devtrain *g, float *host, const float *dev)
{
    if (dev == host)
        return LLMT_OK;
    llmt_status s = get_own(g, host, dev);
    return s == LLMT_OK && g->ep > 1 && host == g->m->data ? ep_gather(g, host, dev) : s;
}

llmt_status llmt__devtrain_download_own(llmt__devtrain *g)
{
    return g->master == g->m->data ? LLMT_OK : get_own(g, g->m->data, g->master);
}

llmt_status llmt__devtrain_upload(llmt__devtrain *g, const float *params, const float *m,
                                  const float *v)
{
    llmt_status s;
    if ((s = put(g, g->master, params)) != LLMT_OK) return s;
    if (g->param != (void *)g->master)
        S(g->op->f32_to_bf16(g->d, g->param, g->master, g->P), "bf16 copy");
    if (!g->mom1) { /* sharded: data parallelism holds them */
    } else if (m && v) {
        if ((s = put(g, g->mom1, m)) != LLMT_OK) return s;
        if ((s = put(g, g->mom2, v)) != LLMT_OK) return s;
    } else {
        S(g->op->memset0(g->d, g->mom1, g->P * 4), "memset");
        S(g->op->memset0(g->d, g->mom2, g->P * 4), "memset");
    }
    S(g->op->sync(g->d), "upload");
    return LLMT_OK;
}

llmt_status llmt__devtrain_download(llmt__devtrain *g, int params, int moments, int grads)
{
    llmt_status s = LLMT_OK;
    if (params) s = get(g, g->m->data, g->master);
    if (s == LLMT_OK && moments && g->mom1) s = get(g, g->hm, g->mom1);
    if (s == LLMT_OK && moments && g->mom1) s = get(g, g->hv, g->mom2);
    if (s == LLMT_OK && grads) s = get(g, g->hg, g->grad);
    return s;
}

/* ---- forward and backward */

static llmt_status mm(llmt__devtrain *g, int ta, int tb, int M, int N, int K, const void *A,
                      const void *B, void *C, int cf32, float beta, llmt__gemm_epi epi,
                      const void *bias, void *aux)
{
    llmt__gemm_args a =
        llmt__gemm_plain(g->es != sizeof(float), ta, tb, M, N, K, A, B, C, cf32, beta);
    a.epi = epi;
    a.bias = bias;
    a.aux = aux;
    S(g->op->gemm(g->d, &a), "gemm");
    return LLMT_OK;
}

/* Does Linear `slot` (IC x OC) run in fp8? cuBLASLt's fp8 GEMMs want
 * dims (leading dimensions) that are multiples of 16. */
static int fp8_on(const llmt__devtrain *g, int slot, int IC, int OC)
{
    return g->fp8 && slot >= 0 && IC % 16 == 0 && OC % 16 == 0;
}

/* An fp8 GEMM out[M,Nc] (+)= dequant(a b^T), a [M,K] and b [Nc,K] codes
 * (a E5M2 when a5), each with its tensor's dequantisation scale. */
static llmt_status mm_fp8(llmt__devtrain *g, int M, int Nc, int K, const uint8_t *a, size_t ta,
                          int a5, const uint8_t *b, size_t tb, void *out, int cf32, float beta)
{
    llmt__gemm_args q = llmt__gemm_fp8(M, Nc, K, a, a5, g->f8inv + ta * F8_STRIDE, b,
                                       g->f8inv + tb * F8_STRIDE, out, cf32, beta);
    S(g->op->gemm(g->d, &q), "fp8 gemm");
    return LLMT_OK;
}

/* out[N,OC] = dequant(fp8(x) fp8(W)^T) (+ bias): records both amaxes of
 * this forward, quantises with the scales the recipe chose from earlier
 * steps (delayed scaling). */
static llmt_status lin_fp8(llmt__devtrain *g, void *out, const void *x, size_t w,
                           const void *bias, int N, int IC, int OC, int slot)
{
    size_t tx = 2 * (size_t)slot, tw = tx + 1;
    float *am = g->f8amax + (size_t)g->amax_row * g->nf8;
    llmt_status s = fresh_scales(g);
    if (s != LLMT_OK)
        return s;
    /* amax and codes from one read (IC, OC: multiples of 16) */
    S(g->op->cast_transpose_fp8(g->d, g->qx, NULL, am + tx, x, g->f8scale + tx, N, IC, 0),
      "fp8 quantise");
    S(g->op->cast_transpose_fp8(g->d, g->qw, NULL, am + tw, pw(g, w), g->f8scale + tw, OC, IC,
                                0),
      "fp8 quantise");
    if ((s = mm_fp8(g, N, OC, IC, g->qx, tx, 0, g->qw, tw, out, 0, 0.0f)) != LLMT_OK)
        return s;
    if (bias)
        S(g->op->bias_add(g->d, out, bias, N, OC), "bias");
    g->fp8_gemms++;
    return LLMT_OK;
}

/* The collective at a named point of a split op (device.h); nothing for
 * an unsplit one, which is every op today. */
static llmt_status point(llmt__devtrain *g, llmt__split split, llmt__point at, int dir,
                         const llmt__linear *L, void *buf, size_t rows, size_t cols)
{
    if (split == LLMT__SPLIT_NONE)
        return LLMT_OK;
    if (!g->hook)
        return llmt__err_set(g->e, LLMT_ERR_UNSUPPORTED,
                             "trainer: %s is split but the engine has no collective for "
                             "it (tensor parallelism is not implemented yet)",
                             L ? L->name : "the vocabulary");
    return g->hook(g->hook_ctx, at, dir, L, buf, rows, cols);
}

/* Sequence parallelism: this rank's block of an N-row buffer of `cols`
 * (without it, the whole buffer). */
static void *blk(const llmt__devtrain *g, void *buf, int N, int cols)
{
    return g->sp ? at(g, buf, (size_t)g->tpr * (size_t)(N / g->tp) * (size_t)cols) : buf;
}

/* Sequence parallelism: this rank's N / tp rows x gathered over the
 * group into gat (N rows), the collective of point `pt`. */
static llmt_status sp_gather(llmt__devtrain *g, llmt__point pt, int dir, const llmt__linear *L,
                             const void *x, int N, int cols)
{
    size_t n = (size_t)(N / g->tp) * (size_t)cols;
    S(g->op->d2d(g->d, blk(g, g->gat, N, cols), x, n * g->es), "copy");
    return g->hook(g->hook_ctx, pt, dir, L, g->gat, (size_t)N, (size_t)cols);
}

/* The whole input of column split Linear L (and of the one sharing it),
 * given this rank's rows x: x itself, or with sequence parallelism
 * gathered into gat. The backward gathers again for the weight gradient
 * rather than keep the whole input (Megatron-LM's choice: the N x C
 * saved per Linear is what sequence parallelism divides by tp). */
static llmt_status col_input(llmt__devtrain *g, const llmt__linear *L, const void *x, int N,
                             const void **whole)
{
    *whole = x;
    if (!g->sp)
        return LLMT_OK;
    *whole = g->gat;
    return sp_gather(g, LLMT__AT_COLUMN_IN, 1, L, x, N, L->in);
}

/* Linear forward: out[N,out] = x[N,in] W[out,in]^T (+ bias); fp8 for the
 * blocks' Linears when on. With L->gelu, out = gelu(that) and the
 * pre-activation goes to `pre`. A column split Linear's x is whole
 * (sequence parallel: col_input gathered it); a row split one's out is
 * summed over the group (sequence parallel: only this rank's rows, at
 * blk(out)). */
static llmt_status lin(llmt__devtrain *g, const llmt__linear *L, void *out, void *pre,
                       const void *x, int N)
{
    llmt_status s;
    int IC = L->in, OC = L->out;
    if (L->split == LLMT__SPLIT_COLUMN && !L->shares_input && !g->sp &&
        (s = point(g, L->split, LLMT__AT_COLUMN_IN, 1, L, (void *)x, N, IC)) != LLMT_OK)
        return s;
    /* a row split Linear's outputs are partial sums: the (whole) bias is
     * added by one rank, before the group's sum */
    const void *bias =
        L->b == NOP || (L->split == LLMT__SPLIT_ROW && g->tpr != 0) ? NULL : pw(g, L->b);
    if (L->gelu && fp8_on(g, L->fp8_slot, IC, OC)) {
        if ((s = lin_fp8(g, pre, x, L->w, bias, N, IC, OC, L->fp8_slot)) != LLMT_OK)
            return s;
        S(g->op->gelu_fwd(g->d, out, pre, (size_t)N * OC), "gelu");
    } else if (L->gelu) { /* out = gelu(x W^T + b), the pre-activation kept */
        s = mm(g, 0, 1, N, OC, IC, x, pw(g, L->w), out, 0, 0.0f, LLMT_GEMM_EPI_GELU_BIAS, bias,
               pre);
    } else if (fp8_on(g, L->fp8_slot, IC, OC)) {
        s = lin_fp8(g, out, x, L->w, bias, N, IC, OC, L->fp8_slot);
    } else {
        s = mm(g, 0, 1, N, OC, IC, x, pw(g, L->w), out, 0, 0.0f,
               bias ? LLMT_GEMM_EPI_BIAS : LLMT_GEMM_EPI_NONE, bias, NULL);
    }
    if (s == LLMT_OK && L->split == LLMT__SPLIT_ROW)
        s = point(g, L->split, LLMT__AT_ROW_OUT, 1, L, out, N, OC);
    return s;
}

/* Does Linear L's backward run in fp8? When its forward does, and the
 * weight gradient's K (the N rows) is a multiple of 16 as well. */
static int fp8_bwd_on(const llmt__devtrain *g, const llmt__linear *L, int N)
{
    return fp8_on(g, L->fp8_slot, L->in, L->out) && N % 16 == 0;
}

/* lin_bwd's GEMMs in fp8 (TransformerEngine's recipe): dout is quantised
 * with its own delayed scale (E5M2 under the hybrid format) and its amax
 * recorded in the same pass; x and W with the scales their forward used, so their codes
 * are the forward's, transposed into the layout cuBLASLt takes
 * (cast_transpose_fp8). dW (fp32) accumulates over micro-batches as the
 * bf16 path's; a GELU before the Linear multiplies dx afterwards, since
 * the fp8 GEMM has no epilogue here. */
static llmt_status lin_bwd_fp8(llmt__devtrain *g, const llmt__linear *L, void *dx, float xbeta,
                               const void *dout, const void *x, int N, const void *gelu_pre)
{
    int IC = L->in, OC = L->out;
    size_t tx = 2 * (size_t)L->fp8_slot, tw = tx + 1, tg = (size_t)g->f8g0 + L->fp8_slot;
    int g5 = llmt__fp8_delayed_e5m2(g->rec, (int)tg);
    float *am = g->f8amax + (size_t)g->amax_row * g->nf8;
    llmt_status s = fresh_scales(g);
    if (s != LLMT_OK)
        return s;
    S(g->op->cast_transpose_fp8(g->d, dx ? g->qg : NULL, x ? g->qgt : NULL, am + tg, dout,
                                g->f8scale + tg, N, OC, g5),
      "fp8 quantise");
    if (x) { /* the parameters' gradients */
        S(g->op->cast_transpose_fp8(g->d, NULL, g->qx, NULL, x, g->f8scale + tx, N, IC, 0),
          "fp8 quantise");
        if ((s = mm_fp8(g, OC, IC, N, g->qgt, tg, g5, g->qx, tx, g->grad + L->w, 1, 1.0f)) !=
            LLMT_OK)
            return s;
        g->fp8_bwd_gemms++;
        if (L->b != NOP)
            S(g->op->bias_bwd(g->d, g->grad + L->b, dout, N, OC), "bias grad");
    }
    if (!dx)
        return LLMT_OK;
    S(g->op->cast_transpose_fp8(g->d, NULL, g->qw, NULL, pw(g, L->w), g->f8scale + tw, OC, IC,
                                0),
      "fp8 quantise");
    if ((s = mm_fp8(g, N, IC, OC, g->qg, tg, g5, g->qw, tw, dx, 0, gelu_pre ? 0.0f : xbeta)) !=
        LLMT_OK)
        return s;
    g->fp8_bwd_gemms++;
    if (gelu_pre)
        S(g->op->gelu_bwd_mul(g->d, dx, gelu_pre, (size_t)N * IC), "gelu backward");
    return LLMT_OK;
}

/* Linear backward: dW[out,in] += dout^T x; dbias += colsum(dout);
 * dx[N,in] = dout W (beta 0) or += (beta 1), times gelu'(gelu_pre) when
 * that is given (the GELU of the Linear before, fused into the epilogue);
 * dx may be NULL, and x (no parameter gradients: a second call with x
 * makes them, for an unsplit Linear whose input is made after its dx). Sequence parallel: a row split Linear's dout is this
 * rank's rows (gathered here), a column split one's x is whole
 * (col_input) and its dx sums to this rank's rows at blk(dx). */
static llmt_status lin_bwd(llmt__devtrain *g, const llmt__linear *L, void *dx, float xbeta,
                           const void *dout, const void *x, int N, const void *gelu_pre)
{
    llmt_status s;
    int IC = L->in, OC = L->out;
    if (L->split == LLMT__SPLIT_ROW && g->sp) {
        if ((s = sp_gather(g, LLMT__AT_ROW_OUT, -1, L, dout, N, OC)) != LLMT_OK)
            return s;
        dout = g->gat;
    } else if (L->split == LLMT__SPLIT_ROW) {
        if ((s = point(g, L->split, LLMT__AT_ROW_OUT, -1, L, (void *)dout, N, OC)) != LLMT_OK)
            return s;
    }
    if (fp8_bwd_on(g, L, N)) {
        s = lin_bwd_fp8(g, L, dx, xbeta, dout, x, N, gelu_pre);
        if (s == LLMT_OK && dx && L->split == LLMT__SPLIT_COLUMN && !L->shares_input)
            s = point(g, L->split, LLMT__AT_COLUMN_IN, -1, L, dx, N, IC);
        return s;
    }
    if (x && (s = mm(g, 1, 0, OC, IC, N, dout, x, g->grad + L->w, 1, 1.0f, LLMT_GEMM_EPI_NONE,
                     NULL, NULL)) != LLMT_OK)
        return s;
    if (x && L->b != NOP)
        S(g->op->bias_bwd(g->d, g->grad + L->b, dout, N, OC), "bias grad");
    if (!dx)
        return LLMT_OK;
    if (gelu_pre)
        s = mm(g, 0, 0, N, IC, OC, dout, pw(g, L->w), dx, 0, 0.0f, LLMT_GEMM_EPI_DGELU, NULL,
               (void *)gelu_pre);
    else
        s = mm(g, 0, 0, N, IC, OC, dout, pw(g, L->w), dx, 0, xbeta, LLMT_GEMM_EPI_NONE, NULL,
               NULL);
    if (s == LLMT_OK && L->split == LLMT__SPLIT_COLUMN && !L->shares_input)
        s = point(g, L->split, LLMT__AT_COLUMN_IN, -1, L, dx, N, IC);
    return s;
}

/* Learned positions under context parallelism: this rank's T rows of a
 * sequence are two runs of consecutive global positions (cp.h), each
 * looked up from wpe at its first position (with a vocabulary split, by
 * tensor parallel rank 0 only, as embed_fwd's). buf: the B x T rows the
 * forward writes or the backward reads (sequence parallel: the whole
 * rows in gat, as embed_fwd and embed_bwd use them). */
static llmt_status cp_embed(llmt__devtrain *g, const int32_t *tok, int B, int T, int fwd,
                            void *buf)
{
    const llmt__vocab *E = &g->voc;
    const int32_t *pos = llmt__cp_pos(g->cp);
    int Tc = T / 2;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < 2; h++) {
            size_t row = (size_t)b * T + (size_t)h * Tc, p0 = (size_t)pos[h * Tc] * E->C;
            void *o = at(g, buf, row * E->C), *d = o;
            int lo = E->lo, Vl = E->hi - E->lo;
            if (fwd && E->split != LLMT__SPLIT_NONE)
                S(g->op->embedding_part_fwd(g->d, o, tok + row, pw(g, E->wte),
                                            g->tpr ? NULL : pw(g, E->wpe + p0), 1, Tc, E->C, lo,
                                            Vl),
                  "embedding");
            else if (fwd)
                S(g->op->embedding_fwd(g->d, o, tok + row, pw(g, E->wte), pw(g, E->wpe + p0), 1,
                                       Tc, E->C),
                  "embedding");
            else if (E->split != LLMT__SPLIT_NONE)
                S(g->op->embedding_part_bwd(g->d, g->grad + E->wte, g->grad + E->wpe + p0, d,
                                            tok + row, 1, Tc, E->C, lo, Vl),
                  "embedding backward");
            else
                S(g->op->embedding_bwd(g->d, g->grad + E->wte, g->grad + E->wpe + p0, d,
                                       tok + row, 1, Tc, E->C),
                  "embedding backward");
        }
    return LLMT_OK;
}

/* The vocabulary op: embedding forward and backward, and the loss. */
static llmt_status embed_fwd(llmt__devtrain *g, const int32_t *tok, int B, int T)
{
    const llmt__vocab *E = &g->voc;
    /* sequence parallel: every row's partial sum, then this rank's rows */
    void *out = g->sp ? g->gat : g->resid[0];
    if (g->cp && E->wpe != NOP) { /* by chunk of positions (cp.h), the same ops */
        llmt_status cs = cp_embed(g, tok, B, T, 1, out);
        if (cs != LLMT_OK)
            return cs;
    } else if (E->split != LLMT__SPLIT_NONE) /* rows [lo, hi); wpe added once, by rank 0 */
        S(g->op->embedding_part_fwd(g->d, out, tok, pw(g, E->wte),
                                    E->wpe == NOP || g->tpr ? NULL : pw(g, E->wpe), B, T, E->C,
                                    E->lo, E->hi - E->lo),
          "embedding");
    else
        S(g->op->embedding_fwd(g->d, g->resid[0], tok, pw(g, E->wte),
                               E->wpe == NOP ? NULL : pw(g, E->wpe), B, T, E->C),
          "embedding");
    llmt_status s = point(g, E->split, LLMT__AT_EMBED_OUT, 1, NULL, out, (size_t)B * T, E->C);
    if (s == LLMT_OK && g->sp)
        S(g->op->d2d(g->d, g->resid[0], blk(g, out, B * T, E->C),
                     (size_t)B * T / (size_t)g->tp * (size_t)E->C * g->es),
          "copy");
    return s;
}

static llmt_status embed_bwd(llmt__devtrain *g, const int32_t *tok, int B, int T)
{
    const llmt__vocab *E = &g->voc;
    float *dwpe = E->wpe == NOP ? NULL : g->grad + E->wpe;
    const void *dout = g->dres;
    if (g->sp) { /* every rank's rows of it */
        llmt_status s = sp_gather(g, LLMT__AT_EMBED_OUT, -1, NULL, g->dres, B * T, E->C);
        if (s != LLMT_OK)
            return s;
        dout = g->gat;
    }
    if (g->cp && E->wpe != NOP)
        return cp_embed(g, tok, B, T, 0, (void *)dout);
    if (E->split != LLMT__SPLIT_NONE) /* dout is whole: wpe's gradient is too */
        S(g->op->embedding_part_bwd(g->d, g->grad + E->wte, dwpe, dout, tok, B, T, E->C, E->lo,
                                    E->hi - E->lo),
          "embedding backward");
    else
        S(g->op->embedding_bwd(g->d, g->grad + E->wte, dwpe, g->dres, tok, B, T, E->C),
          "embedding backward");
    return LLMT_OK;
}

/* Per-token losses of N rows of logits (and their gradient in place when
 * dloss != 0). A vocabulary split reduces its columns to the row max,
 * then the sum of exp and the target's logit, each combined over the
 * group (LLMT__AT_LOSS_*): N, then 2N floats, never the full logits. */
static llmt_status xent(llmt__devtrain *g, float *losses, const int32_t *tgt, int N,
                        float dloss)
{
    const llmt__vocab *E = &g->voc;
    if (E->split != LLMT__SPLIT_NONE) {
        int Vl = E->hi - E->lo;
        llmt_status s;
        S(g->op->xent_part_max(g->d, g->xmx, g->logits, N, Vl, g->nv), "cross-entropy");
        if ((s = point(g, E->split, LLMT__AT_LOSS_MAX, 1, NULL, g->xmx, (size_t)N, 1)))
            return s;
        S(g->op->xent_part_sum(g->d, g->xst, g->logits, g->xmx, tgt, N, Vl, g->nv, E->lo),
          "cross-entropy");
        if ((s = point(g, E->split, LLMT__AT_LOSS_SUM, 1, NULL, g->xst, 2, (size_t)N)))
            return s;
        S(g->op->xent_part_fin(g->d, losses, g->logits, g->xmx, g->xst, tgt, N, Vl, g->nv,
                               E->lo, dloss),
          "cross-entropy");
        return LLMT_OK;
    }
    S(g->op->softmax_xent(g->d, losses, g->logits, tgt, N, E->V, E->Vp, dloss),
      "softmax cross-entropy");
    return LLMT_OK;
}

static llmt_status norm_fwd(llmt__devtrain *g, void *out, float *mean, float *rstd,
                            const void *x, size_t w, size_t b, int N)
{
    const llmt_model_config *c = &g->m->cfg;
    if (g->llama)
        S(g->op->rmsnorm_fwd(g->d, out, rstd, x, pw(g, w), N, c->width, c->norm_eps),
          "rmsnorm");
    else
        S(g->op->layernorm_fwd(g->d, out, mean, rstd, x, pw(g, w), b == NOP ? NULL : pw(g, b),
                               N, c->width, c->norm_eps),
          "layernorm");
    return LLMT_OK;
}

static llmt_status norm_bwd(llmt__devtrain *g, void *dinp, const void *dout, const void *x,
                            const float *mean, const float *rstd, size_t w, size_t b, int N)
{
    int C = g->m->cfg.width;
    if (g->llama)
        S(g->op->rmsnorm_bwd(g->d, dinp, g->grad + w, dout, x, pw(g, w), rstd, N, C),
          "rmsnorm backward");
    else
        S(g->op->layernorm_bwd(g->d, dinp, g->grad + w, b == NOP ? NULL : g->grad + b, dout, x,
                               pw(g, w), mean, rstd, N, C),
          "layernorm backward");
    return LLMT_OK;
}

/* One layer's shapes and buffers, for its forward and backward. */
typedef struct lctx {
    const llmt_model_config *c;
    const llmt__layer_offs *w; /* device offsets of its parameters */
    const llmt__linear *lin;   /* its Linears (NLIN) */
    dlayer *a;                 /* its activations */
    int N, C, F, Q, nh, nkv, hd;
    int Nr; /* rows of the residual stream here (sequence parallel: N / tp) */
} lctx;

static lctx layer_ctx(const llmt__devtrain *g, int l, int B, int T)
{
    const llmt_model *m = g->m;
    lctx x = {&m->cfg,
              &g->lay[l],
              &g->lin[(size_t)l * NLIN],
              &g->L[g->nacts == 1 ? 0 : l],
              B * T,
              m->cfg.width,
              g->F_l,
              g->Q_l,
              g->nh_l,
              g->nkv_l,
              m->head_dim,
              g->sp ? B * T / g->tp : B * T};
    return x;
}

/* The attention core of a layer: softmax(q k^T) v from its qkv (roped
 * already), into atty and the saved state. Selective recompute re-runs
 * just this before the layer's backward. */
/* RoPE of n heads of hd in the B x T rows of x (stride Q); context
 * parallel: at this rank's global positions. */
/* This engine's context parallel state, bound to its table and memory:
 * every path that runs attention comes here (a pipeline stage's pass and
 * recompute do not go through forward(), and an engine made again after
 * an attach may have left the state bound to the old one). */
static llmt__cp *cp_here(llmt__devtrain *g)
{
    if (g->cp)
        llmt__cp_bind(g->cp, g->op, g->d);
    return g->cp;
}

static llmt_status rope(llmt__devtrain *g, void *x, int B, int T, int n, size_t Q, float theta,
                        int inverse)
{
    if (cp_here(g))
        return llmt__cp_rope(g->cp, x, B, T, n, g->m->head_dim, Q, theta, inverse);
    S(g->op->rope(g->d, x, B, T, n, g->m->head_dim, Q, theta, inverse),
      inverse ? "rope backward" : "rope");
    return LLMT_OK;
}

static llmt_status attn_core(llmt__devtrain *g, const lctx *L, int B, int T)
{
    dlayer *a = L->a;
    int nh = L->nh, nkv = L->nkv, hd = L->hd;
    const void *q = a->qkv, *k = at(g, q, (size_t)nh * hd), *v = at(g, k, (size_t)nkv * hd);
    if (cp_here(g)) /* the whole sequence's keys, from every rank of the group */
        return llmt__cp_attn_fwd(g->cp, a->atty, a->lse, q, (size_t)L->Q, B, T, nh, nkv, hd);
    S(g->op->attention_fwd(g->d, a->atty, a->lse, q, k, v, (size_t)L->Q, B, T, nh, nkv, hd),
      "attention");
    return LLMT_OK;
}

static llmt_status layer_fwd(llmt__devtrain *g, int l, int B, int T)
{
    const lctx L = layer_ctx(g, l, B, T);
    const llmt_model_config *c = L.c;
    const llmt__layer_offs *w = L.w;
    dlayer *a = L.a;
    int N = L.N, C = L.C, F = L.F, Q = L.Q, nh = L.nh, nkv = L.nkv, Nr = L.Nr;
    const void *x = g->resid[l], *in;
    llmt_status s;
#define R(x) do { if ((s = (x)) != LLMT_OK) return s; } while (0)
    R(norm_fwd(g, g->nrmx, a->ln1m, a->ln1r, x, w->ln1w, w->ln1b, Nr));
    R(col_input(g, &L.lin[LQKV], g->nrmx, N, &in));
    R(lin(g, &L.lin[LQKV], a->qkv, NULL, in, N));
    if (g->llama) /* k's heads follow q's in a row: one launch rotates both */
        R(rope(g, a->qkv, B, T, nh + nkv, (size_t)Q, c->rope_theta, 0));
    R(attn_core(g, &L, B, T));
    R(lin(g, &L.lin[LPROJ], g->dtmp, NULL, a->atty, N));
    S(g->op->residual_fwd(g->d, a->res2, x, blk(g, g->dtmp, N, C), (size_t)Nr * C), "residual");
    R(norm_fwd(g, g->nrmx, a->ln2m, a->ln2r, a->res2, w->ln2w, w->ln2b, Nr));
    if (w->router != NOP) { /* experts in place of the MLP (moe_net.h) */
        /* the fp8 experts read the device's scales themselves (moe_dev.c):
         * the ones the last step's recipe moved go there first, as before
         * a dense lin_fp8, for the forwards no batch's upload() precedes
         * (generate, a pipeline stage's forward-only pass) when no dense
         * Linear before ran in fp8 (tp 2 of width 48: test
         * fp8-infer-scales) */
        R(fresh_scales(g));
        /* on this rank's rows: whole under tensor parallelism, its block
         * under sequence parallelism (no gather: MoE is per token) */
        R(llmt__moe_net_fwd(g->moe, g->e, l, w, g->param, g->nrmx, blk(g, g->dtmp, N, C), Nr));
    } else {
        R(col_input(g, &L.lin[LFC], g->nrmx, N, &in));
        void *h = a->fchg; /* the MLP's activation output */
        if (g->llama) {    /* silu(gate) * up into scratch, made again in layer_bwd */
            h = g->dfch;
            R(lin(g, &L.lin[LFC], a->fch, NULL, in, N));
            R(lin(g, &L.lin[LFC3], a->fch3, NULL, in, N));
            S(g->op->swiglu_fwd(g->d, h, a->fch, a->fch3, (size_t)N * F), "swiglu");
        } else { /* fchg = gelu(ln2 W^T + b), the pre-activation kept in fch */
            R(lin(g, &L.lin[LFC], a->fchg, a->fch, in, N));
        }
        R(lin(g, &L.lin[LFCP], g->dtmp, NULL, h, N));
    }
    S(g->op->residual_fwd(g->d, g->resid[l + 1], a->res2, blk(g, g->dtmp, N, C),
                          (size_t)Nr * C),
      "residual");
    return LLMT_OK;
}

/* dres holds d(resid[l+1]) on entry and d(resid[l]) on return. */
static llmt_status layer_bwd(llmt__devtrain *g, int l, int B, int T)
{
    const lctx L = layer_ctx(g, l, B, T);
    const llmt_model_config *c = L.c;
    const llmt__layer_offs *w = L.w;
    dlayer *a = L.a;
    int N = L.N, F = L.F, Q = L.Q, nh = L.nh, nkv = L.nkv, hd = L.hd, Nr = L.Nr;
    size_t NF = (size_t)N * F;
    const void *in;
    void *dsum = blk(g, g->dtmp, N, L.C); /* a column split Linear's summed dx */
    llmt_status s;
    /* MLP: its input, ln2's output, made again (the forward's values:
     * the same kernel on the same input; the statistics rewritten equal) */
    R(norm_fwd(g, g->nrmx, a->ln2m, a->ln2r, a->res2, w->ln2w, w->ln2b, Nr));
    if (w->router != NOP) {
        R(llmt__moe_net_bwd(g->moe, g->e, l, w, g->param, g->grad, g->nrmx, g->dres, dsum,
                            g->moe_scale));
    } else if (g->llama) {
        const llmt__linear *P = &L.lin[LFCP];
        void *dgate = g->dfch;
        if (P->split == LLMT__SPLIT_NONE) {
            /* the down projection's dx first; then one pass over gate and
             * up gives the SwiGLU backward (dgate over dx, in place) and
             * the SwiGLU output again (into dfch) for the down
             * projection's weight gradient: the separate forward pass
             * read gate and up once more */
            R(lin_bwd(g, P, g->dfchg, 0.0f, g->dres, NULL, N, NULL));
            S(g->op->swiglu_bwd(g->d, g->dfchg, g->dfch3, g->dfch, g->dfchg, a->fch, a->fch3,
                                NF),
              "swiglu backward");
            R(lin_bwd(g, P, NULL, 0.0f, g->dres, g->dfch, N, NULL));
            dgate = g->dfchg;
        } else { /* tensor parallel: each lin_bwd holds its collectives */
            /* the SwiGLU output again, into dfch until swiglu_bwd needs it */
            S(g->op->swiglu_fwd(g->d, g->dfch, a->fch, a->fch3, NF), "swiglu");
            R(lin_bwd(g, P, g->dfchg, 0.0f, g->dres, g->dfch, N, NULL));
            S(g->op->swiglu_bwd(g->d, g->dfch, g->dfch3, NULL, g->dfchg, a->fch, a->fch3, NF),
              "swiglu backward");
        }
        /* up, then gate: the fp32 trainer's order of the sum into dtmp */
        R(col_input(g, &L.lin[LFC], g->nrmx, N, &in));
        R(lin_bwd(g, &L.lin[LFC3], g->dtmp, 0.0f, g->dfch3, in, N, NULL));
        R(lin_bwd(g, &L.lin[LFC], g->dtmp, 1.0f, dgate, in, N, NULL));
    } else {
        /* dfch = (dres W) * gelu'(pre-activation) in the GEMM's epilogue */
        R(lin_bwd(g, &L.lin[LFCP], g->dfch, 0.0f, g->dres, a->fchg, N, a->fch));
        R(col_input(g, &L.lin[LFC], g->nrmx, N, &in));
        R(lin_bwd(g, &L.lin[LFC], g->dtmp, 0.0f, g->dfch, in, N, NULL));
    }
    R(norm_bwd(g, g->dres, dsum, a->res2, a->ln2m, a->ln2r, w->ln2w, w->ln2b, Nr));
    /* attention */
    R(lin_bwd(g, &L.lin[LPROJ], g->dtmp, 0.0f, g->dres, a->atty, N, NULL));
    const void *q = a->qkv, *k = at(g, q, (size_t)nh * hd), *v = at(g, k, (size_t)nkv * hd);
    void *dq = g->dqkv, *dk = at(g, dq, (size_t)nh * hd), *dv = at(g, dk, (size_t)nkv * hd);
    if (cp_here(g))
        R(llmt__cp_attn_bwd(g->cp, g->dqkv, g->dtmp, a->atty, a->lse, a->qkv, (size_t)Q, B, T,
                            nh, nkv, hd));
    else
        S(g->op->attention_bwd(g->d, dq, dk, dv, g->dtmp, a->atty, a->lse, q, k, v, (size_t)Q,
                               B, T, nh, nkv, hd),
          "attention backward");
    if (g->llama) {
        R(rope(g, dq, B, T, nh + nkv, (size_t)Q, c->rope_theta, 1)); /* dk's follow dq's */
    }
    /* qkv's input, ln1's output, made again as ln2's above */
    R(norm_fwd(g, g->nrmx, a->ln1m, a->ln1r, g->resid[l], w->ln1w, w->ln1b, Nr));
    R(col_input(g, &L.lin[LQKV], g->nrmx, N, &in));
    R(lin_bwd(g, &L.lin[LQKV], g->dtmp, 0.0f, g->dqkv, in, N, NULL));
    R(norm_bwd(g, g->dres, dsum, g->resid[l], a->ln1m, a->ln1r, w->ln1w, w->ln1b, Nr));
    return LLMT_OK;
}

/* Embeddings, layers, final norm and logits for rows x T tokens at `tok`
 * (device). */
static llmt_status forward(llmt__devtrain *g, const int32_t *tok, int B, int T)
{
    const llmt_model_config *c = &g->m->cfg;
    llmt_status s;
    g->fp8_gemms = 0;
    cp_here(g); /* this engine's memory (again, if another engine took it) */
    if (g->dp) llmt__dp_use(g->dp, 0, 1);
    R(embed_fwd(g, tok, B, T));
    for (int l = 0; l < c->layers; l++) {
        if (g->dp) llmt__dp_use(g->dp, 1 + l, 1);
        R(layer_fwd(g, l, B, T));
        if (g->dp) llmt__dp_done(g->dp, 1 + l);
    }
    const llmt__linear *head = &g->lin[c->layers * NLIN];
    const void *in;
    int Nr = g->sp ? B * T / g->tp : B * T;
    R(norm_fwd(g, g->nrmx, g->lnfm, g->lnfr, g->resid[c->layers], g->lnfw, g->lnfb, Nr));
    R(col_input(g, head, g->nrmx, B * T, &in));
    return lin(g, head, g->logits, NULL, in, B * T);
}

static llmt_status backward(llmt__devtrain *g, const int32_t *tok, int B, int T)
{
    const llmt_model_config *c = &g->m->cfg;
    int N = B * T, C = c->width, Nr = g->sp ? N / g->tp : N;
    const llmt__linear *head = &g->lin[c->layers * NLIN];
    const void *in;
    llmt_status s;
    g->fp8_bwd_gemms = 0;
    /* the logits hold dloss/dlogits (softmax_xent wrote them in place);
     * the head's input, the final norm's output, made again */
    R(norm_fwd(g, g->nrmx, g->lnfm, g->lnfr, g->resid[c->layers], g->lnfw, g->lnfb, Nr));
    R(col_input(g, head, g->nrmx, N, &in));
    R(lin_bwd(g, head, g->dtmp, 0.0f, g->logits, in, N, NULL));
    S(g->op->memset0(g->d, g->dres, (size_t)Nr * C * g->es), "memset");
    R(norm_bwd(g, g->dres, blk(g, g->dtmp, N, C), g->resid[c->layers], g->lnfm, g->lnfr,
               g->lnfw, g->lnfb, Nr));
    if (g->dp) llmt__dp_ready(g->dp, c->layers + 1);
    for (int l = c->layers - 1; l >= 0; l--) {
        if (g->dp) llmt__dp_use(g->dp, 1 + l, -1);
        if (g->nacts == 1 && c->layers > 1) R(layer_fwd(g, l, B, T)); /* recompute */
        if (g->selective && l < c->layers - 1) { /* later layers overwrote it */
            lctx lc = layer_ctx(g, l, B, T);
            R(attn_core(g, &lc, B, T));
        }
        R(layer_bwd(g, l, B, T));
        if (g->dp) {
            llmt__dp_done(g->dp, 1 + l);
            llmt__dp_ready(g->dp, 1 + l);
        }
    }
    R(embed_bwd(g, tok, B, T));
    if (g->dp) llmt__dp_ready(g->dp, 0);
    return LLMT_OK;
}

/* The per-token losses summed on the host in double, in token order (as
 * the fp32 trainer did; ignored targets add 0). */
static double host_sum(const float *x, size_t n)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    return sum;
}

/* Tensor parallelism with kv_heads < tp: a kv head is held by tp /
 * kv_heads ranks, each of which has only its q heads' part of its
 * gradient; every rank puts its kv rows (and biases) at their head's place
 * in a buffer of all kv heads, the group sums, each takes its head's sum
 * back. */
static llmt_status tp_kv_reduce(llmt__devtrain *g)
{
    const llmt_model *m = g->m;
    int hd = m->head_dim, nkv = m->cfg.kv_heads, kvh = g->tpr / (g->tp / nkv);
    size_t C = (size_t)m->cfg.width, rows = (size_t)hd;
    for (int l = 0; l < m->cfg.layers; l++) {
        if (!stage_has(g, l))
            continue; /* a pipeline stage: its layers (in each chunk) */
        const llmt__layer_offs *o = &g->lay[l];
        size_t w[2] = {o->qkvw, o->qkvb}, K[2] = {C, 1};
        for (int j = 0; j < 2; j++) {
            if (w[j] == NOP)
                continue;
            size_t n = rows * K[j]; /* one kv head's k (or v) part */
            float *src = g->grad + w[j] + (size_t)g->nh_l * n;
            S(g->op->memset0(g->d, g->kvbuf, 2 * (size_t)nkv * n * 4), "memset");
            for (int kv = 0; kv < 2; kv++)
                S(g->op->d2d(g->d, g->kvbuf + ((size_t)kv * nkv + kvh) * n, src + kv * n,
                             n * 4),
                  "copy");
            llmt_status s =
                g->hook(g->hook_ctx, LLMT__AT_GRAD_SUM, 1, NULL, g->kvbuf, 2 * (size_t)nkv, n);
            if (s != LLMT_OK)
                return s;
            for (int kv = 0; kv < 2; kv++)
                S(g->op->d2d(g->d, src + kv * n, g->kvbuf + ((size_t)kv * nkv + kvh) * n,
                             n * 4),
                  "copy");
        }
    }
    return LLMT_OK;
}

/* Sequence parallelism with MoE layers: each tensor parallel rank ran
 * them on its own rows (layer_fwd), so the gradients of their whole,
 * replicated tensors (tp_shards) are partial sums, summed over the group
 * as the norms' are, in place: per MoE layer one sum of its shared
 * experts, router and experts (contiguous in the device layout; under
 * expert parallelism the experts are this EP rank's rows only). */
static llmt_status sp_moe_reduce(llmt__devtrain *g)
{
    const llmt_model_config *c = &g->m->cfg;
    size_t E = (size_t)c->moe_experts, C = (size_t)c->width, F = (size_t)c->moe_ffn;
    size_t El = E / (size_t)g->ep;
    for (int l = 0; l < c->layers; l++) {
        const llmt__layer_offs *o = &g->lay[l];
        if (o->router == NOP || !stage_has(g, l))
            continue;
        size_t lo = o->sw1 != NOP ? o->sw1 : o->router;
        llmt_status s = g->hook(g->hook_ctx, LLMT__AT_GRAD_SUM, 1, NULL, g->grad + lo, 1,
                                o->ew2 + El * C * F - lo);
        if (s != LLMT_OK)
            return s;
    }
    return LLMT_OK;
}

/* Sequence parallelism: each rank's gradients of the norms' weights and
 * biases sum only its rows; packed into one buffer, summed over the
 * group, put back (every rank then has the whole gradient, as the
 * replicated norms need). */
static llmt_status sp_norm_reduce(llmt__devtrain *g)
{
    size_t C = (size_t)g->m->cfg.width;
    for (int i = 0; i < g->nnrmp; i++)
        S(g->op->d2d(g->d, g->nrmbuf + (size_t)i * C, g->grad + g->nrmoff[i], C * 4), "copy");
    llmt_status s =
        g->hook(g->hook_ctx, LLMT__AT_GRAD_SUM, 1, NULL, g->nrmbuf, (size_t)g->nnrmp, C);
    if (s != LLMT_OK)
        return s;
    for (int i = 0; i < g->nnrmp; i++)
        S(g->op->d2d(g->d, g->grad + g->nrmoff[i], g->nrmbuf + (size_t)i * C, C * 4), "copy");
    return g->moe ? sp_moe_reduce(g) : LLMT_OK;
}

/* Sequence parallelism splits the rows of a forward in tp blocks: a
 * call of rows x T tokens whose count tp does not divide gets each
 * sequence padded to the next multiple of tp (<= the engine's T, which tp
 * divides) with token 0 and ignored targets; attention is causal, so the
 * padding changes none of the real positions' logits or losses. */
static void sp_pad(llmt__devtrain *g, const int32_t **tok, const int32_t **tgt, int rows,
                   int *T)
{
    int T0 = *T, Tp = (T0 + g->tp - 1) / g->tp * g->tp;
    if (!g->sp || (rows * T0) % g->tp == 0)
        return;
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < Tp; t++) {
            g->ptok[r * Tp + t] = t < T0 ? (*tok)[r * T0 + t] : 0;
            if (tgt)
                g->ptgt[r * Tp + t] = t < T0 ? (*tgt)[r * T0 + t] : -1;
        }
    *tok = g->ptok;
    if (tgt)
        *tgt = g->ptgt;
    *T = Tp;
}

/* x (n host floats) maximised over the pipeline group pp (NULL or one
 * stage: nothing), through the amax buffer's spare row on a NCCL group,
 * whose buffers are device memory. */
static llmt_status pp_max(llmt__devtrain *g, llmt_comm *pp, float *x, size_t n)
{
    int32_t p = 1;
    if (!pp || llmt_comm_size(pp, &p) != LLMT_OK || p <= 1)
        return LLMT_OK;
    int on_device = !llmt__pp_agree_host(pp) && !g->op->host_memory;
    llmt_status s =
        llmt__group_max(g->op, g->d, pp, on_device, x, g->f8amax + (size_t)g->A * n, n);
    if (s != LLMT_OK)
        return llmt__err_set(g->e, s,
                             "trainer: pipeline stage: the fp8 amaxes' maximum over the "
                             "pipeline group: %s",
                             llmt_comm_last_error(pp));
    return LLMT_OK;
}

/* After a step's forwards: each tensor's amax over the micro-batches goes
 * into the recipe's history; the scales for the next step go to the
 * device with its batch (upload), or before the next fp8 GEMM if that
 * comes first (fresh_scales). `read`: the amaxes are in hloss already
 * (read_step), else they are read here. */
static llmt_status fp8_step(llmt__devtrain *g, int micro, llmt_comm *pp, int read)
{
    size_t nf = (size_t)g->nf8;
    llmt_status s;
    if (read)
        memcpy(g->h8amax, g->hloss + g->dn_am, (size_t)micro * nf * sizeof(float));
    else
        S(g->op->d2h(g->d, g->h8amax, g->f8amax, (size_t)micro * nf * sizeof(float)),
          "read the fp8 amaxes");
    for (int a = 1; a < micro; a++)
        for (size_t i = 0; i < nf; i++)
            g->h8amax[i] = fmaxf(g->h8amax[i], g->h8amax[(size_t)a * nf + i]);
    /* pipeline parallelism: each stage has its layers' amaxes, zeros
     * elsewhere; the maximum gives every stage all of them, so every
     * stage keeps the whole recipe state (the same on each: a checkpoint
     * holds it once, whatever the layout that reads it) */
    if ((s = pp_max(g, pp, g->h8amax, nf)) != LLMT_OK)
        return s;
    /* tensor parallelism: the maximum over the group, so that each scale
     * is the whole tensor's, as one rank holding the model would choose
     * it (every rank then quantises its shard with the same scale) */
    if (g->tp > 1 && g->hook &&
        (s = g->hook(g->hook_ctx, LLMT__AT_HOST_MAX, 1, NULL, g->h8amax, 1, nf)) != LLMT_OK)
        return s;
    /* context parallelism: each rank saw its rows of the sequences */
    if (g->cp && (s = llmt__cp_max(g->cp, g->h8amax, nf)) != LLMT_OK)
        return s;
    /* data parallelism: the maximum over the replicas' micro-batches as
     * well, so every replica (and one rank running the whole global batch)
     * picks the same scales (TransformerEngine reduces its amaxes over the
     * data parallel group too); row A is only the scratch of a device
     * communicator */
    if (g->dp && llmt__dp_max(g->dp, g->h8amax, g->f8amax + (size_t)g->A * nf, nf) != LLMT_OK)
        return llmt__err_forward(g->e, llmt__dp_err(g->dp), "trainer");
    /* a non-finite amax is dropped by the recipe (its scale stays); such a
     * step also fails the trainer's finite loss / norm check */
    llmt__fp8_delayed_update(g->rec, g->h8amax);
    g->scales_stale = 1;
    return LLMT_OK;
}

/* One rank's step (no data, context or tensor parallel group: nothing
 * needs the loss before the gradients' norm): the losses, the sum of
 * squares and the fp8 amaxes in one copy, the step's second and last
 * host wait (upload's is the first). */
static llmt_status read_step(llmt__devtrain *g, int micro, double *loss_sum, double *sumsq)
{
    size_t N = (size_t)g->B * g->T;
    const float *xs[1] = {g->grad};
    size_t ns[1] = {g->P};
    size_t n = g->fp8 ? g->dn_am + (size_t)micro * g->nf8 : g->dn_sum + 1;
    S(g->op->sumsq(g->d, g->sums, xs, ns, 1), "gradient norm");
    S(g->op->d2h(g->d, g->hloss, g->losses, n * sizeof(float)), "read the losses");
    *loss_sum = host_sum(g->hloss, (size_t)micro * N);
    *sumsq = g->hloss[g->dn_sum];
    return LLMT_OK;
}

llmt_status llmt__devtrain_fwd_bwd(llmt__devtrain *g, const int32_t *inputs,
                                   const int32_t *targets, int micro, int64_t count,
                                   double *loss_sum, double *grad_sumsq)
{
    int B = g->B, T = g->T, N = B * T;
    llmt_status s;
    if (micro < 1 || micro > g->A || count < 1)
        return llmt__err_set(g->e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: device step: %d micro-batches (engine made for %d), "
                             "%lld targets", micro, g->A, (long long)count);
    R(upload(g, inputs, targets, (size_t)micro * N));
    S(g->op->memset0(g->d, g->grad, g->P * 4), "memset");
    float dloss = (float)(1.0 / (double)count);
    if (g->moe) { /* data, expert, sequence and context parallelism: moe_net.h */
        R(llmt__moe_net_step_begin(g->moe, g->e, micro, g->dp ? llmt__dp_comm(g->dp) : NULL,
                                   &g->moe_scale));
    }
    for (int a = 0; a < micro; a++) {
        const int32_t *tok = g->tok + (size_t)a * N, *tgt = g->tgt + (size_t)a * N;
        g->amax_row = a;
        if (g->dp) llmt__dp_micro(g->dp, a == micro - 1);
        R(forward(g, tok, B, T));
        if (g->moe)
            llmt__moe_net_tally(g->moe);
        R(xent(g, g->losses + (size_t)a * N, tgt, N, dloss));
        R(backward(g, tok, B, T));
    }
    int one = !g->dp && !g->cp && g->tp == 1; /* read_step */
    if (one) {
        if (g->moe && (s = llmt__moe_net_step_end(g->moe, g->e)) != LLMT_OK)
            return s;
        R(read_step(g, micro, loss_sum, grad_sumsq));
        return g->fp8 ? fp8_step(g, micro, NULL, 1) : LLMT_OK;
    }
    S(g->op->d2h(g->d, g->hloss, g->losses, (size_t)micro * N * sizeof(float)),
      "read the losses");
    *loss_sum = host_sum(g->hloss, (size_t)micro * N);
    /* data parallelism's reductions finish first (they may be in flight
     * on these gradients); the kv heads' sum over the tensor parallel group
     * is linear, so it composes with them, ZeRO-2/3's zeroed non-shares
     * included (every rank of a tensor parallel group has the same layout
     * and data parallel share) */
    if (g->dp && llmt__dp_end(g->dp, loss_sum) != LLMT_OK)
        return llmt__err_forward(g->e, llmt__dp_err(g->dp), "trainer");
    if (g->moe && (s = llmt__moe_net_step_end(g->moe, g->e)) != LLMT_OK)
        return s;
    /* context parallelism: replicated weights, each rank's gradient from
     * its rows (staged on a device: cp.h) */
    if (g->cp && ((s = llmt__cp_sum_dev(g->cp, g->grad, g->P)) != LLMT_OK ||
                  (s = llmt__cp_sum_double(g->cp, loss_sum)) != LLMT_OK))
        return s;
    if (g->kvrep && (s = tp_kv_reduce(g)) != LLMT_OK)
        return s;
    if (g->sp && (s = sp_norm_reduce(g)) != LLMT_OK)
        return s;
    if (g->dp) { /* global norm: this rank's norm runs of its share */
        if (llmt__dp_sumsq(g->dp, grad_sumsq) != LLMT_OK)
            return llmt__err_forward(g->e, llmt__dp_err(g->dp), "trainer");
        if (g->tp > 1) { /* then over the tensor parallel group */
            float ss = (float)*grad_sumsq;
            S(g->op->h2d(g->d, g->sums, &ss, sizeof ss), "gradient norm");
            if ((s = g->hook(g->hook_ctx, LLMT__AT_GRAD_SUM, 1, NULL, g->sums, 1, 1)) !=
                LLMT_OK)
                return s;
            S(g->op->d2h(g->d, &ss, g->sums, sizeof ss), "read the gradient norm");
            *grad_sumsq = ss;
        }
    } else if (g->tp > 1) { /* each element once: its owner's (tp_norm_runs) */
        float ss;
        S(g->op->sumsq(g->d, g->sums, g->nrm_x, g->nrm_n, g->nnrm), "gradient norm");
        if ((s = g->hook(g->hook_ctx, LLMT__AT_GRAD_SUM, 1, NULL, g->sums, 1, 1)) != LLMT_OK)
            return s;
        S(g->op->d2h(g->d, &ss, g->sums, sizeof ss), "read the gradient norm");
        *grad_sumsq = ss;
    } else {
        const float *xs[1] = {g->grad};
        size_t ns[1] = {g->P};
        float ss;
        S(g->op->sumsq(g->d, g->sums, xs, ns, 1), "gradient norm");
        S(g->op->d2h(g->d, &ss, g->sums, sizeof ss), "read the gradient norm");
        *grad_sumsq = ss;
    }
    return g->fp8 ? fp8_step(g, micro, NULL, 0) : LLMT_OK;
}

llmt_status llmt__devtrain_update(llmt__devtrain *g, float lr, float beta1, float beta2,
                                  float eps, float wd, float scale, int64_t t)
{
    int f32 = g->param == (void *)g->master;
    for (int r = 0; r < g->nruns; r++) {
        size_t lo = g->run_lo[r];
        S(g->op->adamw(g->d, g->master + lo, f32 ? NULL : pw(g, lo), g->grad + lo,
                       g->mom1 + lo, g->mom2 + lo, g->run_n[r], lr, beta1, beta2, eps,
                       g->run_decay[r] ? wd : 0.0f, scale, t),
          "adamw");
    }
    /* no synchronisation: the host prepares the next batch meanwhile; an
     * asynchronous failure surfaces at the next copy */
    return LLMT_OK;
}

llmt_status llmt__devtrain_loss(llmt__devtrain *g, const int32_t *inputs,
                                const int32_t *targets, int rows, int T, double *loss_sum)
{
    int N = rows * T;
    llmt_status s;
    if (rows < 1 || rows > g->B || T < 1 || T > g->T)
        return llmt__err_set(g->e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: device evaluate: %d x %d tokens (engine made for "
                             "%d x %d)", rows, T, g->B, g->T);
    sp_pad(g, &inputs, &targets, rows, &T);
    N = rows * T;
    R(upload(g, inputs, targets, (size_t)N));
    g->amax_row = g->A; /* not a training step: the recipe ignores it */
    R(forward(g, g->tok, rows, T));
    R(xent(g, g->losses, g->tgt, N, 0.0f));
    S(g->op->d2h(g->d, g->hloss, g->losses, (size_t)N * sizeof(float)), "read the losses");
    *loss_sum = host_sum(g->hloss, (size_t)N);
    return g->cp ? llmt__cp_sum_double(g->cp, loss_sum) : LLMT_OK;
}

llmt_status llmt__devtrain_last_logits(llmt__devtrain *g, const int32_t *tok, int len,
                                       float *logits)
{
    int Vp = g->m->cfg.padded_vocab_size, Vl = g->Vl;
    int most = g->cp ? g->T * llmt__cp_size(g->cp) : g->T;
    llmt_status s;
    if (len < 1 || len > most)
        return llmt__err_set(g->e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: device generate: %d tokens (at most %d)", len, most);
    int run = len, row = len - 1;
    if (g->cp) { /* tok: this rank's rows of the window padded to the whole
                  * sequence (causal: what follows it changes nothing); the
                  * last token's row is on one rank, or none here */
        const int32_t *pos = llmt__cp_pos(g->cp);
        run = g->T;
        row = -1;
        for (int t = 0; t < g->T; t++)
            row = pos[t] == len - 1 ? t : row;
    } else {
        sp_pad(g, &tok, NULL, 1, &run);
    }
    S(g->op->h2d(g->d, g->tok, tok, (size_t)run * 4), "upload tokens");
    g->amax_row = g->A;
    R(forward(g, g->tok, 1, run));
    if (Vl < Vp || row < 0)
        memset(logits, 0, (size_t)Vp * sizeof(float));
    if (row >= 0) {
        S(g->op->d2h(g->d, g->hrow, at(g, g->logits, (size_t)row * Vl), (size_t)Vl * g->es),
          "read the logits");
        const llmt__bf16 *hb = g->hrow;
        for (int i = 0; i < Vl; i++)
            logits[g->vlo + i] =
                g->es == sizeof(float) ? ((const float *)g->hrow)[i] : llmt__bf16_to_f32(hb[i]);
    }
    /* the group's columns: a sum over zeros elsewhere (host memory) */
    if (Vl < Vp && (s = g->hook(g->hook_ctx, LLMT__AT_HOST_SUM, 1, NULL, logits, 1,
                                (size_t)Vp)) != LLMT_OK)
        return s;
    return g->cp ? llmt__cp_sum(g->cp, logits, (size_t)Vp) : LLMT_OK;
#undef R
}

const llmt__linear *llmt__devtrain_linears(const llmt__devtrain *g, int *n)
{
    *n = g->m->cfg.layers * NLIN + 1;
    return g->lin;
}
const llmt__vocab *llmt__devtrain_vocab(const llmt__devtrain *g)
{
    return &g->voc;
}
void llmt__devtrain_set_split_hook(llmt__devtrain *g, llmt__split_hook hook, void *ctx)
{
    g->hook = hook;
    g->hook_ctx = ctx;
}

int llmt__devtrain_host_resident(const llmt__devtrain *g)
{
    return g->alias;
}
void llmt__devtrain_set_dp(llmt__devtrain *g, llmt__dp *dp) { g->dp = dp; }
struct llmt__dp *llmt__devtrain_dp(const llmt__devtrain *g)
{
    return g->dp;
}

void llmt__devtrain_dp_store(llmt__devtrain *g, llmt__dp_store *st)
{
    memset(st, 0, sizeof *st);
    st->op = g->op;
    st->d = g->d;
    st->master = g->master;
    st->param = g->param;
    st->grads = g->grad;
    st->m = g->mom1;
    st->v = g->mom2;
    st->total = g->P;
    st->doff = g->doff;
    st->norm_count = -1;
    if (g->tp > 1 || g->pp > 1 || g->ep > 1) { /* this rank's part; the norm counts
                                                  * what it owns */
        for (int i = 0; i < g->m->nparams; i++)
            g->dnumel[i] = g->sh[i].numel;
        st->numel = g->dnumel;
        st->norm_lo = g->nrm_lo;
        st->norm_n = g->nrm_n;
        st->norm_count = g->nnrm;
    }
    st->host_params = g->alias;
}

void llmt__devtrain_moments(llmt__devtrain *g, float **m, float **v)
{
    *m = g->mom1;
    *v = g->mom2;
}

void llmt__devtrain_drop_moments(llmt__devtrain *g)
{
    if (g->mom1) g->op->free(g->d, g->mom1);
    if (g->mom2) g->op->free(g->d, g->mom2);
    g->mom1 = g->mom2 = NULL;
    if (g->alias) g->hm = g->hv = NULL;
}

llmt_status llmt__devtrain_restore_moments(llmt__devtrain *g)
{
    if (g->mom1) return LLMT_OK;
    llmt_status s;
    if ((s = dalloc(g, (void **)&g->mom1, g->P * 4, 0)) != LLMT_OK ||
        (s = dalloc(g, (void **)&g->mom2, g->P * 4, 0)) != LLMT_OK) {
        llmt__devtrain_drop_moments(g);
        return s;
    }
    S(g->op->memset0(g->d, g->mom1, g->P * 4), "memset");
    S(g->op->memset0(g->d, g->mom2, g->P * 4), "memset");
    if (g->alias) {
        g->hm = g->mom1;
        g->hv = g->mom2;
    }
    return LLMT_OK;
}

#ifndef LLMT_HAVE_CUDA
/* A build without CUDA has no CUDA table (cuda/exec/dev_cuda.c fills it). */
const llmt__dev_ops *llmt__dev_cuda(void) { return NULL; }
#endif

/* ---- pipeline stage seams (lib/train/stage.h) */

#define RS(x)                  \
    do {                       \
        llmt_status rs_ = (x); \
        if (rs_ != LLMT_OK)    \
            return rs_;        \
    } while (0)

/* The activation set of micro-batch a's next stage op (the chosen one
 * under interleaving). */
static int set_of(const llmt__devtrain *g, int a)
{
    return g->sel >= 0 ? g->sel : a % g->nslot;
}

int llmt__devtrain_stage_nchunks(const llmt__devtrain *g)
{
    return g->nch;
}

llmt_status llmt__devtrain_stage_chunk(llmt__devtrain *g, int chunk, int set)
{
    if (chunk < 0) { /* the stage as a whole again */
        g->l0 = g->sl0;
        g->l1 = g->sl1;
        g->first = g->sfirst;
        g->last = g->slast;
        g->sel = -1;
        return LLMT_OK;
    }
    if (chunk >= g->nch || set < 0 || set >= g->nslot)
        return llmt__err_set(g->e, LLMT_ERR_INTERNAL,
                             "trainer: pipeline stage: chunk %d of %d, activation set %d of %d",
                             chunk, g->nch, set, g->nslot);
    g->l0 = g->cl0[chunk];
    g->l1 = g->cl1[chunk];
    g->first = g->sfirst && chunk == 0;
    g->last = g->slast && chunk == g->nch - 1;
    g->sel = set;
    return LLMT_OK;
}

llmt_status llmt__devtrain_stage_begin(llmt__devtrain *g, const int32_t *inputs,
                                       const int32_t *targets, int micro, int64_t count)
{
    size_t N = (size_t)g->B * g->T;
    if (micro < 1 || micro > g->A || count < 1)
        return llmt__err_set(g->e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: pipeline stage step: %d micro-batches (engine made "
                             "for %d), %lld targets",
                             micro, g->A, (long long)count);
    RS(upload(g, inputs, targets, (size_t)micro * N));
    S(g->op->memset0(g->d, g->grad, g->P * 4), "memset");
    g->dloss = (float)(1.0 / (double)count);
    g->micro = micro;
    for (int k = 0; k < g->nslot; k++)
        g->slot[k].micro = -1;
    g->fp8_gemms = 0;
    /* MoE: the aux and z losses' weight for the step's micro-batches x
     * data parallel ranks, as llmt__devtrain_fwd_bwd; their gradients
     * enter at each MoE layer on its own stage */
    if (g->moe)
        RS(llmt__moe_net_step_begin(g->moe, g->e, micro, g->dp ? llmt__dp_comm(g->dp) : NULL,
                                    &g->moe_scale));
    return LLMT_OK;
}

llmt_status llmt__devtrain_stage_end(llmt__devtrain *g, llmt_comm *pp)
{
    llmt_status s;
    if (g->moe && (s = llmt__moe_net_step_end_pp(g->moe, g->e, g->micro, pp)) != LLMT_OK)
        return s;
    return g->fp8 ? fp8_step(g, g->micro, pp, 0) : LLMT_OK;
}

llmt_status llmt__devtrain_stage_fwd(llmt__devtrain *g, int a, const void *x)
{
    int B = g->B, T = g->T, N = B * T, L = g->m->cfg.layers;
    int Nr = g->sp ? N / g->tp : N; /* sequence parallel: this rank's rows */
    size_t C = (size_t)g->m->cfg.width;
    if (!g->nslot || a < 0 || a >= g->A || (!g->first && !x))
        return llmt__err_set(g->e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: pipeline stage forward of micro-batch %d (of %d)%s", a,
                             g->A, !g->first && !x ? " without its input" : "");
    use_slot(g, set_of(g, a));
    g->amax_row = a; /* fp8: micro-batch a's amaxes */
    if (g->first)
        RS(embed_fwd(g, g->tok + (size_t)a * N, B, T));
    else if (x != g->resid[g->l0]) /* received elsewhere than llmt__devtrain_stage_in */
        S(g->op->d2d(g->d, g->resid[g->l0], x, (size_t)Nr * C * g->es), "stage input");
    for (int l = g->l0; l < g->l1; l++)
        RS(layer_fwd(g, l, B, T));
    if (g->moe) /* this chunk's MoE layers' counts and losses */
        llmt__moe_net_tally_layers(g->moe, g->l0, g->l1);
    if (g->last) { /* as forward(): a column split head gathers its input */
        const void *in;
        RS(norm_fwd(g, g->nrmx, g->lnfm, g->lnfr, g->resid[g->l1], g->lnfw, g->lnfb, Nr));
        RS(col_input(g, &g->lin[L * NLIN], g->nrmx, N, &in));
        RS(lin(g, &g->lin[L * NLIN], g->logits, NULL, in, N));
        RS(xent(g, g->losses + (size_t)a * N, g->tgt + (size_t)a * N, N, g->dloss));
    }
    g->slot[g->cur].micro = a;
    return LLMT_OK;
}

void *llmt__devtrain_stage_in(llmt__devtrain *g, int a)
{
    return g->nslot && a >= 0 && !g->first ? g->slot[set_of(g, a)].resid[g->l0] : NULL;
}

void *llmt__devtrain_stage_out(llmt__devtrain *g)
{
    return g->last ? NULL : g->resid[g->l1];
}

llmt_status llmt__devtrain_stage_bwd(llmt__devtrain *g, int a, const void *dy)
{
    int B = g->B, T = g->T, N = B * T, L = g->m->cfg.layers;
    int Nr = g->sp ? N / g->tp : N;
    size_t C = (size_t)g->m->cfg.width;
    if (!g->last && !dy)
        return llmt__err_set(g->e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: pipeline stage backward of micro-batch %d without "
                             "its output gradient",
                             a);
    if (!g->nslot || a < 0 || g->slot[set_of(g, a)].micro != a)
        return llmt__err_set(g->e, LLMT_ERR_INTERNAL,
                             "trainer: pipeline stage backward of micro-batch %d: its "
                             "activations are not held (%d sets; a schedule keeps at most "
                             "that many micro-batches in flight)",
                             a, g->nslot);
    use_slot(g, set_of(g, a));
    g->amax_row = a;
    g->slot[g->cur].micro = -1; /* the backward overwrites them */
    if (g->dp) /* data parallelism reduces during the last micro-batch's backward */
        llmt__dp_micro(g->dp, a == g->micro - 1);
    if (g->last) { /* the logits hold dloss/dlogits (xent wrote them in place) */
        /* the head's input: the final norm's output again, as backward() */
        const void *in;
        RS(norm_fwd(g, g->nrmx, g->lnfm, g->lnfr, g->resid[g->l1], g->lnfw, g->lnfb, Nr));
        RS(col_input(g, &g->lin[L * NLIN], g->nrmx, N, &in));
        RS(lin_bwd(g, &g->lin[L * NLIN], g->dtmp, 0.0f, g->logits, in, N, NULL));
        S(g->op->memset0(g->d, g->dres, (size_t)Nr * C * g->es), "memset");
        RS(norm_bwd(g, g->dres, blk(g, g->dtmp, N, (int)C), g->resid[g->l1], g->lnfm, g->lnfr,
                    g->lnfw, g->lnfb, Nr));
        if (g->dp)
            llmt__dp_ready(g->dp, L + 1);
    } else {
        S(g->op->d2d(g->d, g->dres, dy, (size_t)Nr * C * g->es), "stage output gradient");
    }
    for (int l = g->l1 - 1; l >= g->l0; l--) {
        if (g->nacts == 1 && g->l1 - g->l0 > 1) /* full recompute: layer by layer */
            RS(layer_fwd(g, l, B, T));
        if (g->selective && l < g->l1 - 1) { /* later layers overwrote it */
            lctx lc = layer_ctx(g, l, B, T);
            RS(attn_core(g, &lc, B, T));
        }
        RS(layer_bwd(g, l, B, T));
        if (g->dp)
            llmt__dp_ready(g->dp, 1 + l);
    }
    if (g->first) {
        RS(embed_bwd(g, g->tok + (size_t)a * N, B, T));
        if (g->dp)
            llmt__dp_ready(g->dp, 0);
    }
    return LLMT_OK;
}

void *llmt__devtrain_stage_dx(llmt__devtrain *g)
{
    return g->dres;
}

llmt_status llmt__devtrain_stage_infer(llmt__devtrain *g, const int32_t *tok,
                                       const int32_t *tgt, const void *x, int active,
                                       double *loss_sum)
{
    int B = g->B, T = g->T, N = B * T, L = g->m->cfg.layers;
    int Nr = g->sp ? N / g->tp : N;
    size_t C = (size_t)g->m->cfg.width;
    if (!g->nslot || (!g->first && !x))
        return llmt__err_set(g->e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: pipeline stage forward-only pass%s",
                             g->first ? "" : " without its input");
    use_slot(g, 0); /* between steps: no micro-batch is in flight */
    g->amax_row = g->A;
    if (g->first) {
        S(g->op->h2d(g->d, g->tok, tok, (size_t)N * 4), "upload tokens");
        RS(embed_fwd(g, g->tok, B, T));
    } else if (x != g->resid[g->l0]) {
        S(g->op->d2d(g->d, g->resid[g->l0], x, (size_t)Nr * C * g->es), "stage input");
    }
    /* the MoE layers route the real rows only (pp_infer.h); under sequence
     * parallelism each rank's block is routed whole, as one rank pads */
    if (g->moe)
        llmt__moe_net_set_active(g->moe, g->sp ? 0 : active);
    llmt_status ls = LLMT_OK;
    for (int l = g->l0; l < g->l1 && ls == LLMT_OK; l++)
        ls = layer_fwd(g, l, B, T);
    if (g->moe)
        llmt__moe_net_set_active(g->moe, 0);
    RS(ls);
    if (!g->last)
        return LLMT_OK;
    const void *in;
    RS(norm_fwd(g, g->nrmx, g->lnfm, g->lnfr, g->resid[g->l1], g->lnfw, g->lnfb, Nr));
    RS(col_input(g, &g->lin[L * NLIN], g->nrmx, N, &in));
    RS(lin(g, &g->lin[L * NLIN], g->logits, NULL, in, N));
    if (!tgt)
        return LLMT_OK;
    S(g->op->h2d(g->d, g->tgt, tgt, (size_t)N * 4), "upload tokens");
    RS(xent(g, g->losses, g->tgt, N, 0.0f));
    S(g->op->d2h(g->d, g->hloss, g->losses, (size_t)N * sizeof(float)), "read the losses");
    *loss_sum = host_sum(g->hloss, (size_t)N);
    return LLMT_OK;
}

llmt_status llmt__devtrain_stage_row_logits(llmt__devtrain *g, int row, float *logits)
{
    int Vp = g->m->cfg.padded_vocab_size, Vl = g->Vl;
    if (!g->last || row < 0 || row >= g->B * g->T)
        return llmt__err_set(g->e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: pipeline logits of row %d on stage %s", row,
                             g->last ? "the last" : "another than the last");
    if (Vl < Vp)
        memset(logits, 0, (size_t)Vp * sizeof(float));
    S(g->op->d2h(g->d, g->hrow, at(g, g->logits, (size_t)row * Vl), (size_t)Vl * g->es),
      "read the logits");
    const llmt__bf16 *hb = g->hrow;
    for (int i = 0; i < Vl; i++)
        logits[g->vlo + i] =
            g->es == sizeof(float) ? ((const float *)g->hrow)[i] : llmt__bf16_to_f32(hb[i]);
    /* the tensor parallel group's vocabulary shards: a sum over zeros */
    if (Vl < Vp)
        RS(g->hook(g->hook_ctx, LLMT__AT_HOST_SUM, 1, NULL, logits, 1, (size_t)Vp));
    return LLMT_OK;
}

llmt_status llmt__devtrain_stage_loss(llmt__devtrain *g, double *loss_sum)
{
    size_t N = (size_t)g->B * g->T;
    *loss_sum = 0.0;
    if (g->last) {
        S(g->op->d2h(g->d, g->hloss, g->losses, (size_t)g->micro * N * sizeof(float)),
          "read the losses");
        *loss_sum = host_sum(g->hloss, (size_t)g->micro * N);
    }
    /* data parallelism's reductions finish, the loss is summed over it */
    if (g->dp && llmt__dp_end(g->dp, loss_sum) != LLMT_OK)
        return llmt__err_forward(g->e, llmt__dp_err(g->dp), "trainer");
    /* then context parallelism's and tensor parallelism's sums, as
     * llmt__devtrain_fwd_bwd does them (every CP rank of a stage calls
     * this: the loss is 0 but on the last stage) */
    if (g->cp)
        RS(llmt__cp_sum_dev(g->cp, g->grad, g->P));
    if (g->cp)
        RS(llmt__cp_sum_double(g->cp, loss_sum));
    if (g->kvrep)
        RS(tp_kv_reduce(g));
    if (g->sp)
        RS(sp_norm_reduce(g));
    return LLMT_OK;
}

llmt_status llmt__devtrain_stage_sumsq(llmt__devtrain *g, double *sumsq)
{
    float ss = 0.0f;
    if (g->dp) { /* the norm runs of this rank's share, over the data parallel group */
        double d = 0.0;
        if (llmt__dp_sumsq(g->dp, &d) != LLMT_OK)
            return llmt__err_forward(g->e, llmt__dp_err(g->dp), "trainer");
        if (g->tp == 1) {
            *sumsq = d;
            return LLMT_OK;
        }
        ss = (float)d;
        S(g->op->h2d(g->d, g->sums, &ss, sizeof ss), "gradient norm");
    } else if (g->nnrm > 0) { /* each element once: its owner's (tied wte: the first
                                 stage; tensor parallel shards: tp_norm_runs) */
        S(g->op->sumsq(g->d, g->sums, g->nrm_x, g->nrm_n, g->nnrm), "gradient norm");
    } else {
        S(g->op->h2d(g->d, g->sums, &ss, sizeof ss), "gradient norm");
    }
    if (g->tp > 1) /* then over the tensor parallel group */
        RS(g->hook(g->hook_ctx, LLMT__AT_GRAD_SUM, 1, NULL, g->sums, 1, 1));
    S(g->op->d2h(g->d, &ss, g->sums, sizeof ss), "read the gradient norm");
    *sumsq = ss;
    return LLMT_OK;
}

float *llmt__devtrain_stage_tied_grad(llmt__devtrain *g, size_t *n)
{
    const llmt_model *m = g->m;
    *n = 0;
    if (g->pp == 1 || m->lm_head != m->wte || !(g->first || g->last))
        return NULL;
    int i = pidx(m, m->wte);
    *n = g->sh[i].numel;
    return g->grad + g->doff[i];
}

size_t llmt__devtrain_stage_elems(const llmt__devtrain *g)
{
    /* sequence parallel: the boundary is this rank's rows of the stream */
    size_t N = (size_t)g->B * g->T;
    return (g->sp ? N / (size_t)g->tp : N) * (size_t)g->m->cfg.width;
}

llmt_status llmt__devtrain_stage_buf(llmt__devtrain *g, void **p, size_t bytes)
{
    return dalloc(g, p, bytes, 1);
}

void llmt__devtrain_stage_buf_free(llmt__devtrain *g, void *p)
{
    if (p)
        g->op->free(g->d, p);
}

llmt_status llmt__devtrain_stage_copy(llmt__devtrain *g, void *dst, const void *src,
                                      size_t bytes)
{
    S(g->op->d2d(g->d, dst, src, bytes), "stage boundary copy");
    return LLMT_OK;
}

int llmt__devtrain_stage_host(const llmt__devtrain *g)
{
    return g->op->host_memory;
}

llmt_status llmt__devtrain_stage_hostbuf(llmt__devtrain *g, void **p, size_t *cap, size_t bytes)
{
    if (llmt__host_stage(p, cap, bytes) != LLMT_OK)
        return llmt__err_set(g->e, LLMT_ERR_OUT_OF_MEMORY,
                             "trainer: pipeline stage: no host memory for the %zu bytes of a "
                             "boundary message's staging",
                             bytes);
    return LLMT_OK;
}

llmt_status llmt__devtrain_stage_put(llmt__devtrain *g, void *dst, const void *src,
                                     size_t bytes)
{
    S(g->op->h2d(g->d, dst, src, bytes), "stage boundary stamp");
    return LLMT_OK;
}

llmt_status llmt__devtrain_stage_get(llmt__devtrain *g, void *dst, const void *src,
                                     size_t bytes)
{
    S(g->op->d2h(g->d, dst, src, bytes), "stage boundary stamp");
    return LLMT_OK;
}

size_t llmt__devtrain_param_floats(const llmt__devtrain *g)
{
    return g->P;
}

int64_t llmt__devtrain_local_numel(const llmt__devtrain *g, int i)
{
    return i >= 0 && i < g->m->nparams ? (int64_t)g->sh[i].numel : 0;
}

llmt_status llmt__devtrain_local_get(llmt__devtrain *g, int i, float *out)
{
    size_t n = g->sh[i].numel;
    S(g->op->d2h(g->d, out, g->master + g->doff[i], n * 4), "read a parameter's shard");
    return LLMT_OK;
}

llmt_status llmt__devtrain_local_put(llmt__devtrain *g, int i, const float *in)
{
    size_t n = g->sh[i].numel, at = g->doff[i];
    S(g->op->h2d(g->d, g->master + at, in, n * 4), "write a parameter's shard");
    /* the compute copy follows the master, as after an update */
    if (g->param != (void *)g->master)
        S(g->op->f32_to_bf16(g->d, (llmt__bf16 *)g->param + at, g->master + at, n),
          "bf16 copy");
    S(g->op->sync(g->d), "write a parameter's shard");
    /* and into the host copy, by this rank alone (no collective: the
     * other ranks do not take part in a drill) */
    if (g->tp > 1 || g->pp > 1 || g->ep > 1)
        return shard_copy(g, i, g->master, g->m->data, 0);
    if (g->m->data + g->m->params[i].offset != g->master + at)
        S(g->op->d2h(g->d, g->m->data + g->m->params[i].offset, g->master + at, n * 4),
          "write a parameter's shard");
    return LLMT_OK;
}
#undef RS

void llmt__devtrain_set_cp(llmt__devtrain *g, llmt__cp *cp)
{
    g->cp = cp;
    if (cp) /* its attention runs on this engine's table and memory */
        llmt__cp_bind(cp, g->op, g->d);
    if (g->moe && cp) /* its rows of every sequence: MoE's token group */
        llmt__moe_net_add_group(g->moe, llmt__cp_comm(cp));
}

/* ---- expert parallelism: only this rank's experts (moe_ep.h) */

/* Whether parameter i is a MoE layer's routed expert tensor (w1, w3, w2). */
static int is_expert(const llmt__devtrain *g, int i)
{
    size_t off = g->m->params[i].offset;
    for (int l = 0; l < g->m->cfg.layers; l++) {
        const llmt__layer_offs *o = &g->m->layer[l];
        if (o->ew1 != NOP && (off == o->ew1 || off == o->ew3 || off == o->ew2))
            return 1;
    }
    return 0;
}

/* Each expert tensor held here keeps only EP rank epr's block of rows
 * (its E/ep experts' F rows of w1 and w3, C rows of w2): a row shard as
 * tensor parallelism's, so the host transfers, the checkpoint's blocks
 * and data parallelism's units take it as any shard; a tensor replicated
 * over tensor parallelism keeps its owner. After tp_shards and
 * stage_params. */
static void ep_shards(llmt__devtrain *g)
{
    int64_t E = g->m->cfg.moe_experts;
    for (int i = 0; g->ep > 1 && i < g->m->nparams; i++) {
        tshard *s = &g->sh[i];
        if (!is_expert(g, i) || s->nseg == 0)
            continue; /* not an expert tensor, or another stage's */
        int64_t rows = s->R / E * (E / g->ep);
        int own = s->own[0];
        s->nseg = 0;
        sh_rows(s, (int64_t)g->epr * rows, rows, own);
        s->numel = (size_t)(rows * s->K);
    }
}

/* The other EP ranks' expert rows into a host array (collective over the
 * EP group): rank r's rows are block r of the global tensor, where the
 * all-gather puts them. The EP group is a host communicator (moe_dev_ep.c
 * refuses NCCL): where the engine's memory is the device's, this rank's
 * rows are copied out into their block first and gathered in place. */
static llmt_status ep_gather(llmt__devtrain *g, float *host, const float *dev)
{
    llmt_comm *c = llmt__moe_net_ep_comm(g->moe);
    for (int i = 0; i < g->m->nparams; i++) {
        if (!is_expert(g, i) || g->sh[i].numel == 0)
            continue;
        size_t n = g->sh[i].numel;
        float *all = host + g->m->params[i].offset;
        const float *mine = dev + g->doff[i];
        S(g->op->sync(g->d), "download");
        if (!g->op->host_memory) {
            float *own = all + (size_t)g->epr * n;
            S(g->op->d2h(g->d, own, mine, n * sizeof(float)), "download");
            mine = own;
        }
        llmt_status s = llmt_comm_all_gather(c, mine, all, n, LLMT_DTYPE_FP32, NULL);
        if (s != LLMT_OK)
            return llmt__err_set(g->e, s,
                                 "trainer: the expert rows' all-gather over the EP group: %s",
                                 llmt_comm_last_error(c));
    }
    return LLMT_OK;
}

static void free_mirrors(llmt__devtrain *g)
{
    float *hs[] = {g->hg, g->hm, g->hv};
    for (int i = 0; i < 3; i++)
        if (hs[i]) {
            if (g->pinned)
                g->op->host_free(g->d, hs[i]);
            else
                free(hs[i]);
        }
    g->hg = g->hm = g->hv = NULL;
}

llmt_status llmt__devtrain_set_ep(llmt__devtrain *g, llmt_comm *comm)
{
    const llmt_model *m = g->m;
    int32_t r = 0, n = 1;
    if (comm && (llmt_comm_rank(comm, &r) != LLMT_OK || llmt_comm_size(comm, &n) != LLMT_OK))
        return llmt__err_set(g->e, LLMT_ERR_INVALID_ARGUMENT, "trainer: set_ep_comm: %s",
                             llmt_comm_last_error(comm));
    if (n <= 1)
        r = 0, n = 1;
    if (!g->mom1)
        return llmt__err_set(g->e, LLMT_ERR_STATE,
                             "trainer: set_ep_comm: the optimizer state is sharded (ZeRO >= "
                             "1): detach data parallelism first");
    llmt_status s;
    /* the host copies of the moments hold this EP rank's experts' rows
     * only (a download gathers only the parameters): the others' from
     * their owners over the old group first */
    if (g->ep > 1 && (n != g->ep || r != g->epr) &&
        ((s = ep_gather(g, g->hm, g->mom1)) != LLMT_OK ||
         (s = ep_gather(g, g->hv, g->mom2)) != LLMT_OK))
        return s;
    s = llmt__moe_net_set_ep(g->moe, g->e, n > 1 ? comm : NULL);
    if (s != LLMT_OK || (n == g->ep && r == g->epr))
        return s;
    /* one buffer at a time, so that the old and new layouts' state are
     * never held whole together: the gradients are zeroed for the new
     * layout, so the old ones go first; the moments' source is the old
     * buffer when aliased (the host layout itself), else the mirrors */
    int was = g->alias;
    /* a backend of another storage type computes on its own copy of the
     * parameters (bf16), made again for the new layout from the master */
    int f32 = g->param == (void *)g->master;
    float *o1 = g->mom1, *o2 = g->mom2;
    const float *hm = was ? o1 : g->hm, *hv = was ? o2 : g->hv;
    g->op->free(g->d, g->grad);
    if (!f32)
        g->op->free(g->d, g->param);
    if (!was) {
        g->op->free(g->d, g->master);
        g->op->free(g->d, o1);
        g->op->free(g->d, o2);
        o1 = o2 = NULL;
    }
    g->master = g->grad = g->mom1 = g->mom2 = NULL;
    g->param = NULL;
    if (was)
        g->hg = g->hm = g->hv = NULL;
    /* the new layout, and what depends on its offsets */
    g->ep = n;
    g->epr = r;
    tp_shards(g);
    stage_params(g);
    ep_shards(g);
    plan_layout(g);
    if (g->nrmoff)
        g->nnrmp = norm_params(g, g->nrmoff);
    g->alias = g->op->host_memory && g->P == m->total && g->tp == 1 && g->pp == 1 && g->ep == 1;
    if (g->alias)
        g->master = m->data;
    else if ((s = dalloc(g, (void **)&g->master, g->P * 4, 0)) == LLMT_OK)
        s = put(g, g->master, m->data);
    if (f32)
        g->param = g->master;
    else if (s == LLMT_OK && (s = dalloc(g, &g->param, g->P * g->es, 0)) == LLMT_OK &&
             (s = g->op->f32_to_bf16(g->d, g->param, g->master, g->P)) != LLMT_OK)
        s = dev_fail(g, s, "bf16 copy");
    if (s == LLMT_OK && (s = dalloc(g, (void **)&g->mom1, g->P * 4, 0)) == LLMT_OK)
        s = put(g, g->mom1, hm);
    if (o1)
        g->op->free(g->d, o1);
    if (s == LLMT_OK && (s = dalloc(g, (void **)&g->mom2, g->P * 4, 0)) == LLMT_OK)
        s = put(g, g->mom2, hv);
    if (o2)
        g->op->free(g->d, o2);
    if (s == LLMT_OK && (s = dalloc(g, (void **)&g->grad, g->P * 4, 0)) == LLMT_OK) {
        tp_norm_runs(g); /* its runs point into the new gradient buffer */
        if ((s = g->op->memset0(g->d, g->grad, g->P * 4)) != LLMT_OK)
            s = dev_fail(g, s, "memset");
    }
    if (s == LLMT_OK && (s = g->op->sync(g->d)) != LLMT_OK)
        s = dev_fail(g, s, "upload");
    if (s != LLMT_OK) /* unusable: the trainer reports it and is destroyed */
        return s;
    if (g->alias) { /* back to one rank's experts: the buffers are the mirrors */
        free_mirrors(g);
        g->hg = g->grad;
        g->hm = g->mom1;
        g->hv = g->mom2;
    } else if (was) {
        /* host copies of their own now: untouched (zero pages, no memory)
         * until a download writes them; pinning is moot on host memory */
        g->pinned = 0;
        g->hg = calloc(m->total ? m->total : 1, sizeof(float));
        g->hm = calloc(m->total ? m->total : 1, sizeof(float));
        g->hv = calloc(m->total ? m->total : 1, sizeof(float));
        if (!g->hg || !g->hm || !g->hv)
            return llmt__err_set(g->e, LLMT_ERR_OUT_OF_MEMORY,
                                 "trainer: set_ep_comm: no memory for the host copies");
    }
    return LLMT_OK;
}

int llmt__devtrain_ep(const llmt__devtrain *g)
{
    return g->ep;
}

int64_t llmt__devtrain_ep_row0(const llmt__devtrain *g, int i)
{
    const tshard *s = &g->sh[i];
    return g->ep > 1 && is_expert(g, i) && s->nseg == 1 ? s->lo[0] * s->K : 0;
}
