// bf16 GEMM entry point: picks the kernel variant for the operands' memory order.
#include <cstdlib>

#include "gemm.h"
#include "gemm_launch.cuh"

namespace tk_gemm {
namespace {

using kittens::bf16;

// Tuning experiment: TK_OPS_GEMM_VARIANT selects a tile/pipeline configuration (see docs/perf-notes.md).
int variant() {
    static int v = [] {
        const char *s = std::getenv("TK_OPS_GEMM_VARIANT");
        return s ? std::atoi(s) : 0;
    }();
    return v;
}

template <major AM, major BM_>
cudaError_t run(const void *a, const void *b, void *c, int M, int N, int K, cudaStream_t stream) {
    switch (variant()) {
    case 1: return launch_gemm<gemm<bf16, bf16, AM, BM_, 256, 3, 256>>(a, b, c, M, N, K, nullptr, nullptr, stream);
    case 2: return launch_gemm<gemm<bf16, bf16, AM, BM_, 256, 3, 64>>(a, b, c, M, N, K, nullptr, nullptr, stream);
    case 3: return launch_gemm<gemm<bf16, bf16, AM, BM_, 128, 5, 128>>(a, b, c, M, N, K, nullptr, nullptr, stream);
    default: return launch_gemm<gemm<bf16, bf16, AM, BM_, 256, 4, 64>>(a, b, c, M, N, K, nullptr, nullptr, stream);
    }
}

} // namespace

cudaError_t matmul_bf16(const void *a, bool a_kmajor, const void *b, bool b_kmajor, void *c, int M, int N, int K,
                        cudaStream_t stream) {
    if (a_kmajor && b_kmajor) return run<major::k, major::k>(a, b, c, M, N, K, stream);
    if (a_kmajor) return run<major::k, major::mn>(a, b, c, M, N, K, stream);
    if (b_kmajor) return launch_gemm<gemm<bf16, bf16, major::mn, major::k>>(a, b, c, M, N, K, nullptr, nullptr, stream);
    return launch_gemm<gemm<bf16, bf16, major::mn, major::mn>>(a, b, c, M, N, K, nullptr, nullptr, stream);
}

} // namespace tk_gemm
