/* Gloo backend: one rank per process over TCP, meeting through a file
 * store. Why Gloo and not MPI for fault tolerance: an MPI job dies with any
 * of its ranks, while a Gloo context is just sockets between processes, so
 * when a peer dies or stops the others get an exception (connection closed,
 * or the operation's timeout) and stay alive to build a new context with a
 * new store prefix. Every operation gets the time left to its deadline as
 * Gloo's timeout; a Gloo exception marks the communicator aborted (its pairs
 * may hold half a message) and its context is leaked, never reused. */
#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <signal.h>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

extern "C" {
#include "comm/comm_internal.h"
}

namespace
{

struct gloo_be {
    std::shared_ptr<gloo::rendezvous::FileStore> store;
    std::shared_ptr<gloo::transport::Device> dev;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    std::string store_dir, prefix;
    bool leak = false; /* an operation failed inside Gloo: never free */
};

const uint32_t P2P_SLOT = 0x7f000000u;

std::chrono::milliseconds left(int64_t deadline)
{
    int64_t ms = (deadline - llmt__now_ns()) / 1000000LL;
    return std::chrono::milliseconds(ms > 1 ? ms : 1);
}

llmt_status do_allreduce(gloo_be *b, void *buf, size_t n, llmt_dtype dt, llmt_reduce_op op,
                         uint32_t tag, int64_t deadline)
{
    size_t es = llmt_dtype_size(dt);
    gloo::AllreduceOptions o(b->ctx);
    switch (es) {
    case 2: o.setOutput(static_cast<uint16_t *>(buf), n); break;
    case 4: o.setOutput(static_cast<uint32_t *>(buf), n); break;
    default: o.setOutput(static_cast<uint64_t *>(buf), n); break;
    }
    o.setReduceFunction([dt, op, es](void *c, const void *x, const void *y, size_t k) {
        if (c != x)
            memcpy(c, x, k * es);
        llmt__reduce(dt, op, c, y, k);
    });
    o.setTag(tag);
    o.setTimeout(left(deadline));
    gloo::allreduce(o);
    return LLMT_OK;
}

llmt_status run_op(llmt_comm *c, gloo_be *b, const llmt__coll *a, int64_t deadline)
{
    size_t es = llmt_dtype_size(a->dtype);
    int n = c->size, me = c->rank;
    uint32_t tag = (uint32_t)(a->seq & 0xffffffu);
    switch (a->kind) {
    case LLMT__OP_ALL_REDUCE: {
        if (a->count == 0)
            return LLMT_OK;
        if (a->recv != a->send)
            memcpy(a->recv, a->send, a->count * es);
        if (n > 1)
            do_allreduce(b, a->recv, a->count, a->dtype, a->op, tag, deadline);
        if (a->op == LLMT_REDUCE_AVG)
            llmt__scale_div(a->dtype, a->recv, a->count, n);
        return LLMT_OK;
    }
    case LLMT__OP_REDUCE_SCATTER: {
        if (a->count == 0)
            return LLMT_OK;
        /* Gloo's reduce-scatter is an old-style algorithm on float types
         * only: reduce the whole buffer and keep this rank's block. */
        std::vector<char> tmp(a->count * es * (size_t)n);
        memcpy(tmp.data(), a->send, tmp.size());
        if (n > 1)
            do_allreduce(b, tmp.data(), a->count * (size_t)n, a->dtype, a->op, tag, deadline);
        if (a->op == LLMT_REDUCE_AVG)
            llmt__scale_div(a->dtype, tmp.data() + (size_t)me * a->count * es, a->count, n);
        memcpy(a->recv, tmp.data() + (size_t)me * a->count * es, a->count * es);
        return LLMT_OK;
    }
    case LLMT__OP_ALL_GATHER: {
        if (a->count == 0)
            return LLMT_OK;
        char *out = static_cast<char *>(a->recv);
        std::vector<char> in(static_cast<const char *>(a->send),
                             static_cast<const char *>(a->send) + a->count * es);
        gloo::AllgatherOptions o(b->ctx);
        o.setInput(in.data(), in.size());
        o.setOutput(out, in.size() * (size_t)n);
        o.setTag(tag);
        o.setTimeout(left(deadline));
        gloo::allgather(o);
        return LLMT_OK;
    }
    case LLMT__OP_ALL_TO_ALL: {
        if (a->count == 0)
            return LLMT_OK;
        gloo::AlltoallOptions o(b->ctx);
        o.setInput(const_cast<char *>(static_cast<const char *>(a->send)),
                   a->count * es * (size_t)n);
        o.setOutput(static_cast<char *>(a->recv), a->count * es * (size_t)n);
        o.setTag(tag);
        o.setTimeout(left(deadline));
        gloo::alltoall(o);
        return LLMT_OK;
    }
    case LLMT__OP_ALL_TO_ALLV: {
        /* Gloo takes packed blocks: pack by sdispls, unpack by rdispls. */
        std::vector<int64_t> sc(n), rc(n);
        size_t st = 0, rt = 0;
        for (int i = 0; i < n; i++) {
            sc[i] = (int64_t)(a->scounts[i] * es);
            rc[i] = (int64_t)(a->rcounts[i] * es);
            st += a->scounts[i] * es;
            rt += a->rcounts[i] * es;
        }
        std::vector<char> sb(st ? st : 1), rb(rt ? rt : 1);
        size_t at = 0;
        for (int i = 0; i < n; i++) {
            if (sc[i])
                memcpy(sb.data() + at, static_cast<const char *>(a->send) + a->sdispls[i] * es,
                       (size_t)sc[i]);
            at += (size_t)sc[i];
        }
        gloo::AlltoallvOptions o(b->ctx);
        o.setInput(sb.data(), sc);
        o.setOutput(rb.data(), rc);
        o.setTag(tag);
        o.setTimeout(left(deadline));
        gloo::alltoallv(o);
        at = 0;
        for (int i = 0; i < n; i++) {
            if (rc[i])
                memcpy(static_cast<char *>(a->recv) + a->rdispls[i] * es, rb.data() + at,
                       (size_t)rc[i]);
            at += (size_t)rc[i];
        }
        return LLMT_OK;
    }
    case LLMT__OP_BROADCAST: {
        if (a->count == 0 || n == 1)
            return LLMT_OK;
        gloo::BroadcastOptions o(b->ctx);
        o.setOutput(static_cast<char *>(a->recv), a->count * es);
        o.setRoot(a->root);
        o.setTag(tag);
        o.setTimeout(left(deadline));
        gloo::broadcast(o);
        return LLMT_OK;
    }
    case LLMT__OP_BARRIER: {
        if (n == 1)
            return LLMT_OK;
        gloo::BarrierOptions o(b->ctx);
        o.setTag(tag);
        o.setTimeout(left(deadline));
        gloo::barrier(o);
        return LLMT_OK;
    }
    case LLMT__OP_SEND:
    case LLMT__OP_RECV: {
        size_t bytes = a->count * es;
        char dummy = 0;
        void *p =
            bytes ? (a->kind == LLMT__OP_SEND ? const_cast<void *>(a->send) : a->recv) : &dummy;
        /* The buffer must outlive a timed-out transfer: leaked then. */
        auto ub = b->ctx->createUnboundBuffer(p, bytes ? bytes : 1);
        uint32_t slot = P2P_SLOT + (uint32_t)a->dtype;
        bool ok;
        if (a->kind == LLMT__OP_SEND) {
            ub->send(a->peer, slot, 0, bytes);
            ok = ub->waitSend(left(deadline));
        } else {
            ub->recv(a->peer, slot, 0, bytes);
            ok = ub->waitRecv(left(deadline));
        }
        if (!ok) {
            ub.release();
            return LLMT_ERR_TIMEOUT;
        }
        return LLMT_OK;
    }
    default: return llmt__err_set(&c->err, LLMT_ERR_INTERNAL, "comm: gloo: op %d", a->kind);
    }
}

bool timed_out(const char *what, int64_t deadline)
{
    return strstr(what, "Timed out") || strstr(what, "timed out") || llmt__now_ns() >= deadline;
}

std::string diag_key(uint64_t seq, int32_t rank)
{
    return "diag" + std::to_string((unsigned long long)seq) + "_" + std::to_string(rank);
}

/* Say in the store that this rank reached `seq` (read by gloo_diagnose). */
void publish(llmt_comm *c, gloo_be *b, uint64_t seq)
{
    try {
        auto ps = gloo::rendezvous::PrefixStore(b->prefix, *b->store);
        std::string v = std::to_string((unsigned long long)c->fr->entered);
        ps.set(diag_key(seq, c->rank), std::vector<char>(v.begin(), v.end()));
    } catch (const std::exception &) {
    }
}

/* Turn what Gloo threw into a status; the communicator is aborted. */
llmt_status failed(llmt_comm *c, gloo_be *b, const char *what, const char *op, int64_t deadline)
{
    b->leak = true;
    if (timed_out(what, deadline))
        return LLMT_ERR_TIMEOUT;
    /* the ranks that time out later ask who reached this operation */
    publish(c, b, c->fr->entered);
    __atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
    return llmt__err_set(&c->err, LLMT_ERR_COMM,
                         "comm: %s seq %llu failed on rank %d of %d (gloo): %s; a peer "
                         "died or closed its connection; communicator aborted (create a "
                         "new one with a new prefix)",
                         op, (unsigned long long)c->next_seq - 1, (int)c->rank, (int)c->size,
                         what);
}

llmt_status gloo_run(llmt_comm *c, const llmt__coll *a, int64_t deadline)
{
    gloo_be *b = static_cast<gloo_be *>(c->be);
    try {
        llmt_status s = run_op(c, b, a, deadline);
        if (s == LLMT_ERR_TIMEOUT)
            b->leak = true;
        return s;
    } catch (const std::exception &e) {
        return failed(c, b, e.what(), llmt__comm_op_name(a->kind), deadline);
    }
}

const llmt__comm_backend_ops *ops_table();

/* Connect `rank` of `world` under `prefix`: every rank publishes its
 * address under the prefix, then waits (bounded: 3 x timeout_ms) for all
 * the others. */
llmt_status connect(llmt_err *e, gloo_be *b, int32_t rank, int32_t world, int64_t timeout_ms)
{
    try {
        auto ps = gloo::rendezvous::PrefixStore(b->prefix, *b->store);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
        ctx->setTimeout(std::chrono::milliseconds(timeout_ms));
        /* connectFullMesh waits at most the store's 30 s per key: wait for
         * every rank's address with our own timeout first */
        std::vector<std::string> keys;
        for (int32_t r = 0; r < world; r++)
            keys.push_back("rank_" + std::to_string(r));
        ps.set("rank_" + std::to_string(rank) + "_here", std::vector<char>{'1'});
        std::vector<std::string> here;
        for (int32_t r = 0; r < world; r++)
            here.push_back("rank_" + std::to_string(r) + "_here");
        /* three timeouts: after a failure, a survivor that was not next
         * to the dead rank arrives only when its own collective has timed
         * out (llmtrain launch --in-place), after the spare and the others */
        ps.wait(here, std::chrono::milliseconds(3 * timeout_ms));
        ctx->connectFullMesh(ps, b->dev);
        b->ctx = ctx;
        return LLMT_OK;
    } catch (const std::exception &ex) {
        return llmt__err_set(e, LLMT_ERR_TIMEOUT,
                             "comm: gloo rendezvous of rank %d of %d under prefix '%s' in "
                             "store %s failed: %s",
                             (int)rank, (int)world, b->prefix.c_str(), b->store_dir.c_str(),
                             ex.what());
    }
}

llmt_comm *wrap(llmt_context *ctx, const llmt_comm *parent, const llmt_comm_opts *o, gloo_be *b,
                int32_t rank, int32_t world)
{
    llmt_comm *c = llmt__comm_new(ctx, parent, o);
    if (!c)
        return NULL;
    c->ops = ops_table();
    c->backend = LLMT_COMM_GLOO;
    c->be = b;
    c->rank = rank;
    c->size = world;
    if (llmt__comm_fr_alloc(c) != LLMT_OK) {
        llmt__comm_free_shell(c);
        return NULL;
    }
    return c;
}

llmt_status gloo_split(llmt_comm *c, int32_t color, int32_t key, int64_t deadline,
                       llmt_comm **out)
{
    gloo_be *b = static_cast<gloo_be *>(c->be);
    int n = c->size;
    std::vector<int32_t> all(2 * (size_t)n);
    int32_t mine[2] = {color, key};
    llmt__coll a;
    memset(&a, 0, sizeof a);
    a.kind = LLMT__OP_ALL_GATHER;
    a.send = mine;
    a.recv = all.data();
    a.count = 2;
    a.dtype = LLMT_DTYPE_INT32;
    a.seq = c->next_seq - 1;
    llmt_status s = gloo_run(c, &a, deadline);
    if (s != LLMT_OK)
        return s;
    if (color < 0)
        return LLMT_OK;
    /* members of my color ordered by (key, rank) */
    std::vector<std::pair<int64_t, int32_t>> m;
    for (int r = 0; r < n; r++)
        if (all[2 * (size_t)r] == color)
            /* keys may be negative: multiply, a left shift of a negative
             * value is undefined */
            m.push_back({(int64_t)all[2 * (size_t)r + 1] * ((int64_t)1 << 32) + r, r});
    std::sort(m.begin(), m.end());
    int32_t nr = -1;
    for (size_t i = 0; i < m.size(); i++)
        if (m[i].second == c->rank)
            nr = (int32_t)i;
    gloo_be *nb = new (std::nothrow) gloo_be;
    if (!nb)
        return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    nb->store = b->store;
    nb->dev = b->dev;
    nb->store_dir = b->store_dir;
    nb->prefix = b->prefix + "/split" + std::to_string(a.seq) + "c" + std::to_string(color);
    int64_t ms = (deadline - llmt__now_ns()) / 1000000LL;
    s = connect(&c->err, nb, nr, (int32_t)m.size(), ms > 1 ? ms : 1);
    if (s != LLMT_OK) {
        delete nb;
        return s;
    }
    llmt_comm *nc = wrap(c->ctx, c, NULL, nb, nr, (int32_t)m.size());
    if (!nc) {
        delete nb;
        return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    }
    *out = nc;
    return LLMT_OK;
}

/* After a timeout at `seq`: every rank that times out publishes how far it
 * got under the prefix; ranks whose note does not come within a short grace
 * did not reach `seq` (dead, stopped, or elsewhere in the program). */
int gloo_diagnose(llmt_comm *c, uint64_t seq, int32_t *missing, int32_t *unreach, int *nunreach,
                  llmt__sbuf *dump)
{
    gloo_be *b = static_cast<gloo_be *>(c->be);
    *nunreach = 0;
    llmt__fr_format(dump, c->fr, c->rank);
    int nmiss = 0;
    try {
        auto ps = gloo::rendezvous::PrefixStore(b->prefix, *b->store);
        publish(c, b, seq);
        int64_t grace = c->timeout_ms / 4 < 3000 ? c->timeout_ms / 4 : 3000;
        int64_t until = llmt__now_ns() + (grace > 200 ? grace : 200) * 1000000LL;
        std::vector<bool> seen((size_t)c->size, false);
        seen[(size_t)c->rank] = true;
        for (;;) {
            int left_n = 0;
            for (int32_t r = 0; r < c->size; r++) {
                if (seen[(size_t)r])
                    continue;
                try {
                    ps.wait({diag_key(seq, r)}, std::chrono::milliseconds(1));
                    seen[(size_t)r] = true;
                } catch (const std::exception &) {
                    left_n++;
                }
            }
            if (!left_n || llmt__now_ns() > until)
                break;
            struct timespec ts = {0, 50000000L};
            nanosleep(&ts, NULL);
        }
        for (int32_t r = 0; r < c->size; r++)
            if (!seen[(size_t)r])
                missing[nmiss++] = r;
    } catch (const std::exception &ex) {
        llmt__sb_printf(dump, "rank %d: gloo diagnose: %s\n", (int)c->rank, ex.what());
    }
    (void)unreach;
    return nmiss;
}

void gloo_abort(llmt_comm *c)
{
    /* Gloo cannot interrupt an operation from another thread: the waiting
     * call returns by its deadline. Later calls see the aborted flag. */
    gloo_be *b = static_cast<gloo_be *>(c->be);
    b->leak = true;
}

void gloo_destroy(llmt_comm *c)
{
    gloo_be *b = static_cast<gloo_be *>(c->be);
    if (b && b->leak) {
        /* close this rank's connections, so that the peers still waiting
         * in a collective on them fail at once ("connection closed")
         * instead of at their timeout: after a death, only the dead
         * rank's neighbours would see it early otherwise */
        try {
            for (int32_t r = 0; b->ctx && r < c->size; r++) {
                if (r == c->rank)
                    continue;
                auto &p = b->ctx->getPair(r);
                if (p)
                    p->close();
            }
        } catch (const std::exception &) {
            /* already closed or broken: nothing more to tell the peers */
        }
        /* pairs may still reference our buffers or a dead peer's socket */
        new std::shared_ptr<gloo::rendezvous::Context>(b->ctx);
    }
    delete b;
    c->be = NULL;
    llmt__comm_free_shell(c);
}

/* Sends left in flight (p2p.h): the posted unbound buffer is the request.
 * Gloo can only wait on it (a wait that runs out fails the context), so
 * there is no test. */
typedef std::unique_ptr<gloo::transport::UnboundBuffer> gloo_req;

llmt_status gloo_isend(llmt_comm *c, const llmt__coll *a, void **h)
{
    gloo_be *b = static_cast<gloo_be *>(c->be);
    size_t bytes = a->count * llmt_dtype_size(a->dtype);
    static char dummy;
    try {
        gloo_req *r = new gloo_req(b->ctx->createUnboundBuffer(
            bytes ? const_cast<void *>(a->send) : &dummy, bytes ? bytes : 1));
        (*r)->send(a->peer, P2P_SLOT + (uint32_t)a->dtype, 0, bytes);
        *h = r;
        return LLMT_OK;
    } catch (const std::bad_alloc &) {
        return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    } catch (const std::exception &e) {
        return failed(c, b, e.what(), "send", llmt__now_ns() + 1000000000LL);
    }
}

llmt_status gloo_isend_wait(llmt_comm *c, void *h, int64_t deadline)
{
    gloo_be *b = static_cast<gloo_be *>(c->be);
    gloo_req *r = static_cast<gloo_req *>(h);
    try {
        if (!(*r)->waitSend(left(deadline))) {
            b->leak = true;
            return LLMT_ERR_TIMEOUT;
        }
    } catch (const std::exception &e) {
        return failed(c, b, e.what(), "send", deadline);
    }
    delete r;
    return LLMT_OK;
}

const llmt__comm_backend_ops gloo_ops = {
    "gloo",       gloo_run,   gloo_split, gloo_diagnose,   gloo_abort,
    gloo_destroy, gloo_isend, NULL,       gloo_isend_wait, 0};

const llmt__comm_backend_ops *ops_table()
{
    return &gloo_ops;
}

std::shared_ptr<gloo::transport::Device> make_device()
{
    gloo::transport::tcp::attr at;
    const char *h = getenv("LLMT_GLOO_HOSTNAME");
    const char *i = getenv("LLMT_GLOO_IFACE");
    if (h && *h)
        at.hostname = h;
    else if (i && *i)
        at.iface = i;
    else
        at.hostname = "127.0.0.1";
    return gloo::transport::tcp::CreateDevice(at);
}

/* A peer's death closes its sockets, and Gloo writes with writev: a
 * process that does not ignore SIGPIPE dies of the write instead of
 * getting the error that names the lost peer (and an agent then blames
 * the survivor). The library changes no signal disposition of its host;
 * it says so once (Python, Rust and llmtrain ignore SIGPIPE already). */
void warn_sigpipe(llmt_context *ctx)
{
    static std::atomic<int> said{0};
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) != 0 || sa.sa_handler != SIG_DFL || said.exchange(1))
        return;
    llmt__log(ctx, LLMT_LOG_WARN, "comm",
              "gloo: SIGPIPE has its default action in this process: a peer's death "
              "would kill it during a send instead of failing the collective; "
              "call signal(SIGPIPE, SIG_IGN) before creating the communicator");
}

} // namespace

extern "C" llmt_status llmt__gloo_create(llmt_context *ctx, const char *store_dir,
                                         const char *prefix, int32_t rank, int32_t world,
                                         const llmt_comm_opts *o, llmt_comm **out)
{
    llmt_err *e = ctx ? &ctx->err : NULL;
    gloo_be *b = new (std::nothrow) gloo_be;
    if (!b)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    llmt_comm *c = wrap(ctx, NULL, o, b, rank, world);
    if (!c) {
        delete b;
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    }
    b->store_dir = store_dir;
    b->prefix = prefix;
    warn_sigpipe(ctx);
    try {
        b->store = std::make_shared<gloo::rendezvous::FileStore>(store_dir);
        b->dev = make_device();
    } catch (const std::exception &ex) {
        c->be = NULL;
        delete b;
        llmt__comm_free_shell(c);
        return llmt__err_set(e, LLMT_ERR_COMM, "comm: gloo: store %s or TCP device: %s",
                             store_dir, ex.what());
    }
    llmt_status s = connect(e, b, rank, world, c->timeout_ms);
    if (s != LLMT_OK) {
        c->be = NULL;
        delete b;
        llmt__comm_free_shell(c);
        return s;
    }
    *out = c;
    return LLMT_OK;
}
