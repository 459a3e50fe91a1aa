/* llmt_comm_all_reduce over the MPI backend vs a bare MPI_Allreduce on the
 * same ranks, side by side: for each size, alternating rounds of K calls of
 * each (a barrier before every round), per-call times from each round, the
 * median reported by rank 0 and the ratio ours/bare printed.
 *   mpirun -np 2 --oversubscribe bench_allreduce [--json F] [--quick]
 * Our call adds a per-op bounded sequence check (the hang detector), the
 * flight recorder and polling with MPI_Test against the deadline. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "llmtrain.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int prov;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    bench_ctx b;
    if (bench_init(&b, "comm-allreduce", argc, argv)) return 2;
    if (rank != 0) b.json_path = NULL;
    MPI_Comm peer;
    MPI_Comm_dup(MPI_COMM_WORLD, &peer);
    llmt_comm *c = NULL;
    MPI_Comm world = MPI_COMM_WORLD;
    if (llmt_comm_create_from_mpi(NULL, &world, NULL, &c) != LLMT_OK) {
        fprintf(stderr, "create_from_mpi failed\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const size_t sizes[] = {4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
    int rounds = b.quick ? 5 : 15;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t bytes = sizes[si], n = bytes / 4;
        if (b.quick && bytes > (16 << 20)) break;
        int K = bytes <= (64 << 10) ? 200 : bytes <= (4 << 20) ? 20 : 4;
        float *x = malloc(bytes), *y = malloc(bytes);
        for (size_t i = 0; i < n; i++) x[i] = (float)(i % 7);
        double *tb = malloc(rounds * sizeof *tb), *to = malloc(rounds * sizeof *to);
        for (int w = 0; w < 2; w++) { /* warm-up */
            MPI_Allreduce(x, y, (int)n, MPI_FLOAT, MPI_SUM, peer);
            llmt_comm_all_reduce(c, x, y, n, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL);
        }
        for (int r = 0; r < rounds; r++) {
            for (int which = 0; which < 2; which++) {
                int ours = (which + r) % 2; /* alternate who goes first */
                MPI_Barrier(peer);
                double t0 = bench_now();
                for (int k = 0; k < K; k++) {
                    if (ours)
                        llmt_comm_all_reduce(c, x, y, n, LLMT_DTYPE_FP32,
                                             LLMT_REDUCE_SUM, NULL);
                    else
                        MPI_Allreduce(x, y, (int)n, MPI_FLOAT, MPI_SUM, peer);
                }
                double t = (bench_now() - t0) / K;
                MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, peer);
                (ours ? to : tb)[r] = t;
            }
        }
        if (y[1] != (float)(1 * np)) fprintf(stderr, "wrong result %g\n", y[1]);
        if (rank == 0) {
            char name[64];
            snprintf(name, sizeof name, "mpi_allreduce_%zuKiB", bytes >> 10);
            bench_record(&b, name, tb, rounds, (double)bytes, "bytes");
            snprintf(name, sizeof name, "llmt_allreduce_%zuKiB", bytes >> 10);
            bench_record(&b, name, to, rounds, (double)bytes, "bytes");
            qsort(tb, rounds, sizeof *tb, cmp_d);
            qsort(to, rounds, sizeof *to, cmp_d);
            printf("allreduce %6zu KiB np %d: bare %9.1f us, ours %9.1f us, "
                   "ours/bare %.3f\n", bytes >> 10, np, tb[rounds / 2] * 1e6,
                   to[rounds / 2] * 1e6, to[rounds / 2] / tb[rounds / 2]);
            fflush(stdout);
        }
        free(x); free(y); free(tb); free(to);
    }
    llmt_comm_destroy(c);
    MPI_Comm_free(&peer);
    int rc = rank == 0 ? bench_finish(&b) : 0;
    MPI_Finalize();
    return rc;
}
