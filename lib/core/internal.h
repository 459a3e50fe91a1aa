/* Internal helpers shared by every module of lib/. Not installed. */
#ifndef LLMT_CORE_INTERNAL_H
#define LLMT_CORE_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "llmtrain.h"

/* Internal symbols use the llmt__ prefix; with -fvisibility=hidden and the
 * version script none of them is exported. */

#if defined(__GNUC__)
#define LLMT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define LLMT_PRINTF(f, a)
#endif

#define LLMT_ERR_MSG_MAX 1024

/* The error detail every handle carries. */
typedef struct llmt_err {
    llmt_status status;
    char msg[LLMT_ERR_MSG_MAX];
} llmt_err;

/* Record a failure on `e` (may be NULL) and return `status`, so callers write
 * `return llmt__err_set(&h->err, LLMT_ERR_IO, "ckpt: open %s: %s", ...)`. */
llmt_status llmt__err_set(llmt_err *e, llmt_status status, const char *fmt, ...)
    LLMT_PRINTF(3, 4);
llmt_status llmt__err_setv(llmt_err *e, llmt_status status, const char *fmt,
                           va_list ap);
void llmt__err_clear(llmt_err *e);

/* Check a required pointer argument of a public call: when `arg` is NULL,
 * record "<what>: <arg> is NULL" on `e` and return LLMT_ERR_NULL_POINTER from
 * the enclosing function. `what` names the call ("dataset: read"); `e` is the
 * handle's (or, for creation calls, the context's) error, NULL when there is
 * none. Check the handle itself first with a plain return: a NULL handle has
 * nowhere to record a message. */
#define LLMT__NONNULL(e, what, arg)                                            \
    do {                                                                       \
        if (!(arg))                                                            \
            return llmt__err_set((e), LLMT_ERR_NULL_POINTER, "%s: %s is NULL", \
                                 (what), #arg);                                \
    } while (0)
/* Copy another handle's failure into `e`, prefixing it with `prefix`. */
llmt_status llmt__err_forward(llmt_err *e, const llmt_err *from,
                              const char *prefix);

struct llmt_context {
    llmt_err err;
    llmt_log_level log_level;
    llmt_log_fn log_fn;
    void *log_user;
    llmt_allocator allocator;
};

/* Log through ctx (NULL ctx: default stderr sink at WARN). */
void llmt__log(llmt_context *ctx, llmt_log_level level, const char *module,
               const char *fmt, ...) LLMT_PRINTF(4, 5);

/* Host allocation through the context's hooks; NULL ctx uses the default. */
void *llmt__alloc(llmt_context *ctx, size_t size, size_t align);
void *llmt__calloc(llmt_context *ctx, size_t n, size_t size);
void llmt__free(llmt_context *ctx, void *ptr, size_t size);
/* 1 when ctx allocates with the library's own aligned malloc (no user
 * llmt_allocator): its memory is then ordinary private anonymous memory,
 * whose pages may be handed back to the OS (madvise) without asking. */
int llmt__alloc_is_default(const llmt_context *ctx);

/* Copy a caller's option struct into the library's own, versioned by
 * struct_size: the first min(caller, ours) bytes are copied over `dst`, which
 * already holds defaults. A caller struct larger than ours is accepted only
 * if the bytes we do not know are zero. */
llmt_status llmt__opts_copy(llmt_err *e, const char *what, void *dst,
                            size_t dst_size, const void *src);
/* The body of every llmt_X_opts_init: refuse a NULL struct or a size
 * below `minimum` (naming `what`), zero the caller's whole struct (so a
 * newer caller's fields this library does not know read zero, which
 * llmt__opts_copy accepts), copy as much of `defaults` as it holds and set
 * struct_size to the caller's size. */
llmt_status llmt__opts_init(void *opts, size_t size, size_t minimum, const void *defaults,
                            size_t defaults_size, const char *what);
/* Check a struct_size argument of an _init function. */
llmt_status llmt__check_struct_size(llmt_err *e, const char *what,
                                    size_t given, size_t minimum);

/* fsync a directory (EINVAL/ENOTSUP from filesystems that refuse it count
 * as success), or the directory holding `path`; 0 or -1 with errno. */
int llmt__fsync_dir(const char *dir);
int llmt__fsync_parent(const char *path);

/* A growing string (sbuf.c): zero-initialise it, append with
 * llmt__sb_printf (the first growth asks 256 bytes, then doubles), free
 * p. oom is set, and sticks, when it could not grow: p then holds what
 * fitted before, and a caller whose text must be whole writes none. */
typedef struct llmt__sbuf {
    char *p;
    size_t len, cap;
    int oom;
} llmt__sbuf;
void llmt__sb_printf(llmt__sbuf *s, const char *fmt, ...) LLMT_PRINTF(2, 3);

/* CUDA glue, implemented in cuda/core when the build has CUDA. */
#ifdef LLMT_HAVE_CUDA
llmt_status llmt__cuda_device_count(int32_t *out, char *err, size_t errlen);
#endif

#endif
