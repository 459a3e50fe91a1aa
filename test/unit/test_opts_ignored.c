/* No silent no-ops in the option structs: a field set to a value that
 * would not take effect in the configuration it is given in is refused,
 * and the message names it. Each case below was accepted and ignored
 * before (the option's own module now checks it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"
#include "small_model.h"

/* `call` fails with `want` and `last` (the message) holds `needle`. */
#define REFUSED(call, want, last, needle)              \
    do {                                               \
        CHECK_STATUS(call, want);                      \
        small_model_names(#call ": ", (last), needle); \
    } while (0)

static llmt_context *ctx;
static char dir[256];

static llmt_model *small_model(void)
{
    llmt_model_config mc;
    small_model_config(&mc, 64, 0, 64, 1, 16, 2, 0); /* seq: the trainer's default seq_len */
    return small_model_create(ctx, &mc);
}

static void test_trainer(void)
{
    llmt_model *m = small_model();
    if (!m)
        return;
    llmt_trainer *tr = NULL;
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.device_index = 1; /* the CPU trainer picks no device */
    REFUSED(llmt_trainer_create(m, &o, &tr), LLMT_ERR_INVALID_ARGUMENT,
            llmt_model_last_error(m), "device_index");
    llmt_trainer_opts_init(&o, sizeof o);
    o.threads = -2;
    REFUSED(llmt_trainer_create(m, &o, &tr), LLMT_ERR_INVALID_ARGUMENT,
            llmt_model_last_error(m), "threads");
    llmt_trainer_opts_init(&o, sizeof o);
    o.deterministic = 2;
    REFUSED(llmt_trainer_create(m, &o, &tr), LLMT_ERR_INVALID_ARGUMENT,
            llmt_model_last_error(m), "deterministic");
    llmt_trainer_opts_init(&o, sizeof o);
    o.min_lr = -1e-3f; /* the schedule would go below zero */
    REFUSED(llmt_trainer_create(m, &o, &tr), LLMT_ERR_INVALID_ARGUMENT,
            llmt_model_last_error(m), "min_lr");
    /* only WSD decays over a fraction of total_steps */
    const int32_t not_wsd[3] = {LLMT_LR_CONSTANT, LLMT_LR_COSINE, LLMT_LR_LINEAR};
    for (int k = 0; k < 3; k++) {
        llmt_trainer_opts_init(&o, sizeof o);
        o.schedule = not_wsd[k];
        o.decay_fraction = 0.5f;
        REFUSED(llmt_trainer_create(m, &o, &tr), LLMT_ERR_INVALID_ARGUMENT,
                llmt_model_last_error(m), "decay_fraction");
    }
    llmt_trainer_opts_init(&o, sizeof o);
    o.schedule = LLMT_LR_WSD; /* with WSD: takes effect */
    o.decay_fraction = 0.5f;
    o.micro_batch = 1;
    o.seq_len = 8;
    CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
    llmt_trainer_destroy(tr);
    tr = NULL;
    llmt_trainer_opts_init(&o, sizeof o);
    o.micro_batch = 1;
    o.seq_len = 8;
    CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
    llmt_comm *c[2] = {NULL, NULL};
    CHECK_STATUS(llmt_comm_create_inproc(ctx, 2, NULL, c), LLMT_OK);
    if (tr && c[0]) {
        llmt_dp_opts d;
        llmt_dp_opts_init(&d, sizeof d);
        d.overlap = 2;
        REFUSED(llmt_trainer_set_comm(tr, c[0], &d), LLMT_ERR_INVALID_ARGUMENT,
                llmt_trainer_last_error(tr), "overlap");
        llmt_comm *one = NULL;
        CHECK_STATUS(llmt_comm_create_inproc(ctx, 1, NULL, &one), LLMT_OK);
        llmt_pp_opts po; /* one stage: no schedule, no chunks */
        llmt_pp_opts_init(&po, sizeof po);
        po.schedule = LLMT_PP_GPIPE;
        REFUSED(llmt_trainer_set_pp_comm(tr, one, &po), LLMT_ERR_INVALID_ARGUMENT,
                llmt_trainer_last_error(tr), "schedule");
        llmt_pp_opts_init(&po, sizeof po);
        po.schedule = LLMT_PP_INTERLEAVED;
        po.virtual_stages = 2;
        REFUSED(llmt_trainer_set_pp_comm(tr, NULL, &po), LLMT_ERR_INVALID_ARGUMENT,
                llmt_trainer_last_error(tr), "llmt_pp_opts.schedule");
        llmt_pp_opts_init(&po, sizeof po);
        CHECK_STATUS(llmt_trainer_set_pp_comm(tr, one, &po), LLMT_OK);
        llmt_comm_destroy(one);
    }
    llmt_trainer_destroy(tr);
    llmt_comm_destroy(c[0]);
    llmt_comm_destroy(c[1]);
    llmt_model_destroy(m);
}

static void test_model(void)
{
    llmt_model_config mc;
    small_model_config(&mc, 64, 0, 16, 1, 16, 2, 0);
    llmt_model *m = NULL;
    mc.rope_theta = 500000.0f; /* GPT-2: learned positions */
    REFUSED(llmt_model_create(ctx, &mc, &m), LLMT_ERR_INVALID_ARGUMENT,
            llmt_context_last_error(ctx), "rope_theta");
    mc.arch = LLMT_ARCH_LLAMA; /* where it takes effect */
    CHECK_STATUS(llmt_model_create(ctx, &mc, &m), LLMT_OK);
    llmt_model_destroy(m);
    m = NULL;
    mc.moe_aux_loss_coef = 0.1f; /* dense: no router */
    REFUSED(llmt_model_create(ctx, &mc, &m), LLMT_ERR_INVALID_ARGUMENT,
            llmt_context_last_error(ctx), "moe_aux_loss_coef");
    mc.moe_aux_loss_coef = 0.01f;
    mc.moe_z_loss_coef = 0.5f;
    REFUSED(llmt_model_create(ctx, &mc, &m), LLMT_ERR_INVALID_ARGUMENT,
            llmt_context_last_error(ctx), "moe_z_loss_coef");
    mc.moe_z_loss_coef = 0.0f; /* no loss: what a dense model has */
    CHECK_STATUS(llmt_model_create(ctx, &mc, &m), LLMT_OK);
    llmt_model_destroy(m);
    m = NULL;
    mc.moe_z_loss_coef = 0.001f;
    mc.moe_experts = 2;
    mc.moe_dropless = 1;
    mc.moe_capacity_factor = 2.0f; /* dropless: no capacity to scale */
    REFUSED(llmt_model_create(ctx, &mc, &m), LLMT_ERR_INVALID_ARGUMENT,
            llmt_context_last_error(ctx), "moe_capacity_factor");
    mc.moe_capacity_factor = 0.0f;
    CHECK_STATUS(llmt_model_create(ctx, &mc, &m), LLMT_OK);
    llmt_model_destroy(m);
}

static void test_ckpt(void)
{
    char root[320];
    snprintf(root, sizeof root, "%s/ck", dir);
    llmt_ckpt_opts o;
    llmt_ckpt *ck = NULL;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.durable_keep_last = 2; /* no durable tier to retain in */
    REFUSED(llmt_ckpt_create(ctx, root, &o, &ck), LLMT_ERR_INVALID_ARGUMENT,
            llmt_context_last_error(ctx), "durable_keep_last");
    llmt_ckpt_opts_init(&o, sizeof o);
    o.durable_keep_every = 5;
    REFUSED(llmt_ckpt_create(ctx, root, &o, &ck), LLMT_ERR_INVALID_ARGUMENT,
            llmt_context_last_error(ctx), "durable_keep_every");
    llmt_ckpt_opts_init(&o, sizeof o);
    o.direct_io = 2;
    REFUSED(llmt_ckpt_create(ctx, root, &o, &ck), LLMT_ERR_INVALID_ARGUMENT,
            llmt_context_last_error(ctx), "direct_io");
    char dur[320];
    snprintf(dur, sizeof dur, "%s/durable", dir);
    llmt_ckpt_opts_init(&o, sizeof o);
    o.durable_dir = dur;
    o.durable_keep_last = 2; /* with the tier: takes effect */
    CHECK_STATUS(llmt_ckpt_create(ctx, root, &o, &ck), LLMT_OK);
    llmt_ckpt_destroy(ck);
}

static void test_comm(void)
{
    llmt_comm_opts o;
    llmt_comm *c[2] = {NULL, NULL};
    llmt_comm_opts_init(&o, sizeof o);
    o.backend = LLMT_COMM_NCCL; /* in-process ranks are threads, not GPUs */
    REFUSED(llmt_comm_create_inproc(ctx, 2, &o, c), LLMT_ERR_INVALID_ARGUMENT,
            llmt_context_last_error(ctx), "backend");
    llmt_comm_opts_init(&o, sizeof o);
    o.backend = LLMT_COMM_MPI;
    REFUSED(llmt_comm_create_inproc(ctx, 2, &o, c), LLMT_ERR_INVALID_ARGUMENT,
            llmt_context_last_error(ctx), "backend");
    llmt_comm_opts_init(&o, sizeof o);
    o.cuda_device = 1;
    REFUSED(llmt_comm_create_inproc(ctx, 2, &o, c), LLMT_ERR_INVALID_ARGUMENT,
            llmt_context_last_error(ctx), "cuda_device");
    llmt_comm_opts_init(&o, sizeof o);
    o.rendezvous_path = "/tmp/nowhere";
    REFUSED(llmt_comm_create_inproc(ctx, 2, &o, c), LLMT_ERR_INVALID_ARGUMENT,
            llmt_context_last_error(ctx), "rendezvous_path");
    llmt_comm *g = NULL;
    REFUSED(llmt_comm_create_from_store(ctx, dir, "p", 0, 1, &o, &g), LLMT_ERR_INVALID_ARGUMENT,
            llmt_context_last_error(ctx), "rendezvous_path");
    llmt_comm_opts_init(&o, sizeof o);
    o.backend = LLMT_COMM_INPROC;
    CHECK_STATUS(llmt_comm_create_inproc(ctx, 2, &o, c), LLMT_OK);
    llmt_comm_destroy(c[0]);
    llmt_comm_destroy(c[1]);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/llmt_opts_ignored_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_level = LLMT_LOG_OFF;
    if (llmt_context_create(&co, &ctx) != LLMT_OK)
        return 1;
    test_trainer();
    test_model();
    test_ckpt();
    test_comm();
    llmt_context_destroy(ctx);
    small_model_rmtree(dir);
    return check_exit("opts-ignored");
}
