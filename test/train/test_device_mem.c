/* What the device engine keeps per layer (lib/train/device.c's buffer
 * plan), on the bf16 host emulation, which counts the bytes the engine
 * asks for as the CUDA backend's allocations: a model of L + 1 layers
 * holds, beside one of L, exactly one layer's share of what
 * flash-attention training must keep for the backward, computed here from
 * the shapes (not from the planner, which test plan-vs-run holds to the
 * engine):
 *
 *   its input (resid[l]) and res2 (the second norm's input), N x C each;
 *   qkv (N x (C + 2 kv hd)); the attention output (N x C) and its state
 *   (the backend's attn_state floats); the norms' statistics (4 x N
 *   floats); the MLP's two N x F tensors (Llama: gate and up; GPT-2: fc's
 *   pre-activation and GELU output).
 *
 * The norms' outputs and Llama's SwiGLU output are not kept (made again
 * in the backward): a layer more costs nothing for them. Under full
 * recomputation a layer more costs its input only. Beside the layers the
 * engine holds the last layer's output (the final norm's input), the
 * final norm's statistics (not its output: made again too), the logits,
 * and once its backward's scratch: dres, dtmp, one norm output (nrmx),
 * the MLP's (Llama dfch, dfch3, dfchg; GPT-2 dfch) and dq, dk, dv in
 * dfch where they fit (Llama here: Q 128 <= F 160), else their own
 * buffer (GPT-2 here: Q 192), and the gradient norm's float. A step with each
 * recompute mode trains to the same loss bit for bit (test
 * device-trainer checks the whole run). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "dev_model_fixture.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "train/device.h"

#define B 2
#define T 16
#define C 64 /* dev_model_config's width, heads and Llama's kv heads */
#define NH 4
#define KV 2
#define F 160

/* device activation bytes of a fresh emulated trainer, and the loss of
 * one step (-1 on failure) */
static int64_t acts(llmt_context *ctx, int llama, int layers, int recompute, float *loss)
{
    llmt_model_config mc;
    dev_model_config(&mc, llama, layers, T, F, 5);
    llmt_trainer_opts to;
    dev_model_opts(&to, B, 1, T);
    to.recompute = recompute;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    int64_t r = -1;
    if (dev_model_open(ctx, &mc, &to, llmt__dev_emul(), &m, &tr) != 0)
        return -1;
    int32_t in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) {
        in[i] = (i * 7 + 3) % 97;
        tg[i] = (i * 7 + 10) % 97;
    }
    llmt_batch b = {sizeof b, in, tg, B, T};
    float l = 0;
    *loss = rank_fixture_step(tr, &b, &l) == LLMT_OK ? l : -1.0f;
    llmt_trainer_memory mem;
    memset(&mem, 0, sizeof mem);
    mem.struct_size = sizeof mem;
    if (llmt_trainer_memory_usage(tr, &mem) == LLMT_OK)
        r = mem.device_activations;
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return r;
}

static void check_arch(llmt_context *ctx, int llama)
{
    const char *name = llama ? "llama" : "gpt2";
    int64_t N = (int64_t)B * T, hd = C / NH, kv = llama ? KV : NH;
    int64_t Q = C + 2 * kv * hd;
    int64_t state = (int64_t)llmt__dev_emul()->attn_state(B, NH, T);
    /* resid[l], res2, atty; qkv; lse; 4 statistics; two MLP tensors */
    int64_t layer = 3 * N * C * 2 + N * Q * 2 + state * 4 + 4 * N * 4 + 2 * N * F * 2;
    float l2[3], l3[3];
    int64_t a2[3], a3[3];
    for (int r = 0; r < 3; r++) {
        a2[r] = acts(ctx, llama, 2, r, &l2[r]);
        a3[r] = acts(ctx, llama, 3, r, &l3[r]);
        CHECK(a2[r] > 0 && a3[r] > 0);
        CHECK(l2[r] > 0.0f && l3[r] > 0.0f);
    }
    fprintf(stderr,
            "%s: a layer keeps %lld bytes (expected %lld); full recompute %lld "
            "(expected %lld); selective %lld\n",
            name, (long long)(a3[0] - a2[0]), (long long)layer, (long long)(a3[1] - a2[1]),
            (long long)(N * C * 2), (long long)(a3[2] - a2[2]));
    CHECK_EQ_INT(a3[0] - a2[0], layer);
    int64_t rest = N * C * 2 + 2 * N * 4 + N * 128 * 2 + 3 * N * C * 2 +
                   (llama ? 3 : 1) * N * F * 2 + (Q <= F ? 0 : N * Q * 2) + 4;
    fprintf(stderr, "%s: beside the layers %lld bytes (expected %lld)\n", name,
            (long long)(a2[0] - 2 * layer), (long long)rest);
    CHECK_EQ_INT(a2[0] - 2 * layer, rest);
    CHECK_EQ_INT(a3[1] - a2[1], N * C * 2);
    /* selective: one attention output and state for all layers */
    CHECK_EQ_INT(a3[2] - a2[2], layer - N * C * 2 - state * 4);
    /* the same step whatever is kept or made again */
    for (int r = 1; r < 3; r++) {
        CHECK(memcmp(&l2[r], &l2[0], sizeof(float)) == 0);
        CHECK(memcmp(&l3[r], &l3[0], sizeof(float)) == 0);
    }
}

int main(void)
{
    llmt_context *ctx = NULL;
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    if (!ctx)
        return check_exit("device-mem");
    check_arch(ctx, 0);
    check_arch(ctx, 1);
    llmt_context_destroy(ctx);
    return check_exit("device-mem");
}
