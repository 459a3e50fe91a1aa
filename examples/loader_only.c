/* loader_only: the data loader alone, for a host that trains with its own
 * framework (PyTorch through ctypes, JAX, a C++ trainer...). Only the
 * public header is used.
 *
 *   loader_only SHARDS DP_RANK DP_SIZE STATE_FILE [STEPS]
 *
 * SHARDS is a shard directory, file or glob (e.g. prepared/train from
 * `llmtrain data prepare`). Each step takes GLOBAL_BATCH windows of SEQ_LEN
 * tokens, split over DP_SIZE data-parallel ranks (DP_SIZE divides
 * GLOBAL_BATCH): this process is rank DP_RANK and reads its share,
 * GLOBAL_BATCH / DP_SIZE windows a step. It prints the shards the rank reads
 * this epoch (assign_shards), then the sample ids of each step, and saves
 * the loader's state to STATE_FILE (a few "key value" lines). When
 * STATE_FILE exists the run first continues from it, under any DP_SIZE:
 *
 *   loader_only prepared/train 0 2 r0.state 2   # steps 1-2, rank 0 of 2
 *   loader_only prepared/train 1 2 r1.state 2   # steps 1-2, rank 1 of 2
 *   cp r0.state one.state                       # any rank's: all are equal
 *   loader_only prepared/train 0 1 one.state 2  # steps 3-4 on one rank
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmtrain.h"

#define SEQ_LEN 64
#define GLOBAL_BATCH 8  /* windows per step, all ranks together */

static int fail(const char *what, llmt_status s, const char *detail)
{
    fprintf(stderr, "loader_only: %s: %s%s%s\n", what, llmt_status_string(s),
            detail && *detail ? ": " : "", detail ? detail : "");
    return 1;
}

#define CHECK(call, detail)                          \
    do {                                             \
        llmt_status s_ = (call);                     \
        if (s_ != LLMT_OK) {                         \
            rc = fail(#call, s_, (detail));          \
            goto done;                               \
        }                                            \
    } while (0)

/* The state as text: five lines "key value". Written to FILE.tmp, then
 * renamed, so that a crash leaves the old file or the new one. */
static int write_state(const char *file, const llmt_loader_state *st)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "seed %" PRIu64 "\nepoch %" PRId64 "\ncursor %" PRId64
               "\nsamples_per_epoch %" PRId64 "\nfingerprint %" PRIu64 "\n",
            st->seed, st->epoch, st->cursor, st->samples_per_epoch,
            st->fingerprint);
    if (fclose(f) != 0 || rename(tmp, file) != 0)
        return -1;
    return 0;
}

/* 1: read, 0: no such file, -1: unreadable or malformed. */
static int read_state(const char *file, llmt_loader_state *st)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return 0;
    memset(st, 0, sizeof *st);
    st->struct_size = sizeof *st;
    int n = fscanf(f, "seed %" SCNu64 " epoch %" SCNd64 " cursor %" SCNd64
                      " samples_per_epoch %" SCNd64 " fingerprint %" SCNu64,
                   &st->seed, &st->epoch, &st->cursor, &st->samples_per_epoch,
                   &st->fingerprint);
    fclose(f);
    return n == 5 ? 1 : -1;
}

int main(int argc, char **argv)
{
    if (argc < 5 || argc > 6) {
        fprintf(stderr, "usage: loader_only SHARDS DP_RANK DP_SIZE STATE_FILE "
                        "[STEPS]\n");
        return 2;
    }
    const char *shards = argv[1], *state_file = argv[4];
    int dp_rank = atoi(argv[2]), dp_size = atoi(argv[3]);
    int steps = argc > 5 ? atoi(argv[5]) : 4;
    if (dp_size < 1 || GLOBAL_BATCH % dp_size != 0 || dp_rank < 0 ||
        dp_rank >= dp_size || steps < 0) {
        fprintf(stderr, "loader_only: need 0 <= DP_RANK < DP_SIZE, DP_SIZE "
                        "dividing %d, STEPS >= 0\n", GLOBAL_BATCH);
        return 2;
    }
    int micro = GLOBAL_BATCH / dp_size;

    int rc = 0;
    llmt_context *ctx = NULL;
    llmt_dataset *ds = NULL;
    llmt_loader *ld = NULL;
    int32_t *in = NULL, *tg = NULL, *shard_ids = NULL;
    int64_t ids[GLOBAL_BATCH];

    CHECK(llmt_context_create(NULL, &ctx), "");
    /* verify = 1 checks every shard's checksums once, at open */
    CHECK(llmt_dataset_open(ctx, shards, 1, &ds), llmt_context_last_error(ctx));
    llmt_dataset_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK(llmt_dataset_get_info(ds, &info), llmt_dataset_last_error(ds));

    llmt_loader_opts lo;
    CHECK(llmt_loader_opts_init(&lo, sizeof lo), "");
    lo.seq_len = SEQ_LEN;
    lo.micro_batch = micro;
    lo.grad_accum = 1;
    lo.dp_rank = dp_rank;
    lo.dp_size = dp_size;
    lo.seed = 1337;  /* the same on every rank */
    CHECK(llmt_loader_create(ds, &lo, &ld), llmt_dataset_last_error(ds));
    int64_t spe = 0;
    CHECK(llmt_loader_samples_per_epoch(ld, &spe), llmt_loader_last_error(ld));
    printf("%s: %d shard(s), %" PRId64 " tokens, %" PRId64 " samples of %d "
           "tokens an epoch; rank %d of %d reads %d a step\n", shards,
           (int)info.shards, info.tokens, spe, SEQ_LEN, dp_rank, dp_size,
           micro);

    llmt_loader_state st;
    int have = read_state(state_file, &st);
    if (have < 0) {
        fprintf(stderr, "loader_only: %s is not a state file\n", state_file);
        rc = 1;
        goto done;
    }
    if (have) {
        /* refused (naming why) if it belongs to other shards or seq_len */
        CHECK(llmt_loader_set_state(ld, &st), llmt_loader_last_error(ld));
        printf("resumed from %s: epoch %" PRId64 ", sample %" PRId64 "\n",
               state_file, st.epoch, st.cursor);
    } else {
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        CHECK(llmt_loader_get_state(ld, &st), llmt_loader_last_error(ld));
    }

    /* Which shards this rank reads this epoch: a host that stages shards
     * from remote storage fetches only these. Size query, then the list. */
    size_t n = 0;
    CHECK(llmt_loader_assign_shards(ld, dp_rank, st.epoch, NULL, 0, &n),
          llmt_loader_last_error(ld));
    shard_ids = malloc((n ? n : 1) * sizeof *shard_ids);
    in = malloc((size_t)micro * SEQ_LEN * sizeof *in);
    tg = malloc((size_t)micro * SEQ_LEN * sizeof *tg);
    if (!shard_ids || !in || !tg) {
        fprintf(stderr, "loader_only: out of memory\n");
        rc = 1;
        goto done;
    }
    CHECK(llmt_loader_assign_shards(ld, dp_rank, st.epoch, shard_ids, n, &n),
          llmt_loader_last_error(ld));
    printf("epoch %" PRId64 " rank %d shards:", st.epoch, dp_rank);
    for (size_t i = 0; i < n; i++)
        printf(" %d", (int)shard_ids[i]);
    printf("\n");

    /* The steps: global step number from the cursor (all ranks together). */
    int64_t step = (st.epoch * spe + st.cursor) / GLOBAL_BATCH;
    for (int k = 0; k < steps; k++) {
        CHECK(llmt_loader_next(ld, in, tg, ids), llmt_loader_last_error(ld));
        /* in/tg: micro x SEQ_LEN int32 token ids; hand them to the framework
         * (e.g. torch.frombuffer) and run its forward/backward here. */
        printf("step %" PRId64 " rank %d samples:", ++step, dp_rank);
        for (int i = 0; i < micro; i++)
            printf(" %" PRId64, ids[i]);
        printf("\n");
    }

    /* At a step boundary, every rank has the same state: save it. */
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK(llmt_loader_get_state(ld, &st), llmt_loader_last_error(ld));
    if (write_state(state_file, &st) != 0) {
        perror(state_file);
        rc = 1;
        goto done;
    }
    printf("saved %s: epoch %" PRId64 ", sample %" PRId64 "\n", state_file,
           st.epoch, st.cursor);

done:
    free(tg);
    free(in);
    free(shard_ids);
    llmt_loader_destroy(ld);
    llmt_dataset_destroy(ds);
    llmt_context_destroy(ctx);
    return rc;
}
