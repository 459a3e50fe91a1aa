/* Context parallelism on this machine (issue 18): the step time of a
 * Llama model at sequence 1024 under cp 2 (two ranks as threads of an
 * in-process communicator, one compute thread each; ring and all-gather
 * exchange) against cp 1 (one thread, and two OpenMP threads: the same
 * two cores), fp32 CPU, the same global batch; and the share of a cp 2
 * step spent in the CP group's communication (llmt_comm_stats
 * total_seconds of the CP communicator / step time, each rank: K/V
 * exchange, dK/dV return, the gradient and loss sums).
 *
 * What differs besides the split: cp 1 runs the backend's attention op
 * (dev_cpu.c: probabilities kept), cp > 1 the block kernels of
 * lib/exec/attn_cp.c (plain C, recomputes the scores in its backward),
 * so the ratio is of the two whole engines, not of the exchange alone.
 * The CP group is attached with llmt_trainer_set_cp_comm; the trainer is
 * made on the CPU op table directly (llmt__trainer_create_dev).
 *
 *   bench_cp [--quick]     --quick: sequence 256, one timed step */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/dev.h"
#include "llmtrain.h"
#include "train/cp.h"
#include "train/device.h"

#define LAYERS 2
#define WIDTH 128
#define HEADS 4
#define VOCAB 512
#define MICRO 1

static int g_T = 1024, g_steps = 3;
static int32_t *g_in, *g_tg;

typedef struct rank {
    llmt_comm *c; /* NULL: cp 1 */
    int threads, variant;
    double step_s, comm_s; /* mean over the timed steps */
    llmt_status st;
    char err[256];
} rank;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *rank_main(void *p)
{
    rank *a = p;
    llmt_model_config c;
    llmt_model_config_init(&c, sizeof c);
    c.arch = LLMT_ARCH_LLAMA;
    c.layers = LAYERS;
    c.width = WIDTH;
    c.heads = HEADS;
    c.kv_heads = HEADS;
    c.vocab_size = VOCAB;
    c.padded_vocab_size = VOCAB;
    c.max_seq_len = g_T;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    a->st = llmt_model_create(NULL, &c, &m);
    if (a->st == LLMT_OK) {
        llmt_trainer_opts o;
        llmt_trainer_opts_init(&o, sizeof o);
        o.micro_batch = MICRO;
        o.seq_len = g_T;
        o.threads = a->threads;
        a->st = llmt__trainer_create_dev(m, &o, llmt__dev_cpu(), &tr);
    }
    if (a->st == LLMT_OK && a->c) {
        llmt_cp_opts co;
        llmt_cp_opts_init(&co, sizeof co);
        co.variant = a->variant == LLMT__CP_ALL_GATHER ? LLMT_CP_ALL_GATHER : LLMT_CP_RING;
        a->st = llmt_trainer_set_cp_comm(tr, a->c, &co);
    }
    llmt_comm_stats cs;
    memset(&cs, 0, sizeof cs);
    cs.struct_size = sizeof cs;
    double t0 = 0.0;
    for (int k = 0; k <= g_steps && a->st == LLMT_OK; k++) { /* step 0: warm-up */
        if (k == 1) {
            t0 = now();
            if (a->c)
                llmt_comm_reset_stats(a->c);
        }
        llmt_batch b = {sizeof b, g_in, g_tg, MICRO, g_T};
        a->st = llmt_trainer_step(tr, &b, NULL);
    }
    if (a->st == LLMT_OK) {
        a->step_s = (now() - t0) / g_steps;
        if (a->c && llmt_comm_get_stats(a->c, &cs) == LLMT_OK)
            a->comm_s = cs.total_seconds / g_steps;
    } else {
        snprintf(a->err, sizeof a->err, "%s", tr ? llmt_trainer_last_error(tr) : "create");
    }
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return NULL;
}

static int run(int cp, int threads, int variant, const char *name, double base)
{
    rank r[2];
    llmt_comm *c[2] = {NULL, NULL};
    memset(r, 0, sizeof r);
    if (cp > 1 && llmt_comm_create_inproc(NULL, cp, NULL, c) != LLMT_OK)
        return 1;
    pthread_t th[2];
    for (int i = 0; i < cp; i++) {
        r[i].c = c[i];
        r[i].threads = threads;
        r[i].variant = variant;
        pthread_create(&th[i], NULL, rank_main, &r[i]);
    }
    for (int i = 0; i < cp; i++)
        pthread_join(th[i], NULL);
    int bad = 0;
    for (int i = 0; i < cp; i++) {
        if (r[i].st != LLMT_OK) {
            fprintf(stderr, "%s rank %d: %s\n", name, i, r[i].err);
            bad = 1;
        }
        llmt_comm_destroy(c[i]);
    }
    if (bad)
        return 1;
    double tok = (double)MICRO * g_T / r[0].step_s;
    printf("%-22s seq %d: step %.3f s, %.0f tokens/s", name, g_T, r[0].step_s, tok);
    if (base > 0.0)
        printf(", %.2fx cp 1 (1 thread)", base / r[0].step_s);
    for (int i = 0; i < cp && cp > 1; i++)
        printf(", rank %d in CP comm %.1f%%", i, 100.0 * r[i].comm_s / r[i].step_s);
    printf("\n");
    return 0;
}

static double g_base;

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
        g_T = 256;
        g_steps = 1;
    }
    size_t n = (size_t)MICRO * g_T;
    g_in = malloc(n * sizeof *g_in);
    g_tg = malloc(n * sizeof *g_tg);
    if (!g_in || !g_tg)
        return 1;
    uint64_t s = 42;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        g_in[i] = (int32_t)((s >> 33) % VOCAB);
        g_tg[i] = (g_in[i] * 7 + 1) % VOCAB;
    }
    /* cp 1 on one thread first: the base of the ratios */
    rank r;
    memset(&r, 0, sizeof r);
    r.threads = 1;
    pthread_t th;
    pthread_create(&th, NULL, rank_main, &r);
    pthread_join(th, NULL);
    if (r.st != LLMT_OK) {
        fprintf(stderr, "cp 1: %s\n", r.err);
        return 1;
    }
    g_base = r.step_s;
    printf("%-22s seq %d: step %.3f s, %.0f tokens/s\n", "cp 1, 1 thread", g_T, r.step_s,
           (double)MICRO * g_T / r.step_s);
    int bad = run(1, 2, 0, "cp 1, 2 threads", g_base);
    bad |= run(2, 1, LLMT__CP_RING, "cp 2 ring", g_base);
    bad |= run(2, 1, LLMT__CP_ALL_GATHER, "cp 2 all-gather", g_base);
    free(g_in);
    free(g_tg);
    return bad;
}
