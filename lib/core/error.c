/* Error detail on handles: formatted once, read back by *_last_error. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* The calling thread's last failure (llmt_last_error): every message a
 * handle records goes here too, so a binding reads one place whatever
 * handle (model, context, trainer) the detail of a call was put on. */
static _Thread_local llmt_err last_failure;

llmt_status llmt__err_setv(llmt_err *e, llmt_status status, const char *fmt,
                           va_list ap)
{
    /* A poll that finds work in flight is not a failure. */
    if (status == LLMT_OK || status == LLMT_ERR_IN_PROGRESS) {
        if (e) {
            e->status = status;
            vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        }
        return status;
    }
    /* Formatted once, then copied: an argument may be e->msg itself. */
    char msg[LLMT_ERR_MSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    last_failure.status = status;
    memcpy(last_failure.msg, msg, sizeof msg);
    if (e) {
        e->status = status;
        memcpy(e->msg, msg, sizeof msg);
    }
    return status;
}

LLMT_API const char *llmt_last_error(void)
{
    return last_failure.msg;
}

LLMT_API llmt_status llmt_last_error_status(void)
{
    return last_failure.status;
}

LLMT_API void llmt_last_error_clear(void)
{
    last_failure.status = LLMT_OK;
    last_failure.msg[0] = '\0';
}

llmt_status llmt__err_set(llmt_err *e, llmt_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    llmt__err_setv(e, status, fmt, ap);
    va_end(ap);
    return status;
}

void llmt__err_clear(llmt_err *e)
{
    if (e) {
        e->status = LLMT_OK;
        e->msg[0] = '\0';
    }
}

llmt_status llmt__err_forward(llmt_err *e, const llmt_err *from,
                              const char *prefix)
{
    if (!from)
        return llmt__err_set(e, LLMT_ERR_INTERNAL, "%s: unknown error",
                             prefix ? prefix : "llmtrain");
    if (!prefix || !*prefix)
        return llmt__err_set(e, from->status, "%s", from->msg);
    return llmt__err_set(e, from->status, "%s: %s", prefix, from->msg);
}

llmt_status llmt__check_struct_size(llmt_err *e, const char *what,
                                    size_t given, size_t minimum)
{
    if (given < minimum)
        return llmt__err_set(e, LLMT_ERR_STRUCT_SIZE,
                             "%s: struct_size %zu is smaller than the %zu bytes "
                             "this library requires (pass sizeof the struct)",
                             what, given, minimum);
    return LLMT_OK;
}

llmt_status llmt__opts_init(void *opts, size_t size, size_t minimum, const void *defaults,
                            size_t defaults_size, const char *what)
{
    if (!opts)
        return LLMT_ERR_NULL_POINTER;
    if (minimum < sizeof(size_t))
        minimum = sizeof(size_t);
    llmt_status s = llmt__check_struct_size(NULL, what, size, minimum);
    if (s != LLMT_OK)
        return s;
    memset(opts, 0, size);
    memcpy(opts, defaults, size < defaults_size ? size : defaults_size);
    memcpy(opts, &size, sizeof size);
    return LLMT_OK;
}

llmt_status llmt__opts_copy(llmt_err *e, const char *what, void *dst,
                            size_t dst_size, const void *src)
{
    size_t given;
    memcpy(&given, src, sizeof given);
    if (given < sizeof(size_t))
        return llmt__err_set(e, LLMT_ERR_STRUCT_SIZE,
                             "%s: struct_size is %zu; call the _opts_init "
                             "function or set it to sizeof the struct",
                             what, given);
    if (given > dst_size) {
        const unsigned char *extra = (const unsigned char *)src + dst_size;
        for (size_t i = 0; i < given - dst_size; i++)
            if (extra[i])
                return llmt__err_set(e, LLMT_ERR_STRUCT_SIZE,
                                     "%s: the caller's struct (%zu bytes) sets "
                                     "fields this library (%zu bytes) does not "
                                     "know; upgrade libllmtrain",
                                     what, given, dst_size);
        given = dst_size;
    }
    memcpy((unsigned char *)dst + sizeof(size_t),
           (const unsigned char *)src + sizeof(size_t), given - sizeof(size_t));
    return LLMT_OK;
}
