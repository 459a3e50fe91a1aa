/* llmt_job under data and expert parallelism with MoE layers (issue 18),
 * in process: one thread per rank on an in-process communicator, each
 * layout against the single-rank job on the same spec (same data and
 * seed, global batch 8 = micro 2 x accum x dp, so every layout trains on
 * the same sequences):
 * (a) dp 2 (ep 1), ep 2 (dp 2), ep 2 x dp 4 ZeRO-1, ep 4 (dp 4): 6 AdamW
 *     steps, every rank's loss within 1e-5 relative of the single rank's
 *     (ep and dp change only the order of fp32 sums; test/train/
 *     test_moe_ep.c checks the parameters tensor by tensor);
 * (b) resharding through the job's checkpoint: ep 2 (dp 2) runs steps
 *     1-4 and saves, ep 1 on one rank resumes for 5-6: losses within 1e-5
 *     of the uninterrupted run's (experts are rows of one global tensor,
 *     whole on every rank);
 * (c) bad input refused at creation naming the key: ep not dividing the
 *     experts or dp, top_k > experts, capacity_factor <= 0.
 * usage: test_job_ep CORPUS_DIR (any directory of text files) */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"

#define STEPS 6
#define MAXR 4
#define TOL 1e-5

static char tmp[512], prep[700];

/* A 2-layer llama, every layer 4 experts top-2, capacity 1.0 (drops). */
static void spec(char *out, size_t cap, int dp, int ep, int zero, const char *moe_extra)
{
    snprintf(
        out, cap,
        "{\"name\": \"epjob\", \"model\": {\"arch\": \"llama\", \"layers\": 2, \"hidden\": "
        "32, \"heads\": 4, \"kv_heads\": 2, \"ffn\": 32, \"vocab\": 320, \"seq_len\": 16,"
        " \"moe\": {\"experts\": 4, \"top_k\": 2, \"expert_ffn\": 24, "
        "\"capacity_factor\": 1.0%s}},"
        " \"batch\": {\"micro\": 2, \"global\": 8},"
        " \"parallelism\": {\"dp\": %d, \"ep\": %d, \"zero\": %d},"
        " \"optimizer\": {\"lr\": 3e-3}, \"schedule\": {\"kind\": \"cosine\", "
        "\"warmup_steps\": 2},"
        " \"train\": {\"steps\": %d, \"seed\": 5, \"eval_interval\": 0, \"eval_batches\": 1,"
        " \"log_interval\": 0, \"threads\": 1, \"sample_tokens\": 0, \"device\": \"cpu\"},"
        " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
        " \"checkpoint\": {\"interval\": 2, \"async\": false}, \"hardware\": {\"gpu\": "
        "\"cpu\"}}",
        moe_extra ? moe_extra : "", dp, ep, zero, STEPS, prep);
}

typedef struct rank_arg {
    llmt_comm *comm; /* NULL: one rank */
    const char *json, *dir;
    int resume;
    int64_t stop_at;
    float loss[STEPS + 1];
    int64_t first, last;
    double ep_comm_s; /* the last step's exposed EP time (llmt_job_perf) */
    llmt_status st;
    char err[1024];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = a->dir;
    jo.comm = a->comm;
    jo.world_size = 1;
    jo.rank = 0;
    jo.resume = a->resume;
    jo.stop_at = a->stop_at;
    llmt_job *job = NULL;
    a->st = llmt_job_create_from_json(ctx, a->json, strlen(a->json), &jo, &job);
    if (a->st != LLMT_OK) {
        snprintf(a->err, sizeof a->err, "create: %s", llmt_context_last_error(ctx));
        llmt_context_destroy(ctx);
        return NULL;
    }
    llmt_job_info i;
    memset(&i, 0, sizeof i);
    i.struct_size = sizeof i;
    llmt_job_get_info(job, &i);
    a->first = i.start_step + 1;
    a->last = i.start_step;
    llmt_job_metrics m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    for (int64_t k = i.start_step; a->st == LLMT_OK && k < i.stop_at; k++) {
        a->st = llmt_job_step(job, &m);
        if (a->st == LLMT_OK && m.step >= 1 && m.step <= STEPS) {
            a->loss[m.step] = m.loss;
            a->last = m.step;
        }
    }
    llmt_job_perf pf;
    memset(&pf, 0, sizeof pf);
    pf.struct_size = sizeof pf;
    if (a->st == LLMT_OK && llmt_job_get_perf(job, &pf) == LLMT_OK)
        a->ep_comm_s = pf.comm_s[LLMT_JOB_GROUP_EP];
    if (a->st == LLMT_OK)
        a->st = llmt_job_finish(job);
    if (a->st != LLMT_OK)
        snprintf(a->err, sizeof a->err, "%s", llmt_job_last_error(job));
    llmt_job_destroy(job);
    llmt_context_destroy(ctx);
    return NULL;
}

/* Run `json` on n ranks (threads; n == 1: no communicator); expect_ok:
 * every rank must succeed (else: the caller checks the errors). */
static int run_ranks(const char *what, const char *json, int n, const char *dir, int resume,
                     int64_t stop_at, rank_arg *a, int expect_ok)
{
    llmt_comm *comms[MAXR] = {NULL};
    pthread_t th[MAXR];
    if (n > 1 && llmt_comm_create_inproc(NULL, n, NULL, comms) != LLMT_OK) {
        fprintf(stderr, "FAIL %s: in-process communicator\n", what);
        CHECK(0);
        return 0;
    }
    for (int r = 0; r < n; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].comm = comms[r];
        a[r].json = json;
        a[r].dir = dir;
        a[r].resume = resume;
        a[r].stop_at = stop_at;
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    int ok = 1;
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        if (a[r].st != LLMT_OK && expect_ok)
            fprintf(stderr, "FAIL %s rank %d: %s\n", what, r, a[r].err);
        if (a[r].st != LLMT_OK)
            ok = 0;
        if (expect_ok)
            CHECK_STATUS(a[r].st, LLMT_OK);
    }
    for (int r = 0; r < n; r++)
        llmt_comm_destroy(comms[r]);
    return ok;
}

static int run_layout(const char *what, const char *json, int n, const char *dir, int resume,
                      int64_t stop_at, rank_arg *a)
{
    return run_ranks(what, json, n, dir, resume, stop_at, a, 1);
}

static void check_losses(const char *what, const rank_arg *a, int n, const rank_arg *ref,
                         int64_t first, int64_t last)
{
    double worst = 0;
    for (int r = 0; r < n; r++) {
        CHECK_EQ_INT(a[r].first, first);
        CHECK_EQ_INT(a[r].last, last);
        for (int64_t k = first; k <= last; k++) {
            double d = fabs((double)a[r].loss[k] - ref->loss[k]) / fabs((double)ref->loss[k]);
            if (!(d <= TOL))
                fprintf(stderr, "FAIL %s rank %d step %lld: loss %.9g vs %.9g\n", what, r,
                        (long long)k, (double)a[r].loss[k], (double)ref->loss[k]);
            CHECK(d <= TOL);
            worst = d > worst || isnan(d) ? d : worst;
        }
    }
    printf("%-28s steps %lld-%lld: worst loss difference %.3g relative (bound %.0e)\n", what,
           (long long)first, (long long)last, worst, TOL);
}

/* Creation of `json` on `n` ranks must fail on every rank naming `key`. */
static void refused(const char *json, int n, const char *key)
{
    static rank_arg a[MAXR];
    char dir[800];
    snprintf(dir, sizeof dir, "%s/bad", tmp);
    run_ranks(key, json, n, dir, 0, 0, a, 0);
    for (int r = 0; r < n; r++) {
        CHECK(a[r].st != LLMT_OK && strstr(a[r].err, key) != NULL);
        if (r == 0)
            printf("refused (%s): %.160s\n", key, a[r].err);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_job_ep CORPUS_DIR\n");
        return 2;
    }
    snprintf(tmp, sizeof tmp, "/tmp/llmt-job-ep-XXXXXX");
    if (!mkdtemp(tmp))
        return 1;
    char json[4096], dir[800];
    {
        snprintf(prep, sizeof prep, "%s", argv[1]);
        spec(json, sizeof json, 1, 1, 0, NULL);
        llmt_context *ctx = NULL;
        llmt_context_create(NULL, &ctx);
        llmt_job_opts jo;
        llmt_job_opts_init(&jo, sizeof jo);
        snprintf(dir, sizeof dir, "%s/prep", tmp);
        jo.run_dir = dir;
        jo.world_size = 1;
        jo.rank = 0;
        llmt_job *job = NULL;
        llmt_status s = llmt_job_create_from_json(ctx, json, strlen(json), &jo, &job);
        if (s != LLMT_OK)
            fprintf(stderr, "preparing the corpus: %s\n", llmt_context_last_error(ctx));
        CHECK_STATUS(s, LLMT_OK);
        llmt_job_destroy(job);
        llmt_context_destroy(ctx);
        snprintf(prep, sizeof prep, "%s/prep/data", tmp);
        if (s != LLMT_OK)
            return check_exit("job-ep");
    }
    static rank_arg ref[1], a[MAXR];
    spec(json, sizeof json, 1, 1, 0, NULL);
    snprintf(dir, sizeof dir, "%s/one", tmp);
    if (!run_layout("one rank", json, 1, dir, 0, 0, ref))
        return check_exit("job-ep");
    printf("one rank: loss %.6f -> %.6f\n", ref->loss[1], ref->loss[STEPS]);
    static const struct {
        int dp, ep, zero;
    } lay[] = {{2, 1, 0}, {2, 2, 0}, {4, 2, 1}, {4, 4, 0}};
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "dp %d x ep %d ZeRO-%d", lay[i].dp, lay[i].ep, lay[i].zero);
        spec(json, sizeof json, lay[i].dp, lay[i].ep, lay[i].zero, NULL);
        snprintf(dir, sizeof dir, "%s/l%zu", tmp, i);
        if (run_layout(what, json, lay[i].dp, dir, 0, 0, a)) {
            check_losses(what, a, lay[i].dp, ref, 1, STEPS);
            /* the EP group ran the exchange (its waits are timed), or
             * there is none */
            for (int r = 0; r < lay[i].dp; r++)
                CHECK(lay[i].ep > 1 ? a[r].ep_comm_s > 0 : a[r].ep_comm_s == 0);
            printf("  rank 0 exposed EP time of the last step: %.3g s\n", a[0].ep_comm_s);
        }
    }
    /* (b) ep 2 saves at step 4, ep 1 resumes */
    snprintf(dir, sizeof dir, "%s/reshard", tmp);
    spec(json, sizeof json, 2, 2, 0, NULL);
    if (run_layout("ep 2 steps 1-4", json, 2, dir, 0, 4, a)) {
        check_losses("ep 2 (dp 2), then", a, 2, ref, 1, 4);
        spec(json, sizeof json, 1, 1, 0, NULL);
        if (run_layout("ep 1 resumes", json, 1, dir, 1, 0, a))
            check_losses("ep 1 resumes its checkpoint", a, 1, ref, 5, STEPS);
    }
    /* (c) bad input, named */
    spec(json, sizeof json, 4, 3, 0, NULL);
    refused(json, 4, "parallelism.ep");
    spec(json, sizeof json, 2, 4, 0, NULL);
    refused(json, 2, "parallelism.ep"); /* 4 does not divide dp 2 */
    spec(json, sizeof json, 2, 2, 0, NULL);
    char *p = strstr(json, "\"top_k\": 2");
    if (p)
        p[9] = '5';
    refused(json, 2, "model.moe.top_k");
    spec(json, sizeof json, 2, 2, 0, NULL);
    p = strstr(json, "\"capacity_factor\": 1.0");
    if (p)
        memcpy(p + 19, "0.0", 3);
    refused(json, 2, "model.moe.capacity_factor");
    return check_exit("job-ep");
}
