// expect-error: wgmma runs on a warpgroup
// wgmma is issued by exactly four warps; a group of two cannot call it.
#include "kittens.cuh"
using namespace kittens;
__global__ void k() {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    auto &a = al.allocate<st_bf<64, 64>>();
    auto &b = al.allocate<st_bf<64, 64>>();
    rt_fl<16, 64> d;
    group<2>::mma_ABt(d, a, b);
}
