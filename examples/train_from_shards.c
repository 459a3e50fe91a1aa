/* train_from_shards: train a small GPT-2 on token shards prepared by
 * `llmtrain data prepare`, checkpoint it, resume it, and sample from it,
 * using only the public header.
 *
 *   llmtrain data prepare corpus/ --out prepared --tokenizer bpe:512
 *   train_from_shards prepared ckpt 100   # steps 1..100, then stops
 *   train_from_shards prepared ckpt       # resumes at 100, runs to 200
 *
 * DATA_DIR holds train/, val/ and tokenizer.bin. STEPS is the step this run
 * stops at (default TOTAL_STEPS); the learning-rate schedule always spans
 * TOTAL_STEPS, so a run stopped early and resumed computes exactly what one
 * uninterrupted run computes. A checkpoint (parameters, AdamW state, step,
 * and the loader's position as key/values) is written every CKPT_EVERY
 * steps and at the end of each run; a second run with the same CKPT_DIR
 * continues from the newest one.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmtrain.h"

#define SEQ_LEN 64
#define MICRO 8          /* sequences per step (grad_accum 1) */
#define TOTAL_STEPS 200  /* the schedule's length */
#define CKPT_EVERY 50
#define EVAL_BATCHES 2   /* validation: the first 2 x MICRO sequences */
#define SAMPLE_TOKENS 48

/* Print a failed call with the detail its handle recorded; returns 1. */
static int fail(const char *what, llmt_status s, const char *detail)
{
    fprintf(stderr, "train_from_shards: %s: %s%s%s\n", what,
            llmt_status_string(s), detail && *detail ? ": " : "",
            detail ? detail : "");
    return 1;
}

/* Every call is checked: on failure print it with `detail` (the
 * *_last_error of the handle the call reports to) and clean up. */
#define CHECK(call, detail)                          \
    do {                                             \
        llmt_status s_ = (call);                     \
        if (s_ != LLMT_OK) {                         \
            rc = fail(#call, s_, (detail));          \
            goto done;                               \
        }                                            \
    } while (0)

/* Checkpoint `step`: the trainer's tensors and keys (trainer.step, model.*)
 * and the loader's state; async (the snapshot is taken before llmt_ckpt_save
 * returns, the writing overlaps the next steps). */
static llmt_status save_checkpoint(llmt_ckpt *ck, llmt_trainer *tr,
                                   llmt_loader *ld, int64_t step,
                                   const char **detail)
{
    *detail = NULL;
    llmt_status s = llmt_ckpt_wait(ck, -1); /* the previous save succeeded? */
    if (s == LLMT_OK)
        s = llmt_ckpt_begin(ck, step);
    if (s == LLMT_OK && (s = llmt_trainer_ckpt_add(tr, ck)) != LLMT_OK)
        *detail = llmt_trainer_last_error(tr);
    /* the loader's position: five integers as key/values "data.*" */
    if (s == LLMT_OK && (s = llmt_loader_ckpt_add(ld, ck)) != LLMT_OK)
        *detail = llmt_loader_last_error(ld);
    if (s == LLMT_OK) s = llmt_ckpt_save(ck, 1);
    if (s != LLMT_OK && !*detail)
        *detail = llmt_ckpt_last_error(ck);
    return s;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: train_from_shards DATA_DIR CKPT_DIR [STEPS]\n"
                        "  DATA_DIR: the output of `llmtrain data prepare`\n");
        return 2;
    }
    const char *data_dir = argv[1], *ckpt_dir = argv[2];
    int64_t stop_at = argc > 3 ? strtoll(argv[3], NULL, 10) : TOTAL_STEPS;
    if (stop_at < 0) {
        fprintf(stderr, "train_from_shards: STEPS must be >= 0\n");
        return 2;
    }
    if ((llmt_abi_version() >> 16) != LLMT_ABI_VERSION_MAJOR) {
        fprintf(stderr, "train_from_shards: libllmtrain ABI mismatch\n");
        return 1;
    }

    int rc = 0;
    llmt_context *ctx = NULL;
    llmt_tokenizer *tok = NULL;
    llmt_dataset *train_ds = NULL, *val_ds = NULL;
    llmt_loader *ld = NULL, *val_ld = NULL;
    llmt_model *model = NULL;
    llmt_trainer *tr = NULL;
    llmt_ckpt *ck = NULL;
    int32_t *in = NULL, *tg = NULL, *vin = NULL, *vtg = NULL, *gen = NULL;
    char *text = NULL;
    char path[4096];

    CHECK(llmt_context_create(NULL, &ctx), "");

    /* -- the tokenizer the shards were written with ------------------- */
    snprintf(path, sizeof path, "%s/tokenizer.bin", data_dir);
    CHECK(llmt_tokenizer_load(ctx, path, &tok), llmt_context_last_error(ctx));
    int32_t vocab = 0, eot = 0;
    CHECK(llmt_tokenizer_vocab_size(tok, &vocab),
          llmt_tokenizer_last_error(tok));
    CHECK(llmt_tokenizer_eot(tok, &eot), llmt_tokenizer_last_error(tok));

    /* -- a small GPT-2 sized to the tokenizer ---------------------------- */
    llmt_model_config mc;
    CHECK(llmt_model_config_init(&mc, sizeof mc), "");
    mc.arch = LLMT_ARCH_GPT2;
    mc.vocab_size = vocab;
    mc.padded_vocab_size = (vocab + 63) / 64 * 64; /* rows of the embedding */
    mc.max_seq_len = SEQ_LEN;
    mc.layers = 2;
    mc.width = 64;
    mc.heads = 4;
    mc.seed = 1337;
    CHECK(llmt_model_create(ctx, &mc, &model), llmt_context_last_error(ctx));
    int32_t nparams = 0;
    int64_t numel = 0;
    CHECK(llmt_model_param_count(model, &nparams, &numel),
          llmt_model_last_error(model));

    llmt_trainer_opts to;
    CHECK(llmt_trainer_opts_init(&to, sizeof to), "");
    to.micro_batch = MICRO;
    to.seq_len = SEQ_LEN;
    to.grad_accum = 1;
    to.schedule = LLMT_LR_COSINE;
    to.lr = 1e-3f;
    to.min_lr = 1e-4f;
    to.warmup_steps = 10;
    to.total_steps = TOTAL_STEPS;
    /* trainer_create reports its errors on the model */
    CHECK(llmt_trainer_create(model, &to, &tr), llmt_model_last_error(model));

    /* -- the data: train/ through a shuffling loader, val/ in file order */
    snprintf(path, sizeof path, "%s/train", data_dir);
    CHECK(llmt_dataset_open(ctx, path, 0, &train_ds),
          llmt_context_last_error(ctx));
    llmt_loader_opts lo;
    CHECK(llmt_loader_opts_init(&lo, sizeof lo), "");
    lo.seq_len = SEQ_LEN;
    lo.micro_batch = MICRO;
    lo.grad_accum = 1;
    lo.seed = 1337;
    CHECK(llmt_loader_create(train_ds, &lo, &ld),
          llmt_dataset_last_error(train_ds));
    llmt_dataset_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK(llmt_dataset_get_info(train_ds, &info),
          llmt_dataset_last_error(train_ds));
    if (info.vocab_size > vocab) {
        fprintf(stderr, "train_from_shards: the shards use %d tokens, the "
                        "tokenizer has %d\n", (int)info.vocab_size, (int)vocab);
        rc = 1;
        goto done;
    }

    snprintf(path, sizeof path, "%s/val", data_dir);
    CHECK(llmt_dataset_open(ctx, path, 0, &val_ds),
          llmt_context_last_error(ctx));
    llmt_loader_opts vo = lo;
    vo.shuffle = 0;  /* the first validation sequences, in file order */
    vo.prefetch = 0;
    CHECK(llmt_loader_create(val_ds, &vo, &val_ld),
          llmt_dataset_last_error(val_ds));

    size_t per_step = (size_t)MICRO * SEQ_LEN;
    size_t per_eval = per_step * EVAL_BATCHES;
    in = malloc(per_step * sizeof *in);
    tg = malloc(per_step * sizeof *tg);
    vin = malloc(per_eval * sizeof *vin);
    vtg = malloc(per_eval * sizeof *vtg);
    gen = malloc(SAMPLE_TOKENS * sizeof *gen);
    if (!in || !tg || !vin || !vtg || !gen) {
        fprintf(stderr, "train_from_shards: out of memory\n");
        rc = 1;
        goto done;
    }
    /* A tiny val/ wraps around (the cursor runs on across epochs). */
    for (int b = 0; b < EVAL_BATCHES; b++)
        CHECK(llmt_loader_next(val_ld, vin + b * per_step, vtg + b * per_step,
                               NULL), llmt_loader_last_error(val_ld));
    llmt_batch val_batch = {sizeof val_batch, vin, vtg, MICRO * EVAL_BATCHES,
                            SEQ_LEN};

    /* -- checkpoints: resume from the newest one if there is one ------- */
    llmt_ckpt_opts co;
    CHECK(llmt_ckpt_opts_init(&co, sizeof co), "");
    co.keep_last = 2;
    CHECK(llmt_ckpt_create(ctx, ckpt_dir, &co, &ck),
          llmt_context_last_error(ctx));
    int64_t start = 0;
    llmt_status s = llmt_ckpt_open_latest(ck, &start);
    if (s == LLMT_ERR_NOT_FOUND) {
        start = 0;
        printf("no checkpoint in %s: starting from step 0\n", ckpt_dir);
    } else if (s != LLMT_OK) {
        rc = fail("llmt_ckpt_open_latest", s, llmt_ckpt_last_error(ck));
        goto done;
    } else {
        CHECK(llmt_trainer_ckpt_read(tr, ck), llmt_trainer_last_error(tr));
        CHECK(llmt_loader_ckpt_read(ld, ck), llmt_loader_last_error(ld));
        llmt_loader_state st;
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        CHECK(llmt_loader_get_state(ld, &st), llmt_loader_last_error(ld));
        printf("resumed from %s at step %" PRId64 " (epoch %" PRId64
               ", sample %" PRId64 ")\n", ckpt_dir, start, st.epoch, st.cursor);
    }

    printf("model: gpt2, %d layers, width %d, %d heads, vocab %d, %.3fM "
           "parameters\n", (int)mc.layers, (int)mc.width, (int)mc.heads,
           (int)vocab, (double)numel / 1e6);
    printf("data: %" PRId64 " train tokens in %d shard(s); %d x %d tokens a "
           "step\n", info.tokens, (int)info.shards, MICRO, SEQ_LEN);
    float val_loss = 0;
    CHECK(llmt_trainer_evaluate(tr, &val_batch, &val_loss),
          llmt_trainer_last_error(tr));
    printf("step %" PRId64 ": val loss %.4f\n", start, (double)val_loss);

    /* -- train --------------------------------------------------------- */
    for (int64_t step = start; step < stop_at; step++) {
        CHECK(llmt_loader_next(ld, in, tg, NULL), llmt_loader_last_error(ld));
        llmt_batch b = {sizeof b, in, tg, MICRO, SEQ_LEN};
        llmt_step_metrics m;
        memset(&m, 0, sizeof m);
        m.struct_size = sizeof m;
        CHECK(llmt_trainer_step(tr, &b, &m), llmt_trainer_last_error(tr));
        /* %.9g prints a float exactly: equal text means equal bits */
        printf("step %5" PRId64 " | loss %.9g | lr %.3e | grad norm %.4f | "
               "%.1f ms\n", m.step, (double)m.loss, (double)m.lr,
               (double)m.grad_norm, m.seconds * 1e3);
        fflush(stdout);
        if (m.step % CKPT_EVERY == 0 || m.step == stop_at) {
            const char *detail = NULL;
            CHECK(save_checkpoint(ck, tr, ld, m.step, &detail), detail);
        }
    }
    CHECK(llmt_ckpt_wait(ck, -1), llmt_ckpt_last_error(ck)); /* durable */

    if (stop_at > start) {
        CHECK(llmt_trainer_evaluate(tr, &val_batch, &val_loss),
              llmt_trainer_last_error(tr));
        printf("step %" PRId64 ": val loss %.4f\n", stop_at, (double)val_loss);
    }

    /* -- a sample: SAMPLE_TOKENS tokens after <|endoftext|> ---------------- */
    CHECK(llmt_trainer_generate(tr, &eot, 1, SAMPLE_TOKENS, 0.8f, 40, 42, gen),
          llmt_trainer_last_error(tr));
    size_t len = 0;
    CHECK(llmt_tokenizer_decode(tok, gen, SAMPLE_TOKENS, NULL, 0, &len),
          llmt_tokenizer_last_error(tok));
    text = malloc(len + 1);
    if (!text) {
        fprintf(stderr, "train_from_shards: out of memory\n");
        rc = 1;
        goto done;
    }
    CHECK(llmt_tokenizer_decode(tok, gen, SAMPLE_TOKENS, text, len, &len),
          llmt_tokenizer_last_error(tok));
    text[len] = '\0';
    printf("---- sample (%d tokens) ----\n%s\n----\n", SAMPLE_TOKENS, text);

done:
    free(text);
    free(gen);
    free(vtg);
    free(vin);
    free(tg);
    free(in);
    llmt_ckpt_destroy(ck); /* waits for a save still in flight */
    llmt_trainer_destroy(tr);
    llmt_model_destroy(model);
    llmt_loader_destroy(val_ld);
    llmt_loader_destroy(ld);
    llmt_dataset_destroy(val_ds);
    llmt_dataset_destroy(train_ds);
    llmt_tokenizer_destroy(tok);
    llmt_context_destroy(ctx);
    return rc;
}
