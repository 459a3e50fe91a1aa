/* llmtrain train: placeholder until its module's command lands (issue owner
 * replaces this file). */
#include "cli.h"

int cmd_train(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("train", "not implemented in this build yet");
}
