/* Every llmt_X_opts_init (and the model config, batch and step metrics
 * inits) keeps one contract (doc/abi-conventions.md,
 * "Option structs"): NULL and a size below struct_size are refused; a
 * newer caller's larger struct gets its unknown tail zeroed (so the
 * library accepts it) and struct_size set to the caller's size; an older
 * caller's smaller struct is written only up to its size, with the same
 * defaults as a full one. */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"

typedef llmt_status (*init_fn)(void *opts, size_t size);

/* A typed call through each function, no cast of function pointers. */
#define WRAP(T, F)                              \
    static llmt_status w_##F(void *p, size_t n) \
    {                                           \
        return F((T *)p, n);                    \
    }
WRAP(llmt_context_opts, llmt_context_opts_init)
WRAP(llmt_plan_auto_opts, llmt_plan_auto_opts_init)
WRAP(llmt_goodput_opts, llmt_goodput_opts_init)
WRAP(llmt_trainer_opts, llmt_trainer_opts_init)
WRAP(llmt_ckpt_opts, llmt_ckpt_opts_init)
WRAP(llmt_ckpt_llmc_opts, llmt_ckpt_llmc_opts_init)
WRAP(llmt_comm_opts, llmt_comm_opts_init)
WRAP(llmt_dp_opts, llmt_dp_opts_init)
WRAP(llmt_pp_opts, llmt_pp_opts_init)
WRAP(llmt_cp_opts, llmt_cp_opts_init)
WRAP(llmt_ingest_opts, llmt_ingest_opts_init)
WRAP(llmt_data_filter_opts, llmt_data_filter_opts_init)
WRAP(llmt_dedup_opts, llmt_dedup_opts_init)
WRAP(llmt_data_prepare_opts, llmt_data_prepare_opts_init)
WRAP(llmt_loader_opts, llmt_loader_opts_init)
WRAP(llmt_job_opts, llmt_job_opts_init)
WRAP(llmt_job_obs_opts, llmt_job_obs_opts_init)
WRAP(llmt_model_config, llmt_model_config_init)
WRAP(llmt_batch, llmt_batch_init)
WRAP(llmt_step_metrics, llmt_step_metrics_init)

static const struct {
    const char *name;
    init_fn fn;
    size_t size;
} inits[] = {
#define ROW(T, F)            \
    {                        \
#F, w_##F, sizeof(T) \
    }
    ROW(llmt_context_opts, llmt_context_opts_init),
    ROW(llmt_plan_auto_opts, llmt_plan_auto_opts_init),
    ROW(llmt_goodput_opts, llmt_goodput_opts_init),
    ROW(llmt_trainer_opts, llmt_trainer_opts_init),
    ROW(llmt_ckpt_opts, llmt_ckpt_opts_init),
    ROW(llmt_ckpt_llmc_opts, llmt_ckpt_llmc_opts_init),
    ROW(llmt_comm_opts, llmt_comm_opts_init),
    ROW(llmt_dp_opts, llmt_dp_opts_init),
    ROW(llmt_pp_opts, llmt_pp_opts_init),
    ROW(llmt_cp_opts, llmt_cp_opts_init),
    ROW(llmt_ingest_opts, llmt_ingest_opts_init),
    ROW(llmt_data_filter_opts, llmt_data_filter_opts_init),
    ROW(llmt_dedup_opts, llmt_dedup_opts_init),
    ROW(llmt_data_prepare_opts, llmt_data_prepare_opts_init),
    ROW(llmt_loader_opts, llmt_loader_opts_init),
    ROW(llmt_job_opts, llmt_job_opts_init),
    ROW(llmt_job_obs_opts, llmt_job_obs_opts_init),
    ROW(llmt_model_config, llmt_model_config_init),
    ROW(llmt_batch, llmt_batch_init),
    ROW(llmt_step_metrics, llmt_step_metrics_init),
#undef ROW
};

enum { TAIL = 40, JUNK = 0xA5 };

/* One failed expectation, named. */
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    check_count++;
    check_failures++;
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
#define FAIL(...) fail(__VA_ARGS__)

int main(void)
{
    for (size_t i = 0; i < sizeof inits / sizeof inits[0]; i++) {
        const char *name = inits[i].name;
        size_t n = inits[i].size;
        unsigned char *full = malloc(n + TAIL), *big = malloc(n + TAIL);
        CHECK(full && big);

        CHECK_STATUS(inits[i].fn(NULL, n), LLMT_ERR_NULL_POINTER);
        CHECK_STATUS(inits[i].fn(big, sizeof(size_t) - 1), LLMT_ERR_STRUCT_SIZE);

        /* this library's own size: struct_size = sizeof, nothing past it */
        memset(full, JUNK, n + TAIL);
        CHECK_STATUS(inits[i].fn(full, n), LLMT_OK);
        size_t got;
        memcpy(&got, full, sizeof got);
        if (got != n)
            FAIL("%s: struct_size %zu after init with %zu", name, got, n);
        for (size_t b = n; b < n + TAIL; b++)
            if (full[b] != JUNK)
                FAIL("%s: wrote byte %zu past the caller's %zu", name, b, n);

        /* a newer caller's larger struct: same defaults, tail zero, its
         * own size recorded (llmt__opts_copy then accepts it) */
        memset(big, JUNK, n + TAIL);
        CHECK_STATUS(inits[i].fn(big, n + TAIL), LLMT_OK);
        memcpy(&got, big, sizeof got);
        if (got != n + TAIL)
            FAIL("%s: struct_size %zu after init with %zu", name, got, n + TAIL);
        if (memcmp(big + sizeof(size_t), full + sizeof(size_t), n - sizeof(size_t)) != 0)
            FAIL("%s: defaults differ between sizes %zu and %zu", name, n, n + TAIL);
        for (size_t b = n; b < n + TAIL; b++)
            if (big[b] != 0)
                FAIL("%s: byte %zu of a larger caller's struct is %#x, not 0", name, b, big[b]);

        /* an older caller's struct one field shorter, where the library
         * allows it: written only up to its size */
        size_t older = n - sizeof(uint32_t);
        memset(big, JUNK, n + TAIL);
        llmt_status s = inits[i].fn(big, older);
        if (s == LLMT_OK) {
            for (size_t b = older; b < n + TAIL; b++)
                if (big[b] != JUNK)
                    FAIL("%s: wrote byte %zu past an older caller's %zu", name, b, older);
        } else if (s != LLMT_ERR_STRUCT_SIZE) {
            FAIL("%s: size %zu gave status %d", name, older, (int)s);
        }
        free(full);
        free(big);
    }
    check_count++; /* the table ran */
    return check_exit("opts-init");
}
