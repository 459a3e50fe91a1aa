/* Cross-implementation check against llm.c: a GPT-2 model made by us and
 * exported in llm.c's format is trained one step by llm.c's CPU trainer
 * (the driver built by test_llmc_cross.sh) and by ours on the same tokens;
 * the step-0 loss must agree to 1e-5 (relative) and the loss after the
 * AdamW update to 1e-4 (the summation order of the GEMMs differs).
 * usage: llmc_cross DRIVER DIR LAYERS WIDTH HEADS MAXT B T */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"

int main(int argc, char **argv)
{
    if (argc != 9) {
        fprintf(stderr, "usage: llmc_cross DRIVER DIR LAYERS WIDTH HEADS MAXT B T\n");
        return 2;
    }
    const char *driver = argv[1], *dir = argv[2];
    int L = atoi(argv[3]), C = atoi(argv[4]), NH = atoi(argv[5]);
    int maxT = atoi(argv[6]), B = atoi(argv[7]), T = atoi(argv[8]);
    const float lr = 1e-3f;
    llmt_context *ctx = NULL;
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    llmt_model_config c;
    llmt_model_config_init(&c, sizeof c);
    c.arch = LLMT_ARCH_GPT2;
    c.vocab_size = 50257;
    c.padded_vocab_size = 50304; /* as llm.c pads */
    c.max_seq_len = maxT;
    c.layers = L;
    c.width = C;
    c.heads = NH;
    c.seed = 42;
    llmt_model *m = NULL;
    CHECK_STATUS(llmt_model_create(ctx, &c, &m), LLMT_OK);
    if (!m) return check_exit("llmc-cross");
    /* the llm.c header records vocab and padded vocab: nonzero pad rows
     * would show up nowhere, so zero them as llm.c's own export does */
    llmt_tensor wte;
    llmt_model_find_param(m, "wte", &wte);
    memset((float *)wte.data + (size_t)c.vocab_size * C, 0,
           sizeof(float) * (size_t)(c.padded_vocab_size - c.vocab_size) * C);
    char mpath[1024], tpath[1024], cmd[4096];
    snprintf(mpath, sizeof mpath, "%s/model.bin", dir);
    snprintf(tpath, sizeof tpath, "%s/tokens.bin", dir);
    CHECK_STATUS(llmt_model_export_llmc(m, mpath), LLMT_OK);

    int n = B * T + 1;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t s = 12345;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((s >> 33) % (uint64_t)c.vocab_size);
    }
    FILE *f = fopen(tpath, "wb");
    CHECK(f && fwrite(tok, sizeof(int32_t), (size_t)n, f) == (size_t)n);
    if (f) fclose(f);

    /* ours: the same file re-imported, so the test also covers the import */
    llmt_model *m2 = NULL;
    CHECK_STATUS(llmt_model_import_llmc(ctx, mpath, &m2), LLMT_OK);
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = B;
    o.seq_len = T;
    o.schedule = LLMT_LR_CONSTANT;
    o.lr = lr;
    o.weight_decay = 0.0f;
    o.grad_clip = 0.0f; /* llm.c's CPU trainer has no clipping */
    o.beta1 = 0.9f;
    o.beta2 = 0.95f;
    llmt_trainer *tr = NULL;
    float ours0 = -1, ours1 = -1;
    if (m2) CHECK_STATUS(llmt_trainer_create(m2, &o, &tr), LLMT_OK);
    if (tr) {
        llmt_batch b = {sizeof b, tok, tok + 1, B, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        CHECK_STATUS(llmt_trainer_step(tr, &b, &met), LLMT_OK);
        ours0 = met.loss;
        CHECK_STATUS(llmt_trainer_evaluate(tr, &b, &ours1), LLMT_OK);
    }

    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' %d %d %g", driver, mpath, tpath,
             B, T, (double)lr);
    FILE *p = popen(cmd, "r");
    float ref0 = -1, ref1 = -1;
    char line[512];
    int got = 0;
    while (p && fgets(line, sizeof line, p))
        if (sscanf(line, "llmc loss0 %f loss1 %f", &ref0, &ref1) == 2) got = 1;
    int rc = p ? pclose(p) : -1;
    CHECK(rc == 0);
    CHECK(got);
    printf("step-0 loss: ours %.7f llm.c %.7f (rel diff %.2e)\n", ours0, ref0,
           (double)((ours0 - ref0) / ref0));
    printf("after one AdamW step: ours %.7f llm.c %.7f (rel diff %.2e)\n",
           ours1, ref1, (double)((ours1 - ref1) / ref1));
    CHECK_CLOSE(ours0, ref0, 1e-5, 0);
    CHECK_CLOSE(ours1, ref1, 1e-4, 0);
    CHECK(ours1 < ours0); /* it learned */
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m2);
    llmt_model_destroy(m);
    llmt_context_destroy(ctx);
    free(tok);
    return check_exit("llmc-cross");
}
