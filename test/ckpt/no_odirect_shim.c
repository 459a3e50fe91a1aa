/* LD_PRELOAD shim: open() with O_DIRECT fails with EINVAL, as on filesystems
 * that refuse direct I/O, so the checkpoint writer's buffered fallback runs. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#undef _FILE_OFFSET_BITS /* define open and open64 separately */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>

typedef int (*open_fn)(const char *, int, ...);

static int call(const char *sym, const char *path, int flags, mode_t mode)
{
    if (flags & O_DIRECT) {
        errno = EINVAL;
        return -1;
    }
    open_fn real = (open_fn)dlsym(RTLD_NEXT, sym);
    return real(path, flags, mode);
}

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    return call("open", path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    return call("open64", path, flags, mode);
}
