// expect-error: mma_AB: A and B must have the same element type
// bf16 times fp16 is not an instruction.
#include "kittens.cuh"
using namespace kittens;

__global__ void k() {
    rt_fl<16, 16> d;
    rt_bf<16, 16> a;
    rt_hf<16, 16, col_l> b;
    mma_AB(d, a, b, d);
}
