/* The tiny model the option, error and checkpoint tests make (a GPT-2 of
 * a layer or two, a few dozen units wide), and what those tests do around
 * it: a refusal's message naming what was wrong, and the scratch
 * directory's removal. Header only, like check.h. */
#ifndef LLMT_TEST_SMALL_MODEL_H
#define LLMT_TEST_SMALL_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"

/* llmt_model_config_init's GPT-2 with these fields; the padded
 * vocabulary and the seed where above 0 (else llmt_model_config_init's). */
static inline void small_model_config(llmt_model_config *c, int vocab, int padded, int seq,
                                      int layers, int width, int heads, uint64_t seed)
{
    llmt_model_config_init(c, sizeof *c);
    c->vocab_size = vocab;
    if (padded > 0)
        c->padded_vocab_size = padded;
    c->max_seq_len = seq;
    c->layers = layers;
    c->width = width;
    c->heads = heads;
    if (seed > 0)
        c->seed = seed;
}

/* The model of c in ctx (one check that it was made); NULL on failure. */
static inline llmt_model *small_model_create(llmt_context *ctx, const llmt_model_config *c)
{
    llmt_model *m = NULL;
    CHECK_STATUS(llmt_model_create(ctx, c, &m), LLMT_OK);
    return m;
}

/* msg names needle (one check); where it does not, says so on stderr
 * after `what` (a prefix of the line: "" or the call and ": "). */
static inline void small_model_names(const char *what, const char *msg, const char *needle)
{
    int ok = msg && strstr(msg, needle) != NULL;
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "  %smessage \"%s\" does not name %s\n", what, msg ? msg : "(null)",
                needle);
}

/* Removes the scratch directory dir and all under it; a failure to stderr. */
static inline void small_model_rmtree(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

#endif
