/* llmt_ckpt_cancel of a save of a step whose earlier attempt left this
 * rank's part written but uncommitted (world_size 2: the other rank never
 * saved it). The new attempt is cancelled at once, usually before the
 * writer thread has started it. Whatever the cancel returns, the earlier
 * attempt's part must not commit in the new attempt's name:
 *  - LLMT_OK: nothing of rank 0 is left in the step, and rank 1's part
 *    alone does not commit it;
 *  - LLMT_ERR_STATE ("part ... is written"): the part is the new
 *    attempt's, so the step rank 1 then commits holds its data.
 * Before the fix, a cancel that reached the job before the writer started
 * it found the earlier attempt's part manifest, took it for this attempt's
 * (published: not withdrawn), let the job end LLMT_OK without writing a
 * byte, and rank 1 then committed the step with rank 0's old data. */
#include "check.h"
#include "ckpt_util.h"

#define ROUNDS 40

/* Rank r's block of step's committed "w" is gval(seed, .): read through a
 * fresh handle. */
static int block_is(const char *root, int64_t step, int r, int seed, int64_t n)
{
    float *x = committed_w(root, step, 2 * n, 1);
    int ok = x != NULL;
    for (int64_t i = 0; ok && i < n; i++)
        ok = x[r * n + i] == gval(seed, r * n + i);
    free(x);
    return ok;
}

/* Rank 0's description of step with its block gval(seed, .), saved async
 * and cancelled at once. */
static llmt_status save_and_cancel(llmt_ckpt *ck, int64_t step, int seed, int64_t n)
{
    llmt_status s = save_block_nowait(ck, step, seed, 0, 2, n);
    return s == LLMT_OK ? llmt_ckpt_cancel(ck) : LLMT_ERR_INTERNAL;
}

int main(void)
{
    char *root = tmpdir_make(NULL, "cancel-stale");
    llmt_ckpt *r0 = NULL, *r1 = NULL;
    CHECK_STATUS(rank_ckpt(0, 2, root, 1000, &r0), LLMT_OK);
    CHECK_STATUS(rank_ckpt(1, 2, root, 1000, &r1), LLMT_OK);
    if (!root || !r0 || !r1)
        return check_exit("test_cancel_stale");
    const int64_t n = 1024;
    int cancelled = 0, written = 0;
    for (int i = 0; i < ROUNDS; i++) {
        int64_t step = 100 + i;
        int old = 1000 + i, now = 2000 + i;
        /* the earlier attempt: rank 0's part written, rank 1's never */
        CHECK_STATUS(save_block(r0, step, old, 0, 2, n, 0), LLMT_OK);
        CHECK(step_has(root, step, "rank-00000.json"));
        llmt_status c = save_and_cancel(r0, step, now, n);
        int64_t last = -1;
        llmt_status ss = llmt_ckpt_save_status(r0, &last);
        if (c == LLMT_OK) {
            cancelled++;
            /* nothing of rank 0 can commit step */
            CHECK(!step_has(root, step, "rank-00000.json"));
            CHECK_STATUS(save_block(r1, step, now, 1, 2, n, 0), LLMT_OK);
            CHECK(!step_has(root, step, "manifest.json"));
            /* the save before the cancelled one: the earlier attempt */
            CHECK_STATUS(ss, LLMT_OK);
            CHECK_EQ_INT(last, step);
        } else {
            written++;
            CHECK_STATUS(c, LLMT_ERR_STATE);
            int said = strstr(llmt_ckpt_last_error(r0), "is written") != NULL;
            CHECK(said);
            if (!said)
                fprintf(stderr, "round %d: %s\n", i, llmt_ckpt_last_error(r0));
            /* the part there is this attempt's: the step commits with it */
            CHECK_STATUS(ss, LLMT_OK);
            CHECK_EQ_INT(last, step);
            CHECK_STATUS(save_block(r1, step, now, 1, 2, n, 0), LLMT_OK);
            CHECK(step_has(root, step, "manifest.json"));
            int mine = block_is(root, step, 0, now, n);
            CHECK(mine);
            if (!mine)
                fprintf(stderr,
                        "round %d: step %lld committed with rank 0's part of the earlier "
                        "attempt (seed %d), not the one the save reported (seed %d)\n",
                        i, (long long)step, old, now);
            CHECK(block_is(root, step, 1, now, n));
        }
    }
    fprintf(stderr, "%d rounds: %d cancelled, %d found the part written\n", ROUNDS, cancelled,
            written);
    llmt_ckpt_destroy(r0);
    llmt_ckpt_destroy(r1);
    tmpdir_remove(root);
    free(root);
    return check_exit("test_cancel_stale");
}
