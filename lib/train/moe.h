/* A mixture-of-experts feed-forward layer on host fp32 memory (the CPU
 * backend's storage): a linear router to E experts, softmax, top-k with the
 * k weights renormalised to sum to 1, token-choice dispatch with a capacity
 * per expert (or dropless), SwiGLU experts, the weighted combine, and the
 * router's two auxiliary losses.
 *
 * With raw_gates the k weights are the probabilities p_k themselves
 * (Switch, DeepSeek-V2): a top-1 router then learns from the output (a
 * renormalised single weight is 1, whatever the router says).
 *
 * Layout (one global tensor per kind, experts as row blocks, so that
 * expert parallelism can shard them by rows):
 *   router [E, C]; w1 (gate) and w3 (up) [E*F, C]; w2 (down) [E*C, F].
 *
 * Dispatch order: slot-major (every token's first choice before any
 * token's second), tokens in order within a slot, as GShard does, so a
 * token's top choice is dropped last. Capacity per expert is
 * ceil(capacity_factor * N * K / E); a dropped (token, choice) adds
 * nothing (its renormalised weight is not redistributed), a token with
 * every choice dropped leaves the layer as 0 and passes through the
 * residual only. Dropless: capacity N.
 *
 * Losses over the N tokens of one call (Switch / GShard form):
 *   aux = E * sum_e f_e * P_e, f_e = (choices of e before capacity) /
 *   (N*K), P_e = mean over tokens of softmax_e (only P carries gradient);
 *   z = mean over tokens of logsumexp(logits)^2.
 *
 * When the tokens of one micro-batch are split over several ranks
 * (sequence or context parallelism: moe_group.h), each rank routes its
 * own rows (capacity of its own N, as under data parallelism), and the
 * means above are over the whole micro-batch: the per-expert choices,
 * probability sums and lse^2 sum are summed over the group (`sum`, once
 * per call, in llmt__moe_route) before the losses and their gradients
 * use them, so they equal one rank's on the whole micro-batch. */
#ifndef LLMT_TRAIN_MOE_H
#define LLMT_TRAIN_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "llmtrain.h"

/* An in-place sum of n floats over the ranks that share a micro-batch's
 * tokens (moe_group.h); it records its own error message. */
typedef llmt_status (*llmt__moe_sum_fn)(void *ctx, float *buf, size_t n);

typedef struct llmt__moe_shape {
    int E, K, C, F;        /* experts, top_k, width, expert hidden size */
    float capacity_factor; /* > 0; ignored when dropless */
    int dropless;
    int raw_gates; /* 1: the k weights are p_k as they are, not renormalised */
} llmt__moe_shape;

/* Parameters (or their gradients, which the backward ACCUMULATES into). */
typedef struct llmt__moe_w {
    float *router, *w1, *w3, *w2;
} llmt__moe_w;

/* One layer's forward state, kept for its backward, and its counts. */
typedef struct llmt__moe {
    llmt__moe_shape sh;
    int Nmax, N, cap;
    float *probs, *lse, *gate;      /* [N,E], [N], [N,K] */
    int32_t *idx, *row;             /* [N,K]: expert chosen, packed row or -1 */
    int32_t *tok;                   /* [N*K]: token of each packed row */
    int64_t *kept, *chosen;         /* [E]: rows kept, choices before capacity */
    int64_t *start;                 /* [E+1]: first packed row of each expert */
    float *xe, *h1, *h3, *act, *ye; /* packed rows: [N*K, C|F] */
    float *dye, *dact, *dh1, *dh3, *dxe, *dlog, *dgate; /* backward scratch */
    double aux, z;                                      /* this call's losses */
    int64_t dropped;                                    /* (token, choice) pairs dropped */
    /* the call's router statistics over its token group (this rank's own
     * without one): choices before capacity and router probabilities
     * summed per expert, lse^2 summed, tokens. kept and dropped stay this
     * rank's (moe_net.c sums the step's tallies). sum: the group's sum
     * (NULL: no group); gbuf its scratch [2E + 2] */
    double *gchosen, *gP, gz;
    int64_t Ng;
    float *gbuf;
    llmt__moe_sum_fn sum;
    void *sum_ctx;
} llmt__moe;

/* Allocate for up to Nmax tokens a call. NULL when out of memory. */
llmt__moe *llmt__moe_new(const llmt__moe_shape *sh, int Nmax);
/* The same; rows 0: the routing state only, without the packed rows and
 * the experts' activations (xe .. dh3 NULL), for a layer run through the
 * op table (moe_dev.h), which keeps those in the backend's memory. */
llmt__moe *llmt__moe_new_rows(const llmt__moe_shape *sh, int Nmax, int rows);
void llmt__moe_free(llmt__moe *s);
/* Capacity for N tokens (N when dropless). */
int llmt__moe_capacity(const llmt__moe_shape *sh, int N);
/* y[N,C] = the layer on x[N,C] (overwritten); sets aux, z, dropped,
 * kept, chosen. */
llmt_status llmt__moe_fwd(llmt__moe *s, const llmt__moe_w *w, const float *x, float *y, int N);
/* After llmt__moe_fwd on the same x: dx[N,C] OVERWRITTEN with the input
 * gradient from dy and from aux_coef * aux + z_coef * z (the coefficients
 * already scaled as the loss is); gradients added into dw. */
llmt_status llmt__moe_bwd(llmt__moe *s, const llmt__moe_w *w, llmt__moe_w *dw, const float *x,
                          const float *dy, float *dx, float aux_coef, float z_coef);

/* The same in stages, so that expert parallelism (moe_ep.c) can run the
 * experts on other ranks between them. route: router, top-k and the
 * dispatch of x[N,C] into the packed rows s->xe (expert e's kept rows
 * from s->start[e]), then the statistics' sum over the token group (the
 * only step that can fail: the group's collective). expert_fwd / expert_bwd: expert e (its row block of
 * w, dw) on `rows` packed rows; expert_bwd ADDS into dw and overwrites
 * dact, dh1, dh3, dxe. combine: y from s->ye (packed rows) and the aux and
 * z losses; combine_bwd: s->dye and s->dgate from dy; router_bwd: dx
 * OVERWRITTEN from s->dxe (packed rows) and the router's own gradients. */
llmt_status llmt__moe_route(llmt__moe *s, const float *router, const float *x, int N);
/* route without the router's GEMM and the packing: s->probs holds the
 * router's logits [N, E] (overwritten by the probabilities); sets the
 * dispatch tables (idx, row, tok, gate, kept, start, chosen, dropped) and
 * the group's statistics, leaves s->xe alone. */
llmt_status llmt__moe_route_logits(llmt__moe *s, int N);
/* The aux and z losses of the last route (llmt__moe_combine sets them
 * too). */
void llmt__moe_losses(llmt__moe *s);
/* s->dlog [N, E] = the router logits' gradient from s->dgate (the gate
 * weights' gradient) and the aux and z losses (router_bwd's, without its
 * GEMMs and the gather of dxe). */
void llmt__moe_router_dlog(llmt__moe *s, float aux_coef, float z_coef);
void llmt__moe_expert_fwd(const llmt__moe_shape *sh, const llmt__moe_w *w, int e, int rows,
                          const float *xe, float *h1, float *h3, float *act, float *ye);
/* Whether a loop over n experts with `rows` each should be one OpenMP
 * region over experts (each thread gets two or more experts with rows,
 * their GEMMs single-threaded inside) rather than leave the team to each
 * GEMM (the dense layer: one expert). For `#pragma omp parallel for if`. */
int llmt__moe_over_experts(const int64_t *rows, int n);
void llmt__moe_combine(llmt__moe *s, float *y);
void llmt__moe_combine_bwd(llmt__moe *s, const float *dy);
void llmt__moe_expert_bwd(const llmt__moe_shape *sh, const llmt__moe_w *w, llmt__moe_w *dw,
                          int e, int rows, const float *xe, const float *h1, const float *h3,
                          const float *act, const float *dye, float *dact, float *dh1,
                          float *dh3, float *dxe);
void llmt__moe_router_bwd(llmt__moe *s, const llmt__moe_w *w, llmt__moe_w *dw, const float *x,
                          float *dx, float aux_coef, float z_coef);

#endif
