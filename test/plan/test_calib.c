/* The planner against published runs (examples/specs/calibration/): fit the
 * cost model's four free constants by least squares over the runs' MFU,
 * check that the constants compiled into lib/plan are that optimum, refit
 * with each run left out and predict it (leave-one-out), check the order
 * of pairs of runs, the published memory facts, the rank of each published
 * layout among the auto-planner's, and that a calibration file with a
 * missing hardware key or an impossible layout is refused by key. Prints
 * the tables doc/planner.md reports. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "plan/plan.h"

static llmt_context *ctx;

static const char *rc_name(int rc)
{
    return rc == 2 ? "full" : rc == 1 ? "sel" : "none";
}

/* Runs the published layout may lose on by more than the top 5, each with
 * the reason doc/planner.md ("Auto-planner sanity") gives. The test fails
 * when a run outside this list falls out of the top 5, and when a listed
 * run is back in it (then the doc is stale). */
static const char *const disagree[] = {
    /* ZeRO-3 without model parallelism: the paper's own baseline, which
     * its Table 2 shows losing to PTD-P; the planner agrees (DP term:
     * ZeRO-3's per-micro-batch gathers over InfiniBand). */
    "zero3-175b-384gpu",
    "zero3-175b-768gpu",
    "zero3-175b-1536gpu",
    "zero3-530b-640gpu",
    "zero3-530b-1120gpu",
    "zero3-530b-2240gpu",
    /* Megatron-LM 2021 tp 8 (and tp 4 / tp 2 for the smaller) layouts
     * without interleaving: the planner prefers a lower tp with more
     * pipeline stages and interleaving, losing less to the TP term (the
     * 2021 software's all-reduces are not overlapped) and the bubble.
     * (3.6B on 64 GPUs is back in the top 5 since the planner's stages
     * weigh the head as the engine's do: its pipelined alternatives give
     * the last stage fewer layers.) */
    "megatron-7p5b-128gpu",
    "megatron-18b-256gpu",
    "megatron-39b-512gpu",
    "megatron-ptdp-175b-384gpu",
    "megatron-ptdp-175b-768gpu",
    "megatron-ptdp-175b-1536gpu",
    /* Llama 3: the published layouts are predicted over 95% of HBM and
     * lose on the bubble term to cp 4 / cp 64 layouts (doc/planner.md). */
    "llama3-405b-8k-8192gpu",
    "llama3-405b-8k-16384gpu",
    "llama3-405b-128k-16384gpu",
    NULL,
};

static int listed(const char *file)
{
    for (int i = 0; disagree[i]; i++)
        if (!strcmp(disagree[i], file))
            return 1;
    return 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

#define GOOD_HEAD                                                                    \
    "{\"source\": \"s\", \"table\": \"t\", \"row\": \"r\", \"comment\": \"c\","      \
    " \"check\": true, \"published\": {\"gpus\": %d, \"step_s\": 10},"               \
    " \"software\": {\"cp\": false, \"flash_attention\": false,"                     \
    " \"tp_comm_overlap\": false, \"dp_overlap\": true, \"grad_reduce\": \"fp32\"}," \
    " \"spec\": {\"model\": {\"arch\": \"gpt2\", \"layers\": 8, \"hidden\": 1024,"   \
    " \"heads\": 16, \"vocab\": 51200, \"seq_len\": 2048}, \"parallelism\":"         \
    " {\"tp\": 8, \"pp\": 2, \"dp\": 2}, \"batch\": {\"micro\": 1, \"global\": 16}," \
    " \"train\": {\"device\": \"cuda\"}, \"hardware\": {%s}}}"
#define HW_ALL "\"gpu\": \"A100-80GB\", \"gpus_per_node\": 8, \"nvlink_GBps\": 600, " \
               "\"ib_Gbps\": 200, \"ib_rails\": 8"
#define HW_NO_RAILS "\"gpu\": \"A100-80GB\", \"gpus_per_node\": 8, \"nvlink_GBps\": 600, " \
                    "\"ib_Gbps\": 200"

static void test_bad_input(void)
{
    char dir[] = "/tmp/llmt-calib-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    char path[256], text[2048];
    llmt_calib_run r;
    /* A good file loads: the control for the two below. */
    snprintf(path, sizeof path, "%s/good.json", dir);
    snprintf(text, sizeof text, GOOD_HEAD, 32, HW_ALL);
    write_file(path, text);
    CHECK_STATUS(llmt__calib_load(ctx, path, &r), LLMT_OK);
    CHECK(r.spec != NULL && r.gpus == 32 && r.pub_step_s == 10);
    CHECK(!r.sw.allow_cp && !r.sw.flash_attention && !r.sw.tp_comm_overlap && r.sw.dp_overlap &&
          r.sw.grad_reduce_fp32);
    llmt_spec_destroy(r.spec);
    /* A software key left out. */
    snprintf(text, sizeof text, GOOD_HEAD, 32, HW_ALL);
    char *fa = strstr(text, "\"flash_attention\": false,");
    if (fa)
        memset(fa, ' ', strlen("\"flash_attention\": false,"));
    write_file(path, text);
    CHECK_STATUS(llmt__calib_load(ctx, path, &r), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "software.flash_attention") != NULL);
    CHECK(r.spec == NULL);
    /* A hardware key left to its default. */
    snprintf(text, sizeof text, GOOD_HEAD, 32, HW_NO_RAILS);
    write_file(path, text);
    CHECK_STATUS(llmt__calib_load(ctx, path, &r), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "spec.hardware.ib_rails") != NULL);
    CHECK(r.spec == NULL);
    /* A layout that is not the published GPU count. */
    snprintf(text, sizeof text, GOOD_HEAD, 48, HW_ALL);
    write_file(path, text);
    CHECK_STATUS(llmt__calib_load(ctx, path, &r), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "spec.parallelism") != NULL);
    CHECK(strstr(llmt_context_last_error(ctx), "published.gpus") != NULL);
    /* A layout the spec rules refuse (tp does not divide the heads). */
    snprintf(text, sizeof text, GOOD_HEAD, 32, HW_ALL);
    char *t = strstr(text, "\"heads\": 16");
    if (t)
        memcpy(t, "\"heads\": 12", 11);
    write_file(path, text);
    CHECK_STATUS(llmt__calib_load(ctx, path, &r), LLMT_ERR_SPEC);
    CHECK(strstr(llmt_context_last_error(ctx), "parallelism.tp") != NULL);
    /* No source. */
    write_file(path, "{\"table\": \"t\"}");
    CHECK_STATUS(llmt__calib_load(ctx, path, &r), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "source") != NULL);
    remove(path);
    rmdir(dir);
}

int main(void)
{
    if (llmt_context_create(NULL, &ctx) != LLMT_OK)
        return 1;
    test_bad_input();

    const char *root = getenv("LLMT_SOURCE_ROOT");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/examples/specs/calibration", root ? root : ".");
    llmt_calib_run *runs = NULL;
    int n = 0;
    llmt_status st = llmt__calib_load_dir(ctx, dir, &runs, &n);
    if (st != LLMT_OK)
        fprintf(stderr, "%s\n", llmt_context_last_error(ctx));
    CHECK_STATUS(st, LLMT_OK);
    int nchk = 0;
    for (int i = 0; i < n; i++)
        nchk += runs[i].check;
    /* The seven original runs and the new papers' runs. */
    CHECK(n >= 40);
    CHECK(nchk >= 35);

    /* Megatron's FLOPs with full recomputation are ours (the conversion of
     * their TFLOP/s into a step time depends on it). */
    for (int i = 0; i < n; i++) {
        if (strcmp(runs[i].file, "megatron-gpt3-175b-1024gpu"))
            continue;
        llmt_plan_estimate e;
        llmt__plan_estimate(runs[i].spec, runs[i].gpus, &e);
        double B = 1536, S = 2048, l = 96, h = 12288, V = 51200;
        CHECK_CLOSE(e.hw_flops_per_step,
                    96 * B * S * l * h * h * (1 + S / (6 * h) + V / (16 * l * h)), 1e-9, 0);
        CHECK_CLOSE(e.model_flops_per_step,
                    72 * B * S * l * h * h * (1 + S / (6 * h)) + 6 * B * S * V * h, 1e-9, 0);
    }

    /* In-sample fit; the compiled constants are its optimum. */
    llmt_plan_consts kfit;
    double rms_fit = llmt__calib_fit(runs, n, -1, &kfit);
    double rms_def = 0;
    for (int i = 0; i < n; i++)
        if (runs[i].check) {
            double d = llmt__calib_predict(&runs[i], &llmt__plan_consts_default, NULL) -
                       runs[i].pub_mfu;
            rms_def += d * d;
        }
    rms_def = sqrt(rms_def / (nchk ? nchk : 1));
    const llmt_plan_consts *kd = &llmt__plan_consts_default;
    printf("fit (%d runs): compute_overhead %.4f, fixed_layer_s %.4f ms, gemm_reread %.3f, "
           "jitter %.4f, zero3_overlap %.3f, attn_eff_ratio %.4f: RMS %.2f points\n",
           nchk, kfit.compute_overhead, kfit.fixed_layer_s * 1e3, kfit.gemm_reread, kfit.jitter,
           kfit.zero3_overlap, kfit.attn_eff_ratio, 100 * rms_fit);
    printf("compiled:     compute_overhead %.4f, fixed_layer_s %.4f ms, gemm_reread %.3f, "
           "jitter %.4f, zero3_overlap %.3f, attn_eff_ratio %.4f: RMS %.2f points\n",
           kd->compute_overhead, kd->fixed_layer_s * 1e3, kd->gemm_reread, kd->jitter,
           kd->zero3_overlap, kd->attn_eff_ratio, 100 * rms_def);
    CHECK(rms_def <= rms_fit + 0.001);

    /* Leave-one-out: refit without run i, predict run i. */
    double *pin = calloc((size_t)n, sizeof(double));
    double *loo = calloc((size_t)n, sizeof(double));
    int outside = 0;
    printf("\n| run | GPUs | tp/cp/pp/dp v | rc | published MFU | in-sample | err | leave-one-out | err | mem GB |\n");
    printf("|-----|------|---------------|----|---------------|-----------|-----|---------------|-----|--------|\n");
    for (int i = 0; pin && loo && i < n; i++) {
        llmt_plan_estimate e;
        pin[i] = llmt__calib_predict(&runs[i], &llmt__plan_consts_default, &e);
        llmt_plan_consts k;
        llmt__calib_fit(runs, n, runs[i].check ? i : -1, &k);
        loo[i] = llmt__calib_predict(&runs[i], &k, NULL);
        const llmt_spec *s = runs[i].spec;
        double err_in = 100 * (pin[i] - runs[i].pub_mfu), err_loo = 100 * (loo[i] - runs[i].pub_mfu);
        printf("| %s%s | %d | %lld/%lld/%lld/%lld v%lld | %s | %.1f%% | %.1f%% | %+.1f | %.1f%% | %+.1f | %.0f |\n",
               runs[i].file, runs[i].check ? "" : " (not checked)", (int)runs[i].gpus,
               (long long)s->parallelism.tp, (long long)s->parallelism.cp,
               (long long)s->parallelism.pp, (long long)s->parallelism.dp,
               (long long)s->parallelism.virtual_stages, rc_name(s->parallelism.recompute),
               100 * runs[i].pub_mfu, 100 * pin[i], err_in, 100 * loo[i], err_loo,
               e.mem_total / 1e9);
        if (runs[i].check && fabs(err_loo) > 5) {
            outside++;
            fprintf(stderr, "leave-one-out: %s off by %+.1f points\n", runs[i].file, err_loo);
        }
    }
    /* Out of sample: the target, all but one run within 5 MFU
     * points; and none beyond 7. */
    int beyond7 = 0;
    for (int i = 0; loo && i < n; i++)
        beyond7 += runs[i].check && fabs(loo[i] - runs[i].pub_mfu) > 0.07;
    printf("\nleave-one-out: %d checked runs outside +-5 MFU points\n", outside);
    CHECK(outside <= 1);
    CHECK(beyond7 == 0);

    /* Pairs ordered as published (by MFU), with the leave-one-out
     * predictions; pairs published within 0.5 points of each other are
     * ties and not counted. */
    int pairs = 0, ordered = 0, pairs_in = 0, ordered_in = 0;
    for (int i = 0; loo && i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (!runs[i].check || !runs[j].check)
                continue;
            double dp = runs[i].pub_mfu - runs[j].pub_mfu;
            if (fabs(dp) < 0.005)
                continue;
            pairs++;
            ordered += (loo[i] - loo[j]) * dp > 0;
            pairs_in++;
            ordered_in += (pin[i] - pin[j]) * dp > 0;
        }
    printf("\npairs ordered as published: %d of %d (%.1f%%) leave-one-out, %d of %d "
           "(%.1f%%) in-sample\n", ordered, pairs, 100.0 * ordered / (pairs ? pairs : 1),
           ordered_in, pairs_in, 100.0 * ordered_in / (pairs_in ? pairs_in : 1));
    CHECK(pairs > 300);
    CHECK(ordered >= 0.9 * pairs);

    /* Memory against the papers that state it (Korthikanti et al. 2022,
     * sec. 6.1): the published layouts fit in 80 GB, and without sequence
     * parallelism and selective recomputation none of them does. */
    int mem_checked = 0;
    for (int i = 0; i < n; i++) {
        llmt_plan_estimate e;
        if (runs[i].mem_fits == 1) {
            llmt__plan_estimate(runs[i].spec, runs[i].gpus, &e);
            if (!e.fits)
                fprintf(stderr, "memory: %s ran but is predicted at %.1f GB\n",
                        runs[i].file, e.mem_total / 1e9);
            CHECK(e.fits);
            mem_checked++;
        }
        if (runs[i].mem_fits_without == 0) {
            llmt_spec w = *runs[i].spec;
            w.parallelism.recompute = LLMT_SPEC_RECOMPUTE_NONE;
            w.parallelism.sequence_parallel = 0;
            llmt__plan_estimate(&w, runs[i].gpus, &e);
            if (e.fits)
                fprintf(stderr, "memory: %s without SP and selective recomputation "
                        "is predicted to fit (%.1f GB)\n", runs[i].file, e.mem_total / 1e9);
            CHECK(!e.fits);
            mem_checked++;
        }
    }
    CHECK(mem_checked >= 8);

    /* The published layout among the auto-planner's. */
    int in_top5 = 0;
    printf("\n| run | rank | of | published step | best layout | best step | gain | term |\n");
    printf("|-----|------|----|----------------|-------------|-----------|------|------|\n");
    for (int i = 0; i < n; i++) {
        if (!runs[i].check)
            continue;
        llmt_plan_rank rk;
        CHECK_STATUS(
            llmt__plan_rank_layout(ctx, runs[i].spec, runs[i].gpus, NULL, &runs[i].sw, &rk),
            LLMT_OK);
        const llmt_plan_cand *b = &rk.best, *p = &rk.published;
        /* The steps' terms add up to the step. */
        double sum = 0;
        for (int j = 0; j < LLMT_PLAN_NTERMS; j++)
            sum += p->terms[j];
        CHECK_CLOSE(sum, p->step_time_s, 1e-9, 0);
        int kmax = 0;
        for (int j = 1; j < LLMT_PLAN_NTERMS; j++)
            if (p->terms[j] - b->terms[j] > p->terms[kmax] - b->terms[kmax])
                kmax = j;
        in_top5 += rk.rank <= 5;
        printf("| %s | %d | %d | %.3g s%s | tp%d cp%d pp%d dp%d v%d mb%d | %.3g s | %.1f%% | "
               "%s %+.3g s |\n",
               runs[i].file, rk.rank, rk.layouts, p->step_time_s,
               rk.published_fits ? "" : " (over 95% of HBM)", b->tp, b->cp, b->pp, b->dp, b->v,
               b->micro, b->step_time_s, 100 * (p->step_time_s / b->step_time_s - 1),
               rk.rank > 1 ? llmt__plan_terms[kmax].label : "-",
               rk.rank > 1 ? p->terms[kmax] - b->terms[kmax] : 0.0);
        if (listed(runs[i].file))
            CHECK(rk.rank > 5);
        else {
            if (rk.rank > 5)
                fprintf(stderr, "rank: %s's published layout is #%d\n", runs[i].file, rk.rank);
            CHECK(rk.rank <= 5);
        }
    }
    printf("\nwithin the top 5: %d of %d\n", in_top5, nchk);
    free(pin);
    free(loo);
    llmt__calib_free(runs, n);
    llmt_context_destroy(ctx);
    return check_exit("test_calib");
}
