/* Shared experts (moe_shared.h): one SwiGLU of hidden S*F run on every
 * token, through the routed experts' own kernels (moe.h's expert_fwd and
 * expert_bwd on "expert 0" of a one-expert shape), so both paths share
 * one implementation of the SwiGLU and its gradient. */
#include "train/moe_shared.h"

#include <stdlib.h>

#include "train/moe.h"

struct llmt__moe_shared {
    llmt__moe_shape sh; /* E 1, K 1, C, F = S*F */
    int Nmax, N;
    float *h1, *h3, *act, *y;     /* forward: [N, Fs] x 3, [N, C] */
    float *dact, *dh1, *dh3, *dx; /* backward scratch */
};

void llmt__moe_shared_free(llmt__moe_shared *s)
{
    if (!s)
        return;
    void *p[] = {s->h1, s->h3, s->act, s->y, s->dact, s->dh1, s->dh3, s->dx};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
    free(s);
}

llmt__moe_shared *llmt__moe_shared_new(int C, int Fs, int Nmax)
{
    llmt__moe_shared *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    llmt__moe_shape sh = {1, 1, C, Fs, 1.0f, 1, 0};
    s->sh = sh;
    s->Nmax = Nmax;
    size_t NF = (size_t)Nmax * (size_t)Fs, NC = (size_t)Nmax * (size_t)C;
    s->h1 = malloc(NF * sizeof(float));
    s->h3 = malloc(NF * sizeof(float));
    s->act = malloc(NF * sizeof(float));
    s->dact = malloc(NF * sizeof(float));
    s->dh1 = malloc(NF * sizeof(float));
    s->dh3 = malloc(NF * sizeof(float));
    s->y = malloc(NC * sizeof(float));
    s->dx = malloc(NC * sizeof(float));
    if (!s->h1 || !s->h3 || !s->act || !s->dact || !s->dh1 || !s->dh3 || !s->y || !s->dx) {
        llmt__moe_shared_free(s);
        return NULL;
    }
    return s;
}

void llmt__moe_shared_fwd(llmt__moe_shared *s, const float *w1, const float *w3,
                          const float *w2, const float *x, float *y, int N)
{
    llmt__moe_w w = {NULL, (float *)w1, (float *)w3, (float *)w2};
    s->N = N;
    llmt__moe_expert_fwd(&s->sh, &w, 0, N, x, s->h1, s->h3, s->act, s->y);
    for (size_t i = 0; i < (size_t)N * (size_t)s->sh.C; i++)
        y[i] += s->y[i];
}

void llmt__moe_shared_bwd(llmt__moe_shared *s, const float *w1, const float *w3,
                          const float *w2, float *dw1, float *dw3, float *dw2, const float *x,
                          const float *dy, float *dx)
{
    llmt__moe_w w = {NULL, (float *)w1, (float *)w3, (float *)w2}, dw = {NULL, dw1, dw3, dw2};
    int N = s->N;
    llmt__moe_expert_bwd(&s->sh, &w, &dw, 0, N, x, s->h1, s->h3, s->act, dy, s->dact, s->dh1,
                         s->dh3, s->dx);
    for (size_t i = 0; i < (size_t)N * (size_t)s->sh.C; i++)
        dx[i] += s->dx[i];
}
