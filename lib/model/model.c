/* Decoder-only transformer models from a config: the parameter table (names
 * and global shapes), seeded initialisation, and views for hosts. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"

LLMT_API llmt_status llmt_model_config_init(llmt_model_config *cfg, size_t size)
{
    llmt_model_config d = {0};
    d.arch = LLMT_ARCH_GPT2;
    d.vocab_size = 50257;
    d.padded_vocab_size = 0;
    d.max_seq_len = 1024;
    d.layers = 12;
    d.width = 768;
    d.heads = 12;
    d.kv_heads = 0;
    d.ffn_hidden = 0;
    d.tie_embeddings = -1;
    d.norm_eps = 1e-5f;
    d.rope_theta = 10000.0f;
    d.init_std = 0.02f;
    d.seed = 1337;
    d.moe_aux_loss_coef = 0.01f;
    d.moe_z_loss_coef = 0.001f;
    return llmt__opts_init(cfg, size, 0, &d, sizeof d, "llmt_model_config");
}

/* Fill defaults that depend on other fields and check every rule. */
static llmt_status resolve_config(llmt_err *e, llmt_model_config *c)
{
    if (c->arch != LLMT_ARCH_GPT2 && c->arch != LLMT_ARCH_LLAMA)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: arch %d is not GPT2 (0) or LLAMA (1)",
                             (int)c->arch);
    if (c->vocab_size < 2)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: vocab_size %d must be >= 2",
                             (int)c->vocab_size);
    if (c->padded_vocab_size == 0) c->padded_vocab_size = c->vocab_size;
    if (c->padded_vocab_size < c->vocab_size)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: padded_vocab_size %d < vocab_size %d",
                             (int)c->padded_vocab_size, (int)c->vocab_size);
    if (c->max_seq_len < 1 || c->layers < 1 || c->width < 1 || c->heads < 1)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: max_seq_len %d, layers %d, width %d and "
                             "heads %d must all be >= 1",
                             (int)c->max_seq_len, (int)c->layers,
                             (int)c->width, (int)c->heads);
    if (c->width % c->heads != 0)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: heads %d does not divide width %d",
                             (int)c->heads, (int)c->width);
    if (c->kv_heads == 0) c->kv_heads = c->heads;
    if (c->kv_heads < 0 || c->heads % c->kv_heads != 0)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: kv_heads %d does not divide heads %d",
                             (int)c->kv_heads, (int)c->heads);
    if (c->arch == LLMT_ARCH_GPT2 && c->kv_heads != c->heads)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: GPT-2 has no grouped-query attention "
                             "(kv_heads %d != heads %d)",
                             (int)c->kv_heads, (int)c->heads);
    if (c->arch == LLMT_ARCH_LLAMA && (c->width / c->heads) % 2 != 0)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: RoPE needs an even head dim (width %d / "
                             "heads %d)", (int)c->width, (int)c->heads);
    if (c->ffn_hidden == 0) {
        if (c->arch == LLMT_ARCH_GPT2) {
            c->ffn_hidden = 4 * c->width;
        } else {
            int h = 8 * c->width / 3;
            c->ffn_hidden = (h + 255) / 256 * 256;
        }
    }
    if (c->ffn_hidden < 1)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: ffn_hidden %d must be >= 1",
                             (int)c->ffn_hidden);
    if (c->moe_experts < 0 || (c->moe_experts > 0 && c->arch != LLMT_ARCH_LLAMA))
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: moe_experts %d: mixture of experts needs the Llama "
                             "arch (SwiGLU experts) and experts >= 0",
                             (int)c->moe_experts);
    if (c->moe_experts > 0) {
        if (c->moe_top_k == 0)
            c->moe_top_k = c->moe_experts > 1 ? 2 : 1;
        if (c->moe_ffn == 0)
            c->moe_ffn = c->ffn_hidden;
        if (c->moe_every == 0)
            c->moe_every = 1;
        if (c->moe_capacity_factor == 0.0f)
            c->moe_capacity_factor = 1.25f;
        if (c->moe_top_k < 1 || c->moe_top_k > c->moe_experts)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "model: moe_top_k %d must be in [1, moe_experts %d]",
                                 (int)c->moe_top_k, (int)c->moe_experts);
        if (c->moe_ffn < 1 || c->moe_every < 1 || c->moe_every > c->layers)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "model: moe_ffn %d must be >= 1 and moe_every %d in [1, "
                                 "layers %d]",
                                 (int)c->moe_ffn, (int)c->moe_every, (int)c->layers);
        if (!(c->moe_capacity_factor > 0.0f))
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "model: moe_capacity_factor %g must be > 0 (moe_dropless 1 "
                                 "for no capacity)",
                                 (double)c->moe_capacity_factor);
        if (!(c->moe_aux_loss_coef >= 0.0f) || !(c->moe_z_loss_coef >= 0.0f))
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "model: moe_aux_loss_coef %g and moe_z_loss_coef %g must be "
                                 ">= 0",
                                 (double)c->moe_aux_loss_coef, (double)c->moe_z_loss_coef);
        if (c->moe_shared_experts < 0)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "model: moe_shared_experts %d must be >= 0",
                                 (int)c->moe_shared_experts);
        /* dropless: no capacity, so a capacity factor would be ignored
         * (0 and 1.25 are the default's two spellings) */
        if (c->moe_dropless && c->moe_capacity_factor != 0.0f &&
            c->moe_capacity_factor != 1.25f)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "model: moe_capacity_factor %g is set but moe_dropless is 1 "
                                 "(no capacity limit): it takes effect only with moe_dropless "
                                 "0 (leave it 0)",
                                 (double)c->moe_capacity_factor);
        if (c->moe_raw_gates != 0 && c->moe_raw_gates != 1)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "model: moe_raw_gates %d must be 0 (renormalised top-k "
                                 "weights) or 1 (the softmax probabilities)",
                                 (int)c->moe_raw_gates);
    } else if (c->moe_top_k || c->moe_ffn || c->moe_every || c->moe_dropless ||
               c->moe_capacity_factor != 0.0f || c->moe_shared_experts || c->moe_raw_gates) {
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: moe_top_k, moe_ffn, moe_every, moe_dropless, "
                             "moe_capacity_factor, moe_shared_experts or moe_raw_gates set but "
                             "moe_experts is 0 (dense)");
    } else if (c->moe_aux_loss_coef != 0.01f || c->moe_z_loss_coef != 0.001f) {
        /* a dense model has no router loss to weigh (0 is the no-loss value too) */
        if ((c->moe_aux_loss_coef != 0.01f && c->moe_aux_loss_coef != 0.0f) ||
            (c->moe_z_loss_coef != 0.001f && c->moe_z_loss_coef != 0.0f))
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "model: %s %g is set but moe_experts is 0 (dense): it takes "
                                 "effect only with experts (leave it at its default)",
                                 c->moe_aux_loss_coef != 0.01f && c->moe_aux_loss_coef != 0.0f
                                     ? "moe_aux_loss_coef"
                                     : "moe_z_loss_coef",
                                 c->moe_aux_loss_coef != 0.01f && c->moe_aux_loss_coef != 0.0f
                                     ? (double)c->moe_aux_loss_coef
                                     : (double)c->moe_z_loss_coef);
    }
    /* GPT-2 has learned positions: a RoPE base would be ignored */
    if (c->arch == LLMT_ARCH_GPT2 && c->rope_theta != 10000.0f)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: rope_theta %g is set but arch is GPT2 (learned positions, "
                             "no RoPE): it takes effect only with LLMT_ARCH_LLAMA (leave it "
                             "10000)",
                             (double)c->rope_theta);
    if (c->tie_embeddings < -1 || c->tie_embeddings > 1)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: tie_embeddings %d is not -1 (the arch's default), 0 or 1",
                             (int)c->tie_embeddings);
    if (c->tie_embeddings < 0)
        c->tie_embeddings = c->arch == LLMT_ARCH_GPT2;
    if (c->arch == LLMT_ARCH_GPT2 && !c->tie_embeddings)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: GPT-2 ties its embeddings "
                             "(tie_embeddings must be 1 or -1)");
    if (!(c->norm_eps > 0.0f) || !(c->init_std >= 0.0f) ||
        !(c->rope_theta > 0.0f))
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "model: norm_eps and rope_theta must be > 0, "
                             "init_std >= 0");
    return LLMT_OK;
}

static size_t add_param(llmt_model *m, int count_only, const char *name,
                        int ndim, int64_t d0, int64_t d1)
{
    size_t numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    size_t off = m->total;
    if (!count_only) {
        llmt__param *p = &m->params[m->nparams];
        snprintf(p->name, sizeof p->name, "%s", name);
        p->ndim = ndim;
        p->shape[0] = d0;
        p->shape[1] = ndim == 2 ? d1 : 1;
        p->offset = off;
        p->numel = numel;
        p->decay = ndim == 2;
    }
    m->nparams++;
    m->total += numel;
    return off;
}

/* Builds the table twice: once to count, once to fill. */
static void build_table(llmt_model *m, int count_only)
{
    const llmt_model_config *c = &m->cfg;
    int64_t C = c->width, F = c->ffn_hidden, Vp = c->padded_vocab_size;
    char nm[LLMT__PNAME_MAX];
    m->nparams = 0;
    m->total = 0;
    if (c->arch == LLMT_ARCH_GPT2) {
        m->wte = add_param(m, count_only, "wte", 2, Vp, C);
        m->wpe = add_param(m, count_only, "wpe", 2, c->max_seq_len, C);
    } else {
        m->wte = add_param(m, count_only, "tok_embeddings", 2, Vp, C);
        m->wpe = LLMT__NOPARAM;
    }
    for (int l = 0; l < c->layers; l++) {
        llmt__layer_offs o, *L = count_only ? &o : &m->layer[l];
        for (size_t *p = &L->ln1w; p <= &L->sw2; p++)
            *p = LLMT__NOPARAM;
#define P(field, fmt, nd, a, b)                            \
    do {                                                   \
        snprintf(nm, sizeof nm, fmt, l);                   \
        L->field = add_param(m, count_only, nm, nd, a, b); \
    } while (0)
        if (c->arch == LLMT_ARCH_GPT2) {
            P(ln1w, "h.%d.ln_1.weight", 1, C, 0);
            P(ln1b, "h.%d.ln_1.bias", 1, C, 0);
            P(qkvw, "h.%d.attn.c_attn.weight", 2, 3 * C, C);
            P(qkvb, "h.%d.attn.c_attn.bias", 1, 3 * C, 0);
            P(projw, "h.%d.attn.c_proj.weight", 2, C, C);
            P(projb, "h.%d.attn.c_proj.bias", 1, C, 0);
            P(ln2w, "h.%d.ln_2.weight", 1, C, 0);
            P(ln2b, "h.%d.ln_2.bias", 1, C, 0);
            P(fcw, "h.%d.mlp.c_fc.weight", 2, F, C);
            P(fcb, "h.%d.mlp.c_fc.bias", 1, F, 0);
            P(fcprojw, "h.%d.mlp.c_proj.weight", 2, C, F);
            P(fcprojb, "h.%d.mlp.c_proj.bias", 1, C, 0);
        } else {
            P(ln1w, "layers.%d.attention_norm.weight", 1, C, 0);
            P(qkvw, "layers.%d.attention.wqkv.weight", 2, m->qkv_dim, C);
            P(projw, "layers.%d.attention.wo.weight", 2, C, C);
            P(ln2w, "layers.%d.ffn_norm.weight", 1, C, 0);
        }
        if (c->arch == LLMT_ARCH_LLAMA && llmt__model_moe_layer(c, l)) {
            int64_t E = c->moe_experts, Fe = c->moe_ffn;
            /* the shared experts (one SwiGLU of S * Fe, moe_shared.h)
             * first: the routed experts stay the layer's last tensors,
             * which expert parallelism's units cut off (dp.c) */
            if (c->moe_shared_experts > 0) {
                int64_t Fs = (int64_t)c->moe_shared_experts * Fe;
                P(sw1, "layers.%d.feed_forward.shared_experts.w1.weight", 2, Fs, C);
                P(sw3, "layers.%d.feed_forward.shared_experts.w3.weight", 2, Fs, C);
                P(sw2, "layers.%d.feed_forward.shared_experts.w2.weight", 2, C, Fs);
            }
            P(router, "layers.%d.feed_forward.router.weight", 2, E, C);
            P(ew1, "layers.%d.feed_forward.experts.w1.weight", 2, E * Fe, C);
            P(ew3, "layers.%d.feed_forward.experts.w3.weight", 2, E * Fe, C);
            P(ew2, "layers.%d.feed_forward.experts.w2.weight", 2, E * C, Fe);
        } else if (c->arch == LLMT_ARCH_LLAMA) {
            P(fcw, "layers.%d.feed_forward.w1.weight", 2, F, C);
            P(fc3w, "layers.%d.feed_forward.w3.weight", 2, F, C);
            P(fcprojw, "layers.%d.feed_forward.w2.weight", 2, C, F);
        }
#undef P
    }
    if (c->arch == LLMT_ARCH_GPT2) {
        m->lnfw = add_param(m, count_only, "ln_f.weight", 1, C, 0);
        m->lnfb = add_param(m, count_only, "ln_f.bias", 1, C, 0);
    } else {
        m->lnfw = add_param(m, count_only, "norm.weight", 1, C, 0);
        m->lnfb = LLMT__NOPARAM;
    }
    if (c->tie_embeddings)
        m->lm_head = m->wte;
    else
        m->lm_head = add_param(m, count_only, "output.weight", 2, Vp, C);
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
    return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* GPT-2 / Llama initialisation: N(0, std) weights, residual output
 * projections N(0, std/sqrt(2L)), norm weights 1, biases 0. Each tensor
 * has its own stream derived from (seed, index): independent of threads. */
static void init_params(llmt_model *m)
{
    const llmt_model_config *c = &m->cfg;
    double resid_std = c->init_std / sqrt(2.0 * c->layers);
    for (int i = 0; i < m->nparams; i++) {
        llmt__param *p = &m->params[i];
        float *x = m->data + p->offset;
        const char *n = p->name;
        size_t len = strlen(n);
        int is_norm = strstr(n, "ln_") || strstr(n, "norm");
        int is_bias = len > 5 && strcmp(n + len - 5, ".bias") == 0;
        if (is_bias) {
            memset(x, 0, p->numel * sizeof(float));
            continue;
        }
        if (is_norm) {
            for (size_t j = 0; j < p->numel; j++) x[j] = 1.0f;
            continue;
        }
        double std = c->init_std;
        if (strstr(n, "c_proj.weight") || strstr(n, "wo.weight") ||
            strstr(n, "w2.weight"))
            std = resid_std;
        uint64_t s = c->seed ^ ((uint64_t)(i + 1) * 0xD1B54A32D192ED03ull);
        for (size_t j = 0; j + 1 < p->numel + 1; j += 2) {
            double u1 = uniform01(&s), u2 = uniform01(&s);
            double r = sqrt(-2.0 * log(u1));
            x[j] = (float)(std * r * cos(6.283185307179586 * u2));
            if (j + 1 < p->numel)
                x[j + 1] = (float)(std * r * sin(6.283185307179586 * u2));
        }
    }
}

llmt_status llmt__model_new(llmt_context *ctx, const llmt_model_config *cfg,
                            int init, llmt_model **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "model: create", cfg);
    LLMT__NONNULL(ce, "model: create", out);
    *out = NULL;
    llmt_model_config c;
    llmt_model_config_init(&c, sizeof c);
    llmt_status s = llmt__opts_copy(ce, "llmt_model_config", &c, sizeof c, cfg);
    if (s != LLMT_OK) return s;
    c.struct_size = sizeof c;
    s = resolve_config(ce, &c);
    if (s != LLMT_OK) return s;
    llmt_model *m = llmt__calloc(ctx, 1, sizeof *m);
    if (!m) return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "model: no memory");
    m->ctx = ctx;
    m->cfg = c;
    m->head_dim = c.width / c.heads;
    m->qkv_dim = (c.heads + 2 * c.kv_heads) * m->head_dim;
    build_table(m, 1);
    m->params = llmt__calloc(ctx, (size_t)m->nparams, sizeof *m->params);
    m->layer = llmt__calloc(ctx, (size_t)c.layers, sizeof *m->layer);
    size_t total = m->total;
    m->data = llmt__alloc(ctx, total * sizeof(float), 64);
    if (!m->params || !m->layer || !m->data) {
        llmt_model_destroy(m);
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY,
                             "model: cannot allocate %zu parameters", total);
    }
    build_table(m, 0);
    if (init)
        init_params(m);
    else
        memset(m->data, 0, total * sizeof(float));
    *out = m;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_model_create(llmt_context *ctx, const llmt_model_config *cfg,
                              llmt_model **out)
{
    return llmt__model_new(ctx, cfg, 1, out);
}

LLMT_API void llmt_model_destroy(llmt_model *m)
{
    if (!m) return;
    llmt_context *ctx = m->ctx;
    if (m->data) llmt__free(ctx, m->data, m->total * sizeof(float));
    if (m->params) llmt__free(ctx, m->params, (size_t)m->nparams * sizeof *m->params);
    if (m->layer) llmt__free(ctx, m->layer, (size_t)m->cfg.layers * sizeof *m->layer);
    llmt__free(ctx, m, sizeof *m);
}

LLMT_API const char *llmt_model_last_error(const llmt_model *m)
{
    return m ? m->err.msg : "model: NULL handle";
}

LLMT_API llmt_status llmt_model_get_config(const llmt_model *m, llmt_model_config *cfg)
{
    if (!m) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&m->err, "model: get_config", cfg);
    size_t n = cfg->struct_size;
    if (n < sizeof(size_t))
        return llmt__err_set((llmt_err *)&m->err, LLMT_ERR_STRUCT_SIZE,
                             "model: get_config: cfg: struct_size is %zu; set it to "
                             "sizeof the struct", n);
    size_t given = n;
    if (n > sizeof m->cfg) n = sizeof m->cfg;
    memcpy(cfg, &m->cfg, n);
    /* the caller's own size, not ours: a shorter struct passed on to
     * llmt_model_create must not claim bytes it does not have */
    cfg->struct_size = given;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_model_param_count(const llmt_model *m, int32_t *count,
                                   int64_t *numel)
{
    if (!m) return LLMT_ERR_NULL_POINTER;
    if (count) *count = m->nparams;
    if (numel) {
        int64_t n = 0;
        for (int i = 0; i < m->nparams; i++) n += (int64_t)m->params[i].numel;
        *numel = n;
    }
    return LLMT_OK;
}

llmt_status llmt__model_view(llmt_model *m, int32_t index, float *base,
                             llmt_tensor *view)
{
    const llmt__param *p = &m->params[index];
    return llmt_tensor_init(view, view->struct_size ? view->struct_size
                                                    : sizeof *view,
                            LLMT_DTYPE_FP32, p->ndim, p->shape,
                            base + p->offset, LLMT_DEVICE_CPU, 0);
}

LLMT_API llmt_status llmt_model_param(llmt_model *m, int32_t index, const char **name,
                             llmt_tensor *view)
{
    if (!m) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&m->err, "model: param", view);
    if (index < 0 || index >= m->nparams)
        return llmt__err_set(&m->err, LLMT_ERR_INVALID_ARGUMENT,
                             "model: parameter index %d not in [0, %d)",
                             (int)index, (int)m->nparams);
    if (name) *name = m->params[index].name;
    view->struct_size = sizeof *view;
    return llmt__model_view(m, index, m->data, view);
}

int32_t llmt__model_find(const llmt_model *m, const char *name)
{
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].name, name) == 0) return i;
    return -1;
}

LLMT_API llmt_status llmt_model_find_param(llmt_model *m, const char *name,
                                  llmt_tensor *view)
{
    if (!m) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&m->err, "model: find_param", name);
    LLMT__NONNULL(&m->err, "model: find_param", view);
    int32_t i = llmt__model_find(m, name);
    if (i < 0)
        return llmt__err_set(&m->err, LLMT_ERR_NOT_FOUND,
                             "model: no parameter named '%s'", name);
    return llmt_model_param(m, i, NULL, view);
}
