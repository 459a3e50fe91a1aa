/* Context parallelism's layout and exchange (cp.h): which rows of every
 * sequence this rank holds, and attention over the whole sequence from
 * them by ring or all-gather exchange of the key/value blocks. The block
 * arithmetic is the op table's (dev.h attn_cp_*: lib/exec/attn_cp.c on
 * the host backends, cuda/kernels/attn_cp.cu on CUDA); this file moves the
 * blocks. Its scratch is in the engine's memory: malloc on a backend whose
 * memory is the host's (as the engine's buffers there), the table's
 * allocator otherwise. The communicator reads and writes host memory, so
 * on a device backend each exchange is staged through host buffers (d2h
 * before the send, h2d after the receive, by the table's copies), and so
 * is the gradient sum (llmt__cp_sum_dev): correct on one GPU with an
 * in-process group (test gpu-cp-engine), not the fast way (NCCL on device
 * buffers would be).
 *
 * The ring's point-to-point steps are ordered even ranks send first, odd
 * ranks receive first, so that a backend whose send waits for its
 * receiver (MPI for large messages) cannot close a cycle of sends. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/dev.h"
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
    /* the engine's op table and context (llmt__cp_bind); host: its memory
     * is the host's (no staging); dpos: pos in its memory (pos itself
     * there); stage: host copies of the exchanged blocks (device only) */
    const llmt__dev_ops *op;
    llmt__dev *d;
    int host;
    int32_t *dpos;
    void *stage;
    size_t stage_cap;
    /* seconds in the exchange's calls, and in attention outside them
     * (llmt__cp_compute_s: the block ops, staging and host loops) */
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

/* Memory of the bound engine's kind (see the file's comment). */
static void *mem(llmt__cp *cp, size_t bytes)
{
    void *p = NULL;
    if (cp->host)
        return malloc(bytes);
    return cp->op->alloc(cp->d, &p, bytes) == LLMT_OK ? p : NULL;
}

static void mem_free(llmt__cp *cp, void *p)
{
    if (p && cp->host)
        free(p);
    else if (p)
        cp->op->free(cp->d, p);
}

static void free_scratch(llmt__cp *cp)
{
    void *bufs[] = {cp->kv, cp->dkv, cp->dmine, cp->o, cp->dq, cp->D};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mem_free(cp, bufs[i]);
    cp->kv = NULL;
    cp->dkv = cp->dmine = cp->o = cp->dq = cp->D = NULL;
    cp->cap = 0;
}

/* Everything made in the bound engine's memory. */
static void release(llmt__cp *cp)
{
    if (!cp->op)
        return;
    free_scratch(cp);
    if (cp->dpos != cp->pos)
        mem_free(cp, cp->dpos);
    cp->dpos = NULL;
    free(cp->stage);
    cp->stage = NULL;
    cp->stage_cap = 0;
}

void llmt__cp_bind(llmt__cp *cp, const llmt__dev_ops *op, llmt__dev *d)
{
    if (cp->op == op && cp->d == d)
        return;
    release(cp);
    cp->op = op;
    cp->d = d;
    cp->host = op ? op->host_memory : 1;
}

void llmt__cp_unbind(llmt__cp *cp, const llmt__dev *d)
{
    if (cp && cp->op && cp->d == d)
        llmt__cp_bind(cp, NULL, NULL);
}

void llmt__cp_destroy(llmt__cp *cp)
{
    if (!cp)
        return;
    release(cp);
    free(cp->pos);
    free(cp);
}

static llmt_status op_fail(llmt__cp *cp, llmt_status s, const char *what)
{
    return llmt__err_set(cp->e, s, "trainer: context parallel %s (%s backend): %s", what,
                         cp->op->name, cp->op->last_error(cp->d));
}
#define OP(cp, call, what)                   \
    do {                                     \
        llmt_status op_s_ = (call);          \
        if (op_s_ != LLMT_OK)                \
            return op_fail(cp, op_s_, what); \
    } while (0)

/* Host staging of at least `bytes` (device backends). */
static void *staging(llmt__cp *cp, size_t bytes)
{
    return llmt__host_stage(&cp->stage, &cp->stage_cap, bytes) == LLMT_OK ? cp->stage : NULL;
}

static llmt_status no_stage(llmt__cp *cp, size_t bytes)
{
    return llmt__err_set(cp->e, LLMT_ERR_OUT_OF_MEMORY,
                         "trainer: context parallelism: no host memory for the %zu bytes of "
                         "the exchange's staging",
                         bytes);
}

/* The engine's op table is there and every rank's positions are in its
 * memory. */
static llmt_status ready(llmt__cp *cp)
{
    if (!cp->op)
        return llmt__err_set(cp->e, LLMT_ERR_INTERNAL,
                             "trainer: context parallelism is not attached to an engine");
    if (cp->dpos)
        return LLMT_OK;
    if (cp->host) {
        cp->dpos = cp->pos;
        return LLMT_OK;
    }
    size_t bytes = (size_t)cp->size * cp->Tl * sizeof *cp->pos;
    if (!(cp->dpos = mem(cp, bytes)))
        return llmt__err_set(cp->e, LLMT_ERR_OUT_OF_MEMORY,
                             "trainer: context parallelism: no %s memory for %zu bytes of "
                             "positions",
                             cp->op->name, bytes);
    llmt_status s = cp->op->h2d(cp->d, cp->dpos, cp->pos, bytes);
    if (s != LLMT_OK) { /* not ready: made again at the next call */
        mem_free(cp, cp->dpos);
        cp->dpos = NULL;
        return op_fail(cp, s, "positions");
    }
    return LLMT_OK;
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
    llmt_status s = ready(cp);
    if (s != LLMT_OK)
        return s;
    size_t rows = (size_t)B * Tl;
    if (cp->cap == rows && cp->cap_nh == nh && cp->cap_kv == nkv)
        return LLMT_OK;
    free_scratch(cp);
    size_t nb = cp->variant == LLMT__CP_RING ? 2 : (size_t)cp->size;
    size_t KV = 2 * (size_t)nkv * hd, O = (size_t)nh * hd;
    size_t es = cp->bf16 ? 2 : 4;
    cp->kv = mem(cp, nb * rows * KV * es);
    cp->dkv = mem(cp, nb * rows * KV * 4);
    cp->dmine = mem(cp, rows * KV * 4);
    cp->o = mem(cp, rows * O * 4);
    cp->dq = mem(cp, rows * O * 4);
    cp->D = mem(cp, rows * (size_t)nh * 4);
    if (!cp->kv || !cp->dkv || !cp->dmine || !cp->o || !cp->dq || !cp->D) {
        free_scratch(cp);
        return llmt__err_set(cp->e, LLMT_ERR_OUT_OF_MEMORY,
                             "trainer: context parallelism: no %s memory for the attention "
                             "exchange of %zu rows",
                             cp->op->name, rows);
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

/* One ring step: send to rank + 1, receive from rank - 1 (n elements of
 * dt, 2 or 4 bytes). */
static llmt_status ring(llmt__cp *cp, const void *dsend, void *drecv, size_t n, llmt_dtype dt,
                        const char *what)
{
    int next = (cp->rank + 1) % cp->size, prev = (cp->rank + cp->size - 1) % cp->size;
    size_t bytes = n * (dt == LLMT_DTYPE_BF16 ? 2 : 4);
    const void *send = dsend;
    void *recv = drecv;
    if (!cp->host) { /* host copies: the block out, the other in after */
        char *h = staging(cp, 2 * bytes);
        if (!h)
            return no_stage(cp, 2 * bytes);
        OP(cp, cp->op->d2h(cp->d, h, dsend, bytes), "staging of the ring");
        send = h;
        recv = h + bytes;
    }
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
    if (s != LLMT_OK)
        return comm_fail(cp, s, what);
    if (!cp->host)
        OP(cp, cp->op->h2d(cp->d, drecv, recv, bytes), "staging of the ring");
    return LLMT_OK;
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
    OP(cp,
       cp->op->attn_cp_rows(cp->d, blk(cp, cp->kv, i, n), KV,
                            blk(cp, (void *)qkv, 1, (size_t)nh * hd), Q, 0, rows, KV),
       "keys and values");
    if (cp->variant == LLMT__CP_RING)
        return LLMT_OK;
    const void *mine = blk(cp, cp->kv, i, n);
    void *all = cp->kv;
    size_t bytes = n * (cp->bf16 ? 2 : 4), nall = (size_t)cp->size * bytes;
    if (!cp->host) { /* this rank's block out, every block in after */
        char *h = staging(cp, bytes + nall);
        if (!h)
            return no_stage(cp, bytes + nall);
        OP(cp, cp->op->d2h(cp->d, h, mine, bytes), "staging of the all-gather");
        mine = h;
        all = h + bytes;
    }
    double t0 = now_s();
    llmt_status s = llmt_comm_all_gather(cp->comm, mine, all, n, cp->store, NULL);
    cp->comm_s += now_s() - t0;
    if (s != LLMT_OK)
        return comm_fail(cp, s, "all-gather of keys and values");
    if (!cp->host)
        OP(cp, cp->op->h2d(cp->d, cp->kv, all, nall), "staging of the all-gather");
    return LLMT_OK;
}

/* The running log-sum-exps start at -INFINITY (no fill op in the table:
 * on a device, a host row of them copied in). */
static llmt_status lse_start(llmt__cp *cp, float *lse, size_t n)
{
    float *h = cp->host ? lse : staging(cp, n * sizeof *h);
    if (!h)
        return no_stage(cp, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = -INFINITY;
    if (!cp->host)
        OP(cp, cp->op->h2d(cp->d, lse, h, n * sizeof *h), "log-sum-exp");
    return LLMT_OK;
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
    OP(cp, cp->op->memset0(cp->d, cp->o, rows * O * 4), "memset");
    if ((s = lse_start(cp, lse, rows * (size_t)nh)) != LLMT_OK)
        return s;
    if ((s = own_kv(cp, qkv, Q, rows, nh, nkv, hd, ag ? (size_t)r : 0)) != LLMT_OK)
        return s;
    for (int k = 0; k < cp->size; k++) { /* own block first, then the ring's order */
        int src = (r - k + cp->size) % cp->size;
        size_t cur = ag ? (size_t)src : (size_t)(k % 2);
        OP(cp,
           cp->op->attn_cp_fwd(cp->d, cp->o, lse, qkv, Q, blk(cp, cp->kv, cur, n), KV, B, Tl,
                               Tl, nh, nkv, hd, cp->dpos + (size_t)r * Tl,
                               cp->dpos + (size_t)src * Tl),
           "attention");
        if (!ag && k < cp->size - 1 &&
            (s = ring(cp, blk(cp, cp->kv, cur, n), blk(cp, cp->kv, 1 - cur, n), n, cp->store,
                      "ring of keys and values")) != LLMT_OK)
            return s;
    }
    OP(cp, cp->op->attn_cp_rows(cp->d, out, O, cp->o, O, 1, rows, O), "attention output");
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
    OP(cp, cp->op->attn_cp_delta(cp->d, cp->D, dout, out, B, Tl, nh, hd), "attention backward");
    OP(cp, cp->op->memset0(cp->d, cp->dq, rows * O * 4), "memset");
    OP(cp, cp->op->memset0(cp->d, cp->dkv, (ag ? (size_t)cp->size : 2) * n * 4), "memset");
    if ((s = own_kv(cp, qkv, Q, rows, nh, nkv, hd, ag ? (size_t)r : 0)) != LLMT_OK)
        return s;
    for (int k = 0; k < cp->size; k++) {
        int src = (r - k + cp->size) % cp->size;
        size_t cur = ag ? (size_t)src : (size_t)(k % 2);
        OP(cp,
           cp->op->attn_cp_bwd(cp->d, cp->dq, cp->dkv + cur * n, cp->D, lse, dout, qkv, Q,
                               blk(cp, cp->kv, cur, n), KV, B, Tl, Tl, nh, nkv, hd,
                               cp->dpos + (size_t)r * Tl, cp->dpos + (size_t)src * Tl),
           "attention backward");
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
        const float *all = cp->dkv;
        float *mine = cp->dmine;
        size_t nall = (size_t)cp->size * n;
        if (!cp->host) { /* every block's out, this rank's sum in after */
            float *h = staging(cp, (nall + n) * 4);
            if (!h)
                return no_stage(cp, (nall + n) * 4);
            OP(cp, cp->op->d2h(cp->d, h, cp->dkv, nall * 4), "staging of the reduce-scatter");
            all = h;
            mine = h + nall;
        }
        double t0 = now_s();
        s = llmt_comm_reduce_scatter(cp->comm, all, mine, n, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM,
                                     NULL);
        cp->comm_s += now_s() - t0;
        if (s != LLMT_OK)
            return comm_fail(cp, s, "reduce-scatter of key and value gradients");
        if (!cp->host)
            OP(cp, cp->op->h2d(cp->d, cp->dmine, mine, n * 4), "staging of the reduce-scatter");
    } else { /* the block held now is rank + 1's, its sum complete: home */
        size_t cur = (size_t)((cp->size - 1) % 2);
        if ((s = ring(cp, cp->dkv + cur * n, cp->dmine, n, LLMT_DTYPE_FP32,
                      "return of key and value gradients")) != LLMT_OK)
            return s;
    }
    OP(cp, cp->op->attn_cp_rows(cp->d, dqkv, Q, cp->dq, O, 1, rows, O), "attention backward");
    OP(cp, cp->op->attn_cp_rows(cp->d, blk(cp, dqkv, 1, O), Q, cp->dmine, KV, 1, rows, KV),
       "attention backward");
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

llmt_status llmt__cp_rope(llmt__cp *cp, void *x, int B, int T, int nh, int hd, size_t stride,
                          float theta, int inverse)
{
    llmt_status s = ready(cp);
    if (s != LLMT_OK)
        return s;
    OP(cp,
       cp->op->attn_cp_rope(cp->d, x, B, T, nh, hd, stride, theta, inverse,
                            cp->dpos + (size_t)cp->rank * cp->Tl),
       inverse ? "rope backward" : "rope");
    return LLMT_OK;
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

llmt_status llmt__cp_max(llmt__cp *cp, float *buf, size_t n)
{
    llmt_status s =
        llmt_comm_all_reduce(cp->comm, buf, buf, n, LLMT_DTYPE_FP32, LLMT_REDUCE_MAX, NULL);
    return s == LLMT_OK ? LLMT_OK : comm_fail(cp, s, "fp8 amax maximum");
}

llmt_status llmt__cp_sum_dev(llmt__cp *cp, float *buf, size_t n)
{
    llmt_status s = ready(cp);
    if (s != LLMT_OK || cp->host)
        return s != LLMT_OK ? s : llmt__cp_sum(cp, buf, n);
    float *h = staging(cp, n * sizeof *h);
    if (!h)
        return no_stage(cp, n * sizeof *h);
    OP(cp, cp->op->d2h(cp->d, h, buf, n * sizeof *h), "staging of the gradient sum");
    if ((s = llmt__cp_sum(cp, h, n)) != LLMT_OK)
        return s;
    OP(cp, cp->op->h2d(cp->d, buf, h, n * sizeof *h), "staging of the gradient sum");
    return LLMT_OK;
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
