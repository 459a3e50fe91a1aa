/* Deduplication: exact duplicates; near duplicates judged against the
 * EXACT Jaccard similarity of word-shingle sets computed here by separate
 * code (shingle strings hashed with FNV-1a, sorted, merged): pairs at
 * Jaccard >= 0.9 must be removed and pairs at <= 0.5 kept; the signature
 * agreement must estimate Jaccard within 0.15; option validation and
 * argument errors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"

static uint64_t rng_state = 0x1234567;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* ---- reference shingling ---------------------------------------------- */

static int is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct shset {
    uint64_t *h;
    size_t n;
} shset;

/* The set of k-word shingles of text (words lowercased, joined by one
 * space), as sorted unique FNV-1a hashes. */
static shset shingles(const char *text, int k)
{
    size_t n = strlen(text);
    const char **ws = malloc((n + 1) * sizeof *ws);
    size_t *wl = malloc((n + 1) * sizeof *wl);
    size_t nw = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && is_space((unsigned char)text[i]))
            i++;
        if (i >= n)
            break;
        ws[nw] = text + i;
        size_t b = i;
        while (i < n && !is_space((unsigned char)text[i]))
            i++;
        wl[nw++] = i - b;
    }
    shset s = {malloc((nw + 1) * sizeof(uint64_t)), 0};
    if (nw == 0)
        goto done;
    size_t nsh = nw >= (size_t)k ? nw - (size_t)k + 1 : 1;
    size_t span = nw >= (size_t)k ? (size_t)k : nw;
    for (size_t i = 0; i < nsh; i++) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t w = i; w < i + span; w++) {
            if (w > i)
                h = (h ^ ' ') * 0x100000001b3ull;
            for (size_t c = 0; c < wl[w]; c++) {
                unsigned char ch = (unsigned char)ws[w][c];
                if (ch >= 'A' && ch <= 'Z')
                    ch = (unsigned char)(ch + 32);
                h = (h ^ ch) * 0x100000001b3ull;
            }
        }
        s.h[s.n++] = h;
    }
    qsort(s.h, s.n, sizeof *s.h, cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < s.n; i++)
        if (!u || s.h[u - 1] != s.h[i])
            s.h[u++] = s.h[i];
    s.n = u;
done:
    free(ws);
    free(wl);
    return s;
}

static double jaccard(const shset *a, const shset *b)
{
    size_t i = 0, j = 0, inter = 0;
    while (i < a->n && j < b->n) {
        if (a->h[i] == b->h[j]) {
            inter++;
            i++;
            j++;
        } else if (a->h[i] < b->h[j]) {
            i++;
        } else {
            j++;
        }
    }
    size_t uni = a->n + b->n - inter;
    return uni ? (double)inter / (double)uni : 1.0;
}

/* ---- corpus ----------------------------------------------------------- */

#define VOCAB 5000
#define NBASE 300
static char vocab[VOCAB][12];

static void make_vocab(void)
{
    for (int i = 0; i < VOCAB; i++) {
        int l = 3 + (int)(rnd() % 7);
        for (int c = 0; c < l; c++)
            vocab[i][c] = (char)('a' + rnd() % 26);
        vocab[i][l] = 0;
    }
}

typedef struct wlist {
    int *w;
    int n;
} wlist;

static char *render(const wlist *d, int caps, int spaces)
{
    char *s = malloc((size_t)d->n * 14 + 1);
    size_t o = 0;
    for (int i = 0; i < d->n; i++) {
        if (i) {
            /* Spacing varies, but never what the shingles see. */
            const char *sep = spaces && i % 7 == 0 ? "\n\t " : " ";
            memcpy(s + o, sep, strlen(sep));
            o += strlen(sep);
        }
        size_t l = strlen(vocab[d->w[i]]);
        memcpy(s + o, vocab[d->w[i]], l);
        if (caps && i % 5 == 0)
            s[o] = (char)(s[o] - 32);
        o += l;
    }
    s[o] = 0;
    return s;
}

/* A copy of base with `edits` random substitutions, insertions or
 * deletions. */
static wlist mutate(const wlist *base, int edits)
{
    wlist c = {malloc((size_t)(base->n + edits + 1) * sizeof(int)), base->n};
    memcpy(c.w, base->w, (size_t)base->n * sizeof(int));
    for (int e = 0; e < edits; e++) {
        int kind = (int)(rnd() % 3), pos = (int)(rnd() % (uint64_t)c.n);
        if (kind == 0 || (kind == 2 && c.n < 10)) {
            c.w[pos] = (int)(rnd() % VOCAB);
        } else if (kind == 1) {
            memmove(c.w + pos + 1, c.w + pos, (size_t)(c.n - pos) * sizeof(int));
            c.w[pos] = (int)(rnd() % VOCAB);
            c.n++;
        } else {
            memmove(c.w + pos, c.w + pos + 1, (size_t)(c.n - pos - 1) * sizeof(int));
            c.n--;
        }
    }
    return c;
}

static void test_near(void)
{
    static const int edits[] = {0, 0, 1, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 100};
    const int nedits = (int)(sizeof edits / sizeof *edits);
    make_vocab();
    char *base[NBASE], *copy[NBASE];
    for (int i = 0; i < NBASE; i++) {
        wlist b = {malloc(200 * sizeof(int)), 80 + (int)(rnd() % 120)};
        for (int k = 0; k < b.n; k++)
            b.w[k] = (int)(rnd() % VOCAB);
        wlist c = mutate(&b, edits[i % nedits]);
        base[i] = render(&b, 0, 0);
        /* Edit 0 copies differ from their base in case and spacing only. */
        copy[i] = render(&c, i % 2, i % 3 == 0);
        free(b.w);
        free(c.w);
    }
    llmt_dedup_opts o;
    llmt_dedup_opts_init(&o, sizeof o);
    llmt_dedup *d;
    CHECK_STATUS(llmt_dedup_create(NULL, &o, &d), LLMT_OK);
    int base_kept = 0;
    for (int i = 0; i < NBASE; i++) {
        int32_t v;
        double sim;
        CHECK_STATUS(llmt_dedup_add(d, base[i], strlen(base[i]), &v, &sim), LLMT_OK);
        base_kept += v == LLMT_DATA_KEEP && sim == 0;
    }
    CHECK_EQ_INT(base_kept, NBASE);
    int high = 0, low = 0, high_removed = 0, low_kept = 0;
    for (int i = 0; i < NBASE; i++) {
        shset a = shingles(base[i], o.shingle), b = shingles(copy[i], o.shingle);
        double j = jaccard(&a, &b);
        int32_t v;
        double sim;
        CHECK_STATUS(llmt_dedup_add(d, copy[i], strlen(copy[i]), &v, &sim), LLMT_OK);
        if (j >= 0.9) {
            high++;
            /* Identical text (same case and spacing) is an exact one. */
            int same = !strcmp(base[i], copy[i]);
            int ok = same ? v == LLMT_DATA_EXACT_DUP && sim == 1
                          : v == LLMT_DATA_NEAR_DUP && sim >= o.threshold;
            high_removed += ok;
            if (!ok)
                fprintf(stderr, "  copy %d: Jaccard %.3f kept\n", i, j);
        } else if (j <= 0.5) {
            low++;
            low_kept += v == LLMT_DATA_KEEP;
            if (v != LLMT_DATA_KEEP)
                fprintf(stderr, "  copy %d: Jaccard %.3f removed (%.3f)\n", i, j, sim);
        }
        free(a.h);
        free(b.h);
    }
    fprintf(stderr, "near dup: %d pairs >= 0.9, %d pairs <= 0.5\n", high, low);
    CHECK(high >= 50);
    CHECK(low >= 50);
    CHECK_EQ_INT(high_removed, high);
    CHECK_EQ_INT(low_kept, low);
    llmt_dedup_destroy(d);

    /* The signature agreement estimates Jaccard (256 functions: a standard
     * deviation of at most 0.031, so 0.15 is ~5 of them). */
    o.permutations = 256;
    o.bands = 32;
    CHECK_STATUS(llmt_dedup_create(NULL, &o, &d), LLMT_OK);
    uint64_t *s1 = malloc(256 * sizeof *s1), *s2 = malloc(256 * sizeof *s2);
    double worst = 0, sum = 0;
    int pairs = 0;
    for (int i = 0; i < 2 * NBASE; i++) {
        /* Each base with its copy, then with another base's copy. */
        const char *x = base[i % NBASE];
        const char *y = i < NBASE ? copy[i] : copy[(i * 7 + 3) % NBASE];
        shset a = shingles(x, o.shingle), b = shingles(y, o.shingle);
        double j = jaccard(&a, &b);
        CHECK_STATUS(llmt_dedup_signature(d, x, strlen(x), s1, 256), LLMT_OK);
        CHECK_STATUS(llmt_dedup_signature(d, y, strlen(y), s2, 256), LLMT_OK);
        int eq = 0;
        for (int p = 0; p < 256; p++)
            eq += s1[p] == s2[p];
        double err = fabs(eq / 256.0 - j);
        worst = err > worst ? err : worst;
        sum += err;
        pairs++;
        free(a.h);
        free(b.h);
    }
    fprintf(stderr, "signature estimate: %d pairs, mean |error| %.4f, worst %.4f\n",
            pairs, sum / pairs, worst);
    CHECK(worst <= 0.15);
    CHECK(sum / pairs <= 0.03);
    free(s1);
    free(s2);
    llmt_dedup_destroy(d);
    for (int i = 0; i < NBASE; i++) {
        free(base[i]);
        free(copy[i]);
    }
}

static void test_exact_and_short(void)
{
    llmt_dedup_opts o;
    llmt_dedup_opts_init(&o, sizeof o);
    llmt_dedup *d;
    CHECK_STATUS(llmt_dedup_create(NULL, &o, &d), LLMT_OK);
    int32_t v;
    double sim = -1;
    const char *t = "the same text, with  two spaces\n";
    CHECK_STATUS(llmt_dedup_add(d, t, strlen(t), &v, &sim), LLMT_OK);
    CHECK_EQ_INT(v, LLMT_DATA_KEEP);
    CHECK(sim == 0);
    CHECK_STATUS(llmt_dedup_add(d, t, strlen(t), &v, &sim), LLMT_OK);
    CHECK_EQ_INT(v, LLMT_DATA_EXACT_DUP);
    CHECK(sim == 1);
    /* Different whitespace is not an exact duplicate; the shingles are
     * the same, so it is a near one. */
    const char *t2 = "the same text, with two spaces";
    CHECK_STATUS(llmt_dedup_add(d, t2, strlen(t2), &v, &sim), LLMT_OK);
    CHECK_EQ_INT(v, LLMT_DATA_NEAR_DUP);
    CHECK(sim == 1);
    /* Fewer words than a shingle: the words form one shingle. */
    CHECK_STATUS(llmt_dedup_add(d, "Hello world", 11, &v, NULL), LLMT_OK);
    CHECK_EQ_INT(v, LLMT_DATA_KEEP);
    CHECK_STATUS(llmt_dedup_add(d, "hello  WORLD", 12, &v, &sim), LLMT_OK);
    CHECK_EQ_INT(v, LLMT_DATA_NEAR_DUP);
    CHECK_STATUS(llmt_dedup_add(d, "hello there", 11, &v, &sim), LLMT_OK);
    CHECK_EQ_INT(v, LLMT_DATA_KEEP);
    /* Removed documents are not remembered: their exact text is new. */
    CHECK_STATUS(llmt_dedup_add(d, t2, strlen(t2), &v, NULL), LLMT_OK);
    CHECK_EQ_INT(v, LLMT_DATA_NEAR_DUP);
    llmt_dedup_destroy(d);

    /* Exact only: near copies stay. Near only: identical text is a near
     * duplicate at similarity 1. */
    o.near = 0;
    CHECK_STATUS(llmt_dedup_create(NULL, &o, &d), LLMT_OK);
    CHECK_STATUS(llmt_dedup_add(d, t, strlen(t), &v, NULL), LLMT_OK);
    CHECK_STATUS(llmt_dedup_add(d, t2, strlen(t2), &v, NULL), LLMT_OK);
    CHECK_EQ_INT(v, LLMT_DATA_KEEP);
    CHECK_STATUS(llmt_dedup_add(d, t2, strlen(t2), &v, NULL), LLMT_OK);
    CHECK_EQ_INT(v, LLMT_DATA_EXACT_DUP);
    llmt_dedup_destroy(d);
    o.near = 1;
    o.exact = 0;
    CHECK_STATUS(llmt_dedup_create(NULL, &o, &d), LLMT_OK);
    CHECK_STATUS(llmt_dedup_add(d, t, strlen(t), &v, NULL), LLMT_OK);
    CHECK_STATUS(llmt_dedup_add(d, t, strlen(t), &v, &sim), LLMT_OK);
    CHECK_EQ_INT(v, LLMT_DATA_NEAR_DUP);
    CHECK(sim == 1);
    llmt_dedup_destroy(d);
}

static void test_signature_and_seed(void)
{
    llmt_dedup_opts o;
    llmt_dedup_opts_init(&o, sizeof o);
    llmt_dedup *d1, *d2, *d3;
    CHECK_STATUS(llmt_dedup_create(NULL, &o, &d1), LLMT_OK);
    CHECK_STATUS(llmt_dedup_create(NULL, &o, &d2), LLMT_OK);
    o.seed = 43;
    CHECK_STATUS(llmt_dedup_create(NULL, &o, &d3), LLMT_OK);
    const char *t = "one two three four five six seven eight nine ten";
    uint64_t a[128], b[128], c[128];
    CHECK_STATUS(llmt_dedup_signature(d1, t, strlen(t), a, 128), LLMT_OK);
    CHECK_STATUS(llmt_dedup_signature(d2, t, strlen(t), b, 128), LLMT_OK);
    CHECK_STATUS(llmt_dedup_signature(d3, t, strlen(t), c, 128), LLMT_OK);
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(memcmp(a, c, sizeof a) != 0);
    /* Every value is below 2^61 - 1 (a hash of the field). */
    int in_field = 1;
    for (int i = 0; i < 128; i++)
        in_field &= a[i] < (1ull << 61) - 1;
    CHECK(in_field);
    CHECK_STATUS(llmt_dedup_signature(d1, t, strlen(t), a, 127),
                 LLMT_ERR_BUFFER_TOO_SMALL);
    CHECK(strstr(llmt_dedup_last_error(d1), "128") != NULL);
    CHECK_STATUS(llmt_dedup_signature(NULL, t, 1, a, 128), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_dedup_signature(d1, NULL, 1, a, 128), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_dedup_signature(d1, t, 1, NULL, 128), LLMT_ERR_NULL_POINTER);
    int32_t v;
    CHECK_STATUS(llmt_dedup_add(NULL, t, 1, &v, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_dedup_add(d1, NULL, 1, &v, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_dedup_add(d1, t, 1, NULL, NULL), LLMT_ERR_NULL_POINTER);
    llmt_dedup_destroy(d1);
    llmt_dedup_destroy(d2);
    llmt_dedup_destroy(d3);
    llmt_dedup_destroy(NULL);
    CHECK(llmt_dedup_last_error(NULL) != NULL);
}

static void bad_opts(llmt_context *ctx, llmt_dedup_opts o, const char *word)
{
    llmt_dedup *d = (llmt_dedup *)1;
    CHECK_STATUS(llmt_dedup_create(ctx, &o, &d), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(d == NULL);
    const char *msg = llmt_context_last_error(ctx);
    CHECK(strstr(msg, word) != NULL);
    if (!strstr(msg, word))
        fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", msg, word);
}

static void test_options(void)
{
    llmt_context *ctx;
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    llmt_dedup_opts o, b;
    CHECK_STATUS(llmt_dedup_opts_init(&o, sizeof o), LLMT_OK);
    CHECK_EQ_INT(o.exact, 1);
    CHECK_EQ_INT(o.near, 1);
    CHECK_EQ_INT(o.shingle, 5);
    CHECK_EQ_INT(o.permutations, 128);
    CHECK_EQ_INT(o.bands, 16);
    CHECK(o.threshold == 0.8);
    CHECK(o.seed == 42);
    b = o; b.bands = 10; bad_opts(ctx, b, "bands 10 must divide permutations 128");
    b = o; b.bands = 0; bad_opts(ctx, b, "bands");
    b = o; b.permutations = 0; bad_opts(ctx, b, "permutations");
    b = o; b.shingle = 0; bad_opts(ctx, b, "shingle");
    b = o; b.threshold = 0; bad_opts(ctx, b, "threshold");
    b = o; b.threshold = 1.01; bad_opts(ctx, b, "threshold");
    b = o; b.threshold = NAN; bad_opts(ctx, b, "threshold");
    b = o; b.exact = 2; bad_opts(ctx, b, "exact");
    llmt_dedup *d;
    b = o; b.threshold = 1; b.bands = 128;
    CHECK_STATUS(llmt_dedup_create(ctx, &b, &d), LLMT_OK);
    llmt_dedup_destroy(d);
    CHECK_STATUS(llmt_dedup_create(ctx, NULL, &d), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_dedup_create(ctx, &o, NULL), LLMT_ERR_NULL_POINTER);
    b = o; b.struct_size = 0;
    CHECK_STATUS(llmt_dedup_create(ctx, &b, &d), LLMT_ERR_STRUCT_SIZE);
    CHECK_STATUS(llmt_dedup_opts_init(&o, 3), LLMT_ERR_STRUCT_SIZE);
    CHECK_STATUS(llmt_dedup_opts_init(NULL, sizeof o), LLMT_ERR_NULL_POINTER);
    llmt_context_destroy(ctx);
}

int main(void)
{
    test_near();
    test_exact_and_short();
    test_signature_and_seed();
    test_options();
    return check_exit("data-dedup");
}
