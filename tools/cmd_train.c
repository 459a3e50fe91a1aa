/* llmtrain train SPEC.json: the main job, a thin caller of llmt_job
 * (lib/job), so that a host driving the library through a binding gets
 * exactly this command's run. What is left here is what a terminal needs:
 * the flags, the banner, the progress line, the sample text and the
 * closing comparison of the validation loss with the unigram entropy of
 * the corpus. Uses only the public ABI. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define CMD "train"

static void fmt_dur(char *b, size_t cap, double s)
{
    if (s < 0 || !isfinite(s)) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(b, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(b, cap, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(b, cap, "%lds", t);
}

/* SIGTERM (the agent stopping a failed gang's survivors, a scheduler's
 * preemption): the step running and the checkpoint save in flight are
 * finished, then the run stops (llmt_job_finish waits for the save's
 * commit). A step is the unit the library cannot be interrupted in, so
 * the signal only sets a flag the loop reads between steps; the library
 * installs no handlers. SIGTERM is blocked in every thread (the mask is
 * set before the library starts any) and taken by one thread of its own
 * in sigwait, so no library call ever sees EINTR from it. A second
 * SIGTERM kills at once. */
static atomic_int g_term;

static void *term_main(void *arg)
{
    sigset_t *set = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) != 0)
            continue;
        if (!atomic_exchange(&g_term, 1))
            continue;
        signal(SIGTERM, SIG_DFL); /* the second: die of it */
        pthread_sigmask(SIG_UNBLOCK, set, NULL);
        raise(SIGTERM);
    }
    return NULL;
}

static void catch_term(void)
{
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_t th;
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
        return;
    if (pthread_create(&th, NULL, term_main, &set) != 0) {
        pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* SIGTERM kills, as before */
        return;
    }
    pthread_detach(th);
}

/* A usage error names what was wrong (the flag, the stray argument)
 * before the synopsis: "usage: ..." alone left the user guessing. */
static int usage(const char *why, const char *arg)
{
    if (why)
        fprintf(stderr, "llmtrain train: %s '%s'\n", why, arg);
    fprintf(stderr, "usage: llmtrain train SPEC.json [--out DIR] [--resume] [--fresh] "
                    "[--steps N] [--threads N] [--trace A-B|N] [--prom FILE] [--no-op-timing]\n"
                    "(llmtrain help train for more)\n");
    return CLI_USAGE;
}

/* The layout of a run on several ranks ("tp 2 x dp 2"; "" on one), from
 * the job's plan, for the banner and the progress line. */
static int layout(llmt_job *job, const llmt_job_info *i, char *b, size_t cap)
{
    int32_t deg[LLMT_PLAN_NDIMS] = {1, 1, 1, 1, 1};
    const llmt_plan *p = NULL;
    if (llmt_job_get_plan(job, &p) == LLMT_OK)
        llmt_plan_degrees(p, deg);
    b[0] = 0;
    if (i->world_size > 1) { /* the plan's order, tp innermost; cp and pp when split */
        char cp[24] = "", pp[24] = "";
        if (deg[LLMT_DIM_CP] > 1)
            snprintf(cp, sizeof cp, " x cp %d", (int)deg[LLMT_DIM_CP]);
        if (deg[LLMT_DIM_PP] > 1)
            snprintf(pp, sizeof pp, " x pp %d", (int)deg[LLMT_DIM_PP]);
        char ep[24] = ""; /* the experts' split, carved out of dp */
        if (deg[LLMT_DIM_EP] > 1)
            snprintf(ep, sizeof ep, " (ep %d)", (int)deg[LLMT_DIM_EP]);
        snprintf(b, cap, "tp %d%s%s x dp %d%s", (int)deg[LLMT_DIM_TP], cp, pp,
                 (int)deg[LLMT_DIM_DP], ep);
    }
    /* > 1 when a model-parallel split shares the ranks, not only data */
    return (int)(deg[LLMT_DIM_TP] * deg[LLMT_DIM_CP] * deg[LLMT_DIM_PP]);
}

static void banner(const llmt_job_info *i, int tp, const char *lay)
{
    if (i->data_note[0])
        printf("data: %s\n", i->data_note);
    if (i->world_size > 1 && tp > 1)
        printf("%s parallel: %s = %d ranks (%s), ZeRO-%d; global batch = micro x "
               "accum x %d\n",
               strstr(lay, "cp") && strstr(lay, "pp") ? "tensor x context x pipeline x data"
               : strstr(lay, "cp")                    ? "tensor x context x data"
               : strstr(lay, "pp")                    ? "tensor x pipeline x data"
                                                      : "tensor x data",
               lay, (int)i->world_size, i->comm_backend, (int)i->zero, (int)i->dp);
    else if (i->world_size > 1) {
        int ep = 1; /* expert parallel groups inside dp (layout's "(ep N)") */
        const char *q = strstr(lay, "(ep ");
        if (q && sscanf(q, "(ep %d)", &ep) != 1)
            ep = 1;
        char epn[64] = "";
        if (ep > 1)
            snprintf(epn, sizeof epn, ", experts split over ep %d", ep);
        printf("data parallel: %d ranks (%s), ZeRO-%d%s; global batch = micro x accum x %d\n",
               (int)i->world_size, i->comm_backend, (int)i->zero, epn, (int)i->dp);
    }
    if (i->resume_note[0])
        printf("%s%s\n", i->start_step > 0 ? "resumed from " : "", i->resume_note);
    printf("model: %s, %d layers, width %d, %d heads, vocab %d, %.2fM parameters\n",
           i->arch == LLMT_ARCH_GPT2 ? "gpt2" : "llama", (int)i->layers, (int)i->width,
           (int)i->heads, (int)i->vocab, (double)i->params / 1e6);
    printf("data: %s; %lld train tokens, %lld validation tokens; unigram entropy %.3f "
           "nats/token\n",
           i->data_desc, (long long)i->train_tokens, (long long)i->val_tokens,
           i->unigram_entropy);
    printf("train: %lld steps of %d x %d x %d tokens, %s, on the %s; output in %s\n",
           (long long)i->steps, (int)i->micro_batch, (int)i->grad_accum, (int)i->seq_len,
           i->recompute ? "recompute" : "no recompute",
           i->device == LLMT_DEVICE_CUDA                 ? "GPU (bf16)"
           : i->engine && !strcmp(i->engine, "emulated") ? "CPU (bf16, the GPU engine emulated)"
                                                         : "CPU (fp32)",
           i->run_dir);
    fflush(stdout);
}

/* The closing lines: sample, where things are, loss against entropy. */
static int closing(llmt_job *job, const llmt_job_info *i, float last_val, int ran, double wall)
{
    size_t need = 0;
    llmt_status ss = llmt_job_sample(job, NULL, 0, &need);
    if (ss != LLMT_OK && ss != LLMT_ERR_BUFFER_TOO_SMALL) /* not a silent lack of a sample */
        return cli_fail_status(CMD, ss, llmt_job_last_error(job));
    if (need > 1) {
        char *text = malloc(need);
        if (!text)
            return cli_fail(CMD, "no memory");
        llmt_status s = llmt_job_sample(job, text, need, NULL);
        if (s != LLMT_OK) {
            free(text);
            return cli_fail_status(CMD, s, llmt_job_last_error(job));
        }
        printf("---- sample (%lld tokens, temperature 0.8, top-k 40) ----\n%s\n----\n",
               (long long)i->sample_tokens, text);
        free(text);
    }
    printf("metrics: %s\nloss plot: %s\ncheckpoints: %s%s%s%s\n", i->metrics_path, i->plot_path,
           i->ckpt_dir, i->ckpt_node_local ? " (this node's parts; committed in " : "",
           i->ckpt_node_local ? i->durable_dir : "", i->ckpt_node_local ? ")" : "");
    double H = i->unigram_entropy;
    if (!isnan(last_val)) {
        /* a model that has not learned yet sits above the entropy */
        int below = last_val <= H;
        printf("validation loss %.3f nats/token (%.3f bits) vs unigram entropy of the "
               "corpus %.3f nats/token (%.3f bits): %.0f%% %s, perplexity %.0f vs %.0f "
               "(%.1fx %s)%s\n",
               (double)last_val, last_val / log(2.0), H, H / log(2.0),
               100.0 * fabs(1.0 - last_val / H), below ? "below" : "above", exp(last_val),
               exp(H), exp(fabs(H - last_val)), below ? "lower" : "higher",
               ran ? "" : " (no step run)");
    }
    if (ran)
        printf("trained steps %lld..%lld in %.1f s\n", (long long)i->start_step + 1,
               (long long)i->stop_at, wall);
    return CLI_OK;
}

/* --trace: steps A-B, or N: the first N steps this run makes. */
typedef struct trace_arg {
    int64_t first, last;
    int relative;
} trace_arg;

static int parse_trace(const char *v, trace_arg *t)
{
    char *end = NULL;
    errno = 0; /* a step beyond the range would be clamped to it silently */
    long long a = strtoll(v, &end, 10), b = a;
    t->relative = *end == 0;
    if (*end == '-' || *end == ':')
        b = strtoll(end + 1, &end, 10);
    if (*end || errno || a < 1 || b < a) {
        fprintf(stderr, "llmtrain train: --trace %s: give steps A-B (1 <= A <= B) or N\n", v);
        return CLI_USAGE;
    }
    t->first = t->relative ? 1 : a;
    t->last = b;
    return CLI_OK;
}

/* --steps and --trace are only known to miss the run once the job says
 * where it starts (a resume) and stops: a --steps N behind the
 * checkpoint, or a trace of steps the run never makes, would otherwise be
 * accepted and do nothing. */
static int run_misses_flags(const llmt_job_opts *jo, const trace_arg *tr,
                            const llmt_job_info *i)
{
    if (jo->stop_at > 0 && jo->stop_at < i->start_step) {
        fprintf(stderr,
                "llmtrain train: --steps %lld: the run resumed from %s; give a step "
                "from %lld to train.steps %lld\n",
                (long long)jo->stop_at, i->resume_note, (long long)i->start_step,
                (long long)i->steps);
        return 1;
    }
    int64_t first = tr->first + (tr->relative ? i->start_step : 0);
    int64_t last = tr->last + (tr->relative ? i->start_step : 0);
    if (tr->last > 0 && i->start_step >= i->stop_at) {
        fprintf(stderr,
                "llmtrain train: --trace: the run makes no step (it is at step %lld, "
                "which is where it stops)\n",
                (long long)i->start_step);
        return 1;
    }
    if (tr->last > 0 && (last <= i->start_step || first > i->stop_at)) {
        fprintf(stderr,
                "llmtrain train: --trace %lld-%lld: this run makes steps %lld..%lld, "
                "none of them traced; give steps in that range\n",
                (long long)first, (long long)last, (long long)i->start_step + 1,
                (long long)i->stop_at);
        return 1;
    }
    return 0;
}

static int train_main(llmt_context *ctx, const char *spec_path, const llmt_job_opts *jo,
                      const trace_arg *tr, const char *prom, int untimed)
{
    llmt_spec *spec = NULL;
    llmt_status s = llmt_spec_parse_file(ctx, spec_path, &spec);
    if (s != LLMT_OK)
        return cli_fail_spec(CMD, spec_path, llmt_context_last_error(ctx));
    /* under a launcher only rank 0 talks on stdout */
    llmt_comm_env env;
    llmt_comm_env_discover(&env, sizeof env);
    if (env.world_size > 1 && env.rank > 0 && !freopen("/dev/null", "w", stdout)) {
        /* keep stdout */
    }
    llmt_job *job = NULL;
    s = llmt_job_create(ctx, spec, jo, &job);
    llmt_spec_destroy(spec);
    if (s != LLMT_OK)
        return cli_fail(CMD, "%s", llmt_context_last_error(ctx));
    llmt_job_info i;
    memset(&i, 0, sizeof i);
    i.struct_size = sizeof i;
    llmt_job_get_info(job, &i);
    if (run_misses_flags(jo, tr, &i)) {
        llmt_job_destroy(job);
        return CLI_USAGE;
    }
    if (tr->last > 0 || prom || untimed) {
        llmt_job_obs_opts oo;
        llmt_job_obs_opts_init(&oo, sizeof oo);
        oo.trace_first = tr->first + (tr->relative ? i.start_step : 0);
        oo.trace_last = tr->last + (tr->relative ? i.start_step : 0);
        oo.prom_path = prom;
        oo.op_timing = untimed ? -1 : 0;
        if ((s = llmt_job_set_obs(job, &oo)) != LLMT_OK) {
            int rc = cli_fail_status(CMD, s, llmt_job_last_error(job));
            llmt_job_destroy(job);
            return rc;
        }
        if (tr->last > 0)
            printf("trace: steps %lld-%lld to %s/trace-rank%d.json\n",
                   (long long)oo.trace_first, (long long)oo.trace_last, i.run_dir, (int)i.rank);
    }
    char lay[64];
    int tp = layout(job, &i, lay, sizeof lay);
    banner(&i, tp, lay);
    /* the plan's pipeline bubble, (p-1)/(v m+p-1), for the progress line */
    double plan_bubble = 0;
    const llmt_plan *jp = NULL;
    llmt_plan_estimate pe;
    memset(&pe, 0, sizeof pe);
    pe.struct_size = sizeof pe;
    if (llmt_job_get_plan(job, &jp) == LLMT_OK && llmt_plan_get_estimate(jp, &pe) == LLMT_OK)
        plan_bubble = pe.bubble_fraction;

    int tty = isatty(STDOUT_FILENO), rc = CLI_OK;
    llmt_job_metrics m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    llmt_job_get_metrics(job, &m);
    int64_t step = i.start_step, tok_log = 0;
    double t_start = 0, t_log = 0;
    float last_val = NAN;
    while (step < i.stop_at) {
        if (atomic_load(&g_term)) {
            if (tty)
                putchar('\n');
            /* the save begun in the last step commits (or says why not) */
            s = llmt_job_finish(job);
            fprintf(stderr,
                    "llmtrain train: SIGTERM: stopped after step %lld of %lld; the "
                    "checkpoint save in flight %s\n",
                    (long long)step, (long long)i.stop_at,
                    s == LLMT_OK ? "(if any) is committed" : llmt_job_last_error(job));
            rc = CLI_TERMINATED;
            break;
        }
        s = llmt_job_step(job, &m);
        if (s != LLMT_OK) {
            if (tty) putchar('\n');
            rc = cli_fail_status(CMD, s, llmt_job_last_error(job));
            /* this rank is the straggler the job gave up on (detect.c) */
            if (s == LLMT_ERR_TIMEOUT && !strncmp(llmt_job_last_error(job), "straggler:", 10))
                rc = CLI_RANK_FAILED;
            break;
        }
        if (m.events & LLMT_JOB_EVENT_START_VAL)
            printf("step 0: validation loss %.4f\n", (double)m.start_val_loss);
        if (t_start == 0)
            t_start = t_log = m.elapsed_s - m.step_s;
        step = m.step;
        tok_log += m.tokens;
        if (m.events & LLMT_JOB_EVENT_INTERVAL) {
            llmt_job_get_info(job, &i);
            printf("%s%s\n", tty ? "\n" : "", i.interval_note);
        }
        if (m.events & (LLMT_JOB_EVENT_SKIPPED | LLMT_JOB_EVENT_ROLLBACK))
            printf("%sanomaly: %s; now at step %lld (anomalies %lld, skipped %lld, "
                   "rollbacks %lld)\n",
                   tty ? "\n" : "",
                   m.events & LLMT_JOB_EVENT_ROLLBACK ? "rolled back" : "batch skipped",
                   (long long)m.step, (long long)m.anomalies, (long long)m.skipped,
                   (long long)m.rollbacks);
        if (m.events & LLMT_JOB_EVENT_LOG) {
            double dt = m.elapsed_s - t_log;
            double tps = (double)tok_log / (dt > 0 ? dt : 1e-9);
            double avg = (m.elapsed_s - t_start) / (double)(step - i.start_step);
            char eta[32];
            fmt_dur(eta, sizeof eta, avg * (double)(i.stop_at - step));
            /* a pipeline's bubble: this stage's share of the step's span
             * on the stages' compute-time clocks (llmt_job_perf.bubble_cpu,
             * what the plan's bubble_fraction predicts), the plan's, and
             * the share of the wall time it waited for its neighbours
             * (bubble_s: on a shared machine also the time other ranks
             * took the cores) */
            char bub[64] = "";
            llmt_job_perf pf;
            memset(&pf, 0, sizeof pf);
            pf.struct_size = sizeof pf;
            if (strstr(lay, "pp") && llmt_job_get_perf(job, &pf) == LLMT_OK && pf.wall_s > 0)
                snprintf(bub, sizeof bub, " | bubble %.0f%% (plan %.0f%%), wall %.0f%%",
                         100.0 * pf.bubble_cpu, 100.0 * plan_bubble,
                         100.0 * pf.bubble_s / pf.wall_s);
            printf("%sstep %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | "
                   "ETA %s%s%s%s%s",
                   tty ? "\r" : "", (long long)step, (long long)i.stop_at, (double)m.loss,
                   (double)m.lr, (double)m.grad_norm, tps, eta, lay[0] ? " | " : "", lay, bub,
                   tty ? "   " : "\n");
            fflush(stdout);
            t_log = m.elapsed_s;
            tok_log = 0;
        }
        if (m.events & LLMT_JOB_EVENT_VALIDATED) {
            last_val = m.val_loss;
            printf("%sstep %lld: validation loss %.4f\n", tty ? "\n" : "", (long long)step,
                   (double)last_val);
        }
    }
    if (rc == CLI_TERMINATED) {
        llmt_job_destroy(job);
        return rc;
    }
    if (tty && rc == CLI_OK)
        putchar('\n');
    if (rc == CLI_OK && (s = llmt_job_finish(job)) != LLMT_OK)
        rc = cli_fail_status(CMD, s, llmt_job_last_error(job));
    int ran = step > i.start_step;
    if (rc == CLI_OK && isnan(last_val) && ran &&
        (s = llmt_job_evaluate(job, &last_val)) != LLMT_OK)
        rc = cli_fail_status(CMD, s, llmt_job_last_error(job));
    if (rc == CLI_OK)
        rc = closing(job, &i, last_val, ran, m.elapsed_s);
    llmt_job_destroy(job);
    return rc;
}

static int takes_value(const char *a)
{
    return !strcmp(a, "--out") || !strcmp(a, "--steps") || !strcmp(a, "--threads") ||
           !strcmp(a, "--trace") || !strcmp(a, "--prom");
}

/* The job only warns when it cannot write the textfile (a scrape target
 * must not stop training), so a --prom FILE in a missing or read-only
 * directory would be a flag accepted and never honoured: refuse it here. */
static int prom_unwritable(const char *prom)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", prom);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    if (access(dir, W_OK) == 0)
        return 0;
    cli_fail(CMD, "--prom %s: cannot write into %s: %s", prom, dir, strerror(errno));
    return 1;
}

/* A flag with a value given a second time would silently replace the
 * first (`--steps 100 ... --steps 10`, a wrapper's default and the
 * user's): refused. --resume and --fresh may repeat (llmtrain launch adds
 * --resume to a restarted worker's flags, which may hold it already). */
static int given_twice(const char **seen, int *nseen, const char *flag)
{
    for (int k = 0; k < *nseen; k++)
        if (!strcmp(seen[k], flag))
            return 1;
    seen[(*nseen)++] = flag;
    return 0;
}

int cmd_train(int argc, char **argv)
{
    const char *spec = NULL, *out = NULL, *prom = NULL;
    const char *seen[8]; /* the value flags given (takes_value's five) */
    int nseen = 0;
    trace_arg tr = {0, 0, 0};
    int untimed = 0;
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (takes_value(a) && i + 1 >= argc)
            return usage("missing the value of", a);
        if (takes_value(a) && given_twice(seen, &nseen, a))
            return usage("give each option once (the second value would replace the "
                         "first):",
                         a);
        if (!strcmp(a, "--out"))
            out = argv[++i];
        else if (!strcmp(a, "--resume"))
            jo.resume = 1;
        else if (!strcmp(a, "--fresh"))
            jo.fresh = 1;
        else if (!strcmp(a, "--steps")) {
            if (cli_parse_i64("--steps", argv[++i], 1, INT64_MAX, &jo.stop_at) != CLI_OK)
                return CLI_USAGE;
        } else if (!strcmp(a, "--threads")) {
            int64_t t = 0;
            if (cli_parse_i64("--threads", argv[++i], 1, 4096, &t) != CLI_OK)
                return CLI_USAGE;
            jo.threads = (int32_t)t;
        } else if (!strcmp(a, "--trace")) {
            if (parse_trace(argv[++i], &tr) != CLI_OK)
                return CLI_USAGE;
        } else if (!strcmp(a, "--prom"))
            prom = argv[++i];
        else if (!strcmp(a, "--no-op-timing"))
            untimed = 1;
        else if (a[0] == '-')
            return usage("unknown option", a);
        else if (!spec)
            spec = a;
        else
            return usage("one SPEC.json only; unexpected argument", a);
    }
    if (!spec)
        return usage(NULL, NULL);
    if (prom && prom_unwritable(prom))
        return CLI_FAILED;
    char dflt[512];
    if (!out) {
        const char *base = strrchr(spec, '/');
        base = base ? base + 1 : spec;
        snprintf(dflt, sizeof dflt, "runs/%.*s", (int)strcspn(base, "."), base);
        out = dflt;
    }
    jo.run_dir = out;
    catch_term();
    llmt_context *ctx = NULL;
    llmt_status s = llmt_context_create(NULL, &ctx);
    if (s != LLMT_OK)
        return cli_fail_status(CMD, s, "context");
    int rc = train_main(ctx, spec, &jo, &tr, prom, untimed);
    llmt_context_destroy(ctx);
    return rc;
}
