/* The NCCL twin of a host group (lib/job/nccl_attach.c,
 * llmt__job_device_group) on a machine without a GPU: 2 ranks as threads
 * on an in-process communicator. Rank 0's unique id (or its failure)
 * travels to every rank over the host group; its broadcast named a byte
 * type that the collectives refuse, so every multi-process CUDA job
 * failed there with "comm: broadcast: dtype uint8 (9) not supported"
 * before its NCCL group existed. Now the exchange succeeds, and every
 * rank fails (no GPU here) with the same reason, naming the group: rank
 * 0's unique id failure, or NCCL's creation on the missing GPU.
 *
 * Skips (77) where a GPU is visible: the gpu suite's gpu-job-dp-* make
 * such groups for real. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "job/job.h"

#define WORLD 2

typedef struct rank_arg {
    llmt_job *j;
    llmt_comm *host, *dev;
    llmt_status st;
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    a->st = llmt__job_device_group(a->j, a->host, "data parallel", &a->dev);
    return NULL;
}

int main(void)
{
    int32_t ngpu = 0;
    if (llmt_cuda_device_count(&ngpu) == LLMT_OK && ngpu > 0) {
        printf("SKIP: a GPU is visible (the gpu suite makes NCCL groups there)\n");
        return 77;
    }
    static const char *spec =
        "{\"name\": \"nccl\", \"model\": {\"arch\": \"gpt2\", \"layers\": 1, \"hidden\": 32,"
        " \"heads\": 2, \"vocab\": 320, \"seq_len\": 16},"
        " \"batch\": {\"micro\": 2, \"grad_accum\": 1}, \"train\": {\"steps\": 4},"
        " \"data\": {\"train\": \"x\", \"tokenizer\": {\"kind\": \"byte\"}},"
        " \"hardware\": {\"gpu\": \"cpu\"}}";
    llmt_context *pctx = NULL;
    llmt_context_create(NULL, &pctx);
    llmt_spec *sp = NULL;
    CHECK_STATUS(llmt_spec_parse_json(pctx, spec, strlen(spec), &sp), LLMT_OK);
    if (!sp)
        return check_exit("job-nccl-attach");
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.timeout_ms = 20000;
    llmt_comm *comms[WORLD];
    CHECK_STATUS(llmt_comm_create_inproc(NULL, WORLD, &co, comms), LLMT_OK);
    rank_arg args[WORLD];
    pthread_t th[WORLD];
    llmt_context *ctx[WORLD];
    for (int r = 0; r < WORLD; r++) {
        llmt_context_create(NULL, &ctx[r]);
        llmt_job *j = calloc(1, sizeof *j);
        j->ctx = ctx[r];
        j->spec = sp;
        j->comm = comms[r];
        j->world = WORLD;
        j->rank = r;
        args[r] = (rank_arg){j, comms[r], NULL, LLMT_OK};
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < WORLD; r++) {
        const char *m = args[r].j->err.msg;
        /* no GPU: no group, and the reason is NCCL's, not the exchange's */
        CHECK(args[r].st != LLMT_OK);
        CHECK(args[r].dev == NULL);
        CHECK(strstr(m, "the NCCL data parallel group") != NULL);
        CHECK(strstr(m, "broadcast") == NULL && strstr(m, "uint8") == NULL);
        if (args[r].st == LLMT_OK || !strstr(m, "NCCL data parallel group") ||
            strstr(m, "broadcast"))
            fprintf(stderr, "rank %d: %s: %s\n", r, llmt_status_string(args[r].st), m);
        llmt_comm_destroy(args[r].dev);
        free(args[r].j);
        llmt_context_destroy(ctx[r]);
    }
    /* every rank names the same reason (rank 0's outcome travelled) */
    CHECK_EQ_INT(args[0].st == args[1].st, 1);
    for (int r = 0; r < WORLD; r++)
        llmt_comm_destroy(comms[r]);
    llmt_spec_destroy(sp);
    llmt_context_destroy(pctx);
    return check_exit("job-nccl-attach");
}
