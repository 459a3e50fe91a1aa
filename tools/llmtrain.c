/* llmtrain: the command-line tool. It uses only the public ABI, like any
 * other host program, and dispatches to one function per subcommand. */
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "llmtrain %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_FAILED;
}

int cli_fail_status(const char *cmd, llmt_status s, const char *detail)
{
    if (detail && *detail)
        return cli_fail(cmd, "%s (%s)", detail, llmt_status_string(s));
    return cli_fail(cmd, "%s", llmt_status_string(s));
}

int cli_fail_spec(const char *cmd, const char *path, const char *msg)
{
    /* the library's file errors begin with the path already */
    size_t n = strlen(path);
    if (!strncmp(msg, path, n) && msg[n] == ':')
        return cli_fail(cmd, "%s", msg);
    return cli_fail(cmd, "%s: %s", path, msg);
}

int cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return 1;
    return 0;
}

void cli_print_usage(FILE *f, const cli_command *c)
{
    fputs(c->usage, f);
}

static void print_help(FILE *f)
{
    fprintf(f, "usage: llmtrain COMMAND [ARGS...]\n"
               "       llmtrain COMMAND --help\n\n"
               "Distributed LLM training on the libllmtrain C ABI (%s).\n\n"
               "Commands:\n", llmt_version());
    for (size_t i = 0; i < cli_command_count; i++)
        fprintf(f, "  %-10s %s\n", cli_commands[i].name, cli_commands[i].summary);
    fprintf(f, "\nExit status: 0 success, 1 failure (message on stderr),"
               " 2 usage error, 143 train stopped by SIGTERM (after its step\n"
               "and the checkpoint save in flight).\n");
}

int main(int argc, char **argv)
{
    /* a closed pipe or socket is an error to report, not a death: a
     * training rank whose Gloo peer died must fail the collective (and
     * name the peer), and a run whose log reader went away keeps
     * training */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        print_help(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "-h") || !strcmp(name, "--help") || !strcmp(name, "help")) {
        if (argc > 2) {
            for (size_t i = 0; i < cli_command_count; i++)
                if (!strcmp(argv[2], cli_commands[i].name)) {
                    cli_print_usage(stdout, &cli_commands[i]);
                    return CLI_OK;
                }
            fprintf(stderr, "llmtrain: no command '%s'\n", argv[2]);
            return CLI_USAGE;
        }
        print_help(stdout);
        return CLI_OK;
    }
    if (!strcmp(name, "--version"))
        name = "version";
    for (size_t i = 0; i < cli_command_count; i++) {
        const cli_command *c = &cli_commands[i];
        if (strcmp(name, c->name))
            continue;
        if (cli_wants_help(argc - 1, argv + 1)) {
            cli_print_usage(stdout, c);
            return CLI_OK;
        }
        return c->run(argc - 1, argv + 1);
    }
    fprintf(stderr, "llmtrain: unknown command '%s' (try llmtrain --help)\n", name);
    return CLI_USAGE;
}
