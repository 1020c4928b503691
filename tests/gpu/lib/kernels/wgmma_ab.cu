// wgmma with B N-major (mma_AB / mm_AB): b = st<T, K, N> is read with the transpose bit, its
// swizzle atoms laid side by side along N (LBO) and stacked along K (SBO).
#include "wgmma_case.cuh"

using namespace wgmma_test;

template <typename T> void add_ab() {
    add<T, T, 1, 16, 64, AB, false>();  // B rows of 32 B: 32 B swizzle, one atom along N
    add<T, T, 1, 64, 64, AB, false>();
    add<T, T, 2, 128, 64, AB, false>(); // two 128 B atoms along N
    add<T, T, 1, 256, 32, AB, false>(); // four atoms along N; A K-major with 64 B swizzle
    add<T, T, 1, 96, 64, AB, false>();  // 64 B swizzle, three atoms along N
    add<T, T, 1, 48, 48, AB, false>();  // 32 B swizzle everywhere
}

TK_TEST_REGISTER(wgmma_ab) {
    add_ab<bf16>();
    add_ab<half>();
}
