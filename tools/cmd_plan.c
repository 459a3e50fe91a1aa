/* llmtrain plan: placeholder until its module's command lands (issue owner
 * replaces this file). */
#include "cli.h"

int cmd_plan(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("plan", "not implemented in this build yet");
}
