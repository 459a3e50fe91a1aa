/* Data parallelism (see dp.h and doc/comm.md).
 *
 * Every rank holds the whole model and runs the same steps on its own part
 * of the global batch; the loss is normalised by the global target count,
 * so the SUM of the ranks' gradients is the gradient of the global batch.
 *
 * ZeRO 0: gradients all-reduced in buckets of whole units as the backward of
 *         the last micro-batch finishes them (async on the communicator's
 *         progress thread, overlapping the rest of the backward); every rank
 *         applies the same AdamW update to the whole model.
 * ZeRO 1: same reduction; each rank updates only its share of each unit
 *         (optimizer state touched only there), then the shares are
 *         all-gathered.
 * ZeRO 2: gradients reduce-scattered per unit (a rank keeps only its
 *         share of the reduced gradient; the rest is zeroed), then as 1.
 * ZeRO 3: as 2, and between uses only the rank's share of a unit's
 *         parameters is valid: a layer is all-gathered just before its
 *         forward or backward, the next one prefetched, and released again
 *         after. The embeddings and final norm stay gathered for the whole
 *         step. Releasing a unit gives the whole pages of its non-owned
 *         ranges back to the OS (madvise MADV_DONTNEED: they read back as
 *         zeros and cost nothing until the next gather rewrites them) and
 *         sets the partial pages at the ranges' edges to NaN. Only memory
 *         the library's default allocator gave is released (a user
 *         llmt_allocator's memory may be anything: it is only poisoned),
 *         and LLMT_DP_POISON=1 poisons everything instead (so that any use
 *         of an ungathered layer shows as NaN, which zeros would hide).
 * Shares: unit u of n elements is cut into `size` chunks of ceil(n/size);
 * rank r owns chunk r (the last ones may be short or empty). Reduced-
 * precision buffers are not used: everything is fp32.
 * Optimizer state: with ZeRO >= 1 the AdamW moments live here, only the
 * rank's shares, packed unit after unit (soff[u] is where unit u's share
 * starts); the trainer frees its full-size m and v once they are copied
 * in, and gets them back (all-gathered) when it detaches.
 * Staging: a unit whose n is a multiple of `size` has chunks that tile it
 * exactly, so its reduce-scatter and all-gathers run in place in the
 * gradient / parameter buffer (no copy, no staging). Only a unit that needs
 * padding (chunk x size > n: the padded tail would run into the next unit)
 * goes through a padded staging slot: RS_SLOTS of them for the ZeRO-2/3
 * reduce-scatters in flight, AG_SLOTS for the ZeRO-3 layer gathers, and
 * two slots of about bucket_bytes for the ZeRO-1/2 update's all-gather
 * (and the m/v gather of a detach), so staging is O(largest unit), never
 * O(model). Every element is summed over the same ranks in the same order
 * whichever buffer it travels in, so the results do not depend on it.
 * Memory: every buffer here is the engine's device memory in its device
 * layout (llmt__dp_store), touched only through the op table: d2d copies,
 * memset0, fill_nan, adamw, sumsq, and f32_to_bf16 to refresh a bf16
 * backend's compute copy after every gather of the fp32 master (ZeRO-1/2's
 * update, ZeRO-3's gathers); released ZeRO-3 ranges of a device are
 * poisoned (NaN, both copies) and stay allocated: only the fp32 CPU
 * backend, whose master is the model's own host memory, gives pages back.
 * The communicator takes these buffers as they are: host memory (the CPU
 * backend, the emulation) with in-process or MPI, device memory (CUDA)
 * with NCCL. The engine's stream is synchronised before every collective
 * (a NCCL collective runs on its own stream and returns complete), so a
 * collective never reads memory that a queued op has yet to write.
 * Expert parallelism (dp.h's llmt__dp_store.ep): an EP rank computes only
 * its experts' gradients, so summing a whole expert tensor over the DP
 * group would move ep times the bytes, zeros mostly. Instead each MoE
 * layer's three expert tensors leave its layer unit (which then ends at
 * the router) and this rank's rows of each become a unit of their own,
 * units U0 = L + 2 on, whose collectives run over the expert data
 * parallel group (the dp/ep ranks holding the same experts) exactly as a
 * layer's run over the DP group: reduced in a bucket of their own when
 * the layer's gradients are ready, sharded by ZeRO over that group, its
 * AdamW state only there. The engine's layout holds only this rank's
 * rows of each expert tensor (device.c's ep_shards: the whole tensor in
 * the device layout is the unit), so other EP ranks' rows are not here
 * at all: the engine gathers them over the EP group when the host copies
 * are downloaded. The gradient norm
 * counts each expert once: the expert units' squares of one EP group
 * (expert data parallel rank 0) are added to the dense ones. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "train/dp.h"

/* Reduce-scatters of padded units in flight at once: two let one unit's
 * transfer overlap the next one's backward; a third waits for the oldest. */
#define RS_SLOTS 2
/* ZeRO-3 gathers of padded units: the trainer has at most one prefetch in
 * flight and finishes it (ensure) before it gathers or prefetches another
 * unit, so one slot never makes it wait; were it busy, the prefetch in it
 * would be finished into place first (correct, only earlier). */
#define AG_SLOTS 1

struct llmt__dp {
    llmt_err err;
    llmt_comm *comm;
    int32_t rank, size;
    llmt_dp_opts o;
    llmt_model *model;
    llmt__dp_store dv; /* the engine's buffers (device layout) */
    const llmt__dev_ops *op;
    size_t es;                     /* bytes of one element of the compute copy */
    float *grads, *params, *m, *v; /* m, v: full size (ZeRO 0) or NULL */
    float *ms, *vs;         /* ZeRO >= 1: this rank's shares of m and v */
    float *hms, *hvs;       /* their host copies (device not host memory) */
    int64_t *xbuf;          /* device scratch of the small collectives */
    int64_t *gath;          /* host [size]: the small all-gathers' result */
    float *dsum;            /* device scratch of sumsq */
    const float **sx;       /* sumsq's arrays (one per unit) */
    size_t *sn;
    size_t *soff, share_n;  /* unit u's share starts at soff[u]; total */
    int nunits;
    size_t *lo, *n, *chunk, *own_lo, *own_n;
    int *unit_of_param;
    /* padded staging (see the top): slot_n = the largest chunk x size of
     * a unit that needs padding (0: none does, nothing is allocated);
     * *_unit[k] is the unit slot k holds (-1: free), *_tick[k] when it was
     * taken (the oldest is waited for when all are busy) */
    size_t slot_n;
    float *rs_slot[RS_SLOTS], *ag_slot[AG_SLOTS];
    int rs_unit[RS_SLOTS], ag_unit[AG_SLOTS];
    uint64_t rs_tick[RS_SLOTS], ag_tick[AG_SLOTS], ticks;
    float *stage;           /* two slots of `piece` x size (padded units) */
    size_t piece;
    /* buckets (ZeRO 0/1: all-reduce) or units (ZeRO 2/3: reduce-scatter) */
    int nb;
    int *b_ulo, *b_uhi, *b_of_unit, *b_nready;
    int *b_launched;
    llmt_comm_work **work;
    int *ready;
    int armed;
    /* ZeRO-3 */
    int *gathered;
    size_t page;             /* > 0: release whole pages (see the top) */
    size_t *released;        /* bytes unit u has given back (0: gathered) */
    llmt_comm_work **pf;
    llmt_status st;          /* first failure of a void hook */
    double host_s;           /* see llmt__dp_host_s */
    /* expert parallelism (see the top; U0 == nunits: none): the dense
     * units are [0, U0); expert unit U0 + 3k + j is this rank's rows of
     * tensor j (w1, w3, w2) of the k-th MoE layer, model parameter
     * xparam[k * 3 + j]; xfirst[u]: a layer unit's first expert unit (-1:
     * none); the expert data parallel group (owned) and the EP group */
    int U0;
    int *xparam, *xfirst;
    llmt_comm *xcomm, *epc;
    int32_t xrank, xsize, erank, esize;
    /* the host copy of a staged collective (see x_all_reduce) */
    float *hstage;
    size_t hstage_cap; /* bytes */
};

const llmt_err *llmt__dp_err(const llmt__dp *dp) { return &dp->err; }

/* Unit u's group: the DP group, or for an expert unit the expert data
 * parallel group. */
static llmt_comm *ucomm(const llmt__dp *dp, int u)
{
    return u >= dp->U0 ? dp->xcomm : dp->comm;
}
static size_t usize(const llmt__dp *dp, int u)
{
    return (size_t)(u >= dp->U0 ? dp->xsize : dp->size);
}

/* 1: collectives over c go through host copies: the engine's memory is
 * the device's and c reads host memory (in-process, Gloo, MPI). */
static int staged(const llmt__dp *dp, const llmt_comm *c)
{
    return llmt__staged(dp->op->host_memory, c);
}
static size_t urank(const llmt__dp *dp, int u)
{
    return (size_t)(u >= dp->U0 ? dp->xrank : dp->rank);
}
llmt_comm *llmt__dp_comm(const llmt__dp *dp)
{
    return dp->comm;
}

/* The host time of this file that neither the op table nor the
 * communicator's own count of blocked callers sees (llmt__dp_host_s).
 * Issuing an async collective is the large part: it wakes the progress
 * thread, and on a machine with fewer free cores than busy threads the
 * caller is often preempted right there, for milliseconds. */
static double clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static void host_since(llmt__dp *dp, double t0)
{
    dp->host_s += clock_s() - t0;
}
double llmt__dp_host_s(const llmt__dp *dp)
{
    return dp ? dp->host_s : 0;
}

/* Elements of parameter i in the device layout (a tensor parallel shard's
 * when the engine has one). */
static size_t dnumel(const llmt__dp *dp, int i)
{
    return dp->dv.numel ? dp->dv.numel[i] : dp->model->params[i].numel;
}

static void note(llmt__dp *dp, llmt_status s, const char *what)
{
    if (s == LLMT_OK || dp->st != LLMT_OK) return;
    dp->st = s;
    llmt__err_set(&dp->err, s, "dp: %s: %s", what,
                  llmt_comm_last_error(dp->comm));
}

/* The same for a failed op of the backend. */
static void dnote(llmt__dp *dp, llmt_status s, const char *what)
{
    if (s == LLMT_OK || dp->st != LLMT_OK)
        return;
    dp->st = s;
    llmt__err_set(&dp->err, s, "dp: %s: device %s: %s", what, dp->op->name,
                  dp->op->last_error(dp->dv.d));
}

/* Device copies and fills (host memory on the CPU and the emulation). */
static void dcopy(llmt__dp *dp, void *dst, const void *src, size_t floats)
{
    if (floats && dst != src)
        dnote(dp, dp->op->d2d(dp->dv.d, dst, src, floats * sizeof(float)), "copy");
}
static void dzero(llmt__dp *dp, float *dst, size_t floats)
{
    if (floats)
        dnote(dp, dp->op->memset0(dp->dv.d, dst, floats * sizeof(float)), "memset");
}
static void *dalloc(llmt__dp *dp, size_t bytes)
{
    void *p = NULL;
    if (dp->op->alloc(dp->dv.d, &p, bytes ? bytes : 16) != LLMT_OK)
        return NULL;
    if (bytes && dp->op->memset0(dp->dv.d, p, bytes) != LLMT_OK) {
        dp->op->free(dp->dv.d, p);
        return NULL;
    }
    return p;
}
static void dfree(llmt__dp *dp, void *p)
{
    if (p)
        dp->op->free(dp->dv.d, p);
}

/* Everything queued on the engine's stream is done (before a collective
 * reads or writes its buffers). */
static void dsync(llmt__dp *dp)
{
    if (!dp->op->host_memory)
        dnote(dp, dp->op->sync(dp->dv.d), "synchronise");
}

/* The compute copy of [lo, lo + n) from the fp32 master (bf16 backends;
 * fp32 ones compute on the master). */
static void refresh(llmt__dp *dp, size_t lo, size_t n)
{
    if (n && dp->dv.param != (void *)dp->params)
        dnote(dp,
              dp->op->f32_to_bf16(dp->dv.d, (llmt__bf16 *)((char *)dp->dv.param + lo * dp->es),
                                  dp->params + lo, n),
              "bf16 parameter copy");
}

/* A collective on one int64 per rank, host values in and out: an all-
 * reduce sum (gather 0) or an all-gather into recv[size]. Through the
 * device scratch where the communicator takes device memory. */
static llmt_status small_coll(llmt__dp *dp, int gather, const int64_t *send, int64_t *recv)
{
    const int64_t *sp = send;
    int64_t *rp = recv;
    size_t nr = gather ? (size_t)dp->size : 1;
    llmt_status s;
    if (!dp->op->host_memory && !staged(dp, dp->comm)) { /* NCCL: device memory */
        if ((s = dp->op->h2d(dp->dv.d, dp->xbuf, send, sizeof *send)) != LLMT_OK)
            return s;
        sp = dp->xbuf;
        rp = dp->xbuf + 1;
    }
    s = gather ? llmt_comm_all_gather(dp->comm, sp, rp, 1, LLMT_DTYPE_INT64, NULL)
               : llmt_comm_all_reduce(dp->comm, sp, rp, 1, LLMT_DTYPE_INT64, LLMT_REDUCE_SUM,
                                      NULL);
    if (s == LLMT_OK && rp != recv)
        s = dp->op->d2h(dp->dv.d, recv, rp, nr * sizeof *recv);
    return s;
}

LLMT_API llmt_status llmt_dp_opts_init(llmt_dp_opts *o, size_t size)
{
    llmt_dp_opts d = {0};
    d.zero_stage = 0;
    d.overlap = 1;
    d.bucket_bytes = 4 << 20;
    return llmt__opts_init(o, size, 0, &d, sizeof d, "llmt_dp_opts");
}

static size_t layer_start(const llmt__layer_offs *L)
{
    const size_t f[] = {L->ln1w, L->ln1b, L->qkvw, L->qkvb, L->projw,
                        L->projb, L->ln2w, L->ln2b, L->fcw, L->fcb,
                        L->fc3w, L->fcprojw, L->fcprojb};
    size_t m = LLMT__NOPARAM;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i] != LLMT__NOPARAM && f[i] < m) m = f[i];
    return m;
}

void llmt__dp_destroy(llmt__dp *dp)
{
    if (!dp) return;
    for (int i = 0; dp->work && i < dp->nb; i++) llmt_comm_work_free(dp->work[i]);
    for (int i = 0; dp->pf && i < dp->nunits; i++) llmt_comm_work_free(dp->pf[i]);
    free(dp->lo); free(dp->n); free(dp->chunk);
    free(dp->own_lo);
    free(dp->own_n);
    free(dp->unit_of_param);
    free(dp->b_ulo); free(dp->b_uhi); free(dp->b_of_unit); free(dp->b_nready);
    free(dp->b_launched); free(dp->work); free(dp->ready);
    free(dp->gathered); free(dp->pf); free(dp->soff); free(dp->released);
    free(dp->sx);
    free(dp->sn);
    free(dp->gath);
    free(dp->xparam);
    free(dp->xfirst);
    llmt_comm_destroy(dp->xcomm);
    free(dp->hms);
    free(dp->hvs);
    free(dp->hstage);
    if (dp->op) {
        for (int k = 0; k < RS_SLOTS; k++)
            dfree(dp, dp->rs_slot[k]);
        for (int k = 0; k < AG_SLOTS; k++)
            dfree(dp, dp->ag_slot[k]);
        dfree(dp, dp->stage);
        dfree(dp, dp->ms);
        dfree(dp, dp->vs);
        dfree(dp, dp->xbuf);
        dfree(dp, dp->dsum);
    }
    free(dp);
}

/* Parameters [a, b) poisoned: NaN in the master and the compute copy. */
static void fill_nan(llmt__dp *dp, size_t a, size_t b)
{
    if (a >= b)
        return;
    if (dp->dv.host_params) { /* the model's memory: plain host stores */
        const float nan = NAN;
        double t0 = clock_s();
        for (size_t i = a; i < b; i++)
            dp->params[i] = nan;
        host_since(dp, t0);
        return;
    }
    dnote(dp, dp->op->fill_nan(dp->dv.d, dp->params + a, (b - a) * sizeof(float)), "poison");
    if (dp->dv.param != (void *)dp->params)
        dnote(dp,
              dp->op->fill_nan(dp->dv.d, (char *)dp->dv.param + a * dp->es, (b - a) * dp->es),
              "poison");
}

/* Parameters [a, b) are not this rank's and not needed until the next
 * gather rewrites all of them: on the CPU backend the whole pages inside
 * go back to the OS, the partial ones at the edges (shared with the own
 * share or another unit, so they stay) are set to NaN; a device's are
 * poisoned whole. Returns the bytes given back. */
static size_t release_range(llmt__dp *dp, size_t a, size_t b)
{
    float *d = dp->params;
    if (a >= b) return 0;
#ifdef __linux__
    if (dp->page) {
        uintptr_t base = (uintptr_t)d, P = dp->page;
        uintptr_t pa = base + a * sizeof(float), pb = base + b * sizeof(float);
        uintptr_t ia = (pa + P - 1) / P * P, ib = pb / P * P;
        if (ia < ib) {
            /* the buffer is float-aligned and a page a multiple of a float,
             * so the page bounds fall on elements */
            size_t ea = (ia - base) / sizeof(float), eb = (ib - base) / sizeof(float);
            double t0 = clock_s();
            int given = madvise((void *)ia, ib - ia, MADV_DONTNEED) == 0;
            host_since(dp, t0);
            if (given) {
                fill_nan(dp, a, ea);
                fill_nan(dp, eb, b);
                return ib - ia;
            }
            /* e.g. locked or huge-TLB pages: keep them, poison from now on */
            llmt__log(dp->model->ctx, LLMT_LOG_WARN, "dp",
                      "madvise(MADV_DONTNEED) of ZeRO-3 parameter pages "
                      "failed; they stay resident (poisoned) from now on");
            dp->page = 0;
        }
    }
#endif
    fill_nan(dp, a, b);
    return 0;
}

/* ZeRO-3: unit u is not needed until its next gather: keep only the own
 * share (see the top). */
static void poison(llmt__dp *dp, int u)
{
    size_t own_end = dp->own_lo[u] + dp->own_n[u];
    dp->released[u] = release_range(dp, dp->lo[u], dp->own_lo[u]) +
                      release_range(dp, own_end, dp->lo[u] + dp->n[u]);
}

/* The chunks of unit u overrun it (the last rank's is short or empty), so
 * its collectives need a padded buffer instead of running in place. */
static int padded(const llmt__dp *dp, int u)
{
    return dp->chunk[u] * usize(dp, u) != dp->n[u];
}

/* The two slots of the piecewise all-gather of padded units, about
 * bucket_bytes each (no larger than the largest padded unit needs). */
static llmt_status stage_alloc(llmt__dp *dp)
{
    size_t S = (size_t)dp->size, most = dp->slot_n / S;
    if (most < 1) /* an expert unit padded on fewer ranks than the DP group */
        most = 1;
    size_t want = (size_t)dp->o.bucket_bytes / sizeof(float) / S;
    dp->piece = want < 1 ? 1 : want > most ? most : want;
    dp->stage = dalloc(dp, 2 * dp->piece * S * sizeof(float));
    return dp->stage ? LLMT_OK : LLMT_ERR_OUT_OF_MEMORY;
}

/* ZeRO >= 1: copy this rank's shares of the full m and v (zeros at step
 * 0, or a loaded state) into share-sized device buffers (and their host
 * copies where the device is not host memory). */
static llmt_status take_shares(llmt__dp *dp, const float *m, const float *v)
{
    size_t sb = (dp->share_n ? dp->share_n : 1) * sizeof(float);
    dp->ms = dalloc(dp, sb);
    dp->vs = dalloc(dp, sb);
    if (!dp->ms || !dp->vs) return LLMT_ERR_OUT_OF_MEMORY;
    if (!dp->op->host_memory) {
        dp->hms = calloc(1, sb);
        dp->hvs = calloc(1, sb);
        if (!dp->hms || !dp->hvs)
            return LLMT_ERR_OUT_OF_MEMORY;
    }
    for (int u = 0; u < dp->nunits; u++) {
        dcopy(dp, dp->ms + dp->soff[u], m + dp->own_lo[u], dp->own_n[u]);
        dcopy(dp, dp->vs + dp->soff[u], v + dp->own_lo[u], dp->own_n[u]);
    }
    dp->m = dp->v = NULL;
    if (dp->st != LLMT_OK)
        return dp->st;
    return llmt__dp_state_download(dp);
}

llmt_status llmt__dp_state_download(llmt__dp *dp)
{
    if (!dp->hms)
        return LLMT_OK;
    size_t sb = dp->share_n * sizeof(float);
    llmt_status s = dp->op->d2h(dp->dv.d, dp->hms, dp->ms, sb);
    if (s == LLMT_OK)
        s = dp->op->d2h(dp->dv.d, dp->hvs, dp->vs, sb);
    if (s != LLMT_OK)
        return llmt__err_set(&dp->err, s, "dp: read the optimizer state shares: device %s: %s",
                             dp->op->name, dp->op->last_error(dp->dv.d));
    return LLMT_OK;
}

/* The unit that starts at host offset `host` (a parameter's), in the device
 * layout (NOPARAM: none does). */
static size_t dev_start(const llmt_model *m, const size_t *doff, size_t host)
{
    for (int i = 0; host != LLMT__NOPARAM && i < m->nparams; i++)
        if (m->params[i].offset == host)
            return doff[i];
    return LLMT__NOPARAM;
}

/* Expert parallelism: the expert data parallel group, the DP ranks of
 * this rank's EP rank (collective over the DP group), which with the EP
 * group must tile the DP group. */
static llmt_status ep_groups(llmt__dp *dp, llmt_err *e, llmt_comm *ep)
{
    llmt_status s = llmt_comm_split(dp->comm, dp->erank, dp->rank, &dp->xcomm);
    if (s != LLMT_OK)
        return llmt__err_set(e, s, "dp: the expert data parallel groups (ep %d): %s",
                             (int)dp->esize, llmt_comm_last_error(dp->comm));
    llmt_comm_rank(dp->xcomm, &dp->xrank);
    llmt_comm_size(dp->xcomm, &dp->xsize);
    if (dp->size % dp->esize || dp->xsize * dp->esize != dp->size)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "dp: the EP group of %d ranks is not inside the data parallel "
                             "group of %d as a block of its ranks (%d of them hold EP rank "
                             "%d's experts; parallelism.ep must divide dp)",
                             (int)dp->esize, (int)dp->size, (int)dp->xsize, (int)dp->erank);
    dp->epc = ep;
    return LLMT_OK;
}

static int param_at(const llmt_model *m, size_t host)
{
    for (int i = 0; host != LLMT__NOPARAM && i < m->nparams; i++)
        if (m->params[i].offset == host)
            return i;
    return -1;
}

/* Expert parallelism: each MoE layer's unit ends before its experts
 * (w1, w3, w2 follow the router, the layer's last tensors), and each
 * expert tensor, which the engine holds only this rank's rows of (block
 * erank of esize), becomes unit U0 + 3k + j (see the top). */
static void expert_units(llmt__dp *dp)
{
    const llmt_model *m = dp->model;
    int u = dp->U0, k = 0;
    for (int l = 0; l < m->cfg.layers + 2; l++)
        dp->xfirst[l] = -1;
    for (int l = 0; u < dp->nunits && l < m->cfg.layers; l++) {
        const llmt__layer_offs *o = &m->layer[l];
        if (o->ew1 == LLMT__NOPARAM)
            continue;
        const size_t t[3] = {o->ew1, o->ew3, o->ew2};
        dp->xfirst[1 + l] = u;
        for (int j = 0; j < 3; j++, u++, k++) {
            int i = param_at(m, t[j]);
            if (j == 0)
                dp->n[1 + l] = dp->dv.doff[i] - dp->lo[1 + l];
            dp->xparam[k] = i;
            dp->unit_of_param[i] = u;
            dp->lo[u] = dp->dv.doff[i];
            dp->n[u] = dnumel(dp, i);
        }
    }
}

/* The dense units' all-reduce buckets (ZeRO 0/1), from the tail: filled
 * into `into` when given; returns the count. */
static int dense_buckets(const llmt__dp *dp, llmt__dp *into)
{
    int b = 0, hi = dp->U0 - 1;
    size_t acc = 0;
    for (int u = dp->U0 - 1; u >= 0; u--) {
        /* a layer with experts below a filled bucket starts the next one */
        if (dp->xfirst[u] >= 0 && hi > u) {
            if (into) {
                into->b_ulo[b] = u + 1;
                into->b_uhi[b] = hi;
            }
            b++;
            hi = u;
            acc = 0;
        }
        acc += dp->n[u] * sizeof(float);
        if (into)
            into->b_of_unit[u] = b;
        if (acc >= (size_t)dp->o.bucket_bytes || u == 0) {
            if (into) {
                into->b_ulo[b] = u;
                into->b_uhi[b] = hi;
            }
            b++;
            hi = u - 1;
            acc = 0;
        }
    }
    return b;
}

llmt_status llmt__dp_check(llmt_err *e, llmt_comm *comm, const llmt_dp_opts *opts,
                           const llmt__dev_ops *op, llmt_dp_opts *o)
{
    /* the communicator must take the engine's memory as it is */
    llmt_comm_backend be = LLMT_COMM_AUTO;
    if (llmt_comm_backend_of(comm, &be) != LLMT_OK)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT, "dp: not a communicator");
    if (op->host_memory && be == LLMT_COMM_NCCL)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "dp: a NCCL communicator takes device memory, and the %s "
                             "backend's buffers are host memory: use an in-process or "
                             "MPI communicator",
                             op->name);
    /* a host group on a device engine: staged through host memory (see
     * x_all_reduce), unless the table says that never ran there */
    if (!op->host_memory && be != LLMT_COMM_NCCL && op->unverified_dp)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "dp: data parallelism over a %s communicator on the %s backend "
                             "%s; use a NCCL communicator (LLMT_COMM_NCCL, one GPU per rank)",
                             be == LLMT_COMM_MPI    ? "MPI"
                             : be == LLMT_COMM_GLOO ? "Gloo"
                                                    : "in-process",
                             op->name, op->unverified_dp);
    llmt_dp_opts_init(o, sizeof *o);
    if (opts) {
        llmt_status s = llmt__opts_copy(e, "llmt_dp_opts", o, sizeof *o, opts);
        if (s != LLMT_OK) return s;
    }
    if (o->zero_stage < 0 || o->zero_stage > 3 || o->bucket_bytes < 0)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "dp: zero_stage %d (0..3) or bucket_bytes %lld "
                             "(>= 0) out of range",
                             (int)o->zero_stage, (long long)o->bucket_bytes);
    if (o->overlap != 0 && o->overlap != 1)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "dp: llmt_dp_opts.overlap %d is not 0 (reduce at the end) or 1 "
                             "(reduce buckets during the backward)",
                             (int)o->overlap);
    return LLMT_OK;
}

llmt_status llmt__dp_create(llmt_err *e, llmt_comm *comm, const llmt_dp_opts *opts,
                            llmt_model *model, const llmt__dp_store *st, llmt__dp **out)
{
    *out = NULL;
    llmt_dp_opts o;
    llmt_status cs = llmt__dp_check(e, comm, opts, st->op, &o);
    if (cs != LLMT_OK)
        return cs;
    llmt__dp *dp = calloc(1, sizeof *dp);
    if (!dp) return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "dp: no memory");
    dp->comm = comm;
    dp->o = o;
    dp->model = model;
    dp->dv = *st;
    dp->op = st->op;
    dp->es = st->op->store == LLMT_DTYPE_FP32 ? sizeof(float) : sizeof(llmt__bf16);
    dp->grads = st->grads;
    dp->params = st->master;
    dp->m = st->m;
    dp->v = st->v;
    llmt_comm_rank(comm, &dp->rank);
    llmt_comm_size(comm, &dp->size);
    int L = model->cfg.layers, U = L + 2, UT = U;
    dp->esize = 1;
    if (st->ep && (llmt_comm_rank(st->ep, &dp->erank) != LLMT_OK ||
                   llmt_comm_size(st->ep, &dp->esize) != LLMT_OK)) {
        llmt__dp_destroy(dp);
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT, "dp: the EP group: %s",
                             llmt_comm_last_error(st->ep));
    }
    if (dp->esize > 1) {
        llmt_status s = ep_groups(dp, e, st->ep);
        if (s != LLMT_OK) {
            llmt__dp_destroy(dp);
            return s;
        }
        for (int l = 0; l < L; l++)
            UT += model->layer[l].ew1 != LLMT__NOPARAM ? 3 : 0;
    }
    dp->U0 = U;
    dp->nunits = UT;
    dp->lo = calloc((size_t)UT, sizeof(size_t));
    dp->n = calloc((size_t)UT, sizeof(size_t));
    dp->chunk = calloc((size_t)UT, sizeof(size_t));
    dp->own_lo = calloc((size_t)UT, sizeof(size_t));
    dp->own_n = calloc((size_t)UT, sizeof(size_t));
    dp->unit_of_param = calloc((size_t)model->nparams, sizeof(int));
    dp->ready = calloc((size_t)UT, sizeof(int));
    dp->gathered = calloc((size_t)UT, sizeof(int));
    dp->pf = calloc((size_t)UT, sizeof *dp->pf);
    dp->soff = calloc((size_t)UT, sizeof(size_t));
    dp->released = calloc((size_t)UT, sizeof(size_t));
    dp->xfirst = malloc((size_t)UT * sizeof(int));
    dp->xparam = calloc((size_t)(UT - U) + 1, sizeof(int));
    size_t nsx = (size_t)UT + (st->norm_count > 0 ? (size_t)st->norm_count : 0);
    dp->sx = calloc(nsx, sizeof *dp->sx);
    dp->sn = calloc(nsx, sizeof *dp->sn);
    /* taken here, not per step: a rank whose allocation failed between
     * the ranks' collectives returned alone, the others waited until the
     * comm timeout */
    dp->gath = calloc((size_t)dp->size, sizeof *dp->gath);
    dp->xbuf = dalloc(dp, (1 + (size_t)dp->size) * sizeof(int64_t));
    dp->dsum = dalloc(dp, sizeof(float));
    for (int k = 0; k < RS_SLOTS; k++) dp->rs_unit[k] = -1;
    for (int k = 0; k < AG_SLOTS; k++) dp->ag_unit[k] = -1;
    if (!dp->lo || !dp->n || !dp->chunk || !dp->own_lo || !dp->own_n || !dp->unit_of_param ||
        !dp->ready || !dp->gathered || !dp->pf || !dp->soff || !dp->released || !dp->sx ||
        !dp->sn || !dp->gath || !dp->xbuf || !dp->dsum || !dp->xfirst || !dp->xparam) {
        llmt__dp_destroy(dp);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "dp: no memory");
    }
    /* unit boundaries: head | layer 0 | ... | layer L-1 | tail */
    size_t tail = LLMT__NOPARAM;
    const size_t tf[] = {model->lnfw, model->lnfb,
                         model->lm_head != model->wte ? model->lm_head
                                                      : LLMT__NOPARAM};
    for (int i = 0; i < 3; i++)
        if (tf[i] != LLMT__NOPARAM && tf[i] < tail) tail = tf[i];
    size_t start[4096 + 2];
    if (U > 4096 + 2) {
        llmt__dp_destroy(dp);
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED, "dp: too many layers");
    }
    start[0] = 0;
    for (int l = 0; l < L; l++) start[1 + l] = layer_start(&model->layer[l]);
    start[U - 1] = tail;
    int ok = tail != LLMT__NOPARAM && tail <= model->total;
    for (int u = 1; ok && u < U; u++) ok = start[u] != LLMT__NOPARAM && start[u] > start[u - 1];
    for (int i = 0; ok && i < model->nparams; i++) { /* units in the host layout */
        const llmt__param *p = &model->params[i];
        int found = -1;
        for (int u = 0; u < U; u++) {
            size_t end = u + 1 < U ? start[u + 1] : model->total;
            if (p->offset >= start[u] && p->offset + p->numel <= end)
                found = u;
        }
        dp->unit_of_param[i] = found;
        ok = found >= 0;
    }
    /* and where they are in the device layout (the same order, each tensor
     * on the backend's alignment) */
    for (int u = 0; ok && u < U; u++) {
        dp->lo[u] = dev_start(model, st->doff, start[u]);
        /* >=: a pipeline stage's units of other stages' layers are empty */
        ok = dp->lo[u] != LLMT__NOPARAM && (u == 0 || dp->lo[u] >= dp->lo[u - 1]);
    }
    for (int u = 0; ok && u < U; u++) {
        dp->n[u] = (u + 1 < U ? dp->lo[u + 1] : st->total) - dp->lo[u];
        ok = dp->lo[u] + dp->n[u] <= st->total;
    }
    for (int i = 0; ok && i < model->nparams; i++) {
        int u = dp->unit_of_param[i];
        ok = st->doff[i] >= dp->lo[u] && st->doff[i] + dnumel(dp, i) <= dp->lo[u] + dp->n[u];
    }
    if (!ok) {
        llmt__dp_destroy(dp);
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "dp: the model's parameters are not laid out as "
                             "embeddings, layers, final norm");
    }
    expert_units(dp);
    for (int u = 0; u < UT; u++) {
        size_t S = usize(dp, u);
        dp->chunk[u] = (dp->n[u] + S - 1) / S;
        if (padded(dp, u) && dp->chunk[u] * S > dp->slot_n)
            dp->slot_n = dp->chunk[u] * S;
        size_t a = urank(dp, u) * dp->chunk[u];
        size_t b = a + dp->chunk[u];
        if (a > dp->n[u]) a = dp->n[u];
        if (b > dp->n[u]) b = dp->n[u];
        dp->own_lo[u] = dp->lo[u] + a;
        dp->own_n[u] = b - a;
        dp->gathered[u] = 1;
        dp->soff[u] = dp->share_n;
        dp->share_n += dp->own_n[u];
    }
    int zs = o.zero_stage;
    if (zs >= 1 && take_shares(dp, st->m, st->v) != LLMT_OK) {
        llmt__dp_destroy(dp);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY,
                             "dp: cannot allocate %zu bytes for this rank's "
                             "share of the optimizer state",
                             2 * dp->share_n * sizeof(float));
    }
    /* Staging only where some unit needs padding. ZeRO-3's update does not
     * gather (the parameters stay sharded), so its stage is taken only
     * while a detach gathers m and v (llmt__dp_unshard_state). */
    const char *nomem = NULL; /* what could not be allocated */
    if (dp->slot_n && (zs == 1 || zs == 2) && stage_alloc(dp) != LLMT_OK)
        nomem = "the staging of the padded units' all-gathers";
    for (int k = 0; dp->slot_n && zs >= 2 && k < RS_SLOTS; k++)
        if (!(dp->rs_slot[k] = dalloc(dp, dp->slot_n * sizeof(float))))
            nomem = "the padded units' reduce-scatter slots";
    for (int k = 0; dp->slot_n && zs == 3 && k < AG_SLOTS; k++)
        if (!(dp->ag_slot[k] = dalloc(dp, dp->slot_n * sizeof(float))))
            nomem = "the padded units' all-gather slots";
    /* buckets: ZeRO 2/3 one per unit; else dense units from the tail,
     * about bucket_bytes each, a layer with experts the last of its bucket
     * (the bucket is one range, and its expert rows are not in it), then
     * one per expert unit */
    dp->nb = zs >= 2 ? UT : dense_buckets(dp, NULL) + (UT - U);
    dp->b_ulo = calloc((size_t)dp->nb, sizeof(int));
    dp->b_uhi = calloc((size_t)dp->nb, sizeof(int));
    dp->b_of_unit = calloc((size_t)UT, sizeof(int));
    dp->b_nready = calloc((size_t)dp->nb, sizeof(int));
    dp->b_launched = calloc((size_t)dp->nb, sizeof(int));
    dp->work = calloc((size_t)dp->nb, sizeof *dp->work);
    if (!nomem && (!dp->b_ulo || !dp->b_uhi || !dp->b_of_unit || !dp->b_nready ||
                   !dp->b_launched || !dp->work))
        nomem = "the gradient buckets";
    if (nomem) {
        llmt__dp_destroy(dp);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY,
                             "dp: no memory for %s (units of up to %zu floats, "
                             "bucket_bytes %lld)",
                             nomem, dp->slot_n, (long long)o.bucket_bytes);
    }
    if (zs >= 2) {
        for (int u = 0; u < UT; u++) {
            dp->b_ulo[u] = dp->b_uhi[u] = u;
            dp->b_of_unit[u] = u;
        }
    } else {
        int b = dense_buckets(dp, dp);
        for (int u = U; u < UT; u++, b++) {
            dp->b_ulo[b] = dp->b_uhi[b] = u;
            dp->b_of_unit[u] = b;
        }
    }
    if (zs == 3 || UT > U) {
#ifdef __linux__
        /* only pages of the library's own allocator are ours to give back
         * (a user allocator may hand out shared, file-backed or pinned
         * memory), and LLMT_DP_POISON=1 keeps NaN everywhere for debugging */
        const char *pv = getenv("LLMT_DP_POISON");
        long ps = sysconf(_SC_PAGESIZE);
        if (st->host_params && llmt__alloc_is_default(model->ctx) && !(pv && pv[0] == '1') &&
            ps > 0 && (size_t)ps % sizeof(float) == 0)
            dp->page = (size_t)ps;
#endif
        for (int u = 0; zs == 3 && u < UT; u++) {
            poison(dp, u);
            dp->gathered[u] = 0;
        }
    }
    if (dp->st != LLMT_OK) {
        llmt_status s = llmt__err_set(e, dp->st, "%s", dp->err.msg);
        llmt__dp_destroy(dp);
        return s;
    }
    *out = dp;
    return LLMT_OK;
}

/* ---- the step */

llmt_status llmt__dp_begin(llmt__dp *dp, int64_t *count)
{
    dp->st = LLMT_OK;
    dp->armed = 0;
    for (int u = 0; u < dp->nunits; u++) dp->ready[u] = 0;
    for (int b = 0; b < dp->nb; b++) {
        dp->b_nready[b] = 0;
        dp->b_launched[b] = 0;
    }
    int64_t c = *count;
    llmt_status s = small_coll(dp, 0, &c, count);
    if (s != LLMT_OK) note(dp, s, "target count");
    return s;
}

void llmt__dp_micro(llmt__dp *dp, int last) { dp->armed = last; }

/* Slot k of `unit` (-1: none holds u). */
static int slot_of(const int *unit, int nslots, int u)
{
    for (int k = 0; k < nslots; k++)
        if (unit[k] == u) return k;
    return -1;
}

/* A free slot: one never taken, else the one taken longest ago. */
static int slot_pick(const int *unit, const uint64_t *tick, int nslots)
{
    int best = 0;
    for (int k = 0; k < nslots; k++) {
        if (unit[k] < 0) return k;
        if (tick[k] < tick[best]) best = k;
    }
    return best;
}

/* ZeRO-2/3: the reduce-scatter of unit u is over: keep the rank's share
 * of the reduced gradient (in place already, or copied out of its slot),
 * zero the rest of the unit, free the slot. */
static void rs_finish(llmt__dp *dp, int u, llmt_status s)
{
    int k = slot_of(dp->rs_unit, RS_SLOTS, u);
    if (s == LLMT_OK) {
        float *g = dp->grads;
        size_t own_end = dp->own_lo[u] + dp->own_n[u];
        if (k >= 0)
            dcopy(dp, g + dp->own_lo[u], dp->rs_slot[k] + urank(dp, u) * dp->chunk[u],
                  dp->own_n[u]);
        dzero(dp, g + dp->lo[u], dp->own_lo[u] - dp->lo[u]);
        dzero(dp, g + own_end, dp->lo[u] + dp->n[u] - own_end);
    }
    if (k >= 0) dp->rs_unit[k] = -1;
}

/* ---- the gradients' and parameters' collectives (fp32, in place)
 *
 * Where the communicator takes the engine's memory (host memory with a
 * host backend; CUDA's with NCCL) each is issued as it is, left in
 * flight when w is given. Where it does not (a device engine over an
 * in-process, Gloo or MPI group) it is staged through one host buffer, as
 * tp.c and cp.c stage theirs: its input copied out by the table's d2h,
 * the blocking collective on the host copy, its output copied back by
 * h2d (both queued on the engine's stream and synchronising it); it is
 * done on return and *w stays NULL, which the waits below take as done.
 * Correct, not fast: NCCL on the device buffers is the fast path. */
static llmt_status hstage(llmt__dp *dp, size_t n)
{
    return llmt__host_stage((void **)&dp->hstage, &dp->hstage_cap, n * sizeof(float));
}

#define XS(call)                  \
    do {                          \
        llmt_status xs_ = (call); \
        if (xs_ != LLMT_OK)       \
            return xs_;           \
    } while (0)

/* buf[n] summed over c. */
static llmt_status x_all_reduce(llmt__dp *dp, llmt_comm *c, float *buf, size_t n,
                                llmt_comm_work **w)
{
    if (!staged(dp, c))
        return llmt_comm_iall_reduce(c, buf, buf, n, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, w);
    size_t b = n * sizeof(float);
    XS(hstage(dp, n));
    XS(dp->op->d2h(dp->dv.d, dp->hstage, buf, b));
    XS(llmt_comm_all_reduce(c, dp->hstage, dp->hstage, n, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM,
                            NULL));
    return dp->op->h2d(dp->dv.d, buf, dp->hstage, b);
}

/* buf[size C] summed over c, this rank's (rank r) chunk into buf + r C. */
static llmt_status x_reduce_scatter(llmt__dp *dp, llmt_comm *c, float *buf, size_t C, int r,
                                    size_t size, llmt_comm_work **w)
{
    if (!staged(dp, c))
        return llmt_comm_ireduce_scatter(c, buf, buf + (size_t)r * C, C, LLMT_DTYPE_FP32,
                                         LLMT_REDUCE_SUM, w);
    XS(hstage(dp, size * C));
    XS(dp->op->d2h(dp->dv.d, dp->hstage, buf, size * C * sizeof(float)));
    float *mine = dp->hstage + (size_t)r * C;
    XS(llmt_comm_reduce_scatter(c, dp->hstage, mine, C, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM,
                                NULL));
    return dp->op->h2d(dp->dv.d, buf + (size_t)r * C, mine, C * sizeof(float));
}

/* Every rank's chunk of C (rank r's at buf + r C) into buf[size C]; w
 * NULL: blocking. */
static llmt_status x_all_gather(llmt__dp *dp, llmt_comm *c, float *buf, size_t C, int r,
                                size_t size, llmt_comm_work **w)
{
    float *mine = buf + (size_t)r * C;
    if (!staged(dp, c))
        return w ? llmt_comm_iall_gather(c, mine, buf, C, LLMT_DTYPE_FP32, w)
                 : llmt_comm_all_gather(c, mine, buf, C, LLMT_DTYPE_FP32, NULL);
    XS(hstage(dp, size * C));
    float *hm = dp->hstage + (size_t)r * C;
    XS(dp->op->d2h(dp->dv.d, hm, mine, C * sizeof(float)));
    XS(llmt_comm_all_gather(c, hm, dp->hstage, C, LLMT_DTYPE_FP32, NULL));
    return dp->op->h2d(dp->dv.d, buf, dp->hstage, size * C * sizeof(float));
}

/* Wait for bucket b's reduction (if launched and not waited yet). */
static void reduce_wait(llmt__dp *dp, int b)
{
    if (!dp->work[b]) return;
    llmt_status s = llmt_comm_work_wait(dp->work[b], -1);
    llmt_comm_work_free(dp->work[b]);
    dp->work[b] = NULL;
    note(dp, s, "gradient reduction");
    if (dp->o.zero_stage >= 2) rs_finish(dp, b, s);
}

static void launch(llmt__dp *dp, int b)
{
    if (dp->b_launched[b] || dp->st != LLMT_OK) return;
    dp->b_launched[b] = 1;
    dsync(dp);
    llmt_status s;
    if (dp->o.zero_stage >= 2) {
        int u = b;
        size_t C = dp->chunk[u];
        float *buf = dp->grads + dp->lo[u];
        int k = -1;
        if (padded(dp, u)) {
            /* all slots busy: the oldest reduction is finished first (it
             * was queued first, so this waits only for what is ahead) */
            k = slot_pick(dp->rs_unit, dp->rs_tick, RS_SLOTS);
            if (dp->rs_unit[k] >= 0) reduce_wait(dp, dp->rs_unit[k]);
            dp->rs_unit[k] = u;
            dp->rs_tick[k] = ++dp->ticks;
            buf = dp->rs_slot[k];
            size_t n = dp->n[u], all = C * usize(dp, u);
            dcopy(dp, buf, dp->grads + dp->lo[u], n);
            dzero(dp, buf + n, all - n);
            dsync(dp);
        }
        double t0 = clock_s();
        s = x_reduce_scatter(dp, ucomm(dp, u), buf, C, (int)urank(dp, u), usize(dp, u),
                             &dp->work[b]);
        host_since(dp, t0);
        if (s != LLMT_OK && k >= 0) dp->rs_unit[k] = -1;
        if (s == LLMT_OK && !dp->work[b]) /* staged: done already */
            rs_finish(dp, b, s);
    } else {
        size_t lo = dp->lo[dp->b_ulo[b]];
        size_t hi = dp->lo[dp->b_uhi[b]] + dp->n[dp->b_uhi[b]];
        double t0 = clock_s();
        s = x_all_reduce(dp, ucomm(dp, dp->b_ulo[b]), dp->grads + lo, hi - lo, &dp->work[b]);
        host_since(dp, t0);
    }
    note(dp, s, "gradient reduction");
}

static void ready_one(llmt__dp *dp, int unit)
{
    if (dp->ready[unit])
        return;
    dp->ready[unit] = 1;
    int b = dp->b_of_unit[unit];
    dp->b_nready[b]++;
    if (dp->o.overlap && dp->b_nready[b] == dp->b_uhi[b] - dp->b_ulo[b] + 1)
        launch(dp, b);
}

void llmt__dp_ready(llmt__dp *dp, int unit)
{
    if (!dp->armed || unit < 0 || unit >= dp->U0)
        return;
    ready_one(dp, unit);
    /* a MoE layer's experts are done with it (expert parallelism) */
    for (int j = 0; dp->xfirst[unit] >= 0 && j < 3; j++)
        ready_one(dp, dp->xfirst[unit] + j);
}

llmt_status llmt__dp_end(llmt__dp *dp, double *loss_sum)
{
    for (int b = 0; b < dp->nb; b++) launch(dp, b);
    for (int b = 0; b < dp->nb; b++) reduce_wait(dp, b);
    dp->armed = 0;
    if (dp->st != LLMT_OK) return dp->st;
    /* the loss sum, in rank order (doubles travel as their bits) */
    int64_t mine, *all = dp->gath;
    memcpy(&mine, loss_sum, sizeof mine);
    llmt_status s = small_coll(dp, 1, &mine, all);
    if (s == LLMT_OK) {
        double t = 0;
        for (int r = 0; r < dp->size; r++) {
            double x;
            memcpy(&x, &all[r], sizeof x);
            t += x;
        }
        *loss_sum = t;
    }
    note(dp, s, "loss sum");
    return dp->st;
}

/* Sum of squares of `count` device arrays, on the device (one read back). */
static llmt_status dev_sumsq(llmt__dp *dp, int count, double *out)
{
    float f = 0.0f;
    llmt_status s = dp->op->sumsq(dp->dv.d, dp->dsum, dp->sx, dp->sn, count);
    if (s == LLMT_OK)
        s = dp->op->d2h(dp->dv.d, &f, dp->dsum, sizeof f);
    if (s != LLMT_OK)
        return llmt__err_set(&dp->err, s, "dp: gradient norm: device %s: %s", dp->op->name,
                             dp->op->last_error(dp->dv.d));
    *out = f;
    return LLMT_OK;
}

/* The bits of x from every rank of the DP group, summed in rank order. */
static llmt_status sum_ranks(llmt__dp *dp, double x, double *out)
{
    int64_t bits, *all = dp->gath;
    memcpy(&bits, &x, sizeof bits);
    llmt_status s = small_coll(dp, 1, &bits, all);
    double t = 0;
    for (int r = 0; s == LLMT_OK && r < dp->size; r++) {
        double y;
        memcpy(&y, &all[r], sizeof y);
        t += y;
    }
    *out = t;
    if (s != LLMT_OK) {
        dp->st = LLMT_OK;
        note(dp, s, "gradient norm");
    }
    return s;
}

llmt_status llmt__group_max(const llmt__dev_ops *op, llmt__dev *d, llmt_comm *comm,
                            int on_device, float *x, float *dev, size_t n)
{
    llmt_status s;
    if (!on_device)
        return llmt_comm_all_reduce(comm, x, x, n, LLMT_DTYPE_FP32, LLMT_REDUCE_MAX, NULL);
    if ((s = op->h2d(d, dev, x, n * sizeof *x)) != LLMT_OK ||
        (s = llmt_comm_all_reduce(comm, dev, dev, n, LLMT_DTYPE_FP32, LLMT_REDUCE_MAX, NULL)) !=
            LLMT_OK)
        return s;
    return op->d2h(d, x, dev, n * sizeof *x);
}

llmt_status llmt__dp_max(llmt__dp *dp, float *x, float *dev, size_t n)
{
    /* NCCL: device memory */
    int on_device = !dp->op->host_memory && !staged(dp, dp->comm);
    llmt_status s = llmt__group_max(dp->op, dp->dv.d, dp->comm, on_device, x, dev, n);
    if (s != LLMT_OK)
        return llmt__err_set(&dp->err, s, "dp: fp8 amax maximum: %s",
                             llmt_comm_last_error(dp->comm));
    return LLMT_OK;
}

/* Whether device offset `at` lies in an expert tensor (expert units). */
static int in_expert(const llmt__dp *dp, size_t at)
{
    for (int u = dp->U0; u < dp->nunits; u++) {
        int i = dp->xparam[u - dp->U0];
        if (at >= dp->dv.doff[i] && at < dp->dv.doff[i] + dnumel(dp, i))
            return 1;
    }
    return 0;
}

/* Whether device offset `at` lies in one of the engine's norm runs (the
 * elements this rank adds to the norm: under tensor parallelism a whole
 * tensor's are tensor parallel rank 0's only). */
static int in_runs(const llmt__dp *dp, size_t at)
{
    for (int k = 0; k < dp->dv.norm_count; k++)
        if (at >= dp->dv.norm_lo[k] && at < dp->dv.norm_lo[k] + dp->dv.norm_n[k])
            return 1;
    return 0;
}

/* Expert parallelism, ZeRO 0/1: every rank holds the whole reduced
 * gradient of the dense units and of its own experts, zeros for the
 * others: the dense squares here, the experts' from one EP group (the
 * ranks of expert data parallel rank 0) summed over the DP group. */
static llmt_status sumsq_ep(llmt__dp *dp, double *ss)
{
    double dense = 0, ex = 0;
    llmt_status s = LLMT_OK;
    /* an engine holding a part (a pipeline stage): its norm runs, but the
     * expert tensors' (a run lies in one parameter), are the dense part */
    int runs = dp->dv.norm_count >= 0;
    for (int part = 0; part < 2 && s == LLMT_OK; part++) {
        int cnt = 0, a = part ? dp->U0 : 0, b = part ? dp->nunits : dp->U0;
        for (int k = 0; !part && runs && k < dp->dv.norm_count; k++)
            if (!in_expert(dp, dp->dv.norm_lo[k])) {
                dp->sx[cnt] = dp->grads + dp->dv.norm_lo[k];
                dp->sn[cnt++] = dp->dv.norm_n[k];
            }
        for (int u = a; u < b && (part || !runs); u++)
            if (dp->n[u] && (!part || !runs || in_runs(dp, dp->lo[u]))) {
                dp->sx[cnt] = dp->grads + dp->lo[u];
                dp->sn[cnt++] = dp->n[u];
            }
        if (cnt)
            s = dev_sumsq(dp, cnt, part ? &ex : &dense);
    }
    if (s != LLMT_OK)
        return s;
    s = sum_ranks(dp, dp->xrank == 0 ? ex : 0.0, &ex);
    *ss = dense + ex;
    return s;
}

llmt_status llmt__dp_sumsq(llmt__dp *dp, double *ss)
{
    int runs = dp->dv.norm_count >= 0;
    if (dp->o.zero_stage < 2 && dp->U0 < dp->nunits)
        return sumsq_ep(dp, ss);
    if (dp->o.zero_stage < 2) { /* every rank holds the whole reduced gradient */
        if (!runs) {
            dp->sx[0] = dp->grads;
            dp->sn[0] = dp->dv.total;
            return dev_sumsq(dp, 1, ss);
        }
        for (int k = 0; k < dp->dv.norm_count; k++) {
            dp->sx[k] = dp->grads + dp->dv.norm_lo[k];
            dp->sn[k] = dp->dv.norm_n[k];
        }
        *ss = 0;
        return dp->dv.norm_count ? dev_sumsq(dp, dp->dv.norm_count, ss) : LLMT_OK;
    }
    double mine = 0;
    int cnt = 0;
    for (int u = 0; u < dp->nunits; u++) {
        size_t oa = dp->own_lo[u], ob = oa + dp->own_n[u];
        if (!runs && ob > oa) {
            dp->sx[cnt] = dp->grads + oa;
            dp->sn[cnt++] = ob - oa;
        }
        /* the norm runs inside the own share (a run lies in one parameter,
         * so in one unit) */
        for (int k = 0; runs && k < dp->dv.norm_count; k++) {
            size_t a = dp->dv.norm_lo[k], b = a + dp->dv.norm_n[k];
            if (a < oa)
                a = oa;
            if (b > ob)
                b = ob;
            if (a < b) {
                dp->sx[cnt] = dp->grads + a;
                dp->sn[cnt++] = b - a;
            }
        }
    }
    llmt_status s = cnt ? dev_sumsq(dp, cnt, &mine) : LLMT_OK;
    if (s != LLMT_OK)
        return s;
    return sum_ranks(dp, mine, ss);
}

static void ensure(llmt__dp *dp, int u);

/* ZeRO-3: share unit u's parameters, all-gathered in place in the model
 * (the own chunk is already where the gather puts it) or, for a padded
 * unit, through a slot: own chunk in, all-gather, out (gather_finish).
 * w NULL: blocking. */
static llmt_status gather_issue(llmt__dp *dp, int u, llmt_comm_work **w)
{
    size_t C = dp->chunk[u];
    float *buf = dp->params + dp->lo[u];
    int k = -1;
    if (padded(dp, u)) {
        /* all slots busy: finish the oldest prefetch into its place */
        k = slot_pick(dp->ag_unit, dp->ag_tick, AG_SLOTS);
        if (dp->ag_unit[k] >= 0) ensure(dp, dp->ag_unit[k]);
        dp->ag_unit[k] = u;
        dp->ag_tick[k] = ++dp->ticks;
        buf = dp->ag_slot[k];
    }
    float *mine = buf + urank(dp, u) * C;
    if (k >= 0) { /* the own chunk in (short or empty on the last ranks) */
        dcopy(dp, mine, dp->params + dp->own_lo[u], dp->own_n[u]);
        dzero(dp, mine + dp->own_n[u], C - dp->own_n[u]);
    }
    dsync(dp);
    if (dp->st != LLMT_OK) {
        if (k >= 0)
            dp->ag_unit[k] = -1;
        return dp->st;
    }
    double t0 = clock_s();
    llmt_status s = x_all_gather(dp, ucomm(dp, u), buf, C, (int)urank(dp, u), usize(dp, u), w);
    if (w) /* the blocking one counts as the communicator's exposed time */
        host_since(dp, t0);
    if (s != LLMT_OK && k >= 0) dp->ag_unit[k] = -1;
    return s;
}

/* After unit u's gather (ok: it succeeded): out of its slot, if any. */
static void gather_finish(llmt__dp *dp, int u, int ok)
{
    int k = slot_of(dp->ag_unit, AG_SLOTS, u);
    if (k >= 0) {
        if (ok)
            dcopy(dp, dp->params + dp->lo[u], dp->ag_slot[k], dp->n[u]);
        dp->ag_unit[k] = -1;
    }
    if (ok) {
        refresh(dp, dp->lo[u], dp->n[u]);
        dp->gathered[u] = 1;
        dp->released[u] = 0; /* the gather wrote every page back */
    }
}

/* Piece j (elements [j, j + len) of every rank's chunk) of unit u: this
 * rank's part into its place in `slot`, all-gathered in place. */
static llmt_status piece_issue(llmt__dp *dp, int u, const float *src, size_t j,
                               size_t len, float *slot, llmt_comm_work **w)
{
    float *mine = slot + urank(dp, u) * len;
    size_t have = dp->own_n[u] > j ? dp->own_n[u] - j : 0;
    if (have > len) have = len;
    dcopy(dp, mine, src + j, have);
    dzero(dp, mine + have, len - have);
    dsync(dp);
    if (dp->st != LLMT_OK)
        return dp->st;
    double t0 = clock_s();
    llmt_status s =
        x_all_gather(dp, ucomm(dp, u), slot, len, (int)urank(dp, u), usize(dp, u), w);
    host_since(dp, t0);
    return s;
}

static void piece_out(llmt__dp *dp, int u, size_t j, size_t len,
                      const float *slot, float *dst)
{
    for (size_t r = 0; r < usize(dp, u); r++) {
        size_t at = r * dp->chunk[u] + j;
        if (at >= dp->n[u]) break;
        size_t cnt = dp->n[u] - at < len ? dp->n[u] - at : len;
        dcopy(dp, dst + at, slot + (size_t)r * len, cnt);
    }
}

/* Padded unit u whole into dst (its n elements) from every rank's share
 * (src: this rank's own_n elements), piece by piece through the two
 * staging slots so that copying one piece out overlaps the next one's
 * transfer. dst may contain src (the parameters: the own part is rewritten
 * as is). */
static llmt_status gather_pieces(llmt__dp *dp, int u, const float *src, float *dst)
{
    size_t C = dp->chunk[u], P = dp->piece, np = (C + P - 1) / P;
    size_t slot = P * usize(dp, u);
    llmt_comm_work *w[2] = {NULL, NULL};
    llmt_status s = LLMT_OK;
    for (size_t k = 0; k <= np && s == LLMT_OK; k++) {
        if (k < np) {
            size_t j = k * P, len = C - j < P ? C - j : P;
            s = piece_issue(dp, u, src, j, len, dp->stage + (k % 2) * slot,
                            &w[k % 2]);
        }
        if (k == 0 || s != LLMT_OK) continue;
        size_t pk = k - 1, j = pk * P, len = C - j < P ? C - j : P;
        llmt_comm_work *pw = w[pk % 2];
        w[pk % 2] = NULL;
        s = pw ? llmt_comm_work_wait(pw, -1) : LLMT_OK; /* NULL: staged, done */
        llmt_comm_work_free(pw);
        if (s == LLMT_OK) piece_out(dp, u, j, len, dp->stage + (pk % 2) * slot, dst);
        if (s == LLMT_OK)
            s = dp->st;
    }
    for (int i = 0; i < 2; i++)
        if (w[i]) {
            llmt_comm_work_wait(w[i], -1);
            llmt_comm_work_free(w[i]);
        }
    return s;
}

/* Unit u whole into dst from every rank's share (src, own_n elements): a
 * unit the chunks tile is gathered in place in dst (the own share copied
 * to its place first unless it is there: the parameters), a padded one
 * piece by piece through the stage. */
static llmt_status gather_unit(llmt__dp *dp, int u, const float *src, float *dst)
{
    if (padded(dp, u)) return gather_pieces(dp, u, src, dst);
    size_t C = dp->chunk[u];
    float *mine = dst + urank(dp, u) * C;
    dcopy(dp, mine, src, C);
    dsync(dp);
    if (dp->st != LLMT_OK)
        return dp->st;
    return x_all_gather(dp, ucomm(dp, u), dst, C, (int)urank(dp, u), usize(dp, u), NULL);
}

llmt_status llmt__dp_update(llmt__dp *dp, const llmt_trainer_opts *o, float lr,
                            float scale, int64_t t)
{
    llmt_model *m = dp->model;
    int zs = dp->o.zero_stage;
    int f32 = dp->dv.param == (void *)dp->params;
    dp->st = LLMT_OK;
    for (int i = 0; i < m->nparams; i++) {
        const llmt__param *p = &m->params[i];
        size_t a = dp->dv.doff[i], n = dnumel(dp, i);
        if (zs == 0 && dp->unit_of_param[i] >= dp->U0) { /* this rank's experts only */
            a = dp->lo[dp->unit_of_param[i]];
            n = dp->n[dp->unit_of_param[i]];
        }
        float *sm = dp->m ? dp->m + a : NULL, *sv = dp->v ? dp->v + a : NULL;
        if (zs >= 1) { /* the device shares */
            int u = dp->unit_of_param[i];
            size_t rel;
            llmt__dp_param_share(dp, i, &rel, &n, NULL, NULL);
            if (n == 0) continue;
            a += rel;
            sm = dp->ms + dp->soff[u] + (a - dp->own_lo[u]);
            sv = dp->vs + dp->soff[u] + (a - dp->own_lo[u]);
        }
        llmt_status s = dp->op->adamw(dp->dv.d, dp->params + a,
                                      f32 ? NULL : (char *)dp->dv.param + a * dp->es,
                                      dp->grads + a, sm, sv, n, lr, o->beta1, o->beta2, o->eps,
                                      p->decay ? o->weight_decay : 0.0f, scale, t);
        if (s != LLMT_OK) {
            dnote(dp, s, "adamw");
            return s;
        }
    }
    if (zs == 0) return LLMT_OK;
    if (zs == 3) {
        for (int u = 0; u < dp->nunits; u++) {
            poison(dp, u);
            dp->gathered[u] = 0;
        }
        return LLMT_OK;
    }
    llmt_status s = LLMT_OK;
    for (int u = 0; u < dp->nunits && s == LLMT_OK; u++) {
        s = gather_unit(dp, u, dp->params + dp->own_lo[u], dp->params + dp->lo[u]);
        if (s == LLMT_OK)
            refresh(dp, dp->lo[u], dp->n[u]);
        if (s == LLMT_OK)
            s = dp->st;
    }
    if (s != LLMT_OK) {
        dp->st = LLMT_OK;
        note(dp, s, "parameter all-gather");
    }
    return s;
}

/* ---- ZeRO-3 parameter residency */

static void ensure(llmt__dp *dp, int u)
{
    if (dp->gathered[u]) return;
    llmt_status s;
    if (dp->pf[u]) {
        s = llmt_comm_work_wait(dp->pf[u], -1);
        llmt_comm_work_free(dp->pf[u]);
        dp->pf[u] = NULL;
    } else {
        s = gather_issue(dp, u, NULL);
    }
    gather_finish(dp, u, s == LLMT_OK);
    note(dp, s, "parameter gather");
}

void llmt__dp_use(llmt__dp *dp, int unit, int dir)
{
    if (dp->o.zero_stage < 3 || unit < 0 || unit >= dp->U0)
        return;
    int last = dp->U0 - 1;
    if (unit == 0) {
        ensure(dp, 0);
        ensure(dp, last);
    } else {
        ensure(dp, unit);
    }
    for (int j = 0; dp->xfirst[unit] >= 0 && j < 3; j++) /* its experts: blocking */
        ensure(dp, dp->xfirst[unit] + j);
    int next = unit + (dir > 0 ? 1 : -1);
    if (next >= 1 && next < last && !dp->gathered[next] && !dp->pf[next] && dp->st == LLMT_OK &&
        !staged(dp, ucomm(dp, next))) /* staged: at use */
        note(dp, gather_issue(dp, next, &dp->pf[next]), "parameter prefetch");
}

void llmt__dp_done(llmt__dp *dp, int unit)
{
    if (dp->o.zero_stage < 3 || unit < 1 || unit >= dp->U0 - 1)
        return;
    for (int j = 0; j < 4; j++) {
        int u = j == 0 ? unit : dp->xfirst[unit] >= 0 ? dp->xfirst[unit] + j - 1 : -1;
        if (u < 0)
            break;
        poison(dp, u);
        dp->gathered[u] = 0;
    }
}

llmt_status llmt__dp_params_written(llmt__dp *dp, int shares)
{
    dp->st = LLMT_OK;
    if (dp->hms) {
        size_t sb = dp->share_n * sizeof(float);
        dnote(dp, dp->op->h2d(dp->dv.d, dp->ms, dp->hms, sb), "optimizer state upload");
        dnote(dp, dp->op->h2d(dp->dv.d, dp->vs, dp->hvs, sb), "optimizer state upload");
    }
    if (dp->o.zero_stage < 3)
        return dp->st;
    for (int u = 0; u < dp->nunits; u++) {
        if (shares) {        /* only the own chunks are current: gathered again on use */
            if (dp->pf[u]) { /* it would write the old values over the own chunk */
                dp->st = llmt__err_set(&dp->err, LLMT_ERR_STATE,
                                       "dp: parameter shares written with unit %d's prefetch "
                                       "in flight (sync the parameters first)",
                                       u);
                return dp->st;
            }
            dp->gathered[u] = 0;
        }
        if (!dp->gathered[u] && !dp->pf[u])
            poison(dp, u);
    }
    return dp->st;
}

llmt_status llmt__dp_sync(llmt__dp *dp)
{
    dp->st = LLMT_OK;
    for (int u = 0; dp->o.zero_stage == 3 && u < dp->nunits; u++)
        ensure(dp, u);
    return dp->st;
}

const llmt_dp_opts *llmt__dp_opts(const llmt__dp *dp)
{
    return &dp->o;
}

llmt_comm *llmt__dp_expert_comm(const llmt__dp *dp)
{
    return dp->xcomm;
}

/* ---- the rank's shares (trainer accessors, checkpoints) */

int llmt__dp_zero_stage(const llmt__dp *dp) { return dp->o.zero_stage; }

/* A parameter lies inside one unit and the unit's share is one flat range,
 * so the rank's part of a parameter is one flat range too. */
void llmt__dp_param_share(const llmt__dp *dp, int param, size_t *rel, size_t *n, float **m,
                          float **v)
{
    int u = dp->unit_of_param[param];
    size_t lo = dp->dv.doff[param], a = lo, b = lo + dnumel(dp, param);
    size_t oa = dp->own_lo[u], ob = oa + dp->own_n[u];
    if (oa > a) a = oa;
    if (ob < b) b = ob;
    if (a >= b)
        a = b = lo; /* none of it is ours */
    *rel = a - lo;
    *n = b - a;
    if (!m || !v) return;
    *m = *v = NULL;
    if (dp->ms) {
        size_t at = dp->soff[u] + (a > oa ? a - oa : 0);
        if (b == a) at = dp->soff[u];
        *m = (dp->hms ? dp->hms : dp->ms) + at;
        *v = (dp->hvs ? dp->hvs : dp->vs) + at;
    }
}

size_t llmt__dp_state_bytes(const llmt__dp *dp)
{
    return dp->ms ? 2 * dp->share_n * sizeof(float) : 0;
}

size_t llmt__dp_released_bytes(const llmt__dp *dp)
{
    size_t n = 0;
    for (int u = 0; u < dp->nunits; u++) n += dp->released[u];
    return n;
}

size_t llmt__dp_buffer_bytes(const llmt__dp *dp)
{
    size_t n = 0;
    for (int k = 0; k < RS_SLOTS; k++)
        if (dp->rs_slot[k]) n += dp->slot_n * sizeof(float);
    for (int k = 0; k < AG_SLOTS; k++)
        if (dp->ag_slot[k]) n += dp->slot_n * sizeof(float);
    if (dp->stage) n += 2 * dp->piece * (size_t)dp->size * sizeof(float);
    return n;
}

/* Every rank's share of one state buffer into the full-size `full`. */
static llmt_status unshard_one(llmt__dp *dp, const float *share, float *full)
{
    llmt_status s = LLMT_OK;
    for (int u = 0; u < dp->nunits && s == LLMT_OK; u++)
        s = gather_unit(dp, u, share + dp->soff[u], full + dp->lo[u]);
    return s;
}

llmt_status llmt__dp_unshard_state(llmt__dp *dp, float *m, float *v)
{
    if (!dp->ms) return LLMT_OK;
    dp->st = LLMT_OK;
    /* ZeRO-3 holds no stage between steps: take it for the gather only */
    int temp = dp->slot_n && !dp->stage;
    if (temp && stage_alloc(dp) != LLMT_OK)
        return llmt__err_set(&dp->err, LLMT_ERR_OUT_OF_MEMORY,
                             "dp: no memory for the optimizer state's "
                             "all-gather staging");
    llmt_status s = unshard_one(dp, dp->ms, m);
    if (s == LLMT_OK) s = unshard_one(dp, dp->vs, v);
    if (s == LLMT_OK)
        s = dp->st;
    if (temp) {
        dsync(dp);
        dfree(dp, dp->stage);
        dp->stage = NULL;
    }
    note(dp, s, "optimizer state all-gather");
    return s;
}
