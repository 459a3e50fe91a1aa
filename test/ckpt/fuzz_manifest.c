/* Fuzz test of the manifest parser (lib/ckpt/manifest.c, compiled into this
 * program with AddressSanitizer and UBSan where the compiler has them). A
 * valid manifest and a valid part manifest are mutated at random (bytes
 * flipped, set, deleted, spans duplicated, numbers replaced by hostile ones,
 * truncation) with a fixed seed; every input must either be refused with a
 * message or accepted, and an accepted one must serialise and re-parse to
 * the same text. The writer seals each manifest with a digest of its
 * bytes: three inputs in four are resealed after the mutation (a
 * deliberate editor), so that the field checks meet them; the others,
 * changed under a digest of the writer's form, must all be refused. Any
 * memory error aborts under ASan.
 * usage: fuzz_manifest [ITERATIONS] [SEED] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt/ckpt_internal.h"
#include "manifest_seal.h"

static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t x = (rng_state += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void add_chunk(ck_tensor *t, int rank, uint64_t off, int64_t g0, int64_t l0, int64_t l1)
{
    ck_chunk *k = &t->chunks[t->nchunks++];
    memset(k, 0, sizeof *k);
    k->rank = rank;
    k->offset = off;
    k->goff[0] = g0;
    k->lshape[0] = l0;
    k->lshape[1] = l1;
    k->length = (uint64_t)(l0 * (l1 ? l1 : 1)) * llmt_dtype_size(t->dtype);
    k->block = 4096;
    k->nblocks = (k->length + 4095) / 4096;
    k->bxxh = calloc(k->nblocks ? k->nblocks : 1, sizeof *k->bxxh);
    for (uint64_t b = 0; b < k->nblocks; b++)
        k->bxxh[b] = rnd();
    k->xxh = rnd();
}

/* A valid manifest (part = 0: two ranks; part = 1: rank 0's part). */
static char *seed_text(int part)
{
    ck_manifest m;
    memset(&m, 0, sizeof m);
    m.is_part = part;
    m.step = 1234;
    m.world_size = part ? 2 : 2;
    m.rank = 0;
    m.plan = strdup("{\"tp\":2,\"pp\":1,\"dp\":1}");
    m.nkv = m.kvcap = 2;
    m.kv = calloc(2, sizeof *m.kv);
    m.kv[0].key = strdup("trainer.step");
    m.kv[0].val = strdup("1234");
    m.kv[1].key = strdup("data.cursor");
    m.kv[1].val = strdup("a \"quoted\" \\ value\n");
    m.nfiles = m.filecap = part ? 1 : 2;
    m.files = calloc(2, sizeof *m.files);
    m.files[0].rank = 0;
    m.files[0].bytes = 4096 * 4;
    m.files[1].rank = 1;
    m.files[1].bytes = 4096 * 3;
    m.ntensors = m.tcap = 3;
    m.tensors = calloc(3, sizeof *m.tensors);
    ck_tensor *a = &m.tensors[0], *b = &m.tensors[1], *c = &m.tensors[2];
    a->name = strdup("param/h.0.attn.c_attn.weight");
    a->dtype = LLMT_DTYPE_FP32;
    a->ndim = 2;
    a->gshape[0] = 48;
    a->gshape[1] = 16;
    a->chunks = calloc(2, sizeof *a->chunks);
    a->cap = 2;
    add_chunk(a, 0, 4096, 0, 24, 16);
    if (!part)
        add_chunk(a, 1, 4096, 24, 24, 16);
    b->name = strdup("adam_m/wte");
    b->dtype = LLMT_DTYPE_BF16;
    b->ndim = 1;
    b->gshape[0] = 100;
    b->chunks = calloc(1, sizeof *b->chunks);
    b->cap = 1;
    add_chunk(b, 0, 8192, 0, 100, 0);
    b->chunks[0].lshape[1] = 0;
    c->name = strdup("rng");
    c->dtype = LLMT_DTYPE_INT64;
    c->ndim = 0;
    c->chunks = calloc(1, sizeof *c->chunks);
    c->cap = 1;
    add_chunk(c, 0, 12288, 0, 0, 0);
    c->chunks[0].length = 8;
    c->chunks[0].nblocks = 1;
    c->chunks[0].goff[0] = 0;
    c->chunks[0].lshape[0] = 0;
    char *s = llmt__ckpt_manifest_to_json(&m);
    llmt__ckpt_manifest_free(&m);
    return s;
}

static const char *const HOSTILE[] = {
    "-1", "0", "1e308", "-1e308", "9007199254740993", "4503599627370497", "1.5",
    "18446744073709551616", "2147483648", "\"12\"", "null", "[]", "{}", "true",
    "\"../../etc/passwd\"", "\"rank-00000.bin/../x\"", "\"/abs/path\"", "1e-400",
    "\"rank-99999.bin\"", "\"rank-0000a.bin\"", "4096", "8191", "-0", "NaN",
};

static char *mutate(const char *seed, size_t *len)
{
    size_t n = strlen(seed);
    size_t cap = n * 2 + 256;
    char *s = malloc(cap);
    memcpy(s, seed, n);
    int rounds = 1 + (int)(rnd() % 4);
    for (int r = 0; r < rounds; r++) {
        size_t pos = n ? (size_t)(rnd() % n) : 0;
        switch (rnd() % 7) {
        case 0: /* flip a bit */
            if (n)
                s[pos] ^= (char)(1u << (rnd() % 8));
            break;
        case 1: { /* set a structural byte */
            static const char set[] = "{}[]\":,-0123456789eE.\\ \x01\xff";
            if (n)
                s[pos] = set[rnd() % (sizeof set - 1)];
            break;
        }
        case 2: { /* delete a span */
            size_t k = 1 + (size_t)(rnd() % 16);
            if (pos + k > n)
                k = n - pos;
            memmove(s + pos, s + pos + k, n - pos - k);
            n -= k;
            break;
        }
        case 3: { /* duplicate a span */
            size_t k = 1 + (size_t)(rnd() % 64);
            if (pos + k > n)
                k = n - pos;
            if (n + k < cap) {
                memmove(s + pos + k, s + pos, n - pos);
                n += k;
            }
            break;
        }
        case 4: { /* replace the number (or string) at/after pos by a hostile value */
            size_t a = pos;
            while (a < n && !(s[a] == '-' || (s[a] >= '0' && s[a] <= '9') || s[a] == '"'))
                a++;
            if (a >= n)
                break;
            size_t b = a + 1;
            if (s[a] == '"')
                while (b < n && s[b] != '"')
                    b++, (void)0;
            else
                while (b < n && ((s[b] >= '0' && s[b] <= '9') || s[b] == '.' || s[b] == 'e'))
                    b++;
            if (s[a] == '"' && b < n)
                b++;
            const char *h = HOSTILE[rnd() % (sizeof HOSTILE / sizeof HOSTILE[0])];
            size_t hl = strlen(h);
            if (n - (b - a) + hl >= cap)
                break;
            memmove(s + a + hl, s + b, n - b);
            memcpy(s + a, h, hl);
            n = n - (b - a) + hl;
            break;
        }
        case 5: /* truncate */
            n = pos;
            break;
        default: /* swap two bytes */
            if (n) {
                size_t q = (size_t)(rnd() % n);
                char t = s[pos];
                s[pos] = s[q];
                s[q] = t;
            }
        }
    }
    *len = n;
    return s;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 20000;
    rng_state = argc > 2 ? strtoull(argv[2], NULL, 10) : 7;
    char *seeds[2] = {seed_text(0), seed_text(1)};
    CHECK(seeds[0] && seeds[1]);
    char err[512];
    /* the seeds themselves are valid and round-trip */
    for (int p = 0; p < 2; p++) {
        ck_manifest m;
        llmt_status s = llmt__ckpt_manifest_parse(seeds[p], strlen(seeds[p]), p, &m, err, sizeof err);
        if (s != LLMT_OK)
            fprintf(stderr, "seed %d: %s\n", p, err);
        CHECK_STATUS(s, LLMT_OK);
        if (s == LLMT_OK) {
            char *t = llmt__ckpt_manifest_to_json(&m);
            CHECK(t && !strcmp(t, seeds[p]));
            free(t);
            llmt__ckpt_manifest_free(&m);
        }
    }
    long accepted = 0, refused = 0, no_msg = 0, roundtrip_bad = 0, stale_ok = 0;
    for (long i = 0; i < iters; i++) {
        int p = (int)(rnd() % 2);
        size_t len;
        char *in = mutate(seeds[p], &len);
        /* stale: changed, still ending in a digest where the writer puts it */
        long at = manifest_digest_at(in, len);
        int sealed =
            at > 0 && (size_t)at + 18 == len && in[len - 2] == '"' && in[len - 1] == '}';
        int changed = len != strlen(seeds[p]) || memcmp(in, seeds[p], len);
        int stale = sealed && changed && rnd() % 4 == 0;
        if (sealed && !stale)
            manifest_reseal(in, len);
        ck_manifest m;
        err[0] = 0;
        llmt_status s = llmt__ckpt_manifest_parse(in, len, p, &m, err, sizeof err);
        if (s == LLMT_OK) {
            accepted++;
            stale_ok += stale;
            if (stale)
                fprintf(stderr, "changed under its digest, accepted: %.*s\n", (int)len, in);
            char *t = llmt__ckpt_manifest_to_json(&m);
            ck_manifest m2;
            if (!t || llmt__ckpt_manifest_parse(t, strlen(t), p, &m2, err, sizeof err) != LLMT_OK)
                roundtrip_bad++;
            else {
                char *t2 = llmt__ckpt_manifest_to_json(&m2);
                if (!t2 || strcmp(t, t2))
                    roundtrip_bad++;
                free(t2);
                if (p) { /* a part merges on its own */
                    ck_manifest *pp = &m2, out;
                    if (llmt__ckpt_manifest_merge(&pp, 1, &out, err, sizeof err) == LLMT_OK)
                        llmt__ckpt_manifest_free(&out);
                }
                llmt__ckpt_manifest_free(&m2);
            }
            free(t);
            llmt__ckpt_manifest_free(&m);
        } else {
            refused++;
            if (!err[0] || strncmp(err, "manifest", 8))
                no_msg++;
        }
        free(in);
    }
    fprintf(stderr, "fuzz_manifest: %ld inputs, %ld accepted, %ld refused\n", iters, accepted,
            refused);
    CHECK_EQ_INT(no_msg, 0);
    CHECK_EQ_INT(roundtrip_bad, 0);
    CHECK_EQ_INT(stale_ok, 0); /* a changed manifest under its old digest */
    CHECK(refused > iters / 2);
    free(seeds[0]);
    free(seeds[1]);
    return check_exit("fuzz_manifest");
}
