/* The CPU backend's GEMM path (OpenBLAS pieces split over the OpenMP team)
 * against the plain-loop reference, for odd and large shapes, forward and
 * backward (accumulating), with 1 and 2 threads; and bitwise repeatability
 * of the threaded path. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/exec.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

static double maxrel(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
        if (d > m) m = d;
    }
    return m;
}

static void one(int N, int C, int OC)
{
    const llmt__exec_ops *f = llmt__exec_cpu(), *r = llmt__exec_cpu_ref();
    size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    float *inp = malloc(nin * 4), *w = malloc(nw * 4), *bias = malloc(OC * 4);
    float *o1 = malloc(nout * 4), *o2 = malloc(nout * 4), *dout = malloc(nout * 4);
    float *di1 = malloc(nin * 4), *di2 = malloc(nin * 4);
    float *dw1 = malloc(nw * 4), *dw2 = malloc(nw * 4);
    float *db1 = malloc(OC * 4), *db2 = malloc(OC * 4);
    fill(inp, nin, 1);
    fill(w, nw, 2);
    fill(bias, OC, 3);
    fill(dout, nout, 4);
    f->matmul_fwd(o1, inp, w, bias, N, C, OC);
    r->matmul_fwd(o2, inp, w, bias, N, C, OC);
    /* fp32 sums of K terms in different orders: the bound grows with K */
#define TOL(K) (1e-6 + 1e-7 * (double)(K))
    double e = maxrel(o1, o2, nout);
    CHECK(e < TOL(C));
    if (!(e < TOL(C))) fprintf(stderr, "  fwd %dx%dx%d: %g\n", N, C, OC, e);
    /* backward accumulates: start from the same nonzero values */
    fill(di1, nin, 5);
    memcpy(di2, di1, nin * 4);
    fill(dw1, nw, 6);
    memcpy(dw2, dw1, nw * 4);
    fill(db1, OC, 7);
    memcpy(db2, db1, OC * 4);
    f->matmul_bwd(di1, dw1, db1, dout, inp, w, N, C, OC);
    r->matmul_bwd(di2, dw2, db2, dout, inp, w, N, C, OC);
    CHECK(maxrel(di1, di2, nin) < TOL(OC));
    CHECK(maxrel(dw1, dw2, nw) < TOL(N));
    CHECK(maxrel(db1, db2, OC) < TOL(N));
    /* repeatable bit for bit */
    f->matmul_fwd(o2, inp, w, bias, N, C, OC);
    CHECK(memcmp(o1, o2, nout * 4) == 0);
    free(inp); free(w); free(bias); free(o1); free(o2); free(dout);
    free(di1); free(di2); free(dw1); free(dw2); free(db1); free(db2);
}

int main(void)
{
    static const int shapes[][3] = {
        {1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {64, 64, 192},
        {128, 384, 1152}, {128, 1536, 384}, {7, 96, 1001}, {300, 40, 20},
    };
    for (int th = 1; th <= 2; th++) {
        llmt__exec_cpu_set_threads(th);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            one(shapes[i][0], shapes[i][1], shapes[i][2]);
    }
#ifdef LLMT_HAVE_OPENBLAS
    /* the fast path really ran: OpenBLAS was loaded at first use */
    CHECK(dlsym(RTLD_DEFAULT, "cblas_sgemm") != NULL);
    char *(*core)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    if (core) fprintf(stderr, "OpenBLAS kernels: %s\n", core());
#endif
    return check_exit("exec");
}
