/* Tokenizer API: bytes, GPT-2 (when the files are there), trained BPE;
 * round trips, size queries, save/load, and every bad input we can make:
 * missing/corrupt encoder.json and vocab.bpe, corrupt or truncated files of
 * ours, invalid UTF-8, ids out of range.
 * usage: test_tok [GPT2_DIR]   (default $LLMT_GPT2_DIR or ../shared/data/
 * gpt2-tokenizer beside the source tree; its part is skipped if absent) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"

static char tmpdir[256];

static char *path_in(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fwrite(data, 1, n, f);
    fclose(f);
}

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)l + 1);
    *n = fread(b, 1, (size_t)l, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

static int contains(const char *hay, const char *needle)
{
    return hay && strstr(hay, needle) != NULL;
}

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* encode -> decode gives the input back; returns the id count */
static size_t roundtrip(llmt_tokenizer *t, const char *s, size_t n)
{
    size_t need = 0, got = 0, blen = 0;
    CHECK_STATUS(llmt_tokenizer_encode(t, s, n, NULL, 0, &need), LLMT_OK);
    int32_t *ids = malloc((need + 1) * sizeof *ids);
    CHECK_STATUS(llmt_tokenizer_encode(t, s, n, ids, need, &got), LLMT_OK);
    CHECK_EQ_INT(got, need);
    char *buf = malloc(n + 1);
    CHECK_STATUS(llmt_tokenizer_decode(t, ids, got, buf, n, &blen), LLMT_OK);
    CHECK_EQ_INT(blen, n);
    CHECK(blen == n && memcmp(buf, s, n) == 0);
    free(ids);
    free(buf);
    return got;
}

static void test_bytes(void)
{
    llmt_tokenizer *t = NULL;
    CHECK_STATUS(llmt_tokenizer_create_bytes(NULL, &t), LLMT_OK);
    int32_t v = 0, eot = 0;
    CHECK_STATUS(llmt_tokenizer_vocab_size(t, &v), LLMT_OK);
    CHECK_STATUS(llmt_tokenizer_eot(t, &eot), LLMT_OK);
    CHECK_EQ_INT(v, 257);
    CHECK_EQ_INT(eot, 256);
    const char s[] = "ab\xff\x00z";
    int32_t ids[8];
    size_t n = 0;
    CHECK_STATUS(llmt_tokenizer_encode(t, s, 5, ids, 8, &n), LLMT_OK);
    CHECK_EQ_INT(n, 5);
    CHECK_EQ_INT(ids[0], 'a');
    CHECK_EQ_INT(ids[2], 255);
    CHECK_EQ_INT(ids[3], 0);
    /* too small: count needed */
    CHECK_STATUS(llmt_tokenizer_encode(t, s, 5, ids, 3, &n), LLMT_ERR_BUFFER_TOO_SMALL);
    CHECK_EQ_INT(n, 5);
    CHECK(contains(llmt_tokenizer_last_error(t), "do not fit"));
    int32_t with_eot[3] = {'x', 256, 'y'};
    char buf[64];
    size_t bl = 0;
    CHECK_STATUS(llmt_tokenizer_decode(t, with_eot, 3, buf, sizeof buf, &bl), LLMT_OK);
    CHECK(bl == 15 && !memcmp(buf, "x<|endoftext|>y", 15));
    CHECK_STATUS(llmt_tokenizer_decode(t, with_eot, 3, buf, 4, &bl), LLMT_ERR_BUFFER_TOO_SMALL);
    CHECK_EQ_INT(bl, 15);
    int32_t bad[3] = {1, 2, 257};
    CHECK_STATUS(llmt_tokenizer_decode(t, bad, 3, buf, sizeof buf, &bl),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK(contains(llmt_tokenizer_last_error(t), "id 257 at position 2"));
    bad[0] = -1;
    CHECK_STATUS(llmt_tokenizer_decode(t, bad, 1, buf, sizeof buf, &bl),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_tokenizer_encode(t, NULL, 3, ids, 8, &n), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_tokenizer_encode(t, NULL, 0, ids, 8, &n), LLMT_OK);
    CHECK_EQ_INT(n, 0);
    CHECK_STATUS(llmt_tokenizer_encode(NULL, s, 1, ids, 8, &n), LLMT_ERR_NULL_POINTER);
    /* save/load */
    CHECK_STATUS(llmt_tokenizer_save(t, path_in("bytes.tok")), LLMT_OK);
    llmt_tokenizer *u = NULL;
    CHECK_STATUS(llmt_tokenizer_load(NULL, path_in("bytes.tok"), &u), LLMT_OK);
    if (u) {
        CHECK_STATUS(llmt_tokenizer_vocab_size(u, &v), LLMT_OK);
        CHECK_EQ_INT(v, 257);
        CHECK_STATUS(llmt_tokenizer_encode(u, s, 5, ids, 8, &n), LLMT_OK);
        CHECK(n == 5 && ids[2] == 255);
    }
    llmt_tokenizer_destroy(u);
    llmt_tokenizer_destroy(t);
    llmt_tokenizer_destroy(NULL);
}

static const char *sample_text =
    "It's a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife.  However little known the feelings or views of "
    "such a man may be on his first entering a neighbourhood, this truth is so well "
    "fixed in the minds of the surrounding families, that he is considered the rightful "
    "property of some one or other of their daughters.\n\n\"My dear Mr. Bennet,\" said "
    "his lady to him one day, \"have you heard that Netherfield Park is let at last?\"\n"
    "Mr. Bennet replied that he had not. 1813, 1814, 2024 -- café naïve 日本語 😀\t\n";

static char *make_corpus(size_t *n)
{
    size_t one = strlen(sample_text), reps = 40;
    char *c = malloc(one * reps + 1);
    for (size_t i = 0; i < reps; i++)
        memcpy(c + i * one, sample_text, one);
    c[one * reps] = 0;
    *n = one * reps;
    return c;
}

static void encode_all(llmt_tokenizer *t, const char *s, size_t n, int32_t **ids, size_t *k)
{
    *k = 0;
    llmt_tokenizer_encode(t, s, n, NULL, 0, k);
    *ids = malloc((*k + 1) * sizeof **ids);
    CHECK_STATUS(llmt_tokenizer_encode(t, s, n, *ids, *k, k), LLMT_OK);
}

typedef struct th_arg {
    llmt_tokenizer *t;
    const char *s;
    size_t n;
    int32_t *ids;
    size_t k;
} th_arg;

static void *th_encode(void *p)
{
    th_arg *a = p;
    for (int r = 0; r < 3; r++) {
        free(a->ids);
        a->k = 0;
        llmt_tokenizer_encode(a->t, a->s, a->n, NULL, 0, &a->k);
        a->ids = malloc((a->k + 1) * sizeof *a->ids);
        if (llmt_tokenizer_encode(a->t, a->s, a->n, a->ids, a->k, &a->k) != LLMT_OK)
            a->k = (size_t)-1;
    }
    return NULL;
}

/* clones encode like the original, from two threads at once */
static void check_clones(llmt_tokenizer *t, const char *s, size_t n)
{
    int32_t *ref;
    size_t kr;
    encode_all(t, s, n, &ref, &kr);
    th_arg a[2] = {{NULL, s, n, NULL, 0}, {NULL, s, n, NULL, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        CHECK_STATUS(llmt_tokenizer_clone(NULL, t, &a[i].t), LLMT_OK);
        pthread_create(&th[i], NULL, th_encode, &a[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK(a[i].k == kr && !memcmp(a[i].ids, ref, kr * sizeof *ref));
        free(a[i].ids);
        llmt_tokenizer_destroy(a[i].t);
    }
    free(ref);
}

static void test_train(void)
{
    size_t n;
    char *corpus = make_corpus(&n);
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_tokenizer *t = NULL, *u = NULL;
    CHECK_STATUS(llmt_tokenizer_train_bpe(ctx, corpus, n, 256, &t), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(contains(llmt_context_last_error(ctx), "vocab_size 256"));
    CHECK_STATUS(llmt_tokenizer_train_bpe(ctx, NULL, 5, 300, &t), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_tokenizer_train_bpe(ctx, corpus, n, 400, &t), LLMT_OK);
    if (!t) {
        free(corpus);
        return;
    }
    int32_t v = 0, eot = 0;
    llmt_tokenizer_vocab_size(t, &v);
    llmt_tokenizer_eot(t, &eot);
    CHECK(v > 257 && v <= 400);
    CHECK_EQ_INT(eot, v - 1);
    size_t k = roundtrip(t, corpus, n);
    CHECK(k < n / 2); /* 140 merges on repeated text compress it */
    /* an empty corpus gives the bytes + <|endoftext|> */
    llmt_tokenizer *e = NULL;
    CHECK_STATUS(llmt_tokenizer_train_bpe(ctx, "", 0, 1000, &e), LLMT_OK);
    llmt_tokenizer_vocab_size(e, &v);
    CHECK_EQ_INT(v, 257);
    llmt_tokenizer_destroy(e);
    /* same corpus, same merges: the saved files are identical */
    CHECK_STATUS(llmt_tokenizer_train_bpe(ctx, corpus, n, 400, &u), LLMT_OK);
    CHECK_STATUS(llmt_tokenizer_save(t, path_in("a.tok")), LLMT_OK);
    CHECK_STATUS(llmt_tokenizer_save(u, path_in("b.tok")), LLMT_OK);
    size_t la, lb;
    char *fa = read_file(path_in("a.tok"), &la), *fb = read_file(path_in("b.tok"), &lb);
    CHECK(fa && fb && la == lb && !memcmp(fa, fb, la));
    free(fb);
    llmt_tokenizer_destroy(u);
    u = NULL;
    /* save/load gives the same ids */
    CHECK_STATUS(llmt_tokenizer_load(ctx, path_in("a.tok"), &u), LLMT_OK);
    if (u) {
        int32_t *i1, *i2;
        size_t k1, k2;
        encode_all(t, corpus, n, &i1, &k1);
        encode_all(u, corpus, n, &i2, &k2);
        CHECK(k1 == k2 && !memcmp(i1, i2, k1 * sizeof *i1));
        free(i1);
        free(i2);
    }
    llmt_tokenizer_destroy(u);
    u = NULL;
    check_clones(t, corpus, n);

    /* corrupt files of ours */
    struct {
        const char *name, *find, *repl, *msg;
        llmt_status want;
    } cases[] = {
        {"magic.tok", "llmtrain-tokenizer", "llmtrain-tokenizex", "bad magic", LLMT_ERR_FORMAT},
        {"version.tok", "llmtrain-tokenizer 1", "llmtrain-tokenizer 7", "version 7",
         LLMT_ERR_VERSION},
        {"kind.tok", "kind bpe", "kind xyz", "line 2", LLMT_ERR_FORMAT},
        {"hex.tok", "\n61\n", "\n6g\n", "hex", LLMT_ERR_FORMAT},
        {"merge.tok", "\nmerges ", "\nmerges 999999", "merges N", LLMT_ERR_FORMAT},
        {"end.tok", "\nend\n", "\nfin\n", "end", LLMT_ERR_FORMAT},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *p = strstr(fa, cases[c].find);
        CHECK(p != NULL);
        if (!p)
            continue;
        size_t fl = strlen(cases[c].find), rl = strlen(cases[c].repl);
        char *m = malloc(la + rl + 1);
        size_t pre = (size_t)(p - fa);
        memcpy(m, fa, pre);
        memcpy(m + pre, cases[c].repl, rl);
        memcpy(m + pre + rl, p + fl, la - pre - fl);
        write_file(path_in(cases[c].name), m, la - fl + rl);
        free(m);
        CHECK_STATUS(llmt_tokenizer_load(ctx, path_in(cases[c].name), &u), cases[c].want);
        CHECK(u == NULL);
        CHECK(contains(llmt_context_last_error(ctx), cases[c].msg));
        CHECK(contains(llmt_context_last_error(ctx), cases[c].name));
        if (!contains(llmt_context_last_error(ctx), cases[c].msg))
            fprintf(stderr, "  case %s: %s\n", cases[c].name, llmt_context_last_error(ctx));
    }
    /* a merge whose result is not left + right */
    {
        char *p = strstr(fa, "\nmerges ");
        p = p ? strchr(p + 1, '\n') : NULL;
        CHECK(p != NULL);
        if (p) {
            char *m = malloc(la + 32);
            size_t pre = (size_t)(p + 1 - fa);
            memcpy(m, fa, pre);
            int l = 0, r = 0, res = 0, rk = 0;
            sscanf(p + 1, "%d %d %d %d", &l, &r, &res, &rk);
            char *eol = strchr(p + 1, '\n');
            int w = sprintf(m + pre, "%d %d %d %d", r, l, res, rk);
            size_t rest = la - (size_t)(eol - fa);
            memcpy(m + pre + w, eol, rest);
            write_file(path_in("swap.tok"), m, pre + w + rest);
            free(m);
            CHECK_STATUS(llmt_tokenizer_load(ctx, path_in("swap.tok"), &u),
                         l == r ? LLMT_OK : LLMT_ERR_FORMAT);
            CHECK(l == r || contains(llmt_context_last_error(ctx), "is not token"));
            llmt_tokenizer_destroy(u);
            u = NULL;
        }
    }
    /* truncated at every tenth of the file */
    for (int c = 1; c < 10; c++) {
        write_file(path_in("trunc.tok"), fa, la * c / 10);
        CHECK_STATUS(llmt_tokenizer_load(ctx, path_in("trunc.tok"), &u), LLMT_ERR_FORMAT);
        CHECK(u == NULL);
    }
    CHECK(contains(llmt_context_last_error(ctx), "trunc"));
    /* random corruption: never a crash; what still loads is consistent */
    {
        int loaded = 0, refused = 0;
        char *m = malloc(la);
        for (int it = 0; it < 400; it++) {
            memcpy(m, fa, la);
            int edits = 1 + (int)(rnd() % 4);
            for (int k = 0; k < edits; k++) {
                size_t at = rnd() % la;
                m[at] = (rnd() & 1) ? "0123456789abcdef \n-x"[rnd() % 20] : (char)rnd();
            }
            write_file(path_in("fuzz.tok"), m, la);
            llmt_status st = llmt_tokenizer_load(ctx, path_in("fuzz.tok"), &u);
            if (st == LLMT_OK) {
                loaded++;
                roundtrip(u, sample_text, strlen(sample_text));
                llmt_tokenizer_destroy(u);
                u = NULL;
            } else {
                refused++;
                CHECK(u == NULL && contains(llmt_context_last_error(ctx), "fuzz.tok"));
            }
        }
        free(m);
        fprintf(stderr, "test_tok: corrupted files: %d refused, %d still valid\n", refused,
                loaded);
        CHECK(refused > 0);
    }
    CHECK_STATUS(llmt_tokenizer_load(ctx, path_in("absent.tok"), &u), LLMT_ERR_IO);
    CHECK(contains(llmt_context_last_error(ctx), "absent.tok"));
    CHECK_STATUS(llmt_tokenizer_save(t, "/nonexistent-dir/x.tok"), LLMT_ERR_IO);
    CHECK(contains(llmt_tokenizer_last_error(t), "/nonexistent-dir/x.tok"));

    /* random bytes, invalid UTF-8 included: never fails, round-trips */
    char rb[512];
    for (int it = 0; it < 300; it++) {
        size_t len = rnd() % sizeof rb;
        for (size_t i = 0; i < len; i++) {
            uint32_t r = rnd();
            rb[i] = (r & 3) ? (char)(0x80 | (r >> 8 & 0x7f)) : (char)(r >> 8);
        }
        roundtrip(t, rb, len);
    }
    /* a trained tokenizer learned on invalid UTF-8 */
    llmt_tokenizer *z = NULL;
    for (size_t i = 0; i < sizeof rb; i++)
        rb[i] = (char)(0xc0 | (rnd() % 6));
    CHECK_STATUS(llmt_tokenizer_train_bpe(ctx, rb, sizeof rb, 300, &z), LLMT_OK);
    if (z)
        roundtrip(z, rb, sizeof rb);
    llmt_tokenizer_destroy(z);
    free(fa);
    llmt_tokenizer_destroy(t);
    llmt_context_destroy(ctx);
    free(corpus);
}

/* GPT-2's bytes_to_unicode: UTF-8 of the char that stands for byte b */
static int b2u(int b, char *out)
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
    int cp = b;
    if (!printable) {
        int n = 0;
        for (int x = 0; x < b; x++) {
            int px = (x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae);
            n += !px;
        }
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

/* A tiny GPT-2 style vocabulary: 256 bytes, merges "h e" -> he, "he l"
 * -> hel, "Ġ w" -> Ġw; then <|endoftext|>. */
static void write_tiny_gpt2(const char *enc, const char *bpe, int drop_byte, int bad_json)
{
    size_t cap = 1 << 16, n = 0;
    char *j = malloc(cap);
    n += (size_t)sprintf(j, "{");
    int id = 0;
    for (int b = 0; b < 256; b++) {
        if (b == drop_byte)
            continue;
        char u[4];
        int l = b2u(b, u);
        j[n++] = '"';
        if (u[0] == '"' || u[0] == '\\')
            j[n++] = '\\';
        memcpy(j + n, u, (size_t)l);
        n += (size_t)l;
        n += (size_t)sprintf(j + n, "\": %d, ", id++);
    }
    n += (size_t)sprintf(j + n, "\"he\": %d, \"hel\": %d, \"\\u0120w\": %d, "
                                "\"<|endoftext|>\": %d}", id, id + 1, id + 2, id + 3);
    write_file(enc, j, bad_json ? n / 2 : n);
    free(j);
    const char *m = "#version: 0.2\nh e\nhe l\n\xc4\xa0 w\n";
    write_file(bpe, m, strlen(m));
}

static void test_gpt2_bad_input(void)
{
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_tokenizer *t = NULL;
    char *enc = strdup(path_in("encoder.json")), *bpe = strdup(path_in("vocab.bpe"));
    write_tiny_gpt2(enc, bpe, -1, 0);
    CHECK_STATUS(llmt_tokenizer_load_gpt2(ctx, enc, bpe, &t), LLMT_OK);
    if (t) {
        int32_t ids[16], v = 0, eot = 0;
        size_t n = 0;
        CHECK_STATUS(llmt_tokenizer_encode(t, "hello world", 11, ids, 16, &n), LLMT_OK);
        /* hel l o Ġw o r l d */
        CHECK_EQ_INT(n, 8);
        CHECK_EQ_INT(ids[0], 257);
        CHECK_EQ_INT(ids[3], 258);
        llmt_tokenizer_vocab_size(t, &v);
        llmt_tokenizer_eot(t, &eot);
        CHECK_EQ_INT(v, 260);
        CHECK_EQ_INT(eot, 259);
        /* our file keeps the GPT-2 ids */
        CHECK_STATUS(llmt_tokenizer_save(t, path_in("tiny.tok")), LLMT_OK);
        llmt_tokenizer *u = NULL;
        CHECK_STATUS(llmt_tokenizer_load(ctx, path_in("tiny.tok"), &u), LLMT_OK);
        int32_t ids2[16];
        size_t n2 = 0;
        if (u)
            CHECK_STATUS(llmt_tokenizer_encode(u, "hello world", 11, ids2, 16, &n2), LLMT_OK);
        CHECK(n2 == n && !memcmp(ids, ids2, n * sizeof *ids));
        llmt_tokenizer_destroy(u);
    }
    llmt_tokenizer_destroy(t);
    t = NULL;
    CHECK_STATUS(llmt_tokenizer_load_gpt2(ctx, path_in("nope.json"), bpe, &t), LLMT_ERR_IO);
    CHECK(contains(llmt_context_last_error(ctx), "nope.json"));
    CHECK_STATUS(llmt_tokenizer_load_gpt2(ctx, enc, path_in("nope.bpe"), &t), LLMT_ERR_IO);
    CHECK(contains(llmt_context_last_error(ctx), "nope.bpe"));
    CHECK_STATUS(llmt_tokenizer_load_gpt2(ctx, NULL, bpe, &t), LLMT_ERR_NULL_POINTER);
    /* truncated JSON */
    write_tiny_gpt2(enc, bpe, -1, 1);
    CHECK_STATUS(llmt_tokenizer_load_gpt2(ctx, enc, bpe, &t), LLMT_ERR_FORMAT);
    CHECK(contains(llmt_context_last_error(ctx), "invalid JSON"));
    CHECK(contains(llmt_context_last_error(ctx), "encoder.json"));
    /* JSON of the wrong shape */
    write_file(enc, "[1, 2]", 6);
    CHECK_STATUS(llmt_tokenizer_load_gpt2(ctx, enc, bpe, &t), LLMT_ERR_FORMAT);
    CHECK(contains(llmt_context_last_error(ctx), "JSON object"));
    write_file(enc, "{\"a\": \"x\"}", 10);
    CHECK_STATUS(llmt_tokenizer_load_gpt2(ctx, enc, bpe, &t), LLMT_ERR_FORMAT);
    CHECK(contains(llmt_context_last_error(ctx), "not an id"));
    write_file(enc, "{\"a\": 0, \"b\": 0}", 16);
    CHECK_STATUS(llmt_tokenizer_load_gpt2(ctx, enc, bpe, &t), LLMT_ERR_FORMAT);
    CHECK(contains(llmt_context_last_error(ctx), "used twice"));
    write_file(enc, "{\"\xe4\xb8\xad\": 0}", 10);
    CHECK_STATUS(llmt_tokenizer_load_gpt2(ctx, enc, bpe, &t), LLMT_ERR_FORMAT);
    CHECK(contains(llmt_context_last_error(ctx), "byte-level"));
    /* a byte without a token */
    write_tiny_gpt2(enc, bpe, 'q', 0);
    CHECK_STATUS(llmt_tokenizer_load_gpt2(ctx, enc, bpe, &t), LLMT_ERR_FORMAT);
    CHECK(contains(llmt_context_last_error(ctx), "byte 0x71"));
    /* vocab.bpe: no header, three fields, unknown token, merge not in encoder */
    write_tiny_gpt2(enc, bpe, -1, 0);
    struct {
        const char *text, *msg;
    } bad[] = {
        {"h e\n", "line 1"},
        {"#version: 0.2\nh e\nhe l x\n", "line 3: expected two tokens"},
        {"#version: 0.2\nh e\nhe zz\n", "line 3: \"zz\" is not in the encoder"},
        {"#version: 0.2\nh e\ne l\n", "line 3: the merge of \"e l\""},
        {"#version: 0.2\n\xff\xfe e\n", "line 2: not GPT-2 byte-level"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(bpe, bad[i].text, strlen(bad[i].text));
        CHECK_STATUS(llmt_tokenizer_load_gpt2(ctx, enc, bpe, &t), LLMT_ERR_FORMAT);
        CHECK(t == NULL);
        CHECK(contains(llmt_context_last_error(ctx), bad[i].msg));
        CHECK(contains(llmt_context_last_error(ctx), "vocab.bpe"));
        if (!contains(llmt_context_last_error(ctx), bad[i].msg))
            fprintf(stderr, "  vocab.bpe case %zu: %s\n", i, llmt_context_last_error(ctx));
    }
    /* random corruption of either file: never a crash */
    {
        write_tiny_gpt2(enc, bpe, -1, 0);
        size_t le, lv;
        char *ge = read_file(enc, &le), *gv = read_file(bpe, &lv);
        char *me = malloc(le), *mv = malloc(lv);
        int loaded = 0;
        for (int it = 0; it < 300; it++) {
            memcpy(me, ge, le);
            memcpy(mv, gv, lv);
            int which = (int)(rnd() % 2);
            char *m = which ? mv : me;
            size_t ml = which ? lv : le;
            for (int k = 0; k < 1 + (int)(rnd() % 3); k++)
                m[rnd() % ml] = (rnd() & 1) ? " \n\",:\\{}0e\xc4"[rnd() % 11] : (char)rnd();
            write_file(enc, me, le);
            write_file(bpe, mv, lv);
            if (llmt_tokenizer_load_gpt2(ctx, enc, bpe, &t) == LLMT_OK) {
                loaded++;
                roundtrip(t, sample_text, strlen(sample_text));
                llmt_tokenizer_destroy(t);
            }
            t = NULL;
        }
        fprintf(stderr, "test_tok: corrupted GPT-2 files: %d of 300 still load\n", loaded);
        free(me), free(mv), free(ge), free(gv);
    }
    free(enc);
    free(bpe);
    llmt_context_destroy(ctx);
}

static void test_gpt2(const char *dir)
{
    char enc[600], bpe[600];
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    if (access(enc, R_OK) || access(bpe, R_OK)) {
        fprintf(stderr, "test_tok: no GPT-2 files in %s: that part skipped\n", dir);
        return;
    }
    llmt_tokenizer *t = NULL;
    CHECK_STATUS(llmt_tokenizer_load_gpt2(NULL, enc, bpe, &t), LLMT_OK);
    if (!t)
        return;
    int32_t v = 0, eot = 0, ids[64];
    size_t n = 0;
    llmt_tokenizer_vocab_size(t, &v);
    llmt_tokenizer_eot(t, &eot);
    CHECK_EQ_INT(v, 50257);
    CHECK_EQ_INT(eot, 50256);
    CHECK_STATUS(llmt_tokenizer_encode(t, "Hello world", 11, ids, 64, &n), LLMT_OK);
    CHECK(n == 2 && ids[0] == 15496 && ids[1] == 995);
    char buf[64];
    size_t bl;
    CHECK_STATUS(llmt_tokenizer_decode(t, &eot, 1, buf, sizeof buf, &bl), LLMT_OK);
    CHECK(bl == 13 && !memcmp(buf, "<|endoftext|>", 13));
    int32_t big = 50257;
    CHECK_STATUS(llmt_tokenizer_decode(t, &big, 1, buf, sizeof buf, &bl),
                 LLMT_ERR_INVALID_ARGUMENT);
    /* invalid UTF-8 is encoded as bytes and comes back */
    const char *inv[] = {"\xff", "abc\xc3", "\xc3\x28 x", "\xed\xa0\x80 surrogate",
                         "\xf4\x90\x80\x80 too big", "\xc0\xaf overlong", "\x80\x80\x80",
                         "caf\xc3\xa9\xe2\x82", "\xe6\x97\xa5\xe6\x9c"};
    for (size_t i = 0; i < sizeof inv / sizeof inv[0]; i++)
        roundtrip(t, inv[i], strlen(inv[i]));
    char rb[300];
    for (int it = 0; it < 300; it++) {
        size_t len = rnd() % sizeof rb;
        for (size_t i = 0; i < len; i++)
            rb[i] = (char)rnd();
        roundtrip(t, rb, len);
    }
    /* a long run (the heap path) and a word longer than the cache takes */
    size_t ln = 200000;
    char *lg = malloc(ln);
    for (size_t i = 0; i < ln; i++)
        lg[i] = "abcdefghij"[rnd() % 10];
    roundtrip(t, lg, ln);
    memset(lg, ' ', ln);
    roundtrip(t, lg, ln);
    free(lg);
    check_clones(t, sample_text, strlen(sample_text));
    /* save/load keeps GPT-2's ids */
    CHECK_STATUS(llmt_tokenizer_save(t, path_in("gpt2.tok")), LLMT_OK);
    llmt_tokenizer *u = NULL;
    CHECK_STATUS(llmt_tokenizer_load(NULL, path_in("gpt2.tok"), &u), LLMT_OK);
    if (u) {
        size_t k1, k2;
        int32_t *i1, *i2;
        encode_all(t, sample_text, strlen(sample_text), &i1, &k1);
        encode_all(u, sample_text, strlen(sample_text), &i2, &k2);
        CHECK(k1 == k2 && !memcmp(i1, i2, k1 * sizeof *i1));
        free(i1);
        free(i2);
    }
    llmt_tokenizer_destroy(u);
    llmt_tokenizer_destroy(t);
}

int main(int argc, char **argv)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/llmt_test_tok_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    char dir[512];
    const char *env = getenv("LLMT_GPT2_DIR"), *src = getenv("LLMT_SOURCE_ROOT");
    if (argc > 1)
        snprintf(dir, sizeof dir, "%s", argv[1]);
    else if (env)
        snprintf(dir, sizeof dir, "%s", env);
    else
        snprintf(dir, sizeof dir, "%s/../shared/data/gpt2-tokenizer", src ? src : ".");
    test_bytes();
    test_train();
    test_gpt2_bad_input();
    test_gpt2(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_exit("test_tok");
}
