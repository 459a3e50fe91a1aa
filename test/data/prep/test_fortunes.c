/* Ingest of the default corpus, the fortune files: split at "%" lines,
 * the binary .dat indexes and the .u8 symlinks skipped; thousands of
 * documents, all valid UTF-8 without CR or NUL, every byte accounted for.
 * SKIP when /usr/share/games/fortunes is absent. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "llmtrain.h"
#include "utf8_ref.h"

#define FORTUNES "/usr/share/games/fortunes"

int main(void)
{
    DIR *dir = opendir(FORTUNES);
    if (!dir) {
        fprintf(stderr, "%s absent: skipped\n", FORTUNES);
        return CHECK_SKIP;
    }
    /* Count the text files the walk should read: regular, not hidden, no
     * NUL in their first 8 KiB (the strfile .dat indexes have some). */
    int text_files = 0;
    int64_t text_bytes = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.')
            continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", FORTUNES, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) || !S_ISREG(sb.st_mode))
            continue;
        FILE *f = fopen(p, "rb");
        char buf[8192];
        size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f)
            fclose(f);
        if (memchr(buf, 0, n))
            continue;
        text_files++;
        text_bytes += sb.st_size;
    }
    closedir(dir);

    llmt_ingest_opts o;
    llmt_ingest_opts_init(&o, sizeof o);
    o.doc_separator = "%";
    const char *in[] = {FORTUNES};
    llmt_ingest *it;
    CHECK_STATUS(llmt_ingest_open(NULL, in, 1, &o, &it), LLMT_OK);
    int64_t docs = 0, bad = 0, bytes = 0;
    for (;;) {
        const char *t;
        size_t len;
        if (llmt_ingest_next(it, &t, &len) != LLMT_OK || !t)
            break;
        docs++;
        bytes += (int64_t)len;
        if (!ref_utf8_valid((const unsigned char *)t, len) || memchr(t, '\r', len) ||
            strlen(t) != len || (len >= 2 && !strcmp(t + len - 2, "%\n")))
            bad++;
    }
    llmt_ingest_stats st;
    st.struct_size = sizeof st;
    CHECK_STATUS(llmt_ingest_get_stats(it, &st), LLMT_OK);
    fprintf(stderr, "fortunes: %d files, %lld documents, %lld bytes in, "
            "%lld out, %lld invalid\n", (int)st.files, (long long)docs,
            (long long)st.bytes_read, (long long)bytes, (long long)st.invalid_utf8);
    CHECK(docs >= 5000);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(st.documents, docs);
    CHECK_EQ_INT(st.files, text_files);
    CHECK_EQ_INT(st.bytes_total, text_bytes);
    CHECK_EQ_INT(st.bytes_read, text_bytes);
    CHECK_EQ_INT(st.bad_lines, 0);
    llmt_ingest_destroy(it);
    return check_exit("data-fortunes");
}
