/* Parser fuzz run: mutated example specs and random documents built from the
 * key table go through parse, validate, the getters and to_json. Every call
 * must return a status (OK or SPEC for the parsers), never crash or leak (the
 * CI runs this under ASan). Deterministic: a fixed seed, a few thousand
 * inputs; LLMT_FUZZ_ITERS raises the count for a longer local run. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static size_t pick(size_t n) { return n ? (size_t)(next() % n) : 0; }

static char *read_all(const char *path, size_t *len)
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
    if (b) {
        b[n] = '\0';
        *len = (size_t)n;
    }
    return b;
}

static const char *const numbers[] = {"0", "-1", "1", "3", "7", "1e300", "-1e300",
    "1.5", "16384", "9007199254740993", "1e-320", "2", "128", "-0", "4294967297",
    "\"auto\"", "null", "true", "[]", "{}", "\"\"", "\"x\""};
static const char *const strings[] = {"\"\"", "\"gpt2\"", "\"llama\"", "\"fp8\"",
    "\"auto\"", "\"durable\"", "\"H100-SXM\"", "\"\\u0000\"", "\"\\ud800\"", "1",
    "null", "{\"kind\": \"local\"}", "[\"peer\"]", "\"\\\"\""};

/* One mutation of `src` into a fresh buffer. */
static char *mutate(const char *src, size_t len, size_t *outlen)
{
    if (len > ((size_t)1 << 20))
        len = (size_t)1 << 20;
    size_t cap = len * 2 + 256;
    char *o = malloc(cap);
    size_t pos = pick(len + 1);
    int kind = (int)pick(7);
    size_t n = 0;
    switch (kind) {
    case 0: /* flip a byte */
        memcpy(o, src, len);
        n = len;
        if (len)
            o[pos % len] = (char)next();
        break;
    case 1: /* delete a span */
    {
        size_t span = pick(16) + 1;
        size_t end = pos + span > len ? len : pos + span;
        memcpy(o, src, pos);
        memcpy(o + pos, src + end, len - end);
        n = len - (end - pos);
        break;
    }
    case 2: /* insert JSON punctuation */
    {
        static const char punct[] = "{}[],:\"0.e-+ntf\\";
        memcpy(o, src, pos);
        o[pos] = punct[pick(sizeof punct - 1)];
        memcpy(o + pos + 1, src + pos, len - pos);
        n = len + 1;
        break;
    }
    case 3: /* replace the value after a ':' with another literal */
    case 4: {
        const char *colon = memchr(src + pos, ':', len - pos);
        if (!colon)
            colon = memchr(src, ':', len);
        if (!colon) {
            memcpy(o, src, len);
            n = len;
            break;
        }
        size_t c = (size_t)(colon - src) + 1;
        size_t e = c;
        while (e < len && src[e] == ' ')
            e++;
        size_t v = e;
        if (v < len && src[v] != '{' && src[v] != '[') {
            if (src[v] == '"') {
                v++;
                while (v < len && src[v] != '"')
                    v++;
                v++;
            } else
                while (v < len && src[v] != ',' && src[v] != '}' && src[v] != '\n')
                    v++;
        }
        if (v > len)
            v = len;
        const char *lit = kind == 3 ? numbers[pick(sizeof numbers / sizeof *numbers)]
                                    : strings[pick(sizeof strings / sizeof *strings)];
        size_t ll = strlen(lit);
        memcpy(o, src, e);
        memcpy(o + e, lit, ll);
        memcpy(o + e + ll, src + v, len - v);
        n = e + ll + (len - v);
        break;
    }
    case 5: /* truncate */
        memcpy(o, src, pos);
        n = pos;
        break;
    default: /* duplicate a span elsewhere */
    {
        size_t a = pick(len + 1), span = pick(40);
        if (a + span > len)
            span = len - a;
        memcpy(o, src, pos);
        memcpy(o + pos, src + a, span);
        memcpy(o + pos + span, src + pos, len - pos);
        n = len + span;
        break;
    }
    }
    *outlen = n;
    return o;
}

/* A random document from the key table: random keys, random value types. */
static char *random_doc(size_t *outlen)
{
    size_t cap = 1 << 14, n = 0;
    char *o = malloc(cap);
    /* Half the documents start from a valid model so that the rules past
     * the key walk run too. */
    int with_model = (int)(next() & 1);
    n += (size_t)snprintf(o + n, cap - n, "{%s", with_model ?
        "\"model\": {\"layers\": 2, \"hidden\": 64, \"heads\": 2}" : "");
    size_t nk = llmt_spec_key_count();
    int items = (int)pick(12);
    for (int i = 0; i < items && n + 512 < cap; i++) {
        const char *k = llmt_spec_key_name(pick(nk));
        if (strchr(k, '['))
            continue;
        /* Build nested objects for a dotted key. */
        char tmp[128];
        snprintf(tmp, sizeof tmp, "%s", k);
        int depth = 0;
        char *save = NULL;
        char *part = strtok_r(tmp, ".", &save);
        n += (size_t)snprintf(o + n, cap - n, "%s", (i || with_model) ? ", " : "");
        while (part) {
            char *nx = strtok_r(NULL, ".", &save);
            n += (size_t)snprintf(o + n, cap - n, "\"%s\": %s", part, nx ? "{" : "");
            if (nx)
                depth++;
            part = nx;
        }
        const char *v = (next() & 1) ? numbers[pick(sizeof numbers / sizeof *numbers)]
                                     : strings[pick(sizeof strings / sizeof *strings)];
        n += (size_t)snprintf(o + n, cap - n, "%s", v);
        while (depth--)
            n += (size_t)snprintf(o + n, cap - n, "}");
    }
    n += (size_t)snprintf(o + n, cap - n, "}");
    *outlen = n;
    return o;
}

static void exercise(llmt_context *ctx, const char *doc, size_t len, int *n_ok)
{
    llmt_spec *s = NULL;
    llmt_status st = llmt_spec_parse_json(ctx, doc, len, &s);
    int good = st == LLMT_OK || st == LLMT_ERR_SPEC;
    if (!good)
        fprintf(stderr, "parse returned %d\n", (int)st);
    CHECK(good);
    CHECK((st == LLMT_OK) == (s != NULL));
    char small[64];
    size_t need = 0;
    llmt_status vs = llmt_spec_validate_json(ctx, doc, len, small, sizeof small, &need);
    CHECK(vs == LLMT_OK || vs == LLMT_ERR_SPEC || vs == LLMT_ERR_BUFFER_TOO_SMALL);
    CHECK((vs == LLMT_OK) == (st == LLMT_OK));
    if (!s)
        return;
    (*n_ok)++;
    for (size_t i = 0; i < llmt_spec_key_count(); i++) {
        const char *k = llmt_spec_key_name(i);
        int64_t v;
        double d;
        char b[32];
        llmt_spec_get_int(s, k, &v);
        llmt_spec_get_double(s, k, &d);
        llmt_spec_get_string(s, k, b, sizeof b, &need);
    }
    llmt_status js = llmt_spec_to_json(s, NULL, 0, &need);
    CHECK(js == LLMT_ERR_BUFFER_TOO_SMALL && need > 2);
    char *j = malloc(need);
    CHECK_STATUS(llmt_spec_to_json(s, j, need, &need), LLMT_OK);
    /* The normalised form of a valid spec is itself valid. */
    llmt_spec *s2 = NULL;
    CHECK_STATUS(llmt_spec_parse_json(ctx, j, strlen(j), &s2), LLMT_OK);
    llmt_spec_destroy(s2);
    free(j);
    llmt_spec_destroy(s);
}

int main(void)
{
    llmt_context *ctx;
    if (llmt_context_create(NULL, &ctx) != LLMT_OK)
        return 1;
    llmt_context_set_log_level(ctx, LLMT_LOG_OFF);
    const char *root = getenv("LLMT_SOURCE_ROOT");
    const char *names[] = {"demo-cpu", "gpt2-124m-1gpu", "llama-70b",
                           "llama3-405b-16k", "moe"};
    char *seeds[5];
    size_t lens[5];
    int nseeds = 0;
    for (int i = 0; i < 5; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/examples/specs/%s.json", root ? root : ".", names[i]);
        if ((seeds[nseeds] = read_all(p, &lens[nseeds])))
            nseeds++;
    }
    CHECK_EQ_INT(nseeds, 5);
    int iters = 3000;
    if (getenv("LLMT_FUZZ_ITERS"))
        iters = atoi(getenv("LLMT_FUZZ_ITERS"));
    int n_ok = 0;
    for (int it = 0; it < iters && nseeds; it++) {
        size_t len;
        char *doc;
        if (it % 5 == 4) {
            doc = random_doc(&len);
        } else {
            int si = (int)pick((size_t)nseeds);
            doc = mutate(seeds[si], lens[si], &len);
            /* Stack a few mutations sometimes. */
            for (int m = (int)pick(3); m > 0; m--) {
                size_t l2;
                char *d2 = mutate(doc, len, &l2);
                free(doc);
                doc = d2;
                len = l2;
            }
        }
        exercise(ctx, doc, len, &n_ok);
        free(doc);
    }
    /* The run is only meaningful if both outcomes happened many times. */
    fprintf(stderr, "fuzz: %d inputs, %d valid\n", iters, n_ok);
    CHECK(n_ok > iters / 50);
    CHECK(n_ok < iters);
    for (int i = 0; i < nseeds; i++)
        free(seeds[i]);
    llmt_context_destroy(ctx);
    return check_exit("test_spec_fuzz");
}
