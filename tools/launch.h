/* llmtrain launch: the agent's state, shared by its files (cmd_launch.c:
 * workers, detection and restarts; launch_goodput.c: where the time went). */
#ifndef LLMT_TOOLS_LAUNCH_H
#define LLMT_TOOLS_LAUNCH_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cli.h"

#define MAXW 256

typedef struct worker {
    pid_t pid;
    int rank, slot;
    int done, status; /* reaped; waitpid status */
    double spawned;
} worker;

typedef struct agent {
    const char *spec_path, *out;
    char exe[4096], dir[4096], store[4096], events_path[4096];
    int nproc, spares, max_restarts;
    int in_place;            /* --in-place: survivors stay in their processes */
    char inplace_path[4200]; /* "GEN WORLD" for them ($LLMT_LAUNCH_INPLACE) */
    double hb_timeout, start_timeout;
    double expect_mtbf; /* --expect-mtbf: the drill's job-wide MTBF, s (0: none) */
    int argc_pass;
    char **argv_pass;
    FILE *events;
    int nslots;
    int slot_state[MAXW]; /* 0 spare, 1 in use, 2 quarantined */
    int rank_slot[MAXW];
    int world, gen, restarts;
    worker w[MAXW];
    llmt_spec *spec;
    llmt_context *ctx;
    /* accounting */
    double t0, lost_detect_s, lost_restart_s;
    int64_t lost_steps, last_step_seen;
    int nfail;
    double recov_s[64];
    double recov_sum;     /* every recovery's time (recov_s keeps 64) */
    double recover_from;  /* detection time of the failure being recovered */
    int in_place_gen;     /* this generation kept the survivors */
    double in_place_t;    /* when it was published */
    double t_first;       /* gen 0's first step done (unix time) */
    double last_progress; /* newest heartbeat time seen in this generation */
    int64_t fail_step;    /* newest step a rank finished before it */
} agent;

double launch_now(void);
/* One line of OUT/agent/events.jsonl: {"t":...,FMT}. */
void launch_event(agent *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* At the end: where the wall time went, and llmt_plan_simulate_goodput
 * for the same failure rate and measured costs (launch_goodput.c). */
void launch_goodput_report(agent *a, double wall, double recovery_s);

#endif
