/* The cost model: memory per GPU, FLOPs, communication and time of one
 * training step for a spec placed on `world` ranks. Every formula and its
 * source is in doc/planner.md; the constants below are the calibration
 * knobs that section discusses. */
#include <math.h>
#include <string.h>

#include "plan/plan.h"

/* The constants of the model (doc/planner.md, "Calibration"). The two
 * marked "fitted" are the output of llmt__calib_fit (lib/plan/calib.c):
 * least squares over the MFU of the published runs in
 * examples/specs/calibration/; test plan-calib refits them and fails when
 * these values are no longer the optimum. The others are set from first
 * principles or vendor figures and are not fitted. */
const llmt_plan_consts llmt__plan_consts_default = {
    .compute_overhead = COMPUTE_OVERHEAD_FIT, /* fitted: launch gaps, stragglers,
                                                  unfused small ops */
    .fixed_layer_s = FIXED_LAYER_S_FIT,       /* fitted: fixed s per layer and
                                                  micro-batch (fwd + bwd) */
    .attn_eff_ratio = ATTN_EFF_RATIO_FIT, /* fitted: flash attention vs GEMM
                                             efficiency */
    .gemm_half = GEMM_HALF_FIT, /* fitted: GEMM efficiency n/(n+half), n = the
                                   smallest dimension of the layer's GEMMs */
    .link_eff = 0.8,        /* NCCL bus bandwidth / link bandwidth */
    .tp_overlap = 0.5,      /* share of TP traffic hidden behind GEMMs */
    .dp_overlap = DP_OVERLAP_FIT,    /* fitted: share of the backward that hides
                                        the gradient reduction */
    .zero3_overlap = ZERO3_OVERLAP_FIT, /* fitted: share of the compute that
                                           hides ZeRO-3's gathers */
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

void llmt__plan_stage_span(int64_t layers, int64_t pp, int64_t v, int64_t stage,
                           int64_t chunk, int64_t *first, int64_t *count)
{
    if (v > 1) {
        /* Interleaved: layers % (pp*v) == 0 (a spec rule); chunk c of stage
         * s holds model chunk c*pp + s. */
        int64_t per = layers / (pp * v);
        *first = (chunk * pp + stage) * per;
        *count = per;
        return;
    }
    /* Uneven counts: the remainder goes to the middle stages first, since
     * the first holds the embedding and the last the output layer. */
    int64_t base = layers / pp, extra = layers % pp;
    int64_t f = 0;
    for (int64_t s = 0; s <= stage; s++) {
        int64_t c = base;
        if (extra) {
            /* middle stages 1..pp-2 take +1 in order, then 0, then pp-1 */
            int64_t mid = pp > 2 ? pp - 2 : 0;
            if (s >= 1 && s <= pp - 2 && s <= extra)
                c++;
            else if (s == 0 && extra > mid)
                c++;
            else if (s == pp - 1 && pp > 1 && extra > mid + 1)
                c++;
        }
        if (s == stage) {
            *first = f;
            *count = c;
            return;
        }
        f += c;
    }
}

typedef struct shape {
    double L, h, a, g, d, f, V, S, E, K, fe;
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
    m->llama = s->model.arch == LLMT_SPEC_ARCH_LLAMA;
    m->P_attn = 2 * m->h * m->h + 2 * m->h * m->g * m->d;
    double mats = m->llama ? 3 : 2;
    m->P_mlp_dense = mats * m->h * m->f;
    m->P_expert = mats * m->h * m->fe;
    m->P_mlp_active = m->E > 0 ? m->K * m->P_expert + m->h * m->E : m->P_mlp_dense;
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
        mlp = m->K * (2 * h + (m->llama ? 6 : 4) * m->fe) + 4 * m->E + 2 * h;
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

void llmt__plan_estimate(const llmt_spec *s, int32_t world,
                         llmt_plan_estimate *e)
{
    llmt__plan_estimate_k(s, world, &llmt__plan_consts_default, e);
}

void llmt__plan_estimate_k(const llmt_spec *s, int32_t world,
                           const llmt_plan_consts *k, llmt_plan_estimate *e)
{
    const double ATTN_EFF_RATIO = k->attn_eff_ratio, KERNEL_OVERHEAD = k->compute_overhead,
                 GEMM_HALF_SIZE = k->gemm_half, LINK_EFF = k->link_eff,
                 TP_OVERLAP = k->tp_overlap, DP_OVERLAP = k->dp_overlap;
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
        N_active = N - m.L * (m.E - m.K) * m.P_expert;
    e->params = N;
    e->params_active = N_active;

    /* ---- FLOPs per token: 2 per multiply-add; backward = 2x forward. The
     * attention core (QK^T and AV) is counted without the causal halving,
     * the convention of PaLM's and Megatron's MFU. */
    double fwd_layers = 2 * m.L * (m.P_attn + m.P_mlp_active);
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
    double gpn = (double)s->hardware.gpus_per_node;
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
    double nsz = fmin(m.h / t, tok);
    double eff_gemm = eff * nsz / (nsz + GEMM_HALF_SIZE);
    double passes = 3 + (rc == LLMT_SPEC_RECOMPUTE_FULL ? 1 : 0);
    double gemm_flops = passes * 2 * tok * (m.P_attn + m.P_mlp_active) / t;
    double attn_passes = 3 + (rc != LLMT_SPEC_RECOMPUTE_NONE ? 1 : 0);
    double attn_flops = attn_passes * 2 * 2 * tok * m.S * m.h / t * 0.5; /* causal */
    double t_gemm = gemm_flops / (peak_gemm * eff_gemm);
    double t_attn = attn_flops / (peak * eff * ATTN_EFF_RATIO);
    /* Elementwise kernels (norms, activations, residuals, softmax inside
     * the fused attention kernel) stream the layer's stored activations;
     * flash attention never writes the s x s scores, so they are left out
     * (the SELECTIVE count has no score term). */
    double act_tok = act_bytes_per_token(&m, t, sp, LLMT_SPEC_RECOMPUTE_SELECTIVE);
    double t_elem = tok * passes * 2 * act_tok / hbm_bw;
    /* Per layer and micro-batch, a fixed time that does not shrink with the
     * work: kernel launches and their gaps, the small unfused kernels'
     * minimum duration, the per-micro-batch bookkeeping of the schedule.
     * It is what keeps tiny micro-batches from looking free (a recomputed
     * forward pays it again). */
    double t_fixed = gpu ? k->fixed_layer_s * passes / 3 : 0;
    double t_layer = (t_gemm + t_attn + t_elem) * KERNEL_OVERHEAD + t_fixed;
    /* TP: 4 all-reduces (or all-gather + reduce-scatter pairs with SP) of
     * the activations per layer and micro-batch, 6 with full recompute. */
    double n_ar = rc == LLMT_SPEC_RECOMPUTE_FULL ? 6 : 4;
    double msg = tok * m.h * 2;
    double tp_layer = t > 1 ? n_ar * llmt__plan_allreduce_s(msg, t, bw_tp, lat_tp) : 0;
    double tp_bytes_layer = t > 1 ? n_ar * 2 * (t - 1) / t * msg : 0;
    double tp_exposed = tp_layer * (bw_tp == nvl_bw ? 1 - TP_OVERLAP : 1);
    /* CP: ring attention passes K,V chunks (c-1 times forward, K,V and
     * their gradients backward), overlapped with the attention compute. */
    double kv_chunk = b * (m.S / c) * 2 * m.g * m.d * 2 / t;
    double cp_bytes_layer = c > 1 ? 3 * (c - 1) * kv_chunk : 0;
    double cp_layer = c > 1 ? cp_bytes_layer / bw_cp + 3 * (c - 1) * LAT_IB : 0;
    double cp_exposed = fmax(0, cp_layer - t_attn);
    /* EP: dispatch and combine all-to-all, forward and backward. */
    double ep_bytes_layer = 0, ep_layer = 0;
    if (m.E > 0 && ep > 1) {
        double a2a = (sp ? tok / t : tok) * m.K * m.h * 2;
        ep_bytes_layer = 4 * (ep - 1) / ep * a2a;
        ep_layer = ep_bytes_layer / bw_ep + 4 * (ep - 1) * LAT_IB;
    }
    /* The head on the last stage (and its logits). */
    double head_flops = 3 * 2 * tok * m.V * m.h / t;
    double t_head = head_flops / (peak_gemm * eff_gemm) * KERNEL_OVERHEAD;

    int64_t Lmax = 0, Llast = 0, first = 0, cnt = 0;
    for (int64_t st = 0; st < (int64_t)p; st++) {
        llmt__plan_stage_span(s->model.layers, (int64_t)p, 1, st, 0, &first, &cnt);
        if (v > 1)
            cnt = s->model.layers / (int64_t)p;
        if (cnt > Lmax)
            Lmax = cnt;
        if (st == (int64_t)p - 1)
            Llast = cnt;
    }
    double per_layer = t_layer + tp_exposed + cp_exposed + ep_layer;
    double t_stage = fmax((double)Lmax * per_layer, (double)Llast * per_layer + t_head);
    /* PP: send activations forward and gradients backward per boundary. */
    /* Each TP rank sends 1/t of the boundary activation and the receiving
     * node all-gathers it over NVLink (Megatron's scatter/gather, Narayanan
     * et al. 2021 sec. 4.1; with SP the activation is split anyway). */
    double pp_msg = tok * m.h * 2 / t;
    double pp_per_mb = p > 1 ? 2 * v * (pp_msg / bw_pp + lat_pp) : 0;
    double t_mb = t_stage + pp_per_mb;
    double bubble = p > 1 ? (p - 1) / (v * nmb + p - 1) : 0;
    double t_pipe = nmb * t_mb / (1 - bubble);

    /* ---- parameters on one GPU (the heaviest stage) */
    double dense_layer = (m.P_attn + (m.E > 0 ? 0 : m.P_mlp_dense)) / t + m.P_norm +
                         (m.E > 0 ? m.h * m.E : 0);
    double expert_layer = m.E > 0 ? m.E * m.P_expert / (ep * t) : 0;
    double emb = m.V * m.h / t + (m.llama ? 0 : m.S * m.h);
    double head = (s->model.tied_embeddings && p == 1) ? 0 : m.V * m.h / t;
    double pbytes = s->precision.param == LLMT_SPEC_PREC_FP32 ? 4 : 2;
    double master = s->precision.param == LLMT_SPEC_PREC_FP32
                        ? 0 : (s->precision.master == LLMT_SPEC_PREC_FP32 ? 4 : 2);
    double opt_b = master + (s->optimizer.type == LLMT_SPEC_OPT_SGD ? 4 : 8);
    double De = D / ep; /* data-parallel degree of expert weights */
    double best_total = -1;
    for (int which = 0; which < 3; which++) {
        /* 0: first stage, 1: last stage, 2: a middle stage with Lmax */
        if (which > 0 && p == 1)
            break;
        if (which == 2 && p < 3)
            break;
        int64_t st = which == 0 ? 0 : which == 1 ? (int64_t)p - 1 : 1;
        llmt__plan_stage_span(s->model.layers, (int64_t)p, 1, st, 0, &first, &cnt);
        if (v > 1)
            cnt = s->model.layers / (int64_t)p;
        double Ls = (double)cnt;
        double pd = Ls * dense_layer + (st == 0 ? emb : 0) +
                    (st == (int64_t)p - 1 ? head + m.h : 0);
        double pe = Ls * expert_layer;
        double w = pbytes * (zero >= 3 ? pd / D + pe / De : pd + pe);
        double g = pbytes * (zero >= 2 ? pd / D + pe / De : pd + pe);
        double o = opt_b * (zero >= 1 ? pd / D + pe / De : pd + pe);
        /* activations in flight: 1F1B keeps p - stage micro-batches (at most
         * m); interleaving adds (p-1)/(p*v) (Narayanan et al. 2021). */
        double inflight = fmin(nmb, p - (double)st);
        if (v > 1) /* (at most all m micro-batches: with m == p the
                      interleaved warm-up runs every forward first) */
            inflight = fmin(nmb, p * (1 + (p - 1) / (p * v)));
        double a_tok = act_bytes_per_token(&m, t, sp, rc);
        double act = Ls * inflight * tok * a_tok;
        if (rc == LLMT_SPEC_RECOMPUTE_FULL) /* one layer rebuilt at a time */
            act += tok * act_bytes_per_token(&m, t, sp, LLMT_SPEC_RECOMPUTE_SELECTIVE);
        if (st == (int64_t)p - 1)
            act += tok * m.V / t * 4; /* fp32 logits */
        double ovh = gpu ? MEM_OVERHEAD_GPU : MEM_OVERHEAD_CPU;
        double total = w + g + o + act + ovh;
        if (total > best_total) {
            best_total = total;
            e->params_per_gpu = pd + pe;
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

    /* ---- data parallel: gradients reduced in bf16 over dp (dense) and
     * dp/ep (experts); ZeRO-3 gathers weights every micro-batch. */
    double dense_b = pbytes * e->params_per_gpu - pbytes * (m.L / p) * expert_layer;
    double exp_b = pbytes * (m.L / p) * expert_layer;
    if (dense_b < 0)
        dense_b = 0;
    double t_dp = 0, dp_bytes = 0;
    if (zero >= 3) {
        t_dp = nmb * (2 * gather_s(dense_b, D, bw_dp, lat_dp) +
                      gather_s(dense_b, D, bw_dp, lat_dp) +
                      3 * gather_s(exp_b, De, bw_dp, lat_dp));
        dp_bytes = nmb * 3 * ((D - 1) / D * dense_b + (De > 1 ? (De - 1) / De * exp_b : 0));
    } else {
        t_dp = llmt__plan_allreduce_s(dense_b, D, bw_dp, lat_dp) +
               llmt__plan_allreduce_s(exp_b, De, bw_dp, lat_dp);
        dp_bytes = (D > 1 ? 2 * (D - 1) / D * dense_b : 0) +
                   (De > 1 ? 2 * (De - 1) / De * exp_b : 0);
    }
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

    double layers_here = (double)Lmax;
    e->comm_bytes_tp = tp_bytes_layer * layers_here * nmb;
    e->comm_bytes_cp = cp_bytes_layer * layers_here * nmb;
    e->comm_bytes_ep = ep_bytes_layer * layers_here * nmb;
    e->comm_bytes_pp = p > 1 ? 2 * v * pp_msg * nmb : 0;
    e->comm_bytes_dp = dp_bytes;
    e->time_tp_s = tp_exposed * layers_here * nmb;
    e->time_cp_s = cp_exposed * layers_here * nmb;
    e->time_ep_s = ep_layer * layers_here * nmb;
    e->time_pp_s = pp_per_mb * nmb;
    e->time_dp_s = dp_exposed;
    e->time_compute_s = nmb * fmax((double)Lmax * t_layer, (double)Llast * t_layer + t_head);
    e->bubble_fraction = bubble;
    e->time_bubble_s = t_pipe - nmb * t_mb;
    e->time_optimizer_s = t_opt;
    e->step_time_s = t_pipe + dp_exposed + t_opt;
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
