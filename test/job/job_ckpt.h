/* What the test/job tests that compare llmt_job checkpoints share: a
 * checkpoint step exported (safetensors, llm.c) and the distance between
 * the parameters of two safetensors exports, so that the layouts of
 * test_job_tp.c and test_job_ppckpt.c are measured the same way. Header
 * only: check.h counts failures in the test's own translation unit. */
#ifndef LLMT_TEST_JOB_CKPT_H
#define LLMT_TEST_JOB_CKPT_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"
#include "files.h"

/* An element of two parameter sets counts as apart beyond this (the bound
 * the in-process tests hold most elements to). */
#define JC_APART 1e-5

/* Step `step` of the checkpoints under root (the newest when step < 0; *at
 * gets the step when at is not NULL) exported to safetensors file st and,
 * unless llmc is NULL, to llm.c's file llmc (GPT-2 with `heads` heads), as
 * `llmtrain ckpt export` does. keep NULL: the checkpoint is closed; else
 * *keep gets it open at that step, for the caller to read more of and
 * destroy. Returns whether all of it worked (a failed check naming root
 * when not). */
static inline int jc_export(const char *root, int64_t step, const char *st, const char *llmc,
                            int heads, int64_t *at, llmt_ckpt **keep)
{
    llmt_ckpt *ck = NULL;
    int64_t got = step;
    llmt_status s = llmt_ckpt_create(NULL, root, NULL, &ck);
    if (s == LLMT_OK)
        s = step < 0 ? llmt_ckpt_open_latest(ck, &got) : llmt_ckpt_open_step(ck, step);
    if (s == LLMT_OK)
        s = llmt_ckpt_export_safetensors(ck, st);
    if (s == LLMT_OK && llmc) {
        llmt_ckpt_llmc_opts lo;
        llmt_ckpt_llmc_opts_init(&lo, sizeof lo);
        lo.heads = heads;
        s = llmt_ckpt_export_llmc(ck, llmc, &lo);
    }
    if (s != LLMT_OK)
        fprintf(stderr, "export %s (step %lld; -1: the newest): %s\n", root, (long long)step,
                ck ? llmt_ckpt_last_error(ck) : "create");
    CHECK_STATUS(s, LLMT_OK);
    if (at)
        *at = s == LLMT_OK ? got : -1;
    if (keep)
        *keep = ck;
    else
        llmt_ckpt_destroy(ck);
    return s == LLMT_OK;
}

/* How two models' parameters (the "param/" tensors of two safetensors
 * files of the same layout) differ. */
typedef struct jc_pdiff {
    int tensors;
    int64_t numel, over; /* elements, and those more than JC_APART apart */
    double rel_l2;       /* of the whole model */
    double worst;        /* largest absolute difference (a NaN shows) */
} jc_pdiff;

/* The parameters of safetensors files fa and fb (fp32) compared, into *r.
 * Returns 0 when they could not be: a file unreadable, a tensor of fa
 * missing from fb or of another size or dtype. */
static inline int jc_params_dist(const char *fa, const char *fb, jc_pdiff *r)
{
    long la, lb;
    char *a = test_slurp(fa, &la), *b = test_slurp(fb, &lb);
    memset(r, 0, sizeof *r);
    int ok = 0;
    uint64_t ha = 0, hb = 0;
    if (a && b && la > 8 && lb > 8) {
        memcpy(&ha, a, 8);
        memcpy(&hb, b, 8);
    }
    cJSON *ja = ha && ha + 8 <= (uint64_t)la ? cJSON_ParseWithLength(a + 8, ha) : NULL;
    cJSON *jb = hb && hb + 8 <= (uint64_t)lb ? cJSON_ParseWithLength(b + 8, hb) : NULL;
    double num = 0, den = 0;
    if (ja && jb) {
        ok = 1;
        for (cJSON *t = ja->child; t && ok; t = t->next) {
            if (strncmp(t->string, "param/", 6))
                continue;
            cJSON *u = cJSON_GetObjectItemCaseSensitive(jb, t->string);
            cJSON *oa = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
            cJSON *ob = u ? cJSON_GetObjectItemCaseSensitive(u, "data_offsets") : NULL;
            cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
            ok = oa && ob && cJSON_GetArraySize(oa) == 2 && cJSON_GetArraySize(ob) == 2 &&
                 cJSON_IsString(dt) && !strcmp(dt->valuestring, "F32");
            if (!ok)
                break;
            long a0 = (long)cJSON_GetArrayItem(oa, 0)->valuedouble,
                 a1 = (long)cJSON_GetArrayItem(oa, 1)->valuedouble,
                 b0 = (long)cJSON_GetArrayItem(ob, 0)->valuedouble,
                 b1 = (long)cJSON_GetArrayItem(ob, 1)->valuedouble;
            ok = a1 - a0 == b1 - b0 && 8 + (long)ha + a1 <= la && 8 + (long)hb + b1 <= lb;
            if (!ok)
                break;
            size_t e = (size_t)(a1 - a0) / 4;
            const char *pa = a + 8 + ha + a0, *pb = b + 8 + hb + b0;
            for (size_t i = 0; i < e; i++) {
                float x, y;
                memcpy(&x, pa + 4 * i, 4);
                memcpy(&y, pb + 4 * i, 4);
                double d = fabs((double)x - y);
                num += d * d;
                den += (double)y * y;
                r->over += !(d <= JC_APART);
                r->worst = d > r->worst || isnan(d) ? d : r->worst;
            }
            r->numel += (int64_t)e;
            r->tensors++;
        }
    }
    r->rel_l2 = sqrt(num / (den > 0 ? den : 1));
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    free(a);
    free(b);
    return ok;
}

#endif
