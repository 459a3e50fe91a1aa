/* GPT-2 124M training steps on the GPU: tokens/s at several batch sizes,
 * T = 1024, on one fixed random batch (the step's cost does not depend on
 * the data). Also checks that the step trains: the first loss is near
 * ln(50257) = 10.8 and the loss falls over the timed steps.
 *
 *   bench_gpt2 [--B 16,32,64] [--T 1024] [--steps N] [--json FILE]
 *              [--engine gpt2|trainer]
 *
 * --engine gpt2 (default) times bench/gpu/gpt2.cu's step (built into this
 * program, not the library); --engine trainer
 * times llmt_trainer_step with device = LLMT_DEVICE_CUDA (lib/train/
 * device.c, the public path; weight decay 0 and clip 1 like the other).
 *
 * Exits 77 without a GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../test/gpu/gpu_util.h"
#include "gpt2.h"
#include "llmtrain.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One B through the public trainer with device cuda; 0 on success. */
static int bench_trainer(FILE *J, int *first, int B, int T, int steps, int warm)
{
    llmt_context *ctx = NULL;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    if (llmt_context_create(NULL, &ctx) != LLMT_OK) return 1;
    llmt_model_config mc;
    llmt_model_config_init(&mc, sizeof mc);
    mc.padded_vocab_size = 50304;
    mc.max_seq_len = T > 1024 ? T : 1024;
    llmt_trainer_opts to;
    llmt_trainer_opts_init(&to, sizeof to);
    to.micro_batch = B;
    to.seq_len = T;
    to.schedule = LLMT_LR_CONSTANT;
    to.weight_decay = 0.0f;
    to.device = LLMT_DEVICE_CUDA;
    int rc = 1;
    size_t n = (size_t)B * T;
    int32_t *tok = malloc((n + 1) * 4);
    double *dt = malloc(steps * sizeof *dt);
    if (!tok || !dt) goto out;
    for (size_t i = 0; i <= n; i++) tok[i] = (int32_t)(rng_u64() % 50257);
    if (llmt_model_create(ctx, &mc, &m) != LLMT_OK) {
        printf("trainer B=%d: %s\n", B, llmt_context_last_error(ctx));
        goto out;
    }
    if (llmt_trainer_create(m, &to, &tr) != LLMT_OK) {
        printf("trainer B=%d: %s\n", B, llmt_model_last_error(m));
        goto out;
    }
    llmt_batch b = {sizeof b, tok, tok + 1, B, T};
    llmt_step_metrics met;
    memset(&met, 0, sizeof met);
    met.struct_size = sizeof met;
    float loss0 = 0;
    for (int s = 0; s < warm; s++) {
        if (llmt_trainer_step(tr, &b, &met) != LLMT_OK) goto fail;
        if (s == 0) loss0 = met.loss;
    }
    for (int s = 0; s < steps; s++) {
        double t0 = now();
        if (llmt_trainer_step(tr, &b, &met) != LLMT_OK) goto fail;
        dt[s] = now() - t0;
    }
    qsort(dt, steps, sizeof *dt, cmpd);
    double med = dt[steps / 2];
    llmt_trainer_memory mem;
    memset(&mem, 0, sizeof mem);
    mem.struct_size = sizeof mem;
    llmt_trainer_memory_usage(tr, &mem);
    int trains = loss0 > 10.0f && loss0 < 11.6f && met.loss < loss0 - 0.1f;
    printf("trainer gpt2-124M B=%-3d T=%d: step median %.2f ms (min %.2f) %9.0f tok/s  loss "
           "%.3f -> %.3f (%s)  activations %.2f GiB  peak %.2f GiB\n", B, T, med * 1e3,
           dt[0] * 1e3, n / med, loss0, met.loss, trains ? "trains" : "NOT TRAINING",
           mem.device_activations / 1073741824.0, mem.device_peak / 1073741824.0);
    if (J) {
        fprintf(J, "%s\n  {\"name\": \"trainer_gpt2_124M_B%d_T%d\", \"engine\": \"trainer\", "
                   "\"B\": %d, \"T\": %d, \"median_step_ms\": %.4f, \"min_step_ms\": %.4f, "
                   "\"tokens_per_s\": %.1f, \"steps\": %d, \"loss_first\": %.4f, "
                   "\"loss_last\": %.4f, \"activation_bytes\": %lld, "
                   "\"peak_device_bytes\": %lld}",
                *first ? "" : ",", B, T, B, T, med * 1e3, dt[0] * 1e3, n / med, steps, loss0,
                met.loss, (long long)mem.device_activations, (long long)mem.device_peak);
        *first = 0;
    }
    rc = trains ? 0 : 1;
    goto out;
fail:
    printf("trainer B=%d: step failed: %s\n", B, llmt_trainer_last_error(tr));
out:
    free(tok);
    free(dt);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    llmt_context_destroy(ctx);
    return rc;
}

int main(int argc, char **argv)
{
    const char *json = NULL, *blist = "16,32,64", *engine = "gpt2";
    int T = 1024, steps = 20, warm = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--engine") && i + 1 < argc) engine = argv[++i];
        else if (!strcmp(argv[i], "--B") && i + 1 < argc) blist = argv[++i];
        else if (!strcmp(argv[i], "--T") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else { fprintf(stderr, "usage: bench_gpt2 [--B list] [--T n] [--steps n] [--json F] [--engine gpt2|trainer]\n"); return 2; }
    }
    int32_t ndev = 0;
    char err[256] = "";
    if (llmt__cuda_device_count(&ndev, err, sizeof err) != LLMT_OK || ndev == 0) {
        printf("SKIP: no CUDA device (%s)\n", err);
        return 77;
    }
    FILE *J = json ? fopen(json, "w") : NULL;
    if (J) fprintf(J, "{\"suite\": \"gpu-gpt2\", \"model\": \"gpt2-124M\", \"T\": %d, \"results\": [", T);
    int first = 1, fail = 0;
    char bl[128];
    snprintf(bl, sizeof bl, "%s", blist);
    for (char *tokp = strtok(bl, ","); tokp; tokp = strtok(NULL, ",")) {
        int B = atoi(tokp);
        if (!strcmp(engine, "trainer")) {
            fail |= bench_trainer(J, &first, B, T, steps, warm);
            continue;
        }
        llmt__cuda_ctx *X = NULL;
        llmt__cuda_ctx_opts o = {0, 0, 0, 0, NULL, 0};
        if (llmt__cuda_ctx_create(&o, &X) != LLMT_OK) return 1;
        llmt__cuda_gpt2_cfg cfg;
        llmt__cuda_gpt2_cfg_init(&cfg);
        cfg.B = B;
        cfg.T = T;
        llmt__cuda_gpt2 *g = NULL;
        if (llmt__cuda_gpt2_create(X, &cfg, &g) != LLMT_OK) {
            printf("B=%d: %s\n", B, llmt__cuda_ctx_last_error(X));
            llmt__cuda_ctx_destroy(X);
            fail = 1;
            continue;
        }
        size_t n = (size_t)B * T;
        int32_t *tok = malloc((n + 1) * 4);
        for (size_t i = 0; i <= n; i++) tok[i] = (int32_t)(rng_u64() % 50257);
        double *dt = malloc(steps * sizeof *dt);
        float loss0 = 0, loss = 0, norm = 0;
        int bad = 0;
        /* device-side inputs: the first step copies them */
        if (llmt__cuda_gpt2_step(g, tok, tok + 1, 1, &loss0, &norm) != LLMT_OK) bad = 1;
        for (int s = 0; s < warm - 1 && !bad; s++)
            if (llmt__cuda_gpt2_step(g, tok, tok + 1, 1, &loss, &norm) != LLMT_OK) bad = 1;
        for (int s = 0; s < steps && !bad; s++) {
            double t0 = now();
            if (llmt__cuda_gpt2_step(g, tok, tok + 1, 1, &loss, &norm) != LLMT_OK) bad = 1;
            dt[s] = now() - t0;
        }
        if (bad) {
            printf("B=%d: step failed: %s\n", B, llmt__cuda_ctx_last_error(X));
            fail = 1;
        } else {
            qsort(dt, steps, sizeof *dt, cmpd);
            double med = dt[steps / 2];
            llmt__cuda_mem_stats ms;
            llmt__cuda_mem_stats_get(X, &ms);
            int trains = loss0 > 10.0f && loss0 < 11.6f && loss < loss0 - 0.1f;
            if (!trains) fail = 1;
            printf("gpt2-124M B=%-3d T=%d: step median %.2f ms (min %.2f) %9.0f tok/s  loss %.3f -> "
                   "%.3f (%s) norm %.3f  params %zu  activations %.2f GiB  peak %.2f GiB\n",
                   B, T, med * 1e3, dt[0] * 1e3, n / med, loss0, loss,
                   trains ? "trains" : "NOT TRAINING", norm, llmt__cuda_gpt2_num_params(g),
                   llmt__cuda_gpt2_activation_bytes(g) / 1073741824.0,
                   ms.peak_in_use / 1073741824.0);
            if (J) {
                fprintf(J, "%s\n  {\"name\": \"gpt2_124M_B%d_T%d\", \"B\": %d, \"T\": %d, "
                           "\"median_step_ms\": %.4f, \"min_step_ms\": %.4f, \"tokens_per_s\": %.1f, "
                           "\"steps\": %d, \"loss_first\": %.4f, \"loss_last\": %.4f, "
                           "\"activation_bytes\": %zu, \"peak_device_bytes\": %zu}",
                        first ? "" : ",", B, T, B, T, med * 1e3, dt[0] * 1e3, n / med, steps,
                        loss0, loss, llmt__cuda_gpt2_activation_bytes(g), ms.peak_in_use);
                first = 0;
            }
        }
        free(tok);
        free(dt);
        llmt__cuda_gpt2_destroy(g);
        llmt__cuda_ctx_destroy(X);
    }
    if (J) {
        fprintf(J, "\n]}\n");
        fclose(J);
    }
    return fail;
}
