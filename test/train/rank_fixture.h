/* The multi-rank harness the engine's parallel tests (test_device_tp.c,
 * test_device_tpdp.c, test_device_sp.c, test_device_cp.c, ...) share: ranks
 * as threads on one in-process communicator, a rank's final parameters as
 * one flat copy, and the comparison of a rank's losses and parameters with
 * the single-rank run's, so every layout is held to the same bounds by the
 * same code. Header only: each test is one translation unit. */
#ifndef LLMT_TEST_RANK_FIXTURE_H
#define LLMT_TEST_RANK_FIXTURE_H

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"
#include "model_params.h"
#include "tp_fixture.h"

#define RANK_FIXTURE_MAXW 16

/* Runs fn on n rank arguments (args, stride bytes apart) as threads and
 * waits for them. With comm, the ranks share an in-process communicator of
 * n: rank r's handle is stored at comm_off in its argument before the
 * threads start, and destroyed after they end; without, that field is left
 * as it is. */
static inline void rank_fixture_run(void *args, size_t stride, int n, int comm, size_t comm_off,
                                    void *(*fn)(void *))
{
    llmt_comm *c[RANK_FIXTURE_MAXW] = {NULL};
    pthread_t th[RANK_FIXTURE_MAXW];
    if (n < 1 || n > RANK_FIXTURE_MAXW) {
        CHECK(!"rank_fixture_run: ranks out of range");
        return;
    }
    if (comm)
        CHECK_STATUS(llmt_comm_create_inproc(NULL, n, NULL, c), LLMT_OK);
    for (int r = 0; r < n; r++) {
        char *a = (char *)args + (size_t)r * stride;
        if (comm)
            memcpy(a + comm_off, &c[r], sizeof c[r]);
        pthread_create(&th[r], NULL, fn, a);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++)
        llmt_comm_destroy(c[r]);
}

/* The groups a rank attaches to its trainer, in the order the trainer
 * takes them (tp, sequence parallelism, cp, pp, dp, ep: a stage's engine
 * is made when the pipeline attaches, so what it carries comes before and
 * ep, which splits the DP group, after); a NULL group is not attached. */
typedef struct rank_fixture_groups {
    llmt_comm *tp, *cp, *pp, *dp, *ep;
    int sp, cp_variant, zero;
    const llmt_pp_opts *pp_opts; /* NULL: the defaults */
} rank_fixture_groups;

/* Attaches g's groups to tr; the first failure's status. */
static inline llmt_status rank_fixture_attach(llmt_trainer *tr, const rank_fixture_groups *g)
{
    llmt_status s = LLMT_OK;
    if (g->tp)
        s = llmt_trainer_set_tp_comm(tr, g->tp);
    if (s == LLMT_OK && g->sp)
        s = llmt_trainer_set_sequence_parallel(tr, 1);
    if (s == LLMT_OK && g->cp) {
        llmt_cp_opts co;
        llmt_cp_opts_init(&co, sizeof co);
        co.variant = g->cp_variant;
        s = llmt_trainer_set_cp_comm(tr, g->cp, &co);
    }
    if (s == LLMT_OK && g->pp)
        s = llmt_trainer_set_pp_comm(tr, g->pp, g->pp_opts);
    if (s == LLMT_OK && g->dp) {
        llmt_dp_opts d;
        llmt_dp_opts_init(&d, sizeof d);
        d.zero_stage = g->zero;
        s = llmt_trainer_set_comm(tr, g->dp, &d);
    }
    if (s == LLMT_OK && g->ep)
        s = llmt_trainer_set_ep_comm(tr, g->ep);
    return s;
}

/* The model's parameters, in its order, as one malloc'd array of *numel
 * floats (after llmt_trainer_sync_params, the full tensors on every rank). */
static inline float *rank_fixture_params(llmt_model *m, int64_t *numel)
{
    int32_t np = 0;
    *numel = 0;
    llmt_model_param_count(m, &np, numel);
    float *p = malloc((size_t)*numel * sizeof(float));
    if (p)
        test_params_flatten(m, p);
    return p;
}

/* A failed rank's message: its trainer's last error, else its model's,
 * else "create" (neither was made). */
static inline void rank_fixture_error(char *err, size_t cap, llmt_trainer *tr, llmt_model *m)
{
    snprintf(err, cap, "%s",
             tr  ? llmt_trainer_last_error(tr)
             : m ? llmt_model_last_error(m)
                 : "create");
}

/* cfg's model into *m and a trainer for it with o into *tr
 * (llmt_trainer_create). The first failure's status; what was not made
 * stays NULL. */
static inline llmt_status rank_fixture_open(const llmt_model_config *cfg,
                                            const llmt_trainer_opts *o, llmt_model **m,
                                            llmt_trainer **tr)
{
    *m = NULL;
    *tr = NULL;
    llmt_status s = llmt_model_create(NULL, cfg, m);
    if (s == LLMT_OK)
        s = llmt_trainer_create(*m, o, tr);
    return s;
}

/* A rank's end: when st failed, its message into err (rank_fixture_error);
 * unless params is NULL, the model's parameters into *params and *numel
 * (rank_fixture_params: gathered by llmt_trainer_sync_params before);
 * the trainer and the model destroyed (either may be NULL). */
static inline void rank_fixture_close(llmt_status st, char *err, size_t cap, llmt_trainer *tr,
                                      llmt_model *m, float **params, int64_t *numel)
{
    if (st != LLMT_OK)
        rank_fixture_error(err, cap, tr, m);
    if (m && params)
        *params = rank_fixture_params(m, numel);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
}

/* One training step on b; its loss to *loss (written whatever the status). */
static inline llmt_status rank_fixture_step(llmt_trainer *tr, const llmt_batch *b, float *loss)
{
    llmt_step_metrics met;
    memset(&met, 0, sizeof met);
    met.struct_size = sizeof met;
    llmt_status s = llmt_trainer_step(tr, b, &met);
    *loss = met.loss;
    return s;
}

/* The trainer's activation bytes, host and device (-1 where
 * llmt_trainer_memory_usage fails). */
static inline int64_t rank_fixture_act_bytes(llmt_trainer *tr)
{
    llmt_trainer_memory m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    if (llmt_trainer_memory_usage(tr, &m) != LLMT_OK)
        return -1;
    return m.activations + m.device_activations;
}

/* A pipeline stage's statistics after its run, unless *st already
 * failed: llmt_trainer_pp_stats into *ps (zeroed and sized in any case)
 * and, unless act is NULL, its activation bytes into *act (host and
 * device: a stage is not host-resident); the first failure into *st. */
static inline void rank_fixture_pp_stats(llmt_trainer *tr, llmt_status *st, llmt_pp_stats *ps,
                                         int64_t *act)
{
    memset(ps, 0, sizeof *ps);
    ps->struct_size = sizeof *ps;
    if (*st == LLMT_OK)
        *st = llmt_trainer_pp_stats(tr, ps);
    if (!act)
        return;
    llmt_trainer_memory mem;
    memset(&mem, 0, sizeof mem);
    mem.struct_size = sizeof mem;
    if (*st == LLMT_OK)
        *st = llmt_trainer_memory_usage(tr, &mem);
    *act = mem.activations + mem.device_activations;
}

/* llmt_trainer_opts_init's options with micro-batches of micro sequences
 * of seq tokens, accum a step, lr, one thread. */
static inline void rank_fixture_opts_base(llmt_trainer_opts *o, int micro, int accum, int seq,
                                          float lr)
{
    llmt_trainer_opts_init(o, sizeof *o);
    o->micro_batch = micro;
    o->grad_accum = accum;
    o->seq_len = seq;
    o->lr = lr;
    o->threads = 1;
}

/* The trainer options every layout and its single-rank reference train
 * with: a constant lr, weight decay 0.1, clipping at 1, one thread. */
static inline void rank_fixture_opts(llmt_trainer_opts *o, int micro, int accum, int seq,
                                     float lr)
{
    rank_fixture_opts_base(o, micro, accum, seq, lr);
    o->schedule = LLMT_LR_CONSTANT;
    o->weight_decay = 0.1f;
    o->grad_clip = 1.0f;
}

/* The trainer's state saved at step under root (by this rank of world,
 * its blocks), or read from the newest checkpoint there, which must be
 * step's. A failure's messages go to stderr. */
static inline llmt_status rank_fixture_ckpt(llmt_trainer *tr, const char *root, int rank,
                                            int world, int save, int64_t step)
{
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.rank = rank;
    o.world_size = world;
    o.keep_last = 0;
    llmt_ckpt *ck = NULL;
    llmt_status s = llmt_ckpt_create(NULL, root, &o, &ck);
    if (s == LLMT_OK && save) {
        s = llmt_ckpt_begin(ck, step);
        if (s == LLMT_OK)
            s = llmt_trainer_ckpt_add(tr, ck);
        if (s == LLMT_OK)
            s = llmt_ckpt_save(ck, 0);
    } else if (s == LLMT_OK) {
        int64_t at = -1;
        s = llmt_ckpt_open_latest(ck, &at);
        if (s == LLMT_OK && at != step)
            s = LLMT_ERR_INTERNAL;
        if (s == LLMT_OK)
            s = llmt_trainer_ckpt_read(tr, ck);
    }
    if (s != LLMT_OK && ck)
        fprintf(stderr, "rank %d ckpt: %s / %s\n", rank, llmt_ckpt_last_error(ck),
                llmt_trainer_last_error(tr));
    llmt_ckpt_destroy(ck);
    return s;
}

/* The newest checkpoint under root exported to file (llm.c's format when
 * llmc, else safetensors), its bytes read back into *buf (malloc'd) and
 * the file removed: the count of bytes, -1 when it could not be read. */
static inline long rank_fixture_export(const char *root, const char *file, int llmc, char **buf)
{
    *buf = NULL;
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    llmt_ckpt *ck = NULL;
    int64_t step = -1;
    llmt_status s = llmt_ckpt_create(NULL, root, &o, &ck);
    if (s == LLMT_OK)
        s = llmt_ckpt_open_latest(ck, &step);
    if (s == LLMT_OK)
        s = llmc ? llmt_ckpt_export_llmc(ck, file, NULL)
                 : llmt_ckpt_export_safetensors(ck, file);
    if (s != LLMT_OK)
        fprintf(stderr, "export %s: %s\n", root, ck ? llmt_ckpt_last_error(ck) : "create");
    CHECK_STATUS(s, LLMT_OK);
    llmt_ckpt_destroy(ck);
    FILE *f = s == LLMT_OK ? fopen(file, "rb") : NULL;
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc((size_t)n + 1);
    if (fread(*buf, 1, (size_t)n, f) != (size_t)n)
        n = -1;
    fclose(f);
    remove(file);
    return n;
}

/* The stage of a pipeline of pp stages that holds parameter `name`, or -1
 * for none: a layer's is its chunk's (the layers in chunks first[j] ..
 * first[j + 1] - 1 for j < chunks, chunk j on stage j % pp: v chunks a
 * stage when interleaved), the embeddings' stage 0, the rest's (final
 * norm, head) the last. */
static inline int rank_fixture_stage_of(const char *name, const int *first, int chunks, int pp)
{
    int l = -1;
    if (sscanf(name, "h.%d.", &l) == 1 || sscanf(name, "layers.%d.", &l) == 1) {
        for (int j = 0; j < chunks; j++)
            if (l >= first[j] && l < first[j + 1])
                return j % pp;
        return -1;
    }
    if (!strcmp(name, "wte") || !strcmp(name, "wpe") || !strcmp(name, "tok_embeddings"))
        return 0;
    return pp - 1;
}

/* A pipeline's final parameters against the single-rank run's ref: each of
 * cfg's parameters is taken from the flat copy params[s] of the stage s
 * that holds it (rank_fixture_stage_of; a stage's copy is laid out as the
 * whole model's, only its own parameters trained there). Returns the
 * relative L2 distance and raises *wp to the largest absolute difference
 * (a NaN shows); a parameter without a stage fails a check. */
static inline double rank_fixture_stage_diff(const llmt_model_config *cfg, const int *first,
                                             int chunks, int pp, float *const *params,
                                             const float *ref, double *wp)
{
    llmt_model *mm = NULL;
    CHECK_STATUS(llmt_model_create(NULL, cfg, &mm), LLMT_OK);
    int32_t np = 0;
    llmt_model_param_count(mm, &np, NULL);
    double dd = 0.0, rr = 0.0;
    int64_t at = 0;
    for (int32_t i = 0; i < np; i++) {
        const char *pn = NULL;
        llmt_tensor t;
        int64_t n = 0;
        llmt_model_param(mm, i, &pn, &t);
        llmt_tensor_numel(&t, &n);
        int r = rank_fixture_stage_of(pn, first, chunks, pp);
        CHECK(r >= 0);
        for (int64_t j = 0; j < n && r >= 0; j++) {
            double d = fabs((double)params[r][at + j] - ref[at + j]);
            if (!(d <= *wp))
                *wp = d;
            dd += d * d;
            rr += (double)ref[at + j] * ref[at + j];
        }
        at += n;
    }
    llmt_model_destroy(mm);
    return sqrt(dd / rr);
}

/* The worst differences met so far: loss relative, parameters' relative
 * L2 and largest absolute, the most elements of one rank over 1e-5. */
typedef struct rank_fixture_worst {
    double loss, rel, abs;
    int64_t over;
} rank_fixture_worst;

/* Losses of steps [k0, k1) against the reference's, each within 1e-5
 * relative (fp32) or 2^-9 (bf16: the emulation's activations). */
static inline void rank_fixture_losses(rank_fixture_worst *w, const float *loss,
                                       const float *ref, int k0, int k1, int bf16)
{
    for (int k = k0; k < k1; k++) {
        double d = fabs((double)loss[k] - ref[k]) / fabs((double)ref[k]);
        if (!(d <= w->loss))
            w->loss = d; /* NaN shows */
        CHECK(d <= (bf16 ? 1.0 / 512 : 1e-5));
    }
}

/* A rank's final parameters p (numel) against the reference's: fp32 within
 * 1e-5 relative L2 and 1e-5 absolute but for at most 1 element in 10^4
 * (within 1e-4; why: test_device_tp.c's top); bf16 masters within
 * bf16_abs absolute. */
static inline void rank_fixture_params_check(rank_fixture_worst *w, const float *p,
                                             int64_t numel, const float *ref, int64_t ref_numel,
                                             int bf16, double bf16_abs)
{
    CHECK(numel == ref_numel);
    int64_t over = 0;
    double rel = tp_fixture_param_diff(p, ref, numel == ref_numel ? numel : 0, &w->abs, &over);
    if (!(rel <= w->rel))
        w->rel = rel;
    if (over > w->over)
        w->over = over;
    if (bf16) {
        CHECK(w->abs <= bf16_abs);
    } else {
        CHECK(rel <= 1e-5);
        CHECK(w->abs <= 1e-4);
        CHECK(over * 10000 <= numel);
    }
}

/* Where a test's rank argument keeps a run's results (any struct with
 * members loss (float[]), params (float *), numel (int64_t) and st), so
 * the fixture reads an array of them: &RANK_FIXTURE_FIELDS(rank_arg). */
typedef struct rank_fixture_fields {
    size_t size, loss, params, numel, st; /* sizeof, offsetof each */
} rank_fixture_fields;
#define RANK_FIXTURE_FIELDS(type)                                                      \
    ((rank_fixture_fields){sizeof(type), offsetof(type, loss), offsetof(type, params), \
                           offsetof(type, numel), offsetof(type, st)})

/* Member `off` of argument r of the array args (laid out as f says). */
static inline const void *rank_fixture_field(const rank_fixture_fields *f, const void *args,
                                             int r, size_t off)
{
    return (const char *)args + (size_t)r * f->size + off;
}

/* A checkpoint's round trip against ref, the uninterrupted single-rank
 * run (each an argument laid out as f says): the n ranks of lay trained
 * steps [0, k) and saved, one rank (one) read it and trained [k, steps).
 * Each run that succeeded, with ref: lay's losses of [0, k), one's of [k,
 * steps) and its final parameters (rank_fixture_losses and
 * rank_fixture_params_check, fp32). Prints what with the worst; returns
 * it. */
static inline rank_fixture_worst rank_fixture_roundtrip(const rank_fixture_fields *f,
                                                        const void *ref, const void *lay, int n,
                                                        const void *one, int k, int steps,
                                                        const char *what)
{
    rank_fixture_worst w = {0, 0, 0, 0};
    const float *ref_loss = rank_fixture_field(f, ref, 0, f->loss);
    int ok = *(const llmt_status *)rank_fixture_field(f, ref, 0, f->st) == LLMT_OK;
    for (int r = 0; r < n; r++)
        if (ok && *(const llmt_status *)rank_fixture_field(f, lay, r, f->st) == LLMT_OK)
            rank_fixture_losses(&w, rank_fixture_field(f, lay, r, f->loss), ref_loss, 0, k, 0);
    if (ok && *(const llmt_status *)rank_fixture_field(f, one, 0, f->st) == LLMT_OK) {
        rank_fixture_losses(&w, rank_fixture_field(f, one, 0, f->loss), ref_loss, k, steps, 0);
        const float *p = *(float *const *)rank_fixture_field(f, one, 0, f->params);
        const float *rp = *(float *const *)rank_fixture_field(f, ref, 0, f->params);
        int64_t n1 = *(const int64_t *)rank_fixture_field(f, one, 0, f->numel);
        int64_t rn = *(const int64_t *)rank_fixture_field(f, ref, 0, f->numel);
        rank_fixture_params_check(&w, p, n1, rp, rn, 0, 0);
    }
    printf("%s: loss rel %.2e, params rel L2 %.2e\n", what, w.loss, w.rel);
    return w;
}

/* Directory root and what it holds removed (a failure checks). */
static inline void rank_fixture_rmtree(const char *root)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

#endif
