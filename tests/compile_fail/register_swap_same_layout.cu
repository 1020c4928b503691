// expect-error: swap_layout: dst must have the opposite layout of src
// swap_layout goes row -> col or col -> row, never row -> row.
#include "kittens.cuh"
using namespace kittens;

__global__ void k(float *out) {
    rt_fl<16, 16> a, b;
    zero(a);
    swap_layout(b, a);
    out[threadIdx.x] = b.tiles[0][0].data[0].x;
}
