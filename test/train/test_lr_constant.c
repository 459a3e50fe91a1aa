/* A constant learning-rate schedule reads lr and warmup_steps only
 * (lr_at): min_lr and total_steps set beside it are refused naming the
 * field, its value and the schedule (they were accepted and ignored), and
 * a checkpoint whose schedule text carries the values a job once wrote
 * there (min_lr = min_lr_ratio * lr, total = train.steps) still resumes as
 * the same schedule, with no warning; one with another lr still warns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"
#include "small_model.h"

static llmt_context *ctx;
static char dir[256];
static int warned; /* "learning-rate schedule" warnings seen */

static void on_log(void *user, llmt_log_level level, const char *module, const char *msg)
{
    (void)user;
    (void)module;
    if (level >= LLMT_LOG_WARN && strstr(msg, "learning-rate schedule"))
        __atomic_add_fetch(&warned, 1, __ATOMIC_SEQ_CST);
}

static llmt_model *small_model(void)
{
    llmt_model_config mc;
    small_model_config(&mc, 64, 0, 16, 1, 16, 2, 0);
    return small_model_create(ctx, &mc);
}

static void constant_opts(llmt_trainer_opts *o)
{
    llmt_trainer_opts_init(o, sizeof *o);
    o->schedule = LLMT_LR_CONSTANT;
    o->micro_batch = 1;
    o->seq_len = 8;
    o->lr = 1e-3f;
    o->threads = 1;
}

/* `call` fails with INVALID_ARGUMENT and the model's message holds every
 * needle. */
static void refused(llmt_model *m, const llmt_trainer_opts *o, const char *const *needle)
{
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt_trainer_create(m, o, &tr), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(tr == NULL);
    const char *msg = llmt_model_last_error(m);
    for (; *needle; needle++)
        small_model_names("", msg, *needle);
    llmt_trainer_destroy(tr);
}

static void test_refusals(llmt_model *m)
{
    llmt_trainer_opts o;
    constant_opts(&o);
    o.min_lr = 1e-4f;
    refused(m, &o, (const char *const[]){"min_lr", "0.0001", "LLMT_LR_CONSTANT", NULL});
    constant_opts(&o);
    o.total_steps = 12;
    refused(m, &o, (const char *const[]){"total_steps", "12", "LLMT_LR_CONSTANT", NULL});

    /* warmup takes effect with a constant schedule: accepted, and read */
    llmt_trainer *tr = NULL;
    constant_opts(&o);
    o.warmup_steps = 4;
    CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
    float lr1 = 0, lr9 = 0;
    CHECK_STATUS(llmt_trainer_lr_at(tr, 1, &lr1), LLMT_OK);
    CHECK_STATUS(llmt_trainer_lr_at(tr, 9, &lr9), LLMT_OK);
    CHECK_CLOSE(lr1, 1e-3 / 4, 1e-6, 0);
    CHECK_CLOSE(lr9, 1e-3, 1e-6, 0);
    llmt_trainer_destroy(tr);

    /* the same fields with a decaying schedule take effect */
    const int32_t decaying[3] = {LLMT_LR_COSINE, LLMT_LR_LINEAR, LLMT_LR_WSD};
    for (int k = 0; k < 3; k++) {
        constant_opts(&o);
        o.schedule = decaying[k];
        o.min_lr = 1e-4f;
        o.total_steps = 12;
        tr = NULL;
        CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
        float end = 0;
        CHECK_STATUS(llmt_trainer_lr_at(tr, 13, &end), LLMT_OK);
        CHECK_CLOSE(end, 1e-4, 1e-6, 0);
        llmt_trainer_destroy(tr);
    }
}

/* Save a constant trainer's state with `text` as its schedule (NULL: the
 * trainer's own), read it back with a fresh constant trainer and return
 * the schedule warnings the read logged. */
static int resume_warnings(llmt_model *m, int64_t step, const char *text)
{
    llmt_trainer_opts o;
    constant_opts(&o);
    o.warmup_steps = 2;
    llmt_trainer *tr = NULL, *back = NULL;
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
    CHECK_STATUS(llmt_trainer_create(m, &o, &back), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_create(ctx, dir, NULL, &ck), LLMT_OK);
    int before = -1;
    if (tr && back && ck) {
        CHECK_STATUS(llmt_trainer_set_step(tr, step), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_begin(ck, step), LLMT_OK);
        CHECK_STATUS(llmt_trainer_ckpt_add(tr, ck), LLMT_OK);
        if (text) /* re-setting a key replaces it */
            CHECK_STATUS(llmt_ckpt_set_kv(ck, "trainer.schedule", text), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_open_step(ck, step), LLMT_OK);
        char saved[256] = "";
        CHECK_STATUS(llmt_ckpt_get_kv(ck, "trainer.schedule", saved, sizeof saved, NULL),
                     LLMT_OK);
        if (text)
            CHECK(strcmp(saved, text) == 0);
        before = __atomic_load_n(&warned, __ATOMIC_SEQ_CST);
        CHECK_STATUS(llmt_trainer_ckpt_read(back, ck), LLMT_OK);
        int64_t got = -1;
        CHECK_STATUS(llmt_trainer_get_step(back, &got), LLMT_OK);
        CHECK_EQ_INT(got, step);
    }
    llmt_ckpt_destroy(ck);
    llmt_trainer_destroy(tr);
    llmt_trainer_destroy(back);
    return before < 0 ? -1 : __atomic_load_n(&warned, __ATOMIC_SEQ_CST) - before;
}

static void test_old_checkpoints(llmt_model *m)
{
    /* this trainer's own text: the same schedule */
    CHECK_EQ_INT(resume_warnings(m, 1, NULL), 0);
    /* a job's constant checkpoint from before min_lr and total_steps were
     * left at their defaults: min_lr 0.1 * lr, total = train.steps */
    CHECK_EQ_INT(resume_warnings(m, 2,
                                 "kind=0 lr=0.00100000005 min_lr=0.000100000005 "
                                 "warmup=2 total=12 decay_fraction=0.2"),
                 0);
    /* and from before decay_fraction was WSD's only (0 for every schedule) */
    CHECK_EQ_INT(resume_warnings(m, 3,
                                 "kind=0 lr=0.00100000005 min_lr=0.000100000005 "
                                 "warmup=2 total=12 decay_fraction=0"),
                 0);
    /* what a constant schedule reads still counts: another lr, another
     * warmup, another kind warn */
    CHECK_EQ_INT(resume_warnings(m, 4,
                                 "kind=0 lr=0.00200000009 min_lr=0 warmup=2 total=1000 "
                                 "decay_fraction=0.2"),
                 1);
    CHECK_EQ_INT(resume_warnings(m, 5,
                                 "kind=0 lr=0.00100000005 min_lr=0 warmup=3 total=1000 "
                                 "decay_fraction=0.2"),
                 1);
    CHECK_EQ_INT(resume_warnings(m, 6,
                                 "kind=1 lr=0.00100000005 min_lr=0 warmup=2 total=1000 "
                                 "decay_fraction=0.2"),
                 1);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/llmt_lr_constant_%d", (int)getpid());
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_fn = on_log;
    CHECK_STATUS(llmt_context_create(&co, &ctx), LLMT_OK);
    llmt_model *m = ctx ? small_model() : NULL;
    if (m) {
        test_refusals(m);
        test_old_checkpoints(m);
    }
    llmt_model_destroy(m);
    llmt_context_destroy(ctx);
    small_model_rmtree(dir);
    return check_exit("lr-constant");
}
