/* In-process backend: the ranks of a group are threads of one process and
 * share a group object. A collective is a rendezvous: each rank posts its
 * arguments under (seq, phase), waits (bounded by its deadline) until every
 * rank has posted the same seq, then reads the others' buffers directly and
 * writes only its own; a second rendezvous keeps the buffers alive until
 * everyone is done. Reductions run in rank order, so every rank gets the
 * same bits. Point to point: buffered (a send copies into a mailbox). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_internal.h"

typedef struct ip_msg {
    struct ip_msg *next;
    size_t count;
    llmt_dtype dtype;
    char data[];
} ip_msg;

typedef struct ip_slot {
    uint64_t seq;      /* collective this rank is in */
    int phase;
    uint64_t passed;   /* last collective it left normally */
    const llmt__coll *a;
    int32_t color, key;
    void *share;       /* split: the leader's new group */
} ip_slot;

typedef struct ip_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t n;
    int refs;
    int aborted;
    ip_slot *slot;
    llmt_comm **members;
    ip_msg **mhead, **mtail; /* n*n mailboxes, [src*n + dst] */
} ip_group;

static const llmt__comm_backend_ops ip_ops;

static ip_group *group_new(int32_t n)
{
    ip_group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->n = n;
    g->slot = calloc((size_t)n, sizeof *g->slot);
    g->members = calloc((size_t)n, sizeof *g->members);
    g->mhead = calloc((size_t)n * n, sizeof *g->mhead);
    g->mtail = calloc((size_t)n * n, sizeof *g->mtail);
    if (!g->slot || !g->members || !g->mhead || !g->mtail) {
        free(g->slot);
        free(g->members);
        free(g->mhead);
        free(g->mtail);
        free(g);
        return NULL;
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t at;
    pthread_condattr_init(&at);
    pthread_condattr_setclock(&at, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &at);
    pthread_condattr_destroy(&at);
    return g;
}

static void group_free(ip_group *g)
{
    for (size_t i = 0; i < (size_t)g->n * g->n; i++) {
        ip_msg *m = g->mhead[i];
        while (m) {
            ip_msg *nx = m->next;
            free(m);
            m = nx;
        }
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->slot);
    free(g->members);
    free(g->mhead);
    free(g->mtail);
    free(g);
}

static llmt_comm *member_new(llmt_context *ctx, const llmt_comm *parent,
                             const llmt_comm_opts *o, ip_group *g, int32_t r)
{
    llmt_comm *c = llmt__comm_new(ctx, parent, o);
    if (!c) return NULL;
    c->ops = &ip_ops;
    c->backend = LLMT_COMM_INPROC;
    c->be = g;
    c->rank = r;
    c->size = g->n;
    if (llmt__comm_fr_alloc(c) != LLMT_OK) {
        llmt__comm_free_shell(c);
        return NULL;
    }
    return c;
}

llmt_status llmt__inproc_create(llmt_context *ctx, int32_t n,
                                const llmt_comm_opts *o, llmt_comm **comms)
{
    llmt_err *e = ctx ? &ctx->err : NULL;
    ip_group *g = group_new(n);
    if (!g) return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
    for (int32_t r = 0; r < n; r++) {
        comms[r] = member_new(ctx, NULL, o, g, r);
        if (!comms[r]) {
            for (int32_t q = 0; q < r; q++) llmt__comm_free_shell(comms[q]);
            group_free(g);
            return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "comm: no memory");
        }
        g->members[r] = comms[r];
    }
    g->refs = n;
    return LLMT_OK;
}

static void to_timespec(int64_t ns, struct timespec *ts)
{
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

/* Caller holds g->mu. */
static int all_at(ip_group *g, uint64_t seq, int phase)
{
    for (int32_t r = 0; r < g->n; r++) {
        const ip_slot *s = &g->slot[r];
        if (!((s->seq == seq && s->phase >= phase) || s->passed >= seq))
            return 0;
    }
    return 1;
}

/* Post (seq, phase) for this rank and wait for every rank to get there.
 * Caller holds g->mu. */
static llmt_status rendezvous(llmt_comm *c, ip_group *g, uint64_t seq,
                              int phase, int64_t deadline)
{
    ip_slot *me = &g->slot[c->rank];
    me->seq = seq;
    me->phase = phase;
    pthread_cond_broadcast(&g->cv);
    struct timespec ts;
    to_timespec(deadline, &ts);
    while (!all_at(g, seq, phase)) {
        if (g->aborted || c->aborted) return LLMT_ERR_ABORTED;
        if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) == ETIMEDOUT &&
            !all_at(g, seq, phase))
            return LLMT_ERR_TIMEOUT;
    }
    return LLMT_OK;
}

static llmt_status check_peers(llmt_comm *c, ip_group *g, const llmt__coll *a)
{
    for (int32_t r = 0; r < g->n; r++) {
        const llmt__coll *b = g->slot[r].a;
        if (!b || b->kind != a->kind)
            return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "comm: seq %llu: rank %d called %s but rank %d "
                                 "called %s", (unsigned long long)a->seq,
                                 (int)c->rank, llmt__comm_op_name(a->kind),
                                 (int)r, b ? llmt__comm_op_name(b->kind) : "?");
        if (a->kind == LLMT__OP_BARRIER) continue;
        if (a->kind != LLMT__OP_ALL_TO_ALLV && b->count != a->count)
            return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "comm: %s seq %llu: rank %d has count %zu, "
                                 "rank %d has %zu", llmt__comm_op_name(a->kind),
                                 (unsigned long long)a->seq, (int)c->rank,
                                 a->count, (int)r, b->count);
        if (b->dtype != a->dtype || b->op != a->op || b->root != a->root)
            return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "comm: %s seq %llu: ranks %d and %d disagree "
                                 "on dtype, reduce op or root",
                                 llmt__comm_op_name(a->kind),
                                 (unsigned long long)a->seq, (int)c->rank,
                                 (int)r);
    }
    if (a->kind == LLMT__OP_ALL_TO_ALLV)
        for (int32_t r = 0; r < g->n; r++) {
            const llmt__coll *b = g->slot[r].a;
            if (b->scounts[c->rank] != a->rcounts[r])
                return llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                                     "comm: all_to_allv seq %llu: rank %d "
                                     "sends %zu elements to rank %d, which "
                                     "expects %zu", (unsigned long long)a->seq,
                                     (int)r, b->scounts[c->rank], (int)c->rank,
                                     a->rcounts[r]);
        }
    return LLMT_OK;
}

/* The data movement of one collective, after everyone has posted. */
static llmt_status move(llmt_comm *c, ip_group *g, const llmt__coll *a,
                        void **tmp_out)
{
    size_t es = llmt_dtype_size(a->dtype);
    int32_t n = g->n, me = c->rank;
    const void *srcs_small[16];
    const void **srcs = srcs_small;
    if (n > 16) {
        srcs = malloc((size_t)n * sizeof *srcs);
        if (!srcs) return LLMT_ERR_OUT_OF_MEMORY;
    }
    llmt_status s = LLMT_OK;
    switch (a->kind) {
    case LLMT__OP_ALL_REDUCE: {
        if (a->count == 0) break;
        void *tmp = malloc(a->count * es);
        if (!tmp) {
            s = LLMT_ERR_OUT_OF_MEMORY;
            break;
        }
        for (int32_t r = 0; r < n; r++) srcs[r] = g->slot[r].a->send;
        llmt__reduce_many(a->dtype, a->op, tmp, srcs, (size_t)n, 0, a->count);
        *tmp_out = tmp; /* copied out after the second rendezvous */
        break;
    }
    case LLMT__OP_REDUCE_SCATTER: {
        if (a->count == 0) break;
        for (int32_t r = 0; r < n; r++)
            srcs[r] = g->slot[r].a->send;
        /* reduce_many reads index i of every source before writing d[i], so
         * recv == send + me*count works; the others only read their own
         * blocks of our send. */
        llmt__reduce_many(a->dtype, a->op, (char *)a->recv - (size_t)me * a->count * es,
                          srcs, (size_t)n, (size_t)me * a->count, a->count);
        break;
    }
    case LLMT__OP_ALL_GATHER:
        for (int32_t r = 0; r < n; r++) {
            char *dst = (char *)a->recv + (size_t)r * a->count * es;
            const void *src = g->slot[r].a->send;
            if (dst != src && a->count) memcpy(dst, src, a->count * es);
        }
        break;
    case LLMT__OP_ALL_TO_ALL:
        for (int32_t r = 0; r < n; r++)
            if (a->count)
                memcpy((char *)a->recv + (size_t)r * a->count * es,
                       (const char *)g->slot[r].a->send +
                           (size_t)me * a->count * es,
                       a->count * es);
        break;
    case LLMT__OP_ALL_TO_ALLV:
        for (int32_t r = 0; r < n; r++) {
            const llmt__coll *b = g->slot[r].a;
            if (a->rcounts[r])
                memcpy((char *)a->recv + a->rdispls[r] * es,
                       (const char *)b->send + b->sdispls[me] * es,
                       a->rcounts[r] * es);
        }
        break;
    case LLMT__OP_BROADCAST:
        if (me != a->root && a->count)
            memcpy(a->recv, g->slot[a->root].a->send, a->count * es);
        break;
    default:
        break;
    }
    if (srcs != srcs_small) free(srcs);
    return s;
}

static llmt_status ip_p2p(llmt_comm *c, ip_group *g, const llmt__coll *a,
                          int64_t deadline)
{
    size_t es = llmt_dtype_size(a->dtype);
    if (a->kind == LLMT__OP_SEND) {
        ip_msg *m = malloc(sizeof *m + a->count * es);
        if (!m) return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY,
                                     "comm: send: no memory for %zu bytes",
                                     a->count * es);
        m->next = NULL;
        m->count = a->count;
        m->dtype = a->dtype;
        if (a->count) memcpy(m->data, a->send, a->count * es);
        size_t box = (size_t)c->rank * g->n + a->peer;
        pthread_mutex_lock(&g->mu);
        if (g->mtail[box]) g->mtail[box]->next = m;
        else g->mhead[box] = m;
        g->mtail[box] = m;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return LLMT_OK;
    }
    size_t box = (size_t)a->peer * g->n + c->rank;
    struct timespec ts;
    to_timespec(deadline, &ts);
    pthread_mutex_lock(&g->mu);
    while (!g->mhead[box]) {
        if (g->aborted || c->aborted) {
            pthread_mutex_unlock(&g->mu);
            return LLMT_ERR_ABORTED;
        }
        if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) == ETIMEDOUT &&
            !g->mhead[box]) {
            pthread_mutex_unlock(&g->mu);
            return LLMT_ERR_TIMEOUT;
        }
    }
    ip_msg *m = g->mhead[box];
    g->mhead[box] = m->next;
    if (!m->next) g->mtail[box] = NULL;
    pthread_mutex_unlock(&g->mu);
    llmt_status s = LLMT_OK;
    if (m->count != a->count || m->dtype != a->dtype)
        s = llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                          "comm: recv from rank %d: expected %zu x %s, the "
                          "message has %zu x %s", (int)a->peer, a->count,
                          llmt_dtype_name(a->dtype), m->count,
                          llmt_dtype_name(m->dtype));
    else if (a->count)
        memcpy(a->recv, m->data, a->count * es);
    free(m);
    return s;
}

static llmt_status ip_run(llmt_comm *c, const llmt__coll *a, int64_t deadline)
{
    ip_group *g = c->be;
    if (a->kind == LLMT__OP_SEND || a->kind == LLMT__OP_RECV)
        return ip_p2p(c, g, a, deadline);
    pthread_mutex_lock(&g->mu);
    g->slot[c->rank].a = a;
    llmt_status s = rendezvous(c, g, a->seq, 1, deadline);
    if (s != LLMT_OK) {
        pthread_mutex_unlock(&g->mu);
        return s;
    }
    if (a->kind == LLMT__OP_BARRIER) {
        g->slot[c->rank].passed = a->seq;
        pthread_mutex_unlock(&g->mu);
        return LLMT_OK;
    }
    pthread_mutex_unlock(&g->mu);
    /* Everyone has posted; their arguments stay valid until phase 2. */
    llmt_status bad = check_peers(c, g, a);
    void *tmp = NULL;
    if (bad == LLMT_OK) bad = move(c, g, a, &tmp);
    pthread_mutex_lock(&g->mu);
    s = rendezvous(c, g, a->seq, 2, deadline);
    if (s == LLMT_OK) g->slot[c->rank].passed = a->seq;
    pthread_mutex_unlock(&g->mu);
    if (tmp) {
        if (s == LLMT_OK && bad == LLMT_OK)
            memcpy(a->recv, tmp, a->count * llmt_dtype_size(a->dtype));
        free(tmp);
    }
    if (bad == LLMT_ERR_OUT_OF_MEMORY)
        return llmt__err_set(&c->err, bad, "comm: %s: no memory",
                             llmt__comm_op_name(a->kind));
    return bad != LLMT_OK ? bad : s;
}

typedef struct split_ent {
    int32_t color, key, rank;
} split_ent;

static int split_cmp(const void *x, const void *y)
{
    const split_ent *a = x, *b = y;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static llmt_status ip_split(llmt_comm *c, int32_t color, int32_t key,
                            int64_t deadline, llmt_comm **out)
{
    ip_group *g = c->be;
    uint64_t seq = c->next_seq - 1;
    llmt__coll a;
    memset(&a, 0, sizeof a);
    a.kind = LLMT__OP_SPLIT;
    a.seq = seq;
    pthread_mutex_lock(&g->mu);
    ip_slot *me = &g->slot[c->rank];
    me->a = &a;
    me->color = color;
    me->key = key;
    /* share is written only by this split's leader, between the two
     * rendezvous: clearing it here would race with a member of the previous
     * split that has passed its second rendezvous but not yet read it */
    llmt_status s = rendezvous(c, g, seq, 1, deadline);
    if (s != LLMT_OK) {
        pthread_mutex_unlock(&g->mu);
        return s;
    }
    pthread_mutex_unlock(&g->mu);
    /* Members of my color in (key, rank) order. */
    split_ent *m = malloc((size_t)g->n * sizeof *m);
    int32_t nm = 0, myidx = -1;
    if (!m) {
        s = LLMT_ERR_OUT_OF_MEMORY;
        pthread_mutex_lock(&g->mu);
        me->share = NULL; /* were it the leader: no stale group */
        pthread_mutex_unlock(&g->mu);
    }
    if (m && color >= 0) {
        for (int32_t r = 0; r < g->n; r++)
            if (g->slot[r].color == color)
                m[nm++] = (split_ent){color, g->slot[r].key, r};
        qsort(m, (size_t)nm, sizeof *m, split_cmp);
        for (int32_t i = 0; i < nm; i++)
            if (m[i].rank == c->rank) myidx = i;
        if (myidx == 0) { /* the leader builds the group and every handle */
            ip_group *ng = group_new(nm);
            int ok = ng != NULL;
            for (int32_t i = 0; ok && i < nm; i++) {
                llmt_comm *pc = g->members[m[i].rank];
                ng->members[i] = member_new(pc ? pc->ctx : c->ctx, c, NULL, ng, i);
                ok = ng->members[i] != NULL;
            }
            if (!ok && ng) {
                for (int32_t i = 0; i < nm; i++)
                    if (ng->members[i]) llmt__comm_free_shell(ng->members[i]);
                group_free(ng);
                ng = NULL;
            }
            if (ng) ng->refs = nm;
            pthread_mutex_lock(&g->mu);
            me->share = ng;
            pthread_mutex_unlock(&g->mu);
        }
    }
    pthread_mutex_lock(&g->mu);
    llmt_status s2 = rendezvous(c, g, seq, 2, deadline);
    if (s2 == LLMT_OK) g->slot[c->rank].passed = seq;
    ip_group *ng = NULL;
    if (s2 == LLMT_OK && m && color >= 0) ng = g->slot[m[0].rank].share;
    pthread_mutex_unlock(&g->mu);
    if (s2 != LLMT_OK) {
        free(m);
        return s2;
    }
    if (color >= 0) {
        if (!ng) {
            free(m);
            return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY,
                                 "comm: split: no memory for the new group");
        }
        *out = ng->members[myidx];
    }
    free(m);
    return s;
}

static int ip_diagnose(llmt_comm *c, uint64_t seq, int32_t *missing,
                       int32_t *unreachable, int *nunreach, llmt__sbuf *dump)
{
    ip_group *g = c->be;
    int n = 0;
    *nunreach = 0;
    pthread_mutex_lock(&g->mu);
    for (int32_t r = 0; r < g->n; r++) {
        llmt_comm *m = g->members[r];
        if (!m) {
            unreachable[(*nunreach)++] = r;
            continue;
        }
        pthread_mutex_lock(&m->fr_mu);
        uint64_t entered = m->fr->entered;
        llmt__fr_format(dump, m->fr, r);
        pthread_mutex_unlock(&m->fr_mu);
        /* A rank "reached" seq when it entered it, or skipped past it
         * through a later collective it entered after completing seq. */
        int reached = 0;
        if (entered == seq) reached = 1;
        else if (entered > seq && g->slot[r].passed >= seq) reached = 1;
        else if (entered > seq) {
            /* entered a later seq without completing this one: did it
             * ever enter seq? Look for it in its recorder. */
            pthread_mutex_lock(&m->fr_mu);
            const llmt__fr *fr = m->fr;
            uint64_t first = fr->written > fr->cap ? fr->written - fr->cap : 0;
            for (uint64_t i = first; i < fr->written; i++) {
                const llmt__fr_entry *e = &fr->e[i % fr->cap];
                if (e->seq == seq && e->state != LLMT__FR_SKIPPED) reached = 1;
            }
            pthread_mutex_unlock(&m->fr_mu);
        }
        if (!reached) missing[n++] = r;
    }
    pthread_mutex_unlock(&g->mu);
    return n;
}

static void ip_abort(llmt_comm *c)
{
    ip_group *g = c->be;
    pthread_mutex_lock(&g->mu);
    if (c->user_abort) g->aborted = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void ip_destroy(llmt_comm *c)
{
    ip_group *g = c->be;
    pthread_mutex_lock(&g->mu);
    g->members[c->rank] = NULL;
    int left = --g->refs;
    pthread_mutex_unlock(&g->mu);
    if (left == 0) group_free(g);
    llmt__comm_free_shell(c);
}

static const llmt__comm_backend_ops ip_ops = {
    .name = "inproc",
    .run = ip_run,
    .split = ip_split,
    .diagnose = ip_diagnose,
    .abort = ip_abort,
    .destroy = ip_destroy,
    .copy_sends = 1, /* a send copies into its receiver's mailbox */
};
