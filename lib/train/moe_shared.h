/* Shared experts of a MoE layer (DeepSeek-MoE): S always-active SwiGLU
 * experts of hidden size F each, not routed, no capacity, no aux loss;
 * their outputs are added with weight 1 to the routed experts' combined
 * output. S experts of F summed are exactly one SwiGLU of hidden S*F, so
 * they are held and run as one: w1 (gate) and w3 (up) [S*F, C], w2
 * (down) [C, S*F], the layout of a dense Llama MLP (model.h: sw1, sw3,
 * sw2). They are ordinary replicated parameters: under expert
 * parallelism every rank runs them on its own tokens and their gradients
 * are reduced over the data parallel group like any dense weight. */
#ifndef LLMT_TRAIN_MOE_SHARED_H
#define LLMT_TRAIN_MOE_SHARED_H

typedef struct llmt__moe_shared llmt__moe_shared;

/* Width C, hidden Fs = S*F, calls of up to Nmax tokens. NULL: no memory. */
llmt__moe_shared *llmt__moe_shared_new(int C, int Fs, int Nmax);
void llmt__moe_shared_free(llmt__moe_shared *s);
/* y[N,C] += the shared experts on x[N,C]; keeps what the backward needs. */
void llmt__moe_shared_fwd(llmt__moe_shared *s, const float *w1, const float *w3,
                          const float *w2, const float *x, float *y, int N);
/* After the forward on the same x: dx[N,C] += the input gradient from
 * dy, the weight gradients ADDED into dw1, dw3, dw2. */
void llmt__moe_shared_bwd(llmt__moe_shared *s, const float *w1, const float *w3,
                          const float *w2, float *dw1, float *dw3, float *dw2, const float *x,
                          const float *dy, float *dx);

#endif
