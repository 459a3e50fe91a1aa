/* Tensor parallelism's collectives (Megatron-LM's f and g operators):
 * the engine (lib/train/device.c) calls this hook at its named points, and
 * each point is one all-reduce over the tensor parallel group, in place:
 *
 *   COLUMN_IN   forward: nothing (the input is whole on every rank);
 *               backward: sum of the partial input gradients
 *   ROW_OUT     forward: sum of the partial outputs; backward: nothing
 *   EMBED_OUT   forward: sum (each rank looked up only its vocabulary rows)
 *   LOSS_MAX    max of the row maxima of the vocabulary-split logits
 *   LOSS_SUM    sum of the sums of exponentials and target logits
 *   GRAD_SUM    sum of fp32 gradients (norm parts, shared kv heads, gathers)
 *
 * With sequence parallelism (Megatron-LM's second paper, Korthikanti et
 * al. 2022) the activations outside the split Linears hold only this
 * rank's block of rows, and the activation points move rows instead of
 * summing whole buffers: buf then has all the group's rows, this rank's
 * the r-th block of rows / size (the comm layer's rank-major layout), and
 *
 *   COLUMN_IN   forward: all-gather; backward: reduce-scatter (the sum
 *               of the partial input gradients, this rank's rows only)
 *   ROW_OUT     forward: reduce-scatter; backward: all-gather of dout
 *   EMBED_OUT   forward: reduce-scatter; backward: all-gather of dout
 *
 * each in place, which is half an all-reduce's traffic per direction.
 *
 * Activations go in the engine's storage type (fp32 or bf16), the loss
 * and gradient points in fp32. HOST_SUM is the one point whose buffer is
 * host memory on every backend (the engine says so by the point, never
 * by guessing from the pointer).
 *
 * The communicator reads and writes host memory (in-process, Gloo, MPI;
 * NCCL is refused: llmt__tp_create). On a backend whose memory is not the
 * host's (the op table's host_memory 0: CUDA) every point but HOST_SUM is
 * staged as lib/train/cp.c stages its exchange: the buffer's input part
 * copied out by the table's d2h, the collective on the host copy, its
 * output part copied back by h2d, through one host buffer grown on demand.
 * The table's d2h and h2d are queued on the engine's one stream and
 * synchronise it (lib/exec/dev.h), so the copy out reads what the kernels
 * before the point wrote, and the host buffer is free again once h2d
 * returns. Correct on one GPU with an in-process group (test
 * gpu-tp-engine), not the fast way: NCCL on the device buffers would be. */
#include <stdlib.h>

#include "train/tp.h"

struct llmt__tp {
    llmt_err *e;
    llmt_comm *comm;
    llmt_dtype store;
    int rank, size;
    int seq; /* sequence parallel */
    /* the host copy of a staged buffer, shared by the engines bound to
     * this (one runs at a time); plain malloc, as it outlives the engine
     * contexts that pinned memory would need */
    void *stage;
    size_t stage_cap;
};

/* The hook's context for one engine (tp_bind): the group, and the
 * engine's op table and context, whose copies stage when its memory is
 * not the host's. */
typedef struct tp_bound {
    llmt__tp *tp;
    const llmt__dev_ops *op;
    llmt__dev *d;
} tp_bound;

static const char *point_name(llmt__point at)
{
    switch (at) {
    case LLMT__AT_COLUMN_IN: return "column-parallel input";
    case LLMT__AT_ROW_OUT: return "row-parallel output";
    case LLMT__AT_EMBED_OUT: return "vocabulary-parallel embedding";
    case LLMT__AT_LOSS_MAX: return "vocabulary-parallel loss (max)";
    case LLMT__AT_LOSS_SUM: return "vocabulary-parallel loss (sum)";
    case LLMT__AT_GRAD_SUM: return "gradient sum";
    case LLMT__AT_HOST_SUM: return "sum of host copies";
    case LLMT__AT_HOST_MAX: return "fp8 amax maximum";
    }
    return "?";
}

static llmt_status failed(llmt__tp *tp, llmt_status s, llmt__point at, int dir,
                          const llmt__linear *lin, size_t rows, size_t cols)
{
    return llmt__err_set(tp->e, s, "trainer: tensor parallel %s%s%s (%s, %zu x %zu): %s",
                         point_name(at), lin ? " of " : "", lin ? lin->name : "",
                         dir > 0 ? "forward" : "backward", rows, cols,
                         llmt_comm_last_error(tp->comm));
}

static llmt_status stage_fail(const tp_bound *b, llmt_status s, llmt__point at, int dir,
                              const llmt__linear *lin, const char *what)
{
    return llmt__err_set(b->tp->e, s,
                         "trainer: tensor parallel %s%s%s (%s): the staging through host "
                         "memory (%s of the %s backend): %s",
                         point_name(at), lin ? " of " : "", lin ? lin->name : "",
                         dir > 0 ? "forward" : "backward", what, b->op->name,
                         b->op->last_error(b->d));
}

/* Host staging of at least `bytes`. */
static llmt_status staging(llmt__tp *tp, llmt__point at, size_t bytes)
{
    if (llmt__host_stage(&tp->stage, &tp->stage_cap, bytes) != LLMT_OK)
        return llmt__err_set(tp->e, LLMT_ERR_OUT_OF_MEMORY,
                             "trainer: tensor parallel %s: no host memory for the %zu bytes "
                             "of its staging",
                             point_name(at), bytes);
    return LLMT_OK;
}

#define STAGE(b, call, what)                                 \
    do {                                                     \
        llmt_status st_s_ = (call);                          \
        if (st_s_ != LLMT_OK)                                \
            return stage_fail(b, st_s_, at, dir, lin, what); \
    } while (0)

/* Sequence parallelism's activation points: gather (forward of a
 * column split Linear's input, backward of the others) or reduce-scatter,
 * in place on buf's rows. Staged, the gather copies out only this rank's
 * block and back every block; the reduce-scatter out every block and back
 * only this rank's. */
static llmt_status seq_hook(const tp_bound *b, llmt__point at, int dir, const llmt__linear *lin,
                            void *buf, size_t rows, size_t cols)
{
    llmt__tp *tp = b->tp;
    if (rows % (size_t)tp->size)
        return llmt__err_set(tp->e, LLMT_ERR_INTERNAL,
                             "trainer: sequence parallel %s: %zu rows do not split in %d",
                             point_name(at), rows, tp->size);
    size_t n = rows / (size_t)tp->size * cols, es = llmt_dtype_size(tp->store);
    size_t off = (size_t)tp->rank * n * es, all = rows * cols * es;
    int gather = (at == LLMT__AT_COLUMN_IN) == (dir > 0);
    /* what the collective reads and what it writes, staged: bytes [lo,
     * lo + len) of buf */
    size_t in_lo = gather ? off : 0, in_len = gather ? n * es : all;
    size_t out_lo = gather ? 0 : off, out_len = gather ? all : n * es;
    char *h = buf, *d = buf;
    llmt_status s;
    if (!b->op->host_memory) {
        if ((s = staging(tp, at, all)) != LLMT_OK)
            return s;
        h = tp->stage;
        STAGE(b, b->op->d2h(b->d, h + in_lo, d + in_lo, in_len), "copy out");
    }
    s = gather ? llmt_comm_all_gather(tp->comm, h + off, h, n, tp->store, NULL)
               : llmt_comm_reduce_scatter(tp->comm, h, h + off, n, tp->store, LLMT_REDUCE_SUM,
                                          NULL);
    if (s != LLMT_OK)
        return failed(tp, s, at, dir, lin, rows, cols);
    if (h != d)
        STAGE(b, b->op->h2d(b->d, d + out_lo, h + out_lo, out_len), "copy back");
    return LLMT_OK;
}

static llmt_status tp_hook(void *ctx, llmt__point at, int dir, const llmt__linear *lin,
                           void *buf, size_t rows, size_t cols)
{
    const tp_bound *b = ctx;
    llmt__tp *tp = b->tp;
    llmt_dtype dt = tp->store;
    llmt_reduce_op op = LLMT_REDUCE_SUM;
    llmt_status s;
    if (at == LLMT__AT_HOST_SUM || at == LLMT__AT_HOST_MAX) { /* host memory: as it is */
        if (at == LLMT__AT_HOST_MAX)
            op = LLMT_REDUCE_MAX;
        s = llmt_comm_all_reduce(tp->comm, buf, buf, rows * cols, LLMT_DTYPE_FP32, op, NULL);
        return s == LLMT_OK ? LLMT_OK : failed(tp, s, at, dir, lin, rows, cols);
    }
    if (tp->seq && at <= LLMT__AT_EMBED_OUT)
        return seq_hook(b, at, dir, lin, buf, rows, cols);
    switch (at) {
    case LLMT__AT_COLUMN_IN:
        if (dir > 0)
            return LLMT_OK;
        break;
    case LLMT__AT_ROW_OUT:
        if (dir < 0)
            return LLMT_OK;
        break;
    case LLMT__AT_EMBED_OUT:
        if (dir < 0)
            return LLMT_OK;
        break;
    case LLMT__AT_LOSS_MAX:
        dt = LLMT_DTYPE_FP32;
        op = LLMT_REDUCE_MAX;
        break;
    case LLMT__AT_LOSS_SUM:
    case LLMT__AT_GRAD_SUM:
    case LLMT__AT_HOST_SUM:
    case LLMT__AT_HOST_MAX: dt = LLMT_DTYPE_FP32; break;
    }
    size_t bytes = rows * cols * llmt_dtype_size(dt);
    void *h = buf;
    if (!b->op->host_memory) {
        if ((s = staging(tp, at, bytes)) != LLMT_OK)
            return s;
        h = tp->stage;
        STAGE(b, b->op->d2h(b->d, h, buf, bytes), "copy out");
    }
    s = llmt_comm_all_reduce(tp->comm, h, h, rows * cols, dt, op, NULL);
    if (s != LLMT_OK)
        return failed(tp, s, at, dir, lin, rows, cols);
    if (h != buf)
        STAGE(b, b->op->h2d(b->d, buf, h, bytes), "copy back");
    return LLMT_OK;
}

/* One engine's hook context, made once it has made its context; freed
 * as it goes (never touching the group, which may have gone first). */
static void *tp_bind(void *ctx, const llmt__dev_ops *op, llmt__dev *d)
{
    tp_bound *b = malloc(sizeof *b);
    if (b) {
        b->tp = ctx;
        b->op = op;
        b->d = d;
    }
    return b;
}

static void tp_unbind(void *bound)
{
    free(bound);
}

llmt_status llmt__tp_create(llmt_err *e, llmt_comm *comm, llmt_dtype store, int seq,
                            llmt__tp **out)
{
    *out = NULL;
    int32_t r = 0, n = 0;
    llmt_comm_backend be = LLMT_COMM_AUTO;
    if (llmt_comm_rank(comm, &r) != LLMT_OK || llmt_comm_size(comm, &n) != LLMT_OK ||
        llmt_comm_backend_of(comm, &be) != LLMT_OK)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: tensor parallelism: the communicator has no rank: %s",
                             llmt_comm_last_error(comm));
    /* NCCL would take the device buffers as they are, but the engine would
     * have to synchronise its stream with NCCL's, and the HOST_SUM points
     * to be staged to the device; and two ranks cannot share this
     * project's one test GPU, so none of it could be tested */
    if (be == LLMT_COMM_NCCL)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: set_tp_comm: tensor parallelism over a NCCL "
                             "communicator is not implemented (its collectives would need "
                             "the engine's stream synchronised with NCCL's and the host "
                             "copies' sums staged to the device); use an in-process, Gloo or "
                             "MPI communicator: the engine stages device buffers through "
                             "host memory for them");
    llmt__tp *tp = calloc(1, sizeof *tp);
    if (!tp)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    tp->e = e;
    tp->comm = comm;
    tp->store = store;
    tp->rank = r;
    tp->size = n;
    tp->seq = seq != 0;
    *out = tp;
    return LLMT_OK;
}

void llmt__tp_destroy(llmt__tp *tp)
{
    if (tp)
        free(tp->stage);
    free(tp);
}

void llmt__tp_engine(llmt__tp *tp, llmt__devtrain_tp *out)
{
    out->rank = tp->rank;
    out->size = tp->size;
    out->hook = tp_hook;
    out->ctx = tp;
    out->seq = tp->seq;
    out->comm = tp->comm;
    out->bind = tp_bind;
    out->unbind = tp_unbind;
}

llmt_comm *llmt__tp_comm(const llmt__tp *tp)
{
    return tp->comm;
}

int llmt__tp_seq(const llmt__tp *tp)
{
    return tp ? tp->seq : 0;
}
