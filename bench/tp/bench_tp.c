/* Tensor parallelism on this machine (issue 16): tokens/s of tp 2 (two
 * ranks as threads of an in-process communicator, one compute thread
 * each) against tp 1 (one thread, and two OpenMP threads: the same two
 * cores), the same GPT-2 and global batch, fp32 CPU; and the share of a
 * tp 2 step spent in the TP group's collectives (llmt_comm_stats
 * total_seconds of the TP communicator / step time, each rank) beside the
 * planner's prediction for the same layout.
 *
 * The planner is given a profile of this machine, measured here: the
 * in-process all-reduce's bus bandwidth at the TP message size (as
 * hardware.nvlink_GBps, with gpus_per_node 2 so the TP group is "inside a
 * node") and the per-core compute rate that makes its tp 1 step time equal
 * the measured tp 1 (one thread) step (hardware.peak_tflops, efficiency
 * 1). Its tp 2 step time and TP share are then predictions, not fits.
 * The planner assumes TP collectives half hidden behind GEMMs (Megatron's
 * overlap); this engine hides none, so the unhidden share is printed too.
 *
 *   bench_tp [--json FILE] [--repeats N] [--quick]
 *   mpirun -np 2 bench_tp [...]    the same over the MPI backend: two
 *                                  processes, tp 2 across them
 *
 * The trainer is driven through the ABI (llmt_trainer_set_tp_comm), not
 * through llmtrain train / llmt_job. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "llmtrain.h"

#define LAYERS 4
#define WIDTH 256
#define HEADS 4
#define FFN 1024
#define VOCAB 2048
#define T 128
#define MICRO 4
#define ACCUM 1
#define TP_OVERLAP 0.5 /* lib/plan/cost.c's tp_overlap (the planner's default) */

static int32_t *g_in, *g_tg;
static int g_steps;

typedef struct job {
    llmt_comm *c; /* NULL: tp 1 */
    int threads;
    double *step_s;        /* g_steps step times */
    double tp_s, tp_calls; /* TP communicator, over the timed steps */
    double tp_bus;
    llmt_status st;
    char err[256];
} job;

static void config(llmt_model_config *c)
{
    llmt_model_config_init(c, sizeof *c);
    c->arch = LLMT_ARCH_GPT2;
    c->layers = LAYERS;
    c->width = WIDTH;
    c->heads = HEADS;
    c->ffn_hidden = FFN;
    c->vocab_size = VOCAB;
    c->padded_vocab_size = VOCAB;
    c->max_seq_len = T;
    c->seed = 3;
}

static void *run(void *p)
{
    job *j = p;
    llmt_model_config cfg;
    config(&cfg);
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.seq_len = T;
    o.micro_batch = MICRO;
    o.grad_accum = ACCUM;
    o.threads = j->threads;
    j->st = llmt_model_create(NULL, &cfg, &m);
    if (!j->st)
        j->st = llmt_trainer_create(m, &o, &tr);
    if (!j->st && j->c)
        j->st = llmt_trainer_set_tp_comm(tr, j->c);
    llmt_batch b = {sizeof b, g_in, g_tg, MICRO * ACCUM, T};
    if (!j->st) /* warm-up */
        j->st = llmt_trainer_step(tr, &b, NULL);
    if (j->c && !j->st)
        j->st = llmt_comm_barrier(j->c);
    if (j->c && !j->st)
        j->st = llmt_comm_reset_stats(j->c);
    for (int k = 0; k < g_steps && !j->st; k++) {
        double t0 = bench_now();
        j->st = llmt_trainer_step(tr, &b, NULL);
        j->step_s[k] = bench_now() - t0;
    }
    if (j->c && !j->st) {
        llmt_comm_stats s;
        memset(&s, 0, sizeof s);
        s.struct_size = sizeof s;
        j->st = llmt_comm_get_stats(j->c, &s);
        j->tp_s = s.total_seconds;
        j->tp_calls = (double)s.total_calls;
        j->tp_bus = s.total_bus_bytes;
    }
    if (j->st)
        snprintf(j->err, sizeof j->err, "%s",
                 tr  ? llmt_trainer_last_error(tr)
                 : m ? llmt_model_last_error(m)
                     : "create");
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *x, int n)
{
    double *s = malloc((size_t)n * sizeof *s);
    memcpy(s, x, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_d);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

/* The in-process all-reduce of `bytes` (fp32) on 2 ranks: median seconds. */
typedef struct ar {
    llmt_comm *c;
    float *buf;
    size_t n;
    int reps;
    double *t;
} ar;

static void *ar_run(void *p)
{
    ar *a = p;
    for (int k = 0; k < a->reps; k++) {
        llmt_comm_barrier(a->c);
        double t0 = bench_now();
        llmt_comm_all_reduce(a->c, a->buf, a->buf, a->n, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM,
                             NULL);
        a->t[k] = bench_now() - t0;
    }
    return NULL;
}

static double allreduce_s(size_t bytes, int reps)
{
    llmt_comm *c[2] = {NULL, NULL};
    if (llmt_comm_create_inproc(NULL, 2, NULL, c) != LLMT_OK)
        return -1;
    ar a[2];
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        a[r] = (ar){c[r], calloc(bytes / 4, 4), bytes / 4, reps, calloc((size_t)reps, 8)};
        pthread_create(&th[r], NULL, ar_run, &a[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    double m = median(a[0].t, reps);
    for (int r = 0; r < 2; r++) {
        free(a[r].buf);
        free(a[r].t);
        llmt_comm_destroy(c[r]);
    }
    return m;
}

/* The same over an existing communicator (MPI: every rank calls it). */
static double allreduce_on(llmt_comm *c, size_t bytes, int reps)
{
    double *t = calloc((size_t)reps, sizeof *t);
    ar a = {c, calloc(bytes / 4, 4), bytes / 4, reps, t};
    ar_run(&a);
    double m = median(t, reps);
    free(a.buf);
    free(t);
    return m;
}

/* The planner's estimate of this model on this machine's profile. */
static int plan(int tp, double peak_tflops, double link_GBps, llmt_plan_estimate *e)
{
    char js[2048];
    snprintf(
        js, sizeof js,
        "{\"name\": \"bench-tp\", \"model\": {\"arch\": \"gpt2\", \"layers\": %d, "
        "\"hidden\": %d, \"heads\": %d, \"ffn\": %d, \"vocab\": %d, \"seq_len\": %d}, "
        "\"parallelism\": {\"tp\": %d, \"dp\": 1}, "
        "\"precision\": {\"param\": \"fp32\", \"master\": \"fp32\", \"gemm\": \"fp32\"}, "
        "\"batch\": {\"micro\": %d, \"grad_accum\": %d}, \"train\": {\"device\": \"cpu\"}, "
        "\"hardware\": {\"gpu\": \"cpu\", \"gpus_per_node\": 2, \"peak_tflops\": %.6g, "
        "\"efficiency\": 1.0, \"nvlink_GBps\": %.6g}}",
        LAYERS, WIDTH, HEADS, FFN, VOCAB, T, tp, MICRO, ACCUM, peak_tflops, link_GBps);
    llmt_spec *s = NULL;
    llmt_plan *p = NULL;
    llmt_status st = llmt_spec_parse_json(NULL, js, strlen(js), &s);
    if (!st)
        st = llmt_plan_create(NULL, s, tp, &p);
    memset(e, 0, sizeof *e);
    e->struct_size = sizeof *e;
    if (!st)
        st = llmt_plan_get_estimate(p, e);
    if (st)
        fprintf(stderr, "bench_tp: plan: %s\n",
                p ? llmt_plan_last_error(p) : llmt_last_error());
    llmt_plan_destroy(p);
    llmt_spec_destroy(s);
    return st ? -1 : 0;
}

/* The planner on this machine's profile (the TP message's all-reduce
 * time `ar`; the core's rate that makes its tp 1 step the measured m1),
 * printed and recorded beside the measured tp 2 step m2 and TP shares. */
static int predict(bench_ctx *b, const char *how, double tokens, double m1, double m2,
                   const double share[2], double calls, double bus, double ar)
{
    size_t msg = (size_t)MICRO * T * WIDTH * sizeof(float);
    double busbw = (double)msg / ar;     /* 2 ranks: 2(n-1)/n = 1 */
    double link = busbw * 2 / 0.8 / 1e9; /* cost.c: nvlink_GBps/2 x link_eff */
    char name[96];
    snprintf(name, sizeof name, "%s all-reduce, TP message", how);
    bench_record(b, name, &ar, 1, (double)msg, "bytes");
    double lo = 1e-4, hi = 10, peak = 0;
    llmt_plan_estimate e1, e2;
    for (int it = 0; it < 60; it++) {
        peak = sqrt(lo * hi);
        if (plan(1, peak, link, &e1))
            return 1;
        if (e1.step_time_s > m1)
            lo = peak;
        else
            hi = peak;
    }
    if (plan(2, peak, link, &e2))
        return 1;
    double pshare = e2.time_tp_s / e2.step_time_s;
    double tp_all = e2.time_tp_s / (1 - TP_OVERLAP); /* no overlap: this engine */
    double pshare_all = tp_all / (e2.step_time_s - e2.time_tp_s + tp_all);
    printf("\n%s: tp2 step %.4f s; TP collectives %.1f%% (rank 0), %.1f%% (rank 1) of it; "
           "%.0f calls, %.0f bus bytes per step (plan: %.0f calls, %.0f)\n",
           how, m2, 100 * share[0], 100 * share[1], calls, bus, e2.engine_tp_calls,
           e2.engine_tp_bus_bytes);
    printf("%s: all-reduce of %zu B in %.1f us (bus %.2f GB/s), core %.1f GFLOP/s "
           "(planner's tp 1 step %.4f s = measured)\n",
           how, msg, ar * 1e6, busbw / 1e9, peak * 1e3, e1.step_time_s);
    printf("%s: planner, tp 2: step %.4f s (measured %.4f), TP share %.1f%% exposed with its "
           "50%% overlap, %.1f%% with none (this engine overlaps none)\n",
           how, e2.step_time_s, m2, 100 * pshare, 100 * pshare_all);
    /* seconds the planner predicts, beside the measured ones */
    double ps[4] = {e1.step_time_s, e2.step_time_s, e2.time_tp_s, tp_all};
    snprintf(name, sizeof name, "%s planner tp1 step (fitted)", how);
    bench_record(b, name, &ps[0], 1, tokens, "tokens");
    snprintf(name, sizeof name, "%s planner tp2 step", how);
    bench_record(b, name, &ps[1], 1, tokens, "tokens");
    snprintf(name, sizeof name, "%s planner tp2 TP exposed per step", how);
    bench_record(b, name, &ps[2], 1, e2.engine_tp_bus_bytes, "bus bytes");
    snprintf(name, sizeof name, "%s planner tp2 TP unhidden per step", how);
    bench_record(b, name, &ps[3], 1, e2.engine_tp_bus_bytes, "bus bytes");
    return 0;
}

/* Under mpirun -np 2 (MPI backend): both processes first train their own
 * tp 1 copy at once (one core each), then tp 2 over the world. */
static int mpi_main(bench_ctx *b, double tokens)
{
    llmt_comm *c = NULL;
    int32_t rank = 0, size = 0;
    if (llmt_comm_create_from_env(NULL, NULL, &c) != LLMT_OK || llmt_comm_rank(c, &rank) ||
        llmt_comm_size(c, &size) || size != 2) {
        fprintf(stderr, "bench_tp: MPI: needs mpirun -np 2 (%s)\n", llmt_last_error());
        llmt_comm_destroy(c);
        return 1;
    }
    double s1[64], s2[64];
    job one = {.threads = 1, .step_s = s1}, tp = {.c = c, .threads = 1, .step_s = s2};
    llmt_comm_barrier(c);
    run(&one);
    llmt_comm_barrier(c);
    if (!one.st)
        run(&tp);
    if (one.st || tp.st) {
        fprintf(stderr, "bench_tp: rank %d: %s\n", rank, one.st ? one.err : tp.err);
        llmt_comm_abort(c);
        llmt_comm_destroy(c);
        return 1;
    }
    /* a step ends when both ranks have finished it */
    float f1[64], f2[64], mine[2] = {(float)tp.tp_s, 0}, both[2];
    for (int k = 0; k < g_steps; k++) {
        f1[k] = (float)s1[k];
        f2[k] = (float)s2[k];
    }
    llmt_comm_all_reduce(c, f1, f1, (size_t)g_steps, LLMT_DTYPE_FP32, LLMT_REDUCE_MAX, NULL);
    llmt_comm_all_reduce(c, f2, f2, (size_t)g_steps, LLMT_DTYPE_FP32, LLMT_REDUCE_MAX, NULL);
    llmt_comm_all_gather(c, mine, both, 1, LLMT_DTYPE_FP32, NULL);
    size_t msg = (size_t)MICRO * T * WIDTH * sizeof(float);
    double ar = allreduce_on(c, msg, b->quick ? 20 : 100);
    int rc = 0;
    if (rank == 0) {
        double s1w[64], s2w[64], total = 0;
        for (int k = 0; k < g_steps; k++) {
            s1w[k] = f1[k];
            s2w[k] = f2[k];
            total += s2w[k];
        }
        bench_record(b, "mpi gpt2 tp1 (each process its own copy, 1 thread)", s1w, g_steps,
                     tokens, "tokens");
        bench_record(b, "mpi gpt2 tp2 (2 processes x 1 thread)", s2w, g_steps, tokens,
                     "tokens");
        double m1 = median(s1w, g_steps), m2 = median(s2w, g_steps);
        double share[2] = {both[0] / total, both[1] / total};
        for (int r = 0; r < 2; r++) {
            double per = both[r] / g_steps;
            bench_record(b,
                         r ? "mpi tp2 rank1 TP collectives per step"
                           : "mpi tp2 rank0 TP collectives per step",
                         &per, 1, tp.tp_bus / g_steps, "bus bytes");
        }
        printf("\nmpi tokens/s: tp1 %.0f per process, tp2 %.0f (tp2 / tp1 %.2f)\n", tokens / m1,
               tokens / m2, m1 / m2);
        rc = predict(b, "mpi", tokens, m1, m2, share, tp.tp_calls / g_steps,
                     tp.tp_bus / g_steps, ar);
    }
    llmt_comm_destroy(c);
    return rc ? rc : rank == 0 ? bench_finish(b) : 0;
}

int main(int argc, char **argv)
{
    bench_ctx b;
    if (bench_init(&b, "tp", argc, argv))
        return 2;
    g_steps = b.quick ? 3 : (b.repeats > 0 ? b.repeats : 10);
    size_t n = (size_t)MICRO * ACCUM * T;
    g_in = malloc(n * sizeof *g_in);
    g_tg = malloc(n * sizeof *g_tg);
    for (size_t i = 0; i < n; i++) {
        g_in[i] = (int32_t)((i * 7919u) % VOCAB);
        g_tg[i] = (int32_t)((i * 104729u + 3) % VOCAB);
    }
    double tokens = (double)n;
    llmt_comm_env env;
    if (llmt_comm_env_discover(&env, sizeof env) == LLMT_OK && env.world_size > 1)
        return mpi_main(&b, tokens);
    /* tp 1 on one core, tp 1 on two (OpenMP), tp 2 (two ranks, one core each) */
    double s1[64], s1b[64], s2[2][64];
    job one = {.threads = 1, .step_s = s1}, two = {.threads = 2, .step_s = s1b};
    run(&one);
    run(&two);
    llmt_comm *c[2] = {NULL, NULL};
    job tp[2];
    pthread_t th[2];
    llmt_status st = llmt_comm_create_inproc(NULL, 2, NULL, c);
    for (int r = 0; r < 2 && !st; r++) {
        tp[r] = (job){.c = c[r], .threads = 1, .step_s = s2[r]};
        pthread_create(&th[r], NULL, run, &tp[r]);
    }
    for (int r = 0; r < 2 && !st; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++)
        llmt_comm_destroy(c[r]);
    const job *all[4] = {&one, &two, &tp[0], &tp[1]};
    for (int i = 0; i < 4; i++)
        if (st || all[i]->st) {
            fprintf(stderr, "bench_tp: %s\n", st ? "in-process communicator" : all[i]->err);
            return 1;
        }
    /* a step of tp 2 ends when both ranks have finished it */
    double s2w[64];
    for (int k = 0; k < g_steps; k++)
        s2w[k] = fmax(s2[0][k], s2[1][k]);
    bench_record(&b, "gpt2 tp1 (1 thread)", s1, g_steps, tokens, "tokens");
    bench_record(&b, "gpt2 tp1 (2 threads)", s1b, g_steps, tokens, "tokens");
    bench_record(&b, "gpt2 tp2 (2 ranks x 1 thread)", s2w, g_steps, tokens, "tokens");
    double m1 = median(s1, g_steps), m1b = median(s1b, g_steps), m2 = median(s2w, g_steps);
    double total = 0;
    for (int k = 0; k < g_steps; k++)
        total += s2w[k];
    double share[2];
    for (int r = 0; r < 2; r++) {
        share[r] = tp[r].tp_s / total;
        double per = tp[r].tp_s / g_steps;
        bench_record(
            &b, r ? "tp2 rank1 TP collectives per step" : "tp2 rank0 TP collectives per step",
            &per, 1, tp[r].tp_bus / g_steps, "bus bytes");
    }
    printf("\nin-process tokens/s: tp1 1 thread %.0f, tp1 2 threads %.0f, tp2 %.0f "
           "(tp2 / tp1 1 thread %.2f, / tp1 2 threads %.2f)\n",
           tokens / m1, tokens / m1b, tokens / m2, m1 / m2, m1b / m2);
    size_t msg = (size_t)MICRO * T * WIDTH * sizeof(float);
    double ar = allreduce_s(msg, b.quick ? 20 : 100);
    if (predict(&b, "in-process", tokens, m1, m2, share, tp[0].tp_calls / g_steps,
                tp[0].tp_bus / g_steps, ar))
        return 1;
    free(g_in);
    free(g_tg);
    return bench_finish(&b);
}
