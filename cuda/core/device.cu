// CUDA device discovery: the one piece of the CUDA backend the core needs.
// A machine with the toolkit but no GPU (or no driver) reports 0 devices.
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "../../lib/core/internal.h"

llmt_status llmt__cuda_device_count(int32_t *out, char *err, size_t errlen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    *out = 0;
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        cudaGetLastError(); /* not sticky; clear it for later calls */
        snprintf(err, errlen, "%s", cudaGetErrorString(e));
        return LLMT_OK;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, errlen, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return LLMT_ERR_CUDA;
    }
    *out = n;
    return LLMT_OK;
}
}
