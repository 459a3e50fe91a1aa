/* llmt_job under tensor parallelism (issue 16), in process: one thread per
 * rank on an in-process communicator, each layout against the single-rank
 * job on the same spec (the independent reference: the same data and seed,
 * global batch 8 = micro 2 x accum x dp, so every layout trains on the same
 * sequences).
 * (a) tp 2 x dp 2 and tp 2 x dp 1, 8 AdamW steps: every rank's per-step
 *     loss within 1e-5 relative of the single rank's; the final
 *     parameters (the safetensors exports of the step-8 checkpoints, read
 *     as fp32) within 1e-5 relative L2 of the single rank's, every element
 *     within 1e-5 but at most 1 in 10^4, which stay within 1e-4 (the bound
 *     of test/train/test_device_tp.c, and why: an element whose gradient
 *     is within rounding of zero gets an AdamW step that the ulps decide);
 *     the same for Llama with kv heads split (kv 2, tp 2 x dp 2) and
 *     replicated (kv 1, tp 2 x dp 1) against its own single rank; every
 *     rank's perf split (llmt_job_get_perf) times its TP group's waits;
 * (b) the reshard chain through the job's checkpoints, in one run
 *     directory: tp 4 x dp 2 ZeRO-1 runs steps 1-2, tp 2 x dp 1 resumes for
 *     3-4, tp 1 x dp 4 ZeRO-3 for 5-6, tp 4 x dp 1 for 7-8; each step's
 *     loss within 1e-5 relative of the uninterrupted single rank's;
 * (c) the step-8 checkpoint of tp 2 x dp 1 exports (safetensors and
 *     llm.c) to the same bytes as the same state loaded by one process
 *     (tp 1) and saved again;
 * (d) bad layouts are refused at creation, naming the key, before the run
 *     directory is made.
 * Why 1e-5: tp and dp change only the order of fp32 sums (partial GEMM
 * sums all-reduced, gradients reduced across replicas), and AdamW at lr
 * 1e-3 moves a weight by about lr a step whatever its gradient, as in
 * test/train/test_device_tp.c; the worst differences are printed, and so
 * are the mean step times of one rank and of tp 2 x dp 2.
 * usage: test_job_tp CORPUS_DIR (any directory of text files) */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "job_ckpt.h"
#include "job_threads.h"
#include "llmtrain.h"

#define STEPS 8
_Static_assert(STEPS <= JT_MAXSTEPS, "jt_rank records steps 1..JT_MAXSTEPS");
#define TOL 1e-5

static char tmp[512], prep[700];

/* The model and run every layout shares; TP and ZeRO vary (dp > 0 sets
 * parallelism.dp, model replaces the shape, device train.device). The byte
 * tokenizer's 257 tokens in a vocabulary of 320 (a multiple of 64: the
 * padded vocabulary splits 4 ways). */
#define GPT2 "\"arch\": \"gpt2\", \"layers\": 2, \"hidden\": 32, \"heads\": 4"
static void spec(char *out, size_t cap, int tp, int zero, int dp, const char *model,
                 const char *device)
{
    char dpk[32] = "";
    if (dp > 0)
        snprintf(dpk, sizeof dpk, ", \"dp\": %d", dp);
    snprintf(
        out, cap,
        "{\"name\": \"tpjob\", \"model\": {%s, \"vocab\": 320, \"seq_len\": 16},"
        " \"batch\": {\"micro\": 2, \"global\": 8},"
        " \"parallelism\": {\"tp\": %d, \"zero\": %d%s},"
        " \"optimizer\": {\"lr\": 1e-3}, \"schedule\": {\"kind\": \"cosine\", "
        "\"warmup_steps\": 2},"
        " \"train\": {\"steps\": %d, \"seed\": 3, \"eval_interval\": 0, \"eval_batches\": 1,"
        " \"log_interval\": 0, \"threads\": 1, \"sample_tokens\": 0, \"device\": \"%s\"},"
        " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
        " \"checkpoint\": {\"interval\": 2, \"async\": false}, \"hardware\": {\"gpu\": "
        "\"cpu\"}}",
        model ? model : GPT2, tp, zero, dpk, STEPS, device ? device : "cpu", prep);
}

/* Export the newest checkpoint under root to safetensors (out.safetensors)
 * and, for GPT-2 (llmc), llm.c (out.bin), as `llmtrain ckpt export` does;
 * *step gets its step. */
static int export_ckpt(const char *root, const char *out, int llmc, int64_t *step)
{
    char st[1024], lc[1024];
    snprintf(st, sizeof st, "%s.safetensors", out);
    snprintf(lc, sizeof lc, "%s.bin", out);
    return jc_export(root, -1, st, llmc ? lc : NULL, 4, step, NULL);
}

/* The newest checkpoint under root loaded by one process (tp 1, the
 * plain trainer with the job's schedule) and saved again, at the same
 * step, under out_root, with the job's own keys (the loader's data.* and
 * the anomaly policy's job.*: a job resumed in one process saves them as
 * it read them). */
static int resave_tp1(const char *root, const char *out_root)
{
    llmt_model_config c;
    llmt_model_config_init(&c, sizeof c);
    c.arch = LLMT_ARCH_GPT2;
    c.layers = 2;
    c.width = 32;
    c.heads = 4;
    c.vocab_size = 320;
    c.padded_vocab_size = 320;
    c.max_seq_len = 16;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_ckpt *in = NULL, *out = NULL;
    llmt_status s = llmt_model_create(NULL, &c, &m);
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = 2;
    o.seq_len = 16;
    o.threads = 1;
    o.lr = 1e-3f; /* the spec's schedule, as the job maps it */
    o.schedule = LLMT_LR_COSINE;
    o.warmup_steps = 2;
    o.total_steps = STEPS;
    o.min_lr = (float)(0.1 * 1e-3);
    if (s == LLMT_OK)
        s = llmt_trainer_create(m, &o, &tr);
    llmt_ckpt_opts co;
    llmt_ckpt_opts_init(&co, sizeof co);
    co.keep_last = 0;
    int64_t step = -1;
    if (s == LLMT_OK)
        s = llmt_ckpt_create(NULL, root, &co, &in);
    if (s == LLMT_OK)
        s = llmt_ckpt_open_latest(in, &step);
    if (s == LLMT_OK)
        s = llmt_trainer_ckpt_read(tr, in);
    if (s == LLMT_OK)
        s = llmt_ckpt_create(NULL, out_root, &co, &out);
    if (s == LLMT_OK)
        s = llmt_ckpt_begin(out, step);
    if (s == LLMT_OK)
        s = llmt_trainer_ckpt_add(tr, out);
    size_t nkv = 0;
    if (s == LLMT_OK)
        s = llmt_ckpt_open_info(in, NULL, NULL, &nkv);
    for (size_t k = 0; s == LLMT_OK && k < nkv; k++) {
        const char *key = NULL;
        char v[256];
        s = llmt_ckpt_kv_key(in, k, &key);
        if (s == LLMT_OK && (!strncmp(key, "data.", 5) || !strncmp(key, "job.", 4))) {
            s = llmt_ckpt_get_kv(in, key, v, sizeof v, NULL);
            if (s == LLMT_OK)
                s = llmt_ckpt_set_kv(out, key, v);
        }
    }
    if (s == LLMT_OK)
        s = llmt_ckpt_save(out, 0);
    if (s != LLMT_OK)
        fprintf(stderr, "resave under tp 1: %s / %s / %s\n",
                tr ? llmt_trainer_last_error(tr) : "", in ? llmt_ckpt_last_error(in) : "",
                out ? llmt_ckpt_last_error(out) : "");
    CHECK_STATUS(s, LLMT_OK);
    llmt_ckpt_destroy(in);
    llmt_ckpt_destroy(out);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return s == LLMT_OK;
}

static int same_file(const char *fa, const char *fb, long *bytes)
{
    long la, lb;
    char *a = test_slurp(fa, &la), *b = test_slurp(fb, &lb);
    int same = a && b && la > 0 && la == lb && !memcmp(a, b, (size_t)la);
    *bytes = la;
    free(a);
    free(b);
    return same;
}

static double mean_step_s(const jt_rank *a)
{
    double s = 0;
    for (int k = 2; k <= STEPS; k++) /* the first allocates the buffers */
        s += a->step_s[k];
    return s / (STEPS - 1);
}

/* One layout of `model` (NULL: the GPT-2) on n ranks against its single
 * rank (ref, whose final export is ref_st): losses and final parameters. */
static void compare(const char *name, const char *model, int tp, int n, const jt_rank *ref,
                    const char *ref_st, jt_rank *a)
{
    char json[4096], dir[800], root[900], st[900];
    int64_t step = -1;
    spec(json, sizeof json, tp, 0, 0, model, NULL);
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    for (char *c = dir + strlen(tmp) + 1; *c; c++)
        if (*c == ' ' || *c == ',')
            *c = '_';
    if (!run_layout(name, json, n, dir, 0, 0, a))
        return;
    check_losses(name, a, n, ref, 1, STEPS);
    /* the job's TP group is the one its perf split times */
    CHECK(ref->comm_s[LLMT_JOB_GROUP_TP] == 0);
    for (int r = 0; r < n; r++)
        CHECK(a[r].comm_s[LLMT_JOB_GROUP_TP] > 0);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    snprintf(st, sizeof st, "%s-final", dir);
    if (!export_ckpt(root, st, 0, &step))
        return;
    CHECK_EQ_INT(step, STEPS);
    strcat(st, ".safetensors");
    jc_pdiff pd;
    CHECK(jc_params_dist(st, ref_st, &pd));
    CHECK(pd.tensors >= 10);
    CHECK(pd.rel_l2 <= TOL);
    CHECK(pd.over * 10000 <= pd.numel && pd.worst <= 10 * TOL);
    printf("%-36s final parameters: relative L2 %.3g (bound %.0e), %lld of %lld elements more "
           "than %.0e apart (bound 1 in 10^4), worst %.3g (bound %.0e)\n",
           name, pd.rel_l2, TOL, (long long)pd.over, (long long)pd.numel, JC_APART, pd.worst,
           10 * TOL);
}

/* A layout refused at creation: the message names every string of want
 * (NULL-terminated) and the run directory was not made. */
static void refused(const char *what, const char *json, int world, const char *const *want)
{
    char dir[700];
    snprintf(dir, sizeof dir, "%s/bad", tmp);
    jt_refused(what, json, world, want, dir, 22, 0);
}

/* The single rank's spec: the corpus is prepared (into byte-token
 * shards every run reads) and the reference run with it. */
static void spec_one(char *out, size_t cap)
{
    spec(out, cap, 1, 0, 0, NULL, NULL);
}

int main(int argc, char **argv)
{
    /* the reference: one rank, 8 steps */
    static jt_rank ref[1], a[JT_MAXR];
    int rc = jt_start(argc, argv, "job-tp", (jt_config){STEPS, 0, 0, 36, TOL, 0}, spec_one, tmp,
                      sizeof tmp, prep, sizeof prep, ref);
    if (rc >= 0)
        return rc;
    char json[4096], dir[800], root[900];
    int64_t step = -1;
    char one_st[900];
    snprintf(root, sizeof root, "%s/one/ckpt", tmp);
    snprintf(one_st, sizeof one_st, "%s/one-final", tmp);
    export_ckpt(root, one_st, 1, &step);
    CHECK_EQ_INT(step, STEPS);
    strcat(one_st, ".safetensors");

    /* (a) tp 2 x dp 2, tp 2 x dp 1 */
    compare("tp 2 x dp 2", NULL, 2, 4, ref, one_st, a);
    printf("step time (steps 2-%d, in-process threads on this machine): one rank "
           "%.2f ms, tp 2 x dp 2 %.2f ms\n",
           STEPS, 1e3 * mean_step_s(ref), 1e3 * mean_step_s(&a[0]));
    compare("tp 2 x dp 1", NULL, 2, 2, ref, one_st, a);
    /* Llama's grouped-query attention, each against its own single rank:
     * key/value heads split (kv 2 = tp) and replicated (kv 1 < tp) */
    static const struct {
        const char *name;
        int kv, n;
    } gq[] = {{"llama kv 2, tp 2 x dp 2", 2, 4}, {"llama kv 1, tp 2 x dp 1", 1, 2}};
    for (size_t g = 0; g < sizeof gq / sizeof gq[0]; g++) {
        char model[256], one_l[900];
        snprintf(model, sizeof model,
                 "\"arch\": \"llama\", \"layers\": 2, \"hidden\": 32, \"heads\": 4, "
                 "\"kv_heads\": %d",
                 gq[g].kv);
        spec(json, sizeof json, 1, 0, 0, model, NULL);
        snprintf(dir, sizeof dir, "%s/llama-kv%d-one", tmp, gq[g].kv);
        static jt_rank lref[1];
        if (!run_layout("llama one rank", json, 1, dir, 0, 0, lref))
            continue;
        snprintf(root, sizeof root, "%s/ckpt", dir);
        snprintf(one_l, sizeof one_l, "%s-final", dir);
        if (!export_ckpt(root, one_l, 0, &step))
            continue;
        strcat(one_l, ".safetensors");
        compare(gq[g].name, model, 2, gq[g].n, lref, one_l, a);
    }

    /* (c) the tp 2 x dp 1 checkpoint (step 8) exports as the same state
     * loaded by one process and saved again */
    {
        char again[800], x[800], y[800];
        snprintf(root, sizeof root, "%s/tp_2_x_dp_1/ckpt", tmp);
        snprintf(again, sizeof again, "%s/tp1-again", tmp);
        int64_t sx = -1, sy = -2;
        if (resave_tp1(root, again)) {
            snprintf(x, sizeof x, "%s/x", tmp);
            snprintf(y, sizeof y, "%s/y", tmp);
            export_ckpt(root, x, 1, &sx);
            export_ckpt(again, y, 1, &sy);
            CHECK(sx == STEPS && sy == STEPS);
            static const char *const ext[] = {".safetensors", ".bin"};
            for (int e = 0; e < 2; e++) {
                char fx[900], fy[900];
                snprintf(fx, sizeof fx, "%s%s", x, ext[e]);
                snprintf(fy, sizeof fy, "%s%s", y, ext[e]);
                long bytes = 0;
                int same = same_file(fx, fy, &bytes);
                CHECK(same);
                printf("export %-12s of the tp 2 checkpoint: %ld bytes, %s the tp 1 resave's\n",
                       ext[e] + 1, bytes, same ? "identical to" : "DIFFERENT from");
            }
        }
    }

    /* (b) the reshard chain in one run directory */
    {
        static const struct {
            const char *name;
            int tp, zero, n;
        } ch[] = {{"chain tp 4 x dp 2 ZeRO-1", 4, 1, 8},
                  {"chain tp 2 x dp 1 (resumed)", 2, 0, 2},
                  {"chain tp 1 x dp 4 ZeRO-3 (resumed)", 1, 3, 4},
                  {"chain tp 4 x dp 1 (resumed)", 4, 0, 4}};
        snprintf(dir, sizeof dir, "%s/chain", tmp);
        for (int p = 0; p < 4; p++) {
            spec(json, sizeof json, ch[p].tp, ch[p].zero, 0, NULL, NULL);
            if (!run_layout(ch[p].name, json, ch[p].n, dir, p > 0, 2 * (p + 1), a))
                break;
            check_losses(ch[p].name, a, ch[p].n, ref, 2 * p + 1, 2 * p + 2);
        }
    }

    /* (d) bad layouts, named */
    {
        static const char *const w_world[] = {"parallelism.tp", "world size 3", NULL};
        static const char *const w_dp[] = {"parallelism.dp", NULL};
        static const char *const w_heads[] = {"parallelism.tp", "model.heads", NULL};
        static const char *const w_ffn[] = {"parallelism.tp", "model.ffn", NULL};
        static const char *const w_kv[] = {"parallelism.tp", "model.kv_heads", NULL};
        static const char *const w_cuda[] = {"parallelism.tp", "2 data-parallel replicas",
                                             "cuda", NULL};
        spec(json, sizeof json, 2, 0, 0, NULL, NULL);
        refused("tp 2 on 3 ranks", json, 3, w_world);
        spec(json, sizeof json, 2, 0, 1, NULL, NULL);
        refused("tp 2 x dp 1 on 4 ranks", json, 4, w_dp);
        spec(json, sizeof json, 3, 0, 0, NULL, NULL);
        refused("tp 3 with 4 heads", json, 3, w_heads);
        spec(json, sizeof json, 4, 0, 0, GPT2 ", \"ffn\": 126", NULL);
        refused("tp 4 with ffn 126", json, 4, w_ffn);
        spec(json, sizeof json, 2, 0, 0,
             "\"arch\": \"llama\", \"layers\": 2, \"hidden\": 48, \"heads\": 6, "
             "\"kv_heads\": 3",
             NULL);
        refused("tp 2 with 3 kv heads", json, 2, w_kv);
        /* tp alone on cuda runs (gpu-job-tp); beside dp it has not run */
        spec(json, sizeof json, 2, 0, 2, NULL, "cuda");
        refused("tp 2 x dp 2 on cuda", json, 4, w_cuda);
    }

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (check_failures) /* the evidence stays */
        fprintf(stderr, "kept %s\n", tmp);
    else if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_exit("job-tp");
}
