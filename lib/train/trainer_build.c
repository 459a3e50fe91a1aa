/* The trainer's engine made once, from the whole parallel layout.
 *
 * A new trainer has no engine yet: the attach calls (set_tp_comm,
 * set_sequence_parallel, set_cp_comm, set_pp_comm, set_ep_comm, set_comm)
 * check their group and only record it, in any order. The first call that
 * needs the engine (a step, evaluate, generate, a checkpoint, state or
 * memory access) makes it here in one go, in the plan's order: the TP
 * shards, the CP rows, the pipeline stage and the EP rank's experts of one
 * engine, then data parallelism over it. No engine holding more than this
 * rank's part is ever made (a trainer that rebuilt its engine per attach
 * held every expert until expert parallelism came, and paid a rebuild per
 * group). Attaching after that keeps rebuilding the live engine
 * (trainer_parallel.c, moe_attach.c, trainer.c's set_comm). */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "train/moe_net.h"
#include "train/trainer_impl.h"
#include "train/trainer_state.h"

/* ---- recording */

llmt_status llmt__trainer_record_tp(llmt_trainer *tr, llmt_comm *comm, int seq)
{
    int32_t n = 1;
    if (comm && llmt_comm_size(comm, &n) != LLMT_OK)
        return llmt__err_set(&tr->err, LLMT_ERR_INVALID_ARGUMENT, "trainer: set_tp_comm: %s",
                             llmt_comm_last_error(comm));
    llmt__tp *tp = NULL;
    llmt_status s = LLMT_OK;
    if (comm && n > 1) {
        s = llmt__tp_check(&tr->err, &tr->model->cfg, n);
        if (s == LLMT_OK)
            s = llmt__devtrain_tp_supported(&tr->err, tr->ops);
        if (s == LLMT_OK)
            s = llmt__tp_create(&tr->err, comm, tr->ops->store, seq, &tp);
        if (s != LLMT_OK)
            return s;
    }
    llmt__tp_destroy(tr->tp);
    tr->tp = tp;
    return LLMT_OK;
}

llmt_status llmt__trainer_record_pp(llmt_trainer *tr, llmt_comm *comm, const llmt_pp_opts *o)
{
    int32_t n = 1;
    if (comm)
        llmt_comm_size(comm, &n);
    int *layers = NULL;
    if (n > 1 && o->stage_layers) {
        layers = malloc((size_t)o->n_stage_layers * sizeof *layers);
        if (!layers)
            return llmt__err_set(&tr->err, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
        for (int i = 0; i < o->n_stage_layers; i++)
            layers[i] = o->stage_layers[i];
    }
    free(tr->pp_layers);
    tr->pp_layers = layers;
    tr->pp_comm = n > 1 ? comm : NULL;
    tr->pp_o = *o;
    tr->pp_o.stage_layers = layers;
    return LLMT_OK;
}

/* ---- the pipeline stage */

llmt_status llmt__trainer_pp_stage(llmt_trainer *tr, llmt_comm *comm, const llmt_pp_opts *o,
                                   int **first, llmt__devtrain_stage *st)
{
    int32_t n = 1, r = 0;
    llmt_comm_size(comm, &n);
    llmt_comm_rank(comm, &r);
    /* the virtual stages' layers (n of them without interleaving); stage r
     * holds chunk c = virtual stage c * n + r */
    int v = o->virtual_stages, nv = n * v;
    int *f = malloc(((size_t)nv + 1 + 2 * (size_t)v) * sizeof *f);
    if (!f)
        return llmt__err_set(&tr->err, LLMT_ERR_OUT_OF_MEMORY, "trainer: no memory");
    int *cl0 = f + nv + 1, *cl1 = cl0 + v;
    llmt_status s = llmt__pp_layout(&tr->err, &tr->model->cfg, tr->T, nv, o->stage_layers,
                                    o->n_stage_layers, f);
    if (s != LLMT_OK) {
        free(f);
        return s;
    }
    for (int c = 0; c < v; c++) {
        cl0[c] = f[c * n + r];
        cl1[c] = f[c * n + r + 1];
    }
    int sets = llmt__pp_inflight(o->schedule, v, tr->o.grad_accum, n, r);
    llmt__devtrain_stage d = {r, n, cl0[0], cl1[v - 1], sets, v, cl0, cl1};
    *st = d;
    *first = f;
    return LLMT_OK;
}

/* ---- the one build */

/* The engine and the pipeline's schedule from the recorded tp, cp, pp and
 * ep (no data parallelism yet). */
static llmt_status make_engine(llmt_trainer *tr)
{
    llmt_status s = LLMT_OK;
    int *first = NULL;
    llmt__devtrain_stage st, *stp = NULL;
    if (tr->pp_comm) {
        if ((s = llmt__trainer_pp_stage(tr, tr->pp_comm, &tr->pp_o, &first, &st)) != LLMT_OK)
            return s;
        stp = &st;
    }
    llmt__devtrain_tp et = {.size = 1}; /* no split */
    if (tr->tp)
        llmt__tp_engine(tr->tp, &et);
    /* context parallelism: this rank's T / cp rows of each sequence */
    int Tl = tr->cp ? tr->T / llmt__cp_size(tr->cp) : tr->T;
    llmt__dev_opts d = {tr->o.device_index, tr->o.deterministic};
    llmt__devtrain_fp8 f8 = {tr->o.fp8, tr->o.fp8_amax_history, tr->o.fp8_margin,
                             tr->o.fp8_format};
    llmt__devtrain *dev = NULL;
    llmt__pp *pp = NULL;
    s = llmt__devtrain_create_layout(&tr->err, tr->ops, &d, tr->model, tr->B, Tl,
                                     tr->o.grad_accum, tr->o.recompute, &f8, &et, stp,
                                     tr->ep_rec, &dev);
    if (s == LLMT_OK && tr->cp)
        llmt__devtrain_set_cp(dev, tr->cp);
    if (s == LLMT_OK && stp)
        s = llmt__pp_create(&tr->err, tr->pp_comm, tr->pp_o.schedule, tr->pp_o.virtual_stages,
                            tr->o.grad_accum, tr->ops->store, first, dev, &pp);
    free(first);
    if (s != LLMT_OK) {
        llmt__devtrain_destroy(dev);
        return s;
    }
    tr->dev = dev;
    tr->pp = pp;
    tr->grads = llmt__devtrain_host_grads(dev);
    tr->m = llmt__devtrain_host_m(dev);
    tr->v = llmt__devtrain_host_v(dev);
    /* the engine took the model's parameters; its moments are zero, as
     * the host copies are */
    tr->stale_params = tr->stale_moments = tr->stale_grads = 0;
    return LLMT_OK;
}

llmt_status llmt__trainer_ready(llmt_trainer *tr)
{
    if (tr->dev)
        return LLMT_OK;
    llmt_status s = make_engine(tr);
    if (s != LLMT_OK)
        return s;
    /* data parallelism around it (collective), its experts reduced over
     * the group the EP group leaves (dp.c) */
    if (tr->dp_rec)
        s = llmt_trainer_set_comm(tr, tr->dp_rec, &tr->dp_o);
    if (s != LLMT_OK) { /* back to the recorded layout: the next call tries again */
        llmt__pp_destroy(tr->pp);
        llmt__devtrain_destroy(tr->dev);
        tr->pp = NULL;
        tr->dev = NULL;
        tr->grads = tr->m = tr->v = NULL;
        return s;
    }
    /* from here on the engine holds them (llmt__trainer_ep_comm reads the
     * EP group from it; set_comm made data parallelism) */
    tr->ep_rec = tr->dp_rec = NULL;
    return LLMT_OK;
}
