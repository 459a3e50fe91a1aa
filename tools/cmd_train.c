/* llmtrain train SPEC.json: the main job. Reads the job spec, builds the
 * tokenizer and the token data from the corpus, trains the model on the CPU
 * with a progress line, metrics JSONL, periodic validation and (async)
 * checkpoints, resumes from the newest checkpoint with --resume, and ends
 * with sample text, a loss plot (SVG) and the validation loss next to the
 * unigram entropy of the corpus. Uses only the public ABI. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "train_data.h"

#define CMD "train"

/* ---- the job, as read from the spec ---------------------------------- */

typedef struct job {
    char name[128];
    llmt_model_config mc;
    llmt_trainer_opts to;
    int64_t steps, eval_interval, eval_batches, log_interval, sample_tokens;
    uint64_t seed, data_seed;
    char data_train[1024], data_val[1024], tok_path[1024];
    int tok_kind; /* 0 byte, 1 bpe, 2 gpt2 */
    int64_t tok_vocab;
    char ckpt_dir[1024];
    int64_t ckpt_interval, zero;
    int ckpt_async, keep_last;
    char jsonl[1024], plot[1024];
} job;

static int spec_i(const llmt_spec *s, const char *path, int64_t *out)
{
    llmt_status st = llmt_spec_get_int(s, path, out);
    if (st != LLMT_OK)
        return cli_fail(CMD, "spec %s: %s", path, llmt_spec_last_error(s));
    return 0;
}

static int spec_d(const llmt_spec *s, const char *path, double *out)
{
    llmt_status st = llmt_spec_get_double(s, path, out);
    if (st != LLMT_OK)
        return cli_fail(CMD, "spec %s: %s", path, llmt_spec_last_error(s));
    return 0;
}

static int spec_s(const llmt_spec *s, const char *path, char *buf, size_t cap)
{
    llmt_status st = llmt_spec_get_string(s, path, buf, cap, NULL);
    if (st != LLMT_OK)
        return cli_fail(CMD, "spec %s: %s", path, llmt_spec_last_error(s));
    return 0;
}

/* Relative output paths of the spec go under the run directory. */
static void under(char *dst, size_t cap, const char *out, const char *p,
                  const char *dflt)
{
    if (!p || !*p) p = dflt;
    if (p[0] == '/')
        snprintf(dst, cap, "%s", p);
    else
        snprintf(dst, cap, "%.500s/%.500s", out, p);
}

/* out: this rank's run directory; run_root: rank 0's (the checkpoints of
 * every rank go there, one sharded checkpoint per step). */
static int read_job(const llmt_spec *s, const char *out, const char *run_root,
                    job *j)
{
    int64_t v;
    double d;
    char buf[1024];
    memset(j, 0, sizeof *j);
    llmt_model_config *c = &j->mc;
    llmt_model_config_init(c, sizeof *c);
    llmt_trainer_opts *o = &j->to;
    llmt_trainer_opts_init(o, sizeof *o);
    if (spec_s(s, "name", j->name, sizeof j->name)) return -1;
    if (spec_i(s, "model.arch", &v)) return -1;
    c->arch = v == 1 ? LLMT_ARCH_LLAMA : LLMT_ARCH_GPT2;
    if (spec_i(s, "model.layers", &v)) return -1;
    c->layers = (int32_t)v;
    if (spec_i(s, "model.hidden", &v)) return -1;
    c->width = (int32_t)v;
    if (spec_i(s, "model.heads", &v)) return -1;
    c->heads = (int32_t)v;
    if (spec_i(s, "model.kv_heads", &v)) return -1;
    c->kv_heads = (int32_t)v;
    if (spec_i(s, "model.ffn", &v)) return -1;
    c->ffn_hidden = (int32_t)v;
    if (spec_i(s, "model.vocab", &v)) return -1;
    c->vocab_size = (int32_t)v;
    if (spec_i(s, "model.seq_len", &v)) return -1;
    c->max_seq_len = (int32_t)v;
    if (spec_d(s, "model.norm_eps", &d)) return -1;
    c->norm_eps = (float)d;
    if (spec_d(s, "model.rope_theta", &d)) return -1;
    c->rope_theta = (float)d;
    if (spec_i(s, "model.tied_embeddings", &v)) return -1;
    c->tie_embeddings = (int32_t)v;
    if (spec_i(s, "model.moe.experts", &v)) return -1;
    if (v > 0)
        return cli_fail(CMD, "model.moe.experts %lld: mixture of experts is "
                        "not in the CPU trainer yet", (long long)v);

    if (spec_i(s, "batch.micro", &v)) return -1;
    o->micro_batch = (int32_t)v;
    if (spec_i(s, "batch.grad_accum", &v)) return -1;
    o->grad_accum = (int32_t)v;
    o->seq_len = c->max_seq_len;
    if (spec_d(s, "optimizer.lr", &d)) return -1;
    o->lr = (float)d;
    if (spec_d(s, "optimizer.beta1", &d)) return -1;
    o->beta1 = (float)d;
    if (spec_d(s, "optimizer.beta2", &d)) return -1;
    o->beta2 = (float)d;
    if (spec_d(s, "optimizer.eps", &d)) return -1;
    o->eps = (float)d;
    if (spec_d(s, "optimizer.weight_decay", &d)) return -1;
    o->weight_decay = (float)d;
    if (spec_d(s, "optimizer.grad_clip", &d)) return -1;
    o->grad_clip = (float)d;
    if (spec_i(s, "optimizer.type", &v)) return -1;
    if (v != 0) return cli_fail(CMD, "optimizer.type: only adamw is implemented");
    if (spec_i(s, "schedule.kind", &v)) return -1; /* cosine|linear|wsd|constant */
    static const int32_t kinds[4] = {LLMT_LR_COSINE, LLMT_LR_LINEAR, LLMT_LR_WSD,
                                     LLMT_LR_CONSTANT};
    o->schedule = kinds[v >= 0 && v < 4 ? v : 0];
    if (spec_i(s, "schedule.warmup_steps", &v)) return -1;
    o->warmup_steps = v;
    if (spec_i(s, "schedule.total_steps", &v)) return -1;
    o->total_steps = v;
    if (spec_d(s, "schedule.min_lr_ratio", &d)) return -1;
    o->min_lr = (float)(d * o->lr);
    if (spec_i(s, "schedule.decay_steps", &v)) return -1;
    o->decay_fraction = o->total_steps > 0 ? (float)v / (float)o->total_steps : 0;
    if (o->decay_fraction > 1.0f) o->decay_fraction = 1.0f;
    if (spec_i(s, "parallelism.recompute", &v)) return -1;
    o->recompute = v != 0;
    if (spec_i(s, "train.threads", &v)) return -1;
    o->threads = (int32_t)v;

    if (spec_i(s, "train.steps", &j->steps)) return -1;
    if (spec_i(s, "train.seed", &v)) return -1;
    j->seed = (uint64_t)v;
    c->seed = j->seed;
    if (spec_i(s, "train.eval_interval", &j->eval_interval)) return -1;
    if (spec_i(s, "train.eval_batches", &j->eval_batches)) return -1;
    if (spec_i(s, "train.log_interval", &j->log_interval)) return -1;
    if (spec_i(s, "train.sample_tokens", &j->sample_tokens)) return -1;
    if (spec_i(s, "train.device", &v)) return -1;
    /* the spec's cpu|cuda; the trainer says so clearly when this build or
     * machine has no GPU */
    o->device = v == 1 ? LLMT_DEVICE_CUDA : LLMT_DEVICE_CPU;
    if (spec_i(s, "train.deterministic", &v)) return -1;
    o->deterministic = v != 0; /* the CPU trainer always is */
    /* precision.gemm fp8: the device trainer's fp8 forward GEMMs with
     * delayed per-tensor scaling (doc/fp8.md) */
    if (spec_s(s, "precision.gemm", buf, sizeof buf)) return -1;
    if (!strcmp(buf, "fp8")) {
        if (spec_s(s, "precision.fp8_recipe", buf, sizeof buf)) return -1;
        if (strcmp(buf, "delayed"))
            return cli_fail(CMD, "precision.fp8_recipe %s: the trainer implements "
                            "delayed scaling only (doc/fp8.md)", buf);
        o->fp8 = 1;
        if (spec_i(s, "precision.fp8_amax_history", &v)) return -1;
        o->fp8_amax_history = (int32_t)v;
        if (spec_i(s, "precision.fp8_margin", &v)) return -1;
        o->fp8_margin = (int32_t)v;
    }
    if (spec_i(s, "parallelism.tp", &v)) return -1;
    int64_t par = v;
    if (spec_i(s, "parallelism.pp", &v)) return -1;
    par *= v;
    if (spec_i(s, "parallelism.dp", &v)) return -1;
    par *= v;
    if (spec_i(s, "parallelism.zero", &j->zero)) return -1;
    if (par != v || v != cli_dp_world()) /* data parallel only (cmd_comm.c) */
        return cli_fail(CMD, "parallelism: tp*pp*dp = %lld; this command runs "
                        "data parallelism only: tp = pp = 1 and dp = the "
                        "number of processes (%d)", (long long)par,
                        (int)cli_dp_world());

    if (spec_s(s, "data.train", j->data_train, sizeof j->data_train)) return -1;
    if (spec_s(s, "data.val", j->data_val, sizeof j->data_val)) return -1;
    if (spec_i(s, "data.tokenizer.kind", &v)) return -1;
    j->tok_kind = (int)v;
    if (spec_i(s, "data.tokenizer.vocab_size", &j->tok_vocab)) return -1;
    if (spec_s(s, "data.tokenizer.path", j->tok_path, sizeof j->tok_path)) return -1;
    if (spec_i(s, "data.seed", &v)) return -1;
    j->data_seed = (uint64_t)v;

    if (spec_s(s, "checkpoint.dir", buf, sizeof buf)) return -1;
    under(j->ckpt_dir, sizeof j->ckpt_dir, run_root, buf, "ckpt");
    if (spec_s(s, "checkpoint.interval", buf, sizeof buf)) return -1;
    if (!strcmp(buf, "auto"))
        j->ckpt_interval = -1;
    else
        j->ckpt_interval = strtoll(buf, NULL, 10);
    if (spec_i(s, "checkpoint.async", &v)) return -1;
    j->ckpt_async = (int)v;
    j->keep_last = 3;
    if (spec_i(s, "checkpoint.tiers", &v)) return -1;
    if (v > 0 && spec_i(s, "checkpoint.tiers[0].keep_last", &v) == 0)
        j->keep_last = (int)v;

    if (spec_s(s, "metrics.jsonl", buf, sizeof buf)) return -1;
    under(j->jsonl, sizeof j->jsonl, out, buf, "metrics.jsonl");
    if (spec_s(s, "metrics.plot", buf, sizeof buf)) return -1;
    under(j->plot, sizeof j->plot, out, buf, "loss.svg");
    return 0;
}

/* ---- small helpers --------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int mkdir_p(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

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

/* ---- history (for the plot) ----------------------------------------- */

typedef struct point {
    int64_t step;
    double v;
} point;

typedef struct series {
    point *p;
    size_t n, cap;
} series;

/* A step seen again (a resume that retrained it) replaces the old value. */
static void series_add(series *s, int64_t step, double v)
{
    for (size_t i = s->n; i-- > 0 && s->p[i].step >= step;)
        if (s->p[i].step == step) {
            s->p[i].v = v;
            return;
        }
    if (s->n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 256;
        point *np = realloc(s->p, nc * sizeof *np);
        if (!np) return;
        s->p = np;
        s->cap = nc;
    }
    s->p[s->n].step = step;
    s->p[s->n].v = v;
    s->n++;
}

/* Reads a number after "key": in one JSONL line. */
static int json_num(const char *line, const char *key, double *out)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return 0;
    char *end = NULL;
    double v = strtod(p + strlen(pat), &end);
    if (end == p + strlen(pat)) return 0;
    *out = v;
    return 1;
}

/* On resume: reload the metrics of steps <= `upto` for the plot. The file
 * itself is never rewritten: lines of steps that are being retrained stay
 * (the history of what ran), and for each step the latest line counts. */
static void reload_metrics(const char *path, int64_t upto, series *tr,
                           series *va)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        double st, v;
        if (strstr(line, "\"event\"")) {
            /* a resume: the lines after it replace the retrained steps */
            if (json_num(line, "step", &st)) {
                while (tr->n && tr->p[tr->n - 1].step > (int64_t)st) tr->n--;
                while (va->n && va->p[va->n - 1].step > (int64_t)st) va->n--;
            }
            continue;
        }
        if (!json_num(line, "step", &st) || st > (double)upto) continue;
        if (json_num(line, "val_loss", &v))
            series_add(va, (int64_t)st, v);
        else if (json_num(line, "loss", &v))
            series_add(tr, (int64_t)st, v);
    }
    fclose(f);
}

/* ---- the loss plot: a self-contained SVG ------------------------------ */

static double nice_step(double range, int target)
{
    double raw = range / target, mag = pow(10.0, floor(log10(raw)));
    double r = raw / mag;
    return mag * (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10);
}

static int write_svg(const char *path, const char *title, const series *tr,
                     const series *va, double entropy)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    const double W = 800, H = 480, L = 70, R = 20, T = 40, Bm = 50;
    int64_t xmax = 1;
    double ymin = INFINITY, ymax = -INFINITY;
    const series *all[2] = {tr, va};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < all[k]->n; i++) {
            if (all[k]->p[i].step > xmax) xmax = all[k]->p[i].step;
            if (all[k]->p[i].v < ymin) ymin = all[k]->p[i].v;
            if (all[k]->p[i].v > ymax) ymax = all[k]->p[i].v;
        }
    if (entropy > 0 && entropy > ymax) ymax = entropy;
    if (!(ymin < ymax)) {
        ymin = 0;
        ymax = ymax > 0 && isfinite(ymax) ? ymax : 1;
    }
    ymin = floor(ymin);
    ymax = ceil(ymax);
    double pw = W - L - R, ph = H - T - Bm;
#define XS(s) (L + pw * (double)(s) / (double)xmax)
#define YS(v) (T + ph * (1.0 - ((v) - ymin) / (ymax - ymin)))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
               "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\" "
               "text-anchor=\"middle\">%s: loss (nats/token)</text>\n",
            W / 2, title);
    /* grid and ticks */
    double ys = nice_step(ymax - ymin, 6);
    for (double y = ceil(ymin / ys) * ys; y <= ymax + 1e-9; y += ys) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#ddd\"/>\n", L, YS(y), W - R, YS(y));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                L - 6, YS(y) + 4, y);
    }
    double xs = nice_step((double)xmax, 8);
    for (double x = 0; x <= (double)xmax + 1e-9; x += xs) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#eee\"/>\n", XS(x), T, XS(x), T + ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g"
                   "</text>\n", XS(x), T + ph + 18, x);
    }
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
               "fill=\"none\" stroke=\"#333\"/>\n", L, T, pw, ph);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step"
               "</text>\n", L + pw / 2, H - 12);
    if (entropy > 0) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#888\" stroke-dasharray=\"6,4\"/>\n",
                L, YS(entropy), W - R, YS(entropy));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
                   "fill=\"#666\">unigram entropy %.3f</text>\n",
                W - R - 4, YS(entropy) - 5, entropy);
    }
    static const char *const color[2] = {"#1f77b4", "#d62728"};
    static const char *const label[2] = {"train", "validation"};
    for (int k = 0; k < 2; k++) {
        const series *s = all[k];
        if (!s->n) continue;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" "
                   "points=\"", color[k], k ? "2" : "1.2");
        for (size_t i = 0; i < s->n; i++)
            fprintf(f, "%.1f,%.1f ", XS(s->p[i].step), YS(s->p[i].v));
        fprintf(f, "\"/>\n");
        if (k == 1)
            for (size_t i = 0; i < s->n; i++)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" "
                           "fill=\"%s\"/>\n", XS(s->p[i].step),
                        YS(s->p[i].v), color[k]);
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
                   "stroke=\"%s\" stroke-width=\"2\"/>\n<text x=\"%.0f\" "
                   "y=\"%.0f\">%s</text>\n",
                W - R - 150, T + 18 + 18.0 * k, W - R - 125, T + 18 + 18.0 * k,
                color[k], W - R - 118, T + 22 + 18.0 * k, label[k]);
    }
#undef XS
#undef YS
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? 0 : -1;
}

/* ---- checkpoints ----------------------------------------------------- */

static int ckpt_save(llmt_ckpt *ck, llmt_trainer *tr, const train_data *td,
                     int64_t step, int async, int32_t dp, int64_t zero)
{
    /* the previous async save must have succeeded */
    llmt_status s = llmt_ckpt_wait(ck, -1);
    if (s != LLMT_OK)
        return cli_fail_status(CMD, s, llmt_ckpt_last_error(ck));
    s = llmt_ckpt_begin(ck, step);
    if (s == LLMT_OK) {
        s = llmt_trainer_ckpt_add(tr, ck);
        if (s != LLMT_OK)
            return cli_fail_status(CMD, s, llmt_trainer_last_error(tr));
    }
    if (s == LLMT_OK) s = td_ckpt_add(td, ck);
    if (s == LLMT_OK) { /* for people and tools; loading does not need it */
        char plan[96];
        snprintf(plan, sizeof plan, "{\"dp\": %d, \"zero\": %lld}", (int)dp,
                 (long long)(dp > 1 ? zero : 0));
        s = llmt_ckpt_set_plan_json(ck, plan);
    }
    if (s == LLMT_OK) s = llmt_ckpt_save(ck, async);
    if (s != LLMT_OK) return cli_fail_status(CMD, s, llmt_ckpt_last_error(ck));
    return 0;
}

/* ---- the job --------------------------------------------------------- */

static int usage(void)
{
    fprintf(stderr, "usage: llmtrain train SPEC.json [--out DIR] [--resume] [--fresh] "
                    "[--steps N] [--threads N]\n(llmtrain help train for more)\n");
    return CLI_USAGE;
}

typedef struct run {
    llmt_context *ctx;
    llmt_spec *spec;
    llmt_model *model;
    llmt_trainer *tr;
    llmt_ckpt *ck;
    train_data td;
    FILE *jsonl;
    series trs, vas;
    int32_t *in, *tg, *vin, *vtg, *gen;
} run;

static void run_free(run *r)
{
    if (r->ck) {
        llmt_ckpt_wait(r->ck, -1);
        llmt_ckpt_destroy(r->ck);
    }
    if (r->jsonl) fclose(r->jsonl);
    llmt_trainer_destroy(r->tr);
    cli_dp_finish();
    llmt_model_destroy(r->model);
    td_free(&r->td);
    llmt_spec_destroy(r->spec);
    llmt_context_destroy(r->ctx);
    free(r->trs.p);
    free(r->vas.p);
    free(r->in);
    free(r->tg);
    free(r->vin);
    free(r->vtg);
    free(r->gen);
}

static int evaluate(run *r, const job *j, int nval, float *out)
{
    llmt_batch b = {sizeof b, r->vin, r->vtg, nval, j->to.seq_len};
    llmt_status s = llmt_trainer_evaluate(r->tr, &b, out);
    if (s != LLMT_OK) return cli_fail_status(CMD, s, llmt_trainer_last_error(r->tr));
    return 0;
}

static int train_main(run *r, const char *spec_path, const char *out,
                      int resume, int fresh, int64_t stop_at, int threads)
{
    char dp_out[1100];
    int32_t dp_rank = 0, dp_size = 1;
    const char *run_root = out;
    cli_dp_setup(&out, dp_out, sizeof dp_out, &dp_rank, &dp_size);
    llmt_status s = llmt_context_create(NULL, &r->ctx);
    if (s != LLMT_OK) return cli_fail_status(CMD, s, "context");
    s = llmt_spec_parse_file(r->ctx, spec_path, &r->spec);
    if (s != LLMT_OK)
        return cli_fail(CMD, "%s:\n%s", spec_path, llmt_context_last_error(r->ctx));
    if (mkdir_p(out) != 0)
        return cli_fail(CMD, "cannot create %s: %s", out, strerror(errno));
    job j;
    if (read_job(r->spec, out, run_root, &j)) return CLI_FAILED;
    if (threads > 0) j.to.threads = threads;
    if (stop_at > j.steps)
        return cli_fail(CMD, "--steps %lld is beyond train.steps %lld of %s (raise "
                        "train.steps: it also shapes the LR schedule)",
                        (long long)stop_at, (long long)j.steps, spec_path);
    if (stop_at <= 0) stop_at = j.steps;

    /* data: tokenizer, train and validation tokens */
    td_opts dopt = {0};
    dopt.out_dir = out;
    dopt.train = j.data_train;
    dopt.val = j.data_val;
    dopt.tok_kind = j.tok_kind;
    dopt.tok_vocab = (int32_t)j.tok_vocab;
    dopt.tok_path = j.tok_path;
    dopt.seed = j.data_seed;
    dopt.seq_len = j.to.seq_len;
    dopt.micro = j.to.micro_batch;
    dopt.accum = j.to.grad_accum;
    dopt.dp_rank = dp_rank;
    dopt.dp_size = dp_size;
    dopt.resume = resume || fresh; /* --fresh reuses the prepared data */
    if (td_open(&r->td, r->ctx, &dopt) != 0) return CLI_FAILED;
    int32_t tv = r->td.vocab;
    if (tv > j.mc.vocab_size)
        return cli_fail(CMD, "model.vocab %d is too small for the tokenizer's "
                        "%d tokens (raise model.vocab or lower "
                        "data.tokenizer.vocab_size)", (int)j.mc.vocab_size,
                        (int)tv);
    /* pad the embedding rows to a multiple of 64 (llm.c does the same) */
    j.mc.padded_vocab_size = (j.mc.vocab_size + 63) / 64 * 64;

    s = llmt_model_create(r->ctx, &j.mc, &r->model);
    if (s != LLMT_OK)
        return cli_fail_status(CMD, s, llmt_context_last_error(r->ctx));
    s = llmt_trainer_create(r->model, &j.to, &r->tr);
    if (s != LLMT_OK)
        return cli_fail_status(CMD, s, llmt_model_last_error(r->model));
    if (cli_dp_attach(r->ctx, r->spec, r->tr)) return CLI_FAILED;
    int64_t nparams = 0;
    llmt_model_param_count(r->model, NULL, &nparams);

    /* checkpoints: under mpirun every rank saves its part of one sharded
     * checkpoint in rank 0's directory, which any number of processes
     * (or one) can resume */
    llmt_ckpt_opts co;
    llmt_ckpt_opts_init(&co, sizeof co);
    co.keep_last = j.keep_last;
    co.rank = dp_rank;
    co.world_size = dp_size;
    s = llmt_ckpt_create(r->ctx, j.ckpt_dir, &co, &r->ck);
    if (s != LLMT_OK)
        return cli_fail_status(CMD, s, llmt_context_last_error(r->ctx));
    if (j.ckpt_interval < 0) /* "auto": a few per run on one CPU */
        j.ckpt_interval = j.steps / 4 > 0 ? j.steps / 4 : 1;

    /* Resume never loses data and never wedges (doc/runbook.md): the
     * newest usable step is loaded and every newer step directory (broken
     * or interrupted, else it would have been used) is quarantined, so the
     * steps retrained can be saved again; with none usable the run stops
     * and lists why, unless --fresh says to start over. Rank 0 moves
     * directories before its first step; the other ranks cannot save
     * before that step's collectives, which wait for rank 0. */
    int64_t start = 0;
    size_t have = 0;
    if (!resume && !fresh && llmt_ckpt_list(r->ck, NULL, 0, &have) == LLMT_OK && have > 0)
        return cli_fail(CMD, "%s already holds %zu checkpoint(s) of an earlier "
                        "run: continue it with --resume, or choose another "
                        "--out", j.ckpt_dir, have);
    int64_t keep_upto = -1; /* step directories above this are quarantined */
    if (resume) {
        int64_t step = -1;
        s = llmt_ckpt_open_latest(r->ck, &step);
        if (s == LLMT_ERR_NOT_FOUND && !fresh) {
            return cli_fail(CMD, "--resume: %s\nnothing was changed. Restore a "
                            "checkpoint (doc/runbook.md), or start over from step 0 "
                            "with --fresh (unusable step directories are moved to "
                            "%s/quarantine, metrics are kept)",
                            llmt_ckpt_last_error(r->ck), j.ckpt_dir);
        } else if (s == LLMT_ERR_NOT_FOUND) {
            printf("no usable checkpoint in %s: starting from step 0 (--fresh)\n",
                   j.ckpt_dir);
        } else if (s != LLMT_OK) {
            return cli_fail_status(CMD, s, llmt_ckpt_last_error(r->ck));
        } else {
            s = llmt_trainer_ckpt_read(r->tr, r->ck);
            if (s != LLMT_OK)
                return cli_fail_status(CMD, s, llmt_trainer_last_error(r->tr));
            if (td_ckpt_read(&r->td, r->ck) != 0) return CLI_FAILED;
            start = step;
            keep_upto = step;
            printf("resumed from %s at step %lld\n", j.ckpt_dir, (long long)step);
        }
    }
    if (dp_rank == 0 && (resume || fresh)) {
        size_t moved = 0;
        s = llmt_ckpt_quarantine_newer(r->ck, keep_upto, &moved);
        if (s != LLMT_OK) return cli_fail_status(CMD, s, llmt_ckpt_last_error(r->ck));
        if (moved)
            printf("moved %zu unusable step director%s to %s/quarantine (see REASON "
                   "in each)\n", moved, moved == 1 ? "y" : "ies", j.ckpt_dir);
    }
    if (start > 0)
        reload_metrics(j.jsonl, start, &r->trs, &r->vas);
    /* appended, never truncated: a resume or a fresh start keeps what ran */
    r->jsonl = fopen(j.jsonl, "a");
    if (!r->jsonl) return cli_fail(CMD, "open %s: %s", j.jsonl, strerror(errno));
    fprintf(r->jsonl, "{\"event\":\"%s\",\"step\":%lld}\n",
            start > 0 ? "resume" : "start", (long long)start);

    int B = j.to.micro_batch, T = j.to.seq_len, A = j.to.grad_accum;
    size_t per = (size_t)B * A * T;
    int nval = (int)(j.eval_batches > 0 ? j.eval_batches : 1) * B;
    r->in = malloc(per * sizeof(int32_t));
    r->tg = malloc(per * sizeof(int32_t));
    r->vin = malloc((size_t)nval * T * sizeof(int32_t));
    r->vtg = malloc((size_t)nval * T * sizeof(int32_t));
    if (!r->in || !r->tg || !r->vin || !r->vtg) return cli_fail(CMD, "no memory");
    nval = td_val_batch(&r->td, r->vin, r->vtg, nval);
    nval -= nval % B;
    if (nval < B)
        return cli_fail(CMD, "the validation data holds fewer than %d "
                        "sequences of %d tokens", B, T);

    printf("model: %s, %d layers, width %d, %d heads, vocab %d, %.2fM "
           "parameters\n", j.mc.arch == LLMT_ARCH_GPT2 ? "gpt2" : "llama",
           (int)j.mc.layers, (int)j.mc.width, (int)j.mc.heads, (int)tv,
           (double)nparams / 1e6);
    printf("data: %s; %lld train tokens, %lld validation tokens; unigram "
           "entropy %.3f nats/token\n", r->td.desc, (long long)r->td.n_train,
           (long long)r->td.n_val, r->td.unigram_entropy);
    printf("train: %lld steps of %d x %d x %d tokens, lr %g, %s, on the %s; "
           "output in %s\n", (long long)j.steps, B, A, T, (double)j.to.lr,
           j.to.recompute ? "recompute" : "no recompute",
           j.to.device == LLMT_DEVICE_CUDA ? "GPU (bf16)" : "CPU (fp32)", out);
    fflush(stdout);

    int tty = isatty(STDOUT_FILENO);
    double t_start = now_s(), t_log = t_start;
    int64_t tok_log = 0;
    float last_val = NAN, first_val = NAN;
    if (start == 0 && j.eval_interval > 0) {
        if (evaluate(r, &j, nval, &first_val)) return CLI_FAILED;
        fprintf(r->jsonl, "{\"step\":0,\"val_loss\":%.6f}\n", (double)first_val);
        series_add(&r->vas, 0, first_val);
        printf("step %lld: validation loss %.4f\n", 0LL, (double)first_val);
    }
    for (int64_t step = start; step < stop_at; step++) {
        if (td_next(&r->td, r->in, r->tg)) return CLI_FAILED; /* this rank's share */
        llmt_batch b = {sizeof b, r->in, r->tg, B * A, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        s = llmt_trainer_step(r->tr, &b, &met);
        if (s != LLMT_OK) {
            if (tty) putchar('\n');
            return cli_fail_status(CMD, s, llmt_trainer_last_error(r->tr));
        }
        int64_t done = met.step;
        double t = now_s();
        tok_log += met.tokens;
        fprintf(r->jsonl,
                "{\"step\":%lld,\"loss\":%.6f,\"grad_norm\":%.6f,\"lr\":%.6g,"
                "\"tokens\":%lld,\"step_s\":%.4f,\"tokens_per_s\":%.1f,"
                "\"elapsed_s\":%.2f}\n",
                (long long)done, (double)met.loss, (double)met.grad_norm,
                (double)met.lr, (long long)met.tokens, met.seconds,
                (double)met.tokens / (met.seconds > 0 ? met.seconds : 1e-9),
                t - t_start);
        series_add(&r->trs, done, met.loss);
        int last = done == stop_at;
        if (j.log_interval > 0 &&
            (done % j.log_interval == 0 || last || done == start + 1)) {
            double tps = tok_log / (t - t_log > 0 ? t - t_log : 1e-9);
            double avg = (t - t_start) / (double)(done - start);
            char eta[32];
            fmt_dur(eta, sizeof eta, avg * (double)(stop_at - done));
            printf("%sstep %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | "
                   "%.0f tok/s | ETA %s%s", tty ? "\r" : "", (long long)done,
                   (long long)stop_at, (double)met.loss, (double)met.lr,
                   (double)met.grad_norm, tps, eta, tty ? "   " : "\n");
            fflush(stdout);
            t_log = t;
            tok_log = 0;
        }
        if (j.eval_interval > 0 && (done % j.eval_interval == 0 || last)) {
            if (evaluate(r, &j, nval, &last_val)) return CLI_FAILED;
            fprintf(r->jsonl, "{\"step\":%lld,\"val_loss\":%.6f}\n",
                    (long long)done, (double)last_val);
            series_add(&r->vas, done, last_val);
            printf("%sstep %lld: validation loss %.4f\n", tty ? "\n" : "",
                   (long long)done, (double)last_val);
        }
        fflush(r->jsonl);
        if ((j.ckpt_interval > 0 && done % j.ckpt_interval == 0) || last) {
            /* the last one is synchronous so that the run ends durable;
             * ZeRO-3 parameters need no gather: each rank saves its share */
            if (ckpt_save(r->ck, r->tr, &r->td, done, last ? 0 : j.ckpt_async,
                          dp_size, j.zero))
                return CLI_FAILED;
        }
    }
    if (tty) putchar('\n');
    s = llmt_ckpt_wait(r->ck, -1);
    if (s != LLMT_OK) return cli_fail_status(CMD, s, llmt_ckpt_last_error(r->ck));
    double wall = now_s() - t_start;
    if (isnan(last_val) && stop_at > start) {
        if (evaluate(r, &j, nval, &last_val)) return CLI_FAILED;
    }

    /* sample text */
    if (j.sample_tokens > 0) {
        int32_t prompt = r->td.eot;
        r->gen = malloc((size_t)j.sample_tokens * sizeof(int32_t));
        if (!r->gen) return cli_fail(CMD, "no memory");
        s = llmt_trainer_generate(r->tr, &prompt, 1, (int32_t)j.sample_tokens,
                                  0.8f, 40, j.seed, r->gen);
        if (s != LLMT_OK)
            return cli_fail_status(CMD, s, llmt_trainer_last_error(r->tr));
        char *text = td_decode(&r->td, r->gen, (size_t)j.sample_tokens);
        printf("---- sample (%lld tokens, temperature 0.8, top-k 40) ----\n%s\n"
               "----\n", (long long)j.sample_tokens, text ? text : "(decode failed)");
        free(text);
    }
    if (write_svg(j.plot, j.name, &r->trs, &r->vas, r->td.unigram_entropy) != 0)
        return cli_fail(CMD, "cannot write %s", j.plot);
    printf("metrics: %s\nloss plot: %s\ncheckpoints: %s\n", j.jsonl, j.plot,
           j.ckpt_dir);
    double H = r->td.unigram_entropy;
    if (!isnan(last_val)) {
        /* a model that has not learned yet sits above the entropy */
        int below = last_val <= H;
        printf("validation loss %.3f nats/token (%.3f bits) vs unigram "
               "entropy of the corpus %.3f nats/token (%.3f bits): %.0f%% "
               "%s, perplexity %.0f vs %.0f (%.1fx %s)%s\n",
               (double)last_val, last_val / log(2.0), H, H / log(2.0),
               100.0 * fabs(1.0 - last_val / H), below ? "below" : "above",
               exp(last_val), exp(H), exp(fabs(H - last_val)),
               below ? "lower" : "higher", stop_at > start ? "" : " (no step run)");
    }
    if (stop_at > start)
        printf("trained steps %lld..%lld in %.1f s\n", (long long)start + 1,
               (long long)stop_at, wall);
    return CLI_OK;
}

int cmd_train(int argc, char **argv)
{
    const char *spec = NULL, *out = NULL;
    int resume = 0, fresh = 0, threads = 0;
    int64_t steps = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(a, "--resume"))
            resume = 1;
        else if (!strcmp(a, "--fresh"))
            fresh = 1;
        else if (!strcmp(a, "--steps") && i + 1 < argc) {
            if (cli_parse_i64("--steps", argv[++i], 1, INT64_MAX, &steps) != CLI_OK)
                return CLI_USAGE;
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            int64_t t = 0;
            if (cli_parse_i64("--threads", argv[++i], 1, 4096, &t) != CLI_OK)
                return CLI_USAGE;
            threads = (int)t;
        }
        else if (a[0] == '-')
            return usage();
        else if (!spec)
            spec = a;
        else
            return usage();
    }
    if (!spec) return usage();
    char dflt[512];
    if (!out) {
        const char *base = strrchr(spec, '/');
        base = base ? base + 1 : spec;
        snprintf(dflt, sizeof dflt, "runs/%.*s", (int)strcspn(base, "."), base);
        out = dflt;
    }
    run r;
    memset(&r, 0, sizeof r);
    int rc = train_main(&r, spec, out, resume, fresh, steps, threads);
    run_free(&r);
    return rc;
}
