/* llmtrain launch --nnodes N --node-rank K --rdzv DIR: one agent per node,
 * agreeing through a rendezvous directory on a file system every node
 * sees (torchrun's c10d rendezvous, here as files, the way Gloo's own
 * FileStore is files: Gloo has no TCP store, and the agents use only the
 * public ABI, so they cannot reach the comm module's store). Every file
 * is written whole under a temporary name and renamed, so a reader sees
 * all of it or nothing.
 *
 *   node-K        "nproc spares pid": agent K joined with its slots
 *   gen-G         written by agent 0 (the leader): "gen G world W",
 *                 "store PATH", "mode gang|in_place", then "rank slot
 *                 node local fresh" per rank: the generation every agent
 *                 starts; slots are numbered node by node (node k's
 *                 workers, then its spares), local is the slot's index on
 *                 its node (LOCAL_RANK: a spare keeps its own device, a
 *                 survivor's stays its), fresh 1 a rank started anew
 *                 (every rank after a gang restart; in place: the failed
 *                 ranks, the others stay in their processes)
 *   down-G-K      agent K saw generation G fail (its own workers, or
 *                 another node's down file): "rank code cause" per rank
 *                 it names (code 1 failed by itself, 2 exited with an
 *                 error); with --in-place also "stay 1" when its failed
 *                 ranks are dead (killed or stopped, now SIGKILLed) and
 *                 its other ranks still run, else "stay 0"; without
 *                 --in-place or with stay 0 every worker of it is dead
 *   gang-G        --in-place, the leader: not in place after all (a node
 *                 cannot stay, no spare, the budget): stop the survivors
 *   killed-G-K    agent K's survivors are dead (the answer to gang-G)
 *   done-G-K      agent K's workers of generation G all finished
 *   stop          the leader stopped the job: the reason
 *
 * After a failure the leader waits for every node's down file, decides as
 * a single agent does (in place when every node can stay and a spare is
 * free for each failed rank; quarantine, promote a spare, preferring one
 * on the failed rank's node, or shrink), makes sure every old worker that
 * does not stay is dead (gang-G, killed-G-K) and writes the next gen
 * file; the others wait for it. The workers of every node meet in the
 * Gloo store the leader names, under the prefix genG; survivors reach it
 * through their node's agent, which rewrites its own generation file
 * (cmd_launch.c, lib/job/inplace.c). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

#define CMD "launch"

static void path(const agent *a, char *buf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void path(const agent *a, char *buf, size_t n, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    snprintf(buf, n, "%s/%s", a->rdzv, name);
}

/* Write `text` to DIR/name whole (temporary name, then rename). */
int rdzv_put(const agent *a, const char *name, const char *text)
{
    char p[4400], tmp[4500];
    path(a, p, sizeof p, "%s", name);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", p, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int ok = fputs(text, f) >= 0;
    ok &= fclose(f) == 0;
    return ok && rename(tmp, p) == 0 ? 0 : -1;
}

int rdzv_exists(const agent *a, const char *name)
{
    char p[4400];
    path(a, p, sizeof p, "%s", name);
    return access(p, F_OK) == 0;
}

int rdzv_get(const agent *a, const char *name, char *buf, size_t n)
{
    char p[4400];
    path(a, p, sizeof p, "%s", name);
    FILE *f = fopen(p, "r");
    if (!f)
        return -1;
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = 0;
    fclose(f);
    return 0;
}

/* Every wait here beats: a waiting agent is alive (launch_node.c). */
static void nap(agent *a)
{
    node_beat(a);
    struct timespec ts = {0, 20000000L};
    nanosleep(&ts, NULL);
}

/* The stop file's reason, if the leader wrote one. */
static int stopped(const agent *a, char *why, size_t n)
{
    char p[4400];
    path(a, p, sizeof p, "stop");
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    size_t k = fread(why, 1, n - 1, f);
    why[k] = 0;
    fclose(f);
    why[strcspn(why, "\n")] = 0;
    return 1;
}

void rdzv_stop(agent *a, const char *why)
{
    if (a->nnodes > 1 && a->node_rank == a->leader) {
        char b[1100];
        snprintf(b, sizeof b, "%s\n", why);
        rdzv_put(a, "stop", b);
    }
}

/* Read gen-G: world, store, mode, and which ranks run here. */
static int read_gen(agent *a, int gen, int *fresh)
{
    char p[4400], line[4400];
    path(a, p, sizeof p, "gen-%d", gen);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    int g = -1, w = 0,
        ok = fscanf(f, "gen %d world %d\n", &g, &w) == 2 && g == gen && w > 0 && w < MAXW;
    ok = ok && fgets(line, sizeof line, f) && !strncmp(line, "store ", 6);
    if (ok) {
        line[strcspn(line, "\n")] = 0;
        snprintf(a->store, sizeof a->store, "%.4000s", line + 6);
    }
    char mode[32] = "";
    ok = ok && fscanf(f, "mode %31s\n", mode) == 1;
    int nloc = 0;
    for (int r = 0; ok && r < w; r++) {
        int rr, s, node, loc, fr;
        ok = fgets(line, sizeof line, f) &&
             sscanf(line, "%d %d %d %d %d", &rr, &s, &node, &loc, &fr) == 5 && rr == r &&
             s >= 0 && s < MAXW && loc >= 0;
        if (ok) {
            a->rank_slot[r] = s;
            a->slot_seen[s] = 1;
            a->rank_node[r] = node;
            a->local[r] = node == a->node_rank;
            a->local_index[r] = a->local[r] ? loc : -1;
            nloc += a->local[r];
            if (fresh)
                fresh[r] = fr != 0;
        }
    }
    fclose(f);
    if (ok) {
        a->world = w;
        a->nlocal = nloc;
        a->in_place_gen = !strcmp(mode, "in_place");
    }
    return ok;
}

/* Leader: write gen-G for the current a->world and a->rank_slot. */
static int publish(agent *a, const int *fresh)
{
    static char b[MAXW * 48 + 4400];
    size_t n = (size_t)snprintf(b, sizeof b, "gen %d world %d\nstore %s\nmode %s\n", a->gen,
                                a->world, a->store, a->in_place_gen ? "in_place" : "gang");
    int nloc = 0;
    for (int r = 0; r < a->world && n < sizeof b; r++) {
        int s = a->rank_slot[r], loc = 0;
        for (int t = 0; t < s; t++) /* the slot's index on its node */
            loc += a->slot_node[t] == a->slot_node[s];
        n += (size_t)snprintf(b + n, sizeof b - n, "%d %d %d %d %d\n", r, s, a->slot_node[s],
                              loc, fresh[r] != 0);
        a->rank_node[r] = a->slot_node[s];
        a->local[r] = a->slot_node[s] == a->node_rank;
        a->local_index[r] = a->local[r] ? loc : -1;
        nloc += a->local[r];
    }
    a->nlocal = nloc;
    char name[32];
    snprintf(name, sizeof name, "gen-%d", a->gen);
    return rdzv_put(a, name, b);
}

int rdzv_init(agent *a, char *why, size_t n)
{
    struct stat st;
    if (stat(a->rdzv, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, n,
                 "--rdzv %s: not a directory (%s); make it on a file system every node "
                 "sees, one per job",
                 a->rdzv, strerror(errno));
        return -1;
    }
    char me[64], name[32];
    snprintf(me, sizeof me, "%d %d %d\n", a->nproc, a->spares, (int)getpid());
    snprintf(name, sizeof name, "node-%d", a->node_rank);
    if (a->node_rank == 0 && (rdzv_exists(a, "gen-0") || rdzv_exists(a, "stop"))) {
        snprintf(why, n,
                 "--rdzv %s holds an earlier job's generation or stop file: give each "
                 "job a new directory",
                 a->rdzv);
        return -1;
    }
    if (rdzv_put(a, name, me) != 0) {
        snprintf(why, n, "--rdzv %s: cannot write %s: %s", a->rdzv, name, strerror(errno));
        return -1;
    }
    double t0 = launch_now();
    if (a->node_rank == 0) {
        /* every node's slots, numbered node by node */
        int base = 0;
        for (int k = 0; k < a->nnodes; k++) {
            char p[4400];
            int np = 0, sp = 0, pid = 0, got = 0;
            path(a, p, sizeof p, "node-%d", k);
            while (!got) {
                FILE *f = fopen(p, "r");
                if (f) {
                    got = fscanf(f, "%d %d %d", &np, &sp, &pid) == 3;
                    fclose(f);
                }
                if (got)
                    break;
                if (launch_now() - t0 > a->start_timeout) {
                    snprintf(why, n, "node %d did not join the rendezvous %s within %.0f s", k,
                             a->rdzv, a->start_timeout);
                    return -1;
                }
                nap(a);
            }
            if (np < 1 || sp < 0 || base + np + sp >= MAXW || a->world + np >= MAXW) {
                snprintf(why, n,
                         "node %d joined with %d workers and %d spares: at most %d slots "
                         "in all",
                         k, np, sp, MAXW - 1);
                return -1;
            }
            for (int s = 0; s < np + sp; s++) {
                a->slot_node[base + s] = k;
                a->slot_state[base + s] = s < np ? 1 : 0;
                if (s < np)
                    a->rank_slot[a->world++] = base + s;
            }
            base += np + sp;
        }
        a->nslots = base;
        snprintf(a->store, sizeof a->store, "%.4000s/store-%d-%ld", a->rdzv, (int)getpid(),
                 (long)time(NULL));
        mkdir(a->store, 0755);
        int all[MAXW];
        for (int r = 0; r < MAXW; r++)
            all[r] = 1;
        if (publish(a, all) != 0) {
            snprintf(why, n, "--rdzv %s: cannot write gen-0: %s", a->rdzv, strerror(errno));
            return -1;
        }
        node_watch_start(a); /* every node has joined */
        return 0;
    }
    while (!read_gen(a, 0, NULL)) {
        if (stopped(a, why, n))
            return -1;
        if (launch_now() - t0 > a->start_timeout) {
            snprintf(why, n,
                     "no generation from node 0 in %s within %.0f s (is agent 0 "
                     "running with the same --rdzv?)",
                     a->rdzv, a->start_timeout);
            return -1;
        }
        nap(a);
    }
    node_watch_start(a);
    return 0;
}

int rdzv_remote_down(const agent *a)
{
    for (int k = 0; k < a->nnodes; k++) {
        char name[64];
        snprintf(name, sizeof name, "down-%d-%d", a->gen, k);
        if (k != a->node_rank && rdzv_exists(a, name))
            return 1;
    }
    return 0;
}

int rdzv_finish(agent *a)
{
    char name[64];
    snprintf(name, sizeof name, "done-%d-%d", a->gen, a->node_rank);
    rdzv_put(a, name, "done\n");
    double t0 = launch_now();
    for (;;) {
        if (rdzv_remote_down(a))
            return 1;
        node_read_lost(a);
        int all = 1, k = 0;
        for (; k < a->nnodes && all; k++) {
            snprintf(name, sizeof name, "done-%d-%d", a->gen, k);
            all = a->node_lost[k] || rdzv_exists(a, name);
            /* lost after this node's ranks finished: its ranks finished
             * too (the last collectives need every rank), so it is not
             * reported as a failure */
            double q = all ? 0 : node_silence(a, k);
            if (q > a->node_timeout) {
                printf("launch: node %d: node %d silent for %.1f s after this node's ranks "
                       "finished generation %d (lost at the end? its ranks finished: the "
                       "last collectives need them all)\n",
                       a->node_rank, k, q, a->gen);
                a->node_lost[k] = all = 1;
            }
        }
        if (all)
            return 0;
        /* the ranks finish together (their last collectives), so a node
         * silent this long lost its agent: this node's part is done */
        if (launch_now() - t0 > a->start_timeout) {
            printf("launch: node %d: node %d neither finished generation %d nor reported "
                   "a failure within %.0f s of this node's end; leaving (its agent is "
                   "gone?)\n",
                   a->node_rank, k - 1, a->gen, a->start_timeout);
            return 0;
        }
        nap(a);
    }
}

int rdzv_report(agent *a, const int *culprit, char causes[][256], int stay)
{
    static char b[MAXW * 300];
    size_t n = 0;
    b[0] = 0;
    if (stay >= 0)
        n += (size_t)snprintf(b, sizeof b, "stay %d\n", stay != 0);
    for (int r = 0; r < a->world && n < sizeof b - 300; r++)
        if (culprit[r] && a->local[r])
            n += (size_t)snprintf(b + n, sizeof b - n, "%d %d %s\n", r,
                                  strncmp(causes[r], "exited", 6) ? 1 : 2, causes[r]);
        else if (a->err_exit[r] && a->local[r]) /* not blamed; counted for the job error */
            n += (size_t)snprintf(b + n, sizeof b - n, "exit %d %s\n", r, causes[r]);
    char name[64];
    snprintf(name, sizeof name, "down-%d-%d", a->gen, a->node_rank);
    return rdzv_put(a, name, b);
}

int rdzv_gather(agent *a, int *culprit, char causes[][256], int *all_stay, char *why, size_t n)
{
    double t0 = launch_now();
    *all_stay = 1;
    for (int k = 0; k < a->nnodes; k++) {
        char p[4400], line[400];
        path(a, p, sizeof p, "down-%d-%d", a->gen, k);
        FILE *f;
        /* lost in an earlier generation: no report comes, none is due */
        if (a->node_lost[k] && access(p, F_OK) != 0)
            continue;
        while (!(f = fopen(p, "r"))) {
            node_check_lost(a); /* reports for a node lost meanwhile */
            if (launch_now() - t0 > a->start_timeout) {
                snprintf(why, n,
                         "node %d did not report on generation %d within %.0f s "
                         "(its agent is gone?)",
                         k, a->gen, a->start_timeout);
                return -1;
            }
            nap(a);
        }
        int stay = 0;
        /* a lost node's ranks all failed, whatever it reported before */
        for (int r = 0; a->node_lost[k] && r < a->world; r++)
            if (a->rank_node[r] == k && !culprit[r]) {
                culprit[r] = 1;
                snprintf(causes[r], 256, "lost with node %d (node %d)", k, k);
            }
        while (fgets(line, sizeof line, f)) {
            int r, code, off = 0;
            if (sscanf(line, "stay %d", &code) == 1)
                stay = code == 1;
            else if (sscanf(line, "exit %d %n", &r, &off) == 1 && off > 0 && r >= 0 &&
                     r < a->world) {
                a->err_exit[r] = 1;
                line[strcspn(line, "\n")] = 0;
                snprintf(causes[r], 256, "%s (node %d)", line + off, k);
            } else if (sscanf(line, "%d %d %n", &r, &code, &off) >= 2 && r >= 0 &&
                       r < a->world) {
                culprit[r] = 1;
                line[strcspn(line, "\n")] = 0;
                snprintf(causes[r], 256, "%s (node %d)", line + off, k);
            }
        }
        fclose(f);
        *all_stay &= stay;
    }
    return 0;
}

int rdzv_gang(agent *a, char *why, size_t n)
{
    char name[64];
    snprintf(name, sizeof name, "gang-%d", a->gen);
    if (rdzv_put(a, name, "gang\n") != 0) {
        snprintf(why, n, "--rdzv %s: cannot write %s: %s", a->rdzv, name, strerror(errno));
        return -1;
    }
    return 0;
}

int rdzv_gang_wait(agent *a, char *why, size_t n)
{
    char name[64];
    double t0 = launch_now();
    for (int k = 0; k < a->nnodes; k++) {
        snprintf(name, sizeof name, "killed-%d-%d", a->gen, k);
        while (k != a->node_rank && !a->node_lost[k] && !rdzv_exists(a, name)) {
            node_check_lost(a); /* a node lost now has no workers to stop */
            /* grace_s for the survivors, then the kill itself */
            if (launch_now() - t0 > a->start_timeout + a->grace_s) {
                snprintf(why, n,
                         "node %d did not stop its workers of generation %d within %.0f s "
                         "(its agent is gone?)",
                         k, a->gen, a->start_timeout + a->grace_s);
                return -1;
            }
            nap(a);
        }
    }
    return 0;
}

void rdzv_killed(agent *a)
{
    char name[64];
    snprintf(name, sizeof name, "killed-%d-%d", a->gen, a->node_rank);
    rdzv_put(a, name, "killed\n");
}

int rdzv_publish(agent *a, const int *fresh, char *why, size_t n)
{
    if (publish(a, fresh) != 0) {
        snprintf(why, n, "--rdzv %s: cannot write gen-%d: %s", a->rdzv, a->gen,
                 strerror(errno));
        return -1;
    }
    return 0;
}

int rdzv_follow(agent *a, int *fresh, char *why, size_t n)
{
    double t0 = launch_now();
    char gang[64];
    snprintf(gang, sizeof gang, "gang-%d", a->gen);
    while (!read_gen(a, a->gen + 1, fresh)) {
        if (stopped(a, why, n) || node_gone(a, why, n))
            return -1;
        if (a->leader == a->node_rank)
            return 3; /* the leader was lost: this node decides now */
        if (rdzv_exists(a, gang)) {
            char killed[64];
            snprintf(killed, sizeof killed, "killed-%d-%d", a->gen, a->node_rank);
            if (!rdzv_exists(a, killed))
                return 2;
        }
        /* the leader may wait start_timeout for a node, then decide */
        if (launch_now() - t0 > 2 * a->start_timeout + 60) {
            snprintf(why, n, "no generation %d from node %d in %s within %.0f s", a->gen + 1,
                     a->leader, a->rdzv, 2 * a->start_timeout + 60);
            return -1;
        }
        nap(a);
    }
    a->gen++;
    node_leader_moved(a);
    return 0;
}

int rdzv_slots(agent *a, char *why, size_t n)
{
    int base = 0;
    for (int k = 0; k < a->nnodes; k++) {
        char p[4400];
        int np = 0, sp = 0, pid = 0, got = 0;
        path(a, p, sizeof p, "node-%d", k);
        FILE *f = fopen(p, "r");
        if (f) {
            got = fscanf(f, "%d %d %d", &np, &sp, &pid) == 3;
            fclose(f);
        }
        if (!got || np < 1 || sp < 0 || base + np + sp >= MAXW) {
            snprintf(why, n, "taking over as leader: %s unreadable", p);
            return -1;
        }
        for (int s = 0; s < np + sp; s++)
            a->slot_node[base + s] = k;
        base += np + sp;
    }
    a->nslots = base;
    /* in use now; quarantined when a generation gave it a rank before (a
     * failed rank's, or left by a shrink) or its node is lost; else spare */
    for (int s = 0; s < base; s++)
        a->slot_state[s] = a->slot_seen[s] || a->node_lost[a->slot_node[s]] ? 2 : 0;
    for (int r = 0; r < a->world; r++)
        a->slot_state[a->rank_slot[r]] = 1;
    return 0;
}

int rdzv_from_env(int *nnodes, int *node_rank, char *src, size_t n)
{
    /* one agent per node: srun --ntasks-per-node 1, mpirun --npernode 1 */
    static const char *const pairs[][2] = {{"SLURM_NNODES", "SLURM_NODEID"},
                                           {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                                           {"PMI_SIZE", "PMI_RANK"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const char *sz = getenv(pairs[i][0]), *rk = getenv(pairs[i][1]);
        if (!sz || !*sz || !rk || !*rk)
            continue;
        int w = atoi(sz), r = atoi(rk);
        if (w < 1 || r < 0)
            continue;
        if (*nnodes < 1)
            *nnodes = w;
        if (*node_rank < 0)
            *node_rank = r;
        snprintf(src, n, "%s/%s", pairs[i][0], pairs[i][1]);
        return 1;
    }
    return 0;
}
