/* The data of a job. data.train is either token shards (a directory
 * prepared by `llmtrain data prepare`, a shard directory, file or glob) or
 * text (a file or directory; by default the fortunes corpus). Text is
 * prepared once into RUN/data with lib/data's pipeline (filters, dedup,
 * tokenizer, shards, a held-out validation split), so training always
 * reads shards through the loader: the global sample cursor makes the
 * order independent of the number of data-parallel ranks, and its state is
 * what a checkpoint keeps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <limits.h>

#include "data/data_internal.h"
#include "job/job.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Shards rather than text: a glob, a prepared directory, a directory
 * holding *.tok / *.bin files, or a file starting with a shard magic. */
static int is_shards(const char *p)
{
    if (strpbrk(p, "*?["))
        return 1;
    char b[JOB_PATH_MAX + 16];
    if (is_dir(p)) {
        snprintf(b, sizeof b, "%s/train", p);
        if (is_dir(b))
            return 1;
        llmt_dataset *ds = NULL;
        /* a text directory fails to open as a dataset (no shard files) */
        int ok = llmt_dataset_open(NULL, p, 0, &ds) == LLMT_OK;
        llmt_dataset_destroy(ds);
        return ok;
    }
    FILE *f = fopen(p, "rb");
    if (!f)
        return 0;
    unsigned char m[8] = {0};
    size_t n = fread(m, 1, sizeof m, f);
    fclose(f);
    if (n == 8 && !memcmp(m, "LLMTTOK", 7))
        return 1;
    int32_t llmc = 0;
    memcpy(&llmc, m, 4);
    return n >= 4 && llmc == 20240520;
}

static llmt_status open_tokenizer(llmt_job *j, job_data *d, const char *dflt_file)
{
    const llmt_spec *sp = j->spec;
    llmt_status s;
    const char *p = sp->data.tokenizer.path;
    char enc[JOB_PATH_MAX + 16], bpe[JOB_PATH_MAX + 16];
    if (p && *p && is_dir(p)) { /* GPT-2's encoder.json + vocab.bpe */
        snprintf(enc, sizeof enc, "%s/encoder.json", p);
        snprintf(bpe, sizeof bpe, "%s/vocab.bpe", p);
        s = llmt_tokenizer_load_gpt2(j->ctx, enc, bpe, &d->tok);
    } else if (p && *p) {
        s = llmt_tokenizer_load(j->ctx, p, &d->tok);
    } else if (dflt_file && exists(dflt_file)) {
        s = llmt_tokenizer_load(j->ctx, dflt_file, &d->tok);
    } else if (sp->data.tokenizer.kind == LLMT_SPEC_TOK_BYTE) {
        s = llmt_tokenizer_create_bytes(j->ctx, &d->tok);
    } else {
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "data.tokenizer: no tokenizer for these shards: set "
                    "data.tokenizer.path (our tokenizer file, or a directory "
                    "with GPT-2's encoder.json and vocab.bpe)");
    }
    if (s != LLMT_OK)
        return FAIL(s, "data.tokenizer: %s", llmt_context_last_error(j->ctx));
    llmt_tokenizer_vocab_size(d->tok, &d->vocab);
    llmt_tokenizer_eot(d->tok, &d->eot);
    return LLMT_OK;
}

/* How much of a document longer than the BPE sample (max bytes) the
 * sample takes: up to a UTF-8 character's start. A corpus of one large
 * document (a text file is one unless "%" lines split it) gave an empty
 * sample, refused as "corpus ... is empty". */
static size_t sample_cut(const char *doc, size_t max)
{
    size_t n = max;
    while (n > 0 && ((unsigned char)doc[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* A byte-level BPE learned from the first 64 MiB of the corpus. */
static llmt_status learn_bpe(llmt_job *j, job_data *d, const char *corpus)
{
    llmt_ingest_opts io;
    llmt_ingest_opts_init(&io, sizeof io);
    io.doc_separator = "%";
    llmt_ingest *it = NULL;
    llmt_status s = llmt_ingest_open(j->ctx, &corpus, 1, &io, &it);
    if (s != LLMT_OK)
        return FAIL(s, "data.train: %s", llmt_context_last_error(j->ctx));
    size_t cap = (size_t)64 << 20, n = 0;
    char *text = malloc(cap);
    if (!text) {
        llmt_ingest_destroy(it);
        return FAIL(LLMT_ERR_OUT_OF_MEMORY, "data: no memory for the BPE sample");
    }
    for (;;) {
        const char *doc;
        size_t len;
        s = llmt_ingest_next(it, &doc, &len);
        if (s == LLMT_OK && doc && n == 0 && len + 1 > cap)
            len = sample_cut(doc, cap - 1); /* a first document past the cap */
        if (s != LLMT_OK || !doc || n + len + 1 > cap)
            break;
        memcpy(text + n, doc, len);
        n += len;
        text[n++] = '\n';
    }
    if (s != LLMT_OK) {
        FAIL(s, "data.train: %s", llmt_ingest_last_error(it));
        free(text);
        llmt_ingest_destroy(it);
        return s;
    }
    llmt_ingest_destroy(it);
    if (n == 0) {
        free(text);
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "data.train: corpus %s is empty: no data to train on", corpus);
    }
    s = llmt_tokenizer_train_bpe(j->ctx, text, n, j->spec->data.tokenizer.vocab_size, &d->tok);
    free(text);
    if (s != LLMT_OK)
        return FAIL(s, "data.tokenizer: %s", llmt_context_last_error(j->ctx));
    llmt_tokenizer_vocab_size(d->tok, &d->vocab);
    llmt_tokenizer_eot(d->tok, &d->eot);
    return LLMT_OK;
}

static int same_path(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    return !strcmp(a, b) || (realpath(a, ra) && realpath(b, rb) && !strcmp(ra, rb));
}

/* The corpus RUN/data was prepared from (report.json's options.inputs[0]),
 * into from; "" when the report does not say. */
static void prepared_from(const char *report, char *from, size_t cap)
{
    from[0] = 0;
    FILE *f = fopen(report, "rb");
    if (!f)
        return;
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "options"), "inputs");
    const cJSON *first = cJSON_GetArrayItem(in, 0);
    if (cJSON_IsString(first))
        snprintf(from, cap, "%s", first->valuestring);
    cJSON_Delete(j);
}

/* A resumed run reuses RUN/data: data.train naming another corpus was
 * taken silently (the run said it trained on the new one). */
static llmt_status same_corpus(llmt_job *j, const char *corpus, const char *prep,
                               const char *report)
{
    char from[JOB_PATH_MAX];
    prepared_from(report, from, sizeof from);
    if (!from[0] || same_path(from, corpus))
        return LLMT_OK;
    return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                "data.train is %s, but %s was prepared from %s by the earlier start of "
                "this run: give data.train %s to continue it, or start another run "
                "(--out)",
                corpus, prep, from, from);
}

/* Text corpus -> RUN/data (once; a resumed run reuses it). */
static llmt_status prepare_text(llmt_job *j, job_data *d, const char *corpus,
                                const job_data_opts *o, char *prep, size_t cap)
{
    snprintf(prep, cap, "%s/data", o->run_dir);
    char tokfile[JOB_PATH_MAX + 32], report[JOB_PATH_MAX + 32];
    snprintf(tokfile, sizeof tokfile, "%s/tokenizer.bin", prep);
    snprintf(report, sizeof report, "%s/report.json", prep);
    if (exists(report)) { /* prepared by an earlier start of this run */
        if (!o->resume)
            return FAIL(LLMT_ERR_STATE,
                        "%s already holds prepared data of an earlier run: "
                        "continue it with --resume, or choose another --out",
                        prep);
        llmt_status s = same_corpus(j, corpus, prep, report);
        return s != LLMT_OK ? s : open_tokenizer(j, d, tokfile);
    }
    if (exists(prep))
        return FAIL(LLMT_ERR_STATE,
                    "%s exists but holds no report.json (an interrupted "
                    "preparation?): remove it and start again",
                    prep);
    const llmt_spec *sp = j->spec;
    llmt_status s;
    if ((sp->data.tokenizer.path && *sp->data.tokenizer.path) ||
        sp->data.tokenizer.kind != LLMT_SPEC_TOK_BPE)
        s = open_tokenizer(j, d, NULL);
    else
        s = learn_bpe(j, d, corpus);
    if (s != LLMT_OK)
        return s;

    llmt_ingest_opts io;
    llmt_ingest_opts_init(&io, sizeof io);
    io.doc_separator = "%"; /* fortune files; other text is one document */
    llmt_data_prepare_opts po;
    llmt_data_prepare_opts_init(&po, sizeof po);
    po.ingest = &io;
    po.val_fraction = 0.05;
    po.seed = (uint64_t)sp->data.seed;
    llmt_data_report rep;
    memset(&rep, 0, sizeof rep);
    rep.struct_size = sizeof rep;
    s = llmt_data_prepare(j->ctx, &corpus, 1, d->tok, prep, &po, &rep);
    if (s != LLMT_OK)
        return FAIL(s, "data: %s", llmt_context_last_error(j->ctx));
    int64_t removed = rep.documents - rep.verdicts[LLMT_DATA_KEEP];
    int64_t dups = rep.verdicts[LLMT_DATA_EXACT_DUP] + rep.verdicts[LLMT_DATA_NEAR_DUP];
    snprintf(d->note, sizeof d->note,
             "prepared %.400s into %.400s: %lld documents, %lld removed (%lld by "
             "quality filters, %lld duplicates), %lld train / %lld validation "
             "documents, %.1f s",
             corpus, prep, (long long)rep.documents, (long long)removed,
             (long long)(removed - dups), (long long)dups, (long long)rep.train_documents,
             (long long)rep.val_documents, rep.seconds);
    return LLMT_OK;
}

/* A prepared directory whose split holds no shard: `data prepare
 * --val-frac 1` leaves train/ empty, --val-frac 0 (or a one-document
 * corpus) val/. Said with the fix, where the dataset would only say "no
 * *.tok"; key is the spec key that named root. */
static llmt_status empty_split(llmt_job *j, const char *key, const char *root,
                               const char *split)
{
    char p[JOB_PATH_MAX + 32], other[JOB_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/%s", root, split);
    if (!is_dir(p) || llmt__data_dir_first_shard(p, NULL, 0))
        return LLMT_OK;
    int train = !strcmp(split, "train");
    snprintf(other, sizeof other, "%s/%s", root, train ? "val" : "train");
    if (!llmt__data_dir_first_shard(other, NULL, 0))
        return FAIL(LLMT_ERR_NOT_FOUND,
                    "%s %s: the preparation holds no token shards (%s/ and %s/ are "
                    "empty): prepare the corpus again (llmtrain data prepare)",
                    key, root, p, other);
    if (train)
        return FAIL(LLMT_ERR_NOT_FOUND,
                    "%s %s: the preparation holds only a validation split (%s/ has no "
                    "shard; prepared with --val-frac 1?): prepare the corpus again with a "
                    "smaller --val-frac, or point %s at training shards (this directory "
                    "can serve as data.val)",
                    key, root, p, key);
    return FAIL(LLMT_ERR_NOT_FOUND,
                "%s %s: the preparation holds no validation split (%s/ has no shard; "
                "prepared with --val-frac 0, or from a single document?) and a job "
                "validates on one: prepare the corpus again with --val-frac above 0, "
                "or name %svalidation shards in data.val",
                key, root, p, strcmp(key, "data.val") ? "" : "other ");
}

/* Text the job prepared that left val/ empty: one document (a file is
 * one unless "%" lines split it), which went to training; the
 * preparation's --val-frac is not the user's to change here. */
static llmt_status text_no_val(llmt_job *j, const char *src, const char *prep)
{
    char p[JOB_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/val", prep);
    if (!is_dir(p) || llmt__data_dir_first_shard(p, NULL, 0))
        return LLMT_OK;
    return FAIL(LLMT_ERR_NOT_FOUND,
                "data.train %s: the text gave one document (a file is one unless "
                "lines of %% separate documents; the filters and dedup may have "
                "removed others), which went to training, so %s/ holds no "
                "validation shard: split the text with %% lines, or name "
                "validation shards in data.val",
                src, p);
}

/* The validation shards: data.val (a prepared directory gives its val/,
 * as data.train gives its train/), else the val/ of data.train's prepared
 * directory. */
static llmt_status val_path(llmt_job *j, const char *src, const char *prep, int prepared,
                            char *valp, size_t cap)
{
    const llmt_spec *sp = j->spec;
    const char *v = sp->data.val && *sp->data.val ? sp->data.val : NULL;
    char sub[JOB_PATH_MAX + 32];
    if (!v && !prepared)
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "data.val is not set and %s is not a prepared directory "
                    "with a val/ split: name the validation shards in data.val",
                    src);
    if (!v) {
        snprintf(valp, cap, "%s/val", prep);
        return empty_split(j, "data.train", prep, "val");
    }
    snprintf(sub, sizeof sub, "%s/train", v);
    if (is_dir(v) && is_dir(sub)) {
        snprintf(valp, cap, "%s/val", v);
        return empty_split(j, "data.val", v, "val");
    }
    /* a file with a shard's name but a bad header is left to the dataset,
     * which names what is wrong in it */
    size_t n = strlen(v);
    int named = n > 4 && (!strcmp(v + n - 4, ".tok") || !strcmp(v + n - 4, ".bin"));
    if (is_dir(v) ? !llmt__data_dir_first_shard(v, NULL, 0)
                  : exists(v) && !named && !is_shards(v))
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "data.val %s is text or holds no token shards (*.tok, *.bin): "
                    "prepare it with llmtrain data prepare and name its directory, "
                    "or leave data.val out (text in data.train is prepared with its "
                    "own validation split)",
                    v);
    snprintf(valp, cap, "%s", v);
    return LLMT_OK;
}

static llmt_status open_ds(llmt_job *j, const char *path, llmt_dataset **out, const char *what)
{
    llmt_status s = llmt_dataset_open(j->ctx, path, 0, out);
    if (s != LLMT_OK)
        return FAIL(s, "%s %s: %s", what, path, llmt_context_last_error(j->ctx));
    return LLMT_OK;
}

/* Unigram entropy (nats/token) of the first 64M training tokens: the loss
 * a model that ignores context would reach, printed beside the result. */
static llmt_status unigram(llmt_job *j, job_data *d)
{
    llmt_dataset_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    llmt_dataset_get_info(d->train_ds, &info);
    int64_t *cnt = calloc((size_t)d->vocab, sizeof *cnt);
    size_t chunk = 1 << 20;
    int32_t *buf = malloc(chunk * sizeof *buf);
    if (!cnt || !buf) {
        free(cnt);
        free(buf);
        return FAIL(LLMT_ERR_OUT_OF_MEMORY, "data: no memory");
    }
    int64_t total = 0, limit = (int64_t)64 << 20;
    llmt_status s = LLMT_OK;
    for (int32_t i = 0; i < info.shards && total < limit && s == LLMT_OK; i++) {
        int64_t n = 0;
        const char *path = NULL;
        llmt_dataset_shard(d->train_ds, i, &path, &n, NULL);
        for (int64_t off = 0; off < n && total < limit && s == LLMT_OK; off += (int64_t)chunk) {
            size_t k = (size_t)(n - off < (int64_t)chunk ? n - off : (int64_t)chunk);
            s = llmt_dataset_read(d->train_ds, i, off, buf, k);
            if (s != LLMT_OK) {
                FAIL(s, "training data: %s", llmt_dataset_last_error(d->train_ds));
                break;
            }
            /* the datasets refuse ids outside the tokenizer's vocabulary
             * (bounded above, in every window, past these 64M tokens too);
             * kept so that cnt is never indexed out of its bounds */
            for (size_t t = 0; t < k && s == LLMT_OK; t++) {
                if (buf[t] >= 0 && buf[t] < d->vocab)
                    cnt[buf[t]]++;
                else
                    s = FAIL(LLMT_ERR_FORMAT,
                             "training data: %s: token %lld holds id %d, outside the "
                             "tokenizer's vocabulary [0, %d)",
                             path ? path : "a shard", (long long)(off + (int64_t)t),
                             (int)buf[t], (int)d->vocab);
            }
            total += (int64_t)k;
        }
    }
    double H = 0;
    for (int32_t i = 0; i < d->vocab && total > 0; i++)
        if (cnt[i]) {
            double q = (double)cnt[i] / (double)total;
            H -= q * log(q);
        }
    free(cnt);
    free(buf);
    d->unigram_entropy = H;
    return s;
}

/* The loader of the validation sequences: the first ones of the split, in
 * file order. */
static llmt_status val_loader(job_data *d, llmt_loader **l)
{
    llmt_loader_opts lo;
    llmt_loader_opts_init(&lo, sizeof lo);
    lo.seq_len = d->T;
    lo.micro_batch = 1;
    lo.shuffle = 0;
    lo.prefetch = 0;
    return llmt_loader_create(d->val_ds, &lo, l);
}

llmt_status llmt__job_data_open(llmt_job *j, job_data *d, const job_data_opts *o)
{
    memset(d, 0, sizeof *d);
    d->T = o->seq_len;
    d->B = o->micro;
    d->A = o->accum;
    const llmt_spec *sp = j->spec;
    const char *src = sp->data.train && *sp->data.train ? sp->data.train : NULL;
    if (src && !strpbrk(src, "*?[") && !exists(src))
        return FAIL(LLMT_ERR_NOT_FOUND, "data.train %s does not exist", src);
    if (!src && is_dir("/usr/share/games/fortunes"))
        src = "/usr/share/games/fortunes";
    else if (!src && is_dir("/usr/share/common-licenses"))
        src = "/usr/share/common-licenses";
    if (!src)
        return FAIL(LLMT_ERR_NOT_FOUND,
                    "no corpus: data.train is not set and the default corpus "
                    "(/usr/share/games/fortunes, apt package fortunes) is not "
                    "installed");

    char prep[JOB_PATH_MAX + 16], trainp[JOB_PATH_MAX + 32], valp[JOB_PATH_MAX + 32];
    char tokfile[JOB_PATH_MAX + 32];
    const char *kind;
    llmt_status s;
    if (is_shards(src)) {
        snprintf(prep, sizeof prep, "%s", src);
        kind = "token shards";
    } else {
        s = prepare_text(j, d, src, o, prep, sizeof prep);
        if (s != LLMT_OK)
            return s;
        kind = "text, prepared";
        if (!(sp->data.val && *sp->data.val) && (s = text_no_val(j, src, prep)) != LLMT_OK)
            return s;
    }
    /* a prepared directory: train/, val/, tokenizer.bin */
    snprintf(trainp, sizeof trainp, "%s/train", prep);
    int prepared = is_dir(trainp);
    if (!prepared)
        snprintf(trainp, sizeof trainp, "%s", prep);
    if (prepared && (s = empty_split(j, "data.train", prep, "train")) != LLMT_OK)
        return s;
    if ((s = val_path(j, src, prep, prepared, valp, sizeof valp)) != LLMT_OK)
        return s;
    /* the shards before their tokenizer: a glob matching nothing was
     * refused as "no tokenizer for these shards" */
    if ((s = open_ds(j, trainp, &d->train_ds, "training data (data.train)")) != LLMT_OK)
        return s;
    if ((s = open_ds(j, valp, &d->val_ds, "validation data (data.val)")) != LLMT_OK)
        return s;
    if (!d->tok) {
        snprintf(tokfile, sizeof tokfile, "%s/tokenizer.bin", prep);
        s = open_tokenizer(j, d, prepared ? tokfile : NULL);
        if (s != LLMT_OK)
            return s;
    }
    /* every window the loaders serve is checked against the tokenizer, not
     * only the first 64M tokens the unigram pass reads (llm.c files name no
     * vocabulary) */
    if ((s = llmt__data_dataset_limit_ids(d->train_ds, d->vocab)) != LLMT_OK ||
        (s = llmt__data_dataset_limit_ids(d->val_ds, d->vocab)) != LLMT_OK)
        return FAIL(s, "data: bounding the ids by the tokenizer's %d: %s", (int)d->vocab,
                    d->vocab < 0 ? "negative" : "refused by the dataset");

    llmt_dataset_info ti, vi;
    memset(&ti, 0, sizeof ti);
    ti.struct_size = sizeof ti;
    vi = ti;
    llmt_dataset_get_info(d->train_ds, &ti);
    llmt_dataset_get_info(d->val_ds, &vi);
    if (ti.vocab_size > d->vocab || vi.vocab_size > d->vocab)
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "the shards were written for a vocabulary of %d tokens, the "
                    "tokenizer has %d: use the tokenizer they were prepared "
                    "with (data.tokenizer.path)",
                    (int)(ti.vocab_size > vi.vocab_size ? ti.vocab_size : vi.vocab_size),
                    (int)d->vocab);
    d->n_train = ti.tokens;
    d->n_val = vi.tokens;

    llmt_loader_opts lo;
    llmt_loader_opts_init(&lo, sizeof lo);
    lo.seq_len = o->seq_len;
    lo.micro_batch = o->micro;
    lo.grad_accum = o->accum;
    lo.dp_rank = o->dp_rank;
    lo.dp_size = o->dp_size;
    lo.seed = (uint64_t)sp->data.seed;
    s = llmt_loader_create(d->train_ds, &lo, &d->loader);
    if (s != LLMT_OK)
        return FAIL(s, "training data %s: %s", trainp, llmt_dataset_last_error(d->train_ds));
    /* the validation loader's failure (shards each shorter than a window)
     * was read as "holds fewer than N sequences" of a split holding many */
    llmt_loader *vl = NULL;
    if ((s = val_loader(d, &vl)) != LLMT_OK)
        return FAIL(s, "validation data (data.val) %s: %s", valp,
                    llmt_dataset_last_error(d->val_ds));
    llmt_loader_destroy(vl);
    int64_t spe = 0;
    llmt_loader_samples_per_epoch(d->loader, &spe);
    /* trains, but each step's batch holds the same sequences more than
     * once: said, where only "N sequences per epoch" showed it */
    int64_t gb = (int64_t)o->micro * o->accum * (o->dp_size > 0 ? o->dp_size : 1);
    if (spe < gb)
        llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                  "data.train %s holds %lld sequence(s) of model.seq_len %d tokens, fewer "
                  "than a step's global batch of %lld: every step repeats sequences (more "
                  "training data, or a smaller model.seq_len or batch)",
                  trainp, (long long)spe, o->seq_len, (long long)gb);
    if ((s = unigram(j, d)) != LLMT_OK)
        return s;
    snprintf(d->desc, sizeof d->desc,
             "%s (%s; %d train shard(s), %lld documents, %lld sequences of %d "
             "per epoch), tokenizer of %d tokens",
             src, kind, (int)ti.shards, (long long)ti.documents, (long long)spe, o->seq_len,
             (int)d->vocab);
    return LLMT_OK;
}

llmt_status llmt__job_data_next(llmt_job *j, job_data *d, int32_t *in, int32_t *tg)
{
    size_t per = (size_t)d->B * d->T;
    for (int a = 0; a < d->A; a++) {
        llmt_status s = llmt_loader_next(d->loader, in + a * per, tg + a * per, NULL);
        if (s != LLMT_OK)
            return FAIL(s, "%s", llmt_loader_last_error(d->loader));
    }
    return LLMT_OK;
}

int llmt__job_data_val(job_data *d, int32_t *in, int32_t *tg, int nmax)
{
    llmt_loader *l = NULL;
    if (val_loader(d, &l) != LLMT_OK)
        return 0;
    int64_t spe = 0;
    llmt_loader_samples_per_epoch(l, &spe);
    int n = 0;
    for (; n < nmax && n < spe; n++)
        if (llmt_loader_next(l, in + (size_t)n * d->T, tg + (size_t)n * d->T, NULL) != LLMT_OK)
            break;
    llmt_loader_destroy(l);
    return n;
}

llmt_status llmt__job_data_ckpt_read(llmt_job *j, job_data *d, llmt_ckpt *ck)
{
    /* the seed is part of the job: a checkpoint of another one is refused
     * here (the library would adopt the checkpoint's seed) */
    char v[64];
    llmt_loader_state now;
    memset(&now, 0, sizeof now);
    now.struct_size = sizeof now;
    llmt_loader_get_state(d->loader, &now);
    if (llmt_ckpt_get_kv(ck, "data.seed", v, sizeof v, NULL) == LLMT_OK &&
        strtoull(v, NULL, 10) != now.seed)
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "data.seed: the checkpoint was written with data.seed %s, "
                    "the spec says %llu",
                    v, (unsigned long long)now.seed);
    llmt_status s = llmt_loader_ckpt_read(d->loader, ck);
    if (s != LLMT_OK)
        return FAIL(s, "%s", llmt_loader_last_error(d->loader));
    return LLMT_OK;
}

void llmt__job_data_free(job_data *d)
{
    llmt_loader_destroy(d->loader);
    llmt_dataset_destroy(d->train_ds);
    llmt_dataset_destroy(d->val_ds);
    llmt_tokenizer_destroy(d->tok);
    memset(d, 0, sizeof *d);
}
