/* Checkpoints under pipeline parallelism (lib/train/state.c over the
 * stage engines of lib/train/device.c), ranks as threads over an
 * in-process communicator, fp32 CPU backend, GPT-2 (tied head: the last
 * stage's copy of wte) and Llama (untied, grouped-query attention), 4
 * layers, a global step of 4 micro-batches of 2 sequences:
 *
 *   the reference: one rank, 10 AdamW steps uninterrupted;
 *   pp 4 x dp 2 (ZeRO-1: the moments sharded over each stage's replicas)
 *   trains the same 10 steps and saves after step 5, every rank its
 *   blocks of the GLOBAL tensors (a stage only its layers; wte once);
 *   that checkpoint resumed, steps 6-10, under pp 2 x tp 2 (a stage's
 *   layers split over its tensor parallel group), pp 2 x dp 2 ZeRO-0 and
 *   ZeRO-1, pp 1 x dp 4 ZeRO-1, pp 4 and one rank, each stage reading
 *   only what it holds;
 *   pp 2 x tp 2 x dp 2 ZeRO-1 saves the same way (a stage's tensor
 *   parallel shards as blocks of the global tensors), resumed under
 *   pp 4 x dp 2 and one rank;
 *   interleaved 1F1B (2 virtual stages: stage 0 holds layers 0 and 2)
 *   resumes the pp 4 one, and saves under pp 2 x dp 2, resumed by one rank;
 *   a stage reads only what it holds: with the data files of stage 2's
 *   ranks garbled, a pp 4 resume fails on stage 2 alone, naming the
 *   checksum of one of its tensors, while the others read theirs;
 *   the single rank's resumes save the state they read again at once:
 *   each pipeline checkpoint exports (safetensors, and llm.c for GPT-2)
 *   to the same bytes as its single-rank re-save, so a pipeline
 *   checkpoint is a single-rank one;
 *   bad input: a stage whose data file is gone, or whose part never named
 *   its tensors: the error names the rank's file or the tensor, and
 *   nothing in the checkpoint directory is moved or deleted.
 *
 * Bound on the losses of steps 6-10 (and of the saving runs' 1-10):
 * 1e-5 relative (the issue's). Why it holds: every layout takes the same
 * global batch in the same micro-batch order and runs the same fp32 ops;
 * what differs is the order of a few sums (the gradient norm summed per
 * stage, then over stages; data parallelism's reduction; tensor
 * parallelism's partial GEMM sums; a tied wte's gradient summed over its
 * two stages), a few ulps per step that AdamW
 * (a step of at most about lr per weight, lr 1e-3) does not amplify over
 * ten steps: test_device_pp.c measures the same layouts uninterrupted at
 * about 1e-7. The single rank's and pp 1 x dp 4's final parameters also
 * agree with the reference within 1e-5 relative L2 and 1e-4 absolute
 * (test_device_tp.c's bounds, for the same reason). The measured worst
 * cases are printed. */
#include <dirent.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "exec/dev.h"
#include "files.h"
#include "llmtrain.h"
#include "rank_fixture.h"
#include "train/device.h"

#define STEPS 10
#define SAVE_AT 5
#define MICRO 2
#define G 4 /* micro-batches per global step */
#define T 16
#define V 97
#define LR 1e-3f
#define LAYERS 4
#define MAXW 8
#define LOSS_TOL 1e-5 /* rank_fixture_losses' fp32 bound, printed */

static llmt_model_config g_cfg;
static int32_t *g_in, *g_tg;
static double g_worst_loss;

/* A layout: pp stages x tp x dp replicas (ZeRO zero); world rank
 * (dpr * pp + stage) * tp + tpr (tensor parallelism innermost). */
typedef struct layout {
    int pp, tp, dp, zero;
    int v; /* virtual stages (model chunks per stage; > 1: interleaved 1F1B) */
} layout;

typedef struct rank_arg {
    llmt_comm *world; /* NULL: one rank */
    layout L;
    int rank;
    int k0;                  /* first step; > 0: resume from `load` */
    const char *load, *save; /* read before k0; write after step SAVE_AT */
    const char *resave;      /* write right after the read (one rank) */
    int skip_add;            /* bad input: this rank saves without its blocks */
    int stop_at_save;        /* stop after the save (its result in save_st) */
    int read_only;           /* stop after the read */
    float loss[STEPS];
    float *params; /* the host model after sync_params (pp 1 only) */
    int64_t numel;
    llmt_status st, save_st;
    char err[1024], save_err[1024];
} rank_arg;

static int world_of(const layout *L)
{
    return L->pp * L->tp * L->dp;
}

/* Save the trainer at `step` under root (every rank its blocks), or read
 * the newest checkpoint there (which must be `step`). */
static llmt_status ckpt_io(rank_arg *a, llmt_trainer *tr, const char *root, int save,
                           int64_t step)
{
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.rank = a->world ? a->rank : 0;
    o.world_size = a->world ? world_of(&a->L) : 1;
    o.keep_last = 0;
    llmt_ckpt *ck = NULL;
    llmt_status s = llmt_ckpt_create(NULL, root, &o, &ck);
    if (s == LLMT_OK && save) {
        s = llmt_ckpt_begin(ck, step);
        if (s == LLMT_OK && !a->skip_add)
            s = llmt_trainer_ckpt_add(tr, ck);
        if (s == LLMT_OK)
            s = llmt_ckpt_save(ck, 0);
        a->save_st = s;
        snprintf(a->save_err, sizeof a->save_err, "%s", llmt_ckpt_last_error(ck));
    } else if (s == LLMT_OK) {
        int64_t at = -1;
        s = llmt_ckpt_open_latest(ck, &at);
        if (s == LLMT_OK && at != step)
            s = LLMT_ERR_INTERNAL;
        if (s == LLMT_OK)
            s = llmt_trainer_ckpt_read(tr, ck);
    }
    if (s != LLMT_OK && ck && !a->stop_at_save && !a->read_only)
        fprintf(stderr, "rank %d ckpt %s: %s / %s\n", a->rank, save ? "save" : "read",
                llmt_ckpt_last_error(ck), llmt_trainer_last_error(tr));
    llmt_ckpt_destroy(ck);
    return s;
}

/* The groups of this rank (split off the world, every rank calling each
 * split), attached tensor, then pipeline, then data parallel. */
static llmt_status attach(rank_arg *a, llmt_trainer *tr, llmt_comm **c)
{
    const layout *L = &a->L;
    int tpr = a->rank % L->tp, stage = a->rank / L->tp % L->pp, dpr = a->rank / L->tp / L->pp;
    llmt_status s = LLMT_OK;
    if (L->tp > 1 && s == LLMT_OK)
        s = llmt_comm_split(a->world, dpr * L->pp + stage, tpr, &c[0]);
    if (L->pp > 1 && s == LLMT_OK)
        s = llmt_comm_split(a->world, dpr * L->tp + tpr, stage, &c[1]);
    if (L->dp > 1 && s == LLMT_OK)
        s = llmt_comm_split(a->world, stage * L->tp + tpr, dpr, &c[2]);
    if (s != LLMT_OK) {
        snprintf(a->err, sizeof a->err, "split: %s", llmt_comm_last_error(a->world));
        return s;
    }
    if (c[0])
        s = llmt_trainer_set_tp_comm(tr, c[0]);
    if (s == LLMT_OK && c[1]) {
        llmt_pp_opts po;
        llmt_pp_opts_init(&po, sizeof po);
        if (L->v > 1) {
            po.schedule = LLMT_PP_INTERLEAVED;
            po.virtual_stages = L->v;
        }
        s = llmt_trainer_set_pp_comm(tr, c[1], &po);
    }
    if (s == LLMT_OK && c[2]) {
        llmt_dp_opts d;
        llmt_dp_opts_init(&d, sizeof d);
        d.zero_stage = L->zero;
        s = llmt_trainer_set_comm(tr, c[2], &d);
    }
    return s;
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    const layout *L = &a->L;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    llmt_comm *c[3] = {NULL, NULL, NULL};
    int dpr = a->rank / L->tp / L->pp, mb = G / L->dp;
    a->st = llmt_model_create(NULL, &g_cfg, &m);
    if (a->st == LLMT_OK) {
        llmt_trainer_opts o;
        rank_fixture_opts(&o, MICRO, mb, T, LR);
        a->st = llmt__trainer_create_dev(m, &o, llmt__dev_cpu(), &tr);
    }
    if (a->st == LLMT_OK && a->world)
        a->st = attach(a, tr, c);
    /* read after the layout is attached: each stage reads its blocks */
    if (a->st == LLMT_OK && a->load)
        a->st = ckpt_io(a, tr, a->load, 0, a->k0);
    if (a->st == LLMT_OK && a->resave)
        a->st = ckpt_io(a, tr, a->resave, 1, a->k0);
    /* this replica's micro-batches of each global step */
    size_t per = (size_t)mb * MICRO * T;
    int k1 = a->stop_at_save ? SAVE_AT : a->read_only ? a->k0 : STEPS;
    for (int k = a->k0; k < k1 && a->st == LLMT_OK; k++) {
        size_t at = ((size_t)k * L->dp + (size_t)dpr) * per;
        llmt_batch b = {sizeof b, g_in + at, g_tg + at, mb * MICRO, T};
        a->st = rank_fixture_step(tr, &b, &a->loss[k]);
        if (a->st == LLMT_OK && a->save && k + 1 == SAVE_AT) {
            llmt_status s = ckpt_io(a, tr, a->save, 1, SAVE_AT); /* the run goes on */
            if (!a->stop_at_save)
                a->st = s;
        }
    }
    if (a->st == LLMT_OK && !a->stop_at_save)
        a->st = llmt_trainer_sync_params(tr);
    if (a->st != LLMT_OK && !a->err[0])
        rank_fixture_error(a->err, sizeof a->err, tr, m);
    if (m && a->st == LLMT_OK && L->pp == 1)
        a->params = rank_fixture_params(m, &a->numel);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    for (int i = 0; i < 3; i++)
        llmt_comm_destroy(c[i]);
    return NULL;
}

/* Run `L` on threads, each rank from proto. */
static void run(const layout *L, const rank_arg *proto, rank_arg *a)
{
    int w = world_of(L);
    for (int r = 0; r < w; r++) {
        a[r] = *proto;
        a[r].L = *L;
        a[r].rank = r;
        a[r].world = NULL;
    }
    rank_fixture_run(a, sizeof *a, w, w > 1, offsetof(rank_arg, world), rank_main);
}

static void free_args(rank_arg *a, int n)
{
    for (int r = 0; r < n; r++)
        free(a[r].params);
}

/* Every rank's losses of steps k0+1..STEPS against the reference's. */
static void check_losses(const char *name, const char *what, const rank_arg *a,
                         const rank_arg *ref)
{
    int w = world_of(&a[0].L);
    rank_fixture_worst wl = {0};
    double wp = 0.0, rl2 = 0.0;
    for (int r = 0; r < w; r++) {
        if (a[r].st != LLMT_OK)
            fprintf(stderr, "%s %s rank %d: %s\n", name, what, r, a[r].err);
        CHECK_STATUS(a[r].st, LLMT_OK);
        if (a[r].st == LLMT_OK)
            rank_fixture_losses(&wl, a[r].loss, ref->loss, a[r].k0, STEPS, 0);
        if (a[r].params && ref->params && a[r].numel == ref->numel) {
            int64_t over = 0;
            double rel =
                tp_fixture_param_diff(a[r].params, ref->params, a[r].numel, &wp, &over);
            if (rel > rl2)
                rl2 = rel;
            CHECK(rel <= 1e-5);
            CHECK(wp <= 1e-4);
        }
    }
    printf("%-5s %-32s steps %d-%d: loss rel diff %.2e", name, what, a[0].k0 + 1, STEPS,
           wl.loss);
    if (a[0].params)
        printf("; final params rel L2 %.2e, max abs %.2e", rl2, wp);
    printf("\n");
    if (wl.loss > g_worst_loss)
        g_worst_loss = wl.loss;
}

/* The newest checkpoint under root exported to a file, its bytes read
 * back into *buf (safetensors, or llm.c when llmc). */
static long export_bytes(const char *root, int llmc, char **buf)
{
    char file[600];
    snprintf(file, sizeof file, "%s.export", root);
    return rank_fixture_export(root, file, llmc, buf);
}

static void check_export(const char *name, const char *what, const char *pp, const char *one,
                         int llmc)
{
    char *x = NULL, *y = NULL;
    long nx = export_bytes(pp, llmc, &x), ny = export_bytes(one, llmc, &y);
    int same = nx > 0 && nx == ny && !memcmp(x, y, (size_t)nx);
    CHECK(same);
    printf("%-5s %s export of the %s checkpoint: %ld bytes, %s the single rank's "
           "(%ld bytes)\n",
           name, llmc ? "llm.c" : "safetensors", what, nx,
           same ? "identical to" : "DIFFERENT from", ny);
    free(x);
    free(y);
}

static void sh(const char *cmd)
{
    CHECK(system(cmd) == 0);
}

/* Bad input. (1) A copy of the pp 4 x dp 2 checkpoint without the data
 * file of the rank holding stage 2's first replica: opening it fails
 * naming that rank's file, and a pp 2 stage reading it gets the error;
 * the directory is left as it was. (2) A pp 2 save whose stage 1 adds
 * nothing: the commit refuses, naming a tensor of stage 1's layers, and
 * no checkpoint is committed; the directory stays. */
static void check_bad(const char *name, const char *saved, const char *tmp)
{
    char root[600], step[700], before[8192], after[8192];
    snprintf(root, sizeof root, "%s/missing", tmp);
    snprintf(step, sizeof step, "%s/step-%012d", root, SAVE_AT);
    char cmd[2100];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp -r '%s'/step-* '%s'/", root, saved, root);
    sh(cmd);
    /* world rank (dpr * 4 + stage) * 1 + 0: stage 2 of replica 0 is rank 2 */
    snprintf(cmd, sizeof cmd, "rm '%s/rank-00002.bin'", step);
    sh(cmd);
    test_listing(root, before, sizeof before);
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(NULL, root, NULL, &ck), LLMT_OK);
    llmt_status s = llmt_ckpt_open_step(ck, SAVE_AT);
    CHECK(s != LLMT_OK);
    printf("%-5s a stage's data file gone: %s\n", name, llmt_ckpt_last_error(ck));
    CHECK(strstr(llmt_ckpt_last_error(ck), "rank-00002.bin") != NULL);
    llmt_ckpt_destroy(ck);
    /* a resume from it: no stage reads anything, each says why */
    rank_arg a[MAXW], proto;
    memset(&proto, 0, sizeof proto);
    proto.k0 = SAVE_AT;
    proto.load = root;
    layout pp2 = {2, 1, 1, 0, 1};
    run(&pp2, &proto, a);
    for (int r = 0; r < 2; r++)
        CHECK(a[r].st == LLMT_ERR_NOT_FOUND);
    free_args(a, 2);
    test_listing(root, after, sizeof after);
    CHECK(before[0] && !strcmp(before, after));
    /* (2) stage 1 saves without its blocks */
    snprintf(root, sizeof root, "%s/partial", tmp);
    rank_arg b[2];
    memset(b, 0, sizeof b);
    for (int r = 0; r < 2; r++) {
        b[r].L = pp2;
        b[r].rank = r;
        b[r].save = root;
        b[r].skip_add = r == 1;
        b[r].stop_at_save = 1; /* whichever rank the failed commit reports on */
    }
    rank_fixture_run(b, sizeof *b, 2, 1, offsetof(rank_arg, world), rank_main);
    /* the commit is refused, naming a tensor only stage 1 holds (its
     * layers 2, 3, the final norm), on every rank that reports it */
    int failed = 0, named = 0;
    for (int r = 0; r < 2; r++)
        if (b[r].save_st != LLMT_OK) {
            printf("%-5s a stage's part without its blocks, rank %d: %s\n", name, r,
                   b[r].save_err);
            failed++;
            named += strstr(b[r].save_err, "chunks missing") != NULL &&
                     (strstr(b[r].save_err, ".2.") || strstr(b[r].save_err, ".3.") ||
                      strstr(b[r].save_err, "ln_f"));
        }
    CHECK(failed >= 1 && named == failed);
    free_args(b, 2);
    CHECK_STATUS(llmt_ckpt_create(NULL, root, NULL, &ck), LLMT_OK);
    int64_t at = -1;
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &at), LLMT_ERR_NOT_FOUND);
    llmt_ckpt_destroy(ck);
    snprintf(step, sizeof step, "%s/step-%012d", root, SAVE_AT);
    struct stat st;
    CHECK(stat(step, &st) == 0 && S_ISDIR(st.st_mode)); /* left for a person to see */
}

/* A copy of the pp 4 x dp 2 checkpoint whose stage 2 data files (world
 * ranks 2 and 6: stage 2 of replicas 0 and 1) are garbled after their
 * headers (sizes kept, so the checkpoint opens): read under pp 4, stage 2
 * fails naming a checksum of its own layer 2, stages 0, 1 and 3 read all
 * they hold, touching no garbled byte (lib/ckpt reads only the chunks
 * that overlap what is asked, checking the hashes of what it reads). */
static void check_only_own(const char *name, const char *saved, const char *tmp)
{
    char root[600], cmd[2100];
    snprintf(root, sizeof root, "%s/%s-garbled", tmp, name);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp -r '%s'/step-* '%s'/", root, saved, root);
    sh(cmd);
    for (int r = 2; r <= 6; r += 4) {
        char f[700];
        snprintf(f, sizeof f, "%s/step-%012d/rank-%05d.bin", root, SAVE_AT, r);
        FILE *fp = fopen(f, "r+b");
        CHECK(fp != NULL);
        if (!fp)
            continue;
        fseek(fp, 0, SEEK_END);
        long n = ftell(fp);
        char *junk = n > 64 ? malloc((size_t)(n - 64)) : NULL; /* past the 64-byte header */
        CHECK(junk != NULL);
        if (junk) {
            memset(junk, 0x5a, (size_t)(n - 64));
            fseek(fp, 64, SEEK_SET);
            CHECK(fwrite(junk, 1, (size_t)(n - 64), fp) == (size_t)(n - 64));
        }
        free(junk);
        fclose(fp);
    }
    rank_arg a[MAXW], proto;
    memset(&proto, 0, sizeof proto);
    proto.k0 = SAVE_AT;
    proto.load = root;
    proto.read_only = 1;
    layout pp4 = {4, 1, 1, 0, 1};
    run(&pp4, &proto, a);
    for (int r = 0; r < 4; r++)
        CHECK_STATUS(a[r].st, r == 2 ? LLMT_ERR_CHECKSUM : LLMT_OK);
    printf("%-5s stage 2's files garbled, pp 4 reads: stages 0, 1, 3 %s; stage 2: %s\n", name,
           a[0].st == LLMT_OK && a[1].st == LLMT_OK && a[3].st == LLMT_OK ? "ok" : "FAILED",
           a[2].err);
    CHECK(strstr(a[2].err, ".2.") != NULL && strstr(a[2].err, "checksum") != NULL);
    free_args(a, 4);
}

/* The layout that saves after step SAVE_AT (and trains on to STEPS),
 * then every layout of `to` resuming from its checkpoint; the single
 * rank's resume saves the state again under one (for the exports). */
typedef struct resume_to {
    layout L;
    const char *what;
} resume_to;

static void save_resume(const char *name, const rank_arg *ref, const layout *from,
                        const char *what, const char *saved, const char *one,
                        const resume_to *to, int n)
{
    rank_arg a[MAXW], proto;
    memset(&proto, 0, sizeof proto);
    proto.save = saved;
    run(from, &proto, a);
    check_losses(name, what, a, ref);
    free_args(a, world_of(from));
    for (int i = 0; i < n; i++) {
        memset(&proto, 0, sizeof proto);
        proto.k0 = SAVE_AT;
        proto.load = saved;
        if (world_of(&to[i].L) == 1)
            proto.resave = one;
        run(&to[i].L, &proto, a);
        check_losses(name, to[i].what, a, ref);
        free_args(a, world_of(&to[i].L));
    }
}

static void run_model(const char *name, int llama, const char *tmp)
{
    tp_fixture_config(&g_cfg, llama, 2, V, T);
    g_cfg.layers = LAYERS;
    char saved[600], one[600], saved3[600], one3[600];
    snprintf(saved, sizeof saved, "%s/%s-pp4dp2", tmp, name);
    snprintf(one, sizeof one, "%s/%s-one", tmp, name);
    snprintf(saved3, sizeof saved3, "%s/%s-pp2tp2dp2", tmp, name);
    snprintf(one3, sizeof one3, "%s/%s-one3", tmp, name);
    rank_arg ref[1], proto;
    memset(&proto, 0, sizeof proto);
    layout single = {1, 1, 1, 0, 1};
    run(&single, &proto, ref);
    CHECK_STATUS(ref[0].st, LLMT_OK);
    if (ref[0].st != LLMT_OK) {
        fprintf(stderr, "%s reference: %s\n", name, ref[0].err);
        return;
    }
    CHECK(ref[0].loss[STEPS - 1] < ref[0].loss[0]); /* training moved */
    /* pp 4 x dp 2, ZeRO-1, saving after step 5 and going on */
    layout pp4 = {4, 1, 2, 1, 1};
    static const resume_to to[] = {
        {{2, 2, 1, 0, 1}, "resumed pp 2 x tp 2"},
        {{2, 1, 2, 0, 1}, "resumed pp 2 x dp 2 ZeRO-0"},
        {{2, 1, 2, 1, 1}, "resumed pp 2 x dp 2 ZeRO-1"},
        {{1, 1, 4, 1, 1}, "resumed pp 1 x dp 4 ZeRO-1"},
        {{4, 1, 1, 0, 1}, "resumed pp 4"},
        {{2, 1, 1, 0, 2}, "resumed pp 2 interleaved (v 2)"},
        {{1, 1, 1, 0, 1}, "resumed pp 1 (one rank, saves)"},
    };
    save_resume(name, ref, &pp4, "pp 4 x dp 2 ZeRO-1 (saves)", saved, one, to,
                (int)(sizeof to / sizeof to[0]));
    /* pp 2 x tp 2 x dp 2, ZeRO-1: a stage's tensor parallel shards */
    layout pp2tp2 = {2, 2, 2, 1, 1};
    static const resume_to to3[] = {
        {{4, 1, 2, 0, 1}, "resumed pp 4 x dp 2 ZeRO-0"},
        {{1, 1, 1, 0, 1}, "resumed pp 1 (one rank, saves)"},
    };
    save_resume(name, ref, &pp2tp2, "pp 2 x tp 2 x dp 2 ZeRO-1 (saves)", saved3, one3, to3,
                (int)(sizeof to3 / sizeof to3[0]));
    /* interleaved, pp 2 x dp 2 ZeRO-1: each stage two chunks of one layer
     * (layers 0, 2 and 1, 3), saved as the global layers they are */
    char saved4[600], one4[600];
    snprintf(saved4, sizeof saved4, "%s/%s-ppv2dp2", tmp, name);
    snprintf(one4, sizeof one4, "%s/%s-one4", tmp, name);
    layout ppv = {2, 1, 2, 1, 2};
    static const resume_to to4[] = {
        {{1, 1, 1, 0, 1}, "resumed pp 1 (one rank, saves)"},
    };
    save_resume(name, ref, &ppv, "pp 2 v 2 x dp 2 ZeRO-1 (saves)", saved4, one4, to4, 1);
    check_export(name, "pp 2 v 2 x dp 2", saved4, one4, 0);
    check_only_own(name, saved, tmp);
    /* a pipeline checkpoint is a single-rank one */
    check_export(name, "pp 4 x dp 2", saved, one, 0);
    check_export(name, "pp 2 x tp 2 x dp 2", saved3, one3, 0);
    if (!llama) {
        check_export(name, "pp 4 x dp 2", saved, one, 1);
        check_export(name, "pp 2 x tp 2 x dp 2", saved3, one3, 1);
        check_bad(name, saved, tmp);
    }
    free_args(ref, 1);
}

int main(void)
{
    tp_fixture_data((size_t)STEPS * G * MICRO * T, V, &g_in, &g_tg);
    char tmp[] = "/tmp/llmt_ppckpt_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    run_model("gpt2", 0, tmp);
    run_model("llama", 1, tmp);
    printf("worst loss rel diff %.2e (bound %.0e)\n", g_worst_loss, LOSS_TOL);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    free(g_in);
    free(g_tg);
    return check_exit("device-ppckpt");
}
