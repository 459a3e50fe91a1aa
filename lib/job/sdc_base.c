/* The base of the ZeRO-3 window replay (fault_tolerance.sdc_replay
 * "window", the default): the newest state that passed a check, or the
 * state the run started from.
 *
 * The window replay runs every step since its base again and compares
 * each rank's shares' hash with the first result (sdc_shares.c). A base
 * that is merely the newest save trusts whatever went wrong before that
 * save: with a save between two checks (checkpoint.interval not a multiple
 * of sdc_interval) a flip before it was replayed too and not seen, and
 * before the first save there was nothing to replay from. So the base is
 * taken at the start of the step after each check (the state the check
 * passed, or the one its replay repaired) and at the start of the run:
 * this rank's shares (sdc_step.c's copy, three floats per element it
 * owns), the trainer's step and the loader's position. Every step is then
 * covered by the check after it, saves or not, and the replay reads no
 * checkpoint (the memory tier's restore gathered every rank's parts over
 * the network).
 *
 * A state the job did not reach by its own steps since the base is one a
 * replay from it cannot reproduce: a restore (rollback, in-place recovery,
 * resume) drops the base, and so do an anomaly's action (a skipped step, a
 * lowered learning rate) and a step the hook did not see; the next step's
 * start takes a new one from the state as it is, trusted as a restored
 * snapshot is. */
#include <string.h>

#include "job/job.h"
#include "train/trainer_state.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

/* Where the window replays from a base (sdc_shares.c checks there). */
static int wanted(llmt_job *j)
{
    const llmt_spec *sp = j->spec;
    return sp->fault_tolerance.sdc_interval > 0 && sp->parallelism.zero >= 3 &&
           sp->fault_tolerance.sdc_replay != LLMT_SPEC_SDC_STEP && j->comm && j->world >= 2 &&
           j->to.deterministic && llmt__trainer_host_resident(j->tr);
}

llmt_status llmt__job_sdc_base(llmt_job *j, int64_t start)
{
    if (!wanted(j))
        return LLMT_OK;
    if (j->sdc_base_ok && j->sdc_base_next == start && j->sdc_base_anom == j->anomalies) {
        j->sdc_base_next = start + 1; /* the job's own step from the base */
        return LLMT_OK;
    }
    double t0 = llmt__job_now();
    j->sdc_base_ok = 0;
    llmt_status s = llmt__job_shares_keep(j);
    if (s != LLMT_OK)
        return s;
    memset(&j->sdc_base_data, 0, sizeof j->sdc_base_data);
    j->sdc_base_data.struct_size = sizeof j->sdc_base_data;
    if ((s = llmt_loader_get_state(j->data.loader, &j->sdc_base_data)) != LLMT_OK)
        return FAIL(s,
                    "sdc: the loader's position at step %lld, which the check replays from: %s",
                    (long long)start, llmt_loader_last_error(j->data.loader));
    if ((s = llmt_trainer_get_step(j->tr, &j->sdc_base_tstep)) != LLMT_OK)
        return FAIL(s, "sdc: the trainer's step at step %lld: %s", (long long)start,
                    llmt_trainer_last_error(j->tr));
    j->sdc_base_at = start;
    j->sdc_base_next = start + 1;
    j->sdc_base_anom = j->anomalies;
    j->sdc_base_ok = 1;
    j->gp_checks_s += llmt__job_now() - t0;
    return LLMT_OK;
}

void llmt__job_sdc_base_drop(llmt_job *j)
{
    j->sdc_base_ok = 0;
}

llmt_status llmt__job_sdc_base_replay(llmt_job *j, int64_t step, int64_t *from)
{
    *from = -1;
    /* an anomaly's action in this step (a spike's lowered LR) changed what
     * the steps since the base compute: not a replay of them */
    int ok = j->sdc_base_ok && j->sdc_base_anom == j->anomalies;
    /* the replay is collective: every rank must run the same steps, so
     * the ranks agree on their bases' step first (min and -max) */
    int64_t v[2] = {ok ? j->sdc_base_at : -1, ok ? -j->sdc_base_at : 1};
    llmt_status s =
        llmt_comm_all_reduce(j->comm, v, v, 2, LLMT_DTYPE_INT64, LLMT_REDUCE_MIN, NULL);
    if (s != LLMT_OK)
        return FAIL(s, "sdc: agreeing on the step the check of step %lld replays from: %s",
                    (long long)step, llmt_comm_last_error(j->comm));
    j->sdc_base_ok = 0; /* the next step's start takes the state after this check */
    if (v[0] < 0 || v[0] != -v[1]) {
        if (v[0] != -v[1] && v[1] <= 0)
            llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                      "sdc: the ranks hold checked states of steps %lld to %lld: step %lld "
                      "cannot be replayed alike",
                      (long long)(v[0] < 0 ? -1 : v[0]), (long long)-v[1], (long long)step);
        return LLMT_OK; /* the caller says the check was not made */
    }
    if ((s = llmt__job_shares_put(j)) == LLMT_OK)
        s = llmt_trainer_set_step(j->tr, j->sdc_base_tstep);
    if (s != LLMT_OK)
        return FAIL(
            s, "sdc: back to the checked state of step %lld for the check of step %lld: %s",
            (long long)j->sdc_base_at, (long long)step, llmt_trainer_last_error(j->tr));
    if ((s = llmt_loader_set_state(j->data.loader, &j->sdc_base_data)) != LLMT_OK)
        return FAIL(s, "sdc: the loader back to step %lld for the check of step %lld: %s",
                    (long long)j->sdc_base_at, (long long)step,
                    llmt_loader_last_error(j->data.loader));
    *from = j->sdc_base_at;
    return LLMT_OK;
}
