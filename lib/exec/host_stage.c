/* Host staging of device buffers, shared by the engine's groups that
 * stage (lib/train/tp.c, cp.c, dp.c, pp_xfer.c): see lib/exec/dev.h. */
#include <stdlib.h>

#include "exec/dev.h"

llmt_status llmt__host_stage(void **p, size_t *cap, size_t bytes)
{
    if (bytes <= *cap)
        return LLMT_OK;
    free(*p);
    *cap = 0;
    if (!(*p = malloc(bytes ? bytes : 1)))
        return LLMT_ERR_OUT_OF_MEMORY;
    *cap = bytes;
    return LLMT_OK;
}

int llmt__staged(int host_memory, const llmt_comm *c)
{
    llmt_comm_backend be = LLMT_COMM_AUTO;
    return !host_memory && llmt_comm_backend_of(c, &be) == LLMT_OK && be != LLMT_COMM_NCCL;
}
