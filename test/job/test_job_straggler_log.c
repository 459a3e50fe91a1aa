/* The straggler report's log at many ranks (lib/job/detect.c,
 * llmt__job_straggler): WORLD ranks as threads on an in-process
 * communicator, each calling the report on a job of its own with a busy
 * time of its own; every odd rank is ten times as busy as the even ones,
 * so half of the ranks are named.
 *
 *   rank 0's metrics hold a "straggler" event for every named rank and
 *   run.jsonl's "stragglers" array names them all (tooling reads these);
 *
 *   rank 0 logs the first 8 named ranks' lines and one line for the rest
 *   ("and 24 more"): it logged one line per named rank, thousands a report
 *   at 16k ranks with a slow rack;
 *
 *   every other named rank logs its own line, and a rank not named none. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "job/job.h"

#define WORLD 64
#define SHOWN 8 /* the lines rank 0 logs before the summary */

typedef struct rank_log {
    int lines;   /* "straggler:" lines this rank logged */
    int summary; /* of which "and N more" lines */
    int own;     /* of which name this rank itself */
    int rank;
    char more[512]; /* the summary line */
} rank_log;

static void on_log(void *user, llmt_log_level level, const char *module, const char *msg)
{
    rank_log *l = user;
    char self[32];
    (void)level;
    (void)module;
    if (strncmp(msg, "straggler:", 10))
        return;
    l->lines++;
    snprintf(self, sizeof self, "straggler: rank %d is", l->rank);
    l->own += !strncmp(msg, self, strlen(self));
    if (strstr(msg, " more ")) {
        l->summary++;
        snprintf(l->more, sizeof l->more, "%s", msg);
    }
}

typedef struct rank_arg {
    llmt_job *j;
    llmt_status st;
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    int slow = a->j->rank % 2;
    /* busy = step - comm: 0.1 s on the slow ranks, 0.01 s on the others */
    a->st = llmt__job_straggler(a->j, 1, 0.1, slow ? 0.0 : 0.09);
    return NULL;
}

static int count_in(FILE *f, const char *key)
{
    char line[4096];
    int n = 0;
    rewind(f);
    while (fgets(line, sizeof line, f))
        n += strstr(line, key) != NULL;
    return n;
}

int main(void)
{
    static const char *spec =
        "{\"name\": \"st\", \"model\": {\"arch\": \"gpt2\", \"layers\": 1, \"hidden\": 32,"
        " \"heads\": 2, \"vocab\": 320, \"seq_len\": 16},"
        " \"batch\": {\"micro\": 2, \"grad_accum\": 1}, \"train\": {\"steps\": 4},"
        " \"data\": {\"train\": \"x\", \"tokenizer\": {\"kind\": \"byte\"}},"
        " \"hardware\": {\"gpu\": \"cpu\"},"
        " \"fault_tolerance\": {\"straggler\": {\"interval\": 1, \"margin\": 0.1, "
        "\"patience\": 0}}}";
    char tmp[] = "/tmp/llmt-straglog-XXXXXX";
    if (!mkdtemp(tmp))
        return 1;
    llmt_context *pctx = NULL;
    llmt_context_create(NULL, &pctx);
    llmt_spec *sp = NULL;
    CHECK_STATUS(llmt_spec_parse_json(pctx, spec, strlen(spec), &sp), LLMT_OK);
    if (!sp)
        return check_exit("job-straggler-log");
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.timeout_ms = 20000;
    llmt_comm *comms[WORLD];
    CHECK_STATUS(llmt_comm_create_inproc(NULL, WORLD, &co, comms), LLMT_OK);
    static rank_log logs[WORLD];
    static rank_arg args[WORLD];
    llmt_context *ctx[WORLD];
    pthread_t th[WORLD];
    for (int r = 0; r < WORLD; r++) {
        llmt_context_opts o;
        llmt_context_opts_init(&o, sizeof o);
        o.log_fn = on_log;
        o.log_user = &logs[r];
        logs[r].rank = r;
        llmt_context_create(&o, &ctx[r]);
        llmt_job *j = calloc(1, sizeof *j);
        j->ctx = ctx[r];
        j->spec = sp;
        j->comm = comms[r];
        j->world = WORLD;
        j->rank = r;
        j->strag_streak = calloc(WORLD, sizeof *j->strag_streak);
        j->jsonl = r == 0 ? tmpfile() : NULL;
        snprintf(j->run_jsonl_path, sizeof j->run_jsonl_path, "%s/run.jsonl", tmp);
        args[r].j = j;
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    int named = WORLD / 2, wrong_own = 0;
    for (int r = 0; r < WORLD; r++) {
        CHECK_STATUS(args[r].st, LLMT_OK);
        if (r == 0)
            continue;
        int want = r % 2; /* its own line, named or not */
        wrong_own += logs[r].lines != want || logs[r].own != want;
    }
    CHECK_EQ_INT(wrong_own, 0);
    /* every named rank in the metrics and in run.jsonl */
    int events = count_in(args[0].j->jsonl, "\"event\":\"straggler\"");
    CHECK_EQ_INT(events, named);
    char path[600], want_list[1024] = "\"stragglers\":[";
    snprintf(path, sizeof path, "%s/run.jsonl", tmp);
    for (int r = 1; r < WORLD; r += 2)
        snprintf(want_list + strlen(want_list), sizeof want_list - strlen(want_list), "%s%d",
                 r > 1 ? "," : "", r);
    FILE *run = fopen(path, "r");
    CHECK(run != NULL);
    CHECK_EQ_INT(run ? count_in(run, want_list) : 0, 1);
    if (run)
        fclose(run);
    /* rank 0's log: SHOWN lines and one for the rest */
    char more[64];
    snprintf(more, sizeof more, "and %d more ", named - SHOWN);
    printf("%d ranks, %d named: %d metrics events; rank 0 logged %d straggler line(s), "
           "%d summary: %s\n",
           WORLD, named, events, logs[0].lines, logs[0].summary, logs[0].more);
    CHECK_EQ_INT(logs[0].lines, SHOWN + 1);
    CHECK_EQ_INT(logs[0].summary, 1);
    CHECK(strstr(logs[0].more, more) != NULL);
    for (int r = 0; r < WORLD; r++) {
        if (args[r].j->jsonl)
            fclose(args[r].j->jsonl);
        free(args[r].j->strag_streak);
        free(args[r].j);
        llmt_comm_destroy(comms[r]);
        llmt_context_destroy(ctx[r]);
    }
    llmt_spec_destroy(sp);
    llmt_context_destroy(pctx);
    if (!check_failures) {
        remove(path);
        remove(tmp);
    }
    return check_exit("job-straggler-log");
}
