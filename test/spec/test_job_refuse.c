/* Keys the spec accepts that have no effect beside another key's value:
 * the job (llmt_job_create, what `llmtrain train` runs) refuses the pair at
 * creation naming the key, instead of running without it. Each case is
 * refused before the data is opened, so no corpus is needed; the accepted
 * twin of a case fails later (its data.train does not exist) with a
 * message that does not name the key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"

static llmt_context *ctx;
static char dir[256];

/* A 1-layer GPT-2 whose data does not exist, with `extra` added at the top
 * level (a leading comma and members). */
static llmt_status create(const char *extra, char *msg, size_t cap)
{
    char json[4096];
    snprintf(json, sizeof json,
             "{\"model\": {\"layers\": 1, \"hidden\": 32, \"heads\": 2, \"vocab\": 260, "
             "\"seq_len\": 16}, \"train\": {\"steps\": 2, \"sample_tokens\": 0}, "
             "\"data\": {\"train\": \"%s/no-such-data\", \"tokenizer\": {\"kind\": "
             "\"byte\"}}%s}",
             dir, extra);
    llmt_job_opts o;
    llmt_job_opts_init(&o, sizeof o);
    o.run_dir = dir;
    llmt_job *j = NULL;
    llmt_status st = llmt_job_create_from_json(ctx, json, strlen(json), &o, &j);
    snprintf(msg, cap, "%s", st == LLMT_OK ? "" : llmt_context_last_error(ctx));
    llmt_job_destroy(j);
    return st;
}

static void refused(const char *extra, const char *key)
{
    char msg[2048];
    llmt_status st = create(extra, msg, sizeof msg);
    CHECK_STATUS(st, LLMT_ERR_UNSUPPORTED);
    CHECK(strstr(msg, key) != NULL);
    if (st != LLMT_ERR_UNSUPPORTED || !strstr(msg, key))
        fprintf(stderr, "  %s: expected a refusal naming %s, got: %s\n", extra, key, msg);
}

static void not_refused(const char *extra, const char *key)
{
    char msg[2048];
    create(extra, msg, sizeof msg);
    CHECK(strstr(msg, key) == NULL);
    if (strstr(msg, key))
        fprintf(stderr, "  %s: refused naming %s: %s\n", extra, key, msg);
}

/* keep_last 0 keeps every step: a keep_every beside it keeps nothing more */
static void test_keep_every(void)
{
    refused(", \"checkpoint\": {\"tiers\": [{\"kind\": \"local\", \"keep_last\": 0, "
            "\"keep_every\": 5}]}",
            "checkpoint.tiers[0].keep_every");
    refused(", \"checkpoint\": {\"tiers\": [{\"kind\": \"local\"}, {\"kind\": \"durable\", "
            "\"path\": \"d\", \"keep_last\": 0, \"keep_every\": 4}]}",
            "checkpoint.tiers[1].keep_every");
    not_refused(", \"checkpoint\": {\"tiers\": [{\"kind\": \"local\", \"keep_last\": 2, "
                "\"keep_every\": 5}]}",
                "keep_every");
    not_refused(", \"checkpoint\": {\"tiers\": [{\"kind\": \"local\", \"keep_last\": 0}]}",
                "keep_");
}

/* an interval of train.steps (2 here) or more saves the last step only:
 * a rollback would find no checkpoint, and no save could be async */
static void test_intervals(void)
{
    refused(", \"checkpoint\": {\"interval\": 2}, \"fault_tolerance\": {\"anomaly\": "
            "{\"policy\": \"rollback\"}}",
            "fault_tolerance.anomaly.policy");
    not_refused(", \"checkpoint\": {\"interval\": 1}, \"fault_tolerance\": {\"anomaly\": "
                "{\"policy\": \"rollback\"}}",
                "fault_tolerance.anomaly.policy");
    /* only saves before the last may be async: the last is synchronous */
    refused(", \"checkpoint\": {\"interval\": 2, \"async\": true}", "checkpoint.async");
    refused(", \"checkpoint\": {\"interval\": 5, \"async\": true}", "checkpoint.async");
    not_refused(", \"checkpoint\": {\"interval\": 1, \"async\": true}", "checkpoint.async");
    not_refused(", \"checkpoint\": {\"interval\": 2, \"async\": false}", "checkpoint.async");
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/llmt-job-refuse-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    if (llmt_context_create(NULL, &ctx) != LLMT_OK)
        return 1;
    test_keep_every();
    test_intervals();
    llmt_context_destroy(ctx);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (check_failures == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    printf("test_job_refuse: %d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}
