/* The ranks' shared open of a root's newest usable step
 * (lib/ckpt/open_shared.c): 4 ranks as threads, one shared root, steps 5
 * and 7 saved by all. Checked:
 *  - every rank opens step 7 and checks one data file of it, not four
 *    (rank k checks file k: every file once over the ranks);
 *  - rank 2's file of step 7 truncated: only rank 2 checks it, and every
 *    rank skips to step 5 all the same; the others' warning names rank 2
 *    and its reason (the file);
 *  - what is read after the open is the saved data, and reading all of
 *    "w" twice opens each other rank's data file once (the handle keeps
 *    them open), not once per chunk read;
 *  - rank 1's file of step 5 gone too: every rank fails with
 *    LLMT_ERR_NOT_FOUND, naming both steps. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ckpt/ckpt_internal.h"
#include "ckpt_threads_fixture.h"
#include "ckpt_util.h"

enum { W = 4, N = 2500 };

typedef struct {
    CK_PHASE_FIELDS;
    int64_t step;
    uint64_t checked, opened;
    int data_ok;
    char err[2048];
} rk;

/* Phase 0: steps 5 and 7 saved; 1: the shared open and the reads. */
static llmt_status rank_phase(void *arg, llmt_ckpt *ck)
{
    rk *k = arg;
    llmt_status st;
    if (k->phase == 0) {
        st = save_block(ck, 5, 5, k->rank, W, N, 0);
        if (st == LLMT_OK)
            st = save_block(ck, 7, 7, k->rank, W, N, 0);
    } else {
        k->step = -1;
        st = llmt__ckpt_open_latest_shared(ck, k->comm, INT64_MAX, NULL, &k->step);
        k->checked = ck->files_checked;
        k->data_ok = 0;
        if (st == LLMT_OK) { /* this rank's block of w, as saved */
            float *x = malloc(N * sizeof *x);
            int64_t n = N, off = (int64_t)k->rank * N;
            llmt_tensor v;
            llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, &n, x, LLMT_DEVICE_CPU, 0);
            int ok = x && llmt_ckpt_read(ck, "w", &v, &off) == LLMT_OK;
            for (int64_t i = 0; ok && i < N; i++)
                ok = x[i] == gval((int)k->step, off + i);
            /* all of w (every rank's chunk), twice: each data file is
             * opened once while the checkpoint is open, not per read */
            float *all = malloc((size_t)W * N * sizeof *all);
            int64_t wn = (int64_t)W * N, zero = 0;
            llmt_tensor va;
            llmt_tensor_init(&va, sizeof va, LLMT_DTYPE_FP32, 1, &wn, all, LLMT_DEVICE_CPU, 0);
            uint64_t before = ck->files_opened;
            for (int rep = 0; ok && rep < 2; rep++)
                ok = all && llmt_ckpt_read(ck, "w", &va, &zero) == LLMT_OK;
            for (int64_t i = 0; ok && i < wn; i++)
                ok = all[i] == gval((int)k->step, i);
            k->opened = ck->files_opened - before;
            k->data_ok = ok;
            free(all);
            free(x);
        }
    }
    return st;
}

static void run_all(rk *ks, int phase)
{
    ck_phases(ks, sizeof *ks, W, phase, 0, rank_phase, offsetof(rk, err), sizeof ks->err);
}

int main(void)
{
    llmt_comm *comms[W];
    rk ks[W];
    char *base = ck_phases_begin(ks, sizeof *ks, W, comms, "openshared", "root", 0);
    run_all(ks, 0);
    for (int r = 0; r < W; r++)
        CHECK_STATUS(ks[r].st, LLMT_OK);

    /* 1: the newest step, one file checked per rank */
    run_all(ks, 1);
    for (int r = 0; r < W; r++) {
        CHECK_STATUS(ks[r].st, LLMT_OK);
        CHECK_EQ_INT(ks[r].step, 7);
        CHECK_EQ_INT(ks[r].checked, 1);
        CHECK(ks[r].data_ok);
        /* its own file was open already (its block): the other three */
        CHECK_EQ_INT(ks[r].opened, W - 1);
    }

    /* 2: rank 2's part of step 7 truncated: all skip to step 5 */
    char p[4300];
    snprintf(p, sizeof p, "%s/step-000000000007/rank-00002.bin", ks[0].root);
    CHECK(truncate(p, 8192) == 0);
    run_all(ks, 1);
    for (int r = 0; r < W; r++) {
        CHECK_STATUS(ks[r].st, LLMT_OK);
        CHECK_EQ_INT(ks[r].step, 5);
        CHECK_EQ_INT(ks[r].checked, 2); /* one of step 7, one of step 5 */
        CHECK(ks[r].data_ok);
    }

    /* 3: rank 1's part of step 5 gone as well: nothing usable, all fail */
    snprintf(p, sizeof p, "%s/step-000000000005/rank-00001.bin", ks[0].root);
    CHECK(unlink(p) == 0);
    run_all(ks, 1);
    for (int r = 0; r < W; r++) {
        CHECK_STATUS(ks[r].st, LLMT_ERR_NOT_FOUND);
        CHECK(strstr(ks[r].err, "step 7: ") && strstr(ks[r].err, "step 5: "));
        /* the rank that checked a file names it; the others name that
         * rank and its reason */
        CHECK(strstr(ks[r].err, r == 2 ? "step 7: ckpt: " : "step 7: rank 2: ckpt: "));
        CHECK(strstr(ks[r].err, r == 1 ? "step 5: ckpt: " : "step 5: rank 1: ckpt: "));
        CHECK(strstr(ks[r].err, "rank-00002.bin is 8192 bytes"));
        CHECK(strstr(ks[r].err, "rank-00001.bin: No such file"));
        if (ks[r].st != LLMT_ERR_NOT_FOUND || !strstr(ks[r].err, "step 5"))
            fprintf(stderr, "rank %d: %s\n", r, ks[r].err);
    }

    ck_phases_end(comms, W, base);
    return check_exit("ckpt-open-shared");
}
