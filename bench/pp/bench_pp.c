/* Pipeline parallelism on this machine (lib/train/pp.c): the step time of
 * pp 2 against pp 1, stages as threads over an in-process communicator
 * (fp32 CPU engine, one thread per stage), and each stage's measured
 * bubble (the share of the schedule's wall time spent waiting in receives,
 * llmt_trainer_pp_stats) beside the balanced pipeline's (p-1)/(m+p-1) (and
 * interleaved with 2 chunks of a layer a stage: (p-1)/(2m+p-1)),
 * which the planner uses.
 *
 * The model has equal layers and a head much cheaper than a layer
 * (vocabulary 128, width 128), split evenly, so each stage's forward and
 * backward take about the same time: the condition of the formula. What
 * still differs from it: the first stage embeds and the last runs the head
 * and the loss; every hand-off between threads costs a wake-up; and on two
 * shared cores the stages' threads compete with anything else running.
 * pp 1 runs on one thread and on two (OpenMP in the GEMMs): the same two
 * cores pp 2 uses. Steps after one warm-up step are averaged; the pp 2 step
 * time is stage 0's wall time of llmt_trainer_step.
 *
 * Both again in compute time, which other load on the machine does not
 * move: each stage's bubble on the stages' compute-time clocks
 * (llmt_pp_stats.bubble_cpu: lib/train/pp.c), and the step as it would
 * take with a core per stage (pp 1: its thread's CPU time; pp 2: the
 * schedule's span on those clocks plus the larger stage's CPU time outside
 * its ops: optimizer, hand-offs). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "llmtrain.h"

#define MAXP 4
#define MICRO 2
#define T 128
#define V 128

static int g_steps, g_layers = 4, g_width = 128;

/* This thread's CPU time: a stage's work whatever else the machine runs
 * (one thread per stage; the in-process receives sleep, not spin). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int32_t *g_in, *g_tg;

typedef struct stage_arg {
    llmt_comm *c;
    int pp, m, sched, threads, v;
    double step_s, idle_s, bubble, step_wall;
    /* thread CPU time: of the step, of the stage's ops (busy), the
     * schedule's span on the stages' compute-time clocks and the bubble on
     * them (llmt_pp_stats) */
    double step_cpu, busy_cpu, span_cpu, bubble_cpu;
    llmt_pp_stats ps;
    llmt_status st;
    char err[512];
} stage_arg;

static void *stage_main(void *p)
{
    stage_arg *a = p;
    llmt_model_config mc;
    llmt_model_config_init(&mc, sizeof mc);
    mc.arch = LLMT_ARCH_LLAMA;
    mc.vocab_size = V;
    mc.padded_vocab_size = V;
    mc.max_seq_len = T;
    mc.layers = g_layers;
    mc.width = g_width;
    mc.heads = 4;
    mc.kv_heads = 4;
    mc.seed = 1;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    a->st = llmt_model_create(NULL, &mc, &m);
    if (a->st == LLMT_OK) {
        llmt_trainer_opts o;
        llmt_trainer_opts_init(&o, sizeof o);
        o.micro_batch = MICRO;
        o.grad_accum = a->m;
        o.seq_len = T;
        o.threads = a->threads;
        a->st = llmt_trainer_create(m, &o, &tr);
    }
    if (a->st == LLMT_OK && a->pp > 1) {
        llmt_pp_opts po;
        llmt_pp_opts_init(&po, sizeof po);
        po.schedule = a->sched;
        po.virtual_stages = a->v > 1 ? a->v : 1;
        a->st = llmt_trainer_set_pp_comm(tr, a->c, &po);
    }
    size_t per = (size_t)a->m * MICRO * T;
    double sum_s = 0.0, sum_b = 0.0, sum_w = 0.0, sum_i = 0.0, sum_c = 0.0, sum_sp = 0.0,
           sum_bc = 0.0, sum_bu = 0.0;
    for (int k = 0; k <= g_steps && a->st == LLMT_OK; k++) {
        llmt_batch b = {sizeof b, g_in + (size_t)k * per, g_tg + (size_t)k * per, a->m * MICRO,
                        T};
        double t0 = bench_now(), c0 = cpu_now();
        a->st = llmt_trainer_step(tr, &b, NULL);
        double w = bench_now() - t0, c = cpu_now() - c0;
        memset(&a->ps, 0, sizeof a->ps);
        a->ps.struct_size = sizeof a->ps;
        if (a->st == LLMT_OK)
            a->st = llmt_trainer_pp_stats(tr, &a->ps);
        if (k == 0)
            continue; /* warm-up */
        sum_w += w;
        sum_s += a->ps.step_seconds;
        sum_b += a->ps.bubble;
        sum_i += a->ps.idle_seconds;
        sum_c += c;
        sum_sp += a->ps.span_cpu_seconds;
        sum_bc += a->ps.bubble_cpu;
        sum_bu += a->ps.busy_cpu_seconds;
    }
    a->busy_cpu = sum_bu / g_steps;
    a->step_cpu = sum_c / g_steps;
    a->span_cpu = sum_sp / g_steps;
    a->bubble_cpu = sum_bc / g_steps;
    a->step_wall = sum_w / g_steps;
    a->step_s = sum_s / g_steps;
    a->bubble = sum_b / g_steps;
    a->idle_s = sum_i / g_steps;
    if (a->st != LLMT_OK)
        snprintf(a->err, sizeof a->err, "%s",
                 tr  ? llmt_trainer_last_error(tr)
                 : m ? llmt_model_last_error(m)
                     : "create");
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return NULL;
}

static int run(int pp, int m, int sched, int v, int threads, stage_arg *a)
{
    memset(a, 0, (size_t)pp * sizeof *a);
    for (int r = 0; r < pp; r++) {
        a[r].pp = pp;
        a[r].m = m;
        a[r].sched = sched;
        a[r].v = v;
        a[r].threads = threads;
    }
    if (bench_ranks(a, sizeof *a, pp, pp > 1, offsetof(stage_arg, c), stage_main))
        return 1;
    int bad = 0;
    for (int r = 0; r < pp; r++) {
        if (a[r].st != LLMT_OK) {
            fprintf(stderr, "pp %d stage %d: %s\n", pp, r, a[r].err);
            bad = 1;
        }
    }
    return bad;
}

int main(int argc, char **argv)
{
    bench_ctx b;
    if (bench_init(&b, "pp", argc, argv))
        return 2;
    g_steps = b.quick ? 2 : 6;
    size_t n = (size_t)(g_steps + 1) * 8 * MICRO * T;
    g_in = malloc(n * sizeof *g_in);
    g_tg = malloc(n * sizeof *g_tg);
    uint64_t s = 99;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        g_in[i] = (int32_t)((s >> 33) % V);
        g_tg[i] = (g_in[i] * 7 + 1) % V;
    }
    printf("llama, %d layers, width %d, micro-batch %d x %d tokens, fp32 CPU, one thread "
           "per stage; %d steps after a warm-up\n",
           g_layers, g_width, MICRO, T, g_steps);
    /* compute time: pp 1's step is its thread's CPU time; pp 2's is the
     * schedule's span on the stages' clocks plus the rest of the step
     * (optimizer, hand-offs: the stage's CPU time outside its ops, the
     * larger of the two): the step with a core per stage, whatever else
     * runs on the machine */
    printf("%-6s %3s %3s %9s %8s %9s %8s   %-13s %-13s %s\n", "sched", "pp", "m", "wall s",
           "vs pp 1", "cpu s", "vs pp 1", "bubble wall", "bubble cpu", "planned");
    int ms[] = {2, 4, 8};
    int rc = 0;
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        stage_arg one[1], two[1], a[MAXP];
        if (run(1, ms[i], LLMT_PP_1F1B, 1, 1, one) || run(1, ms[i], LLMT_PP_1F1B, 1, 2, two)) {
            rc = 1;
            continue;
        }
        printf("%-6s %3d %3d %9.4f %8s %9.4f %8s   one thread\n", "-", 1, ms[i],
               one[0].step_wall, "", one[0].step_cpu, "");
        printf("%-6s %3d %3d %9.4f %7.2fx %9s %8s   two threads (OpenMP)\n", "-", 1, ms[i],
               two[0].step_wall, one[0].step_wall / two[0].step_wall, "", "");
        double secs[1] = {one[0].step_wall};
        char name[64];
        snprintf(name, sizeof name, "pp1 m%d step", ms[i]);
        bench_record(&b, name, secs, 1, (double)ms[i] * MICRO * T, "tokens");
        secs[0] = one[0].step_cpu;
        snprintf(name, sizeof name, "pp1 m%d step cpu", ms[i]);
        bench_record(&b, name, secs, 1, (double)ms[i] * MICRO * T, "tokens");
        secs[0] = two[0].step_wall;
        snprintf(name, sizeof name, "pp1 2threads m%d step", ms[i]);
        bench_record(&b, name, secs, 1, (double)ms[i] * MICRO * T, "tokens");
        /* interleaved: 2 chunks of one layer a stage (4 layers) */
        int scheds[3] = {LLMT_PP_1F1B, LLMT_PP_GPIPE, LLMT_PP_INTERLEAVED};
        const char *sn[3] = {"1f1b", "gpipe", "iv2"};
        for (int j = 0; j < 3; j++) {
            if (run(2, ms[i], scheds[j], j == 2 ? 2 : 1, 1, a)) {
                rc = 1;
                continue;
            }
            double rest = 0.0;
            for (int r = 0; r < 2; r++)
                if (a[r].step_cpu - a[r].busy_cpu > rest)
                    rest = a[r].step_cpu - a[r].busy_cpu;
            double cpu = a[0].span_cpu + rest;
            printf("%-6s %3d %3d %9.4f %7.2fx %9.4f %7.2fx   %.3f %.3f   %.3f %.3f   %.3f\n",
                   sn[j], 2, ms[i], a[0].step_wall, one[0].step_wall / a[0].step_wall, cpu,
                   one[0].step_cpu / cpu, a[0].bubble, a[1].bubble, a[0].bubble_cpu,
                   a[1].bubble_cpu, a[0].ps.bubble_balanced);
            double ws[1] = {a[0].step_wall};
            snprintf(name, sizeof name, "pp2 m%d %s step", ms[i], sn[j]);
            bench_record(&b, name, ws, 1, (double)ms[i] * MICRO * T, "tokens");
            double cs[1] = {cpu};
            snprintf(name, sizeof name, "pp2 m%d %s step cpu", ms[i], sn[j]);
            bench_record(&b, name, cs, 1, (double)ms[i] * MICRO * T, "tokens");
            /* each stage's bubble on the compute-time clocks: the idle
             * share of the span, in seconds */
            for (int r = 0; r < 2; r++) {
                double id[1] = {a[r].span_cpu - a[r].busy_cpu}, sp[1] = {a[r].span_cpu};
                snprintf(name, sizeof name, "pp2 m%d %s stage%d span cpu", ms[i], sn[j], r);
                bench_record(&b, name, sp, 1, 0.0, "");
                snprintf(name, sizeof name, "pp2 m%d %s stage%d idle cpu", ms[i], sn[j], r);
                bench_record(&b, name, id, 1, 0.0, "");
            }
            /* each stage's schedule time and its idle part (the bubble) */
            for (int r = 0; r < 2; r++) {
                double sc[1] = {a[r].step_s}, id[1] = {a[r].idle_s};
                snprintf(name, sizeof name, "pp2 m%d %s stage%d schedule", ms[i], sn[j], r);
                bench_record(&b, name, sc, 1, 0.0, "");
                snprintf(name, sizeof name, "pp2 m%d %s stage%d idle", ms[i], sn[j], r);
                bench_record(&b, name, id, 1, 0.0, "");
            }
        }
    }
    free(g_in);
    free(g_tg);
    bench_finish(&b);
    return rc;
}
