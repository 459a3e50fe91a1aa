/* Counts whose byte size wraps size_t (or passes the largest buffer a call
 * may name, SIZE_MAX/2 bytes) are refused by every collective and p2p call
 * with LLMT_ERR_INVALID_ARGUMENT naming the call and the count: before the
 * check the in-process backend allocated the wrapped (small) size and
 * reduced count elements into it (a heap/stack overflow), and all_gather,
 * broadcast, all_to_all and send returned LLMT_OK. Only rank 0 of the
 * 4-rank communicator calls: a count let through waits for the others and
 * times out (a failure, not a hang). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"

/* the call was refused as an argument error whose message names `op` and `num` */
static void refused(llmt_comm *c, llmt_status s, const char *op, const char *num)
{
    CHECK_STATUS(s, LLMT_ERR_INVALID_ARGUMENT);
    const char *m = llmt_comm_last_error(c);
    if (!strstr(m, op) || !strstr(m, num)) {
        fprintf(stderr, "message lacks '%s' or '%s': %s\n", op, num, m);
        CHECK(0);
    }
}

static void one_rank(void)
{
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    o.timeout_ms = 2000;
    llmt_comm *c = NULL;
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 1, &o, &c), LLMT_OK);
    if (!c)
        return;
    float a[4] = {1, 2, 3, 4}, b[4];
    size_t wrap = SIZE_MAX / 4 + 2; /* x 4 bytes = 4 */
    char num[32];
    snprintf(num, sizeof num, "%zu", wrap);
    refused(c, llmt_comm_all_reduce(c, a, b, wrap, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL),
            "all_reduce", num);
    refused(c, llmt_comm_reduce_scatter(c, a, b, wrap, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL),
            "reduce_scatter", num);
    refused(c, llmt_comm_all_gather(c, a, b, wrap, LLMT_DTYPE_FP32, NULL), "all_gather", num);
    refused(c, llmt_comm_broadcast(c, a, wrap, LLMT_DTYPE_FP32, 0, NULL), "broadcast", num);
    refused(c, llmt_comm_all_to_all(c, a, b, wrap, LLMT_DTYPE_FP32, NULL), "all_to_all", num);
    llmt_comm_work *w = NULL;
    refused(c, llmt_comm_iall_reduce(c, a, b, wrap, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, &w),
            "all_reduce", num);
    refused(c, llmt_comm_ireduce_scatter(c, a, b, wrap, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, &w),
            "reduce_scatter", num);
    refused(c, llmt_comm_iall_gather(c, a, b, wrap, LLMT_DTYPE_FP32, &w), "all_gather", num);
    CHECK(w == NULL);
    /* no wrap, but past SIZE_MAX/2 bytes: int64 x (SIZE_MAX/16 + 1) */
    size_t big = SIZE_MAX / 16 + 1;
    snprintf(num, sizeof num, "%zu", big);
    refused(c, llmt_comm_all_reduce(c, a, b, big, LLMT_DTYPE_INT64, LLMT_REDUCE_SUM, NULL),
            "all_reduce", num);
    /* all_to_allv: a count that wraps, a displacement + count that wraps */
    size_t cnt[1] = {wrap}, dsp[1] = {0}, one[1] = {4}, far[1] = {SIZE_MAX - 1};
    snprintf(num, sizeof num, "%zu", wrap);
    refused(c, llmt_comm_all_to_allv(c, a, cnt, dsp, b, one, dsp, LLMT_DTYPE_FP32, NULL),
            "send_counts[0]", num);
    snprintf(num, sizeof num, "%zu", far[0]);
    refused(c, llmt_comm_all_to_allv(c, a, one, dsp, b, one, far, LLMT_DTYPE_FP32, NULL),
            "recv_displs[0]", num);
    /* the communicator still works: nothing was aborted */
    CHECK_STATUS(llmt_comm_all_reduce(c, a, b, 4, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL),
                 LLMT_OK);
    CHECK(b[3] == 4.0f);
    size_t four[1] = {4};
    CHECK_STATUS(llmt_comm_all_to_allv(c, a, four, dsp, b, four, dsp, LLMT_DTYPE_FP32, NULL),
                 LLMT_OK);
    llmt_comm_destroy(c);
}

/* Where a buffer holds a block per rank (4 ranks), count x 4 bytes fits
 * but x 4 blocks does not; the p2p calls check their count too. */
static void four_ranks(void)
{
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    o.timeout_ms = 2000;
    llmt_comm *c[4] = {0};
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 4, &o, c), LLMT_OK);
    if (!c[0])
        return;
    float a[4] = {0}, b[16];
    size_t per = SIZE_MAX / 16; /* x 4 bytes < SIZE_MAX/2; x 4 blocks > */
    char num[32];
    snprintf(num, sizeof num, "%zu", per);
    refused(c[0], llmt_comm_all_gather(c[0], a, b, per, LLMT_DTYPE_FP32, NULL), "all_gather",
            num);
    refused(c[0],
            llmt_comm_reduce_scatter(c[0], a, b, per, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL),
            "reduce_scatter", num);
    refused(c[0], llmt_comm_all_to_all(c[0], a, b, per, LLMT_DTYPE_FP32, NULL), "all_to_all",
            num);
    size_t wrap = SIZE_MAX / 4 + 2;
    snprintf(num, sizeof num, "%zu", wrap);
    refused(c[0], llmt_comm_send(c[0], a, wrap, LLMT_DTYPE_FP32, 1, NULL), "send", num);
    refused(c[0], llmt_comm_recv(c[0], b, wrap, LLMT_DTYPE_FP32, 1, NULL), "recv", num);
    /* all_to_allv: each count fits, their sum wraps */
    size_t cnt[4] = {SIZE_MAX / 8, SIZE_MAX / 8, SIZE_MAX / 8, SIZE_MAX / 8};
    size_t dsp[4] = {0}, z[4] = {0};
    snprintf(num, sizeof num, "%zu", cnt[0]);
    refused(c[0], llmt_comm_all_to_allv(c[0], a, cnt, dsp, b, z, dsp, LLMT_DTYPE_FP32, NULL),
            "send_counts[", num);
    for (int r = 0; r < 4; r++)
        llmt_comm_destroy(c[r]);
}

/* $LLMT_COMM_TIMEOUT_MS overrides the default timeout: a value the
 * library would pass over (not a number, <= 0) or past its bound is
 * refused by name, not replaced by 300000 unseen; an explicit timeout_ms
 * does not read it. */
static void env_timeout(void)
{
    static const char *const bad[] = {"abc",           "-5", "0", "12x", "99999999999999999999",
                                      "40000000000000"};
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("LLMT_COMM_TIMEOUT_MS", bad[i], 1);
        llmt_comm *c = NULL;
        CHECK_STATUS(llmt_comm_create_inproc(NULL, 1, NULL, &c), LLMT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(llmt_last_error(), "LLMT_COMM_TIMEOUT_MS") != NULL);
        CHECK_STATUS(llmt_comm_create_inproc(NULL, 1, &o, &c), LLMT_ERR_INVALID_ARGUMENT);
        llmt_comm_opts e = o;
        e.timeout_ms = 1000; /* the option wins: the variable is not read */
        CHECK_STATUS(llmt_comm_create_inproc(NULL, 1, &e, &c), LLMT_OK);
        llmt_comm_destroy(c);
    }
    setenv("LLMT_COMM_TIMEOUT_MS", "5000", 1);
    llmt_comm *c = NULL;
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 1, NULL, &c), LLMT_OK);
    llmt_comm_destroy(c);
    unsetenv("LLMT_COMM_TIMEOUT_MS");
}

int main(void)
{
    one_rank();
    four_ranks();
    env_timeout();
    return check_exit("comm-count");
}
