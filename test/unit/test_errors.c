/* The error convention on every module (doc/abi-conventions.md): a failing
 * call whose handle (or, for creation calls, context) is valid records its
 * own message, naming the call and the bad argument, so last_error never
 * shows an older, unrelated failure. Each case first provokes an unrelated
 * failure on the same handle, then fails an early check (NULL argument, bad
 * struct_size) and looks for the new message. A NULL handle only returns
 * the status. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"
#include "small_model.h"

static int cases;

/* `call` returns `want` and the handle's last error now holds `needle`. */
#define EXPECT_MSG(call, want, last, needle)                                  \
    do {                                                                      \
        CHECK_STATUS(call, want);                                             \
        const char *m_ = (last);                                              \
        int ok_ = m_ && strstr(m_, needle) != NULL;                           \
        CHECK(ok_);                                                           \
        if (!ok_)                                                             \
            fprintf(stderr, "  %s: last error is \"%s\", wanted \"%s\"\n",    \
                    #call, m_ ? m_ : "(null)", needle);                       \
        cases++;                                                              \
    } while (0)

/* An unrelated failure first, so a stale message would show. */
#define PROVOKE(call, last, needle)                                           \
    do {                                                                      \
        CHECK((call) != LLMT_OK);                                             \
        const char *m_ = (last);                                              \
        CHECK(m_ && m_[0] && !strstr(m_, needle));                            \
    } while (0)

static llmt_context *ctx;
static char dir[256];

static void test_data(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/a.tok", dir);

    /* shard writer creation: on the context */
    llmt_shard_writer *w = NULL;
    PROVOKE(llmt_shard_writer_create(ctx, path, 0, &w), llmt_context_last_error(ctx),
            "out is NULL");
    EXPECT_MSG(llmt_shard_writer_create(ctx, path, 100, NULL), LLMT_ERR_NULL_POINTER,
               llmt_context_last_error(ctx), "shard: writer_create: out is NULL");
    CHECK_STATUS(llmt_shard_writer_create(ctx, path, 100, &w), LLMT_OK);
    int32_t bad[1] = {1000};
    PROVOKE(llmt_shard_writer_add(w, bad, 1), llmt_shard_writer_last_error(w), "ids is NULL");
    EXPECT_MSG(llmt_shard_writer_add(w, NULL, 3), LLMT_ERR_NULL_POINTER,
               llmt_shard_writer_last_error(w), "shard: writer_add: ids is NULL");
    int32_t ids[64];
    for (int i = 0; i < 64; i++)
        ids[i] = i;
    CHECK_STATUS(llmt_shard_writer_add(w, ids, 64), LLMT_OK);
    CHECK_STATUS(llmt_shard_writer_finish(w), LLMT_OK);
    llmt_shard_writer_destroy(w);

    /* dataset */
    llmt_dataset *ds = NULL;
    char missing[512];
    snprintf(missing, sizeof missing, "%s/none/*.tok", dir);
    PROVOKE(llmt_dataset_open(ctx, missing, 1, &ds), llmt_context_last_error(ctx),
            "out is NULL");
    EXPECT_MSG(llmt_dataset_open(ctx, path, 1, NULL), LLMT_ERR_NULL_POINTER,
               llmt_context_last_error(ctx), "dataset: open: out is NULL");
    CHECK_STATUS(llmt_dataset_open(ctx, path, 1, &ds), LLMT_OK);
    if (!ds)
        return;
    int32_t buf[8];
    /* the binding writer's reproducer */
    PROVOKE(llmt_dataset_read(ds, 0, 60, buf, 8), llmt_dataset_last_error(ds), "ids is NULL");
    EXPECT_MSG(llmt_dataset_read(ds, 0, 0, NULL, 5), LLMT_ERR_NULL_POINTER,
               llmt_dataset_last_error(ds), "dataset: read: ids is NULL");
    PROVOKE(llmt_dataset_read(ds, 5, 0, buf, 1), llmt_dataset_last_error(ds), "info");
    EXPECT_MSG(llmt_dataset_get_info(ds, NULL), LLMT_ERR_NULL_POINTER,
               llmt_dataset_last_error(ds), "dataset: get_info: info is NULL");
    PROVOKE(llmt_dataset_read(ds, 5, 0, buf, 1), llmt_dataset_last_error(ds), "get_info");
    llmt_dataset_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = 4;
    EXPECT_MSG(llmt_dataset_get_info(ds, &info), LLMT_ERR_STRUCT_SIZE,
               llmt_dataset_last_error(ds), "get_info: info: struct_size");
    CHECK_STATUS(llmt_dataset_read(NULL, 0, 0, NULL, 5), LLMT_ERR_NULL_POINTER);

    /* loader: creation errors on the dataset */
    llmt_loader_opts lo;
    llmt_loader_opts_init(&lo, sizeof lo);
    lo.seq_len = 8;
    lo.micro_batch = 2;
    lo.prefetch = 0;
    PROVOKE(llmt_dataset_read(ds, 5, 0, buf, 1), llmt_dataset_last_error(ds), "create");
    EXPECT_MSG(llmt_loader_create(ds, &lo, NULL), LLMT_ERR_NULL_POINTER,
               llmt_dataset_last_error(ds), "loader: create: out is NULL");
    EXPECT_MSG(llmt_loader_create(ds, NULL, NULL), LLMT_ERR_NULL_POINTER,
               llmt_dataset_last_error(ds), "loader: create: opts is NULL");
    llmt_loader *l = NULL;
    CHECK_STATUS(llmt_loader_create(ds, &lo, &l), LLMT_OK);
    if (l) {
        size_t n = 0;
        int32_t in[16], tg[16];
        PROVOKE(llmt_loader_assign_shards(l, 7, 0, NULL, 0, &n), llmt_loader_last_error(l),
                "inputs");
        EXPECT_MSG(llmt_loader_next(l, NULL, tg, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_loader_last_error(l), "loader: next: inputs is NULL");
        EXPECT_MSG(llmt_loader_next(l, in, NULL, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_loader_last_error(l), "loader: next: targets is NULL");
        PROVOKE(llmt_loader_assign_shards(l, 7, 0, NULL, 0, &n), llmt_loader_last_error(l),
                "state");
        EXPECT_MSG(llmt_loader_get_state(l, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_loader_last_error(l), "loader: get_state: state is NULL");
        PROVOKE(llmt_loader_assign_shards(l, 7, 0, NULL, 0, &n), llmt_loader_last_error(l),
                "samples_per_epoch");
        EXPECT_MSG(llmt_loader_samples_per_epoch(l, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_loader_last_error(l), "loader: samples_per_epoch: out is NULL");
        PROVOKE(llmt_loader_assign_shards(l, 7, 0, NULL, 0, &n), llmt_loader_last_error(l),
                "n_out");
        EXPECT_MSG(llmt_loader_assign_shards(l, 0, 0, NULL, 0, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_loader_last_error(l), "loader: assign_shards: n_out is NULL");
        PROVOKE(llmt_loader_assign_shards(l, 7, 0, NULL, 0, &n), llmt_loader_last_error(l),
                "ckpt_add");
        EXPECT_MSG(llmt_loader_ckpt_add(l, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_loader_last_error(l), "loader: ckpt_add: ck is NULL");
        llmt_loader_destroy(l);
    }
    llmt_dataset_destroy(ds);
}

static void test_tok(void)
{
    llmt_tokenizer *t = NULL;
    PROVOKE(llmt_tokenizer_load(ctx, "/nonexistent/tok.txt", &t), llmt_context_last_error(ctx),
            "out is NULL");
    EXPECT_MSG(llmt_tokenizer_create_bytes(ctx, NULL), LLMT_ERR_NULL_POINTER,
               llmt_context_last_error(ctx), "tokenizer: create_bytes: out is NULL");
    CHECK_STATUS(llmt_tokenizer_create_bytes(ctx, &t), LLMT_OK);
    if (!t)
        return;
    int32_t bad[1] = {99999};
    size_t len = 0;
    PROVOKE(llmt_tokenizer_decode(t, bad, 1, NULL, 0, &len), llmt_tokenizer_last_error(t),
            "out is NULL");
    EXPECT_MSG(llmt_tokenizer_vocab_size(t, NULL), LLMT_ERR_NULL_POINTER,
               llmt_tokenizer_last_error(t), "tokenizer: vocab_size: out is NULL");
    PROVOKE(llmt_tokenizer_decode(t, bad, 1, NULL, 0, &len), llmt_tokenizer_last_error(t),
            "len_out");
    EXPECT_MSG(llmt_tokenizer_token_bytes(t, 0, NULL, 0, NULL), LLMT_ERR_NULL_POINTER,
               llmt_tokenizer_last_error(t), "tokenizer: token_bytes: len_out is NULL");
    PROVOKE(llmt_tokenizer_decode(t, bad, 1, NULL, 0, &len), llmt_tokenizer_last_error(t),
            "token_bytes");
    EXPECT_MSG(llmt_tokenizer_token_bytes(t, -1, NULL, 0, &len), LLMT_ERR_INVALID_ARGUMENT,
               llmt_tokenizer_last_error(t), "token_bytes: id -1");
    char c;
    EXPECT_MSG(llmt_tokenizer_token_bytes(t, 65, &c, 0, &len), LLMT_ERR_BUFFER_TOO_SMALL,
               llmt_tokenizer_last_error(t), "token_bytes");
    llmt_tokenizer_destroy(t);
}

static void test_dedup(void)
{
    llmt_dedup_opts o;
    llmt_dedup_opts_init(&o, sizeof o);
    llmt_dedup *d = NULL;
    PROVOKE(llmt_dedup_create(ctx, NULL, &d), llmt_context_last_error(ctx), "out is NULL");
    EXPECT_MSG(llmt_dedup_create(ctx, &o, NULL), LLMT_ERR_NULL_POINTER,
               llmt_context_last_error(ctx), "dedup: create: out is NULL");
    CHECK_STATUS(llmt_dedup_create(ctx, &o, &d), LLMT_OK);
    if (!d)
        return;
    uint64_t sig[1];
    PROVOKE(llmt_dedup_signature(d, "a b c", 5, sig, 1), llmt_dedup_last_error(d), "verdict");
    EXPECT_MSG(llmt_dedup_add(d, "a b c", 5, NULL, NULL), LLMT_ERR_NULL_POINTER,
               llmt_dedup_last_error(d), "dedup: add: verdict is NULL");
    PROVOKE(llmt_dedup_signature(d, "a b c", 5, sig, 1), llmt_dedup_last_error(d), "sig is");
    EXPECT_MSG(llmt_dedup_signature(d, "a b c", 5, NULL, 1), LLMT_ERR_NULL_POINTER,
               llmt_dedup_last_error(d), "dedup: signature: sig is NULL");
    llmt_dedup_destroy(d);
}

static void test_ckpt(void)
{
    char root[512];
    snprintf(root, sizeof root, "%s/ck", dir);
    llmt_ckpt *ck = NULL;
    PROVOKE(llmt_ckpt_create(ctx, NULL, NULL, &ck), llmt_context_last_error(ctx),
            "out is NULL");
    EXPECT_MSG(llmt_ckpt_create(ctx, root, NULL, NULL), LLMT_ERR_NULL_POINTER,
               llmt_context_last_error(ctx), "ckpt: create: out is NULL");
    CHECK_STATUS(llmt_ckpt_create(ctx, root, NULL, &ck), LLMT_OK);
    if (!ck)
        return;
    float x[4] = {0};
    int64_t shape[1] = {4};
    llmt_tensor v;
    CHECK_STATUS(llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 1, shape, x, LLMT_DEVICE_CPU, 0),
                 LLMT_OK);
    PROVOKE(llmt_ckpt_set_kv(ck, "k", "v"), llmt_ckpt_last_error(ck), "name is NULL");
    EXPECT_MSG(llmt_ckpt_add_tensor(ck, NULL, &v, NULL, NULL), LLMT_ERR_NULL_POINTER,
               llmt_ckpt_last_error(ck), "ckpt: add_tensor: name is NULL");
    PROVOKE(llmt_ckpt_set_kv(ck, "k", "v"), llmt_ckpt_last_error(ck), "view is NULL");
    EXPECT_MSG(llmt_ckpt_add_tensor(ck, "w", NULL, NULL, NULL), LLMT_ERR_NULL_POINTER,
               llmt_ckpt_last_error(ck), "ckpt: add_tensor: view is NULL");
    PROVOKE(llmt_ckpt_set_kv(ck, "k", "v"), llmt_ckpt_last_error(ck), "tensor_count");
    EXPECT_MSG(llmt_ckpt_tensor_count(ck, NULL), LLMT_ERR_NULL_POINTER,
               llmt_ckpt_last_error(ck), "ckpt: tensor_count: out is NULL");
    PROVOKE(llmt_ckpt_set_kv(ck, "k", "v"), llmt_ckpt_last_error(ck), "key is NULL");
    EXPECT_MSG(llmt_ckpt_get_kv(ck, NULL, NULL, 0, NULL), LLMT_ERR_NULL_POINTER,
               llmt_ckpt_last_error(ck), "ckpt: get_kv: key is NULL");
    PROVOKE(llmt_ckpt_set_kv(ck, "k", "v"), llmt_ckpt_last_error(ck), "count is NULL");
    EXPECT_MSG(llmt_ckpt_list(ck, NULL, 0, NULL), LLMT_ERR_NULL_POINTER,
               llmt_ckpt_last_error(ck), "ckpt: list: count is NULL");
    PROVOKE(llmt_ckpt_set_kv(ck, "k", "v"), llmt_ckpt_last_error(ck), "set_kv: key");
    CHECK_STATUS(llmt_ckpt_begin(ck, 1), LLMT_OK);
    EXPECT_MSG(llmt_ckpt_set_kv(ck, NULL, "v"), LLMT_ERR_NULL_POINTER,
               llmt_ckpt_last_error(ck), "ckpt: set_kv: key is NULL");
    llmt_ckpt_destroy(ck);
}

static void test_model_train(void)
{
    llmt_model_config c;
    small_model_config(&c, 50, 64, 8, 1, 16, 2, 1);
    llmt_model *m = NULL;
    PROVOKE(llmt_model_create(ctx, NULL, &m), llmt_context_last_error(ctx), "out is NULL");
    EXPECT_MSG(llmt_model_create(ctx, &c, NULL), LLMT_ERR_NULL_POINTER,
               llmt_context_last_error(ctx), "model: create: out is NULL");
    CHECK_STATUS(llmt_model_create(ctx, &c, &m), LLMT_OK);
    if (!m)
        return;
    llmt_tensor v;
    PROVOKE(llmt_model_param(m, 9999, NULL, &v), llmt_model_last_error(m), "cfg is NULL");
    EXPECT_MSG(llmt_model_get_config(m, NULL), LLMT_ERR_NULL_POINTER,
               llmt_model_last_error(m), "model: get_config: cfg is NULL");
    PROVOKE(llmt_model_param(m, 9999, NULL, &v), llmt_model_last_error(m), "name is NULL");
    EXPECT_MSG(llmt_model_find_param(m, NULL, &v), LLMT_ERR_NULL_POINTER,
               llmt_model_last_error(m), "model: find_param: name is NULL");
    PROVOKE(llmt_model_param(m, 9999, NULL, &v), llmt_model_last_error(m), "struct_size");
    llmt_model_config got;
    memset(&got, 0, sizeof got);
    EXPECT_MSG(llmt_model_get_config(m, &got), LLMT_ERR_STRUCT_SIZE,
               llmt_model_last_error(m), "model: get_config: cfg: struct_size");

    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = 1;
    o.seq_len = 8;
    o.threads = 1;
    PROVOKE(llmt_model_param(m, 9999, NULL, &v), llmt_model_last_error(m), "trainer: create");
    EXPECT_MSG(llmt_trainer_create(m, &o, NULL), LLMT_ERR_NULL_POINTER,
               llmt_model_last_error(m), "trainer: create: out is NULL");
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
    if (tr) {
        PROVOKE(llmt_trainer_set_step(tr, -1), llmt_trainer_last_error(tr), "step is NULL");
        EXPECT_MSG(llmt_trainer_get_step(tr, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_trainer_last_error(tr), "trainer: get_step: step is NULL");
        PROVOKE(llmt_trainer_set_step(tr, -1), llmt_trainer_last_error(tr), "lr is NULL");
        EXPECT_MSG(llmt_trainer_lr_at(tr, 0, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_trainer_last_error(tr), "trainer: lr_at: lr is NULL");
        PROVOKE(llmt_trainer_set_step(tr, -1), llmt_trainer_last_error(tr), "memory_usage");
        llmt_trainer_memory mem;
        memset(&mem, 0, sizeof mem);
        EXPECT_MSG(llmt_trainer_memory_usage(tr, &mem), LLMT_ERR_STRUCT_SIZE,
                   llmt_trainer_last_error(tr), "trainer: memory_usage: out: struct_size");
        PROVOKE(llmt_trainer_set_step(tr, -1), llmt_trainer_last_error(tr), "ck is NULL");
        EXPECT_MSG(llmt_trainer_ckpt_add(tr, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_trainer_last_error(tr), "trainer: ckpt_add: ck is NULL");
        PROVOKE(llmt_trainer_set_step(tr, -1), llmt_trainer_last_error(tr), "loss is NULL");
        int32_t in[8] = {0}, tg[8] = {0};
        llmt_batch b = {sizeof b, in, tg, 1, 8};
        EXPECT_MSG(llmt_trainer_evaluate(tr, &b, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_trainer_last_error(tr), "trainer: evaluate: loss is NULL");
        EXPECT_MSG(llmt_trainer_step(tr, NULL, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_trainer_last_error(tr), "trainer: step: batch is NULL");
        b.targets = NULL;
        EXPECT_MSG(llmt_trainer_evaluate(tr, &b, &(float){0}), LLMT_ERR_NULL_POINTER,
                   llmt_trainer_last_error(tr), "trainer: evaluate: batch->targets is NULL");
        llmt_trainer_destroy(tr);
    }
    llmt_model_destroy(m);
}

static void test_comm(void)
{
    llmt_comm *cs[1] = {NULL};
    PROVOKE(llmt_comm_create_inproc(ctx, 0, NULL, cs), llmt_context_last_error(ctx),
            "comms is NULL");
    EXPECT_MSG(llmt_comm_create_inproc(ctx, 1, NULL, NULL), LLMT_ERR_NULL_POINTER,
               llmt_context_last_error(ctx), "comm: create_inproc: comms is NULL");
    CHECK_STATUS(llmt_comm_create_inproc(ctx, 1, NULL, cs), LLMT_OK);
    llmt_comm *c = cs[0];
    if (!c)
        return;
    float x = 1;
    PROVOKE(llmt_comm_broadcast(c, &x, 1, LLMT_DTYPE_FP32, 5, NULL), llmt_comm_last_error(c),
            "rank is NULL");
    EXPECT_MSG(llmt_comm_rank(c, NULL), LLMT_ERR_NULL_POINTER, llmt_comm_last_error(c),
               "comm: rank: rank is NULL");
    PROVOKE(llmt_comm_broadcast(c, &x, 1, LLMT_DTYPE_FP32, 5, NULL), llmt_comm_last_error(c),
            "work is NULL");
    EXPECT_MSG(llmt_comm_iall_reduce(c, &x, &x, 1, LLMT_DTYPE_FP32, LLMT_REDUCE_SUM, NULL),
               LLMT_ERR_NULL_POINTER, llmt_comm_last_error(c), "comm: iall_reduce: work is NULL");
    PROVOKE(llmt_comm_broadcast(c, &x, 1, LLMT_DTYPE_FP32, 5, NULL), llmt_comm_last_error(c),
            "out is NULL");
    EXPECT_MSG(llmt_comm_split(c, 0, 0, NULL), LLMT_ERR_NULL_POINTER, llmt_comm_last_error(c),
               "comm: split: out is NULL");
    PROVOKE(llmt_comm_broadcast(c, &x, 1, LLMT_DTYPE_FP32, 5, NULL), llmt_comm_last_error(c),
            "scounts");
    size_t cnt[1] = {1};
    EXPECT_MSG(llmt_comm_all_to_allv(c, &x, NULL, cnt, &x, cnt, cnt, LLMT_DTYPE_FP32, NULL),
               LLMT_ERR_NULL_POINTER, llmt_comm_last_error(c),
               "comm: all_to_allv: send_counts is NULL");
    CHECK_STATUS(llmt_comm_rank(NULL, NULL), LLMT_ERR_NULL_POINTER);
    llmt_comm_destroy(c);
}

static void test_spec_plan(void)
{
    static const char json[] =
        "{\"model\": {\"layers\": 4, \"hidden\": 256, \"heads\": 4,"
        " \"vocab\": 4096, \"seq_len\": 128}, \"batch\": {\"micro\": 8}}";
    llmt_spec *s = NULL;
    PROVOKE(llmt_spec_parse_json(ctx, "{", 1, &s), llmt_context_last_error(ctx), "out is NULL");
    EXPECT_MSG(llmt_spec_parse_json(ctx, json, strlen(json), NULL), LLMT_ERR_NULL_POINTER,
               llmt_context_last_error(ctx), "spec: parse_json: out is NULL");
    CHECK_STATUS(llmt_spec_parse_json(ctx, json, strlen(json), &s), LLMT_OK);
    if (!s)
        return;
    int64_t iv;
    PROVOKE(llmt_spec_get_int(s, "no.such.key", &iv), llmt_spec_last_error(s), "out is NULL");
    EXPECT_MSG(llmt_spec_get_int(s, "model.layers", NULL), LLMT_ERR_NULL_POINTER,
               llmt_spec_last_error(s), "spec: get_int: out is NULL");
    PROVOKE(llmt_spec_get_int(s, "no.such.key", &iv), llmt_spec_last_error(s), "path is NULL");
    EXPECT_MSG(llmt_spec_get_string(s, NULL, NULL, 0, NULL), LLMT_ERR_NULL_POINTER,
               llmt_spec_last_error(s), "spec: get_string: path is NULL");

    llmt_plan *p = NULL;
    PROVOKE(llmt_plan_create(ctx, s, -1, &p), llmt_context_last_error(ctx), "out is NULL");
    EXPECT_MSG(llmt_plan_create(ctx, s, 1, NULL), LLMT_ERR_NULL_POINTER,
               llmt_context_last_error(ctx), "plan: create: out is NULL");
    CHECK_STATUS(llmt_plan_create(ctx, s, 1, &p), LLMT_OK);
    if (p) {
        int32_t coords[LLMT_PLAN_NDIMS];
        PROVOKE(llmt_plan_coords(p, 9999, coords), llmt_plan_last_error(p), "out is NULL");
        EXPECT_MSG(llmt_plan_world_size(p, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_plan_last_error(p), "plan: world_size: out is NULL");
        PROVOKE(llmt_plan_coords(p, 9999, coords), llmt_plan_last_error(p), "buf is NULL");
        EXPECT_MSG(llmt_plan_explain(p, NULL, 16, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_plan_last_error(p), "plan: explain: buf is NULL");
        PROVOKE(llmt_plan_coords(p, 9999, coords), llmt_plan_last_error(p), "get_estimate");
        EXPECT_MSG(llmt_plan_get_estimate(p, NULL), LLMT_ERR_NULL_POINTER,
                   llmt_plan_last_error(p), "plan: get_estimate: out is NULL");
        llmt_plan_destroy(p);
    }
    llmt_spec_destroy(s);
}

static void test_core(void)
{
    void *mem = NULL;
    PROVOKE(llmt_alloc(ctx, 8, 3, &mem), llmt_context_last_error(ctx), "out is NULL");
    EXPECT_MSG(llmt_alloc(ctx, 8, 8, NULL), LLMT_ERR_NULL_POINTER,
               llmt_context_last_error(ctx), "alloc: out is NULL");
    PROVOKE(llmt_alloc(ctx, 8, 3, &mem), llmt_context_last_error(ctx), "msg is NULL");
    EXPECT_MSG(llmt_log(ctx, LLMT_LOG_INFO, "test", NULL), LLMT_ERR_NULL_POINTER,
               llmt_context_last_error(ctx), "log: msg is NULL");
}

int main(void)
{
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    if (!ctx)
        return check_exit("errors");
    llmt_context_set_log_level(ctx, LLMT_LOG_OFF);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/llmt-errors-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_data();
    test_tok();
    test_dedup();
    test_ckpt();
    test_model_train();
    test_comm();
    test_spec_plan();
    test_core();
    fprintf(stderr, "errors: %d cases\n", cases);
    CHECK(cases >= 25);
    llmt_context_destroy(ctx);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_exit("errors");
}
