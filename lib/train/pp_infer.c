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

#include <stdio.h>

#include "train/pp_agree.h"
#include "train/pp_infer.h"
#include "train/pp_xfer.h"
#include "train/pp_send.h"

/* A pass's failure (the first one, on any stage): its stage (-1: none)
 * and the start of its error text. */
typedef struct infer_fail {
    int origin;
    char text[LLMT__PP_TEXT];
} infer_fail;

/* The start of a failure's text (what fits a message). */
static void keep(infer_fail *f, const char *msg)
{
    size_t n = strlen(msg) < sizeof f->text - 1 ? strlen(msg) : sizeof f->text - 1;
    memcpy(f->text, msg, n);
    f->text[n] = '\0';
}

/* The pass through this stage's chunks. A stage whose op fails (or that
 * receives a failure's message) goes on through the pass's messages: in
 * place of each output it owes it sends one marked failed (the stamp
 * -(origin + 1) in the tail, where pp.c's clock is never negative; its
 * error text in the tensor), so the stages after it learn of it at once
 * instead of waiting out the communicator's timeout, every message is
 * matched (a later pass runs) and the last stage, which hears of any
 * failure, says it to every stage in from_last's broadcast. A receive
 * that fails ends the pass at once (the group is broken). Without the
 * tail (NCCL) a failure ends the pass at once too: its peers wait. */
static llmt_status chain(llmt_err *e, llmt_comm *comm, llmt_dtype store, llmt__devtrain *g,
                         const int32_t *tok, const int32_t *tgt, int active, double *loss,
                         infer_fail *f)
{
    int32_t r = 0, n = 1;
    llmt_comm_rank(comm, &r);
    llmt_comm_size(comm, &n);
    size_t elems = llmt__devtrain_stage_elems(g), es = llmt_dtype_size(store);
    size_t tail = llmt__pp_agree_host(comm) ? LLMT__STAGE_TAIL / es : 0;
    /* interleaving: the pass runs through the stage's chunks in turn (chunk
     * c's input from stage r - 1's chunk c, or the last stage's c - 1) */
    int v = llmt__devtrain_stage_nchunks(g);
    llmt__pp_hbuf h = {NULL, 0}; /* the messages' host copy, where staged */
    llmt_status s = LLMT_OK;
    for (int c = 0; c < v && s == LLMT_OK; c++) {
        void *x = NULL;
        if (v > 1 && (s = llmt__devtrain_stage_chunk(g, c, 0)) != LLMT_OK)
            break;
        int from = (r + n - 1) % n, to = (r + 1) % n;
        if (r > 0 || c > 0) {
            x = llmt__devtrain_stage_in(g, 0);
            double stamp = 0.0;
            s = llmt__pp_xrecv(g, comm, x, elems + tail, store, from, &h);
            if (s == LLMT_ERR_COMM)
                s = llmt__err_set(e, LLMT_ERR_COMM,
                                  "trainer: pipeline stage %d: forward-only pass: receive "
                                  "from stage %d: %s",
                                  (int)r, (int)from, llmt_comm_last_error(comm));
            if (s != LLMT_OK)
                break;
            if (tail && f->origin < 0 &&
                llmt__pp_stamp_get(g, x, elems * es, &stamp) == LLMT_OK && stamp < 0.0) {
                f->origin = (int)(-stamp + 0.5) - 1;
                size_t k = sizeof f->text < elems * es ? sizeof f->text : elems * es;
                if (llmt__devtrain_stage_get(g, f->text, x, k) != LLMT_OK)
                    f->text[0] = '\0';
                f->text[k - 1] = '\0';
            }
        }
        if (f->origin < 0 &&
            llmt__devtrain_stage_infer(g, tok, tgt, x, active, loss) != LLMT_OK) {
            f->origin = (int)r;
            keep(f, e->msg);
            if (!tail) /* no way to tell the stages after: they wait */
                s = e->status;
        }
        if (s != LLMT_OK || (r == n - 1 && c == v - 1))
            continue;
        void *out = llmt__devtrain_stage_out(g);
        if (tail && f->origin >= 0) { /* the failure in place of the output */
            char text[LLMT__PP_TEXT];
            size_t k = sizeof text < elems * es ? sizeof text : elems * es;
            memset(text, 0, sizeof text);
            snprintf(text, k, "%s", f->text);
            if (llmt__devtrain_stage_put(g, out, text, k) != LLMT_OK ||
                llmt__pp_stamp_put(g, out, elems * es, -(double)(f->origin + 1)) != LLMT_OK)
                s = llmt__err_set(e, LLMT_ERR_INTERNAL,
                                  "trainer: pipeline stage %d: forward-only pass: stage %d "
                                  "failed (%s) and the failure could not be sent on",
                                  (int)r, f->origin, f->text);
        } else if (tail) {
            s = llmt__pp_stamp_put(g, out, elems * es, 0.0);
        }
        if (s == LLMT_OK &&
            (s = llmt__pp_xsend(g, comm, out, elems + tail, store, to, &h)) == LLMT_ERR_COMM)
            s = llmt__err_set(e, LLMT_ERR_COMM,
                              "trainer: pipeline stage %d: forward-only pass: send to stage "
                              "%d: %s",
                              (int)r, (int)to, llmt_comm_last_error(comm));
    }
    if (v > 1)
        llmt__devtrain_stage_chunk(g, -1, -1);
    llmt__pp_hbuf_free(&h);
    return s;
}

/* The last stage's bytes (n words of dt) to every stage, after its word
 * of the pass's failure (origin + 1, 0: none) and the failure's text:
 * one broadcast. A failure returns naming the stage and its error. */
static llmt_status from_last(llmt_err *e, llmt_comm *comm, void *buf, size_t n, llmt_dtype dt,
                             const infer_fail *f)
{
    int32_t size = 1, r = 0;
    llmt_comm_size(comm, &size);
    llmt_comm_rank(comm, &r);
    enum { H = 1 + LLMT__PP_TEXT / sizeof(int64_t) };
    size_t bytes = n * llmt_dtype_size(dt), words = H + (bytes + 7) / 8;
    int64_t *w = calloc(words, sizeof *w);
    if (!w)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    if (r == size - 1) {
        w[0] = f->origin + 1;
        memcpy(w + 1, f->text, LLMT__PP_TEXT);
        memcpy(w + H, buf, bytes);
    }
    llmt_status s = LLMT_OK;
    if (llmt_comm_broadcast(comm, w, words, LLMT_DTYPE_INT64, size - 1, NULL) != LLMT_OK)
        s = llmt__err_set(e, LLMT_ERR_COMM,
                          "trainer: pipeline parallelism: broadcast from the last stage: "
                          "%s",
                          llmt_comm_last_error(comm));
    else if (w[0] && (int)w[0] - 1 == r) /* this stage's own: its own error stands */
        s = e->status != LLMT_OK ? e->status : LLMT_ERR_INTERNAL;
    else if (w[0]) {
        char text[LLMT__PP_TEXT];
        memcpy(text, w + 1, sizeof text);
        text[sizeof text - 1] = '\0';
        s = llmt__err_set(e, LLMT_ERR_COMM,
                          "trainer: pipeline stage %d: forward-only pass: stage %d failed "
                          "in it. Stage %d's error: %s",
                          (int)r, (int)w[0] - 1, (int)w[0] - 1, text);
    } else {
        memcpy(buf, w + H, bytes);
    }
    free(w);
    return s;
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
    infer_fail f = {.origin = -1};
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
        s = chain(e, comm, store, g, pin, ptg, (int)have, &part, &f);
        sum += part;
    }
    free(pin);
    free(ptg);
    int64_t bits;
    memcpy(&bits, &sum, sizeof bits);
    if (s == LLMT_OK && (s = from_last(e, comm, &bits, 1, LLMT_DTYPE_INT64, &f)) == LLMT_OK)
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
    infer_fail f = {.origin = -1};
    llmt_status s = chain(e, comm, store, g, pin, NULL, len, NULL, &f);
    free(pin);
    if (s == LLMT_OK && r == n - 1 && f.origin < 0 && row < 0) /* context parallel: */
        memset(logits, 0, (size_t)Vp * sizeof *logits);        /* another rank's row */
    else if (s == LLMT_OK && r == n - 1 && f.origin < 0 &&
             llmt__devtrain_stage_row_logits(g, row, logits) != LLMT_OK) {
        f.origin = (int)r; /* the others hear of it in the broadcast */
        keep(&f, e->msg);
    }
    if (s == LLMT_OK)
        s = from_last(e, comm, logits, (size_t)Vp, LLMT_DTYPE_FP32, &f);
    return s;
}
