/* The peer tier's replica ring kept across saves (lib/ckpt/peer.c): 4
 * ranks as threads, each with one checkpoint handle for the whole test and
 * a root of its own. A save's replication makes one all-gather (every
 * rank's size and node key) and one exchange, where it made three
 * all-gathers (keys, sizes, destinations); the ring is made again when
 * the keys change:
 *  - nodes {0,0,1,1}, steps 1 and 2: the ring 0 -> 2 -> 1 -> 3 -> 0
 *    (rank 0's replica on rank 2, ...);
 *  - the ranks moved to nodes {0,1,0,1} (a spare promoted elsewhere),
 *    step 3: the ring 0 -> 1 -> 2 -> 3 -> 0;
 *  - a new communicator, the same nodes, step 4: the same ring.
 * Each replica must be on its holder and on no other rank. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "ckpt/ckpt_internal.h"
#include "ckpt_util.h"

enum { W = 4, N = 2000, STEPS = 4 };

typedef struct {
    int rank;
    llmt_comm *comm[2]; /* the first communicator, then a new one */
    char root[4096];
    llmt_status st;
    char err[512];
    uint64_t gathers[STEPS], a2a[STEPS]; /* collectives of each replication */
} rk;

/* One step's save and replication on `comm`, counting its collectives. */
static llmt_status save_step(rk *k, llmt_ckpt *ck, llmt_comm *comm, int64_t step)
{
    llmt_status s = save_block(ck, step, (int)step, k->rank, W, N, 0);
    llmt_comm_stats a, b;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    b = a;
    llmt_comm_get_stats(comm, &a);
    if (s == LLMT_OK)
        s = llmt_ckpt_peer_replicate(ck, comm, step);
    llmt_comm_get_stats(comm, &b);
    k->gathers[step - 1] =
        b.calls[LLMT_COMM_STAT_ALL_GATHER] - a.calls[LLMT_COMM_STAT_ALL_GATHER];
    k->a2a[step - 1] =
        b.calls[LLMT_COMM_STAT_ALL_TO_ALLV] - a.calls[LLMT_COMM_STAT_ALL_TO_ALLV];
    return s;
}

static void *run(void *arg)
{
    rk *k = arg;
    llmt_ckpt *ck = NULL;
    k->st = rank_ckpt(k->rank, W, k->root, 0, &ck); /* every step's replicas stay */
    if (k->st != LLMT_OK)
        return NULL;
    for (int64_t step = 1; step <= STEPS && k->st == LLMT_OK; step++) {
        int node = step < 3 ? k->rank / 2 : k->rank % 2;
        k->st = llmt__ckpt_peer_config(ck, NULL, (uint64_t)node, 1);
        if (k->st == LLMT_OK)
            k->st = save_step(k, ck, k->comm[step == 4], step);
    }
    snprintf(k->err, sizeof k->err, "%s", llmt_ckpt_last_error(ck));
    llmt_ckpt_destroy(ck);
    return NULL;
}

static int has_replica(const rk *k, int64_t step, int owner)
{
    char p[4300];
    struct stat st;
    snprintf(p, sizeof p, "%s/peer/step-%012lld/rank-%05d.bin", k->root, (long long)step,
             owner);
    return stat(p, &st) == 0;
}

int main(void)
{
    char *base = tmpdir_make(NULL, "peer-ring");
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.timeout_ms = 30000;
    llmt_comm *c0[W], *c1[W];
    CHECK_STATUS(llmt_comm_create_inproc(NULL, W, &co, c0), LLMT_OK);
    CHECK_STATUS(llmt_comm_create_inproc(NULL, W, &co, c1), LLMT_OK);
    rk ks[W];
    memset(ks, 0, sizeof ks);
    pthread_t th[W];
    for (int r = 0; r < W; r++) {
        ks[r].rank = r;
        ks[r].comm[0] = c0[r];
        ks[r].comm[1] = c1[r];
        snprintf(ks[r].root, sizeof ks[r].root, "%s/node%d", base, r);
        pthread_create(&th[r], NULL, run, &ks[r]);
    }
    for (int r = 0; r < W; r++)
        pthread_join(th[r], NULL);
    /* rank r's replica holder at each step */
    const int ring_a[W] = {2, 3, 1, 0}, ring_b[W] = {1, 2, 3, 0};
    for (int r = 0; r < W; r++) {
        CHECK_STATUS(ks[r].st, LLMT_OK);
        if (ks[r].st)
            fprintf(stderr, "rank %d: %s\n", r, ks[r].err);
        for (int64_t step = 1; step <= STEPS; step++) {
            int holder = step < 3 ? ring_a[r] : ring_b[r];
            for (int q = 0; q < W; q++)
                if (has_replica(&ks[q], step, r) != (q == holder)) {
                    fprintf(stderr, "step %lld: rank %d's replica %s on rank %d\n",
                            (long long)step, r, q == holder ? "missing" : "also", q);
                    CHECK(0);
                }
            CHECK_EQ_INT((int)ks[r].gathers[step - 1], 1);
            CHECK_EQ_INT((int)ks[r].a2a[step - 1], 1);
        }
    }
    for (int r = 0; r < W; r++) {
        llmt_comm_destroy(c0[r]);
        llmt_comm_destroy(c1[r]);
    }
    tmpdir_remove(base);
    free(base);
    return check_exit("test_peer_ring");
}
