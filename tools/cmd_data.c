/* llmtrain data: placeholder until its module's command lands (issue owner
 * replaces this file). */
#include "cli.h"

int cmd_data(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("data", "not implemented in this build yet");
}
