/* What this build has (compile-time bitmask) and struct sizes for bindings. */
#include "internal.h"

LLMT_API uint64_t llmt_build_features(void)
{
    uint64_t f = 0;
#ifdef LLMT_HAVE_CUDA
    f |= LLMT_FEATURE_CUDA;
#endif
#ifdef LLMT_HAVE_NCCL
    f |= LLMT_FEATURE_NCCL;
#endif
#ifdef LLMT_HAVE_MPI
    f |= LLMT_FEATURE_MPI;
#endif
#ifdef LLMT_HAVE_AIO
    f |= LLMT_FEATURE_AIO;
#endif
#ifdef LLMT_HAVE_OPENBLAS
    f |= LLMT_FEATURE_OPENBLAS;
#endif
#ifdef _OPENMP
    f |= LLMT_FEATURE_OPENMP;
#endif
#ifdef LLMT_HAVE_GLOO
    f |= LLMT_FEATURE_GLOO;
#endif
    return f;
}

LLMT_API const char *llmt_feature_name(uint64_t feature_bit)
{
    if (feature_bit == LLMT_FEATURE_CUDA) return "cuda";
    if (feature_bit == LLMT_FEATURE_NCCL) return "nccl";
    if (feature_bit == LLMT_FEATURE_MPI) return "mpi";
    if (feature_bit == LLMT_FEATURE_AIO) return "aio";
    if (feature_bit == LLMT_FEATURE_OPENBLAS) return "openblas";
    if (feature_bit == LLMT_FEATURE_OPENMP) return "openmp";
    if (feature_bit == LLMT_FEATURE_GLOO)
        return "gloo";
    return NULL;
}

LLMT_API llmt_status llmt_cuda_device_count(int32_t *out)
{
    if (!out)
        return LLMT_ERR_NULL_POINTER;
    *out = 0;
#ifdef LLMT_HAVE_CUDA
    char err[256];
    return llmt__cuda_device_count(out, err, sizeof err);
#else
    return LLMT_ERR_UNSUPPORTED;
#endif
}

LLMT_API size_t llmt_sizeof(llmt_type_id type)
{
    switch (type) {
    case LLMT_TYPE_TENSOR: return sizeof(llmt_tensor);
    case LLMT_TYPE_CONTEXT_OPTS: return sizeof(llmt_context_opts);
    case LLMT_TYPE_ALLOCATOR: return sizeof(llmt_allocator);
    case LLMT_TYPE_PLAN_ESTIMATE: return sizeof(llmt_plan_estimate);
    case LLMT_TYPE_PLAN_AUTO_OPTS: return sizeof(llmt_plan_auto_opts);
    case LLMT_TYPE_GOODPUT_OPTS: return sizeof(llmt_goodput_opts);
    case LLMT_TYPE_GOODPUT_RESULT: return sizeof(llmt_goodput_result);
    case LLMT_TYPE_MODEL_CONFIG: return sizeof(llmt_model_config);
    case LLMT_TYPE_TRAINER_OPTS: return sizeof(llmt_trainer_opts);
    case LLMT_TYPE_BATCH: return sizeof(llmt_batch);
    case LLMT_TYPE_STEP_METRICS: return sizeof(llmt_step_metrics);
    case LLMT_TYPE_CKPT_OPTS: return sizeof(llmt_ckpt_opts);
    case LLMT_TYPE_CKPT_LLMC_OPTS: return sizeof(llmt_ckpt_llmc_opts);
    case LLMT_TYPE_COMM_OPTS: return sizeof(llmt_comm_opts);
    case LLMT_TYPE_COMM_ENV: return sizeof(llmt_comm_env);
    case LLMT_TYPE_DP_OPTS: return sizeof(llmt_dp_opts);
    case LLMT_TYPE_TRAINER_MEMORY: return sizeof(llmt_trainer_memory);
    case LLMT_TYPE_INGEST_OPTS: return sizeof(llmt_ingest_opts);
    case LLMT_TYPE_INGEST_STATS: return sizeof(llmt_ingest_stats);
    case LLMT_TYPE_DATA_FILTER_OPTS: return sizeof(llmt_data_filter_opts);
    case LLMT_TYPE_DEDUP_OPTS: return sizeof(llmt_dedup_opts);
    case LLMT_TYPE_DATASET_INFO: return sizeof(llmt_dataset_info);
    case LLMT_TYPE_LOADER_OPTS: return sizeof(llmt_loader_opts);
    case LLMT_TYPE_LOADER_STATE: return sizeof(llmt_loader_state);
    case LLMT_TYPE_DATA_PREPARE_OPTS: return sizeof(llmt_data_prepare_opts);
    case LLMT_TYPE_DATA_REPORT: return sizeof(llmt_data_report);
    case LLMT_TYPE_JOB_OPTS: return sizeof(llmt_job_opts);
    case LLMT_TYPE_JOB_INFO: return sizeof(llmt_job_info);
    case LLMT_TYPE_JOB_METRICS: return sizeof(llmt_job_metrics);
    case LLMT_TYPE_COMM_STATS: return sizeof(llmt_comm_stats);
    case LLMT_TYPE_JOB_PERF: return sizeof(llmt_job_perf);
    case LLMT_TYPE_JOB_OBS_OPTS: return sizeof(llmt_job_obs_opts);
    case LLMT_TYPE_PP_OPTS: return sizeof(llmt_pp_opts);
    case LLMT_TYPE_PP_STATS: return sizeof(llmt_pp_stats);
    case LLMT_TYPE_CP_OPTS: return sizeof(llmt_cp_opts);
    case LLMT_TYPE_CP_STATS: return sizeof(llmt_cp_stats);
    }
    return 0;
}
