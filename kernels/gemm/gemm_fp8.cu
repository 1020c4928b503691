// fp8 (e4m3) scaled GEMM entry point with torch._scaled_mm's scale semantics (per tensor or row-wise): the problem's
// block size (named, or the one its size picks: gemm_configs.cuh), instantiated for the output type and the kind of
// scales.
#include "gemm.h"
#include "gemm_launch.cuh"

namespace tk_gemm {
namespace {

using kittens::fp8e4m3;

// fp8 wgmma reads both operands K-major.
template <typename T_OUT, gemm_config C> using fp8_gemm = gemm<fp8e4m3, T_OUT, major::k, major::k, C>;

// VS: scale_b is a vector of N values (and scale_a one value or M of them); otherwise one value each.
template <typename T_OUT, bool VS> cudaError_t run(const scaled_mm_problem &p, cudaStream_t stream) {
    constexpr bool FP32_OUT = sizeof(T_OUT) == 4;
    switch (scaled_mm_e4m3_config(p)) {
    case config_id::tiny: return launch_gemm<fp8_gemm<T_OUT, configs::fp8_tiny(VS)>>(p, stream);
    case config_id::small: return launch_gemm<fp8_gemm<T_OUT, configs::fp8_small(VS)>>(p, stream);
    case config_id::big: return launch_gemm<fp8_gemm<T_OUT, configs::fp8_big(FP32_OUT, VS)>>(p, stream);
    default: return cudaErrorInvalidValue;
    }
}
template <typename T_OUT> cudaError_t run(const scaled_mm_problem &p, cudaStream_t stream) {
    switch (p.scaling) {
    case scales::per_tensor: return run<T_OUT, false>(p, stream);
    case scales::per_column:
    case scales::per_row_and_column: return run<T_OUT, true>(p, stream);
    }
    return cudaErrorInvalidValue;
}

} // namespace

config_id scaled_mm_e4m3_config(const scaled_mm_problem &p) {
    return p.config != config_id::automatic ? p.config
                                            : pick_fp8(p.M, p.N, p.type == dtype::fp32, device_sms());
}

cudaError_t scaled_mm_e4m3(const scaled_mm_problem &p, cudaStream_t stream) {
    using namespace kittens;
    switch (p.type) {
    case dtype::bf16: return run<bf16>(p, stream);
    case dtype::fp16: return run<half>(p, stream);
    case dtype::fp32: return run<float>(p, stream);
    }
    return cudaErrorInvalidValue;
}

} // namespace tk_gemm
