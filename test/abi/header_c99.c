/* llmtrain.h alone, as strict C99 (built with -std=c99 -pedantic-errors).
 * Run: checks that struct sizes agree with what the library reports, so a
 * binding computing layouts from the header gets the library's layout. */
#include "llmtrain.h"

#include <stdio.h>

int main(void)
{
    int bad = 0;
    if (llmt_sizeof(LLMT_TYPE_TENSOR) != sizeof(llmt_tensor)) bad = 1;
    if (llmt_sizeof(LLMT_TYPE_CONTEXT_OPTS) != sizeof(llmt_context_opts)) bad = 1;
    if (llmt_sizeof(LLMT_TYPE_ALLOCATOR) != sizeof(llmt_allocator)) bad = 1;
    if ((llmt_abi_version() >> 16) != LLMT_ABI_VERSION_MAJOR) bad = 1;
    printf("header_c99: %s\n", bad ? "FAIL" : "ok");
    return bad;
}
