/* Tensor parallelism composed with data parallelism and ZeRO 0-3
 * (lib/train/device.c, tp.c, dp.c) against the single-rank engine on the
 * same global batches:
 *
 *   test_device_tpdp cpu    the fp32 CPU backend; unit suite
 *   test_device_tpdp emul   the bf16 host emulation; unit suite
 *
 * Four ranks as threads on one in-process communicator, placed by an
 * llmt_plan of tp 2 x dp 2 (TP innermost: ranks 0,1 and 2,3 share layers);
 * each rank's TP and DP groups come from llmt_comm_create_plan_group. Every
 * TP rank of a DP replica reads that replica's half of each global batch
 * (2 of the 4 sequences); the single rank reads all 4 (2 micro-batches of
 * 2). Cases: GPT-2 and Llama with kv heads split (kv_heads 2 = tp) and
 * shared (kv_heads 1 < tp: the kv heads' gradients are summed over the TP
 * group after data parallelism's reduction), ZeRO 0, 1, 2, 3; ten AdamW
 * steps with clipping (the gradient norm counts each element once across
 * TP, by owner, and DP, by share). Checkpoints: ZeRO-1 and ZeRO-3 save
 * after step 5 (every rank its blocks) and go on; the ZeRO-1 one resumes
 * under tp 1 x dp 1, tp 4 x dp 1 (a second plan) and tp 2 x dp 2 ZeRO-3,
 * the ZeRO-3 one under tp 4 x dp 1, each within the bounds below from the
 * uninterrupted run; the tp 1 resume saves the state again at once, and
 * the two checkpoints' safetensors exports are equal byte for byte.
 *
 * Bounds: test_device_tp.c's, for the same reasons (tp and dp change only
 * the order of fp32 sums): losses within 1e-5 relative, final parameters
 * within 1e-5 relative L2 and 1e-5 absolute except at most 1 element in
 * 10^4 (within 1e-4); the emulation within the bf16 bound (2^-9 on the
 * losses, 2 x lr x steps on the fp32 masters). The measured worst cases are
 * printed. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dev_model_fixture.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "train/device.h"

#define STEPS 10
#define SEQS 4 /* sequences per global step */
#define T 16
#define V 97
#define LR 1e-3f
#define TP 2
#define DP 2
#define W (TP * DP)

static const llmt__dev_ops *g_ops;
static int g_bf16;
static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static llmt_plan *g_plan;
static double g_worst_loss, g_worst_param;

static void make_data(void)
{
    tp_fixture_data((size_t)STEPS * SEQS * T, V, &g_in, &g_tg);
}

static void config(int llama, int kv)
{
    tp_fixture_config(&g_cfg, llama, kv, V, T);
}

typedef struct rank_arg {
    llmt_comm *world; /* NULL: the single-rank reference */
    const llmt_plan *plan;
    int rank, nranks, zero;
    int k0;                  /* first step: > 0 resumes from `load` */
    const char *load, *save; /* read before k0; write after step SAVE_AT */
    const char *resave;      /* write right after the read (single rank) */
    float loss[STEPS];
    float *params;
    int64_t numel;
    llmt_status st;
    char err[1024];
} rank_arg;

#define SAVE_AT 5

/* A checkpoint of the trainer at `step` under root (every rank its
 * blocks), or read from the newest one there. */
static llmt_status ckpt_io(rank_arg *a, llmt_trainer *tr, const char *root, int save,
                           int64_t step)
{
    return rank_fixture_ckpt(tr, root, a->rank, a->world ? a->nranks : 1, save, step);
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *tpc = NULL, *dpc = NULL;
    int32_t co[LLMT_PLAN_NDIMS] = {0};
    int dp = 1;
    if (a->world) {
        a->st = tp_fixture_groups(a->world, a->plan, a->rank, co, &dp, &tpc, &dpc, a->err,
                                  sizeof a->err);
        if (a->st != LLMT_OK) {
            fprintf(stderr, "rank %d: %s\n", a->rank, a->err);
            return NULL; /* the comparison reports it */
        }
    }
    if (a->st == LLMT_OK)
        a->st = llmt_model_create(NULL, &g_cfg, &m);
    if (a->st == LLMT_OK) {
        llmt_trainer_opts o;
        rank_fixture_opts(&o, 2, SEQS / 2 / dp, T, LR);
        a->st = llmt__trainer_create_dev(m, &o, g_ops, &tr);
    }
    if (a->st == LLMT_OK && tpc)
        a->st = llmt_trainer_set_tp_comm(tr, tpc);
    if (a->st == LLMT_OK && dpc)
        a->st = tp_fixture_set_dp(tr, dpc, a->zero);
    if (a->st == LLMT_OK && a->load)
        a->st = ckpt_io(a, tr, a->load, 0, a->k0);
    if (a->st == LLMT_OK && a->resave)
        a->st = ckpt_io(a, tr, a->resave, 1, a->k0);
    for (int k = a->k0; k < STEPS && a->st == LLMT_OK; k++) {
        llmt_batch b = tp_fixture_batch(g_in, g_tg, k, SEQS, T, dp, co[LLMT_DIM_DP]);
        a->st = rank_fixture_step(tr, &b, &a->loss[k]);
        if (a->st == LLMT_OK && a->save && k + 1 == SAVE_AT)
            a->st = ckpt_io(a, tr, a->save, 1, SAVE_AT); /* the run goes on */
    }
    if (a->st == LLMT_OK)
        a->st = llmt_trainer_sync_params(tr); /* gathers over dp, then tp */
    rank_fixture_close(a->st, a->err, sizeof a->err, tr, m,
                       a->st == LLMT_OK ? &a->params : NULL, &a->numel);
    llmt_comm_destroy(dpc);
    llmt_comm_destroy(tpc);
    return NULL;
}

static llmt_plan *g_plan41; /* tp 4 x dp 1 */

/* One layout's run: world 0: the single rank; else W ranks placed by
 * plan. k0 > 0: resumed from `load`. */
static void run_from(int world, const llmt_plan *plan, int zero, int k0, const char *load,
                     const char *save, const char *resave, rank_arg *a)
{
    int n = world ? W : 1;
    memset(a, 0, (size_t)n * sizeof *a);
    for (int r = 0; r < n; r++) {
        a[r].plan = plan;
        a[r].rank = r;
        a[r].nranks = n;
        a[r].zero = zero;
        a[r].k0 = k0;
        a[r].load = load;
        a[r].save = save;
        a[r].resave = resave;
    }
    rank_fixture_run(a, sizeof *a, n, world, offsetof(rank_arg, world), rank_main);
}

static void run(int world, int zero, rank_arg *a)
{
    run_from(world, g_plan, zero, 0, NULL, NULL, NULL, a);
}

/* Every rank's losses from step k0 and final parameters against the
 * single rank's uninterrupted run, within the bounds above. */
static void check_ranks(const char *name, const char *what, rank_arg *a, int n,
                        const rank_arg *ref, int k0)
{
    rank_fixture_worst w = {0};
    for (int r = 0; r < n; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s %s rank %d: %s\n", name, what, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        if (a[r].st != LLMT_OK)
            continue;
        rank_fixture_losses(&w, a[r].loss, ref->loss, k0, STEPS, g_bf16);
        rank_fixture_params_check(&w, a[r].params, a[r].numel, ref->params, ref->numel, g_bf16,
                                  2.0 * LR * STEPS);
    }
    printf("%-20s %s: loss %.3f -> %.3f, loss rel diff %.2e (steps %d..%d); params: "
           "rel L2 diff %.2e, max abs diff %.2e, %lld of %lld above 1e-5\n",
           name, what, (double)ref->loss[0], (double)ref->loss[STEPS - 1], w.loss, k0 + 1,
           STEPS, w.rel, w.abs, (long long)w.over, (long long)ref->numel);
    if (w.loss > g_worst_loss)
        g_worst_loss = w.loss;
    if (w.abs > g_worst_param)
        g_worst_param = w.abs;
    for (int r = 0; r < n; r++)
        free(a[r].params);
}

static void rm_tree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static void compare(const char *name, int llama, int kv)
{
    config(llama, kv);
    rank_arg ref[1];
    run(0, 0, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    if (ref[0].st != LLMT_OK) {
        fprintf(stderr, "%s reference: %s\n", name, ref[0].err);
        return;
    }
    /* training moved: the comparison is not of two untouched inits */
    CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]);
    char dir[] = "/tmp/llmt_tpdp_XXXXXX", one[] = "/tmp/llmt_tpdp1_XXXXXX";
    char dir3[] = "/tmp/llmt_tpdp3_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(mkdtemp(one) != NULL);
    CHECK(mkdtemp(dir3) != NULL);
    for (int zero = 0; zero <= 3; zero++) {
        rank_arg a[W];
        char what[64];
        /* ZeRO-1 and 3 also save after step SAVE_AT (each rank its
         * blocks) and go on */
        run_from(1, g_plan, zero, 0, NULL, zero == 1 ? dir : zero == 3 ? dir3 : NULL, NULL, a);
        snprintf(what, sizeof what, "tp %d x dp %d ZeRO %d%s", TP, DP, zero,
                 zero % 2 ? " (saved)" : "");
        check_ranks(name, what, a, W, ref, 0);
    }
    /* resharding: the tp 2 x dp 2 ZeRO-1 checkpoint resumed under tp 1 x
     * dp 1 (which saves it again whole), tp 4 x dp 1, tp 2 x dp 2 ZeRO-3 */
    rank_arg a[W];
    run_from(0, NULL, 0, SAVE_AT, dir, NULL, one, a);
    check_ranks(name, "resumed tp 1 x dp 1", a, 1, ref, SAVE_AT);
    run_from(1, g_plan41, 0, SAVE_AT, dir, NULL, NULL, a);
    check_ranks(name, "resumed tp 4 x dp 1", a, W, ref, SAVE_AT);
    run_from(1, g_plan, 3, SAVE_AT, dir, NULL, NULL, a);
    check_ranks(name, "resumed tp 2 x dp 2 ZeRO 3", a, W, ref, SAVE_AT);
    /* and the ZeRO-3 checkpoint under tp 4 x dp 1 */
    run_from(1, g_plan41, 0, SAVE_AT, dir3, NULL, NULL, a);
    check_ranks(name, "ZeRO-3's resumed tp 4", a, W, ref, SAVE_AT);
    /* the TP checkpoint exports as the single rank's, byte for byte */
    char *x = NULL, *y = NULL, f1[600], f2[600];
    snprintf(f1, sizeof f1, "%s.tp.safetensors", dir);
    snprintf(f2, sizeof f2, "%s.one.safetensors", one);
    long nx = rank_fixture_export(dir, f1, 0, &x), ny = rank_fixture_export(one, f2, 0, &y);
    int same = nx > 0 && nx == ny && !memcmp(x, y, (size_t)nx);
    CHECK(same);
    printf("%-20s safetensors export of the tp 2 x dp 2 checkpoint: %ld bytes, %s the single "
           "rank's (%ld bytes)\n",
           name, nx, same ? "identical to" : "DIFFERENT from", ny);
    free(x);
    free(y);
    rm_tree(dir);
    rm_tree(one);
    rm_tree(dir3);
    free(ref[0].params);
}

int main(int argc, char **argv)
{
    if (dev_model_mode(argc, argv, "test_device_tpdp", &g_ops, &g_bf16) != 0)
        return 2;
    const char *js = "{\"name\": \"tpdp\", \"model\": {\"arch\": \"gpt2\", \"layers\": 2, "
                     "\"hidden\": 64, \"heads\": 4, \"vocab\": 97, \"seq_len\": 16}, "
                     "\"parallelism\": {\"tp\": 2, \"dp\": 2}, "
                     "\"batch\": {\"micro\": 2, \"grad_accum\": 1}}";
    llmt_spec *spec = NULL;
    llmt_status s = llmt_spec_parse_json(NULL, js, strlen(js), &spec);
    if (s == LLMT_OK)
        s = llmt_plan_create(NULL, spec, W, &g_plan);
    CHECK_STATUS(s, LLMT_OK);
    llmt_spec_destroy(spec);
    if (s != LLMT_OK)
        return check_exit("device-tpdp");
    const char *js4 = "{\"name\": \"tp4\", \"model\": {\"arch\": \"gpt2\", \"layers\": 2, "
                      "\"hidden\": 64, \"heads\": 4, \"vocab\": 97, \"seq_len\": 16}, "
                      "\"parallelism\": {\"tp\": 4, \"dp\": 1}, "
                      "\"batch\": {\"micro\": 2, \"grad_accum\": 1}}";
    s = llmt_spec_parse_json(NULL, js4, strlen(js4), &spec);
    if (s == LLMT_OK)
        s = llmt_plan_create(NULL, spec, W, &g_plan41);
    CHECK_STATUS(s, LLMT_OK);
    llmt_spec_destroy(spec);
    if (s != LLMT_OK)
        return check_exit("device-tpdp");
    /* TP innermost: rank 1 is rank 0's TP peer, rank 2 its DP peer */
    int32_t c1[LLMT_PLAN_NDIMS], c2[LLMT_PLAN_NDIMS];
    llmt_plan_coords(g_plan, 1, c1);
    llmt_plan_coords(g_plan, 2, c2);
    CHECK(c1[LLMT_DIM_TP] == 1 && c1[LLMT_DIM_DP] == 0);
    CHECK(c2[LLMT_DIM_TP] == 0 && c2[LLMT_DIM_DP] == 1);
    make_data();
    compare("gpt2", 0, 0);
    compare("llama kv2 (split)", 1, 2);
    compare("llama kv1 (shared)", 1, 1);
    printf("worst: loss %.2e relative, parameters %.2e absolute\n", g_worst_loss,
           g_worst_param);
    llmt_plan_destroy(g_plan);
    llmt_plan_destroy(g_plan41);
    free(g_in);
    free(g_tg);
    return check_exit("device-tpdp");
}
