// expect-error: the accumulator must be a row-layout register tile
// A column-layout accumulator cannot receive the wgmma D fragment.
#include "kittens.cuh"
using namespace kittens;
__global__ void k() {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    auto &a = al.allocate<st_bf<64, 64>>();
    auto &b = al.allocate<st_bf<64, 64>>();
    rt_fl<16, 64, col_l> d;
    warpgroup::mma_ABt(d, a, b);
}
