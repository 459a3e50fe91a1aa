/* llmt_job: creation and the handle's plumbing. The order of creation is
 * the order in which a run can fail cheaply: the spec's refusals first
 * (before any data is prepared), then the plan (does the spec fit the
 * world size), the data, the model and trainer, the communicator, the
 * checkpointer, and last the resume. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ckpt/ckpt_internal.h"
#include "comm/comm_internal.h"
#include "data/tok/tok.h"
#include "job/job.h"
#include "train/trainer_state.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

double llmt__job_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int llmt__job_mkdir_p(const char *path)
{
    char tmp[JOB_PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir(tmp, 0755) == 0)
        return 0;
    /* something already there: a file would fail later, as a file in it */
    struct stat sb;
    if (errno != EEXIST || stat(tmp, &sb) != 0)
        return -1;
    errno = ENOTDIR;
    return S_ISDIR(sb.st_mode) ? 0 : -1;
}

LLMT_API llmt_status llmt_job_opts_init(llmt_job_opts *opts, size_t size)
{
    llmt_job_opts d = {0};
    d.rank = -1;
    d.local_rank = -1;
    return llmt__opts_init(opts, size, offsetof(llmt_job_opts, run_dir), &d, sizeof d,
                           "job opts");
}

/* Relative output paths of the spec go under the run directory. */
static void under(char *dst, size_t cap, const char *dir, const char *p, const char *dflt)
{
    if (!p || !*p)
        p = dflt;
    if (p[0] == '/')
        snprintf(dst, cap, "%s", p);
    else
        snprintf(dst, cap, "%.500s/%.500s", dir, p);
}

static llmt_status where(llmt_job *j, const llmt_job_opts *o)
{
    if (o->comm) {
        llmt_comm_rank(o->comm, &j->rank);
        llmt_comm_size(o->comm, &j->world);
        j->local_rank = o->local_rank >= 0 ? o->local_rank : j->rank;
        return LLMT_OK;
    }
    llmt_comm_env e;
    llmt_comm_env_discover(&e, sizeof e);
    j->world = o->world_size > 0 ? o->world_size : e.world_size;
    j->rank = o->rank >= 0 ? o->rank : e.rank;
    j->local_rank = o->local_rank >= 0 ? o->local_rank : e.local_rank;
    if (j->world < 1 || j->rank < 0 || j->rank >= j->world)
        return FAIL(LLMT_ERR_INVALID_ARGUMENT, "job: rank %d of world size %d", (int)j->rank,
                    (int)j->world);
    return LLMT_OK;
}

/* The layout: tp ranks share each layer (TP innermost, as the plan
 * orders ranks) and dp groups of them split the batch, so the world must
 * be tp x dp; the plan derives dp as world / tp when the spec leaves it
 * out. Checked here to name the key before the plan's generic message. */
static llmt_status layout(llmt_job *j)
{
    const llmt_spec *s = j->spec;
    long long tp = (long long)s->parallelism.tp, dp = (long long)s->parallelism.dp;
    long long cp = (long long)s->parallelism.cp, pp = (long long)s->parallelism.pp;
    if (pp > 1 && cp <= 1) /* tp x pp x dp */
        return llmt__job_pp_layout(j);
    /* tp x cp (x pp) x dp: a pipeline's stages each hold a CP group */
    long long mp = tp * cp * pp;
    if (cp > 1 && j->world % mp)
        return FAIL(LLMT_ERR_SPEC,
                    "parallelism.cp: %lld x parallelism.tp %lld x parallelism.pp %lld does "
                    "not divide the world size %d (the job runs tp x cp x pp x dp ranks): "
                    "start it with a multiple of %lld processes (mpirun -np, srun, "
                    "torchrun), or change cp",
                    cp, tp, pp, (int)j->world, mp);
    if (cp > 1 && llmt__spec_given(s, "parallelism.dp") && dp * mp != j->world)
        return FAIL(LLMT_ERR_SPEC,
                    "parallelism.dp: %lld, but the job runs on %d rank(s) with tp %lld, "
                    "parallelism.cp %lld and parallelism.pp %lld: start it with tp x cp x pp "
                    "x dp = %lld processes, or leave dp out to take world size / (tp x cp x "
                    "pp)",
                    dp, (int)j->world, tp, cp, pp, dp * mp);
    if (cp > 1)
        return LLMT_OK;
    if (j->world % tp)
        return FAIL(LLMT_ERR_SPEC,
                    "parallelism.tp: %lld does not divide the world size %d (the job runs "
                    "tp x dp ranks, tp of them sharing each layer): start it with a "
                    "multiple of %lld processes (mpirun -np, srun, torchrun), or change tp",
                    tp, (int)j->world, tp);
    if (llmt__spec_given(s, "parallelism.dp") && dp * tp != j->world)
        return FAIL(LLMT_ERR_SPEC,
                    "parallelism.dp: %lld, but the job runs on %d rank(s) and tp is %lld: "
                    "start it with tp x dp = %lld processes (mpirun -np %lld, srun, "
                    "torchrun), or leave dp out to take world size / tp",
                    dp, (int)j->world, tp, dp * tp, dp * tp);
    return LLMT_OK;
}

/* Tensor parallelism splits heads, key/value heads, the width, the FFN
 * and the padded vocabulary evenly (the trainer checks it too, but only
 * after the data is prepared and the model built); the spec's key names. */
static llmt_status tp_fits(llmt_job *j)
{
    const llmt_model_config *c = &j->mc;
    int tp = j->tp;
    if (tp <= 1)
        return LLMT_OK;
    struct {
        const char *key, *what;
        int v;
    } k[] = {{"model.heads", "heads", c->heads},
             {"model.hidden", "width", c->width},
             {"model.ffn", "FFN width", c->ffn_hidden},
             {"model.vocab", "vocabulary padded to a multiple of 64", c->padded_vocab_size}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].v % tp)
            return FAIL(LLMT_ERR_SPEC,
                        "parallelism.tp: %d does not divide %s (%s %d): tensor "
                        "parallelism splits it evenly across the tp ranks; choose a tp "
                        "that divides it",
                        tp, k[i].key, k[i].what, k[i].v);
    if (c->kv_heads > 0 && c->kv_heads % tp && tp % c->kv_heads)
        return FAIL(LLMT_ERR_SPEC,
                    "parallelism.tp: %d and model.kv_heads %d: one must divide the other "
                    "(key/value heads are split when kv_heads >= tp, else each is held "
                    "by tp / kv_heads ranks)",
                    tp, (int)c->kv_heads);
    return LLMT_OK;
}

/* This rank's place in the plan: its TP and DP coordinates. */
static llmt_status coords(llmt_job *j)
{
    int32_t deg[LLMT_PLAN_NDIMS], co[LLMT_PLAN_NDIMS];
    llmt_status s = llmt_plan_degrees(j->plan, deg);
    if (s == LLMT_OK)
        s = llmt_plan_coords(j->plan, j->rank, co);
    if (s != LLMT_OK)
        return FAIL(s, "plan: %s", llmt_plan_last_error(j->plan));
    j->tp = deg[LLMT_DIM_TP];
    j->tp_rank = co[LLMT_DIM_TP];
    j->pp = deg[LLMT_DIM_PP];
    j->pp_rank = co[LLMT_DIM_PP];
    j->cp = deg[LLMT_DIM_CP];
    j->dp_rank = co[LLMT_DIM_DP];
    return LLMT_OK;
}

/* The directories and files of the run, from the spec and opts. */
static llmt_status paths(llmt_job *j, const llmt_job_opts *o)
{
    const llmt_spec *s = j->spec;
    snprintf(j->name, sizeof j->name, "%s", s->name && *s->name ? s->name : "job");
    if (o->run_dir && *o->run_dir)
        snprintf(j->root_dir, sizeof j->root_dir, "%s", o->run_dir);
    else
        snprintf(j->root_dir, sizeof j->root_dir, "runs/%s", j->name);
    if (j->rank > 0) /* every rank keeps its own data and metrics */
        snprintf(j->run_dir, sizeof j->run_dir, "%.900s/rank-%d", j->root_dir, (int)j->rank);
    else
        snprintf(j->run_dir, sizeof j->run_dir, "%s", j->root_dir);
    if (llmt__job_mkdir_p(j->run_dir) != 0)
        return FAIL(LLMT_ERR_IO, "job: cannot create %s: %s", j->run_dir, strerror(errno));

    /* the local tier is the root: its path, or checkpoint.dir */
    const char *local = NULL;
    j->keep_last = 3;
    j->keep_every = 0;
    for (int i = 0; i < s->checkpoint.ntiers; i++) {
        const llmt_spec_tier *t = &s->checkpoint.tiers[i];
        if (t->kind == LLMT_SPEC_TIER_LOCAL) {
            local = t->path;
            j->keep_last = (int32_t)t->keep_last;
            j->keep_every = (int32_t)t->keep_every;
        } else if (t->kind == LLMT_SPEC_TIER_DURABLE) {
            under(j->durable_dir, sizeof j->durable_dir, j->root_dir, t->path, "durable");
            j->durable_keep_last = (int32_t)t->keep_last;
            j->durable_keep_every = (int32_t)t->keep_every;
        } else if (t->kind == LLMT_SPEC_TIER_PEER) {
            j->peer_tier = 1;
            if (t->path && *t->path)
                under(j->peer_dir, sizeof j->peer_dir, j->root_dir, t->path, "peer");
        }
    }
    if (local && *local && llmt__spec_given(s, "checkpoint.dir") &&
        strcmp(local, s->checkpoint.dir ? s->checkpoint.dir : ""))
        return FAIL(LLMT_ERR_SPEC,
                    "checkpoint.dir %s and the local tier's path %s "
                    "name different roots: give one",
                    s->checkpoint.dir, local);
    under(j->ckpt_dir, sizeof j->ckpt_dir, j->root_dir,
          local && *local ? local : s->checkpoint.dir, "ckpt");
    under(j->jsonl_path, sizeof j->jsonl_path, j->run_dir, s->metrics.jsonl, "metrics.jsonl");
    under(j->plot_path, sizeof j->plot_path, j->run_dir, s->metrics.plot, "loss.svg");
    return LLMT_OK;
}

/* The model and the trainer's settings; the batch comes from the plan,
 * which derived it for this world size (global = micro x accum x dp). */
static llmt_status settings(llmt_job *j, const llmt_job_opts *o)
{
    const llmt_spec *s = j->spec;
    llmt_model_config *c = &j->mc;
    llmt_model_config_init(c, sizeof *c);
    c->arch = s->model.arch == LLMT_SPEC_ARCH_LLAMA ? LLMT_ARCH_LLAMA : LLMT_ARCH_GPT2;
    c->layers = (int32_t)s->model.layers;
    c->width = (int32_t)s->model.hidden;
    c->heads = (int32_t)s->model.heads;
    c->kv_heads = (int32_t)s->model.kv_heads;
    c->ffn_hidden = (int32_t)s->model.ffn;
    c->vocab_size = (int32_t)s->model.vocab;
    c->max_seq_len = (int32_t)s->model.seq_len;
    c->norm_eps = (float)s->model.norm_eps;
    c->rope_theta = (float)s->model.rope_theta;
    c->tie_embeddings = s->model.tied_embeddings;
    c->seed = (uint64_t)s->train.seed;
    if (s->model.moe.experts > 0) { /* refuse.c: llama, cpu, one rank */
        c->moe_experts = (int32_t)s->model.moe.experts;
        c->moe_top_k = (int32_t)s->model.moe.top_k;
        c->moe_ffn = (int32_t)s->model.moe.expert_ffn;
        c->moe_every = (int32_t)s->model.moe.every;
        c->moe_dropless = s->model.moe.dropless;
        c->moe_capacity_factor = (float)s->model.moe.capacity_factor;
        c->moe_aux_loss_coef = (float)s->model.moe.aux_loss_coef;
        c->moe_z_loss_coef = (float)s->model.moe.z_loss_coef;
        c->moe_shared_experts = (int32_t)s->model.moe.shared_experts;
        c->moe_raw_gates = !s->model.moe.renormalize;
    }
    /* pad the embedding rows to a multiple of 64 (llm.c does the same) */
    c->padded_vocab_size = (c->vocab_size + 63) / 64 * 64;

    llmt_plan_estimate e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    llmt_status st = llmt_plan_get_estimate(j->plan, &e);
    if (st != LLMT_OK)
        return FAIL(st, "plan: %s", llmt_plan_last_error(j->plan));
    j->dp = e.dp;
    j->zero = e.zero;
    j->flops_per_step = e.model_flops_per_step;
    j->peak_flops = s->hardware.peak_tflops * 1e12 * (double)j->world;

    llmt_trainer_opts *t = &j->to;
    llmt_trainer_opts_init(t, sizeof *t);
    t->micro_batch = e.micro;
    t->grad_accum = e.grad_accum;
    t->seq_len = c->max_seq_len;
    t->lr = (float)s->optimizer.lr;
    t->beta1 = (float)s->optimizer.beta1;
    t->beta2 = (float)s->optimizer.beta2;
    t->eps = (float)s->optimizer.eps;
    t->weight_decay = (float)s->optimizer.weight_decay;
    t->grad_clip = (float)s->optimizer.grad_clip;
    /* mapped by name: the spec's enum order is not the ABI's */
    switch (s->schedule.kind) {
    case LLMT_SPEC_SCHED_LINEAR: t->schedule = LLMT_LR_LINEAR; break;
    case LLMT_SPEC_SCHED_WSD: t->schedule = LLMT_LR_WSD; break;
    case LLMT_SPEC_SCHED_CONSTANT: t->schedule = LLMT_LR_CONSTANT; break;
    default: t->schedule = LLMT_LR_COSINE; break;
    }
    t->warmup_steps = s->schedule.warmup_steps;
    /* a constant schedule has no floor and no length (the trainer refuses
     * them set beside it; the spec refuses its keys): the defaults stay */
    if (t->schedule != LLMT_LR_CONSTANT) {
        t->total_steps = s->schedule.total_steps;
        t->min_lr = (float)(s->schedule.min_lr_ratio * s->optimizer.lr);
    }
    /* only WSD decays over a fraction; other schedules keep the default
     * (the trainer refuses one set beside them) */
    if (t->schedule == LLMT_LR_WSD && t->total_steps > 0)
        t->decay_fraction = (float)s->schedule.decay_steps / (float)t->total_steps;
    if (t->decay_fraction > 1.0f)
        t->decay_fraction = 1.0f;
    /* trainer opts: 0 none, 1 full (every layer), 2 selective (the
     * attention core only, Korthikanti et al.) */
    t->recompute = s->parallelism.recompute == LLMT_SPEC_RECOMPUTE_FULL        ? 1
                   : s->parallelism.recompute == LLMT_SPEC_RECOMPUTE_SELECTIVE ? 2
                                                                               : 0;
    t->threads = o->threads > 0 ? o->threads : (int32_t)s->train.threads;
    t->device = s->train.device == LLMT_SPEC_DEVICE_CUDA ? LLMT_DEVICE_CUDA : LLMT_DEVICE_CPU;
    if (t->device == LLMT_DEVICE_CUDA && j->world > 1)
        t->device_index = llmt__job_cuda_ordinal(j); /* one GPU per local rank */
    t->deterministic = s->train.deterministic;
    if (s->precision.gemm == LLMT_SPEC_PREC_FP8) {
        t->fp8 = 1;
        t->fp8_amax_history = (int32_t)s->precision.fp8_amax_history;
        t->fp8_margin = (int32_t)s->precision.fp8_margin;
        t->fp8_format =
            s->precision.fp8_format == LLMT_SPEC_FP8_E4M3 ? LLMT_FP8_E4M3 : LLMT_FP8_HYBRID;
    }

    j->steps = s->train.steps;
    if (o->stop_at < 0 || o->stop_at > j->steps)
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "stop_at (--steps) %lld is beyond train.steps %lld (raise "
                    "train.steps: it also shapes the LR schedule)",
                    (long long)o->stop_at, (long long)j->steps);
    j->stop_at = o->stop_at > 0 ? o->stop_at : j->steps;
    j->ckpt_auto = s->checkpoint.interval_auto;
    j->ckpt_interval = j->ckpt_auto ? -1 : s->checkpoint.interval;
    j->ckpt_async = s->checkpoint.async;
    return LLMT_OK;
}

/* The job's communicator (the caller's, or one from the launcher) and the
 * trainer's groups cut from it by the plan: with tp 1 the data-parallel
 * group is the whole world; with tp > 1 the TP group (consecutive ranks)
 * goes to the trainer first, then the DP group (same TP coordinate), as
 * llmt_trainer_set_tp_comm asks. Creating the groups is collective, so
 * every rank does it whatever its degree. */
static llmt_status make_engine(llmt_job *j);
static llmt_status buffers(llmt_job *j);

/* mine: this rank's own part so far (own_parts), agreed on before the
 * groups are made; a rank that failed it still makes the communicator
 * from the environment, whose rendezvous the others wait in. */
static llmt_status attach_comm(llmt_job *j, const llmt_job_opts *o, llmt_status mine)
{
    if (j->world <= 1)
        return mine != LLMT_OK ? mine : make_engine(j);
    llmt_status s;
    if (o->comm) {
        j->comm = o->comm;
    } else {
        llmt_comm_opts co;
        llmt_comm_opts_init(&co, sizeof co);
        if (llmt__spec_given(j->spec, "fault_tolerance.collective_timeout_s"))
            co.timeout_ms = (int64_t)(j->spec->fault_tolerance.collective_timeout_s * 1000.0);
        s = llmt_comm_create_from_env(j->ctx, &co, &j->comm);
        if (s != LLMT_OK && mine != LLMT_OK)
            return mine; /* its own reason first */
        if (s != LLMT_OK)
            return FAIL(s, "job: communicator: %s", llmt_context_last_error(j->ctx));
        j->own_comm = 1;
    }
    if ((s = llmt__job_agree_own(j, mine)) != LLMT_OK)
        return s;
    return llmt__job_attach_groups(j);
}

/* The trainer's engine, made once now that every group is recorded
 * (lib/train/trainer_build.c), its device context on lib/obs's timed op
 * table (made inside this window), so that its errors come from the job's
 * creation and the first step times only the step. */
static llmt_status make_engine(llmt_job *j)
{
    llmt__obs_remake_begin(j->obs);
    llmt_status s = llmt__trainer_ready(j->tr);
    llmt__obs_remake_end();
    if (s != LLMT_OK)
        s = FAIL(s, "%s", llmt_trainer_last_error(j->tr));
    else
        s = llmt__job_shares_reserve(j);
    if (s == LLMT_OK && !j->in) /* at the creation (an in-place recovery has them) */
        s = buffers(j);
    if (s != LLMT_OK && j->world > 1) { /* which rank, in every rank's log */
        char why[LLMT_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", j->err.msg);
        s = FAIL(s, "rank %d: %s", (int)j->rank, why);
    }
    /* each rank's own allocations (the engine, data parallelism's shares
     * and staging, the SDC copy, the batch and validation buffers) and its
     * validation read: a rank that failed would return alone and the
     * others wait in their next collective until its timeout */
    if (j->comm && j->world > 1)
        s = llmt__job_agree(j, s, "job: making the trainer's engine");
    if (s != LLMT_OK)
        return s;
    llmt__job_pp_copies_plan(j);
    return LLMT_OK;
}

static llmt_status attach_groups(llmt_job *j);

/* The groups and the trainer's attachment to them, from j->comm (job
 * creation, and an in-place recovery with its new communicator), then
 * the engine made from them. */
llmt_status llmt__job_attach_groups(llmt_job *j)
{
    llmt_status s = attach_groups(j);
    return s != LLMT_OK ? s : make_engine(j);
}

static llmt_status attach_groups(llmt_job *j)
{
    llmt_status s;
    if (j->tp <= 1 && j->cp <= 1 && j->pp <= 1) {
        j->dp_comm = j->comm;
    } else if (j->tp <= 1 && j->pp <= 1) { /* context parallel: its own groups (cp_attach.c) */
        if ((s = llmt__job_attach_cp(j)) != LLMT_OK)
            return s;
    } else {
        s = j->tp > 1 ? llmt_comm_create_plan_group(j->comm, j->plan, LLMT_DIM_TP, &j->tp_comm)
                      : LLMT_OK;
        if (s == LLMT_OK && j->dp > 1)
            s = llmt_comm_create_plan_group(j->comm, j->plan, LLMT_DIM_DP, &j->dp_comm);
        if (s != LLMT_OK)
            return FAIL(s, "job: the tp %d x dp %d groups: %s", (int)j->tp, (int)j->dp,
                        llmt_comm_last_error(j->comm));
        llmt__obs_remake_begin(j->obs); /* the engine is made again, timed */
        s = j->tp > 1 ? llmt_trainer_set_tp_comm(j->tr, j->tp_comm) : LLMT_OK;
        llmt__obs_remake_end();
        if (s != LLMT_OK)
            return FAIL(s, "parallelism.tp: %d: %s", (int)j->tp,
                        llmt_trainer_last_error(j->tr));
        if (j->spec->parallelism.sequence_parallel) { /* over the same group */
            llmt__obs_remake_begin(j->obs);
            s = llmt_trainer_set_sequence_parallel(j->tr, 1);
            llmt__obs_remake_end();
            if (s != LLMT_OK)
                return FAIL(s, "parallelism.sequence_parallel: %s",
                            llmt_trainer_last_error(j->tr));
        }
        if (j->cp > 1 && (s = llmt__job_attach_cp(j)) != LLMT_OK)
            return s; /* after tensor parallelism, before data parallelism */
        if (j->pp > 1 && (s = llmt__job_attach_pp(j)) != LLMT_OK)
            return s; /* after tensor (and sequence) parallelism, before data */
    }
    j->group_comm[LLMT_JOB_GROUP_DP] = j->dp_comm;
    j->group_comm[LLMT_JOB_GROUP_TP] = j->tp_comm;
    if (j->spec->parallelism.ep > 1 && (s = llmt__job_attach_ep(j)) != LLMT_OK)
        return s; /* inside the DP group (moe_attach.c) */
    if (!j->dp_comm)
        return LLMT_OK; /* dp 1: nothing to reduce across replicas */
    llmt_comm *dpc = j->dp_comm;
    if (j->to.device == LLMT_DEVICE_CUDA) { /* device memory: over NCCL */
        s = llmt__job_device_group(j, j->dp_comm, "data parallel", &j->dp_dev_comm);
        if (s != LLMT_OK)
            return s;
        dpc = j->group_comm[LLMT_JOB_GROUP_DP] = j->dp_dev_comm;
    }
    llmt_dp_opts d;
    llmt_dp_opts_init(&d, sizeof d);
    d.zero_stage = j->zero;
    s = llmt_trainer_set_comm(j->tr, dpc, &d);
    if (s != LLMT_OK)
        return FAIL(s, "%s", llmt_trainer_last_error(j->tr));
    return LLMT_OK;
}

static llmt_status buffers(llmt_job *j)
{
    int B = j->to.micro_batch, T = j->to.seq_len, A = j->to.grad_accum;
    size_t per = (size_t)B * A * T;
    int64_t eb = j->spec->train.eval_batches > 0 ? j->spec->train.eval_batches : 1;
    j->in = malloc(per * sizeof(int32_t));
    j->tg = malloc(per * sizeof(int32_t));
    if (!j->in || !j->tg)
        return FAIL(LLMT_ERR_OUT_OF_MEMORY,
                    "job: no memory for a step's batch: batch.micro %d x batch.grad_accum %d "
                    "x model.seq_len %d tokens (twice, 4 bytes each); lower them",
                    B, A, T);
    /* the validation sequences are held in memory, counted in an int */
    int64_t want = eb * B;
    if (want > INT32_MAX / (T > 0 ? T : 1))
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "train.eval_batches: %lld x batch.micro %d sequences of model.seq_len %d "
                    "tokens are more than one validation holds in memory (2^31 tokens); "
                    "lower train.eval_batches",
                    (long long)eb, B, T);
    int nval = (int)want;
    j->vin = malloc((size_t)nval * T * sizeof(int32_t));
    j->vtg = malloc((size_t)nval * T * sizeof(int32_t));
    if (!j->vin || !j->vtg)
        return FAIL(LLMT_ERR_OUT_OF_MEMORY,
                    "train.eval_batches: no memory for %lld x batch.micro %d validation "
                    "sequences of %d tokens; lower train.eval_batches",
                    (long long)eb, B, T);
    nval = llmt__job_data_val(&j->data, j->vin, j->vtg, nval);
    if (nval < B) /* where the sequences came from, and what would help */
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "%s holds %d sequence%s of model.seq_len %d tokens, fewer than one "
                    "batch of batch.micro %d: give more validation data (%s), or lower "
                    "batch.micro or model.seq_len",
                    llmt__spec_given(j->spec, "data.val")
                        ? "data.val: the validation data"
                        : "the validation split of data.train's preparation",
                    nval, nval == 1 ? "" : "s", T, B,
                    llmt__spec_given(j->spec, "data.val")
                        ? "more text or shards in data.val"
                        : "data.val, or a larger --val-frac in data prepare");
    nval -= nval % B;
    /* fewer than asked: each validation uses what the split holds (a
     * spec's count may outgrow a small corpus), and says so once */
    if (nval < want)
        llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                  "train.eval_batches %lld: the validation data holds %d batches of "
                  "batch.micro %d sequences of %d tokens; each validation uses those %d",
                  (long long)eb, nval / B, B, T, nval / B);
    j->nval = nval;
    return LLMT_OK;
}

/* Where the run starts (issue 14's rules, the same for every host):
 * resume loads the newest usable checkpoint (local tier, then durable) or,
 * with none at all, starts at step 0; checkpoints that exist but are all
 * unusable stop the run with their list unless `fresh` says to start over.
 * Then every step directory newer than the start (broken, else it would
 * have been used) is quarantined, so the steps retrained can be saved
 * again; a fresh start over a valid checkpoint is refused there. */
static llmt_status begin(llmt_job *j, const llmt_job_opts *o)
{
    int64_t step = -1;
    if (o->resume) {
        llmt_status s = llmt__job_restore(j, 1, &step);
        if (s == LLMT_ERR_CHECKSUM && j->fresh) {
            /* none usable, and a corrupt one was partly read into the
             * model before its checksum failed: step 0's state is gone
             * from this process (the model is not made again here) */
            char why[LLMT_ERR_MSG_MAX];
            snprintf(why, sizeof why, "%s", j->err.msg);
            if ((s = llmt__job_quarantine(j, -1)) != LLMT_OK)
                return s;
            return FAIL(LLMT_ERR_CHECKSUM,
                        "--resume --fresh: %s\nthe unusable step directories were moved to "
                        "%s/quarantine (kept, not deleted), but a corrupt one had been partly "
                        "read into this job's model before its checksum failed, so this job "
                        "cannot start from step 0: run the same command again (it then "
                        "starts from step 0; metrics are kept)",
                        why, j->ckpt_dir);
        } else if (s == LLMT_ERR_NOT_FOUND && j->fresh) {
            llmt__log(j->ctx, LLMT_LOG_WARN, "job", "fresh start as asked: %s", j->err.msg);
            snprintf(j->resume_note, sizeof j->resume_note,
                     "no usable checkpoint in %s: starting from step 0 (--fresh)", j->ckpt_dir);
            llmt__err_clear(&j->err);
            step = -1;
        } else if (s == LLMT_ERR_NOT_FOUND || s == LLMT_ERR_CHECKSUM) {
            return FAIL(s,
                        "--resume: %s\nnothing was changed. Restore a checkpoint "
                        "(doc/runbook.md), or start over from step 0 with --fresh "
                        "(llmt_job_opts.fresh; unusable step directories are moved to "
                        "%s/quarantine, metrics are kept)",
                        j->err.msg, j->ckpt_dir);
        } else if (s != LLMT_OK) {
            return s;
        } else if (step < 0) {
            snprintf(j->resume_note, sizeof j->resume_note,
                     "no checkpoint in %s: starting from step 0", j->ckpt_dir);
        }
    }
    /* a restore quarantined what is newer than its step already */
    if ((o->resume || o->fresh) && step < 0) {
        llmt_status s = llmt__job_quarantine(j, -1);
        if (s == LLMT_ERR_STATE && o->fresh) /* a valid checkpoint: say what --fresh does */
            return FAIL(s,
                        "--fresh: %s\n--fresh (llmt_job_opts.fresh) starts from step 0 only "
                        "when no checkpoint in %s is usable (it then moves them to "
                        "%s/quarantine); nothing was moved or changed. Continue from the "
                        "newest valid step with --resume (llmt_job_opts.resume), or choose "
                        "another run directory (--out)",
                        j->err.msg, j->ckpt_dir, j->ckpt_dir);
        if (s != LLMT_OK)
            return s;
    }
    if (step >= 0) {
        j->start_step = step;
        j->resumed = 1;
        j->last.step = step;
    }
    llmt__job_metrics_line(j, "{\"event\":\"%s\",\"step\":%lld,\"world_size\":%d}",
                           step >= 0 ? "resume" : "start", (long long)(step >= 0 ? step : 0),
                           (int)j->world);
    if (j->ck && j->ck->node_local) /* ckpt_shared.c found it */
        llmt__job_metrics_line(j, "{\"event\":\"ckpt_root\",\"node_local\":true,"
                                  "\"commits_in\":\"durable\"}");
    return LLMT_OK;
}

/* A tokenizer read from a file (data.tokenizer.path, or the one prepared
 * shards come with) decides the vocabulary and its kind; tokenizer keys
 * that say otherwise would be silently overridden, so they are refused.
 * The kind is the one the tokenizer records (tokenizer.bin's "kind" line,
 * or how it was built); shards themselves record only their vocabulary
 * size. A learned BPE may stop short of vocab_size on a small corpus. */
static const char *const spec_tok_kind[] = {"byte", "bpe", "gpt2"};

static int spec_kind_of(const llmt_tokenizer *t)
{
    return t->kind == TOK_KIND_BYTES  ? LLMT_SPEC_TOK_BYTE
           : t->kind == TOK_KIND_GPT2 ? LLMT_SPEC_TOK_GPT2
                                      : LLMT_SPEC_TOK_BPE;
}

static llmt_status tokenizer_agrees(llmt_job *j)
{
    const llmt_spec *s = j->spec;
    int32_t v = j->data.vocab;
    int kind = s->data.tokenizer.kind;
    int have = j->data.tok ? spec_kind_of(j->data.tok) : kind;
    if (llmt__spec_given(s, "data.tokenizer.kind") && kind != have)
        return FAIL(LLMT_ERR_SPEC,
                    "data.tokenizer.kind: %s, but the tokenizer in use "
                    "(from data.tokenizer.path or the prepared shards' tokenizer.bin) "
                    "is a %s tokenizer of %d tokens: give the kind it is, or other data",
                    spec_tok_kind[kind], spec_tok_kind[have], (int)v);
    int64_t want = s->data.tokenizer.vocab_size;
    if (llmt__spec_given(s, "data.tokenizer.vocab_size") && v != want &&
        !(kind == LLMT_SPEC_TOK_BPE && v < want))
        return FAIL(LLMT_ERR_SPEC,
                    "data.tokenizer.vocab_size: %lld, but the tokenizer "
                    "in use has %d tokens: remove the key or use matching data",
                    (long long)want, (int)v);
    return LLMT_OK;
}

/* This rank's own part of the creation, before any collective: its run
 * directory, its data (each rank opens and reads its own), the tokenizer's
 * and model's checks against them, its model, trainer and checkpoint
 * store. The first failure returns; attach_comm agrees on it. */
static llmt_status own_parts(llmt_job *j, const llmt_job_opts *o)
{
    llmt_status s;
    if ((s = paths(j, o)) != LLMT_OK)
        return s;
    job_data_opts d = {j->run_dir,       j->spec,    j->to.seq_len, j->to.micro_batch,
                       j->to.grad_accum, j->dp_rank, j->dp,         o->resume || o->fresh};
    if ((s = llmt__job_data_open(j, &j->data, &d)) != LLMT_OK)
        return s;
    if ((s = tokenizer_agrees(j)) != LLMT_OK)
        return s;
    if (j->data.vocab > j->mc.vocab_size)
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "model.vocab %d is too small for the tokenizer's %d tokens "
                    "(raise model.vocab or lower data.tokenizer.vocab_size)",
                    (int)j->mc.vocab_size, (int)j->data.vocab);
    s = llmt_model_create(j->ctx, &j->mc, &j->model);
    if (s != LLMT_OK)
        return FAIL(s, "%s", llmt_context_last_error(j->ctx));
    llmt_model_param_count(j->model, NULL, &j->params);
    if (llmt__spec_given(j->spec, "model.params") &&
        fabs((double)j->params - j->spec->model.params) > 0.1 * j->spec->model.params)
        return FAIL(LLMT_ERR_SPEC,
                    "model.params %.4g disagrees with the shape the "
                    "spec gives (%lld parameters): the job builds the shape; fix or "
                    "remove model.params",
                    j->spec->model.params, (long long)j->params);
    int s_dev = (int)j->spec->train.device;
    s = llmt__job_trainer_create(j); /* on lib/obs's timed op table */
    if (s != LLMT_OK)
        return FAIL(s, "%s%s",
                    s_dev == LLMT_SPEC_DEVICE_CUDA       ? "train.device cuda: "
                    : s_dev == LLMT_SPEC_DEVICE_EMULATED ? "train.device emulated: "
                                                         : "",
                    llmt_model_last_error(j->model));
    return llmt__job_ckpt_open(j); /* its directory, local */
}

/* This rank's own part after the checkpoint root's check: checkpoints
 * left in the root (a node-local root may hold some on one node only),
 * its metrics file and server (a port in use on its node), the drills of
 * its $LLMT_FAULT. */
static llmt_status own_late(llmt_job *j, const llmt_job_opts *o)
{
    size_t have = 0;
    if (!o->resume && !o->fresh && llmt_ckpt_list(j->ck, NULL, 0, &have) == LLMT_OK && have > 0)
        return FAIL(LLMT_ERR_STATE,
                    "%s already holds %zu checkpoint(s) of an earlier "
                    "run: continue it with --resume (llmt_job_opts.resume), or choose "
                    "another run directory (--out)",
                    j->ckpt_dir, have);
    llmt_status s = llmt__job_metrics_open(j);
    return s != LLMT_OK ? s : llmt__job_fault_parse(j);
}

static llmt_status create(llmt_job *j, const llmt_job_opts *o)
{
    llmt_status s;
    if ((s = where(j, o)) != LLMT_OK)
        return s;
    /* the straggler report's streaks: one per rank, whatever the world */
    j->strag_streak = calloc((size_t)j->world, sizeof *j->strag_streak);
    if (!j->strag_streak)
        return FAIL(LLMT_ERR_OUT_OF_MEMORY,
                    "job: no memory for the straggler report's %d per-rank counts",
                    (int)j->world);
    if ((s = llmt__job_check_spec(j)) != LLMT_OK)
        return s;
    if ((s = llmt__job_check_caller_comm(j, o->comm)) != LLMT_OK)
        return s;
    if ((s = layout(j)) != LLMT_OK)
        return s;
    s = llmt_plan_create(j->ctx, j->spec, j->world, &j->plan);
    if (s != LLMT_OK)
        return FAIL(s, "plan: %s", llmt_context_last_error(j->ctx));
    if ((s = coords(j)) != LLMT_OK)
        return s;
    if ((s = settings(j, o)) != LLMT_OK)
        return s;
    if ((s = tp_fits(j)) != LLMT_OK)
        return s;
    /* a rank's own failure there is agreed on with the communicator */
    s = own_parts(j, o);
    if ((s = attach_comm(j, o, s)) != LLMT_OK)
        return s;
    /* a root that is not one directory for every rank never commits a
     * step (ckpt_shared.c): said now, not at the first restart; also with
     * checkpoint.interval 0, whose run still saves (its final step, a stop,
     * llmt_job_save) and whose parts need the run's attempt identity */
    if ((s = llmt__job_ckpt_shared(j)) != LLMT_OK)
        return s;
    /* agreed before the restore's collectives, as own_parts */
    s = own_late(j, o);
    if (j->comm && j->world > 1)
        s = llmt__job_agree_own(j, s);
    if (s != LLMT_OK)
        return s;
    j->last_saved = -1;
    j->last.struct_size = sizeof j->last;
    j->last.val_loss = j->last.start_val_loss = NAN;
    j->last.saved_step = -1;
    return begin(j, o);
}

LLMT_API llmt_status llmt_job_create(llmt_context *ctx, const llmt_spec *spec,
                                     const llmt_job_opts *opts, llmt_job **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "job: create", spec);
    LLMT__NONNULL(ce, "job: create", out);
    *out = NULL;
    llmt_job_opts o;
    llmt_job_opts_init(&o, sizeof o);
    if (opts) {
        llmt_status s = llmt__opts_copy(ce, "job opts", &o, sizeof o, opts);
        if (s != LLMT_OK)
            return s;
    }
    llmt_job *j = calloc(1, sizeof *j);
    if (!j)
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "job: no memory");
    j->ctx = ctx;
    j->fresh = o.fresh;
    j->spec = llmt__spec_clone_into(spec, ctx); /* owned: not the spec's ctx */
    llmt_status s = j->spec ? create(j, &o)
                            : llmt__err_set(&j->err, LLMT_ERR_OUT_OF_MEMORY, "job: no memory");
    if (s != LLMT_OK) {
        llmt__err_set(ce, s, "%s", j->err.msg);
        llmt_job_destroy(j);
        return s;
    }
    *out = j;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_job_create_from_file(llmt_context *ctx, const char *spec_path,
                                               const llmt_job_opts *opts, llmt_job **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "job: create", spec_path);
    llmt_spec *sp = NULL;
    llmt_status s = llmt_spec_parse_file(ctx, spec_path, &sp);
    if (s != LLMT_OK)
        return s;
    s = llmt_job_create(ctx, sp, opts, out);
    llmt_spec_destroy(sp);
    return s;
}

LLMT_API llmt_status llmt_job_create_from_json(llmt_context *ctx, const char *json, size_t len,
                                               const llmt_job_opts *opts, llmt_job **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "job: create", json);
    llmt_spec *sp = NULL;
    llmt_status s = llmt_spec_parse_json(ctx, json, len, &sp);
    if (s != LLMT_OK)
        return s;
    s = llmt_job_create(ctx, sp, opts, out);
    llmt_spec_destroy(sp);
    return s;
}

LLMT_API void llmt_job_destroy(llmt_job *j)
{
    if (!j)
        return;
    if (j->ck) {
        llmt_ckpt_wait(j->ck, -1);
        llmt_ckpt_destroy(j->ck);
    }
    if (j->jsonl)
        fclose(j->jsonl);
    llmt_trainer_destroy(j->tr); /* before its communicator */
    llmt__job_obs_free(j);       /* after the trainer that uses its op table */
    llmt_comm_destroy(j->dp_dev_comm);
    if (j->dp_comm != j->comm)
        llmt_comm_destroy(j->dp_comm); /* groups before the comm they came from */
    llmt_comm_destroy(j->tp_comm);
    llmt_comm_destroy(j->cp_comm);
    llmt_comm_destroy(j->ep_comm);
    llmt_comm_destroy(j->pp_comm);
    if (j->own_comm)
        llmt_comm_destroy(j->comm);
    llmt_model_destroy(j->model);
    llmt__job_data_free(&j->data);
    llmt__job_sdc_free(j);
    llmt_plan_destroy(j->plan);
    llmt_spec_destroy(j->spec);
    free(j->victim_copy); /* fault.c: a drill of a step that did not end */
    free(j->strag_streak);
    free(j->in);
    free(j->tg);
    free(j->vin);
    free(j->vtg);
    free(j);
}

LLMT_API const char *llmt_job_last_error(const llmt_job *j)
{
    return j ? j->err.msg : "job: NULL handle";
}

LLMT_API llmt_status llmt_job_get_plan(const llmt_job *j, const llmt_plan **out)
{
    if (!j)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&j->err, "job: get_plan", out);
    *out = j->plan;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_job_get_info(const llmt_job *j, llmt_job_info *out)
{
    if (!j)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = (llmt_err *)&j->err;
    LLMT__NONNULL(e, "job: get_info", out);
    if (out->struct_size < sizeof(size_t))
        return llmt__err_set(e, LLMT_ERR_STRUCT_SIZE,
                             "job: llmt_job_info.struct_size %zu is not set", out->struct_size);
    llmt_job_info i;
    memset(&i, 0, sizeof i);
    i.struct_size = out->struct_size;
    const llmt_spec *s = j->spec;
    i.name = j->name;
    i.run_dir = j->run_dir;
    i.ckpt_dir = j->ckpt_dir;
    i.durable_dir = j->durable_dir;
    i.metrics_path = j->jsonl_path;
    i.plot_path = j->plot_path;
    i.data_desc = j->data.desc;
    i.data_note = j->data.note;
    i.resume_note = j->resume_note;
    i.world_size = j->world;
    i.rank = j->rank;
    i.local_rank = j->local_rank;
    i.dp = j->dp;
    i.zero = j->dp > 1 ? j->zero : 0;
    i.arch = j->mc.arch;
    i.layers = j->mc.layers;
    i.width = j->mc.width;
    i.heads = j->mc.heads;
    i.vocab = j->data.vocab;
    i.params = j->params;
    i.micro_batch = j->to.micro_batch;
    i.grad_accum = j->to.grad_accum;
    i.seq_len = j->to.seq_len;
    i.global_batch = (int64_t)j->to.micro_batch * j->to.grad_accum * j->dp;
    i.steps = j->steps;
    i.stop_at = j->stop_at;
    i.start_step = j->start_step;
    i.device = j->to.device;
    i.ckpt_node_local = j->ck && j->ck->node_local;
    i.engine = s->train.device == LLMT_SPEC_DEVICE_CUDA       ? "cuda"
               : s->train.device == LLMT_SPEC_DEVICE_EMULATED ? "emulated"
                                                              : "cpu";
    i.recompute = j->to.recompute;
    i.threads = j->to.threads;
    i.deterministic = j->to.deterministic;
    i.fp8 = j->to.fp8;
    i.train_tokens = j->data.n_train;
    i.val_tokens = j->data.n_val;
    i.unigram_entropy = j->data.unigram_entropy;
    i.ckpt_async = j->ckpt_async;
    i.ckpt_auto = j->ckpt_auto;
    i.ckpt_interval = j->ckpt_interval;
    i.keep_last = j->keep_last;
    i.keep_every = j->keep_every;
    i.durable_keep_last = j->durable_keep_last;
    i.durable_keep_every = j->durable_keep_every;
    i.auto_stall_s = j->auto_stall_s;
    i.auto_write_s = j->auto_write_s;
    i.auto_mtbf_s = j->auto_mtbf_s;
    i.auto_step_s = j->auto_step_s;
    i.auto_interval_s = j->auto_interval_s;
    i.gpu_failures_per_hour = s->fault_tolerance.gpu_failures_per_hour;
    i.interval_note = j->interval_note;
    i.anomaly_policy = s->fault_tolerance.anomaly.policy;
    i.anomaly_zscore = s->fault_tolerance.anomaly.zscore;
    /* what the job's communicator does (a default of its own, or the
     * caller's), not only what the spec says */
    i.collective_timeout_s = j->comm ? (double)j->comm->timeout_ms / 1000.0
                                     : s->fault_tolerance.collective_timeout_s;
    i.sample_tokens = s->train.sample_tokens;
    llmt_comm_backend be = LLMT_COMM_AUTO;
    if (j->comm)
        llmt_comm_backend_of(j->comm, &be);
    i.comm_backend = !j->comm               ? ""
                     : be == LLMT_COMM_MPI  ? "mpi"
                     : be == LLMT_COMM_NCCL ? "nccl"
                     : be == LLMT_COMM_GLOO ? "gloo"
                                            : "inproc";
    size_t n = out->struct_size < sizeof i ? out->struct_size : sizeof i;
    memcpy(out, &i, n);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_job_get_metrics(const llmt_job *j, llmt_job_metrics *out)
{
    if (!j)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = (llmt_err *)&j->err;
    LLMT__NONNULL(e, "job: metrics", out);
    if (out->struct_size < sizeof(size_t))
        return llmt__err_set(e, LLMT_ERR_STRUCT_SIZE,
                             "job: llmt_job_metrics.struct_size %zu is not set",
                             out->struct_size);
    size_t n = out->struct_size < sizeof j->last ? out->struct_size : sizeof j->last;
    size_t keep = out->struct_size;
    memcpy(out, &j->last, n);
    out->struct_size = keep;
    return LLMT_OK;
}
