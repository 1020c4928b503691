// expect-error: vector lengths must match
#include "kittens.cuh"
using namespace kittens;
__global__ void k() {
    __shared__ sv_fl<64> s;
    rv_fl<32> r;
    load(r, s);
}
