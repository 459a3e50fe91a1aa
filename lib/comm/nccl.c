/* NCCL backend: GPU buffers, one rank per process (and GPU). Communicators
 * are non-blocking (ncclConfig_t.blocking = 0): every NCCL call is polled
 * with ncclCommGetAsyncError, and every collective waits for its completion
 * event, both against the deadline; on a timeout the communicator is torn
 * down with ncclCommAbort, which unblocks the kernels. Collectives are
 * therefore synchronous with the host (the caller's stream is used, and is
 * complete up to the operation when the call returns).
 * Diagnosis: a NCCL rank can only read its own recorder; the other ranks
 * are reported unreachable (run over MPI for cross-rank dumps). */
#ifdef LLMT_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#ifdef LLMT_HAVE_MPI
#include <mpi.h>
#endif

#include "comm/comm_internal.h"

typedef struct nccl_be {
    ncclComm_t comm;
    int device;
    cudaEvent_t ev;
    void *scratch;   /* 4 bytes of device memory for the barrier */
    int dead;        /* aborted: the comm is gone */
} nccl_be;

static const llmt__comm_backend_ops nccl_ops;

_Static_assert(sizeof(ncclUniqueId) <= LLMT_COMM_UNIQUE_ID_BYTES,
               "ncclUniqueId does not fit LLMT_COMM_UNIQUE_ID_BYTES");

llmt_status llmt__nccl_unique_id(llmt_err *e, void *id, size_t len)
{
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess)
        return llmt__err_set(e, LLMT_ERR_NCCL, "comm: ncclGetUniqueId: %s",
                             ncclGetErrorString(r));
    memset(id, 0, len);
    memcpy(id, &u, sizeof u);
    return LLMT_OK;
}

static ncclDataType_t nccl_type(llmt_dtype dt)
{
    switch (dt) {
    case LLMT_DTYPE_BF16: return ncclBfloat16;
    case LLMT_DTYPE_FP16: return ncclFloat16;
    case LLMT_DTYPE_INT32: return ncclInt32;
    case LLMT_DTYPE_INT64: return ncclInt64;
    default: return ncclFloat32;
    }
}

static ncclRedOp_t nccl_op(llmt_reduce_op op)
{
    switch (op) {
    case LLMT_REDUCE_AVG: return ncclAvg;
    case LLMT_REDUCE_MAX: return ncclMax;
    case LLMT_REDUCE_MIN: return ncclMin;
    default: return ncclSum;
    }
}

/* Poll the async state of a non-blocking communicator until it leaves
 * ncclInProgress. */
static llmt_status nccl_settle(llmt_comm *c, ncclComm_t comm, ncclResult_t r,
                               int64_t deadline, const char *what)
{
    while (r == ncclInProgress) {
        if (llmt__now_ns() > deadline) return LLMT_ERR_TIMEOUT;
        if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
            return LLMT_ERR_ABORTED;
        sched_yield();
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(comm, &ar);
        r = ar;
    }
    if (r != ncclSuccess)
        return llmt__err_set(&c->err, LLMT_ERR_NCCL, "comm: %s: %s", what,
                             ncclGetErrorString(r));
    return LLMT_OK;
}

static llmt_status cuda_fail(llmt_err *e, cudaError_t ce, const char *what)
{
    return llmt__err_set(e, LLMT_ERR_CUDA, "comm: %s: %s", what,
                         cudaGetErrorString(ce));
}

static llmt_status nccl_run(llmt_comm *c, const llmt__coll *a, int64_t deadline)
{
    nccl_be *b = c->be;
    if (b->dead) return LLMT_ERR_ABORTED;
    cudaError_t ce = cudaSetDevice(b->device);
    if (ce != cudaSuccess) return cuda_fail(&c->err, ce, "cudaSetDevice");
    cudaStream_t st = (cudaStream_t)a->stream;
    ncclDataType_t dt = nccl_type(a->dtype);
    size_t es = llmt_dtype_size(a->dtype);
    size_t n = (size_t)c->size;
    ncclResult_t r = ncclSuccess;
    switch (a->kind) {
    case LLMT__OP_ALL_REDUCE:
        r = ncclAllReduce(a->send, a->recv, a->count, dt, nccl_op(a->op),
                          b->comm, st);
        break;
    case LLMT__OP_ALL_GATHER:
        r = ncclAllGather(a->send, a->recv, a->count, dt, b->comm, st);
        break;
    case LLMT__OP_REDUCE_SCATTER:
        r = ncclReduceScatter(a->send, a->recv, a->count, dt, nccl_op(a->op),
                              b->comm, st);
        break;
    case LLMT__OP_BROADCAST:
        r = ncclBroadcast(a->recv, a->recv, a->count, dt, a->root, b->comm, st);
        break;
    case LLMT__OP_BARRIER:
        r = ncclAllReduce(b->scratch, b->scratch, 1, ncclInt32, ncclSum,
                          b->comm, st);
        break;
    case LLMT__OP_SEND:
        r = ncclSend(a->send, a->count, dt, a->peer, b->comm, st);
        break;
    case LLMT__OP_RECV:
        r = ncclRecv(a->recv, a->count, dt, a->peer, b->comm, st);
        break;
    case LLMT__OP_ALL_TO_ALL:
    case LLMT__OP_ALL_TO_ALLV:
        r = ncclGroupStart();
        for (size_t j = 0; r == ncclSuccess && j < n; j++) {
            size_t sc = a->kind == LLMT__OP_ALL_TO_ALL ? a->count : a->scounts[j];
            size_t so = a->kind == LLMT__OP_ALL_TO_ALL ? j * a->count : a->sdispls[j];
            size_t rc = a->kind == LLMT__OP_ALL_TO_ALL ? a->count : a->rcounts[j];
            size_t ro = a->kind == LLMT__OP_ALL_TO_ALL ? j * a->count : a->rdispls[j];
            if (sc) r = ncclSend((const char *)a->send + so * es, sc, dt, (int)j,
                                 b->comm, st);
            if (r == ncclSuccess && rc)
                r = ncclRecv((char *)a->recv + ro * es, rc, dt, (int)j, b->comm, st);
        }
        {
            ncclResult_t r2 = ncclGroupEnd();
            if (r == ncclSuccess) r = r2;
        }
        break;
    default:
        return llmt__err_set(&c->err, LLMT_ERR_INTERNAL, "comm: nccl: op %d",
                             a->kind);
    }
    llmt_status s = nccl_settle(c, b->comm, r, deadline,
                                llmt__comm_op_name(a->kind));
    if (s != LLMT_OK) return s;
    ce = cudaEventRecord(b->ev, st);
    if (ce != cudaSuccess) return cuda_fail(&c->err, ce, "cudaEventRecord");
    for (;;) {
        ce = cudaEventQuery(b->ev);
        if (ce == cudaSuccess) return LLMT_OK;
        if (ce != cudaErrorNotReady) return cuda_fail(&c->err, ce, "cudaEventQuery");
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(b->comm, &ar);
        if (ar != ncclSuccess && ar != ncclInProgress)
            return llmt__err_set(&c->err, LLMT_ERR_NCCL, "comm: %s: %s",
                                 llmt__comm_op_name(a->kind),
                                 ncclGetErrorString(ar));
        if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) return LLMT_ERR_ABORTED;
        if (llmt__now_ns() > deadline) return LLMT_ERR_TIMEOUT;
        sched_yield();
    }
}

static int nccl_diagnose(llmt_comm *c, uint64_t seq, int32_t *missing,
                         int32_t *unreachable, int *nunreach, llmt__sbuf *dump)
{
    (void)seq;
    (void)missing;
    *nunreach = 0;
    llmt__fr_format(dump, c->fr, c->rank);
    for (int32_t r = 0; r < c->size; r++)
        if (r != c->rank) unreachable[(*nunreach)++] = r;
    return 0;
}

static void nccl_abort(llmt_comm *c)
{
    nccl_be *b = c->be;
    if (b && !b->dead) {
        b->dead = 1;
        ncclCommAbort(b->comm);
    }
}

static void nccl_destroy(llmt_comm *c)
{
    nccl_be *b = c->be;
    if (b) {
        cudaSetDevice(b->device);
        if (!b->dead) {
            ncclResult_t r = ncclCommFinalize(b->comm);
            if (r == ncclInProgress || r == ncclSuccess) {
                int64_t dl = llmt__now_ns() + c->timeout_ms * 1000000LL;
                if (nccl_settle(c, b->comm, r, dl, "ncclCommFinalize") == LLMT_OK)
                    ncclCommDestroy(b->comm);
                else
                    ncclCommAbort(b->comm);
            } else {
                ncclCommAbort(b->comm);
            }
        }
        if (b->ev) cudaEventDestroy(b->ev);
        if (b->scratch) cudaFree(b->scratch);
        free(b);
    }
    int owned = c->mpi_owned;
    llmt__comm_free_shell(c);
#ifdef LLMT_HAVE_MPI
    if (owned) llmt__mpi_release(); /* bootstrapped over our MPI_Init */
#else
    (void)owned;
#endif
}

static llmt_status finish(llmt_comm *c, nccl_be *b, ncclComm_t comm)
{
    b->comm = comm;
    cudaError_t ce = cudaEventCreateWithFlags(&b->ev, cudaEventDisableTiming);
    if (ce != cudaSuccess) return cuda_fail(&c->err, ce, "cudaEventCreate");
    ce = cudaMalloc(&b->scratch, 16);
    if (ce != cudaSuccess) return cuda_fail(&c->err, ce, "cudaMalloc");
    cudaMemset(b->scratch, 0, 16);
    return llmt__comm_fr_alloc(c);
}

static int pick_device(const llmt_comm_opts *o)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) return -1;
    if (o && o->cuda_device >= 0) return o->cuda_device;
    llmt_comm_env env;
    llmt_comm_env_discover(&env, sizeof env);
    return env.local_rank % ndev;
}

llmt_status llmt__nccl_create(llmt_context *ctx, const void *id, int32_t rank,
                              int32_t world, const llmt_comm_opts *o,
                              llmt_comm **out)
{
    llmt_err *e = ctx ? &ctx->err : NULL;
    int dev = pick_device(o);
    if (dev < 0)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED, "comm: NCCL needs a CUDA "
                             "device and none is usable");
    cudaError_t ce = cudaSetDevice(dev);
    if (ce != cudaSuccess) return cuda_fail(e, ce, "cudaSetDevice");
    llmt_comm *c = llmt__comm_new(ctx, NULL, o);
    nccl_be *b = calloc(1, sizeof *b);
    if (!c || !b) {
        free(b);
        llmt__comm_free_shell(c);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    }
    b->device = dev;
    c->ops = &nccl_ops;
    c->backend = LLMT_COMM_NCCL;
    c->be = b;
    c->rank = rank;
    c->size = world;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, world, u, rank, &cfg);
    int64_t dl = llmt__now_ns() + c->timeout_ms * 1000000LL;
    llmt_status s = comm ? nccl_settle(c, comm, r, dl, "ncclCommInitRankConfig")
                         : llmt__err_set(&c->err, LLMT_ERR_NCCL,
                                         "comm: ncclCommInitRankConfig: %s",
                                         ncclGetErrorString(r));
    if (s == LLMT_OK) s = finish(c, b, comm);
    if (s != LLMT_OK) {
        if (s == LLMT_ERR_TIMEOUT)
            llmt__err_set(&c->err, s, "comm: NCCL init of rank %d of %d did "
                          "not finish within %lld ms (are all ranks up?)",
                          (int)rank, (int)world, (long long)c->timeout_ms);
        llmt__err_forward(e, &c->err, NULL);
        if (comm) ncclCommAbort(comm);
        b->dead = 1;
        nccl_destroy(c);
        return s;
    }
    *out = c;
    return LLMT_OK;
}

#ifdef LLMT_HAVE_MPI
llmt_status llmt__nccl_create_mpi(llmt_context *ctx, void *mpi_comm,
                                  const llmt_comm_opts *o, llmt_comm **out)
{
    llmt_err *e = ctx ? &ctx->err : NULL;
    MPI_Comm mc = mpi_comm ? *(MPI_Comm *)mpi_comm : MPI_COMM_WORLD;
    int rank, n;
    MPI_Comm_rank(mc, &rank);
    MPI_Comm_size(mc, &n);
    char id[LLMT_COMM_UNIQUE_ID_BYTES];
    memset(id, 0, sizeof id);
    llmt_status s = LLMT_OK;
    if (rank == 0) s = llmt__nccl_unique_id(e, id, sizeof id);
    int ok = s == LLMT_OK;
    MPI_Bcast(&ok, 1, MPI_INT, 0, mc);
    if (!ok)
        return s != LLMT_OK ? s : llmt__err_set(e, LLMT_ERR_NCCL, "comm: rank "
                                                "0 could not make a NCCL id");
    MPI_Bcast(id, (int)sizeof id, MPI_BYTE, 0, mc);
    return llmt__nccl_create(ctx, id, rank, n, o, out);
}
#endif

static llmt_status nccl_split(llmt_comm *c, int32_t color, int32_t key,
                              int64_t deadline, llmt_comm **out)
{
    nccl_be *b = c->be;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t nc = NULL;
    cudaSetDevice(b->device);
    ncclResult_t r = ncclCommSplit(b->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color,
                                   key, &nc, &cfg);
    /* Non-blocking: the split runs as a job of its own that writes `nc`
     * when done (and reads `cfg`, so we must not return before). Wait for
     * the handle, then for the new communicator to be ready. */
    llmt_status s = LLMT_OK;
    if (r != ncclSuccess && r != ncclInProgress)
        s = nccl_settle(c, b->comm, r, deadline, "ncclCommSplit");
    while (s == LLMT_OK && color >= 0 &&
           *(ncclComm_t volatile *)&nc == NULL) {
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(b->comm, &ar);
        if (ar != ncclSuccess && ar != ncclInProgress)
            s = nccl_settle(c, b->comm, ar, deadline, "ncclCommSplit");
        else if (llmt__now_ns() > deadline)
            s = LLMT_ERR_TIMEOUT;
        else
            sched_yield();
    }
    if (s == LLMT_OK)
        s = nccl_settle(c, b->comm, ncclInProgress, deadline, "ncclCommSplit");
    if (s == LLMT_OK && nc)
        s = nccl_settle(c, nc, ncclInProgress, deadline, "ncclCommSplit (new)");
    if (s != LLMT_OK) {
        if (nc) ncclCommAbort(nc);
        return s;
    }
    if (color < 0) return LLMT_OK;
    if (!nc)
        return llmt__err_set(&c->err, LLMT_ERR_NCCL, "comm: ncclCommSplit "
                             "gave no communicator for color %d", (int)color);
    llmt_comm *n = llmt__comm_new(c->ctx, c, NULL);
    nccl_be *nb = calloc(1, sizeof *nb);
    if (!n || !nb) {
        free(nb);
        llmt__comm_free_shell(n);
        ncclCommAbort(nc);
        return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    }
    nb->device = b->device;
    n->ops = &nccl_ops;
    n->backend = LLMT_COMM_NCCL;
    n->be = nb;
    int nr = 0, ns = 0;
    ncclCommUserRank(nc, &nr);
    ncclCommCount(nc, &ns);
    n->rank = nr;
    n->size = ns;
    s = finish(n, nb, nc);
    if (s != LLMT_OK) {
        llmt__err_forward(&c->err, &n->err, NULL);
        nccl_abort(n);
        nccl_destroy(n);
        return s;
    }
    *out = n;
    return LLMT_OK;
}

static const llmt__comm_backend_ops nccl_ops = {
    .name = "nccl",
    .run = nccl_run,
    .split = nccl_split,
    .diagnose = nccl_diagnose,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};
#endif
