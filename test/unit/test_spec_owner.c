/* A plan or job owns the spec it was made from (issue 21, item found by the
 * bindings): its copy is allocated through the plan's or job's context, not
 * the spec's, so a C caller may destroy the spec AND the spec's context
 * right after creating the plan or job. Each context here has its own
 * counting allocator that fails the test when used after its context is
 * destroyed, or when it frees memory it did not allocate. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"

typedef struct counting {
    const char *name;
    long live;        /* blocks allocated and not yet freed */
    long bytes;       /* their bytes */
    int dead;         /* its context was destroyed */
    long after_death; /* calls made after that */
} counting;

static void *c_alloc(void *user, size_t size, size_t align)
{
    counting *c = user;
    if (c->dead)
        c->after_death++;
    void *p = NULL;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1))
        return NULL;
    c->live++;
    c->bytes += (long)size;
    return p;
}

static void c_free(void *user, void *ptr, size_t size)
{
    counting *c = user;
    if (!ptr)
        return;
    if (c->dead)
        c->after_death++;
    c->live--;
    c->bytes -= (long)size;
    free(ptr);
}

static llmt_context *ctx_with(counting *c)
{
    llmt_allocator a = {sizeof a, c, c_alloc, c_free};
    llmt_context_opts o;
    llmt_context_opts_init(&o, sizeof o);
    o.log_level = LLMT_LOG_ERROR;
    o.allocator = &a;
    llmt_context *ctx = NULL;
    CHECK_STATUS(llmt_context_create(&o, &ctx), LLMT_OK);
    return ctx;
}

static char tmp[512];

static void spec_json(char *buf, size_t cap)
{
    snprintf(buf, cap,
             "{\"name\": \"owner\", \"model\": {\"arch\": \"gpt2\", \"layers\": 1, "
             "\"hidden\": 16, \"heads\": 2, \"vocab\": 260, \"seq_len\": 8}, "
             "\"batch\": {\"micro\": 2, \"grad_accum\": 1}, "
             "\"train\": {\"steps\": 2, \"seed\": 1, \"eval_interval\": 0, "
             "\"log_interval\": 0, \"threads\": 1, \"sample_tokens\": 0}, "
             "\"data\": {\"train\": \"%s/corpus\", \"tokenizer\": {\"kind\": \"byte\"}}, "
             "\"checkpoint\": {\"interval\": 0, \"dir\": \"%s/ckpt\"}, "
             "\"hardware\": {\"gpu\": \"cpu\"}}",
             tmp, tmp);
}

/* plan_create and plan_auto: the spec and its context go first. */
static void test_plan(int use_auto)
{
    counting ca = {"spec ctx", 0, 0, 0, 0}, cb = {"plan ctx", 0, 0, 0, 0};
    llmt_context *a = ctx_with(&ca), *b = ctx_with(&cb);
    long a0 = ca.live, a0b = ca.bytes, b0 = cb.live;
    char json[2048];
    spec_json(json, sizeof json);
    llmt_spec *sp = NULL;
    CHECK_STATUS(llmt_spec_parse_json(a, json, strlen(json), &sp), LLMT_OK);
    CHECK(ca.live > a0);
    llmt_plan *p = NULL;
    if (use_auto)
        CHECK_STATUS(llmt_plan_auto(b, sp, 1, NULL, &p), LLMT_OK);
    else
        CHECK_STATUS(llmt_plan_create(b, sp, 1, &p), LLMT_OK);
    llmt_spec_destroy(sp);
    /* nothing of the plan lives in the spec's context */
    CHECK_EQ_INT(ca.live, a0);
    CHECK_EQ_INT(ca.bytes, a0b);
    llmt_context_destroy(a);
    ca.dead = 1;
    int32_t w = 0;
    CHECK_STATUS(llmt_plan_world_size(p, &w), LLMT_OK);
    CHECK_EQ_INT(w, 1);
    size_t need = 0;
    llmt_plan_to_json(p, NULL, 0, &need);
    CHECK(need > 0);
    llmt_plan *r = NULL; /* a reshape copies the plan's own spec */
    llmt_plan_reshape(p, 1, &r);
    llmt_plan_destroy(r);
    llmt_plan_destroy(p);
    CHECK_EQ_INT(ca.after_death, 0);
    CHECK_EQ_INT(cb.live, b0); /* the plan freed what it took, from b */
    llmt_context_destroy(b);
}

/* A job: spec and spec's context destroyed before the job runs. */
static void test_job(void)
{
    counting ca = {"spec ctx", 0, 0, 0, 0}, cb = {"job ctx", 0, 0, 0, 0};
    llmt_context *a = ctx_with(&ca), *b = ctx_with(&cb);
    long a0 = ca.live;
    char json[2048], run[700];
    spec_json(json, sizeof json);
    snprintf(run, sizeof run, "%s/run", tmp);
    llmt_spec *sp = NULL;
    CHECK_STATUS(llmt_spec_parse_json(a, json, strlen(json), &sp), LLMT_OK);
    llmt_job_opts o;
    llmt_job_opts_init(&o, sizeof o);
    o.run_dir = run;
    llmt_job *job = NULL;
    llmt_status s = llmt_job_create(b, sp, &o, &job);
    CHECK_STATUS(s, LLMT_OK);
    if (s != LLMT_OK)
        fprintf(stderr, "job: %s\n", llmt_context_last_error(b));
    llmt_spec_destroy(sp);
    CHECK_EQ_INT(ca.live, a0);
    llmt_context_destroy(a);
    ca.dead = 1;
    if (job) {
        llmt_job_metrics m;
        memset(&m, 0, sizeof m);
        m.struct_size = sizeof m;
        CHECK_STATUS(llmt_job_run(job, 0, &m), LLMT_OK);
        CHECK_EQ_INT(m.step, 2);
        llmt_job_info info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        CHECK_STATUS(llmt_job_get_info(job, &info), LLMT_OK);
        CHECK(info.name && strcmp(info.name, "owner") == 0);
    }
    llmt_job_destroy(job);
    CHECK_EQ_INT(ca.after_death, 0);
    llmt_context_destroy(b);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/llmt-owner-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    /* a corpus the filters keep: a seeded Markov source, 4 documents */
    char path[700];
    snprintf(path, sizeof path, "%s/corpus", tmp);
    mkdir(path, 0755);
    static char text[6000];
    for (int i = 0; i < 4; i++) {
        double h;
        CHECK_STATUS(llmt_data_synth_markov((uint64_t)i + 1, 27, 4, text, sizeof text, &h),
                     LLMT_OK);
        snprintf(path, sizeof path, "%s/corpus/doc%d.txt", tmp, i);
        FILE *f = fopen(path, "w");
        if (f) {
            fwrite(text, 1, sizeof text, f);
            fclose(f);
        }
    }
    test_plan(0);
    test_plan(1);
    test_job();
    char cmd[800];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_exit("spec-owner");
}
