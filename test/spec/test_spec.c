/* Job spec: every example parses; defaults are filled; every rule of
 * doc/job-spec.md fails with its path; all errors come at once; unknown keys
 * get a suggestion; getters, to_json and key introspection. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"
#include "spec/spec.h"

static llmt_context *ctx;

static char *path_of(const char *rel)
{
    const char *root = getenv("LLMT_SOURCE_ROOT");
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", root ? root : ".", rel);
    return buf;
}

static llmt_spec *parse(const char *json)
{
    llmt_spec *s = NULL;
    llmt_status st = llmt_spec_parse_json(ctx, json, strlen(json), &s);
    if (st != LLMT_OK)
        fprintf(stderr, "unexpected: %s\n", llmt_context_last_error(ctx));
    return s;
}

/* The full error text of an invalid spec (static buffer). */
static const char *errors_of(const char *json, llmt_status *st)
{
    static char buf[16384];
    size_t need = 0;
    *st = llmt_spec_validate_json(ctx, json, strlen(json), buf, sizeof buf, &need);
    return buf;
}

static int count_lines(const char *t)
{
    int n = 0;
    for (; *t; t++)
        n += *t == '\n';
    return n;
}

/* `json` fails validation with a line containing `want`; parse_json agrees
 * and leaves the message on the context. */
static void expect_error(const char *tag, size_t i, const char *json,
                         const char *want)
{
    llmt_status st;
    const char *e = errors_of(json, &st);
    int ok = st == LLMT_ERR_SPEC && strstr(e, want) != NULL;
    if (!ok)
        fprintf(stderr, "%s %zu: want '%s', got status %d:\n%s", tag, i, want,
                (int)st, e);
    CHECK(ok);
    llmt_spec *s = (llmt_spec *)1;
    CHECK_STATUS(llmt_spec_parse_json(ctx, json, strlen(json), &s), LLMT_ERR_SPEC);
    CHECK(s == NULL);
    CHECK_EQ_INT(llmt_context_last_status(ctx), LLMT_ERR_SPEC);
}

static void test_examples(void)
{
    const char *files[] = {"examples/specs/demo-cpu.json",
                           "examples/specs/gpt2-124m-1gpu.json",
                           "examples/specs/llama-70b.json",
                           "examples/specs/llama3-405b-16k.json",
                           "examples/specs/moe.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        llmt_spec *s = NULL;
        llmt_status st = llmt_spec_parse_file(ctx, path_of(files[i]), &s);
        if (st != LLMT_OK)
            fprintf(stderr, "%s: %s\n", files[i], llmt_context_last_error(ctx));
        CHECK_STATUS(st, LLMT_OK);
        if (!s)
            continue;
        /* The seeds' invariant: global = micro * accum * dp. */
        CHECK_EQ_INT(s->batch.global,
                     s->batch.micro * s->batch.grad_accum * s->parallelism.dp);
        llmt_spec_destroy(s);
    }
    llmt_spec *s = NULL;
    CHECK_STATUS(llmt_spec_parse_file(ctx, path_of("examples/specs/llama3-405b-16k.json"),
                                      &s), LLMT_OK);
    if (s) {
        CHECK_EQ_INT(s->parallelism.tp * s->parallelism.pp * s->parallelism.dp *
                     s->parallelism.cp, 16384);
        CHECK_EQ_INT(s->checkpoint.ntiers, 4);
        CHECK(s->checkpoint.interval_auto);
        CHECK_CLOSE(s->hardware.peak_tflops, 989.0, 0, 1e-9);
        CHECK_EQ_INT(s->model.kv_heads, 8);
        char buf[64];
        size_t need;
        CHECK_STATUS(llmt_spec_get_string(s, "name", buf, sizeof buf, &need), LLMT_OK);
        CHECK(strcmp(buf, "llama3-405b-16k") == 0);
        llmt_spec_destroy(s);
    }
    CHECK_STATUS(llmt_spec_parse_file(ctx, "/nonexistent/x.json", &s), LLMT_ERR_IO);
    CHECK(s == NULL);
}

static void test_defaults(void)
{
    llmt_spec *s = parse("{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4,"
                         " \"vocab\": 4096, \"seq_len\": 128},"
                         " \"batch\": {\"micro\": 8}}");
    CHECK(s != NULL);
    if (!s)
        return;
    CHECK_EQ_INT(s->model.arch, LLMT_SPEC_ARCH_GPT2);
    CHECK_EQ_INT(s->model.kv_heads, 4);
    CHECK_EQ_INT(s->model.ffn, 1024);
    CHECK_EQ_INT(s->model.tied_embeddings, 1);
    CHECK_EQ_INT(s->batch.grad_accum, 1);
    CHECK_EQ_INT(s->batch.global, 8);
    CHECK_EQ_INT(s->schedule.total_steps, 2000);
    CHECK_EQ_INT(s->schedule.warmup_steps, 100);
    CHECK_EQ_INT(s->data.tokenizer.vocab_size, 4096);
    CHECK(s->data.train == NULL);
    CHECK(strcmp(s->checkpoint.dir, "ckpt") == 0);
    CHECK_EQ_INT(s->checkpoint.ntiers, 1);
    CHECK_EQ_INT(s->checkpoint.tiers[0].kind, LLMT_SPEC_TIER_LOCAL);
    CHECK(strcmp(s->hardware.gpu, "H100-SXM") == 0);
    CHECK_EQ_INT(s->hardware.gpus_per_node, 8);
    CHECK_CLOSE(s->fault_tolerance.gpu_failures_per_hour,
                419.0 / (54 * 24 * 16384.0), 1e-12, 0);
    /* GPT-2 small: 124M parameters with tied embeddings (the usual count,
     * 124,439,808 for vocab 50257 and 1024 positions). */
    CHECK(!llmt_spec_is_given(s, "model.kv_heads"));
    CHECK(llmt_spec_is_given(s, "model.layers"));
    llmt_spec_destroy(s);

    s = parse("{\"model\": {\"layers\": 12, \"hidden\": 768, \"heads\": 12,"
              " \"vocab\": 50257, \"seq_len\": 1024}}");
    if (s) {
        CHECK_CLOSE(s->model.params, 124439808.0, 0, 0.5);
        llmt_spec_destroy(s);
    }
    /* Llama defaults: SwiGLU ffn rounded to 256, untied, params ~ 8.03B for
     * the Llama 3 8B shape (published 8.03B). */
    s = parse("{\"model\": {\"arch\": \"llama\", \"layers\": 32, \"hidden\": 4096,"
              " \"heads\": 32, \"kv_heads\": 8, \"ffn\": 14336, \"vocab\": 128256}}");
    if (s) {
        CHECK_EQ_INT(s->model.tied_embeddings, 0);
        CHECK_CLOSE(s->model.params, 8.03e9, 0.005, 0);
        llmt_spec_destroy(s);
    }
    CHECK_EQ_INT(llmt__spec_llama_ffn(4096), 11008);
    /* batch.global given, grad_accum derived. */
    s = parse("{\"model\": {\"layers\": 4, \"hidden\": 64, \"heads\": 4},"
              " \"parallelism\": {\"dp\": 4}, \"batch\": {\"micro\": 2, \"global\": 64}}");
    if (s) {
        CHECK_EQ_INT(s->batch.grad_accum, 8);
        llmt_spec_destroy(s);
    }
    /* Planner-only model: params alone gives a plausible shape. */
    s = parse("{\"model\": {\"arch\": \"llama\", \"params\": 405e9}}");
    if (s) {
        CHECK_EQ_INT(s->model.hidden, 16384);
        CHECK_EQ_INT(s->model.heads, 128);
        CHECK_EQ_INT(s->model.layers, 126);
        CHECK_CLOSE(s->model.params, 405e9, 0, 1);
        llmt_spec_destroy(s);
    }
}

static void test_seed_spelling(void)
{
    /* The seeds' example job spec, written as JSON with its own key names. */
    const char *j =
        "{\"job\": {\"model\": {\"arch\": \"llama\", \"params\": 405e9,"
        " \"layers\": 126, \"hidden\": 16384, \"heads\": 128, \"kv_heads\": 8,"
        " \"seqlen\": 8192},"
        " \"parallelism\": {\"tp\": 8, \"pp\": 16, \"dp\": 128, \"cp\": 1, \"ep\": 1},"
        " \"precision\": {\"compute\": \"bf16\", \"master\": \"fp32\", \"gemm\": \"fp8\"},"
        " \"batch\": {\"micro_batch\": 1, \"grad_accum\": 8, \"global_batch\": 1024},"
        " \"checkpoint\": {\"interval_steps\": 250,"
        "  \"tiers\": [\"local_nvme\", \"peer\", \"lustre\", \"object_store\"]}}}";
    llmt_status st;
    const char *e = errors_of(j, &st);
    /* Durable tiers named only by kind need a path: exactly those errors. */
    CHECK_STATUS(st, LLMT_ERR_SPEC);
    CHECK(strstr(e, "checkpoint.tiers[2].path: required") != NULL);
    CHECK(strstr(e, "checkpoint.tiers[3].path: required") != NULL);
    CHECK_EQ_INT(count_lines(e), 2);
    const char *j2 =
        "{\"job\": {\"model\": {\"arch\": \"llama\", \"params\": 405e9,"
        " \"layers\": 126, \"hidden\": 16384, \"heads\": 128, \"kv_heads\": 8,"
        " \"seqlen\": 8192},"
        " \"parallelism\": {\"tp\": 8, \"pp\": 16, \"dp\": 128, \"cp\": 1, \"ep\": 1},"
        " \"precision\": {\"compute\": \"bf16\", \"master\": \"fp32\", \"gemm\": \"fp8\"},"
        " \"batch\": {\"micro_batch\": 1, \"grad_accum\": 8, \"global_batch\": 1024},"
        " \"checkpoint\": {\"interval_steps\": 250,"
        "  \"tiers\": [\"local_nvme\", \"peer\"]}}}";
    llmt_spec *s = parse(j2);
    CHECK(s != NULL);
    if (s) {
        CHECK_EQ_INT(s->model.seq_len, 8192);
        CHECK_EQ_INT(s->batch.global, 1024);
        CHECK_EQ_INT(s->checkpoint.interval, 250);
        CHECK_EQ_INT(s->precision.gemm, LLMT_SPEC_PREC_FP8);
        CHECK_EQ_INT(s->checkpoint.tiers[1].kind, LLMT_SPEC_TIER_PEER);
        llmt_spec_destroy(s);
    }
}

struct rule_case {
    const char *json;
    const char *want; /* substring of the error text */
};

static void test_rules(void)
{
#define M "\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4, \"seq_len\": 128}"
    static const struct rule_case cases[] = {
        {"{" M ", \"parallelism\": {\"tp\": 3}}",
         "parallelism.tp: 3 does not divide model.heads 4"},
        {"{" M ", \"parallelism\": {\"pp\": 5}}", "parallelism.pp: 5 exceeds model.layers 4"},
        {"{" M ", \"parallelism\": {\"cp\": 3}}",
         "parallelism.cp: 2*cp = 6 does not divide model.seq_len 128"},
        {"{" M ", \"parallelism\": {\"ep\": 2, \"dp\": 2}}",
         "parallelism.ep: 2 needs model.moe.experts > 0"},
        {"{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4, \"moe\": "
         "{\"experts\": 6, \"top_k\": 2}}, \"parallelism\": {\"ep\": 4, \"dp\": 4}}",
         "parallelism.ep: 4 does not divide model.moe.experts 6"},
        {"{" M ", \"batch\": {\"micro\": 2, \"grad_accum\": 2, \"global\": 5}}",
         "batch.global: 5 != batch.micro 2 * batch.grad_accum 2 * parallelism.dp 1 = 4"},
        {"{" M ", \"parallelism\": {\"zero\": 4}}", "parallelism.zero: 4 must be in [0, 3]"},
        {"{" M ", \"parallelism\": {\"tp\": 0}}", "parallelism.tp: 0 must be in [1,"},
        {"{" M ", \"parallelism\": {\"tp\": 1.5}}", "parallelism.tp: must be an integer"},
        {"{" M ", \"parallelism\": {\"recompute\": \"some\"}}",
         "parallelism.recompute: \"some\" is not one of none|selective|full"},
        {"{" M ", \"parallelism\": {\"sequence_parallel\": 1}}",
         "parallelism.sequence_parallel: must be true or false"},
        {"{" M ", \"parallelism\": {\"sequence_parallel\": true}}",
         "parallelism.sequence_parallel: needs parallelism.tp > 1"},
        {"{" M ", \"parallelism\": {\"pp\": 2, \"virtual_stages\": 3}}",
         "parallelism.virtual_stages: pp*virtual_stages = 6 virtual stages exceed model.layers "
         "4"},
        {"{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 8, \"kv_heads\": 3}}",
         "model.kv_heads: 3 does not divide model.heads 8"},
        /* the model layer refused it naming its own field (tie_embeddings)
         * once data was prepared */
        {"{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 8,"
         " \"tied_embeddings\": false}}",
         "model.tied_embeddings: false, but gpt2 ties its output head"},
        {"{\"model\": {\"arch\": \"llama\", \"layers\": 4, \"hidden\": 384, \"heads\": 12,"
         " \"kv_heads\": 4, \"ffn\": 1152}, \"parallelism\": {\"tp\": 3}}",
         "parallelism.tp: 3 and model.kv_heads 4: neither divides the other"},
        {"{\"model\": {\"layers\": 4, \"hidden\": 250, \"heads\": 4}}",
         "model.hidden: 250 is not a multiple of model.heads 4"},
        {"{\"model\": {\"layers\": 4}}", "model.hidden: required"},
        {"{" M ", \"modle\": {}}", "modle: unknown key (did you mean \"model\"?)"},
        {"{" M ", \"layers\": 4}", "layers: unknown key (did you mean \"model.layers\"?)"},
        {"{" M ", \"parallelism\": {\"tensor\": 2}}", "parallelism.tensor: unknown key"},
        {"{" M ", \"batch\": {\"mciro\": 2}}",
         "batch.mciro: unknown key (did you mean \"batch.micro\"?)"},
        {"{" M ", \"checkpoint\": {\"interval\": \"often\"}}",
         "checkpoint.interval: must be a step count >= 0 or \"auto\""},
        {"{" M ", \"checkpoint\": {\"tiers\": [{\"kind\": \"local\", \"keep_lst\": 2}]}}",
         "checkpoint.tiers[0].keep_lst: unknown key (did you mean \"keep_last\"?)"},
        {"{" M ", \"checkpoint\": {\"tiers\": [{\"path\": \"x\"}]}}",
         "checkpoint.tiers[0]: needs \"kind\""},
        {"{" M ", \"hardware\": {\"gpu\": \"H100-SMX\"}}",
         "hardware.gpu: unknown GPU \"H100-SMX\" (did you mean \"H100-SXM\"?"},
        {"{" M ", \"data\": {\"tokenizer\": {\"vocab_size\": 60000}}, \"model\": {}}",
         "model: duplicate key"},
        {"{" M ", \"optimizer\": {\"lr\": 0}}", "optimizer.lr: 0 must be"},
        {"{" M ", \"schedule\": {\"warmup_steps\": 5000}}",
         "schedule.warmup_steps: 5000 exceeds schedule.total_steps 2000"},
        {"{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4, \"vocab\": 100},"
         " \"data\": {\"tokenizer\": {\"vocab_size\": 200}}}",
         "data.tokenizer.vocab_size: 200 exceeds model.vocab 100"},
        {"{" M ", \"precision\": {\"param\": \"fp8\"}}", "precision.param: fp8 is for GEMM"},
        {"{" M ", \"train\": {\"device\": \"cuda\"}, \"hardware\": {\"gpu\": \"A100-80GB\"},"
         " \"precision\": {\"gemm\": \"fp8\"}}",
         "precision.gemm: fp8 needs a GPU"},
        {"{" M ", \"model\": 3}", "model: duplicate key"},
        {"[1, 2]", "$: the job spec must be a JSON object"},
        {"{\"model\": ", "$: not valid JSON"},
        {"{" M ", \"parallelism\": {\"pp\": 2, \"virtual_stages\": 2}, \"model\": null}",
         "model: duplicate key"},
        {"{\"model\": {\"layers\": 8, \"hidden\": 256, \"heads\": 4},"
         " \"parallelism\": {\"pp\": 2, \"virtual_stages\": 2}, \"batch\": {\"grad_accum\": "
         "3}}",
         "batch.grad_accum: 3 micro-batches must be a multiple of parallelism.pp 2"},
        /* an unknown key with no close match lists what its object takes */
        {"{" M ", \"optimizer\": {\"lerning_rate\": 1e-3}}",
         "optimizer.lerning_rate: unknown key (optimizer has: type, lr, beta1"},
        {"{" M ", \"lerning_rate\": 1e-3}",
         "lerning_rate: unknown key (the spec has: name, model"},
        /* integers: the range in the message, also for a whole number
         * beyond 2^53 and for a string */
        {"{" M ", \"parallelism\": {\"tp\": 1e20}}",
         "parallelism.tp: 1e+20 must be in [1, 1e+06]"},
        {"{" M ", \"parallelism\": {\"tp\": \"2\"}}",
         "parallelism.tp: must be an integer in [1, 1e+06]"},
        /* the checkpointer counts retention in int32: a larger count
         * would wrap, so the spec bounds it */
        {"{" M ", \"checkpoint\": {\"tiers\": [{\"kind\": \"local\", \"keep_last\": "
         "2147483648}]}}",
         "checkpoint.tiers[0].keep_last: 2147483648 must be in [0, 1e+09]"},
        {"{" M ", \"checkpoint\": {\"tiers\": [{\"kind\": \"local\", \"keep_every\": "
         "4294967296}]}}",
         "checkpoint.tiers[0].keep_every: 4294967296 must be in [0, 1e+09]"},
        /* the sample and the validation batches are held in memory */
        {"{" M ", \"train\": {\"sample_tokens\": 10000000}}",
         "train.sample_tokens: 10000000 must be in [0, 1e+06]"},
        {"{" M ", \"train\": {\"eval_batches\": 1e12}}",
         "train.eval_batches: 1000000000000 must be in [1, 1e+06]"},
        /* an empty string was taken for the key left out: the default
         * corpus for data.train, loss.svg for metrics.plot */
        {"{" M ", \"data\": {\"train\": \"\"}}",
         "data.train: is empty: give a value, or leave the key out"},
        {"{" M ", \"metrics\": {\"plot\": \"\"}}",
         "metrics.plot: is empty: give a value, or leave the key out"},
        {"{" M ", \"checkpoint\": {\"tiers\": [{\"kind\": \"local\", \"path\": \"\"}]}}",
         "checkpoint.tiers[0].path: is empty"},
        /* a check every N > train.steps steps never ran */
        {"{" M ", \"train\": {\"steps\": 10}, \"fault_tolerance\": {\"sdc_interval\": 11}}",
         "fault_tolerance.sdc_interval: 11 exceeds train.steps 10: the check would never run"},
        {"{" M ", \"train\": {\"steps\": 10}, \"fault_tolerance\": {\"straggler\": "
         "{\"interval\": 20}}}",
         "fault_tolerance.straggler.interval: 20 exceeds train.steps 10"},
        /* 0 batches was accepted and each validation then used 1 */
        {"{" M ", \"train\": {\"eval_batches\": 0}}",
         "train.eval_batches: 0 must be in [1, 1e+06]"},
    };
#undef M
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_error("case", i, cases[i].json, cases[i].want);
}

/* precision.fp8_*: defaults, values, ranges; keys that only matter for
 * fp8 GEMMs (or for one recipe) fail when set to a non-default value
 * elsewhere, and name their path. */
/* parallelism.pp_schedule and stage_layers: parsed, checked against pp
 * and the layers naming the key, gettable, and written back by to_json. */
static void test_pp_keys(void)
{
#define PM "\"model\": {\"layers\": 4, \"hidden\": 64, \"heads\": 4}"
    llmt_spec *s = parse("{" PM ", \"parallelism\": {\"pp\": 2, \"pp_schedule\": \"gpipe\","
                         " \"stage_layers\": [1, 3]}}");
    CHECK(s != NULL);
    if (s) {
        int64_t n = 0;
        CHECK_EQ_INT(s->parallelism.pp_schedule, LLMT_SPEC_PP_GPIPE);
        CHECK_EQ_INT(s->parallelism.nstage_layers, 2);
        CHECK_EQ_INT(s->parallelism.stage_layers[0], 1);
        CHECK_EQ_INT(s->parallelism.stage_layers[1], 3);
        CHECK_STATUS(llmt_spec_get_int(s, "parallelism.stage_layers", &n), LLMT_OK);
        CHECK_EQ_INT(n, 2);
        char buf[16384];
        CHECK_STATUS(llmt_spec_to_json(s, buf, sizeof buf, NULL), LLMT_OK);
        llmt_spec *t = parse(buf); /* the round trip keeps the list */
        CHECK(t && t->parallelism.nstage_layers == 2 && t->parallelism.stage_layers[1] == 3);
        llmt_spec_destroy(t);
        llmt_spec_destroy(s);
    }
    static const char *const bad[][2] = {
        {"{" PM ", \"parallelism\": {\"pp\": 2, \"stage_layers\": [2, 3]}}",
         "parallelism.stage_layers: the stages hold 5 layers, model.layers is 4"},
        {"{" PM ", \"parallelism\": {\"pp\": 2, \"stage_layers\": [4]}}",
         "parallelism.stage_layers: 1 entries for parallelism.pp 2"},
        {"{" PM ", \"parallelism\": {\"pp\": 2, \"stage_layers\": [0, 4]}}",
         "parallelism.stage_layers[0]"},
        {"{" PM ", \"parallelism\": {\"pp\": 2, \"stage_layers\": 4}}",
         "parallelism.stage_layers: must be an array"},
        {"{" PM ", \"parallelism\": {\"pp\": 2, \"pp_schedule\": \"zigzag\"}}",
         "parallelism.pp_schedule"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_error("pp keys", i, bad[i][0], bad[i][1]);
#undef PM
}

/* fault_tolerance.sdc_replay: window by default (the replay that sees a
 * flip between checks), step when asked, anything else refused with the
 * allowed values; the value survives the JSON round trip. */
static void test_sdc_replay_key(void)
{
#define SM "\"model\": {\"layers\": 4, \"hidden\": 64, \"heads\": 4}"
    llmt_spec *s = parse("{" SM "}");
    CHECK(s != NULL);
    if (s) {
        CHECK_EQ_INT(s->fault_tolerance.sdc_replay, LLMT_SPEC_SDC_WINDOW);
        CHECK(!llmt_spec_is_given(s, "fault_tolerance.sdc_replay"));
        llmt_spec_destroy(s);
    }
    s = parse("{" SM ", \"fault_tolerance\": {\"sdc_replay\": \"step\"}}");
    CHECK(s != NULL);
    if (s) {
        CHECK_EQ_INT(s->fault_tolerance.sdc_replay, LLMT_SPEC_SDC_STEP);
        CHECK(llmt_spec_is_given(s, "fault_tolerance.sdc_replay"));
        char buf[16384];
        CHECK_STATUS(llmt_spec_to_json(s, buf, sizeof buf, NULL), LLMT_OK);
        llmt_spec *t = parse(buf);
        CHECK(t && t->fault_tolerance.sdc_replay == LLMT_SPEC_SDC_STEP);
        llmt_spec_destroy(t);
        llmt_spec_destroy(s);
    }
    expect_error("sdc_replay", 0, "{" SM ", \"fault_tolerance\": {\"sdc_replay\": \"all\"}}",
                 "fault_tolerance.sdc_replay: \"all\" is not one of window|step");
    expect_error("sdc_replay", 1, "{" SM ", \"fault_tolerance\": {\"sdc_replay\": 1}}",
                 "fault_tolerance.sdc_replay: must be one of window|step");
#undef SM
}

static void test_fp8_keys(void)
{
#define M "\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4}"
    llmt_spec *s = parse("{" M "}");
    if (s) {
        CHECK_EQ_INT(s->precision.fp8_recipe, LLMT_SPEC_FP8_DELAYED);
        CHECK_EQ_INT(s->precision.fp8_amax_history, 16);
        CHECK_EQ_INT(s->precision.fp8_margin, 0);
        CHECK_EQ_INT(s->precision.fp8_format, LLMT_SPEC_FP8_HYBRID);
        CHECK(!llmt_spec_is_given(s, "precision.fp8_recipe"));
        llmt_spec_destroy(s);
    }
    /* Defaults may be written out with any gemm (to_json does). */
    s = parse("{" M ", \"precision\": {\"gemm\": \"bf16\", \"fp8_recipe\":"
              " \"delayed\", \"fp8_amax_history\": 16, \"fp8_margin\": 0,"
              " \"fp8_format\": \"hybrid\"}}");
    CHECK(s != NULL);
    llmt_spec_destroy(s);
    s = parse("{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_recipe\":"
              " \"delayed\", \"fp8_amax_history\": 1024, \"fp8_margin\": 16,"
              " \"fp8_format\": \"e4m3\"}}");
    if (s) {
        int64_t v;
        char buf[32];
        size_t need;
        CHECK_EQ_INT(s->precision.fp8_amax_history, 1024);
        CHECK_EQ_INT(s->precision.fp8_margin, 16);
        CHECK_EQ_INT(s->precision.fp8_format, LLMT_SPEC_FP8_E4M3);
        CHECK_STATUS(llmt_spec_get_int(s, "precision.fp8_amax_history", &v), LLMT_OK);
        CHECK_EQ_INT(v, 1024);
        CHECK_STATUS(llmt_spec_get_string(s, "precision.fp8_format", buf, sizeof buf,
                                          &need), LLMT_OK);
        CHECK(strcmp(buf, "e4m3") == 0);
        CHECK(llmt_spec_is_given(s, "precision.fp8_margin"));
        /* The normalised form parses back to the same values. */
        llmt_spec_to_json(s, NULL, 0, &need);
        char *j = malloc(need);
        CHECK_STATUS(llmt_spec_to_json(s, j, need, &need), LLMT_OK);
        CHECK(strstr(j, "\"fp8_amax_history\":\t1024") != NULL);
        llmt_spec *s2 = parse(j);
        CHECK(s2 && s2->precision.fp8_margin == 16 &&
              s2->precision.fp8_format == LLMT_SPEC_FP8_E4M3);
        llmt_spec_destroy(s2);
        free(j);
        llmt_spec_destroy(s);
    }
    s = parse("{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_recipe\":"
              " \"current\", \"fp8_margin\": 1}}");
    if (s) {
        CHECK_EQ_INT(s->precision.fp8_recipe, LLMT_SPEC_FP8_CURRENT);
        llmt_spec_destroy(s);
    }
    s = parse("{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_recipe\":"
              " \"blockwise\", \"fp8_format\": \"e4m3\"}}");
    if (s) {
        CHECK_EQ_INT(s->precision.fp8_recipe, LLMT_SPEC_FP8_BLOCKWISE);
        llmt_spec_destroy(s);
    }
    static const struct { const char *json, *want; } cases[] = {
        {"{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_recipe\": \"tensor\"}}",
         "precision.fp8_recipe: \"tensor\" is not one of delayed|current|blockwise"},
        {"{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_format\": \"e5m2\"}}",
         "precision.fp8_format: \"e5m2\" is not one of e4m3|hybrid"},
        {"{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_amax_history\": 0}}",
         "precision.fp8_amax_history: 0 must be in [1, 1024]"},
        {"{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_amax_history\": 1025}}",
         "precision.fp8_amax_history: 1025 must be in [1, 1024]"},
        {"{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_amax_history\": 2.5}}",
         "precision.fp8_amax_history: must be an integer"},
        {"{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_margin\": 17}}",
         "precision.fp8_margin: 17 must be in [0, 16]"},
        {"{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_margin\": -1}}",
         "precision.fp8_margin: -1 must be in [0, 16]"},
        {"{" M ", \"precision\": {\"fp8_recipe\": \"current\"}}",
         "precision.fp8_recipe: current needs precision.gemm fp8 (it is bf16)"},
        {"{" M ", \"precision\": {\"gemm\": \"fp32\", \"fp8_format\": \"e4m3\"}}",
         "precision.fp8_format: e4m3 needs precision.gemm fp8 (it is fp32)"},
        {"{" M ", \"precision\": {\"fp8_amax_history\": 32}}",
         "precision.fp8_amax_history: 32 needs precision.gemm fp8 (it is bf16)"},
        {"{" M ", \"precision\": {\"fp8_margin\": 2}}",
         "precision.fp8_margin: 2 needs precision.gemm fp8 (it is bf16)"},
        {"{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_recipe\": \"current\","
         " \"fp8_amax_history\": 32}}",
         "precision.fp8_amax_history: 32 needs precision.fp8_recipe delayed"},
        {"{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_recipe\": \"blockwise\","
         " \"fp8_margin\": 1}}",
         "precision.fp8_margin: 1 needs a per-tensor precision.fp8_recipe"},
        {"{" M ", \"precision\": {\"gemm\": \"fp8\", \"fp8_margn\": 1}}",
         "precision.fp8_margn: unknown key (did you mean \"precision.fp8_margin\"?)"},
    };
#undef M
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_error("fp8 case", i, cases[i].json, cases[i].want);
    /* All four at once on a bf16 spec. */
    llmt_status st;
    const char *e = errors_of("{\"model\": {\"layers\": 4, \"hidden\": 256,"
                              " \"heads\": 4}, \"precision\": {\"fp8_recipe\":"
                              " \"blockwise\", \"fp8_amax_history\": 4,"
                              " \"fp8_margin\": 1, \"fp8_format\": \"e4m3\"}}", &st);
    CHECK_STATUS(st, LLMT_ERR_SPEC);
    CHECK_EQ_INT(count_lines(e), 4);
}

static void test_all_errors_at_once(void)
{
    const char *j = "{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4, \"bogus\": 1},"
                    " \"parallelism\": {\"tp\": 0, \"zero\": 9, \"recompute\": 3},"
                    " \"train\": {\"steps\": -1, \"device\": \"tpu\"}}";
    llmt_status st;
    const char *e = errors_of(j, &st);
    CHECK_STATUS(st, LLMT_ERR_SPEC);
    CHECK_EQ_INT(count_lines(e), 6);
    CHECK(strstr(e, "model.bogus") && strstr(e, "parallelism.tp") &&
          strstr(e, "parallelism.zero") && strstr(e, "parallelism.recompute") &&
          strstr(e, "train.steps") && strstr(e, "train.device"));
    /* Cross-field rules: three broken at once. */
    const char *j2 = "{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4, \"seq_len\": 100},"
                     " \"parallelism\": {\"tp\": 3, \"pp\": 8, \"cp\": 4}}";
    e = errors_of(j2, &st);
    CHECK(strstr(e, "parallelism.tp") && strstr(e, "parallelism.pp") &&
          strstr(e, "parallelism.cp"));
    CHECK(count_lines(e) >= 3);
    /* The context carries the first ones. */
    llmt_spec *s;
    llmt_spec_parse_json(ctx, j2, strlen(j2), &s);
    CHECK(strstr(llmt_context_last_error(ctx), "parallelism.pp") != NULL);
    /* Size queries: NULL buffer gives the size; a short one cuts at a line. */
    size_t need = 0;
    CHECK_STATUS(llmt_spec_validate_json(ctx, j2, strlen(j2), NULL, 0, &need),
                 LLMT_ERR_BUFFER_TOO_SMALL);
    CHECK(need > 10);
    char small[80];
    CHECK_STATUS(llmt_spec_validate_json(ctx, j2, strlen(j2), small, sizeof small, &need),
                 LLMT_ERR_BUFFER_TOO_SMALL);
    CHECK(strlen(small) == 0 || small[strlen(small) - 1] == '\n');
    /* ... and says so on the context and the thread, naming the size to
     * retry with (it recorded nothing; the message was a previous one's) */
    char want[64];
    snprintf(want, sizeof want, "needs %zu bytes, buflen is 80", need);
    CHECK(strstr(llmt_context_last_error(ctx), want) != NULL);
    CHECK(strstr(llmt_context_last_error(ctx), "parallelism.tp") != NULL);
    CHECK(llmt_last_error_status() == LLMT_ERR_BUFFER_TOO_SMALL);
    CHECK(strcmp(llmt_last_error(), llmt_context_last_error(ctx)) == 0);
    llmt_last_error_clear();
    CHECK_STATUS(llmt_spec_validate_json(NULL, j2, strlen(j2), NULL, 0, &need),
                 LLMT_ERR_BUFFER_TOO_SMALL);
    snprintf(want, sizeof want, "needs %zu bytes, buflen is 0", need);
    CHECK(strstr(llmt_last_error(), want) != NULL);
    const char *good = "{\"model\": {\"layers\": 2, \"hidden\": 64, \"heads\": 2}}";
    CHECK_STATUS(llmt_spec_validate_json(ctx, good, strlen(good), small, sizeof small, &need),
                 LLMT_OK);
    CHECK_EQ_INT(need, 1);
    CHECK(small[0] == '\0');
}

static void test_getters_json_keys(void)
{
    llmt_spec *s = NULL;
    CHECK_STATUS(llmt_spec_parse_file(ctx, path_of("examples/specs/llama-70b.json"), &s),
                 LLMT_OK);
    if (!s)
        return;
    int64_t v;
    double d;
    char buf[256];
    size_t need;
    CHECK_STATUS(llmt_spec_get_int(s, "model.layers", &v), LLMT_OK);
    CHECK_EQ_INT(v, 80);
    CHECK_STATUS(llmt_spec_get_int(s, "parallelism.sequence_parallel", &v), LLMT_OK);
    CHECK_EQ_INT(v, 1);
    CHECK_STATUS(llmt_spec_get_int(s, "batch.grad_accum", &v), LLMT_OK);
    CHECK_EQ_INT(v, 16);
    CHECK_STATUS(llmt_spec_get_int(s, "checkpoint.tiers", &v), LLMT_OK);
    CHECK_EQ_INT(v, 3);
    CHECK_STATUS(llmt_spec_get_int(s, "checkpoint.tiers[2].keep_every", &v), LLMT_OK);
    CHECK_EQ_INT(v, 10000);
    CHECK_STATUS(llmt_spec_get_string(s, "checkpoint.tiers[1].path", buf, sizeof buf, &need),
                 LLMT_OK);
    CHECK(strcmp(buf, "/nvme/ckpt") == 0);
    CHECK_STATUS(llmt_spec_get_string(s, "checkpoint.tiers[0].kind", buf, sizeof buf, &need),
                 LLMT_OK);
    CHECK(strcmp(buf, "host") == 0);
    CHECK_STATUS(llmt_spec_get_string(s, "checkpoint.tiers[3].kind", buf, sizeof buf, &need),
                 LLMT_ERR_NOT_FOUND);
    CHECK_STATUS(llmt_spec_get_double(s, "optimizer.lr", &d), LLMT_OK);
    CHECK_CLOSE(d, 1.5e-4, 1e-12, 0);
    CHECK_STATUS(llmt_spec_get_double(s, "model.hidden", &d), LLMT_OK);
    CHECK_CLOSE(d, 8192, 0, 0);
    CHECK_STATUS(llmt_spec_get_string(s, "model.arch", buf, sizeof buf, &need), LLMT_OK);
    CHECK(strcmp(buf, "llama") == 0);
    CHECK_STATUS(llmt_spec_get_string(s, "checkpoint.interval", buf, sizeof buf, &need),
                 LLMT_OK);
    CHECK(strcmp(buf, "auto") == 0);
    CHECK_STATUS(llmt_spec_get_string(s, "checkpoint.dir", buf, 4, &need),
                 LLMT_ERR_BUFFER_TOO_SMALL);
    CHECK_EQ_INT(need, strlen("/checkpoints/llama-70b") + 1);
    CHECK_STATUS(llmt_spec_get_int(s, "model.nope", &v), LLMT_ERR_NOT_FOUND);
    CHECK(strstr(llmt_spec_last_error(s), "model.nope") != NULL);
    CHECK_STATUS(llmt_spec_get_int(s, "optimizer.lr", &v), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_spec_get_string(s, "model.layers", buf, sizeof buf, &need),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_spec_get_int(NULL, "model.layers", &v), LLMT_ERR_NULL_POINTER);

    /* to_json gives a document that parses back to the same normalised spec. */
    CHECK_STATUS(llmt_spec_to_json(s, NULL, 0, &need), LLMT_ERR_BUFFER_TOO_SMALL);
    char *j1 = malloc(need);
    CHECK_STATUS(llmt_spec_to_json(s, j1, need, &need), LLMT_OK);
    llmt_spec *s2 = NULL;
    CHECK_STATUS(llmt_spec_parse_json(ctx, j1, strlen(j1), &s2), LLMT_OK);
    if (s2) {
        size_t need2;
        llmt_spec_to_json(s2, NULL, 0, &need2);
        char *j2 = malloc(need2);
        CHECK_STATUS(llmt_spec_to_json(s2, j2, need2, &need2), LLMT_OK);
        CHECK(strcmp(j1, j2) == 0);
        free(j2);
        llmt_spec_destroy(s2);
    } else {
        fprintf(stderr, "%s\n%s\n", j1, llmt_context_last_error(ctx));
    }
    free(j1);
    llmt_spec_destroy(s);

    /* Every key is introspectable and each leaf key is gettable on a spec. */
    size_t n = llmt_spec_key_count();
    CHECK(n > 80);
    CHECK(llmt_spec_key_name(n) == NULL);
    int enums = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(llmt_spec_key_name(i) != NULL && llmt_spec_key_type(i) != NULL &&
              llmt_spec_key_doc(i) != NULL);
        if (!strcmp(llmt_spec_key_type(i), "enum")) {
            enums++;
            CHECK(llmt_spec_key_values(i) != NULL);
        }
    }
    CHECK(enums >= 10);
    llmt_spec_destroy(NULL);
}

int main(void)
{
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    llmt_context_set_log_level(ctx, LLMT_LOG_OFF);
    test_examples();
    test_defaults();
    test_seed_spelling();
    test_rules();
    test_fp8_keys();
    test_pp_keys();
    test_sdc_replay_key();
    test_all_errors_at_once();
    test_getters_json_keys();
    llmt_context_destroy(ctx);
    return check_exit("test_spec");
}
