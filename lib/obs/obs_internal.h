/* The observer's state, shared by the files of lib/obs only. */
#ifndef LLMT_OBS_INTERNAL_H
#define LLMT_OBS_INTERNAL_H

#include "obs/obs.h"

/* One event of the step being traced (formatted when flushed). */
typedef struct llmt__obs_ev {
    double t0, t1;
    int op; /* >= 0: an op of the table; -1: a span */
    int tid;
    char name[48], cat[16];
    char args[160];
} llmt__obs_ev;

struct llmt__obs {
    /* (lib/obs/devops.c; comm_internal.h and exec/dev.h do not mix) */
    struct llmt__dev_ops *table;       /* handed to the trainer */
    const struct llmt__dev_ops *inner; /* the backend's */
    double op_s[LLMT__OBS_KINDS];
    int untimed; /* set: ops are forwarded untimed (unless tracing) */
    /* trace */
    FILE *tf;
    int32_t pid;
    int tracing, nfile_ev;
    double t_origin; /* unix seconds of ts 0 */
    llmt__obs_ev *ev;
    size_t nev, cap;
    struct llmt__fr_entry *fr; /* scratch for the recorder's entries */
    uint64_t fr_cursor[8];     /* per group slot */
    int fr_seen[8];
    struct llmt__obs_http *http; /* the HTTP endpoint (http.c), or NULL */
    int64_t steps;               /* steps measured (llmt__obs_count_step) */
};

void llmt__obs_trace_op(llmt__obs *o, int op, double t0, double t1);
const char *llmt__obs_op_name(int op);
/* Stop the HTTP endpoint (joins its thread); no-op when not serving. */
void llmt__obs_serve_stop(llmt__obs *o);

#endif
