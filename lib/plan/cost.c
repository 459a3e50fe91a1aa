/* The cost model: memory per GPU, FLOPs, communication and time of one
 * training step for a spec placed on `world` ranks. Every formula and its
 * source is in doc/planner.md; the constants below are the calibration
 * knobs that section discusses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/balance.h"
#include "plan/plan.h"

/* The constants of the model (doc/planner.md, "Calibration"). Those
 * marked "fitted" are the output of llmt__calib_fit (lib/plan/calib.c):
 * least squares over the MFU of the published runs in
 * examples/specs/calibration/; test plan-calib refits them and fails when
 * these values are no longer the optimum. The others are set from first
 * principles or vendor figures and are not fitted. */
const llmt_plan_consts llmt__plan_consts_default = {
    .compute_overhead = COMPUTE_OVERHEAD_FIT, /* fitted: launch gaps, unfused
                                                  small ops */
    .fixed_layer_s = FIXED_LAYER_S_FIT,       /* fitted: fixed s per layer and
                                                  micro-batch (fwd + bwd) */
    /* Flash attention's kernel efficiency relative to hardware.efficiency
     * [0.75]: FlashAttention-2 reaches 335 TFLOP/s forward + backward on an
     * H100 (Dao 2023, sec. 4.1), 0.339 of its 989 dense bf16 peak, counting
     * a causal sequence's FLOPs as half: 0.339 / 0.75. Not fitted: only the
     * Llama 3 runs use it, and one of them (128K) is mostly attention. */
    .attn_eff_ratio = 0.452,
    .gemm_reread = 1.0,                 /* GEMM operand traffic / the compulsory traffic */
    .jitter = JITTER_FIT,               /* fitted: per-GPU spread of a micro-batch */
    .link_eff = 0.8,                    /* NCCL bus bandwidth / link bandwidth */
    .tp_overlap = 0.5,                  /* share of TP traffic hidden behind GEMMs, when
                               the software overlaps them */
    .dp_overlap = 1.0,                  /* share of the last backward that hides the
                               gradient reduction, when the software overlaps */
    .zero3_overlap = ZERO3_OVERLAP_FIT, /* fitted: share of the compute that
                                           hides ZeRO-3's gathers */
};

/* This library's engine and Megatron-Core today: flash attention, bf16
 * gradient reduction, TP and DP communication overlapped. */
const llmt_plan_sw llmt__plan_sw_default = {
    .flash_attention = 1,
    .grad_reduce_fp32 = 0,
    .tp_comm_overlap = 1,
    .dp_overlap = 1,
    .allow_cp = 1,
};

const llmt_plan_term_name llmt__plan_terms[LLMT_PLAN_NTERMS] = {
    {LLMT_TERM_COMPUTE, "compute", "compute"},
    {LLMT_TERM_RECOMPUTE, "recompute", "recompute"},
    {LLMT_TERM_FIXED, "fixed", "fixed costs"},
    {LLMT_TERM_TP, "tp", "TP comm exposed"},
    {LLMT_TERM_SP, "sp", "SP comm exposed"},
    {LLMT_TERM_CP, "cp", "CP comm exposed"},
    {LLMT_TERM_EP, "ep", "EP all-to-all"},
    {LLMT_TERM_PP_P2P, "pp_p2p", "PP p2p"},
    {LLMT_TERM_BUBBLE, "bubble", "PP bubble"},
    {LLMT_TERM_DP, "dp", "DP exposed"},
    {LLMT_TERM_ZERO3, "zero3", "ZeRO-3 exposed"},
    {LLMT_TERM_OPTIMIZER, "optimizer", "optimizer"},
    {LLMT_TERM_JITTER, "jitter", "stragglers"},
};

#define LAT_NVLINK 3e-6      /* s per ring step */
#define LAT_IB 8e-6
#define MEM_OVERHEAD_GPU 2.5e9 /* CUDA context, NCCL buffers, workspaces */
#define MEM_OVERHEAD_CPU 0.2e9
#define CKPT_SYNC_S 2.0      /* fixed stall of a checkpoint save, s */
#define CKPT_SYNC_1_S 0.1    /* the same for a single process */

double llmt__plan_allreduce_s(double bytes, double n, double bw, double lat)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat;
}

static double gather_s(double bytes, double n, double bw, double lat)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    return (n - 1) / n * bytes / bw + (n - 1) * lat;
}

/* The spec as the stage balance reads it (balance.h), with the padding
 * of the vocabulary the job gives the engine (lib/job/job.c: a multiple
 * of 64), so both weigh the head alike. */
static void balance_model(const llmt_spec *s, llmt__balance_model *m)
{
    m->width = (double)s->model.hidden;
    m->heads = (double)s->model.heads;
    m->kv_heads = (double)(s->model.kv_heads > 0 ? s->model.kv_heads : s->model.heads);
    m->ffn = (double)s->model.ffn;
    m->vocab = (double)((s->model.vocab + 63) / 64 * 64);
    m->seq = (double)s->model.seq_len;
    m->llama = s->model.arch == LLMT_SPEC_ARCH_LLAMA;
    m->experts = (double)s->model.moe.experts;
    m->top_k = (double)(s->model.moe.top_k > 0     ? s->model.moe.top_k
                        : s->model.moe.experts > 1 ? 2
                                                   : 1);
    m->expert_ffn =
        (double)(s->model.moe.expert_ffn > 0 ? s->model.moe.expert_ffn : s->model.ffn);
    m->shared = (double)s->model.moe.shared_experts;
    m->every = s->model.moe.every > 0 ? s->model.moe.every : 1;
}

/* The automatic split of s's layers over nv (virtual) stages: the
 * engine's balance of each layer's work with the embedding and the head
 * (lib/train/pp.c, llmt__pp_layout), the same code on the same costs,
 * dense or MoE. The balance is a dynamic programme over stages x layers,
 * and a plan asks for spans stage by stage and chunk by chunk (its JSON,
 * the engine model's stage memory): the last split is kept, per thread,
 * keyed by everything it depends on (the 405B plan took 10 ms instead of
 * 0.2 recomputing it, bench_plan). first[0..nv] valid until this thread's
 * next call; NULL when the balance fails or nv is over the spec's stage
 * limit. */
static const int64_t *auto_split(const llmt_spec *s, int64_t nv)
{
    static _Thread_local struct {
        int valid;
        llmt__balance_model bm;
        int64_t L, nv;
        int64_t first[LLMT_SPEC_MAX_STAGES + 1];
    } memo;
    llmt__balance_model bm;
    memset(&bm, 0, sizeof bm); /* compared with memcmp, padding included */
    balance_model(s, &bm);
    int64_t L = s->model.layers;
    if (nv > LLMT_SPEC_MAX_STAGES)
        return NULL;
    if (memo.valid && memo.L == L && memo.nv == nv && !memcmp(&memo.bm, &bm, sizeof bm))
        return memo.first;
    memo.valid = 0;
    if (llmt__balance_split(&bm, L, nv, memo.first))
        return NULL;
    memo.bm = bm;
    memo.L = L;
    memo.nv = nv;
    memo.valid = 1;
    return memo.first;
}

int llmt__plan_split(const llmt_spec *s, int64_t *first)
{
    int64_t pp = s->parallelism.pp, v = s->parallelism.virtual_stages,
            nv = pp * (v > 1 ? v : 1);
    int n = s->parallelism.nstage_layers;
    if (n >= 1 && n == nv) { /* given, per (virtual) stage */
        first[0] = 0;
        for (int64_t j = 0; j < nv; j++)
            first[j + 1] = first[j] + s->parallelism.stage_layers[j];
        return 0;
    }
    const int64_t *f = auto_split(s, nv);
    if (f) {
        memcpy(first, f, ((size_t)nv + 1) * sizeof *first);
        return 0;
    }
    /* more stages than the memo holds */
    llmt__balance_model bm;
    balance_model(s, &bm);
    return llmt__balance_split(&bm, s->model.layers, nv, first);
}

void llmt__plan_set_stages(llmt_spec *w, const llmt_spec *orig, llmt__plan_splits *c)
{
    int64_t pp = w->parallelism.pp, v = w->parallelism.virtual_stages,
            nv = pp * (v > 1 ? v : 1);
    int n0 = orig->parallelism.nstage_layers;
    if (pp <= 1 || n0 == nv || nv > LLMT_SPEC_MAX_STAGES) { /* the spec's own */
        w->parallelism.nstage_layers = n0;
        if (n0 > 0)
            memcpy(w->parallelism.stage_layers, orig->parallelism.stage_layers,
                   (size_t)n0 * sizeof orig->parallelism.stage_layers[0]);
        return;
    }
    w->parallelism.nstage_layers = 0;
    if (!c->first[nv]) {
        int64_t *f = malloc(((size_t)nv + 1) * sizeof *f);
        if (!f || llmt__plan_split(w, f)) {
            free(f);
            return; /* left to llmt__plan_estimate_x */
        }
        c->first[nv] = f;
    }
    for (int64_t j = 0; j < nv; j++)
        w->parallelism.stage_layers[j] = c->first[nv][j + 1] - c->first[nv][j];
    w->parallelism.nstage_layers = (int)nv;
}

void llmt__plan_resolve_stages(llmt_spec *s)
{
    int64_t pp = s->parallelism.pp, v = s->parallelism.virtual_stages,
            nv = pp * (v > 1 ? v : 1);
    int64_t fs[LLMT_SPEC_MAX_STAGES + 1];
    if (pp <= 1 || s->parallelism.nstage_layers == nv || nv > LLMT_SPEC_MAX_STAGES ||
        llmt__plan_split(s, fs))
        return;
    for (int64_t j = 0; j < nv; j++)
        s->parallelism.stage_layers[j] = fs[j + 1] - fs[j];
    s->parallelism.nstage_layers = (int)nv;
}

void llmt__plan_splits_free(llmt__plan_splits *c)
{
    for (size_t i = 0; i < sizeof c->first / sizeof c->first[0]; i++) {
        free(c->first[i]);
        c->first[i] = NULL;
    }
}

void llmt__plan_spec_span(const llmt_spec *s, int64_t stage, int64_t chunk, int64_t *first,
                          int64_t *count)
{
    int64_t pp = s->parallelism.pp, v = s->parallelism.virtual_stages,
            nv = pp * (v > 1 ? v : 1), at = chunk * pp + stage;
    *first = *count = 0;
    if (at < 0 || at >= nv)
        return;
    if (s->parallelism.nstage_layers == nv) { /* given: the layers before it */
        for (int64_t j = 0; j < at; j++)
            *first += s->parallelism.stage_layers[j];
        *count = s->parallelism.stage_layers[at];
        return;
    }
    const int64_t *f = auto_split(s, nv);
    int64_t *own = NULL;
    if (!f && (own = malloc(((size_t)nv + 1) * sizeof *own)) && !llmt__plan_split(s, own))
        f = own;
    if (f) {
        *first = f[at];
        *count = f[at + 1] - f[at];
    }
    free(own);
}

int64_t llmt__plan_stage_total(const llmt_spec *s, int64_t stage)
{
    int64_t n = 0, f, c, v = s->parallelism.virtual_stages;
    for (int64_t ch = 0; ch < (v > 1 ? v : 1); ch++) {
        llmt__plan_spec_span(s, stage, ch, &f, &c);
        n += c;
    }
    return n;
}

int llmt__plan_pp_schedule(const llmt_spec *s)
{
    /* virtual stages are interleaving's (the auto-planner sets them on
     * copies of the spec); else parallelism.pp_schedule */
    if (s->parallelism.virtual_stages > 1)
        return LLMT__PLAN_PP_INTERLEAVED;
    switch (s->parallelism.pp_schedule) {
    case LLMT_SPEC_PP_GPIPE: return LLMT__PLAN_PP_GPIPE;
    case LLMT_SPEC_PP_INTERLEAVED: return LLMT__PLAN_PP_INTERLEAVED;
    default: return LLMT__PLAN_PP_1F1B;
    }
}

double llmt__plan_pp_inflight(int sched, int64_t p, int64_t v, int64_t m, int64_t stage)
{
    double n;
    if (p <= 1)
        return 1;
    if (sched == LLMT__PLAN_PP_GPIPE)
        return (double)m;
    if (sched != LLMT__PLAN_PP_INTERLEAVED)
        return (double)(m < p - stage ? m : p - stage);
    /* Megatron-LM's interleaved warm-up, 2 (p - s - 1) + (v - 1) p chunk
     * forwards, then one more before the first backward; all m v when m
     * == p (every forward first) */
    n = m == p ? (double)(m * v) : (double)(2 * (p - stage - 1) + (v - 1) * p + 1);
    return n < (double)(m * v) ? n : (double)(m * v);
}

typedef struct shape {
    double L, h, a, g, d, f, V, S, E, K, fe;
    double Sh;   /* shared experts (always active, of fe each; llama) */
    double Lmoe; /* MoE layers: l % every == 0 */
    int64_t every;
    int llama;
    double P_attn, P_mlp_dense, P_expert, P_mlp_active, P_norm;
} shape;

static void get_shape(const llmt_spec *s, shape *m)
{
    m->L = (double)s->model.layers;
    m->h = (double)s->model.hidden;
    m->a = (double)s->model.heads;
    m->g = (double)s->model.kv_heads;
    m->d = m->h / m->a;
    m->f = (double)s->model.ffn;
    m->V = (double)s->model.vocab;
    m->S = (double)s->model.seq_len;
    m->E = (double)s->model.moe.experts;
    m->K = (double)s->model.moe.top_k;
    m->fe = (double)s->model.moe.expert_ffn;
    m->Sh = m->E > 0 ? (double)s->model.moe.shared_experts : 0;
    m->every = s->model.moe.every > 0 ? s->model.moe.every : 1;
    m->Lmoe = m->E > 0 ? (double)((s->model.layers + m->every - 1) / m->every) : 0;
    m->llama = s->model.arch == LLMT_SPEC_ARCH_LLAMA;
    m->P_attn = 2 * m->h * m->h + 2 * m->h * m->g * m->d;
    double mats = m->llama ? 3 : 2;
    m->P_mlp_dense = mats * m->h * m->f;
    m->P_expert = mats * m->h * m->fe;
    m->P_mlp_active = m->E > 0 ? (m->K + m->Sh) * m->P_expert + m->h * m->E : m->P_mlp_dense;
    m->P_norm = m->llama ? 2 * m->h : 4 * m->h;
}

/* Activation bytes one token leaves for the backward pass in one layer, per
 * GPU (Korthikanti et al. 2022, generalised to GQA, SwiGLU and MoE). */
static double act_bytes_per_token(const shape *m, double t, int sp, int recompute)
{
    double h = m->h;
    if (recompute == LLMT_SPEC_RECOMPUTE_FULL)
        return 2 * h / (sp ? t : 1); /* the layer input only */
    double attn = 2 * h + 2 * h + 4 * m->g * m->d + 2 * h + (m->llama ? 0 : h);
    double mlp;
    if (m->E > 0)
        mlp =
            m->K * (2 * h + (m->llama ? 6 : 4) * m->fe) + 4 * m->E + 2 * h + m->Sh * 6 * m->fe;
    else
        mlp = m->llama ? 2 * h + 6 * m->f : 2 * h + 4 * m->f + h;
    double norms = 4 * h;
    /* Parts outside the tensor-parallel regions: norm inputs, the inputs of
     * attention and MLP, dropout masks (gpt2). Sequence parallelism shards
     * them too. */
    double repl = norms + 2 * h + 2 * h + (m->llama ? 0 : 2 * h);
    double total = attn + mlp + norms;
    double split = total - repl;
    double bytes = sp ? total / t : repl + split / t;
    /* Attention scores/softmax/mask, 5*a*s bytes per token, unless the core
     * attention is recomputed (selective) - flash attention never stores
     * them either. */
    if (recompute == LLMT_SPEC_RECOMPUTE_NONE)
        bytes += 5 * m->a * m->S / t;
    return bytes;
}

/* plan.h: 1.2 at 40 tokens of top-2 over 8 experts is 13 rows in the
 * trainer's float (1.2f is above 1.2), 12 in doubles */
double llmt__plan_moe_capacity(const llmt_spec *s, double n, double K, double E)
{
    if (s->model.moe.dropless)
        return n;
    double c = ceil((double)(float)s->model.moe.capacity_factor * n * K / E);
    return fmin(n, fmax(1, c));
}

/* What fp8 GEMMs (precision.gemm fp8, delayed scaling) add to a GPU's
 * memory, bytes, as this library's engine holds it (lib/plan/engine.c's
 * fp8_bytes counts it exactly; doc/planner.md): the recipe's scales and
 * amax rows (15 tensors a layer, a row per micro-batch: negligible), one
 * Linear's fp8 codes at a time (its input, weight and output gradient
 * twice, 1 byte each) and, with MoE layers, the routed experts' rows
 * padded to 16 per expert (bf16 in and out and three code buffers, 7
 * bytes an element, max(h, fe) wide; tok x top_k rows, or an expert
 * parallel owner's E x capacity (ep x tok x top_k if less), plus 15 for
 * each expert the GPU
 * multiplies: E, or its E/ep) and one projection's codes of those
 * experts. The bf16 buffers stay: fp8 saves nothing here. tok: a
 * micro-batch's tokens on the GPU; nmb: micro-batches per step. */
static double fp8_bytes(const llmt_spec *s, const shape *m, double t, double ep, int sp,
                        double tok, double nmb)
{
    if (s->precision.gemm != LLMT_SPEC_PREC_FP8)
        return 0;
    double q = (m->a + 2 * m->g) * m->d / t, f = m->f / t, h = m->h;
    double recipe = 15 * m->L * (4 + 16 + 4 * (nmb + 1));
    double x = recipe + tok * (fmax(h, f) + 2 * fmax(q, fmax(h, f))) + h * fmax(q, f);
    if (m->E <= 0)
        return x;
    double n = sp ? tok / t : tok, rows = n * m->K, El = m->E;
    if (ep > 1) {
        double cap = llmt__plan_moe_capacity(s, n, m->K, m->E);
        rows = fmin(m->E * cap, ep * rows);
        El = m->E / ep;
    }
    return x + (rows + 15 * El) * fmax(h, m->fe) * 7 + El * m->fe * h;
}

int64_t llmt__plan_node_ranks(const llmt_spec *s, int64_t world)
{
    int64_t n = s->hardware.gpus_per_node;
    const llmt_hw_entry *hw = llmt__hw_lookup(s->hardware.gpu);
    /* The "cpu" row's 1 per node is a placeholder: the host's cores run
     * every rank started on it (threads, or mpirun on one machine), its
     * memory copies are the row's "NVLink". A hardware.gpus_per_node the
     * spec gives (several hosts) is taken as it is. */
    if (hw && !strcmp(hw->name, "cpu") && !llmt__spec_given(s, "hardware.gpus_per_node")) {
        int64_t layout =
            s->parallelism.tp * s->parallelism.cp * s->parallelism.pp * s->parallelism.dp;
        if (world > n)
            n = world;
        if (layout > n)
            n = layout;
    }
    return n;
}

void llmt__plan_estimate(const llmt_spec *s, int32_t world,
                         llmt_plan_estimate *e)
{
    llmt__plan_estimate_k(s, world, &llmt__plan_consts_default, e);
}

void llmt__plan_estimate_k(const llmt_spec *s, int32_t world,
                           const llmt_plan_consts *k, llmt_plan_estimate *e)
{
    llmt__plan_estimate_x(s, world, k, NULL, e, NULL);
}

/* A GEMM of m x k times k x n on one GPU: 2mnk FLOPs against 2(mk + kn +
 * mn) bytes of bf16 operands and result, an arithmetic intensity of
 * 1/(1/m + 1/n + 1/k) FLOPs per byte (NVIDIA, "Matrix Multiplication
 * Background" user's guide). Its time is the roofline's (Williams et al.
 * 2009): the larger of FLOPs / (peak * eff) and reread * bytes / HBM
 * bandwidth, i.e. it runs below peak when the intensity is under reread *
 * peak / bandwidth (156 FLOPs per byte on an A100, 295 on an H100): thin
 * GEMMs (a small per-rank width at high tp, few tokens per micro-batch,
 * attention's head-dim products) are memory bound. reread = 1 counts each
 * operand once (the compulsory traffic). The intensity is symmetric in m,
 * n, k, so the backward's dgrad and wgrad GEMMs (the same three sizes
 * permuted) take the forward's time. */
static double gemm_s(double m, double n, double kk, double peak, double eff, double bw_reread)
{
    if (m <= 0 || n <= 0 || kk <= 0)
        return 0;
    double flops = 2 * m * n * kk, bytes = 2 * (m * kk + kk * n + m * n);
    return fmax(flops / (peak * eff), bytes / bw_reread);
}

static void estimate(const llmt_spec *s, int32_t world, const llmt_plan_consts *k,
                     const llmt_plan_sw *sw, llmt_plan_estimate *e, double *terms);

void llmt__plan_estimate_x(const llmt_spec *s, int32_t world, const llmt_plan_consts *k,
                           const llmt_plan_sw *sw, llmt_plan_estimate *e, double *terms)
{
    /* The automatic stages (llmt__plan_spec_span) are a balance over the
     * layers' work, which the estimate's loops over stages and chunks
     * would redo at every call (the auto-planner estimates thousands of
     * layouts): computed once, into a copy's stage_layers (searches fill
     * them themselves: llmt__plan_set_stages) */
    int64_t pp = s->parallelism.pp, v = s->parallelism.virtual_stages,
            nv = pp * (v > 1 ? v : 1);
    llmt_spec *own = NULL;
    if (pp > 1 && s->parallelism.nstage_layers != nv && (own = malloc(sizeof *own))) {
        *own = *s;
        llmt__plan_resolve_stages(own);
    }
    estimate(own ? own : s, world, k, sw, e, terms);
    free(own);
}

static void estimate(const llmt_spec *s, int32_t world, const llmt_plan_consts *k,
                     const llmt_plan_sw *sw, llmt_plan_estimate *e, double *terms)
{
    if (!k)
        k = &llmt__plan_consts_default;
    if (!sw)
        sw = &llmt__plan_sw_default;
    const double ATTN_EFF_RATIO = k->attn_eff_ratio, KERNEL_OVERHEAD = k->compute_overhead,
                 LINK_EFF = k->link_eff, TP_OVERLAP = sw->tp_comm_overlap ? k->tp_overlap : 0,
                 DP_OVERLAP = sw->dp_overlap ? k->dp_overlap : 0;
    double tm[LLMT_PLAN_NTERMS] = {0};
    memset(e, 0, sizeof *e);
    e->struct_size = sizeof *e;
    shape m;
    get_shape(s, &m);
    const double t = (double)s->parallelism.tp, c = (double)s->parallelism.cp,
                 p = (double)s->parallelism.pp, D = (double)s->parallelism.dp,
                 ep = (double)s->parallelism.ep,
                 v = (double)s->parallelism.virtual_stages;
    const double b = (double)s->batch.micro, nmb = (double)s->batch.grad_accum;
    const int zero = (int)s->parallelism.zero, rc = s->parallelism.recompute;
    const int sp = s->parallelism.sequence_parallel;
    const int gpu = s->train.device == LLMT_SPEC_DEVICE_CUDA ||
                    strcmp(s->hardware.gpu ? s->hardware.gpu : "", "cpu") != 0;
    e->world_size = world;
    e->tp = (int32_t)t;
    e->cp = (int32_t)c;
    e->pp = (int32_t)p;
    e->dp = (int32_t)D;
    e->ep = (int32_t)ep;
    e->zero = zero;
    e->virtual_stages = (int32_t)v;
    e->micro = (int32_t)b;
    e->grad_accum = (int32_t)nmb;
    e->recompute = rc;
    e->sequence_parallel = sp;
    e->global_batch = s->batch.global;
    e->tokens_per_step = s->batch.global * s->model.seq_len;

    /* ---- parameters */
    double N = llmt__spec_param_count(s);
    double N_active = N;
    if (m.E > 0)
        N_active = N - m.Lmoe * (m.E - m.K) * m.P_expert;
    e->params = N;
    e->params_active = N_active;

    /* ---- FLOPs per token: 2 per multiply-add; backward = 2x forward. The
     * attention core (QK^T and AV) is counted without the causal halving,
     * the convention of PaLM's and Megatron's MFU. */
    double fwd_layers = 2 * (m.L * m.P_attn +
                             (m.E > 0 ? m.Lmoe * m.P_mlp_active + (m.L - m.Lmoe) * m.P_mlp_dense
                                      : m.L * m.P_mlp_active));
    double fwd_head = 2 * m.V * m.h;
    double fwd_attn = m.L * 2 * 2 * m.S * m.h;
    e->model_flops_per_token = 3 * (fwd_layers + fwd_head + fwd_attn);
    e->flops_6nd_per_token = 6 * N_active;
    double tokens = (double)e->tokens_per_step;
    e->model_flops_per_step = e->model_flops_per_token * tokens;
    double extra = 0;
    if (rc == LLMT_SPEC_RECOMPUTE_FULL)
        extra = fwd_layers + fwd_attn;
    else if (rc == LLMT_SPEC_RECOMPUTE_SELECTIVE)
        extra = fwd_attn;
    e->hw_flops_per_step = e->model_flops_per_step + extra * tokens;

    /* ---- hardware */
    double peak = s->hardware.peak_tflops * 1e12;
    double peak_gemm = peak;
    if (s->precision.gemm == LLMT_SPEC_PREC_FP8 && s->hardware.fp8_tflops > 0)
        peak_gemm = s->hardware.fp8_tflops * 1e12;
    else if (s->precision.gemm == LLMT_SPEC_PREC_FP32 ||
             s->precision.param == LLMT_SPEC_PREC_FP32) {
        const llmt_hw_entry *hw = llmt__hw_lookup(s->hardware.gpu);
        /* fp32 GEMMs run on TF32 tensor cores at half the bf16 rate */
        peak_gemm = hw && !strcmp(hw->name, "cpu") ? peak : peak / 2;
    }
    double eff = s->hardware.efficiency;
    double hbm_bw = 3.0e12;
    {
        const llmt_hw_entry *hw = llmt__hw_lookup(s->hardware.gpu);
        if (hw)
            hbm_bw = hw->hbm_TBps * 1e12;
    }
    const double GEMM_HALF = hbm_bw / k->gemm_reread; /* effective operand bandwidth */
    double gpn = (double)llmt__plan_node_ranks(s, world);
    double nvl_bw = s->hardware.nvlink_GBps * 1e9 / 2 * LINK_EFF;
    /* Rail-optimised fabric: the node's rails are shared by its GPUs. */
    double rails_per_gpu = (double)s->hardware.ib_rails / gpn;
    double ib_bw = s->hardware.ib_Gbps / 8 * 1e9 * rails_per_gpu * LINK_EFF;
    /* A group is inside a node when all members are: stride*size <= node. */
    double stride_tp = 1, stride_cp = t, stride_pp = t * c, stride_dp = t * c * p;
    double bw_tp = stride_tp * t <= gpn ? nvl_bw : ib_bw;
    double lat_tp = stride_tp * t <= gpn ? LAT_NVLINK : LAT_IB;
    double bw_cp = stride_cp * c <= gpn ? nvl_bw : ib_bw;
    double bw_pp = stride_pp * p <= gpn ? nvl_bw : ib_bw;
    double lat_pp = stride_pp * p <= gpn ? LAT_NVLINK : LAT_IB;
    double bw_dp = stride_dp * D <= gpn ? nvl_bw : ib_bw;
    double lat_dp = stride_dp * D <= gpn ? LAT_NVLINK : LAT_IB;
    double bw_ep = stride_dp * ep <= gpn ? nvl_bw : ib_bw;

    /* ---- one micro-batch through one layer on one GPU */
    double tok = b * m.S / c; /* tokens per micro-batch per GPU */
    const int full = rc == LLMT_SPEC_RECOMPUTE_FULL;
    /* The layer's GEMMs on one GPU: QKV (column parallel), attention out
     * (row parallel), MLP up (gate and up together for SwiGLU) and down;
     * MoE experts see tok*top_k*ep/E tokens each, E/ep of them per GPU. */
    double mats_up = m.llama ? 2 : 1;
    double g1 = gemm_s(tok, (m.h + 2 * m.g * m.d) / t, m.h, peak_gemm, eff, GEMM_HALF) +
                gemm_s(tok, m.h, m.h / t, peak_gemm, eff, GEMM_HALF);
    if (m.E > 0) {
        double te = tok * m.K * ep / m.E, ne = m.E / ep;
        g1 += ne * (gemm_s(te, mats_up * m.fe / t, m.h, peak_gemm, eff, GEMM_HALF) +
                    gemm_s(te, m.h, m.fe / t, peak_gemm, eff, GEMM_HALF)) +
              gemm_s(tok, m.E, m.h, peak_gemm, eff, GEMM_HALF);
        if (m.Sh > 0) /* the shared experts: one SwiGLU of Sh*fe on every token */
            g1 += gemm_s(tok, mats_up * m.Sh * m.fe / t, m.h, peak_gemm, eff, GEMM_HALF) +
                  gemm_s(tok, m.h, m.Sh * m.fe / t, peak_gemm, eff, GEMM_HALF);
    } else {
        g1 += gemm_s(tok, mats_up * m.f / t, m.h, peak_gemm, eff, GEMM_HALF) +
              gemm_s(tok, m.h, m.f / t, peak_gemm, eff, GEMM_HALF);
    }
    /* one forward pass; the backward is two (dgrad, wgrad); full
     * recomputation runs the forward again */
    double t_gemm = 3 * g1, t_gemm_rc = full ? g1 : 0;
    double passes = 3 + (full ? 1 : 0);
    /* The attention core, QK^T and AV over the S keys. Flash attention
     * (Dao et al. 2022) skips the masked half of a causal sequence and
     * keeps the scores on chip: its FLOPs at attn_eff_ratio (fitted) x the
     * GEMM efficiency. Unfused (Megatron-LM before flash attention) it runs
     * the full S x S product as batched GEMMs of (S/c) x S x d and S x d x S
     * (their own efficiency, small d is slow) and the scores go through
     * HBM: Korthikanti et al. 2022's 5*a*s bytes per token (softmax output
     * 2, dropout mask 1, dropout output 2) written and read again by each
     * forward, read and their gradients written by the backward. */
    double attn_fwd_flops = 2 * 2 * tok * m.S * m.h / t; /* no causal halving */
    double t_attn1;
    if (sw->flash_attention) {
        t_attn1 = attn_fwd_flops * 0.5 / (peak * eff * ATTN_EFF_RATIO);
    } else {
        double heads = b * m.a / t; /* batched GEMMs per micro-batch */
        t_attn1 = heads * (gemm_s(m.S / c, m.S, m.d, peak_gemm, eff, GEMM_HALF) +
                           gemm_s(m.S / c, m.d, m.S, peak_gemm, eff, GEMM_HALF));
        t_attn1 += tok * 5 * m.a * m.S / t * 2 / hbm_bw; /* scores, one forward */
    }
    double t_attn = 3 * t_attn1;
    double t_attn_rc = rc != LLMT_SPEC_RECOMPUTE_NONE ? t_attn1 : 0;
    /* Elementwise kernels (norms, activations, residuals) stream the
     * layer's stored activations (the SELECTIVE count: no score term). */
    double act_tok = act_bytes_per_token(&m, t, sp, LLMT_SPEC_RECOMPUTE_SELECTIVE);
    double t_elem1 = tok * 2 * act_tok / hbm_bw;
    double t_elem = 3 * t_elem1, t_elem_rc = full ? t_elem1 : 0;
    /* Per layer and micro-batch, a fixed time that does not shrink with the
     * work: kernel launches and their gaps, the small unfused kernels'
     * minimum duration, the per-micro-batch bookkeeping of the schedule.
     * It is what keeps tiny micro-batches from looking free (a recomputed
     * forward pays it again). */
    double t_fixed = gpu ? k->fixed_layer_s * passes / 3 : 0;
    double t_kern = (t_gemm + t_attn + t_elem) * KERNEL_OVERHEAD;
    double t_kern_rc = (t_gemm_rc + t_attn_rc + t_elem_rc) * KERNEL_OVERHEAD;
    double t_layer = t_kern + t_kern_rc + t_fixed;
    /* TP: 4 all-reduces of the activations per layer and micro-batch (2
     * forward, 2 backward; 6 with full recompute), or with SP the same
     * volume as all-gathers and reduce-scatters (Korthikanti et al. 2022
     * sec. 4.2.2: an all-reduce is a reduce-scatter plus an all-gather). On
     * NVLink a share is hidden behind GEMMs when the software overlaps them
     * (Megatron-LM before TE's userbuffers did not: MegaScale sec. 3.3). */
    double n_ar = full ? 6 : 4;
    /* activations travel in the parameters' type, and in fp32 on a CPU
     * (this engine's CPU backend computes in fp32 whatever the spec's
     * precision) */
    double msg = tok * m.h * (!gpu || s->precision.param == LLMT_SPEC_PREC_FP32 ? 4 : 2);
    double tp_layer = t > 1 ? n_ar * llmt__plan_allreduce_s(msg, t, bw_tp, lat_tp) : 0;
    double tp_bytes_layer = t > 1 ? n_ar * 2 * (t - 1) / t * msg : 0;
    double tp_exposed = tp_layer * (bw_tp == nvl_bw ? 1 - TP_OVERLAP : 1);
    /* CP: ring attention passes K,V chunks (c-1 times forward, K,V and
     * their gradients backward), overlapped with the attention compute. */
    double kv_chunk = b * (m.S / c) * 2 * m.g * m.d * 2 / t;
    double cp_bytes_layer = c > 1 ? 3 * (c - 1) * kv_chunk : 0;
    double cp_layer = c > 1 ? cp_bytes_layer / bw_cp + 3 * (c - 1) * LAT_IB : 0;
    double cp_exposed = fmax(0, cp_layer - t_attn * KERNEL_OVERHEAD);
    /* EP: dispatch and combine all-to-all, forward and backward, per MoE
     * layer. Fixed-shape exchange (GShard; lib/train/moe_ep.h): every
     * expert's block padded to its capacity, ceil(capacity_factor * tokens
     * * top_k / E) rows (at most the tokens; dropless: the tokens), so a
     * GPU sends E * capacity rows of the activations' type per all-to-all,
     * (ep-1)/ep of them to other GPUs. */
    double ep_bytes_layer = 0, ep_layer = 0;
    if (m.E > 0 && ep > 1) {
        double toks = sp ? tok / t : tok;
        double cap = llmt__plan_moe_capacity(s, toks, m.K, m.E);
        double a2a =
            m.E * cap * m.h * (!gpu || s->precision.param == LLMT_SPEC_PREC_FP32 ? 4 : 2);
        ep_bytes_layer = 4 * (ep - 1) / ep * a2a;
        ep_layer = ep_bytes_layer / bw_ep + 4 * (ep - 1) * LAT_IB;
    }
    /* The head on the last stage (and its logits). */
    double t_head = 3 * gemm_s(tok, m.V / t, m.h, peak_gemm, eff, GEMM_HALF) * KERNEL_OVERHEAD;

    int64_t Lmax = 0, Llast = 0, cnt = 0, Mmax = 0, Mlast = 0;
    for (int64_t st = 0; st < (int64_t)p; st++) {
        cnt = llmt__plan_stage_total(s, st);
        int64_t moe = 0; /* its MoE layers (in each of its chunks) */
        for (int64_t ch = 0; m.E > 0 && ch < (int64_t)v; ch++) {
            int64_t f, c;
            llmt__plan_spec_span(s, st, ch, &f, &c);
            for (int64_t l = f; l < f + c; l++)
                moe += l % m.every == 0;
        }
        if (cnt > Lmax) {
            Lmax = cnt;
            Mmax = moe;
        }
        if (st == (int64_t)p - 1) {
            Llast = cnt;
            Mlast = moe;
        }
    }
    /* MoE layers: every `every`-th from layer 0 (the stage paced below
     * holds moe_here of them; the time per layer spreads the model's
     * share) */
    double moe_frac = m.E > 0 ? m.Lmoe / m.L : 0;
    double per_layer = t_layer + tp_exposed + cp_exposed + ep_layer * moe_frac;
    /* The heaviest stage paces the pipeline. */
    double lay_here = (double)Lmax, head_here = 0, moe_here = (double)Mmax;
    if ((double)Llast * per_layer + t_head > (double)Lmax * per_layer) {
        lay_here = (double)Llast;
        head_here = t_head;
        moe_here = (double)Mlast;
    }
    /* TP at the vocabulary-parallel ends (Megatron's layers and this
     * engine's): per micro-batch the embedding's output and the head's
     * input gradient summed (msg each) and the loss's row max and sums (3
     * fp32 per token) on the stages that hold them; per step the gradient
     * norm's float and, with fewer kv heads than t (each held whole by t/g
     * ranks), their gradients summed in fp32. */
    double ends_ar = 0, ends_loss = 0, tp_step_bytes = 0, tp_step_s = 0;
    if (t > 1) {
        ends_ar = (head_here > 0 ? 1 : 0) + (p == 1 ? 1 : 0);
        ends_loss = head_here > 0 ? tok * 4 : 0; /* then 2x that */
        double kv = m.g < t ? lay_here * 2 * m.g * m.d * m.h * 4 : 0;
        tp_step_bytes = 2 * (t - 1) / t * (kv + 4);
        tp_step_s =
            llmt__plan_allreduce_s(4, t, bw_tp, lat_tp) +
            (m.g < t ? lay_here * llmt__plan_allreduce_s(kv / lay_here, t, bw_tp, lat_tp) : 0);
    }
    double tp_ends_bytes = t > 1 ? 2 * (t - 1) / t * (ends_ar * msg + 3 * ends_loss) : 0;
    double tp_ends_s = ends_ar * llmt__plan_allreduce_s(msg, t, bw_tp, lat_tp) +
                       llmt__plan_allreduce_s(ends_loss, t, bw_tp, lat_tp) +
                       llmt__plan_allreduce_s(2 * ends_loss, t, bw_tp, lat_tp);
    double tp_ends_exposed = tp_ends_s * (bw_tp == nvl_bw ? 1 - TP_OVERLAP : 1);
    double t_stage = lay_here * per_layer + head_here + tp_ends_exposed;
    /* PP: send activations forward and gradients backward per boundary. */
    /* Each TP rank sends 1/t of the boundary activation and the receiving
     * node all-gathers it over NVLink (Megatron's scatter/gather, Narayanan
     * et al. 2021 sec. 4.1; with SP the activation is split anyway). */
    double pp_msg = tok * m.h * 2 / t;
    double pp_per_mb = p > 1 ? 2 * v * (pp_msg / bw_pp + lat_pp) : 0;
    double t_mb = t_stage + pp_per_mb;
    double bubble = p > 1 ? (p - 1) / (v * nmb + p - 1) : 0;
    /* The steady state runs at the slowest stage; the fill and the drain
     * pass through every stage once, so they take the average stage's time
     * (the last stage's output layer counts once, not p - 1 times). */
    double t_avg = ((double)s->model.layers * per_layer + t_head) / p + pp_per_mb;
    double t_pipe = nmb * t_mb + (p > 1 ? (p - 1) / v * fmin(t_avg, t_mb) : 0);

    /* ---- parameters on one GPU (the heaviest stage): a dense layer's MLP,
     * or a MoE layer's router and its E/ep experts */
    double dense_layer = m.P_attn / t + m.P_norm;
    double mlp_layer = m.P_mlp_dense / t, router_layer = m.E > 0 ? m.h * m.E : 0;
    router_layer += m.Sh * m.P_expert / t; /* shared experts: replicated, like the dense MLP */
    double expert_layer = m.E > 0 ? m.E * m.P_expert / (ep * t) : 0;
    double pe_chosen = 0;
    double emb = m.V * m.h / t + (m.llama ? 0 : m.S * m.h);
    double head = (s->model.tied_embeddings && p == 1) ? 0 : m.V * m.h / t;
    double pbytes = s->precision.param == LLMT_SPEC_PREC_FP32 ? 4 : 2;
    double master = s->precision.param == LLMT_SPEC_PREC_FP32
                        ? 0 : (s->precision.master == LLMT_SPEC_PREC_FP32 ? 4 : 2);
    double opt_b = master + (s->optimizer.type == LLMT_SPEC_OPT_SGD ? 4 : 8);
    double De = D / ep; /* data-parallel degree of expert weights */
    double best_total = -1;
    /* every stage: the automatic balance can give a later stage more
     * layers than an earlier one, which holds more micro-batches in flight
     * (1F1B, interleaved), so no one stage is the most loaded by rule */
    for (int64_t st = 0; st < (int64_t)p; st++) {
        cnt = llmt__plan_stage_total(s, st);
        double Ls = (double)cnt, Ms = 0; /* its layers, its MoE layers */
        for (int64_t ch = 0; m.E > 0 && ch < (int64_t)v; ch++) {
            int64_t f, c;
            llmt__plan_spec_span(s, st, ch, &f, &c);
            for (int64_t l = f; l < f + c; l++)
                Ms += l % m.every == 0;
        }
        double pd = Ls * dense_layer + (Ls - Ms) * mlp_layer + Ms * router_layer +
                    (st == 0 ? emb : 0) + (st == (int64_t)p - 1 ? head + m.h : 0);
        double pe = Ms * expert_layer;
        double w = pbytes * (zero >= 3 ? pd / D + pe / De : pd + pe);
        double g = pbytes * (zero >= 2 ? pd / D + pe / De : pd + pe);
        double o = opt_b * (zero >= 1 ? pd / D + pe / De : pd + pe);
        /* activations in flight, in the stage's micro-batches: GPipe m,
         * 1F1B p - stage (at most m), interleaved Megatron-LM's chunk
         * count over v: p (1 + (p-1)/(p v)) on stage 0 (Narayanan et al.
         * 2021) */
        double inflight = llmt__plan_pp_inflight(llmt__plan_pp_schedule(s), (int64_t)p,
                                                 (int64_t)v, (int64_t)nmb, st) /
                          v;
        double a_tok = act_bytes_per_token(&m, t, sp, rc);
        double act = Ls * inflight * tok * a_tok;
        if (rc == LLMT_SPEC_RECOMPUTE_FULL) /* one layer rebuilt at a time */
            act += tok * act_bytes_per_token(&m, t, sp, LLMT_SPEC_RECOMPUTE_SELECTIVE);
        if (st == (int64_t)p - 1)
            act += tok * m.V / t * 4; /* fp32 logits */
        act += fp8_bytes(s, &m, t, ep, sp, tok, nmb); /* once per GPU, every stage */
        double ovh = gpu ? MEM_OVERHEAD_GPU : MEM_OVERHEAD_CPU;
        double total = w + g + o + act + ovh;
        if (total > best_total) {
            best_total = total;
            e->params_per_gpu = pd + pe;
            pe_chosen = pe;
            e->mem_weights = w;
            e->mem_grads = g;
            e->mem_optimizer = o;
            e->mem_activations = act;
            e->mem_overhead = ovh;
            e->mem_total = total;
        }
    }
    e->mem_capacity = s->hardware.hbm_GB * 1e9;
    e->fits = e->mem_total <= e->mem_capacity;

    /* ---- data parallel: gradients reduced over dp (dense) and dp/ep
     * (experts), in fp32 where the software does (Megatron-LM's default for
     * bf16, accumulate_allreduce_grads_in_fp32; Llama 3 sec. 3.3.4), else
     * in the parameter dtype. ZeRO 0: one all-reduce. ZeRO 1/2 (Megatron's
     * distributed optimizer): a reduce-scatter of the gradients and an
     * all-gather of the updated bf16 weights. ZeRO-3: every micro-batch
     * gathers the weights twice (forward, backward) and reduce-scatters the
     * gradients (Rajbhandari et al. 2020, sec. 7). */
    double gbytes = sw->grad_reduce_fp32 ? 4 : pbytes;
    double exp_n = pe_chosen; /* the experts of that stage's MoE layers */
    double dense_n = fmax(0, e->params_per_gpu - exp_n);
    double t_dp = 0, dp_bytes = 0;
    double fD = D > 1 ? (D - 1) / D : 0, fDe = De > 1 ? (De - 1) / De : 0;
    if (zero >= 3) {
        t_dp = nmb * (2 * gather_s(dense_n * pbytes, D, bw_dp, lat_dp) +
                      gather_s(dense_n * gbytes, D, bw_dp, lat_dp) +
                      2 * gather_s(exp_n * pbytes, De, bw_dp, lat_dp) +
                      gather_s(exp_n * gbytes, De, bw_dp, lat_dp));
        dp_bytes =
            nmb * (fD * dense_n * (2 * pbytes + gbytes) + fDe * exp_n * (2 * pbytes + gbytes));
    } else if (zero >= 1) {
        t_dp = gather_s(dense_n * gbytes, D, bw_dp, lat_dp) +
               gather_s(dense_n * pbytes, D, bw_dp, lat_dp) +
               gather_s(exp_n * gbytes, De, bw_dp, lat_dp) +
               gather_s(exp_n * pbytes, De, bw_dp, lat_dp);
        dp_bytes = fD * dense_n * (gbytes + pbytes) + fDe * exp_n * (gbytes + pbytes);
    } else {
        t_dp = llmt__plan_allreduce_s(dense_n * gbytes, D, bw_dp, lat_dp) +
               llmt__plan_allreduce_s(exp_n * gbytes, De, bw_dp, lat_dp);
        dp_bytes = 2 * fD * dense_n * gbytes + 2 * fDe * exp_n * gbytes;
    }
    /* Overlapped with the backward of the last micro-batch (2/3 of it;
     * with ZeRO 1/2 the weights' all-gather also hides behind the next
     * forward) where the software does so; Megatron-LM of 2021-23 reduced
     * after the backward (Korthikanti et al. 2022, sec. 6.3). */
    double window = (zero == 0 ? 2.0 / 3.0 : 1.0) * t_mb * DP_OVERLAP;
    /* ZeRO-3 prefetches the next layer's weights while this one computes:
     * its gathers and reduce-scatters hide behind the whole step's compute,
     * as far as k->zero3_overlap of it. */
    double dp_exposed = zero >= 3 ? fmax(t_dp - nmb * t_mb * k->zero3_overlap, 0.1 * t_dp)
                                  : fmax(t_dp - window, 0.1 * t_dp);
    /* Optimizer: read/write params, grads, master, moments of the local
     * shard: memory bound. */
    double shard = e->params_per_gpu / (zero >= 1 ? D : 1);
    double t_opt = shard * (2 * (pbytes + master + 8) + pbytes) / hbm_bw;
    /* Stragglers: every GPU's micro-batch takes t_mb (1 + jitter Z), Z
     * independent and standard normal; the step ends when the slowest of
     * the world's GPUs has finished its nmb micro-batches, on average
     * jitter * t_mb * sqrt(nmb) * sqrt(2 ln world) later (the expected
     * maximum of `world` normals, Gumbel's extreme-value asymptote). */
    double t_jit = world > 1 ? k->jitter * t_mb * sqrt(nmb) * sqrt(2 * log((double)world)) : 0;

    e->comm_bytes_tp = (tp_bytes_layer * lay_here + tp_ends_bytes) * nmb + tp_step_bytes;
    e->comm_bytes_cp = cp_bytes_layer * lay_here * nmb;
    e->comm_bytes_ep = ep_bytes_layer * moe_here * nmb;
    e->comm_bytes_pp = p > 1 ? 2 * v * pp_msg * nmb : 0;
    e->comm_bytes_dp = dp_bytes;
    e->time_tp_s = (tp_exposed * lay_here + tp_ends_exposed) * nmb + tp_step_s;
    e->time_cp_s = cp_exposed * lay_here * nmb;
    e->time_ep_s = ep_layer * moe_here * nmb;
    e->time_pp_s = pp_per_mb * nmb;
    e->time_dp_s = dp_exposed;
    e->time_compute_s = nmb * (lay_here * t_layer + head_here);
    e->bubble_fraction = bubble;
    e->time_bubble_s = t_pipe - nmb * t_mb;
    e->time_optimizer_s = t_opt;
    e->step_time_s = t_pipe + tp_step_s + dp_exposed + t_opt + t_jit;
    tm[LLMT_TERM_COMPUTE] = nmb * (lay_here * t_kern + head_here);
    tm[LLMT_TERM_RECOMPUTE] = nmb * lay_here * t_kern_rc;
    tm[LLMT_TERM_FIXED] = nmb * lay_here * t_fixed;
    tm[sp ? LLMT_TERM_SP : LLMT_TERM_TP] = e->time_tp_s;
    tm[LLMT_TERM_CP] = e->time_cp_s;
    tm[LLMT_TERM_EP] = e->time_ep_s;
    tm[LLMT_TERM_PP_P2P] = e->time_pp_s;
    tm[LLMT_TERM_BUBBLE] = e->time_bubble_s;
    tm[zero >= 3 ? LLMT_TERM_ZERO3 : LLMT_TERM_DP] = dp_exposed;
    tm[LLMT_TERM_OPTIMIZER] = t_opt;
    tm[LLMT_TERM_JITTER] = t_jit;
    if (terms)
        memcpy(terms, tm, sizeof tm);
    e->tokens_per_s = tokens / e->step_time_s;
    e->mfu = e->model_flops_per_step / ((double)world * peak * e->step_time_s);
    e->tflops_per_gpu = e->model_flops_per_step / ((double)world * e->step_time_s) / 1e12;

    /* ---- checkpoints and failures */
    double ckpt_per_param = (master > 0 ? master : pbytes) + 8;
    e->ckpt_bytes_total = N * ckpt_per_param;
    double per_gpu = e->ckpt_bytes_total / (double)world;
    /* The snapshot to host memory at PCIe speed, plus the fixed cost of a
     * save (all ranks agree on the step, drain the streams, record the
     * manifest): an assumption, doc/planner.md. */
    double stall = per_gpu / (s->hardware.pcie_GBps * 1e9) +
                   (world > 1 ? CKPT_SYNC_S : CKPT_SYNC_1_S);
    double write = e->ckpt_bytes_total / (s->hardware.storage_GBps * 1e9);
    if (s->checkpoint.save_write_s > 0)
        write = s->checkpoint.save_write_s;
    if (s->checkpoint.save_stall_s > 0)
        stall = s->checkpoint.save_stall_s;
    else if (!s->checkpoint.async)
        stall += write;
    e->ckpt_stall_s = stall;
    e->ckpt_write_s = write;
    e->restore_s = s->checkpoint.restore_s > 0
                       ? s->checkpoint.restore_s
                       : e->ckpt_bytes_total / (s->hardware.storage_GBps * 1e9);
    e->restart_s = s->fault_tolerance.restart_s;
    double lam = s->fault_tolerance.gpu_failures_per_hour * (double)world / 3600.0;
    e->mtbf_s = lam > 0 ? 1.0 / lam : INFINITY;
    e->young_daly_s = isfinite(e->mtbf_s) ? sqrt(2 * stall * e->mtbf_s) : INFINITY;
    double interval;
    if (!s->checkpoint.interval_auto && s->checkpoint.interval > 0)
        interval = (double)s->checkpoint.interval * e->step_time_s;
    else {
        /* An async save cannot start before the previous one is written. */
        interval = fmax(e->young_daly_s, s->checkpoint.async ? write : 0);
        if (interval < e->step_time_s)
            interval = e->step_time_s;
    }
    e->ckpt_interval_s = interval;
    double steps = isfinite(interval) ? floor(interval / e->step_time_s + 0.5) : 0;
    e->ckpt_interval_steps = (int64_t)(steps < 1 && isfinite(interval) ? 1 : steps);
    if (isfinite(interval) && isfinite(e->mtbf_s)) {
        double lost = e->restart_s + e->restore_s + (interval + stall) / 2 +
                      (s->checkpoint.async ? write : 0);
        e->goodput_analytic = interval / (interval + stall) * fmax(0, 1 - lost / e->mtbf_s);
    } else {
        e->goodput_analytic = isfinite(e->mtbf_s) ? 0 : 1;
    }
    e->run_time_s = (double)s->train.steps * e->step_time_s;
    e->run_flops = (double)s->train.steps * e->model_flops_per_step;
}
