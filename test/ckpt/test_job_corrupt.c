/* A corrupt newest checkpoint resumed through the C ABI (llmt_job_create
 * with llmt_job_opts.resume), not the CLI: 16 bytes flipped inside a
 * tensor of step 9's data file, which only the block checksums find while
 * the step is read (checkpoints every 4 steps, stopped at 12). The job
 * must resume from step 8 (start_step 8, its resume_note naming the
 * corrupt step 12), move step 12 to ROOT/quarantine (kept, not deleted)
 * and train steps 9-16 with the losses and LRs of an uninterrupted run.
 * Twice: plainly, and with the anomaly policy lower_lr fired at step 10
 * (LLMT_FAULT spike), so that the corrupt step 12 was saved with a
 * lowered LR that step 8 does not have: the LR the corrupt step's read
 * set must not survive into the fallback (ckpt.c undoes it, and step 8's
 * own job.lr_mult is applied after), so steps 9 and 10 run at exactly the
 * uninterrupted run's LR, and later steps at its LR or, where the resumed
 * detector (whose window starts empty) does not fire at the spike again,
 * at the plain run's: never at a stale or twice-lowered one.
 * usage: test_job_corrupt CORPUS_DIR (any directory of text files) */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "corpus_tmp.h"
#include "llmtrain.h"

#define STEPS 16
#define STOP 12 /* the step corrupted */
#define BACK 8  /* the one before it */
#define SPIKE 10

static char corpus[512], tmp[512];

static const char *spec(int lower_lr)
{
    static char b[2048];
    snprintf(b, sizeof b,
             "{\"name\": \"corrupt\", \"model\": {\"arch\": \"gpt2\", \"layers\": 1, "
             "\"hidden\": 32, \"heads\": 2, \"vocab\": 320, \"seq_len\": 16},"
             " \"batch\": {\"micro\": 2, \"grad_accum\": 1}, \"optimizer\": {\"lr\": 1e-2},"
             " \"schedule\": {\"kind\": \"cosine\", \"warmup_steps\": 1},"
             " \"train\": {\"steps\": %d, \"seed\": 3, \"threads\": 1},"
             " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
             " \"checkpoint\": {\"interval\": 4}, \"hardware\": {\"gpu\": \"cpu\"}%s}",
             STEPS, corpus,
             lower_lr ? ", \"fault_tolerance\": {\"anomaly\": {\"policy\": \"lower_lr\", "
                        "\"zscore\": 4, \"lr_factor\": 0.1}}"
                      : "");
    return b;
}

/* Steps of one job in dir until stop (0: train.steps): loss[s] and lr[s]
 * of step s; *note gets its resume_note. Returns the step it started from
 * (-1: failed). */
static int64_t run(const char *dir, int lower_lr, int resume, int64_t stop, float *loss,
                   float *lr, char *note, size_t cap)
{
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_level = LLMT_LOG_ERROR;
    llmt_context *ctx = NULL;
    llmt_context_create(&co, &ctx);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = dir;
    jo.resume = resume;
    jo.stop_at = stop;
    llmt_job *job = NULL;
    const char *js = spec(lower_lr);
    llmt_status s = llmt_job_create_from_json(ctx, js, strlen(js), &jo, &job);
    if (s != LLMT_OK) {
        fprintf(stderr, "%s: create: %s\n", dir, llmt_context_last_error(ctx));
        llmt_context_destroy(ctx);
        return -1;
    }
    llmt_job_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    llmt_job_get_info(job, &info);
    int64_t start = info.start_step;
    if (note)
        snprintf(note, cap, "%s", info.resume_note ? info.resume_note : "");
    llmt_job_metrics m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    for (int64_t at = start; s == LLMT_OK && at < info.stop_at; at++) {
        s = llmt_job_step(job, &m);
        if (s == LLMT_OK && m.step >= 1 && m.step <= STEPS) {
            loss[m.step] = m.loss;
            lr[m.step] = m.lr;
        }
    }
    if (s == LLMT_OK)
        s = llmt_job_finish(job);
    if (s != LLMT_OK) {
        fprintf(stderr, "%s: %s\n", dir, llmt_job_last_error(job));
        start = -1;
    }
    llmt_job_destroy(job);
    llmt_context_destroy(ctx);
    return start;
}

/* 16 bytes flipped in the middle of the chunk of `tensor` in step_dir's
 * rank-00000.bin (from its manifest). 0: done. */
static int flip(const char *step_dir, const char *tensor)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/manifest.json", step_dir);
    FILE *f = fopen(p, "rb");
    if (!f)
        return -1;
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    cJSON *m = cJSON_Parse(text), *t;
    long off = -1, len = 0;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(m, "tensors"))
    {
        const cJSON *name = cJSON_GetObjectItem(t, "name");
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(t, "chunks"), 0);
        if (cJSON_IsString(name) && !strcmp(name->valuestring, tensor) && c) {
            off = (long)cJSON_GetObjectItem(c, "offset")->valuedouble;
            len = (long)cJSON_GetObjectItem(c, "length")->valuedouble;
        }
    }
    cJSON_Delete(m);
    if (off < 4096 || len < 64)
        return -1;
    snprintf(p, sizeof p, "%s/rank-00000.bin", step_dir);
    unsigned char b[16];
    if (!(f = fopen(p, "r+b")) || fseek(f, off + len / 2, SEEK_SET) || fread(b, 1, 16, f) != 16)
        return f ? fclose(f), -1 : -1;
    for (int i = 0; i < 16; i++)
        b[i] ^= 0xFF;
    int rc = fseek(f, off + len / 2, SEEK_SET) || fwrite(b, 1, 16, f) != 16;
    return fclose(f) || rc ? -1 : 0;
}

/* Entries of dir whose name starts with prefix. */
static int count(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d)
        closedir(d);
    return n;
}

/* One case; ref_lr gets the uninterrupted run's LRs; plain: the plain
 * case's (NULL in it). */
static void one_case(int lower_lr, float *ref_lr, const float *plain)
{
    const char *tag = lower_lr ? "lower_lr" : "plain";
    float ref_loss[STEPS + 1] = {0};
    float loss[STEPS + 1] = {0}, lr[STEPS + 1] = {0};
    char d_ref[700], d_run[700], sd[800], note[2048] = "";
    snprintf(d_ref, sizeof d_ref, "%s/%s-ref", tmp, tag);
    snprintf(d_run, sizeof d_run, "%s/%s-run", tmp, tag);
    char fault[64];
    snprintf(fault, sizeof fault, "spike:0:%d", SPIKE);
    if (lower_lr) /* a loss spike: the LR goes x0.1 after it */
        setenv("LLMT_FAULT", fault, 1);
    CHECK(run(d_ref, lower_lr, 0, 0, ref_loss, ref_lr, NULL, 0) == 0);
    CHECK(run(d_run, lower_lr, 0, STOP, loss, lr, NULL, 0) == 0);
    snprintf(sd, sizeof sd, "%s/ckpt/step-%012d", d_run, STOP);
    CHECK(flip(sd, "param/h.0.attn.c_attn.weight") == 0);
    char want[64];
    snprintf(want, sizeof want, "at step %d", BACK);
    memset(loss, 0, sizeof loss);
    memset(lr, 0, sizeof lr);
    CHECK_EQ_INT(run(d_run, lower_lr, 1, 0, loss, lr, note, sizeof note), BACK);
    unsetenv("LLMT_FAULT");
    fprintf(stderr, "%s: resume_note: %s\n", tag, note);
    CHECK(strstr(note, want) && strstr(note, "corrupt step 12"));
    snprintf(sd, sizeof sd, "%s/ckpt/quarantine", d_run);
    CHECK_EQ_INT(count(sd, "step-000000000012."), 1);
    for (int s = BACK + 1; s <= STEPS; s++) {
        fprintf(stderr, "%s: step %2d: loss %.7g lr %.9g, uninterrupted %.7g lr %.9g\n", tag, s,
                (double)loss[s], (double)lr[s], (double)ref_loss[s], (double)ref_lr[s]);
        if (!plain || s <= SPIKE)
            CHECK(loss[s] == ref_loss[s] && lr[s] == ref_lr[s] && lr[s] > 0);
        else
            CHECK(lr[s] > 0 && (lr[s] == ref_lr[s] || lr[s] == plain[s]));
    }
}

int main(int argc, char **argv)
{
    int rc = corpus_tmp_open(argc, argv, "test_job_corrupt", "corrupt", corpus, sizeof corpus,
                             tmp, sizeof tmp);
    if (rc)
        return rc;
    float plain[STEPS + 1] = {0}, lowered[STEPS + 1] = {0};
    one_case(0, plain, NULL);
    one_case(1, lowered, plain);
    /* the spike lowered the LR after it, before the corrupt step: the
     * lower_lr case tests what it claims */
    CHECK(lowered[SPIKE - 1] == plain[SPIKE - 1]);
    for (int s = SPIKE + 1; s <= STEPS; s++)
        CHECK(lowered[s] > 0 && lowered[s] < 0.2f * plain[s]);
    return corpus_tmp_close(tmp, "job-corrupt");
}
