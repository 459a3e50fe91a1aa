/* A shard truncated, rewritten or replaced while a dataset has it open: the
 * loader and llmt_dataset_read return an error naming the file, its size
 * at open and now, and the tokens asked for (the loader adds the
 * micro-batch and sample), never a signal (a mapping of a truncated file
 * raises SIGBUS on the pages past its new end). The loader's state stays
 * at the last good micro-batch, so a checkpoint written after the error
 * still names where the run was. A file replaced by rename leaves the open
 * one readable: the run goes on with the data it started with; one closed
 * for want of descriptors and reopened must be the file first opened. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"
#include "util.h"

#define T 64
#define B 4
#define NTOK 200000 /* 400 KB of uint16: ~100 pages */

static char *dir;

static llmt_loader *make_loader(llmt_dataset *ds, int prefetch)
{
    llmt_loader_opts o;
    llmt_loader_opts_init(&o, sizeof o);
    o.seq_len = T;
    o.micro_batch = B;
    o.prefetch = prefetch;
    o.shuffle = 0; /* file order: micro-batch m reads windows 4m..4m+3 */
    llmt_loader *l = NULL;
    if (llmt_loader_create(ds, &o, &l) != LLMT_OK) {
        fprintf(stderr, "loader_create: %s\n", llmt_dataset_last_error(ds));
        exit(1);
    }
    return l;
}

/* Does micro-batch m hold the windows of `ids` it should? */
static int batch_ok(const int32_t *ids, int64_t m, const int32_t *in, const int32_t *tg)
{
    for (int i = 0; i < B; i++) {
        const int32_t *w = ids + (m * B + i) * T;
        if (memcmp(in + i * T, w, T * sizeof *w) || memcmp(tg + i * T, w + 1, T * sizeof *w))
            return 0;
    }
    return 1;
}

static int has(const char *msg, const char *what)
{
    if (strstr(msg, what))
        return 1;
    fprintf(stderr, "message lacks \"%s\": %s\n", what, msg);
    return 0;
}

/* Read micro-batches from number `first` on until one fails (or `max`
 * pass); returns how many passed, each compared with the shard's tokens. */
static int64_t read_until_error(llmt_loader *l, const int32_t *ids, int64_t first, int64_t max,
                                int *all_ok)
{
    int32_t in[B * T], tg[B * T];
    int64_t m = 0;
    *all_ok = 1;
    for (; m < max; m++) {
        if (llmt_loader_next(l, in, tg, NULL) != LLMT_OK)
            break;
        if (!batch_ok(ids, first + m, in, tg))
            *all_ok = 0;
    }
    return m;
}

static void cursor_is(llmt_loader *l, int64_t want)
{
    llmt_loader_state st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_STATUS(llmt_loader_get_state(l, &st), LLMT_OK);
    CHECK_EQ_INT(st.cursor, want);
}

/* Truncated under a reading loader (no prefetch: the failing micro-batch
 * is known exactly) and under a prefetching one. */
static void truncated(int llmc, int prefetch)
{
    char p[4200], want[256];
    snprintf(p, sizeof p, "%s/t%d%d.%s", dir, llmc, prefetch, llmc ? "bin" : "tok");
    uint64_t seed = 7;
    int32_t *ids;
    unsigned hdr = llmc ? 1024u : 128u;
    if (llmc) {
        ids = malloc(NTOK * sizeof *ids);
        for (int i = 0; i < NTOK; i++)
            ids[i] = (int32_t)(tu_rng(&seed) % 50257);
        CHECK_STATUS(llmt_shard_write_llmc(NULL, p, ids, NTOK), LLMT_OK);
    } else {
        ids = tu_write_shard(p, 50257, NTOK, 500, seed, NULL);
    }
    struct stat st;
    CHECK(!stat(p, &st));
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, p, 0, &ds), LLMT_OK);
    llmt_loader *l = make_loader(ds, prefetch);
    int32_t in[B * T], tg[B * T];
    CHECK_STATUS(llmt_loader_next(l, in, tg, NULL), LLMT_OK);
    CHECK(batch_ok(ids, 0, in, tg));

    /* Keep the header and 1000 bytes of tokens: tokens from 500 on are
     * gone, so window 7 (tokens 448..512) is the first that cannot be
     * read. The rest of the file's first page stays mapped as zeros;
     * every later page is past the end. */
    off_t keep = (off_t)hdr + 1000;
    int fd = open(p, O_WRONLY);
    CHECK(fd >= 0 && !ftruncate(fd, keep));
    close(fd);
    int ok = 0;
    int64_t passed = read_until_error(l, ids, 1, 64, &ok);
    CHECK(ok);
    if (!prefetch)
        CHECK_EQ_INT(passed, 0); /* micro-batch 1 holds window 7 */
    else
        CHECK(passed < 64); /* the slots filled before the cut pass */
    const char *msg = llmt_loader_last_error(l);
    fprintf(stderr, "truncated (llmc %d, prefetch %d): %s\n", llmc, prefetch, msg);
    CHECK(has(msg, p));
    snprintf(want, sizeof want, "%lld bytes", (long long)st.st_size);
    CHECK(has(msg, want));
    snprintf(want, sizeof want, "now %lld", (long long)keep);
    CHECK(has(msg, want));
    snprintf(want, sizeof want, "micro-batch %lld", (long long)(1 + passed));
    CHECK(has(msg, want));
    CHECK(has(msg, "token"));
    /* Still at the last good micro-batch; asking again fails again. */
    cursor_is(l, (1 + passed) * B);
    CHECK(llmt_loader_next(l, in, tg, NULL) != LLMT_OK);
    cursor_is(l, (1 + passed) * B);

    /* The dataset's own read of a token past the cut, and of one before. */
    int32_t w[T + 1];
    CHECK(llmt_dataset_read(ds, 0, 10 * T, w, T + 1) != LLMT_OK);
    msg = llmt_dataset_last_error(ds);
    CHECK(has(msg, p));
    CHECK(has(msg, "now"));
    CHECK_STATUS(llmt_dataset_read(ds, 0, 0, w, T + 1), LLMT_OK);
    CHECK(!memcmp(w, ids, sizeof w));
    llmt_loader_destroy(l);
    llmt_dataset_destroy(ds);
    free(ids);
}

/* Rewritten in place at the same size (other tokens, another mtime): the
 * next micro-batch names the change instead of serving other data. */
static void rewritten(void)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/rw.tok", dir);
    int32_t *ids = tu_write_shard(p, 50257, NTOK, 500, 11, NULL);
    size_t n = 0;
    unsigned char *bytes = tu_slurp(p, &n);
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, p, 0, &ds), LLMT_OK);
    llmt_loader *l = make_loader(ds, 0);
    int32_t in[B * T], tg[B * T];
    CHECK_STATUS(llmt_loader_next(l, in, tg, NULL), LLMT_OK);
    for (size_t i = 200; i < n - 64; i++)
        bytes[i] ^= 1; /* read before any id is: the change is found first */
    int fd = open(p, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, bytes, n, 0) == (ssize_t)n);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {12345, 0}};
    CHECK(!futimens(fd, ts));
    close(fd);
    CHECK(llmt_loader_next(l, in, tg, NULL) != LLMT_OK);
    const char *msg = llmt_loader_last_error(l);
    fprintf(stderr, "rewritten: %s\n", msg);
    CHECK(has(msg, p));
    CHECK(has(msg, "changed"));
    CHECK(has(msg, "micro-batch 1"));
    llmt_loader_destroy(l);
    llmt_dataset_destroy(ds);
    free(bytes);
    free(ids);
}

/* Replaced by rename (how writers publish a file): the open file is still
 * the one read, to the end of the epoch. */
static void replaced(void)
{
    char p[4200], q[4300];
    snprintf(p, sizeof p, "%s/rp.tok", dir);
    snprintf(q, sizeof q, "%s/rp.new", dir);
    int32_t *ids = tu_write_shard(p, 50257, NTOK, 500, 13, NULL);
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, p, 0, &ds), LLMT_OK);
    llmt_loader *l = make_loader(ds, 2);
    free(tu_write_shard(q, 50257, NTOK / 2, 500, 14, NULL));
    CHECK(!rename(q, p));
    int64_t spe = 0;
    llmt_loader_samples_per_epoch(l, &spe);
    int ok = 0;
    CHECK_EQ_INT(read_until_error(l, ids, 0, spe / B, &ok), spe / B);
    CHECK(ok);
    llmt_loader_destroy(l);
    llmt_dataset_destroy(ds);
    free(ids);
}

/* More shards than the dataset keeps open (a quarter of RLIMIT_NOFILE,
 * at least 16): the least recently read are closed and reopened by path,
 * which must still be the file first opened. */
static void reopened(void)
{
    enum { NS = 20 };
    struct rlimit old, low;
    CHECK(!getrlimit(RLIMIT_NOFILE, &old));
    low = old;
    low.rlim_cur = 64; /* 16 files kept open */
    CHECK(!setrlimit(RLIMIT_NOFILE, &low));
    char sub[4200], p[4300], q[4300];
    snprintf(sub, sizeof sub, "%s/many", dir);
    mkdir(sub, 0755);
    int32_t *ids[NS];
    for (int i = 0; i < NS; i++) {
        snprintf(p, sizeof p, "%s/s%02d.tok", sub, i);
        ids[i] = tu_write_shard(p, 50257, 1000, 100, 100 + (uint64_t)i, NULL);
    }
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, sub, 1, &ds), LLMT_OK);
    CHECK(!setrlimit(RLIMIT_NOFILE, &old));
    int32_t w[100];
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < NS; i++) {
            CHECK_STATUS(llmt_dataset_read(ds, i, 500, w, 100), LLMT_OK);
            CHECK(!memcmp(w, ids[i] + 500, sizeof w));
        }
    /* Shard 0 was read longest ago: closed, so its reopen finds the new
     * file; shard 19 was read last: still open, still the old file. */
    for (int i = 0; i < NS; i += NS - 1) {
        snprintf(p, sizeof p, "%s/s%02d.tok", sub, i);
        snprintf(q, sizeof q, "%s/new", sub);
        free(tu_write_shard(q, 50257, 1000, 100, 999, NULL));
        CHECK(!rename(q, p));
    }
    CHECK(llmt_dataset_read(ds, 0, 500, w, 100) != LLMT_OK);
    const char *msg = llmt_dataset_last_error(ds);
    fprintf(stderr, "reopened: %s\n", msg);
    CHECK(has(msg, "s00.tok was replaced or changed"));
    CHECK_STATUS(llmt_dataset_read(ds, NS - 1, 500, w, 100), LLMT_OK);
    CHECK(!memcmp(w, ids[NS - 1] + 500, sizeof w));
    llmt_dataset_destroy(ds);
    for (int i = 0; i < NS; i++)
        free(ids[i]);
}

int main(void)
{
    dir = tu_mkdtemp();
    for (int llmc = 0; llmc < 2; llmc++)
        for (int pf = 0; pf <= 4; pf += 4)
            truncated(llmc, pf);
    rewritten();
    replaced();
    reopened();
    tu_rmtree(dir);
    free(dir);
    return check_exit("data-loader-changed");
}
