// wgmma, both operands K-major (mma_ABt / mm_ABt): the GEMM and attention Q K^T form.
#include "wgmma_case.cuh"

using namespace wgmma_test;

template <typename T> void add_abt() {
    add<T, T, 1, 16, 64, ABt, false>();
    add<T, T, 1, 64, 64, ABt, false>();
    add<T, T, 1, 128, 128, ABt, false>(); // K spans two 128 B chunks
    add<T, T, 1, 256, 128, ABt, false>();
    add<T, T, 2, 128, 64, ABt, false>();
    add<T, T, 2, 64, 128, ABt, false>();
    add<T, T, 1, 48, 48, ABt, false>(); // 32 B swizzle, three chunks along K
    add<T, T, 1, 80, 32, ABt, false>(); // 64 B swizzle
    add<T, T, 1, 64, 96, ABt, false>(); // 64 B swizzle, three chunks along K (attention's scores at D = 96)
    add<T, T, 1, 80, 256, ABt, false>(); // 80 rows of B, four chunks along K (attention's scores at D = 256)
}

TK_TEST_REGISTER(wgmma_abt) {
    add_abt<bf16>();
    add_abt<half>();
}
