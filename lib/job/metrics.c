/* metrics.jsonl: one JSON object a line, appended and never rewritten.
 * A resumed run (or a rollback) writes the steps after its checkpoint
 * again; readers take the latest line per step (the plot does). Losing
 * lines of a run that was interrupted and resumed hides exactly the
 * evidence someone debugging it needs, so nothing is ever truncated. */
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "job/job.h"

llmt_status llmt__job_metrics_open(llmt_job *j)
{
    j->jsonl = fopen(j->jsonl_path, "a");
    if (!j->jsonl)
        return llmt__err_set(&j->err, LLMT_ERR_IO, "metrics.jsonl: open %s: %s", j->jsonl_path,
                             strerror(errno));
    return LLMT_OK;
}

void llmt__job_metrics_line(llmt_job *j, const char *fmt, ...)
{
    if (!j->jsonl)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(j->jsonl, fmt, ap);
    va_end(ap);
    fputc('\n', j->jsonl);
    fflush(j->jsonl);
}
