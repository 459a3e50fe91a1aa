/* The plan handle: rank <-> coordinates, process groups, stage layers,
 * reshape, Young/Daly, JSON and notes. Rank order (TP fastest):
 *   rank = tp + TP*(cp + CP*(pp + PP*dp)),  ep = dp mod EP. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

void llmt__plan_note(llmt_plan *p, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t have = p->notes ? strlen(p->notes) : 0, l = strlen(line);
    if (have + l + 2 > p->notes_cap) {
        size_t nc = p->notes_cap ? p->notes_cap * 2 : 2048;
        while (nc < have + l + 2)
            nc *= 2;
        char *nb = realloc(p->notes, nc);
        if (!nb)
            return;
        p->notes = nb;
        p->notes_cap = nc;
    }
    memcpy(p->notes + have, line, l);
    p->notes[have + l] = '\n';
    p->notes[have + l + 1] = '\0';
}

static void warn_notes(llmt_plan *p)
{
    const llmt_spec *s = p->spec;
    const llmt_plan_estimate *e = &p->est;
    if (s->parallelism.tp > llmt__plan_node_ranks(s, p->world))
        llmt__plan_note(p, "warning: tp %lld spans nodes (gpus_per_node %lld): "
                        "its per-layer all-reduces go over InfiniBand",
                        (long long)s->parallelism.tp,
                        (long long)s->hardware.gpus_per_node);
    if (s->parallelism.pp > 1 && s->batch.grad_accum < s->parallelism.pp)
        llmt__plan_note(p, "warning: %lld micro-batches for %lld pipeline stages: "
                        "bubble %.0f%%; raise grad_accum (lower micro) to fill it",
                        (long long)s->batch.grad_accum,
                        (long long)s->parallelism.pp, 100 * e->bubble_fraction);
    else if (s->parallelism.pp > 1 && e->bubble_fraction > 0.25)
        llmt__plan_note(p, "warning: pipeline bubble %.0f%% = (p-1)/(v*m+p-1) with "
                        "p %lld, m %lld, v %lld: more micro-batches (lower micro) "
                        "or virtual_stages > 1 (interleaving) shrink it",
                        100 * e->bubble_fraction, (long long)s->parallelism.pp,
                        (long long)s->batch.grad_accum,
                        (long long)s->parallelism.virtual_stages);
    if (!e->fits)
        llmt__plan_note(p, "warning: needs %.1f GB per GPU, %s has %.0f GB "
                        "(raise zero, tp or pp, or recompute)",
                        e->mem_total / 1e9, s->hardware.gpu, e->mem_capacity / 1e9);
    /* a layout the planner can price but llmt_job does not run yet: said
     * here, not first at `llmtrain train` */
    char why[1024];
    int64_t world = p->world > 0 ? p->world
                                 : s->parallelism.tp * s->parallelism.cp * s->parallelism.pp *
                                       s->parallelism.dp;
    if (llmt__plan_job_limits(s, world, why, sizeof why) != LLMT_OK)
        llmt__plan_note(p, "note: llmt_job does not run this layout yet: %s", why);
    if (s->parallelism.dp > 1 && s->parallelism.zero == 0 &&
        e->mem_optimizer > 0.3 * e->mem_capacity)
        llmt__plan_note(p, "note: optimizer states take %.1f GB per GPU; zero 1 "
                        "shards them over dp %lld at no extra traffic",
                        e->mem_optimizer / 1e9, (long long)s->parallelism.dp);
}

/* The engine's own numbers (engine.c) for a parallel layout it runs, so
 * that a run's per-group traffic and memory can be read against them. */
static void engine_note(llmt_plan *p)
{
    const llmt_plan_estimate *e = &p->est;
    if (!e->engine_modeled || (e->tp == 1 && e->dp == 1 && e->cp == 1 && e->pp == 1))
        return;
    char who[160] = "one rank"; /* under pp the fields are one stage's: say which */
    if (e->pp > 1)
        snprintf(who, sizeof who,
                 "a rank of pipeline stage %lld of %lld (the one holding the most bytes; "
                 "JSON engine_per_rank.stages: every stage's)",
                 (long long)llmt__plan_engine_top_stage(p->spec), (long long)e->pp);
    if (e->cp > 1)
        llmt__plan_note(p,
                        "engine (lib/train), %s per step: CP %.0f collectives, "
                        "%.3f MB payload (%.3f MB bus)",
                        who, e->engine_cp_calls, e->engine_cp_payload_bytes / 1e6,
                        e->engine_cp_bus_bytes / 1e6);
    llmt__plan_note(p,
                    "engine (lib/train), %s per step: TP %.0f collectives, "
                    "%.3f MB payload (%.3f MB bus); DP %.0f, %.3f MB (%.3f MB bus); "
                    "memory: params %.3f MB, grads %.3f MB, optimizer %.3f MB, "
                    "activations %.3f MB",
                    who, e->engine_tp_calls, e->engine_tp_payload_bytes / 1e6,
                    e->engine_tp_bus_bytes / 1e6, e->engine_dp_calls,
                    e->engine_dp_payload_bytes / 1e6, e->engine_dp_bus_bytes / 1e6,
                    e->engine_mem_params / 1e6, e->engine_mem_grads / 1e6,
                    e->engine_mem_optimizer / 1e6, e->engine_mem_activations / 1e6);
}

llmt_status llmt__plan_build(llmt_context *ctx, llmt_spec *owned, int32_t world,
                             llmt_plan **out)
{
    llmt_plan *p = llmt__calloc(ctx, 1, sizeof *p);
    if (!p) {
        llmt_spec_destroy(owned);
        return llmt__err_set(ctx ? &ctx->err : NULL, LLMT_ERR_OUT_OF_MEMORY,
                             "plan: out of memory");
    }
    p->ctx = ctx;
    p->spec = owned;
    p->world = world;
    p->tp = (int32_t)owned->parallelism.tp;
    p->cp = (int32_t)owned->parallelism.cp;
    p->pp = (int32_t)owned->parallelism.pp;
    p->dp = (int32_t)owned->parallelism.dp;
    p->ep = (int32_t)owned->parallelism.ep;
    llmt__plan_estimate_x(owned, world, NULL, NULL, &p->est, p->terms);
    /* the engine's numbers describe the plan, not each layout the
     * auto-planner weighs (with pp they model every stage) */
    llmt__plan_engine(owned, &p->est);
    if (owned->checkpoint.interval_auto)
        owned->checkpoint.interval = p->est.ckpt_interval_steps;
    warn_notes(p);
    engine_note(p);
    *out = p;
    return LLMT_OK;
}

/* Check the degrees of `s` against world (deriving dp when not given). */
static llmt_status fit_world(llmt_err *err, llmt_spec *s, int32_t world)
{
    int64_t tp = s->parallelism.tp, pp = s->parallelism.pp,
            cp = s->parallelism.cp, mp = tp * pp * cp;
    if (world == 0)
        return LLMT_OK;
    if (!llmt__spec_given(s, "parallelism.dp")) {
        if (world % mp)
            return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                                 "plan: world size %d is not a multiple of "
                                 "tp*pp*cp = %lld", (int)world, (long long)mp);
        int64_t dp = world / mp;
        if (dp % s->parallelism.ep)
            return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                                 "plan: parallelism.ep %lld does not divide the "
                                 "derived dp %lld", (long long)s->parallelism.ep,
                                 (long long)dp);
        if (!llmt__spec_given(s, "batch.global"))
            s->batch.global = s->batch.micro * s->batch.grad_accum * dp;
        else if (s->batch.global % (s->batch.micro * dp))
            return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                                 "plan: batch.global %lld is not a multiple of "
                                 "micro %lld * dp %lld", (long long)s->batch.global,
                                 (long long)s->batch.micro, (long long)dp);
        else
            s->batch.grad_accum = s->batch.global / (s->batch.micro * dp);
        s->parallelism.dp = dp;
        return LLMT_OK;
    }
    if (mp * s->parallelism.dp != world)
        return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: tp*pp*dp*cp = %lld*%lld*%lld*%lld = %lld is "
                             "not the world size %d", (long long)tp, (long long)pp,
                             (long long)s->parallelism.dp, (long long)cp,
                             (long long)(mp * s->parallelism.dp), (int)world);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_plan_create(llmt_context *ctx, const llmt_spec *spec,
                                      int32_t world_size, llmt_plan **out)
{
    llmt_err *err = ctx ? &ctx->err : NULL;
    if (out)
        *out = NULL;
    LLMT__NONNULL(err, "plan: create", spec);
    LLMT__NONNULL(err, "plan: create", out);
    if (world_size < 0)
        return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: world size %d < 0", (int)world_size);
    llmt_spec *s = llmt__spec_clone_into(spec, ctx);
    if (!s)
        return llmt__err_set(err, LLMT_ERR_OUT_OF_MEMORY, "plan: out of memory");
    llmt_status st = fit_world(err, s, world_size);
    if (st != LLMT_OK) {
        llmt_spec_destroy(s);
        return st;
    }
    int64_t w = s->parallelism.tp * s->parallelism.pp * s->parallelism.dp *
                s->parallelism.cp;
    if (w > INT32_MAX) {
        llmt_spec_destroy(s);
        return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: world size %lld exceeds 2^31-1", (long long)w);
    }
    return llmt__plan_build(ctx, s, (int32_t)w, out);
}

LLMT_API void llmt_plan_destroy(llmt_plan *plan)
{
    if (!plan)
        return;
    llmt_spec_destroy(plan->spec);
    free(plan->notes);
    llmt__free(plan->ctx, plan, sizeof *plan);
}

LLMT_API const char *llmt_plan_last_error(const llmt_plan *plan)
{
    return plan ? plan->err.msg : "plan: NULL handle";
}

LLMT_API llmt_status llmt_plan_degrees(const llmt_plan *plan, int32_t *out)
{
    if (!plan)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&plan->err, "plan: degrees", out);
    out[LLMT_DIM_TP] = plan->tp;
    out[LLMT_DIM_CP] = plan->cp;
    out[LLMT_DIM_PP] = plan->pp;
    out[LLMT_DIM_DP] = plan->dp;
    out[LLMT_DIM_EP] = plan->ep;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_plan_world_size(const llmt_plan *plan, int32_t *out)
{
    if (!plan)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&plan->err, "plan: world_size", out);
    *out = plan->world;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_plan_coords(const llmt_plan *plan, int32_t rank,
                                      int32_t *coords)
{
    if (!plan)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&plan->err, "plan: coords", coords);
    llmt_plan *p = (llmt_plan *)plan;
    if (rank < 0 || rank >= plan->world)
        return llmt__err_set(&p->err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: rank %d outside [0, %d)", (int)rank,
                             (int)plan->world);
    int32_t r = rank;
    coords[LLMT_DIM_TP] = r % plan->tp;
    r /= plan->tp;
    coords[LLMT_DIM_CP] = r % plan->cp;
    r /= plan->cp;
    coords[LLMT_DIM_PP] = r % plan->pp;
    r /= plan->pp;
    coords[LLMT_DIM_DP] = r;
    coords[LLMT_DIM_EP] = r % plan->ep;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_plan_rank_of(const llmt_plan *plan,
                                       const int32_t *coords, int32_t *rank)
{
    if (!plan)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&plan->err, "plan: rank_of", coords);
    LLMT__NONNULL((llmt_err *)&plan->err, "plan: rank_of", rank);
    llmt_plan *p = (llmt_plan *)plan;
    const int32_t lim[4] = {plan->tp, plan->cp, plan->pp, plan->dp};
    static const char *const nm[4] = {"tp", "cp", "pp", "dp"};
    for (int i = 0; i < 4; i++)
        if (coords[i] < 0 || coords[i] >= lim[i])
            return llmt__err_set(&p->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "plan: %s coordinate %d outside [0, %d)", nm[i],
                                 (int)coords[i], (int)lim[i]);
    *rank = coords[LLMT_DIM_TP] +
            plan->tp * (coords[LLMT_DIM_CP] +
                        plan->cp * (coords[LLMT_DIM_PP] +
                                    plan->pp * coords[LLMT_DIM_DP]));
    return LLMT_OK;
}

LLMT_API llmt_status llmt_plan_group(const llmt_plan *plan, llmt_plan_dim dim,
                                     int32_t rank, int32_t *ranks,
                                     size_t capacity, size_t *count,
                                     int32_t *group_id)
{
    if (!plan)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&plan->err, "plan: group", count);
    llmt_plan *p = (llmt_plan *)plan;
    int32_t c[LLMT_PLAN_NDIMS];
    llmt_status st = llmt_plan_coords(plan, rank, c);
    if (st != LLMT_OK)
        return st;
    int32_t size, stride, base;
    switch (dim) {
    case LLMT_DIM_TP:
        size = plan->tp;
        stride = 1;
        break;
    case LLMT_DIM_CP:
        size = plan->cp;
        stride = plan->tp;
        break;
    case LLMT_DIM_PP:
        size = plan->pp;
        stride = plan->tp * plan->cp;
        break;
    case LLMT_DIM_DP:
        size = plan->dp;
        stride = plan->tp * plan->cp * plan->pp;
        break;
    case LLMT_DIM_EP:
        size = plan->ep;
        stride = plan->tp * plan->cp * plan->pp;
        break;
    default:
        return llmt__err_set(&p->err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: unknown dimension %d", (int)dim);
    }
    /* The member with this dimension's coordinate 0. */
    int32_t own = dim == LLMT_DIM_TP ? c[0] : dim == LLMT_DIM_CP ? c[1]
                : dim == LLMT_DIM_PP ? c[2] : dim == LLMT_DIM_DP ? c[3] : c[4];
    base = rank - own * stride;
    *count = (size_t)size;
    if (group_id) {
        /* Number the groups by their first member in the order of ranks. */
        int32_t span = size * stride;
        int32_t block = base / span, off = base % span;
        *group_id = block * stride + off;
    }
    if (!ranks && capacity)
        return llmt__err_set(&p->err, LLMT_ERR_NULL_POINTER,
                             "plan: group: ranks is NULL (capacity %zu; NULL asks the size "
                             "only with capacity 0)",
                             capacity);
    if (!ranks)
        return LLMT_OK;
    if (capacity < (size_t)size)
        return llmt__err_set(&p->err, LLMT_ERR_BUFFER_TOO_SMALL,
                             "plan: group of %d ranks, buffer holds %zu",
                             (int)size, capacity);
    for (int32_t i = 0; i < size; i++)
        ranks[i] = base + i * stride;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_plan_stage_layers(const llmt_plan *plan,
                                            int32_t stage, int32_t chunk,
                                            int32_t *first, int32_t *count)
{
    if (!plan)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&plan->err, "plan: stage_layers", first);
    LLMT__NONNULL((llmt_err *)&plan->err, "plan: stage_layers", count);
    llmt_plan *p = (llmt_plan *)plan;
    int64_t v = plan->spec->parallelism.virtual_stages;
    if (stage < 0 || stage >= plan->pp || chunk < 0 || chunk >= v)
        return llmt__err_set(&p->err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: stage %d chunk %d outside pp %d x "
                             "virtual_stages %lld", (int)stage, (int)chunk,
                             (int)plan->pp, (long long)v);
    int64_t f, c;
    llmt__plan_spec_span(plan->spec, stage, chunk, &f, &c);
    *first = (int32_t)f;
    *count = (int32_t)c;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_plan_get_estimate(const llmt_plan *plan,
                                            llmt_plan_estimate *out)
{
    if (!plan)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&plan->err, "plan: get_estimate", out);
    size_t n = out->struct_size;
    if (n < offsetof(llmt_plan_estimate, world_size) + sizeof(int32_t))
        return llmt__err_set(&((llmt_plan *)plan)->err, LLMT_ERR_STRUCT_SIZE,
                             "plan: estimate struct_size %zu too small", n);
    if (n > sizeof plan->est)
        n = sizeof plan->est;
    memcpy(out, &plan->est, n);
    out->struct_size = n;
    return LLMT_OK;
}

static llmt_status put_text(llmt_plan *p, const char *what, const char *text,
                            char *buf, size_t buflen, size_t *needed)
{
    size_t l = strlen(text);
    if (needed)
        *needed = l + 1;
    if (buflen == 0)
        return llmt__err_set(&p->err, LLMT_ERR_BUFFER_TOO_SMALL,
                             "%s: needs a buffer of %zu bytes", what, l + 1);
    if (!buf)
        return llmt__err_set(&p->err, LLMT_ERR_NULL_POINTER,
                             "%s: buf is NULL (buflen > 0)", what);
    if (l + 1 > buflen) {
        memcpy(buf, text, buflen - 1);
        buf[buflen - 1] = '\0';
        return llmt__err_set(&p->err, LLMT_ERR_BUFFER_TOO_SMALL,
                             "plan: needs a buffer of %zu bytes", l + 1);
    }
    memcpy(buf, text, l + 1);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_plan_explain(const llmt_plan *plan, char *buf,
                                       size_t buflen, size_t *needed)
{
    if (needed)
        *needed = 0;
    if (!plan)
        return LLMT_ERR_NULL_POINTER;
    return put_text((llmt_plan *)plan, "plan: explain", plan->notes ? plan->notes : "",
                    buf, buflen, needed);
}

#define NUM(o, k, v) cJSON_AddNumberToObject(o, k, (double)(v))

/* The step's terms, by key; they add up to the step time. */
static void add_terms(cJSON *o, const double *terms)
{
    cJSON *t = cJSON_AddObjectToObject(o, "terms");
    for (int i = 0; t && i < LLMT_PLAN_NTERMS; i++)
        cJSON_AddNumberToObject(t, llmt__plan_terms[i].key, terms[llmt__plan_terms[i].term]);
}

/* What this library's engine moves and holds on one rank (engine.c). */
static void engine_fields(cJSON *g, const llmt_plan_estimate *e)
{
    NUM(g, "store_bytes", e->engine_store_bytes);
    static const char *const grp[] = {"tp_per_step", "dp_per_step", "cp_per_step"};
    const double v[3][3] = {
        {e->engine_tp_calls, e->engine_tp_payload_bytes, e->engine_tp_bus_bytes},
        {e->engine_dp_calls, e->engine_dp_payload_bytes, e->engine_dp_bus_bytes},
        {e->engine_cp_calls, e->engine_cp_payload_bytes, e->engine_cp_bus_bytes}};
    for (int i = 0; g && i < 3; i++) {
        cJSON *d = cJSON_AddObjectToObject(g, grp[i]);
        NUM(d, "calls", v[i][0]);
        NUM(d, "payload_bytes", v[i][1]);
        NUM(d, "bus_bytes", v[i][2]);
    }
    cJSON *m = cJSON_AddObjectToObject(g, "memory_bytes");
    NUM(m, "params", e->engine_mem_params);
    NUM(m, "grads", e->engine_mem_grads);
    NUM(m, "optimizer", e->engine_mem_optimizer);
    NUM(m, "activations", e->engine_mem_activations);
}

/* engine_per_rank: null where the engine does not run the layout; under
 * pipeline parallelism the stage holding the most bytes ("stage"), and
 * every stage's numbers ("stages"), as their ranks differ. */
static void add_engine(cJSON *o, const llmt_plan_estimate *e, const llmt_spec *s)
{
    if (!e->engine_modeled) {
        cJSON_AddNullToObject(o, "engine_per_rank");
        return;
    }
    cJSON *g = cJSON_AddObjectToObject(o, "engine_per_rank");
    engine_fields(g, e);
    if (!g || !s || s->parallelism.pp <= 1)
        return;
    NUM(g, "stage", llmt__plan_engine_top_stage(s));
    cJSON *arr = cJSON_AddArrayToObject(g, "stages");
    for (int64_t st = 0; arr && st < s->parallelism.pp; st++) {
        llmt_plan_estimate x;
        memset(&x, 0, sizeof x);
        llmt__plan_engine_stage(s, st, &x);
        cJSON *y = cJSON_CreateObject();
        NUM(y, "stage", st);
        engine_fields(y, &x);
        cJSON_AddItemToArray(arr, y);
    }
}

static void add_estimate(cJSON *o, const llmt_plan_estimate *e, const double *terms,
                         const llmt_spec *s)
{
    cJSON *m = cJSON_AddObjectToObject(o, "memory_per_gpu_bytes");
    NUM(m, "weights", e->mem_weights);
    NUM(m, "grads", e->mem_grads);
    NUM(m, "optimizer", e->mem_optimizer);
    NUM(m, "activations", e->mem_activations);
    NUM(m, "overhead", e->mem_overhead);
    NUM(m, "total", e->mem_total);
    NUM(m, "capacity", e->mem_capacity);
    cJSON_AddBoolToObject(m, "fits", e->fits);
    cJSON *f = cJSON_AddObjectToObject(o, "flops");
    NUM(f, "params", e->params);
    NUM(f, "params_active", e->params_active);
    NUM(f, "params_per_gpu", e->params_per_gpu);
    NUM(f, "model_flops_per_token", e->model_flops_per_token);
    NUM(f, "flops_6nd_per_token", e->flops_6nd_per_token);
    NUM(f, "model_flops_per_step", e->model_flops_per_step);
    NUM(f, "hw_flops_per_step", e->hw_flops_per_step);
    NUM(f, "run_flops", e->run_flops);
    cJSON *c = cJSON_AddObjectToObject(o, "comm_per_gpu_per_step");
    static const char *const dn[] = {"tp", "cp", "pp", "dp", "ep"};
    const double by[] = {e->comm_bytes_tp, e->comm_bytes_cp, e->comm_bytes_pp,
                         e->comm_bytes_dp, e->comm_bytes_ep};
    const double ti[] = {e->time_tp_s, e->time_cp_s, e->time_pp_s, e->time_dp_s,
                         e->time_ep_s};
    for (int i = 0; i < 5; i++) {
        cJSON *d = cJSON_AddObjectToObject(c, dn[i]);
        NUM(d, "bytes", by[i]);
        NUM(d, "exposed_s", ti[i]);
    }
    add_engine(o, e, s);
    cJSON *t = cJSON_AddObjectToObject(o, "time");
    NUM(t, "compute_s", e->time_compute_s);
    NUM(t, "bubble_fraction", e->bubble_fraction);
    NUM(t, "bubble_s", e->time_bubble_s);
    NUM(t, "optimizer_s", e->time_optimizer_s);
    NUM(t, "step_s", e->step_time_s);
    NUM(t, "tokens_per_s", e->tokens_per_s);
    NUM(t, "mfu", e->mfu);
    NUM(t, "tflops_per_gpu", e->tflops_per_gpu);
    NUM(t, "run_s", e->run_time_s);
    add_terms(t, terms);
    cJSON *k = cJSON_AddObjectToObject(o, "checkpoint");
    NUM(k, "bytes_total", e->ckpt_bytes_total);
    NUM(k, "stall_s", e->ckpt_stall_s);
    NUM(k, "write_s", e->ckpt_write_s);
    NUM(k, "restore_s", e->restore_s);
    NUM(k, "restart_s", e->restart_s);
    NUM(k, "mtbf_s", isfinite(e->mtbf_s) ? e->mtbf_s : -1);
    NUM(k, "young_daly_s", isfinite(e->young_daly_s) ? e->young_daly_s : -1);
    NUM(k, "interval_s", isfinite(e->ckpt_interval_s) ? e->ckpt_interval_s : -1);
    NUM(k, "interval_steps", e->ckpt_interval_steps);
    NUM(k, "goodput_analytic", e->goodput_analytic);
}

LLMT_API llmt_status llmt_plan_to_json(const llmt_plan *plan, char *buf,
                                       size_t buflen, size_t *needed)
{
    if (needed)
        *needed = 0;
    if (!plan)
        return LLMT_ERR_NULL_POINTER;
    llmt_plan *p = (llmt_plan *)plan;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return llmt__err_set(&p->err, LLMT_ERR_OUT_OF_MEMORY, "plan: out of memory");
    NUM(o, "format_version", 1);
    NUM(o, "world_size", plan->world);
    cJSON *d = cJSON_AddObjectToObject(o, "degrees");
    NUM(d, "tp", plan->tp);
    NUM(d, "cp", plan->cp);
    NUM(d, "pp", plan->pp);
    NUM(d, "dp", plan->dp);
    NUM(d, "ep", plan->ep);
    NUM(d, "zero", plan->spec->parallelism.zero);
    NUM(d, "virtual_stages", plan->spec->parallelism.virtual_stages);
    cJSON_AddStringToObject(o, "rank_order", "tp,cp,pp,dp (tp fastest); ep = dp mod ep");
    /* group members along a dimension: base + i*stride, i < degree */
    cJSON *gs = cJSON_AddObjectToObject(o, "group_strides");
    NUM(gs, "tp", 1);
    NUM(gs, "cp", plan->tp);
    NUM(gs, "pp", plan->tp * plan->cp);
    NUM(gs, "dp", plan->tp * plan->cp * plan->pp);
    NUM(gs, "ep", plan->tp * plan->cp * plan->pp);
    cJSON *b = cJSON_AddObjectToObject(o, "batch");
    NUM(b, "micro", plan->spec->batch.micro);
    NUM(b, "grad_accum", plan->spec->batch.grad_accum);
    NUM(b, "global", plan->spec->batch.global);
    cJSON *stages = cJSON_AddArrayToObject(o, "stages");
    for (int32_t st = 0; stages && st < plan->pp; st++) {
        for (int64_t ch = 0; ch < plan->spec->parallelism.virtual_stages; ch++) {
            int64_t f, c;
            llmt__plan_spec_span(plan->spec, st, ch, &f, &c);
            cJSON *x = cJSON_CreateObject();
            NUM(x, "stage", st);
            NUM(x, "chunk", ch);
            NUM(x, "first_layer", f);
            NUM(x, "layers", c);
            cJSON_AddItemToArray(stages, x);
        }
    }
    add_estimate(cJSON_AddObjectToObject(o, "estimate"), &plan->est, plan->terms, plan->spec);
    if (plan->is_auto) {
        cJSON *a = cJSON_AddObjectToObject(o, "auto");
        NUM(a, "evaluated", plan->auto_evaluated);
        NUM(a, "fitting", plan->auto_fitting);
        cJSON *arr = cJSON_AddArrayToObject(a, "ranking");
        for (int i = 0; arr && i < plan->ncand; i++) {
            const llmt_plan_cand *c = &plan->cand[i];
            cJSON *x = cJSON_CreateObject();
            NUM(x, "tp", c->tp);
            NUM(x, "cp", c->cp);
            NUM(x, "pp", c->pp);
            NUM(x, "dp", c->dp);
            NUM(x, "ep", c->ep);
            NUM(x, "zero", c->zero);
            NUM(x, "virtual_stages", c->v);
            NUM(x, "micro", c->micro);
            NUM(x, "grad_accum", c->accum);
            NUM(x, "recompute", c->recompute);
            cJSON_AddBoolToObject(x, "sequence_parallel", c->sp);
            NUM(x, "step_s", c->step_time_s);
            NUM(x, "mem_total", c->mem_total);
            NUM(x, "mfu", c->mfu);
            add_terms(x, c->terms);
            cJSON_AddItemToArray(arr, x);
        }
    }
    cJSON_AddStringToObject(o, "notes", plan->notes ? plan->notes : "");
    cJSON *sj = llmt__spec_to_cjson(plan->spec);
    if (sj)
        cJSON_AddItemToObject(o, "spec", sj);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text)
        return llmt__err_set(&p->err, LLMT_ERR_OUT_OF_MEMORY, "plan: out of memory");
    llmt_status st = put_text(p, "plan: to_json", text, buf, buflen, needed);
    cJSON_free(text);
    return st;
}

LLMT_API llmt_status llmt_plan_reshape(const llmt_plan *plan,
                                       int32_t new_world_size, llmt_plan **out)
{
    if (out)
        *out = NULL;
    if (!plan)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&plan->err, "plan: reshape", out);
    llmt_plan *p = (llmt_plan *)plan;
    const llmt_spec *s = plan->spec;
    int64_t mp = (int64_t)plan->tp * plan->pp * plan->cp;
    int64_t G = s->batch.global;
    if (new_world_size <= 0 || new_world_size % mp)
        return llmt__err_set(&p->err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: reshape to %d ranks: not a multiple of the "
                             "model-parallel size tp*pp*cp = %lld (keep whole "
                             "model replicas; nearest: %lld or %lld)",
                             (int)new_world_size, (long long)mp,
                             (long long)(new_world_size / mp * mp),
                             (long long)((new_world_size / mp + 1) * mp));
    int64_t dp = new_world_size / mp;
    if (dp % plan->ep)
        return llmt__err_set(&p->err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: reshape to dp %lld: expert parallel %d does "
                             "not divide it", (long long)dp, (int)plan->ep);
    if (G % dp)
        return llmt__err_set(&p->err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: reshape to dp %lld: global batch %lld is not "
                             "divisible by it, so no micro*grad_accum keeps it "
                             "(change the batch with an LR review instead)",
                             (long long)dp, (long long)G);
    int64_t per = G / dp; /* sequences per replica per step */
    /* Keep micro when it divides; else the largest micro below it that does
     * (memory per GPU does not grow). */
    int64_t micro = s->batch.micro;
    while (micro > 1 && per % micro)
        micro--;
    int64_t accum = per / micro;
    int64_t v = s->parallelism.virtual_stages;
    if (v > 1 && accum % plan->pp) {
        /* The interleaved schedule needs grad_accum % pp == 0. */
        int64_t m2 = micro;
        while (m2 > 1 && (per % m2 || (per / m2) % plan->pp))
            m2--;
        if (per % m2 || (per / m2) % plan->pp)
            return llmt__err_set(&p->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "plan: reshape to dp %lld: %lld sequences per "
                                 "replica cannot be split into a multiple of pp "
                                 "%d micro-batches (interleaved schedule)",
                                 (long long)dp, (long long)per, (int)plan->pp);
        micro = m2;
        accum = per / m2;
    }
    llmt_spec *c = llmt__spec_clone(s);
    if (!c)
        return llmt__err_set(&p->err, LLMT_ERR_OUT_OF_MEMORY, "plan: out of memory");
    c->parallelism.dp = dp;
    c->batch.micro = micro;
    c->batch.grad_accum = accum;
    llmt_status st = llmt__plan_build(plan->ctx, c, new_world_size, out);
    if (st != LLMT_OK)
        return llmt__err_set(&p->err, st, "plan: out of memory");
    llmt__plan_note(*out, "reshaped from %d to %d ranks: dp %d -> %lld, micro %lld, "
                    "grad_accum %lld -> %lld, global batch %lld kept",
                    (int)plan->world, (int)new_world_size, (int)plan->dp,
                    (long long)dp, (long long)micro,
                    (long long)s->batch.grad_accum, (long long)accum, (long long)G);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_young_daly_interval(double C, double M, int32_t daly,
                                              double *out_s)
{
    if (!out_s)
        return LLMT_ERR_NULL_POINTER;
    if (!(C > 0) || !(M > 0) || !isfinite(C) || !isfinite(M))
        return LLMT_ERR_INVALID_ARGUMENT;
    if (!daly) {
        *out_s = sqrt(2 * C * M);
        return LLMT_OK;
    }
    if (C >= 2 * M) {
        *out_s = M;
        return LLMT_OK;
    }
    double r = sqrt(C / (2 * M));
    *out_s = sqrt(2 * C * M) * (1 + r / 3 + r * r / 9) - C;
    return LLMT_OK;
}
