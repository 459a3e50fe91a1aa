/* The silent-data-corruption check under ZeRO-3.
 *
 * Under ZeRO 0-2 every data-parallel rank holds the whole parameters, so
 * replicas can be compared (detect.c). Under ZeRO-3 no two ranks hold the
 * same thing: each owns a share of every parameter and of its AdamW
 * moments, updates it alone, and the others only gather it for a forward.
 * A flipped bit in an owner's share is gathered by every rank alike, so
 * no comparison between ranks can see it; what can is the owner computing
 * the same share again. In deterministic mode (train.deterministic) a
 * step is a pure function of the state and the batch, so every
 * fault_tolerance.sdc_interval steps each rank hashes its shares
 * (parameters, m and v), every rank replays (sdc_replay.c), and a rank
 * whose shares do not hash the same again computed a result that does not
 * reproduce: it is named, and the run goes on from the replay (the
 * corrupted result is gone).
 *
 * The price is the replay, and fault_tolerance.sdc_replay chooses it:
 * "window" (default) runs again every step since the newest state that
 * passed a check (or the run's start: sdc_base.c), so a flip in memory or
 * a transient error in any step since the previous check is seen (every
 * step twice); "step" runs the check step alone from a copy taken before it
 * (sdc_step.c): one step in sdc_interval twice, but what went wrong before
 * that copy is in it and is not seen (doc/fault-tolerance.md). The shares
 * are read where the engine trains the host tensors in place (the fp32
 * CPU engine without tensor or pipeline parallelism); refuse.c refuses
 * the other layouts. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "job/job.h"
#include "train/trainer_state.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

/* Parameter i's shares on this rank: the parameters, m and v. */
static llmt_status share_part(llmt_job *j, int32_t i, XXH64_state_t *h)
{
    int64_t rel = 0, cnt = 0;
    float *p[3] = {NULL, NULL, NULL};
    llmt__trainer_share(j->tr, i, &rel, &cnt, p);
    for (int k = 0; k < 3 && cnt > 0; k++)
        if (p[k])
            XXH64_update(h, p[k], (size_t)cnt * sizeof(float));
    return LLMT_OK;
}

llmt_status llmt__job_shares_hash(llmt_job *j, uint64_t *out)
{
    *out = 0;
    if (!llmt__trainer_host_resident(j->tr))
        return FAIL(
            LLMT_ERR_UNSUPPORTED,
            "fault_tolerance.sdc_interval: under parallelism.zero 3 the check hashes "
            "each rank's shares on the host, and this engine trains its own copy "
            "(tensor or pipeline parallelism, bf16 or the GPU): use the fp32 cpu engine "
            "with tp 1 and pp 1, zero 0-2, or remove the key");
    return llmt__job_xxh_walk(j, share_part, out);
}

llmt_status llmt__job_sdc_shares(llmt_job *j, int64_t step, llmt_job_metrics *m)
{
    double t0 = llmt__job_now();
    uint64_t mine = 0, *all = NULL;
    llmt_status s = llmt__job_hashes(j, 1, 1, &mine, &all);
    if (s != LLMT_OK)
        return s;
    int replayed = 0, nbad = 0;
    int64_t from = -1;
    s = llmt__job_sdc_replay(j, step, all, &replayed, &nbad, &from);
    free(all);
    if (s != LLMT_OK)
        return s;
    j->gp_checks_s += llmt__job_now() - t0;
    if (from < 0 || from >= step) {
        /* nothing to replay from (no snapshot before this step): this
         * check could not be made, and the line says so */
        if (j->spec->fault_tolerance.sdc_replay == LLMT_SPEC_SDC_STEP)
            llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                      "sdc: step %lld not checked: under parallelism.zero 3 with "
                      "fault_tolerance.sdc_replay step the check replays the step from a "
                      "copy taken before it, and none was",
                      (long long)step);
        else
            llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                      "sdc: step %lld not checked: under parallelism.zero 3 the check replays "
                      "the steps since the newest checked state, and the ranks hold none "
                      "alike, or an anomaly's action in this step changed what those steps "
                      "compute (the next check replays from this step)",
                      (long long)step);
        llmt__job_metrics_line(j,
                               "{\"event\":\"sdc\",\"step\":%lld,\"checked\":false,"
                               "\"why\":\"no %s before this step to replay from\"}",
                               (long long)step,
                               j->spec->fault_tolerance.sdc_replay == LLMT_SPEC_SDC_STEP
                                   ? "snapshot"
                                   : "checked state");
        return LLMT_OK;
    }
    j->sdc_checks++;
    if (!nbad) {
        llmt__job_metrics_line(j,
                               "{\"event\":\"sdc\",\"step\":%lld,\"ok\":true,\"ranks\":%d,"
                               "\"shares\":true,\"replayed_from\":%lld,\"xxh\":\"%016llx\"}",
                               (long long)step, (int)j->world, (long long)from,
                               (unsigned long long)mine);
        return LLMT_OK;
    }
    /* the replay named the ranks (its "sdc_replay" line) and, policy stop
     * aside, the run goes on from its result */
    j->sdc_mismatches++;
    j->anomalies++;
    m->events |= LLMT_JOB_EVENT_ANOMALY;
    llmt__job_metrics_line(j,
                           "{\"event\":\"sdc\",\"step\":%lld,\"ok\":false,\"ranks\":%d,"
                           "\"shares\":true,\"not_reproducible\":%d,\"action\":\"replayed\","
                           "\"replayed_from\":%lld}",
                           (long long)step, (int)j->world, nbad, (long long)from);
    return replayed ? LLMT_OK
                    : FAIL(LLMT_ERR_INTERNAL,
                           "sdc: the replay of step %lld did not "
                           "complete",
                           (long long)step);
}
