/* llmt_job's checkpoints under pipeline parallelism (issue 17), in
 * process: one thread per rank on an in-process communicator, against the
 * single-rank job on the same spec (the same corpus, seed and global
 * batch 8 = micro 2 x accum x dp, so every layout trains on the same
 * sequences in the same order).
 * (a) the reshard chain through the job's checkpoints, in one run
 *     directory (checkpoint.interval 2): pp 2 runs steps 1-2, pp 4 x dp 2
 *     ZeRO-1 resumes for 3-4, pp 2 x tp 2 for 5-6, interleaved pp 2 (2
 *     virtual stages) x dp 2 for 7-8 and one process (pp 1) for 9-10;
 *     every step's loss within 1e-5 relative of the uninterrupted single
 *     rank's, and each resumed run starts at the step saved;
 * (b) the step-4 checkpoint (saved by pp 4 x dp 2) holds the same model
 *     as the single rank's step 4: every parameter of the two safetensors
 *     exports within 1e-5 relative L2 (fp32 sums in another order, see
 *     below), the loader's cursor (data.*) equal; the manifest's plan
 *     names pp 4 (dp 2);
 * (c) that checkpoint without the data file of one stage's rank: a pp 2
 *     resume stops on every rank naming the file, and nothing in the
 *     checkpoint directory is moved or deleted.
 * Why 1e-5: a pipeline runs each micro-batch through the same ops in the
 * single-rank order; only the gradient norm (summed per stage, then over
 * stages), a tied wte's gradient (summed over its two stages) and data
 * parallelism's reduction add in another order, a few ulps that AdamW at
 * lr 1e-3 does not amplify (test/train/test_device_pp.c measures about
 * 1e-7). usage: test_job_ppckpt CORPUS_DIR (any directory of text files) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "job_ckpt.h"
#include "job_threads.h"
#include "llmtrain.h"

#define STEPS 10
_Static_assert(STEPS <= JT_MAXSTEPS, "jt_rank records steps 1..JT_MAXSTEPS");
#define TOL 1e-5

static char tmp[512], prep[700];

/* GPT-2 (tied head), 4 layers: up to 4 stages of one layer. dp > 0 sets
 * parallelism.dp, v > 1 parallelism.virtual_stages. */
static void spec(char *out, size_t cap, int pp, int tp, int dp, int zero, int v)
{
    char dpk[96] = "";
    if (dp > 0)
        snprintf(dpk, sizeof dpk, ", \"dp\": %d", dp);
    if (v > 1)
        snprintf(dpk + strlen(dpk), sizeof dpk - strlen(dpk), ", \"virtual_stages\": %d", v);
    snprintf(out, cap,
             "{\"name\": \"ppjob\", \"model\": {\"arch\": \"gpt2\", \"layers\": 4, \"hidden\": "
             "32, \"heads\": 4, \"vocab\": 320, \"seq_len\": 16},"
             " \"batch\": {\"micro\": 2, \"global\": 8},"
             " \"parallelism\": {\"pp\": %d, \"tp\": %d, \"zero\": %d%s},"
             " \"optimizer\": {\"lr\": 1e-3}, \"schedule\": {\"kind\": \"cosine\", "
             "\"warmup_steps\": 2},"
             " \"train\": {\"steps\": %d, \"seed\": 3, \"eval_interval\": 0, "
             "\"eval_batches\": 1, \"log_interval\": 0, \"threads\": 1, \"sample_tokens\": 0},"
             " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
             " \"checkpoint\": {\"interval\": 2, \"async\": false, "
             "\"tiers\": [{\"kind\": \"local\", \"keep_last\": 0}]}, \"hardware\": {\"gpu\": "
             "\"cpu\"}}",
             pp, tp, zero, dpk, STEPS, prep);
}

/* Step `step` of the checkpoints under root exported to out (safetensors);
 * its data.* key/values concatenated into kv, its plan into plan. */
static int export_step(const char *root, int64_t step, const char *out, char *kv, size_t cap,
                       char *plan, size_t pcap)
{
    llmt_ckpt *ck = NULL;
    kv[0] = 0;
    if (!jc_export(root, step, out, NULL, 0, NULL, &ck)) {
        llmt_ckpt_destroy(ck);
        return 0;
    }
    size_t nkv = 0;
    llmt_status s = llmt_ckpt_get_plan_json(ck, plan, pcap, NULL);
    if (s == LLMT_OK)
        s = llmt_ckpt_open_info(ck, NULL, NULL, &nkv);
    for (size_t k = 0; s == LLMT_OK && k < nkv; k++) {
        const char *key = NULL;
        char v[256];
        s = llmt_ckpt_kv_key(ck, k, &key);
        if (s == LLMT_OK && !strncmp(key, "data.", 5) &&
            llmt_ckpt_get_kv(ck, key, v, sizeof v, NULL) == LLMT_OK)
            snprintf(kv + strlen(kv), cap - strlen(kv), "%s=%s;", key, v);
    }
    if (s != LLMT_OK)
        fprintf(stderr, "plan or keys of %s step %lld: %s\n", root, (long long)step,
                llmt_ckpt_last_error(ck));
    CHECK_STATUS(s, LLMT_OK);
    llmt_ckpt_destroy(ck);
    return s == LLMT_OK;
}

/* Step 4 of the chain (saved by pp 4 x dp 2: world rank = stage + 4 x
 * replica) alone in a run directory, without rank 2's data file (stage 2
 * of replica 0): a pp 2 resume stops on every rank, naming that file, and
 * the checkpoint directory is left as it was (nothing quarantined: there
 * is no usable step to resume from instead). */
static void check_missing_stage(const char *chain_root)
{
    char dir[800], ck[900], cmd[4096], before[8192], after[8192], json[4096];
    snprintf(dir, sizeof dir, "%s/missing", tmp);
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cp -r '%s/step-000000000004' '%s/' && "
             "rm '%s/step-000000000004/rank-00002.bin'",
             ck, chain_root, ck, ck);
    CHECK(system(cmd) == 0);
    test_listing(ck, before, sizeof before);
    static jt_rank a[2];
    spec(json, sizeof json, 2, 1, 0, 0, 1);
    CHECK(!run_ranks("resume without stage 2's file", json, 2, dir, 1, 0, a, 0));
    for (int r = 0; r < 2; r++)
        CHECK(a[r].st != LLMT_OK && strstr(a[r].err, "rank-00002.bin") != NULL);
    printf("resume without stage 2's file, rank 0: %.400s\n", a[0].err);
    test_listing(ck, after, sizeof after);
    CHECK(before[0] && !strcmp(before, after));
    printf("the checkpoint directory after it: %s\n",
           !strcmp(before, after) ? "unchanged" : "CHANGED");
}

/* The single rank's spec: the corpus is prepared and the reference run
 * with it. */
static void spec_one(char *out, size_t cap)
{
    spec(out, cap, 1, 1, 0, 0, 1);
}

int main(int argc, char **argv)
{
    static jt_rank ref[1], a[JT_MAXR];
    int rc = jt_start(argc, argv, "job-ppckpt", (jt_config){STEPS, 0, 0, 34, TOL, 0}, spec_one,
                      tmp, sizeof tmp, prep, sizeof prep, ref);
    if (rc >= 0)
        return rc;
    char json[4096], dir[800], root[900];
    CHECK(ref[0].loss[STEPS] < ref[0].loss[1]); /* it trained */

    /* (a) the chain, one run directory */
    static const struct {
        const char *what;
        int pp, tp, dp, zero, v, n;
    } chain[] = {
        {"pp 2 (steps 1-2)", 2, 1, 0, 0, 1, 2},
        {"pp 4 x dp 2 ZeRO-1 resumed", 4, 1, 2, 1, 1, 8},
        {"pp 2 x tp 2 resumed", 2, 2, 0, 0, 1, 4},
        {"pp 2 v 2 x dp 2 resumed", 2, 1, 2, 0, 2, 4},
        {"pp 1 (one process) resumed", 1, 1, 0, 0, 1, 1},
    };
    snprintf(dir, sizeof dir, "%s/chain", tmp);
    for (int i = 0; i < 5; i++) {
        spec(json, sizeof json, chain[i].pp, chain[i].tp, chain[i].dp, chain[i].zero,
             chain[i].v);
        if (!run_layout(chain[i].what, json, chain[i].n, dir, i > 0, 2 * (i + 1), a))
            break;
        check_losses(chain[i].what, a, chain[i].n, ref, 2 * i + 1, 2 * (i + 1));
    }

    /* (b) step 4, saved by pp 4 x dp 2, against the single rank's step 4 */
    char one_st[900], pp_st[900], kv1[2048], kv2[2048], plan1[256], plan2[256];
    snprintf(one_st, sizeof one_st, "%s/one-4.safetensors", tmp);
    snprintf(pp_st, sizeof pp_st, "%s/pp-4.safetensors", tmp);
    snprintf(root, sizeof root, "%s/one/ckpt", tmp);
    int ok = export_step(root, 4, one_st, kv1, sizeof kv1, plan1, sizeof plan1);
    snprintf(root, sizeof root, "%s/chain/ckpt", tmp);
    ok = export_step(root, 4, pp_st, kv2, sizeof kv2, plan2, sizeof plan2) && ok;
    /* the manifest's plan names the layout that saved it */
    CHECK(ok && strstr(plan2, "\"pp\":4") && strstr(plan2, "\"dp\":2") &&
          strstr(plan1, "\"pp\":1"));
    printf("plans: %s (pp 4 x dp 2), %s (one rank)\n", ok ? plan2 : "?", ok ? plan1 : "?");
    jc_pdiff pd;
    ok = ok && jc_params_dist(pp_st, one_st, &pd);
    int tensors = ok ? pd.tensors : 0;
    double rel = ok ? pd.rel_l2 : -1;
    CHECK(rel >= 0 && rel <= TOL);
    CHECK(tensors == 2 + 12 * 4 + 2); /* wte, wpe, 12 per layer, ln_f w, b */
    CHECK(kv1[0] && !strcmp(kv1, kv2));
    printf("step 4 saved by pp 4 x dp 2 vs the single rank's: %d parameters, rel L2 %.3g "
           "(bound %.0e); loader cursor %s\n",
           tensors, rel, TOL, !strcmp(kv1, kv2) ? "equal" : "DIFFERENT");
    /* (c) a resume from a checkpoint missing a stage's data file */
    check_missing_stage(root);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    return check_exit("job-ppckpt");
}
