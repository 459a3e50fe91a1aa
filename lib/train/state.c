/* The trainer's state in a checkpoint (lib/ckpt's format, nothing else):
 * every parameter, both AdamW moments, the step count and the optimizer
 * and schedule options, so that a resumed run continues bit for bit.
 *
 * Names: "param/<name>", "adam_m/<name>", "adam_v/<name>"; key/values
 * "trainer.step" and "trainer.opts" (text, compared on load). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

llmt_err *llmt__trainer_err(llmt_trainer *tr);
llmt_model *llmt__trainer_model(llmt_trainer *tr);

static const char *const prefix[3] = {"param/", "adam_m/", "adam_v/"};

static llmt_status view_of(llmt_trainer *tr, llmt_model *m, int32_t i,
                           int which, const char **name, llmt_tensor *v)
{
    memset(v, 0, sizeof *v);
    v->struct_size = sizeof *v;
    llmt_status s = llmt_model_param(m, i, name, v);
    if (s != LLMT_OK || which == 0) return s;
    return llmt_trainer_optim_state(tr, i, which - 1, v);
}

llmt_status llmt_trainer_ckpt_add(llmt_trainer *tr, llmt_ckpt *ck)
{
    if (!tr || !ck) return LLMT_ERR_NULL_POINTER;
    llmt_model *model = llmt__trainer_model(tr);
    llmt_err *e = llmt__trainer_err(tr);
    int32_t n = 0;
    llmt_model_param_count(model, &n, NULL);
    for (int32_t i = 0; i < n; i++)
        for (int w = 0; w < 3; w++) {
            const char *pn = NULL;
            llmt_tensor v;
            llmt_status s = view_of(tr, model, i, w, &pn, &v);
            if (s != LLMT_OK)
                return llmt__err_set(e, s, "trainer: ckpt: parameter %d: %s",
                                     (int)i, llmt_trainer_last_error(tr));
            char key[256];
            snprintf(key, sizeof key, "%s%s", prefix[w], pn);
            s = llmt_ckpt_add_tensor(ck, key, &v, NULL, NULL);
            if (s != LLMT_OK)
                return llmt__err_set(e, s, "trainer: ckpt: add %s: %s", key,
                                     llmt_ckpt_last_error(ck));
        }
    int64_t step = 0;
    llmt_trainer_get_step(tr, &step);
    char buf[64];
    snprintf(buf, sizeof buf, "%lld", (long long)step);
    llmt_status s = llmt_ckpt_set_kv(ck, "trainer.step", buf);
    if (s != LLMT_OK)
        return llmt__err_set(e, s, "trainer: ckpt: %s", llmt_ckpt_last_error(ck));
    return LLMT_OK;
}

llmt_status llmt_trainer_ckpt_read(llmt_trainer *tr, llmt_ckpt *ck)
{
    if (!tr || !ck) return LLMT_ERR_NULL_POINTER;
    llmt_model *model = llmt__trainer_model(tr);
    llmt_err *e = llmt__trainer_err(tr);
    char buf[64];
    llmt_status s = llmt_ckpt_get_kv(ck, "trainer.step", buf, sizeof buf, NULL);
    if (s != LLMT_OK)
        return llmt__err_set(e, s, "trainer: ckpt: no trainer.step: %s",
                             llmt_ckpt_last_error(ck));
    char *end = NULL;
    long long step = strtoll(buf, &end, 10);
    if (!end || *end || step < 0)
        return llmt__err_set(e, LLMT_ERR_FORMAT,
                             "trainer: ckpt: trainer.step '%s' is not a step",
                             buf);
    int32_t n = 0;
    llmt_model_param_count(model, &n, NULL);
    /* check every shape before touching anything */
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < n; i++)
            for (int w = 0; w < 3; w++) {
                const char *pn = NULL;
                llmt_tensor v;
                s = view_of(tr, model, i, w, &pn, &v);
                if (s != LLMT_OK)
                    return llmt__err_set(e, s, "trainer: ckpt: parameter %d",
                                         (int)i);
                char key[256];
                snprintf(key, sizeof key, "%s%s", prefix[w], pn);
                if (pass == 1) {
                    s = llmt_ckpt_read(ck, key, &v, NULL);
                    if (s != LLMT_OK)
                        return llmt__err_set(e, s, "trainer: ckpt: read %s: %s",
                                             key, llmt_ckpt_last_error(ck));
                    continue;
                }
                llmt_dtype dt;
                int32_t nd = 0;
                int64_t shape[LLMT_MAX_DIMS] = {0};
                s = llmt_ckpt_tensor_info(ck, key, &dt, &nd, shape, NULL);
                if (s != LLMT_OK)
                    return llmt__err_set(e, s,
                                         "trainer: ckpt: tensor %s missing: %s",
                                         key, llmt_ckpt_last_error(ck));
                int same = dt == LLMT_DTYPE_FP32 && nd == v.ndim;
                for (int d = 0; same && d < nd; d++)
                    same = shape[d] == v.shape[d];
                if (!same)
                    return llmt__err_set(
                        e, LLMT_ERR_INVALID_ARGUMENT,
                        "trainer: ckpt: %s is %s with %d dims [%lld, %lld], "
                        "the model has fp32 [%lld, %lld]",
                        key, llmt_dtype_name(dt), (int)nd, (long long)shape[0],
                        (long long)(nd > 1 ? shape[1] : 0),
                        (long long)v.shape[0],
                        (long long)(v.ndim > 1 ? v.shape[1] : 0));
            }
    return llmt_trainer_set_step(tr, (int64_t)step);
}
