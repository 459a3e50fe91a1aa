/* The layouts llmt_job does not run yet, in one place: the job refuses
 * them at creation (lib/job/refuse.c), and the planner says so beside a
 * plan or an auto-planner's choice (a user asking `llmtrain plan --auto`
 * for a layout should not learn at `llmtrain train` that it cannot run).
 * Each reason names the key, what is missing and what to use instead;
 * they move out of here as the engines compose (issues 16-18). */
#include <stdio.h>

#include "plan/plan.h"

/* why may be NULL (n 0): the auto-planner asks of every layout it weighs */
#define SAY(...) (n ? snprintf(why, n, __VA_ARGS__) : 0, LLMT_ERR_UNSUPPORTED)

/* Keys that act only with a degree above 1: the job refuses them set
 * without it, so a layout that drops the degree (the auto-planner's pp 1
 * or cp 1 for a spec that names a schedule, a split or a variant) is one
 * the job does not run. */
static llmt_status keys_of_degrees(const llmt_spec *s, char *why, size_t n)
{
    if (s->parallelism.cp <= 1 && llmt__spec_given(s, "parallelism.cp_variant"))
        return SAY("parallelism.cp_variant: set but parallelism.cp is 1 (there is no context "
                   "parallel attention to choose); remove the key or set cp");
    if (s->parallelism.pp <= 1 && llmt__spec_given(s, "parallelism.pp_schedule"))
        return SAY("parallelism.pp_schedule: set but parallelism.pp is 1 (there is no "
                   "pipeline to schedule); remove the key or set pp");
    if (s->parallelism.pp <= 1 && llmt__spec_given(s, "parallelism.stage_layers"))
        return SAY("parallelism.stage_layers: set but parallelism.pp is 1 (one stage holds "
                   "every layer); remove the key or set pp");
    /* one entry per (virtual) stage, as the spec's rules refuse it: the
     * auto-planner's pp 4, or pp 2 with 2 virtual stages, for a spec that
     * splits 2 stages is one the job does not run with that split */
    long long pp = (long long)s->parallelism.pp, v = (long long)s->parallelism.virtual_stages,
              nv = pp * (v > 1 ? v : 1);
    int nsl = s->parallelism.nstage_layers;
    if (pp > 1 && llmt__spec_given(s, "parallelism.stage_layers") && nsl != nv)
        return SAY("parallelism.stage_layers: %d entries for parallelism.pp %lld x "
                   "parallelism.virtual_stages %lld (one per virtual stage); give %lld, or "
                   "keep the layout they split",
                   nsl, pp, v > 1 ? v : 1, nv);
    return LLMT_OK;
}

/* The silent-data-corruption check needs what the layout gives it:
 * replicas to compare (dp >= 2), or under ZeRO-3, where every rank holds
 * a different share, a deterministic replay of the host shares of the
 * fp32 cpu engine (lib/job/sdc_shares.c), and sdc_replay step only there.
 * The auto-planner chooses dp and zero, so a layout it weighs may drop
 * what the spec's check needs. */
static llmt_status sdc_keys(const llmt_spec *s, int64_t world, int64_t dp, char *why, size_t n)
{
    long long tp = (long long)s->parallelism.tp, cp = (long long)s->parallelism.cp,
              pp = (long long)s->parallelism.pp, zero = (long long)s->parallelism.zero;
    long long every = (long long)s->fault_tolerance.sdc_interval;
    if (every <= 0)
        return LLMT_OK;
    /* cross-replica checks need replicas (tensor-parallel ranks hold
     * different shards: they are not replicas of each other) */
    if (dp < 2)
        return SAY("fault_tolerance.sdc_interval: %lld compares the parameters of "
                   "data-parallel replicas, and this job has one (dp = world size %d / "
                   "(tp %lld x cp %lld x pp %lld)): run it on 2 or more replicas "
                   "(llmtrain launch --nproc N, mpirun), or remove the key",
                   every, (int)world, tp, cp, pp);
    if (zero >= 3 && !s->train.deterministic)
        return SAY("fault_tolerance.sdc_interval: needs train.deterministic true under "
                   "parallelism.zero 3: every rank holds a different share, so there are "
                   "no replicas to compare and the check replays steps instead; or use "
                   "zero 0-2, or remove the key");
    if (zero >= 3 && (tp > 1 || pp > 1 || s->train.device != LLMT_SPEC_DEVICE_CPU))
        return SAY("fault_tolerance.sdc_interval: under parallelism.zero 3 the check "
                   "hashes each rank's shares where the engine trains the host tensors in "
                   "place: the fp32 cpu engine with tp 1 and pp 1 (this job has tp %lld, pp "
                   "%lld); use zero 0-2 there, or remove the key",
                   tp, pp);
    /* "step" replays the check step alone, under ZeRO-3 only: under zero
     * 0-2 the replicas are compared directly, and a one-step copy taken
     * after a flip would hold their difference (the key without a check
     * or a deterministic run is refused by the job, lib/job/refuse.c) */
    if (s->train.deterministic && zero < 3 &&
        llmt__spec_given(s, "fault_tolerance.sdc_replay") &&
        s->fault_tolerance.sdc_replay == LLMT_SPEC_SDC_STEP)
        return SAY("fault_tolerance.sdc_replay: step (the check step alone) applies "
                   "under parallelism.zero 3; under zero %lld the replicas are "
                   "compared at every check and a disagreement replays the steps "
                   "since the newest snapshot (window): use window, or remove the key",
                   zero);
    return LLMT_OK;
}

llmt_status llmt__plan_job_limits(const llmt_spec *s, int64_t world, char *why, size_t n)
{
    long long tp = (long long)s->parallelism.tp, cp = (long long)s->parallelism.cp,
              pp = (long long)s->parallelism.pp, zero = (long long)s->parallelism.zero;
    int64_t mp = s->parallelism.tp * s->parallelism.cp * s->parallelism.pp;
    /* the data-parallel degree the job runs: world / (tp x cp x pp), the
     * world when that does not divide it (the job refuses that next,
     * naming the key) */
    int64_t dp = mp > 0 && world % mp == 0 ? world / mp : world;
    if (n)
        why[0] = 0;
    /* ZeRO shards over the data-parallel group: with one replica there is
     * nothing to shard, and a stage that changes nothing would be a lie */
    if (zero > 0 && dp == 1)
        return SAY("parallelism.zero: %lld has no effect with one data-parallel rank (ZeRO "
                   "shards over data-parallel ranks; dp = world size %d / (tp %lld x cp %lld "
                   "x pp %lld)); use 0, or run under a launcher with dp > 1",
                   zero, (int)world, tp, cp, pp);
    /* On train.device cuda the data-parallel group is NCCL (nccl_attach.c,
     * one GPU per rank, the engine's gradients in device memory) while
     * the tensor, context, pipeline and expert groups run over the job's
     * host group (Gloo, MPI), lib/train/tp.c, cp.c, pp_xfer.c and
     * moe_dev_ep.c staging device buffers through host memory; a MoE
     * model's router tallies are host arrays summed over its groups. Each
     * of those ran on a GPU alone (gpu-job-tp, gpu-*-engine), and every
     * layout runs through the job on the same staging with train.device
     * emulated (job-emul, job-emul-launch, mpi-train-emulated), but a
     * host group beside the NCCL twin needs one GPU per rank, and has not
     * run: until it has, dp > 1 on cuda is for dense models with tp, cp
     * and pp 1. */
    if (s->train.device == LLMT_SPEC_DEVICE_CUDA && dp > 1) {
        const char *key = tp > 1                     ? "parallelism.tp"
                          : cp > 1                   ? "parallelism.cp"
                          : pp > 1                   ? "parallelism.pp"
                          : s->model.moe.experts > 0 ? "model.moe.experts"
                                                     : NULL;
        if (key)
            return SAY("%s: beside %lld data-parallel replicas is not supported by llmt_job "
                       "with train.device cuda yet (the data-parallel group is NCCL, one GPU "
                       "per rank; this one runs over the host group, staged, and the two "
                       "together have not run on GPUs: issue 16); use dp 1 (world = tp x cp "
                       "x pp), or train.device emulated to run the layout on the CPU",
                       key, (long long)dp);
    }
    /* sequence parallelism splits a CP rank's rows of each sequence in tp
     * blocks (the trainer refuses it too, but after the groups are made) */
    long long T = (long long)s->model.seq_len;
    if (cp > 1 && s->parallelism.sequence_parallel && tp > 1 && T % (2 * cp) == 0 &&
        (T / cp) % tp) {
        if (n)
            snprintf(
                why, n,
                "parallelism.sequence_parallel: parallelism.tp %lld does not divide "
                "model.seq_len %lld / parallelism.cp %lld = %lld (the rows a CP rank holds "
                "of each sequence are split in tp blocks)",
                tp, T, cp, T / cp);
        return LLMT_ERR_INVALID_ARGUMENT;
    }
    if (pp > 1 && zero >= 2)
        return SAY("parallelism.zero: %lld with parallelism.pp %lld is not supported yet "
                   "(ZeRO-2 shares of a tied head's two copies do not line up, ZeRO-3 gathers "
                   "are not in a stage's forward); use zero 0 or 1",
                   zero, pp);
    llmt_status st = keys_of_degrees(s, why, n);
    return st != LLMT_OK ? st : sdc_keys(s, world, dp, why, n);
}
