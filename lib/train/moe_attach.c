/* llmt_trainer_set_ep_comm: the trainer's side of expert parallelism
 * (the layer's exchange is moe_ep.c, the engine's MoE layers moe_net.c,
 * its layout of this rank's experts device.c). Before the engine is made
 * the group is checked and recorded: the engine is then made for this
 * rank's experts from the start (trainer_build.c). */
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "train/device.h"
#include "train/moe_net.h"
#include "train/trainer_impl.h"
#include "train/trainer_state.h"

/* A MoE model's groups on a backend whose memory is not the host's (the
 * op table's host_memory 0: CUDA). The router's tallies and the step's
 * load-balancing sums (moe_net.c, moe_group.c) are host arrays summed over
 * the data parallel, pipeline and context parallel groups as they are, and
 * the expert exchange is staged through host memory (moe_dev_ep.c): a host
 * communicator (in-process, Gloo, MPI) takes them, a NCCL one takes device
 * memory only, and nothing stages them to the device yet, so a NCCL group
 * is refused by name, as is every group on a table whose
 * unverified_moe_groups says they never ran there (lib/exec/dev.h).
 * Data parallelism over a host communicator is staged by dp.c (checked
 * with MoE on the emulation: moe-engine-emul's dp 2). what: the setter's
 * name. */
llmt_status llmt__moe_device_group_check(llmt_trainer *tr, llmt_comm *comm, const char *what,
                                         const char *key)
{
    int32_t n = 1;
    llmt_comm_backend be = LLMT_COMM_AUTO;
    if (!comm || tr->ops->host_memory || tr->model->cfg.moe_experts <= 0 ||
        llmt_comm_size(comm, &n) != LLMT_OK || n <= 1)
        return LLMT_OK;
    llmt_err *e = llmt__trainer_err(tr);
    if (tr->ops->unverified_moe_groups)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: %s: %s %d with MoE layers on the %s backend: %s; use "
                             "%s 1",
                             what, key, (int)n, tr->ops->name, tr->ops->unverified_moe_groups,
                             key);
    if (llmt_comm_backend_of(comm, &be) == LLMT_OK && be == LLMT_COMM_NCCL)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: %s: %s %d over a NCCL communicator with MoE layers on "
                             "the %s backend is not supported yet: the router's expert "
                             "tallies are host arrays summed over that group, and NCCL takes "
                             "device memory (they are not staged to the device; doc/moe.md); "
                             "use %s 1%s",
                             what, key, (int)n, tr->ops->name, key,
                             ", or an in-process, Gloo or MPI communicator");
    return LLMT_OK;
}

/* Expert parallelism of a MoE model on a backend whose memory is not the
 * host's: the exchange is staged through host memory for a host
 * communicator (moe_dev_ep.c), the data parallel group it is carved out
 * of too (dp.c), and the expert rows' gather of a download (device.c's
 * ep_gather); refused only on a table whose unverified_moe_groups says
 * it never ran there. */
static llmt_status ep_device_check(llmt_trainer *tr, int32_t n)
{
    if (n <= 1 || tr->ops->host_memory || tr->model->cfg.moe_experts <= 0)
        return LLMT_OK;
    if (tr->ops->unverified_moe_groups)
        return llmt__err_set(llmt__trainer_err(tr), LLMT_ERR_UNSUPPORTED,
                             "trainer: set_ep_comm: parallelism.ep %d with MoE layers on the "
                             "%s backend: %s; use parallelism.ep 1",
                             (int)n, tr->ops->name, tr->ops->unverified_moe_groups);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_trainer_set_ep_comm(llmt_trainer *tr, llmt_comm *comm)
{
    if (!tr)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = llmt__trainer_err(tr);
    int32_t n = 1;
    if (comm && llmt_comm_size(comm, &n) != LLMT_OK)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT, "trainer: set_ep_comm: %s",
                             llmt_comm_last_error(comm));
    llmt_status ds = ep_device_check(tr, n);
    if (ds != LLMT_OK)
        return ds;
    if (!tr->dev) { /* no engine yet: checked and recorded */
        int E = tr->model->cfg.moe_experts;
        if (E <= 0 && n > 1)
            return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                                 "trainer: set_ep_comm: parallelism.ep %d needs "
                                 "mixture-of-experts layers (llmt_model_config.moe_experts 0)",
                                 (int)n);
        if (n > 1 && E % n)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                 "trainer: set_ep_comm: parallelism.ep %d does not divide "
                                 "model.moe.experts %d (each rank holds experts/ep of them)",
                                 (int)n, E);
        tr->ep_rec = n > 1 ? comm : NULL;
        return LLMT_OK;
    }
    llmt__devtrain *g = tr->dev;
    llmt__moe_net *m = llmt__devtrain_moe(g);
    if (!m && n > 1)
        return llmt__err_set(e, LLMT_ERR_UNSUPPORTED,
                             "trainer: set_ep_comm: parallelism.ep %d needs mixture-of-experts "
                             "layers (llmt_model_config.moe_experts 0)",
                             (int)n);
    if (!m)
        return LLMT_OK;
    /* data parallelism attached first: its units are of the old layout,
     * so it is detached (every rank's moment shares back in the engine's
     * full moments) and made again after, its experts then units of their
     * own group (dp.c) */
    llmt_comm *dpc = tr->dp ? llmt__dp_comm(tr->dp) : NULL;
    llmt_dp_opts o;
    if (tr->dp)
        o = *llmt__dp_opts(tr->dp);
    llmt_status s = dpc ? llmt_trainer_set_comm(tr, NULL, NULL) : LLMT_OK;
    /* the engine made again for this rank's experts from the host copies */
    if (s == LLMT_OK)
        s = llmt__trainer_host_sync(tr);
    if (s == LLMT_OK)
        s = llmt__devtrain_set_ep(g, comm);
    tr->grads = llmt__devtrain_host_grads(g);
    tr->m = llmt__devtrain_host_m(g);
    tr->v = llmt__devtrain_host_v(g);
    tr->stale_params = tr->stale_moments = 0;
    tr->stale_grads = 1;
    if (s == LLMT_OK && dpc)
        s = llmt_trainer_set_comm(tr, dpc, &o);
    return s;
}

llmt_comm *llmt__trainer_ep_comm(llmt_trainer *tr)
{
    if (!tr->dev) /* not made yet: the recorded group */
        return tr->ep_rec;
    llmt__devtrain *g = tr->dev;
    llmt__moe_net *m = llmt__devtrain_moe(g);
    return m ? llmt__moe_net_ep_comm(m) : NULL;
}

#ifdef __linux__
/* Floats [a, b) of t given back: whole pages to the OS (they read 0 until
 * written), the partial ones at the edges, shared with rows this rank
 * holds or another tensor, set to NaN. */
static void give_back(float *t, size_t a, size_t b, size_t page)
{
    if (a >= b)
        return;
    uintptr_t pa = (uintptr_t)(t + a), pb = (uintptr_t)(t + b);
    uintptr_t ia = (pa + page - 1) / page * page, ib = pb / page * page;
    size_t ea = b, eb = b;
    if (ia < ib && madvise((void *)ia, ib - ia, MADV_DONTNEED) == 0) {
        ea = (ia - (uintptr_t)t) / sizeof(float);
        eb = (ib - (uintptr_t)t) / sizeof(float);
    }
    for (size_t i = a; i < ea; i++)
        t[i] = NAN;
    for (size_t i = eb; i < b; i++)
        t[i] = NAN;
}
#endif

void llmt__trainer_ep_release(llmt_trainer *tr)
{
#ifdef __linux__
    llmt_model *m = tr->model;
    long ps = sysconf(_SC_PAGESIZE);
    if (llmt__devtrain_ep(tr->dev) <= 1 || llmt__devtrain_host_resident(tr->dev) || ps <= 0 ||
        (size_t)ps % sizeof(float) || !llmt__alloc_is_default(m->ctx))
        return;
    for (int l = 0; l < m->cfg.layers; l++) {
        const llmt__layer_offs *o = &m->layer[l];
        const size_t t[3] = {o->ew1, o->ew3, o->ew2};
        for (int j = 0; j < 3 && o->ew1 != LLMT__NOPARAM; j++)
            for (int i = 0; i < m->nparams; i++) {
                int64_t n = llmt__devtrain_local_numel(tr->dev, i);
                if (m->params[i].offset != t[j] || n == 0)
                    continue; /* not this tensor, or another stage's */
                size_t a = (size_t)llmt__devtrain_ep_row0(tr->dev, i), b = a + (size_t)n;
                float *x = m->data + t[j];
                give_back(x, 0, a, (size_t)ps);
                give_back(x, b, m->params[i].numel, (size_t)ps);
            }
    }
#else
    (void)tr;
#endif
}
