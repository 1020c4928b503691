// bf16 GEMM entry point: picks the kernel configuration for the problem size and the kernel variant for
// the operands' memory order.
#include "gemm.h"
#include "gemm_launch.cuh"
#include "gemm_select.cuh"

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
// Contractions of at most 256: the block column's B panel stays in shared memory (RESIDENT_B), the ring streams A
// alone, blocks take runs of tasks down a column, and all blocks write at once (one phase measured better than two
// here), and the A rows two tasks ahead are prefetched into L2. Measured against hinted in one process
// (tools/gemm_resident_ab.cu, H100, time ratio, warm inputs / fresh inputs as the bench uses): 4096x4096x256 0.93 /
// 0.96, 8192x8192x256 0.89 / 0.91, 4000x3000x200 0.82-0.86 / 0.85-0.87.
template <major AM, major BM_, bool BIAS = false> using resident = gemm<bf16, bf16, AM, BM_, 256, 4, 64, true, 2, 16, BIAS, false, 1, true, 2>;
// 128 x 128 blocks, 5-stage ring: twice the tasks, for problems too small to fill the GPU with big blocks.
template <major AM, major BM_, bool BIAS = false> using small = gemm<bf16, bf16, AM, BM_, 128, 5, 128, false, 2, 16, BIAS>;

// 64 x 128 blocks with one consumer warpgroup, 6-stage ring: for problems that would leave SMs idle even with
// 128 x 128 blocks.
template <major AM, major BM_, bool BIAS = false> using tiny = gemm<bf16, bf16, AM, BM_, 128, 6, 128, false, 1, 16, BIAS>;

// The tiny blocks with an fp32 output that each task adds its partial sum into (split-K).
template <major AM, major BM_> using split = gemm<bf16, float, AM, BM_, 128, 6, 128, false, 1, 16, false, true>;

enum class config { big, hinted, small, tiny, resident };

// Whether the resident-B configuration can run the problem (its panel holds K <= 256), and pays: each block's run of
// tasks down the columns should seldom cross into the next column, where the panel is reloaded with the ring stopped
// (4096 x 4096 x 256: runs of 4 in columns of 32, none cross; 640 x 16384 x 256: runs of 3 in columns of 5, measured
// 3-4% slower than hinted).
bool resident_fits(int M, int N, int K, int sms, bool forced) {
    using R = resident<major::k, major::k>;
    if (K > R::RESIDENT_SLICES * R::BK) return false;
    if (forced) return true;
    const int tiles_m = (M + R::BM - 1) / R::BM, tiles = R::num_tasks(M, N);
    const int blocks = tiles < sms ? tiles : sms, run = (tiles + blocks - 1) / blocks;
    return tiles_m % run == 0 || 4 * run <= tiles_m;
}

// TK_OPS_GEMM_CONFIG=big|hinted|small|tiny|resident forces a configuration (for tuning; resident falls back to hinted
// where K > 256); by default the shape decides.
config pick(int M, int N, int K) {
    const std::string &forced = forced_config();
    const int sms = device_sms();
    if (!forced.empty()) {
        if (forced == "resident") return resident_fits(M, N, K, sms, true) ? config::resident : config::hinted;
        return forced == "small" ? config::small : forced == "hinted" ? config::hinted : forced == "tiny" ? config::tiny : config::big;
    }
    switch (by_occupancy<big<major::k, major::k>, small<major::k, major::k>>(M, N, sms)) {
    case block_size::tiny: return config::tiny;
    case block_size::small: return config::small;
    case block_size::big: break;
    }
    // Short K: the streamed-out C would evict the operand panels the other blocks are about to read (measured,
    // tools/gemm_sweep.py: 8192x8192x256 +5-8%, 4096x4096x256 +3%, 4096x4096x512 +2%; at 8192^3 the hints cost
    // 1-2%, so long K keeps the plain configuration).
    if (resident_fits(M, N, K, sms, false)) return config::resident;
    if (K <= 512) return config::hinted;
    return config::big;
}

template <major AM, major BM_, bool BIAS = false>
cudaError_t run(const void *a, const void *b, void *c, int M, int N, int K, cudaStream_t stream, const void *bias = nullptr) {
    switch (pick(M, N, K)) {
    case config::small: return launch_gemm<small<AM, BM_, BIAS>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    case config::tiny: return launch_gemm<tiny<AM, BM_, BIAS>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    case config::hinted: return launch_gemm<hinted<AM, BM_, BIAS>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    case config::resident: return launch_gemm<resident<AM, BM_, BIAS>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    default: return launch_gemm<big<AM, BM_, BIAS>>(a, b, c, M, N, K, nullptr, nullptr, stream, bias);
    }
}

} // namespace

// A contraction at least 16 K-slices long per range, over as many ranges as give every SM a block, when even
// the tiny blocks leave half the SMs idle (the weight gradient of a small Linear over many tokens: 512 x 512
// over 8192 tokens is 32 tiny blocks).
int matmul_bf16_splits(int M, int N, int K) {
    const int sms = device_sms();
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
