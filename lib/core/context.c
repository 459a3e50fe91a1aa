/* Context: logging sink, allocator hooks, error detail of context calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

static const char *level_name(llmt_log_level level)
{
    static const char *names[] = {"trace", "debug", "info", "warn", "error"};
    return (level >= LLMT_LOG_TRACE && level <= LLMT_LOG_ERROR) ? names[level]
                                                                : "log";
}

/* The default sink: one line per message on stderr (never stdout). */
static void stderr_sink(void *user, llmt_log_level level, const char *module,
                        const char *msg)
{
    (void)user;
    fprintf(stderr, "llmtrain %s [%s]: %s\n", level_name(level),
            module ? module : "core", msg);
}

/* $LLMT_LOG_LEVEL overrides the default level so that a user can turn on
 * debug output of a program they cannot rebuild. */
static llmt_log_level env_log_level(llmt_log_level fallback)
{
    const char *v = getenv("LLMT_LOG_LEVEL");
    static const char *names[] = {"trace", "debug", "info", "warn", "error", "off"};
    if (!v || !*v)
        return fallback;
    for (int i = 0; i <= LLMT_LOG_OFF; i++)
        if (!strcasecmp(v, names[i]))
            return (llmt_log_level)i;
    if (v[0] >= '0' && v[0] <= '5' && v[1] == '\0')
        return (llmt_log_level)(v[0] - '0');
    return fallback;
}

static void *default_alloc(void *user, size_t size, size_t align)
{
    void *p = NULL;
    (void)user;
    if (align < sizeof(void *))
        align = sizeof(void *);
    if (posix_memalign(&p, align, size ? size : 1))
        return NULL;
    return p;
}

static void default_free(void *user, void *ptr, size_t size)
{
    (void)user;
    (void)size;
    free(ptr);
}

static const llmt_allocator default_allocator = {
    sizeof(llmt_allocator), NULL, default_alloc, default_free};

LLMT_API llmt_status llmt_context_opts_init(llmt_context_opts *opts, size_t size)
{
    llmt_context_opts d = {0};
    d.log_level = env_log_level(LLMT_LOG_WARN);
    return llmt__opts_init(opts, size, 0, &d, sizeof d, "llmt_context_opts");
}

LLMT_API llmt_status llmt_context_create(const llmt_context_opts *opts,
                                         llmt_context **out)
{
    if (!out)
        return LLMT_ERR_NULL_POINTER;
    *out = NULL;
    llmt_context_opts o;
    llmt_context_opts_init(&o, sizeof o);
    if (opts) {
        llmt_status s = llmt__opts_copy(NULL, "context", &o, sizeof o, opts);
        if (s != LLMT_OK)
            return s;
        if ((int)o.log_level < LLMT_LOG_TRACE || o.log_level > LLMT_LOG_OFF)
            return LLMT_ERR_INVALID_ARGUMENT;
    }
    llmt_allocator a = default_allocator;
    if (o.allocator) {
        if (o.allocator->struct_size < sizeof(llmt_allocator))
            return LLMT_ERR_STRUCT_SIZE;
        if (!o.allocator->alloc || !o.allocator->free)
            return LLMT_ERR_NULL_POINTER;
        a = *o.allocator;
    }
    llmt_context *ctx = a.alloc(a.user, sizeof *ctx, 64);
    if (!ctx)
        return LLMT_ERR_OUT_OF_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    ctx->allocator = a;
    ctx->log_level = o.log_level;
    ctx->log_fn = o.log_fn ? o.log_fn : stderr_sink;
    ctx->log_user = o.log_fn ? o.log_user : NULL;
    *out = ctx;
    return LLMT_OK;
}

LLMT_API void llmt_context_destroy(llmt_context *ctx)
{
    if (!ctx)
        return;
    llmt_allocator a = ctx->allocator;
    a.free(a.user, ctx, sizeof *ctx);
}

LLMT_API const char *llmt_context_last_error(const llmt_context *ctx)
{
    if (!ctx)
        return "llmt_context_last_error: context is NULL";
    return ctx->err.msg;
}

LLMT_API llmt_status llmt_context_last_status(const llmt_context *ctx)
{
    return ctx ? ctx->err.status : LLMT_ERR_NULL_POINTER;
}

LLMT_API llmt_status llmt_context_set_log_level(llmt_context *ctx,
                                                llmt_log_level level)
{
    if (!ctx)
        return LLMT_ERR_NULL_POINTER;
    if ((int)level < LLMT_LOG_TRACE || level > LLMT_LOG_OFF)
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "context: log level %d is not in 0..5", (int)level);
    ctx->log_level = level;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_log(llmt_context *ctx, llmt_log_level level,
                              const char *module, const char *msg)
{
    if (!ctx)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ctx->err, "log", msg);
    if ((int)level < LLMT_LOG_TRACE || level >= LLMT_LOG_OFF)
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "log: level %d is not in 0..4", (int)level);
    if (level >= ctx->log_level)
        ctx->log_fn(ctx->log_user, level, module ? module : "host", msg);
    return LLMT_OK;
}

void llmt__log(llmt_context *ctx, llmt_log_level level, const char *module,
               const char *fmt, ...)
{
    llmt_log_level threshold = ctx ? ctx->log_level : env_log_level(LLMT_LOG_WARN);
    if (level < threshold || level >= LLMT_LOG_OFF)
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (ctx)
        ctx->log_fn(ctx->log_user, level, module, buf);
    else
        stderr_sink(NULL, level, module, buf);
}

void *llmt__alloc(llmt_context *ctx, size_t size, size_t align)
{
    const llmt_allocator *a = ctx ? &ctx->allocator : &default_allocator;
    if (align < sizeof(void *))
        align = sizeof(void *);
    return a->alloc(a->user, size, align);
}

int llmt__alloc_is_default(const llmt_context *ctx)
{
    return !ctx || (ctx->allocator.alloc == default_alloc &&
                    ctx->allocator.free == default_free);
}

void *llmt__calloc(llmt_context *ctx, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = llmt__alloc(ctx, n * size, 16);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void llmt__free(llmt_context *ctx, void *ptr, size_t size)
{
    const llmt_allocator *a = ctx ? &ctx->allocator : &default_allocator;
    if (ptr)
        a->free(a->user, ptr, size);
}

LLMT_API llmt_status llmt_alloc(llmt_context *ctx, size_t size, size_t align,
                                void **out)
{
    if (!ctx)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ctx->err, "alloc", out);
    *out = NULL;
    if (align && (align & (align - 1)))
        return llmt__err_set(&ctx->err, LLMT_ERR_INVALID_ARGUMENT,
                             "alloc: alignment %zu is not a power of two", align);
    *out = llmt__alloc(ctx, size, align);
    if (!*out)
        return llmt__err_set(&ctx->err, LLMT_ERR_OUT_OF_MEMORY,
                             "alloc: %zu bytes (align %zu) failed", size, align);
    return LLMT_OK;
}

LLMT_API void llmt_free(llmt_context *ctx, void *ptr, size_t size)
{
    if (ctx)
        llmt__free(ctx, ptr, size);
}
