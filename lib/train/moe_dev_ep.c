/* Expert parallelism of a MoE layer run through the op table: moe_ep.h's
 * exchange (each rank routes its own tokens, fixed-shape blocks of
 * capacity rows per (rank, expert), two all-to-alls a pass, the owner
 * computing only the real rows) on the backend's rows in its storage
 * type, the copies by the table's d2d, the experts by moe_dev.c's. The
 * counts and the owner's packing are moe_ep.c's own (a tables-only
 * llmt__moe_ep), so both paths exchange the same rows.
 *
 * The communicator reads and writes host memory (in-process, Gloo, MPI;
 * NCCL is refused: llmt__moe_dctx_set_ep). On a backend whose memory is
 * not the host's (the op table's host_memory 0: CUDA) each all-to-all is
 * staged as lib/train/tp.c and cp.c stage theirs: the send buffer copied
 * out by the table's d2h into a host copy, the all-to-all between host
 * copies, the received rows copied back by h2d. The table's copies are
 * queued on the engine's one stream and synchronise it (lib/exec/dev.h),
 * so the copy out reads what the packing wrote. The host copies are
 * plain malloc, made once with the exchange's scratch. Bit for bit the
 * unstaged exchange on the emulation (test moe-engine-emul); not yet run
 * on a GPU (the CUDA table's unverified_moe_groups). */
#include <stdlib.h>
#include <string.h>

#include "train/moe_dev.h"
#include "train/moe_dev_impl.h"

#define OP(call, what) LLMT__MOE_OP(x, call, what)

static void ep_free_scratch(llmt__moe_dctx *x)
{
    void **b[] = {&x->sbuf, &x->rbuf, &x->yo, &x->dyo, &x->dxo, &x->edact, &x->edh1, &x->edh3};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        llmt__moe_dfree(x, *b[i]);
        *b[i] = NULL;
    }
    free(x->hstage);
    x->hstage = NULL;
    x->ep_rank = 0;
    x->ep_size = 1;
    x->block = 0;
}

llmt_status llmt__moe_dctx_set_ep(llmt__moe_dctx *x, llmt_comm *comm)
{
    int32_t rank = 0, size = 1;
    llmt_comm_backend be = LLMT_COMM_AUTO;
    if (comm &&
        (llmt_comm_rank(comm, &rank) != LLMT_OK || llmt_comm_size(comm, &size) != LLMT_OK ||
         llmt_comm_backend_of(comm, &be) != LLMT_OK))
        return llmt__err_set(x->e, LLMT_ERR_INVALID_ARGUMENT, "trainer: set_ep_comm: %s",
                             llmt_comm_last_error(comm));
    /* a2a hands the communicator host memory (the backend's own, or the
     * host copies below), and moe_ep.c's counts are host arrays: a NCCL
     * group would take neither (refused at any size: a one-rank group
     * exchanges nothing, but the layout it stands for would fail) */
    if (be == LLMT_COMM_NCCL)
        return llmt__err_set(
            x->e, LLMT_ERR_UNSUPPORTED,
            "trainer: set_ep_comm: parallelism.ep %d over a NCCL communicator with MoE "
            "layers on device %s: the expert parallel exchange (lib/train/moe_dev_ep.c) "
            "and its counts go through host memory, which NCCL does not take; use an "
            "in-process, Gloo or MPI communicator as the EP group",
            (int)size, x->op->name);
    ep_free_scratch(x);
    if (size <= 1) /* fp8 experts: all E of them on this rank again */
        return llmt__moe_dctx_fp8_resize(x);
    x->block = llmt__moe_capacity(&x->sh, x->Nmax);
    /* the exchange's buffers: E x block rows (the all-to-all's fixed
     * shape); the owner's: the rows it can receive (O <= E x block) */
    size_t R = (size_t)x->sh.E * (size_t)x->block, C = (size_t)x->sh.C, F = (size_t)x->sh.F,
           O = llmt__moe_dctx_owner_rows(x, size);
    void **rx[] = {&x->sbuf, &x->rbuf};
    void **rc[] = {&x->yo, &x->dyo, &x->dxo};
    void **rf[] = {&x->edact, &x->edh1, &x->edh3};
    llmt_status s = LLMT_OK;
    for (size_t i = 0; s == LLMT_OK && i < 2; i++)
        s = llmt__moe_dalloc(x, rx[i], R * C * x->es);
    for (size_t i = 0; s == LLMT_OK && i < 3; i++)
        s = llmt__moe_dalloc(x, rc[i], O * C * x->es);
    for (size_t i = 0; s == LLMT_OK && i < 3; i++)
        s = llmt__moe_dalloc(x, rf[i], O * F * x->es);
    /* a device backend's host copies of the send and receive buffers */
    if (s == LLMT_OK && !x->host && !(x->hstage = malloc(2 * R * C * x->es)))
        s = llmt__err_set(x->e, LLMT_ERR_OUT_OF_MEMORY,
                          "trainer: set_ep_comm: no host memory for the %zu bytes of the "
                          "expert parallel exchange's staging",
                          2 * R * C * x->es);
    if (s != LLMT_OK) {
        ep_free_scratch(x);
        return s;
    }
    x->ep_rank = rank;
    x->ep_size = size;
    /* fp8 experts: this rank's E/size, an owner's rows (up to E x block) */
    return llmt__moe_dctx_fp8_resize(x);
}

void llmt__moe_dep_free(llmt__moe_dctx *x, llmt__moe_dep *q)
{
    if (!q)
        return;
    llmt__moe_ep_free(q->t);
    void *b[] = {q->xo, q->h1, q->h3, q->act};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        llmt__moe_dfree(x, b[i]);
    free(q->r0);
    free(q->nr);
    free(q);
}

llmt_status llmt__moe_dep_new(llmt__moe_dctx *x, llmt__moe_dep **out)
{
    *out = NULL;
    llmt__moe_dep *q = calloc(1, sizeof *q);
    int El = x->ep_size > 0 ? x->sh.E / x->ep_size : 0;
    if (q) {
        q->t = llmt__moe_ep_new_rows(&x->sh, x->Nmax, x->ep_rank, x->ep_size, 0);
        q->r0 = calloc((size_t)El + 1, sizeof *q->r0);
        q->nr = calloc((size_t)El + 1, sizeof *q->nr);
    }
    if (!q || !q->t || !q->r0 || !q->nr) {
        llmt__moe_dep_free(x, q);
        return llmt__err_set(x->e, LLMT_ERR_OUT_OF_MEMORY,
                             "trainer: moe: no memory for an expert parallel exchange");
    }
    size_t O = llmt__moe_dctx_owner_rows(x, x->ep_size), C = (size_t)x->sh.C,
           F = (size_t)x->sh.F;
    llmt_status s = llmt__moe_dalloc(x, &q->xo, O * C * x->es);
    void **rf[] = {&q->h1, &q->h3, &q->act};
    for (size_t i = 0; s == LLMT_OK && i < 3; i++)
        s = llmt__moe_dalloc(x, rf[i], O * F * x->es);
    if (s != LLMT_OK) {
        llmt__moe_dep_free(x, q);
        return s;
    }
    *out = q;
    return LLMT_OK;
}

/* Packed rows (s->start, s->kept) of width w into the exchange layout
 * [E][block][w], zeros after each expert's kept rows. */
static llmt_status pack(llmt__moe_dctx *x, const llmt__moe *s, const void *rows, void *out,
                        size_t w)
{
    size_t B = (size_t)x->block;
    for (int e = 0; e < x->sh.E; e++) {
        size_t k = (size_t)s->kept[e];
        void *o = llmt__moe_dat(x, out, (size_t)e * B * w);
        if (k)
            OP(x->op->d2d(x->d, o, llmt__moe_dat(x, rows, (size_t)s->start[e] * w),
                          k * w * x->es),
               "moe exchange pack");
        if (k < B)
            OP(x->op->memset0(x->d, llmt__moe_dat(x, o, k * w), (B - k) * w * x->es),
               "moe exchange pack");
    }
    return LLMT_OK;
}

static llmt_status unpack(llmt__moe_dctx *x, const llmt__moe *s, const void *in, void *rows,
                          size_t w)
{
    size_t B = (size_t)x->block;
    for (int e = 0; e < x->sh.E; e++) {
        size_t k = (size_t)s->kept[e];
        if (k)
            OP(x->op->d2d(x->d, llmt__moe_dat(x, rows, (size_t)s->start[e] * w),
                          llmt__moe_dat(x, in, (size_t)e * B * w), k * w * x->es),
               "moe exchange unpack");
    }
    return LLMT_OK;
}

/* Received [size][El][block][w] -> the owner's rows packed expert-major
 * (to = 1), or back (to = 0). */
static llmt_status owner(llmt__moe_dctx *x, const llmt__moe_dep *q, const void *in, void *out,
                         size_t w, int to)
{
    size_t B = (size_t)x->block;
    int El = llmt__moe_ep_local(q->t);
    for (int src = 0; src < x->ep_size; src++)
        for (int el = 0; el < El; el++) {
            size_t n = (size_t)llmt__moe_ep_owner_cnt(q->t, el, src) * w;
            void *blk = llmt__moe_dat(x, to ? in : out, ((size_t)src * El + el) * B * w);
            void *own = llmt__moe_dat(x, to ? out : in,
                                      (size_t)llmt__moe_ep_owner_off(q->t, el, src) * w);
            if (n)
                OP(x->op->d2d(x->d, to ? own : blk, to ? blk : own, n * x->es),
                   "moe exchange owner rows");
        }
    return LLMT_OK;
}

/* The all-to-all of x->sbuf into x->rbuf; on a device backend through
 * their host copies (the file's opening comment). */
static llmt_status a2a(llmt__moe_dctx *x, llmt_comm *comm, const char *what)
{
    size_t n = (size_t)(x->sh.E / x->ep_size) * x->block * x->sh.C;
    size_t all = n * (size_t)x->ep_size * x->es;
    llmt_dtype t = x->es == sizeof(float) ? LLMT_DTYPE_FP32 : LLMT_DTYPE_BF16;
    void *snd = x->sbuf, *rcv = x->rbuf;
    if (x->host)
        OP(x->op->sync(x->d), "moe exchange");
    else { /* d2h synchronises the stream */
        snd = x->hstage;
        rcv = (char *)x->hstage + all;
        OP(x->op->d2h(x->d, snd, x->sbuf, all), "moe exchange: staging out to host memory");
    }
    llmt_status st = llmt_comm_all_to_all(comm, snd, rcv, n, t, NULL);
    if (st != LLMT_OK)
        return llmt__err_set(x->e, st, "trainer: moe: expert parallel all-to-all (%s): %s",
                             what, llmt_comm_last_error(comm));
    if (!x->host)
        OP(x->op->h2d(x->d, x->rbuf, rcv, all), "moe exchange: staging back from host memory");
    return LLMT_OK;
}

/* The owner's packing of its local experts (after the counts). Never
 * past the room of its rows (llmt__moe_dctx_owner_rows): the counts'
 * all-gather (llmt__moe_ep_counts) checked every owner's counts against
 * that room and every block on every rank of the group, so a call past
 * it was refused on all of them alike before any all-to-all (test
 * moe-dev-ep-refuse); a check here, by this owner alone, would leave
 * the other ranks waiting in the dispatch until the collective timeout. */
static void packing(llmt__moe_dep *q)
{
    for (int el = 0; el < llmt__moe_ep_local(q->t); el++) {
        q->r0[el] = llmt__moe_ep_owner_off(q->t, el, 0);
        q->nr[el] = llmt__moe_ep_owner_rows(q->t, el);
    }
}

llmt_status llmt__moe_dev_ep_fwd(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe_dep *q,
                                 llmt__moe *s, llmt_comm *comm, const llmt__moe_dw *w,
                                 const void *xin, void *y, int N)
{
    size_t C = (size_t)x->sh.C;
    llmt_status st;
    if ((st = llmt__moe_dev_route(x, p, s, w, xin, N)) != LLMT_OK ||
        (st = llmt__moe_ep_counts(q->t, s, comm, x->e)) != LLMT_OK)
        return st;
    packing(q);
    if ((st = pack(x, s, p->xe, x->sbuf, C)) != LLMT_OK ||
        (st = a2a(x, comm, "dispatch")) != LLMT_OK ||
        (st = owner(x, q, x->rbuf, q->xo, C, 1)) != LLMT_OK)
        return st;
    if ((st = llmt__moe_dev_experts_fwd(x, w, llmt__moe_ep_local(q->t), q->r0, q->nr, q->xo,
                                        q->h1, q->h3, q->act, x->yo)) != LLMT_OK ||
        (st = owner(x, q, x->yo, x->sbuf, C, 0)) != LLMT_OK ||
        (st = a2a(x, comm, "combine")) != LLMT_OK ||
        (st = unpack(x, s, x->rbuf, p->ye, C)) != LLMT_OK)
        return st;
    return llmt__moe_dev_combine(x, p, s, w, xin, y, N);
}

llmt_status llmt__moe_dev_ep_bwd(llmt__moe_dctx *x, llmt__moe_dlay *p, llmt__moe_dep *q,
                                 llmt__moe *s, llmt_comm *comm, const llmt__moe_dw *w,
                                 const llmt__moe_dw *g, const void *xin, const void *dy,
                                 void *dx, float aux_coef, float z_coef)
{
    size_t C = (size_t)x->sh.C;
    llmt_status st;
    packing(q); /* the forward's counts */
    if ((st = llmt__moe_dev_combine_bwd(x, p, s, dy)) != LLMT_OK ||
        (st = pack(x, s, x->dye, x->sbuf, C)) != LLMT_OK ||
        (st = a2a(x, comm, "output gradients")) != LLMT_OK ||
        (st = owner(x, q, x->rbuf, x->dyo, C, 1)) != LLMT_OK)
        return st;
    if ((st = llmt__moe_dev_experts_bwd(x, w, g, llmt__moe_ep_local(q->t), q->r0, q->nr, q->xo,
                                        q->h1, q->h3, q->act, x->dyo, x->edact, x->edh1,
                                        x->edh3, x->dxo)) != LLMT_OK ||
        (st = owner(x, q, x->dxo, x->sbuf, C, 0)) != LLMT_OK ||
        (st = a2a(x, comm, "input gradients")) != LLMT_OK ||
        (st = unpack(x, s, x->rbuf, x->dxe, C)) != LLMT_OK)
        return st;
    return llmt__moe_dev_router_bwd(x, p, s, w, g, xin, dy, dx, aux_coef, z_coef);
}
