/* llmtrain launch: where the wall time of a run went, against
 * llmt_plan_simulate_goodput for the same failure rate and costs.
 *
 * Useful work is the cycle time (the step line's cycle_s: from the end of
 * the previous step's save to the end of this step, so per-step overheads
 * count as work, as the simulator counts them) of each step that the final
 * history kept: rank 0's metrics.jsonl holds every generation's steps in
 * order, and a step number seen again after a restart or an in-place
 * recovery replaces the earlier run of it and the steps after, whose
 * cycles were recomputed work. The rest of a failure's cost is the
 * agent's: detection (the last heartbeat before the failure to the moment
 * it was seen: the half-done step and the detection latency) and the
 * restart (detection to the end of the new gang's first step, less that
 * step's cycle). Checkpoint stalls and anomalies are the job's own figures
 * (its goodput lines; the last line of each generation). The simulator
 * gets this run's useful work as its horizon, the checkpoint interval in
 * cycles, the mean stall per save and the mean restart; the failure rate
 * is the one the run saw and, with --expect-mtbf, the one a drill set. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"

typedef struct gp_meas {
    double work_s;      /* the kept steps' cycles */
    int64_t kept;       /* steps in the final history */
    double redo_fail_s; /* cycles of steps run again after a failure */
    int64_t redo_fail;  /* how many */
    double first_s;     /* cycles of the first step after each recovery */
    int nfirst;
    double first0_s; /* the first cycle of the run (gen 0) */
    double stall_s, anomaly_s, checks_s;
    int saves, gens; /* gens: processes that wrote a goodput line */
} gp_meas;

static double jnum(const char *line, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(line, k);
    return p ? atof(p + strlen(k)) : 0;
}

/* The job's goodput line is cumulative over its process, which may live
 * through several generations (an in-place recovery keeps it): the last
 * line before the next process's start line is what that process counted. */
static void gp_flush(gp_meas *g, double *last, int *have)
{
    if (!*have)
        return;
    g->gens++;
    g->stall_s += last[0];
    g->anomaly_s += last[1];
    g->checks_s += last[2];
    *have = 0;
}

static int gp_measure(const agent *a, int64_t steps, gp_meas *g)
{
    memset(g, 0, sizeof *g);
    char p[4200];
    snprintf(p, sizeof p, "%s/metrics.jsonl", a->out);
    FILE *f = fopen(p, "r");
    if (!f)
        return -1;
    size_t n = (size_t)(steps > 0 ? steps : 1) + 2;
    double *cyc = calloc(n, sizeof *cyc);
    char *have = calloc(n, 1);
    double last[3] = {0, 0, 0};
    int ghave = 0;
    char *line = NULL; /* whole lines: an SDC line of many ranks is long */
    size_t cap = 0;
    int after_restore = 0, anomaly = 0, first = 1;
    int64_t top = 0;
    while (cyc && have && getline(&line, &cap, f) > 0) {
        int start = strstr(line, "\"event\":\"start\"") != NULL;
        int resume = strstr(line, "\"event\":\"resume\"") != NULL;
        if (start || resume)
            gp_flush(g, last, &ghave); /* a new process: each writes one of them */
        if (strstr(line, "\"event\":\"goodput\"")) {
            last[0] = jnum(line, "ckpt_stall_s");
            last[1] = jnum(line, "anomaly_lost_s");
            last[2] = jnum(line, "checks_s");
            ghave = 1;
            g->saves += strstr(line, "\"when\":\"save\"") != NULL;
        } else if (resume || strstr(line, "\"event\":\"inplace\"")) {
            after_restore = 1; /* a restart or an in-place recovery */
            anomaly = 0;
        } else if (strstr(line, "\"event\":\"anomaly\"") &&
                   strstr(line, "\"action\":\"rollback\"")) {
            anomaly = 1; /* the job counts what a rollback undid */
        } else if (!strncmp(line, "{\"step\":", 8) && strstr(line, "\"cycle_s\":")) {
            int64_t s = (int64_t)jnum(line, "step");
            double c = jnum(line, "cycle_s");
            if (s < 1 || (size_t)s >= n)
                continue;
            for (int64_t m = s; m <= top; m++)
                if (have[m]) { /* run again: that earlier run was lost */
                    have[m] = 0;
                    if (!anomaly) {
                        g->redo_fail_s += cyc[m];
                        g->redo_fail++;
                    }
                }
            if (first)
                g->first0_s = c;
            else if (after_restore) {
                g->first_s += c;
                g->nfirst++;
            }
            first = after_restore = anomaly = 0;
            cyc[s] = c;
            have[s] = 1;
            top = s;
        }
    }
    free(line);
    fclose(f);
    gp_flush(g, last, &ghave);
    for (size_t s = 1; cyc && have && s < n; s++)
        if (have[s]) {
            g->work_s += cyc[s];
            g->kept++;
        }
    int ok = cyc && have;
    free(cyc);
    free(have);
    return ok ? 0 : -1;
}

/* llmt_plan_simulate_goodput for a failure rate per GPU-hour; -1 when the
 * plan or the simulation fails. */
static double simulate(agent *a, double rate, double work, double interval, double stall,
                       double restart, double *sd)
{
    llmt_plan *plan = NULL;
    if (llmt_plan_create(a->ctx, a->spec, a->world0, &plan) != LLMT_OK)
        return -1;
    llmt_goodput_opts go;
    llmt_goodput_opts_init(&go, sizeof go);
    go.gpu_failures_per_hour = rate > 0 ? rate : 1e-12;
    go.interval_s = interval;
    go.horizon_hours = work / 3600.0;
    go.stall_s = stall;
    go.write_s = 0;   /* the restart reads the newest committed step */
    go.restore_s = 0; /* in the measured restart */
    go.restart_s = restart;
    go.trials = 400;
    go.seed = 1;
    llmt_goodput_result r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    double g = -1;
    if (llmt_plan_simulate_goodput(plan, &go, &r) == LLMT_OK) {
        g = r.goodput;
        *sd = r.goodput_stddev;
    }
    llmt_plan_destroy(plan);
    return g;
}

void launch_goodput_report(agent *a, double wall, double recovery_s)
{
    int64_t steps = 0, interval = 0;
    llmt_spec_get_int(a->spec, "train.steps", &steps);
    llmt_spec_get_int(a->spec, "checkpoint.interval", &interval);
    gp_meas g;
    if (gp_measure(a, steps, &g) != 0 || g.kept < 1) {
        printf("launch: goodput not measured: no step lines with cycle_s in %s/metrics.jsonl\n",
               a->out);
        return;
    }
    double cycle = g.work_s / (double)g.kept;
    double startup = a->t_first > 0 ? a->t_first - a->t0 - g.first0_s : 0;
    if (startup < 0)
        startup = 0;
    double run = wall - startup;
    int nrec = a->nfail; /* recoveries that reached a step */
    /* the first step after a recovery is work (kept or recomputed) */
    double first = g.nfirst > 0 ? g.first_s / g.nfirst * nrec : cycle * nrec;
    double restart = recovery_s - first;
    if (restart < 0)
        restart = 0;
    double failures_s = a->lost_detect_s + restart + g.redo_fail_s;
    double other = run - g.work_s - failures_s - g.stall_s - g.anomaly_s;
    double measured = run > 0 ? g.work_s / run : 0;
    printf("launch: goodput %.3f measured: useful work %.2f s (%lld steps of %.3f s) of %.2f s "
           "(after %.2f s of start-up); lost to failures %.2f s (%d failure(s): detection "
           "%.2f, restart %.2f, %lld recomputed step(s) %.2f), checkpoint stalls %.2f s (%d "
           "saves), anomalies %.2f s, other %.2f s (checks %.2f s are in the steps)\n",
           measured, g.work_s, (long long)g.kept, cycle, run, startup, failures_s, a->restarts,
           a->lost_detect_s, restart, (long long)g.redo_fail, g.redo_fail_s, g.stall_s, g.saves,
           g.anomaly_s, other, g.checks_s);
    /* the simulator's costs: a failure loses the work since the newest
     * checkpoint, half a step on average of it inside the detection */
    int nf = a->restarts;
    double stall = g.saves > 0 ? g.stall_s / g.saves : 0;
    double per_fail = nf > 0 ? (a->lost_detect_s - 0.5 * cycle * nf + restart) / nf : 0;
    if (per_fail < 0)
        per_fail = 0;
    double ival = interval > 0 ? (double)interval * cycle : g.work_s;
    double hours = run / 3600.0;
    double rate = hours > 0 ? (double)nf / hours / (double)a->world0 : 0;
    double sd = 0, sd_x = 0, expect_rate = 0, sim_x = -1;
    double sim = simulate(a, rate, g.work_s, ival, stall, per_fail, &sd);
    if (sim >= 0)
        printf("launch: goodput %.3f +- %.3f predicted by llmt_plan_simulate_goodput for the "
               "failure rate seen (%d in %.1f s on %d ranks, %.3g per GPU-hour), checkpoints "
               "every %lld steps (%.2f s), stall %.3f s per save, restart %.2f s per failure\n",
               sim, sd, nf, run, a->world0, rate, (long long)interval, ival, stall, per_fail);
    if (a->expect_mtbf > 0) {
        expect_rate = 3600.0 / a->expect_mtbf / (double)a->world0;
        sim_x = simulate(a, expect_rate, g.work_s, ival, stall, per_fail, &sd_x);
        if (sim_x >= 0)
            printf("launch: goodput %.3f +- %.3f predicted for the expected MTBF %.1f s "
                   "(--expect-mtbf; %.3g per GPU-hour), same costs\n",
                   sim_x, sd_x, a->expect_mtbf, expect_rate);
    }
    launch_event(a,
                 "\"event\":\"goodput\",\"wall_s\":%.3f,\"startup_s\":%.3f,\"run_s\":%.3f,"
                 "\"work_s\":%.3f,\"steps\":%lld,\"cycle_s\":%.4f,\"failures\":%d,"
                 "\"failures_s\":%.3f,\"detect_s\":%.3f,\"restart_s\":%.3f,"
                 "\"recomputed_steps\":%lld,\"recomputed_s\":%.3f,\"ckpt_stall_s\":%.3f,"
                 "\"saves\":%d,\"anomaly_s\":%.3f,\"checks_s\":%.3f,\"other_s\":%.3f,"
                 "\"goodput\":%.4f,\"sim_restart_s\":%.3f,\"failures_per_gpu_hour\":%.4g,"
                 "\"simulated_goodput\":%.4f,\"simulated_sd\":%.4f,\"expect_mtbf_s\":%.3f,"
                 "\"expected_failures_per_gpu_hour\":%.4g,\"expected_goodput\":%.4f,"
                 "\"expected_sd\":%.4f",
                 wall, startup, run, g.work_s, (long long)g.kept, cycle, nf, failures_s,
                 a->lost_detect_s, restart, (long long)g.redo_fail, g.redo_fail_s, g.stall_s,
                 g.saves, g.anomaly_s, g.checks_s, other, measured, per_fail, rate, sim, sd,
                 a->expect_mtbf, expect_rate, sim_x, sd_x);
}
