/* The fp8 scales a step's recipe moved, in the device engine's forward
 * passes that take no batch through upload() (lib/train/device.c):
 * generate's (llmt__devtrain_last_logits) uploads its tokens alone, so
 * those scales reach the device only through lin_fp8's fresh_scales; the
 * MoE experts' fp8 GEMMs (moe_dev.c) read the device's scales themselves.
 * With every dense Linear of a layer in bf16 (tp 2 of width 48, 4 heads
 * of 12: qkv's 72 columns and proj's 24 rows are not multiples of 16) and
 * the experts in fp8 (width 48, moe_ffn 32), generate ran the experts
 * with the scales of the step before.
 *
 * tp 2 (ranks as threads) on the bf16 emulation, 3 steps; after each,
 * generate's logits of a window (the scales as the step left them),
 * then an evaluate (its upload takes the scales to the device) and the
 * same logits again: equal bit for bit (the forward is deterministic),
 * on both ranks; the forward's fp8 GEMMs all the experts' (a multiple of
 * 3, none of the 2 per layer of qkv and proj) and the experts' scales
 * moved off 1 (the case is the one described). Before the fix the logits
 * after a step differed from those after the evaluate. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "moe_dev_fixture.h"
#include "moe_fixture.h"
#include "rank_fixture.h"
#include "train/device.h"

enum { B = 2, T = 16, V = 61, VP = 64, ACC = 2, STEPS = 3, E = 4, K = 2, FE = 32, L = 2 };
enum { WIN = 11 }; /* generate's window: not a multiple of 16 either */
#define LR 1e-3f

static int32_t g_in[(STEPS + 1) * ACC * B * T], g_tg[(STEPS + 1) * ACC * B * T];

/* every layer MoE of 4 experts of 32, one shared, dropless; width 48 of
 * 4 heads and 4 KV heads of 12 */
static void cfg(llmt_model_config *c)
{
    moe_dev_config(c, V, T, L, E, K, FE, 1, 1, 0, 0);
    c->width = 48;
    c->heads = 4;
    c->kv_heads = 4;
}

typedef struct rank_arg {
    moe_dev_rank a;
    float stale[STEPS][VP], fresh[STEPS][VP]; /* after the step; after an evaluate */
    int gemms[STEPS];                         /* the forward's fp8 GEMMs */
    int moved;                                /* expert weight scales off 1 at the end */
} rank_arg;

/* How many of the experts' weight scales (slots 2..4 of each layer's 5:
 * tensors 2s + 1) left 1. */
static int experts_moved(llmt__devtrain *g)
{
    const float *sc = NULL;
    int n = 0, g0, g1, moved = 0;
    if (llmt__devtrain_fp8_state(g, &sc, &n, &g0, &g1) != 1 || n != 3 * 5 * L)
        return -1;
    for (int l = 0; l < L; l++)
        for (int k = 2; k < 5; k++)
            moved += sc[2 * (l * 5 + k) + 1] != 1.0f;
    return moved;
}

/* step k's generate logits (into stale), an evaluate, the same logits
 * again (into fresh) */
static llmt_status infer(rank_arg *ra, llmt_trainer *tr, int k)
{
    llmt__devtrain *g = llmt__trainer_devtrain(tr);
    const int32_t *win = g_in + (size_t)k * ACC * B * T;
    const float *sc = NULL;
    int n = 0, bwd = 0;
    llmt_status s = llmt__devtrain_last_logits(g, win, WIN, ra->stale[k]);
    if (s != LLMT_OK)
        return s;
    llmt__devtrain_fp8_state(g, &sc, &n, &ra->gemms[k], &bwd);
    llmt_batch b = moe_dev_batch(g_in, g_tg, T, ACC * B, STEPS, B, 0);
    float loss = 0;
    if ((s = llmt_trainer_evaluate(tr, &b, &loss)) != LLMT_OK)
        return s;
    return llmt__devtrain_last_logits(g, win, WIN, ra->fresh[k]);
}

static void *rank_main(void *p)
{
    rank_arg *ra = p;
    moe_dev_rank *a = &ra->a;
    moe_dev_handles h = {NULL, NULL, NULL};
    llmt_model_config c;
    cfg(&c);
    a->st = moe_dev_open(&c, llmt__dev_emul(), B, ACC, T, LR, 1, &h.m, &h.tr);
    moe_dev_rank_attach(a, &h);
    for (int k = 0; k < STEPS && a->st == LLMT_OK; k++) {
        moe_dev_rank_step(a, &h, g_in, g_tg, T, ACC * B, k);
        if (a->st == LLMT_OK)
            a->st = infer(ra, h.tr, k);
    }
    if (a->st == LLMT_OK)
        ra->moved = experts_moved(llmt__trainer_devtrain(h.tr));
    moe_dev_rank_end(a, &h);
    return NULL;
}

int main(void)
{
    moe_fixture_data(g_in, g_tg, (int)(sizeof g_in / sizeof g_in[0]), V, 0x66387363u);
    static rank_arg a[2];
    const moe_dev_rank lay = {.tp = 2};
    moe_dev_run(a, sizeof a[0], 2, offsetof(rank_arg, a), 2, &lay, rank_main);
    int same = 0, differ = 0;
    for (int r = 0; r < 2; r++) {
        CHECK_STATUS(a[r].a.st, LLMT_OK);
        if (a[r].a.st != LLMT_OK) {
            fprintf(stderr, "tp 2 rank %d: %s\n", r, a[r].a.err);
            continue;
        }
        CHECK_EQ_INT(a[r].moved, 3 * L);
        for (int k = 0; k < STEPS; k++) {
            /* the experts' GEMMs alone: 3 per busy expert, no qkv / proj */
            CHECK(a[r].gemms[k] > 0 && a[r].gemms[k] % 3 == 0);
            int eq = memcmp(a[r].stale[k], a[r].fresh[k], sizeof a[r].stale[k]) == 0;
            CHECK(eq);
            same += eq;
            if (!eq) {
                int i = 0;
                while (i < VP && a[r].stale[k][i] == a[r].fresh[k][i])
                    i++;
                fprintf(stderr,
                        "rank %d after step %d: generate's logit %d %.9g, after an "
                        "evaluate %.9g\n",
                        r, k + 1, i, a[r].stale[k][i], a[r].fresh[k][i]);
            }
            differ += k > 0 && memcmp(a[r].fresh[k], a[r].fresh[0], sizeof a[r].fresh[k]);
        }
    }
    /* the steps change the logits: the comparison is not of constants */
    CHECK(differ > 0);
    printf("tp 2, fp8 experts, bf16 qkv and proj: generate's logits after each of %d steps "
           "equal to those after an evaluate's upload: %d of %d; forward fp8 GEMMs %d "
           "(experts only); expert scales moved %d, %d of %d\n",
           STEPS, same, 2 * STEPS, a[0].gemms[STEPS - 1], a[0].moved, a[1].moved, 3 * L);
    for (int r = 0; r < 2; r++)
        free(a[r].a.params);
    return check_exit("fp8-infer-scales");
}
