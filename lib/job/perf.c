/* Where a step's time went (doc/observability.md). run.c marks the step's
 * phases; the engine's ops are timed by lib/obs's op table and the
 * collectives' exposed time by each communicator, so the split is
 * measured, not derived: what none of them covers (the trainer's own
 * host time between ops) is reported as unaccounted instead of being
 * folded into a part. Realized MFU divides the planner's model FLOPs
 * (the same formula llmtrain plan predicts with) by the step's wall time
 * and the peak of the devices: a GPU's from the hardware table, the
 * CPU's measured by a GEMM when the job starts (calibration line in
 * metrics.jsonl). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exec/dev.h"
#include "job/job.h"
#include "train/trainer_state.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

static const char *const group_names[] = {"dp", "tp", "pp", "cp", "ep"};

LLMT_API llmt_status llmt_job_obs_opts_init(llmt_job_obs_opts *opts, size_t size)
{
    llmt_job_obs_opts d = {0};
    return llmt__opts_init(opts, size, 0, &d, sizeof d, "llmt_job_obs_opts");
}

/* The textfile a caller named, for this rank: rank 0 writes it as named,
 * rank r > 0 beside it with ".rank<r>" before a ".prom" suffix (the
 * collector reads *.prom only). Every rank writing one file would keep
 * only the last writer's numbers, and their shared FILE.tmp could rename
 * a file another rank was half way through. */
static void prom_path_of_rank(llmt_job *j, const char *path)
{
    size_t n = strlen(path), ext = strlen(".prom");
    int has_ext = n > ext && !strcmp(path + n - ext, ".prom");
    if (j->rank <= 0)
        snprintf(j->prom_path, sizeof j->prom_path, "%s", path);
    else
        snprintf(j->prom_path, sizeof j->prom_path, "%.*s.rank%d%s",
                 (int)(has_ext ? n - ext : n), path, (int)j->rank, has_ext ? ".prom" : "");
}

LLMT_API llmt_status llmt_job_set_obs(llmt_job *j, const llmt_job_obs_opts *opts)
{
    if (!j)
        return LLMT_ERR_NULL_POINTER;
    if (j->obs_started)
        return FAIL(LLMT_ERR_STATE, "job: set_obs after the first step: set it before");
    llmt_job_obs_opts o;
    llmt_job_obs_opts_init(&o, sizeof o);
    if (opts) {
        llmt_status s = llmt__opts_copy(&j->err, "llmt_job_obs_opts", &o, sizeof o, opts);
        if (s != LLMT_OK)
            return s;
    }
    o.struct_size = sizeof o;
    if (o.trace_first < 0 || o.trace_last < o.trace_first || o.aggregate_interval < 0 ||
        o.op_timing < -1 || o.op_timing > 0)
        return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                    "job: trace steps %lld..%lld (1-based, first <= last), "
                    "aggregate_interval %d (>= 0) or op_timing %d (0 or -1) invalid",
                    (long long)o.trace_first, (long long)o.trace_last,
                    (int)o.aggregate_interval, (int)o.op_timing);
    if (o.trace_first == 0 && o.trace_last > 0)
        o.trace_first = 1;
    const char *dir = o.trace_dir && o.trace_dir[0] ? o.trace_dir : j->run_dir;
    if (o.trace_last > 0) {
        if (llmt__job_mkdir_p(dir) != 0)
            return FAIL(LLMT_ERR_IO, "job: trace directory %s: %s", dir, strerror(errno));
        snprintf(j->trace_path, sizeof j->trace_path, "%s/trace-rank%d.json", dir,
                 (int)j->rank);
    } else {
        j->trace_path[0] = 0;
    }
    if (!o.prom_path)
        snprintf(j->prom_path, sizeof j->prom_path, "%s/metrics.prom", j->run_dir);
    else
        prom_path_of_rank(j, o.prom_path);
    o.trace_dir = o.prom_path = NULL; /* not kept: the caller's strings */
    llmt__obs_op_timing(j->obs, o.op_timing == 0);
    j->obs_opts = o;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_job_get_perf(const llmt_job *j, llmt_job_perf *out)
{
    if (!j || !out)
        return LLMT_ERR_NULL_POINTER;
    if (out->struct_size < sizeof(size_t))
        return LLMT_ERR_STRUCT_SIZE;
    size_t keep = out->struct_size;
    memcpy(out, &j->perf, keep < sizeof j->perf ? keep : sizeof j->perf);
    out->struct_size = keep;
    return LLMT_OK;
}

llmt_status llmt__job_trainer_create(llmt_job *j)
{
    llmt_status s = llmt__obs_create(&j->obs);
    if (s != LLMT_OK)
        return FAIL(s, "job: no memory");
    j->prom_path[0] = 0;
    snprintf(j->prom_path, sizeof j->prom_path, "%s/metrics.prom", j->run_dir);
    snprintf(j->run_jsonl_path, sizeof j->run_jsonl_path, "%s/run.jsonl", j->root_dir);
    return llmt__obs_trainer_create(j->obs, j->model, &j->to, llmt__job_dev_table(j), &j->tr,
                                    &j->obs_timed);
}

const struct llmt__dev_ops *llmt__job_dev_table(const llmt_job *j)
{
    return j->spec->train.device == LLMT_SPEC_DEVICE_EMULATED ? llmt__dev_emul_staged() : NULL;
}

void llmt__job_obs_free(llmt_job *j)
{
    llmt__obs_destroy(j->obs);
    j->obs = NULL;
}

int64_t llmt__job_obs_interval(const llmt_job *j)
{
    int64_t s = j->spec->fault_tolerance.straggler.interval;
    if (s > 0)
        return s;
    return j->obs_opts.aggregate_interval > 0 ? j->obs_opts.aggregate_interval : 10;
}

llmt_status llmt__job_obs_start(llmt_job *j)
{
    if (j->obs_started)
        return LLMT_OK;
    j->obs_started = 1;
    /* group_comm[] was filled when the groups were made (job.c) */
    llmt_plan_estimate e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    if (llmt_plan_get_estimate(j->plan, &e) == LLMT_OK) {
        j->hw_flops_per_step = e.hw_flops_per_step;
        j->tokens_per_step = (double)e.tokens_per_step;
        /* what llmtrain plan predicts, for the report to set beside */
        llmt__job_metrics_line(j,
                               "{\"event\":\"plan\",\"rank\":%d,\"step_time_s\":%.6g,"
                               "\"mfu\":%.6g,\"mem_total\":%.6g,\"tokens_per_s\":%.6g,"
                               "\"time_compute_s\":%.6g,\"time_dp_s\":%.6g,"
                               "\"time_optimizer_s\":%.6g,\"hardware\":\"%s\"}",
                               (int)j->rank, e.step_time_s, e.mfu, e.mem_total, e.tokens_per_s,
                               e.time_compute_s, e.time_dp_s, e.time_optimizer_s,
                               j->spec->hardware.gpu ? j->spec->hardware.gpu : "");
    }
    const char *source = "hardware.peak_tflops";
    double cal_s = 0;
    if (j->to.device == LLMT_DEVICE_CUDA) {
        j->peak_device = j->spec->hardware.peak_tflops * 1e12;
    } else {
        j->peak_device = llmt__obs_calibrate_cpu(512, &cal_s);
        source = "cpu_gemm_calibration";
        if (!(j->peak_device > 0)) {
            j->peak_device = j->spec->hardware.peak_tflops * 1e12;
            source = "hardware.peak_tflops (calibration failed)";
        }
    }
    llmt__job_metrics_line(j,
                           "{\"event\":\"calibration\",\"rank\":%d,\"peak_flops\":%.6g,"
                           "\"source\":\"%s\",\"gemm\":512,\"seconds\":%.4f,\"threads\":%d,"
                           "\"model_flops_per_step\":%.6g,\"hw_flops_per_step\":%.6g,"
                           "\"tokens_per_step\":%.0f,\"world\":%d,\"timed_ops\":%s}",
                           (int)j->rank, j->peak_device, source, cal_s, (int)j->to.threads,
                           j->flops_per_step, j->hw_flops_per_step, j->tokens_per_step,
                           (int)j->world,
                           j->obs_timed && j->obs_opts.op_timing == 0 ? "true" : "false");
    if (j->trace_path[0]) {
        char err[JOB_PATH_MAX + 64];
        llmt_status s = llmt__obs_trace_open(j->obs, j->trace_path, j->rank, err, sizeof err);
        if (s != LLMT_OK)
            return FAIL(s, "%s", err);
    }
    return LLMT_OK;
}

void llmt__job_obs_before(llmt_job *j, int64_t step)
{
    int on = llmt__obs_trace_is_open(j->obs) && step >= j->obs_opts.trace_first &&
             step <= j->obs_opts.trace_last;
    if (on && !llmt__obs_tracing(j->obs)) /* skip what ran before */
        for (int g = 0; g < LLMT_JOB_GROUPS && g < 5; g++)
            llmt__obs_trace_comm(j->obs, j->group_comm[g], g, group_names[g]);
    llmt__obs_trace_on(j->obs, on);
    if (!on && llmt__obs_trace_is_open(j->obs) && step > j->obs_opts.trace_last)
        llmt__obs_trace_close(j->obs);
}

void llmt__job_obs_mark(llmt_job *j, job_marks *k, int which)
{
    /* context parallel attention's block ops are the op table's too (dev.h
     * attn_cp_*), timed with the others */
    llmt__obs_op_seconds(j->obs, which ? k->op1 : k->op0);
    double *c = which ? k->comm1 : k->comm0;
    for (int g = 0; g < LLMT_JOB_GROUPS; g++)
        c[g] = llmt__comm_exposed_s(j->group_comm[g]);
    /* the data parallel code's own host time around its collectives
     * (issuing them, giving ZeRO-3 pages back) is part of what data
     * parallelism cost this rank outside the engine's ops */
    c[LLMT_JOB_GROUP_DP] += llmt__trainer_dp_host_s(j->tr);
}

static void memory(llmt_job *j, llmt_job_perf *p)
{
    llmt_trainer_memory mem;
    memset(&mem, 0, sizeof mem);
    mem.struct_size = sizeof mem;
    if (llmt_trainer_memory_usage(j->tr, &mem) != LLMT_OK)
        return;
    if (j->spec->train.device != LLMT_SPEC_DEVICE_CPU) { /* the device engine's allocator */
        p->mem_in_use = mem.device_in_use;
        p->mem_peak = mem.device_peak;
    } else {
        p->mem_in_use = mem.total;
        if (mem.total > j->mem_peak)
            j->mem_peak = mem.total;
        p->mem_peak = j->mem_peak;
    }
}

static void trace_step(llmt_job *j, const job_marks *k, int64_t step)
{
    llmt__obs *o = j->obs;
    char a[64];
    snprintf(a, sizeof a, "\"step\":%lld", (long long)step);
    double u_end = llmt__obs_unix_s();
    llmt__obs_trace_span(o, "step", "step", LLMT__TID_STEP, k->u_begin, u_end, a);
    llmt__obs_trace_span(o, "data", "data", LLMT__TID_STEP, k->u_begin, k->u_data, a);
    llmt__obs_trace_span(o, "train_step", "compute", LLMT__TID_STEP, k->u_step0, k->u_step1, a);
    if (k->u_save1 - k->u_save0 > 1e-6)
        llmt__obs_trace_span(o, "checkpoint", "ckpt", LLMT__TID_STEP, k->u_save0, k->u_save1,
                             a);
    for (int g = 0; g < 5; g++)
        llmt__obs_trace_comm(o, j->group_comm[g], g, group_names[g]);
    llmt__obs_trace_flush(o);
}

llmt_status llmt__job_obs_step(llmt_job *j, const job_marks *k, const llmt_job_metrics *m)
{
    llmt_job_perf *p = &j->perf;
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->step = m->step;
    p->wall_s = k->t_end - k->t_begin;
    p->model_flops = j->flops_per_step;
    p->hw_flops = j->hw_flops_per_step;
    p->peak_flops = j->peak_device;
    double peak = j->peak_device * (double)(j->world > 0 ? j->world : 1);
    if (p->wall_s > 0 && peak > 0) {
        p->mfu = p->model_flops / p->wall_s / peak;
        p->hfu = p->hw_flops / p->wall_s / peak;
    }
    p->tokens_per_s = p->wall_s > 0 ? j->tokens_per_step / p->wall_s : 0;
    double in_step = k->t_step1 - k->t_step0;
    p->compute_s = k->op1[LLMT__OBS_COMPUTE] - k->op0[LLMT__OBS_COMPUTE];
    p->optimizer_s = k->op1[LLMT__OBS_OPTIMIZER] - k->op0[LLMT__OBS_OPTIMIZER];
    double comm = 0;
    for (int g = 0; g < LLMT_JOB_GROUPS; g++) {
        p->comm_s[g] = k->comm1[g] - k->comm0[g];
        comm += p->comm_s[g];
    }
    /* the pipeline's bubble: its stage's waits in the activation and
     * gradient receives, which the PP group's exposed time counted */
    llmt_pp_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.struct_size = sizeof ps;
    if (j->pp > 1 && llmt_trainer_pp_stats(j->tr, &ps) == LLMT_OK) {
        double pp = p->comm_s[LLMT_JOB_GROUP_PP];
        p->bubble_s = ps.idle_seconds < pp ? ps.idle_seconds : pp;
        p->bubble_cpu = ps.bubble_cpu;
        p->comm_s[LLMT_JOB_GROUP_PP] = pp - p->bubble_s;
        comm -= p->bubble_s;
    }
    p->data_s = k->t_data - k->t_begin;
    p->ckpt_s = k->t_save1 - k->t_save0;
    p->other_s = p->wall_s - p->data_s - in_step - p->ckpt_s;
    p->unaccounted_s = in_step - p->compute_s - p->optimizer_s - comm - p->bubble_s;
    memory(j, p);

    double other_comm = p->comm_s[LLMT_JOB_GROUP_TP] + p->comm_s[LLMT_JOB_GROUP_PP] +
                        p->comm_s[LLMT_JOB_GROUP_CP] + p->comm_s[LLMT_JOB_GROUP_EP];
    if (!j->agg_steps)
        j->agg_first = p->step;
    double v[JOB_AGG_FIELDS] = {p->wall_s,    p->compute_s, p->optimizer_s,
                                p->comm_s[0], other_comm,   p->data_s,
                                p->ckpt_s,    p->other_s,   p->mfu};
    for (int f = 0; f < JOB_AGG_FIELDS; f++)
        j->agg[f] += v[f];
    j->agg_steps++;

    llmt__job_metrics_line(
        j,
        "{\"event\":\"perf\",\"step\":%lld,\"rank\":%d,\"wall_s\":%.6f,\"mfu\":%.6g,"
        "\"hfu\":%.6g,\"tokens_per_s\":%.1f,\"model_flops\":%.6g,\"hw_flops\":%.6g,"
        "\"peak_flops\":%.6g,\"compute_s\":%.6f,\"optimizer_s\":%.6f,"
        "\"comm_s\":{\"dp\":%.6f,\"tp\":%.6f,\"pp\":%.6f,\"cp\":%.6f,\"ep\":%.6f},"
        "\"bubble_s\":%.6f,\"data_s\":%.6f,\"ckpt_s\":%.6f,\"other_s\":%.6f,"
        "\"unaccounted_s\":%.6f,\"mem_in_use\":%lld,\"mem_peak\":%lld}",
        (long long)p->step, (int)j->rank, p->wall_s, p->mfu, p->hfu, p->tokens_per_s,
        p->model_flops, p->hw_flops, p->peak_flops, p->compute_s, p->optimizer_s, p->comm_s[0],
        p->comm_s[1], p->comm_s[2], p->comm_s[3], p->comm_s[4], p->bubble_s, p->data_s,
        p->ckpt_s, p->other_s, p->unaccounted_s, (long long)p->mem_in_use,
        (long long)p->mem_peak);
    if (llmt__obs_tracing(j->obs))
        trace_step(j, k, p->step);
    /* one rank alone gathers nothing: its line is written here */
    if ((!j->comm || j->world < 2) && p->step % llmt__job_obs_interval(j) == 0) {
        float mine[JOB_AGG_FIELDS];
        for (int f = 0; f < JOB_AGG_FIELDS; f++)
            mine[f] = (float)(j->agg[f] / (double)j->agg_steps);
        llmt__job_obs_run_line(j, p->step, mine, 1, JOB_AGG_FIELDS, "");
    }
    int64_t steps = llmt__obs_count_step(j->obs);
    if (j->prom_path[0]) {
        char err[JOB_PATH_MAX + 64];
        if (llmt__obs_prom_write(j->prom_path, j->rank, steps, p, m, err, sizeof err) !=
            LLMT_OK)
            llmt__log(j->ctx, LLMT_LOG_WARN, "job", "%s", err);
    }
    llmt__obs_serve_update(j->obs, p, m); /* metrics.http, when it serves */
    return LLMT_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void llmt__job_obs_run_line(llmt_job *j, int64_t step, const float *all, int32_t ranks,
                            int stride, const char *stragglers)
{
    int64_t from = j->agg_first, n = j->agg_steps;
    memset(j->agg, 0, sizeof j->agg);
    j->agg_steps = 0;
    if (j->rank != 0 || ranks < 1)
        return;
    FILE *f = fopen(j->run_jsonl_path, "a");
    if (!f) {
        llmt__log(j->ctx, LLMT_LOG_WARN, "job", "run.jsonl: open %s: %s", j->run_jsonl_path,
                  strerror(errno));
        return;
    }
    static const char *const names[JOB_AGG_FIELDS] = {
        "step_s", "compute_s", "optimizer_s", "comm_dp_s", "comm_other_s",
        "data_s", "ckpt_s",    "other_s",     "mfu"};
    double *v = malloc((size_t)ranks * sizeof *v);
    if (!v) {
        fclose(f);
        return;
    }
    fprintf(f, "{\"step\":%lld,\"steps_from\":%lld,\"steps\":%lld,\"ranks\":%d",
            (long long)step, (long long)from, (long long)n, (int)ranks);
    /* the slowest rank is the busiest: everyone's wall time waits for it,
     * the others' wait shows as their exposed communication */
    int32_t slowest = 0;
    double most = -1;
    for (int32_t r = 0; r < ranks; r++) {
        const float *x = all + r * stride;
        double busy = x[JOB_AGG_WALL] - x[JOB_AGG_COMM_DP] - x[JOB_AGG_COMM_OTHER];
        if (busy > most) {
            most = busy;
            slowest = r;
        }
    }
    for (int fi = 0; fi < JOB_AGG_FIELDS; fi++) {
        for (int32_t r = 0; r < ranks; r++)
            v[r] = all[r * stride + fi];
        qsort(v, (size_t)ranks, sizeof *v, cmp_double);
        /* of an even count the mean of the middle two (v[(n-1)/2] alone
         * made two ranks' median their minimum) */
        double med = ranks % 2 ? v[ranks / 2] : 0.5 * (v[ranks / 2 - 1] + v[ranks / 2]);
        fprintf(f, ",\"%s\":{\"min\":%.6g,\"median\":%.6g,\"max\":%.6g}", names[fi], v[0], med,
                v[ranks - 1]);
    }
    fprintf(f, ",\"slowest_rank\":%d,\"per_rank_step_s\":[", (int)slowest);
    for (int32_t r = 0; r < ranks; r++)
        fprintf(f, "%s%.6g", r ? "," : "", (double)all[r * stride + JOB_AGG_WALL]);
    fprintf(f, "],\"per_rank_compute_s\":[");
    for (int32_t r = 0; r < ranks; r++)
        fprintf(f, "%s%.6g", r ? "," : "", (double)all[r * stride + JOB_AGG_COMPUTE]);
    fprintf(f, "],\"per_rank_comm_s\":[");
    for (int32_t r = 0; r < ranks; r++)
        fprintf(
            f, "%s%.6g", r ? "," : "",
            (double)(all[r * stride + JOB_AGG_COMM_DP] + all[r * stride + JOB_AGG_COMM_OTHER]));
    fprintf(f, "],\"stragglers\":[%s]}\n", stragglers ? stragglers : "");
    free(v);
    fclose(f);
}
