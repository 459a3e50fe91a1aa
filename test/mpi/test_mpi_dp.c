/* Data parallelism over MPI (run under mpirun): every process trains its
 * share of the global batch with ZeRO stage argv[1] and also trains the
 * one-rank reference on the whole global batch locally; losses and final
 * parameters must agree (losses 2e-6 relative, parameters 2e-5 absolute,
 * as in test/comm/test_dp.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmtrain.h"

#include "../unit/model_params.h"

#define STEPS 3
#define MICRO 2
#define ACCUM 2
#define T 16
#define V 64

static int train(llmt_comm *c, int zero, int rank, int dp, const int32_t *in,
                 const int32_t *tg, float *loss, float *params)
{
    llmt_model_config cfg;
    llmt_model_config_init(&cfg, sizeof cfg);
    cfg.vocab_size = V;
    cfg.max_seq_len = T;
    cfg.layers = 2;
    cfg.width = 32;
    cfg.heads = 4;
    cfg.seed = 11;
    llmt_trainer_opts o;
    llmt_trainer_opts_init(&o, sizeof o);
    o.seq_len = T;
    o.micro_batch = MICRO;
    o.grad_accum = c ? ACCUM : ACCUM * dp;
    o.schedule = LLMT_LR_CONSTANT;
    o.lr = 1e-3f;
    o.threads = 1;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    if (llmt_model_create(NULL, &cfg, &m) != LLMT_OK ||
        llmt_trainer_create(m, &o, &tr) != LLMT_OK)
        return 1;
    if (c) {
        llmt_dp_opts d;
        llmt_dp_opts_init(&d, sizeof d);
        d.zero_stage = zero;
        d.bucket_bytes = 8 << 10;
        if (llmt_trainer_set_comm(tr, c, &d) != LLMT_OK) {
            fprintf(stderr, "set_comm: %s\n", llmt_trainer_last_error(tr));
            return 1;
        }
    }
    size_t glob = (size_t)dp * ACCUM * MICRO * T, mine = (size_t)ACCUM * MICRO * T;
    for (int k = 0; k < STEPS; k++) {
        size_t off = k * glob + (c ? (size_t)rank * mine : 0);
        llmt_batch b = {sizeof b, in + off, tg + off,
                        (c ? 1 : dp) * ACCUM * MICRO, T};
        llmt_step_metrics met;
        memset(&met, 0, sizeof met);
        met.struct_size = sizeof met;
        if (llmt_trainer_step(tr, &b, &met) != LLMT_OK) {
            fprintf(stderr, "step: %s\n", llmt_trainer_last_error(tr));
            return 1;
        }
        loss[k] = met.loss;
    }
    if (llmt_trainer_sync_params(tr) != LLMT_OK) return 1;
    test_params_flatten(m, params);
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return 0;
}

int main(int argc, char **argv)
{
    int zero = argc > 1 ? atoi(argv[1]) : 0;
    if (!(llmt_build_features() & LLMT_FEATURE_MPI)) return 77;
    llmt_comm *c = NULL;
    llmt_comm_opts co;
    llmt_comm_opts_init(&co, sizeof co);
    co.timeout_ms = 60000;
    if (llmt_comm_create_from_env(NULL, &co, &c) != LLMT_OK) return 1;
    int32_t rank, dp;
    llmt_comm_rank(c, &rank);
    llmt_comm_size(c, &dp);
    size_t n = (size_t)STEPS * dp * ACCUM * MICRO * T;
    int32_t *in = malloc(n * sizeof *in), *tg = malloc(n * sizeof *tg);
    uint64_t s = 99;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        in[i] = (int32_t)((s >> 33) % V);
        tg[i] = (s >> 20) % 7 == 0 ? -1 : (in[i] * 3 + 1) % V;
    }
    enum { NP = 200000 };
    float *pr = malloc(NP * sizeof(float)), *pd = malloc(NP * sizeof(float));
    memset(pr, 0, NP * sizeof(float));
    memset(pd, 0, NP * sizeof(float));
    float lr[STEPS], ld[STEPS];
    int fails = 0;
    if (train(NULL, 0, 0, dp, in, tg, lr, pr) || train(c, zero, rank, dp, in, tg, ld, pd)) {
        fprintf(stderr, "rank %d: training failed\n", rank);
        fails++;
    }
    double ml = 0, mp = 0;
    for (int k = 0; k < STEPS; k++) ml = fmax(ml, fabs(ld[k] - lr[k]) / fabs(lr[k]));
    llmt_model_config cfg;
    (void)cfg;
    for (int i = 0; i < NP; i++) {
        double d = fabs((double)pd[i] - pr[i]);
        if (!(d <= mp)) mp = isnan(d) ? INFINITY : d;
    }
    if (!(ml <= 2e-6) || !(mp <= 2e-5)) fails++;
    fprintf(stderr, "rank %d of %d zero %d: loss rel diff %.3g, param abs diff "
            "%.3g: %s\n", rank, dp, zero, ml, mp, fails ? "FAIL" : "ok");
    llmt_comm_finalize(c);
    llmt_comm_destroy(c);
    free(in); free(tg); free(pr); free(pd);
    return fails ? 1 : 0;
}
