/* The automatic pipeline stage balance, shared by the planner (lib/plan/
 * cost.c, llmt__plan_spec_span) and the engine (lib/train/pp.c,
 * llmt__pp_layout), so that both put the same layers on each stage: the
 * work of one layer per token, and the contiguous split of the layers
 * over the stages that minimises the largest stage's work. */
#ifndef LLMT_PLAN_BALANCE_H
#define LLMT_PLAN_BALANCE_H

#include <stdint.h>

/* What a layer's work depends on, from the spec (planner) or the model
 * config (engine), defaults resolved: ffn the dense FFN's hidden size,
 * experts 0 for a dense model; a layer l is MoE when l % every == 0. */
typedef struct llmt__balance_model {
    double width, heads, kv_heads, ffn, vocab, seq;
    int llama;
    double experts, top_k, expert_ffn, shared;
    int64_t every;
} llmt__balance_model;

/* Forward multiply-adds per token of layer l, of the embedding and of the
 * head (the backwards are about twice the forwards for all of them, so
 * the ratios hold). */
double llmt__balance_layer(const llmt__balance_model *m, int64_t l);
void llmt__balance_ends(const llmt__balance_model *m, double *embed, double *head);

/* first[0..stages] (first[stages] = layers): the split of the model's
 * layers over `stages` contiguous stages, each holding at least one
 * layer, the embedding on the first and the head on the last, that
 * minimises the largest stage's work. -1 without memory or with stages
 * outside 1..layers, else 0. */
int llmt__balance_split(const llmt__balance_model *m, int64_t layers, int64_t stages,
                        int64_t *first);
/* The same for the layers' costs cost[0..layers-1] (each > 0), the
 * embedding's ec and the head's hc. */
int llmt__balance_split_costs(const double *cost, int64_t layers, double ec, double hc,
                              int64_t stages, int64_t *first);

#endif
