/* The Prometheus text exposition format (version 0.0.4) of a rank's last
 * step, for node_exporter's textfile collector (written to a temporary
 * name and renamed, so the collector never reads half a file) and for the
 * HTTP endpoint (http.c), both from the same text. Names
 * follow Prometheus conventions: base units (seconds, bytes, ratio), a
 * _total suffix on counters, labels for the rank, phase and group. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "obs/obs.h"
#include "obs/obs_internal.h"

static const char *const group_names[] = {"dp", "tp", "pp", "cp", "ep"};

static void gauge(FILE *f, const char *name, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

int64_t llmt__obs_count_step(llmt__obs *o)
{
    return ++o->steps;
}

void llmt__obs_prom_text(FILE *f, int32_t rank, int64_t steps, const llmt_job_perf *p,
                         const llmt_job_metrics *m)
{
    int r = (int)rank;
    /* a counter only ever grows (or restarts at 0 with the process):
     * the step number goes back on a rollback or a resume from an older
     * checkpoint, and rate() would read that as a reset plus a jump */
    fprintf(f,
            "# HELP llmtrain_steps_total Optimizer steps this process ran.\n"
            "# TYPE llmtrain_steps_total counter\n"
            "llmtrain_steps_total{rank=\"%d\"} %lld\n",
            r, (long long)steps);
    if (!p) /* before the first step: nothing measured yet */
        return;
    gauge(f, "llmtrain_step", "Step number of the last step (training progress).");
    fprintf(f, "llmtrain_step{rank=\"%d\"} %lld\n", r, (long long)p->step);
    gauge(f, "llmtrain_step_seconds", "Wall time of the last step.");
    fprintf(f, "llmtrain_step_seconds{rank=\"%d\"} %.9g\n", r, p->wall_s);
    gauge(f, "llmtrain_mfu_ratio", "Realized model FLOPs utilization of the last step.");
    fprintf(f, "llmtrain_mfu_ratio{rank=\"%d\"} %.9g\n", r, p->mfu);
    gauge(f, "llmtrain_hfu_ratio", "Hardware FLOPs utilization (with recomputation).");
    fprintf(f, "llmtrain_hfu_ratio{rank=\"%d\"} %.9g\n", r, p->hfu);
    gauge(f, "llmtrain_tokens_per_second", "Tokens per second of the whole job.");
    fprintf(f, "llmtrain_tokens_per_second{rank=\"%d\"} %.9g\n", r, p->tokens_per_s);
    gauge(f, "llmtrain_loss", "Training loss of the last step.");
    fprintf(f, "llmtrain_loss{rank=\"%d\"} %.9g\n", r, m ? (double)m->loss : 0.0);
    gauge(f, "llmtrain_step_phase_seconds", "Where the last step's time went.");
    const struct {
        const char *phase;
        double v;
    } ph[] = {{"compute", p->compute_s},
              {"optimizer", p->optimizer_s},
              {"bubble", p->bubble_s},
              {"data", p->data_s},
              {"ckpt", p->ckpt_s},
              {"other", p->other_s},
              {"unaccounted", p->unaccounted_s}};
    for (size_t i = 0; i < sizeof ph / sizeof ph[0]; i++)
        fprintf(f, "llmtrain_step_phase_seconds{rank=\"%d\",phase=\"%s\"} %.9g\n", r,
                ph[i].phase, ph[i].v);
    gauge(f, "llmtrain_comm_exposed_seconds",
          "Time the last step waited in each group's collectives.");
    for (int g = 0; g < 5; g++)
        fprintf(f, "llmtrain_comm_exposed_seconds{rank=\"%d\",group=\"%s\"} %.9g\n", r,
                group_names[g], p->comm_s[g]);
    gauge(f, "llmtrain_memory_bytes", "Memory this rank's trainer holds.");
    fprintf(f, "llmtrain_memory_bytes{rank=\"%d\"} %lld\n", r, (long long)p->mem_in_use);
    gauge(f, "llmtrain_memory_peak_bytes", "The most this rank's trainer held.");
    fprintf(f, "llmtrain_memory_peak_bytes{rank=\"%d\"} %lld\n", r, (long long)p->mem_peak);
    gauge(f, "llmtrain_model_flops_per_step", "Model FLOPs of one step, all ranks.");
    fprintf(f, "llmtrain_model_flops_per_step{rank=\"%d\"} %.9g\n", r, p->model_flops);
    gauge(f, "llmtrain_peak_flops", "Peak FLOP/s of one device (calibrated on a CPU).");
    fprintf(f, "llmtrain_peak_flops{rank=\"%d\"} %.9g\n", r, p->peak_flops);
}

llmt_status llmt__obs_prom_write(const char *path, int32_t rank, int64_t steps,
                                 const llmt_job_perf *p, const llmt_job_metrics *m, char *err,
                                 size_t errlen)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, errlen, "prometheus: open %s: %s", tmp, strerror(errno));
        return LLMT_ERR_IO;
    }
    llmt__obs_prom_text(f, rank, steps, p, m);
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, errlen, "prometheus: write %s: %s", path, strerror(errno));
        remove(tmp);
        return LLMT_ERR_IO;
    }
    return LLMT_OK;
}
