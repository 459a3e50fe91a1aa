/* Resharding and the peer tier with one process per rank under mpirun
 * (llmt_comm from the launcher's environment, MPI backend). Run with 8
 * ranks: the state is saved under tp2.pp2.dp2 zero-1 by all 8 processes,
 * then loaded under tp4.pp1.dp2 (zero 1 and 0), by ranks 0-3 as tp1.dp4,
 * and by rank 0 alone; then saved under tp4.pp1.dp2 zero-1 and loaded under
 * tp2.pp2.dp2 zero-1. Then each rank replicates its part to its partner
 * over MPI, rank 5's part is deleted, and the collective restore brings it
 * back byte for byte.
 * usage: mpirun -np 8 test_reshard_mpi DIR  (DIR on a filesystem all ranks
 * share; exit 77 if not launched by mpirun with 8 ranks) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "reshard_model.h"

static llmt_comm *comm;
static int rank, size;

/* every rank takes part: ranks outside the layout only wait */
static int step_all(const layout *y, const char *root, int64_t step, int load)
{
    int world = y->tp * y->pp * y->dp;
    int ok = 1;
    if (rank < world) {
        job j = {y, root, rank, world, step, 0, load};
        run_rank(&j);
        ok = j.ok;
        if (!ok)
            fprintf(stderr, "rank %d: layout %s %s step %lld failed\n", rank, y->tag,
                    load ? "load" : "save", (long long)step);
    }
    int32_t mine = ok, all = 0;
    llmt_comm_all_reduce(comm, &mine, &all, 1, LLMT_DTYPE_INT32, LLMT_REDUCE_MIN, NULL);
    return all == 1;
}

static int file_eq(const char *a, const char *b)
{
    FILE *f = fopen(a, "rb"), *g = fopen(b, "rb");
    int eq = f && g;
    while (eq) {
        int x = fgetc(f), y = fgetc(g);
        if (x != y)
            eq = 0;
        if (x == EOF || y == EOF)
            break;
    }
    if (f)
        fclose(f);
    if (g)
        fclose(g);
    return eq;
}

int main(int argc, char **argv)
{
    llmt_comm_env env;
    memset(&env, 0, sizeof env);
    llmt_comm_env_discover(&env, sizeof env);
    if (argc < 2 || env.world_size != 8 || !strcmp(env.launcher, "none")) {
        printf("needs mpirun -np 8 and a directory: skip\n");
        return 77;
    }
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    o.timeout_ms = 120000;
    if (llmt_comm_create_from_env(NULL, &o, &comm) != LLMT_OK) {
        printf("no MPI communicator in this build: skip\n");
        return 77;
    }
    int32_t r = 0, w = 0;
    llmt_comm_rank(comm, &r);
    llmt_comm_size(comm, &w);
    rank = r;
    size = w;
    build_model();
    char root[4096];
    snprintf(root, sizeof root, "%s/root", argv[1]);
    static const layout tp2pp2dp2z1 = {2, 2, 2, 1, "tp2.pp2.dp2.zero1"};
    static const layout tp4pp1dp2z1 = {4, 1, 2, 1, "tp4.pp1.dp2.zero1"};
    static const layout tp4pp1dp2 = {4, 1, 2, 0, "tp4.pp1.dp2"};
    static const layout tp1dp4 = {1, 1, 4, 0, "tp1.dp4"};
    static const layout one = {1, 1, 1, 0, "one rank"};
    CHECK(step_all(&tp2pp2dp2z1, root, 10, 0));
    CHECK(step_all(&tp4pp1dp2z1, root, 10, 1));
    CHECK(step_all(&tp4pp1dp2, root, 10, 1));
    CHECK(step_all(&tp1dp4, root, 10, 1));
    CHECK(step_all(&one, root, 10, 1));
    CHECK(step_all(&tp4pp1dp2z1, root, 20, 0));
    CHECK(step_all(&tp2pp2dp2z1, root, 20, 1));
    CHECK(step_all(&one, root, 20, 1));

    /* peer tier over MPI: replicas of step 20, then rank 5 loses its part */
    llmt_ckpt_opts co;
    llmt_ckpt_opts_init(&co, sizeof co);
    co.rank = rank;
    co.world_size = size;
    co.keep_last = 0;
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(NULL, root, &co, &ck), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_peer_replicate(ck, comm, 20), LLMT_OK);
    char part[4300], keep[4300];
    snprintf(part, sizeof part, "%s/step-000000000020/rank-%05d.bin", root, rank);
    snprintf(keep, sizeof keep, "%s/kept-%05d.bin", argv[1], rank);
    if (rank == 5) {
        CHECK(rename(part, keep) == 0);
        char pj[4300];
        snprintf(pj, sizeof pj, "%s/step-000000000020/rank-%05d.json", root, rank);
        CHECK(remove(pj) == 0);
    }
    llmt_comm_barrier(comm);
    int32_t restored = -1;
    CHECK_STATUS(llmt_ckpt_peer_restore(ck, comm, 20, &restored), LLMT_OK);
    CHECK_EQ_INT(restored, rank == 5);
    if (rank == 5)
        CHECK(file_eq(part, keep));
    llmt_comm_barrier(comm);
    /* the restored checkpoint still loads (manifest.json was never touched) */
    llmt_ckpt_destroy(ck);
    CHECK(step_all(&tp2pp2dp2z1, root, 20, 1));
    int failed = check_exit("test_reshard_mpi");
    int32_t f = failed, any = 0;
    llmt_comm_all_reduce(comm, &f, &any, 1, LLMT_DTYPE_INT32, LLMT_REDUCE_MAX, NULL);
    llmt_comm_destroy(comm);
    return any ? 1 : 0;
}
