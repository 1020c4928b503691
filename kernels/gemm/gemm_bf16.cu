// bf16 GEMM entry point: picks the kernel configuration for the problem size and the kernel variant for
// the operands' memory order.
#include <cstdlib>
#include <string>

#include "gemm.h"
#include "gemm_launch.cuh"

namespace tk_gemm {
namespace {

using kittens::bf16;

// Each configuration also comes with a bias epilogue (BIAS), for the nn.Linear layout (both operands K-major)
// only. With a bias the big blocks store 32-column pieces: the bias takes the shared memory of the other half.
// 128 x 256 blocks, 4-stage ring, 64-column epilogue pieces: the general configuration.
template <major AM, major BM_, bool BIAS = false> using big = gemm<bf16, bf16, AM, BM_, 256, 4, BIAS ? 32 : 64, false, 2, 16, BIAS>;
// The big configuration for short contractions: L2 eviction hints (operands evict_last, output evict_first), and
// the blocks' output writes in two phases half a task apart (measured at K = 256-512: +2-3.5%, H100).
template <major AM, major BM_, bool BIAS = false> using hinted = gemm<bf16, bf16, AM, BM_, 256, 4, BIAS ? 32 : 64, true, 2, 16, BIAS, false, 2>;
// 128 x 128 blocks, 5-stage ring: twice the tasks, for problems too small to fill the GPU with big blocks.
template <major AM, major BM_, bool BIAS = false> using small = gemm<bf16, bf16, AM, BM_, 128, 5, 128, false, 2, 16, BIAS>;

int device_attribute(cudaDeviceAttr attr, int fallback) {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, attr, dev);
    return n > 0 ? n : fallback;
}

// 64 x 128 blocks with one consumer warpgroup, 6-stage ring: for problems that would leave SMs idle even with
// 128 x 128 blocks.
template <major AM, major BM_, bool BIAS = false> using tiny = gemm<bf16, bf16, AM, BM_, 128, 6, 128, false, 1, 16, BIAS>;

// The tiny blocks with an fp32 output that each task adds its partial sum into (split-K).
template <major AM, major BM_> using split = gemm<bf16, float, AM, BM_, 128, 6, 128, false, 1, 16, false, true>;

enum class config { big, hinted, small, tiny };

// TK_OPS_GEMM_CONFIG=big|hinted|small|tiny forces a configuration (for tuning); by default the shape decides.
config pick(int M, int N, int K) {
    static const char *forced = std::getenv("TK_OPS_GEMM_CONFIG");
    if (forced) {
        std::string f(forced);
        return f == "small" ? config::small : f == "hinted" ? config::hinted : f == "tiny" ? config::tiny : config::big;
    }
    const int sms = device_attribute(cudaDevAttrMultiProcessorCount, 132);
    if (2 * small<major::k, major::k>::num_tasks(M, N) <= sms) return config::tiny;
    if (2 * big<major::k, major::k>::num_tasks(M, N) <= sms) return config::small;
    // Short K: the streamed-out C would evict the operand panels the other blocks are about to read (measured,
    // tools/gemm_sweep.py: 8192x8192x256 +5-8%, 4096x4096x256 +3%, 4096x4096x512 +2%; at 8192^3 the hints cost
    // 1-2%, so long K keeps the plain configuration).
    if (K <= 512) return config::hinted;
    return config::big;
}

template <major AM, major BM_, bool BIAS = false>
cudaError_t run(const void *a, const void *b, void *c, int M, int N, int K, cudaStream_t stream, const void *bias = nullptr) {
    switch (pick(M, N, K)) {
    case config::small: return launch_gemm<small<AM, BM_, BIAS>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    case config::tiny: return launch_gemm<tiny<AM, BM_, BIAS>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    case config::hinted: return launch_gemm<hinted<AM, BM_, BIAS>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    default: return launch_gemm<big<AM, BM_, BIAS>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    }
}

} // namespace

// A contraction at least 16 K-slices long per range, over as many ranges as give every SM a block, when even
// the tiny blocks leave half the SMs idle (the weight gradient of a small Linear over many tokens: 512 x 512
// over 8192 tokens is 32 tiny blocks).
int matmul_bf16_splits(int M, int N, int K) {
    const int sms = device_attribute(cudaDevAttrMultiProcessorCount, 132);
    const int tiles = split<major::k, major::k>::num_tasks(M, N);
    const int k_iters = (K + split<major::k, major::k>::BK - 1) / split<major::k, major::k>::BK;
    if (2 * tiles > sms || k_iters < 32) return 1;
    const int by_sms = sms / tiles, by_length = k_iters / 16;
    const int splits = by_sms < by_length ? by_sms : by_length;
    return splits > 1 ? splits : 1;
}

cudaError_t matmul_bf16_split_k(const void *a, bool a_kmajor, const void *b, bool b_kmajor, float *c, int M, int N, int K,
                                int splits, cudaStream_t stream) {
    if (a_kmajor && b_kmajor) return launch_gemm<split<major::k, major::k>>(a, b, c, M, N, K, nullptr, nullptr, stream, nullptr, splits);
    if (a_kmajor) return launch_gemm<split<major::k, major::mn>>(a, b, c, M, N, K, nullptr, nullptr, stream, nullptr, splits);
    if (b_kmajor) return launch_gemm<split<major::mn, major::k>>(a, b, c, M, N, K, nullptr, nullptr, stream, nullptr, splits);
    return launch_gemm<split<major::mn, major::mn>>(a, b, c, M, N, K, nullptr, nullptr, stream, nullptr, splits);
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
