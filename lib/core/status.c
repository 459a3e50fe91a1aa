/* Static strings for status codes. Add new codes at the end; never reuse. */
#include "internal.h"

LLMT_API const char *llmt_status_string(llmt_status status)
{
    switch (status) {
    case LLMT_OK: return "ok";
    case LLMT_ERR_INVALID_ARGUMENT: return "invalid argument";
    case LLMT_ERR_NULL_POINTER: return "null pointer";
    case LLMT_ERR_STRUCT_SIZE: return "bad struct_size";
    case LLMT_ERR_OUT_OF_MEMORY: return "out of memory";
    case LLMT_ERR_UNSUPPORTED: return "unsupported in this build or device";
    case LLMT_ERR_IO: return "i/o error";
    case LLMT_ERR_FORMAT: return "corrupt or unrecognised file format";
    case LLMT_ERR_CHECKSUM: return "checksum mismatch";
    case LLMT_ERR_VERSION: return "unsupported version";
    case LLMT_ERR_SPEC: return "invalid job spec";
    case LLMT_ERR_NOT_FOUND: return "not found";
    case LLMT_ERR_STATE: return "invalid state for this call";
    case LLMT_ERR_TIMEOUT: return "timed out";
    case LLMT_ERR_ABORTED: return "aborted";
    case LLMT_ERR_COMM: return "communication error";
    case LLMT_ERR_CUDA: return "CUDA error";
    case LLMT_ERR_NCCL: return "NCCL error";
    case LLMT_ERR_MPI: return "MPI error";
    case LLMT_ERR_NUMERIC: return "numerical anomaly (NaN/Inf or spike)";
    case LLMT_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case LLMT_ERR_IN_PROGRESS: return "operation in progress";
    case LLMT_ERR_INTERNAL: return "internal error (a bug in llmtrain)";
    }
    return "unknown status";
}
