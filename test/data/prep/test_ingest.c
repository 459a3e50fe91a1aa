/* Ingest over a temporary tree: nested directories in name order, hidden
 * entries, symlinks and binary files skipped, a separator-split text file
 * with CRLF, JSONL with bad lines (logged with file and line), a missing
 * text field, another text field, invalid UTF-8, statistics, missing inputs
 * and argument errors. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"

static char root[256];
static char logbuf[8192];

static void on_log(void *user, llmt_log_level level, const char *module,
                   const char *msg)
{
    (void)user;
    (void)level;
    (void)module;
    size_t l = strlen(logbuf);
    snprintf(logbuf + l, sizeof logbuf - l, "%s\n", msg);
}

static int64_t write_file(const char *rel, const char *data, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    FILE *f = fopen(p, "wb");
    if (!f)
        return -1;
    fwrite(data, 1, n, f);
    fclose(f);
    return (int64_t)n;
}

#define WRITE(rel, lit) write_file(rel, lit, sizeof(lit) - 1)

static void mkdir_rel(const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    mkdir(p, 0755);
}

static void cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
}

/* Read every document; return how many, copying them into docs[]. */
static int read_all(llmt_ingest *it, char docs[][128], int max)
{
    int n = 0;
    for (;;) {
        const char *t = (const char *)1;
        size_t len = 99;
        llmt_status s = llmt_ingest_next(it, &t, &len);
        CHECK_STATUS(s, LLMT_OK);
        if (s != LLMT_OK || !t)
            break;
        CHECK_EQ_INT(strlen(t), len);
        if (n < max)
            snprintf(docs[n], 128, "%s", t);
        n++;
    }
    return n;
}

static void test_tree(llmt_context *ctx)
{
    int64_t total = 0;
    /* Sorted by name: a.txt, b/ (c.txt, d.jsonl), bin.dat (binary),
     * link.txt (symlink); hidden entries skipped. */
    total += WRITE("a.txt", "doc A\r\nline2\n");
    mkdir_rel("b");
    total += WRITE("b/c.txt", "one\n%\ntwo\r\n%\r\n \n%\nthr\xC3\xA9\xFF" "e");
    total += WRITE("b/d.jsonl",
                   "{\"text\": \"j1\"}\n"
                   "{\"text\": \n"
                   "{\"other\": \"x\"}\n"
                   "\n"
                   "{\"text\": 5}\n"
                   "[\"text\"]\n"
                   "{\"text\": \"a\"} trailing\n"
                   "{\"text\": \"\"}\n"
                   "{\"text\": \"bad \xFF utf8\\r\\nz\", \"id\": 3}\r\n");
    WRITE("bin.dat", "\0\0\0\2binary index");
    WRITE(".hidden.txt", "hidden");
    mkdir_rel(".hiddendir");
    WRITE(".hiddendir/x.txt", "hidden too");
    char target[512], link[512];
    snprintf(target, sizeof target, "%s/a.txt", root);
    snprintf(link, sizeof link, "%s/link.txt", root);
    CHECK(symlink(target, link) == 0);

    llmt_ingest_opts o;
    CHECK_STATUS(llmt_ingest_opts_init(&o, sizeof o), LLMT_OK);
    CHECK(!strcmp(o.text_field, "text"));
    CHECK(o.doc_separator == NULL);
    char sep[] = "%";
    o.doc_separator = sep;
    const char *in[] = {root};
    llmt_ingest *it;
    logbuf[0] = 0;
    CHECK_STATUS(llmt_ingest_open(ctx, in, 1, &o, &it), LLMT_OK);
    sep[0] = '#'; /* copied at open */
    llmt_ingest_stats st;
    st.struct_size = sizeof st;
    CHECK_STATUS(llmt_ingest_get_stats(it, &st), LLMT_OK);
    CHECK_EQ_INT(st.bytes_total, total);
    CHECK_EQ_INT(st.files, 0);
    static char docs[32][128];
    int n = read_all(it, docs, 32);
    static const char *want[] = {
        "doc A\nline2\n", "one\n", "two\n", "thr\xC3\xA9\xEF\xBF\xBD" "e",
        "j1", "bad \xEF\xBF\xBD utf8\nz",
    };
    CHECK_EQ_INT(n, 6);
    for (int i = 0; i < 6 && i < n; i++) {
        CHECK(!strcmp(docs[i], want[i]));
        if (strcmp(docs[i], want[i]))
            fprintf(stderr, "  doc %d: \"%s\"\n", i, docs[i]);
    }
    CHECK_STATUS(llmt_ingest_get_stats(it, &st), LLMT_OK);
    CHECK_EQ_INT(st.files, 3);
    CHECK_EQ_INT(st.documents, 6);
    CHECK_EQ_INT(st.bytes_read, total);
    CHECK_EQ_INT(st.bytes_total, total);
    CHECK_EQ_INT(st.invalid_utf8, 2);
    CHECK_EQ_INT(st.bad_lines, 5);
    /* Every bad line is logged with its file and line number. */
    static const int bad[] = {2, 3, 5, 6, 7};
    for (int i = 0; i < 5; i++) {
        char want_log[512];
        snprintf(want_log, sizeof want_log, "d.jsonl line %d:", bad[i]);
        CHECK(strstr(logbuf, want_log) != NULL);
    }
    CHECK(strstr(logbuf, "line 4:") == NULL);
    CHECK(strstr(logbuf, "no text field") != NULL);
    CHECK(strstr(logbuf, "malformed JSON") != NULL);
    /* At the end: NULL and 0, again and again. */
    const char *t = "x";
    size_t len = 5;
    CHECK_STATUS(llmt_ingest_next(it, &t, &len), LLMT_OK);
    CHECK(t == NULL && len == 0);
    /* An older caller's stats struct gets only the fields it has. */
    struct { size_t struct_size; int64_t files, documents, sentinel; } small;
    small.struct_size = offsetof(llmt_ingest_stats, bytes_read);
    small.sentinel = -7;
    CHECK_STATUS(llmt_ingest_get_stats(it, (llmt_ingest_stats *)&small), LLMT_OK);
    CHECK_EQ_INT(small.documents, 6);
    CHECK_EQ_INT(small.sentinel, -7);
    llmt_ingest_destroy(it);

    /* Without a separator each text file is one document; text_field
     * picks another key; a symlink named as an input is read. */
    WRITE("e.ndjson", "{\"body\": \"from body\", \"text\": \"not this\"}\n"
                      "{\"text\": \"no body\"}\n");
    char e_path[512];
    snprintf(e_path, sizeof e_path, "%s/e.ndjson", root);
    const char *in2[] = {link, target, e_path};
    llmt_ingest_opts_init(&o, sizeof o);
    o.text_field = "body";
    CHECK_STATUS(llmt_ingest_open(ctx, in2, 3, &o, &it), LLMT_OK);
    n = read_all(it, docs, 32);
    CHECK_EQ_INT(n, 3);
    CHECK(!strcmp(docs[0], "doc A\nline2\n"));
    CHECK(!strcmp(docs[1], "doc A\nline2\n"));
    CHECK(!strcmp(docs[2], "from body"));
    CHECK_STATUS(llmt_ingest_get_stats(it, &st), LLMT_OK);
    CHECK_EQ_INT(st.bad_lines, 1);
    CHECK_EQ_INT(st.files, 3);
    llmt_ingest_destroy(it);

    char c_path[512];
    snprintf(c_path, sizeof c_path, "%s/b/c.txt", root);
    const char *in3[] = {c_path};
    CHECK_STATUS(llmt_ingest_open(ctx, in3, 1, NULL, &it), LLMT_OK);
    n = read_all(it, docs, 32);
    CHECK_EQ_INT(n, 1);
    CHECK(!strcmp(docs[0], "one\n%\ntwo\n%\n \n%\nthr\xC3\xA9\xEF\xBF\xBD" "e"));
    llmt_ingest_destroy(it);

    /* A separator of "" splits at blank lines (paragraphs). */
    WRITE("p.txt", "para one\nstill one\n\npara two\n\n\n");
    char p_path[512];
    snprintf(p_path, sizeof p_path, "%s/p.txt", root);
    const char *in4[] = {p_path};
    llmt_ingest_opts_init(&o, sizeof o);
    o.doc_separator = "";
    CHECK_STATUS(llmt_ingest_open(ctx, in4, 1, &o, &it), LLMT_OK);
    n = read_all(it, docs, 32);
    CHECK_EQ_INT(n, 2);
    CHECK(!strcmp(docs[0], "para one\nstill one\n"));
    CHECK(!strcmp(docs[1], "para two\n"));
    llmt_ingest_destroy(it);
}

/* A JSON \u0000 escape is a NUL inside the string: dropped and counted as
 * a NUL byte of a text file is, never the end of the document (cJSON's C
 * string would end there). An escaped backslash before "u0000" is text;
 * a \u0000 outside any string does not make a bad line good. */
static void test_jsonl_nul(llmt_context *ctx)
{
    WRITE("n.jsonl", "{\"text\": \"before\\u0000after \\u0000\\u0000end\"}\n"
                     "{\"text\": \"kept \\\\u0000 as text\"}\n"
                     "{\"text\": \"\\u0000\"}\n"
                     "{\"text\": \"x\"}\\u0000\n");
    char path[512];
    snprintf(path, sizeof path, "%s/n.jsonl", root);
    const char *in[] = {path};
    llmt_ingest *it;
    CHECK_STATUS(llmt_ingest_open(ctx, in, 1, NULL, &it), LLMT_OK);
    static char docs[8][128];
    int n = read_all(it, docs, 8);
    CHECK_EQ_INT(n, 2);
    CHECK(!strcmp(docs[0], "beforeafter end"));
    CHECK(n < 2 || !strcmp(docs[1], "kept \\u0000 as text"));
    if (n >= 1 && strcmp(docs[0], "beforeafter end"))
        fprintf(stderr, "  doc 0: \"%s\"\n", docs[0]);
    llmt_ingest_stats st;
    st.struct_size = sizeof st;
    CHECK_STATUS(llmt_ingest_get_stats(it, &st), LLMT_OK);
    CHECK_EQ_INT(st.invalid_utf8, 4);
    CHECK_EQ_INT(st.bad_lines, 1);
    llmt_ingest_destroy(it);
}

static void test_errors(llmt_context *ctx)
{
    llmt_ingest *it = (llmt_ingest *)1;
    char missing[512];
    snprintf(missing, sizeof missing, "%s/no/such/file.txt", root);
    const char *in[] = {root, missing};
    CHECK_STATUS(llmt_ingest_open(ctx, in, 2, NULL, &it), LLMT_ERR_NOT_FOUND);
    CHECK(it == NULL);
    CHECK(strstr(llmt_context_last_error(ctx), missing) != NULL);
    CHECK_STATUS(llmt_ingest_open(ctx, in, 0, NULL, &it), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_ingest_open(ctx, NULL, 1, NULL, &it), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_ingest_open(ctx, in, 1, NULL, NULL), LLMT_ERR_NULL_POINTER);
    const char *nul_in[] = {root, NULL};
    CHECK_STATUS(llmt_ingest_open(ctx, nul_in, 2, NULL, &it), LLMT_ERR_NULL_POINTER);
    llmt_ingest_opts o;
    llmt_ingest_opts_init(&o, sizeof o);
    o.doc_separator = "a\nb";
    CHECK_STATUS(llmt_ingest_open(ctx, in, 1, &o, &it), LLMT_ERR_INVALID_ARGUMENT);
    llmt_ingest_opts_init(&o, sizeof o);
    o.text_field = NULL;
    CHECK_STATUS(llmt_ingest_open(ctx, in, 1, &o, &it), LLMT_ERR_INVALID_ARGUMENT);
    o.struct_size = 0;
    CHECK_STATUS(llmt_ingest_open(ctx, in, 1, &o, &it), LLMT_ERR_STRUCT_SIZE);
    CHECK_STATUS(llmt_ingest_opts_init(&o, 2), LLMT_ERR_STRUCT_SIZE);
    CHECK_STATUS(llmt_ingest_opts_init(NULL, sizeof o), LLMT_ERR_NULL_POINTER);
    /* A NULL context works (errors then have nowhere to go). */
    CHECK_STATUS(llmt_ingest_open(NULL, in, 1, NULL, &it), LLMT_OK);
    const char *t;
    size_t len;
    llmt_ingest_stats st;
    CHECK_STATUS(llmt_ingest_next(NULL, &t, &len), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_ingest_next(it, NULL, &len), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_ingest_next(it, &t, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_ingest_get_stats(NULL, &st), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_ingest_get_stats(it, NULL), LLMT_ERR_NULL_POINTER);
    st.struct_size = 0;
    CHECK_STATUS(llmt_ingest_get_stats(it, &st), LLMT_ERR_STRUCT_SIZE);
    /* A file that vanishes after open fails in next(), naming it. */
    char a_path[512];
    snprintf(a_path, sizeof a_path, "%s/a.txt", root);
    unlink(a_path);
    CHECK_STATUS(llmt_ingest_next(it, &t, &len), LLMT_ERR_IO);
    CHECK(strstr(llmt_ingest_last_error(it), "a.txt") != NULL);
    llmt_ingest_destroy(it);
    llmt_ingest_destroy(NULL);
    CHECK(llmt_ingest_last_error(NULL) != NULL);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/llmt-ingest-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_fn = on_log;
    co.log_level = LLMT_LOG_WARN;
    llmt_context *ctx;
    CHECK_STATUS(llmt_context_create(&co, &ctx), LLMT_OK);
    test_tree(ctx);
    test_jsonl_nul(ctx);
    test_errors(ctx);
    llmt_context_destroy(ctx);
    cleanup();
    return check_exit("data-ingest");
}
