/* Communicators: the public API, options, launcher discovery, sequence
 * numbers, the flight recorder, timeouts and the async progress thread.
 * The backends (inproc.c, mpi.c, nccl.c) only move data. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "comm/p2p.h"

/* ---- small helpers */

int64_t llmt__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

double llmt__unix_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const op_names[LLMT__OP_COUNT] = {
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_allv",
    "broadcast",  "send",       "recv",           "barrier",    "split"};

const char *llmt__comm_op_name(int kind)
{
    return kind >= 0 && kind < LLMT__OP_COUNT ? op_names[kind] : "unknown";
}

static const char *state_name(int st)
{
    switch (st) {
    case LLMT__FR_STARTED: return "started";
    case LLMT__FR_COMPLETED: return "completed";
    case LLMT__FR_TIMEOUT: return "timeout";
    case LLMT__FR_ERROR: return "error";
    case LLMT__FR_SKIPPED: return "skipped";
    case LLMT__FR_ABORTED: return "aborted";
    default: return "empty";
    }
}

static void fmt_entry(llmt__sbuf *s, const llmt__fr_entry *e, int32_t rank)
{
    double dur = e->t_end > 0 ? (e->t_end - e->t_start) * 1e6 : -1.0;
    if (rank >= 0) llmt__sb_printf(s, "rank %d: ", (int)rank);
    llmt__sb_printf(s,
                    "seq=%llu op=%s dtype=%s count=%lld peer=%d size=%d "
                    "state=%s start=%.6f end=%.6f dur_us=%.0f\n",
                    (unsigned long long)e->seq, llmt__comm_op_name(e->op),
                    llmt_dtype_name((llmt_dtype)e->dtype), (long long)e->count,
                    (int)e->peer, (int)e->size, state_name(e->state),
                    e->t_start, e->t_end, dur);
}

void llmt__fr_format(llmt__sbuf *s, const llmt__fr *fr, int32_t rank)
{
    /* Read a snapshot (another process may be writing: tolerate tears). */
    uint64_t written = ((volatile const llmt__fr *)fr)->written;
    uint64_t cap = fr->cap;
    uint64_t first = written > cap ? written - cap : 0;
    llmt__sb_printf(s, "rank %d: recorder entered=%llu completed=%llu "
                    "entries=%llu\n", (int)rank,
                    (unsigned long long)fr->entered,
                    (unsigned long long)fr->completed,
                    (unsigned long long)(written - first));
    for (uint64_t i = first; i < written; i++) {
        llmt__fr_entry e = fr->e[i % cap];
        fmt_entry(s, &e, rank);
    }
}

/* ---- options and discovery */

LLMT_API llmt_status llmt_comm_opts_init(llmt_comm_opts *o, size_t size)
{
    llmt_comm_opts d = {0};
    d.backend = LLMT_COMM_AUTO;
    d.timeout_ms = 0; /* resolved at create: env or 300000 */
    d.recorder_size = 1024;
    d.dump_path = NULL;
    d.cuda_device = -1;
    d.rendezvous_path = NULL;
    return llmt__opts_init(o, size, 0, &d, sizeof d, "llmt_comm_opts");
}

static int env_int(const char *name, long long *out)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end) return 0;
    *out = x;
    return 1;
}

LLMT_API llmt_status llmt_comm_env_discover(llmt_comm_env *out, size_t size)
{
    if (!out) return LLMT_ERR_NULL_POINTER;
    if (size < sizeof *out) return LLMT_ERR_STRUCT_SIZE;
    memset(out, 0, size);
    out->struct_size = size;
    long long r = 0, w = 1, lr = -1, ls = -1;
    const char *launcher = "none";
    if (env_int("OMPI_COMM_WORLD_RANK", &r) &&
        env_int("OMPI_COMM_WORLD_SIZE", &w)) {
        launcher = "openmpi";
        env_int("OMPI_COMM_WORLD_LOCAL_RANK", &lr);
        env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &ls);
    } else if (env_int("PMI_RANK", &r) && env_int("PMI_SIZE", &w)) {
        launcher = "pmi";
        if (!env_int("MPI_LOCALRANKID", &lr)) env_int("PMI_LOCAL_RANK", &lr);
        if (!env_int("MPI_LOCALNRANKS", &ls)) env_int("PMI_LOCAL_SIZE", &ls);
    } else if (env_int("SLURM_PROCID", &r) && env_int("SLURM_NTASKS", &w)) {
        launcher = "slurm";
        env_int("SLURM_LOCALID", &lr);
        long long tpn;
        if (env_int("SLURM_NTASKS_PER_NODE", &tpn)) ls = tpn;
    } else if (env_int("RANK", &r) && env_int("WORLD_SIZE", &w)) {
        launcher = "torchrun";
        env_int("LOCAL_RANK", &lr);
        env_int("LOCAL_WORLD_SIZE", &ls);
        const char *ma = getenv("MASTER_ADDR");
        if (ma) snprintf(out->master_addr, sizeof out->master_addr, "%s", ma);
        long long mp;
        if (env_int("MASTER_PORT", &mp)) out->master_port = (int32_t)mp;
    } else {
        r = 0;
        w = 1;
    }
    if (w < 1 || r < 0 || r >= w) {
        r = 0;
        w = 1;
        launcher = "none";
    }
    out->rank = (int32_t)r;
    out->world_size = (int32_t)w;
    out->local_rank = (int32_t)(lr >= 0 ? lr : r);
    out->local_size = (int32_t)(ls >= 1 ? ls : w);
    snprintf(out->launcher, sizeof out->launcher, "%s", launcher);
    return LLMT_OK;
}

/* ---- the handle */

static char *dupstr(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static void parse_faults(llmt_comm *c)
{
    const char *v = getenv("LLMT_FAULT_SKIP_COLLECTIVE");
    if (!v) return;
    while (*v && c->nfault < 8) {
        char *end;
        long r = strtol(v, &end, 10);
        if (*end != ':') break;
        unsigned long long s = strtoull(end + 1, &end, 10);
        c->fault_rank[c->nfault] = (int32_t)r;
        c->fault_seq[c->nfault] = s;
        c->nfault++;
        if (*end != ',') break;
        v = end + 1;
    }
}

llmt_comm *llmt__comm_new(llmt_context *ctx, const llmt_comm *parent,
                          const llmt_comm_opts *o)
{
    llmt_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ctx = ctx;
    c->next_seq = 1;
    pthread_mutex_init(&c->fr_mu, NULL);
    if (parent) {
        c->timeout_ms = parent->timeout_ms;
        c->recorder_size = parent->recorder_size;
        c->dump_path = dupstr(parent->dump_path);
        c->cuda_device = parent->cuda_device;
        c->backend = parent->backend;
        return c;
    }
    /* read_opts put $LLMT_COMM_TIMEOUT_MS in place of a 0 */
    c->timeout_ms = o && o->timeout_ms > 0 ? o->timeout_ms : 300000;
    c->recorder_size = o && o->recorder_size > 0 ? o->recorder_size : 1024;
    const char *dp = o && o->dump_path ? o->dump_path
                                       : getenv("LLMT_COMM_DUMP_PATH");
    c->dump_path = dp && *dp ? dupstr(dp) : NULL;
    c->cuda_device = o ? o->cuda_device : -1;
    c->rendezvous_path = o ? dupstr(o->rendezvous_path) : NULL;
    parse_faults(c);
    return c;
}

llmt_status llmt__comm_fr_alloc(llmt_comm *c)
{
    if (c->fr) return LLMT_OK;
    c->fr = calloc(1, llmt__fr_bytes((uint64_t)c->recorder_size));
    if (!c->fr) return LLMT_ERR_OUT_OF_MEMORY;
    c->fr->cap = (uint64_t)c->recorder_size;
    c->fr_ext = 0;
    return LLMT_OK;
}

void llmt__comm_free_shell(llmt_comm *c)
{
    if (!c) return;
    if (c->fr && !c->fr_ext) free(c->fr);
    free(c->dump_path);
    free(c->rendezvous_path);
    pthread_mutex_destroy(&c->fr_mu);
    free(c);
}

/* The options only NCCL reads (the device, the id's rendezvous file) on a
 * communicator of `backend` (`made`: how it is made, for the message):
 * refused, not ignored. Gloo from the environment reads rendezvous_path
 * as its store directory (create_from_env checks that itself). */
static llmt_status nccl_only_opts(llmt_context *ctx, const llmt_comm_opts *o, const char *made)
{
    llmt_err *e = ctx ? &ctx->err : NULL;
    if (o->cuda_device != -1)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: %s: llmt_comm_opts.cuda_device %d is set, but only NCCL "
                             "communicators use a device (leave it -1)",
                             made, (int)o->cuda_device);
    if (o->rendezvous_path)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: %s: llmt_comm_opts.rendezvous_path is set, but this "
                             "communicator has no rendezvous (leave it NULL)",
                             made);
    return LLMT_OK;
}

/* A year: the deadline arithmetic (ns in int64) is far from overflowing. */
#define COMM_MAX_TIMEOUT_MS (366LL * 24 * 3600 * 1000)

static llmt_status read_opts(llmt_context *ctx, const llmt_comm_opts *opts,
                             llmt_comm_opts *o)
{
    llmt_comm_opts_init(o, sizeof *o);
    llmt_status s =
        opts ? llmt__opts_copy(ctx ? &ctx->err : NULL, "llmt_comm_opts", o, sizeof *o, opts)
             : LLMT_OK;
    if (s != LLMT_OK) return s;
    /* the default's override, resolved here once for llmt__comm_new: a
     * value that is not a number, <= 0 or past the bound is refused by
     * name rather than replaced by 300000 unseen */
    const char *env = getenv("LLMT_COMM_TIMEOUT_MS");
    long long et = 0;
    if (o->timeout_ms == 0 && env && *env) {
        if (!env_int("LLMT_COMM_TIMEOUT_MS", &et) || et <= 0 || et > COMM_MAX_TIMEOUT_MS)
            return llmt__err_set(ctx ? &ctx->err : NULL, LLMT_ERR_INVALID_ARGUMENT,
                                 "comm: $LLMT_COMM_TIMEOUT_MS='%.40s' is not a number of "
                                 "milliseconds in [1, %lld] (unset: 300000)",
                                 env, (long long)COMM_MAX_TIMEOUT_MS);
        o->timeout_ms = et;
    }
    if (!opts)
        return LLMT_OK;
    /* the deadlines are now + timeout_ms * 1e6 ns, in int64 */
    if (o->timeout_ms < 0 || o->timeout_ms > COMM_MAX_TIMEOUT_MS || o->recorder_size < 0)
        return llmt__err_set(ctx ? &ctx->err : NULL, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: timeout_ms %lld must be in [0, %lld] and recorder_size "
                             "%d >= 0 (0: default)",
                             (long long)o->timeout_ms, (long long)COMM_MAX_TIMEOUT_MS,
                             (int)o->recorder_size);
    if (o->backend < LLMT_COMM_AUTO || o->backend > LLMT_COMM_GLOO)
        return llmt__err_set(ctx ? &ctx->err : NULL, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: backend %d unknown", (int)o->backend);
    return LLMT_OK;
}

/* ---- async work queue (the progress thread) */

struct llmt_comm_work {
    llmt_comm *c;
    llmt__coll a;
    llmt_status status;
    int done;
    int freed;                /* the owner let go: the worker frees it */
    struct llmt_comm_work *next;
};

struct llmt__work_q {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* work queued / stop */
    pthread_cond_t done_cv;   /* an item finished */
    llmt_comm_work *head, *tail;
    int pending;              /* queued or running */
    int stop;
};

static llmt_status run_op(llmt_comm *c, llmt__coll *a);

static void *worker_main(void *arg)
{
    llmt_comm *c = arg;
    llmt__work_q *q = c->q;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
        if (!q->head) break;
        llmt_comm_work *w = q->head;
        q->head = w->next;
        if (!q->head) q->tail = NULL;
        pthread_mutex_unlock(&q->mu);
        llmt_status s = run_op(c, &w->a);
        pthread_mutex_lock(&q->mu);
        w->status = s;
        w->done = 1;
        q->pending--;
        if (w->freed) free(w);
        pthread_cond_broadcast(&q->done_cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static llmt_status queue_start(llmt_comm *c)
{
    if (c->q) return LLMT_OK;
    llmt__work_q *q = calloc(1, sizeof *q);
    if (!q) return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    pthread_cond_init(&q->done_cv, NULL);
    c->q = q;
    if (pthread_create(&q->th, NULL, worker_main, c) != 0) {
        c->q = NULL;
        free(q);
        return llmt__err_set(&c->err, LLMT_ERR_COMM,
                             "comm: cannot start the progress thread");
    }
    return LLMT_OK;
}

/* Wait until every queued operation has finished. */
static void queue_drain(llmt_comm *c)
{
    llmt__work_q *q = c->q;
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    while (q->pending > 0) pthread_cond_wait(&q->done_cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

static void queue_stop(llmt_comm *c)
{
    llmt__work_q *q = c->q;
    if (!q) return;
    queue_drain(c);
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->th, NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    pthread_cond_destroy(&q->done_cv);
    free(q);
    c->q = NULL;
}

static llmt_status enqueue(llmt_comm *c, const llmt__coll *a,
                           llmt_comm_work **out)
{
    *out = NULL;
    llmt_status s = queue_start(c);
    if (s != LLMT_OK) return s;
    llmt_comm_work *w = calloc(1, sizeof *w);
    if (!w) return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    w->c = c;
    w->a = *a;
    llmt__work_q *q = c->q;
    pthread_mutex_lock(&q->mu);
    if (q->tail) q->tail->next = w;
    else q->head = w;
    q->tail = w;
    q->pending++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    *out = w;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_comm_work_test(llmt_comm_work *w, int *done)
{
    if (!w) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&w->c->err, "comm: work_test", done);
    llmt__work_q *q = w->c->q;
    pthread_mutex_lock(&q->mu);
    *done = w->done;
    llmt_status s = w->done ? w->status : LLMT_OK;
    pthread_mutex_unlock(&q->mu);
    return s;
}

LLMT_API llmt_status llmt_comm_work_wait(llmt_comm_work *w, int64_t timeout_ms)
{
    if (!w) return LLMT_ERR_NULL_POINTER;
    llmt__work_q *q = w->c->q;
    int64_t t0 = llmt__now_ns();
    struct timespec dl;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (timeout_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&q->mu);
    while (!w->done) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&q->done_cv, &q->mu);
        } else if (pthread_cond_timedwait(&q->done_cv, &q->mu, &dl) ==
                   ETIMEDOUT) {
            break;
        }
    }
    llmt_status s = w->done ? w->status : LLMT_ERR_IN_PROGRESS;
    pthread_mutex_unlock(&q->mu);
    llmt__comm_exposed_add(w->c, t0);
    return s;
}

LLMT_API void llmt_comm_work_free(llmt_comm_work *w)
{
    if (!w) return;
    llmt_comm_work_wait(w, -1);
    free(w);
}

/* ---- running one operation */

static void fr_begin(llmt_comm *c, const llmt__coll *a, uint64_t *slot)
{
    llmt__fr *fr = c->fr;
    pthread_mutex_lock(&c->fr_mu);
    uint64_t i = fr->written;
    llmt__fr_entry *e = &fr->e[i % fr->cap];
    memset(e, 0, sizeof *e);
    e->seq = a->seq;
    e->op = a->kind;
    e->dtype = (int32_t)a->dtype;
    e->count = (int64_t)a->count;
    e->peer = a->kind == LLMT__OP_BROADCAST ? a->root : a->peer;
    e->size = c->size;
    e->rank = c->rank;
    e->state = LLMT__FR_STARTED;
    e->t_start = llmt__unix_s();
    __atomic_store_n(&fr->written, i + 1, __ATOMIC_RELEASE);
    if (a->seq) __atomic_store_n(&fr->entered, a->seq, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&c->fr_mu);
    *slot = i;
}

static void fr_end(llmt_comm *c, uint64_t slot, int state, uint64_t seq)
{
    llmt__fr *fr = c->fr;
    pthread_mutex_lock(&c->fr_mu);
    if (fr->written - slot <= fr->cap) {
        llmt__fr_entry *e = &fr->e[slot % fr->cap];
        e->t_end = llmt__unix_s();
        e->state = state;
    }
    if (state == LLMT__FR_COMPLETED && seq)
        __atomic_store_n(&fr->completed, seq, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&c->fr_mu);
}

static void write_dump_file(llmt_comm *c, const char *text)
{
    if (!c->dump_path) return;
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", c->dump_path, (int)c->rank);
    FILE *f = fopen(path, "w");
    if (!f) {
        llmt__log(c->ctx, LLMT_LOG_ERROR, "comm", "cannot write the flight "
                  "recorder dump %s: %s", path, strerror(errno));
        return;
    }
    fputs(text, f);
    fclose(f);
}

static void on_timeout(llmt_comm *c, const llmt__coll *a)
{
    int32_t n = c->size;
    int32_t *missing = calloc((size_t)n + 1, sizeof *missing);
    int32_t *unreach = calloc((size_t)n + 1, sizeof *unreach);
    llmt__sbuf dump = {0};
    int nmiss = 0, nun = 0;
    llmt__sb_printf(&dump, "llmtrain comm flight recorder: rank %d of %d, "
                    "backend %s, timeout at %s seq %llu after %lld ms\n",
                    (int)c->rank, (int)c->size, c->ops->name,
                    llmt__comm_op_name(a->kind), (unsigned long long)a->seq,
                    (long long)c->timeout_ms);
    if (missing && unreach && a->seq && c->ops->diagnose)
        nmiss = c->ops->diagnose(c, a->seq, missing, unreach, &nun, &dump);
    else
        llmt__fr_format(&dump, c->fr, c->rank);
    char who[512] = "";
    size_t at = 0;
    if (a->seq == 0) {
        snprintf(who, sizeof who, "peer %d did not match it", (int)a->peer);
    } else if (nmiss > 0) {
        at += (size_t)snprintf(who, sizeof who, "ranks that did not reach seq "
                               "%llu: ", (unsigned long long)a->seq);
        for (int i = 0; i < nmiss && at < sizeof who - 16; i++)
            at += (size_t)snprintf(who + at, sizeof who - at, "%s%d",
                                   i ? "," : "", (int)missing[i]);
    } else {
        snprintf(who, sizeof who, "every reachable rank entered seq %llu",
                 (unsigned long long)a->seq);
    }
    if (nun > 0 && at < sizeof who - 32) {
        at += (size_t)snprintf(who + at, sizeof who - at, "; unreachable: ");
        for (int i = 0; i < nun && at < sizeof who - 16; i++)
            at += (size_t)snprintf(who + at, sizeof who - at, "%s%d",
                                   i ? "," : "", (int)unreach[i]);
    }
    llmt__err_set(&c->err, LLMT_ERR_TIMEOUT,
                  "comm: %s seq %llu timed out after %lld ms on rank %d of %d "
                  "(%s); %s; communicator aborted%s%s",
                  llmt__comm_op_name(a->kind), (unsigned long long)a->seq,
                  (long long)c->timeout_ms, (int)c->rank, (int)c->size,
                  c->ops->name, who, c->dump_path ? "; recorder dumped to " : "",
                  c->dump_path ? c->dump_path : "");
    llmt__log(c->ctx, LLMT_LOG_ERROR, "comm", "%s\n%s", c->err.msg,
              dump.p ? dump.p : "");
    if (dump.p) write_dump_file(c, dump.p);
    free(dump.p);
    free(missing);
    free(unreach);
    __atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&c->fr->aborted, 1, __ATOMIC_RELEASE);
    if (c->ops->abort) c->ops->abort(c);
}

static int fault_skip(const llmt_comm *c, uint64_t seq)
{
    for (int i = 0; i < c->nfault; i++)
        if (c->fault_rank[i] == c->rank && c->fault_seq[i] == seq) return 1;
    return 0;
}

static llmt_status run_op(llmt_comm *c, llmt__coll *a)
{
    if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
        return llmt__err_set(&c->err, LLMT_ERR_ABORTED,
                             "comm: %s on an aborted communicator (rank %d)",
                             llmt__comm_op_name(a->kind), (int)c->rank);
    int p2p = a->kind == LLMT__OP_SEND || a->kind == LLMT__OP_RECV;
    a->seq = p2p ? 0 : c->next_seq++;
    uint64_t slot;
    fr_begin(c, a, &slot);
    if (!p2p && fault_skip(c, a->seq)) {
        fr_end(c, slot, LLMT__FR_SKIPPED, a->seq);
        llmt__log(c->ctx, LLMT_LOG_WARN, "comm", "fault injection: rank %d "
                  "skips %s seq %llu", (int)c->rank,
                  llmt__comm_op_name(a->kind), (unsigned long long)a->seq);
        return LLMT_OK;
    }
    int64_t t0 = llmt__now_ns();
    int64_t deadline = t0 + c->timeout_ms * 1000000LL;
    llmt_status s = c->ops->run(c, a, deadline);
    if (s == LLMT_OK) {
        fr_end(c, slot, LLMT__FR_COMPLETED, a->seq);
        llmt__comm_account(c, a, (double)(llmt__now_ns() - t0) * 1e-9);
        return LLMT_OK;
    }
    if (s == LLMT_ERR_TIMEOUT) {
        fr_end(c, slot, LLMT__FR_TIMEOUT, a->seq);
        on_timeout(c, a);
        return LLMT_ERR_TIMEOUT;
    }
    fr_end(c, slot, s == LLMT_ERR_ABORTED ? LLMT__FR_ABORTED : LLMT__FR_ERROR,
           a->seq);
    if (c->err.status == LLMT_OK || c->err.msg[0] == 0)
        llmt__err_set(&c->err, s, "comm: %s failed: %s",
                      llmt__comm_op_name(a->kind), llmt_status_string(s));
    return s;
}

/* The largest buffer one call may name, in bytes: PTRDIFF_MAX, so that
 * count * dtype size (times the group size where a buffer holds a block
 * per rank) and every offset into it are computed without wrapping. */
#define COMM_MAX_BYTES (SIZE_MAX / 2)

/* Elements of `dtype` that fit in COMM_MAX_BYTES (an unknown dtype, which
 * check_common refuses, counts as one byte). */
static size_t max_elems(llmt_dtype dtype)
{
    size_t es = llmt_dtype_size(dtype);
    return COMM_MAX_BYTES / (es ? es : 1);
}

/* Blocks of `count` elements the largest buffer of the call holds. */
static size_t coll_blocks(const llmt_comm *c, int kind)
{
    if (kind == LLMT__OP_ALL_GATHER || kind == LLMT__OP_REDUCE_SCATTER ||
        kind == LLMT__OP_ALL_TO_ALL)
        return (size_t)c->size;
    return 1;
}

/* A count whose bytes would wrap size_t: the backends would allocate and
 * copy the wrapped (small) size and overrun it. */
static llmt_status check_count(llmt_comm *c, const llmt__coll *a)
{
    if (a->kind == LLMT__OP_ALL_TO_ALLV)
        return LLMT_OK; /* all_to_allv's own */
    size_t blocks = coll_blocks(c, a->kind);
    if (a->count <= max_elems(a->dtype) / blocks)
        return LLMT_OK;
    return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                         "comm: %s: count %zu of %s x %zu block(s) exceeds %zu bytes "
                         "(the largest buffer a call may name)",
                         llmt__comm_op_name(a->kind), a->count, llmt_dtype_name(a->dtype),
                         blocks, (size_t)COMM_MAX_BYTES);
}

static llmt_status check_common(llmt_comm *c, const llmt__coll *a)
{
    if (a->kind == LLMT__OP_BARRIER) return LLMT_OK;
    if (!llmt__dtype_reducible(a->dtype))
        return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: %s: dtype %s (%d) not supported (fp32, "
                             "bf16, fp16, int32, int64)",
                             llmt__comm_op_name(a->kind),
                             llmt_dtype_name(a->dtype), (int)a->dtype);
    if ((a->kind == LLMT__OP_ALL_REDUCE || a->kind == LLMT__OP_REDUCE_SCATTER) &&
        (a->op < LLMT_REDUCE_SUM || a->op > LLMT_REDUCE_MIN))
        return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: %s: reduce op %d unknown",
                             llmt__comm_op_name(a->kind), (int)a->op);
    llmt_status s = check_count(c, a);
    if (s != LLMT_OK)
        return s;
    if (a->stream && c->backend != LLMT_COMM_NCCL)
        return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: %s: stream must be NULL for the %s backend",
                             llmt__comm_op_name(a->kind), c->ops->name);
    if (a->count > 0 && a->kind != LLMT__OP_ALL_TO_ALLV &&
        ((!a->send && a->kind != LLMT__OP_BROADCAST &&
          a->kind != LLMT__OP_RECV) ||
         (!a->recv && a->kind != LLMT__OP_SEND)))
        return llmt__err_set(&c->err, LLMT_ERR_NULL_POINTER,
                             "comm: %s: NULL buffer with count %zu",
                             llmt__comm_op_name(a->kind), a->count);
    if ((a->kind == LLMT__OP_SEND || a->kind == LLMT__OP_RECV) &&
        (a->peer < 0 || a->peer >= c->size || a->peer == c->rank))
        return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: %s: peer %d invalid for rank %d of %d",
                             llmt__comm_op_name(a->kind), (int)a->peer,
                             (int)c->rank, (int)c->size);
    if (a->kind == LLMT__OP_BROADCAST && (a->root < 0 || a->root >= c->size))
        return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: broadcast: root %d outside [0, %d)",
                             (int)a->root, (int)c->size);
    return LLMT_OK;
}

static llmt_status do_blocking(llmt_comm *c, llmt__coll *a)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    llmt_status s = check_common(c, a);
    if (s != LLMT_OK) return s;
    int64_t t0 = llmt__now_ns();
    queue_drain(c);
    s = run_op(c, a);
    llmt__comm_exposed_add(c, t0);
    return s;
}

static llmt_status do_async(llmt_comm *c, llmt__coll *a, llmt_comm_work **w)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    if (!w)
        return llmt__err_set(&c->err, LLMT_ERR_NULL_POINTER,
                             "comm: i%s: work is NULL", llmt__comm_op_name(a->kind));
    *w = NULL;
    llmt_status s = check_common(c, a);
    if (s != LLMT_OK) return s;
    if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
        return llmt__err_set(&c->err, LLMT_ERR_ABORTED,
                             "comm: async %s on an aborted communicator",
                             llmt__comm_op_name(a->kind));
    return enqueue(c, a, w);
}

#define COLL_INIT(k) \
    llmt__coll a;    \
    memset(&a, 0, sizeof a); \
    a.kind = (k);    \
    a.peer = -1;     \
    a.root = -1

LLMT_API llmt_status llmt_comm_all_reduce(llmt_comm *c, const void *send, void *recv,
                                 size_t count, llmt_dtype dtype,
                                 llmt_reduce_op op, void *stream)
{
    COLL_INIT(LLMT__OP_ALL_REDUCE);
    a.send = send; a.recv = recv; a.count = count; a.dtype = dtype; a.op = op;
    a.stream = stream;
    return do_blocking(c, &a);
}

LLMT_API llmt_status llmt_comm_all_gather(llmt_comm *c, const void *send, void *recv,
                                 size_t count, llmt_dtype dtype, void *stream)
{
    COLL_INIT(LLMT__OP_ALL_GATHER);
    a.send = send; a.recv = recv; a.count = count; a.dtype = dtype;
    a.stream = stream;
    return do_blocking(c, &a);
}

LLMT_API llmt_status llmt_comm_reduce_scatter(llmt_comm *c, const void *send,
                                     void *recv, size_t count,
                                     llmt_dtype dtype, llmt_reduce_op op,
                                     void *stream)
{
    COLL_INIT(LLMT__OP_REDUCE_SCATTER);
    a.send = send; a.recv = recv; a.count = count; a.dtype = dtype; a.op = op;
    a.stream = stream;
    return do_blocking(c, &a);
}

LLMT_API llmt_status llmt_comm_all_to_all(llmt_comm *c, const void *send, void *recv,
                                 size_t count, llmt_dtype dtype, void *stream)
{
    COLL_INIT(LLMT__OP_ALL_TO_ALL);
    a.send = send; a.recv = recv; a.count = count; a.dtype = dtype;
    a.stream = stream;
    if (c && count > 0 && send == recv)
        return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: all_to_all: send and recv overlap");
    return do_blocking(c, &a);
}

/* all_to_allv's `side` ("send"/"recv"): every block's end (displacement
 * + count) and the counts' sum (*total) within COMM_MAX_BYTES, so that no
 * offset nor total wraps. */
static llmt_status v_extent(llmt_comm *c, const char *side, const size_t *counts,
                            const size_t *displs, llmt_dtype dtype, size_t *total)
{
    size_t lim = max_elems(dtype), tot = 0;
    for (int32_t i = 0; i < c->size; i++) {
        if (counts[i] > lim || displs[i] > lim - counts[i] || tot > lim - counts[i])
            return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "comm: all_to_allv: %s_counts[%d] %zu at %s_displs[%d] %zu "
                                 "(after %zu elements) of %s exceeds %zu bytes (the largest "
                                 "buffer a call may name)",
                                 side, (int)i, counts[i], side, (int)i, displs[i], tot,
                                 llmt_dtype_name(dtype), (size_t)COMM_MAX_BYTES);
        tot += counts[i];
    }
    *total = tot;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_comm_all_to_allv(llmt_comm *c, const void *send,
                                  const size_t *scounts, const size_t *sdispls,
                                  void *recv, const size_t *rcounts,
                                  const size_t *rdispls, llmt_dtype dtype,
                                  void *stream)
{
    COLL_INIT(LLMT__OP_ALL_TO_ALLV);
    if (!c) return LLMT_ERR_NULL_POINTER;
    /* named as the header names them */
    const void *const arr[4] = {scounts, sdispls, rcounts, rdispls};
    static const char *const arr_name[4] = {"send_counts", "send_displs", "recv_counts",
                                            "recv_displs"};
    for (int i = 0; i < 4; i++)
        if (!arr[i])
            return llmt__err_set(&c->err, LLMT_ERR_NULL_POINTER,
                                 "comm: all_to_allv: %s is NULL", arr_name[i]);
    size_t stot = 0, rtot = 0;
    llmt_status s = v_extent(c, "send", scounts, sdispls, dtype, &stot);
    if (s == LLMT_OK)
        s = v_extent(c, "recv", rcounts, rdispls, dtype, &rtot);
    if (s != LLMT_OK)
        return s;
    if ((stot && !send) || (rtot && !recv))
        return llmt__err_set(&c->err, LLMT_ERR_NULL_POINTER,
                             "comm: all_to_allv: NULL buffer with counts");
    a.send = send; a.recv = recv; a.dtype = dtype; a.stream = stream;
    a.scounts = scounts; a.sdispls = sdispls;
    a.rcounts = rcounts; a.rdispls = rdispls;
    a.count = stot;
    return do_blocking(c, &a);
}

LLMT_API llmt_status llmt_comm_broadcast(llmt_comm *c, void *buf, size_t count,
                                llmt_dtype dtype, int32_t root, void *stream)
{
    COLL_INIT(LLMT__OP_BROADCAST);
    a.send = buf; a.recv = buf; a.count = count; a.dtype = dtype;
    a.root = root; a.stream = stream;
    return do_blocking(c, &a);
}

LLMT_API llmt_status llmt_comm_send(llmt_comm *c, const void *buf, size_t count,
                           llmt_dtype dtype, int32_t peer, void *stream)
{
    COLL_INIT(LLMT__OP_SEND);
    a.send = buf; a.recv = NULL; a.count = count; a.dtype = dtype;
    a.peer = peer; a.stream = stream;
    return do_blocking(c, &a);
}

LLMT_API llmt_status llmt_comm_recv(llmt_comm *c, void *buf, size_t count,
                           llmt_dtype dtype, int32_t peer, void *stream)
{
    COLL_INIT(LLMT__OP_RECV);
    a.send = NULL; a.recv = buf; a.count = count; a.dtype = dtype;
    a.peer = peer; a.stream = stream;
    return do_blocking(c, &a);
}

/* ---- sends left in flight (p2p.h) */

struct llmt__isend {
    llmt_comm *c;
    llmt__coll a;
    void *h;       /* the backend's request */
    uint64_t slot; /* its flight-recorder entry */
    int64_t t0;    /* posted (llmt__now_ns) */
    llmt_status status;
    int done;
};

int llmt__comm_isend_kind(const llmt_comm *c)
{
    if (!c || !c->ops)
        return LLMT__ISEND_NONE;
    if (c->ops->isend)
        return LLMT__ISEND_POSTED;
    return c->ops->copy_sends ? LLMT__ISEND_COPY : LLMT__ISEND_NONE;
}

/* The send's end: recorded and counted as a blocking send's would be;
 * a timeout aborts the communicator and dumps the recorder. */
static void isend_end(llmt__isend *w, llmt_status s)
{
    llmt_comm *c = w->c;
    w->done = 1;
    w->status = s;
    if (s == LLMT_OK) {
        fr_end(c, w->slot, LLMT__FR_COMPLETED, 0);
        llmt__comm_account(c, &w->a, (double)(llmt__now_ns() - w->t0) * 1e-9);
        return;
    }
    if (s == LLMT_ERR_TIMEOUT) {
        fr_end(c, w->slot, LLMT__FR_TIMEOUT, 0);
        on_timeout(c, &w->a);
        return;
    }
    fr_end(c, w->slot, s == LLMT_ERR_ABORTED ? LLMT__FR_ABORTED : LLMT__FR_ERROR, 0);
    if (c->err.status == LLMT_OK || c->err.msg[0] == 0)
        llmt__err_set(&c->err, s, "comm: send to rank %d failed: %s", (int)w->a.peer,
                      llmt_status_string(s));
}

llmt_status llmt__comm_isend(llmt_comm *c, const void *buf, size_t count, llmt_dtype dtype,
                             int32_t peer, llmt__isend **out)
{
    if (!c)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&c->err, "comm: isend", out);
    *out = NULL;
    int kind = llmt__comm_isend_kind(c);
    if (kind == LLMT__ISEND_COPY)
        return llmt_comm_send(c, buf, count, dtype, peer, NULL);
    if (kind == LLMT__ISEND_NONE)
        return llmt__err_set(&c->err, LLMT_ERR_UNSUPPORTED,
                             "comm: the %s backend has no send that returns before its "
                             "receiver takes it",
                             c->ops->name);
    COLL_INIT(LLMT__OP_SEND);
    a.send = buf;
    a.count = count;
    a.dtype = dtype;
    a.peer = peer;
    llmt_status s = check_common(c, &a);
    if (s != LLMT_OK)
        return s;
    if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
        return llmt__err_set(&c->err, LLMT_ERR_ABORTED,
                             "comm: send on an aborted communicator (rank %d)", (int)c->rank);
    llmt__isend *w = calloc(1, sizeof *w);
    if (!w)
        return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    queue_drain(c); /* after the queued work, as a blocking call */
    w->c = c;
    w->a = a;
    w->t0 = llmt__now_ns();
    fr_begin(c, &w->a, &w->slot);
    s = c->ops->isend(c, &w->a, &w->h);
    if (s != LLMT_OK) {
        isend_end(w, s);
        free(w);
        return s;
    }
    *out = w;
    return LLMT_OK;
}

llmt_status llmt__comm_isend_test(llmt__isend *w, int *done)
{
    if (!w)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&w->c->err, "comm: isend_test", done);
    if (!w->done && w->c->ops->isend_test) {
        int d = 0;
        llmt_status s = w->c->ops->isend_test(w->c, w->h, &d);
        if (s != LLMT_OK || d)
            isend_end(w, s);
    }
    *done = w->done;
    return w->done ? w->status : LLMT_OK;
}

llmt_status llmt__comm_isend_wait(llmt__isend *w)
{
    if (!w)
        return LLMT_ERR_NULL_POINTER;
    if (w->done)
        return w->status;
    llmt_comm *c = w->c;
    int64_t t0 = llmt__now_ns();
    llmt_status s = c->ops->isend_wait(c, w->h, w->t0 + c->timeout_ms * 1000000LL);
    isend_end(w, s);
    llmt__comm_exposed_add(c, t0);
    return s;
}

void llmt__comm_isend_free(llmt__isend *w)
{
    free(w); /* an unfinished request stays with its communicator */
}

LLMT_API llmt_status llmt_comm_barrier(llmt_comm *c)
{
    COLL_INIT(LLMT__OP_BARRIER);
    a.dtype = LLMT_DTYPE_INT32;
    return do_blocking(c, &a);
}

LLMT_API llmt_status llmt_comm_iall_reduce(llmt_comm *c, const void *send, void *recv,
                                  size_t count, llmt_dtype dtype,
                                  llmt_reduce_op op, llmt_comm_work **w)
{
    COLL_INIT(LLMT__OP_ALL_REDUCE);
    a.send = send; a.recv = recv; a.count = count; a.dtype = dtype; a.op = op;
    return do_async(c, &a, w);
}

LLMT_API llmt_status llmt_comm_ireduce_scatter(llmt_comm *c, const void *send,
                                      void *recv, size_t count,
                                      llmt_dtype dtype, llmt_reduce_op op,
                                      llmt_comm_work **w)
{
    COLL_INIT(LLMT__OP_REDUCE_SCATTER);
    a.send = send; a.recv = recv; a.count = count; a.dtype = dtype; a.op = op;
    return do_async(c, &a, w);
}

LLMT_API llmt_status llmt_comm_iall_gather(llmt_comm *c, const void *send, void *recv,
                                  size_t count, llmt_dtype dtype,
                                  llmt_comm_work **w)
{
    COLL_INIT(LLMT__OP_ALL_GATHER);
    a.send = send; a.recv = recv; a.count = count; a.dtype = dtype;
    return do_async(c, &a, w);
}

/* ---- creation */

LLMT_API llmt_status llmt_comm_create_inproc(llmt_context *ctx, int32_t n,
                                    const llmt_comm_opts *opts,
                                    llmt_comm **comms)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "comm: create_inproc", comms);
    if (n < 1 || n > 4096)
        return llmt__err_set(ctx ? &ctx->err : NULL, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: in-process world_size %d outside [1, "
                             "4096]", (int)n);
    llmt_comm_opts o;
    llmt_status s = read_opts(ctx, opts, &o);
    if (s != LLMT_OK) return s;
    /* the ranks are this process's threads, whatever backend was asked */
    if (o.backend != LLMT_COMM_AUTO && o.backend != LLMT_COMM_INPROC)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: create_inproc: llmt_comm_opts.backend %d: an in-process "
                             "group is LLMT_COMM_INPROC (1) or LLMT_COMM_AUTO (0); MPI, NCCL "
                             "and Gloo have their own create calls",
                             (int)o.backend);
    if ((s = nccl_only_opts(ctx, &o, "create_inproc")) != LLMT_OK)
        return s;
    return llmt__inproc_create(ctx, n, &o, comms);
}

LLMT_API llmt_status llmt_comm_create_from_env(llmt_context *ctx,
                                      const llmt_comm_opts *opts,
                                      llmt_comm **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "comm: create_from_env", out);
    *out = NULL;
    llmt_comm_opts o;
    llmt_status s = read_opts(ctx, opts, &o);
    if (s != LLMT_OK) return s;
    llmt_err *e = ctx ? &ctx->err : NULL;
    llmt_comm_env env;
    llmt_comm_env_discover(&env, sizeof env);
    int mpi_launch = !strcmp(env.launcher, "openmpi") ||
                     !strcmp(env.launcher, "pmi") ||
                     !strcmp(env.launcher, "slurm");
    int be = o.backend;
    const char *store = getenv("LLMT_COMM_STORE");
    if (be == LLMT_COMM_AUTO && env.world_size > 1 && !mpi_launch && store && *store)
        be = LLMT_COMM_GLOO;
    if (be == LLMT_COMM_GLOO) {
        const char *dir = store && *store ? store : o.rendezvous_path;
        const char *pre = getenv("LLMT_COMM_STORE_PREFIX");
        if (!dir)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "comm: gloo from the environment needs $LLMT_COMM_STORE "
                                 "(a directory every rank sees) or opts.rendezvous_path");
        o.rendezvous_path = NULL; /* read here: the store directory */
        return llmt_comm_create_from_store(ctx, dir, pre && *pre ? pre : "llmt", env.rank,
                                           env.world_size, &o, out);
    }
    if (be == LLMT_COMM_AUTO) {
        if (env.world_size == 1) be = LLMT_COMM_INPROC;
        else if (mpi_launch) be = LLMT_COMM_MPI;
        else
            return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                                 "comm: launched by %s with %d ranks: only MPI "
                                 "launchers, Gloo ($LLMT_COMM_STORE) or NCCL with a "
                                 "rendezvous_path can connect separate processes",
                                 env.launcher, (int)env.world_size);
    }
    if (be == LLMT_COMM_INPROC) {
        if ((s = nccl_only_opts(ctx, &o, "create_from_env (in-process)")) != LLMT_OK)
            return s;
        if (env.world_size != 1)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "comm: in-process backend from the environment "
                                 "needs a world of 1 (launcher %s says %d)",
                                 env.launcher, (int)env.world_size);
        return llmt__inproc_create(ctx, 1, &o, out);
    }
    if (be == LLMT_COMM_MPI) {
#ifdef LLMT_HAVE_MPI
        int owned = 0;
        s = llmt__mpi_init(e, &owned);
        if (s != LLMT_OK) return s;
        s = llmt__mpi_create(ctx, NULL, &o, owned, out);
        if (s != LLMT_OK && owned) llmt__mpi_release();
        return s;
#else
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "comm: this build has no MPI");
#endif
    }
#ifdef LLMT_HAVE_NCCL
    if (mpi_launch) {
#ifdef LLMT_HAVE_MPI
        int owned = 0;
        s = llmt__mpi_init(e, &owned);
        if (s != LLMT_OK) return s;
        s = llmt__nccl_create_mpi(ctx, NULL, &o, out);
        if (owned) {
            if (s == LLMT_OK) (*out)->mpi_owned = 1;
            else llmt__mpi_release();
        }
        return s;
#endif
    }
    if (!o.rendezvous_path && env.world_size > 1)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: NCCL without an MPI launcher needs "
                             "opts.rendezvous_path (a file every rank sees)");
    char id[LLMT_COMM_UNIQUE_ID_BYTES];
    memset(id, 0, sizeof id);
    if (env.world_size == 1) {
        s = llmt__nccl_unique_id(e, id, sizeof id);
        if (s != LLMT_OK) return s;
    } else {
        s = llmt__comm_rendezvous(e, o.rendezvous_path, env.rank, id,
                                  sizeof id, o.timeout_ms > 0 ? o.timeout_ms
                                                              : 300000);
        if (s != LLMT_OK) return s;
    }
    return llmt__nccl_create(ctx, id, env.rank, env.world_size, &o, out);
#else
    return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                         "comm: this build has no NCCL");
#endif
}

LLMT_API llmt_status llmt_comm_create_from_mpi(llmt_context *ctx, void *mpi_comm,
                                      const llmt_comm_opts *opts,
                                      llmt_comm **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "comm: create_from_mpi", out);
    LLMT__NONNULL(ce, "comm: create_from_mpi", mpi_comm);
    *out = NULL;
    llmt_comm_opts o;
    llmt_status s = read_opts(ctx, opts, &o);
    if (s != LLMT_OK) return s;
    llmt_err *e = ctx ? &ctx->err : NULL;
#ifdef LLMT_HAVE_MPI
    if (o.backend == LLMT_COMM_AUTO || o.backend == LLMT_COMM_MPI)
        return llmt__mpi_create(ctx, mpi_comm, &o, 0, out);
#ifdef LLMT_HAVE_NCCL
    if (o.backend == LLMT_COMM_NCCL)
        return llmt__nccl_create_mpi(ctx, mpi_comm, &o, out);
#endif
    return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                         "comm: from an MPI_Comm the backend must be MPI or "
                         "NCCL (got %d)", (int)o.backend);
#else
    return llmt__err_set(e, LLMT_ERR_UNSUPPORTED, "comm: this build has no MPI");
#endif
}

LLMT_API llmt_status llmt_comm_create_from_store(llmt_context *ctx, const char *store_dir,
                                                 const char *prefix, int32_t rank,
                                                 int32_t world, const llmt_comm_opts *opts,
                                                 llmt_comm **out)
{
    llmt_err *e = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(e, "comm: create_from_store", out);
    LLMT__NONNULL(e, "comm: create_from_store", store_dir);
    LLMT__NONNULL(e, "comm: create_from_store", prefix);
    *out = NULL;
    if (world < 1 || rank < 0 || rank >= world)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT, "comm: rank %d outside [0, %d)",
                             (int)rank, (int)world);
    if (!*prefix || strchr(prefix, '\n'))
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: create_from_store: the prefix must be a non-empty line");
    llmt_comm_opts o;
    llmt_status s = read_opts(ctx, opts, &o);
    if (s != LLMT_OK)
        return s;
    if (o.backend != LLMT_COMM_AUTO && o.backend != LLMT_COMM_GLOO)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: create_from_store makes Gloo communicators (backend %d "
                             "asked)",
                             (int)o.backend);
    if ((s = nccl_only_opts(ctx, &o, "create_from_store")) != LLMT_OK)
        return s;
#ifdef LLMT_HAVE_GLOO
    return llmt__gloo_create(ctx, store_dir, prefix, rank, world, &o, out);
#else
    return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                         "comm: this build has no Gloo (apt-get install libgloo-dev, "
                         "then meson setup --reconfigure; -Dgloo=enabled to insist)");
#endif
}

LLMT_API llmt_status llmt_comm_unique_id(void *id, size_t len)
{
    if (!id) return LLMT_ERR_NULL_POINTER;
    if (len < LLMT_COMM_UNIQUE_ID_BYTES) return LLMT_ERR_BUFFER_TOO_SMALL;
#ifdef LLMT_HAVE_NCCL
    return llmt__nccl_unique_id(NULL, id, len);
#else
    return LLMT_ERR_UNSUPPORTED;
#endif
}

LLMT_API llmt_status llmt_comm_create_from_unique_id(llmt_context *ctx, const void *id,
                                            size_t len, int32_t rank,
                                            int32_t world,
                                            const llmt_comm_opts *opts,
                                            llmt_comm **out)
{
    llmt_err *e = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(e, "comm: create_from_unique_id", out);
    LLMT__NONNULL(e, "comm: create_from_unique_id", id);
    *out = NULL;
    if (len < LLMT_COMM_UNIQUE_ID_BYTES)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: unique id of %zu bytes, need %d", len,
                             LLMT_COMM_UNIQUE_ID_BYTES);
    if (world < 1 || rank < 0 || rank >= world)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: rank %d outside [0, %d)", (int)rank,
                             (int)world);
    llmt_comm_opts o;
    llmt_status s = read_opts(ctx, opts, &o);
    if (s != LLMT_OK) return s;
#ifdef LLMT_HAVE_NCCL
    return llmt__nccl_create(ctx, id, rank, world, &o, out);
#else
    return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                         "comm: unique-id communicators need NCCL, which this "
                         "build lacks");
#endif
}

/* Rendezvous over a shared file: rank 0 writes the id atomically (temp +
 * rename), the others poll until it appears or the timeout passes. */
llmt_status llmt__comm_rendezvous(llmt_err *e, const char *path, int32_t rank,
                                  void *id, size_t len, int64_t timeout_ms)
{
    if (rank == 0) {
#ifdef LLMT_HAVE_NCCL
        llmt_status s = llmt__nccl_unique_id(e, id, len);
        if (s != LLMT_OK) return s;
#endif
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(id, 1, len, f) != len || fclose(f) != 0) {
            if (f) fclose(f);
            return llmt__err_set(e, LLMT_ERR_IO, "comm: rendezvous: cannot "
                                 "write %s: %s", tmp, strerror(errno));
        }
        if (rename(tmp, path) != 0)
            return llmt__err_set(e, LLMT_ERR_IO, "comm: rendezvous: rename to "
                                 "%s: %s", path, strerror(errno));
        return LLMT_OK;
    }
    int64_t deadline = llmt__now_ns() + timeout_ms * 1000000LL;
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(id, 1, len, f);
            fclose(f);
            if (got == len) return LLMT_OK;
        }
        if (llmt__now_ns() > deadline)
            return llmt__err_set(e, LLMT_ERR_TIMEOUT, "comm: rendezvous: %s "
                                 "did not appear within %lld ms (rank 0 "
                                 "writes it)", path, (long long)timeout_ms);
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
}

/* ---- sub-groups */

LLMT_API llmt_status llmt_comm_split(llmt_comm *c, int32_t color, int32_t key,
                            llmt_comm **out)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&c->err, "comm: split", out);
    *out = NULL;
    queue_drain(c);
    if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
        return llmt__err_set(&c->err, LLMT_ERR_ABORTED,
                             "comm: split on an aborted communicator");
    if (!c->ops->split)
        return llmt__err_set(&c->err, LLMT_ERR_UNSUPPORTED,
                             "comm: the %s backend cannot split",
                             c->ops->name);
    llmt__coll a;
    memset(&a, 0, sizeof a);
    a.kind = LLMT__OP_SPLIT;
    a.dtype = LLMT_DTYPE_INT32;
    a.count = 2;
    a.peer = -1;
    a.seq = c->next_seq++;
    uint64_t slot;
    fr_begin(c, &a, &slot);
    int64_t deadline = llmt__now_ns() + c->timeout_ms * 1000000LL;
    llmt_status s = c->ops->split(c, color, key, deadline, out);
    if (s == LLMT_OK) {
        fr_end(c, slot, LLMT__FR_COMPLETED, a.seq);
    } else if (s == LLMT_ERR_TIMEOUT) {
        fr_end(c, slot, LLMT__FR_TIMEOUT, a.seq);
        on_timeout(c, &a);
    } else {
        fr_end(c, slot, LLMT__FR_ERROR, a.seq);
    }
    return s;
}

LLMT_API llmt_status llmt_comm_create_group(llmt_comm *c, const int32_t *ranks,
                                   size_t n, llmt_comm **out)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&c->err, "comm: create_group", out);
    if (n)
        LLMT__NONNULL(&c->err, "comm: create_group", ranks);
    *out = NULL;
    int32_t color = -1, key = 0;
    for (size_t i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= c->size)
            return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "comm: create_group: ranks[%zu] = %d outside "
                                 "[0, %d)", i, (int)ranks[i], (int)c->size);
        for (size_t j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                                     "comm: create_group: rank %d listed "
                                     "twice", (int)ranks[i]);
        if (ranks[i] == c->rank) {
            color = 0;
            key = (int32_t)i;
        }
    }
    return llmt_comm_split(c, color, key, out);
}

/* ---- lifetime and queries */

LLMT_API llmt_status llmt_comm_abort(llmt_comm *c)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    c->user_abort = 1;
    __atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
    if (c->fr) __atomic_store_n(&c->fr->aborted, 1, __ATOMIC_RELEASE);
    if (c->ops->abort) c->ops->abort(c);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_comm_finalize(llmt_comm *c)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    queue_drain(c);
    return llmt_comm_barrier(c);
}

LLMT_API void llmt_comm_destroy(llmt_comm *c)
{
    if (!c) return;
    queue_stop(c);
    c->ops->destroy(c);
}

LLMT_API const char *llmt_comm_last_error(const llmt_comm *c)
{
    return c ? c->err.msg : "comm: NULL handle";
}

LLMT_API llmt_status llmt_comm_rank(const llmt_comm *c, int32_t *rank)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&c->err, "comm: rank", rank);
    *rank = c->rank;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_comm_size(const llmt_comm *c, int32_t *size)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&c->err, "comm: size", size);
    *size = c->size;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_comm_backend_of(const llmt_comm *c, llmt_comm_backend *out)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&c->err, "comm: backend_of", out);
    *out = (llmt_comm_backend)c->backend;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_comm_next_seq(const llmt_comm *c, uint64_t *out)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&c->err, "comm: next_seq", out);
    *out = c->next_seq;
    return LLMT_OK;
}

/* ---- flight recorder */

static void dump_text(llmt_comm *c, llmt__sbuf *sb)
{
    llmt__sb_printf(sb, "llmtrain comm flight recorder: rank %d of %d, "
                    "backend %s, next seq %llu%s\n", (int)c->rank,
                    (int)c->size, c->ops->name,
                    (unsigned long long)c->next_seq,
                    c->aborted ? ", aborted" : "");
    pthread_mutex_lock(&c->fr_mu);
    llmt__fr_format(sb, c->fr, c->rank);
    pthread_mutex_unlock(&c->fr_mu);
}

LLMT_API llmt_status llmt_comm_recorder_dump(llmt_comm *c, char *buf, size_t buflen,
                                    size_t *needed)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    llmt__sbuf sb = {0};
    dump_text(c, &sb);
    if (sb.oom) {
        free(sb.p);
        return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    }
    if (needed) *needed = sb.len + 1;
    if (!buf || buflen < sb.len + 1) {
        free(sb.p);
        return llmt__err_set(&c->err, LLMT_ERR_BUFFER_TOO_SMALL,
                             "comm: recorder dump needs %zu bytes, buffer has "
                             "%zu", sb.len + 1, buf ? buflen : 0);
    }
    memcpy(buf, sb.p, sb.len + 1);
    free(sb.p);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_comm_recorder_dump_file(llmt_comm *c, const char *path)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&c->err, "comm: recorder_dump_file", path);
    llmt__sbuf sb = {0};
    dump_text(c, &sb);
    FILE *f = fopen(path, "w");
    if (!f) {
        free(sb.p);
        return llmt__err_set(&c->err, LLMT_ERR_IO, "comm: open %s: %s", path,
                             strerror(errno));
    }
    int bad = sb.p && fputs(sb.p, f) == EOF;
    bad |= fclose(f) != 0;
    free(sb.p);
    if (bad)
        return llmt__err_set(&c->err, LLMT_ERR_IO, "comm: write %s: %s", path,
                             strerror(errno));
    return LLMT_OK;
}

/* ---- groups of a plan */

LLMT_API llmt_status llmt_comm_create_plan_group(llmt_comm *c, const llmt_plan *plan,
                                        llmt_plan_dim dim, llmt_comm **out)
{
    if (!c) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&c->err, "comm: create_plan_group", plan);
    LLMT__NONNULL(&c->err, "comm: create_plan_group", out);
    *out = NULL;
    int32_t world = 0;
    llmt_status s = llmt_plan_world_size(plan, &world);
    if (s != LLMT_OK)
        return llmt__err_set(&c->err, s, "comm: plan: %s",
                             llmt_plan_last_error(plan));
    if (world != c->size)
        return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                             "comm: the plan has %d ranks, the communicator "
                             "%d", (int)world, (int)c->size);
    size_t n = 0;
    int32_t gid = -1;
    s = llmt_plan_group(plan, dim, c->rank, NULL, 0, &n, &gid);
    if (s != LLMT_OK && s != LLMT_ERR_BUFFER_TOO_SMALL)
        return llmt__err_set(&c->err, s, "comm: plan group %d: %s", (int)dim,
                             llmt_plan_last_error(plan));
    int32_t *ranks = malloc((n ? n : 1) * sizeof *ranks);
    if (!ranks) return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    s = llmt_plan_group(plan, dim, c->rank, ranks, n, &n, &gid);
    if (s != LLMT_OK) {
        free(ranks);
        return llmt__err_set(&c->err, s, "comm: plan group %d: %s", (int)dim,
                             llmt_plan_last_error(plan));
    }
    int32_t key = -1;
    for (size_t i = 0; i < n; i++)
        if (ranks[i] == c->rank) key = (int32_t)i;
    free(ranks);
    if (key < 0 || gid < 0)
        return llmt__err_set(&c->err, LLMT_ERR_INTERNAL,
                             "comm: rank %d is not in its own plan group",
                             (int)c->rank);
    return llmt_comm_split(c, gid, key, out);
}
