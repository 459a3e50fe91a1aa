/*
 * llmtrain.h - the one public header of libllmtrain.
 *
 * C99, includes only <stddef.h> and <stdint.h>. No CUDA, MPI or cJSON types
 * cross this boundary: streams and device pointers are `void *`.
 *
 * Conventions (see doc/abi-conventions.md):
 *  - every function returns `llmt_status` unless it is a pure query;
 *    outputs go through pointers;
 *  - handles are opaque; `llmt_X_destroy(NULL)` is a no-op;
 *  - detail of the last failure lives on the handle: `llmt_X_last_error(h)`;
 *  - option structs start with `size_t struct_size`; fill them with
 *    `llmt_X_opts_init(&o, sizeof o)` so that old callers keep working;
 *  - status codes, dtype codes and feature bits are never renumbered.
 *
 * Sections, in order: version; status codes; core (context, logging,
 * allocator); tensors; build features and sizes; then one section per module
 * (spec and plan, comm, model and trainer, data, checkpoint, fault tolerance,
 * metrics), and LLMT_EXPERIMENTAL last.
 */
#ifndef LLMTRAIN_H
#define LLMTRAIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(LLMT_BUILDING_LIBRARY) && defined(__GNUC__)
#define LLMT_API __attribute__((visibility("default")))
#else
#define LLMT_API
#endif

/* ======================================================================
 * Version
 * ====================================================================== */

/* Project version: changes with every release. */
#define LLMT_VERSION_MAJOR 0
#define LLMT_VERSION_MINOR 1
#define LLMT_VERSION_PATCH 0
#define LLMT_VERSION_NUMBER \
    (LLMT_VERSION_MAJOR * 10000 + LLMT_VERSION_MINOR * 100 + LLMT_VERSION_PATCH)

/* ABI version: MAJOR changes only when a released symbol or struct layout
 * changes incompatibly (never, we hope); MINOR when symbols are added. It is
 * kept separate from the project version (read back by meson.build). */
#define LLMT_ABI_VERSION_MAJOR 1
#define LLMT_ABI_VERSION_MINOR 0

/* "0.1.0". Static string, thread-safe. */
LLMT_API const char *llmt_version(void);
/* LLMT_VERSION_NUMBER of the library actually loaded (may differ from the
 * header a program was compiled against). */
LLMT_API uint32_t llmt_version_number(void);
/* (ABI major << 16) | ABI minor of the loaded library. A binding checks that
 * the major equals the one it was written for. */
LLMT_API uint32_t llmt_abi_version(void);

/* ======================================================================
 * Status codes
 * Values are fixed forever: never renumbered, never reused. A retired code
 * stays as LLMT_OBSOLETE_<n>.
 * ====================================================================== */
typedef enum llmt_status {
    LLMT_OK = 0,
    LLMT_ERR_INVALID_ARGUMENT = 1, /* a bad value: dtype, shape, range, ... */
    LLMT_ERR_NULL_POINTER = 2,     /* a required pointer or handle was NULL */
    LLMT_ERR_STRUCT_SIZE = 3,      /* struct_size too small / not set */
    LLMT_ERR_OUT_OF_MEMORY = 4,
    LLMT_ERR_UNSUPPORTED = 5,      /* not in this build / on this device */
    LLMT_ERR_IO = 6,               /* open/read/write/fsync/rename failed */
    LLMT_ERR_FORMAT = 7,           /* a file is corrupt, truncated, wrong magic */
    LLMT_ERR_CHECKSUM = 8,         /* stored and computed checksums differ */
    LLMT_ERR_VERSION = 9,          /* a file or struct version we cannot read */
    LLMT_ERR_SPEC = 10,            /* job spec failed validation */
    LLMT_ERR_NOT_FOUND = 11,       /* a named thing does not exist */
    LLMT_ERR_STATE = 12,           /* call not valid in the handle's state */
    LLMT_ERR_TIMEOUT = 13,         /* a collective or wait timed out */
    LLMT_ERR_ABORTED = 14,         /* the handle was aborted */
    LLMT_ERR_COMM = 15,            /* a communication backend failed */
    LLMT_ERR_CUDA = 16,            /* a CUDA runtime / cuBLASLt call failed */
    LLMT_ERR_NCCL = 17,
    LLMT_ERR_MPI = 18,
    LLMT_ERR_NUMERIC = 19,         /* NaN/Inf or an anomaly in the numbers */
    LLMT_ERR_BUFFER_TOO_SMALL = 20,/* the caller's output buffer is too small */
    LLMT_ERR_IN_PROGRESS = 21,     /* an async operation has not finished */
    LLMT_ERR_INTERNAL = 22         /* a bug in llmtrain: please report it */
} llmt_status;

/* A static English string for any code ("unknown status" for values this
 * library does not know). Never NULL. Thread-safe. */
LLMT_API const char *llmt_status_string(llmt_status status);

/* ======================================================================
 * Core: context, logging, allocator
 * A context carries the logging sink, the allocator and the error detail of
 * context-level calls. Other handles are created from a context and must not
 * outlive it. One context may be used from several threads only for calls
 * documented thread-safe; llmt_context_last_error is per context, so give each
 * thread its own context if it needs the detail of its own failures.
 * ====================================================================== */
typedef struct llmt_context llmt_context;

typedef enum llmt_log_level {
    LLMT_LOG_TRACE = 0,
    LLMT_LOG_DEBUG = 1,
    LLMT_LOG_INFO = 2,
    LLMT_LOG_WARN = 3,
    LLMT_LOG_ERROR = 4,
    LLMT_LOG_OFF = 5
} llmt_log_level;

/* Called for every message at or above the context's level, possibly from
 * library threads (checkpoint writer, prefetcher): it must be thread-safe.
 * `module` is e.g. "ckpt", `msg` has no trailing newline. */
typedef void (*llmt_log_fn)(void *user, llmt_log_level level,
                            const char *module, const char *msg);

/* Host memory hooks. `alloc` returns memory aligned to `align` (a power of
 * two, >= sizeof(void*)) or NULL; `free` receives the same size. */
typedef struct llmt_allocator {
    size_t struct_size;
    void *user;
    void *(*alloc)(void *user, size_t size, size_t align);
    void (*free)(void *user, void *ptr, size_t size);
} llmt_allocator;

typedef struct llmt_context_opts {
    size_t struct_size;
    llmt_log_level log_level; /* default LLMT_LOG_WARN (or $LLMT_LOG_LEVEL) */
    llmt_log_fn log_fn;       /* default: write to stderr, never stdout */
    void *log_user;
    const llmt_allocator *allocator; /* NULL: aligned malloc/free. Copied. */
} llmt_context_opts;

/* Fill defaults. `size` is sizeof(*opts) as the caller sees it. */
LLMT_API llmt_status llmt_context_opts_init(llmt_context_opts *opts, size_t size);
/* `opts` may be NULL for defaults. */
LLMT_API llmt_status llmt_context_create(const llmt_context_opts *opts,
                                         llmt_context **out);
LLMT_API void llmt_context_destroy(llmt_context *ctx);
/* Message of the last failed call on this context ("" if none). The pointer
 * stays valid until the next call on the context. NULL ctx -> a static note. */
LLMT_API const char *llmt_context_last_error(const llmt_context *ctx);
/* Status of the last failed call on this context (LLMT_OK if none). */
LLMT_API llmt_status llmt_context_last_status(const llmt_context *ctx);
LLMT_API llmt_status llmt_context_set_log_level(llmt_context *ctx,
                                                llmt_log_level level);
/* The calling thread's last failure, whatever handle (or context) the
 * call recorded it on: the message and status of the newest failing call
 * made by this thread that recorded a detail (every failing call on a
 * valid handle or context does; a NULL handle only returns its status).
 * Per-handle messages are kept as well. A successful call leaves it as it
 * was; a binding compares llmt_last_error_status() with the status it got,
 * or calls llmt_last_error_clear() first. Library threads (checkpoint
 * writer, prefetcher, progress) have their own. The string is "" before
 * any failure and stays valid until this thread's next failing call.
 * Thread-safe (libgit2's git_error_last is the model). */
LLMT_API const char *llmt_last_error(void);
LLMT_API llmt_status llmt_last_error_status(void);
/* Forget the calling thread's last failure (status LLMT_OK, message ""). */
LLMT_API void llmt_last_error_clear(void);
/* Emit a message through the context's sink (for hosts and the CLI). */
LLMT_API llmt_status llmt_log(llmt_context *ctx, llmt_log_level level,
                              const char *module, const char *msg);
/* Allocate/free host memory through the context's allocator. */
LLMT_API llmt_status llmt_alloc(llmt_context *ctx, size_t size, size_t align,
                                void **out);
LLMT_API void llmt_free(llmt_context *ctx, void *ptr, size_t size);

/* ======================================================================
 * Tensors: non-owning views
 * A view describes memory someone else owns (a host framework's buffer, a
 * trainer's parameter). Strides are in elements, not bytes.
 * ====================================================================== */
typedef enum llmt_dtype {
    LLMT_DTYPE_INVALID = 0,
    LLMT_DTYPE_FP32 = 1,
    LLMT_DTYPE_BF16 = 2,
    LLMT_DTYPE_FP16 = 3,
    LLMT_DTYPE_FP8_E4M3 = 4,
    LLMT_DTYPE_FP8_E5M2 = 5,
    LLMT_DTYPE_INT32 = 6,
    LLMT_DTYPE_INT64 = 7,
    LLMT_DTYPE_UINT16 = 8,
    LLMT_DTYPE_UINT8 = 9
} llmt_dtype;

/* Bytes per element; 0 for an unknown or invalid dtype. */
LLMT_API size_t llmt_dtype_size(llmt_dtype dtype);
/* "fp32", "bf16", ...; "invalid" for unknown values. */
LLMT_API const char *llmt_dtype_name(llmt_dtype dtype);
/* Inverse of llmt_dtype_name (also accepts "float32", "bfloat16", "e4m3"...). */
LLMT_API llmt_status llmt_dtype_from_name(const char *name, llmt_dtype *out);

typedef enum llmt_device_type {
    LLMT_DEVICE_CPU = 0,
    LLMT_DEVICE_CUDA = 1,
    LLMT_DEVICE_CUDA_HOST = 2 /* pinned host memory */
} llmt_device_type;

#define LLMT_MAX_DIMS 8

typedef struct llmt_tensor {
    size_t struct_size;
    llmt_dtype dtype;
    llmt_device_type device;
    int32_t device_index;
    int32_t ndim;                    /* 0 (scalar) .. LLMT_MAX_DIMS */
    int64_t shape[LLMT_MAX_DIMS];
    int64_t strides[LLMT_MAX_DIMS];  /* in elements */
    void *data;                      /* not owned */
} llmt_tensor;

/* Describe a contiguous (row-major) tensor. `shape` may be NULL if ndim==0.
 * Checks: t non-NULL, struct_size, dtype, 0<=ndim<=MAX, shape[i] >= 0, and
 * that the byte size fits in int64. data may be NULL only if numel == 0. */
LLMT_API llmt_status llmt_tensor_init(llmt_tensor *t, size_t struct_size,
                                      llmt_dtype dtype, int32_t ndim,
                                      const int64_t *shape, void *data,
                                      llmt_device_type device,
                                      int32_t device_index);
/* Validate a view filled by hand (same checks as init, plus strides >= 0). */
LLMT_API llmt_status llmt_tensor_validate(const llmt_tensor *t);
/* Number of elements (product of shape; 1 for a scalar). */
LLMT_API llmt_status llmt_tensor_numel(const llmt_tensor *t, int64_t *out);
/* numel * dtype size. */
LLMT_API llmt_status llmt_tensor_nbytes(const llmt_tensor *t, int64_t *out);
/* 1 if row-major contiguous, else 0. */
LLMT_API llmt_status llmt_tensor_is_contiguous(const llmt_tensor *t, int *out);

/* ======================================================================
 * Build features and sizes
 * ====================================================================== */
/* Bits of llmt_build_features(): what this build was compiled with. */
#define LLMT_FEATURE_CUDA     (UINT64_C(1) << 0)
#define LLMT_FEATURE_NCCL     (UINT64_C(1) << 1)
#define LLMT_FEATURE_MPI      (UINT64_C(1) << 2)
#define LLMT_FEATURE_AIO      (UINT64_C(1) << 3)
#define LLMT_FEATURE_OPENBLAS (UINT64_C(1) << 4)
#define LLMT_FEATURE_OPENMP   (UINT64_C(1) << 5)
#define LLMT_FEATURE_GLOO (UINT64_C(1) << 6)

LLMT_API uint64_t llmt_build_features(void);
/* "cuda", "nccl", ... for one bit; NULL for an unknown bit. */
LLMT_API const char *llmt_feature_name(uint64_t feature_bit);
/* Number of CUDA devices usable now (0 without CUDA or a GPU). The status
 * says why there are none: LLMT_OK with 0 on a machine without GPUs,
 * LLMT_ERR_UNSUPPORTED when the build has no CUDA. */
LLMT_API llmt_status llmt_cuda_device_count(int32_t *out);

/* Sizes of the library's public structs, for bindings that allocate them
 * or check their own layout at load time (one id per struct of this
 * header; ids are never renumbered). */
typedef enum llmt_type_id {
    LLMT_TYPE_TENSOR = 1,
    LLMT_TYPE_CONTEXT_OPTS = 2,
    LLMT_TYPE_ALLOCATOR = 3,
    LLMT_TYPE_PLAN_ESTIMATE = 4,
    LLMT_TYPE_PLAN_AUTO_OPTS = 5,
    LLMT_TYPE_GOODPUT_OPTS = 6,
    LLMT_TYPE_GOODPUT_RESULT = 7,
    LLMT_TYPE_MODEL_CONFIG = 8,
    LLMT_TYPE_TRAINER_OPTS = 9,
    LLMT_TYPE_BATCH = 10,
    LLMT_TYPE_STEP_METRICS = 11,
    LLMT_TYPE_CKPT_OPTS = 12,
    LLMT_TYPE_CKPT_LLMC_OPTS = 13,
    LLMT_TYPE_COMM_OPTS = 14,
    LLMT_TYPE_COMM_ENV = 15,
    LLMT_TYPE_DP_OPTS = 16,
    LLMT_TYPE_TRAINER_MEMORY = 17,
    LLMT_TYPE_INGEST_OPTS = 18,
    LLMT_TYPE_INGEST_STATS = 19,
    LLMT_TYPE_DATA_FILTER_OPTS = 20,
    LLMT_TYPE_DEDUP_OPTS = 21,
    LLMT_TYPE_DATASET_INFO = 22,
    LLMT_TYPE_LOADER_OPTS = 23,
    LLMT_TYPE_LOADER_STATE = 24,
    LLMT_TYPE_DATA_PREPARE_OPTS = 25,
    LLMT_TYPE_DATA_REPORT = 26,
    LLMT_TYPE_JOB_OPTS = 27,
    LLMT_TYPE_JOB_INFO = 28,
    LLMT_TYPE_JOB_METRICS = 29,
    LLMT_TYPE_COMM_STATS = 30,
    LLMT_TYPE_JOB_PERF = 31,
    LLMT_TYPE_JOB_OBS_OPTS = 32,
    LLMT_TYPE_PP_OPTS = 36,
    LLMT_TYPE_PP_STATS = 37,
    LLMT_TYPE_CP_OPTS = 38,
    LLMT_TYPE_CP_STATS = 39
} llmt_type_id;
/* sizeof the struct, or 0 for an unknown id. */
LLMT_API size_t llmt_sizeof(llmt_type_id type);

/* ---- Module sections are added below, in the order of the file comment. */

/* ======================================================================
 * Spec: the JSON job spec (doc/job-spec.md)
 * Parsing validates every rule at once; a failed parse returns
 * LLMT_ERR_SPEC and leaves the errors (one "path: rule" per line, the first
 * ones only, the message is bounded) on the context: llmt_context_last_error.
 * llmt_spec_validate_json returns the full list as text. A spec is immutable
 * once parsed: its getters are thread-safe. ctx may be NULL (then the detail
 * of a failure is only available through llmt_spec_validate_json).
 * ====================================================================== */
typedef struct llmt_spec llmt_spec;

/* Parse `len` bytes of JSON (need not be NUL-terminated). */
LLMT_API llmt_status llmt_spec_parse_json(llmt_context *ctx, const char *json,
                                          size_t len, llmt_spec **out);
/* Read and parse a file. Relative paths inside are kept as written. */
LLMT_API llmt_status llmt_spec_parse_file(llmt_context *ctx, const char *path,
                                          llmt_spec **out);
/* Validate without keeping a spec. Writes every error, one per line
 * ("parallelism.tp: 3 does not divide model.heads 32"), NUL-terminated, into
 * buf (may be NULL when buflen is 0); *needed (may be NULL) gets the bytes
 * required including the NUL. Returns LLMT_OK when valid (buf gets ""),
 * LLMT_ERR_SPEC when not, LLMT_ERR_BUFFER_TOO_SMALL when the text did not
 * fit (it is then truncated at a line end). */
LLMT_API llmt_status llmt_spec_validate_json(llmt_context *ctx,
                                             const char *json, size_t len,
                                             char *buf, size_t buflen,
                                             size_t *needed);
LLMT_API void llmt_spec_destroy(llmt_spec *spec);
/* Detail of the last failed getter on this spec ("" if none). */
LLMT_API const char *llmt_spec_last_error(const llmt_spec *spec);

/* Typed getters by JSON path ("model.layers", "checkpoint.tiers[0].path").
 * Defaults are filled in, so every key of llmt_spec_key_name has a value.
 * get_int works on integer, boolean (0/1) and enum keys (index in the key's
 * list of names); get_double on any numeric key; get_string on string and
 * enum keys (the name) and on "checkpoint.interval" ("auto" or the number).
 * A string key that was not given reads as "" with LLMT_OK.
 * LLMT_ERR_NOT_FOUND for an unknown path, LLMT_ERR_INVALID_ARGUMENT for a
 * key of another type. "checkpoint.tiers" with get_int gives the tier count. */
LLMT_API llmt_status llmt_spec_get_int(const llmt_spec *spec, const char *path,
                                       int64_t *out);
LLMT_API llmt_status llmt_spec_get_double(const llmt_spec *spec,
                                          const char *path, double *out);
LLMT_API llmt_status llmt_spec_get_string(const llmt_spec *spec,
                                          const char *path, char *buf,
                                          size_t buflen, size_t *needed);
/* 1 if the document set `path` explicitly (not a default), else 0. */
LLMT_API int llmt_spec_is_given(const llmt_spec *spec, const char *path);
/* The normalised spec (all defaults filled) as JSON; size query as above. */
LLMT_API llmt_status llmt_spec_to_json(const llmt_spec *spec, char *buf,
                                       size_t buflen, size_t *needed);

/* Introspection of the keys: index 0 .. count-1. Static strings.
 * Type is one of "int", "number", "bool", "string", "enum", "object",
 * "array", "interval" (steps or "auto"); for an enum, llmt_spec_key_values
 * gives "a|b|c" (NULL otherwise). Thread-safe. */
LLMT_API size_t llmt_spec_key_count(void);
LLMT_API const char *llmt_spec_key_name(size_t index);
LLMT_API const char *llmt_spec_key_type(size_t index);
LLMT_API const char *llmt_spec_key_values(size_t index);
LLMT_API const char *llmt_spec_key_doc(size_t index);

/* ======================================================================
 * Plan: nD parallel layout, cost model, auto-planner, goodput (doc/planner.md)
 * A plan is a spec placed on `world_size` ranks. Rank order: TP innermost
 * (inside a node), then CP, then PP (consecutive nodes, a rack), DP
 * outermost; EP is carved out of DP (consecutive DP indices). A plan is
 * immutable: queries are thread-safe; each query's failure detail is on the
 * plan (llmt_plan_last_error), creation failures on the context.
 * ====================================================================== */
typedef struct llmt_plan llmt_plan;

/* Dimensions, used as indices into coordinate arrays. Never renumbered. */
typedef enum llmt_plan_dim {
    LLMT_DIM_TP = 0,
    LLMT_DIM_CP = 1,
    LLMT_DIM_PP = 2,
    LLMT_DIM_DP = 3,
    LLMT_DIM_EP = 4  /* expert-parallel index, inside DP */
} llmt_plan_dim;
#define LLMT_PLAN_NDIMS 5

/* Place `spec` on world_size ranks (0: tp*pp*dp*cp of the spec). When the
 * spec does not set parallelism.dp it is derived as world/(tp*pp*cp);
 * otherwise the product must equal world_size. The spec may be destroyed
 * afterwards (the plan keeps its own copy). */
LLMT_API llmt_status llmt_plan_create(llmt_context *ctx, const llmt_spec *spec,
                                      int32_t world_size, llmt_plan **out);
LLMT_API void llmt_plan_destroy(llmt_plan *plan);
LLMT_API const char *llmt_plan_last_error(const llmt_plan *plan);

/* Degrees: out[LLMT_PLAN_NDIMS] gets tp, cp, pp, dp, ep. */
LLMT_API llmt_status llmt_plan_degrees(const llmt_plan *plan, int32_t *out);
LLMT_API llmt_status llmt_plan_world_size(const llmt_plan *plan, int32_t *out);
/* rank -> coords[LLMT_PLAN_NDIMS] and back (coords[LLMT_DIM_EP] is ignored
 * by rank_of: it follows from DP). */
LLMT_API llmt_status llmt_plan_coords(const llmt_plan *plan, int32_t rank,
                                      int32_t *coords);
LLMT_API llmt_status llmt_plan_rank_of(const llmt_plan *plan,
                                       const int32_t *coords, int32_t *rank);
/* The ranks of `rank`'s group along `dim`, ascending (the members differ
 * only in that coordinate; for EP, the DP ranks sharing the expert group).
 * *count gets the group size; ranks may be NULL to ask the size only, else
 * it must hold `capacity` entries (LLMT_ERR_BUFFER_TOO_SMALL when short).
 * *group_id (may be NULL) gets a number in [0, world/size) naming the group. */
LLMT_API llmt_status llmt_plan_group(const llmt_plan *plan, llmt_plan_dim dim,
                                     int32_t rank, int32_t *ranks,
                                     size_t capacity, size_t *count,
                                     int32_t *group_id);
/* Layers [first, first+count) held by pipeline stage `stage`, model chunk
 * `chunk` (0 .. virtual_stages-1; interleaved schedules give each stage
 * several chunks). */
LLMT_API llmt_status llmt_plan_stage_layers(const llmt_plan *plan,
                                            int32_t stage, int32_t chunk,
                                            int32_t *first, int32_t *count);

/* The cost model's predictions for one step (units in the names). Filled up
 * to the caller's struct_size. */
typedef struct llmt_plan_estimate {
    size_t struct_size;
    int32_t world_size, tp, cp, pp, dp, ep, zero, virtual_stages;
    int32_t micro, grad_accum, recompute, sequence_parallel;
    int64_t global_batch, tokens_per_step;
    double params, params_active;       /* whole model */
    double params_per_gpu;              /* largest stage, before ZeRO */
    /* memory per GPU (the most loaded stage), bytes */
    double mem_weights, mem_grads, mem_optimizer, mem_activations;
    double mem_overhead, mem_total, mem_capacity;
    int32_t fits;                       /* mem_total <= mem_capacity */
    /* FLOPs */
    double model_flops_per_token;       /* fwd+bwd, with attention */
    double flops_6nd_per_token;         /* 6 * active params, the check */
    double model_flops_per_step;        /* all GPUs */
    double hw_flops_per_step;           /* including recomputation */
    /* communication per GPU per step: bytes sent, exposed seconds */
    double comm_bytes_tp, comm_bytes_cp, comm_bytes_pp, comm_bytes_dp,
           comm_bytes_ep;
    double time_tp_s, time_cp_s, time_pp_s, time_dp_s, time_ep_s;
    /* time */
    double time_compute_s;              /* matmul + attention + elementwise */
    double bubble_fraction;             /* idle share of a pipelined step */
    double time_bubble_s, time_optimizer_s;
    double step_time_s, tokens_per_s, mfu, tflops_per_gpu;
    /* checkpoint and failures */
    double ckpt_bytes_total, ckpt_stall_s, ckpt_write_s, restore_s, restart_s;
    double mtbf_s;                      /* the whole job */
    double young_daly_s;                /* sqrt(2*C*MTBF), C = stall */
    double ckpt_interval_s;             /* chosen (auto: max(Young/Daly, write)) */
    int64_t ckpt_interval_steps;
    double goodput_analytic;            /* first-order expected fraction */
    double run_time_s;                  /* train.steps * step time */
    double run_flops;                   /* model FLOPs of the whole run */
    /* This library's engine (lib/train) on the layout, one rank, exactly
     * as it runs it (doc/planner.md, "The engine's own numbers"); the
     * fields above model any framework on GPUs. With pp > 1, a rank of
     * the stage holding the most bytes (parameters, gradients, optimizer,
     * activations; llmt_plan_to_json lists every stage's). engine_modeled
     * 0: a layout not modelled (over 4096 layers) and the fields below
     * are 0. Per step, on the TP and
     * the DP group's communicator (MoE under ep: with the expert data
     * parallel group's, the dp/ep ranks holding the same experts), as
     * llmt_comm_get_stats counts them: calls, payload_bytes, bus_bytes. */
    int32_t engine_modeled;
    int32_t engine_store_bytes;         /* activations' element: 4 CPU, 2 CUDA */
    double engine_tp_calls, engine_tp_payload_bytes, engine_tp_bus_bytes;
    double engine_dp_calls, engine_dp_payload_bytes, engine_dp_bus_bytes;
    /* bytes the engine allocates on DP rank 0 of a TP rank: fp32 master
     * (+ bf16 copy), fp32 gradients, AdamW m and v (ZeRO >= 1: the
     * shares), activations and backward scratch for one micro-batch */
    double engine_mem_params, engine_mem_grads, engine_mem_optimizer,
           engine_mem_activations;
    /* the context parallel group's (cp > 1; 0 otherwise): the attention's
     * key/value exchange (ring steps as send + recv, or the all-gather and
     * reduce-scatter), the gradient sum and the loss sum of one step,
     * counted as the TP and DP fields are */
    double engine_cp_calls, engine_cp_payload_bytes, engine_cp_bus_bytes;
} llmt_plan_estimate;

LLMT_API llmt_status llmt_plan_get_estimate(const llmt_plan *plan,
                                            llmt_plan_estimate *out);
/* The plan as JSON (degrees, order, groups' strides, stage layers, the
 * estimate, the auto-planner's ranking when there is one, the spec).
 * Size query: buf NULL/buflen 0 gives *needed with LLMT_ERR_BUFFER_TOO_SMALL. */
LLMT_API llmt_status llmt_plan_to_json(const llmt_plan *plan, char *buf,
                                       size_t buflen, size_t *needed);
/* Human-readable notes: warnings (TP across nodes, few micro-batches for the
 * pipeline, memory) and, for an auto plan, why the chosen degrees win. */
LLMT_API llmt_status llmt_plan_explain(const llmt_plan *plan, char *buf,
                                       size_t buflen, size_t *needed);

typedef struct llmt_plan_auto_opts {
    size_t struct_size;
    double mem_fraction;     /* usable share of HBM [0.95] */
    int32_t max_tp;          /* [the ranks of a node: hardware.gpus_per_node,
                                or the host's ranks on the cpu profile] */
    int32_t keep_micro;      /* 1: keep batch.micro; 0: search 1,2,4,8 [0] */
    int32_t keep_zero;       /* 1: keep parallelism.zero [0] */
    int32_t keep_recompute;  /* 1: keep parallelism.recompute [0] */
    int32_t top_n;           /* candidates kept for explain/JSON [10] */
} llmt_plan_auto_opts;
LLMT_API llmt_status llmt_plan_auto_opts_init(llmt_plan_auto_opts *opts,
                                              size_t size);
/* Search tp, cp, pp, dp (and ep, zero, recompute, virtual stages, micro)
 * for world_size ranks keeping the spec's global batch, keep those that fit
 * in memory, pick the fastest predicted step. opts may be NULL.
 * LLMT_ERR_NOT_FOUND when nothing fits (the detail says the closest). */
LLMT_API llmt_status llmt_plan_auto(llmt_context *ctx, const llmt_spec *spec,
                                    int32_t world_size,
                                    const llmt_plan_auto_opts *opts,
                                    llmt_plan **out);
/* The same job on new_world_size ranks: tp, cp, pp kept, dp changed, the
 * global batch kept by changing grad_accum (and micro if it must).
 * LLMT_ERR_INVALID_ARGUMENT with the reason when impossible. */
LLMT_API llmt_status llmt_plan_reshape(const llmt_plan *plan,
                                       int32_t new_world_size,
                                       llmt_plan **out);

/* Young (1974): optimal checkpoint interval sqrt(2*C*MTBF), seconds.
 * Daly (2006)'s higher-order form when daly != 0:
 * sqrt(2CM)*(1 + sqrt(C/2M)/3 + C/(18M)) - C for C < 2M, else M. */
LLMT_API llmt_status llmt_young_daly_interval(double ckpt_cost_s,
                                              double mtbf_s, int32_t daly,
                                              double *out_s);

/* Monte-Carlo goodput simulation of a run under failures. */
typedef struct llmt_goodput_opts {
    size_t struct_size;
    double gpu_failures_per_hour; /* per GPU; 0: the spec's */
    double interval_s;     /* checkpoint interval to report; 0: the plan's */
    double horizon_hours;  /* wall work to simulate; 0: the run (capped 1 y) */
    double stall_s, write_s, restore_s, restart_s; /* <0: the plan's [-1] */
    int32_t trials;        /* runs per interval [32] */
    int32_t sweep_points;  /* intervals tried for the optimum [41] */
    uint64_t seed;         /* [the spec's train.seed] */
} llmt_goodput_opts;

typedef struct llmt_goodput_result {
    size_t struct_size;
    double interval_s;          /* the interval reported below */
    double goodput;             /* useful work / wall time, mean of trials */
    double goodput_stddev;
    double wall_hours, work_hours;
    double lost_work_hours;     /* recomputed work after failures */
    double ckpt_overhead_hours; /* stalls for checkpoints */
    double restart_hours;       /* restart + restore */
    double failures;            /* mean count */
    double mtbf_hours;
    double young_daly_s, young_daly_goodput;
    double best_interval_s, best_goodput;  /* the sweep's optimum */
} llmt_goodput_result;

LLMT_API llmt_status llmt_goodput_opts_init(llmt_goodput_opts *opts,
                                            size_t size);
/* Deterministic for a given seed. opts may be NULL. */
LLMT_API llmt_status llmt_plan_simulate_goodput(const llmt_plan *plan,
                                                const llmt_goodput_opts *opts,
                                                llmt_goodput_result *out);

/* ======================================================================
 * Model and trainer
 * A model is a decoder-only transformer built from a config: GPT-2
 * (LayerNorm, GELU, learned positions, tied embeddings) or Llama-style
 * (RMSNorm, RoPE, SwiGLU, grouped-query attention). Its parameters are
 * named fp32 tensors with global shapes, readable and writable in place
 * through llmt_tensor views. A trainer owns gradients, AdamW state and
 * activations for one model and runs steps on batches the host supplies.
 * A model and its trainer are not thread-safe: drive them from one thread
 * (the library uses OpenMP/OpenBLAS threads inside a call).
 * The trainer's defaults (llmt_trainer_opts_init) are a GPT-style
 * pretraining preset, not torch.optim.AdamW's: a cosine schedule to
 * min_lr 0 over total_steps 1000, AdamW beta2 0.95 (torch: 0.999),
 * weight decay 0.1 (torch: 0.01) on 2-D parameters only, and global-norm
 * gradient clipping at 1.0 (torch: none). Set the fields to match another
 * trainer's numbers. Steps are numbered from 1 (llmt_trainer_lr_at).
 * A trainer created with device = LLMT_DEVICE_CUDA keeps the working copy
 * of the parameters, gradients and moments on the GPU; the model's host
 * parameters and the views of llmt_trainer_grad / _optim_state are
 * brought up to date when they are asked for (grad, optim_state,
 * ckpt_add, sync_params), not after every step: call
 * llmt_trainer_sync_params before reading the model's parameters directly
 * (llmt_model_param, save, export). Writes to them reach the GPU through
 * llmt_trainer_ckpt_read (or a new trainer).
 * ====================================================================== */
typedef struct llmt_model llmt_model;
typedef struct llmt_trainer llmt_trainer;

typedef enum llmt_arch {
    LLMT_ARCH_GPT2 = 0,
    LLMT_ARCH_LLAMA = 1
} llmt_arch;

typedef struct llmt_model_config {
    size_t struct_size;
    int32_t arch;            /* llmt_arch; default GPT2 */
    int32_t vocab_size;      /* tokens the softmax covers; default 50257 */
    int32_t padded_vocab_size; /* rows of the embedding (>= vocab_size; 0 =
                                  vocab_size); llm.c pads to 50304 */
    int32_t max_seq_len;     /* default 1024 */
    int32_t layers;          /* default 12 */
    int32_t width;           /* d_model; default 768 */
    int32_t heads;           /* default 12; must divide width */
    int32_t kv_heads;        /* Llama GQA; 0 = heads; must divide heads */
    int32_t ffn_hidden;      /* 0 = 4*width (GPT-2) or 256-rounded 8/3*width */
    int32_t tie_embeddings;  /* -1 = arch default (GPT-2 1, Llama 0) */
    float norm_eps;          /* default 1e-5 */
    float rope_theta;        /* default 10000 */
    float init_std;          /* default 0.02; residual projections get
                                init_std/sqrt(2*layers) */
    uint64_t seed;           /* initialisation seed; default 1337 */
    /* Mixture of experts (Llama only; moe_experts 0 = dense). Layer l is
     * MoE when l % moe_every == 0: a router [E, width] and SwiGLU experts
     * stored as row blocks of three global tensors, w1 and w3 [E*moe_ffn,
     * width], w2 [E*width, moe_ffn] (layers.L.feed_forward.router.weight,
     * .experts.w1.weight, ...). Tokens take their top-k experts (softmax,
     * the k weights renormalised), each expert at most ceil(capacity_factor
     * * tokens * top_k / E) of a micro-batch's tokens unless moe_dropless;
     * a dropped choice adds nothing (the token keeps its residual). The
     * training loss adds aux_loss_coef * E * sum_e f_e P_e (Switch) and
     * z_loss_coef * mean(logsumexp(router logits)^2) per MoE layer. */
    int32_t moe_experts;
    int32_t moe_top_k;         /* 1..moe_experts; 0 = 2 (or 1 with 1 expert) */
    int32_t moe_ffn;           /* hidden size of one expert; 0 = ffn_hidden */
    int32_t moe_every;         /* 0 = 1 (every layer) */
    int32_t moe_dropless;      /* 1: no capacity limit */
    float moe_capacity_factor; /* > 0; 0 = 1.25 */
    float moe_aux_loss_coef;   /* >= 0; default 0.01 */
    float moe_z_loss_coef;     /* >= 0; default 0.001 */
    /* Shared experts (DeepSeek-MoE): moe_shared_experts always-active
     * SwiGLU experts of moe_ffn each, not routed, added to the routed
     * experts' combined output; stored as one SwiGLU of width
     * moe_shared_experts * moe_ffn (their sum is exactly that):
     * layers.L.feed_forward.shared_experts.w1/w3 [S*moe_ffn, width], .w2
     * [width, S*moe_ffn]. 0 = none. */
    int32_t moe_shared_experts;
    /* 0: the top-k weights are renormalised to sum to 1 (GShard,
     * Mixtral); 1: they are the router's softmax probabilities as they
     * are (Switch top-1, DeepSeek-V2), so that a top-1 router still
     * learns from the language-model loss (renormalised, its one weight
     * is always 1). */
    int32_t moe_raw_gates;
} llmt_model_config;

LLMT_API llmt_status llmt_model_config_init(llmt_model_config *cfg,
                                            size_t size);
/* Validate the config, allocate and initialise the parameters (seeded,
 * deterministic). Errors (heads not dividing width, ...) go to the context. */
LLMT_API llmt_status llmt_model_create(llmt_context *ctx,
                                       const llmt_model_config *cfg,
                                       llmt_model **out);
LLMT_API void llmt_model_destroy(llmt_model *model);
LLMT_API const char *llmt_model_last_error(const llmt_model *model);
/* The resolved config (defaults filled in). */
LLMT_API llmt_status llmt_model_get_config(const llmt_model *model,
                                           llmt_model_config *cfg);
/* Number of parameter tensors, and of parameter elements. */
LLMT_API llmt_status llmt_model_param_count(const llmt_model *model,
                                            int32_t *count, int64_t *numel);
/* View of parameter `index` (0..count-1); *name (may be NULL) points to a
 * string owned by the model, e.g. "h.3.attn.c_attn.weight". */
LLMT_API llmt_status llmt_model_param(llmt_model *model, int32_t index,
                                      const char **name, llmt_tensor *view);
/* View by name; LLMT_ERR_NOT_FOUND for an unknown name. */
LLMT_API llmt_status llmt_model_find_param(llmt_model *model, const char *name,
                                           llmt_tensor *view);
/* safetensors (F32) with every parameter under its name. Loading requires
 * every parameter present with the same shape, and finite values: a file
 * holding NaN/Inf is refused (LLMT_ERR_NUMERIC naming the tensor and the
 * element) and the model is left unchanged. */
LLMT_API llmt_status llmt_model_save_safetensors(llmt_model *model,
                                                 const char *path);
LLMT_API llmt_status llmt_model_load_safetensors(llmt_model *model,
                                                 const char *path);
/* llm.c GPT-2 model files (header int32[256], magic 20240326, version 3,
 * fp32 parameters). Export needs a GPT-2 model. Import creates one and,
 * like load_safetensors, refuses NaN/Inf weights naming the tensor. */
LLMT_API llmt_status llmt_model_export_llmc(llmt_model *model,
                                            const char *path);
LLMT_API llmt_status llmt_model_import_llmc(llmt_context *ctx,
                                            const char *path,
                                            llmt_model **out);

typedef enum llmt_lr_schedule {
    LLMT_LR_CONSTANT = 0,
    LLMT_LR_COSINE = 1,   /* warmup, then cosine to min_lr at total_steps */
    LLMT_LR_LINEAR = 2,   /* warmup, then linear to min_lr */
    LLMT_LR_WSD = 3       /* warmup, stable, linear decay over the last
                             decay_fraction of total_steps */
} llmt_lr_schedule;

typedef struct llmt_trainer_opts {
    size_t struct_size;
    int32_t micro_batch;     /* sequences per micro-batch; default 4 */
    int32_t seq_len;         /* default 64; <= max_seq_len */
    int32_t grad_accum;      /* micro-batches per step; default 1 */
    int32_t schedule;        /* llmt_lr_schedule; default COSINE */
    float lr;                /* peak; default 3e-4 */
    float min_lr;            /* default 0; refused off it with
                                LLMT_LR_CONSTANT, which never decays */
    int64_t warmup_steps;    /* default 0 (every schedule, constant too) */
    int64_t total_steps;     /* schedule length; default 1000; refused off
                                it with LLMT_LR_CONSTANT */
    float decay_fraction;    /* WSD only (refused off its default with
                                another schedule); default 0.2 */
    float beta1, beta2, eps; /* defaults 0.9, 0.95, 1e-8 */
    float weight_decay;      /* decoupled; not applied to 1-D params
                                (norms, biases); default 0.1 */
    float grad_clip;         /* global-norm clip; 0 = off; default 1.0 */
    int32_t recompute;       /* 0 (default): keep every activation; 1
                                (full): keep only layer inputs, recompute
                                each layer in the backward; 2 (selective):
                                recompute only the attention core (its
                                output and softmax state, the T x T part)
                                from the layer's saved qkv; others refused */
    int32_t threads;         /* OpenMP and OpenBLAS threads; 0 = default */
    int32_t device;          /* llmt_device_type: LLMT_DEVICE_CPU (default,
                                fp32) or LLMT_DEVICE_CUDA (bf16 parameters
                                and activations, fp32 master weights,
                                gradients and AdamW state; doc/gpu.md) */
    int32_t device_index;    /* CUDA ordinal; default 0 */
    int32_t deterministic;   /* CUDA: bitwise-identical repeated runs (no
                                atomics, fixed GEMM reductions); default 0 */
    int32_t fp8;             /* device trainers: 1 runs the GEMMs of the
                                transformer blocks' Linear layers in fp8,
                                forward and backward (E4M3 activations and
                                weights, gradients per fp8_format; per-tensor
                                delayed scaling; the output head stays bf16;
                                doc/fp8.md); default 0 */
    int32_t fp8_amax_history; /* delayed scaling: steps of amax history per
                                tensor, 1..1024; default 16 */
    int32_t fp8_margin;       /* scale = fp8 max / amax / 2^margin, 0..16;
                                default 0 */
    int32_t fp8_format;       /* llmt_fp8_format: the gradients' format;
                                default LLMT_FP8_HYBRID. An fp8_* option
                                off its default needs fp8 1 (refused
                                otherwise, naming it) */
} llmt_trainer_opts;

/* llmt_trainer_opts.fp8_format (the job spec's precision.fp8_format) */
typedef enum llmt_fp8_format {
    LLMT_FP8_E4M3 = 0,  /* E4M3 for every tensor */
    LLMT_FP8_HYBRID = 1 /* E4M3 forward, E5M2 gradients (TransformerEngine's
                           HYBRID: the gradients' wider range) */
} llmt_fp8_format;

/* A step's tokens: `sequences` rows of `seq_len` tokens, inputs and
 * targets (a target < 0 is ignored by the loss). For a step, sequences =
 * micro_batch * grad_accum; for evaluate, any multiple of micro_batch. */
typedef struct llmt_batch {
    size_t struct_size;
    const int32_t *inputs;
    const int32_t *targets;
    int32_t sequences;
    int32_t seq_len;
} llmt_batch;

typedef struct llmt_step_metrics {
    size_t struct_size;
    int64_t step;           /* steps done, including this one */
    float loss;             /* mean over the step's counted targets */
    float grad_norm;        /* global L2 norm before clipping */
    float lr;               /* learning rate used by this step */
    double seconds;         /* wall time of the step */
    int64_t tokens;         /* counted targets */
} llmt_step_metrics;

LLMT_API llmt_status llmt_trainer_opts_init(llmt_trainer_opts *opts,
                                            size_t size);
/* Zero the struct and set struct_size = size, like the other sized
 * structs (a batch's pointers and sizes are the caller's to fill). */
LLMT_API llmt_status llmt_batch_init(llmt_batch *batch, size_t size);
LLMT_API llmt_status llmt_step_metrics_init(llmt_step_metrics *metrics,
                                            size_t size);
/* The trainer keeps a pointer to `model`, which must outlive it. Creation
 * errors are recorded on the model (llmt_model_last_error).
 * The trainer's engine (its parameter, gradient, moment and activation
 * buffers) is made once, by the first call that needs it (step,
 * forward_backward, evaluate, generate, sync_params, grad, optim_state,
 * optim_shard, memory_usage, pp_stats, moe_stats, ckpt_add, ckpt_read),
 * from every parallel group attached before it: the attach calls
 * (llmt_trainer_set_tp_comm, _set_sequence_parallel, _set_cp_comm,
 * _set_pp_comm, _set_ep_comm, _set_comm) check their group and record it,
 * in any order, and that first call is collective over all of them
 * and returns what making the engine can fail with (out of memory, a
 * group that does not fit the layout, e.g. ep not dividing the data
 * parallel group) (doc/parallelism.md, "Attaching the groups"). llmt_job
 * makes it when the job is created. Creation checks what no
 * layout changes (the device context, the head dim). Attaching after the
 * engine is made makes it again, carrying the state, in the order each
 * attach call below names (refused otherwise with LLMT_ERR_STATE). */
LLMT_API llmt_status llmt_trainer_create(llmt_model *model,
                                         const llmt_trainer_opts *opts,
                                         llmt_trainer **out);
LLMT_API void llmt_trainer_destroy(llmt_trainer *tr);
LLMT_API const char *llmt_trainer_last_error(const llmt_trainer *tr);
/* Forward, backward over the micro-batches, clip, AdamW update. metrics
 * may be NULL. */
LLMT_API llmt_status llmt_trainer_step(llmt_trainer *tr,
                                       const llmt_batch *batch,
                                       llmt_step_metrics *metrics);
/* Forward and backward only: gradients (of the mean loss) are left in the
 * trainer, readable through llmt_trainer_grad; parameters unchanged. */
LLMT_API llmt_status llmt_trainer_forward_backward(llmt_trainer *tr,
                                                   const llmt_batch *batch,
                                                   float *loss);
/* Mean loss without gradients. A loss that is not finite (NaN/Inf
 * parameters, overflow) fails with LLMT_ERR_NUMERIC; *loss still gets it. */
LLMT_API llmt_status llmt_trainer_evaluate(llmt_trainer *tr,
                                           const llmt_batch *batch,
                                           float *loss);
/* Gradient of parameter `index` (same shape as the parameter). */
LLMT_API llmt_status llmt_trainer_grad(llmt_trainer *tr, int32_t index,
                                       llmt_tensor *view);
/* AdamW state of parameter `index`: which = 0 first moment, 1 second. */
LLMT_API llmt_status llmt_trainer_optim_state(llmt_trainer *tr, int32_t index,
                                              int32_t which,
                                              llmt_tensor *view);
/* Steps done so far (the next step is number *step + 1); settable for a
 * resume together with the optimizer state. */
LLMT_API llmt_status llmt_trainer_get_step(const llmt_trainer *tr,
                                           int64_t *step);
LLMT_API llmt_status llmt_trainer_set_step(llmt_trainer *tr, int64_t step);
/* Learning rate the schedule gives step number `step`. Steps are numbered
 * from 1 everywhere: step k is the k-th optimizer step, the one whose
 * llmt_step_metrics.step (and llmt_job_metrics.step) is k, so
 * lr_at(metrics.step) == metrics.lr; llmt_trainer_get_step gives the
 * number of the last step done (0 before the first). step < 1:
 * LLMT_ERR_INVALID_ARGUMENT. */
LLMT_API llmt_status llmt_trainer_lr_at(const llmt_trainer *tr, int64_t step,
                                        float *lr);
/* Append `n_new` sampled tokens after `prompt` (n_prompt >= 1) into
 * out[0..n_new). temperature <= 0 is greedy; top_k <= 0 is no cut. The
 * context window slides when longer than max_seq_len. */
LLMT_API llmt_status llmt_trainer_generate(llmt_trainer *tr,
                                           const int32_t *prompt,
                                           int32_t n_prompt, int32_t n_new,
                                           float temperature, int32_t top_k,
                                           uint64_t seed, int32_t *out);

/* -- The trainer's state in a checkpoint (lib/ckpt's format; see
 * doc/training.md). Tensors "param/<name>", "adam_m/<name>",
 * "adam_v/<name>" (fp32, global shapes), the key "trainer.step", the
 * learning-rate schedule "trainer.schedule" (reading a checkpoint saved
 * under another schedule logs a warning: the resumed run is no longer the
 * saved one's continuation) and the model's config as keys "model.arch", "model.vocab_size",
 * "model.padded_vocab_size", "model.max_seq_len", "model.layers",
 * "model.width", "model.heads", "model.kv_heads", "model.ffn_hidden",
 * "model.tie_embeddings" (for tools; loading checks the tensors' shapes).
 * Without a communicator every tensor is added whole. With one
 * (llmt_trainer_set_comm, any ZeRO stage) each rank adds only its share of
 * each tensor as blocks with global offsets (create the llmt_ckpt with
 * this rank and world size); reading, under any dp size or stage, takes
 * the parameters whole and, when the optimizer state is sharded, only the
 * rank's share of it (doc/checkpointing.md, "Data-parallel checkpoints").
 * Under pipeline parallelism each stage adds and reads only the blocks of
 * the tensors it holds, under the same global names (layer l is saved as
 * layer l whichever stage held it; a tied wte once, by the first stage),
 * so a pipeline's checkpoint is a single rank's and any layout reads it
 * ("Pipeline-parallel checkpoints"). */
struct llmt_ckpt;
/* Add the state to the save being described on `ck` (between
 * llmt_ckpt_begin and llmt_ckpt_save; the host adds its own keys, e.g. the
 * data loader's position, and saves). */
LLMT_API llmt_status llmt_trainer_ckpt_add(llmt_trainer *tr,
                                           struct llmt_ckpt *ck);
/* Restore parameters, AdamW moments and the step from the checkpoint open
 * on `ck` (llmt_ckpt_open_latest/_step). Every tensor's shape is checked
 * before anything is overwritten. With data parallelism each rank reads
 * only its shares of what is sharded (the moments under ZeRO >= 1, the
 * parameters too under ZeRO-3), so the read is collective in effect: the
 * other ranks must read the same checkpoint before the next step. */
LLMT_API llmt_status llmt_trainer_ckpt_read(llmt_trainer *tr,
                                            struct llmt_ckpt *ck);

/* ======================================================================
 * Checkpoint (doc/checkpointing.md, doc/checkpoint-format.md)
 * A checkpoint is a directory ROOT/step-NNNNNNNNNNNN holding one data file
 * and one part manifest per rank and, once every rank's part is there, the
 * manifest.json that commits it; ROOT/latest names the newest committed one.
 * A host saves arbitrary named tensor views with their shard placement
 * (global shape + global offsets of its local block) plus key/values, and
 * loads them back under any other placement (resharding): only the byte
 * ranges that overlap the caller's block are read.
 * Save = snapshot into a reused host buffer (the views may change as soon as
 * llmt_ckpt_save returns), then persist on a writer thread (libaio +
 * O_DIRECT where available, buffered I/O otherwise), fsync, commit.
 * One handle belongs to one thread of the host; the tier hook and log sink
 * run on the writer thread.
 * ====================================================================== */
typedef struct llmt_ckpt llmt_ckpt;

typedef enum llmt_ckpt_tier {
    LLMT_CKPT_TIER_HOST = 0,    /* the last snapshot, in host memory */
    LLMT_CKPT_TIER_LOCAL = 1,   /* the handle's root directory */
    LLMT_CKPT_TIER_PEER = 2,    /* a partner rank's replica (through the hook) */
    LLMT_CKPT_TIER_DURABLE = 3  /* opts.durable_dir, or the host's object store */
} llmt_ckpt_tier;

/* Tier hook, called on the writer thread:
 *  - tier PEER, after this rank's data file and part manifest are fsynced:
 *    `path` is this rank's data file; the host sends it (with the part
 *    manifest beside it, same name with .json) to its partner rank;
 *  - tier DURABLE, after the checkpoint is committed by this rank (and copied
 *    to opts.durable_dir when set): `path` is the committed directory; the
 *    host may upload it to its own object store.
 * A non-OK return is logged as a warning; the local checkpoint stays valid. */
typedef llmt_status (*llmt_ckpt_tier_fn)(void *user, llmt_ckpt_tier tier,
                                         int64_t step, const char *path);

/* Verification on load. */
#define LLMT_CKPT_VERIFY_NONE 0  /* trust the data files */
#define LLMT_CKPT_VERIFY_READ 1  /* check the hashes of every block read */
#define LLMT_CKPT_VERIFY_FULL 2  /* also hash every chunk when opening, and
                                    skip a checkpoint that fails */

typedef struct llmt_ckpt_opts {
    size_t struct_size;
    int32_t rank;               /* default 0 */
    int32_t world_size;         /* default 1: ranks that save one checkpoint */
    /* Bound of the snapshot buffer in bytes; 0 (default): as large as one
     * save of this rank needs, reused across saves. A save that needs more
     * than a non-zero bound fails with LLMT_ERR_BUFFER_TOO_SMALL. */
    uint64_t host_buffer_bytes;
    int32_t direct_io;          /* 1 (default): O_DIRECT (+libaio); 0: buffered */
    int32_t verify;             /* LLMT_CKPT_VERIFY_*; default READ */
    /* Retention of committed checkpoints in the root (applied by the rank
     * that commits): keep the newest keep_last (default 3, 0 = keep all) and
     * every step that is a multiple of keep_every (default 0 = none). */
    int32_t keep_last;
    int32_t keep_every;
    /* Durable tier: a directory (shared filesystem) that committed
     * checkpoints are copied to with the same commit protocol; NULL: none.
     * Retention there: durable_keep_last (default 0 = all), durable_keep_every. */
    const char *durable_dir;
    int32_t durable_keep_last;
    int32_t durable_keep_every;
    llmt_ckpt_tier_fn tier_fn;  /* NULL: none */
    void *tier_user;
} llmt_ckpt_opts;

LLMT_API llmt_status llmt_ckpt_opts_init(llmt_ckpt_opts *opts, size_t size);
/* `root` is created if absent. opts may be NULL (defaults). ctx may be NULL. */
LLMT_API llmt_status llmt_ckpt_create(llmt_context *ctx, const char *root,
                                      const llmt_ckpt_opts *opts,
                                      llmt_ckpt **out);
/* Waits for a save in flight, then frees everything. NULL is a no-op. */
LLMT_API void llmt_ckpt_destroy(llmt_ckpt *ck);
LLMT_API const char *llmt_ckpt_last_error(const llmt_ckpt *ck);

/* -- Saving. begin; add tensors and key/values; save. ------------------- */
/* Start describing the save of `step` (>= 0). Drops a description that was
 * begun but not saved. */
LLMT_API llmt_status llmt_ckpt_begin(llmt_ckpt *ck, int64_t step);
/* Add this rank's block of the global tensor `name` (1..255 printable
 * characters, no '"' or '\\'). `view` is a host view (any strides);
 * global_shape NULL means the view's own shape, global_offsets NULL means
 * zeros. The view is only read by llmt_ckpt_save. A name may be added by
 * several ranks (disjoint blocks); blocks of one tensor across ranks must
 * not overlap unless identical (replicas). */
LLMT_API llmt_status llmt_ckpt_add_tensor(llmt_ckpt *ck, const char *name,
                                          const llmt_tensor *view,
                                          const int64_t *global_shape,
                                          const int64_t *global_offsets);
/* A user key/value (UTF-8 strings). Keys of all ranks are merged; for a key
 * set by several ranks the lowest rank wins. Re-setting replaces. */
LLMT_API llmt_status llmt_ckpt_set_kv(llmt_ckpt *ck, const char *key,
                                      const char *value);
/* The plan (any JSON object text) recorded in the manifest; rank 0's wins. */
LLMT_API llmt_status llmt_ckpt_set_plan_json(llmt_ckpt *ck, const char *json);
/* Snapshot the views, then persist. async=0: returns when this rank's part
 * is durable (and the checkpoint committed if this rank completed it).
 * async=1: returns after the snapshot; query with llmt_ckpt_save_status or
 * llmt_ckpt_wait. A save waits first for the previous one to finish (the
 * snapshot buffer is reused). Fails with LLMT_ERR_STATE if `step` is
 * already committed in the root. */
LLMT_API llmt_status llmt_ckpt_save(llmt_ckpt *ck, int32_t async);
/* LLMT_OK: no save in flight and the last one succeeded (*step, may be NULL,
 * gets its step, -1 if none); LLMT_ERR_IN_PROGRESS; or the failure of the
 * last save (detail in llmt_ckpt_last_error). Never blocks. */
LLMT_API llmt_status llmt_ckpt_save_status(llmt_ckpt *ck, int64_t *step);
/* Wait for the save in flight; timeout_ms < 0 waits forever. Returns its
 * result, or LLMT_ERR_TIMEOUT. */
LLMT_API llmt_status llmt_ckpt_wait(llmt_ckpt *ck, int64_t timeout_ms);
/* Abandon the handle's newest save (a host whose step failed, or that is
 * told to stop), so that its step is never committed. Call it from the
 * thread that saves (not from the tier hook: LLMT_ERR_STATE). It does
 * every one of these that applies:
 *  - a description begun (llmt_ckpt_begin) and not saved is dropped;
 *  - a save in flight (async) is stopped: the writer thread ends its data
 *    file's write between pieces (the I/O already submitted is drained,
 *    never torn down mid-request), skips the fsync and every later phase,
 *    and removes this rank's part; cancel blocks until it has (a few I/O
 *    pieces; a small file being written, or a node-local root's copy of
 *    the part into the durable tier, runs to its end first);
 *  - with world_size 1, a save whose job has ended with its part written
 *    but the step not committed has that part withdrawn, unless a
 *    description was begun since (the newest save is that one).
 * With world_size > 1 a save can be cancelled only until this rank's part
 * manifest is written: the rank committing the step reads every part
 * manifest and then writes manifest.json, so no withdrawal after that
 * could be sure the step does not commit. A stop that reaches the writer
 * later is not taken (the save goes on to its commit attempt), and a
 * cancel after the save ended returns LLMT_ERR_STATE saying the part is
 * written: the step commits when every rank's part is there, else stays
 * an uncommitted directory that resume and llmt_ckpt_list ignore,
 * retention removes once a newer step commits, and a later save of the
 * same step replaces. A withdrawn part goes manifest first, then its data
 * file and the step directory if empty. Committed steps (in the
 * root or the durable tier) and `latest` are never touched; a replica the
 * tier hook already sent (TIER_PEER) is the host's. The handle stays
 * usable; afterwards llmt_ckpt_save_status and llmt_ckpt_wait report the
 * save before the cancelled one (LLMT_OK, its step), and
 * llmt_ckpt_open_snapshot no longer offers the cancelled snapshot.
 * With several ranks, cancel on every rank (the host's collective
 * decision): a rank that does not keeps its part, uncommitted.
 * Returns LLMT_OK when it abandoned a save (or only dropped a description)
 * whose step is not committed and cannot be; LLMT_ERR_STATE, naming the
 * state, when there is nothing to cancel (no save on the handle, the last
 * one already cancelled, or failed), this rank's part is written with
 * world_size > 1 (above), or the save had been committed (by this rank or
 * another) before the cancel reached it: a committed checkpoint is not
 * withdrawn (see llmt_ckpt_quarantine_newer). A description begun is
 * dropped whatever it returns. */
LLMT_API llmt_status llmt_ckpt_cancel(llmt_ckpt *ck);

/* -- Loading. ---------------------------------------------------------- */
/* Open the newest complete checkpoint of the root for reading. Partial or
 * corrupt ones are skipped, each with a logged reason (WARN). *step gets the
 * step. LLMT_ERR_NOT_FOUND when there is none: the message says "no
 * checkpoint in ROOT" when the root holds no step directory at all, and
 * otherwise "no usable checkpoint in ROOT" followed by one line per step
 * directory with the reason it is unusable. A manifest whose chunks do not
 * cover every element of a tensor counts as corrupt. */
LLMT_API llmt_status llmt_ckpt_open_latest(llmt_ckpt *ck, int64_t *step);
/* Open one step (fails, naming the reason, if it is not complete/valid). */
LLMT_API llmt_status llmt_ckpt_open_step(llmt_ckpt *ck, int64_t step);
/* Open a checkpoint directory by path (for tools: verify, inspect). */
LLMT_API llmt_status llmt_ckpt_open_dir(llmt_ckpt *ck, const char *dir);
/* Host-memory tier: open this handle's last snapshot (this rank's blocks
 * only) from the snapshot buffer, without touching the disk; also after a
 * save whose write failed (e.g. disk full). Waits for a save in flight.
 * Valid until the next llmt_ckpt_save, which closes it. *step (may be NULL)
 * gets its step. LLMT_ERR_NOT_FOUND before the first save. */
LLMT_API llmt_status llmt_ckpt_open_snapshot(llmt_ckpt *ck, int64_t *step);
/* Tensors of the open checkpoint: count, then name/info by index 0..n-1
 * (names stay valid until the next open or destroy). */
LLMT_API llmt_status llmt_ckpt_tensor_count(llmt_ckpt *ck, size_t *out);
LLMT_API llmt_status llmt_ckpt_tensor_name(llmt_ckpt *ck, size_t index,
                                           const char **name);
/* dtype, ndim, global shape (LLMT_MAX_DIMS entries) and chunk count of a
 * tensor; any output pointer may be NULL. LLMT_ERR_NOT_FOUND if absent. */
LLMT_API llmt_status llmt_ckpt_tensor_info(llmt_ckpt *ck, const char *name,
                                           llmt_dtype *dtype, int32_t *ndim,
                                           int64_t *global_shape,
                                           size_t *nchunks);
/* Fill `dst` (a host view of the caller's block, contiguous or strided, no
 * stride 0: its shape is the local shape, dtype must equal the saved one;
 * strided since 2026-11-27) with the region of the
 * global tensor starting at global_offsets (NULL: zeros), reading only the
 * byte ranges of the chunks that overlap it. Hashes are checked per opts.
 * LLMT_ERR_NOT_FOUND if some element of the region was never saved. */
LLMT_API llmt_status llmt_ckpt_read(llmt_ckpt *ck, const char *name,
                                    const llmt_tensor *dst,
                                    const int64_t *global_offsets);
/* A key/value or the plan of the open checkpoint: NUL-terminated into buf
 * (may be NULL when buflen is 0); *needed (may be NULL) gets the size with
 * the NUL. LLMT_ERR_BUFFER_TOO_SMALL when it did not fit. */
LLMT_API llmt_status llmt_ckpt_get_kv(llmt_ckpt *ck, const char *key,
                                      char *buf, size_t buflen, size_t *needed);
LLMT_API llmt_status llmt_ckpt_get_plan_json(llmt_ckpt *ck, char *buf,
                                             size_t buflen, size_t *needed);
/* Step of the open checkpoint (-1 if none is open). */
LLMT_API llmt_status llmt_ckpt_open_step_of(llmt_ckpt *ck, int64_t *step);
/* Hash every chunk of the open checkpoint. LLMT_ERR_CHECKSUM names the
 * first bad chunk; LLMT_ERR_FORMAT/IO for a missing or short file. */
LLMT_API llmt_status llmt_ckpt_verify(llmt_ckpt *ck);

/* -- Housekeeping. ----------------------------------------------------- */
/* Committed steps in the root, ascending: up to cap into steps (may be NULL
 * when cap is 0); *count gets how many there are. Does not validate data. */
LLMT_API llmt_status llmt_ckpt_list(llmt_ckpt *ck, int64_t *steps, size_t cap,
                                    size_t *count);
/* Apply retention to the root (and durable dir) now; also removes partial
 * directories older than the newest committed step. The newest step that
 * verifies completely is always kept, even when corrupt newer ones fill
 * keep_last. *removed may be NULL. */
LLMT_API llmt_status llmt_ckpt_prune(llmt_ckpt *ck, size_t *removed);
/* Move every step directory newer than `step` (-1: all of them) to
 * ROOT/quarantine/step-N.<UTC time>/ with a REASON file saying why it is
 * unusable; none of them is deleted. In the steps it keeps (`step` and
 * older) it removes the temporary files a crashed writer left
 * (.NAME.tmp.PID.TID, of no live process on this host). Refuses, moving
 * nothing, if one of them is a valid checkpoint. Resume calls it after
 * opening the newest usable step so that the steps it retrains can be
 * saved again. With several ranks sharing the root, call it on one rank
 * and barrier before the next save.
 * A save also quarantines a broken directory of its own step by itself.
 * *moved (may be NULL) gets the count. Not while a save is in flight. */
LLMT_API llmt_status llmt_ckpt_quarantine_newer(llmt_ckpt *ck, int64_t step,
                                                size_t *moved);
/* Write the open checkpoint's tensors, each consolidated to its full global
 * shape, as one safetensors file (key/values go to __metadata__). */
LLMT_API llmt_status llmt_ckpt_export_safetensors(llmt_ckpt *ck,
                                                  const char *path);

/* -- Inspection of the open checkpoint. -------------------------------- */
/* World size it was saved with, total bytes of its data files and the
 * number of key/values; any output may be NULL. */
LLMT_API llmt_status llmt_ckpt_open_info(llmt_ckpt *ck, int32_t *world_size,
                                         uint64_t *data_bytes, size_t *nkv);
/* Key `index` (0..nkv-1), valid until the next open or destroy. */
LLMT_API llmt_status llmt_ckpt_kv_key(llmt_ckpt *ck, size_t index,
                                      const char **key);
/* Placement of chunk `chunk` of a tensor: the saving rank, the block's
 * global offsets and local shape (LLMT_MAX_DIMS entries each) and its
 * bytes; any output may be NULL. */
LLMT_API llmt_status llmt_ckpt_chunk_info(llmt_ckpt *ck, const char *name,
                                          size_t chunk, int32_t *rank,
                                          int64_t *global_offsets,
                                          int64_t *local_shape,
                                          uint64_t *bytes);

/* Export of GPT-2 parameters to an llm.c model file (version 3, fp32),
 * written by lib/model's writer. The config is read from the tensors
 * (prefix + "wte", "wpe", "h.N...."), the head count and vocabulary size
 * from the options or the checkpoint's keys "model.heads" and
 * "model.vocab_size". */
typedef struct llmt_ckpt_llmc_opts {
    size_t struct_size;
    const char *prefix;   /* tensor name prefix; default "param/" (trainer) */
    int32_t heads;        /* 0: key model.heads (required one way or other) */
    int32_t vocab_size;   /* 0: key model.vocab_size, else the wte rows */
} llmt_ckpt_llmc_opts;
LLMT_API llmt_status llmt_ckpt_llmc_opts_init(llmt_ckpt_llmc_opts *opts,
                                              size_t size);
LLMT_API llmt_status llmt_ckpt_export_llmc(llmt_ckpt *ck, const char *path,
                                           const llmt_ckpt_llmc_opts *opts);

/* -- Peer tier (collective over a communicator of the checkpoint ranks:
 * rank i of `comm` is rank i of the handles). ---------------------------- */
struct llmt_comm;
/* After `step` is saved by every rank: rank r sends its part (data file and
 * part manifest) to rank (r+1) % world, which checks its hashes and keeps it
 * under ROOT/peer/step-N/ (older replicas beyond keep_last are removed).
 * Fails (on the ranks concerned) if a rank has no part of the step. */
LLMT_API llmt_status llmt_ckpt_peer_replicate(llmt_ckpt *ck,
                                              struct llmt_comm *comm,
                                              int64_t step);
/* Every rank whose own part of `step` is missing from ROOT/step-N/ (a lost
 * or replaced node) gets it back from its partner's replica; *restored (may
 * be NULL) is 1 on a rank that was restored. LLMT_ERR_NOT_FOUND on a rank
 * whose part and replica are both gone. */
LLMT_API llmt_status llmt_ckpt_peer_restore(llmt_ckpt *ck,
                                            struct llmt_comm *comm,
                                            int64_t step, int32_t *restored);

/* ======================================================================
 * Communicators (doc/comm.md)
 * A communicator is one rank's membership of a group of `size` ranks.
 * Backends: in-process (ranks are threads of one process; for tests and
 * one-node CPU runs), MPI (one rank per process), NCCL (GPU buffers).
 * Collectives are called by every rank of the group in the same order; each
 * gets the group's next sequence number and an entry in the flight recorder
 * (a ring of the last opts.recorder_size operations). No call blocks longer
 * than opts.timeout_ms: a rank that waits longer gets LLMT_ERR_TIMEOUT, the
 * detail names the ranks that did not reach that sequence number, the
 * recorders of every reachable rank are dumped (log, and opts.dump_path),
 * and the communicator is aborted (every later call: LLMT_ERR_ABORTED).
 * Thread rules: one host thread drives a communicator (the async calls run
 * on its progress thread); different communicators may be driven from
 * different threads; llmt_comm_abort may be called from any thread.
 * Buffers are the caller's: host memory for in-process and MPI, device
 * memory for NCCL. `stream` is a cudaStream_t for NCCL (NULL: the legacy
 * default stream) and must be NULL for the other backends.
 * ====================================================================== */
typedef struct llmt_comm llmt_comm;
typedef struct llmt_comm_work llmt_comm_work;

typedef enum llmt_comm_backend {
    /* from the environment: MPI if launched by an MPI launcher, Gloo with
     * RANK/WORLD_SIZE and $LLMT_COMM_STORE, else a single-rank in-process
     * group */
    LLMT_COMM_AUTO = 0,
    LLMT_COMM_INPROC = 1,
    LLMT_COMM_MPI = 2,
    LLMT_COMM_NCCL = 3,
    /* Gloo over TCP, one rank per process (llmt_comm_create_from_store) */
    LLMT_COMM_GLOO = 4
} llmt_comm_backend;

typedef enum llmt_reduce_op {
    LLMT_REDUCE_SUM = 0,
    LLMT_REDUCE_AVG = 1,   /* sum / size; integers truncate toward zero */
    LLMT_REDUCE_MAX = 2,
    LLMT_REDUCE_MIN = 3
} llmt_reduce_op;

typedef struct llmt_comm_opts {
    size_t struct_size;
    int32_t backend;          /* llmt_comm_backend; default AUTO */
    /* Longest wait of one operation; 0 (llmt_comm_opts_init's): the
     * default, $LLMT_COMM_TIMEOUT_MS or 300000 (there is always a
     * deadline). < 0 or more than a year (31622400000) is refused. */
    int64_t timeout_ms;
    int32_t recorder_size;    /* flight recorder entries; default 1024 */
    /* On a timeout each rank writes its dump to "<dump_path>.<rank>"
     * (the rank in this communicator); NULL: $LLMT_COMM_DUMP_PATH or none.
     * The dump also goes to the log at LLMT_LOG_ERROR. */
    const char *dump_path;
    int32_t cuda_device;      /* NCCL: device to use; -1 (default): LOCAL_RANK
                                 modulo the device count */
    /* NCCL bootstrap without MPI: a file on a path every rank sees. Rank 0
     * writes the unique id to it, the others poll for it (until timeout). */
    const char *rendezvous_path;
} llmt_comm_opts;

/* Where this process sits in the job, read from the launcher's variables:
 * OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (Open MPI), PMI_RANK/
 * PMI_SIZE (MPICH, Intel MPI), SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID,
 * RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT
 * (torchrun). Without any: rank 0 of 1, launcher "none". */
typedef struct llmt_comm_env {
    size_t struct_size;
    int32_t rank, world_size, local_rank, local_size;
    char launcher[16];        /* "openmpi", "pmi", "slurm", "torchrun", "none" */
    char master_addr[256];    /* torchrun's MASTER_ADDR, else "" */
    int32_t master_port;      /* torchrun's MASTER_PORT, else 0 */
} llmt_comm_env;

LLMT_API llmt_status llmt_comm_opts_init(llmt_comm_opts *opts, size_t size);
LLMT_API llmt_status llmt_comm_env_discover(llmt_comm_env *out, size_t size);

/* In-process group of `world_size` ranks: comms[i] is rank i's handle, to
 * be driven by its own thread. Each handle is destroyed separately. */
LLMT_API llmt_status llmt_comm_create_inproc(llmt_context *ctx,
                                             int32_t world_size,
                                             const llmt_comm_opts *opts,
                                             llmt_comm **comms);
/* From the launcher's environment (see llmt_comm_env). MPI: initialises
 * MPI (MPI_THREAD_MULTIPLE) if the host did not, and finalises it when the
 * last communicator created this way is destroyed. NCCL: bootstraps from
 * MPI when launched by an MPI launcher, else from opts.rendezvous_path. */
LLMT_API llmt_status llmt_comm_create_from_env(llmt_context *ctx,
                                               const llmt_comm_opts *opts,
                                               llmt_comm **out);
/* From the host's MPI_Comm, passed as a pointer to it (MPI_Comm *), which
 * the library duplicates. Backend MPI (default) or NCCL (bootstrapped over
 * it). MPI must be initialised with at least MPI_THREAD_SERIALIZED, or
 * MPI_THREAD_MULTIPLE to use the async calls. */
LLMT_API llmt_status llmt_comm_create_from_mpi(llmt_context *ctx,
                                               void *mpi_comm,
                                               const llmt_comm_opts *opts,
                                               llmt_comm **out);
/* NCCL: a unique id (LLMT_COMM_UNIQUE_ID_BYTES) made on one rank and
 * distributed by the host, then every rank creates its communicator. */
#define LLMT_COMM_UNIQUE_ID_BYTES 128
LLMT_API llmt_status llmt_comm_unique_id(void *id, size_t len);
LLMT_API llmt_status llmt_comm_create_from_unique_id(llmt_context *ctx,
                                                     const void *id, size_t len,
                                                     int32_t rank,
                                                     int32_t world_size,
                                                     const llmt_comm_opts *opts,
                                                     llmt_comm **out);

/* Gloo (build feature LLMT_FEATURE_GLOO): `world_size` processes meet
 * through a file store, a directory every rank sees (`store_dir`), under a
 * key prefix. A peer that dies or stops gives the others an error
 * (LLMT_ERR_TIMEOUT or LLMT_ERR_COMM) within opts.timeout_ms, never a hang,
 * and aborts the communicator; the survivors can then create a new one with
 * a new prefix (and their new ranks). A prefix is used once: its keys stay
 * in the store. opts.backend must be AUTO or GLOO. The TCP address of this
 * rank: $LLMT_GLOO_HOSTNAME, else $LLMT_GLOO_IFACE (an interface name),
 * else 127.0.0.1. Launched with RANK/WORLD_SIZE and $LLMT_COMM_STORE set,
 * llmt_comm_create_from_env does the same (prefix $LLMT_COMM_STORE_PREFIX,
 * default "llmt"). */
LLMT_API llmt_status llmt_comm_create_from_store(llmt_context *ctx, const char *store_dir,
                                                 const char *prefix, int32_t rank,
                                                 int32_t world_size, const llmt_comm_opts *opts,
                                                 llmt_comm **out);

/* Sub-groups. Collective over `comm`. Ranks with the same color >= 0 form a
 * group, ordered by (key, rank); color < 0 gives *out = NULL. */
LLMT_API llmt_status llmt_comm_split(llmt_comm *comm, int32_t color,
                                     int32_t key, llmt_comm **out);
/* The group of the listed ranks (of `comm`), in the list's order (e.g. from
 * llmt_plan_group). Collective over `comm`; every rank passes the same list;
 * ranks not in it get *out = NULL. */
LLMT_API llmt_status llmt_comm_create_group(llmt_comm *comm,
                                            const int32_t *ranks, size_t n,
                                            llmt_comm **out);

/* This rank's group along `dim` of `plan` (llmt_plan_group), ordered as
 * the plan lists it. Collective over `comm`, whose ranks must be the plan's
 * ranks (same size). */
LLMT_API llmt_status llmt_comm_create_plan_group(llmt_comm *comm,
                                                 const llmt_plan *plan,
                                                 llmt_plan_dim dim,
                                                 llmt_comm **out);

/* Stop everything now, never blocking: waiting calls of this rank (and, in
 * process, of the whole group) return LLMT_ERR_ABORTED. */
LLMT_API llmt_status llmt_comm_abort(llmt_comm *comm);
/* Wait for the async work of this rank, then a barrier. Collective. */
LLMT_API llmt_status llmt_comm_finalize(llmt_comm *comm);
/* Free the handle (async work is waited for, or dropped if aborted).
 * NULL is a no-op. */
LLMT_API void llmt_comm_destroy(llmt_comm *comm);
LLMT_API const char *llmt_comm_last_error(const llmt_comm *comm);

LLMT_API llmt_status llmt_comm_rank(const llmt_comm *comm, int32_t *rank);
LLMT_API llmt_status llmt_comm_size(const llmt_comm *comm, int32_t *size);
LLMT_API llmt_status llmt_comm_backend_of(const llmt_comm *comm,
                                          llmt_comm_backend *out);
/* Sequence number the next collective will get (the first is 1). */
LLMT_API llmt_status llmt_comm_next_seq(const llmt_comm *comm, uint64_t *out);

/* Traffic of one communicator since its creation or the last reset, by
 * operation (index: llmt_comm_stat_op; values are never renumbered). Only
 * completed operations count. payload_bytes: the bytes of the caller's
 * send buffer(s). bus_bytes: the bytes this rank sends on the wire under
 * the ring algorithms, by nccl-tests' bus-bandwidth factors (S = the
 * operation's total data, n = ranks): all-reduce 2(n-1)/n*S, all-gather,
 * reduce-scatter and all-to-all (n-1)/n*S, broadcast and send S; the
 * planner predicts the same quantity (llmt_plan_estimate.comm_bytes_*).
 * seconds: wall time from entering the operation to its completion (for
 * async ones, on the progress thread). Thread-safe. */
typedef enum llmt_comm_stat_op {
    LLMT_COMM_STAT_ALL_REDUCE = 0,
    LLMT_COMM_STAT_ALL_GATHER = 1,
    LLMT_COMM_STAT_REDUCE_SCATTER = 2,
    LLMT_COMM_STAT_ALL_TO_ALL = 3,
    LLMT_COMM_STAT_ALL_TO_ALLV = 4,
    LLMT_COMM_STAT_BROADCAST = 5,
    LLMT_COMM_STAT_SEND = 6,
    LLMT_COMM_STAT_RECV = 7,
    LLMT_COMM_STAT_BARRIER = 8
} llmt_comm_stat_op;
#define LLMT_COMM_STAT_SLOTS 16 /* room for later operations */
typedef struct llmt_comm_stats {
    size_t struct_size;
    uint64_t calls[LLMT_COMM_STAT_SLOTS];
    uint64_t payload_bytes[LLMT_COMM_STAT_SLOTS];
    double bus_bytes[LLMT_COMM_STAT_SLOTS];
    double seconds[LLMT_COMM_STAT_SLOTS];
    uint64_t total_calls;       /* sums over the operations */
    double total_bus_bytes, total_seconds;
} llmt_comm_stats;
LLMT_API llmt_status llmt_comm_get_stats(const llmt_comm *comm,
                                         llmt_comm_stats *out);
LLMT_API llmt_status llmt_comm_reset_stats(llmt_comm *comm);

/* -- Collectives (counts in elements). send may equal recv (in place)
 * where the layout allows: all_reduce, broadcast; for all_gather send may
 * be recv + rank*count; for reduce_scatter recv may be send + rank*count. */
LLMT_API llmt_status llmt_comm_all_reduce(llmt_comm *comm, const void *send,
                                          void *recv, size_t count,
                                          llmt_dtype dtype, llmt_reduce_op op,
                                          void *stream);
/* recv holds size*count: rank r's block at r*count. */
LLMT_API llmt_status llmt_comm_all_gather(llmt_comm *comm, const void *send,
                                          void *recv, size_t count,
                                          llmt_dtype dtype, void *stream);
/* send holds size*count; rank r gets the reduction of block r. */
LLMT_API llmt_status llmt_comm_reduce_scatter(llmt_comm *comm,
                                              const void *send, void *recv,
                                              size_t count, llmt_dtype dtype,
                                              llmt_reduce_op op, void *stream);
/* Block j of send (count elements) goes to rank j, landing at block r of
 * its recv. send and recv must not overlap. */
LLMT_API llmt_status llmt_comm_all_to_all(llmt_comm *comm, const void *send,
                                          void *recv, size_t count,
                                          llmt_dtype dtype, void *stream);
/* Variable sizes: send_counts[j] elements from send + send_displs[j] go to
 * rank j, which receives them at recv + recv_displs[r] (recv_counts[r]
 * must match). Arrays have `size` entries, in elements. */
LLMT_API llmt_status llmt_comm_all_to_allv(llmt_comm *comm, const void *send,
                                           const size_t *send_counts,
                                           const size_t *send_displs,
                                           void *recv,
                                           const size_t *recv_counts,
                                           const size_t *recv_displs,
                                           llmt_dtype dtype, void *stream);
LLMT_API llmt_status llmt_comm_broadcast(llmt_comm *comm, void *buf,
                                         size_t count, llmt_dtype dtype,
                                         int32_t root, void *stream);
/* Point to point; matched in order per (sender, receiver) pair. The count
 * and dtype must agree (LLMT_ERR_INVALID_ARGUMENT otherwise). */
LLMT_API llmt_status llmt_comm_send(llmt_comm *comm, const void *buf,
                                    size_t count, llmt_dtype dtype,
                                    int32_t peer, void *stream);
LLMT_API llmt_status llmt_comm_recv(llmt_comm *comm, void *buf, size_t count,
                                    llmt_dtype dtype, int32_t peer,
                                    void *stream);
LLMT_API llmt_status llmt_comm_barrier(llmt_comm *comm);

/* -- Async collectives (for data parallelism: bucketed gradient reduction
 * overlapped with backward, ZeRO gathers). The operation is queued to the
 * communicator's progress thread and runs in issue order; the buffers must
 * stay valid and untouched until the work completes. A blocking call on the
 * same communicator first waits for the queued work. *work must be freed
 * with llmt_comm_work_free (after completion, or it waits). */
LLMT_API llmt_status llmt_comm_iall_reduce(llmt_comm *comm, const void *send,
                                           void *recv, size_t count,
                                           llmt_dtype dtype, llmt_reduce_op op,
                                           llmt_comm_work **work);
LLMT_API llmt_status llmt_comm_ireduce_scatter(llmt_comm *comm,
                                               const void *send, void *recv,
                                               size_t count, llmt_dtype dtype,
                                               llmt_reduce_op op,
                                               llmt_comm_work **work);
LLMT_API llmt_status llmt_comm_iall_gather(llmt_comm *comm, const void *send,
                                           void *recv, size_t count,
                                           llmt_dtype dtype,
                                           llmt_comm_work **work);
/* *done = 1 when finished; returns the operation's status once done
 * (LLMT_OK while it runs). Never blocks. */
LLMT_API llmt_status llmt_comm_work_test(llmt_comm_work *work, int *done);
/* Wait up to timeout_ms (< 0: until the operation ends, which is itself
 * bounded by the communicator's timeout). Returns the operation's status,
 * or LLMT_ERR_IN_PROGRESS when the wait ran out first. */
LLMT_API llmt_status llmt_comm_work_wait(llmt_comm_work *work,
                                         int64_t timeout_ms);
/* Waits if needed, then frees. NULL is a no-op. */
LLMT_API void llmt_comm_work_free(llmt_comm_work *work);

/* -- Flight recorder. Text, one line per entry, oldest first:
 * "seq=12 op=all_reduce dtype=fp32 count=1024 peer=-1 size=4 state=completed
 *  start=<unix s> end=<unix s> dur_us=..". */
LLMT_API llmt_status llmt_comm_recorder_dump(llmt_comm *comm, char *buf,
                                             size_t buflen, size_t *needed);
LLMT_API llmt_status llmt_comm_recorder_dump_file(llmt_comm *comm,
                                                  const char *path);


/* -- Data parallelism (doc/comm.md). Attach a communicator to a trainer:
 * every rank of `comm` calls llmt_trainer_step with its own micro_batch x
 * grad_accum sequences; the global batch is micro x accum x size and the
 * steps give the model one rank would train on the concatenated batch (up
 * to the summation order of the gradients). Gradients are reduced in
 * buckets of whole layers as the backward finishes them (on the
 * communicator's progress thread). ZeRO stage 1 shards the optimizer
 * update, 2 also reduce-scatters the gradients, 3 also keeps only this
 * rank's share of each layer's parameters between uses (the rest is
 * gathered just before the layer runs, the next layer prefetched, and
 * poisoned with NaN after). step and forward_backward are then
 * collective and report the global loss; with ZeRO-3 evaluate and generate
 * are collective too (they gather layers) but return this rank's own
 * result. With ZeRO >= 1 the AdamW state is sharded in memory: a rank holds
 * only its shares (see llmt_trainer_optim_shard); gradients and parameters
 * keep full-size buffers (ZeRO-2/3 use only the rank's part of them). */
typedef struct llmt_dp_opts {
    size_t struct_size;
    int32_t zero_stage;       /* 0..3; default 0 */
    int32_t overlap;          /* 1 (default): reduce buckets during the
                                 backward; 0: all at the end */
    int64_t bucket_bytes;     /* gradient bucket size; default 4 MiB (whole
                                 layers are never split) */
} llmt_dp_opts;
LLMT_API llmt_status llmt_dp_opts_init(llmt_dp_opts *opts, size_t size);
/* The trainer keeps `comm`, which must outlive it (NULL detaches). All
 * ranks must have identical parameters (same seed) when attached. With
 * zero_stage >= 1 the optimizer state present when attaching (zeros, or
 * one read from a checkpoint) is cut into this rank's shares and the
 * full-size buffers are freed. Detaching, or attaching another
 * communicator or stage, while one is attached is collective over the old
 * communicator (every rank calls it): ZeRO-3 parameters and a sharded
 * optimizer state are all-gathered back to full size first; if that fails
 * the old communicator stays attached. */
LLMT_API llmt_status llmt_trainer_set_comm(llmt_trainer *tr, llmt_comm *comm,
                                           const llmt_dp_opts *opts);
/* Tensor parallelism (Megatron-LM's splits; doc/parallelism.md) over
 * `comm`, the group of ranks that share each layer (the plan's innermost
 * dimension; llmt_comm_create_plan_group), which must outlive the trainer
 * (NULL or a group of 1: no split). Before the engine is made
 * (llmt_trainer_create) it is recorded, in any order with the other
 * groups; after, it is collective over comm and must come before
 * llmt_trainer_set_comm. Identical parameters on every rank (same
 * seed): each rank then keeps only its shards of the parameters,
 * gradients, AdamW state and of the activations of its heads, MLP columns
 * and vocabulary columns. step, forward_backward, evaluate and generate
 * become collective over comm and return the group's result; the host
 * copies (llmt_trainer_grad, the model's parameters after
 * llmt_trainer_sync_params) stay whole and are gathered over comm when
 * read, so reading them is collective too. Data parallelism composes
 * (llmt_trainer_set_comm afterwards, on the DP group; ZeRO 0-3 shard the
 * local shards). Checkpoints: llmt_trainer_ckpt_add becomes collective
 * over comm (and the DP group) and each rank adds only its blocks of the
 * global tensors (every rank of the group saves, with its own rank in
 * llmt_ckpt_opts); llmt_trainer_ckpt_read reads each rank's shards under
 * any tp, dp and ZeRO stage. llmt_trainer_optim_shard's offsets are in
 * the local shard, not in the whole tensor. Fails, naming the
 * key, when comm's size does not divide model.heads, width, ffn_hidden or
 * the padded vocabulary (or kv_heads and tp divide neither way), and with
 * LLMT_ERR_UNSUPPORTED on a backend without the vocabulary-split ops.
 * fp8 (llmt_trainer_opts.fp8) composes: the step's amaxes are maximised
 * over the group, so each scale is the whole tensor's. */
LLMT_API llmt_status llmt_trainer_set_tp_comm(llmt_trainer *tr, llmt_comm *comm);
/* Sequence parallelism (Megatron-LM, Korthikanti et al. 2022; the spec's
 * parallelism.sequence_parallel) over the tensor parallel group: on = 1
 * splits what tensor parallelism keeps whole on every rank -- the
 * residual stream, LayerNorm/RMSNorm and their outputs, the embedding
 * output -- by rows: of a micro-batch's B x seq_len rows flattened, rank
 * r of the group holds the r-th contiguous block of B x seq_len / tp.
 * Each all-reduce of tensor parallelism becomes an all-gather before a
 * column-parallel Linear (and before the vocabulary-parallel head) and a
 * reduce-scatter after a row-parallel one and after the embedding (the
 * reverse in the backward); the norms' weight gradients are summed over
 * the group. Results are those of tensor parallelism alone up to the
 * order of fp32 sums; activation memory per rank falls (the rows kept
 * for the backward are divided by tp; llmt_trainer_memory's activations
 * shows it). Call it after llmt_trainer_set_tp_comm; on a made engine
 * (llmt_trainer_create) before llmt_trainer_set_comm, collective over the
 * tensor parallel group, it makes the engine again from the host copies
 * (on = 0 turns it off;
 * asking for the current setting does nothing and is never refused). A
 * later llmt_trainer_set_tp_comm with another group of more than one
 * rank keeps it; detaching tensor parallelism (NULL or a group of 1)
 * ends it. Context parallelism (llmt_trainer_set_cp_comm) composes when
 * attached after it. Fails with LLMT_ERR_STATE without a tensor parallel
 * group of more than one rank or, on a made engine, after
 * llmt_trainer_set_comm or llmt_trainer_set_cp_comm, and with
 * LLMT_ERR_INVALID_ARGUMENT, naming model.seq_len, when tp does not
 * divide seq_len (evaluate and generate calls of other lengths are padded
 * at the end to a multiple of tp, which causal attention makes exact);
 * on other than 0 or 1 is refused too. Backends: those tensor
 * parallelism runs on (the CPU and the emulation; not CUDA yet). */
LLMT_API llmt_status llmt_trainer_set_sequence_parallel(llmt_trainer *tr, int32_t on);
/* This rank's share of the AdamW state of parameter `index` (which = 0
 * first moment, 1 second): a 1-D view of the elements [*flat_offset,
 * *flat_offset + view.shape[0]) of the parameter flattened in row-major
 * order (shape 0 when this rank owns none of it). Without ZeRO >= 1 it is
 * the whole parameter (flat_offset 0); llmt_trainer_optim_state fails with
 * LLMT_ERR_STATE while the state is sharded. Valid until the next
 * llmt_trainer_set_comm. */
LLMT_API llmt_status llmt_trainer_optim_shard(llmt_trainer *tr, int32_t index,
                                              int32_t which,
                                              llmt_tensor *view,
                                              int64_t *flat_offset);
/* Host memory the trainer and its model hold, by category, in bytes (for
 * a device trainer: the host copies), plus the device memory of a device
 * trainer. Set struct_size; fields past it are not written. */
typedef struct llmt_trainer_memory {
    size_t struct_size;
    int64_t params;       /* the model's parameter buffer (full size, also
                             under ZeRO-3; see params_resident) */
    int64_t grads;        /* gradients (full size) */
    int64_t optimizer;    /* AdamW m and v held by this rank */
    int64_t activations;  /* activations and backward scratch */
    int64_t comm_buffers; /* data-parallel staging (ZeRO >= 1) of the
                             units dp does not divide, O(largest unit);
                             0 when dp divides every unit (the collectives
                             then run in place) */
    int64_t total;        /* the sum (with params, the full buffer) */
    int64_t params_resident; /* of params, the bytes held in memory now:
                             all of them, except under ZeRO-3 between uses,
                             where the whole pages outside this rank's
                             share of each ungathered unit are given back
                             to the OS (not with a user llmt_allocator or
                             LLMT_DP_POISON=1; see doc/comm.md) */
    int64_t device_activations; /* device trainer: activations and backward
                             scratch planned up front for micro_batch x
                             seq_len (0 on the CPU) */
    int64_t device_in_use;   /* device trainer: bytes its allocator holds now */
    int64_t device_peak;     /* device trainer: the most it held so far */
} llmt_trainer_memory;
LLMT_API llmt_status llmt_trainer_memory_usage(const llmt_trainer *tr,
                                               llmt_trainer_memory *out);
/* ZeRO-3: gather the full parameters on every rank (collective), e.g.
 * before reading or saving them. A no-op for stages 0-2. A device trainer:
 * copy the parameters and moments from the GPU into the model's host
 * parameters and the optimizer-state views. */
LLMT_API llmt_status llmt_trainer_sync_params(llmt_trainer *tr);

/* -- Pipeline parallelism (doc/parallelism.md). Attach the pipeline group
 * `comm` (the plan's PP dimension; llmt_comm_create_plan_group): rank s of
 * it becomes stage s of p and keeps only its layers' parameters,
 * gradients, AdamW state and activations, plus the embedding on stage 0
 * and the final norm, output head and loss on stage p-1 (a tied head: the
 * last stage holds a copy of wte whose gradient the two stages sum, as
 * Megatron-LM's embedding group does). Every stage calls
 * llmt_trainer_step with the same batch; its grad_accum micro-batches are
 * the pipeline's micro-batches, taken in the single-rank order, and their
 * activations and gradients pass between neighbouring stages by
 * llmt_comm_send/recv. The step reports the global loss (the last
 * stage's, known to all), clips by the norm over all stages and updates
 * each stage's own parameters: the model one rank would train, up to the
 * order of the gradient norm's sums. A stage keeps the activations of every
 * micro-batch in flight (all m under GPipe, at most p - s under 1F1B, 2
 * (p - s - 1) + (v - 1) p + 1 chunks interleaved, all m v when m == p):
 * the schedules differ in activation memory, not in results; the
 * trainer's recompute option applies inside each set.
 * Collective over comm (NULL or a group of 1: one stage, nothing to do)
 * on a made engine (llmt_trainer_create; before, recorded in any order
 * with the other groups); a made engine takes it once (LLMT_ERR_STATE
 * after), fresh or read from a checkpoint, with identical parameters on
 * every stage. Tensor
 * parallelism composes: llmt_trainer_set_tp_comm (and
 * llmt_trainer_set_sequence_parallel) before, on the TP group, splits the
 * stage's layers (what passes between stages is then the TP-replicated,
 * or sequence-sharded, hidden state); so does context parallelism:
 * llmt_trainer_set_cp_comm before (after TP), on the CP group, makes each
 * stage's engine for its seq_len / cp rows of every sequence (the CP ranks
 * of a stage run the same schedule; boundary tensors shrink cp-fold);
 * data parallelism too:
 * llmt_trainer_set_comm afterwards on the stage's DP group, ZeRO 0 or 1
 * (2 and 3: LLMT_ERR_UNSUPPORTED). llmt_trainer_evaluate and
 * llmt_trainer_generate become forward-only pipeline passes, collective
 * over comm (every stage calls them with the same arguments and gets the
 * same result). Checkpoints: llmt_trainer_ckpt_add and _read save and
 * read only this stage's tensors (read after attaching: any pp x tp x dp
 * layout reads any other's checkpoint). Virtual stages compose with
 * tensor and data parallelism (test mpi-train-pp2v2-mpi: tp 2 x pp 2 x
 * v 2 x dp 2) and with fp8 (each stage's amaxes maximised over comm:
 * every stage holds the whole recipe state); the host copies of the
 * parameters are current only for this stage's tensors (after
 * llmt_trainer_sync_params). */
typedef enum llmt_pp_schedule {
    LLMT_PP_1F1B = 0,       /* PipeDream-flush (default): warm-up forwards,
                               then one forward one backward */
    LLMT_PP_GPIPE = 1,      /* all forwards, then all backwards */
    LLMT_PP_INTERLEAVED = 2 /* Megatron-LM's virtual stages: virtual_stages
                               chunks a stage, chunk c of stage s being
                               virtual stage c p + s; micro-batches in
                               groups of p (grad_accum a multiple of p) */
} llmt_pp_schedule;
typedef struct llmt_pp_opts {
    size_t struct_size;
    int32_t schedule;       /* llmt_pp_schedule; default LLMT_PP_1F1B */
    int32_t virtual_stages; /* model chunks per stage; 1 (default) */
    /* layers per stage, first to last (n_stage_layers = the group's size,
     * each >= 1, summing to model.layers; e.g. from llmt_plan_stage_layers;
     * interleaved: one per virtual stage, pp x virtual_stages of them);
     * NULL / 0: the automatic balance, which puts fewer layers on the
     * first and last stage when the embedding and the head weigh as much
     * as layers do */
    const int32_t *stage_layers;
    int32_t n_stage_layers;
} llmt_pp_opts;
LLMT_API llmt_status llmt_pp_opts_init(llmt_pp_opts *opts, size_t size);
/* Fails, naming the key, when the group (times virtual_stages) is larger
 * than model.layers, stage_layers does not match it, virtual stages are
 * asked of another schedule than LLMT_PP_INTERLEAVED, or interleaving
 * gets a grad_accum that is not a multiple of the stages (>= 1 of them);
 * LLMT_PP_INTERLEAVED over NCCL: LLMT_ERR_UNSUPPORTED (its messages wrap
 * round the stages, so a send that waits for its receiver would wait
 * forever; in-process, MPI and Gloo stages leave their sends in flight). */
LLMT_API llmt_status llmt_trainer_set_pp_comm(llmt_trainer *tr, llmt_comm *comm,
                                              const llmt_pp_opts *opts);
/* This stage's layers and its last step's pipeline timing: the bubble is
 * the fraction of the schedule's wall time spent waiting in receives
 * (compare bubble_balanced, a balanced pipeline's), bubble_cpu the same on
 * the stages' compute-time clocks: each runs on the thread CPU time of its
 * stage's forwards and backwards (a stage computing on one thread: threads
 * 1) and moves on to a message's stamp, its sender's clock, when that is
 * later; so it is the share of the step's span the stage would wait with
 * a core of its own, unmoved by other load on the machine. Filled up to
 * struct_size; all zero (stages 1) without pipeline parallelism. */
typedef struct llmt_pp_stats {
    size_t struct_size;
    int32_t stage, stages;           /* this rank's, of the group */
    int32_t first_layer, layers;     /* it holds [first_layer, + layers)
                                        (interleaved: its first chunk's
                                        first layer, all chunks' count) */
    int32_t micro_batches, schedule; /* per step; llmt_pp_schedule */
    int32_t in_flight;               /* micro-batches (chunks) whose
                                        activations it holds at once (m
                                        GPipe, p-s 1F1B, interleaved as
                                        llmt_trainer_set_pp_comm says) */
    int64_t param_bytes;             /* fp32 parameters it holds */
    double step_seconds;             /* last step: the schedule's wall time */
    double idle_seconds;             /* of it, waiting in receives */
    double bubble;                   /* idle_seconds / step_seconds */
    double bubble_balanced;          /* (p-1)/(m+p-1); interleaved
                                        (p-1)/(v m+p-1) */
    int64_t sent_bytes, recv_bytes;  /* last step's activations + gradients */
    double busy_cpu_seconds;         /* its ops' thread CPU time */
    double span_cpu_seconds;         /* the step's largest clock (every
                                        stage's the same; 0: not measured,
                                        NCCL) */
    double bubble_cpu;               /* 1 - busy_cpu / span_cpu */
} llmt_pp_stats;
LLMT_API llmt_status llmt_trainer_pp_stats(const llmt_trainer *tr, llmt_pp_stats *out);

/* -- Context parallelism (doc/parallelism.md, "Context parallelism"): the
 * sequence of every micro-batch split over `comm`, the CP group (the
 * plan's LLMT_DIM_CP: ranks of equal TP coordinate; from
 * llmt_comm_create_plan_group), which must outlive the trainer (NULL or a
 * group of 1: none). With the causal load balance of Megatron-Core and
 * Llama 3, seq_len is cut into 2 x cp chunks and rank r of the group holds
 * chunks r and 2 cp - 1 - r of every sequence (so each rank gets the same
 * share of the causal triangle); everything but attention runs on those
 * rows unchanged, with their global positions (RoPE, learned position
 * embeddings), and attention sees the whole sequence by exchanging the
 * key/value blocks (variant below) with online-softmax merging; the
 * backward returns dK/dV to their owners the same way. Weights are
 * replicated over the group: their gradients and the losses are summed
 * over it, so results are those of one rank up to the order of fp32 sums.
 * Every rank of the group calls llmt_trainer_step (and evaluate) with the
 * same whole sequences, as the ranks of a tensor parallel group do; the
 * loss weighting counts every target of the batch once. Before the engine
 * is made (llmt_trainer_create) the group is recorded, in any order with
 * the others. On a made engine, the order of attach
 * calls: llmt_trainer_set_tp_comm first (each CP rank keeps its TP shard;
 * the CP group joins ranks of equal TP rank), then this, then
 * llmt_trainer_set_comm on the DP group (any ZeRO stage; its reductions
 * and the CP sum are both linear). Collective over comm: it makes the
 * engine again for seq_len / cp rows from the host copies of the
 * parameters and moments (call it again with another group to change it;
 * NULL detaches). step, forward_backward, evaluate and generate become
 * collective over comm (generate runs each token's window padded to
 * seq_len through the split engine). Checkpoints: the group's ranks hold
 * the same state, so llmt_trainer_ckpt_add adds tensors only on CP rank 0
 * (the others add key/values alone), and any cp, tp, dp layout reads it.
 * Sequence parallelism set before (llmt_trainer_set_sequence_parallel)
 * composes: its row blocks split this rank's micro x seq_len / cp rows
 * over the TP group, attention runs on them gathered. Pipeline
 * parallelism attached after (llmt_trainer_set_pp_comm) composes: each
 * stage's engine is made for the seq_len / cp rows and runs the exchange
 * in its layers; a stage sums its gradients and loss over the group.
 * Fails with LLMT_ERR_INVALID_ARGUMENT, naming parallelism.cp and
 * model.seq_len, when 2 x cp does not divide seq_len (with sequence
 * parallelism: or tp does not divide seq_len / cp), and for a variant
 * other than those below; on a made engine LLMT_ERR_STATE after
 * llmt_trainer_set_comm, llmt_trainer_set_pp_comm or
 * llmt_trainer_set_ep_comm; LLMT_ERR_UNSUPPORTED on a backend without the
 * context parallel attention ops. The exchange runs on host memory (a
 * device backend's blocks are staged through it). fp8 composes (the
 * step's amaxes maximised over the group). */
typedef enum llmt_cp_variant {
    LLMT_CP_RING = 0,      /* cp - 1 ring steps of every rank's K/V block
                              (send to r + 1, receive from r - 1) */
    LLMT_CP_ALL_GATHER = 1 /* Llama 3: one all-gather of K/V per layer,
                              dK/dV reduce-scattered to their owners */
} llmt_cp_variant;
typedef struct llmt_cp_opts {
    size_t struct_size;
    int32_t variant; /* llmt_cp_variant; default LLMT_CP_RING */
} llmt_cp_opts;
LLMT_API llmt_status llmt_cp_opts_init(llmt_cp_opts *opts, size_t size);
LLMT_API llmt_status llmt_trainer_set_cp_comm(llmt_trainer *tr, llmt_comm *comm,
                                              const llmt_cp_opts *opts);
/* This rank's share of the sequence: filled up to struct_size; size 1,
 * local_seq_len = seq_len and chunks {0, -1} without context parallelism. */
typedef struct llmt_cp_stats {
    size_t struct_size;
    int32_t rank, size;    /* this rank's, of the CP group */
    int32_t variant;       /* llmt_cp_variant */
    int32_t seq_len;       /* the whole sequence */
    int32_t local_seq_len; /* the rows of each sequence held: seq_len / cp */
    int32_t chunk_len;     /* seq_len / (2 cp) */
    int32_t chunks[2];     /* the chunks held, in this order: rank and
                              2 cp - 1 - rank */
} llmt_cp_stats;
LLMT_API llmt_status llmt_trainer_cp_stats(const llmt_trainer *tr, llmt_cp_stats *out);

/* Mixture of experts (llmt_model_config.moe_*): the last training step's
 * routing of MoE layer `layer` (-1: summed over the MoE layers), summed
 * over its micro-batches and, with data parallelism, over the data
 * parallel group (the global batch; every rank gets the same): counts[e]
 * tokens expert e processed (kept under the capacity; n must equal
 * moe_experts), dropped (token, choice) pairs, and the aux and z losses
 * as the step's loss adds them before their coefficients (mean over all
 * micro-batches, summed over layers). Outputs may be NULL. LLMT_ERR_UNSUPPORTED for a dense model. Not thread-safe with a
 * step running. */
LLMT_API llmt_status llmt_trainer_moe_stats(llmt_trainer *tr, int32_t layer, int64_t *counts,
                                            int32_t n, int64_t *dropped, double *aux_loss,
                                            double *z_loss);
/* Expert parallelism (doc/moe.md): the MoE layers' experts split over
 * `comm`, the EP group (the plan's LLMT_DIM_EP: consecutive data parallel
 * ranks; llmt_comm_create_plan_group), which must outlive the trainer
 * (NULL or a group of 1: every expert here). Rank j of the group runs
 * experts [j*E/ep, (j+1)*E/ep) of every MoE layer on the tokens each rank
 * of the group routes to them: each rank routes its own tokens as one
 * rank does (the capacity, drops and dropless are those of ep 1), the
 * kept rows go to the experts' ranks by all-to-all and come back combined
 * in the tokens' order (four all-to-alls per MoE layer and micro-batch, of
 * a fixed E x capacity x width floats each: the bytes
 * llmt_plan_estimate.comm_bytes_ep predicts). The data parallel group
 * (llmt_trainer_set_comm, either order) must contain the EP group and ep
 * must divide its size: a step without it fails with LLMT_ERR_STATE. The
 * router and the dense parameters are reduced over it as before; an
 * expert's gradient over the ranks of equal EP rank (the expert data
 * parallel group). The trainer then holds only its E/ep experts
 * (parameters, gradients and AdamW moments of this rank's rows of each
 * expert tensor): attached before the engine is made (llmt_trainer_create),
 * in any order with the other groups, the engine is made for them from
 * the start; on a made engine it is made again for them (tensor, context
 * and pipeline parallelism are then refused after it), and
 * llmt_trainer_sync_params gathers the other ranks' rows into the
 * model's tensors (collective over comm; between steps they are not
 * held); gradients and moments read on the host hold this rank's rows
 * only. Checkpoints hold each expert once, as rows of the global tensor
 * (any ep reads them). Results equal ep 1's up to the order of fp32
 * sums. Collective over comm (and the data parallel group when attached),
 * as are step and forward_backward. Fails with
 * LLMT_ERR_UNSUPPORTED on a dense model (moe_experts 0) and with
 * LLMT_ERR_INVALID_ARGUMENT, naming parallelism.ep, when the group's size
 * does not divide moe_experts. Not thread-safe with a step running. */
LLMT_API llmt_status llmt_trainer_set_ep_comm(llmt_trainer *tr, llmt_comm *comm);

/* ======================================================================
 * Tokenizers (doc/tokenizers.md)
 * Three kinds behind one handle: bytes (256 byte tokens + <|endoftext|> =
 * 256), GPT-2 BPE loaded from encoder.json + vocab.bpe (ids identical to
 * OpenAI's encoder), and byte-level BPE learned from a corpus with the GPT-2
 * pre-tokenizer (the last id is <|endoftext|>). Any of them saves to and
 * loads from one file of ours. Encoding takes arbitrary bytes (invalid UTF-8
 * is encoded byte by byte, never rejected) and never produces <|endoftext|>
 * from text: hosts insert the id from llmt_tokenizer_eot between documents.
 * decode(encode(x)) == x for every byte string x.
 * Threads: encode uses a per-handle cache, so one thread at a time per
 * handle (llmt_tokenizer_clone gives each thread its own); decode,
 * vocab_size, eot, token_bytes, clone and save may run concurrently with
 * each other (not with encode on the same handle).
 * ====================================================================== */
typedef struct llmt_tokenizer llmt_tokenizer;

/* ctx may be NULL in every function below; creation errors go to ctx. */
LLMT_API llmt_status llmt_tokenizer_create_bytes(llmt_context *ctx,
                                                 llmt_tokenizer **out);
LLMT_API llmt_status llmt_tokenizer_load_gpt2(llmt_context *ctx,
                                              const char *encoder_json,
                                              const char *vocab_bpe,
                                              llmt_tokenizer **out);
/* Learn vocab_size - 257 merges (257 <= vocab_size <= 1<<24) from `text`:
 * most frequent adjacent pair inside pre-tokenized words, ties to the
 * smallest (left id, right id). Stops early when no pair occurs twice, so
 * llmt_tokenizer_vocab_size may be below vocab_size. Ids 0..255 are the
 * bytes, 256.. the merges in order, the last id <|endoftext|>. */
LLMT_API llmt_status llmt_tokenizer_train_bpe(llmt_context *ctx,
                                              const char *text, size_t len,
                                              int32_t vocab_size,
                                              llmt_tokenizer **out);
LLMT_API llmt_status llmt_tokenizer_save(llmt_tokenizer *tok, const char *path);
LLMT_API llmt_status llmt_tokenizer_load(llmt_context *ctx, const char *path,
                                         llmt_tokenizer **out);
/* ids may be NULL (size query, cap ignored); *n_out gets the count. When
 * cap is too small: LLMT_ERR_BUFFER_TOO_SMALL, *n_out = the count needed. */
LLMT_API llmt_status llmt_tokenizer_encode(llmt_tokenizer *tok,
                                           const char *text, size_t len,
                                           int32_t *ids, size_t cap,
                                           size_t *n_out);
/* Bytes of the ids (<|endoftext|> gives its text) into buf (no NUL added);
 * buf may be NULL for a size query. Ids outside [0, vocab_size) fail with
 * LLMT_ERR_INVALID_ARGUMENT naming the position. */
LLMT_API llmt_status llmt_tokenizer_decode(llmt_tokenizer *tok,
                                           const int32_t *ids, size_t n,
                                           char *buf, size_t cap,
                                           size_t *len_out);
LLMT_API llmt_status llmt_tokenizer_vocab_size(const llmt_tokenizer *tok,
                                               int32_t *out);
LLMT_API llmt_status llmt_tokenizer_eot(const llmt_tokenizer *tok,
                                        int32_t *out);
/* Bytes of one token (no NUL) into buf; *len_out gets its length. */
LLMT_API llmt_status llmt_tokenizer_token_bytes(const llmt_tokenizer *tok,
                                                int32_t id, char *buf,
                                                size_t cap, size_t *len_out);
/* An independent copy (own word cache): one per thread, or to encode
 * through a const handle. */
LLMT_API llmt_status llmt_tokenizer_clone(llmt_context *ctx,
                                          const llmt_tokenizer *tok,
                                          llmt_tokenizer **out);
/* NULL is a no-op. */
LLMT_API void llmt_tokenizer_destroy(llmt_tokenizer *tok);
LLMT_API const char *llmt_tokenizer_last_error(const llmt_tokenizer *tok);

/* ======================================================================
 * Data: corpus ingest, quality filters, deduplication, token shards and the
 * deterministic loader (doc/data.md, doc/formats/token-shard.md)
 * The path of a corpus: ingest (files, directories, JSONL) -> normalise
 * (line endings, UTF-8) -> quality filters -> exact and MinHash/LSH
 * near-duplicate removal -> tokenizer -> token shards (written atomically,
 * read with pread) -> loader. Each stage is usable on its own; one call runs
 * them all (llmt_data_prepare). Handles are not thread-safe (one thread at a
 * time per handle) unless a function says otherwise.
 * ====================================================================== */

/* Why a document was removed (or kept). Fixed values, never renumbered. */
typedef enum llmt_data_verdict {
    LLMT_DATA_KEEP = 0,
    LLMT_DATA_TOO_SHORT = 1,  /* fewer code points than min_chars */
    LLMT_DATA_TOO_LONG = 2,   /* more code points than max_chars */
    LLMT_DATA_NONALPHA = 3,   /* too many non-alphabetic characters */
    LLMT_DATA_DUP_LINES = 4,  /* too many lines repeat earlier lines */
    LLMT_DATA_TOP_NGRAM = 5,  /* one word n-gram covers too much text */
    LLMT_DATA_EXACT_DUP = 6,  /* same normalised text as a kept document */
    LLMT_DATA_NEAR_DUP = 7,   /* estimated Jaccard >= threshold with a kept one */
    LLMT_DATA_VERDICTS = 8    /* number of verdicts (array sizes) */
} llmt_data_verdict;

/* "keep", "too_short", ...; "unknown" for other values. */
LLMT_API const char *llmt_data_verdict_name(int32_t verdict);

/* -- Normalisation. CRLF and lone CR become LF; each invalid UTF-8 sequence
 * (maximal subpart, as Unicode recommends) becomes U+FFFD and is counted;
 * NUL bytes are dropped and counted. `out` needs at most 3 * len bytes;
 * out may equal text only when no byte can grow (never assume it). *out_len
 * gets the normalised length; *invalid (may be NULL) the replacements. */
LLMT_API llmt_status llmt_data_normalize(const char *text, size_t len,
                                         char *out, size_t cap,
                                         size_t *out_len, int64_t *invalid);

/* -- Ingest: documents from text files, directories (recursively, sorted by
 * name; hidden files, symlinks and binary files (a NUL byte in the first
 * 8 KiB) skipped) and JSONL files (name ending
 * .jsonl or .ndjson: one JSON object a line, the document in `text_field`).
 * A plain text file is one document, or several when doc_separator names a
 * line that separates them (e.g. "%" for fortune files). Documents come out
 * normalised (llmt_data_normalize); empty ones are skipped. Malformed JSONL
 * lines are skipped, counted and logged with file and line number. */
typedef struct llmt_ingest llmt_ingest;

typedef struct llmt_ingest_opts {
    size_t struct_size;
    const char *text_field;    /* JSONL key; default "text". Copied. */
    const char *doc_separator; /* NULL (default): one document per text file.
                                  Copied. */
} llmt_ingest_opts;

typedef struct llmt_ingest_stats {
    size_t struct_size;
    int64_t files;          /* files opened so far */
    int64_t documents;      /* documents returned so far */
    int64_t bytes_read;     /* input bytes consumed so far */
    int64_t bytes_total;    /* input bytes of every file found at open */
    int64_t invalid_utf8;   /* sequences replaced by U+FFFD (and NULs) */
    int64_t bad_lines;      /* JSONL lines skipped (bad JSON, no text) */
} llmt_ingest_stats;

LLMT_API llmt_status llmt_ingest_opts_init(llmt_ingest_opts *opts, size_t size);
/* Lists every input now (a missing path fails here, naming it). */
LLMT_API llmt_status llmt_ingest_open(llmt_context *ctx,
                                      const char *const *inputs, size_t n,
                                      const llmt_ingest_opts *opts,
                                      llmt_ingest **out);
/* Next document: *text (NUL-terminated, owned by the handle, valid until the
 * next call) and *len; at the end *text = NULL, *len = 0 and LLMT_OK. */
LLMT_API llmt_status llmt_ingest_next(llmt_ingest *it, const char **text,
                                      size_t *len);
LLMT_API llmt_status llmt_ingest_get_stats(const llmt_ingest *it,
                                           llmt_ingest_stats *stats);
LLMT_API void llmt_ingest_destroy(llmt_ingest *it);
LLMT_API const char *llmt_ingest_last_error(const llmt_ingest *it);

/* -- Quality filters (the heuristics of Gopher, Rae et al. 2021, sec. A.1.1,
 * with its thresholds as defaults). A threshold of 0 turns its filter off.
 * Lengths count code points; "words" are runs of non-space characters. */
typedef struct llmt_data_filter_opts {
    size_t struct_size;
    int64_t min_chars;          /* default 16 */
    int64_t max_chars;          /* default 0 (no limit) */
    double max_nonalpha_frac;   /* of non-space code points that are not
                                   letters; default 0.5 */
    double max_dup_line_frac;   /* of lines equal to an earlier non-empty line
                                   of the document; default 0.3 */
    double max_top_ngram_frac;  /* of word characters covered by the most
                                   frequent word 2-gram; default 0.2 */
    int64_t ngram_min_words;    /* the 2-gram filter looks only at documents
                                   of at least this many words; default 50
                                   (Gopher's minimum document length: a
                                   short saying that repeats one pair is
                                   not boilerplate); 0 = every document */
} llmt_data_filter_opts;

LLMT_API llmt_status llmt_data_filter_opts_init(llmt_data_filter_opts *opts,
                                                size_t size);
/* *verdict gets the first filter (in enum order) that removes the document,
 * or LLMT_DATA_KEEP. Thread-safe. */
LLMT_API llmt_status llmt_data_filter_check(const llmt_data_filter_opts *opts,
                                            const char *text, size_t len,
                                            int32_t *verdict);

/* -- Deduplication: exact (xxhash64 of the normalised text) and near
 * (MinHash over word shingles, LSH banding to find candidates, then the
 * signature estimate of Jaccard similarity against `threshold`). A document
 * is compared with the documents kept before it that LSH makes candidates
 * (a pair at Jaccard 0.9 is one with probability > 0.9998 under the
 * defaults); the first one kept wins. */
typedef struct llmt_dedup llmt_dedup;

typedef struct llmt_dedup_opts {
    size_t struct_size;
    int32_t exact;          /* default 1 */
    int32_t near;           /* default 1 */
    int32_t shingle;        /* words per shingle; default 5. A document of
                               fewer words is one shingle. */
    int32_t permutations;   /* MinHash functions; default 128 */
    int32_t bands;          /* LSH bands; default 16 (rows = permutations /
                               bands; bands must divide permutations) */
    double threshold;       /* default 0.8 */
    uint64_t seed;          /* hash functions; default 42 */
} llmt_dedup_opts;

LLMT_API llmt_status llmt_dedup_opts_init(llmt_dedup_opts *opts, size_t size);
LLMT_API llmt_status llmt_dedup_create(llmt_context *ctx,
                                       const llmt_dedup_opts *opts,
                                       llmt_dedup **out);
/* *verdict: LLMT_DATA_KEEP (the document is remembered), LLMT_DATA_EXACT_DUP
 * or LLMT_DATA_NEAR_DUP. *similar (may be NULL) gets the estimated Jaccard
 * with the kept document it matched (1 for exact, 0 when kept). */
LLMT_API llmt_status llmt_dedup_add(llmt_dedup *d, const char *text,
                                    size_t len, int32_t *verdict,
                                    double *similar);
/* The MinHash signature of `text` (`permutations` values) without adding
 * it; the fraction of equal entries of two signatures estimates Jaccard. */
LLMT_API llmt_status llmt_dedup_signature(llmt_dedup *d, const char *text,
                                          size_t len, uint64_t *sig,
                                          size_t cap);
LLMT_API void llmt_dedup_destroy(llmt_dedup *d);
LLMT_API const char *llmt_dedup_last_error(const llmt_dedup *d);

/* -- Token shards. Our format (doc/formats/token-shard.md): a header with
 * magic, version, dtype (uint16 when the vocabulary fits, else uint32),
 * counts and xxhash64 checksums, the tokens, then the document index. A
 * writer writes PATH.tmp, and finish() checksums, fsyncs and renames it to
 * PATH (then fsyncs the directory): a shard file is whole or absent. */
typedef struct llmt_shard_writer llmt_shard_writer;

LLMT_API llmt_status llmt_shard_writer_create(llmt_context *ctx,
                                              const char *path,
                                              int32_t vocab_size,
                                              llmt_shard_writer **out);
/* Append one document (ids in [0, vocab_size)); the host adds separators
 * (e.g. the tokenizer's <|endoftext|>) itself. */
LLMT_API llmt_status llmt_shard_writer_add(llmt_shard_writer *w,
                                           const int32_t *ids, size_t n);
LLMT_API llmt_status llmt_shard_writer_finish(llmt_shard_writer *w);
/* Tokens and documents added so far. */
LLMT_API llmt_status llmt_shard_writer_count(const llmt_shard_writer *w,
                                             int64_t *tokens,
                                             int64_t *documents);
/* Without finish(): removes PATH.tmp. NULL is a no-op. */
LLMT_API void llmt_shard_writer_destroy(llmt_shard_writer *w);
LLMT_API const char *llmt_shard_writer_last_error(const llmt_shard_writer *w);

/* llm.c's token file (int32[256] header: magic 20240520, version 1, token
 * count; then uint16 tokens), written atomically as above. */
LLMT_API llmt_status llmt_shard_write_llmc(llmt_context *ctx, const char *path,
                                           const int32_t *ids, size_t n);

/* -- A dataset: a set of shards read with pread. `path` is a shard file
 * (ours or llm.c's, told apart by magic), a directory (its *.tok and *.bin
 * files, sorted by name) or a glob pattern. Every header is validated when
 * opening (magic, version, sizes against the file size); with verify the
 * token and index checksums are checked too. Errors name the file and the
 * byte offset. Successful reads may run from several threads at once (a
 * failing call records its message on the handle: one thread at a time
 * when the detail matters). */
typedef struct llmt_dataset llmt_dataset;

typedef struct llmt_dataset_info {
    size_t struct_size;
    int32_t shards;
    int32_t vocab_size;     /* largest of the shards' (0: llm.c files only) */
    int64_t tokens;
    int64_t documents;      /* llm.c files count as one document each */
    uint64_t fingerprint;   /* hash of every shard's counts and checksums */
} llmt_dataset_info;

LLMT_API llmt_status llmt_dataset_open(llmt_context *ctx, const char *path,
                                       int32_t verify, llmt_dataset **out);
LLMT_API llmt_status llmt_dataset_get_info(const llmt_dataset *ds,
                                           llmt_dataset_info *info);
/* Shard `index`: *path (owned by the dataset), token and document counts;
 * any output may be NULL. */
LLMT_API llmt_status llmt_dataset_shard(const llmt_dataset *ds, int32_t index,
                                        const char **path, int64_t *tokens,
                                        int64_t *documents);
/* Copy tokens [offset, offset + n) of shard `index` into ids. */
LLMT_API llmt_status llmt_dataset_read(llmt_dataset *ds, int32_t index,
                                       int64_t offset, int32_t *ids, size_t n);
LLMT_API void llmt_dataset_destroy(llmt_dataset *ds);
LLMT_API const char *llmt_dataset_last_error(const llmt_dataset *ds);

/* -- The loader. A sample is a window of seq_len + 1 tokens inside one
 * shard (windows start every seq_len tokens): inputs are its first seq_len
 * tokens, targets its last. The samples of epoch e are ordered by a
 * permutation drawn from (seed, e): shards in a permuted order, the windows
 * of each shard permuted. A global sample cursor g counts samples consumed
 * by all ranks: training step s reads g in [s*G, (s+1)*G) with G =
 * micro_batch * grad_accum * dp_size, dp rank r taking row i of its
 * micro-batch a from g = s*G + r*micro_batch*grad_accum + a*micro_batch + i.
 * So the samples of a step do not depend on how the global batch is split,
 * and a state saved under one dp_size resumes under another with no sample
 * skipped or repeated. The cursor runs on across epochs (epoch = g / samples
 * per epoch). */
typedef struct llmt_loader llmt_loader;

typedef struct llmt_loader_opts {
    size_t struct_size;
    int32_t seq_len;      /* default 1024 */
    int32_t micro_batch;  /* rows per llmt_loader_next; default 4 */
    int32_t grad_accum;   /* micro-batches per rank per step; default 1 */
    int32_t dp_rank;      /* default 0 */
    int32_t dp_size;      /* default 1 */
    int32_t shuffle;      /* default 1; 0: shards and windows in file order */
    int32_t prefetch;     /* micro-batches a thread prepares ahead; default 4;
                             0: read in llmt_loader_next */
    uint64_t seed;        /* default 1337 */
} llmt_loader_opts;

/* What a checkpoint saves: the same on every rank at a step boundary. */
typedef struct llmt_loader_state {
    size_t struct_size;
    uint64_t seed;
    int64_t epoch;
    int64_t cursor;            /* samples of `epoch` consumed by all ranks */
    int64_t samples_per_epoch; /* checked on set: same dataset and seq_len */
    uint64_t fingerprint;      /* the dataset's; checked on set */
    /* Since 2026-11-27 (a caller's struct without them still works,
     * unchecked): the window length and the sample order the cursor counts in. Set
     * checks each when nonzero, so a state recorded without them (0) still
     * loads: a cursor of another order or length names other samples. */
    int32_t seq_len; /* the loader's seq_len */
    int32_t order;   /* 1: file order (shuffle 0), 2: shuffled; 0: not recorded */
} llmt_loader_state;

LLMT_API llmt_status llmt_loader_opts_init(llmt_loader_opts *opts, size_t size);
/* The loader reads `ds`, which must outlive it. Creation errors are
 * recorded on the dataset (llmt_dataset_last_error). */
LLMT_API llmt_status llmt_loader_create(llmt_dataset *ds,
                                        const llmt_loader_opts *opts,
                                        llmt_loader **out);
/* The next micro-batch of this rank: micro_batch * seq_len int32 each into
 * inputs and targets; sample_ids (may be NULL) gets micro_batch ids of the
 * windows read (0.. samples per epoch - 1, in file order). */
LLMT_API llmt_status llmt_loader_next(llmt_loader *l, int32_t *inputs,
                                      int32_t *targets, int64_t *sample_ids);
/* Only at a step boundary (after a multiple of grad_accum next() calls):
 * otherwise LLMT_ERR_STATE. */
LLMT_API llmt_status llmt_loader_get_state(const llmt_loader *l,
                                           llmt_loader_state *state);
/* Continue from a saved state (any dp_size, micro_batch or grad_accum). A
 * state of another dataset or seq_len fails with LLMT_ERR_INVALID_ARGUMENT
 * naming the mismatch; a seed different from the loader's is adopted. */
LLMT_API llmt_status llmt_loader_set_state(llmt_loader *l,
                                           const llmt_loader_state *state);
/* The shards dp rank `dp_rank` reads in `epoch` under this loader's seed and
 * batch layout, ascending (the seeds' assign_shards(rank, dp_rank, epoch,
 * seed): tensor- and pipeline-parallel ranks of one dp rank read the same
 * data). ids may be NULL (size query); *n_out gets the count. */
LLMT_API llmt_status llmt_loader_assign_shards(const llmt_loader *l,
                                               int32_t dp_rank, int64_t epoch,
                                               int32_t *ids, size_t cap,
                                               size_t *n_out);
LLMT_API llmt_status llmt_loader_samples_per_epoch(const llmt_loader *l,
                                                   int64_t *out);
/* The loader's state in a checkpoint: keys "data.seed", "data.epoch",
 * "data.cursor", "data.samples_per_epoch", "data.fingerprint", and since
 * 2026-11-27 "data.seq_len", "data.order" (decimal; read may miss the two:
 * a checkpoint written before them loads without their checks).
 * add: between llmt_ckpt_begin and llmt_ckpt_save, at a step boundary
 * (every rank may add them: the state is the same on all). read: from the
 * checkpoint open on `ck`, with llmt_loader_set_state's checks; a
 * checkpoint without these keys fails with LLMT_ERR_NOT_FOUND naming the
 * key. Errors are recorded on the loader. */
LLMT_API llmt_status llmt_loader_ckpt_add(const llmt_loader *l,
                                          struct llmt_ckpt *ck);
LLMT_API llmt_status llmt_loader_ckpt_read(llmt_loader *l,
                                           struct llmt_ckpt *ck);
LLMT_API void llmt_loader_destroy(llmt_loader *l);
LLMT_API const char *llmt_loader_last_error(const llmt_loader *l);

/* -- The whole pipeline in one call: ingest `inputs`, filter, deduplicate,
 * tokenize with `tok` (an <|endoftext|> before every document, as GPT-2 and
 * llm.c do), and write shards to out_dir: train/shard-NNNNN.tok and
 * val/shard-NNNNN.tok (or .bin in llm.c's format), tokenizer.bin and
 * report.json. Documents go to validation by a hash of their text (stable
 * whatever the input order); when that sends none of two or more kept
 * documents there and val_fraction > 0, the last document bound for train
 * goes to validation instead. */
typedef struct llmt_data_prepare_opts {
    size_t struct_size;
    const llmt_ingest_opts *ingest; /* NULL: defaults */
    const llmt_data_filter_opts *filter; /* NULL: defaults */
    const llmt_dedup_opts *dedup;   /* NULL: defaults */
    int32_t no_filter;              /* 1: keep every document */
    int32_t no_dedup;               /* 1: no deduplication */
    int32_t llmc_format;            /* 1: llm.c token files (vocab <= 65536) */
    int64_t shard_tokens;           /* tokens per shard; default 1 << 26 */
    double val_fraction;            /* default 0.01 */
    uint64_t seed;                  /* validation split; default 1337 */
    /* Called after each document and at the end; may be NULL. */
    void (*progress)(void *user, int64_t bytes_done, int64_t bytes_total,
                     int64_t documents);
    void *progress_user;
} llmt_data_prepare_opts;

typedef struct llmt_data_report {
    size_t struct_size;
    int64_t files;
    int64_t documents;            /* documents read */
    int64_t bytes;                /* input bytes */
    int64_t invalid_utf8;
    int64_t bad_lines;
    int64_t verdicts[LLMT_DATA_VERDICTS]; /* documents per verdict ([0] kept) */
    int64_t train_documents, val_documents;
    int64_t train_tokens, val_tokens;
    int32_t train_shards, val_shards;
    double seconds;
} llmt_data_report;

LLMT_API llmt_status llmt_data_prepare_opts_init(llmt_data_prepare_opts *opts,
                                                 size_t size);
/* Fails (naming what) on missing inputs, an out_dir that holds shards
 * already, or no document left; report (may be NULL) is filled in any case
 * with what was done. */
LLMT_API llmt_status llmt_data_prepare(llmt_context *ctx,
                                       const char *const *inputs, size_t n,
                                       llmt_tokenizer *tok, const char *out_dir,
                                       const llmt_data_prepare_opts *opts,
                                       llmt_data_report *report);

/* -- A synthetic corpus with a known entropy rate: a seeded order-1 Markov
 * source over `alphabet` symbols (2 <= alphabet <= 27): a space and the
 * first alphabet - 1 letters of "etaoinshrdlucmfwypvbgkqjxz". Each symbol
 * is followed by one of `branching` successors (1 <= branching <=
 * alphabet; always including the next symbol in that order, so the chain
 * is irreducible and branching 1 is a cycle) with seeded probabilities.
 * buf is not NUL-terminated (it may be NULL when len is 0). *entropy_rate
 * (nats per character) is the source's exact entropy rate, sum_i pi_i
 * H(P_i) over its stationary distribution: the floor that a model's loss
 * per byte token can approach. Deterministic. */
LLMT_API llmt_status llmt_data_synth_markov(uint64_t seed, int32_t alphabet,
                                            int32_t branching, char *buf,
                                            size_t len, double *entropy_rate);

/* ======================================================================
 * Job: one whole training run from a spec (doc/training.md, "The job")
 * A job is created from a spec and the launcher's environment (world
 * size, rank, local rank) and owns everything the run needs: the plan
 * (the spec placed on the world size), the data-parallel communicator
 * (world > 1), the model and trainer, the data (tokenizer, training and
 * validation tokens, the loader), the checkpointer with every configured
 * tier and its retention, the metrics stream (metrics.jsonl, appended,
 * never rewritten) and the anomaly policy. `llmtrain train` is a thin
 * caller of it, so every host behaves alike. Every key of the spec either
 * takes effect or is refused at creation with LLMT_ERR_UNSUPPORTED and a
 * message naming its JSON path and where its support is planned
 * ("parallelism.tp: 2 is not supported by llmt_job yet (tensor
 * parallelism: issue 16); use 1"); doc/job-spec.md lists them.
 * One thread drives a job. Under a launcher every rank creates its own job
 * and calls step/run/save/resume/evaluate in the same order: with world >
 * 1 those calls are collective. The library prints nothing: what a host
 * shows comes from llmt_job_get_info, llmt_job_get_metrics and the log sink.
 * ====================================================================== */
typedef struct llmt_job llmt_job;

typedef struct llmt_job_opts {
    size_t struct_size;
    /* Run directory (created): prepared data, metrics, plot, and the
     * relative paths of the spec (checkpoint.dir, metrics.*). Rank r > 0
     * keeps its data and metrics in run_dir/rank-r; the checkpoints of all
     * ranks go to rank 0's root (one sharded checkpoint per step).
     * NULL (default): "runs/<spec name>". */
    const char *run_dir;
    int32_t world_size;   /* 0 (default): from the environment
                             (llmt_comm_env_discover) */
    int32_t rank;         /* -1 (default): from the environment */
    int32_t local_rank;   /* -1 (default): from the environment */
    /* 0 (default): a new run; refused when the checkpoint root holds
     * checkpoints or run_dir holds data prepared by an earlier run.
     * 1: continue from the newest usable checkpoint (the newest step every
     * rank can read, from the fastest tier holding it: peer, local,
     * durable); no checkpoint at all starts at step 0; checkpoints that
     * exist but are all unusable are refused, listing each and why,
     * unless `fresh` is set. A step whose data fails its checksums while
     * it is read is moved to ROOT/quarantine (every rank agrees) and the
     * next older one is tried. */
    int32_t resume;
    int32_t fresh;        /* start at step 0 over checkpoints that are all
                             unusable (with or without resume): they are
                             moved to ROOT/quarantine, never deleted; a
                             valid one refuses; default 0. When the
                             unusable steps were found by checksums while
                             being read into the model, the create moves
                             them and fails (LLMT_ERR_CHECKSUM): the same
                             call again starts at step 0 */
    int64_t stop_at;      /* stop after this step (<= train.steps); the LR
                             schedule keeps train.steps; 0 (default):
                             train.steps */
    int32_t threads;      /* CPU threads; 0 (default): train.threads */
    /* The caller's communicator (borrowed; its rank and size win over the
     * fields above), e.g. one in-process rank per thread. NULL (default):
     * world > 1 creates one from the environment (MPI), with the timeout
     * fault_tolerance.collective_timeout_s when the spec sets it. */
    struct llmt_comm *comm;
} llmt_job_opts;

/* What the job resolved: for a host's banner and for tests. Strings are
 * owned by the job and valid until llmt_job_destroy. */
typedef struct llmt_job_info {
    size_t struct_size;
    const char *name;            /* the spec's name */
    const char *run_dir;         /* this rank's run directory */
    const char *ckpt_dir;        /* the local tier (the run's root) */
    const char *durable_dir;     /* "" without a durable tier */
    const char *metrics_path, *plot_path;
    const char *data_desc;       /* the data, one line */
    const char *data_note;       /* what preparing the corpus did, or "" */
    const char *resume_note;     /* where the run resumed from, or "" */
    int32_t world_size, rank, local_rank;
    int32_t dp, zero;
    int32_t arch;                /* llmt_arch */
    int32_t layers, width, heads, vocab; /* vocab: the tokenizer's */
    int64_t params;
    int32_t micro_batch, grad_accum, seq_len;
    int64_t global_batch;        /* sequences per step, all ranks */
    int64_t steps, stop_at;      /* train.steps; where this job stops */
    int64_t start_step;          /* 0, or the step it resumed from */
    int32_t device;              /* llmt_device_type */
    int32_t recompute, threads, deterministic, fp8;
    int64_t train_tokens, val_tokens;
    double unigram_entropy;      /* nats/token of the training tokens */
    int32_t ckpt_async;
    int32_t ckpt_auto;           /* checkpoint.interval "auto" */
    int64_t ckpt_interval;       /* steps; 0 none; -1 auto, not decided yet
                                    (it is after the first step) */
    int32_t keep_last, keep_every, durable_keep_last, durable_keep_every;
    /* auto interval: Young/Daly sqrt(2 C MTBF) and its inputs */
    double auto_stall_s;         /* C: measured on the first save, or
                                    checkpoint.save_stall_s */
    double auto_write_s;         /* persist time (async saves cannot be
                                    closer than this) */
    double auto_mtbf_s;          /* 3600 / (gpu_failures_per_hour x GPUs) */
    double auto_step_s;          /* measured step time */
    double auto_interval_s;      /* max(Young/Daly, write) */
    double gpu_failures_per_hour;
    const char *interval_note;   /* the above in one line, or "" */
    int32_t anomaly_policy;      /* 0 skip, 1 rollback, 2 stop */
    double anomaly_zscore;
    double collective_timeout_s;
    int64_t sample_tokens;       /* train.sample_tokens */
    const char *comm_backend;    /* "mpi", "inproc", "nccl"; "" with one rank */
    /* train.device's engine: "cpu" (fp32), "cuda" (bf16 on the GPU) or
     * "emulated" (the GPU engine's bf16 arithmetic on the CPU; device ==
     * LLMT_DEVICE_CPU). Added after comm_backend (0.1.0): a caller built
     * against an older header passes a struct_size that stops before it. */
    const char *engine;
    /* 1: checkpoint.dir is node-local (some rank cannot see rank 0's root):
     * each part is copied to the durable tier, where the steps commit
     * (doc/checkpointing.md, "Node-local roots"). After engine (0.1.0). */
    int32_t ckpt_node_local;
} llmt_job_info;

/* Bits of llmt_job_metrics.events: what happened in the last call. */
#define LLMT_JOB_EVENT_LOG       0x01u /* train.log_interval: report it */
#define LLMT_JOB_EVENT_VALIDATED 0x02u /* val_loss is this step's */
#define LLMT_JOB_EVENT_SAVED     0x04u /* a checkpoint of saved_step began */
#define LLMT_JOB_EVENT_ANOMALY   0x08u /* non-finite or a loss spike */
#define LLMT_JOB_EVENT_SKIPPED   0x10u /* the batch was dropped, no update */
#define LLMT_JOB_EVENT_ROLLBACK  0x20u /* state restored to an earlier step */
#define LLMT_JOB_EVENT_INTERVAL  0x40u /* the auto interval was decided */
#define LLMT_JOB_EVENT_START_VAL 0x80u /* start_val_loss: the step-0 one */

typedef struct llmt_job_metrics {
    size_t struct_size;
    int64_t step;           /* steps done after the call */
    float loss;             /* the step's (global) training loss */
    float grad_norm, lr;
    int64_t tokens;         /* counted targets of the step, all ranks
                               (the global batch's, summed over the data
                               parallel replicas) */
    double step_s;          /* wall time of the step */
    double tokens_per_s;    /* tokens / step_s: all ranks' */
    double mfu;             /* plan's model FLOPs / step_s / peak of the
                               world (hardware.*) */
    double elapsed_s;       /* since the job's first step */
    float val_loss;         /* NaN unless VALIDATED */
    float start_val_loss;   /* NaN unless START_VAL */
    uint32_t events;        /* LLMT_JOB_EVENT_* */
    int64_t saved_step;     /* -1 unless SAVED */
    int64_t anomalies, skipped, rollbacks; /* totals of this job */
} llmt_job_metrics;

LLMT_API llmt_status llmt_job_opts_init(llmt_job_opts *opts, size_t size);
/* From a parsed spec (copied; the caller may destroy it). opts may be NULL.
 * Creation failures (a refused key, bad data, a checkpoint directory of an
 * earlier run) are on the context: llmt_context_last_error(ctx). With
 * opts.resume the job has resumed when this returns (info.start_step). */
LLMT_API llmt_status llmt_job_create(llmt_context *ctx, const llmt_spec *spec,
                                     const llmt_job_opts *opts,
                                     llmt_job **out);
LLMT_API llmt_status llmt_job_create_from_file(llmt_context *ctx,
                                               const char *spec_path,
                                               const llmt_job_opts *opts,
                                               llmt_job **out);
LLMT_API llmt_status llmt_job_create_from_json(llmt_context *ctx,
                                               const char *json, size_t len,
                                               const llmt_job_opts *opts,
                                               llmt_job **out);
/* Waits for a save in flight, closes the metrics stream, frees. NULL is a
 * no-op. */
LLMT_API void llmt_job_destroy(llmt_job *job);
LLMT_API const char *llmt_job_last_error(const llmt_job *job);
LLMT_API llmt_status llmt_job_get_info(const llmt_job *job,
                                       llmt_job_info *out);
/* The plan the job runs (owned by the job). */
LLMT_API llmt_status llmt_job_get_plan(const llmt_job *job,
                                       const llmt_plan **out);
/* One optimizer step on the next batch, then what the spec asks for after
 * it: validation (train.eval_interval, and at stop_at), a checkpoint
 * (checkpoint.interval; at stop_at a synchronous one), the anomaly policy.
 * A non-finite step is never applied: policy skip drops the batch (the
 * step count does not advance), rollback restores the newest checkpoint
 * and goes on with the batches after the bad one, stop fails with
 * LLMT_ERR_NUMERIC. A loss spike (z-score above anomaly.zscore over the
 * last 32 steps) is counted and logged; rollback undoes it, stop stops.
 * LLMT_ERR_STATE once stop_at is reached. metrics may be NULL. */
LLMT_API llmt_status llmt_job_step(llmt_job *job, llmt_job_metrics *metrics);
/* Steps until `n` more are done or stop_at is reached (n <= 0: until
 * stop_at); then llmt_job_finish. metrics (may be NULL) gets the last. */
LLMT_API llmt_status llmt_job_run(llmt_job *job, int64_t n,
                                  llmt_job_metrics *metrics);
/* Save a checkpoint of the current step now (async 0: returns when it is
 * committed). Every configured tier gets it (the durable copy after the
 * local commit). */
LLMT_API llmt_status llmt_job_save(llmt_job *job, int32_t async);
/* Go back to the newest usable checkpoint (the newest step every rank can
 * read, from the fastest tier holding it: the in-memory snapshot where it
 * survived, the peer copy, the local tier, the durable one) with
 * the data position saved with it; *step (may be NULL) gets its step.
 * LLMT_ERR_NOT_FOUND, listing what is there and why each is unusable,
 * when there is none. A line {"event":"resume",...} goes to the metrics. */
LLMT_API llmt_status llmt_job_resume(llmt_job *job, int64_t *step);
/* The last step's metrics (zeros before the first step). */
LLMT_API llmt_status llmt_job_get_metrics(const llmt_job *job,
                                          llmt_job_metrics *out);
/* Mean validation loss over train.eval_batches micro-batches of the
 * validation split (the same sequences every time). */
LLMT_API llmt_status llmt_job_evaluate(llmt_job *job, float *val_loss);
/* Wait for saves in flight and write the plot (metrics.plot, SVG) from
 * metrics.jsonl, the latest line per step. */
LLMT_API llmt_status llmt_job_finish(llmt_job *job);
/* train.sample_tokens tokens sampled after <|endoftext|> (temperature
 * 0.8, top-k 40, seed train.seed), decoded, NUL-terminated into buf (may
 * be NULL when buflen is 0); *needed (may be NULL) gets the size with the
 * NUL. "" when sample_tokens is 0. LLMT_ERR_BUFFER_TOO_SMALL when short. */
LLMT_API llmt_status llmt_job_sample(llmt_job *job, char *buf, size_t buflen,
                                     size_t *needed);

/* -- Observability (doc/observability.md): where each step's time went,
 * realized MFU, traces and a Prometheus textfile. */
/* Communicator groups of llmt_job_perf.comm_s (slots for the degrees
 * llmt_job does not run yet stay 0). */
#define LLMT_JOB_GROUP_DP 0
#define LLMT_JOB_GROUP_TP 1
#define LLMT_JOB_GROUP_PP 2
#define LLMT_JOB_GROUP_CP 3
#define LLMT_JOB_GROUP_EP 4
#define LLMT_JOB_GROUPS 8 /* room for later groups */

/* The last step on this rank. The parts (compute, optimizer, comm_s,
 * bubble, data, ckpt, other) add up to wall_s but for the host time of
 * the trainer between its ops (unaccounted_s). */
typedef struct llmt_job_perf {
    size_t struct_size;
    int64_t step;
    double wall_s; /* the whole llmt_job_step: data to checkpoint */
    /* Per step, all ranks: the planner's formula (6 N tokens + attention). */
    double model_flops;
    double hw_flops; /* model_flops plus recomputation */
    /* Per device: a GEMM calibrated at the start (CPU) or
     * hardware.peak_tflops (GPU). */
    double peak_flops;
    double mfu, hfu;     /* model (hw) FLOPs / wall_s / (peak x world) */
    double tokens_per_s; /* all ranks: global tokens / wall_s */
    double compute_s;    /* the engine's ops (forward, backward) */
    double optimizer_s;  /* AdamW, gradient norm */
    /* Exposed: waited in this group's collectives (LLMT_JOB_GROUP_*). */
    double comm_s[LLMT_JOB_GROUPS];
    double bubble_s;      /* pipeline idle time (0: no pipeline yet) */
    double data_s;        /* waiting for the loader */
    double ckpt_s;        /* checkpoint stall */
    double other_s;       /* validation, detection checks */
    double unaccounted_s; /* wall_s minus every part above */
    /* Bytes of this rank (trainer memory; device allocator on a GPU). */
    int64_t mem_in_use, mem_peak;
    /* The pipeline's bubble on the stages' compute-time clocks: this
     * stage's share of the step's span it did not compute
     * (llmt_pp_stats.bubble_cpu; what the plan's bubble_fraction
     * predicts; bubble_s is the wall time waited, which on a shared
     * machine also holds the time other ranks' threads took the cores).
     * 0 without a pipeline. */
    double bubble_cpu;
} llmt_job_perf;

/* What a job writes besides metrics.jsonl; set before the first step. */
typedef struct llmt_job_obs_opts {
    size_t struct_size;
    /* Chrome/Perfetto trace-event JSON of steps [trace_first, trace_last]
     * (1-based, inclusive) per rank: trace_dir/trace-rank<R>.json. 0/0
     * (default): no trace. */
    int64_t trace_first, trace_last;
    const char *trace_dir; /* NULL (default): the rank's run directory */
    /* Prometheus text exposition rewritten after each step (for
     * node_exporter's textfile collector): NULL (default) the rank's
     * run_dir/metrics.prom; "" none. */
    const char *prom_path;
    /* Rank 0 gathers every rank's split every this many steps into
     * run.jsonl in the run's root (with the straggler report's
     * all-gather when fault_tolerance.straggler.interval is set, which
     * then decides); 0 (default): 10. */
    int32_t aggregate_interval;
    /* 0 (default): every op of the engine is timed (the compute and
     * optimizer parts of the split); -1: not timed, that time counts as
     * unaccounted_s (what the timing costs: bench/obs/obs_overhead.py). The
     * steps of a trace are timed either way. */
    int32_t op_timing;
} llmt_job_obs_opts;

LLMT_API llmt_status llmt_job_obs_opts_init(llmt_job_obs_opts *opts, size_t size);
/* Before the first step (LLMT_ERR_STATE after). opts NULL: the defaults. */
LLMT_API llmt_status llmt_job_set_obs(llmt_job *job, const llmt_job_obs_opts *opts);
/* The last step's split (zeros before the first step). */
LLMT_API llmt_status llmt_job_get_perf(const llmt_job *job, llmt_job_perf *out);

/* ======================================================================
 * LLMT_EXPERIMENTAL: not frozen; may change in any release.
 * ====================================================================== */

#ifdef __cplusplus
}
#endif
#endif /* LLMTRAIN_H */
