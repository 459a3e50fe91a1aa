/* The pipeline's pooled gradient copies (lib/train/pp_send.c) in the
 * planner's memory of a stage. Over processes (MPI, Gloo) a stage leaves
 * its sends in flight; an input gradient is copied into a pooled buffer
 * first (the engine's gradient buffer is rewritten by the next backward),
 * and a buffer is reused only once its send is done, asked without
 * waiting, else the pool grows. So the pool holds the most gradients of a
 * step whose receivers may not have taken them yet when the stage sends
 * another. Which those are follows from the schedule alone: a stage knows
 * its predecessor took gradient X once X's receiving backward there
 * happened before something the stage has received since (Lamport's
 * happened-before, tracked as vector clocks over the stages' op lists,
 * lib/plan/pp_sched.c, the lists the engine runs). That is the bound
 * where the transport can ask (MPI_Test); eager sends (small MPI
 * messages) finish sooner, so a run holds at most that many. Where it
 * cannot ask without waiting (Gloo's unbound buffers), no buffer is
 * reused before the step's end drains them all: the pool holds every
 * input gradient the stage sends in a step. */
#include <stdlib.h>

#include "plan/plan.h"
#include "plan/pp_sched.h"

/* (stage, chunk, micro-batch, backward) -> the op's index in its list */
#define POS(s, b, c, a) \
    pos[(((size_t)(s)*2 + (size_t)(b)) * (size_t)v + (size_t)(c)) * (size_t)m + (size_t)(a)]

int llmt__plan_pp_grad_copies(int sched, int64_t p64, int64_t v64, int64_t m64, int64_t stage,
                              int asks)
{
    int p = (int)p64, v = (int)(v64 > 1 ? v64 : 1), m = (int)m64;
    if (p <= 1 || m < 1 || stage < 0 || stage >= p)
        return 0;
    /* the stage's input gradients of a step: one per micro-batch of each
     * chunk but the first virtual stage's */
    int all = stage > 0 ? m * v : m * (v - 1);
    if (!asks)
        return all;
    /* lib/train's schedule numbers (pp.h) from the planner's */
    int ts = sched == LLMT__PLAN_PP_GPIPE         ? LLMT__PP_GPIPE
             : sched == LLMT__PLAN_PP_INTERLEAVED ? LLMT__PP_INTERLEAVED
                                                  : LLMT__PP_1F1B;
    int n = 2 * m * v, worst = -1;
    llmt__pp_op *ops = malloc((size_t)p * (size_t)n * sizeof *ops);
    int *pos = malloc((size_t)p * 2 * (size_t)v * (size_t)m * sizeof *pos);
    int *vc = malloc((size_t)p * (size_t)n * (size_t)p * sizeof *vc);
    int *done = calloc((size_t)p, sizeof *done);
    if (!ops || !pos || !vc || !done)
        goto out;
    for (int s = 0; s < p; s++) {
        if (llmt__pp_sched_ops(ts, p, v, m, s, ops + (size_t)s * (size_t)n) < 0)
            goto out;
        for (int i = 0; i < n; i++) {
            llmt__pp_op *o = &ops[(size_t)s * (size_t)n + (size_t)i];
            POS(s, o->bwd, o->chunk, o->micro) = i;
        }
    }
    /* run the lists with sends that never wait: an op runs once its
     * input's sender has; its clock is its predecessor's joined with the
     * sender's (vc[s][i][r]: the last op of stage r known done) */
    for (int left = p * n, moved = 1; left > 0 && moved;) {
        moved = 0;
        for (int s = 0; s < p; s++) {
            int i = done[s];
            if (i >= n)
                continue;
            llmt__pp_op *o = &ops[(size_t)s * (size_t)n + (size_t)i];
            int j = o->chunk * p + s, from = -1, k = -1;
            if (!o->bwd && j > 0) { /* the previous virtual stage's forward */
                from = (s + p - 1) % p;
                k = POS(from, 0, o->chunk - (s == 0), o->micro);
            } else if (o->bwd && j < p * v - 1) { /* the next one's backward */
                from = (s + 1) % p;
                k = POS(from, 1, o->chunk + (s == p - 1), o->micro);
            }
            if (from >= 0 && done[from] <= k)
                continue;
            int *c = vc + ((size_t)s * (size_t)n + (size_t)i) * (size_t)p;
            for (int r = 0; r < p; r++) {
                int a = i > 0 ? c[r - p] : -1;
                int b = from >= 0
                            ? vc[((size_t)from * (size_t)n + (size_t)k) * (size_t)p + (size_t)r]
                            : -1;
                c[r] = a > b ? a : b;
            }
            c[s] = i;
            done[s]++;
            left--;
            moved = 1;
        }
    }
    for (int s = 0; s < p; s++)
        if (done[s] < n)
            goto out; /* the lists deadlock (pp_sched.c's simulation says they do not) */
    /* at each input gradient the stage sends, the earlier ones not known
     * taken, and itself */
    worst = 0;
    int s = (int)stage, to = (s + p - 1) % p;
    for (int i = 0; i < n; i++) {
        llmt__pp_op *y = &ops[(size_t)s * (size_t)n + (size_t)i];
        if (!y->bwd || y->chunk * p + s == 0)
            continue;
        int known = vc[((size_t)s * (size_t)n + (size_t)i) * (size_t)p + (size_t)to], held = 1;
        for (int h = 0; h < i; h++) {
            llmt__pp_op *x = &ops[(size_t)s * (size_t)n + (size_t)h];
            if (x->bwd && x->chunk * p + s > 0 &&
                POS(to, 1, x->chunk - (s == 0), x->micro) > known)
                held++;
        }
        worst = held > worst ? held : worst;
    }
out:
    free(ops);
    free(pos);
    free(vc);
    free(done);
    /* without memory: every gradient of the step */
    return worst >= 0 ? worst : all;
}

double llmt__plan_engine_stage_pool(const llmt_spec *s, int64_t stage, int asks)
{
    int64_t p = s->parallelism.pp, v = s->parallelism.virtual_stages;
    double copies = llmt__plan_pp_grad_copies(llmt__plan_pp_schedule(s), p, v,
                                              s->batch.grad_accum, stage, asks);
    /* one boundary tensor (this rank's rows of the residual stream: of
     * its context parallel part, and under sequence parallelism of its
     * tensor parallel share) in storage precision, and the clock stamp
     * after it (lib/train/stage.h, LLMT__STAGE_TAIL) */
    double rows = (double)s->batch.micro * (double)s->model.seq_len / (double)s->parallelism.cp;
    if (s->parallelism.tp > 1 && s->parallelism.sequence_parallel)
        rows /= (double)s->parallelism.tp;
    double es = s->train.device == LLMT_SPEC_DEVICE_CPU ? 4 : 2;
    return copies * (rows * (double)s->model.hidden * es + LLMT__STAGE_TAIL);
}
