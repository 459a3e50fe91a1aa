/* The frame of the tests given the test corpus that run jobs in a
 * scratch directory of their own (test_fault_kill_sig.c,
 * test_lr_resume.c, test_job_corrupt.c): the corpus taken from argv, the
 * directory made, and at the end removed unless a check failed (left to
 * look at). Header only, like check.h. */
#ifndef LLMT_TEST_CORPUS_TMP_H
#define LLMT_TEST_CORPUS_TMP_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

/* argv[1] into corpus (cn bytes) and a fresh /tmp/llmt-TAG-XXXXXX into
 * tmp (tn bytes): 0, or main's exit status where that failed (2: no
 * corpus given, the usage of test said; 1: no directory). */
static inline int corpus_tmp_open(int argc, char **argv, const char *test, const char *tag,
                                  char *corpus, size_t cn, char *tmp, size_t tn)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", test);
        return 2;
    }
    snprintf(corpus, cn, "%s", argv[1]);
    snprintf(tmp, tn, "/tmp/llmt-%s-XXXXXX", tag);
    return mkdtemp(tmp) ? 0 : 1;
}

/* The end of main: tmp removed when every check passed;
 * check_exit(name). */
static inline int corpus_tmp_close(const char *tmp, const char *name)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (check_failures == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_exit(name);
}

#endif
