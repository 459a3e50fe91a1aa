/* A failed step agreed over a group: the codes, then (only when one rank
 * failed) the texts, as int64 words so that every transport takes them
 * as it takes the step's other small gathers. */
#include <stdlib.h>
#include <string.h>

#include "comm/p2p.h"
#include "train/pp_agree.h"

int llmt__pp_agree_host(llmt_comm *c)
{
    /* NCCL, the one transport without a send that copies or posts, is the
     * one whose buffers must be device memory */
    return c && llmt__comm_isend_kind(c) != LLMT__ISEND_NONE;
}

llmt_status llmt__pp_agree_codes(llmt_comm *c, int64_t code, int64_t *codes)
{
    return llmt_comm_all_gather(c, &code, codes, 1, LLMT_DTYPE_INT64, NULL);
}

llmt_status llmt__pp_agree_texts(llmt_comm *c, const char *mine, char *texts)
{
    enum { W = LLMT__PP_TEXT / sizeof(int64_t) };
    int64_t words[W];
    memset(words, 0, sizeof words);
    size_t n = strlen(mine);
    memcpy(words, mine, n < LLMT__PP_TEXT - 1 ? n : LLMT__PP_TEXT - 1);
    llmt_status s = llmt_comm_all_gather(c, words, texts, W, LLMT_DTYPE_INT64, NULL);
    int32_t size = 1;
    llmt_comm_size(c, &size);
    for (int32_t r = 0; s == LLMT_OK && r < size; r++)
        texts[(size_t)(r + 1) * LLMT__PP_TEXT - 1] = '\0';
    return s;
}
