/* llmtrain launch --nnodes: is every node's agent still there? (issue 19)
 *
 * A node can vanish with its agent (power, kernel panic, a job step
 * killed). Its workers die with it (prctl PDEATHSIG in spawn, so a dead
 * agent never leaves workers behind), and the others' Gloo operations
 * fail; but no down-G-K report comes from it, and without this the
 * leader would wait for one until the start timeout (300 s or more).
 *
 * Every agent rewrites alive-K in the rendezvous directory with a counter
 * (at most every 0.25 s, from its polls and waits: a stopped or dead agent
 * stops counting). The readers judge silence on their own clocks, by when
 * they last saw the counter change, so the nodes' clocks and the shared
 * file system's timestamps do not matter. A node silent past
 * --node-timeout is lost:
 *   - the leader writes lost-K, quarantines every slot of node K (its
 *     spares too) and writes node K's report for the generation on its
 *     behalf (down-G-K: each of its ranks, "lost with node K", and "stay
 *     1": none of its ranks is left running), so every other agent sees a
 *     failure reported and the leader decides as for any other: spares
 *     elsewhere take the ranks (in place where it works), else the
 *     elastic shrink, else it stops saying why;
 *   - when the leader is the one silent, the lowest-numbered node that
 *     is not lost and still beats takes over (take_over): it claims
 *     leader-L (L the lost leader) by creating it exclusively, so two
 *     agents that judge differently still agree on one, then rebuilds the
 *     slots from the node files and the generations it followed and
 *     declares the old leader lost as above; the others follow whoever
 *     holds leader-L. With no node left to lead they stop naming it. An
 *     agent that finds lost-K for itself (it was only slow, and has been
 *     replaced) stops its workers and leaves. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

#define BEAT_S 0.25

void node_beat(agent *a)
{
    if (a->nnodes <= 1 || !a->rdzv[0])
        return;
    double t = launch_now();
    if (t - a->beat_t < BEAT_S)
        return;
    a->beat_t = t;
    char name[32], text[64];
    snprintf(name, sizeof name, "alive-%d", a->node_rank);
    snprintf(text, sizeof text, "%ld\n", ++a->beat_n);
    rdzv_put(a, name, text);
}

void node_watch_start(agent *a)
{
    double t = launch_now();
    for (int k = 0; k < a->nnodes && k < MAXN; k++) {
        a->beat_seen[k] = -1;
        a->beat_at[k] = t;
    }
}

double node_silence(agent *a, int k)
{
    if (k == a->node_rank || k < 0 || k >= MAXN || a->node_lost[k])
        return 0;
    char name[32], text[64] = "";
    snprintf(name, sizeof name, "alive-%d", k);
    long n = -1;
    if (rdzv_get(a, name, text, sizeof text) == 0 && sscanf(text, "%ld", &n) == 1 &&
        n != a->beat_seen[k]) {
        a->beat_seen[k] = n;
        a->beat_at[k] = launch_now();
    }
    return launch_now() - a->beat_at[k];
}

double node_quiet(agent *a)
{
    double q = 0;
    for (int k = 0; k < a->nnodes && k < MAXN; k++) {
        double s = node_silence(a, k);
        if (s > q)
            q = s;
    }
    return q;
}

/* The report node K would have written: each of its ranks lost with it. */
static void report_for(agent *a, int k, double silent)
{
    static char b[MAXW * 160];
    size_t n = (size_t)snprintf(b, sizeof b, "stay 1\n");
    for (int r = 0; r < a->world && n < sizeof b - 160; r++)
        if (a->rank_node[r] == k)
            n += (size_t)snprintf(b + n, sizeof b - n,
                                  "%d 1 lost with node %d: its agent silent for %.1f s "
                                  "(--node-timeout %.1f)\n",
                                  r, k, silent, a->node_timeout);
    char name[64];
    snprintf(name, sizeof name, "down-%d-%d", a->gen, k);
    rdzv_put(a, name, b);
}

/* At most every BEAT_S: on a shared file system each look is a metadata
 * operation per node, and a verdict needs seconds anyway. */
static int watch_due(agent *a)
{
    double t = launch_now();
    if (t - a->watch_t < BEAT_S)
        return 0;
    a->watch_t = t;
    return 1;
}

int node_check_lost(agent *a)
{
    if (a->nnodes <= 1 || a->node_rank != a->leader || !watch_due(a))
        return 0;
    int now_lost = 0;
    for (int k = 0; k < a->nnodes && k < MAXN; k++) {
        if (k == a->node_rank)
            continue;
        double s = node_silence(a, k);
        if (a->node_lost[k] || s <= a->node_timeout)
            continue;
        a->node_lost[k] = 1;
        if (!a->lost_gen || a->beat_at[k] < a->lost_since)
            a->lost_since = a->beat_at[k];
        a->lost_gen = 1;
        now_lost++;
        for (int t = 0; t < a->nslots; t++)
            if (a->slot_node[t] == k)
                a->slot_state[t] = 2;
        char name[32], text[160];
        snprintf(name, sizeof name, "lost-%d", k);
        snprintf(text, sizeof text, "gen %d silent %.1f\n", a->gen, s);
        rdzv_put(a, name, text);
        printf("launch: gen %d: node %d lost: its agent silent for %.1f s (--node-timeout "
               "%.1f); its slots quarantined, its ranks reported failed on its behalf\n",
               a->gen, k, s, a->node_timeout);
        fflush(stdout);
        launch_event(a, "\"event\":\"node_lost\",\"gen\":%d,\"node\":%d,\"silent_s\":%.3f",
                     a->gen, k, s);
        /* unless it reported this generation itself before it went */
        snprintf(name, sizeof name, "down-%d-%d", a->gen, k);
        if (!rdzv_exists(a, name))
            report_for(a, k, s);
    }
    return now_lost;
}

void node_read_lost(agent *a)
{
    for (int k = 0; k < a->nnodes && k < MAXN; k++) {
        char name[32];
        snprintf(name, sizeof name, "lost-%d", k);
        if (!a->node_lost[k] && rdzv_exists(a, name))
            a->node_lost[k] = 1;
    }
}

/* leader-L: "node K gen G", the node that took over from leader L. */
static int read_successor(agent *a, int old)
{
    char name[32], text[64] = "";
    int k = -1, g = -1;
    snprintf(name, sizeof name, "leader-%d", old);
    if (rdzv_get(a, name, text, sizeof text) != 0 ||
        sscanf(text, "node %d gen %d", &k, &g) != 2 || k < 0 || k >= a->nnodes || k == old)
        return -1;
    return k;
}

/* Claim leader-L for this node: created exclusively (link of a file
 * written whole), so the first claim stands. */
static void claim(agent *a, int old)
{
    char tmp[4200], dst[4200], text[64];
    snprintf(tmp, sizeof tmp, "%s/.leader-%d.%d", a->rdzv, old, a->node_rank);
    snprintf(dst, sizeof dst, "%s/leader-%d", a->rdzv, old);
    int n = snprintf(text, sizeof text, "node %d gen %d\n", a->node_rank, a->gen);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    int ok = write(fd, text, (size_t)n) == n && fsync(fd) == 0;
    close(fd);
    if (ok && link(tmp, dst) != 0 && errno != EEXIST)
        ok = 0;
    unlink(tmp);
}

static void new_leader(agent *a, int old, int k)
{
    a->leader = k;
    printf("launch: node %d: gen %d: node %d (the leader) lost: its agent silent for %.1f s "
           "(--node-timeout %.1f); node %d leads from now on\n",
           a->node_rank, a->gen, old, launch_now() - a->beat_at[old], a->node_timeout, k);
    fflush(stdout);
    launch_event(a, "\"event\":\"leader\",\"gen\":%d,\"lost\":%d,\"leader\":%d", a->gen, old,
                 k);
}

void node_leader_moved(agent *a)
{
    int k;
    for (int i = 0; i < a->nnodes && (k = read_successor(a, a->leader)) >= 0; i++)
        new_leader(a, a->leader, k);
}

/* The leader `old` is silent past --node-timeout: the lowest node that
 * is not lost and still beats leads from now on. 0: a->leader is the new
 * leader (this node: its slots rebuilt, the old leader declared lost at
 * its next look); -1: none took over (why says it). */
static int take_over(agent *a, int old, char *why, size_t n)
{
    node_read_lost(a);
    /* the candidate claims within a few of its polls; a candidate that is
     * lost too goes silent past its own --node-timeout, then the next one
     * (each node looks again at every poll) claims */
    double t0 = launch_now();
    int k;
    while ((k = read_successor(a, old)) < 0) {
        int cand = -1;
        for (int j = 0; j < a->nnodes && j < MAXN && cand < 0; j++)
            if (j != old && !a->node_lost[j] &&
                (j == a->node_rank || node_silence(a, j) <= a->node_timeout))
                cand = j;
        if (cand == a->node_rank)
            claim(a, old); /* read back at the next look */
        if (launch_now() - t0 > 2 * a->node_timeout + 5) {
            snprintf(why, n,
                     "node %d (the leader) lost, and no surviving node took over within "
                     "%.1f s (%s/leader-%d)",
                     old, 2 * a->node_timeout + 5, a->rdzv, old);
            return -1;
        }
        node_beat(a);
        struct timespec ts = {0, 20000000L};
        nanosleep(&ts, NULL);
    }
    new_leader(a, old, k);
    if (k != a->node_rank)
        return 0;
    if (rdzv_slots(a, why, n) != 0)
        return -1;
    a->watch_t = 0; /* the old leader declared lost now, its report written */
    node_check_lost(a);
    return 0;
}

int node_gone(agent *a, char *why, size_t n)
{
    if (a->nnodes <= 1 || a->node_rank == a->leader || (!a->gone && !watch_due(a)))
        return 0;
    char name[32];
    snprintf(name, sizeof name, "lost-%d", a->node_rank);
    if (rdzv_exists(a, name)) {
        snprintf(why, n,
                 "node %d declared this node lost (%s/%s: its agent was silent past "
                 "--node-timeout there) and gave its ranks to other nodes; leaving",
                 a->leader, a->rdzv, name);
        return a->gone = 1; /* asked again for the reason: the same answer */
    }
    static char gone_why[1400];
    if (a->gone) { /* asked again for the reason */
        snprintf(why, n, "%s", gone_why);
        return 1;
    }
    double s = node_silence(a, a->leader);
    if (s <= a->node_timeout)
        return 0;
    if (take_over(a, a->leader, gone_why, sizeof gone_why) == 0)
        return 0;
    a->gone = 1;
    size_t k = strlen(gone_why);
    snprintf(gone_why + k, sizeof gone_why - k,
             ": this node's workers are stopped; the newest checkpoint is in %.600s: start "
             "every node's agent again with a new --rdzv directory and --resume",
             a->out);
    snprintf(why, n, "%s", gone_why);
    return 1;
}
