/* Data-parallel scaling on this machine: steps of a small GPT-2 with the
 * same global batch on 1 rank (one thread) and on 2 ranks (two threads of
 * an in-process communicator, one compute thread each), ZeRO 0..3.
 * efficiency = (time 1 rank) / (2 x time 2 ranks), per step. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "llmtrain.h"

#define T 64
#define MICRO 4
#define ACCUM 2

static llmt_model_config cfg;
static int32_t *g_in, *g_tg;
static int g_steps;

typedef struct job {
    llmt_comm *c;
    int rank, dp, zero;
    int solo; /* no communicator, this rank's share only (a peer: the
                 same work without any communication) */
    double seconds;
    llmt_status st;
} job;

static void *run(void *p)
{
    job *j = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.seq_len = T;
    o.micro_batch = MICRO;
    o.grad_accum = ACCUM * (j->c || j->solo ? 1 : j->dp);
    o.threads = 1;
    j->st = llmt_model_create(NULL, &cfg, &m);
    if (!j->st) j->st = llmt_trainer_create(m, &o, &tr);
    if (!j->st && j->c) {
        llmt_dp_opts d;
        llmt_dp_opts_init(&d, sizeof d);
        d.zero_stage = j->zero;
        j->st = llmt_trainer_set_comm(tr, j->c, &d);
    }
    int seqs = MICRO * o.grad_accum;
    size_t off = j->c || j->solo ? (size_t)j->rank * seqs * T : 0;
    llmt_batch b = {sizeof b, g_in + off, g_tg + off, seqs, T};
    /* one warm-up step, then timed steps */
    if (!j->st) j->st = llmt_trainer_step(tr, &b, NULL);
    if (j->c && !j->st) j->st = llmt_comm_barrier(j->c);
    double t0 = bench_now();
    for (int k = 0; k < g_steps && !j->st; k++) j->st = llmt_trainer_step(tr, &b, NULL);
    j->seconds = (bench_now() - t0) / g_steps;
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_ctx b;
    if (bench_init(&b, "comm-dp", argc, argv)) return 2;
    g_steps = b.quick ? 2 : 5;
    llmt_model_config_init(&cfg, sizeof cfg);
    cfg.vocab_size = 512;
    cfg.max_seq_len = T;
    cfg.layers = 4;
    cfg.width = 128;
    cfg.heads = 4;
    size_t n = (size_t)2 * ACCUM * MICRO * T;
    g_in = malloc(n * sizeof *g_in);
    g_tg = malloc(n * sizeof *g_tg);
    for (size_t i = 0; i < n; i++) {
        g_in[i] = (int32_t)((i * 2654435761u) % 512);
        g_tg[i] = (int32_t)((i * 40503u + 7) % 512);
    }
    double tokens = (double)n;
    llmt_comm_env env;
    llmt_comm_env_discover(&env, sizeof env);
    if (env.world_size == 2) {
        /* under mpirun -np 2: ranks are processes; compare with the 1-rank
         * step of a run without mpirun */
        llmt_comm *c = NULL;
        if (llmt_comm_create_from_env(NULL, NULL, &c) != LLMT_OK) return 1;
        for (int zero = 0; zero <= 3; zero++) {
            job j = {c, env.rank, 2, zero, 0, 0, 0};
            run(&j);
            double t = j.seconds;
            /* slowest rank (positive doubles order like their bits) */
            llmt_comm_all_reduce(c, &t, &t, 1, LLMT_DTYPE_INT64, LLMT_REDUCE_MAX, NULL);
            if (j.st) return 1;
            if (env.rank == 0) {
                char name[48];
                snprintf(name, sizeof name, "dp2proc_zero%d_step", zero);
                bench_record(&b, name, &t, 1, tokens, "tokens");
                printf("dp 2 processes, ZeRO-%d: %.1f ms/step\n", zero, t * 1e3);
            }
        }
        llmt_comm_destroy(c);
        free(g_in);
        free(g_tg);
        return env.rank == 0 ? bench_finish(&b) : 0;
    }
    job one = {NULL, 0, 2, 0, 0, 0, 0};
    run(&one);
    if (one.st) return 1;
    bench_record(&b, "dp1_step", &one.seconds, 1, tokens, "tokens");
    {   /* two independent half-batch trainers at once: the compute alone */
        job j[2];
        pthread_t th[2];
        for (int r = 0; r < 2; r++) {
            j[r] = (job){NULL, r, 2, 0, 1, 0, 0};
            pthread_create(&th[r], NULL, run, &j[r]);
        }
        for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
        double t = j[0].seconds > j[1].seconds ? j[0].seconds : j[1].seconds;
        bench_record(&b, "solo2_step", &t, 1, tokens, "tokens");
        printf("two independent half-batch trainers (no communication): %.1f "
               "ms/step, efficiency %.2f\n", t * 1e3, one.seconds / (2 * t));
    }
    for (int zero = 0; zero <= 3; zero++) {
        llmt_comm *c[2];
        llmt_comm_create_inproc(NULL, 2, NULL, c);
        job j[2];
        pthread_t th[2];
        for (int r = 0; r < 2; r++) {
            j[r] = (job){c[r], r, 2, zero, 0, 0, 0};
            pthread_create(&th[r], NULL, run, &j[r]);
        }
        for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
        for (int r = 0; r < 2; r++) llmt_comm_destroy(c[r]);
        if (j[0].st || j[1].st) return 1;
        double t = j[0].seconds > j[1].seconds ? j[0].seconds : j[1].seconds;
        char name[48];
        snprintf(name, sizeof name, "dp2_zero%d_step", zero);
        bench_record(&b, name, &t, 1, tokens, "tokens");
        printf("dp scaling (2 ranks, ZeRO-%d): 1 rank %.1f ms/step, 2 ranks "
               "%.1f ms/step, efficiency %.2f\n", zero, one.seconds * 1e3,
               t * 1e3, one.seconds / (2 * t));
    }
    free(g_in);
    free(g_tg);
    return bench_finish(&b);
}
