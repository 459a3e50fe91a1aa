/* No silent no-ops: every key of the spec either takes effect in the job or
 * is refused here, at creation, by its JSON path, saying where its support
 * is planned. A user who configures tensor parallelism or a peer tier and
 * gets a single-rank run without it has been lied to; an error costs them
 * a minute. The spec parser accepts these keys (the planner reads them to
 * cost a layout); only the job, which runs the spec, refuses them.
 * test/job walks the whole key table against this file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "job/job.h"
#include "plan/plan.h"

/* "KEY: VALUE is not supported by llmt_job yet (WHAT); use FIX" */
#define REFUSE(...) llmt__err_set(&j->err, LLMT_ERR_UNSUPPORTED, __VA_ARGS__)

static const char *const prec_names[] = {"bf16", "fp16", "fp32", "fp8"};

static const char *prec(int v)
{
    return v >= 0 && v < 4 ? prec_names[v] : "?";
}

/* Degrees the engine does not split yet (later issues implement them). */
static llmt_status check_parallelism(llmt_job *j)
{
    const llmt_spec *s = j->spec;
    /* MoE layers run on the CPU engine and through the op table on the
     * bf16 host emulation (train.device emulated, every layout: job-emul)
     * and on CUDA (moe_dev.c: gpu-moe-engine); on CUDA beside data
     * parallelism see check_cuda_groups, their pipeline and context
     * groups there are the engine's to refuse (dev.h, unverified_moe_groups) */
    if (s->model.moe.experts > 0 && s->model.arch != LLMT_SPEC_ARCH_LLAMA)
        return REFUSE("model.moe.experts: mixture of experts needs model.arch llama (SwiGLU "
                      "experts)");
    /* data, expert, pipeline, tensor (experts whole on every TP rank,
     * with or without sequence parallelism; a pipeline stage's layers
     * too) and context parallelism run them (doc/moe.md) */
    if (s->model.moe.experts == 0 && llmt__spec_given(s, "model.moe.expert_ffn"))
        return REFUSE("model.moe.expert_ffn: set but model.moe.experts is 0 (dense)");
    /* dropless experts have no capacity (lib/train/moe.c); the planner
     * ignores the factor then too, but the spec keeps accepting the pair
     * for plans (tests of test/train and test/mpi pair them) */
    if (s->model.moe.experts > 0 && s->model.moe.dropless &&
        llmt__spec_given(s, "model.moe.capacity_factor"))
        return REFUSE("model.moe.capacity_factor: %g has no effect with model.moe.dropless "
                      "true (every expert takes all the tokens routed to it); remove one of "
                      "the two",
                      s->model.moe.capacity_factor);
    return LLMT_OK;
}

/* The layouts the engines do not run yet (zero without data-parallel
 * ranks, host groups beside NCCL on cuda, sequence parallelism across
 * context parallel rows, ZeRO 2-3 in a pipeline), the keys of a degree
 * set without it (cp_variant, pp_schedule, stage_layers) and what the
 * silent-data-corruption check needs of the layout (sdc_interval: dp 2 or
 * more, ZeRO-3 only deterministic on the cpu engine with tp 1 and pp 1;
 * sdc_replay step only under ZeRO-3): lib/plan/job_limits.c, shared with
 * the planner, which names them beside a plan and an auto-planner's
 * choice. */
static llmt_status check_layout(llmt_job *j)
{
    char why[1024];
    llmt_status st = llmt__plan_job_limits(j->spec, j->world, why, sizeof why);
    return st == LLMT_OK ? LLMT_OK : llmt__err_set(&j->err, st, "%s", why);
}

/* What each engine computes in: the CPU trainer fp32 throughout; the
 * device trainer bf16 parameters and activations, fp32 master weights,
 * bf16 GEMMs or fp8 GEMMs. A precision key given with another
 * value is refused; one left at its default is what the engine does. */
static llmt_status check_precision(llmt_job *j)
{
    const llmt_spec *s = j->spec;
    /* the device engine (cuda, or its host emulation) */
    int cuda = s->train.device != LLMT_SPEC_DEVICE_CPU;
    const char *dev = s->train.device == LLMT_SPEC_DEVICE_CUDA       ? "train.device cuda"
                      : s->train.device == LLMT_SPEC_DEVICE_EMULATED ? "train.device emulated"
                                                                     : "train.device cpu";
    struct {
        const char *path;
        int v;
        int ok1, ok2; /* values the engine runs (-1: none) */
    } k[] = {
        {"precision.param", s->precision.param,
         cuda ? LLMT_SPEC_PREC_BF16 : LLMT_SPEC_PREC_FP32, -1},
        {"precision.master", s->precision.master, LLMT_SPEC_PREC_FP32, -1},
        {"precision.gemm", s->precision.gemm, cuda ? LLMT_SPEC_PREC_BF16 : LLMT_SPEC_PREC_FP32,
         cuda ? LLMT_SPEC_PREC_FP8 : -1},
    };
    for (size_t i = 0; i < 3; i++) {
        if (!llmt__spec_given(s, k[i].path) || k[i].v == k[i].ok1 || k[i].v == k[i].ok2)
            continue;
        return REFUSE("%s: %s is not supported by llmt_job with %s (the %s "
                      "engine runs %s%s%s; fp16 and other formats are not "
                      "planned in an issue yet); use %s",
                      k[i].path, prec(k[i].v), dev, cuda ? "device" : "CPU", prec(k[i].ok1),
                      k[i].ok2 >= 0 ? " or " : "", k[i].ok2 >= 0 ? prec(k[i].ok2) : "",
                      prec(k[i].ok1));
    }
    if (s->precision.gemm == LLMT_SPEC_PREC_FP8 && !cuda)
        return REFUSE("precision.gemm: fp8 is not supported by llmt_job with "
                      "train.device cpu (fp8 GEMMs run in the device trainer: "
                      "train.device cuda, or emulated on the CPU); use fp32");
    if (s->precision.gemm == LLMT_SPEC_PREC_FP8 &&
        s->precision.fp8_recipe != LLMT_SPEC_FP8_DELAYED)
        return REFUSE("precision.fp8_recipe: %s is not supported by llmt_job yet "
                      "(the trainer implements delayed scaling; current and "
                      "blockwise exist only as host references in lib/exec/fp8.c, "
                      "doc/fp8.md); use delayed",
                      s->precision.fp8_recipe == LLMT_SPEC_FP8_CURRENT ? "current"
                                                                       : "blockwise");
    /* the experts' fp8 GEMMs (lib/train/moe_dev.c, each expert's rows
     * padded to a multiple of 16) need their other dimensions multiples
     * of 16 as well: the experts would otherwise run bf16 beside fp8
     * attention, most of an MoE model's FLOPs not in the precision asked
     * for (doc/fp8.md) */
    if (s->precision.gemm == LLMT_SPEC_PREC_FP8 && s->model.moe.experts > 0 &&
        (s->model.hidden % 16 || s->model.moe.expert_ffn % 16))
        return REFUSE("precision.gemm: fp8 with model.moe.experts needs model.hidden (%lld) "
                      "and model.moe.expert_ffn (%lld) multiples of 16 (the experts' fp8 "
                      "GEMMs); use bf16 or such widths",
                      (long long)s->model.hidden, (long long)s->model.moe.expert_ffn);
    return LLMT_OK;
}

static llmt_status check_model(llmt_job *j)
{
    const llmt_spec *s = j->spec;
    if (s->model.arch == LLMT_SPEC_ARCH_GPT2 && llmt__spec_given(s, "model.rope_theta"))
        return REFUSE("model.rope_theta: GPT-2 has learned positions, no RoPE: "
                      "the key has no effect with model.arch gpt2; remove it or "
                      "use llama");
    if (s->optimizer.type != LLMT_SPEC_OPT_ADAMW)
        return REFUSE("optimizer.type: %s is not supported by llmt_job yet (the "
                      "trainer implements AdamW only; no issue plans others yet); "
                      "use adamw",
                      s->optimizer.type == LLMT_SPEC_OPT_ADAM ? "adam" : "sgd");
    if (s->schedule.kind != LLMT_SPEC_SCHED_WSD && llmt__spec_given(s, "schedule.decay_steps"))
        return REFUSE("schedule.decay_steps: only schedule.kind wsd has a "
                      "separate decay phase; the key has no effect with this "
                      "schedule: remove it or use wsd");
    if (s->schedule.kind == LLMT_SPEC_SCHED_CONSTANT &&
        llmt__spec_given(s, "schedule.min_lr_ratio"))
        return REFUSE("schedule.min_lr_ratio: a constant schedule never decays: "
                      "the key has no effect; remove it or choose a decaying "
                      "schedule.kind");
    /* the constant LR is the peak after warmup, whatever the length of
     * the schedule (lib/train/trainer.c, lr_at) */
    if (s->schedule.kind == LLMT_SPEC_SCHED_CONSTANT &&
        llmt__spec_given(s, "schedule.total_steps"))
        return REFUSE("schedule.total_steps: a constant schedule never decays, so its "
                      "length has no effect; remove the key or choose a decaying "
                      "schedule.kind (cosine, linear, wsd)");
    return LLMT_OK;
}

/* Tiers: local (the root: checkpoint.dir or the tier's path), host (the
 * last snapshot in memory: a rollback or in-place recovery reads it
 * first), peer (each saved step's part of a rank replicated to a rank on
 * another node, under the tier's path or ROOT/peer: a rank whose local
 * part is lost gets it back without the durable tier), durable (a copy
 * of every committed checkpoint, with its own retention). */
static llmt_status check_tiers(llmt_job *j)
{
    const llmt_spec *s = j->spec;
    int nlocal = 0, ndurable = 0, nhost = 0, npeer = 0;
    for (int i = 0; i < s->checkpoint.ntiers; i++) {
        const llmt_spec_tier *t = &s->checkpoint.tiers[i];
        char p[64];
        snprintf(p, sizeof p, "checkpoint.tiers[%d]", i);
        /* keep_last 0 keeps every step (lib/ckpt/save.c, retain): the
         * steps keep_every would keep for good are kept anyway */
        if ((t->kind == LLMT_SPEC_TIER_LOCAL || t->kind == LLMT_SPEC_TIER_DURABLE) &&
            t->keep_every > 0 && t->keep_last == 0)
            return REFUSE("%s.keep_every: %lld has no effect with keep_last 0, which keeps "
                          "every step already; set keep_last (the newest N kept besides "
                          "every keep_every-th step), or remove keep_every",
                          p, (long long)t->keep_every);
        switch (t->kind) {
        case LLMT_SPEC_TIER_PEER:
            if (++npeer > 1)
                return REFUSE("%s.kind: a second peer tier is not supported", p);
            if (t->keep_last != 3 || t->keep_every)
                return REFUSE("%s: the peer tier keeps the replicas of the local "
                              "tier's retention: keep_last and keep_every have no "
                              "effect on it; remove them",
                              p);
            if (j->world < 2)
                return REFUSE("%s.kind: peer replicates each rank's part to the "
                              "next rank, and this job has one rank: nothing would "
                              "hold a replica; remove the tier or run more ranks",
                              p);
            break;
        case LLMT_SPEC_TIER_HOST:
            if (++nhost > 1)
                return REFUSE("%s.kind: a second host tier is not supported", p);
            if (t->path || t->keep_last != 3 || t->keep_every)
                return REFUSE("%s: the host tier keeps exactly the last snapshot "
                              "in memory: path, keep_last and keep_every have no "
                              "effect on it; remove them",
                              p);
            break;
        case LLMT_SPEC_TIER_LOCAL:
            if (++nlocal > 1)
                return REFUSE("%s.kind: a second local tier is not supported by "
                              "llmt_job (one root per run); use one local and one "
                              "durable tier",
                              p);
            break;
        case LLMT_SPEC_TIER_DURABLE:
            if (++ndurable > 1)
                return REFUSE("%s.kind: a second durable tier is not supported by "
                              "llmt_job; use one",
                              p);
            if (!t->path || !*t->path)
                return REFUSE("%s.path: a durable tier needs a path (a shared "
                              "directory)",
                              p);
            break;
        }
    }
    return LLMT_OK;
}

/* Whether the run saves before its last step: an interval of train.steps
 * or more saves the last step only, as interval 0 does. */
static int saves_between(const llmt_spec *s)
{
    return s->checkpoint.interval_auto ||
           (s->checkpoint.interval > 0 && s->checkpoint.interval < s->train.steps);
}

/* Saves between the last: only they may persist in the background (the
 * last is synchronous so that the run ends durable, ckpt.c), so without
 * one (checkpoint.interval 0, or train.steps or more) no save is async.
 * "false" says just that and is kept; "true" asks for what cannot happen. */
static llmt_status check_ckpt(llmt_job *j)
{
    const llmt_spec *s = j->spec;
    if (llmt__spec_given(s, "checkpoint.async") && s->checkpoint.async && !saves_between(s))
        return REFUSE("checkpoint.async: true has no effect with checkpoint.interval %lld and "
                      "train.steps %lld: the only save is the last step's, always synchronous "
                      "so that the run ends durable; set checkpoint.interval below train.steps "
                      "(or \"auto\"), or remove the key",
                      (long long)s->checkpoint.interval, (long long)s->train.steps);
    return LLMT_OK;
}

/* The global batch and the micro-batch count given together hold for one
 * data-parallel degree only: the spec checks them with dp 1 when dp is
 * left out, and the plan, deriving dp from the world size, keeps the
 * global batch and replaces grad_accum. A given key replaced is refused. */
static llmt_status check_batch(llmt_job *j)
{
    const llmt_spec *s = j->spec;
    int64_t mp = s->parallelism.tp * s->parallelism.cp * s->parallelism.pp;
    int64_t dp = mp > 0 && j->world % mp == 0 ? j->world / mp : 1; /* else layout() refuses */
    if (!llmt__spec_given(s, "batch.global") || !llmt__spec_given(s, "batch.grad_accum") ||
        llmt__spec_given(s, "parallelism.dp") || dp == 1)
        return LLMT_OK;
    return llmt__err_set(
        &j->err, LLMT_ERR_SPEC,
        "batch.grad_accum: %lld with batch.global %lld holds for one "
        "data-parallel replica, and this job has %lld (world size %d, "
        "parallelism.dp left out): batch.micro %lld x grad_accum %lld x dp "
        "%lld = %lld, not %lld; give batch.global alone (grad_accum is then "
        "derived for each world size) or grad_accum alone",
        (long long)s->batch.grad_accum, (long long)s->batch.global, (long long)dp,
        (int)j->world, (long long)s->batch.micro, (long long)s->batch.grad_accum, (long long)dp,
        (long long)(s->batch.micro * s->batch.grad_accum * dp), (long long)s->batch.global);
}

/* The communicator timeout: the job's own communicator takes it (world >
 * 1), and under llmtrain launch the agent's heartbeat timeout too; a job
 * of one rank started by anything else has no collective to time out. */
static llmt_status check_timeout(llmt_job *j)
{
    const llmt_spec *s = j->spec;
    const char *gen = getenv("LLMT_LAUNCH_GEN");
    if (!llmt__spec_given(s, "fault_tolerance.collective_timeout_s") || j->world > 1 ||
        (gen && *gen))
        return LLMT_OK;
    return REFUSE("fault_tolerance.collective_timeout_s: %g s has no effect on a job of one "
                  "rank (no communicator, no collective to time out); run it on 2 or more "
                  "ranks or under llmtrain launch (whose heartbeat timeout it sets), or "
                  "remove the key",
                  s->fault_tolerance.collective_timeout_s);
}

llmt_status llmt__job_check_caller_comm(llmt_job *j, const llmt_comm *c)
{
    const llmt_spec *s = j->spec;
    if (!c || !llmt__spec_given(s, "fault_tolerance.collective_timeout_s"))
        return LLMT_OK;
    double want = s->fault_tolerance.collective_timeout_s;
    if ((int64_t)(want * 1000.0) == c->timeout_ms)
        return LLMT_OK;
    return REFUSE("fault_tolerance.collective_timeout_s: %g s, but the communicator the caller "
                  "gave (llmt_job_opts.comm) times out after %g s, and the job does not "
                  "change a borrowed communicator: create it with llmt_comm_opts.timeout_ms "
                  "%lld, or remove the key",
                  want, (double)c->timeout_ms / 1000.0, (long long)(want * 1000.0));
}

static llmt_status check_ft(llmt_job *j)
{
    const llmt_spec *s = j->spec;
    /* the restart budget is the agent's (llmtrain launch reads it and says
     * so with $LLMT_LAUNCH_GEN); a job started by anything else has no one
     * to restart it, and would ignore the key */
    const char *gen = getenv("LLMT_LAUNCH_GEN");
    if (llmt__spec_given(s, "fault_tolerance.max_restarts") && !(gen && *gen))
        return REFUSE("fault_tolerance.max_restarts: %lld is the restart budget of the "
                      "agent: run the job with llmtrain launch (doc/fault-tolerance.md), "
                      "or remove the key to run it without restarts",
                      (long long)s->fault_tolerance.max_restarts);
    /* a rollback goes back to the newest checkpoint (or the memory tier's
     * snapshot, taken at a save): without periodic saves it has none, and
     * the first anomaly would stop the run as the stop policy does */
    if (s->fault_tolerance.anomaly.policy == LLMT_SPEC_ANOMALY_ROLLBACK && !saves_between(s))
        return REFUSE("fault_tolerance.anomaly.policy: rollback goes back to the newest "
                      "checkpoint, and checkpoint.interval is %lld with train.steps %lld "
                      "(only the last step is saved): the first anomaly would stop the run; "
                      "set checkpoint.interval below train.steps (or \"auto\"), or use "
                      "policy skip, lower_lr or stop",
                      (long long)s->checkpoint.interval, (long long)s->train.steps);
    const char *given = NULL;
    if (llmt__spec_given(s, "fault_tolerance.anomaly.lr_factor") &&
        s->fault_tolerance.anomaly.policy != LLMT_SPEC_ANOMALY_LOWER_LR)
        return REFUSE("fault_tolerance.anomaly.lr_factor: %g is used only by "
                      "fault_tolerance.anomaly.policy lower_lr: set that policy, or remove "
                      "the key",
                      s->fault_tolerance.anomaly.lr_factor);
    /* what a deterministic check replays (sdc_replay.c): the key acts only
     * where a replay runs; "step" only under ZeRO-3 (a layout's limit,
     * check_layout's, beside sdc_interval's) */
    if (llmt__spec_given(s, "fault_tolerance.sdc_replay")) {
        const char *v = s->fault_tolerance.sdc_replay == LLMT_SPEC_SDC_STEP ? "step" : "window";
        if (s->fault_tolerance.sdc_interval <= 0 || !s->train.deterministic)
            return REFUSE("fault_tolerance.sdc_replay: %s chooses what the silent-data-"
                          "corruption check replays, and this job %s: set "
                          "fault_tolerance.sdc_interval and train.deterministic true, or "
                          "remove the key",
                          v,
                          s->fault_tolerance.sdc_interval <= 0
                              ? "has no check (fault_tolerance.sdc_interval 0)"
                              : "replays nothing (train.deterministic false)");
    }
    int64_t si = s->fault_tolerance.straggler.interval;
    if (si > 0 && j->world < 2)
        return REFUSE("fault_tolerance.straggler.interval: %lld compares the step times of "
                      "ranks, and this job runs on 1 rank: run it on 2 or more, or remove "
                      "the key",
                      (long long)si);
    if (llmt__spec_given(s, "fault_tolerance.straggler.margin"))
        given = "fault_tolerance.straggler.margin";
    else if (llmt__spec_given(s, "fault_tolerance.straggler.patience"))
        given = "fault_tolerance.straggler.patience";
    if (given && si <= 0)
        return REFUSE("%s: the straggler report is off (fault_tolerance.straggler.interval "
                      "is 0): set the interval, or remove the key",
                      given);
    return LLMT_OK;
}

llmt_status llmt__job_check_spec(llmt_job *j)
{
    llmt_status st;
    if ((st = check_parallelism(j)) != LLMT_OK)
        return st;
    if ((st = check_layout(j)) != LLMT_OK)
        return st;
    if ((st = check_precision(j)) != LLMT_OK)
        return st;
    if ((st = check_model(j)) != LLMT_OK)
        return st;
    if ((st = check_tiers(j)) != LLMT_OK)
        return st;
    if ((st = check_ckpt(j)) != LLMT_OK)
        return st;
    if ((st = check_batch(j)) != LLMT_OK)
        return st;
    if ((st = check_ft(j)) != LLMT_OK)
        return st;
    return check_timeout(j);
}
