// The FFT convolution's filter gradient (docs/fftconv.md, "Backward"):
//     dk[h, m] = sum_b sum_n g[b, h, n] v[b, h, n - m],  m < taps,  g = dy * postgate, v = u * pregate,
// a correlation, so in frequency sum_b conj(V_b) G_b, inverse-transformed once per head.
//
// A slot takes pairs of rows as the forward does: with Zv = FFT(v_b + i v_(b+1)) and Zg = FFT(g_b + i g_(b+1)),
// conj(Zv) Zg = conj(V_b) G_b + conj(V_(b+1)) G_(b+1) + i (conj(V_b) G_(b+1) - conj(V_(b+1)) G_b), and both brackets
// transform back to real sequences (correlations of real rows), so the real part of the inverse of the sum over pairs
// is the sum of the rows' correlations. Per pair: the forward FFTs of the v pair and the g pair (the engine), whose
// level-16 outputs meet in registers; their product is added into an fp32 accumulator in the same fragment order.
// When the slot's head changes (and at its end) the accumulator is transformed back and its real part added into dk
// (fp32, zeroed by the caller; several slots may share a head). Unitary transforms: dk = sqrt(L) Re(IFFT_u(sum)).
#pragma once

#include "fftconv_io_kernel.cuh"

namespace tk_fftconv {

template <typename T, int L> struct fftconv_dk : fftconv_io<T, L> {
    using IO = fftconv_io<T, L>;
    using S = fftconv_engine<T, L>;
    using typename IO::pair_rows;
    using typename IO::source;
    using typename IO::tables;
    static constexpr int V = IO::V, THREADS = S::THREADS;

    // zv and acc belong to their lanes (fragment order, the tiles each warp always takes): no barrier guards them.
    struct alignas(128) slot_memory {
        typename S::planes p;
        uint4 zv[L / 4];  // the v pair's level-16 outputs, 16-bit: four complex values per lane and tile
        float2 acc[L];    // sum over the head's pairs of conj(Zv) Zg (fragment_slot order)
    };
    using shared_block = typename S::template block_memory<slot_memory>;
    static constexpr int SHARED_BYTES = S::template shared_bytes<shared_block>();

    struct globals {
        typename IO::layout shape;
        const T *u, *pregate, *dy, *postgate; // gates may be null
        float *dk;                            // (heads, taps), zeroed
        int taps;
        float scale; // sqrt(L)
    };

    // The values of a tile's output fragments in fragment_slot order (v = 2 h + e: row half h, column e).
    __device__ static inline float2 value(const float2 (&yr)[2], const float2 (&yi)[2], int v) {
        return v % 2 ? make_float2(yr[v / 2].y, yi[v / 2].y) : make_float2(yr[v / 2].x, yi[v / 2].x);
    }

    // Inverse-transform the accumulated spectrum of a head, add sqrt(L) times its real part at lags < taps into dk,
    // and clear the accumulator.
    __device__ static inline void finish(const globals &g, slot_memory &m, const tables &t, const typename S::dft16 &f,
                                         int head, int q, int wq, int lane, int tid) {
        S::slot_sync(q); // every warp is done reading the planes
        S::inverse_from(m.p, t, f, q, wq, lane, [&](int u, typename S::tile_fragments &yr, typename S::tile_fragments &yi) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float2 a[4];
#pragma unroll
                for (int v = 0; v < 4; v++) {
                    float2 &c = m.acc[S::fragment_slot(S::tile_of(wq, 2 * u + h), lane, v)];
                    a[v] = c;
                    c = make_float2(0.f, 0.f);
                }
                yr[h][0] = make_float2(a[0].x, a[1].x);
                yi[h][0] = make_float2(a[0].y, a[1].y);
                yr[h][1] = make_float2(a[2].x, a[3].x);
                yi[h][1] = make_float2(a[2].y, a[3].y);
            }
        });
        float *dk = g.dk + size_t(head) * g.taps;
        const int limit = g.taps < L / 2 ? g.taps : L / 2;
        IO::store_output(t, m.p, limit, tid, [&](int n0, const float (&re)[V], const float (&)[V]) {
#pragma unroll
            for (int e = 0; e < V; e++)
                if (n0 + e < g.taps) atomicAdd(dk + n0 + e, g.scale * re[e]);
        });
    }

    // One pair's forward transform, from the load to the level-16 outputs, each block's handed to at_spectrum.
    template <typename AT_SPECTRUM>
    __device__ static inline void transform(const globals &g, slot_memory &m, const tables &t, const typename S::dft16 &f,
                                            source src, const pair_rows &rows, int q, int wq, int lane, int tid,
                                            AT_SPECTRUM &&at_spectrum) {
        S::slot_sync(q); // the planes are free
        IO::load_input(t, m.p, nullptr, g.shape, src, rows, tid);
        S::slot_sync(q);
        S::template transform<false>(m.p, t, f, q, wq, lane, at_spectrum);
    }

    __device__ static inline void run(const globals &g) {
        const auto clear_accumulator = [](slot_memory &m, const typename S::slot_place &at) {
#pragma unroll
            for (int i = 0; i < S::WARP_TILES; i++)
#pragma unroll
                for (int v = 0; v < 4; v++) m.acc[S::fragment_slot(S::tile_of(at.wq, i), at.lane, v)] = make_float2(0.f, 0.f);
        };
        const auto [s, m, at, f] =
            S::template start<shared_block>(int64_t((g.shape.batch + 1) / 2) * g.shape.heads, clear_accumulator);
        const int q = at.q, wq = at.wq, lane = at.lane, tid = at.tid, first = at.first, last = at.last;
        int head = -1;
        for (int item = first; item < last; item++) {
            const pair_rows rows = IO::rows_of(g.shape, item);
            if (rows.head != head) {
                if (head >= 0) finish(g, m, s.t, f, head, q, wq, lane, tid);
                head = rows.head;
            }
            transform(g, m, s.t, f, source{g.u, g.pregate}, rows, q, wq, lane, tid,
                      [&](int u, typename S::tile_fragments &yr, typename S::tile_fragments &yi) {
#pragma unroll
                          for (int h = 0; h < 2; h++) {
                              uint4 z;
                              z.x = S::pack(value(yr[h], yi[h], 0));
                              z.y = S::pack(value(yr[h], yi[h], 1));
                              z.z = S::pack(value(yr[h], yi[h], 2));
                              z.w = S::pack(value(yr[h], yi[h], 3));
                              m.zv[S::tile_of(wq, 2 * u + h) * WARP_THREADS + lane] = z;
                          }
                      });
            transform(g, m, s.t, f, source{g.dy, g.postgate}, rows, q, wq, lane, tid,
                      [&](int u, typename S::tile_fragments &yr, typename S::tile_fragments &yi) {
#pragma unroll
                          for (int h = 0; h < 2; h++) {
                              const int tile = S::tile_of(wq, 2 * u + h);
                              const uint4 z = m.zv[tile * WARP_THREADS + lane];
                              const uint32_t zw[4] = {z.x, z.y, z.z, z.w};
#pragma unroll
                              for (int v = 0; v < 4; v++) {
                                  float2 &c = m.acc[S::fragment_slot(tile, lane, v)];
                                  c = cadd(c, cmul_conj(value(yr[h], yi[h], v), S::unpack(zw[v]))); // Zg conj(Zv)
                              }
                          }
                      });
        }
        if (head >= 0) finish(g, m, s.t, f, head, q, wq, lane, tid);
    }
};

template <typename K> __global__ __launch_bounds__(K::THREADS, 1) void fftconv_dk_kernel(const __grid_constant__ typename K::globals g) {
    K::run(g);
}

} // namespace tk_fftconv
