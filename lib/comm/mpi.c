/* MPI backend: one rank per process. Every operation is a non-blocking MPI
 * call polled with MPI_Test against the deadline, so a missing peer gives
 * LLMT_ERR_TIMEOUT instead of a hang. The flight recorder of each rank
 * lives in an MPI shared-memory window over the ranks of its node, so that
 * after a timeout a rank can read the recorders of its node's ranks without
 * their help (ranks on other nodes are reported unreachable). A timed-out
 * request cannot be cancelled in MPI: the communicator is marked aborted and
 * never used again (its MPI objects are leaked, not freed collectively). */
#ifdef LLMT_HAVE_MPI
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"

typedef struct mpi_be {
    MPI_Comm comm;
    MPI_Comm node;          /* ranks of this node (shared memory) */
    MPI_Win win;
    int32_t *node_of;       /* comm rank -> node rank, -1 if elsewhere */
    llmt__fr **peer_fr;     /* comm rank -> its recorder, NULL if elsewhere */
    int owned;              /* counts toward the library's MPI_Init */
} mpi_be;

static const llmt__comm_backend_ops mpi_ops;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_owned_refs;    /* comms alive that rely on our MPI_Init */
static int g_inited_by_us;
static MPI_Op g_ops16[2][3]; /* [bf16, fp16][sum, max, min] */
static int g_ops_made;

static llmt_status mpi_fail(llmt_err *e, int rc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "?");
    return llmt__err_set(e, LLMT_ERR_MPI, "comm: %s failed: %s", what, s);
}

llmt_status llmt__mpi_init(llmt_err *e, int *owned)
{
    *owned = 0;
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (fin)
        return llmt__err_set(e, LLMT_ERR_STATE, "comm: MPI is already "
                             "finalized");
    pthread_mutex_lock(&g_mu);
    if (!inited) {
        int prov = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &prov);
        if (rc != MPI_SUCCESS) {
            pthread_mutex_unlock(&g_mu);
            return mpi_fail(e, rc, "MPI_Init_thread");
        }
        g_inited_by_us = 1;
    }
    if (g_inited_by_us) {
        g_owned_refs++;
        *owned = 1;
    }
    pthread_mutex_unlock(&g_mu);
    return LLMT_OK;
}

void llmt__mpi_release(void)
{
    pthread_mutex_lock(&g_mu);
    if (g_owned_refs > 0 && --g_owned_refs == 0 && g_inited_by_us) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) {
            if (g_ops_made) {
                for (int i = 0; i < 2; i++)
                    for (int j = 0; j < 3; j++) MPI_Op_free(&g_ops16[i][j]);
                g_ops_made = 0;
            }
            MPI_Finalize();
        }
        g_inited_by_us = 0;
    }
    pthread_mutex_unlock(&g_mu);
}

/* ---- reduced-precision reductions as MPI user ops */

static void op16(int bf, llmt_reduce_op op, void *in, void *inout, int *len)
{
    llmt__reduce(bf ? LLMT_DTYPE_BF16 : LLMT_DTYPE_FP16, op, inout, in,
                 (size_t)*len);
}
#define OP16(name, bf, op)                                              \
    static void name(void *in, void *io, int *len, MPI_Datatype *dt)    \
    {                                                                   \
        (void)dt;                                                       \
        op16(bf, op, in, io, len);                                      \
    }
OP16(bf16_sum, 1, LLMT_REDUCE_SUM)
OP16(bf16_max, 1, LLMT_REDUCE_MAX)
OP16(bf16_min, 1, LLMT_REDUCE_MIN)
OP16(fp16_sum, 0, LLMT_REDUCE_SUM)
OP16(fp16_max, 0, LLMT_REDUCE_MAX)
OP16(fp16_min, 0, LLMT_REDUCE_MIN)

static void make_ops(void)
{
    pthread_mutex_lock(&g_mu);
    if (!g_ops_made) {
        MPI_Op_create(bf16_sum, 1, &g_ops16[0][0]);
        MPI_Op_create(bf16_max, 1, &g_ops16[0][1]);
        MPI_Op_create(bf16_min, 1, &g_ops16[0][2]);
        MPI_Op_create(fp16_sum, 1, &g_ops16[1][0]);
        MPI_Op_create(fp16_max, 1, &g_ops16[1][1]);
        MPI_Op_create(fp16_min, 1, &g_ops16[1][2]);
        g_ops_made = 1;
    }
    pthread_mutex_unlock(&g_mu);
}

static MPI_Datatype mpi_type(llmt_dtype dt)
{
    switch (dt) {
    case LLMT_DTYPE_FP32: return MPI_FLOAT;
    case LLMT_DTYPE_BF16:
    case LLMT_DTYPE_FP16: return MPI_UINT16_T;
    case LLMT_DTYPE_INT32: return MPI_INT32_T;
    case LLMT_DTYPE_INT64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(llmt_dtype dt, llmt_reduce_op op)
{
    int k = op == LLMT_REDUCE_MAX ? 1 : op == LLMT_REDUCE_MIN ? 2 : 0;
    if (dt == LLMT_DTYPE_BF16 || dt == LLMT_DTYPE_FP16) {
        make_ops();
        return g_ops16[dt == LLMT_DTYPE_BF16 ? 0 : 1][k];
    }
    return k == 1 ? MPI_MAX : k == 2 ? MPI_MIN : MPI_SUM;
}

/* ---- polling */

static llmt_status wait_req(llmt_comm *c, MPI_Request *req, int64_t deadline,
                            MPI_Status *st)
{
    int done = 0;
    int64_t t0 = llmt__now_ns();
    for (unsigned it = 0;; it++) {
        int rc = MPI_Test(req, &done, st ? st : MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(&c->err, rc, "MPI_Test");
        if (done) return LLMT_OK;
        if ((it & 63) == 63) {
            if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
                return LLMT_ERR_ABORTED;
            int64_t now = llmt__now_ns();
            if (now > deadline) return LLMT_ERR_TIMEOUT;
            /* Long waits: let other processes of an oversubscribed node run. */
            if (now - t0 > 1000000) sched_yield();
        }
    }
}

static int fits_int(size_t n) { return n <= (size_t)INT_MAX; }

/* MPI matches collectives by their order on the communicator, not by our
 * sequence numbers: a rank that skipped one would silently pair its next
 * collective with the others' current one. So before posting seq k, wait
 * (bounded) until every rank of this node has entered k or completed it,
 * reading their recorders in shared memory. Ranks of other nodes are not
 * checked (a skip there shows up as a timeout later). */
static llmt_status seq_gate(llmt_comm *c, uint64_t seq, int64_t deadline)
{
    mpi_be *b = c->be;
    if (!b->peer_fr) return LLMT_OK;
    int32_t r = 0;
    for (unsigned it = 0; r < c->size; it++) {
        const llmt__fr *fr = b->peer_fr[r];
        if (!fr || r == c->rank ||
            __atomic_load_n(&fr->entered, __ATOMIC_ACQUIRE) == seq ||
            __atomic_load_n(&fr->completed, __ATOMIC_ACQUIRE) >= seq) {
            r++;
            continue;
        }
        if ((it & 255) == 255) {
            if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
                return LLMT_ERR_ABORTED;
            if (llmt__now_ns() > deadline) return LLMT_ERR_TIMEOUT;
            /* MPI's progress for this rank's posted sends (p2p.h): the
             * rank awaited may first need one of them (a pipeline stage
             * whose step failed joins the step's end while a rendezvous
             * send of its stays in flight, its receiver still before it) */
            int flag = 0;
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, b->comm, &flag, MPI_STATUS_IGNORE);
            sched_yield();
        }
    }
    return LLMT_OK;
}

static llmt_status mpi_run(llmt_comm *c, const llmt__coll *a, int64_t deadline)
{
    mpi_be *b = c->be;
    MPI_Datatype dt = mpi_type(a->dtype);
    size_t es = llmt_dtype_size(a->dtype);
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Status st;
    int rc = MPI_SUCCESS;
    void *tmp = NULL;
    int n = c->size;
    if (!fits_int(a->count) ||
        (a->kind == LLMT__OP_ALL_GATHER && !fits_int(a->count * (size_t)n)))
        return llmt__err_set(&c->err, LLMT_ERR_UNSUPPORTED,
                             "comm: %s: count %zu exceeds MPI's int counts",
                             llmt__comm_op_name(a->kind), a->count);
    int cnt = (int)a->count;
    if (a->seq) {
        llmt_status g = seq_gate(c, a->seq, deadline);
        if (g != LLMT_OK) return g;
    }
    switch (a->kind) {
    case LLMT__OP_ALL_REDUCE:
        if (a->count == 0) return LLMT_OK;
        rc = MPI_Iallreduce(a->send == a->recv ? MPI_IN_PLACE : a->send,
                            a->recv, cnt, dt, mpi_op(a->dtype, a->op), b->comm,
                            &req);
        break;
    case LLMT__OP_ALL_GATHER:
        if (a->count == 0) return LLMT_OK;
        rc = MPI_Iallgather(a->send == (char *)a->recv + (size_t)c->rank * a->count * es
                                ? MPI_IN_PLACE : a->send,
                            cnt, dt, a->recv, cnt, dt, b->comm, &req);
        break;
    case LLMT__OP_REDUCE_SCATTER: {
        if (a->count == 0) return LLMT_OK;
        void *out = a->recv;
        const char *s = a->send;
        if ((const char *)a->recv >= s &&
            (const char *)a->recv < s + a->count * es * (size_t)n) {
            tmp = malloc(a->count * es);
            if (!tmp) return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY,
                                           "comm: no memory");
            out = tmp;
        }
        rc = MPI_Ireduce_scatter_block(a->send, out, cnt, dt,
                                       mpi_op(a->dtype, a->op), b->comm, &req);
        break;
    }
    case LLMT__OP_ALL_TO_ALL:
        if (a->count == 0) return LLMT_OK;
        rc = MPI_Ialltoall(a->send, cnt, dt, a->recv, cnt, dt, b->comm, &req);
        break;
    case LLMT__OP_ALL_TO_ALLV: {
        int *v = malloc(4 * (size_t)n * sizeof *v);
        if (!v) return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY,
                                     "comm: no memory");
        for (int i = 0; i < n; i++) {
            if (!fits_int(a->scounts[i]) || !fits_int(a->sdispls[i]) ||
                !fits_int(a->rcounts[i]) || !fits_int(a->rdispls[i])) {
                free(v);
                return llmt__err_set(&c->err, LLMT_ERR_UNSUPPORTED,
                                     "comm: all_to_allv: counts or "
                                     "displacements beyond MPI's int");
            }
            v[i] = (int)a->scounts[i];
            v[n + i] = (int)a->sdispls[i];
            v[2 * n + i] = (int)a->rcounts[i];
            v[3 * n + i] = (int)a->rdispls[i];
        }
        rc = MPI_Ialltoallv(a->send, v, v + n, dt, a->recv, v + 2 * n,
                            v + 3 * n, dt, b->comm, &req);
        tmp = v; /* the arrays must live until completion */
        break;
    }
    case LLMT__OP_BROADCAST:
        if (a->count == 0) return LLMT_OK;
        rc = MPI_Ibcast(a->recv, cnt, dt, a->root, b->comm, &req);
        break;
    case LLMT__OP_BARRIER:
        rc = MPI_Ibarrier(b->comm, &req);
        break;
    case LLMT__OP_SEND:
        rc = MPI_Isend(a->send, cnt, dt, a->peer, 100 + (int)a->dtype, b->comm,
                       &req);
        break;
    case LLMT__OP_RECV:
        rc = MPI_Irecv(a->recv, cnt, dt, a->peer, 100 + (int)a->dtype, b->comm,
                       &req);
        break;
    default:
        return llmt__err_set(&c->err, LLMT_ERR_INTERNAL, "comm: mpi: op %d",
                             a->kind);
    }
    if (rc != MPI_SUCCESS) {
        free(tmp);
        return mpi_fail(&c->err, rc, llmt__comm_op_name(a->kind));
    }
    llmt_status s = wait_req(c, &req, deadline, &st);
    if (s == LLMT_ERR_TIMEOUT || s == LLMT_ERR_ABORTED) {
        /* The request stays pending inside MPI: its buffers (tmp) must
         * stay allocated; leak them with the communicator. */
        return s;
    }
    if (s == LLMT_OK && a->kind == LLMT__OP_RECV) {
        int got = 0;
        MPI_Get_count(&st, dt, &got);
        if ((size_t)got != a->count)
            s = llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                              "comm: recv from rank %d: expected %zu x %s, "
                              "the message has %d", (int)a->peer, a->count,
                              llmt_dtype_name(a->dtype), got);
    }
    if (s == LLMT_OK && a->kind == LLMT__OP_REDUCE_SCATTER && tmp)
        memcpy(a->recv, tmp, a->count * es);
    if (s == LLMT_OK && a->op == LLMT_REDUCE_AVG &&
        (a->kind == LLMT__OP_ALL_REDUCE || a->kind == LLMT__OP_REDUCE_SCATTER))
        llmt__scale_div(a->dtype, a->recv, a->count, n);
    free(tmp);
    return s;
}

/* ---- sends left in flight (p2p.h): MPI_Isend, the request on the heap
 * until it is done (timed out: leaked with the communicator) */

static llmt_status mpi_isend(llmt_comm *c, const llmt__coll *a, void **h)
{
    mpi_be *b = c->be;
    if (!fits_int(a->count))
        return llmt__err_set(&c->err, LLMT_ERR_UNSUPPORTED,
                             "comm: send: count %zu exceeds MPI's int counts", a->count);
    MPI_Request *req = malloc(sizeof *req);
    if (!req)
        return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    int rc = MPI_Isend(a->send, (int)a->count, mpi_type(a->dtype), a->peer, 100 + (int)a->dtype,
                       b->comm, req);
    if (rc != MPI_SUCCESS) {
        free(req);
        return mpi_fail(&c->err, rc, "MPI_Isend");
    }
    *h = req;
    return LLMT_OK;
}

static llmt_status mpi_isend_test(llmt_comm *c, void *h, int *done)
{
    int rc = MPI_Test(h, done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
        return mpi_fail(&c->err, rc, "MPI_Test");
    if (*done)
        free(h);
    return LLMT_OK;
}

static llmt_status mpi_isend_wait(llmt_comm *c, void *h, int64_t deadline)
{
    llmt_status s = wait_req(c, h, deadline, NULL);
    if (s == LLMT_OK)
        free(h);
    return s;
}

/* ---- diagnosis through the node's shared recorders */

static int mpi_diagnose(llmt_comm *c, uint64_t seq, int32_t *missing,
                        int32_t *unreachable, int *nunreach, llmt__sbuf *dump)
{
    mpi_be *b = c->be;
    int n = 0;
    *nunreach = 0;
    for (int32_t r = 0; r < c->size; r++) {
        llmt__fr *fr = b->peer_fr ? b->peer_fr[r] : (r == c->rank ? c->fr : NULL);
        if (!fr) {
            unreachable[(*nunreach)++] = r;
            continue;
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        llmt__fr_format(dump, fr, r);
        uint64_t entered = __atomic_load_n(&fr->entered, __ATOMIC_ACQUIRE);
        int reached = entered == seq;
        if (entered > seq) {
            uint64_t w = fr->written, first = w > fr->cap ? w - fr->cap : 0;
            for (uint64_t i = first; i < w; i++) {
                const llmt__fr_entry *e = &fr->e[i % fr->cap];
                if (e->seq == seq && e->state != LLMT__FR_SKIPPED) reached = 1;
            }
            if (w - first >= fr->cap && !reached) {
                /* seq fell out of its ring: assume it was there */
                reached = fr->e[first % fr->cap].seq > seq;
            }
        }
        if (!reached) missing[n++] = r;
    }
    return n;
}

/* ---- creation */

static llmt_status setup(llmt_comm *c, mpi_be *b)
{
    int rc = MPI_Comm_split_type(b->comm, MPI_COMM_TYPE_SHARED, 0,
                                 MPI_INFO_NULL, &b->node);
    if (rc != MPI_SUCCESS) return mpi_fail(&c->err, rc, "MPI_Comm_split_type");
    void *base = NULL;
    MPI_Aint bytes = (MPI_Aint)llmt__fr_bytes((uint64_t)c->recorder_size);
    rc = MPI_Win_allocate_shared(bytes, 1, MPI_INFO_NULL, b->node, &base,
                                 &b->win);
    if (rc != MPI_SUCCESS)
        return mpi_fail(&c->err, rc, "MPI_Win_allocate_shared");
    memset(base, 0, (size_t)bytes);
    c->fr = base;
    c->fr->cap = (uint64_t)c->recorder_size;
    c->fr_ext = 1;
    b->node_of = calloc((size_t)c->size, sizeof *b->node_of);
    b->peer_fr = calloc((size_t)c->size, sizeof *b->peer_fr);
    int *all = malloc((size_t)c->size * sizeof *all);
    if (!b->node_of || !b->peer_fr || !all) {
        free(all);
        return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    }
    MPI_Group gw, gn;
    MPI_Comm_group(b->comm, &gw);
    MPI_Comm_group(b->node, &gn);
    for (int i = 0; i < c->size; i++) all[i] = i;
    MPI_Group_translate_ranks(gw, c->size, all, gn, b->node_of);
    MPI_Group_free(&gw);
    MPI_Group_free(&gn);
    free(all);
    for (int r = 0; r < c->size; r++) {
        if (b->node_of[r] == MPI_UNDEFINED || b->node_of[r] < 0) {
            b->node_of[r] = -1;
            continue;
        }
        MPI_Aint sz;
        int du;
        void *p = NULL;
        if (MPI_Win_shared_query(b->win, b->node_of[r], &sz, &du, &p) ==
                MPI_SUCCESS && p)
            b->peer_fr[r] = p;
    }
    /* Everyone has zeroed its recorder before anyone can read it. */
    MPI_Barrier(b->node);
    return LLMT_OK;
}

static llmt_comm *wrap(llmt_context *ctx, const llmt_comm *parent,
                       const llmt_comm_opts *o, MPI_Comm dup, llmt_err *e,
                       llmt_status *st)
{
    llmt_comm *c = llmt__comm_new(ctx, parent, o);
    mpi_be *b = calloc(1, sizeof *b);
    if (!c || !b) {
        free(b);
        llmt__comm_free_shell(c);
        MPI_Comm_free(&dup);
        *st = llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
        return NULL;
    }
    b->comm = dup;
    b->node = MPI_COMM_NULL;
    b->win = MPI_WIN_NULL;
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    c->ops = &mpi_ops;
    c->backend = LLMT_COMM_MPI;
    c->be = b;
    int r, n;
    MPI_Comm_rank(dup, &r);
    MPI_Comm_size(dup, &n);
    c->rank = r;
    c->size = n;
    *st = setup(c, b);
    if (*st != LLMT_OK) {
        llmt__err_forward(e, &c->err, NULL);
        c->ops->destroy(c);
        return NULL;
    }
    return c;
}

llmt_status llmt__mpi_create(llmt_context *ctx, void *mpi_comm,
                             const llmt_comm_opts *o, int init_owned,
                             llmt_comm **out)
{
    llmt_err *e = ctx ? &ctx->err : NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited)
        return llmt__err_set(e, LLMT_ERR_STATE, "comm: MPI is not "
                             "initialised (call MPI_Init_thread first)");
    int prov = 0;
    MPI_Query_thread(&prov);
    if (prov < MPI_THREAD_SERIALIZED)
        return llmt__err_set(e, LLMT_ERR_STATE, "comm: MPI thread level %d; "
                             "need MPI_THREAD_SERIALIZED or better", prov);
    MPI_Comm src = mpi_comm ? *(MPI_Comm *)mpi_comm : MPI_COMM_WORLD;
    MPI_Comm dup;
    int rc = MPI_Comm_dup(src, &dup);
    if (rc != MPI_SUCCESS) return mpi_fail(e, rc, "MPI_Comm_dup");
    llmt_status st = LLMT_OK;
    llmt_comm *c = wrap(ctx, NULL, o, dup, e, &st);
    if (!c) return st;
    ((mpi_be *)c->be)->owned = init_owned;
    c->mpi_owned = init_owned;
    *out = c;
    return LLMT_OK;
}

static llmt_status mpi_split(llmt_comm *c, int32_t color, int32_t key,
                             int64_t deadline, llmt_comm **out)
{
    mpi_be *b = c->be;
    /* A bounded exchange first: once every rank is known to be here, the
     * blocking MPI_Comm_split cannot hang on a missing rank. */
    llmt_status g = seq_gate(c, c->next_seq - 1, deadline);
    if (g != LLMT_OK) return g;
    int mine[2] = {color, key};
    int *all = malloc(2 * (size_t)c->size * sizeof *all);
    if (!all) return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    MPI_Request req;
    int rc = MPI_Iallgather(mine, 2, MPI_INT, all, 2, MPI_INT, b->comm, &req);
    if (rc != MPI_SUCCESS) {
        free(all);
        return mpi_fail(&c->err, rc, "MPI_Iallgather");
    }
    llmt_status s = wait_req(c, &req, deadline, NULL);
    if (s != LLMT_OK) return s; /* `all` leaks with the pending request */
    free(all);
    MPI_Comm nc;
    rc = MPI_Comm_split(b->comm, color < 0 ? MPI_UNDEFINED : color, key, &nc);
    if (rc != MPI_SUCCESS) return mpi_fail(&c->err, rc, "MPI_Comm_split");
    if (nc == MPI_COMM_NULL) return LLMT_OK;
    llmt_status st = LLMT_OK;
    llmt_comm *n = wrap(c->ctx, c, NULL, nc, &c->err, &st);
    if (!n) return st;
    *out = n;
    return LLMT_OK;
}

static void mpi_abort(llmt_comm *c) { (void)c; }

/* Freeing the window (and the communicator) is collective: only safe when
 * every rank is here to free it too. A rank of this node that aborted says
 * so in its recorder; otherwise a bounded barrier decides (a rank that
 * aborted elsewhere never comes, and the objects are then leaked). */
static int all_here_to_free(llmt_comm *c, mpi_be *b)
{
    for (int32_t r = 0; b->peer_fr && r < c->size; r++)
        if (b->peer_fr[r] &&
            __atomic_load_n(&b->peer_fr[r]->aborted, __ATOMIC_ACQUIRE))
            return 0;
    MPI_Request req;
    if (MPI_Ibarrier(b->comm, &req) != MPI_SUCCESS) return 0;
    int64_t ms = c->timeout_ms < 5000 ? c->timeout_ms : 5000;
    int64_t deadline = llmt__now_ns() + ms * 1000000LL;
    for (;;) {
        int done = 0;
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
        if (done) return 1;
        for (int32_t r = 0; b->peer_fr && r < c->size; r++)
            if (b->peer_fr[r] &&
                __atomic_load_n(&b->peer_fr[r]->aborted, __ATOMIC_ACQUIRE))
                return 0;
        if (llmt__now_ns() > deadline) return 0;
        sched_yield();
    }
}

static void mpi_destroy(llmt_comm *c)
{
    mpi_be *b = c->be;
    int fin = 0;
    MPI_Finalized(&fin);
    if (b && !fin && !c->aborted && b->win != MPI_WIN_NULL &&
        !all_here_to_free(c, b)) {
        c->aborted = 1; /* leak: see all_here_to_free */
        llmt__log(c->ctx, LLMT_LOG_WARN, "comm", "rank %d: not every rank "
                  "destroyed the communicator (one aborted): its MPI objects "
                  "are left allocated", (int)c->rank);
    }
    if (b && !fin && !c->aborted) {
        if (b->win != MPI_WIN_NULL) MPI_Win_free(&b->win);
        if (b->node != MPI_COMM_NULL) MPI_Comm_free(&b->node);
        MPI_Comm_free(&b->comm);
    } else if (c->fr_ext && b && b->win == MPI_WIN_NULL) {
        c->fr_ext = 0;
    }
    if (c->fr_ext) c->fr = NULL; /* window memory: not ours to free */
    int owned = b ? b->owned : 0;
    if (b) {
        free(b->node_of);
        free(b->peer_fr);
        free(b);
    }
    llmt__comm_free_shell(c);
    if (owned) llmt__mpi_release();
}

static const llmt__comm_backend_ops mpi_ops = {
    .name = "mpi",
    .run = mpi_run,
    .split = mpi_split,
    .diagnose = mpi_diagnose,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
    .isend = mpi_isend,
    .isend_test = mpi_isend_test,
    .isend_wait = mpi_isend_wait,
};
#endif
