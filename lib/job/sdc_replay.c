/* Deterministic replay of a silent-data-corruption disagreement.
 *
 * The hash check (detect.c) sees that replicas differ, and a majority
 * names the odd one out; two replicas have no majority, and a majority
 * says nothing about whether the odd result came from a transient fault
 * or from its input. In deterministic mode (train.deterministic) a step is
 * a pure function of the state and the batch, so it can be run again:
 * every rank (the data-parallel reductions need all of them) restores the
 * newest snapshot with its loader cursor, runs the steps up to the check
 * again with the same batches (no saves, checks or injected faults) and
 * hashes its parameters again. A rank whose replayed hash differs from
 * its own original one produced a result that is not reproducible: that
 * rank is named. When the replays agree the run goes on from them (the
 * corrupted result is gone); when they do not, the anomaly policy
 * decides, as without a replay. The replay trusts the snapshot: the
 * corruption must be newer than the newest save (it is, when the check
 * runs at least once per checkpoint interval, or the save of a corrupted
 * replica would have been caught earlier). Under ZeRO-3, where every check
 * replays, "window" (fault_tolerance.sdc_replay's default) replays from
 * the newest state that passed a check instead (sdc_base.c), so a save
 * between checks hides nothing; "step" replays the check step alone from
 * the copy taken before it (sdc_step.c): cheaper, but blind to what went
 * wrong before that copy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/job.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

int32_t llmt__job_sdc_replay_line(llmt_job *j, int64_t step, int64_t from, const uint64_t *orig,
                                  const uint64_t *rep, int agree, const char *action,
                                  char *brief, size_t cap)
{
    /* whole arrays at any world size: 16 hex digits a rank, so a fixed
     * buffer cut the hashes above ~200 ranks and the list above ~100 */
    llmt__sbuf bad = {0}, oh = {0}, rh = {0};
    uint8_t *diff = malloc(j->world > 0 ? (size_t)j->world : 1);
    int32_t n = -1;
    brief[0] = 0;
    if (diff) {
        for (int32_t r = 0; r < j->world; r++)
            diff[r] = orig[r] != rep[r];
        n = llmt__job_rank_list(&bad, diff, j->world);
        llmt__job_hex_list(&oh, orig, j->world);
        llmt__job_hex_list(&rh, rep, j->world);
    }
    free(diff);
    if (!diff || bad.oom || oh.oom || rh.oom) {
        n = -1;
    } else {
        llmt__job_metrics_line(j,
                               "{\"event\":\"sdc_replay\",\"step\":%lld,\"from\":%lld,"
                               "\"not_reproducible\":[%s],\"agree\":%s,\"action\":\"%s\","
                               "\"xxh\":[%s],\"replay_xxh\":[%s]}",
                               (long long)step, (long long)from, bad.p ? bad.p : "",
                               agree ? "true" : "false", action, oh.p ? oh.p : "",
                               rh.p ? rh.p : "");
        llmt__job_list_brief(brief, cap, bad.p, 32);
    }
    free(bad.p);
    free(oh.p);
    free(rh.p);
    return n;
}

llmt_status llmt__job_sdc_replay(llmt_job *j, int64_t step, const uint64_t *orig, int *handled,
                                 int *nbad, int64_t *fromp)
{
    *handled = *nbad = 0;
    *fromp = -1;
    if (!j->to.deterministic || !j->comm)
        return LLMT_OK;
    /* ZeRO-3: each rank's own shares (sdc_shares.c), no replicas */
    int shares = j->spec->parallelism.zero >= 3;
    int64_t from = -1;
    /* sdc_replay step (ZeRO-3 only, refuse.c): the check step from the
     * copy taken before it (sdc_step.c); window: under ZeRO-3 the steps
     * since the newest checked state (sdc_base.c), under zero 0-2 (a
     * disagreement between replicas) those since the newest snapshot of
     * the memory tier */
    int one = shares && j->spec->fault_tolerance.sdc_replay == LLMT_SPEC_SDC_STEP;
    llmt_status s = one      ? llmt__job_sdc_step_replay(j, step, &from)
                    : shares ? llmt__job_sdc_base_replay(j, step, &from)
                             : llmt__job_restore(j, 1, &from);
    if (s != LLMT_OK)
        return s;
    *fromp = from;
    if (from < 0 || from >= step) /* nothing to replay from: the policy decides */
        return LLMT_OK;
    llmt_batch b = {sizeof b, j->in, j->tg, j->to.micro_batch * j->to.grad_accum,
                    j->to.seq_len};
    for (int64_t t = from + 1; !one && t <= step; t++) {
        if ((s = llmt__job_data_next(j, &j->data, j->in, j->tg)) != LLMT_OK)
            return s;
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        if ((s = llmt_trainer_step(j->tr, &b, &met)) != LLMT_OK)
            return FAIL(s, "sdc: replay of step %lld from step %lld: %s", (long long)t,
                        (long long)from, llmt_trainer_last_error(j->tr));
    }
    uint64_t mine = 0, *rep = NULL;
    if ((s = llmt__job_hashes(j, shares, 1, &mine, &rep)) != LLMT_OK)
        return s;
    /* the replays agree when every replica group's do (the groups hold
     * different shards under tensor or pipeline parallelism) */
    const int32_t *grp = llmt__job_replica_groups(j);
    if (!grp) {
        free(rep);
        return FAIL(LLMT_ERR_OUT_OF_MEMORY, "sdc: replay: no memory");
    }
    int agree = 1;
    for (int32_t r = 1; r < j->world && !shares; r++) {
        int32_t q = 0; /* the first rank of r's group */
        while (grp[q] != grp[r])
            q++;
        agree &= rep[r] == rep[q];
    }
    for (int32_t r = 0; r < j->world; r++)
        *nbad += rep[r] != orig[r];
    j->gp_cycle_from = 0;   /* the replay is not the next step's work */
    if (shares && !*nbad) { /* the routine ZeRO-3 check found nothing: sdc_shares.c's line */
        free(rep);
        *handled = 1;
        return LLMT_OK;
    }
    int stop = j->spec->fault_tolerance.anomaly.policy == LLMT_SPEC_ANOMALY_STOP;
    const char *action = !agree ? "policy" : stop ? "stop" : "replayed";
    char bad[320];
    int32_t nl =
        llmt__job_sdc_replay_line(j, step, from, orig, rep, agree, action, bad, sizeof bad);
    free(rep);
    /* no line without memory for it, but no return either: every other
     * rank goes on to the policy's collectives or the next step */
    if (nl < 0) {
        llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                  "metrics: no memory for the replay's line of %d ranks' hashes at step "
                  "%lld: the sdc_replay line is not written",
                  (int)j->world, (long long)step);
        if (*nbad)
            snprintf(bad, sizeof bad, "%d rank(s) (no memory for their list)", *nbad);
    }
    llmt__log(j->ctx, LLMT_LOG_WARN, "job",
              "sdc: step %lld replayed from the %s of step %lld on every rank: %s%s%s",
              (long long)step, shares && !one ? "checked state" : "snapshot", (long long)from,
              bad[0] ? "the result of rank(s) " : "every rank's result reproduced",
              bad[0] ? bad : "", bad[0] ? " is not reproducible" : "");
    if (!agree) /* not reproducible anywhere alike: the policy acts on this state */
        return LLMT_OK;
    *handled = 1;
    if (stop)
        return FAIL(
            LLMT_ERR_NUMERIC,
            "sdc: silent data corruption at step %lld: the result of rank(s) %s is not "
            "reproducible (replayed from step %lld; fault_tolerance.anomaly.policy stop)",
            (long long)step, bad[0] ? bad : "none", (long long)from);
    return LLMT_OK;
}
