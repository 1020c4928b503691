// wgmma with A M-major (mma_AtB / mma_AtBt and the mm forms): a = st<T, K, 64H>, read with the
// transpose bit; row slab h of the output is column chunk h of the tile.
#include "wgmma_case.cuh"

using namespace wgmma_test;

template <typename T> void add_at() {
    add<T, T, 1, 64, 64, AtB, false>();
    add<T, T, 2, 128, 32, AtB, false>();
    add<T, T, 1, 256, 64, AtB, false>();
    add<T, T, 1, 48, 32, AtB, false>();
    add<T, T, 1, 96, 64, AtB, false>(); // three 64 B atoms along N (attention's dQ = dS K at D = 96)
    add<T, T, 1, 64, 64, AtBt, false>();
    add<T, T, 2, 128, 64, AtBt, false>();
    add<T, T, 1, 16, 32, AtBt, false>();
}

TK_TEST_REGISTER(wgmma_at) {
    add_at<bf16>();
    add_at<half>();
}
