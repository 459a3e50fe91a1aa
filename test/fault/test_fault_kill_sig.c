/* LLMT_FAULT kill:R:S:SIG: the rank dies of SIG (the agent's tests use 13,
 * a write to a dead peer's socket, and 11, a crash). A signal that does
 * not end a process by default (SIGCHLD, SIGCONT, SIGURG, SIGWINCH are
 * ignored; SIGTSTP, SIGTTIN, SIGTTOU stop it, as SIGSTOP does) or that the
 * C library keeps for itself (32, 33) cannot be died of: before, only
 * SIGSTOP was refused and the others were taken, the rank then stopped
 * (a hang, not a kill) or died of SIGKILL instead (the ARG silently not
 * what happened). A signal the faulting thread blocks must still be the
 * one it dies of (before: raised, left pending, then SIGKILL).
 * usage: test_fault_kill_sig CORPUS_DIR (any directory of text files) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "corpus_tmp.h"
#include "llmtrain.h"

static char corpus[512], tmp[512];

static const char *spec(void)
{
    static char b[2048];
    snprintf(b, sizeof b,
             "{\"name\": \"ks\", \"model\": {\"arch\": \"gpt2\", \"layers\": 1, \"hidden\": 32,"
             " \"heads\": 2, \"vocab\": 320, \"seq_len\": 16},"
             " \"batch\": {\"micro\": 2, \"grad_accum\": 1}, \"optimizer\": {\"lr\": 1e-2},"
             " \"train\": {\"steps\": 3, \"seed\": 3, \"threads\": 1},"
             " \"data\": {\"train\": \"%s\", \"tokenizer\": {\"kind\": \"byte\"}},"
             " \"checkpoint\": {\"interval\": 0}, \"hardware\": {\"gpu\": \"cpu\"}}",
             corpus);
    return b;
}

/* A job in dir `name` under $LLMT_FAULT = fault: its creation's status
 * (message in msg), and with steps, its steps run (a kill fault ends the
 * process there). */
static llmt_status job(const char *name, const char *fault, int steps, char *msg, size_t n)
{
    char dir[700];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    setenv("LLMT_FAULT", fault, 1);
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_level = LLMT_LOG_ERROR;
    llmt_context *ctx = NULL;
    llmt_context_create(&co, &ctx);
    llmt_job_opts jo;
    llmt_job_opts_init(&jo, sizeof jo);
    jo.run_dir = dir;
    llmt_job *j = NULL;
    const char *js = spec();
    llmt_status s = llmt_job_create_from_json(ctx, js, strlen(js), &jo, &j);
    snprintf(msg, n, "%s", s == LLMT_OK ? "" : llmt_context_last_error(ctx));
    llmt_job_metrics m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    for (int i = 0; s == LLMT_OK && i < steps; i++)
        s = llmt_job_step(j, &m);
    llmt_job_destroy(j);
    llmt_context_destroy(ctx);
    unsetenv("LLMT_FAULT");
    return s;
}

/* kill:0:1:sig is refused, naming kill's ARG. */
static void refused(int sig)
{
    char fault[64], name[32], msg[1024];
    snprintf(fault, sizeof fault, "kill:0:1:%d", sig);
    snprintf(name, sizeof name, "refused-%d", sig);
    llmt_status s = job(name, fault, 0, msg, sizeof msg);
    CHECK_STATUS(s, LLMT_ERR_INVALID_ARGUMENT);
    int said = strstr(msg, "kill's ARG") != NULL;
    CHECK(said);
    if (s != LLMT_ERR_INVALID_ARGUMENT || !said)
        fprintf(stderr, "  %s: %s (%s)\n", fault, llmt_status_string(s), msg);
}

/* In a child: kill:0:1:sig, with sig ignored (SIGPIPE as llmtrain sets
 * it) or blocked in the thread that steps; the child must die of sig. */
static void dies_of(int sig, int how)
{
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
        if (how == 1)
            signal(sig, SIG_IGN);
        if (how == 2) {
            sigset_t ss;
            sigemptyset(&ss);
            sigaddset(&ss, sig);
            sigprocmask(SIG_BLOCK, &ss, NULL);
        }
        char fault[64], name[32], msg[1024];
        snprintf(fault, sizeof fault, "kill:0:1:%d", sig);
        snprintf(name, sizeof name, "dies-%d-%d", sig, how);
        llmt_status s = job(name, fault, 3, msg, sizeof msg);
        fprintf(stderr, "  %s: the job went on (%s: %s)\n", fault, llmt_status_string(s), msg);
        _exit(3);
    }
    int st = 0;
    CHECK(p > 0 && waitpid(p, &st, 0) == p);
    int ok = WIFSIGNALED(st) && WTERMSIG(st) == sig;
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "  kill:0:1:%d (%s): the child %s %d, not signal %d\n", sig,
                how == 1   ? "ignored"
                : how == 2 ? "blocked"
                           : "default",
                WIFSIGNALED(st) ? "died of signal" : "exited with status",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), sig);
}

int main(int argc, char **argv)
{
    int rc = corpus_tmp_open(argc, argv, "test_fault_kill_sig", "killsig", corpus,
                             sizeof corpus, tmp, sizeof tmp);
    if (rc)
        return rc;
    const int no[] = {0,       SIGSTOP, SIGTSTP,  SIGTTIN, SIGTTOU, SIGCHLD,
                      SIGCONT, SIGURG,  SIGWINCH, 32,      33,      NSIG};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        refused(no[i]);
    dies_of(SIGPIPE, 1); /* ignored, as llmtrain ignores it */
    dies_of(SIGSEGV, 0);
    dies_of(SIGUSR1, 2); /* blocked in the stepping thread */
    dies_of(SIGRTMIN, 0);
    return corpus_tmp_close(tmp, "fault-kill-sig");
}
