/* The engine's MoE layers and their step tallies (moe_net.h). */
#include "train/moe_net.h"

#include <stdlib.h>
#include <string.h>

#include "train/moe.h"
#include "train/moe_dev.h"
#include "train/moe_ep.h"
#include "train/moe_group.h"
#include "train/moe_shared.h"

typedef struct tally {
    int64_t *kept; /* [E] */
    int64_t dropped;
    double aux, z;
} tally;

struct llmt__moe_net {
    llmt_model_config c;
    llmt__moe **layer;         /* NULL for dense layers */
    llmt__moe_shared **shared; /* per layer; NULL: none (moe_shared.h) */
    tally *step;               /* per layer */
    int micro;                 /* forwards tallied this step (x dp after step_end) */
    int Nmax;
    /* the ranks sharing each micro-batch's tokens (moe_group.h; none: n 0) */
    llmt__moe_group tg;
    /* expert parallelism (moe_ep.h): the EP group and each MoE layer's
     * state; NULL: every expert here */
    llmt_comm *epc;
    int ep_rank, ep_size;
    llmt__moe_ep **ep;
    llmt_comm *dpc; /* the step's data parallel group (NULL: none) */
    int dp_size;
    /* a pipeline stage (the end of this file): one forward state per activation
     * set for the layers it holds (held[l]), set k's arrays in lset[k],
     * sset[k], eset[k] (set 0: layer, shared, ep), k current; NULL: one */
    int nsets, cur;
    unsigned char *held;
    llmt__moe *ph; /* set 0's entry of the layers another stage holds */
    llmt__moe ***lset;
    llmt__moe_shared ***sset;
    llmt__moe_ep ***eset;
    /* the rows a forward routes (set_active; 0: all of them) */
    int active;
    /* the layers through an op table (set_dev; NULL: on host fp32): its
     * context and each MoE layer's forward state */
    llmt__moe_dctx *dx;
    llmt__moe_dlay **dl;
    llmt__moe_dep **dep; /* under expert parallelism: each layer's exchange */
    /* a pipeline stage: each activation set's dl and dep (set 0: dl, dep;
     * NULL for the layers the stage does not hold) */
    llmt__moe_dlay ***dlset;
    llmt__moe_dep ***deset;
    size_t es; /* bytes of the op table's stored element */
};

/* The activation sets' exchange states of the op table but set 0's. */
static void dev_sets_ep_free(llmt__moe_net *n)
{
    if (!n->deset)
        return;
    llmt__moe_net_use(n, 0);
    for (int k = 1; k < n->nsets; k++) {
        for (int l = 0; n->deset[k] && l < n->c.layers; l++)
            if (n->held[l])
                llmt__moe_dep_free(n->dx, n->deset[k][l]);
        free(n->deset[k]);
    }
    free(n->deset);
    n->deset = NULL;
}

static void free_ep(llmt__moe_net *n)
{
    dev_sets_ep_free(n);
    for (int l = 0; n->ep && l < n->c.layers; l++)
        llmt__moe_ep_free(n->ep[l]);
    for (int l = 0; n->dep && l < n->c.layers; l++)
        llmt__moe_dep_free(n->dx, n->dep[l]);
    if (n->dx)
        llmt__moe_dctx_set_ep(n->dx, NULL);
    free(n->dep);
    n->dep = NULL;
    free(n->ep);
    n->ep = NULL;
    n->epc = NULL;
    n->ep_rank = 0;
    n->ep_size = 1;
}

static void sets_free(llmt__moe_net *n);
static void sets_ep_free(llmt__moe_net *n);
static llmt_status sets_ep_new(llmt__moe_net *n, llmt_err *e);

void llmt__moe_net_free(llmt__moe_net *n)
{
    if (!n)
        return;
    sets_free(n);
    free_ep(n); /* its op table state before the table's context */
    for (int l = 0; n->dl && l < n->c.layers; l++)
        llmt__moe_dlay_free(n->dx, n->dl[l]);
    free(n->dl);
    llmt__moe_dctx_free(n->dx);
    n->dx = NULL;
    for (int l = 0; l < n->c.layers; l++) {
        if (n->layer)
            llmt__moe_free(n->layer[l]);
        if (n->shared)
            llmt__moe_shared_free(n->shared[l]);
        if (n->step)
            free(n->step[l].kept);
    }
    free_ep(n);
    free(n->layer);
    free(n->shared);
    free(n->step);
    free(n);
}

llmt_status llmt__moe_net_new(llmt_err *e, const llmt_model_config *c, int Nmax,
                              llmt__moe_net **out)
{
    *out = NULL;
    llmt__moe_net *n = calloc(1, sizeof *n);
    if (!n)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: moe: no memory");
    n->c = *c;
    n->Nmax = Nmax;
    n->ep_size = n->dp_size = 1;
    n->layer = calloc((size_t)c->layers, sizeof *n->layer);
    n->step = calloc((size_t)c->layers, sizeof *n->step);
    n->shared = calloc((size_t)c->layers, sizeof *n->shared);
    if (!n->layer || !n->step || !n->shared) {
        llmt__moe_net_free(n);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: moe: no memory");
    }
    llmt__moe_shape sh = {c->moe_experts,         c->moe_top_k,    c->width,        c->moe_ffn,
                          c->moe_capacity_factor, c->moe_dropless, c->moe_raw_gates};
    for (int l = 0; l < c->layers; l++) {
        if (!llmt__model_moe_layer(c, l))
            continue;
        n->layer[l] = llmt__moe_new(&sh, Nmax);
        n->step[l].kept = calloc((size_t)c->moe_experts, sizeof(int64_t));
        if (!n->layer[l] || !n->step[l].kept) {
            llmt__moe_net_free(n);
            return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY,
                                 "trainer: moe: no memory for layer %d's routing state "
                                 "(%d tokens, %d experts of %d)",
                                 l, Nmax, (int)c->moe_experts, (int)c->moe_ffn);
        }
        int Fs = c->moe_shared_experts * c->moe_ffn;
        if (Fs > 0 && !(n->shared[l] = llmt__moe_shared_new(c->width, Fs, Nmax))) {
            llmt__moe_net_free(n);
            return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY,
                                 "trainer: moe: no memory for layer %d's shared experts (%d "
                                 "tokens, %d experts of %d)",
                                 l, Nmax, (int)c->moe_shared_experts, (int)c->moe_ffn);
        }
    }
    *out = n;
    return LLMT_OK;
}

llmt_status llmt__moe_net_set_fp8(llmt__moe_net *n, llmt_err *e, const llmt__moe_fp8 *f)
{
    if (!n->dx)
        return llmt__err_set(e, LLMT_ERR_INTERNAL,
                             "trainer: moe: fp8 experts run through the op table only");
    llmt__moe_dctx_set_err(n->dx, e);
    return llmt__moe_dctx_set_fp8(n->dx, f);
}

llmt_status llmt__moe_net_set_dev(llmt__moe_net *n, llmt_err *e, const llmt__dev_ops *op,
                                  llmt__dev *d)
{
    if (n->dx || n->lset || n->ep)
        return llmt__err_set(e, LLMT_ERR_INTERNAL,
                             "trainer: moe: the op table is set once, before pipeline stages "
                             "and expert parallelism");
    const llmt_model_config *c = &n->c;
    llmt__moe_shape sh = {c->moe_experts,         c->moe_top_k,    c->width,        c->moe_ffn,
                          c->moe_capacity_factor, c->moe_dropless, c->moe_raw_gates};
    int Fs = c->moe_shared_experts * c->moe_ffn;
    llmt_status st = llmt__moe_dctx_new(op, d, e, &sh, Fs, n->Nmax, &n->dx);
    if (st != LLMT_OK)
        return st;
    n->es = op->store == LLMT_DTYPE_FP32 ? sizeof(float) : sizeof(llmt__bf16);
    n->dl = calloc((size_t)c->layers, sizeof *n->dl);
    if (!n->dl)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: moe: no memory");
    /* each MoE layer: its routing state alone on the host (the rows live
     * in the backend's memory), no host shared experts */
    for (int l = 0; l < c->layers; l++) {
        if (!n->layer[l])
            continue;
        llmt__moe_free(n->layer[l]);
        llmt__moe_shared_free(n->shared[l]);
        n->shared[l] = NULL;
        if (!(n->layer[l] = llmt__moe_new_rows(&sh, n->Nmax, 0)))
            return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY,
                                 "trainer: moe: no memory for layer %d's routing state", l);
        if ((st = llmt__moe_dlay_new(n->dx, &n->dl[l])) != LLMT_OK)
            return st;
    }
    return LLMT_OK;
}

/* A layer's tensors as the op table's pointers: offsets in elements of
 * es bytes from base. */
static llmt__moe_dw dev_ptrs(const llmt__layer_offs *w, const void *base, size_t es)
{
    char *b = (char *)base;
    llmt__moe_dw x = {b + w->router * es,
                      b + w->ew1 * es,
                      b + w->ew3 * es,
                      b + w->ew2 * es,
                      NULL,
                      NULL,
                      NULL};
    if (w->sw1 != LLMT__NOPARAM) {
        x.sw1 = b + w->sw1 * es;
        x.sw3 = b + w->sw3 * es;
        x.sw2 = b + w->sw2 * es;
    }
    return x;
}

void llmt__moe_net_set_active(llmt__moe_net *n, int rows)
{
    n->active = rows > 0 ? rows : 0;
}

static llmt__moe_w weights(const llmt__layer_offs *w, const float *base)
{
    llmt__moe_w x = {(float *)base + w->router, (float *)base + w->ew1, (float *)base + w->ew3,
                     (float *)base + w->ew2};
    return x;
}

/* The forward through the op table: moe_dev.c (y's padding rows set by
 * the caller). */
static llmt_status dev_fwd(llmt__moe_net *n, int l, const llmt__layer_offs *w,
                           const void *param, const void *x, void *y, int N, int all)
{
    llmt__moe_dw p = dev_ptrs(w, param, n->es);
    if (all > N) {
        const llmt__dev_ops *op = llmt__moe_dctx_ops(n->dx);
        llmt__dev *d = llmt__moe_dctx_dev(n->dx);
        size_t row = (size_t)n->c.width * n->es;
        if (op->memset0(d, (char *)y + (size_t)N * row, (size_t)(all - N) * row) != LLMT_OK)
            return llmt__err_set(n->tg.e, LLMT_ERR_INTERNAL, "trainer: moe: memset: %s",
                                 op->last_error(d));
    }
    llmt__moe_dctx_set_err(n->dx, n->tg.e);
    llmt__moe_dctx_set_layer(n->dx, l);
    if (n->dep && n->dep[l])
        return llmt__moe_dev_ep_fwd(n->dx, n->dl[l], n->dep[l], n->layer[l], n->epc, &p, x, y,
                                    N);
    return llmt__moe_dev_fwd(n->dx, n->dl[l], n->layer[l], &p, x, y, N);
}

llmt_status llmt__moe_net_fwd(llmt__moe_net *n, llmt_err *e, int l, const llmt__layer_offs *w,
                              const void *param, const void *x_, void *y_, int N)
{
    llmt__moe *s = n->layer[l];
    if (!s || N > s->Nmax)
        return llmt__err_set(e, LLMT_ERR_INTERNAL, "trainer: moe: layer %d: %s (%d tokens)", l,
                             s ? "more tokens than the engine was made for" : "not a MoE layer",
                             N);
    /* a padded pass: its padding rows take no slot and add nothing */
    int all = N;
    if (n->active > 0 && n->active < N)
        N = n->active;
    /* the router statistics summed over the token group (moe.h) */
    llmt_status st = llmt__moe_group_check(&n->tg, e, (int64_t)N * n->c.moe_top_k);
    if (st != LLMT_OK)
        return st;
    n->tg.e = e;
    s->sum = n->tg.n ? llmt__moe_group_sum : NULL;
    s->sum_ctx = &n->tg;
    if (n->dx)
        return dev_fwd(n, l, w, param, x_, y_, N, all);
    const float *x = x_, *pf = param;
    float *y = y_;
    memset(y + (size_t)N * n->c.width, 0, (size_t)(all - N) * n->c.width * sizeof *y);
    llmt__moe_w p = weights(w, param);
    st = n->ep ? llmt__moe_ep_fwd(n->ep[l], s, n->epc, e, &p, x, y, N)
               : llmt__moe_fwd(s, &p, x, y, N);
    if (st == LLMT_OK && n->shared[l]) /* not routed: on this rank's tokens */
        llmt__moe_shared_fwd(n->shared[l], pf + w->sw1, pf + w->sw3, pf + w->sw2, x, y, N);
    return st;
}

llmt_status llmt__moe_net_bwd(llmt__moe_net *n, llmt_err *e, int l, const llmt__layer_offs *w,
                              const void *param, float *grad, const void *x_, const void *dy_,
                              void *dx_, float scale)
{
    llmt__moe *s = n->layer[l];
    if (!s)
        return llmt__err_set(e, LLMT_ERR_INTERNAL, "trainer: moe: layer %d is not MoE", l);
    float ac = scale * n->c.moe_aux_loss_coef, zc = scale * n->c.moe_z_loss_coef;
    if (n->dx) {
        llmt__moe_dw p = dev_ptrs(w, param, n->es), g = dev_ptrs(w, grad, sizeof(float));
        llmt__moe_dctx_set_err(n->dx, e);
        llmt__moe_dctx_set_layer(n->dx, l);
        if (n->dep && n->dep[l])
            return llmt__moe_dev_ep_bwd(n->dx, n->dl[l], n->dep[l], s, n->epc, &p, &g, x_, dy_,
                                        dx_, ac, zc);
        return llmt__moe_dev_bwd(n->dx, n->dl[l], s, &p, &g, x_, dy_, dx_, ac, zc);
    }
    const float *x = x_, *dy = dy_, *pf = param;
    float *dx = dx_;
    llmt__moe_w p = weights(w, param), g = weights(w, grad);
    llmt_status st = n->ep ? llmt__moe_ep_bwd(n->ep[l], s, n->epc, e, &p, &g, x, dy, dx, ac, zc)
                           : llmt__moe_bwd(s, &p, &g, x, dy, dx, ac, zc);
    if (st == LLMT_OK && n->shared[l])
        llmt__moe_shared_bwd(n->shared[l], pf + w->sw1, pf + w->sw3, pf + w->sw2, grad + w->sw1,
                             grad + w->sw3, grad + w->sw2, x, dy, dx);
    return st;
}

/* Expert parallelism of the op table's layers (no pipeline sets there:
 * moe_net_sets refuses them): the exchange's scratch once, each MoE
 * layer's own tables and owner rows (n->dep; n->ep's entries stay NULL,
 * the array says expert parallelism is on). */
static llmt_status set_ep_dev(llmt__moe_net *n, llmt_err *e, llmt_comm *comm, int r, int sz)
{
    llmt__moe_dctx_set_err(n->dx, e);
    llmt_status st = llmt__moe_dctx_set_ep(n->dx, comm);
    if (st == LLMT_OK && !(n->dep = calloc((size_t)n->c.layers, sizeof *n->dep)))
        st = llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: set_ep_comm: no memory");
    for (int l = 0; st == LLMT_OK && l < n->c.layers; l++)
        if (n->layer[l] && (!n->held || n->held[l]))
            st = llmt__moe_dep_new(n->dx, &n->dep[l]);
    /* a pipeline stage: each further activation set's, for the layers it
     * holds */
    if (st == LLMT_OK && n->dlset && !(n->deset = calloc((size_t)n->nsets, sizeof *n->deset)))
        st = llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: set_ep_comm: no memory");
    if (n->deset)
        n->deset[0] = n->dep;
    for (int k = 1; st == LLMT_OK && n->deset && k < n->nsets; k++) {
        if (!(n->deset[k] = calloc((size_t)n->c.layers, sizeof **n->deset)))
            st = llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: set_ep_comm: no memory");
        for (int l = 0; st == LLMT_OK && l < n->c.layers; l++)
            if (n->held[l])
                st = llmt__moe_dep_new(n->dx, &n->deset[k][l]);
    }
    if (st != LLMT_OK) {
        free_ep(n);
        return st;
    }
    n->epc = comm;
    n->ep_rank = r;
    n->ep_size = sz;
    return LLMT_OK;
}

llmt_status llmt__moe_net_set_ep(llmt__moe_net *n, llmt_err *e, llmt_comm *comm)
{
    int32_t r = 0, sz = 1;
    if (comm && (llmt_comm_rank(comm, &r) != LLMT_OK || llmt_comm_size(comm, &sz) != LLMT_OK))
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT, "trainer: set_ep_comm: %s",
                             llmt_comm_last_error(comm));
    int E = n->c.moe_experts;
    if (sz > 1 && E % sz)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: set_ep_comm: parallelism.ep %d does not divide "
                             "model.moe.experts %d (each rank holds experts/ep of them)",
                             (int)sz, E);
    sets_ep_free(n);
    free_ep(n);
    if (sz <= 1)
        return LLMT_OK;
    n->ep = calloc((size_t)n->c.layers, sizeof *n->ep);
    if (!n->ep)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: set_ep_comm: no memory");
    llmt__moe_shape sh = {E,
                          n->c.moe_top_k,
                          n->c.width,
                          n->c.moe_ffn,
                          n->c.moe_capacity_factor,
                          n->c.moe_dropless,
                          n->c.moe_raw_gates};
    if (n->dx) /* through the op table: moe_dev_ep.c's state per layer */
        return set_ep_dev(n, e, comm, r, sz);
    for (int l = 0; l < n->c.layers; l++) {
        if (!n->layer[l] || (n->held && !n->held[l])) /* another stage's */
            continue;
        if (!(n->ep[l] = llmt__moe_ep_new(&sh, n->Nmax, r, sz))) {
            free_ep(n);
            return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY,
                                 "trainer: set_ep_comm: no memory for layer %d's exchange "
                                 "buffers (%d experts x %d rows x width %d)",
                                 l, E, llmt__moe_capacity(&sh, n->Nmax), (int)n->c.width);
        }
    }
    n->epc = comm;
    n->ep_rank = r;
    n->ep_size = sz;
    return sets_ep_new(n, e);
}

int llmt__moe_net_ep_size(const llmt__moe_net *n)
{
    return n->ep_size;
}

llmt_comm *llmt__moe_net_ep_comm(const llmt__moe_net *n)
{
    return n->epc;
}

void llmt__moe_net_add_group(llmt__moe_net *n, llmt_comm *comm)
{
    llmt__moe_group_add(&n->tg, comm);
}

llmt_status llmt__moe_net_step_begin(llmt__moe_net *n, llmt_err *e, int micro, llmt_comm *dp,
                                     float *scale)
{
    int32_t d = 1;
    if (dp && llmt_comm_size(dp, &d) != LLMT_OK)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT, "trainer: moe: %s",
                             llmt_comm_last_error(dp));
    /* the experts' gradients of an EP group are summed over the data
     * parallel group it is carved out of (a rank's other experts add 0) */
    if (n->ep_size > 1 && (!dp || d % n->ep_size))
        return llmt__err_set(e, LLMT_ERR_STATE,
                             "trainer: moe: expert parallelism over %d ranks needs a data "
                             "parallel group (llmt_trainer_set_comm) that the EP group is part "
                             "of, of a size that ep divides (parallelism.ep %d, dp %d)",
                             n->ep_size, n->ep_size, dp ? (int)d : 1);
    n->dpc = dp;
    n->dp_size = d;
    /* the aux and z losses are means over the micro-batches of the whole
     * step, on every data parallel rank: their gradients are summed over
     * the group like the language model's, normalised by the global count */
    *scale = 1.0f / ((float)micro * (float)d);
    n->micro = 0;
    for (int l = 0; l < n->c.layers; l++) {
        if (!n->layer[l])
            continue;
        memset(n->step[l].kept, 0, (size_t)n->c.moe_experts * sizeof(int64_t));
        n->step[l].dropped = 0;
        n->step[l].aux = n->step[l].z = 0;
    }
    return LLMT_OK;
}

/* The step's kept counts and drops (this rank's rows) summed over the
 * token group: aux and z need no sum, each forward's are the whole
 * micro-batch's already (moe.h). One int64 sum per MoE layer. */
static llmt_status group_tallies(llmt__moe_net *n, llmt_err *e)
{
    int E = n->c.moe_experts;
    int64_t *cnt = n->tg.n ? malloc((size_t)(E + 1) * sizeof *cnt) : NULL;
    if (n->tg.n && !cnt)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: moe: no memory");
    llmt_status st = LLMT_OK;
    n->tg.e = e;
    for (int l = 0; cnt && st == LLMT_OK && l < n->c.layers; l++) {
        tally *t = &n->step[l];
        if (!n->layer[l])
            continue;
        memcpy(cnt, t->kept, (size_t)E * sizeof *cnt);
        cnt[E] = t->dropped;
        st = llmt__moe_group_sum_i64(&n->tg, cnt, (size_t)E + 1);
        memcpy(t->kept, cnt, (size_t)E * sizeof *cnt);
        t->dropped = cnt[E];
    }
    free(cnt);
    return st;
}

llmt_status llmt__moe_net_step_end(llmt__moe_net *n, llmt_err *e)
{
    llmt_status gs = group_tallies(n, e);
    if (gs != LLMT_OK)
        return gs;
    if (!n->dpc || n->dp_size <= 1)
        return LLMT_OK;
    /* the step's tallies summed over the data parallel group: counts and
     * drops of the global batch, aux and z as means over all micro-batches */
    int E = n->c.moe_experts;
    for (int l = 0; l < n->c.layers; l++) {
        if (!n->layer[l])
            continue;
        tally *t = &n->step[l];
        /* the kept counts and the drops in one int64 sum; aux and z in
         * fp32 (they are reported, not trained on: 7 digits suffice) */
        int64_t *cnt = malloc((size_t)(E + 1) * sizeof *cnt);
        float dd[2] = {(float)t->aux, (float)t->z};
        if (!cnt)
            return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: moe: no memory");
        memcpy(cnt, t->kept, (size_t)E * sizeof *cnt);
        cnt[E] = t->dropped;
        llmt_status st = llmt_comm_all_reduce(n->dpc, cnt, cnt, (size_t)E + 1, LLMT_DTYPE_INT64,
                                              LLMT_REDUCE_SUM, NULL);
        if (st == LLMT_OK)
            st =
                llmt_comm_all_reduce(n->dpc, dd, dd, 2, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL);
        memcpy(t->kept, cnt, (size_t)E * sizeof *cnt);
        t->dropped = cnt[E];
        free(cnt);
        if (st != LLMT_OK)
            return llmt__err_set(e, st,
                                 "trainer: moe: summing the step's expert counts over the data "
                                 "parallel group: %s",
                                 llmt_comm_last_error(n->dpc));
        t->aux = dd[0];
        t->z = dd[1];
    }
    n->micro *= n->dp_size;
    return LLMT_OK;
}

void llmt__moe_net_tally(llmt__moe_net *n)
{
    n->micro++;
    llmt__moe_net_tally_layers(n, 0, n->c.layers);
}

llmt_status llmt__moe_net_stats(const llmt__moe_net *n, llmt_err *e, int layer, int64_t *counts,
                                int nexp, int64_t *dropped, double *aux, double *z)
{
    int E = n->c.moe_experts;
    if (layer < -1 || layer >= n->c.layers || (layer >= 0 && !n->layer[layer]))
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: moe stats: layer %d is not a MoE layer (layers %d, "
                             "every %d-th is MoE from layer 0; -1 sums them)",
                             layer, (int)n->c.layers, (int)n->c.moe_every);
    if (counts && nexp != E)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: moe stats: counts has %d entries; the model has %d "
                             "experts",
                             nexp, E);
    if (counts)
        memset(counts, 0, (size_t)E * sizeof *counts);
    int64_t dr = 0;
    double a = 0, zz = 0, m = n->micro > 0 ? n->micro : 1;
    for (int l = 0; l < n->c.layers; l++) {
        if (!n->layer[l] || (layer >= 0 && l != layer))
            continue;
        for (int x = 0; counts && x < E; x++)
            counts[x] += n->step[l].kept[x];
        dr += n->step[l].dropped;
        a += n->step[l].aux / m;
        zz += n->step[l].z / m;
    }
    if (dropped)
        *dropped = dr;
    if (aux)
        *aux = a;
    if (z)
        *z = zz;
    return LLMT_OK;
}

/* ---- pipeline stages: a forward state per activation set
 *
 * A stage of a pipeline holds several micro-batches between their
 * forwards and backwards (1F1B: up to pp - stage; GPipe: all), and a MoE
 * layer's backward needs its own micro-batch's routing, packed rows and
 * expert activations: so each activation set of the engine has its own
 * copy of them (llmt__moe, the shared experts' and the EP exchange's),
 * selected with the set (llmt__moe_net_use). Layers the stage does not
 * hold keep set 0's (never run there). */

static llmt__moe_shape net_shape(const llmt__moe_net *n)
{
    llmt__moe_shape sh = {n->c.moe_experts,  n->c.moe_top_k,           n->c.width,
                          n->c.moe_ffn,      n->c.moe_capacity_factor, n->c.moe_dropless,
                          n->c.moe_raw_gates};
    return sh;
}

void llmt__moe_net_use(llmt__moe_net *n, int k)
{
    if (!n->lset || k < 0 || k >= n->nsets)
        return;
    n->cur = k;
    n->layer = n->lset[k];
    n->shared = n->sset[k];
    if (n->eset)
        n->ep = n->eset[k];
    if (n->dlset)
        n->dl = n->dlset[k];
    if (n->deset)
        n->dep = n->deset[k];
}

/* The activation sets' op table states but set 0's. */
static void dev_sets_free(llmt__moe_net *n)
{
    if (!n->dlset)
        return;
    dev_sets_ep_free(n);
    llmt__moe_net_use(n, 0);
    for (int k = 1; k < n->nsets; k++) {
        for (int l = 0; n->dlset[k] && l < n->c.layers; l++)
            if (n->held[l])
                llmt__moe_dlay_free(n->dx, n->dlset[k][l]);
        free(n->dlset[k]);
    }
    free(n->dlset);
    n->dlset = NULL;
}

/* Each further activation set's op table state of the held layers
 * (after the sets' routing states; n->held final). */
static llmt_status dev_sets_new(llmt__moe_net *n, llmt_err *e)
{
    llmt_status st = LLMT_OK;
    if (!(n->dlset = calloc((size_t)n->nsets, sizeof *n->dlset)))
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: moe: no memory");
    n->dlset[0] = n->dl;
    for (int l = 0; l < n->c.layers; l++)
        if (!n->held[l]) { /* another stage's: never run here */
            llmt__moe_dlay_free(n->dx, n->dl[l]);
            n->dl[l] = NULL;
        }
    for (int k = 1; st == LLMT_OK && k < n->nsets; k++) {
        if (!(n->dlset[k] = calloc((size_t)n->c.layers, sizeof **n->dlset)))
            return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: moe: no memory");
        for (int l = 0; st == LLMT_OK && l < n->c.layers; l++) {
            if (n->held[l])
                st = llmt__moe_dlay_new(n->dx, &n->dlset[k][l]);
        }
    }
    return st;
}

/* The sets' EP states but set 0's (which is n->ep). */
static void sets_ep_free(llmt__moe_net *n)
{
    if (!n->eset)
        return;
    llmt__moe_net_use(n, 0);
    for (int k = 1; k < n->nsets; k++) {
        for (int l = 0; n->eset[k] && l < n->c.layers; l++)
            if (n->held[l])
                llmt__moe_ep_free(n->eset[k][l]);
        free(n->eset[k]);
    }
    free(n->eset);
    n->eset = NULL;
}

static void sets_free(llmt__moe_net *n)
{
    if (!n->lset)
        return;
    dev_sets_free(n);
    sets_ep_free(n);
    llmt__moe_net_use(n, 0);
    for (int k = 1; k < n->nsets; k++) {
        for (int l = 0; l < n->c.layers; l++) {
            if (!n->held[l])
                continue;
            if (n->lset[k])
                llmt__moe_free(n->lset[k][l]);
            if (n->sset[k])
                llmt__moe_shared_free(n->sset[k][l]);
        }
        free(n->lset[k]);
        free(n->sset[k]);
    }
    for (int l = 0; n->ph && l < n->c.layers; l++)
        if (n->layer[l] == n->ph) /* freed once, below */
            n->layer[l] = NULL;
    llmt__moe_free(n->ph);
    free(n->lset);
    free(n->sset);
    free(n->held);
    n->ph = NULL;
    n->lset = NULL;
    n->sset = NULL;
    n->held = NULL;
    n->nsets = 0;
}

/* After set_ep: each further set's exchange state of the held layers. */
static llmt_status sets_ep_new(llmt__moe_net *n, llmt_err *e)
{
    if (!n->lset || !n->ep)
        return LLMT_OK;
    llmt__moe_shape sh = net_shape(n);
    n->eset = calloc((size_t)n->nsets, sizeof *n->eset);
    int ok = n->eset != NULL;
    if (ok)
        n->eset[0] = n->ep;
    for (int k = 1; ok && k < n->nsets; k++) {
        ok = (n->eset[k] = calloc((size_t)n->c.layers, sizeof **n->eset)) != NULL;
        for (int l = 0; ok && l < n->c.layers; l++)
            if (n->ep[l])
                ok = (n->eset[k][l] =
                          n->held[l] ? llmt__moe_ep_new(&sh, n->Nmax, n->ep_rank, n->ep_size)
                                     : n->ep[l]) != NULL;
    }
    if (!ok) {
        sets_ep_free(n);
        free_ep(n);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY,
                             "trainer: set_ep_comm: no memory for the exchange buffers of %d "
                             "pipeline activation sets",
                             n->nsets);
    }
    return LLMT_OK;
}

llmt_status llmt__moe_net_sets(llmt__moe_net *n, llmt_err *e, int sets,
                               const unsigned char *held)
{
    if (n->lset || n->ep)
        return llmt__err_set(e, LLMT_ERR_INTERNAL,
                             "trainer: moe: a stage's activation sets are made once, before "
                             "expert parallelism");
    int L = n->c.layers;
    llmt__moe_shape sh = net_shape(n);
    sets = sets > 1 ? sets : 1;
    n->nsets = sets;
    n->held = malloc((size_t)L);
    n->lset = calloc((size_t)sets, sizeof *n->lset);
    n->sset = calloc((size_t)sets, sizeof *n->sset);
    n->ph = llmt__moe_new(&sh, 1);
    int ok = n->held && n->lset && n->sset && n->ph;
    if (ok) {
        memcpy(n->held, held, (size_t)L);
        n->lset[0] = n->layer;
        n->sset[0] = n->shared;
    }
    /* another stage's layers: their tallies stay (zeros here, summed over
     * the pipeline), their routing state becomes a one-token placeholder
     * that never runs */
    for (int l = 0; ok && l < L; l++) {
        if (n->held[l] || !n->layer[l])
            continue;
        llmt__moe_free(n->layer[l]);
        llmt__moe_shared_free(n->shared[l]);
        n->layer[l] = n->ph;
        n->shared[l] = NULL;
    }
    int Fs = n->c.moe_shared_experts * n->c.moe_ffn;
    for (int k = 1; ok && k < sets; k++) {
        n->lset[k] = calloc((size_t)L, sizeof **n->lset);
        n->sset[k] = calloc((size_t)L, sizeof **n->sset);
        ok = n->lset[k] && n->sset[k];
        for (int l = 0; ok && l < L; l++) {
            if (!n->held[l] || !n->layer[l]) { /* another stage's: never run here */
                n->lset[k][l] = n->layer[l];
                n->sset[k][l] = n->shared[l];
                continue;
            }
            /* the op table's layers keep their rows in dlset */
            ok = (n->lset[k][l] = llmt__moe_new_rows(&sh, n->Nmax, !n->dx)) != NULL;
            if (ok && Fs > 0 && !n->dx)
                ok = (n->sset[k][l] = llmt__moe_shared_new(n->c.width, Fs, n->Nmax)) != NULL;
        }
    }
    if (!ok) {
        if (n->held) /* the partly made sets: what is not NULL is this set's own */
            for (int l = 0; l < L; l++)
                n->held[l] = n->held[l] && n->layer[l] && n->layer[l] != n->ph;
        sets_free(n);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY,
                             "trainer: moe: no memory for the routing state of %d pipeline "
                             "activation sets (%d tokens, %d experts of %d)",
                             sets, n->Nmax, (int)n->c.moe_experts, (int)n->c.moe_ffn);
    }
    for (int l = 0; l < L; l++) /* from here on: held and MoE */
        n->held[l] = n->held[l] && n->layer[l];
    llmt_status st = n->dx ? dev_sets_new(n, e) : LLMT_OK;
    if (st != LLMT_OK)
        sets_free(n);
    return st;
}

/* What one MoE layer's forward keeps for its backward, in floats, for a
 * call of N tokens (moe.h, moe_shared.h, moe_ep.h): the routing (probs
 * [N, E], lse [N], gate, idx and row [N, K], tok [N K]), the packed rows'
 * inputs and outputs xe, ye [N K, C] and the experts' h1, h3, act [N K,
 * F]; the shared experts' h1, h3, act [N, S F]; under expert parallelism
 * the owner's rows xo, h1, h3, act [O, C | F], O the rows it can receive
 * (llmt__moe_ep_owner_room: E x block, or ep x N x top_k). The planner's
 * model of a stage's activations counts the same (lib/plan/engine.c). */
static size_t layer_saved(const llmt__moe_net *n)
{
    size_t N = (size_t)n->Nmax, E = (size_t)n->c.moe_experts, K = (size_t)n->c.moe_top_k,
           C = (size_t)n->c.width, F = (size_t)n->c.moe_ffn, R = N * K;
    size_t f = N * E + N + 4 * R + 2 * R * C + 3 * R * F;
    f += 3 * N * (size_t)n->c.moe_shared_experts * F;
    if (n->ep_size > 1) {
        llmt__moe_shape sh = net_shape(n);
        f += llmt__moe_ep_owner_room(&sh, n->Nmax, n->ep_size) * (C + 3 * F);
    }
    return f;
}

/* Without the op table: the scratch of the held layers' exchanges
 * (moe_ep.c: send and receive buffers, the owner's outputs and
 * backward), one per layer and activation set (a set's entry of a layer
 * it does not hold is set 0's, NULL). The op table's context keeps one
 * (llmt__moe_dctx_scratch_bytes). */
static size_t ep_scratch(const llmt__moe_net *n)
{
    size_t b = 0, saved = 0, scratch = 0;
    int sets = n->eset ? n->nsets : 1;
    for (int k = 0; n->ep && k < sets; k++) {
        llmt__moe_ep *const *p = n->eset ? n->eset[k] : n->ep;
        for (int l = 0; l < n->c.layers; l++)
            if (p[l] && (!n->held || n->held[l])) {
                llmt__moe_ep_bytes(p[l], &saved, &scratch);
                b += scratch;
            }
    }
    return b;
}

void llmt__moe_net_mem(const llmt__moe_net *n, size_t *acts, size_t *host)
{
    size_t saved = llmt__moe_net_saved_bytes(n);
    *acts = saved;
    *host = saved;
    if (!n->dx) { /* the exchanges' scratch too, as the op table's below */
        *acts += ep_scratch(n);
        *host = *acts;
        return;
    }
    /* through the op table: the rows and the scratch are the backend's
     * allocations, the routing state alone the host's */
    size_t layers = 0;
    for (int l = 0; l < n->c.layers; l++)
        layers += n->layer[l] && (!n->held || n->held[l]);
    *acts += llmt__moe_dctx_scratch_bytes(n->dx);
    *host = layers * (size_t)(n->lset ? n->nsets : 1) * llmt__moe_dlay_host_bytes(n->dx);
}

size_t llmt__moe_net_saved_bytes(const llmt__moe_net *n)
{
    size_t layers = 0;
    for (int l = 0; l < n->c.layers; l++)
        layers += n->layer[l] && (!n->held || n->held[l]);
    size_t one = n->dx ? llmt__moe_dlay_saved_bytes(n->dx) : layer_saved(n) * sizeof(float);
    return layers * (size_t)(n->lset ? n->nsets : 1) * one;
}

void llmt__moe_net_tally_layers(llmt__moe_net *n, int l0, int l1)
{
    for (int l = l0; l < l1 && l < n->c.layers; l++) {
        const llmt__moe *s = n->layer[l];
        if (!s)
            continue;
        for (int x = 0; x < n->c.moe_experts; x++)
            n->step[l].kept[x] += s->kept[x];
        n->step[l].dropped += s->dropped;
        n->step[l].aux += s->aux;
        n->step[l].z += s->z;
    }
}

llmt_status llmt__moe_net_step_end_pp(llmt__moe_net *n, llmt_err *e, int micro, llmt_comm *pp)
{
    n->micro = micro;
    llmt_status st = llmt__moe_net_step_end(n, e);
    int32_t p = 1;
    if (st != LLMT_OK || !pp || llmt_comm_size(pp, &p) != LLMT_OK || p <= 1)
        return st;
    /* each layer's tallies are its stage's (the others hold zeros): the
     * counts by an int64 sum, aux and z gathered as doubles and summed in
     * stage order (the same on every stage) */
    int L = n->c.layers, E = n->c.moe_experts, nm = 0;
    for (int l = 0; l < L; l++)
        nm += n->layer[l] != NULL;
    size_t nc = (size_t)nm * (size_t)(E + 1);
    int64_t *cnt = malloc(nc * sizeof *cnt);
    double *d = malloc((size_t)nm * 2 * (size_t)(p + 1) * sizeof *d);
    if (!cnt || !d) {
        free(cnt);
        free(d);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: moe: no memory");
    }
    double *all = d + (size_t)nm * 2;
    for (int l = 0, j = 0; l < L; l++) {
        if (!n->layer[l])
            continue;
        memcpy(cnt + (size_t)j * (E + 1), n->step[l].kept, (size_t)E * sizeof *cnt);
        cnt[(size_t)j * (E + 1) + E] = n->step[l].dropped;
        d[2 * j] = n->step[l].aux;
        d[2 * j + 1] = n->step[l].z;
        j++;
    }
    st = llmt_comm_all_reduce(pp, cnt, cnt, nc, LLMT_DTYPE_INT64, LLMT_REDUCE_SUM, NULL);
    if (st == LLMT_OK) /* doubles as their bits */
        st = llmt_comm_all_gather(pp, d, all, (size_t)nm * 2, LLMT_DTYPE_INT64, NULL);
    for (int l = 0, j = 0; st == LLMT_OK && l < L; l++) {
        if (!n->layer[l])
            continue;
        memcpy(n->step[l].kept, cnt + (size_t)j * (E + 1), (size_t)E * sizeof *cnt);
        n->step[l].dropped = cnt[(size_t)j * (E + 1) + E];
        n->step[l].aux = n->step[l].z = 0;
        for (int r = 0; r < p; r++) {
            n->step[l].aux += all[(size_t)r * nm * 2 + 2 * j];
            n->step[l].z += all[(size_t)r * nm * 2 + 2 * j + 1];
        }
        j++;
    }
    free(cnt);
    free(d);
    if (st != LLMT_OK)
        return llmt__err_set(e, st,
                             "trainer: moe: gathering the MoE layers' tallies over the "
                             "pipeline stages: %s",
                             llmt_comm_last_error(pp));
    return LLMT_OK;
}
