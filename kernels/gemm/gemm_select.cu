// The GEMM's selection heuristics, all in one place: the block size that fills the GPU, when the resident-B and the
// L2-hinted configurations pay, how many ranges split-K cuts a contraction into, and the debugging switch that
// forces a configuration.
#include <atomic>
#include <cstring>

#include <cuda_runtime.h>

#include "gemm.h"
#include "gemm_select.cuh"

namespace tk_gemm {
namespace {

int device_sms() {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n > 0 ? n : 132;
}

// The configuration force_config() set, as a config_id, or -1 for the shape-based choice: one relaxed load per call.
std::atomic<int> forced{-1};

constexpr int BF16_BYTES = 2;

// The largest blocks that still give at least half the SMs a block: small where big would leave more than half idle,
// tiny where even small would. Blocks that fill the GPU beat bigger ones here because a lone task cannot overlap its
// ring fill or its epilogue with anything.
config_id by_occupancy(const gemm_config &big, const gemm_config &small, int M, int N, int sms) {
    if (2 * num_tasks(small, M, N) <= sms) return config_id::tiny;
    if (2 * num_tasks(big, M, N) <= sms) return config_id::small;
    return config_id::big;
}

// Whether the resident-B configuration can run the problem (its panel holds K <= 256), and pays: each block's run of
// tasks down the columns should seldom cross into the next column, where the panel is reloaded with the ring stopped.
bool resident_fits(int M, int N, int K, int sms, bool forced_by_name) {
    constexpr gemm_config R = configs::resident();
    if (K > RESIDENT_B_SLICES * slice_k(BF16_BYTES)) return false;
    if (forced_by_name) return true;
    const int tiles_m = (M + block_m(R) - 1) / block_m(R), tiles = num_tasks(R, M, N);
    const int blocks = tiles < sms ? tiles : sms, run = (tiles + blocks - 1) / blocks;
    return tiles_m % run == 0 || 4 * run <= tiles_m;
}

} // namespace

bool force_config(const char *name) {
    static constexpr struct {
        const char *name;
        config_id id;
    } names[] = {{"big", config_id::big},     {"hinted", config_id::hinted}, {"resident", config_id::resident},
                 {"small", config_id::small}, {"tiny", config_id::tiny}};
    if (!name || !*name || std::strcmp(name, "auto") == 0) {
        forced.store(-1, std::memory_order_relaxed);
        return true;
    }
    for (const auto &n : names)
        if (std::strcmp(name, n.name) == 0) {
            forced.store(int(n.id), std::memory_order_relaxed);
            return true;
        }
    return false;
}

config_id pick_bf16(int M, int N, int K) {
    const int sms = device_sms();
    if (const int f = forced.load(std::memory_order_relaxed); f >= 0) {
        const config_id id = config_id(f);
        return id == config_id::resident && !resident_fits(M, N, K, sms, true) ? config_id::hinted : id;
    }
    const config_id size = by_occupancy(configs::big(), configs::small(), M, N, sms);
    if (size != config_id::big) return size;
    if (resident_fits(M, N, K, sms, false)) return config_id::resident;
    // Short K: the streamed-out C would evict the operand panels other blocks are about to read; at long K the hints
    // cost a little, so long contractions keep the plain configuration.
    if (K <= 512) return config_id::hinted;
    return config_id::big;
}

config_id pick_fp8(int M, int N, bool fp32_out) {
    if (const int f = forced.load(std::memory_order_relaxed); f >= 0) {
        const config_id id = config_id(f);
        return id == config_id::small || id == config_id::tiny ? id : config_id::big;
    }
    return by_occupancy(configs::fp8_big(fp32_out, false), configs::fp8_small(false), M, N, device_sms());
}

// A contraction at least 16 K-slices long per range, over as many ranges as give every SM a block, when even the tiny
// blocks leave half the SMs idle (the weight gradient of a small Linear over many tokens: 512 x 512 over 8192 tokens
// is 32 tiny blocks).
int matmul_bf16_splits(int M, int N, int K) {
    constexpr gemm_config S = configs::split();
    const int sms = device_sms();
    const int tiles = num_tasks(S, M, N);
    const int k_iters = (K + slice_k(BF16_BYTES) - 1) / slice_k(BF16_BYTES);
    if (2 * tiles > sms || k_iters < 32) return 1;
    const int by_sms = sms / tiles, by_length = k_iters / 16;
    const int splits = by_sms < by_length ? by_sms : by_length;
    return splits > 1 ? splits : 1;
}

} // namespace tk_gemm
