/* Resharding on load across model-parallel layouts. A GPT-like state
 * (embeddings, per-layer attention/MLP weights and biases, norms, AdamW
 * moments) is saved by every rank of a tp x pp x dp layout (zero stage 0 or
 * 1), each rank on its own thread with its own handle, and read back under
 * other layouts (tp1.dp4, tp4.pp1.dp2, one rank, ...): every element must
 * equal the original global tensor exactly. Megatron-style placement:
 *  - column-parallel weights/biases (qkv, fc, vocab embedding) split dim 0
 *    over tp, row-parallel weights (attn proj, mlp proj) split dim 1,
 *    norms and row-parallel biases replicated over tp (tp rank 0 saves);
 *  - layer l lives on pipeline stage l * pp / L, embeddings on stage 0,
 *    the final norm on the last stage;
 *  - parameters are replicated over dp (dp rank 0 saves them);
 *  - zero 0: optimizer moments like the parameters; zero 1: each dp rank
 *    saves rows [n*i/dp, n*(i+1)/dp) of its tp block's moments.
 * Also checks that a row block is read without reading the whole chunk. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard_model.h"

static int run_layout(const layout *y, const char *root, int64_t step, int load)
{
    int world = y->tp * y->pp * y->dp;
    pthread_t th[64];
    job jobs[64];
    for (int r = 0; r < world; r++) {
        jobs[r] = (job){y, root, r, world, step, 0, load};
        pthread_create(&th[r], NULL, run_rank, &jobs[r]);
    }
    int ok = 1;
    for (int r = 0; r < world; r++) {
        pthread_join(th[r], NULL);
        ok &= jobs[r].ok;
    }
    if (!ok)
        fprintf(stderr, "layout %s (%s step %lld) failed\n", y->tag, load ? "load" : "save",
                (long long)step);
    return ok;
}

/* Bytes this process has read so far (Linux /proc/self/io rchar). */
static long long rchar(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    long long v = -1;
    char line[128];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "rchar: %lld", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

static void test_partial_read(void)
{
    char *root = tmpdir_make(NULL, "partial");
    enum { R = 1024, K = 1024 };
    float *x = malloc((size_t)R * K * sizeof(float));
    for (int64_t i = 0; i < (int64_t)R * K; i++)
        x[i] = (float)i;
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.verify = LLMT_CKPT_VERIFY_NONE;
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(NULL, root, &o, &ck), LLMT_OK);
    int64_t shp[2] = {R, K};
    llmt_tensor v;
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, shp, x, LLMT_DEVICE_CPU, 0);
    CHECK_STATUS(llmt_ckpt_begin(ck, 1), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_add_tensor(ck, "big", &v, NULL, NULL), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_open_latest(ck, NULL), LLMT_OK);
    /* rows [512, 768): 1 MiB of the 4 MiB chunk */
    int64_t bs[2] = {256, K}, bo[2] = {512, 0};
    float *y = malloc((size_t)256 * K * sizeof(float));
    llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, bs, y, LLMT_DEVICE_CPU, 0);
    long long before = rchar();
    CHECK_STATUS(llmt_ckpt_read(ck, "big", &v, bo), LLMT_OK);
    long long read = rchar() - before;
    CHECK(!memcmp(y, x + 512 * K, (size_t)256 * K * sizeof(float)));
    if (before >= 0) {
        fprintf(stderr, "partial read: %lld bytes for a 1 MiB block of a 4 MiB chunk\n", read);
        CHECK(read >= 256 * K * 4 && read < 256 * K * 4 + 65536);
    }
    /* with VERIFY_READ the span widens to the hashed 1 MiB blocks only */
    llmt_ckpt_destroy(ck);
    o.verify = LLMT_CKPT_VERIFY_READ;
    CHECK_STATUS(llmt_ckpt_create(NULL, root, &o, &ck), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_open_latest(ck, NULL), LLMT_OK);
    bo[0] = 600; /* rows 600..855: crosses into a third block */
    before = rchar();
    CHECK_STATUS(llmt_ckpt_read(ck, "big", &v, bo), LLMT_OK);
    read = rchar() - before;
    CHECK(!memcmp(y, x + 600 * K, (size_t)256 * K * sizeof(float)));
    if (before >= 0)
        CHECK(read <= 2 * (1 << 20) + 65536);
    llmt_ckpt_destroy(ck);
    free(x);
    free(y);
    tmpdir_remove(root);
    free(root);
}

int main(void)
{
    build_model();
    static const layout tp2pp2dp2z1 = {2, 2, 2, 1, "tp2.pp2.dp2.zero1"};
    static const layout tp1dp4 = {1, 1, 4, 0, "tp1.dp4"};
    static const layout tp1dp4z1 = {1, 1, 4, 1, "tp1.dp4.zero1"};
    static const layout tp4pp1dp2 = {4, 1, 2, 1, "tp4.pp1.dp2.zero1"};
    static const layout tp4pp1dp2z0 = {4, 1, 2, 0, "tp4.pp1.dp2"};
    static const layout one = {1, 1, 1, 0, "one rank"};
    static const layout tp2pp4 = {2, 4, 1, 0, "tp2.pp4.dp1"};
    static const layout odd = {1, 2, 3, 1, "tp1.pp2.dp3.zero1"};
    const layout *loads[] = {&tp1dp4, &tp1dp4z1, &tp4pp1dp2, &tp4pp1dp2z0, &one, &tp2pp4,
                             &odd, &tp2pp2dp2z1};
    char *root = tmpdir_make(NULL, "reshard-mp");
    CHECK(root != NULL);
    CHECK(run_layout(&tp2pp2dp2z1, root, 100, 0));
    for (size_t i = 0; i < sizeof loads / sizeof loads[0]; i++)
        CHECK(run_layout(loads[i], root, 100, 1));
    /* the other way round: saved under tp4.pp1.dp2 zero-1 and under one rank */
    CHECK(run_layout(&tp4pp1dp2, root, 200, 0));
    CHECK(run_layout(&tp2pp2dp2z1, root, 200, 1));
    CHECK(run_layout(&one, root, 200, 1));
    CHECK(run_layout(&odd, root, 200, 1));
    CHECK(run_layout(&one, root, 300, 0));
    CHECK(run_layout(&tp2pp2dp2z1, root, 300, 1));
    CHECK(run_layout(&tp4pp1dp2, root, 300, 1));
    /* the placement as saved: chunks, ranks, offsets */
    {
        llmt_ckpt *ck = NULL;
        CHECK_STATUS(llmt_ckpt_create(NULL, root, NULL, &ck), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_open_step(ck, 100), LLMT_OK);
        int32_t world = 0;
        size_t nc = 0;
        CHECK_STATUS(llmt_ckpt_open_info(ck, &world, NULL, NULL), LLMT_OK);
        CHECK_EQ_INT(world, 8);
        CHECK_STATUS(llmt_ckpt_tensor_info(ck, "param/wte", NULL, NULL, NULL, &nc), LLMT_OK);
        CHECK_EQ_INT(nc, 2); /* tp 2, dp replicas not saved */
        CHECK_STATUS(llmt_ckpt_tensor_info(ck, "adam_m/wte", NULL, NULL, NULL, &nc), LLMT_OK);
        CHECK_EQ_INT(nc, 4); /* tp 2 x dp 2 (zero-1) */
        int32_t r = -1;
        int64_t off[LLMT_MAX_DIMS], shp[LLMT_MAX_DIMS];
        uint64_t bytes = 0;
        CHECK_STATUS(llmt_ckpt_chunk_info(ck, "param/wte", 1, &r, off, shp, &bytes), LLMT_OK);
        CHECK(r == 1 && off[0] == 20 && shp[0] == 20 && shp[1] == C && bytes == 20 * C * 4);
        llmt_ckpt_destroy(ck);
    }
    tmpdir_remove(root);
    free(root);
    test_partial_read();
    return check_exit("test_reshard");
}
