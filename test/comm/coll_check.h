/* The collective correctness matrix, shared by the in-process test (ranks
 * are threads) and the MPI test (ranks are processes): every op x dtype x
 * reduce op x size against a serial reference computed locally from the
 * same deterministic inputs. Inputs are small integers, so every sum over
 * <= 8 ranks is exact in every dtype and the results must match bitwise. */
#ifndef LLMT_TEST_COLL_CHECK_H
#define LLMT_TEST_COLL_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmtrain.h"

static const llmt_dtype cc_dtypes[] = {LLMT_DTYPE_FP32, LLMT_DTYPE_BF16,
                                       LLMT_DTYPE_FP16, LLMT_DTYPE_INT32,
                                       LLMT_DTYPE_INT64};
static const llmt_reduce_op cc_ops[] = {LLMT_REDUCE_SUM, LLMT_REDUCE_AVG,
                                        LLMT_REDUCE_MAX, LLMT_REDUCE_MIN};
/* 0, 1, primes, a power of two, non-multiples of any world size, large. */
static const size_t cc_sizes[] = {0, 1, 2, 3, 7, 13, 64, 251, 1021, 4099};
static const size_t cc_big = 262147; /* prime, ~1 MiB of fp32 */

/* Per-thread failure log (the harness of check.h is per process). */
typedef struct cc_state {
    int rank, size;
    int checks, fails;
    char where[160];
} cc_state;

#define CC_FAIL(st, ...)                                                   \
    do {                                                                   \
        (st)->fails++;                                                     \
        if ((st)->fails <= 20) {                                           \
            fprintf(stderr, "rank %d: %s: ", (st)->rank, (st)->where);    \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

static int cc_val(int r, size_t i, int salt)
{
    return (int)(((unsigned)r * 7u + (unsigned)i * 13u + (unsigned)salt * 5u) % 17u) - 8;
}

/* Value as dtype bits. Small integers are exact in every dtype:
 * bf16/fp16 of k are computed by hand (sign, exponent, mantissa). */
static uint16_t cc_f16bits(double v, int bf)
{
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    if (bf) return (uint16_t)(u >> 16); /* exact values only */
    if (f == 0.0f) return (uint16_t)((u >> 16) & 0x8000u);
    uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    uint32_t m = (u >> 13) & 0x3ffu;
    return (uint16_t)(s | (uint16_t)(e << 10) | (uint16_t)m);
}

static void cc_store(llmt_dtype dt, void *buf, size_t i, double v)
{
    switch (dt) {
    case LLMT_DTYPE_FP32: ((float *)buf)[i] = (float)v; break;
    case LLMT_DTYPE_BF16: ((uint16_t *)buf)[i] = cc_f16bits(v, 1); break;
    case LLMT_DTYPE_FP16: ((uint16_t *)buf)[i] = cc_f16bits(v, 0); break;
    case LLMT_DTYPE_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case LLMT_DTYPE_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: break;
    }
}

/* Reference of a reduction over the ranks' values at element i. For AVG of
 * floats the exact sum is divided in fp32, then rounded to the dtype —
 * checked to 1 ulp of the dtype by the caller (see cc_cmp). */
static double cc_ref(llmt_dtype dt, llmt_reduce_op op, int n, size_t i,
                     int salt)
{
    long long s = 0, mx = -1000, mn = 1000;
    for (int r = 0; r < n; r++) {
        int v = cc_val(r, i, salt);
        s += v;
        if (v > mx) mx = v;
        if (v < mn) mn = v;
    }
    switch (op) {
    case LLMT_REDUCE_SUM: return (double)s;
    case LLMT_REDUCE_MAX: return (double)mx;
    case LLMT_REDUCE_MIN: return (double)mn;
    default:
        if (dt == LLMT_DTYPE_INT32 || dt == LLMT_DTYPE_INT64)
            return (double)(s / n); /* truncation toward zero */
        return (double)((float)s / (float)n);
    }
}

static double cc_load(llmt_dtype dt, const void *buf, size_t i)
{
    switch (dt) {
    case LLMT_DTYPE_FP32: return ((const float *)buf)[i];
    case LLMT_DTYPE_BF16: {
        uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case LLMT_DTYPE_FP16: {
        uint16_t h = ((const uint16_t *)buf)[i];
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double v = e == 0 ? m * (1.0 / 16777216.0)
                          : (1.0 + m / 1024.0) * ((double)(1 << e) / 32768.0);
        return (h & 0x8000) ? -v : v;
    }
    case LLMT_DTYPE_INT32: return ((const int32_t *)buf)[i];
    case LLMT_DTYPE_INT64: return (double)((const int64_t *)buf)[i];
    default: return 0;
    }
}

/* Exact, except a rounded AVG: within half an ulp of the dtype. */
static int cc_cmp(llmt_dtype dt, llmt_reduce_op op, double got, double want)
{
    if (got == want) return 1;
    if (op != LLMT_REDUCE_AVG) return 0;
    double rel = dt == LLMT_DTYPE_BF16 ? 1.0 / 256 : dt == LLMT_DTYPE_FP16
                                                         ? 1.0 / 2048
                                                         : 1e-7;
    if (dt == LLMT_DTYPE_INT32 || dt == LLMT_DTYPE_INT64) return 0;
    double d = got - want;
    if (d < 0) d = -d;
    return d <= rel * (want < 0 ? -want : want) + 1e-30;
}

static void *cc_alloc(size_t n, llmt_dtype dt)
{
    size_t b = (n ? n : 1) * llmt_dtype_size(dt);
    void *p = malloc(b);
    if (p) memset(p, 0xa5, b); /* garbage, to see what a call does not write */
    return p;
}

static void cc_status(cc_state *st, llmt_comm *c, llmt_status s)
{
    st->checks++;
    if (s != LLMT_OK)
        CC_FAIL(st, "status %d (%s): %s", (int)s, llmt_status_string(s),
                llmt_comm_last_error(c));
}

static void cc_check_buf(cc_state *st, llmt_dtype dt, llmt_reduce_op op,
                         const void *got, size_t n, double (*want)(size_t, void *),
                         void *u)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double g = cc_load(dt, got, i), w = want(i, u);
        if (!cc_cmp(dt, op, g, w)) {
            if (bad++ < 3) CC_FAIL(st, "element %zu: got %.9g, want %.9g", i, g, w);
        }
    }
    st->checks++;
}

typedef struct cc_ctx {
    llmt_dtype dt;
    llmt_reduce_op op;
    int n, rank, salt;
    size_t count;
    const size_t *rc, *rd; /* all_to_allv: recv counts/displs */
} cc_ctx;

static double w_reduce(size_t i, void *u)
{
    cc_ctx *x = u;
    return cc_ref(x->dt, x->op, x->n, i, x->salt);
}
static double w_rs(size_t i, void *u)
{
    cc_ctx *x = u;
    return cc_ref(x->dt, x->op, x->n, (size_t)x->rank * x->count + i, x->salt);
}
static double w_gather(size_t i, void *u)
{
    cc_ctx *x = u;
    return cc_val((int)(i / x->count), i % x->count, x->salt);
}
static double w_a2a(size_t i, void *u)
{
    cc_ctx *x = u;
    size_t r = i / x->count, k = i % x->count;
    /* rank r's send block `rank` element k */
    return cc_val((int)r, (size_t)x->rank * x->count + k, x->salt);
}
static double w_bcast(size_t i, void *u)
{
    cc_ctx *x = u;
    return cc_val(x->salt % x->n, i, x->salt);
}

/* all_to_allv layout: rank r sends (r + 2j + salt) % 5 elements to rank j. */
static size_t cc_vcount(int r, int j, int salt) { return (size_t)((r + 2 * j + salt) % 5); }

static void cc_one(cc_state *st, llmt_comm *c, llmt_dtype dt, size_t n,
                   int salt)
{
    int R = st->size, me = st->rank;
    size_t es = llmt_dtype_size(dt);
    cc_ctx x = {dt, LLMT_REDUCE_SUM, R, me, salt, n, NULL, NULL};
    void *send = cc_alloc(n * (size_t)R, dt), *recv = cc_alloc(n * (size_t)R, dt);
    if (!send || !recv) {
        CC_FAIL(st, "no memory");
        free(send);
        free(recv);
        return;
    }
    /* all_reduce: every op, out of place and in place */
    for (size_t k = 0; k < sizeof cc_ops / sizeof cc_ops[0]; k++) {
        x.op = cc_ops[k];
        for (int inplace = 0; inplace < 2; inplace++) {
            snprintf(st->where, sizeof st->where, "all_reduce %s op %d n %zu %s",
                     llmt_dtype_name(dt), (int)x.op, n, inplace ? "in place" : "");
            for (size_t i = 0; i < n; i++) cc_store(dt, send, i, cc_val(me, i, salt));
            void *out = inplace ? send : recv;
            cc_status(st, c, llmt_comm_all_reduce(c, send, out, n, dt, x.op, NULL));
            cc_check_buf(st, dt, x.op, out, n, w_reduce, &x);
        }
        /* reduce_scatter: send holds R blocks of n */
        for (int inplace = 0; inplace < 2; inplace++) {
            snprintf(st->where, sizeof st->where, "reduce_scatter %s op %d n %zu %s",
                     llmt_dtype_name(dt), (int)x.op, n, inplace ? "in place" : "");
            for (size_t i = 0; i < n * (size_t)R; i++)
                cc_store(dt, send, i, cc_val(me, i, salt));
            void *out = inplace ? (char *)send + (size_t)me * n * es : recv;
            cc_status(st, c, llmt_comm_reduce_scatter(c, send, out, n, dt, x.op, NULL));
            cc_check_buf(st, dt, x.op, out, n, w_rs, &x);
        }
    }
    x.op = LLMT_REDUCE_SUM;
    /* all_gather, out of place and in place */
    for (int inplace = 0; inplace < 2; inplace++) {
        snprintf(st->where, sizeof st->where, "all_gather %s n %zu %s",
                 llmt_dtype_name(dt), n, inplace ? "in place" : "");
        void *src = send;
        if (inplace) src = (char *)recv + (size_t)me * n * es;
        for (size_t i = 0; i < n; i++) cc_store(dt, src, i, cc_val(me, i, salt));
        cc_status(st, c, llmt_comm_all_gather(c, src, recv, n, dt, NULL));
        cc_check_buf(st, dt, x.op, recv, n * (size_t)R, w_gather, &x);
    }
    /* all_to_all */
    snprintf(st->where, sizeof st->where, "all_to_all %s n %zu", llmt_dtype_name(dt), n);
    for (size_t i = 0; i < n * (size_t)R; i++) cc_store(dt, send, i, cc_val(me, i, salt));
    cc_status(st, c, llmt_comm_all_to_all(c, send, recv, n, dt, NULL));
    cc_check_buf(st, dt, x.op, recv, n * (size_t)R, w_a2a, &x);
    /* broadcast from a varying root */
    snprintf(st->where, sizeof st->where, "broadcast %s n %zu root %d",
             llmt_dtype_name(dt), n, salt % R);
    for (size_t i = 0; i < n; i++)
        cc_store(dt, recv, i, me == salt % R ? cc_val(me, i, salt) : -99);
    cc_status(st, c, llmt_comm_broadcast(c, recv, n, dt, salt % R, NULL));
    cc_check_buf(st, dt, x.op, recv, n, w_bcast, &x);
    free(send);
    free(recv);
}

static void cc_a2av(cc_state *st, llmt_comm *c, llmt_dtype dt, int salt)
{
    int R = st->size, me = st->rank;
    size_t *sc = calloc((size_t)R, sizeof *sc), *sd = calloc((size_t)R, sizeof *sd);
    size_t *rc = calloc((size_t)R, sizeof *rc), *rd = calloc((size_t)R, sizeof *rd);
    size_t stot = 0, rtot = 0;
    for (int j = 0; j < R; j++) {
        sc[j] = cc_vcount(me, j, salt);
        sd[j] = stot + 1; /* a gap before each block */
        stot += sc[j] + 1;
        rc[j] = cc_vcount(j, me, salt);
        rd[j] = rtot;
        rtot += rc[j] + 2;
    }
    void *send = cc_alloc(stot + 1, dt), *recv = cc_alloc(rtot + 1, dt);
    for (int j = 0; j < R; j++)
        for (size_t k = 0; k < sc[j]; k++)
            cc_store(dt, send, sd[j] + k, me * 100 + j * 10 + (int)k % 10);
    snprintf(st->where, sizeof st->where, "all_to_allv %s salt %d",
             llmt_dtype_name(dt), salt);
    /* values up to 8*100+...: fp16 holds integers to 2048, bf16 to 256 */
    if (dt == LLMT_DTYPE_BF16) {
        for (int j = 0; j < R; j++)
            for (size_t k = 0; k < sc[j]; k++)
                cc_store(dt, send, sd[j] + k, me * 16 + j * 2 + (int)k % 2);
    }
    cc_status(st, c, llmt_comm_all_to_allv(c, send, sc, sd, recv, rc, rd, dt, NULL));
    int bad = 0;
    for (int r = 0; r < R; r++)
        for (size_t k = 0; k < rc[r]; k++) {
            double want = dt == LLMT_DTYPE_BF16 ? r * 16 + me * 2 + (int)k % 2
                                                : r * 100 + me * 10 + (int)k % 10;
            double got = cc_load(dt, recv, rd[r] + k);
            if (got != want && bad++ < 3)
                CC_FAIL(st, "from rank %d element %zu: got %g want %g", r, k, got, want);
        }
    st->checks++;
    free(send); free(recv); free(sc); free(sd); free(rc); free(rd);
}

static void cc_p2p(cc_state *st, llmt_comm *c, size_t n)
{
    int R = st->size, me = st->rank;
    if (R < 2) return;
    int to = (me + 1) % R, from = (me + R - 1) % R;
    float *a = malloc((n ? n : 1) * sizeof *a), *b = malloc((n ? n : 1) * sizeof *b);
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(me * 1000 + (int)(i % 997));
        b[i] = -1;
    }
    snprintf(st->where, sizeof st->where, "send/recv ring n %zu", n);
    if (me % 2 == 0) {
        cc_status(st, c, llmt_comm_send(c, a, n, LLMT_DTYPE_FP32, to, NULL));
        cc_status(st, c, llmt_comm_recv(c, b, n, LLMT_DTYPE_FP32, from, NULL));
    } else {
        cc_status(st, c, llmt_comm_recv(c, b, n, LLMT_DTYPE_FP32, from, NULL));
        cc_status(st, c, llmt_comm_send(c, a, n, LLMT_DTYPE_FP32, to, NULL));
    }
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (float)(from * 1000 + (int)(i % 997)) && bad++ < 3)
            CC_FAIL(st, "element %zu: %g", i, (double)b[i]);
    st->checks++;
    free(a);
    free(b);
}

/* Sub-groups: split by parity (reversed order by key), and a listed group. */
static void cc_groups(cc_state *st, llmt_comm *c)
{
    int R = st->size, me = st->rank;
    llmt_comm *sub = NULL;
    snprintf(st->where, sizeof st->where, "split parity");
    cc_status(st, c, llmt_comm_split(c, me % 2, -me, &sub));
    st->checks++;
    if (!sub) {
        CC_FAIL(st, "no sub-communicator");
        return;
    }
    int32_t sr = -1, ss = -1;
    llmt_comm_rank(sub, &sr);
    llmt_comm_size(sub, &ss);
    int want_size = (R - me % 2 + 1) / 2;
    /* members of my parity, ordered by key = -rank: highest rank first */
    int want_rank = 0;
    for (int r = me + 2; r < R; r += 2) want_rank++;
    if (ss != want_size || sr != want_rank)
        CC_FAIL(st, "sub rank %d size %d, want %d of %d", sr, ss, want_rank, want_size);
    int64_t v = me, sum = 0;
    cc_status(st, sub, llmt_comm_all_reduce(sub, &v, &sum, 1, LLMT_DTYPE_INT64,
                                            LLMT_REDUCE_SUM, NULL));
    int64_t want = 0;
    for (int r = me % 2; r < R; r += 2) want += r;
    if (sum != want) CC_FAIL(st, "sub sum %lld want %lld", (long long)sum, (long long)want);
    llmt_comm_destroy(sub);

    /* the group {R-1, 0} (in that order); others get NULL */
    int32_t list[2] = {R - 1, 0};
    size_t nl = R > 1 ? 2 : 1;
    snprintf(st->where, sizeof st->where, "create_group");
    sub = NULL;
    cc_status(st, c, llmt_comm_create_group(c, list, nl, &sub));
    int inside = me == 0 || me == R - 1;
    if (!!sub != inside) CC_FAIL(st, "membership %d, want %d", !!sub, inside);
    if (sub) {
        llmt_comm_rank(sub, &sr);
        int wr = me == R - 1 ? 0 : 1;
        if (R == 1) wr = 0;
        if (sr != wr) CC_FAIL(st, "group rank %d want %d", sr, wr);
        cc_status(st, sub, llmt_comm_barrier(sub));
        llmt_comm_destroy(sub);
    }
    st->checks++;
}

static void cc_async(cc_state *st, llmt_comm *c)
{
    enum { K = 4, N = 1000 };
    float *buf[K];
    llmt_comm_work *w[K];
    snprintf(st->where, sizeof st->where, "iall_reduce");
    for (int k = 0; k < K; k++) {
        buf[k] = malloc(N * sizeof(float));
        for (int i = 0; i < N; i++) buf[k][i] = (float)cc_val(st->rank, (size_t)i, k);
        cc_status(st, c, llmt_comm_iall_reduce(c, buf[k], buf[k], N, LLMT_DTYPE_FP32,
                                               LLMT_REDUCE_SUM, &w[k]));
    }
    for (int k = K - 1; k >= 0; k--) {
        cc_status(st, c, llmt_comm_work_wait(w[k], -1));
        int done = 0;
        llmt_comm_work_test(w[k], &done);
        if (!done) CC_FAIL(st, "work %d not done after wait", k);
        llmt_comm_work_free(w[k]);
        cc_ctx x = {LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, st->size, st->rank, k, N, NULL, NULL};
        cc_check_buf(st, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, buf[k], N, w_reduce, &x);
        free(buf[k]);
    }
}

/* The whole matrix on one rank. big: also the large size. */
static void cc_run_all(cc_state *st, llmt_comm *c, int big)
{
    int salt = 0;
    for (size_t d = 0; d < sizeof cc_dtypes / sizeof cc_dtypes[0]; d++) {
        for (size_t s = 0; s < sizeof cc_sizes / sizeof cc_sizes[0]; s++)
            cc_one(st, c, cc_dtypes[d], cc_sizes[s], salt++);
        if (big) cc_one(st, c, cc_dtypes[d], cc_big, salt++);
        cc_a2av(st, c, cc_dtypes[d], salt++);
    }
    cc_p2p(st, c, 0);
    cc_p2p(st, c, 1);
    cc_p2p(st, c, 100003);
    cc_groups(st, c);
    cc_async(st, c);
    snprintf(st->where, sizeof st->where, "barrier");
    cc_status(st, c, llmt_comm_barrier(c));
    uint64_t seq = 0;
    llmt_comm_next_seq(c, &seq);
    st->checks++;
    if (seq < 10) CC_FAIL(st, "next_seq %llu after the matrix", (unsigned long long)seq);
}

#endif
