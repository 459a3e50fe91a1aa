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

/* Disk full: with LLMT_TEST_ENOSPC_AFTER=N in the environment, writes fail
 * with ENOSPC once N bytes have been written (by pwrite) since the variable
 * last changed; unset or negative: no limit. Read at every call so a test
 * can "free space" by changing it. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
static long long budget_used;
static char budget_seen[32];

static int out_of_space(size_t n)
{
    const char *v = getenv("LLMT_TEST_ENOSPC_AFTER");
    if (!v || strlen(v) >= sizeof budget_seen)
        return 0;
    if (strcmp(v, budget_seen)) {
        strcpy(budget_seen, v);
        budget_used = 0;
    }
    long long lim = atoll(v);
    if (lim < 0)
        return 0;
    if (budget_used + (long long)n > lim)
        return 1;
    budget_used += (long long)n;
    return 0;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (out_of_space(n)) {
        errno = ENOSPC;
        return -1;
    }
    pwrite_fn real = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite");
    return real(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    if (out_of_space(n)) {
        errno = ENOSPC;
        return -1;
    }
    pwrite_fn real = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite64");
    return real(fd, buf, n, off);
}
