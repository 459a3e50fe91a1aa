/* The job's metric outputs opened with it: metrics.jsonl and the
 * Prometheus endpoint. metrics.jsonl: one JSON object a line, appended and never rewritten.
 * A resumed run (or a rollback) writes the steps after its checkpoint
 * again; readers take the latest line per step (the plot does). Losing
 * lines of a run that was interrupted and resumed hides exactly the
 * evidence someone debugging it needs, so nothing is ever truncated. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/job.h"

/* metrics.http "[HOST:]PORT": the Prometheus endpoint (lib/obs/http.c),
 * started with the job so that a port in use fails its creation. Rank r
 * listens on PORT + its local rank (ranks sharing a host need ports of
 * their own); the address it got is written to RUN_DIR/metrics.http for
 * scrapers and scripts, which matters with PORT 0 (any free port). */
static llmt_status serve(llmt_job *j)
{
    const char *v = j->spec->metrics.http;
    if (!v)
        return LLMT_OK;
    char host[64] = "127.0.0.1";
    const char *colon = strrchr(v, ':'), *ps = colon ? colon + 1 : v;
    size_t hl = colon ? (size_t)(colon - v) : 0;
    char *end = NULL;
    long port = *ps >= '0' && *ps <= '9' ? strtol(ps, &end, 10) : -1;
    if (hl >= sizeof host || !end || *end || port < 0 || port > 65535)
        return llmt__err_set(&j->err, LLMT_ERR_SPEC,
                             "metrics.http: '%s' is not [HOST:]PORT (an IPv4 address and a "
                             "port 0..65535, e.g. \"127.0.0.1:9400\")",
                             v);
    if (hl) {
        memcpy(host, v, hl);
        host[hl] = 0;
    }
    if (port > 0)
        port += j->local_rank > 0 ? j->local_rank : 0;
    if (port > 65535)
        return llmt__err_set(&j->err, LLMT_ERR_SPEC,
                             "metrics.http: port %ld (PORT + local rank %d) is above 65535",
                             port, (int)j->local_rank);
    char err[256];
    int bound = 0;
    llmt_status s = llmt__obs_serve(j->obs, host, (int)port, j->rank, &bound, err, sizeof err);
    if (s != LLMT_OK)
        return llmt__err_set(&j->err, s, "metrics.http: %s", err);
    char url[128], path[JOB_PATH_MAX + 32];
    snprintf(url, sizeof url, "http://%s:%d/metrics", host, bound);
    snprintf(path, sizeof path, "%s/metrics.http", j->run_dir);
    FILE *f = fopen(path, "w");
    int bad = !f || fprintf(f, "%s\n", url) < 0;
    if (f)
        bad |= fclose(f) != 0;
    if (bad)
        return llmt__err_set(&j->err, LLMT_ERR_IO, "metrics.http: write %s: %s", path,
                             strerror(errno));
    llmt__log(j->ctx, LLMT_LOG_INFO, "job", "rank %d serves Prometheus metrics at %s",
              (int)j->rank, url);
    return LLMT_OK;
}

llmt_status llmt__job_metrics_open(llmt_job *j)
{
    j->jsonl = fopen(j->jsonl_path, "a");
    if (!j->jsonl)
        return llmt__err_set(&j->err, LLMT_ERR_IO, "metrics.jsonl: open %s: %s", j->jsonl_path,
                             strerror(errno));
    return serve(j);
}

void llmt__job_metrics_line(llmt_job *j, const char *fmt, ...)
{
    if (!j->jsonl)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(j->jsonl, fmt, ap);
    va_end(ap);
    fputc('\n', j->jsonl);
    fflush(j->jsonl);
}
