/* llmt_data_prepare: the whole pipeline in one call, built only on the
 * public stages (ingest -> filter -> dedup -> tokenizer -> shard writers),
 * so that a host running the stages itself gets the same shards. The
 * output layout and report fields are described in doc/data.md. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "core/internal.h"
#include "data/data_internal.h"

#define PP_PATH 4096

LLMT_API llmt_status llmt_data_prepare_opts_init(llmt_data_prepare_opts *opts, size_t size)
{
    llmt_data_prepare_opts d = {0};
    d.shard_tokens = INT64_C(1) << 26;
    d.val_fraction = 0.01;
    d.seed = 1337;
    return llmt__opts_init(opts, size, offsetof(llmt_data_prepare_opts, no_filter), &d,
                           sizeof d, "data prepare opts");
}

/* ---- one split's shard sequence --------------------------------------- */

/* Our format streams into a writer; llm.c's file is written in one call,
 * so its tokens wait in `buf` until the shard rolls over. */
typedef struct split_out {
    llmt_context *ctx;
    const char *dir;        /* OUT/train or OUT/val */
    int llmc;
    int32_t vocab;
    int64_t shard_tokens;
    llmt_shard_writer *w;
    int32_t *buf;
    size_t n, cap;
    int64_t in_shard;       /* tokens in the open shard */
    int32_t shards;         /* finished shards */
    int64_t tokens, documents;
    char path[PP_PATH];
} split_out;

static void shard_path(const split_out *o, int32_t index, char *p, size_t cap)
{
    snprintf(p, cap, "%s/shard-%05d.%s", o->dir, (int)index,
             o->llmc ? "bin" : "tok");
}

static llmt_status split_finish_shard(split_out *o, llmt_err *ce)
{
    llmt_status s = LLMT_OK;
    if (o->llmc) {
        if (!o->n)
            return LLMT_OK;
        shard_path(o, o->shards, o->path, sizeof o->path);
        s = llmt_shard_write_llmc(o->ctx, o->path, o->buf, o->n);
        o->n = 0;
    } else {
        if (!o->w)
            return LLMT_OK;
        s = llmt_shard_writer_finish(o->w);
        if (s != LLMT_OK)
            llmt__err_set(ce, s, "data prepare: %s",
                          llmt_shard_writer_last_error(o->w));
        llmt_shard_writer_destroy(o->w);
        o->w = NULL;
    }
    if (s == LLMT_OK)
        o->shards++;
    o->in_shard = 0;
    return s;
}

/* Documents stay whole: a shard rolls over before the document that would
 * take it past shard_tokens (a longer document gets a shard of its own). */
static llmt_status split_add(split_out *o, const int32_t *ids, size_t n,
                             llmt_err *ce)
{
    llmt_status s;
    if (o->in_shard > 0 && o->in_shard + (int64_t)n > o->shard_tokens &&
        (s = split_finish_shard(o, ce)) != LLMT_OK)
        return s;
    if (o->llmc) {
        if ((uint64_t)o->n + n > (uint64_t)INT32_MAX)
            return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                                 "data prepare: an llm.c shard holds at most "
                                 "2^31-1 tokens (a document has %zu)", n);
        if (o->n + n > o->cap) {
            size_t nc = o->cap ? o->cap : 1 << 16;
            while (nc < o->n + n)
                nc *= 2;
            int32_t *nb = realloc(o->buf, nc * sizeof *nb);
            if (!nb)
                return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY,
                                     "data prepare: no memory for an llm.c "
                                     "shard of %zu tokens", nc);
            o->buf = nb;
            o->cap = nc;
        }
        memcpy(o->buf + o->n, ids, n * sizeof *ids);
        o->n += n;
    } else {
        if (!o->w) {
            shard_path(o, o->shards, o->path, sizeof o->path);
            s = llmt_shard_writer_create(o->ctx, o->path, o->vocab, &o->w);
            if (s != LLMT_OK)
                return s; /* the writer's message is on ctx */
        }
        s = llmt_shard_writer_add(o->w, ids, n);
        if (s != LLMT_OK)
            return llmt__err_set(ce, s, "data prepare: %s",
                                 llmt_shard_writer_last_error(o->w));
    }
    o->in_shard += (int64_t)n;
    o->tokens += (int64_t)n;
    o->documents++;
    return LLMT_OK;
}

/* After a failure: the shards of this call go, so that a retry into the
 * same directory is not refused and nobody trains on half a corpus. */
static void split_discard(split_out *o)
{
    llmt_shard_writer_destroy(o->w);
    o->w = NULL;
    char p[PP_PATH];
    for (int32_t i = 0; i < o->shards; i++) {
        shard_path(o, i, p, sizeof p);
        unlink(p);
    }
    free(o->buf);
    o->buf = NULL;
}

/* ---- the output directory --------------------------------------------- */

static int mkdir_p(const char *path)
{
    char tmp[PP_PATH];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -1;
    struct stat st;
    return stat(tmp, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

/* The first file of an earlier preparation in `out` (shards, report or
 * tokenizer) into `found`; 0 when there is none. */
static int holds_data(const char *out, char *found, size_t cap)
{
    static const char *const top[] = {"report.json", "tokenizer.bin"};
    struct stat st;
    for (int i = 0; i < 2; i++) {
        snprintf(found, cap, "%s/%s", out, top[i]);
        if (stat(found, &st) == 0)
            return 1;
    }
    static const char *const sub[] = {"train", "val"};
    for (int i = 0; i < 2; i++) {
        char d[PP_PATH];
        snprintf(d, sizeof d, "%s/%s", out, sub[i]);
        if (llmt__data_dir_first_shard(d, found, cap))
            return 1;
    }
    return 0;
}

/* ---- report.json ------------------------------------------------------- */

typedef struct prep_used {
    const char *const *inputs;
    size_t n_inputs;
    const llmt_ingest_opts *io;
    const llmt_data_filter_opts *fo;
    const llmt_dedup_opts *dd;
    const llmt_data_prepare_opts *po;
    int32_t vocab, eot;
} prep_used;

static llmt_status write_report(const char *out, const llmt_data_report *r,
                                const prep_used *u, llmt_err *ce)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY,
                             "data prepare: no memory for report.json");
    cJSON_AddNumberToObject(j, "files", (double)r->files);
    cJSON_AddNumberToObject(j, "documents", (double)r->documents);
    cJSON_AddNumberToObject(j, "bytes", (double)r->bytes);
    cJSON_AddNumberToObject(j, "invalid_utf8", (double)r->invalid_utf8);
    cJSON_AddNumberToObject(j, "bad_lines", (double)r->bad_lines);
    cJSON *v = cJSON_AddObjectToObject(j, "verdicts");
    for (int i = 0; v && i < LLMT_DATA_VERDICTS; i++)
        cJSON_AddNumberToObject(v, llmt_data_verdict_name(i),
                                (double)r->verdicts[i]);
    cJSON_AddNumberToObject(j, "kept", (double)r->verdicts[LLMT_DATA_KEEP]);
    cJSON_AddNumberToObject(j, "train_documents", (double)r->train_documents);
    cJSON_AddNumberToObject(j, "val_documents", (double)r->val_documents);
    cJSON_AddNumberToObject(j, "train_tokens", (double)r->train_tokens);
    cJSON_AddNumberToObject(j, "val_tokens", (double)r->val_tokens);
    cJSON_AddNumberToObject(j, "train_shards", r->train_shards);
    cJSON_AddNumberToObject(j, "val_shards", r->val_shards);
    cJSON_AddNumberToObject(j, "seconds", r->seconds);
    cJSON_AddStringToObject(j, "format", u->po->llmc_format ? "llmc" : "llmtrain");
    cJSON *t = cJSON_AddObjectToObject(j, "tokenizer");
    if (t) {
        cJSON_AddStringToObject(t, "file", "tokenizer.bin");
        cJSON_AddNumberToObject(t, "vocab_size", u->vocab);
        cJSON_AddNumberToObject(t, "eot", u->eot);
    }
    cJSON *o = cJSON_AddObjectToObject(j, "options");
    if (o) {
        cJSON *in = cJSON_AddArrayToObject(o, "inputs");
        for (size_t i = 0; in && i < u->n_inputs; i++)
            cJSON_AddItemToArray(in, cJSON_CreateString(u->inputs[i]));
        cJSON_AddStringToObject(o, "text_field",
                                u->io->text_field ? u->io->text_field : "text");
        if (u->io->doc_separator)
            cJSON_AddStringToObject(o, "doc_separator", u->io->doc_separator);
        else
            cJSON_AddNullToObject(o, "doc_separator");
        if (u->po->no_filter)
            cJSON_AddNullToObject(o, "filter");
        else {
            cJSON *f = cJSON_AddObjectToObject(o, "filter");
            if (f) {
                cJSON_AddNumberToObject(f, "min_chars", (double)u->fo->min_chars);
                cJSON_AddNumberToObject(f, "max_chars", (double)u->fo->max_chars);
                cJSON_AddNumberToObject(f, "max_nonalpha_frac", u->fo->max_nonalpha_frac);
                cJSON_AddNumberToObject(f, "max_dup_line_frac", u->fo->max_dup_line_frac);
                cJSON_AddNumberToObject(f, "max_top_ngram_frac", u->fo->max_top_ngram_frac);
                cJSON_AddNumberToObject(f, "ngram_min_words", (double)u->fo->ngram_min_words);
            }
        }
        if (u->po->no_dedup || (!u->dd->exact && !u->dd->near))
            cJSON_AddNullToObject(o, "dedup");
        else {
            cJSON *d = cJSON_AddObjectToObject(o, "dedup");
            if (d) {
                cJSON_AddBoolToObject(d, "exact", u->dd->exact != 0);
                cJSON_AddBoolToObject(d, "near", u->dd->near != 0);
                cJSON_AddNumberToObject(d, "shingle", u->dd->shingle);
                cJSON_AddNumberToObject(d, "permutations", u->dd->permutations);
                cJSON_AddNumberToObject(d, "bands", u->dd->bands);
                cJSON_AddNumberToObject(d, "threshold", u->dd->threshold);
                cJSON_AddNumberToObject(d, "seed", (double)u->dd->seed);
            }
        }
        cJSON_AddNumberToObject(o, "shard_tokens", (double)u->po->shard_tokens);
        cJSON_AddNumberToObject(o, "val_fraction", u->po->val_fraction);
        cJSON_AddNumberToObject(o, "seed", (double)u->po->seed);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text)
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY,
                             "data prepare: no memory for report.json");
    char path[PP_PATH], tmp[PP_PATH + 8];
    snprintf(path, sizeof path, "%s/report.json", out);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0)
        ok = 0;
    free(text);
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return llmt__err_set(ce, LLMT_ERR_IO, "data prepare: write %s: %s",
                             path, strerror(e));
    }
    return LLMT_OK;
}

/* ---- the pipeline ------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Validation when the text's hash, as a fraction of 2^64, falls below
 * val_fraction: the split depends on the text alone, so a corpus prepared
 * again (reordered, or with documents added) keeps its validation set. */
static int goes_to_val(const char *text, size_t len, uint64_t seed,
                       double frac)
{
    uint64_t h = XXH64(text, len, seed);
    return (double)h * 0x1p-64 < frac;
}

typedef struct prep_state {
    llmt_context *ctx;
    llmt_err *ce;
    llmt_ingest *it;
    llmt_dedup *dd;
    int32_t *ids;
    size_t cap;
    split_out train, val;
    /* The last document bound for train waits here until the next one
     * comes: if the hash sends no document at all to validation, it goes
     * there instead (a split with an empty validation set is useless). */
    int32_t *held;
    size_t held_n, held_cap;
} prep_state;

static llmt_status hold(prep_state *p, const int32_t *ids, size_t n)
{
    if (n > p->held_cap) {
        int32_t *nb = realloc(p->held, n * sizeof *nb);
        if (!nb)
            return llmt__err_set(p->ce, LLMT_ERR_OUT_OF_MEMORY,
                                 "data prepare: no memory for %zu token ids", n);
        p->held = nb;
        p->held_cap = n;
    }
    memcpy(p->held, ids, n * sizeof *ids);
    p->held_n = n;
    return LLMT_OK;
}

static llmt_status ids_reserve(prep_state *p, size_t n)
{
    if (n <= p->cap)
        return LLMT_OK;
    size_t nc = p->cap ? p->cap : 4096;
    while (nc < n)
        nc *= 2;
    int32_t *nb = realloc(p->ids, nc * sizeof *nb);
    if (!nb)
        return llmt__err_set(p->ce, LLMT_ERR_OUT_OF_MEMORY,
                             "data prepare: no memory for %zu token ids", nc);
    p->ids = nb;
    p->cap = nc;
    return LLMT_OK;
}

/* eot then the document's ids into p->ids; *n gets the count. */
static llmt_status encode_doc(prep_state *p, llmt_tokenizer *tok, int32_t eot,
                              const char *text, size_t len, size_t *n)
{
    size_t cnt = 0;
    llmt_status s = ids_reserve(p, len + 2); /* byte-level: <= 1 id a byte */
    if (s != LLMT_OK)
        return s;
    s = llmt_tokenizer_encode(tok, text, len, p->ids + 1, p->cap - 1, &cnt);
    if (s == LLMT_ERR_BUFFER_TOO_SMALL) {
        if ((s = ids_reserve(p, cnt + 1)) != LLMT_OK)
            return s;
        s = llmt_tokenizer_encode(tok, text, len, p->ids + 1, p->cap - 1, &cnt);
    }
    if (s != LLMT_OK)
        return llmt__err_set(p->ce, s, "data prepare: tokenizer: %s",
                             llmt_tokenizer_last_error(tok));
    p->ids[0] = eot;
    *n = cnt + 1;
    return LLMT_OK;
}

static void fill_from_ingest(llmt_ingest *it, llmt_data_report *r)
{
    llmt_ingest_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    if (!it || llmt_ingest_get_stats(it, &st) != LLMT_OK)
        return;
    r->files = st.files;
    r->documents = st.documents;
    r->bytes = st.bytes_read;
    r->invalid_utf8 = st.invalid_utf8;
    r->bad_lines = st.bad_lines;
}

/* Every document removed: how many were read and what removed them (st
 * of run() is only filled for a progress callback: it said "0 read" of a
 * document the filters had removed). */
static llmt_status none_left(prep_state *p, const llmt_data_report *r)
{
    char why[512] = "";
    int64_t read = 0;
    size_t n = 0;
    for (int32_t v = 0; v < LLMT_DATA_VERDICTS; v++) {
        read += r->verdicts[v];
        if (v != LLMT_DATA_KEEP && r->verdicts[v] && n < sizeof why)
            n += (size_t)snprintf(why + n, sizeof why - n, "%s %s %lld", n ? "," : ":",
                                  llmt_data_verdict_name(v), (long long)r->verdicts[v]);
    }
    if (!read)
        return llmt__err_set(p->ce, LLMT_ERR_INVALID_ARGUMENT,
                             "data prepare: no document left: the inputs hold no "
                             "document (empty files?)");
    return llmt__err_set(p->ce, LLMT_ERR_INVALID_ARGUMENT,
                         "data prepare: no document left: %lld read, all removed%s "
                         "(loosen those thresholds or turn the filters or dedup off; "
                         "doc/data.md)",
                         (long long)read, why);
}

static llmt_status run(prep_state *p, llmt_tokenizer *tok, int32_t eot,
                       const llmt_data_filter_opts *fo,
                       const llmt_data_prepare_opts *po, llmt_data_report *r)
{
    llmt_status s;
    int dedup = p->dd != NULL;
    llmt_ingest_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    for (;;) {
        const char *text = NULL;
        size_t len = 0;
        s = llmt_ingest_next(p->it, &text, &len);
        if (s != LLMT_OK)
            return llmt__err_set(p->ce, s, "data prepare: %s",
                                 llmt_ingest_last_error(p->it));
        if (!text)
            break;
        int32_t verdict = LLMT_DATA_KEEP;
        if (!po->no_filter &&
            (s = llmt_data_filter_check(fo, text, len, &verdict)) != LLMT_OK)
            return s == LLMT_ERR_OUT_OF_MEMORY
                       ? llmt__err_set(p->ce, s,
                                       "data prepare: out of memory in the "
                                       "filters (a document of %zu bytes)",
                                       len)
                       : llmt__err_set(p->ce, s,
                                       "data prepare: filter options rejected "
                                       "(check the thresholds)");
        if (verdict == LLMT_DATA_KEEP && dedup &&
            (s = llmt_dedup_add(p->dd, text, len, &verdict, NULL)) != LLMT_OK)
            return llmt__err_set(p->ce, s, "data prepare: %s",
                                 llmt_dedup_last_error(p->dd));
        if (verdict >= 0 && verdict < LLMT_DATA_VERDICTS)
            r->verdicts[verdict]++;
        if (verdict == LLMT_DATA_KEEP) {
            size_t nid = 0;
            if ((s = encode_doc(p, tok, eot, text, len, &nid)) != LLMT_OK)
                return s;
            if (goes_to_val(text, len, po->seed, po->val_fraction)) {
                s = split_add(&p->val, p->ids, nid, p->ce);
            } else {
                s = p->held_n ? split_add(&p->train, p->held, p->held_n, p->ce)
                              : LLMT_OK;
                if (s == LLMT_OK)
                    s = hold(p, p->ids, nid);
            }
            if (s != LLMT_OK)
                return s;
        }
        if (po->progress && llmt_ingest_get_stats(p->it, &st) == LLMT_OK)
            po->progress(po->progress_user, st.bytes_read, st.bytes_total,
                         st.documents);
    }
    if (p->held_n) {
        int to_val = p->val.documents == 0 && po->val_fraction > 0 &&
                     r->verdicts[LLMT_DATA_KEEP] >= 2;
        s = split_add(to_val ? &p->val : &p->train, p->held, p->held_n, p->ce);
        p->held_n = 0;
        if (s != LLMT_OK)
            return s;
    }
    if ((s = split_finish_shard(&p->train, p->ce)) != LLMT_OK ||
        (s = split_finish_shard(&p->val, p->ce)) != LLMT_OK)
        return s;
    if (po->progress && llmt_ingest_get_stats(p->it, &st) == LLMT_OK)
        po->progress(po->progress_user, st.bytes_read, st.bytes_total,
                     st.documents);
    if (r->verdicts[LLMT_DATA_KEEP] == 0)
        return none_left(p, r);
    return LLMT_OK;
}

static llmt_status copy_sub_opts(llmt_err *ce, const llmt_data_prepare_opts *po,
                                 llmt_ingest_opts *io,
                                 llmt_data_filter_opts *fo,
                                 llmt_dedup_opts *dd)
{
    llmt_status s = LLMT_OK;
    llmt_ingest_opts_init(io, sizeof *io);
    llmt_data_filter_opts_init(fo, sizeof *fo);
    llmt_dedup_opts_init(dd, sizeof *dd);
    if (po->ingest &&
        (s = llmt__opts_copy(ce, "data prepare: ingest opts", io, sizeof *io,
                             po->ingest)) != LLMT_OK)
        return s;
    if (po->filter &&
        (s = llmt__opts_copy(ce, "data prepare: filter opts", fo, sizeof *fo,
                             po->filter)) != LLMT_OK)
        return s;
    if (po->dedup &&
        (s = llmt__opts_copy(ce, "data prepare: dedup opts", dd, sizeof *dd,
                             po->dedup)) != LLMT_OK)
        return s;
    return LLMT_OK;
}

/* Checks that need no I/O; out: the tokenizer's vocabulary and eot. */
static llmt_status check_args(llmt_err *ce, const llmt_data_prepare_opts *po,
                              llmt_tokenizer *tok, const char *out_dir,
                              int32_t *vocab, int32_t *eot)
{
    if (!(po->shard_tokens >= 1))
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "data prepare: shard_tokens %lld must be >= 1",
                             (long long)po->shard_tokens);
    if (po->llmc_format && po->shard_tokens > INT32_MAX)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "data prepare: shard_tokens %lld: an llm.c token "
                             "file holds at most 2^31-1 tokens",
                             (long long)po->shard_tokens);
    if (!(po->val_fraction >= 0.0 && po->val_fraction <= 1.0))
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "data prepare: val_fraction %g is not in [0, 1]",
                             po->val_fraction);
    if (!*out_dir || strlen(out_dir) > PP_PATH - 64)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "data prepare: output directory name is empty or "
                             "longer than %d bytes", PP_PATH - 64);
    if (llmt_tokenizer_vocab_size(tok, vocab) != LLMT_OK ||
        llmt_tokenizer_eot(tok, eot) != LLMT_OK)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "data prepare: tokenizer: %s",
                             llmt_tokenizer_last_error(tok));
    if (po->llmc_format && *vocab > 65536)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "data prepare: llm.c token files store uint16 "
                             "ids, but the tokenizer has %d tokens (at most "
                             "65536); use our format (no llmc_format)",
                             (int)*vocab);
    return LLMT_OK;
}

/* The report the caller gets: as much of ours as its struct_size holds. */
static void give_report(llmt_data_report *dst, const llmt_data_report *r)
{
    if (!dst || dst->struct_size < sizeof(size_t))
        return;
    size_t n = dst->struct_size < sizeof *r ? dst->struct_size : sizeof *r;
    memcpy((unsigned char *)dst + sizeof(size_t),
           (const unsigned char *)r + sizeof(size_t), n - sizeof(size_t));
}

LLMT_API llmt_status llmt_data_prepare(llmt_context *ctx,
                                       const char *const *inputs, size_t n,
                                       llmt_tokenizer *tok, const char *out_dir,
                                       const llmt_data_prepare_opts *opts,
                                       llmt_data_report *report)
{
    double t0 = now_s();
    llmt_err *ce = ctx ? &ctx->err : NULL;
    llmt_data_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    give_report(report, &r);
    if ((!inputs && n) || !tok || !out_dir)
        return llmt__err_set(ce, LLMT_ERR_NULL_POINTER,
                             "data prepare: %s is NULL",
                             !tok ? "the tokenizer" : !out_dir ? "out_dir"
                                                               : "inputs");
    if (report && report->struct_size < sizeof(size_t))
        return llmt__err_set(ce, LLMT_ERR_STRUCT_SIZE,
                             "data prepare: report struct_size %zu; set it to "
                             "sizeof the struct", report->struct_size);
    llmt_data_prepare_opts po;
    llmt_data_prepare_opts_init(&po, sizeof po);
    llmt_status s;
    if (opts && (s = llmt__opts_copy(ce, "data prepare opts", &po, sizeof po,
                                     opts)) != LLMT_OK)
        return s;
    llmt_ingest_opts io;
    llmt_data_filter_opts fo;
    llmt_dedup_opts dd;
    int32_t vocab = 0, eot = 0;
    if ((s = copy_sub_opts(ce, &po, &io, &fo, &dd)) != LLMT_OK ||
        (s = check_args(ce, &po, tok, out_dir, &vocab, &eot)) != LLMT_OK)
        return s;

    char found[PP_PATH + 300];
    if (holds_data(out_dir, found, sizeof found))
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "data prepare: %s holds a prepared dataset "
                             "already (%s); choose another directory or "
                             "remove it (data is never overwritten)",
                             out_dir, found);
    /* Inputs and options are checked before anything is created. */
    prep_state p;
    memset(&p, 0, sizeof p);
    p.ctx = ctx;
    p.ce = ce;
    int32_t v0 = 0;
    if (!po.no_filter &&
        (s = llmt_data_filter_check(&fo, "", 0, &v0)) != LLMT_OK) {
        return llmt__err_set(ce, s, "data prepare: filter options rejected "
                             "(a threshold is negative or out of range)");
    }
    if (!po.no_dedup && (dd.exact || dd.near) &&
        (s = llmt_dedup_create(ctx, &dd, &p.dd)) != LLMT_OK)
        return s; /* dedup named the bad option on ctx */
    if ((s = llmt_ingest_open(ctx, inputs, n, &io, &p.it)) != LLMT_OK) {
        llmt_dedup_destroy(p.dd);
        return s; /* ingest named the missing input on ctx */
    }
    char dtrain[PP_PATH], dval[PP_PATH];
    snprintf(dtrain, sizeof dtrain, "%s/train", out_dir);
    snprintf(dval, sizeof dval, "%s/val", out_dir);
    if (mkdir_p(dtrain) != 0 || mkdir_p(dval) != 0) {
        s = llmt__err_set(ce, LLMT_ERR_IO,
                          "data prepare: cannot create %s/train and %s/val: %s",
                          out_dir, out_dir, strerror(errno));
        llmt_dedup_destroy(p.dd);
        llmt_ingest_destroy(p.it);
        return s;
    }
    split_out base = {.ctx = ctx, .llmc = po.llmc_format, .vocab = vocab,
                      .shard_tokens = po.shard_tokens};
    p.train = base;
    p.train.dir = dtrain;
    p.val = base;
    p.val.dir = dval;
    s = run(&p, tok, eot, &fo, &po, &r);
    fill_from_ingest(p.it, &r);
    r.train_documents = p.train.documents;
    r.val_documents = p.val.documents;
    r.train_tokens = p.train.tokens;
    r.val_tokens = p.val.tokens;
    r.train_shards = p.train.shards;
    r.val_shards = p.val.shards;
    if (s == LLMT_OK) {
        char tp[PP_PATH];
        snprintf(tp, sizeof tp, "%s/tokenizer.bin", out_dir);
        s = llmt_tokenizer_save(tok, tp);
        if (s != LLMT_OK)
            llmt__err_set(ce, s, "data prepare: save %s: %s", tp,
                          llmt_tokenizer_last_error(tok));
    }
    r.seconds = now_s() - t0;
    if (s == LLMT_OK) {
        prep_used u = {inputs, n, &io, &fo, &dd, &po, vocab, eot};
        s = write_report(out_dir, &r, &u, ce);
    }
    if (s != LLMT_OK) {
        split_discard(&p.train);
        split_discard(&p.val);
        r.train_shards = r.val_shards = 0;
        char tp[PP_PATH];
        snprintf(tp, sizeof tp, "%s/tokenizer.bin", out_dir);
        unlink(tp);
        rmdir(dtrain); /* only when empty: nothing of anyone else goes */
        rmdir(dval);
        llmt__log(ctx, LLMT_LOG_WARN, "data",
                  "prepare into %s failed; the shards it wrote are removed",
                  out_dir);
    } else {
        free(p.train.buf);
        free(p.val.buf);
        if (p.val.documents == 0 && po.val_fraction > 0)
            llmt__log(ctx, LLMT_LOG_WARN, "data",
                      "prepare: no document went to validation (val_fraction "
                      "%g of %lld kept documents)", po.val_fraction,
                      (long long)r.verdicts[LLMT_DATA_KEEP]);
    }
    llmt_dedup_destroy(p.dd);
    llmt_ingest_destroy(p.it);
    free(p.ids);
    free(p.held);
    give_report(report, &r);
    return s;
}
