/* The loader's state as checkpoint key/values (llmt_loader_ckpt_add/_read):
 * seven decimal integers every host would otherwise format and parse by
 * itself. Built on the public loader and checkpoint calls. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "data/data_internal.h"

enum { K_SEED, K_EPOCH, K_CURSOR, K_SPE, K_FP, K_N };
static const char *const key[K_N] = {"data.seed", "data.epoch", "data.cursor",
                                     "data.samples_per_epoch", "data.fingerprint"};
/* The window length and sample order (llmt_loader_state's seq_len and
 * order): written since 2026-11-27, absent from older checkpoints, which
 * load as before without these two checks. */
enum { L_SEQ, L_ORDER, L_N };
static const char *const lkey[L_N] = {"data.seq_len", "data.order"};

LLMT_API llmt_status llmt_loader_ckpt_add(const llmt_loader *l, llmt_ckpt *ck)
{
    if (!l)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = llmt__data_loader_err(l);
    LLMT__NONNULL(e, "loader: ckpt_add", ck);
    llmt_loader_state st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    llmt_status s = llmt_loader_get_state(l, &st);
    if (s != LLMT_OK)
        return s; /* message already on the loader (e.g. mid-step) */
    char v[K_N][32];
    snprintf(v[K_SEED], sizeof v[K_SEED], "%" PRIu64, st.seed);
    snprintf(v[K_EPOCH], sizeof v[K_EPOCH], "%" PRId64, st.epoch);
    snprintf(v[K_CURSOR], sizeof v[K_CURSOR], "%" PRId64, st.cursor);
    snprintf(v[K_SPE], sizeof v[K_SPE], "%" PRId64, st.samples_per_epoch);
    snprintf(v[K_FP], sizeof v[K_FP], "%" PRIu64, st.fingerprint);
    for (int i = 0; i < K_N; i++) {
        s = llmt_ckpt_set_kv(ck, key[i], v[i]);
        if (s != LLMT_OK)
            return llmt__err_set(e, s, "loader: checkpoint key %s: %s", key[i],
                                 llmt_ckpt_last_error(ck));
    }
    char lv[L_N][16];
    snprintf(lv[L_SEQ], sizeof lv[L_SEQ], "%d", (int)st.seq_len);
    snprintf(lv[L_ORDER], sizeof lv[L_ORDER], "%d", (int)st.order);
    for (int i = 0; i < L_N; i++) {
        s = llmt_ckpt_set_kv(ck, lkey[i], lv[i]);
        if (s != LLMT_OK)
            return llmt__err_set(e, s, "loader: checkpoint key %s: %s", lkey[i],
                                 llmt_ckpt_last_error(ck));
    }
    return LLMT_OK;
}

/* A whole decimal number of the right sign, written as ckpt_add writes it
 * (digits, a '-' only when signed), or -1. strtoull alone would take " -1"
 * as 2^64 - 1 and skip leading blanks or a '+': a changed value must not
 * pass as another number. */
static int parse(const char *txt, int is_unsigned, uint64_t *u, int64_t *i)
{
    const char *d = !is_unsigned && *txt == '-' ? txt + 1 : txt;
    if (*d < '0' || *d > '9')
        return -1;
    char *end = NULL;
    errno = 0;
    if (is_unsigned)
        *u = strtoull(txt, &end, 10);
    else
        *i = strtoll(txt, &end, 10);
    return errno || *end ? -1 : 0;
}

LLMT_API llmt_status llmt_loader_ckpt_read(llmt_loader *l, llmt_ckpt *ck)
{
    if (!l)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = llmt__data_loader_err(l);
    LLMT__NONNULL(e, "loader: ckpt_read", ck);
    uint64_t u[K_N] = {0};
    int64_t i64[K_N] = {0};
    for (int k = 0; k < K_N; k++) {
        char v[64];
        size_t need = 0;
        llmt_status s = llmt_ckpt_get_kv(ck, key[k], v, sizeof v, &need);
        if (s == LLMT_ERR_BUFFER_TOO_SMALL)
            return llmt__err_set(e, LLMT_ERR_FORMAT,
                                 "loader: checkpoint key %s holds %zu "
                                 "bytes, longer than any integer (at most %zu)",
                                 key[k], need, sizeof v - 1);
        if (s != LLMT_OK)
            return llmt__err_set(e, s, "loader: the checkpoint has no %s (the "
                                 "loader's state): %s", key[k],
                                 llmt_ckpt_last_error(ck));
        int is_u = k == K_SEED || k == K_FP;
        if (parse(v, is_u, &u[k], &i64[k]) != 0)
            return llmt__err_set(e, LLMT_ERR_FORMAT, "loader: checkpoint key "
                                 "%s = '%s' is not a%s integer", key[k], v,
                                 is_u ? "n unsigned" : "");
    }
    llmt_loader_state st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    st.seed = u[K_SEED];
    st.epoch = i64[K_EPOCH];
    st.cursor = i64[K_CURSOR];
    st.samples_per_epoch = i64[K_SPE];
    st.fingerprint = u[K_FP];
    int32_t *lval[L_N] = {&st.seq_len, &st.order};
    for (int k = 0; k < L_N; k++) {
        char v[64];
        size_t need = 0;
        llmt_status s = llmt_ckpt_get_kv(ck, lkey[k], v, sizeof v, &need);
        if (s == LLMT_ERR_NOT_FOUND)
            continue; /* an older checkpoint: not recorded, not checked */
        if (s != LLMT_OK)
            return llmt__err_set(e, s == LLMT_ERR_BUFFER_TOO_SMALL ? LLMT_ERR_FORMAT : s,
                                 "loader: checkpoint key %s: %s", lkey[k],
                                 llmt_ckpt_last_error(ck));
        uint64_t u0 = 0;
        int64_t i0 = 0;
        if (parse(v, 0, &u0, &i0) != 0 || i0 < 0 || i0 > INT32_MAX)
            return llmt__err_set(e, LLMT_ERR_FORMAT,
                                 "loader: checkpoint key %s = '%s' is not an integer in "
                                 "[0, 2^31)",
                                 lkey[k], v);
        *lval[k] = (int32_t)i0;
    }
    return llmt_loader_set_state(l, &st);
}
