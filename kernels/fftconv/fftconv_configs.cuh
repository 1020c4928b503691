// The FFT convolution's configurations: which algorithm takes a sequence of each length (the paths and their
// thresholds), the FFT sizes, how a block of the transform kernels is cut into slots, how many block spectra the block
// path's products hold in registers, and the spectrum kernel's block. The kernels, their launches and the binding read
// these names only (docs/fftconv.md has the measurements behind them).
//
// Plain C++ (no CUDA headers): the binding and the interface (fftconv.h) include it.
#pragma once

#include <cstdint>

namespace tk_fftconv {

// ---------------------------------------------------------------- lengths, FFT sizes and paths

// The smallest transform: the engine runs at least two radix-16 levels (16^2 points).
inline constexpr int MIN_FFT_SIZE = 256;
// The largest transform held on chip: one slot's planes, the forward's spectrum in fragment order and the twiddle
// tables of levels 256 and 4096 fill an SM's shared memory at this size.
inline constexpr int MAX_FFT_SIZE = 8192;
// Sequences up to ONCHIP_LEN are one transform of fft_size(N) >= 2N points, whose circular convolution equals the
// causal linear one on the first N outputs.
inline constexpr int ONCHIP_LEN = MAX_FFT_SIZE / 2;
// Longer ones are cut into blocks of BLOCK_LEN samples, each transformed at BLOCK_FFT points (a block's linear
// convolution with a filter block spans 2 BLOCK_LEN - 1 samples), whose spectra are combined in frequency.
inline constexpr int BLOCK_LEN = ONCHIP_LEN, BLOCK_FFT = MAX_FFT_SIZE;
// The block path's products per frequency grow as the square of the blocks, and past MAX_BLOCKS they no longer fit in
// registers: cuFFT (fp32, the torch.fft formulation's own work) is then faster.
inline constexpr int MAX_BLOCKS = 16;
inline constexpr int64_t BLOCKS_LEN = int64_t(MAX_BLOCKS) * BLOCK_LEN;
// The longest sequence the op takes.
inline constexpr int MAX_LEN = 1 << 20;

// The algorithm that convolves sequences of a length (1 <= n <= MAX_LEN).
enum class path {
    on_chip, // one transform per pair of rows (fftconv_fwd_kernel.cuh)
    blocks,  // the block path (fftconv_long_kernel.cuh)
    cufft,   // cuFFT in fp32 through ATen (fftconv_cufft.cpp)
};
constexpr path path_of(int64_t n) {
    if (n <= ONCHIP_LEN) return path::on_chip;
    return n <= BLOCKS_LEN ? path::blocks : path::cufft;
}

// The smallest power of two >= 2n: an FFT size at which a correlation of two length-n rows has no wrapped terms.
constexpr int64_t correlation_size(int64_t n) {
    int64_t l = 1;
    while (l < 2 * n) l *= 2;
    return l;
}
// The FFT size for sequences of length n (n >= 1): the smallest built size >= 2n on chip, BLOCK_FFT on the block path,
// correlation_size(n) past it, or 0 past MAX_LEN.
constexpr int fft_size(int64_t n) {
    if (n > MAX_LEN) return 0;
    if (path_of(n) == path::cufft) return int(correlation_size(n));
    if (path_of(n) == path::blocks) return BLOCK_FFT;
    int l = MIN_FFT_SIZE;
    while (l < 2 * n) l *= 2;
    return l;
}
constexpr int spectrum_len(int fft) { return fft / 2 + 1; }
// Blocks of BLOCK_LEN samples in n (the block path).
constexpr int64_t blocks_of(int64_t n) { return (n + BLOCK_LEN - 1) / BLOCK_LEN; }

// ---------------------------------------------------------------- the engine's blocks and slots

// The outer radix R of an FFT size L = R * 16^A (A >= 2): the smallest power of two leaving a power of 16. The outer
// step runs on the CUDA cores as the input is loaded, the radix-16 levels on the tensor cores.
constexpr int outer_radix(int l) {
    for (int r = 1;; r *= 2) {
        int m = l / r;
        while (m % 16 == 0) m /= 16;
        if (m == 1) return r;
    }
}

// How a block of the transform kernels is cut: `warps` per block, dealt to slots of `slot_warps` warps that each
// transform one pair of rows at a time.
struct engine_config {
    int outer_radix;
    // 16 warps of 128 registers a thread: one block per SM, the registers the radix-16 steps hold.
    int warps = 16;
    // A radix-16 step is L / 256 units of 16 columns; each warp of a slot takes the same number of them, two at the
    // larger sizes (so that a warp's loads overlap), a whole warp per slot at the smallest.
    int slot_warps;
};
constexpr engine_config engine_config_of(int l) {
    const int units = l / 256;
    return engine_config{.outer_radix = outer_radix(l),
                         .slot_warps = units >= 4 ? (units / 2 < 16 ? units / 2 : 16) : 1};
}

// ---------------------------------------------------------------- the block path's products

// The filter blocks' values (and the pairs' block spectra) a product or correlation thread holds in registers: the
// fewest of 2, 4, 8 and MAX_BLOCKS that covers the sequence's blocks (fewer registers, more threads in flight).
constexpr int held_blocks(int blocks) { return blocks <= 2 ? 2 : blocks <= 4 ? 4 : blocks <= 8 ? 8 : MAX_BLOCKS; }
// Pairs whose loads a product thread overlaps: two where the held blocks leave the registers for it.
constexpr int pairs_in_flight(int held) { return held <= 4 ? 2 : 1; }
// Threads of a product or correlation block (one thread per head and frequency).
inline constexpr int PRODUCT_THREADS = 256;

// ---------------------------------------------------------------- the filter's spectrum

// The spectrum kernel: 256 threads over two buffers of the largest transform's complex points (64 KB), three blocks
// per SM.
struct spectrum_config {
    int threads = 256;
    int blocks_per_sm = 3;
    int points = MAX_FFT_SIZE / 2;
};
inline constexpr spectrum_config SPECTRUM{};

} // namespace tk_fftconv
