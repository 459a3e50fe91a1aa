/* Checkpoint I/O: synchronous save (snapshot + O_DIRECT/libaio write +
 * fsync + commit) and the same with buffered I/O, the stall of an async
 * save (the snapshot) against a plain memcpy of the same bytes, and load
 * with the page cache dropped for the data files (posix_fadvise DONTNEED).
 * compare_ckpt.sh runs this next to dd oflag=direct and torch.save on the
 * same disk. Sizes in bytes per call ("B").
 * env: LLMT_BENCH_CKPT_DIR (default $TMPDIR or /tmp; must be a real disk
 * for the figures to mean anything), LLMT_BENCH_CKPT_MB (state size,
 * default 512; --quick: 64), LLMT_BENCH_CKPT_TENSORS (default 8). */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "llmtrain.h"

typedef struct {
    char root[4096];
    int ntensors;
    int64_t per; /* floats per tensor */
    float **data;
    llmt_ckpt *ck;
    int64_t step;
    int async;
    double stall_sum;
    uint8_t *copy_dst;
    uint64_t bytes;
} state;

static void describe(state *s)
{
    llmt_ckpt_begin(s->ck, ++s->step);
    for (int i = 0; i < s->ntensors; i++) {
        char name[32];
        snprintf(name, sizeof name, "param/t%d", i);
        llmt_tensor v;
        llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &s->per, s->data[i],
                         LLMT_DEVICE_CPU, 0);
        llmt_ckpt_add_tensor(s->ck, name, &v, NULL, NULL);
    }
}

static void fail(state *s, const char *what)
{
    fprintf(stderr, "bench_ckpt: %s: %s\n", what, llmt_ckpt_last_error(s->ck));
    exit(1);
}

/* Remove committed steps older than the newest outside the timing: the
 * unlink of a large file (ext4 frees its extents, ~70 ms per 512 MiB here)
 * is retention's cost, not the write's. */
static void drop_old(state *s)
{
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "for d in '%s'/step-*; do [ \"$d\" = '%s/step-%012" PRId64
             "' ] || rm -rf \"$d\"; done", s->root, s->root, s->step);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_ckpt: cleanup failed\n");
}

/* Synchronous saves, each timed alone (cleanup of older steps untimed). */
static void save_sync(bench_ctx *b, state *s, const char *name)
{
    if (!bench_selected(b, name))
        return;
    double *t = malloc(sizeof(double) * (size_t)b->repeats);
    for (int i = -b->warmup; i < b->repeats; i++) {
        drop_old(s);
        describe(s);
        double t0 = bench_now();
        if (llmt_ckpt_save(s->ck, 0) != LLMT_OK)
            fail(s, "save");
        if (i >= 0)
            t[i] = bench_now() - t0;
    }
    bench_record(b, name, t, b->repeats, (double)s->bytes, "B");
    free(t);
}

static void memcpy_case(void *arg)
{
    state *s = arg;
    uint64_t off = 0;
    for (int i = 0; i < s->ntensors; i++) {
        memcpy(s->copy_dst + off, s->data[i], (size_t)s->per * 4);
        off += (uint64_t)s->per * 4;
    }
}

static void drop_cache(const char *root, int64_t step)
{
    char d[4200];
    snprintf(d, sizeof d, "%s/step-%012" PRId64, root, step);
    DIR *dir = opendir(d);
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
        if (strncmp(e->d_name, "rank-", 5))
            continue;
        char p[4500];
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        int fd = open(p, O_RDONLY);
        if (fd >= 0) {
            fdatasync(fd);
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    }
    if (dir)
        closedir(dir);
}

static void load_case(void *arg)
{
    state *s = arg;
    drop_cache(s->root, s->step); /* not timed separately: cheap for clean pages */
    int64_t step = -1;
    if (llmt_ckpt_open_latest(s->ck, &step) != LLMT_OK)
        fail(s, "open");
    for (int i = 0; i < s->ntensors; i++) {
        char name[32];
        snprintf(name, sizeof name, "param/t%d", i);
        llmt_tensor v;
        llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &s->per, s->copy_dst,
                         LLMT_DEVICE_CPU, 0);
        if (llmt_ckpt_read(s->ck, name, &v, NULL) != LLMT_OK)
            fail(s, "read");
    }
}

static llmt_ckpt *make(state *s, int direct)
{
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.direct_io = direct;
    o.keep_last = 0; /* retention is done by drop_old, untimed */
    llmt_ckpt *ck = NULL;
    if (llmt_ckpt_create(NULL, s->root, &o, &ck) != LLMT_OK) {
        fprintf(stderr, "bench_ckpt: cannot create a checkpoint root in %s\n", s->root);
        exit(1);
    }
    return ck;
}

int main(int argc, char **argv)
{
    bench_ctx b;
    if (bench_init(&b, "ckpt", argc, argv))
        return 2;
    state s;
    memset(&s, 0, sizeof s);
    const char *dir = getenv("LLMT_BENCH_CKPT_DIR");
    const char *tmp = getenv("TMPDIR");
    snprintf(s.root, sizeof s.root, "%s/llmt-bench-ckpt-%d",
             dir && *dir ? dir : tmp && *tmp ? tmp : "/tmp", (int)getpid());
    const char *mb = getenv("LLMT_BENCH_CKPT_MB");
    const char *nt = getenv("LLMT_BENCH_CKPT_TENSORS");
    int64_t mib = mb ? atoll(mb) : b.quick ? 64 : 512;
    s.ntensors = nt ? atoi(nt) : 8;
    if (mib < 1 || s.ntensors < 1 || s.ntensors > 4096)
        return fprintf(stderr, "bench_ckpt: bad size\n"), 2;
    s.bytes = (uint64_t)mib << 20;
    s.per = (int64_t)(s.bytes / 4 / (uint64_t)s.ntensors);
    s.bytes = (uint64_t)s.per * 4 * (uint64_t)s.ntensors;
    s.data = calloc((size_t)s.ntensors, sizeof *s.data);
    for (int i = 0; i < s.ntensors; i++) {
        s.data[i] = malloc((size_t)s.per * 4);
        for (int64_t j = 0; j < s.per; j++)
            s.data[i][j] = (float)(j % 1000) * 0.5f + (float)i;
    }
    s.copy_dst = malloc(s.bytes);
    memset(s.copy_dst, 1, s.bytes);
    double items = (double)s.bytes;
    printf("# state: %d fp32 tensors, %.0f MiB, root %s\n", s.ntensors, items / 1048576.0,
           s.root);

    s.ck = make(&s, 1);
    save_sync(&b, &s, "save_sync_direct");
    bench_run(&b, "load_cold", load_case, &s, items, "B");
    bench_run(&b, "memcpy_state", memcpy_case, &s, items, "B");
    if (bench_selected(&b, "snapshot_stall")) {
        /* the stall of an async save: llmt_ckpt_save(async) returns after the
         * snapshot; the write is waited for outside the timing */
        int n = b.repeats;
        double *t = malloc(sizeof(double) * (size_t)n);
        double *w = malloc(sizeof(double) * (size_t)n);
        for (int i = -b.warmup; i < n; i++) {
            drop_old(&s);
            describe(&s);
            double t0 = bench_now();
            if (llmt_ckpt_save(s.ck, 1) != LLMT_OK)
                fail(&s, "async save");
            double t1 = bench_now();
            /* persist: the writer thread's whole job (hash + write + fsync
             * + part manifest + commit + retention), after the snapshot */
            if (llmt_ckpt_wait(s.ck, -1) != LLMT_OK)
                fail(&s, "async save");
            double t2 = bench_now();
            if (i >= 0) {
                t[i] = t1 - t0;
                w[i] = t2 - t1;
            }
        }
        bench_record(&b, "snapshot_stall", t, n, items, "B");
        bench_record(&b, "persist_async", w, n, items, "B");
        free(t);
        free(w);
    }
    llmt_ckpt_destroy(s.ck);
    s.ck = make(&s, 0);
    save_sync(&b, &s, "save_sync_buffered");
    llmt_ckpt_destroy(s.ck);

    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s.root);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_ckpt: could not remove %s\n", s.root);
    for (int i = 0; i < s.ntensors; i++)
        free(s.data[i]);
    free(s.data);
    free(s.copy_dst);
    return bench_finish(&b);
}
