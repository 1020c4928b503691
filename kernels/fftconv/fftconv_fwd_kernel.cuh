// FFT convolution forward: y = postgate * causal_conv(u * pregate, k) through the filter's spectrum K
// (docs/fftconv.md, "The forward kernel").
//
// Rows b and b + 1 of one head share the (real) filter, so a slot convolves the complex sequence u_b + i u_(b+1) at
// once: forward FFT (fftconv_engine_kernel.cuh), times K in the digit-reversed order the FFT leaves (multiplied in the
// level-16 step, between its forward and inverse DFTs), inverse FFT; real part -> y_b, imaginary part -> y_(b+1).
#pragma once

#include "fftconv_io_kernel.cuh"

namespace tk_fftconv {

template <typename T, int L, bool REVERSED = false> struct fftconv_fwd : fftconv_io<T, L, REVERSED> {
    using IO = fftconv_io<T, L, REVERSED>;
    using S = fftconv_engine<T, L>;
    using S::SLOT_THREADS;
    using typename IO::raw_rows;
    static constexpr int V = IO::V, THREADS = S::THREADS;

    // The next pair's rows are copied ahead (cp.async) where shared memory has room for them.
    struct alignas(128) core_memory {
        typename S::planes p;
        float2 spectrum[L]; // the head's spectrum in the level-16 step's fragment order
    };
    static constexpr size_t STAGED_BYTES = sizeof(typename S::tables) + S::SLOTS * (sizeof(core_memory) + sizeof(raw_rows));
    static constexpr bool STAGED = STAGED_BYTES + 1024 <= MAX_SHARED_MEMORY;
    struct alignas(128) staged_memory : core_memory {
        raw_rows raw;
    };
    using slot_memory = std::conditional_t<STAGED, staged_memory, core_memory>;
    using shared_block = typename S::template block_memory<slot_memory>;
    static constexpr int SHARED_BYTES = S::template shared_bytes<shared_block>();

    struct globals {
        typename IO::layout shape;
        const T *u, *pregate, *postgate; // gates may be null
        const float2 *k_f;               // (heads, L / 2 + 1)
        T *y;
        int staged; // STAGED, a length that is a multiple of 8 and 16-byte aligned u and pregate
    };

    // The head's spectrum in the level-16 step's fragment order (each slot written in order, the rfft half gathered:
    // it is read from L2 by every slot working on the head), with K[L - j] = conj K[j] for the other half. All of a
    // thread's gathers are issued before any is stored, so that their latencies overlap.
    __device__ static inline void load_spectrum(float2 *spectrum, const float2 *k_f, int tid) {
        constexpr int PER_THREAD = L / SLOT_THREADS;
        static_assert(L % SLOT_THREADS == 0, "fftconv: the spectrum's slots divide among the slot's threads");
        float2 c[PER_THREAD];
#pragma unroll
        for (int r = 0; r < PER_THREAD; r++) {
            const int idx = tid + r * SLOT_THREADS;
            const int tile = idx / 128, lane = idx / 2 % 32, v = idx / 64 % 2 * 2 + idx % 2; // fragment_slot inverted
            const int o = 8 * tile + detail::reg::mma_16x8_output_col(lane) + v % 2; // position
            const int j = detail::reg::mma_16x8_output_row(lane, v);                  // output digit
            const int f = S::frequency_at(16 * o + j);
            c[r] = k_f[f <= L / 2 ? f : L - f];
            if (f > L / 2) c[r].y = -c[r].y;
        }
#pragma unroll
        for (int r = 0; r < PER_THREAD; r++) spectrum[tid + r * SLOT_THREADS] = c[r];
    }

    // Each slot takes its share of the items (head-major pairs), loading its head's spectrum when the head changes.
    __device__ static inline void run(const globals &g) {
        shared_block &s = S::template shared_block_as<shared_block>();
        const typename S::slot_place at = S::place_in_grid(int64_t((g.shape.batch + 1) / 2) * g.shape.heads);
        const int q = at.q, wq = at.wq, lane = at.lane, tid = at.tid, first = at.first, last = at.last;
        slot_memory &m = s.slot[q];
        raw_rows *raw = nullptr;
        if constexpr (STAGED) raw = g.staged ? &m.raw : nullptr;
        const typename IO::source src{g.u, g.pregate};
        if (raw && first < last) IO::prefetch(*raw, g.shape, src, first, tid);
        S::build_twiddles(s.t);
        const typename S::dft16 f = S::make_dft16();
        __syncthreads();
        int head = -1;
        const int kept = g.shape.len < L / 2 ? g.shape.len : L / 2;
        for (int item = first; item < last; item++) {
            const typename IO::pair_rows rows = IO::rows_of(g.shape, item);
            if (rows.head != head) {
                head = rows.head;
                load_spectrum(m.spectrum, g.k_f + size_t(head) * (L / 2 + 1), tid);
            }
            if (raw) detail::memory::cp_async_wait<0>();
            S::slot_sync(q); // the raw rows landed (every thread's pieces); the previous pair's output was read
            IO::load_input(s.t, m.p, raw, g.shape, src, rows, tid);
            S::slot_sync(q);
            if (raw && item + 1 < last) IO::prefetch(*raw, g.shape, src, item + 1, tid);
            S::transform(m.p, s.t, f, q, wq, lane, [&](int u, typename S::tile_fragments &yr, typename S::tile_fragments &yi) {
#pragma unroll
                for (int h = 0; h < 2; h++) S::twiddle(yr[h], yi[h], m.spectrum, S::tile_of(wq, 2 * u + h), lane); // times K
            });
            IO::store_output(s.t, m.p, kept, tid, [&](int n0, const float (&re)[V], const float (&im)[V]) {
                IO::output_v(g.shape, g.y, g.postgate, rows.row0, n0, g.shape.len, re);
                if (rows.second) IO::output_v(g.shape, g.y, g.postgate, rows.row1, n0, g.shape.len, im);
            });
        }
    }
};

template <typename K> __global__ __launch_bounds__(K::THREADS, 1) void fftconv_fwd_kernel(const __grid_constant__ typename K::globals g) {
    K::run(g);
}

} // namespace tk_fftconv
