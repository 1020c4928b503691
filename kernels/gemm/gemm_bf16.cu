// bf16 GEMM entry point: picks the kernel variant for the operands' memory order.
#include "gemm.h"
#include "gemm_launch.cuh"

namespace tk_gemm {

cudaError_t matmul_bf16(const void *a, bool a_kmajor, const void *b, bool b_kmajor, void *c, int M, int N, int K,
                        cudaStream_t stream) {
    using kittens::bf16;
    if (a_kmajor && b_kmajor) return launch_gemm<gemm<bf16, bf16, major::k, major::k>>(a, b, c, M, N, K, nullptr, nullptr, stream);
    if (a_kmajor) return launch_gemm<gemm<bf16, bf16, major::k, major::mn>>(a, b, c, M, N, K, nullptr, nullptr, stream);
    if (b_kmajor) return launch_gemm<gemm<bf16, bf16, major::mn, major::k>>(a, b, c, M, N, K, nullptr, nullptr, stream);
    return launch_gemm<gemm<bf16, bf16, major::mn, major::mn>>(a, b, c, M, N, K, nullptr, nullptr, stream);
}

} // namespace tk_gemm
