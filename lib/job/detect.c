/* Detection beyond a non-finite step: gradient-norm spikes, silent data
 * corruption and stragglers, and the lower_lr policy.
 *
 * Silent data corruption (a flipped bit in a GPU's memory or ALU) does not
 * crash anything: the replicas of a data-parallel group simply stop being
 * equal, and the run trains on garbage from then on. Replicas are equal
 * bit for bit by construction (same reduced gradients, same update), so
 * every fault_tolerance.sdc_interval steps each rank hashes its parameters
 * (xxh64; ZeRO 1/2 keep full replicas after their all-gather; ZeRO-3 has
 * none: sdc_shares.c replays instead) and the
 * hashes are all-gathered: a rank whose hash differs from the majority's
 * is the corrupted one. With two ranks there is no majority and both are
 * named.
 *
 * A straggler slows every rank (the collectives wait for it), so the
 * slowdown shows in no rank's wall time alone. What differs is where the
 * time goes: the slow rank is busy, the others wait in the collectives.
 * Each rank's busy time is its step time minus its communicator's seconds
 * (llmt_comm_get_stats); every fault_tolerance.straggler.interval steps
 * the per-step means are all-gathered, and a rank whose busy time exceeds
 * the median rank's by more than `margin` of the median step time is
 * named with its excess and its slowdown (its step time alone against
 * the median's). Against the step time, not the busy time: with
 * backward-overlapped reductions a rank's busy time can be tiny, and a
 * millisecond of scheduling jitter would double it. Named in `patience`
 * reports in a row it is treated as failed: the job fails on every rank
 * with a message starting "straggler:", LLMT_ERR_TIMEOUT on the slow rank
 * itself (llmtrain train exits 3 there, which `llmtrain launch` treats as
 * that rank's failure: quarantine and a spare) and LLMT_ERR_ABORTED on
 * the others. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "job/job.h"
#include "train/trainer_state.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

double llmt__job_window_z(const float *w, int n, float x)
{
    if (n < 8)
        return 0;
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++)
        mean += w[i];
    mean /= n;
    for (int i = 0; i < n; i++)
        var += (w[i] - mean) * (w[i] - mean);
    double sd = sqrt(var / (n - 1));
    return sd > 0 ? ((double)x - mean) / sd : 0;
}

void llmt__job_window_add(float *w, int *n, int *pos, float x)
{
    w[*pos] = x;
    *pos = (*pos + 1) % JOB_LOSS_WINDOW;
    if (*n < JOB_LOSS_WINDOW)
        (*n)++;
}

llmt_status llmt__job_lower_lr(llmt_job *j, int64_t at, const char *why)
{
    double f = j->spec->fault_tolerance.anomaly.lr_factor;
    const llmt_trainer_opts *o = llmt__trainer_opts(j->tr);
    float before = o->lr;
    if (llmt__trainer_scale_lr(j->tr, f) != LLMT_OK)
        return FAIL(LLMT_ERR_INTERNAL, "job: lower_lr: %s", llmt_trainer_last_error(j->tr));
    j->lr_mult = (j->lr_mult > 0 ? j->lr_mult : 1.0) * f;
    j->lr_lowered++;
    llmt__log(j->ctx, LLMT_LOG_WARN, "job",
              "lower_lr at step %lld (%s): peak LR %.4g -> %.4g (x%g; x%.4g in all, "
              "fault_tolerance.anomaly.lr_factor)",
              (long long)at, why, (double)before, (double)o->lr, f, j->lr_mult);
    llmt__job_metrics_line(j,
                           "{\"event\":\"lower_lr\",\"step\":%lld,\"rank\":%d,\"why\":\"%s\","
                           "\"factor\":%g,\"lr_peak\":%.6g,\"lr_mult\":%.6g}",
                           (long long)at, (int)j->rank, why, f, (double)o->lr, j->lr_mult);
    return LLMT_OK;
}

/* Parameter i's part of this rank's hash (llmt__job_params_hash): the
 * engine's own part where it trains its own copy, else the host tensor. */
static llmt_status engine_part(llmt_job *j, int32_t i, XXH64_state_t *h)
{
    float *b = NULL;
    int64_t e = 0;
    /* a part left out (no memory for its copy) would hash as corruption:
     * a healthy rank named, repaired or stopped */
    llmt_status s = llmt__trainer_local_read(j->tr, i, &b, &e);
    if (s != LLMT_OK)
        return FAIL(s, "sdc: rank %d could not read its part of parameter %d: %s", (int)j->rank,
                    (int)i, llmt_trainer_last_error(j->tr));
    if (e > 0)
        XXH64_update(h, b, (size_t)e * sizeof *b);
    free(b);
    return LLMT_OK;
}

static llmt_status host_part(llmt_job *j, int32_t i, XXH64_state_t *h)
{
    llmt_tensor v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    if (llmt_model_param(j->model, i, NULL, &v) != LLMT_OK || !v.data)
        return LLMT_OK;
    int64_t e = 1;
    for (int d = 0; d < v.ndim; d++)
        e *= v.shape[d];
    XXH64_update(h, v.data, (size_t)e * (v.dtype == LLMT_DTYPE_FP32 ? 4 : 2));
    return LLMT_OK;
}

/* The host tensors current where the engine trains them in place
 * (ZeRO's and EP's gathers; collective: every rank has the same engine);
 * an engine's own parts need none. Under ep an engine holds its EP rank's
 * experts only: its replicas are the data parallel ranks of the same EP
 * rank (llmt__job_replica_groups), which hold the same parts. */
static llmt_status params_sync(llmt_job *j)
{
    llmt_status st =
        llmt__trainer_host_resident(j->tr) ? llmt_trainer_sync_params(j->tr) : LLMT_OK;
    return st != LLMT_OK ? FAIL(st, "%s", llmt_trainer_last_error(j->tr)) : LLMT_OK;
}

static llmt_status params_walk(llmt_job *j, uint64_t *out)
{
    return llmt__job_xxh_walk(j, llmt__trainer_host_resident(j->tr) ? host_part : engine_part,
                              out);
}

/* This rank's parameters, every tensor in order, as one xxh64: the host
 * tensors where the engine trains them in place; otherwise the engine's
 * own parts (its tensor parallel shards, its pipeline stage's tensors),
 * which are what its replicas hold equal, bit for bit (a host copy under
 * tensor parallelism is gathered from the whole TP group, so a flip in
 * one shard would show on every rank of the group). */
llmt_status llmt__job_params_hash(llmt_job *j, uint64_t *out)
{
    *out = 0;
    llmt_status st = params_sync(j);
    return st != LLMT_OK ? st : params_walk(j, out);
}

/* The agreements' one collective: the lowest failing rank and its status
 * in one value (codes < 256; world * 256 when no rank failed) and whether
 * every rank failed. */
static llmt_status lowest_failure(llmt_job *j, llmt_status mine, int64_t v[2])
{
    v[0] = (int64_t)(mine != LLMT_OK ? j->rank : j->world) * 256 + (mine & 255);
    v[1] = mine != LLMT_OK;
    return llmt_comm_all_reduce(j->comm, v, v, 2, LLMT_DTYPE_INT64, LLMT_REDUCE_MIN, NULL);
}

llmt_status llmt__job_agree(llmt_job *j, llmt_status mine, const char *what)
{
    int64_t v[2];
    llmt_status s = lowest_failure(j, mine, v);
    if (mine != LLMT_OK) /* its own message says why */
        return mine;
    if (s != LLMT_OK)
        return FAIL(s, "%s: agreeing that every rank can go on: %s", what,
                    llmt_comm_last_error(j->comm));
    if (v[0] >= (int64_t)j->world * 256)
        return LLMT_OK;
    return FAIL((llmt_status)(v[0] % 256),
                "%s: rank %d failed (%s; its log says why): every rank stops with it", what,
                (int)(v[0] / 256), llmt_status_string((llmt_status)(v[0] % 256)));
}

/* Every rank's own part of the creation (own_parts: its directory, data,
 * model, trainer, checkpoint store; own_late: its metrics), agreed on
 * before the next collective: a rank that failed it returned alone, and
 * the others waited in the groups' creation, the engine's agreement or
 * the restore until the collective timeout. When every rank failed (a
 * spec error each finds alike, data missing everywhere) each returns its
 * own message, as before; else a failing rank prefixes its rank, and the
 * others fail with the lowest failing rank's status and message,
 * broadcast from it (rank 0's log may be the one read). */
llmt_status llmt__job_agree_own(llmt_job *j, llmt_status mine)
{
    int64_t v[2];
    llmt_status s = lowest_failure(j, mine, v);
    if (s != LLMT_OK)
        return mine != LLMT_OK ? mine
                               : FAIL(s, "job: agreeing that every rank can go on: %s",
                                      llmt_comm_last_error(j->comm));
    if (v[0] >= (int64_t)j->world * 256 || v[1])
        return mine;
    int root = (int)(v[0] / 256);
    llmt_status st = (llmt_status)(v[0] % 256);
    char own[LLMT_ERR_MSG_MAX];
    int32_t w[LLMT_ERR_MSG_MAX / 4] = {0}; /* as int32: no byte broadcast */
    char *why = (char *)w;
    snprintf(own, sizeof own, "%s", mine != LLMT_OK ? j->err.msg : "");
    snprintf(why, sizeof w, "%s", own);
    s = llmt_comm_broadcast(j->comm, w, sizeof w / 4, LLMT_DTYPE_INT32, root, NULL);
    why[sizeof w - 1] = '\0';
    if (mine != LLMT_OK)
        return FAIL(mine, "rank %d: %s", (int)j->rank, own);
    return FAIL(st, "job: rank %d failed (%s): %s; every rank stops with it", root,
                llmt_status_string(st), s == LLMT_OK ? why : "its log says why");
}

llmt_status llmt__job_hashes(llmt_job *j, int shares, int ready, uint64_t *mine, uint64_t **all)
{
    *all = NULL;
    *mine = 0;
    llmt_status s = shares ? LLMT_OK : params_sync(j);
    if (s != LLMT_OK)
        return s; /* collective: the message names the trainer's failure */
    /* from here on alone: whatever fails is agreed on before the gather,
     * which the others would otherwise wait in until its timeout */
    s = shares ? llmt__job_shares_hash(j, mine) : params_walk(j, mine);
    uint64_t *a = calloc((size_t)j->world, sizeof *a);
    const int32_t *grp = llmt__job_replica_groups(j); /* kept: the caller's */
    if (s == LLMT_OK && (!a || !grp || !ready))
        s = FAIL(LLMT_ERR_OUT_OF_MEMORY,
                 "sdc: rank %d has no memory for the check (%d ranks' hashes and replica "
                 "groups)",
                 (int)j->rank, (int)j->world);
    if ((s = llmt__job_agree(j, s, "sdc")) != LLMT_OK) {
        free(a);
        return s;
    }
    s = llmt_comm_all_gather(j->comm, mine, a, 1, LLMT_DTYPE_INT64, NULL);
    if (s != LLMT_OK) {
        free(a);
        return FAIL(s, "sdc: all-gather of the %s hashes: %s", shares ? "share" : "parameter",
                    llmt_comm_last_error(j->comm));
    }
    *all = a;
    return LLMT_OK;
}

/* llmt__job_replica_majorities: each group once, its members, then a
 * majority vote (Boyer-Moore) checked by a count, so the work is the world
 * times the number of groups, not the world cubed. */
void llmt__job_replica_majorities(const uint64_t *all, const int32_t *grp, int32_t world,
                                  int32_t *maj, int32_t *mem)
{
    for (int32_t r = 0; r < world; r++)
        maj[r] = -2; /* not decided yet */
    for (int32_t r = 0; r < world; r++) {
        if (maj[r] != -2)
            continue; /* r's group is decided: r is the first of a new one */
        int32_t n = 0, votes = 0;
        uint64_t cand = 0;
        for (int32_t q = r; q < world; q++)
            if (grp[q] == grp[r])
                mem[n++] = q;
        for (int32_t k = 0; k < n; k++) {
            if (votes == 0)
                cand = all[mem[k]];
            votes += all[mem[k]] == cand ? 1 : -1;
        }
        int32_t same = 0, first = -1;
        for (int32_t k = 0; k < n; k++)
            if (all[mem[k]] == cand) {
                same++;
                if (first < 0)
                    first = mem[k];
            }
        for (int32_t k = 0; k < n; k++)
            maj[mem[k]] = 2 * same > n ? first : -1;
    }
}

/* Rank r disagrees with its replicas: no majority, or not its hash. */
static int disagrees(const uint64_t *all, const int32_t *majr, int32_t r)
{
    return majr[r] < 0 || all[r] != all[majr[r]];
}

int32_t llmt__job_sdc_bad_ranks(llmt__sbuf *s, const uint64_t *all, const int32_t *majr,
                                int32_t world)
{
    int32_t n = 0;
    for (int32_t r = 0; r < world; r++)
        if (disagrees(all, majr, r))
            llmt__sb_printf(s, "%s%d", n++ ? "," : "", (int)r);
    return n;
}

int32_t llmt__job_rank_list(llmt__sbuf *s, const uint8_t *flag, int32_t world)
{
    int32_t n = 0;
    for (int32_t r = 0; r < world; r++)
        if (flag[r])
            llmt__sb_printf(s, "%s%d", n++ ? "," : "", (int)r);
    return n;
}

void llmt__job_hex_list(llmt__sbuf *s, const uint64_t *h, int32_t world)
{
    for (int32_t r = 0; r < world; r++)
        llmt__sb_printf(s, "%s\"%016llx\"", r ? "," : "", (unsigned long long)h[r]);
}

/* Whole items only: a cut number would name a rank that is not bad. */
void llmt__job_list_brief(char *out, size_t cap, const char *list, int shown)
{
    size_t l = 0;
    int kept = 0;
    const char *p = list ? list : "";
    out[0] = 0;
    while (*p && kept < shown) {
        size_t w = strcspn(p, ",");
        if (l + w + 1 + 32 > cap) /* room for this item and " and N more" */
            break;
        if (kept)
            out[l++] = ',';
        memcpy(out + l, p, w);
        out[l += w] = 0;
        kept++;
        p += w + (p[w] == ',');
    }
    long more = *p ? 1 : 0;
    for (const char *q = p; *q; q++)
        more += *q == ',';
    if (more)
        snprintf(out + l, cap - l, "%s%ld more", kept ? " and " : "", more);
}

/* Root's place in its replica group's communicator (the plan's data
 * parallel group; under ep, xdp, its ranks of root's EP rank). */
static llmt_status root_place(llmt_job *j, int32_t root, int xdp, int32_t *at)
{
    int32_t c[LLMT_PLAN_NDIMS] = {0}, rc[LLMT_PLAN_NDIMS] = {0};
    if (xdp)
        llmt_plan_coords(j->plan, root, rc);
    size_t cnt = 0;
    llmt_plan_group(j->plan, LLMT_DIM_DP, root, NULL, 0, &cnt, NULL);
    int32_t *ranks = malloc((cnt ? cnt : 1) * sizeof *ranks);
    if (!ranks)
        return FAIL(LLMT_ERR_OUT_OF_MEMORY, "sdc: repair: rank %d has no memory", (int)j->rank);
    llmt_status ps = llmt_plan_group(j->plan, LLMT_DIM_DP, root, ranks, cnt, &cnt, NULL);
    for (size_t k = 0, pos = 0; ps == LLMT_OK && k < cnt; k++) {
        if (xdp && (llmt_plan_coords(j->plan, ranks[k], c) != LLMT_OK ||
                    c[LLMT_DIM_EP] != rc[LLMT_DIM_EP]))
            continue; /* another EP rank's replica group */
        if (ranks[k] == root)
            *at = (int32_t)pos;
        pos++;
    }
    free(ranks);
    return ps != LLMT_OK ? FAIL(ps, "sdc: repair: %s", llmt_plan_last_error(j->plan)) : LLMT_OK;
}

/* Repair in place: every rank takes the parameters of a healthy replica,
 * `root` (a world rank of its data parallel group: the group's
 * communicator, ordered by the plan as llmt_plan_group lists it). */
static llmt_status take_params_from(llmt_job *j, int32_t root)
{
    int32_t n = 0;
    llmt_model_param_count(j->model, &n, NULL);
    /* the replica group's communicator: the data parallel group, under ep
     * its ranks of root's EP rank (the expert data parallel group, ordered
     * as the data parallel group) */
    llmt_comm *xdp = llmt__trainer_expert_dp_comm(j->tr);
    llmt_comm *rep = xdp ? xdp : j->dp_comm ? j->dp_comm : j->comm;
    int32_t at = root;
    llmt_status s0 = rep != j->comm ? root_place(j, root, xdp != NULL, &at) : LLMT_OK;
    /* every rank repairs: one that cannot is agreed on before the
     * collectives below, which the others would wait in alone */
    if ((s0 = llmt__job_agree(j, s0, "sdc: repair")) != LLMT_OK)
        return s0;
    /* an engine with its own copy (tp, bf16, the GPU) takes the repair
     * only through an upload, which writes the moments too: those must be
     * current on the host first (collective, as every rank repairs) */
    int resident = llmt__trainer_host_resident(j->tr);
    s0 = resident ? LLMT_OK : llmt__trainer_host_sync(j->tr);
    if (s0 != LLMT_OK)
        return FAIL(s0, "sdc: repair: %s", llmt_trainer_last_error(j->tr));
    for (int32_t i = 0; i < n; i++) {
        llmt_tensor v;
        memset(&v, 0, sizeof v);
        v.struct_size = sizeof v;
        llmt_status s = llmt_model_param(j->model, i, NULL, &v);
        if (s != LLMT_OK || !v.data)
            return FAIL(s != LLMT_OK ? s : LLMT_ERR_INTERNAL, "sdc: parameter %d: %s", (int)i,
                        llmt_model_last_error(j->model));
        int64_t e = 1;
        for (int d = 0; d < v.ndim; d++)
            e *= v.shape[d];
        s = llmt_comm_broadcast(rep, v.data, (size_t)e, v.dtype, at, NULL);
        if (s != LLMT_OK)
            return FAIL(s, "sdc: repair from rank %d: %s", (int)root,
                        llmt_comm_last_error(rep));
    }
    if (!resident && (s0 = llmt__trainer_params_written(j->tr, 0)) != LLMT_OK)
        return FAIL(s0, "sdc: repair: %s", llmt_trainer_last_error(j->tr));
    return LLMT_OK;
}

llmt_status llmt__job_sdc(llmt_job *j, int64_t step, llmt_job_metrics *m)
{
    int64_t every = j->spec->fault_tolerance.sdc_interval;
    if (every <= 0 || !j->comm || j->world < 2 || step % every)
        return LLMT_OK;
    if (j->spec->parallelism.zero >= 3) /* no replicas: each rank replays its shares */
        return llmt__job_sdc_shares(j, step, m);
    double t0 = llmt__job_now();
    uint64_t mine = 0, *all = NULL;
    /* the vote's scratch before the gather: a rank without it is agreed on there */
    int32_t *majr = malloc(2 * (size_t)j->world * sizeof *majr);
    llmt_status s = llmt__job_hashes(j, 0, majr != NULL, &mine, &all);
    if (s != LLMT_OK) {
        free(majr);
        return s;
    }
    j->sdc_checks++;
    /* each replica group's majority hash: held by more than half of it
     * (the groups were made by llmt__job_hashes) */
    const int32_t *grp = llmt__job_replica_groups(j);
    llmt__job_replica_majorities(all, grp, j->world, majr, majr + j->world);
    /* every bad rank for the metrics line (tooling reads the array as all
     * of them), the first few for the log and the error */
    llmt__sbuf bad = {0};
    int32_t nbad = llmt__job_sdc_bad_ranks(&bad, all, majr, j->world);
    int repairable = 1;
    int32_t maj = -1, first = -1, others = 0; /* the first bad rank's group */
    for (int32_t r = 0; r < j->world; r++)
        if (disagrees(all, majr, r)) {
            if (first < 0) {
                first = r;
                maj = majr[r];
                for (int32_t q = 0; q < j->world; q++)
                    others += grp[q] == grp[r] && q != r;
            }
            repairable &= majr[r] >= 0;
        }
    int32_t my_root = majr[j->rank];
    free(majr);
    /* a list that could not grow: no metrics line (a short one would be
     * read as every bad rank), but the check goes on here as on every
     * other rank, whose repair, replay or restore is collective */
    char brief[320];
    if (bad.oom)
        snprintf(brief, sizeof brief, "%d rank(s) (no memory for their list)", (int)nbad);
    else
        llmt__job_list_brief(brief, sizeof brief, bad.p, 32);
    if (!nbad) {
        llmt__job_metrics_line(j,
                               "{\"event\":\"sdc\",\"step\":%lld,\"ok\":true,"
                               "\"ranks\":%d,\"xxh\":\"%016llx\"}",
                               (long long)step, (int)j->world, (unsigned long long)mine);
        free(all);
        free(bad.p);
        j->gp_checks_s += llmt__job_now() - t0;
        return LLMT_OK;
    }
    j->sdc_mismatches++;
    m->events |= LLMT_JOB_EVENT_ANOMALY;
    j->anomalies++;
    int policy = j->spec->fault_tolerance.anomaly.policy;
    char ev[1024];
    if (repairable)
        snprintf(ev, sizeof ev,
                 "rank(s) %s hold parameters whose xxh64 differs from the majority of "
                 "their replicas (rank %d's %d other replica(s): %016llx; rank %d's own: "
                 "%016llx)",
                 brief, (int)first, (int)others, (unsigned long long)all[maj], (int)j->rank,
                 (unsigned long long)mine);
    else
        snprintf(ev, sizeof ev,
                 "no majority among the replicas of rank(s) %s: they all disagree "
                 "(rank %d's xxh64 %016llx)",
                 brief, (int)j->rank, (unsigned long long)mine);
    /* deterministic: run it again to see whose result does not reproduce */
    int replayed = 0, nrep = 0;
    int64_t from = -1;
    if (j->to.deterministic &&
        (s = llmt__job_sdc_replay(j, step, all, &replayed, &nrep, &from)) != LLMT_OK) {
        free(all);
        free(bad.p);
        return s;
    }
    free(all);
    const char *action;
    int64_t back = -1;
    if (replayed) {
        action = "replayed"; /* the replays agree: the run goes on from them */
    } else if (policy == LLMT_SPEC_ANOMALY_STOP) {
        action = "stop";
    } else if (policy == LLMT_SPEC_ANOMALY_ROLLBACK || !repairable) {
        /* every rank reloads the same checkpoint: equal again */
        s = llmt__job_restore(j, 0, &back);
        if (s != LLMT_OK) {
            free(bad.p);
            return s;
        }
        action = back >= 0 ? "rollback" : "stop";
        if (back >= 0) {
            j->rollbacks++;
            m->events |= LLMT_JOB_EVENT_ROLLBACK;
            m->step = back;
            /* the anomaly windows: the checkpoint's (ckpt.c) */
        }
    } else {
        s = take_params_from(j, my_root); /* each group from its own majority */
        if (s != LLMT_OK) {
            free(bad.p);
            return s;
        }
        action = "repaired";
    }
    llmt__log(j->ctx, LLMT_LOG_WARN, "job", "sdc: silent data corruption at step %lld: %s: %s",
              (long long)step, ev, action);
    if (bad.oom)
        llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                  "metrics: no memory for the list of %d bad ranks at step %lld: the sdc "
                  "line is not written",
                  (int)nbad, (long long)step);
    else
        llmt__job_metrics_line(j,
                               "{\"event\":\"sdc\",\"step\":%lld,\"ok\":false,\"ranks\":%d,"
                               "\"bad_ranks\":[%s],\"majority_rank\":%d,\"action\":\"%s\","
                               "\"now_at\":%lld,\"xxh\":\"%016llx\"}",
                               (long long)step, (int)j->world, bad.p, (int)maj, action,
                               (long long)(back >= 0 ? back : step), (unsigned long long)mine);
    free(bad.p);
    j->gp_checks_s += llmt__job_now() - t0;
    if (!strcmp(action, "stop"))
        return FAIL(LLMT_ERR_NUMERIC,
                    "sdc: silent data corruption at step %lld: %s "
                    "(fault_tolerance.anomaly.policy %s%s)",
                    (long long)step, ev, policy == LLMT_SPEC_ANOMALY_STOP ? "stop" : "rollback",
                    policy == LLMT_SPEC_ANOMALY_STOP ? "" : ": no checkpoint to go back to");
    return LLMT_OK;
}

/* Straggler lines rank 0 logs per report; the rest in one line. */
#define STRAG_LOGGED 8

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

llmt_status llmt__job_straggler(llmt_job *j, int64_t step, double step_s, double comm_s)
{
    const llmt_spec *sp = j->spec;
    /* one all-gather serves both the straggler report and the run-level
     * stream of the split (perf.c): at the report's interval when set */
    int detect = sp->fault_tolerance.straggler.interval > 0;
    int64_t every = llmt__job_obs_interval(j);
    if (every <= 0 || !j->comm || j->world < 2)
        return LLMT_OK;
    double busy = step_s - comm_s;
    j->strag_busy += busy > 0 ? busy : 0;
    j->strag_wall += step_s;
    j->strag_steps++;
    if (step % every)
        return LLMT_OK;
    double t0 = llmt__job_now();
    double ns = (double)(j->strag_steps ? j->strag_steps : 1);
    enum { W = 2 + JOB_AGG_FIELDS };
    float mine[W] = {(float)(j->strag_busy / ns), (float)(j->strag_wall / ns)};
    for (int f = 0; f < JOB_AGG_FIELDS; f++)
        mine[2 + f] = j->agg_steps ? (float)(j->agg[f] / (double)j->agg_steps) : 0.0f;
    j->strag_busy = j->strag_wall = 0;
    j->strag_steps = 0;
    float *all = calloc((size_t)j->world * W, sizeof *all);
    double *sorted = calloc((size_t)j->world, sizeof *sorted);
    /* a rank without them says so to every rank first: returning alone
     * left the others in the all-gather until its timeout */
    llmt_status s = all && sorted ? LLMT_OK
                                  : FAIL(LLMT_ERR_OUT_OF_MEMORY,
                                         "straggler: rank %d has no memory for the report "
                                         "at step %lld (%d ranks' step times)",
                                         (int)j->rank, (long long)step, (int)j->world);
    if ((s = llmt__job_agree(j, s, "straggler")) == LLMT_OK &&
        (s = llmt_comm_all_gather(j->comm, mine, all, W, LLMT_DTYPE_FP32, NULL)) != LLMT_OK)
        FAIL(s, "straggler: all-gather of the step times: %s", llmt_comm_last_error(j->comm));
    if (s != LLMT_OK) {
        free(all);
        free(sorted);
        return s;
    }
    /* the lower median: with two ranks, the faster one */
    for (int32_t r = 0; r < j->world; r++)
        sorted[r] = all[W * r];
    qsort(sorted, (size_t)j->world, sizeof *sorted, cmp_double);
    double med = sorted[(j->world - 1) / 2];
    for (int32_t r = 0; r < j->world; r++)
        sorted[r] = all[W * r + 1];
    qsort(sorted, (size_t)j->world, sizeof *sorted, cmp_double);
    double med_step = sorted[(j->world - 1) / 2];
    free(sorted);
    if (!detect) {
        llmt__job_obs_run_line(j, step - 1, all + 2, j->world, W, "");
        free(all);
        j->gp_checks_s += llmt__job_now() - t0;
        return LLMT_OK;
    }
    /* every named rank: the run line's "stragglers" array is read as all of them */
    llmt__sbuf named_list = {0};
    int32_t nnamed = 0;
    double margin = sp->fault_tolerance.straggler.margin;
    int64_t patience = sp->fault_tolerance.straggler.patience;
    int32_t failed = -1, slowest_rank = -1;
    double worst = 0, slowest = 0;
    /* everyone's step waited for the slowest rank: without it a step
     * would take `healthy`, and this rank alone healthy + extra */
    double worst_extra = 0;
    for (int32_t r = 0; r < j->world; r++)
        worst_extra = fmax(worst_extra, all[W * r] - med);
    double healthy = fmax(med_step - worst_extra, med); /* floor: the median's busy */
    for (int32_t r = 0; r < j->world; r++) {
        double extra = all[W * r] - med;
        double slow = healthy > 0 ? (healthy + extra) / healthy : 1;
        int named = extra > margin * med_step;
        j->strag_streak[r] = named ? j->strag_streak[r] + 1 : 0;
        if (!named)
            continue;
        j->stragglers++;
        llmt__sb_printf(&named_list, "%s%d", nnamed++ ? "," : "", (int)r);
        /* rank 0 names the first few (a slow rack at 16k ranks is
         * thousands: one summary line for the rest), each rank itself */
        if ((j->rank == 0 && nnamed <= STRAG_LOGGED) || r == j->rank)
            llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                      "straggler: rank %d is %.2fx slower than the median at step %lld: "
                      "busy %.4f s/step vs the median rank's %.4f s (+%.4f s; step %.4f s, "
                      "%.4f s without it) "
                      "over the last %lld steps; margin %.0f%% of a step; %d report(s) in "
                      "a row%s",
                      (int)r, slow, (long long)step, (double)all[W * r], med, extra, med_step,
                      healthy, (long long)every, 100 * margin, (int)j->strag_streak[r],
                      patience > 0 && j->strag_streak[r] >= patience ? ": treated as failed"
                                                                     : "");
        llmt__job_metrics_line(
            j,
            "{\"event\":\"straggler\",\"step\":%lld,\"rank\":%d,"
            "\"busy_s\":%.6f,\"median_busy_s\":%.6f,\"extra_s\":%.6f,"
            "\"step_s\":%.6f,\"healthy_step_s\":%.6f,\"slowdown\":%.3f,\"streak\":%d,"
            "\"patience\":%lld}",
            (long long)step, (int)r, (double)all[W * r], med, extra, med_step, healthy, slow,
            (int)j->strag_streak[r], (long long)patience);
        if (patience > 0 && j->strag_streak[r] >= patience && slow > worst) {
            worst = slow;
            failed = r;
        }
        if (slow > slowest) {
            slowest = slow;
            slowest_rank = r;
        }
    }
    if (j->rank == 0 && nnamed > STRAG_LOGGED)
        llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                  "straggler: and %d more rank(s) slower than the median at step %lld "
                  "(%d in all; the slowest: rank %d, %.2fx): every one in metrics.jsonl's "
                  "\"straggler\" events and run.jsonl's \"stragglers\"",
                  (int)(nnamed - STRAG_LOGGED), (long long)step, (int)nnamed, (int)slowest_rank,
                  slowest);
    if (named_list.oom) /* no line rather than a short list read as the whole one */
        llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                  "run.jsonl: no memory for the list of %d stragglers at step %lld: the "
                  "run line is not written",
                  (int)nnamed, (long long)step);
    else
        llmt__job_obs_run_line(j, step - 1, all + 2, j->world, W,
                               named_list.p ? named_list.p : "");
    free(named_list.p);
    free(all);
    j->gp_checks_s += llmt__job_now() - t0;
    if (failed < 0)
        return LLMT_OK;
    if (failed == j->rank)
        return FAIL(LLMT_ERR_TIMEOUT,
                    "straggler: this rank (%d) was %.2fx slower than the "
                    "median in %lld reports in a row up to step %lld "
                    "(fault_tolerance.straggler.patience): treated as failed",
                    (int)failed, worst, (long long)patience, (long long)step);
    return FAIL(LLMT_ERR_ABORTED,
                "straggler: rank %d was %.2fx slower than the median in "
                "%lld reports in a row up to step %lld: treated as failed; rank %d stops "
                "with the gang",
                (int)failed, worst, (long long)patience, (long long)step, (int)j->rank);
}
