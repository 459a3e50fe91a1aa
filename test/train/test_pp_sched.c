/* The pipeline schedules as op lists (lib/plan/pp_sched.c), without a
 * model: for GPipe, 1F1B and interleaved 1F1B over p stages, v chunks and
 * m micro-batches,
 *   - every stage runs each (chunk, micro-batch) forward once and its
 *     backward once, later; each chunk's backwards in micro-batch order
 *     (the single-rank accumulation order the engine's equality rests on);
 *   - no two micro-batch chunks in flight share an activation set, and the
 *     sets a stage needs are the schedule's in-flight count: m (GPipe),
 *     min(m, p - s) (1F1B), 2 (p - s - 1) + (v - 1) p + 1 (interleaved, all
 *     m v when m == p), the memory the planner models;
 *   - on an ideal machine (a chunk's forward 1/v, its backward 2/v, free
 *     messages) the lists neither deadlock nor receive a message out of
 *     its channel's order, and stage 0's idle share is exactly the
 *     bubble formula: (p - 1) / (m + p - 1), interleaved (p - 1) / (v m +
 *     p - 1);
 *   - the refusals name the key: m < p and m not a multiple of p for
 *     interleaving, virtual stages with another schedule. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/pp.h"
#include "plan/pp_sched.h"

/* CHECK with a message saying which case failed */
#define CHECK_MSG(cond, ...)                                              \
    do {                                                                  \
        check_count++;                                                    \
        if (!(cond)) {                                                    \
            check_failures++;                                             \
            fprintf(stderr, "%s:%d: CHECK failed: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

static const char *names[] = {"1f1b", "gpipe", "interleaved"};

static int expected_sets(int sched, int p, int v, int m, int s)
{
    if (sched == LLMT__PP_GPIPE)
        return m;
    if (sched == LLMT__PP_1F1B)
        return m < p - s ? m : p - s;
    if (m == p)
        return m * v;
    int w = 2 * (p - s - 1) + (v - 1) * p;
    return w + 1 < m * v ? w + 1 : m * v;
}

static void one(int sched, int p, int v, int m)
{
    int per = 2 * m * v;
    llmt__pp_op *ops = malloc((size_t)per * sizeof *ops);
    int *fseen = calloc((size_t)m * v, sizeof *fseen), *lastb = malloc(v * sizeof *lastb);
    int *owner = malloc((size_t)m * v * sizeof *owner);
    CHECK(ops && fseen && lastb && owner);
    for (int s = 0; s < p; s++) {
        int sets = llmt__pp_sched_ops(sched, p, v, m, s, ops);
        CHECK_MSG(sets == expected_sets(sched, p, v, m, s),
                  "%s p %d v %d m %d stage %d: %d sets, expected %d", names[sched], p, v, m, s,
                  sets, expected_sets(sched, p, v, m, s));
        memset(fseen, 0, (size_t)m * v * sizeof *fseen);
        for (int c = 0; c < v; c++)
            lastb[c] = -1;
        for (int k = 0; k < m * v; k++)
            owner[k] = -1;
        int nf = 0, nb = 0;
        for (int i = 0; i < per; i++) {
            const llmt__pp_op *o = &ops[i];
            CHECK(o->chunk >= 0 && o->chunk < v && o->micro >= 0 && o->micro < m);
            CHECK(o->slot >= 0 && o->slot < sets);
            int u = o->chunk * m + o->micro;
            if (!o->bwd) {
                CHECK_MSG(fseen[u] == 0, "%s p %d v %d m %d stage %d: forward twice",
                          names[sched], p, v, m, s);
                fseen[u] = 1;
                for (int k = 0; k < m * v; k++) /* its set is free */
                    CHECK(owner[k] != o->slot);
                owner[u] = o->slot;
                nf++;
            } else {
                CHECK_MSG(fseen[u] == 1, "%s p %d v %d m %d stage %d: backward before forward",
                          names[sched], p, v, m, s);
                fseen[u] = 2;
                CHECK(owner[u] == o->slot);
                owner[u] = -1;
                CHECK_MSG(o->micro == lastb[o->chunk] + 1,
                          "%s p %d v %d m %d stage %d: chunk %d backward of micro-batch %d "
                          "after %d",
                          names[sched], p, v, m, s, o->chunk, o->micro, lastb[o->chunk]);
                lastb[o->chunk] = o->micro;
                nb++;
            }
        }
        CHECK(nf == m * v && nb == m * v);
    }
    double t[16], idle[16];
    CHECK_MSG(llmt__pp_sched_sim(sched, p, v, m, 1.0 / v, 2.0 / v, t, idle) == 0,
              "%s p %d v %d m %d: the lists deadlock or break a channel's order", names[sched],
              p, v, m);
    double want = (double)(p - 1) / ((sched == LLMT__PP_INTERLEAVED ? v : 1) * m + p - 1);
    double got = idle[0] / t[0];
    CHECK_MSG(fabs(got - want) < 1e-12, "%s p %d v %d m %d: stage 0 bubble %.6f, formula %.6f",
              names[sched], p, v, m, got, want);
    free(ops);
    free(fseen);
    free(lastb);
    free(owner);
}

int main(void)
{
    static const int ps[] = {2, 3, 4, 8};
    int cases = 0;
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        int p = ps[i];
        for (int mult = 1; mult <= 4; mult++) {
            int m = mult * p;
            one(LLMT__PP_GPIPE, p, 1, m);
            one(LLMT__PP_1F1B, p, 1, m);
            for (int v = 1; v <= 4; v++, cases++)
                one(LLMT__PP_INTERLEAVED, p, v, m);
            cases += 2;
        }
        /* fewer micro-batches than stages: GPipe and 1F1B run them */
        one(LLMT__PP_GPIPE, p, 1, 1);
        one(LLMT__PP_1F1B, p, 1, p - 1);
        cases += 2;
    }
    llmt_err e = {0};
    CHECK(llmt__pp_sched_check(&e, LLMT__PP_INTERLEAVED, 4, 2, 3) != LLMT_OK);
    CHECK_MSG(strstr(e.msg, "train.grad_accum") != NULL, "%s", e.msg);
    CHECK(llmt__pp_sched_check(&e, LLMT__PP_INTERLEAVED, 4, 2, 6) != LLMT_OK);
    CHECK_MSG(strstr(e.msg, "multiple of parallelism.pp") != NULL, "%s", e.msg);
    CHECK(llmt__pp_sched_check(&e, LLMT__PP_1F1B, 4, 2, 8) != LLMT_OK);
    CHECK_MSG(strstr(e.msg, "virtual_stages") != NULL, "%s", e.msg);
    CHECK(llmt__pp_sched_check(&e, LLMT__PP_INTERLEAVED, 4, 2, 8) == LLMT_OK);
    CHECK(llmt__pp_sched_check(&e, LLMT__PP_1F1B, 4, 1, 2) == LLMT_OK);
    printf("pp-sched: %d schedules checked\n", cases);
    return check_exit("pp-sched");
}
