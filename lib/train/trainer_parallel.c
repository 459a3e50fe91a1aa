/* Attaching tensor, sequence, pipeline and context parallelism to a
 * trainer. Before its engine is made they are checked and recorded, in
 * any order, and the engine is made once from all of them
 * (trainer_build.c). Once it is made (the first step, evaluate, generate,
 * checkpoint or state access), each makes the engine again for its share
 * of the model or of the sequence (lib/train/tp.c, pp.c, cp.c), from the
 * host copies of the parameters and moments, in the order tp -> sequence
 * parallel -> cp -> pp, all before data parallelism (trainer.c). */
#include <stdlib.h>
#include <string.h>

#include "comm/p2p.h"
#include "model/model.h"
#include "plan/pp_sched.h"
#include "train/trainer_impl.h"
#include "train/trainer_state.h"

/* The trainer takes a new engine made from its host copies (which are
 * current: the caller synced them): the old one goes, the host mirrors are
 * the new one's, and the moments and gradients are on the device. */
static void use_engine(llmt_trainer *tr, llmt__devtrain *dev)
{
    llmt__devtrain_destroy(tr->dev);
    tr->dev = dev;
    tr->grads = llmt__devtrain_host_grads(dev);
    tr->m = llmt__devtrain_host_m(dev);
    tr->v = llmt__devtrain_host_v(dev);
    tr->stale_params = 0;
    tr->stale_moments = tr->stale_grads = 1;
}

/* Tensor parallelism: a new engine that holds only this rank's shards
 * (lib/train/device.c), made from the host copies of the parameters and
 * moments (gathered from the old engine's group first, when it had one),
 * with the collectives of lib/train/tp.c; seq: sequence parallel. */
static llmt_status tp_attach(llmt_trainer *tr, llmt_comm *comm, int seq)
{
    if (llmt__trainer_ep_comm(tr)) /* the new engine would hold every expert */
        return llmt__err_set(&tr->err, LLMT_ERR_STATE,
                             "trainer: set_tp_comm: attach tensor (and sequence) parallelism "
                             "before expert parallelism (llmt_trainer_set_ep_comm)");
    llmt_status s = llmt__trainer_host_sync(tr);
    if (s != LLMT_OK)
        return s;
    llmt__tp *tp = NULL;
    int32_t n = 1;
    if (comm && llmt_comm_size(comm, &n) != LLMT_OK)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT, "trainer: set_tp_comm: %s",
                             llmt_comm_last_error(comm));
    if (comm && n > 1) {
        s = llmt__tp_check(&tr->err, &tr->model->cfg, n);
        if (s != LLMT_OK)
            return s;
        s = llmt__tp_create(&tr->err, comm, tr->ops->store, seq, &tp);
        if (s != LLMT_OK)
            return s;
    }
    llmt__devtrain_tp et = {.size = 1}; /* no split */
    if (tp)
        llmt__tp_engine(tp, &et);
    llmt__dev_opts d = {tr->o.device_index, tr->o.deterministic};
    llmt__devtrain_fp8 f8 = {tr->o.fp8, tr->o.fp8_amax_history, tr->o.fp8_margin,
                             tr->o.fp8_format};
    llmt__devtrain *dev = NULL;
    s = llmt__devtrain_create_tp(&tr->err, tr->ops, &d, tr->model, tr->B, tr->T,
                                 tr->o.grad_accum, tr->o.recompute, &f8, &et, &dev);
    if (s == LLMT_OK)
        s = llmt__devtrain_upload(dev, tr->model->data, tr->m, tr->v);
    if (s != LLMT_OK) {
        llmt__devtrain_destroy(dev);
        llmt__tp_destroy(tp);
        return s;
    }
    llmt__tp *was = tr->tp; /* the old engine may use it until it goes */
    use_engine(tr, dev);
    llmt__tp_destroy(was);
    tr->tp = tp;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_trainer_set_tp_comm(llmt_trainer *tr, llmt_comm *comm)
{
    if (!tr)
        return LLMT_ERR_NULL_POINTER;
    if (!tr->dev) /* no engine yet: a new group keeps sequence parallelism */
        return llmt__trainer_record_tp(tr, comm, llmt__tp_seq(tr->tp));
    if (tr->dp)
        return llmt__err_set(&tr->err, LLMT_ERR_STATE,
                             "trainer: set_tp_comm: attach tensor parallelism before data "
                             "parallelism (llmt_trainer_set_comm)");
    if (tr->cp) /* cp x tp runs: the CP engine is made over the TP group it finds */
        return llmt__err_set(&tr->err, LLMT_ERR_STATE,
                             "trainer: set_tp_comm: attach tensor parallelism before context "
                             "parallelism (llmt_trainer_set_cp_comm)");
    if (tr->pp)
        return llmt__err_set(&tr->err, LLMT_ERR_STATE,
                             "trainer: set_tp_comm: attach tensor parallelism before "
                             "pipeline parallelism (llmt_trainer_set_pp_comm: each stage's "
                             "engine is made over the tensor parallel group it finds)");
    /* a new group keeps sequence parallelism as it was */
    return tp_attach(tr, comm, llmt__tp_seq(tr->tp));
}

static llmt_status sp_check(llmt_trainer *tr, int on, int32_t n)
{
    if (on && tr->T % n)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: parallelism.sequence_parallel: parallelism.tp %d does "
                             "not divide model.seq_len %d (each rank holds seq_len / tp "
                             "positions' worth of every micro-batch's rows)",
                             (int)n, tr->T);
    return LLMT_OK;
}

/* Sequence parallelism splits the engine's B x seq_len / cp rows in tp
 * blocks of whole positions (device.c). */
static llmt_status cp_sp_check(llmt_trainer *tr, int32_t n, int32_t tpn)
{
    if (n > 1 && tpn > 1 && tr->T % (2 * n) == 0 && (tr->T / n) % tpn)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: parallelism.cp %d with parallelism.sequence_parallel: "
                             "parallelism.tp %d does not divide model.seq_len %d / cp = %d "
                             "(the rows a CP rank holds of each sequence are split in tp "
                             "blocks)",
                             (int)n, (int)tpn, tr->T, tr->T / (int)n);
    return LLMT_OK;
}

/* Sequence parallelism: the engine made again over the same group, with
 * its residual stream split by rows (lib/train/device.c, tp.c). */
LLMT_API llmt_status llmt_trainer_set_sequence_parallel(llmt_trainer *tr, int32_t on)
{
    if (!tr)
        return LLMT_ERR_NULL_POINTER;
    if (on != 0 && on != 1)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: set_sequence_parallel: on is %d (0 or 1)", (int)on);
    if (on == llmt__tp_seq(tr->tp))
        return LLMT_OK; /* already so */
    if (!tr->tp)
        return llmt__err_set(&tr->err, LLMT_ERR_STATE,
                             "trainer: set_sequence_parallel: parallelism.sequence_parallel "
                             "splits the sequence over the tensor parallel group: attach one "
                             "of more than one rank first (llmt_trainer_set_tp_comm)");
    int32_t n = 1;
    llmt_comm_size(llmt__tp_comm(tr->tp), &n);
    if (!tr->dev) { /* no engine yet: recorded (the checks as below) */
        llmt_status s = sp_check(tr, on, n);
        if (s == LLMT_OK && on && tr->cp)
            s = cp_sp_check(tr, llmt__cp_size(tr->cp), n);
        return s != LLMT_OK ? s : llmt__trainer_record_tp(tr, llmt__tp_comm(tr->tp), on);
    }
    if (tr->dp || tr->pp)
        return llmt__err_set(&tr->err, LLMT_ERR_STATE,
                             "trainer: set_sequence_parallel: set it before %s parallelism "
                             "is attached (%s)",
                             tr->dp ? "data" : "pipeline",
                             tr->dp ? "llmt_trainer_set_comm" : "llmt_trainer_set_pp_comm");
    if (tr->cp) /* the CP engine is made for seq_len / cp rows over the TP group */
        return llmt__err_set(&tr->err, LLMT_ERR_STATE,
                             "trainer: set_sequence_parallel: set it before context "
                             "parallelism is attached (llmt_trainer_set_cp_comm)");
    /* refused here, before the collectives of making the engine again */
    llmt_status s = sp_check(tr, on, n);
    return s != LLMT_OK ? s : tp_attach(tr, llmt__tp_comm(tr->tp), on);
}

/* ---- pipeline parallelism (lib/train/pp.c) */

LLMT_API llmt_status llmt_pp_opts_init(llmt_pp_opts *o, size_t size)
{
    llmt_pp_opts d = {0};
    d.schedule = LLMT_PP_1F1B;
    d.virtual_stages = 1;
    return llmt__opts_init(o, size, 0, &d, sizeof d, "llmt_pp_opts");
}

/* What a pipeline over n stages needs of the options and the trainer
 * (live: its engine is made; the order of attaching matters then). */
static llmt_status pp_check(llmt_trainer *tr, llmt_comm *comm, const llmt_pp_opts *o, int32_t n,
                            int live)
{
    llmt_err *e = &tr->err;
    llmt_status s;
    /* the backend's pipeline never ran on its hardware (dev.h) */
    if (tr->ops->unverified_pp)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: set_pp_comm: pipeline parallelism: the %s backend %s",
                             tr->ops->name, tr->ops->unverified_pp);
    if (live && tr->pp)
        return llmt__err_set(e, LLMT_ERR_STATE,
                             "trainer: set_pp_comm: pipeline parallelism is attached already "
                             "(a trainer takes it once, on creation's parameters)");
    if (live && tr->dp)
        return llmt__err_set(e, LLMT_ERR_STATE,
                             "trainer: set_pp_comm: attach pipeline parallelism before data "
                             "parallelism (llmt_trainer_set_comm)");
    /* the stage's new engine would start without the EP group */
    if (live && llmt__trainer_ep_comm(tr))
        return llmt__err_set(e, LLMT_ERR_STATE,
                             "trainer: set_pp_comm: attach pipeline parallelism before expert "
                             "parallelism (llmt_trainer_set_ep_comm)");
    if (!live && tr->dp_rec && tr->dp_o.zero_stage >= 2)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: set_pp_comm: pipeline parallelism with ZeRO-%d (set on "
                             "llmt_trainer_set_comm) is not supported yet (zero_stage 0 or 1)",
                             (int)tr->dp_o.zero_stage);
    if (o->schedule != LLMT_PP_1F1B && o->schedule != LLMT_PP_GPIPE &&
        o->schedule != LLMT_PP_INTERLEAVED)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: llmt_pp_opts.schedule %d is not LLMT_PP_1F1B (0), "
                             "LLMT_PP_GPIPE (1) or LLMT_PP_INTERLEAVED (2)",
                             (int)o->schedule);
    if (o->virtual_stages < 1 || (o->virtual_stages > 1 && o->schedule != LLMT_PP_INTERLEAVED))
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: llmt_pp_opts.virtual_stages %d: >= 1, and > 1 only "
                             "with the schedule LLMT_PP_INTERLEAVED",
                             (int)o->virtual_stages);
    if ((o->stage_layers == NULL) != (o->n_stage_layers == 0))
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: llmt_pp_opts.stage_layers %s with n_stage_layers %d "
                             "(both set, or neither for the automatic balance)",
                             o->stage_layers ? "set" : "NULL", (int)o->n_stage_layers);
    if ((s = llmt__pp_sched_check(e, o->schedule, n, o->virtual_stages, tr->o.grad_accum)))
        return s;
    if (o->virtual_stages > 1 && (int64_t)n * o->virtual_stages > tr->model->cfg.layers)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "parallelism.virtual_stages: %d chunks on each of %d stages are "
                             "%d virtual stages for model.layers %d (each needs a layer)",
                             (int)o->virtual_stages, (int)n, (int)(n * o->virtual_stages),
                             (int)tr->model->cfg.layers);
    if (o->stage_layers && o->virtual_stages > 1 && o->n_stage_layers != n * o->virtual_stages)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "parallelism.stage_layers: %d entries for pp %d x virtual_stages "
                             "%d (one per virtual stage: chunk c of stage s is entry c*pp+s)",
                             (int)o->n_stage_layers, (int)n, (int)o->virtual_stages);
    /* interleaving's wrapped-round exchanges (stage p-1 sends on to stage
     * 0 while stage 0 sends to stage 1) wait on each other in cycles when
     * a send blocks until it is received: the schedule leaves its sends in
     * flight (lib/train/pp_send.h), which NCCL cannot here */
    if (o->schedule == LLMT_PP_INTERLEAVED && llmt__comm_isend_kind(comm) == LLMT__ISEND_NONE)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "parallelism.pp_schedule: interleaved (virtual_stages %d) over "
                             "NCCL is not supported yet: its sends wait for their receivers "
                             "and the schedule's ring of messages would wait forever "
                             "(in-process, MPI and Gloo ranks run it); or pp_schedule 1f1b",
                             (int)o->virtual_stages);
    return LLMT_OK;
}

/* A new engine holding only this stage's part (lib/train/stage.h), made
 * from the host copies of the parameters and moments, and the schedule
 * over comm. */
LLMT_API llmt_status llmt_trainer_set_pp_comm(llmt_trainer *tr, llmt_comm *comm,
                                              const llmt_pp_opts *opts)
{
    if (!tr)
        return LLMT_ERR_NULL_POINTER;
    llmt_pp_opts o;
    llmt_pp_opts_init(&o, sizeof o);
    llmt_status s;
    if (opts && (s = llmt__opts_copy(&tr->err, "llmt_pp_opts", &o, sizeof o, opts)) != LLMT_OK)
        return s;
    int32_t n = 1, r = 0;
    if (comm && (llmt_comm_size(comm, &n) != LLMT_OK || llmt_comm_rank(comm, &r) != LLMT_OK))
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT, "trainer: set_pp_comm: %s",
                             llmt_comm_last_error(comm));
    (void)r;
    /* one stage runs the whole model with no schedule: the options would be ignored */
    if (n <= 1 && (o.schedule != LLMT_PP_1F1B || o.virtual_stages != 1 || o.stage_layers ||
                   o.n_stage_layers))
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: set_pp_comm: llmt_pp_opts.%s is set but the pipeline "
                             "group has one stage (%s): it takes effect only with 2 or more "
                             "(leave the options at their defaults)",
                             o.schedule != LLMT_PP_1F1B ? "schedule"
                             : o.virtual_stages != 1    ? "virtual_stages"
                                                        : "stage_layers",
                             comm ? "a communicator of size 1" : "comm is NULL");
    if ((s = llmt__moe_device_group_check(tr, comm, "set_pp_comm", "parallelism.pp")) !=
        LLMT_OK)
        return s;
    int *first = NULL;
    llmt__devtrain_stage st;
    if (!tr->dev) { /* no engine yet: checked (the layout too) and recorded */
        s = n > 1 ? pp_check(tr, comm, &o, n, 0) : LLMT_OK;
        if (s == LLMT_OK && n > 1)
            s = llmt__trainer_pp_stage(tr, comm, &o, &first, &st);
        free(first);
        return s != LLMT_OK ? s : llmt__trainer_record_pp(tr, comm, &o);
    }
    if (n <= 1 && !tr->pp)
        return LLMT_OK; /* one stage: the whole model, as it is */
    if ((s = pp_check(tr, comm, &o, n, 1)) != LLMT_OK)
        return s;
    s = llmt__trainer_pp_stage(tr, comm, &o, &first, &st);
    if (s == LLMT_OK)
        s = llmt__trainer_host_sync(tr);
    llmt__devtrain *dev = NULL;
    llmt__pp *pp = NULL;
    if (s == LLMT_OK) {
        llmt__dev_opts d = {tr->o.device_index, tr->o.deterministic};
        /* tensor parallelism, when attached, splits the stage's layers */
        llmt__devtrain_tp et = {.size = 1}; /* no split */
        if (tr->tp)
            llmt__tp_engine(tr->tp, &et);
        /* context parallelism, when attached: the stage's engine holds this
         * rank's T / cp rows of each sequence, as the CP engine did */
        int Tl = tr->cp ? tr->T / llmt__cp_size(tr->cp) : tr->T;
        s = llmt__devtrain_create_stage(&tr->err, tr->ops, &d, tr->model, tr->B, Tl,
                                        tr->o.grad_accum, tr->o.recompute, NULL, &et, &st,
                                        &dev);
    }
    if (s == LLMT_OK && tr->cp)
        llmt__devtrain_set_cp(dev, tr->cp);
    if (s == LLMT_OK)
        s = llmt__devtrain_upload(dev, tr->model->data, tr->m, tr->v);
    if (s == LLMT_OK)
        s = llmt__pp_create(&tr->err, comm, o.schedule, o.virtual_stages, tr->o.grad_accum,
                            tr->ops->store, first, dev, &pp);
    free(first);
    if (s != LLMT_OK) {
        llmt__devtrain_destroy(dev);
        return s;
    }
    tr->pp = pp;
    tr->pp_comm = comm;
    use_engine(tr, dev);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_trainer_pp_stats(const llmt_trainer *tr, llmt_pp_stats *out)
{
    if (!tr)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&tr->err, "trainer: pp_stats", out);
    if (out->struct_size < sizeof(size_t))
        return llmt__err_set((llmt_err *)&tr->err, LLMT_ERR_STRUCT_SIZE,
                             "trainer: pp_stats: out: struct_size is %zu; set it to sizeof "
                             "the struct",
                             out->struct_size);
    llmt_pp_stats r;
    memset(&r, 0, sizeof r);
    r.struct_size = out->struct_size;
    r.stages = 1;
    r.layers = tr->model->cfg.layers;
    r.micro_batches = tr->o.grad_accum;
    llmt_status s = llmt__trainer_ready((llmt_trainer *)tr);
    if (s != LLMT_OK)
        return s;
    r.param_bytes = (int64_t)(llmt__devtrain_param_floats(tr->dev) * sizeof(float));
    if (tr->pp) {
        llmt__pp_info i;
        llmt__pp_info_get(tr->pp, &i);
        r.stage = i.stage;
        r.stages = i.stages;
        r.first_layer = i.l0;
        r.layers = i.l1 - i.l0;
        r.schedule = i.schedule;
        r.in_flight = i.slots;
        r.step_seconds = i.step_s;
        r.idle_seconds = i.idle_s;
        r.bubble = i.step_s > 0.0 ? i.idle_s / i.step_s : 0.0;
        /* interleaving's v chunks shrink the fill and drain v-fold */
        r.bubble_balanced = (double)(i.stages - 1) / ((double)i.v * i.micro + i.stages - 1);
        r.sent_bytes = i.sent_bytes;
        r.recv_bytes = i.recv_bytes;
        r.busy_cpu_seconds = i.busy_cpu_s;
        r.span_cpu_seconds = i.span_cpu_s;
        r.bubble_cpu = i.span_cpu_s > 0.0 ? 1.0 - i.busy_cpu_s / i.span_cpu_s : 0.0;
    }
    size_t n = out->struct_size < sizeof r ? out->struct_size : sizeof r;
    memcpy(out, &r, n);
    return LLMT_OK;
}

int llmt__trainer_has_pp(const llmt_trainer *tr)
{
    return tr->pp != NULL || tr->pp_comm != NULL; /* attached, or recorded */
}

int llmt__trainer_pp_info(const llmt_trainer *tr, llmt__pp_info *out)
{
    if (!tr || llmt__trainer_ready((llmt_trainer *)tr) != LLMT_OK || !tr->pp)
        return 0;
    llmt__pp_info_get(tr->pp, out);
    return 1;
}

/* ---- context parallelism (lib/train/cp.c) */

/* What context parallelism does not compose with yet (live: the engine
 * is made; the order of attaching matters then). */
static llmt_status cp_check(llmt_trainer *tr, int live)
{
    if (live && tr->dp)
        return llmt__err_set(&tr->err, LLMT_ERR_STATE,
                             "trainer: set_cp_comm: attach context parallelism before data "
                             "parallelism (llmt_trainer_set_comm)");
    if (live && tr->pp) /* each stage's engine is made for the rows CP gives it */
        return llmt__err_set(&tr->err, LLMT_ERR_STATE,
                             "trainer: set_cp_comm: attach context parallelism before "
                             "pipeline parallelism (llmt_trainer_set_pp_comm)");
    if (live && llmt__trainer_ep_comm(tr)) /* the new engine would hold every expert */
        return llmt__err_set(&tr->err, LLMT_ERR_STATE,
                             "trainer: set_cp_comm: attach context parallelism before expert "
                             "parallelism (llmt_trainer_set_ep_comm)");
    if (!tr->ops->attn_cp_fwd)
        return llmt__err_set(&tr->err, LLMT_ERR_UNSUPPORTED,
                             "trainer: set_cp_comm: the %s backend has no context parallel "
                             "attention ops (lib/exec/dev.h attn_cp_*)",
                             tr->ops->name);
    if (tr->ops->unverified_cp) /* the ops and the staged exchange exist (dev.h) */
        return llmt__err_set(&tr->err, LLMT_ERR_UNSUPPORTED,
                             "trainer: set_cp_comm: context parallelism on the %s backend: "
                             "the %s",
                             tr->ops->name, tr->ops->unverified_cp);
    return LLMT_OK;
}

const llmt__cp *llmt__trainer_cp(const llmt_trainer *tr)
{
    return tr->cp;
}

/* A new engine for T / cp rows of each sequence (T: NULL or a group of
 * one), made from the host copies of the parameters and moments; before
 * the engine is made, the group and this rank's rows only (the engine is
 * made for them with the others, trainer_build.c). */
llmt_status llmt__trainer_set_cp(llmt_trainer *tr, llmt_comm *comm, int variant)
{
    if (!tr)
        return LLMT_ERR_NULL_POINTER;
    int32_t n = 1;
    if (comm && llmt_comm_size(comm, &n) != LLMT_OK)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT, "trainer: set_cp_comm: %s",
                             llmt_comm_last_error(comm));
    if (n <= 1 && !tr->cp)
        return LLMT_OK;
    int live = tr->dev != NULL;
    llmt_status s = cp_check(tr, live);
    /* MoE's statistics summed over the group as host arrays (moe_attach.c) */
    if (s == LLMT_OK)
        s = llmt__moe_device_group_check(tr, comm, "set_cp_comm", "parallelism.cp");
    int32_t tpn = 1;
    if (s == LLMT_OK && llmt__tp_seq(tr->tp))
        llmt_comm_size(llmt__tp_comm(tr->tp), &tpn);
    if (s == LLMT_OK)
        s = cp_sp_check(tr, n, tpn);
    llmt__cp *cp = NULL;
    if (s == LLMT_OK && n > 1)
        s = llmt__cp_create(&tr->err, comm, variant, tr->T, tr->ops->store != LLMT_DTYPE_FP32,
                            &cp);
    if (s == LLMT_OK && live)
        s = llmt__trainer_host_sync(tr);
    size_t rows = (size_t)tr->B * (size_t)tr->o.grad_accum * (size_t)(tr->T / n);
    int32_t *in = malloc(rows * sizeof *in), *tg = malloc(rows * sizeof *tg);
    if (s == LLMT_OK && (!in || !tg))
        s = llmt__err_set(&tr->err, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    llmt__devtrain *dev = NULL;
    if (s == LLMT_OK && live) { /* tensor parallelism, when attached, stays as it is */
        llmt__devtrain_tp et = {.size = 1}; /* no split */
        if (tr->tp)
            llmt__tp_engine(tr->tp, &et);
        llmt__dev_opts d = {tr->o.device_index, tr->o.deterministic};
        s = llmt__devtrain_create_tp(&tr->err, tr->ops, &d, tr->model, tr->B, tr->T / n,
                                     tr->o.grad_accum, tr->o.recompute, NULL, &et, &dev);
    }
    if (s == LLMT_OK && live) {
        llmt__devtrain_set_cp(dev, cp);
        s = llmt__devtrain_upload(dev, tr->model->data, tr->m, tr->v);
    }
    if (s != LLMT_OK) {
        llmt__devtrain_destroy(dev);
        llmt__cp_destroy(cp);
        free(in);
        free(tg);
        return s;
    }
    if (live)
        use_engine(tr, dev); /* the old engine may use the old group until it goes */
    llmt__cp_destroy(tr->cp);
    free(tr->cp_in);
    free(tr->cp_tg);
    tr->cp = cp;
    tr->cp_in = in;
    tr->cp_tg = tg;
    return LLMT_OK;
}
