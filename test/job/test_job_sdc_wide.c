/* The fault-tolerance checks' lines on a wide world: N ranks (default
 * 240) as threads on an in-process communicator, a tiny model under ZeRO-3
 * in deterministic mode with the SDC check at step 2 and the straggler
 * report at every step (a margin so small that about half of the ranks are
 * named), and rank 1's result of step 2 corrupted (LLMT_FAULT flipout):
 *
 *   rank 0's "sdc_replay" line holds every rank's hash twice (xxh and
 *   replay_xxh, N entries each: 16 hex digits a rank, cut at ~215 ranks by
 *   the old 4096-byte buffers) and names rank 1 alone;
 *
 *   every line of run.jsonl parses, and its "stragglers" array names
 *   exactly the ranks of rank 0's "straggler" events of that report (the
 *   old 256-byte list was cut at ~50 ranks): about half of the ranks
 *   (120) are named, at least 64 (rank 7, slowed 20 ms a step, among
 *   them). Until the busy time was taken around the step alone, the SDC
 *   check's collectives at step 2 and the setup's before step 1 were
 *   subtracted from the step's wall time, every busy time clipped to 0,
 *   and no rank was named (seen in CI).
 *
 * usage: test_job_sdc_wide CORPUS_DIR [N] */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "job_threads.h"
#include "llmtrain.h"

/* full 0: the one-rank job that prepares the corpus (no ZeRO, no checks) */
static void spec(char *out, size_t cap, const char *data, int n, int full)
{
    const char *ft = ", \"parallelism\": {\"zero\": 3},"
                     " \"fault_tolerance\": {\"sdc_interval\": 2, \"straggler\": "
                     "{\"interval\": 1, \"margin\": 1e-6, \"patience\": 0}}";
    snprintf(
        out, cap,
        "{\"name\": \"wide\", \"model\": {\"arch\": \"gpt2\", \"layers\": 1, "
        "\"hidden\": 32, \"heads\": 2, \"vocab\": 320, \"seq_len\": 16},"
        " \"batch\": {\"micro\": 1, \"global\": %d}, \"optimizer\": {\"lr\": 1e-2},"
        " \"train\": {\"steps\": 2, \"seed\": 3, \"eval_interval\": 0, \"log_interval\": 0,"
        " \"threads\": 1, \"sample_tokens\": 0, \"deterministic\": true},"
        " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
        " \"checkpoint\": {\"interval\": 0}, \"hardware\": {\"gpu\": \"cpu\"}%s}",
        full ? n : 1, data, full ? ft : "");
}

/* Every line of path parsed; calls f on each object. The count of lines
 * that did not parse. */
static int each_line(const char *path, void (*f)(cJSON *, void *), void *u)
{
    FILE *fp = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    int bad = 0;
    while (fp && getline(&line, &cap, fp) > 0) {
        cJSON *o = cJSON_Parse(line);
        if (!o) {
            fprintf(stderr, "%s: a line does not parse: %.120s...\n", path, line);
            bad++;
            continue;
        }
        f(o, u);
        cJSON_Delete(o);
    }
    free(line);
    if (fp)
        fclose(fp);
    CHECK(fp != NULL);
    return bad;
}

typedef struct seen {
    int n;
    int replay_lines, hashes_ok, named_one;
    unsigned char *named; /* [step * n + r]: a straggler event of rank r */
    int run_lines, runs_match, most;
} seen;

static int str_is_hex16(const cJSON *e)
{
    if (!cJSON_IsString(e) || strlen(e->valuestring) != 16)
        return 0;
    return strspn(e->valuestring, "0123456789abcdef") == 16;
}

static void on_metrics(cJSON *o, void *u)
{
    seen *s = u;
    const cJSON *ev = cJSON_GetObjectItem(o, "event");
    if (!cJSON_IsString(ev))
        return;
    int step = cJSON_GetObjectItem(o, "step") ? cJSON_GetObjectItem(o, "step")->valueint : -1;
    if (!strcmp(ev->valuestring, "straggler")) {
        int r = cJSON_GetObjectItem(o, "rank")->valueint;
        if (step >= 1 && step <= 2 && r >= 0 && r < s->n)
            s->named[step * s->n + r] = 1;
    }
    if (strcmp(ev->valuestring, "sdc_replay"))
        return;
    s->replay_lines++;
    int ok = 1;
    const char *keys[2] = {"xxh", "replay_xxh"};
    for (int k = 0; k < 2; k++) {
        const cJSON *a = cJSON_GetObjectItem(o, keys[k]), *e;
        ok &= cJSON_GetArraySize(a) == s->n;
        cJSON_ArrayForEach(e, a) ok &= str_is_hex16(e);
    }
    s->hashes_ok = ok;
    const cJSON *nr = cJSON_GetObjectItem(o, "not_reproducible");
    s->named_one = cJSON_GetArraySize(nr) == 1 && cJSON_GetArrayItem(nr, 0)->valueint == 1;
}

/* run.jsonl's line of step k covers steps up to k (its report at k + 1). */
static void on_run(cJSON *o, void *u)
{
    seen *s = u;
    const cJSON *st = cJSON_GetObjectItem(o, "stragglers"), *e;
    int step = cJSON_GetObjectItem(o, "step") ? cJSON_GetObjectItem(o, "step")->valueint : -1;
    if (!cJSON_IsArray(st) || step + 1 < 1 || step + 1 > 2)
        return;
    s->run_lines++;
    int n = 0, ok = 1;
    cJSON_ArrayForEach(e, st)
    {
        ok &=
            e->valueint >= 0 && e->valueint < s->n && s->named[(step + 1) * s->n + e->valueint];
        n++;
    }
    int want = 0;
    for (int r = 0; r < s->n; r++)
        want += s->named[(step + 1) * s->n + r];
    if (!ok || n != want)
        fprintf(stderr, "run.jsonl step %d: %d stragglers listed, %d named in events\n", step,
                n, want);
    s->runs_match += ok && n == want;
    s->most = n > s->most ? n : s->most;
}

int main(int argc, char **argv)
{
    jt_cfg = (jt_config){2, 0, 0, 30, 1e-5, 1};
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [N]\n", argv[0]);
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 240;
    char tmp[] = "/tmp/llmt-sdcwide-XXXXXX";
    if (n < 2 || !mkdtemp(tmp))
        return 1;
    char json[4096], dir[600], data[700];
    spec(json, sizeof json, argv[1], n, 0);
    snprintf(dir, sizeof dir, "%s/prep", tmp);
    if (jt_prepare(json, dir) != LLMT_OK)
        return check_exit("job-sdc-wide");
    snprintf(data, sizeof data, "%s/prep/data", tmp);
    spec(json, sizeof json, data, n, 1);
    snprintf(dir, sizeof dir, "%s/run", tmp);

    llmt_comm **comms = calloc((size_t)n, sizeof *comms);
    jt_rank *a = calloc((size_t)n, sizeof *a);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    CHECK_STATUS(llmt_comm_create_inproc(NULL, n, NULL, comms), LLMT_OK);
    /* rank 7 sleeps 20 ms a step: a straggler on any machine's load */
    setenv("LLMT_FAULT", "flipout:1:2,slow:7:1:20+", 1);
    for (int r = 0; r < n; r++) {
        a[r].comm = comms[r];
        a[r].rank = r;
        a[r].json = json;
        a[r].dir = dir;
        pthread_create(&th[r], NULL, jt_rank_main, &a[r]);
    }
    int failed = 0;
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        if (a[r].st != LLMT_OK && failed++ < 3)
            fprintf(stderr, "rank %d: %s\n", r, a[r].err);
    }
    CHECK_EQ_INT(failed, 0);
    for (int r = 0; r < n; r++)
        llmt_comm_destroy(comms[r]);

    seen s = {n, 0, 0, 0, calloc(3 * (size_t)n, 1), 0, 0, 0};
    char path[700];
    CHECK_EQ_INT(each_line(a[0].metrics, on_metrics, &s), 0);
    snprintf(path, sizeof path, "%s/run.jsonl", dir);
    CHECK_EQ_INT(each_line(path, on_run, &s), 0);
    printf("%d ranks: %d sdc_replay line(s), hashes whole: %s, rank 1 alone named: %s; "
           "%d run.jsonl line(s) matching the straggler events: %d (most listed: %d)\n",
           n, s.replay_lines, s.hashes_ok ? "yes" : "no", s.named_one ? "yes" : "no",
           s.run_lines, s.runs_match, s.most);
    CHECK_EQ_INT(s.replay_lines, 1);
    CHECK(s.hashes_ok);
    CHECK(s.named_one);
    CHECK(s.run_lines >= 1);
    CHECK_EQ_INT(s.runs_match, s.run_lines);
    CHECK(s.most >= 64); /* past the old 256-byte list */
    free(s.named);
    free(comms);
    free(a);
    free(th);
    return check_exit("job-sdc-wide");
}
