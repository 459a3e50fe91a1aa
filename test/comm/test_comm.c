/* In-process communicators: the collective matrix (coll_check.h) for world
 * sizes 1..8, ranks as threads; argument checks; abort; recorder dump. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "coll_check.h"
#include "llmtrain.h"

typedef struct thr {
    llmt_comm *c;
    cc_state st;
    int big;
} thr;

static void *rank_main(void *p)
{
    thr *t = p;
    cc_run_all(&t->st, t->c, t->big);
    return NULL;
}

static void matrix(int world, int big)
{
    llmt_comm *comms[8];
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    o.timeout_ms = 60000;
    CHECK_STATUS(llmt_comm_create_inproc(NULL, world, &o, comms), LLMT_OK);
    thr t[8];
    pthread_t th[8];
    for (int r = 0; r < world; r++) {
        memset(&t[r], 0, sizeof t[r]);
        t[r].c = comms[r];
        t[r].st.rank = r;
        t[r].st.size = world;
        t[r].big = big;
        pthread_create(&th[r], NULL, rank_main, &t[r]);
    }
    int checks = 0, fails = 0;
    for (int r = 0; r < world; r++) {
        pthread_join(th[r], NULL);
        checks += t[r].st.checks;
        fails += t[r].st.fails;
        llmt_comm_destroy(comms[r]);
    }
    fprintf(stderr, "world %d: %d checks, %d failed\n", world, checks, fails);
    CHECK(checks > 100);
    CHECK_EQ_INT(fails, 0);
}

static void *mismatch_main(void *p)
{
    llmt_comm *c = p;
    int32_t r;
    llmt_comm_rank(c, &r);
    float buf[8] = {0};
    /* rank 1 passes a different count: every rank must refuse */
    llmt_status s = llmt_comm_all_reduce(c, buf, buf, r == 1 ? 7 : 8,
                                         LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL);
    return (void *)(intptr_t)s;
}

static void api_checks(void)
{
    llmt_comm *c[3];
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    CHECK_EQ_INT(o.recorder_size, 1024);
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 0, &o, c), LLMT_ERR_INVALID_ARGUMENT);
    o.backend = 9;
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 2, &o, c), LLMT_ERR_INVALID_ARGUMENT);
    o.backend = 0;
    o.timeout_ms = 5000;
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 3, &o, c), LLMT_OK);
    float x = 1;
    CHECK_STATUS(llmt_comm_all_reduce(c[0], &x, &x, 1, LLMT_DTYPE_FP8_E4M3,
                                      LLMT_REDUCE_SUM, NULL),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_comm_last_error(c[0]), "fp8") != NULL);
    CHECK_STATUS(llmt_comm_all_reduce(c[0], &x, &x, 1, LLMT_DTYPE_FP32,
                                      (llmt_reduce_op)7, NULL),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_comm_all_reduce(c[0], NULL, &x, 1, LLMT_DTYPE_FP32,
                                      LLMT_REDUCE_SUM, NULL),
                 LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_comm_all_reduce(c[0], &x, &x, 1, LLMT_DTYPE_FP32,
                                      LLMT_REDUCE_SUM, (void *)&x),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_comm_send(c[0], &x, 1, LLMT_DTYPE_FP32, 0, NULL),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_comm_broadcast(c[0], &x, 1, LLMT_DTYPE_FP32, 3, NULL),
                 LLMT_ERR_INVALID_ARGUMENT);
    uint64_t seq = 0;
    CHECK_STATUS(llmt_comm_next_seq(c[0], &seq), LLMT_OK);
    CHECK_EQ_INT(seq, 1); /* refused calls take no sequence number */
    llmt_comm_backend be;
    llmt_comm_backend_of(c[1], &be);
    CHECK_EQ_INT(be, LLMT_COMM_INPROC);

    /* a count mismatch fails on every rank, naming both counts */
    pthread_t th[3];
    for (int r = 0; r < 3; r++) pthread_create(&th[r], NULL, mismatch_main, c[r]);
    for (int r = 0; r < 3; r++) {
        void *res;
        pthread_join(th[r], &res);
        CHECK_EQ_INT((intptr_t)res, LLMT_ERR_INVALID_ARGUMENT);
    }
    CHECK(strstr(llmt_comm_last_error(c[0]), "count") != NULL);

    /* recorder: the failed collective is there as "error" */
    size_t need = 0;
    CHECK_STATUS(llmt_comm_recorder_dump(c[0], NULL, 0, &need),
                 LLMT_ERR_BUFFER_TOO_SMALL);
    CHECK(need > 10);
    char *buf = malloc(need);
    CHECK_STATUS(llmt_comm_recorder_dump(c[0], buf, need, &need), LLMT_OK);
    CHECK(strstr(buf, "seq=1 op=all_reduce dtype=fp32 count=8") != NULL);
    CHECK(strstr(buf, "state=error") != NULL);
    free(buf);

    /* abort: later calls fail fast with ABORTED, on every rank of the group */
    CHECK_STATUS(llmt_comm_abort(c[2]), LLMT_OK);
    CHECK_STATUS(llmt_comm_barrier(c[2]), LLMT_ERR_ABORTED);
    CHECK_STATUS(llmt_comm_barrier(c[0]), LLMT_ERR_ABORTED);
    for (int r = 0; r < 3; r++) llmt_comm_destroy(c[r]);
    llmt_comm_destroy(NULL);

    /* environment discovery */
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    llmt_comm_env env;
    CHECK_STATUS(llmt_comm_env_discover(&env, sizeof env), LLMT_OK);
    CHECK_EQ_INT(env.rank, 3);
    CHECK_EQ_INT(env.world_size, 8);
    CHECK_EQ_INT(env.local_rank, 1);
    CHECK(!strcmp(env.launcher, "openmpi"));
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("MASTER_ADDR", "node7", 1);
    setenv("MASTER_PORT", "29500", 1);
    CHECK_STATUS(llmt_comm_env_discover(&env, sizeof env), LLMT_OK);
    CHECK(!strcmp(env.launcher, "torchrun"));
    CHECK_EQ_INT(env.rank, 2);
    CHECK_EQ_INT(env.world_size, 4);
    CHECK(!strcmp(env.master_addr, "node7"));
    CHECK_EQ_INT(env.master_port, 29500);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "6", 1);
    CHECK_STATUS(llmt_comm_env_discover(&env, sizeof env), LLMT_OK);
    CHECK(!strcmp(env.launcher, "slurm"));
    CHECK_EQ_INT(env.rank, 5);
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    CHECK_STATUS(llmt_comm_env_discover(&env, sizeof env), LLMT_OK);
    CHECK(!strcmp(env.launcher, "none"));
    CHECK_EQ_INT(env.world_size, 1);
    /* from env with no launcher: a single-rank group */
    llmt_comm *one = NULL;
    CHECK_STATUS(llmt_comm_create_from_env(NULL, NULL, &one), LLMT_OK);
    if (one) {
        int32_t n = 0;
        llmt_comm_size(one, &n);
        CHECK_EQ_INT(n, 1);
        x = 5;
        float y = 0;
        CHECK_STATUS(llmt_comm_all_reduce(one, &x, &y, 1, LLMT_DTYPE_FP32,
                                          LLMT_REDUCE_AVG, NULL), LLMT_OK);
        CHECK(y == 5.0f);
        CHECK_STATUS(llmt_comm_finalize(one), LLMT_OK);
        llmt_comm_destroy(one);
    }
}

/* Groups of a plan (tp 2 x pp 2 x dp 2 on 8 ranks): each rank's group
 * along every dimension has the members llmt_plan_group lists, in order. */
static llmt_plan *g_plan;

static void *plan_main(void *p)
{
    llmt_comm *c = p;
    int32_t me;
    llmt_comm_rank(c, &me);
    intptr_t bad = 0;
    const llmt_plan_dim dims[3] = {LLMT_DIM_TP, LLMT_DIM_PP, LLMT_DIM_DP};
    for (int d = 0; d < 3; d++) {
        llmt_comm *g = NULL;
        if (llmt_comm_create_plan_group(c, g_plan, dims[d], &g) != LLMT_OK || !g) {
            fprintf(stderr, "rank %d dim %d: %s\n", me, (int)dims[d],
                    llmt_comm_last_error(c));
            bad++;
            continue;
        }
        int32_t want[8];
        size_t n = 0;
        llmt_plan_group(g_plan, dims[d], me, want, 8, &n, NULL);
        int32_t gs = 0, got[8];
        llmt_comm_size(g, &gs);
        if ((size_t)gs != n) bad++;
        else if (llmt_comm_all_gather(g, &me, got, 1, LLMT_DTYPE_INT32, NULL) != LLMT_OK) bad++;
        else
            for (size_t i = 0; i < n; i++)
                if (got[i] != want[i]) bad++;
        llmt_comm_destroy(g);
    }
    return (void *)bad;
}

static void plan_groups(void)
{
    const char *js =
        "{\"name\": \"p\", \"model\": {\"arch\": \"gpt2\", \"layers\": 4, "
        "\"hidden\": 256, \"heads\": 4, \"vocab\": 4096, \"seq_len\": 128}, "
        "\"parallelism\": {\"tp\": 2, \"pp\": 2, \"dp\": 2}, "
        "\"batch\": {\"micro\": 2, \"grad_accum\": 2}, \"hardware\": {\"gpu\": \"h100\"}}";
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_spec *spec = NULL;
    llmt_status s = llmt_spec_parse_json(ctx, js, strlen(js), &spec);
    if (s == LLMT_OK) s = llmt_plan_create(ctx, spec, 8, &g_plan);
    if (s != LLMT_OK) fprintf(stderr, "plan: %s\n", llmt_context_last_error(ctx));
    CHECK_STATUS(s, LLMT_OK);
    if (s == LLMT_OK) {
        llmt_comm *c[8];
        CHECK_STATUS(llmt_comm_create_inproc(ctx, 8, NULL, c), LLMT_OK);
        pthread_t th[8];
        for (int r = 0; r < 8; r++) pthread_create(&th[r], NULL, plan_main, c[r]);
        intptr_t bad = 0;
        for (int r = 0; r < 8; r++) {
            void *res;
            pthread_join(th[r], &res);
            bad += (intptr_t)res;
        }
        CHECK_EQ_INT(bad, 0);
        for (int r = 0; r < 8; r++) llmt_comm_destroy(c[r]);
        /* a plan of another size is refused */
        llmt_comm *one = NULL, *g = NULL;
        llmt_comm_create_inproc(ctx, 1, NULL, &one);
        CHECK_STATUS(llmt_comm_create_plan_group(one, g_plan, LLMT_DIM_TP, &g),
                     LLMT_ERR_INVALID_ARGUMENT);
        llmt_comm_destroy(one);
    }
    llmt_plan_destroy(g_plan);
    llmt_spec_destroy(spec);
    llmt_context_destroy(ctx);
}

int main(int argc, char **argv)
{
    int big = argc > 1 && !strcmp(argv[1], "--big");
    api_checks();
    plan_groups();
    for (int w = 1; w <= 8; w++) matrix(w, big || w == 3);
    return check_exit("test_comm");
}
