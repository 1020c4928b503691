// expect-error: register tiles hold float, bf16, half or fp8 elements
// The mma fragments and packed pairs exist only for floating-point element types.
#include "kittens.cuh"
using namespace kittens;

__global__ void kernel(float *out) {
    rt<int, 16, 16> tile;
    out[threadIdx.x] = float(sizeof(tile));
}
