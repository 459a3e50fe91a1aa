/* LD_PRELOAD shim: a disk that fills up under libaio. With
 * LLMT_TEST_AIO_FULL_AT=N, an O_DIRECT write completion that reaches past
 * byte N of its file is reported short (res = bytes below N, as the kernel
 * does when the filesystem fills mid-request: no errno), and pwrite at or
 * past N fails with ENOSPC (what the writer's retry of the remainder then
 * sees on a full disk). llmt_test_aio_short_count tells the test that the
 * short-completion path really ran. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#undef _FILE_OFFSET_BITS /* define pwrite and pwrite64 separately */
#include <dlfcn.h>
#include <errno.h>
#include <libaio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

int llmt_test_aio_short_count;

static long long full_at(void)
{
    const char *v = getenv("LLMT_TEST_AIO_FULL_AT");
    return v ? atoll(v) : -1;
}

typedef int (*getevents_fn)(io_context_t, long, long, struct io_event *, struct timespec *);

int io_getevents(io_context_t ctx, long min_nr, long nr, struct io_event *ev,
                 struct timespec *timeout)
{
    getevents_fn real = (getevents_fn)dlsym(RTLD_NEXT, "io_getevents");
    int got = real(ctx, min_nr, nr, ev, timeout);
    long long lim = full_at();
    for (int i = 0; lim >= 0 && i < got; i++) {
        struct iocb *cb = ev[i].obj;
        long long off = cb->u.c.offset;
        long long res = (long long)ev[i].res;
        if (res > 0 && off + res > lim) {
            ev[i].res = (unsigned long)(off < lim ? lim - off : 0);
            llmt_test_aio_short_count++;
        }
    }
    return got;
}

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);

static ssize_t guarded(const char *sym, int fd, const void *buf, size_t n, off_t off)
{
    long long lim = full_at();
    if (lim >= 0 && (long long)off >= lim && n > 0) {
        errno = ENOSPC;
        return -1;
    }
    pwrite_fn real = (pwrite_fn)dlsym(RTLD_NEXT, sym);
    return real(fd, buf, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    return guarded("pwrite", fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    return guarded("pwrite64", fd, buf, n, off);
}
