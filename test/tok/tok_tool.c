/* Command-line driver of the tokenizer ABI for the scripted tests
 * (test_gpt2_vs_js.py, test_train_ref.py) and for people poking at it.
 *   tok_tool encode  TOKSPEC FILE   ids of each NUL-separated document of
 *                                    FILE, one line per document
 *   tok_tool decode  TOKSPEC        ids on stdin (one document a line) ->
 *                                    bytes on stdout, documents NUL-separated
 *   tok_tool train   FILE VOCAB OUT train on FILE, save to OUT
 * TOKSPEC: gpt2:ENCODER_JSON:VOCAB_BPE | bytes | file:PATH */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmtrain.h"

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap);
    size_t r;
    while ((r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap)
            b = realloc(b, cap *= 2);
    }
    fclose(f);
    *len = n;
    return b;
}

static llmt_tokenizer *open_tok(const char *spec)
{
    llmt_tokenizer *t = NULL;
    llmt_status s;
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    if (!strcmp(spec, "bytes")) {
        s = llmt_tokenizer_create_bytes(ctx, &t);
    } else if (!strncmp(spec, "gpt2:", 5)) {
        char *a = strdup(spec + 5), *b = strchr(a, ':');
        if (!b) {
            fprintf(stderr, "bad spec %s\n", spec);
            exit(2);
        }
        *b++ = 0;
        s = llmt_tokenizer_load_gpt2(ctx, a, b, &t);
        free(a);
    } else if (!strncmp(spec, "file:", 5)) {
        s = llmt_tokenizer_load(ctx, spec + 5, &t);
    } else {
        fprintf(stderr, "bad spec %s\n", spec);
        exit(2);
    }
    if (s != LLMT_OK) {
        fprintf(stderr, "tokenizer %s: %s\n", spec, llmt_context_last_error(ctx));
        exit(1);
    }
    llmt_context_destroy(ctx);
    return t;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "encode")) {
        llmt_tokenizer *t = open_tok(argv[2]);
        size_t len;
        char *text = read_all(argv[3], &len);
        int32_t *ids = malloc((len + 1) * sizeof *ids);
        size_t a = 0;
        while (a <= len) {
            size_t b = a;
            while (b < len && text[b])
                b++;
            size_t n;
            if (llmt_tokenizer_encode(t, text + a, b - a, ids, len + 1, &n) != LLMT_OK) {
                fprintf(stderr, "encode: %s\n", llmt_tokenizer_last_error(t));
                return 1;
            }
            for (size_t i = 0; i < n; i++)
                printf(i ? " %d" : "%d", (int)ids[i]);
            printf("\n");
            a = b + 1;
        }
        llmt_tokenizer_destroy(t);
        free(ids);
        free(text);
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "decode")) {
        llmt_tokenizer *t = open_tok(argv[2]);
        char *line = NULL;
        size_t lcap = 0;
        ssize_t ll;
        int first = 1;
        while ((ll = getline(&line, &lcap, stdin)) >= 0) {
            size_t n = 0, cap = (size_t)ll + 1;
            int32_t *ids = malloc(cap * sizeof *ids);
            for (char *p = line; *p && *p != '\n';) {
                ids[n++] = (int32_t)strtol(p, &p, 10);
                while (*p == ' ')
                    p++;
            }
            size_t need;
            llmt_tokenizer_decode(t, ids, n, NULL, 0, &need);
            char *buf = malloc(need + 1);
            if (llmt_tokenizer_decode(t, ids, n, buf, need, &need) != LLMT_OK) {
                fprintf(stderr, "decode: %s\n", llmt_tokenizer_last_error(t));
                return 1;
            }
            if (!first)
                fputc(0, stdout);
            first = 0;
            fwrite(buf, 1, need, stdout);
            free(buf);
            free(ids);
        }
        free(line);
        llmt_tokenizer_destroy(t);
        return 0;
    }
    if (argc >= 5 && !strcmp(argv[1], "train")) {
        size_t len;
        char *text = read_all(argv[2], &len);
        llmt_tokenizer *t = NULL;
        llmt_context *ctx = NULL;
        llmt_context_create(NULL, &ctx);
        if (llmt_tokenizer_train_bpe(ctx, text, len, atoi(argv[3]), &t) != LLMT_OK) {
            fprintf(stderr, "train: %s\n", llmt_context_last_error(ctx));
            return 1;
        }
        if (llmt_tokenizer_save(t, argv[4]) != LLMT_OK) {
            fprintf(stderr, "save: %s\n", llmt_tokenizer_last_error(t));
            return 1;
        }
        llmt_tokenizer_destroy(t);
        llmt_context_destroy(ctx);
        free(text);
        return 0;
    }
    fprintf(stderr, "usage: tok_tool encode|decode|train ...\n");
    return 2;
}
