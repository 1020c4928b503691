// expect-error: transpose_sep: dst must have src's shape transposed
// The transpose of a 16 x 32 tile is 32 x 16.
#include "kittens.cuh"
using namespace kittens;

__global__ void k(float *out) {
    rt_fl<16, 32> a;
    rt_fl<16, 32> b;
    zero(a);
    transpose_sep(b, a);
    out[threadIdx.x] = b.tiles[0][0].data[0].x;
}
