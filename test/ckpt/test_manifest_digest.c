/* The manifests' own digest (doc/checkpoint-format.md, "digest"). Every
 * field of a manifest is validated on load, but an edit that leaves a
 * valid manifest once loaded without a word: a tensor's dtype swapped
 * for one of the same size (fp32 and int32, bf16 and fp16) returned the
 * saved bytes as another type; a replica's offsets moved onto another
 * box returned rows 0-1 as rows 2-3. Now such a manifest.json is refused
 * naming it ("changed after it was written"), a part manifest so edited
 * is never committed, a deliberate editor that reseals the digest still
 * meets every field check, and a manifest of before digests (no field)
 * opens as it did. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "ckpt_util.h"
#include "llmtrain.h"
#include "manifest_seal.h"

static float F[4][3], W[4][3];
static uint16_t H[6];

static void add(llmt_ckpt *ck, const char *name, llmt_dtype dt, void *data, int nd,
                const int64_t *shape, const int64_t *gshape, const int64_t *goff)
{
    llmt_tensor v;
    CHECK_STATUS(llmt_tensor_init(&v, sizeof v, dt, nd, shape, data, LLMT_DEVICE_CPU, 0),
                 LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, name, &v, gshape, goff), LLMT_OK);
}

/* Rank r's part of step `step` in root: "f" fp32 [4,3] split by rows,
 * "h" bf16 [6] on rank 0, "w" fp32 [4,3] whose rows 0-1 both ranks hold
 * (a replica) and rows 2-3 rank 1. The plan holds a "digest" of its own. */
static void save_rank(const char *root, int r, int64_t step)
{
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(rank_ckpt(r, 2, root, 0, &ck), LLMT_OK);
    if (!ck)
        return;
    CHECK_STATUS(llmt_ckpt_begin(ck, step), LLMT_OK);
    int64_t g[2] = {4, 3}, half[2] = {2, 3}, top[2] = {0, 0}, low[2] = {2, 0}, six = 6;
    add(ck, "f", LLMT_DTYPE_FP32, F[2 * r], 2, half, g, r ? low : top);
    add(ck, "w", LLMT_DTYPE_FP32, W[0], 2, half, g, top);
    if (r == 1)
        add(ck, "w", LLMT_DTYPE_FP32, W[2], 2, half, g, low);
    if (r == 0) {
        add(ck, "h", LLMT_DTYPE_BF16, H, 1, &six, NULL, NULL);
        CHECK_STATUS(llmt_ckpt_set_plan_json(ck, "{\"digest\":\"0123456789abcdef\",\"dp\":2}"),
                     LLMT_OK);
    }
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
    llmt_ckpt_destroy(ck);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b)
        b[n] = 0;
    *len = (size_t)n;
    return b;
}

static void put(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(text, 1, n, f) == n);
    if (f)
        fclose(f);
}

/* text with the first `from` at or after `after` (NULL: the start)
 * replaced by `to` (malloc'ed; NULL when absent). */
static char *replaced(const char *text, const char *after, const char *from, const char *to)
{
    const char *s = after ? strstr(text, after) : text;
    const char *at = s ? strstr(s, from) : NULL;
    if (!at)
        return NULL;
    size_t n = strlen(text) - strlen(from) + strlen(to);
    char *o = malloc(n + 1);
    memcpy(o, text, (size_t)(at - text));
    strcpy(o + (at - text), to);
    strcat(o, at + strlen(from));
    return o;
}

/* Open step `step` of root: its status; the message into msg. */
static llmt_status open_step(const char *root, int64_t step, char *msg, size_t cap)
{
    llmt_ckpt *ck = NULL;
    llmt_status s = llmt_ckpt_create(NULL, root, NULL, &ck);
    if (s == LLMT_OK)
        s = llmt_ckpt_open_step(ck, step);
    snprintf(msg, cap, "%s", ck ? llmt_ckpt_last_error(ck) : "");
    llmt_ckpt_destroy(ck);
    return s;
}

/* Rows [r0, r0 + 2) of "w" (or "f") read from step of root equal to the
 * saved ones: 1, 0 when other bytes came back, -1 when refused. */
static int rows_ok(const char *root, int64_t step, const char *name, int64_t r0)
{
    llmt_ckpt *ck = NULL;
    float got[2][3];
    int64_t shp[2] = {2, 3}, off[2] = {r0, 0};
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, shp, got, LLMT_DEVICE_CPU, 0);
    llmt_status s = llmt_ckpt_create(NULL, root, NULL, &ck);
    if (s == LLMT_OK)
        s = llmt_ckpt_open_step(ck, step);
    if (s == LLMT_OK)
        s = llmt_ckpt_read(ck, name, &v, off);
    llmt_ckpt_destroy(ck);
    if (s != LLMT_OK)
        return -1;
    return !memcmp(got, name[0] == 'w' ? W[r0] : F[r0], sizeof got);
}

/* `edited` as step 3's manifest.json: refused at open, naming the file
 * and saying why (`why`; NULL: that it was changed). */
static void refused(const char *root, const char *mf, const char *what, const char *edited,
                    const char *why)
{
    char msg[1200];
    CHECK(edited != NULL);
    if (!edited)
        return;
    put(mf, edited, strlen(edited));
    llmt_status s = open_step(root, 3, msg, sizeof msg);
    int named = strstr(msg, "/manifest.json") &&
                strstr(msg, why ? why : "changed after it was written");
    CHECK(s == LLMT_ERR_CHECKSUM || s == LLMT_ERR_FORMAT);
    CHECK(named);
    if (s == LLMT_OK || !named)
        fprintf(stderr, "%s: open %s: \"%s\"\n", what, llmt_status_string(s), msg);
}

int main(void)
{
    for (int i = 0; i < 12; i++) {
        F[i / 3][i % 3] = gval(1, i);
        W[i / 3][i % 3] = gval(2, i);
    }
    for (int i = 0; i < 6; i++)
        H[i] = (uint16_t)(0x3f80 + i);
    char *root = tmpdir_make(NULL, "digest");
    CHECK(root != NULL);
    if (!root)
        return 1;
    save_rank(root, 0, 3);
    save_rank(root, 1, 3);
    char mf[4200], msg[1200];
    size_t n = 0;
    snprintf(mf, sizeof mf, "%s/step-000000000003/manifest.json", root);
    char *text = slurp(mf, &n);
    CHECK(text != NULL);
    if (!text)
        return check_exit("test_manifest_digest");

    /* the writers end each manifest with its digest, which an independent
     * computation reproduces (the step's and both parts) */
    for (int f = 0; f < 3; f++) {
        char p[4200];
        size_t len = 0;
        if (f == 0)
            snprintf(p, sizeof p, "%s", mf);
        else
            snprintf(p, sizeof p, "%s/step-000000000003/rank-%05d.json", root, f - 1);
        char *t = slurp(p, &len), *c = t ? strdup(t) : NULL;
        long at = t ? manifest_digest_at(t, len) : -1;
        CHECK(at > 0 && at + 18 == (long)len && !strcmp(t + len - 2, "\"}"));
        CHECK(c && manifest_reseal(c, len) && !strcmp(c, t));
        free(t);
        free(c);
    }
    CHECK_STATUS(open_step(root, 3, msg, sizeof msg), LLMT_OK);
    CHECK_EQ_INT(rows_ok(root, 3, "f", 2), 1);
    CHECK_EQ_INT(rows_ok(root, 3, "w", 2), 1);

    /* 1. dtypes swapped for ones of the same size: refused, not reinterpreted */
    char *e = replaced(text, "\"name\":\"f\"", "\"dtype\":\"fp32\"", "\"dtype\":\"int32\"");
    refused(root, mf, "f fp32 -> int32", e, NULL);
    free(e);
    e = replaced(text, "\"name\":\"h\"", "\"dtype\":\"bf16\"", "\"dtype\":\"fp16\"");
    refused(root, mf, "h bf16 -> fp16", e, NULL);
    free(e);
    e = replaced(text, "\"name\":\"h\"", "\"dtype\":\"bf16\"", "\"dtype\":\"uint16\"");
    refused(root, mf, "h bf16 -> uint16", e, NULL);
    free(e);

    /* 2. one digit of a global offset: rank 0's replica of rows 0-1 of
     * "w" moved to rows 2-3. Valid to every field check (resealed, it
     * opens, and a read of rows 2-3 takes that chunk: rows 0-1's bytes);
     * with the digest as written, refused. */
    e = replaced(text, "\"name\":\"w\"", "\"global_offsets\":[0,0]",
                 "\"global_offsets\":[2,0]");
    CHECK(e != NULL);
    if (e) {
        char *sealed = strdup(e);
        CHECK(manifest_reseal(sealed, strlen(sealed)));
        put(mf, sealed, strlen(sealed));
        CHECK_EQ_INT(rows_ok(root, 3, "w", 2), 0); /* what a consistent edit does */
        free(sealed);
    }
    refused(root, mf, "w chunk 0 global_offsets [0,0] -> [2,0]", e, NULL);
    free(e);

    /* 3. the digest itself: another value, moved before the other fields,
     * text after the object */
    e = strdup(text);
    e[manifest_digest_at(e, n)] ^= 1;
    refused(root, mf, "a digit of the digest", e, NULL);
    free(e);
    e = malloc(n + 32);
    memcpy(e, "{\"digest\":\"", 11);
    memcpy(e + 11, text + manifest_digest_at(text, n), 16);
    strcpy(e + 27, "\",");
    memcpy(e + 29, text + 1, n - 30);
    strcpy(e + n - 1, "}");
    refused(root, mf, "the digest first", e, NULL);
    free(e);
    e = malloc(n + 8);
    snprintf(e, n + 8, "%s{}", text);
    refused(root, mf, "text after the object", e, "text after the JSON object");
    free(e);
    e = malloc(n + 8); /* the digest covers every byte: a newline too */
    snprintf(e, n + 8, "%s\n", text);
    refused(root, mf, "a newline after the object", e, "changed after it was written");
    free(e);

    /* 4. a deliberate editor (the digest resealed) still meets every field
     * check: a dtype whose size does not match the chunk's length */
    e = replaced(text, "\"name\":\"f\"", "\"dtype\":\"fp32\"", "\"dtype\":\"uint8\"");
    CHECK(e && manifest_reseal(e, strlen(e)));
    if (e) {
        put(mf, e, strlen(e));
        CHECK_STATUS(open_step(root, 3, msg, sizeof msg), LLMT_ERR_FORMAT);
        CHECK(strstr(msg, "tensor 'f'") && strstr(msg, "length"));
    }
    free(e);

    /* 5. a manifest of before digests (no field) opens and reads as before */
    e = strdup(text);
    size_t m = manifest_unseal(e, n);
    CHECK(m > 0 && m + 28 == n && e[m - 1] == '}');
    put(mf, e, m);
    CHECK_STATUS(open_step(root, 3, msg, sizeof msg), LLMT_OK);
    CHECK_EQ_INT(rows_ok(root, 3, "f", 0), 1);
    CHECK_EQ_INT(rows_ok(root, 3, "w", 2), 1);
    /* ... also ended with white space (an editor's newline) */
    char *ws = malloc(m + 4);
    memcpy(ws, e, m);
    memcpy(ws + m, " \r\n", 3);
    put(mf, ws, m + 3);
    CHECK_STATUS(open_step(root, 3, msg, sizeof msg), LLMT_OK);
    free(ws);
    free(e);
    put(mf, text, n);
    CHECK_STATUS(open_step(root, 3, msg, sizeof msg), LLMT_OK);

    /* 6. a part manifest edited before the commit: the last rank's commit
     * refuses it naming the part, and the step is not committed */
    save_rank(root, 0, 4);
    char part[4200];
    snprintf(part, sizeof part, "%s/step-000000000004/rank-00000.json", root);
    size_t pl = 0;
    char *pt = slurp(part, &pl);
    e = pt ? replaced(pt, "\"name\":\"f\"", "\"dtype\":\"fp32\"", "\"dtype\":\"int32\"") : NULL;
    CHECK(e != NULL);
    if (e) {
        put(part, e, strlen(e));
        llmt_ckpt *ck = NULL;
        CHECK_STATUS(rank_ckpt(1, 2, root, 0, &ck), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_begin(ck, 4), LLMT_OK);
        int64_t g[2] = {4, 3}, half[2] = {2, 3}, top[2] = {0, 0}, low[2] = {2, 0};
        add(ck, "f", LLMT_DTYPE_FP32, F[2], 2, half, g, low);
        add(ck, "w", LLMT_DTYPE_FP32, W[0], 2, half, g, top);
        add(ck, "w", LLMT_DTYPE_FP32, W[2], 2, half, g, low);
        llmt_status s = llmt_ckpt_save(ck, 0);
        const char *em = llmt_ckpt_last_error(ck);
        CHECK(s != LLMT_OK);
        CHECK(strstr(em, "rank-00000.json") && strstr(em, "changed after it was written"));
        if (s == LLMT_OK || !strstr(em, "rank-00000.json"))
            fprintf(stderr, "edited part: save %s: \"%s\"\n", llmt_status_string(s), em);
        llmt_ckpt_destroy(ck);
        struct stat st;
        snprintf(part, sizeof part, "%s/step-000000000004/manifest.json", root);
        CHECK(stat(part, &st) != 0);
    }
    free(e);
    free(pt);
    free(text);
    tmpdir_remove(root);
    free(root);
    return check_exit("test_manifest_digest");
}
