// expect-error: register tile rows must be a positive multiple of 16
// Register tiles are grids of 16x16 mma fragments, so 24 rows cannot be represented.
#include "kittens.cuh"
using namespace kittens;

__global__ void kernel(float *out) {
    rt_fl<24, 16> tile;
    out[threadIdx.x] = float(sizeof(tile));
}
