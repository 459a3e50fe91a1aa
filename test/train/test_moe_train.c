/* Mixture-of-experts layers in the trainer (fp32 CPU engine):
 *  - one expert, top-1, dropless is the dense SwiGLU MLP: the same weights
 *    give the dense model's losses and parameters over 4 AdamW steps
 *    (losses rel 1e-5, each tensor's relative L2 1e-5), so the engine's MoE seam, its gradients and the optimizer
 *    layout agree with the dense path;
 *  - a 4-expert top-2 Llama (every 2nd layer MoE, capacity 1.0) trains on
 *    a learnable token stream: the loss of the last of 30 steps is below
 *    0.6 x the first; the per-expert counts plus dropped choices add up to
 *    tokens x top_k x micro-batches, each layer and their sum;
 *  - one routed expert (top-1, dropless) of F plus S shared experts of F is
 *    the dense SwiGLU of (1+S)F whose hidden units are the routed expert's
 *    then the shared ones' (S 1 and 2): losses and parameters as above, so
 *    the shared experts' forward, gradients and layout are the dense MLP's;
 *  - checkpoint save/load round-trips the expert tensors and the shared
 *    experts: a resumed run continues bitwise as the uninterrupted one;
 *  - bad configs and spec keys are refused naming the key.
 * (The layer's numerics against PyTorch: test/torch/moe_equiv.py.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"
#include "moe_fixture.h"

enum { B = 2, T = 16, V = 61, A = 2, N = B * T };

static llmt_context *ctx;
static char tmpdir[256];

static void cfg_moe(llmt_model_config *c, int experts, int top_k, int every)
{
    moe_fixture_llama(c, V, T, 2, 7);
    c->moe_experts = experts;
    c->moe_top_k = top_k;
    c->moe_ffn = experts ? 24 : 0;
    c->moe_every = every;
}

static void opts(llmt_trainer_opts *o, int steps)
{
    llmt_trainer_opts_init(o, sizeof *o);
    o->micro_batch = B;
    o->grad_accum = A;
    o->seq_len = T;
    o->lr = 1e-2f;
    o->warmup_steps = 2;
    o->total_steps = steps;
    o->threads = 2;
    o->grad_clip = 1.0f;
}

/* Batch k: mostly tok' = 5*tok + 1 mod V, one token in 8 random. */
static void batch_for(int k, int32_t *in, int32_t *tg)
{
    uint64_t s = 0x1234u + (uint64_t)k * 977u;
    int n = A * N;
    int32_t tok = 0;
    for (int i = 0; i <= n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(s >> 33);
        tok = (r & 7) == 0 ? (int32_t)((r >> 3) % V) : (tok * 5 + 1) % V;
        if (i < n)
            in[i] = tok;
        if (i > 0)
            tg[i - 1] = tok;
    }
}

static int steps(llmt_trainer *tr, int from, int to, float *loss)
{
    int32_t in[A * N], tg[A * N];
    for (int k = from; k < to; k++) {
        batch_for(k, in, tg);
        llmt_batch b = {sizeof b, in, tg, B * A, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        llmt_status s = llmt_trainer_step(tr, &b, &met);
        if (s != LLMT_OK) {
            fprintf(stderr, "  step %d: %s\n", k, llmt_trainer_last_error(tr));
            return -1;
        }
        loss[k] = met.loss;
    }
    return 0;
}

static float *param(llmt_model *m, const char *name, int64_t *numel)
{
    llmt_tensor v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    if (llmt_model_find_param(m, name, &v) != LLMT_OK)
        return NULL;
    *numel = v.ndim == 2 ? v.shape[0] * v.shape[1] : v.shape[0];
    return v.data;
}

/* The dense name of a parameter of the one-expert model. */
static void dense_name(const char *moe, char *out, size_t n)
{
    const char *p = strstr(moe, "experts.");
    if (!p) {
        snprintf(out, n, "%s", moe);
        return;
    }
    snprintf(out, n, "%.*s%s", (int)(p - moe), moe, p + strlen("experts."));
}

/* The MoE model mm's parameter i (into *v) and the dense model md's of
 * the same role (its elements into *n; NULL where md has none); 0 for a
 * router, which the dense model has none of. */
static int dense_peer(llmt_model *md, llmt_model *mm, int i, llmt_tensor *v, float **d,
                      int64_t *n)
{
    const char *name;
    v->struct_size = sizeof *v;
    llmt_model_param(mm, i, &name, v);
    if (strstr(name, "router"))
        return 0;
    char dn[128];
    dense_name(name, dn, sizeof dn);
    *n = 0;
    *d = param(md, dn, n);
    return 1;
}

/* A dense model and a MoE one trained side by side from the same
 * weights. */
typedef struct pair {
    llmt_model *md, *mm;
    llmt_trainer *td, *tm;
    float ld[4], lm[4];
} pair;

/* The dense model of cd and the MoE model of cm (two checks); whether
 * both were made. */
static int pair_models(pair *p, const llmt_model_config *cd, const llmt_model_config *cm)
{
    memset(p, 0, sizeof *p);
    CHECK_STATUS(llmt_model_create(ctx, cd, &p->md), LLMT_OK);
    CHECK_STATUS(llmt_model_create(ctx, cm, &p->mm), LLMT_OK);
    return p->md && p->mm;
}

/* Both trained 4 steps (their trainers made, two checks; the steps run,
 * one): the MoE model's losses within 1e-5 relative of the dense one's
 * (four checks); their parameters synced. */
static void pair_train(pair *p)
{
    llmt_trainer_opts o;
    opts(&o, 4);
    CHECK_STATUS(llmt_trainer_create(p->md, &o, &p->td), LLMT_OK);
    CHECK_STATUS(llmt_trainer_create(p->mm, &o, &p->tm), LLMT_OK);
    CHECK(p->td && p->tm && steps(p->td, 0, 4, p->ld) == 0 && steps(p->tm, 0, 4, p->lm) == 0);
    for (int k = 0; k < 4; k++)
        CHECK_CLOSE(p->lm[k], p->ld[k], 1e-5, 0);
    llmt_trainer_sync_params(p->tm);
    llmt_trainer_sync_params(p->td);
}

static void pair_free(pair *p)
{
    llmt_trainer_destroy(p->td);
    llmt_trainer_destroy(p->tm);
    llmt_model_destroy(p->md);
    llmt_model_destroy(p->mm);
}

static void test_one_expert_is_dense(void)
{
    llmt_model_config cd, cm;
    cfg_moe(&cd, 0, 0, 0);
    cfg_moe(&cm, 1, 1, 1);
    cm.moe_ffn = cd.ffn_hidden;
    cm.moe_dropless = 1;
    cm.moe_z_loss_coef = 0; /* the only router gradient with one expert */
    pair p;
    if (!pair_models(&p, &cd, &cm))
        return;
    llmt_model *md = p.md, *mm = p.mm;
    int32_t np = 0;
    llmt_model_param_count(mm, &np, NULL);
    int copied = 0;
    for (int i = 0; i < np; i++) {
        llmt_tensor v;
        float *d = NULL;
        int64_t n = 0;
        if (!dense_peer(md, mm, i, &v, &d, &n))
            continue;
        CHECK(d != NULL);
        if (!d)
            continue;
        memcpy(v.data, d, (size_t)n * sizeof(float));
        copied++;
    }
    CHECK_EQ_INT(copied, np - 2); /* all but the two routers */
    pair_train(&p);
    const float *ld = p.ld, *lm = p.lm;
    double worst = 0; /* relative L2 per tensor (Adam's first steps amplify the
                         summation-order differences of near-zero gradients) */
    for (int i = 0; i < np; i++) {
        llmt_tensor v;
        float *d = NULL;
        int64_t n = 0;
        if (!dense_peer(md, mm, i, &v, &d, &n))
            continue;
        const float *x = v.data;
        double dd = 0, nn = 0;
        for (int64_t j = 0; d && j < n; j++) {
            dd += ((double)x[j] - d[j]) * ((double)x[j] - d[j]);
            nn += (double)d[j] * d[j];
        }
        if (nn > 0 && sqrt(dd / nn) > worst)
            worst = sqrt(dd / nn);
    }
    printf(
        "one expert vs dense: losses %.7f %.7f .. %.7f %.7f, params worst relative L2 %.2e\n",
        lm[0], ld[0], lm[3], ld[3], worst);
    CHECK(worst <= 1e-5);
    int64_t cnt[1], dr = -1;
    CHECK_STATUS(llmt_trainer_moe_stats(p.tm, -1, cnt, 1, &dr, NULL, NULL), LLMT_OK);
    CHECK_EQ_INT(cnt[0], 2 * A * N); /* both layers, every token */
    CHECK_EQ_INT(dr, 0);
    CHECK_STATUS(llmt_trainer_moe_stats(p.td, -1, NULL, 0, NULL, NULL, NULL),
                 LLMT_ERR_UNSUPPORTED);
    pair_free(&p);
}

/* Dense ffn (1+S)F = [routed expert | shared experts] along the hidden
 * units: w1, w3 rows, w2 columns. to_moe 1 copies dense -> MoE, else
 * compares them (returns the worst relative L2 of the three). */
static double shared_map(llmt_model *md, llmt_model *mm, int l, int F, int S, int to_moe)
{
    const char *kind[3] = {"w1", "w3", "w2"};
    int C = 32, Fd = (1 + S) * F;
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        char dn[96], en[96], sn[96];
        snprintf(dn, sizeof dn, "layers.%d.feed_forward.%s.weight", l, kind[k]);
        snprintf(en, sizeof en, "layers.%d.feed_forward.experts.%s.weight", l, kind[k]);
        snprintf(sn, sizeof sn, "layers.%d.feed_forward.shared_experts.%s.weight", l, kind[k]);
        int64_t nd = 0, ne = 0, ns = 0;
        float *d = param(md, dn, &nd), *e = param(mm, en, &ne), *sh = param(mm, sn, &ns);
        CHECK(d && e && sh && nd == (int64_t)C * Fd && ne == (int64_t)C * F &&
              ns == (int64_t)C * S * F);
        if (!d || !e || !sh || nd != ne + ns)
            return 1;
        double dd = 0, nn = 0;
        for (int64_t j = 0; j < nd; j++) {
            /* w1, w3 [Fd, C]: rows; w2 [C, Fd]: columns */
            int64_t r = k < 2 ? j / C : j % Fd, c = k < 2 ? j % C : j / Fd;
            float *m = r < F ? (k < 2 ? e + r * C + c : e + c * F + r)
                             : (k < 2 ? sh + (r - F) * C + c : sh + c * (S * F) + (r - F));
            if (to_moe)
                *m = d[j];
            dd += ((double)*m - d[j]) * ((double)*m - d[j]);
            nn += (double)d[j] * d[j];
        }
        if (nn > 0 && sqrt(dd / nn) > worst)
            worst = sqrt(dd / nn);
    }
    return worst;
}

static void test_shared_is_dense(int S)
{
    enum { F = 8 };
    llmt_model_config cd, cm;
    cfg_moe(&cd, 0, 0, 0);
    cd.ffn_hidden = (1 + S) * F;
    cfg_moe(&cm, 1, 1, 1);
    cm.moe_ffn = F;
    cm.moe_shared_experts = S;
    cm.moe_dropless = 1;
    cm.moe_z_loss_coef = 0; /* the only router gradient with one expert */
    pair p;
    if (!pair_models(&p, &cd, &cm))
        return;
    llmt_model *md = p.md, *mm = p.mm;
    int32_t np = 0, npd = 0;
    llmt_model_param_count(mm, &np, NULL);
    llmt_model_param_count(md, &npd, NULL);
    CHECK_EQ_INT(np, npd + 2 * 4); /* a layer: router, 3 expert, 3 shared for 3 dense */
    for (int i = 0; i < np; i++) { /* attention, norms, embeddings: by name */
        const char *name;
        llmt_tensor v;
        v.struct_size = sizeof v;
        llmt_model_param(mm, i, &name, &v);
        int64_t n = 0;
        float *d = strstr(name, "feed_forward") ? NULL : param(md, name, &n);
        if (d)
            memcpy(v.data, d, (size_t)n * sizeof(float));
    }
    for (int l = 0; l < 2; l++)
        shared_map(md, mm, l, F, S, 1);
    pair_train(&p);
    const float *ld = p.ld, *lm = p.lm;
    double worst = 0;
    for (int l = 0; l < 2; l++) {
        double w = shared_map(md, mm, l, F, S, 0);
        worst = w > worst ? w : worst;
    }
    printf("1 routed + %d shared experts of %d vs dense ffn %d: losses %.7f %.7f .. %.7f "
           "%.7f, MLP params worst relative L2 %.2e\n",
           S, F, (1 + S) * F, lm[0], ld[0], lm[3], ld[3], worst);
    CHECK(worst <= 1e-5);
    pair_free(&p);
}

static void test_trains_and_counts(void)
{
    enum { E = 4, K = 2, S = 30 };
    llmt_model_config c;
    cfg_moe(&c, E, K, 2); /* layer 0 MoE, layer 1 dense */
    c.moe_capacity_factor = 1.0f;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    CHECK_STATUS(llmt_model_create(ctx, &c, &m), LLMT_OK);
    llmt_trainer_opts o;
    opts(&o, S);
    if (m)
        CHECK_STATUS(llmt_trainer_create(m, &o, &tr), LLMT_OK);
    if (!tr)
        return;
    float loss[S];
    CHECK(steps(tr, 0, S, loss) == 0);
    printf("E %d top-%d: loss %.4f -> %.4f over %d steps\n", E, K, loss[0], loss[S - 1], S);
    CHECK(loss[S - 1] < 0.6f * loss[0]);
    int64_t cnt[E], c0[E], dr = -1, dr0 = -1, sum = 0;
    double aux = -1, z = -1;
    CHECK_STATUS(llmt_trainer_moe_stats(tr, -1, cnt, E, &dr, &aux, &z), LLMT_OK);
    CHECK_STATUS(llmt_trainer_moe_stats(tr, 0, c0, E, &dr0, NULL, NULL), LLMT_OK);
    for (int e = 0; e < E; e++) {
        sum += cnt[e];
        CHECK_EQ_INT(cnt[e], c0[e]);
        CHECK(cnt[e] <= A * ((N * K + E - 1) / E)); /* capacity 1.0 per micro-batch */
    }
    printf("tokens per expert %lld %lld %lld %lld, dropped %lld, aux %.4f, z %.4f\n",
           (long long)cnt[0], (long long)cnt[1], (long long)cnt[2], (long long)cnt[3],
           (long long)dr, aux, z);
    CHECK_EQ_INT(sum + dr, (int64_t)A * N * K);
    CHECK_EQ_INT(dr, dr0);
    CHECK(aux > 0 && aux <= E); /* E * sum f P, sum f = sum P = 1: at most E */
    CHECK(z > 0);
    CHECK_STATUS(llmt_trainer_moe_stats(tr, 1, cnt, E, NULL, NULL, NULL),
                 LLMT_ERR_INVALID_ARGUMENT); /* layer 1 is dense */
    CHECK(strstr(llmt_trainer_last_error(tr), "layer 1 is not a MoE layer") != NULL);
    CHECK_STATUS(llmt_trainer_moe_stats(tr, 0, cnt, E - 1, NULL, NULL, NULL),
                 LLMT_ERR_INVALID_ARGUMENT);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
}

static void test_ckpt_round_trip(void)
{
    enum { S = 6, CUT = 3 };
    llmt_model_config c;
    cfg_moe(&c, 4, 2, 1);
    c.moe_shared_experts = 1;
    llmt_trainer_opts o;
    opts(&o, S);
    llmt_model *mf = NULL, *m1 = NULL, *m2 = NULL;
    llmt_trainer *tf = NULL, *t1 = NULL, *t2 = NULL;
    CHECK_STATUS(llmt_model_create(ctx, &c, &mf), LLMT_OK);
    CHECK_STATUS(llmt_model_create(ctx, &c, &m1), LLMT_OK);
    c.seed = 99; /* a fresh process: other weights until the checkpoint */
    CHECK_STATUS(llmt_model_create(ctx, &c, &m2), LLMT_OK);
    if (!mf || !m1 || !m2)
        return;
    CHECK_STATUS(llmt_trainer_create(mf, &o, &tf), LLMT_OK);
    CHECK_STATUS(llmt_trainer_create(m1, &o, &t1), LLMT_OK);
    CHECK_STATUS(llmt_trainer_create(m2, &o, &t2), LLMT_OK);
    if (!tf || !t1 || !t2)
        return;
    float lf[S], l1[S], l2[S];
    CHECK(steps(tf, 0, S, lf) == 0 && steps(t1, 0, CUT, l1) == 0);
    char root[300];
    snprintf(root, sizeof root, "%s/ck", tmpdir);
    llmt_ckpt_opts co;
    llmt_ckpt_opts_init(&co, sizeof co);
    co.direct_io = 0;
    llmt_ckpt *ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(ctx, root, &co, &ck), LLMT_OK);
    if (!ck)
        return;
    CHECK_STATUS(llmt_ckpt_begin(ck, CUT), LLMT_OK);
    CHECK_STATUS(llmt_trainer_ckpt_add(t1, ck), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_wait(ck, -1), LLMT_OK);
    llmt_ckpt_destroy(ck);
    ck = NULL;
    CHECK_STATUS(llmt_ckpt_create(ctx, root, &co, &ck), LLMT_OK);
    int64_t step = -1;
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &step), LLMT_OK);
    CHECK_EQ_INT(step, CUT);
    CHECK_STATUS(llmt_trainer_ckpt_read(t2, ck), LLMT_OK);
    llmt_ckpt_destroy(ck);
    /* the expert tensors came back: equal to the saving run's at the cut */
    int64_t n1 = 0, n2 = 0;
    llmt_trainer_sync_params(t1);
    const float *e1 = param(m1, "layers.1.feed_forward.experts.w2.weight", &n1);
    const float *e2 = param(m2, "layers.1.feed_forward.experts.w2.weight", &n2);
    CHECK(e1 && e2 && n1 == 4 * 32 * 24 && n1 == n2);
    if (e1 && e2 && n1 == n2)
        CHECK(memcmp(e1, e2, (size_t)n1 * sizeof(float)) == 0);
    e1 = param(m1, "layers.1.feed_forward.shared_experts.w2.weight", &n1);
    e2 = param(m2, "layers.1.feed_forward.shared_experts.w2.weight", &n2);
    CHECK(e1 && e2 && n1 == 32 * 24 && n1 == n2);
    if (e1 && e2 && n1 == n2)
        CHECK(memcmp(e1, e2, (size_t)n1 * sizeof(float)) == 0);
    CHECK(steps(t2, CUT, S, l2) == 0);
    for (int k = CUT; k < S; k++) {
        CHECK(l2[k] == lf[k]);
        if (l2[k] != lf[k])
            fprintf(stderr, "  step %d: resumed %.9g, uninterrupted %.9g\n", k + 1, l2[k],
                    lf[k]);
    }
    llmt_trainer_destroy(tf);
    llmt_trainer_destroy(t1);
    llmt_trainer_destroy(t2);
    llmt_model_destroy(mf);
    llmt_model_destroy(m1);
    llmt_model_destroy(m2);
}

static void bad_cfg(llmt_model_config *c, const char *want)
{
    llmt_model *m = NULL;
    CHECK_STATUS(llmt_model_create(ctx, c, &m), LLMT_ERR_INVALID_ARGUMENT);
    const char *msg = llmt_context_last_error(ctx);
    CHECK(m == NULL && strstr(msg, want) != NULL);
    if (!strstr(msg, want))
        fprintf(stderr, "  want '%s' in '%s'\n", want, msg);
    llmt_model_destroy(m);
}

static void bad_spec(const char *moe, const char *want)
{
    char js[512];
    snprintf(js, sizeof js,
             "{\"model\": {\"arch\": \"llama\", \"layers\": 4, \"hidden\": 64, \"heads\": 4, "
             "\"vocab\": 256, \"seq_len\": 64, \"moe\": {%s}}}",
             moe);
    llmt_spec *s = NULL;
    CHECK_STATUS(llmt_spec_parse_json(ctx, js, strlen(js), &s), LLMT_ERR_SPEC);
    const char *msg = llmt_context_last_error(ctx);
    CHECK(strstr(msg, want) != NULL);
    if (!strstr(msg, want))
        fprintf(stderr, "  want '%s' in '%s'\n", want, msg);
    llmt_spec_destroy(s);
}

static void test_bad(void)
{
    llmt_model_config c;
    cfg_moe(&c, 4, 5, 1);
    bad_cfg(&c, "moe_top_k 5 must be in [1, moe_experts 4]");
    cfg_moe(&c, 4, 2, 1);
    c.moe_capacity_factor = -1.0f;
    bad_cfg(&c, "moe_capacity_factor -1 must be > 0");
    cfg_moe(&c, 4, 2, 3);
    bad_cfg(&c, "moe_every 3 in [1, layers 2]");
    cfg_moe(&c, 4, 2, 1);
    c.arch = LLMT_ARCH_GPT2;
    c.kv_heads = 0;
    bad_cfg(&c, "needs the Llama arch");
    cfg_moe(&c, 0, 2, 0);
    bad_cfg(&c, "set but moe_experts is 0");
    cfg_moe(&c, 0, 0, 0);
    c.moe_shared_experts = 1;
    bad_cfg(&c, "moe_shared_experts or moe_raw_gates set but moe_experts is 0");
    cfg_moe(&c, 4, 2, 1);
    c.moe_shared_experts = -1;
    bad_cfg(&c, "moe_shared_experts -1 must be >= 0");
    cfg_moe(&c, 4, 2, 1);
    c.moe_raw_gates = 2;
    bad_cfg(&c, "moe_raw_gates 2 must be 0");
    bad_spec("\"experts\": 4, \"top_k\": 5",
             "model.moe.top_k: 5 must be in [1, model.moe.experts 4]");
    bad_spec("\"experts\": 4, \"top_k\": 2, \"capacity_factor\": 0",
             "model.moe.capacity_factor: 0 must be > 0");
    bad_spec("\"experts\": 4, \"top_k\": 2, \"capacity_factor\": -2",
             "model.moe.capacity_factor: -2 must be > 0");
    bad_spec("\"experts\": 4, \"top_k\": 2, \"every\": 5",
             "model.moe.every: 5 exceeds model.layers 4");
    bad_spec("\"aux_loss_coef\": 0.1",
             "model.moe.aux_loss_coef: set but model.moe.experts is 0");
    bad_spec("\"shared_experts\": 1",
             "model.moe.shared_experts: set but model.moe.experts is 0");
    bad_spec("\"renormalize\": false", "model.moe.renormalize: set but model.moe.experts is 0");
    bad_spec("\"experts\": 4, \"shared_experts\": -1", "model.moe.shared_experts");
}

int main(void)
{
    CHECK_STATUS(llmt_context_create(NULL, &ctx), LLMT_OK);
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/llmt-moe-XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_bad();
    test_one_expert_is_dense();
    test_shared_is_dense(1);
    test_shared_is_dense(2);
    test_trains_and_counts();
    test_ckpt_round_trip();
    llmt_context_destroy(ctx);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", tmpdir);
    return check_exit("moe-train");
}
