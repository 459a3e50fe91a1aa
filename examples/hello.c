/* The smallest host program: load the library, check the ABI, describe a
 * buffer as a tensor view, and report errors the way every call does. */
#include <stdio.h>

#include "llmtrain.h"

int main(void)
{
    if ((llmt_abi_version() >> 16) != LLMT_ABI_VERSION_MAJOR) {
        fprintf(stderr, "libllmtrain ABI mismatch\n");
        return 1;
    }
    printf("llmtrain %s\n", llmt_version());

    llmt_context *ctx;
    llmt_status s = llmt_context_create(NULL, &ctx);
    if (s != LLMT_OK) {
        fprintf(stderr, "context: %s\n", llmt_status_string(s));
        return 1;
    }

    float weights[3][4] = {{0}};
    int64_t shape[2] = {3, 4};
    llmt_tensor t;
    s = llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_FP32, 2, shape, weights,
                         LLMT_DEVICE_CPU, 0);
    int64_t bytes = 0;
    if (s == LLMT_OK)
        s = llmt_tensor_nbytes(&t, &bytes);
    printf("a %s tensor of %lld bytes: %s\n", llmt_dtype_name(t.dtype),
           (long long)bytes, llmt_status_string(s));

    /* A bad call returns a status; it never crashes or exits. */
    s = llmt_tensor_init(&t, sizeof t, (llmt_dtype)42, 2, shape, weights,
                         LLMT_DEVICE_CPU, 0);
    printf("bad dtype -> %s\n", llmt_status_string(s));

    llmt_context_destroy(ctx);
    return 0;
}
