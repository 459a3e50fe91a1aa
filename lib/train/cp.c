/* Context parallelism's layout and exchange (cp.h): which rows of every
 * sequence this rank holds, and attention over the whole sequence from
 * them by ring or all-gather exchange of the key/value blocks. The block
 * arithmetic is lib/exec/attn_cp.c's; this file moves the blocks.
 *
 * The ring's point-to-point steps are ordered even ranks send first, odd
 * ranks receive first, so that a backend whose send waits for its
 * receiver (MPI for large messages) cannot close a cycle of sends. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/attn_cp.h"
#include "train/cp.h"

struct llmt__cp {
    llmt_err *e;
    llmt_comm *comm;
    int rank, size, variant, T, Tl, bf16;
    llmt_dtype store;
    int32_t *pos; /* [size][Tl]: every rank's positions */
    /* scratch, grown on demand: kv blocks (storage type; 2 for the ring,
     * size for the all-gather), their dK/dV (fp32, as many, plus this
     * rank's own), the running output, dq, the backward's row terms */
    void *kv;
    float *dkv, *dmine, *o, *dq, *D;
    size_t cap; /* B * Tl the scratch is made for (0: none yet) */
    int cap_nh, cap_kv;
    /* seconds in the exchange's calls, and in attention outside them: the
     * block kernels run outside the backend's op table, so the job's
     * step split (lib/job/perf.c) would not see them as compute */
    double comm_s, compute_s;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int32_t chunk_pos(int r, int cp, int T, int t)
{
    int Tc = T / (2 * cp), c = t / Tc;
    return (int32_t)((c == 0 ? r : 2 * cp - 1 - r) * Tc + t % Tc);
}

llmt_status llmt__cp_create(llmt_err *e, llmt_comm *comm, int variant, int T, int bf16,
                            llmt__cp **out)
{
    *out = NULL;
    int32_t r = 0, n = 0;
    if (llmt_comm_rank(comm, &r) != LLMT_OK || llmt_comm_size(comm, &n) != LLMT_OK)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: context parallelism: the communicator has no rank: %s",
                             llmt_comm_last_error(comm));
    if (variant != LLMT__CP_RING && variant != LLMT__CP_ALL_GATHER)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: set_cp_comm: variant %d is not LLMT__CP_RING (0) or "
                             "LLMT__CP_ALL_GATHER (1)",
                             variant);
    if (T % (2 * n))
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: parallelism.cp %d: 2 x cp = %d does not divide "
                             "model.seq_len %d (each rank holds two of 2 x cp equal chunks "
                             "of every sequence)",
                             (int)n, 2 * (int)n, T);
    llmt__cp *cp = calloc(1, sizeof *cp);
    int32_t *pos = malloc((size_t)T * sizeof *pos);
    if (!cp || !pos) {
        free(cp);
        free(pos);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    }
    cp->e = e;
    cp->comm = comm;
    cp->rank = r;
    cp->size = n;
    cp->variant = variant;
    cp->T = T;
    cp->Tl = T / n;
    cp->bf16 = bf16;
    cp->store = bf16 ? LLMT_DTYPE_BF16 : LLMT_DTYPE_FP32;
    cp->pos = pos;
    for (int k = 0; k < n; k++)
        for (int t = 0; t < cp->Tl; t++)
            pos[k * cp->Tl + t] = chunk_pos(k, n, T, t);
    *out = cp;
    return LLMT_OK;
}

static void free_scratch(llmt__cp *cp)
{
    free(cp->kv);
    free(cp->dkv);
    free(cp->dmine);
    free(cp->o);
    free(cp->dq);
    free(cp->D);
    cp->kv = NULL;
    cp->dkv = cp->dmine = cp->o = cp->dq = cp->D = NULL;
    cp->cap = 0;
}

void llmt__cp_destroy(llmt__cp *cp)
{
    if (!cp)
        return;
    free_scratch(cp);
    free(cp->pos);
    free(cp);
}

int llmt__cp_size(const llmt__cp *cp)
{
    return cp ? cp->size : 1;
}
int llmt__cp_rank(const llmt__cp *cp)
{
    return cp ? cp->rank : 0;
}
llmt_comm *llmt__cp_comm(const llmt__cp *cp)
{
    return cp ? cp->comm : NULL;
}
int llmt__cp_variant(const llmt__cp *cp)
{
    return cp ? cp->variant : LLMT__CP_RING;
}
const int32_t *llmt__cp_pos(const llmt__cp *cp)
{
    return cp->pos + (size_t)cp->rank * cp->Tl;
}

void llmt__cp_local(const llmt__cp *cp, const int32_t *in, int32_t *out, int rows)
{
    const int32_t *p = llmt__cp_pos(cp);
    for (int b = 0; b < rows; b++)
        for (int t = 0; t < cp->Tl; t++)
            out[(size_t)b * cp->Tl + t] = in[(size_t)b * cp->T + p[t]];
}

/* Scratch for B x Tl rows of nh query and nkv kv heads of hd. */
static llmt_status scratch(llmt__cp *cp, int B, int Tl, int nh, int nkv, int hd)
{
    size_t rows = (size_t)B * Tl;
    if (cp->cap == rows && cp->cap_nh == nh && cp->cap_kv == nkv)
        return LLMT_OK;
    free_scratch(cp);
    size_t nb = cp->variant == LLMT__CP_RING ? 2 : (size_t)cp->size;
    size_t KV = 2 * (size_t)nkv * hd, O = (size_t)nh * hd;
    size_t es = cp->bf16 ? 2 : 4;
    cp->kv = malloc(nb * rows * KV * es);
    cp->dkv = malloc(nb * rows * KV * 4);
    cp->dmine = malloc(rows * KV * 4);
    cp->o = malloc(rows * O * 4);
    cp->dq = malloc(rows * O * 4);
    cp->D = malloc(rows * (size_t)nh * 4);
    if (!cp->kv || !cp->dkv || !cp->dmine || !cp->o || !cp->dq || !cp->D) {
        free_scratch(cp);
        return llmt__err_set(cp->e, LLMT_ERR_OUT_OF_MEMORY,
                             "trainer: context parallelism: no memory for the attention "
                             "exchange of %zu rows",
                             rows);
    }
    cp->cap = rows;
    cp->cap_nh = nh;
    cp->cap_kv = nkv;
    return LLMT_OK;
}

static llmt_status comm_fail(llmt__cp *cp, llmt_status s, const char *what)
{
    return llmt__err_set(cp->e, s, "trainer: context parallel %s (rank %d of %d): %s", what,
                         cp->rank, cp->size, llmt_comm_last_error(cp->comm));
}

/* One ring step: send to rank + 1, receive from rank - 1. */
static llmt_status ring(llmt__cp *cp, const void *send, void *recv, size_t n, llmt_dtype dt,
                        const char *what)
{
    int next = (cp->rank + 1) % cp->size, prev = (cp->rank + cp->size - 1) % cp->size;
    llmt_status s;
    double t0 = now_s();
    if (cp->rank % 2 == 0) {
        s = llmt_comm_send(cp->comm, send, n, dt, next, NULL);
        if (s == LLMT_OK)
            s = llmt_comm_recv(cp->comm, recv, n, dt, prev, NULL);
    } else {
        s = llmt_comm_recv(cp->comm, recv, n, dt, prev, NULL);
        if (s == LLMT_OK)
            s = llmt_comm_send(cp->comm, send, n, dt, next, NULL);
    }
    cp->comm_s += now_s() - t0;
    return s == LLMT_OK ? LLMT_OK : comm_fail(cp, s, what);
}

static void *blk(const llmt__cp *cp, void *base, size_t i, size_t n)
{
    return (char *)base + i * n * (cp->bf16 ? 2 : 4);
}

/* This rank's k, v rows packed into kv block `i` (then all-gathered for
 * the all-gather variant). */
static llmt_status own_kv(llmt__cp *cp, const void *qkv, size_t Q, size_t rows, int nh, int nkv,
                          int hd, size_t i)
{
    size_t KV = 2 * (size_t)nkv * hd, n = rows * KV;
    llmt__attn_cp_rows(cp->bf16, blk(cp, cp->kv, i, n), KV,
                       blk(cp, (void *)qkv, 1, (size_t)nh * hd), Q, 0, rows, KV);
    if (cp->variant == LLMT__CP_RING)
        return LLMT_OK;
    double t0 = now_s();
    llmt_status s =
        llmt_comm_all_gather(cp->comm, blk(cp, cp->kv, i, n), cp->kv, n, cp->store, NULL);
    cp->comm_s += now_s() - t0;
    return s == LLMT_OK ? LLMT_OK : comm_fail(cp, s, "all-gather of keys and values");
}

static llmt_status attn_fwd(llmt__cp *cp, void *out, float *lse, const void *qkv, size_t Q,
                            int B, int Tl, int nh, int nkv, int hd)
{
    llmt_status s = scratch(cp, B, Tl, nh, nkv, hd);
    if (s != LLMT_OK)
        return s;
    size_t rows = (size_t)B * Tl, KV = 2 * (size_t)nkv * hd, O = (size_t)nh * hd;
    size_t n = rows * KV;
    int r = cp->rank, ag = cp->variant == LLMT__CP_ALL_GATHER;
    memset(cp->o, 0, rows * O * 4);
    for (size_t i = 0; i < rows * (size_t)nh; i++)
        lse[i] = -INFINITY;
    if ((s = own_kv(cp, qkv, Q, rows, nh, nkv, hd, ag ? (size_t)r : 0)) != LLMT_OK)
        return s;
    for (int k = 0; k < cp->size; k++) { /* own block first, then the ring's order */
        int src = (r - k + cp->size) % cp->size;
        size_t cur = ag ? (size_t)src : (size_t)(k % 2);
        llmt__attn_cp_fwd(cp->bf16, cp->o, lse, qkv, Q, blk(cp, cp->kv, cur, n), KV, B, Tl, Tl,
                          nh, nkv, hd, cp->pos + (size_t)r * Tl, cp->pos + (size_t)src * Tl);
        if (!ag && k < cp->size - 1 &&
            (s = ring(cp, blk(cp, cp->kv, cur, n), blk(cp, cp->kv, 1 - cur, n), n, cp->store,
                      "ring of keys and values")) != LLMT_OK)
            return s;
    }
    llmt__attn_cp_rows(cp->bf16, out, O, cp->o, O, 1, rows, O);
    return LLMT_OK;
}

static llmt_status attn_bwd(llmt__cp *cp, void *dqkv, const void *dout, const void *out,
                            const float *lse, const void *qkv, size_t Q, int B, int Tl, int nh,
                            int nkv, int hd)
{
    llmt_status s = scratch(cp, B, Tl, nh, nkv, hd);
    if (s != LLMT_OK)
        return s;
    size_t rows = (size_t)B * Tl, KV = 2 * (size_t)nkv * hd, O = (size_t)nh * hd;
    size_t n = rows * KV;
    int r = cp->rank, ag = cp->variant == LLMT__CP_ALL_GATHER;
    llmt__attn_cp_delta(cp->bf16, cp->D, dout, out, B, Tl, nh, hd);
    memset(cp->dq, 0, rows * O * 4);
    memset(cp->dkv, 0, (ag ? (size_t)cp->size : 2) * n * 4);
    if ((s = own_kv(cp, qkv, Q, rows, nh, nkv, hd, ag ? (size_t)r : 0)) != LLMT_OK)
        return s;
    for (int k = 0; k < cp->size; k++) {
        int src = (r - k + cp->size) % cp->size;
        size_t cur = ag ? (size_t)src : (size_t)(k % 2);
        llmt__attn_cp_bwd(cp->bf16, cp->dq, cp->dkv + cur * n, cp->D, lse, dout, qkv, Q,
                          blk(cp, cp->kv, cur, n), KV, B, Tl, Tl, nh, nkv, hd,
                          cp->pos + (size_t)r * Tl, cp->pos + (size_t)src * Tl);
        if (ag || k == cp->size - 1)
            continue;
        /* the block and its dK/dV so far go on to the next rank */
        if ((s = ring(cp, blk(cp, cp->kv, cur, n), blk(cp, cp->kv, 1 - cur, n), n, cp->store,
                      "ring of keys and values")) != LLMT_OK ||
            (s = ring(cp, cp->dkv + cur * n, cp->dkv + (1 - cur) * n, n, LLMT_DTYPE_FP32,
                      "ring of key and value gradients")) != LLMT_OK)
            return s;
    }
    if (ag) { /* every block's dK/dV summed at its owner */
        double t0 = now_s();
        s = llmt_comm_reduce_scatter(cp->comm, cp->dkv, cp->dmine, n, LLMT_DTYPE_FP32,
                                     LLMT_REDUCE_SUM, NULL);
        cp->comm_s += now_s() - t0;
        if (s != LLMT_OK)
            return comm_fail(cp, s, "reduce-scatter of key and value gradients");
    } else { /* the block held now is rank + 1's, its sum complete: home */
        size_t cur = (size_t)((cp->size - 1) % 2);
        if ((s = ring(cp, cp->dkv + cur * n, cp->dmine, n, LLMT_DTYPE_FP32,
                      "return of key and value gradients")) != LLMT_OK)
            return s;
    }
    llmt__attn_cp_rows(cp->bf16, dqkv, Q, cp->dq, O, 1, rows, O);
    llmt__attn_cp_rows(cp->bf16, blk(cp, dqkv, 1, O), Q, cp->dmine, KV, 1, rows, KV);
    return LLMT_OK;
}

/* The attention's time less its exchange's is compute (llmt__cp_compute_s). */
llmt_status llmt__cp_attn_fwd(llmt__cp *cp, void *out, float *lse, const void *qkv, size_t Q,
                              int B, int Tl, int nh, int nkv, int hd)
{
    double t0 = now_s(), c0 = cp->comm_s;
    llmt_status s = attn_fwd(cp, out, lse, qkv, Q, B, Tl, nh, nkv, hd);
    cp->compute_s += now_s() - t0 - (cp->comm_s - c0);
    return s;
}

llmt_status llmt__cp_attn_bwd(llmt__cp *cp, void *dqkv, const void *dout, const void *out,
                              const float *lse, const void *qkv, size_t Q, int B, int Tl,
                              int nh, int nkv, int hd)
{
    double t0 = now_s(), c0 = cp->comm_s;
    llmt_status s = attn_bwd(cp, dqkv, dout, out, lse, qkv, Q, B, Tl, nh, nkv, hd);
    cp->compute_s += now_s() - t0 - (cp->comm_s - c0);
    return s;
}

double llmt__cp_compute_s(const llmt__cp *cp)
{
    return cp ? cp->compute_s : 0.0;
}

llmt_status llmt__cp_sum(llmt__cp *cp, float *buf, size_t n)
{
    llmt_status s =
        llmt_comm_all_reduce(cp->comm, buf, buf, n, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL);
    return s == LLMT_OK ? LLMT_OK : comm_fail(cp, s, "gradient sum");
}

llmt_status llmt__cp_sum_double(llmt__cp *cp, double *x)
{
    double *all = malloc((size_t)cp->size * sizeof *all);
    if (!all)
        return llmt__err_set(cp->e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    llmt_status s = llmt_comm_all_gather(cp->comm, x, all, 1, LLMT_DTYPE_INT64, NULL);
    if (s == LLMT_OK) {
        double sum = 0.0;
        for (int i = 0; i < cp->size; i++)
            sum += all[i];
        *x = sum;
    }
    free(all);
    return s == LLMT_OK ? LLMT_OK : comm_fail(cp, s, "loss sum");
}
