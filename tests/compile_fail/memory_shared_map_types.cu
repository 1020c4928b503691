// expect-error: must be the same shared tile type
// Element-wise maps do not convert: mixing a float and a bf16 tile is an error (use copy()).
#include "kittens.cuh"
using namespace kittens;
__global__ void k() {
    __shared__ st_bf<32, 32> a;
    __shared__ st_fl<32, 32> b;
    add(a, a, b);
}
