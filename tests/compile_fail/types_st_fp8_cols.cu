// expect-error: fp8 tiles need cols % 32 == 0
// A 16-column fp8 row is 16 bytes, narrower than the smallest (32-byte) swizzle TMA and wgmma share.
#include "kittens.cuh"
using namespace kittens;

__global__ void kernel(float *out) {
    __shared__ st_fp8e4m3<64, 16> tile;
    out[threadIdx.x] = float(sizeof(tile));
}
