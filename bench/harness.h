/* The benchmark harness: warm-up, repeats, min/median/max, JSON output.
 * Benchmarks link only the public ABI (llmtrain.h), like any host program.
 *
 *   bench_ctx b;
 *   if (bench_init(&b, "suite-name", argc, argv)) return 2;
 *   bench_run(&b, "case", fn, arg, items_per_call, "tokens");
 *   return bench_finish(&b);
 *
 * Flags every benchmark accepts: --json FILE, --warmup N, --repeats N,
 * --filter SUBSTRING, --quick (fewer repeats for smoke runs). */
#ifndef LLMT_BENCH_HARNESS_H
#define LLMT_BENCH_HARNESS_H

#include <stddef.h>
#include <stdio.h>

#define BENCH_MAX_RESULTS 256

typedef void (*bench_fn)(void *arg);

typedef struct bench_result {
    char name[96];
    int repeats;
    double min_s, median_s, max_s, mean_s;
    double items;      /* work per call (tokens, bytes, flops); 0 if none */
    char unit[24];     /* what `items` counts */
} bench_result;

typedef struct bench_ctx {
    const char *suite;
    const char *json_path;
    const char *filter;
    int warmup, repeats, quick;
    int count;
    bench_result results[BENCH_MAX_RESULTS];
} bench_ctx;

/* Parse the common flags; returns 0, or 2 on a usage error. */
int bench_init(bench_ctx *b, const char *suite, int argc, char **argv);
/* 1 if the case is selected by --filter. */
int bench_selected(const bench_ctx *b, const char *name);
/* Time fn(arg): warm-up calls, then `repeats` timed calls. Prints one line. */
const bench_result *bench_run(bench_ctx *b, const char *name, bench_fn fn,
                              void *arg, double items, const char *unit);
/* Record a measurement taken elsewhere (e.g. by a device timer). */
const bench_result *bench_record(bench_ctx *b, const char *name,
                                 const double *seconds, int n, double items,
                                 const char *unit);
/* Write the JSON file (if --json) and return 0. */
int bench_finish(bench_ctx *b);
/* Monotonic seconds. */
double bench_now(void);
/* xorshift64: a cheap reproducible stream (random token batches); state
 * must start nonzero. */
unsigned bench_rand(unsigned long long *state);

#define BENCH_MAX_RANKS 16
/* Runs fn on n rank arguments (args, stride bytes apart) as threads and
 * waits for them. With comm, the ranks share an in-process communicator
 * of n: rank r's handle is stored at comm_off in its argument before the
 * threads start, and destroyed after they end. Returns 0, or 1 when the
 * ranks could not all be started (n out of 1..BENCH_MAX_RANKS, no
 * communicator, no thread). */
int bench_ranks(void *args, size_t stride, int n, int comm, size_t comm_off,
                void *(*fn)(void *));

#endif
