/* LD_PRELOAD shim: with LLMT_TEST_PWRITE_DELAY_MS=N in the environment,
 * every pwrite, and every libaio io_getevents, sleeps N ms first, so that
 * a checkpoint's data write (buffered, or O_DIRECT through libaio) is
 * still going when a test cancels the save (test_cancel.c). The test
 * reads slow_write_shim_aio_calls to know whether libaio was used. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#undef _FILE_OFFSET_BITS /* define pwrite and pwrite64 separately */
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);

static void delay(void)
{
    const char *v = getenv("LLMT_TEST_PWRITE_DELAY_MS");
    long ms = v ? atol(v) : 0;
    if (ms <= 0)
        return;
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* io_getevents calls seen (read by the test through dlsym) */
int slow_write_shim_aio_calls;

/* libaio's io_getevents (libaio.h not needed: the pointers are passed on) */
typedef int (*getevents_fn)(void *, long, long, void *, void *);
int io_getevents(void *ctx, long min_nr, long nr, void *ev, void *timeout)
{
    __atomic_add_fetch(&slow_write_shim_aio_calls, 1, __ATOMIC_RELAXED);
    delay();
    getevents_fn real = (getevents_fn)dlsym(RTLD_NEXT, "io_getevents");
    return real ? real(ctx, min_nr, nr, ev, timeout) : -38; /* -ENOSYS */
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    delay();
    pwrite_fn real = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite");
    return real(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    delay();
    pwrite_fn real = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite64");
    return real(fd, buf, n, off);
}
