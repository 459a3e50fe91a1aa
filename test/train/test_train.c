/* Trainer checks that need no reference implementation: determinism (same
 * seed and threads -> bitwise identical losses and parameters), resume from
 * a checkpoint (bitwise identical continuation of an uninterrupted run, sync
 * and async saves), and bad input (config, tokens, imports, empty batches)
 * failing with a message that names the problem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"

enum { B = 2, T = 16, V = 61, STEPS = 6 };

static llmt_context *ctx;
static char tmpdir[256];

static void cfg_small(llmt_model_config *c, int arch)
{
    llmt_model_config_init(c, sizeof *c);
    c->arch = arch;
    c->vocab_size = V;
    c->padded_vocab_size = 64;
    c->max_seq_len = T;
    c->layers = 2;
    c->width = 32;
    c->heads = 4;
    c->kv_heads = arch == LLMT_ARCH_LLAMA ? 2 : 0;
    c->seed = 7;
}

static void opts_small(llmt_trainer_opts *o)
{
    llmt_trainer_opts_init(o, sizeof *o);
    o->micro_batch = B;
    o->grad_accum = 2;
    o->seq_len = T;
    o->lr = 3e-3f;
    o->warmup_steps = 2;
    o->total_steps = STEPS;
    o->threads = 2;
    o->grad_clip = 0.5f; /* so that clipping (and the norm) matters */
}

/* Deterministic token stream, batch k a function of k only: mostly
 * tok' = 5*tok + 1 mod V (learnable), one token in 8 random. */
static void batch_for(int k, int32_t *in, int32_t *tg)
{
    uint64_t s = 0x1234u + (uint64_t)k * 977u;
    int n = B * 2 * T;
    int32_t tok = 0;
    for (int i = 0; i <= n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(s >> 33);
        tok = (r & 7) == 0 ? (int32_t)((r >> 3) % V) : (tok * 5 + 1) % V;
        if (i < n) in[i] = tok;
        if (i > 0) tg[i - 1] = tok;
    }
}

typedef struct run {
    llmt_model *m;
    llmt_trainer *tr;
    float loss[STEPS];
} run;

static int run_open(run *r, int arch, int recompute)
{
    memset(r, 0, sizeof *r);
    llmt_model_config c;
    cfg_small(&c, arch);
    llmt_trainer_opts o;
    opts_small(&o);
    o.recompute = recompute;
    if (llmt_model_create(ctx, &c, &r->m) != LLMT_OK) return -1;
    if (llmt_trainer_create(r->m, &o, &r->tr) != LLMT_OK) return -1;
    return 0;
}

static void run_steps(run *r, int from, int to)
{
    int32_t in[B * 2 * T], tg[B * 2 * T];
    for (int k = from; k < to; k++) {
        batch_for(k, in, tg);
        llmt_batch b = {sizeof b, in, tg, B * 2, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        llmt_status s = llmt_trainer_step(r->tr, &b, &met);
        CHECK_STATUS(s, LLMT_OK);
        if (s != LLMT_OK)
            fprintf(stderr, "  %s\n", llmt_trainer_last_error(r->tr));
        CHECK_EQ_INT(met.step, k + 1);
        r->loss[k] = met.loss;
    }
}

static void run_close(run *r)
{
    llmt_trainer_destroy(r->tr);
    llmt_model_destroy(r->m);
}

/* 1 if every parameter is bitwise equal. */
static int same_params(llmt_model *a, llmt_model *b)
{
    int32_t n = 0, n2 = 0;
    llmt_model_param_count(a, &n, NULL);
    llmt_model_param_count(b, &n2, NULL);
    if (n != n2) return 0;
    for (int32_t i = 0; i < n; i++) {
        llmt_tensor va, vb;
        int64_t bytes = 0;
        llmt_model_param(a, i, NULL, &va);
        llmt_model_param(b, i, NULL, &vb);
        llmt_tensor_nbytes(&va, &bytes);
        if (memcmp(va.data, vb.data, (size_t)bytes) != 0) return 0;
    }
    return 1;
}

static void test_determinism(int arch, int recompute)
{
    run a, b;
    CHECK(run_open(&a, arch, recompute) == 0);
    CHECK(run_open(&b, arch, recompute) == 0);
    if (!a.tr || !b.tr) return;
    run_steps(&a, 0, STEPS);
    run_steps(&b, 0, STEPS);
    CHECK(memcmp(a.loss, b.loss, sizeof a.loss) == 0);
    CHECK(same_params(a.m, b.m));
    /* it learned something: the loss went down on this fixed stream */
    CHECK(a.loss[STEPS - 1] < a.loss[0]);
    run_close(&a);
    run_close(&b);
}

/* Recompute must give the same numbers as keeping the activations. */
static void test_recompute_same(void)
{
    run a, b;
    CHECK(run_open(&a, LLMT_ARCH_GPT2, 0) == 0);
    CHECK(run_open(&b, LLMT_ARCH_GPT2, 1) == 0);
    if (!a.tr || !b.tr) return;
    run_steps(&a, 0, 3);
    run_steps(&b, 0, 3);
    CHECK(memcmp(a.loss, b.loss, 3 * sizeof(float)) == 0);
    CHECK(same_params(a.m, b.m));
    run_close(&a);
    run_close(&b);
}

static void test_resume(int arch, int async)
{
    char root[300];
    snprintf(root, sizeof root, "%s/ck-%d-%d", tmpdir, arch, async);
    run full, first, second;
    CHECK(run_open(&full, arch, 0) == 0);
    CHECK(run_open(&first, arch, 0) == 0);
    if (!full.tr || !first.tr) return;
    run_steps(&full, 0, STEPS);
    int cut = STEPS / 2;
    run_steps(&first, 0, cut);

    llmt_ckpt_opts co;
    llmt_ckpt_opts_init(&co, sizeof co);
    co.direct_io = 0;
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(ctx, root, &co, &ck), LLMT_OK);
    if (!ck) return;
    CHECK_STATUS(llmt_ckpt_begin(ck, cut), LLMT_OK);
    CHECK_STATUS(llmt_trainer_ckpt_add(first.tr, ck), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, async), LLMT_OK);
    /* the snapshot is taken: training on may change the views now */
    run_steps(&first, cut, STEPS);
    CHECK_STATUS(llmt_ckpt_wait(ck, -1), LLMT_OK);
    CHECK(memcmp(first.loss, full.loss, sizeof full.loss) == 0);
    llmt_ckpt_destroy(ck);
    run_close(&first);

    /* a fresh process' view: another init seed, state from the checkpoint */
    llmt_model_config c;
    cfg_small(&c, arch);
    c.seed = 99;
    llmt_trainer_opts o;
    opts_small(&o);
    memset(&second, 0, sizeof second);
    CHECK_STATUS(llmt_model_create(ctx, &c, &second.m), LLMT_OK);
    CHECK_STATUS(llmt_trainer_create(second.m, &o, &second.tr), LLMT_OK);
    ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(ctx, root, &co, &ck), LLMT_OK);
    int64_t step = -1;
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &step), LLMT_OK);
    CHECK_EQ_INT(step, cut);
    CHECK_STATUS(llmt_trainer_ckpt_read(second.tr, ck), LLMT_OK);
    int64_t got = -1;
    llmt_trainer_get_step(second.tr, &got);
    CHECK_EQ_INT(got, cut);
    run_steps(&second, cut, STEPS);
    for (int k = cut; k < STEPS; k++) {
        CHECK(memcmp(&second.loss[k], &full.loss[k], sizeof(float)) == 0);
        if (second.loss[k] != full.loss[k])
            fprintf(stderr, "  step %d: resumed %.9g, uninterrupted %.9g\n",
                    k + 1, second.loss[k], full.loss[k]);
    }
    CHECK(same_params(second.m, full.m));

    /* a checkpoint of another shape is refused before anything changes */
    llmt_model_config c2;
    cfg_small(&c2, arch);
    c2.width = 48;
    llmt_model *m2 = NULL;
    llmt_trainer *t2 = NULL;
    CHECK_STATUS(llmt_model_create(ctx, &c2, &m2), LLMT_OK);
    CHECK_STATUS(llmt_trainer_create(m2, &o, &t2), LLMT_OK);
    if (t2) {
        CHECK_STATUS(llmt_trainer_ckpt_read(t2, ck), LLMT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(llmt_trainer_last_error(t2), "param/") != NULL);
        int64_t s2 = -1;
        llmt_trainer_get_step(t2, &s2);
        CHECK_EQ_INT(s2, 0);
    }
    llmt_trainer_destroy(t2);
    llmt_model_destroy(m2);
    llmt_ckpt_destroy(ck);
    run_close(&second);
    run_close(&full);
}

static void test_bad_input(void)
{
    llmt_model_config c;
    llmt_model *m = NULL;
    /* heads not dividing the width */
    cfg_small(&c, LLMT_ARCH_GPT2);
    c.heads = 5;
    CHECK_STATUS(llmt_model_create(ctx, &c, &m), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(m == NULL);
    CHECK(strstr(llmt_context_last_error(ctx), "heads 5 does not divide width 32"));
    /* kv heads not dividing heads */
    cfg_small(&c, LLMT_ARCH_LLAMA);
    c.kv_heads = 3;
    CHECK_STATUS(llmt_model_create(ctx, &c, &m), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "kv_heads 3"));
    /* padded vocab below vocab */
    cfg_small(&c, LLMT_ARCH_GPT2);
    c.padded_vocab_size = 10;
    CHECK_STATUS(llmt_model_create(ctx, &c, &m), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_context_last_error(ctx), "padded_vocab_size"));

    /* tokens outside the vocabulary, sequence too long, no targets */
    cfg_small(&c, LLMT_ARCH_GPT2);
    CHECK_STATUS(llmt_model_create(ctx, &c, &m), LLMT_OK);
    llmt_trainer_opts o;
    opts_small(&o);
    llmt_trainer *tr = NULL;
    o.seq_len = T + 1;
    CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_model_last_error(m), "max_seq_len"));
    opts_small(&o);
    CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
    if (!tr) return;
    int32_t in[B * 2 * T], tg[B * 2 * T];
    batch_for(0, in, tg);
    in[5] = V; /* one past the vocabulary */
    llmt_batch b = {sizeof b, in, tg, B * 2, T};
    CHECK_STATUS(llmt_trainer_step(tr, &b, NULL), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_trainer_last_error(tr), "input token 61 at 5 outside"));
    batch_for(0, in, tg);
    tg[7] = 1000;
    CHECK_STATUS(llmt_trainer_step(tr, &b, NULL), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_trainer_last_error(tr), "target token 1000"));
    batch_for(0, in, tg);
    for (int i = 0; i < B * 2 * T; i++) tg[i] = -1; /* nothing to learn */
    CHECK_STATUS(llmt_trainer_step(tr, &b, NULL), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_trainer_last_error(tr), "no target"));
    b.sequences = 3; /* not micro x accum */
    CHECK_STATUS(llmt_trainer_step(tr, &b, NULL), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_trainer_last_error(tr), "expected 4 x 16"));
    b.sequences = 0;
    CHECK_STATUS(llmt_trainer_evaluate(tr, &b, &(float){0}),
                 LLMT_ERR_INVALID_ARGUMENT);
    int64_t st = -1;
    llmt_trainer_get_step(tr, &st);
    CHECK_EQ_INT(st, 0); /* no failed step counted */

    /* wrong-shaped imports */
    char p1[300], p2[300];
    snprintf(p1, sizeof p1, "%s/m.safetensors", tmpdir);
    snprintf(p2, sizeof p2, "%s/m.bin", tmpdir);
    CHECK_STATUS(llmt_model_save_safetensors(m, p1), LLMT_OK);
    CHECK_STATUS(llmt_model_export_llmc(m, p2), LLMT_OK);
    llmt_model_config c2;
    cfg_small(&c2, LLMT_ARCH_GPT2);
    c2.width = 48;
    c2.heads = 4;
    llmt_model *m2 = NULL;
    CHECK_STATUS(llmt_model_create(ctx, &c2, &m2), LLMT_OK);
    CHECK_STATUS(llmt_model_load_safetensors(m2, p1), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_model_last_error(m2), "wte") &&
          strstr(llmt_model_last_error(m2), "shape"));
    llmt_model_destroy(m2);
    /* a good round trip first, then a truncated and a corrupt llm.c file */
    CHECK_STATUS(llmt_model_import_llmc(ctx, p2, &m2), LLMT_OK);
    CHECK(m2 && same_params(m, m2));
    llmt_model_destroy(m2);
    m2 = NULL;
    CHECK(truncate(p2, 4096) == 0);
    CHECK_STATUS(llmt_model_import_llmc(ctx, p2, &m2), LLMT_ERR_FORMAT);
    CHECK(strstr(llmt_context_last_error(ctx), "its header"));
    CHECK(m2 == NULL);
    FILE *f = fopen(p2, "r+b");
    if (f) {
        int32_t bad = 12345;
        fwrite(&bad, 4, 1, f);
        fclose(f);
    }
    CHECK_STATUS(llmt_model_import_llmc(ctx, p2, &m2), LLMT_ERR_FORMAT);
    CHECK(strstr(llmt_context_last_error(ctx), "magic 12345"));
    /* exporting a Llama model to llm.c's GPT-2 format is refused */
    llmt_model_config cl;
    cfg_small(&cl, LLMT_ARCH_LLAMA);
    llmt_model *ml = NULL;
    CHECK_STATUS(llmt_model_create(ctx, &cl, &ml), LLMT_OK);
    CHECK_STATUS(llmt_model_export_llmc(ml, p2), LLMT_ERR_UNSUPPORTED);
    llmt_model_destroy(ml);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
}

int main(void)
{
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/llmt-train-XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_determinism(LLMT_ARCH_GPT2, 0);
    test_determinism(LLMT_ARCH_LLAMA, 0);
    test_recompute_same();
    test_resume(LLMT_ARCH_GPT2, 0);
    test_resume(LLMT_ARCH_LLAMA, 1);
    test_bad_input();
    llmt_context_destroy(ctx);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (check_failures == 0 && system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    return check_exit("train");
}
