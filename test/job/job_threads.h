/* The in-process harness of the test/job tests: one thread per rank on an
 * in-process communicator, each rank a context and an llmt_job that records
 * its per-step losses, and the check of every rank's losses against a
 * reference run. Header-only because check.h counts failures in static
 * variables of the test's own translation unit. What differs between the
 * tests (steps, validation, the sample, the printed column) is jt_cfg, set
 * once in main before the first run. */
#ifndef LLMT_TEST_JOB_THREADS_H
#define LLMT_TEST_JOB_THREADS_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "llmtrain.h"

#define JT_MAXR 8
#define JT_MAXSTEPS 16

/* When a rank that ran to step jt_cfg.steps samples: before or after
 * llmt_job_finish. */
enum { JT_SAMPLE_NONE, JT_SAMPLE_BEFORE_FINISH, JT_SAMPLE_AFTER_FINISH };

typedef struct jt_config {
    int64_t steps; /* the spec's train.steps: steps 1..steps are recorded */
    int val_every; /* > 0: check_losses_val compares the validations of such steps */
    int sample;    /* JT_SAMPLE_*: draw a sample (collective) after step `steps` */
    int width;     /* the label column of check_losses' line */
    double tol;    /* relative bound of check_losses */
    int quiet;     /* the ranks' contexts log errors only */
} jt_config;

static jt_config jt_cfg = {0, 0, 0, 34, 1e-5, 0};

typedef struct jt_rank {
    llmt_comm *comm; /* NULL: one rank */
    int rank;
    const char *json, *dir;
    int resume;
    int64_t stop_at;
    float loss[JT_MAXSTEPS + 1], val[JT_MAXSTEPS + 1];
    double step_s[JT_MAXSTEPS + 1];
    int64_t first, last;            /* steps this rank ran */
    double comm_s[LLMT_JOB_GROUPS]; /* the last step's exposed time per group */
    char sample[256];
    char metrics[1024]; /* its metrics.jsonl */
    double bubble_s;    /* the last step's pipeline bubble (llmt_job_perf) */
    llmt_status st;
    char err[1024];
} jt_rank;

/* Prepares the corpus of `json` into run directory dir by a job that stops
 * at creation (it tokenizes data.train into shards under dir/data, which
 * every run after it reads); prints why it failed. */
/* A one-rank job of `json` in run directory dir, created and not run;
 * the caller destroys *job (NULL when creation failed, the reason in
 * *ctx) and *ctx. */
static inline llmt_status jt_create_one(const char *json, const char *dir, llmt_context **ctx,
                                        llmt_job **job)
{
    *ctx = NULL;
    *job = NULL;
    llmt_context_create(NULL, ctx);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = dir;
    jo.world_size = 1;
    jo.rank = 0;
    return llmt_job_create_from_json(*ctx, json, strlen(json), &jo, job);
}

static inline llmt_status jt_prepare(const char *json, const char *dir)
{
    llmt_context *ctx = NULL;
    llmt_job *job = NULL;
    llmt_status s = jt_create_one(json, dir, &ctx, &job);
    if (s != LLMT_OK)
        fprintf(stderr, "preparing the corpus: %s\n", llmt_context_last_error(ctx));
    CHECK_STATUS(s, LLMT_OK);
    llmt_job_destroy(job);
    llmt_context_destroy(ctx);
    return s;
}

static inline void *jt_rank_main(void *p)
{
    jt_rank *a = p;
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    if (jt_cfg.quiet)
        llmt_context_set_log_level(ctx, LLMT_LOG_ERROR);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = a->dir;
    jo.comm = a->comm;
    jo.world_size = 1; /* without a communicator */
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
    snprintf(a->metrics, sizeof a->metrics, "%s", i.metrics_path);
    a->first = i.start_step + 1;
    a->last = i.start_step;
    llmt_job_metrics m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    int64_t steps = jt_cfg.steps < JT_MAXSTEPS ? jt_cfg.steps : JT_MAXSTEPS;
    for (int64_t k = i.start_step; a->st == LLMT_OK && k < i.stop_at; k++) {
        a->st = llmt_job_step(job, &m);
        if (a->st == LLMT_OK && m.step >= 1 && m.step <= steps) {
            a->loss[m.step] = m.loss;
            a->val[m.step] = (m.events & LLMT_JOB_EVENT_VALIDATED) ? m.val_loss : NAN;
            a->step_s[m.step] = m.step_s;
            a->last = m.step;
        }
    }
    llmt_job_perf pf;
    memset(&pf, 0, sizeof pf);
    pf.struct_size = sizeof pf;
    if (a->st == LLMT_OK && llmt_job_get_perf(job, &pf) == LLMT_OK) {
        memcpy(a->comm_s, pf.comm_s, sizeof a->comm_s);
        a->bubble_s = pf.bubble_s;
    }
    int sample = a->st == LLMT_OK && a->last == jt_cfg.steps ? jt_cfg.sample : JT_SAMPLE_NONE;
    if (sample == JT_SAMPLE_BEFORE_FINISH)
        a->st = llmt_job_sample(job, a->sample, sizeof a->sample, NULL);
    if (a->st == LLMT_OK)
        a->st = llmt_job_finish(job);
    if (a->st == LLMT_OK && sample == JT_SAMPLE_AFTER_FINISH)
        a->st = llmt_job_sample(job, a->sample, sizeof a->sample, NULL);
    if (a->st != LLMT_OK)
        snprintf(a->err, sizeof a->err, "%s", llmt_job_last_error(job));
    llmt_job_destroy(job);
    llmt_context_destroy(ctx);
    return NULL;
}

/* Run `json` on n ranks (threads on an in-process communicator; n == 1:
 * none) in run directory dir; expect_ok: every rank must succeed (else the
 * caller checks the errors). Returns whether every rank succeeded. */
static inline int run_ranks(const char *what, const char *json, int n, const char *dir,
                            int resume, int64_t stop_at, jt_rank *a, int expect_ok)
{
    llmt_comm *comms[JT_MAXR] = {NULL};
    pthread_t th[JT_MAXR];
    if (n < 1 || n > JT_MAXR ||
        (n > 1 && llmt_comm_create_inproc(NULL, n, NULL, comms) != LLMT_OK)) {
        fprintf(stderr, "FAIL %s: in-process communicator of %d ranks\n", what, n);
        CHECK(0);
        return 0;
    }
    for (int r = 0; r < n; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].comm = comms[r];
        a[r].rank = r;
        a[r].json = json;
        a[r].dir = dir;
        a[r].resume = resume;
        a[r].stop_at = stop_at;
        pthread_create(&th[r], NULL, jt_rank_main, &a[r]);
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

static inline int run_layout(const char *what, const char *json, int n, const char *dir,
                             int resume, int64_t stop_at, jt_rank *a)
{
    return run_ranks(what, json, n, dir, resume, stop_at, a, 1);
}

static inline double jt_rel(double x, double ref)
{
    return fabs(x - ref) / fabs(ref);
}

/* Every rank's losses of steps [first, last] (and, with_val, the validation
 * losses of the steps jt_cfg.val_every divides) against the reference's,
 * within jt_cfg.tol relative; prints the worst, returns the worst loss
 * difference (NaN when one was NaN). */
static inline double jt_check(const char *what, const jt_rank *a, int n, const jt_rank *ref,
                              int64_t first, int64_t last, int with_val)
{
    double worst = 0, worst_val = 0, tol = jt_cfg.tol;
    with_val = with_val && jt_cfg.val_every > 0;
    for (int r = 0; r < n; r++) {
        CHECK_EQ_INT(a[r].first, first);
        CHECK_EQ_INT(a[r].last, last);
        for (int64_t k = first; k <= last && k <= jt_cfg.steps && k <= JT_MAXSTEPS; k++) {
            double d = jt_rel(a[r].loss[k], ref->loss[k]);
            if (!(d <= tol))
                fprintf(stderr, "FAIL %s rank %d step %lld: loss %.9g vs %.9g\n", what, r,
                        (long long)k, (double)a[r].loss[k], (double)ref->loss[k]);
            CHECK(d <= tol);
            worst = d > worst || isnan(d) ? d : worst;
            if (!with_val || k % jt_cfg.val_every)
                continue;
            double v = jt_rel(a[r].val[k], ref->val[k]);
            if (!(v <= tol))
                fprintf(stderr, "FAIL %s rank %d step %lld: val loss %.9g vs %.9g\n", what, r,
                        (long long)k, (double)a[r].val[k], (double)ref->val[k]);
            CHECK(v <= tol);
            worst_val = v > worst_val || isnan(v) ? v : worst_val;
        }
    }
    printf("%-*s steps %lld-%lld: worst loss difference %.3g relative", jt_cfg.width, what,
           (long long)first, (long long)last, worst);
    if (with_val)
        printf(", validation %.3g", worst_val);
    printf(" (bound %.0e)\n", tol);
    return worst;
}

static inline double check_losses(const char *what, const jt_rank *a, int n, const jt_rank *ref,
                                  int64_t first, int64_t last)
{
    return jt_check(what, a, n, ref, first, last, 0);
}

static inline double check_losses_val(const char *what, const jt_rank *a, int n,
                                      const jt_rank *ref, int64_t first, int64_t last)
{
    return jt_check(what, a, n, ref, first, last, 1);
}

/* A spec refused at creation on rank 0 of `world`: the message names every
 * string of want (NULL-terminated) and run directory dir was not made;
 * prints "refused WHAT MESSAGE" (WHAT in a column of width). log_off: the
 * refusal is not logged to stderr too. */
static inline void jt_refused(const char *what, const char *json, int world,
                              const char *const *want, const char *dir, int width, int log_off)
{
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    if (log_off)
        llmt_context_set_log_level(ctx, LLMT_LOG_OFF);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = dir;
    jo.world_size = world;
    jo.rank = 0;
    llmt_job *job = NULL;
    llmt_status s = llmt_job_create_from_json(ctx, json, strlen(json), &jo, &job);
    const char *msg = llmt_context_last_error(ctx);
    CHECK(s != LLMT_OK);
    int named = 1;
    for (int i = 0; want[i]; i++)
        named &= strstr(msg, want[i]) != NULL;
    if (s == LLMT_OK || !named)
        fprintf(stderr, "FAIL %s: %s\n", what, s == LLMT_OK ? "created" : msg);
    CHECK(named);
    struct stat sb;
    CHECK(stat(dir, &sb) != 0); /* refused before any work */
    printf("refused %-*s %s\n", width, what, msg);
    llmt_job_destroy(job);
    llmt_context_destroy(ctx);
}

/* The job of the MoE tests (test_job_ep.c, test_job_moetp.c,
 * test_job_moepp.c): spec `name`, a 2-layer Llama (width 32, 4 heads, 2
 * kv, ffn 32, vocabulary 320, sequences of 16) whose every layer has 4
 * experts of 24, top-2, and the "moe" keys `moe` after those; the
 * "parallelism" keys par; a global batch of 8 in micro-batches of 2;
 * jt_cfg.steps steps of AdamW at lr 3e-3 (cosine, 2 warmup steps), seed 5,
 * no validation or sample, on data.train prep; a checkpoint every 2
 * steps. */
static inline void jt_moe_spec(char *out, size_t cap, const char *name, const char *moe,
                               const char *par, const char *prep)
{
    snprintf(out, cap,
             "{\"name\": \"%s\", \"model\": {\"arch\": \"llama\", \"layers\": 2, "
             "\"hidden\": 32, \"heads\": 4, \"kv_heads\": 2, \"ffn\": 32, \"vocab\": 320, "
             "\"seq_len\": 16, \"moe\": {\"experts\": 4, \"top_k\": 2, \"expert_ffn\": 24, "
             "%s}},"
             " \"batch\": {\"micro\": 2, \"global\": 8},"
             " \"parallelism\": {%s},"
             " \"optimizer\": {\"lr\": 3e-3}, \"schedule\": {\"kind\": \"cosine\", "
             "\"warmup_steps\": 2},"
             " \"train\": {\"steps\": %d, \"seed\": 5, \"eval_interval\": 0, "
             "\"eval_batches\": 1, \"log_interval\": 0, \"threads\": 1, \"sample_tokens\": 0, "
             "\"device\": \"cpu\"},"
             " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
             " \"checkpoint\": {\"interval\": 2, \"async\": false}, \"hardware\": {\"gpu\": "
             "\"cpu\"}}",
             name, moe, par, (int)jt_cfg.steps, prep);
}

/* The start of a test with a spec of its own (test_job_ep.c,
 * test_job_moetp.c, ...): jt_cfg becomes cfg; argv[1] names the corpus
 * directory; tmp becomes a new /tmp/llmt-TEST-XXXXXX; the corpus is
 * prepared into tmp/prep by the spec spec_one writes while prep is
 * argv[1], after which prep is tmp/prep/data, what every spec reads; ref
 * is the single-rank run of spec_one's spec in tmp/one (its first and
 * last losses printed). Returns -1 to go on, else main's exit status: 2
 * without the argument, 1 without the directory, check_exit when the
 * preparation or the reference failed. */
static inline int jt_start(int argc, char **argv, const char *test, jt_config cfg,
                           void (*spec_one)(char *out, size_t cap), char *tmp, size_t tmp_cap,
                           char *prep, size_t prep_cap, jt_rank *ref)
{
    char json[4096], dir[800];
    jt_cfg = cfg;
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    snprintf(tmp, tmp_cap, "/tmp/llmt-%s-XXXXXX", test);
    if (!mkdtemp(tmp))
        return 1;
    snprintf(prep, prep_cap, "%s", argv[1]);
    spec_one(json, sizeof json);
    snprintf(dir, sizeof dir, "%s/prep", tmp);
    llmt_status s = jt_prepare(json, dir);
    snprintf(prep, prep_cap, "%s/prep/data", tmp);
    if (s != LLMT_OK)
        return check_exit(test);
    spec_one(json, sizeof json);
    snprintf(dir, sizeof dir, "%s/one", tmp);
    if (!run_layout("one rank", json, 1, dir, 0, 0, ref))
        return check_exit(test);
    printf("one rank: loss %.6f -> %.6f\n", ref->loss[1], ref->loss[jt_cfg.steps]);
    return -1;
}

/* The layout tests' frame (test_job_cp.c, test_job_cppp.c): one spec
 * for every layout, a temporary directory holding a run directory per
 * layout, the corpus prepared once, each layout against the single-rank
 * run of the same spec. */
typedef struct jt_suite {
    const char *name; /* the spec's name (and the temporary directory's) */
    char tmp[512];    /* the run directories' parent */
    char prep[700];   /* data.train of every spec: the prepared corpus */
} jt_suite;

/* The run every layout shares: `model` keys, the "parallelism" keys par,
 * seq_len seq; global batch 8 = micro 2 x accum x dp, so every layout
 * trains on the same sequences; jt_cfg.steps steps, a validation every 3,
 * 12 sampled tokens. The byte tokenizer's 257 tokens are the vocabulary
 * (a larger model.vocab works as well: the sample draws only the
 * tokenizer's ids). */
static inline void jt_suite_spec(const jt_suite *s, char *out, size_t cap, const char *model,
                                 const char *par, int seq)
{
    snprintf(out, cap,
             "{\"name\": \"%s\", \"model\": {%s, \"vocab\": 257, \"seq_len\": %d},"
             " \"batch\": {\"micro\": 2, \"global\": 8},"
             " \"parallelism\": {%s},"
             " \"optimizer\": {\"lr\": 1e-3}, \"schedule\": {\"kind\": \"cosine\", "
             "\"warmup_steps\": 2},"
             " \"train\": {\"steps\": %d, \"seed\": 3, \"eval_interval\": 3, "
             "\"eval_batches\": 2, \"log_interval\": 0, \"threads\": 1, \"sample_tokens\": %d},"
             " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
             " \"checkpoint\": {\"interval\": 2, \"async\": false}, \"hardware\": {\"gpu\": "
             "\"cpu\"}}",
             s->name, model, seq, par, (int)jt_cfg.steps, 12, s->prep);
}

/* /tmp/llmt-NAME-XXXXXX made and the text files of corpus_dir prepared
 * into byte-token shards there (with `model`); 0 when either failed. */
static inline int jt_suite_open(jt_suite *s, const char *name, const char *corpus_dir,
                                const char *model)
{
    char json[4096], dir[800];
    s->name = name;
    snprintf(s->tmp, sizeof s->tmp, "/tmp/llmt-%s-XXXXXX", name);
    if (!mkdtemp(s->tmp)) {
        fprintf(stderr, "FAIL mkdtemp %s\n", s->tmp);
        CHECK(0);
        return 0;
    }
    snprintf(s->prep, sizeof s->prep, "%s", corpus_dir);
    jt_suite_spec(s, json, sizeof json, model, "\"tp\": 1", 16);
    snprintf(dir, sizeof dir, "%s/prep", s->tmp);
    llmt_status st = jt_prepare(json, dir);
    snprintf(s->prep, sizeof s->prep, "%s/prep/data", s->tmp);
    return st == LLMT_OK;
}

/* The single-rank run of `model` in run directory tmp/dirname. */
static inline int jt_suite_one(const jt_suite *s, const char *what, const char *model,
                               const char *dirname, jt_rank *ref)
{
    char json[4096], dir[800];
    jt_suite_spec(s, json, sizeof json, model, "\"tp\": 1", 16);
    snprintf(dir, sizeof dir, "%s/%s", s->tmp, dirname);
    return run_layout(what, json, 1, dir, 0, 0, ref);
}

/* Layout `what` (par on n ranks, run directory tmp/WHAT with spaces and
 * commas as _) against ref: every rank's losses and validation losses
 * within jt_cfg.tol, its sample ref's, and the perf split timing each
 * group of `groups` (LLMT_JOB_GROUP_*, -1 ends) on every rank and none on
 * ref. */
static inline void jt_suite_compare(const jt_suite *s, const char *what, const char *model,
                                    const char *par, int n, const jt_rank *ref, jt_rank *a,
                                    const int *groups)
{
    char json[4096], dir[800];
    jt_suite_spec(s, json, sizeof json, model, par, 16);
    snprintf(dir, sizeof dir, "%s/%s", s->tmp, what);
    for (char *c = dir + strlen(s->tmp) + 1; *c; c++)
        if (*c == ' ' || *c == ',')
            *c = '_';
    if (!run_layout(what, json, n, dir, 0, 0, a))
        return;
    check_losses_val(what, a, n, ref, 1, jt_cfg.steps);
    for (int r = 0; r < n; r++) {
        for (int g = 0; groups[g] >= 0; g++)
            CHECK(a[r].comm_s[groups[g]] > 0);
        if (strcmp(a[r].sample, ref->sample))
            fprintf(stderr, "FAIL %s rank %d: sample '%s', one rank '%s'\n", what, r,
                    a[r].sample, ref->sample);
        CHECK(!strcmp(a[r].sample, ref->sample));
    }
    for (int g = 0; groups[g] >= 0; g++)
        CHECK(ref->comm_s[groups[g]] == 0);
}

/* A link of a checkpoint chain: the layout that runs its two steps. */
typedef struct jt_link {
    const char *name, *par; /* what it is called, its "parallelism" keys */
    int n;                  /* ranks */
} jt_link;

/* The chain in one run directory, tmp/chain: link p runs steps 2p + 1 and
 * 2p + 2 (resuming the one before), each step's loss within jt_cfg.tol
 * of ref's (the uninterrupted single rank). */
static inline void jt_suite_chain(const jt_suite *s, const char *model, const jt_link *links,
                                  int nlinks, const jt_rank *ref, jt_rank *a)
{
    char json[4096], dir[800];
    snprintf(dir, sizeof dir, "%s/chain", s->tmp);
    for (int p = 0; p < nlinks; p++) {
        jt_suite_spec(s, json, sizeof json, model, links[p].par, 16);
        if (!run_layout(links[p].name, json, links[p].n, dir, p > 0, 2 * (p + 1), a))
            break;
        check_losses(links[p].name, a, links[p].n, ref, 2 * p + 1, 2 * p + 2);
    }
}

/* jt_refused with run directory tmp/bad, in a column of 28. */
static inline void jt_suite_refused(const jt_suite *s, const char *what, const char *json,
                                    int world, const char *const *want)
{
    char dir[700];
    snprintf(dir, sizeof dir, "%s/bad", s->tmp);
    jt_refused(what, json, world, want, dir, 28, 0);
}

/* The temporary directory removed (kept, and said, after a failure);
 * check_exit(test). */
static inline int jt_suite_close(jt_suite *s, const char *test)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s->tmp);
    if (check_failures)
        fprintf(stderr, "kept %s\n", s->tmp);
    else if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s->tmp);
    return check_exit(test);
}

/* The start of a suite's test (test_job_cp.c, test_job_cppp.c): jt_cfg
 * becomes cfg; argv[1] names the corpus directory; the suite `name` opened
 * on it (jt_suite_open) and ref the single-rank run of `model` in tmp/one
 * (its first and last losses and its sample printed). Returns -1 to go
 * on, else main's exit status: 2 without the argument, jt_suite_close(s,
 * test) when the preparation or the reference failed. */
static inline int jt_suite_start(jt_suite *s, int argc, char **argv, const char *name,
                                 const char *test, jt_config cfg, const char *model,
                                 jt_rank *ref)
{
    jt_cfg = cfg;
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    if (!jt_suite_open(s, name, argv[1], model) ||
        !jt_suite_one(s, "one rank", model, "one", ref))
        return jt_suite_close(s, test);
    printf("one rank: losses %.6f .. %.6f, sample '%s'\n", (double)ref->loss[1],
           (double)ref->loss[jt_cfg.steps], ref->sample);
    return -1;
}

#endif
