/* Tokenizer speed: GPT-2 BPE encode (cold: fresh handle, empty word cache;
 * warm: cache filled), decode, load; the BPE trainer (4096 vocab) and its
 * encoder; the byte tokenizer. Items are input bytes, so MB/s = items/s.
 * Corpus: $LLMT_TOK_CORPUS (documents separated by NUL bytes), else the
 * fortunes (/usr/share/games/fortunes, one document per fortune), else
 * /usr/share/common-licenses. GPT-2 files: $LLMT_GPT2_DIR, else
 * ../shared/data/gpt2-tokenizer beside the source tree (cases skipped when
 * absent). compare_tok.sh runs the reference Encoder.js and js-tiktoken
 * (node) on the same documents and prints the ratios. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "llmtrain.h"

typedef struct corpus {
    char *text;     /* documents back to back */
    size_t len;
    size_t *start;  /* document d: text[start[d] .. start[d+1]) */
    size_t ndocs;
} corpus;

static void add_doc(corpus *c, const char *p, size_t n, size_t *cap)
{
    if (c->ndocs + 2 > *cap) {
        *cap = *cap ? *cap * 2 : 1024;
        c->start = realloc(c->start, *cap * sizeof *c->start);
    }
    c->text = realloc(c->text, c->len + n + 1);
    memcpy(c->text + c->len, p, n);
    c->start[c->ndocs++] = c->len;
    c->len += n;
    c->start[c->ndocs] = c->len;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)l + 1);
    *n = fread(b, 1, (size_t)l, f);
    fclose(f);
    return b;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every plain file of dir (sorted), split at `sep` into documents. */
static void load_dir(corpus *c, const char *dir, const char *sep, size_t *cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char *names[512];
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nn < 512) {
        size_t l = strlen(e->d_name);
        if (e->d_name[0] == '.' || (l > 4 && (!strcmp(e->d_name + l - 4, ".dat"))) ||
            (l > 3 && !strcmp(e->d_name + l - 3, ".u8")))
            continue;
        names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof *names, cmp_str);
    for (int i = 0; i < nn; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        size_t n;
        char *b = slurp(p, &n);
        free(names[i]);
        if (!b)
            continue;
        b[n] = 0;
        size_t a = 0, sl = strlen(sep);
        while (a <= n) {
            char *q = sep[0] ? strstr(b + a, sep) : NULL;
            size_t z = q ? (size_t)(q - b) : n;
            add_doc(c, b + a, z - a, cap);
            a = z + (q ? sl : 1);
        }
        free(b);
    }
}

static corpus load_corpus(void)
{
    corpus c = {0};
    size_t cap = 0;
    const char *env = getenv("LLMT_TOK_CORPUS");
    if (env) {
        size_t n;
        char *b = slurp(env, &n);
        if (!b) {
            perror(env);
            exit(2);
        }
        size_t a = 0;
        while (a <= n) {
            char *q = memchr(b + a, 0, n - a);
            size_t z = q ? (size_t)(q - b) : n;
            add_doc(&c, b + a, z - a, &cap);
            a = z + 1;
        }
        free(b);
    } else {
        load_dir(&c, "/usr/share/games/fortunes", "\n%\n", &cap);
        if (c.len == 0)
            load_dir(&c, "/usr/share/common-licenses", "", &cap);
    }
    return c;
}

typedef struct job {
    corpus *c;
    llmt_tokenizer *tok;
    int32_t *ids;
    size_t cap, nids;
    char *out;
    const char *enc, *bpe;
} job;

static void encode_docs(void *arg)
{
    job *j = arg;
    size_t total = 0;
    for (size_t d = 0; d < j->c->ndocs; d++) {
        size_t n = 0, a = j->c->start[d];
        if (llmt_tokenizer_encode(j->tok, j->c->text + a, j->c->start[d + 1] - a, j->ids + total,
                                  j->cap - total, &n) != LLMT_OK) {
            fprintf(stderr, "encode: %s\n", llmt_tokenizer_last_error(j->tok));
            exit(1);
        }
        total += n;
    }
    j->nids = total;
}

static void decode_all(void *arg)
{
    job *j = arg;
    size_t n;
    if (llmt_tokenizer_decode(j->tok, j->ids, j->nids, j->out, j->c->len + 64, &n) != LLMT_OK) {
        fprintf(stderr, "decode: %s\n", llmt_tokenizer_last_error(j->tok));
        exit(1);
    }
}

static void load_gpt2(void *arg)
{
    job *j = arg;
    llmt_tokenizer *t = NULL;
    if (llmt_tokenizer_load_gpt2(NULL, j->enc, j->bpe, &t) != LLMT_OK)
        exit(1);
    llmt_tokenizer_destroy(t);
}

static void train4096(void *arg)
{
    job *j = arg;
    llmt_tokenizer *t = NULL;
    if (llmt_tokenizer_train_bpe(NULL, j->c->text, j->c->len, 4096, &t) != LLMT_OK)
        exit(1);
    llmt_tokenizer_destroy(j->tok);
    j->tok = t;
}

int main(int argc, char **argv)
{
    bench_ctx b;
    if (bench_init(&b, "tok", argc, argv))
        return 2;
    corpus c = load_corpus();
    if (c.len == 0) {
        fprintf(stderr, "bench_tok: no corpus\n");
        return 77;
    }
    printf("corpus: %zu documents, %zu bytes\n", c.ndocs, c.len);
    char enc[1024], bpe[1024];
    const char *gd = getenv("LLMT_GPT2_DIR"), *src = getenv("LLMT_SOURCE_ROOT");
    char gdef[900];
    snprintf(gdef, sizeof gdef, "%s/../shared/data/gpt2-tokenizer", src ? src : ".");
    snprintf(enc, sizeof enc, "%s/encoder.json", gd ? gd : gdef);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", gd ? gd : gdef);
    job j = {&c, NULL, malloc((c.len + 1) * sizeof(int32_t)), c.len + 1, 0,
             malloc(c.len + 64), enc, bpe};
    double mb = (double)c.len;
    int have_gpt2 = !access(enc, R_OK) && !access(bpe, R_OK);
    if (have_gpt2) {
        if (bench_selected(&b, "gpt2-encode-cold")) {
            double s[64];
            int n = b.repeats < 64 ? b.repeats : 64;
            for (int r = 0; r < n; r++) {
                llmt_tokenizer_load_gpt2(NULL, enc, bpe, &j.tok);
                double t0 = bench_now();
                encode_docs(&j);
                s[r] = bench_now() - t0;
                llmt_tokenizer_destroy(j.tok);
                j.tok = NULL;
            }
            bench_record(&b, "gpt2-encode-cold", s, n, mb, "bytes");
        }
        llmt_tokenizer_load_gpt2(NULL, enc, bpe, &j.tok);
        bench_run(&b, "gpt2-encode-warm", encode_docs, &j, mb, "bytes");
        encode_docs(&j);
        printf("gpt2: %zu tokens, %.3f bytes/token\n", j.nids, mb / (double)j.nids);
        bench_run(&b, "gpt2-decode", decode_all, &j, mb, "bytes");
        if (!b.quick)
            bench_run(&b, "gpt2-load", load_gpt2, &j, 1, "loads");
        llmt_tokenizer_destroy(j.tok);
        j.tok = NULL;
    } else {
        fprintf(stderr, "bench_tok: no %s: GPT-2 cases skipped\n", enc);
    }
    if (bench_selected(&b, "bpe4096-train") || bench_selected(&b, "bpe4096-encode-warm")) {
        bench_run(&b, "bpe4096-train", train4096, &j, mb, "bytes");
        if (!j.tok)
            train4096(&j);
        bench_run(&b, "bpe4096-encode-warm", encode_docs, &j, mb, "bytes");
        encode_docs(&j);
        printf("bpe4096: %zu tokens, %.3f bytes/token\n", j.nids, mb / (double)j.nids);
        llmt_tokenizer_destroy(j.tok);
        j.tok = NULL;
    }
    llmt_tokenizer_create_bytes(NULL, &j.tok);
    bench_run(&b, "bytes-encode", encode_docs, &j, mb, "bytes");
    llmt_tokenizer_destroy(j.tok);
    free(j.ids);
    free(j.out);
    free(c.text);
    free(c.start);
    return bench_finish(&b);
}
