/* The copies the ZeRO-3 silent-data-corruption check replays from: this
 * rank's shares of the parameters and of both AdamW moments (three floats
 * per element it owns), kept here (shares_keep) and put back (shares_put)
 * for both values of fault_tolerance.sdc_replay; and the one-step
 * snapshot of "step" (the default "window" replays from the newest checked
 * state instead, sdc_base.c, with the same copy).
 *
 * Under ZeRO-3 the check replays (sdc_shares.c): each rank computes its
 * shares again and compares their hash with the first result. The window
 * replay runs every step since the newest checked state again (sdc_interval
 * steps per check). Before a check step, with "step", this rank copies
 * what the step changes and reads: its shares, the trainer's step (the
 * schedule follows from it) and the step's batch. The replay puts them
 * back and runs that one step: 1/sdc_interval of the steps run twice.
 *
 * What it covers: the check step's computation (a unit that errs again
 * and again is caught at the next check; sdc_interval 1 checks every
 * step). A transient error in a step between two checks, or a flip in
 * memory between steps, is in the snapshot and is not seen: the window
 * replay (sdc_replay "window", the default) sees those, at the price of
 * running every step twice (doc/fault-tolerance.md, "Deterministic SDC
 * replay").
 *
 * Taken before the step's injected faults (fault.c), so a drill's flip in
 * the step is the corruption the replay must not reproduce. Only where the
 * check hashes shares: the engine trains the host tensors in place (the
 * fp32 CPU engine, tp 1, pp 1; refuse.c and sdc_shares.c refuse the
 * rest), so the shares are host memory the copy can read and write. */
#include <stdlib.h>
#include <string.h>

#include "job/job.h"
#include "train/trainer_state.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

/* Copy this rank's shares of every parameter into (dir 0) or out of
 * (dir 1) the snapshot; the count of floats a copy needs. */
static size_t shares_copy(llmt_job *j, float *snap, int dir)
{
    int32_t n = 0;
    size_t at = 0;
    llmt_model_param_count(j->model, &n, NULL);
    for (int32_t i = 0; i < n; i++) {
        int64_t rel = 0, cnt = 0;
        float *p[3] = {NULL, NULL, NULL};
        llmt__trainer_share(j->tr, i, &rel, &cnt, p);
        for (int k = 0; k < 3 && cnt > 0; k++) {
            if (!p[k])
                continue;
            if (snap && dir == 0)
                memcpy(snap + at, p[k], (size_t)cnt * sizeof(float));
            else if (snap)
                memcpy(p[k], snap + at, (size_t)cnt * sizeof(float));
            at += (size_t)cnt;
        }
    }
    return at;
}

/* The copy's two buffers, grown to this rank's shares and the step's
 * batch (need: the floats of its shares). */
static llmt_status snap_grow(llmt_job *j, size_t need)
{
    size_t batch = (size_t)j->to.micro_batch * j->to.grad_accum * j->to.seq_len;
    if (need <= j->sdc_snap_cap && j->sdc_snap_in)
        return LLMT_OK;
    free(j->sdc_snap);
    free(j->sdc_snap_in);
    j->sdc_snap = malloc((need ? need : 1) * sizeof *j->sdc_snap);
    j->sdc_snap_in = malloc(2 * batch * sizeof *j->sdc_snap_in);
    j->sdc_snap_cap = j->sdc_snap && j->sdc_snap_in ? need : 0;
    if (!j->sdc_snap || !j->sdc_snap_in) /* both: the snapshot copies the batch too */
        return FAIL(LLMT_ERR_OUT_OF_MEMORY,
                    "fault_tolerance.sdc_interval: no memory for the copy of this "
                    "rank's shares the check replays from (%zu floats)",
                    need);
    return LLMT_OK;
}

llmt_status llmt__job_shares_reserve(llmt_job *j)
{
    const llmt_spec *sp = j->spec;
    if (sp->fault_tolerance.sdc_interval <= 0 || sp->parallelism.zero < 3 || !j->comm ||
        j->world < 2 || !j->to.deterministic || !llmt__trainer_host_resident(j->tr))
        return LLMT_OK;
    return snap_grow(j, shares_copy(j, NULL, 0));
}

llmt_status llmt__job_shares_keep(llmt_job *j)
{
    llmt_status s = snap_grow(j, shares_copy(j, NULL, 0));
    if (s != LLMT_OK)
        return s;
    shares_copy(j, j->sdc_snap, 0);
    return LLMT_OK;
}

llmt_status llmt__job_shares_put(llmt_job *j)
{
    /* as a checkpoint's read does: the host copies current, written,
     * then taken up by the engine and data parallelism (collective:
     * every rank replays) */
    llmt_status s = llmt__trainer_host_sync(j->tr);
    if (s == LLMT_OK) {
        shares_copy(j, j->sdc_snap, 1);
        s = llmt__trainer_params_written(j->tr, 0);
    }
    return s;
}

llmt_status llmt__job_sdc_snap(llmt_job *j, int64_t step)
{
    int64_t every = j->spec->fault_tolerance.sdc_interval;
    j->sdc_snap_for = -1;
    if (every <= 0 || step % every || j->spec->parallelism.zero < 3 ||
        j->spec->fault_tolerance.sdc_replay != LLMT_SPEC_SDC_STEP || !j->comm || j->world < 2 ||
        !j->to.deterministic || !llmt__trainer_host_resident(j->tr))
        return LLMT_OK;
    double t0 = llmt__job_now();
    llmt_status s = llmt__job_shares_keep(j);
    if (s != LLMT_OK)
        return s;
    size_t batch = (size_t)j->to.micro_batch * j->to.grad_accum * j->to.seq_len;
    memcpy(j->sdc_snap_in, j->in, batch * sizeof *j->in);
    memcpy(j->sdc_snap_in + batch, j->tg, batch * sizeof *j->tg);
    llmt_trainer_get_step(j->tr, &j->sdc_snap_step);
    j->sdc_snap_for = step;
    j->sdc_snap_anom = j->anomalies;
    j->gp_checks_s += llmt__job_now() - t0;
    return LLMT_OK;
}

llmt_status llmt__job_sdc_step_replay(llmt_job *j, int64_t step, int64_t *from)
{
    *from = -1;
    if (j->sdc_snap_for != step)
        return LLMT_OK; /* no snapshot of this step: the caller says so */
    j->sdc_snap_for = -1;
    /* an anomaly's action in this step (a spike's lowered LR) changed what
     * it computed after the copy was taken: a replay would differ on every
     * rank, a false alarm (seen: both ranks named at a lower_lr step), so
     * the check is not made; the ranks agree, as the replay is collective */
    int64_t same = j->sdc_snap_anom == j->anomalies;
    llmt_status s =
        llmt_comm_all_reduce(j->comm, &same, &same, 1, LLMT_DTYPE_INT64, LLMT_REDUCE_MIN, NULL);
    if (s != LLMT_OK)
        return FAIL(s, "sdc: agreeing whether step %lld can be replayed: %s", (long long)step,
                    llmt_comm_last_error(j->comm));
    if (!same)
        return LLMT_OK; /* the caller says the check was not made */
    s = llmt__job_shares_put(j);
    if (s == LLMT_OK)
        s = llmt_trainer_set_step(j->tr, j->sdc_snap_step);
    if (s != LLMT_OK)
        return FAIL(s, "sdc: rewinding to the snapshot before step %lld: %s", (long long)step,
                    llmt_trainer_last_error(j->tr));
    size_t batch = (size_t)j->to.micro_batch * j->to.grad_accum * j->to.seq_len;
    llmt_batch b = {sizeof b, j->sdc_snap_in, j->sdc_snap_in + batch,
                    j->to.micro_batch * j->to.grad_accum, j->to.seq_len};
    llmt_step_metrics met;
    memset(&met, 0, sizeof met);
    met.struct_size = sizeof met;
    if ((s = llmt_trainer_step(j->tr, &b, &met)) != LLMT_OK)
        return FAIL(s, "sdc: replay of step %lld: %s", (long long)step,
                    llmt_trainer_last_error(j->tr));
    *from = j->sdc_snap_step;
    return LLMT_OK;
}

void llmt__job_sdc_free(llmt_job *j)
{
    free(j->sdc_snap);
    free(j->sdc_snap_in);
    j->sdc_snap = NULL;
    j->sdc_snap_in = NULL;
    j->sdc_snap_cap = 0;
    j->sdc_snap_for = -1;
    llmt__job_replica_forget(j);
}
