/* llmt_job under context parallelism (issue 18), in process: one thread
 * per rank on an in-process communicator, each layout against the
 * single-rank job on the same spec (the independent reference: the same
 * data and seed, global batch 8 = micro 2 x accum x dp, so every layout
 * trains on the same sequences; the CP ranks of a replica read the same
 * ones and each trains on its two chunks of them).
 * (a) cp 2 (ring and all-gather), cp 4 ring (chunks of 2 positions),
 *     cp 2 x dp 2 ZeRO-1, cp 2 x tp 2 x dp 2
 *     (8 ranks, both variants; with sequence parallelism, ring) on GPT-2
 *     (learned positions), and Llama (RoPE, kv 2) cp 2 x dp 2 and cp 2 x
 *     tp 2 with sequence parallelism (all-gather) against its own single
 *     rank: every rank's
 *     loss of every step and its validation losses within 1e-5 relative
 *     of the single rank's; the sampled text (llmt_job_sample, the
 *     windows run through the split engine) the single rank's; every
 *     rank's perf split times its CP group's waits;
 * (b) checkpoints across cp changes in one run directory: cp 2 x dp 2
 *     runs steps 1-2, one rank (cp 1) resumes for 3-4, cp 2 x tp 2 for
 *     5-6: each step's loss within 1e-5 of the uninterrupted single
 *     rank's; the cp 2 checkpoint holds each tensor once (its bytes on
 *     disk within 2% of the single rank's checkpoint of the same step);
 * (c) bad input refused at creation, naming the key.
 * Why 1e-5: cp changes only the order of fp32 sums (attention merged by
 * log-sum-exp over blocks, gradients summed over the group), as tp does
 * (test/job/test_job_tp.c).
 * usage: test_job_cp CORPUS_DIR (any directory of text files) */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "job_threads.h"
#include "llmtrain.h"

#define STEPS 6
_Static_assert(STEPS <= JT_MAXSTEPS, "jt_rank records steps 1..JT_MAXSTEPS");

static jt_suite g;

#define GPT2 "\"arch\": \"gpt2\", \"layers\": 2, \"hidden\": 32, \"heads\": 4"
#define LLAMA \
    "\"arch\": \"llama\", \"layers\": 2, \"hidden\": 32, \"heads\": 4, \"kv_heads\": 2"

/* The run every layout shares (job_threads.h); par: the "parallelism"
 * keys. */
static void spec(char *out, size_t cap, const char *model, const char *par, int seq)
{
    jt_suite_spec(&g, out, cap, model, par, seq);
}

/* The perf split times the CP group's waits on every rank. */
static const int cp_group[] = {LLMT_JOB_GROUP_CP, -1};

static void compare(const char *name, const char *model, const char *par, int n,
                    const jt_rank *ref, jt_rank *a)
{
    jt_suite_compare(&g, name, model, par, n, ref, a, cp_group);
}

/* Bytes of the files under a directory (one level of subdirectories). */
static long long dir_bytes(const char *path)
{
    DIR *d = opendir(path);
    long long n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[1400];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (stat(p, &sb) != 0)
            continue;
        n += S_ISDIR(sb.st_mode) ? dir_bytes(p) : (long long)sb.st_size;
    }
    if (d)
        closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    char json[4096];
    static jt_rank ref[1], lref[1], a[JT_MAXR];
    int rc =
        jt_suite_start(&g, argc, argv, "cpjob", "job-cp",
                       (jt_config){STEPS, 3, JT_SAMPLE_BEFORE_FINISH, 34, 1e-5, 0}, GPT2, ref);
    if (rc >= 0)
        return rc;

    /* (a) */
    compare("cp 2 ring", GPT2, "\"cp\": 2", 2, ref, a);
    compare("cp 2 allgather", GPT2, "\"cp\": 2, \"cp_variant\": \"allgather\"", 2, ref, a);
    compare("cp 4 ring", GPT2, "\"cp\": 4", 4, ref, a);
    compare("cp 2 x dp 2 ZeRO-1", GPT2, "\"cp\": 2, \"zero\": 1", 4, ref, a);
    compare("cp 2 x tp 2 x dp 2 ring", GPT2, "\"cp\": 2, \"tp\": 2", 8, ref, a);
    compare("cp 2 x tp 2 x dp 2 allgather", GPT2,
            "\"cp\": 2, \"tp\": 2, \"cp_variant\": \"allgather\"", 8, ref, a);
    compare("cp 2 x tp 2 x dp 2 SP ring", GPT2,
            "\"cp\": 2, \"tp\": 2, \"sequence_parallel\": true", 8, ref, a);
    if (jt_suite_one(&g, "llama one rank", LLAMA, "llama-one", lref)) {
        compare("llama kv 2, cp 2 x dp 2", LLAMA, "\"cp\": 2", 4, lref, a);
        compare("llama kv 2, cp 2 x tp 2 SP allgather", LLAMA,
                "\"cp\": 2, \"tp\": 2, \"dp\": 1, \"sequence_parallel\": true, "
                "\"cp_variant\": \"allgather\"",
                4, lref, a);
    }

    /* (b) the chain through checkpoints, cp changing */
    {
        static const jt_link ch[] = {
            {"chain cp 2 x dp 2", "\"cp\": 2", 4},
            {"chain one rank (resumed)", "\"tp\": 1", 1},
            {"chain cp 2 x tp 2 (resumed)", "\"cp\": 2, \"tp\": 2, \"dp\": 1", 4}};
        jt_suite_chain(&g, GPT2, ch, 3, ref, a);
        /* saved once: cp 2 x dp 2's step 2 against the single rank's. The
         * CP rank 1 of each replica (world ranks 1 and 3: cp is the
         * coordinate after tp) writes no tensor data, at most one 4 KiB
         * block of alignment; the whole is the single rank's plus
         * alignment and per-rank indexes (a second copy would double it) */
        char x[900], y[900];
        snprintf(x, sizeof x, "%s/chain/ckpt/step-000000000002", g.tmp);
        snprintf(y, sizeof y, "%s/one/ckpt/step-000000000002", g.tmp);
        long long bx = dir_bytes(x), by = dir_bytes(y), b1 = 0, b3 = 0;
        for (int r = 1; r <= 3; r += 2) {
            char f[1000];
            struct stat sb;
            snprintf(f, sizeof f, "%s/rank-%05d.bin", x, r);
            CHECK(stat(f, &sb) == 0);
            *(r == 1 ? &b1 : &b3) = stat(f, &sb) == 0 ? (long long)sb.st_size : -1;
        }
        printf("step 2 checkpoint: cp 2 x dp 2 %lld bytes (CP rank 1's data files %lld and "
               "%lld bytes), one rank %lld bytes\n",
               bx, b1, b3, by);
        CHECK(b1 >= 0 && b1 <= 4096 && b3 >= 0 && b3 <= 4096);
        CHECK(by > 0 && bx > 0 && bx <= 1.25 * (double)by);
    }

    /* (c) bad input, named */
    {
        static const char *const w_seq[] = {"parallelism.cp", "model.seq_len", NULL};
        static const char *const w_world[] = {"parallelism.cp", "world size 3", NULL};
        static const char *const w_var[] = {"parallelism.cp_variant", NULL};
        static const char *const w_sp[] = {"parallelism.sequence_parallel", "parallelism.tp",
                                           "model.seq_len", "parallelism.cp", NULL};
        static const char *const w_dp[] = {"parallelism.dp", NULL};
        spec(json, sizeof json, GPT2, "\"cp\": 3", 16);
        jt_suite_refused(&g, "cp 3 with seq_len 16", json, 3, w_seq);
        spec(json, sizeof json, GPT2, "\"cp\": 2", 16);
        jt_suite_refused(&g, "cp 2 on 3 ranks", json, 3, w_world);
        spec(json, sizeof json, GPT2, "\"cp_variant\": \"allgather\"", 16);
        jt_suite_refused(&g, "cp_variant with cp 1", json, 1, w_var);
        spec(json, sizeof json, GPT2, "\"cp\": 2, \"cp_variant\": \"star\"", 16);
        jt_suite_refused(&g, "cp_variant star", json, 2, w_var);
        /* 2 x cp divides 20, tp 4 divides 20 but not the 10 rows a CP rank holds */
        spec(json, sizeof json, GPT2, "\"cp\": 2, \"tp\": 4, \"sequence_parallel\": true", 20);
        jt_suite_refused(&g, "cp 2 x tp 4 SP with seq_len 20", json, 8, w_sp);
        spec(json, sizeof json, GPT2, "\"cp\": 2, \"dp\": 2", 16);
        jt_suite_refused(&g, "cp 2 x dp 2 on 2 ranks", json, 2, w_dp);
    }

    return jt_suite_close(&g, "job-cp");
}
