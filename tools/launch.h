/* llmtrain launch: the agent's state, shared by its files (cmd_launch.c:
 * workers, detection and restarts; launch_goodput.c: where the time went;
 * launch_rdzv.c: agents of several nodes agreeing through a directory). */
#ifndef LLMT_TOOLS_LAUNCH_H
#define LLMT_TOOLS_LAUNCH_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cli.h"

#define MAXW 256
#define MAXN 64 /* --nnodes at most */

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
    double grace_s;     /* --grace-s: SIGTERM to SIGKILL for a failed gang's survivors */
    double expect_mtbf; /* --expect-mtbf: the drill's job-wide MTBF, s (0: none) */
    int argc_pass;
    char **argv_pass;
    FILE *events;
    int nslots;
    int slot_state[MAXW]; /* 0 spare, 1 in use, 2 quarantined */
    int rank_slot[MAXW];
    int world, gen, restarts;
    int world0; /* the world the job started with (every node's ranks) */
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
    /* one agent per node (launch_rdzv.c); nnodes 1: this host alone */
    int nnodes, node_rank;
    char rdzv[4096];       /* --rdzv: the agents' shared directory */
    int local[MAXW];       /* rank r runs on this node */
    int local_index[MAXW]; /* its LOCAL_RANK */
    int nlocal;            /* ranks on this node */
    int slot_node[MAXW];   /* the leader's: the node of each slot */
    int rank_node[MAXW];   /* the node rank r runs on (every agent's) */
    /* every node's agent alive? (launch_node.c) */
    double node_timeout;  /* --node-timeout: silent this long, a node is lost */
    double beat_t;        /* this agent's last beat */
    long beat_n;          /* its counter */
    long beat_seen[MAXN]; /* each node's counter as last read */
    double beat_at[MAXN]; /* when it last changed (this agent's clock) */
    int node_lost[MAXN];  /* lost-K: its slots are quarantined for good */
    int lost_gen;         /* a node was lost in this generation */
    double lost_since;    /* the earliest it went silent (unix time) */
    double watch_t;       /* the last look at the other nodes */
    int gone;             /* node_gone said so: its reason is asked again */
    /* rank r exited with an error of its own in this generation although
     * another node's report came first (not blamed: its error may follow
     * from that failure); the leader counts these too when it asks whether
     * every rank failed with an error of the job itself */
    int err_exit[MAXW];
    /* the leader: node 0, then the lowest surviving node that took over
     * when it was lost (launch_node.c); slot_seen: every slot a generation
     * gave a rank, which a new leader counts as not spare */
    int leader;
    unsigned char slot_seen[MAXW];
} agent;

double launch_now(void);
/* One line of OUT/agent/events.jsonl: {"t":...,FMT}. */
void launch_event(agent *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* At the end: where the wall time went, and llmt_plan_simulate_goodput
 * for the same failure rate and measured costs (launch_goodput.c). */
void launch_goodput_report(agent *a, double wall, double recovery_s);

/* Agents of several nodes (launch_rdzv.c); why gets the reason of a -1. */
/* Join; the leader numbers every node's slots and writes generation 0,
 * the others read it. */
int rdzv_init(agent *a, char *why, size_t n);
/* 1 when another node reported this generation down. */
int rdzv_remote_down(const agent *a);
/* This node's workers finished: 0 when every node's did, 1 when one
 * reported a failure instead. */
int rdzv_finish(agent *a);
/* Report this node's failed ranks of the generation. stay -1: its workers
 * are dead (no --in-place); 0/1 (--in-place): its culprits are dead and
 * its other ranks are still running and can stay in their processes (1),
 * or its workers are dead (0). */
int rdzv_report(agent *a, const int *culprit, char causes[][256], int stay);
/* Leader: every node's report merged into culprit/causes; *all_stay: every
 * node reported stay 1. */
int rdzv_gather(agent *a, int *culprit, char causes[][256], int *all_stay, char *why, size_t n);
/* Leader, --in-place: a gang restart after all: tell the agents to stop
 * their survivors (gang-G); rdzv_gang_wait: until each did (killed-G-K). */
int rdzv_gang(agent *a, char *why, size_t n);
int rdzv_gang_wait(agent *a, char *why, size_t n);
/* Others: this node's survivors are stopped (the answer to gang-G). */
void rdzv_killed(agent *a);
/* Leader: write generation a->gen (world, slots; fresh[r]: rank r starts
 * a new process, the others stay in theirs: a->in_place_gen). */
int rdzv_publish(agent *a, const int *fresh, char *why, size_t n);
/* Others: wait for generation a->gen + 1 (then a->gen is it, fresh[] and
 * a->in_place_gen are set: 0), a gang decision (2: stop the survivors,
 * rdzv_killed, call again) or a stop (-1). */
int rdzv_follow(agent *a, int *fresh, char *why, size_t n);
/* Leader: tell the others the job stopped, and why. */
void rdzv_stop(agent *a, const char *why);
/* The node count and this node's rank that are not given (< 1, < 0), from
 * Slurm, Open MPI or PMI (one agent per node); src names the variables. */
int rdzv_from_env(int *nnodes, int *node_rank, char *src, size_t n);
/* DIR/name written whole; read (0: read); there. */
int rdzv_put(const agent *a, const char *name, const char *text);
int rdzv_get(const agent *a, const char *name, char *buf, size_t n);
int rdzv_exists(const agent *a, const char *name);

/* Is every node's agent alive (launch_node.c)? */
/* Rewrite this agent's alive-K counter (at most every 0.25 s). */
void node_beat(agent *a);
/* Start judging the other nodes' silence (every node has joined). */
void node_watch_start(agent *a);
/* Seconds since node k's counter last changed (0: this node, or lost). */
double node_silence(agent *a, int k);
/* The longest silence of a node not lost. */
double node_quiet(agent *a);
/* Leader: the nodes silent past --node-timeout become lost (lost-K, their
 * slots quarantined, down-G-K written for them); how many now. */
int node_check_lost(agent *a);
/* The leader's lost-K files into a->node_lost. */
void node_read_lost(agent *a);
/* Others: 1 (why says it) when this node was declared lost, or the leader
 * is silent past --node-timeout and no surviving node took over: stop. A
 * leader silent that long is replaced (0: a->leader is the new one, maybe
 * this node). */
int node_gone(agent *a, char *why, size_t n);
/* A follower that read a generation: the leader that wrote it may be a
 * new one (leader-L claimed while this node had not looked yet). */
void node_leader_moved(agent *a);
/* New leader: every node's slots numbered as rdzv_init did, their states
 * from the generations seen (launch_rdzv.c). */
int rdzv_slots(agent *a, char *why, size_t n);

#endif
