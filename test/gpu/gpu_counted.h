/* Op tables with their copies counted, as the tests of the host staging
 * of device buffers use them (test_gpu_tp.c, test_gpu_cp.c, test_gpu_pp.c,
 * test_gpu_moe.c): a staged run must have moved more bytes through d2h
 * than the unstaged one. Header only. */
#ifndef LLMT_TEST_GPU_COUNTED_H
#define LLMT_TEST_GPU_COUNTED_H

#include <stdatomic.h>
#include <stddef.h>

#include "exec/dev.h"

/* static llmt_status FN(d, dst, src, n): adds n to COUNTER (an
 * atomic_size_t), then INNER->COPY(d, dst, src, n); INNER is an
 * expression giving the table copied from (read at each call). */
#define GPU_COUNTED_COPY(fn, copy, counter, inner)                            \
    static llmt_status fn(llmt__dev *d, void *dst, const void *src, size_t n) \
    {                                                                         \
        atomic_fetch_add(&(counter), n);                                      \
        return (inner)->copy(d, dst, src, n);                                 \
    }

#endif
