/* No silent no-ops: walks the whole spec key table (llmt_spec_key_count /
 * llmt_spec_key_name) and, for every key, asserts that setting it either
 * changes something observable in an llmt_job (its run: losses, learning
 * rates, validation, events, sample; its files; its resolved settings; its
 * plan) or is refused at creation with a message naming the key. A key
 * added to the table without a case here fails the test: decide what it
 * does first. Containers ("object" keys) need at least one child key.
 * usage: test_job_keys CORPUS_DIR (any directory of text files) */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"

enum expect { REFUSED, RUN, INFO, FILES, PLAN, PLAN8 };
static const char *const expect_names[] = {"refused", "run",  "info",
                                           "files",   "plan", "plan at 8 GPUs"};

typedef struct kcase {
    const char *key;  /* the key of the table this case covers */
    const char *base; /* JSON merged into the baseline of this case, or NULL */
    const char *set;  /* JSON merged on top of it: the key set */
    enum expect want;
    const char *fault; /* $LLMT_FAULT for the baseline and the variant */
} kcase;

/* The baseline: a 1-layer GPT-2 on prepared byte-token shards (PREP),
 * 4 steps, a validation every 2, checkpoints every 2. SMALL is a small
 * text corpus for the tokenizer keys. */
static const char *BASE =
    "{\"name\": \"kt\", \"model\": {\"arch\": \"gpt2\", \"layers\": 1, \"hidden\": 32,"
    " \"heads\": 2, \"vocab\": 320, \"seq_len\": 16},"
    " \"batch\": {\"micro\": 2, \"grad_accum\": 1}, \"optimizer\": {\"lr\": 1e-2},"
    " \"schedule\": {\"kind\": \"cosine\", \"warmup_steps\": 1},"
    " \"train\": {\"steps\": 4, \"seed\": 3, \"eval_interval\": 2, \"eval_batches\": 1,"
    " \"log_interval\": 2, \"threads\": 1, \"sample_tokens\": 4},"
    " \"data\": {\"train\": \"@PREP@\", \"tokenizer\": {\"kind\": \"byte\"}},"
    " \"checkpoint\": {\"interval\": 2}, \"hardware\": {\"gpu\": \"cpu\"}}";

#define LLAMA "{\"model\": {\"arch\": \"llama\", \"heads\": 4}}"
#define MOE                                                                                 \
    "{\"model\": {\"arch\": \"llama\", \"heads\": 4, \"moe\": {\"experts\": 4, \"top_k\": " \
    "2}}}"
#define MOE_TIGHT                                                                           \
    "{\"model\": {\"arch\": \"llama\", \"heads\": 4, \"moe\": {\"experts\": 4, \"top_k\": " \
    "2, \"capacity_factor\": 0.5}}}"
#define MOE2                                                                   \
    "{\"model\": {\"arch\": \"llama\", \"heads\": 4, \"layers\": 2, \"moe\": " \
    "{\"experts\": 4, \"top_k\": 2}}}"
#define MOE_EMUL                                                                            \
    "{\"model\": {\"arch\": \"llama\", \"heads\": 4, \"moe\": {\"experts\": 4, \"top_k\": " \
    "2}}, \"train\": {\"device\": \"emulated\"}}"
/* expert_ffn 24: the fp8 expert GEMMs need widths in multiples of 16 */
#define MOE_EMUL24                                                                          \
    "{\"model\": {\"arch\": \"llama\", \"heads\": 4, \"moe\": {\"experts\": 4, \"top_k\": " \
    "2, \"expert_ffn\": 24}}, \"train\": {\"device\": \"emulated\"}}"
#define SMALLTXT                                                                              \
    "{\"data\": {\"train\": \"@SMALL@\", \"val\": \"@PREP@/val\", \"tokenizer\": {\"kind\": " \
    "\"bpe\", \"vocab_size\": 300}}}"
#define AUTO "{\"checkpoint\": {\"interval\": \"auto\"}}"
#define GPU8 "{\"hardware\": {\"gpu\": \"H100-SXM\"}}"
/* A loss and gradient-norm spike injected at step 10 (LLMT_FAULT spike:
 * the token embedding x20 for that step): its size does not depend on
 * the engine's rounding, unlike a spike hoped for from a high LR. The
 * baseline's thresholds are out of reach; the variant's are not. */
#define SPIKE "spike:0:10"
#define SPIKY \
    "{\"train\": {\"steps\": 12}, \"fault_tolerance\": {\"anomaly\": {\"zscore\": 1e6}}}"
#define SPIKY_LOWER                                                                    \
    "{\"train\": {\"steps\": 12}, \"fault_tolerance\": {\"anomaly\": {\"zscore\": 4, " \
    "\"policy\": \"lower_lr\"}}}"

/* a case without an injected fault */
/* clang-format off */
#define K(key, base, set, want) {(key), (base), (set), (want), NULL}
/* clang-format on */

static const kcase cases[] = {
    K("name", NULL, "{\"name\": \"other\"}", INFO),
    K("model.arch", NULL, "{\"model\": {\"arch\": \"llama\"}}", RUN),
    K("model.layers", NULL, "{\"model\": {\"layers\": 2}}", RUN),
    K("model.hidden", NULL, "{\"model\": {\"hidden\": 64}}", RUN),
    K("model.heads", NULL, "{\"model\": {\"heads\": 4}}", RUN),
    K("model.kv_heads", LLAMA, "{\"model\": {\"kv_heads\": 2}}", RUN),
    K("model.ffn", NULL, "{\"model\": {\"ffn\": 64}}", RUN),
    K("model.vocab", NULL, "{\"model\": {\"vocab\": 384}}", RUN),
    K("model.seq_len", NULL, "{\"model\": {\"seq_len\": 8}}", RUN),
    K("model.params", NULL, "{\"model\": {\"params\": 1000}}", REFUSED),
    K("model.norm_eps", NULL, "{\"model\": {\"norm_eps\": 0.5}}", RUN),
    K("model.rope_theta", LLAMA, "{\"model\": {\"rope_theta\": 3}}", RUN),
    K("model.rope_theta", NULL, "{\"model\": {\"rope_theta\": 3}}", REFUSED),
    K("model.tied_embeddings", LLAMA, "{\"model\": {\"tied_embeddings\": true}}", RUN),
    /* MoE (llama, one rank, cpu); drops need a tight capacity */
    K("model.moe.experts", LLAMA, "{\"model\": {\"moe\": {\"experts\": 4, \"top_k\": 2}}}",
      RUN),
    K("model.moe.experts", NULL, "{\"model\": {\"moe\": {\"experts\": 4, \"top_k\": 2}}}",
      REFUSED), /* gpt2 */
    K("model.moe.top_k", MOE, "{\"model\": {\"moe\": {\"top_k\": 1}}}", RUN),
    K("model.moe.top_k", NULL, "{\"model\": {\"moe\": {\"top_k\": 2}}}", REFUSED),
    K("model.moe.expert_ffn", MOE, "{\"model\": {\"moe\": {\"expert_ffn\": 24}}}", RUN),
    K("model.moe.expert_ffn", NULL, "{\"model\": {\"moe\": {\"expert_ffn\": 64}}}", REFUSED),
    K("model.moe.capacity_factor", MOE, "{\"model\": {\"moe\": {\"capacity_factor\": 0.5}}}",
      RUN),
    K("model.moe.capacity_factor", NULL, "{\"model\": {\"moe\": {\"capacity_factor\": 2}}}",
      REFUSED),
    /* against the default capacity 1.25 (a factor beside dropless is
     * refused: the case after it) */
    K("model.moe.dropless", MOE, "{\"model\": {\"moe\": {\"dropless\": true}}}", RUN),
    K("model.moe.capacity_factor", MOE_TIGHT, "{\"model\": {\"moe\": {\"dropless\": true}}}",
      REFUSED),
    K("model.moe.aux_loss_coef", MOE, "{\"model\": {\"moe\": {\"aux_loss_coef\": 0.5}}}", RUN),
    K("model.moe.z_loss_coef", MOE, "{\"model\": {\"moe\": {\"z_loss_coef\": 0.5}}}", RUN),
    K("model.moe.every", MOE2, "{\"model\": {\"moe\": {\"every\": 2}}}", RUN),
    K("model.moe.every", NULL, "{\"model\": {\"moe\": {\"every\": 2}}}", REFUSED),
    K("model.moe.shared_experts", MOE, "{\"model\": {\"moe\": {\"shared_experts\": 1}}}", RUN),
    K("model.moe.shared_experts", NULL, "{\"model\": {\"moe\": {\"shared_experts\": 1}}}",
      REFUSED),
    K("model.moe.renormalize", MOE, "{\"model\": {\"moe\": {\"renormalize\": false}}}", RUN),
    K("model.moe.renormalize", NULL, "{\"model\": {\"moe\": {\"renormalize\": false}}}",
      REFUSED),
    K("parallelism.tp", NULL, "{\"parallelism\": {\"tp\": 2}}", REFUSED),
    K("parallelism.pp", "{\"model\": {\"layers\": 2}}", "{\"parallelism\": {\"pp\": 2}}",
      REFUSED),
    /* with pp 1 there is no pipeline to schedule or split: refused; their
     * effect under pp 2 is test job-pp's (GPipe, stages of 1 and 3) */
    K("parallelism.pp_schedule", NULL, "{\"parallelism\": {\"pp_schedule\": \"gpipe\"}}",
      REFUSED),
    K("parallelism.stage_layers", NULL, "{\"parallelism\": {\"stage_layers\": [1]}}", REFUSED),
    K("parallelism.dp", NULL, "{\"parallelism\": {\"dp\": 2}}", REFUSED),
    K("parallelism.cp", NULL, "{\"parallelism\": {\"cp\": 2}}", REFUSED),
    /* with cp 1 there is no variant to choose: refused; its effect under
     * cp 2 is test job-cp's (both variants against one rank) */
    K("parallelism.cp_variant", NULL, "{\"parallelism\": {\"cp_variant\": \"allgather\"}}",
      REFUSED),
    K("parallelism.ep", NULL, "{\"parallelism\": {\"ep\": 2}}", REFUSED),
    K("parallelism.zero", NULL, "{\"parallelism\": {\"zero\": 1}}", REFUSED),
    /* without a pipeline there are no chunks: refused; their effect under
     * pp 2 is test job-pp's (interleaved against one rank) */
    K("parallelism.virtual_stages", NULL, "{\"parallelism\": {\"virtual_stages\": 2}}",
      REFUSED),
    K("parallelism.recompute", NULL, "{\"parallelism\": {\"recompute\": \"full\"}}", INFO),
    K("parallelism.recompute", NULL, "{\"parallelism\": {\"recompute\": \"selective\"}}", INFO),
    /* a one-rank job cannot run tp 2: the plan (its activation memory)
     * shows it here, test job-sp runs it */
    K("parallelism.sequence_parallel",
      "{\"parallelism\": {\"tp\": 2}, \"hardware\": {\"gpu\": \"H100-SXM\"}}",
      "{\"parallelism\": {\"sequence_parallel\": true}}", PLAN8),
    K("precision.param", NULL, "{\"precision\": {\"param\": \"bf16\"}}", REFUSED),
    K("precision.master", NULL, "{\"precision\": {\"master\": \"bf16\"}}", REFUSED),
    K("precision.gemm", NULL, "{\"precision\": {\"gemm\": \"fp8\"}}", REFUSED),
    /* fp8 with MoE layers on the device engine: the experts' GEMMs in fp8
     * (padded per expert), unless a width is not a multiple of 16 */
    K("precision.gemm", MOE_EMUL, "{\"precision\": {\"gemm\": \"fp8\"}}", RUN),
    K("precision.gemm", MOE_EMUL24, "{\"precision\": {\"gemm\": \"fp8\"}}", REFUSED),
    K("precision.fp8_recipe", NULL, "{\"precision\": {\"fp8_recipe\": \"current\"}}", REFUSED),
    K("precision.fp8_amax_history", NULL, "{\"precision\": {\"fp8_amax_history\": 4}}",
      REFUSED),
    K("precision.fp8_margin", NULL, "{\"precision\": {\"fp8_margin\": 2}}", REFUSED),
    K("precision.fp8_format", NULL, "{\"precision\": {\"fp8_format\": \"e4m3\"}}", REFUSED),
    K("batch.micro", NULL, "{\"batch\": {\"micro\": 4}}", RUN),
    K("batch.grad_accum", NULL, "{\"batch\": {\"grad_accum\": 2}}", RUN),
    K("batch.global", NULL, "{\"batch\": {\"grad_accum\": null, \"global\": 4}}", RUN),
    K("optimizer.type", NULL, "{\"optimizer\": {\"type\": \"sgd\"}}", REFUSED),
    K("optimizer.lr", NULL, "{\"optimizer\": {\"lr\": 3e-2}}", RUN),
    K("optimizer.beta1", NULL, "{\"optimizer\": {\"beta1\": 0.5}}", RUN),
    K("optimizer.beta2", NULL, "{\"optimizer\": {\"beta2\": 0.5}}", RUN),
    K("optimizer.eps", NULL, "{\"optimizer\": {\"eps\": 0.1}}", RUN),
    K("optimizer.weight_decay", NULL, "{\"optimizer\": {\"weight_decay\": 50}}", RUN),
    K("optimizer.grad_clip", NULL, "{\"optimizer\": {\"grad_clip\": 0.01}}", RUN),
    K("schedule.kind", NULL, "{\"schedule\": {\"kind\": \"linear\"}}", RUN),
    K("schedule.warmup_steps", NULL, "{\"schedule\": {\"warmup_steps\": 3}}", RUN),
    K("schedule.total_steps", NULL, "{\"schedule\": {\"total_steps\": 100}}", RUN),
    /* a constant LR has no length: lr_at never reads it */
    K("schedule.total_steps", "{\"schedule\": {\"kind\": \"constant\"}}",
      "{\"schedule\": {\"total_steps\": 100}}", REFUSED),
    K("schedule.min_lr_ratio", NULL, "{\"schedule\": {\"min_lr_ratio\": 0.9}}", RUN),
    K("schedule.decay_steps", "{\"schedule\": {\"kind\": \"wsd\"}}",
      "{\"schedule\": {\"decay_steps\": 3}}", RUN),
    K("schedule.decay_steps", NULL, "{\"schedule\": {\"decay_steps\": 3}}", REFUSED),
    K("train.steps", NULL, "{\"train\": {\"steps\": 3}}", RUN),
    K("train.seed", NULL, "{\"train\": {\"seed\": 4}}", RUN),
    K("train.device", NULL, "{\"train\": {\"device\": \"cuda\"}}", INFO), /* or refused */
    K("train.eval_interval", NULL, "{\"train\": {\"eval_interval\": 1}}", RUN),
    K("train.eval_batches", NULL, "{\"train\": {\"eval_batches\": 3}}", RUN),
    K("train.log_interval", NULL, "{\"train\": {\"log_interval\": 1}}", RUN),
    K("train.threads", NULL, "{\"train\": {\"threads\": 2}}", INFO),
    K("train.deterministic", NULL, "{\"train\": {\"deterministic\": true}}", INFO),
    K("train.sample_tokens", NULL, "{\"train\": {\"sample_tokens\": 9}}", RUN),
    K("data.train", NULL, "{\"data\": {\"train\": \"@SMALL@\", \"val\": \"@PREP@/val\"}}", RUN),
    K("data.val", NULL, "{\"data\": {\"val\": \"@PREP@/train\"}}", RUN),
    K("data.tokenizer.kind", SMALLTXT,
      "{\"data\": {\"tokenizer\": {\"kind\": \"byte\", \"vocab_size\": null}}}", RUN),
    K("data.tokenizer.vocab_size", SMALLTXT,
      "{\"data\": {\"tokenizer\": {\"vocab_size\": 280}}}", RUN),
    K("data.tokenizer.path", SMALLTXT,
      "{\"data\": {\"tokenizer\": {\"kind\": \"byte\", \"vocab_size\": null, \"path\": "
      "\"@PREP@/tokenizer.bin\"}}}",
      RUN),
    K("data.seed", NULL, "{\"data\": {\"seed\": 9}}", RUN),
    K("checkpoint.dir", NULL, "{\"checkpoint\": {\"dir\": \"ck2\"}}", FILES),
    K("checkpoint.interval", NULL, "{\"checkpoint\": {\"interval\": 3}}", FILES),
    K("checkpoint.interval", NULL, AUTO, INFO),
    K("checkpoint.async", NULL, "{\"checkpoint\": {\"async\": false}}", INFO),
    /* no periodic saves: the last one is synchronous whatever the key
     * ("false" says so, and is accepted) */
    K("checkpoint.async", "{\"checkpoint\": {\"interval\": 0}}",
      "{\"checkpoint\": {\"async\": true}}", REFUSED),
    K("checkpoint.save_stall_s", AUTO, "{\"checkpoint\": {\"save_stall_s\": 100}}", INFO),
    K("checkpoint.save_write_s", AUTO, "{\"checkpoint\": {\"save_write_s\": 1e5}}", INFO),
    K("checkpoint.restore_s", NULL, "{\"checkpoint\": {\"restore_s\": 77}}", PLAN),
    K("checkpoint.tiers", NULL,
      "{\"checkpoint\": {\"tiers\": [{\"kind\": \"local\", \"keep_last\": 1}]}}", FILES),
    K("checkpoint.tiers[].kind", NULL,
      "{\"checkpoint\": {\"tiers\": [{\"kind\": \"local\"}, {\"kind\": \"durable\", \"path\": "
      "\"dur\"}]}}",
      FILES),
    K("checkpoint.tiers[].kind", NULL, "{\"checkpoint\": {\"tiers\": [{\"kind\": \"peer\"}]}}",
      REFUSED),
    K("checkpoint.tiers[].path", NULL,
      "{\"checkpoint\": {\"tiers\": [{\"kind\": \"local\", \"path\": \"ck3\"}]}}", FILES),
    K("checkpoint.tiers[].keep_last", "{\"checkpoint\": {\"tiers\": [{\"kind\": \"local\"}]}}",
      "{\"checkpoint\": {\"tiers\": [{\"kind\": \"local\", \"keep_last\": 1}]}}", FILES),
    K("checkpoint.tiers[].keep_every",
      "{\"checkpoint\": {\"tiers\": [{\"kind\": \"local\", \"keep_last\": 1}]}}",
      "{\"checkpoint\": {\"tiers\": [{\"kind\": \"local\", \"keep_last\": 1, \"keep_every\": "
      "2}]}}",
      FILES),
    /* one rank has no communicator to time out (a caller's communicator
     * with another timeout is refused too: main below) */
    K("fault_tolerance.collective_timeout_s", NULL,
      "{\"fault_tolerance\": {\"collective_timeout_s\": 5}}", REFUSED),
    K("fault_tolerance.max_restarts", NULL, "{\"fault_tolerance\": {\"max_restarts\": 1}}",
      REFUSED),
    K("fault_tolerance.gpu_failures_per_hour", AUTO,
      "{\"fault_tolerance\": {\"gpu_failures_per_hour\": 0.5}}", INFO),
    K("fault_tolerance.gpu_failures_per_hour", NULL,
      "{\"fault_tolerance\": {\"gpu_failures_per_hour\": 0.5}}", PLAN),
    K("fault_tolerance.restart_s", NULL, "{\"fault_tolerance\": {\"restart_s\": 9}}", PLAN),
    K("fault_tolerance.anomaly.policy",
      "{\"optimizer\": {\"lr\": 1e3, \"grad_clip\": 0}, \"checkpoint\": {\"interval\": 1}}",
      "{\"fault_tolerance\": {\"anomaly\": {\"policy\": \"stop\"}}}", RUN),
    /* a rollback without periodic checkpoints has nothing to go back to */
    K("fault_tolerance.anomaly.policy", "{\"checkpoint\": {\"interval\": 0}}",
      "{\"fault_tolerance\": {\"anomaly\": {\"policy\": \"rollback\"}}}", REFUSED),
    {"fault_tolerance.anomaly.zscore", SPIKY,
     "{\"fault_tolerance\": {\"anomaly\": {\"zscore\": 4}}}", RUN, SPIKE},
    {"fault_tolerance.anomaly.grad_zscore", SPIKY,
     "{\"fault_tolerance\": {\"anomaly\": {\"grad_zscore\": 2}}}", RUN, SPIKE},
    {"fault_tolerance.anomaly.policy", SPIKY_LOWER,
     "{\"fault_tolerance\": {\"anomaly\": {\"policy\": \"skip\"}}}", RUN, SPIKE},
    {"fault_tolerance.anomaly.lr_factor", SPIKY_LOWER,
     "{\"fault_tolerance\": {\"anomaly\": {\"lr_factor\": 0.1}}}", RUN, SPIKE},
    K("fault_tolerance.anomaly.lr_factor", NULL,
      "{\"fault_tolerance\": {\"anomaly\": {\"lr_factor\": 0.1}}}", REFUSED),
    /* cross-replica checks on one rank: refused (test/fault runs them) */
    K("fault_tolerance.sdc_interval", NULL, "{\"fault_tolerance\": {\"sdc_interval\": 2}}",
      REFUSED),
    /* what the check replays: refused without a check (launch-sdc-zero3
     * and -window show each scope's effect on 2 ranks) */
    K("fault_tolerance.sdc_replay", NULL, "{\"fault_tolerance\": {\"sdc_replay\": \"step\"}}",
      REFUSED),
    K("fault_tolerance.straggler.interval", NULL,
      "{\"fault_tolerance\": {\"straggler\": {\"interval\": 2}}}", REFUSED),
    K("fault_tolerance.straggler.margin", NULL,
      "{\"fault_tolerance\": {\"straggler\": {\"margin\": 0.2}}}", REFUSED),
    K("fault_tolerance.straggler.patience", NULL,
      "{\"fault_tolerance\": {\"straggler\": {\"patience\": 1}}}", REFUSED),
    K("hardware.gpu", NULL, "{\"hardware\": {\"gpu\": \"H100-SXM\"}}", PLAN),
    K("hardware.gpus_per_node", GPU8, "{\"hardware\": {\"gpus_per_node\": 2}}", PLAN8),
    K("hardware.nodes_per_rack", GPU8,
      "{\"hardware\": {\"nodes_per_rack\": 1, \"gpus_per_node\": 1}}", PLAN8),
    K("hardware.nvlink_GBps", GPU8, "{\"hardware\": {\"nvlink_GBps\": 1}}", PLAN8),
    K("hardware.ib_Gbps", GPU8, "{\"hardware\": {\"ib_Gbps\": 1, \"gpus_per_node\": 1}}",
      PLAN8),
    K("hardware.ib_rails", GPU8, "{\"hardware\": {\"ib_rails\": 1, \"gpus_per_node\": 1}}",
      PLAN8),
    K("hardware.peak_tflops", NULL, "{\"hardware\": {\"peak_tflops\": 7}}", PLAN),
    /* GEMMs large enough to be compute-bound: on the tiny default model
     * the roofline makes them memory-bound and the fp8 peak rightly does
     * not change the prediction */
    K("hardware.fp8_tflops",
      "{\"precision\": {\"gemm\": \"fp8\"}, \"train\": {\"device\": \"cuda\"}, \"hardware\": "
      "{\"gpu\": \"H100-SXM\"}, \"model\": {\"layers\": 2, \"hidden\": 4096, \"heads\": 32, "
      "\"seq_len\": 2048}, \"batch\": {\"micro\": 4}}",
      "{\"hardware\": {\"fp8_tflops\": 100}}", PLAN8),
    K("hardware.hbm_GB", NULL, "{\"hardware\": {\"hbm_GB\": 3}}", PLAN),
    K("hardware.efficiency", NULL, "{\"hardware\": {\"efficiency\": 0.1}}", PLAN),
    K("hardware.pcie_GBps", NULL, "{\"hardware\": {\"pcie_GBps\": 0.001}}", PLAN),
    K("hardware.storage_GBps", NULL, "{\"hardware\": {\"storage_GBps\": 0.001}}", PLAN),
    K("metrics.jsonl", NULL, "{\"metrics\": {\"jsonl\": \"m2.jsonl\"}}", FILES),
    K("metrics.plot", NULL, "{\"metrics\": {\"plot\": \"p2.svg\"}}", FILES),
    /* the Prometheus endpoint on any free port: its address in metrics.http
     * (test obs scrapes it) */
    K("metrics.http", NULL, "{\"metrics\": {\"http\": \"127.0.0.1:0\"}}", FILES),
    K("metrics.http", NULL, "{\"metrics\": {\"http\": \"localhost:9400\"}}", REFUSED),
};
#define NCASES (sizeof cases / sizeof cases[0])

static char tmp[512], prep[700], small[700];
static int runs;

/* Deep merge of `over` into `into`; a JSON null removes the key. */
static void merge(cJSON *into, const cJSON *over)
{
    for (const cJSON *c = over->child; c; c = c->next) {
        cJSON *have = cJSON_GetObjectItemCaseSensitive(into, c->string);
        if (cJSON_IsNull(c)) {
            cJSON_DeleteItemFromObjectCaseSensitive(into, c->string);
        } else if (have && cJSON_IsObject(have) && cJSON_IsObject(c)) {
            merge(have, c);
        } else {
            cJSON_DeleteItemFromObjectCaseSensitive(into, c->string);
            cJSON_AddItemToObject(into, c->string, cJSON_Duplicate(c, 1));
        }
    }
}

static void subst(char *s, size_t cap, const char *pat, const char *val)
{
    char *p;
    while ((p = strstr(s, pat))) {
        char rest[8192];
        snprintf(rest, sizeof rest, "%s", p + strlen(pat));
        snprintf(p, cap - (size_t)(p - s), "%s%s", val, rest);
    }
}

static char *spec_json(const char *base, const char *set)
{
    cJSON *b = cJSON_Parse(BASE);
    const char *parts[2] = {base, set};
    for (int i = 0; i < 2; i++)
        if (parts[i]) {
            cJSON *o = cJSON_Parse(parts[i]);
            if (!o) {
                fprintf(stderr, "bad case JSON: %s\n", parts[i]);
                exit(1);
            }
            merge(b, o);
            cJSON_Delete(o);
        }
    char *txt = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    static char out[8192];
    snprintf(out, sizeof out, "%s", txt);
    free(txt);
    subst(out, sizeof out, "@PREP@", prep);
    subst(out, sizeof out, "@SMALL@", small);
    return out;
}

/* What one job did, as text per aspect, so that a case can say which one
 * must differ from its baseline. */
typedef struct outcome {
    llmt_status create;
    char err[2048];
    char run[16384]; /* per step: loss, lr, norm, val, events; status; sample */
    char info[2048];
    char files[4096];
    llmt_plan_estimate est, est8;
} outcome;

static void list_files(const char *dir, const char *rel, char *out, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char names[256][256];
    int n = 0;
    while ((e = readdir(d)) && n < 256)
        if (e->d_name[0] != '.' && strcmp(e->d_name, "data") && strncmp(e->d_name, "rank-", 5))
            snprintf(names[n++], 256, "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    for (int i = 0; i < n; i++) {
        char p[1024], r[1024];
        int lp = snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        int lr = snprintf(r, sizeof r, "%s%s", rel, names[i]);
        if (lp < 0 || (size_t)lp >= sizeof p || lr < 0 || (size_t)lr + 1 >= sizeof r) {
            CHECK(!"a file's path is too long to list"); /* room for the '/' below */
            continue;
        }
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s ", r);
        struct stat st;
        /* inside a checkpoint step only the step itself matters */
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode) && strncmp(names[i], "step-", 5)) {
            strcat(r, "/");
            list_files(p, r, out, cap);
        }
    }
}

/* plan_only: the plans alone (est, est8), for a case whose check is the
 * 8-GPU plan: its job is never compared, and creating one would build the
 * model (the fp8 case's is 400M parameters, most of this test's time). */
static void run_case(const char *json, int plan_only, outcome *o)
{
    memset(o, 0, sizeof o[0]);
    char dir[700];
    snprintf(dir, sizeof dir, "%s/run%d", tmp, runs++);
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_level = LLMT_LOG_ERROR;
    llmt_context *ctx = NULL;
    llmt_context_create(&co, &ctx);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = dir;
    llmt_job *job = NULL;
    if (!plan_only) {
        o->create = llmt_job_create_from_json(ctx, json, strlen(json), &jo, &job);
        snprintf(o->err, sizeof o->err, "%s", llmt_context_last_error(ctx));
    }
    llmt_spec *sp = NULL;
    llmt_status ps = llmt_spec_parse_json(ctx, json, strlen(json), &sp);
    if (plan_only) {
        o->create = ps;
        snprintf(o->err, sizeof o->err, "%s", llmt_context_last_error(ctx));
    }
    if (ps == LLMT_OK) {
        llmt_plan *p8 = NULL;
        o->est8.struct_size = sizeof o->est8;
        if (llmt_plan_create(ctx, sp, 8, &p8) == LLMT_OK)
            llmt_plan_get_estimate(p8, &o->est8);
        llmt_plan_destroy(p8);
        llmt_spec_destroy(sp);
    }
    if (o->create == LLMT_OK) {
        const llmt_plan *plan = NULL;
        llmt_job_get_plan(job, &plan);
        o->est.struct_size = sizeof o->est;
        llmt_plan_get_estimate(plan, &o->est);
        llmt_status s = LLMT_OK;
        size_t l;
        while (s == LLMT_OK) {
            llmt_job_metrics m;
            memset(&m, 0, sizeof m);
            m.struct_size = sizeof m;
            s = llmt_job_step(job, &m);
            l = strlen(o->run);
            snprintf(o->run + l, sizeof o->run - l,
                     "[%lld %.6f %.6g %.5f %.6f %.6f e%x a%lld s%lld r%lld] ",
                     (long long)m.step, (double)m.loss, (double)m.lr, (double)m.grad_norm,
                     (double)m.val_loss, (double)m.start_val_loss,
                     m.events & ~LLMT_JOB_EVENT_SAVED, (long long)m.anomalies,
                     (long long)m.skipped, (long long)m.rollbacks);
        }
        l = strlen(o->run);
        snprintf(o->run + l, sizeof o->run - l, "status %s %.60s ", llmt_status_string(s),
                 s == LLMT_ERR_STATE ? "" : llmt_job_last_error(job));
        llmt_job_finish(job);
        char sample[512] = "";
        llmt_job_sample(job, sample, sizeof sample, NULL);
        l = strlen(o->run);
        snprintf(o->run + l, sizeof o->run - l, "sample '%s'", sample);
        llmt_job_info i;
        memset(&i, 0, sizeof i);
        i.struct_size = sizeof i;
        llmt_job_get_info(job, &i);
        snprintf(o->info, sizeof o->info,
                 "%s threads %d det %d rec %d async %d auto %d stall %.3g write %.3g mtbf "
                 "%.4g timeout %g device %d params %lld",
                 i.name, (int)i.threads, (int)i.deterministic, (int)i.recompute,
                 (int)i.ckpt_async, (int)i.ckpt_auto,
                 i.ckpt_auto && i.auto_stall_s >= 1 ? i.auto_stall_s : 0,
                 i.auto_write_s >= 1 ? i.auto_write_s : 0, i.auto_mtbf_s,
                 i.collective_timeout_s, (int)i.device, (long long)i.params);
        llmt_job_destroy(job);
        list_files(dir, "", o->files, sizeof o->files);
    }
    llmt_context_destroy(ctx);
}

static int differs(const outcome *a, const outcome *b, enum expect w)
{
    switch (w) {
    case RUN: return strcmp(a->run, b->run) != 0;
    case INFO: return strcmp(a->info, b->info) != 0;
    case FILES: return strcmp(a->files, b->files) != 0;
    case PLAN: return memcmp(&a->est, &b->est, sizeof a->est) != 0;
    case PLAN8: return memcmp(&a->est8, &b->est8, sizeof a->est8) != 0;
    default: return 0;
    }
}

/* A spec (the baseline with `set` merged) refused at creation on rank 0 of
 * `world` ranks, with the caller's communicator `comm` (NULL: none), the
 * message naming `key`. Refused before any collective, so one thread can
 * stand for the rank. */
static void refused_at(const char *what, const char *set, int world, llmt_comm *comm,
                       const char *key)
{
    char dir[700];
    snprintf(dir, sizeof dir, "%s/run%d", tmp, runs++);
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_context_set_log_level(ctx, LLMT_LOG_OFF);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = dir;
    jo.world_size = world;
    jo.rank = 0;
    jo.comm = comm;
    const char *json = spec_json(NULL, set);
    llmt_job *job = NULL;
    llmt_status s = llmt_job_create_from_json(ctx, json, strlen(json), &jo, &job);
    const char *msg = llmt_context_last_error(ctx);
    int ok = s != LLMT_OK && strstr(msg, key) != NULL;
    printf("%s %-40s %-15s %s\n", ok ? "ok  " : "FAIL", key, what, s != LLMT_OK ? msg : set);
    CHECK(ok);
    llmt_job_destroy(job);
    llmt_context_destroy(ctx);
}

/* The keys whose refusal needs more than one rank. */
static void refused_beside_ranks(void)
{
    /* global 4 = micro 2 x accum 2 holds for dp 1; on 2 ranks (dp 2 from
     * the world) the plan would keep global and replace the given accum */
    refused_at("2 ranks", "{\"batch\": {\"grad_accum\": 2, \"global\": 4}}", 2, NULL,
               "batch.grad_accum");
    /* the caller's communicator times out after 5 s, the spec says 7 */
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.timeout_ms = 5000;
    llmt_comm *comms[2] = {NULL, NULL};
    CHECK_STATUS(llmt_comm_create_inproc(NULL, 2, &co, comms), LLMT_OK);
    if (comms[0])
        refused_at("caller's comm", "{\"fault_tolerance\": {\"collective_timeout_s\": 7}}", 2,
                   comms[0], "fault_tolerance.collective_timeout_s");
    llmt_comm_destroy(comms[0]);
    llmt_comm_destroy(comms[1]);
}

/* The baselines run so far, by base, fault and plan_only: a base used again
 * further down the table is not run again (its outcome does not depend on
 * when it runs: one thread, fixed seeds, files listed relative to the run). */
typedef struct baseline {
    const char *base, *fault;
    int plan_only;
    outcome o;
} baseline;
static baseline bases[NCASES];
static size_t nbases;

static const outcome *baseline_of(const kcase *kc, int plan_only)
{
    const char *b = kc->base ? kc->base : "", *f = kc->fault ? kc->fault : "";
    for (size_t i = 0; i < nbases; i++)
        if (!strcmp(bases[i].base, b) && !strcmp(bases[i].fault, f) &&
            bases[i].plan_only == plan_only)
            return &bases[i].o;
    baseline *n = &bases[nbases++];
    n->base = b;
    n->fault = f;
    n->plan_only = plan_only;
    run_case(spec_json(kc->base, NULL), plan_only, &n->o);
    return &n->o;
}

/* A key of the table: "checkpoint.tiers[].kind" is covered by that path. */
static int covered(const char *key)
{
    for (size_t c = 0; c < NCASES; c++)
        if (!strcmp(cases[c].key, key))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_job_keys CORPUS_DIR\n");
        return 2;
    }
    snprintf(tmp, sizeof tmp, "/tmp/llmt-job-keys-XXXXXX");
    if (!mkdtemp(tmp))
        return 1;
    /* PREP: the corpus prepared once into byte-token shards; SMALL: one
     * file of it, as text (the largest written one: the generated ABI
     * reference is mostly repeated prototype lines, which the quality
     * filters may drop whole) */
    char cmd[2048];
    snprintf(small, sizeof small, "%s/small", tmp);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s && head -c 60000 \"$(ls -S %s/*.md | grep -v abi-reference | head "
             "-1)\" > %s/a.md",
             small, argv[1], small);
    CHECK(system(cmd) == 0);
    {
        char json[4096];
        snprintf(json, sizeof json, "%s", BASE);
        subst(json, sizeof json, "@PREP@", argv[1]);
        llmt_context *ctx = NULL;
        llmt_context_create(NULL, &ctx);
        llmt_job_opts jo;
        llmt_job_opts_init(&jo, sizeof jo);
        char d[700];
        snprintf(d, sizeof d, "%s/prep", tmp);
        jo.run_dir = d;
        llmt_job *job = NULL;
        llmt_status s = llmt_job_create_from_json(ctx, json, strlen(json), &jo, &job);
        if (s != LLMT_OK)
            fprintf(stderr, "preparing the corpus: %s\n", llmt_context_last_error(ctx));
        CHECK_STATUS(s, LLMT_OK);
        llmt_job_destroy(job);
        llmt_context_destroy(ctx);
        snprintf(prep, sizeof prep, "%s/prep/data", tmp);
        if (s != LLMT_OK)
            return check_exit("job-keys");
    }

    /* every key of the table has a case; every container has children */
    size_t nk = llmt_spec_key_count();
    CHECK(nk > 50);
    for (size_t k = 0; k < nk; k++) {
        const char *key = llmt_spec_key_name(k), *type = llmt_spec_key_type(k);
        if (!strcmp(type, "object")) {
            int child = 0;
            size_t l = strlen(key);
            for (size_t m = 0; m < nk; m++)
                child |=
                    !strncmp(llmt_spec_key_name(m), key, l) && llmt_spec_key_name(m)[l] == '.';
            if (!child)
                fprintf(stderr, "FAIL %s: a container without keys\n", key);
            CHECK(child);
            continue;
        }
        if (!covered(key))
            fprintf(stderr,
                    "FAIL %s: no case in test_job_keys.c: does it take effect in "
                    "llmt_job, or is it refused?\n",
                    key);
        CHECK(covered(key));
    }

    /* the cases: one baseline per distinct `base` (and fault), then the
     * variant; a case checked on the 8-GPU plan runs the plans only */
    static outcome var;
    const outcome *base = NULL;
    for (size_t c = 0; c < NCASES; c++) {
        const kcase *kc = &cases[c];
        const char *f = kc->fault ? kc->fault : "";
        int plan_only = kc->want == PLAN8;
        if (*f)
            setenv("LLMT_FAULT", f, 1);
        else
            unsetenv("LLMT_FAULT");
        const outcome *nb = baseline_of(kc, plan_only);
        if (nb != base) {
            base = nb;
            /* a plan-only case may use a spec this machine cannot run */
            if (base->create != LLMT_OK && kc->want != PLAN8) {
                fprintf(stderr, "FAIL baseline for %s: %s\n", kc->key, base->err);
                CHECK_STATUS(base->create, LLMT_OK);
            }
        }
        run_case(spec_json(kc->base, kc->set), plan_only, &var);
        int ok;
        if (kc->want == REFUSED) {
            ok = var.create != LLMT_OK && strstr(var.err, kc->key) != NULL;
            /* "checkpoint.tiers[].kind" is named with its index */
            if (!ok && strstr(kc->key, "[]") && var.create != LLMT_OK) {
                char k2[128];
                snprintf(k2, sizeof k2, "%.*s[0]%s", (int)(strstr(kc->key, "[]") - kc->key),
                         kc->key, strstr(kc->key, "[]") + 2);
                ok = strstr(var.err, k2) != NULL;
            }
        } else if (!strcmp(kc->key, "train.device") && var.create != LLMT_OK) {
            /* no GPU here: the refusal must name the key */
            ok = strstr(var.err, "train.device cuda") != NULL;
        } else {
            ok = (var.create == LLMT_OK || kc->want == PLAN8) && differs(base, &var, kc->want);
        }
        printf("%s %-40s %-15s %s\n", ok ? "ok  " : "FAIL", kc->key, expect_names[kc->want],
               var.create != LLMT_OK ? var.err : kc->set);
        if (!ok && var.create == LLMT_OK)
            fprintf(stderr, "  baseline: %.300s\n  variant:  %.300s\n",
                    kc->want == RUN    ? base->run
                    : kc->want == INFO ? base->info
                                       : base->files,
                    kc->want == RUN    ? var.run
                    : kc->want == INFO ? var.info
                                       : var.files);
        CHECK(ok);
    }
    refused_beside_ranks();
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_exit("job-keys");
}
