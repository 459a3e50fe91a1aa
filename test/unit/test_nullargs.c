/* Every exported function with NULL and out-of-range arguments
 * (doc/abi-conventions.md, "Status codes and errors"): the calls are
 * generated from include/llmtrain.h by gen_nullargs.py (see there for
 * the three passes); this file makes the valid handles they run on and
 * checks what comes back. Nothing may crash (ASan/UBSan in CI); a NULL
 * handle is refused; a NULL required argument on a valid handle is
 * refused, LLMT_ERR_NULL_POINTER naming it; an enum out of range is
 * refused. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nullargs_prelude.h"

llmt_context *h_ctx;
llmt_spec *h_spec;
llmt_plan *h_plan;
llmt_model *h_model;
llmt_trainer *h_tr;
llmt_ckpt *h_ck;
llmt_comm *h_comm;
llmt_tokenizer *h_tok;
llmt_ingest *h_ing;
llmt_dedup *h_dd;
llmt_shard_writer *h_sw;
llmt_dataset *h_ds;
llmt_loader *h_ld;

enum { SCRATCH_N = 8, SCRATCH_BYTES = 1 << 16 };
static _Alignas(64) unsigned char scratch_mem[SCRATCH_N][SCRATCH_BYTES];
static int scratch_next;

void *scratch(void)
{
    unsigned char *p = scratch_mem[scratch_next++ % SCRATCH_N];
    memset(p, 0, SCRATCH_BYTES);
    return p;
}

void expect_fail(const char *what, llmt_status s)
{
    CHECK(s != LLMT_OK);
    if (s == LLMT_OK)
        fprintf(stderr, "  %s: returned LLMT_OK\n", what);
}

void expect_zero(const char *what, int v)
{
    CHECK(v == 0);
    if (v != 0)
        fprintf(stderr, "  %s: returned %d, not 0\n", what, v);
}

void expect_null(const char *fn, const char *arg, int optional, llmt_status s,
                 const char *last_error)
{
    if (optional)
        return;
    CHECK(s != LLMT_OK);
    if (s == LLMT_OK) {
        fprintf(stderr, "  %s: %s NULL accepted\n", fn, arg);
        return;
    }
    if (s != LLMT_ERR_NULL_POINTER)
        return; /* refused for another argument first (a zeroed struct) */
    int named = last_error && strstr(last_error, arg) != NULL;
    CHECK(named);
    if (!named)
        fprintf(stderr, "  %s: %s NULL: message \"%s\" does not name it\n", fn, arg,
                last_error ? last_error : "(null)");
}

static char dir[256];

static int make_handles(void)
{
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_level = LLMT_LOG_OFF;
    if (llmt_context_create(&co, &h_ctx) != LLMT_OK)
        return 0;
    static const char json[] = "{\"model\": {\"layers\": 2, \"hidden\": 64, \"heads\": 4,"
                               " \"vocab\": 256, \"seq_len\": 16}, \"batch\": {\"micro\": 1}}";
    CHECK_STATUS(llmt_spec_parse_json(h_ctx, json, strlen(json), &h_spec), LLMT_OK);
    CHECK_STATUS(llmt_plan_create(h_ctx, h_spec, 1, &h_plan), LLMT_OK);
    llmt_model_config mc;
    llmt_model_config_init(&mc, sizeof mc);
    mc.vocab_size = 256;
    mc.max_seq_len = 16;
    mc.layers = 1;
    mc.width = 32;
    mc.heads = 2;
    CHECK_STATUS(llmt_model_create(h_ctx, &mc, &h_model), LLMT_OK);
    llmt_trainer_opts to;
    llmt_trainer_opts_init(&to, sizeof to);
    to.micro_batch = 1;
    to.seq_len = 8;
    if (h_model)
        CHECK_STATUS(llmt_trainer_create(h_model, &to, &h_tr), LLMT_OK);
    char p[512];
    snprintf(p, sizeof p, "%s/ck", dir);
    CHECK_STATUS(llmt_ckpt_create(h_ctx, p, NULL, &h_ck), LLMT_OK);
    llmt_comm_opts cm;
    llmt_comm_opts_init(&cm, sizeof cm);
    cm.timeout_ms = 2000;
    CHECK_STATUS(llmt_comm_create_inproc(h_ctx, 1, &cm, &h_comm), LLMT_OK);
    CHECK_STATUS(llmt_tokenizer_create_bytes(h_ctx, &h_tok), LLMT_OK);
    snprintf(p, sizeof p, "%s/a.txt", dir);
    FILE *f = fopen(p, "w");
    if (!f)
        return 0;
    fputs("one document of text\n", f);
    fclose(f);
    const char *in[1] = {p};
    CHECK_STATUS(llmt_ingest_open(h_ctx, in, 1, NULL, &h_ing), LLMT_OK);
    llmt_dedup_opts dop;
    llmt_dedup_opts_init(&dop, sizeof dop);
    CHECK_STATUS(llmt_dedup_create(h_ctx, &dop, &h_dd), LLMT_OK);
    int32_t ids[4096];
    for (int i = 0; i < 4096; i++)
        ids[i] = (i * 7) % 256;
    snprintf(p, sizeof p, "%s/d.tok", dir);
    llmt_shard_writer *w = NULL;
    CHECK_STATUS(llmt_shard_writer_create(h_ctx, p, 256, &w), LLMT_OK);
    CHECK_STATUS(llmt_shard_writer_add(w, ids, 4096), LLMT_OK);
    CHECK_STATUS(llmt_shard_writer_finish(w), LLMT_OK);
    llmt_shard_writer_destroy(w);
    CHECK_STATUS(llmt_dataset_open(h_ctx, p, 1, &h_ds), LLMT_OK);
    llmt_loader_opts lo;
    llmt_loader_opts_init(&lo, sizeof lo);
    lo.seq_len = 8;
    lo.micro_batch = 1;
    lo.prefetch = 0;
    if (h_ds)
        CHECK_STATUS(llmt_loader_create(h_ds, &lo, &h_ld), LLMT_OK);
    snprintf(p, sizeof p, "%s/w.tok", dir);
    CHECK_STATUS(llmt_shard_writer_create(h_ctx, p, 256, &h_sw), LLMT_OK);
    return h_ctx && h_spec && h_plan && h_model && h_tr && h_ck && h_comm && h_tok && h_ing &&
           h_dd && h_sw && h_ds && h_ld;
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/llmt_nullargs_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    nullargs_pass1();
    int ok = make_handles();
    CHECK(ok);
    if (ok) {
        nullargs_pass2();
        nullargs_pass3();
    }
    fprintf(stderr, "nullargs: %d functions, %d checks, %d failed\n", nullargs_functions,
            check_count, check_failures);
    /* the handles are left to the process's end: some calls above may
     * have changed them in ways a destroy need not undo */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_exit("nullargs");
}
