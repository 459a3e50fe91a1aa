/* llmtrain comm: placeholder until its module's command lands (issue owner
 * replaces this file). */
#include "cli.h"

int cmd_comm(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("comm", "not implemented in this build yet");
}
