// expect-error: A and B must agree on K
#include "kittens.cuh"
using namespace kittens;
__global__ void k() {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    auto &a = al.allocate<st_bf<64, 64>>();
    auto &b = al.allocate<st_bf<64, 128>>();
    rt_fl<16, 64> d;
    warpgroup::mma_ABt(d, a, b);
}
