/* Model files: safetensors (every parameter by name, F32) and llm.c's
 * GPT-2 checkpoint format (int32[256] header, magic 20240326, version 3 =
 * fp32, parameters in llm.c's order: each kind for all layers together). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/model.h"

#define LLMC_MAGIC 20240326
#define LLMC_VERSION_FP32 3

static llmt_status write_all(llmt_err *e, FILE *f, const void *p, size_t n,
                             const char *path)
{
    if (n && fwrite(p, 1, n, f) != n)
        return llmt__err_set(e, LLMT_ERR_IO, "model: write %s: %s", path,
                             strerror(errno));
    return LLMT_OK;
}

static llmt_status read_all(llmt_err *e, FILE *f, void *p, size_t n,
                            const char *path)
{
    if (n && fread(p, 1, n, f) != n)
        return llmt__err_set(e, LLMT_ERR_FORMAT,
                             "model: %s is truncated (wanted %zu more bytes)",
                             path, n);
    return LLMT_OK;
}

/* Imported weights must be finite: a NaN/Inf read in would only show up
 * steps later as a NaN loss, far from its cause. `data` is laid out as
 * the model's parameters. */
static llmt_status check_finite(llmt_err *e, const llmt_model *m, const float *data,
                                const char *path)
{
    for (int i = 0; i < m->nparams; i++) {
        const llmt__param *p = &m->params[i];
        const float *x = data + p->offset;
        for (size_t k = 0; k < p->numel; k++)
            if (!isfinite(x[k]))
                return llmt__err_set(e, LLMT_ERR_NUMERIC,
                                     "model: %s: tensor '%s' holds %g at "
                                     "element %zu: weights must be finite",
                                     path, p->name, (double)x[k], k);
    }
    return LLMT_OK;
}

LLMT_API llmt_status llmt_model_save_safetensors(llmt_model *m, const char *path)
{
    if (!m) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&m->err, "model: save_safetensors", path);
    cJSON *root = cJSON_CreateObject();
    size_t off = 0;
    for (int i = 0; i < m->nparams; i++) {
        const llmt__param *p = &m->params[i];
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "dtype", "F32");
        cJSON *sh = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < p->ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)p->shape[d]));
        cJSON *of = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        off += p->numel * sizeof(float);
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToObject(root, p->name, t);
    }
    char *js = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!js) return llmt__err_set(&m->err, LLMT_ERR_OUT_OF_MEMORY, "model: no memory");
    size_t jl = strlen(js);
    size_t padded = (jl + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(js);
        return llmt__err_set(&m->err, LLMT_ERR_IO, "model: open %s: %s", path,
                             strerror(errno));
    }
    uint8_t hdr[8];
    for (int i = 0; i < 8; i++) hdr[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    llmt_status s = write_all(&m->err, f, hdr, 8, path);
    if (s == LLMT_OK) s = write_all(&m->err, f, js, jl, path);
    for (size_t i = jl; s == LLMT_OK && i < padded; i++)
        s = write_all(&m->err, f, " ", 1, path);
    free(js);
    for (int i = 0; s == LLMT_OK && i < m->nparams; i++)
        s = write_all(&m->err, f, m->data + m->params[i].offset,
                      m->params[i].numel * sizeof(float), path);
    if (fclose(f) != 0 && s == LLMT_OK)
        s = llmt__err_set(&m->err, LLMT_ERR_IO, "model: close %s: %s", path,
                          strerror(errno));
    return s;
}

LLMT_API llmt_status llmt_model_load_safetensors(llmt_model *m, const char *path)
{
    if (!m) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&m->err, "model: load_safetensors", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return llmt__err_set(&m->err, LLMT_ERR_IO, "model: open %s: %s", path,
                             strerror(errno));
    uint8_t hdr[8];
    llmt_status s = read_all(&m->err, f, hdr, 8, path);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)hdr[i] << (8 * i);
    fseek(f, 0, SEEK_END);
    long fsz = ftell(f);
    if (s == LLMT_OK && (hl == 0 || hl > (uint64_t)fsz - 8 || hl > (1u << 30)))
        s = llmt__err_set(&m->err, LLMT_ERR_FORMAT,
                          "model: %s: safetensors header size %llu invalid",
                          path, (unsigned long long)hl);
    char *js = NULL;
    cJSON *root = NULL;
    if (s == LLMT_OK) {
        js = malloc(hl + 1);
        fseek(f, 8, SEEK_SET);
        if (!js) s = llmt__err_set(&m->err, LLMT_ERR_OUT_OF_MEMORY, "model: no memory");
        else s = read_all(&m->err, f, js, hl, path);
    }
    if (s == LLMT_OK) {
        js[hl] = 0;
        root = cJSON_Parse(js);
        if (!root)
            s = llmt__err_set(&m->err, LLMT_ERR_FORMAT,
                              "model: %s: header is not JSON", path);
    }
    size_t data0 = 8 + hl;
    /* Read into a staging copy: the model changes only when every tensor
     * is there, of the right shape, and finite. */
    size_t total = 0;
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].offset + m->params[i].numel > total)
            total = m->params[i].offset + m->params[i].numel;
    float *stage = NULL;
    if (s == LLMT_OK) {
        stage = malloc(total * sizeof(float) + 1);
        if (!stage)
            s = llmt__err_set(&m->err, LLMT_ERR_OUT_OF_MEMORY, "model: no memory");
        else
            memcpy(stage, m->data, total * sizeof(float));
    }
    for (int i = 0; s == LLMT_OK && i < m->nparams; i++) {
        const llmt__param *p = &m->params[i];
        cJSON *t = cJSON_GetObjectItemCaseSensitive(root, p->name);
        if (!t) {
            s = llmt__err_set(&m->err, LLMT_ERR_NOT_FOUND,
                              "model: %s has no tensor '%s'", path, p->name);
            break;
        }
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
        cJSON *of = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32") != 0) {
            s = llmt__err_set(&m->err, LLMT_ERR_FORMAT,
                              "model: %s: '%s' is not F32", path, p->name);
            break;
        }
        int ok = cJSON_IsArray(sh) && cJSON_GetArraySize(sh) == p->ndim;
        for (int d = 0; ok && d < p->ndim; d++)
            ok = (int64_t)cJSON_GetArrayItem(sh, d)->valuedouble == p->shape[d];
        if (!ok) {
            s = llmt__err_set(&m->err, LLMT_ERR_INVALID_ARGUMENT,
                              "model: %s: '%s' has another shape than the "
                              "model's [%lld, %lld]", path, p->name,
                              (long long)p->shape[0],
                              (long long)(p->ndim == 2 ? p->shape[1] : 1));
            break;
        }
        if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2) {
            s = llmt__err_set(&m->err, LLMT_ERR_FORMAT,
                              "model: %s: '%s' lacks data_offsets", path, p->name);
            break;
        }
        double a = cJSON_GetArrayItem(of, 0)->valuedouble;
        double b = cJSON_GetArrayItem(of, 1)->valuedouble;
        if (b - a != (double)(p->numel * sizeof(float)) || a < 0 ||
            data0 + b > (double)fsz) {
            s = llmt__err_set(&m->err, LLMT_ERR_FORMAT,
                              "model: %s: '%s' data_offsets out of range",
                              path, p->name);
            break;
        }
        fseek(f, (long)(data0 + (size_t)a), SEEK_SET);
        s = read_all(&m->err, f, stage + p->offset, p->numel * sizeof(float), path);
    }
    if (s == LLMT_OK)
        s = check_finite(&m->err, m, stage, path);
    if (s == LLMT_OK)
        memcpy(m->data, stage, total * sizeof(float));
    free(stage);
    cJSON_Delete(root);
    free(js);
    fclose(f);
    return s;
}

/* llm.c's tensor kinds in file order; each is written for all layers. */
static size_t *kind_field(llmt__layer_offs *L, int k)
{
    switch (k) {
    case 0: return &L->ln1w;
    case 1: return &L->ln1b;
    case 2: return &L->qkvw;
    case 3: return &L->qkvb;
    case 4: return &L->projw;
    case 5: return &L->projb;
    case 6: return &L->ln2w;
    case 7: return &L->ln2b;
    case 8: return &L->fcw;
    case 9: return &L->fcb;
    case 10: return &L->fcprojw;
    default: return &L->fcprojb;
    }
}

static size_t kind_numel(const llmt_model *m, int k)
{
    size_t C = (size_t)m->cfg.width, F = (size_t)m->cfg.ffn_hidden;
    static const int mul_c[12] = {1, 1, 3, 3, 0, 1, 1, 1, 0, 0, 0, 1};
    switch (k) {
    case 2: return 3 * C * C;
    case 4: return C * C;
    case 8: return F * C;
    case 9: return F;
    case 10: return C * F;
    default: return (size_t)mul_c[k] * C;
    }
}

static llmt_status llmc_tensors(llmt_model *m, FILE *f, const char *path,
                                int writing)
{
    const llmt_model_config *c = &m->cfg;
    size_t C = (size_t)c->width;
    llmt_status s = LLMT_OK;
#define IO(ptr, n)                                                   \
    (writing ? write_all(&m->err, f, ptr, (n) * sizeof(float), path) \
             : read_all(&m->err, f, ptr, (n) * sizeof(float), path))
    s = IO(m->data + m->wte, (size_t)c->padded_vocab_size * C);
    if (s == LLMT_OK) s = IO(m->data + m->wpe, (size_t)c->max_seq_len * C);
    for (int k = 0; k < 12 && s == LLMT_OK; k++)
        for (int l = 0; l < c->layers && s == LLMT_OK; l++)
            s = IO(m->data + *kind_field(&m->layer[l], k), kind_numel(m, k));
    if (s == LLMT_OK) s = IO(m->data + m->lnfw, C);
    if (s == LLMT_OK) s = IO(m->data + m->lnfb, C);
#undef IO
    return s;
}

LLMT_API llmt_status llmt_model_export_llmc(llmt_model *m, const char *path)
{
    if (!m) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&m->err, "model: export_llmc", path);
    const llmt_model_config *c = &m->cfg;
    if (c->arch != LLMT_ARCH_GPT2 || c->ffn_hidden != 4 * c->width)
        return llmt__err_set(&m->err, LLMT_ERR_UNSUPPORTED,
                             "model: llm.c files hold GPT-2 models with "
                             "ffn_hidden = 4*width only");
    int32_t h[256];
    memset(h, 0, sizeof h);
    h[0] = LLMC_MAGIC;
    h[1] = LLMC_VERSION_FP32;
    h[2] = c->max_seq_len;
    h[3] = c->vocab_size;
    h[4] = c->layers;
    h[5] = c->heads;
    h[6] = c->width;
    h[7] = c->padded_vocab_size;
    FILE *f = fopen(path, "wb");
    if (!f)
        return llmt__err_set(&m->err, LLMT_ERR_IO, "model: open %s: %s", path,
                             strerror(errno));
    llmt_status s = write_all(&m->err, f, h, sizeof h, path);
    if (s == LLMT_OK) s = llmc_tensors(m, f, path, 1);
    if (fclose(f) != 0 && s == LLMT_OK)
        s = llmt__err_set(&m->err, LLMT_ERR_IO, "model: close %s: %s", path,
                          strerror(errno));
    return s;
}

LLMT_API llmt_status llmt_model_import_llmc(llmt_context *ctx, const char *path,
                                   llmt_model **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "model: import_llmc", path);
    LLMT__NONNULL(ce, "model: import_llmc", out);
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return llmt__err_set(ce, LLMT_ERR_IO, "model: open %s: %s", path,
                             strerror(errno));
    int32_t h[256];
    llmt_status s = read_all(ce, f, h, sizeof h, path);
    if (s == LLMT_OK && h[0] != LLMC_MAGIC)
        s = llmt__err_set(ce, LLMT_ERR_FORMAT,
                          "model: %s: magic %d is not llm.c's %d", path,
                          (int)h[0], LLMC_MAGIC);
    if (s == LLMT_OK && h[1] != LLMC_VERSION_FP32)
        s = llmt__err_set(ce, LLMT_ERR_VERSION,
                          "model: %s: llm.c version %d (only 3, fp32, is read)",
                          path, (int)h[1]);
    llmt_model *m = NULL;
    if (s == LLMT_OK) {
        llmt_model_config c;
        llmt_model_config_init(&c, sizeof c);
        c.arch = LLMT_ARCH_GPT2;
        c.max_seq_len = h[2];
        c.vocab_size = h[3];
        c.layers = h[4];
        c.heads = h[5];
        c.width = h[6];
        c.padded_vocab_size = h[7] ? h[7] : h[3];
        /* The file must hold exactly what the header describes: check the
         * size before allocating what a corrupt header might ask for. */
        double C = c.width, V = c.padded_vocab_size, L = c.layers;
        double want = 1024.0 + 4.0 * (V * C + (double)c.max_seq_len * C +
                                      L * (12.0 * C * C + 13.0 * C) + 2.0 * C);
        fseek(f, 0, SEEK_END);
        long fsz = ftell(f);
        fseek(f, (long)sizeof h, SEEK_SET);
        if (c.width < 1 || c.layers < 1 || c.max_seq_len < 1 ||
            c.vocab_size < 1 || c.padded_vocab_size < 1)
            s = llmt__err_set(ce, LLMT_ERR_FORMAT,
                              "model: %s: header has a non-positive size "
                              "(seq %d, vocab %d, layers %d, heads %d, "
                              "width %d, padded vocab %d)", path, (int)h[2],
                              (int)h[3], (int)h[4], (int)h[5], (int)h[6],
                              (int)h[7]);
        else if ((double)fsz != want)
            s = llmt__err_set(ce, LLMT_ERR_FORMAT,
                              "model: %s is %ld bytes, its header (layers "
                              "%d, width %d, vocab %d, seq %d) needs %.0f",
                              path, fsz, (int)c.layers, (int)c.width,
                              (int)c.padded_vocab_size, (int)c.max_seq_len,
                              want);
        else
            s = llmt__model_new(ctx, &c, 0, &m);
    }
    if (s == LLMT_OK) {
        s = llmc_tensors(m, f, path, 0);
        if (s == LLMT_OK)
            s = check_finite(&m->err, m, m->data, path);
        if (s != LLMT_OK) llmt__err_forward(ce, &m->err, "");
        else if (fgetc(f) != EOF)
            s = llmt__err_set(ce, LLMT_ERR_FORMAT,
                              "model: %s is longer than its header says", path);
    }
    fclose(f);
    if (s != LLMT_OK) {
        llmt_model_destroy(m);
        return s;
    }
    *out = m;
    return LLMT_OK;
}
