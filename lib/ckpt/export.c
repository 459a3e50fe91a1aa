/* Inspection of the open checkpoint (its placement, chunk by chunk) and the
 * export to llm.c model files (through lib/model's writer, so the file is
 * exactly what llmt_model_export_llmc writes for the same parameters). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"

LLMT_API llmt_status llmt_ckpt_open_info(llmt_ckpt *ck, int32_t *world_size,
                                         uint64_t *data_bytes, size_t *nkv)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    llmt_status s = llmt__ckpt_need_open(ck);
    if (s != LLMT_OK)
        return s;
    if (world_size)
        *world_size = ck->open.world_size;
    if (data_bytes) {
        uint64_t b = 0;
        for (size_t i = 0; i < ck->open.nfiles; i++)
            b += ck->open.files[i].bytes;
        *data_bytes = b;
    }
    if (nkv)
        *nkv = ck->open.nkv;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_kv_key(llmt_ckpt *ck, size_t index, const char **key)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: kv_key", key);
    *key = NULL;
    llmt_status s = llmt__ckpt_need_open(ck);
    if (s != LLMT_OK)
        return s;
    if (index >= ck->open.nkv)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: key index %zu >= %zu", index, ck->open.nkv);
    *key = ck->open.kv[index].key;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_chunk_info(llmt_ckpt *ck, const char *name,
                                          size_t chunk, int32_t *rank,
                                          int64_t *global_offsets,
                                          int64_t *local_shape, uint64_t *bytes)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: chunk_info", name);
    const ck_tensor *t;
    llmt_status s = llmt__ckpt_open_tensor(ck, name, &t);
    if (s != LLMT_OK)
        return s;
    if (chunk >= t->nchunks)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: tensor '%s' has %zu chunks, asked for %zu", t->name,
                             t->nchunks, chunk);
    const ck_chunk *k = &t->chunks[chunk];
    if (rank)
        *rank = k->rank;
    for (int d = 0; d < LLMT_MAX_DIMS; d++) {
        if (global_offsets)
            global_offsets[d] = d < t->ndim ? k->goff[d] : 0;
        if (local_shape)
            local_shape[d] = d < t->ndim ? k->lshape[d] : 0;
    }
    if (bytes)
        *bytes = k->length;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_llmc_opts_init(llmt_ckpt_llmc_opts *opts, size_t size)
{
    llmt_ckpt_llmc_opts d = {0};
    d.prefix = "param/";
    return llmt__opts_init(opts, size, offsetof(llmt_ckpt_llmc_opts, prefix), &d, sizeof d,
                           "ckpt llm.c opts");
}

/* An int from a key/value of the open checkpoint, or 0 when absent. */
static int32_t kv_int(llmt_ckpt *ck, const char *key)
{
    for (size_t i = 0; i < ck->open.nkv; i++)
        if (!strcmp(ck->open.kv[i].key, key)) {
            char *end = NULL;
            long v = strtol(ck->open.kv[i].val, &end, 10);
            return end && !*end && v > 0 && v < INT32_MAX ? (int32_t)v : 0;
        }
    return 0;
}

static const ck_tensor *find_pref(llmt_ckpt *ck, const char *prefix, const char *name)
{
    char key[CK_NAME_MAX + 64];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    return llmt__ckpt_find_tensor(&ck->open, key);
}

LLMT_API llmt_status llmt_ckpt_export_llmc(llmt_ckpt *ck, const char *path,
                                           const llmt_ckpt_llmc_opts *opts)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: export_llmc", path);
    llmt_status s = llmt__ckpt_need_open(ck);
    if (s != LLMT_OK)
        return s;
    llmt_ckpt_llmc_opts o;
    llmt_ckpt_llmc_opts_init(&o, sizeof o);
    if (opts && (s = llmt__opts_copy(&ck->err, "ckpt llm.c opts", &o, sizeof o, opts)) != LLMT_OK)
        return s;
    const char *pre = o.prefix ? o.prefix : "";
    if (strlen(pre) > 64)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: export llm.c: prefix longer than 64 bytes");
    /* The GPT-2 shape from the tensors themselves. */
    const ck_tensor *wte = find_pref(ck, pre, "wte"), *wpe = find_pref(ck, pre, "wpe");
    const ck_tensor *fc = find_pref(ck, pre, "h.0.mlp.c_fc.weight");
    if (!wte || !wpe || !fc || wte->ndim != 2 || wpe->ndim != 2 || fc->ndim != 2)
        return llmt__err_set(&ck->err, LLMT_ERR_UNSUPPORTED,
                             "ckpt: export llm.c: step %" PRId64 " has no GPT-2 parameters "
                             "'%swte', '%swpe', '%sh.0.mlp.c_fc.weight' (2-D)",
                             ck->open.step, pre, pre, pre);
    int32_t layers = 0;
    while (layers < 100000) {
        char n[64];
        snprintf(n, sizeof n, "h.%d.ln_1.weight", (int)layers);
        if (!find_pref(ck, pre, n))
            break;
        layers++;
    }
    llmt_model_config cfg;
    llmt_model_config_init(&cfg, sizeof cfg);
    cfg.arch = LLMT_ARCH_GPT2;
    cfg.padded_vocab_size = (int32_t)wte->gshape[0];
    cfg.width = (int32_t)wte->gshape[1];
    cfg.max_seq_len = (int32_t)wpe->gshape[0];
    cfg.layers = layers;
    cfg.ffn_hidden = (int32_t)fc->gshape[0];
    cfg.heads = o.heads ? o.heads : kv_int(ck, "model.heads");
    cfg.vocab_size = o.vocab_size ? o.vocab_size : kv_int(ck, "model.vocab_size");
    if (!cfg.vocab_size)
        cfg.vocab_size = cfg.padded_vocab_size;
    if (cfg.heads <= 0)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: export llm.c: the head count is not in the checkpoint "
                             "(key model.heads); pass opts.heads (llmtrain ckpt export --heads N)");
    llmt_model *m = NULL;
    s = llmt_model_create(ck->ctx, &cfg, &m);
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: export llm.c: config L=%d C=%d heads=%d "
                             "V=%d Vp=%d T=%d refused: %s", (int)cfg.layers, (int)cfg.width,
                             (int)cfg.heads, (int)cfg.vocab_size, (int)cfg.padded_vocab_size,
                             (int)cfg.max_seq_len,
                             ck->ctx ? llmt_context_last_error(ck->ctx) : "");
    int32_t n = 0;
    llmt_model_param_count(m, &n, NULL);
    for (int32_t i = 0; s == LLMT_OK && i < n; i++) {
        const char *pn = NULL;
        llmt_tensor v;
        memset(&v, 0, sizeof v);
        v.struct_size = sizeof v;
        s = llmt_model_param(m, i, &pn, &v);
        if (s != LLMT_OK) {
            s = llmt__err_set(&ck->err, s, "ckpt: export llm.c: parameter %d", (int)i);
            break;
        }
        char key[CK_NAME_MAX + 64];
        snprintf(key, sizeof key, "%s%s", pre, pn);
        const ck_tensor *t = llmt__ckpt_find_tensor(&ck->open, key);
        int same = t && t->dtype == LLMT_DTYPE_FP32 && t->ndim == v.ndim;
        for (int d = 0; same && d < v.ndim; d++)
            same = t->gshape[d] == v.shape[d];
        if (!same) {
            s = llmt__err_set(&ck->err, t ? LLMT_ERR_INVALID_ARGUMENT : LLMT_ERR_NOT_FOUND,
                              "ckpt: export llm.c: tensor '%s' %s", key,
                              t ? "is not fp32 of the GPT-2 shape" : "is missing");
            break;
        }
        s = llmt_ckpt_read(ck, key, &v, NULL);
    }
    if (s == LLMT_OK) {
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        s = llmt_model_export_llmc(m, tmp);
        if (s != LLMT_OK)
            s = llmt__err_set(&ck->err, s, "ckpt: export llm.c: %s", llmt_model_last_error(m));
        else if (rename(tmp, path))
            s = llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: export llm.c: rename to %s failed",
                              path);
        if (s != LLMT_OK)
            remove(tmp);
    }
    llmt_model_destroy(m);
    return s;
}
