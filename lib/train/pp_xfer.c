/* A pipeline stage's boundary messages, staged where they must be
 * (pp_xfer.h). */
#include <stdlib.h>

#include "train/pp_xfer.h"

void llmt__pp_hbuf_free(llmt__pp_hbuf *h)
{
    free(h->p);
    h->p = NULL;
    h->cap = 0;
}

int llmt__pp_staged(const llmt__devtrain *g, const llmt_comm *c)
{
    return llmt__staged(llmt__devtrain_stage_host(g), c);
}

/* h holding buf's message, copied out of the engine's memory. */
static llmt_status copy_out(llmt__devtrain *g, const void *buf, size_t bytes, llmt__pp_hbuf *h)
{
    llmt_status s = llmt__devtrain_stage_hostbuf(g, &h->p, &h->cap, bytes);
    return s != LLMT_OK ? s : llmt__devtrain_stage_get(g, h->p, buf, bytes);
}

llmt_status llmt__pp_xsend(llmt__devtrain *g, llmt_comm *c, const void *buf, size_t count,
                           llmt_dtype dt, int peer, llmt__pp_hbuf *h)
{
    llmt_status s;
    if (llmt__pp_staged(g, c)) {
        if ((s = copy_out(g, buf, count * llmt_dtype_size(dt), h)) != LLMT_OK)
            return s;
        buf = h->p;
    }
    return llmt_comm_send(c, buf, count, dt, peer, NULL) == LLMT_OK ? LLMT_OK : LLMT_ERR_COMM;
}

llmt_status llmt__pp_xisend(llmt__devtrain *g, llmt_comm *c, const void *buf, size_t count,
                            llmt_dtype dt, int peer, llmt__pp_hbuf *h, llmt__isend **w)
{
    llmt_status s;
    if (llmt__pp_staged(g, c)) {
        if ((s = copy_out(g, buf, count * llmt_dtype_size(dt), h)) != LLMT_OK)
            return s;
        buf = h->p;
    }
    return llmt__comm_isend(c, buf, count, dt, peer, w) == LLMT_OK ? LLMT_OK : LLMT_ERR_COMM;
}

llmt_status llmt__pp_xrecv(llmt__devtrain *g, llmt_comm *c, void *buf, size_t count,
                           llmt_dtype dt, int peer, llmt__pp_hbuf *h)
{
    if (!llmt__pp_staged(g, c))
        return llmt_comm_recv(c, buf, count, dt, peer, NULL) == LLMT_OK ? LLMT_OK
                                                                        : LLMT_ERR_COMM;
    size_t bytes = count * llmt_dtype_size(dt);
    llmt_status s = llmt__devtrain_stage_hostbuf(g, &h->p, &h->cap, bytes);
    if (s != LLMT_OK)
        return s;
    if (llmt_comm_recv(c, h->p, count, dt, peer, NULL) != LLMT_OK)
        return LLMT_ERR_COMM;
    return llmt__devtrain_stage_put(g, buf, h->p, bytes);
}

llmt_status llmt__pp_xsum(llmt__devtrain *g, llmt_comm *c, float *buf, size_t n,
                          llmt__pp_hbuf *h)
{
    int staged = llmt__pp_staged(g, c);
    float *x = buf;
    llmt_status s;
    if (staged) {
        if ((s = copy_out(g, buf, n * sizeof *buf, h)) != LLMT_OK)
            return s;
        x = h->p;
    }
    if (llmt_comm_all_reduce(c, x, x, n, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL) != LLMT_OK)
        return LLMT_ERR_COMM;
    return staged ? llmt__devtrain_stage_put(g, buf, x, n * sizeof *buf) : LLMT_OK;
}
