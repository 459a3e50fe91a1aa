/* Strict parsing of numeric command-line values, shared by every
 * subcommand: the whole string must be a number (no "3x", no empty
 * string), inside the flag's range, or the command stops with a message
 * naming the flag and what it wanted. strtoll alone accepts a prefix and
 * silently yields 0 for "abc", which once turned `--steps abc` into
 * "train every step". */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cli.h"

int cli_parse_i64(const char *flag, const char *text, int64_t lo, int64_t hi,
                  int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long x = text ? strtoll(text, &end, 10) : 0;
    if (!text || !*text || errno || end == text || *end || x < lo || x > hi) {
        if (hi == INT64_MAX) /* no upper bound of its own (checked later, if any) */
            fprintf(stderr, "llmtrain: %s needs an integer >= %lld, got '%s'\n", flag,
                    (long long)lo, text ? text : "(nothing)");
        else
            fprintf(stderr, "llmtrain: %s needs an integer in [%lld, %lld], got '%s'\n", flag,
                    (long long)lo, (long long)hi, text ? text : "(nothing)");
        return CLI_USAGE;
    }
    *out = x;
    return CLI_OK;
}

int cli_parse_f64(const char *flag, const char *text, double lo, double hi,
                  double *out)
{
    char *end = NULL;
    errno = 0;
    double x = text ? strtod(text, &end) : 0;
    if (!text || !*text || errno || end == text || *end || !isfinite(x) ||
        !(x >= lo && x <= hi)) {
        fprintf(stderr, "llmtrain: %s needs a number in [%g, %g], got '%s'\n", flag, lo,
                hi, text ? text : "(nothing)");
        return CLI_USAGE;
    }
    *out = x;
    return CLI_OK;
}
