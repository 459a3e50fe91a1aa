/* llmtrain report RUN_DIR: one self-contained HTML page (inline SVG, no
 * script, no external file) from what a run wrote: metrics.jsonl of every
 * rank (losses, perf lines, events, the planner's prediction), run.jsonl
 * (the run-level split). Plots: loss and validation loss, realized MFU,
 * tokens/s, a per-rank step-time heatmap, the time split as stacked bars,
 * and the run's events on the step axis; the planner's predicted step
 * time, memory and MFU beside the measured ones. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

#define CMD "report"
#define MAXR 64

typedef struct series {
    double *x, *y;
    int n, cap;
} series;

/* A point at step x. metrics.jsonl is appended across resumes and
 * rollbacks: a step seen again replaces the earlier run of it and of the
 * steps after it (that history was abandoned), as the loss plot and
 * llmtrain launch's goodput read it; keeping both drew the lines back
 * and forth and counted abandoned steps in the medians. */
static void add(series *s, double x, double y)
{
    if (!isfinite(x) || !isfinite(y))
        return;
    while (s->n > 0 && s->x[s->n - 1] >= x)
        s->n--;
    if (s->n == s->cap) {
        int nc = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, (size_t)nc * sizeof *nx);
        double *ny = nx ? realloc(s->y, (size_t)nc * sizeof *ny) : NULL;
        if (!nx || !ny) {
            if (nx)
                s->x = nx;
            return;
        }
        s->x = nx;
        s->y = ny;
        s->cap = nc;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

static double num(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static int is_event(const char *line, const char *ev)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"event\":\"%s\"", ev);
    return strstr(line, pat) != NULL;
}

enum { P_COMPUTE, P_OPT, P_COMM, P_DATA, P_CKPT, P_OTHER, P_UNACC, NPART };
static const char *const part_names[NPART] = {
    "compute", "optimizer", "comm (exposed)", "data", "checkpoint", "other", "unaccounted"};
static const char *const part_colors[NPART] = {"#4e79a7", "#59a14f", "#e15759", "#f28e2b",
                                               "#b07aa1", "#9c755f", "#bab0ac"};

typedef struct run {
    series loss, val, mfu, tps, parts[NPART];
    series wall[MAXR];
    int ranks;     /* read and drawn: the first MAXR */
    int ranks_all; /* rank directories with metrics, MAXR and beyond */
    struct {
        double step;
        char what[32];
    } ev[512];
    int nev, nev_dropped; /* events past the list's 512 places: counted */
    double plan_step, plan_mfu, plan_mem, plan_tps, peak;
    double flops, world; /* model FLOPs per step and ranks (calibration line) */
    double mem_peak;
    char hw[64];
} run;

static void event(run *r, double step, const char *what)
{
    if (r->nev < 512 && isfinite(step)) {
        r->ev[r->nev].step = step;
        snprintf(r->ev[r->nev].what, sizeof r->ev[r->nev].what, "%s", what);
        r->nev++;
    } else if (isfinite(step)) {
        r->nev_dropped++;
    }
}

/* Lines written every step or every check that found nothing (MoE and
 * pipeline statistics, a passed SDC check): not events. As markers they
 * hid the real ones and filled the list's 512 places. */
static int routine(const char *line)
{
    return is_event(line, "moe") || is_event(line, "pp") ||
           (is_event(line, "sdc") && strstr(line, "\"ok\":true"));
}

static int read_rank(run *r, const char *path, int rank)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        double step = num(line, "step");
        if (is_event(line, "perf")) {
            double w = num(line, "wall_s");
            add(&r->wall[rank], step, w);
            if (rank)
                continue;
            add(&r->mfu, step, num(line, "mfu"));
            add(&r->tps, step, num(line, "tokens_per_s"));
            double comm = 0;
            const char *c = strstr(line, "\"comm_s\":{");
            if (c)
                for (const char *g = c; (g = strchr(g, ':')) && g < strchr(c, '}'); g++)
                    comm += strtod(g + 1, NULL);
            double v[NPART] = {
                num(line, "compute_s"),    num(line, "optimizer_s"), comm,
                num(line, "data_s"),       num(line, "ckpt_s"),      num(line, "other_s"),
                num(line, "unaccounted_s")};
            for (int k = 0; k < NPART; k++)
                add(&r->parts[k], step, v[k]);
            double mp = num(line, "mem_peak");
            if (mp > r->mem_peak)
                r->mem_peak = mp;
        } else if (rank) {
            continue;
        } else if (is_event(line, "plan")) {
            r->plan_step = num(line, "step_time_s");
            r->plan_mfu = num(line, "mfu");
            r->plan_mem = num(line, "mem_total");
            r->plan_tps = num(line, "tokens_per_s");
            const char *h = strstr(line, "\"hardware\":\"");
            if (h)
                sscanf(h + 12, "%63[^\"]", r->hw);
        } else if (is_event(line, "calibration")) {
            r->peak = num(line, "peak_flops");
            r->flops = num(line, "model_flops_per_step");
            r->world = num(line, "world");
        } else if (strstr(line, "\"event\":")) {
            char what[32] = "";
            sscanf(strstr(line, "\"event\":\"") + 9, "%31[^\"]", what);
            if (is_event(line, "goodput") && !strstr(line, "\"when\":\"save\""))
                continue;
            if (routine(line))
                continue;
            event(r, step, is_event(line, "goodput") ? "checkpoint" : what);
        } else if (strstr(line, "\"val_loss\":")) {
            add(&r->val, step, num(line, "val_loss"));
        } else if (strstr(line, "\"loss\":")) {
            add(&r->loss, step, num(line, "loss"));
        }
    }
    free(line);
    fclose(f);
    return 1;
}

static double median(const series *s)
{
    if (!s->n)
        return NAN;
    double *v = malloc((size_t)s->n * sizeof *v);
    if (!v)
        return NAN;
    memcpy(v, s->y, (size_t)s->n * sizeof *v);
    for (int i = 1; i < s->n; i++)
        for (int k = i; k > 0 && v[k - 1] > v[k]; k--) {
            double t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    double m = s->n % 2 ? v[s->n / 2] : 0.5 * (v[s->n / 2 - 1] + v[s->n / 2]);
    free(v);
    return m;
}

#define W 640
#define HH 240
#define ML 60
#define MB 30

static void range(const series *const *s, int n, double *x0, double *x1, double *y0, double *y1)
{
    *x0 = *y0 = INFINITY;
    *x1 = *y1 = -INFINITY;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < s[k]->n; i++) {
            *x0 = fmin(*x0, s[k]->x[i]);
            *x1 = fmax(*x1, s[k]->x[i]);
            *y0 = fmin(*y0, s[k]->y[i]);
            *y1 = fmax(*y1, s[k]->y[i]);
        }
    if (!isfinite(*x0))
        *x0 = 0, *x1 = 1, *y0 = 0, *y1 = 1;
    if (*x1 <= *x0)
        *x1 = *x0 + 1;
    if (*y1 <= *y0)
        *y1 = *y0 + (*y0 ? fabs(*y0) * 0.1 : 1);
}

static void axes(FILE *o, const char *id, const char *title, double x0, double x1, double y0,
                 double y1)
{
    fprintf(o,
            "<h2>%s</h2>\n<svg id=\"%s\" class=\"plot\" width=\"%d\" height=\"%d\" "
            "xmlns=\"http://www.w3.org/2000/svg\">\n",
            title, id, W, HH);
    fprintf(o,
            "<rect x=\"%d\" y=\"10\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" "
            "stroke=\"#888\"/>\n",
            ML, W - ML - 10, HH - MB - 10);
    for (int t = 0; t <= 4; t++) {
        double yv = y0 + (y1 - y0) * t / 4, py = HH - MB - (HH - MB - 10) * t / 4.0;
        fprintf(o,
                "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%.3g</text>\n",
                ML - 4, py + 3, yv);
        double xv = x0 + (x1 - x0) * t / 4, px = ML + (W - ML - 10) * t / 4.0;
        fprintf(
            o,
            "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%.4g</text>\n",
            px, HH - MB + 14, xv);
    }
    fprintf(o, "<text x=\"%d\" y=\"%d\" font-size=\"10\">step</text>\n", W - 40, HH - 2);
}

static double X(double v, double x0, double x1)
{
    return ML + (W - ML - 10) * (v - x0) / (x1 - x0);
}
static double Y(double v, double y0, double y1)
{
    return HH - MB - (HH - MB - 10) * (v - y0) / (y1 - y0);
}

static void events(FILE *o, const run *r, double x0, double x1)
{
    for (int i = 0; i < r->nev; i++) {
        double px = X(r->ev[i].step, x0, x1);
        if (px < ML || px > W - 10)
            continue;
        fprintf(o,
                "<line class=\"event\" x1=\"%.1f\" x2=\"%.1f\" y1=\"10\" y2=\"%d\" "
                "stroke=\"#b07aa1\" stroke-dasharray=\"3,3\"><title>%s at step %.0f</title>"
                "</line>\n",
                px, px, HH - MB, r->ev[i].what, r->ev[i].step);
    }
}

static void line_plot(FILE *o, const run *r, const char *id, const char *title,
                      const series *const *s, const char *const *names,
                      const char *const *colors, int n)
{
    double x0, x1, y0, y1;
    range(s, n, &x0, &x1, &y0, &y1);
    axes(o, id, title, x0, x1, y0, y1);
    events(o, r, x0, x1);
    for (int k = 0; k < n; k++) {
        if (!s[k]->n)
            continue;
        fprintf(o,
                "<polyline class=\"series\" data-name=\"%s\" fill=\"none\" stroke=\"%s\" "
                "stroke-width=\"1.5\" points=\"",
                names[k], colors[k]);
        for (int i = 0; i < s[k]->n; i++)
            fprintf(o, "%.1f,%.1f ", X(s[k]->x[i], x0, x1), Y(s[k]->y[i], y0, y1));
        fprintf(o, "\"/>\n<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"%s\">%s</text>\n",
                ML + 8, 24 + 13 * k, colors[k], names[k]);
    }
    fprintf(o, "</svg>\n");
}

static void heatmap(FILE *o, const run *r)
{
    const series *all[MAXR];
    for (int k = 0; k < r->ranks; k++)
        all[k] = &r->wall[k];
    double x0, x1, y0, y1;
    range(all, r->ranks, &x0, &x1, &y0, &y1);
    int rows = r->ranks > 0 ? r->ranks : 1;
    double rh = fmin(24, (HH - MB - 10.0) / rows);
    char part[96] = "";
    if (r->ranks_all > r->ranks)
        snprintf(part, sizeof part, ", the first %d of %d ranks", r->ranks, r->ranks_all);
    fprintf(o,
            "<h2>Step time per rank (heatmap: %.3g s white .. %.3g s red)%s</h2>\n"
            "<svg id=\"heatmap\" class=\"plot\" width=\"%d\" height=\"%.0f\" "
            "xmlns=\"http://www.w3.org/2000/svg\">\n",
            y0, y1, part, W, rows * rh + 40);
    double cw = (W - ML - 10) / (x1 - x0 + 1);
    for (int k = 0; k < r->ranks; k++) {
        fprintf(
            o,
            "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">rank %d</text>\n",
            ML - 4, 10 + rh * k + rh * 0.7, k);
        for (int i = 0; i < r->wall[k].n; i++) {
            double t = (r->wall[k].y[i] - y0) / (y1 - y0);
            int g = (int)(255 * (1 - t));
            fprintf(o,
                    "<rect class=\"cell\" x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                    "fill=\"rgb(255,%d,%d)\"><title>rank %d step %.0f: %.4f s</title></rect>\n",
                    ML + (r->wall[k].x[i] - x0) * cw, 10 + rh * k, fmax(cw, 0.5), rh, g, g, k,
                    r->wall[k].x[i], r->wall[k].y[i]);
        }
    }
    fprintf(o, "</svg>\n");
}

static void stacked(FILE *o, const run *r)
{
    const series *t = &r->parts[P_COMPUTE];
    int n = t->n;
    double x0 = n ? t->x[0] : 0, x1 = n ? t->x[n - 1] : 1, y1 = 0;
    for (int i = 0; i < n; i++) {
        double sum = 0;
        for (int k = 0; k < NPART; k++)
            sum += i < r->parts[k].n ? fmax(0, r->parts[k].y[i]) : 0;
        y1 = fmax(y1, sum);
    }
    /* half a step of room either side: the bars are centred on their step */
    x0 -= 0.5;
    x1 += 0.5;
    if (y1 <= 0)
        y1 = 1;
    axes(o, "split", "Where the time went (rank 0, seconds per step)", x0, x1, 0, y1);
    double bw = fmax(0.5, (W - ML - 10) / (x1 - x0) * 0.9);
    for (int i = 0; i < n; i++) {
        double base = 0;
        for (int k = 0; k < NPART; k++) {
            double v = i < r->parts[k].n ? fmax(0, r->parts[k].y[i]) : 0;
            fprintf(o,
                    "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.2f\" "
                    "fill=\"%s\"><title>step %.0f %s %.5f s</title></rect>\n",
                    X(t->x[i], x0, x1) - bw / 2, Y(base + v, 0, y1), bw,
                    Y(base, 0, y1) - Y(base + v, 0, y1), part_colors[k], t->x[i], part_names[k],
                    v);
            base += v;
        }
    }
    for (int k = 0; k < NPART; k++)
        fprintf(o, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"%s\">%s</text>\n",
                ML + 8 + 110 * (k % 4), 24 + 13 * (k / 4), part_colors[k], part_names[k]);
    fprintf(o, "</svg>\n");
}

/* The peak the planner's MFU divides by (hardware.peak_tflops), from
 * its own numbers: on the CPU the measured MFU divides by a calibrated
 * GEMM instead, so the two MFUs are only comparable beside their peaks. */
static double plan_peak(const run *r)
{
    double d = r->plan_step * r->plan_mfu * r->world;
    return d > 0 ? r->flops / d : NAN;
}

static int report_usage(const char *why, const char *arg)
{
    if (why)
        fprintf(stderr, "llmtrain report: %s '%s'\n", why, arg);
    fprintf(stderr, "usage: llmtrain report RUN_DIR [--out FILE.html]\n");
    return CLI_USAGE;
}

int cmd_report(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *why = NULL;
        if (!strcmp(argv[i], "--out") && out) /* never the last one silently */
            why = "give --out once; it is repeated at";
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--out"))
            why = "missing the value of";
        else if (argv[i][0] == '-')
            why = "unknown option";
        else if (dir) /* two directories: one report each, never the last silently */
            why = "one RUN_DIR only; unexpected argument";
        else
            dir = argv[i];
        if (why)
            return report_usage(why, argv[i]);
    }
    if (!dir)
        return report_usage(NULL, NULL);
    run *r = calloc(1, sizeof *r);
    if (!r)
        return cli_fail(CMD, "no memory");
    char path[4096], outp[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (!read_rank(r, path, 0)) {
        free(r);
        return cli_fail(CMD, "%s: no metrics.jsonl (is it a run directory of llmtrain train?)",
                        dir);
    }
    r->ranks = 1;
    for (int k = 1; k < MAXR; k++) {
        snprintf(path, sizeof path, "%s/rank-%d/metrics.jsonl", dir, k);
        if (!read_rank(r, path, k))
            break;
        r->ranks = k + 1;
    }
    /* ranks past the MAXR drawn are counted, so that the page never
     * shows a part of the run as all of it */
    r->ranks_all = r->ranks;
    for (struct stat sb; r->ranks == MAXR; r->ranks_all++) {
        snprintf(path, sizeof path, "%s/rank-%d/metrics.jsonl", dir, r->ranks_all);
        if (stat(path, &sb) != 0)
            break;
    }
    snprintf(outp, sizeof outp, "%s", out ? out : "");
    if (!out)
        snprintf(outp, sizeof outp, "%s/report.html", dir);
    FILE *o = fopen(outp, "w");
    if (!o) {
        free(r);
        return cli_fail(CMD, "cannot write %s: %s", outp, strerror(errno));
    }
    double m_step = median(&r->wall[0]), m_mfu = median(&r->mfu), m_tps = median(&r->tps);
    fprintf(o,
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>llmtrain report: "
            "%s</title>\n<style>body{font-family:sans-serif;margin:20px}table{border-"
            "collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:"
            "right}</style></head><body>\n<h1>Run %s</h1>\n",
            dir, dir);
    fprintf(o,
            "<table id=\"plan-vs-measured\"><tr><th></th><th>planner (%s)</th><th>measured "
            "(median, rank 0)</th></tr>\n"
            "<tr><td>step time (s)</td><td>%.4g</td><td>%.4g</td></tr>\n"
            "<tr><td>MFU</td><td>%.4g</td><td>%.4g</td></tr>\n"
            "<tr><td>tokens/s</td><td>%.4g</td><td>%.4g</td></tr>\n"
            "<tr><td>memory per rank (bytes)</td><td>%.4g</td><td>%.4g (peak)</td></tr>\n"
            "<tr><td>peak FLOP/s per device</td><td>%.4g</td><td>%.4g</td></tr>\n"
            "<tr><td>ranks</td><td colspan=\"2\">%d</td></tr></table>\n",
            r->hw, r->plan_step, m_step, r->plan_mfu, m_mfu, r->plan_tps, m_tps, r->plan_mem,
            r->mem_peak, plan_peak(r), r->peak, r->ranks_all);
    const series *ls[2] = {&r->loss, &r->val};
    const char *ln[2] = {"loss", "val_loss"}, *lc[2] = {"#4e79a7", "#e15759"};
    line_plot(o, r, "loss", "Loss and validation loss", ls, ln, lc, 2);
    const series *ms[1] = {&r->mfu};
    const char *mn[1] = {"mfu"}, *mc[1] = {"#59a14f"};
    line_plot(o, r, "mfu", "Realized MFU", ms, mn, mc, 1);
    const series *ts[1] = {&r->tps};
    const char *tn[1] = {"tokens_per_s"}, *tc[1] = {"#f28e2b"};
    line_plot(o, r, "tokens", "Tokens per second (all ranks)", ts, tn, tc, 1);
    heatmap(o, r);
    stacked(o, r);
    fprintf(o, "<h2>Events</h2>\n<ul id=\"events\">\n");
    for (int i = 0; i < r->nev; i++)
        fprintf(o, "<li>step %.0f: %s</li>\n", r->ev[i].step, r->ev[i].what);
    if (r->nev_dropped)
        fprintf(o, "<li>and %d more (metrics.jsonl lists them all)</li>\n", r->nev_dropped);
    fprintf(o, "</ul>\n</body></html>\n");
    int bad = fclose(o) != 0;
    for (int k = 0; k < NPART; k++)
        free(r->parts[k].x), free(r->parts[k].y);
    for (int k = 0; k < MAXR; k++)
        free(r->wall[k].x), free(r->wall[k].y);
    free(r->loss.x), free(r->loss.y), free(r->val.x), free(r->val.y);
    free(r->mfu.x), free(r->mfu.y), free(r->tps.x), free(r->tps.y);
    free(r);
    if (bad)
        return cli_fail(CMD, "cannot write %s", outp);
    printf("report: %s\n", outp);
    return CLI_OK;
}
