/* Version queries: the values of the library actually loaded. */
#include "internal.h"

#define LLMT_STR2(x) #x
#define LLMT_STR(x) LLMT_STR2(x)

LLMT_API const char *llmt_version(void)
{
    return LLMT_STR(LLMT_VERSION_MAJOR) "." LLMT_STR(LLMT_VERSION_MINOR) "."
        LLMT_STR(LLMT_VERSION_PATCH);
}

LLMT_API uint32_t llmt_version_number(void)
{
    return LLMT_VERSION_NUMBER;
}

LLMT_API uint32_t llmt_abi_version(void)
{
    return ((uint32_t)LLMT_ABI_VERSION_MAJOR << 16) | LLMT_ABI_VERSION_MINOR;
}
