/* Core ABI: versions, status strings, context, logging, allocator, tensors,
 * and every bad-argument path of these functions. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"

static void test_version(void)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", LLMT_VERSION_MAJOR,
             LLMT_VERSION_MINOR, LLMT_VERSION_PATCH);
    CHECK(strcmp(llmt_version(), want) == 0);
    CHECK_EQ_INT(llmt_version_number(), LLMT_VERSION_NUMBER);
    CHECK_EQ_INT(llmt_abi_version() >> 16, LLMT_ABI_VERSION_MAJOR);
    CHECK_EQ_INT(llmt_abi_version() & 0xffff, LLMT_ABI_VERSION_MINOR);
}

static void test_status_strings(void)
{
    /* Every defined code has its own string; unknown ones a fixed one. */
    for (int s = LLMT_OK; s <= LLMT_ERR_INTERNAL; s++) {
        const char *str = llmt_status_string((llmt_status)s);
        CHECK(str != NULL);
        CHECK(strcmp(str, "unknown status") != 0);
        for (int t = LLMT_OK; t < s; t++)
            CHECK(strcmp(str, llmt_status_string((llmt_status)t)) != 0);
    }
    CHECK(strcmp(llmt_status_string((llmt_status)9999), "unknown status") == 0);
    CHECK(strcmp(llmt_status_string((llmt_status)-1), "unknown status") == 0);
    /* Codes are part of the ABI: a renumbering must fail this test. */
    CHECK_EQ_INT(LLMT_ERR_INVALID_ARGUMENT, 1);
    CHECK_EQ_INT(LLMT_ERR_TIMEOUT, 13);
    CHECK_EQ_INT(LLMT_ERR_INTERNAL, 22);
}

typedef struct {
    int calls;
    llmt_log_level last_level;
    char last_module[32];
    char last_msg[256];
} log_capture;

static void capture_log(void *user, llmt_log_level level, const char *module,
                        const char *msg)
{
    log_capture *c = user;
    c->calls++;
    c->last_level = level;
    snprintf(c->last_module, sizeof c->last_module, "%s", module);
    snprintf(c->last_msg, sizeof c->last_msg, "%s", msg);
}

typedef struct {
    int allocs, frees;
    size_t live_bytes;
} alloc_counter;

static void *count_alloc(void *user, size_t size, size_t align)
{
    alloc_counter *a = user;
    void *p = NULL;
    if (posix_memalign(&p, align, size))
        return NULL;
    a->allocs++;
    a->live_bytes += size;
    return p;
}

static void count_free(void *user, void *ptr, size_t size)
{
    alloc_counter *a = user;
    a->frees++;
    a->live_bytes -= size;
    free(ptr);
}

static void test_context(void)
{
    llmt_context *ctx = (llmt_context *)0x1;
    CHECK_STATUS(llmt_context_create(NULL, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    CHECK(ctx != NULL);
    CHECK(strcmp(llmt_context_last_error(ctx), "") == 0);
    CHECK_STATUS(llmt_context_last_status(ctx), LLMT_OK);
    llmt_context_destroy(ctx);
    llmt_context_destroy(NULL); /* no-op */
    CHECK(llmt_context_last_error(NULL) != NULL);
    CHECK_STATUS(llmt_context_last_status(NULL), LLMT_ERR_NULL_POINTER);

    /* opts_init */
    llmt_context_opts o;
    CHECK_STATUS(llmt_context_opts_init(NULL, sizeof o), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_context_opts_init(&o, 0), LLMT_ERR_STRUCT_SIZE);
    CHECK_STATUS(llmt_context_opts_init(&o, sizeof o), LLMT_OK);
    CHECK_EQ_INT(o.struct_size, sizeof o);

    /* struct_size unset -> error, not a crash. */
    llmt_context_opts bad;
    memset(&bad, 0, sizeof bad);
    ctx = (llmt_context *)0x1;
    CHECK_STATUS(llmt_context_create(&bad, &ctx), LLMT_ERR_STRUCT_SIZE);
    CHECK(ctx == NULL);

    /* A newer caller's larger struct with unknown non-zero bytes is refused;
     * with zero bytes it is accepted. */
    struct {
        llmt_context_opts o;
        uint64_t future_field;
    } bigger;
    memset(&bigger, 0, sizeof bigger);
    llmt_context_opts_init(&bigger.o, sizeof bigger.o);
    bigger.o.struct_size = sizeof bigger;
    bigger.future_field = 0;
    CHECK_STATUS(llmt_context_create(&bigger.o, &ctx), LLMT_OK);
    llmt_context_destroy(ctx);
    bigger.future_field = 42;
    CHECK_STATUS(llmt_context_create(&bigger.o, &ctx), LLMT_ERR_STRUCT_SIZE);

    /* An older caller's smaller struct (only struct_size + log_level). */
    struct {
        size_t struct_size;
        llmt_log_level log_level;
    } older = {sizeof older, LLMT_LOG_ERROR};
    CHECK_STATUS(llmt_context_create((const llmt_context_opts *)&older, &ctx),
                 LLMT_OK);
    llmt_context_destroy(ctx);

    /* Bad log level. */
    llmt_context_opts_init(&o, sizeof o);
    o.log_level = (llmt_log_level)17;
    CHECK_STATUS(llmt_context_create(&o, &ctx), LLMT_ERR_INVALID_ARGUMENT);

    /* Logging through a callback, filtered by level. */
    log_capture cap;
    memset(&cap, 0, sizeof cap);
    llmt_context_opts_init(&o, sizeof o);
    o.log_level = LLMT_LOG_INFO;
    o.log_fn = capture_log;
    o.log_user = &cap;
    CHECK_STATUS(llmt_context_create(&o, &ctx), LLMT_OK);
    CHECK_STATUS(llmt_log(ctx, LLMT_LOG_DEBUG, "test", "hidden"), LLMT_OK);
    CHECK_EQ_INT(cap.calls, 0);
    CHECK_STATUS(llmt_log(ctx, LLMT_LOG_WARN, "test", "shown"), LLMT_OK);
    CHECK_EQ_INT(cap.calls, 1);
    CHECK_EQ_INT(cap.last_level, LLMT_LOG_WARN);
    CHECK(strcmp(cap.last_module, "test") == 0);
    CHECK(strcmp(cap.last_msg, "shown") == 0);
    CHECK_STATUS(llmt_log(ctx, LLMT_LOG_WARN, "test", NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_log(NULL, LLMT_LOG_WARN, "test", "x"), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_log(ctx, LLMT_LOG_OFF, "test", "x"), LLMT_ERR_INVALID_ARGUMENT);
    /* The failure left a message naming the problem on the context. */
    CHECK(strstr(llmt_context_last_error(ctx), "level") != NULL);
    CHECK_STATUS(llmt_context_last_status(ctx), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_context_set_log_level(ctx, LLMT_LOG_OFF), LLMT_OK);
    CHECK_STATUS(llmt_log(ctx, LLMT_LOG_ERROR, "test", "muted"), LLMT_OK);
    CHECK_EQ_INT(cap.calls, 1);
    CHECK_STATUS(llmt_context_set_log_level(ctx, (llmt_log_level)-3),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_context_set_log_level(NULL, LLMT_LOG_INFO),
                 LLMT_ERR_NULL_POINTER);
    llmt_context_destroy(ctx);

    /* Allocator hooks: the context itself and llmt_alloc go through them. */
    alloc_counter ac = {0, 0, 0};
    llmt_allocator al = {sizeof al, &ac, count_alloc, count_free};
    llmt_context_opts_init(&o, sizeof o);
    o.allocator = &al;
    CHECK_STATUS(llmt_context_create(&o, &ctx), LLMT_OK);
    CHECK_EQ_INT(ac.allocs, 1);
    void *p = NULL;
    CHECK_STATUS(llmt_alloc(ctx, 1000, 256, &p), LLMT_OK);
    CHECK(p != NULL && ((uintptr_t)p % 256) == 0);
    CHECK_EQ_INT(ac.allocs, 2);
    llmt_free(ctx, p, 1000);
    CHECK_STATUS(llmt_alloc(ctx, 10, 3, &p), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(p == NULL);
    CHECK_STATUS(llmt_alloc(ctx, 10, 8, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_alloc(NULL, 10, 8, &p), LLMT_ERR_NULL_POINTER);
    llmt_context_destroy(ctx);
    CHECK_EQ_INT(ac.allocs, ac.frees);
    CHECK_EQ_INT(ac.live_bytes, 0);

    /* Incomplete allocator hooks are refused. */
    llmt_allocator half = {sizeof half, NULL, count_alloc, NULL};
    o.allocator = &half;
    CHECK_STATUS(llmt_context_create(&o, &ctx), LLMT_ERR_NULL_POINTER);
    llmt_allocator small = {4, NULL, count_alloc, count_free};
    o.allocator = &small;
    CHECK_STATUS(llmt_context_create(&o, &ctx), LLMT_ERR_STRUCT_SIZE);
}

static void test_dtypes(void)
{
    struct {
        llmt_dtype d;
        size_t size;
        const char *name;
    } want[] = {
        {LLMT_DTYPE_FP32, 4, "fp32"},       {LLMT_DTYPE_BF16, 2, "bf16"},
        {LLMT_DTYPE_FP16, 2, "fp16"},       {LLMT_DTYPE_FP8_E4M3, 1, "fp8e4m3"},
        {LLMT_DTYPE_FP8_E5M2, 1, "fp8e5m2"}, {LLMT_DTYPE_INT32, 4, "int32"},
        {LLMT_DTYPE_INT64, 8, "int64"},     {LLMT_DTYPE_UINT16, 2, "uint16"},
        {LLMT_DTYPE_UINT8, 1, "uint8"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK_EQ_INT(llmt_dtype_size(want[i].d), want[i].size);
        CHECK(strcmp(llmt_dtype_name(want[i].d), want[i].name) == 0);
        llmt_dtype back;
        CHECK_STATUS(llmt_dtype_from_name(want[i].name, &back), LLMT_OK);
        CHECK_EQ_INT(back, want[i].d);
    }
    llmt_dtype d;
    CHECK_STATUS(llmt_dtype_from_name("BFloat16", &d), LLMT_OK);
    CHECK_EQ_INT(d, LLMT_DTYPE_BF16);
    CHECK_STATUS(llmt_dtype_from_name("fp7", &d), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_dtype_from_name(NULL, &d), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_dtype_from_name("fp32", NULL), LLMT_ERR_NULL_POINTER);
    CHECK_EQ_INT(llmt_dtype_size(LLMT_DTYPE_INVALID), 0);
    CHECK_EQ_INT(llmt_dtype_size((llmt_dtype)200), 0);
    CHECK(strcmp(llmt_dtype_name((llmt_dtype)200), "invalid") == 0);
}

static void test_tensors(void)
{
    float buf[24];
    int64_t shape[3] = {2, 3, 4};
    llmt_tensor t;
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_FP32, 3, shape, buf,
                                  LLMT_DEVICE_CPU, 0), LLMT_OK);
    CHECK_EQ_INT(t.strides[0], 12);
    CHECK_EQ_INT(t.strides[1], 4);
    CHECK_EQ_INT(t.strides[2], 1);
    int64_t n = 0;
    CHECK_STATUS(llmt_tensor_numel(&t, &n), LLMT_OK);
    CHECK_EQ_INT(n, 24);
    CHECK_STATUS(llmt_tensor_nbytes(&t, &n), LLMT_OK);
    CHECK_EQ_INT(n, 96);
    int contig = -1;
    CHECK_STATUS(llmt_tensor_is_contiguous(&t, &contig), LLMT_OK);
    CHECK_EQ_INT(contig, 1);
    CHECK_STATUS(llmt_tensor_validate(&t), LLMT_OK);

    /* A transposed view is valid but not contiguous. */
    llmt_tensor tr = t;
    tr.shape[1] = 4; tr.shape[2] = 3; tr.strides[1] = 1; tr.strides[2] = 4;
    CHECK_STATUS(llmt_tensor_is_contiguous(&tr, &contig), LLMT_OK);
    CHECK_EQ_INT(contig, 0);

    /* Scalars and empty tensors. */
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_INT64, 0, NULL, buf,
                                  LLMT_DEVICE_CPU, 0), LLMT_OK);
    CHECK_STATUS(llmt_tensor_numel(&t, &n), LLMT_OK);
    CHECK_EQ_INT(n, 1);
    int64_t empty[2] = {0, 5};
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_BF16, 2, empty, NULL,
                                  LLMT_DEVICE_CUDA, 3), LLMT_OK);
    CHECK_STATUS(llmt_tensor_nbytes(&t, &n), LLMT_OK);
    CHECK_EQ_INT(n, 0);

    /* Every bad argument gets a status, never a crash. */
    CHECK_STATUS(llmt_tensor_init(NULL, sizeof t, LLMT_DTYPE_FP32, 3, shape, buf,
                                  LLMT_DEVICE_CPU, 0), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_tensor_init(&t, 8, LLMT_DTYPE_FP32, 3, shape, buf,
                                  LLMT_DEVICE_CPU, 0), LLMT_ERR_STRUCT_SIZE);
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, (llmt_dtype)99, 3, shape, buf,
                                  LLMT_DEVICE_CPU, 0), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_INVALID, 3, shape, buf,
                                  LLMT_DEVICE_CPU, 0), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_FP32, 9, shape, buf,
                                  LLMT_DEVICE_CPU, 0), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_FP32, -1, shape, buf,
                                  LLMT_DEVICE_CPU, 0), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_FP32, 3, NULL, buf,
                                  LLMT_DEVICE_CPU, 0), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_FP32, 3, shape, NULL,
                                  LLMT_DEVICE_CPU, 0), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_FP32, 3, shape, buf,
                                  (llmt_device_type)7, 0), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_FP32, 3, shape, buf,
                                  LLMT_DEVICE_CPU, -1), LLMT_ERR_INVALID_ARGUMENT);
    int64_t neg[2] = {3, -2};
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_FP32, 2, neg, buf,
                                  LLMT_DEVICE_CPU, 0), LLMT_ERR_INVALID_ARGUMENT);
    int64_t huge[2] = {INT64_MAX / 2, 5}; /* numel*size overflows */
    CHECK_STATUS(llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_FP32, 2, huge, buf,
                                  LLMT_DEVICE_CPU, 0), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_tensor_numel(NULL, &n), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_tensor_numel(&t, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_tensor_nbytes(NULL, &n), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_tensor_is_contiguous(NULL, &contig), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_tensor_validate(NULL), LLMT_ERR_NULL_POINTER);
    llmt_tensor junk;
    memset(&junk, 0, sizeof junk);
    CHECK_STATUS(llmt_tensor_validate(&junk), LLMT_ERR_STRUCT_SIZE);
    junk.struct_size = sizeof junk;
    CHECK_STATUS(llmt_tensor_validate(&junk), LLMT_ERR_INVALID_ARGUMENT);
    llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_FP32, 3, shape, buf,
                     LLMT_DEVICE_CPU, 0);
    t.strides[1] = -4;
    CHECK_STATUS(llmt_tensor_validate(&t), LLMT_ERR_INVALID_ARGUMENT);
}

static void test_features(void)
{
    uint64_t f = llmt_build_features();
    /* Every bit set has a name; names are unique. */
    for (int bit = 0; bit < 64; bit++) {
        uint64_t b = UINT64_C(1) << bit;
        const char *name = llmt_feature_name(b);
        if (f & b)
            CHECK(name != NULL);
        for (int other = 0; name && other < bit; other++) {
            const char *o = llmt_feature_name(UINT64_C(1) << other);
            CHECK(!o || strcmp(o, name) != 0);
        }
    }
    CHECK(strcmp(llmt_feature_name(LLMT_FEATURE_CUDA), "cuda") == 0);
    CHECK(llmt_feature_name(0) == NULL);
    CHECK(llmt_feature_name(LLMT_FEATURE_CUDA | LLMT_FEATURE_MPI) == NULL);
    int32_t gpus = -1;
    llmt_status s = llmt_cuda_device_count(&gpus);
    if (f & LLMT_FEATURE_CUDA)
        CHECK(s == LLMT_OK || s == LLMT_ERR_CUDA);
    else
        CHECK_EQ_INT(s, LLMT_ERR_UNSUPPORTED);
    CHECK(gpus >= 0);
    CHECK_STATUS(llmt_cuda_device_count(NULL), LLMT_ERR_NULL_POINTER);

    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_TENSOR), sizeof(llmt_tensor));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_CONTEXT_OPTS), sizeof(llmt_context_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_ALLOCATOR), sizeof(llmt_allocator));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_PLAN_ESTIMATE), sizeof(llmt_plan_estimate));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_PLAN_AUTO_OPTS), sizeof(llmt_plan_auto_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_GOODPUT_OPTS), sizeof(llmt_goodput_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_GOODPUT_RESULT), sizeof(llmt_goodput_result));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_MODEL_CONFIG), sizeof(llmt_model_config));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_TRAINER_OPTS), sizeof(llmt_trainer_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_BATCH), sizeof(llmt_batch));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_STEP_METRICS), sizeof(llmt_step_metrics));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_CKPT_OPTS), sizeof(llmt_ckpt_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_CKPT_LLMC_OPTS), sizeof(llmt_ckpt_llmc_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_COMM_OPTS), sizeof(llmt_comm_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_COMM_ENV), sizeof(llmt_comm_env));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_COMM_STATS), sizeof(llmt_comm_stats));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_JOB_PERF), sizeof(llmt_job_perf));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_JOB_OBS_OPTS), sizeof(llmt_job_obs_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_PP_OPTS), sizeof(llmt_pp_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_PP_STATS), sizeof(llmt_pp_stats));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_CP_OPTS), sizeof(llmt_cp_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_CP_STATS), sizeof(llmt_cp_stats));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_DP_OPTS), sizeof(llmt_dp_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_TRAINER_MEMORY), sizeof(llmt_trainer_memory));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_INGEST_OPTS), sizeof(llmt_ingest_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_INGEST_STATS), sizeof(llmt_ingest_stats));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_DATA_FILTER_OPTS), sizeof(llmt_data_filter_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_DEDUP_OPTS), sizeof(llmt_dedup_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_DATASET_INFO), sizeof(llmt_dataset_info));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_LOADER_OPTS), sizeof(llmt_loader_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_LOADER_STATE), sizeof(llmt_loader_state));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_DATA_PREPARE_OPTS), sizeof(llmt_data_prepare_opts));
    CHECK_EQ_INT(llmt_sizeof(LLMT_TYPE_DATA_REPORT), sizeof(llmt_data_report));
    CHECK_EQ_INT(llmt_sizeof((llmt_type_id)12345), 0);
}

int main(void)
{
    test_version();
    test_status_strings();
    test_context();
    test_dtypes();
    test_tensors();
    test_features();
    return check_exit("test_core");
}
