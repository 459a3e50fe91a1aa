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

int llmt__balance_split(const llmt__balance_model *m, int64_t L, int64_t p, int64_t *first)
{
    if (p < 1 || p > L)
        return -1;
    /* dynamic programming over (stages, layers): best[s][i] is the least
     * largest cost of the first i layers on s + 1 stages, cut[s][i] where
     * its last stage starts (the first such start on ties, so the planner
     * and the engine, running this same code on the same costs, agree) */
    double ec, hc;
    llmt__balance_ends(m, &ec, &hc);
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
        pre[l + 1] = pre[l] + llmt__balance_layer(m, l);
    for (int64_t s = 0; s < p; s++) {
        for (int64_t i = 0; i <= L; i++) {
            double b = INFINITY;
            int64_t at = -1;
            /* stage s holds layers [j, i) */
            for (int64_t j = s; j < i; j++) {
                if (s == 0 && j != 0)
                    break;
                double own = pre[i] - pre[j] + (s == 0 ? ec : 0.0) + (s == p - 1 ? hc : 0.0);
                double before = s == 0 ? 0.0 : best[(size_t)(s - 1) * W + (size_t)j];
                double worst = own > before ? own : before;
                if (worst < b) {
                    b = worst;
                    at = j;
                }
            }
            best[(size_t)s * W + (size_t)i] = b;
            cut[(size_t)s * W + (size_t)i] = at;
        }
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
