/* Export of a checkpoint: a small GPT-2's parameters, saved by two ranks
 * (dim 0 of every tensor split in two), exported to an llm.c model file and
 * read back by lib/model's llm.c importer, and to safetensors, read back by
 * an independent parser here; every element must equal the model's.
 * usage: test_export [DIR]  (DIR: keep the checkpoint root and the exported
 * files there, for test_cli_ckpt.sh) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "ckpt_util.h"
#include "small_model.h"

static llmt_model *make_model(void)
{
    llmt_model_config c;
    small_model_config(&c, 60, 64, 16, 2, 32, 4, 42);
    return small_model_create(NULL, &c);
}

static void save_model(llmt_model *m, const char *root, int64_t step)
{
    int32_t n = 0;
    llmt_model_param_count(m, &n, NULL);
    for (int r = 0; r < 2; r++) {
        llmt_ckpt_opts o;
        llmt_ckpt_opts_init(&o, sizeof o);
        o.rank = r;
        o.world_size = 2;
        llmt_ckpt *ck = NULL;
        CHECK_STATUS(llmt_ckpt_create(NULL, root, &o, &ck), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_begin(ck, step), LLMT_OK);
        for (int32_t i = 0; i < n; i++) {
            const char *pn = NULL;
            llmt_tensor v;
            memset(&v, 0, sizeof v);
            v.struct_size = sizeof v;
            llmt_model_param(m, i, &pn, &v);
            int64_t g[LLMT_MAX_DIMS], off[LLMT_MAX_DIMS] = {0};
            for (int d = 0; d < v.ndim; d++)
                g[d] = v.shape[d];
            /* rows [r*n/2, (r+1)*n/2) */
            int64_t a = g[0] * r / 2, b = g[0] * (r + 1) / 2;
            off[0] = a;
            v.shape[0] = b - a;
            v.data = (char *)v.data + a * v.strides[0] * 4;
            char key[300];
            snprintf(key, sizeof key, "param/%s", pn);
            CHECK_STATUS(llmt_ckpt_add_tensor(ck, key, &v, g, off), LLMT_OK);
        }
        if (r == 0) {
            CHECK_STATUS(llmt_ckpt_set_kv(ck, "model.heads", "4"), LLMT_OK);
            CHECK_STATUS(llmt_ckpt_set_kv(ck, "model.vocab_size", "60"), LLMT_OK);
            CHECK_STATUS(llmt_ckpt_set_kv(ck, "note", "tab\there \"quoted\""), LLMT_OK);
        }
        CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
        llmt_ckpt_destroy(ck);
    }
}

static int same_params(llmt_model *a, llmt_model *b)
{
    int32_t na = 0, nb = 0;
    llmt_model_param_count(a, &na, NULL);
    llmt_model_param_count(b, &nb, NULL);
    if (na != nb)
        return 0;
    for (int32_t i = 0; i < na; i++) {
        const char *n1 = NULL, *n2 = NULL;
        llmt_tensor v1, v2;
        memset(&v1, 0, sizeof v1);
        memset(&v2, 0, sizeof v2);
        v1.struct_size = v2.struct_size = sizeof v1;
        llmt_model_param(a, i, &n1, &v1);
        llmt_model_param(b, i, &n2, &v2);
        int64_t nb1 = 0, nb2 = 0;
        llmt_tensor_nbytes(&v1, &nb1);
        llmt_tensor_nbytes(&v2, &nb2);
        if (strcmp(n1, n2) || nb1 != nb2 || memcmp(v1.data, v2.data, (size_t)nb1)) {
            fprintf(stderr, "parameter %s differs\n", n1);
            return 0;
        }
    }
    return 1;
}

static unsigned char *slurp(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*len + 1);
    if (fread(b, 1, (size_t)*len, f) != (size_t)*len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

/* Every parameter in the safetensors file equals the model's. */
static int check_safetensors(const char *path, llmt_model *m)
{
    long len = 0;
    unsigned char *b = slurp(path, &len);
    if (!b || len < 8)
        return 0;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | b[i];
    int ok = hl % 8 == 0 && 8 + hl <= (uint64_t)len;
    cJSON *h = ok ? cJSON_ParseWithLength((const char *)b + 8, (size_t)hl) : NULL;
    ok = h != NULL;
    const cJSON *meta = cJSON_GetObjectItem(h, "__metadata__");
    const cJSON *step = cJSON_GetObjectItem(meta, "llmtrain.step");
    const cJSON *note = cJSON_GetObjectItem(meta, "note");
    ok = ok && cJSON_IsString(step) && !strcmp(step->valuestring, "7");
    ok = ok && cJSON_IsString(note) && !strcmp(note->valuestring, "tab\there \"quoted\"");
    int32_t n = 0;
    llmt_model_param_count(m, &n, NULL);
    uint64_t end = 0;
    for (int32_t i = 0; ok && i < n; i++) {
        const char *pn = NULL;
        llmt_tensor v;
        memset(&v, 0, sizeof v);
        v.struct_size = sizeof v;
        llmt_model_param(m, i, &pn, &v);
        char key[300];
        snprintf(key, sizeof key, "param/%s", pn);
        const cJSON *t = cJSON_GetObjectItem(h, key);
        const cJSON *dt = cJSON_GetObjectItem(t, "dtype");
        const cJSON *sh = cJSON_GetObjectItem(t, "shape");
        const cJSON *of = cJSON_GetObjectItem(t, "data_offsets");
        int64_t nb = 0;
        llmt_tensor_nbytes(&v, &nb);
        ok = cJSON_IsString(dt) && !strcmp(dt->valuestring, "F32") &&
             cJSON_GetArraySize(sh) == v.ndim && cJSON_GetArraySize(of) == 2;
        for (int d = 0; ok && d < v.ndim; d++)
            ok = cJSON_GetArrayItem(sh, d)->valuedouble == (double)v.shape[d];
        if (!ok)
            break;
        uint64_t a = (uint64_t)cJSON_GetArrayItem(of, 0)->valuedouble;
        uint64_t z = (uint64_t)cJSON_GetArrayItem(of, 1)->valuedouble;
        ok = z - a == (uint64_t)nb && 8 + hl + z <= (uint64_t)len &&
             !memcmp(b + 8 + hl + a, v.data, (size_t)nb);
        if (!ok)
            fprintf(stderr, "safetensors: %s differs\n", key);
        end = z > end ? z : end;
    }
    ok = ok && 8 + hl + end == (uint64_t)len;
    cJSON_Delete(h);
    free(b);
    return ok;
}

int main(int argc, char **argv)
{
    char *base = argc > 1 ? strdup(argv[1]) : tmpdir_make(NULL, "export");
    char root[4096], llmc[4200], st[4200], direct[4200];
    snprintf(root, sizeof root, "%s/ckpt", base);
    snprintf(llmc, sizeof llmc, "%s/export.llmc.bin", base);
    snprintf(st, sizeof st, "%s/export.safetensors", base);
    snprintf(direct, sizeof direct, "%s/model.llmc.bin", base);
    llmt_model *m = make_model();
    save_model(m, root, 3);
    save_model(m, root, 7);
    CHECK_STATUS(llmt_model_export_llmc(m, direct), LLMT_OK);

    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(NULL, root, NULL, &ck), LLMT_OK);
    int64_t step = -1;
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &step), LLMT_OK);
    CHECK_EQ_INT(step, 7);
    CHECK_STATUS(llmt_ckpt_export_llmc(ck, llmc, NULL), LLMT_OK);
    llmt_model *back = NULL;
    CHECK_STATUS(llmt_model_import_llmc(NULL, llmc, &back), LLMT_OK);
    if (back) {
        CHECK(same_params(m, back));
        llmt_model_config c;
        llmt_model_config_init(&c, sizeof c);
        llmt_model_get_config(back, &c);
        CHECK(c.heads == 4 && c.vocab_size == 60 && c.padded_vocab_size == 64 &&
              c.layers == 2 && c.width == 32 && c.max_seq_len == 16);
        llmt_model_destroy(back);
    }
    /* byte-identical to lib/model's own export of the same parameters */
    long l1 = 0, l2 = 0;
    unsigned char *f1 = slurp(llmc, &l1), *f2 = slurp(direct, &l2);
    CHECK(f1 && f2 && l1 == l2 && !memcmp(f1, f2, (size_t)l1));
    free(f1);
    free(f2);
    /* wrong prefix, missing heads: clear errors, no file */
    llmt_ckpt_llmc_opts lo;
    CHECK_STATUS(llmt_ckpt_llmc_opts_init(&lo, sizeof lo), LLMT_OK);
    lo.prefix = "adam_m/";
    CHECK_STATUS(llmt_ckpt_export_llmc(ck, "/nonexistent/x", &lo), LLMT_ERR_UNSUPPORTED);
    CHECK(strstr(llmt_ckpt_last_error(ck), "adam_m/wte") != NULL);
    CHECK_STATUS(llmt_ckpt_export_safetensors(ck, st), LLMT_OK);
    CHECK(check_safetensors(st, m));
    llmt_ckpt_destroy(ck);
    llmt_model_destroy(m);
    if (argc <= 1)
        tmpdir_remove(base);
    free(base);
    return check_exit("test_export");
}
