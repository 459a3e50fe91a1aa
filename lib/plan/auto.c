/* The auto-planner: enumerate every factorisation world = tp*cp*pp*dp that
 * the model allows, with ep, ZeRO stage, recomputation, virtual stages and
 * micro-batch size, keep the global batch, drop what does not fit in
 * memory, rank by predicted step time, and say why the winner wins. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

LLMT_API llmt_status llmt_plan_auto_opts_init(llmt_plan_auto_opts *opts, size_t size)
{
    llmt_plan_auto_opts d = {0};
    d.mem_fraction = 0.95;
    d.top_n = 10;
    return llmt__opts_init(opts, size, sizeof(size_t) + sizeof(double), &d, sizeof d,
                           "llmt_plan_auto_opts");
}

void llmt__plan_to_cand(const llmt_plan_estimate *e, const double *terms, llmt_plan_cand *c)
{
    for (int i = 0; i < LLMT_PLAN_NTERMS; i++)
        c->terms[i] = terms ? terms[i] : 0;
    c->tp = e->tp;
    c->cp = e->cp;
    c->pp = e->pp;
    c->dp = e->dp;
    c->ep = e->ep;
    c->zero = e->zero;
    c->v = e->virtual_stages;
    c->micro = e->micro;
    c->accum = e->grad_accum;
    c->recompute = e->recompute;
    c->sp = e->sequence_parallel;
    c->step_time_s = e->step_time_s;
    c->mem_total = e->mem_total;
    c->mfu = e->mfu;
    c->time_compute_s = e->time_compute_s;
    c->time_bubble_s = e->time_bubble_s;
    c->time_tp_s = e->time_tp_s;
    c->time_cp_s = e->time_cp_s;
    c->time_pp_s = e->time_pp_s;
    c->time_dp_s = e->time_dp_s;
    c->time_ep_s = e->time_ep_s;
}

static const char *rc_name(int rc)
{
    return rc == LLMT_SPEC_RECOMPUTE_FULL ? "full"
         : rc == LLMT_SPEC_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

static void cand_str(const llmt_plan_cand *c, char *buf, size_t n)
{
    char eps[16] = "";
    if (c->ep > 1)
        snprintf(eps, sizeof eps, " ep%d", c->ep);
    snprintf(buf, n, "tp%d cp%d pp%d dp%d%s zero%d v%d micro%d accum%d rc=%s",
             c->tp, c->cp, c->pp, c->dp, eps, c->zero, c->v, c->micro, c->accum,
             rc_name(c->recompute));
}

/* The term in which `o` loses most against `best`. */
static void why(const llmt_plan_cand *best, const llmt_plan_cand *o, char *buf,
                size_t n)
{
    int k = 0;
    for (int i = 1; i < LLMT_PLAN_NTERMS; i++)
        if (o->terms[i] - best->terms[i] > o->terms[k] - best->terms[k])
            k = i;
    /* the same time: it uses more memory (ranking ties keep the search
     * order), said as the difference, in a unit that shows it */
    double dm = o->mem_total - best->mem_total;
    const char *u = dm >= 1e9 ? "GB" : dm >= 1e6 ? "MB" : dm >= 1e3 ? "kB" : "bytes";
    double d = dm >= 1e9 ? dm / 1e9 : dm >= 1e6 ? dm / 1e6 : dm >= 1e3 ? dm / 1e3 : dm;
    if (o->step_time_s - best->step_time_s <= 1e-4 * best->step_time_s)
        snprintf(buf, n, "memory: the same predicted time with %.*f %s more per GPU (%.1f GB)",
                 dm >= 1e3 ? 1 : 0, d > 0 ? d : 0.0, u, o->mem_total / 1e9);
    else
        snprintf(buf, n, "%s +%.3f s", llmt__plan_terms[k].label, o->terms[k] - best->terms[k]);
}

static int divides(int64_t a, int64_t b) { return a > 0 && b % a == 0; }

/* Ranking: faster first; within 0.01% of the time, less memory first. */
static int better(const llmt_plan_cand *a, const llmt_plan_cand *b)
{
    double tol = 1e-4 * b->step_time_s;
    if (a->step_time_s < b->step_time_s - tol)
        return 1;
    if (a->step_time_s > b->step_time_s + tol)
        return 0;
    return a->mem_total < b->mem_total;
}

/* The spec with candidate c's layout and batch. */
static void apply_cand(llmt_spec *s, const llmt_plan_cand *c)
{
    s->parallelism.tp = c->tp;
    s->parallelism.cp = c->cp;
    s->parallelism.pp = c->pp;
    s->parallelism.dp = c->dp;
    s->parallelism.ep = c->ep;
    s->parallelism.zero = c->zero;
    s->parallelism.virtual_stages = c->v;
    /* the schedule follows the chosen virtual stages (as the spec's rules
     * derive it) unless the spec set it */
    if (!llmt__spec_given(s, "parallelism.pp_schedule"))
        s->parallelism.pp_schedule = c->v > 1 ? LLMT_SPEC_PP_INTERLEAVED : LLMT_SPEC_PP_1F1B;
    s->parallelism.recompute = c->recompute;
    s->parallelism.sequence_parallel = c->sp;
    s->batch.micro = c->micro;
    s->batch.grad_accum = c->accum;
    s->batch.global = (int64_t)c->micro * c->accum * c->dp;
}

/* Whether llmt_job runs the weighed layout w of the spec: the job splits
 * the stages by the spec's own parallelism.stage_layers, where
 * llmt__plan_set_stages put the planner's split of another stage count
 * in w (the estimate's), so the limits see the spec's count. */
static int job_runs(llmt_spec *w, const llmt_spec *spec, int64_t world)
{
    int n = w->parallelism.nstage_layers;
    if (llmt__spec_given(spec, "parallelism.stage_layers"))
        w->parallelism.nstage_layers = spec->parallelism.nstage_layers;
    llmt_status st = llmt__plan_job_limits(w, world, NULL, 0);
    w->parallelism.nstage_layers = n;
    return st == LLMT_OK;
}

/* When llmt_job does not run the best layout yet (the plan's note says
 * why), the fastest fitting layout it does run (run: NULL when none). */
static void runnable_note(llmt_plan *p, const llmt_spec *spec, int32_t world,
                          const llmt_plan_cand *best, const llmt_plan_cand *run)
{
    llmt_spec *w = malloc(sizeof *w);
    if (!w)
        return;
    *w = *spec; /* read only: its strings stay the spec's */
    apply_cand(w, best);
    llmt_status st = llmt__plan_job_limits(w, world, NULL, 0);
    free(w);
    if (st == LLMT_OK) /* the plan's own note says it when it does not */
        return;
    char cs[256];
    if (run) {
        cand_str(run, cs, sizeof cs);
        llmt__plan_note(p,
                        "note: the best layout llmt_job runs today: %s: step %.3f s "
                        "(+%.1f%%), MFU %.1f%%, %.1f GB/GPU",
                        cs, run->step_time_s, 100 * (run->step_time_s / best->step_time_s - 1),
                        100 * run->mfu, run->mem_total / 1e9);
    } else {
        llmt__plan_note(p,
                        "note: llmt_job runs none of the layouts of %d ranks that fit yet "
                        "(train.device %s)",
                        (int)world,
                        spec->train.device == LLMT_SPEC_DEVICE_CUDA       ? "cuda"
                        : spec->train.device == LLMT_SPEC_DEVICE_EMULATED ? "emulated"
                                                                          : "cpu");
    }
}

LLMT_API llmt_status llmt_plan_auto(llmt_context *ctx, const llmt_spec *spec,
                                    int32_t world_size,
                                    const llmt_plan_auto_opts *opts,
                                    llmt_plan **out)
{
    llmt_err *err = ctx ? &ctx->err : NULL;
    if (out)
        *out = NULL;
    LLMT__NONNULL(err, "plan: auto", spec);
    LLMT__NONNULL(err, "plan: auto", out);
    llmt_plan_auto_opts o;
    llmt_plan_auto_opts_init(&o, sizeof o);
    if (opts) {
        llmt_status st = llmt__opts_copy(err, "plan auto opts", &o, sizeof o, opts);
        if (st != LLMT_OK)
            return st;
    }
    if (world_size <= 0)
        return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: auto needs a world size > 0 (got %d)",
                             (int)world_size);
    /* Refused, not clamped: a value out of range was silently replaced
     * (mem_fraction by 0.95, top_n by 1 or 16), so the search ran on a
     * budget the caller did not ask for. top (below) holds 16. */
    if (!(o.mem_fraction > 0) || o.mem_fraction > 1)
        return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: auto opts mem_fraction %g is outside (0, 1] "
                             "(the usable share of HBM; llmt_plan_auto_opts_init "
                             "sets 0.95)",
                             o.mem_fraction);
    if (o.top_n < 1 || o.top_n > 16)
        return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: auto opts top_n %d is outside 1..16 "
                             "(llmt_plan_auto_opts_init sets 10)",
                             (int)o.top_n);
    if (o.max_tp < 0) /* was taken as 0 */
        return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                             "plan: auto opts max_tp %d is negative (0: the ranks of a node)",
                             (int)o.max_tp);
    const struct {
        const char *name;
        int32_t v;
    } flags[] = {{"keep_micro", o.keep_micro},
                 {"keep_zero", o.keep_zero},
                 {"keep_recompute", o.keep_recompute}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (flags[i].v != 0 && flags[i].v != 1) /* 1 or 0, not "any non-zero" */
            return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                                 "plan: auto opts %s is %d, must be 0 or 1", flags[i].name,
                                 (int)flags[i].v);
    /* TP stays inside a node (plan.c warns otherwise); on the cpu profile
     * the node is the host, holding every rank */
    int64_t max_tp = o.max_tp > 0 ? o.max_tp : llmt__plan_node_ranks(spec, world_size);

    /* A working copy whose degrees the loops overwrite (strings untouched),
     * and its automatic stage splits, one per virtual stage count. */
    llmt_spec w = *spec;
    llmt__plan_splits *splits = calloc(1, sizeof *splits);
    if (!splits)
        return llmt__err_set(err, LLMT_ERR_OUT_OF_MEMORY, "plan: out of memory");
    const int64_t W = world_size, L = spec->model.layers, S = spec->model.seq_len;
    /* virtual stages only where the spec leaves the schedule open or asks
     * for interleaving (a given gpipe or 1f1b keeps v 1) */
    const int interleave = !llmt__spec_given(spec, "parallelism.pp_schedule") ||
                           spec->parallelism.pp_schedule == LLMT_SPEC_PP_INTERLEAVED;
    const int64_t E = spec->model.moe.experts;
    int64_t G = spec->batch.global;
    if (!llmt__spec_given(spec, "batch.global") &&
        !llmt__spec_given(spec, "parallelism.dp")) {
        /* No batch given: one sequence per rank of data parallelism is not
         * knowable in advance; keep micro*accum per replica as given. */
        G = 0;
    }
    llmt_plan_cand top[16];
    int ntop = 0;
    int64_t evaluated = 0, fitting = 0;
    llmt_plan_cand closest = {0};
    double closest_mem = INFINITY;
    llmt_plan_cand best_run = {0}; /* the best llmt_job runs today */
    int have_run = 0;
    llmt_plan_estimate e;
    const int micros_all[] = {1, 2, 4, 8};
    for (int64_t tp = 1; tp <= max_tp && tp <= W; tp++) {
        if (!divides(tp, W) || spec->model.heads % tp || spec->model.kv_heads % tp ||
            spec->model.ffn % tp)
            continue;
        for (int64_t cp = 1; cp * tp <= W; cp++) {
            if (!divides(cp, W / tp) || (cp > 1 && S % (2 * cp)))
                continue;
            for (int64_t pp = 1; pp * cp * tp <= W && pp <= L; pp++) {
                if (!divides(pp, W / (tp * cp)))
                    continue;
                int64_t dp = W / (tp * cp * pp);
                int64_t gb = G ? G : spec->batch.micro * spec->batch.grad_accum * dp;
                if (gb % dp)
                    continue;
                int64_t per = gb / dp;
                for (int64_t ep = 1; ep <= (E > 0 ? E : 1); ep++) {
                    if (E > 0 ? (E % ep || dp % ep) : ep > 1)
                        continue;
                    for (int mi = 0; mi < 4; mi++) {
                        int64_t micro = o.keep_micro ? spec->batch.micro : micros_all[mi];
                        if (o.keep_micro && mi > 0)
                            break;
                        if (per % micro)
                            continue;
                        int64_t accum = per / micro;
                        for (int64_t v = 1; v <= 8; v++) {
                            if (v > 1 && (pp < 2 || pp * v > L || accum % pp || !interleave))
                                continue;
                            for (int z = 0; z <= 3; z++) {
                                if (o.keep_zero && z != spec->parallelism.zero)
                                    continue;
                                for (int rc = 0; rc < 3; rc++) {
                                    if (o.keep_recompute && rc != spec->parallelism.recompute)
                                        continue;
                                    w.parallelism.tp = tp;
                                    w.parallelism.cp = cp;
                                    w.parallelism.pp = pp;
                                    w.parallelism.dp = dp;
                                    w.parallelism.ep = ep;
                                    w.parallelism.virtual_stages = v;
                                    w.parallelism.zero = z;
                                    w.parallelism.recompute = rc;
                                    w.parallelism.sequence_parallel = tp > 1;
                                    w.batch.micro = micro;
                                    w.batch.grad_accum = accum;
                                    w.batch.global = gb;
                                    llmt__plan_set_stages(&w, spec, splits);
                                    double terms[LLMT_PLAN_NTERMS];
                                    llmt__plan_estimate_x(&w, (int32_t)W, NULL, NULL, &e,
                                                          terms);
                                    evaluated++;
                                    llmt_plan_cand c;
                                    llmt__plan_to_cand(&e, terms, &c);
                                    if (e.mem_total > o.mem_fraction * e.mem_capacity) {
                                        if (e.mem_total < closest_mem) {
                                            closest_mem = e.mem_total;
                                            closest = c;
                                        }
                                        continue;
                                    }
                                    fitting++;
                                    if (job_runs(&w, spec, W) &&
                                        (!have_run || better(&c, &best_run))) {
                                        best_run = c;
                                        have_run = 1;
                                    }
                                    /* insert into the sorted top list */
                                    int pos = ntop;
                                    while (pos > 0 && better(&c, &top[pos - 1]))
                                        pos--;
                                    if (pos >= o.top_n)
                                        continue;
                                    int last = ntop < o.top_n ? ntop : o.top_n - 1;
                                    for (int k = last; k > pos; k--)
                                        top[k] = top[k - 1];
                                    top[pos] = c;
                                    if (ntop < o.top_n)
                                        ntop++;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    llmt__plan_splits_free(splits);
    free(splits);
    if (ntop == 0) {
        if (!isfinite(closest_mem))
            return llmt__err_set(err, LLMT_ERR_NOT_FOUND,
                                 "plan: no factorisation of %d ranks is allowed by "
                                 "the model (heads %lld, layers %lld, batch %lld)",
                                 (int)world_size, (long long)spec->model.heads,
                                 (long long)L, (long long)G);
        char cs[256];
        cand_str(&closest, cs, sizeof cs);
        return llmt__err_set(err, LLMT_ERR_NOT_FOUND,
                             "plan: none of %lld layouts of %d ranks fits in "
                             "%.0f%% of %.0f GB; the smallest (%s) needs %.1f GB",
                             (long long)evaluated, (int)world_size,
                             100 * o.mem_fraction, spec->hardware.hbm_GB, cs,
                             closest_mem / 1e9);
    }
    llmt_spec *s = llmt__spec_clone_into(spec, ctx);
    if (!s)
        return llmt__err_set(err, LLMT_ERR_OUT_OF_MEMORY, "plan: out of memory");
    const llmt_plan_cand *b = &top[0];
    apply_cand(s, b);
    llmt_plan *p = NULL;
    llmt_status st = llmt__plan_build(ctx, s, world_size, &p);
    if (st != LLMT_OK)
        return st;
    p->is_auto = 1;
    p->ncand = ntop;
    memcpy(p->cand, top, sizeof top[0] * (size_t)ntop);
    p->auto_evaluated = evaluated;
    p->auto_fitting = fitting;
    char cs[256], wy[160];
    llmt__plan_note(p, "auto: %lld layouts of %d ranks evaluated, %lld fit in "
                    "%.0f%% of %.0f GB; ranked by predicted step time (ties: less memory)",
                    (long long)evaluated, (int)world_size, (long long)fitting,
                    100 * o.mem_fraction, spec->hardware.hbm_GB);
    cand_str(b, cs, sizeof cs);
    llmt__plan_note(p, "best: %s: step %.3f s, MFU %.1f%%, %.1f GB/GPU", cs,
                    b->step_time_s, 100 * b->mfu, b->mem_total / 1e9);
    runnable_note(p, spec, world_size, b, have_run ? &best_run : NULL);
    for (int i = 1; i < ntop; i++) {
        cand_str(&top[i], cs, sizeof cs);
        why(b, &top[i], wy, sizeof wy);
        /* within the ranking's tolerance a candidate can be a hair
         * faster than the best: never print "+-0.0%" */
        double slower = 100 * (top[i].step_time_s / b->step_time_s - 1);
        llmt__plan_note(p,
                        "#%d: %s: step %.3f s (+%.1f%%), MFU %.1f%%, %.1f GB: "
                        "loses on %s",
                        i + 1, cs, top[i].step_time_s, slower > 0 ? slower : 0.0,
                        100 * top[i].mfu, top[i].mem_total / 1e9, wy);
    }
    *out = p;
    return LLMT_OK;
}
