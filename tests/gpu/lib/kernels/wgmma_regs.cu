// wgmma with A in registers (each warp holds its 16*H rows as rt<T, 16H, K, row_l>), B in shared
// memory either K-major (ABt) or N-major (AB).
#include "wgmma_case.cuh"

using namespace wgmma_test;

template <typename T> void add_regs() {
    add<T, T, 1, 64, 64, ABt, true>();
    add<T, T, 2, 128, 64, ABt, true>();
    add<T, T, 1, 256, 32, ABt, true>();
    add<T, T, 1, 256, 64, AB, true>();
    add<T, T, 2, 16, 32, AB, true>();
    add<T, T, 1, 96, 48, AB, true>();
    add<T, T, 1, 256, 80, AB, true>(); // B of 80 rows (attention's O += P V at D = 256)
}

TK_TEST_REGISTER(wgmma_regs) {
    add_regs<bf16>();
    add_regs<half>();
}
