// expect-error: mma_AB: B must be a column-layout register tile (swap_layout it first)
// B for mma_AB must be K x N in the column layout; a row-layout B is a compile error.
#include "kittens.cuh"
using namespace kittens;

__global__ void k() {
    rt_fl<16, 16> d;
    rt_bf<16, 16> a;
    rt_bf<16, 16, row_l> b;
    mma_AB(d, a, b, d);
}
