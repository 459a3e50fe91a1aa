/* The data of `llmtrain train` (see train_data.h). data.train is either
 * token shards (a directory prepared by `llmtrain data prepare`, a shard
 * directory, file or glob) or text (a file or directory; by default the
 * embedded corpus, Debian's fortunes). Text is prepared once into OUT/data
 * with lib/data's pipeline (filters, dedup, tokenizer, shards, a held-out
 * validation split), so training always reads shards through the loader:
 * the global sample cursor makes the order independent of the number of
 * data-parallel ranks, and its state is what a checkpoint keeps. */
#include "train_data.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

#define CMD "train"

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
    if (strpbrk(p, "*?[")) return 1;
    char b[1200];
    if (is_dir(p)) {
        snprintf(b, sizeof b, "%s/train", p);
        if (is_dir(b)) return 1;
        llmt_dataset *ds = NULL;
        /* a text directory fails to open as a dataset (no shard files) */
        int ok = llmt_dataset_open(NULL, p, 0, &ds) == LLMT_OK;
        llmt_dataset_destroy(ds);
        return ok;
    }
    FILE *f = fopen(p, "rb");
    if (!f) return 0;
    unsigned char m[8] = {0};
    size_t n = fread(m, 1, sizeof m, f);
    fclose(f);
    if (n == 8 && !memcmp(m, "LLMTTOK", 7)) return 1;
    int32_t llmc = 0;
    memcpy(&llmc, m, 4);
    return n >= 4 && llmc == 20240520;
}

static int open_tokenizer(train_data *d, const td_opts *o, const char *dflt_file)
{
    llmt_status s;
    const char *p = o->tok_path;
    char enc[1200], bpe[1200];
    if (p && *p && is_dir(p)) { /* GPT-2's encoder.json + vocab.bpe */
        snprintf(enc, sizeof enc, "%s/encoder.json", p);
        snprintf(bpe, sizeof bpe, "%s/vocab.bpe", p);
        s = llmt_tokenizer_load_gpt2(d->ctx, enc, bpe, &d->tok);
    } else if (p && *p) {
        s = llmt_tokenizer_load(d->ctx, p, &d->tok);
    } else if (dflt_file && exists(dflt_file)) {
        s = llmt_tokenizer_load(d->ctx, dflt_file, &d->tok);
    } else if (o->tok_kind == 0) {
        s = llmt_tokenizer_create_bytes(d->ctx, &d->tok);
    } else {
        return cli_fail(CMD, "data.tokenizer: no tokenizer for these shards: "
                        "set data.tokenizer.path (our tokenizer file, or a "
                        "directory with GPT-2's encoder.json and vocab.bpe)");
    }
    if (s != LLMT_OK) return cli_fail_status(CMD, s, llmt_context_last_error(d->ctx));
    llmt_tokenizer_vocab_size(d->tok, &d->vocab);
    llmt_tokenizer_eot(d->tok, &d->eot);
    return 0;
}

/* A byte-level BPE learned from the first 64 MiB of the corpus. */
static int learn_bpe(train_data *d, const char *corpus, const td_opts *o)
{
    llmt_ingest_opts io;
    llmt_ingest_opts_init(&io, sizeof io);
    io.doc_separator = "%";
    llmt_ingest *it = NULL;
    llmt_status s = llmt_ingest_open(d->ctx, &corpus, 1, &io, &it);
    if (s != LLMT_OK) return cli_fail_status(CMD, s, llmt_context_last_error(d->ctx));
    size_t cap = (size_t)64 << 20, n = 0;
    char *text = malloc(cap);
    if (!text) {
        llmt_ingest_destroy(it);
        return cli_fail(CMD, "no memory");
    }
    for (;;) {
        const char *doc;
        size_t len;
        s = llmt_ingest_next(it, &doc, &len);
        if (s != LLMT_OK || !doc || n + len + 1 > cap) break;
        memcpy(text + n, doc, len);
        n += len;
        text[n++] = '\n';
    }
    if (s != LLMT_OK) {
        int rc = cli_fail_status(CMD, s, llmt_ingest_last_error(it));
        free(text);
        llmt_ingest_destroy(it);
        return rc;
    }
    llmt_ingest_destroy(it);
    if (n == 0) {
        free(text);
        return cli_fail(CMD, "corpus %s is empty: no data to train on", corpus);
    }
    s = llmt_tokenizer_train_bpe(d->ctx, text, n, o->tok_vocab, &d->tok);
    free(text);
    if (s != LLMT_OK) return cli_fail_status(CMD, s, llmt_context_last_error(d->ctx));
    llmt_tokenizer_vocab_size(d->tok, &d->vocab);
    llmt_tokenizer_eot(d->tok, &d->eot);
    return 0;
}

/* Text corpus -> OUT/data (once; a resumed run reuses it). */
static int prepare_text(train_data *d, const char *corpus, const td_opts *o,
                        char *prep, size_t cap)
{
    snprintf(prep, cap, "%s/data", o->out_dir);
    char tokfile[1300], report[1300];
    snprintf(tokfile, sizeof tokfile, "%s/tokenizer.bin", prep);
    snprintf(report, sizeof report, "%s/report.json", prep);
    if (exists(report)) { /* prepared by an earlier start of this run */
        if (!o->resume)
            return cli_fail(CMD, "%s already holds prepared data of an earlier "
                            "run: continue it with --resume, or choose another "
                            "--out", prep);
        return open_tokenizer(d, o, tokfile);
    }
    if (exists(prep))
        return cli_fail(CMD, "%s exists but holds no report.json (an "
                        "interrupted preparation?): remove it and start again",
                        prep);
    int rc;
    if ((o->tok_path && *o->tok_path) || o->tok_kind != 1)
        rc = open_tokenizer(d, o, NULL);
    else
        rc = learn_bpe(d, corpus, o);
    if (rc) return rc;

    llmt_ingest_opts io;
    llmt_ingest_opts_init(&io, sizeof io);
    io.doc_separator = "%"; /* fortune files; other text is one document */
    llmt_data_prepare_opts po;
    llmt_data_prepare_opts_init(&po, sizeof po);
    po.ingest = &io;
    po.val_fraction = 0.05;
    po.seed = o->seed;
    llmt_data_report rep;
    memset(&rep, 0, sizeof rep);
    rep.struct_size = sizeof rep;
    llmt_status s = llmt_data_prepare(d->ctx, &corpus, 1, d->tok, prep, &po, &rep);
    if (s != LLMT_OK) return cli_fail_status(CMD, s, llmt_context_last_error(d->ctx));
    int64_t removed = rep.documents - rep.verdicts[LLMT_DATA_KEEP];
    int64_t dups = rep.verdicts[LLMT_DATA_EXACT_DUP] + rep.verdicts[LLMT_DATA_NEAR_DUP];
    printf("data: prepared %s into %s: %lld documents, %lld removed (%lld by "
           "quality filters, %lld duplicates), %lld train / %lld validation "
           "documents, %.1f s\n", corpus, prep, (long long)rep.documents,
           (long long)removed, (long long)(removed - dups), (long long)dups,
           (long long)rep.train_documents, (long long)rep.val_documents,
           rep.seconds);
    return 0;
}

static int open_ds(train_data *d, const char *path, llmt_dataset **out,
                   const char *what)
{
    llmt_status s = llmt_dataset_open(d->ctx, path, 0, out);
    if (s != LLMT_OK)
        return cli_fail(CMD, "%s %s: %s", what, path, llmt_context_last_error(d->ctx));
    return 0;
}

/* Unigram entropy (nats/token) of the first 64M training tokens. */
static int unigram(train_data *d, int64_t *counted)
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
        return cli_fail(CMD, "no memory");
    }
    int64_t total = 0, limit = (int64_t)64 << 20;
    for (int32_t i = 0; i < info.shards && total < limit; i++) {
        int64_t n = 0;
        llmt_dataset_shard(d->train_ds, i, NULL, &n, NULL);
        for (int64_t off = 0; off < n && total < limit; off += (int64_t)chunk) {
            size_t k = (size_t)(n - off < (int64_t)chunk ? n - off : (int64_t)chunk);
            llmt_status s = llmt_dataset_read(d->train_ds, i, off, buf, k);
            if (s != LLMT_OK) {
                free(cnt);
                free(buf);
                return cli_fail_status(CMD, s, llmt_dataset_last_error(d->train_ds));
            }
            for (size_t t = 0; t < k; t++)
                if (buf[t] >= 0 && buf[t] < d->vocab) cnt[buf[t]]++;
            total += (int64_t)k;
        }
    }
    double H = 0;
    for (int32_t i = 0; i < d->vocab; i++)
        if (cnt[i]) {
            double q = (double)cnt[i] / (double)total;
            H -= q * log(q);
        }
    free(cnt);
    free(buf);
    d->unigram_entropy = H;
    *counted = total;
    return 0;
}

int td_open(train_data *d, llmt_context *ctx, const td_opts *o)
{
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    d->T = o->seq_len;
    d->B = o->micro;
    d->A = o->accum;
    const char *src = o->train && *o->train ? o->train : NULL;
    if (src && !strpbrk(src, "*?[") && !exists(src))
        return cli_fail(CMD, "data.train %s does not exist", src);
    if (!src && is_dir("/usr/share/games/fortunes"))
        src = "/usr/share/games/fortunes";
    else if (!src && is_dir("/usr/share/common-licenses"))
        src = "/usr/share/common-licenses";
    if (!src)
        return cli_fail(CMD, "no corpus: data.train is not set and the default "
                        "corpus (/usr/share/games/fortunes, apt package "
                        "fortunes) is not installed");

    char prep[1200], trainp[1300], valp[1300], tokfile[1300];
    const char *kind;
    if (is_shards(src)) {
        snprintf(prep, sizeof prep, "%s", src);
        kind = "token shards";
    } else {
        if (prepare_text(d, src, o, prep, sizeof prep)) return -1;
        kind = "text, prepared";
    }
    /* a prepared directory: train/, val/, tokenizer.bin */
    snprintf(trainp, sizeof trainp, "%s/train", prep);
    int prepared = is_dir(trainp);
    if (!prepared) snprintf(trainp, sizeof trainp, "%s", prep);
    if (o->val && *o->val)
        snprintf(valp, sizeof valp, "%s", o->val);
    else if (prepared)
        snprintf(valp, sizeof valp, "%s/val", prep);
    else
        return cli_fail(CMD, "data.val is not set and %s is not a prepared "
                        "directory with a val/ split: name the validation "
                        "shards in data.val", src);
    if (!d->tok) {
        snprintf(tokfile, sizeof tokfile, "%s/tokenizer.bin", prep);
        if (open_tokenizer(d, o, prepared ? tokfile : NULL)) return -1;
    }
    if (open_ds(d, trainp, &d->train_ds, "training data")) return -1;
    if (open_ds(d, valp, &d->val_ds, "validation data (data.val)")) return -1;

    llmt_dataset_info ti, vi;
    memset(&ti, 0, sizeof ti);
    ti.struct_size = sizeof ti;
    vi = ti;
    llmt_dataset_get_info(d->train_ds, &ti);
    llmt_dataset_get_info(d->val_ds, &vi);
    if (ti.vocab_size > d->vocab || vi.vocab_size > d->vocab)
        return cli_fail(CMD, "the shards were written for a vocabulary of %d "
                        "tokens, the tokenizer has %d: use the tokenizer they "
                        "were prepared with (data.tokenizer.path)",
                        (int)(ti.vocab_size > vi.vocab_size ? ti.vocab_size
                                                            : vi.vocab_size),
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
    lo.seed = o->seed;
    llmt_status s = llmt_loader_create(d->train_ds, &lo, &d->loader);
    if (s != LLMT_OK)
        return cli_fail(CMD, "training data %s: %s", trainp,
                        llmt_dataset_last_error(d->train_ds));
    int64_t spe = 0, counted = 0;
    llmt_loader_samples_per_epoch(d->loader, &spe);
    if (unigram(d, &counted)) return -1;
    snprintf(d->desc, sizeof d->desc, "%s (%s; %d train shard(s), %lld "
             "documents, %lld sequences of %d per epoch), tokenizer of %d "
             "tokens", src, kind, (int)ti.shards, (long long)ti.documents,
             (long long)spe, o->seq_len, (int)d->vocab);
    return 0;
}

int td_next(train_data *d, int32_t *in, int32_t *tg)
{
    size_t per = (size_t)d->B * d->T;
    for (int a = 0; a < d->A; a++) {
        llmt_status s = llmt_loader_next(d->loader, in + a * per, tg + a * per, NULL);
        if (s != LLMT_OK) return cli_fail_status(CMD, s, llmt_loader_last_error(d->loader));
    }
    return 0;
}

int td_val_batch(train_data *d, int32_t *in, int32_t *tg, int nmax)
{
    llmt_loader_opts lo;
    llmt_loader_opts_init(&lo, sizeof lo);
    lo.seq_len = d->T;
    lo.micro_batch = 1;
    lo.shuffle = 0;  /* the first sequences of the split, in file order */
    lo.prefetch = 0;
    llmt_loader *l = NULL;
    if (llmt_loader_create(d->val_ds, &lo, &l) != LLMT_OK) {
        cli_fail(CMD, "validation data: %s", llmt_dataset_last_error(d->val_ds));
        return 0;
    }
    int64_t spe = 0;
    llmt_loader_samples_per_epoch(l, &spe);
    int n = 0;
    for (; n < nmax && n < spe; n++)
        if (llmt_loader_next(l, in + (size_t)n * d->T, tg + (size_t)n * d->T,
                             NULL) != LLMT_OK)
            break;
    llmt_loader_destroy(l);
    return n;
}

llmt_status td_ckpt_add(const train_data *d, llmt_ckpt *ck)
{
    return llmt_loader_ckpt_add(d->loader, ck);
}

int td_ckpt_read(train_data *d, llmt_ckpt *ck)
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
        return cli_fail(CMD, "the checkpoint was written with data.seed %s, "
                        "the spec says %llu", v, (unsigned long long)now.seed);
    llmt_status s = llmt_loader_ckpt_read(d->loader, ck);
    if (s != LLMT_OK) return cli_fail_status(CMD, s, llmt_loader_last_error(d->loader));
    return 0;
}

char *td_decode(train_data *d, const int32_t *ids, size_t n)
{
    size_t len = 0;
    llmt_tokenizer_decode(d->tok, ids, n, NULL, 0, &len);
    char *b = malloc(len + 1);
    if (!b) return NULL;
    if (llmt_tokenizer_decode(d->tok, ids, n, b, len, &len) != LLMT_OK) {
        free(b);
        return NULL;
    }
    b[len] = 0;
    return b;
}

void td_free(train_data *d)
{
    llmt_loader_destroy(d->loader);
    llmt_dataset_destroy(d->train_ds);
    llmt_dataset_destroy(d->val_ds);
    llmt_tokenizer_destroy(d->tok);
    memset(d, 0, sizeof *d);
}
