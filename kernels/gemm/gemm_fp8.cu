// fp8 (e4m3) scaled GEMM entry point, torch._scaled_mm's per-tensor semantics.
#include "gemm.h"
#include "gemm_launch.cuh"

namespace tk_gemm {

cudaError_t scaled_mm_e4m3(const void *a, const void *b, const float *scale_a, const float *scale_b, void *c,
                           out_dtype out, int M, int N, int K, cudaStream_t stream) {
    using namespace kittens;
    switch (out) {
    case out_dtype::bf16:
        return launch_gemm<gemm<fp8e4m3, bf16, major::k, major::k>>(a, b, c, M, N, K, scale_a, scale_b, stream);
    case out_dtype::fp16:
        return launch_gemm<gemm<fp8e4m3, half, major::k, major::k>>(a, b, c, M, N, K, scale_a, scale_b, stream);
    case out_dtype::fp32:
        // fp32 output: a 128-wide block keeps accumulators plus the stashed output within the register budget
        return launch_gemm<gemm<fp8e4m3, float, major::k, major::k, 128, 4, 128>>(a, b, c, M, N, K, scale_a, scale_b, stream);
    }
    return cudaErrorInvalidValue;
}

} // namespace tk_gemm
