/* The planner's pipeline model (issue 17):
 *   - uneven and interleaved layouts for any layer count: Llama 3 405B's
 *     126 layers on 16 stages plan with virtual_stages 2 and 4, the first
 *     and the last stage holding 7 layers and the others 8 (Meta's
 *     layout), the chunks covering the layers once in virtual-stage order;
 *     the bubble is (p - 1) / (v m + p - 1);
 *   - its in-flight count per schedule (lib/plan/cost.c,
 *     llmt__plan_pp_inflight: GPipe m, 1F1B p - s, interleaved Megatron's)
 *     equals the activation sets the engine's op lists hold
 *     (lib/plan/pp_sched.c), an independent implementation, for p 2..8,
 *     v 1..4, m p..4p on every stage (test device-ppv checks the bytes
 *     built on it against a real stage's);
 *   - a dense model's automatic stages are the engine's (the same balance
 *     of the layers' work with the embedding and the head), also where
 *     the head weighs several layers and the last stage gets fewer (GPT-2
 *     and Llama, pp 2 and 4, v 1 to 3); 7 layers on pp 4 with a light
 *     head as 2,2,2,1; parallelism.stage_layers, when given, is the plan's
 *     layout (per stage, or per virtual stage with interleaving);
 *   - a MoE model (moe.every 2: layers 0, 2, 4, 6 MoE) on pp 2, pp 4 and
 *     pp 2 x v 2 without stage_layers: the plan's split is the engine's
 *     (llmt__pp_layout on the model config the job builds), and its
 *     largest stage's work, counted here from the layers' matrices, is
 *     below that of the split weighing every layer alike (the engine's
 *     balance of the same model as if dense, what ran before);
 *   - the balance's one-pass rows (lib/plan/balance.c) give the split the
 *     scan of every cut gives (below, the engine's former code) on 20000
 *     random cases: 1..40 layers of random, uniform or alternating work,
 *     any stage count, any embedding and head. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llmtrain.h"
#include "plan/balance.h"
#include "plan/plan.h"
#include "files.h"
#include "plan_run_fixture.h"
#include "train/pp.h"

/* The spec of json (checked) and its plan for the planner's own world
 * size (checked where the spec parsed); the caller destroys both. */
static llmt_plan *plan_of(const char *json, llmt_spec **s)
{
    llmt_plan *p = NULL;
    *s = NULL;
    CHECK_STATUS(llmt_spec_parse_json(NULL, json, strlen(json), s), LLMT_OK);
    if (*s)
        CHECK_STATUS(llmt_plan_create(NULL, *s, 0, &p), LLMT_OK);
    return p;
}

static void llama405b(const char *dir, int v)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/specs/llama3-405b-16k.json", dir);
    char *txt = test_slurp(path, NULL);
    CHECK(txt != NULL);
    if (!txt)
        return;
    char *at = strstr(txt, "\"virtual_stages\": 1");
    CHECK(at != NULL);
    if (at)
        at[strlen("\"virtual_stages\": ")] = (char)('0' + v);
    llmt_spec *s;
    llmt_plan *p = plan_of(txt, &s);
    if (!p) {
        llmt_spec_destroy(s);
        free(txt);
        return;
    }
    int next = 0, ok = 1;
    char lay[256] = "";
    for (int c = 0; c < v; c++)
        for (int st = 0; st < 16; st++) {
            int32_t f = -1, n = -1;
            CHECK_STATUS(llmt_plan_stage_layers(p, st, c, &f, &n), LLMT_OK);
            ok = ok && f == next && n >= 1;
            next = f + n;
        }
    CHECK(ok && next == 126);
    for (int st = 0; st < 16; st++) {
        int tot = 0;
        for (int c = 0; c < v; c++) {
            int32_t f = 0, n = 0;
            llmt_plan_stage_layers(p, st, c, &f, &n);
            tot += n;
        }
        CHECK_EQ_INT(tot, st == 0 || st == 15 ? 7 : 8);
        snprintf(lay + strlen(lay), sizeof lay - strlen(lay), "%s%d", st ? "," : "", tot);
    }
    llmt_plan_estimate e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    CHECK_STATUS(llmt_plan_get_estimate(p, &e), LLMT_OK);
    double want = 15.0 / (v * e.grad_accum + 15.0);
    CHECK(fabs(e.bubble_fraction - want) < 1e-12);
    printf("llama3 405b, 126 layers, pp 16 v %d: stages %s; bubble %.4f = 15/(%d*%d+15); "
           "activations %.1f GB, total %.1f GB per GPU\n",
           v, lay, e.bubble_fraction, v, (int)e.grad_accum, e.mem_activations / 1e9,
           e.mem_total / 1e9);
    llmt_plan_destroy(p);
    llmt_spec_destroy(s);
    free(txt);
}

static void inflight(void)
{
    int n = 0, bad = 0;
    for (int p = 2; p <= 8; p++)
        for (int mult = 1; mult <= 4; mult++)
            for (int v = 1; v <= 4; v++)
                for (int sched = 0; sched < 3; sched++) {
                    if (v > 1 && sched != LLMT__PP_INTERLEAVED)
                        continue;
                    int m = mult * p;
                    for (int st = 0; st < p; st++, n++) {
                        double plan = llmt__plan_pp_inflight(sched, p, v, m, st);
                        int run = llmt__pp_inflight(sched, v, m, p, st);
                        if (plan != (double)run) {
                            bad++;
                            fprintf(stderr,
                                    "sched %d p %d v %d m %d stage %d: plan %.0f, "
                                    "engine lists %d\n",
                                    sched, p, v, m, st, plan, run);
                        }
                    }
                }
    CHECK(n > 0 && bad == 0);
    printf("in-flight micro-batch chunks: %d (schedule, p, v, m, stage) cases, planner = "
           "engine's op lists\n",
           n);
}

/* parallelism.stage_layers is the plan's layout: per stage (7 layers as
 * 1,3,2,1 on pp 4) and per virtual stage (pp 2 x v 2 as 2,1,1,3: stage 0
 * holds chunks of 2 and 1 layers, stage 1 of 1 and 3). */
static void given(const char *par, int pp, int v, const int *want_first, const int *want_n)
{
    char json[512];
    snprintf(json, sizeof json,
             "{\"model\": {\"layers\": 7, \"hidden\": 64, \"heads\": 4, \"vocab\": 97, "
             "\"seq_len\": 16}, \"parallelism\": {%s}, \"batch\": {\"micro\": 1, "
             "\"grad_accum\": 4}, \"hardware\": {\"gpu\": \"cpu\"}}",
             par);
    llmt_spec *s;
    llmt_plan *p = plan_of(json, &s);
    for (int c = 0; p && c < v; c++)
        for (int st = 0; st < pp; st++) {
            int32_t f = -1, n = -1;
            CHECK_STATUS(llmt_plan_stage_layers(p, st, c, &f, &n), LLMT_OK);
            CHECK_EQ_INT(f, want_first[c * pp + st]);
            CHECK_EQ_INT(n, want_n[c * pp + st]);
        }
    printf("stage_layers given (%s): the plan's layout follows it\n", par);
    llmt_plan_destroy(p);
    llmt_spec_destroy(s);
}

/* The auto-planner leaves virtual stages out when the spec fixes another
 * schedule (gpipe), and uses them otherwise: Korthikanti et al.'s GPT 175B
 * on 64 A100s (examples/specs/calibration), where the free search picks
 * v > 1 (the premise, checked) and the gpipe one v 1. */
static void auto_schedule(void)
{
    int vs[2] = {0, 0};
    for (int gpipe = 0; gpipe < 2; gpipe++) {
        char json[2048];
        snprintf(json, sizeof json,
                 "{\"model\": {\"arch\": \"gpt2\", \"layers\": 96, \"hidden\": 12288, "
                 "\"heads\": 96, \"vocab\": 51200, \"seq_len\": 2048}, \"parallelism\": "
                 "{\"tp\": 8, \"pp\": 8, \"dp\": 1, \"recompute\": \"selective\", "
                 "\"sequence_parallel\": true%s}, \"precision\": {\"param\": \"bf16\", "
                 "\"master\": \"fp32\", \"gemm\": \"bf16\"}, \"batch\": {\"micro\": 1, "
                 "\"global\": 64}, \"train\": {\"device\": \"cuda\"}, \"hardware\": "
                 "{\"gpu\": \"A100-80GB\", \"gpus_per_node\": 8, \"nvlink_GBps\": 600, "
                 "\"ib_Gbps\": 200, \"ib_rails\": 8}}",
                 gpipe ? ", \"pp_schedule\": \"gpipe\"" : "");
        llmt_spec *s = NULL;
        llmt_plan *p = NULL;
        CHECK_STATUS(llmt_spec_parse_json(NULL, json, strlen(json), &s), LLMT_OK);
        if (s)
            CHECK_STATUS(llmt_plan_auto(NULL, s, 64, NULL, &p), LLMT_OK);
        llmt_plan_estimate e;
        memset(&e, 0, sizeof e);
        e.struct_size = sizeof e;
        if (p)
            CHECK_STATUS(llmt_plan_get_estimate(p, &e), LLMT_OK);
        vs[gpipe] = (int)e.virtual_stages;
        printf("auto plan of gpt 175b on 64%s: tp %d pp %d dp %d v %d\n",
               gpipe ? " (pp_schedule gpipe)" : "", (int)e.tp, (int)e.pp, (int)e.dp,
               (int)e.virtual_stages);
        llmt_plan_destroy(p);
        llmt_spec_destroy(s);
    }
    CHECK(vs[0] > 1);
    CHECK_EQ_INT(vs[1], 1);
}

/* The auto-planner may interleave any layer count now: Llama 3 405B (126
 * layers) on 16384 GPUs without virtual_stages given; whatever it picks,
 * its stage layers cover the 126 layers once in virtual-stage order. */
static void auto_uneven(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/specs/llama3-405b-16k.json", dir);
    char *txt = test_slurp(path, NULL);
    char *at = txt ? strstr(txt, "\"virtual_stages\": 1,") : NULL;
    CHECK(at != NULL);
    if (!at) {
        free(txt);
        return;
    }
    memset(at, ' ', strlen("\"virtual_stages\": 1,"));
    llmt_spec *s = NULL;
    llmt_plan *p = NULL;
    CHECK_STATUS(llmt_spec_parse_json(NULL, txt, strlen(txt), &s), LLMT_OK);
    if (s)
        CHECK_STATUS(llmt_plan_auto(NULL, s, 16384, NULL, &p), LLMT_OK);
    llmt_plan_estimate e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    if (p)
        CHECK_STATUS(llmt_plan_get_estimate(p, &e), LLMT_OK);
    int next = 0, ok = p != NULL;
    for (int c = 0; ok && c < e.virtual_stages; c++)
        for (int st = 0; st < e.pp; st++) {
            int32_t f = -1, n = -1;
            ok = ok && llmt_plan_stage_layers(p, st, c, &f, &n) == LLMT_OK && f == next &&
                 n >= 1;
            next = f + n;
        }
    CHECK(ok && next == 126);
    printf(
        "auto plan of llama3 405b (126 layers) on 16384: tp %d cp %d pp %d dp %d v %d (%s)\n",
        (int)e.tp, (int)e.cp, (int)e.pp, (int)e.dp, (int)e.virtual_stages,
        e.virtual_stages > 1 && 126 % (e.pp * e.virtual_stages) ? "uneven chunks" : "even");
    llmt_plan_destroy(p);
    llmt_spec_destroy(s);
    free(txt);
}

/* A layer's forward multiply-adds per token, from its matrices (the test's
 * own count): q, k, v and output projections, the attention core (T/2
 * keys on average, times two products), and SwiGLU's three matrices of
 * the dense FFN or of the top_k experts plus the router. */
enum { MB_C = 64, MB_H = 4, MB_KV = 2, MB_F = 176, MB_V = 1024, MB_T = 16, MB_L = 8 };
enum { MB_E = 4, MB_K = 2, MB_FE = 352, MB_EVERY = 2 };
static double mb_layer(int l)
{
    double hd = MB_C / MB_H, attn = MB_C * (MB_H * hd) + 2.0 * MB_C * (MB_KV * hd) +
                                    (MB_H * hd) * MB_C + 2.0 * (MB_T / 2.0) * MB_C;
    if (l % MB_EVERY == 0)
        return attn + MB_K * 3.0 * MB_C * MB_FE + (double)MB_C * MB_E;
    return attn + 3.0 * MB_C * MB_F;
}

/* The largest stage's work of a split (first[0..n]); the head (C x V plus
 * its softmax) on the last virtual stage, the embedding (a lookup) on the
 * first. */
static double mb_worst(const int *first, int n, int pp)
{
    double worst = 0;
    for (int st = 0; st < pp; st++) {
        double w = st == 0 ? MB_C : 0;
        for (int j = st; j < n; j += pp) {
            for (int l = first[j]; l < first[j + 1]; l++)
                w += mb_layer(l);
            if (j == n - 1)
                w += (double)MB_C * MB_V + 4.0 * MB_V;
        }
        worst = w > worst ? w : worst;
    }
    return worst;
}

static void moe_balance(int pp, int v)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model\": {\"arch\": \"llama\", \"layers\": %d, \"hidden\": %d, "
             "\"heads\": %d, \"kv_heads\": %d, \"ffn\": %d, \"vocab\": %d, \"seq_len\": "
             "%d, \"moe\": {\"experts\": %d, \"top_k\": %d, \"expert_ffn\": %d, "
             "\"every\": %d}}, \"parallelism\": {\"pp\": %d, \"virtual_stages\": %d}, "
             "\"batch\": {\"micro\": 1, \"grad_accum\": %d}, \"train\": {\"device\": "
             "\"cpu\"}}",
             MB_L, MB_C, MB_H, MB_KV, MB_F, MB_V, MB_T, MB_E, MB_K, MB_FE, MB_EVERY, pp, v,
             2 * pp);
    llmt_spec *s;
    llmt_plan *p = plan_of(json, &s);
    if (!p) {
        llmt_spec_destroy(s);
        return;
    }
    /* the model config lib/job/job.c builds from that spec, resolved */
    llmt_model_config c;
    CHECK_STATUS(plan_run_model_config(&c, 1, MB_L, MB_C, MB_H, MB_KV, MB_F, MB_V, MB_V, MB_T),
                 LLMT_OK);
    c.moe_experts = MB_E;
    c.moe_top_k = MB_K;
    c.moe_ffn = MB_FE;
    c.moe_every = MB_EVERY;
    int n = pp * v, run[9], dense[9], plan[9];
    llmt_err e = {0};
    CHECK_STATUS(llmt__pp_layout(&e, &c, MB_T, n, NULL, 0, run), LLMT_OK);
    llmt_model_config d = c;
    d.moe_experts = 0;
    CHECK_STATUS(llmt__pp_layout(&e, &d, MB_T, n, NULL, 0, dense), LLMT_OK);
    int agree = 1;
    char lay[64] = "", eq[64] = "";
    plan[n] = MB_L;
    for (int j = 0; j < n; j++) {
        int32_t f = -1, k = -1;
        CHECK_STATUS(llmt_plan_stage_layers(p, j % pp, j / pp, &f, &k), LLMT_OK);
        plan[j] = f;
        agree = agree && f == run[j] && f + k == run[j + 1];
        snprintf(lay + strlen(lay), sizeof lay - strlen(lay), "%s%d", j ? "," : "", (int)k);
        snprintf(eq + strlen(eq), sizeof eq - strlen(eq), "%s%d", j ? "," : "",
                 dense[j + 1] - dense[j]);
    }
    CHECK(agree);
    double w = mb_worst(plan, n, pp), w0 = mb_worst(dense, n, pp);
    CHECK(w < w0);
    printf("moe every 2, %d layers on pp %d v %d: plan = engine %s, largest stage %.0f "
           "MACs/token; layers weighed alike %s, %.0f (%.1f%% more)\n",
           MB_L, pp, v, lay, w, eq, w0, 100 * (w0 / w - 1));
    llmt_plan_destroy(p);
    llmt_spec_destroy(s);
}

/* A dense model's automatic stages: the plan's stage -> layer lists equal
 * the engine's (llmt__pp_layout on the model config lib/job/job.c builds
 * from the spec: vocabulary padded to 64, ffn resolved), where the head
 * weighs several layers (GPT-2 width 64, vocabulary 4096: C V + 4 V is 5.5
 * of its layers; Llama width 64, vocabulary 2048 ffn 176: 2.3), so the
 * last (virtual) stage holds fewer layers than the largest: the split an
 * even rule would not give. And a light head (vocabulary 97): 7 layers on
 * pp 4 as 2,2,2,1. */
static void dense_split(int llama, int layers, int vocab, int pp, int v, int heavy)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model\": {\"arch\": \"%s\", \"layers\": %d, \"hidden\": 64, "
             "\"heads\": 4%s, \"vocab\": %d, \"seq_len\": 16}, \"parallelism\": "
             "{\"pp\": %d, \"virtual_stages\": %d}, \"batch\": {\"micro\": 1, "
             "\"grad_accum\": %d}, \"train\": {\"device\": \"cpu\"}}",
             llama ? "llama" : "gpt2", layers, llama ? ", \"kv_heads\": 2, \"ffn\": 176" : "",
             vocab, pp, v, 2 * pp);
    llmt_spec *s;
    llmt_plan *p = plan_of(json, &s);
    if (!p) {
        llmt_spec_destroy(s);
        return;
    }
    llmt_model_config c;
    CHECK_STATUS(plan_run_model_config(&c, llama, layers, 64, 4, llama ? 2 : 4,
                                       llama ? 176 : 256, vocab, 0, 16),
                 LLMT_OK);
    int n = pp * v, run[17], most = 0;
    llmt_err e = {0};
    CHECK_STATUS(llmt__pp_layout(&e, &c, 16, n, NULL, 0, run), LLMT_OK);
    int agree = 1;
    char lay[96] = "";
    for (int j = 0; j < n; j++) {
        int32_t f = -1, k = -1;
        CHECK_STATUS(llmt_plan_stage_layers(p, j % pp, j / pp, &f, &k), LLMT_OK);
        agree = agree && f == run[j] && f + k == run[j + 1];
        most = k > most ? k : most;
        snprintf(lay + strlen(lay), sizeof lay - strlen(lay), "%s%d", j ? "," : "", (int)k);
    }
    CHECK(agree);
    int last = run[n] - run[n - 1];
    if (heavy)
        CHECK(last < most);
    else
        CHECK(!strcmp(lay, "2,2,2,1"));
    printf("%s %d layers, vocabulary %d, pp %d v %d: plan %s engine's split %s\n",
           llama ? "llama" : "gpt2", layers, vocab, pp, v, agree ? "=" : "DIFFERS FROM", lay);
    llmt_plan_destroy(p);
    llmt_spec_destroy(s);
}

/* The reference: every cut of every (stages, layers) scanned, the first
 * of least largest stage kept. */
static void ref_split(const double *cost, int L, double ec, double hc, int p, int64_t *first)
{
    double best[41][41];
    int cut[41][41];
    for (int s = 0; s < p; s++)
        for (int i = 0; i <= L; i++) {
            double b = INFINITY;
            int at = -1;
            for (int j = s; j < i; j++) {
                if (s == 0 && j != 0)
                    break;
                double own = (s == 0 ? ec : 0.0) + (s == p - 1 ? hc : 0.0);
                for (int l = j; l < i; l++)
                    own += cost[l];
                double before = s == 0 ? 0.0 : best[s - 1][j];
                double worst = own > before ? own : before;
                if (worst < b) {
                    b = worst;
                    at = j;
                }
            }
            best[s][i] = b;
            cut[s][i] = at;
        }
    first[p] = L;
    for (int s = p - 1, i = L; s >= 0; s--) {
        i = cut[s][i];
        first[s] = i;
    }
}

static void balance_vs_scan(void)
{
    uint64_t x = 12345;
    int bad = 0, n = 0;
    for (int k = 0; k < 20000; k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int L = 1 + (int)((x >> 33) % 40), p = 1 + (int)((x >> 20) % (uint64_t)L);
        int kind = (int)((x >> 10) % 3);
        double cost[40];
        for (int l = 0; l < L; l++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            cost[l] = kind == 0   ? (double)(1 + (x >> 40) % 1000)
                      : kind == 1 ? 100.0
                                  : (l % 2 ? 47.0 : 149.0);
        }
        double ec = (double)((x >> 5) % 50), hc = (double)((x >> 13) % 700);
        int64_t a[41], b[41];
        ref_split(cost, L, ec, hc, p, a);
        if (llmt__balance_split_costs(cost, L, ec, hc, p, b)) {
            bad++;
            continue;
        }
        n++;
        for (int s = 0; s <= p; s++)
            if (a[s] != b[s]) {
                bad++;
                fprintf(stderr, "L %d p %d kind %d: stage %d starts at %lld, scan %lld\n", L, p,
                        kind, s, (long long)b[s], (long long)a[s]);
                break;
            }
    }
    CHECK(n == 20000 && bad == 0);
    printf("balance: %d random splits equal the scan of every cut's\n", n);
}

int main(void)
{
    const char *dir = getenv("LLMT_SOURCE_ROOT");
    if (!dir)
        dir = ".";
    llama405b(dir, 2);
    llama405b(dir, 4);
    inflight();
    auto_schedule();
    auto_uneven(dir);
    static const int f1[4] = {0, 1, 4, 6}, n1[4] = {1, 3, 2, 1};
    given("\"pp\": 4, \"stage_layers\": [1, 3, 2, 1]", 4, 1, f1, n1);
    static const int f2[4] = {0, 2, 3, 4}, n2[4] = {2, 1, 1, 3};
    given("\"pp\": 2, \"virtual_stages\": 2, \"stage_layers\": [2, 1, 1, 3]", 2, 2, f2, n2);
    moe_balance(2, 1);
    moe_balance(4, 1);
    moe_balance(2, 2);
    balance_vs_scan();
    dense_split(0, 8, 4096, 2, 1, 1);
    dense_split(0, 12, 4096, 4, 1, 1);
    dense_split(0, 12, 4096, 2, 3, 1);
    dense_split(1, 8, 2048, 2, 1, 1);
    dense_split(1, 16, 2048, 4, 2, 1);
    dense_split(0, 7, 97, 4, 1, 0);
    return check_exit("plan-pp");
}
