/* Observability of llmt_job (doc/observability.md), through the public ABI:
 * - model FLOPs per step against a count made here from the shape
 *   (6 N tokens + attention) within 1%, realized MFU = that / wall /
 *   the calibrated peak (the calibration line of metrics.jsonl);
 * - the split adds up to the step's wall time within 5%;
 * - 2 in-process ranks, rank 1 slowed on purpose (LLMT_FAULT slow): rank
 *   0 shows the wait in its dp collectives, run.jsonl names rank 1;
 * - the trace validates against the trace-event format (phases, pids,
 *   tids, monotonic timestamps) and has one event per collective, its
 *   sequence numbers consecutive;
 * - the Prometheus textfile parses as the text exposition format and
 *   carries the step's values; so does the HTTP endpoint (metrics.http)
 *   over loopback, step after step (see check_http).
 * usage: test_obs CORPUS_DIR */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"
#include "files.h"

#define L 2
#define H 64
#define FF 256
#define V 320
#define S 64
#define MICRO 2
#define ACCUM 2

static char tmp[512], corpus[512];

static char *spec_json(int steps, const char *extra)
{
    static char b[4096];
    snprintf(
        b, sizeof b,
        "{\"name\": \"obs\", \"model\": {\"arch\": \"gpt2\", \"layers\": %d, \"hidden\": %d,"
        " \"heads\": 4, \"ffn\": %d, \"vocab\": %d, \"seq_len\": %d},"
        " \"batch\": {\"micro\": %d, \"grad_accum\": %d}, \"optimizer\": {\"lr\": 1e-3},"
        " \"train\": {\"steps\": %d, \"seed\": 3, \"eval_interval\": 3, \"eval_batches\": 1,"
        " \"threads\": 1}, \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
        " \"checkpoint\": {\"interval\": 4}, \"hardware\": {\"gpu\": \"cpu\"}%s}",
        L, H, FF, V, S, MICRO, ACCUM, steps, corpus, extra);
    return b;
}

/* The value of "key": in the first line of path containing `has`. */
static double line_value(const char *path, const char *has, const char *key)
{
    char *t = test_slurp(path, NULL);
    double v = NAN;
    if (!t)
        return v;
    char *ln = strstr(t, has);
    if (ln) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"%s\":", key);
        char *k = strstr(ln, pat);
        char *eol = strchr(ln, '\n');
        if (k && (!eol || k < eol))
            v = strtod(k + strlen(pat), NULL);
    }
    free(t);
    return v;
}

/* ---- the trace-event format */
static int check_trace(const char *path, int pid, int expect_comm)
{
    char *t = test_slurp(path, NULL);
    CHECK(t != NULL);
    if (!t)
        return -1;
    cJSON *a = cJSON_Parse(t);
    free(t);
    CHECK(a && cJSON_IsArray(a));
    if (!a)
        return -1;
    double last = -1;
    int nx = 0, nops = 0, nsteps = 0, ncomm = 0, bad = 0;
    long long prev_seq = -1;
    cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
        cJSON *p = cJSON_GetObjectItem(e, "pid"), *ti = cJSON_GetObjectItem(e, "tid");
        cJSON *ts = cJSON_GetObjectItem(e, "ts"), *nm = cJSON_GetObjectItem(e, "name");
        if (!ph || !cJSON_IsNumber(p) || !cJSON_IsNumber(ti) || !cJSON_IsString(nm) ||
            p->valueint != pid) {
            bad++;
            continue;
        }
        if (!strcmp(ph, "M"))
            continue;
        if (strcmp(ph, "X") || !cJSON_IsNumber(ts)) {
            bad++;
            continue;
        }
        cJSON *dur = cJSON_GetObjectItem(e, "dur");
        if (!cJSON_IsNumber(dur) || dur->valuedouble < 0 || ts->valuedouble < last)
            bad++;
        last = ts->valuedouble;
        nx++;
        const char *cat = cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat"));
        if (cat && !strcmp(cat, "op"))
            nops++;
        if (!strcmp(nm->valuestring, "step"))
            nsteps++;
        if (cat && !strcmp(cat, "comm")) {
            cJSON *seq = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "seq");
            CHECK(cJSON_IsNumber(seq));
            if (cJSON_IsNumber(seq)) {
                long long s = (long long)seq->valuedouble;
                /* one event per collective: no seq twice, none skipped */
                if (prev_seq >= 0 && s != prev_seq + 1) {
                    fprintf(stderr, "trace %s: seq %lld after %lld\n", path, s, prev_seq);
                    bad++;
                }
                prev_seq = s;
            }
            ncomm++;
        }
    }
    cJSON_Delete(a);
    fprintf(stderr, "trace %s: %d events, %d ops, %d steps, %d collectives, %d bad\n", path, nx,
            nops, nsteps, ncomm, bad);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(nsteps, 2);
    CHECK(nops > 20);
    if (expect_comm)
        CHECK(ncomm >= 2);
    else
        CHECK_EQ_INT(ncomm, 0);
    return ncomm;
}

/* ---- the Prometheus text exposition format: the text t (modified) of
 * the step p; returns llmtrain_steps_total */
static double check_prom_text(char *t, const llmt_job_perf *p)
{
    int samples = 0, typed = 0, bad = 0, groups = 0;
    double step_s = NAN, mfu = NAN, steps = NAN, step = NAN;
    char *save = NULL;
    for (char *ln = strtok_r(t, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(ln, "# TYPE ", 7)) {
            char name[128], kind[32];
            if (sscanf(ln + 7, "%127s %31s", name, kind) != 2 ||
                (strcmp(kind, "gauge") && strcmp(kind, "counter")))
                bad++;
            typed++;
            continue;
        }
        if (ln[0] == '#')
            continue;
        /* name{label="v",...} value */
        char *c = ln;
        if (!(isalpha((unsigned char)*c) || *c == '_' || *c == ':'))
            bad++;
        while (isalnum((unsigned char)*c) || *c == '_' || *c == ':')
            c++;
        size_t nlen = (size_t)(c - ln);
        if (*c == '{') {
            char *end = strchr(c, '}');
            if (!end || !strstr(c, "rank=\"0\"")) {
                bad++;
                continue;
            }
            if (strstr(c, "group=\"") && strstr(c, "group=\"") < end)
                groups++;
            c = end + 1;
        }
        char *num_end;
        double v = strtod(c, &num_end);
        if (num_end == c || *num_end) {
            bad++;
            continue;
        }
        samples++;
        if (nlen == strlen("llmtrain_step_seconds") &&
            !strncmp(ln, "llmtrain_step_seconds", nlen))
            step_s = v;
        if (nlen == strlen("llmtrain_mfu_ratio") && !strncmp(ln, "llmtrain_mfu_ratio", nlen))
            mfu = v;
        if (nlen == strlen("llmtrain_steps_total") &&
            !strncmp(ln, "llmtrain_steps_total", nlen))
            steps = v;
        if (nlen == strlen("llmtrain_step") && !strncmp(ln, "llmtrain_step", nlen))
            step = v;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(typed >= 10 && samples >= 15);
    CHECK_EQ_INT(groups, 5);
    CHECK(fabs(step_s - p->wall_s) <= 1e-6 * p->wall_s + 1e-9);
    CHECK(fabs(mfu - p->mfu) <= 1e-6 * p->mfu + 1e-12);
    CHECK(step == (double)p->step);
    return steps;
}

/* the textfile's text; returns llmtrain_steps_total */
static double check_prom(const char *path, const llmt_job_perf *p)
{
    char *t = test_slurp(path, NULL);
    CHECK(t != NULL);
    double steps = t ? check_prom_text(t, p) : NAN;
    free(t);
    return steps;
}

/* ---- a plain HTTP/1.1 client: `req` sent to 127.0.0.1:port, the answer
 * read to EOF; *status gets its code (-1: could not connect), returns the
 * body (malloc'd) */
static char *http(int port, const char *req, int *status)
{
    *status = -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return NULL;
    struct timeval tv = {20, 0}; /* a hung server fails the test, not CI */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return NULL;
    }
    size_t n = strlen(req), cap = 1 << 16, len = 0;
    if (send(fd, req, n, MSG_NOSIGNAL) != (ssize_t)n) {
        close(fd);
        return NULL;
    }
    char *b = malloc(cap);
    ssize_t k;
    while (b && len + 1 < cap && (k = recv(fd, b + len, cap - 1 - len, 0)) > 0)
        len += (size_t)k;
    close(fd);
    if (!b)
        return NULL;
    b[len] = 0;
    char *body = strstr(b, "\r\n\r\n");
    if (sscanf(b, "HTTP/1.%*d %d", status) != 1 || !body) {
        *status = 0;
        free(b);
        return NULL;
    }
    /* Content-Length says the body is all there */
    char *cl = strstr(b, "Content-Length: ");
    if (!cl || cl > body || strtoul(cl + 16, NULL, 10) != strlen(body + 4))
        *status = 0;
    memmove(b, body + 4, strlen(body + 4) + 1);
    return b;
}

static char *get_metrics(int port, int *status)
{
    return http(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", status);
}

/* A port P of loopback such that P and P + 1 are free now (0: none
 * found), for two ranks' endpoints at PORT + local rank. */
static int free_port_pair(void)
{
    for (int tries = 0; tries < 50; tries++) {
        int fd[2] = {socket(AF_INET, SOCK_STREAM, 0), socket(AF_INET, SOCK_STREAM, 0)};
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t al = sizeof a;
        int port = 0;
        if (fd[0] >= 0 && fd[1] >= 0 && bind(fd[0], (struct sockaddr *)&a, sizeof a) == 0 &&
            getsockname(fd[0], (struct sockaddr *)&a, &al) == 0 && ntohs(a.sin_port) < 65535) {
            a.sin_port = htons((uint16_t)(ntohs(a.sin_port) + 1));
            if (bind(fd[1], (struct sockaddr *)&a, sizeof a) == 0)
                port = ntohs(a.sin_port) - 1;
        }
        for (int i = 0; i < 2; i++)
            if (fd[i] >= 0)
                close(fd[i]);
        if (port)
            return port;
    }
    return 0;
}

/* A job of the obs spec with `extra`, in dir, on ctx (which must outlive
 * it); NULL when refused (the context's message into err). */
static llmt_job *job_in(llmt_context *ctx, const char *dir, const char *extra, int steps,
                        llmt_status *st, char *err, size_t errlen)
{
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = dir;
    const char *json = spec_json(steps, extra);
    llmt_job *job = NULL;
    *st = llmt_job_create_from_json(ctx, json, strlen(json), &jo, &job);
    snprintf(err, errlen, "%s", llmt_context_last_error(ctx));
    return *st == LLMT_OK ? job : NULL;
}

/* metrics.http: the endpoint on a free port (0) serves the textfile's
 * text over loopback and follows the steps; a second job on its port is
 * refused naming the key and the port; destroying the job closes it (the
 * port can be bound again); a bad value is refused naming the key. */
static void check_http(void)
{
    char dir[700], err[1024];
    snprintf(dir, sizeof dir, "%s/http", tmp);
    llmt_status st;
    llmt_context *ctx = NULL;
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    llmt_job *job =
        job_in(ctx, dir, ", \"metrics\": {\"http\": \"127.0.0.1:0\"}", 4, &st, err, sizeof err);
    CHECK_STATUS(st, LLMT_OK);
    if (!job) {
        fprintf(stderr, "http job: %s\n", err);
        llmt_context_destroy(ctx);
        return;
    }
    char path[800];
    snprintf(path, sizeof path, "%s/metrics.http", dir);
    char *url = test_slurp(path, NULL);
    int port = 0;
    CHECK(url && sscanf(url, "http://127.0.0.1:%d/metrics", &port) == 1 && port > 0);
    fprintf(stderr, "http: serving at %s", url ? url : "(no metrics.http)\n");
    free(url);
    int code;
    /* before the first step: the step counter, 0 */
    char *b = get_metrics(port, &code);
    CHECK_EQ_INT(code, 200);
    CHECK(b && strstr(b, "llmtrain_steps_total{rank=\"0\"} 0\n") &&
          !strstr(b, "llmtrain_step_seconds"));
    free(b);
    double seen[2] = {NAN, NAN};
    for (int s = 0; s < 2; s++) {
        llmt_job_perf p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        CHECK_STATUS(llmt_job_step(job, NULL), LLMT_OK);
        llmt_job_get_perf(job, &p);
        b = get_metrics(port, &code);
        CHECK_EQ_INT(code, 200);
        if (b)
            seen[s] = check_prom_text(b, &p);
        free(b);
    }
    fprintf(stderr, "http: llmtrain_steps_total %g then %g\n", seen[0], seen[1]);
    CHECK(seen[0] == 1 && seen[1] == 2);
    b = http(port, "GET /other HTTP/1.1\r\n\r\n", &code);
    CHECK_EQ_INT(code, 404);
    free(b);
    b = http(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &code);
    CHECK_EQ_INT(code, 405);
    free(b);
    b = http(port, "HEAD /metrics HTTP/1.0\r\n\r\n", &code);
    CHECK(code == 200 || code == 0); /* no body: its Content-Length does not match */
    CHECK(b && !strstr(b, "llmtrain_"));
    free(b);

    /* the port is taken: refused at creation, naming the key and port */
    char extra[128], dir2[800], portstr[16];
    snprintf(extra, sizeof extra, ", \"metrics\": {\"http\": \"127.0.0.1:%d\"}", port);
    snprintf(dir2, sizeof dir2, "%s/http-taken", tmp);
    snprintf(portstr, sizeof portstr, "%d", port);
    llmt_job *other = job_in(ctx, dir2, extra, 4, &st, err, sizeof err);
    fprintf(stderr, "http: a second job on port %d: %s\n", port, err);
    CHECK(other == NULL && st == LLMT_ERR_IO);
    CHECK(strstr(err, "metrics.http") && strstr(err, portstr));
    llmt_job_destroy(other);

    /* destroy stops it: nothing listens, and the port binds again */
    llmt_job_destroy(job);
    b = get_metrics(port, &code);
    CHECK_EQ_INT(code, -1);
    free(b);
    snprintf(dir2, sizeof dir2, "%s/http-again", tmp);
    other = job_in(ctx, dir2, extra, 4, &st, err, sizeof err);
    CHECK_STATUS(st, LLMT_OK);
    if (!other)
        fprintf(stderr, "http: again on %d: %s\n", port, err);
    b = get_metrics(port, &code);
    CHECK_EQ_INT(code, 200);
    free(b);
    llmt_job_destroy(other);

    snprintf(dir2, sizeof dir2, "%s/http-bad", tmp);
    other = job_in(ctx, dir2, ", \"metrics\": {\"http\": \"localhost:x\"}", 4, &st, err,
                   sizeof err);
    CHECK(other == NULL && st == LLMT_ERR_SPEC && strstr(err, "metrics.http"));
    llmt_job_destroy(other);
    llmt_context_destroy(ctx);
}

/* llmtrain_steps_total is a counter: a job resumed from step 4 after a
 * first process ran to step 5 counts its own steps from 0 (it does not
 * jump to the step number, nor go back from 5 to 5 again), while
 * llmtrain_step gives the step number. */
static void check_resume_counter(void)
{
    char dir[700], err[1024], path[800];
    snprintf(dir, sizeof dir, "%s/resume", tmp);
    snprintf(path, sizeof path, "%s/metrics.prom", dir);
    llmt_status st;
    llmt_context *ctx = NULL;
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    llmt_job *job = job_in(ctx, dir, "", 6, &st, err, sizeof err);
    CHECK_STATUS(st, LLMT_OK);
    llmt_job_perf p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    for (int s = 0; job && s < 5; s++) /* saves step 4 */
        CHECK_STATUS(llmt_job_step(job, NULL), LLMT_OK);
    if (job) {
        llmt_job_get_perf(job, &p);
        CHECK(check_prom(path, &p) == 5);
    }
    llmt_job_destroy(job);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = dir;
    jo.resume = 1;
    const char *json = spec_json(6, "");
    job = NULL;
    CHECK_STATUS(llmt_job_create_from_json(ctx, json, strlen(json), &jo, &job), LLMT_OK);
    if (!job)
        fprintf(stderr, "resume: %s\n", llmt_context_last_error(ctx));
    double steps = NAN;
    if (job && llmt_job_step(job, NULL) == LLMT_OK) {
        llmt_job_get_perf(job, &p);
        CHECK_EQ_INT(p.step, 5);
        steps = check_prom(path, &p);
    }
    fprintf(stderr, "resumed at step 4: llmtrain_steps_total %g after one step\n", steps);
    CHECK(steps == 1);
    llmt_job_destroy(job);
    llmt_context_destroy(ctx);
}

/* ---- one rank */
typedef struct rank_arg {
    llmt_comm *comm;
    int rank, steps;
    int untimed; /* op_timing -1, no trace */
    const char *json;
    const char *prom; /* llmt_job_obs_opts.prom_path, or NULL */
    char dir[600];
    llmt_job_perf perf[16];
    llmt_status st;
} rank_arg;

static void *run_rank(void *p)
{
    rank_arg *a = p;
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = a->dir;
    jo.comm = a->comm;
    llmt_job *job = NULL;
    a->st = llmt_job_create_from_json(ctx, a->json, strlen(a->json), &jo, &job);
    if (a->st != LLMT_OK) {
        fprintf(stderr, "rank %d: %s\n", a->rank, llmt_context_last_error(ctx));
        llmt_context_destroy(ctx);
        return NULL;
    }
    llmt_job_obs_opts oo;
    llmt_job_obs_opts_init(&oo, sizeof oo);
    oo.op_timing = 1; /* 0 or -1 only */
    a->st =
        llmt_job_set_obs(job, &oo) == LLMT_ERR_INVALID_ARGUMENT ? LLMT_OK : LLMT_ERR_INTERNAL;
    oo.op_timing = a->untimed ? -1 : 0;
    oo.trace_first = a->untimed ? 0 : 3;
    oo.trace_last = a->untimed ? 0 : 4;
    oo.aggregate_interval = 2;
    oo.prom_path = a->prom;
    if (a->st == LLMT_OK)
        a->st = llmt_job_set_obs(job, &oo);
    for (int s = 0; a->st == LLMT_OK && s < a->steps; s++) {
        a->st = llmt_job_step(job, NULL);
        a->perf[s].struct_size = sizeof a->perf[s];
        if (a->st == LLMT_OK)
            llmt_job_get_perf(job, &a->perf[s]);
    }
    if (a->st == LLMT_OK)
        a->st = llmt_job_finish(job);
    /* too late now */
    if (a->st == LLMT_OK && llmt_job_set_obs(job, &oo) != LLMT_ERR_STATE)
        a->st = LLMT_ERR_INTERNAL;
    if (a->st != LLMT_OK)
        fprintf(stderr, "rank %d: %s\n", a->rank, llmt_job_last_error(job));
    llmt_job_destroy(job);
    llmt_context_destroy(ctx);
    return NULL;
}

/* Over steps 2.. (the first allocates the engine's buffers in host code)
 * the parts add up to the wall time within 5%; each step within 25% (a
 * loaded machine preempts the trainer's host code between ops). */
static void check_split_sum(const llmt_job_perf *p, int n, int rank, double tol)
{
    double parts = 0, wall = 0;
    for (int s = 1; s < n; s++) {
        wall += p[s].wall_s;
        parts += p[s].wall_s - p[s].unaccounted_s;
    }
    fprintf(stderr, "rank %d: parts %.6f s of wall %.6f s over steps 2-%d\n", rank, parts, wall,
            n);
    CHECK(fabs(parts - wall) <= tol * wall);
}

static void check_split(const llmt_job_perf *p, int rank)
{
    double parts =
        p->compute_s + p->optimizer_s + p->bubble_s + p->data_s + p->ckpt_s + p->other_s;
    for (int g = 0; g < LLMT_JOB_GROUPS; g++)
        parts += p->comm_s[g];
    double rel = fabs(parts - p->wall_s) / p->wall_s;
    if (rel > 0.05)
        fprintf(stderr,
                "rank %d step %lld: parts %.6f vs wall %.6f (compute %.6f opt %.6f dp "
                "%.6f data %.6f ckpt %.6f other %.6f)\n",
                rank, (long long)p->step, parts, p->wall_s, p->compute_s, p->optimizer_s,
                p->comm_s[0], p->data_s, p->ckpt_s, p->other_s);
    CHECK(rel <= 0.25);
    CHECK(p->compute_s > 0 && p->optimizer_s > 0 && p->data_s >= 0 && p->other_s >= 0);
    CHECK(p->mem_in_use > 0 && p->mem_peak >= p->mem_in_use);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_obs CORPUS_DIR\n");
        return 2;
    }
    snprintf(corpus, sizeof corpus, "%s", argv[1]);
    snprintf(tmp, sizeof tmp, "/tmp/llmt-obs-XXXXXX");
    if (!mkdtemp(tmp))
        return 1;

    /* ---- one rank: FLOPs, MFU, split, trace without collectives, textfile */
    {
        rank_arg a;
        memset(&a, 0, sizeof a);
        a.steps = 6;
        a.json = spec_json(6, "");
        snprintf(a.dir, sizeof a.dir, "%s/one", tmp);
        run_rank(&a);
        CHECK_STATUS(a.st, LLMT_OK);
        /* the count made here: the matrices of the blocks and the head
         * (2 FLOPs a multiply-add, the backward twice the forward: 6 N)
         * plus attention's QK^T and AV over all S keys (12 L S H a token) */
        double N = L * (4.0 * H * H + 2.0 * H * FF) + (double)V * H;
        double tokens = (double)MICRO * ACCUM * S;
        double want = tokens * (6 * N + 12.0 * L * S * H);
        char mpath[700];
        snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", a.dir);
        double peak = line_value(mpath, "\"calibration\"", "peak_flops");
        CHECK(peak > 1e8); /* any CPU of this decade */
        for (int s = 0; s < a.steps; s++) {
            const llmt_job_perf *p = &a.perf[s];
            CHECK_EQ_INT(p->step, s + 1);
            CHECK(fabs(p->model_flops - want) <= 0.01 * want);
            CHECK(fabs(p->peak_flops - peak) <= 1e-5 * peak);
            double mfu = want / p->wall_s / peak;
            CHECK(fabs(p->mfu - mfu) <= 0.011 * mfu);
            CHECK(p->hfu >= p->mfu);
            CHECK(fabs(p->tokens_per_s - tokens / p->wall_s) <= 1e-6 * p->tokens_per_s);
            check_split(p, 0);
        }
        check_split_sum(a.perf, a.steps, 0, 0.05);
        fprintf(stderr, "one rank: model FLOPs %.6g (here %.6g), peak %.3g FLOP/s, MFU %.3f\n",
                a.perf[5].model_flops, want, peak, a.perf[5].mfu);
        char path[700];
        snprintf(path, sizeof path, "%s/trace-rank0.json", a.dir);
        check_trace(path, 0, 0);
        snprintf(path, sizeof path, "%s/metrics.prom", a.dir);
        CHECK(check_prom(path, &a.perf[5]) == 6);
        snprintf(path, sizeof path, "%s/run.jsonl", a.dir);
        CHECK(line_value(path, "\"step\":6", "ranks") == 1);
    }

    check_http();
    check_resume_counter();

    /* ---- one rank, ops not timed (op_timing -1): the engine's time is
     * unaccounted, compute and optimizer stay 0, the rest is measured */
    {
        rank_arg a;
        memset(&a, 0, sizeof a);
        a.steps = 4;
        a.untimed = 1;
        a.json = spec_json(4, "");
        snprintf(a.dir, sizeof a.dir, "%s/untimed", tmp);
        run_rank(&a);
        CHECK_STATUS(a.st, LLMT_OK);
        for (int s = 0; s < a.steps; s++) {
            const llmt_job_perf *p = &a.perf[s];
            CHECK(p->compute_s == 0 && p->optimizer_s == 0);
            fprintf(stderr,
                    "untimed step %d: wall %.4f s, unaccounted %.4f s, data %.4f s, "
                    "other %.4f s, ckpt %.4f s\n",
                    s + 1, p->wall_s, p->unaccounted_s, p->data_s, p->other_s, p->ckpt_s);
            /* the engine's time moved to unaccounted (steps 1-2: no
             * validation or checkpoint); the loader's wait, measured on
             * its own, can take half of a step this small on a loaded
             * machine (CI: step 1 of 18 ms with 10 ms of it) */
            CHECK(s >= 2 || p->unaccounted_s > 0.5 * (p->wall_s - p->data_s));
            CHECK(p->unaccounted_s > 0 && p->mfu > 0);
        }
        char mpath[700];
        snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", a.dir);
        char *t = test_slurp(mpath, NULL);
        CHECK(t && strstr(t, "\"timed_ops\":false") && !strstr(t, "\"timed_ops\":true"));
        free(t);
    }

    /* ---- two ranks, rank 1 slowed by 400 ms a step from step 2 on.
     * Large against a step (about 0.15-0.8 s as two ASan threads on two
     * shared cores) so that the 20% straggler margin is crossed whatever the
     * noise (at 40 ms CI once saw the extra busy time fall just under it),
     * and against rank 1's own dp wait, which under ASan at a load average
     * of 8 on two cores reached 0.39 s over the 4 steps checked below (its
     * issuing of collectives, preempted by the progress threads, counts
     * there): the margin below is 0.8 s */
    {
        enum { SLOW_MS = 400 };
        char fault[64];
        snprintf(fault, sizeof fault, "slow:1:2:%d+", SLOW_MS);
        setenv("LLMT_FAULT", fault, 1);
        llmt_context *ctx = NULL;
        llmt_context_create(NULL, &ctx);
        llmt_comm *comms[2] = {NULL, NULL};
        CHECK_STATUS(llmt_comm_create_inproc(ctx, 2, NULL, comms), LLMT_OK);
        rank_arg a[2];
        pthread_t th[2];
        /* each rank serves metrics.http at PORT + its local rank */
        int port = free_port_pair();
        CHECK(port > 0);
        char extra[256];
        snprintf(extra, sizeof extra,
                 ", \"metrics\": {\"http\": \"127.0.0.1:%d\"}, \"fault_tolerance\": "
                 "{\"straggler\": {\"interval\": 3, \"margin\": 0.2, \"patience\": 100}}",
                 port);
        const char *json = spec_json(6, extra);
        /* one textfile named for the job: rank 1 writes beside it */
        char prom[600];
        snprintf(prom, sizeof prom, "%s/two-job.prom", tmp);
        for (int r = 0; r < 2; r++) {
            memset(&a[r], 0, sizeof a[r]);
            a[r].prom = prom;
            a[r].comm = comms[r];
            a[r].rank = r;
            a[r].steps = 6;
            a[r].json = json;
            snprintf(a[r].dir, sizeof a[r].dir, "%s/two", tmp);
            pthread_create(&th[r], NULL, run_rank, &a[r]);
        }
        for (int r = 0; r < 2; r++)
            pthread_join(th[r], NULL);
        unsetenv("LLMT_FAULT");
        CHECK_STATUS(a[0].st, LLMT_OK);
        CHECK_STATUS(a[1].st, LLMT_OK);
        for (int r = 0; r < 2; r++) {
            char path[800];
            snprintf(path, sizeof path,
                     r ? "%s/two/rank-1/metrics.http" : "%s/two/metrics.http", tmp);
            char *url = test_slurp(path, NULL);
            int got = 0;
            CHECK(url && sscanf(url, "http://127.0.0.1:%d/metrics", &got) == 1);
            CHECK_EQ_INT(got, port + r);
            free(url);
        }
        for (int r = 0; r < 2; r++) {
            for (int s = 1; s < 6; s++)
                check_split(&a[r].perf[s], r);
            /* as one rank: the data parallel code's host time around its
             * collectives (issuing them: often preempted right there by
             * the woken progress thread on two shared cores) counts as
             * its dp communication */
            check_split_sum(a[r].perf, 6, r, 0.05);
        }
        for (int r = 0; r < 2; r++) {
            char path[800];
            snprintf(path, sizeof path, r ? "%s/two-job.rank1.prom" : "%s/two-job.prom", tmp);
            char *t = test_slurp(path, NULL), want[64];
            snprintf(want, sizeof want, "llmtrain_step{rank=\"%d\"} 6\n", r);
            if (!t || !strstr(t, want))
                fprintf(stderr, "%s: no '%s'\n", path, want);
            CHECK(t && strstr(t, want));
            free(t);
        }
        /* the slowed rank's wait is the others' exposed communication */
        double w0 = 0, w1 = 0;
        for (int s = 2; s < 6; s++) {
            w0 += a[0].perf[s].comm_s[LLMT_JOB_GROUP_DP];
            w1 += a[1].perf[s].comm_s[LLMT_JOB_GROUP_DP];
        }
        fprintf(stderr, "two ranks, steps 3-6: dp wait rank 0 %.4f s, rank 1 %.4f s\n", w0, w1);
        /* rank 1 sleeps SLOW_MS in each of these 4 steps: rank 0 waits for
         * it, so rank 0's exposed wait exceeds rank 1's by about 4 x SLOW_MS.
         * A difference, not a ratio: under ASan or a loaded machine both
         * ranks also wait on each other's slower compute */
        CHECK(w0 - w1 > 0.5 * 4 * SLOW_MS * 1e-3);
        char path[700];
        snprintf(path, sizeof path, "%s/two/run.jsonl", tmp);
        char *run = test_slurp(path, NULL);
        CHECK(run && strstr(run, "\"stragglers\":[1]") && strstr(run, "\"slowest_rank\":1"));
        CHECK(run && strstr(run, "\"ranks\":2"));
        free(run);
        /* of two ranks the median is their mean (rank 0 waits for the
         * slowed rank 1 in its dp collectives: the two differ) */
        double lo = line_value(path, "\"comm_dp_s\"", "min"),
               med = line_value(path, "\"comm_dp_s\"", "median"),
               hi = line_value(path, "\"comm_dp_s\"", "max");
        fprintf(stderr, "run.jsonl comm_dp_s: min %g median %g max %g\n", lo, med, hi);
        CHECK(hi > lo && fabs(med - 0.5 * (lo + hi)) <= 1e-5 * hi);
        snprintf(path, sizeof path, "%s/two/trace-rank0.json", tmp);
        int c0 = check_trace(path, 0, 1);
        snprintf(path, sizeof path, "%s/two/rank-1/trace-rank1.json", tmp);
        int c1 = check_trace(path, 1, 1);
        CHECK_EQ_INT(c0, c1); /* the same collectives on both ranks */
        llmt_comm_destroy(comms[0]);
        llmt_comm_destroy(comms[1]);
        llmt_context_destroy(ctx);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    /* LLMT_TEST_KEEP=1 keeps the runs' files to look at */
    if (check_failures == 0 && !getenv("LLMT_TEST_KEEP") && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    if (getenv("LLMT_TEST_KEEP"))
        fprintf(stderr, "kept %s\n", tmp);
    return check_exit("obs");
}
