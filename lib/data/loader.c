/* The deterministic loader. Every sample is named by a global cursor g
 * (samples consumed by all ranks since epoch 0); which window g reads
 * depends only on (seed, dataset, seq_len), never on dp_size, micro_batch
 * or grad_accum, so a state saved under one batch layout resumes under any
 * other with no sample skipped or repeated. A prefetch thread computes the
 * same micro-batches ahead of time; the result is bit-identical either way.
 *
 * Order of epoch e (doc/data.md): shards permuted by Fisher-Yates with a
 * xoshiro256** stream keyed by (seed, e), then within each shard its
 * windows permuted by a stream keyed by (seed, e, shard). */
#include <inttypes.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "shard_internal.h"

#define LD_MAX_PREFETCH 4096
#define LD_PERM_CACHE 2   /* a rank's ranges are contiguous: 2 shards suffice */
/* llmt_loader_state's first layout (up to the fingerprint): callers built
 * against it still get and set states, without the layout checks */
#define STATE_V1_SIZE (offsetof(llmt_loader_state, fingerprint) + sizeof(uint64_t))

/* ---- seeded permutations ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Stream for (seed, epoch, shard); shard -1 orders the shards themselves. */
static void rng_seed(rng *r, uint64_t seed, int64_t epoch, int64_t shard)
{
    uint64_t x = seed;
    uint64_t k = splitmix64(&x);
    x = k ^ (uint64_t)epoch;
    k = splitmix64(&x);
    x = k ^ (uint64_t)(shard + 1);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

/* Uniform in [0, n) without modulo bias (Lemire's multiply-shift). */
static uint64_t rng_below(rng *r, uint64_t n)
{
    unsigned __int128 m = (unsigned __int128)rng_next(r) * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t t = -n % n;
        while (lo < t) {
            m = (unsigned __int128)rng_next(r) * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

static void fisher_yates(rng *r, int64_t *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        a[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(r, (uint64_t)i + 1);
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* ---- the sampler: g -> (shard, window). Owned by one thread at a time ---- */

typedef struct perm_entry {
    int64_t epoch;     /* -1: empty */
    int32_t shard;
    int64_t *win;      /* window order of the shard */
    size_t cap;
    uint64_t used;     /* LRU clock */
} perm_entry;

typedef struct sampler {
    const llmt_dataset *ds;
    int32_t seq_len;
    int shuffle;
    uint64_t seed;
    int64_t n_samples;        /* per epoch */
    const int64_t *windows;   /* per shard */
    const int64_t *first_id;  /* file-order id of each shard's window 0 */
    /* The cached epoch: shard order and cumulative window counts. */
    int64_t epoch;            /* -1: none */
    int64_t *order;           /* shard ids in epoch order (n shards) */
    int64_t *cum;             /* cum[k]: windows before order[k]; n + 1 */
    perm_entry perms[LD_PERM_CACHE];
    uint64_t clock;
} sampler;

static void sampler_free(sampler *sp)
{
    free(sp->order);
    free(sp->cum);
    for (int i = 0; i < LD_PERM_CACHE; i++)
        free(sp->perms[i].win);
    memset(sp, 0, sizeof *sp);
}

static void sampler_reset(sampler *sp)
{
    sp->epoch = -1;
    for (int i = 0; i < LD_PERM_CACHE; i++)
        sp->perms[i].epoch = -1;
}

/* Shard order of `epoch` into order/cum (both caller-sized). */
static void epoch_order(const llmt_dataset *ds, const int64_t *windows, int shuffle,
                        uint64_t seed, int64_t epoch, int64_t *order, int64_t *cum)
{
    if (shuffle) {
        rng r;
        rng_seed(&r, seed, epoch, -1);
        fisher_yates(&r, order, ds->n);
    } else {
        for (int32_t i = 0; i < ds->n; i++)
            order[i] = i;
    }
    cum[0] = 0;
    for (int32_t k = 0; k < ds->n; k++)
        cum[k + 1] = cum[k] + windows[order[k]];
}

static int sampler_init(sampler *sp, const llmt_dataset *ds, int32_t seq_len, int shuffle,
                        uint64_t seed, int64_t n_samples, const int64_t *windows,
                        const int64_t *first_id)
{
    memset(sp, 0, sizeof *sp);
    sp->ds = ds;
    sp->seq_len = seq_len;
    sp->shuffle = shuffle;
    sp->seed = seed;
    sp->n_samples = n_samples;
    sp->windows = windows;
    sp->first_id = first_id;
    sp->order = malloc((size_t)ds->n * sizeof *sp->order);
    sp->cum = malloc(((size_t)ds->n + 1) * sizeof *sp->cum);
    sampler_reset(sp);
    return sp->order && sp->cum ? 0 : -1;
}

static const int64_t *shard_perm(sampler *sp, int64_t epoch, int32_t shard)
{
    perm_entry *victim = &sp->perms[0];
    for (int i = 0; i < LD_PERM_CACHE; i++) {
        perm_entry *p = &sp->perms[i];
        if (p->epoch == epoch && p->shard == shard) {
            p->used = ++sp->clock;
            return p->win;
        }
        if (p->used < victim->used)
            victim = p;
    }
    size_t n = (size_t)sp->windows[shard];
    if (n > victim->cap) {
        int64_t *w = realloc(victim->win, n * sizeof *w);
        if (!w)
            return NULL;
        victim->win = w;
        victim->cap = n;
    }
    rng r;
    rng_seed(&r, sp->seed, epoch, shard);
    fisher_yates(&r, victim->win, (int64_t)n);
    victim->epoch = epoch;
    victim->shard = shard;
    victim->used = ++sp->clock;
    return victim->win;
}

/* Global sample g -> shard, token offset and file-order id. -1 when out of
 * memory. */
static int sampler_locate(sampler *sp, int64_t g, int32_t *shard, int64_t *tok,
                          int64_t *id)
{
    int64_t epoch = g / sp->n_samples, pos = g % sp->n_samples;
    if (sp->epoch != epoch) {
        epoch_order(sp->ds, sp->windows, sp->shuffle, sp->seed, epoch, sp->order, sp->cum);
        sp->epoch = epoch;
    }
    /* Last k with cum[k] <= pos; shards with no window have empty ranges. */
    int32_t lo = 0, hi = sp->ds->n;
    while (hi - lo > 1) {
        int32_t mid = lo + (hi - lo) / 2;
        if (sp->cum[mid] <= pos)
            lo = mid;
        else
            hi = mid;
    }
    int32_t s = (int32_t)sp->order[lo];
    int64_t q = pos - sp->cum[lo], w = q;
    if (sp->shuffle) {
        const int64_t *perm = shard_perm(sp, epoch, s);
        if (!perm)
            return -1;
        w = perm[q];
    }
    *shard = s;
    *tok = w * sp->seq_len;
    *id = sp->first_id[s] + w;
    return 0;
}

/* ---- the loader ---- */

typedef struct slot {
    int32_t *inputs, *targets;
    int64_t *ids;
    llmt_err err; /* why the micro-batch could not be filled */
} slot;

struct llmt_loader {
    llmt_err err;
    llmt_dataset *ds;
    llmt_loader_opts o;
    int64_t n_samples;
    int64_t *windows, *first_id;
    int64_t G;             /* samples per step, all ranks */
    int64_t base;          /* g of step 0 (set by create / set_state) */
    int64_t consumed;      /* micro-batches returned since base */
    sampler sp;
    /* One window as stored (seq_len + 1 tokens), for whichever thread
     * fills: the worker, or the caller when prefetch is 0. */
    void *raw;
    /* Prefetch: the worker fills slots for micro-batches produced..,
     * the caller takes them in order. */
    slot *ring;
    int32_t nring;
    pthread_t thread;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t can_fill, can_take;
    int64_t produced;      /* micro-batches the worker has finished */
    int stop;
};

/* The window of sample g (shard s, tokens from tok) failed: where, then
 * why, on e. */
static llmt_status window_failed(const llmt_loader *l, int64_t m, int64_t g, int32_t s,
                                 int64_t tok, const llmt_err *why, llmt_err *e)
{
    int64_t A = l->o.grad_accum;
    return llmt__err_set(e, why->status,
                         "loader: micro-batch %" PRId64 " (step %" PRId64
                         ", accumulation %" PRId64
                         ", counted from the loader's start or last set_state), "
                         "sample %" PRId64 " (epoch %" PRId64 ", cursor %" PRId64 "): %s "
                         "tokens [%" PRId64 ", %" PRId64 "): %s",
                         m, m / A, m % A, g, g / l->n_samples, g % l->n_samples,
                         l->ds->shards[s].path, tok, tok + l->o.seq_len + 1, why->msg);
}

/* Fill micro-batch number `m` (counted from base) of this rank: each
 * window read once (seq_len + 1 tokens, their ids checked), widened into
 * inputs and targets. The files read are compared with what was opened
 * once per micro-batch: a rewrite in place is named, not trained on. */
static llmt_status fill(llmt_loader *l, sampler *sp, int64_t m, int32_t *inputs,
                        int32_t *targets, int64_t *ids, llmt_err *e)
{
    const llmt_loader_opts *o = &l->o;
    int64_t A = o->grad_accum, B = o->micro_batch, T = o->seq_len;
    int64_t step = m / A, a = m % A;
    int64_t g = l->base + step * l->G + (int64_t)o->dp_rank * B * A + a * B;
    int32_t checked = -1;
    for (int64_t i = 0; i < B; i++) {
        int32_t s;
        int64_t tok, id;
        if (sampler_locate(sp, g + i, &s, &tok, &id))
            return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY,
                                 "loader: out of memory for a window permutation");
        llmt_err why = {LLMT_OK, {0}};
        llmt_status st = s == checked ? LLMT_OK : llmt__data_shard_check(l->ds, s, &why);
        checked = s;
        if (st == LLMT_OK)
            st = llmt__data_dataset_fetch(l->ds, s, tok, (size_t)T + 1, l->raw, &why);
        if (st != LLMT_OK)
            return window_failed(l, m, g + i, s, tok, &why, e);
        size_t w = l->ds->shards[s].width;
        llmt__data_dataset_widen(l->ds, s, l->raw, (size_t)T, inputs + i * T);
        llmt__data_dataset_widen(l->ds, s, (const char *)l->raw + w, (size_t)T,
                                 targets + i * T);
        if (ids)
            ids[i] = id;
    }
    return LLMT_OK;
}

static void *worker(void *arg)
{
    llmt_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && l->produced - l->consumed >= l->nring)
            pthread_cond_wait(&l->can_fill, &l->mu);
        if (l->stop)
            break;
        int64_t m = l->produced;
        slot *sl = &l->ring[m % l->nring];
        pthread_mutex_unlock(&l->mu);
        /* The slot is free (the caller is done with it) and only this
         * thread touches the sampler while it runs. */
        sl->err.status = fill(l, &l->sp, m, sl->inputs, sl->targets, sl->ids, &sl->err);
        pthread_mutex_lock(&l->mu);
        l->produced = m + 1;
        pthread_cond_signal(&l->can_take);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void stop_worker(llmt_loader *l)
{
    if (!l->running)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->can_fill);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    l->running = 0;
    l->stop = 0;
}

static llmt_status start_worker(llmt_loader *l, llmt_err *e)
{
    l->produced = l->consumed;
    if (!l->nring)
        return LLMT_OK;
    int rc = pthread_create(&l->thread, NULL, worker, l);
    if (rc)
        return llmt__err_set(e, LLMT_ERR_INTERNAL,
                             "loader: cannot start the prefetch thread: %s (prefetch = 0 "
                             "reads without one)",
                             strerror(rc));
    l->running = 1;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_loader_opts_init(llmt_loader_opts *opts, size_t size)
{
    llmt_loader_opts d = {0};
    d.seq_len = 1024;
    d.micro_batch = 4;
    d.grad_accum = 1;
    d.dp_rank = 0;
    d.dp_size = 1;
    d.shuffle = 1;
    d.prefetch = 4;
    d.seed = 1337;
    return llmt__opts_init(opts, size, offsetof(llmt_loader_opts, seed) + sizeof(uint64_t), &d,
                           sizeof d, "llmt_loader_opts");
}

static llmt_status check_opts(llmt_err *e, const llmt_loader_opts *o)
{
#define LD_RANGE(f, lo, hi)                                                              \
    if (o->f < (lo) || o->f > (hi))                                                       \
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,                                \
                             "loader: " #f " %d is outside [%d, %d]", (int)o->f, (int)(lo), \
                             (int)(hi));
    LD_RANGE(seq_len, 1, INT32_MAX - 1)
    LD_RANGE(micro_batch, 1, INT32_MAX)
    LD_RANGE(grad_accum, 1, INT32_MAX)
    LD_RANGE(dp_size, 1, INT32_MAX)
    LD_RANGE(prefetch, 0, LD_MAX_PREFETCH)
#undef LD_RANGE
    if (o->dp_rank < 0 || o->dp_rank >= o->dp_size)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "loader: dp_rank %d is outside [0, dp_size %d)", (int)o->dp_rank,
                             (int)o->dp_size);
    /* One micro-batch of inputs must be addressable; G must not overflow. */
    if ((int64_t)o->micro_batch * o->seq_len > (INT64_C(1) << 40) ||
        (int64_t)o->micro_batch * o->grad_accum > (INT64_C(1) << 40) / o->dp_size)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "loader: micro_batch %d x seq_len %d x grad_accum %d x dp_size "
                             "%d is too large", (int)o->micro_batch, (int)o->seq_len,
                             (int)o->grad_accum, (int)o->dp_size);
    return LLMT_OK;
}

LLMT_API void llmt_loader_destroy(llmt_loader *l)
{
    if (!l)
        return;
    stop_worker(l);
    if (l->ring) {
        for (int32_t i = 0; i < l->nring; i++) {
            free(l->ring[i].inputs);
            free(l->ring[i].targets);
            free(l->ring[i].ids);
        }
        free(l->ring);
    }
    pthread_cond_destroy(&l->can_fill);
    pthread_cond_destroy(&l->can_take);
    pthread_mutex_destroy(&l->mu);
    sampler_free(&l->sp);
    free(l->windows);
    free(l->first_id);
    free(l->raw);
    free(l);
}

LLMT_API llmt_status llmt_loader_create(llmt_dataset *ds, const llmt_loader_opts *opts,
                                        llmt_loader **out)
{
    if (!ds)
        return LLMT_ERR_NULL_POINTER;
    /* The loader has no context: creation errors go to the dataset. */
    llmt_err *e = &ds->err;
    LLMT__NONNULL(e, "loader: create", opts);
    LLMT__NONNULL(e, "loader: create", out);
    *out = NULL;
    llmt_loader_opts o;
    llmt_loader_opts_init(&o, sizeof o);
    llmt_status s = llmt__opts_copy(e, "loader opts", &o, sizeof o, opts);
    if (s != LLMT_OK || (s = check_opts(e, &o)) != LLMT_OK)
        return s;
    llmt_loader *l = calloc(1, sizeof *l);
    if (!l)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "loader: out of memory");
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->can_fill, NULL);
    pthread_cond_init(&l->can_take, NULL);
    l->ds = ds;
    l->o = o;
    l->windows = malloc((size_t)ds->n * sizeof *l->windows);
    l->first_id = malloc((size_t)ds->n * sizeof *l->first_id);
    l->raw = malloc(((size_t)o.seq_len + 1) * sizeof(uint32_t));
    if (!l->windows || !l->first_id || !l->raw) {
        llmt_loader_destroy(l);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "loader: out of memory");
    }
    int64_t largest = 0;
    for (int32_t i = 0; i < ds->n; i++) {
        int64_t n = ds->shards[i].n_tokens;
        l->windows[i] = n > 0 ? (n - 1) / o.seq_len : 0;
        l->first_id[i] = l->n_samples;
        l->n_samples += l->windows[i];
        if (n > largest)
            largest = n;
    }
    if (!l->n_samples) {
        llmt_loader_destroy(l);
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "loader: no shard of the dataset (%s%s) holds a whole window of "
                             "seq_len + 1 = %" PRId64 " tokens; the largest has %" PRId64,
                             ds->shards[0].path, ds->n > 1 ? ", ..." : "",
                             (int64_t)o.seq_len + 1, largest);
    }
    l->G = (int64_t)o.micro_batch * o.grad_accum * o.dp_size;
    if (sampler_init(&l->sp, ds, o.seq_len, o.shuffle != 0, o.seed, l->n_samples,
                     l->windows, l->first_id)) {
        llmt_loader_destroy(l);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "loader: out of memory");
    }
    l->nring = o.prefetch;
    if (l->nring) {
        size_t bt = (size_t)o.micro_batch * (size_t)o.seq_len;
        l->ring = calloc((size_t)l->nring, sizeof *l->ring);
        for (int32_t i = 0; l->ring && i < l->nring; i++) {
            l->ring[i].inputs = malloc(bt * sizeof(int32_t));
            l->ring[i].targets = malloc(bt * sizeof(int32_t));
            l->ring[i].ids = malloc((size_t)o.micro_batch * sizeof(int64_t));
            if (!l->ring[i].inputs || !l->ring[i].targets || !l->ring[i].ids) {
                llmt_loader_destroy(l);
                return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "loader: out of memory "
                                     "for %d prefetch buffers", (int)o.prefetch);
            }
        }
        if (!l->ring) {
            llmt_loader_destroy(l);
            return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "loader: out of memory");
        }
    }
    if ((s = start_worker(l, e)) != LLMT_OK) {
        llmt_loader_destroy(l);
        return s;
    }
    *out = l;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_loader_next(llmt_loader *l, int32_t *inputs, int32_t *targets,
                                      int64_t *sample_ids)
{
    if (!l)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&l->err, "loader: next", inputs);
    LLMT__NONNULL(&l->err, "loader: next", targets);
    llmt_status st;
    if (!l->nring) {
        st = fill(l, &l->sp, l->consumed, inputs, targets, sample_ids, &l->err);
    } else if (!l->running && (st = start_worker(l, &l->err)) != LLMT_OK) {
        /* An earlier restart (set_state, a failed micro-batch) found no
         * thread: waiting for one would never end. */
        return st;
    } else {
        pthread_mutex_lock(&l->mu);
        while (l->produced <= l->consumed)
            pthread_cond_wait(&l->can_take, &l->mu);
        pthread_mutex_unlock(&l->mu);
        const slot *sl = &l->ring[l->consumed % l->nring];
        size_t bt = (size_t)l->o.micro_batch * (size_t)l->o.seq_len;
        st = sl->err.status;
        if (st == LLMT_OK) {
            memcpy(inputs, sl->inputs, bt * sizeof *inputs);
            memcpy(targets, sl->targets, bt * sizeof *targets);
            if (sample_ids)
                memcpy(sample_ids, sl->ids, (size_t)l->o.micro_batch * sizeof *sample_ids);
        } else {
            l->err = sl->err;
        }
    }
    if (st != LLMT_OK) {
        /* The micro-batch stays unconsumed so a retry asks for it again; the
         * worker has moved past it and is restarted from here. */
        if (l->nring) {
            llmt_err keep = l->err;
            stop_worker(l);
            start_worker(l, &l->err);
            l->err = keep;
        }
        return st;
    }
    if (!l->nring) {
        l->consumed++;
        return LLMT_OK;
    }
    pthread_mutex_lock(&l->mu);
    l->consumed++;
    pthread_cond_signal(&l->can_fill);
    pthread_mutex_unlock(&l->mu);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_loader_get_state(const llmt_loader *l, llmt_loader_state *state)
{
    if (!l)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = (llmt_err *)&l->err;
    LLMT__NONNULL(e, "loader: get_state", state);
    llmt_status s = llmt__check_struct_size(e, "loader: get_state: state", state->struct_size,
                                            STATE_V1_SIZE);
    if (s != LLMT_OK)
        return s;
    if (l->consumed % l->o.grad_accum)
        return llmt__err_set(e, LLMT_ERR_STATE,
                             "loader: get_state between steps: %" PRId64 " of %d micro-batches "
                             "of the step are consumed; call it after a whole step",
                             l->consumed % l->o.grad_accum, (int)l->o.grad_accum);
    int64_t g = l->base + (l->consumed / l->o.grad_accum) * l->G;
    state->seed = l->o.seed;
    state->epoch = g / l->n_samples;
    state->cursor = g % l->n_samples;
    state->samples_per_epoch = l->n_samples;
    state->fingerprint = l->ds->fingerprint;
    if (state->struct_size >= sizeof *state) { /* a caller that knows them */
        state->seq_len = l->o.seq_len;
        state->order = l->o.shuffle ? 2 : 1;
    }
    return LLMT_OK;
}

/* A state's window length and sample order, where it records them (a
 * caller's struct of the first layout, or a checkpoint written before
 * they were kept, does not): the cursor counts samples of that order, so a
 * state of a shuffled loader set on one in file order (or of another
 * seq_len with, by chance, as many samples per epoch) would skip and
 * repeat samples without a word. */
static llmt_status check_layout(llmt_loader *l, const llmt_loader_state *st)
{
    if (st->seq_len != 0 && st->seq_len != l->o.seq_len)
        return llmt__err_set(&l->err, LLMT_ERR_INVALID_ARGUMENT,
                             "loader: the state was saved with seq_len %d, this loader has "
                             "seq_len %d: its cursor counts other windows",
                             (int)st->seq_len, (int)l->o.seq_len);
    if (st->order != 0 && st->order != 1 && st->order != 2)
        return llmt__err_set(&l->err, LLMT_ERR_INVALID_ARGUMENT,
                             "loader: state order %d is not 0 (not recorded), 1 (file order) "
                             "or 2 (shuffled)",
                             (int)st->order);
    if (st->order != 0 && st->order != (l->o.shuffle ? 2 : 1))
        return llmt__err_set(&l->err, LLMT_ERR_INVALID_ARGUMENT,
                             "loader: the state was saved with shuffle %d, this loader has "
                             "shuffle %d: its cursor counts samples in another order",
                             st->order == 2, l->o.shuffle ? 1 : 0);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_loader_set_state(llmt_loader *l, const llmt_loader_state *state)
{
    if (!l)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&l->err, "loader: set_state", state);
    llmt_status s = llmt__check_struct_size(&l->err, "loader: set_state: state",
                                            state->struct_size, STATE_V1_SIZE);
    if (s != LLMT_OK)
        return s;
    /* the caller's struct as this library's: fields it does not have read
     * 0 (not checked), a newer caller's unknown fields must be 0 */
    llmt_loader_state st;
    memset(&st, 0, sizeof st);
    s = llmt__opts_copy(&l->err, "loader: set_state: state", &st, sizeof st, state);
    if (s != LLMT_OK)
        return s;
    state = &st;
    s = check_layout(l, state);
    if (s != LLMT_OK)
        return s;
    if (state->samples_per_epoch != l->n_samples)
        return llmt__err_set(&l->err, LLMT_ERR_INVALID_ARGUMENT,
                             "loader: the state has %" PRId64 " samples per epoch, this loader "
                             "%" PRId64 " (another dataset or seq_len %d?)",
                             state->samples_per_epoch, l->n_samples, (int)l->o.seq_len);
    if (state->fingerprint != l->ds->fingerprint)
        return llmt__err_set(&l->err, LLMT_ERR_INVALID_ARGUMENT,
                             "loader: the state's dataset fingerprint %016" PRIx64 " is not this "
                             "dataset's %016" PRIx64 " (other shards or contents)",
                             state->fingerprint, l->ds->fingerprint);
    if (state->epoch < 0 || state->cursor < 0 || state->cursor >= l->n_samples ||
        state->epoch > (INT64_MAX - state->cursor) / l->n_samples - 1)
        return llmt__err_set(&l->err, LLMT_ERR_INVALID_ARGUMENT,
                             "loader: state epoch %" PRId64 " cursor %" PRId64 " is out of "
                             "range (%" PRId64 " samples per epoch)", state->epoch,
                             state->cursor, l->n_samples);
    stop_worker(l);
    l->o.seed = state->seed;
    l->sp.seed = state->seed;
    sampler_reset(&l->sp);
    l->base = state->epoch * l->n_samples + state->cursor;
    l->consumed = 0;
    return start_worker(l, &l->err);
}

/* Does [lo, hi) hold a g with g mod G in [a, a + len)? */
static int range_hits(int64_t lo, int64_t hi, int64_t G, int64_t a, int64_t len)
{
    if (hi <= lo)
        return 0;
    if (hi - lo >= G)
        return 1;
    int64_t r0 = lo % G, r1 = r0 + (hi - lo); /* residues [r0, r1), r1 <= 2G */
    /* The rank's block [a, a+len) and its copy one period later. */
    return (r0 < a + len && a < r1) || (r0 < a + G + len && a + G < r1);
}

LLMT_API llmt_status llmt_loader_assign_shards(const llmt_loader *l, int32_t dp_rank,
                                               int64_t epoch, int32_t *ids, size_t cap,
                                               size_t *n_out)
{
    if (!l)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = (llmt_err *)&l->err;
    LLMT__NONNULL(e, "loader: assign_shards", n_out);
    *n_out = 0;
    if (dp_rank < 0 || dp_rank >= l->o.dp_size)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "loader: dp_rank %d is outside [0, dp_size %d)", (int)dp_rank,
                             (int)l->o.dp_size);
    if (epoch < 0 || epoch > INT64_MAX / l->n_samples - 1)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT, "loader: epoch %" PRId64
                             " is out of range", epoch);
    int32_t n = l->ds->n;
    int64_t *order = malloc((size_t)n * sizeof *order);
    int64_t *cum = malloc(((size_t)n + 1) * sizeof *cum);
    unsigned char *hit = calloc((size_t)n, 1);
    if (!order || !cum || !hit) {
        free(order);
        free(cum);
        free(hit);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "loader: out of memory");
    }
    epoch_order(l->ds, l->windows, l->o.shuffle != 0, l->o.seed, epoch, order, cum);
    int64_t len = (int64_t)l->o.micro_batch * l->o.grad_accum;
    int64_t e0 = epoch * l->n_samples;
    /* Steps count from base (a resumed cursor need not be a multiple of
     * G), and nothing before it is read by this loader. */
    for (int32_t k = 0; k < n; k++) {
        int64_t lo = e0 + cum[k], hi = e0 + cum[k + 1];
        lo = lo > l->base ? lo : l->base;
        if (range_hits(lo - l->base, hi - l->base, l->G, (int64_t)dp_rank * len, len))
            hit[order[k]] = 1;
    }
    size_t count = 0;
    for (int32_t i = 0; i < n; i++)
        if (hit[i]) {
            if (ids && count < cap)
                ids[count] = i;
            count++;
        }
    free(order);
    free(cum);
    free(hit);
    *n_out = count;
    if (ids && count > cap)
        return llmt__err_set(e, LLMT_ERR_BUFFER_TOO_SMALL,
                             "loader: rank %d reads %zu shards in epoch %" PRId64
                             ", ids holds %zu", (int)dp_rank, count, epoch, cap);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_loader_samples_per_epoch(const llmt_loader *l, int64_t *out)
{
    if (!l)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&l->err, "loader: samples_per_epoch", out);
    *out = l->n_samples;
    return LLMT_OK;
}

LLMT_API const char *llmt_loader_last_error(const llmt_loader *l)
{
    return l ? l->err.msg : "loader: NULL loader";
}

/* For loader_ckpt.c, which records its errors on the loader. */
llmt_err *llmt__data_loader_err(const llmt_loader *l)
{
    return (llmt_err *)&l->err;
}
