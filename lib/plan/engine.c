/* The planner's model of this library's own engine (lib/train): the
 * collectives one rank runs per step on its tensor parallel and data
 * parallel communicators, counted as llmt_comm_get_stats counts them
 * (lib/comm/stats.c: payload = the caller's send buffer, bus = nccl-tests'
 * ring factor), and the bytes the engine allocates on the rank. cost.c
 * models a step of any framework on a GPU cluster from the spec; this
 * file models exactly one engine, ours, so that a run can be checked
 * against its plan to the byte (test plan-vs-run). Each part names the
 * engine code it follows: when that code changes, the test fails until
 * this file follows it (doc/planner.md, "The engine's own numbers"). */
#include <math.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/pp_sched.h"

/* llmt_dp_opts_init's bucket_bytes (lib/train/dp.c), which llmt_job keeps */
#define DP_BUCKET_BYTES ((double)(4 << 20))
/* llmt_job pads the embedding rows to a multiple of 64 (lib/job/job.c) */
#define VOCAB_PAD 64

/* The trainer's own activation bytes beside the engine's: its generation
 * window, seq_len int32 tokens on the host (lib/train/trainer.c, gen_ctx),
 * which llmt_trainer_memory counts in activations whatever the layout, so
 * that a rank's reported activations are this plus the engine's buffers. */
static double trainer_window(const llmt_spec *s)
{
    return (double)s->model.seq_len * 4;
}

typedef struct acc {
    double calls, payload, bus;
} acc;

/* `times` calls of each collective on n ranks; count in elements of esz
 * bytes, as the engine passes it (stats.c's volume()). */
static void all_reduce(acc *a, double n, double count, double esz, double times)
{
    double b = count * esz;
    a->calls += times;
    a->payload += times * b;
    a->bus += times * 2 * (n - 1) / n * b;
}

static void all_gather(acc *a, double n, double count, double esz, double times)
{
    double b = count * esz; /* count: this rank's block */
    a->calls += times;
    a->payload += times * b;
    a->bus += times * (n - 1) * b;
}

static void reduce_scatter(acc *a, double n, double count, double esz, double times)
{
    double b = count * esz; /* count: each rank's result block */
    a->calls += times;
    a->payload += times * n * b;
    a->bus += times * (n - 1) * b;
}

/* One rank's view of the model under tensor parallelism t, with the
 * engine's split (lib/train/device.c, tp_shards): qkv's q heads and kv
 * heads (split when kv_heads >= t, else one whole kv head per rank), fc
 * and fc3 rows, proj and fcproj columns, the vocabulary rows of wte and an
 * untied head; norms, wpe and the biases of row split Linears whole. */
typedef struct eng {
    double t, D, L, C, nh, nkv, hd, F, Vp, T, B, A, es, al;
    double c, Tseq; /* context parallel degree; T is then Tseq / c rows */
    int llama, tied, kvrep, zero, full, selective, cpu, nccl, sp, cp_ag;
    /* fp8 GEMMs (precision.gemm fp8 on a bf16 backend; the fp32 CPU one
     * refuses them): nf8 scaled tensors, 3 per Linear slot of every layer
     * of the model (device.c: qkv, proj, fc, fc3, fcproj; a pipeline
     * stage keeps all of them) */
    int fp8;
    double nf8;
    double nh_l, nkv_l, Q_l, F_l, V_l;
    double unit[2 + 4096]; /* DP units: embeddings | layers | tail, elements */
    int U;
    /* mixture of experts (lib/train/moe_net.c, dp.c): E experts of width
     * Fe in every `every`-th layer from layer 0; moe[u]: unit u is such a
     * layer. Under expert parallelism ep > 1 its experts are not in its
     * unit: 3 units of xn = E/ep x Fe x C elements each per MoE layer
     * (this rank's rows of w1, w3, w2), nx of them, over the expert data
     * parallel group of X = D/ep ranks */
    double E, Fe, ep, X, xn;
    double Fs; /* the shared experts' hidden size, S x Fe (0: none) */
    int every, nx;
    char moe[2 + 4096];
    /* what this rank runs of the model: pipeline stage `stage` of pp
     * (holding the embedding when first, the head when last), Lh layers,
     * Mh of them MoE, rl (rm MoE) forwarded again by full recomputation,
     * sl attention cores again by selective recomputation; the whole
     * model without pipeline parallelism (engine_stage sets a stage's) */
    int64_t stage, pp;
    int first, last;
    double Lh, Mh, rl, rm, sl;
    int nxh; /* expert units held here (a stage's layers'); the others empty */
} eng;

static double aligned(const eng *g, double n)
{
    return ((double)(int64_t)((n + g->al - 1) / g->al)) * g->al;
}

static void shape(const llmt_spec *s, eng *g)
{
    memset(g, 0, sizeof *g);
    g->t = (double)s->parallelism.tp;
    g->D = (double)s->parallelism.dp;
    g->L = (double)s->model.layers;
    g->C = (double)s->model.hidden;
    g->nh = (double)s->model.heads;
    g->nkv = (double)s->model.kv_heads;
    g->hd = g->C / g->nh;
    g->F = (double)s->model.ffn;
    g->Vp = (double)((s->model.vocab + VOCAB_PAD - 1) / VOCAB_PAD * VOCAB_PAD);
    g->c = (double)s->parallelism.cp;
    g->Tseq = (double)s->model.seq_len;
    g->T = g->Tseq / g->c; /* the rows of a sequence the engine runs here */
    g->cp_ag = s->parallelism.cp_variant == LLMT_SPEC_CP_ALLGATHER;
    g->B = (double)s->batch.micro;
    g->A = (double)s->batch.grad_accum;
    g->llama = s->model.arch == LLMT_SPEC_ARCH_LLAMA;
    g->tied = s->model.tied_embeddings;
    g->zero = (int)s->parallelism.zero;
    g->full = s->parallelism.recompute == LLMT_SPEC_RECOMPUTE_FULL;
    g->selective = s->parallelism.recompute == LLMT_SPEC_RECOMPUTE_SELECTIVE;
    /* the trainer's backend: the fp32 CPU table (storage fp32, tensors
     * unaligned), or CUDA's and its host emulation's (bf16 storage, fp32
     * master, 8-element alignment); CUDA's data parallel groups are NCCL,
     * the others' host communicators */
    g->cpu = s->train.device == LLMT_SPEC_DEVICE_CPU;
    g->nccl = s->train.device == LLMT_SPEC_DEVICE_CUDA;
    g->es = g->cpu ? 4 : 2;
    g->al = g->cpu ? 1 : 8;
    g->kvrep = g->t > 1 && g->nkv < g->t;
    g->fp8 = s->precision.gemm == LLMT_SPEC_PREC_FP8 && !g->cpu;
    g->nf8 = g->fp8 ? 3 * 5 * g->L : 0;
    g->sp = g->t > 1 && s->parallelism.sequence_parallel;
    g->nh_l = g->nh / g->t;
    g->nkv_l = g->kvrep ? 1 : g->nkv / g->t;
    g->Q_l = (g->nh_l + 2 * g->nkv_l) * g->hd;
    g->F_l = g->F / g->t;
    g->V_l = g->Vp / g->t;
    /* the DP units (lib/train/dp.c): embeddings, each layer, final norm
     * and head; each tensor on the backend's alignment */
    double C = g->C, emb = aligned(g, g->V_l * C), layer, tail = aligned(g, C);
    if (g->llama) {
        layer = 2 * aligned(g, C) + aligned(g, g->Q_l * C) + aligned(g, C * C / g->t) +
                3 * aligned(g, g->F_l * C);
    } else {
        emb += aligned(g, g->Tseq * C); /* wpe: every position */
        layer = 4 * aligned(g, C) + aligned(g, g->Q_l * C) + aligned(g, g->Q_l) +
                aligned(g, C * C / g->t) + aligned(g, C) + 2 * aligned(g, g->F_l * C) +
                aligned(g, g->F_l) + aligned(g, C);
        tail += aligned(g, C);
    }
    if (!g->tied)
        tail += aligned(g, g->V_l * C);
    g->U = (int)g->L + 2;
    g->unit[0] = emb;
    g->E = (double)s->model.moe.experts;
    g->Fe = (double)s->model.moe.expert_ffn;
    g->Fs = g->E > 0 ? (double)s->model.moe.shared_experts * g->Fe : 0;
    g->every = s->model.moe.every > 0 ? (int)s->model.moe.every : 1;
    g->ep = (double)s->parallelism.ep;
    g->X = g->D / g->ep;
    g->xn = g->E / g->ep * g->Fe * C;
    for (int u = 1; u <= (int)g->L; u++) {
        g->moe[u] = g->E > 0 && (u - 1) % g->every == 0;
        g->unit[u] = layer;
        if (!g->moe[u])
            continue;
        /* the router [E, C] for the MLP; the experts (w1, w3 [E Fe, C],
         * w2 [E C, Fe]) in the unit, or units of their own under ep */
        g->unit[u] = layer - 3 * aligned(g, g->F_l * C) + aligned(g, g->E * C);
        if (g->Fs > 0) /* shared experts: w1, w3, w2 of S*Fe, dense-like, in the unit */
            g->unit[u] += 3 * aligned(g, g->Fs * C);
        if (g->ep > 1)
            g->nx += 3;
        else
            g->unit[u] += 3 * aligned(g, g->E * g->Fe * C);
    }
    g->unit[g->U - 1] = tail;
    double M = 0;
    for (int u = 1; u <= (int)g->L; u++)
        M += g->moe[u];
    int again = g->full && g->L > 1;
    g->stage = 0;
    g->pp = 1;
    g->first = g->last = 1;
    g->Lh = g->L;
    g->Mh = M;
    g->rl = again ? g->L : 0;
    g->rm = again ? M : 0;
    g->sl = g->selective ? g->L - 1 : 0;
    g->nxh = g->nx;
}

/* The MoE layers. */
static double moe_layers(const eng *g)
{
    double M = 0;
    for (int u = 1; u <= (int)g->L; u++)
        M += g->moe[u];
    return M;
}

/* The collectives of the ranks sharing a micro-batch's tokens (the SP-TP
 * group, the CP group: lib/train/moe_group.c) on n ranks, per MoE layer:
 * the router statistics' fp32 sum of 2E + 2 in every forward (again in a
 * fully recomputed one; fwd: the MoE layer forwards of a micro-batch),
 * the step's tallies' int64 sum of E + 1 (tallies: the model's MoE
 * layers, a pipeline stage's placeholders of other stages' included:
 * moe_net.c sums every layer's). */
static void moe_token_sums(const eng *g, acc *a, double n, double fwd, double tallies)
{
    all_reduce(a, n, 2 * g->E + 2, 4, fwd * g->A);
    all_reduce(a, n, g->E + 1, 8, tallies);
}

static void moe_token_group(const eng *g, acc *a, double n)
{
    moe_token_sums(g, a, n, g->Mh + g->rm, moe_layers(g));
}

/* LayerNorm/RMSNorm weights and biases: per layer held and the final one
 * (the last stage's). */
static double norm_tensors(const eng *g)
{
    return (g->llama ? 2 : 4) * g->Lh + (g->last ? (g->llama ? 1 : 2) : 0);
}

/* The tensor parallel group's collectives of one step (device.c, tp.c)
 * on a rank holding Ls layers (Ms of them MoE; rl of them, rm MoE,
 * forwarded again by full recomputation), the embedding (first) and the
 * head (last): per micro-batch of N tokens, in the storage type: the
 * embedding's sum, the row split Linears' output sums (proj, fcproj: 2
 * per layer, again for a recomputed forward), the head's and the layers'
 * input gradient sums of the column split Linears (qkv, fc with fc3
 * sharing fc's: 1 + 2 per layer); in fp32: the loss's row max (N) and
 * sums (2N); per step, in fp32: the shared kv heads' gradients (kv_heads
 * < tp: all kv heads' k and v rows per layer), the gradient norm (1
 * float). */
static void tp_span(const eng *g, acc *a, double Ls, double Ms, double rl, double rm, int first,
                    int last)
{
    double t = g->t, N = g->B * g->T, x = N * g->C;
    if (t <= 1)
        return;
    double again = 2 * rl; /* recomputed forwards */
    /* a MoE layer has no split MLP (experts whole on every TP rank): its
     * fc's and fcproj's collectives are not run (one of each pair again
     * in a recomputed forward) */
    if (g->sp) {
        /* sequence parallel: each all-reduce of activations becomes a
         * reduce-scatter (embedding, proj, fcproj forward; the column
         * split Linears' input gradients) or an all-gather (the column
         * split Linears' inputs, again in the backward for their weight
         * gradients; the row split Linears' and the embedding's output
         * gradients) of N/t rows per rank */
        all_gather(a, t, x / t, g->es,
                   g->A * (6 * Ls + first + 2 * last + again - 3 * Ms - rm));
        reduce_scatter(a, t, x / t, g->es,
                       g->A * (4 * Ls + first + last + again - 2 * Ms - rm));
    } else {
        all_reduce(a, t, x, g->es, g->A * (first + 4 * Ls + again + last - 2 * Ms - rm));
    }
    if (last) {
        all_reduce(a, t, N, 4, g->A);
        all_reduce(a, t, 2 * N, 4, g->A);
    }
    if (g->kvrep) {
        all_reduce(a, t, 2 * g->nkv * g->hd * g->C, 4, Ls);
        if (!g->llama) /* the qkv bias's kv part */
            all_reduce(a, t, 2 * g->nkv * g->hd, 4, Ls);
    }
    if (g->sp) /* the norms' weight gradients, partial per rank */
        all_reduce(a, t, ((g->llama ? 2 : 4) * Ls + (last ? (g->llama ? 1 : 2) : 0)) * g->C, 4,
                   1);
    if (g->sp && moe_layers(g) > 0) {
        /* each rank routed its own rows: the router statistics and
         * tallies over the group, and (device.c, sp_moe_reduce) the MoE
         * tensors' gradients, in place: shared experts and router through
         * the experts' end (under ep the engine holds this EP rank's rows
         * of each expert tensor only, xn elements) */
        moe_token_sums(g, a, t, Ms + rm, moe_layers(g));
        double C = g->C, head = (g->Fs > 0 ? 3 * aligned(g, g->Fs * C) : 0);
        all_reduce(a, t, head + aligned(g, g->E * C) + 2 * aligned(g, g->xn) + g->xn, 4, Ms);
    }
    all_reduce(a, t, 1, 4, 1);
    if (g->fp8) /* the step's amaxes: their maximum over the group (fp8_step) */
        all_reduce(a, t, g->nf8, 4, 1);
}

/* The whole model's (tp x cp x dp). */
static void tp_step(const eng *g, acc *a)
{
    tp_span(g, a, g->Lh, g->Mh, g->rl, g->rm, g->first, g->last);
}

/* `times` ring steps (cp.c's ring()): a send of `bytes` and a receive,
 * two calls; the receive moves nothing of this rank's. */
static void ring(acc *a, double bytes, double times)
{
    a->calls += 2 * times;
    a->payload += times * bytes;
    a->bus += times * bytes;
}

/* The context parallel group's collectives of one step (lib/train/cp.c,
 * device.c): per micro-batch and layer, the attention forward's exchange
 * of this rank's k and v rows (n = B x T/cp x 2 kv heads x hd elements,
 * storage type) -- ring: cp - 1 steps; all-gather: one -- again for each
 * recomputed attention (full: every layer of a chunk of more than one;
 * selective: all but a chunk's last); its backward: ring: cp - 1 steps of the block and of its
 * fp32 dK/dV, then one more of dK/dV home; all-gather: the gather again
 * and a reduce-scatter of the fp32 dK/dV. Per step, fp32: the gradient
 * sum (all-reduce of the rank's P elements) and the loss sum (an
 * all-gather of one double, as int64). */
static void cp_step(const eng *g, acc *a)
{
    double c = g->c, L = g->Lh;
    if (c <= 1)
        return;
    double n = g->B * g->T * 2 * g->nkv_l * g->hd;
    double fwd = g->A * (L + g->rl + g->sl), bwd = g->A * L;
    if (g->cp_ag) {
        all_gather(a, c, n, g->es, fwd + bwd);
        reduce_scatter(a, c, n, 4, bwd);
    } else {
        ring(a, n * g->es, (c - 1) * (fwd + bwd));
        ring(a, n * 4, c * bwd);
    }
    double P = 0;
    for (int u = 0; u < g->U; u++)
        P += g->unit[u];
    all_reduce(a, c, P, 4, 1);
    all_gather(a, c, 1, 8, 1);
    if (g->E > 0) /* MoE: each CP rank routes its rows */
        moe_token_group(g, a, c);
    if (g->fp8) /* the amaxes of each rank's rows: their maximum */
        all_reduce(a, c, g->nf8, 4, 1);
}

/* ceil(n / D): a unit's chunk (every rank's block of its collectives) */
static double chunk(const eng *g, double n)
{
    return (double)(int64_t)((n + g->D - 1) / g->D);
}

/* An expert unit's chunk over the expert data parallel group. */
static double xchunk(const eng *g)
{
    return (double)(int64_t)((g->xn + g->X - 1) / g->X);
}

/* ZeRO 1/2's update gather of a unit of n elements, chunk c on `ranks`
 * ranks: in place when the chunks tile it, else in pieces of `piece`
 * through the stage. */
static void gather_update(acc *a, double ranks, double n, double c, double piece)
{
    if (c * ranks == n) {
        all_gather(a, ranks, c, 4, 1);
        return;
    }
    double whole = (double)(int64_t)(c / piece), rest = c - whole * piece;
    all_gather(a, ranks, piece, 4, whole);
    if (rest > 0)
        all_gather(a, ranks, rest, 4, 1);
}

/* The data parallel group's collectives of one step (dp.c), all fp32:
 * the target count (int64 sum) and the loss sum (int64 gather);
 * gradients reduced on the last micro-batch: ZeRO 0/1 all-reduce buckets
 * of whole units (about bucket_bytes, from the tail), ZeRO 2/3 a
 * reduce-scatter per unit of ceil(n/D) per rank (padded), and the norm's
 * partial sums gathered (int64); ZeRO 1/2's update gathers every unit's
 * shares (a padded unit in pieces of about bucket_bytes through the
 * stage); ZeRO-3 gathers each layer before its forward and its backward
 * in every micro-batch, the embeddings and tail once a step. */
static void dp_step(const eng *g, acc *a)
{
    double D = g->D, X = g->X, xc = xchunk(g);
    if (D <= 1)
        return;
    all_reduce(a, D, 1, 8, 1);
    all_gather(a, D, 1, 8, 1);
    if (g->fp8) /* the amaxes' maximum over the replicas (dp.c, llmt__dp_max) */
        all_reduce(a, D, g->nf8, 4, 1);
    /* a pipeline stage's step agreement over its replicas: one int64 a
     * rank (lib/train/pp_agree.c), on host groups only (not NCCL) */
    if (g->pp > 1 && !g->nccl)
        all_gather(a, D, 1, 8, 1);
    double nx0 = g->nx - g->nxh; /* empty expert units (other stages') */
    if (g->zero < 2) {
        double acc_b = 0, elems = 0;
        int pend = 0; /* units in the bucket, empty ones too */
        for (int u = g->U - 1; u >= 0; u--) {
            /* a layer with its experts apart ends its bucket (dp.c) */
            if (g->nx && g->moe[u] && pend > 0) {
                all_reduce(a, D, elems, 4, 1);
                acc_b = elems = 0;
                pend = 0;
            }
            acc_b += g->unit[u] * 4;
            elems += g->unit[u];
            pend++;
            if (acc_b >= DP_BUCKET_BYTES || u == 0) {
                all_reduce(a, D, elems, 4, 1);
                acc_b = elems = 0;
                pend = 0;
            }
        }
        all_reduce(a, X, g->xn, 4, g->nxh);
        all_reduce(a, X, 0, 4, nx0);
        if (g->nx) /* the norm: one EP group's expert squares */
            all_gather(a, D, 1, 8, 1);
    } else {
        for (int u = 0; u < g->U; u++)
            reduce_scatter(a, D, chunk(g, g->unit[u]), 4, 1);
        reduce_scatter(a, X, xc, 4, g->nxh);
        reduce_scatter(a, X, 0, 4, nx0);
        all_gather(a, D, 1, 8, 1);
    }
    if (g->zero == 1 || g->zero == 2) {
        double most = 0; /* the largest padded unit's chunk x its ranks */
        for (int u = 0; u < g->U; u++)
            if (chunk(g, g->unit[u]) * D != g->unit[u] && chunk(g, g->unit[u]) * D > most)
                most = chunk(g, g->unit[u]) * D;
        if (g->nxh && xc * X != g->xn && xc * X > most)
            most = xc * X;
        double piece = (double)(int64_t)(DP_BUCKET_BYTES / 4 / D);
        if (piece > (double)(int64_t)(most / D))
            piece = (double)(int64_t)(most / D);
        if (piece < 1)
            piece = 1;
        for (int u = 0; u < g->U; u++)
            gather_update(a, D, g->unit[u], chunk(g, g->unit[u]), piece);
        for (int k = 0; k < g->nx; k++)
            gather_update(a, X, k < g->nxh ? g->xn : 0, k < g->nxh ? xc : 0, piece);
    } else if (g->zero == 3) {
        for (int u = 1; u < g->U - 1; u++)
            all_gather(a, D, chunk(g, g->unit[u]), 4, 2 * g->A);
        all_gather(a, D, chunk(g, g->unit[0]), 4, 1);
        all_gather(a, D, chunk(g, g->unit[g->U - 1]), 4, 1);
        all_gather(a, X, xc, 4, 2 * g->A * g->nxh);
        all_gather(a, X, 0, 4, 2 * g->A * nx0);
    }
    /* the MoE layers' step tallies (moe_net.c): kept counts and drops
     * (int64), aux and z (fp32) summed over the group */
    for (int u = 1; u <= (int)g->L; u++)
        if (g->moe[u]) {
            all_reduce(a, D, g->E + 1, 8, 1);
            all_reduce(a, D, 2, 4, 1);
        }
}

/* A MoE layer's experts per token (model.moe.top_k, its default where 0). */
static double moe_k(const llmt_spec *s, const eng *g)
{
    return s->model.moe.top_k > 0 ? (double)s->model.moe.top_k : g->E > 1 ? 2 : 1;
}

/* An expert's capacity for a call of N tokens (moe.c, llmt__moe_capacity):
 * the block of each expert in the expert parallel exchange. */
static double moe_cap(const llmt_spec *s, const eng *g, double N)
{
    return llmt__plan_moe_capacity(s, N, moe_k(s, g), g->E);
}

/* The most rows an expert parallel owner receives for its E/ep experts in
 * a call of N tokens (moe_dev.c, llmt__moe_dctx_owner_rows): a block of
 * the capacity from each of ep sources for each (E x capacity), and no
 * more than the N x top_k a source routes (ep x N x top_k), whichever is
 * less. */
static double moe_owner(const llmt_spec *s, const eng *g, double N)
{
    return fmin(g->E * moe_cap(s, g, N), g->ep * N * moe_k(s, g));
}

/* What a MoE layer's forward keeps for its backward, in bytes, for a
 * call of N tokens: the engine's count of the same (lib/train/moe_net.c,
 * llmt__moe_net_saved_bytes; the routing, the packed rows and the experts'
 * hidden units, the shared experts', under ep the owner's rows). */
static double moe_saved(const llmt_spec *s, const eng *g, double N)
{
    if (g->E <= 0)
        return 0;
    double E = g->E, F = g->Fe, C = g->C;
    double R = N * moe_k(s, g);
    /* the routing in 4-byte words, the rows in the storage type (fp32 on
     * the CPU; moe_dev.c and moe_dev_ep.c keep them in the backend's type
     * elsewhere) */
    double f = 4 * (N * E + N + 4 * R) + g->es * (2 * R * C + 3 * R * F + 3 * N * g->Fs);
    if (g->ep > 1) /* the owner's rows */
        f += g->es * moe_owner(s, g, N) * (C + 3 * F);
    return f;
}

/* The backward scratch of the MoE layers run through the op table
 * (lib/train/moe_dev.c, moe_dev_ep.c: every backend, the fp32 CPU
 * included), once per engine whether its stage holds MoE layers or not:
 * the packed rows' dye, dxe and dact, dh1, dh3, the shared experts'
 * three, the router logits' gradient in the storage type (bf16 only: fp32
 * storage uses the fp32 gradient itself); under ep the exchange's send
 * and receive buffers and the owner's outputs and their gradients. */
static double moe_scratch(const llmt_spec *s, const eng *g, double N)
{
    if (g->E <= 0)
        return 0;
    double E = g->E, F = g->Fe, C = g->C;
    double R = N * moe_k(s, g);
    double f = 2 * R * C + 3 * R * F + 3 * N * g->Fs + (g->cpu ? 0 : N * E);
    if (g->ep > 1) /* the exchange's E blocks of the capacity */
        f += 2 * E * moe_cap(s, g, N) * C + moe_owner(s, g, N) * (3 * C + 3 * F);
    return g->es * f;
}

/* What fp8 GEMMs add to the engine's memory, bytes, all of it counted as
 * activations (device.c's fp8 block, moe_dev.c's f8_room), once per
 * engine whatever its layout; N: a MoE layer's rows here (Nr under
 * sequence parallelism).
 *   - the recipe on the device: nf8 scales, nf8 inverse scales 16 bytes
 *     apart, and an amax row of nf8 per micro-batch plus a spare one (the
 *     device groups' scratch); the host's copies are not the engine's;
 *   - one Linear's codes at a time (1 byte each): its input's (B x T rows
 *     of the widest block Linear input here), its weight's (the largest
 *     weight) and its output gradient's, as is and transposed (B x T rows
 *     of the widest output); nothing of the bf16 buffers is saved;
 *   - MoE (model.moe; widths multiples of 16): the routed experts' rows
 *     padded with zero rows to a multiple of 16 per expert: room for
 *     every packed row of a call (N x top_k; under ep the owner's rows of
 *     its E/ep experts: E x capacity, or ep x N x top_k if less) plus 15
 *     for each expert the rank
 *     multiplies (E; under ep its E/ep), max(hidden, expert_ffn) wide: the
 *     padded input and output in the storage type and three code buffers;
 *     and the codes of one projection of those experts (E or E/ep x
 *     expert_ffn x hidden bytes). */
static double fp8_bytes(const llmt_spec *s, const eng *g, double N)
{
    if (!g->fp8)
        return 0;
    double nf = g->nf8, C = g->C, Ca = g->nh_l * g->hd, Nt = g->B * g->T;
    double in = fmax(C, fmax(Ca, g->F_l)), out = fmax(g->Q_l, fmax(C, g->F_l));
    double wn = C * fmax(g->Q_l, fmax(Ca, g->F_l));
    double f = nf * 4 + nf * 4 * 4 + (g->A + 1) * nf * 4 + Nt * (in + 2 * out) + wn;
    /* the experts stay bf16 unless both widths are multiples of 16
     * (device.c's moe_fp8; llmt_job refuses such a spec) */
    if (g->E <= 0 || fmod(C, 16) != 0 || fmod(g->Fe, 16) != 0)
        return f;
    double E = g->E, El = g->ep > 1 ? E / g->ep : E;
    double rows = (g->ep > 1 ? moe_owner(s, g, N) : N * moe_k(s, g)) + 15 * El;
    return f + rows * fmax(C, g->Fe) * (2 * g->es + 3) + El * g->Fe * C;
}

/* The MoE layers among layers [f, f + n). */
static double moe_in(const eng *g, int64_t f, int64_t n)
{
    double M = 0;
    for (int64_t l = f; l < f + n && l < (int64_t)g->L; l++)
        M += g->moe[1 + l];
    return M;
}

/* A dense MLP's saved outputs per stored layer (fc and fc3: the SwiGLU
 * output is made again in the backward; GPT-2: fc's pre-activation and
 * GELU output) and its backward's scratch (dfch, dfch3, dfchg; GPT-2:
 * dfch), elements of the storage type; a MoE layer has neither
 * (device.c, set_dense). */
static double mlp_saved(const eng *g)
{
    return g->B * g->T * g->F_l * 2;
}

static double mlp_scratch(const eng *g)
{
    return g->B * g->T * g->F_l * (g->llama ? 3 : 1);
}

/* The attention backward's dq, dk, dv buffer, bytes: none where a dense
 * layer's MLP scratch (dfch, N x F) holds it (Q <= F; device.c). */
static double dqkv(const eng *g, int dense)
{
    return dense && g->Q_l <= g->F_l ? 0 : g->B * g->T * g->Q_l * g->es;
}

/* Activations and backward scratch the engine plans for a micro-batch
 * (device.c, llmt__devtrain_create_tp: the buffers allocated as
 * activations): the residual stream, per stored layer res2 (the second
 * norm's input), the norms' statistics, qkv, the attention output and state (probabilities on
 * the CPU, log-sum-exp elsewhere; one for all layers under selective
 * recomputation), a dense layer's MLP hidden (the one set of full
 * recomputation: if any layer is dense); the final norm's statistics,
 * the rank's logits, the backward's scratch (the MLP's if a layer is
 * dense, holding dq, dk, dv too where they fit; the one norm output,
 * nrmx, that every norm writes and the backward makes again), and the
 * split loss's row buffers. */
static double activations(const eng *g)
{
    double N = g->B * g->T, C = g->C, bf = g->es, L = g->L;
    double Nr = g->sp ? N / g->t : N; /* rows of the residual stream here */
    double stored = g->full ? 1 : L, dense = L - moe_layers(g);
    double dstored = g->full ? (dense > 0) : dense;
    double Ca = g->nh_l * g->hd, Q = g->Q_l;
    double state = g->cpu ? g->B * g->nh_l * g->T * g->T : g->B * g->nh_l * g->T;
    double core = N * Ca * bf + state * 4;
    double layer = Nr * C * bf + 4 * Nr * 4 + N * Q * bf;
    double x = (L + 1) * Nr * C * bf + stored * layer + (g->selective ? 1 : stored) * core;
    x += dstored * mlp_saved(g) * bf;
    x += 2 * Nr * 4 + N * g->V_l * bf; /* final norm's statistics, logits */
    x += (2 * Nr + N) * C * bf + dqkv(g, dense > 0) + (dense > 0 ? mlp_scratch(g) * bf : 0) + 4;
    if (g->sp) /* the gathered rows of a column split Linear's input */
        x += N * C * bf;
    if (g->t > 1)
        x += 3 * N * 4;
    return x;
}

/* A pipeline stage (device.c, llmt__devtrain_create_stage, pp.c): one
 * activation set per micro-batch chunk the schedule keeps in flight, each
 * holding the residual stream and the layers of the stage's longest chunk
 * (the other chunks alias them) and, on the last stage, the final norm's
 * statistics and the logits (under sequence parallelism the residual stream, norms
 * and MoE layers of this rank's rows); the backward's scratch once; the
 * received output gradient's buffer on all but the last stage (all under
 * interleaving); and the trainer's window. */
double llmt__plan_engine_stage_act(const llmt_spec *s, int64_t stage)
{
    eng g;
    shape(s, &g);
    int64_t p = s->parallelism.pp, v = s->parallelism.virtual_stages, clen = 0;
    double M = 0, L = 0; /* the stage's MoE layers and layers (of all its chunks) */
    for (int64_t c = 0; c < v; c++) {
        int64_t f, n;
        llmt__plan_spec_span(s, stage, c, &f, &n);
        clen = n > clen ? n : clen;
        M += moe_in(&g, f, n);
        L += (double)n;
    }
    /* a set's layer j holds a dense MLP's outputs when a layer it stands
     * for is dense: layer j of any chunk (device.c, set_dense) */
    double dslots = 0;
    for (int64_t j = 0; j < clen; j++) {
        int dense = 0;
        for (int64_t c = 0; c < v && !dense; c++) {
            int64_t f, n;
            llmt__plan_spec_span(s, stage, c, &f, &n);
            dense = j < n && moe_in(&g, f + j, 1) == 0;
        }
        dslots += dense;
    }
    double N = g.B * g.T, C = g.C, bf = g.es, Lc = (double)clen;
    double Nr = g.sp ? N / g.t : N; /* rows of the residual stream here */
    double stored = g.full ? 1 : Lc, dstored = g.full ? (L > M) : dslots;
    double Ca = g.nh_l * g.hd, Q = g.Q_l;
    double state = g.cpu ? g.B * g.nh_l * g.T * g.T : g.B * g.nh_l * g.T;
    double core = N * Ca * bf + state * 4;
    double layer = Nr * C * bf + 4 * Nr * 4 + N * Q * bf;
    /* the residual stream's buffers are the stage's boundary tensors: each
     * carries the clock stamp's tail after it (pp_sched.h) */
    double tail = LLMT__STAGE_TAIL;
    double set = (Lc + 1) * (Nr * C * bf + tail) + stored * layer +
                 (g.selective ? 1 : stored) * core + dstored * mlp_saved(&g) * bf;
    if (stage == p - 1)
        set += 2 * Nr * 4 + N * g.V_l * bf; /* final norm's statistics, logits */
    double sets =
        llmt__plan_pp_inflight(llmt__plan_pp_schedule(s), p, v, s->batch.grad_accum, stage);
    double x = sets * set;
    /* each MoE layer keeps one routing state per set (moe_net.c: a set
     * per micro-batch in flight, for every layer of every chunk, as a
     * layer is in one chunk), of this rank's rows */
    x += sets * M * moe_saved(s, &g, Nr) + moe_scratch(s, &g, Nr) + fp8_bytes(s, &g, Nr);
    /* the backward's scratch, as activations() counts it */
    x +=
        (2 * Nr + N) * C * bf + tail + dqkv(&g, L > M) + (L > M ? mlp_scratch(&g) * bf : 0) + 4;
    if (g.sp) /* the gathered rows of a column split Linear's input */
        x += N * C * bf;
    if (g.t > 1) /* the split loss's row buffers */
        x += 3 * N * 4;
    if (stage < p - 1 || v > 1) /* the received output gradient (pp.c) */
        x += Nr * C * bf + tail;
    return x + trainer_window(s);
}

/* The engine's numbers for the rank gp describes: the whole model, or a
 * pipeline stage (stage_shape). */
static void engine_fill(const llmt_spec *s, const eng *gp, llmt_plan_estimate *e)
{
    const eng g = *gp;
    e->engine_modeled = 1;
    e->engine_store_bytes = (int32_t)g.es;
    acc tp = {0, 0, 0}, dp = {0, 0, 0}, cp = {0, 0, 0};
    tp_step(&g, &tp);
    dp_step(&g, &dp);
    cp_step(&g, &cp);
    e->engine_cp_calls = cp.calls;
    e->engine_cp_payload_bytes = cp.payload;
    e->engine_cp_bus_bytes = cp.bus;
    e->engine_tp_calls = tp.calls;
    e->engine_tp_payload_bytes = tp.payload;
    e->engine_tp_bus_bytes = tp.bus;
    e->engine_dp_calls = dp.calls;
    e->engine_dp_payload_bytes = dp.payload;
    e->engine_dp_bus_bytes = dp.bus;
    double P = 0, share = 0;
    for (int u = 0; u < g.U; u++) {
        P += g.unit[u];
        share += g.D > 1 ? chunk(&g, g.unit[u]) : g.unit[u]; /* DP rank 0's */
    }
    /* expert parallelism: the buffers hold only this rank's experts
     * (device.c's ep_shards), the optimizer's shares split over the expert
     * data parallel group (dp.c) */
    P += g.nxh * g.xn;
    share += g.nxh * xchunk(&g);
    /* fp32 master and gradients, a bf16 compute copy on bf16 backends;
     * AdamW's m and v whole, or (ZeRO >= 1) the rank's shares only. ZeRO
     * 2 and 3 keep full gradient and parameter buffers here (the
     * non-shares zeroed or released, not freed). */
    e->engine_mem_params = P * 4 + (g.es < 4 ? P * g.es : 0);
    /* shared kv heads (kv_heads < tp): the fp32 buffer their gradients
     * are summed in, every kv head's k and v rows and biases; sequence
     * parallel: the norms' gradients packed for their sum */
    e->engine_mem_grads = P * 4 + (g.kvrep ? 2 * g.nkv * g.hd * (g.C + 1) * 4 : 0) +
                          (g.sp ? norm_tensors(&g) * g.C * 4 : 0);
    e->engine_mem_optimizer = 8 * (g.zero >= 1 && g.D > 1 ? share : P);
    e->engine_mem_activations =
        g.pp > 1 ? llmt__plan_engine_stage_act(s, g.stage)
                 : trainer_window(s) + activations(&g) +
                       moe_in(&g, 0, (int64_t)g.L) *
                           moe_saved(s, &g, g.sp ? g.B * g.T / g.t : g.B * g.T) +
                       moe_scratch(s, &g, g.sp ? g.B * g.T / g.t : g.B * g.T) +
                       fp8_bytes(s, &g, g.sp ? g.B * g.T / g.t : g.B * g.T);
}

/* Pipeline stage `stage` (device.c's stage_params, dp.c's units): the
 * layers of its chunks, the embeddings on the first stage (and a tied
 * wte's copy on the last, which dp.c's embedding unit holds there: its
 * gradient is summed over the first and last stage's own group, not the
 * TP or DP one), the final norm and head on the last; the other units
 * empty, each still a collective of no bytes in dp.c's loops. */
static void stage_shape(const llmt_spec *s, int64_t stage, eng *g)
{
    shape(s, g);
    int64_t p = s->parallelism.pp, v = s->parallelism.virtual_stages;
    g->stage = stage;
    g->pp = p;
    g->first = stage == 0;
    g->last = stage == p - 1;
    g->Lh = g->Mh = g->rl = g->rm = g->sl = 0;
    char held[2 + 4096] = {0};
    for (int64_t c = 0; c < (v > 1 ? v : 1); c++) {
        int64_t f, n;
        llmt__plan_spec_span(s, stage, c, &f, &n);
        for (int64_t l = f; l < f + n && l < (int64_t)g->L; l++)
            held[1 + l] = 1;
        double M = moe_in(g, f, n);
        g->Lh += (double)n;
        g->Mh += M;
        if (g->full && n > 1) {
            g->rl += (double)n;
            g->rm += M;
        }
        if (g->selective && n > 0)
            g->sl += (double)(n - 1);
    }
    g->nxh = 0;
    for (int u = 1; u <= (int)g->L; u++) {
        if (!held[u])
            g->unit[u] = 0;
        else if (g->moe[u] && g->ep > 1)
            g->nxh += 3;
    }
    if (!g->first)
        g->unit[0] = g->last && g->tied ? aligned(g, g->V_l * g->C) : 0;
    if (!g->last)
        g->unit[g->U - 1] = 0;
}

void llmt__plan_engine_stage(const llmt_spec *s, int64_t stage, llmt_plan_estimate *e)
{
    eng g;
    stage_shape(s, stage, &g);
    engine_fill(s, &g, e);
}

/* A pipeline stage's tensor parallel collectives of one step (device.c's
 * stage path, pp.c): tp_span over the layers of its chunks (a chunk of
 * more than one layer forwarded again layer by layer under full
 * recomputation), the embedding on the first stage, the head and the
 * loss on the last. */
void llmt__plan_engine_stage_tp(const llmt_spec *s, int64_t stage, double out[3])
{
    eng g;
    stage_shape(s, stage, &g);
    acc a = {0, 0, 0};
    tp_step(&g, &a);
    out[0] = a.calls;
    out[1] = a.payload;
    out[2] = a.bus;
}

void llmt__plan_engine(const llmt_spec *s, llmt_plan_estimate *e)
{
    e->engine_modeled = 0;
    /* what the engine runs today: tp (with or without sequence
     * parallelism) x cp x pp x dp with ZeRO 0-3, dense and MoE models (ep
     * inside dp) */
    int moe = s->model.moe.experts > 0;
    int64_t p = s->parallelism.pp;
    if (s->model.layers > 4096 || (!moe && s->parallelism.ep > 1))
        return;
    if (p <= 1) {
        eng g;
        shape(s, &g);
        engine_fill(s, &g, e);
        return;
    }
    /* a pipeline's ranks differ by stage: the fields are those of the
     * stage that holds the most (llmt__plan_engine_stage gives any) */
    llmt__plan_engine_stage(s, llmt__plan_engine_top_stage(s), e);
}

int64_t llmt__plan_engine_top_stage(const llmt_spec *s)
{
    int64_t best = 0;
    double most = -1;
    for (int64_t st = 0; st < s->parallelism.pp; st++) {
        llmt_plan_estimate x;
        memset(&x, 0, sizeof x);
        llmt__plan_engine_stage(s, st, &x);
        double m = x.engine_mem_params + x.engine_mem_grads + x.engine_mem_optimizer +
                   x.engine_mem_activations;
        if (m > most) {
            most = m;
            best = st;
        }
    }
    return best;
}
