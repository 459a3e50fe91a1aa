/* dtypes and non-owning tensor views. */
#include <string.h>
#include <strings.h>

#include "internal.h"

LLMT_API size_t llmt_dtype_size(llmt_dtype dtype)
{
    switch (dtype) {
    case LLMT_DTYPE_FP32: return 4;
    case LLMT_DTYPE_BF16: return 2;
    case LLMT_DTYPE_FP16: return 2;
    case LLMT_DTYPE_FP8_E4M3: return 1;
    case LLMT_DTYPE_FP8_E5M2: return 1;
    case LLMT_DTYPE_INT32: return 4;
    case LLMT_DTYPE_INT64: return 8;
    case LLMT_DTYPE_UINT16: return 2;
    case LLMT_DTYPE_UINT8: return 1;
    case LLMT_DTYPE_INVALID: break;
    }
    return 0;
}

static const struct {
    llmt_dtype dtype;
    const char *name;
    const char *alias;
} dtype_names[] = {
    {LLMT_DTYPE_FP32, "fp32", "float32"},
    {LLMT_DTYPE_BF16, "bf16", "bfloat16"},
    {LLMT_DTYPE_FP16, "fp16", "float16"},
    {LLMT_DTYPE_FP8_E4M3, "fp8e4m3", "e4m3"},
    {LLMT_DTYPE_FP8_E5M2, "fp8e5m2", "e5m2"},
    {LLMT_DTYPE_INT32, "int32", "i32"},
    {LLMT_DTYPE_INT64, "int64", "i64"},
    {LLMT_DTYPE_UINT16, "uint16", "u16"},
    {LLMT_DTYPE_UINT8, "uint8", "u8"},
};

LLMT_API const char *llmt_dtype_name(llmt_dtype dtype)
{
    for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++)
        if (dtype_names[i].dtype == dtype)
            return dtype_names[i].name;
    return "invalid";
}

LLMT_API llmt_status llmt_dtype_from_name(const char *name, llmt_dtype *out)
{
    if (!name || !out)
        return LLMT_ERR_NULL_POINTER;
    *out = LLMT_DTYPE_INVALID;
    for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++)
        if (!strcasecmp(name, dtype_names[i].name) ||
            !strcasecmp(name, dtype_names[i].alias)) {
            *out = dtype_names[i].dtype;
            return LLMT_OK;
        }
    return LLMT_ERR_INVALID_ARGUMENT;
}

/* Multiply with an overflow check against INT64_MAX. */
static int mul_ok(int64_t a, int64_t b, int64_t *out)
{
    if (a && b > INT64_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

static llmt_status check_header(const llmt_tensor *t)
{
    if (!t)
        return LLMT_ERR_NULL_POINTER;
    if (t->struct_size < sizeof(llmt_tensor))
        return LLMT_ERR_STRUCT_SIZE;
    /* a newer caller's fields past ours (doc/abi-conventions.md): taken
     * only when zero, never silently ignored */
    const unsigned char *tail = (const unsigned char *)t + sizeof(llmt_tensor);
    for (size_t i = 0; i < t->struct_size - sizeof(llmt_tensor); i++)
        if (tail[i])
            return LLMT_ERR_STRUCT_SIZE;
    if (llmt_dtype_size(t->dtype) == 0)
        return LLMT_ERR_INVALID_ARGUMENT;
    if (t->ndim < 0 || t->ndim > LLMT_MAX_DIMS)
        return LLMT_ERR_INVALID_ARGUMENT;
    if (t->device != LLMT_DEVICE_CPU && t->device != LLMT_DEVICE_CUDA &&
        t->device != LLMT_DEVICE_CUDA_HOST)
        return LLMT_ERR_INVALID_ARGUMENT;
    if (t->device_index < 0)
        return LLMT_ERR_INVALID_ARGUMENT;
    return LLMT_OK;
}

/* numel and byte size with overflow checks; shape must be non-negative. */
static llmt_status sizes(const llmt_tensor *t, int64_t *numel, int64_t *nbytes)
{
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return LLMT_ERR_INVALID_ARGUMENT;
        if (!mul_ok(n, t->shape[i], &n))
            return LLMT_ERR_INVALID_ARGUMENT;
    }
    int64_t b;
    if (!mul_ok(n, (int64_t)llmt_dtype_size(t->dtype), &b))
        return LLMT_ERR_INVALID_ARGUMENT;
    if (numel)
        *numel = n;
    if (nbytes)
        *nbytes = b;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_tensor_init(llmt_tensor *t, size_t struct_size,
                                      llmt_dtype dtype, int32_t ndim,
                                      const int64_t *shape, void *data,
                                      llmt_device_type device,
                                      int32_t device_index)
{
    if (!t)
        return LLMT_ERR_NULL_POINTER;
    if (struct_size < sizeof(llmt_tensor))
        return LLMT_ERR_STRUCT_SIZE;
    if (ndim < 0 || ndim > LLMT_MAX_DIMS)
        return LLMT_ERR_INVALID_ARGUMENT;
    if (ndim > 0 && !shape)
        return LLMT_ERR_NULL_POINTER;
    llmt_tensor v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.dtype = dtype;
    v.device = device;
    v.device_index = device_index;
    v.ndim = ndim;
    for (int32_t i = 0; i < ndim; i++)
        v.shape[i] = shape[i];
    llmt_status s = check_header(&v);
    if (s != LLMT_OK)
        return s;
    int64_t numel;
    if ((s = sizes(&v, &numel, NULL)) != LLMT_OK)
        return s;
    if (!data && numel > 0)
        return LLMT_ERR_NULL_POINTER;
    int64_t stride = 1;
    for (int32_t i = ndim - 1; i >= 0; i--) {
        v.strides[i] = stride;
        stride *= v.shape[i] ? v.shape[i] : 1;
    }
    v.data = data;
    memset(t, 0, sizeof *t);
    *t = v;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_tensor_validate(const llmt_tensor *t)
{
    llmt_status s = check_header(t);
    if (s != LLMT_OK)
        return s;
    int64_t numel;
    if ((s = sizes(t, &numel, NULL)) != LLMT_OK)
        return s;
    for (int32_t i = 0; i < t->ndim; i++)
        if (t->strides[i] < 0)
            return LLMT_ERR_INVALID_ARGUMENT;
    if (!t->data && numel > 0)
        return LLMT_ERR_NULL_POINTER;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_tensor_numel(const llmt_tensor *t, int64_t *out)
{
    if (!out)
        return LLMT_ERR_NULL_POINTER;
    llmt_status s = check_header(t);
    return s != LLMT_OK ? s : sizes(t, out, NULL);
}

LLMT_API llmt_status llmt_tensor_nbytes(const llmt_tensor *t, int64_t *out)
{
    if (!out)
        return LLMT_ERR_NULL_POINTER;
    llmt_status s = check_header(t);
    return s != LLMT_OK ? s : sizes(t, NULL, out);
}

LLMT_API llmt_status llmt_tensor_is_contiguous(const llmt_tensor *t, int *out)
{
    if (!out)
        return LLMT_ERR_NULL_POINTER;
    llmt_status s = llmt_tensor_validate(t);
    if (s != LLMT_OK)
        return s;
    int64_t expect = 1;
    *out = 1;
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
        /* A dimension of size 1 (or an empty tensor) may have any stride. */
        if (t->shape[i] != 1 && t->strides[i] != expect && t->shape[i] != 0) {
            *out = 0;
            return LLMT_OK;
        }
        expect *= t->shape[i] ? t->shape[i] : 1;
    }
    return LLMT_OK;
}
