// expect-error: mma_AtB: N mismatch
// B is K x 32 but D has 16 columns.
#include "kittens.cuh"
using namespace kittens;

__global__ void k() {
    rt_fl<16, 16> d;
    rt_hf<16, 16, col_l> a;
    rt_hf<16, 32, col_l> b;
    mma_AtB(d, a, b, d);
}
