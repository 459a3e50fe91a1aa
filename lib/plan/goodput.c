/* Monte-Carlo goodput: a run of `work` seconds of training under
 * exponentially distributed failures (rate = GPUs x per-GPU rate), with a
 * checkpoint every `interval` seconds of work that stalls training `stall`
 * seconds and becomes durable `write` seconds later (async), and a restart
 * (+ restore) after each failure that rolls back to the newest durable
 * checkpoint. Failures may hit a restart too. Deterministic for a seed. */
#include <math.h>
#include <string.h>

#include "plan/plan.h"

LLMT_API llmt_status llmt_goodput_opts_init(llmt_goodput_opts *opts, size_t size)
{
    llmt_goodput_opts d = {0};
    d.stall_s = d.write_s = d.restore_s = d.restart_s = -1;
    d.trials = 32;
    d.sweep_points = 41;
    return llmt__opts_init(opts, size, 0, &d, sizeof d, "llmt_goodput_opts");
}

typedef struct sim_params {
    double work, interval, stall, write, restart, rate;
} sim_params;

typedef struct sim_out {
    double wall, lost, stalls, restarts, failures;
    double done; /* work completed (less than the run when cut short) */
} sim_out;

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double expo(uint64_t *s, double rate)
{
    double u = (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0);
    return -log1p(-u) / rate;
}

/* One simulated run. */
static void simulate(const sim_params *p, uint64_t seed, sim_out *o)
{
    memset(o, 0, sizeof *o);
    uint64_t s = seed;
    double done = 0; /* durable progress, seconds of work */
    double tau = p->interval, C = p->stall, cyc = tau + C;
    /* Guard: a run that can never finish (failures faster than progress)
     * stops after this many failures, or after 100x its work in wall time,
     * and reports what it reached. */
    const double max_failures = 1e5;
    while (done < p->work) {
        double rem = p->work - done;
        double nck = ceil(rem / tau) - 1; /* checkpoints before the end */
        if (nck < 0)
            nck = 0;
        double t_fin = rem + nck * C;
        double x = p->rate > 0 ? expo(&s, p->rate) : INFINITY;
        if (x >= t_fin) {
            o->wall += t_fin;
            o->stalls += nck * C;
            done = p->work;
            break;
        }
        /* Failure x seconds into this up-period. */
        double j = floor(x / cyc);
        double into = x - j * cyc;
        double worked = j * tau + fmin(tau, into);
        o->stalls += j * C + fmax(0, into - tau);
        double k = floor((x - p->write) / cyc); /* durable checkpoints */
        if (k < 0)
            k = 0;
        if (k * tau > rem)
            k = floor(rem / tau);
        o->lost += worked - k * tau;
        done += k * tau;
        o->wall += x;
        o->failures++;
        /* Restart (+restore); a failure during it starts it over. */
        for (;;) {
            double y = p->rate > 0 ? expo(&s, p->rate) : INFINITY;
            if (y >= p->restart) {
                o->wall += p->restart;
                o->restarts += p->restart;
                break;
            }
            o->wall += y;
            o->restarts += y;
            o->failures++;
            if (o->failures > max_failures || o->wall > 100 * p->work)
                break; /* restarts never complete: give up */
        }
        if (o->failures > max_failures || o->wall > 100 * p->work)
            break;
    }
    o->done = done;
}

static void run_trials(const sim_params *p, uint64_t seed, int trials,
                       double *mean, double *sd, sim_out *avg)
{
    double sum = 0, sum2 = 0;
    memset(avg, 0, sizeof *avg);
    for (int t = 0; t < trials; t++) {
        sim_out o;
        /* Trial t uses the same stream for every interval (common random
         * numbers), so the sweep compares intervals, not luck. */
        uint64_t ts = seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(t + 1));
        simulate(p, ts, &o);
        double g = o.wall > 0 ? o.done / o.wall : 1;
        sum += g;
        sum2 += g * g;
        avg->wall += o.wall / trials;
        avg->lost += o.lost / trials;
        avg->stalls += o.stalls / trials;
        avg->restarts += o.restarts / trials;
        avg->failures += o.failures / trials;
    }
    *mean = sum / trials;
    double var = sum2 / trials - *mean * *mean;
    *sd = var > 0 ? sqrt(var) : 0;
}

/* The doubles of the options: 0 means "the spec's / the plan's" for the
 * rate, the interval and the horizon, and a negative cost means the plan's;
 * anything else that is not a finite number is refused, naming the field
 * (a negative rate or a NaN horizon used to fall back to the default). */
static llmt_status check_opts(llmt_err *e, const llmt_goodput_opts *o)
{
    const struct {
        const char *name;
        double v;
        int neg_ok; /* a negative value has a meaning: the plan's */
    } f[] = {
        {"gpu_failures_per_hour", o->gpu_failures_per_hour, 0},
        {"interval_s", o->interval_s, 0},
        {"horizon_hours", o->horizon_hours, 0},
        {"stall_s", o->stall_s, 1},
        {"write_s", o->write_s, 1},
        {"restore_s", o->restore_s, 1},
        {"restart_s", o->restart_s, 1},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (f[i].neg_ok && f[i].v < 0)
            continue;
        if (!isfinite(f[i].v) || f[i].v < 0)
            return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT, "goodput: opts %s %g is not %s",
                                 f[i].name, f[i].v,
                                 f[i].neg_ok ? "a finite number (< 0: the plan's)"
                                             : "a finite number >= 0 (0: the default)");
    }
    return LLMT_OK;
}

LLMT_API llmt_status llmt_plan_simulate_goodput(const llmt_plan *plan,
                                                const llmt_goodput_opts *opts,
                                                llmt_goodput_result *out)
{
    if (!plan)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL((llmt_err *)&plan->err, "plan: simulate_goodput", out);
    llmt_plan *pl = (llmt_plan *)plan;
    if (out->struct_size < sizeof(size_t) + sizeof(double))
        return llmt__err_set(&pl->err, LLMT_ERR_STRUCT_SIZE,
                             "goodput: result struct_size %zu too small",
                             out->struct_size);
    llmt_goodput_opts o;
    llmt_goodput_opts_init(&o, sizeof o);
    if (opts) {
        llmt_status st = llmt__opts_copy(&pl->err, "goodput opts", &o, sizeof o, opts);
        if (st != LLMT_OK)
            return st;
    }
    llmt_status st = check_opts(&pl->err, &o);
    if (st != LLMT_OK)
        return st;
    const llmt_plan_estimate *e = &plan->est;
    const llmt_spec *s = plan->spec;
    sim_params p;
    double per_gpu = o.gpu_failures_per_hour > 0 ? o.gpu_failures_per_hour
                                                 : s->fault_tolerance.gpu_failures_per_hour;
    p.rate = per_gpu * plan->world / 3600.0;
    p.stall = o.stall_s >= 0 ? o.stall_s : e->ckpt_stall_s;
    p.write = o.write_s >= 0 ? o.write_s : (s->checkpoint.async ? e->ckpt_write_s : 0);
    p.restart = (o.restart_s >= 0 ? o.restart_s : e->restart_s) +
                (o.restore_s >= 0 ? o.restore_s : e->restore_s);
    p.work = o.horizon_hours > 0 ? o.horizon_hours * 3600 : fmin(e->run_time_s, 8760 * 3600.0);
    if (!(p.work > 0) || !isfinite(p.work))
        return llmt__err_set(&pl->err, LLMT_ERR_INVALID_ARGUMENT,
                             "goodput: nothing to simulate (run time %g s)", p.work);
    if (o.trials < 1 || o.trials > 100000)
        return llmt__err_set(&pl->err, LLMT_ERR_INVALID_ARGUMENT,
                             "goodput: trials %d outside [1, 100000]", (int)o.trials);
    if (o.sweep_points < 3 || o.sweep_points > 1001)
        return llmt__err_set(&pl->err, LLMT_ERR_INVALID_ARGUMENT,
                             "goodput: sweep_points %d outside [3, 1001]",
                             (int)o.sweep_points);
    if (p.stall <= 0 && p.rate > 0)
        p.stall = 1e-3; /* Young/Daly needs a cost; a millisecond at least */
    uint64_t seed = o.seed ? o.seed : (uint64_t)s->train.seed + 1;
    double mtbf = p.rate > 0 ? 1 / p.rate : INFINITY;
    double yd = isfinite(mtbf) ? sqrt(2 * p.stall * mtbf) : p.work;
    double interval = o.interval_s > 0 ? o.interval_s : e->ckpt_interval_s;
    if (!(interval > 0) || !isfinite(interval))
        interval = yd;

    llmt_goodput_result r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    r.mtbf_hours = mtbf / 3600;
    r.young_daly_s = yd;
    r.work_hours = p.work / 3600;
    double mean, sd;
    sim_out avg;
    p.interval = interval;
    run_trials(&p, seed, o.trials, &mean, &sd, &avg);
    r.interval_s = interval;
    r.goodput = mean;
    r.goodput_stddev = sd;
    r.wall_hours = avg.wall / 3600;
    r.lost_work_hours = avg.lost / 3600;
    r.ckpt_overhead_hours = avg.stalls / 3600;
    r.restart_hours = avg.restarts / 3600;
    r.failures = avg.failures;
    p.interval = yd;
    run_trials(&p, seed, o.trials, &mean, &sd, &avg);
    r.young_daly_goodput = mean;
    /* Sweep intervals log-uniformly over [YD/10, 10 YD]. */
    r.best_goodput = -1;
    for (int i = 0; i < o.sweep_points; i++) {
        double f = pow(10.0, -1.0 + 2.0 * i / (o.sweep_points - 1));
        p.interval = yd * f;
        run_trials(&p, seed, o.trials, &mean, &sd, &avg);
        if (mean > r.best_goodput) {
            r.best_goodput = mean;
            r.best_interval_s = p.interval;
        }
    }
    size_t n = out->struct_size < sizeof r ? out->struct_size : sizeof r;
    memcpy(out, &r, n);
    out->struct_size = n;
    return LLMT_OK;
}
