/* llmt_data_prepare's contract, seen by a host: option defaults and
 * struct_size rules, NULL and range checks, the report filled on failure
 * (and only as far as the caller's struct_size reaches), nothing left
 * behind by a failed preparation, val_fraction 0 and 1, shard rollover read
 * back through llmt_dataset, the progress callback. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"

static char dir[] = "/tmp/llmt-prepare-XXXXXX";
static llmt_context *ctx;
static llmt_tokenizer *tok;

static void write_file(const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int exists(const char *sub)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    return stat(p, &st) == 0;
}

static llmt_status prep(const char *input, const char *out,
                        llmt_data_prepare_opts *po, llmt_data_report *r)
{
    char in[512], o[512];
    snprintf(in, sizeof in, "%s/%s", dir, input);
    snprintf(o, sizeof o, "%s/%s", dir, out);
    const char *inputs[] = {in};
    memset(r, 0, sizeof *r);
    r->struct_size = sizeof *r;
    return llmt_data_prepare(ctx, inputs, 1, tok, o, po, r);
}

static void test_opts(void)
{
    llmt_data_prepare_opts o;
    CHECK_STATUS(llmt_data_prepare_opts_init(NULL, sizeof o), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_data_prepare_opts_init(&o, 4), LLMT_ERR_STRUCT_SIZE);
    CHECK_STATUS(llmt_data_prepare_opts_init(&o, sizeof o), LLMT_OK);
    CHECK_EQ_INT(o.struct_size, sizeof o);
    CHECK_EQ_INT(o.shard_tokens, INT64_C(1) << 26);
    CHECK(o.val_fraction == 0.01);
    CHECK_EQ_INT(o.seed, 1337);
    CHECK(!o.ingest && !o.filter && !o.dedup && !o.no_filter && !o.no_dedup &&
          !o.llmc_format && !o.progress);
}

static void test_bad_args(void)
{
    llmt_data_prepare_opts po;
    llmt_data_prepare_opts_init(&po, sizeof po);
    llmt_data_report r;
    const char *in[] = {"x"};
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    CHECK_STATUS(llmt_data_prepare(ctx, in, 1, NULL, "o", &po, &r),
                 LLMT_ERR_NULL_POINTER);
    CHECK(strstr(llmt_context_last_error(ctx), "tokenizer") != NULL);
    CHECK_STATUS(llmt_data_prepare(ctx, in, 1, tok, NULL, &po, &r),
                 LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_data_prepare(ctx, NULL, 1, tok, "o", &po, &r),
                 LLMT_ERR_NULL_POINTER);
    po.val_fraction = 1.5;
    CHECK_STATUS(prep("docs.txt", "bad", &po, &r), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "val_fraction") != NULL);
    po.val_fraction = 0.5;
    po.shard_tokens = 0;
    CHECK_STATUS(prep("docs.txt", "bad", &po, &r), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "shard_tokens") != NULL);
    CHECK(!exists("bad")); /* argument errors create nothing */

    /* a newer caller's struct with fields this library does not know */
    struct {
        llmt_data_prepare_opts o;
        int64_t future;
    } big;
    memset(&big, 0, sizeof big);
    llmt_data_prepare_opts_init(&big.o, sizeof big.o);
    big.o.struct_size = sizeof big;
    big.future = 1;
    CHECK_STATUS(prep("docs.txt", "bad", &big.o, &r), LLMT_ERR_STRUCT_SIZE);
    big.future = 0;
    big.o.no_filter = 1; /* one document holding "%" lines */
    CHECK_STATUS(prep("docs.txt", "big", &big.o, &r), LLMT_OK);

    /* a missing input: named, nothing created */
    llmt_data_prepare_opts_init(&po, sizeof po);
    CHECK(prep("missing.txt", "miss", &po, &r) != LLMT_OK);
    CHECK(strstr(llmt_context_last_error(ctx), "missing.txt") != NULL);
    CHECK(!exists("miss/train"));
}

/* Everything filtered: an error, the report says what happened, and the
 * directories it created are gone again. */
static void test_failure_report(void)
{
    llmt_data_filter_opts fo;
    llmt_data_filter_opts_init(&fo, sizeof fo);
    fo.min_chars = 1000000;
    llmt_ingest_opts io;
    llmt_ingest_opts_init(&io, sizeof io);
    io.doc_separator = "%";
    llmt_data_prepare_opts po;
    llmt_data_prepare_opts_init(&po, sizeof po);
    po.filter = &fo;
    po.ingest = &io;
    llmt_data_report r;
    CHECK_STATUS(prep("docs.txt", "none", &po, &r), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "no document") != NULL);
    /* how many were read and what removed them (it said "0 read": the
     * count came from stats filled only for a progress callback) */
    CHECK(strstr(llmt_context_last_error(ctx), "6 read") != NULL);
    CHECK(strstr(llmt_context_last_error(ctx), "too_short 6") != NULL);
    CHECK_EQ_INT(r.files, 1);
    CHECK_EQ_INT(r.documents, 6);
    CHECK_EQ_INT(r.verdicts[LLMT_DATA_TOO_SHORT], 6);
    CHECK_EQ_INT(r.verdicts[LLMT_DATA_KEEP], 0);
    CHECK(r.bytes > 0 && r.seconds >= 0);
    CHECK(!exists("none/train") && !exists("none/report.json") &&
          !exists("none/tokenizer.bin"));

    /* an old caller's smaller report: nothing written past its size */
    unsigned char buf[sizeof(llmt_data_report) + 16];
    memset(buf, 0xAB, sizeof buf);
    llmt_data_report *small = (llmt_data_report *)buf;
    small->struct_size = offsetof(llmt_data_report, verdicts);
    char in[512], o[512];
    snprintf(in, sizeof in, "%s/docs.txt", dir);
    snprintf(o, sizeof o, "%s/small", dir);
    const char *inputs[] = {in};
    CHECK_STATUS(llmt_data_prepare(ctx, inputs, 1, tok, o, &po, small),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(small->documents, 6);
    CHECK(buf[offsetof(llmt_data_report, verdicts)] == 0xAB);
}

typedef struct prog {
    int calls, monotonic;
    int64_t last, total, docs;
} prog;

static void on_progress(void *user, int64_t done, int64_t total, int64_t docs)
{
    prog *p = user;
    if (done < p->last)
        p->monotonic = 0;
    p->calls++;
    p->last = done;
    p->total = total;
    p->docs = docs;
}

static void test_split_and_rollover(void)
{
    llmt_ingest_opts io;
    llmt_ingest_opts_init(&io, sizeof io);
    io.doc_separator = "%";
    llmt_data_prepare_opts po;
    llmt_data_prepare_opts_init(&po, sizeof po);
    po.ingest = &io;
    po.no_dedup = 1;
    po.no_filter = 1;
    po.val_fraction = 0;
    po.shard_tokens = 120;
    prog pg = {0, 1, 0, 0, 0};
    po.progress = on_progress;
    po.progress_user = &pg;
    llmt_data_report r;
    /* an empty out/train and out/val are not a dataset: accepted */
    char p[512];
    snprintf(p, sizeof p, "%s/roll", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/roll/train", dir);
    mkdir(p, 0755);
    CHECK_STATUS(prep("docs.txt", "roll", &po, &r), LLMT_OK);
    CHECK_EQ_INT(r.train_documents, 6);
    CHECK_EQ_INT(r.val_documents, 0);
    CHECK_EQ_INT(r.val_shards, 0);
    CHECK(pg.calls >= 7 && pg.monotonic && pg.last == pg.total && pg.docs == 6);
    /* 1 + 51 = 52 tokens a document (see main): two a shard */
    CHECK_EQ_INT(r.train_tokens, 6 * 52);
    CHECK_EQ_INT(r.train_shards, 3);
    llmt_dataset *ds = NULL;
    snprintf(p, sizeof p, "%s/roll/train", dir);
    CHECK_STATUS(llmt_dataset_open(ctx, p, 1, &ds), LLMT_OK);
    llmt_dataset_info in;
    memset(&in, 0, sizeof in);
    in.struct_size = sizeof in;
    CHECK_STATUS(llmt_dataset_get_info(ds, &in), LLMT_OK);
    CHECK_EQ_INT(in.shards, 3);
    CHECK_EQ_INT(in.tokens, 6 * 52);
    CHECK_EQ_INT(in.documents, 6);
    CHECK_EQ_INT(in.vocab_size, 257);
    for (int32_t i = 0; i < in.shards; i++) {
        int64_t t = 0, d = 0;
        int32_t ids[104];
        CHECK_STATUS(llmt_dataset_shard(ds, i, NULL, &t, &d), LLMT_OK);
        CHECK_EQ_INT(t, 104);
        CHECK_EQ_INT(d, 2);
        CHECK_STATUS(llmt_dataset_read(ds, i, 0, ids, 104), LLMT_OK);
        CHECK(ids[0] == 256 && ids[52] == 256); /* eot starts each document */
        CHECK(ids[1] == 'D' && ids[51] == '\n');
    }
    llmt_dataset_destroy(ds);

    /* a fraction too small for the hash to pick any of six documents: the
     * last one bound for train goes to validation instead */
    po.val_fraction = 1e-12;
    po.progress = NULL;
    CHECK_STATUS(prep("docs.txt", "tinyval", &po, &r), LLMT_OK);
    CHECK_EQ_INT(r.val_documents, 1);
    CHECK_EQ_INT(r.train_documents, 5);
    snprintf(p, sizeof p, "%s/tinyval/val", dir);
    CHECK_STATUS(llmt_dataset_open(ctx, p, 1, &ds), LLMT_OK);
    int32_t vid[52] = {0};
    CHECK_STATUS(llmt_dataset_read(ds, 0, 0, vid, 52), LLMT_OK);
    CHECK(vid[0] == 256 && vid[10] == '5'); /* "Document 5 ..." */
    llmt_dataset_destroy(ds);
    /* one document: it stays in train */
    write_file("one.txt", "Only one document here, long enough for the filters.\n");
    CHECK_STATUS(prep("one.txt", "oneval", &po, &r), LLMT_OK);
    CHECK_EQ_INT(r.val_documents, 0);
    CHECK_EQ_INT(r.train_documents, 1);

    /* everything to validation */
    po.val_fraction = 1;
    po.progress = NULL;
    CHECK_STATUS(prep("docs.txt", "allval", &po, &r), LLMT_OK);
    CHECK_EQ_INT(r.val_documents, 6);
    CHECK_EQ_INT(r.train_documents, 0);
    CHECK_EQ_INT(r.train_shards, 0);
    /* and into the same place again: refused, report names it */
    CHECK_STATUS(prep("docs.txt", "allval", &po, &r), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "allval") != NULL);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    llmt_context_set_log_level(ctx, LLMT_LOG_ERROR);
    CHECK_STATUS(llmt_tokenizer_create_bytes(ctx, &tok), LLMT_OK);
    /* six documents of exactly 51 bytes (50 and the newline that ends the
     * last line, which belongs to the document), "%" lines between them */
    char text[1024] = "";
    for (int d = 0; d < 6; d++) {
        char doc[64];
        snprintf(doc, sizeof doc, "Document %d says something of its own here..", d);
        size_t n = strlen(doc);
        while (n < 50)
            doc[n++] = 'x';
        doc[50] = 0;
        strcat(text, doc);
        strcat(text, d < 5 ? "\n%\n" : "\n");
    }
    write_file("docs.txt", text);
    test_opts();
    test_bad_args();
    test_failure_report();
    test_split_and_rollover();
    llmt_tokenizer_destroy(tok);
    llmt_context_destroy(ctx);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_exit("data-prepare");
}
