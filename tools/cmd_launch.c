/* llmtrain launch: the fault-tolerance agent (issue 19).
 *
 * It starts N workers, each `llmtrain train SPEC` (so each runs llmt_job
 * exactly as `llmtrain train` does) with torchrun-style RANK/WORLD_SIZE
 * and a Gloo rendezvous store ($LLMT_COMM_STORE, a fresh prefix per
 * generation), and keeps S spare slots idle. It watches process exits and
 * the heartbeat file each worker rewrites after every step. On a failure
 * (a worker killed by a signal, stopped, silent past the heartbeat
 * timeout, or exiting with an error) it names the rank, kills the gang
 * (a gang restart: the survivors cannot keep their state, so the
 * in-memory snapshot is lost and the restart reads the newest checkpoint
 * every rank holds, local tier then durable), quarantines the failed slot,
 * promotes a spare slot to the failed rank and starts the next generation
 * with --resume. With no spare left the job continues elastically on
 * fewer data-parallel ranks with the same global batch (the plan raises
 * grad_accum), or stops saying why when no smaller world fits. On one
 * host a slot is a process identity; on a cluster it is a node's GPU, and
 * with --nnodes one agent per node runs its node's ranks, the leader
 * (node 0, or the lowest surviving node that took over when it was lost:
 * launch_node.c) deciding each generation for all of them (launch_rdzv.c). With --in-place the
 * survivors stay in their processes (lib/job/inplace.c). Events go to
 * stdout and to OUT/agent/events.jsonl (OUT/agent/node-K/ per node).
 * Public ABI only. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "launch.h"

#define CMD "launch"
double launch_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void launch_event(agent *a, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (a->events) {
        fprintf(a->events, "{\"t\":%.3f,%s}\n", launch_now() - a->t0, line);
        fflush(a->events);
    }
}

/* A usage error names the flag or argument at fault before the synopsis. */
static int usage(const char *why, const char *arg)
{
    if (why)
        fprintf(stderr, "llmtrain launch: %s '%s'\n", why, arg);
    fprintf(stderr,
            "usage: llmtrain launch [--nproc N] [--spares S] [--max-restarts R] [--in-place] "
            "[--heartbeat-timeout SEC] [--grace-s SEC] [--expect-mtbf SEC] [--nnodes N "
            "--node-rank K "
            "--rdzv DIR [--node-timeout SEC]] SPEC.json [train flags]\n"
            "(llmtrain help launch for more)\n");
    return CLI_USAGE;
}

static int mkdirs(const char *p)
{
    char b[4096];
    snprintf(b, sizeof b, "%s", p);
    for (char *s = b + 1; *s; s++) {
        if (*s == '/') {
            *s = 0;
            mkdir(b, 0755);
            *s = '/';
        }
    }
    return mkdir(b, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* Another node's rank: its agent's directory, read through the out
 * directory where it is shared (as rank 0's metrics.jsonl, which the
 * leader's goodput report reads), so that the leader sees rank 0's
 * recovery when rank 0 moved to another node's spare. */
static void hb_path(const agent *a, int rank, char *buf, size_t n)
{
    if (a->nnodes > 1 && a->rank_node[rank] != a->node_rank)
        snprintf(buf, n, "%s/agent/node-%d/hb-rank-%d", a->out, a->rank_node[rank], rank);
    else
        snprintf(buf, n, "%s/hb-rank-%d", a->dir, rank);
}

/* Heartbeat: the step and the time the rank last finished a step. */
static int hb_read2(const agent *a, int rank, int64_t *step, double *t, int64_t *start,
                    double *first);
static int hb_read(const agent *a, int rank, int64_t *step, double *t)
{
    int64_t s0;
    double f;
    return hb_read2(a, rank, step, t, &s0, &f);
}

/* The full heartbeat: also the step the process started from and when it
 * finished its first step. */
static int hb_read2(const agent *a, int rank, int64_t *step, double *t, int64_t *start,
                    double *first)
{
    char p[4200];
    hb_path(a, rank, p, sizeof p);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    long long s = 0, s0 = 0;
    double tt = 0, f0 = 0;
    int ok = fscanf(f, "%lld %lf %lld %lf", &s, &tt, &s0, &f0) == 4;
    fclose(f);
    if (ok) {
        *step = s;
        *t = tt;
        *start = s0;
        *first = f0;
    }
    return ok;
}

static void spawn(agent *a, int rank)
{
    worker *w = &a->w[rank];
    memset(w, 0, sizeof *w);
    w->rank = rank;
    w->slot = a->rank_slot[rank];
    w->spawned = launch_now();
    char hb[4200], log[4200];
    hb_path(a, rank, hb, sizeof hb);
    unlink(hb);
    snprintf(log, sizeof log, "%s/gen%d-rank%d.log", a->dir, a->gen, rank);
    pid_t agent_pid = getpid();
    pid_t pid = fork();
    if (pid != 0) {
        w->pid = pid;
        launch_event(a, "\"event\":\"spawn\",\"gen\":%d,\"rank\":%d,\"slot\":%d,\"pid\":%d",
                     a->gen, rank, w->slot, (int)pid);
        return;
    }
    /* a worker dies with its agent: an agent lost with its node leaves no
     * worker behind that a new generation would meet (launch_node.c) */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != agent_pid)
        _exit(127);
    char v[64];
    static const char *const drop[] = {
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
        "SLURM_PROCID",         "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        unsetenv(drop[i]);
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", a->local_index[rank]);
    setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", a->world);
    setenv("WORLD_SIZE", v, 1);
    snprintf(v, sizeof v, "%d", a->nlocal);
    setenv("LOCAL_WORLD_SIZE", v, 1);
    setenv("LLMT_COMM_STORE", a->store, 1);
    snprintf(v, sizeof v, "gen%d", a->gen);
    setenv("LLMT_COMM_STORE_PREFIX", v, 1);
    snprintf(v, sizeof v, "%d", a->gen);
    setenv("LLMT_LAUNCH_GEN", v, 1);
    snprintf(v, sizeof v, "%d", w->slot);
    setenv("LLMT_LAUNCH_SLOT", v, 1);
    /* the peer tier places each rank's replica on another node */
    snprintf(v, sizeof v, "%d", a->node_rank);
    setenv("LLMT_LAUNCH_NODE", v, 1);
    setenv("LLMT_HEARTBEAT_FILE", hb, 1);
    if (a->in_place)
        setenv("LLMT_LAUNCH_INPLACE", a->inplace_path, 1);
    FILE *lf = freopen(log, "w", stderr);
    if (!lf)
        _exit(127);
    if (rank > 0 && !freopen(log, "a", stdout))
        _exit(127);
    char *args[64];
    int n = 0;
    args[n++] = a->exe;
    args[n++] = (char *)"train";
    args[n++] = (char *)a->spec_path;
    args[n++] = (char *)"--out";
    args[n++] = (char *)a->out;
    for (int i = 0; i < a->argc_pass && n < 60; i++)
        args[n++] = a->argv_pass[i];
    if (a->gen > 0)
        args[n++] = (char *)"--resume";
    args[n] = NULL;
    execv(a->exe, args);
    _exit(127);
}

static int proc_stopped(pid_t pid)
{
    char p[64], b[512];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    size_t n = fread(b, 1, sizeof b - 1, f);
    fclose(f);
    b[n] = 0;
    char *r = strrchr(b, ')');
    /* 'T' only: stopped by a signal (SIGSTOP, a hang). 't' is a tracing
     * stop: a debugger, or LeakSanitizer stopping the threads at exit to
     * scan them, which is not a hang (an ASan job was taken for one) */
    return r && r[2] == 'T';
}

/* "GEN WORLD" for the survivors, written whole (rename). */
static int publish_gen_as(agent *a, int gen, int world)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", a->inplace_path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "%d %d\n", gen, world);
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, a->inplace_path);
}

static int publish_gen(agent *a)
{
    return publish_gen_as(a, a->gen, a->world);
}

/* The end of a failed generation. The failed ranks (culprit, NULL: none
 * known) get SIGKILL at once, as before. The survivors get SIGTERM first:
 * one may be committing a checkpoint (writing its part, the last rank
 * renaming the manifest into place), which a SIGKILL would leave
 * uncommitted, so the restart would go back a whole interval further.
 * `llmtrain train` finishes its step and the save in flight on SIGTERM,
 * then exits; whoever is still there after --grace-s (blocked in a
 * collective with a dead peer that never returns) gets the SIGKILL. A
 * survivor not saving exits as soon as its step ends or fails (a dead
 * peer fails its collectives), so recovery is not slower without a save.
 * Grace 0 is the old behaviour: SIGKILL for all. */
static void kill_gang(agent *a, const int *culprit)
{
    double t0 = launch_now();
    int term = 0, late = 0;
    /* --in-place: survivors already waiting for the next generation do
     * not look at SIGTERM (no step runs there); world 0 tells them there
     * is none for them (lib/job/inplace.c), so they exit at once instead
     * of at the end of the grace */
    if (a->in_place)
        publish_gen_as(a, a->gen + 1, 0);
    for (int r = 0; r < a->world; r++) {
        if (a->w[r].done)
            continue;
        int now = a->grace_s <= 0 || (culprit && culprit[r]);
        kill(a->w[r].pid, now ? SIGKILL : SIGTERM);
        term += !now;
    }
    for (int left = term; left > 0 && launch_now() - t0 < a->grace_s;) {
        struct timespec ts = {0, 10000000L}; /* 10 ms */
        nanosleep(&ts, NULL);
        node_beat(a);
        left = 0;
        for (int r = 0; r < a->world; r++) {
            if (a->w[r].done || (culprit && culprit[r]))
                continue;
            if (waitpid(a->w[r].pid, &a->w[r].status, WNOHANG) == a->w[r].pid)
                a->w[r].done = 1;
            else
                left++;
        }
    }
    for (int r = 0; r < a->world; r++)
        if (!a->w[r].done && !(culprit && culprit[r]) && term) {
            kill(a->w[r].pid, SIGKILL);
            late++;
        }
    for (int r = 0; r < a->world; r++)
        if (!a->w[r].done) {
            waitpid(a->w[r].pid, &a->w[r].status, 0);
            a->w[r].done = 1;
        }
    double dt = launch_now() - t0;
    a->lost_restart_s += dt;
    if (term) {
        printf("launch: gen %d: %d survivor(s) sent SIGTERM: %d exited within %.2f s, %d "
               "killed after the %.1f s grace (--grace-s)\n",
               a->gen, term, term - late, dt, late, a->grace_s);
        fflush(stdout);
        launch_event(a,
                     "\"event\":\"stop_gang\",\"gen\":%d,\"sigterm\":%d,\"sigkill_late\":%d,"
                     "\"stop_s\":%.3f,\"grace_s\":%.3f",
                     a->gen, term, late, dt, a->grace_s);
    }
}

/* This node's part of an in-place recovery: every failed rank it knows is
 * gone or stopped (not a rank that reported an error of its own) and
 * every other rank here is still running. */
static int survivors_stay(const agent *a, const int *culprit, char causes[][256])
{
    if (!a->in_place)
        return 0;
    for (int r = 0; r < a->world; r++) {
        if (culprit[r]) {
            if (strncmp(causes[r], "killed", 6) && strncmp(causes[r], "stopped", 7) &&
                strncmp(causes[r], "lost", 4))
                return 0;
        } else if (a->local[r] && a->w[r].done) {
            return 0;
        }
    }
    return 1;
}

/* In-place recovery is possible when the survivors can stay (on every
 * node: the leader has each node's word for its own ranks), a spare slot
 * is free for each failed rank and the restart budget allows one more:
 * the survivors wait in their processes for the next generation
 * (lib/job/inplace.c). */
static int can_stay(const agent *a, const int *culprit, char causes[][256])
{
    if (!survivors_stay(a, culprit, causes) || a->restarts >= a->max_restarts)
        return 0;
    int need = 0, free_slots = 0;
    for (int r = 0; r < a->world; r++)
        need += culprit[r] != 0;
    for (int s = 0; s < a->nslots; s++)
        free_slots += a->slot_state[s] == 0;
    return need > 0 && need <= free_slots && need < a->world;
}

/* A node declared lost whose workers still run (its agent hung, not the
 * node): the survivors, still training with them, are not waiting in
 * place for a generation. Seen as a step finished elsewhere well after
 * the node went silent (steps need every rank: with the node gone they
 * fail); then only a gang restart makes sure the old gang is gone. */
static int lost_node_runs(const agent *a, const int *culprit)
{
    for (int r = 0; r < a->world; r++) {
        int64_t hs;
        double ht;
        /* the node's last beat is within 0.3 s of its end; a step in
         * flight then fails within the collective it needs it for */
        if (!culprit[r] && hb_read(a, r, &hs, &ht) && ht > a->lost_since + 1.0) {
            printf("launch: gen %d: rank %d finished step %lld %.1f s after the lost node "
                   "went silent: its workers may still run (a hung agent?): not in place\n",
                   a->gen, r, (long long)hs, ht - a->lost_since);
            return 1;
        }
    }
    return 0;
}

static void kill_culprits(agent *a, const int *culprit)
{
    for (int r = 0; r < a->world; r++)
        if (culprit[r] && !a->w[r].done) {
            kill(a->w[r].pid, SIGKILL);
            waitpid(a->w[r].pid, &a->w[r].status, 0);
            a->w[r].done = 1;
        }
}

/* Several nodes, a generation in place: this node's survivors go on when
 * its generation file says so. If it cannot be written they would wait
 * for nothing while the other nodes' survivors stay: stop this node's and
 * start them anew with the spares, which is what the promoted spares do
 * too (--resume, the same generation: they meet the others there). */
static void stay_here(agent *a, int *fresh)
{
    a->in_place_t = launch_now();
    if (publish_gen(a) == 0)
        return;
    /* kill_gang's notice to them goes through the same file: they may
     * wait out the grace */
    printf("launch: node %d: cannot write %s (%s): this node's survivors are restarted "
           "with the spares\n",
           a->node_rank, a->inplace_path, strerror(errno));
    kill_gang(a, NULL);
    for (int r = 0; r < a->world; r++)
        fresh[r] |= a->local[r];
}

/* The first error line a rank wrote (its log), for the event. */
static void first_error(const agent *a, int rank, char *buf, size_t n)
{
    char p[4200], line[1024];
    snprintf(p, sizeof p, "%s/gen%d-rank%d.log", a->dir, a->gen, rank);
    buf[0] = 0;
    FILE *f = fopen(p, "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "llmtrain train:") || strstr(line, "error")) {
            line[strcspn(line, "\n")] = 0;
            for (char *c = line; *c; c++)
                if (*c == '"' || *c == '\\')
                    *c = '\'';
            snprintf(buf, n, "%s", line);
            break;
        }
    fclose(f);
}

/* Largest world <= max whose plan keeps the spec's global batch and that
 * llmt_job accepts: a ZeRO stage needs two data-parallel replicas (the job
 * refuses it with dp 1), which under tensor parallelism is 2 x tp ranks.
 * *dp gets the world's data-parallel degree. */
static int fitting_world(agent *a, int max, int *dp, char *why, size_t n)
{
    int64_t zero = 0;
    llmt_spec_get_int(a->spec, "parallelism.zero", &zero);
    int zero_why = 0;
    for (int w = max; w >= 1; w--) {
        llmt_plan *p = NULL;
        if (llmt_plan_create(a->ctx, a->spec, w, &p) == LLMT_OK) {
            int32_t deg[LLMT_PLAN_NDIMS] = {1, 1, 1, 1, 1};
            llmt_plan_degrees(p, deg);
            llmt_plan_destroy(p);
            if (zero == 0 || deg[LLMT_DIM_DP] > 1) {
                *dp = deg[LLMT_DIM_DP];
                return w;
            }
            if (!zero_why) /* the largest world the plan takes says more than max's */
                snprintf(why, n,
                         "parallelism.zero %lld needs 2 or more data-parallel ranks, "
                         "and %d rank(s) give dp 1",
                         (long long)zero, w);
            zero_why = 1;
            continue;
        }
        if (w == max && !zero_why)
            snprintf(why, n, "%s", llmt_context_last_error(a->ctx));
    }
    return 0;
}

/* A worker that ended with an error of its own: a nonzero exit other
 * than the straggler verdict, or SIGPIPE. A peer's death closes its
 * sockets, and a survivor writing to one at that moment gets SIGPIPE
 * where it does not ignore it (llmtrain does; a worker built otherwise
 * may not): that is the peer's failure seen from here, as an error exit
 * is, not this slot's. */
static int error_exit(int st)
{
    if (WIFSIGNALED(st))
        return WTERMSIG(st) == SIGPIPE;
    return WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != CLI_RANK_FAILED;
}

/* "exited with status N: <first error>" or "exited by SIGPIPE ..." */
static void error_cause(agent *a, int r, char *out, size_t n)
{
    char e[200];
    first_error(a, r, e, sizeof e);
    if (WIFSIGNALED(a->w[r].status))
        snprintf(out, n, "exited by SIGPIPE (a peer's socket closed): %s", e);
    else
        snprintf(out, n, "exited with status %d: %s", WEXITSTATUS(a->w[r].status), e);
}

/* One generation: 0 when every worker finished, else the failed ranks
 * (culprit[r] = 1) and what was seen (1), or, on a node other than the
 * leader, 3: this node was declared lost, or the leader is lost and no
 * node took over (node_gone says why). Spawns the ranks of `fresh` (all of
 * them after a gang restart, the replaced ones after an in-place
 * recovery, whose survivors keep running). */
static int run_gen(agent *a, const int *fresh, int *culprit, char causes[][256],
                   double *t_detect)
{
    int alive = 0;
    if (a->nnodes <= 1) { /* every rank is here */
        for (int r = 0; r < a->world; r++) {
            a->local[r] = 1;
            a->local_index[r] = r;
        }
        a->nlocal = a->world;
    }
    for (int r = 0; r < a->world; r++) {
        if (fresh[r] && !a->local[r]) { /* another node's: nothing to watch here */
            memset(&a->w[r], 0, sizeof a->w[r]);
            a->w[r].rank = r;
            a->w[r].done = 1;
        } else if (fresh[r]) {
            spawn(a, r);
        }
        alive += !a->w[r].done;
    }
    double t_fail = 0;
    for (;;) {
        struct timespec ts = {0, 50000000L};
        nanosleep(&ts, NULL);
        node_beat(a);
        /* a node lost with its agent: the leader reports it (down-G-K,
         * seen below as any other node's report); a lost leader is
         * replaced (node_gone), or the others stop */
        char gone[64];
        if (a->nnodes > 1 && a->node_rank == a->leader)
            node_check_lost(a);
        else if (a->nnodes > 1 && node_gone(a, gone, sizeof gone))
            return 3;
        double t = launch_now();
        int failed = 0;
        for (int r = 0; r < a->world; r++) {
            worker *w = &a->w[r];
            int64_t hs;
            double ht;
            if (hb_read(a, r, &hs, &ht) && hs > a->last_step_seen)
                a->last_step_seen = hs;
            if (hb_read(a, r, &hs, &ht) && ht > a->last_progress)
                a->last_progress = ht;
            int64_t s00;
            double f00;
            if (r == 0 && a->gen == 0 && a->t_first == 0 &&
                hb_read2(a, 0, &hs, &ht, &s00, &f00) && f00 > 0)
                a->t_first = f00;
            int64_t s0;
            double f0;
            /* a survivor's heartbeat says when its first step after the
             * recovery ended (f0 is reset there) */
            if (r == 0 && a->recover_from > 0 && hb_read2(a, 0, &hs, &ht, &s0, &f0) &&
                f0 > a->recover_from) {
                /* the first step of the new gang: recovery is over */
                double rec = f0 - a->recover_from;
                int64_t lost = a->fail_step - s0;
                hs = s0 + 1;
                if (a->nfail < 64)
                    a->recov_s[a->nfail] = rec;
                a->recov_sum += rec;
                a->nfail++;
                a->lost_steps += lost > 0 ? lost : 0;
                printf("launch: recovered: gen %d resumed at step %lld and finished step "
                       "%lld %.2f s after the failure was detected; %lld step(s) "
                       "recomputed\n",
                       a->gen, (long long)hs - 1, (long long)hs, rec,
                       (long long)(lost > 0 ? lost : 0));
                fflush(stdout);
                launch_event(a,
                             "\"event\":\"recovered\",\"gen\":%d,\"resume_step\":%lld,"
                             "\"recovery_s\":%.3f,\"lost_steps\":%lld,\"mode\":\"%s\"",
                             a->gen, (long long)hs - 1, rec, (long long)(lost > 0 ? lost : 0),
                             a->in_place_gen ? "in_place" : "gang");
                a->recover_from = 0;
            }
            if (w->done)
                continue;
            pid_t p = waitpid(w->pid, &w->status, WNOHANG);
            if (p == w->pid) {
                w->done = 1;
                alive--;
                if (error_exit(w->status)) {
                    failed = 1;
                } else if (WIFSIGNALED(w->status)) {
                    culprit[r] = 1;
                    snprintf(causes[r], 256, "killed by signal %d", WTERMSIG(w->status));
                } else if (WEXITSTATUS(w->status) == CLI_RANK_FAILED) {
                    /* the job named this rank unhealthy (a straggler) */
                    char e[200];
                    first_error(a, r, e, sizeof e);
                    culprit[r] = 1;
                    snprintf(causes[r], 256, "unhealthy (exit %d): %s", CLI_RANK_FAILED, e);
                }
                continue;
            }
            if (proc_stopped(w->pid)) {
                culprit[r] = 1;
                snprintf(causes[r], 256, "stopped (SIGSTOP): no progress");
                continue;
            }
            int have = hb_read(a, r, &hs, &ht);
            double age = have ? t - ht : t - w->spawned;
            double lim = have ? a->hb_timeout : a->start_timeout;
            if (have && a->in_place_gen && !fresh[r] && ht < a->in_place_t) {
                /* a survivor sees the failure when its collective fails: at
                 * once next to the dead rank, after the collective timeout
                 * elsewhere; then it meets the spare, which starts first */
                age = t - a->in_place_t;
                lim = 2 * a->hb_timeout + 10;
            }
            /* silent with a node that is, or was found lost now (a
             * survivor waiting in place for the verdict): not this rank's
             * fault, unless the node has been given its timeout */
            if (age > lim && a->nnodes > 1 &&
                (a->lost_gen || (age < lim + a->node_timeout + 2 && node_quiet(a) > 1.5)))
                continue;
            if (age > lim) {
                culprit[r] = 1;
                snprintf(causes[r], 256, "no heartbeat for %.1f s (limit %.1f s%s)", age, lim,
                         have ? "" : ", before the first step");
            }
        }
        int any = 0;
        for (int r = 0; r < a->world; r++)
            any |= culprit[r];
        /* another node's agent saw this generation fail: its report names
         * the rank; the errors of this node's workers follow from it */
        if (a->nnodes > 1 && !any && rdzv_remote_down(a)) {
            for (int r = 0; r < a->world; r++) {
                int said = a->local[r] && a->w[r].done && error_exit(a->w[r].status);
                /* an error of the job itself only when the rank exited
                 * with it: SIGPIPE is a peer's death seen from here */
                a->err_exit[r] = said && !WIFSIGNALED(a->w[r].status);
                if (said) /* said, not blamed (culprit stays 0) */
                    error_cause(a, r, causes[r], 256);
            }
            *t_detect = t;
            if (a->last_progress > 0 && t > a->last_progress)
                a->lost_detect_s += t - a->last_progress;
            return 1;
        }
        if (any) {
            *t_detect = t;
            if (a->last_progress > 0 && t > a->last_progress)
                a->lost_detect_s += t - a->last_progress;
            return 1;
        }
        if (failed && t_fail == 0)
            t_fail = t;
        /* error exits without a clearer cause: give the others a moment
         * to show one (the killed rank is reaped, a stopped one seen) */
        double grace = a->nnodes > 1 ? 3.0 : 1.0; /* another node's report */
        /* a node whose agent missed six beats (0.25 s each) may be lost
         * with it (the cause): wait for the verdict, not blame these */
        if (a->nnodes > 1 && t - t_fail < a->node_timeout + 2 && node_quiet(a) > 1.5)
            grace = a->node_timeout + 2;
        if (t_fail > 0 && (t - t_fail > grace || (alive == 0 && a->nnodes <= 1))) {
            /* a rank dead of SIGPIPE is the one death here: the others'
             * errors (a peer died) follow from it and are said, not
             * blamed; without one, every rank that exited is blamed */
            int piped = 0;
            for (int r = 0; r < a->world; r++)
                piped |=
                    a->w[r].done && error_exit(a->w[r].status) && WIFSIGNALED(a->w[r].status);
            for (int r = 0; r < a->world; r++)
                if (a->w[r].done && error_exit(a->w[r].status)) {
                    culprit[r] = !piped || WIFSIGNALED(a->w[r].status);
                    a->err_exit[r] = !culprit[r];
                    error_cause(a, r, causes[r], 256);
                }
            *t_detect = t_fail;
            if (a->last_progress > 0 && t_fail > a->last_progress)
                a->lost_detect_s += t_fail - a->last_progress;
            return 1;
        }
        if (alive == 0 && t_fail == 0) {
            if (a->nnodes > 1 && rdzv_finish(a) != 0) {
                *t_detect = launch_now();
                return 1; /* another node failed after this one finished */
            }
            return 0;
        }
    }
}

static int agent_main(agent *a)
{
    a->t0 = launch_now();
    a->world = a->nproc;
    a->nslots = a->nproc + a->spares;
    for (int s = 0; s < a->nslots; s++)
        a->slot_state[s] = s < a->nproc ? 1 : 0;
    for (int r = 0; r < a->nproc; r++)
        a->rank_slot[r] = r;
    char why[1024] = "";
    if (a->nnodes > 1) { /* the leader numbers every node's slots */
        a->world = 0;
        if (rdzv_init(a, why, sizeof why) != 0) {
            rdzv_stop(a, why);
            return cli_fail(CMD, "node %d: %s", a->node_rank, why);
        }
    }
    a->world0 = a->world;
    int dp0 = 0;
    if (a->node_rank == 0 && fitting_world(a, a->world, &dp0, why, sizeof why) != a->world) {
        rdzv_stop(a, "the ranks do not fit the spec (see node 0's agent)");
        return cli_fail(CMD, "%d ranks do not fit the spec: %s", a->world, why);
    }
    if (a->nnodes > 1)
        printf("launch: node %d of %d: %d workers + %d spare slot(s) here, %d ranks in all; "
               "rendezvous %s\n",
               a->node_rank, a->nnodes, a->nproc, a->spares, a->world, a->rdzv);
    printf("launch: %d workers + %d spare slot(s), up to %d restart(s), heartbeat timeout "
           "%.0f s, grace %.1f s; store %s; logs and events in %s\n",
           a->nproc, a->spares, a->max_restarts, a->hb_timeout, a->grace_s, a->store, a->dir);
    fflush(stdout);
    launch_event(a, "\"event\":\"launch\",\"nproc\":%d,\"spares\":%d,\"max_restarts\":%d",
                 a->nproc, a->spares, a->max_restarts);
    double t_recover_from = 0;
    int64_t step_at_failure = 0;
    int fresh[MAXW];
    for (int r = 0; r < MAXW; r++)
        fresh[r] = 1;
    for (;;) {
        int culprit[MAXW] = {0};
        static char causes[MAXW][256];
        double t_detect = 0;
        launch_event(a, "\"event\":\"generation\",\"gen\":%d,\"world_size\":%d,\"mode\":\"%s\"",
                     a->gen, a->world,
                     a->gen == 0       ? "start"
                     : a->in_place_gen ? "in_place"
                                       : "gang");
        a->last_step_seen = 0;
        a->last_progress = 0;
        a->lost_gen = 0;
        memset(a->err_exit, 0, sizeof a->err_exit);
        a->recover_from = t_recover_from;
        a->fail_step = step_at_failure;
        int rc = run_gen(a, fresh, culprit, causes, &t_detect);
        if (rc == 3) { /* no leader: this node's part ends here */
            node_gone(a, why, sizeof why);
            kill_gang(a, NULL);
            launch_event(a, "\"event\":\"stop\",\"reason\":\"leader_lost\",\"gen\":%d", a->gen);
            return cli_fail(CMD, "node %d: %s", a->node_rank, why);
        }
        if (rc == 0) {
            launch_event(a,
                         "\"event\":\"finished\",\"gen\":%d,\"world_size\":%d,\"restarts\":%d",
                         a->gen, a->world, a->restarts);
            break;
        }
        int64_t last = a->last_step_seen;
        int all_stay = 0;
        if (a->nnodes > 1) {
            /* every node reports: with --in-place its culprits killed and
             * whether its other ranks can stay, else its workers killed
             * first; the leader decides for all, the others start what it
             * publishes */
            int stay = survivors_stay(a, culprit, causes);
            if (stay)
                kill_culprits(a, culprit);
            else
                kill_gang(a, culprit);
            rdzv_report(a, culprit, causes, a->in_place ? stay : -1);
            int f = 0;
            if (a->node_rank != a->leader) {
                for (int r = 0; r < a->world; r++)
                    if (culprit[r])
                        printf("launch: node %d: gen %d: rank %d failed: %s\n", a->node_rank,
                               a->gen, r, causes[r]);
                while ((f = rdzv_follow(a, fresh, why, sizeof why)) == 2) {
                    printf("launch: node %d: gen %d: node %d restarts the gang (not in place): "
                           "stopping the ranks left here\n",
                           a->node_rank, a->gen, a->leader);
                    fflush(stdout);
                    kill_gang(a, culprit);
                    rdzv_killed(a);
                }
                if (f != 0 && f != 3) {
                    kill_gang(a, NULL); /* survivors waiting for a generation */
                    return cli_fail(CMD, "node %d: %s", a->node_rank, why);
                }
            }
            /* 3: the leader was lost while this node waited for its
             * decision, and this node took over: it decides (its own
             * report is written; the old leader's ranks count as failed) */
            if (a->node_rank != a->leader && f == 0) {
                a->restarts++;
                if (a->recover_from == 0)
                    t_recover_from = t_detect;
                if (a->in_place_gen)
                    stay_here(a, fresh);
                char here[512] = "", anew[512] = "";
                size_t k = 0, kn = 0;
                for (int r = 0; r < a->world; r++) {
                    if (a->local[r] && k < sizeof here - 16)
                        k += (size_t)snprintf(here + k, sizeof here - k, " %d", r);
                    if (a->local[r] && fresh[r] && kn < sizeof anew - 16)
                        kn += (size_t)snprintf(anew + kn, sizeof anew - kn, " %d", r);
                }
                if (a->in_place_gen)
                    printf("launch: node %d: gen %d on %d ranks in place (node %d decided); "
                           "ranks here:%s; started here:%s, the others stay in their "
                           "processes\n",
                           a->node_rank, a->gen, a->world, a->leader, k ? here : " none",
                           kn ? anew : " none");
                else
                    printf("launch: node %d: gen %d on %d ranks (node %d decided); ranks "
                           "here:%s\n",
                           a->node_rank, a->gen, a->world, a->leader, k ? here : " none");
                fflush(stdout);
                continue;
            }
            if (rdzv_gather(a, culprit, causes, &all_stay, why, sizeof why) != 0) {
                kill_gang(a, NULL);
                rdzv_stop(a, why);
                return cli_fail(CMD, "%s", why);
            }
            /* a node was lost: the ranks elsewhere that exited with an
             * error lost their peers; their slots are not at fault */
            for (int r = 0; a->lost_gen && r < a->world; r++)
                if (culprit[r] && !strncmp(causes[r], "exited", 6)) {
                    culprit[r] = 0;
                    printf("launch: gen %d: rank %d %s: its peers were lost with a node; "
                           "slot %d kept\n",
                           a->gen, r, causes[r], a->rank_slot[r]);
                }
        }
        int in_place = can_stay(a, culprit, causes) && (a->nnodes <= 1 || all_stay);
        if (in_place && a->lost_gen && lost_node_runs(a, culprit))
            in_place = 0;
        if (a->nnodes > 1 && a->in_place && !in_place) {
            /* the survivors of every node go, all nodes at once: a gang
             * restart */
            int g = rdzv_gang(a, why, sizeof why);
            kill_gang(a, culprit);
            if (g != 0 || rdzv_gang_wait(a, why, sizeof why) != 0) {
                rdzv_stop(a, why);
                return cli_fail(CMD, "%s", why);
            }
        } else if (a->nnodes <= 1) {
            if (in_place)
                kill_culprits(a, culprit);
            else
                kill_gang(a, culprit);
        }
        /* every rank failing with an error of its own is the job's error
         * (a refused key, an anomaly policy that stops): no restart helps */
        int nerr = 0;
        for (int r = 0; r < a->world; r++)
            nerr += culprit[r] ? !strncmp(causes[r], "exited with status", 18) : a->err_exit[r];
        if (nerr == a->world) {
            int said = 0; /* the first rank whose error this node knows */
            while (said < a->world - 1 && !causes[said][0])
                said++;
            launch_event(a, "\"event\":\"stop\",\"reason\":\"job_error\",\"gen\":%d", a->gen);
            rdzv_stop(a, "every rank failed with an error of the job itself (node 0's agent "
                         "says more)");
            return cli_fail(CMD,
                            "gen %d: every rank failed with an error of the job itself, "
                            "which a restart would repeat; rank %d %s (logs in %s)",
                            a->gen, said, causes[said], a->dir);
        }
        double t_killed = launch_now();
        a->restarts++;
        int lost_slots = 0;
        for (int r = 0; r < a->world; r++) {
            if (!culprit[r])
                continue;
            int s = a->rank_slot[r];
            a->slot_state[s] = 2;
            lost_slots++;
            printf("launch: gen %d: rank %d (slot %d) failed at step ~%lld: %s; slot "
                   "quarantined\n",
                   a->gen, r, s, (long long)last + 1, causes[r]);
            launch_event(
                a,
                "\"event\":\"failure\",\"gen\":%d,\"rank\":%d,\"slot\":%d,\"step\":%lld,"
                "\"cause\":\"%s\",\"detect_s\":%.3f",
                a->gen, r, s, (long long)last + 1, causes[r], t_detect - a->t0);
        }
        if (a->restarts > a->max_restarts) {
            launch_event(a, "\"event\":\"stop\",\"reason\":\"max_restarts\",\"restarts\":%d",
                         a->restarts - 1);
            rdzv_stop(a, "the restart budget is spent (node 0's agent says more)");
            return cli_fail(CMD,
                            "gen %d failed and the restart budget is spent (%d "
                            "restart(s), --max-restarts / fault_tolerance.max_restarts "
                            "%d); the newest checkpoint is in %s: llmtrain train %s --out "
                            "%s --resume continues by hand",
                            a->gen, a->restarts - 1, a->max_restarts, a->out, a->spec_path,
                            a->out);
        }
        /* promote spares to the failed ranks, else shrink */
        int short_by = 0;
        for (int r = 0; r < a->world; r++) {
            if (!culprit[r])
                continue;
            int found = -1;
            /* a spare on the failed rank's node first (its other ranks' peers) */
            for (int s = 0; a->nnodes > 1 && s < a->nslots && found < 0; s++)
                if (a->slot_state[s] == 0 && a->slot_node[s] == a->slot_node[a->rank_slot[r]])
                    found = s;
            for (int s = 0; s < a->nslots && found < 0; s++)
                if (a->slot_state[s] == 0)
                    found = s;
            if (found >= 0) {
                a->slot_state[found] = 1;
                printf("launch: spare slot %d promoted to rank %d\n", found, r);
                launch_event(a, "\"event\":\"promote\",\"slot\":%d,\"rank\":%d", found, r);
                a->rank_slot[r] = found;
            } else {
                a->rank_slot[r] = -1;
                short_by++;
            }
        }
        if (short_by) {
            int usable = a->world - short_by;
            int ndp = 0;
            int nw = usable > 0 ? fitting_world(a, usable, &ndp, why, sizeof why) : 0;
            if (nw < 1) {
                launch_event(a, "\"event\":\"stop\",\"reason\":\"no_fit\",\"usable\":%d",
                             usable);
                rdzv_stop(a, "no spare left and no smaller world fits (node 0's agent says "
                             "more)");
                return cli_fail(CMD,
                                "no spare left and no smaller world keeps the global "
                                "batch on %d usable slot(s): %s",
                                usable, why);
            }
            /* the remaining slots, renumbered */
            int slots[MAXW], k = 0;
            for (int r = 0; r < a->world; r++)
                if (a->rank_slot[r] >= 0)
                    slots[k++] = a->rank_slot[r];
            for (int r = nw; r < k; r++)
                a->slot_state[slots[r]] = 0; /* idle: the world shrank below them */
            if (ndp == nw)
                printf("launch: no spare left: continuing elastically on %d data-parallel "
                       "ranks (was %d), same global batch (grad_accum raised)\n",
                       nw, a->world);
            else /* model-parallel groups stay whole: fewer of them */
                printf("launch: no spare left: continuing elastically on %d ranks, %d "
                       "data-parallel groups of %d (was %d ranks), same global batch "
                       "(grad_accum raised)\n",
                       nw, ndp, nw / ndp, a->world);
            launch_event(a, "\"event\":\"elastic\",\"from\":%d,\"to\":%d", a->world, nw);
            for (int r = 0; r < nw; r++)
                a->rank_slot[r] = slots[r];
            a->world = nw;
        }
        a->lost_restart_s += launch_now() - t_killed;
        /* a failure before the previous one's recovery ended (a worker
         * dying during the restart) extends that recovery */
        if (a->recover_from > 0) {
            if (last > step_at_failure)
                step_at_failure = last;
        } else {
            step_at_failure = last;
            t_recover_from = t_detect;
        }
        a->gen++;
        a->in_place_gen = in_place;
        for (int r = 0; r < a->world; r++)
            fresh[r] = in_place ? culprit[r] : 1;
        if (a->nnodes > 1) {
            if (rdzv_publish(a, fresh, why, sizeof why) != 0) {
                kill_gang(a, NULL);
                rdzv_stop(a, why);
                return cli_fail(CMD, "%s", why);
            }
            if (in_place)
                stay_here(a, fresh);
        }
        a->in_place_t = launch_now();
        if (in_place && a->nnodes <= 1 && publish_gen(a) != 0) {
            /* the survivors would wait for nothing: restart them all */
            kill_gang(a, NULL);
            in_place = a->in_place_gen = 0;
            for (int r = 0; r < a->world; r++)
                fresh[r] = 1;
        }
        if (in_place)
            printf("launch: in-place recovery as gen %d: the surviving ranks stay in their "
                   "processes and go back to the newest step every rank holds (memory, "
                   "else disk); the replaced rank(s) resume from disk\n",
                   a->gen);
        else
            printf("launch: gang restart as gen %d on %d ranks from the newest checkpoint "
                   "(in-memory snapshots are lost with the processes)\n",
                   a->gen, a->world);
        fflush(stdout);
    }
    double wall = launch_now() - a->t0, rsum = a->recov_sum;
    printf("launch: done in %.1f s: %d restart(s), %d recovery(ies) taking %.1f s in all, "
           "%lld step(s) recomputed; final world size %d\n",
           wall, a->restarts, a->nfail, rsum, (long long)a->lost_steps, a->world);
    if (a->node_rank == a->leader) /* the leader's view (doc/fault-tolerance.md) */
        launch_goodput_report(a, wall, rsum);
    launch_event(a,
                 "\"event\":\"summary\",\"wall_s\":%.3f,\"restarts\":%d,\"recovery_s\":%.3f,"
                 "\"lost_steps\":%lld,\"world_size\":%d",
                 wall, a->restarts, rsum, (long long)a->lost_steps, a->world);
    return CLI_OK;
}

static int launch_takes_value(const char *s)
{
    static const char *const v[] = {
        "--nproc",        "--spares",      "--max-restarts", "--heartbeat-timeout",
        "--grace-s",      "--expect-mtbf", "--nnodes",       "--node-rank",
        "--node-timeout", "--rdzv",        "--out"};
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
        if (!strcmp(s, v[k]))
            return 1;
    return 0;
}

/* A value flag given a second time would silently replace the first (the
 * launch's own), or reach every worker twice, which train refuses after
 * they start (--steps, --threads): refused before any worker starts.
 * --resume and --fresh may repeat, as train allows. */
static int launch_given_twice(const char **seen, int *nseen, const char *flag)
{
    for (int k = 0; k < *nseen; k++)
        if (!strcmp(seen[k], flag))
            return 1;
    seen[(*nseen)++] = flag;
    return 0;
}

int cmd_launch(int argc, char **argv)
{
    agent a;
    memset(&a, 0, sizeof a);
    a.nproc = 1;
    a.node_rank = -1; /* not given */
    a.max_restarts = -1;
    a.hb_timeout = -1;
    a.grace_s = 5.0;
    static char *pass[64];
    int np = 0;
    const char *seen[16]; /* launch_takes_value's eleven, --steps, --threads */
    int nseen = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int64_t v;
        double d;
        if ((launch_takes_value(s) || !strcmp(s, "--steps") || !strcmp(s, "--threads")) &&
            launch_given_twice(seen, &nseen, s))
            return usage("give each option once (the second value would replace the first, "
                         "or the workers would refuse it):",
                         s);
        if (!strcmp(s, "--nproc") && i + 1 < argc) {
            if (cli_parse_i64("--nproc", argv[++i], 1, MAXW - 1, &v) != CLI_OK)
                return CLI_USAGE;
            a.nproc = (int)v;
        } else if (!strcmp(s, "--spares") && i + 1 < argc) {
            if (cli_parse_i64("--spares", argv[++i], 0, MAXW / 2, &v) != CLI_OK)
                return CLI_USAGE;
            a.spares = (int)v;
        } else if (!strcmp(s, "--max-restarts") && i + 1 < argc) {
            if (cli_parse_i64("--max-restarts", argv[++i], 0, 1000000, &v) != CLI_OK)
                return CLI_USAGE;
            a.max_restarts = (int)v;
        } else if (!strcmp(s, "--heartbeat-timeout") && i + 1 < argc) {
            if (cli_parse_f64("--heartbeat-timeout", argv[++i], 0.1, 1e6, &d) != CLI_OK)
                return CLI_USAGE;
            a.hb_timeout = d;
        } else if (!strcmp(s, "--grace-s") && i + 1 < argc) {
            if (cli_parse_f64("--grace-s", argv[++i], 0, 3600, &d) != CLI_OK)
                return CLI_USAGE;
            a.grace_s = d;
        } else if (!strcmp(s, "--expect-mtbf") && i + 1 < argc) {
            if (cli_parse_f64("--expect-mtbf", argv[++i], 1e-3, 1e9, &d) != CLI_OK)
                return CLI_USAGE;
            a.expect_mtbf = d;
        } else if (!strcmp(s, "--nnodes") && i + 1 < argc) {
            if (cli_parse_i64("--nnodes", argv[++i], 1, 64, &v) != CLI_OK)
                return CLI_USAGE;
            a.nnodes = (int)v;
        } else if (!strcmp(s, "--node-rank") && i + 1 < argc) {
            if (cli_parse_i64("--node-rank", argv[++i], 0, 63, &v) != CLI_OK)
                return CLI_USAGE;
            a.node_rank = (int)v;
        } else if (!strcmp(s, "--node-timeout") && i + 1 < argc) {
            if (cli_parse_f64("--node-timeout", argv[++i], 0.5, 1e6, &d) != CLI_OK)
                return CLI_USAGE;
            a.node_timeout = d;
        } else if (!strcmp(s, "--rdzv") && i + 1 < argc) {
            snprintf(a.rdzv, sizeof a.rdzv, "%s", argv[++i]);
        } else if (!strcmp(s, "--in-place")) {
            a.in_place = 1;
        } else if (!strcmp(s, "--out") && i + 1 < argc) {
            a.out = argv[++i];
        } else if (!a.spec_path && s[0] != '-') {
            a.spec_path = s;
        } else if (!strcmp(s, "--steps") || !strcmp(s, "--threads")) {
            /* checked here: a bad value would fail every worker, which the
             * agent can only report as the job's error after starting them */
            if (i + 1 >= argc)
                return usage("missing the value of", s);
            if (cli_parse_i64(s, argv[i + 1], 1, !strcmp(s, "--steps") ? INT64_MAX : 4096,
                              &v) != CLI_OK)
                return CLI_USAGE;
            if (np > 60)
                return usage("too many train flags at", s);
            pass[np++] = argv[i];
            pass[np++] = argv[++i];
        } else if (!strcmp(s, "--resume") || !strcmp(s, "--fresh")) {
            if (np > 60) /* pass[] has 64 slots */
                return usage("too many train flags at", s);
            pass[np++] = argv[i];
        } else if (!strcmp(s, "--trace") || !strcmp(s, "--prom") ||
                   !strcmp(s, "--no-op-timing")) {
            return usage("the workers get --out, --steps, --threads, --resume and --fresh "
                         "of the train flags, not",
                         s);
        } else if (launch_takes_value(s) && i + 1 >= argc) {
            return usage("missing the value of", s);
        } else if (s[0] == '-') {
            return usage("unknown option", s);
        } else {
            return usage("one SPEC.json only; unexpected argument", s);
        }
    }
    if (!a.spec_path)
        return usage(NULL, NULL);
    if (a.nproc + a.spares > MAXW - 1)
        return cli_fail(CMD, "--nproc + --spares at most %d", MAXW - 1);
    char from[64];
    if (a.rdzv[0] && (a.nnodes < 1 || a.node_rank < 0) &&
        rdzv_from_env(&a.nnodes, &a.node_rank, from, sizeof from))
        printf("launch: --nnodes %d --node-rank %d from %s\n", a.nnodes, a.node_rank, from);
    if (a.rdzv[0] && (a.nnodes < 1 || a.node_rank < 0))
        return cli_fail(CMD,
                        "--rdzv %s: give --nnodes N and --node-rank K (no Slurm, Open "
                        "MPI or PMI variables say them)",
                        a.rdzv);
    if (a.nnodes < 1)
        a.nnodes = 1;
    if (a.node_rank < 0)
        a.node_rank = 0;
    if (a.node_rank >= a.nnodes)
        return cli_fail(CMD, "--node-rank %d: not below --nnodes %d", a.node_rank, a.nnodes);
    if (a.nnodes > 1 && !a.rdzv[0])
        return cli_fail(CMD,
                        "--nnodes %d needs --rdzv DIR: a directory every node's agent "
                        "sees, one per job",
                        a.nnodes);
    if ((a.rdzv[0] || a.node_rank > 0 || a.node_timeout > 0) && a.nnodes == 1)
        return cli_fail(CMD, "--rdzv, --node-rank and --node-timeout are for several agents: "
                             "give --nnodes N (N > 1), or none of them");
    if (a.node_timeout <= 0)
        a.node_timeout = 30;
    a.argv_pass = pass;
    a.argc_pass = np;
    char dflt[512];
    if (!a.out) {
        const char *base = strrchr(a.spec_path, '/');
        base = base ? base + 1 : a.spec_path;
        snprintf(dflt, sizeof dflt, "runs/%.*s", (int)strcspn(base, "."), base);
        a.out = dflt;
    }
    ssize_t n = readlink("/proc/self/exe", a.exe, sizeof a.exe - 1);
    if (n <= 0)
        return cli_fail(CMD, "cannot find this executable (/proc/self/exe)");
    a.exe[n] = 0;
    if (llmt_context_create(NULL, &a.ctx) != LLMT_OK)
        return cli_fail(CMD, "context");
    int rc;
    if (llmt_spec_parse_file(a.ctx, a.spec_path, &a.spec) != LLMT_OK) {
        rc = cli_fail_spec(CMD, a.spec_path, llmt_context_last_error(a.ctx));
        llmt_context_destroy(a.ctx);
        return rc;
    }
    if (a.max_restarts < 0) {
        int64_t m = 3;
        llmt_spec_get_int(a.spec, "fault_tolerance.max_restarts", &m);
        a.max_restarts = (int)m;
    }
    /* the job keeps survivors in place only with a fixed interval (an auto
     * one is decided by a collective on the first step, which a promoted
     * spare would make alone): refuse the flag rather than fall back */
    char ival[32] = "";
    llmt_spec_get_string(a.spec, "checkpoint.interval", ival, sizeof ival, NULL);
    if (a.in_place && !strcmp(ival, "auto")) {
        rc = cli_fail(CMD,
                      "--in-place needs a fixed checkpoint.interval (a number of steps), "
                      "not \"auto\" (%s): the promoted spare would decide the interval "
                      "alone; set one, or drop --in-place",
                      a.spec_path);
        llmt_spec_destroy(a.spec);
        llmt_context_destroy(a.ctx);
        return rc;
    }
    double cto = 600;
    llmt_spec_get_double(a.spec, "fault_tolerance.collective_timeout_s", &cto);
    if (a.hb_timeout < 0)
        a.hb_timeout = cto;
    a.start_timeout = a.hb_timeout * 4 > 300 ? a.hb_timeout * 4 : 300;
    if (a.nnodes > 1) /* one agent directory per node (the out dir may be shared) */
        snprintf(a.dir, sizeof a.dir, "%s/agent/node-%d", a.out, a.node_rank);
    else
        snprintf(a.dir, sizeof a.dir, "%s/agent", a.out);
    if (mkdirs(a.dir) != 0) {
        rc = cli_fail(CMD, "cannot create %s: %s", a.dir, strerror(errno));
    } else {
        /* a new store for this launch: generations never meet old keys */
        snprintf(a.store, sizeof a.store, "%s/store-%d-%ld", a.dir, (int)getpid(),
                 (long)time(NULL));
        if (a.nnodes == 1) /* the leader names the store of several nodes */
            mkdirs(a.store);
        snprintf(a.events_path, sizeof a.events_path, "%s/events.jsonl", a.dir);
        snprintf(a.inplace_path, sizeof a.inplace_path, "%s/generation", a.dir);
        unlink(a.inplace_path); /* an earlier launch's */
        a.events = fopen(a.events_path, "a");
        rc = agent_main(&a);
        if (a.events)
            fclose(a.events);
    }
    llmt_spec_destroy(a.spec);
    llmt_context_destroy(a.ctx);
    return rc;
}
