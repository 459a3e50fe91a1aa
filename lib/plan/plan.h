/* Internal: the plan handle and the cost model shared by plan.c, auto.c,
 * goodput.c and the trainer (which may read the degrees and the chosen
 * checkpoint interval directly). */
#ifndef LLMT_PLAN_PLAN_H
#define LLMT_PLAN_PLAN_H

#include "core/internal.h"
#include "spec/spec.h"

/* The step time split into named terms that add up to it (seconds per
 * step; doc/planner.md, "Step time"). One table maps each to its JSON key
 * and its label (lib/plan/cost.c, llmt__plan_terms). */
typedef enum llmt_plan_term {
    LLMT_TERM_COMPUTE,   /* forward + backward kernels, heaviest stage */
    LLMT_TERM_RECOMPUTE, /* the recomputed forward (selective or full) */
    LLMT_TERM_FIXED,     /* fixed time per layer and micro-batch */
    LLMT_TERM_TP,        /* exposed TP all-reduces (no SP) */
    LLMT_TERM_SP,        /* exposed SP all-gathers / reduce-scatters */
    LLMT_TERM_CP,        /* exposed context-parallel ring */
    LLMT_TERM_EP,        /* expert all-to-all */
    LLMT_TERM_PP_P2P,    /* pipeline sends and receives */
    LLMT_TERM_BUBBLE,    /* pipeline fill and drain */
    LLMT_TERM_DP,        /* exposed gradient reduction (ZeRO 0-2) */
    LLMT_TERM_ZERO3,     /* exposed ZeRO-3 gathers and reduce-scatters */
    LLMT_TERM_OPTIMIZER, /* the optimizer step */
    LLMT_TERM_JITTER,    /* waiting for the slowest GPU (stragglers) */
    LLMT_PLAN_NTERMS
} llmt_plan_term;
typedef struct llmt_plan_term_name {
    llmt_plan_term term;
    const char *key, *label;
} llmt_plan_term_name;
extern const llmt_plan_term_name llmt__plan_terms[LLMT_PLAN_NTERMS];

/* One row of the auto-planner's ranking. */
typedef struct llmt_plan_cand {
    int32_t tp, cp, pp, dp, ep, zero, v, micro, accum, recompute, sp;
    double step_time_s, mem_total, mfu;
    double time_compute_s, time_bubble_s, time_tp_s, time_cp_s, time_pp_s,
           time_dp_s, time_ep_s;
    double terms[LLMT_PLAN_NTERMS];
} llmt_plan_cand;

struct llmt_plan {
    llmt_context *ctx;
    llmt_err err;
    llmt_spec *spec;        /* own copy; degrees and batch as planned */
    int32_t world, tp, cp, pp, dp, ep;
    llmt_plan_estimate est;
    double terms[LLMT_PLAN_NTERMS]; /* est.step_time_s split by term */
    char *notes;            /* explain text (heap, NUL-terminated) */
    size_t notes_cap;
    int is_auto;
    int ncand;
    llmt_plan_cand cand[16];
    int64_t auto_evaluated, auto_fitting;
};

/* The cost model's constants (lib/plan/cost.c; doc/planner.md,
 * "Calibration"). Those marked fitted are the output of llmt__calib_fit. */
typedef struct llmt_plan_consts {
    double compute_overhead; /* x kernel time */
    double fixed_layer_s;    /* s per layer per micro-batch, fwd + bwd */
    double gemm_reread;      /* GEMM operand traffic / compulsory (>= 1) */
    double dp_overlap;       /* share of the backward hiding DP reduction */
    double zero3_overlap;    /* share of the compute hiding ZeRO-3 traffic */
    double attn_eff_ratio;   /* attention kernel vs GEMM efficiency */
    double jitter;           /* per-GPU relative spread of a micro-batch's time */
    double link_eff, tp_overlap;
} llmt_plan_consts;

/* The fitted values (the output of llmt__calib_fit on the checked runs;
 * test plan-calib fails when they are no longer its optimum). */
#define COMPUTE_OVERHEAD_FIT 1.0635
#define FIXED_LAYER_S_FIT 0.0
#define ZERO3_OVERLAP_FIT 0.685
#define JITTER_FIT 0.058

/* What the software of a run does, where frameworks differ in ways the
 * spec does not say (doc/planner.md, "Software"): the defaults are this
 * library's engine and Megatron-Core's current settings; a calibration
 * file states its paper's in "software". */
typedef struct llmt_plan_sw {
    int flash_attention;  /* fused causal attention; 0: QK^T, softmax,
                             dropout, AV as separate kernels (scores in HBM) */
    int grad_reduce_fp32; /* gradients reduced in fp32, not the param dtype */
    int tp_comm_overlap;  /* TP/SP collectives overlapped with GEMMs */
    int dp_overlap;       /* gradient reduction overlapped with backward */
    int allow_cp;         /* the framework has context parallelism */
} llmt_plan_sw;
extern const llmt_plan_sw llmt__plan_sw_default;

extern const llmt_plan_consts llmt__plan_consts_default;

/* Fill `e` for the spec's degrees on `world` ranks. The spec must be valid
 * for those degrees (tp*cp*pp*dp == world). */
void llmt__plan_estimate(const llmt_spec *s, int32_t world,
                         llmt_plan_estimate *e);

/* The same with explicit constants (calibration). */
void llmt__plan_estimate_k(const llmt_spec *s, int32_t world,
                           const llmt_plan_consts *k, llmt_plan_estimate *e);

/* The same with explicit constants and software (NULL: the defaults);
 * terms (may be NULL) receives the step split into LLMT_PLAN_NTERMS terms
 * that add up to e->step_time_s. */
void llmt__plan_estimate_x(const llmt_spec *s, int32_t world, const llmt_plan_consts *k,
                           const llmt_plan_sw *sw, llmt_plan_estimate *e, double *terms);

/* ---- calibration against published runs (lib/plan/calib.c) */
typedef struct llmt_calib_run {
    char file[128];          /* base name, no .json */
    char source[256], table[160], row[256];
    llmt_spec *spec;
    int32_t gpus;
    int check;               /* used for the fit and the checks */
    double pub_step_s;       /* published step time (given or derived) */
    double pub_mfu;          /* published throughput as MFU of our model FLOPs */
    double paper_mfu, paper_hfu; /* as printed, -1 when not given */
    int mem_fits, mem_fits_without; /* published memory facts, -1 unknown */
    llmt_plan_sw sw;                /* the run's software ("software" in the file) */
} llmt_calib_run;

/* Load one calibration file: {source, table, row, comment, published:
 * {gpus, step_s | tflops_per_gpu + flops | mfu, ...}, check, spec}. A
 * missing field, a hardware key the spec does not state, or a layout that
 * is not the published GPU count is an error naming the key. */
llmt_status llmt__calib_load(llmt_context *ctx, const char *path,
                             llmt_calib_run *out);
/* Every *.json of a directory, sorted by name. */
llmt_status llmt__calib_load_dir(llmt_context *ctx, const char *dir,
                                 llmt_calib_run **runs, int *n);
void llmt__calib_free(llmt_calib_run *runs, int n);
/* Predicted MFU (our model FLOPs) of a run with constants k. */
double llmt__calib_predict(const llmt_calib_run *r, const llmt_plan_consts *k,
                           llmt_plan_estimate *e);
/* Least squares over the MFU of the checked runs, run `skip` left out
 * (-1: none): fills k (starting from the defaults); returns the RMS error. */
double llmt__calib_fit(const llmt_calib_run *runs, int n, int skip,
                       llmt_plan_consts *k);

/* Rank of a spec's layout among the auto-planner's layouts (distinct
 * tp, cp, pp, dp, ep, each at its fastest micro and v, with the spec's
 * ZeRO stage, recomputation and sequence parallelism; cp > 1 only when
 * sw->allow_cp): 1 + the number of other layouts that fit and are
 * predicted faster. sw NULL: the defaults. */
typedef struct llmt_plan_rank {
    int rank, layouts;
    int published_fits;
    llmt_plan_cand published, best;
} llmt_plan_rank;
llmt_status llmt__plan_rank_layout(llmt_context *ctx, const llmt_spec *s, int32_t world,
                                   const llmt_plan_consts *k, const llmt_plan_sw *sw,
                                   llmt_plan_rank *out);

/* A ranking row from an estimate and its terms (NULL: zeros). */
void llmt__plan_to_cand(const llmt_plan_estimate *e, const double *terms, llmt_plan_cand *c);

/* The spec's layout, one rule with the engine's (lib/train/pp.c,
 * llmt__pp_layout): first[0..pp*v] (virtual stage j = chunk * pp + stage
 * holds layers [first[j], first[j+1])) from parallelism.stage_layers when
 * it lists the pp x virtual_stages virtual stages, else the balance of the
 * layers' work with the embedding and the head (balance.h), dense or MoE;
 * -1 without memory. */
int llmt__plan_split(const llmt_spec *s, int64_t *first);
/* A search's automatic splits by virtual stage count (one model's: the
 * balance depends on the model alone), so that the layouts it weighs do
 * not each redo the balance; zero-initialise, free with
 * llmt__plan_splits_free. llmt__plan_set_stages: w's stage_layers for its
 * (pp, virtual_stages), orig's list where it gives that many (or pp is 1),
 * else the split from c. */
typedef struct llmt__plan_splits {
    int64_t *first[LLMT_SPEC_MAX_STAGES + 1];
} llmt__plan_splits;
void llmt__plan_set_stages(llmt_spec *w, const llmt_spec *orig, llmt__plan_splits *c);
/* s's stage_layers filled with its automatic split where not given (for
 * a spec the planner estimates many times; its layout unchanged). */
void llmt__plan_resolve_stages(llmt_spec *s);
void llmt__plan_splits_free(llmt__plan_splits *c);
/* (stage, chunk)'s layers of that layout (0, 0 outside it); and the
 * layers stage `stage` holds over its chunks. */
void llmt__plan_spec_span(const llmt_spec *s, int64_t stage, int64_t chunk, int64_t *first,
                          int64_t *count);
int64_t llmt__plan_stage_total(const llmt_spec *s, int64_t stage);

/* The pipeline schedule a spec runs (parallelism.virtual_stages > 1:
 * interleaved, else 1F1B) and the micro-batch chunks in flight on stage
 * `stage` under it (GPipe m, 1F1B min(m, p - stage), interleaved
 * Megatron-LM's 2 (p - s - 1) + (v - 1) p + 1, all m v when m == p): the
 * activation sets lib/plan/pp_sched.c's lists hold. */
enum { LLMT__PLAN_PP_1F1B = 0, LLMT__PLAN_PP_GPIPE = 1, LLMT__PLAN_PP_INTERLEAVED = 2 };
int llmt__plan_pp_schedule(const llmt_spec *s);
/* An expert's capacity for a call of n tokens of top-k (K) over E experts,
 * as the trainer computes it (lib/train/moe.c, llmt__moe_capacity): the
 * job's float factor in the trainer's order of operations, at least 1, at
 * most n; dropless: n. One function for the cost and the engine models. */
double llmt__plan_moe_capacity(const llmt_spec *s, double n, double K, double E);

double llmt__plan_pp_inflight(int sched, int64_t p, int64_t v, int64_t m, int64_t stage);

/* Bytes of activations (and backward scratch) this library's engine
 * allocates on pipeline stage `stage` for the spec's layout (pp > 1,
 * with or without tp and sequence parallelism, dense or MoE): the
 * schedule's sets of the stage's longest chunk, the scratch and the
 * boundary buffer (lib/plan/engine.c). */
double llmt__plan_engine_stage_act(const llmt_spec *s, int64_t stage);
/* The tensor parallel collectives one rank of pipeline stage `stage`
 * runs in a step (pp > 1, tp > 1, with or without sequence parallelism,
 * dense or MoE; lib/plan/engine.c): out[0] calls, out[1] payload bytes,
 * out[2] bus bytes, as llmt_comm_get_stats counts them. */
void llmt__plan_engine_stage_tp(const llmt_spec *s, int64_t stage, double out[3]);

/* Over processes (MPI, Gloo) a stage also pools copies of the input
 * gradients it leaves in flight (lib/train/pp_send.c; lib/plan/
 * pp_pool.c): with asks (MPI: a send's end can be asked without waiting)
 * the most the schedule lets be untaken at once on stage `stage`, else
 * (Gloo) every input gradient it sends in a step; 0 on a stage that sends
 * none. And their bytes, which a run over processes holds beside
 * llmt__plan_engine_stage_act's (in-process transports copy each send:
 * no pool). */
int llmt__plan_pp_grad_copies(int sched, int64_t p, int64_t v, int64_t m, int64_t stage,
                              int asks);
double llmt__plan_engine_stage_pool(const llmt_spec *s, int64_t stage, int asks);

/* Append to the plan's notes (printf-style). */
void llmt__plan_note(llmt_plan *p, const char *fmt, ...) LLMT_PRINTF(2, 3);

/* Build a plan handle around a spec copy whose degrees are final. */
llmt_status llmt__plan_build(llmt_context *ctx, llmt_spec *owned, int32_t world,
                             llmt_plan **out);

/* The engine_* fields of `e`: what this library's engine moves and holds
 * on one rank for the spec's layout (lib/plan/engine.c); with pp > 1 those
 * of a rank of llmt__plan_engine_top_stage, the stage holding the most
 * bytes (parameters, gradients, optimizer, activations; the first such).
 * llmt__plan_engine_stage: the same for a rank of pipeline stage `stage`
 * (pp > 1, ep 1). */
void llmt__plan_engine(const llmt_spec *s, llmt_plan_estimate *e);
void llmt__plan_engine_stage(const llmt_spec *s, int64_t stage, llmt_plan_estimate *e);
int64_t llmt__plan_engine_top_stage(const llmt_spec *s);

/* The ranks one node holds, for pricing a group on NVLink or InfiniBand
 * and the "spans nodes" warning: hardware.gpus_per_node, except that the
 * host CPU profile (hardware.gpu "cpu", gpus_per_node not given) is one
 * node holding all `world` ranks (or the spec's layout when world is 0). */
int64_t llmt__plan_node_ranks(const llmt_spec *s, int64_t world);

/* Per-GPU seconds of all-reduce of `bytes` over n ranks at bw bytes/s. */
double llmt__plan_allreduce_s(double bytes, double n, double bw, double lat);

/* The layouts llmt_job does not run yet (lib/plan/job_limits.c): LLMT_OK,
 * or the status the job refuses the spec with on `world` ranks and the
 * reason, naming the key, in why[n]. */
llmt_status llmt__plan_job_limits(const llmt_spec *s, int64_t world, char *why, size_t n);

#endif
