/* The pipeline schedules as lists of ops per stage (pp_sched.h).
 *
 * Interleaved 1F1B is Megatron-LM's virtual pipeline (Narayanan et al.
 * 2021, sec. 2.2; megatron/core/pipeline_parallel/schedules.py): stage s
 * holds v model chunks, chunk c being virtual stage c * p + s, and runs
 * the m * v (chunk, micro-batch) forwards in groups of p micro-batches:
 * the k-th forward is chunk (k mod pv) / p of micro-batch (k / pv) * p +
 * k mod p, the k-th backward the same with the chunks taken last first.
 * Stage s warms up with 2 (p - s - 1) + (v - 1) p forwards (all of them
 * when m == p, as Megatron-LM does), then alternates one forward and one
 * backward, then drains. A forward of a chunk is 1/v of the stage's work,
 * so the fill and drain shrink v-fold: the bubble is (p - 1) / (v m + p -
 * 1) instead of (p - 1) / (m + p - 1), for 2 (p - s - 1) + (v - 1) p + 1
 * chunks in flight on stage s instead of p - s stages' worth (s = 0: p +
 * (p - 1) / v stages' worth).
 *
 * Each chunk runs its backwards in micro-batch order, so every parameter
 * (it belongs to one chunk) accumulates its gradient in the single-rank
 * order whatever the schedule. */
#include <stdlib.h>
#include <string.h>

#include "plan/pp_sched.h"

llmt_status llmt__pp_sched_check(llmt_err *e, int sched, int p, int v, int m)
{
    if (v < 1 || (v > 1 && sched != LLMT__PP_INTERLEAVED))
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "parallelism.virtual_stages: %d: >= 1, and > 1 only with the "
                             "interleaved schedule (LLMT_PP_INTERLEAVED)",
                             v);
    if (m < 1)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "train.grad_accum: %d micro-batches (at least 1)", m);
    if (sched != LLMT__PP_INTERLEAVED || p < 2)
        return LLMT_OK;
    if (m < p)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "train.grad_accum: %d micro-batches for %d pipeline stages: the "
                             "interleaved schedule needs at least one per stage",
                             m, p);
    if (v > 1 && m % p)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "train.grad_accum: %d micro-batches are not a multiple of "
                             "parallelism.pp %d: the interleaved schedule runs them in groups "
                             "of pp",
                             m, p);
    return LLMT_OK;
}

/* The k-th forward (bwd 0) or backward of the interleaved order. */
static void interleaved_at(int p, int v, int k, int bwd, int *chunk, int *micro)
{
    int in = k % (p * v);
    *chunk = bwd ? v - 1 - in / p : in / p;
    *micro = (k / (p * v)) * p + k % p;
}

static int interleaved_ops(int p, int v, int m, int s, llmt__pp_op *ops)
{
    int total = m * v, n = 0;
    int warm = m == p ? total : 2 * (p - s - 1) + (v - 1) * p;
    if (warm > total)
        warm = total;
    for (int k = 0; k < warm; k++, n++) {
        ops[n].bwd = 0;
        interleaved_at(p, v, k, 0, &ops[n].chunk, &ops[n].micro);
    }
    for (int k = 0; k < total - warm; k++) {
        ops[n].bwd = 0;
        interleaved_at(p, v, warm + k, 0, &ops[n].chunk, &ops[n].micro);
        n++;
        ops[n].bwd = 1;
        interleaved_at(p, v, k, 1, &ops[n].chunk, &ops[n].micro);
        n++;
    }
    for (int k = total - warm; k < total; k++, n++) {
        ops[n].bwd = 1;
        interleaved_at(p, v, k, 1, &ops[n].chunk, &ops[n].micro);
    }
    return n;
}

static void put(llmt__pp_op *o, int bwd, int micro)
{
    o->bwd = bwd;
    o->chunk = 0;
    o->micro = micro;
}

int llmt__pp_sched_ops(int sched, int p, int v, int m, int stage, llmt__pp_op *ops)
{
    int n = 0;
    if (sched == LLMT__PP_INTERLEAVED) {
        n = interleaved_ops(p, v, m, stage, ops);
    } else if (sched == LLMT__PP_GPIPE) {
        for (int a = 0; a < m; a++)
            put(&ops[n++], 0, a);
        for (int a = 0; a < m; a++)
            put(&ops[n++], 1, a);
    } else { /* 1F1B */
        int w = p - stage - 1;
        if (w > m)
            w = m;
        for (int a = 0; a < w; a++)
            put(&ops[n++], 0, a);
        for (int i = 0; i + w < m; i++) {
            put(&ops[n++], 0, i + w);
            put(&ops[n++], 1, i);
        }
        for (int a = m - w; a < m; a++)
            put(&ops[n++], 1, a);
    }
    /* activation sets: the lowest free one at each forward */
    int units = m * v, peak = 0;
    int *slot_of = malloc((size_t)units * sizeof *slot_of);
    char *busy = calloc((size_t)units, 1);
    if (!slot_of || !busy) {
        free(slot_of);
        free(busy);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int u = ops[i].chunk * m + ops[i].micro;
        if (!ops[i].bwd) {
            int k = 0;
            while (busy[k])
                k++;
            busy[k] = 1;
            slot_of[u] = k;
            if (k + 1 > peak)
                peak = k + 1;
        } else {
            busy[slot_of[u]] = 0;
        }
        ops[i].slot = slot_of[u];
    }
    free(slot_of);
    free(busy);
    return peak;
}

/* Per (kind, sender, receiver): the keys (virtual stage * m + micro) of
 * the messages in order. */
typedef struct chans {
    int p, cap;
    int *keys, *n; /* [2][p][p][cap], [2][p][p] */
} chans;

static void chan_add(chans *c, int kind, int from, int to, int key)
{
    size_t at = ((size_t)kind * c->p + from) * c->p + to;
    c->keys[at * c->cap + c->n[at]++] = key;
}

int llmt__pp_sched_sim(int sched, int p, int v, int m, double tf, double tb, double *stage_time,
                       double *idle)
{
    int per = 2 * m * v, V = p * v, rc = -1;
    llmt__pp_op *ops = malloc((size_t)p * per * sizeof *ops);
    double *fdone = malloc((size_t)V * m * sizeof *fdone);
    double *bdone = malloc((size_t)V * m * sizeof *bdone);
    double *free_at = calloc((size_t)p, sizeof *free_at);
    double *wait = calloc((size_t)p, sizeof *wait);
    int *next = calloc((size_t)p, sizeof *next);
    chans snd = {p, m * v, NULL, NULL}, rcv = {p, m * v, NULL, NULL};
    size_t nch = 2 * (size_t)p * p;
    snd.keys = malloc(nch * snd.cap * sizeof(int));
    rcv.keys = malloc(nch * rcv.cap * sizeof(int));
    snd.n = calloc(nch, sizeof(int));
    rcv.n = calloc(nch, sizeof(int));
    if (!ops || !fdone || !bdone || !free_at || !wait || !next || !snd.keys || !rcv.keys ||
        !snd.n || !rcv.n)
        goto out;
    for (int s = 0; s < p; s++)
        if (llmt__pp_sched_ops(sched, p, v, m, s, ops + (size_t)s * per) < 0)
            goto out;
    for (size_t i = 0; i < (size_t)V * m; i++)
        fdone[i] = bdone[i] = -1;
    /* each stage runs its next op once its input exists; a dataflow, so
     * the order of these sweeps does not change the times */
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < p; s++) {
            while (next[s] < per) {
                const llmt__pp_op *o = &ops[(size_t)s * per + next[s]];
                int vs = o->chunk * p + s, a = o->micro;
                double dep = 0;
                if (!o->bwd && vs > 0)
                    dep = fdone[(size_t)(vs - 1) * m + a];
                if (o->bwd && vs < V - 1)
                    dep = bdone[(size_t)(vs + 1) * m + a];
                if (o->bwd && fdone[(size_t)vs * m + a] < 0)
                    goto out; /* a backward before its forward */
                if (dep < 0)
                    break; /* its input is not there yet */
                double start = dep > free_at[s] ? dep : free_at[s];
                wait[s] += start - free_at[s];
                free_at[s] = start + (o->bwd ? tb : tf);
                (o->bwd ? bdone : fdone)[(size_t)vs * m + a] = free_at[s];
                /* the messages: activations (kind 0) forward, gradients
                 * (kind 1) backward, keyed by the receiving virtual stage */
                if (!o->bwd && vs < V - 1)
                    chan_add(&snd, 0, s, (s + 1) % p, (vs + 1) * m + a);
                if (!o->bwd && vs > 0)
                    chan_add(&rcv, 0, (s + p - 1) % p, s, vs * m + a);
                if (o->bwd && vs > 0)
                    chan_add(&snd, 1, s, (s + p - 1) % p, (vs - 1) * m + a);
                if (o->bwd && vs < V - 1)
                    chan_add(&rcv, 1, (s + 1) % p, s, vs * m + a);
                next[s]++;
                progress = 1;
            }
        }
    }
    for (int s = 0; s < p; s++)
        if (next[s] < per)
            goto out; /* deadlock */
    for (size_t c = 0; c < nch; c++) {
        if (snd.n[c] != rcv.n[c] ||
            memcmp(snd.keys + c * snd.cap, rcv.keys + c * rcv.cap, snd.n[c] * sizeof(int)))
            goto out;
    }
    for (int s = 0; s < p; s++) {
        if (stage_time)
            stage_time[s] = free_at[s];
        if (idle)
            idle[s] = wait[s];
    }
    rc = 0;
out:
    free(ops);
    free(fdone);
    free(bdone);
    free(free_at);
    free(wait);
    free(next);
    free(snd.keys);
    free(rcv.keys);
    free(snd.n);
    free(rcv.n);
    return rc;
}
