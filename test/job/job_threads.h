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
static inline llmt_status jt_prepare(const char *json, const char *dir)
{
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
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

#endif
