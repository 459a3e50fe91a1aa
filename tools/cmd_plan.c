/* llmtrain plan: place a job spec on N GPUs (or let the auto-planner pick
 * the layout) and print the layout, memory per GPU, FLOPs, communication,
 * pipeline bubble, step time, tokens/s, MFU, checkpoint interval and
 * goodput; --simulate adds the Monte-Carlo goodput run. doc/planner.md
 * explains every number. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const CMD = "plan";

typedef struct plan_args {
    const char *spec;
    long world;
    int automatic, simulate, json, keys, explain;
    double hours, interval;
    long trials;
    long long seed;
} plan_args;

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out)
{
    int64_t x = 0;
    int rc = cli_parse_i64(flag, v, lo, hi, &x);
    if (rc == CLI_OK)
        *out = (long)x;
    return rc;
}

/* seconds > 0 (cli_parse_f64's range is closed: 0 is refused here) */
static int parse_seconds(const char *flag, const char *v, double *out)
{
    double x = 0;
    int rc = cli_parse_f64(flag, v, 0, 1e9, &x);
    if (rc == CLI_OK && !(x > 0)) {
        fprintf(stderr, "llmtrain: %s needs seconds > 0, got '%s'\n", flag, v);
        rc = CLI_USAGE;
    }
    if (rc == CLI_OK)
        *out = x;
    return rc;
}

/* A flag with a value given a second time would silently replace the
 * first: refused. */
static int given_twice(const char **seen, int *nseen, const char *flag)
{
    for (int k = 0; k < *nseen; k++)
        if (!strcmp(seen[k], flag))
            return 1;
    seen[(*nseen)++] = flag;
    return 0;
}

static int parse_args(int argc, char **argv, plan_args *a)
{
    memset(a, 0, sizeof *a);
    const char *sim_flag = NULL; /* a --simulate setting given, to refuse without it */
    const char *seen[8];         /* the value flags given */
    int nseen = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int rc = CLI_OK;
        if (!strcmp(s, "--hours") || !strcmp(s, "--interval") || !strcmp(s, "--trials") ||
            !strcmp(s, "--seed"))
            sim_flag = s;
        if ((sim_flag == s || !strcmp(s, "--world")) && given_twice(seen, &nseen, s)) {
            fprintf(stderr,
                    "llmtrain plan: %s given twice (the second value would replace "
                    "the first); give it once\n",
                    s);
            return CLI_USAGE;
        }
        if (!strcmp(s, "--world"))
            rc = parse_long(s, i + 1 < argc ? argv[++i] : NULL, 1, INT32_MAX, &a->world);
        else if (!strcmp(s, "--auto"))
            a->automatic = 1;
        else if (!strcmp(s, "--simulate"))
            a->simulate = 1;
        else if (!strcmp(s, "--json"))
            a->json = 1;
        else if (!strcmp(s, "--keys"))
            a->keys = 1;
        else if (!strcmp(s, "--explain"))
            a->explain = 1;
        else if (!strcmp(s, "--hours")) {
            long h = 0;
            rc = parse_long(s, i + 1 < argc ? argv[++i] : NULL, 1, 24 * 365, &h);
            a->hours = (double)h;
        } else if (!strcmp(s, "--interval"))
            rc = parse_seconds(s, i + 1 < argc ? argv[++i] : NULL, &a->interval);
        else if (!strcmp(s, "--trials"))
            rc = parse_long(s, i + 1 < argc ? argv[++i] : NULL, 1, 100000, &a->trials);
        else if (!strcmp(s, "--seed")) {
            long x = 0; /* 0 is the library's "default seed": not a seed to ask for */
            rc = parse_long(s, i + 1 < argc ? argv[++i] : NULL, 1, INT32_MAX, &x);
            a->seed = x;
        } else if (s[0] == '-' && s[1]) {
            fprintf(stderr, "llmtrain plan: unknown argument '%s'\n", s);
            return CLI_USAGE;
        } else if (!a->spec)
            a->spec = s;
        else {
            fprintf(stderr, "llmtrain plan: one spec only ('%s' and '%s')\n",
                    a->spec, s);
            return CLI_USAGE;
        }
        if (rc != CLI_OK)
            return rc;
    }
    if (a->explain && (a->json || a->simulate || a->automatic || sim_flag)) {
        fprintf(stderr, "llmtrain plan: --explain prints its own report (the spec's layout "
                        "and the planner's); leave out --json, --simulate and --auto (and "
                        "the simulation's --hours, --interval, --trials, --seed)\n");
        return CLI_USAGE;
    }
    if (sim_flag && !a->simulate) {
        fprintf(stderr,
                "llmtrain plan: %s sets up the goodput simulation: add --simulate "
                "(without it nothing reads %s)\n",
                sim_flag, sim_flag);
        return CLI_USAGE;
    }
    if (a->keys &&
        (a->spec || a->world || a->automatic || a->simulate || a->json || a->explain)) {
        fprintf(stderr, "llmtrain plan: --keys lists the spec keys and takes nothing else "
                        "(plan a spec without --keys)\n");
        return CLI_USAGE;
    }
    if (!a->spec && !a->keys) {
        fprintf(stderr, "llmtrain plan: missing SPEC.json (see llmtrain plan --help)\n");
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* Human-readable quantities. */
static const char *si(double x, const char *unit, char *buf, size_t n)
{
    static const char *const pre[] = {"", "k", "M", "G", "T", "P", "E", "Z", "Y"};
    int k = 0;
    double a = fabs(x);
    while (a >= 1000 && k < 8) {
        a /= 1000;
        x /= 1000;
        k++;
    }
    snprintf(buf, n, "%.3g %s%s", x, pre[k], unit);
    return buf;
}

static const char *dur(double s, char *buf, size_t n)
{
    if (!isfinite(s))
        snprintf(buf, n, "never");
    else if (s < 1e-3)
        snprintf(buf, n, "%.1f us", s * 1e6);
    else if (s < 1)
        snprintf(buf, n, "%.1f ms", s * 1e3);
    else if (s < 120)
        snprintf(buf, n, "%.2f s", s);
    else if (s < 7200)
        snprintf(buf, n, "%.1f min", s / 60);
    else if (s < 3 * 86400)
        snprintf(buf, n, "%.1f h", s / 3600);
    else
        snprintf(buf, n, "%.1f days", s / 86400);
    return buf;
}

static const char *rc_name(int rc)
{
    return rc == 2 ? "full" : rc == 1 ? "selective" : "none";
}

static void print_text(const llmt_plan *p, const llmt_spec *spec,
                       const llmt_plan_estimate *e)
{
    char name[256] = "", gpu[64] = "", b1[64], b2[64], b3[64], b4[64];
    int64_t gpn = 0, steps = 0, layers = 0;
    llmt_spec_get_string(spec, "name", name, sizeof name, NULL);
    llmt_spec_get_string(spec, "hardware.gpu", gpu, sizeof gpu, NULL);
    llmt_spec_get_int(spec, "hardware.gpus_per_node", &gpn);
    llmt_spec_get_int(spec, "train.steps", &steps);
    llmt_spec_get_int(spec, "model.layers", &layers);
    int cpu = !strcmp(gpu, "cpu");
    printf("plan: %s on %d %s%s (%s, %lld per node)\n\n", *name ? name : "(unnamed)",
           (int)e->world_size, cpu ? "CPU process" : "GPU",
           e->world_size == 1 ? "" : (cpu ? "es" : "s"), gpu, (long long)gpn);

    printf("layout\n");
    printf("  degrees               tp %d x cp %d x pp %d x dp %d = %d   (ep %d inside dp)\n",
           e->tp, e->cp, e->pp, e->dp, e->world_size, e->ep);
    printf("  rank order            tp fastest (inside a node), then cp, pp, dp\n");
    printf("  zero / recompute / sp %d / %s / %s\n", e->zero, rc_name(e->recompute),
           e->sequence_parallel ? "on" : "off");
    int32_t mn = INT32_MAX, mx = 0;
    for (int32_t st = 0; st < e->pp; st++)
        for (int32_t ch = 0; ch < e->virtual_stages; ch++) {
            int32_t f, c;
            if (llmt_plan_stage_layers(p, st, ch, &f, &c) == LLMT_OK) {
                mn = c < mn ? c : mn;
                mx = c > mx ? c : mx;
            }
        }
    if (mn == mx)
        printf("  pipeline              %lld layers, %d per stage chunk, %d chunk(s) per stage\n",
               (long long)layers, (int)mn, e->virtual_stages);
    else
        printf("  pipeline              %lld layers, %d-%d per stage, %d chunk(s) per stage\n",
               (long long)layers, (int)mn, (int)mx, e->virtual_stages);
    printf("  batch                 micro %d x grad_accum %d x dp %d = global %lld "
           "sequences (%s tokens/step)\n", e->micro, e->grad_accum, e->dp,
           (long long)e->global_batch, si((double)e->tokens_per_step, "", b1, sizeof b1));
    printf("  parameters            %s (active per token %s), per GPU %s\n\n",
           si(e->params, "", b1, sizeof b1), si(e->params_active, "", b2, sizeof b2),
           si(e->params_per_gpu, "", b3, sizeof b3));

    printf("memory per GPU (the most loaded stage)\n");
    printf("  weights               %8.2f GB\n", e->mem_weights / 1e9);
    printf("  gradients             %8.2f GB\n", e->mem_grads / 1e9);
    printf("  optimizer             %8.2f GB\n", e->mem_optimizer / 1e9);
    printf("  activations           %8.2f GB\n", e->mem_activations / 1e9);
    printf("  overhead              %8.2f GB\n", e->mem_overhead / 1e9);
    printf("  total                 %8.2f GB of %.0f GB: %s\n\n", e->mem_total / 1e9,
           e->mem_capacity / 1e9, e->fits ? "fits" : "DOES NOT FIT");

    printf("compute\n");
    printf("  FLOPs per token       %.3g (6N = %.3g; attention +%.1f%%)\n",
           e->model_flops_per_token, e->flops_6nd_per_token,
           100 * (e->model_flops_per_token / e->flops_6nd_per_token - 1));
    printf("  FLOPs per step        %.3g model, %.3g with recomputation\n",
           e->model_flops_per_step, e->hw_flops_per_step);
    printf("  FLOPs per run         %.3g (%lld steps, %.3g tokens; 6ND = %.3g)\n\n",
           e->run_flops, (long long)steps, (double)steps * (double)e->tokens_per_step,
           e->flops_6nd_per_token * (double)steps * (double)e->tokens_per_step);

    printf("communication per GPU per step   sent          exposed\n");
    static const char *const dn[] = {"tp", "cp", "pp", "dp", "ep"};
    const double by[] = {e->comm_bytes_tp, e->comm_bytes_cp, e->comm_bytes_pp,
                         e->comm_bytes_dp, e->comm_bytes_ep};
    const double ti[] = {e->time_tp_s, e->time_cp_s, e->time_pp_s, e->time_dp_s,
                         e->time_ep_s};
    for (int i = 0; i < 5; i++)
        printf("  %-30s %-13s %s\n", dn[i], si(by[i], "B", b1, sizeof b1),
               dur(ti[i], b2, sizeof b2));
    printf("\n");

    printf("time per step\n");
    printf("  compute               %s\n", dur(e->time_compute_s, b1, sizeof b1));
    printf("  pipeline bubble       %s (%.1f%% = (p-1)/(v*m+p-1), p %d m %d v %d)\n",
           dur(e->time_bubble_s, b1, sizeof b1), 100 * e->bubble_fraction, e->pp,
           e->grad_accum, e->virtual_stages);
    printf("  optimizer             %s\n", dur(e->time_optimizer_s, b1, sizeof b1));
    printf("  step                  %s\n", dur(e->step_time_s, b1, sizeof b1));
    printf("  tokens/s              %s\n", si(e->tokens_per_s, "", b1, sizeof b1));
    printf("  MFU                   %.1f%% (%.3g TFLOP/s per GPU of model FLOPs; "
           "%.3g counting recomputation)\n", 100 * e->mfu, e->tflops_per_gpu,
           e->hw_flops_per_step / ((double)e->world_size * e->step_time_s) / 1e12);
    printf("  run                   %s\n\n", dur(e->run_time_s, b1, sizeof b1));

    printf("checkpoints and failures\n");
    printf("  state saved           %s\n", si(e->ckpt_bytes_total, "B", b1, sizeof b1));
    printf("  stall / write / restore / restart   %s / %s / %s / %s\n",
           dur(e->ckpt_stall_s, b1, sizeof b1), dur(e->ckpt_write_s, b2, sizeof b2),
           dur(e->restore_s, b3, sizeof b3), dur(e->restart_s, b4, sizeof b4));
    printf("  MTBF of the job       %s\n", dur(e->mtbf_s, b1, sizeof b1));
    printf("  Young/Daly interval   %s = sqrt(2 x stall x MTBF)\n",
           dur(e->young_daly_s, b1, sizeof b1));
    printf("  checkpoint interval   %s = %lld steps\n",
           dur(e->ckpt_interval_s, b1, sizeof b1), (long long)e->ckpt_interval_steps);
    printf("  goodput (analytic)    %.1f%%\n", 100 * e->goodput_analytic);
}

static void print_goodput_text(const llmt_goodput_result *g, int trials)
{
    char b1[64], b2[64];
    char b3[64];
    printf("\ngoodput simulation (%d trials, %s of training work, MTBF %s)\n",
           trials, dur(g->work_hours * 3600, b1, sizeof b1),
           dur(g->mtbf_hours * 3600, b2, sizeof b2));
    printf("  interval              %s\n", dur(g->interval_s, b1, sizeof b1));
    printf("  goodput               %.2f%% +- %.2f\n", 100 * g->goodput,
           100 * g->goodput_stddev);
    printf("  wall time             %s for %s of work\n",
           dur(g->wall_hours * 3600, b1, sizeof b1),
           dur(g->work_hours * 3600, b2, sizeof b2));
    printf("  lost work             %s (%.1f failures)\n",
           dur(g->lost_work_hours * 3600, b3, sizeof b3), g->failures);
    printf("  checkpoint stalls     %s\n", dur(g->ckpt_overhead_hours * 3600, b1, sizeof b1));
    printf("  restarts + restores   %s\n", dur(g->restart_hours * 3600, b1, sizeof b1));
    printf("  Young/Daly interval   %s: goodput %.2f%%\n",
           dur(g->young_daly_s, b1, sizeof b1), 100 * g->young_daly_goodput);
    printf("  best simulated        %s: goodput %.2f%% (sweep YD/10 .. 10 YD)\n",
           dur(g->best_interval_s, b2, sizeof b2), 100 * g->best_goodput);
}

static void print_goodput_json(const llmt_goodput_result *g)
{
    printf("\"goodput\": {\"interval_s\": %.9g, \"goodput\": %.9g, "
           "\"goodput_stddev\": %.9g, \"wall_hours\": %.9g, \"work_hours\": %.9g, "
           "\"lost_work_hours\": %.9g, \"ckpt_overhead_hours\": %.9g, "
           "\"restart_hours\": %.9g, \"failures\": %.9g, \"mtbf_hours\": %.9g, "
           "\"young_daly_s\": %.9g, \"young_daly_goodput\": %.9g, "
           "\"best_interval_s\": %.9g, \"best_goodput\": %.9g}",
           g->interval_s, g->goodput, g->goodput_stddev, g->wall_hours, g->work_hours,
           g->lost_work_hours, g->ckpt_overhead_hours, g->restart_hours, g->failures,
           g->mtbf_hours, g->young_daly_s, g->young_daly_goodput, g->best_interval_s,
           g->best_goodput);
}

static int show(const plan_args *a, const llmt_plan *p, const llmt_spec *spec)
{
    llmt_plan_estimate e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    llmt_status st = llmt_plan_get_estimate(p, &e);
    if (st != LLMT_OK)
        return cli_fail_status(CMD, st, llmt_plan_last_error(p));
    llmt_goodput_result g;
    memset(&g, 0, sizeof g);
    g.struct_size = sizeof g;
    llmt_goodput_opts go;
    llmt_goodput_opts_init(&go, sizeof go);
    if (a->hours > 0)
        go.horizon_hours = a->hours;
    if (a->trials > 0)
        go.trials = (int32_t)a->trials;
    if (a->interval > 0)
        go.interval_s = a->interval;
    if (a->seed > 0)
        go.seed = (uint64_t)a->seed;
    if (a->simulate) {
        st = llmt_plan_simulate_goodput(p, &go, &g);
        if (st != LLMT_OK)
            return cli_fail_status(CMD, st, llmt_plan_last_error(p));
    }
    if (a->json) {
        size_t need = 0;
        llmt_plan_to_json(p, NULL, 0, &need);
        char *buf = need ? malloc(need) : NULL;
        if (!buf)
            return cli_fail(CMD, "out of memory");
        st = llmt_plan_to_json(p, buf, need, NULL);
        if (st != LLMT_OK) {
            free(buf);
            return cli_fail_status(CMD, st, llmt_plan_last_error(p));
        }
        if (a->simulate) {
            /* The plan object with one more member. */
            char *end = strrchr(buf, '}');
            if (end)
                *end = '\0';
            printf("%s,\n", buf);
            print_goodput_json(&g);
            printf("}\n");
        } else {
            printf("%s\n", buf);
        }
        free(buf);
        return CLI_OK;
    }
    print_text(p, spec, &e);
    if (a->simulate)
        print_goodput_text(&g, go.trials);
    size_t need = 0;
    llmt_plan_explain(p, NULL, 0, &need);
    if (need > 1) {
        char *buf = malloc(need);
        if (buf && llmt_plan_explain(p, buf, need, NULL) == LLMT_OK) {
            printf("\nnotes\n");
            for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
                printf("  %s\n", line);
        }
        free(buf);
    }
    return CLI_OK;
}

/* ---- --explain: the spec's layout against the auto-planner's top five,
 * term by term. The library's plan JSON carries the step split into named
 * terms (estimate.time.terms, and each auto.ranking entry's terms); this
 * reads them back with a small JSON walker (the CLI uses the public ABI
 * only). */

static const char *jws(const char *p)
{
    while (p && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* The end of the JSON value at p (NULL when malformed). */
static const char *jskip(const char *p)
{
    p = jws(p);
    if (!p || !*p)
        return NULL;
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++)
            if (*p == '\\' && p[1])
                p++;
        return *p ? p + 1 : NULL;
    }
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = jws(p + 1);
        if (p && *p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                p = jskip(p); /* key */
                p = jws(p);
                if (!p || *p != ':')
                    return NULL;
                p++;
            }
            p = jws(jskip(p));
            if (!p)
                return NULL;
            if (*p == close)
                return p + 1;
            if (*p != ',')
                return NULL;
            p++;
        }
    }
    while (*p && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n')
        p++;
    return p;
}

/* The value of member `key` of the object at p, or NULL. */
static const char *jget(const char *p, const char *key)
{
    p = jws(p);
    if (!p || *p != '{')
        return NULL;
    p = jws(p + 1);
    size_t kl = strlen(key);
    while (p && *p == '"') {
        const char *k = p + 1, *end = jskip(p);
        if (!end)
            return NULL;
        int match = (size_t)(end - 1 - k) == kl && !strncmp(k, key, kl);
        p = jws(end);
        if (!p || *p != ':')
            return NULL;
        p = jws(p + 1);
        if (match)
            return p;
        p = jws(jskip(p));
        if (!p || *p != ',')
            return NULL;
        p = jws(p + 1);
    }
    return NULL;
}

/* Element i of the array at p, or NULL. */
static const char *jat(const char *p, int i)
{
    p = jws(p);
    if (!p || *p != '[')
        return NULL;
    p = jws(p + 1);
    if (!p || *p == ']')
        return NULL;
    for (int k = 0; k < i; k++) {
        p = jws(jskip(p));
        if (!p || *p != ',')
            return NULL;
        p = jws(p + 1);
    }
    return p;
}

static double jnum(const char *p, const char *key)
{
    const char *v = jget(p, key);
    return v ? strtod(v, NULL) : NAN;
}

#define MAX_TERMS 24
/* One layout of the explanation: degrees, step, terms by key. */
typedef struct layout {
    int tp, cp, pp, dp, ep, zero, v, micro, accum, recompute;
    double step, mfu, mem, cap;
    int nterms;
    char keys[MAX_TERMS][24];
    double terms[MAX_TERMS];
} layout;

static int read_terms(const char *obj, layout *l)
{
    const char *t = jget(obj, "terms");
    t = jws(t);
    if (!t || *t != '{')
        return 0;
    l->nterms = 0;
    const char *p = jws(t + 1);
    while (p && *p == '"' && l->nterms < MAX_TERMS) {
        const char *k = p + 1, *end = jskip(p);
        if (!end)
            return 0;
        snprintf(l->keys[l->nterms], sizeof l->keys[0], "%.*s", (int)(end - 1 - k), k);
        p = jws(end);
        if (!p || *p != ':')
            return 0;
        l->terms[l->nterms++] = strtod(p + 1, NULL);
        p = jws(jskip(p + 1));
        if (!p || *p != ',')
            break;
        p = jws(p + 1);
    }
    return l->nterms > 0;
}

/* The plan's own layout from its JSON. */
static int read_plan_layout(const char *js, layout *l)
{
    const char *d = jget(js, "degrees"), *b = jget(js, "batch");
    const char *e = jget(js, "estimate"), *t = jget(e, "time"),
               *m = jget(e, "memory_per_gpu_bytes"), *sp = jget(js, "spec");
    memset(l, 0, sizeof *l);
    l->tp = (int)jnum(d, "tp");
    l->cp = (int)jnum(d, "cp");
    l->pp = (int)jnum(d, "pp");
    l->dp = (int)jnum(d, "dp");
    l->ep = (int)jnum(d, "ep");
    l->zero = (int)jnum(d, "zero");
    l->v = (int)jnum(d, "virtual_stages");
    l->micro = (int)jnum(b, "micro");
    l->accum = (int)jnum(b, "grad_accum");
    const char *rc = jget(jget(sp, "parallelism"), "recompute");
    l->recompute =
        rc && !strncmp(rc, "\"full\"", 6) ? 2 : rc && !strncmp(rc, "\"selective\"", 11);
    l->step = jnum(t, "step_s");
    l->mfu = jnum(t, "mfu");
    l->mem = jnum(m, "total");
    l->cap = jnum(m, "capacity");
    return read_terms(t, l) && l->step > 0;
}

static int read_rank_layout(const char *x, double cap, layout *l)
{
    memset(l, 0, sizeof *l);
    l->tp = (int)jnum(x, "tp");
    l->cp = (int)jnum(x, "cp");
    l->pp = (int)jnum(x, "pp");
    l->dp = (int)jnum(x, "dp");
    l->ep = (int)jnum(x, "ep");
    l->zero = (int)jnum(x, "zero");
    l->v = (int)jnum(x, "virtual_stages");
    l->micro = (int)jnum(x, "micro");
    l->accum = (int)jnum(x, "grad_accum");
    l->recompute = (int)jnum(x, "recompute");
    l->step = jnum(x, "step_s");
    l->mfu = jnum(x, "mfu");
    l->mem = jnum(x, "mem_total");
    l->cap = cap;
    return read_terms(x, l) && l->step > 0;
}

static void layout_str(const layout *l, char *buf, size_t n)
{
    char eps[16] = "";
    if (l->ep > 1)
        snprintf(eps, sizeof eps, " ep%d", l->ep);
    snprintf(buf, n, "tp%d cp%d pp%d dp%d%s zero%d v%d micro%d accum%d rc=%s", l->tp, l->cp,
             l->pp, l->dp, eps, l->zero, l->v, l->micro, l->accum, rc_name(l->recompute));
}

static int same_layout(const layout *a, const layout *b)
{
    return a->tp == b->tp && a->cp == b->cp && a->pp == b->pp && a->dp == b->dp &&
           a->ep == b->ep && a->zero == b->zero && a->v == b->v && a->micro == b->micro &&
           a->recompute == b->recompute;
}

static double term_of(const layout *l, const char *key)
{
    for (int i = 0; i < l->nterms; i++)
        if (!strcmp(l->keys[i], key))
            return l->terms[i];
    return 0;
}

/* Labels of the library's term keys (the JSON keys are the contract). */
static const char *term_label(const char *key)
{
    static const struct {
        const char *key, *label;
    } names[] = {
        {"compute", "compute"},    {"recompute", "recompute"},  {"fixed", "fixed costs"},
        {"tp", "TP comm exposed"}, {"sp", "SP comm exposed"},   {"cp", "CP comm exposed"},
        {"ep", "EP all-to-all"},   {"pp_p2p", "PP p2p"},        {"bubble", "PP bubble"},
        {"dp", "DP exposed"},      {"zero3", "ZeRO-3 exposed"}, {"optimizer", "optimizer"},
        {"jitter", "stragglers"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(names[i].key, key))
            return names[i].label;
    return key;
}

static char *plan_json(const llmt_plan *p)
{
    size_t need = 0;
    llmt_plan_to_json(p, NULL, 0, &need);
    char *buf = need ? malloc(need) : NULL;
    if (buf && llmt_plan_to_json(p, buf, need, NULL) != LLMT_OK) {
        free(buf);
        buf = NULL;
    }
    return buf;
}

static int explain(const plan_args *a, llmt_context *ctx, const llmt_spec *spec,
                   const llmt_plan *mine, int calibration)
{
    int32_t world = 0;
    if (mine)
        llmt_plan_world_size(mine, &world);
    if (!world)
        world = (int32_t)a->world;
    llmt_plan_auto_opts o;
    llmt_plan_auto_opts_init(&o, sizeof o);
    o.top_n = 5;
    llmt_plan *best = NULL;
    llmt_status st = llmt_plan_auto(ctx, spec, world, &o, &best);
    if (st != LLMT_OK)
        return cli_fail(CMD, "%s: --explain: %s", a->spec, llmt_context_last_error(ctx));
    char *bj = plan_json(best), *mj = mine ? plan_json(mine) : NULL;
    layout L[6];
    int n = 0, have_mine = 0, rc = CLI_OK;
    const char *rank = jget(jget(bj, "auto"), "ranking");
    double cap = 0;
    if (bj) {
        layout chosen;
        if (read_plan_layout(bj, &chosen))
            cap = chosen.cap;
    }
    for (int i = 0; i < 5 && rank; i++) {
        const char *x = jat(rank, i);
        if (!x || !read_rank_layout(x, cap, &L[n + 1]))
            break;
        n++;
    }
    if (mj && read_plan_layout(mj, &L[0]))
        have_mine = 1;
    if (n == 0) {
        rc = cli_fail(CMD, "%s: --explain: the plan's JSON has no ranking with terms", a->spec);
        goto out;
    }
    char name[256] = "", ls[192];
    llmt_spec_get_string(spec, "name", name, sizeof name, NULL);
    printf("explain: %s on %d GPUs\n\n", *name ? name : "(unnamed)", (int)world);
    layout_str(&L[1], ls, sizeof ls);
    printf("chosen layout (the planner's #1)  %s\n", ls);
    printf("  step %.3f s, MFU %.1f%%, %.1f GB per GPU\n", L[1].step, 100 * L[1].mfu,
           L[1].mem / 1e9);
    int mine_rank = 0;
    if (have_mine) {
        for (int i = 1; i <= n; i++)
            if (same_layout(&L[0], &L[i]))
                mine_rank = i;
        layout_str(&L[0], ls, sizeof ls);
        printf("the spec's layout                 %s\n", ls);
        printf("  step %.3f s, MFU %.1f%%, %.1f GB per GPU%s", L[0].step, 100 * L[0].mfu,
               L[0].mem / 1e9,
               L[0].mem > 0.95 * L[0].cap ? " (over 95% of HBM: the "
                                            "planner would not pick it)"
                                          : "");
        if (mine_rank)
            printf(" = the planner's #%d\n", mine_rank);
        else
            printf(" (not in the planner's top %d)\n", n);
    }
    printf("\npredicted step time by term, seconds per step\n");
    printf("  %-18s", "term");
    if (have_mine)
        printf(" %10s", "spec");
    for (int i = 1; i <= n; i++)
        printf("        #%d", i);
    printf("\n");
    const layout *ref = &L[1];
    for (int k = 0; k < ref->nterms; k++) {
        int any = 0;
        for (int i = have_mine ? 0 : 1; i <= n; i++)
            any |= term_of(&L[i], ref->keys[k]) != 0;
        if (!any)
            continue;
        printf("  %-18s", term_label(ref->keys[k]));
        for (int i = have_mine ? 0 : 1; i <= n; i++)
            printf(" %10.4g", term_of(&L[i], ref->keys[k]));
        printf("\n");
    }
    printf("  %-18s", "step");
    for (int i = have_mine ? 0 : 1; i <= n; i++)
        printf(" %10.4g", L[i].step);
    printf("\n  %-18s", "MFU %");
    for (int i = have_mine ? 0 : 1; i <= n; i++)
        printf(" %10.1f", 100 * L[i].mfu);
    printf("\n  %-18s", "memory GB");
    for (int i = have_mine ? 0 : 1; i <= n; i++)
        printf(" %10.1f", L[i].mem / 1e9);
    printf("\n\nlayouts\n");
    for (int i = 1; i <= n; i++) {
        layout_str(&L[i], ls, sizeof ls);
        printf("  #%d  %s\n", i, ls);
    }
    if (have_mine) {
        layout_str(&L[0], ls, sizeof ls);
        printf("  spec %s\n", ls);
        printf("\nverdict\n");
        if (mine_rank == 1 || L[0].step <= L[1].step * (1 + 1e-4)) {
            printf("  the spec's layout is the planner's choice (or as fast)\n");
        } else {
            /* Where the gain comes from: the terms sorted by how much the
             * spec's layout spends over the planner's, largest first. */
            double gain = L[0].step - L[1].step;
            printf("  the planner prefers #1: predicted %.1f%% faster (%.4g s -> %.4g s per "
                   "step, %.4g s less)\n",
                   100 * (L[0].step / L[1].step - 1), L[0].step, L[1].step, gain);
            int used[MAX_TERMS] = {0};
            for (int r = 0; r < 3; r++) {
                int kbest = -1;
                double dbest = 0;
                for (int k = 0; k < ref->nterms; k++) {
                    double d = term_of(&L[0], ref->keys[k]) - term_of(&L[1], ref->keys[k]);
                    if (!used[k] && d > dbest) {
                        dbest = d;
                        kbest = k;
                    }
                }
                if (kbest < 0)
                    break;
                used[kbest] = 1;
                printf("  %s %s: %.4g s more in the spec's layout (%.0f%% of the gain)\n",
                       r == 0 ? "mostly from" : "then", term_label(ref->keys[kbest]), dbest,
                       100 * dbest / gain);
            }
        }
    }
    if (calibration)
        printf("\nnote: a calibration file's \"software\" (attention kernel, overlap, gradient "
               "dtype) is not a spec key; this plans its spec with this build's software "
               "(flash attention, TP and DP overlapped, gradients in the parameter dtype). "
               "test plan-calib and doc/planner.md rank it with the paper's software.\n");
out:
    free(bj);
    free(mj);
    llmt_plan_destroy(best);
    return rc;
}

/* A calibration run (examples/specs/calibration/) wraps its spec:
 * {"source": ..., "published": {...}, "spec": {...}}. Return the text of
 * the top-level "spec" object (malloc'd), or NULL when `text` is a plain
 * spec. A small scanner: strings and nesting are tracked, nothing else. */
static char *calibration_spec(const char *text)
{
    int depth = 0;
    const char *p = text;
    while (*p) {
        if (*p == '"') {
            const char *k = ++p;
            while (*p && *p != '"')
                p += (*p == '\\' && p[1]) ? 2 : 1;
            size_t kl = (size_t)(p - k);
            if (*p)
                p++;
            if (depth == 1 && kl == 4 && !strncmp(k, "spec", 4)) {
                while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
                    p++;
                if (*p != ':')
                    continue;
                p++;
                while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
                    p++;
                if (*p != '{')
                    return NULL;
                const char *start = p;
                int d = 0;
                for (; *p; p++) {
                    if (*p == '"') {
                        for (p++; *p && *p != '"'; p++)
                            if (*p == '\\' && p[1])
                                p++;
                        if (!*p)
                            break;
                    } else if (*p == '{') {
                        d++;
                    } else if (*p == '}' && --d == 0) {
                        size_t n = (size_t)(p - start) + 1;
                        char *out = malloc(n + 1);
                        if (out) {
                            memcpy(out, start, n);
                            out[n] = '\0';
                        }
                        return out;
                    }
                }
                return NULL;
            }
            continue;
        }
        if (*p == '{' || *p == '[')
            depth++;
        else if (*p == '}' || *p == ']')
            depth--;
        p++;
    }
    return NULL;
}

/* Parse SPEC.json, or the "spec" of a calibration run. */
static llmt_status parse_spec(llmt_context *ctx, const char *path, llmt_spec **out,
                              int *calibration)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t n = 0, cap = 0;
    if (f) {
        for (;;) {
            if (n + 4097 > cap) {
                char *nb = realloc(text, cap = cap ? 2 * cap : 65536);
                if (!nb)
                    break;
                text = nb;
            }
            size_t r = fread(text + n, 1, cap - n - 1, f);
            n += r;
            if (!r)
                break;
        }
        fclose(f);
        if (text)
            text[n] = '\0';
    }
    char *inner = text ? calibration_spec(text) : NULL;
    free(text);
    *calibration = inner != NULL;
    if (!inner)
        return llmt_spec_parse_file(ctx, path, out);
    llmt_status st = llmt_spec_parse_json(ctx, inner, strlen(inner), out);
    free(inner);
    return st;
}

/* Every key of the job spec: path, type, allowed values, doc [default]. */
static int print_keys(void)
{
    size_t n = llmt_spec_key_count();
    for (size_t i = 0; i < n; i++) {
        const char *v = llmt_spec_key_values(i);
        printf("%-44s %-8s %s%s%s\n", llmt_spec_key_name(i), llmt_spec_key_type(i),
               v ? v : "", v ? "  " : "", llmt_spec_key_doc(i));
    }
    return CLI_OK;
}

int cmd_plan(int argc, char **argv)
{
    plan_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_OK)
        return rc;
    if (a.keys)
        return print_keys();
    llmt_context *ctx = NULL;
    llmt_status st = llmt_context_create(NULL, &ctx);
    if (st != LLMT_OK)
        return cli_fail_status(CMD, st, "cannot create a context");
    llmt_spec *spec = NULL;
    llmt_plan *p = NULL;
    int calibration = 0;
    st = parse_spec(ctx, a.spec, &spec, &calibration);
    if (st != LLMT_OK) {
        rc = cli_fail_spec(CMD, a.spec, llmt_context_last_error(ctx));
        goto out;
    }
    if (a.automatic) {
        int32_t world = (int32_t)a.world;
        if (!world) {
            int64_t d[4] = {1, 1, 1, 1};
            llmt_spec_get_int(spec, "parallelism.tp", &d[0]);
            llmt_spec_get_int(spec, "parallelism.pp", &d[1]);
            llmt_spec_get_int(spec, "parallelism.dp", &d[2]);
            llmt_spec_get_int(spec, "parallelism.cp", &d[3]);
            world = (int32_t)(d[0] * d[1] * d[2] * d[3]);
        }
        st = llmt_plan_auto(ctx, spec, world, NULL, &p);
    } else {
        st = llmt_plan_create(ctx, spec, (int32_t)a.world, &p);
        if (st == LLMT_ERR_INVALID_ARGUMENT && a.world &&
            llmt_spec_is_given(spec, "parallelism.dp")) {
            /* The spec fixes dp for another world size: the same job on
             * --world GPUs keeps tp, cp, pp and the global batch. */
            llmt_plan *orig = NULL;
            if (llmt_plan_create(ctx, spec, 0, &orig) == LLMT_OK) {
                st = llmt_plan_reshape(orig, (int32_t)a.world, &p);
                if (st != LLMT_OK) {
                    rc = cli_fail(CMD, "%s: %s", a.spec, llmt_plan_last_error(orig));
                    llmt_plan_destroy(orig);
                    goto out;
                }
                llmt_plan_destroy(orig);
            }
        }
    }
    if (st != LLMT_OK && a.explain) {
        /* No layout of its own on this world size (no dp, say): the
         * planner's alone. */
        rc = explain(&a, ctx, spec, NULL, calibration);
        goto out;
    }
    if (st != LLMT_OK) {
        rc = cli_fail(CMD, "%s: %s", a.spec, llmt_context_last_error(ctx));
        goto out;
    }
    rc = a.explain ? explain(&a, ctx, spec, p, calibration) : show(&a, p, spec);
out:
    llmt_plan_destroy(p);
    llmt_spec_destroy(spec);
    llmt_context_destroy(ctx);
    return rc;
}
