/* Timing with warm-up and repeats; results as a table and as JSON. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "llmtrain.h"

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

unsigned bench_rand(unsigned long long *state)
{
    unsigned long long x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return (unsigned)(x >> 32);
}

static int parse_int(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0 || v > 1000000)
        return -1;
    *out = (int)v;
    return 0;
}

int bench_init(bench_ctx *b, const char *suite, int argc, char **argv)
{
    memset(b, 0, sizeof *b);
    b->suite = suite;
    b->warmup = 3;
    b->repeats = 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) {
            b->quick = 1;
            b->warmup = 1;
            b->repeats = 3;
        } else if (!strcmp(a, "--json") && v) {
            b->json_path = v;
            i++;
        } else if (!strcmp(a, "--filter") && v) {
            b->filter = v;
            i++;
        } else if (!strcmp(a, "--warmup") && v && !parse_int(v, &b->warmup)) {
            i++;
        } else if (!strcmp(a, "--repeats") && v && !parse_int(v, &b->repeats) &&
                   b->repeats > 0) {
            i++;
        } else {
            fprintf(stderr,
                    "usage: %s [--json FILE] [--warmup N] [--repeats N] "
                    "[--filter SUBSTRING] [--quick]\n(bad argument '%s')\n",
                    argv[0], a);
            return 2;
        }
    }
    printf("%-40s %8s %12s %12s %12s %14s\n", suite, "repeats", "min", "median",
           "max", "rate");
    return 0;
}

int bench_selected(const bench_ctx *b, const char *name)
{
    return !b->filter || strstr(name, b->filter);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void print_time(double s)
{
    if (s < 1e-6)
        printf(" %10.1fns", s * 1e9);
    else if (s < 1e-3)
        printf(" %10.2fus", s * 1e6);
    else if (s < 1)
        printf(" %10.3fms", s * 1e3);
    else
        printf(" %10.3fs ", s);
}

const bench_result *bench_record(bench_ctx *b, const char *name,
                                 const double *seconds, int n, double items,
                                 const char *unit)
{
    if (b->count >= BENCH_MAX_RESULTS || n <= 0)
        return NULL;
    bench_result *r = &b->results[b->count++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->unit, sizeof r->unit, "%s", unit ? unit : "");
    double *s = malloc(sizeof(double) * (size_t)n);
    if (!s)
        return NULL;
    memcpy(s, seconds, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += s[i];
    r->repeats = n;
    r->min_s = s[0];
    r->max_s = s[n - 1];
    r->median_s = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    r->mean_s = sum / n;
    r->items = items;
    free(s);
    printf("%-40s %8d", r->name, r->repeats);
    print_time(r->min_s);
    print_time(r->median_s);
    print_time(r->max_s);
    if (items > 0 && r->median_s > 0)
        printf(" %10.3g %s/s", items / r->median_s, r->unit);
    printf("\n");
    fflush(stdout);
    return r;
}

const bench_result *bench_run(bench_ctx *b, const char *name, bench_fn fn,
                              void *arg, double items, const char *unit)
{
    if (!bench_selected(b, name))
        return NULL;
    for (int i = 0; i < b->warmup; i++)
        fn(arg);
    double *t = malloc(sizeof(double) * (size_t)b->repeats);
    if (!t)
        return NULL;
    for (int i = 0; i < b->repeats; i++) {
        double t0 = bench_now();
        fn(arg);
        t[i] = bench_now() - t0;
    }
    const bench_result *r = bench_record(b, name, t, b->repeats, items, unit);
    free(t);
    return r;
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

int bench_finish(bench_ctx *b)
{
    if (!b->json_path)
        return 0;
    FILE *f = fopen(b->json_path, "w");
    if (!f) {
        perror(b->json_path);
        return 1;
    }
    struct utsname u;
    uname(&u);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    fprintf(f, "{\n  \"suite\": ");
    json_string(f, b->suite);
    fprintf(f, ",\n  \"library\": \"%s\",\n  \"features\": %llu,\n",
            llmt_version(), (unsigned long long)llmt_build_features());
    fprintf(f, "  \"machine\": {\"host\": ");
    json_string(f, host);
    fprintf(f, ", \"kernel\": ");
    json_string(f, u.release);
    fprintf(f, ", \"cpus\": %ld},\n  \"results\": [\n", sysconf(_SC_NPROCESSORS_ONLN));
    for (int i = 0; i < b->count; i++) {
        const bench_result *r = &b->results[i];
        fprintf(f, "    {\"name\": ");
        json_string(f, r->name);
        fprintf(f, ", \"repeats\": %d, \"min_s\": %.9g, \"median_s\": %.9g, "
                   "\"max_s\": %.9g, \"mean_s\": %.9g, \"items\": %.9g, \"unit\": ",
                r->repeats, r->min_s, r->median_s, r->max_s, r->mean_s, r->items);
        json_string(f, r->unit);
        fprintf(f, "}%s\n", i + 1 < b->count ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    return fclose(f) ? 1 : 0;
}
