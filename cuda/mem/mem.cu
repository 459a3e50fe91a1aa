// The CUDA context: device, compute + communication streams with the events
// that hand work between them, the cuBLASLt handle and workspace, and a
// caching device allocator (cudaMalloc is slow and synchronising; training
// reallocates the same sizes every step).
#include <stdlib.h>
#include <string.h>

#include "../common.cuh"

extern "C" {

llmt_status llmt__cuda_ctx_create(const llmt__cuda_ctx_opts *opts,
                                  llmt__cuda_ctx **out)
{
    if (!out) return LLMT_ERR_NULL_POINTER;
    *out = NULL;
    llmt__cuda_ctx *c = (llmt__cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return LLMT_ERR_OUT_OF_MEMORY;
    c->device = opts ? opts->device : 0;
    c->deterministic = opts ? opts->deterministic : 0;
    c->attn_scalar = opts ? opts->attn_scalar : 0;
    c->workspace_size = (opts && opts->workspace) ? opts->workspace : ((size_t)32 << 20);
    llmt_status st = LLMT_OK;
    cudaDeviceProp prop;
    cublasStatus_t bs;
    if (c->attn_scalar < 0 || c->attn_scalar > 5) {
        st = llmt__err_set(&c->err, LLMT_ERR_INVALID_ARGUMENT,
                           "cuda: attn_scalar=%d (0 best, 1 CUDA cores, 2 wmma through shared "
                           "memory, 3 mma.sync, 4 wmma in registers, 5 mma.sync with dQ "
                           "atomics)", c->attn_scalar);
        goto fail;
    }
#define FAIL(call)                                                           \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess) {                                             \
            st = llmt__err_set(&c->err, LLMT_ERR_CUDA, "cuda: %s: %s", #call, \
                               cudaGetErrorString(e_));                      \
            goto fail;                                                       \
        }                                                                    \
    } while (0)
    FAIL(cudaSetDevice(c->device));
    FAIL(cudaGetDeviceProperties(&prop, c->device));
    c->sm = prop.major * 10 + prop.minor;
    c->num_sms = prop.multiProcessorCount;
    FAIL(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
    FAIL(cudaStreamCreateWithFlags(&c->comm, cudaStreamNonBlocking));
    FAIL(cudaEventCreateWithFlags(&c->ev_compute, cudaEventDisableTiming));
    FAIL(cudaEventCreateWithFlags(&c->ev_comm, cudaEventDisableTiming));
    {
        size_t ws = (c->workspace_size + 255) / 256 * 256; /* keeps the slots aligned */
        FAIL(cudaMalloc(&c->workspace, ws + 256));
        c->scale_slots = (float *)((char *)c->workspace + ws);
    }
    bs = cublasLtCreate(&c->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        st = llmt__err_set(&c->err, LLMT_ERR_CUDA, "cublasLt: create: %d", (int)bs);
        goto fail;
    }
    c->gemm_cache = (llmt__gemm_cache_entry *)calloc(LLMT_GEMM_CACHE_SLOTS,
                                                    sizeof *c->gemm_cache);
    if (!c->gemm_cache) { st = LLMT_ERR_OUT_OF_MEMORY; goto fail; }
#undef FAIL
    *out = c;
    return LLMT_OK;
fail:
    if (opts && opts->err && opts->err_len) {
        strncpy(opts->err, c->err.msg[0] ? c->err.msg : "cuda: out of host memory",
                opts->err_len - 1);
        opts->err[opts->err_len - 1] = '\0';
    }
    llmt__cuda_ctx_destroy(c);
    return st;
}

void llmt__cuda_ctx_destroy(llmt__cuda_ctx *c)
{
    if (!c) return;
    if (c->compute) cudaStreamSynchronize(c->compute);
    if (c->comm) cudaStreamSynchronize(c->comm);
    for (int i = 0; i < c->nblocks; i++) cudaFree(c->blocks[i].ptr);
    free(c->blocks);
    if (c->gemm_cache) llmt__cuda_gemm_cache_clear(c);
    free(c->gemm_cache);
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->workspace) cudaFree(c->workspace);
    if (c->ev_compute) cudaEventDestroy(c->ev_compute);
    if (c->ev_comm) cudaEventDestroy(c->ev_comm);
    if (c->compute) cudaStreamDestroy(c->compute);
    if (c->comm) cudaStreamDestroy(c->comm);
    free(c);
}

const char *llmt__cuda_ctx_last_error(const llmt__cuda_ctx *c)
{
    return c ? c->err.msg : "cuda: no context";
}
void *llmt__cuda_ctx_compute_stream(llmt__cuda_ctx *c) { return c->compute; }
void *llmt__cuda_ctx_comm_stream(llmt__cuda_ctx *c) { return c->comm; }
int llmt__cuda_ctx_sm(const llmt__cuda_ctx *c) { return c->sm; }

llmt_status llmt__cuda_comm_wait_compute(llmt__cuda_ctx *c)
{
    LLMT_CU(c, cudaEventRecord(c->ev_compute, c->compute));
    LLMT_CU(c, cudaStreamWaitEvent(c->comm, c->ev_compute, 0));
    return LLMT_OK;
}
llmt_status llmt__cuda_compute_wait_comm(llmt__cuda_ctx *c)
{
    LLMT_CU(c, cudaEventRecord(c->ev_comm, c->comm));
    LLMT_CU(c, cudaStreamWaitEvent(c->compute, c->ev_comm, 0));
    return LLMT_OK;
}
llmt_status llmt__cuda_sync(llmt__cuda_ctx *c)
{
    LLMT_CU(c, cudaStreamSynchronize(c->compute));
    LLMT_CU(c, cudaStreamSynchronize(c->comm));
    return LLMT_OK;
}
llmt_status llmt__cuda_check(llmt__cuda_ctx *c, const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return llmt__err_set(&c->err, LLMT_ERR_CUDA, "cuda: %s: %s", what,
                             cudaGetErrorString(e));
    return LLMT_OK;
}

/* ---- caching allocator ---------------------------------------------------- */

static size_t round_size(size_t n)
{
    if (n == 0) n = 1;
    if (n < ((size_t)1 << 20)) return (n + 511) & ~(size_t)511;
    return (n + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
}

llmt_status llmt__cuda_alloc(llmt__cuda_ctx *c, void **p, size_t bytes)
{
    if (!c || !p) return LLMT_ERR_NULL_POINTER;
    size_t sz = round_size(bytes);
    /* Best fit among cached blocks, but never hand out more than twice the
     * request (a huge block serving a tiny one would strand memory). */
    int best = -1;
    for (int i = 0; i < c->nblocks; i++) {
        llmt__cuda_block *b = &c->blocks[i];
        if (!b->in_use && b->size >= sz && b->size <= 2 * sz &&
            (best < 0 || b->size < c->blocks[best].size))
            best = i;
    }
    if (best >= 0) {
        c->blocks[best].in_use = 1;
        c->cached -= c->blocks[best].size;
        c->in_use += c->blocks[best].size;
        if (c->in_use > c->peak) c->peak = c->in_use;
        c->hits++;
        *p = c->blocks[best].ptr;
        return LLMT_OK;
    }
    if (c->nblocks == c->cap_blocks) {
        int nc = c->cap_blocks ? 2 * c->cap_blocks : 64;
        llmt__cuda_block *nb = (llmt__cuda_block *)realloc(c->blocks, nc * sizeof *nb);
        if (!nb) return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY, "cuda: allocator table");
        c->blocks = nb;
        c->cap_blocks = nc;
    }
    void *ptr = NULL;
    cudaError_t e = cudaMalloc(&ptr, sz);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        llmt__cuda_cache_release(c);
        e = cudaMalloc(&ptr, sz);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return llmt__err_set(&c->err, LLMT_ERR_OUT_OF_MEMORY,
                             "cuda: cudaMalloc(%zu): %s", sz, cudaGetErrorString(e));
    }
    c->blocks[c->nblocks++] = (llmt__cuda_block){ptr, sz, 1};
    c->mallocs++;
    c->device_bytes += sz;
    c->in_use += sz;
    if (c->in_use > c->peak) c->peak = c->in_use;
    *p = ptr;
    return LLMT_OK;
}

void llmt__cuda_free(llmt__cuda_ctx *c, void *p)
{
    if (!c || !p) return;
    for (int i = 0; i < c->nblocks; i++) {
        if (c->blocks[i].ptr == p && c->blocks[i].in_use) {
            c->blocks[i].in_use = 0;
            c->in_use -= c->blocks[i].size;
            c->cached += c->blocks[i].size;
            return;
        }
    }
    llmt__log(NULL, LLMT_LOG_WARN, "cuda", "free of a pointer the allocator does not own");
}

void llmt__cuda_cache_release(llmt__cuda_ctx *c)
{
    cudaStreamSynchronize(c->compute);
    int j = 0;
    for (int i = 0; i < c->nblocks; i++) {
        if (c->blocks[i].in_use) {
            c->blocks[j++] = c->blocks[i];
        } else {
            cudaFree(c->blocks[i].ptr);
            c->device_bytes -= c->blocks[i].size;
            c->cached -= c->blocks[i].size;
        }
    }
    c->nblocks = j;
}

void llmt__cuda_mem_stats_get(const llmt__cuda_ctx *c, llmt__cuda_mem_stats *o)
{
    o->in_use = c->in_use;
    o->cached = c->cached;
    o->peak_in_use = c->peak;
    o->device_bytes = c->device_bytes;
    o->mallocs = c->mallocs;
    o->hits = c->hits;
}

llmt_status llmt__cuda_host_alloc(llmt__cuda_ctx *c, void **p, size_t bytes)
{
    LLMT_CU(c, cudaMallocHost(p, bytes));
    return LLMT_OK;
}
void llmt__cuda_host_free(void *p) { if (p) cudaFreeHost(p); }

llmt_status llmt__cuda_h2d(llmt__cuda_ctx *c, void *dst, const void *src, size_t n)
{
    LLMT_CU(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->compute));
    LLMT_CU(c, cudaStreamSynchronize(c->compute));
    return LLMT_OK;
}
llmt_status llmt__cuda_d2h(llmt__cuda_ctx *c, void *dst, const void *src, size_t n)
{
    LLMT_CU(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->compute));
    LLMT_CU(c, cudaStreamSynchronize(c->compute));
    return LLMT_OK;
}
llmt_status llmt__cuda_d2d(llmt__cuda_ctx *c, void *dst, const void *src, size_t n)
{
    LLMT_CU(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->compute));
    return LLMT_OK;
}
llmt_status llmt__cuda_memset0(llmt__cuda_ctx *c, void *dst, size_t n)
{
    LLMT_CU(c, cudaMemsetAsync(dst, 0, n, c->compute));
    return LLMT_OK;
}
llmt_status llmt__cuda_fill_nan(llmt__cuda_ctx *c, void *dst, size_t n)
{
    LLMT_CU(c, cudaMemsetAsync(dst, 0xff, n, c->compute));
    return LLMT_OK;
}

llmt_status llmt__cuda_time(llmt__cuda_ctx *c, void (*fn)(void *), void *arg,
                            int warmup, int iters, float *ms)
{
    cudaEvent_t a, b;
    LLMT_CU(c, cudaEventCreate(&a));
    LLMT_CU(c, cudaEventCreate(&b));
    for (int i = 0; i < warmup; i++) fn(arg);
    for (int i = 0; i < iters; i++) {
        cudaEventRecord(a, c->compute);
        fn(arg);
        cudaEventRecord(b, c->compute);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms[i], a, b);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return llmt__cuda_check(c, "timed region");
}

} // extern "C"
