/* llmtrain data: prepare a corpus into token shards, inspect shards, train
 * a byte-level BPE, write a synthetic corpus of known entropy (lib/data;
 * doc/data.md). Uses only the public ABI. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define CMD "data"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- arguments --------------------------------------------------------- */

typedef struct data_args {
    const char *sub;
    const char **pos;      /* positional arguments after the subcommand */
    int npos;
    const char *out, *tokenizer, *doc_sep, *text_field, *dedup, *filter;
    int64_t shingle, perms, bands, min_chars, max_chars, shard_tokens,
        bpe_sample_mb, vocab, sample_mb, bytes, alphabet, branching,
        ngram_min_words;
    double threshold, max_nonalpha, max_dup_lines, max_top_ngram, val_frac;
    uint64_t seed;
    int have_seed, llmc, verify, quiet;
    const char *given[64]; /* the flags given, checked against the subcommand's */
    int ngiven;
    /* which numeric options were given (the library's defaults otherwise) */
    int set_shingle, set_perms, set_bands, set_threshold, set_min, set_max, set_nonalpha,
        set_duplines, set_ngram, set_ngram_words, set_val, set_shard, bpe_sample_mb_set;
} data_args;

static int bad_value(const char *flag, const char *v, const char *want)
{
    fprintf(stderr, "llmtrain data: %s needs %s, got '%s'\n", flag, want,
            v ? v : "(nothing)");
    return CLI_USAGE;
}

/* Options that take a string value. */
static const char **str_opt(data_args *a, const char *s)
{
    if (!strcmp(s, "--out") || !strcmp(s, "-o")) return &a->out;
    if (!strcmp(s, "--tokenizer")) return &a->tokenizer;
    if (!strcmp(s, "--doc-sep")) return &a->doc_sep;
    if (!strcmp(s, "--text-field")) return &a->text_field;
    if (!strcmp(s, "--dedup")) return &a->dedup;
    if (!strcmp(s, "--filter")) return &a->filter;
    return NULL;
}

static int parse_num_opt(data_args *a, const char *s, const char *v, int *used)
{
    const int64_t BIG = INT64_C(1) << 50;
    int64_t seed = 0;
    int rc = CLI_OK;
    *used = 1;
    if (!strcmp(s, "--shingle"))
        rc = cli_parse_i64(s, v, 1, 1 << 16, &a->shingle), a->set_shingle = 1;
    else if (!strcmp(s, "--permutations"))
        rc = cli_parse_i64(s, v, 1, 1 << 16, &a->perms), a->set_perms = 1;
    else if (!strcmp(s, "--bands"))
        rc = cli_parse_i64(s, v, 1, 1 << 16, &a->bands), a->set_bands = 1;
    else if (!strcmp(s, "--threshold"))
        rc = cli_parse_f64(s, v, 0, 1, &a->threshold), a->set_threshold = 1;
    else if (!strcmp(s, "--min-chars"))
        rc = cli_parse_i64(s, v, 0, BIG, &a->min_chars), a->set_min = 1;
    else if (!strcmp(s, "--max-chars"))
        rc = cli_parse_i64(s, v, 0, BIG, &a->max_chars), a->set_max = 1;
    else if (!strcmp(s, "--max-nonalpha"))
        rc = cli_parse_f64(s, v, 0, 1, &a->max_nonalpha), a->set_nonalpha = 1;
    else if (!strcmp(s, "--max-dup-lines"))
        rc = cli_parse_f64(s, v, 0, 1, &a->max_dup_lines), a->set_duplines = 1;
    else if (!strcmp(s, "--max-top-ngram"))
        rc = cli_parse_f64(s, v, 0, 1, &a->max_top_ngram), a->set_ngram = 1;
    else if (!strcmp(s, "--ngram-min-words"))
        rc = cli_parse_i64(s, v, 0, BIG, &a->ngram_min_words), a->set_ngram_words = 1;
    else if (!strcmp(s, "--val-frac"))
        rc = cli_parse_f64(s, v, 0, 1, &a->val_frac), a->set_val = 1;
    else if (!strcmp(s, "--shard-tokens"))
        rc = cli_parse_i64(s, v, 1, BIG, &a->shard_tokens), a->set_shard = 1;
    else if (!strcmp(s, "--bpe-sample-mb"))
        rc = cli_parse_i64(s, v, 1, 1 << 20, &a->bpe_sample_mb), a->bpe_sample_mb_set = 1;
    else if (!strcmp(s, "--sample-mb"))
        rc = cli_parse_i64(s, v, 1, 1 << 20, &a->sample_mb);
    else if (!strcmp(s, "--vocab"))
        rc = cli_parse_i64(s, v, 257, 1 << 24, &a->vocab);
    else if (!strcmp(s, "--bytes"))
        rc = cli_parse_i64(s, v, 1, BIG, &a->bytes);
    else if (!strcmp(s, "--alphabet"))
        rc = cli_parse_i64(s, v, 2, 27, &a->alphabet);
    else if (!strcmp(s, "--branching"))
        rc = cli_parse_i64(s, v, 1, 27, &a->branching);
    else if (!strcmp(s, "--seed")) {
        rc = cli_parse_i64(s, v, 0, INT64_MAX, &seed);
        a->seed = (uint64_t)seed;
        a->have_seed = 1;
    } else
        *used = 0;
    return rc;
}

static int check_sub_flags(const data_args *a);

/* A value option given a second time (-o and --out are one) would
 * silently replace the first: refused, as is a list of options longer
 * than `given` holds (the rest would escape check_sub_flags). */
static int note_flag(data_args *a, const char *s)
{
    int sw = !strcmp(s, "--llmc") || !strcmp(s, "--verify") || !strcmp(s, "--quiet") ||
             !strcmp(s, "-q");
    const char *c = !strcmp(s, "-o") ? "--out" : s;
    for (int k = 0; k < a->ngiven && !sw; k++)
        if (!strcmp(!strcmp(a->given[k], "-o") ? "--out" : a->given[k], c)) {
            fprintf(stderr,
                    "llmtrain data: %s given twice (the second value would replace "
                    "the first); give it once\n",
                    s);
            return CLI_USAGE;
        }
    if (a->ngiven == (int)(sizeof a->given / sizeof a->given[0])) {
        fprintf(stderr, "llmtrain data: more than %d options\n", a->ngiven);
        return CLI_USAGE;
    }
    a->given[a->ngiven++] = s;
    return CLI_OK;
}

static int parse_args(int argc, char **argv, data_args *a)
{
    memset(a, 0, sizeof *a);
    a->bpe_sample_mb = 32;
    a->sample_mb = 64;
    a->alphabet = 8;
    a->branching = 3;
    a->pos = calloc((size_t)argc + 1, sizeof *a->pos);
    if (!a->pos)
        return cli_fail(CMD, "out of memory");
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **sp = str_opt(a, s);
        int used = 0, rc;
        if (s[0] == '-' && s[1] && (rc = note_flag(a, s)) != CLI_OK)
            return rc;
        if (sp) {
            if (!v)
                return bad_value(s, v, "a value");
            *sp = v;
            i++;
            continue;
        }
        if ((rc = parse_num_opt(a, s, v, &used)) != CLI_OK)
            return rc;
        if (used) {
            i++;
            continue;
        }
        if (!strcmp(s, "--llmc"))
            a->llmc = 1;
        else if (!strcmp(s, "--verify"))
            a->verify = 1;
        else if (!strcmp(s, "--quiet") || !strcmp(s, "-q"))
            a->quiet = 1;
        else if (s[0] == '-' && s[1]) {
            fprintf(stderr, "llmtrain data: unknown option '%s' (llmtrain "
                            "data --help)\n", s);
            return CLI_USAGE;
        } else if (!a->sub)
            a->sub = s;
        else
            a->pos[a->npos++] = s;
    }
    if (!a->sub) {
        fprintf(stderr, "llmtrain data: needs a subcommand: prepare, stats, "
                        "train-bpe or synth (llmtrain data --help)\n");
        return CLI_USAGE;
    }
    return check_sub_flags(a);
}

/* Every option is parsed for every subcommand, so one a subcommand does not
 * read (stats --out, synth --vocab, train-bpe --llmc) would be accepted and
 * ignored: each subcommand lists its own, the rest are refused by name. */
static const char *sub_flags(const char *sub)
{
    if (!strcmp(sub, "prepare"))
        return " --out -o --tokenizer --doc-sep --text-field --dedup --filter --shingle"
               " --permutations --bands --threshold --min-chars --max-chars --max-nonalpha"
               " --max-dup-lines --max-top-ngram --ngram-min-words --val-frac --shard-tokens"
               " --bpe-sample-mb --llmc --seed --quiet -q ";
    if (!strcmp(sub, "stats"))
        return " --verify ";
    if (!strcmp(sub, "train-bpe"))
        return " --out -o --vocab --doc-sep --text-field --sample-mb ";
    if (!strcmp(sub, "synth"))
        return " --out -o --bytes --alphabet --branching --seed ";
    return NULL;
}

static int check_sub_flags(const data_args *a)
{
    const char *allowed = sub_flags(a->sub);
    if (!allowed)
        return CLI_OK; /* the unknown subcommand is reported by cmd_data */
    for (int k = 0; k < a->ngiven; k++) {
        char key[64];
        snprintf(key, sizeof key, " %s ", a->given[k]);
        if (!strstr(allowed, key)) {
            fprintf(stderr, "llmtrain data %s: %s does not apply to %s (its options:%.*s)\n",
                    a->sub, a->given[k], a->sub, (int)strlen(allowed) - 1, allowed);
            return CLI_USAGE;
        }
    }
    if (!strcmp(a->sub, "synth") && a->npos > 0) {
        fprintf(stderr,
                "llmtrain data synth: takes no INPUT, got '%s' (--out FILE is "
                "what it writes)\n",
                a->pos[0]);
        return CLI_USAGE;
    }
    int64_t vocab = 0; /* a bad bpe:N is a usage error, found before any work */
    if (a->tokenizer && !strncmp(a->tokenizer, "bpe:", 4) &&
        cli_parse_i64("--tokenizer bpe:N", a->tokenizer + 4, 257, 1 << 24, &vocab) != CLI_OK)
        return CLI_USAGE;
    if (!strcmp(a->sub, "prepare") && a->bpe_sample_mb_set &&
        !(a->tokenizer && !strncmp(a->tokenizer, "bpe:", 4))) {
        fprintf(stderr, "llmtrain data prepare: --bpe-sample-mb sizes the sample a BPE is "
                        "learned from: it needs --tokenizer bpe:N\n");
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* ---- a context whose log lines do not run into the progress bar -------- */

static int bar_shown; /* a progress line without its newline is on stderr */

static void log_sink(void *user, llmt_log_level level, const char *module,
                     const char *msg)
{
    (void)user;
    static const char *const names[] = {"trace", "debug", "info", "warn",
                                        "error", "off"};
    if (bar_shown) {
        fputs("\r\033[K", stderr);
        bar_shown = 0;
    }
    fprintf(stderr, "[%s] %s: %s\n", names[level >= 0 && level <= 5 ? level : 5],
            module, msg);
}

static llmt_context *make_ctx(void)
{
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_fn = log_sink;
    llmt_context *ctx = NULL;
    if (llmt_context_create(&co, &ctx) != LLMT_OK) {
        cli_fail(CMD, "cannot create a library context");
        return NULL;
    }
    return ctx;
}

/* ---- progress ---------------------------------------------------------- */

typedef struct progress {
    double t0, last;
    int64_t drawn; /* bytes_done of the last redraw */
} progress;

static void fmt_dur(char *b, size_t cap, double s)
{
    if (!(s >= 0) || !isfinite(s))
        s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(b, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(b, cap, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(b, cap, "%lds", t);
}

/* Redrawn at most ten times a second, and once at the end. */
static void on_progress(void *user, int64_t done, int64_t total, int64_t docs)
{
    progress *p = user;
    double t = now_s();
    int end = total > 0 && done >= total;
    if ((!end && t - p->last < 0.1) || (end && p->drawn == done))
        return;
    p->last = t;
    p->drawn = done;
    double frac = total > 0 ? (double)done / (double)total : 0;
    if (frac > 1)
        frac = 1;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    double el = t - p->t0, rate = el > 0 ? (double)done / el : 0;
    char eta[32] = "--"; /* the first fraction of a second says nothing */
    if (el >= 0.5 && rate > 0)
        fmt_dur(eta, sizeof eta, (double)(total - done) / rate);
    fprintf(stderr, "\r\033[K[%s] %5.1f%% %.1f/%.1f MB  %lld docs  %.1f MB/s  "
                    "ETA %s", bar, 100 * frac, done / 1e6, total / 1e6,
            (long long)docs, rate / 1e6, eta);
    fflush(stderr);
    bar_shown = 1;
}

static void bar_done(void)
{
    if (bar_shown)
        fputc('\n', stderr);
    bar_shown = 0;
}

/* ---- tokenizers -------------------------------------------------------- */

/* The inputs' kinds as the ingest reads them (lib/data/ingest.c): JSONL
 * by a .jsonl/.ndjson name, text otherwise; a named path followed, a
 * directory walked without its hidden entries and links. */
static void count_kinds(const char *path, int named, int *jsonl, int *text)
{
    struct stat sb;
    if ((named ? stat(path, &sb) : lstat(path, &sb)) != 0)
        return; /* the ingest names it */
    if (S_ISREG(sb.st_mode)) {
        size_t n = strlen(path);
        int j = (n >= 6 && !strcmp(path + n - 6, ".jsonl")) ||
                (n >= 7 && !strcmp(path + n - 7, ".ndjson"));
        ++*(j ? jsonl : text);
        return;
    }
    DIR *d = S_ISDIR(sb.st_mode) ? opendir(path) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d)) && !(*jsonl && *text)) {
        char p[4096];
        if (e->d_name[0] != '.' && snprintf(p, sizeof p, "%s/%s", path, e->d_name) < 4096)
            count_kinds(p, 0, jsonl, text);
    }
    if (d)
        closedir(d);
}

/* --text-field names the field of a JSONL record and --doc-sep the line
 * between the documents of a text file: with no input of that kind the
 * flag would be accepted and read by nothing. */
static int kinds_read_flags(const data_args *a)
{
    int jsonl = 0, text = 0;
    if (!a->text_field && !a->doc_sep)
        return CLI_OK;
    for (int i = 0; i < a->npos && !(jsonl && text); i++)
        count_kinds(a->pos[i], 1, &jsonl, &text);
    const char *flag = a->text_field && !jsonl ? "--text-field"
                       : a->doc_sep && !text   ? "--doc-sep"
                                               : NULL;
    if (!flag)
        return CLI_OK;
    fprintf(stderr,
            "llmtrain data %s: %s applies to %s, and the inputs hold none (JSONL is read "
            "from *.jsonl and *.ndjson files, text from the others); leave it out\n",
            a->sub, flag, flag[2] == 't' ? "JSONL files" : "text files");
    return CLI_USAGE;
}

static void ingest_opts_from(const data_args *a, llmt_ingest_opts *io)
{
    llmt_ingest_opts_init(io, sizeof *io);
    if (a->text_field)
        io->text_field = a->text_field;
    if (a->doc_sep)
        io->doc_separator = a->doc_sep;
}

/* The first `max` bytes of the ingested corpus, documents joined by blank
 * lines (the BPE trainer sees no pair across two documents' words). */
static char *sample_corpus(llmt_context *ctx, const data_args *a, size_t max,
                           size_t *len)
{
    llmt_ingest_opts io;
    ingest_opts_from(a, &io);
    llmt_ingest *it = NULL;
    llmt_status s = llmt_ingest_open(ctx, a->pos, (size_t)a->npos, &io, &it);
    if (s != LLMT_OK) {
        cli_fail_status(CMD, s, llmt_context_last_error(ctx));
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    while (buf && n < max) {
        const char *t = NULL;
        size_t tl = 0;
        if ((s = llmt_ingest_next(it, &t, &tl)) != LLMT_OK) {
            cli_fail_status(CMD, s, llmt_ingest_last_error(it));
            free(buf);
            buf = NULL;
            break;
        }
        if (!t)
            break;
        if (tl > max - n)
            tl = max - n;
        if (n + tl + 3 > cap) {
            while (n + tl + 3 > cap)
                cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                buf = NULL;
                cli_fail(CMD, "out of memory for the BPE sample");
                break;
            }
            buf = nb;
        }
        if (n) {
            memcpy(buf + n, "\n\n", 2);
            n += 2;
        }
        memcpy(buf + n, t, tl);
        n += tl;
    }
    llmt_ingest_destroy(it);
    if (buf && n == 0) {
        free(buf);
        cli_fail(CMD, "the inputs hold no text to learn a BPE from");
        return NULL;
    }
    *len = n;
    return buf;
}

static llmt_tokenizer *train_bpe(llmt_context *ctx, const data_args *a,
                                 int32_t vocab, int64_t sample_mb,
                                 double *secs, size_t *sample_len,
                                 int64_t *sample_tokens)
{
    size_t len = 0;
    char *text = sample_corpus(ctx, a, (size_t)sample_mb << 20, &len);
    if (!text)
        return NULL;
    double t0 = now_s();
    llmt_tokenizer *tok = NULL;
    llmt_status s = llmt_tokenizer_train_bpe(ctx, text, len, vocab, &tok);
    *secs = now_s() - t0;
    if (s != LLMT_OK) {
        cli_fail_status(CMD, s, llmt_context_last_error(ctx));
        free(text);
        return NULL;
    }
    size_t cnt = 0;
    s = llmt_tokenizer_encode(tok, text, len, NULL, 0, &cnt);
    *sample_len = len;
    *sample_tokens = s == LLMT_OK || s == LLMT_ERR_BUFFER_TOO_SMALL
                         ? (int64_t)cnt : -1;
    free(text);
    return tok;
}

/* bytes | gpt2:DIR | bpe:N | FILE (ours). */
static llmt_tokenizer *open_tokenizer(llmt_context *ctx, const data_args *a)
{
    const char *t = a->tokenizer ? a->tokenizer : "bytes";
    llmt_tokenizer *tok = NULL;
    llmt_status s;
    if (!strcmp(t, "bytes"))
        s = llmt_tokenizer_create_bytes(ctx, &tok);
    else if (!strncmp(t, "gpt2:", 5)) {
        char enc[4200], bpe[4200];
        snprintf(enc, sizeof enc, "%s/encoder.json", t + 5);
        snprintf(bpe, sizeof bpe, "%s/vocab.bpe", t + 5);
        s = llmt_tokenizer_load_gpt2(ctx, enc, bpe, &tok);
    } else if (!strncmp(t, "bpe:", 4)) {
        int64_t v = 0;
        if (cli_parse_i64("--tokenizer bpe:N", t + 4, 257, 1 << 24, &v) != CLI_OK)
            return NULL;
        double secs = 0;
        size_t len = 0;
        int64_t nt = 0;
        tok = train_bpe(ctx, a, (int32_t)v, a->bpe_sample_mb, &secs, &len, &nt);
        if (tok && !a->quiet)
            fprintf(stderr, "llmtrain data: BPE of %d tokens learned from "
                            "%.1f MB in %.1f s (%.2f bytes/token)\n",
                    (int)v, len / 1e6, secs,
                    nt > 0 ? (double)len / (double)nt : 0.0);
        return tok;
    } else
        s = llmt_tokenizer_load(ctx, t, &tok);
    if (s != LLMT_OK) {
        cli_fail(CMD, "tokenizer '%s': %s (%s)", t, llmt_context_last_error(ctx),
                 llmt_status_string(s));
        return NULL;
    }
    return tok;
}

/* ---- prepare ----------------------------------------------------------- */

static int dedup_from(const data_args *a, llmt_dedup_opts *dd, int *none)
{
    llmt_dedup_opts_init(dd, sizeof *dd);
    *none = 0;
    const char *m = a->dedup ? a->dedup : "exact,near";
    if (!strcmp(m, "none"))
        *none = 1;
    else if (!strcmp(m, "exact"))
        dd->near = 0;
    else if (!strcmp(m, "near"))
        dd->exact = 0;
    else if (strcmp(m, "exact,near") && strcmp(m, "near,exact"))
        return bad_value("--dedup", m, "exact,near, exact, near or none");
    if ((*none || !dd->near) &&
        (a->set_shingle || a->set_perms || a->set_bands || a->set_threshold)) {
        fprintf(stderr,
                "llmtrain data: --shingle, --permutations, --bands and --threshold "
                "tune the near-duplicate pass, which --dedup %s turns off\n",
                m);
        return CLI_USAGE;
    }
    if (a->set_shingle) dd->shingle = (int32_t)a->shingle;
    if (a->set_perms) dd->permutations = (int32_t)a->perms;
    if (a->set_bands) dd->bands = (int32_t)a->bands;
    if (a->set_threshold) dd->threshold = a->threshold;
    return CLI_OK;
}

static int filter_from(const data_args *a, llmt_data_filter_opts *fo, int *none)
{
    llmt_data_filter_opts_init(fo, sizeof *fo);
    *none = 0;
    if (a->filter) {
        if (strcmp(a->filter, "none"))
            return bad_value("--filter", a->filter, "'none' (set thresholds "
                             "with --min-chars and the like)");
        if (a->set_min || a->set_max || a->set_nonalpha || a->set_duplines ||
            a->set_ngram || a->set_ngram_words) {
            fprintf(stderr, "llmtrain data: --filter none and a filter "
                            "threshold contradict each other\n");
            return CLI_USAGE;
        }
        *none = 1;
    }
    if (a->set_min) fo->min_chars = a->min_chars;
    if (a->set_max) fo->max_chars = a->max_chars;
    if (a->set_nonalpha) fo->max_nonalpha_frac = a->max_nonalpha;
    if (a->set_duplines) fo->max_dup_line_frac = a->max_dup_lines;
    if (a->set_ngram) fo->max_top_ngram_frac = a->max_top_ngram;
    if (a->set_ngram_words) fo->ngram_min_words = a->ngram_min_words;
    return CLI_OK;
}

static void print_report(const llmt_data_report *r, const char *out)
{
    printf("%-28s %14lld\n", "files", (long long)r->files);
    printf("%-28s %14.1f MB\n", "input", r->bytes / 1e6);
    printf("%-28s %14lld\n", "documents read", (long long)r->documents);
    for (int v = 1; v < LLMT_DATA_VERDICTS; v++) {
        char label[64];
        snprintf(label, sizeof label, "  removed: %s", llmt_data_verdict_name(v));
        printf("%-28s %14lld\n", label, (long long)r->verdicts[v]);
    }
    printf("%-28s %14lld\n", "documents kept", (long long)r->verdicts[0]);
    printf("%-28s %14lld / %lld\n", "documents train / val",
           (long long)r->train_documents, (long long)r->val_documents);
    printf("%-28s %14lld / %lld\n", "tokens train / val",
           (long long)r->train_tokens, (long long)r->val_tokens);
    printf("%-28s %14d / %d\n", "shards train / val", (int)r->train_shards,
           (int)r->val_shards);
    printf("%-28s %14lld\n", "invalid UTF-8 replaced", (long long)r->invalid_utf8);
    printf("%-28s %14lld\n", "bad JSONL lines", (long long)r->bad_lines);
    printf("%-28s %14.2f s (%.1f MB/s)\n", "time", r->seconds,
           r->seconds > 0 ? r->bytes / 1e6 / r->seconds : 0.0);
    printf("wrote %s/train, %s/val, %s/tokenizer.bin, %s/report.json\n", out,
           out, out, out);
}

static int cmd_prepare(llmt_context *ctx, const data_args *a)
{
    if (a->npos < 1 || !a->out) {
        fprintf(stderr, "llmtrain data prepare: needs INPUT... and --out DIR "
                        "(llmtrain data --help)\n");
        return CLI_USAGE;
    }
    if (kinds_read_flags(a) != CLI_OK)
        return CLI_USAGE;
    llmt_ingest_opts io;
    llmt_data_filter_opts fo;
    llmt_dedup_opts dd;
    int no_filter = 0, no_dedup = 0, rc;
    ingest_opts_from(a, &io);
    if ((rc = dedup_from(a, &dd, &no_dedup)) != CLI_OK ||
        (rc = filter_from(a, &fo, &no_filter)) != CLI_OK)
        return rc;
    llmt_data_prepare_opts po;
    llmt_data_prepare_opts_init(&po, sizeof po);
    po.ingest = &io;
    po.filter = &fo;
    po.dedup = &dd;
    po.no_filter = no_filter;
    po.no_dedup = no_dedup;
    po.llmc_format = a->llmc;
    if (a->set_shard) po.shard_tokens = a->shard_tokens;
    if (a->set_val) po.val_fraction = a->val_frac;
    if (a->have_seed) po.seed = a->seed;
    progress pr = {now_s(), 0, -1};
    if (!a->quiet && isatty(STDERR_FILENO)) {
        po.progress = on_progress;
        po.progress_user = &pr;
    }
    llmt_tokenizer *tok = open_tokenizer(ctx, a);
    if (!tok)
        return CLI_FAILED;
    llmt_data_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    llmt_status s = llmt_data_prepare(ctx, a->pos, (size_t)a->npos, tok, a->out,
                                      &po, &r);
    bar_done();
    llmt_tokenizer_destroy(tok);
    if (s != LLMT_OK) {
        if (r.documents)
            fprintf(stderr, "llmtrain data prepare: stopped after %lld "
                            "documents\n", (long long)r.documents);
        return cli_fail_status(CMD, s, llmt_context_last_error(ctx));
    }
    if (!a->quiet)
        print_report(&r, a->out);
    if (r.val_documents == 0 && po.val_fraction > 0)
        fprintf(stderr, "llmtrain data prepare: note: no document went to "
                        "validation (raise --val-frac)\n");
    return CLI_OK;
}

/* ---- stats ------------------------------------------------------------- */

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 14, n = 0, k;
    char *b = malloc(cap + 1);
    while (b && (k = fread(b + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b)
        b[n] = 0;
    return b;
}

/* The number after "key": in report.json (keys looked up are unique in it);
 * -1 when absent. */
static double json_num(const char *j, const char *key)
{
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(j, pat);
    if (!p)
        return -1;
    char *end = NULL;
    double v = strtod(p + strlen(pat), &end);
    return end == p + strlen(pat) ? -1 : v;
}

static void print_report_json(const char *dir)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/report.json", dir);
    char *j = slurp(p);
    if (!j) {
        printf("report.json: absent\n");
        return;
    }
    printf("report (%s):\n", p);
    printf("  %-26s %14.0f\n", "files", json_num(j, "files"));
    printf("  %-26s %14.1f MB\n", "input", json_num(j, "bytes") / 1e6);
    printf("  %-26s %14.0f\n", "documents read", json_num(j, "documents"));
    for (int v = 1; v < LLMT_DATA_VERDICTS; v++) {
        char label[64];
        snprintf(label, sizeof label, "  removed: %s", llmt_data_verdict_name(v));
        printf("  %-26s %14.0f\n", label, json_num(j, llmt_data_verdict_name(v)));
    }
    printf("  %-26s %14.0f\n", "documents kept", json_num(j, "kept"));
    printf("  %-26s %14.0f\n", "invalid UTF-8 replaced", json_num(j, "invalid_utf8"));
    printf("  %-26s %14.0f\n", "bad JSONL lines", json_num(j, "bad_lines"));
    printf("  %-26s %14.2f s\n", "time", json_num(j, "seconds"));
    free(j);
}

static int stats_one(llmt_context *ctx, const char *path, const char *label,
                     int verify)
{
    llmt_dataset *ds = NULL;
    llmt_status s = llmt_dataset_open(ctx, path, verify, &ds);
    if (s != LLMT_OK)
        return cli_fail_status(CMD, s, llmt_context_last_error(ctx));
    llmt_dataset_info in;
    memset(&in, 0, sizeof in);
    in.struct_size = sizeof in;
    llmt_dataset_get_info(ds, &in);
    printf("%s: %s\n", label, path);
    printf("  %-26s %14d\n", "shards", (int)in.shards);
    printf("  %-26s %14lld\n", "tokens", (long long)in.tokens);
    printf("  %-26s %14lld\n", "documents", (long long)in.documents);
    if (in.vocab_size > 0)
        printf("  %-26s %14d\n", "vocab", (int)in.vocab_size);
    else
        printf("  %-26s %14s\n", "vocab", "(llm.c files)");
    printf("  %-26s %14s\n", "dtype",
           in.vocab_size > 65536 ? "uint32" : "uint16");
    printf("  %-26s %14.1f\n", "tokens per document",
           in.documents ? (double)in.tokens / (double)in.documents : 0.0);
    char fp[20];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)in.fingerprint);
    printf("  %-26s %16s\n", "fingerprint", fp);
    if (verify)
        printf("  %-26s %14s\n", "checksums", "ok");
    for (int32_t i = 0; i < in.shards; i++) {
        const char *sp = NULL;
        int64_t t = 0, d = 0;
        if (llmt_dataset_shard(ds, i, &sp, &t, &d) == LLMT_OK)
            printf("    %s  %lld tokens, %lld documents\n", sp, (long long)t,
                   (long long)d);
    }
    llmt_dataset_destroy(ds);
    return CLI_OK;
}

/* Whether a split of a prepared directory holds no shard file: `prepare
 * --val-frac 1` leaves train/ so, --val-frac 0 val/. stats said "dataset:
 * directory .../train has no *.tok or *.bin files" and exited 1 on what
 * prepare had written. */
static int split_empty(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int empty = d != NULL;
    while (empty && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        empty = e->d_name[0] == '.' || n <= 4 ||
                (strcmp(e->d_name + n - 4, ".tok") && strcmp(e->d_name + n - 4, ".bin"));
    }
    if (d)
        closedir(d);
    return empty;
}

static int stats_split(llmt_context *ctx, const char *dir, const char *label, int verify)
{
    if (!split_empty(dir))
        return stats_one(ctx, dir, label, verify);
    printf("%s: %s\n  %-26s %14s\n", label, dir, "shards",
           strcmp(label, "train") ? "0 (no validation split)" : "0 (validation only)");
    return CLI_OK;
}

static int cmd_stats(llmt_context *ctx, const data_args *a)
{
    if (a->npos < 1) {
        fprintf(stderr, "llmtrain data stats: needs a PATH (llmtrain data "
                        "--help)\n");
        return CLI_USAGE;
    }
    int rc = CLI_OK;
    for (int i = 0; i < a->npos; i++) {
        const char *p = a->pos[i];
        char tr[4200], va[4200];
        snprintf(tr, sizeof tr, "%s/train", p);
        snprintf(va, sizeof va, "%s/val", p);
        if (is_dir(p) && is_dir(tr)) { /* a prepared directory */
            if (stats_split(ctx, tr, "train", a->verify) != CLI_OK)
                rc = CLI_FAILED;
            if (is_dir(va) && stats_split(ctx, va, "val", a->verify) != CLI_OK)
                rc = CLI_FAILED;
            print_report_json(p);
        } else if (stats_one(ctx, p, "shards", a->verify) != CLI_OK)
            rc = CLI_FAILED;
    }
    return rc;
}

/* ---- train-bpe --------------------------------------------------------- */

static int cmd_train_bpe(llmt_context *ctx, const data_args *a)
{
    if (a->npos < 1 || !a->out || !a->vocab) {
        fprintf(stderr, "llmtrain data train-bpe: needs INPUT..., --vocab N "
                        "and --out FILE (llmtrain data --help)\n");
        return CLI_USAGE;
    }
    if (kinds_read_flags(a) != CLI_OK)
        return CLI_USAGE;
    double secs = 0;
    size_t len = 0;
    int64_t nt = 0;
    llmt_tokenizer *tok = train_bpe(ctx, a, (int32_t)a->vocab, a->sample_mb,
                                    &secs, &len, &nt);
    if (!tok)
        return CLI_FAILED;
    int32_t v = 0;
    llmt_tokenizer_vocab_size(tok, &v);
    llmt_status s = llmt_tokenizer_save(tok, a->out);
    if (s != LLMT_OK) {
        int rc = cli_fail_status(CMD, s, llmt_tokenizer_last_error(tok));
        llmt_tokenizer_destroy(tok);
        return rc;
    }
    llmt_tokenizer_destroy(tok);
    printf("vocab %d (asked %lld), learned from %zu bytes in %.2f s\n", (int)v,
           (long long)a->vocab, len, secs);
    printf("compression %.3f bytes/token (%lld tokens)\n",
           nt > 0 ? (double)len / (double)nt : 0.0, (long long)nt);
    printf("wrote %s\n", a->out);
    return CLI_OK;
}

/* ---- synth ------------------------------------------------------------- */

static int cmd_synth(const data_args *a)
{
    if (!a->out || !a->bytes) {
        fprintf(stderr, "llmtrain data synth: needs --out FILE and --bytes N "
                        "(llmtrain data --help)\n");
        return CLI_USAGE;
    }
    if (a->branching > a->alphabet) {
        fprintf(stderr, "llmtrain data synth: --branching %lld exceeds "
                        "--alphabet %lld\n", (long long)a->branching,
                (long long)a->alphabet);
        return CLI_USAGE;
    }
    char *buf = malloc((size_t)a->bytes);
    if (!buf)
        return cli_fail(CMD, "no memory for %lld bytes", (long long)a->bytes);
    double h = 0;
    llmt_status s = llmt_data_synth_markov(a->have_seed ? a->seed : 1,
                                           (int32_t)a->alphabet,
                                           (int32_t)a->branching, buf,
                                           (size_t)a->bytes, &h);
    if (s != LLMT_OK) {
        free(buf);
        return cli_fail(CMD, "synth: %s (alphabet %lld, branching %lld)",
                        llmt_status_string(s), (long long)a->alphabet,
                        (long long)a->branching);
    }
    /* The unigram entropy of the text itself: what a model without context
     * would reach; the gap to the entropy rate is what context buys. */
    int64_t cnt[256] = {0};
    for (int64_t i = 0; i < a->bytes; i++)
        cnt[(unsigned char)buf[i]]++;
    double hu = 0;
    for (int c = 0; c < 256; c++)
        if (cnt[c]) {
            double p = (double)cnt[c] / (double)a->bytes;
            hu -= p * log(p);
        }
    FILE *f = fopen(a->out, "wb");
    int ok = f && fwrite(buf, 1, (size_t)a->bytes, f) == (size_t)a->bytes;
    if (f && fclose(f) != 0)
        ok = 0;
    free(buf);
    if (!ok)
        return cli_fail(CMD, "write %s: %s", a->out, strerror(errno));
    printf("wrote %lld bytes to %s (alphabet %lld, branching %lld, seed %llu)\n",
           (long long)a->bytes, a->out, (long long)a->alphabet,
           (long long)a->branching,
           (unsigned long long)(a->have_seed ? a->seed : 1));
    printf("entropy rate %.6f nats/char (%.6f bits/char)\n", h, h / log(2.0));
    printf("unigram entropy of the text %.6f nats/char (%.6f bits/char)\n", hu,
           hu / log(2.0));
    return CLI_OK;
}

int cmd_data(int argc, char **argv)
{
    data_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_OK) {
        free(a.pos);
        return rc;
    }
    if (!strcmp(a.sub, "synth")) {
        rc = cmd_synth(&a);
        free(a.pos);
        return rc;
    }
    llmt_context *ctx = make_ctx();
    if (!ctx) {
        free(a.pos);
        return CLI_FAILED;
    }
    if (!strcmp(a.sub, "prepare"))
        rc = cmd_prepare(ctx, &a);
    else if (!strcmp(a.sub, "stats"))
        rc = cmd_stats(ctx, &a);
    else if (!strcmp(a.sub, "train-bpe"))
        rc = cmd_train_bpe(ctx, &a);
    else {
        fprintf(stderr, "llmtrain data: unknown subcommand '%s' (prepare, "
                        "stats, train-bpe, synth)\n", a.sub);
        rc = CLI_USAGE;
    }
    llmt_context_destroy(ctx);
    free(a.pos);
    return rc;
}
