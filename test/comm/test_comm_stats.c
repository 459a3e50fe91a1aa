/* Communicator traffic (llmt_comm_get_stats): four in-process ranks run
 * every kind of operation once; each rank's calls, payload and bus bytes
 * must equal what the ring algorithm sends (nccl-tests' bus-bandwidth
 * factors), written out here per operation from its definition, not taken
 * from the library. Refused operations do not count; reset clears; a
 * struct from an older caller gets only the fields it knows. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"

#define W 4

typedef struct thr {
    llmt_comm *c;
    int rank;
    llmt_comm_stats st;
    llmt_status s;
} thr;

static void *rank_main(void *p)
{
    thr *t = p;
    llmt_comm *c = t->c;
    static float big[W][4096];
    float *b = big[t->rank], out[4096];
    uint16_t h[64] = {0};
    llmt_status s = LLMT_OK;
    if (s == LLMT_OK)
        s = llmt_comm_all_reduce(c, b, out, 1000, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL);
    if (s == LLMT_OK)
        s = llmt_comm_all_gather(c, b, out, 100, LLMT_DTYPE_FP32, NULL);
    if (s == LLMT_OK)
        s = llmt_comm_reduce_scatter(c, b, out, 50, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL);
    if (s == LLMT_OK)
        s = llmt_comm_all_to_all(c, b, out, 10, LLMT_DTYPE_FP32, NULL);
    if (s == LLMT_OK)
        s = llmt_comm_broadcast(c, h, 64, LLMT_DTYPE_BF16, 0, NULL);
    if (s == LLMT_OK && t->rank == 0)
        s = llmt_comm_send(c, b, 7, LLMT_DTYPE_FP32, 1, NULL);
    if (s == LLMT_OK && t->rank == 1)
        s = llmt_comm_recv(c, out, 7, LLMT_DTYPE_FP32, 0, NULL);
    if (s == LLMT_OK)
        s = llmt_comm_barrier(c);
    /* refused before it runs: not counted */
    if (s == LLMT_OK &&
        llmt_comm_all_reduce(c, b, out, 8, (llmt_dtype)999, LLMT_REDUCE_SUM, NULL) == LLMT_OK)
        s = LLMT_ERR_INTERNAL;
    t->st.struct_size = sizeof t->st;
    if (s == LLMT_OK)
        s = llmt_comm_get_stats(c, &t->st);
    t->s = s;
    return NULL;
}

int main(void)
{
    llmt_comm *comms[W];
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    o.timeout_ms = 60000;
    CHECK_STATUS(llmt_comm_create_inproc(NULL, W, &o, comms), LLMT_OK);
    thr t[W];
    pthread_t th[W];
    for (int r = 0; r < W; r++) {
        memset(&t[r], 0, sizeof t[r]);
        t[r].c = comms[r];
        t[r].rank = r;
        pthread_create(&th[r], NULL, rank_main, &t[r]);
    }
    for (int r = 0; r < W; r++)
        pthread_join(th[r], NULL);
    const double n = W;
    for (int r = 0; r < W; r++) {
        const llmt_comm_stats *st = &t[r].st;
        CHECK_STATUS(t[r].s, LLMT_OK);
        CHECK_EQ_INT(st->calls[LLMT_COMM_STAT_ALL_REDUCE], 1);
        CHECK_EQ_INT(st->payload_bytes[LLMT_COMM_STAT_ALL_REDUCE], 4000);
        CHECK(st->bus_bytes[LLMT_COMM_STAT_ALL_REDUCE] == 2 * (n - 1) / n * 4000); /* 6000 */
        CHECK_EQ_INT(st->payload_bytes[LLMT_COMM_STAT_ALL_GATHER], 400);
        CHECK(st->bus_bytes[LLMT_COMM_STAT_ALL_GATHER] ==
              (n - 1) / n * 1600); /* of the whole */
        CHECK_EQ_INT(st->payload_bytes[LLMT_COMM_STAT_REDUCE_SCATTER], 800);
        CHECK(st->bus_bytes[LLMT_COMM_STAT_REDUCE_SCATTER] == (n - 1) / n * 800);
        CHECK_EQ_INT(st->payload_bytes[LLMT_COMM_STAT_ALL_TO_ALL], 160);
        CHECK(st->bus_bytes[LLMT_COMM_STAT_ALL_TO_ALL] == (n - 1) / n * 160);
        CHECK_EQ_INT(st->calls[LLMT_COMM_STAT_BROADCAST], 1);
        CHECK(st->bus_bytes[LLMT_COMM_STAT_BROADCAST] == 128);
        CHECK_EQ_INT(st->calls[LLMT_COMM_STAT_SEND], r == 0);
        CHECK_EQ_INT(st->calls[LLMT_COMM_STAT_RECV], r == 1);
        CHECK(st->bus_bytes[LLMT_COMM_STAT_SEND] == (r == 0 ? 28 : 0));
        CHECK(st->bus_bytes[LLMT_COMM_STAT_RECV] == 0);
        CHECK_EQ_INT(st->calls[LLMT_COMM_STAT_BARRIER], 1);
        CHECK_EQ_INT(st->total_calls, 6 + (r <= 1));
        double sum = 6000 + 1200 + 600 + 120 + 128 + (r == 0 ? 28 : 0);
        CHECK(st->total_bus_bytes == sum);
        CHECK(st->total_seconds > 0 && st->seconds[LLMT_COMM_STAT_ALL_REDUCE] > 0);
    }
    /* an older caller's struct: only the fields inside its size */
    struct {
        size_t struct_size;
        uint64_t calls[LLMT_COMM_STAT_SLOTS];
    } old;
    memset(&old, 0xab, sizeof old);
    old.struct_size = sizeof old;
    CHECK_STATUS(llmt_comm_get_stats(comms[0], (llmt_comm_stats *)(void *)&old), LLMT_OK);
    CHECK_EQ_INT(old.struct_size, sizeof old);
    CHECK_EQ_INT(old.calls[LLMT_COMM_STAT_ALL_REDUCE], 1);
    llmt_comm_stats st;
    st.struct_size = 4;
    CHECK_STATUS(llmt_comm_get_stats(comms[0], &st), LLMT_ERR_STRUCT_SIZE);
    CHECK(strstr(llmt_comm_last_error(comms[0]), "struct_size") != NULL);
    CHECK_STATUS(llmt_comm_get_stats(comms[0], NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_comm_get_stats(NULL, &st), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_comm_reset_stats(comms[0]), LLMT_OK);
    st.struct_size = sizeof st;
    CHECK_STATUS(llmt_comm_get_stats(comms[0], &st), LLMT_OK);
    CHECK_EQ_INT(st.total_calls, 0);
    CHECK(st.total_bus_bytes == 0);
    for (int r = 0; r < W; r++)
        llmt_comm_destroy(comms[r]);
    return check_exit("test_comm_stats");
}
