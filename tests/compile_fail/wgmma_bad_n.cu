// expect-error: wgmma N must be a multiple of 16 between 16 and 256
// One instruction covers at most 256 output columns.
#include "kittens.cuh"
using namespace kittens;
__global__ void k() {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    auto &a = al.allocate<st_bf<64, 64>>();
    auto &b = al.allocate<st_bf<272, 64>>();
    rt_fl<16, 272> d;
    warpgroup::mma_ABt(d, a, b);
}
