/* The llmtrain command: shared declarations of its subcommands. */
#ifndef LLMT_TOOLS_CLI_H
#define LLMT_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "llmtrain.h"

typedef struct cli_command {
    const char *name;
    const char *summary;   /* one line for `llmtrain --help` */
    const char *usage;     /* full text for `llmtrain NAME --help` */
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
} cli_command;

/* The table, in tools/commands.c. Later modules add one line each. */
extern const cli_command cli_commands[];
extern const size_t cli_command_count;

/* Exit codes of the command (documented in `llmtrain --help`). */
/* CLI_RANK_FAILED: llmtrain train under an agent, this rank is unhealthy
 * (the job named it a straggler past its patience): `llmtrain launch`
 * replaces it instead of treating the error as the job's.
 * CLI_TERMINATED: llmtrain train stopped by SIGTERM after finishing its
 * step and the checkpoint save in flight (128 + SIGTERM, as a shell
 * reports a process SIGTERM ended). */
enum { CLI_OK = 0, CLI_FAILED = 1, CLI_USAGE = 2, CLI_RANK_FAILED = 3, CLI_TERMINATED = 143 };

/* Print "llmtrain NAME: msg" to stderr; returns CLI_FAILED. */
int cli_fail(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Report a failed library call: status string plus the handle's detail. */
int cli_fail_status(const char *cmd, llmt_status s, const char *detail);
/* A job spec at path that did not parse: the library's message (msg),
 * prefixed with the path unless it names it first already. */
int cli_fail_spec(const char *cmd, const char *path, const char *msg);
/* Strict numeric flag values (cli_args.c): the whole of `text` must be a
 * number in [lo, hi]; otherwise print "llmtrain: FLAG needs ..." to stderr
 * and return CLI_USAGE (CLI_OK and *out set when valid). */
int cli_parse_i64(const char *flag, const char *text, int64_t lo, int64_t hi,
                  int64_t *out);
int cli_parse_f64(const char *flag, const char *text, double lo, double hi,
                  double *out);
/* 1 if argv holds -h or --help. */
int cli_wants_help(int argc, char **argv);
/* Print the usage of one command to `f`. */
void cli_print_usage(FILE *f, const cli_command *c);

int cmd_version(int argc, char **argv);
int cmd_features(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);
int cmd_comm(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_report(int argc, char **argv);

#endif
