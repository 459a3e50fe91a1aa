/* The per-step MoE line of the metrics JSONL (doc/moe.md): tokens each
 * expert processed, dropped choices, aux and z losses of the step, summed
 * over the MoE layers (llmt_trainer_moe_stats with layer -1). */
#include <stdio.h>
#include <stdlib.h>

#include "job/job.h"

void llmt__job_moe_line(llmt_job *j, int64_t step)
{
    int E = j->mc.moe_experts;
    if (E <= 0)
        return;
    int64_t *cnt = calloc((size_t)E, sizeof *cnt), dropped = 0;
    double aux = 0, z = 0;
    if (!cnt || llmt_trainer_moe_stats(j->tr, -1, cnt, E, &dropped, &aux, &z) != LLMT_OK) {
        free(cnt);
        return; /* a dense engine or no memory: no line, nothing to report */
    }
    size_t cap = 32 + (size_t)E * 22, n = 0;
    char *list = malloc(cap);
    if (list) {
        list[0] = 0;
        for (int e = 0; e < E && n < cap; e++)
            n += (size_t)snprintf(list + n, cap - n, "%s%lld", e ? "," : "", (long long)cnt[e]);
        llmt__job_metrics_line(j,
                               "{\"event\":\"moe\",\"step\":%lld,\"tokens_per_expert\":[%s],"
                               "\"dropped\":%lld,\"aux_loss\":%.6g,\"z_loss\":%.6g}",
                               (long long)step, list, (long long)dropped, aux, z);
    }
    free(list);
    free(cnt);
}
