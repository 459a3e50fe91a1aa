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
 * and gradient points in fp32. */
#include <stdlib.h>

#include "train/tp.h"

struct llmt__tp {
    llmt_err *e;
    llmt_comm *comm;
    llmt_dtype store;
    int rank, size;
    int seq; /* sequence parallel */
};

static const char *point_name(llmt__point at)
{
    switch (at) {
    case LLMT__AT_COLUMN_IN: return "column-parallel input";
    case LLMT__AT_ROW_OUT: return "row-parallel output";
    case LLMT__AT_EMBED_OUT: return "vocabulary-parallel embedding";
    case LLMT__AT_LOSS_MAX: return "vocabulary-parallel loss (max)";
    case LLMT__AT_LOSS_SUM: return "vocabulary-parallel loss (sum)";
    case LLMT__AT_GRAD_SUM: return "gradient sum";
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

/* Sequence parallelism's activation points: gather (forward of a
 * column split Linear's input, backward of the others) or reduce-scatter,
 * in place on buf's rows. */
static llmt_status seq_hook(llmt__tp *tp, llmt__point at, int dir, const llmt__linear *lin,
                            void *buf, size_t rows, size_t cols)
{
    if (rows % (size_t)tp->size)
        return llmt__err_set(tp->e, LLMT_ERR_INTERNAL,
                             "trainer: sequence parallel %s: %zu rows do not split in %d",
                             point_name(at), rows, tp->size);
    size_t n = rows / (size_t)tp->size * cols, es = llmt_dtype_size(tp->store);
    char *mine = (char *)buf + (size_t)tp->rank * n * es;
    int gather = (at == LLMT__AT_COLUMN_IN) == (dir > 0);
    llmt_status s = gather ? llmt_comm_all_gather(tp->comm, mine, buf, n, tp->store, NULL)
                           : llmt_comm_reduce_scatter(tp->comm, buf, mine, n, tp->store,
                                                      LLMT_REDUCE_SUM, NULL);
    return s == LLMT_OK ? LLMT_OK : failed(tp, s, at, dir, lin, rows, cols);
}

static llmt_status tp_hook(void *ctx, llmt__point at, int dir, const llmt__linear *lin,
                           void *buf, size_t rows, size_t cols)
{
    llmt__tp *tp = ctx;
    llmt_dtype dt = tp->store;
    llmt_reduce_op op = LLMT_REDUCE_SUM;
    if (tp->seq && at <= LLMT__AT_EMBED_OUT)
        return seq_hook(tp, at, dir, lin, buf, rows, cols);
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
    case LLMT__AT_GRAD_SUM: dt = LLMT_DTYPE_FP32; break;
    }
    llmt_status s = llmt_comm_all_reduce(tp->comm, buf, buf, rows * cols, dt, op, NULL);
    return s == LLMT_OK ? LLMT_OK : failed(tp, s, at, dir, lin, rows, cols);
}

llmt_status llmt__tp_create(llmt_err *e, llmt_comm *comm, llmt_dtype store, int seq,
                            llmt__tp **out)
{
    *out = NULL;
    int32_t r = 0, n = 0;
    if (llmt_comm_rank(comm, &r) != LLMT_OK || llmt_comm_size(comm, &n) != LLMT_OK)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: tensor parallelism: the communicator has no rank: %s",
                             llmt_comm_last_error(comm));
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
}

llmt_comm *llmt__tp_comm(const llmt__tp *tp)
{
    return tp->comm;
}

int llmt__tp_seq(const llmt__tp *tp)
{
    return tp ? tp->seq : 0;
}
