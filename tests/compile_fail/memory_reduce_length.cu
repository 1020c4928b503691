// expect-error: row reductions need one vector element per tile row
#include "kittens.cuh"
using namespace kittens;
__global__ void k() {
    __shared__ st_fl<32, 64> a;
    __shared__ sv_fl<64> v;
    row_sum(v, a);
}
