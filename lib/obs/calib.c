/* The CPU's peak for realized MFU. A GPU's peak is its data sheet's (the
 * hardware table); a CPU has no such number that means anything for this
 * engine (it depends on the BLAS, the vector units, the thread count), so
 * the job measures the one it will use: the CPU backend's fp32 GEMM on
 * square matrices large enough to run near its best, best of a few. */
#include <stdlib.h>
#include <string.h>

#include "obs/obs.h"
#include "exec/dev.h"

double llmt__obs_calibrate_cpu(int n, double *seconds)
{
    double t_begin = llmt__obs_unix_s(), best = 0;
    const llmt__dev_ops *ops = llmt__dev_cpu();
    llmt__dev_opts d = {0, 0};
    llmt__dev *dev = NULL;
    char err[256];
    float *a = NULL, *b = NULL, *c = NULL;
    if (n < 16)
        n = 16;
    size_t bytes = (size_t)n * (size_t)n * sizeof(float);
    if (ops->create(&d, &dev, err, sizeof err) != LLMT_OK)
        goto out;
    a = malloc(bytes);
    b = malloc(bytes);
    c = malloc(bytes);
    if (!a || !b || !c)
        goto out;
    for (size_t i = 0; i < (size_t)n * (size_t)n; i++) {
        a[i] = (float)((i * 7 % 13) - 6) * 0.01f;
        b[i] = (float)((i * 5 % 11) - 5) * 0.01f;
    }
    llmt__gemm_args g;
    memset(&g, 0, sizeof g);
    g.trans_b = 1; /* the Linear forward's shape: x @ W^T */
    g.M = g.N = g.K = n;
    g.A = a;
    g.B = b;
    g.C = c;
    g.ab_type = g.c_type = LLMT_GEMM_F32;
    g.alpha = 1.0f;
    double flops = 2.0 * n * (double)n * n;
    for (int rep = 0; rep < 6; rep++) { /* the first warms up */
        double t0 = llmt__obs_unix_s();
        if (ops->gemm(dev, &g) != LLMT_OK)
            break;
        double dt = llmt__obs_unix_s() - t0;
        if (rep > 0 && dt > 0 && flops / dt > best)
            best = flops / dt;
    }
out:
    free(a);
    free(b);
    free(c);
    if (dev)
        ops->destroy(dev);
    if (seconds)
        *seconds = llmt__obs_unix_s() - t_begin;
    return best;
}
