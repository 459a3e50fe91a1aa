/* Calibration against published runs: load the runs of
 * examples/specs/calibration/ (each a spec with the paper, table and row it
 * was transcribed from and the published throughput), predict them, fit
 * the model's free constants by least squares over their MFU, refit
 * with each run left out (the error that matters for a run the model has
 * not seen), and rank a published layout among the auto-planner's.
 * doc/planner.md reports what this computes; test plan-calib asserts it. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            size_t nc = cap ? cap * 2 : 16384;
            char *nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
            cap = nc;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

static llmt_status bad(llmt_err *err, const char *path, const char *fmt, const char *key)
{
    return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT, "calibration %s: %s %s",
                         base_name(path), key, fmt);
}

static const char *get_str(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static double get_num(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

/* Megatron-LM's FLOPs per iteration counting full recomputation
 * (Narayanan et al. 2021, eq. 3): 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)). */
static double megatron_flops(const llmt_spec *s)
{
    double B = (double)s->batch.global, S = (double)s->model.seq_len,
           l = (double)s->model.layers, h = (double)s->model.hidden,
           V = (double)s->model.vocab;
    return 96 * B * S * l * h * h * (1 + S / (6 * h) + V / (16 * l * h));
}

llmt_status llmt__calib_load(llmt_context *ctx, const char *path, llmt_calib_run *r)
{
    llmt_err *err = ctx ? &ctx->err : NULL;
    memset(r, 0, sizeof *r);
    r->paper_mfu = r->paper_hfu = -1;
    r->mem_fits = r->mem_fits_without = -1;
    r->sw = llmt__plan_sw_default;
    size_t len = 0;
    char *text = slurp(path, &len);
    if (!text)
        return llmt__err_set(err, LLMT_ERR_IO, "calibration %s: cannot read", path);
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                             "calibration %s: not a JSON object", base_name(path));
    }
    llmt_status st = LLMT_OK;
    snprintf(r->file, sizeof r->file, "%s", base_name(path));
    char *dot = strrchr(r->file, '.');
    if (dot)
        *dot = '\0';
    static const char *const text_keys[] = {"source", "table", "row", "comment"};
    for (int i = 0; i < 4 && st == LLMT_OK; i++)
        if (!get_str(o, text_keys[i]))
            st = bad(err, path, "is missing (every run names its paper, table and row)",
                     text_keys[i]);
    const cJSON *pub = cJSON_GetObjectItemCaseSensitive(o, "published");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(o, "spec");
    const cJSON *chk = cJSON_GetObjectItemCaseSensitive(o, "check");
    if (st == LLMT_OK && !cJSON_IsObject(pub))
        st = bad(err, path, "is missing", "published");
    if (st == LLMT_OK && !cJSON_IsObject(sp))
        st = bad(err, path, "is missing", "spec");
    if (st == LLMT_OK && !cJSON_IsBool(chk))
        st = bad(err, path, "is missing (true or false)", "check");
    if (st == LLMT_OK && cJSON_IsFalse(chk) && !get_str(o, "not_checked_because"))
        st = bad(err, path, "is missing (a run left out of the check says why)",
                 "not_checked_because");
    if (st == LLMT_OK && !(get_num(pub, "gpus") >= 1))
        st = bad(err, path, "is missing", "published.gpus");
    /* The hardware must be stated, not defaulted: a default is a guess the
     * comparison would then silently depend on. */
    const cJSON *hw = sp ? cJSON_GetObjectItemCaseSensitive(sp, "hardware") : NULL;
    static const char *const hw_keys[] = {"gpu", "gpus_per_node", "nvlink_GBps",
                                          "ib_Gbps", "ib_rails"};
    for (int i = 0; i < 5 && st == LLMT_OK; i++)
        if (!cJSON_GetObjectItemCaseSensitive(hw, hw_keys[i])) {
            char key[64];
            snprintf(key, sizeof key, "spec.hardware.%s", hw_keys[i]);
            st = bad(err, path, "is missing (a calibration run states all of its hardware)",
                     key);
        }
    if (st == LLMT_OK) {
        char *js = cJSON_PrintUnformatted(sp);
        llmt_spec *spec = NULL;
        st = js ? llmt_spec_parse_json(ctx, js, strlen(js), &spec) : LLMT_ERR_OUT_OF_MEMORY;
        cJSON_free(js);
        if (st != LLMT_OK) {
            char msg[1100];
            snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
            st = llmt__err_set(err, st, "calibration %s: spec: %s", base_name(path), msg);
        } else {
            /* its automatic stages once, not in each of the fit's
             * thousands of estimates */
            llmt__plan_resolve_stages(spec);
            r->spec = spec;
        }
    }
    if (st == LLMT_OK) {
        const llmt_spec *s = r->spec;
        r->gpus = (int32_t)get_num(pub, "gpus");
        int64_t w = s->parallelism.tp * s->parallelism.cp * s->parallelism.pp *
                    s->parallelism.dp;
        if (w != r->gpus) {
            st = llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                               "calibration %s: spec.parallelism: tp*cp*pp*dp = %lld, "
                               "but published.gpus is %d (an impossible layout)",
                               r->file, (long long)w, (int)r->gpus);
        } else if (s->batch.micro * s->batch.grad_accum * s->parallelism.dp !=
                   s->batch.global) {
            st = llmt__err_set(err, LLMT_ERR_INVALID_ARGUMENT,
                               "calibration %s: spec.batch.global %lld is not micro %lld "
                               "x grad_accum %lld x dp %lld", r->file,
                               (long long)s->batch.global, (long long)s->batch.micro,
                               (long long)s->batch.grad_accum,
                               (long long)s->parallelism.dp);
        }
    }
    if (st == LLMT_OK) {
        snprintf(r->source, sizeof r->source, "%s", get_str(o, "source"));
        snprintf(r->table, sizeof r->table, "%s", get_str(o, "table"));
        snprintf(r->row, sizeof r->row, "%s", get_str(o, "row"));
        r->check = cJSON_IsTrue(chk);
        r->paper_mfu = get_num(pub, "mfu");
        r->paper_hfu = get_num(pub, "hfu");
        const cJSON *mem = cJSON_GetObjectItemCaseSensitive(pub, "memory");
        const cJSON *f1 = cJSON_GetObjectItemCaseSensitive(mem, "fits");
        const cJSON *f2 = cJSON_GetObjectItemCaseSensitive(mem, "fits_without_sp_and_selective");
        r->mem_fits = cJSON_IsBool(f1) ? cJSON_IsTrue(f1) : -1;
        r->mem_fits_without = cJSON_IsBool(f2) ? cJSON_IsTrue(f2) : -1;
        /* The software, stated like the hardware: what the framework of
         * the run did where frameworks differ (doc/planner.md). */
        const cJSON *sw = cJSON_GetObjectItemCaseSensitive(o, "software");
        static const char *const sw_keys[] = {"cp", "flash_attention", "tp_comm_overlap",
                                              "dp_overlap"};
        int *const sw_dst[] = {&r->sw.allow_cp, &r->sw.flash_attention, &r->sw.tp_comm_overlap,
                               &r->sw.dp_overlap};
        for (int i = 0; i < 4 && st == LLMT_OK; i++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(sw, sw_keys[i]);
            char key[64];
            snprintf(key, sizeof key, "software.%s", sw_keys[i]);
            if (!cJSON_IsBool(x))
                st = bad(err, path,
                         "is missing (true or false: a calibration run states "
                         "what its framework did)",
                         key);
            else
                *sw_dst[i] = cJSON_IsTrue(x);
        }
        const char *gr = get_str(sw, "grad_reduce");
        if (st == LLMT_OK && (!gr || (strcmp(gr, "fp32") && strcmp(gr, "param"))))
            st = bad(err, path,
                     "is missing (\"fp32\" or \"param\": the dtype of the "
                     "gradient reduction)",
                     "software.grad_reduce");
        if (st == LLMT_OK)
            r->sw.grad_reduce_fp32 = !strcmp(gr, "fp32");
    }
    if (st == LLMT_OK) {
        llmt_plan_estimate e;
        llmt__plan_estimate_x(r->spec, r->gpus, NULL, &r->sw, &e, NULL);
        double peak = r->spec->hardware.peak_tflops * 1e12;
        double step = get_num(pub, "step_s");
        double tf = get_num(pub, "tflops_per_gpu");
        const char *fl = get_str(pub, "flops");
        if (step > 0) {
            r->pub_step_s = step;
        } else if (tf > 0) {
            if (!fl)
                st = bad(err, path, "is missing (megatron_recompute, model or unstated)",
                         "published.flops");
            else if (!strcmp(fl, "megatron_recompute"))
                r->pub_step_s = megatron_flops(r->spec) / (r->gpus * tf * 1e12);
            else
                r->pub_step_s = e.model_flops_per_step / (r->gpus * tf * 1e12);
        } else if (r->paper_mfu > 0) {
            r->pub_step_s = e.model_flops_per_step / (r->gpus * peak * r->paper_mfu);
        } else {
            st = bad(err, path, "has no throughput (step_s, tflops_per_gpu or mfu)",
                     "published");
        }
        if (st == LLMT_OK)
            r->pub_mfu = e.model_flops_per_step / (r->gpus * peak * r->pub_step_s);
    }
    cJSON_Delete(o);
    if (st != LLMT_OK) {
        llmt_spec_destroy(r->spec);
        r->spec = NULL;
    }
    return st;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

llmt_status llmt__calib_load_dir(llmt_context *ctx, const char *dir,
                                 llmt_calib_run **runs, int *n)
{
    llmt_err *err = ctx ? &ctx->err : NULL;
    *runs = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return llmt__err_set(err, LLMT_ERR_IO, "calibration: cannot open %s", dir);
    char *names[512];
    int k = 0;
    struct dirent *de;
    while ((de = readdir(d)) && k < 512) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".json"))
            names[k++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)k, sizeof names[0], by_name);
    llmt_calib_run *r = calloc((size_t)(k ? k : 1), sizeof *r);
    llmt_status st = r ? LLMT_OK : LLMT_ERR_OUT_OF_MEMORY;
    int got = 0;
    for (int i = 0; i < k; i++) {
        if (st == LLMT_OK) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            st = llmt__calib_load(ctx, path, &r[got]);
            if (st == LLMT_OK)
                got++;
        }
        free(names[i]);
    }
    if (st != LLMT_OK) {
        llmt__calib_free(r, got);
        return st;
    }
    *runs = r;
    *n = got;
    return LLMT_OK;
}

void llmt__calib_free(llmt_calib_run *runs, int n)
{
    if (!runs)
        return;
    for (int i = 0; i < n; i++)
        llmt_spec_destroy(runs[i].spec);
    free(runs);
}

double llmt__calib_predict(const llmt_calib_run *r, const llmt_plan_consts *k,
                           llmt_plan_estimate *e)
{
    llmt_plan_estimate tmp;
    if (!e)
        e = &tmp;
    llmt__plan_estimate_x(r->spec, r->gpus, k, &r->sw, e, NULL);
    return e->mfu;
}

/* The fitted parameters as a vector, each scaled so that its range is of
 * order 1 (the numerical Jacobian and the damping treat them alike). */
#define NFIT 4
static void put(llmt_plan_consts *k, const double *x)
{
    k->compute_overhead = x[0];
    k->fixed_layer_s = x[1] * 1e-3; /* ms */
    k->jitter = x[2] * 0.1;
    k->zero3_overlap = x[3];
}

static const double lo[NFIT] = {0.5, 0.0, 0.0, 0.0};
static const double hi[NFIT] = {2.0, 5.0, 5.0, 1.0};
static const double x0[NFIT] = {1.0, 0.5, 0.5, 0.5};

static double sse(const llmt_calib_run *runs, int n, int skip, const double *x,
                  double *res)
{
    llmt_plan_consts k = llmt__plan_consts_default;
    put(&k, x);
    double s = 0;
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!runs[i].check || i == skip)
            continue;
        double d = llmt__calib_predict(&runs[i], &k, NULL) - runs[i].pub_mfu;
        if (res)
            res[m] = d;
        m++;
        s += d * d;
    }
    return s;
}

/* Solve A x = b (NFIT x NFIT, partial pivoting); 0 when singular. */
static int solve(double A[NFIT][NFIT], double *b, double *x)
{
    for (int c = 0; c < NFIT; c++) {
        int p = c;
        for (int r = c + 1; r < NFIT; r++)
            if (fabs(A[r][c]) > fabs(A[p][c]))
                p = r;
        if (fabs(A[p][c]) < 1e-300)
            return 0;
        for (int j = 0; j < NFIT; j++) {
            double t = A[c][j];
            A[c][j] = A[p][j];
            A[p][j] = t;
        }
        double t = b[c];
        b[c] = b[p];
        b[p] = t;
        for (int r = c + 1; r < NFIT; r++) {
            double f = A[r][c] / A[c][c];
            for (int j = c; j < NFIT; j++)
                A[r][j] -= f * A[c][j];
            b[r] -= f * b[c];
        }
    }
    for (int c = NFIT - 1; c >= 0; c--) {
        double s = b[c];
        for (int j = c + 1; j < NFIT; j++)
            s -= A[c][j] * x[j];
        x[c] = s / A[c][c];
    }
    return 1;
}

/* Levenberg-Marquardt on the MFU residuals (predicted - published) with a
 * forward-difference Jacobian, box bounds by clamping, a fixed start and a
 * fixed iteration cap: deterministic. */
double llmt__calib_fit(const llmt_calib_run *runs, int n, int skip,
                       llmt_plan_consts *out)
{
    double x[NFIT];
    memcpy(x, x0, sizeof x);
    int m = 0;
    for (int i = 0; i < n; i++)
        m += runs[i].check && i != skip;
    *out = llmt__plan_consts_default;
    if (m == 0)
        return 0;
    double *r0 = malloc(sizeof(double) * (size_t)m * (NFIT + 1));
    if (!r0)
        return -1;
    double *J = r0 + m;
    double f = sse(runs, n, skip, x, r0), lambda = 1e-3;
    for (int it = 0; it < 100; it++) {
        for (int j = 0; j < NFIT; j++) {
            double xs[NFIT];
            memcpy(xs, x, sizeof xs);
            double h = 1e-4 * (fabs(x[j]) + 1e-2);
            if (xs[j] + h > hi[j])
                h = -h;
            xs[j] += h;
            sse(runs, n, skip, xs, J + (size_t)j * m);
            for (int i = 0; i < m; i++)
                J[(size_t)j * m + i] = (J[(size_t)j * m + i] - r0[i]) / h;
        }
        double A[NFIT][NFIT] = {{0}}, g[NFIT] = {0};
        for (int a = 0; a < NFIT; a++) {
            for (int i = 0; i < m; i++)
                g[a] += J[(size_t)a * m + i] * r0[i];
            for (int b = 0; b < NFIT; b++)
                for (int i = 0; i < m; i++)
                    A[a][b] += J[(size_t)a * m + i] * J[(size_t)b * m + i];
        }
        int improved = 0;
        for (int tries = 0; tries < 16 && !improved; tries++) {
            double M[NFIT][NFIT], rhs[NFIT], dx[NFIT];
            for (int a = 0; a < NFIT; a++) {
                for (int b = 0; b < NFIT; b++)
                    M[a][b] = A[a][b];
                M[a][a] += lambda * (A[a][a] + 1e-9);
                rhs[a] = -g[a];
            }
            if (!solve(M, rhs, dx)) {
                lambda *= 10;
                continue;
            }
            double xn[NFIT];
            for (int j = 0; j < NFIT; j++)
                xn[j] = fmin(hi[j], fmax(lo[j], x[j] + dx[j]));
            double fn = sse(runs, n, skip, xn, NULL);
            if (fn < f * (1 - 1e-12)) {
                memcpy(x, xn, sizeof x);
                f = sse(runs, n, skip, x, r0);
                lambda = fmax(lambda / 10, 1e-12);
                improved = 1;
            } else {
                lambda *= 10;
            }
        }
        if (!improved)
            break;
    }
    free(r0);
    put(out, x);
    return sqrt(f / m);
}

static int divides(int64_t a, int64_t b) { return a > 0 && b % a == 0; }

llmt_status llmt__plan_rank_layout(llmt_context *ctx, const llmt_spec *spec, int32_t world,
                                   const llmt_plan_consts *k, const llmt_plan_sw *sw,
                                   llmt_plan_rank *out)
{
    llmt_err *err = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(err, "plan: rank", spec);
    LLMT__NONNULL(err, "plan: rank", out);
    memset(out, 0, sizeof *out);
    if (!k)
        k = &llmt__plan_consts_default;
    if (!sw)
        sw = &llmt__plan_sw_default;
    const int allow_cp = sw->allow_cp;
    llmt_plan_estimate e;
    double terms[LLMT_PLAN_NTERMS];
    llmt__plan_estimate_x(spec, world, k, sw, &e, terms);
    llmt__plan_to_cand(&e, terms, &out->published);
    const double cap = 0.95 * e.mem_capacity;
    out->published_fits = e.mem_total <= cap;
    double tpub = e.step_time_s;
    llmt__plan_splits *splits = calloc(1, sizeof *splits);
    if (!splits)
        return llmt__err_set(err, LLMT_ERR_OUT_OF_MEMORY, "plan: rank: no memory");
    llmt_spec w = *spec;
    const int64_t W = world, L = spec->model.layers, S = spec->model.seq_len;
    const int64_t E = spec->model.moe.experts, G = spec->batch.global;
    int64_t max_tp = spec->hardware.gpus_per_node;
    int better = 0, layouts = 0;
    double best_t = INFINITY;
    const int64_t micros[] = {1, 2, 4, 8, spec->batch.micro};
    for (int64_t tp = 1; tp <= max_tp && tp <= W; tp++) {
        if (!divides(tp, W) || spec->model.heads % tp || spec->model.kv_heads % tp ||
            spec->model.ffn % tp)
            continue;
        for (int64_t cp = 1; cp * tp <= W; cp++) {
            if (!divides(cp, W / tp) || (cp > 1 && (S % (2 * cp) || !allow_cp)))
                continue;
            for (int64_t pp = 1; pp * cp * tp <= W && pp <= L; pp++) {
                if (!divides(pp, W / (tp * cp)))
                    continue;
                int64_t dp = W / (tp * cp * pp);
                if (G % dp)
                    continue;
                int64_t per = G / dp;
                for (int64_t ep = 1; ep <= (E > 0 ? E : 1); ep++) {
                    if (E > 0 ? (E % ep || dp % ep) : ep > 1)
                        continue;
                    int same = tp == spec->parallelism.tp && cp == spec->parallelism.cp &&
                               pp == spec->parallelism.pp && ep == spec->parallelism.ep;
                    double tbest = INFINITY;
                    llmt_plan_cand cbest = {0};
                    for (int mi = 0; mi < 5; mi++) {
                        int64_t micro = micros[mi];
                        if (per % micro || (mi == 4 && micro <= 8 && (micro & (micro - 1)) == 0))
                            continue;
                        int64_t accum = per / micro;
                        for (int64_t v = 1; v <= 8; v++) {
                            /* the published frameworks' rule (Megatron-LM's
                             * interleaving wanted layers % (pp v) == 0): a
                             * layout is ranked among those they could run */
                            if (v > 1 && (pp < 2 || L % (pp * v) || accum % pp))
                                continue;
                            w.parallelism.tp = tp;
                            w.parallelism.cp = cp;
                            w.parallelism.pp = pp;
                            w.parallelism.dp = dp;
                            w.parallelism.ep = ep;
                            w.parallelism.virtual_stages = v;
                            w.parallelism.sequence_parallel =
                                tp > 1 && spec->parallelism.sequence_parallel;
                            w.batch.micro = micro;
                            w.batch.grad_accum = accum;
                            llmt__plan_set_stages(&w, spec, splits);
                            llmt__plan_estimate_x(&w, (int32_t)W, k, sw, &e, terms);
                            if (e.mem_total > cap || e.step_time_s >= tbest)
                                continue;
                            tbest = e.step_time_s;
                            llmt__plan_to_cand(&e, terms, &cbest);
                        }
                    }
                    if (same || !isfinite(tbest))
                        continue;
                    layouts++;
                    if (tbest < tpub * (1 - 1e-4))
                        better++;
                    if (tbest < best_t) {
                        best_t = tbest;
                        out->best = cbest;
                    }
                }
            }
        }
    }
    llmt__plan_splits_free(splits);
    free(splits);
    out->rank = better + 1;
    out->layouts = layouts + 1;
    if (!isfinite(best_t) || out->published.step_time_s < best_t)
        out->best = out->published;
    return LLMT_OK;
}
