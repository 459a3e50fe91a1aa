/* The data of `llmtrain train`: where the tokens come from, through
 * lib/data's pipeline (llmt_data_prepare), dataset and loader. */
#ifndef LLMT_TOOLS_TRAIN_DATA_H
#define LLMT_TOOLS_TRAIN_DATA_H

#include <stdint.h>

#include "llmtrain.h"

typedef struct td_opts {
    const char *out_dir;  /* the run directory (OUT/data is prepared there) */
    const char *train;    /* data.train: text or token shards; "" = default */
    const char *val;      /* data.val: validation shards; "" = from train */
    const char *tok_path; /* data.tokenizer.path */
    int tok_kind;         /* 0 byte, 1 bpe, 2 gpt2 */
    int32_t tok_vocab;
    uint64_t seed;        /* data.seed: the loader's permutation */
    int seq_len, micro, accum;
    int32_t dp_rank, dp_size;
    int resume;
} td_opts;

typedef struct train_data {
    llmt_context *ctx;
    char desc[2048];         /* one line for the banner */
    int32_t vocab, eot;
    int64_t n_train, n_val;  /* tokens */
    double unigram_entropy;  /* nats/token of the training tokens */
    llmt_tokenizer *tok;
    llmt_dataset *train_ds, *val_ds;
    llmt_loader *loader;
    int T, B, A;
} train_data;

/* Opens (and, for a text corpus, first prepares) the data; prints errors
 * and returns non-zero on failure. */
int td_open(train_data *d, llmt_context *ctx, const td_opts *o);
/* This rank's rows of the next training step: micro * accum sequences. */
int td_next(train_data *d, int32_t *in, int32_t *tg);
/* The first (at most nmax) validation sequences, the same every call. */
int td_val_batch(train_data *d, int32_t *in, int32_t *tg, int nmax);
/* The loader's state as checkpoint key/values, and back. */
llmt_status td_ckpt_add(const train_data *d, llmt_ckpt *ck);
int td_ckpt_read(train_data *d, llmt_ckpt *ck);
/* Text of ids (malloc'd, NUL-terminated), NULL on failure. */
char *td_decode(train_data *d, const int32_t *ids, size_t n);
void td_free(train_data *d);

#endif
