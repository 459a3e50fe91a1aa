/* llmtrain ckpt: placeholder until its module's command lands (issue owner
 * replaces this file). */
#include "cli.h"

int cmd_ckpt(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("ckpt", "not implemented in this build yet");
}
