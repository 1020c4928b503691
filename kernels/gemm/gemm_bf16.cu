// bf16 GEMM entry point: picks the kernel configuration for the problem size and the kernel variant for
// the operands' memory order.
#include <cstdlib>
#include <string>

#include "gemm.h"
#include "gemm_launch.cuh"

namespace tk_gemm {
namespace {

using kittens::bf16;

// 128 x 256 blocks, 4-stage ring, 64-column epilogue pieces: the general configuration.
template <major AM, major BM_> using big = gemm<bf16, bf16, AM, BM_, 256, 4, 64>;
// 128 x 128 blocks, 5-stage ring: twice the tasks, for problems too small to fill the GPU with big blocks.
template <major AM, major BM_> using small = gemm<bf16, bf16, AM, BM_, 128, 5, 128>;

int sm_count() {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n > 0 ? n : 132;
}

// TK_OPS_GEMM_CONFIG=big|small forces a configuration (for tuning); by default the size decides.
bool use_small(int M, int N) {
    static const char *forced = std::getenv("TK_OPS_GEMM_CONFIG");
    if (forced) return std::string(forced) == "small";
    return 2 * big<major::k, major::k>::num_tasks(M, N) <= sm_count();
}

template <major AM, major BM_>
cudaError_t run(const void *a, const void *b, void *c, int M, int N, int K, cudaStream_t stream) {
    if (use_small(M, N)) return launch_gemm<small<AM, BM_>>(a, b, c, M, N, K, nullptr, nullptr, stream);
    return launch_gemm<big<AM, BM_>>(a, b, c, M, N, K, nullptr, nullptr, stream);
}

} // namespace

cudaError_t matmul_bf16(const void *a, bool a_kmajor, const void *b, bool b_kmajor, void *c, int M, int N, int K,
                        cudaStream_t stream) {
    if (a_kmajor && b_kmajor) return run<major::k, major::k>(a, b, c, M, N, K, stream);
    if (a_kmajor) return run<major::k, major::mn>(a, b, c, M, N, K, stream);
    if (b_kmajor) return run<major::mn, major::k>(a, b, c, M, N, K, stream);
    return run<major::mn, major::mn>(a, b, c, M, N, K, stream);
}

} // namespace tk_gemm
