/* Per-communicator traffic: calls, payload, bus bytes and time by
 * operation, so that a run can report what each process group moved and
 * compare it with the planner's prediction for the same layout. Bus bytes
 * follow nccl-tests' bus-bandwidth factors (its PERFORMANCE.md): the bytes
 * one rank sends under the ring algorithm, independent of the backend
 * that actually ran the operation. */
#include <stddef.h>
#include <string.h>

#include "comm_internal.h"

/* internal operation -> public stat index, by name */
static const struct {
    int op;
    llmt_comm_stat_op stat;
} stat_of[] = {
    {LLMT__OP_ALL_REDUCE, LLMT_COMM_STAT_ALL_REDUCE},
    {LLMT__OP_ALL_GATHER, LLMT_COMM_STAT_ALL_GATHER},
    {LLMT__OP_REDUCE_SCATTER, LLMT_COMM_STAT_REDUCE_SCATTER},
    {LLMT__OP_ALL_TO_ALL, LLMT_COMM_STAT_ALL_TO_ALL},
    {LLMT__OP_ALL_TO_ALLV, LLMT_COMM_STAT_ALL_TO_ALLV},
    {LLMT__OP_BROADCAST, LLMT_COMM_STAT_BROADCAST},
    {LLMT__OP_SEND, LLMT_COMM_STAT_SEND},
    {LLMT__OP_RECV, LLMT_COMM_STAT_RECV},
    {LLMT__OP_BARRIER, LLMT_COMM_STAT_BARRIER},
};

/* The caller's payload and the ring algorithm's bytes sent by this rank. */
static void volume(const llmt_comm *c, const llmt__coll *a, uint64_t *payload, double *bus)
{
    double n = (double)c->size, esz = (double)llmt_dtype_size(a->dtype);
    double blk = (double)a->count * esz; /* the per-call count, in bytes */
    *payload = 0;
    *bus = 0;
    switch (a->kind) {
    case LLMT__OP_ALL_REDUCE:
        *payload = (uint64_t)blk;
        *bus = 2.0 * (n - 1) / n * blk;
        break;
    case LLMT__OP_ALL_GATHER: /* count: this rank's block */
        *payload = (uint64_t)blk;
        *bus = (n - 1) * blk;
        break;
    case LLMT__OP_REDUCE_SCATTER: /* count: each rank's result block */
    case LLMT__OP_ALL_TO_ALL:     /* count: the block for each peer */
        *payload = (uint64_t)(n * blk);
        *bus = (n - 1) * blk;
        break;
    case LLMT__OP_ALL_TO_ALLV:
        for (int32_t r = 0; a->scounts && r < c->size; r++) {
            double b = (double)a->scounts[r] * esz;
            *payload += (uint64_t)b;
            if (r != c->rank)
                *bus += b;
        }
        break;
    case LLMT__OP_BROADCAST:
    case LLMT__OP_SEND:
        *payload = (uint64_t)blk;
        *bus = blk;
        break;
    default: /* recv, barrier: nothing sent */ break;
    }
}

void llmt__comm_account(llmt_comm *c, const llmt__coll *a, double seconds)
{
    if (a->kind < 0 || a->kind >= LLMT__OP_COUNT)
        return;
    uint64_t payload;
    double bus;
    volume(c, a, &payload, &bus);
    pthread_mutex_lock(&c->fr_mu);
    c->st_calls[a->kind]++;
    c->st_payload[a->kind] += payload;
    c->st_bus[a->kind] += bus;
    c->st_sec[a->kind] += seconds;
    pthread_mutex_unlock(&c->fr_mu);
}

LLMT_API llmt_status llmt_comm_get_stats(const llmt_comm *comm, llmt_comm_stats *out)
{
    if (!comm)
        return LLMT_ERR_NULL_POINTER;
    llmt_comm *c = (llmt_comm *)comm; /* the mutex and the error slot only */
    LLMT__NONNULL(&c->err, "comm: get_stats", out);
    /* filled up to the caller's struct_size: an older, shorter struct
     * gets the fields it knows */
    size_t n = out->struct_size;
    if (n < offsetof(llmt_comm_stats, calls) + sizeof out->calls)
        return llmt__err_set(&c->err, LLMT_ERR_STRUCT_SIZE,
                             "comm: stats struct_size %zu too small (pass sizeof)", n);
    if (n > sizeof(llmt_comm_stats))
        n = sizeof(llmt_comm_stats);
    llmt_comm_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    pthread_mutex_lock(&c->fr_mu);
    for (size_t i = 0; i < sizeof stat_of / sizeof *stat_of; i++) {
        int op = stat_of[i].op, k = (int)stat_of[i].stat;
        st.calls[k] = c->st_calls[op];
        st.payload_bytes[k] = c->st_payload[op];
        st.bus_bytes[k] = c->st_bus[op];
        st.seconds[k] = c->st_sec[op];
        st.total_calls += c->st_calls[op];
        st.total_bus_bytes += c->st_bus[op];
        st.total_seconds += c->st_sec[op];
    }
    pthread_mutex_unlock(&c->fr_mu);
    memcpy(out, &st, n);
    out->struct_size = n;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_comm_reset_stats(llmt_comm *c)
{
    if (!c)
        return LLMT_ERR_NULL_POINTER;
    pthread_mutex_lock(&c->fr_mu);
    memset(c->st_calls, 0, sizeof c->st_calls);
    memset(c->st_payload, 0, sizeof c->st_payload);
    memset(c->st_bus, 0, sizeof c->st_bus);
    memset(c->st_sec, 0, sizeof c->st_sec);
    pthread_mutex_unlock(&c->fr_mu);
    return LLMT_OK;
}

void llmt__comm_exposed_add(llmt_comm *c, int64_t t0)
{
    double dt = (double)(llmt__now_ns() - t0) * 1e-9;
    pthread_mutex_lock(&c->fr_mu);
    c->st_exposed += dt;
    pthread_mutex_unlock(&c->fr_mu);
}

double llmt__comm_exposed_s(const llmt_comm *c)
{
    if (!c)
        return 0;
    pthread_mutex_lock((pthread_mutex_t *)&c->fr_mu);
    double s = c->st_exposed;
    pthread_mutex_unlock((pthread_mutex_t *)&c->fr_mu);
    return s;
}

size_t llmt__comm_fr_read(llmt_comm *c, uint64_t *cursor, llmt__fr_entry *out, size_t max,
                          uint64_t *lost)
{
    size_t n = 0;
    *lost = 0;
    if (!c || !c->fr)
        return 0;
    pthread_mutex_lock(&c->fr_mu);
    const llmt__fr *fr = c->fr;
    if (fr->written > fr->cap && *cursor < fr->written - fr->cap) {
        *lost = fr->written - fr->cap - *cursor;
        *cursor = fr->written - fr->cap;
    }
    while (*cursor < fr->written && n < max) {
        const llmt__fr_entry *e = &fr->e[*cursor % fr->cap];
        if (e->state == LLMT__FR_STARTED)
            break; /* in flight: read it next time */
        out[n++] = *e;
        (*cursor)++;
    }
    pthread_mutex_unlock(&c->fr_mu);
    return n;
}
