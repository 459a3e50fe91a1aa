/* Runs a tiny model through the public ABI and writes what the PyTorch
 * reference (torch_equiv.py) compares: initial weights (safetensors), the
 * batches, loss and every gradient of step 0, and the losses of 10 AdamW
 * steps. usage: torch_driver gpt2|llama OUTDIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmtrain.h"

#define STEPS 10

static int fail(const char *what, llmt_status s, const char *detail)
{
    fprintf(stderr, "torch_driver: %s: %s: %s\n", what, llmt_status_string(s),
            detail);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: torch_driver gpt2|llama OUTDIR\n");
        return 2;
    }
    int llama = strcmp(argv[1], "llama") == 0;
    const char *dir = argv[2];
    char path[4096];
    llmt_context *ctx;
    llmt_context_create(NULL, &ctx);
    llmt_model_config cfg;
    llmt_model_config_init(&cfg, sizeof cfg);
    cfg.arch = llama ? LLMT_ARCH_LLAMA : LLMT_ARCH_GPT2;
    cfg.vocab_size = llama ? 61 : 67;
    cfg.padded_vocab_size = llama ? 64 : 72;
    cfg.max_seq_len = 16;
    cfg.layers = 2;
    cfg.width = 32;
    cfg.heads = 4;
    cfg.kv_heads = llama ? 2 : 0;
    cfg.ffn_hidden = llama ? 48 : 0;
    cfg.seed = 42;
    cfg.init_std = 0.1f; /* larger than 0.02 so the layers matter */
    llmt_model *m;
    llmt_status s = llmt_model_create(ctx, &cfg, &m);
    if (s) return fail("model_create", s, llmt_context_last_error(ctx));
    snprintf(path, sizeof path, "%s/params.safetensors", dir);
    if ((s = llmt_model_save_safetensors(m, path)))
        return fail("save", s, llmt_model_last_error(m));

    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = 2;
    o.seq_len = 8;
    o.grad_accum = 2;
    o.lr = 1e-2f;
    o.min_lr = 1e-3f;
    o.warmup_steps = 2;
    o.total_steps = STEPS;
    o.schedule = LLMT_LR_COSINE;
    o.weight_decay = 0.1f;
    o.grad_clip = 0.5f;
    o.beta2 = 0.95f;
    llmt_trainer *tr;
    if ((s = llmt_trainer_create(m, &o, &tr)))
        return fail("trainer_create", s, llmt_model_last_error(m));

    int per = o.micro_batch * o.grad_accum * o.seq_len;
    int32_t *tok = malloc(sizeof(int32_t) * per * 2 * STEPS);
    uint32_t r = 12345;
    for (int st = 0; st < STEPS; st++) {
        int32_t *in = tok + st * 2 * per, *tg = in + per;
        for (int i = 0; i < per; i++) {
            r = r * 1664525u + 1013904223u;
            in[i] = (int32_t)((r >> 8) % (uint32_t)cfg.vocab_size);
        }
        for (int i = 0; i < per; i++) {
            r = r * 1664525u + 1013904223u;
            tg[i] = (int32_t)((r >> 8) % (uint32_t)cfg.vocab_size);
        }
        tg[3] = -1; /* an ignored position */
    }
    snprintf(path, sizeof path, "%s/batches.bin", dir);
    FILE *f = fopen(path, "wb");
    fwrite(tok, sizeof(int32_t), (size_t)per * 2 * STEPS, f);
    fclose(f);

    llmt_batch b = {sizeof b, tok, tok + per, o.micro_batch * o.grad_accum,
                    o.seq_len};
    float loss0;
    if ((s = llmt_trainer_forward_backward(tr, &b, &loss0)))
        return fail("forward_backward", s, llmt_trainer_last_error(tr));
    int32_t np;
    llmt_model_param_count(m, &np, NULL);
    snprintf(path, sizeof path, "%s/grads.bin", dir);
    f = fopen(path, "wb");
    for (int i = 0; i < np; i++) {
        llmt_tensor g;
        int64_t n;
        llmt_trainer_grad(tr, i, &g);
        llmt_tensor_numel(&g, &n);
        fwrite(g.data, sizeof(float), (size_t)n, f);
    }
    fclose(f);

    float losses[STEPS], lrs[STEPS], norms[STEPS];
    for (int st = 0; st < STEPS; st++) {
        llmt_batch bs = {sizeof bs, tok + st * 2 * per, tok + st * 2 * per + per,
                         o.micro_batch * o.grad_accum, o.seq_len};
        llmt_step_metrics met;
        llmt_step_metrics_init(&met, sizeof met);
        if ((s = llmt_trainer_step(tr, &bs, &met)))
            return fail("step", s, llmt_trainer_last_error(tr));
        losses[st] = met.loss;
        lrs[st] = met.lr;
        norms[st] = met.grad_norm;
    }
    snprintf(path, sizeof path, "%s/result.json", dir);
    f = fopen(path, "w");
    fprintf(f, "{\"arch\": \"%s\", \"vocab\": %d, \"padded_vocab\": %d, "
               "\"layers\": %d, \"width\": %d, \"heads\": %d, \"kv_heads\": %d, "
               "\"ffn\": %d, \"eps\": %.9g, \"theta\": %.9g, \"B\": %d, \"T\": %d, "
               "\"accum\": %d, \"steps\": %d, \"lr\": %.9g, \"min_lr\": %.9g, "
               "\"warmup\": %d, \"wd\": %.9g, \"clip\": %.9g, \"beta1\": %.9g, "
               "\"beta2\": %.9g, \"adam_eps\": %.9g, \"loss0\": %.9g",
            argv[1], cfg.vocab_size, cfg.padded_vocab_size, cfg.layers,
            cfg.width, cfg.heads, llama ? cfg.kv_heads : cfg.heads,
            llama ? 48 : 4 * cfg.width, (double)cfg.norm_eps,
            (double)cfg.rope_theta, o.micro_batch, o.seq_len, o.grad_accum,
            STEPS, (double)o.lr, (double)o.min_lr, (int)o.warmup_steps,
            (double)o.weight_decay, (double)o.grad_clip, (double)o.beta1,
            (double)o.beta2, (double)o.eps, (double)loss0);
    const char *keys[3] = {"losses", "lrs", "norms"};
    float *vals[3] = {losses, lrs, norms};
    for (int k = 0; k < 3; k++) {
        fprintf(f, ", \"%s\": [", keys[k]);
        for (int st = 0; st < STEPS; st++)
            fprintf(f, "%s%.9g", st ? ", " : "", (double)vals[k][st]);
        fprintf(f, "]");
    }
    fprintf(f, ", \"names\": [");
    for (int i = 0; i < np; i++) {
        const char *name;
        llmt_tensor t;
        llmt_model_param(m, i, &name, &t);
        fprintf(f, "%s\"%s\"", i ? ", " : "", name);
    }
    fprintf(f, "]}\n");
    fclose(f);
    free(tok);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    llmt_context_destroy(ctx);
    return 0;
}
