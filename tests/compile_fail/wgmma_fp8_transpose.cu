// expect-error: fp8 wgmma has no transpose
// fp8 operands must both be K-major: mma_AB would need the transpose bit on B.
#include "kittens.cuh"
using namespace kittens;
__global__ void k() {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    auto &a = al.allocate<st_fp8e4m3<64, 64>>();
    auto &b = al.allocate<st_fp8e4m3<64, 64>>();
    rt_fl<16, 64> d;
    warpgroup::mma_AB(d, a, b);
}
