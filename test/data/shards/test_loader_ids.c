/* Every window the loader serves has its ids checked, wherever it lies in
 * the file: an llm.c token file names no vocabulary, so a host bounds its
 * ids by the tokenizer's (llmt__data_dataset_limit_ids, what a job does);
 * an id at or above it is refused naming the file, the token, the id and
 * the vocabulary, and never reaches a model's embedding. The bad id lies
 * near the end of the file, far from any check made at open. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/data_internal.h"
#include "llmtrain.h"
#include "util.h"

#define T 64
#define B 4
#define NTOK 100000
#define BAD_AT 77777 /* in window 1215 only: micro-batch 303 in file order */
#define BAD_ID 400
#define VOCAB 320

static char *dir;

static int has(const char *msg, const char *what)
{
    if (strstr(msg, what))
        return 1;
    fprintf(stderr, "message lacks \"%s\": %s\n", what, msg);
    return 0;
}

/* Micro-batches read in file order before the first failure (or all). */
static int64_t read_epoch(llmt_dataset *ds, int prefetch, const int32_t *ids, int *all_ok)
{
    llmt_loader_opts o;
    llmt_loader_opts_init(&o, sizeof o);
    o.seq_len = T;
    o.micro_batch = B;
    o.prefetch = prefetch;
    o.shuffle = 0;
    llmt_loader *l = NULL;
    CHECK_STATUS(llmt_loader_create(ds, &o, &l), LLMT_OK);
    int64_t spe = 0, m = 0;
    llmt_loader_samples_per_epoch(l, &spe);
    int32_t in[B * T], tg[B * T];
    *all_ok = 1;
    for (; m < spe / B; m++) {
        if (llmt_loader_next(l, in, tg, NULL) != LLMT_OK)
            break;
        for (int i = 0; i < B; i++) {
            const int32_t *w = ids + (m * B + i) * T;
            if (memcmp(in + i * T, w, T * 4) || memcmp(tg + i * T, w + 1, T * 4))
                *all_ok = 0;
        }
    }
    if (m < spe / B) {
        const char *msg = llmt_loader_last_error(l);
        fprintf(stderr, "prefetch %d: %s\n", prefetch, msg);
        CHECK(has(msg, "llmc.bin"));
        CHECK(has(msg, "token 77777 is id 400"));
        CHECK(has(msg, "vocabulary [0, 320)"));
        CHECK(has(msg, "micro-batch 303"));
        /* Asked again, the same micro-batch fails the same way. */
        CHECK(llmt_loader_next(l, in, tg, NULL) != LLMT_OK);
        CHECK(has(llmt_loader_last_error(l), "token 77777 is id 400"));
    }
    llmt_loader_destroy(l);
    return m;
}

static void llmc_file(void)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/llmc.bin", dir);
    int32_t *ids = malloc(NTOK * sizeof *ids);
    uint64_t seed = 5;
    for (int i = 0; i < NTOK; i++)
        ids[i] = (int32_t)(tu_rng(&seed) % VOCAB);
    ids[BAD_AT] = BAD_ID;
    CHECK_STATUS(llmt_shard_write_llmc(NULL, p, ids, NTOK), LLMT_OK);
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, p, 1, &ds), LLMT_OK);
    int ok = 0;
    /* Without a bound any uint16 is an id: the whole epoch is served. */
    int64_t all = (NTOK - 1) / T / B;
    CHECK_EQ_INT(read_epoch(ds, 0, ids, &ok), all);
    CHECK(ok);
    CHECK_STATUS(llmt__data_dataset_limit_ids(ds, VOCAB), LLMT_OK);
    for (int pf = 0; pf <= 4; pf += 4) {
        CHECK_EQ_INT(read_epoch(ds, pf, ids, &ok), BAD_AT / T / B);
        CHECK(ok);
    }
    /* The dataset's own reads are bounded too. */
    int32_t *got = malloc(NTOK * sizeof *got);
    CHECK(llmt_dataset_read(ds, 0, 0, got, NTOK) != LLMT_OK);
    const char *msg = llmt_dataset_last_error(ds);
    CHECK(has(msg, "llmc.bin: offset 156578")); /* 1024 + 2 * 77777 */
    CHECK(has(msg, "token 77777 is id 400"));
    CHECK(has(msg, "tokenizer's vocabulary [0, 320)"));
    CHECK_STATUS(llmt_dataset_read(ds, 0, 0, got, BAD_AT), LLMT_OK);
    CHECK(!memcmp(got, ids, BAD_AT * sizeof *got));
    CHECK(llmt__data_dataset_limit_ids(ds, -1) != LLMT_OK);
    CHECK(has(llmt_dataset_last_error(ds), "id limit -1"));
    CHECK_STATUS(llmt__data_dataset_limit_ids(ds, 0), LLMT_OK);
    CHECK_STATUS(llmt_dataset_read(ds, 0, 0, got, NTOK), LLMT_OK);
    CHECK_EQ_INT(got[BAD_AT], BAD_ID);
    free(got);
    llmt_dataset_destroy(ds);
    free(ids);
}

/* Our shard names its vocabulary; a lower bound still applies. */
static void own_shard(void)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/own.tok", dir);
    int32_t *ids = tu_write_shard(p, 1000, 5000, 300, 9, NULL);
    int64_t first = -1;
    for (int i = 0; i < 5000 && first < 0; i++)
        if (ids[i] >= 500)
            first = i;
    CHECK(first >= 0);
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, p, 1, &ds), LLMT_OK);
    int32_t got[5000];
    CHECK_STATUS(llmt_dataset_read(ds, 0, 0, got, 5000), LLMT_OK);
    CHECK_STATUS(llmt__data_dataset_limit_ids(ds, 500), LLMT_OK);
    CHECK(llmt_dataset_read(ds, 0, 0, got, 5000) != LLMT_OK);
    char want[96];
    snprintf(want, sizeof want, "token %" PRId64 " is id %d", first, (int)ids[first]);
    CHECK(has(llmt_dataset_last_error(ds), want));
    CHECK(has(llmt_dataset_last_error(ds), "tokenizer's vocabulary [0, 500)"));
    llmt_dataset_destroy(ds);
    free(ids);
}

int main(void)
{
    dir = tu_mkdtemp();
    llmc_file();
    own_shard();
    tu_rmtree(dir);
    free(dir);
    return check_exit("data-loader-ids");
}
