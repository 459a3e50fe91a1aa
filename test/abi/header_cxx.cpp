// llmtrain.h alone, compiled as C++ (-std=c++11 -pedantic-errors): the
// extern "C" block and every declaration must be valid C++.
#include "llmtrain.h"

#include <cstdio>

static_assert(sizeof(llmt_status) == 4, "llmt_status is an int32 enum");

int main()
{
    llmt_context *ctx = nullptr;
    if (llmt_context_create(nullptr, &ctx) != LLMT_OK)
        return 1;
    llmt_context_destroy(ctx);
    int bad = llmt_sizeof(LLMT_TYPE_TENSOR) != sizeof(llmt_tensor);
    std::printf("header_cxx: %s\n", bad ? "FAIL" : "ok");
    return bad;
}
