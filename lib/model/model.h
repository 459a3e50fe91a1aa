/* Internal view of a model: the resolved config, the parameter table and
 * the per-layer offsets into one flat fp32 buffer, so the trainer can lay
 * gradients and optimizer state out the same way (param i of grads lives
 * at the same offset as in params). */
#ifndef LLMT_MODEL_INTERNAL_H
#define LLMT_MODEL_INTERNAL_H

#include "core/internal.h"

#define LLMT__PNAME_MAX 64
#define LLMT__NOPARAM ((size_t)-1)

typedef struct llmt__param {
    char name[LLMT__PNAME_MAX];
    int32_t ndim;
    int64_t shape[2];
    size_t offset; /* in floats, into the flat buffer */
    size_t numel;
    int decay;     /* weight decay applies (2-D tensors) */
} llmt__param;

/* Offsets (in floats) of one layer's tensors; LLMT__NOPARAM when absent. */
typedef struct llmt__layer_offs {
    size_t ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b;
    size_t fcw, fcb, fc3w, fcprojw, fcprojb;
    size_t router, ew1, ew3, ew2; /* MoE layers (moe.h's layout) instead of fc* */
    size_t sw1, sw3, sw2;         /* MoE layers' shared experts (one SwiGLU) */
} llmt__layer_offs;

struct llmt_model {
    llmt_err err;
    llmt_context *ctx;
    llmt_model_config cfg; /* resolved */
    int32_t head_dim, qkv_dim; /* qkv_dim = (heads + 2*kv_heads)*head_dim */
    int32_t nparams;
    llmt__param *params;
    size_t total;          /* floats */
    float *data;
    size_t wte, wpe, lnfw, lnfb, lm_head; /* lm_head == wte when tied */
    llmt__layer_offs *layer;
};

/* Layer l has a mixture of experts in place of its MLP. */
static inline int llmt__model_moe_layer(const llmt_model_config *c, int l)
{
    return c->moe_experts > 0 && l % c->moe_every == 0;
}

/* Create with init=0 (zeros, for imports) or 1 (seeded init). */
llmt_status llmt__model_new(llmt_context *ctx, const llmt_model_config *cfg,
                            int init, llmt_model **out);
/* View of parameter `index` laid over `base` (params, grads or state). */
llmt_status llmt__model_view(llmt_model *m, int32_t index, float *base,
                             llmt_tensor *view);
int32_t llmt__model_find(const llmt_model *m, const char *name);
#endif
