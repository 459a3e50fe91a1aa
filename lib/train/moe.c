/* The mixture-of-experts layer on host fp32 memory (moe.h says what it
 * computes). Experts run as one GEMM each over their packed rows, so the
 * cost is that of the tokens kept, not of E dense layers. */
#include "train/moe.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Threading (measured in doc/moe.md). Every `omp parallel` is a fork and
 * a barrier: splitting each expert's GEMMs over the team (9 regions an
 * expert, ~80 a call, the code between them serial) left the second
 * thread spinning in libgomp's barrier for 44% of the cycles, and on a
 * loaded host each barrier waits for a preempted thread: 2 threads ran
 * 3.5x slower than 1. So the experts run as one region over experts,
 * their GEMMs single-threaded inside (exec's GEMM splits only outside a
 * parallel region), and the per-token loops are one region each. Each
 * output row is written by one thread in the serial loop's order, so the
 * results are the serial code's, bit for bit. */
static int par(size_t work)
{
#ifdef _OPENMP
    return work >= 65536 && omp_get_level() == 0 && omp_get_max_threads() > 1;
#else
    (void)work;
    return 0;
#endif
}

int llmt__moe_over_experts(const int64_t *rows, int n)
{
#ifdef _OPENMP
    if (omp_get_level() > 0)
        return 0;
    int busy = 0;
    for (int e = 0; e < n; e++)
        busy += rows[e] > 0;
    return omp_get_max_threads() > 1 && busy >= 2 * omp_get_max_threads();
#else
    (void)rows;
    (void)n;
    return 0;
#endif
}

int llmt__moe_capacity(const llmt__moe_shape *sh, int N)
{
    if (sh->dropless)
        return N;
    double c = ceil((double)sh->capacity_factor * N * sh->K / sh->E);
    if (c < 1)
        c = 1;
    return c > N ? N : (int)c;
}

void llmt__moe_free(llmt__moe *s)
{
    if (!s)
        return;
    void *p[] = {s->probs, s->lse, s->gate, s->idx,  s->row,   s->tok,     s->kept, s->chosen,
                 s->start, s->xe,  s->h1,   s->h3,   s->act,   s->ye,      s->dye,  s->dact,
                 s->dh1,   s->dh3, s->dxe,  s->dlog, s->dgate, s->gchosen, s->gP,   s->gbuf};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
    free(s);
}

llmt__moe *llmt__moe_new(const llmt__moe_shape *sh, int Nmax)
{
    return llmt__moe_new_rows(sh, Nmax, 1);
}

llmt__moe *llmt__moe_new_rows(const llmt__moe_shape *sh, int Nmax, int rows)
{
    llmt__moe *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->sh = *sh;
    s->Nmax = Nmax;
    size_t N = (size_t)Nmax, E = (size_t)sh->E, K = (size_t)sh->K, C = (size_t)sh->C,
           F = (size_t)sh->F, R = N * K;
    s->probs = malloc(N * E * sizeof(float));
    s->dlog = malloc(N * E * sizeof(float));
    s->lse = malloc(N * sizeof(float));
    s->gate = malloc(R * sizeof(float));
    s->dgate = malloc(R * sizeof(float));
    s->idx = malloc(R * sizeof(int32_t));
    s->row = malloc(R * sizeof(int32_t));
    s->tok = malloc(R * sizeof(int32_t));
    s->kept = calloc(E, sizeof(int64_t));
    s->chosen = calloc(E, sizeof(int64_t));
    s->start = calloc(E + 1, sizeof(int64_t));
    s->gchosen = malloc(E * sizeof(double));
    s->gP = malloc(E * sizeof(double));
    s->gbuf = malloc((2 * E + 2) * sizeof(float));
    if (!s->gchosen || !s->gP || !s->gbuf) {
        llmt__moe_free(s);
        return NULL;
    }
    if (!s->probs || !s->dlog || !s->lse || !s->gate || !s->dgate || !s->idx || !s->row ||
        !s->tok || !s->kept || !s->chosen || !s->start) {
        llmt__moe_free(s);
        return NULL;
    }
    if (!rows) /* an op table's layer (moe_dev.h) keeps its rows itself */
        return s;
    float **rc[] = {&s->xe, &s->ye, &s->dye, &s->dxe};
    float **rf[] = {&s->h1, &s->h3, &s->act, &s->dact, &s->dh1, &s->dh3};
    for (size_t i = 0; i < 4; i++)
        if (!(*rc[i] = malloc(R * C * sizeof(float)))) {
            llmt__moe_free(s);
            return NULL;
        }
    for (size_t i = 0; i < 6; i++)
        if (!(*rf[i] = malloc(R * F * sizeof(float)))) {
            llmt__moe_free(s);
            return NULL;
        }
    return s;
}

static float sigm(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* Router probabilities, log-sum-exps, top-k choices and their weights,
 * from the router's logits in s->probs (overwritten). */
static void route(llmt__moe *s, int N)
{
    int E = s->sh.E, K = s->sh.K;
#pragma omp parallel for schedule(static) if (par((size_t)N * E * 16))
    for (int n = 0; n < N; n++) {
        float *p = s->probs + (size_t)n * E, mx = -FLT_MAX;
        for (int e = 0; e < E; e++)
            mx = p[e] > mx ? p[e] : mx;
        double sum = 0;
        for (int e = 0; e < E; e++)
            sum += exp((double)p[e] - mx);
        s->lse[n] = (float)(mx + log(sum));
        for (int e = 0; e < E; e++)
            p[e] = (float)(exp((double)p[e] - mx) / sum);
        int32_t *ix = s->idx + (size_t)n * K;
        double tot = 0;
        for (int k = 0; k < K; k++) { /* k-th largest; ties: lower expert */
            int best = -1;
            for (int e = 0; e < E; e++) {
                int used = 0;
                for (int j = 0; j < k; j++)
                    used |= ix[j] == e;
                if (!used && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            ix[k] = best;
            tot += p[best];
        }
        if (s->sh.raw_gates)
            tot = 1.0;
        for (int k = 0; k < K; k++)
            s->gate[(size_t)n * K + k] = (float)(p[ix[k]] / tot);
    }
    memset(s->chosen, 0, (size_t)E * sizeof(int64_t));
    for (size_t i = 0; i < (size_t)N * K; i++)
        s->chosen[s->idx[i]]++;
}

/* Slot-major dispatch under the capacity: each kept (token, choice)'s
 * packed row, and each packed row's token. */
static void dispatch(llmt__moe *s, int N)
{
    int E = s->sh.E, K = s->sh.K;
    s->cap = llmt__moe_capacity(&s->sh, N);
    memset(s->kept, 0, (size_t)E * sizeof(int64_t));
    s->dropped = 0;
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)n * K + k;
            int e = s->idx[i];
            if (s->kept[e] < s->cap) {
                s->row[i] = (int32_t)s->kept[e]++; /* position inside e for now */
            } else {
                s->row[i] = -1;
                s->dropped++;
            }
        }
    s->start[0] = 0;
    for (int e = 0; e < E; e++)
        s->start[e + 1] = s->start[e] + s->kept[e];
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)n * K + k;
            if (s->row[i] < 0)
                continue;
            s->row[i] += (int32_t)s->start[s->idx[i]];
            s->tok[s->row[i]] = n;
        }
}

/* The kept rows of x, packed. */
static void gather(llmt__moe *s, const float *x)
{
    int C = s->sh.C;
    int64_t R = s->start[s->sh.E];
#pragma omp parallel for schedule(static) if (par((size_t)R * C))
    for (int64_t r = 0; r < R; r++)
        memcpy(s->xe + (size_t)r * C, x + (size_t)s->tok[r] * C, (size_t)C * sizeof(float));
}

/* The call's statistics (moe.h: gchosen .. Ng), summed over the token
 * group when there is one. One fp32 sum of 2E + 2 values: the counts are
 * exact below 2^24 (moe_net.c refuses calls that could reach it), the
 * probability and lse^2 sums are rounded to fp32 once per rank. */
static llmt_status group_stats(llmt__moe *s)
{
    int N = s->N, E = s->sh.E;
    for (int e = 0; e < E; e++) {
        double P = 0;
        for (int n = 0; n < N; n++)
            P += s->probs[(size_t)n * E + e];
        s->gP[e] = P;
        s->gchosen[e] = (double)s->chosen[e];
    }
    double z = 0;
    for (int n = 0; n < N; n++)
        z += (double)s->lse[n] * s->lse[n];
    s->gz = z;
    s->Ng = N;
    if (!s->sum)
        return LLMT_OK;
    float *b = s->gbuf;
    for (int e = 0; e < E; e++) {
        b[e] = (float)s->chosen[e];
        b[E + e] = (float)s->gP[e];
    }
    b[2 * E] = (float)z;
    b[2 * E + 1] = (float)N;
    llmt_status st = s->sum(s->sum_ctx, b, (size_t)(2 * E + 2));
    if (st != LLMT_OK)
        return st;
    for (int e = 0; e < E; e++) {
        s->gchosen[e] = b[e];
        s->gP[e] = b[E + e];
    }
    s->gz = b[2 * E];
    s->Ng = (int64_t)b[2 * E + 1];
    return LLMT_OK;
}

llmt_status llmt__moe_route_logits(llmt__moe *s, int N)
{
    s->N = N;
    route(s, N);
    dispatch(s, N);
    return group_stats(s);
}

llmt_status llmt__moe_route(llmt__moe *s, const float *router, const float *x, int N)
{
    int E = s->sh.E, C = s->sh.C;
    llmt__cpu_gemm(0, 1, N, E, C, 1.0f, x, C, router, C, 0.0f, s->probs, E);
    llmt_status st = llmt__moe_route_logits(s, N);
    gather(s, x);
    return st;
}

void llmt__moe_expert_fwd(const llmt__moe_shape *sh, const llmt__moe_w *w, int e, int rows,
                          const float *xe, float *h1, float *h3, float *act, float *ye)
{
    if (rows < 1)
        return;
    int C = sh->C, F = sh->F;
    const float *w1 = w->w1 + (size_t)e * F * C, *w3 = w->w3 + (size_t)e * F * C,
                *w2 = w->w2 + (size_t)e * C * F;
    llmt__cpu_gemm(0, 1, rows, F, C, 1.0f, xe, C, w1, C, 0.0f, h1, F);
    llmt__cpu_gemm(0, 1, rows, F, C, 1.0f, xe, C, w3, C, 0.0f, h3, F);
    size_t n = (size_t)rows * F;
#pragma omp parallel for schedule(static) if (par(n))
    for (size_t i = 0; i < n; i++)
        act[i] = h1[i] * sigm(h1[i]) * h3[i];
    llmt__cpu_gemm(0, 1, rows, C, F, 1.0f, act, F, w2, F, 0.0f, ye, C);
}

void llmt__moe_combine(llmt__moe *s, float *y)
{
    int N = s->N, C = s->sh.C, K = s->sh.K;
#pragma omp parallel for schedule(static) if (par((size_t)N * K * C))
    for (int n = 0; n < N; n++) {
        memset(y + (size_t)n * C, 0, (size_t)C * sizeof(float));
        for (int k = 0; k < K; k++) {
            int r = s->row[(size_t)n * K + k];
            if (r < 0)
                continue;
            float gk = s->gate[(size_t)n * K + k];
            const float *ye = s->ye + (size_t)r * C;
            for (int c = 0; c < C; c++)
                y[(size_t)n * C + c] += gk * ye[c];
        }
    }
    llmt__moe_losses(s);
}

void llmt__moe_losses(llmt__moe *s)
{
    int E = s->sh.E, K = s->sh.K;
    /* over the token group's Ng tokens (this call's N without one) */
    double aux = 0, Ng = (double)s->Ng;
    for (int e = 0; e < E; e++)
        aux += s->gchosen[e] / (Ng * K) * (s->gP[e] / Ng);
    s->aux = E * aux;
    s->z = s->gz / Ng;
}

static void expert_fwd(llmt__moe *s, const llmt__moe_w *w, int e)
{
    size_t C = (size_t)s->sh.C, F = (size_t)s->sh.F, r0 = (size_t)s->start[e];
    llmt__moe_expert_fwd(&s->sh, w, e, (int)s->kept[e], s->xe + r0 * C, s->h1 + r0 * F,
                         s->h3 + r0 * F, s->act + r0 * F, s->ye + r0 * C);
}

llmt_status llmt__moe_fwd(llmt__moe *s, const llmt__moe_w *w, const float *x, float *y, int N)
{
    if (N < 1 || N > s->Nmax)
        return LLMT_ERR_INVALID_ARGUMENT;
    llmt_status st = llmt__moe_route(s, w->router, x, N);
    if (st != LLMT_OK)
        return st;
    /* not `parallel for if`: a region of one still nests each GEMM's split
     * inside it, and libgomp starts fresh threads for every nested team
     * (exec/cpu.c's gemm_a) */
    if (llmt__moe_over_experts(s->kept, s->sh.E)) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int e = 0; e < s->sh.E; e++)
            expert_fwd(s, w, e);
    } else {
        for (int e = 0; e < s->sh.E; e++)
            expert_fwd(s, w, e);
    }
    llmt__moe_combine(s, y);
    return LLMT_OK;
}

void llmt__moe_combine_bwd(llmt__moe *s, const float *dy)
{
    int N = s->N, C = s->sh.C, K = s->sh.K;
    /* dye = gate * dy, dgate = dy . ye */
#pragma omp parallel for schedule(static) if (par((size_t)N * K * C))
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)n * K + k;
            int r = s->row[i];
            double dg = 0;
            if (r >= 0) {
                const float *d = dy + (size_t)n * C, *ye = s->ye + (size_t)r * C;
                float *dye = s->dye + (size_t)r * C;
                for (int c = 0; c < C; c++) {
                    dye[c] = s->gate[i] * d[c];
                    dg += (double)d[c] * ye[c];
                }
            }
            s->dgate[i] = (float)dg;
        }
}

void llmt__moe_expert_bwd(const llmt__moe_shape *sh, const llmt__moe_w *w, llmt__moe_w *dw,
                          int e, int rows, const float *xe, const float *h1, const float *h3,
                          const float *act, const float *dye, float *dact, float *dh1,
                          float *dh3, float *dxe)
{
    if (rows < 1)
        return;
    int C = sh->C, F = sh->F;
    size_t eo = (size_t)e * F * C;
    llmt__cpu_gemm(1, 0, C, F, rows, 1.0f, dye, C, act, F, 1.0f, dw->w2 + eo, F);
    llmt__cpu_gemm(0, 0, rows, F, C, 1.0f, dye, C, w->w2 + eo, F, 0.0f, dact, F);
    size_t n = (size_t)rows * F;
#pragma omp parallel for schedule(static) if (par(n))
    for (size_t i = 0; i < n; i++) {
        float sg = sigm(h1[i]), silu = h1[i] * sg;
        dh3[i] = dact[i] * silu;
        dh1[i] = dact[i] * h3[i] * (sg + h1[i] * sg * (1.0f - sg));
    }
    llmt__cpu_gemm(1, 0, F, C, rows, 1.0f, dh1, F, xe, C, 1.0f, dw->w1 + eo, C);
    llmt__cpu_gemm(1, 0, F, C, rows, 1.0f, dh3, F, xe, C, 1.0f, dw->w3 + eo, C);
    llmt__cpu_gemm(0, 0, rows, C, F, 1.0f, dh1, F, w->w1 + eo, C, 0.0f, dxe, C);
    llmt__cpu_gemm(0, 0, rows, C, F, 1.0f, dh3, F, w->w3 + eo, C, 1.0f, dxe, C);
}

/* Token n's router logit gradient (s->dlog row n) through the
 * renormalised (or raw) weights, the aux loss's P_e and the z loss, then
 * the softmax. */
static void dlog_row(llmt__moe *s, int n, float aux_coef, float z_coef)
{
    int E = s->sh.E, K = s->sh.K;
    float Ng = (float)s->Ng; /* the aux and z losses' means: over the group */
    const float *p = s->probs + (size_t)n * E;
    float *dl = s->dlog + (size_t)n * E;
    const int32_t *ix = s->idx + (size_t)n * K;
    const float *gt = s->gate + (size_t)n * K, *dg = s->dgate + (size_t)n * K;
    double S = 0, gd = 0;
    for (int k = 0; k < K; k++) {
        S += p[ix[k]];
        gd += (double)dg[k] * gt[k];
    }
    for (int e = 0; e < E; e++)
        dl[e] = aux_coef * (float)E * (float)s->gchosen[e] / (Ng * K) / Ng;
    for (int k = 0; k < K; k++) /* d gate_k / d p: renormalised or raw */
        dl[ix[k]] += s->sh.raw_gates ? dg[k] : (float)((dg[k] - gd) / S);
    double pd = 0;
    for (int e = 0; e < E; e++)
        pd += (double)p[e] * dl[e];
    for (int e = 0; e < E; e++)
        dl[e] = (float)(p[e] * (dl[e] - pd) + z_coef * 2.0 * s->lse[n] * p[e] / s->Ng);
}

void llmt__moe_router_bwd(llmt__moe *s, const llmt__moe_w *w, llmt__moe_w *dw, const float *x,
                          float *dx, float aux_coef, float z_coef)
{
    int N = s->N, E = s->sh.E, C = s->sh.C, K = s->sh.K;
#pragma omp parallel for schedule(static) if (par((size_t)N * K * C))
    for (int n = 0; n < N; n++) {
        /* the experts' input gradients back to their token, its rows in
         * packed order (ascending), the order of a scatter over rows */
        float *d = dx + (size_t)n * C;
        memset(d, 0, (size_t)C * sizeof(float));
        for (int32_t last = -1;;) {
            int32_t r = -1;
            for (int k = 0; k < K; k++) {
                int32_t rk = s->row[(size_t)n * K + k];
                if (rk > last && (r < 0 || rk < r))
                    r = rk;
            }
            if (r < 0)
                break;
            const float *g = s->dxe + (size_t)r * C;
            for (int c = 0; c < C; c++)
                d[c] += g[c];
            last = r;
        }
        dlog_row(s, n, aux_coef, z_coef);
    }
    llmt__cpu_gemm(1, 0, E, C, N, 1.0f, s->dlog, E, x, C, 1.0f, dw->router, C);
    llmt__cpu_gemm(0, 0, N, C, E, 1.0f, s->dlog, E, w->router, C, 1.0f, dx, C);
}

void llmt__moe_router_dlog(llmt__moe *s, float aux_coef, float z_coef)
{
    int N = s->N;
#pragma omp parallel for schedule(static) if (par((size_t)N * s->sh.K * s->sh.C))
    for (int n = 0; n < N; n++)
        dlog_row(s, n, aux_coef, z_coef);
}

static void expert_bwd(llmt__moe *s, const llmt__moe_w *w, llmt__moe_w *dw, int e)
{
    size_t C = (size_t)s->sh.C, F = (size_t)s->sh.F, r0 = (size_t)s->start[e];
    llmt__moe_expert_bwd(&s->sh, w, dw, e, (int)s->kept[e], s->xe + r0 * C, s->h1 + r0 * F,
                         s->h3 + r0 * F, s->act + r0 * F, s->dye + r0 * C, s->dact + r0 * F,
                         s->dh1 + r0 * F, s->dh3 + r0 * F, s->dxe + r0 * C);
}

llmt_status llmt__moe_bwd(llmt__moe *s, const llmt__moe_w *w, llmt__moe_w *dw, const float *x,
                          const float *dy, float *dx, float aux_coef, float z_coef)
{
    llmt__moe_combine_bwd(s, dy);
    if (llmt__moe_over_experts(s->kept, s->sh.E)) { /* not `if`: see llmt__moe_fwd */
#pragma omp parallel for schedule(dynamic, 1)
        for (int e = 0; e < s->sh.E; e++)
            expert_bwd(s, w, dw, e);
    } else {
        for (int e = 0; e < s->sh.E; e++)
            expert_bwd(s, w, dw, e);
    }
    llmt__moe_router_bwd(s, w, dw, x, dx, aux_coef, z_coef);
    return LLMT_OK;
}
