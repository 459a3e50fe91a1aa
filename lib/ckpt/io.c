/* File I/O of checkpoints: O_DIRECT + libaio writes with a buffered
 * fallback, atomic small files, directory fsync, removal and copies. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <pthread.h>
#include <unistd.h>

#ifdef LLMT_HAVE_AIO
#include <libaio.h>
#endif

#include "ckpt_internal.h"

#define IO_PIECE (8u << 20)   /* bytes per write request */
#define IO_DEPTH 8            /* requests in flight */

int llmt__ckpt_fsync_dir(const char *dir) { return llmt__fsync_dir(dir); }

int llmt__ckpt_mkdirs(const char *path)
{
    char tmp[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] == '/' || tmp[i] == 0) {
            char c = tmp[i];
            tmp[i] = 0;
            if (mkdir(tmp, 0755) && errno != EEXIST)
                return -1;
            tmp[i] = c;
        }
    }
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* A cancelled save (llmt_ckpt_cancel) stops its data file's write
 * between pieces rather than after the whole file (gigabytes). */
static int stopped(const atomic_int *stop, const char *path, uint64_t done, char *err,
                   size_t errlen)
{
    if (!stop || !atomic_load(stop))
        return 0;
    snprintf(err, errlen, "ckpt: write %s stopped at %llu: the save was cancelled", path,
             (unsigned long long)done);
    return 1;
}

static llmt_status pwrite_all(int fd, const uint8_t *buf, uint64_t len, const char *path,
                              const atomic_int *stop, char *err, size_t errlen)
{
    uint64_t done = 0;
    while (done < len) {
        if (stopped(stop, path, done, err, errlen))
            return LLMT_ERR_ABORTED;
        size_t n = len - done > IO_PIECE ? IO_PIECE : (size_t)(len - done);
        ssize_t w = pwrite(fd, buf + done, n, (off_t)done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            /* pwrite returns 0 for a non-empty request only when nothing
             * more fits; name it as the errno would */
            snprintf(err, errlen, "ckpt: write %s at %llu: %s", path,
                     (unsigned long long)done, strerror(w < 0 ? errno : ENOSPC));
            return LLMT_ERR_IO;
        }
        done += (uint64_t)w;
    }
    return LLMT_OK;
}

#ifdef LLMT_HAVE_AIO
/* The remainder of a short O_DIRECT write, at `off`. It may not be aligned
 * for O_DIRECT (EINVAL): then through a second, buffered descriptor. */
static llmt_status write_rest(int fd, const char *path, const uint8_t *p, uint64_t len,
                              uint64_t off, char *err, size_t errlen)
{
    int bfd = -1;
    uint64_t done = 0;
    while (done < len) {
        ssize_t w = pwrite(bfd >= 0 ? bfd : fd, p + done, (size_t)(len - done),
                           (off_t)(off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EINVAL && bfd < 0) {
            bfd = open(path, O_WRONLY | O_CLOEXEC);
            if (bfd >= 0)
                continue;
            errno = EINVAL;
        }
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC; /* pwrite returns 0 only when full */
            snprintf(err, errlen, "ckpt: write %s at %llu: %s", path,
                     (unsigned long long)(off + done), strerror(e));
            if (bfd >= 0)
                close(bfd);
            return LLMT_ERR_IO;
        }
        done += (uint64_t)w;
    }
    if (bfd >= 0 && (fsync(bfd) || close(bfd))) {
        snprintf(err, errlen, "ckpt: fsync %s: %s", path, strerror(errno));
        return LLMT_ERR_IO;
    }
    return LLMT_OK;
}

/* Keep IO_DEPTH writes of IO_PIECE bytes in flight. Returns LLMT_ERR_UNSUPPORTED
 * if the kernel refuses the aio context (caller falls back to pwrite). */
static llmt_status aio_write_all(int fd, const uint8_t *buf, uint64_t len, const char *path,
                                 const atomic_int *stop, char *err, size_t errlen)
{
    io_context_t io = 0;
    if (io_setup(IO_DEPTH, &io) < 0)
        return LLMT_ERR_UNSUPPORTED;
    struct iocb cbs[IO_DEPTH], *ptrs[IO_DEPTH];
    struct io_event ev[IO_DEPTH];
    int free_slots[IO_DEPTH], nfree = IO_DEPTH, inflight = 0;
    for (int i = 0; i < IO_DEPTH; i++)
        free_slots[i] = i;
    uint64_t next = 0;
    llmt_status st = LLMT_OK;
    while ((next < len || inflight) && st == LLMT_OK) {
        int nsub = 0;
        if (stopped(stop, path, next, err, errlen)) {
            st = LLMT_ERR_ABORTED; /* the requests in flight are drained below */
            break;
        }
        while (next < len && nfree) {
            int s = free_slots[--nfree];
            size_t n = len - next > IO_PIECE ? IO_PIECE : (size_t)(len - next);
            io_prep_pwrite(&cbs[s], fd, (void *)(buf + next), n, (long long)next);
            cbs[s].data = (void *)(intptr_t)s;
            ptrs[nsub++] = &cbs[s];
            next += n;
        }
        if (nsub) {
            int r = io_submit(io, nsub, ptrs);
            if (r != nsub) {
                snprintf(err, errlen, "ckpt: io_submit %s: %s", path,
                         strerror(r < 0 ? -r : EIO));
                st = LLMT_ERR_IO;
                if (r > 0)
                    inflight += r;
                break;
            }
            inflight += nsub;
        }
        int got = io_getevents(io, 1, IO_DEPTH, ev, NULL);
        if (got < 0) {
            if (got == -EINTR)
                continue;
            snprintf(err, errlen, "ckpt: io_getevents %s: %s", path, strerror(-got));
            st = LLMT_ERR_IO;
            break;
        }
        for (int i = 0; i < got; i++) {
            struct iocb *cb = ev[i].obj;
            int s = (int)(intptr_t)cb->data;
            long res = (long)ev[i].res;
            if (res < 0) {
                snprintf(err, errlen, "ckpt: write %s at %lld: %s", path,
                         cb->u.c.offset, strerror((int)-res));
                st = LLMT_ERR_IO;
            } else if ((unsigned long)res != cb->u.c.nbytes && st == LLMT_OK) {
                /* A short completion carries no errno: write the rest
                 * synchronously, whose failure says why (ENOSPC, EIO). */
                uint64_t off = (uint64_t)cb->u.c.offset + (uint64_t)res;
                st = write_rest(fd, path, buf + off, cb->u.c.nbytes - (uint64_t)res, off, err,
                                errlen);
            }
            free_slots[nfree++] = s;
            inflight--;
        }
    }
    while (inflight > 0) { /* drain before the buffer may be reused */
        int got = io_getevents(io, 1, IO_DEPTH, ev, NULL);
        if (got < 0 && got != -EINTR)
            break;
        if (got > 0)
            inflight -= got;
    }
    io_destroy(io);
    return st;
}
#endif

llmt_status llmt__ckpt_write_file(const char *path, const void *buf, uint64_t len, int direct,
                                  int *used_direct, const atomic_int *stop, char *err,
                                  size_t errlen)
{
    *used_direct = 0;
    int fd = -1;
    if (direct) {
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
        if (fd >= 0)
            *used_direct = 1;
        else if (errno != EINVAL && errno != EOPNOTSUPP) {
            snprintf(err, errlen, "ckpt: open %s: %s", path, strerror(errno));
            return LLMT_ERR_IO;
        }
    }
    if (fd < 0)
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "ckpt: open %s: %s", path, strerror(errno));
        return LLMT_ERR_IO;
    }
    llmt_status st = LLMT_ERR_UNSUPPORTED;
#ifdef LLMT_HAVE_AIO
    if (*used_direct)
        st = aio_write_all(fd, buf, len, path, stop, err, errlen);
#endif
    if (st == LLMT_ERR_UNSUPPORTED)
        st = pwrite_all(fd, buf, len, path, stop, err, errlen);
    if (st == LLMT_OK && fsync(fd)) {
        snprintf(err, errlen, "ckpt: fsync %s: %s", path, strerror(errno));
        st = LLMT_ERR_IO;
    }
    if (close(fd) && st == LLMT_OK) {
        snprintf(err, errlen, "ckpt: close %s: %s", path, strerror(errno));
        st = LLMT_ERR_IO;
    }
    return st;
}

llmt_status llmt__ckpt_write_tmp(const char *dir, const char *name, const char *text,
                                 size_t len, char *tmp, size_t tmplen, char *err, size_t errlen)
{
    llmt__ckpt_tmp_name(tmp, tmplen, dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "ckpt: open %s: %s", tmp, strerror(errno));
        return LLMT_ERR_IO;
    }
    llmt_status st = pwrite_all(fd, (const uint8_t *)text, len, tmp, NULL, err, errlen);
    if (st == LLMT_OK && fsync(fd)) {
        snprintf(err, errlen, "ckpt: fsync %s: %s", tmp, strerror(errno));
        st = LLMT_ERR_IO;
    }
    if (close(fd) && st == LLMT_OK) {
        snprintf(err, errlen, "ckpt: close %s: %s", tmp, strerror(errno));
        st = LLMT_ERR_IO;
    }
    if (st != LLMT_OK)
        unlink(tmp);
    return st;
}

void llmt__ckpt_tmp_name(char *buf, size_t n, const char *dir, const char *name)
{
    /* unique per process and thread: ranks may run as threads of one process */
    snprintf(buf, n, "%s/.%s.tmp.%ld.%lx", dir, name, (long)getpid(),
             (unsigned long)pthread_self());
}

llmt_status llmt__ckpt_write_atomic(const char *dir, const char *name, const char *text,
                                    size_t len, char *err, size_t errlen)
{
    char tmp[4096], dst[4096];
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    llmt_status st = llmt__ckpt_write_tmp(dir, name, text, len, tmp, sizeof tmp, err, errlen);
    if (st != LLMT_OK)
        return st;
    if (rename(tmp, dst)) {
        snprintf(err, errlen, "ckpt: rename %s: %s", dst, strerror(errno));
        unlink(tmp);
        return LLMT_ERR_IO;
    }
    if (llmt__ckpt_fsync_dir(dir)) {
        snprintf(err, errlen, "ckpt: fsync directory %s: %s", dir, strerror(errno));
        return LLMT_ERR_IO;
    }
    return LLMT_OK;
}

llmt_status llmt__ckpt_read_small(const char *path, size_t max, char **out,
                                  size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "ckpt: open %s: %s", path, strerror(errno));
        return errno == ENOENT ? LLMT_ERR_NOT_FOUND : LLMT_ERR_IO;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
        snprintf(err, errlen, "ckpt: %s: not a regular file of at most %zu bytes",
                 path, max);
        close(fd);
        return LLMT_ERR_FORMAT;
    }
    size_t n = (size_t)st.st_size;
    char *b = malloc(n + 1);
    if (!b) {
        close(fd);
        snprintf(err, errlen, "ckpt: out of memory reading %s", path);
        return LLMT_ERR_OUT_OF_MEMORY;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, b + done, n - done, (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        done += (size_t)r;
    }
    close(fd);
    if (done != n) {
        free(b);
        snprintf(err, errlen, "ckpt: short read of %s", path);
        return LLMT_ERR_IO;
    }
    b[n] = 0;
    *out = b;
    if (len)
        *len = n;
    return LLMT_OK;
}

int llmt__ckpt_rmdir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    char p[4096];
    int rc = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (unlink(p) && errno != ENOENT)
            rc = -1;
    }
    closedir(d);
    if (rmdir(path) && errno != ENOENT)
        rc = -1;
    return rc;
}

llmt_status llmt__ckpt_copy_file(const char *src, const char *dst, char *err,
                                 size_t errlen)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        snprintf(err, errlen, "ckpt: open %s: %s", src, strerror(errno));
        return LLMT_ERR_IO;
    }
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        snprintf(err, errlen, "ckpt: open %s: %s", dst, strerror(errno));
        close(in);
        return LLMT_ERR_IO;
    }
    size_t cap = 4u << 20;
    char *b = malloc(cap);
    llmt_status st = b ? LLMT_OK : LLMT_ERR_OUT_OF_MEMORY;
    while (st == LLMT_OK) {
        ssize_t r = read(in, b, cap);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "ckpt: read %s: %s", src, strerror(errno));
            st = LLMT_ERR_IO;
            break;
        }
        if (r == 0)
            break;
        for (ssize_t off = 0; off < r;) {
            ssize_t w = write(out, b + off, (size_t)(r - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                snprintf(err, errlen, "ckpt: write %s: %s", dst, strerror(errno));
                st = LLMT_ERR_IO;
                break;
            }
            off += w;
        }
    }
    free(b);
    if (st == LLMT_OK && fsync(out)) {
        snprintf(err, errlen, "ckpt: fsync %s: %s", dst, strerror(errno));
        st = LLMT_ERR_IO;
    }
    close(out);
    close(in);
    return st;
}
