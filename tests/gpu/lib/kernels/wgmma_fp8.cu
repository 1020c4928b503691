// fp8 wgmma (k32, e4m3 / e5m2, mixed allowed): only the all-K-major ABt form exists in hardware.
#include "wgmma_case.cuh"

using namespace wgmma_test;

TK_TEST_REGISTER(wgmma_fp8) {
    add<fp8e4m3, fp8e4m3, 1, 64, 64, ABt, false>();   // 64 B swizzle
    add<fp8e4m3, fp8e4m3, 1, 256, 128, ABt, false>(); // 128 B swizzle, four K steps in one chunk
    add<fp8e4m3, fp8e4m3, 2, 128, 256, ABt, false>(); // two chunks along K
    add<fp8e4m3, fp8e4m3, 1, 16, 32, ABt, false>();   // 32 B swizzle
    add<fp8e5m2, fp8e5m2, 1, 128, 64, ABt, false>();
    add<fp8e4m3, fp8e5m2, 1, 64, 96, ABt, false>();   // 32 B swizzle, three chunks
}
