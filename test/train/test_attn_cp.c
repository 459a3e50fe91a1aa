/* Context parallelism's attention pieces (lib/exec/attn_cp.c) against the
 * unsplit attention op of the fp32 CPU backend (dev_cpu.c) on random
 * inputs: a causal attention over T positions split in 2 x cp chunks,
 * rank r holding chunks r and 2 cp - 1 - r (the causal load balance),
 * each rank's queries run against every rank's key/value block (its own
 * first, then the ring's order), merged by log-sum-exp; the backward
 * sends each block's dk, dv back to its owner (summed there). Checked:
 * outputs, dq, dk, dv at every global position within 1e-5 x (1 + |ref|)
 * (fp32; only the order of the sums differs), and RoPE at given positions
 * against the backend's rope of the whole sequence (equal to 1e-6). Grouped
 * heads (nh 4, nkv 2) and plain ones, cp 2 and 4. The bf16 storage path
 * against the emulation's unsplit op: see run_bf16. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/attn_cp.h"
#include "exec/dev.h"

#define B 2
#define T 32
#define HD 16

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static double worst;
static int close_to(float a, float b, float tol)
{
    double e = fabs((double)a - b) / (1.0 + fabs((double)b));
    if (e > worst)
        worst = e;
    return e <= tol;
}

/* position of local row t of rank r */
static int gpos(int r, int cp, int t)
{
    int Tc = T / (2 * cp), c = t / Tc;
    return (c == 0 ? r : 2 * cp - 1 - r) * Tc + t % Tc;
}

static void run(const llmt__dev_ops *op, llmt__dev *d, int cp, int nh, int nkv)
{
    int Q = (nh + 2 * nkv) * HD, O = nh * HD, Tl = T / cp, KV = 2 * nkv * HD;
    size_t N = (size_t)B * T;
    float *qkv = malloc(N * Q * 4), *out = malloc(N * O * 4), *dout = malloc(N * O * 4);
    float *probs = malloc((size_t)B * nh * T * T * 4), *dqkv = malloc(N * Q * 4);
    uint64_t s = 99 + (uint64_t)cp * 7 + (uint64_t)nkv;
    for (size_t i = 0; i < N * Q; i++)
        qkv[i] = 2.0f * frand(&s);
    for (size_t i = 0; i < N * O; i++)
        dout[i] = frand(&s);
    CHECK(op->attention_fwd(d, out, probs, qkv, qkv + nh * HD, qkv + (nh + nkv) * HD, Q, B, T,
                            nh, nkv, HD) == LLMT_OK);
    CHECK(op->attention_bwd(d, dqkv, dqkv + nh * HD, dqkv + (nh + nkv) * HD, dout, out, probs,
                            qkv, qkv + nh * HD, qkv + (nh + nkv) * HD, Q, B, T, nh, nkv,
                            HD) == LLMT_OK);
    /* each rank's rows: q, its kv block (packed), dout, positions */
    size_t nl = (size_t)B * Tl;
    float *lq = malloc(cp * nl * Q * 4), *lkv = malloc(cp * nl * KV * 4);
    float *ldo = malloc(cp * nl * O * 4), *lo = calloc(cp * nl * O, 4);
    float *lse = malloc((size_t)cp * B * nh * Tl * 4), *D = malloc((size_t)B * nh * Tl * 4);
    float *dq = calloc(cp * nl * O, 4), *dkv = calloc(cp * nl * KV, 4);
    int32_t *pos = malloc((size_t)cp * Tl * 4);
    for (int r = 0; r < cp; r++)
        for (int t = 0; t < Tl; t++)
            pos[r * Tl + t] = gpos(r, cp, t);
    for (int r = 0; r < cp; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                size_t g = (size_t)b * T + pos[r * Tl + t], l = r * nl + (size_t)b * Tl + t;
                memcpy(lq + l * Q, qkv + g * Q, (size_t)Q * 4);
                memcpy(lkv + l * KV, qkv + g * Q + nh * HD, (size_t)KV * 4);
                memcpy(ldo + l * O, dout + g * O, (size_t)O * 4);
            }
    for (size_t i = 0; i < (size_t)cp * B * nh * Tl; i++)
        lse[i] = -INFINITY;
    for (int r = 0; r < cp; r++) {
        float *L = lse + (size_t)r * B * nh * Tl;
        for (int k = 0; k < cp; k++) { /* ring order: own block first */
            int src = ((r - k) % cp + cp) % cp;
            llmt__attn_cp_fwd(0, lo + r * nl * O, L, lq + r * nl * Q, Q, lkv + src * nl * KV,
                              KV, B, Tl, Tl, nh, nkv, HD, pos + r * Tl, pos + src * Tl);
        }
        llmt__attn_cp_delta(0, D, ldo + r * nl * O, lo + r * nl * O, B, Tl, nh, HD);
        for (int k = 0; k < cp; k++) {
            int src = ((r - k) % cp + cp) % cp;
            llmt__attn_cp_bwd(0, dq + r * nl * O, dkv + src * nl * KV, D, L, ldo + r * nl * O,
                              lq + r * nl * Q, Q, lkv + src * nl * KV, KV, B, Tl, Tl, nh, nkv,
                              HD, pos + r * Tl, pos + src * Tl);
        }
    }
    int bad = 0;
    worst = 0.0;
    for (int r = 0; r < cp; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                size_t g = (size_t)b * T + pos[r * Tl + t], l = r * nl + (size_t)b * Tl + t;
                for (int i = 0; i < O; i++) {
                    bad += !close_to(lo[l * O + i], out[g * O + i], 1e-5f);
                    bad += !close_to(dq[l * O + i], dqkv[g * Q + i], 1e-5f);
                }
                for (int i = 0; i < KV; i++)
                    bad += !close_to(dkv[l * KV + i], dqkv[g * Q + nh * HD + i], 1e-5f);
            }
    printf("cp %d, heads %d / kv %d: worst relative difference %.3g (bound 1e-5)\n", cp, nh,
           nkv, worst);
    CHECK_EQ_INT(bad, 0);
    /* the comparison can fail: a wrong mask moves the outputs */
    CHECK(!close_to(lo[O], out[O] + 0.01f, 1e-5f));

    /* RoPE at the local positions vs the whole sequence's */
    float *x = malloc(N * Q * 4), *lx = malloc(cp * nl * Q * 4);
    memcpy(x, qkv, N * Q * 4);
    memcpy(lx, lq, cp * nl * Q * 4);
    CHECK(op->rope(d, x, B, T, nh + nkv, HD, Q, 10000.0f, 0) == LLMT_OK);
    worst = 0.0;
    bad = 0;
    for (int r = 0; r < cp; r++) {
        llmt__attn_cp_rope(0, lx + r * nl * Q, B, Tl, nh + nkv, HD, Q, 10000.0f, 0,
                           pos + r * Tl);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                size_t g = (size_t)b * T + pos[r * Tl + t], l = r * nl + (size_t)b * Tl + t;
                for (int i = 0; i < Q; i++)
                    bad += !close_to(lx[l * Q + i], x[g * Q + i], 1e-6f);
            }
        /* and back */
        llmt__attn_cp_rope(0, lx + r * nl * Q, B, Tl, nh + nkv, HD, Q, 10000.0f, 1,
                           pos + r * Tl);
        for (size_t i = 0; i < nl * Q; i++)
            bad += !close_to(lx[r * nl * Q + i], lq[r * nl * Q + i], 1e-5f);
    }
    CHECK_EQ_INT(bad, 0);
    free(x);
    free(lx);
    free(qkv);
    free(out);
    free(dout);
    free(probs);
    free(dqkv);
    free(lq);
    free(lkv);
    free(ldo);
    free(lo);
    free(lse);
    free(D);
    free(dq);
    free(dkv);
    free(pos);
}

/* bf16 storage (the emulation's): the same split against the emulation's
 * unsplit attention (which keeps the log-sum-exp): the blocks' fp32
 * output and log-sum-exp before rounding, dq, dk, dv from the bf16
 * output; within 2^-7 x (1 + |ref|) (the reference rounds to bf16 once,
 * the blocks sum in another order), the log-sum-exp within 1e-5. */
static void run_bf16(int cp, int nh, int nkv)
{
    const llmt__dev_ops *op = llmt__dev_emul();
    llmt__dev_opts dopt = {0, 0};
    llmt__dev *d = NULL;
    char err[256];
    CHECK(op->create(&dopt, &d, err, sizeof err) == LLMT_OK);
    if (!d)
        return;
    int Q = (nh + 2 * nkv) * HD, O = nh * HD, Tl = T / cp, KV = 2 * nkv * HD;
    size_t N = (size_t)B * T, nl = (size_t)B * Tl;
    llmt__bf16 *qkv = malloc(N * Q * 2), *out = malloc(N * O * 2), *dout = malloc(N * O * 2);
    llmt__bf16 *dqkv = malloc(N * Q * 2), *lq = malloc(nl * Q * 2),
               *lkv = malloc(cp * nl * KV * 2);
    llmt__bf16 *ldo = malloc(nl * O * 2), *lob = malloc(nl * O * 2);
    float *lse = malloc((size_t)B * nh * T * 4), *lo = malloc(nl * O * 4);
    float *L = malloc(nl * nh * 4), *D = malloc(nl * nh * 4), *dq = malloc(nl * O * 4);
    float *dkv = calloc(cp * nl * KV, 4);
    int32_t *pos = malloc((size_t)cp * Tl * 4);
    uint64_t s = 7 + (uint64_t)cp + (uint64_t)nkv;
    for (size_t i = 0; i < N * Q; i++)
        qkv[i] = llmt__f32_to_bf16(2.0f * frand(&s));
    for (size_t i = 0; i < N * O; i++)
        dout[i] = llmt__f32_to_bf16(frand(&s));
    CHECK(op->attention_fwd(d, out, lse, qkv, qkv + nh * HD, qkv + (nh + nkv) * HD, Q, B, T, nh,
                            nkv, HD) == LLMT_OK);
    CHECK(op->attention_bwd(d, dqkv, dqkv + nh * HD, dqkv + (nh + nkv) * HD, dout, out, lse,
                            qkv, qkv + nh * HD, qkv + (nh + nkv) * HD, Q, B, T, nh, nkv,
                            HD) == LLMT_OK);
    for (int r = 0; r < cp; r++)
        for (int t = 0; t < Tl; t++)
            pos[r * Tl + t] = gpos(r, cp, t);
    for (int r = 0; r < cp; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                size_t g = (size_t)b * T + pos[r * Tl + t], l = r * nl + (size_t)b * Tl + t;
                memcpy(lkv + l * KV, qkv + g * Q + nh * HD, (size_t)KV * 2);
            }
    int bad = 0;
    worst = 0.0;
    for (int r = 0; r < cp; r++) {
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                size_t g = (size_t)b * T + pos[r * Tl + t], l = (size_t)b * Tl + t;
                memcpy(lq + l * Q, qkv + g * Q, (size_t)Q * 2);
                memcpy(ldo + l * O, dout + g * O, (size_t)O * 2);
            }
        memset(lo, 0, nl * O * 4);
        memset(dq, 0, nl * O * 4);
        for (size_t i = 0; i < nl * nh; i++)
            L[i] = -INFINITY;
        for (int k = 0; k < cp; k++) {
            int src = ((r - k) % cp + cp) % cp;
            llmt__attn_cp_fwd(1, lo, L, lq, Q, lkv + src * nl * KV, KV, B, Tl, Tl, nh, nkv, HD,
                              pos + r * Tl, pos + src * Tl);
        }
        llmt__attn_cp_rows(1, lob, O, lo, O, 1, nl, O);
        llmt__attn_cp_delta(1, D, ldo, lob, B, Tl, nh, HD);
        for (int k = 0; k < cp; k++) {
            int src = ((r - k) % cp + cp) % cp;
            llmt__attn_cp_bwd(1, dq, dkv + src * nl * KV, D, L, ldo, lq, Q, lkv + src * nl * KV,
                              KV, B, Tl, Tl, nh, nkv, HD, pos + r * Tl, pos + src * Tl);
        }
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                size_t g = (size_t)b * T + pos[r * Tl + t], l = (size_t)b * Tl + t;
                for (int i = 0; i < O; i++) {
                    bad +=
                        !close_to(lo[l * O + i], llmt__bf16_to_f32(out[g * O + i]), 1.0f / 128);
                    bad += !close_to(dq[l * O + i], llmt__bf16_to_f32(dqkv[g * Q + i]),
                                     1.0f / 128);
                }
                for (int h = 0; h < nh; h++)
                    bad += !close_to(L[((size_t)b * nh + h) * Tl + t],
                                     lse[((size_t)b * nh + h) * T + pos[r * Tl + t]], 1e-5f);
            }
    }
    for (int r = 0; r < cp; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                size_t g = (size_t)b * T + pos[r * Tl + t], l = r * nl + (size_t)b * Tl + t;
                for (int i = 0; i < KV; i++)
                    bad += !close_to(dkv[l * KV + i],
                                     llmt__bf16_to_f32(dqkv[g * Q + nh * HD + i]), 1.0f / 128);
            }
    printf("bf16 cp %d, heads %d / kv %d: worst relative difference %.3g (bound 2^-7)\n", cp,
           nh, nkv, worst);
    CHECK_EQ_INT(bad, 0);
    free(qkv);
    free(out);
    free(dout);
    free(dqkv);
    free(lq);
    free(lkv);
    free(ldo);
    free(lob);
    free(lse);
    free(lo);
    free(L);
    free(D);
    free(dq);
    free(dkv);
    free(pos);
    op->destroy(d);
}

int main(void)
{
    const llmt__dev_ops *op = llmt__dev_cpu();
    llmt__dev_opts o = {0, 0};
    llmt__dev *d = NULL;
    char err[256];
    if (op->create(&o, &d, err, sizeof err) != LLMT_OK) {
        fprintf(stderr, "cpu backend: %s\n", err);
        return 1;
    }
    for (int cp = 2; cp <= 4; cp *= 2) {
        run(op, d, cp, 4, 2);
        run(op, d, cp, 4, 4);
        run_bf16(cp, 4, 2);
    }
    op->destroy(d);
    return check_exit("attn-cp");
}
