/* Drills and the agent's view of a rank: fault injection and heartbeats.
 *
 * Recovery that is never exercised does not work when it is needed, so a
 * job can be told to fail on purpose: $LLMT_FAULT is a comma-separated list
 * of KIND:RANK:STEP[:ARG][@GEN] fired on rank RANK just before step STEP
 * runs, in launch generation GEN (default 0; $LLMT_LAUNCH_GEN, set by
 * `llmtrain launch`, says which generation this process is, so a fault
 * does not fire again when the restarted gang replays the step):
 *   kill     SIGKILL self (a node that vanishes); ARG another signal to
 *            die of (kill:1:5:11 a crash, kill:2:5:13 a write to a dead
 *            peer's socket, which the agent must not blame on the rank)
 *   hang     SIGSTOP self (a hung process: sockets open, no progress)
 *   slow     sleep ARG ms in that step (a straggler; every step from STEP
 *            on when ARG is followed by '+': slow:1:3:200+)
 *   nan      NaN in this rank's loss and gradients for that step (the
 *            first parameter tensor made NaN for the forward/backward,
 *            restored after: every element, since an embedding row that
 *            no token of the batch looks up would change nothing)
 *   bitflip  flip bit ARG (default 22) of one parameter element (silent
 *            data corruption: the replicas now differ)
 *   flipout  the same flip right after the step's update: a corrupted
 *            result of that step on this rank alone (the flip before the
 *            step feeds the corrupted value into every rank's gradients)
 *   spike    the first parameter tensor (the token embedding) times ARG
 *            (default 20) for that step's forward/backward, restored after:
 *            a loss and gradient-norm spike whose size does not depend on
 *            the engine's rounding (a bad batch, deterministically)
 *   killsave SIGKILL self right after the save of step STEP began (an
 *            async save in flight: never a checkpoint that verifies but
 *            is incomplete)
 *   losedisk delete this rank's part of every step in the local root, then
 *            SIGKILL self (a node lost with its local disk: the restart
 *            needs the peer or the durable tier)
 *   slowsave the save of step STEP waits ARG ms before this rank writes
 *            its part (a slow disk: a failure elsewhere meanwhile finds
 *            this rank committing; signals do not cut the wait short)
 * nan, bitflip, flipout and spike change the first parameter tensor this
 * rank's engine trains (victim_open below), on every engine.
 * The injection is test machinery and the only place lib/ raises signals;
 * it does nothing unless the variable is set.
 *
 * The heartbeat: with $LLMT_HEARTBEAT_FILE set, the job rewrites that file
 * after every step ("step unix_time start_step first_step_unix_time"), so an agent sees a rank that stopped
 * making progress even while its process is alive. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "job/job.h"
#include "train/trainer_state.h"

#define FAIL(st, ...) llmt__err_set(&j->err, (st), __VA_ARGS__)

static const char *const kind_names[] = {"kill",    "hang",    "slow",     "nan",
                                         "bitflip", "spike",   "killsave", "losedisk",
                                         "flipout", "slowsave"};

/* Can a process die of signal `sig` (kill's ARG)? Those whose default
 * action stops it or is to ignore it cannot, nor can the ones between the
 * classic signals and SIGRTMIN, which the C library keeps for its threads
 * (signal() refuses them). */
static int deadly(long long sig)
{
    if (sig < 1 || sig >= NSIG || (sig > 31 && sig < SIGRTMIN))
        return 0;
    switch ((int)sig) {
    case SIGSTOP:
    case SIGTSTP:
    case SIGTTIN:
    case SIGTTOU:
    case SIGCHLD:
    case SIGCONT:
    case SIGURG:
    case SIGWINCH: return 0;
    default: return 1;
    }
}

llmt_status llmt__job_fault_parse(llmt_job *j)
{
    const char *v = getenv("LLMT_FAULT");
    const char *g = getenv("LLMT_LAUNCH_GEN");
    j->launch_gen = g && *g ? atoi(g) : 0;
    j->nfault = 0;
    if (!v || !*v)
        return LLMT_OK;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (j->nfault >= JOB_MAX_FAULTS)
            return FAIL(LLMT_ERR_INVALID_ARGUMENT, "LLMT_FAULT: more than %d faults",
                        JOB_MAX_FAULTS);
        job_fault *f = &j->faults[j->nfault];
        memset(f, 0, sizeof *f);
        char *at = strchr(t, '@');
        if (at) {
            *at = 0;
            f->gen = atoi(at + 1);
        }
        char kind[16] = "";
        long long rank = -1, step = -1, arg = -1;
        char plus = 0;
        int n = sscanf(t, "%15[a-z]:%lld:%lld:%lld%c", kind, &rank, &step, &arg, &plus);
        f->kind = -1;
        for (int k = 0; k < (int)(sizeof kind_names / sizeof kind_names[0]); k++)
            if (!strcmp(kind, kind_names[k]))
                f->kind = k;
        if (n < 3 || f->kind < 0 || rank < 0 || step < 1)
            return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                        "LLMT_FAULT: '%s' is not KIND:RANK:STEP[:ARG][@GEN] with KIND one of "
                        "kill, hang, slow, nan, bitflip, spike, killsave, losedisk, flipout, "
                        "slowsave, RANK >= 0 "
                        "and "
                        "STEP >= 1",
                        t);
        if (f->kind == JOB_FAULT_KILL && n >= 4 && !deadly(arg))
            return FAIL(LLMT_ERR_INVALID_ARGUMENT,
                        "LLMT_FAULT: '%s': kill's ARG is a signal number from 1 to %d whose "
                        "default action ends the process: not %d, %d, %d, %d (they stop it: "
                        "that is hang), %d, %d, %d, %d (ignored), nor 32 to %d (the C "
                        "library's)",
                        t, NSIG - 1, SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU, SIGCHLD, SIGCONT,
                        SIGURG, SIGWINCH, SIGRTMIN - 1);
        if ((f->kind == JOB_FAULT_SLOW || f->kind == JOB_FAULT_SLOWSAVE) && n < 4)
            return FAIL(LLMT_ERR_INVALID_ARGUMENT, "LLMT_FAULT: '%s': %s needs :MS", t,
                        kind_names[f->kind]);
        f->rank = (int32_t)rank;
        f->step = step;
        f->arg = n >= 4                                                         ? arg
                 : f->kind == JOB_FAULT_BITFLIP || f->kind == JOB_FAULT_FLIPOUT ? 22
                 : f->kind == JOB_FAULT_SPIKE                                   ? 20
                                                                                : 0;
        f->sticky = n >= 5 && plus == '+';
        j->nfault++;
    }
    return LLMT_OK;
}

/* What nan, bitflip, flipout and spike corrupt: the first parameter
 * tensor this rank's engine trains. The fp32 CPU engine without tensor or
 * pipeline parallelism trains the model's host tensors in place: tensor 0
 * there. Any other engine (tp, pp, bf16, the GPU) trains its own copy:
 * its shard of the first tensor it holds, read to the host and written
 * back on close, so the drill reaches what the engine computes with. */
typedef struct {
    float *x; /* the floats; x[n / 2] is the element a flip or NaN hits */
    int64_t n;
    int32_t idx; /* the engine's parameter, when `copy` */
    int copy;    /* x is a host copy of the engine's shard: write it back */
} victim;

static llmt_status victim_open(llmt_job *j, victim *v)
{
    memset(v, 0, sizeof *v);
    if (!llmt__trainer_host_resident(j->tr)) {
        llmt_status s = llmt__trainer_poke_get(j->tr, &v->idx, &v->x, &v->n);
        if (s != LLMT_OK)
            return FAIL(s, "LLMT_FAULT: %s", llmt_trainer_last_error(j->tr));
        v->copy = 1;
        return LLMT_OK;
    }
    llmt_tensor t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    if (llmt_model_param(j->model, 0, NULL, &t) != LLMT_OK || !t.data ||
        t.dtype != LLMT_DTYPE_FP32)
        return FAIL(LLMT_ERR_UNSUPPORTED, "LLMT_FAULT: the model's first tensor is not fp32");
    v->x = t.data;
    v->n = 1;
    for (int d = 0; d < t.ndim; d++)
        v->n *= t.shape[d];
    if (j->spec->parallelism.zero >= 3) { /* only this rank's share is its own to corrupt */
        int64_t rel = 0, cnt = 0;
        float *p[3] = {NULL, NULL, NULL};
        llmt__trainer_share(j->tr, 0, &rel, &cnt, p);
        if (cnt > 0) {
            v->x = p[0];
            v->n = cnt;
        }
    }
    return LLMT_OK;
}

static llmt_status victim_close(llmt_job *j, victim *v)
{
    llmt_status s = LLMT_OK;
    if (v->copy) {
        s = llmt__trainer_poke_put(j->tr, v->idx, v->x);
        if (s != LLMT_OK)
            s = FAIL(s, "LLMT_FAULT: %s", llmt_trainer_last_error(j->tr));
        free(v->x);
    }
    memset(v, 0, sizeof *v);
    return s;
}

/* The victim as it is, kept to be put back after the step
 * (llmt__job_fault_after); the first drill of a step keeps it. */
static llmt_status victim_keep(llmt_job *j, const victim *v)
{
    if (j->victim_copy)
        return LLMT_OK;
    j->victim_copy = malloc((size_t)v->n * sizeof *v->x);
    if (!j->victim_copy)
        return FAIL(LLMT_ERR_OUT_OF_MEMORY, "LLMT_FAULT: no memory for the victim's copy");
    memcpy(j->victim_copy, v->x, (size_t)v->n * sizeof *v->x);
    return LLMT_OK;
}

static void flip_bit(float *x, int bit)
{
    uint32_t u;
    memcpy(&u, x, 4);
    u ^= 1u << (bit & 31);
    memcpy(x, &u, 4);
}

/* This rank's part files (rank-R.bin and .json, the names lib/ckpt
 * writes) in every step directory of the local root: what a node's lost
 * disk takes with it when every rank saves into one root. */
static void lose_disk(llmt_job *j)
{
    DIR *d = opendir(j->ckpt_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "step-", 5) != 0)
            continue;
        for (int k = 0; k < 2; k++) {
            char p[JOB_PATH_MAX + 300];
            snprintf(p, sizeof p, "%s/%s/rank-%05d.%s", j->ckpt_dir, e->d_name, (int)j->rank,
                     k ? "json" : "bin");
            unlink(p);
        }
    }
    if (d)
        closedir(d);
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

llmt_status llmt__job_fault_before(llmt_job *j, int64_t step)
{
    free(j->victim_copy); /* a step that did not end: rolled back since */
    j->victim_copy = NULL;
    for (int i = 0; i < j->nfault; i++) {
        job_fault *f = &j->faults[i];
        if (f->rank != j->rank || f->gen != j->launch_gen || f->kind == JOB_FAULT_KILLSAVE ||
            f->kind == JOB_FAULT_SLOWSAVE)
            continue;
        if (f->step != step && !(f->sticky && step >= f->step))
            continue;
        if (f->fired && !f->sticky)
            continue; /* once: a skipped or rolled-back step runs again */
        f->fired = 1;
        llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                  "fault injection (LLMT_FAULT): %s on rank %d "
                  "at step %lld",
                  kind_names[f->kind], (int)j->rank, (long long)step);
        llmt__job_metrics_line(j,
                               "{\"event\":\"fault_injected\",\"kind\":\"%s\",\"rank\":%d,"
                               "\"step\":%lld}",
                               kind_names[f->kind], (int)j->rank, (long long)step);
        if (j->jsonl)
            fflush(j->jsonl);
        victim v;
        llmt_status s = LLMT_OK;
        switch (f->kind) {
        case JOB_FAULT_KILL:
            if (f->arg > 0) { /* die of it even where it is ignored or blocked */
                sigset_t one;
                sigemptyset(&one);
                sigaddset(&one, (int)f->arg);
                signal((int)f->arg, SIG_DFL);
                pthread_sigmask(SIG_UNBLOCK, &one, NULL);
            }
            raise(f->arg > 0 ? (int)f->arg : SIGKILL);
            raise(SIGKILL); /* a signal that does not end a process */
            break;
        case JOB_FAULT_LOSEDISK:
            lose_disk(j);
            raise(SIGKILL);
            break;
        case JOB_FAULT_HANG: raise(SIGSTOP); break;
        case JOB_FAULT_SLOW: sleep_ms(f->arg); break;
        case JOB_FAULT_NAN: {
            if ((s = victim_open(j, &v)) != LLMT_OK)
                return s;
            if ((s = victim_keep(j, &v)) == LLMT_OK)
                for (int64_t e = 0; e < v.n; e++)
                    v.x[e] = NAN;
            llmt_status c = victim_close(j, &v);
            s = s != LLMT_OK ? s : c;
            break;
        }
        case JOB_FAULT_BITFLIP:
            if ((s = victim_open(j, &v)) != LLMT_OK)
                return s;
            flip_bit(&v.x[v.n / 2], (int)f->arg);
            s = victim_close(j, &v);
            break;
        case JOB_FAULT_FLIPOUT: /* after the update: llmt__job_fault_after */
            j->flipout_bit = 1 + (int)(f->arg & 31);
            break;
        case JOB_FAULT_SPIKE: {
            if ((s = victim_open(j, &v)) != LLMT_OK)
                return s;
            if ((s = victim_keep(j, &v)) == LLMT_OK)
                for (int64_t e = 0; e < v.n; e++)
                    v.x[e] *= (float)f->arg;
            llmt_status c = victim_close(j, &v);
            s = s != LLMT_OK ? s : c;
            break;
        }
        default: break;
        }
        if (s != LLMT_OK)
            return s;
    }
    return LLMT_OK;
}

/* The drills that fire at a save (killsave, slowsave): the fault of KIND
 * for this rank, generation and step, not fired yet, marked fired, logged
 * and put in the metrics (flushed: killsave dies next); NULL when none. */
static job_fault *save_drill(llmt_job *j, int kind, int64_t step)
{
    for (int i = 0; i < j->nfault; i++) {
        job_fault *f = &j->faults[i];
        if (f->kind != kind || f->rank != j->rank || f->gen != j->launch_gen ||
            f->step != step || f->fired)
            continue;
        f->fired = 1;
        char how[48] = "is in flight";
        if (kind == JOB_FAULT_SLOWSAVE)
            snprintf(how, sizeof how, "waits %lld ms", (long long)f->arg);
        llmt__log(j->ctx, LLMT_LOG_WARN, "job",
                  "fault injection (LLMT_FAULT): %s on rank %d: the save of step %lld %s",
                  kind_names[kind], (int)j->rank, (long long)step, how);
        llmt__job_metrics_line(j,
                               "{\"event\":\"fault_injected\",\"kind\":\"%s\","
                               "\"rank\":%d,\"step\":%lld}",
                               kind_names[kind], (int)j->rank, (long long)step);
        if (j->jsonl)
            fflush(j->jsonl);
        return f;
    }
    return NULL;
}

void llmt__job_fault_saved(llmt_job *j, int64_t step)
{
    if (save_drill(j, JOB_FAULT_KILLSAVE, step))
        raise(SIGKILL);
}

void llmt__job_fault_saving(llmt_job *j, int64_t step)
{
    job_fault *f;
    while ((f = save_drill(j, JOB_FAULT_SLOWSAVE, step)) != NULL)
        sleep_ms(f->arg);
}

void llmt__job_fault_after(llmt_job *j)
{
    if (!j->flipout_bit && !j->victim_copy)
        return;
    victim v;
    if (victim_open(j, &v) == LLMT_OK) {
        if (j->victim_copy) /* a spike or NaN undone */
            memcpy(v.x, j->victim_copy, (size_t)v.n * sizeof *v.x);
        if (j->flipout_bit) /* the step's result corrupted on this rank alone */
            flip_bit(&v.x[v.n / 2], j->flipout_bit - 1);
        victim_close(j, &v);
    }
    j->flipout_bit = 0;
    free(j->victim_copy);
    j->victim_copy = NULL;
}

void llmt__job_heartbeat(llmt_job *j, int64_t step)
{
    const char *path = getenv("LLMT_HEARTBEAT_FILE");
    if (!path || !*path)
        return;
    char tmp[JOB_PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (j->hb_first == 0)
        j->hb_first = t;
    /* step, now, the step this process started from, when it finished its
     * first step (the agent's recovery time ends there) */
    fprintf(f, "%lld %.3f %lld %.3f\n", (long long)step, t, (long long)j->start_step,
            j->hb_first);
    if (fclose(f) == 0)
        rename(tmp, path);
}
