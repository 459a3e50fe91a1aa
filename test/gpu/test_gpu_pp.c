/* Pipeline parallelism on an engine whose memory is not the host's: the
 * boundary messages (activations, their gradients, the forward-only
 * passes of evaluate and generate, a tied embedding's gradient sum)
 * staged through host memory over a host communicator by
 * lib/train/pp_xfer.c.
 *
 * `test_gpu_pp emul` (unit suite: pp-stage-emul, any build): the bf16
 * emulation's table copied with host_memory 0, so the trainer takes the
 * staged path (its memory is host memory underneath, so the run is
 * otherwise the same), against the emulation as it is (unstaged), stages
 * as threads: GPT-2 (tied head) 1F1B and Llama GPipe over an in-process
 * communicator, Llama interleaved (v 2) too, and GPT-2 1F1B and Llama
 * interleaved over Gloo (sends posted and left in flight: pp_send.c's
 * host copies; SKIPped without Gloo). Each stage's losses of six AdamW
 * steps, its evaluate loss, its greedy tokens and every parameter must
 * equal the unstaged run's bit for bit (a wrong size, offset, direction
 * or a copy read before it was written would show), and the staged run
 * must have copied more out by d2h (the messages went through the host).
 * Also: a table marked unverified_pp (the CUDA table's own mark, or the
 * test's) is refused naming why, before any message.
 *
 * `test_gpu_pp cuda` (gpu suite: gpu-pp-engine; SKIPs without a GPU):
 * the same cases on the CUDA table with unverified_pp cleared (the test's
 * opt-in), stages as threads on one GPU over an in-process communicator,
 * against one CUDA rank on the same batches: losses within 2^-9 relative
 * (the bf16 bound of device-pp-emul), evaluate within 2^-9, the tokens in
 * range; first the shipped table's refusal. It passed on an H100
 * (2026-11-27), which cleared unverified_pp in cuda/exec/dev_cuda.c. */
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "gpu_engine_probe.h"
#include "gpu_counted.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "stage_fixture.h"
#include "train/device.h"

#define STEPS 6
#define MICRO 2
#define M 4
#define T 16
#define V 97
#define LR 1e-3f
#define GEN 4
#define MAXPP 2

#define MARK "has not run here (the test's mark): test gpu-pp-engine"

static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static int g_cuda;
static char g_store[64]; /* Gloo: the store's directory */
static int g_case;       /* Gloo: the store's prefix per run */
/* the staged table (host_memory 0) and the unstaged one, each with its
 * d2h counted; inner: the tables they forward to */
static llmt__dev_ops g_staged, g_plain;
static const llmt__dev_ops *g_staged_inner, *g_plain_inner;
static atomic_size_t g_staged_d2h, g_plain_d2h;

GPU_COUNTED_COPY(staged_d2h, d2h, g_staged_d2h, g_staged_inner)
GPU_COUNTED_COPY(plain_d2h, d2h, g_plain_d2h, g_plain_inner)

typedef struct rank_arg {
    llmt_comm *c;
    const llmt__dev_ops *ops;
    int rank, pp, m, sched, v, gloo;
    float loss[STEPS];
    float eval;
    int32_t gen[GEN];
    float *params;
    int64_t numel;
    llmt_status st;
    char err[1024];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_trainer_opts o;
    rank_fixture_opts(&o, MICRO, a->m, T, LR);
    o.deterministic = 1;
    if (g_cuda)
        o.device = LLMT_DEVICE_CUDA;
    a->st = stage_fixture_open(&g_cfg, &o, a->ops, &m, &tr);
    if (a->st == LLMT_OK && a->gloo) {
        char pre[32];
        snprintf(pre, sizeof pre, "case%d", g_case);
        a->st = llmt_comm_create_from_store(NULL, g_store, pre, a->rank, a->pp, NULL, &a->c);
    }
    if (a->st == LLMT_OK && a->pp > 1) {
        llmt_pp_opts po;
        stage_fixture_pp_opts(&po, a->sched, a->v, NULL, 0);
        a->st = llmt_trainer_set_pp_comm(tr, a->c, &po);
    }
    if (a->st == LLMT_OK)
        a->st = stage_fixture_steps(tr, g_in, g_tg, 0, STEPS, 1, 0, a->m, MICRO, T, a->loss);
    llmt_batch b = {sizeof b, g_in, g_tg, a->m * MICRO, T};
    if (a->st == LLMT_OK) /* a forward-only pass (pp_infer.c) */
        a->st = llmt_trainer_evaluate(tr, &b, &a->eval);
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_generate(tr, g_in, 3, GEN, 0.0f, 0, 1, a->gen);
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr);
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m, &a->params, &a->numel);
    if (a->gloo)
        llmt_comm_destroy(a->c);
    return NULL;
}

static void run(const llmt__dev_ops *ops, int pp, int sched, int v, int gloo, rank_arg *a)
{
    g_case++;
    for (int r = 0; r < pp; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].ops = ops;
        a[r].rank = r;
        a[r].pp = pp;
        a[r].m = M;
        a[r].sched = sched;
        a[r].v = v;
        a[r].gloo = gloo;
    }
    rank_fixture_run(a, sizeof *a, pp, pp > 1 && !gloo, offsetof(rank_arg, c), rank_main);
}

static void free_args(rank_arg *a, int n)
{
    for (int r = 0; r < n; r++)
        free(a[r].params);
}

static int all_ok(const char *name, const rank_arg *a, int n)
{
    int ok = 1;
    for (int r = 0; r < n; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s rank %d: %s\n", name, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        ok = ok && a[r].st == LLMT_OK;
    }
    return ok;
}

static const char *sched_name(int sched, int v)
{
    return sched == LLMT_PP_GPIPE ? "gpipe" : v > 1 ? "interleaved" : "1f1b";
}

/* The emulation: staged against unstaged, bit for bit. */
static void compare_emul(const char *name, int llama, int sched, int v, int gloo)
{
    tp_fixture_config(&g_cfg, llama, 2, V, T);
    g_cfg.layers = 4;
    rank_arg a[MAXPP], b[MAXPP];
    size_t p0 = atomic_load(&g_plain_d2h);
    run(&g_plain, 2, sched, v, gloo, b);
    size_t p1 = atomic_load(&g_plain_d2h), s0 = atomic_load(&g_staged_d2h);
    run(&g_staged, 2, sched, v, gloo, a);
    size_t s1 = atomic_load(&g_staged_d2h);
    if (all_ok(name, b, 2) && all_ok(name, a, 2)) {
        int same = 1;
        for (int r = 0; r < 2; r++) {
            CHECK(!memcmp(a[r].loss, b[r].loss, sizeof a[r].loss));
            CHECK(!memcmp(&a[r].eval, &b[r].eval, sizeof a[r].eval));
            CHECK(!memcmp(a[r].gen, b[r].gen, sizeof a[r].gen));
            CHECK_EQ_INT(a[r].numel, b[r].numel);
            int pe = a[r].numel == b[r].numel && a[r].params && b[r].params &&
                     !memcmp(a[r].params, b[r].params, (size_t)a[r].numel * sizeof(float));
            CHECK(pe);
            same = same && pe && !memcmp(a[r].loss, b[r].loss, sizeof a[r].loss);
        }
        /* the messages went through the host: at least one boundary
         * tensor (B T width bf16) per micro-batch more copied out */
        size_t one = (size_t)MICRO * T * g_cfg.width * 2;
        CHECK(s1 - s0 >= p1 - p0 + (size_t)M * one);
        CHECK(b[1].loss[STEPS - 1] < b[1].loss[0]); /* it trained */
        printf("%-6s %-11s %-8s: loss %.4f -> %.4f, eval %.4f, staged run %s the unstaged "
               "bit for bit; d2h bytes staged %zu, unstaged %zu\n",
               name, sched_name(sched, v), gloo ? "gloo" : "inproc", (double)b[1].loss[0],
               (double)b[1].loss[STEPS - 1], (double)b[1].eval,
               same ? "equals" : "DIFFERS from", s1 - s0, p1 - p0);
    }
    free_args(a, 2);
    free_args(b, 2);
}

/* CUDA: pp 2 against one CUDA rank on the same batches. */
static void compare_cuda(const char *name, int llama, int sched, int v)
{
    tp_fixture_config(&g_cfg, llama, 2, V, T);
    g_cfg.layers = 4;
    rank_arg ref[1], a[MAXPP];
    run(&g_staged, 1, sched, 1, 0, ref);
    run(&g_staged, 2, sched, v, 0, a);
    if (all_ok(name, ref, 1) && all_ok(name, a, 2)) {
        rank_fixture_worst w = {0};
        for (int r = 0; r < 2; r++) {
            rank_fixture_losses(&w, a[r].loss, ref[0].loss, 0, STEPS, 1);
            double e = fabs((double)a[r].eval - ref[0].eval) / fabs((double)ref[0].eval);
            CHECK(e <= 1.0 / 512);
            for (int k = 0; k < GEN; k++)
                CHECK(a[r].gen[k] >= 0 && a[r].gen[k] < V);
        }
        CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
        printf("%-6s %-11s: cuda pp 2 vs pp 1: loss %.4f -> %.4f, loss rel diff %.2e, "
               "eval %.4f vs %.4f\n",
               name, sched_name(sched, v), (double)ref[0].loss[0],
               (double)ref[0].loss[STEPS - 1], w.loss, (double)a[1].eval, (double)ref[0].eval);
    }
    free_args(ref, 1);
    free_args(a, 2);
}

/* A table with unverified_pp set (base's own reason, or the test's mark
 * where it has none): pp refused naming why, at the attach. */
static void check_refused(const llmt__dev_ops *base)
{
    llmt__dev_ops marked = *base;
    if (!marked.unverified_pp)
        marked.unverified_pp = MARK;
    tp_fixture_config(&g_cfg, 0, 0, V, T);
    g_cfg.layers = 4;
    rank_arg a[MAXPP];
    run(&marked, 2, LLMT_PP_1F1B, 1, 0, a);
    for (int r = 0; r < 2; r++) {
        printf("pp 2 on the %s table with unverified_pp, rank %d: %s\n", base->name, r,
               a[r].err);
        CHECK_STATUS(a[r].st, LLMT_ERR_UNSUPPORTED);
        CHECK(strstr(a[r].err, marked.unverified_pp) && strstr(a[r].err, "gpu-pp-engine"));
    }
    free_args(a, 2);
}

/* The tables under test: base's copy as the staged one (host_memory 0,
 * unverified_pp cleared: the opt-in) and the emulation as it is. */
static void tables(const llmt__dev_ops *base)
{
    g_staged_inner = base;
    g_staged = *base;
    g_staged.host_memory = 0;
    g_staged.unverified_pp = NULL;
    g_staged.d2h = staged_d2h;
    g_plain_inner = llmt__dev_emul();
    g_plain = *g_plain_inner;
    g_plain.d2h = plain_d2h;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "emul";
    const llmt__dev_ops *cu = llmt__dev_cuda();
    tp_fixture_data((size_t)STEPS * M * MICRO * T, V, &g_in, &g_tg);
    if (!strcmp(mode, "emul")) {
        tables(llmt__dev_emul());
        llmt__dev_ops marked = g_staged;
        marked.unverified_pp = cu ? cu->unverified_pp : NULL;
        check_refused(&marked);
        compare_emul("gpt2", 0, LLMT_PP_1F1B, 1, 0);
        compare_emul("llama", 1, LLMT_PP_GPIPE, 1, 0);
        compare_emul("llama", 1, LLMT_PP_INTERLEAVED, 2, 0);
        if (llmt_build_features() & LLMT_FEATURE_GLOO) {
            snprintf(g_store, sizeof g_store, "/tmp/llmt-ppstage-XXXXXX");
            CHECK(mkdtemp(g_store) != NULL);
            compare_emul("gpt2", 0, LLMT_PP_1F1B, 1, 1);
            compare_emul("llama", 1, LLMT_PP_INTERLEAVED, 2, 1);
            rank_fixture_rmtree(g_store);
        } else {
            printf("no Gloo in this build: the posted sends' staging not checked\n");
        }
        free(g_in);
        free(g_tg);
        return check_exit("pp-stage-emul");
    }
    if (strcmp(mode, "cuda")) {
        fprintf(stderr, "usage: test_gpu_pp [emul|cuda]\n");
        return 2;
    }
    if (!cu) {
        printf("SKIP: a build without CUDA\n");
        return CHECK_SKIP;
    }
    tp_fixture_config(&g_cfg, 0, 0, V, T);
    g_cfg.layers = 4;
    if (!gpu_engine_probe(cu, &g_cfg, MICRO, M, T, LR))
        return CHECK_SKIP;
    g_cuda = 1;
    tables(cu);
    check_refused(cu);
    compare_cuda("gpt2", 0, LLMT_PP_1F1B, 1);
    compare_cuda("llama", 1, LLMT_PP_GPIPE, 1);
    compare_cuda("llama", 1, LLMT_PP_INTERLEAVED, 2);
    free(g_in);
    free(g_tg);
    return check_exit("gpu-pp-engine");
}
