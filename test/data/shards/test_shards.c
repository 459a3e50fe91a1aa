/* Token shards and datasets: round trips of both dtypes and of llm.c's
 * format (checked by an independent fread reader, as llm.c reads it),
 * the document index, directories and globs, corrupt files (each error
 * names the file and the byte offset), atomic writes, bad arguments. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"
#include "util.h"

static char *dir;

static void path_of(char *out, const char *name)
{
    snprintf(out, 4096, "%s/%s", dir, name);
}

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Our format, one dtype: counts, header fields, every token, the index. */
static void round_trip(int32_t vocab, uint32_t want_width)
{
    char p[4096];
    char name[64];
    snprintf(name, sizeof name, "rt-%d.tok", (int)vocab);
    path_of(p, name);
    llmt_shard_writer *w = NULL;
    CHECK_STATUS(llmt_shard_writer_create(NULL, p, vocab, &w), LLMT_OK);
    /* Documents of 0, 1, 5000 and 1234567 tokens: the biggest crosses
     * the writer's buffer several times; the top id of the vocabulary. */
    size_t lens[] = {3, 1, 0, 5000, 1234567, 7};
    size_t total = 0, nd = sizeof lens / sizeof *lens;
    for (size_t d = 0; d < nd; d++)
        total += lens[d];
    int32_t *ids = malloc(total * sizeof *ids);
    uint64_t seed = (uint64_t)vocab;
    for (size_t i = 0; i < total; i++)
        ids[i] = (int32_t)(tu_rng(&seed) % (uint64_t)vocab);
    ids[0] = vocab - 1;
    ids[total - 1] = 0;
    size_t at = 0;
    for (size_t d = 0; d < nd; d++) {
        CHECK_STATUS(llmt_shard_writer_add(w, ids + at, lens[d]), LLMT_OK);
        at += lens[d];
    }
    int64_t nt = -1, ndoc = -1;
    CHECK_STATUS(llmt_shard_writer_count(w, &nt, &ndoc), LLMT_OK);
    CHECK_EQ_INT(nt, total);
    CHECK_EQ_INT(ndoc, nd);
    /* A bad id adds nothing. */
    int32_t badid[2] = {1, vocab};
    CHECK_STATUS(llmt_shard_writer_add(w, badid, 2), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_shard_writer_last_error(w), p) != NULL);
    badid[1] = -1;
    CHECK_STATUS(llmt_shard_writer_add(w, badid, 2), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_shard_writer_count(w, &nt, &ndoc), LLMT_OK);
    CHECK_EQ_INT(nt, total);
    CHECK_EQ_INT(ndoc, nd);
    CHECK_STATUS(llmt_shard_writer_finish(w), LLMT_OK);
    CHECK_STATUS(llmt_shard_writer_add(w, ids, 1), LLMT_ERR_STATE);
    CHECK_STATUS(llmt_shard_writer_finish(w), LLMT_ERR_STATE);
    llmt_shard_writer_destroy(w); /* finished: the file stays */
    CHECK(tu_exists(p));

    /* Raw bytes, as the format document describes them. */
    size_t size = 0;
    unsigned char *b = tu_slurp(p, &size);
    uint64_t tok_bytes = total * want_width;
    uint64_t idx_off = (128 + tok_bytes + 7) / 8 * 8;
    CHECK(size == idx_off + 8 * nd);
    CHECK(!memcmp(b, "LLMTTOK\0", 8));
    uint32_t f32;
    memcpy(&f32, b + 16, 4);
    CHECK_EQ_INT(f32, want_width);
    memcpy(&f32, b + 20, 4);
    CHECK_EQ_INT(f32, vocab);
    CHECK_EQ_INT(rd64(b + 24), total);
    CHECK_EQ_INT(rd64(b + 32), nd);
    CHECK_EQ_INT(rd64(b + 40), 128);
    CHECK_EQ_INT(rd64(b + 48), tok_bytes);
    CHECK_EQ_INT(rd64(b + 56), idx_off);
    CHECK_EQ_INT(rd64(b + 64), 8 * nd);
    int tok_ok = 1;
    for (size_t i = 0; i < total; i++) {
        uint32_t v = 0;
        memcpy(&v, b + 128 + i * want_width, want_width);
        tok_ok &= v == (uint32_t)ids[i];
    }
    CHECK(tok_ok);
    size_t start = 0;
    for (size_t d = 0; d < nd; d++) {
        CHECK_EQ_INT(rd64(b + idx_off + 8 * d), start);
        start += lens[d];
    }
    free(b);

    /* Through the dataset, verified. */
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, p, 1, &ds), LLMT_OK);
    llmt_dataset_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_STATUS(llmt_dataset_get_info(ds, &info), LLMT_OK);
    CHECK_EQ_INT(info.shards, 1);
    CHECK_EQ_INT(info.vocab_size, vocab);
    CHECK_EQ_INT(info.tokens, total);
    CHECK_EQ_INT(info.documents, nd);
    const char *sp = NULL;
    int64_t st = 0, sd = 0;
    CHECK_STATUS(llmt_dataset_shard(ds, 0, &sp, &st, &sd), LLMT_OK);
    CHECK(sp && !strcmp(sp, p));
    CHECK_EQ_INT(st, total);
    CHECK_EQ_INT(sd, nd);
    int32_t *back = malloc(total * sizeof *back);
    CHECK_STATUS(llmt_dataset_read(ds, 0, 0, back, total), LLMT_OK);
    CHECK(!memcmp(back, ids, total * sizeof *ids));
    /* Odd offsets and lengths (the vector loop's tail). */
    for (int64_t off = 1; off < 40; off += 3) {
        CHECK_STATUS(llmt_dataset_read(ds, 0, off, back, 37), LLMT_OK);
        CHECK(!memcmp(back, ids + off, 37 * sizeof *ids));
    }
    CHECK_STATUS(llmt_dataset_read(ds, 0, (int64_t)total, back, 0), LLMT_OK);
    CHECK_STATUS(llmt_dataset_read(ds, 0, (int64_t)total - 3, back, 4),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_dataset_last_error(ds), p) != NULL);
    CHECK_STATUS(llmt_dataset_read(ds, 0, -1, back, 1), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_dataset_read(ds, 1, 0, back, 1), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_dataset_shard(ds, -1, NULL, NULL, NULL), LLMT_ERR_INVALID_ARGUMENT);
    llmt_dataset_destroy(ds);
    free(back);
    free(ids);
}

/* llm.c's file: our writer, a reader that does what llm.c's dataloader.h
 * does (fread of int[256], then uint16), and the dataset. */
static void llmc_round_trip(void)
{
    char p[4096];
    path_of(p, "llmc.bin");
    size_t n = 300001;
    int32_t *ids = malloc(n * sizeof *ids);
    uint64_t seed = 5;
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)(tu_rng(&seed) % 65536);
    ids[0] = 65535;
    CHECK_STATUS(llmt_shard_write_llmc(NULL, p, ids, n), LLMT_OK);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    CHECK(!tu_exists(tmp));

    FILE *f = fopen(p, "rb");
    CHECK(f != NULL);
    if (f) {
        int header[256];
        CHECK_EQ_INT(fread(header, sizeof(int), 256, f), 256);
        CHECK_EQ_INT(header[0], 20240520);
        CHECK_EQ_INT(header[1], 1);
        CHECK_EQ_INT(header[2], n);
        int rest_zero = 1;
        for (int i = 3; i < 256; i++)
            rest_zero &= header[i] == 0;
        CHECK(rest_zero);
        uint16_t *t = malloc(n * sizeof *t);
        CHECK_EQ_INT(fread(t, sizeof *t, n, f), n);
        int same = 1;
        for (size_t i = 0; i < n; i++)
            same &= t[i] == (uint16_t)ids[i];
        CHECK(same);
        unsigned char extra;
        CHECK_EQ_INT(fread(&extra, 1, 1, f), 0); /* nothing after the tokens */
        free(t);
        fclose(f);
    }

    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, p, 1, &ds), LLMT_OK);
    llmt_dataset_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_STATUS(llmt_dataset_get_info(ds, &info), LLMT_OK);
    CHECK_EQ_INT(info.shards, 1);
    CHECK_EQ_INT(info.vocab_size, 0);
    CHECK_EQ_INT(info.tokens, n);
    CHECK_EQ_INT(info.documents, 1);
    int32_t *back = malloc(n * sizeof *back);
    CHECK_STATUS(llmt_dataset_read(ds, 0, 0, back, n), LLMT_OK);
    CHECK(!memcmp(back, ids, n * sizeof *ids));
    llmt_dataset_destroy(ds);
    free(back);

    /* An empty llm.c file is valid; ids that do not fit uint16 are not. */
    path_of(p, "llmc-empty.bin");
    CHECK_STATUS(llmt_shard_write_llmc(NULL, p, NULL, 0), LLMT_OK);
    size_t sz = 0;
    free(tu_slurp(p, &sz));
    CHECK_EQ_INT(sz, 1024);
    llmt_context *ctx = NULL;
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    path_of(p, "llmc-bad.bin");
    int32_t big[2] = {3, 65536};
    CHECK_STATUS(llmt_shard_write_llmc(ctx, p, big, 2), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "65536") != NULL);
    big[1] = -2;
    CHECK_STATUS(llmt_shard_write_llmc(ctx, p, big, 2), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(!tu_exists(p));
    CHECK_STATUS(llmt_shard_write_llmc(ctx, NULL, big, 2), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_shard_write_llmc(ctx, p, NULL, 2), LLMT_ERR_NULL_POINTER);
    llmt_context_destroy(ctx);
    free(ids);
}

/* Open `path` expecting `want`; the message must name the file and, when
 * `offset` is not NULL, hold "offset <offset>:". */
static void expect_bad(const char *path, int verify, llmt_status want, const char *offset,
                       const char *also)
{
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_dataset *ds = (llmt_dataset *)(uintptr_t)1;
    llmt_status s = llmt_dataset_open(ctx, path, verify, &ds);
    CHECK_STATUS(s, want);
    CHECK(ds == NULL);
    const char *m = llmt_context_last_error(ctx);
    CHECK(strstr(m, path) != NULL);
    if (offset) {
        char o[64];
        snprintf(o, sizeof o, "offset %s:", offset);
        CHECK(strstr(m, o) != NULL);
    }
    if (also)
        CHECK(strstr(m, also) != NULL);
    if (s != want || !strstr(m, path) || (offset && !strstr(m, offset)) ||
        (also && !strstr(m, also)))
        fprintf(stderr, "  message was: %s\n", m);
    llmt_context_destroy(ctx);
}

static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

/* Rewrite the header checksum after a deliberate edit, so the checks
 * behind it are reached. */
static void reseal(unsigned char *b);

static void corrupt(void)
{
    char good[4096], p[4096];
    path_of(good, "good.tok");
    int64_t nd = 0;
    free(tu_write_shard(good, 50257, 1000, 50, 9, &nd));
    size_t size = 0;
    unsigned char *b = tu_slurp(good, &size);
    unsigned char *c = malloc(size);
    CHECK(size == 128 + 2000 + 8 * (size_t)nd);

    /* Wrong magic. */
    path_of(p, "bad-magic.tok");
    memcpy(c, b, size);
    c[0] ^= 0x20;
    tu_spit(p, c, size);
    expect_bad(p, 0, LLMT_ERR_FORMAT, "0", "magic");

    /* Truncated at several offsets: inside the magic, the header, the
     * tokens, the index. */
    size_t cuts[] = {0, 3, 8, 64, 127, 128, 129, 1000, 2128, size - 8, size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        char name[64];
        snprintf(name, sizeof name, "cut-%zu.tok", cuts[i]);
        path_of(p, name);
        tu_spit(p, b, cuts[i]);
        expect_bad(p, 0, LLMT_ERR_FORMAT, NULL, NULL);
    }
    /* The message the format document quotes. */
    path_of(p, "cut-1000.tok");
    expect_bad(p, 0, LLMT_ERR_FORMAT, "24", "token count 1000 needs 2128 bytes but the file "
               "has 1000");
    path_of(p, "cut-64.tok");
    expect_bad(p, 0, LLMT_ERR_FORMAT, "64", "truncated header");

    /* A flipped bit in the tokens: only the checksum sees it. */
    path_of(p, "flip-token.tok");
    memcpy(c, b, size);
    c[128 + 777] ^= 0x04;
    tu_spit(p, c, size);
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, p, 0, &ds), LLMT_OK);
    llmt_dataset_destroy(ds);
    expect_bad(p, 1, LLMT_ERR_CHECKSUM, "128", "token data is corrupt");

    /* A flipped bit in the index: ordered check, then the checksum. */
    path_of(p, "flip-index.tok");
    memcpy(c, b, size);
    c[size - 8] ^= 0x01; /* the last document's start moves by one */
    tu_spit(p, c, size);
    expect_bad(p, 1, LLMT_ERR_CHECKSUM, NULL, "index is corrupt");
    memcpy(c, b, size);
    put64(c + 128 + 2000 + 8, 5000); /* document 1 past the end */
    tu_spit(p, c, size);
    char off[32];
    snprintf(off, sizeof off, "%d", 128 + 2000 + 8);
    expect_bad(p, 0, LLMT_ERR_FORMAT, off, "document 1 starts at token 5000");

    /* A flipped header field: the header checksum catches it. */
    path_of(p, "flip-header.tok");
    memcpy(c, b, size);
    c[24] ^= 0x01;
    tu_spit(p, c, size);
    expect_bad(p, 0, LLMT_ERR_CHECKSUM, "120", "header");
    /* The same field changed with a valid header checksum: the size check. */
    reseal(c);
    tu_spit(p, c, size);
    expect_bad(p, 0, LLMT_ERR_FORMAT, "48", "1001 tokens of 2 bytes are 2002");
    put64(c + 24, 5000);
    reseal(c);
    tu_spit(p, c, size);
    char msg[128];
    snprintf(msg, sizeof msg, "token count 5000 needs 10128 bytes but the file has %zu", size);
    expect_bad(p, 0, LLMT_ERR_FORMAT, "24", msg);
    /* Version, dtype and vocab fields, resealed. */
    memcpy(c, b, size);
    c[8] = 2;
    reseal(c);
    tu_spit(p, c, size);
    expect_bad(p, 0, LLMT_ERR_VERSION, "8", "version 2");
    memcpy(c, b, size);
    c[16] = 3;
    reseal(c);
    tu_spit(p, c, size);
    expect_bad(p, 0, LLMT_ERR_FORMAT, "16", "dtype 3");
    memcpy(c, b, size);
    put64(c + 20, 70000); /* also overwrites 4 bytes of n_tokens */
    memcpy(c + 24, b + 24, 8);
    reseal(c);
    tu_spit(p, c, size);
    expect_bad(p, 0, LLMT_ERR_FORMAT, "20", "vocab_size 70000");
    memcpy(c, b, size);
    c[100] = 1;
    reseal(c);
    tu_spit(p, c, size);
    expect_bad(p, 0, LLMT_ERR_FORMAT, "100", "reserved");

    /* llm.c files: version, size. */
    int32_t ids[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    path_of(p, "l.bin");
    CHECK_STATUS(llmt_shard_write_llmc(NULL, p, ids, 10), LLMT_OK);
    size_t ls = 0;
    unsigned char *lb = tu_slurp(p, &ls);
    tu_spit(p, lb, ls - 1);
    expect_bad(p, 0, LLMT_ERR_FORMAT, "8", "token count 10 needs 1044 bytes but the file "
               "has 1043");
    tu_spit(p, lb, 500);
    expect_bad(p, 0, LLMT_ERR_FORMAT, "500", "truncated llm.c header");
    lb[4] = 2;
    tu_spit(p, lb, ls);
    expect_bad(p, 0, LLMT_ERR_VERSION, "4", NULL);
    free(lb);

    /* A directory with a corrupt shard among good ones names the bad one. */
    char sub[4096], q[4200];
    path_of(sub, "mixed");
    mkdir(sub, 0755);
    snprintf(q, sizeof q, "%s/a.tok", sub);
    tu_spit(q, b, size);
    snprintf(q, sizeof q, "%s/b.tok", sub);
    tu_spit(q, b, size - 3);
    expect_bad(sub, 0, LLMT_ERR_FORMAT, NULL, "b.tok");

    free(c);
    free(b);
}

/* The checksum of bytes [0, 120) at 120, computed as the format document
 * says: xxhash64 with seed 0 (from the library's own writer: a fresh
 * shard's header is the oracle). */
#include <xxhash.h>
static void reseal(unsigned char *b)
{
    put64(b + 120, XXH64(b, 120, 0));
}

static void directories(void)
{
    char sub[4096], q[4200];
    path_of(sub, "set");
    mkdir(sub, 0755);
    int32_t *a, *c, ids[2000];
    snprintf(q, sizeof q, "%s/b.tok", sub);
    a = tu_write_shard(q, 50257, 3000, 100, 1, NULL);
    snprintf(q, sizeof q, "%s/a.tok", sub);
    c = tu_write_shard(q, 100000, 500, 100, 2, NULL);
    snprintf(q, sizeof q, "%s/c.bin", sub);
    for (int i = 0; i < 2000; i++)
        ids[i] = i * 7;
    CHECK_STATUS(llmt_shard_write_llmc(NULL, q, ids, 2000), LLMT_OK);
    /* Not shards: another extension, a writer's left-over PATH.tmp, a
     * hidden file, a sub-directory named like a shard. */
    snprintf(q, sizeof q, "%s/notes.txt", sub);
    tu_spit(q, "hello", 5);
    snprintf(q, sizeof q, "%s/d.tok.tmp", sub);
    tu_spit(q, "garbage", 7);
    snprintf(q, sizeof q, "%s/.e.tok", sub);
    tu_spit(q, "garbage", 7);
    snprintf(q, sizeof q, "%s/f.tok", sub);
    mkdir(q, 0755);

    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, sub, 1, &ds), LLMT_OK);
    llmt_dataset_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_STATUS(llmt_dataset_get_info(ds, &info), LLMT_OK);
    CHECK_EQ_INT(info.shards, 3);
    CHECK_EQ_INT(info.vocab_size, 100000);
    CHECK_EQ_INT(info.tokens, 5500);
    const char *names[3] = {"a.tok", "b.tok", "c.bin"};
    int64_t ntok[3] = {500, 3000, 2000};
    for (int i = 0; i < 3; i++) {
        const char *sp = NULL;
        int64_t t = 0;
        CHECK_STATUS(llmt_dataset_shard(ds, i, &sp, &t, NULL), LLMT_OK);
        CHECK(sp && strstr(sp, names[i]));
        CHECK_EQ_INT(t, ntok[i]);
    }
    int32_t back[3000];
    CHECK_STATUS(llmt_dataset_read(ds, 0, 0, back, 500), LLMT_OK);
    CHECK(!memcmp(back, c, 500 * sizeof *c));
    CHECK_STATUS(llmt_dataset_read(ds, 1, 0, back, 3000), LLMT_OK);
    CHECK(!memcmp(back, a, 3000 * sizeof *a));
    CHECK_STATUS(llmt_dataset_read(ds, 2, 0, back, 2000), LLMT_OK);
    CHECK(!memcmp(back, ids, 2000 * sizeof *ids));
    uint64_t fp = info.fingerprint;
    llmt_dataset_destroy(ds);

    /* A glob pattern. */
    snprintf(q, sizeof q, "%s/*.tok", sub);
    CHECK_STATUS(llmt_dataset_open(NULL, q, 0, &ds), LLMT_OK);
    CHECK_STATUS(llmt_dataset_get_info(ds, &info), LLMT_OK);
    CHECK_EQ_INT(info.shards, 2);
    CHECK(info.fingerprint != fp);
    llmt_dataset_destroy(ds);
    snprintf(q, sizeof q, "%s/*.none", sub);
    expect_bad(q, 0, LLMT_ERR_NOT_FOUND, NULL, "matches no shard");

    /* The fingerprint follows the contents, not the place. */
    char sub2[4096];
    path_of(sub2, "set2");
    mkdir(sub2, 0755);
    const char *files[3] = {"a.tok", "b.tok", "c.bin"};
    for (int i = 0; i < 3; i++) {
        size_t n = 0;
        snprintf(q, sizeof q, "%s/%s", sub, files[i]);
        unsigned char *bytes = tu_slurp(q, &n);
        snprintf(q, sizeof q, "%s/%s", sub2, files[i]);
        tu_spit(q, bytes, n);
        free(bytes);
    }
    CHECK_STATUS(llmt_dataset_open(NULL, sub2, 0, &ds), LLMT_OK);
    CHECK_STATUS(llmt_dataset_get_info(ds, &info), LLMT_OK);
    CHECK(info.fingerprint == fp);
    llmt_dataset_destroy(ds);
    /* One token of the llm.c file changed: another fingerprint. */
    ids[1999] = 1;
    snprintf(q, sizeof q, "%s/c.bin", sub2);
    CHECK_STATUS(llmt_shard_write_llmc(NULL, q, ids, 2000), LLMT_OK);
    CHECK_STATUS(llmt_dataset_open(NULL, sub2, 0, &ds), LLMT_OK);
    CHECK_STATUS(llmt_dataset_get_info(ds, &info), LLMT_OK);
    CHECK(info.fingerprint != fp);
    llmt_dataset_destroy(ds);

    /* An empty directory, one with only non-shards, a missing path. */
    path_of(q, "empty");
    mkdir(q, 0755);
    expect_bad(q, 0, LLMT_ERR_NOT_FOUND, NULL, "no *.tok or *.bin");
    path_of(q, "nothing-here");
    expect_bad(q, 0, LLMT_ERR_NOT_FOUND, NULL, NULL);
    free(a);
    free(c);
}

static void atomic(void)
{
    char p[4096], tmp[4200];
    path_of(p, "atomic.tok");
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    llmt_shard_writer *w = NULL;
    CHECK_STATUS(llmt_shard_writer_create(NULL, p, 256, &w), LLMT_OK);
    int32_t ids[1000];
    for (int i = 0; i < 1000; i++)
        ids[i] = i % 256;
    for (int i = 0; i < 600; i++)
        CHECK_STATUS(llmt_shard_writer_add(w, ids, 1000), LLMT_OK);
    CHECK(!tu_exists(p));
    CHECK(tu_exists(tmp));
    /* A reader never takes the partial file. */
    char dirpat[4200];
    snprintf(dirpat, sizeof dirpat, "%s/atomic*", dir);
    expect_bad(dirpat, 0, LLMT_ERR_NOT_FOUND, NULL, NULL);
    llmt_shard_writer_destroy(w);
    CHECK(!tu_exists(p));
    CHECK(!tu_exists(tmp));
    /* Finished: PATH, no PATH.tmp; an existing PATH is replaced whole. */
    CHECK_STATUS(llmt_shard_writer_create(NULL, p, 256, &w), LLMT_OK);
    CHECK_STATUS(llmt_shard_writer_add(w, ids, 10), LLMT_OK);
    CHECK_STATUS(llmt_shard_writer_finish(w), LLMT_OK);
    llmt_shard_writer_destroy(w);
    CHECK(tu_exists(p));
    CHECK(!tu_exists(tmp));
    CHECK_STATUS(llmt_shard_writer_create(NULL, p, 256, &w), LLMT_OK);
    CHECK_STATUS(llmt_shard_writer_add(w, ids, 20), LLMT_OK);
    llmt_shard_writer_destroy(w);
    size_t n = 0;
    free(tu_slurp(p, &n));
    CHECK_EQ_INT(n, 128 + 20 + 4 + 8); /* still the first file (padded) */
    /* An empty shard (no documents) is a valid file. */
    CHECK_STATUS(llmt_shard_writer_create(NULL, p, 256, &w), LLMT_OK);
    CHECK_STATUS(llmt_shard_writer_finish(w), LLMT_OK);
    llmt_shard_writer_destroy(w);
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, p, 1, &ds), LLMT_OK);
    llmt_dataset_destroy(ds);
}

static void bad_args(void)
{
    llmt_context *ctx = NULL;
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    llmt_shard_writer *w = NULL;
    char p[4096];
    path_of(p, "args.tok");
    CHECK_STATUS(llmt_shard_writer_create(ctx, NULL, 10, &w), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_shard_writer_create(ctx, p, 10, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_shard_writer_create(ctx, p, 0, &w), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "vocab_size") != NULL);
    CHECK_STATUS(llmt_shard_writer_create(ctx, "/nonexistent-dir/x.tok", 10, &w),
                 LLMT_ERR_IO);
    CHECK(strstr(llmt_context_last_error(ctx), "/nonexistent-dir/x.tok.tmp") != NULL);
    CHECK(w == NULL);
    CHECK_STATUS(llmt_shard_writer_add(NULL, NULL, 0), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_shard_writer_finish(NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_shard_writer_count(NULL, NULL, NULL), LLMT_ERR_NULL_POINTER);
    llmt_shard_writer_destroy(NULL);
    CHECK(llmt_shard_writer_last_error(NULL) != NULL);
    CHECK_STATUS(llmt_shard_writer_create(ctx, p, 10, &w), LLMT_OK);
    CHECK_STATUS(llmt_shard_writer_add(w, NULL, 3), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_shard_writer_add(w, NULL, 0), LLMT_OK); /* empty document */
    llmt_shard_writer_destroy(w);

    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(ctx, NULL, 0, &ds), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_dataset_open(ctx, p, 0, NULL), LLMT_ERR_NULL_POINTER);
    llmt_dataset_info info;
    CHECK_STATUS(llmt_dataset_get_info(NULL, &info), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_dataset_shard(NULL, 0, NULL, NULL, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_dataset_read(NULL, 0, 0, NULL, 0), LLMT_ERR_NULL_POINTER);
    llmt_dataset_destroy(NULL);
    CHECK(llmt_dataset_last_error(NULL) != NULL);
    path_of(p, "args2.tok");
    free(tu_write_shard(p, 10, 10, 3, 1, NULL));
    CHECK_STATUS(llmt_dataset_open(ctx, p, 0, &ds), LLMT_OK);
    CHECK_STATUS(llmt_dataset_get_info(ds, NULL), LLMT_ERR_NULL_POINTER);
    info.struct_size = 8;
    CHECK_STATUS(llmt_dataset_get_info(ds, &info), LLMT_ERR_STRUCT_SIZE);
    CHECK_STATUS(llmt_dataset_read(ds, 0, 0, NULL, 3), LLMT_ERR_NULL_POINTER);
    llmt_dataset_destroy(ds);
    llmt_context_destroy(ctx);
}

int main(void)
{
    dir = tu_mkdtemp();
    round_trip(50257, 2);
    round_trip(65536, 2);
    round_trip(65537, 4);
    round_trip(100000, 4);
    llmc_round_trip();
    corrupt();
    directories();
    atomic();
    bad_args();
    tu_rmtree(dir);
    free(dir);
    return check_exit("data-shards");
}
