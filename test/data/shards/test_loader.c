/* The loader: resume exactness across dp sizes (every sample of an epoch
 * read exactly once by the ranks together, before and after the resume),
 * resume under the same layout equals an uninterrupted run, determinism
 * (seed, prefetch depth, epochs, file order), assign_shards against a brute
 * force, and bad arguments. Every window returned is compared with
 * llmt_dataset_read of that window. */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"
#include "util.h"

#define T 16
#define NSHARDS 7

static char *dir;
static llmt_dataset *ds;
static int64_t n_samples;
static int64_t first_id[NSHARDS + 1]; /* file-order id of each shard's window 0 */

/* Shards of unequal sizes, one with no window, one with exactly one, one
 * in llm.c's format. */
static void make_dataset(const char *sub, uint64_t seed)
{
    static const int64_t sizes[NSHARDS] = {1000, 3333, 1, 2500, 777, 17, 1201};
    mkdir(sub, 0755);
    char p[4200];
    first_id[0] = 0;
    for (int i = 0; i < NSHARDS; i++) {
        if (i == 6) {
            int32_t ids[1201];
            for (int k = 0; k < 1201; k++)
                ids[k] = (int32_t)(tu_rng(&seed) % 65536);
            snprintf(p, sizeof p, "%s/s%d.bin", sub, i);
            CHECK_STATUS(llmt_shard_write_llmc(NULL, p, ids, 1201), LLMT_OK);
        } else {
            snprintf(p, sizeof p, "%s/s%d.tok", sub, i);
            free(tu_write_shard(p, 50257, sizes[i], 300, seed + (uint64_t)i, NULL));
        }
        first_id[i + 1] = first_id[i] + (sizes[i] - 1) / T;
    }
}

static int shard_of(int64_t id)
{
    for (int i = 0; i < NSHARDS; i++)
        if (id < first_id[i + 1])
            return i;
    return -1;
}

/* The window of file-order id `id`, as llmt_dataset_read gives it. */
static int window_ok(int64_t id, const int32_t *in, const int32_t *tg)
{
    int s = shard_of(id);
    if (s < 0)
        return 0;
    int32_t w[T + 1];
    if (llmt_dataset_read(ds, s, (id - first_id[s]) * T, w, T + 1) != LLMT_OK)
        return 0;
    return !memcmp(in, w, T * sizeof *w) && !memcmp(tg, w + 1, T * sizeof *w);
}

static llmt_loader *make_loader(llmt_dataset *d, int B, int A, int rank, int dp, int pf,
                                uint64_t seed, int shuffle)
{
    llmt_loader_opts o;
    llmt_loader_opts_init(&o, sizeof o);
    o.seq_len = T;
    o.micro_batch = B;
    o.grad_accum = A;
    o.dp_rank = rank;
    o.dp_size = dp;
    o.prefetch = pf;
    o.seed = seed;
    o.shuffle = shuffle;
    llmt_loader *l = NULL;
    if (llmt_loader_create(d, &o, &l) != LLMT_OK) {
        fprintf(stderr, "loader_create: %s\n", llmt_dataset_last_error(d));
        exit(1);
    }
    return l;
}

/* One run of `steps` steps of every rank from global sample `base`; calls
 * note(g, id) for each row and checks its tokens. Returns the ids in
 * (step, rank, micro, row) order (steps * G of them) when want. */
typedef struct layout {
    int B, A, dp;
} layout;

static int64_t *run_steps(llmt_loader **ls, layout L, int64_t base, int steps, int *seen,
                          int64_t *next_epoch_count)
{
    int64_t G = (int64_t)L.B * L.A * L.dp;
    int64_t *out = malloc((size_t)(steps * G) * sizeof *out);
    int32_t *in = malloc((size_t)L.B * T * sizeof *in), *tg = malloc((size_t)L.B * T * sizeof *tg);
    int64_t *ids = malloc((size_t)L.B * sizeof *ids);
    int tokens_ok = 1;
    for (int s = 0; s < steps; s++)
        for (int r = 0; r < L.dp; r++)
            for (int a = 0; a < L.A; a++) {
                CHECK_STATUS(llmt_loader_next(ls[r], in, tg, ids), LLMT_OK);
                for (int i = 0; i < L.B; i++) {
                    int64_t g = base + s * G + (int64_t)r * L.B * L.A + (int64_t)a * L.B + i;
                    out[g - base] = ids[i];
                    tokens_ok &= window_ok(ids[i], in + i * T, tg + i * T);
                    if (g < n_samples && seen)
                        seen[ids[i]]++;
                    else if (next_epoch_count)
                        (*next_epoch_count)++;
                }
            }
    CHECK(tokens_ok);
    free(in);
    free(tg);
    free(ids);
    return out;
}

static void get_states(llmt_loader **ls, int dp, llmt_loader_state *st)
{
    for (int r = 0; r < dp; r++) {
        llmt_loader_state s;
        memset(&s, 0, sizeof s);
        s.struct_size = sizeof s;
        CHECK_STATUS(llmt_loader_get_state(ls[r], &s), LLMT_OK);
        if (r == 0)
            *st = s;
        CHECK(s.seed == st->seed && s.epoch == st->epoch && s.cursor == st->cursor &&
              s.samples_per_epoch == st->samples_per_epoch &&
              s.fingerprint == st->fingerprint);
    }
}

static void resume_other_dp(void)
{
    /* 4 ranks of B=2, A=2 (G = 16) for 7 steps. */
    layout L4 = {2, 2, 4};
    llmt_loader *ls[8];
    for (int r = 0; r < 4; r++)
        ls[r] = make_loader(ds, L4.B, L4.A, r, 4, r % 2 ? 4 : 0, 1234, 1);
    int *seen4 = calloc((size_t)n_samples, sizeof *seen4);
    free(run_steps(ls, L4, 0, 7, seen4, NULL));
    llmt_loader_state st;
    get_states(ls, 4, &st);
    CHECK_EQ_INT(st.epoch, 0);
    CHECK_EQ_INT(st.cursor, 7 * 16);
    CHECK_EQ_INT(st.samples_per_epoch, n_samples);
    CHECK(st.seed == 1234);
    for (int r = 0; r < 4; r++)
        llmt_loader_destroy(ls[r]);

    /* Resume with dp 2 (B doubled) and dp 8 (B halved): same G. */
    layout others[2] = {{4, 2, 2}, {1, 2, 8}};
    for (int k = 0; k < 2; k++) {
        layout L = others[k];
        for (int r = 0; r < L.dp; r++) {
            /* Another seed at create: the state's is adopted. */
            ls[r] = make_loader(ds, L.B, L.A, r, L.dp, (r % 3) * 8, 99, 1);
            CHECK_STATUS(llmt_loader_set_state(ls[r], &st), LLMT_OK);
        }
        int *seen = malloc((size_t)n_samples * sizeof *seen);
        memcpy(seen, seen4, (size_t)n_samples * sizeof *seen);
        int64_t G = 16, rest = n_samples - st.cursor;
        int steps = (int)((rest + G - 1) / G);
        int64_t spill = 0;
        free(run_steps(ls, L, st.cursor, steps, seen, &spill));
        int once = 1;
        for (int64_t i = 0; i < n_samples; i++)
            once &= seen[i] == 1;
        CHECK(once);
        CHECK_EQ_INT(spill, steps * G - rest);
        llmt_loader_state end;
        get_states(ls, L.dp, &end);
        CHECK_EQ_INT(end.epoch * n_samples + end.cursor, st.cursor + steps * G);
        for (int r = 0; r < L.dp; r++)
            llmt_loader_destroy(ls[r]);
        free(seen);
    }
    free(seen4);
}

/* Resume under the same layout reads what an uninterrupted run reads, past
 * an epoch boundary too. */
static void resume_same_dp(void)
{
    layout L = {2, 3, 2};
    llmt_loader *a[2], *b[2];
    for (int r = 0; r < 2; r++) {
        a[r] = make_loader(ds, L.B, L.A, r, 2, 0, 7, 1);
        b[r] = make_loader(ds, L.B, L.A, r, 2, 16, 7, 1);
    }
    int K = 30, M = 60; /* 12 samples a step: 360 then 720 more (N = 475) */
    int64_t *whole = run_steps(a, L, 0, K + M, NULL, NULL);
    int64_t *first = run_steps(b, L, 0, K, NULL, NULL);
    CHECK(!memcmp(whole, first, (size_t)K * 12 * sizeof *whole));
    llmt_loader_state st;
    get_states(b, 2, &st);
    for (int r = 0; r < 2; r++) {
        llmt_loader_destroy(b[r]);
        b[r] = make_loader(ds, L.B, L.A, r, 2, r ? 2 : 0, 7, 1);
        CHECK_STATUS(llmt_loader_set_state(b[r], &st), LLMT_OK);
    }
    int64_t *second = run_steps(b, L, st.cursor, M, NULL, NULL);
    CHECK(!memcmp(whole + K * 12, second, (size_t)M * 12 * sizeof *whole));
    /* And token for token, one rank's micro-batch after another resume. */
    for (int r = 0; r < 2; r++) {
        llmt_loader_destroy(b[r]);
        b[r] = make_loader(ds, L.B, L.A, r, 2, 4, 7, 1);
        CHECK_STATUS(llmt_loader_set_state(b[r], &st), LLMT_OK);
    }
    llmt_loader *c = make_loader(ds, L.B, L.A, 1, 2, 0, 7, 1);
    int32_t in1[2 * T], tg1[2 * T], in2[2 * T], tg2[2 * T];
    int64_t id1[2], id2[2];
    for (int i = 0; i < K * L.A; i++)
        llmt_loader_next(c, in1, tg1, id1);
    int same = 1;
    for (int i = 0; i < 40; i++) {
        llmt_loader_next(c, in1, tg1, id1);
        llmt_loader_next(b[1], in2, tg2, id2);
        same &= !memcmp(in1, in2, sizeof in1) && !memcmp(tg1, tg2, sizeof tg1) &&
                !memcmp(id1, id2, sizeof id1);
    }
    CHECK(same);
    llmt_loader_destroy(c);
    for (int r = 0; r < 2; r++) {
        llmt_loader_destroy(a[r]);
        llmt_loader_destroy(b[r]);
    }
    free(whole);
    free(first);
    free(second);
}

/* ids of the first `n` samples of a dp=1, B=1 loader. */
static int64_t *sequence(uint64_t seed, int shuffle, int prefetch, int64_t n)
{
    llmt_loader *l = make_loader(ds, 1, 1, 0, 1, prefetch, seed, shuffle);
    int64_t *ids = malloc((size_t)n * sizeof *ids);
    int32_t in[T], tg[T];
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        CHECK_STATUS(llmt_loader_next(l, in, tg, &ids[i]), LLMT_OK);
        ok &= window_ok(ids[i], in, tg);
    }
    CHECK(ok);
    llmt_loader_destroy(l);
    return ids;
}

static int is_permutation(const int64_t *v, int64_t n)
{
    char *hit = calloc((size_t)n, 1);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        if (v[i] < 0 || v[i] >= n || hit[v[i]])
            ok = 0;
        else
            hit[v[i]] = 1;
    }
    free(hit);
    return ok;
}

static void determinism(void)
{
    /* Bit-identical batches with prefetch 0, 4, 16 and across two loaders
     * (B=5, A=1 over two and a half epochs). */
    int32_t *buf[3][2];
    int64_t *idb[3];
    int pf[3] = {0, 4, 16};
    int calls = (int)(n_samples * 5 / 2 / 5);
    llmt_loader *ls[3];
    for (int k = 0; k < 3; k++) {
        ls[k] = make_loader(ds, 5, 1, 0, 1, pf[k], 42, 1);
        buf[k][0] = malloc((size_t)calls * 5 * T * sizeof(int32_t));
        buf[k][1] = malloc((size_t)calls * 5 * T * sizeof(int32_t));
        idb[k] = malloc((size_t)calls * 5 * sizeof(int64_t));
    }
    for (int c = 0; c < calls; c++)
        for (int k = 0; k < 3; k++)
            CHECK_STATUS(llmt_loader_next(ls[k], buf[k][0] + c * 5 * T, buf[k][1] + c * 5 * T,
                                          idb[k] + c * 5), LLMT_OK);
    for (int k = 1; k < 3; k++) {
        CHECK(!memcmp(buf[0][0], buf[k][0], (size_t)calls * 5 * T * sizeof(int32_t)));
        CHECK(!memcmp(buf[0][1], buf[k][1], (size_t)calls * 5 * T * sizeof(int32_t)));
        CHECK(!memcmp(idb[0], idb[k], (size_t)calls * 5 * sizeof(int64_t)));
    }
    for (int k = 0; k < 3; k++) {
        llmt_loader_destroy(ls[k]);
        free(buf[k][0]);
        free(buf[k][1]);
        free(idb[k]);
    }

    /* Epochs: each a permutation, each different; shards are read as
     * contiguous runs (one run per shard with windows). */
    int64_t N = n_samples;
    int64_t *s42 = sequence(42, 1, 0, 3 * N), *s42b = sequence(42, 1, 8, 3 * N);
    CHECK(!memcmp(s42, s42b, (size_t)(3 * N) * sizeof *s42));
    for (int e = 0; e < 3; e++)
        CHECK(is_permutation(s42 + e * N, N));
    CHECK(memcmp(s42, s42 + N, (size_t)N * sizeof *s42) != 0);
    CHECK(memcmp(s42 + N, s42 + 2 * N, (size_t)N * sizeof *s42) != 0);
    int runs = 1;
    for (int64_t i = 1; i < N; i++)
        runs += shard_of(s42[i]) != shard_of(s42[i - 1]);
    CHECK_EQ_INT(runs, NSHARDS - 1); /* the 1-token shard has no window */
    /* Not in file order, and shards themselves reordered over epochs. */
    int in_order = 1, shard_orders_differ = 0;
    for (int64_t i = 0; i < N; i++)
        in_order &= s42[i] == i;
    CHECK(!in_order);
    for (int e = 1; e < 3; e++)
        shard_orders_differ |= shard_of(s42[0]) != shard_of(s42[e * N]) ||
                               shard_of(s42[N - 1]) != shard_of(s42[e * N + N - 1]);
    CHECK(shard_orders_differ);

    /* Another seed, another order. */
    int64_t *s43 = sequence(43, 1, 4, N);
    CHECK(is_permutation(s43, N));
    CHECK(memcmp(s42, s43, (size_t)N * sizeof *s42) != 0);

    /* shuffle = 0: file order, every epoch. */
    int64_t *s0 = sequence(42, 0, 4, 2 * N);
    int file_order = 1;
    for (int64_t i = 0; i < 2 * N; i++)
        file_order &= s0[i] == i % N;
    CHECK(file_order);
    free(s0);
    free(s42);
    free(s42b);
    free(s43);
}

static void assign(void)
{
    /* Brute force: the shard of each g from a dp=1 sequence (same seed, so
     * the same g -> window map), the rank of g from the batch layout. */
    layout L = {3, 2, 4}; /* G = 24 */
    int64_t G = 24, N = n_samples;
    int64_t *seq = sequence(5, 1, 0, 3 * N);
    llmt_loader *l = make_loader(ds, L.B, L.A, 0, L.dp, 0, 5, 1);
    for (int64_t e = 0; e < 3; e++)
        for (int r = 0; r < L.dp; r++) {
            int want[NSHARDS] = {0};
            for (int64_t g = e * N; g < (e + 1) * N; g++)
                if ((g % G) / (L.B * L.A) == r)
                    want[shard_of(seq[g])] = 1;
            size_t n = 99;
            CHECK_STATUS(llmt_loader_assign_shards(l, r, e, NULL, 0, &n), LLMT_OK);
            int32_t ids[NSHARDS];
            size_t n2 = 0;
            CHECK_STATUS(llmt_loader_assign_shards(l, r, e, ids, NSHARDS, &n2), LLMT_OK);
            CHECK_EQ_INT(n, n2);
            int32_t expect[NSHARDS];
            size_t ne = 0;
            for (int i = 0; i < NSHARDS; i++)
                if (want[i])
                    expect[ne++] = i;
            CHECK_EQ_INT(n2, ne);
            CHECK(n2 == ne && !memcmp(ids, expect, ne * sizeof *ids));
            if (ne > 1) {
                CHECK_STATUS(llmt_loader_assign_shards(l, r, e, ids, 1, &n2),
                             LLMT_ERR_BUFFER_TOO_SMALL);
                CHECK_EQ_INT(n2, ne);
            }
        }
    /* Large batches: every rank's block spans several shards. */
    llmt_loader *big = make_loader(ds, 50, 1, 0, 2, 0, 5, 1);
    size_t n = 0;
    CHECK_STATUS(llmt_loader_assign_shards(big, 1, 0, NULL, 0, &n), LLMT_OK);
    CHECK(n >= 2);
    CHECK_STATUS(llmt_loader_assign_shards(big, 2, 0, NULL, 0, &n), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_loader_assign_shards(big, -1, 0, NULL, 0, &n), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_loader_assign_shards(big, 0, -1, NULL, 0, &n), LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt_loader_assign_shards(big, 0, 0, NULL, 0, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_assign_shards(NULL, 0, 0, NULL, 0, &n), LLMT_ERR_NULL_POINTER);
    llmt_loader_destroy(big);
    llmt_loader_destroy(l);
    free(seq);
}

/* After a resume whose cursor is not a multiple of the new layout's G (a
 * state saved under another batch layout), assign_shards lists what each
 * rank's loader then reads: checked against the loaders themselves over
 * three epochs. */
static void assign_after_resume(void)
{
    layout L = {3, 2, 4}; /* G = 24; the state is at cursor 5 */
    int64_t G = 24, N = n_samples, base = 5, len = (int64_t)L.B * L.A;
    llmt_loader *l0 = make_loader(ds, 5, 1, 0, 1, 0, 5, 1);
    int32_t *in = malloc(5 * T * sizeof *in), *tg = malloc(5 * T * sizeof *tg);
    int64_t ids[5]; /* holds both layouts' micro-batches (B = 5, then 3) */
    CHECK_STATUS(llmt_loader_next(l0, in, tg, ids), LLMT_OK);
    llmt_loader_state st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_STATUS(llmt_loader_get_state(l0, &st), LLMT_OK);
    CHECK_EQ_INT(st.cursor, base);
    llmt_loader_destroy(l0);
    int bad = 0;
    for (int r = 0; r < L.dp; r++) {
        llmt_loader *l = make_loader(ds, L.B, L.A, r, L.dp, 4, 5, 1);
        CHECK_STATUS(llmt_loader_set_state(l, &st), LLMT_OK);
        int read[3][NSHARDS] = {{0}};
        for (int64_t s = 0; base + s * G < 3 * N; s++)
            for (int a = 0; a < L.A; a++) {
                CHECK_STATUS(llmt_loader_next(l, in, tg, ids), LLMT_OK);
                for (int i = 0; i < L.B; i++) {
                    int64_t g = base + s * G + r * len + a * L.B + i;
                    if (g < 3 * N)
                        read[g / N][shard_of(ids[i])] = 1;
                }
            }
        for (int e = 0; e < 3; e++) {
            int32_t got[NSHARDS];
            size_t n = 0, ne = 0;
            CHECK_STATUS(llmt_loader_assign_shards(l, r, e, got, NSHARDS, &n), LLMT_OK);
            int32_t want[NSHARDS];
            for (int i = 0; i < NSHARDS; i++)
                if (read[e][i])
                    want[ne++] = i;
            if (n != ne || memcmp(got, want, ne * sizeof *want)) {
                bad++;
                fprintf(stderr,
                        "  rank %d epoch %d: assign_shards lists %zu shards, the "
                        "loader read %zu\n",
                        r, e, n, ne);
            }
        }
        llmt_loader_destroy(l);
    }
    CHECK_EQ_INT(bad, 0);
    free(in);
    free(tg);
}

static void bad_args(void)
{
    llmt_loader_opts o;
    CHECK_STATUS(llmt_loader_opts_init(NULL, sizeof o), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_opts_init(&o, 4), LLMT_ERR_STRUCT_SIZE);
    CHECK_STATUS(llmt_loader_opts_init(&o, sizeof o), LLMT_OK);
    CHECK_EQ_INT(o.seq_len, 1024);
    CHECK_EQ_INT(o.micro_batch, 4);
    CHECK_EQ_INT(o.grad_accum, 1);
    CHECK_EQ_INT(o.dp_size, 1);
    CHECK_EQ_INT(o.shuffle, 1);
    CHECK_EQ_INT(o.prefetch, 4);
    CHECK(o.seed == 1337);
    llmt_loader *l = NULL;
    CHECK_STATUS(llmt_loader_create(NULL, &o, &l), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_create(ds, NULL, &l), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_create(ds, &o, NULL), LLMT_ERR_NULL_POINTER);
    o.struct_size = 0;
    CHECK_STATUS(llmt_loader_create(ds, &o, &l), LLMT_ERR_STRUCT_SIZE);
    /* A bigger struct from a newer caller: fine while the extra is zero. */
    struct {
        llmt_loader_opts o;
        uint64_t extra;
    } big;
    memset(&big, 0, sizeof big);
    llmt_loader_opts_init(&big.o, sizeof big.o);
    big.o.struct_size = sizeof big;
    big.o.seq_len = T;
    CHECK_STATUS(llmt_loader_create(ds, &big.o, &l), LLMT_OK);
    llmt_loader_destroy(l);
    big.extra = 1;
    CHECK_STATUS(llmt_loader_create(ds, &big.o, &l), LLMT_ERR_STRUCT_SIZE);

    struct {
        int32_t seq_len, micro_batch, grad_accum, dp_rank, dp_size, prefetch;
        const char *what;
    } bad[] = {
        {0, 1, 1, 0, 1, 0, "seq_len"},    {-3, 1, 1, 0, 1, 0, "seq_len"},
        {T, 0, 1, 0, 1, 0, "micro_batch"}, {T, 1, 0, 0, 1, 0, "grad_accum"},
        {T, 1, 1, 4, 4, 0, "dp_rank 4"},   {T, 1, 1, -1, 4, 0, "dp_rank"},
        {T, 1, 1, 0, 0, 0, "dp_size"},     {T, 1, 1, 0, 1, -1, "prefetch"},
        {5000, 1, 1, 0, 1, 0, "seq_len + 1 = 5001"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        llmt_loader_opts_init(&o, sizeof o);
        o.seq_len = bad[i].seq_len;
        o.micro_batch = bad[i].micro_batch;
        o.grad_accum = bad[i].grad_accum;
        o.dp_rank = bad[i].dp_rank;
        o.dp_size = bad[i].dp_size;
        o.prefetch = bad[i].prefetch;
        l = (llmt_loader *)(uintptr_t)1;
        CHECK_STATUS(llmt_loader_create(ds, &o, &l), LLMT_ERR_INVALID_ARGUMENT);
        CHECK(l == NULL);
        if (!strstr(llmt_dataset_last_error(ds), bad[i].what)) {
            CHECK(0);
            fprintf(stderr, "  case %zu: %s\n", i, llmt_dataset_last_error(ds));
        }
    }

    /* get_state mid-step, NULLs, struct sizes. */
    l = make_loader(ds, 2, 2, 0, 1, 4, 1, 1);
    int32_t in[2 * T], tg[2 * T];
    llmt_loader_state st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_STATUS(llmt_loader_get_state(l, &st), LLMT_OK);
    CHECK_EQ_INT(st.cursor, 0);
    CHECK_STATUS(llmt_loader_next(l, in, tg, NULL), LLMT_OK);
    CHECK_STATUS(llmt_loader_get_state(l, &st), LLMT_ERR_STATE);
    CHECK(strstr(llmt_loader_last_error(l), "step") != NULL);
    CHECK_STATUS(llmt_loader_next(l, in, tg, NULL), LLMT_OK);
    CHECK_STATUS(llmt_loader_get_state(l, &st), LLMT_OK);
    CHECK_EQ_INT(st.cursor, 4);
    CHECK_STATUS(llmt_loader_next(NULL, in, tg, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_next(l, NULL, tg, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_next(l, in, NULL, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_get_state(NULL, &st), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_get_state(l, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_set_state(NULL, &st), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_set_state(l, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_samples_per_epoch(NULL, NULL), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_samples_per_epoch(l, NULL), LLMT_ERR_NULL_POINTER);
    int64_t spe = 0;
    CHECK_STATUS(llmt_loader_samples_per_epoch(l, &spe), LLMT_OK);
    CHECK_EQ_INT(spe, n_samples);
    llmt_loader_state small = st;
    small.struct_size = 8;
    CHECK_STATUS(llmt_loader_get_state(l, &small), LLMT_ERR_STRUCT_SIZE);
    CHECK_STATUS(llmt_loader_set_state(l, &small), LLMT_ERR_STRUCT_SIZE);
    llmt_loader_destroy(NULL);
    CHECK(llmt_loader_last_error(NULL) != NULL);

    /* A state of another dataset (same shapes, other tokens) or seq_len. */
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/other", dir);
    make_dataset(sub, 777);
    llmt_dataset *ds2 = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, sub, 1, &ds2), LLMT_OK);
    llmt_loader *l2 = make_loader(ds2, 2, 2, 0, 1, 4, 1, 1);
    llmt_loader_state st2;
    memset(&st2, 0, sizeof st2);
    st2.struct_size = sizeof st2;
    CHECK_STATUS(llmt_loader_get_state(l2, &st2), LLMT_OK);
    CHECK(st2.samples_per_epoch == st.samples_per_epoch);
    CHECK(st2.fingerprint != st.fingerprint);
    CHECK_STATUS(llmt_loader_set_state(l, &st2), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_loader_last_error(l), "fingerprint") != NULL);
    llmt_loader_destroy(l2);
    llmt_dataset_destroy(ds2);
    llmt_loader_opts_init(&o, sizeof o);
    o.seq_len = T + 1;
    CHECK_STATUS(llmt_loader_create(ds, &o, &l2), LLMT_OK);
    CHECK_STATUS(llmt_loader_get_state(l2, &st2), LLMT_OK);
    CHECK_STATUS(llmt_loader_set_state(l, &st2), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_loader_last_error(l), "seq_len") != NULL);
    llmt_loader_destroy(l2);
    /* The window length and sample order the state records: st is of a
     * shuffled loader of seq_len T */
    CHECK_EQ_INT(st.seq_len, T);
    CHECK_EQ_INT(st.order, 2);
    st2 = st;
    st2.seq_len = T + 1; /* as another seq_len with as many samples would */
    CHECK_STATUS(llmt_loader_set_state(l, &st2), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_loader_last_error(l), "seq_len") != NULL);
    st2 = st;
    st2.order = 1;
    CHECK_STATUS(llmt_loader_set_state(l, &st2), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_loader_last_error(l), "shuffle") != NULL);
    st2.order = 3;
    CHECK_STATUS(llmt_loader_set_state(l, &st2), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_loader_last_error(l), "order") != NULL);
    {
        llmt_loader *fo = make_loader(ds, 2, 2, 0, 1, 4, 1, 0); /* file order */
        llmt_loader_state fs;
        memset(&fs, 0, sizeof fs);
        fs.struct_size = sizeof fs;
        CHECK_STATUS(llmt_loader_get_state(fo, &fs), LLMT_OK);
        CHECK_EQ_INT(fs.order, 1);
        CHECK_STATUS(llmt_loader_set_state(l, &fs), LLMT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(llmt_loader_last_error(l), "shuffle 0") != NULL);
        /* a caller of the first layout (no seq_len, order): its struct is
         * neither written past nor checked */
        size_t v1 = offsetof(llmt_loader_state, fingerprint) + sizeof(uint64_t);
        llmt_loader_state old;
        memset(&old, 0x5a, sizeof old);
        old.struct_size = v1;
        CHECK_STATUS(llmt_loader_get_state(fo, &old), LLMT_OK);
        CHECK_EQ_INT(old.seq_len, 0x5a5a5a5a);
        CHECK_EQ_INT(old.order, 0x5a5a5a5a);
        CHECK_STATUS(llmt_loader_set_state(fo, &old), LLMT_OK);
        old = st; /* shuffled, but the fields are past its struct_size */
        old.struct_size = v1;
        CHECK_STATUS(llmt_loader_set_state(fo, &old), LLMT_OK);
        old.struct_size = v1 - 1;
        CHECK_STATUS(llmt_loader_set_state(fo, &old), LLMT_ERR_STRUCT_SIZE);
        llmt_loader_destroy(fo);
    }
    st2 = st;
    st2.cursor = n_samples;
    CHECK_STATUS(llmt_loader_set_state(l, &st2), LLMT_ERR_INVALID_ARGUMENT);
    st2.cursor = -1;
    CHECK_STATUS(llmt_loader_set_state(l, &st2), LLMT_ERR_INVALID_ARGUMENT);
    st2 = st;
    st2.epoch = -1;
    CHECK_STATUS(llmt_loader_set_state(l, &st2), LLMT_ERR_INVALID_ARGUMENT);
    /* After failed set_state calls the loader goes on where it was. */
    int64_t ids[2];
    CHECK_STATUS(llmt_loader_next(l, in, tg, ids), LLMT_OK);
    CHECK(window_ok(ids[0], in, tg) && window_ok(ids[1], in + T, tg + T));
    llmt_loader_destroy(l);
}

int main(void)
{
    dir = tu_mkdtemp();
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/main", dir);
    make_dataset(sub, 1);
    CHECK_STATUS(llmt_dataset_open(NULL, sub, 1, &ds), LLMT_OK);
    n_samples = first_id[NSHARDS];
    llmt_loader *l = make_loader(ds, 1, 1, 0, 1, 0, 1, 1);
    int64_t spe = 0;
    llmt_loader_samples_per_epoch(l, &spe);
    CHECK_EQ_INT(spe, n_samples);
    llmt_loader_destroy(l);

    resume_other_dp();
    resume_same_dp();
    determinism();
    assign();
    assign_after_resume();
    bad_args();

    llmt_dataset_destroy(ds);
    tu_rmtree(dir);
    free(dir);
    return check_exit("data-loader");
}
