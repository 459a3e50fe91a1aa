/* The op table's expert parallel layer (lib/train/moe_dev_ep.c) refusing
 * one rank's over-full counts on every rank of its group alike, ranks as
 * threads on an in-process group with a 5 s collective timeout, on the
 * fp32 CPU table, the bf16 emulation and the emulation on host_memory 0
 * (the staged exchange a GPU takes):
 *
 *   every token of every rank chooses experts hot and hot + 1 (the
 *   router's rows of those two weigh every positive input, 0.2 and 0.1,
 *   the others 0). The group's context is made at capacity factor 1
 *   (E 8, top-2, 16 tokens: a block of 4 rows per expert); one rank's
 *   routing state is dropless (made for a capacity of 16), so that rank
 *   keeps 16 rows for expert hot, past the block its owner's exchange
 *   holds. The counts' all-gather (llmt__moe_ep_counts, moe_ep.c) lets
 *   every rank check every owner's counts: every rank's
 *   llmt__moe_dev_ep_fwd returns LLMT_ERR_INTERNAL naming the rank and
 *   the block, in well under the timeout (< 1 s). A refusal by the owner
 *   alone (moe_ep.c before 2026-11-27, or moe_dev_ep.c's own check of
 *   the owner's rows) leaves the other ranks in the dispatch all-to-all
 *   until LLMT_ERR_TIMEOUT. The over-full rank is the owner of hot, or
 *   another rank, at ep 2 and 4. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "train/moe.h"
#include "train/moe_dev.h"

enum { E = 8, K = 2, C = 16, F = 16, N = 16, MAXEP = 4 };
static const int64_t TIMEOUT_MS = 5000;
static const double PROMPT_S = 1.0;

typedef struct rcase {
    int ep, over, hot; /* the over-full rank; the first expert chosen */
} rcase;

typedef struct rank_arg {
    const llmt__dev_ops *op;
    const rcase *c;
    int r;
    llmt_comm *comm;
    llmt_status st, setup;
    double secs;
    char msg[1024];
} rank_arg;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* n floats into backend memory of the table's storage type (through
 * h2d: the staged emulation's memory is not the host's to write). */
static llmt_status upload(const llmt__dev_ops *op, llmt__dev *d, const float *x, size_t n,
                          void **out)
{
    size_t es = op->store == LLMT_DTYPE_FP32 ? 4 : 2;
    void *h = malloc(n * es);
    llmt_status st = h ? op->alloc(d, out, n * es) : LLMT_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; h && i < n; i++) {
        if (es == 4)
            ((float *)h)[i] = x[i];
        else
            ((llmt__bf16 *)h)[i] = llmt__f32_to_bf16(x[i]);
    }
    if (st == LLMT_OK)
        st = op->h2d(d, *out, h, n * es);
    free(h);
    return st;
}

/* The layer's forward on this rank: its context at capacity 1, its
 * routing state dropless where it is the over-full rank. */
static void *rank_main(void *v)
{
    rank_arg *a = v;
    const llmt__dev_ops *op = a->op;
    llmt__moe_shape sh = {E, K, C, F, 1.0f, 0, 0}, mine = sh;
    mine.dropless = a->r == a->c->over;
    size_t nw = (size_t)E * C + 3 * (size_t)E * F * C;
    float *w = calloc(nw, sizeof(float)), *x = malloc((size_t)N * C * sizeof(float));
    llmt__dev_opts dopt = {0, 1};
    llmt__dev *d = NULL;
    llmt__moe_dctx *cx = NULL;
    llmt__moe_dlay *pl = NULL;
    llmt__moe_dep *q = NULL;
    llmt__moe *s = llmt__moe_new_rows(&mine, N, 0);
    void *wd = NULL, *xd = NULL, *yd = NULL;
    llmt_err e;
    char dmsg[256] = "";
    memset(&e, 0, sizeof e);
    a->setup = w && x && s ? op->create(&dopt, &d, dmsg, sizeof dmsg) : LLMT_ERR_OUT_OF_MEMORY;
    if (a->setup == LLMT_OK) {
        for (int j = 0; j < C; j++) {
            w[(size_t)a->c->hot * C + j] = 0.2f;
            w[(size_t)(a->c->hot + 1) * C + j] = 0.1f;
        }
        for (int i = 0; i < N * C; i++)
            x[i] = 0.25f + (float)((i * 7 + a->r * 3) % 11) / 16.0f;
        a->setup = llmt__moe_dctx_new(op, d, &e, &sh, 0, N, &cx);
    }
    if (a->setup == LLMT_OK)
        a->setup = llmt__moe_dctx_set_ep(cx, a->comm);
    if (a->setup == LLMT_OK)
        a->setup = llmt__moe_dlay_new(cx, &pl);
    if (a->setup == LLMT_OK)
        a->setup = llmt__moe_dep_new(cx, &q);
    if (a->setup == LLMT_OK)
        a->setup = upload(op, d, w, nw, &wd);
    if (a->setup == LLMT_OK)
        a->setup = upload(op, d, x, (size_t)N * C, &xd);
    if (a->setup == LLMT_OK)
        a->setup = op->alloc(d, &yd, (size_t)N * C * 4);
    if (a->setup == LLMT_OK) {
        size_t es = op->store == LLMT_DTYPE_FP32 ? 4 : 2, EFC = (size_t)E * F * C;
        char *b = wd;
        llmt__moe_dw pw = {b,
                           b + (size_t)E * C * es,
                           b + ((size_t)E * C + EFC) * es,
                           b + ((size_t)E * C + 2 * EFC) * es,
                           NULL,
                           NULL,
                           NULL};
        double t0 = now();
        a->st = llmt__moe_dev_ep_fwd(cx, pl, q, s, a->comm, &pw, xd, yd, N);
        a->secs = now() - t0;
    }
    snprintf(a->msg, sizeof a->msg, "%s%s", e.msg, dmsg);
    if (d) {
        op->free(d, wd);
        op->free(d, xd);
        op->free(d, yd);
    }
    llmt__moe_dep_free(cx, q);
    llmt__moe_dlay_free(cx, pl);
    llmt__moe_dctx_free(cx);
    if (d)
        op->destroy(d);
    llmt__moe_free(s);
    free(w);
    free(x);
    return NULL;
}

static void run_case(const llmt__dev_ops *op, const char *name, const rcase *c)
{
    llmt_comm *comm[MAXEP] = {0};
    rank_arg a[MAXEP];
    pthread_t t[MAXEP];
    llmt_comm_opts co;
    CHECK_STATUS(llmt_comm_opts_init(&co, sizeof co), LLMT_OK);
    co.timeout_ms = TIMEOUT_MS;
    CHECK_STATUS(llmt_comm_create_inproc(NULL, c->ep, &co, comm), LLMT_OK);
    if (!comm[0])
        return;
    for (int r = 0; r < c->ep; r++) {
        a[r] = (rank_arg){op, c, r, comm[r], LLMT_OK, LLMT_OK, -1, ""};
        CHECK(pthread_create(&t[r], NULL, rank_main, &a[r]) == 0);
    }
    for (int r = 0; r < c->ep; r++)
        pthread_join(t[r], NULL);
    char who[64];
    snprintf(who, sizeof who, "rank %d of the EP group kept %d rows for expert %d (block 4)",
             c->over, N, c->hot);
    double worst = 0;
    for (int r = 0; r < c->ep; r++) {
        CHECK_STATUS(a[r].setup, LLMT_OK);
        CHECK_STATUS(a[r].st, LLMT_ERR_INTERNAL);
        CHECK(a[r].secs >= 0 && a[r].secs < PROMPT_S);
        CHECK(strstr(a[r].msg, who) != NULL);
        if (a[r].st != LLMT_ERR_INTERNAL || !strstr(a[r].msg, who))
            fprintf(stderr, "%s ep %d: rank %d: status %d after %.3f s: %s\n", name, c->ep, r,
                    (int)a[r].st, a[r].secs, a[r].msg);
        worst = a[r].secs > worst ? a[r].secs : worst;
        llmt_comm_destroy(comm[r]);
    }
    printf("%s, ep %d, rank %d over-full for expert %d: every rank refused in <= %.3f s "
           "(timeout %.0f s; rank 0: \"%s\")\n",
           name, c->ep, c->over, c->hot, worst, TIMEOUT_MS / 1000.0, a[0].msg);
}

int main(void)
{
    static const rcase cases[] = {
        {2, 1, 0}, /* expert 0 is rank 0's */
        {2, 0, 0}, /* the owner itself */
        {4, 2, 6}, /* expert 6 is rank 3's */
        {4, 3, 6},
    };
    const struct {
        const char *name;
        const llmt__dev_ops *op;
    } tables[] = {{"cpu", llmt__dev_cpu()},
                  {"emulation", llmt__dev_emul()},
                  {"staged emulation", llmt__dev_emul_staged()}};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        for (size_t j = 0; j < sizeof cases / sizeof cases[0]; j++)
            run_case(tables[i].op, tables[i].name, &cases[j]);
    return check_exit("moe-dev-ep-refuse");
}
