/* The benchmark's GPU GPT-2 step (bench/gpu/gpt2.cu, bf16, built into
 * this program: it is not in the library) against the CPU trainer
 * (lib/train, fp32) from the same initial weights: 20 AdamW steps on the
 * same batches; each step's loss must agree within a bf16 tolerance
 * (|gpu - cpu| <= 0.02 + 0.01 * cpu), and the GPU's grad norm within 10%.
 * SKIPs (77) without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmtrain.h"
#include "check.h"
#include "gpu_util.h"
#include "../../bench/gpu/gpt2.h"

#define NL 2
#define NC 64
#define NHEAD 2
#define NV 100
#define NVP 128
#define NT 48
#define NB 3
#define NSTEPS 20

static void batch_for(int k, int32_t *in, int32_t *tg)
{
    uint64_t s = 0x1234u + (uint64_t)k * 977u;
    int32_t tok = 0;
    for (int i = 0; i <= NB * NT; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(s >> 33);
        tok = (r & 7) == 0 ? (int32_t)((r >> 3) % NV) : (tok * 5 + 1) % NV;
        if (i < NB * NT) in[i] = tok;
        if (i > 0) tg[i - 1] = tok;
    }
}

int main(void)
{
    int32_t ndev = 0;
    char err[256] = "";
    if (llmt__cuda_device_count(&ndev, err, sizeof err) != LLMT_OK || ndev == 0) {
        printf("SKIP: no CUDA device (%s)\n", err);
        return 77;
    }
    llmt_context *ctx = NULL;
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    CHECK_STATUS(llmt_context_create(&co, &ctx), LLMT_OK);
    llmt_model_config mc;
    llmt_model_config_init(&mc, sizeof mc);
    mc.vocab_size = NV; mc.padded_vocab_size = NVP; mc.max_seq_len = NT; mc.layers = NL;
    mc.width = NC; mc.heads = NHEAD; mc.seed = 11;
    llmt_model *m = NULL;
    CHECK_STATUS(llmt_model_create(ctx, &mc, &m), LLMT_OK);
    llmt_trainer_opts to;
    llmt_trainer_opts_init(&to, sizeof to);
    to.micro_batch = NB; to.seq_len = NT; to.schedule = LLMT_LR_CONSTANT; to.lr = 1e-3f;
    to.weight_decay = 0.0f; to.grad_clip = 1.0f; to.threads = 2;
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt_trainer_create(m, &to, &tr), LLMT_OK);
    if (!m || !tr) return 1;

    /* the CPU model's weights in llm.c order */
    const char *kinds[12] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                             "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                             "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    size_t cap = 0, n = 0;
    int32_t count = 0;
    int64_t numel = 0;
    llmt_model_param_count(m, &count, &numel);
    cap = (size_t)numel;
    float *flat = malloc(cap * 4);
    char name[96];
#define ADD(nm)                                                                     \
    do {                                                                            \
        llmt_tensor tv;                                                             \
        memset(&tv, 0, sizeof tv);                                                  \
        tv.struct_size = sizeof tv;                                                 \
        if (llmt_model_find_param(m, nm, &tv) != LLMT_OK) { printf("no %s\n", nm); return 1; } \
        size_t k = 1;                                                               \
        for (int d = 0; d < tv.ndim; d++) k *= (size_t)tv.shape[d];                 \
        memcpy(flat + n, tv.data, k * 4);                                           \
        n += k;                                                                     \
    } while (0)
    ADD("wte");
    ADD("wpe");
    for (int k = 0; k < 12; k++)
        for (int l = 0; l < NL; l++) {
            snprintf(name, sizeof name, "h.%d.%s", l, kinds[k]);
            ADD(name);
        }
    ADD("ln_f.weight");
    ADD("ln_f.bias");
    CHECK_EQ_INT(n, cap);

    llmt__cuda_ctx *X = NULL;
    llmt__cuda_ctx_opts o = {0, 0, 0, 0, NULL, 0};
    CHECK_STATUS(llmt__cuda_ctx_create(&o, &X), LLMT_OK);
    llmt__cuda_gpt2_cfg gc;
    llmt__cuda_gpt2_cfg_init(&gc);
    gc.L = NL; gc.C = NC; gc.nh = NHEAD; gc.V = NV; gc.Vp = NVP; gc.maxT = NT; gc.B = NB; gc.T = NT;
    gc.lr = 1e-3f; gc.wd = 0.0f; gc.clip = 1.0f;
    llmt__cuda_gpt2 *g = NULL;
    CHECK_STATUS(llmt__cuda_gpt2_create(X, &gc, &g), LLMT_OK);
    if (!g) return 1;
    CHECK_EQ_INT(llmt__cuda_gpt2_num_params(g), n);
    if (llmt__cuda_gpt2_load(g, flat, n) != LLMT_OK) {
        printf("load: %s\n", llmt__cuda_ctx_last_error(X));
        return 1;
    }
    int32_t in[NB * NT], tg[NB * NT];
    double worst = 0;
    for (int s = 0; s < NSTEPS; s++) {
        batch_for(s, in, tg);
        llmt_batch bt = {sizeof bt, in, tg, NB, NT};
        llmt_step_metrics sm;
        memset(&sm, 0, sizeof sm);
        sm.struct_size = sizeof sm;
        CHECK_STATUS(llmt_trainer_step(tr, &bt, &sm), LLMT_OK);
        float gl = 0, gn = 0;
        CHECK_STATUS(llmt__cuda_gpt2_step(g, in, tg, 1, &gl, &gn), LLMT_OK);
        double d = fabs(gl - sm.loss), tol = 0.02 + 0.01 * fabs(sm.loss);
        if (d / tol > worst) worst = d / tol;
        printf("step %2d  cpu loss %.5f norm %.4f  gpu loss %.5f norm %.4f  |dloss| %.5f\n", s + 1,
               sm.loss, sm.grad_norm, gl, gn, d);
        CHECK(d <= tol);
        CHECK(fabs(gn - sm.grad_norm) <= 0.1 * sm.grad_norm);
    }
    printf("worst |dloss| / tolerance = %.3f\n", worst);
    llmt__cuda_gpt2_destroy(g);
    llmt__cuda_ctx_destroy(X);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    llmt_context_destroy(ctx);
    free(flat);
    printf("%d checks, %d failures\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}
