/* The engine's MoE layers and their step tallies (moe_net.h). */
#include "train/moe_net.h"

#include <stdlib.h>
#include <string.h>

#include "train/moe.h"
#include "train/moe_ep.h"
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
    /* expert parallelism (moe_ep.h): the EP group and each MoE layer's
     * state; NULL: every expert here */
    llmt_comm *epc;
    int ep_rank, ep_size;
    llmt__moe_ep **ep;
    llmt_comm *dpc; /* the step's data parallel group (NULL: none) */
    int dp_size;
};

static void free_ep(llmt__moe_net *n)
{
    for (int l = 0; n->ep && l < n->c.layers; l++)
        llmt__moe_ep_free(n->ep[l]);
    free(n->ep);
    n->ep = NULL;
    n->epc = NULL;
    n->ep_rank = 0;
    n->ep_size = 1;
}

void llmt__moe_net_free(llmt__moe_net *n)
{
    if (!n)
        return;
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

static llmt__moe_w weights(const llmt__layer_offs *w, const float *base)
{
    llmt__moe_w x = {(float *)base + w->router, (float *)base + w->ew1, (float *)base + w->ew3,
                     (float *)base + w->ew2};
    return x;
}

llmt_status llmt__moe_net_fwd(llmt__moe_net *n, llmt_err *e, int l, const llmt__layer_offs *w,
                              const float *param, const float *x, float *y, int N)
{
    llmt__moe *s = n->layer[l];
    if (!s || N > s->Nmax)
        return llmt__err_set(e, LLMT_ERR_INTERNAL, "trainer: moe: layer %d: %s (%d tokens)", l,
                             s ? "more tokens than the engine was made for" : "not a MoE layer",
                             N);
    llmt__moe_w p = weights(w, param);
    llmt_status st = n->ep ? llmt__moe_ep_fwd(n->ep[l], s, n->epc, e, &p, x, y, N)
                           : llmt__moe_fwd(s, &p, x, y, N);
    if (st == LLMT_OK && n->shared[l]) /* not routed: on this rank's tokens */
        llmt__moe_shared_fwd(n->shared[l], param + w->sw1, param + w->sw3, param + w->sw2, x, y,
                             N);
    return st;
}

llmt_status llmt__moe_net_bwd(llmt__moe_net *n, llmt_err *e, int l, const llmt__layer_offs *w,
                              const float *param, float *grad, const float *x, const float *dy,
                              float *dx, float scale)
{
    llmt__moe *s = n->layer[l];
    if (!s)
        return llmt__err_set(e, LLMT_ERR_INTERNAL, "trainer: moe: layer %d is not MoE", l);
    llmt__moe_w p = weights(w, param), g = weights(w, grad);
    float ac = scale * n->c.moe_aux_loss_coef, zc = scale * n->c.moe_z_loss_coef;
    llmt_status st = n->ep ? llmt__moe_ep_bwd(n->ep[l], s, n->epc, e, &p, &g, x, dy, dx, ac, zc)
                           : llmt__moe_bwd(s, &p, &g, x, dy, dx, ac, zc);
    if (st == LLMT_OK && n->shared[l])
        llmt__moe_shared_bwd(n->shared[l], param + w->sw1, param + w->sw3, param + w->sw2,
                             grad + w->sw1, grad + w->sw3, grad + w->sw2, x, dy, dx);
    return st;
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
    for (int l = 0; l < n->c.layers; l++) {
        if (!n->layer[l])
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
    return LLMT_OK;
}

int llmt__moe_net_ep_size(const llmt__moe_net *n)
{
    return n->ep_size;
}

llmt_comm *llmt__moe_net_ep_comm(const llmt__moe_net *n)
{
    return n->epc;
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

llmt_status llmt__moe_net_step_end(llmt__moe_net *n, llmt_err *e)
{
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
    for (int l = 0; l < n->c.layers; l++) {
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
