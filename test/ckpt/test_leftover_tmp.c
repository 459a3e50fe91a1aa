/* Temporary files a crashed writer left (.NAME.tmp.PID.TID) in committed
 * step directories: llmt_ckpt_quarantine_newer (what a resume calls while
 * no rank saves) removes those of the steps it keeps whose writer is gone,
 * and nothing else: not a file of this process or of a live process, not
 * another name, not a directory, nothing in the uncommitted step it moves
 * aside, nothing when it refuses. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "ckpt_util.h"

static char *root;

static void touch(int64_t step, const char *name)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/step-%012lld/%s", root, (long long)step, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("partial", f);
        fclose(f);
    }
}

static int has(int64_t step, const char *name)
{
    return step_has(root, step, name);
}

/* A process id that is no process now: a child that has exited. */
static long dead_pid(void)
{
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

int main(void)
{
    root = tmpdir_make(NULL, "leftover");
    if (!root)
        return 1;
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(rank_ckpt(0, 1, root, 0, &ck), LLMT_OK);
    CHECK_STATUS(save_block(ck, 1, 1, 0, 1, 1000, 0), LLMT_OK);
    CHECK_STATUS(save_block(ck, 2, 2, 0, 1, 1000, 0), LLMT_OK);
    long dead = dead_pid();
    pid_t live = fork();
    if (live == 0) { /* a live process: its files may still be renamed */
        pause();
        _exit(0);
    }
    char n[8][128];
    snprintf(n[0], sizeof n[0], ".rank-00000.bin.tmp.%ld.7f12ab", dead);
    snprintf(n[1], sizeof n[1], ".manifest.json.tmp.%ld.1", dead);
    snprintf(n[2], sizeof n[2], ".rank-00000.json.old.tmp.%ld.2", dead);
    snprintf(n[3], sizeof n[3], ".rank-00000.bin.tmp.%ld.1", (long)getpid()); /* this process */
    snprintf(n[4], sizeof n[4], ".rank-00000.json.tmp.%ld.1", (long)live);
    snprintf(n[5], sizeof n[5], ".notes.tmp.%ld.1", dead);           /* not a step's file */
    snprintf(n[6], sizeof n[6], ".rank-00000.bin.tmp.%ldx.1", dead); /* not the pattern */
    snprintf(n[7], sizeof n[7], "rank-00000.bin.tmp.%ld.1", dead);   /* not hidden */
    for (int64_t s = 1; s <= 2; s++)
        for (int i = 0; i < 8; i++)
            touch(s, n[i]);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/step-000000000002/.rank-00001.bin.tmp.%ld.3", root, dead);
    CHECK(mkdir(dir, 0755) == 0); /* a directory of that name: not removed */
    /* an interrupted save of step 3 (no manifest) with a leftover of its own */
    snprintf(dir, sizeof dir, "%s/step-000000000003", root);
    CHECK(mkdir(dir, 0755) == 0);
    touch(3, n[0]);

    /* a refusal (step 2 is valid and newer than 1) touches nothing */
    size_t moved = 99;
    CHECK_STATUS(llmt_ckpt_quarantine_newer(ck, 1, &moved), LLMT_ERR_STATE);
    CHECK_EQ_INT(moved, 0);
    for (int i = 0; i < 8; i++)
        CHECK(has(1, n[i]) && has(2, n[i]));

    CHECK_STATUS(llmt_ckpt_quarantine_newer(ck, 2, &moved), LLMT_OK);
    CHECK_EQ_INT(moved, 1); /* step 3, moved whole with its leftover */
    for (int64_t s = 1; s <= 2; s++) {
        for (int i = 0; i < 3; i++) /* the gone writers' files */
            CHECK(!has(s, n[i]));
        for (int i = 3; i < 8; i++)
            CHECK(has(s, n[i]));
        CHECK(has(s, "manifest.json") && has(s, "rank-00000.bin") && has(s, "rank-00000.json"));
    }
    char d3[160];
    snprintf(d3, sizeof d3, ".rank-00001.bin.tmp.%ld.3", dead);
    CHECK(has(2, d3));
    CHECK(!has(3, n[0]));
    /* the steps kept are intact */
    for (int64_t s = 1; s <= 2; s++) {
        float *w = committed_w(root, s, 1000, 1);
        CHECK(w != NULL);
        for (int64_t i = 0; w && i < 1000; i++)
            if (w[i] != gval((int)s, i)) {
                CHECK(w[i] == gval((int)s, i));
                break;
            }
        free(w);
    }
    kill(live, SIGKILL);
    waitpid(live, NULL, 0);
    llmt_ckpt_destroy(ck);
    tmpdir_remove(root);
    free(root);
    return check_exit("test_leftover_tmp");
}
