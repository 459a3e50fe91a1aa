/* Internal: the plan handle and the cost model shared by plan.c, auto.c,
 * goodput.c and the trainer (which may read the degrees and the chosen
 * checkpoint interval directly). */
#ifndef LLMT_PLAN_PLAN_H
#define LLMT_PLAN_PLAN_H

#include "core/internal.h"
#include "spec/spec.h"

/* One row of the auto-planner's ranking. */
typedef struct llmt_plan_cand {
    int32_t tp, cp, pp, dp, ep, zero, v, micro, accum, recompute, sp;
    double step_time_s, mem_total, mfu;
    double time_compute_s, time_bubble_s, time_tp_s, time_cp_s, time_pp_s,
           time_dp_s, time_ep_s;
} llmt_plan_cand;

struct llmt_plan {
    llmt_context *ctx;
    llmt_err err;
    llmt_spec *spec;        /* own copy; degrees and batch as planned */
    int32_t world, tp, cp, pp, dp, ep;
    llmt_plan_estimate est;
    char *notes;            /* explain text (heap, NUL-terminated) */
    size_t notes_cap;
    int is_auto;
    int ncand;
    llmt_plan_cand cand[16];
    int64_t auto_evaluated, auto_fitting;
};

/* Fill `e` for the spec's degrees on `world` ranks. The spec must be valid
 * for those degrees (tp*cp*pp*dp == world). */
void llmt__plan_estimate(const llmt_spec *s, int32_t world,
                         llmt_plan_estimate *e);

/* Layers of pipeline stage `stage` (0..pp-1) in total, and the first layer
 * of (stage, chunk) for virtual_stages chunks. */
void llmt__plan_stage_span(int64_t layers, int64_t pp, int64_t v, int64_t stage,
                           int64_t chunk, int64_t *first, int64_t *count);

/* Append to the plan's notes (printf-style). */
void llmt__plan_note(llmt_plan *p, const char *fmt, ...) LLMT_PRINTF(2, 3);

/* Build a plan handle around a spec copy whose degrees are final. */
llmt_status llmt__plan_build(llmt_context *ctx, llmt_spec *owned, int32_t world,
                             llmt_plan **out);

/* Per-GPU seconds of all-reduce of `bytes` over n ranks at bw bytes/s. */
double llmt__plan_allreduce_s(double bytes, double n, double bw, double lat);

#endif
