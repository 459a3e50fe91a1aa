/* llmtrain comm: communicator tools (lib/comm; doc/comm.md).
 *   env       where this process sits in the job (launcher variables)
 *   selftest  collectives checked against their expected values, with
 *             timings: ranks are threads (--ranks N) or, under mpirun /
 *             srun / torchrun, this job's processes
 *   dump      read flight-recorder dumps (written on a timeout) and name
 *             the ranks that did not reach the failing sequence number */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char *const CMD = "comm";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out)
{
    int64_t x = 0;
    int rc = cli_parse_i64(flag, v, lo, hi, &x);
    if (rc == CLI_OK) *out = (long)x;
    return rc;
}

/* ---- env */

static int do_env(void)
{
    llmt_comm_env e;
    llmt_status s = llmt_comm_env_discover(&e, sizeof e);
    if (s != LLMT_OK) return cli_fail_status(CMD, s, "env");
    printf("launcher %s\nrank %d\nworld_size %d\nlocal_rank %d\nlocal_size %d\n",
           e.launcher, (int)e.rank, (int)e.world_size, (int)e.local_rank,
           (int)e.local_size);
    if (e.master_addr[0]) printf("master %s:%d\n", e.master_addr, (int)e.master_port);
    uint64_t f = llmt_build_features();
    printf("backends inproc%s%s\n", (f & LLMT_FEATURE_MPI) ? " mpi" : "",
           (f & LLMT_FEATURE_NCCL) ? " nccl" : "");
    return CLI_OK;
}

/* ---- selftest */

typedef struct st_arg {
    llmt_comm *c;
    size_t count;
    int iters, fails, verbose;
    char err[1200];
} st_arg;

static void st_fail(st_arg *a, const char *what, llmt_status s)
{
    a->fails++;
    if (!a->err[0])
        snprintf(a->err, sizeof a->err, "%s: %s: %s", what, llmt_status_string(s),
                 llmt_comm_last_error(a->c));
}

static void *st_run(void *p)
{
    st_arg *a = p;
    llmt_comm *c = a->c;
    int32_t r, n;
    llmt_comm_rank(c, &r);
    llmt_comm_size(c, &n);
    size_t cnt = a->count;
    float *x = malloc(cnt * n * sizeof *x), *y = malloc(cnt * n * sizeof *y);
    if (!x || !y) {
        a->fails++;
        free(x);
        free(y);
        return NULL;
    }
    const char *names[5] = {"all_reduce", "all_gather", "reduce_scatter",
                            "broadcast", "barrier"};
    for (int op = 0; op < 5; op++) {
        double t0 = 0, best = 1e30;
        for (int it = 0; it < a->iters; it++) {
            for (size_t i = 0; i < cnt * n; i++) x[i] = (float)((r + 1) * (int)(i % 5));
            llmt_status s = llmt_comm_barrier(c);
            if (s != LLMT_OK) {
                st_fail(a, "barrier", s);
                break;
            }
            t0 = now_s();
            switch (op) {
            case 0: s = llmt_comm_all_reduce(c, x, y, cnt, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL); break;
            case 1: s = llmt_comm_all_gather(c, x, y, cnt, LLMT_DTYPE_FP32, NULL); break;
            case 2: s = llmt_comm_reduce_scatter(c, x, y, cnt, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL); break;
            case 3: s = llmt_comm_broadcast(c, x, cnt, LLMT_DTYPE_FP32, n - 1, NULL); break;
            default: s = llmt_comm_barrier(c); break;
            }
            double dt = now_s() - t0;
            if (dt < best) best = dt;
            if (s != LLMT_OK) {
                st_fail(a, names[op], s);
                break;
            }
            /* check */
            int bad = 0;
            double tri = n * (n + 1) / 2.0;
            for (size_t i = 0; i < cnt && !bad; i++) {
                float k = (float)(i % 5);
                switch (op) {
                case 0: bad = y[i] != (float)(tri * k); break;
                case 1:
                    for (int q = 0; q < n && !bad; q++)
                        bad = y[q * cnt + i] != (float)((q + 1) * (int)(i % 5));
                    break;
                case 2: bad = y[i] != (float)(tri * (float)((r * cnt + i) % 5)); break;
                case 3: bad = x[i] != (float)(n * k); break;
                default: break;
                }
            }
            if (bad) st_fail(a, names[op], LLMT_ERR_INTERNAL);
        }
        if (a->fails) break;
        if (r == 0 && a->verbose)
            printf("%-15s %10zu bytes/rank  best %9.1f us  %8.2f GB/s\n", names[op],
                   op == 4 ? (size_t)0 : cnt * sizeof(float), best * 1e6,
                   op == 4 ? 0.0 : cnt * sizeof(float) / best / 1e9);
    }
    free(x);
    free(y);
    if (!a->fails) {
        llmt_status s = llmt_comm_finalize(c);
        if (s != LLMT_OK) st_fail(a, "finalize", s);
    }
    return NULL;
}

static int do_selftest(int argc, char **argv)
{
    long ranks = 2, bytes = 1 << 20, iters = 5, tmo = 30000;
    int ranks_given = 0;
    for (int i = 2; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = CLI_OK;
        if (!strcmp(argv[i], "--ranks"))
            rc = parse_long(argv[i], v, 1, 64, &ranks), i++, ranks_given = 1;
        else if (!strcmp(argv[i], "--bytes")) rc = parse_long(argv[i], v, 4, 1L << 30, &bytes), i++;
        else if (!strcmp(argv[i], "--iters")) rc = parse_long(argv[i], v, 1, 100000, &iters), i++;
        else if (!strcmp(argv[i], "--timeout-ms")) rc = parse_long(argv[i], v, 1, 86400000, &tmo), i++;
        else {
            fprintf(stderr, "llmtrain comm: selftest: unknown argument '%s'\n", argv[i]);
            return CLI_USAGE;
        }
        if (rc != CLI_OK) return rc;
    }
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    o.timeout_ms = tmo;
    llmt_comm_env e;
    llmt_comm_env_discover(&e, sizeof e);
    if (ranks_given && e.world_size > 1) { /* the launcher's processes are the ranks */
        fprintf(stderr,
                "llmtrain comm: selftest: --ranks sets in-process ranks; under a "
                "launcher (%s, world size %d) the processes are the ranks: drop it\n",
                e.launcher, (int)e.world_size);
        return CLI_USAGE;
    }
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    int nr = e.world_size > 1 ? 1 : (int)ranks;
    llmt_comm **c = calloc((size_t)nr, sizeof *c);
    llmt_status s = e.world_size > 1 ? llmt_comm_create_from_env(ctx, &o, c)
                                     : llmt_comm_create_inproc(ctx, nr, &o, c);
    if (s != LLMT_OK) {
        int rc = cli_fail_status(CMD, s, llmt_context_last_error(ctx));
        llmt_context_destroy(ctx);
        free(c);
        return rc;
    }
    llmt_comm_backend be;
    llmt_comm_backend_of(c[0], &be);
    int32_t rank0, size;
    llmt_comm_rank(c[0], &rank0);
    llmt_comm_size(c[0], &size);
    if (rank0 == 0)
        printf("selftest: backend %s, %d ranks, %ld bytes per rank, %ld iterations\n",
               be == LLMT_COMM_MPI ? "mpi" : be == LLMT_COMM_NCCL ? "nccl" : "inproc",
               (int)size, bytes, iters);
    if (be == LLMT_COMM_NCCL) {
        llmt_comm_destroy(c[0]);
        llmt_context_destroy(ctx);
        free(c);
        return cli_fail(CMD, "selftest uses host buffers; NCCL is not covered");
    }
    st_arg *a = calloc((size_t)nr, sizeof *a);
    pthread_t *th = calloc((size_t)nr, sizeof *th);
    for (int r = 0; r < nr; r++) {
        a[r].c = c[r];
        a[r].count = (size_t)bytes / sizeof(float);
        a[r].iters = (int)iters;
        a[r].verbose = 1;
        pthread_create(&th[r], NULL, st_run, &a[r]);
    }
    int fails = 0;
    for (int r = 0; r < nr; r++) {
        pthread_join(th[r], NULL);
        if (a[r].fails) {
            fprintf(stderr, "llmtrain comm: rank %d: %s\n", (int)(nr > 1 ? r : rank0),
                    a[r].err);
            fails += a[r].fails;
        }
    }
    for (int r = 0; r < nr; r++) llmt_comm_destroy(c[r]);
    llmt_context_destroy(ctx);
    free(a);
    free(th);
    free(c);
    if (fails) return cli_fail(CMD, "selftest: %d failures", fails);
    if (rank0 == 0) printf("selftest: ok\n");
    return CLI_OK;
}

/* ---- dump reader */

typedef struct rk {
    int rank;
    unsigned long long entered, completed;
    char last[1024];
    int seen;
} rk;

static int do_dump(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "llmtrain comm: dump needs one or more dump files\n");
        return CLI_USAGE;
    }
    rk *t = NULL;
    int nt = 0, cap = 0;
    char header[1024] = "";
    for (int i = 2; i < argc; i++) {
        FILE *f = fopen(argv[i], "r");
        if (!f) return cli_fail(CMD, "open %s: %s", argv[i], strerror(errno));
        char line[1024];
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = 0;
            if (!strncmp(line, "llmtrain comm flight recorder:", 30)) {
                if (!header[0]) snprintf(header, sizeof header, "%s", line);
                continue;
            }
            int r;
            unsigned long long e, c;
            int off = 0;
            if (sscanf(line, "rank %d: %n", &r, &off) < 1 || off == 0) continue;
            int k;
            for (k = 0; k < nt && t[k].rank != r; k++) {}
            if (k == nt) {
                if (nt == cap) {
                    cap = cap ? cap * 2 : 16;
                    rk *nt2 = realloc(t, (size_t)cap * sizeof *t);
                    if (!nt2) {
                        fclose(f);
                        free(t);
                        return cli_fail(CMD, "no memory");
                    }
                    t = nt2;
                }
                memset(&t[nt], 0, sizeof t[nt]);
                t[nt].rank = r;
                nt++;
            }
            const char *rest = line + off;
            if (sscanf(rest, "recorder entered=%llu completed=%llu", &e, &c) == 2) {
                if (e > t[k].entered) t[k].entered = e;
                if (c > t[k].completed) t[k].completed = c;
                t[k].seen = 1;
            } else if (!strncmp(rest, "seq=", 4)) {
                snprintf(t[k].last, sizeof t[k].last, "%s", rest);
            }
        }
        fclose(f);
    }
    if (nt == 0) {
        free(t);
        return cli_fail(CMD, "no recorder entries in the given files");
    }
    if (header[0]) printf("%s\n", header);
    unsigned long long maxe = 0, minc = ~0ULL;
    for (int k = 0; k < nt; k++) {
        if (t[k].entered > maxe) maxe = t[k].entered;
        if (t[k].completed < minc) minc = t[k].completed;
    }
    for (int k = 0; k < nt; k++)
        printf("rank %d: entered %llu, completed %llu; last: %s\n", t[k].rank,
               t[k].entered, t[k].completed, t[k].last[0] ? t[k].last : "(none)");
    unsigned long long stuck = minc + 1;
    printf("first sequence number not completed by every rank: %llu\n", stuck);
    printf("ranks that did not reach seq %llu:", stuck);
    int any = 0;
    for (int k = 0; k < nt; k++)
        if (t[k].entered < stuck) {
            printf(" %d", t[k].rank);
            any = 1;
        }
    /* a rank that skipped `stuck` shows up as having entered a later seq
     * with completed < stuck: look at its last state */
    for (int k = 0; k < nt; k++)
        if (t[k].entered > stuck && t[k].completed < stuck) {
            printf(" %d(skipped to %llu)", t[k].rank, t[k].entered);
            any = 1;
        }
    printf("%s\n", any ? "" : " none (all entered it; look for a slow or dead link)");
    (void)maxe;
    free(t);
    return CLI_OK;
}

int cmd_comm(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "llmtrain comm: a subcommand is required (env, selftest, dump)\n");
        return CLI_USAGE;
    }
    if (!strcmp(argv[1], "env") && argc > 2) {
        fprintf(stderr, "llmtrain comm: env takes no arguments, got '%s'\n", argv[2]);
        return CLI_USAGE;
    }
    if (!strcmp(argv[1], "env")) return do_env();
    if (!strcmp(argv[1], "selftest")) return do_selftest(argc, argv);
    if (!strcmp(argv[1], "dump")) return do_dump(argc, argv);
    fprintf(stderr, "llmtrain comm: unknown subcommand '%s' (env, selftest, dump)\n",
            argv[1]);
    return CLI_USAGE;
}
