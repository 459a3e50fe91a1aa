/* Ingest: documents out of files, directory trees and JSONL, one at a time.
 * Files are listed when the handle opens (so a missing input fails at once
 * and bytes_total is known for progress), then read line by line: only the
 * current line and the current document are in memory. Splitting on '\n'
 * is safe for UTF-8 repair because '\n' never occurs inside a sequence; a
 * separator line is matched with its CR stripped, so CRLF files split too. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "data_internal.h"

/* Bad JSONL lines logged per file; the rest are only counted. */
#define INGEST_LOG_BAD_MAX 10
/* Bytes sniffed for a NUL to tell a binary file found in a directory (the
 * fortune ".dat" indexes, images) from text, as git and grep do. */
#define INGEST_SNIFF 8192

struct llmt_ingest {
    llmt_err err;
    llmt_context *ctx;
    char *text_field;
    char *sep;              /* NULL: one document per text file */
    size_t sep_len;
    char **files;
    size_t nfiles, files_cap, next_file;
    FILE *f;                /* the file being read, or NULL */
    const char *path;       /* its name */
    int jsonl;
    int64_t lineno, bad_in_file;
    char *line;
    size_t line_cap;
    char *doc;              /* raw lines of the current text document */
    size_t doc_len, doc_cap;
    char *out;              /* the normalised document handed out */
    size_t out_cap;
    llmt_ingest_stats st;
};

LLMT_API llmt_status llmt_ingest_opts_init(llmt_ingest_opts *opts, size_t size)
{
    llmt_ingest_opts d = {0};
    d.text_field = "text";
    d.doc_separator = NULL;
    return llmt__opts_init(opts, size, 0, &d, sizeof d, "ingest opts");
}

LLMT_API const char *llmt_ingest_last_error(const llmt_ingest *it)
{
    return it ? it->err.msg : "ingest: NULL handle";
}

LLMT_API void llmt_ingest_destroy(llmt_ingest *it)
{
    if (!it)
        return;
    if (it->f)
        fclose(it->f);
    for (size_t i = 0; i < it->nfiles; i++)
        free(it->files[i]);
    free(it->files);
    free(it->text_field);
    free(it->sep);
    free(it->line);
    free(it->doc);
    free(it->out);
    free(it);
}

static int add_file(llmt_ingest *it, const char *path, int64_t size)
{
    if (it->nfiles == it->files_cap) {
        size_t cap = it->files_cap ? 2 * it->files_cap : 64;
        char **f = realloc(it->files, cap * sizeof *f);
        if (!f)
            return -1;
        it->files = f;
        it->files_cap = cap;
    }
    char *p = strdup(path);
    if (!p)
        return -1;
    it->files[it->nfiles++] = p;
    it->st.bytes_total += size;
    return 0;
}

static int looks_binary(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0; /* unreadable: reading it later reports the error */
    unsigned char buf[INGEST_SNIFF];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return memchr(buf, 0, n) != NULL;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static llmt_status oom(llmt_err *e)
{
    return llmt__err_set(e, LLMT_ERR_OUT_OF_MEMORY, "ingest: out of memory");
}

/* Every regular file under dir, depth first, entries sorted by name (byte
 * order) so the document order does not depend on the file system. */
static llmt_status walk_dir(llmt_ingest *it, llmt_err *e, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return llmt__err_set(e, LLMT_ERR_IO, "ingest: cannot open directory %s: %s",
                             dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    llmt_status s = LLMT_OK;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (ent->d_name[0] == '.') /* hidden, and . and .. */
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                s = oom(e);
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(ent->d_name))) {
            s = oom(e);
            break;
        }
        n++;
    }
    closedir(d);
    if (s == LLMT_OK)
        qsort(names, n, sizeof *names, cmp_name);
    size_t dl = strlen(dir);
    for (size_t i = 0; i < n && s == LLMT_OK; i++) {
        size_t pl = dl + strlen(names[i]) + 2;
        char *p = malloc(pl);
        if (!p) {
            s = oom(e);
            break;
        }
        snprintf(p, pl, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/",
                 names[i]);
        struct stat sb;
        if (lstat(p, &sb)) {
            s = llmt__err_set(e, LLMT_ERR_IO, "ingest: cannot stat %s: %s", p,
                              strerror(errno));
        } else if (S_ISDIR(sb.st_mode)) {
            s = walk_dir(it, e, p);
        } else if (S_ISREG(sb.st_mode)) {
            /* Symlinks (S_ISLNK under lstat) never get here: they could
             * loop or read a file twice (fortune's *.u8 links). */
            if (looks_binary(p))
                llmt__log(it->ctx, LLMT_LOG_INFO, "data",
                          "ingest: skipping binary file %s", p);
            else if (add_file(it, p, (int64_t)sb.st_size))
                s = oom(e);
        }
        free(p);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return s;
}

LLMT_API llmt_status llmt_ingest_open(llmt_context *ctx,
                                      const char *const *inputs, size_t n,
                                      const llmt_ingest_opts *opts,
                                      llmt_ingest **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "ingest: open", out);
    *out = NULL;
    if (!inputs)
        return llmt__err_set(ce, LLMT_ERR_NULL_POINTER, "ingest: open: inputs is NULL");
    for (size_t i = 0; i < n; i++)
        if (!inputs[i])
            return llmt__err_set(ce, LLMT_ERR_NULL_POINTER,
                                 "ingest: open: inputs[%zu] is NULL", i);
    if (n == 0)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT, "ingest: no inputs");
    llmt_ingest_opts o;
    llmt_ingest_opts_init(&o, sizeof o);
    if (opts) {
        llmt_status s = llmt__opts_copy(ce, "ingest opts", &o, sizeof o, opts);
        if (s != LLMT_OK)
            return s;
    }
    if (!o.text_field)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "ingest: text_field is NULL (the default is \"text\")");
    if (o.doc_separator && strpbrk(o.doc_separator, "\r\n"))
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "ingest: doc_separator must be one line (no CR or LF)");
    llmt_ingest *it = calloc(1, sizeof *it);
    if (!it)
        return oom(ce);
    it->ctx = ctx;
    it->st.struct_size = sizeof it->st;
    it->text_field = strdup(o.text_field);
    if (o.doc_separator) {
        it->sep = strdup(o.doc_separator);
        it->sep_len = strlen(o.doc_separator);
    }
    if (!it->text_field || (o.doc_separator && !it->sep)) {
        llmt_ingest_destroy(it);
        return oom(ce);
    }
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        llmt_status s = LLMT_OK;
        /* A path named by the caller is followed even when a symlink. */
        if (stat(inputs[i], &sb))
            s = llmt__err_set(ce, errno == ENOENT ? LLMT_ERR_NOT_FOUND : LLMT_ERR_IO,
                              "ingest: input %s: %s", inputs[i], strerror(errno));
        else if (S_ISDIR(sb.st_mode))
            s = walk_dir(it, ce, inputs[i]);
        else if (S_ISREG(sb.st_mode))
            s = add_file(it, inputs[i], (int64_t)sb.st_size) ? oom(ce) : LLMT_OK;
        else
            s = llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                              "ingest: input %s is not a file or directory",
                              inputs[i]);
        if (s != LLMT_OK) {
            llmt_ingest_destroy(it);
            return s;
        }
    }
    *out = it;
    return LLMT_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Normalise raw bytes into it->out. Returns 1 when the document has a
 * non-space byte (and counts it), 0 when it is empty, -1 out of memory. */
static int make_doc(llmt_ingest *it, const char *raw, size_t n, size_t *len)
{
    size_t need = 3 * n + 1;
    if (it->out_cap < need) {
        char *o = realloc(it->out, need);
        if (!o)
            return -1;
        it->out = o;
        it->out_cap = need;
    }
    size_t l = llmt__data_normalize((const unsigned char *)raw, n,
                                    (unsigned char *)it->out, need - 1,
                                    &it->st.invalid_utf8, NULL);
    it->out[l] = '\0';
    *len = l;
    for (size_t i = 0; i < l; i++)
        if (!llmt__data_is_space((unsigned char)it->out[i])) {
            it->st.documents++;
            return 1;
        }
    return 0;
}

static void bad_line(llmt_ingest *it, const char *why)
{
    it->st.bad_lines++;
    it->bad_in_file++;
    if (it->bad_in_file <= INGEST_LOG_BAD_MAX)
        llmt__log(it->ctx, LLMT_LOG_WARN, "data", "ingest: %s line %lld: %s%s",
                  it->path, (long long)it->lineno, why,
                  it->bad_in_file == INGEST_LOG_BAD_MAX
                      ? " (further bad lines of this file are only counted)"
                      : "");
}

/* Remove the \u0000 escapes inside the strings of a JSON line, in place,
 * counting them (in any field: the line's count goes to invalid_utf8 when
 * its document is taken); returns the new length. cJSON decodes one into
 * a NUL that ends its C string, so the rest of the document would be lost
 * unseen; dropped here, a NUL fares as a raw NUL byte in a text file does.
 * An escaped backslash followed by "u0000" is text and stays. */
static size_t drop_nul_escapes(char *line, size_t n, int64_t *dropped)
{
    size_t o = 0;
    int in_str = 0;
    for (size_t i = 0; i < n;) {
        char c = line[i];
        if (in_str && c == '\\' && i + 1 < n) {
            if (n - i >= 6 && !memcmp(line + i + 1, "u0000", 5)) {
                (*dropped)++;
                i += 6;
                continue;
            }
            line[o++] = line[i++]; /* the backslash and what it escapes */
            line[o++] = line[i++];
            continue;
        }
        if (c == '"')
            in_str = !in_str;
        line[o++] = line[i++];
    }
    line[o] = '\0';
    return o;
}

/* One JSONL line (its '\n' and '\r' stripped, NUL-terminated). Returns as
 * make_doc, 0 also for a skipped line. */
static int jsonl_line(llmt_ingest *it, char *line, size_t n, size_t *len)
{
    size_t k = 0;
    while (k < n && llmt__data_is_space((unsigned char)line[k]))
        k++;
    if (k == n)
        return 0; /* blank lines are separators, not errors */
    if (memchr(line, 0, n)) {
        bad_line(it, "NUL byte in a JSON line");
        return 0;
    }
    int64_t nuls = 0;
    n = drop_nul_escapes(line, n, &nuls);
    /* n + 1 covers the NUL, so require_null_terminated rejects trailing
     * text after the object. */
    cJSON *obj = cJSON_ParseWithLengthOpts(line, n + 1, NULL, 1);
    if (!obj) {
        bad_line(it, "malformed JSON");
        return 0;
    }
    int r = 0;
    const cJSON *v = cJSON_IsObject(obj)
                         ? cJSON_GetObjectItemCaseSensitive(obj, it->text_field)
                         : NULL;
    if (!cJSON_IsObject(obj))
        bad_line(it, "not a JSON object");
    else if (!v)
        bad_line(it, "no text field");
    else if (!cJSON_IsString(v) || !v->valuestring)
        bad_line(it, "the text field is not a string");
    else {
        it->st.invalid_utf8 += nuls;
        r = make_doc(it, v->valuestring, strlen(v->valuestring), len);
    }
    cJSON_Delete(obj);
    return r;
}

static int append_doc(llmt_ingest *it, const char *p, size_t n)
{
    if (it->doc_len + n > it->doc_cap) {
        size_t cap = it->doc_cap ? it->doc_cap : 4096;
        while (cap < it->doc_len + n)
            cap *= 2;
        char *d = realloc(it->doc, cap);
        if (!d)
            return -1;
        it->doc = d;
        it->doc_cap = cap;
    }
    memcpy(it->doc + it->doc_len, p, n);
    it->doc_len += n;
    return 0;
}

LLMT_API llmt_status llmt_ingest_next(llmt_ingest *it, const char **text,
                                      size_t *len)
{
    if (!it)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&it->err, "ingest: next", text);
    LLMT__NONNULL(&it->err, "ingest: next", len);
    *text = NULL;
    *len = 0;
    for (;;) {
        if (!it->f) {
            if (it->next_file >= it->nfiles)
                return LLMT_OK;
            it->path = it->files[it->next_file++];
            it->f = fopen(it->path, "rb");
            if (!it->f)
                return llmt__err_set(&it->err, LLMT_ERR_IO, "ingest: open %s: %s",
                                     it->path, strerror(errno));
            it->st.files++;
            it->jsonl = ends_with(it->path, ".jsonl") || ends_with(it->path, ".ndjson");
            it->lineno = 0;
            it->bad_in_file = 0;
            it->doc_len = 0;
        }
        errno = 0;
        ssize_t got = getline(&it->line, &it->line_cap, it->f);
        int r = 0;
        size_t l = 0;
        if (got < 0) {
            int failed = ferror(it->f) || errno == ENOMEM;
            int err = errno;
            fclose(it->f);
            it->f = NULL;
            if (failed)
                return llmt__err_set(&it->err, err == ENOMEM ? LLMT_ERR_OUT_OF_MEMORY
                                                             : LLMT_ERR_IO,
                                     "ingest: read %s after line %lld: %s", it->path,
                                     (long long)it->lineno, strerror(err));
            if (!it->jsonl && it->doc_len)
                r = make_doc(it, it->doc, it->doc_len, &l);
            it->doc_len = 0;
        } else {
            size_t n = (size_t)got;
            it->st.bytes_read += got;
            it->lineno++;
            char *line = it->line;
            size_t c = n;
            if (c && line[c - 1] == '\n')
                c--;
            if (c && line[c - 1] == '\r')
                c--;
            if (it->jsonl) {
                line[c] = '\0';
                r = jsonl_line(it, line, c, &l);
            } else if (it->sep && c == it->sep_len && !memcmp(line, it->sep, c)) {
                r = make_doc(it, it->doc, it->doc_len, &l);
                it->doc_len = 0;
            } else if (append_doc(it, line, n)) {
                r = -1;
            }
        }
        if (r < 0)
            return llmt__err_set(&it->err, LLMT_ERR_OUT_OF_MEMORY,
                                 "ingest: out of memory reading %s line %lld",
                                 it->path, (long long)it->lineno);
        if (r > 0) {
            *text = it->out;
            *len = l;
            return LLMT_OK;
        }
    }
}

LLMT_API llmt_status llmt_ingest_get_stats(const llmt_ingest *it,
                                           llmt_ingest_stats *stats)
{
    if (!it)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = (llmt_err *)&it->err;
    LLMT__NONNULL(e, "ingest: get_stats", stats);
    size_t n = stats->struct_size;
    if (n < sizeof(size_t))
        return llmt__err_set(e, LLMT_ERR_STRUCT_SIZE,
                             "ingest: get_stats: stats: struct_size is %zu; set it "
                             "to sizeof the struct", n);
    if (n > sizeof it->st)
        n = sizeof it->st;
    /* Copy only the fields the caller's struct has; its struct_size stays. */
    memcpy((char *)stats + sizeof(size_t), (const char *)&it->st + sizeof(size_t),
           n - sizeof(size_t));
    return LLMT_OK;
}
