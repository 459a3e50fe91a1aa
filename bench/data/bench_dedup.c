/* Deduplication speed: documents/s through llmt_dedup_add (exact + near
 * with the defaults: 5-word shingles, 128 MinHash functions, 16 bands;
 * exact only; near only), the MinHash signature alone, and for scale the
 * quality filters and normalisation on the same text. Corpus: generated
 * random-word documents (~200 words, ~1.3 KB), a fifth of them near copies
 * (3 word edits) and a twentieth exact copies of earlier ones. Items are
 * documents; the MB/s line after each case divides the corpus bytes by
 * the median time. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "llmtrain.h"

typedef struct corpus {
    char **doc;
    size_t *len;
    size_t n, bytes;
} corpus;

static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static corpus make_corpus(size_t n)
{
    enum { VOCAB = 20000, WORDS = 200 };
    static char vocab[VOCAB][12];
    for (int i = 0; i < VOCAB; i++) {
        int l = 2 + (int)(rnd() % 9);
        for (int c = 0; c < l; c++)
            vocab[i][c] = (char)('a' + rnd() % 26);
        vocab[i][l] = 0;
    }
    corpus c = {malloc(n * sizeof(char *)), malloc(n * sizeof(size_t)), n, 0};
    int *w = malloc(n * WORDS * sizeof(int));
    for (size_t d = 0; d < n; d++) {
        int *dw = w + d * WORDS;
        uint64_t r = rnd() % 100;
        if (d > 0 && r < 25) {
            memcpy(dw, w + (rnd() % d) * WORDS, WORDS * sizeof(int));
            if (r >= 5) /* near copy: 3 substitutions */
                for (int e = 0; e < 3; e++)
                    dw[rnd() % WORDS] = (int)(rnd() % VOCAB);
        } else {
            for (int k = 0; k < WORDS; k++)
                dw[k] = (int)(rnd() % VOCAB);
        }
        char *s = malloc(WORDS * 12);
        size_t o = 0;
        for (int k = 0; k < WORDS; k++) {
            size_t l = strlen(vocab[dw[k]]);
            memcpy(s + o, vocab[dw[k]], l);
            o += l;
            s[o++] = k % 15 == 14 ? '\n' : ' ';
        }
        s[o] = 0;
        c.doc[d] = s;
        c.len[d] = o;
        c.bytes += o;
    }
    free(w);
    return c;
}

typedef struct job {
    const corpus *c;
    llmt_dedup_opts opts;
    int64_t verdicts[LLMT_DATA_VERDICTS];
    char *out;
} job;

static void run_dedup(void *arg)
{
    job *j = arg;
    llmt_dedup *d;
    if (llmt_dedup_create(NULL, &j->opts, &d) != LLMT_OK)
        return;
    memset(j->verdicts, 0, sizeof j->verdicts);
    for (size_t i = 0; i < j->c->n; i++) {
        int32_t v = 0;
        llmt_dedup_add(d, j->c->doc[i], j->c->len[i], &v, NULL);
        j->verdicts[v]++;
    }
    llmt_dedup_destroy(d);
}

static void run_signature(void *arg)
{
    job *j = arg;
    llmt_dedup *d;
    uint64_t sig[128];
    if (llmt_dedup_create(NULL, &j->opts, &d) != LLMT_OK)
        return;
    for (size_t i = 0; i < j->c->n; i++)
        llmt_dedup_signature(d, j->c->doc[i], j->c->len[i], sig, 128);
    llmt_dedup_destroy(d);
}

static void run_filter(void *arg)
{
    job *j = arg;
    llmt_data_filter_opts o;
    llmt_data_filter_opts_init(&o, sizeof o);
    for (size_t i = 0; i < j->c->n; i++) {
        int32_t v;
        llmt_data_filter_check(&o, j->c->doc[i], j->c->len[i], &v);
    }
}

static void run_normalize(void *arg)
{
    job *j = arg;
    for (size_t i = 0; i < j->c->n; i++) {
        size_t len;
        llmt_data_normalize(j->c->doc[i], j->c->len[i], j->out, 3 * j->c->len[i],
                            &len, NULL);
    }
}

static void report(const bench_result *r, const corpus *c)
{
    if (r && r->median_s > 0)
        printf("  %-22s %10.0f docs/s %8.1f MB/s\n", r->name,
               (double)c->n / r->median_s, (double)c->bytes / r->median_s / 1e6);
}

int main(int argc, char **argv)
{
    bench_ctx b;
    if (bench_init(&b, "data-dedup", argc, argv))
        return 2;
    corpus c = make_corpus(b.quick ? 2000 : 20000);
    printf("corpus: %zu documents, %zu bytes\n", c.n, c.bytes);
    job j = {.c = &c};
    j.out = malloc(3 * 12 * 200 + 16);
    llmt_dedup_opts_init(&j.opts, sizeof j.opts);
    double n = (double)c.n;
    const bench_result *r = bench_run(&b, "dedup-exact+near", run_dedup, &j, n, "docs");
    report(r, &c);
    if (r)
        printf("  kept %lld, exact %lld, near %lld\n",
               (long long)j.verdicts[LLMT_DATA_KEEP],
               (long long)j.verdicts[LLMT_DATA_EXACT_DUP],
               (long long)j.verdicts[LLMT_DATA_NEAR_DUP]);
    j.opts.near = 0;
    report(bench_run(&b, "dedup-exact", run_dedup, &j, n, "docs"), &c);
    j.opts.near = 1;
    j.opts.exact = 0;
    report(bench_run(&b, "dedup-near", run_dedup, &j, n, "docs"), &c);
    j.opts.exact = 1;
    report(bench_run(&b, "minhash-signature", run_signature, &j, n, "docs"), &c);
    report(bench_run(&b, "filter-defaults", run_filter, &j, n, "docs"), &c);
    report(bench_run(&b, "normalize", run_normalize, &j, n, "docs"), &c);
    for (size_t i = 0; i < c.n; i++)
        free(c.doc[i]);
    free(c.doc);
    free(c.len);
    free(j.out);
    return bench_finish(&b);
}
