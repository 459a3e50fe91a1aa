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
    }
    return 0;
}
