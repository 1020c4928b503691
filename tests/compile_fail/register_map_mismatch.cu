// expect-error: bin_map: dst, a and b must be the same tile type
// Element-wise maps do not convert: mixing fp32 and bf16 tiles is an error.
#include "kittens.cuh"
using namespace kittens;

__global__ void k(float *out) {
    rt_fl<16, 16> a;
    rt_bf<16, 16> b;
    zero(a);
    zero(b);
    add(a, a, b);
    out[threadIdx.x] = a.tiles[0][0].data[0].x;
}
