/* What the generated nullargs calls (gen_nullargs.py) use: the valid
 * handles test_nullargs.c makes, zeroed scratch memory and the checks. */
#ifndef LLMT_TEST_NULLARGS_PRELUDE_H
#define LLMT_TEST_NULLARGS_PRELUDE_H

#include <stddef.h>
#include <stdio.h>

#include "llmtrain.h"

extern llmt_context *h_ctx;
extern llmt_spec *h_spec;
extern llmt_plan *h_plan;
extern llmt_model *h_model;
extern llmt_trainer *h_tr;
extern llmt_ckpt *h_ck;
extern llmt_comm *h_comm;
extern llmt_tokenizer *h_tok;
extern llmt_ingest *h_ing;
extern llmt_dedup *h_dd;
extern llmt_shard_writer *h_sw;
extern llmt_dataset *h_ds;
extern llmt_loader *h_ld;

/* Zeroed, 64-byte aligned memory, larger than any call here reads. */
void *scratch(void);
/* A call that must not succeed. */
void expect_fail(const char *what, llmt_status s);
/* A predicate given a NULL argument: it must answer 0 (false). */
void expect_zero(const char *what, int v);
/* A call whose argument `arg` was NULL: refused (unless optional), and
 * when refused as LLMT_ERR_NULL_POINTER, the handle's message names it. */
void expect_null(const char *fn, const char *arg, int optional, llmt_status s,
                 const char *last_error);

/* The generated passes (gen_nullargs.py) and their function count. */
void nullargs_pass1(void);
void nullargs_pass2(void);
void nullargs_pass3(void);
extern int nullargs_functions;

#endif
