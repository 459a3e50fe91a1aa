/* The trainer: the public llmt_trainer over the one engine
 * (lib/train/device.c), on any backend of the op table (the fp32 CPU, the
 * bf16 host emulation, CUDA): gradient accumulation over micro-batches,
 * global-norm clipping, AdamW and the LR schedule, evaluation and
 * sampling, data parallelism (lib/train/dp.c, whose hooks the engine runs
 * inside its graph). Tensor, sequence, pipeline and context parallelism
 * attach in trainer_parallel.c; the state both share is trainer_impl.h.
 * The model graph itself is in the engine only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/exec.h"
#include "model/model.h"
#include "train/pp_infer.h"
#include "train/trainer_impl.h"
#include "train/trainer_state.h"

LLMT_API llmt_status llmt_trainer_opts_init(llmt_trainer_opts *o, size_t size)
{
    llmt_trainer_opts d = {0};
    d.micro_batch = 4;
    d.seq_len = 64;
    d.grad_accum = 1;
    d.schedule = LLMT_LR_COSINE;
    d.lr = 3e-4f;
    d.min_lr = 0.0f;
    d.warmup_steps = 0;
    d.total_steps = 1000;
    d.decay_fraction = 0.2f;
    d.beta1 = 0.9f;
    d.beta2 = 0.95f;
    d.eps = 1e-8f;
    d.weight_decay = 0.1f;
    d.grad_clip = 1.0f;
    d.recompute = 0;
    d.threads = 0;
    d.device = LLMT_DEVICE_CPU;
    d.device_index = 0;
    d.deterministic = 0;
    d.fp8 = 0;
    d.fp8_amax_history = 16;
    d.fp8_margin = 0;
    d.fp8_format = LLMT_FP8_HYBRID;
    return llmt__opts_init(o, size, 0, &d, sizeof d, "llmt_trainer_opts");
}

LLMT_API const char *llmt_trainer_last_error(const llmt_trainer *tr)
{
    return tr ? tr->err.msg : "trainer: NULL handle";
}

LLMT_API void llmt_trainer_destroy(llmt_trainer *tr)
{
    if (!tr) return;
    llmt_context *ctx = tr->ctx;
    llmt__dp_destroy(tr->dp);
    /* the pipeline's buffers are the engine's: it goes first */
    llmt__pp_destroy(tr->pp);
    llmt__devtrain_destroy(tr->dev); /* grads, m and v are its mirrors */
    llmt__tp_destroy(tr->tp);
    llmt__cp_destroy(tr->cp);
    free(tr->cp_in);
    free(tr->cp_tg);
    free(tr->pp_layers);
    if (tr->gen_ctx) llmt__free(ctx, tr->gen_ctx, (size_t)tr->T * sizeof(int32_t));
    llmt__free(ctx, tr, sizeof *tr);
}

/* The engine behind the trainer is made later, once, with every
 * parallel group known (trainer_build.c); what its creation would refuse
 * whatever the groups (no device, a head dim the kernels cannot take) is
 * refused now. Its mirrors will stand in for grads, m and v. */
static llmt_status create_device(llmt_trainer *tr, const llmt__dev_ops *ops)
{
    llmt_err *me = &tr->model->err;
    tr->gen_ctx = llmt__alloc(tr->ctx, (size_t)tr->T * sizeof(int32_t), 64);
    if (!tr->gen_ctx)
        return llmt__err_set(me, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    llmt__dev_opts d = {tr->o.device_index, tr->o.deterministic};
    llmt_status s = llmt__devtrain_probe(&tr->err, ops, &d, tr->model);
    if (s != LLMT_OK)
        return llmt__err_set(me, s, "%s", tr->err.msg);
    return LLMT_OK;
}

static llmt_status create_with(llmt_model *model, const llmt_trainer_opts *opts,
                               const llmt__dev_ops *dev_ops, llmt_trainer **out);

LLMT_API llmt_status llmt_trainer_create(llmt_model *model, const llmt_trainer_opts *opts,
                                         llmt_trainer **out)
{
    return create_with(model, opts, NULL, out);
}

/* Tests: a device trainer on the given op table (e.g. the host emulation,
 * llmt__dev_emul()), whatever opts->device says. */
llmt_status llmt__trainer_create_dev(llmt_model *model, const llmt_trainer_opts *opts,
                                     const llmt__dev_ops *ops, llmt_trainer **out)
{
    return create_with(model, opts, ops, out);
}

static llmt_status create_with(llmt_model *model, const llmt_trainer_opts *opts,
                               const llmt__dev_ops *dev_ops, llmt_trainer **out)
{
    if (!model) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&model->err, "trainer: create", out);
    *out = NULL;
    llmt_err *me = &model->err;
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    if (opts) {
        llmt_status s = llmt__opts_copy(me, "llmt_trainer_opts", &o, sizeof o,
                                        opts);
        if (s != LLMT_OK) return s;
    }
    o.struct_size = sizeof o;
    const llmt_model_config *c = &model->cfg;
    if (o.micro_batch < 1 || o.grad_accum < 1 || o.seq_len < 1)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: micro_batch %d, grad_accum %d and "
                             "seq_len %d must be >= 1", (int)o.micro_batch,
                             (int)o.grad_accum, (int)o.seq_len);
    if (o.seq_len > c->max_seq_len)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: seq_len %d exceeds the model's "
                             "max_seq_len %d", (int)o.seq_len,
                             (int)c->max_seq_len);
    if (o.schedule < LLMT_LR_CONSTANT || o.schedule > LLMT_LR_WSD)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: schedule %d unknown", (int)o.schedule);
    if (!(o.min_lr >= 0.0f)) /* the schedule would step backwards */
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT, "trainer: min_lr %g must be >= 0",
                             (double)o.min_lr);
    if (!(o.lr >= 0.0f) || !(o.beta1 >= 0.0f && o.beta1 < 1.0f) ||
        !(o.beta2 >= 0.0f && o.beta2 < 1.0f) || !(o.eps > 0.0f) ||
        !(o.weight_decay >= 0.0f) || !(o.grad_clip >= 0.0f) ||
        o.total_steps < 1 || o.warmup_steps < 0 ||
        !(o.decay_fraction >= 0.0f && o.decay_fraction <= 1.0f))
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: optimizer options out of range (lr "
                             ">= 0, betas in [0,1), eps > 0, weight_decay "
                             ">= 0, grad_clip >= 0, total_steps >= 1, "
                             "decay_fraction in [0,1])");
    /* only WSD decays over a fraction of total_steps (lr_at): set beside
     * another schedule, it would be ignored */
    static const char *const sched_name[3] = {"LLMT_LR_CONSTANT", "LLMT_LR_COSINE",
                                              "LLMT_LR_LINEAR"};
    if (o.schedule != LLMT_LR_WSD && o.decay_fraction != 0.2f)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: decay_fraction %g is set but schedule is %s (%d): "
                             "it takes effect only with LLMT_LR_WSD (3) (leave it 0.2)",
                             (double)o.decay_fraction, sched_name[o.schedule], (int)o.schedule);
    /* a constant schedule never decays (lr_at): its floor and its length
     * would be ignored; warmup_steps does take effect */
    if (o.schedule == LLMT_LR_CONSTANT && o.min_lr != 0.0f)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: min_lr %g is set but schedule is LLMT_LR_CONSTANT (0), "
                             "which never decays: it takes effect only with LLMT_LR_COSINE, "
                             "LLMT_LR_LINEAR or LLMT_LR_WSD (leave it 0)",
                             (double)o.min_lr);
    if (o.schedule == LLMT_LR_CONSTANT && o.total_steps != 1000)
        return llmt__err_set(
            me, LLMT_ERR_INVALID_ARGUMENT,
            "trainer: total_steps %lld is set but schedule is LLMT_LR_CONSTANT "
            "(0), which never decays: the schedule's length takes effect only "
            "with LLMT_LR_COSINE, LLMT_LR_LINEAR or LLMT_LR_WSD (leave it 1000)",
            (long long)o.total_steps);
    if (o.recompute < LLMT__RECOMPUTE_NONE || o.recompute > LLMT__RECOMPUTE_SELECTIVE)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: recompute %d is not 0 (none), 1 (full: layer "
                             "inputs only) or 2 (selective: attention core only)",
                             (int)o.recompute);
    if (o.device != LLMT_DEVICE_CPU && o.device != LLMT_DEVICE_CUDA)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: device %d is not LLMT_DEVICE_CPU (0) or "
                             "LLMT_DEVICE_CUDA (1)", (int)o.device);
    if (o.device == LLMT_DEVICE_CUDA && !dev_ops) {
        dev_ops = llmt__dev_cuda();
        if (!dev_ops)
            return llmt__err_set(me, LLMT_ERR_UNSUPPORTED,
                                 "trainer: device cuda: this build of llmtrain has "
                                 "no CUDA backend (build with nvcc on PATH; "
                                 "doc/gpu.md)");
    }
    if (o.fp8 != 0 && o.fp8 != 1)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: fp8 %d is not 0 (off) or 1 (delayed "
                             "per-tensor scaling)", (int)o.fp8);
    if (o.fp8 && !dev_ops)
        return llmt__err_set(me, LLMT_ERR_UNSUPPORTED,
                             "trainer: fp8 GEMMs run on a device trainer only "
                             "(device cuda); the CPU trainer is fp32");
    if (o.fp8 && (o.fp8_amax_history < 1 || o.fp8_amax_history > 1024 ||
                  o.fp8_margin < 0 || o.fp8_margin > 16))
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: fp8_amax_history %d (1..1024) or "
                             "fp8_margin %d (0..16) out of range",
                             (int)o.fp8_amax_history, (int)o.fp8_margin);
    /* the recipe's options act only with fp8: set without it, refused */
    if (!o.fp8 &&
        (o.fp8_amax_history != 16 || o.fp8_margin != 0 || o.fp8_format != LLMT_FP8_HYBRID))
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: %s is set but fp8 is 0: the fp8 options take effect "
                             "only with fp8 1 (leave them at their defaults)",
                             o.fp8_amax_history != 16 ? "fp8_amax_history"
                             : o.fp8_margin != 0      ? "fp8_margin"
                                                      : "fp8_format");
    if (o.fp8 && o.fp8_format != LLMT_FP8_E4M3 && o.fp8_format != LLMT_FP8_HYBRID)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: fp8_format %d is not LLMT_FP8_E4M3 (0) or "
                             "LLMT_FP8_HYBRID (1)",
                             (int)o.fp8_format);
    if (o.device_index < 0)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: device_index %d < 0", (int)o.device_index);
    /* the CPU trainer has no device to pick: an ordinal would be ignored */
    if (!dev_ops && o.device_index != 0)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: device_index %d is set but device is LLMT_DEVICE_CPU: "
                             "the ordinal takes effect only with LLMT_DEVICE_CUDA (leave it 0)",
                             (int)o.device_index);
    if (o.deterministic != 0 && o.deterministic != 1)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: deterministic %d is not 0 or 1", (int)o.deterministic);
    if (o.threads < 0)
        return llmt__err_set(me, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: threads %d < 0 (0: the OpenMP default)", (int)o.threads);
    llmt_context *ctx = model->ctx;
    llmt_trainer *tr = llmt__calloc(ctx, 1, sizeof *tr);
    if (!tr) return llmt__err_set(me, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    tr->ctx = ctx;
    tr->model = model;
    tr->o = o;
    tr->B = o.micro_batch;
    tr->T = o.seq_len;
    llmt__exec_cpu_set_threads(o.threads);
    tr->ops = dev_ops ? dev_ops : llmt__dev_cpu();
    llmt_status s = create_device(tr, tr->ops);
    if (s != LLMT_OK) {
        llmt_trainer_destroy(tr);
        return s;
    }
    *out = tr;
    return LLMT_OK;
}
/* `what` names the public call ("trainer: step") for the messages. */
static llmt_status check_batch(llmt_trainer *tr, const char *what,
                               const llmt_batch *b, int exact)
{
    if (!b)
        return llmt__err_set(&tr->err, LLMT_ERR_NULL_POINTER, "%s: batch is NULL", what);
    /* the size first: the fields of a shorter struct are not the caller's */
    if (b->struct_size < sizeof *b)
        return llmt__err_set(&tr->err, LLMT_ERR_STRUCT_SIZE,
                             "%s: llmt_batch.struct_size %zu < %zu", what,
                             b->struct_size, sizeof *b);
    llmt_batch known; /* a newer caller's fields past ours must be zero */
    llmt_status s = llmt__opts_copy(&tr->err, "llmt_batch", &known, sizeof known, b);
    if (s != LLMT_OK)
        return s;
    if (!b->inputs || !b->targets)
        return llmt__err_set(&tr->err, LLMT_ERR_NULL_POINTER, "%s: %s is NULL", what,
                             !b->inputs ? "batch->inputs" : "batch->targets");
    int want = tr->B * tr->o.grad_accum;
    if (b->seq_len != tr->T || b->sequences < 1 ||
        (exact && b->sequences != want))
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: batch is %d x %d tokens, expected "
                             "%s%d x %d", (int)b->sequences, (int)b->seq_len,
                             exact ? "" : "n x ", exact ? want : 1, tr->T);
    int V = tr->model->cfg.vocab_size;
    size_t n = (size_t)b->sequences * b->seq_len;
    for (size_t i = 0; i < n; i++) {
        if (b->inputs[i] < 0 || b->inputs[i] >= V)
            return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "trainer: input token %d at %zu outside the "
                                 "vocabulary [0, %d)", (int)b->inputs[i], i, V);
        if (b->targets[i] >= V)
            return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "trainer: target token %d at %zu outside the "
                                 "vocabulary [0, %d)", (int)b->targets[i], i, V);
    }
    return LLMT_OK;
}

static llmt_status fwd_bwd(llmt_trainer *tr, const char *what, const llmt_batch *b,
                           float *loss, int64_t *tokens)
{
    llmt_status s = check_batch(tr, what, b, 1);
    if (s == LLMT_OK)
        s = llmt__trainer_ready(tr);
    if (s != LLMT_OK) return s;
    int64_t count = 0;
    size_t per = (size_t)tr->B * tr->T;
    for (size_t i = 0; i < per * (size_t)tr->o.grad_accum; i++)
        count += b->targets[i] >= 0;
    if (tr->dp && llmt__dp_begin(tr->dp, &count) != LLMT_OK)
        return llmt__err_forward(&tr->err, llmt__dp_err(tr->dp), "trainer");
    if (count == 0)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: the batch has no target to learn "
                             "(all < 0)");
    double sum = 0.0;
    const int32_t *in = b->inputs, *tg = b->targets;
    if (tr->cp) { /* this rank's rows of every sequence; count is global */
        int rows = tr->B * tr->o.grad_accum;
        llmt__cp_local(tr->cp, b->inputs, tr->cp_in, rows);
        llmt__cp_local(tr->cp, b->targets, tr->cp_tg, rows);
        in = tr->cp_in;
        tg = tr->cp_tg;
    }
    if (tr->pp) /* the pipeline's schedule over this stage (lib/train/pp.c) */
        s = llmt__pp_fwd_bwd(tr->pp, in, tg, count, &sum, &tr->dev_sumsq);
    else
        s = llmt__devtrain_fwd_bwd(tr->dev, in, tg, tr->o.grad_accum, count, &sum,
                                   &tr->dev_sumsq);
    if (tr->pp && s == LLMT_OK) /* MoE tallies, fp8 amaxes of every stage's layers */
        s = llmt__devtrain_stage_end(tr->dev, tr->pp_comm);
    if (s != LLMT_OK) return s;
    tr->stale_grads = 1;
    *loss = (float)(sum / (double)count);
    if (tokens) *tokens = count;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_trainer_forward_backward(llmt_trainer *tr, const llmt_batch *b,
                                                   float *loss)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&tr->err, "trainer: forward_backward", loss);
    return fwd_bwd(tr, "trainer: forward_backward", b, loss, NULL);
}

/* ---- optimizer */

static float lr_at(const llmt_trainer_opts *o, int64_t s)
{
    if (o->warmup_steps > 0 && s < o->warmup_steps)
        return o->lr * (float)(s + 1) / (float)o->warmup_steps;
    if (o->schedule == LLMT_LR_CONSTANT) return o->lr;
    int64_t total = o->total_steps;
    if (s >= total) return o->min_lr;
    if (o->schedule == LLMT_LR_WSD) {
        int64_t decay = (int64_t)((double)o->decay_fraction * total + 0.5);
        int64_t start = total - decay;
        if (start < o->warmup_steps) start = o->warmup_steps;
        if (s < start || total <= start) return o->lr;
        double p = (double)(s - start) / (double)(total - start);
        return (float)(o->lr - (o->lr - o->min_lr) * p);
    }
    int64_t span = total - o->warmup_steps;
    double p = span > 0 ? (double)(s - o->warmup_steps) / (double)span : 1.0;
    if (o->schedule == LLMT_LR_LINEAR)
        return (float)(o->lr - (o->lr - o->min_lr) * p);
    return (float)(o->min_lr +
                   0.5 * (1.0 + cos(3.14159265358979323846 * p)) *
                       (o->lr - o->min_lr));
}

LLMT_API llmt_status llmt_trainer_lr_at(const llmt_trainer *tr, int64_t step, float *lr)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&tr->err, "trainer: lr_at", lr);
    /* Steps are numbered from 1 (llmt_step_metrics.step); the schedule
     * below counts the steps done before the one it is asked about. */
    if (step < 1)
        return llmt__err_set((llmt_err *)&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: lr_at: step %lld: steps are numbered "
                             "from 1 (as llmt_step_metrics.step)",
                             (long long)step);
    *lr = lr_at(&tr->o, step - 1);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_batch_init(llmt_batch *b, size_t size)
{
    llmt_batch d = {0};
    return llmt__opts_init(b, size, 0, &d, sizeof d, "llmt_batch");
}

LLMT_API llmt_status llmt_step_metrics_init(llmt_step_metrics *m, size_t size)
{
    llmt_step_metrics d = {0};
    return llmt__opts_init(m, size, 0, &d, sizeof d, "llmt_step_metrics");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

LLMT_API llmt_status llmt_trainer_step(llmt_trainer *tr, const llmt_batch *b,
                                       llmt_step_metrics *met)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    if (met && met->struct_size < sizeof *met)
        return llmt__err_set(&tr->err, LLMT_ERR_STRUCT_SIZE,
                             "trainer: llmt_step_metrics.struct_size %zu < %zu",
                             met->struct_size, sizeof *met);
    double t0 = now_s();
    float loss;
    int64_t tokens = 0;
    llmt_status s = fwd_bwd(tr, "trainer: step", b, &loss, &tokens);
    if (s != LLMT_OK) return s;
    float norm = (float)sqrt(tr->dev_sumsq);
    if (!isfinite(loss) || !isfinite(norm))
        return llmt__err_set(&tr->err, LLMT_ERR_NUMERIC,
                             "trainer: step %lld: loss %g, grad norm %g is not "
                             "finite; parameters not updated",
                             (long long)tr->step + 1, (double)loss, (double)norm);
    float scale = 1.0f;
    if (tr->o.grad_clip > 0.0f && norm > tr->o.grad_clip)
        scale = tr->o.grad_clip / norm;
    float lr = lr_at(&tr->o, tr->step); /* = llmt_trainer_lr_at(step + 1) */
    /* with data parallelism: this rank's shares, on the engine's buffers */
    if (tr->dp) {
        if (llmt__dp_update(tr->dp, &tr->o, lr, scale, tr->step + 1) != LLMT_OK)
            s = llmt__err_forward(&tr->err, llmt__dp_err(tr->dp), "trainer");
    } else {
        s = llmt__devtrain_update(tr->dev, lr, tr->o.beta1, tr->o.beta2, tr->o.eps,
                                  tr->o.weight_decay, scale, tr->step + 1);
    }
    if (tr->pp) /* every stage updated, or the step fails on every stage (pp.c) */
        s = llmt__pp_step_done(tr->pp, s);
    if (s != LLMT_OK)
        return s;
    tr->stale_params = tr->stale_moments = 1;
    llmt__trainer_ep_release(tr); /* the host's other EP ranks' experts */
    tr->step++;
    if (met) {
        met->step = tr->step;
        met->loss = loss;
        met->grad_norm = norm;
        met->lr = lr;
        met->seconds = now_s() - t0;
        met->tokens = tokens;
    }
    return LLMT_OK;
}

/* Evaluate under context and pipeline parallelism: the pipeline's passes
 * over this rank's rows of every sequence, the last stages' sums then
 * summed over the CP group (the same on every rank). */
static llmt_status cp_pp_evaluate(llmt_trainer *tr, const llmt_batch *b, double *sum)
{
    int Tl = tr->T / llmt__cp_size(tr->cp);
    size_t n = (size_t)b->sequences * (size_t)Tl;
    int32_t *in = malloc(n * sizeof *in), *tg = malloc(n * sizeof *tg);
    llmt_status s = LLMT_OK;
    if (!in || !tg)
        s = llmt__err_set(&tr->err, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    if (s == LLMT_OK) {
        llmt__cp_local(tr->cp, b->inputs, in, b->sequences);
        llmt__cp_local(tr->cp, b->targets, tg, b->sequences);
        s = llmt__pp_evaluate(&tr->err, tr->pp_comm, tr->ops->store, tr->dev, in, tg,
                              b->sequences, tr->B, Tl, sum);
    }
    if (s == LLMT_OK)
        s = llmt__cp_sum_double(tr->cp, sum);
    free(in);
    free(tg);
    return s;
}

LLMT_API llmt_status llmt_trainer_evaluate(llmt_trainer *tr, const llmt_batch *b, float *loss)
{
    if (!tr)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&tr->err, "trainer: evaluate", loss);
    llmt_status s = check_batch(tr, "trainer: evaluate", b, 0);
    if (s == LLMT_OK)
        s = llmt__trainer_ready(tr);
    if (s != LLMT_OK)
        return s;
    double sum = 0.0;
    int64_t count = 0;
    size_t per = (size_t)tr->T;
    if (tr->pp) { /* forward-only passes through the stages (pp_infer.c) */
        s = tr->cp ? cp_pp_evaluate(tr, b, &sum)
                   : llmt__pp_evaluate(&tr->err, tr->pp_comm, tr->ops->store, tr->dev,
                                       b->inputs, b->targets, b->sequences, tr->B, tr->T, &sum);
        if (s != LLMT_OK)
            return s;
        for (size_t i = 0; i < per * (size_t)b->sequences; i++)
            count += b->targets[i] >= 0;
    }
    for (int r = 0; !tr->pp && r < b->sequences; r += tr->B) {
        int Bc = b->sequences - r < tr->B ? b->sequences - r : tr->B;
        const int32_t *in = b->inputs + per * r, *tg = b->targets + per * r;
        double part = 0.0;
        if (tr->cp) { /* this rank's rows; the engine sums over the group */
            llmt__cp_local(tr->cp, in, tr->cp_in, Bc);
            llmt__cp_local(tr->cp, tg, tr->cp_tg, Bc);
            s = llmt__devtrain_loss(tr->dev, tr->cp_in, tr->cp_tg, Bc,
                                    tr->T / llmt__cp_size(tr->cp), &part);
        } else
            s = llmt__devtrain_loss(tr->dev, in, tg, Bc, tr->T, &part);
        if (s != LLMT_OK) return s;
        sum += part;
        for (size_t i = 0; i < per * (size_t)Bc; i++) count += tg[i] >= 0;
    }
    if (count == 0)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: evaluate: no target >= 0 in the batch");
    *loss = (float)(sum / (double)count);
    if (!isfinite(*loss))
        return llmt__err_set(&tr->err, LLMT_ERR_NUMERIC,
                             "trainer: evaluate: the loss is %g (not finite) "
                             "over %lld targets: the parameters hold NaN/Inf "
                             "or overflow",
                             (double)*loss, (long long)count);
    return LLMT_OK;
}

/* ---- access */

/* A device trainer: bring the host copies that are behind the device up
 * to date (each flag selects one kind). */
static llmt_status host_sync(llmt_trainer *tr, int params, int moments, int grads)
{
    llmt_status rs = llmt__trainer_ready(tr);
    if (rs != LLMT_OK)
        return rs;
    params = params && tr->stale_params;
    moments = moments && tr->stale_moments;
    grads = grads && tr->stale_grads;
    if (!params && !moments && !grads) return LLMT_OK;
    llmt_status s = llmt__devtrain_download(tr->dev, params, moments, grads);
    if (s != LLMT_OK) return s;
    if (moments && tr->dp && llmt__dp_state_download(tr->dp) != LLMT_OK)
        return llmt__err_forward(&tr->err, llmt__dp_err(tr->dp), "trainer");
    if (params) tr->stale_params = 0;
    if (moments) tr->stale_moments = 0;
    if (grads) tr->stale_grads = 0;
    return LLMT_OK;
}

/* For lib/train/state.c: parameters and moments on the host, current. */
llmt_status llmt__trainer_host_sync(llmt_trainer *tr)
{
    return host_sync(tr, 1, 1, 0);
}

llmt_status llmt__trainer_host_sync_own(llmt_trainer *tr)
{
    llmt_status s = llmt__trainer_ready(tr);
    if (s != LLMT_OK)
        return s;
    /* ZeRO-3 releases parameters: its downloads go as they always did */
    if (!tr->stale_params || llmt__devtrain_ep(tr->dev) <= 1 ||
        (tr->dp && llmt__dp_zero_stage(tr->dp) == 3))
        return host_sync(tr, 1, 1, 0);
    /* the other EP ranks' expert rows are not gathered: the parameters
     * stay stale for llmt_trainer_sync_params, which gathers them */
    if ((s = llmt__devtrain_download_own(tr->dev)) != LLMT_OK)
        return s;
    return host_sync(tr, 0, 1, 0);
}

int llmt__trainer_host_resident(const llmt_trainer *tr)
{
    if (llmt__trainer_ready((llmt_trainer *)tr) != LLMT_OK)
        return 0;
    return llmt__devtrain_host_resident(tr->dev);
}

llmt_status llmt__trainer_local_read(llmt_trainer *tr, int32_t i, float **buf, int64_t *n)
{
    *buf = NULL;
    *n = 0;
    llmt_status rs = llmt__trainer_ready(tr);
    if (rs != LLMT_OK)
        return rs;
    if (tr->dp && llmt__dp_released_bytes(tr->dp) > 0)
        return llmt__err_set(&tr->err, LLMT_ERR_UNSUPPORTED,
                             "trainer: data parallelism releases parameters between steps "
                             "(ZeRO 3's non-shares): no whole copy of them to read");
    int64_t e = llmt__devtrain_local_numel(tr->dev, i);
    if (e == 0)
        return LLMT_OK; /* another stage's tensor */
    float *b = malloc((size_t)e * sizeof *b);
    if (!b)
        return llmt__err_set(&tr->err, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    llmt_status s = llmt__devtrain_local_get(tr->dev, i, b);
    if (s != LLMT_OK) {
        free(b);
        return s;
    }
    *buf = b;
    *n = e;
    return LLMT_OK;
}

llmt_status llmt__trainer_poke_get(llmt_trainer *tr, int32_t *idx, float **buf, int64_t *n)
{
    *buf = NULL;
    *n = 0;
    for (int32_t i = 0; i < tr->model->nparams; i++) {
        llmt_status s = llmt__trainer_local_read(tr, i, buf, n);
        if (s != LLMT_OK || *n > 0) {
            *idx = i;
            return s;
        }
    }
    return llmt__err_set(&tr->err, LLMT_ERR_STATE, "trainer: this rank holds no parameter");
}

llmt_status llmt__trainer_poke_put(llmt_trainer *tr, int32_t idx, const float *buf)
{
    /* the host copy is written too: whether it is stale stays as it was
     * on every rank, so a later sync is collective on all or on none */
    llmt_status s = llmt__trainer_ready(tr);
    return s != LLMT_OK ? s : llmt__devtrain_local_put(tr->dev, idx, buf);
}

LLMT_API llmt_status llmt_trainer_grad(llmt_trainer *tr, int32_t index, llmt_tensor *v)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    if (!v) /* the header calls it view */
        return llmt__err_set(&tr->err, LLMT_ERR_NULL_POINTER, "trainer: grad: view is NULL");
    if (index < 0 || index >= tr->model->nparams)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: parameter index %d out of range",
                             (int)index);
    llmt_status s = host_sync(tr, 0, 0, 1);
    if (s != LLMT_OK) return s;
    v->struct_size = sizeof *v;
    return llmt__model_view(tr->model, index, tr->grads, v);
}

LLMT_API llmt_status llmt_trainer_optim_state(llmt_trainer *tr, int32_t index, int32_t which,
                                              llmt_tensor *v)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    if (!v) /* the header calls it view */
        return llmt__err_set(&tr->err, LLMT_ERR_NULL_POINTER,
                             "trainer: optim_state: view is NULL");
    if (index < 0 || index >= tr->model->nparams || which < 0 || which > 1)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: optimizer state (%d, %d) out of range",
                             (int)index, (int)which);
    llmt_status rs = llmt__trainer_ready(tr);
    if (rs != LLMT_OK)
        return rs;
    if (!tr->m)
        return llmt__err_set(&tr->err, LLMT_ERR_STATE,
                             "trainer: the optimizer state is sharded over "
                             "the data-parallel ranks (ZeRO-%d): this rank "
                             "holds only its share, read it with "
                             "llmt_trainer_optim_shard",
                             llmt__dp_zero_stage(tr->dp));
    llmt_status s = host_sync(tr, 0, 1, 0);
    if (s != LLMT_OK) return s;
    v->struct_size = sizeof *v;
    return llmt__model_view(tr->model, index, which ? tr->v : tr->m, v);
}

/* This rank's part of parameter `index` (the whole parameter without a
 * communicator): the flat range [*rel, *rel + *n) of its elements in
 * row-major order and where that range lives in the parameters, m and v.
 * Returns 1 when m and v hold only this rank's shares (ZeRO >= 1). For
 * lib/train/state.c. */
int llmt__trainer_share(llmt_trainer *tr, int32_t index, int64_t *rel,
                        int64_t *n, float *ptr[3])
{
    const llmt__param *p = &tr->model->params[index];
    size_t r = 0, cnt = p->numel, lo;
    llmt__trainer_ready(tr); /* a failure is on the handle; nothing is shared then */
    float *m = NULL, *v = NULL;
    if (tr->dp) { /* a share of the engine's part: an expert tensor's EP rows */
        llmt__dp_param_share(tr->dp, index, &r, &cnt, &m, &v);
        r += (size_t)llmt__devtrain_ep_row0(tr->dev, index);
    }
    lo = p->offset + r;
    if (tr->m) { /* not sharded (ZeRO 0): the full buffers hold every share */
        m = tr->m + lo;
        v = tr->v + lo;
    }
    *rel = (int64_t)r;
    *n = (int64_t)cnt;
    ptr[0] = tr->model->data + lo;
    ptr[1] = m;
    ptr[2] = v;
    return tr->m == NULL;
}

LLMT_API llmt_status llmt_trainer_optim_shard(llmt_trainer *tr, int32_t index, int32_t which,
                                              llmt_tensor *v, int64_t *flat_offset)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    if (!v) /* the header calls it view */
        return llmt__err_set(&tr->err, LLMT_ERR_NULL_POINTER,
                             "trainer: optim_shard: view is NULL");
    LLMT__NONNULL(&tr->err, "trainer: optim_shard", flat_offset);
    if (index < 0 || index >= tr->model->nparams || which < 0 || which > 1)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: optimizer state (%d, %d) out of range",
                             (int)index, (int)which);
    const llmt__param *p = &tr->model->params[index];
    int64_t rel = 0, n = (int64_t)p->numel;
    float *ptr[3] = {NULL, NULL, NULL};
    llmt_status s = host_sync(tr, 0, 1, 0);
    if (s != LLMT_OK) return s;
    if (tr->m) { /* not sharded: every rank holds all of it */
        ptr[1] = tr->m + p->offset;
        ptr[2] = tr->v + p->offset;
    } else {
        llmt__trainer_share(tr, index, &rel, &n, ptr);
    }
    *flat_offset = rel;
    return llmt_tensor_init(v, sizeof *v, LLMT_DTYPE_FP32, 1, &n,
                            ptr[1 + which], LLMT_DEVICE_CPU, 0);
}

LLMT_API llmt_status llmt_trainer_memory_usage(const llmt_trainer *tr, llmt_trainer_memory *out)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&tr->err, "trainer: memory_usage", out);
    llmt_status rs = llmt__trainer_ready((llmt_trainer *)tr); /* what it would hold */
    if (rs != LLMT_OK)
        return rs;
    if (out->struct_size < sizeof(size_t))
        return llmt__err_set((llmt_err *)&tr->err, LLMT_ERR_STRUCT_SIZE,
                             "trainer: memory_usage: out: struct_size is %zu; set it to "
                             "sizeof the struct", out->struct_size);
    /* what the engine holds: its shards under tensor parallelism, its
     * stage's layers (and a tied head's copy of wte) under pipeline
     * parallelism, its experts under expert parallelism; the whole model
     * otherwise (the model's count, before an engine is made) */
    size_t P =
        (tr->dev ? llmt__devtrain_param_floats(tr->dev) : tr->model->total) * sizeof(float);
    llmt_trainer_memory r;
    memset(&r, 0, sizeof r);
    r.struct_size = out->struct_size;
    r.params = (int64_t)P;
    r.grads = (int64_t)P;
    r.optimizer = tr->m ? (int64_t)(2 * P) : 0;
    if (tr->dp) r.optimizer += (int64_t)llmt__dp_state_bytes(tr->dp);
    llmt__devtrain_mem dm;
    llmt__devtrain_memory(tr->dev, &dm);
    r.activations = (int64_t)((size_t)tr->T * sizeof(int32_t)); /* host: gen */
    r.comm_buffers = tr->dp ? (int64_t)llmt__dp_buffer_bytes(tr->dp) : 0;
    r.params_resident = r.params;
    if (tr->dp) r.params_resident -= (int64_t)llmt__dp_released_bytes(tr->dp);
    if (llmt__devtrain_host_resident(tr->dev)) /* the engine's memory is the host's */
        r.activations += (int64_t)dm.activations;
    else {
        r.device_activations = (int64_t)dm.activations;
        r.device_in_use = (int64_t)dm.in_use;
        r.device_peak = (int64_t)dm.peak;
    }
    r.total = r.params + r.grads + r.optimizer + r.activations + r.comm_buffers;
    size_t n = out->struct_size < sizeof r ? out->struct_size : sizeof r;
    memcpy(out, &r, n);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_trainer_get_step(const llmt_trainer *tr, int64_t *step)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&tr->err, "trainer: get_step", step);
    *step = tr->step;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_trainer_set_step(llmt_trainer *tr, int64_t step)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    if (step < 0)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: step %lld < 0", (long long)step);
    tr->step = step;
    return LLMT_OK;
}

/* ---- sampling */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* The next-token logits after the window of len tokens under pipeline
 * parallelism (pp_infer.c); with context parallelism win is this rank's
 * rows of the window padded to the sequence, the row of its last position
 * on one rank of the group (or none here: zeros), and the group sums. */
static llmt_status pp_logits(llmt_trainer *tr, const int32_t *win, int len, float *logits)
{
    int Vp = tr->model->cfg.padded_vocab_size;
    if (!tr->cp)
        return llmt__pp_logits(&tr->err, tr->pp_comm, tr->ops->store, tr->dev, win, len,
                               len - 1, tr->B, tr->T, Vp, logits);
    int Tl = tr->T / llmt__cp_size(tr->cp), row = -1;
    const int32_t *pos = llmt__cp_pos(tr->cp);
    for (int t = 0; t < Tl; t++)
        row = pos[t] == len - 1 ? t : row;
    llmt_status s = llmt__pp_logits(&tr->err, tr->pp_comm, tr->ops->store, tr->dev, win, Tl,
                                    row, tr->B, Tl, Vp, logits);
    return s == LLMT_OK ? llmt__cp_sum(tr->cp, logits, (size_t)Vp) : s;
}

LLMT_API llmt_status llmt_trainer_generate(llmt_trainer *tr, const int32_t *prompt,
                                           int32_t n_prompt, int32_t n_new, float temperature,
                                           int32_t top_k, uint64_t seed, int32_t *out)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    return llmt__trainer_generate(tr, prompt, n_prompt, n_new, temperature, top_k, seed, 0,
                                  out);
}

llmt_status llmt__trainer_generate(llmt_trainer *tr, const int32_t *prompt, int32_t n_prompt,
                                   int32_t n_new, float temperature, int32_t top_k,
                                   uint64_t seed, int32_t vocab, int32_t *out)
{
    LLMT__NONNULL(&tr->err, "trainer: generate", prompt);
    if (n_new > 0)
        LLMT__NONNULL(&tr->err, "trainer: generate", out);
    llmt_status ready = llmt__trainer_ready(tr);
    if (ready != LLMT_OK)
        return ready;
    llmt_model *mdl = tr->model;
    const llmt_model_config *c = &mdl->cfg;
    int V = vocab > 0 && vocab < c->vocab_size ? vocab : c->vocab_size;
    int Vp = c->padded_vocab_size;
    if (n_prompt < 1 || n_new < 0)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: generate needs n_prompt >= 1 and "
                             "n_new >= 0");
    /* NaN would make every probability NaN: the last id, every time */
    if (isnan(temperature))
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: generate: temperature is NaN (<= 0: greedy)");
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "trainer: prompt token %d outside [0, %d)",
                                 (int)prompt[i], V);
    float *sorted = malloc(sizeof(float) * (size_t)V);
    double *pr = malloc(sizeof(double) * (size_t)V);
    float *devlg = malloc(sizeof(float) * (size_t)Vp);
    if (!sorted || !pr || !devlg) {
        free(sorted);
        free(pr);
        free(devlg);
        return llmt__err_set(&tr->err, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    }
    uint64_t rs = seed;
    for (int g = 0; g < n_new; g++) {
        /* the window: the last T tokens of prompt + generated so far */
        int total = n_prompt + g;
        int len = total < tr->T ? total : tr->T;
        for (int i = 0; i < len; i++) {
            int at = total - len + i;
            tr->gen_ctx[i] = at < n_prompt ? prompt[at] : out[at - n_prompt];
        }
        const int32_t *win = tr->gen_ctx;
        if (tr->cp) { /* padded to the sequence; this rank's rows of it */
            memset(tr->gen_ctx + len, 0, (size_t)(tr->T - len) * sizeof(int32_t));
            llmt__cp_local(tr->cp, tr->gen_ctx, tr->cp_in, 1);
            win = tr->cp_in;
        }
        llmt_status s = tr->pp ? pp_logits(tr, win, len, devlg)
                               : llmt__devtrain_last_logits(tr->dev, win, len, devlg);
        if (s != LLMT_OK) {
            free(sorted);
            free(pr);
            free(devlg);
            return s;
        }
        const float *lg = devlg;
        int next = 0;
        if (temperature <= 0.0f) {
            for (int i = 1; i < V; i++)
                if (lg[i] > lg[next]) next = i;
        } else {
            float cut = -INFINITY;
            if (top_k > 0 && top_k < V) {
                memcpy(sorted, lg, sizeof(float) * (size_t)V);
                qsort(sorted, (size_t)V, sizeof(float), cmp_desc);
                cut = sorted[top_k - 1];
            }
            float mx = -INFINITY;
            for (int i = 0; i < V; i++)
                if (lg[i] > mx) mx = lg[i];
            double sum = 0.0;
            for (int i = 0; i < V; i++) {
                pr[i] = lg[i] >= cut ? exp((double)(lg[i] - mx) / temperature) : 0.0;
                sum += pr[i];
            }
            double u = ((rng_next(&rs) >> 11) * (1.0 / 9007199254740992.0)) * sum;
            double acc = 0.0;
            next = V - 1;
            for (int i = 0; i < V; i++) {
                acc += pr[i];
                if (pr[i] > 0.0 && u < acc) {
                    next = i;
                    break;
                }
            }
        }
        out[g] = next;
    }
    free(sorted);
    free(pr);
    free(devlg);
    return LLMT_OK;
}

llmt__devtrain *llmt__trainer_devtrain(llmt_trainer *tr)
{
    return llmt__trainer_ready(tr) == LLMT_OK ? tr->dev : NULL;
}

/* For lib/train/state.c: the fp8 recipe's state (NULL without fp8). */
float *llmt__trainer_fp8_state(llmt_trainer *tr, int64_t shape[2])
{
    return llmt__trainer_ready(tr) == LLMT_OK ? llmt__devtrain_fp8_export(tr->dev, shape)
                                              : NULL;
}
llmt_status llmt__trainer_fp8_restore(llmt_trainer *tr, const float *in)
{
    llmt_status s = llmt__trainer_ready(tr);
    return s == LLMT_OK ? llmt__devtrain_fp8_import(tr->dev, in) : s;
}

/* For lib/train/state.c, which otherwise uses only the public API. */
llmt_err *llmt__trainer_err(llmt_trainer *tr) { return &tr->err; }
llmt_model *llmt__trainer_model(llmt_trainer *tr) { return tr->model; }
int llmt__trainer_has_comm(const llmt_trainer *tr)
{
    return tr->dp != NULL || tr->dp_rec != NULL; /* attached, or recorded */
}
int llmt__trainer_has_tp(const llmt_trainer *tr)
{
    return tr->tp != NULL;
}
int llmt__trainer_tp_shard(llmt_trainer *tr, int32_t i, int *cols, int64_t *R, int64_t *K,
                           int64_t lo[3], int64_t n[3], int own[3], int64_t *rel, int64_t *cnt,
                           float *mv[2])
{
    /* a pipeline stage's shards: its tensors whole, others empty; expert
     * parallelism's: an expert tensor's rows of this EP rank */
    if (llmt__trainer_ready(tr) != LLMT_OK)
        return 0;
    if (!tr->tp && !tr->pp && llmt__devtrain_ep(tr->dev) == 1)
        return 0;
    int ns = llmt__devtrain_shard(tr->dev, i, cols, R, K, lo, n, own);
    int64_t tot = 0;
    for (int j = 0; j < ns; j++)
        tot += *cols ? *R * n[j] : n[j] * *K;
    size_t r = 0, c = (size_t)tot;
    float *m = NULL, *v = NULL;
    if (tr->dp)
        llmt__dp_param_share(tr->dp, i, &r, &c, &m, &v);
    *rel = (int64_t)r;
    *cnt = (int64_t)c;
    mv[0] = tr->m ? NULL : m;
    mv[1] = tr->m ? NULL : v;
    return ns;
}
const llmt_trainer_opts *llmt__trainer_opts(const llmt_trainer *tr) { return &tr->o; }
double llmt__trainer_dp_host_s(const llmt_trainer *tr)
{
    return tr && tr->dp ? llmt__dp_host_s(tr->dp) : 0;
}
llmt_status llmt__trainer_scale_lr(llmt_trainer *tr, double factor)
{
    if (!(factor > 0) || !isfinite(factor))
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: LR factor %g (want a finite value > 0)", factor);
    /* the schedule is linear in lr and min_lr (warmup, cosine, linear, wsd) */
    tr->o.lr = (float)(tr->o.lr * factor);
    tr->o.min_lr = (float)(tr->o.min_lr * factor);
    return LLMT_OK;
}
llmt_context *llmt__trainer_ctx(llmt_trainer *tr) { return tr->ctx; }
int llmt__trainer_params_shared(llmt_trainer *tr)
{
    return llmt__trainer_ready(tr) == LLMT_OK && tr->dp && llmt__dp_zero_stage(tr->dp) == 3 &&
           !tr->tp && !llmt__trainer_has_pp(tr) && !llmt__trainer_ep_comm(tr);
}

llmt_status llmt__trainer_params_written(llmt_trainer *tr, int shares)
{
    /* the host copies are the truth now (llmt__trainer_host_sync ran
     * before they were written): the engine takes them, then data
     * parallelism its moment shares (and releases ZeRO-3's units again) */
    llmt_status s = llmt__trainer_ready(tr);
    if (s != LLMT_OK)
        return s;
    s = llmt__devtrain_upload(tr->dev, tr->model->data, tr->m, tr->v);
    if (s != LLMT_OK) return s;
    if (tr->dp && llmt__dp_params_written(tr->dp, shares) != LLMT_OK)
        return llmt__err_forward(&tr->err, llmt__dp_err(tr->dp), "trainer");
    tr->stale_params = tr->stale_moments = tr->stale_grads = 0;
    if (tr->dp && llmt__dp_zero_stage(tr->dp) == 3)
        tr->stale_params = 1; /* released */
    return LLMT_OK;
}

/* ---- data parallelism (lib/train/dp.c) */

/* Leave data parallelism. Collective over the old communicator: whole
 * parameters (ZeRO-3) and, when the optimizer state is sharded, every
 * rank's shares all-gathered back into full-size m and v, so the trainer
 * can go on alone or under another stage or dp size. On a failure the
 * communicator stays attached. */
static llmt_status detach(llmt_trainer *tr)
{
    llmt_status s = llmt_trainer_sync_params(tr);
    if (s != LLMT_OK) return s;
    if (!tr->m) { /* the engine's full m and v back, every rank's shares in */
        if ((s = llmt__devtrain_restore_moments(tr->dev)) != LLMT_OK) return s;
        float *dm, *dv;
        llmt__devtrain_moments(tr->dev, &dm, &dv);
        s = llmt__dp_unshard_state(tr->dp, dm, dv);
        if (s != LLMT_OK) {
            llmt__devtrain_drop_moments(tr->dev);
            return llmt__err_forward(&tr->err, llmt__dp_err(tr->dp), "trainer");
        }
        tr->m = llmt__devtrain_host_m(tr->dev);
        tr->v = llmt__devtrain_host_v(tr->dev);
        tr->stale_moments = 1;
    }
    llmt__devtrain_set_dp(tr->dev, NULL);
    llmt__dp_destroy(tr->dp);
    tr->dp = NULL;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_trainer_set_comm(llmt_trainer *tr, llmt_comm *comm,
                                           const llmt_dp_opts *opts)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    llmt_status ms = llmt__moe_device_group_check(tr, comm, "set_comm", "parallelism.dp");
    if (ms != LLMT_OK)
        return ms;
    if (tr->pp_comm && comm && opts && opts->struct_size >= offsetof(llmt_dp_opts, overlap) &&
        opts->zero_stage >= 2)
        return llmt__err_set(&tr->err, LLMT_ERR_UNSUPPORTED,
                             "trainer: set_comm: ZeRO-%d with pipeline parallelism is not "
                             "supported yet (zero_stage 0 or 1; ZeRO-2 shares of a tied "
                             "head's two copies do not line up, ZeRO-3 gathers are not in "
                             "the stage's forward)",
                             (int)opts->zero_stage);
    if (!tr->dev) { /* no engine yet: checked and recorded (trainer_build.c) */
        llmt_dp_opts o;
        llmt_status s = comm ? llmt__dp_check(&tr->err, comm, opts, tr->ops, &o) : LLMT_OK;
        if (s != LLMT_OK)
            return s;
        tr->dp_rec = comm;
        if (comm)
            tr->dp_o = o;
        return LLMT_OK;
    }
    if (tr->dp) {
        llmt_status s = detach(tr);
        if (s != LLMT_OK) return s;
    }
    if (!comm)
        return LLMT_OK;
    /* dp.c reduces, shards and gathers the engine's device buffers through
     * the op table, on any backend (the communicator must take its memory:
     * NCCL for CUDA, in-process or MPI for the CPU and the emulation) */
    llmt_status s = host_sync(tr, 1, 1, 0);
    if (s != LLMT_OK) return s;
    llmt__dp_store st;
    llmt__devtrain_dp_store(tr->dev, &st);
    st.ep = llmt__trainer_ep_comm(tr); /* experts reduced over their own group */
    s = llmt__dp_create(&tr->err, comm, opts, tr->model, &st, &tr->dp);
    if (s != LLMT_OK) return s;
    llmt__devtrain_set_dp(tr->dev, tr->dp);
    tr->stale_params = 1; /* ZeRO-3 released what is not this rank's */
    if (llmt__dp_state_bytes(tr->dp) == 0) return LLMT_OK;
    /* ZeRO >= 1: the dp layer took this rank's shares of m and v */
    llmt__devtrain_drop_moments(tr->dev);
    tr->m = tr->v = NULL;
    return LLMT_OK;
}

llmt_status llmt__trainer_dp_renew(llmt_trainer *tr)
{
    if (!tr->dev) /* not made yet: made with every group when it is */
        return LLMT_OK;
    if (!tr->dp)
        return LLMT_OK;
    llmt_comm *c = llmt__dp_comm(tr->dp);
    llmt_dp_opts o = *llmt__dp_opts(tr->dp);
    return llmt_trainer_set_comm(tr, c, &o);
}

llmt_comm *llmt__trainer_expert_dp_comm(const llmt_trainer *tr)
{
    llmt__trainer_ready((llmt_trainer *)tr);
    return tr->dp ? llmt__dp_expert_comm(tr->dp) : NULL;
}

LLMT_API llmt_status llmt_trainer_sync_params(llmt_trainer *tr)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    llmt_status rs = llmt__trainer_ready(tr);
    if (rs != LLMT_OK)
        return rs;
    if (!tr->dp) return host_sync(tr, 1, 1, 0);
    if (llmt__dp_sync(tr->dp) != LLMT_OK)
        return llmt__err_forward(&tr->err, llmt__dp_err(tr->dp), "trainer");
    tr->stale_params = 1; /* gathered on the device */
    return host_sync(tr, 1, 1, 0);
}
