/* LD_PRELOAD shim: with LLMT_TEST_PWRITE_DELAY_MS=N in the environment,
 * every pwrite sleeps N ms first, so that a checkpoint's buffered data
 * write is still going when a test cancels the save (test_cancel.c). */
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
