/* The planner's speed on the seeds' job: placing the 405B spec on 16,384
 * GPUs (target < 50 ms) and the auto-planner over the factorisations of
 * 16,384 (target < 2 s). There is no peer program that plans the same job,
 * so each case prints its median against the target. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "llmtrain.h"

/* examples/specs/llama3-405b-16k.json, trimmed to what the planner reads. */
static const char *const SPEC_405B =
    "{\"name\": \"llama3-405b-16k\","
    " \"model\": {\"arch\": \"llama\", \"layers\": 126, \"hidden\": 16384,"
    "  \"heads\": 128, \"kv_heads\": 8, \"ffn\": 53248, \"vocab\": 128256,"
    "  \"seq_len\": 8192},"
    " \"parallelism\": {\"tp\": 8, \"pp\": 16, \"dp\": 128, \"zero\": 1,"
    "  \"recompute\": \"selective\", \"sequence_parallel\": true},"
    " \"batch\": {\"micro\": 1, \"grad_accum\": 16, \"global\": 2048},"
    " \"train\": {\"steps\": 930000, \"device\": \"cuda\"},"
    " \"checkpoint\": {\"interval\": \"auto\", \"async\": true},"
    " \"hardware\": {\"gpu\": \"H100-SXM\", \"gpus_per_node\": 8}}";

typedef struct job {
    llmt_context *ctx;
    llmt_spec *spec;
    int32_t world;
    int32_t max_tp;
    int with_layout;
} job;

static void die(const char *what, job *j)
{
    fprintf(stderr, "bench_plan: %s: %s\n", what, llmt_context_last_error(j->ctx));
    exit(1);
}

/* Parse the spec, place it, read the estimate and the JSON; with_layout
 * also asks every rank's coordinates and its five groups (what a launcher
 * does to build its communicators). */
static void plan_job(void *arg)
{
    job *j = arg;
    llmt_spec *s = NULL;
    llmt_plan *p = NULL;
    if (llmt_spec_parse_json(j->ctx, SPEC_405B, strlen(SPEC_405B), &s) != LLMT_OK)
        die("spec", j);
    if (llmt_plan_create(j->ctx, s, j->world, &p) != LLMT_OK)
        die("plan", j);
    llmt_plan_estimate e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    llmt_plan_get_estimate(p, &e);
    size_t need = 0;
    llmt_plan_to_json(p, NULL, 0, &need);
    char *buf = malloc(need);
    if (buf)
        llmt_plan_to_json(p, buf, need, NULL);
    free(buf);
    if (j->with_layout) {
        static int32_t ranks[16384];
        volatile int64_t sink = 0;
        for (int32_t r = 0; r < j->world; r++) {
            int32_t c[LLMT_PLAN_NDIMS];
            llmt_plan_coords(p, r, c);
            for (int d = 0; d < LLMT_PLAN_NDIMS; d++) {
                size_t n = 0;
                int32_t id = 0;
                llmt_plan_group(p, (llmt_plan_dim)d, r, ranks, 16384, &n, &id);
                sink += id + (int64_t)n;
            }
        }
        (void)sink;
    }
    llmt_plan_destroy(p);
    llmt_spec_destroy(s);
}

static int64_t last_evaluated;

static void auto_job(void *arg)
{
    job *j = arg;
    llmt_plan_auto_opts o;
    llmt_plan_auto_opts_init(&o, sizeof o);
    if (j->max_tp)
        o.max_tp = j->max_tp;
    llmt_plan *p = NULL;
    if (llmt_plan_auto(j->ctx, j->spec, j->world, &o, &p) != LLMT_OK)
        die("auto", j);
    size_t need = 0;
    llmt_plan_to_json(p, NULL, 0, &need);
    char *buf = malloc(need);
    if (buf && llmt_plan_to_json(p, buf, need, NULL) == LLMT_OK) {
        const char *k = strstr(buf, "\"evaluated\":");
        if (k)
            last_evaluated = strtoll(k + 12, NULL, 10);
    }
    free(buf);
    llmt_plan_destroy(p);
}

static void report(const bench_result *r, double target_s)
{
    if (r)
        printf("  -> %s: median %.3f ms, target %.0f ms: %.0fx under the target%s\n",
               r->name, r->median_s * 1e3, target_s * 1e3, target_s / r->median_s,
               r->median_s < target_s ? "" : " (MISSED)");
}

int main(int argc, char **argv)
{
    bench_ctx b;
    if (bench_init(&b, "plan", argc, argv))
        return 2;
    job j = {0};
    if (llmt_context_create(NULL, &j.ctx) != LLMT_OK)
        return 1;
    if (llmt_spec_parse_json(j.ctx, SPEC_405B, strlen(SPEC_405B), &j.spec) != LLMT_OK)
        die("spec", &j);
    j.world = 16384;
    if (bench_selected(&b, "plan 405B on 16384 GPUs"))
        report(bench_run(&b, "plan 405B on 16384 GPUs", plan_job, &j, 1, "plans"), 0.05);
    j.with_layout = 1;
    if (bench_selected(&b, "plan 405B on 16384 GPUs + all groups"))
        report(bench_run(&b, "plan 405B on 16384 GPUs + all groups", plan_job, &j, 1,
                         "plans"), 0.05);
    if (bench_selected(&b, "auto 405B on 16384 GPUs (tp<=8)")) {
        report(bench_run(&b, "auto 405B on 16384 GPUs (tp<=8)", auto_job, &j, 1,
                         "searches"), 2.0);
        printf("     (%lld layouts evaluated)\n", (long long)last_evaluated);
    }
    j.max_tp = 16384;
    if (bench_selected(&b, "auto 405B on 16384 GPUs (any tp the model allows)")) {
        report(bench_run(&b, "auto 405B on 16384 GPUs (any tp the model allows)", auto_job, &j, 1,
                         "searches"), 2.0);
        printf("     (%lld layouts evaluated)\n", (long long)last_evaluated);
    }
    llmt_spec_destroy(j.spec);
    llmt_context_destroy(j.ctx);
    return bench_finish(&b);
}
