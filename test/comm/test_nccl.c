/* NCCL backend on one GPU (suite 'gpu'; SKIP without NCCL or a GPU):
 * every collective on a single-rank communicator made from a unique id,
 * against host references, plus the deadline of a bootstrap that can never
 * finish (a 2-rank communicator whose other rank never comes): it must
 * return LLMT_ERR_TIMEOUT within the configured time. Also times a 1-rank
 * all-reduce (bus bandwidth of the local copy) for doc/comm.md. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "llmtrain.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(void)
{
    if (!(llmt_build_features() & LLMT_FEATURE_NCCL)) {
        fprintf(stderr, "no NCCL in this build: skip\n");
        return CHECK_SKIP;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        fprintf(stderr, "no GPU: skip\n");
        return CHECK_SKIP;
    }
    char id[LLMT_COMM_UNIQUE_ID_BYTES];
    CHECK_STATUS(llmt_comm_unique_id(id, sizeof id), LLMT_OK);
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    o.timeout_ms = 60000;
    llmt_comm *c = NULL;
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    CHECK_STATUS(llmt_comm_create_from_unique_id(ctx, id, sizeof id, 0, 1, &o, &c),
                 LLMT_OK);
    if (!c) {
        fprintf(stderr, "%s\n", llmt_context_last_error(ctx));
        return check_exit("test_nccl");
    }
    llmt_comm_backend be;
    llmt_comm_backend_of(c, &be);
    CHECK_EQ_INT(be, LLMT_COMM_NCCL);
    enum { N = 1000003 };
    float *h = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) h[i] = (float)(i % 13) - 6.0f;
    float *d1, *d2;
    cudaMalloc((void **)&d1, N * sizeof(float));
    cudaMalloc((void **)&d2, N * sizeof(float));
    cudaMemcpy(d1, h, N * sizeof(float), cudaMemcpyHostToDevice);
    const llmt_reduce_op ops[4] = {LLMT_REDUCE_SUM, LLMT_REDUCE_AVG,
                                   LLMT_REDUCE_MAX, LLMT_REDUCE_MIN};
    for (int k = 0; k < 4; k++) {
        cudaMemset(d2, 0, N * sizeof(float));
        CHECK_STATUS(llmt_comm_all_reduce(c, d1, d2, N, LLMT_DTYPE_FP32, ops[k], NULL),
                     LLMT_OK);
        cudaMemcpy(g, d2, N * sizeof(float), cudaMemcpyDeviceToHost);
        CHECK(memcmp(g, h, N * sizeof(float)) == 0);
    }
    cudaMemset(d2, 0, N * sizeof(float));
    CHECK_STATUS(llmt_comm_all_gather(c, d1, d2, N, LLMT_DTYPE_FP32, NULL), LLMT_OK);
    cudaMemcpy(g, d2, N * sizeof(float), cudaMemcpyDeviceToHost);
    CHECK(memcmp(g, h, N * sizeof(float)) == 0);
    cudaMemset(d2, 0, N * sizeof(float));
    CHECK_STATUS(llmt_comm_reduce_scatter(c, d1, d2, N, LLMT_DTYPE_FP32,
                                          LLMT_REDUCE_SUM, NULL), LLMT_OK);
    cudaMemcpy(g, d2, N * sizeof(float), cudaMemcpyDeviceToHost);
    CHECK(memcmp(g, h, N * sizeof(float)) == 0);
    cudaMemset(d2, 0, N * sizeof(float));
    CHECK_STATUS(llmt_comm_all_to_all(c, d1, d2, N, LLMT_DTYPE_FP32, NULL), LLMT_OK);
    cudaMemcpy(g, d2, N * sizeof(float), cudaMemcpyDeviceToHost);
    CHECK(memcmp(g, h, N * sizeof(float)) == 0);
    CHECK_STATUS(llmt_comm_broadcast(c, d1, N, LLMT_DTYPE_FP32, 0, NULL), LLMT_OK);
    CHECK_STATUS(llmt_comm_barrier(c), LLMT_OK);
    /* bf16 and int64 pass through too */
    CHECK_STATUS(llmt_comm_all_reduce(c, d1, d2, N / 2, LLMT_DTYPE_BF16,
                                      LLMT_REDUCE_SUM, NULL), LLMT_OK);
    CHECK_STATUS(llmt_comm_all_reduce(c, d1, d2, N / 2, LLMT_DTYPE_INT64,
                                      LLMT_REDUCE_MAX, NULL), LLMT_OK);
    /* on a caller's stream */
    cudaStream_t st;
    cudaStreamCreate(&st);
    CHECK_STATUS(llmt_comm_all_reduce(c, d1, d2, N, LLMT_DTYPE_FP32,
                                      LLMT_REDUCE_SUM, (void *)st), LLMT_OK);
    cudaStreamDestroy(st);
    /* split into a 1-rank sub-group */
    llmt_comm *sub = NULL;
    CHECK_STATUS(llmt_comm_split(c, 0, 0, &sub), LLMT_OK);
    CHECK(sub != NULL);
    if (!sub) fprintf(stderr, "split: %s\n", llmt_comm_last_error(c));
    if (sub) {
        CHECK_STATUS(llmt_comm_all_reduce(sub, d1, d2, 1000, LLMT_DTYPE_FP32,
                                          LLMT_REDUCE_SUM, NULL), LLMT_OK);
        llmt_comm_destroy(sub);
    }
    /* 1-rank all-reduce bandwidth (64 MiB) */
    size_t big = 16u << 20;
    float *b1, *b2;
    if (cudaMalloc((void **)&b1, big * 4) == cudaSuccess &&
        cudaMalloc((void **)&b2, big * 4) == cudaSuccess) {
        CHECK_STATUS(llmt_comm_all_reduce(c, b1, b2, big, LLMT_DTYPE_FP32,
                                          LLMT_REDUCE_SUM, NULL), LLMT_OK);
        double t0 = now();
        int it = 20;
        for (int i = 0; i < it; i++)
            CHECK_STATUS(llmt_comm_all_reduce(c, b1, b2, big, LLMT_DTYPE_FP32,
                                              LLMT_REDUCE_SUM, NULL), LLMT_OK);
        double dt = (now() - t0) / it;
        printf("nccl 1-rank all_reduce 64 MiB: %.1f us, algbw %.1f GB/s (busbw 0 "
               "for 1 rank: a local copy)\n", dt * 1e6, big * 4 / dt / 1e9);
        cudaFree(b1);
        cudaFree(b2);
    }
    size_t need = 0;
    llmt_comm_recorder_dump(c, NULL, 0, &need);
    CHECK(need > 100);
    CHECK_STATUS(llmt_comm_finalize(c), LLMT_OK);
    llmt_comm_destroy(c);

    /* under mpirun: NCCL bootstrapped over MPI from the environment */
    llmt_comm_env env;
    llmt_comm_env_discover(&env, sizeof env);
    if (strcmp(env.launcher, "none") != 0) {
        llmt_comm_opts mo;
        llmt_comm_opts_init(&mo, sizeof mo);
        mo.backend = LLMT_COMM_NCCL;
        mo.timeout_ms = 60000;
        llmt_comm *m = NULL;
        CHECK_STATUS(llmt_comm_create_from_env(ctx, &mo, &m), LLMT_OK);
        if (m) {
            llmt_comm_backend_of(m, &be);
            CHECK_EQ_INT(be, LLMT_COMM_NCCL);
            int32_t sz = 0;
            llmt_comm_size(m, &sz);
            CHECK_EQ_INT(sz, env.world_size);
            CHECK_STATUS(llmt_comm_all_reduce(m, d1, d2, 1000, LLMT_DTYPE_FP32,
                                              LLMT_REDUCE_SUM, NULL), LLMT_OK);
            CHECK_STATUS(llmt_comm_finalize(m), LLMT_OK);
            llmt_comm_destroy(m);
            fprintf(stderr, "NCCL over MPI (%s, %d ranks): ok\n", env.launcher,
                    (int)env.world_size);
        } else {
            fprintf(stderr, "NCCL over MPI: %s\n", llmt_context_last_error(ctx));
        }
    }

    /* a bootstrap whose second rank never comes: bounded by the timeout */
    CHECK_STATUS(llmt_comm_unique_id(id, sizeof id), LLMT_OK);
    o.timeout_ms = 3000;
    llmt_comm *c2 = NULL;
    double t0 = now();
    llmt_status s = llmt_comm_create_from_unique_id(ctx, id, sizeof id, 0, 2, &o, &c2);
    double dt = now() - t0;
    fprintf(stderr, "2-rank init without a peer: %s after %.2f s: %s\n",
            llmt_status_string(s), dt, llmt_context_last_error(ctx));
    CHECK_EQ_INT(s, LLMT_ERR_TIMEOUT);
    CHECK(dt < 3.0 + 5.0);
    CHECK(c2 == NULL);
    cudaFree(d1);
    cudaFree(d2);
    free(h);
    free(g);
    llmt_context_destroy(ctx);
    return check_exit("test_nccl");
}
