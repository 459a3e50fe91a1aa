/* The token group of the engine's MoE layers (moe_group.c): the ranks over
 * which the tokens of one micro-batch are split, so that the router
 * statistics that are means over the micro-batch (the aux loss's f_e and
 * P_e, the z loss) and the step's tallies are summed over them.
 *
 * MoE is per token: with sequence parallelism each tensor parallel rank
 * runs the layer on its own block of rows, with context parallelism each
 * CP rank on its rows of every sequence, and with both on the rows of the
 * product; a sum over a product of groups is the sums over its factors in
 * turn, so the group is a list of communicators (at most the two the
 * engine has: the SP-TP group and the CP group), not a communicator of
 * its own. Tensor parallelism without sequence parallelism is not in it:
 * every TP rank routes the same whole rows. */
#ifndef LLMT_TRAIN_MOE_GROUP_H
#define LLMT_TRAIN_MOE_GROUP_H

#include <stddef.h>

#include "core/internal.h"
#include "llmtrain.h"

enum { LLMT__MOE_GROUPS = 2 };

typedef struct llmt__moe_group {
    llmt_comm *c[LLMT__MOE_GROUPS];
    int n;       /* communicators in c */
    int size;    /* ranks in the group: the product of their sizes */
    int extra;   /* adds refused (more than LLMT__MOE_GROUPS): reported by check */
    llmt_err *e; /* where a failed sum's message goes (set before each use) */
} llmt__moe_group;

/* Add comm (NULL or one rank: nothing). */
void llmt__moe_group_add(llmt__moe_group *g, llmt_comm *comm);
/* llmt__moe_sum_fn (moe.h) over g: buf summed over each communicator in
 * turn, in place (fp32). */
llmt_status llmt__moe_group_sum(void *g, float *buf, size_t n);
/* The same for int64 counts. */
llmt_status llmt__moe_group_sum_i64(llmt__moe_group *g, int64_t *buf, size_t n);
/* Refuse what the fp32 statistics sum cannot count exactly: `choices`
 * (tokens x top_k of one call on this rank) times the group's size must
 * stay below 2^24. */
llmt_status llmt__moe_group_check(const llmt__moe_group *g, llmt_err *e, int64_t choices);

#endif
