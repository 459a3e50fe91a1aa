/* The manifest: serialise, parse with full validation (a manifest is input
 * from disk, possibly hostile), and merge per-rank parts. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "ckpt_internal.h"

#define MAX_JSON_INT (INT64_C(1) << 53)

void llmt__ckpt_manifest_free(ck_manifest *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->ntensors; i++) {
        ck_tensor *t = &m->tensors[i];
        for (size_t c = 0; c < t->nchunks; c++)
            free(t->chunks[c].bxxh);
        free(t->chunks);
        free(t->name);
    }
    free(m->tensors);
    for (size_t i = 0; i < m->nkv; i++) {
        free(m->kv[i].key);
        free(m->kv[i].val);
    }
    free(m->kv);
    free(m->files);
    free(m->plan);
    free(m->hidx);
    memset(m, 0, sizeof *m);
}

int llmt__ckpt_name_ok(const char *s)
{
    if (!s)
        return 0;
    size_t n = strlen(s);
    if (n == 0 || n > CK_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f || c == '"' || c == '\\')
            return 0;
    }
    return 1;
}

static size_t name_hash(const char *name)
{
    return (size_t)XXH64(name, strlen(name), 0);
}

/* The index covers every tensor (manifest hidx): grown to twice the
 * tensor count, the new tensors inserted. 0: no memory (scan instead). */
static int index_tensors(ck_manifest *m)
{
    if (m->hcap < 2 * m->ntensors + 2) {
        size_t cap = 16;
        while (cap < 2 * m->ntensors + 2)
            cap *= 2;
        size_t *h = calloc(cap, sizeof *h);
        if (!h)
            return 0;
        free(m->hidx);
        m->hidx = h;
        m->hcap = cap;
        m->hn = 0;
    }
    for (; m->hn < m->ntensors; m->hn++) {
        size_t i = name_hash(m->tensors[m->hn].name) & (m->hcap - 1);
        while (m->hidx[i])
            i = (i + 1) & (m->hcap - 1);
        m->hidx[i] = m->hn + 1;
    }
    return 1;
}

ck_tensor *llmt__ckpt_find_tensor(const ck_manifest *m, const char *name)
{
    ck_manifest *w = (ck_manifest *)m; /* the index is a cache */
    if (!index_tensors(w)) {
        for (size_t i = 0; i < m->ntensors; i++)
            if (!strcmp(m->tensors[i].name, name))
                return &m->tensors[i];
        return NULL;
    }
    for (size_t i = name_hash(name) & (w->hcap - 1); w->hidx[i]; i = (i + 1) & (w->hcap - 1))
        if (!strcmp(m->tensors[w->hidx[i] - 1].name, name))
            return &m->tensors[w->hidx[i] - 1];
    return NULL;
}

static void rank_file_name(char *buf, size_t n, int32_t rank)
{
    snprintf(buf, n, "rank-%05d.bin", (int)rank);
}

/* ---- serialise ---- */

static cJSON *int_array(const int64_t *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

static cJSON *hex(uint64_t v)
{
    char b[17];
    snprintf(b, sizeof b, "%016" PRIx64, v);
    return cJSON_CreateString(b);
}

static int empty_box(const ck_chunk *a, int nd);

/* Whether tensor t is listed when only held blocks are: it has one, or
 * it has no elements (then its name is all there is). */
static int held(const ck_tensor *t)
{
    int64_t elems = 1;
    for (int d = 0; d < t->ndim; d++)
        elems *= t->gshape[d];
    for (size_t c = 0; c < t->nchunks && elems; c++)
        if (!empty_box(&t->chunks[c], t->ndim))
            return 1;
    return elems == 0;
}

/* ---- the manifest's own digest ----
 * Every field of a manifest is validated on load and every chunk's bytes
 * have a hash, but an edit or a corruption of the text into another valid
 * manifest (a dtype swapped for one of the same size, fp32 and int32; a
 * block's offsets moved onto a replica's box) loaded, and reads returned
 * the saved bytes as something else. So the writer ends the object with
 * "digest": the XXH64 (seed 0) of the file's exact bytes with its own 16
 * digits read as '0's, which a reader recomputes. A manifest written
 * before it has no digest and loads as before. */
static const char digest_key[] = "\"digest\":\"";
static const char digest_zero[] = "0000000000000000";

/* Where the 16 digits of text's digest start, or -1: after the LAST
 * `"digest":"` (the host's plan object, earlier, may hold a "digest" of
 * its own), followed by 16 digits, `"}` and only whitespace to the end:
 * a top-level member, the object's last, as the writer puts it. */
static long digest_at(const char *text, size_t len)
{
    const size_t kl = sizeof digest_key - 1;
    size_t end = len;
    while (end > 0 && (text[end - 1] == ' ' || text[end - 1] == '\n' || text[end - 1] == '\r' ||
                       text[end - 1] == '\t'))
        end--;
    if (end < kl + 18 || memcmp(text + end - 2, "\"}", 2))
        return -1;
    size_t at = end - 18;
    if (memcmp(text + at - kl, digest_key, kl))
        return -1;
    return (long)at;
}

/* XXH64 of text with the 16 bytes at `at` read as '0's; 0 with *out
 * unset when out of memory. */
static int digest_of(const char *text, size_t len, size_t at, uint64_t *out)
{
    XXH64_state_t *h = XXH64_createState();
    if (!h)
        return 0;
    XXH64_reset(h, 0);
    XXH64_update(h, text, at);
    XXH64_update(h, digest_zero, 16);
    XXH64_update(h, text + at + 16, len - at - 16);
    *out = XXH64_digest(h);
    XXH64_freeState(h);
    return 1;
}

/* s (malloc'ed, ending in a zero digest) with its digest filled in. */
static char *seal(char *s)
{
    size_t n = strlen(s);
    long at = digest_at(s, n);
    char b[17];
    if (at < 0) { /* the writer's own text: cannot happen */
        free(s);
        return NULL;
    }
    snprintf(b, sizeof b, "%016" PRIx64, (uint64_t)XXH64(s, n, 0));
    memcpy(s + at, b, 16);
    return s;
}

static char *to_json(const ck_manifest *m, int held_only);

char *llmt__ckpt_manifest_to_json(const ck_manifest *m)
{
    return to_json(m, 0);
}

char *llmt__ckpt_manifest_to_json_held(const ck_manifest *m)
{
    return to_json(m, 1);
}

static char *to_json(const ck_manifest *m, int held_only)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON_AddStringToObject(root, "format", m->is_part
                                                ? "llmtrain-checkpoint-part"
                                                : "llmtrain-checkpoint");
    cJSON_AddNumberToObject(root, "version", CK_FORMAT_VERSION);
    cJSON_AddNumberToObject(root, "step", (double)m->step);
    cJSON_AddNumberToObject(root, "world_size", m->world_size);
    if (m->is_part)
        cJSON_AddNumberToObject(root, "rank", m->rank);
    if (m->attempt) /* absent: none given, as every manifest before it */
        cJSON_AddItemToObject(root, "attempt", hex(m->attempt));
    cJSON *plan = m->plan ? cJSON_Parse(m->plan) : NULL;
    cJSON_AddItemToObject(root, "plan", plan ? plan : cJSON_CreateNull());
    cJSON *kv = cJSON_AddArrayToObject(root, "kv");
    for (size_t i = 0; i < m->nkv; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "key", m->kv[i].key);
        cJSON_AddStringToObject(o, "value", m->kv[i].val);
        cJSON_AddNumberToObject(o, "rank", m->kv[i].rank);
        cJSON_AddItemToArray(kv, o);
    }
    cJSON *files = cJSON_AddArrayToObject(root, "files");
    char fname[32];
    for (size_t i = 0; i < m->nfiles; i++) {
        cJSON *o = cJSON_CreateObject();
        rank_file_name(fname, sizeof fname, m->files[i].rank);
        cJSON_AddNumberToObject(o, "rank", m->files[i].rank);
        cJSON_AddStringToObject(o, "name", fname);
        cJSON_AddNumberToObject(o, "bytes", (double)m->files[i].bytes);
        cJSON_AddItemToArray(files, o);
    }
    cJSON *tensors = cJSON_AddArrayToObject(root, "tensors");
    for (size_t i = 0; i < m->ntensors; i++) {
        const ck_tensor *t = &m->tensors[i];
        if (held_only && !held(t))
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "dtype", llmt_dtype_name(t->dtype));
        cJSON_AddItemToObject(o, "global_shape", int_array(t->gshape, t->ndim));
        cJSON *chunks = cJSON_AddArrayToObject(o, "chunks");
        for (size_t c = 0; c < t->nchunks; c++) {
            const ck_chunk *k = &t->chunks[c];
            if (held_only && empty_box(k, t->ndim))
                continue;
            cJSON *co = cJSON_CreateObject();
            rank_file_name(fname, sizeof fname, k->rank);
            cJSON_AddStringToObject(co, "file", fname);
            cJSON_AddNumberToObject(co, "offset", (double)k->offset);
            cJSON_AddNumberToObject(co, "length", (double)k->length);
            cJSON_AddItemToObject(co, "global_offsets", int_array(k->goff, t->ndim));
            cJSON_AddItemToObject(co, "local_shape", int_array(k->lshape, t->ndim));
            cJSON_AddItemToObject(co, "xxh64", hex(k->xxh));
            cJSON_AddNumberToObject(co, "block_bytes", (double)k->block);
            cJSON *bl = cJSON_AddArrayToObject(co, "block_xxh64");
            for (uint64_t b = 0; b < k->nblocks; b++)
                cJSON_AddItemToArray(bl, hex(k->bxxh[b]));
            cJSON_AddItemToArray(chunks, co);
        }
        cJSON_AddItemToArray(tensors, o);
    }
    cJSON_AddStringToObject(root, "digest", "0000000000000000"); /* last: seal() */
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s ? seal(s) : NULL;
}

/* ---- parse ---- */

typedef struct pctx {
    char *err;
    size_t errlen;
    llmt_status st;
} pctx;

static int fail(pctx *p, llmt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(pctx *p, llmt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, p->errlen, fmt, ap);
    va_end(ap);
    p->st = st;
    return 0;
}

static int get_int(pctx *p, const cJSON *o, const char *key, int64_t lo,
                   int64_t hi, int64_t *out, const char *where)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        return fail(p, LLMT_ERR_FORMAT, "manifest: %s.%s: missing or not a number",
                    where, key);
    double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != (double)(int64_t)d)
        return fail(p, LLMT_ERR_FORMAT,
                    "manifest: %s.%s: %.17g is not an integer in [%" PRId64
                    ", %" PRId64 "]", where, key, d, lo, hi);
    *out = (int64_t)d;
    return 1;
}

static int get_dims(pctx *p, const cJSON *o, const char *key, int expect,
                    int64_t *out, int *n, const char *where)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(a))
        return fail(p, LLMT_ERR_FORMAT, "manifest: %s.%s: not an array", where, key);
    int cnt = cJSON_GetArraySize(a);
    if (cnt > LLMT_MAX_DIMS || (expect >= 0 && cnt != expect))
        return fail(p, LLMT_ERR_FORMAT, "manifest: %s.%s: %d dimensions", where,
                    key, cnt);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(d >= 0 && d <= (double)CK_MAX_BYTES) || d != (double)(int64_t)d)
            return fail(p, LLMT_ERR_FORMAT,
                        "manifest: %s.%s[%d]: not an integer in [0, 2^52]",
                        where, key, i);
        out[i++] = (int64_t)d;
    }
    *n = cnt;
    return 1;
}

static int get_hex(pctx *p, const cJSON *v, uint64_t *out, const char *where)
{
    if (!cJSON_IsString(v) || strlen(v->valuestring) != 16)
        return fail(p, LLMT_ERR_FORMAT, "manifest: %s: not a 16-digit hex hash", where);
    uint64_t x = 0;
    for (int i = 0; i < 16; i++) {
        char c = v->valuestring[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return fail(p, LLMT_ERR_FORMAT, "manifest: %s: not a 16-digit hex hash", where);
        x = x << 4 | (uint64_t)d;
    }
    *out = x;
    return 1;
}

/* numel * size with overflow/limit checks. */
static int bytes_of(const int64_t *shape, int n, size_t esz, uint64_t *out)
{
    uint64_t b = esz;
    for (int i = 0; i < n; i++) {
        if (shape[i] && b > CK_MAX_BYTES / (uint64_t)shape[i])
            return 0;
        b *= (uint64_t)shape[i];
    }
    if (b > CK_MAX_BYTES)
        return 0;
    *out = b;
    return 1;
}

static int parse_rank_file(pctx *p, const cJSON *v, int32_t world, int32_t *rank,
                           const char *where)
{
    if (!cJSON_IsString(v))
        return fail(p, LLMT_ERR_FORMAT, "manifest: %s: file is not a string", where);
    int r = -1, used = 0;
    const char *s = v->valuestring;
    if (strlen(s) != 14 || sscanf(s, "rank-%5d.bin%n", &r, &used) != 1 ||
        used != 14 || r < 0 || r >= world) {
        return fail(p, LLMT_ERR_FORMAT,
                    "manifest: %s: file name '%.64s' is not rank-NNNNN.bin of a "
                    "rank below world_size %d (refusing paths)", where, s, (int)world);
    }
    char want[32];
    rank_file_name(want, sizeof want, r);
    if (strcmp(want, s))
        return fail(p, LLMT_ERR_FORMAT, "manifest: %s: file name '%.64s' is not canonical",
                    where, s);
    *rank = r;
    return 1;
}

static int box_overlap(const ck_chunk *a, const ck_chunk *b, int nd)
{
    for (int d = 0; d < nd; d++) {
        if (a->goff[d] + a->lshape[d] <= b->goff[d] ||
            b->goff[d] + b->lshape[d] <= a->goff[d])
            return 0;
    }
    return 1;
}

static int same_box(const ck_chunk *a, const ck_chunk *b, int nd)
{
    for (int d = 0; d < nd; d++)
        if (a->goff[d] != b->goff[d] || a->lshape[d] != b->lshape[d])
            return 0;
    return 1;
}

static int empty_box(const ck_chunk *a, int nd)
{
    for (int d = 0; d < nd; d++)
        if (a->lshape[d] == 0)
            return 1;
    return 0;
}

/* Chunks of one tensor may not overlap unless they are identical replicas.
 * The replicas are grouped first (sorted by box), so that a block every
 * rank of a large group holds is one box to the sweep, and the copies
 * of a group are compared with its first for the same bytes. Then a
 * sweep over the distinct boxes along the dimension whose starts take
 * the most values (rows for a row split, columns for a column split):
 * sorted by their start there, each box compared with those that start
 * before it ends (a few), not with every other one (thousands of data
 * parallel shares at scale). A hostile list that still needs more than
 * 2^26 comparisons is refused: it once stopped being checked there and
 * was accepted, and a read of it could double count an overlap and miss
 * a hole (OK with elements never written). */
typedef struct sweep_key {
    int64_t lo;
    size_t i;
} sweep_key;

static int cmp_sweep(const void *a, const void *b)
{
    const sweep_key *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* qsort of chunk indexes by box, then index: thread-local context */
static _Thread_local const ck_tensor *box_sort_t;
static int cmp_chunk_box(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    const ck_tensor *t = box_sort_t;
    for (int d = 0; d < t->ndim; d++) {
        const ck_chunk *x = &t->chunks[i], *y = &t->chunks[j];
        if (x->goff[d] != y->goff[d])
            return x->goff[d] < y->goff[d] ? -1 : 1;
        if (x->lshape[d] != y->lshape[d])
            return x->lshape[d] < y->lshape[d] ? -1 : 1;
    }
    return i < j ? -1 : i > j;
}

/* The non-empty chunks' indexes, one per distinct box (the lowest index
 * of its replicas) into idx; *n of them. Replicas of different bytes fail
 * when same_bytes: the ranks' copies diverged (a bug, or silent data
 * corruption), and a resume would take either. */
static int distinct_boxes(pctx *p, const ck_tensor *t, int same_bytes, size_t *idx, size_t *n)
{
    size_t m = 0;
    for (size_t i = 0; i < t->nchunks; i++)
        if (!empty_box(&t->chunks[i], t->ndim))
            idx[m++] = i;
    box_sort_t = t;
    qsort(idx, m, sizeof *idx, cmp_chunk_box);
    size_t out = 0, first = 0;
    for (size_t x = 0; x < m; x++) {
        const ck_chunk *a = &t->chunks[idx[first]], *b = &t->chunks[idx[x]];
        if (x > 0 && same_box(a, b, t->ndim)) {
            if (same_bytes && a->xxh != b->xxh) {
                int32_t ra = a->rank, rb = b->rank;
                return fail(p, LLMT_ERR_CHECKSUM,
                            "checkpoint: tensor '%s': ranks %d and %d saved different bytes "
                            "for the same block (replicas that must be equal diverged between "
                            "them); the step is not committed",
                            t->name, (int)(ra < rb ? ra : rb), (int)(ra < rb ? rb : ra));
            }
            continue;
        }
        first = x;
        idx[out++] = idx[x];
    }
    *n = out;
    return 1;
}

/* The dimension whose distinct boxes' starts take the most values. */
static int sweep_dim(const ck_tensor *t, const size_t *idx, size_t n, sweep_key *k)
{
    int best = 0;
    size_t most = 0;
    for (int d = 0; d < t->ndim; d++) {
        for (size_t x = 0; x < n; x++)
            k[x] = (sweep_key){t->chunks[idx[x]].goff[d], idx[x]};
        qsort(k, n, sizeof *k, cmp_sweep);
        size_t values = 0;
        for (size_t x = 0; x < n; x++)
            values += x == 0 || k[x].lo != k[x - 1].lo;
        if (values > most) {
            most = values;
            best = d;
        }
    }
    return best;
}

static int sweep(pctx *p, const ck_tensor *t, const size_t *idx, size_t n, sweep_key *k)
{
    int d = sweep_dim(t, idx, n, k);
    for (size_t x = 0; x < n; x++)
        k[x] = (sweep_key){t->chunks[idx[x]].goff[d], idx[x]};
    qsort(k, n, sizeof *k, cmp_sweep);
    uint64_t budget = (uint64_t)1 << 26;
    for (size_t x = 0; x < n; x++) {
        const ck_chunk *a = &t->chunks[k[x].i];
        int64_t end = a->goff[d] + a->lshape[d];
        for (size_t y = x + 1; y < n && k[y].lo < end; y++) {
            if (budget-- == 0)
                return fail(p, LLMT_ERR_FORMAT,
                            "manifest: tensor '%s': %zu distinct chunks whose extents overlap "
                            "along every dimension: more than 2^26 pairs to compare, refused "
                            "(overlapping chunks cannot be ruled out)",
                            t->name, n);
            if (box_overlap(a, &t->chunks[k[y].i], t->ndim)) {
                size_t i = k[x].i < k[y].i ? k[x].i : k[y].i;
                size_t j = k[x].i < k[y].i ? k[y].i : k[x].i;
                return fail(p, LLMT_ERR_FORMAT,
                            "manifest: tensor '%s': chunks %zu and %zu overlap", t->name, i, j);
            }
        }
    }
    return 1;
}

static int check_overlaps(pctx *p, const ck_tensor *t, int same_bytes)
{
    if (t->ndim == 0 || t->nchunks < 2)
        return 1; /* scalars: every chunk is the same box */
    size_t *idx = malloc(t->nchunks * sizeof *idx);
    sweep_key *k = malloc(t->nchunks * sizeof *k);
    size_t n = 0;
    int ok = idx && k ? distinct_boxes(p, t, same_bytes, idx, &n) && sweep(p, t, idx, n, k)
                      : fail(p, LLMT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    free(idx);
    free(k);
    return ok;
}

/* Every element of a committed tensor is covered exactly once: the chunks
 * never overlap except as identical replicas (check_overlaps), so the
 * distinct boxes must add up to the global size. A manifest whose chunk
 * list lost an entry would otherwise verify and then fail at resume. */
typedef struct cov_box {
    int64_t k[2 * LLMT_MAX_DIMS]; /* offsets then shape, unused dims 0 */
} cov_box;

static int cmp_box(const void *a, const void *b)
{
    const cov_box *x = a, *y = b;
    for (int i = 0; i < 2 * LLMT_MAX_DIMS; i++)
        if (x->k[i] != y->k[i])
            return x->k[i] < y->k[i] ? -1 : 1;
    return 0;
}

static uint64_t box_elems(const int64_t *shape, int nd)
{
    uint64_t e = 1;
    for (int d = 0; d < nd; d++)
        e *= (uint64_t)shape[d];
    return e;
}

int llmt__ckpt_tensor_coverage(const ck_tensor *t, uint64_t *covered, uint64_t *total)
{
    *total = box_elems(t->gshape, t->ndim);
    *covered = 0;
    if (t->nchunks == 0)
        return *total == 0;
    cov_box *box = calloc(t->nchunks, sizeof *box);
    if (!box)
        return -1;
    for (size_t i = 0; i < t->nchunks; i++)
        for (int d = 0; d < t->ndim; d++) {
            box[i].k[d] = t->chunks[i].goff[d];
            box[i].k[LLMT_MAX_DIMS + d] = t->chunks[i].lshape[d];
        }
    qsort(box, t->nchunks, sizeof *box, cmp_box);
    for (size_t i = 0; i < t->nchunks; i++)
        if (i == 0 || cmp_box(&box[i - 1], &box[i]) != 0)
            *covered += box_elems(box[i].k + LLMT_MAX_DIMS, t->ndim);
    free(box);
    return *covered == *total;
}

static int check_coverage(pctx *p, const ck_tensor *t)
{
    uint64_t got, want;
    int r = llmt__ckpt_tensor_coverage(t, &got, &want);
    if (r < 0)
        return fail(p, LLMT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    if (!r)
        return fail(p, LLMT_ERR_FORMAT,
                    "manifest: tensor '%s': its chunks cover %" PRIu64 " of %" PRIu64
                    " elements (chunks missing)", t->name, got, want);
    return 1;
}

static int grow(void **arr, size_t *cap, size_t need, size_t esz)
{
    if (need <= *cap)
        return 1;
    size_t nc = *cap ? *cap * 2 : 8;
    while (nc < need)
        nc *= 2;
    void *n = realloc(*arr, nc * esz);
    if (!n)
        return 0;
    memset((char *)n + *cap * esz, 0, (nc - *cap) * esz);
    *arr = n;
    *cap = nc;
    return 1;
}

/* The file of `rank`: a merged manifest lists them in rank order (a
 * binary search; thousands of files, one lookup per chunk), anything else
 * is scanned. */
static const ck_file *find_file(const ck_manifest *m, int32_t rank)
{
    size_t lo = 0, hi = m->nfiles;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->files[mid].rank < rank)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < m->nfiles && m->files[lo].rank == rank)
        return &m->files[lo];
    const ck_file *f = NULL;
    for (size_t i = 0; i < m->nfiles; i++)
        if (m->files[i].rank == rank)
            f = &m->files[i];
    return f;
}

static int parse_chunk(pctx *p, const cJSON *co, ck_tensor *t,
                       const ck_manifest *m, ck_chunk *k, const char *where)
{
    if (!cJSON_IsObject(co))
        return fail(p, LLMT_ERR_FORMAT, "manifest: %s: not an object", where);
    if (!parse_rank_file(p, cJSON_GetObjectItemCaseSensitive(co, "file"),
                         m->world_size, &k->rank, where))
        return 0;
    const ck_file *f = find_file(m, k->rank);
    if (!f)
        return fail(p, LLMT_ERR_FORMAT, "manifest: %s: file of rank %d is not listed",
                    where, (int)k->rank);
    int64_t off, len, blk;
    if (!get_int(p, co, "offset", 0, (int64_t)CK_MAX_BYTES, &off, where) ||
        !get_int(p, co, "length", 0, (int64_t)CK_MAX_BYTES, &len, where) ||
        !get_int(p, co, "block_bytes", 4096, INT64_C(1) << 30, &blk, where))
        return 0;
    k->offset = (uint64_t)off;
    k->length = (uint64_t)len;
    k->block = (uint64_t)blk;
    int n1, n2;
    if (!get_dims(p, co, "global_offsets", t->ndim, k->goff, &n1, where) ||
        !get_dims(p, co, "local_shape", t->ndim, k->lshape, &n2, where))
        return 0;
    for (int d = 0; d < t->ndim; d++)
        if (k->goff[d] + k->lshape[d] > t->gshape[d])
            return fail(p, LLMT_ERR_FORMAT,
                        "manifest: %s: block [%" PRId64 ", %" PRId64
                        ") of dim %d exceeds global size %" PRId64,
                        where, k->goff[d], k->goff[d] + k->lshape[d], d, t->gshape[d]);
    uint64_t want;
    if (!bytes_of(k->lshape, t->ndim, llmt_dtype_size(t->dtype), &want) ||
        want != k->length)
        return fail(p, LLMT_ERR_FORMAT,
                    "manifest: %s: length %" PRIu64 " does not match the local shape",
                    where, k->length);
    if (k->offset + k->length > f->bytes || k->offset < CK_HEADER_BYTES)
        return fail(p, LLMT_ERR_FORMAT,
                    "manifest: %s: range [%" PRIu64 ", +%" PRIu64
                    ") lies outside its file (%" PRIu64 " bytes)",
                    where, k->offset, k->length, f->bytes);
    if (!get_hex(p, cJSON_GetObjectItemCaseSensitive(co, "xxh64"), &k->xxh, where))
        return 0;
    const cJSON *bl = cJSON_GetObjectItemCaseSensitive(co, "block_xxh64");
    uint64_t nb = (k->length + k->block - 1) / k->block;
    if (!cJSON_IsArray(bl) || (uint64_t)cJSON_GetArraySize(bl) != nb)
        return fail(p, LLMT_ERR_FORMAT,
                    "manifest: %s: block_xxh64 must hold %" PRIu64 " hashes", where, nb);
    k->nblocks = nb;
    k->bxxh = nb ? calloc(nb, sizeof *k->bxxh) : NULL;
    if (nb && !k->bxxh)
        return fail(p, LLMT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    uint64_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, bl) {
        if (!get_hex(p, v, &k->bxxh[i++], where))
            return 0;
    }
    return 1;
}

static int parse_body(pctx *p, const cJSON *root, int want_part, ck_manifest *m)
{
    if (!cJSON_IsObject(root))
        return fail(p, LLMT_ERR_FORMAT, "manifest: not a JSON object");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const char *want = want_part ? "llmtrain-checkpoint-part" : "llmtrain-checkpoint";
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, want))
        return fail(p, LLMT_ERR_FORMAT, "manifest: format is not \"%s\"", want);
    int64_t v;
    if (!get_int(p, root, "version", 0, INT32_MAX, &v, "$"))
        return 0;
    if (v != CK_FORMAT_VERSION)
        return fail(p, LLMT_ERR_VERSION,
                    "manifest: format version %" PRId64 " (this library reads %d)",
                    v, CK_FORMAT_VERSION);
    m->is_part = want_part;
    if (!get_int(p, root, "step", 0, MAX_JSON_INT, &m->step, "$"))
        return 0;
    if (!get_int(p, root, "world_size", 1, CK_MAX_RANKS, &v, "$"))
        return 0;
    m->world_size = (int32_t)v;
    if (want_part) {
        if (!get_int(p, root, "rank", 0, m->world_size - 1, &v, "$"))
            return 0;
        m->rank = (int32_t)v;
    }
    const cJSON *att = cJSON_GetObjectItemCaseSensitive(root, "attempt");
    if (att && !get_hex(p, att, &m->attempt, "attempt"))
        return 0;
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(root, "plan");
    if (plan && !cJSON_IsNull(plan)) {
        if (!cJSON_IsObject(plan))
            return fail(p, LLMT_ERR_FORMAT, "manifest: plan is not an object");
        m->plan = cJSON_PrintUnformatted(plan);
    }
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "kv");
    if (!cJSON_IsArray(kv))
        return fail(p, LLMT_ERR_FORMAT, "manifest: kv is not an array");
    const cJSON *it;
    cJSON_ArrayForEach(it, kv) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(it, "key");
        const cJSON *val = cJSON_GetObjectItemCaseSensitive(it, "value");
        if (!cJSON_IsString(k) || !cJSON_IsString(val) || !llmt__ckpt_name_ok(k->valuestring))
            return fail(p, LLMT_ERR_FORMAT, "manifest: kv[%zu]: needs string key and value", m->nkv);
        if (!get_int(p, it, "rank", 0, m->world_size - 1, &v, "kv"))
            return 0;
        if (!grow((void **)&m->kv, &m->kvcap, m->nkv + 1, sizeof *m->kv))
            return fail(p, LLMT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
        ck_kv *e = &m->kv[m->nkv++];
        e->key = strdup(k->valuestring);
        e->val = strdup(val->valuestring);
        e->rank = (int32_t)v;
        if (!e->key || !e->val)
            return fail(p, LLMT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    }
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    if (!cJSON_IsArray(files))
        return fail(p, LLMT_ERR_FORMAT, "manifest: files is not an array");
    cJSON_ArrayForEach(it, files) {
        char where[48];
        snprintf(where, sizeof where, "files[%zu]", m->nfiles);
        int32_t r;
        int64_t b;
        if (!parse_rank_file(p, cJSON_GetObjectItemCaseSensitive(it, "name"),
                             m->world_size, &r, where) ||
            !get_int(p, it, "rank", 0, m->world_size - 1, &v, where) ||
            !get_int(p, it, "bytes", 0, (int64_t)CK_MAX_BYTES, &b, where))
            return 0;
        if (v != r)
            return fail(p, LLMT_ERR_FORMAT, "manifest: %s: rank %d but name of rank %d",
                        where, (int)v, (int)r);
        for (size_t i = 0; i < m->nfiles; i++)
            if (m->files[i].rank == r)
                return fail(p, LLMT_ERR_FORMAT, "manifest: %s: rank %d listed twice",
                            where, (int)r);
        if (!grow((void **)&m->files, &m->filecap, m->nfiles + 1, sizeof *m->files))
            return fail(p, LLMT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
        m->files[m->nfiles].rank = r;
        m->files[m->nfiles++].bytes = (uint64_t)b;
    }
    if (want_part ? m->nfiles != 1 || m->files[0].rank != m->rank
                  : m->nfiles != (size_t)m->world_size)
        return fail(p, LLMT_ERR_FORMAT,
                    "manifest: %zu data files listed for world_size %d", m->nfiles,
                    (int)m->world_size);
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    if (!cJSON_IsArray(tensors))
        return fail(p, LLMT_ERR_FORMAT, "manifest: tensors is not an array");
    cJSON_ArrayForEach(it, tensors) {
        char where[CK_NAME_MAX + 64];
        if (!grow((void **)&m->tensors, &m->tcap, m->ntensors + 1, sizeof *m->tensors))
            return fail(p, LLMT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
        ck_tensor *t = &m->tensors[m->ntensors];
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (!cJSON_IsString(name) || !llmt__ckpt_name_ok(name->valuestring))
            return fail(p, LLMT_ERR_FORMAT, "manifest: tensors[%zu]: bad name", m->ntensors);
        if (llmt__ckpt_find_tensor(m, name->valuestring))
            return fail(p, LLMT_ERR_FORMAT, "manifest: tensor '%s' listed twice",
                        name->valuestring);
        t->name = strdup(name->valuestring);
        if (!t->name)
            return fail(p, LLMT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
        m->ntensors++;
        snprintf(where, sizeof where, "tensor '%s'", t->name);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        if (!cJSON_IsString(dt) || llmt_dtype_from_name(dt->valuestring, &t->dtype) != LLMT_OK)
            return fail(p, LLMT_ERR_FORMAT, "manifest: %s: unknown dtype", where);
        int nd;
        if (!get_dims(p, it, "global_shape", -1, t->gshape, &nd, where))
            return 0;
        t->ndim = nd;
        uint64_t total;
        if (!bytes_of(t->gshape, nd, llmt_dtype_size(t->dtype), &total))
            return fail(p, LLMT_ERR_FORMAT, "manifest: %s: global shape too large", where);
        const cJSON *chunks = cJSON_GetObjectItemCaseSensitive(it, "chunks");
        if (!cJSON_IsArray(chunks))
            return fail(p, LLMT_ERR_FORMAT, "manifest: %s: chunks is not an array", where);
        const cJSON *co;
        cJSON_ArrayForEach(co, chunks) {
            if (!grow((void **)&t->chunks, &t->cap, t->nchunks + 1, sizeof *t->chunks))
                return fail(p, LLMT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
            char cw[CK_NAME_MAX + 96];
            snprintf(cw, sizeof cw, "%s chunk %zu", where, t->nchunks);
            ck_chunk *k = &t->chunks[t->nchunks++];
            memset(k, 0, sizeof *k);
            if (!parse_chunk(p, co, t, m, k, cw))
                return 0;
        }
        if (!check_overlaps(p, t, 0) || (!want_part && !check_coverage(p, t)))
            return 0;
    }
    return 1;
}

/* A manifest with a "digest" must carry it as the writer does (the last
 * member, in the writer's form) and it must match the bytes; one without
 * (written before digests) passes. */
static int check_digest(pctx *p, const cJSON *root, const char *text, size_t len)
{
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "digest"), *last = root->child;
    if (!d)
        return 1;
    while (last && last->next)
        last = last->next;
    long at = digest_at(text, len);
    uint64_t want, got;
    if (last != d || at < 0 || !get_hex(p, d, &want, "digest") ||
        memcmp(text + at, d->valuestring, 16))
        return fail(p, LLMT_ERR_FORMAT,
                    "manifest: \"digest\" is not the last field in the form a writer "
                    "puts it: the manifest was changed after it was written");
    if (!digest_of(text, len, (size_t)at, &got))
        return fail(p, LLMT_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    if (got != want)
        return fail(p, LLMT_ERR_CHECKSUM,
                    "manifest: its bytes hash to %016" PRIx64
                    ", its \"digest\" says %016" PRIx64
                    ": the manifest was changed after it was written (edited, or damaged "
                    "on disk)",
                    got, want);
    return 1;
}

llmt_status llmt__ckpt_manifest_parse(const char *text, size_t len,
                                      int want_part, ck_manifest *m,
                                      char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    pctx p = {err, errlen, LLMT_OK};
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        snprintf(err, errlen, "manifest: not valid JSON");
        return LLMT_ERR_FORMAT;
    }
    /* text after the object was once passed over: a digest there, outside
     * the object, went unchecked. White space may follow (a manifest
     * pretty-printed or ended with a newline by an editor: no writer of
     * ours adds any) */
    while (end && (size_t)(end - text) < len &&
           (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
        end++;
    if (end && (size_t)(end - text) < len) {
        cJSON_Delete(root);
        snprintf(err, errlen, "manifest: text after the JSON object (from byte %zu of %zu)",
                 (size_t)(end - text), len);
        return LLMT_ERR_FORMAT;
    }
    /* the digest first: an edited manifest is named as one, not by the
     * field the edit happened to break */
    int ok = (!cJSON_IsObject(root) || check_digest(&p, root, text, len)) &&
             parse_body(&p, root, want_part, m);
    cJSON_Delete(root);
    if (!ok) {
        llmt__ckpt_manifest_free(m);
        return p.st ? p.st : LLMT_ERR_FORMAT;
    }
    return LLMT_OK;
}

static int dup_chunk(ck_chunk *dst, const ck_chunk *src)
{
    *dst = *src;
    dst->bxxh = NULL;
    if (src->nblocks) {
        dst->bxxh = malloc(src->nblocks * sizeof *dst->bxxh);
        if (!dst->bxxh)
            return 0;
        memcpy(dst->bxxh, src->bxxh, src->nblocks * sizeof *dst->bxxh);
    }
    return 1;
}

llmt_status llmt__ckpt_manifest_merge(ck_manifest *const *parts, size_t n,
                                      ck_manifest *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    pctx p = {err, errlen, LLMT_OK};
    if (n == 0) {
        snprintf(err, errlen, "manifest: no parts to merge");
        return LLMT_ERR_INTERNAL;
    }
    out->step = parts[0]->step;
    out->world_size = parts[0]->world_size;
    out->attempt = parts[0]->attempt;
    for (size_t i = 0; i < n; i++) {
        const ck_manifest *q = parts[i];
        if (q->attempt != out->attempt) /* no one attempt to name */
            out->attempt = 0;
        if (q->step != out->step || q->world_size != out->world_size) {
            fail(&p, LLMT_ERR_FORMAT, "manifest: part of rank %d has step %" PRId64
                 " world %d, expected step %" PRId64 " world %d", (int)q->rank,
                 q->step, (int)q->world_size, out->step, (int)out->world_size);
            goto bad;
        }
        if (q->plan && !out->plan && !(out->plan = strdup(q->plan)))
            goto oom;
        if (!grow((void **)&out->files, &out->filecap, out->nfiles + 1, sizeof *out->files))
            goto oom;
        out->files[out->nfiles++] = q->files[0];
        for (size_t k = 0; k < q->nkv; k++) {
            size_t j;
            for (j = 0; j < out->nkv; j++)
                if (!strcmp(out->kv[j].key, q->kv[k].key))
                    break;
            if (j < out->nkv)
                continue; /* parts come in rank order: the lower rank wins */
            if (!grow((void **)&out->kv, &out->kvcap, out->nkv + 1, sizeof *out->kv))
                goto oom;
            ck_kv *e = &out->kv[out->nkv++];
            e->key = strdup(q->kv[k].key);
            e->val = strdup(q->kv[k].val);
            e->rank = q->rank;
            if (!e->key || !e->val)
                goto oom;
        }
        for (size_t t = 0; t < q->ntensors; t++) {
            const ck_tensor *src = &q->tensors[t];
            ck_tensor *dst = llmt__ckpt_find_tensor(out, src->name);
            if (!dst) {
                if (!grow((void **)&out->tensors, &out->tcap, out->ntensors + 1,
                          sizeof *out->tensors))
                    goto oom;
                dst = &out->tensors[out->ntensors++];
                dst->name = strdup(src->name);
                if (!dst->name)
                    goto oom;
                dst->dtype = src->dtype;
                dst->ndim = src->ndim;
                memcpy(dst->gshape, src->gshape, sizeof dst->gshape);
            } else if (dst->dtype != src->dtype || dst->ndim != src->ndim ||
                       memcmp(dst->gshape, src->gshape, sizeof dst->gshape)) {
                fail(&p, LLMT_ERR_FORMAT,
                     "manifest: tensor '%s': rank %d disagrees on dtype or global shape",
                     src->name, (int)q->rank);
                goto bad;
            }
            for (size_t c = 0; c < src->nchunks; c++) {
                /* an empty block only names the tensor (the trainer's
                 * order of tensors): it holds nothing to list, and every
                 * rank of every tensor listed grew the manifest with the
                 * world */
                if (empty_box(&src->chunks[c], src->ndim))
                    continue;
                if (!grow((void **)&dst->chunks, &dst->cap, dst->nchunks + 1,
                          sizeof *dst->chunks))
                    goto oom;
                if (!dup_chunk(&dst->chunks[dst->nchunks], &src->chunks[c]))
                    goto oom;
                dst->nchunks++;
            }
        }
    }
    for (size_t t = 0; t < out->ntensors; t++)
        if (!check_overlaps(&p, &out->tensors[t], 1) || !check_coverage(&p, &out->tensors[t]))
            goto bad;
    return LLMT_OK;
oom:
    fail(&p, LLMT_ERR_OUT_OF_MEMORY, "manifest: out of memory while merging");
bad:
    llmt__ckpt_manifest_free(out);
    return p.st;
}
