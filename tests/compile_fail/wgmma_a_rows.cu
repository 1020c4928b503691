// expect-error: shared A must have 64*H rows
// A 128-row A tile needs an accumulator of 32 rows per warp (H = 2), not 16.
#include "kittens.cuh"
using namespace kittens;
__global__ void k() {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    auto &a = al.allocate<st_bf<128, 64>>();
    auto &b = al.allocate<st_bf<64, 64>>();
    rt_fl<16, 64> d;
    warpgroup::mma_ABt(d, a, b);
}
