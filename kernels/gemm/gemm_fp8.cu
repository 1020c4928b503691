// fp8 (e4m3) scaled GEMM entry point with torch._scaled_mm's scale semantics (per tensor or row-wise): the block size
// the problem picks (gemm_select.cu), instantiated for the output type and the kind of scales.
#include "gemm.h"
#include "gemm_launch.cuh"
#include "gemm_select.cuh"

namespace tk_gemm {
namespace {

using kittens::fp8e4m3;

// fp8 wgmma reads both operands K-major.
template <typename T_OUT, gemm_config C> using fp8_gemm = gemm<fp8e4m3, T_OUT, major::k, major::k, C>;

// VS: scale_b is a vector of N values and scale_a one value (a_step 0) or M values (a_step 1); otherwise one value
// each.
template <typename T_OUT, bool VS>
cudaError_t run(const void *a, const void *b, const float *scale_a, const float *scale_b, void *c, int M, int N, int K,
                int a_step, cudaStream_t stream) {
    constexpr bool FP32_OUT = sizeof(T_OUT) == 4;
    switch (pick_fp8(M, N, FP32_OUT)) {
    case config_id::tiny:
        return launch_gemm<fp8_gemm<T_OUT, configs::fp8_tiny(VS)>>(a, b, c, M, N, K, scale_a, scale_b, stream, nullptr, 1, a_step);
    case config_id::small:
        return launch_gemm<fp8_gemm<T_OUT, configs::fp8_small(VS)>>(a, b, c, M, N, K, scale_a, scale_b, stream, nullptr, 1, a_step);
    default:
        return launch_gemm<fp8_gemm<T_OUT, configs::fp8_big(FP32_OUT, VS)>>(a, b, c, M, N, K, scale_a, scale_b, stream, nullptr, 1,
                                                                             a_step);
    }
}
template <typename T_OUT>
cudaError_t run(const void *a, const void *b, const float *scale_a, const float *scale_b, void *c, int M, int N, int K,
                scales kind, cudaStream_t stream) {
    switch (kind) {
    case scales::per_tensor: return run<T_OUT, false>(a, b, scale_a, scale_b, c, M, N, K, 0, stream);
    case scales::per_column: return run<T_OUT, true>(a, b, scale_a, scale_b, c, M, N, K, 0, stream);
    case scales::per_row_and_column: return run<T_OUT, true>(a, b, scale_a, scale_b, c, M, N, K, 1, stream);
    }
    return cudaErrorInvalidValue;
}

} // namespace

cudaError_t scaled_mm_e4m3(const void *a, const void *b, const float *scale_a, const float *scale_b, void *c,
                           out_dtype out, int M, int N, int K, cudaStream_t stream, scales kind) {
    using namespace kittens;
    switch (out) {
    case out_dtype::bf16: return run<bf16>(a, b, scale_a, scale_b, c, M, N, K, kind, stream);
    case out_dtype::fp16: return run<half>(a, b, scale_a, scale_b, c, M, N, K, kind, stream);
    case out_dtype::fp32: return run<float>(a, b, scale_a, scale_b, c, M, N, K, kind, stream);
    }
    return cudaErrorInvalidValue;
}

} // namespace tk_gemm
