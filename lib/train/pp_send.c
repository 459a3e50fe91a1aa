/* A pipeline stage's sends left in flight (pp_send.h). */
#include <stdlib.h>
#include <time.h>

#include "comm/p2p.h"
#include "train/pp_send.h"
#include "train/pp_xfer.h"

typedef struct pending {
    llmt__isend *w; /* the message (its stamp after it); NULL: done (or none) */
    llmt_comm *c;
    int peer, a;
    llmt__pp_hbuf h; /* the message's host copy, where staged (pp_xfer.h) */
} pending;

typedef struct gbuf {
    void *buf;
    pending p;
} gbuf;

struct llmt__pp_sends {
    llmt_err *e;
    llmt__devtrain *g;
    int stage, sets;
    size_t count, tail, bytes; /* a tensor's elements, the stamp's; its bytes */
    llmt_dtype dtype;
    pending *act; /* per activation set */
    gbuf **pool;  /* gradient copies */
    int npool;
    double wait_s;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

llmt_status llmt__pp_sends_create(llmt_err *e, int stage, llmt__devtrain *g, int sets,
                                  size_t count, size_t tail, llmt_dtype dtype,
                                  llmt__pp_sends **out)
{
    *out = NULL;
    llmt__pp_sends *s = calloc(1, sizeof *s);
    if (s)
        s->act = calloc((size_t)(sets > 0 ? sets : 1), sizeof *s->act);
    if (!s || !s->act) {
        free(s);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    }
    s->e = e;
    s->g = g;
    s->stage = stage;
    s->sets = sets;
    s->count = count;
    s->tail = tail;
    s->dtype = dtype;
    s->bytes = count * llmt_dtype_size(dtype);
    *out = s;
    return LLMT_OK;
}

void llmt__pp_sends_destroy(llmt__pp_sends *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->sets; i++) {
        if (!s->act[i].w) /* else leaked with the communicator that still reads it */
            llmt__pp_hbuf_free(&s->act[i].h);
        llmt__comm_isend_free(s->act[i].w);
    }
    for (int i = 0; i < s->npool; i++) {
        gbuf *b = s->pool[i];
        if (!b->p.w) { /* else leaked with the communicator that still reads it */
            llmt__devtrain_stage_buf_free(s->g, b->buf);
            llmt__pp_hbuf_free(&b->p.h);
        }
        llmt__comm_isend_free(b->p.w);
        free(b);
    }
    free(s->pool);
    free(s->act);
    free(s);
}

llmt_status llmt__pp_stamp_put(llmt__devtrain *g, void *buf, size_t bytes, double stamp)
{
    return llmt__devtrain_stage_put(g, (char *)buf + bytes, &stamp, sizeof stamp);
}

llmt_status llmt__pp_stamp_get(llmt__devtrain *g, const void *buf, size_t bytes, double *stamp)
{
    return llmt__devtrain_stage_get(g, stamp, (const char *)buf + bytes, sizeof *stamp);
}

static llmt_status fail(llmt__pp_sends *s, const pending *p, const char *what)
{
    return llmt__err_set(s->e, LLMT_ERR_COMM,
                         "trainer: pipeline stage %d: send of the %s of micro-batch %d to "
                         "stage %d: %s",
                         s->stage, what, p->a, p->peer, llmt_comm_last_error(p->c));
}

/* The message with its sender's clock (pp.c, cpu_now) after the tensor:
 * one message, the stamp written into the buffer's tail first. */
static llmt_status post(llmt__pp_sends *s, pending *p, llmt_comm *c, void *buf, int peer, int a,
                        double stamp, const char *what)
{
    p->c = c;
    p->peer = peer;
    p->a = a;
    llmt_status st = s->tail ? llmt__pp_stamp_put(s->g, buf, s->bytes, stamp) : LLMT_OK;
    if (st != LLMT_OK)
        return st;
    st = llmt__pp_xisend(s->g, c, buf, s->count + s->tail, s->dtype, peer, &p->h, &p->w);
    return st == LLMT_ERR_COMM ? fail(s, p, what) : st;
}

/* Wait for p's send (its buffer free after). */
static llmt_status finish(llmt__pp_sends *s, pending *p, const char *what)
{
    if (!p->w)
        return LLMT_OK;
    double t0 = now_s();
    llmt_status st = llmt__comm_isend_wait(p->w);
    s->wait_s += now_s() - t0;
    if (st != LLMT_OK)
        return fail(s, p, what); /* left in flight: its buffer is never freed */
    llmt__comm_isend_free(p->w);
    p->w = NULL;
    return LLMT_OK;
}

/* Whether p's send is done, asked without waiting. */
static llmt_status done_now(llmt__pp_sends *s, pending *p, int *done)
{
    *done = 1;
    if (p->w && llmt__comm_isend_test(p->w, done) != LLMT_OK)
        return fail(s, p, "gradient");
    if (*done) {
        llmt__comm_isend_free(p->w);
        p->w = NULL;
    }
    return LLMT_OK;
}

llmt_status llmt__pp_sends_act(llmt__pp_sends *s, llmt_comm *c, void *buf, int peer, int set,
                               int a, double stamp)
{
    if (set < 0 || set >= s->sets)
        return llmt__err_set(s->e, LLMT_ERR_INTERNAL,
                             "trainer: pipeline stage %d: activation set %d of %d", s->stage,
                             set, s->sets);
    llmt_status st = finish(s, &s->act[set], "activations");
    return st != LLMT_OK ? st : post(s, &s->act[set], c, buf, peer, a, stamp, "activations");
}

llmt_status llmt__pp_sends_set_done(llmt__pp_sends *s, int set)
{
    return set >= 0 && set < s->sets ? finish(s, &s->act[set], "activations") : LLMT_OK;
}

/* A pool buffer whose sends are done (asked without waiting), else a new
 * one: never a wait here, so the gradients cannot close a ring. */
static llmt_status free_buf(llmt__pp_sends *s, gbuf **out)
{
    for (int i = 0; i < s->npool; i++) {
        int done = 0;
        llmt_status st = done_now(s, &s->pool[i]->p, &done);
        if (st != LLMT_OK)
            return st;
        if (done) {
            *out = s->pool[i];
            return LLMT_OK;
        }
    }
    gbuf **np = realloc(s->pool, ((size_t)s->npool + 1) * sizeof *np);
    if (!np)
        return llmt__err_set(s->e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    s->pool = np;
    gbuf *b = calloc(1, sizeof *b);
    if (!b)
        return llmt__err_set(s->e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    llmt_status st = llmt__devtrain_stage_buf(s->g, &b->buf, s->bytes + LLMT__STAGE_TAIL);
    if (st != LLMT_OK) {
        free(b);
        return st;
    }
    s->pool[s->npool++] = b;
    *out = b;
    return LLMT_OK;
}

llmt_status llmt__pp_sends_grad(llmt__pp_sends *s, llmt_comm *c, const void *dx, int peer,
                                int a, double stamp)
{
    gbuf *b = NULL;
    llmt_status st = free_buf(s, &b);
    if (st == LLMT_OK)
        st = llmt__devtrain_stage_copy(s->g, b->buf, dx, s->bytes);
    return st != LLMT_OK ? st : post(s, &b->p, c, b->buf, peer, a, stamp, "gradient");
}

llmt_status llmt__pp_sends_drain(llmt__pp_sends *s)
{
    llmt_status st = LLMT_OK;
    for (int i = 0; i < s->sets && st == LLMT_OK; i++)
        st = finish(s, &s->act[i], "activations");
    for (int i = 0; i < s->npool && st == LLMT_OK; i++)
        st = finish(s, &s->pool[i]->p, "gradient");
    return st;
}

int llmt__pp_sends_copies(const llmt__pp_sends *s)
{
    return s->npool;
}

double llmt__pp_sends_wait_s(llmt__pp_sends *s)
{
    double w = s->wait_s;
    s->wait_s = 0.0;
    return w;
}
