// expect-error: mma_ABt: B must be a row-layout register tile
// mma_ABt takes B as N x K in the row layout.
#include "kittens.cuh"
using namespace kittens;

__global__ void k() {
    rt_fl<16, 32> d;
    rt_bf<16, 16> a;
    rt_bf<32, 16, col_l> b;
    mma_ABt(d, a, b, d);
}
