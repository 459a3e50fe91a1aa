/* GPT-2 124M training steps on the GPU through the public trainer
 * (llmt_trainer_step with device = LLMT_DEVICE_CUDA: lib/train/device.c on
 * the CUDA op table): tokens/s at several batch sizes, T = 1024, on one
 * fixed random batch (the step's cost does not depend on the data). Also
 * checks that the step trains: the first loss is near ln(50257) = 10.8 and
 * the loss falls over the timed steps. llm.c (bench/gpu/llmc_peer.sh) and
 * torch.compile (bench/gpu/gpt2_torch.py) are its peers; tools/gpu-check.sh
 * --gpt2 puts the three side by side by case name.
 *
 *   bench_gpt2 [--B 16,32,64] [--T 1024] [--steps N] [--json FILE]
 *
 * Until 2026-11-26 this program also carried its own GPT-2 step
 * (gpt2.cu beside this file, the first engine that ran on an H100); on an H200
 * the trainer ran at 0.987x its tokens/s (B 16: 396670 vs 401845,
 * bench/results/gpu-h200-20261126.json), so it was deleted as issue 22
 * asks: there is one engine.
 *
 * Exits 77 without a GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "llmtrain.h"

static unsigned long long rng_state = 0x2545F4914F6CDD1Dull;

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One B; 0 on success. */
static int bench_one(FILE *J, int *first, int B, int T, int steps, int warm)
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
    for (size_t i = 0; i <= n; i++)
        tok[i] = (int32_t)(bench_rand(&rng_state) % 50257);
    if (llmt_model_create(ctx, &mc, &m) != LLMT_OK) {
        printf("B=%d: %s\n", B, llmt_context_last_error(ctx));
        goto out;
    }
    if (llmt_trainer_create(m, &to, &tr) != LLMT_OK) {
        printf("B=%d: %s\n", B, llmt_model_last_error(m));
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
        double t0 = bench_now();
        if (llmt_trainer_step(tr, &b, &met) != LLMT_OK) goto fail;
        dt[s] = bench_now() - t0;
    }
    qsort(dt, steps, sizeof *dt, cmpd);
    double med = dt[steps / 2];
    llmt_trainer_memory mem;
    memset(&mem, 0, sizeof mem);
    mem.struct_size = sizeof mem;
    llmt_trainer_memory_usage(tr, &mem);
    int trains = loss0 > 10.0f && loss0 < 11.6f && met.loss < loss0 - 0.1f;
    printf("gpt2-124M B=%-3d T=%d: step median %.2f ms (min %.2f) %9.0f tok/s  loss "
           "%.3f -> %.3f (%s)  activations %.2f GiB  peak %.2f GiB\n",
           B, T, med * 1e3, dt[0] * 1e3, n / med, loss0, met.loss,
           trains ? "trains" : "NOT TRAINING", mem.device_activations / 1073741824.0,
           mem.device_peak / 1073741824.0);
    if (J) {
        fprintf(J,
                "%s\n  {\"name\": \"gpt2_124M_B%d_T%d\", \"engine\": \"trainer\", "
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
    printf("B=%d: step failed: %s\n", B, llmt_trainer_last_error(tr));
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
    const char *json = NULL, *blist = "16,32,64";
    int T = 1024, steps = 20, warm = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--B") && i + 1 < argc) blist = argv[++i];
        else if (!strcmp(argv[i], "--T") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_gpt2 [--B list] [--T n] [--steps n] [--json F]\n");
            return 2;
        }
    }
    if (steps < 1 || T < 2) {
        fprintf(stderr, "bench_gpt2: --steps and --T must be positive\n");
        return 2;
    }
    int32_t ndev = 0;
    llmt_status st = llmt_cuda_device_count(&ndev);
    if (st != LLMT_OK || ndev == 0) {
        printf("SKIP: no CUDA device (%s)\n",
               st == LLMT_OK ? "none visible" : llmt_status_string(st));
        return 77;
    }
    FILE *J = json ? fopen(json, "w") : NULL;
    if (json && !J) {
        fprintf(stderr, "bench_gpt2: cannot write %s\n", json);
        return 1;
    }
    if (J) fprintf(J, "{\"suite\": \"gpu-gpt2\", \"model\": \"gpt2-124M\", \"T\": %d, \"results\": [", T);
    int first = 1, fail = 0;
    char bl[128];
    snprintf(bl, sizeof bl, "%s", blist);
    for (char *tokp = strtok(bl, ","); tokp; tokp = strtok(NULL, ","))
        fail |= bench_one(J, &first, atoi(tokp), T, steps, warm);
    if (J) {
        fprintf(J, "\n]}\n");
        fclose(J);
    }
    return fail;
}
