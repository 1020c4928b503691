// bf16 GEMM entry points: the configuration the problem size picks (gemm_select.cu), instantiated for the
// operands' memory order.
#include "gemm.h"
#include "gemm_launch.cuh"
#include "gemm_select.cuh"

namespace tk_gemm {
namespace {

using kittens::bf16;

template <major AM, major BM_, gemm_config C, typename T_OUT = bf16> using bf16_gemm = gemm<bf16, T_OUT, AM, BM_, C>;

// The bias epilogue exists for the nn.Linear layout (both operands K-major) only.
template <major AM, major BM_, bool BIAS = false>
cudaError_t run(const void *a, const void *b, void *c, int M, int N, int K, cudaStream_t stream, const void *bias = nullptr) {
    switch (pick_bf16(M, N, K)) {
    case config_id::small: return launch_gemm<bf16_gemm<AM, BM_, configs::small(BIAS)>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    case config_id::tiny: return launch_gemm<bf16_gemm<AM, BM_, configs::tiny(BIAS)>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    case config_id::hinted: return launch_gemm<bf16_gemm<AM, BM_, configs::hinted(BIAS)>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    case config_id::resident: return launch_gemm<bf16_gemm<AM, BM_, configs::resident(BIAS)>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    default: return launch_gemm<bf16_gemm<AM, BM_, configs::big(BIAS)>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    }
}

// Each range's fp32 partial block added into C. (A function rather than an alias: nvcc's host pass loses an alias
// template's class-type argument when non-template code names it.)
template <major AM, major BM_>
cudaError_t run_split(const void *a, const void *b, float *c, int M, int N, int K, int splits, cudaStream_t stream) {
    return launch_gemm<bf16_gemm<AM, BM_, configs::split(), float>>(a, b, c, M, N, K, nullptr, nullptr, stream, nullptr, splits);
}

} // namespace

cudaError_t matmul_bf16_split_k(const void *a, bool a_kmajor, const void *b, bool b_kmajor, float *c, int M, int N, int K,
                                int splits, cudaStream_t stream) {
    if (a_kmajor && b_kmajor) return run_split<major::k, major::k>(a, b, c, M, N, K, splits, stream);
    if (a_kmajor) return run_split<major::k, major::mn>(a, b, c, M, N, K, splits, stream);
    if (b_kmajor) return run_split<major::mn, major::k>(a, b, c, M, N, K, splits, stream);
    return run_split<major::mn, major::mn>(a, b, c, M, N, K, splits, stream);
}

cudaError_t matmul_bf16(const void *a, bool a_kmajor, const void *b, bool b_kmajor, void *c, int M, int N, int K,
                        cudaStream_t stream, const void *bias) {
    if (bias) return a_kmajor && b_kmajor ? run<major::k, major::k, true>(a, b, c, M, N, K, stream, bias) : cudaErrorNotSupported;
    if (a_kmajor && b_kmajor) return run<major::k, major::k>(a, b, c, M, N, K, stream);
    if (a_kmajor) return run<major::k, major::mn>(a, b, c, M, N, K, stream);
    if (b_kmajor) return run<major::mn, major::k>(a, b, c, M, N, K, stream);
    return run<major::mn, major::mn>(a, b, c, M, N, K, stream);
}

} // namespace tk_gemm
