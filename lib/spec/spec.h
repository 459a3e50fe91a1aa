/* The parsed job spec: plain fields, one per key of doc/job-spec.md, every
 * default filled in. The trainer, planner and CLI glue inside lib/ read the
 * fields directly; hosts use the getters of llmtrain.h. Field names mirror the
 * JSON paths (model.moe.experts is s->model.moe.experts). Enumerations are
 * stored as the index into the key's list of names (the LLMT_SPEC_* values
 * below); relative paths are kept exactly as written. */
#ifndef LLMT_SPEC_SPEC_H
#define LLMT_SPEC_SPEC_H

#include <stdint.h>

#include "core/internal.h"

#define LLMT_SPEC_MAX_TIERS 8

/* model.arch */
enum { LLMT_SPEC_ARCH_GPT2 = 0, LLMT_SPEC_ARCH_LLAMA = 1 };
/* parallelism.recompute */
enum { LLMT_SPEC_RECOMPUTE_NONE = 0, LLMT_SPEC_RECOMPUTE_SELECTIVE = 1,
       LLMT_SPEC_RECOMPUTE_FULL = 2 };
/* parallelism.pp_schedule (the same values as llmt_pp_schedule) */
enum { LLMT_SPEC_PP_1F1B = 0, LLMT_SPEC_PP_GPIPE = 1, LLMT_SPEC_PP_INTERLEAVED = 2 };
#define LLMT_SPEC_MAX_STAGES 1024
/* parallelism.cp_variant */
enum { LLMT_SPEC_CP_RING = 0, LLMT_SPEC_CP_ALLGATHER = 1 };
/* precision.param / master / gemm */
enum { LLMT_SPEC_PREC_BF16 = 0, LLMT_SPEC_PREC_FP16 = 1, LLMT_SPEC_PREC_FP32 = 2,
       LLMT_SPEC_PREC_FP8 = 3 };
/* precision.fp8_recipe */
enum { LLMT_SPEC_FP8_DELAYED = 0, LLMT_SPEC_FP8_CURRENT = 1,
       LLMT_SPEC_FP8_BLOCKWISE = 2 };
/* precision.fp8_format (the values of LLMT__FP8_FORMAT_* in exec/fp8.h) */
enum { LLMT_SPEC_FP8_E4M3 = 0, LLMT_SPEC_FP8_HYBRID = 1 };
/* optimizer.type */
enum { LLMT_SPEC_OPT_ADAMW = 0, LLMT_SPEC_OPT_ADAM = 1, LLMT_SPEC_OPT_SGD = 2 };
/* schedule.kind */
enum { LLMT_SPEC_SCHED_COSINE = 0, LLMT_SPEC_SCHED_LINEAR = 1,
       LLMT_SPEC_SCHED_WSD = 2, LLMT_SPEC_SCHED_CONSTANT = 3 };
/* train.device: emulated is the device engine (bf16 storage, fp32 master
 * weights) on the host, its groups staged as a GPU's (lib/exec/dev_emul.c) */
enum { LLMT_SPEC_DEVICE_CPU = 0, LLMT_SPEC_DEVICE_CUDA = 1, LLMT_SPEC_DEVICE_EMULATED = 2 };
/* data.tokenizer.kind */
enum { LLMT_SPEC_TOK_BYTE = 0, LLMT_SPEC_TOK_BPE = 1, LLMT_SPEC_TOK_GPT2 = 2 };
/* checkpoint.tiers[].kind */
enum { LLMT_SPEC_TIER_HOST = 0, LLMT_SPEC_TIER_LOCAL = 1, LLMT_SPEC_TIER_PEER = 2,
       LLMT_SPEC_TIER_DURABLE = 3 };
/* fault_tolerance.anomaly.policy */
enum {
    LLMT_SPEC_ANOMALY_SKIP = 0,
    LLMT_SPEC_ANOMALY_ROLLBACK = 1,
    LLMT_SPEC_ANOMALY_STOP = 2,
    LLMT_SPEC_ANOMALY_LOWER_LR = 3
};
/* fault_tolerance.sdc_replay: what a deterministic check runs again */
enum { LLMT_SPEC_SDC_WINDOW = 0, LLMT_SPEC_SDC_STEP = 1 };

typedef struct llmt_spec_tier {
    int kind;
    char *path;          /* NULL when not given */
    int64_t keep_last;   /* 0 = keep all */
    int64_t keep_every;  /* 0 = none kept for good */
} llmt_spec_tier;

/* One row of the hardware table (lib/spec/hardware.c). */
typedef struct llmt_hw_entry {
    const char *name;
    double bf16_tflops;   /* dense peak */
    double fp8_tflops;    /* dense peak, 0 = no fp8 */
    double fp32_tflops;   /* non-tensor-core fp32 peak */
    double hbm_GB;
    double hbm_TBps;
    double nvlink_GBps;   /* per GPU, both directions together */
    int gpus_per_node;
} llmt_hw_entry;

struct llmt_spec {
    llmt_context *ctx;
    llmt_err err;
    char *name;
    struct {
        int arch;
        int64_t layers, hidden, heads, kv_heads, ffn, vocab, seq_len;
        double params;         /* given or computed from the shape */
        double norm_eps, rope_theta;
        int tied_embeddings;
        struct {
            int64_t experts, top_k, expert_ffn, every, shared_experts;
            double capacity_factor, aux_loss_coef, z_loss_coef;
            int dropless;
            int renormalize; /* 0: raw softmax gates */
        } moe;
    } model;
    struct {
        int64_t tp, pp, dp, cp, ep, zero, virtual_stages;
        int recompute;
        int sequence_parallel;
        int cp_variant;  /* LLMT_SPEC_CP_* */
        int pp_schedule; /* LLMT_SPEC_PP_* */
        /* parallelism.stage_layers (nstage_layers 0: not given) */
        int64_t stage_layers[LLMT_SPEC_MAX_STAGES];
        int nstage_layers;
    } parallelism;
    struct {
        int param, master, gemm;
        int fp8_recipe;            /* LLMT_SPEC_FP8_* (gemm fp8 only) */
        int64_t fp8_amax_history;  /* delayed: steps of amax per tensor */
        int64_t fp8_margin;        /* scale = fp8_max / amax / 2^margin */
        int fp8_format;            /* e4m3 | hybrid (E5M2 gradients) */
    } precision;
    struct { int64_t micro, grad_accum, global; } batch;
    struct {
        int type;
        double lr, beta1, beta2, eps, weight_decay, grad_clip;
    } optimizer;
    struct {
        int kind;
        int64_t warmup_steps, total_steps;
        double min_lr_ratio;
        int64_t decay_steps;
    } schedule;
    struct {
        int64_t steps, seed;
        int device;
        int64_t eval_interval, eval_batches, log_interval, threads;
        int deterministic;
        int64_t sample_tokens;
    } train;
    struct {
        char *train, *val;  /* NULL when not given */
        struct { int kind; int64_t vocab_size; char *path; } tokenizer;
        int64_t seed;
    } data;
    struct {
        char *dir;
        int64_t interval;    /* steps; when interval_auto, 0 until planned */
        int interval_auto;   /* "auto": Young/Daly from the plan */
        int async;
        double save_stall_s, save_write_s, restore_s; /* 0 = estimate */
        int ntiers;
        llmt_spec_tier tiers[LLMT_SPEC_MAX_TIERS];
    } checkpoint;
    struct {
        double collective_timeout_s;
        int64_t max_restarts;
        double gpu_failures_per_hour; /* per GPU */
        double restart_s;
        struct {
            int policy;
            double zscore;
            double grad_zscore; /* 0 = off */
            double lr_factor;   /* policy lower_lr */
        } anomaly;
        int64_t sdc_interval; /* steps, 0 = off */
        int sdc_replay;       /* LLMT_SPEC_SDC_* */
        struct {
            int64_t interval; /* steps between reports, 0 = off */
            double margin;    /* slower than the median by this fraction */
            int64_t patience; /* reports in a row, then failed; 0 = never */
        } straggler;
    } fault_tolerance;
    struct {
        char *gpu;
        int64_t gpus_per_node, nodes_per_rack;
        double nvlink_GBps, ib_Gbps;
        int64_t ib_rails;
        double peak_tflops, fp8_tflops, hbm_GB; /* resolved from the table */
        double efficiency;  /* achievable fraction of peak for big GEMMs */
        double pcie_GBps;     /* device -> host per GPU (snapshots) */
        double storage_GBps;  /* durable storage, aggregate */
    } hardware;
    struct {
        char *jsonl, *plot, *http;
    } metrics;
    unsigned char *given; /* one flag per key of the table (llmt__spec_given) */
};

/* 1 if the JSON document set `path` (e.g. "batch.global"), else 0. */
int llmt__spec_given(const llmt_spec *s, const char *path);

/* Hardware table lookup by name (case-insensitive); NULL when unknown. */
const llmt_hw_entry *llmt__hw_lookup(const char *name);
const llmt_hw_entry *llmt__hw_table(int *count);

/* A deep copy (for the plan, which must not depend on the caller keeping the
 * spec alive). NULL on allocation failure. */
llmt_spec *llmt__spec_clone(const llmt_spec *s);
/* The same, allocated through and owned by `ctx` (the plan's or job's), so
 * the copy depends neither on the spec nor on the spec's context. */
llmt_spec *llmt__spec_clone_into(const llmt_spec *s, llmt_context *ctx);

/* The default llama FFN size for `hidden`: 256 * ceil(8h/3 / 256). */
int64_t llmt__spec_llama_ffn(int64_t hidden);
/* Parameter count from the shape (embeddings, layers, final norm, head). */
double llmt__spec_param_count(const llmt_spec *s);

/* The normalised spec as a cJSON tree (a cJSON *; the plan embeds it). */
void *llmt__spec_to_cjson(const llmt_spec *s);

#endif
