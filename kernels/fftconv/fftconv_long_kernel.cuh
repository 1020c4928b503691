// FFT convolution of sequences longer than one on-chip transform (docs/fftconv.md, "Long sequences"): the sequence and
// the filter are cut into blocks of B = L / 2 samples (L = 8192), and
//     y_i = first B samples of IFFT(sum_j X_(i-j) K_j) + last B samples of IFFT(sum_j X_(i-1-j) K_j),
// X_i = FFT of input block i and K_j = FFT of filter block j, each zero-padded to L (a block's linear convolution with
// a filter block spans 2B - 1 samples: its first half lands in output block i, its second half in i + 1). Three
// kernels:
//   1. forward transforms: every (pair, block) item through the engine's forward steps, the level-16
//      outputs stored as they come out of the tensor cores (fragment order, 16-bit complex) in a workspace;
//   2. block_products: for each pair and frequency, the products summed over filter blocks, in place (held in
//      registers: at most MAX_BLOCKS blocks, fftconv_configs.cuh);
//   3. inverse transforms: each pair's blocks in order through the inverse steps with both halves of the output kept:
//      the first half plus the previous block's second half (kept in shared memory by the thread that made it) is
//      the output block, the second half waits for the next.
// The pair trick is the forward's: rows b and b + 1 as one complex sequence, the real filter applying to both.
#pragma once

#include "fftconv_io_kernel.cuh"

namespace tk_fftconv {

template <typename T, bool REVERSED = false> struct fftconv_blocks : fftconv_io<T, BLOCK_FFT, REVERSED> {
    static constexpr int L = BLOCK_FFT, B = BLOCK_LEN;
    using IO = fftconv_io<T, L, REVERSED>;
    using S = fftconv_engine<T, L>;
    using typename IO::pair_rows;
    static constexpr int V = IO::V, THREADS = S::THREADS;

    struct alignas(128) slot_memory {
        typename S::planes p;
        float tail[2][B]; // the second half of the previous block's output, rows b and b + 1 (inverse pass only)
    };
    using shared_block = typename S::template block_memory<slot_memory>;
    static constexpr int SHARED_BYTES = S::template shared_bytes<shared_block>();

    struct globals {
        typename IO::layout shape;     // len = N, the rows' length
        const T *x, *gate, *postgate;  // the rows transformed by run_forward (u or dy) and their gate; gates may be null
        T *y;
        uint4 *spectra; // (pairs, blocks, L / 4): four 16-bit complex values per lane and tile, fragment order
        int blocks;     // ceil(N / B)
    };

    // 1. Items (pair, block), pair-major: each block of each pair to its level-16 outputs.
    __device__ static inline void run_forward(const globals &g) {
        const int64_t items = int64_t((g.shape.batch + 1) / 2) * g.shape.heads * g.blocks;
        const auto [s, slot, at, f] = S::template start<shared_block>(items);
        const int q = at.q, wq = at.wq, lane = at.lane, tid = at.tid, first = at.first, last = at.last;
        typename S::planes &m = slot.p;
        for (int item = first; item < last; item++) {
            const int block = item % g.blocks;
            pair_rows rows = IO::rows_of(g.shape, item / g.blocks);
            rows.first = block * B;
            rows.valid = min(B, g.shape.len - block * B);
            S::slot_sync(q); // the planes are free
            IO::load_input(s.t, m, nullptr, g.shape, typename IO::source{g.x, g.gate}, rows, tid);
            S::slot_sync(q);
            uint4 *out = g.spectra + size_t(item) * (L / 4);
            S::template transform<false>(m, s.t, f, q, wq, lane, [&](int u, typename S::tile_fragments &yr, typename S::tile_fragments &yi) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const auto at = [&](int r, int e) { return S::pack(make_float2(e ? yr[h][r].y : yr[h][r].x, e ? yi[h][r].y : yi[h][r].x)); };
                    out[S::tile_of(wq, 2 * u + h) * WARP_THREADS + lane] = make_uint4(at(0, 0), at(0, 1), at(1, 0), at(1, 1));
                }
            });
        }
    }

    // 3. Items: pairs; each pair's blocks in order, overlap-added through the slot's tail.
    __device__ static inline void run_inverse(const globals &g) {
        const auto [s, m, at, f] = S::template start<shared_block>(int64_t((g.shape.batch + 1) / 2) * g.shape.heads);
        const int q = at.q, wq = at.wq, lane = at.lane, tid = at.tid, first = at.first, last = at.last;
        for (int item = first; item < last; item++) {
            const pair_rows rows = IO::rows_of(g.shape, item);
            for (int block = 0; block < g.blocks; block++) {
                const uint4 *in = g.spectra + (size_t(item) * g.blocks + block) * (L / 4);
                S::slot_sync(q); // the planes are free
                S::inverse_from(m.p, s.t, f, q, wq, lane, [&](int u, typename S::tile_fragments &yr, typename S::tile_fragments &yi) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint4 z = in[S::tile_of(wq, 2 * u + h) * WARP_THREADS + lane];
                        const float2 v0 = S::unpack(z.x), v1 = S::unpack(z.y), v2 = S::unpack(z.z), v3 = S::unpack(z.w);
                        yr[h][0] = make_float2(v0.x, v1.x);
                        yi[h][0] = make_float2(v0.y, v1.y);
                        yr[h][1] = make_float2(v2.x, v3.x);
                        yi[h][1] = make_float2(v2.y, v3.y);
                    }
                });
                const int offset = block * B, valid = min(B, g.shape.len - offset);
                IO::template store_output<true>(s.t, m.p, L, tid, [&](int n0, const float (&re)[V], const float (&im)[V]) {
                    if (n0 >= B) { // the second half: kept for the next block (this thread adds it there)
#pragma unroll
                        for (int e = 0; e < V; e++) {
                            m.tail[0][n0 - B + e] = re[e];
                            m.tail[1][n0 - B + e] = im[e];
                        }
                        return;
                    }
                    if (n0 >= valid) return;
                    float a[V], b[V];
#pragma unroll
                    for (int e = 0; e < V; e++) {
                        a[e] = re[e] + (block ? m.tail[0][n0 + e] : 0.f);
                        b[e] = im[e] + (block ? m.tail[1][n0 + e] : 0.f);
                    }
                    IO::output_v(g.shape, g.y, g.postgate, rows.row0, offset + n0, g.shape.len, a);
                    if (rows.second) IO::output_v(g.shape, g.y, g.postgate, rows.row1, offset + n0, g.shape.len, b);
                });
            }
        }
    }

    // The filter gradient's last pass. Items: heads; for lag blocks d = kblocks .. 0 the inverse of the correlation
    // spectra C_d (fp32, fragment order), dk's block d = sqrt(L) Re(first half of IFFT(C_d) + second half of
    // IFFT(C_(d+1))), written where it is below taps.
    struct dk_globals {
        const float4 *correlations; // (heads, kblocks + 1, L / 2): two complex values per float4, fragment_slot order
        float *dk;                  // (heads, taps)
        int heads, taps, kblocks;
        float scale;
    };
    __device__ static inline void run_dk_inverse(const dk_globals &g) {
        const auto [s, m, at, f] = S::template start<shared_block>(g.heads);
        const int q = at.q, wq = at.wq, lane = at.lane, tid = at.tid, first = at.first, last = at.last;
        for (int head = first; head < last; head++) {
            for (int d = g.kblocks; d >= 0; d--) {
                const float2 *c = reinterpret_cast<const float2 *>(g.correlations + (size_t(head) * (g.kblocks + 1) + d) * (L / 2));
                S::slot_sync(q); // the planes are free
                S::inverse_from(m.p, s.t, f, q, wq, lane, [&](int u, typename S::tile_fragments &yr, typename S::tile_fragments &yi) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        float2 a[4];
#pragma unroll
                        for (int v = 0; v < 4; v++) a[v] = c[S::fragment_slot(S::tile_of(wq, 2 * u + h), lane, v)];
                        yr[h][0] = make_float2(a[0].x, a[1].x);
                        yi[h][0] = make_float2(a[0].y, a[1].y);
                        yr[h][1] = make_float2(a[2].x, a[3].x);
                        yi[h][1] = make_float2(a[2].y, a[3].y);
                    }
                });
                float *dk = g.dk + size_t(head) * g.taps + size_t(d) * B;
                const bool last_block = d == g.kblocks;
                IO::template store_output<true>(s.t, m.p, L, tid, [&](int n0, const float (&re)[V], const float (&)[V]) {
                    if (n0 >= B) { // the second half: added to the lag block below (by this thread)
#pragma unroll
                        for (int e = 0; e < V; e++) m.tail[0][n0 - B + e] = re[e];
                        return;
                    }
#pragma unroll
                    for (int e = 0; e < V; e++)
                        if (!last_block && d * B + n0 + e < g.taps) dk[n0 + e] = g.scale * (re[e] + m.tail[0][n0 + e]);
                });
            }
        }
    }
};

template <typename K> __global__ __launch_bounds__(K::THREADS, 1) void fftconv_blocks_forward(const __grid_constant__ typename K::globals g) {
    K::run_forward(g);
}
template <typename K> __global__ __launch_bounds__(K::THREADS, 1) void fftconv_blocks_inverse(const __grid_constant__ typename K::globals g) {
    K::run_inverse(g);
}
template <typename K> __global__ __launch_bounds__(K::THREADS, 1) void fftconv_blocks_dk(const __grid_constant__ typename K::dk_globals g) {
    K::run_dk_inverse(g);
}

// 2. Y_i = sum_(j <= i, j < kblocks) X_(i-j) K_j for every pair and frequency, in place over X (every block's X is read
// into registers before any Y is written). One thread per (head, fragment slot e), looping over the head's pairs: the filter
// blocks' values at e (gathered from their rfft halves, K[L - f] = conj K[f], in digit-reversed order) are read once,
// the pairs' spectra with consecutive threads on consecutive slots. HELD >= blocks are held in registers (held_blocks,
// fftconv_configs.cuh).
template <typename T, int HELD> __global__ __launch_bounds__(PRODUCT_THREADS)
void block_products(uint32_t *spectra, const float2 *k_f, int heads, int pairs_per_head, int blocks, int kblocks) {
    using S = fftconv_engine<T, BLOCK_FFT>;
    constexpr int L = BLOCK_FFT;
    const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (index >= int64_t(heads) * L) return;
    const int head = int(index / L), e = int(index % L);
    const int tile = e / 128, lane = e / 4 % 32, v = e % 4; // the uint4 packing of fftconv_blocks
    const int o = 8 * tile + detail::reg::mma_16x8_output_col(lane) + v % 2; // position
    const int j = detail::reg::mma_16x8_output_row(lane, v);                  // output digit
    const int fq = S::frequency_at(16 * o + j);
    const float2 *kh = k_f + size_t(head) * kblocks * (L / 2 + 1);
    const auto filter = [&](int jb) {
        const float2 c = kh[size_t(jb) * (L / 2 + 1) + (fq <= L / 2 ? fq : L - fq)];
        return fq <= L / 2 ? c : make_float2(c.x, -c.y);
    };
    float2 ks[HELD];
#pragma unroll
    for (int i = 0; i < HELD; i++) ks[i] = i < kblocks ? filter(i) : make_float2(0.f, 0.f);
    constexpr int PAIRS_IN_FLIGHT = pairs_in_flight(HELD);
#pragma unroll PAIRS_IN_FLIGHT
    for (int p = 0; p < pairs_per_head; p++) {
        uint32_t *x = spectra + (size_t(head) * pairs_per_head + p) * blocks * L + e;
        float2 xs[HELD];
#pragma unroll
        for (int i = 0; i < HELD; i++) xs[i] = i < blocks ? S::unpack(x[size_t(i) * L]) : make_float2(0.f, 0.f);
#pragma unroll
        for (int i = 0; i < HELD; i++) {
            if (i >= blocks) break;
            float2 acc = make_float2(0.f, 0.f);
#pragma unroll
            for (int jb = 0; jb <= i; jb++) acc = cadd(acc, cmul(xs[i - jb], ks[jb]));
            x[size_t(i) * L] = S::pack(acc);
        }
    }
}

// The filter gradient's correlation spectra: C_d = sum over the head's pairs and blocks i of conj(X_i) G_(i+d),
// d = 0 .. kblocks, X and G the blocks' spectra of v = u * pregate and g = dy * postgate (run_forward's outputs). One
// thread per (head, fragment slot e), as block_products; fp32 sums written as float2 in fragment_slot order.
template <typename T, int HELD> __global__ __launch_bounds__(PRODUCT_THREADS)
void block_correlations(const uint32_t *xs, const uint32_t *gs, float2 *correlations, int heads, int pairs_per_head,
                        int blocks, int kblocks) {
    using S = fftconv_engine<T, BLOCK_FFT>;
    constexpr int L = BLOCK_FFT;
    const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (index >= int64_t(heads) * L) return;
    const int head = int(index / L), e = int(index % L);
    const int slot = S::fragment_slot(e / 128, e / 4 % 32, e % 4); // where fftconv_blocks_dk reads value e
    float2 *out = correlations + size_t(head) * (kblocks + 1) * L + slot;
    float2 acc[HELD + 1];
#pragma unroll
    for (int d = 0; d <= HELD; d++) acc[d] = make_float2(0.f, 0.f);
    constexpr int PAIRS_IN_FLIGHT = pairs_in_flight(HELD);
#pragma unroll PAIRS_IN_FLIGHT
    for (int p = 0; p < pairs_per_head; p++) {
        const size_t base = (size_t(head) * pairs_per_head + p) * blocks * L + e;
        float2 x[HELD], gv[HELD];
#pragma unroll
        for (int i = 0; i < HELD; i++) {
            x[i] = i < blocks ? S::unpack(xs[base + size_t(i) * L]) : make_float2(0.f, 0.f);
            gv[i] = i < blocks ? S::unpack(gs[base + size_t(i) * L]) : make_float2(0.f, 0.f);
        }
#pragma unroll
        for (int d = 0; d <= HELD; d++)
#pragma unroll
            for (int i = 0; i + d < HELD; i++) acc[d] = cadd(acc[d], cmul_conj(gv[i + d], x[i])); // G conj(X)
    }
#pragma unroll
    for (int d = 0; d <= HELD; d++)
        if (d <= kblocks) out[size_t(d) * L] = acc[d];
}

} // namespace tk_fftconv
