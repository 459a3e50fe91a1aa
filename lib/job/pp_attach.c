/* Pipeline parallelism in the job: the layout it needs of the world, and
 * the PP group from the plan's coordinates (TP innermost, then CP, PP,
 * DP outermost: the ranks of a PP group differ only in their PP
 * coordinate, hold the same TP shard of their stages and belong to the
 * same data parallel replica, so they read the same sequences: the first
 * stage embeds them, the last takes their targets). The group is attached
 * to the trainer after tensor (and sequence) parallelism and before data
 * parallelism, as llmt_trainer_set_pp_comm asks, with the spec's
 * parallelism.pp_schedule and parallelism.stage_layers. */
#include <string.h>

#include "comm/p2p.h"
#include "job/job.h"
#include "plan/plan.h"
#include "train/pp.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

llmt_status llmt__job_pp_layout(llmt_job *j)
{
    const llmt_spec *s = j->spec;
    long long tp = (long long)s->parallelism.tp, pp = (long long)s->parallelism.pp;
    long long dp = (long long)s->parallelism.dp;
    if (j->world % (tp * pp))
        return FAIL(LLMT_ERR_SPEC,
                    "parallelism.pp: %lld x parallelism.tp %lld does not divide the world "
                    "size %d (the job runs tp x pp x dp ranks): start it with a multiple of "
                    "%lld processes (mpirun -np, srun, torchrun), or change pp",
                    pp, tp, (int)j->world, tp * pp);
    if (llmt__spec_given(s, "parallelism.dp") && dp * tp * pp != j->world)
        return FAIL(LLMT_ERR_SPEC,
                    "parallelism.dp: %lld, but the job runs on %d rank(s) with tp %lld and "
                    "parallelism.pp %lld: start it with tp x pp x dp = %lld processes, or "
                    "leave dp out to take world size / (tp x pp)",
                    dp, (int)j->world, tp, pp, dp * tp * pp);
    return LLMT_OK;
}

llmt_status llmt__job_attach_pp(llmt_job *j)
{
    const llmt_spec *sp = j->spec;
    llmt_status s = llmt_comm_create_plan_group(j->comm, j->plan, LLMT_DIM_PP, &j->pp_comm);
    if (s != LLMT_OK)
        return FAIL(s, "job: the pipeline group (pp %d): %s", (int)j->pp,
                    llmt_comm_last_error(j->comm));
    llmt_pp_opts o;
    llmt_pp_opts_init(&o, sizeof o);
    /* mapped by name; virtual stages are the interleaved schedule's (the
     * spec makes it their default and refuses another) */
    o.schedule = sp->parallelism.pp_schedule == LLMT_SPEC_PP_GPIPE         ? LLMT_PP_GPIPE
                 : sp->parallelism.pp_schedule == LLMT_SPEC_PP_INTERLEAVED ? LLMT_PP_INTERLEAVED
                                                                           : LLMT_PP_1F1B;
    o.virtual_stages = (int32_t)sp->parallelism.virtual_stages;
    int32_t layers[LLMT_SPEC_MAX_STAGES];
    if (sp->parallelism.nstage_layers > 0) {
        for (int i = 0; i < sp->parallelism.nstage_layers; i++)
            layers[i] = (int32_t)sp->parallelism.stage_layers[i];
        o.stage_layers = layers;
        o.n_stage_layers = sp->parallelism.nstage_layers;
    }
    llmt__obs_remake_begin(j->obs); /* the engine is made again, timed */
    s = llmt_trainer_set_pp_comm(j->tr, j->pp_comm, &o);
    llmt__obs_remake_end();
    if (s != LLMT_OK)
        return FAIL(s, "parallelism.pp: %d: %s", (int)j->pp, llmt_trainer_last_error(j->tr));
    j->group_comm[LLMT_JOB_GROUP_PP] = j->pp_comm;
    return LLMT_OK;
}

/* The planner's count of the input gradient copies pooled for sends in
 * flight (MPI can ask whether a send is done, Gloo cannot; none without
 * posted sends), for the pp line beside the stage's own. After the engine
 * is made: llmt_trainer_pp_stats would make it, before the data parallel
 * group is recorded, if asked at the pipeline's attach. */
void llmt__job_pp_copies_plan(llmt_job *j)
{
    const llmt_spec *sp = j->spec;
    j->pp_copies_plan = 0;
    if (j->pp <= 1 || !j->pp_comm)
        return;
    llmt_pp_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.struct_size = sizeof ps;
    llmt_comm_backend be = LLMT_COMM_AUTO;
    llmt_comm_backend_of(j->pp_comm, &be);
    if (llmt__comm_isend_kind(j->pp_comm) == LLMT__ISEND_POSTED &&
        llmt_trainer_pp_stats(j->tr, &ps) == LLMT_OK)
        j->pp_copies_plan = llmt__plan_pp_grad_copies(
            llmt__plan_pp_schedule(sp), ps.stages, sp->parallelism.virtual_stages,
            ps.micro_batches, ps.stage, be == LLMT_COMM_MPI);
}

/* After each step under a pipeline: this stage's share of the schedule's
 * wall time spent waiting for its neighbours (the bubble, plus any
 * imbalance), and its share of the step's span on the stages' compute-time
 * clocks (bubble_cpu: what it would wait with a core of its own; pp.c),
 * beside the balanced pipeline's (p-1)/(m+p-1), so a run's metrics show
 * what the planner's formula predicted. Over processes also the input
 * gradient copies the stage pooled for its sends in flight (pp_send.h)
 * beside the planner's count (lib/plan/pp_pool.c: MPI can ask whether a
 * send is done, Gloo cannot). */
void llmt__job_pp_line(llmt_job *j, int64_t step)
{
    if (j->pp <= 1)
        return;
    llmt_pp_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.struct_size = sizeof ps;
    if (llmt_trainer_pp_stats(j->tr, &ps) != LLMT_OK)
        return;
    llmt__pp_info pi;
    memset(&pi, 0, sizeof pi);
    llmt__trainer_pp_info(j->tr, &pi);
    llmt__job_metrics_line(j,
                           "{\"event\":\"pp\",\"step\":%lld,\"stage\":%d,\"stages\":%d,"
                           "\"layers\":%d,\"micro_batches\":%d,\"schedule_s\":%.6f,"
                           "\"idle_s\":%.6f,\"bubble\":%.4f,\"bubble_balanced\":%.4f,"
                           "\"busy_cpu_s\":%.6f,\"span_cpu_s\":%.6f,\"bubble_cpu\":%.4f,"
                           "\"grad_copies\":%d,\"grad_copies_plan\":%d}",
                           (long long)step, (int)ps.stage, (int)ps.stages, (int)ps.layers,
                           (int)ps.micro_batches, ps.step_seconds, ps.idle_seconds, ps.bubble,
                           ps.bubble_balanced, ps.busy_cpu_seconds, ps.span_cpu_seconds,
                           ps.bubble_cpu, pi.grad_copies, j->pp_copies_plan);
}
