/* The subcommand table. Each module adds one entry and a cmd_<name>.c. */
#include "cli.h"

const cli_command cli_commands[] = {
    {"version", "print the library, header and ABI versions",
     "usage: llmtrain version [--json]\n"
     "  Prints the version of the loaded libllmtrain, of the header the tool\n"
     "  was built with, and the ABI version.\n"
     "  --json   one JSON object instead of text\n",
     cmd_version},
    {"features", "list what this build and machine can do",
     "usage: llmtrain features [--json]\n"
     "  Lists the optional features compiled in (cuda, nccl, mpi, aio,\n"
     "  openblas, openmp) and the CUDA devices visible now.\n"
     "  --json   one JSON object instead of text\n",
     cmd_features},
};

const size_t cli_command_count = sizeof cli_commands / sizeof cli_commands[0];
