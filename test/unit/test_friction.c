/* ABI friction an outside user found while writing the bindings (issue 21):
 * the thread's last failure (llmt_last_error), _init for llmt_batch and
 * llmt_step_metrics, NaN/Inf weights refused on import, a non-finite
 * evaluation is an error, one step-numbering convention for lr_at and the
 * metrics, and the trainer's GPT-style defaults. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"

static llmt_model *tiny_model(llmt_context *ctx)
{
    llmt_model_config c;
    llmt_model_config_init(&c, sizeof c);
    c.vocab_size = 64;
    c.max_seq_len = 16;
    c.layers = 1;
    c.width = 16;
    c.heads = 2;
    llmt_model *m = NULL;
    CHECK_STATUS(llmt_model_create(ctx, &c, &m), LLMT_OK);
    return m;
}

static void *other_thread(void *arg)
{
    llmt_context *ctx = arg;
    llmt_model_config c;
    llmt_model_config_init(&c, sizeof c);
    c.width = 30;
    c.heads = 7; /* does not divide */
    llmt_model *m = NULL;
    llmt_status s = llmt_model_create(ctx, &c, &m);
    static char seen[1024];
    snprintf(seen, sizeof seen, "%d %s", (int)s, llmt_last_error());
    return seen;
}

static void test_last_error(llmt_context *ctx)
{
    llmt_last_error_clear();
    CHECK_EQ_INT(llmt_last_error_status(), LLMT_OK);
    CHECK(strcmp(llmt_last_error(), "") == 0);

    /* A creation failure lands on the context and on the thread. */
    llmt_model_config c;
    llmt_model_config_init(&c, sizeof c);
    c.width = 30;
    c.heads = 7;
    llmt_model *bad = NULL;
    llmt_status s = llmt_model_create(ctx, &c, &bad);
    CHECK(s != LLMT_OK);
    CHECK_EQ_INT(llmt_last_error_status(), s);
    CHECK(strcmp(llmt_last_error(), llmt_context_last_error(ctx)) == 0);
    CHECK(strlen(llmt_last_error()) > 0);

    /* trainer_create puts its detail on the model: the thread has it too,
     * so a binding need not know which handle got it. */
    llmt_model *m = tiny_model(ctx);
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.seq_len = 1000; /* > max_seq_len 16 */
    llmt_trainer *tr = NULL;
    s = llmt_trainer_create(m, &o, &tr);
    CHECK(s != LLMT_OK);
    CHECK_EQ_INT(llmt_last_error_status(), s);
    CHECK(strcmp(llmt_last_error(), llmt_model_last_error(m)) == 0);
    char mine[1024];
    snprintf(mine, sizeof mine, "%s", llmt_last_error());

    /* A success leaves it; another thread has its own. */
    int32_t n;
    int64_t numel;
    CHECK_STATUS(llmt_model_param_count(m, &n, &numel), LLMT_OK);
    CHECK(strcmp(llmt_last_error(), mine) == 0);
    pthread_t th;
    void *ret = NULL;
    CHECK(pthread_create(&th, NULL, other_thread, ctx) == 0);
    pthread_join(th, &ret);
    CHECK(ret && strncmp((char *)ret, "0 ", 2) != 0); /* it failed there */
    CHECK(ret && strstr((char *)ret, mine) == NULL);
    CHECK(strcmp(llmt_last_error(), mine) == 0);

    /* A spec error names the key. */
    const char *js = "{\"model\": {\"layers\": 2, \"no_such_key\": 1}}";
    llmt_spec *sp = NULL;
    s = llmt_spec_parse_json(ctx, js, strlen(js), &sp);
    CHECK_EQ_INT(s, LLMT_ERR_SPEC);
    CHECK(strstr(llmt_last_error(), "no_such_key") != NULL);
    llmt_spec_destroy(sp);

    llmt_last_error_clear();
    CHECK_EQ_INT(llmt_last_error_status(), LLMT_OK);
    CHECK(strcmp(llmt_last_error(), "") == 0);
    llmt_model_destroy(m);
}

static void test_inits(void)
{
    llmt_batch b;
    memset(&b, 0xab, sizeof b);
    CHECK_STATUS(llmt_batch_init(&b, sizeof b), LLMT_OK);
    CHECK_EQ_INT(b.struct_size, sizeof b);
    CHECK(b.inputs == NULL && b.targets == NULL);
    CHECK_EQ_INT(b.sequences, 0);
    CHECK_EQ_INT(b.seq_len, 0);
    llmt_step_metrics mt;
    memset(&mt, 0xab, sizeof mt);
    CHECK_STATUS(llmt_step_metrics_init(&mt, sizeof mt), LLMT_OK);
    CHECK_EQ_INT(mt.struct_size, sizeof mt);
    CHECK_EQ_INT(mt.step, 0);
    CHECK(mt.loss == 0.0f && mt.tokens == 0);
    CHECK_STATUS(llmt_batch_init(NULL, sizeof b), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_batch_init(&b, 2), LLMT_ERR_STRUCT_SIZE);
    CHECK_STATUS(llmt_step_metrics_init(NULL, sizeof mt), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_step_metrics_init(&mt, 2), LLMT_ERR_STRUCT_SIZE);
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_BATCH), sizeof b);
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_STEP_METRICS), sizeof mt);
}

static void fill_batch(int32_t *in, int32_t *tg, int n)
{
    for (int i = 0; i < n; i++) {
        in[i] = (i * 7 + 3) % 64;
        tg[i] = (i * 7 + 10) % 64;
    }
}

static void test_nan_import(llmt_context *ctx, const char *dir)
{
    char st[512], lc[512];
    snprintf(st, sizeof st, "%s/nan.safetensors", dir);
    snprintf(lc, sizeof lc, "%s/nan.bin", dir);
    llmt_model *m = tiny_model(ctx);
    llmt_tensor v;
    const char *name = NULL;
    CHECK_STATUS(llmt_model_param(m, 3, &name, &v), LLMT_OK);
    char pname[128];
    snprintf(pname, sizeof pname, "%s", name ? name : "?");
    ((float *)v.data)[1] = NAN;
    CHECK_STATUS(llmt_model_save_safetensors(m, st), LLMT_OK);
    CHECK_STATUS(llmt_model_export_llmc(m, lc), LLMT_OK);

    llmt_model *fresh = tiny_model(ctx);
    llmt_tensor fv;
    CHECK_STATUS(llmt_model_param(fresh, 0, NULL, &fv), LLMT_OK);
    float before = ((float *)fv.data)[0];
    llmt_status s = llmt_model_load_safetensors(fresh, st);
    CHECK_EQ_INT(s, LLMT_ERR_NUMERIC);
    CHECK(strstr(llmt_model_last_error(fresh), pname) != NULL);
    CHECK(strstr(llmt_last_error(), pname) != NULL);
    /* unchanged: tensor 0 would have been read before tensor 3 */
    CHECK(((float *)fv.data)[0] == before);

    llmt_model *imp = NULL;
    s = llmt_model_import_llmc(ctx, lc, &imp);
    CHECK_EQ_INT(s, LLMT_ERR_NUMERIC);
    CHECK(imp == NULL);
    CHECK(strstr(llmt_context_last_error(ctx), pname) != NULL);

    /* the finite file still loads */
    ((float *)v.data)[1] = 0.5f;
    remove(st);
    CHECK_STATUS(llmt_model_save_safetensors(m, st), LLMT_OK);
    CHECK_STATUS(llmt_model_load_safetensors(fresh, st), LLMT_OK);
    remove(st);
    remove(lc);
    llmt_model_destroy(fresh);
    llmt_model_destroy(m);
}

static void test_evaluate_nan(llmt_context *ctx)
{
    llmt_model *m = tiny_model(ctx);
    llmt_tensor v;
    CHECK_STATUS(llmt_model_param(m, 0, NULL, &v), LLMT_OK);
    ((float *)v.data)[0] = NAN; /* token 0's embedding */
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = 2;
    o.seq_len = 8;
    o.threads = 1;
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
    int32_t in[16], tg[16];
    fill_batch(in, tg, 16);
    in[0] = 0;
    llmt_batch b;
    llmt_batch_init(&b, sizeof b);
    b.inputs = in;
    b.targets = tg;
    b.sequences = 2;
    b.seq_len = 8;
    float loss = 0;
    CHECK_STATUS(llmt_trainer_evaluate(tr, &b, &loss), LLMT_ERR_NUMERIC);
    CHECK(!isfinite(loss));
    CHECK(strstr(llmt_trainer_last_error(tr), "not finite") != NULL);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
}

static void test_lr_convention(llmt_context *ctx)
{
    llmt_model *m = tiny_model(ctx);
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = 2;
    o.seq_len = 8;
    o.threads = 1;
    o.lr = 1e-2f;
    o.warmup_steps = 3;
    o.total_steps = 10;
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
    float lr = -1;
    CHECK_STATUS(llmt_trainer_lr_at(tr, 0, &lr), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_trainer_last_error(tr), "numbered from 1") != NULL);
    CHECK_STATUS(llmt_trainer_lr_at(tr, 1, &lr), LLMT_OK);
    CHECK_CLOSE(lr, 1e-2 / 3, 1e-6, 0); /* warmup: step 1 of 3 */
    CHECK_STATUS(llmt_trainer_lr_at(tr, 3, &lr), LLMT_OK);
    CHECK_CLOSE(lr, 1e-2, 1e-6, 0); /* warmup done */
    CHECK_STATUS(llmt_trainer_lr_at(tr, 11, &lr), LLMT_OK);
    CHECK_CLOSE(lr, 0.0, 0, 1e-9); /* past total_steps: min_lr */
    int32_t in[16], tg[16];
    fill_batch(in, tg, 16);
    llmt_batch b;
    llmt_batch_init(&b, sizeof b);
    b.inputs = in;
    b.targets = tg;
    b.sequences = 2;
    b.seq_len = 8;
    for (int i = 1; i <= 5; i++) {
        llmt_step_metrics mt;
        llmt_step_metrics_init(&mt, sizeof mt);
        CHECK_STATUS(llmt_trainer_step(tr, &b, &mt), LLMT_OK);
        CHECK_EQ_INT(mt.step, i);
        int64_t done = -1;
        llmt_trainer_get_step(tr, &done);
        CHECK_EQ_INT(done, mt.step);
        CHECK_STATUS(llmt_trainer_lr_at(tr, mt.step, &lr), LLMT_OK);
        CHECK(lr == mt.lr); /* one convention: the same number */
    }
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
}

static void test_defaults_preset(void)
{
    /* The header's trainer summary promises this preset. */
    llmt_trainer_opts o;
    CHECK_STATUS(llmt_trainer_opts_init(&o, sizeof o), LLMT_OK);
    CHECK_EQ_INT(o.schedule, LLMT_LR_COSINE);
    CHECK_CLOSE(o.beta2, 0.95, 0, 1e-7);
    CHECK_CLOSE(o.weight_decay, 0.1, 0, 1e-7);
    CHECK_CLOSE(o.grad_clip, 1.0, 0, 1e-7);
    CHECK_EQ_INT(o.total_steps, 1000);
    const char *root = getenv("LLMT_SOURCE_ROOT");
    if (!root)
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s/include/llmtrain.h", root);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    CHECK(strstr(text, "defaults (llmt_trainer_opts_init) are a GPT-style") != NULL);
    CHECK(strstr(text, "beta2 0.95 (torch: 0.999)") != NULL);
}

int main(void)
{
    llmt_context *ctx = NULL;
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_level = LLMT_LOG_OFF;
    if (llmt_context_create(&co, &ctx) != LLMT_OK)
        return 1;
    char dir[] = "/tmp/llmt-friction-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    test_last_error(ctx);
    test_inits();
    test_nan_import(ctx, dir);
    test_evaluate_nan(ctx);
    test_lr_convention(ctx);
    test_defaults_preset();
    rmdir(dir);
    llmt_context_destroy(ctx);
    return check_exit("test_friction");
}
