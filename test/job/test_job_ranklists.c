/* The per-rank lists of the fault-tolerance checks at 5000 ranks (Llama 3
 * scale is 16k): every rank whose parameter hash disagrees with its replica
 * group's majority, the replay's "sdc_replay" metrics line with every
 * rank's hashes, the brief form the log lines take, and the straggler
 * report accepted above 4096 ranks. Fixed buffers cut these lists at ~100
 * ranks (the bad ranks), ~215 (the replay's hashes) and refused the
 * straggler check above 4096 ranks; a cut array is read by tooling as the
 * full list, so each array here is parsed as JSON and checked rank by
 * rank against what the test itself derives. The lists' growing string
 * (llmt__sbuf) comes from core/internal.h, as lib/job uses it: it was
 * lib/comm's. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/internal.h"
#include "job/job.h"

#define WORLD 5000
#define GROUP 5 /* ranks of a replica group: rank r is in group r / GROUP */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Groups g % 7 == 1: every member differs (no majority, all named);
 * groups g % 3 == 0 otherwise: members 2 and 4 corrupted (named). */
static int no_majority(int32_t g)
{
    return g % 7 == 1;
}

static int expect_bad(int32_t r)
{
    int32_t g = r / GROUP, k = r % GROUP;
    return no_majority(g) || (g % 3 == 0 && (k == 2 || k == 4));
}

static cJSON *parse_array(const char *body)
{
    size_t n = strlen(body ? body : "");
    char *t = malloc(n + 3);
    if (!t)
        return NULL;
    snprintf(t, n + 3, "[%s]", body ? body : "");
    cJSON *a = cJSON_Parse(t);
    free(t);
    return a;
}

/* The array holds exactly the ranks r < world with want(r), in order. */
static void check_ranks(const cJSON *a, int (*want)(int32_t), int32_t world)
{
    CHECK(cJSON_IsArray(a));
    int32_t r = 0, bad = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        while (r < world && !want(r))
            r++;
        bad += !cJSON_IsNumber(e) || r >= world || e->valueint != r;
        r++;
    }
    while (r < world && !want(r))
        r++;
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(r, world); /* no wanted rank left out after the last */
}

static void test_sdc_bad_ranks(void)
{
    uint64_t *all = malloc(WORLD * sizeof *all);
    int32_t *grp = malloc(WORLD * sizeof *grp), *maj = malloc(2 * WORLD * sizeof *maj);
    for (int32_t r = 0; r < WORLD; r++) {
        int32_t g = r / GROUP;
        grp[r] = g;
        all[r] = no_majority(g) ? mix((uint64_t)r) : mix(1000000 + (uint64_t)g);
        if (expect_bad(r) && !no_majority(g))
            all[r] ^= 1ull << (r % 64); /* one flipped bit, a different one each */
    }
    llmt__job_replica_majorities(all, grp, WORLD, maj, maj + WORLD);
    int32_t want = 0, wrong_maj = 0;
    for (int32_t r = 0; r < WORLD; r++) {
        want += expect_bad(r);
        /* member 0 of a group with a majority is healthy: its first holder */
        int32_t m = no_majority(r / GROUP) ? -1 : r / GROUP * GROUP;
        wrong_maj += maj[r] != m;
    }
    CHECK_EQ_INT(wrong_maj, 0);
    llmt__sbuf s = {0};
    int32_t n = llmt__job_sdc_bad_ranks(&s, all, maj, WORLD);
    CHECK(!s.oom);
    CHECK_EQ_INT(n, want);
    CHECK(want > 1000); /* far past the 512-byte list's ~100 ranks */
    cJSON *a = parse_array(s.p);
    CHECK(a != NULL);
    CHECK_EQ_INT(cJSON_GetArraySize(a), want);
    check_ranks(a, expect_bad, WORLD);
    cJSON_Delete(a);
    /* the log's form: the first 32, then how many more */
    char brief[320], tail[64];
    llmt__job_list_brief(brief, sizeof brief, s.p, 32);
    snprintf(tail, sizeof tail, " and %d more", (int)want - 32);
    CHECK(strncmp(brief, "2,4,5,6,7,8,9,17,19,", 20) == 0);
    CHECK(strlen(brief) > strlen(tail) && !strcmp(brief + strlen(brief) - strlen(tail), tail));
    free(s.p);
    free(all);
    free(grp);
    free(maj);
}

static int every_third(int32_t r)
{
    return r % 3 == 0;
}

static int every_rank(int32_t r)
{
    (void)r;
    return 1;
}

/* The whole "sdc_replay" line, as a job writes it into metrics.jsonl. */
static void test_replay_line(void)
{
    llmt_job *j = calloc(1, sizeof *j);
    j->world = WORLD;
    j->jsonl = tmpfile();
    uint64_t *orig = malloc(WORLD * sizeof *orig), *rep = malloc(WORLD * sizeof *rep);
    for (int32_t r = 0; r < WORLD; r++) {
        orig[r] = mix((uint64_t)r);
        rep[r] = every_third(r) ? mix((uint64_t)r + 7919) : orig[r];
    }
    char brief[320];
    int32_t n =
        llmt__job_sdc_replay_line(j, 12, 8, orig, rep, 1, "replayed", brief, sizeof brief);
    CHECK_EQ_INT(n, (WORLD + 2) / 3);
    long len = ftell(j->jsonl);
    CHECK(len > 2 * 19 * WORLD); /* both hash arrays, whole */
    char *line = calloc((size_t)len + 1, 1);
    rewind(j->jsonl);
    CHECK(fread(line, 1, (size_t)len, j->jsonl) == (size_t)len);
    CHECK(len > 0 && line[len - 1] == '\n' && strchr(line, '\n') == line + len - 1);
    cJSON *o = cJSON_Parse(line);
    CHECK(o != NULL);
    const cJSON *ev = cJSON_GetObjectItem(o, "event");
    CHECK(cJSON_IsString(ev) && !strcmp(ev->valuestring, "sdc_replay"));
    CHECK_EQ_INT(cJSON_GetObjectItem(o, "step") ? cJSON_GetObjectItem(o, "step")->valueint : -1,
                 12);
    CHECK_EQ_INT(cJSON_GetObjectItem(o, "from") ? cJSON_GetObjectItem(o, "from")->valueint : -1,
                 8);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(o, "agree")));
    check_ranks(cJSON_GetObjectItem(o, "not_reproducible"), every_third, WORLD);
    const char *keys[2] = {"xxh", "replay_xxh"};
    for (int k = 0; k < 2; k++) {
        const cJSON *a = cJSON_GetObjectItem(o, keys[k]);
        CHECK(cJSON_IsArray(a));
        CHECK_EQ_INT(cJSON_GetArraySize(a), WORLD);
        int32_t r = 0, wrong = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a)
        {
            char want[24];
            snprintf(want, sizeof want, "%016llx", (unsigned long long)(k ? rep[r] : orig[r]));
            wrong += !cJSON_IsString(e) || strcmp(e->valuestring, want);
            r++;
        }
        CHECK_EQ_INT(wrong, 0);
    }
    cJSON_Delete(o);
    char tail[64];
    snprintf(tail, sizeof tail, " and %d more", (int)n - 32);
    CHECK(strncmp(brief, "0,3,6,9,", 8) == 0);
    CHECK(!strcmp(brief + strlen(brief) - strlen(tail), tail));
    free(line);
    fclose(j->jsonl);
    free(j);
    free(orig);
    free(rep);
}

static void test_rank_list_and_brief(void)
{
    uint8_t *flag = malloc(WORLD);
    memset(flag, 1, WORLD);
    llmt__sbuf s = {0};
    CHECK_EQ_INT(llmt__job_rank_list(&s, flag, WORLD), WORLD);
    cJSON *a = parse_array(s.p);
    CHECK_EQ_INT(cJSON_GetArraySize(a), WORLD);
    check_ranks(a, every_rank, WORLD);
    cJSON_Delete(a);
    free(s.p);
    free(flag);
    char b[64];
    llmt__job_list_brief(b, sizeof b, NULL, 32);
    CHECK(!strcmp(b, ""));
    llmt__job_list_brief(b, sizeof b, "1,22,333", 32);
    CHECK(!strcmp(b, "1,22,333"));
    llmt__job_list_brief(b, sizeof b, "1,22,333", 2);
    CHECK(!strcmp(b, "1,22 and 1 more"));
    /* a short buffer keeps whole ranks only, and counts the rest */
    llmt__job_list_brief(b, 40, "1000,1001,1002,1003,1004", 32);
    CHECK(!strcmp(b, "1000 and 4 more"));
}

/* fault_tolerance.straggler.interval at 5000 ranks: accepted (it was
 * refused above 4096), and the job's streak counts sized by the world. */
static void test_straggler_accepted(void)
{
    static const char *spec =
        "{\"name\": \"st\", \"model\": {\"arch\": \"gpt2\", \"layers\": 1, \"hidden\": 32,"
        " \"heads\": 2, \"vocab\": 320, \"seq_len\": 16},"
        " \"batch\": {\"micro\": 2, \"grad_accum\": 1}, \"train\": {\"steps\": 4},"
        " \"data\": {\"train\": \"x\", \"tokenizer\": {\"kind\": \"byte\"}},"
        " \"hardware\": {\"gpu\": \"cpu\"},"
        " \"fault_tolerance\": {\"straggler\": {\"interval\": 2}}}";
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    llmt_spec *sp = NULL;
    CHECK_STATUS(llmt_spec_parse_json(ctx, spec, strlen(spec), &sp), LLMT_OK);
    llmt_job *j = calloc(1, sizeof *j);
    j->ctx = ctx;
    j->spec = sp;
    j->world = WORLD;
    llmt_status st = sp ? llmt__job_check_spec(j) : LLMT_ERR_SPEC;
    if (st != LLMT_OK)
        fprintf(stderr, "refused at %d ranks: %s\n", WORLD, j->err.msg);
    CHECK_STATUS(st, LLMT_OK);
    free(j);
    llmt_spec_destroy(sp);
    llmt_context_destroy(ctx);
}

/* The lists' growing string (core/internal.h, shared with lib/comm's
 * recorder dumps): 256 bytes first, doubled as needed, the text whole;
 * once it could not grow (oom) nothing more is appended. */
static void test_sbuf(void)
{
    llmt__sbuf s = {0};
    llmt__sb_printf(&s, "%s", "");
    CHECK(s.p != NULL && s.len == 0 && s.cap == 256 && !strcmp(s.p, ""));
    char big[700];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    llmt__sb_printf(&s, "%d,", 12);
    llmt__sb_printf(&s, "%s", big);
    CHECK_EQ_INT((int)s.len, 3 + 699);
    CHECK_EQ_INT((int)s.cap, 1024);
    CHECK(!strncmp(s.p, "12,xxx", 6) && strlen(s.p) == s.len && !s.oom);
    s.oom = 1;
    llmt__sb_printf(&s, "more");
    CHECK_EQ_INT((int)s.len, 702);
    free(s.p);
}

int main(void)
{
    test_sbuf();
    test_sdc_bad_ranks();
    test_replay_line();
    test_rank_list_and_brief();
    test_straggler_accepted();
    return check_exit("job-ranklists");
}
