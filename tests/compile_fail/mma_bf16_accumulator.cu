// expect-error: mma_AtBt: D and C (the accumulators) must be fp32 register tiles
// The accumulator must be fp32.
#include "kittens.cuh"
using namespace kittens;

__global__ void k() {
    rt_bf<16, 16> d;
    rt_bf<16, 16, col_l> a;
    rt_bf<16, 16> b;
    mma_AtBt(d, a, b, d);
}
