// expect-error: register vector length must be a positive multiple of 16
// Register vectors are laid out along a tile's rows or columns, which come in 16s.
#include "kittens.cuh"
using namespace kittens;

__global__ void kernel(float *out) {
    rv_fl<8> vec;
    out[threadIdx.x] = float(sizeof(vec));
}
