/* In-place recovery (issue 19): the survivors of a failure stay in their
 * processes. A cold gang restart throws away every survivor's state (its
 * in-memory snapshot, the loaded data, the process start); here only the
 * dead rank is replaced. The protocol with `llmtrain launch --in-place`
 * is two things in the agent's directory (doc/fault-tolerance.md):
 *   - $LLMT_LAUNCH_INPLACE names a file the agent rewrites atomically
 *     with "GEN WORLD" when it has promoted a spare for a dead rank;
 *   - the Gloo store ($LLMT_COMM_STORE) with the prefix "genGEN", where
 *     the survivors (same ranks) and the spare (the dead rank's rank,
 *     started with --resume) meet.
 * A survivor whose step failed with a communication error aborts its
 * communicator, waits for a newer generation, makes the communicator and
 * the trainer again and restores the newest step every rank holds:
 * its own snapshot (memory tier); the spare reads that step from disk
 * (ckpt.c, restore_memory). Both sides then make the same collective
 * calls in the same order (groups, restore, quarantine barrier), which is
 * why the survivors reuse the creation's own functions. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "job/job.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

int llmt__job_inplace_wanted(const llmt_job *j, llmt_status failed)
{
    const char *p = getenv("LLMT_LAUNCH_INPLACE");
    if (!p || !*p || !getenv("LLMT_COMM_STORE") || !j->comm || !j->own_comm)
        return 0;
    /* an auto interval is decided by a collective on the first step: a
     * spare would make it alone */
    if (j->ckpt_auto)
        return 0;
    return failed == LLMT_ERR_COMM || failed == LLMT_ERR_TIMEOUT || failed == LLMT_ERR_ABORTED;
}

/* The agent's newest generation and world size; 0 when not readable. */
static int read_gen(const char *path, int *gen, int *world)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = fscanf(f, "%d %d", gen, world);
    fclose(f);
    return n == 2;
}

static void drop_comms(llmt_job *j)
{
    llmt_comm_abort(j->comm); /* never blocks; the peers see it too */
    /* NCCL: ncclCommAbort, so that no kernel waits for the dead peer;
     * the next generation makes a twin with a new unique id */
    if (j->dp_dev_comm)
        llmt_comm_abort(j->dp_dev_comm);
    llmt_trainer_destroy(j->tr); /* before its communicators */
    j->tr = NULL;
    llmt_comm_destroy(j->dp_dev_comm);
    j->dp_dev_comm = NULL;
    if (j->dp_comm != j->comm)
        llmt_comm_destroy(j->dp_comm);
    llmt_comm_destroy(j->tp_comm);
    llmt_comm_destroy(j->ep_comm);
    j->ep_comm = NULL;
    llmt_comm_destroy(j->cp_comm);
    /* the pipeline's sends still posted when the step failed stay with
     * the trainer's send pool, which leaves their buffers to the aborted
     * communicator (pp_send.c): destroyed here, the next generation's
     * trainer posts its own */
    llmt_comm_destroy(j->pp_comm);
    llmt_comm_destroy(j->comm);
    j->comm = j->dp_comm = j->tp_comm = j->cp_comm = j->pp_comm = NULL;
    for (int g = 0; g < LLMT_JOB_GROUPS; g++)
        j->group_comm[g] = NULL;
    llmt__job_replica_forget(j); /* made again for the next generation's groups */
}

llmt_status llmt__job_inplace_recover(llmt_job *j, llmt_job_metrics *m)
{
    double t0 = llmt__job_now();
    char why[LLMT_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", j->err.msg);
    const char *path = getenv("LLMT_LAUNCH_INPLACE");
    llmt__log(j->ctx, LLMT_LOG_WARN, "job",
              "rank %d: the step failed (%s): staying in this process (pid %d) and waiting "
              "for the agent's next generation in %s",
              (int)j->rank, why, (int)getpid(), path);
    drop_comms(j);
    /* the agent writes the file within a poll of the death it saw; a
     * generation that never comes (the agent gave up, or restarts the
     * gang) ends the wait with the original error */
    double limit = j->spec->fault_tolerance.collective_timeout_s * 4;
    if (limit < 60)
        limit = 60;
    int gen = -1, world = 0;
    for (;;) {
        if (read_gen(path, &gen, &world) && gen > j->launch_gen)
            break;
        if (llmt__job_now() - t0 > limit)
            return FAIL(LLMT_ERR_TIMEOUT,
                        "%s; in-place recovery: no new generation in %s after %.0f s", why,
                        path, limit);
        struct timespec ts = {0, 20000000L};
        nanosleep(&ts, NULL);
    }
    /* world 0: the agent restarts the whole gang (a rank it could not
     * replace, or one that failed by itself): end this process now */
    if (world == 0)
        return FAIL(LLMT_ERR_ABORTED,
                    "%s; in-place recovery: the agent restarts the gang instead (generation "
                    "%d); this process ends",
                    why, gen);
    if (world != j->world)
        return FAIL(LLMT_ERR_UNSUPPORTED,
                    "%s; in-place recovery: generation %d has %d ranks, this job %d (a "
                    "smaller world restarts the gang)",
                    why, gen, world, (int)j->world);
    j->launch_gen = gen;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "gen%d", gen);
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    if (llmt__spec_given(j->spec, "fault_tolerance.collective_timeout_s"))
        co.timeout_ms = (int64_t)(j->spec->fault_tolerance.collective_timeout_s * 1000.0);
    llmt_status s = llmt_comm_create_from_store(j->ctx, getenv("LLMT_COMM_STORE"), prefix,
                                                j->rank, j->world, &co, &j->comm);
    if (s != LLMT_OK)
        return FAIL(s, "%s; in-place recovery: the communicator of generation %d: %s", why, gen,
                    llmt_context_last_error(j->ctx));
    double t_comm = llmt__job_now();
    /* a new trainer: the restore below sets every parameter and moment */
    s = llmt__obs_trainer_create(j->obs, j->model, &j->to, llmt__job_dev_table(j), &j->tr,
                                 &j->obs_timed);
    if (s != LLMT_OK)
        return FAIL(s, "in-place recovery: trainer: %s", llmt_model_last_error(j->model));
    /* the spare, made with --resume, agrees on its own part of the
     * creation, makes the groups, checks the root and agrees on its
     * metrics as its creation does (job.c): the same collectives, in the
     * same place */
    if ((s = llmt__job_agree_own(j, LLMT_OK)) != LLMT_OK)
        return s;
    if ((s = llmt__job_attach_groups(j)) != LLMT_OK)
        return s;
    if ((s = llmt__job_ckpt_shared(j)) != LLMT_OK)
        return s;
    if ((s = llmt__job_agree_own(j, LLMT_OK)) != LLMT_OK)
        return s;
    int64_t step = -1;
    if ((s = llmt__job_restore(j, 1, &step)) != LLMT_OK)
        return s;
    if (step < 0)
        return FAIL(LLMT_ERR_NOT_FOUND,
                    "%s; in-place recovery: no checkpoint to go back to (the failure came "
                    "before the first save)",
                    why);
    int64_t undone = j->last.step - step;
    j->start_step = step;
    j->hb_first = 0; /* the agent's recovery ends at the next step */
    /* the anomaly windows: the checkpoint's (ckpt.c) */
    j->consecutive = 0;
    j->strag_busy = j->strag_wall = 0;
    j->strag_steps = 0;
    /* the agent counts this recovery and the steps run again (its
     * goodput report); gp_lost_s is the anomalies' */
    double t1 = llmt__job_now();
    llmt__job_metrics_line(j,
                           "{\"event\":\"inplace\",\"rank\":%d,\"pid\":%d,\"gen\":%d,"
                           "\"step\":%lld,\"tier\":\"%s\",\"lost_steps\":%lld,"
                           "\"wait_s\":%.4f,\"restore_s\":%.4f,\"recovery_s\":%.4f}",
                           (int)j->rank, (int)getpid(), gen, (long long)step,
                           j->restore_tier ? j->restore_tier : "", (long long)undone,
                           t_comm - t0, j->restore_s, t1 - t0);
    llmt__log(j->ctx, LLMT_LOG_WARN, "job",
              "rank %d: recovered in place as generation %d: step %lld from the %s tier "
              "in %.3f s (%.3f s waiting for the agent and the communicator)",
              (int)j->rank, gen, (long long)step, j->restore_tier ? j->restore_tier : "?",
              t1 - t0, t_comm - t0);
    llmt__err_clear(&j->err);
    memset(m, 0, sizeof *m);
    m->struct_size = sizeof *m;
    m->val_loss = m->start_val_loss = NAN;
    m->saved_step = -1;
    m->step = step;
    m->elapsed_s = t1 - j->t_start;
    return LLMT_OK;
}
