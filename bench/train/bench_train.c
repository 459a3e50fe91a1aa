/* Training step time of the CPU backend: GPT-2 124M at B=4, T=64 (the
 * configuration llm.c's train_gpt2.c is measured with) and the demo model
 * of examples/specs/demo-cpu.json. One case per model; --quick runs only
 * the small one. Prints the peak RSS of the process at the end.
 * Extra flags: --threads N (default: all), --export FILE (write the 124M
 * model in llm.c's format for the peer benchmark and exit), --case NAME. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "harness.h"
#include "llmtrain.h"

typedef struct bcase {
    const char *name;
    int layers, width, heads, vocab, padded, maxT, B, T;
} bcase;

static const bcase cases[] = {
    {"gpt2-124m-B4-T64", 12, 768, 12, 50257, 50304, 1024, 4, 64},
    {"demo-4x256-B8-T128", 4, 256, 4, 4096, 4096, 128, 8, 128},
};

typedef struct state {
    llmt_trainer *tr;
    llmt_batch b;
} state;

static void one_step(void *arg)
{
    state *s = arg;
    llmt_status st = llmt_trainer_step(s->tr, &s->b, NULL);
    if (st != LLMT_OK) {
        fprintf(stderr, "step failed: %s\n", llmt_trainer_last_error(s->tr));
        exit(1);
    }
}

static llmt_model *make_model(llmt_context *ctx, const bcase *c)
{
    llmt_model_config mc;
    llmt_model_config_init(&mc, sizeof mc);
    mc.vocab_size = c->vocab;
    mc.padded_vocab_size = c->padded;
    mc.max_seq_len = c->maxT;
    mc.layers = c->layers;
    mc.width = c->width;
    mc.heads = c->heads;
    llmt_model *m = NULL;
    if (llmt_model_create(ctx, &mc, &m) != LLMT_OK) {
        fprintf(stderr, "model: %s\n", llmt_context_last_error(ctx));
        exit(1);
    }
    return m;
}

int main(int argc, char **argv)
{
    int threads = 0;
    const char *export_path = NULL, *only = NULL;
    /* our own flags first; the rest goes to the harness */
    char *rest[64];
    int nrest = 0;
    for (int i = 0; i < argc && nrest < 63; i++) {
        if (i > 0 && !strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (i > 0 && !strcmp(argv[i], "--export") && i + 1 < argc)
            export_path = argv[++i];
        else if (i > 0 && !strcmp(argv[i], "--case") && i + 1 < argc)
            only = argv[++i];
        else
            rest[nrest++] = argv[i];
    }
    rest[nrest] = NULL;
    llmt_context *ctx = NULL;
    llmt_context_create(NULL, &ctx);
    if (export_path) {
        llmt_model *m = make_model(ctx, &cases[0]);
        llmt_status st = llmt_model_export_llmc(m, export_path);
        llmt_model_destroy(m);
        llmt_context_destroy(ctx);
        if (st != LLMT_OK) fprintf(stderr, "export failed\n");
        return st == LLMT_OK ? 0 : 1;
    }
    bench_ctx b;
    if (bench_init(&b, "train", nrest, rest)) return 2;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const bcase *c = &cases[k];
        if (b.quick && k == 0) continue;
        if (only && strcmp(only, c->name)) continue;
        if (!bench_selected(&b, c->name)) continue;
        llmt_model *m = make_model(ctx, c);
        llmt_trainer_opts o;
        llmt_trainer_opts_init(&o, sizeof o);
        o.micro_batch = c->B;
        o.seq_len = c->T;
        o.threads = threads;
        o.lr = 1e-4f;
        state s;
        if (llmt_trainer_create(m, &o, &s.tr) != LLMT_OK) {
            fprintf(stderr, "trainer: %s\n", llmt_model_last_error(m));
            return 1;
        }
        size_t n = (size_t)c->B * c->T + 1;
        int32_t *tok = malloc(n * sizeof *tok);
        uint64_t r = 1;
        for (size_t i = 0; i < n; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            tok[i] = (int32_t)((r >> 33) % (uint64_t)c->vocab);
        }
        s.b = (llmt_batch){sizeof s.b, tok, tok + 1, c->B, c->T};
        bench_run(&b, c->name, one_step, &s, (double)c->B * c->T, "tokens");
        llmt_trainer_destroy(s.tr);
        llmt_model_destroy(m);
        free(tok);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak_rss_mib %.1f\n", ru.ru_maxrss / 1024.0);
    /* which OpenBLAS kernels the library loaded (see lib/exec/cpu.c) */
    char *(*core)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    printf("blas_core %s\n", core ? core() : "none");
    llmt_context_destroy(ctx);
    return bench_finish(&b);
}
