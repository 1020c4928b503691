// fp8 (e4m3) scaled GEMM entry point with torch._scaled_mm's scale semantics (per tensor or row-wise): picks the
// block size for the problem and the kernel for the output type and the kind of scales.
#include "gemm.h"
#include "gemm_launch.cuh"
#include "gemm_select.cuh"

namespace tk_gemm {
namespace {

using kittens::fp8e4m3;
constexpr major K_ = major::k; // fp8 wgmma reads both operands K-major

// VS: per-row / per-column scale vectors (VECTOR_SCALES) instead of one scale per operand.
// 128 x 256 blocks, 4-stage ring; with an fp32 output 128 x 128, which keeps the accumulators plus the stashed
// output within the register budget.
template <typename T_OUT, bool VS>
using big = gemm<fp8e4m3, T_OUT, K_, K_, sizeof(T_OUT) == 4 ? 128 : 256, 4, sizeof(T_OUT) == 4 ? 128 : 64, false, 2, 16,
                 false, false, 1, false, 0, VS>;
// 128 x 128 blocks, 5-stage ring, and 64 x 128 blocks with one consumer, 6-stage ring: the bf16 entry point's
// small and tiny configurations, for problems that would leave SMs idle with bigger blocks.
template <typename T_OUT, bool VS> using small = gemm<fp8e4m3, T_OUT, K_, K_, 128, 5, 128, false, 2, 16, false, false, 1, false, 0, VS>;
template <typename T_OUT, bool VS> using tiny = gemm<fp8e4m3, T_OUT, K_, K_, 128, 6, 128, false, 1, 16, false, false, 1, false, 0, VS>;

// TK_OPS_GEMM_CONFIG=big|small|tiny forces a block size (the bf16 entry point's other names mean big here).
template <typename T_OUT> block_size pick(int M, int N) {
    const std::string &forced = forced_config();
    if (forced == "small") return block_size::small;
    if (forced == "tiny") return block_size::tiny;
    if (!forced.empty()) return block_size::big;
    return by_occupancy<big<T_OUT, false>, small<T_OUT, false>>(M, N, device_sms());
}

// VS: scale_b is a vector of N values and scale_a one value (a_step 0) or M values (a_step 1).
template <typename T_OUT, bool VS>
cudaError_t run(const void *a, const void *b, const float *scale_a, const float *scale_b, void *c, int M, int N, int K,
                int a_step, cudaStream_t stream) {
    switch (pick<T_OUT>(M, N)) {
    case block_size::tiny: return launch_gemm<tiny<T_OUT, VS>>(a, b, c, M, N, K, scale_a, scale_b, stream, nullptr, 1, a_step);
    case block_size::small: return launch_gemm<small<T_OUT, VS>>(a, b, c, M, N, K, scale_a, scale_b, stream, nullptr, 1, a_step);
    default: return launch_gemm<big<T_OUT, VS>>(a, b, c, M, N, K, scale_a, scale_b, stream, nullptr, 1, a_step);
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
