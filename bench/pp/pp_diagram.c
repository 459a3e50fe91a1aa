/* Text diagrams of the pipeline schedules the engine runs (the op lists
 * of lib/plan/pp_sched.c, timed on an ideal machine where every chunk's
 * forward and backward take one cell and messages are free), as
 * doc/parallelism.md shows them:
 *
 *   pp_diagram SCHED P M [V]     SCHED: gpipe | 1f1b | interleaved
 *
 * A cell is F<a> / B<a> for micro-batch a's forward / backward through
 * chunk 0, f<a> / b<a> through chunk 1 (interleaved, v 2), "." idle. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/pp.h"
#include "plan/pp_sched.h"

int main(int argc, char **argv)
{
    if (argc < 4)
        return fprintf(stderr, "usage: pp_diagram gpipe|1f1b|interleaved P M [V]\n"), 2;
    int sched = !strcmp(argv[1], "gpipe")         ? LLMT__PP_GPIPE
                : !strcmp(argv[1], "interleaved") ? LLMT__PP_INTERLEAVED
                                                  : LLMT__PP_1F1B;
    int p = atoi(argv[2]), m = atoi(argv[3]), v = argc > 4 ? atoi(argv[4]) : 1;
    if (p < 2 || p > 16 || m < 1 || m > 64 || v < 1 || v > 2)
        return fprintf(stderr, "pp_diagram: P 2..16, M 1..64, V 1..2\n"), 2;
    int per = 2 * m * v, V = p * v, cells = 4 * (m * v + p) * 2;
    llmt__pp_op *ops = malloc((size_t)p * per * sizeof *ops);
    int *fdone = malloc((size_t)V * m * sizeof *fdone),
        *bdone = malloc((size_t)V * m * sizeof *bdone);
    int *next = calloc((size_t)p, sizeof *next), *free_at = calloc((size_t)p, sizeof *free_at);
    char *grid = malloc((size_t)p * cells * 3);
    if (!ops || !fdone || !bdone || !next || !free_at || !grid)
        return 1;
    memset(grid, 0, (size_t)p * cells * 3);
    for (int s = 0; s < p; s++)
        llmt__pp_sched_ops(sched, p, v, m, s, ops + (size_t)s * per);
    for (int i = 0; i < V * m; i++)
        fdone[i] = bdone[i] = -1;
    int end = 0;
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < p; s++)
            while (next[s] < per) {
                const llmt__pp_op *o = &ops[(size_t)s * per + next[s]];
                int vs = o->chunk * p + s, a = o->micro, dep = 0;
                if (!o->bwd && vs > 0)
                    dep = fdone[(vs - 1) * m + a];
                if (o->bwd && vs < V - 1)
                    dep = bdone[(vs + 1) * m + a];
                if (dep < 0)
                    break;
                int t = dep > free_at[s] ? dep : free_at[s];
                if (t >= cells)
                    return 1;
                char *c = grid + ((size_t)s * cells + t) * 3;
                c[0] = o->bwd ? (o->chunk ? 'b' : 'B') : (o->chunk ? 'f' : 'F');
                c[1] = (char)(a < 10 ? '0' + a : 'a' + a - 10);
                free_at[s] = t + 1;
                (o->bwd ? bdone : fdone)[vs * m + a] = t + 1;
                end = t + 1 > end ? t + 1 : end;
                next[s]++;
                progress = 1;
            }
    }
    for (int s = 0; s < p; s++) {
        printf("stage %d |", s);
        for (int t = 0; t < end; t++) {
            const char *c = grid + ((size_t)s * cells + t) * 3;
            printf("%s", c[0] ? c : " .");
        }
        printf("|\n");
    }
    free(ops);
    free(fdone);
    free(bdone);
    free(next);
    free(free_at);
    free(grid);
    return 0;
}
