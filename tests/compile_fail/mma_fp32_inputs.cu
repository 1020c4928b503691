// expect-error: mma_AB: A and B must be bf16 or fp16 register tiles
// mma.sync m16n8k16 has no fp32 inputs.
#include "kittens.cuh"
using namespace kittens;

__global__ void k() {
    rt_fl<16, 16> d;
    rt_fl<16, 16> a;
    rt_fl<16, 16, col_l> b;
    mma_AB(d, a, b, d);
}
