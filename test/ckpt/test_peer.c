/* Peer tier over the in-process communicator: 4 ranks (threads), each with
 * its own root directory standing for a node-local disk. Every rank saves
 * its part of step 5 and replicates it to its partner; then
 *  - rank 2's disk is wiped: restore brings its part back byte for byte;
 *  - ranks 2 and 3 are wiped together: rank 3 is restored (from rank 0),
 *    rank 2 cannot be (its replica was on rank 3) and says so;
 *  - rank 1's replica (on rank 2) is damaged: restoring rank 1 fails with
 *    a checksum error instead of installing bad data.
 * A restored part must equal the original files byte for byte. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "ckpt_threads_fixture.h"
#include "ckpt_util.h"

enum { W = 4, N = 3000 };

typedef struct {
    CK_PHASE_FIELDS;
    int32_t restored;
    char err[512];
} rk;

/* Phase 0: step 5 saved and replicated to the partner; 1: restore. */
static llmt_status rank_phase(void *arg, llmt_ckpt *ck)
{
    rk *k = arg;
    if (k->phase == 0) {
        llmt_status st = save_block(ck, 5, 7, k->rank, W, N, 1);
        if (st == LLMT_OK)
            st = llmt_ckpt_peer_replicate(ck, k->comm, 5);
        return st;
    }
    k->restored = -1;
    return llmt_ckpt_peer_restore(ck, k->comm, 5, &k->restored);
}

static void run_all(rk *ks, int phase)
{
    ck_phases(ks, sizeof *ks, W, phase, 3, rank_phase, offsetof(rk, err), sizeof ks->err);
}

static int sh(const char *fmt, const char *a, const char *b)
{
    char cmd[9000];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    return system(cmd);
}

/* Rank r's restored part files equal the originals. */
static int same_as_orig(const char *orig, rk *ks, int r)
{
    char a[4200], b[4200];
    int ok = 1;
    for (int e = 0; e < 2; e++) {
        snprintf(a, sizeof a, "%s/rank-%05d.%s", orig, r, e ? "json" : "bin");
        snprintf(b, sizeof b, "%s/step-000000000005/rank-%05d.%s", ks[r].root, r,
                 e ? "json" : "bin");
        ok &= sh("cmp -s '%s' '%s'", a, b) == 0;
    }
    return ok;
}

int main(void)
{
    llmt_comm *comms[W];
    rk ks[W];
    char *base = ck_phases_begin(ks, sizeof *ks, W, comms, "peer", "node", 1);
    run_all(ks, 0);
    for (int r = 0; r < W; r++) {
        CHECK_STATUS(ks[r].st, LLMT_OK);
        if (ks[r].st)
            fprintf(stderr, "rank %d: %s\n", r, ks[r].err);
        char p[4300];
        struct stat st;
        snprintf(p, sizeof p, "%s/peer/step-000000000005/rank-%05d.bin", ks[r].root,
                 (r + W - 1) % W);
        CHECK(stat(p, &st) == 0); /* the partner's replica */
    }
    /* originals for comparison */
    char orig[4200];
    snprintf(orig, sizeof orig, "%s/orig", base);
    for (int r = 0; r < W; r++) {
        char d[4300];
        snprintf(d, sizeof d, "%s/step-000000000005", ks[r].root);
        mkdir(orig, 0755);
        CHECK(sh("cp '%s'/rank-* '%s'/", d, orig) == 0);
    }

    /* 1: rank 2's disk is gone */
    CHECK(sh("rm -rf '%s' %s", ks[2].root, "") == 0);
    run_all(ks, 1);
    for (int r = 0; r < W; r++) {
        CHECK_STATUS(ks[r].st, LLMT_OK);
        CHECK_EQ_INT(ks[r].restored, r == 2);
    }
    CHECK(same_as_orig(orig, ks, 2));

    /* 2: ranks 2 and 3 lost together */
    CHECK(sh("rm -rf '%s' '%s'", ks[2].root, ks[3].root) == 0);
    run_all(ks, 1);
    CHECK_STATUS(ks[2].st, LLMT_ERR_NOT_FOUND);
    CHECK(strstr(ks[2].err, "no replica") != NULL);
    CHECK_STATUS(ks[3].st, LLMT_OK);
    CHECK_EQ_INT(ks[3].restored, 1);
    CHECK(same_as_orig(orig, ks, 3));
    CHECK_STATUS(ks[0].st, LLMT_OK);
    CHECK_STATUS(ks[1].st, LLMT_OK);

    /* 3: a damaged replica is refused */
    char rep[4300];
    snprintf(rep, sizeof rep, "%s/peer/step-000000000005/rank-00001.bin", ks[2].root);
    /* rank 2 lost its replica dir in case 2; re-create it from the original */
    CHECK(sh("mkdir -p \"$(dirname '%s')\" && true %s", rep, "") == 0);
    char src[4300];
    snprintf(src, sizeof src, "%s/rank-00001.bin", orig);
    CHECK(sh("cp '%s' '%s'", src, rep) == 0);
    snprintf(src, sizeof src, "%s/rank-00001.json", orig);
    char repj[4300];
    snprintf(repj, sizeof repj, "%s/peer/step-000000000005/rank-00001.json", ks[2].root);
    CHECK(sh("cp '%s' '%s'", src, repj) == 0);
    CHECK(sh("printf 'X' | dd of='%s' bs=1 seek=5000 conv=notrunc 2>/dev/null %s", rep, "") ==
          0);
    char lost[4300];
    snprintf(lost, sizeof lost, "%s/step-000000000005", ks[1].root);
    CHECK(sh("rm -rf '%s' %s", lost, "") == 0);
    run_all(ks, 1);
    CHECK_STATUS(ks[1].st, LLMT_ERR_CHECKSUM);
    CHECK(strstr(ks[1].err, "checksum") != NULL);
    struct stat st;
    snprintf(lost, sizeof lost, "%s/step-000000000005/rank-00001.json", ks[1].root);
    CHECK(stat(lost, &st) != 0); /* nothing bad installed */

    ck_phases_end(comms, W, base);
    return check_exit("test_peer");
}
