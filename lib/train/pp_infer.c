/* Forward-only pipeline passes: evaluate and generate under pipeline
 * parallelism. A pass is the GPipe forward of one micro-batch without
 * its backward: stage s receives the hidden states from s - 1, runs its
 * layers and sends them on; the last stage computes the loss (or reads
 * the logits) and broadcasts it, since every stage's caller (the job)
 * acts on it. The engine's micro-batch is B x T, so a shorter input is
 * padded: with ignored targets (evaluate) or after the window (generate:
 * attention is causal, so later positions change nothing before them).
 * The real rows are a prefix of the B x T (whole sequences, or the
 * window's first row), and a MoE layer routes that prefix alone: padding
 * routed too would take expert slots and change the capacity, so a real
 * token could be dropped where one rank's pass keeps it. */
#include <stdlib.h>
#include <string.h>

#include "train/pp_infer.h"

static llmt_status chain(llmt_err *e, llmt_comm *comm, llmt_dtype store, llmt__devtrain *g,
                         const int32_t *tok, const int32_t *tgt, int active, double *loss)
{
    int32_t r = 0, n = 1;
    llmt_comm_rank(comm, &r);
    llmt_comm_size(comm, &n);
    size_t elems = llmt__devtrain_stage_elems(g);
    /* interleaving: the pass runs through the stage's chunks in turn (chunk
     * c's input from stage r - 1's chunk c, or the last stage's c - 1) */
    int v = llmt__devtrain_stage_nchunks(g);
    llmt_status s = LLMT_OK;
    for (int c = 0; c < v && s == LLMT_OK; c++) {
        void *x = NULL;
        if (v > 1 && (s = llmt__devtrain_stage_chunk(g, c, 0)) != LLMT_OK)
            break;
        int from = (r + n - 1) % n, to = (r + 1) % n;
        if (r > 0 || c > 0) {
            x = llmt__devtrain_stage_in(g, 0);
            if (llmt_comm_recv(comm, x, elems, store, from, NULL) != LLMT_OK) {
                s = llmt__err_set(e, LLMT_ERR_COMM,
                                  "trainer: pipeline stage %d: forward-only pass: receive "
                                  "from stage %d: %s",
                                  (int)r, (int)from, llmt_comm_last_error(comm));
                break;
            }
        }
        if ((s = llmt__devtrain_stage_infer(g, tok, tgt, x, active, loss)) != LLMT_OK)
            break;
        if ((r < n - 1 || c < v - 1) && llmt_comm_send(comm, llmt__devtrain_stage_out(g), elems,
                                                       store, to, NULL) != LLMT_OK)
            s = llmt__err_set(e, LLMT_ERR_COMM,
                              "trainer: pipeline stage %d: forward-only pass: send to stage "
                              "%d: %s",
                              (int)r, (int)to, llmt_comm_last_error(comm));
    }
    if (v > 1)
        llmt__devtrain_stage_chunk(g, -1, -1);
    return s;
}

/* The last stage's bytes to every stage. */
static llmt_status from_last(llmt_err *e, llmt_comm *comm, void *buf, size_t n, llmt_dtype dt)
{
    int32_t size = 1;
    llmt_comm_size(comm, &size);
    if (llmt_comm_broadcast(comm, buf, n, dt, size - 1, NULL) != LLMT_OK)
        return llmt__err_set(e, LLMT_ERR_COMM,
                             "trainer: pipeline parallelism: broadcast from the last stage: "
                             "%s",
                             llmt_comm_last_error(comm));
    return LLMT_OK;
}

llmt_status llmt__pp_evaluate(llmt_err *e, llmt_comm *comm, llmt_dtype store, llmt__devtrain *g,
                              const int32_t *in, const int32_t *tg, int rows, int B, int T,
                              double *loss_sum)
{
    size_t per = (size_t)B * T;
    int32_t *pin = malloc(per * sizeof *pin), *ptg = malloc(per * sizeof *ptg);
    if (!pin || !ptg) {
        free(pin);
        free(ptg);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    }
    double sum = 0.0;
    llmt_status s = LLMT_OK;
    for (int at = 0; at < rows && s == LLMT_OK; at += B) {
        int n = rows - at < B ? rows - at : B;
        size_t have = (size_t)n * T;
        memcpy(pin, in + (size_t)at * T, have * sizeof *pin);
        memcpy(ptg, tg + (size_t)at * T, have * sizeof *ptg);
        for (size_t i = have; i < per; i++) {
            pin[i] = 0;
            ptg[i] = -1;
        }
        double part = 0.0;
        s = chain(e, comm, store, g, pin, ptg, (int)have, &part);
        sum += part;
    }
    free(pin);
    free(ptg);
    int64_t bits;
    memcpy(&bits, &sum, sizeof bits);
    if (s == LLMT_OK && (s = from_last(e, comm, &bits, 1, LLMT_DTYPE_INT64)) == LLMT_OK)
        memcpy(loss_sum, &bits, sizeof bits);
    return s;
}

llmt_status llmt__pp_logits(llmt_err *e, llmt_comm *comm, llmt_dtype store, llmt__devtrain *g,
                            const int32_t *tok, int len, int row, int B, int T, int Vp,
                            float *logits)
{
    size_t per = (size_t)B * T;
    int32_t *pin = calloc(per, sizeof *pin);
    if (!pin)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    memcpy(pin, tok, (size_t)len * sizeof *pin);
    int32_t r = 0, n = 1;
    llmt_comm_rank(comm, &r);
    llmt_comm_size(comm, &n);
    llmt_status s = chain(e, comm, store, g, pin, NULL, len, NULL);
    free(pin);
    if (s == LLMT_OK && r == n - 1 && row < 0) /* context parallel: another rank's row */
        memset(logits, 0, (size_t)Vp * sizeof *logits);
    else if (s == LLMT_OK && r == n - 1)
        s = llmt__devtrain_stage_row_logits(g, row, logits);
    if (s == LLMT_OK)
        s = from_last(e, comm, logits, (size_t)Vp, LLMT_DTYPE_FP32);
    return s;
}
