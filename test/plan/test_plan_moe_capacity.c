/* The planner's expert capacity is the trainer's: the job hands
 * model.moe.capacity_factor to the trainer as a float (llmt_model_config)
 * and lib/train/moe.c takes ceil(factor x N x top_k / E) of that float,
 * where lib/plan/engine.c (the engine's bytes) and cost.c (the plan's
 * fp8 bytes, the EP exchange) took it of the double. At 1.2 with 40
 * tokens (micro-batches of 2 x 20) of top-2 over 8 experts the trainer's
 * block is 13 rows (1.2f is above 1.2) and the planner's was 12, so under
 * expert parallelism (the exchange's blocks, the owner's rows) the plan
 * said fewer bytes than the run holds. Checked without a run: specs the
 * job turns into the same trainer (factors 1.2, 1.2f written out, and
 * 1.25: the trainer's capacity of each is 13 here, llmt__moe_capacity)
 * get the same engine activations (llmt__plan_engine_stage_act) and the
 * same plan (memory by kind, step time), bf16 and fp8, at ep 2. Before,
 * 1.2 gave fewer bytes than the other two: 10 of 31 checks failed. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"
#include "plan/plan.h"
#include "train/moe.h"

#define N_TOK 40 /* micro 2 x seq 20 */

static void spec_json(const char *cf, int fp8, char *buf, size_t n)
{
    snprintf(buf, n,
             "{\"name\": \"cap\", \"model\": {\"arch\": \"llama\", \"layers\": 2, "
             "\"hidden\": 64, \"heads\": 4, \"kv_heads\": 2, \"ffn\": 128, \"vocab\": 250, "
             "\"seq_len\": 20, \"tied_embeddings\": false, \"moe\": {\"experts\": 8, "
             "\"top_k\": 2, \"expert_ffn\": 32, \"dropless\": false, "
             "\"capacity_factor\": %s}}, "
             "\"parallelism\": {\"tp\": 1, \"cp\": 1, \"pp\": 1, \"dp\": 2, \"ep\": 2, "
             "\"zero\": 0}, "
             "\"precision\": {\"param\": \"bf16\", \"master\": \"fp32\", \"gemm\": \"%s\"}, "
             "\"batch\": {\"micro\": 2, \"grad_accum\": 1}, "
             "\"train\": {\"device\": \"cuda\"}, \"hardware\": {\"gpu\": \"h100\"}}",
             cf, fp8 ? "fp8" : "bf16");
}

typedef struct seen {
    double act, mem[5], step;
} seen;

static int plan_of(const char *cf, int fp8, seen *out)
{
    char js[2048];
    spec_json(cf, fp8, js, sizeof js);
    llmt_spec *s = NULL;
    llmt_plan *p = NULL;
    CHECK_STATUS(llmt_spec_parse_json(NULL, js, strlen(js), &s), LLMT_OK);
    if (!s)
        return 0;
    CHECK_STATUS(llmt_plan_create(NULL, s, 2, &p), LLMT_OK);
    llmt_plan_estimate e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    int ok = p && llmt_plan_get_estimate(p, &e) == LLMT_OK;
    CHECK(ok);
    out->act = llmt__plan_engine_stage_act(s, 0);
    double m[5] = {e.mem_weights, e.mem_grads, e.mem_optimizer, e.mem_activations, e.mem_total};
    memcpy(out->mem, m, sizeof m);
    out->step = e.step_time_s;
    llmt_plan_destroy(p);
    llmt_spec_destroy(s);
    return ok;
}

int main(void)
{
    /* the trainer's capacity of each factor, as the job casts it */
    const char *cfs[] = {"1.2", "1.2000000476837158", "1.25"};
    const float cff[] = {1.2f, (float)1.2000000476837158, 1.25f};
    int cap[3];
    for (int i = 0; i < 3; i++) {
        llmt__moe_shape sh = {8, 2, 64, 32, cff[i], 0, 0};
        cap[i] = llmt__moe_capacity(&sh, N_TOK);
        printf("capacity factor %s: the trainer's capacity %d rows\n", cfs[i], cap[i]);
    }
    CHECK(cap[0] == 13 && cap[1] == 13 && cap[2] == 13);
    for (int fp8 = 0; fp8 < 2; fp8++) {
        seen v[3];
        int ok = 1;
        for (int i = 0; i < 3; i++)
            ok &= plan_of(cfs[i], fp8, &v[i]);
        if (!ok)
            continue;
        for (int i = 1; i < 3; i++) {
            printf("%s, factor %s against %s: engine activations %.0f vs %.0f B, plan "
                   "activations %.0f vs %.0f B, total %.0f vs %.0f B\n",
                   fp8 ? "fp8" : "bf16", cfs[0], cfs[i], v[0].act, v[i].act, v[0].mem[3],
                   v[i].mem[3], v[0].mem[4], v[i].mem[4]);
            CHECK(v[0].act == v[i].act);
            CHECK(memcmp(v[0].mem, v[i].mem, sizeof v[0].mem) == 0);
            CHECK(v[0].step == v[i].step);
        }
    }
    return check_exit("plan-moe-capacity");
}
