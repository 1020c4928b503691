// Host-side helpers shared by the GEMM entry points for choosing a kernel configuration: the SM count, the
// block size that fills the GPU, and the TK_OPS_GEMM_CONFIG override used for tuning.
#pragma once

#include <cstdlib>
#include <string>

#include <cuda_runtime.h>

namespace tk_gemm {

inline int device_sms() {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n > 0 ? n : 132;
}

// TK_OPS_GEMM_CONFIG, read once ("" when unset): forces a configuration by name, where the entry point has it.
inline const std::string &forced_config() {
    static const std::string forced = [] {
        const char *e = std::getenv("TK_OPS_GEMM_CONFIG");
        return std::string(e ? e : "");
    }();
    return forced;
}

enum class block_size { big, small, tiny };

// The largest blocks that still give at least half the SMs a block: SMALL (128 x 128) where BIG (128 x 256) would
// leave more than half idle, TINY (64 x 128, one consumer) where even SMALL would. Blocks that fill the GPU beat
// bigger ones here because a lone task cannot overlap its ring fill or its epilogue with anything.
template <typename BIG, typename SMALL> block_size by_occupancy(int M, int N, int sms) {
    if (2 * SMALL::num_tasks(M, N) <= sms) return block_size::tiny;
    if (2 * BIG::num_tasks(M, N) <= sms) return block_size::small;
    return block_size::big;
}

} // namespace tk_gemm
