/* A growing string for lists and dumps whose size follows the world
 * (lib/comm's flight recorder text, lib/job's per-rank metrics arrays):
 * a fixed buffer cut them, and a cut list reads as the whole one. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/internal.h"

void llmt__sb_printf(llmt__sbuf *s, const char *fmt, ...)
{
    if (s->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = s->cap - s->len;
        int n = vsnprintf(s->p ? s->p + s->len : NULL, s->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (s->p && (size_t)n < room) {
            s->len += (size_t)n;
            return;
        }
        size_t want = s->len + (size_t)n + 1;
        size_t nc = s->cap ? s->cap : 256;
        while (nc < want)
            nc *= 2;
        char *np = realloc(s->p, nc);
        if (!np) {
            s->oom = 1;
            return;
        }
        s->p = np;
        s->cap = nc;
    }
}
