/* The engine's MoE layers and their step tallies (moe_net.h). */
#include "train/moe_net.h"

#include <stdlib.h>
#include <string.h>

#include "train/moe.h"

typedef struct tally {
    int64_t *kept; /* [E] */
    int64_t dropped;
    double aux, z;
} tally;

struct llmt__moe_net {
    llmt_model_config c;
    llmt__moe **layer; /* NULL for dense layers */
    tally *step;       /* per layer */
    int micro;         /* forwards tallied this step */
};

void llmt__moe_net_free(llmt__moe_net *n)
{
    if (!n)
        return;
    for (int l = 0; l < n->c.layers; l++) {
        if (n->layer)
            llmt__moe_free(n->layer[l]);
        if (n->step)
            free(n->step[l].kept);
    }
    free(n->layer);
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
    n->layer = calloc((size_t)c->layers, sizeof *n->layer);
    n->step = calloc((size_t)c->layers, sizeof *n->step);
    if (!n->layer || !n->step) {
        llmt__moe_net_free(n);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: moe: no memory");
    }
    llmt__moe_shape sh = {c->moe_experts, c->moe_top_k,           c->width,
                          c->moe_ffn,     c->moe_capacity_factor, c->moe_dropless};
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
    return llmt__moe_fwd(s, &p, x, y, N);
}

llmt_status llmt__moe_net_bwd(llmt__moe_net *n, llmt_err *e, int l, const llmt__layer_offs *w,
                              const float *param, float *grad, const float *x, const float *dy,
                              float *dx, float scale)
{
    llmt__moe *s = n->layer[l];
    if (!s)
        return llmt__err_set(e, LLMT_ERR_INTERNAL, "trainer: moe: layer %d is not MoE", l);
    llmt__moe_w p = weights(w, param), g = weights(w, grad);
    return llmt__moe_bwd(s, &p, &g, x, dy, dx, scale * n->c.moe_aux_loss_coef,
                         scale * n->c.moe_z_loss_coef);
}

void llmt__moe_net_step_begin(llmt__moe_net *n)
{
    n->micro = 0;
    for (int l = 0; l < n->c.layers; l++) {
        if (!n->layer[l])
            continue;
        memset(n->step[l].kept, 0, (size_t)n->c.moe_experts * sizeof(int64_t));
        n->step[l].dropped = 0;
        n->step[l].aux = n->step[l].z = 0;
    }
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
