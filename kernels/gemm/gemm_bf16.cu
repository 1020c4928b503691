// bf16 GEMM entry points: the problem's configuration (named, or the one its size picks: gemm_configs.cuh),
// instantiated for the operands' memory order.
#include "gemm.h"
#include "gemm_launch.cuh"

namespace tk_gemm {
namespace {

using kittens::bf16;

template <major AM, major BM_, gemm_config C, typename T_OUT = bf16> using bf16_gemm = gemm<bf16, T_OUT, AM, BM_, C>;

// The bias epilogue exists for the nn.Linear layout (both operands K-major) only.
template <major AM, major BM_, bool BIAS = false> cudaError_t run(const gemm_problem &p, cudaStream_t stream) {
    switch (matmul_bf16_config(p)) {
    case config_id::small: return launch_gemm<bf16_gemm<AM, BM_, configs::small(BIAS)>>(p, stream);
    case config_id::tiny: return launch_gemm<bf16_gemm<AM, BM_, configs::tiny(BIAS)>>(p, stream);
    case config_id::hinted: return launch_gemm<bf16_gemm<AM, BM_, configs::hinted(BIAS)>>(p, stream);
    case config_id::resident: return launch_gemm<bf16_gemm<AM, BM_, configs::resident(BIAS)>>(p, stream);
    default: return launch_gemm<bf16_gemm<AM, BM_, configs::big(BIAS)>>(p, stream);
    }
}

// Each range's fp32 partial block added into C. (A function rather than an alias: nvcc's host pass loses an alias
// template's class-type argument when non-template code names it.)
template <major AM, major BM_> cudaError_t run_split(const gemm_problem &p, cudaStream_t stream) {
    return launch_gemm<bf16_gemm<AM, BM_, configs::split(), float>>(p, stream);
}

} // namespace

config_id matmul_bf16_config(const gemm_problem &p) {
    return p.config != config_id::automatic ? p.config : pick_bf16(p.M, p.N, p.K, device_sms());
}

int matmul_bf16_splits(const gemm_problem &p) { return pick_splits(p.M, p.N, p.K, device_sms()); }

cudaError_t matmul_bf16(const gemm_problem &p, cudaStream_t stream) {
    if (p.splits > 1) {
        if (p.bias) return cudaErrorNotSupported;
        if (p.config != config_id::automatic) return cudaErrorInvalidValue;
        if (p.a_kmajor && p.b_kmajor) return run_split<major::k, major::k>(p, stream);
        if (p.a_kmajor) return run_split<major::k, major::mn>(p, stream);
        if (p.b_kmajor) return run_split<major::mn, major::k>(p, stream);
        return run_split<major::mn, major::mn>(p, stream);
    }
    if (p.bias) return p.a_kmajor && p.b_kmajor ? run<major::k, major::k, true>(p, stream) : cudaErrorNotSupported;
    if (p.a_kmajor && p.b_kmajor) return run<major::k, major::k>(p, stream);
    if (p.a_kmajor) return run<major::k, major::mn>(p, stream);
    if (p.b_kmajor) return run<major::mn, major::k>(p, stream);
    return run<major::mn, major::mn>(p, stream);
}

} // namespace tk_gemm
