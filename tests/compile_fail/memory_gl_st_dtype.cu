// expect-error: need the same element type on both sides
// Global <-> shared copies move raw 16-byte units, so a bf16 tile cannot load a float tensor.
#include "kittens.cuh"
using namespace kittens;
__global__ void k(gl<float, 1, 1, -1, -1> g) {
    __shared__ st_bf<32, 32> s;
    load(s, g, {0, 0});
}
