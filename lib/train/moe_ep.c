/* Expert parallelism of one MoE layer (moe_ep.h says what it does). */
#include "train/moe_ep.h"

#include <stdlib.h>
#include <string.h>

struct llmt__moe_ep {
    llmt__moe_shape sh;
    int rank, size, El, block, Nmax;
    /* owner: the rows an owner can receive (llmt__moe_ep_owner_room),
     * what its packed rows below hold */
    size_t owner;
    /* every rank's kept rows per expert ([size][E], all-gathered), and
     * where the owner packs them: the rows of local expert el from source
     * src start at off[el * size + src] (expert-major, kept rows only: the
     * owner computes nothing for the padding); rows[el]: expert el's sum */
    int64_t *cnt, *off, *rows;
    /* the owner's packed rows (owner x C or F), kept from the forward for
     * the backward */
    float *xo, *h1, *h3, *act;
    /* scratch: the exchange ([size][El][block][C], i.e. [E][block][C]:
     * the all-to-all's fixed shape), the owner's outputs and backward
     * (owner x C or F) */
    float *sbuf, *rbuf, *yo, *dyo, *dxo, *dact, *dh1, *dh3;
};

void llmt__moe_ep_free(llmt__moe_ep *p)
{
    if (!p)
        return;
    void *b[] = {p->xo,  p->h1,   p->h3,  p->act, p->sbuf, p->rbuf, p->yo,  p->dyo,
                 p->dxo, p->dact, p->dh1, p->dh3, p->cnt,  p->off,  p->rows};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        free(b[i]);
    free(p);
}

llmt__moe_ep *llmt__moe_ep_new(const llmt__moe_shape *sh, int Nmax, int rank, int size)
{
    return llmt__moe_ep_new_rows(sh, Nmax, rank, size, 1);
}

llmt__moe_ep *llmt__moe_ep_new_rows(const llmt__moe_shape *sh, int Nmax, int rank, int size,
                                    int rows)
{
    if (size < 1 || sh->E % size || rank < 0 || rank >= size)
        return NULL;
    llmt__moe_ep *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->sh = *sh;
    p->rank = rank;
    p->size = size;
    p->El = sh->E / size;
    p->Nmax = Nmax;
    p->block = llmt__moe_capacity(sh, Nmax);
    p->owner = llmt__moe_ep_owner_room(sh, Nmax, size);
    /* the exchange's E x block rows of width C; the owner's rows: what
     * it can receive, up to E x block (moe_dev_ep.c sizes its own alike) */
    size_t R = (size_t)sh->E * (size_t)p->block, O = p->owner, C = (size_t)sh->C,
           F = (size_t)sh->F;
    float **rx[] = {&p->sbuf, &p->rbuf};
    float **rc[] = {&p->xo, &p->yo, &p->dyo, &p->dxo};
    float **rf[] = {&p->h1, &p->h3, &p->act, &p->dact, &p->dh1, &p->dh3};
    p->cnt = malloc((size_t)size * sh->E * sizeof(int64_t));
    p->off = malloc((size_t)size * p->El * sizeof(int64_t));
    p->rows = malloc((size_t)p->El * sizeof(int64_t));
    int ok = p->cnt && p->off && p->rows;
    for (size_t i = 0; ok && rows && i < 2; i++)
        ok = (*rx[i] = malloc(R * C * sizeof(float))) != NULL;
    for (size_t i = 0; ok && rows && i < 4; i++)
        ok = (*rc[i] = malloc(O * C * sizeof(float))) != NULL;
    for (size_t i = 0; ok && rows && i < 6; i++)
        ok = (*rf[i] = malloc(O * F * sizeof(float))) != NULL;
    if (!ok) {
        llmt__moe_ep_free(p);
        return NULL;
    }
    return p;
}

size_t llmt__moe_ep_owner_room(const llmt__moe_shape *sh, int Nmax, int size)
{
    size_t blocks = (size_t)sh->E * (size_t)llmt__moe_capacity(sh, Nmax),
           sent = (size_t)size * (size_t)Nmax * (size_t)sh->K;
    return blocks < sent ? blocks : sent;
}

void llmt__moe_ep_bytes(const llmt__moe_ep *p, size_t *saved, size_t *scratch)
{
    size_t R = (size_t)p->sh.E * (size_t)p->block, O = p->xo ? p->owner : 0,
           C = (size_t)p->sh.C, F = (size_t)p->sh.F;
    *saved = sizeof(float) * O * (C + 3 * F);
    *scratch = p->xo ? sizeof(float) * (2 * R * C + O * (3 * C + 3 * F)) : 0;
}

int llmt__moe_ep_block(const llmt__moe_ep *p)
{
    return p->block;
}

int llmt__moe_ep_local(const llmt__moe_ep *p)
{
    return p->El;
}

int64_t llmt__moe_ep_owner_rows(const llmt__moe_ep *p, int el)
{
    return p->rows[el];
}

int64_t llmt__moe_ep_owner_off(const llmt__moe_ep *p, int el, int src)
{
    return p->off[(size_t)el * p->size + src];
}

static size_t cnt_of(const llmt__moe_ep *p, int el, int src);

int64_t llmt__moe_ep_owner_cnt(const llmt__moe_ep *p, int el, int src)
{
    return (int64_t)cnt_of(p, el, src);
}

/* Packed rows (s->start, s->kept) of width w into the exchange layout
 * [E][block][w], zeros after each expert's kept rows (the padding is
 * never computed on, but the bytes sent are defined). */
static void pack(const llmt__moe_ep *p, const llmt__moe *s, const float *rows, float *out,
                 size_t w)
{
    size_t B = (size_t)p->block;
    for (int x = 0; x < p->sh.E; x++) {
        size_t k = (size_t)s->kept[x];
        float *o = out + (size_t)x * B * w;
        memcpy(o, rows + (size_t)s->start[x] * w, k * w * sizeof(float));
        memset(o + k * w, 0, (B - k) * w * sizeof(float));
    }
}

/* The inverse: each expert's kept rows out of the exchange layout. */
static void unpack(const llmt__moe_ep *p, const llmt__moe *s, const float *in, float *rows,
                   size_t w)
{
    size_t B = (size_t)p->block;
    for (int x = 0; x < p->sh.E; x++)
        memcpy(rows + (size_t)s->start[x] * w, in + (size_t)x * B * w,
               (size_t)s->kept[x] * w * sizeof(float));
}

/* The all-gathered counts checked for every owner of the group, not
 * this rank's alone: every rank reaches the same verdict, so none is
 * left waiting in the all-to-all a refusing rank never enters. A count
 * past the block, or an owner's rows past the room of its packed rows
 * (a source routing more than Nmax x top_k rows, which none does), is
 * refused before anything is copied. */
static llmt_status check_counts(const llmt__moe_ep *p, llmt_err *e)
{
    int E = p->sh.E;
    for (int j = 0; j < p->size; j++) {
        int64_t all = 0;
        for (int src = 0; src < p->size; src++)
            for (int el = 0; el < p->El; el++) {
                int x = j * p->El + el;
                int64_t c = p->cnt[(size_t)src * E + (size_t)x];
                if (c < 0 || c > p->block)
                    return llmt__err_set(e, LLMT_ERR_INTERNAL,
                                         "trainer: moe: rank %d of the EP group kept %lld "
                                         "rows for expert %d (block %d)",
                                         src, (long long)c, x, p->block);
                all += c;
            }
        if ((uint64_t)all > p->owner)
            return llmt__err_set(e, LLMT_ERR_INTERNAL,
                                 "trainer: moe: expert parallel rank %d would receive %lld "
                                 "rows for its %d experts, room for %zu (%d ranks x top_k %d "
                                 "x at most %d tokens, or %d experts x %d rows)",
                                 j, (long long)all, p->El, p->owner, p->size, p->sh.K, p->Nmax,
                                 E, p->block);
    }
    return LLMT_OK;
}

/* Every rank's kept rows per expert (all-gathered: the exchange keeps its
 * fixed shape, and the owner learns how many rows of each block are
 * real), and the owner's packing of them. */
static llmt_status counts(llmt__moe_ep *p, const llmt__moe *s, llmt_comm *comm, llmt_err *e)
{
    int E = p->sh.E;
    llmt_status st =
        llmt_comm_all_gather(comm, s->kept, p->cnt, (size_t)E, LLMT_DTYPE_INT64, NULL);
    if (st != LLMT_OK)
        return llmt__err_set(e, st, "trainer: moe: expert parallel counts (all-gather): %s",
                             llmt_comm_last_error(comm));
    if ((st = check_counts(p, e)) != LLMT_OK)
        return st;
    int64_t at = 0;
    for (int el = 0; el < p->El; el++) {
        p->rows[el] = 0;
        for (int src = 0; src < p->size; src++) {
            p->off[(size_t)el * p->size + src] = at;
            at += (int64_t)cnt_of(p, el, src);
            p->rows[el] += (int64_t)cnt_of(p, el, src);
        }
    }
    return LLMT_OK;
}

llmt_status llmt__moe_ep_counts(llmt__moe_ep *p, const llmt__moe *s, llmt_comm *comm,
                                llmt_err *e)
{
    return counts(p, s, comm, e);
}

static size_t cnt_of(const llmt__moe_ep *p, int el, int src)
{
    return (size_t)p->cnt[(size_t)src * p->sh.E + (size_t)p->rank * p->El + el];
}

/* Received [size][El][block][w] (source-major, padded) -> the owner's
 * kept rows packed expert-major (one GEMM per expert), and back (the
 * padding of the blocks going back is never read: the source takes its
 * kept rows only). */
static void to_owner(const llmt__moe_ep *p, const float *in, float *out, size_t w)
{
    size_t B = (size_t)p->block * w;
    for (int src = 0; src < p->size; src++)
        for (int el = 0; el < p->El; el++)
            memcpy(out + (size_t)p->off[(size_t)el * p->size + src] * w,
                   in + ((size_t)src * p->El + el) * B, cnt_of(p, el, src) * w * sizeof(float));
}

static void from_owner(const llmt__moe_ep *p, const float *in, float *out, size_t w)
{
    size_t B = (size_t)p->block * w;
    for (int src = 0; src < p->size; src++)
        for (int el = 0; el < p->El; el++)
            memcpy(out + ((size_t)src * p->El + el) * B,
                   in + (size_t)p->off[(size_t)el * p->size + src] * w,
                   cnt_of(p, el, src) * w * sizeof(float));
}

static llmt_status a2a(const llmt__moe_ep *p, llmt_comm *comm, llmt_err *e, const char *what)
{
    size_t n = (size_t)p->El * p->block * p->sh.C;
    llmt_status st = llmt_comm_all_to_all(comm, p->sbuf, p->rbuf, n, LLMT_DTYPE_FP32, NULL);
    if (st != LLMT_OK)
        return llmt__err_set(e, st, "trainer: moe: expert parallel all-to-all (%s): %s", what,
                             llmt_comm_last_error(comm));
    return LLMT_OK;
}

/* Local expert `el` on the rows its owner packed from every rank. */
static void owner_fwd(llmt__moe_ep *p, const llmt__moe_w *w, int el)
{
    size_t C = (size_t)p->sh.C, F = (size_t)p->sh.F;
    size_t r0 = (size_t)p->off[(size_t)el * p->size];
    llmt__moe_expert_fwd(&p->sh, w, el, (int)p->rows[el], p->xo + r0 * C, p->h1 + r0 * F,
                         p->h3 + r0 * F, p->act + r0 * F, p->yo + r0 * C);
}

static void owner_bwd(llmt__moe_ep *p, const llmt__moe_w *w, llmt__moe_w *dw, int el)
{
    size_t C = (size_t)p->sh.C, F = (size_t)p->sh.F;
    size_t r0 = (size_t)p->off[(size_t)el * p->size];
    llmt__moe_expert_bwd(&p->sh, w, dw, el, (int)p->rows[el], p->xo + r0 * C, p->h1 + r0 * F,
                         p->h3 + r0 * F, p->act + r0 * F, p->dyo + r0 * C, p->dact + r0 * F,
                         p->dh1 + r0 * F, p->dh3 + r0 * F, p->dxo + r0 * C);
}

llmt_status llmt__moe_ep_fwd(llmt__moe_ep *p, llmt__moe *s, llmt_comm *comm, llmt_err *e,
                             const llmt__moe_w *w, const float *x, float *y, int N)
{
    if (N < 1 || N > s->Nmax)
        return llmt__err_set(e, LLMT_ERR_INTERNAL, "trainer: moe: %d tokens (made for %d)", N,
                             s->Nmax);
    size_t C = (size_t)p->sh.C;
    llmt_status st;
    if ((st = llmt__moe_route(s, w->router, x, N)) != LLMT_OK)
        return st; /* the token group's sum (moe_group.h) set the message */
    if ((st = counts(p, s, comm, e)) != LLMT_OK)
        return st;
    pack(p, s, s->xe, p->sbuf, C);
    if ((st = a2a(p, comm, e, "dispatch")) != LLMT_OK)
        return st;
    to_owner(p, p->rbuf, p->xo, C);
    /* one region over the local experts, as moe.c's layer; not `parallel
     * for if`: a region of one would nest each GEMM's split inside it,
     * for which libgomp starts fresh threads (moe.c, llmt__moe_fwd) */
    if (llmt__moe_over_experts(p->rows, p->El)) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int el = 0; el < p->El; el++)
            owner_fwd(p, w, el);
    } else {
        for (int el = 0; el < p->El; el++)
            owner_fwd(p, w, el);
    }
    from_owner(p, p->yo, p->sbuf, C);
    if ((st = a2a(p, comm, e, "combine")) != LLMT_OK)
        return st;
    unpack(p, s, p->rbuf, s->ye, C);
    llmt__moe_combine(s, y);
    return LLMT_OK;
}

llmt_status llmt__moe_ep_bwd(llmt__moe_ep *p, llmt__moe *s, llmt_comm *comm, llmt_err *e,
                             const llmt__moe_w *w, llmt__moe_w *dw, const float *x,
                             const float *dy, float *dx, float aux_coef, float z_coef)
{
    size_t C = (size_t)p->sh.C;
    llmt_status st;
    llmt__moe_combine_bwd(s, dy);
    pack(p, s, s->dye, p->sbuf, C);
    if ((st = a2a(p, comm, e, "output gradients")) != LLMT_OK)
        return st;
    to_owner(p, p->rbuf, p->dyo, C);
    if (llmt__moe_over_experts(p->rows, p->El)) { /* as the forward's */
#pragma omp parallel for schedule(dynamic, 1)
        for (int el = 0; el < p->El; el++)
            owner_bwd(p, w, dw, el);
    } else {
        for (int el = 0; el < p->El; el++)
            owner_bwd(p, w, dw, el);
    }
    from_owner(p, p->dxo, p->sbuf, C);
    if ((st = a2a(p, comm, e, "input gradients")) != LLMT_OK)
        return st;
    unpack(p, s, p->rbuf, s->dxe, C);
    llmt__moe_router_bwd(s, w, dw, x, dx, aux_coef, z_coef);
    return LLMT_OK;
}
