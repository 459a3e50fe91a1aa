/* Bad input never crashes the data pipeline: a fuzz-style test of every
 * public reader of a file (doc/data.md, doc/formats/token-shard.md,
 * doc/tokenizers.md). Valid files are written, then mutated (truncated at
 * every offset, extended, header fields set to 0, -1, huge and
 * inconsistent values, bytes flipped with seeded streams, lines deleted,
 * doubled and rewritten) and fed to llmt_dataset_open (with and without
 * verify), the loader, llmt_tokenizer_load, llmt_tokenizer_load_gpt2,
 * llmt_loader_set_state / llmt_loader_ckpt_read and llmt_data_prepare.
 *
 * Every call must either fail with a message naming the file (or the
 * field), or succeed on an input that really is valid: a file that differs
 * from the shard written must fail verification; tokens a loader hands out
 * lie in [0, vocab_size); a tokenizer that loads encodes and decodes text
 * back byte for byte with ids below its vocabulary. Run under
 * AddressSanitizer (build with -Db_sanitize=address,undefined) any
 * out-of-bounds read, leak or overflow fails the run too. Deterministic
 * (fixed seeds); about 10 s (a minute under the sanitizers). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "check.h"
#include "llmtrain.h"

#include "../shards/util.h"

/* Case descriptions and paths are cut to their buffers on purpose. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

static char *dir;
static llmt_context *ctx;
static int reported;        /* failures so far */
static int report_max = 40; /* printed in detail ($LLMT_FUZZ_VERBOSE: all) */

/* A failed call's message must name `name` (a path or a field). */
static void named(llmt_status s, const char *msg, const char *name, const char *what)
{
    check_count++;
    if (s == LLMT_OK || !msg || !strstr(msg, name)) {
        check_failures++;
        if (reported++ < report_max)
            fprintf(stderr, "FAIL %s: status %d, message does not name \"%s\": %s\n", what,
                    (int)s, name, msg ? msg : "(null)");
    }
}

static void fail_case(const char *what, const char *why)
{
    check_count++;
    check_failures++;
    if (reported++ < report_max)
        fprintf(stderr, "FAIL %s: %s\n", what, why);
}

static void pass_case(void)
{
    check_count++;
}

static void quiet_log(void *user, llmt_log_level level, const char *module, const char *msg)
{
    (void)user, (void)level, (void)module, (void)msg;
}

/* ---- token shards and the loader ---------------------------------------- */

/* Every sample of the dataset through a loader: each token in [0, vocab)
 * (65536 for llm.c files, which carry no vocabulary), or a failure naming
 * the shard. Returns 0 when all came through. */
static int drain(llmt_dataset *ds, const char *path, int prefetch, const char *what)
{
    llmt_dataset_info info = {.struct_size = sizeof info};
    CHECK_STATUS(llmt_dataset_get_info(ds, &info), LLMT_OK);
    int64_t vocab = info.vocab_size > 0 ? info.vocab_size : 65536;
    llmt_loader_opts o;
    llmt_loader_opts_init(&o, sizeof o);
    o.seq_len = 4;
    o.micro_batch = 2;
    o.prefetch = prefetch;
    llmt_loader *l = NULL;
    llmt_status s = llmt_loader_create(ds, &o, &l);
    if (s != LLMT_OK) {
        named(s, llmt_dataset_last_error(ds), path, what);
        return -1;
    }
    int64_t spe = 0;
    llmt_loader_samples_per_epoch(l, &spe);
    int32_t in[8], tg[8];
    int rc = 0;
    for (int64_t k = 0; k < spe / 2 + 1; k++) {
        s = llmt_loader_next(l, in, tg, NULL);
        if (s != LLMT_OK) {
            named(s, llmt_loader_last_error(l), path, what);
            rc = -1;
            break;
        }
        for (int i = 0; i < 8; i++)
            if (in[i] < 0 || in[i] >= vocab || tg[i] < 0 || tg[i] >= vocab) {
                char why[160];
                snprintf(why, sizeof why, "the loader returned token %d/%d outside [0, %lld)",
                         (int)in[i], (int)tg[i], (long long)vocab);
                fail_case(what, why);
                rc = -1;
                k = spe;
                break;
            }
    }
    llmt_loader_destroy(l);
    /* llmt_dataset_read of the whole shard: the same rule. */
    int64_t nt = 0;
    llmt_dataset_shard(ds, 0, NULL, &nt, NULL);
    int32_t *buf = malloc((size_t)(nt ? nt : 1) * sizeof *buf);
    s = llmt_dataset_read(ds, 0, 0, buf, (size_t)nt);
    if (s != LLMT_OK) {
        named(s, llmt_dataset_last_error(ds), path, what);
        rc = -1;
    } else {
        for (int64_t i = 0; i < nt; i++)
            if (buf[i] < 0 || buf[i] >= vocab) {
                fail_case(what, "llmt_dataset_read returned a token outside the vocabulary");
                rc = -1;
                break;
            }
    }
    free(buf);
    return rc;
}

static uint64_t get_le(const unsigned char *p, int width);

/* The shard being mutated, for only_vocab_changed. */
static const unsigned char *g_orig;
static size_t g_orig_n;

/* A header that differs from the original only by another vocab_size that
 * fits the dtype and is above every token (checksum recomputed) is a valid
 * shard: no reader can tell it from one written for that vocabulary. */
static int only_vocab_changed(const unsigned char *b, size_t n)
{
    if (!g_orig || n != g_orig_n || memcmp(b + 128, g_orig + 128, n - 128) ||
        memcmp(b, g_orig, 20) || memcmp(b + 24, g_orig + 24, 96) ||
        XXH64(b, 120, 0) != (uint64_t)get_le(b + 120, 8))
        return 0;
    uint32_t width = (uint32_t)get_le(b + 16, 4);
    int64_t v = (int32_t)get_le(b + 20, 4), nt = (int64_t)get_le(b + 24, 8);
    if (v < 1 || (width == 2 && v > 65536))
        return 0;
    for (int64_t i = 0; i < nt; i++)
        if ((int64_t)get_le(b + 128 + (size_t)i * width, (int)width) >= v)
            return 0;
    return 1;
}

/* Write `b` to path and open it both ways. changed: the bytes differ from
 * the file the writer produced, so verification must refuse them. Returns
 * 1 when the unverified open and the loader accepted the file. */
static int probe_shard(const char *path, const unsigned char *b, size_t n, int changed,
                       int must_fail_unverified, const char *what)
{
    tu_spit(path, b, n);
    if (changed && only_vocab_changed(b, n))
        changed = must_fail_unverified = 0;
    llmt_dataset *ds = NULL;
    llmt_status s = llmt_dataset_open(ctx, path, 1, &ds);
    if (s != LLMT_OK)
        named(s, llmt_context_last_error(ctx), path, what);
    else if (changed)
        fail_case(what, "a changed shard passed llmt_dataset_open with verify");
    else
        pass_case();
    llmt_dataset_destroy(ds);
    ds = NULL;
    s = llmt_dataset_open(ctx, path, 0, &ds);
    if (s != LLMT_OK) {
        named(s, llmt_context_last_error(ctx), path, what);
        return 0;
    }
    if (must_fail_unverified)
        fail_case(what, "llmt_dataset_open without verify accepted it");
    int ok = drain(ds, path, (int)(n % 3), what) == 0;
    llmt_dataset_destroy(ds);
    return ok;
}

static void put_le(unsigned char *p, uint64_t v, int width)
{
    for (int i = 0; i < width; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int width)
{
    uint64_t v = 0;
    for (int i = 0; i < width; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void reseal(unsigned char *b)
{
    uint64_t h = XXH64(b, 120, 0);
    memcpy(b + 120, &h, 8);
}

/* Values a size or count field is set to; orig-relative ones added below. */
static const uint64_t field_values[] = {0,
                                        1,
                                        2,
                                        3,
                                        4,
                                        7,
                                        8,
                                        127,
                                        128,
                                        129,
                                        0x7fffffffu,
                                        0x80000000u,
                                        0xffffffffu,
                                        UINT64_C(0x100000000),
                                        UINT64_C(1) << 56,
                                        (UINT64_C(1) << 56) + 1,
                                        UINT64_C(1) << 62,
                                        UINT64_C(1) << 63,
                                        UINT64_MAX,
                                        UINT64_MAX - 7};

static void fuzz_ours(int32_t vocab, int64_t n_tokens, uint64_t seed)
{
    char path[4400], what[200];
    snprintf(path, sizeof path, "%s/ours-%d.tok", dir, (int)vocab);
    free(tu_write_shard(path, vocab, n_tokens, 23, seed, NULL));
    size_t n = 0;
    unsigned char *orig = tu_slurp(path, &n);
    unsigned char *b = malloc(n + 64);
    g_orig = orig;
    g_orig_n = n;
    CHECK(probe_shard(path, orig, n, 0, 0, "the valid shard") == 1);

    /* 1. truncated at every length, and extended */
    for (size_t k = 0; k < n; k++) {
        snprintf(what, sizeof what, "shard (vocab %d) truncated to %zu of %zu bytes",
                 (int)vocab, k, n);
        probe_shard(path, orig, k, 1, 1, what);
    }
    for (size_t k = 1; k <= 16; k++) {
        memcpy(b, orig, n);
        memset(b + n, k == 8 ? 0 : (int)k, k);
        snprintf(what, sizeof what, "shard extended by %zu bytes", k);
        probe_shard(path, b, n + k, 1, 1, what);
    }

    /* 2. every header field set to boundary and inconsistent values, with
     * the header checksum recomputed (so the field's own check must catch
     * it) and without */
    static const struct {
        int off, width;
    } fields[] = {{8, 4},  {12, 4}, {16, 4}, {20, 4}, {24, 8}, {32, 8}, {40, 8},  {48, 8},
                  {56, 8}, {64, 8}, {72, 8}, {80, 8}, {88, 8}, {96, 8}, {104, 8}, {112, 8}};
    for (size_t f = 0; f < sizeof fields / sizeof *fields; f++) {
        int off = fields[f].off, w = fields[f].width;
        uint64_t o = get_le(orig + off, w);
        uint64_t vals[64];
        size_t nv = 0;
        for (size_t i = 0; i < sizeof field_values / sizeof *field_values; i++)
            vals[nv++] = field_values[i];
        vals[nv++] = o + 1;
        vals[nv++] = o - 1;
        vals[nv++] = o * 2;
        vals[nv++] = o / 2;
        vals[nv++] = o + 8;
        vals[nv++] = o - 8;
        vals[nv++] = o ^ (UINT64_C(1) << 40);
        for (size_t i = 0; i < nv; i++) {
            uint64_t v = w == 4 ? (uint32_t)vals[i] : vals[i];
            if (v == o)
                continue;
            /* Changing a checksum field is caught only by verify; the
             * rest by the open itself. */
            int sums = off == 72 || off == 80;
            for (int rs = 0; rs < 2; rs++) {
                memcpy(b, orig, n);
                put_le(b + off, v, w);
                if (rs)
                    reseal(b);
                snprintf(what, sizeof what,
                         "shard (vocab %d): header offset %d set to %" PRIu64 "%s", (int)vocab,
                         off, v, rs ? " (header checksum recomputed)" : "");
                /* A smaller vocab_size is a consistent header: only the
                 * tokens above it (read, or verified) show it is wrong. */
                probe_shard(path, b, n, 1, !((sums || off == 20) && rs), what);
            }
        }
    }

    /* 3. the document index: decreasing, not starting at 0, past the end */
    uint64_t idx_off = get_le(orig + 56, 8), n_docs = get_le(orig + 32, 8);
    uint64_t idx_vals[] = {1, (uint64_t)n_tokens + 1, UINT64_MAX, UINT64_C(1) << 63};
    for (uint64_t d = 0; d < n_docs; d += (n_docs > 4 ? n_docs / 4 : 1))
        for (size_t i = 0; i < sizeof idx_vals / sizeof *idx_vals; i++) {
            memcpy(b, orig, n);
            uint64_t v = d == 0 ? idx_vals[i] : (i == 0 ? 0 : idx_vals[i]);
            put_le(b + idx_off + 8 * d, v, 8);
            if (!memcmp(b, orig, n))
                continue;
            snprintf(what, sizeof what, "shard: index entry %" PRIu64 " set to %" PRIu64, d, v);
            /* (an entry equal to the one before is an empty document) */
            probe_shard(path, b, n, 1, 0, what);
        }

    /* 4. token ids at or above the vocabulary (only verify sees the
     * checksum; the loader must not hand them out) */
    uint32_t width = (uint32_t)get_le(orig + 16, 4);
    uint64_t bad_ids[] = {(uint64_t)vocab, (uint64_t)vocab + 1, 0xffff,
                          0x7fffffff,      0x80000000u,         0xffffffffu};
    for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
        uint64_t v = width == 2 ? (bad_ids[i] & 0xffff) : bad_ids[i];
        if (v < (uint64_t)vocab)
            continue;
        for (int64_t at = 0; at < n_tokens; at += n_tokens / 3) {
            memcpy(b, orig, n);
            put_le(b + 128 + (size_t)at * width, v, (int)width);
            snprintf(what, sizeof what, "shard (vocab %d): token %lld set to id %" PRIu64,
                     (int)vocab, (long long)at, v);
            if (probe_shard(path, b, n, 1, 0, what))
                fail_case(what, "an id outside the vocabulary was read without error");
        }
    }

    /* 5. seeded byte flips anywhere (half of the header ones resealed) */
    uint64_t rs = seed ^ 0xf1195;
    for (int k = 0; k < 1500; k++) {
        memcpy(b, orig, n);
        size_t at = (size_t)(tu_rng(&rs) % n);
        unsigned char x = (unsigned char)(1 + tu_rng(&rs) % 255);
        b[at] ^= x;
        int rsl = at < 120 && (tu_rng(&rs) & 1);
        if (rsl)
            reseal(b);
        snprintf(what, sizeof what, "shard (vocab %d): byte %zu xor 0x%02x%s", (int)vocab, at,
                 x, rsl ? " (resealed)" : "");
        probe_shard(path, b, n, 1, 0, what);
    }
    g_orig = NULL;
    free(b);
    free(orig);
    unlink(path);
}

/* llm.c's token file: exact size, magic, version, count. */
static void fuzz_llmc(void)
{
    char path[4400], what[200];
    snprintf(path, sizeof path, "%s/llmc.bin", dir);
    int32_t ids[201];
    uint64_t sd = 11;
    for (int i = 0; i < 201; i++)
        ids[i] = (int32_t)(tu_rng(&sd) % 50257);
    CHECK_STATUS(llmt_shard_write_llmc(ctx, path, ids, 201), LLMT_OK);
    size_t n = 0;
    unsigned char *orig = tu_slurp(path, &n);
    unsigned char *b = malloc(n + 64);
    CHECK(probe_shard(path, orig, n, 0, 0, "the valid llm.c file") == 1);
    for (size_t k = 0; k < n; k++) {
        snprintf(what, sizeof what, "llm.c file truncated to %zu of %zu bytes", k, n);
        tu_spit(path, orig, k);
        llmt_dataset *ds = NULL;
        llmt_status s = llmt_dataset_open(ctx, path, 0, &ds);
        named(s, llmt_context_last_error(ctx), path, what);
        llmt_dataset_destroy(ds);
    }
    for (size_t k = 1; k <= 4; k++) {
        memcpy(b, orig, n);
        memset(b + n, 0, k);
        snprintf(what, sizeof what, "llm.c file extended by %zu bytes", k);
        probe_shard(path, b, n + k, 1, 1, what);
    }
    /* magic, version and count: every value but the right one fails */
    int64_t vals[] = {0,   1,   2,         -1,        200,      202,
                      100, 402, INT32_MAX, INT32_MIN, 20240520, 20240801};
    for (int f = 0; f < 3; f++)
        for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
            memcpy(b, orig, n);
            put_le(b + 4 * f, (uint64_t)(uint32_t)vals[i], 4);
            if (!memcmp(b, orig, 12))
                continue;
            snprintf(what, sizeof what, "llm.c header int %d set to %lld", f,
                     (long long)vals[i]);
            probe_shard(path, b, n, 1, 1, what);
        }
    /* llm.c's own reader ignores header[3..255] and has no checksum: token
     * flips read as other (in-range uint16) tokens; nothing may crash */
    uint64_t rs = 99;
    for (int k = 0; k < 300; k++) {
        memcpy(b, orig, n);
        size_t at = (size_t)(tu_rng(&rs) % n);
        b[at] ^= (unsigned char)(1 + tu_rng(&rs) % 255);
        snprintf(what, sizeof what, "llm.c file: byte %zu flipped", at);
        tu_spit(path, b, n);
        llmt_dataset *ds = NULL;
        llmt_status s = llmt_dataset_open(ctx, path, 1, &ds);
        if (s != LLMT_OK)
            named(s, llmt_context_last_error(ctx), path, what);
        else if (at < 12)
            fail_case(what, "a changed llm.c header was accepted");
        else
            drain(ds, path, 0, what);
        llmt_dataset_destroy(ds);
    }
    free(b);
    free(orig);
    unlink(path);
}

/* ---- tokenizer files ---------------------------------------------------- */

static const char sample_text[] =
    "Hello world, the quick brown fox jumps over the lazy dog. Don't stop: 12345 "
    "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \xff\xfe\x00 tabs\tand\r\nlines  "
    "end ";

/* A tokenizer that loaded must be usable: ids below its vocabulary and
 * decode(encode(x)) == x. */
static void check_usable(llmt_tokenizer *t, const char *what)
{
    int32_t V = 0, eot = -1;
    llmt_tokenizer_vocab_size(t, &V);
    llmt_tokenizer_eot(t, &eot);
    if (V < 257 || eot < 0 || eot >= V) {
        fail_case(what, "loaded with a vocabulary below 257 or eot outside it");
        return;
    }
    size_t len = sizeof sample_text - 1, n = 0;
    int32_t ids[sizeof sample_text];
    llmt_status s = llmt_tokenizer_encode(t, sample_text, len, ids, len, &n);
    if (s != LLMT_OK) {
        fail_case(what, "a loaded tokenizer failed to encode");
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V || ids[i] == eot) {
            fail_case(what, "encode gave an id outside the vocabulary (or eot)");
            return;
        }
    char back[sizeof sample_text * 2];
    size_t bl = 0;
    s = llmt_tokenizer_decode(t, ids, n, back, sizeof back, &bl);
    if (s != LLMT_OK || bl != len || memcmp(back, sample_text, len))
        fail_case(what, "decode(encode(x)) != x");
    else
        pass_case();
}

static void probe_tok(const char *path, const void *b, size_t n, int must_fail,
                      const char *what)
{
    tu_spit(path, b, n);
    llmt_tokenizer *t = NULL;
    llmt_status s = llmt_tokenizer_load(ctx, path, &t);
    if (s != LLMT_OK) {
        named(s, llmt_context_last_error(ctx), path, what);
        return;
    }
    if (must_fail)
        fail_case(what, "llmt_tokenizer_load accepted it");
    check_usable(t, what);
    llmt_tokenizer_destroy(t);
}

/* Lines of a text file (pointers into a copy, '\n' replaced by NUL). */
typedef struct lines {
    char *buf;
    char **v;
    size_t n;
} lines;

static lines split_lines(const unsigned char *b, size_t n)
{
    lines L = {malloc(n + 1), malloc((n + 1) * sizeof(char *)), 0};
    memcpy(L.buf, b, n);
    L.buf[n] = 0;
    char *p = L.buf;
    while (*p) {
        L.v[L.n++] = p;
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = 0;
        p = nl + 1;
    }
    return L;
}

/* The file again with line `skip` replaced by `repl` (NULL: deleted) and,
 * when dup, line `skip` written twice. Returns the length. */
static size_t join_lines(const lines *L, size_t skip, const char *repl, int dup, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < L->n; i++) {
        const char *l = i == skip && !dup ? repl : L->v[i];
        for (int r = 0; r < (i == skip && dup ? 2 : 1); r++) {
            if (!l)
                continue;
            size_t ll = strlen(l);
            memcpy(out + k, l, ll);
            k += ll;
            out[k++] = '\n';
        }
    }
    return k;
}

static void fuzz_tokenizer_file(void)
{
    char path[4400], what[200];
    snprintf(path, sizeof path, "%s/tok.bin", dir);
    /* a small trained BPE: bytes, merges, eot */
    static char corpus[20000];
    size_t cl = 0;
    uint64_t sd = 5;
    static const char *words[] = {"the ",    "then ",   "there ", "other ", "hello ", "help ",
                                  "yellow ", "fellow ", "12 ",    "123 ",   ", ",     ". "};
    while (cl < sizeof corpus - 16) {
        const char *w = words[tu_rng(&sd) % 12];
        memcpy(corpus + cl, w, strlen(w));
        cl += strlen(w);
    }
    llmt_tokenizer *t = NULL;
    CHECK_STATUS(llmt_tokenizer_train_bpe(ctx, corpus, cl, 300, &t), LLMT_OK);
    CHECK_STATUS(llmt_tokenizer_save(t, path), LLMT_OK);
    llmt_tokenizer_destroy(t);
    size_t n = 0;
    unsigned char *orig = tu_slurp(path, &n);
    char *b = malloc(2 * n + 256);
    probe_tok(path, orig, n, 0, "the valid tokenizer file");

    /* truncated at every byte: only dropping the final newline keeps it valid */
    for (size_t k = 0; k + 1 < n; k++) {
        snprintf(what, sizeof what, "tokenizer file truncated to %zu of %zu bytes", k, n);
        probe_tok(path, orig, k, 1, what);
    }
    /* each line deleted, doubled, emptied, and its numbers rewritten */
    lines L = split_lines(orig, n);
    static const char *const nums[] = {
        "-1",  "0",   "256",        "257",        "299",
        "300", "301", "2147483647", "2147483648", "99999999999999999999",
        "1x",  " 1",  "+1",         "0x10",       ""};
    for (size_t i = 0; i < L.n; i++) {
        for (int op = 0; op < 3; op++) {
            size_t k = join_lines(&L, i, op == 2 ? "" : NULL, op == 1, b);
            snprintf(what, sizeof what, "tokenizer file: line %zu %s", i + 1,
                     op == 0   ? "deleted"
                     : op == 1 ? "doubled"
                               : "emptied");
            probe_tok(path, b, k, 1, what);
        }
        /* numbers: in the header lines and a sample of the merges */
        int is_merge = strchr(L.v[i], ' ') && L.v[i][0] >= '0' && L.v[i][0] <= '9';
        if (i >= 8 && !(is_merge && i % 5 == 0) && i > 0 && L.v[i][0] != 'm')
            continue;
        for (size_t v = 0; v < sizeof nums / sizeof *nums; v++) {
            char line[256];
            const char *sp = strrchr(L.v[i], ' ');
            if (!sp)
                continue;
            for (int field = 0; field < (is_merge ? 4 : 1); field++) {
                if (is_merge) {
                    long f[4];
                    sscanf(L.v[i], "%ld %ld %ld %ld", &f[0], &f[1], &f[2], &f[3]);
                    char fs[4][40];
                    for (int j = 0; j < 4; j++)
                        snprintf(fs[j], sizeof fs[j], "%ld", f[j]);
                    snprintf(fs[field], sizeof fs[field], "%s", nums[v]);
                    snprintf(line, sizeof line, "%s %s %s %s", fs[0], fs[1], fs[2], fs[3]);
                } else {
                    snprintf(line, sizeof line, "%.*s %s", (int)(sp - L.v[i]), L.v[i], nums[v]);
                }
                if (!strcmp(line, L.v[i]))
                    continue;
                size_t k = join_lines(&L, i, line, 0, b);
                snprintf(what, sizeof what, "tokenizer file: line %zu \"%s\" -> \"%s\"", i + 1,
                         L.v[i], line);
                /* A rank raised or lowered may still be valid (non-decreasing). */
                probe_tok(path, b, k, 0, what);
            }
        }
    }
    /* token lines: odd length, upper case, not hex, another token's bytes */
    static const char *const toks[] = {
        "0", "0A", "zz", "000", "00", "41", "4142", "3c7c656e646f66746578747c3e", "ffff"};
    for (size_t i = 5; i < L.n && i < 5 + 300; i += 7)
        for (size_t v = 0; v < sizeof toks / sizeof *toks; v++) {
            size_t k = join_lines(&L, i, toks[v], 0, b);
            snprintf(what, sizeof what, "tokenizer file: token line %zu set to %s", i + 1,
                     toks[v]);
            probe_tok(path, b, k, 0, what);
        }
    /* seeded byte flips, NUL bytes and CRLF line ends */
    uint64_t rs = 17;
    for (int k = 0; k < 800; k++) {
        memcpy(b, orig, n);
        size_t at = (size_t)(tu_rng(&rs) % n);
        b[at] = (char)(k % 4 == 0 ? 0 : (b[at] ^ (char)(1 + tu_rng(&rs) % 255)));
        snprintf(what, sizeof what, "tokenizer file: byte %zu changed", at);
        probe_tok(path, b, n, 0, what);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (orig[i] == '\n')
            b[k++] = '\r';
        b[k++] = (char)orig[i];
    }
    probe_tok(path, b, k, 1, "tokenizer file with CRLF line ends");
    /* llm.c's tokenizer.bin (magic 20240328) and other non-files */
    int32_t hdr[256] = {20240328, 2, 50257, 50256};
    memcpy(b, hdr, sizeof hdr);
    memcpy(b + sizeof hdr, "\x01!\x01\"", 4);
    probe_tok(path, b, sizeof hdr + 4, 1, "llm.c's tokenizer.bin");
    if (!strstr(llmt_context_last_error(ctx), "llm.c"))
        fail_case("llm.c's tokenizer.bin", "the message does not say it is llm.c's file");
    probe_tok(path, "", 0, 1, "an empty tokenizer file");
    /* counts far beyond the file: refused before the arrays they size */
    static const char huge[] = "llmtrain-tokenizer 1\nkind bpe\nvocab_size 16777216\neot 0\n"
                               "tokens 16777216\n00\n01\n";
    probe_tok(path, huge, sizeof huge - 1, 1, "tokenizer file claiming 2^24 tokens");
    if (!strstr(llmt_context_last_error(ctx), "rest of the file"))
        fail_case("tokenizer file claiming 2^24 tokens",
                  "not refused from the file size before allocating");
    /* not regular files: /dev/zero never ends, a FIFO never opens */
    char fifo[4400];
    snprintf(fifo, sizeof fifo, "%s/tok.fifo", dir);
    CHECK(mkfifo(fifo, 0644) == 0);
    const char *special[] = {"/dev/zero", fifo};
    for (int i = 0; i < 2; i++) {
        llmt_tokenizer *t3 = NULL;
        snprintf(what, sizeof what, "%s as tokenizer file", special[i]);
        named(llmt_tokenizer_load(ctx, special[i], &t3), llmt_context_last_error(ctx),
              special[i], what);
        char enc[4400];
        snprintf(enc, sizeof enc, "%s/encoder.json", dir);
        named(llmt_tokenizer_load_gpt2(ctx, special[i], enc, &t3), llmt_context_last_error(ctx),
              special[i], what);
    }
    unlink(fifo);
    llmt_tokenizer *t2 = NULL;
    llmt_status s = llmt_tokenizer_load(ctx, dir, &t2);
    named(s, llmt_context_last_error(ctx), dir, "a directory as tokenizer file");
    free(L.buf);
    free(L.v);
    free(b);
    free(orig);
    unlink(path);
}

/* ---- GPT-2 encoder.json + vocab.bpe ------------------------------------- */

/* GPT-2's printable stand-in of byte b as UTF-8 (bytes_to_unicode). */
static size_t byte_char(int b, char *out)
{
    int printable =
        (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    unsigned cp = (unsigned)b;
    if (!printable) {
        int n = 0;
        for (int x = 0; x < b; x++) {
            int p =
                (x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff);
            n += !p;
        }
        cp = 256u + (unsigned)n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

/* A small encoder.json + vocab.bpe pair in GPT-2's format (256 bytes, the
 * merges below, <|endoftext|> last). */
static void write_small_gpt2(const char *enc, const char *bpe)
{
    static const char *const merges[][2] = {{"h", "e"},    {"l", "l"}, {"he", "ll"},
                                            {"hell", "o"}, {"Ġ", "t"}, {"Ġt", "he"},
                                            {"o", "r"},    {"w", "or"}};
    FILE *f = fopen(enc, "wb");
    fputs("{", f);
    for (int b = 0; b < 256; b++) {
        char c[3] = {0};
        byte_char(b, c);
        if (c[0] == '"' || c[0] == '\\')
            fprintf(f, "\"\\%s\": %d, ", c, b);
        else
            fprintf(f, "\"%s\": %d, ", c, b);
    }
    int nm = (int)(sizeof merges / sizeof *merges);
    for (int m = 0; m < nm; m++)
        fprintf(f, "\"%s%s\": %d, ", merges[m][0], merges[m][1], 256 + m);
    fprintf(f, "\"<|endoftext|>\": %d}", 256 + nm);
    fclose(f);
    f = fopen(bpe, "wb");
    fputs("#version: 0.2\n", f);
    for (int m = 0; m < nm; m++)
        fprintf(f, "%s %s\n", merges[m][0], merges[m][1]);
    fclose(f);
}

static void probe_gpt2(const char *enc, const char *bpe, const char *bad_file, int must_fail,
                       const char *what)
{
    llmt_tokenizer *t = NULL;
    llmt_status s = llmt_tokenizer_load_gpt2(ctx, enc, bpe, &t);
    if (s != LLMT_OK) {
        named(s, llmt_context_last_error(ctx), bad_file, what);
        return;
    }
    if (must_fail)
        fail_case(what, "llmt_tokenizer_load_gpt2 accepted it");
    check_usable(t, what);
    llmt_tokenizer_destroy(t);
}

static void fuzz_gpt2(void)
{
    char enc[4400], bpe[4400], what[200];
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    write_small_gpt2(enc, bpe);
    size_t en = 0, bn = 0;
    unsigned char *eo = tu_slurp(enc, &en), *bo = tu_slurp(bpe, &bn);
    char *b = malloc(en + bn + 256);
    probe_gpt2(enc, bpe, enc, 0, "the valid small GPT-2 files");
    for (size_t k = 0; k + 1 < en; k++) {
        tu_spit(enc, eo, k);
        snprintf(what, sizeof what, "encoder.json truncated to %zu of %zu bytes", k, en);
        probe_gpt2(enc, bpe, enc, 1, what);
    }
    tu_spit(enc, eo, en);
    /* vocab.bpe cut anywhere: a missing merge leaves a token of the
     * encoder unreachable, which must not pass as a smaller vocabulary */
    for (size_t k = 0; k + 1 < bn; k++) {
        tu_spit(bpe, bo, k);
        snprintf(what, sizeof what, "vocab.bpe truncated to %zu of %zu bytes", k, bn);
        probe_gpt2(enc, bpe, bpe, 1, what);
    }
    tu_spit(bpe, bo, bn);
    uint64_t rs = 23;
    for (int k = 0; k < 400; k++) {
        int which = k & 1;
        const unsigned char *o = which ? bo : eo;
        size_t n = which ? bn : en;
        memcpy(b, o, n);
        size_t at = (size_t)(tu_rng(&rs) % n);
        b[at] ^= (char)(1 + tu_rng(&rs) % 255);
        tu_spit(which ? bpe : enc, b, n);
        snprintf(what, sizeof what, "%s: byte %zu flipped",
                 which ? "vocab.bpe" : "encoder.json", at);
        probe_gpt2(enc, bpe, which ? bpe : enc, 0, what);
        tu_spit(which ? bpe : enc, o, n);
    }
    /* ids out of range, repeated, fractional, not numbers */
    static const char *const idv[] = {"-1", "1e10", "1.5", "\"x\"",    "null",
                                      "0",  "264",  "265", "16777216", "2147483648"};
    for (size_t v = 0; v < sizeof idv / sizeof *idv; v++) {
        const char *at = strstr((const char *)eo, "\"hell\": ");
        size_t pre = (size_t)(at - (const char *)eo) + 8;
        const char *rest = strchr(at + 8, ',');
        size_t k = 0;
        memcpy(b, eo, pre);
        k = pre;
        memcpy(b + k, idv[v], strlen(idv[v]));
        k += strlen(idv[v]);
        memcpy(b + k, rest, en - (size_t)(rest - (const char *)eo));
        k += en - (size_t)(rest - (const char *)eo);
        tu_spit(enc, b, k);
        snprintf(what, sizeof what, "encoder.json: id of \"hell\" set to %s", idv[v]);
        probe_gpt2(enc, bpe, enc, 1, what);
    }
    tu_spit(enc, eo, en);
    /* the real files, cut at a few places */
    const char *real = "/work/shared/data/gpt2-tokenizer";
    const char *env = getenv("LLMT_GPT2_DIR");
    char re[4400], rb[4400];
    snprintf(re, sizeof re, "%s/encoder.json", env && *env ? env : real);
    snprintf(rb, sizeof rb, "%s/vocab.bpe", env && *env ? env : real);
    size_t rbn = 0;
    unsigned char *rbo = tu_slurp(rb, &rbn);
    if (rbo && tu_exists(re)) {
        probe_gpt2(re, rb, rb, 0, "GPT-2's own files");
        size_t cuts[] = {rbn - 1, rbn - 2, rbn - 40, rbn / 2, 40, 3};
        for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
            tu_spit(bpe, rbo, cuts[c]);
            snprintf(what, sizeof what, "GPT-2's vocab.bpe cut to %zu of %zu bytes", cuts[c],
                     rbn);
            /* cutting only the final newline keeps every merge */
            probe_gpt2(re, bpe, bpe, c > 0, what);
        }
    } else {
        fprintf(stderr, "note: %s not found, GPT-2's own files not cut\n", rb);
    }
    free(rbo);
    free(b);
    free(eo);
    free(bo);
}

/* ---- loader state ------------------------------------------------------- */

static void fuzz_loader_state(void)
{
    char path[4400], root[4400], what[200];
    snprintf(path, sizeof path, "%s/state.tok", dir);
    free(tu_write_shard(path, 500, 4001, 40, 3, NULL));
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(ctx, path, 1, &ds), LLMT_OK);
    llmt_loader_opts o;
    llmt_loader_opts_init(&o, sizeof o);
    o.seq_len = 16;
    o.micro_batch = 2;
    o.prefetch = 1;
    llmt_loader *l = NULL;
    CHECK_STATUS(llmt_loader_create(ds, &o, &l), LLMT_OK);
    llmt_loader_state good = {.struct_size = sizeof good};
    CHECK_STATUS(llmt_loader_get_state(l, &good), LLMT_OK);
    int64_t spe = good.samples_per_epoch;
    int32_t in[32], tg[32];
    const int64_t vals[] = {-1,
                            0,
                            1,
                            spe - 1,
                            spe,
                            spe + 1,
                            INT64_MAX,
                            INT64_MIN,
                            INT64_MAX / 2,
                            INT64_MAX / spe,
                            INT64_MAX / spe + 1};
    for (int f = 0; f < 4; f++)
        for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
            llmt_loader_state st = good;
            int64_t *field = f == 0 ? &st.epoch : f == 1 ? &st.cursor : &st.samples_per_epoch;
            if (f == 3)
                st.fingerprint ^= (uint64_t)vals[i] | 1;
            else
                *field = vals[i];
            static const char *const fname[] = {"epoch", "cursor", "samples per epoch",
                                                "fingerprint"};
            llmt_status s = llmt_loader_set_state(l, &st);
            snprintf(what, sizeof what, "loader state %s = %lld", fname[f], (long long)vals[i]);
            int valid = st.samples_per_epoch == spe && st.fingerprint == good.fingerprint &&
                        st.epoch >= 0 && st.cursor >= 0 && st.cursor < spe &&
                        st.epoch <= (INT64_MAX - st.cursor) / spe - 1;
            if (s != LLMT_OK) {
                named(s, llmt_loader_last_error(l), fname[f], what);
                if (valid)
                    fail_case(what, "a valid state was refused");
            } else if (!valid) {
                fail_case(what, "an invalid state was accepted");
            } else {
                /* a few steps from there, then a state read back */
                for (int k = 0; k < 3; k++)
                    CHECK_STATUS(llmt_loader_next(l, in, tg, NULL), LLMT_OK);
                llmt_loader_state back = {.struct_size = sizeof back};
                CHECK_STATUS(llmt_loader_get_state(l, &back), LLMT_OK);
                CHECK(back.epoch * spe + back.cursor == st.epoch * spe + st.cursor + 6);
            }
        }
    llmt_loader_state small = good;
    small.struct_size = 8;
    named(llmt_loader_set_state(l, &small), llmt_loader_last_error(l), "struct_size",
          "loader state struct_size 8");

    /* through a checkpoint: every key rewritten */
    snprintf(root, sizeof root, "%s/ckpt", dir);
    llmt_ckpt *ck = NULL;
    llmt_ckpt_opts co;
    llmt_ckpt_opts_init(&co, sizeof co);
    co.direct_io = 0;
    CHECK_STATUS(llmt_ckpt_create(ctx, root, &co, &ck), LLMT_OK);
    static const char *const keys[] = {"data.seed", "data.epoch", "data.cursor",
                                       "data.samples_per_epoch", "data.fingerprint"};
    /* what a refusal by llmt_loader_set_state names for each key */
    static const char *const key_word[] = {"seed", "epoch", "cursor", "samples per epoch",
                                           "fingerprint"};
    static const char *const bad[] = {
        "",
        "-",
        "+1",
        " 1",
        "1 ",
        "0x10",
        "1e3",
        "-1",
        " -1",
        "\t7",
        "18446744073709551616",
        "9223372036854775808",
        "-9223372036854775809",
        "1.0",
        "01x",
        "1234567890123456789012345678901234567890123456789012345678901234567890"};
    int64_t step = 1;
    for (size_t k = 0; k < 5; k++)
        for (size_t v = 0; v < sizeof bad / sizeof *bad; v++, step++) {
            CHECK_STATUS(llmt_loader_set_state(l, &good), LLMT_OK);
            CHECK_STATUS(llmt_ckpt_begin(ck, step), LLMT_OK);
            CHECK_STATUS(llmt_loader_ckpt_add(l, ck), LLMT_OK);
            CHECK_STATUS(llmt_ckpt_set_kv(ck, keys[k], bad[v]), LLMT_OK);
            CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
            CHECK_STATUS(llmt_ckpt_open_step(ck, step), LLMT_OK);
            llmt_status s = llmt_loader_ckpt_read(l, ck);
            snprintf(what, sizeof what, "checkpoint %s = \"%s\"", keys[k], bad[v]);
            /* the seed is adopted whatever it is, but only when written as
             * a plain decimal; everything else here is refused */
            if (s == LLMT_OK && !(k == 0 && !strcmp(bad[v], "9223372036854775808")))
                fail_case(what, "llmt_loader_ckpt_read accepted it");
            else if (s == LLMT_OK)
                pass_case(); /* 2^63 is a seed like any other */
            else if (s == LLMT_ERR_FORMAT)
                named(s, llmt_loader_last_error(l), keys[k], what);
            else
                named(s, llmt_loader_last_error(l), key_word[k], what);
        }
    llmt_ckpt_destroy(ck);
    llmt_loader_destroy(l);
    llmt_dataset_destroy(ds);
}

/* ---- corpora through llmt_data_prepare ---------------------------------- */

static void write_file(const char *d, const char *name, const void *b, size_t n)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", d, name);
    tu_spit(p, b, n);
}

/* A prepared directory must open with verify, hold only ids below the
 * vocabulary and agree with its report. */
static void check_prepared(const char *out, int32_t vocab, const llmt_data_report *r,
                           const char *what)
{
    static const char *const sub[] = {"train", "val"};
    int64_t docs = 0, tokens = 0;
    for (int i = 0; i < 2; i++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", out, sub[i]);
        llmt_dataset *ds = NULL;
        llmt_status s = llmt_dataset_open(ctx, p, 1, &ds);
        if (s == LLMT_ERR_NOT_FOUND)
            continue; /* an empty split */
        if (s != LLMT_OK) {
            fail_case(what, llmt_context_last_error(ctx));
            continue;
        }
        llmt_dataset_info info = {.struct_size = sizeof info};
        llmt_dataset_get_info(ds, &info);
        CHECK_EQ_INT(info.vocab_size, vocab);
        docs += info.documents;
        tokens += info.tokens;
        for (int32_t k = 0; k < info.shards; k++) {
            int64_t nt = 0;
            llmt_dataset_shard(ds, k, NULL, &nt, NULL);
            int32_t *buf = malloc((size_t)(nt ? nt : 1) * sizeof *buf);
            CHECK_STATUS(llmt_dataset_read(ds, k, 0, buf, (size_t)nt), LLMT_OK);
            for (int64_t t = 0; t < nt; t++)
                if (buf[t] < 0 || buf[t] >= vocab) {
                    fail_case(what, "a prepared shard holds an id outside the vocabulary");
                    break;
                }
            free(buf);
        }
        llmt_dataset_destroy(ds);
    }
    CHECK_EQ_INT(docs, r->train_documents + r->val_documents);
    CHECK_EQ_INT(tokens, r->train_tokens + r->val_tokens);
    int64_t sum = 0;
    for (int v = 0; v < LLMT_DATA_VERDICTS; v++)
        sum += r->verdicts[v];
    CHECK_EQ_INT(sum, r->documents);
}

static void fuzz_prepare(void)
{
    char corpus[4400], p[4400], out[4400], what[200];
    snprintf(corpus, sizeof corpus, "%s/corpus", dir);
    mkdir(corpus, 0755);
    /* binary, invalid UTF-8, NULs, empty, one long line, CR only */
    size_t big = 3u << 20;
    unsigned char *b = malloc(big);
    uint64_t rs = 41;
    for (size_t i = 0; i < 20000; i++)
        b[i] = (unsigned char)tu_rng(&rs);
    write_file(corpus, "random.dat", b, 20000);
    for (size_t i = 0; i < 20000; i++)
        b[i] = (unsigned char)(0x80 + tu_rng(&rs) % 128);
    b[9000] = 0; /* past the sniffed 8 KiB: read as text with a NUL */
    write_file(corpus, "invalid-utf8.txt", b, 20000);
    static const char nul_text[] = "text with\0NUL bytes\0 inside, long enough to keep\0\0\n";
    write_file(corpus, "nul.txt", nul_text, sizeof nul_text - 1);
    write_file(corpus, "empty.txt", "", 0);
    write_file(corpus, "cr.txt", "lone\rcarriage\rreturns\rhere and there\r\r", 38);
    for (size_t i = 0; i < big; i++)
        b[i] = (unsigned char)("abcdefgh "[i % 9]);
    write_file(corpus, "one-line.txt", b, big);
    /* JSONL with every kind of bad line */
    static const char jsonl[] =
        "{\"text\": \"a fine document with enough characters in it\"}\n"
        "{\"text\": \"truncated\n"
        "[1, 2, 3]\n"
        "{\"text\": 42}\n"
        "{\"text\": null}\n"
        "{\"other\": \"x\"}\n"
        "{\"text\": \"escaped \\u0000 NUL and \\ud800 lone surrogate and \\udfff too\"}\n"
        "{\"text\": \"ok\"} trailing\n"
        "\xff\xfe{\"text\": \"bom-ish\"}\n"
        "{\"text\": \"\xc3\x28 invalid utf-8 inside the string value here\"}\n"
        "{\"text\": \"a\", \"text\": \"duplicate keys in one object here\"}\n"
        "\n   \n"
        "{\"text\": \"no newline at the end of the file, still a document\"}";
    write_file(corpus, "lines.jsonl", jsonl, sizeof jsonl - 1);
    /* 5000-deep nesting in one line */
    size_t k = 0;
    for (int i = 0; i < 5000; i++)
        b[k++] = '[';
    b[k++] = '\n';
    memcpy(b + k, "{\"text\": \"after the deep line, a document of text\"}\n", 52);
    k += 52;
    write_file(corpus, "deep.jsonl", b, k);
    /* symlink loops, a dangling link, a FIFO, nested directories */
    snprintf(p, sizeof p, "%s/sub", corpus);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/sub/loop", corpus);
    CHECK(symlink("..", p) == 0);
    snprintf(p, sizeof p, "%s/sub/self", corpus);
    CHECK(symlink("self", p) == 0);
    snprintf(p, sizeof p, "%s/sub/dangling", corpus);
    CHECK(symlink("/nonexistent/llmt-fuzz", p) == 0);
    snprintf(p, sizeof p, "%s/sub/fifo", corpus);
    CHECK(mkfifo(p, 0644) == 0);
    snprintf(p, sizeof p, "%s/sub", corpus);
    write_file(p, "deeper.txt", "a document in a nested directory, fine text.\n", 45);

    llmt_tokenizer *bytes = NULL;
    CHECK_STATUS(llmt_tokenizer_create_bytes(ctx, &bytes), LLMT_OK);
    /* a BPE learned on the raw binary bytes */
    llmt_tokenizer *bpe = NULL;
    CHECK_STATUS(llmt_tokenizer_train_bpe(ctx, (const char *)b, 5000, 400, &bpe), LLMT_OK);
    if (bpe)
        check_usable(bpe, "a BPE trained on random bytes");
    llmt_tokenizer *toks[2] = {bytes, bpe};
    for (int ti = 0; ti < 2; ti++) {
        if (!toks[ti])
            continue;
        int32_t vocab = 0;
        llmt_tokenizer_vocab_size(toks[ti], &vocab);
        for (int llmc = 0; llmc < 2; llmc++) {
            snprintf(out, sizeof out, "%s/out-%d-%d", dir, ti, llmc);
            llmt_data_prepare_opts po;
            llmt_data_prepare_opts_init(&po, sizeof po);
            po.val_fraction = 0.3;
            po.shard_tokens = 4096;
            po.llmc_format = llmc;
            llmt_data_report r = {.struct_size = sizeof r};
            const char *in[] = {corpus};
            llmt_status s = llmt_data_prepare(ctx, in, 1, toks[ti], out, &po, &r);
            snprintf(what, sizeof what, "prepare of the bad corpus (tokenizer %d, llmc %d)", ti,
                     llmc);
            if (s != LLMT_OK)
                fail_case(what, llmt_context_last_error(ctx));
            else if (!llmc)
                check_prepared(out, vocab, &r, what);
            if (s == LLMT_OK) {
                CHECK(r.files >= 7);
                CHECK(r.bad_lines >= 6);
            }
        }
    }
    /* inputs that cannot be read are refused by name */
    const char *nonexist = "/nonexistent/llmt-fuzz-input";
    snprintf(p, sizeof p, "%s/sub/fifo", corpus);
    const char *bad_inputs[] = {nonexist, p, "/dev/null"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(out, sizeof out, "%s/out-bad-%zu", dir, i);
        llmt_data_prepare_opts po;
        llmt_data_prepare_opts_init(&po, sizeof po);
        llmt_data_report r = {.struct_size = sizeof r};
        const char *in[] = {bad_inputs[i]};
        llmt_status s = llmt_data_prepare(ctx, in, 1, bytes, out, &po, &r);
        snprintf(what, sizeof what, "prepare of %s", bad_inputs[i]);
        named(s, llmt_context_last_error(ctx), bad_inputs[i], what);
    }
    /* an empty corpus: refused, nothing left behind */
    snprintf(p, sizeof p, "%s/empty-corpus", dir);
    mkdir(p, 0755);
    write_file(p, "a.txt", "", 0);
    write_file(p, "b.txt", "\n\n  \n", 5);
    snprintf(out, sizeof out, "%s/out-empty", dir);
    {
        llmt_data_prepare_opts po;
        llmt_data_prepare_opts_init(&po, sizeof po);
        llmt_data_report r = {.struct_size = sizeof r};
        const char *in[] = {p};
        llmt_status s = llmt_data_prepare(ctx, in, 1, bytes, out, &po, &r);
        CHECK(s != LLMT_OK);
        CHECK(strstr(llmt_context_last_error(ctx), "no document") != NULL);
    }
    llmt_tokenizer_destroy(bytes);
    llmt_tokenizer_destroy(bpe);
    free(b);
}

int main(void)
{
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_fn = quiet_log;
    if (llmt_context_create(&co, &ctx) != LLMT_OK)
        return 1;
    if (getenv("LLMT_FUZZ_VERBOSE"))
        report_max = 1 << 30;
    dir = tu_mkdtemp();
    fuzz_ours(300, 257, 1);  /* uint16 tokens, padding before the index */
    fuzz_ours(70000, 61, 2); /* uint32 tokens */
    fuzz_llmc();
    fuzz_tokenizer_file();
    fuzz_gpt2();
    fuzz_loader_state();
    fuzz_prepare();
    tu_rmtree(dir);
    free(dir);
    llmt_context_destroy(ctx);
    if (reported > report_max)
        fprintf(stderr, "(%d failures, the first %d shown)\n", reported, report_max);
    return check_exit("data-fuzz");
}
