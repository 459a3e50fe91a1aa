/* Loader throughput (shards read with pread): tokens/s of llmt_loader_next (inputs and
 * targets as int32) for seq_len 1024, micro_batch 8, shuffled, with the
 * prefetch thread off (the caller reads) and on (4 micro-batches ahead).
 * The dataset: 200M uint16 tokens in 4 shards written by
 * llmt_shard_writer into a temporary directory ($TMPDIR), 16M with
 * --quick; it is in the page cache after writing, so this measures the
 * loader, not the disk. Items are tokens (inputs) per call. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include "harness.h"
#include "llmtrain.h"

#define SEQ 1024
#define MB 8
#define CALLS 128   /* micro-batches per timed call: 1M tokens */

typedef struct job {
    llmt_loader *l;
    int32_t *in, *tg;
    int64_t ids[MB];
    int failed;
} job;

static void next_batches(void *arg)
{
    job *j = arg;
    for (int i = 0; i < CALLS; i++)
        if (llmt_loader_next(j->l, j->in, j->tg, j->ids) != LLMT_OK)
            j->failed = 1;
}

static int write_dataset(const char *dir, int64_t tokens, int shards)
{
    int32_t *doc = malloc(4096 * sizeof *doc);
    uint64_t x = 88172645463325252ull;
    for (int s = 0; s < shards; s++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/shard-%05d.tok", dir, s);
        llmt_shard_writer *w = NULL;
        if (llmt_shard_writer_create(NULL, p, 50257, &w) != LLMT_OK)
            return -1;
        for (int64_t left = tokens / shards; left > 0;) {
            /* Documents of 1..4096 tokens (xorshift: cheap, not the point). */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int64_t n = 1 + (int64_t)(x % 4096);
            if (n > left)
                n = left;
            for (int64_t i = 0; i < n; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                doc[i] = (int32_t)(x % 50257);
            }
            if (llmt_shard_writer_add(w, doc, (size_t)n) != LLMT_OK)
                return -1;
            left -= n;
        }
        if (llmt_shard_writer_finish(w) != LLMT_OK) {
            fprintf(stderr, "bench_loader: %s\n", llmt_shard_writer_last_error(w));
            return -1;
        }
        llmt_shard_writer_destroy(w);
    }
    free(doc);
    return 0;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4400];
        snprintf(p, sizeof p, "%.4000s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    bench_ctx b;
    if (bench_init(&b, "loader", argc, argv))
        return 2;
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/llmt-bench-loader-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    int64_t tokens = b.quick ? 16000000 : 200000000;
    double t0 = bench_now();
    if (write_dataset(dir, tokens, 4)) {
        fprintf(stderr, "bench_loader: writing the dataset in %s failed\n", dir);
        remove_dir(dir);
        return 1;
    }
    double tw = bench_now() - t0;
    printf("dataset: %" PRId64 " tokens (uint16) in 4 shards, written in %.2f s "
           "(%.1f M tokens/s)\n", tokens, tw, (double)tokens / tw / 1e6);
    llmt_dataset *ds = NULL;
    t0 = bench_now();
    if (llmt_dataset_open(NULL, dir, 1, &ds) != LLMT_OK) {
        fprintf(stderr, "bench_loader: open failed\n");
        remove_dir(dir);
        return 1;
    }
    double tv = bench_now() - t0;
    printf("open with verify (xxhash64 of every shard): %.3f s (%.0f MB/s)\n", tv,
           2.0 * (double)tokens / tv / 1e6);

    job j = {0};
    j.in = malloc((size_t)MB * SEQ * sizeof *j.in);
    j.tg = malloc((size_t)MB * SEQ * sizeof *j.tg);
    int prefetch[2] = {0, 4};
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        char name[64];
        snprintf(name, sizeof name, "seq%d-b%d-prefetch%d", SEQ, MB, prefetch[k]);
        if (!bench_selected(&b, name))
            continue;
        llmt_loader_opts o;
        llmt_loader_opts_init(&o, sizeof o);
        o.seq_len = SEQ;
        o.micro_batch = MB;
        o.prefetch = prefetch[k];
        if (llmt_loader_create(ds, &o, &j.l) != LLMT_OK) {
            fprintf(stderr, "bench_loader: %s\n", llmt_dataset_last_error(ds));
            rc = 1;
            break;
        }
        const bench_result *r = bench_run(&b, name, next_batches, &j,
                                          (double)CALLS * MB * SEQ, "tokens");
        if (r)
            printf("  %s: %.1f M tokens/s (median)\n", name,
                   (double)CALLS * MB * SEQ / r->median_s / 1e6);
        llmt_loader_destroy(j.l);
        j.l = NULL;
    }
    if (j.failed) {
        fprintf(stderr, "bench_loader: llmt_loader_next failed\n");
        rc = 1;
    }
    free(j.in);
    free(j.tg);
    llmt_dataset_destroy(ds);
    remove_dir(dir);
    int f = bench_finish(&b);
    return rc ? rc : f;
}
