/* Sends left in flight (lib/comm/p2p.h), which the interleaved pipeline
 * needs across processes:
 *   - in-process ranks (threads): LLMT__ISEND_COPY, a send done at once;
 *   - Gloo (two forked processes meeting in a file store): POSTED; both
 *     ranks post 4 sends of 256 KiB to each other before either receives
 *     (a ring that waits forever when each send waits for its receiver),
 *     then receive them in order with the right contents, then wait;
 *     then a send nobody receives: its wait fails with LLMT_ERR_TIMEOUT
 *     after the communicator's timeout (1 s), not a hang.
 * SKIP (77) of the Gloo part without Gloo. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "comm/p2p.h"
#include "llmtrain.h"

#define N 65536 /* floats: 256 KiB, past any eager limit */
#define MSGS 4

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Rank r of a 2-rank c: the ring exchange; returns the failures. */
static int exchange(llmt_comm *c, int r)
{
    int bad = 0;
    float *out = malloc((size_t)MSGS * N * sizeof *out), *in = malloc(N * sizeof *in);
    llmt__isend *w[MSGS] = {NULL};
    if (!out || !in)
        return 1;
    for (int k = 0; k < MSGS; k++) {
        for (int i = 0; i < N; i++)
            out[(size_t)k * N + i] = (float)(r * 1000 + k) + (float)i * 1e-3f;
        if (llmt__comm_isend(c, out + (size_t)k * N, N, LLMT_DTYPE_FP32, 1 - r, &w[k]) !=
            LLMT_OK) {
            fprintf(stderr, "rank %d isend %d: %s\n", r, k, llmt_comm_last_error(c));
            bad++;
        }
    }
    for (int k = 0; k < MSGS && !bad; k++) {
        if (llmt_comm_recv(c, in, N, LLMT_DTYPE_FP32, 1 - r, NULL) != LLMT_OK) {
            fprintf(stderr, "rank %d recv %d: %s\n", r, k, llmt_comm_last_error(c));
            bad++;
            break;
        }
        for (int i = 0; i < N; i += 997)
            if (in[i] != (float)((1 - r) * 1000 + k) + (float)i * 1e-3f) {
                fprintf(stderr, "rank %d message %d element %d: %g\n", r, k, i, in[i]);
                bad++;
                break;
            }
    }
    for (int k = 0; k < MSGS; k++) {
        if (w[k] && llmt__comm_isend_wait(w[k]) != LLMT_OK) {
            fprintf(stderr, "rank %d wait %d: %s\n", r, k, llmt_comm_last_error(c));
            bad++;
        }
        llmt__comm_isend_free(w[k]);
    }
    free(out);
    free(in);
    return bad;
}

typedef struct targ {
    llmt_comm *c;
    int r, bad;
} targ;

static void *thread_main(void *p)
{
    targ *a = p;
    a->bad = exchange(a->c, a->r);
    return NULL;
}

static void inproc(void)
{
    llmt_comm *c[2] = {NULL, NULL};
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 2, NULL, c), LLMT_OK);
    CHECK_EQ_INT(llmt__comm_isend_kind(c[0]), LLMT__ISEND_COPY);
    float x = 1.0f;
    llmt__isend *w = (llmt__isend *)&x;
    CHECK_STATUS(llmt__comm_isend(c[0], &x, 1, LLMT_DTYPE_FP32, 1, &w), LLMT_OK);
    CHECK(w == NULL); /* copied into the mailbox: done */
    float y = 0.0f;
    CHECK_STATUS(llmt_comm_recv(c[1], &y, 1, LLMT_DTYPE_FP32, 0, NULL), LLMT_OK);
    CHECK(y == 1.0f);
    targ a[2] = {{c[0], 0, 0}, {c[1], 1, 0}};
    pthread_t th[2];
    for (int r = 0; r < 2; r++)
        pthread_create(&th[r], NULL, thread_main, &a[r]);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    CHECK(a[0].bad == 0 && a[1].bad == 0);
    llmt_comm_destroy(c[0]);
    llmt_comm_destroy(c[1]);
    printf("inproc: sends copied at once, the ring exchange of %d x %d floats ok\n", MSGS, N);
}

/* A forked Gloo rank: 0 on success, else the failures. */
static int gloo_rank(const char *dir, int r)
{
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    o.timeout_ms = 1000;
    llmt_comm *c = NULL;
    if (llmt_comm_create_from_store(NULL, dir, "isend", r, 2, &o, &c) != LLMT_OK)
        return 1;
    int bad = llmt__comm_isend_kind(c) != LLMT__ISEND_POSTED;
    bad += exchange(c, r);
    if (!bad && llmt_comm_barrier(c) != LLMT_OK)
        bad++;
    if (!bad && r == 0) { /* a send rank 1 never receives */
        float z[N];
        memset(z, 0, sizeof z);
        llmt__isend *w = NULL;
        double t0 = now();
        llmt_status s = llmt__comm_isend(c, z, N, LLMT_DTYPE_FP32, 1, &w);
        if (s == LLMT_OK && w)
            s = llmt__comm_isend_wait(w);
        double dt = now() - t0;
        printf("gloo: an unmatched send: %s after %.1f s: %s\n", llmt_status_string(s), dt,
               llmt_comm_last_error(c));
        if (s != LLMT_ERR_TIMEOUT || dt > 20.0 || !strstr(llmt_comm_last_error(c), "peer 1"))
            bad++;
        /* the request stays with the aborted communicator, which is left
         * to leak with z: _exit, no return through z's frame, no exit
         * handlers (LeakSanitizer) */
        llmt__comm_isend_free(w);
        fflush(stdout);
        _exit(bad ? 1 : 0);
    }
    if (r == 1)
        sleep(3); /* outlive rank 0's timeout, receiving nothing */
    llmt_comm_destroy(c);
    return bad;
}

static int gloo(void)
{
    if (!(llmt_build_features() & LLMT_FEATURE_GLOO)) {
        printf("no Gloo in this build: its part skipped\n");
        return 77;
    }
    char dir[] = "/tmp/llmt-isend-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    pid_t pid[2];
    fflush(stdout); /* not printed again by the children */
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(gloo_rank(dir, r) ? 1 : 0);
    }
    int ok = 1;
    for (int r = 0; r < 2; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "gloo rank %d failed (status %d)\n", r, st);
            ok = 0;
        }
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    CHECK(ok);
    if (ok)
        printf("gloo: posted sends, the ring exchange of %d x %d floats ok\n", MSGS, N);
    return 0;
}

int main(void)
{
    inproc();
    int g = gloo();
    int rc = check_exit("comm-isend");
    return rc ? rc : g;
}
