/* Where the device engine (lib/train/device.c) makes the host wait for the
 * device within a training step, counted through the emulation's op table
 * (test/train/devcount.h): on CUDA each h2d and d2h is a cudaMemcpyAsync
 * followed by cudaStreamSynchronize (cuda/mem/mem.cu), so every one in a
 * step drains the GPU's queue and leaves it idle until the host has
 * launched the next kernels.
 *
 * A single-rank step needs two such waits: the batch's tokens go up (one
 * h2d of inputs and targets together, the fp8 scales of the step with
 * them), and one d2h brings back everything the host decides on (the
 * per-token losses, the gradients' sum of squares for clipping and the
 * finite check, the fp8 amaxes for the next scales). Checked for GPT-2 and
 * Llama, bf16 and fp8 forward GEMMs, grad_accum 1 and 4, 2 and 3 layers:
 * the waits per step are at most 2 and grow neither with the layers nor
 * with the micro-batches; allocations within a step are none. Llama's
 * RoPE takes one launch per layer for q and k (k's heads follow q's).
 *
 *   test_device_syncs          the checks
 *   test_device_syncs report   also every op's calls per step and the
 *                              waits' call sites (module offsets for
 *                              addr2line), and the losses in hex */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dev_model_fixture.h"
#include "devcount.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "train/device.h"

#define B 2
#define T 16
#define WAITS_PER_STEP 2 /* tokens up, results down */

static int g_report;

static void batch(int k, int n, int32_t *in, int32_t *tg)
{
    for (int i = 0; i < n; i++) {
        in[i] = (i * 7 + 3 + k * 13) % 97;
        tg[i] = i % 11 == 5 ? -1 : (i * 7 + 10 + k * 13) % 97;
    }
}

typedef struct result {
    long waits, n[DC_COUNT];
    float loss[3];
} result;

/* Two steps, then the third counted. */
static int run(llmt_context *ctx, int llama, int fp8, int accum, int layers, result *r)
{
    llmt_model_config mc;
    dev_model_config(&mc, llama, layers, T, 0, 11);
    llmt_trainer_opts to;
    dev_model_opts(&to, B, accum, T);
    to.grad_clip = 0.5f;
    to.weight_decay = 0.1f;
    to.deterministic = 1;
    to.fp8 = fp8;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    /* host_memory 0: the paths a CUDA engine takes */
    const llmt__dev_ops *t = devcount_table(llmt__dev_emul_staged());
    if (dev_model_open(ctx, &mc, &to, t, &m, &tr) != 0)
        return -1;
    int n = B * T * accum, rc = 0;
    int32_t *in = malloc((size_t)n * 4), *tg = malloc((size_t)n * 4);
    for (int k = 0; k < 3 && in && tg && !rc; k++) {
        batch(k, n, in, tg);
        llmt_batch b = {sizeof b, in, tg, B * accum, T};
        if (k == 2)
            devcount_reset();
        if (rank_fixture_step(tr, &b, &r->loss[k]) != LLMT_OK) {
            fprintf(stderr, "step: %s\n", llmt_trainer_last_error(tr));
            rc = -1;
        }
    }
    r->waits = devcount_waits();
    memcpy(r->n, g_dc.n, sizeof r->n);
    if (g_report) {
        char title[128];
        snprintf(title, sizeof title, "%s %s grad_accum %d layers %d: one step",
                 llama ? "llama" : "gpt2", fp8 ? "fp8" : "bf16", accum, layers);
        devcount_print(stdout, title);
        printf("  losses %a %a %a\n", (double)r->loss[0], (double)r->loss[1],
               (double)r->loss[2]);
    }
    free(in);
    free(tg);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return rc;
}

static void check_case(llmt_context *ctx, int llama, int fp8, int accum)
{
    result r2, r3;
    memset(&r2, 0, sizeof r2);
    memset(&r3, 0, sizeof r3);
    CHECK(run(ctx, llama, fp8, accum, 2, &r2) == 0);
    CHECK(run(ctx, llama, fp8, accum, 3, &r3) == 0);
    fprintf(stderr, "%s %s grad_accum %d: %ld host waits per step (2 layers), %ld (3)\n",
            llama ? "llama" : "gpt2", fp8 ? "fp8" : "bf16", accum, r2.waits, r3.waits);
    CHECK(r2.waits <= WAITS_PER_STEP);
    CHECK(r3.waits == r2.waits); /* none per layer */
    CHECK(r2.n[DC_alloc] == 0 && r3.n[DC_alloc] == 0);
    CHECK(r2.n[DC_host_alloc] == 0);
    /* RoPE: one launch for q and k, forward and backward */
    if (llama)
        CHECK(r3.n[DC_rope] - r2.n[DC_rope] == 2L * accum);
    if (g_report) {
        printf("== %s %s grad_accum %d: calls per layer per micro-batch\n",
               llama ? "llama" : "gpt2", fp8 ? "fp8" : "bf16", accum);
        for (int i = 0; i < DC_COUNT; i++)
            if (r3.n[i] != r2.n[i])
                printf("  op %-20s %g\n", dc_names[i], (double)(r3.n[i] - r2.n[i]) / accum);
    }
}

int main(int argc, char **argv)
{
    g_report = argc > 1 && strcmp(argv[1], "report") == 0;
    llmt_context *ctx = NULL;
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    if (!ctx)
        return check_exit("device-syncs");
    for (int llama = 0; llama < 2; llama++)
        for (int fp8 = 0; fp8 < 2; fp8++) {
            check_case(ctx, llama, fp8, 1);
            check_case(ctx, llama, fp8, 4);
        }
    llmt_context_destroy(ctx);
    return check_exit("device-syncs");
}
