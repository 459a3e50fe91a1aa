/* A Llama-style ~1B model's training step on the GPU through the public
 * trainer (llmt_trainer_opts.device = LLMT_DEVICE_CUDA): tokens/s, MFU and
 * peak device memory at several batch sizes. bench/gpu/llama_torch.py is
 * the PyTorch peer on the same shape; tools/gpu-check.sh --llama runs both
 * and puts them side by side.
 *
 *   bench_llama [--model 1b|tiny] [--B 2,4,8] [--T 2048] [--steps N]
 *               [--json FILE] [--peak-tflops 989] [--device cuda|cpu] [--fp8 0|1]
 *
 * "1b" is TinyLlama-1.1B's shape (22 layers, width 2048, 32 heads, 4 kv
 * heads, SwiGLU 5632, vocabulary 32000, untied head); "tiny" is a small
 * model for a quick run. One fixed random batch, warm-up steps, then the
 * median of N timed steps (a step reads its loss back, so the wall time of
 * llmt_trainer_step is the step's time). The step must train: the first
 * loss near ln(32000) = 10.37 and the loss falling.
 *
 * MFU = model FLOPs per token x tokens/s / peak, with the planner's count
 * of model FLOPs (below); the 6N count is printed and recorded beside it.
 * The peak defaults to an H100 SXM's dense bf16 989 TFLOP/s.
 *
 * Exits 77 without a GPU or when the trainer answers UNSUPPORTED, 1 when a
 * step fails or the loss does not fall. A B whose trainer cannot get its
 * memory is recorded as {"oom": true} and the others still run.
 * --device cpu runs the same code on the CPU trainer: a check of the
 * benchmark itself on a machine without a GPU (its MFU means nothing).
 * --fp8 1 runs the blocks' Linear layers' GEMMs in fp8, forward and
 * backward (E4M3 activations and weights, E5M2 gradients, delayed
 * per-tensor scaling: llmt_trainer_opts.fp8; before 2026-11-27 the
 * forward only); cases are named llama_<model>_fp8_B<B>_T<T>. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "llmtrain.h"

#define WARMUP 3
#define H100_SXM_BF16_TFLOPS 989.0

typedef struct shape {
    const char *name;
    int layers, width, heads, kv_heads, ffn, vocab;
} shape;

static const shape shapes[] = {
    {"1b", 22, 2048, 32, 4, 5632, 32000}, /* TinyLlama-1.1B */
    {"tiny", 2, 256, 4, 2, 704, 32000},   /* same head dim, GQA, ffn = 2.75 width */
};

typedef struct run_opts {
    const shape *sh;
    int T, steps, device, fp8;
    double peak_tflops;
} run_opts;

static void make_config(const run_opts *o, llmt_model_config *mc)
{
    llmt_model_config_init(mc, sizeof *mc);
    mc->arch = LLMT_ARCH_LLAMA;
    mc->vocab_size = o->sh->vocab;
    mc->padded_vocab_size = o->sh->vocab; /* 32000 = 250 x 128 */
    mc->max_seq_len = o->T;
    mc->layers = o->sh->layers;
    mc->width = o->sh->width;
    mc->heads = o->sh->heads;
    mc->kv_heads = o->sh->kv_heads;
    mc->ffn_hidden = o->sh->ffn;
    mc->tie_embeddings = 0;
    mc->norm_eps = 1e-5f;
    mc->rope_theta = 10000.0f;
}

/* Model FLOPs per token exactly as the planner counts them
 * (lib/plan/cost.c, llmt__plan_estimate: model_flops_per_token =
 * 3 * (2 L (P_attn + P_mlp) + 2 V h + L * 2 * 2 * S * h)): 2 FLOPs per
 * multiply-add, the backward twice the forward, the attention core (QK^T
 * and AV) without the causal halving (PaLM's and Megatron's convention).
 * P_attn = 2 h^2 + 2 h g d (q and o; k and v for g kv heads of d),
 * P_mlp = 3 h f (SwiGLU: w1, w3, w2), V the vocabulary, S = T. bench/gpu/
 * llama_torch.py repeats this formula; keep the two equal. */
static double model_flops_per_token(const llmt_model_config *c, int T)
{
    double L = c->layers, h = c->width, a = c->heads, g = c->kv_heads;
    double d = h / a, f = c->ffn_hidden, V = c->vocab_size, S = T;
    double P_attn = 2 * h * h + 2 * h * g * d;
    double P_mlp = 3 * h * f;
    return 3 * (2 * L * (P_attn + P_mlp) + 2 * V * h + L * 2 * 2 * S * h);
}

static unsigned long long rng_state = 0x9E3779B97F4A7C15ull;

/* Copy the model's parameters to (save) or from a flat fp32 buffer: every
 * B starts from the same initial weights without initialising 1.1B
 * parameters again (that takes half a minute on one core). */
static void params_copy(llmt_model *m, float *buf, int save)
{
    int32_t count = 0;
    int64_t numel = 0;
    llmt_model_param_count(m, &count, &numel);
    for (int32_t i = 0; i < count; i++) {
        llmt_tensor t = {.struct_size = sizeof(llmt_tensor)};
        if (llmt_model_param(m, i, NULL, &t) != LLMT_OK) continue;
        size_t n = 1;
        for (int d = 0; d < t.ndim; d++) n *= (size_t)t.shape[d];
        if (save) memcpy(buf, t.data, n * sizeof(float));
        else memcpy(t.data, buf, n * sizeof(float));
        buf += n;
    }
}

/* One B; 0 when it trains (or ran out of memory: recorded), 1 when it
 * failed, 77 when the trainer says the device cannot run it. */
static int run_one(const run_opts *o, llmt_model *m, float *init, int B, FILE *J,
                   int *first)
{
    static bench_ctx H; /* bench_record's median and table row */
    const int T = o->T, steps = o->steps;
    char name[96];
    snprintf(name, sizeof name, "llama_%s%s_B%d_T%d", o->sh->name, o->fp8 ? "_fp8" : "", B, T);
    llmt_trainer *tr = NULL;
    size_t n = (size_t)B * T;
    int32_t *tok = malloc((n + 1) * sizeof *tok);
    double *dt = malloc((size_t)steps * sizeof *dt);
    int rc = 1;
    llmt_status st;
    if (!tok || !dt) {
        printf("%s: no memory\n", name);
        goto out;
    }
    for (size_t i = 0; i <= n; i++)
        tok[i] = (int32_t)(bench_rand(&rng_state) % (uint32_t)o->sh->vocab);
    params_copy(m, init, 0);
    llmt_model_config mc;
    llmt_model_config_init(&mc, sizeof mc);
    llmt_model_get_config(m, &mc); /* as resolved by the model */
    int32_t nt = 0;
    int64_t nparams = 0;
    llmt_model_param_count(m, &nt, &nparams);
    llmt_trainer_opts to;
    llmt_trainer_opts_init(&to, sizeof to);
    to.micro_batch = B;
    to.seq_len = T;
    to.schedule = LLMT_LR_CONSTANT; /* as llama_torch.py */
    to.lr = 3e-4f;
    to.beta1 = 0.9f;
    to.beta2 = 0.95f;
    to.weight_decay = 0.0f;
    to.grad_clip = 1.0f;
    to.device = o->device;
    to.fp8 = o->fp8;
    if ((st = llmt_trainer_create(m, &to, &tr)) != LLMT_OK) {
        printf("%s: trainer: %s (%s)\n", name, llmt_model_last_error(m),
               llmt_status_string(st));
        if (st == LLMT_ERR_UNSUPPORTED) {
            rc = 77;
        } else if (st == LLMT_ERR_OUT_OF_MEMORY) {
            if (J) {
                fprintf(J, "%s\n  {\"name\": \"%s\", \"B\": %d, \"T\": %d, \"oom\": true}",
                        *first ? "" : ",", name, B, T);
                *first = 0;
            }
            rc = 0;
        }
        goto out;
    }
    llmt_batch b = {sizeof b, tok, tok + 1, B, T};
    llmt_step_metrics met = {.struct_size = sizeof(llmt_step_metrics)};
    float loss0 = 0;
    for (int s = 0; s < WARMUP + steps; s++) {
        double t0 = bench_now();
        if ((st = llmt_trainer_step(tr, &b, &met)) != LLMT_OK) {
            printf("%s: step %d: %s (%s)\n", name, s, llmt_trainer_last_error(tr),
                   llmt_status_string(st));
            goto out;
        }
        if (s >= WARMUP) dt[s - WARMUP] = bench_now() - t0;
        if (s == 0) loss0 = met.loss;
    }
    if (!H.suite) H.suite = "gpu-llama";
    H.count = 0; /* keep only this B's row */
    const bench_result *r = bench_record(&H, name, dt, steps, (double)n, "tok");
    if (!r) goto out;
    double med = r->median_s, tps = n / med;
    double mf = model_flops_per_token(&mc, T), f6 = 6.0 * (double)nparams;
    double peak = o->peak_tflops * 1e12;
    llmt_trainer_memory mem = {.struct_size = sizeof(llmt_trainer_memory)};
    llmt_trainer_memory_usage(tr, &mem);
    double lnv = log((double)o->sh->vocab);
    int trains = loss0 > lnv - 0.8 && loss0 < lnv + 1.2 && met.loss < loss0 - 0.1f;
    printf("llama-%s B=%-2d T=%d: step median %.2f ms (min %.2f) %8.0f tok/s  MFU %.1f%% "
           "(6N: %.1f%%) of %.0f TFLOP/s  loss %.3f -> %.3f (%s)  activations %.2f GiB  "
           "peak %.2f GiB\n", o->sh->name, B, T, med * 1e3, r->min_s * 1e3, tps,
           100 * mf * tps / peak, 100 * f6 * tps / peak, o->peak_tflops, loss0, met.loss,
           trains ? "trains" : "NOT TRAINING", mem.device_activations / 1073741824.0,
           mem.device_peak / 1073741824.0);
    fflush(stdout);
    if (J) {
        fprintf(J, "%s\n  {\"name\": \"%s\", \"engine\": \"trainer\", \"B\": %d, \"T\": %d, "
                   "\"median_step_ms\": %.4f, \"min_step_ms\": %.4f, \"tokens_per_s\": %.1f, "
                   "\"steps\": %d, \"mfu\": %.6g, \"mfu_6n\": %.6g, "
                   "\"model_flops_per_token\": %.0f, \"flops_6n_per_token\": %.0f, "
                   "\"tflops\": %.2f, \"peak_tflops\": %.1f, \"loss_first\": %.4f, "
                   "\"loss_last\": %.4f, \"trains\": %s, \"peak_device_bytes\": %lld, "
                   "\"activation_bytes\": %lld}",
                *first ? "" : ",", name, B, T, med * 1e3, r->min_s * 1e3, tps, steps,
                mf * tps / peak, f6 * tps / peak, mf, f6, mf * tps / 1e12, o->peak_tflops,
                loss0, met.loss, trains ? "true" : "false", (long long)mem.device_peak,
                (long long)mem.device_activations);
        *first = 0;
    }
    rc = trains ? 0 : 1;
out:
    llmt_trainer_destroy(tr);
    free(tok);
    free(dt);
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_llama [--model 1b|tiny] [--B 2,4,8] [--T 2048] [--steps N] "
                    "[--json FILE] [--peak-tflops 989] [--device cuda|cpu] [--fp8 0|1]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *json = NULL, *blist = "2,4,8", *model = "1b", *dev = "cuda";
    run_opts o = {NULL, 2048, 10, LLMT_DEVICE_CUDA, 0, H100_SXM_BF16_TFLOPS};
    int peak_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(a, "--json")) json = v;
        else if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--B")) blist = v;
        else if (!strcmp(a, "--T")) o.T = atoi(v);
        else if (!strcmp(a, "--steps")) o.steps = atoi(v);
        else if (!strcmp(a, "--peak-tflops")) o.peak_tflops = atof(v), peak_given = 1;
        else if (!strcmp(a, "--device")) dev = v;
        else if (!strcmp(a, "--fp8"))
            o.fp8 = atoi(v);
        else return usage();
        i++;
    }
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        if (!strcmp(model, shapes[i].name)) o.sh = &shapes[i];
    if (!o.sh || o.T < 2 || o.steps < 1 || !(o.peak_tflops > 0) || (o.fp8 != 0 && o.fp8 != 1))
        return usage();
    if (!strcmp(dev, "cpu")) {
        o.device = LLMT_DEVICE_CPU;
    } else if (strcmp(dev, "cuda")) {
        return usage();
    } else {
        int32_t ndev = 0;
        llmt_status st = llmt_cuda_device_count(&ndev);
        if (st != LLMT_OK || ndev == 0) {
            printf("SKIP: no CUDA device (%s)\n",
                   st == LLMT_OK ? "none visible" : llmt_status_string(st));
            return 77;
        }
    }
    const char *peak_src = peak_given ? "--peak-tflops" : "default: H100 SXM dense bf16";
    llmt_model_config mc;
    make_config(&o, &mc);
    llmt_context *ctx = NULL;
    llmt_model *m = NULL;
    float *init = NULL;
    FILE *J = NULL;
    int32_t count = 0;
    int64_t numel = 0;
    int first = 1, rc = 1;
    if (llmt_context_create(NULL, &ctx) != LLMT_OK) goto out;
    if (llmt_model_create(ctx, &mc, &m) != LLMT_OK) {
        printf("bench_llama: model: %s\n", llmt_context_last_error(ctx));
        goto out;
    }
    llmt_model_param_count(m, &count, &numel);
    if (!(init = malloc((size_t)numel * sizeof *init))) {
        printf("bench_llama: no memory for a copy of %lld parameters\n", (long long)numel);
        goto out;
    }
    params_copy(m, init, 1);
    printf("llama-%s: %d layers, width %d, %d heads (%d kv), ffn %d, vocab %d, T %d; %.4g "
           "parameters; model FLOPs/token %.4g (6N %.4g); peak %.0f TFLOP/s (%s)\n",
           o.sh->name, mc.layers, mc.width, mc.heads, mc.kv_heads, mc.ffn_hidden,
           mc.vocab_size, o.T, (double)numel, model_flops_per_token(&mc, o.T), 6.0 * numel,
           o.peak_tflops, peak_src);
    if (json && !(J = fopen(json, "w"))) {
        perror(json);
        goto out;
    }
    if (J)
        fprintf(J, "{\"suite\": \"gpu-llama\", \"model\": \"llama-%s\", \"device\": \"%s\", "
                   "\"config\": {\"layers\": %d, \"width\": %d, \"heads\": %d, "
                   "\"kv_heads\": %d, \"ffn_hidden\": %d, \"vocab\": %d, "
                   "\"tie_embeddings\": 0, \"norm_eps\": 1e-5, \"rope_theta\": 10000}, "
                   "\"params\": %lld, \"T\": %d, \"peak_tflops\": %.1f, "
                   "\"peak_tflops_source\": \"%s\", "
                   "\"mfu_formula\": \"lib/plan/cost.c model_flops_per_token\", "
                   "\"results\": [", o.sh->name, dev, mc.layers, mc.width, mc.heads,
                mc.kv_heads, mc.ffn_hidden, mc.vocab_size, (long long)numel, o.T,
                o.peak_tflops, peak_src);
    rc = 0;
    char bl[256];
    snprintf(bl, sizeof bl, "%s", blist);
    for (char *p = strtok(bl, ","); p; p = strtok(NULL, ",")) {
        int B = atoi(p);
        if (B < 1) {
            fprintf(stderr, "bench_llama: bad batch size '%s'\n", p);
            rc = 2;
            break;
        }
        int r = run_one(&o, m, init, B, J, &first);
        if (r == 77) {
            rc = 77;
            break;
        }
        if (r) rc = 1;
    }
    if (J) {
        fprintf(J, "\n]}\n");
        if (fclose(J)) rc = rc ? rc : 1;
    }
out:
    free(init);
    llmt_model_destroy(m);
    llmt_context_destroy(ctx);
    return rc;
}
