/* The automatic stage balance (balance.h). A stage's cost is the FLOPs of
 * its layers, not their parameters: what the balance evens out is the
 * time each stage computes per micro-batch (the slowest stage sets the
 * pipeline's pace and the others idle for the difference), and a MoE
 * layer's E experts hold E / top_k times the parameters its tokens run
 * through, so weighing layers by parameters would give a MoE layer's
 * stage several times too few layers. Memory is the planner's separate
 * check (mem_total per stage against the device). */
#include <math.h>
#include <stdlib.h>

#include "plan/balance.h"

static int moe_layer(const llmt__balance_model *m, int64_t l)
{
    return m->experts > 0 && l % (m->every > 0 ? m->every : 1) == 0;
}

/* The four Linears (qkv, attention output, the FFN's two or three) and
 * the attention core's two seq-long products (averaged over causal rows:
 * seq/2 each); a MoE layer's FFN is its router, its top_k routed experts
 * and its shared experts instead (SwiGLU: three matrices each), as the
 * planner counts its FLOPs (cost.c, P_mlp_active). */
double llmt__balance_layer(const llmt__balance_model *m, int64_t l)
{
    double C = m->width, hd = m->width / m->heads;
    double kv = m->kv_heads > 0 ? m->kv_heads : m->heads;
    double Q = (m->heads + 2 * kv) * hd, mats = m->llama ? 3 : 2;
    double ffn = moe_layer(m, l)
                     ? (m->top_k + m->shared) * mats * C * m->expert_ffn + C * m->experts
                     : mats * C * m->ffn;
    return C * Q + C * C + ffn + m->seq * C;
}

/* The embedding is a lookup; the head is a width x vocabulary Linear plus
 * its softmax. */
void llmt__balance_ends(const llmt__balance_model *m, double *embed, double *head)
{
    *embed = m->width;
    *head = m->width * m->vocab + 4.0 * m->vocab;
}

/* Row s >= 1 of the table for i layers, j in [s, i): the stage's own work
 * own(j) = pre[i] - pre[j] (+ the head) falls strictly as j grows, and
 * prev[j], the best of j layers on s stages, never falls (a layer more
 * cannot make the best split's largest stage smaller), so max(own, prev)
 * falls then rises: its first minimum is at the crossing c (the first j
 * with own(j) <= prev(j)) or just before it, and c only moves right as i
 * grows. One pass per row finds what the scan over every j finds (the
 * first j of least worst), O(layers) instead of O(layers^2): the planner
 * runs this for every stage of every candidate layout. Where prev does
 * fall (it cannot with positive work), the row is scanned. */
static void row(const double *pre, const double *prev, double extra, int64_t L, int64_t s,
                double *best, int64_t *cut)
{
    int mono = 1;
    for (int64_t j = s + 1; j <= L; j++)
        mono = mono && prev[j] >= prev[j - 1];
    for (int64_t i = s + 1, c = s; i <= L; i++) {
        if (!mono) {
            double b = INFINITY;
            for (int64_t j = s; j < i; j++) {
                double own = pre[i] - pre[j] + extra;
                double worst = own > prev[j] ? own : prev[j];
                if (worst < b) {
                    b = worst;
                    cut[i] = j;
                }
            }
            best[i] = b;
            continue;
        }
        while (c < i && pre[i] - pre[c] + extra > prev[c])
            c++;
        if (c == i) { /* every own above prev: the last j, own falling */
            cut[i] = i - 1;
            best[i] = pre[i] - pre[i - 1] + extra;
        } else if (c == s) {
            cut[i] = s;
            best[i] = prev[s];
        } else {
            double o = pre[i] - pre[c - 1] + extra;
            cut[i] = o <= prev[c] ? c - 1 : c;
            best[i] = o <= prev[c] ? o : prev[c];
        }
    }
}

int llmt__balance_split_costs(const double *cost, int64_t L, double ec, double hc, int64_t p,
                              int64_t *first)
{
    if (p < 1 || p > L)
        return -1;
    /* dynamic programming over (stages, layers): best[s][i] is the least
     * largest cost of the first i layers on s + 1 stages, cut[s][i] where
     * its last stage starts (the first such start on ties, so the planner
     * and the engine, running this same code on the same costs, agree) */
    size_t W = (size_t)L + 1;
    double *pre = malloc(W * sizeof *pre);
    double *best = malloc((size_t)p * W * sizeof *best);
    int64_t *cut = malloc((size_t)p * W * sizeof *cut);
    if (!pre || !best || !cut) {
        free(pre);
        free(best);
        free(cut);
        return -1;
    }
    pre[0] = 0.0;
    for (int64_t l = 0; l < L; l++)
        pre[l + 1] = pre[l] + cost[l];
    for (int64_t s = 0; s < p; s++) {
        double *b = best + (size_t)s * W;
        int64_t *k = cut + (size_t)s * W;
        for (int64_t i = 0; i <= L; i++) {
            b[i] = INFINITY;
            k[i] = -1;
        }
        if (s == 0) { /* the first stage holds layers [0, i) and the embedding */
            for (int64_t i = 1; i <= L; i++) {
                b[i] = pre[i] + ec + (p == 1 ? hc : 0.0);
                k[i] = 0;
            }
            continue;
        }
        row(pre, b - W, s == p - 1 ? hc : 0.0, L, s, b, k);
    }
    first[p] = L;
    for (int64_t s = p - 1, i = L; s >= 0; s--) {
        i = cut[(size_t)s * W + (size_t)i];
        first[s] = i;
    }
    free(pre);
    free(best);
    free(cut);
    return 0;
}

int llmt__balance_split(const llmt__balance_model *m, int64_t L, int64_t p, int64_t *first)
{
    if (p < 1 || p > L)
        return -1;
    double ec, hc, *cost = malloc((size_t)L * sizeof *cost);
    if (!cost)
        return -1;
    llmt__balance_ends(m, &ec, &hc);
    for (int64_t l = 0; l < L; l++)
        cost[l] = llmt__balance_layer(m, l);
    int r = llmt__balance_split_costs(cost, L, ec, hc, p, first);
    free(cost);
    return r;
}
