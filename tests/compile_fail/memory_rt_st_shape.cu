// expect-error: register and shared tiles must have the same shape
// A register tile loaded from a shared tile of another shape is rejected at compile time.
#include "kittens.cuh"
using namespace kittens;
__global__ void k() {
    __shared__ st_bf<64, 64> s;
    rt_bf<32, 32> r;
    load(r, s);
}
