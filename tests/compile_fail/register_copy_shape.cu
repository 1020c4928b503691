// expect-error: copy: register tiles must have the same shape
// copy converts element types, not shapes.
#include "kittens.cuh"
using namespace kittens;

__global__ void k(float *out) {
    rt_fl<16, 32> a;
    rt_bf<32, 16> b;
    zero(a);
    copy(b, a);
    out[threadIdx.x] = float(b.tiles[0][0].data[0].x);
}
