// expect-error: mma_AB: K mismatch
// A is 16 x 32 but B is 16 x 16: the inner dimensions disagree.
#include "kittens.cuh"
using namespace kittens;

__global__ void k() {
    rt_fl<16, 16> d;
    rt_bf<16, 32> a;
    rt_bf<16, 16, col_l> b;
    mma_AB(d, a, b, d);
}
