/* The job's checkpoints: every configured tier with its retention (the
 * local root, the host snapshot, the peer replicas, the durable copy), the
 * "auto" interval (Young/Daly from the measured save stall and the spec's
 * failure rate), restore from the fastest tier that holds the newest step
 * every rank can read (memory, then peer, local, durable), and the
 * rollback of the anomaly policy. Every rank saves its share into rank 0's
 * root, so one sharded checkpoint per step resumes under any world size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "job/job.h"
#include "train/trainer_state.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

/* The peer tier's replica directory (the tier's path: a node's own disk)
 * and this rank's node: `llmtrain launch --nnodes` gives each worker its
 * agent's node ($LLMT_LAUNCH_NODE), which several agents on one host need;
 * without it the host name tells the nodes apart (ckpt/peer.c). */
static llmt_status peer_config(llmt_job *j)
{
    const char *n = getenv("LLMT_LAUNCH_NODE");
    char *end = NULL;
    long long node = n && *n ? strtoll(n, &end, 10) : -1;
    int set = n && *n && end && !*end && node >= 0;
    if (n && *n && !set) /* set by llmtrain launch: a bad one is a bug, not a default */
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "checkpoint.tiers peer: $LLMT_LAUNCH_NODE '%.40s' is not a node number "
                    "(>= 0); unset it to tell nodes apart by host name",
                    n);
    llmt_status s = llmt__ckpt_peer_config(j->ck, j->peer_dir[0] ? j->peer_dir : NULL,
                                           set ? (uint64_t)node : 0, set);
    if (s != LLMT_OK)
        return FAIL(s, "checkpoint.tiers peer: %s", llmt_ckpt_last_error(j->ck));
    return LLMT_OK;
}

llmt_status llmt__job_ckpt_open(llmt_job *j)
{
    llmt_ckpt_opts co;
    llmt_ckpt_opts_init(&co, sizeof co);
    co.keep_last = j->keep_last;
    co.keep_every = j->keep_every;
    co.rank = j->rank;
    co.world_size = j->world;
    if (j->durable_dir[0]) {
        co.durable_dir = j->durable_dir;
        co.durable_keep_last = j->durable_keep_last;
        co.durable_keep_every = j->durable_keep_every;
    }
    llmt_status s = llmt_ckpt_create(j->ctx, j->ckpt_dir, &co, &j->ck);
    if (s != LLMT_OK)
        return FAIL(s, "checkpoint: %s", llmt_context_last_error(j->ctx));
    if (j->peer_tier)
        return peer_config(j);
    return LLMT_OK;
}

/* The anomaly policy lower_lr's state: the product of its factors and how
 * many were applied. The trainer saves its LR schedule as configured
 * (trainer.schedule), but a fresh job builds the trainer from the spec, so
 * without these a resume silently returned to the full LR. */
static llmt_status lr_add(llmt_job *j)
{
    char v[64];
    snprintf(v, sizeof v, "%.17g", j->lr_mult > 0 ? j->lr_mult : 1.0);
    llmt_status s = llmt_ckpt_set_kv(j->ck, "job.lr_mult", v);
    snprintf(v, sizeof v, "%lld", (long long)j->lr_lowered);
    if (s == LLMT_OK)
        s = llmt_ckpt_set_kv(j->ck, "job.lr_lowered", v);
    return s;
}

/* The anomaly detector's windows (recent losses and gradient norms, the
 * z-scores' history), oldest first, as "job.anomaly_window": a resumed or
 * rolled-back run judges its next steps against the same history as the
 * run that saved it (without it the windows started empty, and for the
 * first steps after a restore no spike could be seen). */
static int window_text(const float *w, int n, int pos, char *out, size_t cap)
{
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        int k = n < JOB_LOSS_WINDOW ? i : (pos + i) % JOB_LOSS_WINDOW;
        int len = snprintf(out + at, cap - at, "%s%.9g", i ? " " : "", (double)w[k]);
        if (len < 0 || (size_t)len >= cap - at)
            return 0;
        at += (size_t)len;
    }
    out[at] = 0;
    return 1;
}

static llmt_status window_add(llmt_job *j)
{
    char l[JOB_LOSS_WINDOW * 20 + 1], g[JOB_LOSS_WINDOW * 20 + 1], v[sizeof l + sizeof g + 8];
    if (!window_text(j->losses, j->nloss, j->loss_pos, l, sizeof l) ||
        !window_text(j->gnorms, j->ngn, j->gn_pos, g, sizeof g))
        return FAIL(LLMT_ERR_INTERNAL, "checkpoint: job.anomaly_window does not fit");
    snprintf(v, sizeof v, "loss %s|grad_norm %s", l, g);
    return llmt_ckpt_set_kv(j->ck, "job.anomaly_window", v);
}

/* "NAME v1 v2 ..." into w (oldest first); the count, or -1 when malformed */
static int window_parse(const char *t, const char *name, float *w)
{
    size_t nl = strlen(name);
    if (strncmp(t, name, nl) || (t[nl] != ' ' && t[nl] != 0 && t[nl] != '|'))
        return -1;
    const char *p = t + nl;
    int n = 0;
    while (*p == ' ') {
        char *end = NULL;
        double x = strtod(p + 1, &end);
        if (end == p + 1 || n == JOB_LOSS_WINDOW)
            return -1;
        w[n++] = (float)x;
        p = end;
    }
    return *p == 0 || *p == '|' ? n : -1;
}

/* After a restore from `ck`: the windows it saved, or empty ones for a
 * checkpoint without them (older than the key). */
static llmt_status window_read(llmt_job *j, llmt_ckpt *ck)
{
    char v[4096];
    j->nloss = j->loss_pos = j->ngn = j->gn_pos = 0;
    if (llmt_ckpt_get_kv(ck, "job.anomaly_window", v, sizeof v, NULL) != LLMT_OK)
        return LLMT_OK;
    const char *bar = strchr(v, '|');
    float l[JOB_LOSS_WINDOW], g[JOB_LOSS_WINDOW];
    int nl = window_parse(v, "loss", l), ng = bar ? window_parse(bar + 1, "grad_norm", g) : -1;
    if (nl < 0 || ng < 0)
        return FAIL(LLMT_ERR_FORMAT,
                    "checkpoint: job.anomaly_window '%.200s' is not 'loss v...|grad_norm v...' "
                    "with at most %d values each",
                    v, JOB_LOSS_WINDOW);
    for (int i = 0; i < nl; i++)
        llmt__job_window_add(j->losses, &j->nloss, &j->loss_pos, l[i]);
    for (int i = 0; i < ng; i++)
        llmt__job_window_add(j->gnorms, &j->ngn, &j->gn_pos, g[i]);
    return LLMT_OK;
}

/* Before the trainer reads `ck` (so that its schedule then matches the
 * saved one): the LR multiplier the checkpoint was trained with. A job
 * with its full LR replays the saved lowerings one factor at a time when
 * they give the saved product, as lower_lr applied them (bit for bit the
 * same LR); otherwise it scales once by saved / current. A checkpoint
 * without the key (older than it) leaves the LR as it is. */
static llmt_status lr_read(llmt_job *j, llmt_ckpt *ck)
{
    char v[64], n[64];
    if (llmt_ckpt_get_kv(ck, "job.lr_mult", v, sizeof v, NULL) != LLMT_OK)
        return LLMT_OK;
    char *end = NULL;
    double want = strtod(v, &end);
    long long lowered = 0;
    if (llmt_ckpt_get_kv(ck, "job.lr_lowered", n, sizeof n, NULL) == LLMT_OK)
        lowered = strtoll(n, NULL, 10);
    if (!end || *end || !(want > 0) || !isfinite(want) || lowered < 0)
        return FAIL(LLMT_ERR_FORMAT,
                    "checkpoint: job.lr_mult '%s' (job.lr_lowered %lld) is not a "
                    "multiplier > 0",
                    v, lowered);
    double have = j->lr_mult > 0 ? j->lr_mult : 1.0;
    if (want == have)
        return LLMT_OK;
    double f = j->spec->fault_tolerance.anomaly.lr_factor, replay = 1.0;
    for (long long i = 0; i < lowered && i < 1000; i++)
        replay *= f;
    int steps = have == 1.0 && lowered > 0 && lowered <= 1000 && replay == want;
    for (int i = 0; i < (steps ? (int)lowered : 1); i++)
        if (llmt__trainer_scale_lr(j->tr, steps ? f : want / have) != LLMT_OK)
            return FAIL(LLMT_ERR_INTERNAL, "checkpoint: job.lr_mult %s: %s", v,
                        llmt_trainer_last_error(j->tr));
    llmt__log(j->ctx, LLMT_LOG_INFO, "job",
              "the checkpoint was trained with its LR lowered x%.4g by "
              "fault_tolerance.anomaly.policy lower_lr (%lld time(s)): so is this run",
              want, lowered);
    j->lr_mult = want;
    j->lr_lowered = lowered;
    return LLMT_OK;
}

llmt_status llmt__job_save(llmt_job *j, int async)
{
    int64_t step = 0;
    llmt_trainer_get_step(j->tr, &step);
    /* the previous async save must have succeeded */
    llmt_status s = llmt_ckpt_wait(j->ck, -1);
    if (s != LLMT_OK)
        return FAIL(s, "%s", llmt_ckpt_last_error(j->ck));
    s = llmt_ckpt_begin(j->ck, step);
    if (s != LLMT_OK)
        return FAIL(s, "%s", llmt_ckpt_last_error(j->ck));
    s = llmt_trainer_ckpt_add(j->tr, j->ck);
    if (s != LLMT_OK)
        return FAIL(s, "%s", llmt_trainer_last_error(j->tr));
    s = llmt_loader_ckpt_add(j->data.loader, j->ck);
    if (s == LLMT_OK)
        s = lr_add(j);
    if (s == LLMT_OK)
        s = window_add(j);
    if (s == LLMT_OK) { /* for people and tools; loading does not need it */
        char plan[160];
        snprintf(plan, sizeof plan,
                 "{\"tp\": %d, \"cp\": %d, \"pp\": %d, \"dp\": %d, \"zero\": %d}",
                 (int)(j->tp > 1 ? j->tp : 1), (int)(j->cp > 1 ? j->cp : 1),
                 (int)(j->pp > 1 ? j->pp : 1), (int)j->dp, (int)(j->dp > 1 ? j->zero : 0));
        s = llmt_ckpt_set_plan_json(j->ck, plan);
    }
    if (s == LLMT_OK) {
        llmt__job_fault_saving(j, step);
        s = llmt_ckpt_save(j->ck, async);
    }
    if (s != LLMT_OK)
        return FAIL(s, "%s", llmt_ckpt_last_error(j->ck));
    j->last_saved = step;
    /* the peer tier: this rank's part to the next rank as soon as it is on
     * disk (the replica must exist before a failure can need it, so the
     * replication waits for this rank's write: an async save's write is
     * not overlapped with training under a peer tier) */
    if (j->peer_tier && j->comm && j->world > 1) {
        s = llmt_ckpt_peer_replicate(j->ck, j->comm, step);
        if (s != LLMT_OK)
            return FAIL(s, "checkpoint.tiers peer: replicating step %lld: %s", (long long)step,
                        llmt_ckpt_last_error(j->ck));
        /* every replica on disk before any rank goes on: a rank that dies
         * in the next step must not take its partner's write with it */
        if ((s = llmt_comm_barrier(j->comm)) != LLMT_OK)
            return FAIL(s, "checkpoint.tiers peer: %s", llmt_comm_last_error(j->comm));
    }
    return LLMT_OK;
}

/* Ranks measure different times; they must agree on one interval or they
 * would save different steps. The maximum is the safe choice. */
static void agree_max(llmt_job *j, double *v, int n)
{
    if (!j->comm || j->world <= 1)
        return;
    float f[4];
    for (int i = 0; i < n; i++)
        f[i] = (float)v[i];
    if (llmt_comm_all_reduce(j->comm, f, f, (size_t)n, LLMT_DTYPE_FP32, LLMT_REDUCE_MAX,
                             NULL) == LLMT_OK)
        for (int i = 0; i < n; i++)
            v[i] = f[i];
}

/* checkpoint.interval "auto", decided after the first step: the stall C of
 * a save (measured on a first save now, unless checkpoint.save_stall_s
 * gives it), the job's MTBF from fault_tolerance.gpu_failures_per_hour x
 * GPUs, Young's sqrt(2 C MTBF) (the planner's formula), never closer than
 * an async save takes to persist, converted to steps by the measured step
 * time. */
static llmt_status decide_auto(llmt_job *j, double step_s, llmt_job_metrics *m)
{
    const llmt_spec *sp = j->spec;
    double stall = sp->checkpoint.save_stall_s, write = sp->checkpoint.save_write_s;
    int measured = 0;
    if (!(stall > 0) || !(write > 0)) {
        double t0 = llmt__job_now();
        llmt_status s = llmt__job_save(j, j->ckpt_async);
        if (s != LLMT_OK)
            return s;
        double t1 = llmt__job_now();
        s = llmt_ckpt_wait(j->ck, -1);
        if (s != LLMT_OK)
            return FAIL(s, "%s", llmt_ckpt_last_error(j->ck));
        double t2 = llmt__job_now();
        j->first_stall_s = j->ckpt_async ? t1 - t0 : t2 - t0;
        j->first_write_s = t2 - t0;
        if (!(stall > 0))
            stall = j->first_stall_s;
        if (!(write > 0))
            write = j->first_write_s;
        measured = 1;
        if (m) {
            m->events |= LLMT_JOB_EVENT_SAVED;
            m->saved_step = j->last_saved;
        }
    }
    double v[3] = {stall, write, step_s};
    agree_max(j, v, 3);
    stall = v[0] > 1e-6 ? v[0] : 1e-6;
    write = v[1];
    step_s = v[2] > 1e-9 ? v[2] : 1e-9;
    double rate = sp->fault_tolerance.gpu_failures_per_hour;
    double mtbf = rate > 0 ? 3600.0 / (rate * (double)j->world) : INFINITY;
    double yd = INFINITY;
    if (isfinite(mtbf))
        llmt_young_daly_interval(stall, mtbf, 0, &yd);
    double interval = fmax(yd, j->ckpt_async ? write : 0.0);
    if (interval < step_s)
        interval = step_s;
    double steps = isfinite(interval) ? floor(interval / step_s + 0.5) : 0;
    if (steps < 1 && isfinite(interval))
        steps = 1;
    /* beyond the run: only the final save; 0 says "none" to the loop */
    j->ckpt_interval = steps > (double)j->steps || !isfinite(steps) ? 0 : (int64_t)steps;
    j->auto_stall_s = stall;
    j->auto_write_s = write;
    j->auto_mtbf_s = mtbf;
    j->auto_step_s = step_s;
    j->auto_interval_s = interval;
    char every[64];
    if (j->ckpt_interval > 0)
        snprintf(every, sizeof every, "every %lld steps", (long long)j->ckpt_interval);
    else
        snprintf(every, sizeof every, "only at the end (%.0f steps > train.steps)",
                 isfinite(steps) ? steps : INFINITY);
    snprintf(j->interval_note, sizeof j->interval_note,
             "checkpoint.interval auto: %s = %.4g s: Young/Daly sqrt(2 x C x MTBF) "
             "= %.4g s with C = %.4g s (save stall, %s) and MTBF = %.4g h "
             "(fault_tolerance.gpu_failures_per_hour %.3g x %d GPU(s)); "
             "%s write %.4g s; step %.4g s",
             every, interval, yd, stall,
             sp->checkpoint.save_stall_s > 0 ? "checkpoint.save_stall_s"
             : measured                      ? "measured on the first save"
                                             : "given",
             mtbf / 3600.0, rate, (int)j->world, j->ckpt_async ? "async," : "sync,", write,
             step_s);
    llmt__log(j->ctx, LLMT_LOG_INFO, "job", "%s", j->interval_note);
    llmt__job_metrics_line(j,
                           "{\"event\":\"ckpt_interval\",\"step\":%lld,\"interval_steps\":"
                           "%lld,\"interval_s\":%.6g,\"young_daly_s\":%.6g,\"stall_s\":"
                           "%.6g,\"write_s\":%.6g,\"mtbf_s\":%.6g,"
                           "\"gpu_failures_per_hour\":%.6g,\"gpus\":%d,\"step_s\":%.6g}",
                           (long long)j->last.step, (long long)j->ckpt_interval,
                           isfinite(interval) ? interval : -1, isfinite(yd) ? yd : -1, stall,
                           write, isfinite(mtbf) ? mtbf : -1, rate, (int)j->world, step_s);
    if (m)
        m->events |= LLMT_JOB_EVENT_INTERVAL;
    return LLMT_OK;
}

llmt_status llmt__job_maybe_save(llmt_job *j, int64_t done, int last, llmt_job_metrics *m)
{
    if (j->ckpt_auto && j->ckpt_interval < 0) {
        llmt_status s = decide_auto(j, m ? m->step_s : 0, m);
        if (s != LLMT_OK)
            return s;
    }
    if (j->last_saved == done)
        return LLMT_OK;
    if ((j->ckpt_interval > 0 && done % j->ckpt_interval == 0) || last) {
        /* the last one is synchronous so that the run ends durable; ZeRO-3
         * parameters need no gather: each rank saves its share */
        llmt_status s = llmt__job_save(j, last ? 0 : j->ckpt_async);
        if (s != LLMT_OK)
            return s;
        if (m) {
            m->events |= LLMT_JOB_EVENT_SAVED;
            m->saved_step = done;
        }
    }
    return LLMT_OK;
}

/* A handle on the durable tier for reading and quarantining (never
 * pruning: the saving handle does that). */
static llmt_status durable_handle(llmt_job *j, llmt_ckpt **dk)
{
    llmt_ckpt_opts co;
    llmt_ckpt_opts_init(&co, sizeof co);
    co.rank = j->rank;
    co.world_size = j->world;
    co.keep_last = 0; /* never prune the durable tier from here */
    return llmt_ckpt_create(j->ctx, j->durable_dir, &co, dk);
}

/* With a node-local root the steps commit in the durable tier: the parts
 * of newer steps there (an attempt the failure cut short) are what must
 * not be committed with new data. */
static llmt_status quarantine_durable(llmt_job *j, int64_t step, size_t *moved)
{
    llmt_ckpt *dk = NULL;
    llmt_status s = durable_handle(j, &dk);
    if (s != LLMT_OK)
        return FAIL(s, "checkpoint.tiers durable: %s", llmt_context_last_error(j->ctx));
    s = llmt_ckpt_quarantine_newer(dk, step, moved);
    if (s != LLMT_OK)
        FAIL(s, "checkpoint.tiers durable: %s", llmt_ckpt_last_error(dk));
    llmt_ckpt_destroy(dk);
    return s;
}

/* The saves after a restore (every rank passes here once per restore,
 * after the barrier) are another attempt than those before it, which may
 * have reached the same steps: the attempt identity rank 0's token gave
 * the run (ckpt_shared.c) moves on alike on every rank (splitmix64). A
 * part of the abandoned timeline that the quarantine did not move (a
 * step directory it could not see yet) then never commits with the new
 * one's. */
static void next_attempt(llmt_job *j)
{
    uint64_t x = j->ck->attempt;
    if (!x) /* one rank, or no token agreed: nothing to tell apart */
        return;
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    llmt__ckpt_set_attempt(j->ck, x ? x : 1);
}

llmt_status llmt__job_quarantine(llmt_job *j, int64_t step)
{
    size_t moved = 0;
    llmt_status s = LLMT_OK;
    if (j->rank == 0 && j->ck->node_local) {
        if ((s = quarantine_durable(j, step, &moved)) != LLMT_OK)
            return s;
    } else if (j->rank == 0)
        s = llmt_ckpt_quarantine_newer(j->ck, step, &moved);
    if (s != LLMT_OK)
        return FAIL(s, "%s", llmt_ckpt_last_error(j->ck));
    if (moved) {
        size_t l = strlen(j->resume_note);
        snprintf(j->resume_note + l, sizeof j->resume_note - l,
                 "%smoved %zu unusable step director%s to %.400s/quarantine (see REASON "
                 "in each)",
                 l ? "; " : "", moved, moved == 1 ? "y" : "ies",
                 j->ck->node_local ? j->durable_dir : j->ckpt_dir);
    }
    /* no rank saves before rank 0 has moved them */
    if (j->comm && (s = llmt_comm_barrier(j->comm)) != LLMT_OK)
        return FAIL(s, "job: %s", llmt_comm_last_error(j->comm));
    next_attempt(j);
    return LLMT_OK;
}

/* Restore from the checkpoint open on `ck`. */
static llmt_status restore_open(llmt_job *j, llmt_ckpt *ck, int with_data)
{
    llmt_status s = lr_read(j, ck);
    if (s != LLMT_OK)
        return s;
    s = llmt_trainer_ckpt_read(j->tr, ck);
    if (s != LLMT_OK)
        return FAIL(s, "%s", llmt_trainer_last_error(j->tr));
    if (with_data && (s = llmt__job_data_ckpt_read(j, &j->data, ck)) != LLMT_OK)
        return s;
    return window_read(j, ck);
}

static int restore_all(llmt_job *j, llmt_ckpt *ck, int with_data, int64_t step);
static int restore_try(llmt_job *j, llmt_ckpt *ck, int with_data, int64_t step);
static llmt_status agree_min(llmt_job *j, int64_t *v, int n);

/* The LR as it was before a restore attempt (lr_read scales it before
 * the trainer reads): put back when the attempt's step turns out corrupt,
 * so that the older step's lr_read starts from the same state. */
typedef struct {
    double mult, lr, min_lr;
    int64_t lowered;
} lr_state;

static lr_state lr_save(llmt_job *j)
{
    const llmt_trainer_opts *o = llmt__trainer_opts(j->tr);
    lr_state l = {j->lr_mult, o->lr, o->min_lr, j->lr_lowered};
    return l;
}

static void lr_undo(llmt_job *j, const lr_state *l)
{
    const llmt_trainer_opts *o = llmt__trainer_opts(j->tr);
    if (o->lr != l->lr && o->lr > 0)
        llmt__trainer_scale_lr(j->tr, l->lr / o->lr);
    if (o->lr != l->lr || o->min_lr != l->min_lr) /* the floor may differ by a rounding */
        llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                  "restore: the LR the corrupt step set could not be undone exactly (lr %.9g, "
                  "min_lr %.9g; before it %.9g, %.9g)",
                  (double)o->lr, (double)o->min_lr, l->lr, l->min_lr);
    j->lr_mult = l->mult;
    j->lr_lowered = l->lowered;
}

/* Rank 0 moves the steps found corrupt while they were read (bad[0..n-1],
 * their reasons in t) to ROOT/quarantine with that reason; every rank
 * learns whether it could (the others would otherwise find them again). */
static llmt_status quarantine_corrupt(llmt_job *j, llmt_ckpt *ck, const int64_t *bad,
                                      char (*why)[LLMT_ERR_MSG_MAX], size_t n, char *note,
                                      size_t cap)
{
    llmt_status s = LLMT_OK;
    for (size_t i = 0; i < n && s == LLMT_OK && j->rank == 0; i++)
        s = llmt__ckpt_quarantine(ck, bad[i], why[i], NULL, 0);
    char e[LLMT_ERR_MSG_MAX];
    snprintf(e, sizeof e, "%s", s == LLMT_OK ? "" : ck->err.msg);
    int64_t ok = s == LLMT_OK;
    if (agree_min(j, &ok, 1) != LLMT_OK)
        return j->err.status;
    if (!ok)
        return FAIL(s != LLMT_OK ? s : LLMT_ERR_IO,
                    "checkpoint: step(s) found corrupt could not be moved to quarantine: %s",
                    s != LLMT_OK ? e : "failed on rank 0");
    if (n)
        snprintf(note, cap, "; corrupt step %lld%s moved to %.300s/quarantine",
                 (long long)bad[0], n > 1 ? " and older ones" : "", ck->root);
    return LLMT_OK;
}

/* Open the newest usable checkpoint of `ck` and restore from it. Several
 * ranks: collective (every rank calls it); they share the data files'
 * checks and open the same step (ckpt/open_shared.c), then every rank
 * restores or none goes on. A step whose data turns out corrupt while it
 * is read (a block checksum: the open checks sizes and headers, not
 * every byte, so that the happy path reads each byte once) is given up
 * on every rank together: logged with its file, tensor and reason, the
 * next older one tried, and once one restored the corrupt ones go to
 * quarantine (never deleted). With none usable nothing is moved, and the
 * error lists every step tried: LLMT_ERR_NOT_FOUND, or LLMT_ERR_CHECKSUM
 * when a corrupt step was partly read into the job (whose state then is
 * not its start's). */
static llmt_status restore_from(llmt_job *j, llmt_ckpt *ck, int with_data, int64_t *step,
                                int *opened, char *note, size_t cap)
{
    *opened = 0;
    note[0] = 0;
    int many = j->comm && j->world > 1;
    ck_tried tried = {.len = 0};
    int64_t *bad = NULL, below = INT64_MAX;
    char(*why)[LLMT_ERR_MSG_MAX] = NULL;
    size_t nbad = 0;
    llmt_status s;
    for (;;) {
        s = many ? llmt__ckpt_open_latest_shared(ck, j->comm, below, &tried, step)
                 : llmt__ckpt_open_latest_below(ck, below, &tried, step);
        if (s != LLMT_OK)
            break;
        int r = restore_try(j, ck, with_data, *step);
        llmt__ckpt_close_files(ck); /* read: the run goes on without them */
        if (r != 0) {
            *opened = 1;
            s = r > 0 ? LLMT_OK : j->err.status ? j->err.status : LLMT_ERR_INTERNAL;
            break;
        }
        /* corrupt (j->err says where and why, the same on every rank) */
        int64_t *b = realloc(bad, (nbad + 1) * sizeof *bad);
        char(*w)[LLMT_ERR_MSG_MAX] = b ? realloc(why, (nbad + 1) * sizeof *why) : NULL;
        if (b)
            bad = b;
        if (!w) {
            s = FAIL(LLMT_ERR_OUT_OF_MEMORY, "checkpoint: restore: out of memory");
            *opened = 1;
            break;
        }
        why = w;
        bad[nbad] = *step;
        snprintf(why[nbad++], LLMT_ERR_MSG_MAX, "%s", j->err.msg);
        char note[LLMT_ERR_MSG_MAX];
        snprintf(note, sizeof note,
                 "%.900s (found while reading it; it goes to quarantine "
                 "once an older step restores)",
                 j->err.msg);
        llmt__ckpt_skip_note(ck, &tried, *step, note); /* WARN: skipping step N: ... */
        below = *step;
    }
    if (s == LLMT_OK)
        s = quarantine_corrupt(j, ck, bad, why, nbad, note, cap);
    else if (!*opened && nbad && s == LLMT_ERR_NOT_FOUND) { /* every step tried, listed */
        s = FAIL(LLMT_ERR_CHECKSUM, "%s", ck->err.msg);
        llmt__err_set(&ck->err, s, "%s", j->err.msg);
    }
    free(bad);
    free(why);
    return s;
}

/* Each of v[0..n-1] becomes its minimum over the ranks (one collective;
 * unchanged on one rank). */
static llmt_status agree_min(llmt_job *j, int64_t *v, int n)
{
    if (!j->comm || j->world <= 1)
        return LLMT_OK;
    llmt_status s =
        llmt_comm_all_reduce(j->comm, v, v, (size_t)n, LLMT_DTYPE_INT64, LLMT_REDUCE_MIN, NULL);
    if (s != LLMT_OK)
        return FAIL(s, "job: restore: agreeing on a step: %s", llmt_comm_last_error(j->comm));
    return LLMT_OK;
}

/* The committed steps, oldest first (*steps malloc'ed, NULL when none):
 * the root's, or with node-local roots the durable tier's (the parts are
 * the nodes'). */
/* The committed steps ck lists, oldest first (malloc'd; none: NULL, 0). */
static void list_steps(llmt_ckpt *ck, int64_t **steps, size_t *n)
{
    *n = 0;
    llmt_ckpt_list(ck, NULL, 0, n);
    *steps = *n ? malloc(*n * sizeof **steps) : NULL;
    if (!*steps || llmt_ckpt_list(ck, *steps, *n, n) != LLMT_OK) {
        free(*steps);
        *steps = NULL;
        *n = 0;
    }
}

static void committed_steps(llmt_job *j, int64_t **steps, size_t *n)
{
    llmt_ckpt *dk = NULL;
    *steps = NULL;
    *n = 0;
    if (j->ck->node_local && durable_handle(j, &dk) != LLMT_OK)
        return;
    list_steps(dk ? dk : j->ck, steps, n);
    llmt_ckpt_destroy(dk);
}

static int restore_peer(llmt_job *j, const int64_t *steps, size_t n);

/* The newest step ck lists (-1: none), the same on every rank (the
 * smallest of the ranks' answers). */
static int64_t newest_listed(llmt_job *j, llmt_ckpt *ck)
{
    size_t n = 0;
    int64_t *steps = NULL;
    list_steps(ck, &steps, &n);
    int64_t newest = n ? steps[n - 1] : -1;
    free(steps);
    if (agree_min(j, &newest, 1) != LLMT_OK)
        return -1;
    return newest;
}

/* The local tier restored `at` after setting newer steps aside (corrupt,
 * or unusable at open): the durable tier, which the committing rank
 * copies every step to, may hold a newer intact one (a bit flipped on
 * the local disk only), which loses fewer steps. 1: restored from it
 * (*step, note); 0: it has none newer (the local tier's `at` is in
 * place, restored again if a durable attempt touched the state); < 0:
 * failed (j->err). */
static int newer_durable(llmt_job *j, int with_data, int64_t at, int64_t *step, char *note,
                         size_t cap)
{
    llmt_ckpt *dk = NULL;
    int64_t ok = durable_handle(j, &dk) == LLMT_OK;
    if (agree_min(j, &ok, 1) != LLMT_OK || !ok || newest_listed(j, dk) <= at) {
        llmt_ckpt_destroy(dk);
        llmt__err_clear(&j->err);
        return 0;
    }
    int opened = 0;
    int64_t got = -1;
    llmt_status s = restore_from(j, dk, with_data, &got, &opened, note, cap);
    llmt_ckpt_destroy(dk);
    if (s == LLMT_OK && got > at) {
        *step = got;
        return 1;
    }
    if (opened && s != LLMT_OK)
        return -1;
    /* an older durable step, or a corrupt one partly read: `at` again */
    llmt__log(j->ctx, LLMT_LOG_WARN, "job",
              "the durable tier has no intact step newer than %lld: the local tier's",
              (long long)at);
    llmt__err_clear(&j->err);
    char moved[8];
    s = restore_from(j, j->ck, with_data, &got, &opened, moved, sizeof moved);
    if (s != LLMT_OK || got != at)
        return FAIL(s != LLMT_OK ? s : LLMT_ERR_INTERNAL,
                    "job: restore: step %lld of the local tier could not be read again "
                    "(%s)",
                    (long long)at, j->err.msg),
               -1;
    *step = at;
    return 0;
}

/* A gathered open's plan (ckpt/memtier.c): the trainer's reads, the only
 * tensors a restore reads (the rest are key/values in the manifest). */
static llmt_status plan_reads(void *arg, llmt_ckpt *ck)
{
    llmt_job *j = arg;
    llmt_status s = llmt__trainer_ckpt_plan(j->tr, ck);
    if (s != LLMT_OK) /* the open reports it */
        llmt__err_set(&ck->err, s, "%s", llmt_trainer_last_error(j->tr));
    return s;
}

/* Every rank learns the reason of the lowest rank whose read found the
 * step corrupt (mine: this rank's), as j->err (LLMT_ERR_CHECKSUM). */
static int corrupt_reason(llmt_job *j, int mine, const char *why, int64_t step)
{
    if (!j->comm || j->world <= 1) {
        FAIL(LLMT_ERR_CHECKSUM, "%s", why);
        return 0;
    }
    int32_t me = 0;
    llmt_comm_rank(j->comm, &me);
    int64_t low = mine ? me : INT64_MAX;
    int64_t said[LLMT_ERR_MSG_MAX / 8];
    memset(said, 0, sizeof said);
    if (agree_min(j, &low, 1) != LLMT_OK)
        return -1;
    if (low == me)
        snprintf((char *)said, sizeof said, "%s", why);
    llmt_status s = low >= 0 && low < j->world
                        ? llmt_comm_broadcast(j->comm, said, sizeof said / 8, LLMT_DTYPE_INT64,
                                              (int32_t)low, NULL)
                        : LLMT_ERR_INTERNAL;
    ((char *)said)[sizeof said - 1] = 0;
    if (s != LLMT_OK)
        return FAIL(s, "job: restore of step %lld: sharing why it is corrupt: %s",
                    (long long)step, llmt_comm_last_error(j->comm)),
               -1;
    FAIL(LLMT_ERR_CHECKSUM, "rank %lld: %.*s", (long long)low, LLMT_ERR_MSG_MAX - 32,
         (const char *)said);
    return 0;
}

/* Restore from the checkpoint open on j->ck (step `step`): every rank
 * restored, or none goes on. 1: restored; 0: the step's data is corrupt
 * (a checksum mismatch on some rank, no other failure on any: j->err has
 * the reason, the same on every rank); < 0: failed (j->err, on every
 * rank). */
static int restore_all(llmt_job *j, llmt_ckpt *ck, int with_data, int64_t step)
{
    llmt_status s = restore_open(j, ck, with_data);
    /* 2: restored, 1: its data corrupt, 0: failed otherwise */
    int64_t mine = s == LLMT_OK ? 2 : s == LLMT_ERR_CHECKSUM ? 1 : 0, all = mine;
    char why[LLMT_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", j->err.msg);
    if (agree_min(j, &all, 1) != LLMT_OK)
        return -1;
    if (all == 2)
        return 1;
    if (all == 1)
        return corrupt_reason(j, mine == 1, why, step);
    if (mine == 2)
        FAIL(LLMT_ERR_COMM, "job: restore of step %lld failed on another rank",
             (long long)step);
    else if (mine == 1) /* not a corruption to skip: another rank failed otherwise */
        FAIL(LLMT_ERR_COMM, "job: restore of step %lld failed on another rank (and here: %s)",
             (long long)step, why);
    else
        FAIL(s, "%s", why);
    return -1;
}

/* restore_all, with the LR the step's job.lr_mult set put back when the
 * step turns out corrupt (0), so that the next attempt starts from the
 * same state. */
static int restore_try(llmt_job *j, llmt_ckpt *ck, int with_data, int64_t step)
{
    lr_state lr = lr_save(j);
    int r = restore_all(j, ck, with_data, step);
    if (r == 0)
        lr_undo(j, &lr);
    return r;
}

/* Restore step from j->ck opened on a fast tier (`what`: the in-memory
 * snapshots, the node-local roots). Data that fails its checksums there
 * (a bit flipped in host memory or on a node's disk) is not the end: the
 * LR is put back, the reason logged, *corrupt set (the job's state is then
 * partly that step's until another restore), and 0 returned so that the
 * disk tiers decide; they hold the step too. 1: restored, < 0: failed. */
static int restore_fast(llmt_job *j, int with_data, int64_t step, const char *what,
                        int *corrupt)
{
    int r = restore_try(j, j->ck, with_data, step);
    if (r != 0)
        return r;
    *corrupt = 1;
    llmt__log(j->ctx, LLMT_LOG_WARN, "job",
              "%s: step %lld is corrupt (%s); the disk tiers decide", what, (long long)step,
              j->err.msg);
    llmt__err_clear(&j->err);
    return 0;
}

/* The memory tier: the step of the in-memory snapshots, when every rank
 * that holds one holds the same step. With several ranks each snapshot
 * holds only this rank's share (replicas' shares are saved once), so the
 * ranks open that step from all their parts gathered in memory
 * (ckpt/memtier.c); a rank without a snapshot (a promoted spare, after the
 * survivors of a failure stayed in their processes) gives its part file
 * of that step, restored from the peer tier first if lost. After a cold
 * restart no rank has a snapshot and the disk tiers decide. 1: restored
 * (*tier says from where), 0: not usable (nothing changed), < 0: failed
 * (j->err; on every rank). */
static int restore_memory(llmt_job *j, int with_data, int64_t *step, const char **tier,
                          int *peer, int *corrupt)
{
    int many = j->comm && j->world > 1;
    int64_t have = -1;
    if (j->last_saved >= 0 && many)
        have = j->last_saved; /* the step of this process's snapshot */
    else if (j->last_saved >= 0 && llmt_ckpt_open_snapshot(j->ck, &have) != LLMT_OK)
        have = -1;
    /* smallest snapshot step, -(largest), 1 if every rank has one */
    int64_t v[3] = {have >= 0 ? have : INT64_MAX, -have, have >= 0};
    if (agree_min(j, v, 3) != LLMT_OK)
        return -1;
    int64_t lo = v[0], hi = -v[1];
    if (hi < 0 || lo != hi)
        return 0;
    *peer = v[2] ? 0 : restore_peer(j, NULL, 0);
    llmt_status s = LLMT_OK;
    int mem = have == hi;
    if (many) {
        s = llmt__ckpt_open_gathered(j->ck, j->comm, hi, &mem, plan_reads, j);
        int64_t ok = s == LLMT_OK;
        if (agree_min(j, &ok, 1) != LLMT_OK)
            return -1;
        if (!ok) { /* nothing restored yet: the disk tiers decide */
            llmt__log(j->ctx, LLMT_LOG_WARN, "job", "memory tier: step %lld: %s", (long long)hi,
                      s != LLMT_OK ? llmt_ckpt_last_error(j->ck) : "failed on another rank");
            return 0;
        }
    } else if (!mem && llmt_ckpt_open_step(j->ck, hi) != LLMT_OK) {
        return FAIL(LLMT_ERR_NOT_FOUND, "job: restore: step %lld: %s", (long long)hi,
                    llmt_ckpt_last_error(j->ck)),
               -1;
    }
    *tier = mem ? "memory" : *peer ? "peer" : "local";
    int r = restore_fast(j, with_data, hi, "memory tier", corrupt);
    if (r > 0)
        *step = hi;
    return r;
}

/* The peer tier, before the local one is opened: every rank whose part of
 * the newest local step is missing (its node's disk lost) gets it back
 * from the previous rank's replica. A failure is logged and the local and
 * durable tiers decide. 1: some rank's part was restored. */
static int restore_peer(llmt_job *j, const int64_t *steps, size_t n)
{
    if (!j->peer_tier || !j->comm || j->world <= 1)
        return 0;
    int64_t *own = NULL;
    if (!steps) {
        committed_steps(j, &own, &n);
        steps = own;
    }
    /* the newest step first; an older one when the newest's replica is
     * incomplete (the partner died while writing it). Every rank makes
     * the same calls: the listing is agreed on step by step. A step of a
     * larger world: the new ranks' parts all exist (nothing to do); of a
     * smaller one: the missing parts have no replica (logged). */
    int found = 0;
    for (size_t k = 0; k < 3; k++) {
        int64_t step = k < n ? steps[n - 1 - k] : -1;
        int64_t r[2] = {step, -step};
        if (agree_min(j, r, 2) != LLMT_OK || r[0] < 0 || r[0] != -r[1])
            break;
        int32_t restored = 0;
        llmt_status s = llmt_ckpt_peer_restore(j->ck, j->comm, step, &restored);
        if (s != LLMT_OK)
            llmt__log(j->ctx, LLMT_LOG_WARN, "job", "checkpoint.tiers peer: step %lld: %s",
                      (long long)step, llmt_ckpt_last_error(j->ck));
        int64_t v[2] = {s == LLMT_OK, !restored}; /* all ok; none restored */
        if (agree_min(j, v, 2) != LLMT_OK)
            break;
        if (v[0]) {
            found = v[1] == 0;
            break;
        }
    }
    free(own);
    return found;
}

/* Node-local roots (ckpt_shared.c), before the durable tier is read: the
 * newest step the durable tier committed, from the parts on each node's
 * own root, exchanged between the ranks as the memory tier does
 * (memtier.c's gathered open; a rank whose root lacks its part, moved to
 * another node, gives the durable copy). Needs the world that saved it;
 * anything else leaves it to the durable tier. 1: restored, 0: not
 * usable, < 0: failed (j->err; on every rank). */
static int restore_node_local(llmt_job *j, int with_data, int64_t *step, int *peer,
                              int *corrupt)
{
    if (!j->ck->node_local || !j->comm || j->world <= 1)
        return 0;
    int64_t *steps = NULL;
    size_t n = 0;
    committed_steps(j, &steps, &n);
    *peer = restore_peer(j, steps, n); /* a lost node's parts from their replicas */
    int64_t newest = n ? steps[n - 1] : -1;
    free(steps);
    int64_t r[2] = {newest, -newest}; /* every rank sees the same one */
    if (agree_min(j, r, 2) != LLMT_OK)
        return -1;
    if (r[0] < 0 || r[0] != -r[1])
        return 0;
    int mem = 0;
    llmt_status s = llmt__ckpt_open_gathered(j->ck, j->comm, r[0], &mem, plan_reads, j);
    int64_t ok = s == LLMT_OK;
    if (agree_min(j, &ok, 1) != LLMT_OK)
        return -1;
    if (!ok) {
        llmt__log(j->ctx, LLMT_LOG_WARN, "job", "node-local roots: step %lld: %s",
                  (long long)r[0],
                  s != LLMT_OK ? llmt_ckpt_last_error(j->ck) : "failed on another rank");
        return 0;
    }
    int got = restore_fast(j, with_data, r[0], "node-local roots", corrupt);
    if (got > 0)
        *step = r[0];
    return got;
}

/* One line per restore: the tier read and its time (the recovery
 * benchmark, bench/ft, reads it). From the ranks' parts held in memory
 * (`gathered`, memtier.c), also the bytes this rank received of them and
 * every part's bytes together: what the exchange saved. */
static void restore_line(llmt_job *j, const char *tier, int64_t step, double t0, int peer,
                         int gathered)
{
    j->restore_tier = tier;
    j->restore_s = llmt__job_now() - t0;
    char moved[96] = "";
    if (gathered) {
        uint64_t got = 0, all = 0;
        llmt__ckpt_gathered_bytes(j->ck, &got, &all);
        snprintf(moved, sizeof moved, ",\"fetched_bytes\":%llu,\"parts_bytes\":%llu",
                 (unsigned long long)got, (unsigned long long)all);
    }
    llmt__job_metrics_line(j,
                           "{\"event\":\"restore\",\"tier\":\"%s\",\"step\":%lld,"
                           "\"restore_s\":%.6f,\"peer_restored\":%s,\"gen\":%d%s}",
                           tier, (long long)step, j->restore_s, peer ? "true" : "false",
                           j->launch_gen, moved);
    llmt__log(j->ctx, LLMT_LOG_INFO, "job", "restored step %lld from the %s tier in %.3f s",
              (long long)step, tier, j->restore_s);
}

llmt_status llmt__job_restore(llmt_job *j, int with_data, int64_t *step)
{
    *step = -1;
    llmt__job_sdc_base_drop(j); /* the state the SDC window replays from is gone */
    double t0 = llmt__job_now();
    llmt_status s = llmt_ckpt_wait(j->ck, -1);
    if (s != LLMT_OK) /* a failed async save leaves no step behind */
        llmt__log(j->ctx, LLMT_LOG_WARN, "job", "the last save failed: %s",
                  llmt_ckpt_last_error(j->ck));
    const char *tier = "memory";
    int peer = 0, fast_corrupt = 0; /* a fast tier's copy failed its checksums */
    int mem = restore_memory(j, with_data, step, &tier, &peer, &fast_corrupt);
    if (mem < 0)
        return j->err.status ? j->err.status : LLMT_ERR_INTERNAL;
    if (mem > 0) {
        snprintf(j->resume_note, sizeof j->resume_note, "step %lld from the %s tier",
                 (long long)*step, tier);
        restore_line(j, tier, *step, t0, peer, j->comm && j->world > 1);
        return llmt__job_quarantine(j, *step);
    }
    /* a node-local root holds parts, never a commit: the durable tier has
     * every committed step, and the nodes' roots its parts */
    int node_local = j->ck->node_local;
    int nl = restore_node_local(j, with_data, step, &peer, &fast_corrupt);
    if (nl < 0)
        return j->err.status ? j->err.status : LLMT_ERR_INTERNAL;
    if (nl > 0) {
        snprintf(j->resume_note, sizeof j->resume_note,
                 "step %lld from the nodes' own roots (committed in the durable tier %.300s)%s",
                 (long long)*step, j->durable_dir,
                 peer ? "; lost parts restored from the peer tier" : "");
        restore_line(j, "node-local", *step, t0, peer, 1);
        return llmt__job_quarantine(j, *step);
    }
    if (!node_local)
        peer = restore_peer(j, NULL, 0);
    size_t nlocal = 0, ndurable = 0;
    if (!node_local)
        llmt_ckpt_list(j->ck, NULL, 0, &nlocal);
    int opened = 0;
    char moved[512] = ""; /* the corrupt steps quarantined, for the resume note */
    /* only a durable tier can offer a newer step than the local one */
    int64_t newest_local = node_local || !j->durable_dir[0] ? -1 : newest_listed(j, j->ck);
    s = node_local ? LLMT_ERR_NOT_FOUND
                   : restore_from(j, j->ck, with_data, step, &opened, moved, sizeof moved);
    if (s == LLMT_OK && *step < newest_local && j->durable_dir[0]) {
        char dnote[512] = "";
        int64_t at = *step;
        int r = newer_durable(j, with_data, at, step, dnote, sizeof dnote);
        if (r < 0)
            return j->err.status ? j->err.status : LLMT_ERR_INTERNAL;
        if (r > 0) {
            snprintf(j->resume_note, sizeof j->resume_note,
                     "the durable tier %.300s at step %lld (the local tier's newer steps "
                     "were unusable; it had %lld)%s%s",
                     j->durable_dir, (long long)*step, (long long)at, moved, dnote);
            restore_line(j, "durable", *step, t0, peer, 0);
            return llmt__job_quarantine(j, *step);
        }
    }
    /* no step usable, and a corrupt one was partly read into the job */
    int partly = (!opened && s == LLMT_ERR_CHECKSUM) || fast_corrupt;
    if (node_local)
        llmt__err_set(&j->ck->err, s, "node-local (its steps commit in the durable tier)");
    if (opened && s != LLMT_OK)
        return s; /* a checkpoint opened but could not be used: say so */
    if (s == LLMT_OK) {
        snprintf(j->resume_note, sizeof j->resume_note, "%s at step %lld%s%s", j->ckpt_dir,
                 (long long)*step, peer ? " (lost parts restored from the peer tier)" : "",
                 moved);
        restore_line(j, peer ? "peer" : "local", *step, t0, peer, 0);
        return llmt__job_quarantine(j, *step);
    }
    char why_local[LLMT_ERR_MSG_MAX];
    snprintf(why_local, sizeof why_local, "%s", llmt_ckpt_last_error(j->ck));
    char why_durable[LLMT_ERR_MSG_MAX] = "";
    if (j->durable_dir[0]) {
        /* the local tier is gone (a replaced node) or unusable: the durable
         * copy has every committed step, with the same format */
        llmt_ckpt *dk = NULL;
        s = durable_handle(j, &dk);
        int64_t all = s == LLMT_OK; /* restore_from is collective: all or none */
        if (agree_min(j, &all, 1) != LLMT_OK)
            all = 0;
        if (s == LLMT_OK && !all) {
            llmt_ckpt_destroy(dk);
            dk = NULL;
            s = LLMT_ERR_IO;
            snprintf(why_durable, sizeof why_durable,
                     "the durable tier could not be opened on another rank");
        } else if (s != LLMT_OK) {
            snprintf(why_durable, sizeof why_durable, "%s", llmt_context_last_error(j->ctx));
        }
        if (s == LLMT_OK) {
            llmt_ckpt_list(dk, NULL, 0, &ndurable);
            s = restore_from(j, dk, with_data, step, &opened, moved, sizeof moved);
            partly |= !opened && s == LLMT_ERR_CHECKSUM;
            snprintf(why_durable, sizeof why_durable, "%s", llmt_ckpt_last_error(dk));
        }
        llmt_ckpt_destroy(dk);
        if (s == LLMT_OK) {
            snprintf(j->resume_note, sizeof j->resume_note,
                     "the durable tier %.300s at step %lld (local tier %.300s: %.400s)%s",
                     j->durable_dir, (long long)*step, j->ckpt_dir, why_local, moved);
            restore_line(j, "durable", *step, t0, peer, 0);
            /* local steps newer than the durable one are unusable: aside */
            return llmt__job_quarantine(j, *step);
        }
        if (opened && s != LLMT_OK)
            return s;
    }
    *step = -1;
    if (nlocal == 0 && ndurable == 0) {
        llmt__err_clear(&j->err);
        return LLMT_OK; /* nothing was ever saved */
    }
    /* LLMT_ERR_CHECKSUM: the job's state is partly a corrupt step's
     * (begin() in job.c does not start from step 0 with it) */
    s = partly ? LLMT_ERR_CHECKSUM : LLMT_ERR_NOT_FOUND;
    if (j->durable_dir[0])
        return FAIL(s, "no usable checkpoint: local tier: %s; durable tier: %s", why_local,
                    why_durable);
    return FAIL(s, "no usable checkpoint: %s", why_local);
}
