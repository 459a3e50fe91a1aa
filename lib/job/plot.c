/* The loss plot: a self-contained SVG (train and validation loss against
 * the step, the corpus's unigram entropy as a dashed line) drawn from
 * metrics.jsonl. The file is appended across resumes and rollbacks, so a
 * step may have several lines: the latest one is the run's, and a step
 * trained again drops what the abandoned history had after it (a resume
 * from step 4 of a run that had reached 11 and stops at 10 must not keep
 * step 11). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/job.h"

typedef struct point {
    int64_t step;
    double v;
} point;

typedef struct series {
    point *p;
    size_t n;
} series;

/* Reads a number after "key": in one JSONL line. */
static int json_num(const char *line, const char *key, double *out)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        return 0;
    char *end = NULL;
    double v = strtod(p + strlen(pat), &end);
    if (end == p + strlen(pat))
        return 0;
    *out = v;
    return 1;
}

/* The latest value per step of steps 0..max: NaN where none. */
static void compact(const double *v, int64_t max, series *s)
{
    for (int64_t i = 0; i <= max; i++)
        if (!isnan(v[i])) {
            s->p[s->n].step = i;
            s->p[s->n].v = v[i];
            s->n++;
        }
}

static double nice_step(double range, int target)
{
    double raw = range / target, mag = pow(10.0, floor(log10(raw)));
    double r = raw / mag;
    return mag * (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10);
}

static int write_svg(const char *path, const char *title, const series *tr, const series *va,
                     double entropy)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    const double W = 800, H = 480, L = 70, R = 20, T = 40, Bm = 50;
    int64_t xmax = 1;
    double ymin = INFINITY, ymax = -INFINITY;
    const series *all[2] = {tr, va};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < all[k]->n; i++) {
            if (all[k]->p[i].step > xmax)
                xmax = all[k]->p[i].step;
            if (all[k]->p[i].v < ymin)
                ymin = all[k]->p[i].v;
            if (all[k]->p[i].v > ymax)
                ymax = all[k]->p[i].v;
        }
    if (entropy > 0 && entropy > ymax)
        ymax = entropy;
    if (!(ymin < ymax)) {
        ymin = 0;
        ymax = ymax > 0 && isfinite(ymax) ? ymax : 1;
    }
    ymin = floor(ymin);
    ymax = ceil(ymax);
    double pw = W - L - R, ph = H - T - Bm;
#define XS(s) (L + pw * (double)(s) / (double)xmax)
#define YS(v) (T + ph * (1.0 - ((v)-ymin) / (ymax - ymin)))
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
            "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f,
            "<text x=\"%.0f\" y=\"22\" font-size=\"15\" "
            "text-anchor=\"middle\">%s: loss (nats/token)</text>\n",
            W / 2, title);
    /* grid and ticks */
    double ys = nice_step(ymax - ymin, 6);
    for (double y = ceil(ymin / ys) * ys; y <= ymax + 1e-9; y += ys) {
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"#ddd\"/>\n",
                L, YS(y), W - R, YS(y));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 6,
                YS(y) + 4, y);
    }
    double xs = nice_step((double)xmax, 8);
    for (double x = 0; x <= (double)xmax + 1e-9; x += xs) {
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"#eee\"/>\n",
                XS(x), T, XS(x), T + ph);
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g"
                "</text>\n",
                XS(x), T + ph + 18, x);
    }
    fprintf(f,
            "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
            "fill=\"none\" stroke=\"#333\"/>\n",
            L, T, pw, ph);
    fprintf(f,
            "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step"
            "</text>\n",
            L + pw / 2, H - 12);
    if (entropy > 0) {
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"#888\" stroke-dasharray=\"6,4\"/>\n",
                L, YS(entropy), W - R, YS(entropy));
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
                "fill=\"#666\">unigram entropy %.3f</text>\n",
                W - R - 4, YS(entropy) - 5, entropy);
    }
    static const char *const color[2] = {"#1f77b4", "#d62728"};
    static const char *const label[2] = {"train", "validation"};
    for (int k = 0; k < 2; k++) {
        const series *s = all[k];
        if (!s->n)
            continue;
        fprintf(f,
                "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" "
                "points=\"",
                color[k], k ? "2" : "1.2");
        for (size_t i = 0; i < s->n; i++)
            fprintf(f, "%.1f,%.1f ", XS(s->p[i].step), YS(s->p[i].v));
        fprintf(f, "\"/>\n");
        if (k == 1)
            for (size_t i = 0; i < s->n; i++)
                fprintf(f,
                        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" "
                        "fill=\"%s\"/>\n",
                        XS(s->p[i].step), YS(s->p[i].v), color[k]);
        fprintf(f,
                "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
                "stroke=\"%s\" stroke-width=\"2\"/>\n<text x=\"%.0f\" "
                "y=\"%.0f\">%s</text>\n",
                W - R - 150, T + 18 + 18.0 * k, W - R - 125, T + 18 + 18.0 * k, color[k],
                W - R - 118, T + 22 + 18.0 * k, label[k]);
    }
#undef XS
#undef YS
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? 0 : -1;
}

llmt_status llmt__job_plot(llmt_job *j)
{
    if (j->jsonl)
        fflush(j->jsonl);
    int64_t max = j->steps;
    double *tl = malloc((size_t)(max + 1) * sizeof *tl);
    double *vl = malloc((size_t)(max + 1) * sizeof *vl);
    series tr = {0}, va = {0};
    tr.p = malloc((size_t)(max + 1) * sizeof *tr.p);
    va.p = malloc((size_t)(max + 1) * sizeof *va.p);
    llmt_status st = LLMT_OK;
    if (!tl || !vl || !tr.p || !va.p) {
        st = llmt__err_set(&j->err, LLMT_ERR_OUT_OF_MEMORY, "plot: no memory");
        goto done;
    }
    for (int64_t i = 0; i <= max; i++)
        tl[i] = vl[i] = NAN;
    FILE *f = fopen(j->jsonl_path, "r");
    if (f) {
        /* whole lines of any length: an SDC or straggler line of many
         * ranks runs to hundreds of kB, and a piece of one read as a
         * line of its own could look like a step's */
        char *line = NULL;
        size_t cap = 0;
        int64_t hi = -1; /* the last trained step read */
        while (getline(&line, &cap, f) > 0) {
            double step, v;
            if (strstr(line, "\"event\"") || !json_num(line, "step", &step) || step < 0 ||
                step > (double)max)
                continue;
            int64_t at = (int64_t)step;
            if (json_num(line, "val_loss", &v)) {
                vl[at] = v;
            } else if (json_num(line, "loss", &v)) {
                /* trained again: the old history from here on is gone (its
                 * validation at this step comes after this line) */
                for (int64_t i = at; i <= hi; i++) {
                    if (i > at)
                        tl[i] = NAN;
                    vl[i] = NAN;
                }
                tl[at] = v;
                hi = at;
            }
        }
        free(line);
        fclose(f);
    }
    compact(tl, max, &tr);
    compact(vl, max, &va);
    if (write_svg(j->plot_path, j->name, &tr, &va, j->data.unigram_entropy) != 0)
        st = llmt__err_set(&j->err, LLMT_ERR_IO, "metrics.plot: cannot write %s", j->plot_path);
done:
    free(tl);
    free(vl);
    free(tr.p);
    free(va.p);
    return st;
}
