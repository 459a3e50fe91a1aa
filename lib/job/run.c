/* Running a job: the step with what follows it (validation, checkpoint,
 * anomaly policy), run(n), save, resume, evaluate, sample. Collective
 * under a communicator: every rank makes the same decisions because they
 * rest on the global loss and norm the trainer reports. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "job/job.h"
#include "train/trainer_state.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

static const char *const policy_names[] = {"skip", "rollback", "stop", "lower_lr"};

LLMT_API llmt_status llmt_job_evaluate(llmt_job *j, float *val_loss)
{
    if (!j)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&j->err, "job: evaluate", val_loss);
    llmt_batch b = {sizeof b, j->vin, j->vtg, j->nval, j->to.seq_len};
    llmt_status s = llmt_trainer_evaluate(j->tr, &b, val_loss);
    if (s != LLMT_OK)
        return FAIL(s, "%s", llmt_trainer_last_error(j->tr));
    return LLMT_OK;
}

static int64_t steps_done(llmt_job *j)
{
    int64_t step = 0;
    llmt_trainer_get_step(j->tr, &step);
    return step;
}

static double zscore(llmt_job *j, float loss)
{
    return llmt__job_window_z(j->losses, j->nloss, loss);
}

static void remember(llmt_job *j, float loss, float norm)
{
    llmt__job_window_add(j->losses, &j->nloss, &j->loss_pos, loss);
    llmt__job_window_add(j->gnorms, &j->ngn, &j->gn_pos, norm);
}

/* The loader's cursor (samples of the epoch read by all ranks). */
static int64_t cursor_of(llmt_job *j, int64_t *epoch)
{
    llmt_loader_state st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    if (llmt_loader_get_state(j->data.loader, &st) != LLMT_OK)
        return -1;
    if (epoch)
        *epoch = st.epoch;
    return st.cursor;
}

/* For a JSON string: no quotes or backslashes. */
static void json_safe(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
    for (char *c = dst; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
            *c = '\'';
}

/* The policy of fault_tolerance.anomaly for an anomaly at step `at`
 * (kind "nonfinite": not applied by the trainer; "spike": applied). */
static llmt_status anomaly(llmt_job *j, int64_t at, const char *kind, const char *evidence,
                           llmt_job_metrics *m)
{
    int policy = j->spec->fault_tolerance.anomaly.policy;
    int applied = strcmp(kind, "nonfinite") != 0; /* spikes: already applied */
    int64_t undone = 0, window = 0, cursor = cursor_of(j, NULL);
    j->anomalies++;
    m->events |= LLMT_JOB_EVENT_ANOMALY;
    if (++j->consecutive > JOB_MAX_CONSECUTIVE_ANOMALIES)
        return FAIL(LLMT_ERR_NUMERIC,
                    "anomaly: %d anomalies in a row up to step %lld "
                    "(%s): fault_tolerance.anomaly.policy %s cannot make progress",
                    j->consecutive, (long long)at, evidence, policy_names[policy]);
    const char *action;
    if (policy == LLMT_SPEC_ANOMALY_STOP)
        return FAIL(LLMT_ERR_NUMERIC,
                    "anomaly at step %lld: %s %s "
                    "(fault_tolerance.anomaly.policy stop)",
                    (long long)at, kind, evidence);
    if (policy == LLMT_SPEC_ANOMALY_ROLLBACK) {
        /* PaLM's remedy: back to the last good state, and on with the
         * batches after the bad one (the loader is not rewound) */
        int64_t back = -1;
        llmt_status s = llmt__job_restore(j, 0, &back);
        if (s != LLMT_OK)
            return s;
        if (back < 0)
            return FAIL(LLMT_ERR_NUMERIC,
                        "anomaly at step %lld: %s %s; "
                        "fault_tolerance.anomaly.policy rollback has no checkpoint "
                        "to go back to yet",
                        (long long)at, kind, evidence);
        j->rollbacks++;
        m->events |= LLMT_JOB_EVENT_ROLLBACK;
        /* the steps after the snapshot are lost; the data they (and the
         * bad step) read is skipped: the cursor stays where it is */
        undone = (applied ? at : at - 1) - back;
        window = (at - back) * (int64_t)j->to.micro_batch * j->to.grad_accum * j->dp;
        m->step = back;
        /* the anomaly windows: the checkpoint's (ckpt.c) */
        action = "rollback";
    } else if (!applied) {
        j->skipped++;
        m->events |= LLMT_JOB_EVENT_SKIPPED;
        action = policy == LLMT_SPEC_ANOMALY_LOWER_LR ? "skip and lower_lr" : "skip";
    } else {
        action = policy == LLMT_SPEC_ANOMALY_LOWER_LR
                     ? "lower_lr (the step was applied)"
                     : "logged (already applied; rollback would undo it)";
    }
    if (undone > 0) {
        double mean = j->last.step > 0 && j->gp_productive_s > 0
                          ? j->gp_productive_s / (double)(at > 1 ? at - 1 : 1)
                          : 0;
        double lost = mean * (double)undone;
        j->gp_lost_steps += undone;
        j->gp_lost_s += lost;
        j->gp_productive_s -= lost < j->gp_productive_s ? lost : j->gp_productive_s;
    }
    char ev[512];
    json_safe(ev, sizeof ev, evidence);
    llmt__log(j->ctx, LLMT_LOG_WARN, "job", "anomaly at step %lld on rank %d: %s %s: %s%s",
              (long long)at, (int)j->rank, kind, evidence, action,
              window ? " (the data window since the snapshot is skipped)" : "");
    uint64_t xxh = 0; /* 0 in the line if it cannot be had: the policy still acts */
    if (llmt__job_params_hash(j, &xxh) != LLMT_OK)
        llmt__err_clear(&j->err);
    llmt__job_metrics_line(
        j,
        "{\"event\":\"anomaly\",\"step\":%lld,\"kind\":\"%s\",\"action\":\"%s\","
        "\"now_at\":%lld,\"rank\":%d,\"evidence\":\"%s\",\"params_xxh\":\"%016llx\","
        "\"cursor\":%lld,\"skipped_samples\":%lld,\"lost_steps\":%lld}",
        (long long)at, kind,
        policy == LLMT_SPEC_ANOMALY_ROLLBACK   ? "rollback"
        : policy == LLMT_SPEC_ANOMALY_LOWER_LR ? "lower_lr"
        : applied                              ? "logged"
                                               : "skip",
        (long long)m->step, (int)j->rank, ev, (unsigned long long)xxh, (long long)cursor,
        (long long)window, (long long)undone);
    if (policy == LLMT_SPEC_ANOMALY_LOWER_LR)
        return llmt__job_lower_lr(j, at, kind);
    return LLMT_OK;
}

/* Where this process's time went (cumulative; after each save and at the
 * end): `llmtrain launch` sums the last line of each generation. */
static void goodput_line(llmt_job *j, const char *when)
{
    int64_t epoch = 0, cursor = cursor_of(j, &epoch);
    double el = j->began ? llmt__job_now() - j->t_start : 0;
    llmt__job_metrics_line(
        j,
        "{\"event\":\"goodput\",\"when\":\"%s\",\"step\":%lld,\"rank\":%d,\"gen\":%d,"
        "\"elapsed_s\":%.4f,\"productive_s\":%.4f,\"ckpt_stall_s\":%.4f,"
        "\"anomaly_lost_s\":%.4f,\"anomaly_lost_steps\":%lld,\"checks_s\":%.4f,"
        "\"epoch\":%lld,\"cursor\":%lld,\"anomalies\":%lld,\"sdc_checks\":%lld,"
        "\"stragglers\":%lld,\"lr_mult\":%.6g}",
        when, (long long)steps_done(j), (int)j->rank, j->launch_gen, el, j->gp_productive_s,
        j->gp_stall_s, j->gp_lost_s, (long long)j->gp_lost_steps, j->gp_checks_s,
        (long long)epoch, (long long)cursor, (long long)j->anomalies, (long long)j->sdc_checks,
        (long long)j->stragglers, j->lr_mult > 0 ? j->lr_mult : 1.0);
}

/* The communicator's seconds so far (0 without one): read around a step,
 * the straggler report's busy time is the step's wall time less the
 * collectives of that same window, not those of the checks, evaluation
 * or setup between steps (an SDC check at the step hid every straggler:
 * its collectives came after the step's wall time was taken). */
static double comm_seconds(const llmt_job *j)
{
    if (!j->comm || j->world < 2)
        return 0;
    llmt_comm_stats cs;
    memset(&cs, 0, sizeof cs);
    cs.struct_size = sizeof cs;
    return llmt_comm_get_stats(j->comm, &cs) == LLMT_OK ? cs.total_seconds : 0;
}

static llmt_status step_once(llmt_job *j, llmt_job_metrics *m)
{
    const llmt_spec *sp = j->spec;
    memset(m, 0, sizeof *m);
    m->struct_size = sizeof *m;
    m->val_loss = m->start_val_loss = NAN;
    m->saved_step = -1;
    int64_t start = steps_done(j);
    m->step = start;
    if (start >= j->stop_at)
        return FAIL(LLMT_ERR_STATE, "job: step %lld of %lld done: nothing left to run",
                    (long long)start, (long long)j->stop_at);
    llmt_status s;
    if (!j->began) {
        j->began = 1;
        j->t_start = llmt__job_now();
        if (start == 0 && sp->train.eval_interval > 0) {
            if ((s = llmt_job_evaluate(j, &m->start_val_loss)) != LLMT_OK)
                return s;
            llmt__job_metrics_line(j, "{\"step\":0,\"val_loss\":%.6f}",
                                   (double)m->start_val_loss);
            m->events |= LLMT_JOB_EVENT_START_VAL;
        }
    }
    if ((s = llmt__job_obs_start(j)) != LLMT_OK)
        return s;
    llmt__job_obs_before(j, start + 1);
    /* the ZeRO-3 window's base, before this step reads its batch: the
     * state it starts from, when the one held is not (sdc_base.c) */
    if ((s = llmt__job_sdc_base(j, start)) != LLMT_OK)
        return s;
    job_marks k;
    memset(&k, 0, sizeof k);
    double t_begin = llmt__job_now(), comm0 = comm_seconds(j);
    k.t_begin = t_begin;
    k.u_begin = llmt__obs_unix_s();
    if ((s = llmt__job_data_next(j, &j->data, j->in, j->tg)) != LLMT_OK)
        return s;
    k.t_data = llmt__job_now();
    k.u_data = llmt__obs_unix_s();
    llmt_batch b = {sizeof b, j->in, j->tg, j->to.micro_batch * j->to.grad_accum,
                    j->to.seq_len};
    llmt_step_metrics met;
    memset(&met, 0, sizeof met);
    met.struct_size = sizeof met;
    /* the ZeRO-3 check's snapshot: before the step's injected faults */
    if ((s = llmt__job_sdc_snap(j, start + 1)) != LLMT_OK ||
        (s = llmt__job_fault_before(j, start + 1)) != LLMT_OK)
        return s;
    llmt__job_obs_mark(j, &k, 0);
    k.t_step0 = llmt__job_now();
    k.u_step0 = llmt__obs_unix_s();
    s = llmt_trainer_step(j->tr, &b, &met);
    k.t_step1 = llmt__job_now();
    k.u_step1 = llmt__obs_unix_s();
    llmt__job_obs_mark(j, &k, 1);
    llmt__job_fault_after(j);
    if (s == LLMT_OK || s == LLMT_ERR_NUMERIC) /* progress, even if not applied */
        llmt__job_heartbeat(j, start + 1);
    if (s == LLMT_ERR_NUMERIC) { /* the trainer did not apply it */
        j->gp_lost_s += llmt__job_now() - t_begin;
        return anomaly(j, start + 1, "nonfinite", llmt_trainer_last_error(j->tr), m);
    }
    if (s != LLMT_OK)
        return FAIL(s, "%s", llmt_trainer_last_error(j->tr));
    int64_t done = met.step;
    double t = llmt__job_now();
    double wall = t - t_begin; /* with the data and an injected delay */
    double comm = comm_seconds(j) - comm0;
    double cycle = t - (j->gp_cycle_from > 0 ? j->gp_cycle_from : t_begin);
    j->gp_cycle_from = t;
    j->gp_productive_s += wall;
    m->step = done;
    m->loss = met.loss;
    m->grad_norm = met.grad_norm;
    m->lr = met.lr;
    m->tokens = met.tokens;
    m->step_s = met.seconds;
    m->tokens_per_s = (double)met.tokens / (met.seconds > 0 ? met.seconds : 1e-9);
    m->mfu = j->peak_flops > 0 && met.seconds > 0
                 ? j->flops_per_step / met.seconds / j->peak_flops
                 : 0;
    m->elapsed_s = t - j->t_start;
    llmt__job_metrics_line(j,
                           "{\"step\":%lld,\"loss\":%.6f,\"grad_norm\":%.6f,\"lr\":%.6g,"
                           "\"tokens\":%lld,\"step_s\":%.4f,\"tokens_per_s\":%.1f,"
                           "\"elapsed_s\":%.2f,\"mfu\":%.4g,\"cycle_s\":%.4f}",
                           (long long)done, (double)met.loss, (double)met.grad_norm,
                           (double)met.lr, (long long)met.tokens, met.seconds, m->tokens_per_s,
                           m->elapsed_s, m->mfu, cycle);
    llmt__job_moe_line(j, done);
    llmt__job_pp_line(j, done);
    double z = zscore(j, met.loss);
    if (z > sp->fault_tolerance.anomaly.zscore) {
        char ev[128];
        snprintf(ev, sizeof ev,
                 "loss %.4f is %.1f standard deviations above the last "
                 "%d steps (anomaly.zscore %g)",
                 (double)met.loss, z, j->nloss, sp->fault_tolerance.anomaly.zscore);
        s = anomaly(j, done, "spike", ev, m);
        if (s != LLMT_OK || (m->events & LLMT_JOB_EVENT_ROLLBACK))
            return s;
    } else if (sp->fault_tolerance.anomaly.grad_zscore > 0 &&
               (z = llmt__job_window_z(j->gnorms, j->ngn, met.grad_norm)) >
                   sp->fault_tolerance.anomaly.grad_zscore) {
        char ev[160];
        snprintf(ev, sizeof ev,
                 "gradient norm %.4g is %.1f standard deviations above the "
                 "last %d steps (anomaly.grad_zscore %g)",
                 (double)met.grad_norm, z, j->ngn, sp->fault_tolerance.anomaly.grad_zscore);
        s = anomaly(j, done, "grad_spike", ev, m);
        if (s != LLMT_OK || (m->events & LLMT_JOB_EVENT_ROLLBACK))
            return s;
    } else {
        remember(j, met.loss, met.grad_norm);
        j->consecutive = 0;
    }
    if ((s = llmt__job_sdc(j, done, m)) != LLMT_OK || (m->events & LLMT_JOB_EVENT_ROLLBACK))
        return s;
    if ((s = llmt__job_straggler(j, done, wall, comm)) != LLMT_OK)
        return s;
    int last = done == j->stop_at;
    int64_t li = sp->train.log_interval, ei = sp->train.eval_interval;
    if (li > 0 && (done % li == 0 || last || done == j->start_step + 1))
        m->events |= LLMT_JOB_EVENT_LOG;
    if (ei > 0 && (done % ei == 0 || last)) {
        if ((s = llmt_job_evaluate(j, &m->val_loss)) != LLMT_OK)
            return s;
        llmt__job_metrics_line(j, "{\"step\":%lld,\"val_loss\":%.6f}", (long long)done,
                               (double)m->val_loss);
        m->events |= LLMT_JOB_EVENT_VALIDATED;
    }
    double t_save = llmt__job_now();
    k.t_save0 = t_save;
    k.u_save0 = llmt__obs_unix_s();
    s = llmt__job_maybe_save(j, done, last, m);
    k.t_save1 = llmt__job_now();
    k.u_save1 = llmt__obs_unix_s();
    j->gp_stall_s += k.t_save1 - t_save;
    if (s == LLMT_OK && (m->events & LLMT_JOB_EVENT_SAVED)) {
        goodput_line(j, "save");
        llmt__job_fault_saved(j, m->saved_step);
    }
    if (s == LLMT_OK) {
        k.t_end = llmt__job_now();
        s = llmt__job_obs_step(j, &k, m);
    }
    return s;
}

LLMT_API llmt_status llmt_job_step(llmt_job *j, llmt_job_metrics *metrics)
{
    if (!j)
        return LLMT_ERR_NULL_POINTER;
    if (metrics && metrics->struct_size < sizeof(size_t))
        return FAIL(LLMT_ERR_STRUCT_SIZE,
                    "job: llmt_job_metrics.struct_size %zu is not "
                    "set",
                    metrics->struct_size);
    llmt_job_metrics m;
    double stall0 = j->gp_stall_s;
    llmt_status s = step_once(j, &m);
    /* the next step's cycle runs from this one's end (step_once), less
     * the save in between (not work); an anomaly's action and an in-place
     * recovery are not work either (the job and the agent count them) */
    if (j->gp_cycle_from > 0)
        j->gp_cycle_from += j->gp_stall_s - stall0;
    if (m.events & (LLMT_JOB_EVENT_SKIPPED | LLMT_JOB_EVENT_ROLLBACK))
        j->gp_cycle_from = 0;
    /* a peer died under `llmtrain launch --in-place`: this process stays */
    if (s != LLMT_OK && llmt__job_inplace_wanted(j, s)) {
        s = llmt__job_inplace_recover(j, &m);
        j->gp_cycle_from = 0;
    }
    m.anomalies = j->anomalies;
    m.skipped = j->skipped;
    m.rollbacks = j->rollbacks;
    if (s == LLMT_OK || m.step > j->last.step)
        j->last = m;
    if (metrics) {
        size_t keep = metrics->struct_size;
        memcpy(metrics, &m, keep < sizeof m ? keep : sizeof m);
        metrics->struct_size = keep;
    }
    return s;
}

LLMT_API llmt_status llmt_job_finish(llmt_job *j)
{
    if (!j)
        return LLMT_ERR_NULL_POINTER;
    double t0 = llmt__job_now();
    llmt_status s = llmt_ckpt_wait(j->ck, -1);
    j->gp_stall_s += llmt__job_now() - t0;
    if (s != LLMT_OK)
        return FAIL(s, "%s", llmt_ckpt_last_error(j->ck));
    if (j->began)
        goodput_line(j, "finish");
    llmt__obs_trace_close(j->obs);
    return llmt__job_plot(j);
}

LLMT_API llmt_status llmt_job_run(llmt_job *j, int64_t n, llmt_job_metrics *metrics)
{
    if (!j)
        return LLMT_ERR_NULL_POINTER;
    int64_t target = j->stop_at, now = steps_done(j);
    if (n > 0 && now + n < target)
        target = now + n;
    llmt_status s = LLMT_OK;
    while (s == LLMT_OK && steps_done(j) < target)
        s = llmt_job_step(j, metrics);
    if (s != LLMT_OK)
        return s;
    /* a run that stops short of stop_at still ends on a saved step */
    if (j->last_saved != steps_done(j) && steps_done(j) > j->start_step &&
        (s = llmt__job_save(j, 0)) != LLMT_OK)
        return s;
    return llmt_job_finish(j);
}

LLMT_API llmt_status llmt_job_save(llmt_job *j, int32_t async)
{
    if (!j)
        return LLMT_ERR_NULL_POINTER;
    if (async != 0 && async != 1) /* before a save is begun */
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "job: save: async %d is not 0 (return when committed) or 1 (in the "
                    "background)",
                    (int)async);
    return llmt__job_save(j, async);
}

LLMT_API llmt_status llmt_job_resume(llmt_job *j, int64_t *step)
{
    if (!j)
        return LLMT_ERR_NULL_POINTER;
    int64_t at = -1;
    llmt_status s = llmt__job_restore(j, 1, &at);
    if (s != LLMT_OK)
        return s;
    if (at < 0)
        return FAIL(LLMT_ERR_NOT_FOUND, "job: resume: no checkpoint in %s%s%s", j->ckpt_dir,
                    j->durable_dir[0] ? " or " : "", j->durable_dir);
    j->resumed = 1;
    j->last.step = at;
    /* the anomaly windows: the checkpoint's (ckpt.c) */
    llmt__job_metrics_line(j, "{\"event\":\"resume\",\"step\":%lld,\"world_size\":%d}",
                           (long long)at, (int)j->world);
    if (step)
        *step = at;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_job_sample(llmt_job *j, char *buf, size_t buflen, size_t *needed)
{
    if (!j)
        return LLMT_ERR_NULL_POINTER;
    int64_t n = j->spec->train.sample_tokens;
    char *text = NULL;
    size_t len = 0;
    if (n > 0) {
        int32_t prompt = j->data.eot;
        int32_t *gen = malloc((size_t)n * sizeof *gen);
        if (!gen)
            return FAIL(LLMT_ERR_OUT_OF_MEMORY, "job: sample: no memory");
        /* the tokenizer's ids only: model.vocab may be larger */
        llmt_status s =
            llmt__trainer_generate(j->tr, &prompt, 1, (int32_t)n, 0.8f, 40,
                                   (uint64_t)j->spec->train.seed, j->data.vocab, gen);
        if (s != LLMT_OK) {
            free(gen);
            return FAIL(s, "%s", llmt_trainer_last_error(j->tr));
        }
        llmt_tokenizer_decode(j->data.tok, gen, (size_t)n, NULL, 0, &len);
        text = malloc(len + 1);
        if (!text ||
            llmt_tokenizer_decode(j->data.tok, gen, (size_t)n, text, len, &len) != LLMT_OK) {
            free(gen);
            free(text);
            return FAIL(LLMT_ERR_INTERNAL, "job: sample: decode failed");
        }
        free(gen);
    }
    if (needed)
        *needed = len + 1;
    llmt_status s = LLMT_OK;
    if (!buf || buflen < len + 1) {
        s = buflen ? FAIL(LLMT_ERR_BUFFER_TOO_SMALL, "job: sample: %zu bytes needed", len + 1)
                   : LLMT_ERR_BUFFER_TOO_SMALL;
    } else {
        if (len)
            memcpy(buf, text, len);
        buf[len] = 0;
    }
    free(text);
    return s;
}
