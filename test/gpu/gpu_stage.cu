// Host staging for the GPU tests that run several ranks on one GPU with an
// in-process communicator (test_gpu_tp.c): NCCL cannot put two ranks on one
// device, and the in-process communicator reads and writes host memory, so
// a test's hook copies a device buffer to the host around each collective.
// Test code only: the library never stages through these.
#include <cuda_runtime.h>
#include <stddef.h>

extern "C" {

/* 1 when p is device (or managed) memory, 0 for host memory */
int gpu_stage_is_device(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* an unknown host pointer on old drivers */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* Device to host after everything queued on the device (every stream of
 * every rank: the engines' streams do not synchronise with the legacy
 * one); 0 on success. */
int gpu_stage_d2h(void *h, const void *d, size_t n)
{
    if (cudaDeviceSynchronize() != cudaSuccess) return 1;
    return cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) != cudaSuccess;
}

/* Host to device, complete before any later launch on any stream. */
int gpu_stage_h2d(void *d, const void *h, size_t n)
{
    if (cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess) return 1;
    return cudaDeviceSynchronize() != cudaSuccess;
}

const char *gpu_stage_error(void) { return cudaGetErrorString(cudaGetLastError()); }

} // extern "C"
