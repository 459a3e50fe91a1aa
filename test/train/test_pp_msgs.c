/* The pipeline's messages per step (lib/train/pp.c): each boundary tensor
 * is one message carrying its sender's compute-time clock after the
 * tensor (the stamp the bubble is measured with), not the tensor and a
 * second 8-byte message. pp 2 over an in-process communicator, stages as
 * threads, GPipe, 1F1B and interleaved v 2 with m 4, on the fp32 CPU
 * engine and the bf16 emulation (a tail of 4 storage elements instead of
 * 2); `gloo`: the fp32 engine over Gloo (the stages' threads meeting in a
 * file store), whose sends are posted and left in flight (pp_send.c), the
 * stamp written into the buffer's tail (SKIP, 77, without Gloo).
 *
 * Counted on the pipeline communicator (llmt_comm_get_stats) over one
 * step, against the schedule's structure: stage s sends one activation
 * per micro-batch chunk with a successor (v m, less the last virtual
 * stage's m) and, without interleaving (whose gradients travel on a copy
 * of the group), one gradient per micro-batch when s > 0; receives
 * mirror that; each message sent is the boundary tensor's bytes (B T
 * width storage elements) plus 8 (receives count no payload). And the
 * stamps arrive: no stage computed more than the step's span, one at
 * least less (it waited for the other), and the span is no more than the
 * stages' computing added up (a garbage stamp would break one of them).
 *
 * And the stage's memory against the planner's (lib/plan/engine.c's
 * stage activations, lib/plan/pp_pool.c's gradient copies): over Gloo,
 * which cannot ask whether a send is done without waiting for it, the
 * pool of input gradient copies holds the plan's count, every input
 * gradient the stage sends in a step, and the stage's activations with
 * the pool equal the plan's to the byte (in-process too); the plan's bound where a send's
 * end can be asked (MPI) is no more than that; in-process (each send
 * copied) there is no pool. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/dev.h"
#include "llmtrain.h"
#include "plan/plan.h"
#include "rank_fixture.h"
#include "stage_fixture.h"
#include "train/device.h"
#include "train/pp.h"

#define MICRO 2
#define T 16
#define V 64
#define M 4
#define WIDTH 32

static llmt_model_config g_cfg;
static const llmt__dev_ops *g_ops;
static char g_store[64]; /* gloo: the store's directory ("": in-process) */
static int g_case;       /* gloo: the store's prefix per case */
static int32_t g_in[M * MICRO * T], g_tg[M * MICRO * T];

typedef struct stage_arg {
    llmt_comm *c;
    int rank;
    int sched, v;
    llmt_comm_stats st;
    double busy, span;
    int copies;        /* pooled gradient copies (pp_send.h) */
    int64_t act_bytes; /* the stage's activations, pool included */
    llmt_status s;
    char err[512];
} stage_arg;

static void *stage_main(void *p)
{
    stage_arg *a = p;
    llmt_model *md = NULL;
    llmt_trainer *tr = NULL;
    llmt_trainer_opts o;
    rank_fixture_opts(&o, MICRO, M, T, 1e-3f);
    a->s = stage_fixture_open(&g_cfg, &o, g_ops, &md, &tr);
    if (a->s == LLMT_OK && g_store[0]) {
        char pre[32];
        snprintf(pre, sizeof pre, "case%d", g_case);
        a->s = llmt_comm_create_from_store(NULL, g_store, pre, a->rank, 2, NULL, &a->c);
    }
    llmt_pp_opts po;
    stage_fixture_pp_opts(&po, a->sched, a->v, NULL, 0);
    if (a->s == LLMT_OK)
        a->s = llmt_trainer_set_pp_comm(tr, a->c, &po);
    /* the attach's own messages (collectives) are not the step's */
    if (a->s == LLMT_OK)
        a->s = llmt_comm_reset_stats(a->c);
    llmt_batch b = {sizeof b, g_in, g_tg, M * MICRO, T};
    float loss = 0.0f;
    if (a->s == LLMT_OK)
        a->s = rank_fixture_step(tr, &b, &loss);
    a->st.struct_size = sizeof a->st;
    if (a->s == LLMT_OK)
        a->s = llmt_comm_get_stats(a->c, &a->st);
    llmt_pp_stats ps;
    rank_fixture_pp_stats(tr, &a->s, &ps, &a->act_bytes);
    a->busy = ps.busy_cpu_seconds;
    a->span = ps.span_cpu_seconds;
    llmt__pp_info pi;
    memset(&pi, 0, sizeof pi);
    if (a->s == LLMT_OK && llmt__trainer_pp_info(tr, &pi))
        a->copies = pi.grad_copies;

    rank_fixture_close(a->s, a->err, sizeof a->err, tr, md, NULL, NULL);
    if (g_store[0])
        llmt_comm_destroy(a->c);
    return NULL;
}

/* The stages' memory against the plan of the same model (fp32 CPU). */
static void plan_memory(const char *mode, const char *name, int sched, int v,
                        const stage_arg *a)
{
    char json[768];
    snprintf(json, sizeof json,
             "{\"model\": {\"arch\": \"gpt2\", \"layers\": 4, \"hidden\": %d, "
             "\"heads\": 4, \"vocab\": %d, \"seq_len\": %d}, \"parallelism\": {\"pp\": 2, "
             "\"virtual_stages\": %d, \"pp_schedule\": \"%s\"}, \"batch\": {\"micro\": %d, "
             "\"grad_accum\": %d}, \"train\": {\"device\": \"cpu\"}}",
             WIDTH, V, T, v, name, MICRO, M);
    llmt_spec *sp = NULL;
    CHECK_STATUS(llmt_spec_parse_json(NULL, json, strlen(json), &sp), LLMT_OK);
    for (int r = 0; sp && r < 2; r++) {
        if (a[r].s != LLMT_OK)
            continue;
        int sched_p = sched == LLMT_PP_GPIPE         ? LLMT__PLAN_PP_GPIPE
                      : sched == LLMT_PP_INTERLEAVED ? LLMT__PLAN_PP_INTERLEAVED
                                                     : LLMT__PLAN_PP_1F1B;
        int plan = llmt__plan_pp_grad_copies(sched_p, 2, v, M, r, 0);
        int mpi = llmt__plan_pp_grad_copies(sched_p, 2, v, M, r, 1);
        double act = llmt__plan_engine_stage_act(sp, r), pool = 0;
        CHECK(mpi <= plan);
        CHECK_EQ_INT(plan, r > 0 ? M * v : M * (v - 1)); /* the schedule's gradient sends */
        if (g_store[0]) {
            pool = llmt__plan_engine_stage_pool(sp, r, 0);
            CHECK_EQ_INT(a[r].copies, plan);
        } else {
            CHECK_EQ_INT(a[r].copies, 0);
        }
        double err = (act + pool - (double)a[r].act_bytes) / (double)a[r].act_bytes;
        printf("%s %-11s v %d stage %d: gradient copies %d (plan %d; where a send can be "
               "asked, mpi, %d); activations %lld bytes, planned %.0f + pool %.0f "
               "(%+.2f%%)\n",
               mode, name, v, r, a[r].copies, g_store[0] ? plan : 0, mpi,
               (long long)a[r].act_bytes, act, pool, 100 * err);
        CHECK(act + pool == (double)a[r].act_bytes);
    }
    llmt_spec_destroy(sp);
}

static void run(const char *mode, int sched, int v, size_t es)
{
    stage_arg a[2];
    memset(a, 0, sizeof a);
    for (int r = 0; r < 2; r++) {
        a[r].rank = r;
        a[r].sched = sched;
        a[r].v = v;
    }
    g_case++;
    rank_fixture_run(a, sizeof a[0], 2, !g_store[0], offsetof(stage_arg, c), stage_main);
    const char *name = sched == LLMT_PP_GPIPE  ? "gpipe"
                       : sched == LLMT_PP_1F1B ? "1f1b"
                                               : "interleaved";
    uint64_t bytes = (uint64_t)MICRO * T * WIDTH * es + 8; /* one boundary message */
    for (int r = 0; r < 2; r++) {
        if (a[r].s != LLMT_OK)
            fprintf(stderr, "%s %s v %d stage %d: %s\n", mode, name, v, r, a[r].err);
        CHECK_STATUS(a[r].s, LLMT_OK);
        if (a[r].s != LLMT_OK)
            continue;
        int first = r == 0, last = r == 1;
        uint64_t sends = (uint64_t)M * (v - last) + (v == 1 && !first ? M : 0);
        uint64_t recvs = (uint64_t)M * (v - first) + (v == 1 && !last ? M : 0);
        const llmt_comm_stats *st = &a[r].st;
        printf("%s %-11s v %d stage %d: %llu sends, %llu receives a step, %llu bytes each "
               "(tensor %llu + stamp); busy %.4f of span %.4f CPU s\n",
               mode, name, v, r, (unsigned long long)st->calls[LLMT_COMM_STAT_SEND],
               (unsigned long long)st->calls[LLMT_COMM_STAT_RECV],
               (unsigned long long)(st->calls[LLMT_COMM_STAT_SEND]
                                        ? st->payload_bytes[LLMT_COMM_STAT_SEND] /
                                              st->calls[LLMT_COMM_STAT_SEND]
                                        : 0),
               (unsigned long long)(bytes - 8), a[r].busy, a[r].span);
        CHECK_EQ_INT(st->calls[LLMT_COMM_STAT_SEND], sends);
        CHECK_EQ_INT(st->calls[LLMT_COMM_STAT_RECV], recvs);
        CHECK_EQ_INT(st->payload_bytes[LLMT_COMM_STAT_SEND], sends * bytes);
        CHECK(a[r].busy > 0.0 && a[r].busy <= a[r].span);
        CHECK(a[r].span == a[1 - r].span);
    }
    /* someone waited: stage 1 at least, for stage 0's first output (under
     * interleaving stage 0 may never wait, when stage 1's chunks run
     * faster than its own: seen under ASan on a loaded machine) */
    if (a[0].s == LLMT_OK && a[1].s == LLMT_OK)
        CHECK(fmin(a[0].busy, a[1].busy) < a[0].span &&
              a[0].span <= (a[0].busy + a[1].busy) * 1.000001);
    if (es == 4)
        plan_memory(mode, name, sched, v, a);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "cpu";
    size_t es = 4;
    g_ops = llmt__dev_cpu();
    if (!strcmp(mode, "emul")) {
        g_ops = llmt__dev_emul();
        es = 2;
    } else if (!strcmp(mode, "gloo")) {
        if (!(llmt_build_features() & LLMT_FEATURE_GLOO)) {
            printf("no Gloo in this build: skipped\n");
            return 77;
        }
        snprintf(g_store, sizeof g_store, "/tmp/llmt-ppmsgs-XXXXXX");
        if (!mkdtemp(g_store))
            return 1;
    } else if (strcmp(mode, "cpu")) {
        fprintf(stderr, "usage: test_pp_msgs [cpu|emul|gloo]\n");
        return 2;
    }
    llmt_model_config_init(&g_cfg, sizeof g_cfg);
    g_cfg.arch = LLMT_ARCH_GPT2;
    g_cfg.vocab_size = V;
    g_cfg.padded_vocab_size = V;
    g_cfg.max_seq_len = T;
    g_cfg.layers = 4;
    g_cfg.width = WIDTH;
    g_cfg.heads = 4;
    g_cfg.seed = 3;
    for (int i = 0; i < M * MICRO * T; i++) {
        g_in[i] = (int32_t)((i * 7 + 3) % V);
        g_tg[i] = (int32_t)((i * 5 + 1) % V);
    }
    run(mode, LLMT_PP_GPIPE, 1, es);
    run(mode, LLMT_PP_1F1B, 1, es);
    run(mode, LLMT_PP_INTERLEAVED, 2, es);
    if (g_store[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_store);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", g_store);
    }
    return check_exit(!strcmp(mode, "cpu")    ? "pp-msgs"
                      : !strcmp(mode, "emul") ? "pp-msgs-emul"
                                              : "pp-msgs-gloo");
}
