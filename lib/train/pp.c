/* Pipeline parallelism (GPipe; PipeDream-flush "1F1B" and interleaved
 * 1F1B as Megatron-LM runs them): a step's grad_accum micro-batches are
 * the pipeline's micro-batches, in the order the single-rank trainer takes
 * them, so each stage accumulates its gradients in the same order and the
 * step's loss and update match the single-rank run up to the gradient
 * norm's summation order. Each stage runs its list of forwards F(c, a)
 * and backwards B(c, a) of micro-batch a through its chunk c (pp_sched.c
 * builds the lists; one chunk but under interleaving):
 *
 *   GPipe        F0 F1 .. F(m-1) B0 B1 .. B(m-1)
 *   1F1B         w = min(p - s - 1, m) forwards, then F(w+i) B(i) pairs,
 *                then the last w backwards: at most p - s in flight
 *   interleaved  chunk c of stage s is virtual stage c p + s; Megatron's
 *                warm-up of 2 (p - s - 1) + (v - 1) p chunk forwards
 *
 * F(c, a) receives its input from the previous virtual stage (stage s-1,
 * or the last stage's chunk c-1; the first embeds its tokens) and sends
 * its output to the next; B(c, a) receives its output's gradient from the
 * next and sends its input's gradient back. Where a send would wait for
 * its receiver (MPI's rendezvous, Gloo) the sends are left in flight
 * (pp_send.h), which interleaving needs (its messages wrap round the ring
 * of stages) and which lets every schedule's sends overlap the next op;
 * the in-process transport copies each send and returns. A transport
 * with neither (NCCL) runs GPipe and 1F1B with each send paired with the
 * next receive as Megatron-LM does (ordered_recv), so stages never wait
 * on each other in a cycle. Under interleaving the gradients travel on a
 * second communicator so that each pair's messages of one kind arrive in
 * the order sent (pp_sched.c's simulation checks both: with sends that
 * never wait, the lists cannot deadlock). The engine keeps
 * one activation set per micro-batch chunk in flight (the schedule's
 * count: the memory difference between the schedules) and receives each
 * input straight into its set. The time spent inside receives is the
 * stage's idle time (the bubble, plus any imbalance). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/p2p.h"
#include "plan/balance.h"
#include "train/pp.h"
#include "plan/pp_sched.h"
#include "train/dp.h"
#include "train/pp_agree.h"
#include "train/pp_send.h"
#include "train/pp_xfer.h"

struct llmt__pp {
    llmt_err *e;
    llmt_comm *comm, *emb; /* the pipeline group; first + last stage (tied head) */
    /* where the gradients travel: comm, or under interleaving a copy of it,
     * so that each (sender, receiver) pair's messages of one kind arrive
     * in the order they were sent (pp_sched.h checks the lists for it) */
    llmt_comm *gcomm, *gown;
    llmt__devtrain *g;
    int stage, stages, sched, micro, l0, l1, v;
    llmt__pp_op *ops; /* this stage's schedule (pp_sched.c) */
    int nops;
    llmt_dtype store;
    size_t elems, es;
    int inflight; /* the engine's activation sets */
    void *dy;     /* the output gradient being consumed */
    double step_s, idle_s;
    int64_t sent, recvd;
    /* The bubble in compute time (cpu_now below): vt, this stage's clock
     * (its ops' thread CPU time, moved on to a message's stamp when that
     * comes later); vbusy of it computing; vspan: the step's, every
     * stage's largest vt. The stamp rides after the tensor
     * (LLMT__STAGE_TAIL: tail more storage elements in the message); off
     * (tail 0) where a message must be device memory (NCCL). */
    size_t tail;
    double vt, vbusy, vspan;
    /* sends left in flight over processes (MPI, Gloo: pp_send.h; NULL
     * where a send copies its buffer and returns, or cannot: NCCL) */
    llmt__pp_sends *sends;
    /* a send held back until the next op's receive (blocking transports:
     * ordered_recv below) */
    struct {
        int on, peer, a;
        llmt_comm *c;
        void *buf;
        const char *what;
    } held;
    /* A failed step (fail_on below): the stage whose failure this stage
     * learnt of in a message (origin + 1, 0: its own or none) and the peer
     * it came from, the origin's message; the buffers the failure is sent
     * on to the neighbours (to the next stage, to the previous) and those
     * sends where left in flight; broken: the group holds the failed
     * step's unmatched messages, so later steps are refused. */
    int from, from_peer, broken;
    char from_msg[256];
    void *fbuf[2];
    llmt__isend *fw[2];
    llmt__pp_hbuf fwh[2]; /* their host copies, where staged (pp_xfer.h) */
    llmt__pp_hbuf hb;     /* the blocking messages' host copy, where staged */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The bubble in compute time. Wall time waiting in receives measures the
 * bubble only when every stage has a core to itself: on a shared machine
 * a stage that is descheduled makes the next one wait longer, and a stage
 * computing alone runs faster than two computing side by side, so the
 * measured share moves by tens of points with the load. So each stage
 * also keeps a clock that runs only while it computes: the thread CPU
 * time of its forwards and backwards (the CPU engine computes on the
 * calling thread with train.threads 1; an OpenMP team's other threads are
 * not counted). Each message carries its sender's clock when it is sent
 * (the end of the op that produced it, or later where the pairing of
 * blocking sends holds it back; 8 bytes after the tensor, in the same
 * message: a second message a boundary would cost each send's latency
 * again, every step, whether or not anyone reads the bubble), and a receive
 * moves the receiver's clock on to it when it is later: the gap is the
 * time the receiver would have waited with a core of its own, for this
 * schedule, these ops' real costs and these messages (Lamport's logical
 * clock over CPU time, as trace-replay tools measure wait states). At the
 * step's end the stages agree on its span, the largest clock; a stage's
 * bubble is the share of the span it did not compute, so under GPipe and
 * 1F1B with equal stages every stage idles (p-1)/(m+p-1) of it. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The model config as the stage balance reads it (lib/plan/balance.h,
 * the planner's too), its defaults resolved as the model resolves them. */
static void balance_model(const llmt_model_config *c, int T, llmt__balance_model *m)
{
    m->width = c->width;
    m->heads = c->heads;
    m->kv_heads = c->kv_heads > 0 ? c->kv_heads : c->heads;
    m->ffn = c->ffn_hidden > 0 ? c->ffn_hidden : 4.0 * c->width;
    m->vocab = c->padded_vocab_size > 0 ? c->padded_vocab_size : c->vocab_size;
    m->seq = T;
    m->llama = c->arch == LLMT_ARCH_LLAMA;
    m->experts = c->moe_experts > 0 ? c->moe_experts : 0;
    m->top_k = c->moe_top_k > 0 ? c->moe_top_k : c->moe_experts > 1 ? 2 : 1;
    m->expert_ffn = c->moe_ffn > 0 ? c->moe_ffn : m->ffn;
    m->shared = c->moe_shared_experts > 0 ? c->moe_shared_experts : 0;
    m->every = c->moe_every > 0 ? c->moe_every : 1;
}

llmt_status llmt__pp_layout(llmt_err *e, const llmt_model_config *c, int T, int p,
                            const int32_t *counts, int n, int *first)
{
    int L = c->layers;
    if (p < 1 || p > L)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "parallelism.pp: %d stages for model.layers %d (each stage "
                             "needs at least one layer)",
                             p, L);
    if (counts) {
        if (n != p)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "parallelism.stage_layers: %d entries for pp %d (one per "
                                 "stage)",
                                 n, p);
        long sum = 0;
        first[0] = 0;
        for (int i = 0; i < p; i++) {
            if (counts[i] < 1)
                return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                     "parallelism.stage_layers[%d]: %d layers (each stage "
                                     "needs at least one)",
                                     i, (int)counts[i]);
            sum += counts[i];
            first[i + 1] = sum <= L ? (int)sum : L;
        }
        if (sum != L)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "parallelism.stage_layers: the stages hold %ld layers, "
                                 "model.layers is %d (they must sum to it)",
                                 sum, L);
        return LLMT_OK;
    }
    /* the automatic balance (the planner's: lib/plan/balance.c), each
     * layer weighed by its work, so a MoE layer counts for more */
    llmt__balance_model bm;
    balance_model(c, T, &bm);
    int64_t *f64 = malloc(((size_t)p + 1) * sizeof *f64);
    if (!f64 || llmt__balance_split(&bm, L, p, f64)) {
        free(f64);
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    }
    for (int s = 0; s <= p; s++)
        first[s] = (int)f64[s];
    free(f64);
    return LLMT_OK;
}

void llmt__pp_destroy(llmt__pp *pp)
{
    if (!pp)
        return;
    llmt__devtrain_stage_buf_free(pp->g, pp->dy);
    for (int k = 0; k < 2; k++) {
        int done = 1;
        if (pp->fw[k] && llmt__comm_isend_test(pp->fw[k], &done) != LLMT_OK)
            done = 0;
        if (done) /* else leaked with the communicator that still reads it */
            llmt__devtrain_stage_buf_free(pp->g, pp->fbuf[k]);
        llmt__comm_isend_free(pp->fw[k]);
    }
    llmt__pp_sends_destroy(pp->sends);
    llmt__pp_hbuf_free(&pp->hb);
    for (int k = 0; k < 2; k++)
        if (!pp->fw[k]) /* else leaked with the send that may still read it */
            llmt__pp_hbuf_free(&pp->fwh[k]);
    llmt_comm_destroy(pp->emb);
    llmt_comm_destroy(pp->gown);
    free(pp->ops);
    free(pp);
}

llmt_status llmt__pp_create(llmt_err *e, llmt_comm *comm, int schedule, int v, int micro,
                            llmt_dtype store, const int *first, llmt__devtrain *g,
                            llmt__pp **out)
{
    *out = NULL;
    int32_t r = 0, n = 0;
    if (llmt_comm_rank(comm, &r) != LLMT_OK || llmt_comm_size(comm, &n) != LLMT_OK)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: pipeline parallelism: the communicator has no rank: %s",
                             llmt_comm_last_error(comm));
    llmt__pp *pp = calloc(1, sizeof *pp);
    if (!pp)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    pp->e = e;
    pp->comm = comm;
    pp->g = g;
    pp->stage = r;
    pp->stages = n;
    pp->sched = schedule;
    pp->micro = micro;
    pp->v = v > 1 ? v : 1;
    pp->l0 = first[r];
    pp->l1 = first[r + 1];
    for (int c = 1; c < pp->v; c++) /* interleaved: the chunks' layers */
        pp->l1 += first[c * n + r + 1] - first[c * n + r];
    pp->store = store;
    pp->es = llmt_dtype_size(store);
    pp->elems = llmt__devtrain_stage_elems(g);
    pp->gcomm = comm;
    pp->nops = 2 * micro * pp->v;
    pp->ops = malloc((size_t)pp->nops * sizeof *pp->ops);
    pp->inflight = pp->ops ? llmt__pp_sched_ops(schedule, n, pp->v, micro, r, pp->ops) : -1;
    llmt_status s = LLMT_OK;
    if (pp->inflight < 0)
        s = llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    if (s == LLMT_OK && pp->v > 1 && llmt_comm_split(comm, 0, r, &pp->gown) != LLMT_OK)
        s = llmt__err_set(e, LLMT_ERR_COMM,
                          "trainer: pipeline parallelism: the gradients' copy of the "
                          "pipeline group: %s",
                          llmt_comm_last_error(comm));
    if (pp->gown)
        pp->gcomm = pp->gown;
    if (llmt__comm_isend_kind(comm) != LLMT__ISEND_NONE)
        pp->tail = LLMT__STAGE_TAIL / pp->es;
    /* sends left in flight wherever a send would wait for its receiver
     * (MPI, Gloo): needed by interleaving, and under every schedule the
     * send then overlaps the next op's compute */
    if (s == LLMT_OK && llmt__comm_isend_kind(comm) == LLMT__ISEND_POSTED)
        s = llmt__pp_sends_create(e, r, g, pp->inflight, pp->elems, pp->tail, store,
                                  &pp->sends);
    if (s == LLMT_OK && (r < n - 1 || pp->v > 1)) /* interleaved: every stage */
        s = llmt__devtrain_stage_buf(g, &pp->dy, pp->elems * pp->es + LLMT__STAGE_TAIL);
    /* a tied head: the first and the last stage sum wte's gradient
     * (Megatron-LM's embedding group); split collectively over comm */
    size_t tn = 0;
    int tied =
        n > 1 && (r == 0 || r == n - 1 ? llmt__devtrain_stage_tied_grad(g, &tn) != NULL : 0);
    int32_t want = tied, any = 0;
    if (s == LLMT_OK && llmt_comm_all_reduce(comm, &want, &any, 1, LLMT_DTYPE_INT32,
                                             LLMT_REDUCE_MAX, NULL) != LLMT_OK)
        s = llmt__err_set(e, LLMT_ERR_COMM, "trainer: pipeline parallelism: %s",
                          llmt_comm_last_error(comm));
    if (s == LLMT_OK && any && llmt_comm_split(comm, tied ? 0 : -1, r, &pp->emb) != LLMT_OK)
        s = llmt__err_set(e, LLMT_ERR_COMM,
                          "trainer: pipeline parallelism: the embedding group (first and "
                          "last stage): %s",
                          llmt_comm_last_error(comm));
    if (s != LLMT_OK) {
        llmt__pp_destroy(pp);
        return s;
    }
    *out = pp;
    return LLMT_OK;
}

static llmt_status p2p_fail(llmt__pp *pp, llmt_comm *c, const char *what, int a, int peer)
{
    return llmt__err_set(pp->e, LLMT_ERR_COMM,
                         "trainer: pipeline stage %d: %s of micro-batch %d %s stage %d: %s",
                         pp->stage, what, a, what[0] == 's' ? "to" : "from", peer,
                         llmt_comm_last_error(c));
}

/* A message and its sender's clock (cpu_now above) after it. */
static llmt_status pp_recv(llmt__pp *pp, llmt_comm *c, void *buf, int peer, const char *what,
                           int a)
{
    double t0 = now_s(), stamp = 0.0;
    llmt_status s =
        llmt__pp_xrecv(pp->g, c, buf, pp->elems + pp->tail, pp->store, peer, &pp->hb);
    pp->idle_s += now_s() - t0;
    if (s == LLMT_ERR_COMM)
        return p2p_fail(pp, c, what, a, peer);
    if (s != LLMT_OK)
        return s;
    if (pp->tail && (s = llmt__pp_stamp_get(pp->g, buf, pp->elems * pp->es, &stamp)) != LLMT_OK)
        return s;
    if (stamp < 0.0) { /* a failure's message (fail_on): its origin, its text */
        pp->from = (int)(-stamp + 0.5);
        pp->from_peer = peer;
        size_t n =
            sizeof pp->from_msg < pp->elems * pp->es ? sizeof pp->from_msg : pp->elems * pp->es;
        if (llmt__devtrain_stage_get(pp->g, pp->from_msg, buf, n) != LLMT_OK)
            pp->from_msg[0] = '\0';
        pp->from_msg[n - 1] = '\0';
        return llmt__err_set(pp->e, LLMT_ERR_COMM,
                             "trainer: pipeline stage %d: stage %d failed in this step, so "
                             "%s of micro-batch %d from stage %d never came (the step "
                             "is lost on every stage; remake the trainer and its pipeline "
                             "communicator). Stage %d's error: %s",
                             pp->stage, pp->from - 1, what + 8, a, peer, pp->from - 1,
                             pp->from_msg);
    }
    pp->recvd += (int64_t)(pp->elems * pp->es);
    if (stamp > pp->vt)
        pp->vt = stamp;
    return LLMT_OK;
}

static llmt_status pp_send(llmt__pp *pp, llmt_comm *c, void *buf, int peer, const char *what,
                           int a, double stamp)
{
    llmt_status s;
    if (pp->tail && (s = llmt__pp_stamp_put(pp->g, buf, pp->elems * pp->es, stamp)) != LLMT_OK)
        return s;
    s = llmt__pp_xsend(pp->g, c, buf, pp->elems + pp->tail, pp->store, peer, &pp->hb);
    if (s == LLMT_ERR_COMM)
        return p2p_fail(pp, c, what, a, peer);
    if (s != LLMT_OK)
        return s;
    pp->sent += (int64_t)(pp->elems * pp->es);
    return LLMT_OK;
}

int llmt__pp_inflight(int schedule, int v, int micro, int stages, int stage)
{
    llmt__pp_op *ops = malloc((size_t)2 * micro * (v > 1 ? v : 1) * sizeof *ops);
    int n = ops ? llmt__pp_sched_ops(schedule, stages, v > 1 ? v : 1, micro, stage, ops) : -1;
    free(ops);
    return n;
}

/* The held send, now, stamped now: its receiver's clock then also sees
 * the wait the pairing adds (ordered_recv receives first, then sends). */
static llmt_status flush(llmt__pp *pp)
{
    if (!pp->held.on)
        return LLMT_OK;
    pp->held.on = 0;
    return pp_send(pp, pp->held.c, pp->held.buf, pp->held.peer, pp->held.what, pp->held.a,
                   pp->vt);
}

/* An op's send: left in flight where the transport would wait for the
 * receiver (pp_send.h; set: the activation set of an activation, -1 for a
 * gradient); at once under interleaving; otherwise held until the next
 * op's receive (the buffer stays untouched until then: the next op
 * receives elsewhere and computes after). */
static llmt_status send_out(llmt__pp *pp, llmt_comm *c, void *buf, int peer, const char *what,
                            int a, int set)
{
    if (pp->sends) {
        llmt_status s = set >= 0 ? llmt__pp_sends_act(pp->sends, c, buf, peer, set, a, pp->vt)
                                 : llmt__pp_sends_grad(pp->sends, c, buf, peer, a, pp->vt);
        if (s == LLMT_OK)
            pp->sent += (int64_t)(pp->elems * pp->es);
        return s;
    }
    if (pp->sched == LLMT__PP_INTERLEAVED)
        return pp_send(pp, c, buf, peer, what, a, pp->vt);
    pp->held.on = 1;
    pp->held.c = c;
    pp->held.buf = buf;
    pp->held.peer = peer;
    pp->held.what = what;
    pp->held.a = a;
    return LLMT_OK;
}

/* An op's receive with the held send ordered around it as Megatron-LM's
 * send_forward_recv_backward / send_backward_recv_forward pair them: on a
 * transport whose send waits for the receiver (MPI's rendezvous for large
 * messages, Gloo), 1F1B's steady state has stage s sending activations to
 * s + 1 while s + 1 sends it gradients; both would wait forever. Of the
 * two stages of such an exchange the lower sends first and the higher
 * receives first. A held send to another stage goes first (GPipe and the
 * warm-up and cool-down phases: the order sends had before). NULL buf: the
 * op receives nothing (first stage's forward, last stage's backward). */
static llmt_status ordered_recv(llmt__pp *pp, llmt_comm *c, void *buf, int peer,
                                const char *what, int a)
{
    llmt_status s;
    int after = pp->held.on && buf && pp->held.peer == peer && pp->stage > peer;
    if (!after && (s = flush(pp)) != LLMT_OK)
        return s;
    if (buf && (s = pp_recv(pp, c, buf, peer, what, a)) != LLMT_OK)
        return s;
    return after ? flush(pp) : LLMT_OK;
}

/* The forward of micro-batch a through chunk c (virtual stage c * p + s):
 * its input from the previous virtual stage (stage s - 1, or under
 * interleaving the last stage's chunk c - 1), its output to the next. */
static llmt_status fwd(llmt__pp *pp, int c, int a, int set)
{
    llmt_status s;
    int p = pp->stages;
    int first = pp->stage == 0 && c == 0, last = pp->stage == p - 1 && c == pp->v - 1;
    void *x = llmt__devtrain_stage_in(pp->g, a); /* received in place */
    if ((s = ordered_recv(pp, pp->comm, first ? NULL : x, (pp->stage + p - 1) % p,
                          "receive the activations", a)) != LLMT_OK)
        return s;
    double t0 = cpu_now();
    if ((s = llmt__devtrain_stage_fwd(pp->g, a, x)) != LLMT_OK)
        return s;
    double d = cpu_now() - t0;
    pp->vbusy += d;
    pp->vt += d;
    if (!last)
        return send_out(pp, pp->comm, llmt__devtrain_stage_out(pp->g), (pp->stage + 1) % p,
                        "send the activations", a, set);
    return LLMT_OK;
}

static llmt_status bwd(llmt__pp *pp, int c, int a, int set)
{
    llmt_status s;
    int p = pp->stages;
    int first = pp->stage == 0 && c == 0, last = pp->stage == p - 1 && c == pp->v - 1;
    /* the backward may rewrite the set (recompute): its activations' send
     * done first (received already: this backward's gradient proves it) */
    if (pp->sends && (s = llmt__pp_sends_set_done(pp->sends, set)) != LLMT_OK)
        return s;
    if ((s = ordered_recv(pp, pp->gcomm, last ? NULL : pp->dy, (pp->stage + 1) % p,
                          "receive the gradient", a)) != LLMT_OK)
        return s;
    double t0 = cpu_now();
    if ((s = llmt__devtrain_stage_bwd(pp->g, a, last ? NULL : pp->dy)) != LLMT_OK)
        return s;
    double d = cpu_now() - t0;
    pp->vbusy += d;
    pp->vt += d;
    if (!first)
        return send_out(pp, pp->gcomm, llmt__devtrain_stage_dx(pp->g), (pp->stage + p - 1) % p,
                        "send the gradient", a, -1);
    return LLMT_OK;
}

/* A failure's message to peer on c (k: 0 the next stage, 1 the
 * previous): a boundary tensor whose tail holds -(origin + 1) where a
 * clock is never negative, its elements the origin's error text. Sent as
 * the boundary messages are (left in flight where a send would wait for
 * its receiver), so it takes the place of the next message the peer
 * receives from this stage. Whether it went is returned: a stage that
 * cannot send it (no memory, the group broken) leaves that peer to the
 * communicator's timeout, which its error then says. */
static int fail_send(llmt__pp *pp, int k, llmt_comm *c, int peer, int origin, const char *msg)
{
    size_t bytes = pp->elems * pp->es;
    if (pp->fw[k]) { /* an earlier failure's, still in flight: its buffer in use */
        int done = 0;
        if (llmt__comm_isend_test(pp->fw[k], &done) != LLMT_OK || !done)
            return 0;
        llmt__comm_isend_free(pp->fw[k]);
        pp->fw[k] = NULL;
    }
    if (!pp->fbuf[k] &&
        llmt__devtrain_stage_buf(pp->g, &pp->fbuf[k], bytes + LLMT__STAGE_TAIL) != LLMT_OK) {
        pp->fbuf[k] = NULL;
        return 0;
    }
    char text[256];
    size_t n = bytes < sizeof text ? bytes : sizeof text;
    memset(text, 0, sizeof text);
    snprintf(text, n, "%s", msg);
    if (llmt__devtrain_stage_put(pp->g, pp->fbuf[k], text, n) != LLMT_OK ||
        llmt__pp_stamp_put(pp->g, pp->fbuf[k], bytes, -(double)(origin + 1)) != LLMT_OK)
        return 0;
    if (pp->sends)
        return llmt__pp_xisend(pp->g, c, pp->fbuf[k], pp->elems + pp->tail, pp->store, peer,
                               &pp->fwh[k], &pp->fw[k]) == LLMT_OK;
    return llmt__pp_xsend(pp->g, c, pp->fbuf[k], pp->elems + pp->tail, pp->store, peer,
                          &pp->hb) == LLMT_OK;
}

/* The step failed at op i (an op's error, no memory, a refusal, a failed
 * message, or a failure of another stage received): the neighbours this
 * stage still owes a message this step get the failure in its place
 * (fail_send), so they stop at once, naming the stage that failed, and
 * pass it on away from it, instead of each waiting out the communicator's
 * timeout in its receive. Not sent back to the stage it came from nor to
 * the origin, which receive nothing more this step. Needs the tail (every
 * transport the pipeline runs on but NCCL, refused). */
static void fail_on(llmt__pp *pp, int i)
{
    int p = pp->stages, next = 0, prev = 0;
    pp->broken = 1;
    if (!pp->tail)
        return;
    for (int j = i; j < pp->nops; j++) {
        const llmt__pp_op *o = &pp->ops[j];
        next |= !o->bwd && !(pp->stage == p - 1 && o->chunk == pp->v - 1);
        prev |= o->bwd && !(pp->stage == 0 && o->chunk == 0);
    }
    int origin = pp->from ? pp->from - 1 : pp->stage;
    char msg[256];
    const char *m = pp->from ? pp->from_msg : pp->e->msg;
    size_t mn = strlen(m) < sizeof msg - 1 ? strlen(m) : sizeof msg - 1;
    memcpy(msg, m, mn); /* the text's start: what fits in a message */
    msg[mn] = '\0';
    int to[2] = {(pp->stage + 1) % p, (pp->stage + p - 1) % p}, want[2] = {next, prev},
        lost = -1;
    llmt_comm *c[2] = {pp->comm, pp->gcomm};
    for (int k = 0; k < 2; k++)
        if (want[k] && to[k] != origin && !(pp->from && to[k] == pp->from_peer) &&
            !fail_send(pp, k, c[k], to[k], origin, msg))
            lost = to[k];
    if (lost >= 0) {
        size_t at = strlen(pp->e->msg);
        snprintf(pp->e->msg + at, sizeof pp->e->msg - at,
                 " (the failure could not be sent on to stage %d, which waits for the "
                 "communicator's timeout)",
                 lost);
    }
}

/* The stage's op list (pp_sched.c), each op in its chunk and set. */
static llmt_status run_schedule(llmt__pp *pp)
{
    llmt_status s = LLMT_OK;
    pp->from = 0;
    for (int i = 0; i < pp->nops && s == LLMT_OK; i++) {
        const llmt__pp_op *o = &pp->ops[i];
        s = llmt__devtrain_stage_chunk(pp->g, o->chunk, o->slot);
        if (s == LLMT_OK)
            s = o->bwd ? bwd(pp, o->chunk, o->micro, o->slot)
                       : fwd(pp, o->chunk, o->micro, o->slot);
        if (s != LLMT_OK)
            fail_on(pp, i);
    }
    if (s == LLMT_OK)
        s = flush(pp);
    if (s == LLMT_OK && pp->sends)
        s = llmt__pp_sends_drain(pp->sends);
    if (pp->sends) /* waiting for a send is idle time too */
        pp->idle_s += llmt__pp_sends_wait_s(pp->sends);
    pp->held.on = 0;
    llmt__devtrain_stage_chunk(pp->g, -1, -1);
    return s;
}

/* Whether a stage whose step failed (status s) takes part in the step's
 * end (step_end): when its failure was its own (an op, no memory) or
 * learnt from a failure's message, its peers will meet it there; not
 * after a message that did not come (the group or a peer is gone, and
 * each collective would wait out the timeout again), nor where no
 * failure travels (NCCL: no tail). */
static int joins(const llmt__pp *pp, llmt_status s)
{
    return pp->tail && (pp->from || s != LLMT_ERR_COMM);
}

/* A peer's failure learnt at the step's end: what this stage says. */
static void learnt(llmt__pp *pp, const char *who, int rank, int origin, const char *text)
{
    llmt__err_set(pp->e, LLMT_ERR_COMM,
                  "trainer: pipeline stage %d: %s %d failed in this step (stage %d of its "
                  "pipeline; the step is lost on every stage and replica; remake the trainer "
                  "and its pipeline communicator). Stage %d's error: %s",
                  pp->stage, who, rank, origin, origin, text);
}

/* The step's end after its schedule (failed: status s, else LLMT_OK):
 * the data parallel reductions and the loss over them, the tied wte's sum,
 * the gradient norm, then every stage's (loss, sum of squares, clock) over
 * the pipeline group. A stage whose step failed still takes part in each
 * of these collectives (its results unused), so that no peer waits for it
 * in one: the failure of a stage after its last message of the step (its
 * last backward, the loss, the norm) or of one data parallel replica only
 * then reaches every stage here, where it would otherwise have waited out
 * the communicator's timeout. Each rank's state travels in the gathers
 * the step has anyway, its code in the pipeline's; over the data parallel
 * group it costs one all-gather of an int64 a rank (pp_agree.h); the texts
 * travel only when a rank failed. */
static llmt_status step_end(llmt__pp *pp, llmt_status s, double *loss_sum, double *sumsq)
{
    char own[LLMT_ERR_MSG_MAX];
    /* this stage's failure: its origin stage and its text */
    int origin = s == LLMT_OK ? -1 : pp->from ? pp->from - 1 : pp->stage;
    if (s != LLMT_OK)
        snprintf(own, sizeof own, "%s", pp->e->msg);
#define FAILED(st)                                       \
    do {                                                 \
        llmt_status st_ = (st);                          \
        if (st_ != LLMT_OK && s == LLMT_OK) {            \
            s = st_;                                     \
            origin = pp->stage;                          \
            snprintf(own, sizeof own, "%s", pp->e->msg); \
        }                                                \
    } while (0)
    double mine[3] = {0.0, 0.0, pp->vt};
    FAILED(llmt__devtrain_stage_loss(pp->g, &mine[0]));
    size_t tn = 0;
    float *tg = llmt__devtrain_stage_tied_grad(pp->g, &tn);
    llmt_status ts = tg && pp->emb ? llmt__pp_xsum(pp->g, pp->emb, tg, tn, &pp->hb) : LLMT_OK;
    if (ts == LLMT_ERR_COMM)
        ts = llmt__err_set(pp->e, LLMT_ERR_COMM,
                           "trainer: pipeline parallelism: sum of the tied embedding's "
                           "gradient over the first and last stage: %s",
                           llmt_comm_last_error(pp->emb));
    FAILED(ts);
    FAILED(llmt__devtrain_stage_sumsq(pp->g, &mine[1]));
    /* the data parallel group: a replica whose stage failed (after its
     * last data parallel collective of the step: the norm's) */
    struct llmt__dp *dp = llmt__devtrain_dp(pp->g);
    llmt_comm *dc = dp ? llmt__dp_comm(dp) : NULL;
    int32_t dn = 1;
    if (dc && pp->tail && llmt__pp_agree_host(dc) && llmt_comm_size(dc, &dn) == LLMT_OK) {
        int64_t *codes = malloc((size_t)dn * sizeof *codes);
        char *texts = malloc((size_t)dn * LLMT__PP_TEXT);
        llmt_status t =
            codes && texts ? LLMT_OK
                           : llmt__err_set(pp->e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
        if (t == LLMT_OK && llmt__pp_agree_codes(dc, origin + 1, codes) != LLMT_OK)
            t = llmt__err_set(pp->e, LLMT_ERR_COMM,
                              "trainer: pipeline stage %d: the step's state over the data "
                              "parallel group: %s",
                              pp->stage, llmt_comm_last_error(dc));
        int who = -1;
        for (int32_t r = 0; t == LLMT_OK && r < dn && who < 0; r++)
            if (codes[r])
                who = r;
        if (who >= 0 && llmt__pp_agree_texts(dc, s != LLMT_OK ? own : "", texts) != LLMT_OK)
            t = llmt__err_set(pp->e, LLMT_ERR_COMM,
                              "trainer: pipeline stage %d: the failure's text over the data "
                              "parallel group: %s",
                              pp->stage, llmt_comm_last_error(dc));
        FAILED(t);
        if (who >= 0 && s == LLMT_OK) {
            learnt(pp, "data parallel rank", who, (int)codes[who] - 1,
                   texts + (size_t)who * LLMT__PP_TEXT);
            s = LLMT_ERR_COMM;
            origin = pp->stage; /* the failure this stage tells its pipeline */
            snprintf(own, sizeof own, "%s", pp->e->msg);
        }
        free(codes);
        free(texts);
    }
    /* every stage's (loss sum, sum of squares, clock, failure) as bits,
     * summed here in stage order: the same doubles on every stage */
    int64_t *all = malloc((size_t)pp->stages * 4 * sizeof *all), bits[4];
    char *texts = NULL;
    if (!all) {
        FAILED(llmt__err_set(pp->e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory"));
        goto out;
    }
    memcpy(bits, mine, 3 * sizeof *bits);
    bits[3] = origin + 1;
    if (llmt_comm_all_gather(pp->comm, bits, all, 4, LLMT_DTYPE_INT64, NULL) != LLMT_OK) {
        FAILED(llmt__err_set(pp->e, LLMT_ERR_COMM,
                             "trainer: pipeline parallelism: the loss and gradient norm "
                             "over the stages: %s",
                             llmt_comm_last_error(pp->comm)));
        goto out;
    }
    /* the stage to name: a failure's origin that says so itself, else the
     * first that failed */
    int who = -1;
    for (int i = 0; i < pp->stages; i++)
        if (all[4 * i + 3] && (who < 0 || all[4 * i + 3] == i + 1))
            who = i;
    if (who >= 0 && pp->tail) {
        texts = malloc((size_t)pp->stages * LLMT__PP_TEXT);
        if (!texts || llmt__pp_agree_texts(pp->comm, s != LLMT_OK ? own : "", texts) != LLMT_OK)
            FAILED(llmt__err_set(pp->e, LLMT_ERR_COMM,
                                 "trainer: pipeline stage %d: stage %d failed in this step; "
                                 "its error did not come: %s",
                                 pp->stage, (int)all[4 * who + 3] - 1,
                                 texts ? llmt_comm_last_error(pp->comm) : "no memory"));
        else if (s == LLMT_OK) {
            learnt(pp, "stage", who, (int)all[4 * who + 3] - 1,
                   texts + (size_t)who * LLMT__PP_TEXT);
            s = LLMT_ERR_COMM;
            snprintf(own, sizeof own, "%s", pp->e->msg);
        }
    } else if (who >= 0 && s == LLMT_OK) {
        FAILED(llmt__err_set(pp->e, LLMT_ERR_COMM,
                             "trainer: pipeline stage %d: stage %d failed in this step",
                             pp->stage, (int)all[4 * who + 3] - 1));
    }
    if (s == LLMT_OK) {
        double ss = 0.0, v[3];
        for (int i = 0; i < pp->stages; i++) {
            memcpy(v, all + 4 * i, sizeof v);
            ss += v[1];
            if (i == pp->stages - 1)
                *loss_sum = v[0];
            if (v[2] > pp->vspan)
                pp->vspan = v[2];
        }
        *sumsq = ss;
    }
out:
#undef FAILED
    free(all);
    free(texts);
    if (s != LLMT_OK) { /* this stage's own failure or what it learnt, the last word */
        pp->broken = 1;
        llmt__err_set(pp->e, s, "%s", own);
    }
    return s;
}

llmt_status llmt__pp_fwd_bwd(llmt__pp *pp, const int32_t *inputs, const int32_t *targets,
                             int64_t count, double *loss_sum, double *sumsq)
{
    if (pp->broken)
        return llmt__err_set(pp->e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: pipeline stage %d: an earlier step failed (on this "
                             "or another stage or replica), which leaves that step's "
                             "messages unmatched in the pipeline group and the stages' "
                             "parameters apart: remake the trainer and its pipeline "
                             "communicator (every stage's)",
                             pp->stage);
    pp->idle_s = 0.0;
    pp->sent = pp->recvd = 0;
    pp->vt = pp->vbusy = pp->vspan = 0.0;
    pp->from = 0;
    llmt_status s = llmt__devtrain_stage_begin(pp->g, inputs, targets, pp->micro, count);
    double t0 = now_s();
    if (s != LLMT_OK)
        fail_on(pp, 0);
    else
        s = run_schedule(pp);
    pp->step_s = now_s() - t0;
    if (s != LLMT_OK && !joins(pp, s)) {
        pp->broken = 1;
        return s;
    }
    return step_end(pp, s, loss_sum, sumsq);
}

llmt_status llmt__pp_step_done(llmt__pp *pp, llmt_status s)
{
    if (!pp->tail || !llmt__pp_agree_host(pp->comm))
        return s;
    char own[LLMT_ERR_MSG_MAX];
    if (s != LLMT_OK)
        snprintf(own, sizeof own, "%s", pp->e->msg);
    int64_t *codes = malloc((size_t)pp->stages * sizeof *codes);
    char *texts = malloc((size_t)pp->stages * LLMT__PP_TEXT);
    llmt_status t = LLMT_OK;
    int who = -1;
    if (!codes || !texts)
        t = llmt__err_set(pp->e, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    else if (llmt__pp_agree_codes(pp->comm, s != LLMT_OK, codes) != LLMT_OK)
        t = llmt__err_set(pp->e, LLMT_ERR_COMM,
                          "trainer: pipeline stage %d: the update's state over the stages: %s",
                          pp->stage, llmt_comm_last_error(pp->comm));
    for (int i = 0; t == LLMT_OK && i < pp->stages && who < 0; i++)
        if (codes[i])
            who = i;
    if (who >= 0 && llmt__pp_agree_texts(pp->comm, s != LLMT_OK ? own : "", texts) != LLMT_OK)
        t = llmt__err_set(pp->e, LLMT_ERR_COMM,
                          "trainer: pipeline stage %d: stage %d's update failed; its error "
                          "did not come: %s",
                          pp->stage, who, llmt_comm_last_error(pp->comm));
    if (s != LLMT_OK) {
        llmt__err_set(pp->e, s, "%s", own);
    } else if (t != LLMT_OK) {
        s = t;
    } else if (who >= 0) {
        s = llmt__err_set(pp->e, LLMT_ERR_COMM,
                          "trainer: pipeline stage %d: stage %d failed in this step's update "
                          "(the stages' parameters are apart: remake the trainer and its "
                          "pipeline communicator). Stage %d's error: %s",
                          pp->stage, who, who, texts + (size_t)who * LLMT__PP_TEXT);
    }
    if (s != LLMT_OK)
        pp->broken = 1;
    free(codes);
    free(texts);
    return s;
}

void llmt__pp_info_get(const llmt__pp *pp, llmt__pp_info *out)
{
    out->stage = pp->stage;
    out->stages = pp->stages;
    out->l0 = pp->l0;
    out->l1 = pp->l1;
    out->micro = pp->micro;
    out->schedule = pp->sched;
    out->slots = pp->inflight;
    out->v = pp->v;
    out->step_s = pp->step_s;
    out->idle_s = pp->idle_s;
    out->busy_cpu_s = pp->vbusy;
    out->span_cpu_s = pp->vspan;
    out->sent_bytes = pp->sent;
    out->recv_bytes = pp->recvd;
    out->grad_copies = pp->sends ? llmt__pp_sends_copies(pp->sends) : 0;
}
