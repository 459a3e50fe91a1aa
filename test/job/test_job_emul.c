/* llmt_job with train.device "emulated" (the GPU engine's bf16 arithmetic
 * on the CPU, lib/exec/dev_emul.c, its memory treated as a GPU's: every
 * group over the job's host communicator stages device buffers through
 * host copies as a CUDA run does), in process: one thread per rank on an
 * in-process communicator, each layout against one emulated rank on the
 * same spec (the same data and seed, global batch 8 = micro 2 x accum x
 * dp, so every layout trains on the same sequences).
 * (a) one emulated rank (Llama, 2 layers, width 32, 4 heads, 2 kv heads,
 *     seq 16, byte tokens, 6 AdamW steps, a validation every 3) is the
 *     reference; its llmt_job_info says engine "emulated" and device
 *     LLMT_DEVICE_CPU (the same spec on train.device cpu: engine "cpu");
 * (b) tp 2 x dp 2 ZeRO-1 with sequence parallelism, pp 2 x dp 2 (1f1b),
 *     cp 2 x dp 2 and tp 2 x pp 2 on emulated: every rank's loss of every
 *     step and its validation losses within 2^-9 relative of the single
 *     rank's, and some rank's perf split times the waits of each of the
 *     layout's groups (the groups ran);
 * (c) MoE (4 experts of 24, top-2, capacity 1.0: jt_moe_spec on emulated)
 *     against its own emulated rank: dp 4 x ep 2, pp 2 x dp 2 x ep 2 (4
 *     ranks each: ep runs inside dp) and pp 2 x dp 4 x ep 2 (8 ranks),
 *     within 2^-9, their EP, PP and DP waits timed;
 * (d) resharding through the job's checkpoint on emulated: tp 2 x dp 2
 *     runs steps 1-4 and saves, one emulated rank resumes for 5-6: losses
 *     within 2^-9 of the uninterrupted rank's; the same step-4 checkpoint
 *     (a copy of the run directory) resumed by the fp32 CPU engine
 *     (train.device cpu, one rank) trains steps 5-6 within 2^-9 of the
 *     emulated rank's too: one checkpoint format across engines. Each
 *     engine ran its own arithmetic (the CPU engine's losses differ from
 *     the emulation's), and the bound tells the checkpoint's state from a
 *     fresh start (the reference's loss moves more than 4 x 2^-9 from step
 *     1 to 5: measured 2.1e-2);
 * (e) refused at creation, before any CUDA is touched (so on any
 *     machine), naming the key and "emulated": train.device cuda with tp 2
 *     x dp 2, cp 2 x dp 2, pp 2 x dp 2, and a MoE model with dp 2; and
 *     precision.param fp32 on emulated, naming precision.param.
 * (f) precision.gemm fp8, and with fp8_format e4m3, on emulated: the
 *     losses differ from bf16's (and from each other's) and stay within
 *     1e-2 relative of bf16's.
 * Why 2^-9: the device tests' bound (test/train/test_device_tpdp.c): the
 * layouts change the order of fp32 sums, and on bf16 storage a different
 * rounding of one activation moves the loss by up to a few bf16 ulps
 * (2^-8 relative each) averaged over the tokens; measured at most 1.7e-5
 * (tp), 0 for pp and the MoE layouts (their fp32 differences vanish in
 * the bf16 parameters). Across engines the same bound: from one state the
 * two compute the loss in bf16 and in fp32, the same rounding the bound
 * covers; measured 4.8e-5 (the CPU engine's own uninterrupted run 5.0e-5).
 * The run takes about 4 s on 2 cores.
 * usage: test_job_emul CORPUS_DIR (any directory of text files) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "job_threads.h"
#include "llmtrain.h"

#define STEPS 6
_Static_assert(STEPS <= JT_MAXSTEPS, "jt_rank records steps 1..JT_MAXSTEPS");

#define BF16_BOUND 0.001953125 /* 2^-9 */

static jt_suite g;

#define LLAMA \
    "\"arch\": \"llama\", \"layers\": 2, \"hidden\": 32, \"heads\": 4, \"kv_heads\": 2"

/* text inserted into json (capacity cap) before (after = 0) or after the
 * first `anchor`; 0 when anchor is missing or it does not fit. */
static int splice(char *json, size_t cap, const char *anchor, int after, const char *text)
{
    char *p = strstr(json, anchor);
    size_t tl = strlen(text);
    CHECK(p && strlen(json) + tl < cap);
    if (!p || strlen(json) + tl >= cap)
        return 0;
    if (after)
        p += strlen(anchor);
    memmove(p + tl, p, strlen(p) + 1);
    memcpy(p, text, tl);
    return 1;
}

/* train.device dev in a spec of jt_suite_spec (which gives none) or of
 * jt_moe_spec (whose "device": "cpu" is removed first). */
static void set_device(char *json, size_t cap, const char *dev)
{
    static const char cpu[] = ", \"device\": \"cpu\"";
    char kv[64], *p = strstr(json, cpu);
    if (p)
        memmove(p, p + strlen(cpu), strlen(p + strlen(cpu)) + 1);
    snprintf(kv, sizeof kv, "\"device\": \"%s\", ", dev);
    splice(json, cap, "\"train\": {", 1, kv);
}

/* The dense spec (jt_suite_spec: Llama, validation every 3) on dev. */
static void spec(char *out, size_t cap, const char *par, const char *dev)
{
    jt_suite_spec(&g, out, cap, LLAMA, par, 16);
    set_device(out, cap, dev);
}

/* The MoE spec (jt_moe_spec, capacity 1.0) on dev. */
static void moe_spec(char *out, size_t cap, const char *par, const char *dev)
{
    jt_moe_spec(out, cap, "emuljob", "\"capacity_factor\": 1.0", par, g.prep);
    set_device(out, cap, dev);
}

/* What llmt_job_info says of `json`'s engine and device (a job created in
 * run directory tmp/NAME, not run). */
static void check_info(const char *json, const char *name, const char *engine, int device)
{
    char dir[800];
    snprintf(dir, sizeof dir, "%s/%s", g.tmp, name);
    llmt_context *ctx = NULL;
    llmt_job *job = NULL;
    llmt_status s = jt_create_one(json, dir, &ctx, &job);
    if (s != LLMT_OK)
        fprintf(stderr, "FAIL %s: %s\n", name, llmt_context_last_error(ctx));
    CHECK_STATUS(s, LLMT_OK);
    if (s == LLMT_OK) {
        llmt_job_info i;
        memset(&i, 0, sizeof i);
        i.struct_size = sizeof i;
        CHECK_STATUS(llmt_job_get_info(job, &i), LLMT_OK);
        printf("%s: engine \"%s\", device %d\n", name, i.engine ? i.engine : "(null)",
               (int)i.device);
        CHECK(i.engine && !strcmp(i.engine, engine));
        CHECK_EQ_INT(i.device, device);
    }
    llmt_job_destroy(job);
    llmt_context_destroy(ctx);
}

/* Layout `what` (par on n ranks) against ref; some rank's perf split
 * times the waits of each group of `groups` (-1 ends). */
static void compare(const char *what, const char *json, int n, const jt_rank *ref, jt_rank *a,
                    const int *groups, int with_val)
{
    char dir[800];
    snprintf(dir, sizeof dir, "%s/%s", g.tmp, what);
    for (char *c = dir + strlen(g.tmp) + 1; *c; c++)
        if (*c == ' ' || *c == ',')
            *c = '_';
    if (!run_layout(what, json, n, dir, 0, 0, a))
        return;
    if (with_val)
        check_losses_val(what, a, n, ref, 1, STEPS);
    else
        check_losses(what, a, n, ref, 1, STEPS);
    /* some rank waited on each group in the last step (a rank whose
     * messages were there before it asked times 0: the clean-clone CI's
     * ASan run saw it once for tp 2 x pp 2's PP group on rank 1) */
    for (int k = 0; groups[k] >= 0; k++) {
        int timed = 0;
        for (int r = 0; r < n; r++)
            timed += a[r].comm_s[groups[k]] > 0;
        if (!timed)
            fprintf(stderr, "FAIL %s: no rank timed group %d\n", what, groups[k]);
        CHECK(timed > 0);
    }
}

/* Creation of json on world ranks refused naming every string of want
 * (jt_refused, run directory tmp/bad). */
static void refused(const char *what, const char *json, int world, const char *const *want)
{
    jt_suite_refused(&g, what, json, world, want);
}

int main(int argc, char **argv)
{
    char json[4096], dir[800];
    static jt_rank ref[1], mref[1], cref[1], a[JT_MAXR];
    jt_cfg = (jt_config){STEPS, 3, JT_SAMPLE_NONE, 34, BF16_BOUND, 1};
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    if (!jt_suite_open(&g, "emuljob", argv[1], LLAMA))
        return jt_suite_close(&g, "job-emul");

    /* (a) the reference: one emulated rank */
    spec(json, sizeof json, "\"tp\": 1", "emulated");
    check_info(json, "info-emul", "emulated", LLMT_DEVICE_CPU);
    snprintf(dir, sizeof dir, "%s/one", g.tmp);
    if (!run_layout("one emulated rank", json, 1, dir, 0, 0, ref))
        return jt_suite_close(&g, "job-emul");
    printf("one emulated rank: losses %.6f .. %.6f, validation %.6f, %.6f\n",
           (double)ref->loss[1], (double)ref->loss[STEPS], (double)ref->val[3],
           (double)ref->val[6]);
    spec(json, sizeof json, "\"tp\": 1", "cpu");
    check_info(json, "info-cpu", "cpu", LLMT_DEVICE_CPU);

    /* (b) layouts */
    static const int g_tpdp[] = {LLMT_JOB_GROUP_TP, LLMT_JOB_GROUP_DP, -1};
    static const int g_ppdp[] = {LLMT_JOB_GROUP_PP, LLMT_JOB_GROUP_DP, -1};
    static const int g_cpdp[] = {LLMT_JOB_GROUP_CP, LLMT_JOB_GROUP_DP, -1};
    static const int g_tppp[] = {LLMT_JOB_GROUP_TP, LLMT_JOB_GROUP_PP, -1};
    static const int g_ep[] = {LLMT_JOB_GROUP_EP, LLMT_JOB_GROUP_DP, -1};
    static const int g_ppep[] = {LLMT_JOB_GROUP_PP, LLMT_JOB_GROUP_EP, LLMT_JOB_GROUP_DP, -1};
    static const struct {
        const char *what, *par;
        const int *groups;
    } lay[] = {
        {"tp 2 x dp 2 ZeRO-1 SP", "\"tp\": 2, \"zero\": 1, \"sequence_parallel\": true",
         g_tpdp},
        {"pp 2 x dp 2 1f1b", "\"pp\": 2, \"pp_schedule\": \"1f1b\"", g_ppdp},
        {"cp 2 x dp 2", "\"cp\": 2", g_cpdp},
        {"tp 2 x pp 2", "\"tp\": 2, \"pp\": 2", g_tppp},
    };
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) {
        spec(json, sizeof json, lay[i].par, "emulated");
        compare(lay[i].what, json, 4, ref, a, lay[i].groups, 1);
    }

    /* (c) MoE against its own emulated rank */
    moe_spec(json, sizeof json, "\"dp\": 1", "emulated");
    check_info(json, "info-moe", "emulated", LLMT_DEVICE_CPU);
    snprintf(dir, sizeof dir, "%s/moe-one", g.tmp);
    if (run_layout("moe one emulated rank", json, 1, dir, 0, 0, mref)) {
        printf("moe one emulated rank: losses %.6f .. %.6f\n", (double)mref->loss[1],
               (double)mref->loss[STEPS]);
        moe_spec(json, sizeof json, "\"dp\": 4, \"ep\": 2", "emulated");
        compare("moe dp 4 x ep 2", json, 4, mref, a, g_ep, 0);
        moe_spec(json, sizeof json, "\"pp\": 2, \"dp\": 2, \"ep\": 2", "emulated");
        compare("moe pp 2 x dp 2 x ep 2", json, 4, mref, a, g_ppep, 0);
        moe_spec(json, sizeof json, "\"pp\": 2, \"dp\": 4, \"ep\": 2", "emulated");
        compare("moe pp 2 x dp 4 x ep 2", json, 8, mref, a, g_ppep, 0);
    }

    /* (d) tp 2 x dp 2 saves at step 4; one emulated rank resumes it, and
     * the CPU engine a copy of it */
    snprintf(dir, sizeof dir, "%s/reshard", g.tmp);
    spec(json, sizeof json, "\"tp\": 2", "emulated");
    if (run_layout("tp 2 x dp 2 steps 1-4", json, 4, dir, 0, 4, a)) {
        check_losses_val("tp 2 x dp 2, then", a, 4, ref, 1, 4);
        char cmd[2000];
        snprintf(cmd, sizeof cmd, "cp -a %s/reshard %s/xengine", g.tmp, g.tmp);
        CHECK(system(cmd) == 0);
        spec(json, sizeof json, "\"tp\": 1", "emulated");
        if (run_layout("one emulated rank resumes", json, 1, dir, 1, 0, a))
            check_losses_val("one emulated rank resumes it", a, 1, ref, 5, STEPS);
        /* the CPU engine's own uninterrupted run, then the resume */
        spec(json, sizeof json, "\"tp\": 1", "cpu");
        snprintf(dir, sizeof dir, "%s/cpu-one", g.tmp);
        int have_cpu = run_layout("one cpu rank", json, 1, dir, 0, 0, cref);
        snprintf(dir, sizeof dir, "%s/xengine", g.tmp);
        if (have_cpu && run_layout("cpu engine resumes", json, 1, dir, 1, 0, a)) {
            check_losses_val("cpu engine resumes it", a, 1, ref, 5, STEPS);
            double own = 0, res = 0;
            for (int k = 1; k <= STEPS; k++) {
                own = fmax(own, jt_rel(cref->loss[k], ref->loss[k]));
                if (k >= 5)
                    res = fmax(res, jt_rel(a[0].loss[k], ref->loss[k]));
            }
            double moved = jt_rel(ref->loss[5], ref->loss[1]);
            printf("against the emulated rank: the cpu engine's own run %.3g relative (steps "
                   "1-6), the cpu engine resumed %.3g (5-6); the emulated rank's loss moved "
                   "%.3g from step 1 to 5\n",
                   own, res, moved);
            /* each engine ran its own arithmetic (bf16 is not fp32), and
             * the bound tells the checkpoint's state from a fresh one */
            CHECK(own > 0 && res > 0);
            CHECK(moved > 4 * BF16_BOUND);
        }
    }

    /* (f) fp8 GEMMs on emulated (precision.gemm fp8, delayed scaling;
     * forward, weight and data gradients): they take effect (the losses
     * differ from bf16's) and stay within 1e-2 relative of them (E4M3's
     * 3 mantissa bits on the forward GEMMs' inputs, E5M2's 2 on the
     * gradients, fp32 accumulation; doc/fp8.md); fp8_format e4m3 (E4M3
     * gradients too) takes effect as well: its losses differ from the
     * hybrid run's, within the same bound of bf16's */
    static jt_rank f8[1], f8e4[1];
    spec(json, sizeof json, "\"tp\": 1", "emulated");
    splice(json, sizeof json, "\"hardware\"", 0, "\"precision\": {\"gemm\": \"fp8\"}, ");
    snprintf(dir, sizeof dir, "%s/fp8", g.tmp);
    int f8ok = run_layout("one emulated rank, fp8 GEMMs", json, 1, dir, 0, 0, f8);
    if (f8ok) {
        double d = 0;
        for (int k = 1; k <= STEPS; k++)
            d = fmax(d, jt_rel(f8->loss[k], ref->loss[k]));
        printf("fp8 GEMMs on emulated: losses within %.3g relative of bf16's (bound 1e-2)\n",
               d);
        CHECK(d > 0 && d <= 1e-2);
    }
    spec(json, sizeof json, "\"tp\": 1", "emulated");
    splice(json, sizeof json, "\"hardware\"", 0,
           "\"precision\": {\"gemm\": \"fp8\", \"fp8_format\": \"e4m3\"}, ");
    snprintf(dir, sizeof dir, "%s/fp8-e4m3", g.tmp);
    if (run_layout("one emulated rank, fp8 GEMMs, E4M3 gradients", json, 1, dir, 0, 0, f8e4) &&
        f8ok) {
        double d = 0, h = 0;
        for (int k = 1; k <= STEPS; k++) {
            d = fmax(d, jt_rel(f8e4->loss[k], ref->loss[k]));
            h = fmax(h, jt_rel(f8e4->loss[k], f8->loss[k]));
        }
        printf("fp8_format e4m3 on emulated: losses within %.3g relative of bf16's, %.3g of "
               "hybrid's\n",
               d, h);
        CHECK(h > 0 && d <= 1e-2);
    }

    /* (e) refused by name */
    static const char *const w_tp[] = {"parallelism.tp", "emulated", NULL};
    static const char *const w_cp[] = {"parallelism.cp", "emulated", NULL};
    static const char *const w_pp[] = {"parallelism.pp", "emulated", NULL};
    static const char *const w_moe[] = {"model.moe.experts", "emulated", NULL};
    static const char *const w_prec[] = {"precision.param", "emulated", NULL};
    spec(json, sizeof json, "\"tp\": 2", "cuda");
    refused("cuda tp 2 x dp 2", json, 4, w_tp);
    spec(json, sizeof json, "\"cp\": 2", "cuda");
    refused("cuda cp 2 x dp 2", json, 4, w_cp);
    spec(json, sizeof json, "\"pp\": 2", "cuda");
    refused("cuda pp 2 x dp 2", json, 4, w_pp);
    moe_spec(json, sizeof json, "\"dp\": 2", "cuda");
    refused("cuda moe dp 2", json, 2, w_moe);
    spec(json, sizeof json, "\"tp\": 1", "emulated");
    splice(json, sizeof json, "\"hardware\"", 0, "\"precision\": {\"param\": \"fp32\"}, ");
    refused("emulated precision.param fp32", json, 1, w_prec);

    return jt_suite_close(&g, "job-emul");
}
