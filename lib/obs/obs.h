/* Observability (doc/observability.md): what a step's time went to, as
 * measured inside one rank. The engine's ops are timed by a forwarding op
 * table (devops.c) the trainer is created on: the engine (lib/train)
 * does not know it is observed. Collectives come from the communicators'
 * flight recorders (every one with its sequence number); their exposed
 * time from the communicator's own count of the time callers blocked.
 * A trace (trace.c) is a Chrome/Perfetto trace-event JSON per rank, kept
 * in memory for a step and written when the step ends. */
#ifndef LLMT_OBS_OBS_H
#define LLMT_OBS_OBS_H

#include <stdint.h>
#include <stdio.h>

#include "core/internal.h"

/* What an op's time counts as in the split. */
enum { LLMT__OBS_COMPUTE = 0, LLMT__OBS_OPTIMIZER = 1, LLMT__OBS_KINDS = 2 };

typedef struct llmt__obs llmt__obs;
struct llmt__dev_ops; /* exec/dev.h */

llmt_status llmt__obs_create(llmt__obs **out);
/* After the trainer it observes is destroyed. NULL is a no-op. */
void llmt__obs_destroy(llmt__obs *o);

/* A trainer whose engine runs on the timed table around `table` (NULL:
 * the backend that opts->device selects; llmt_job passes the host
 * emulation's for train.device "emulated"). When the backend's table has
 * an op this file does not know, the trainer runs on the plain table and
 * *timed is 0 (the split then counts the engine's time as unaccounted). */
llmt_status llmt__obs_trainer_create(llmt__obs *o, llmt_model *model,
                                     const llmt_trainer_opts *opts,
                                     const struct llmt__dev_ops *table, llmt_trainer **out,
                                     int *timed);
/* The trainer makes its engine again on the same table when a group is
 * attached after creation (llmt_trainer_set_tp_comm): the caller brackets
 * that call with these, on the thread that makes it, so the table's
 * create finds its observer. */
void llmt__obs_remake_begin(llmt__obs *o);
void llmt__obs_remake_end(void);
/* on 0: forward the ops without reading the clock (but while tracing). */
void llmt__obs_op_timing(llmt__obs *o, int on);
/* Seconds spent in the ops so far, by kind (monotonic). */
void llmt__obs_op_seconds(const llmt__obs *o, double out[LLMT__OBS_KINDS]);
/* The ops' wall time is host time: on an asynchronous device it lands on
 * the op that waits (sync, d2h). */

/* Peak fp32 GEMM FLOP/s of the CPU engine with its current thread count:
 * the best of a few square GEMMs (calib.c). *seconds: how long it took. */
double llmt__obs_calibrate_cpu(int n, double *seconds);

/* ---- trace (trace.c) */
/* Start writing path (truncated) for process `pid` (the rank). */
llmt_status llmt__obs_trace_open(llmt__obs *o, const char *path, int32_t pid, char *err,
                                 size_t errlen);
int llmt__obs_trace_is_open(const llmt__obs *o);
/* Record ops (and spans) while on. */
void llmt__obs_trace_on(llmt__obs *o, int on);
int llmt__obs_tracing(const llmt__obs *o);
/* Thread lanes of a rank's trace. */
enum { LLMT__TID_STEP = 1, LLMT__TID_OPS = 2, LLMT__TID_COMM = 3 };
/* One complete event ("X"); t0, t1 in CLOCK_REALTIME seconds; args: JSON
 * object members ("\"k\":1") or NULL. Copied. */
void llmt__obs_trace_span(llmt__obs *o, const char *name, const char *cat, int tid, double t0,
                          double t1, const char *args);
/* The collectives of `comm` that finished since the last call, one event
 * each with its sequence number, on lane tid + slot (slot: the group). */
void llmt__obs_trace_comm(llmt__obs *o, struct llmt_comm *comm, int slot, const char *group);
/* Sort the step's events by time and append them to the file. */
llmt_status llmt__obs_trace_flush(llmt__obs *o);
/* Close the JSON array. */
llmt_status llmt__obs_trace_close(llmt__obs *o);

/* Unix time minus LLMT__OBS_EPOCH: nanosecond resolution in a double
 * (unix seconds themselves keep only a quarter of a microsecond). */
#define LLMT__OBS_EPOCH 1700000000
double llmt__obs_unix_s(void);

/* A communicator's exposed seconds so far (lib/comm/stats.c); 0 for NULL. */
double llmt__comm_exposed_s(const struct llmt_comm *c);

/* ---- Prometheus textfile (prom.c); m may be NULL. */
/* One more step measured by this observer: the steps this process ran
 * (llmtrain_steps_total, a counter: it never goes back when a rollback or
 * a resume repeats step numbers, which llmtrain_step shows). Returns the
 * new count. */
int64_t llmt__obs_count_step(llmt__obs *o);
llmt_status llmt__obs_prom_write(const char *path, int32_t rank, int64_t steps,
                                 const llmt_job_perf *p, const llmt_job_metrics *m, char *err,
                                 size_t errlen);
/* The exposition text itself; steps: llmt__obs_count_step's count; p
 * NULL: before the first step (the step counter only). */
void llmt__obs_prom_text(FILE *f, int32_t rank, int64_t steps, const llmt_job_perf *p,
                         const llmt_job_metrics *m);

/* ---- the HTTP endpoint (http.c): GET /metrics on a plain socket. */
/* Listen on host (an IPv4 address) and port (0: any free one; *bound gets
 * the port), serving `rank`'s text from a thread of its own until
 * llmt__obs_destroy. One endpoint per observer. */
llmt_status llmt__obs_serve(llmt__obs *o, const char *host, int port, int32_t rank, int *bound,
                            char *err, size_t errlen);
/* The text served from now on (the same as the textfile's); no-op when
 * not serving. */
void llmt__obs_serve_update(llmt__obs *o, const llmt_job_perf *p, const llmt_job_metrics *m);

#endif
