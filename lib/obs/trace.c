/* Chrome/Perfetto trace-event JSON (the "JSON Array Format" of the Trace
 * Event Format document; ui.perfetto.dev and chrome://tracing open it):
 * one file per rank, pid = the rank, lanes (tid) for the step's phases,
 * the engine's ops and each group's collectives. Complete events ("X")
 * with microsecond ts/dur from the first traced step. A step's events are
 * kept in memory and written sorted by start when it ends, so a file's
 * timestamps never go back; the array is closed when the job ends (a
 * viewer also accepts a file cut short: the format allows a missing
 * closing bracket). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "obs/obs_internal.h"

#define FR_BATCH 256

static llmt__obs_ev *push(llmt__obs *o)
{
    if (o->nev == o->cap) {
        size_t nc = o->cap ? 2 * o->cap : 4096;
        llmt__obs_ev *n = realloc(o->ev, nc * sizeof *n);
        if (!n)
            return NULL;
        o->ev = n;
        o->cap = nc;
    }
    llmt__obs_ev *e = &o->ev[o->nev++];
    memset(e, 0, sizeof *e);
    return e;
}

void llmt__obs_trace_op(llmt__obs *o, int op, double t0, double t1)
{
    llmt__obs_ev *e = push(o);
    if (!e)
        return;
    e->t0 = t0;
    e->t1 = t1;
    e->op = op;
    e->tid = LLMT__TID_OPS;
}

void llmt__obs_trace_span(llmt__obs *o, const char *name, const char *cat, int tid, double t0,
                          double t1, const char *args)
{
    if (!o || !o->tracing)
        return;
    llmt__obs_ev *e = push(o);
    if (!e)
        return;
    e->t0 = t0;
    e->t1 = t1;
    e->op = -1;
    e->tid = tid;
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->cat, sizeof e->cat, "%s", cat);
    if (args)
        snprintf(e->args, sizeof e->args, "%s", args);
}

void llmt__obs_trace_comm(llmt__obs *o, llmt_comm *comm, int slot, const char *group)
{
    if (!o || !comm || slot < 0 || slot >= 8)
        return;
    if (!o->fr && !(o->fr = malloc(FR_BATCH * sizeof *o->fr)))
        return;
    if (!o->fr_seen[slot]) { /* the first call: from what is there now */
        o->fr_seen[slot] = 1;
        uint64_t lost;
        while (llmt__comm_fr_read(comm, &o->fr_cursor[slot], o->fr, FR_BATCH, &lost) > 0) {
        }
    }
    for (;;) {
        uint64_t lost = 0;
        size_t n = llmt__comm_fr_read(comm, &o->fr_cursor[slot], o->fr, FR_BATCH, &lost);
        if (lost && o->tracing)
            llmt__obs_trace_span(o, "recorder overrun", "comm", LLMT__TID_COMM + slot,
                                 llmt__obs_unix_s(), llmt__obs_unix_s(), NULL);
        if (!n)
            break;
        for (size_t i = 0; o->tracing && i < n; i++) {
            const llmt__fr_entry *f = &o->fr[i];
            char args[160];
            snprintf(args, sizeof args,
                     "\"seq\":%llu,\"group\":\"%s\",\"count\":%lld,\"dtype\":\"%s\","
                     "\"size\":%d,\"peer\":%d,\"state\":%d",
                     (unsigned long long)f->seq, group, (long long)f->count,
                     llmt_dtype_name(f->dtype), (int)f->size, (int)f->peer, (int)f->state);
            llmt__obs_trace_span(
                o, llmt__comm_op_name(f->op), "comm", LLMT__TID_COMM + slot,
                f->t_start - LLMT__OBS_EPOCH,
                (f->t_end > f->t_start ? f->t_end : f->t_start) - LLMT__OBS_EPOCH, args);
        }
    }
}

static int by_start(const void *a, const void *b)
{
    const llmt__obs_ev *x = a, *y = b;
    if (x->t0 != y->t0)
        return x->t0 < y->t0 ? -1 : 1;
    /* same start: the longer (enclosing) first */
    return x->t1 > y->t1 ? -1 : x->t1 < y->t1;
}

static void meta(llmt__obs *o, const char *what, int tid, const char *name)
{
    fprintf(o->tf,
            "%s{\"name\":\"%s\",\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":%d,"
            "\"args\":{\"name\":\"%s\"}}",
            o->nfile_ev++ ? ",\n" : "", what, (int)o->pid, tid, name);
}

llmt_status llmt__obs_trace_open(llmt__obs *o, const char *path, int32_t pid, char *err,
                                 size_t errlen)
{
    o->tf = fopen(path, "w");
    if (!o->tf) {
        snprintf(err, errlen, "trace: open %s: %s", path, strerror(errno));
        return LLMT_ERR_IO;
    }
    o->pid = pid;
    o->t_origin = 0;
    fputs("[\n", o->tf);
    char pname[32];
    snprintf(pname, sizeof pname, "rank %d", (int)pid);
    meta(o, "process_name", 0, pname);
    meta(o, "thread_name", LLMT__TID_STEP, "step");
    meta(o, "thread_name", LLMT__TID_OPS, "ops");
    static const char *const groups[] = {"comm dp", "comm tp", "comm pp", "comm cp", "comm ep"};
    for (int g = 0; g < 5; g++)
        meta(o, "thread_name", LLMT__TID_COMM + g, groups[g]);
    return LLMT_OK;
}

int llmt__obs_trace_is_open(const llmt__obs *o)
{
    return o && o->tf;
}

void llmt__obs_trace_on(llmt__obs *o, int on)
{
    if (o)
        o->tracing = on && o->tf;
}

int llmt__obs_tracing(const llmt__obs *o)
{
    return o && o->tracing;
}

llmt_status llmt__obs_trace_flush(llmt__obs *o)
{
    if (!o || !o->tf) {
        if (o)
            o->nev = 0;
        return LLMT_OK;
    }
    qsort(o->ev, o->nev, sizeof *o->ev, by_start);
    if (o->nev && o->t_origin == 0)
        o->t_origin = o->ev[0].t0;
    for (size_t i = 0; i < o->nev; i++) {
        const llmt__obs_ev *e = &o->ev[i];
        double ts = (e->t0 - o->t_origin) * 1e6, dur = (e->t1 - e->t0) * 1e6;
        const char *name = e->op >= 0 ? llmt__obs_op_name(e->op) : e->name;
        const char *cat = e->op >= 0 ? "op" : e->cat;
        fprintf(o->tf,
                "%s{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                "\"pid\":%d,\"tid\":%d%s%s%s}",
                o->nfile_ev++ ? ",\n" : "", name, cat, ts < 0 ? 0 : ts, dur < 0 ? 0 : dur,
                (int)o->pid, e->tid, e->args[0] ? ",\"args\":{" : "", e->args,
                e->args[0] ? "}" : "");
    }
    o->nev = 0;
    return fflush(o->tf) == 0 ? LLMT_OK : LLMT_ERR_IO;
}

llmt_status llmt__obs_trace_close(llmt__obs *o)
{
    if (!o || !o->tf)
        return LLMT_OK;
    llmt__obs_trace_flush(o);
    fputs("\n]\n", o->tf);
    int bad = fclose(o->tf) != 0;
    o->tf = NULL;
    o->tracing = 0;
    return bad ? LLMT_ERR_IO : LLMT_OK;
}
