/* Core ABI call costs: what a host language pays per call through FFI for
 * the cheapest calls (tensor view setup and queries). */
#include <stdint.h>

#include "harness.h"
#include "llmtrain.h"

#define CALLS 100000

static void tensor_init_calls(void *arg)
{
    static float buf[64];
    int64_t shape[4] = {2, 4, 2, 4};
    volatile int64_t sink = 0;
    (void)arg;
    for (int i = 0; i < CALLS; i++) {
        llmt_tensor t;
        llmt_tensor_init(&t, sizeof t, LLMT_DTYPE_FP32, 4, shape, buf,
                         LLMT_DEVICE_CPU, 0);
        int64_t n;
        llmt_tensor_numel(&t, &n);
        sink += n;
    }
}

static void status_string_calls(void *arg)
{
    volatile const char *sink;
    (void)arg;
    for (int i = 0; i < CALLS; i++)
        sink = llmt_status_string((llmt_status)(i % 23));
    (void)sink;
}

int main(int argc, char **argv)
{
    bench_ctx b;
    if (bench_init(&b, "core", argc, argv))
        return 2;
    bench_run(&b, "tensor_init+numel x100k", tensor_init_calls, NULL, CALLS, "calls");
    bench_run(&b, "status_string x100k", status_string_calls, NULL, CALLS, "calls");
    return bench_finish(&b);
}
