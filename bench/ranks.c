/* Ranks as threads for the parallel benchmarks: the same contract as the
 * tests' rank_fixture_run (test/train/rank_fixture.h), so a benchmark
 * fills its ranks' arguments and reads their results, and the threads and
 * the in-process communicator are made and released in one place. */
#include <pthread.h>
#include <string.h>

#include "harness.h"
#include "llmtrain.h"

int bench_ranks(void *args, size_t stride, int n, int comm, size_t comm_off,
                void *(*fn)(void *))
{
    llmt_comm *c[BENCH_MAX_RANKS] = {NULL};
    pthread_t th[BENCH_MAX_RANKS];
    if (n < 1 || n > BENCH_MAX_RANKS)
        return 1;
    if (comm && llmt_comm_create_inproc(NULL, n, NULL, c) != LLMT_OK)
        return 1;
    int started = 0;
    for (int r = 0; r < n; r++) {
        char *a = (char *)args + (size_t)r * stride;
        if (comm)
            memcpy(a + comm_off, &c[r], sizeof c[r]);
        if (pthread_create(&th[r], NULL, fn, a) != 0)
            break;
        started++;
    }
    for (int r = 0; r < started; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++)
        llmt_comm_destroy(c[r]);
    return started == n ? 0 : 1;
}
