/* Job spec: parse, validate (every error at once, each naming its JSON path
 * and rule), fill defaults, answer typed queries.
 *
 * One table (keys[]) drives everything: which keys exist, their type, range,
 * where they live in struct llmt_spec, the suggestions for unknown keys, the
 * getters and llmt_spec_to_json. Cross-field rules run after the walk, once
 * the defaults that depend on other keys are known. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "spec/spec.h"

enum ktype {
    KT_OBJ,
    KT_INT,
    KT_NUM,
    KT_BOOL,
    KT_STR,
    KT_ENUM,
    KT_TIERS,
    KT_INTERVAL,
    KT_STAGES
};

#define F_POS 1u   /* must be > min (exclusive) */
#define F_TIER 2u  /* offset is inside llmt_spec_tier */

typedef struct spec_key {
    const char *path;
    enum ktype type;
    size_t off;
    const char *values; /* enum: "a|b|c" */
    double min, max;
    unsigned flags;
    const char *doc;
} spec_key;

#define OFF(f) offsetof(struct llmt_spec, f)
#define TOFF(f) offsetof(llmt_spec_tier, f)
#define BIG 9007199254740992.0 /* 2^53: integers stay exact */
#define O(p, d) {p, KT_OBJ, 0, NULL, 0, 0, 0, d}
#define I(p, f, lo, hi, d) {p, KT_INT, OFF(f), NULL, lo, hi, 0, d}
#define N(p, f, lo, hi, fl, d) {p, KT_NUM, OFF(f), NULL, lo, hi, fl, d}
#define B(p, f, d) {p, KT_BOOL, OFF(f), NULL, 0, 1, 0, d}
#define S(p, f, d) {p, KT_STR, OFF(f), NULL, 0, 0, 0, d}
#define E(p, f, v, d) {p, KT_ENUM, OFF(f), v, 0, 0, 0, d}

static const spec_key keys[] = {
    S("name", name, "job name [file name]"),
    O("model", "the network"),
    E("model.arch", model.arch, "gpt2|llama", "architecture [gpt2]"),
    I("model.layers", model.layers, 1, 1e6, "transformer blocks"),
    I("model.hidden", model.hidden, 1, 1e7, "model width"),
    I("model.heads", model.heads, 1, 1e5, "attention heads"),
    I("model.kv_heads", model.kv_heads, 1, 1e5, "key/value heads [heads]"),
    I("model.ffn", model.ffn, 1, 1e8, "FFN width [4*hidden gpt2, SwiGLU llama]"),
    I("model.vocab", model.vocab, 1, 1e8, "vocabulary size"),
    I("model.seq_len", model.seq_len, 1, 1e8, "sequence length [1024]"),
    N("model.params", model.params, 0, 1e16, F_POS,
      "parameter count (planner-only models may give only this)"),
    N("model.norm_eps", model.norm_eps, 0, 1, F_POS, "norm epsilon [1e-5]"),
    N("model.rope_theta", model.rope_theta, 0, 1e12, F_POS, "RoPE base [10000]"),
    B("model.tied_embeddings", model.tied_embeddings,
      "share input and output embeddings [true gpt2, false llama]"),
    O("model.moe", "mixture of experts (experts 0 = dense)"),
    I("model.moe.experts", model.moe.experts, 0, 1e6, "experts per MoE layer [0]"),
    I("model.moe.top_k", model.moe.top_k, 0, 1e6, "experts per token [0]"),
    I("model.moe.expert_ffn", model.moe.expert_ffn, 1, 1e8,
      "FFN width of one expert [model.ffn]"),
    N("model.moe.capacity_factor", model.moe.capacity_factor, -1e6, 1e6, 0,
      "tokens an expert takes, times tokens*top_k/experts [1.25]"),
    B("model.moe.dropless", model.moe.dropless,
      "no capacity: every expert takes all tokens routed to it [false]"),
    N("model.moe.aux_loss_coef", model.moe.aux_loss_coef, 0, 1e3, 0,
      "load-balancing loss E*sum f_e*P_e weight [0.01]"),
    N("model.moe.z_loss_coef", model.moe.z_loss_coef, 0, 1e3, 0,
      "router z-loss mean(logsumexp^2) weight [0.001]"),
    I("model.moe.every", model.moe.every, 1, 1e6, "every n-th layer is MoE [1]"),
    I("model.moe.shared_experts", model.moe.shared_experts, 0, 1e6,
      "always-active experts of expert_ffn each, not routed, added to the routed "
      "output (DeepSeek-MoE) [0]"),
    B("model.moe.renormalize", model.moe.renormalize,
      "top-k weights renormalised to sum 1 (GShard, Mixtral); false: the softmax "
      "probabilities as they are (Switch top-1, DeepSeek-V2) [true]"),
    O("parallelism", "how the job is split over GPUs"),
    I("parallelism.tp", parallelism.tp, 1, 1e6, "tensor parallel [1]"),
    I("parallelism.pp", parallelism.pp, 1, 1e6, "pipeline parallel [1]"),
    I("parallelism.dp", parallelism.dp, 1, 1e9, "data parallel [1]"),
    I("parallelism.cp", parallelism.cp, 1, 1e6, "context parallel [1]"),
    E("parallelism.cp_variant", parallelism.cp_variant, "ring|allgather",
      "context parallel attention: ring exchange of K/V blocks, or one all-gather of K/V "
      "(Llama 3) [ring]"),
    I("parallelism.ep", parallelism.ep, 1, 1e6, "expert parallel, carved out of dp [1]"),
    I("parallelism.zero", parallelism.zero, 0, 3, "ZeRO stage 0..3 [0]"),
    I("parallelism.virtual_stages", parallelism.virtual_stages, 1, 1e4,
      "interleaved pipeline chunks per stage [1]"),
    E("parallelism.pp_schedule", parallelism.pp_schedule, "1f1b|gpipe|interleaved",
      "pipeline schedule: one forward one backward (PipeDream-flush), all forwards then "
      "all backwards, or virtual stages [1f1b]"),
    {"parallelism.stage_layers", KT_STAGES, 0, NULL, 1, LLMT_SPEC_MAX_STAGES, 0,
     "layers per pipeline stage, first to last: pp entries >= 1 summing to model.layers "
     "[balanced]"},
    E("parallelism.recompute", parallelism.recompute, "none|selective|full",
      "activation recomputation [none]"),
    B("parallelism.sequence_parallel", parallelism.sequence_parallel,
      "shard norms/dropout over tp along the sequence [false]"),
    O("precision", "number formats"),
    E("precision.param", precision.param, "bf16|fp16|fp32|fp8",
      "parameter/compute dtype [bf16]"),
    E("precision.master", precision.master, "bf16|fp16|fp32|fp8", "master weights [fp32]"),
    E("precision.gemm", precision.gemm, "bf16|fp16|fp32|fp8", "GEMM inputs [bf16]"),
    E("precision.fp8_recipe", precision.fp8_recipe, "delayed|current|blockwise",
      "fp8 scales: per tensor from an amax history, per tensor from this "
      "step's amax, or per 1x128/128x128 tile [delayed]"),
    I("precision.fp8_amax_history", precision.fp8_amax_history, 1, 1024,
      "delayed: steps of amax history per tensor [16]"),
    I("precision.fp8_margin", precision.fp8_margin, 0, 16,
      "delayed/current: scale = fp8_max / amax / 2^margin [0]"),
    E("precision.fp8_format", precision.fp8_format, "e4m3|hybrid",
      "E4M3 everywhere, or hybrid: E5M2 for gradients [hybrid]"),
    O("batch", "global = micro * grad_accum * dp"),
    I("batch.micro", batch.micro, 1, 1e9, "sequences per micro-batch per rank [1]"),
    I("batch.grad_accum", batch.grad_accum, 1, 1e9,
      "micro-batches per step [global/(micro*dp) or 1]"),
    I("batch.global", batch.global, 1, 1e12, "sequences per step [micro*accum*dp]"),
    O("optimizer", "optimizer"),
    E("optimizer.type", optimizer.type, "adamw|adam|sgd", "[adamw]"),
    N("optimizer.lr", optimizer.lr, 0, 1e3, F_POS, "peak learning rate [6e-4]"),
    N("optimizer.beta1", optimizer.beta1, 0, 0.999999999, 0, "[0.9]"),
    N("optimizer.beta2", optimizer.beta2, 0, 0.999999999, 0, "[0.95]"),
    N("optimizer.eps", optimizer.eps, 0, 1, F_POS, "[1e-8]"),
    N("optimizer.weight_decay", optimizer.weight_decay, 0, 1e3, 0, "[0.1]"),
    N("optimizer.grad_clip", optimizer.grad_clip, 0, 1e9, 0, "global norm clip, 0 = off [1.0]"),
    O("schedule", "learning-rate schedule"),
    E("schedule.kind", schedule.kind, "cosine|linear|wsd|constant", "[cosine]"),
    I("schedule.warmup_steps", schedule.warmup_steps, 0, BIG, "[min(100, total_steps/10)]"),
    I("schedule.total_steps", schedule.total_steps, 1, BIG, "[train.steps]"),
    N("schedule.min_lr_ratio", schedule.min_lr_ratio, 0, 1, 0, "[0.1]"),
    I("schedule.decay_steps", schedule.decay_steps, 0, BIG,
      "wsd: length of the final decay [total_steps/5]"),
    O("train", "the run"),
    I("train.steps", train.steps, 1, BIG, "optimizer steps [2000]"),
    I("train.seed", train.seed, 0, BIG, "[1337]"),
    E("train.device", train.device, "cpu|cuda|emulated",
      "emulated: the GPU engine's bf16 arithmetic on the CPU [cpu]"),
    I("train.eval_interval", train.eval_interval, 0, BIG, "steps, 0 = off [100]"),
    /* >= 1: a validation of 0 batches has no meaning, and the job took
     * 0 as 1 (train.eval_interval 0 is how validation is turned off) */
    I("train.eval_batches", train.eval_batches, 1, 1e6,
      "micro-batches per validation, held in memory [10]"),
    I("train.log_interval", train.log_interval, 0, BIG, "[10]"),
    I("train.threads", train.threads, 0, 4096, "CPU threads, 0 = all [0]"),
    B("train.deterministic", train.deterministic, "bitwise reproducible [false]"),
    I("train.sample_tokens", train.sample_tokens, 0, 1e6,
      "tokens to sample at the end, 0 = none [128]"),
    O("data", "inputs"),
    S("data.train", data.train, "token shard dir or text input"),
    S("data.val", data.val,
      "token shard dir (text is refused: data.train's split gives the validation)"),
    O("data.tokenizer", "tokenizer"),
    E("data.tokenizer.kind", data.tokenizer.kind, "byte|bpe|gpt2", "[bpe]"),
    I("data.tokenizer.vocab_size", data.tokenizer.vocab_size, 1, 1e8, "[model.vocab]"),
    S("data.tokenizer.path", data.tokenizer.path, "trained tokenizer file"),
    I("data.seed", data.seed, 0, BIG, "sampler seed [1234]"),
    O("checkpoint", "checkpoints"),
    S("checkpoint.dir", checkpoint.dir, "[ckpt]"),
    {"checkpoint.interval", KT_INTERVAL, OFF(checkpoint.interval), NULL, 0, BIG, 0,
     "steps between saves, 0 = none, or \"auto\" (Young/Daly) [0]"},
    B("checkpoint.async", checkpoint.async, "persist in the background [true]"),
    N("checkpoint.save_stall_s", checkpoint.save_stall_s, 0, 1e7, 0,
      "seconds training stops per save, 0 = estimate [0]"),
    N("checkpoint.save_write_s", checkpoint.save_write_s, 0, 1e7, 0,
      "seconds to persist a save, 0 = estimate [0]"),
    N("checkpoint.restore_s", checkpoint.restore_s, 0, 1e7, 0,
      "seconds to load after a failure, 0 = estimate [0]"),
    {"checkpoint.tiers", KT_TIERS, 0, NULL, 0, LLMT_SPEC_MAX_TIERS, 0,
     "storage tiers [one local tier at dir]"},
    {"checkpoint.tiers[].kind", KT_ENUM, TOFF(kind), "host|local|peer|durable", 0, 0, F_TIER,
     "tier kind"},
    {"checkpoint.tiers[].path", KT_STR, TOFF(path), NULL, 0, 0, F_TIER,
     "directory (local, durable)"},
    {"checkpoint.tiers[].keep_last", KT_INT, TOFF(keep_last), NULL, 0, 1e9, F_TIER,
     "keep the newest N, 0 = all [3]"},
    {"checkpoint.tiers[].keep_every", KT_INT, TOFF(keep_every), NULL, 0, 1e9, F_TIER,
     "also keep every Nth step for good, 0 = none [0]"},
    O("fault_tolerance", "failures"),
    N("fault_tolerance.collective_timeout_s", fault_tolerance.collective_timeout_s, 0, 1e7,
      F_POS,
      "seconds a collective may wait, 2+ ranks [600; left out, the communicator keeps "
      "$LLMT_COMM_TIMEOUT_MS or 300]"),
    I("fault_tolerance.max_restarts", fault_tolerance.max_restarts, 0, 1e9, "[3]"),
    N("fault_tolerance.gpu_failures_per_hour", fault_tolerance.gpu_failures_per_hour, 0, 1, 0,
      "per GPU [419/(54*24*16384), Llama 3]"),
    N("fault_tolerance.restart_s", fault_tolerance.restart_s, 0, 1e7, 0,
      "seconds from failure to running again, before the load [300]"),
    O("fault_tolerance.anomaly", "loss/grad anomalies"),
    E("fault_tolerance.anomaly.policy", fault_tolerance.anomaly.policy,
      "skip|rollback|stop|lower_lr", "[skip]"),
    N("fault_tolerance.anomaly.zscore", fault_tolerance.anomaly.zscore, 0, 1e6, F_POS,
      "loss spike threshold [6]"),
    N("fault_tolerance.anomaly.grad_zscore", fault_tolerance.anomaly.grad_zscore, 0, 1e6, 0,
      "gradient-norm spike threshold, 0 = off [0]"),
    N("fault_tolerance.anomaly.lr_factor", fault_tolerance.anomaly.lr_factor, 0, 1, F_POS,
      "policy lower_lr: the LR is multiplied by this per anomaly [0.5]"),
    I("fault_tolerance.sdc_interval", fault_tolerance.sdc_interval, 0, BIG,
      "steps between cross-replica parameter hash checks, 0 = off [0]"),
    E("fault_tolerance.sdc_replay", fault_tolerance.sdc_replay, "window|step",
      "the deterministic replay: every step since the newest memory snapshot, or the "
      "check step alone (zero 3) [window]"),
    O("fault_tolerance.straggler", "per-rank step time report"),
    I("fault_tolerance.straggler.interval", fault_tolerance.straggler.interval, 0, BIG,
      "steps between reports, 0 = off [0]"),
    N("fault_tolerance.straggler.margin", fault_tolerance.straggler.margin, 0, 1e6, F_POS,
      "a rank busier than the median rank by this fraction of a step is named [0.5]"),
    I("fault_tolerance.straggler.patience", fault_tolerance.straggler.patience, 0, 1e9,
      "reports in a row, then the rank is failed, 0 = never [3]"),
    O("hardware", "the machines"),
    S("hardware.gpu", hardware.gpu, "a row of the GPU table [H100-SXM]"),
    I("hardware.gpus_per_node", hardware.gpus_per_node, 1, 1e4, "[table]"),
    I("hardware.nodes_per_rack", hardware.nodes_per_rack, 1, 1e6, "[16]"),
    N("hardware.nvlink_GBps", hardware.nvlink_GBps, 0, 1e6, F_POS,
      "per GPU, both directions [table]"),
    N("hardware.ib_Gbps", hardware.ib_Gbps, 0, 1e6, F_POS, "per rail [400]"),
    I("hardware.ib_rails", hardware.ib_rails, 1, 1e4, "rails per node [8]"),
    N("hardware.peak_tflops", hardware.peak_tflops, 0, 1e7, F_POS,
      "dense bf16 peak per GPU [table]"),
    N("hardware.fp8_tflops", hardware.fp8_tflops, 0, 1e7, 0, "dense fp8 peak per GPU [table]"),
    N("hardware.hbm_GB", hardware.hbm_GB, 0, 1e6, F_POS, "memory per GPU [table]"),
    N("hardware.efficiency", hardware.efficiency, 0, 1, F_POS,
      "fraction of peak large GEMMs reach [0.75]"),
    N("hardware.pcie_GBps", hardware.pcie_GBps, 0, 1e6, F_POS,
      "device-to-host copy per GPU, for checkpoint snapshots [25]"),
    N("hardware.storage_GBps", hardware.storage_GBps, 0, 1e9, F_POS,
      "aggregate write/read bandwidth of durable storage [1000]"),
    O("metrics", "outputs"),
    S("metrics.jsonl", metrics.jsonl, "per-step metrics file"),
    S("metrics.plot", metrics.plot, "loss/throughput plot (svg)"),
    S("metrics.http", metrics.http,
      "Prometheus endpoint [HOST:]PORT serving GET /metrics (HOST an IPv4 address "
      "[127.0.0.1]; rank r listens on PORT + its local rank; 0: any free port, written to "
      "metrics.http in the run directory) [off]"),
};
#define NKEYS (sizeof keys / sizeof keys[0])

/* Spellings of the seeds' example job spec, accepted as the canonical key. */
static const char *const aliases[][2] = {
    {"model.seqlen", "model.seq_len"},
    {"model.experts", "model.moe.experts"},
    {"batch.micro_batch", "batch.micro"},
    {"batch.global_batch", "batch.global"},
    {"checkpoint.interval_steps", "checkpoint.interval"},
    {"precision.compute", "precision.param"},
};

/* ---------------------------------------------------------------- errors */

typedef struct errlist {
    char *buf;
    size_t len, cap;
    int count;
    int oom;
} errlist;

static void LLMT_PRINTF(3, 4) errf(errlist *el, const char *path,
                                   const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof line, "%s: ", path);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t l = strlen(line);
    el->count++;
    if (el->len + l + 2 > el->cap) {
        size_t nc = el->cap ? el->cap * 2 : 1024;
        while (nc < el->len + l + 2)
            nc *= 2;
        char *nb = realloc(el->buf, nc);
        if (!nb) {
            el->oom = 1;
            return;
        }
        el->buf = nb;
        el->cap = nc;
    }
    memcpy(el->buf + el->len, line, l);
    el->len += l;
    el->buf[el->len++] = '\n';
    el->buf[el->len] = '\0';
}

/* ------------------------------------------------------------ key lookup */

static int key_index(const char *path)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].path, path))
            return (int)i;
    return -1;
}

int llmt__spec_given(const llmt_spec *s, const char *path)
{
    /* a NULL spec or path names no key: not given (llmtrain.h) */
    int k = s && path ? key_index(path) : -1;
    return k >= 0 && s->given && s->given[k];
}

static const char *last_part(const char *p)
{
    const char *d = strrchr(p, '.');
    return d ? d + 1 : p;
}

static size_t lev(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return 64;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t c = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < c)
                c = row[j] + 1;
            if (row[j - 1] + 1 < c)
                c = row[j - 1] + 1;
            row[j] = c;
            diag = up;
        }
    }
    return row[lb];
}

static size_t parent_len(const char *p)
{
    const char *d = strrchr(p, '.');
    return d ? (size_t)(d - p) : 0;
}

/* The closest known key to an unknown `path`, or NULL. A key of the same
 * name in another object counts as close (a misplaced key). */
static const char *suggest(const char *path, int in_tier)
{
    const char *best = NULL;
    size_t bestd = (size_t)-1;
    const char *lp = last_part(path);
    size_t pl = parent_len(path);
    for (size_t i = 0; i < NKEYS; i++) {
        if (!!(keys[i].flags & F_TIER) != in_tier)
            continue;
        const char *kp = keys[i].path;
        size_t d = lev(lp, last_part(kp));
        if (parent_len(kp) != pl || strncmp(kp, path, pl) != 0)
            d += 2;
        size_t full = lev(path, kp);
        if (full < d)
            d = full;
        if (d < bestd) {
            bestd = d;
            best = kp;
        }
    }
    size_t limit = strlen(lp) / 3;
    if (limit < 2)
        limit = 2;
    return bestd <= limit ? best : NULL;
}

/* The keys of the object holding the unknown `path` ("a, b, c"), for an
 * error that has no close match to suggest: the reader sees what the
 * object does take (the top level's keys for a top-level path). */
static void siblings(const char *path, char *buf, size_t n)
{
    size_t pl = parent_len(path), len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < NKEYS && len + 1 < n; i++) {
        const char *kp = keys[i].path;
        if ((keys[i].flags & F_TIER) || parent_len(kp) != pl || strncmp(kp, path, pl) != 0)
            continue;
        int w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "", last_part(kp));
        if (w < 0 || (size_t)w >= n - len) {
            buf[len] = '\0'; /* no half name */
            break;
        }
        len += (size_t)w;
    }
}

static const char *enum_name(const char *values, int idx, char *buf, size_t n)
{
    const char *p = values;
    for (int i = 0; i < idx && p; i++) {
        p = strchr(p, '|');
        if (p)
            p++;
    }
    if (!p) {
        snprintf(buf, n, "?");
        return buf;
    }
    size_t l = strcspn(p, "|");
    if (l >= n)
        l = n - 1;
    memcpy(buf, p, l);
    buf[l] = '\0';
    return buf;
}

static int enum_index(const char *values, const char *name)
{
    const char *p = values;
    for (int i = 0; p; i++) {
        size_t l = strcspn(p, "|");
        if (strlen(name) == l && !strncasecmp(p, name, l))
            return i;
        p = strchr(p, '|');
        if (p)
            p++;
    }
    return -1;
}

/* ------------------------------------------------------------- strings */

static char *dupstr(llmt_context *ctx, const char *s)
{
    if (!s)
        return NULL;
    size_t l = strlen(s) + 1;
    char *d = llmt__alloc(ctx, l, 1);
    if (d)
        memcpy(d, s, l);
    return d;
}

static void freestr(llmt_context *ctx, char *s)
{
    if (s)
        llmt__free(ctx, s, strlen(s) + 1);
}

/* -------------------------------------------------------------- values */

static void set_defaults(llmt_spec *s)
{
    s->model.arch = LLMT_SPEC_ARCH_GPT2;
    s->model.seq_len = 1024;
    s->model.norm_eps = 1e-5;
    s->model.rope_theta = 10000.0;
    s->parallelism.tp = s->parallelism.pp = s->parallelism.dp = 1;
    s->parallelism.cp = s->parallelism.ep = 1;
    s->parallelism.virtual_stages = 1;
    s->precision.param = LLMT_SPEC_PREC_BF16;
    s->precision.master = LLMT_SPEC_PREC_FP32;
    s->precision.gemm = LLMT_SPEC_PREC_BF16;
    s->precision.fp8_recipe = LLMT_SPEC_FP8_DELAYED;
    s->precision.fp8_amax_history = 16;
    s->precision.fp8_format = LLMT_SPEC_FP8_HYBRID;
    s->batch.micro = 1;
    s->batch.grad_accum = 1;
    s->optimizer.type = LLMT_SPEC_OPT_ADAMW;
    s->optimizer.lr = 6e-4;
    s->optimizer.beta1 = 0.9;
    s->optimizer.beta2 = 0.95;
    s->optimizer.eps = 1e-8;
    s->optimizer.weight_decay = 0.1;
    s->optimizer.grad_clip = 1.0;
    s->schedule.kind = LLMT_SPEC_SCHED_COSINE;
    s->schedule.min_lr_ratio = 0.1;
    s->train.steps = 2000;
    s->train.seed = 1337;
    s->train.device = LLMT_SPEC_DEVICE_CPU;
    s->train.eval_interval = 100;
    s->train.eval_batches = 10;
    s->train.log_interval = 10;
    s->train.sample_tokens = 128;
    s->data.tokenizer.kind = LLMT_SPEC_TOK_BPE;
    s->data.seed = 1234;
    s->checkpoint.async = 1;
    s->fault_tolerance.collective_timeout_s = 600;
    s->fault_tolerance.max_restarts = 3;
    /* Llama 3 (Dubey et al. 2024, sec. 3.3.4): 419 unexpected interruptions
     * in 54 days on 16,384 H100s. */
    s->fault_tolerance.gpu_failures_per_hour = 419.0 / (54.0 * 24.0 * 16384.0);
    s->fault_tolerance.restart_s = 300;
    s->fault_tolerance.anomaly.policy = LLMT_SPEC_ANOMALY_SKIP;
    s->fault_tolerance.anomaly.zscore = 6.0;
    s->fault_tolerance.anomaly.lr_factor = 0.5;
    s->fault_tolerance.sdc_replay = LLMT_SPEC_SDC_WINDOW;
    s->fault_tolerance.straggler.margin = 0.5;
    s->fault_tolerance.straggler.patience = 3;
    s->hardware.nodes_per_rack = 16;
    s->hardware.ib_Gbps = 400;
    s->hardware.ib_rails = 8;
    s->hardware.efficiency = 0.75;
    s->hardware.pcie_GBps = 25;
    s->hardware.storage_GBps = 1000;
}

static int json_int(const cJSON *v, int64_t *out)
{
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || fabs(d) > BIG)
        return 0;
    *out = (int64_t)d;
    return 1;
}

static void fmt_range(char *buf, size_t n, const spec_key *k)
{
    if (k->max >= BIG || k->max >= 1e15)
        snprintf(buf, n, "%s %g", (k->flags & F_POS) ? ">" : ">=", k->min);
    else
        snprintf(buf, n, "in %s%g, %g]", (k->flags & F_POS) ? "(" : "[", k->min,
                 k->max);
}

/* Store one scalar value `v` for key `k` into `base` (the spec or a tier). */
static void store_value(llmt_spec *s, void *base, const spec_key *k,
                        const char *path, const cJSON *v, errlist *el)
{
    char *dst = (char *)base + k->off;
    char range[64];
    switch (k->type) {
    case KT_INT: {
        int64_t x;
        if (!json_int(v, &x)) {
            /* a whole number beyond 2^53 is one too, only out of range */
            fmt_range(range, sizeof range, k);
            if (cJSON_IsNumber(v) && isfinite(v->valuedouble) &&
                v->valuedouble == floor(v->valuedouble))
                errf(el, path, "%g must be %s", v->valuedouble, range);
            else
                errf(el, path, "must be an integer %s", range);
            return;
        }
        if ((double)x < k->min || (double)x > k->max) {
            fmt_range(range, sizeof range, k);
            errf(el, path, "%lld must be %s", (long long)x, range);
            return;
        }
        memcpy(dst, &x, sizeof x);
        return;
    }
    case KT_NUM: {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
            errf(el, path, "must be a number");
            return;
        }
        double x = v->valuedouble;
        if (x < k->min || x > k->max || ((k->flags & F_POS) && x <= k->min)) {
            fmt_range(range, sizeof range, k);
            errf(el, path, "%g must be %s", x, range);
            return;
        }
        memcpy(dst, &x, sizeof x);
        return;
    }
    case KT_BOOL: {
        if (!cJSON_IsBool(v)) {
            errf(el, path, "must be true or false");
            return;
        }
        int x = cJSON_IsTrue(v);
        memcpy(dst, &x, sizeof x);
        return;
    }
    case KT_STR: {
        if (!cJSON_IsString(v) || !v->valuestring) {
            errf(el, path, "must be a string");
            return;
        }
        /* "" read as the key left out would put the default in its place
         * unseen: data.train "" trained on the default corpus, metrics.plot
         * "" (meant as none) still drew loss.svg */
        if (!*v->valuestring) {
            errf(el, path,
                 "is empty: give a value, or leave the key out (or null) for its "
                 "default");
            return;
        }
        char **sp = (char **)(void *)dst;
        freestr(s->ctx, *sp);
        *sp = dupstr(s->ctx, v->valuestring);
        if (!*sp)
            el->oom = 1;
        return;
    }
    case KT_ENUM: {
        int x = cJSON_IsString(v) && v->valuestring
                    ? enum_index(k->values, v->valuestring) : -1;
        if (x < 0) {
            if (cJSON_IsString(v) && v->valuestring)
                errf(el, path, "\"%.60s\" is not one of %s", v->valuestring,
                     k->values);
            else
                errf(el, path, "must be one of %s", k->values);
            return;
        }
        memcpy(dst, &x, sizeof x);
        return;
    }
    case KT_INTERVAL: {
        int64_t x;
        if (cJSON_IsString(v) && v->valuestring &&
            !strcmp(v->valuestring, "auto")) {
            s->checkpoint.interval_auto = 1;
            s->checkpoint.interval = 0;
            return;
        }
        if (!json_int(v, &x) || x < 0) {
            errf(el, path, "must be a step count >= 0 or \"auto\"");
            return;
        }
        s->checkpoint.interval_auto = 0;
        s->checkpoint.interval = x;
        return;
    }
    default:
        return;
    }
}

/* Tiers: an array of objects, or of strings naming the kind (the seeds'
 * [local_nvme, peer, lustre, object_store]). */
static void parse_tiers(llmt_spec *s, const cJSON *arr, errlist *el)
{
    if (!cJSON_IsArray(arr)) {
        errf(el, "checkpoint.tiers", "must be an array of tier objects");
        return;
    }
    int n = cJSON_GetArraySize(arr);
    if (n > LLMT_SPEC_MAX_TIERS) {
        errf(el, "checkpoint.tiers", "%d tiers, at most %d", n,
             LLMT_SPEC_MAX_TIERS);
        n = LLMT_SPEC_MAX_TIERS;
    }
    int i = 0;
    for (const cJSON *t = arr->child; t && i < n; t = t->next, i++) {
        llmt_spec_tier *tier = &s->checkpoint.tiers[i];
        tier->kind = -1;
        tier->keep_last = 3;
        char path[96];
        snprintf(path, sizeof path, "checkpoint.tiers[%d]", i);
        if (cJSON_IsString(t) && t->valuestring) {
            const char *k = t->valuestring;
            static const char *const tmap[][2] = {
                {"local_nvme", "local"}, {"nvme", "local"}, {"lustre", "durable"},
                {"object_store", "durable"}, {"shared", "durable"},
                {"memory", "host"}, {"cpu", "host"}};
            for (size_t m = 0; m < sizeof tmap / sizeof tmap[0]; m++)
                if (!strcmp(k, tmap[m][0]))
                    k = tmap[m][1];
            tier->kind = enum_index("host|local|peer|durable", k);
            if (tier->kind < 0)
                errf(el, path, "\"%.60s\" is not a tier kind (host|local|peer|"
                     "durable)", t->valuestring);
            continue;
        }
        if (!cJSON_IsObject(t)) {
            errf(el, path, "must be an object {\"kind\": ..., \"path\": ...}");
            continue;
        }
        for (const cJSON *f = t->child; f; f = f->next) {
            char kp[128], full[160];
            snprintf(kp, sizeof kp, "checkpoint.tiers[].%.60s",
                     f->string ? f->string : "");
            snprintf(full, sizeof full, "%s.%.60s", path,
                     f->string ? f->string : "");
            int k = key_index(kp);
            if (k < 0) {
                const char *sg = suggest(kp, 1);
                if (sg)
                    errf(el, full, "unknown key (did you mean \"%s\"?)",
                         last_part(sg));
                else
                    errf(el, full, "unknown key (a tier has kind, path, "
                         "keep_last, keep_every)");
                continue;
            }
            if (cJSON_IsNull(f))
                continue;
            store_value(s, tier, &keys[k], full, f, el);
        }
        if (tier->kind < 0)
            errf(el, path, "needs \"kind\": host|local|peer|durable");
    }
    s->checkpoint.ntiers = i;
}

/* parallelism.stage_layers: an array of layer counts, one per stage (its
 * length and sum are checked against pp and the layers with the other
 * cross-field rules). */
static void parse_stages(llmt_spec *s, const cJSON *arr, errlist *el)
{
    const char *key = "parallelism.stage_layers";
    s->parallelism.nstage_layers = 0;
    if (!cJSON_IsArray(arr)) {
        errf(el, key, "must be an array of layer counts, one per pipeline stage");
        return;
    }
    int n = cJSON_GetArraySize(arr), i = 0;
    if (n < 1 || n > LLMT_SPEC_MAX_STAGES) {
        errf(el, key, "%d entries: 1 to %d (one per pipeline stage)", n, LLMT_SPEC_MAX_STAGES);
        return;
    }
    for (const cJSON *v = arr->child; v; v = v->next, i++) {
        int64_t x;
        char path[64];
        snprintf(path, sizeof path, "%s[%d]", key, i);
        if (!json_int(v, &x))
            errf(el, path, "must be an integer");
        else if (x < 1 || x > 1000000)
            errf(el, path, "%lld layers: each stage needs 1 to 1e6", (long long)x);
        else
            s->parallelism.stage_layers[i] = x;
    }
    s->parallelism.nstage_layers = n;
}

/* Walk one object of the document whose JSON path is `prefix`. */
static void walk(llmt_spec *s, const cJSON *obj, const char *prefix,
                 errlist *el)
{
    for (const cJSON *c = obj->child; c; c = c->next) {
        const char *name = c->string ? c->string : "";
        char path[256];
        if (*prefix)
            snprintf(path, sizeof path, "%s.%.120s", prefix, name);
        else
            snprintf(path, sizeof path, "%.120s", name);
        /* Duplicate keys: cJSON keeps both; a silent "last wins" hides typos. */
        int dup = 0;
        for (const cJSON *e = obj->child; e != c; e = e->next)
            if (e->string && !strcmp(e->string, name))
                dup = 1;
        if (dup) {
            errf(el, path, "duplicate key");
            continue;
        }
        const char *canon = path;
        for (size_t a = 0; a < sizeof aliases / sizeof aliases[0]; a++)
            if (!strcmp(path, aliases[a][0]))
                canon = aliases[a][1];
        int k = key_index(canon);
        if (k < 0 || (keys[k].flags & F_TIER)) {
            const char *sg = suggest(path, 0);
            char sib[400];
            siblings(path, sib, sizeof sib);
            if (sg)
                errf(el, path, "unknown key (did you mean \"%s\"?)", sg);
            else if (parent_len(path))
                errf(el, path, "unknown key (%.*s has: %s)", (int)parent_len(path), path, sib);
            else
                errf(el, path, "unknown key (the spec has: %s)", sib);
            continue;
        }
        if (canon != path && s->given[k]) {
            errf(el, path, "given twice (also as %s)", canon);
            continue;
        }
        if (cJSON_IsNull(c))
            continue;
        s->given[k] = 1;
        if (keys[k].type == KT_OBJ) {
            if (!cJSON_IsObject(c)) {
                errf(el, path, "must be an object");
                continue;
            }
            walk(s, c, canon, el);
        } else if (keys[k].type == KT_TIERS) {
            parse_tiers(s, c, el);
        } else if (keys[k].type == KT_STAGES) {
            parse_stages(s, c, el);
        } else {
            store_value(s, s, &keys[k], path, c, el);
        }
    }
}

int64_t llmt__spec_llama_ffn(int64_t hidden)
{
    int64_t f = (8 * hidden + 2) / 3;
    return (f + 255) / 256 * 256;
}

double llmt__spec_param_count(const llmt_spec *s)
{
    double h = (double)s->model.hidden, L = (double)s->model.layers;
    double V = (double)s->model.vocab, hd = h / (double)s->model.heads;
    double kv = (double)s->model.kv_heads * hd;
    double ffn = (double)s->model.ffn;
    int llama = s->model.arch == LLMT_SPEC_ARCH_LLAMA;
    /* Attention: q and out are h*h, k and v are h*kv (+ biases for gpt2). */
    double attn = 2 * h * h + 2 * h * kv + (llama ? 0 : 2 * h + 2 * kv);
    double mlp1 = llama ? 3 * h * ffn : 2 * h * ffn + ffn + h;
    double experts = (double)s->model.moe.experts;
    double mlp = mlp1, Lmoe = 0; /* MoE layers: l % every == 0 */
    if (experts > 0) {
        double ef = (double)s->model.moe.expert_ffn;
        int64_t every = s->model.moe.every > 0 ? s->model.moe.every : 1;
        mlp = experts * (llama ? 3 * h * ef : 2 * h * ef + ef + h) + h * experts +
              (double)s->model.moe.shared_experts * 3 * h * ef; /* llama only */
        Lmoe = (double)((s->model.layers + every - 1) / every);
    }
    double norms = llama ? 2 * h : 4 * h;
    double emb = V * h + (llama ? 0 : (double)s->model.seq_len * h);
    double head = s->model.tied_embeddings ? 0 : V * h;
    return L * (attn + norms) + Lmoe * mlp + (L - Lmoe) * mlp1 + emb + head +
           (llama ? h : 2 * h);
}

/* Active parameters per token differ from total for MoE; the planner
 * computes those itself. */

static void derive_shape_from_params(llmt_spec *s)
{
    /* Aspect ratio of published dense models: hidden ~ 128 * layers
     * (GPT-3 175B 12288/96, Llama 3 405B 16384/126), so
     * N ~ 12 L h^2 = 12 * 128^2 * L^3. Hidden is rounded to a multiple of
     * 1024 with 128-wide heads, then layers is solved from N = 12 L h^2. */
    int hg = s->given[key_index("model.hidden")];
    int lg = s->given[key_index("model.layers")];
    int headg = s->given[key_index("model.heads")];
    if (!hg) {
        double L = cbrt(s->model.params / (12.0 * 128.0 * 128.0));
        int64_t h = (int64_t)llround(128.0 * L / 1024.0) * 1024;
        s->model.hidden = h < 1024 ? 1024 : h;
    }
    if (!headg)
        s->model.heads = s->model.hidden % 128 ? 1 : s->model.hidden / 128;
    if (!lg) {
        double h = (double)s->model.hidden;
        int64_t L = (int64_t)llround(s->model.params / (12.0 * h * h));
        s->model.layers = L < 1 ? 1 : L;
    }
}

/* The fp8 keys. Like model.moe.top_k, a rule fires on a value that differs
 * from the default, not on a key merely being present: the normalised spec
 * (llmt_spec_to_json) writes every key and must parse back. */
static void check_fp8(const llmt_spec *s, errlist *el)
{
    static const char *const prec[] = {"bf16", "fp16", "fp32", "fp8"};
    static const char *const recipe[] = {"delayed", "current", "blockwise"};
    int fp8 = s->precision.gemm == LLMT_SPEC_PREC_FP8;
    int rc = s->precision.fp8_recipe;
    const char *g = prec[s->precision.gemm];
    long long h = (long long)s->precision.fp8_amax_history;
    long long m = (long long)s->precision.fp8_margin;
    if (!fp8) {
        if (rc != LLMT_SPEC_FP8_DELAYED)
            errf(el, "precision.fp8_recipe", "%s needs precision.gemm fp8 "
                 "(it is %s)", recipe[rc], g);
        if (s->precision.fp8_format != LLMT_SPEC_FP8_HYBRID)
            errf(el, "precision.fp8_format", "e4m3 needs precision.gemm fp8 "
                 "(it is %s)", g);
        if (h != 16)
            errf(el, "precision.fp8_amax_history", "%lld needs "
                 "precision.gemm fp8 (it is %s)", h, g);
        if (m != 0)
            errf(el, "precision.fp8_margin", "%lld needs precision.gemm fp8 "
                 "(it is %s)", m, g);
        return;
    }
    if (h != 16 && rc != LLMT_SPEC_FP8_DELAYED)
        errf(el, "precision.fp8_amax_history", "%lld needs "
             "precision.fp8_recipe delayed, the one that keeps an amax "
             "history (it is %s)", h, recipe[rc]);
    if (m != 0 && rc == LLMT_SPEC_FP8_BLOCKWISE)
        errf(el, "precision.fp8_margin", "%lld needs a per-tensor "
             "precision.fp8_recipe, delayed or current (it is blockwise)", m);
}

static void check_rules(llmt_spec *s, errlist *el)
{
    int m_given = s->given[key_index("model.layers")] &&
                  s->given[key_index("model.hidden")] &&
                  s->given[key_index("model.heads")];
    int llama = s->model.arch == LLMT_SPEC_ARCH_LLAMA;
    if (!m_given) {
        if (s->given[key_index("model.params")]) {
            derive_shape_from_params(s);
        } else {
            static const char *const need[] = {"model.layers", "model.hidden",
                                               "model.heads"};
            for (int i = 0; i < 3; i++)
                if (!s->given[key_index(need[i])])
                    errf(el, need[i], "required (or give model.params)");
            return; /* the rest needs a shape */
        }
    }
    if (!s->given[key_index("model.vocab")])
        s->model.vocab = llama ? 128256 : 50257;
    if (!s->given[key_index("model.kv_heads")])
        s->model.kv_heads = s->model.heads;
    if (!s->given[key_index("model.ffn")])
        s->model.ffn = llama ? llmt__spec_llama_ffn(s->model.hidden)
                             : 4 * s->model.hidden;
    if (!s->given[key_index("model.moe.expert_ffn")])
        s->model.moe.expert_ffn = s->model.ffn;
    if (!s->given[key_index("model.tied_embeddings")])
        s->model.tied_embeddings = !llama;
    if (!s->given[key_index("model.params")])
        s->model.params = llmt__spec_param_count(s);

    int64_t h = s->model.hidden, heads = s->model.heads, kvh = s->model.kv_heads;
    if (h % heads)
        errf(el, "model.hidden", "%lld is not a multiple of model.heads %lld",
             (long long)h, (long long)heads);
    else if (llama && (h / heads) % 2)
        errf(el, "model.hidden", "head size %lld must be even for RoPE",
             (long long)(h / heads));
    if (kvh > heads)
        errf(el, "model.kv_heads", "%lld exceeds model.heads %lld",
             (long long)kvh, (long long)heads);
    else if (heads % kvh)
        errf(el, "model.kv_heads", "%lld does not divide model.heads %lld",
             (long long)kvh, (long long)heads);
    if (!llama && kvh != heads)
        errf(el, "model.kv_heads",
             "gpt2 has no grouped-query attention (kv_heads must equal heads)");
    if (!llama && !s->model.tied_embeddings)
        errf(el, "model.tied_embeddings",
             "false, but gpt2 ties its output head to the token embedding (an untied "
             "head is llama only); remove the key or set it true");
    int64_t E = s->model.moe.experts, K = s->model.moe.top_k;
    if (E > 0 && (K < 1 || K > E))
        errf(el, "model.moe.top_k", "%lld must be in [1, model.moe.experts %lld]",
             (long long)K, (long long)E);
    if (E == 0 && K > 0)
        errf(el, "model.moe.top_k", "set but model.moe.experts is 0 (dense)");
    if (!s->given[key_index("model.moe.capacity_factor")])
        s->model.moe.capacity_factor = 1.25;
    if (!s->given[key_index("model.moe.aux_loss_coef")])
        s->model.moe.aux_loss_coef = 0.01;
    if (!s->given[key_index("model.moe.z_loss_coef")])
        s->model.moe.z_loss_coef = 0.001;
    if (!s->given[key_index("model.moe.every")])
        s->model.moe.every = 1;
    if (!s->given[key_index("model.moe.renormalize")])
        s->model.moe.renormalize = 1;
    if (s->given[key_index("model.moe.capacity_factor")] && !(s->model.moe.capacity_factor > 0))
        errf(el, "model.moe.capacity_factor",
             "%g must be > 0 (tokens per expert: capacity_factor * tokens * top_k / experts; "
             "model.moe.dropless true for no capacity)",
             s->model.moe.capacity_factor);
    if (E == 0) { /* like top_k: a value other than the default (a spec
                     written back by llmt_spec_to_json has them all) */
        const struct {
            const char *k;
            int differs;
        } mk[] = {{"model.moe.capacity_factor", s->model.moe.capacity_factor != 1.25},
                  {"model.moe.aux_loss_coef", s->model.moe.aux_loss_coef != 0.01},
                  {"model.moe.z_loss_coef", s->model.moe.z_loss_coef != 0.001},
                  {"model.moe.every", s->model.moe.every != 1},
                  {"model.moe.dropless", s->model.moe.dropless != 0},
                  {"model.moe.shared_experts", s->model.moe.shared_experts != 0},
                  {"model.moe.renormalize", s->model.moe.renormalize != 1}};
        for (size_t i = 0; i < sizeof mk / sizeof mk[0]; i++)
            if (mk[i].differs)
                errf(el, mk[i].k, "set but model.moe.experts is 0 (dense)");
    } else if (s->model.moe.every > s->model.layers) {
        errf(el, "model.moe.every", "%lld exceeds model.layers %lld (no layer would be MoE)",
             (long long)s->model.moe.every, (long long)s->model.layers);
    }

    /* Parallelism. */
    int64_t tp = s->parallelism.tp, pp = s->parallelism.pp,
            dp = s->parallelism.dp, cp = s->parallelism.cp,
            ep = s->parallelism.ep, v = s->parallelism.virtual_stages;
    if (heads % tp)
        errf(el, "parallelism.tp", "%lld does not divide model.heads %lld",
             (long long)tp, (long long)heads);
    /* key/value heads are split when kv_heads >= tp, else each is held by
     * tp / kv_heads ranks (Megatron-LM's GQA layout; lib/train/device.c) */
    if (kvh % tp && tp % kvh)
        errf(el, "parallelism.tp",
             "%lld and model.kv_heads %lld: neither divides the other (kv heads are "
             "split when kv_heads >= tp, else replicated over tp / kv_heads ranks)",
             (long long)tp, (long long)kvh);
    if (s->model.ffn % tp)
        errf(el, "parallelism.tp", "%lld does not divide model.ffn %lld",
             (long long)tp, (long long)s->model.ffn);
    if (cp > 1 && s->model.seq_len % (2 * cp))
        errf(el, "parallelism.cp",
             "2*cp = %lld does not divide model.seq_len %lld (load-balanced "
             "ring attention splits the sequence in 2*cp chunks)",
             (long long)(2 * cp), (long long)s->model.seq_len);
    if (ep > 1 && E == 0)
        errf(el, "parallelism.ep", "%lld needs model.moe.experts > 0",
             (long long)ep);
    else if (E > 0 && E % ep)
        errf(el, "parallelism.ep", "%lld does not divide model.moe.experts %lld",
             (long long)ep, (long long)E);
    if (dp % ep)
        errf(el, "parallelism.ep",
             "%lld does not divide parallelism.dp %lld (experts are sharded "
             "across data-parallel ranks)", (long long)ep, (long long)dp);
    if (pp > s->model.layers)
        errf(el, "parallelism.pp", "%lld exceeds model.layers %lld",
             (long long)pp, (long long)s->model.layers);
    if (v > 1) {
        if (pp < 2)
            errf(el, "parallelism.virtual_stages", "%lld needs parallelism.pp > 1",
                 (long long)v);
        else if (pp * v > s->model.layers) /* any other count: uneven chunks */
            errf(el, "parallelism.virtual_stages",
                 "pp*virtual_stages = %lld virtual stages exceed model.layers %lld (each "
                 "needs a layer)",
                 (long long)(pp * v), (long long)s->model.layers);
        /* virtual stages are the interleaved schedule's: its default then */
        if (!s->given[key_index("parallelism.pp_schedule")])
            s->parallelism.pp_schedule = LLMT_SPEC_PP_INTERLEAVED;
        else if (s->parallelism.pp_schedule != LLMT_SPEC_PP_INTERLEAVED)
            errf(el, "parallelism.virtual_stages",
                 "%lld model chunks per stage need parallelism.pp_schedule interleaved",
                 (long long)v);
    } else if (!s->given[key_index("parallelism.pp_schedule")]) {
        s->parallelism.pp_schedule = LLMT_SPEC_PP_1F1B;
    }
    if (s->parallelism.sequence_parallel && tp < 2)
        errf(el, "parallelism.sequence_parallel", "needs parallelism.tp > 1");
    int nsl = s->parallelism.nstage_layers;
    if (nsl > 0) {
        int64_t sum = 0;
        for (int i = 0; i < nsl; i++)
            sum += s->parallelism.stage_layers[i];
        if (v > 1 && nsl != pp * v)
            errf(el, "parallelism.stage_layers",
                 "%d entries for parallelism.pp %lld x parallelism.virtual_stages %lld (one "
                 "per virtual stage: chunk c of stage s is entry c*pp+s)",
                 nsl, (long long)pp, (long long)v);
        else if (v == 1 && nsl != pp)
            errf(el, "parallelism.stage_layers",
                 "%d entries for parallelism.pp %lld (one "
                 "per pipeline stage)",
                 nsl, (long long)pp);
        else if (sum != s->model.layers)
            errf(el, "parallelism.stage_layers",
                 "the stages hold %lld layers, model.layers "
                 "is %lld (they must sum to it)",
                 (long long)sum, (long long)s->model.layers);
    }

    /* Batch: global = micro * grad_accum * dp. */
    int g_given = s->given[key_index("batch.global")];
    int a_given = s->given[key_index("batch.grad_accum")];
    int64_t micro = s->batch.micro;
    if (g_given && !a_given) {
        int64_t per = micro * dp;
        if (s->batch.global % per)
            errf(el, "batch.global",
                 "%lld is not a multiple of batch.micro*parallelism.dp = %lld",
                 (long long)s->batch.global, (long long)per);
        else if (s->batch.global / per > 1000000000)
            errf(el, "batch.global",
                 "%lld / (batch.micro*parallelism.dp = %lld) gives batch.grad_accum "
                 "%lld, over its limit 1e9",
                 (long long)s->batch.global, (long long)per,
                 (long long)(s->batch.global / per));
        else
            s->batch.grad_accum = s->batch.global / per;
    } else if (!g_given) {
        s->batch.global = micro * s->batch.grad_accum * dp;
    } else if (s->batch.global != micro * s->batch.grad_accum * dp) {
        errf(el, "batch.global",
             "%lld != batch.micro %lld * batch.grad_accum %lld * "
             "parallelism.dp %lld = %lld",
             (long long)s->batch.global, (long long)micro,
             (long long)s->batch.grad_accum, (long long)dp,
             (long long)(micro * s->batch.grad_accum * dp));
    }
    if ((v > 1 || s->parallelism.pp_schedule == LLMT_SPEC_PP_INTERLEAVED) && pp > 1 &&
        s->batch.grad_accum % pp)
        errf(el, "batch.grad_accum",
             "%lld micro-batches must be a multiple of parallelism.pp %lld for "
             "the interleaved schedule", (long long)s->batch.grad_accum,
             (long long)pp);

    /* Precision. */
    if (s->precision.param == LLMT_SPEC_PREC_FP8)
        errf(el, "precision.param", "fp8 is for GEMM inputs only "
             "(use precision.gemm)");
    if (s->precision.master != LLMT_SPEC_PREC_FP32 &&
        s->precision.master != LLMT_SPEC_PREC_BF16)
        errf(el, "precision.master", "must be fp32 or bf16");
    check_fp8(s, el);

    /* Schedule and train. */
    if (!s->given[key_index("schedule.total_steps")])
        s->schedule.total_steps = s->train.steps;
    if (!s->given[key_index("schedule.warmup_steps")]) {
        int64_t w = s->schedule.total_steps / 10;
        s->schedule.warmup_steps = w < 100 ? w : 100;
    }
    if (s->schedule.warmup_steps > s->schedule.total_steps)
        errf(el, "schedule.warmup_steps", "%lld exceeds schedule.total_steps %lld",
             (long long)s->schedule.warmup_steps,
             (long long)s->schedule.total_steps);
    if (!s->given[key_index("schedule.decay_steps")])
        s->schedule.decay_steps = s->schedule.kind == LLMT_SPEC_SCHED_WSD
                                      ? s->schedule.total_steps / 5 : 0;
    if (s->schedule.decay_steps + s->schedule.warmup_steps >
        s->schedule.total_steps)
        errf(el, "schedule.decay_steps",
             "warmup_steps + decay_steps = %lld exceeds total_steps %lld",
             (long long)(s->schedule.decay_steps + s->schedule.warmup_steps),
             (long long)s->schedule.total_steps);

    /* A check every N steps with N beyond the run never runs: the spec
     * would claim a protection the job does not give. */
    const struct {
        const char *key;
        int64_t every;
    } ck[] = {{"fault_tolerance.sdc_interval", s->fault_tolerance.sdc_interval},
              {"fault_tolerance.straggler.interval", s->fault_tolerance.straggler.interval}};
    for (size_t i = 0; i < sizeof ck / sizeof ck[0]; i++)
        if (ck[i].every > s->train.steps)
            errf(el, ck[i].key, "%lld exceeds train.steps %lld: the check would never run",
                 (long long)ck[i].every, (long long)s->train.steps);

    /* Data. */
    if (!s->given[key_index("data.tokenizer.vocab_size")])
        s->data.tokenizer.vocab_size = s->data.tokenizer.kind == LLMT_SPEC_TOK_BYTE
                                           ? 256 : s->model.vocab;
    if (s->data.tokenizer.vocab_size > s->model.vocab)
        errf(el, "data.tokenizer.vocab_size",
             "%lld exceeds model.vocab %lld (token ids must fit the embedding)",
             (long long)s->data.tokenizer.vocab_size, (long long)s->model.vocab);

    /* Checkpoint. */
    if (!s->checkpoint.dir) {
        s->checkpoint.dir = dupstr(s->ctx, "ckpt");
        if (!s->checkpoint.dir)
            el->oom = 1;
    }
    if (!s->given[key_index("checkpoint.tiers")]) {
        s->checkpoint.ntiers = 1;
        s->checkpoint.tiers[0].kind = LLMT_SPEC_TIER_LOCAL;
        s->checkpoint.tiers[0].keep_last = 3;
        s->checkpoint.tiers[0].path = dupstr(s->ctx, s->checkpoint.dir);
        if (!s->checkpoint.tiers[0].path)
            el->oom = 1;
    }
    for (int i = 0; i < s->checkpoint.ntiers; i++) {
        llmt_spec_tier *t = &s->checkpoint.tiers[i];
        if (!t->path && (t->kind == LLMT_SPEC_TIER_LOCAL ||
                         t->kind == LLMT_SPEC_TIER_DURABLE)) {
            /* A tier named only by kind (the seeds' list form) lives under
             * checkpoint.dir; say so rather than guess for durable ones. */
            if (t->kind == LLMT_SPEC_TIER_LOCAL) {
                t->path = dupstr(s->ctx, s->checkpoint.dir);
                if (!t->path)
                    el->oom = 1;
            } else {
                char p[64];
                snprintf(p, sizeof p, "checkpoint.tiers[%d].path", i);
                errf(el, p, "required for a durable tier");
            }
        }
    }

    /* Hardware. */
    const llmt_hw_entry *hw = llmt__hw_lookup(s->hardware.gpu ? s->hardware.gpu
                                                              : "H100-SXM");
    if (!s->hardware.gpu) {
        s->hardware.gpu = dupstr(s->ctx, "H100-SXM");
        if (!s->hardware.gpu)
            el->oom = 1;
    }
    int have_peak = s->given[key_index("hardware.peak_tflops")];
    int have_hbm = s->given[key_index("hardware.hbm_GB")];
    if (!hw && !(have_peak && have_hbm)) {
        int n;
        const llmt_hw_entry *t = llmt__hw_table(&n);
        char list[256] = "";
        const char *best = NULL;
        size_t bd = 99;
        for (int i = 0; i < n; i++) {
            size_t l = strlen(list);
            snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", t[i].name);
            size_t d = lev(s->hardware.gpu ? s->hardware.gpu : "", t[i].name);
            if (d < bd) {
                bd = d;
                best = t[i].name;
            }
        }
        if (best && bd <= 3)
            errf(el, "hardware.gpu", "unknown GPU \"%.40s\" (did you mean \"%s\"? "
                 "or give hardware.peak_tflops and hardware.hbm_GB)",
                 s->hardware.gpu ? s->hardware.gpu : "", best);
        else
            errf(el, "hardware.gpu", "unknown GPU \"%.40s\" (known: %s; or give "
                 "hardware.peak_tflops and hardware.hbm_GB)",
                 s->hardware.gpu ? s->hardware.gpu : "", list);
    }
    if (hw) {
        if (!have_peak)
            s->hardware.peak_tflops = hw->bf16_tflops;
        if (!s->given[key_index("hardware.fp8_tflops")])
            s->hardware.fp8_tflops = hw->fp8_tflops;
        if (!have_hbm)
            s->hardware.hbm_GB = hw->hbm_GB;
        if (!s->given[key_index("hardware.nvlink_GBps")])
            s->hardware.nvlink_GBps = hw->nvlink_GBps;
        if (!s->given[key_index("hardware.gpus_per_node")])
            s->hardware.gpus_per_node = hw->gpus_per_node;
    } else {
        if (!s->given[key_index("hardware.nvlink_GBps")])
            s->hardware.nvlink_GBps = 900;
        if (!s->given[key_index("hardware.gpus_per_node")])
            s->hardware.gpus_per_node = 8;
    }
    if (s->precision.gemm == LLMT_SPEC_PREC_FP8 &&
        s->train.device == LLMT_SPEC_DEVICE_CUDA && s->hardware.fp8_tflops <= 0)
        errf(el, "precision.gemm", "fp8 needs a GPU with fp8 tensor cores "
             "(%.40s has none)", s->hardware.gpu ? s->hardware.gpu : "?");
}

/* --------------------------------------------------------- the handles */

static void spec_free(llmt_spec *s)
{
    if (!s)
        return;
    llmt_context *ctx = s->ctx;
    for (size_t i = 0; i < NKEYS; i++)
        if (keys[i].type == KT_STR && !(keys[i].flags & F_TIER))
            freestr(ctx, *(char **)(void *)((char *)s + keys[i].off));
    for (int i = 0; i < LLMT_SPEC_MAX_TIERS; i++)
        freestr(ctx, s->checkpoint.tiers[i].path);
    llmt__free(ctx, s->given, NKEYS);
    llmt__free(ctx, s, sizeof *s);
}

static llmt_spec *spec_new(llmt_context *ctx)
{
    llmt_spec *s = llmt__calloc(ctx, 1, sizeof *s);
    if (!s)
        return NULL;
    s->ctx = ctx;
    s->given = llmt__calloc(ctx, NKEYS, 1);
    if (!s->given) {
        llmt__free(ctx, s, sizeof *s);
        return NULL;
    }
    set_defaults(s);
    return s;
}

/* Parse and validate; returns the spec (NULL on any error) and the list. */
static llmt_status parse(llmt_context *ctx, const char *json, size_t len,
                         llmt_spec **out, errlist *el)
{
    *out = NULL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *e = cJSON_GetErrorPtr();
        size_t off = (e && e >= json && e <= json + len) ? (size_t)(e - json) : 0;
        size_t line = 1;
        for (size_t i = 0; i < off; i++)
            line += json[i] == '\n';
        errf(el, "$", "not valid JSON (near byte %zu, line %zu)", off, line);
        return LLMT_ERR_SPEC;
    }
    llmt_spec *s = spec_new(ctx);
    if (!s) {
        cJSON_Delete(root);
        return LLMT_ERR_OUT_OF_MEMORY;
    }
    const cJSON *top = root;
    /* The seeds write the spec under a "job" key. */
    if (cJSON_IsObject(root) && root->child && !root->child->next &&
        root->child->string && !strcmp(root->child->string, "job") &&
        cJSON_IsObject(root->child))
        top = root->child;
    if (!cJSON_IsObject(top))
        errf(el, "$", "the job spec must be a JSON object");
    else {
        walk(s, top, "", el);
        if (el->count == 0)
            check_rules(s, el);
    }
    cJSON_Delete(root);
    if (el->oom) {
        spec_free(s);
        return LLMT_ERR_OUT_OF_MEMORY;
    }
    if (el->count) {
        spec_free(s);
        return LLMT_ERR_SPEC;
    }
    *out = s;
    return LLMT_OK;
}

/* `head` (may be "") goes before the error count: validate_json says there
 * why it returned BUFFER_TOO_SMALL rather than SPEC. */
static void report_as(llmt_context *ctx, const errlist *el, llmt_status st, const char *head)
{
    /* The context message is bounded; the first errors, then a count. */
    char msg[LLMT_ERR_MSG_MAX];
    int n = snprintf(msg, sizeof msg, "%sspec: %d error%s:", head, el->count,
                     el->count == 1 ? "" : "s");
    const char *p = el->buf ? el->buf : "";
    int shown = 0;
    while (*p) {
        size_t l = strcspn(p, "\n");
        if ((size_t)n + l + 40 >= sizeof msg)
            break;
        n += snprintf(msg + n, sizeof msg - (size_t)n, "\n  %.*s", (int)l, p);
        shown++;
        p += l + (p[l] == '\n');
    }
    if (shown < el->count)
        snprintf(msg + n, sizeof msg - (size_t)n, "\n  ... and %d more",
                 el->count - shown);
    llmt__err_set(ctx ? &ctx->err : NULL, st, "%s", msg);
}

static void report(llmt_context *ctx, const errlist *el)
{
    if (ctx)
        report_as(ctx, el, LLMT_ERR_SPEC, "");
}

LLMT_API llmt_status llmt_spec_parse_json(llmt_context *ctx, const char *json,
                                          size_t len, llmt_spec **out)
{
    if (out)
        *out = NULL;
    LLMT__NONNULL(ctx ? &ctx->err : NULL, "spec: parse_json", json);
    LLMT__NONNULL(ctx ? &ctx->err : NULL, "spec: parse_json", out);
    errlist el = {0};
    llmt_status st = parse(ctx, json, len, out, &el);
    if (st == LLMT_ERR_SPEC)
        report(ctx, &el);
    else if (st == LLMT_ERR_OUT_OF_MEMORY)
        llmt__err_set(ctx ? &ctx->err : NULL, st, "spec: out of memory");
    free(el.buf);
    return st;
}

LLMT_API llmt_status llmt_spec_parse_file(llmt_context *ctx, const char *path,
                                          llmt_spec **out)
{
    if (out)
        *out = NULL;
    llmt_err *e = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(e, "spec: parse_file", path);
    LLMT__NONNULL(e, "spec: parse_file", out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return llmt__err_set(e, LLMT_ERR_IO, "spec: cannot open %s", path);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len == cap) {
            if (cap > (size_t)64 << 20) {
                free(buf);
                fclose(f);
                return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                                     "spec: %s is larger than 64 MiB", path);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf)
        return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "spec: out of memory");
    if (bad) {
        free(buf);
        return llmt__err_set(e, LLMT_ERR_IO, "spec: read error on %s", path);
    }
    llmt_status st = llmt_spec_parse_json(ctx, buf, len, out);
    free(buf);
    if (st == LLMT_OK && !(*out)->name) {
        /* Default name: the file name without directory and extension. */
        const char *b = strrchr(path, '/');
        b = b ? b + 1 : path;
        char nm[256];
        snprintf(nm, sizeof nm, "%s", b);
        char *dot = strrchr(nm, '.');
        if (dot && dot != nm)
            *dot = '\0';
        (*out)->name = dupstr(ctx, nm);
    }
    if (st != LLMT_OK && ctx && st == LLMT_ERR_SPEC) {
        char msg[LLMT_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", ctx->err.msg);
        llmt__err_set(e, st, "%s: %s", path, msg);
    }
    return st;
}

static llmt_status put_text(const char *text, char *buf, size_t buflen,
                            size_t *needed)
{
    size_t l = strlen(text);
    if (needed)
        *needed = l + 1;
    if (buflen == 0)
        return LLMT_ERR_BUFFER_TOO_SMALL;
    if (!buf)
        return LLMT_ERR_NULL_POINTER;
    if (l + 1 <= buflen) {
        memcpy(buf, text, l + 1);
        return LLMT_OK;
    }
    memcpy(buf, text, buflen - 1);
    buf[buflen - 1] = '\0';
    return LLMT_ERR_BUFFER_TOO_SMALL;
}

LLMT_API llmt_status llmt_spec_validate_json(llmt_context *ctx,
                                             const char *json, size_t len,
                                             char *buf, size_t buflen,
                                             size_t *needed)
{
    if (needed)
        *needed = 0;
    LLMT__NONNULL(ctx ? &ctx->err : NULL, "spec: validate_json", json);
    errlist el = {0};
    llmt_spec *s = NULL;
    llmt_status st = parse(ctx, json, len, &s, &el);
    spec_free(s);
    if (st == LLMT_ERR_OUT_OF_MEMORY) {
        free(el.buf);
        return llmt__err_set(ctx ? &ctx->err : NULL, st, "spec: out of memory");
    }
    const char *text = el.buf ? el.buf : "";
    size_t l = strlen(text);
    if (needed)
        *needed = l + 1;
    llmt_status out = st;
    if (buflen) {
        if (!buf) {
            free(el.buf);
            return llmt__err_set(ctx ? &ctx->err : NULL, LLMT_ERR_NULL_POINTER,
                                 "spec: validate_json: buf is NULL");
        }
        if (l + 1 <= buflen)
            memcpy(buf, text, l + 1);
        else {
            /* Cut at a line end so no half message is shown. */
            size_t cut = buflen - 1;
            while (cut > 0 && text[cut - 1] != '\n')
                cut--;
            memcpy(buf, text, cut);
            buf[cut] = '\0';
            out = LLMT_ERR_BUFFER_TOO_SMALL;
        }
    } else if (l > 0) {
        out = LLMT_ERR_BUFFER_TOO_SMALL;
    }
    if (out == LLMT_ERR_BUFFER_TOO_SMALL) {
        /* Recorded (also without a ctx: llmt_last_error) so the caller
         * learns the size to retry with, not only that the spec is bad. */
        char head[128];
        snprintf(head, sizeof head,
                 "spec: validate_json: the error text needs %zu bytes, "
                 "buflen is %zu; ",
                 l + 1, buflen);
        report_as(ctx, &el, out, head);
    } else if (st == LLMT_ERR_SPEC) {
        report(ctx, &el);
    }
    free(el.buf);
    return out;
}

LLMT_API void llmt_spec_destroy(llmt_spec *spec)
{
    spec_free(spec);
}

LLMT_API const char *llmt_spec_last_error(const llmt_spec *spec)
{
    return spec ? spec->err.msg : "spec: NULL handle";
}

llmt_spec *llmt__spec_clone(const llmt_spec *s)
{
    return llmt__spec_clone_into(s, s->ctx);
}

llmt_spec *llmt__spec_clone_into(const llmt_spec *s, llmt_context *ctx)
{
    llmt_spec *c = spec_new(ctx);
    if (!c)
        return NULL;
    unsigned char *given = c->given;
    memcpy(c, s, sizeof *c);
    c->ctx = ctx;
    c->given = given;
    memcpy(c->given, s->given, NKEYS);
    llmt__err_clear(&c->err);
    int oom = 0;
    for (size_t i = 0; i < NKEYS; i++)
        if (keys[i].type == KT_STR && !(keys[i].flags & F_TIER)) {
            char **p = (char **)(void *)((char *)c + keys[i].off);
            if (*p && !(*p = dupstr(c->ctx, *p)))
                oom = 1;
        }
    for (int i = 0; i < LLMT_SPEC_MAX_TIERS; i++) {
        char **p = &c->checkpoint.tiers[i].path;
        if (*p && !(*p = dupstr(c->ctx, *p)))
            oom = 1;
    }
    if (oom) {
        spec_free(c);
        return NULL;
    }
    return c;
}

/* ------------------------------------------------------------- getters */

/* Resolve "checkpoint.tiers[i].field" or a plain key: the key and the base
 * its offset applies to. */
static const spec_key *resolve(const llmt_spec *s, const char *path,
                               const void **base, int *tiers_count)
{
    *tiers_count = 0;
    *base = s;
    static const char pre[] = "checkpoint.tiers[";
    if (!strncmp(path, pre, sizeof pre - 1)) {
        const char *p = path + sizeof pre - 1;
        char *end;
        long i = strtol(p, &end, 10);
        if (end == p || *end != ']' || end[1] != '.' || i < 0 ||
            i >= s->checkpoint.ntiers)
            return NULL;
        char kp[128];
        snprintf(kp, sizeof kp, "checkpoint.tiers[].%.60s", end + 2);
        int k = key_index(kp);
        if (k < 0)
            return NULL;
        *base = &s->checkpoint.tiers[i];
        return &keys[k];
    }
    int k = key_index(path);
    if (k < 0 || (keys[k].flags & F_TIER))
        return NULL;
    if (keys[k].type == KT_TIERS)
        *tiers_count = 1;
    return &keys[k];
}

LLMT_API llmt_status llmt_spec_get_int(const llmt_spec *spec, const char *path,
                                       int64_t *out)
{
    if (!spec)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&spec->err, "spec: get_int", path);
    LLMT__NONNULL((llmt_err *)&spec->err, "spec: get_int", out);
    llmt_spec *s = (llmt_spec *)spec; /* only the error detail changes */
    const void *base;
    int tc;
    const spec_key *k = resolve(spec, path, &base, &tc);
    if (!k)
        return llmt__err_set(&s->err, LLMT_ERR_NOT_FOUND,
                             "spec: no key \"%.200s\"", path);
    const char *p = (const char *)base + k->off;
    switch (k->type) {
    case KT_INT:
    case KT_INTERVAL:
        memcpy(out, p, sizeof *out);
        return LLMT_OK;
    case KT_BOOL:
    case KT_ENUM: {
        int x;
        memcpy(&x, p, sizeof x);
        *out = x;
        return LLMT_OK;
    }
    case KT_TIERS:
        *out = spec->checkpoint.ntiers;
        return LLMT_OK;
    case KT_STAGES: /* its length; the entries are not keys of their own */
        *out = spec->parallelism.nstage_layers;
        return LLMT_OK;
    default:
        return llmt__err_set(&s->err, LLMT_ERR_INVALID_ARGUMENT,
                             "spec: %.200s is not an integer key", path);
    }
}

LLMT_API llmt_status llmt_spec_get_double(const llmt_spec *spec,
                                          const char *path, double *out)
{
    if (!spec)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&spec->err, "spec: get_double", path);
    LLMT__NONNULL((llmt_err *)&spec->err, "spec: get_double", out);
    llmt_spec *s = (llmt_spec *)spec;
    const void *base;
    int tc;
    const spec_key *k = resolve(spec, path, &base, &tc);
    if (!k)
        return llmt__err_set(&s->err, LLMT_ERR_NOT_FOUND,
                             "spec: no key \"%.200s\"", path);
    if (k->type == KT_NUM) {
        memcpy(out, (const char *)base + k->off, sizeof *out);
        return LLMT_OK;
    }
    int64_t v;
    llmt_status st = llmt_spec_get_int(spec, path, &v);
    if (st == LLMT_OK)
        *out = (double)v;
    else
        llmt__err_set(&s->err, LLMT_ERR_INVALID_ARGUMENT,
                      "spec: %.200s is not a numeric key", path);
    return st == LLMT_OK ? LLMT_OK : LLMT_ERR_INVALID_ARGUMENT;
}

LLMT_API llmt_status llmt_spec_get_string(const llmt_spec *spec,
                                          const char *path, char *buf,
                                          size_t buflen, size_t *needed)
{
    if (needed)
        *needed = 0;
    if (!spec)
        return LLMT_ERR_NULL_POINTER;
    llmt_spec *s = (llmt_spec *)spec;
    LLMT__NONNULL(&s->err, "spec: get_string", path);
    const void *base;
    int tc;
    const spec_key *k = resolve(spec, path, &base, &tc);
    if (!k)
        return llmt__err_set(&s->err, LLMT_ERR_NOT_FOUND,
                             "spec: no key \"%.200s\"", path);
    const char *p = (const char *)base + k->off;
    char tmp[64];
    const char *text;
    if (k->type == KT_STR) {
        const char *v;
        memcpy(&v, p, sizeof v);
        text = v ? v : "";
    } else if (k->type == KT_ENUM) {
        int x;
        memcpy(&x, p, sizeof x);
        text = enum_name(k->values, x, tmp, sizeof tmp);
    } else if (k->type == KT_INTERVAL) {
        if (spec->checkpoint.interval_auto)
            text = "auto";
        else {
            snprintf(tmp, sizeof tmp, "%lld", (long long)spec->checkpoint.interval);
            text = tmp;
        }
    } else {
        return llmt__err_set(&s->err, LLMT_ERR_INVALID_ARGUMENT,
                             "spec: %.200s is not a string key", path);
    }
    llmt_status st = put_text(text, buf, buflen, needed);
    if (st == LLMT_ERR_NULL_POINTER)
        return llmt__err_set(&s->err, st, "spec: get_string: buf is NULL (buflen > 0)");
    if (st == LLMT_ERR_BUFFER_TOO_SMALL)
        llmt__err_set(&s->err, st, "spec: %.200s needs %zu bytes", path,
                      strlen(text) + 1);
    return st;
}

LLMT_API int llmt_spec_is_given(const llmt_spec *spec, const char *path)
{
    return llmt__spec_given(spec, path);
}

/* ---------------------------------------------------------- to_json */

static cJSON *obj_at(cJSON *root, const char *path)
{
    /* The object for the parent of `path`, creating it as needed. */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    cJSON *o = root;
    char *save = NULL;
    char *part = strtok_r(buf, ".", &save);
    char *next;
    while (part && (next = strtok_r(NULL, ".", &save))) {
        cJSON *c = cJSON_GetObjectItemCaseSensitive(o, part);
        if (!c)
            c = cJSON_AddObjectToObject(o, part);
        if (!c)
            return NULL;
        o = c;
        part = next;
    }
    return o;
}

static int add_value(cJSON *o, const char *name, const spec_key *k,
                     const void *base)
{
    const char *p = (const char *)base + k->off;
    char tmp[64];
    switch (k->type) {
    case KT_INT: {
        int64_t v;
        memcpy(&v, p, sizeof v);
        return cJSON_AddNumberToObject(o, name, (double)v) != NULL;
    }
    case KT_NUM: {
        double v;
        memcpy(&v, p, sizeof v);
        return cJSON_AddNumberToObject(o, name, v) != NULL;
    }
    case KT_BOOL: {
        int v;
        memcpy(&v, p, sizeof v);
        return cJSON_AddBoolToObject(o, name, v) != NULL;
    }
    case KT_STR: {
        const char *v;
        memcpy(&v, p, sizeof v);
        return (v ? cJSON_AddStringToObject(o, name, v)
                  : cJSON_AddNullToObject(o, name)) != NULL;
    }
    case KT_ENUM: {
        int v;
        memcpy(&v, p, sizeof v);
        return cJSON_AddStringToObject(o, name,
                                       enum_name(k->values, v, tmp, sizeof tmp))
               != NULL;
    }
    default:
        return 1;
    }
}

void *llmt__spec_to_cjson(const llmt_spec *s)
{
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    for (size_t i = 0; ok && i < NKEYS; i++) {
        const spec_key *k = &keys[i];
        if (k->flags & F_TIER)
            continue;
        cJSON *o = obj_at(root, k->path);
        if (!o) {
            ok = 0;
            break;
        }
        const char *name = last_part(k->path);
        if (k->type == KT_OBJ) {
            if (!cJSON_GetObjectItemCaseSensitive(o, name))
                ok = cJSON_AddObjectToObject(o, name) != NULL;
        } else if (k->type == KT_INTERVAL) {
            ok = (s->checkpoint.interval_auto
                      ? cJSON_AddStringToObject(o, name, "auto")
                      : cJSON_AddNumberToObject(o, name,
                                                (double)s->checkpoint.interval))
                 != NULL;
        } else if (k->type == KT_STAGES) {
            /* given or not at all: an empty array would not parse back */
            if (s->parallelism.nstage_layers > 0) {
                cJSON *arr = cJSON_AddArrayToObject(o, name);
                ok = arr != NULL;
                for (int t = 0; ok && t < s->parallelism.nstage_layers; t++)
                    ok = cJSON_AddItemToArray(
                        arr, cJSON_CreateNumber((double)s->parallelism.stage_layers[t]));
            }
        } else if (k->type == KT_TIERS) {
            cJSON *arr = cJSON_AddArrayToObject(o, name);
            ok = arr != NULL;
            for (int t = 0; ok && t < s->checkpoint.ntiers; t++) {
                cJSON *to = cJSON_CreateObject();
                if (!to || !cJSON_AddItemToArray(arr, to)) {
                    cJSON_Delete(to);
                    ok = 0;
                    break;
                }
                for (size_t j = 0; ok && j < NKEYS; j++)
                    if (keys[j].flags & F_TIER)
                        ok = add_value(to, last_part(keys[j].path), &keys[j],
                                       &s->checkpoint.tiers[t]);
            }
        } else {
            ok = add_value(o, name, k, s);
        }
    }
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

LLMT_API llmt_status llmt_spec_to_json(const llmt_spec *spec, char *buf,
                                       size_t buflen, size_t *needed)
{
    if (needed)
        *needed = 0;
    if (!spec)
        return LLMT_ERR_NULL_POINTER;
    llmt_spec *s = (llmt_spec *)spec;
    cJSON *root = llmt__spec_to_cjson(spec);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return llmt__err_set(&s->err, LLMT_ERR_OUT_OF_MEMORY,
                             "spec: out of memory");
    llmt_status st = put_text(text, buf, buflen, needed);
    cJSON_free(text);
    if (st == LLMT_ERR_NULL_POINTER)
        llmt__err_set(&s->err, st, "spec: to_json: buf is NULL (buflen > 0)");
    else if (st != LLMT_OK)
        llmt__err_set(&s->err, st, "spec: to_json needs a buffer of %zu bytes",
                      needed ? *needed : 0);
    return st;
}

/* -------------------------------------------------------- introspection */

static const char *const type_names[] = {"object", "int",   "number",   "bool",     "string",
                                         "enum",   "array", "interval", "int array"};

LLMT_API size_t llmt_spec_key_count(void)
{
    return NKEYS;
}

LLMT_API const char *llmt_spec_key_name(size_t index)
{
    return index < NKEYS ? keys[index].path : NULL;
}

LLMT_API const char *llmt_spec_key_type(size_t index)
{
    return index < NKEYS ? type_names[keys[index].type] : NULL;
}

LLMT_API const char *llmt_spec_key_values(size_t index)
{
    return index < NKEYS ? keys[index].values : NULL;
}

LLMT_API const char *llmt_spec_key_doc(size_t index)
{
    return index < NKEYS ? keys[index].doc : NULL;
}
