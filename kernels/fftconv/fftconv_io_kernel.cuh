// Input and output of the FFT engine (fftconv_engine_kernel.cuh): a pair of batch rows of one head read into the planes as the
// complex sequence x = row_b + i row_(b+1) (times a gate), through the outer radix-R step; and the planes written back
// through the inverse outer step, real parts belonging to row b and imaginary parts to row b + 1.
//
// The outer step, R > 1: positions t < M = L / R; outputs j < R of (1 / sqrt R) sum_{k < R/2} x[k M + t]
// e^(-2 pi i j k / R) (only the first half of the samples exist), times e^(-2 pi i j t / L); back, samples k M + t for
// k < R / 2 only (the kept half): (1 / sqrt R) sum_j Z[j M + t] e^(2 pi i j t / L) e^(2 pi i j k / R). Both as two
// R / 2-point DFTs (even and odd outputs, or inputs) and the twiddles as successive powers of e^(-+2 pi i t / L).
#pragma once

#include "fftconv_engine_kernel.cuh"

namespace tk_fftconv {

// REVERSED: every row is read and written time-reversed (sample n of the sequence the kernels see is element
// len - 1 - n of the row): the backward's correlations are convolutions of reversed rows, and this spares them
// reversed copies.
template <typename T, int L, bool REVERSED = false> struct fftconv_io : fftconv_engine<T, L> {
    using S = fftconv_engine<T, L>;
    using S::M;
    using S::R;
    using S::SLOT_THREADS;
    using typename S::planes;
    using typename S::T2;
    using typename S::tables;
    static constexpr int MAX_LEN = L / 2;
    // The outer steps move V consecutive positions per thread at a time: one 16-byte chunk of each plane, or fewer where
    // the M positions would leave some of the slot's threads idle (R = 8: a thread holds R / 2 inputs or outputs of
    // every position, and M = 256 positions over 128 threads).
    static constexpr int V = M / SLOT_THREADS >= 8 ? 8 : (M / SLOT_THREADS >= 4 ? 4 : 2);

    // Where a pass reads from: rows (batch, heads, len) of data, times gate (which may be null).
    struct source {
        const T *data, *gate;
    };
    // The problem's shape and the access widths its pointers allow.
    struct layout {
        int batch, heads, len;
        int paired;  // an even length and 4-byte aligned rows: two neighbouring samples are one access
        int vectors; // a length that is a multiple of 8 and 16-byte aligned rows: V samples are one access
    };
    // Element of a row holding sample x of the sequence the kernels see.
    __device__ static inline int element(const layout &g, int x) { return REVERSED ? g.len - 1 - x : x; }
    // Element of a row holding the first of the `count` samples x .. x + count - 1 (held backwards when REVERSED).
    __device__ static inline int first_element(const layout &g, int x, int count) { return REVERSED ? g.len - x - count : x; }
    // A vector of V samples as read from (or written to) the row: backwards when REVERSED.
    __device__ static inline void orient(const layout &, float (&v)[V]) {
        if constexpr (REVERSED) {
#pragma unroll
            for (int e = 0; e < V / 2; e++) {
                const float t = v[e];
                v[e] = v[V - 1 - e];
                v[V - 1 - e] = t;
            }
        }
    }
    // A pair's rows (and gates) copied ahead by cp.async.
    struct raw_rows {
        T data[2][MAX_LEN], gate[2][MAX_LEN];
    };

    struct pair_rows {
        size_t row0, row1; // element offsets of the rows (row1 = row0 where b + 1 does not exist)
        int head;
        int first; // the sequence's sample that is this item's sample 0 (a block's start on the block path)
        int valid; // samples that exist from there (the rest read as zero)
        bool second;
    };
    // Items are head-major: item = head * pairs + pair.
    __device__ static inline pair_rows rows_of(const layout &g, int item) {
        const int pairs = (g.batch + 1) / 2, h = item / pairs, b0 = 2 * (item % pairs);
        pair_rows r;
        r.head = h;
        r.second = b0 + 1 < g.batch;
        r.first = 0;
        r.valid = g.len;
        r.row0 = (size_t(b0) * g.heads + h) * g.len;
        r.row1 = r.second ? r.row0 + size_t(g.heads) * g.len : r.row0;
        return r;
    }

    // Copy a pair's rows (and gates) into raw (a length that is a multiple of 8, 16-byte aligned rows): 16-byte
    // pieces, a missing second row zero-filled. Waited for (cp_async_wait) before the input load that reads raw.
    __device__ static inline void prefetch(raw_rows &raw, const layout &g, source src, int item, int tid) {
        const pair_rows rows = rows_of(g, item);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const size_t row = r ? rows.row1 : rows.row0;
            const uint32_t bytes = (r == 0 || rows.second) ? 16 : 0;
            for (int at = 8 * tid; at < rows.valid; at += 8 * SLOT_THREADS) {
                detail::memory::cp_async_16(static_cast<uint32_t>(__cvta_generic_to_shared(&raw.data[r][at])), src.data + row + at, bytes);
                if (src.gate)
                    detail::memory::cp_async_16(static_cast<uint32_t>(__cvta_generic_to_shared(&raw.gate[r][at])),
                                                src.gate + row + at, bytes);
            }
        }
        detail::memory::cp_async_commit();
    }

    template <int N> struct alignas(4 * N) words { uint32_t w[N]; }; // one vector access
    using vec = words<V / 2>;
    __device__ static inline vec load_shared(uint32_t addr) {
        vec r;
        load_shared_words(r.w, addr);
        return r;
    }
    __device__ static inline void unpack_words(const vec &w, float (&v)[V]) {
#pragma unroll
        for (int e = 0; e < V / 2; e++) {
            const float2 p = S::unpack(w.w[e]);
            v[2 * e] = p.x;
            v[2 * e + 1] = p.y;
        }
    }
    __device__ static inline vec pack_words(const float (&v)[V]) {
        vec w;
#pragma unroll
        for (int e = 0; e < V / 2; e++) w.w[e] = S::pack(make_float2(v[2 * e], v[2 * e + 1]));
        return w;
    }

    // Samples n, n + 1 (n even) of row r of the pair from global memory, times their gates, zero past the sequence or
    // the batch.
    __device__ static inline float2 input_pair(const layout &g, source src, const pair_rows &rows, int r, int n) {
        if (n >= rows.valid || (r == 1 && !rows.second)) return make_float2(0.f, 0.f);
        const size_t row = r ? rows.row1 : rows.row0;
        if (g.paired && n + 1 < rows.valid) { // an even length and an even first sample: the pair is one aligned word
            const size_t at = row + first_element(g, rows.first + n, 2);
            float2 x = base_types::convertor<float2, T2>::convert(*reinterpret_cast<const T2 *>(src.data + at));
            if (src.gate) {
                const float2 p = base_types::convertor<float2, T2>::convert(*reinterpret_cast<const T2 *>(src.gate + at));
                x = make_float2(x.x * p.x, x.y * p.y);
            }
            return REVERSED ? make_float2(x.y, x.x) : x;
        }
        const auto one = [&](int i) {
            if (i >= rows.valid) return 0.f;
            const size_t at = row + element(g, rows.first + i);
            const float x = S::to_float(src.data[at]);
            return src.gate ? x * S::to_float(src.gate[at]) : x;
        };
        return make_float2(one(n), one(n + 1));
    }

    // Samples n0 .. n0 + V - 1 (n0 a multiple of V) of row r of the pair, times their gates, zero past the sequence or
    // the batch: from raw when it is given (staged), else by vector loads where the layout allows.
    __device__ static inline void input_v(const raw_rows *raw, const layout &g, source src, const pair_rows &rows, int r,
                                          int n0, float (&x)[V]) {
        if (n0 >= rows.valid || (r == 1 && !rows.second)) {
#pragma unroll
            for (int e = 0; e < V; e++) x[e] = 0.f;
            return;
        }
        if (raw || (g.vectors && n0 + V <= rows.valid)) { // staged lengths are multiples of 8: all V exist
            // Lengths and first samples are multiples of 8 here: the V elements are one aligned vector either way.
            const int at = first_element(g, rows.first + n0, V);
            const size_t row = r ? rows.row1 : rows.row0;
            unpack_words(raw ? load_shared(static_cast<uint32_t>(__cvta_generic_to_shared(&raw->data[r][at])))
                             : *reinterpret_cast<const vec *>(src.data + row + at), x);
            if (src.gate) {
                float p[V];
                unpack_words(raw ? load_shared(static_cast<uint32_t>(__cvta_generic_to_shared(&raw->gate[r][at])))
                                 : *reinterpret_cast<const vec *>(src.gate + row + at), p);
#pragma unroll
                for (int e = 0; e < V; e++) x[e] *= p[e];
            }
            orient(g, x);
            return;
        }
#pragma unroll
        for (int e = 0; e < V / 2; e++) {
            const float2 p = input_pair(g, src, rows, r, n0 + 2 * e);
            x[2 * e] = p.x;
            x[2 * e + 1] = p.y;
        }
    }

    __device__ static inline uint32_t plane_at(const T *plane, int p0) { // positions p0 .. p0 + V - 1, p0 % V == 0
        return static_cast<uint32_t>(__cvta_generic_to_shared(plane)) + plane_offset(p0);
    }
    __device__ static inline void store_v(uint32_t addr, const float (&v)[V]) { store_shared_words(addr, pack_words(v).w); }
    __device__ static inline void load_v(uint32_t addr, float (&v)[V]) { unpack_words(load_shared(addr), v); }

    // e^(-2 pi i (t0 + e) / L), e < V, for t0 a multiple of V.
    __device__ static inline void outer_twiddles(const tables &s, int t0, float2 (&w)[V]) {
        const float2 base = S::outer_twiddle(s, t0);
#pragma unroll
        for (int e = 0; e < V; e++) w[e] = cmul(base, s.outer_tw[e]);
    }
    // e^(sign 2 pi i m / R) (R <= 8: constants).
    template <int SIGN> __device__ static inline float2 small_root(int m) {
        constexpr float H = 0.70710678118654752f;
        constexpr float C8[8] = {1.f, H, 0.f, -H, -1.f, -H, 0.f, H};
        constexpr float S8[8] = {0.f, H, 1.f, H, 0.f, -H, -1.f, -H};
        const int i = (m * (8 / R)) & 7;
        return make_float2(C8[i], float(SIGN) * S8[i]);
    }
    // The full n-point DFT (n = 1, 2, 4) of x in place, e^(sign 2 pi i j k / n).
    template <int N, int SIGN> __device__ static inline void small_dft(float2 (&x)[N]) {
        if constexpr (N == 2) {
            const float2 a = x[0], b = x[1];
            x[0] = cadd(a, b);
            x[1] = make_float2(a.x - b.x, a.y - b.y);
        } else if constexpr (N == 4) {
            const float2 a = cadd(x[0], x[2]), b = make_float2(x[0].x - x[2].x, x[0].y - x[2].y);
            const float2 c = cadd(x[1], x[3]), d0 = make_float2(x[1].x - x[3].x, x[1].y - x[3].y);
            const float2 d = SIGN < 0 ? make_float2(d0.y, -d0.x) : make_float2(-d0.y, d0.x); // times e^(sign i pi / 2)
            x[0] = cadd(a, c);
            x[2] = make_float2(a.x - c.x, a.y - c.y);
            x[1] = cadd(b, d);
            x[3] = make_float2(b.x - d.x, b.y - d.y);
        }
    }

    // The pair into the planes (through the outer step when R > 1), V positions per thread at a time.
    __device__ static inline void load_input(const tables &s, planes &m, const raw_rows *raw, const layout &g, source src,
                                             const pair_rows &rows, int tid) {
        if constexpr (R == 1) {
            for (int n0 = V * tid; n0 < L / 2; n0 += V * SLOT_THREADS) {
                float a[V], b[V];
                input_v(raw, g, src, rows, 0, n0, a);
                input_v(raw, g, src, rows, 1, n0, b);
                store_v(plane_at(m.re, n0), a);
                store_v(plane_at(m.im, n0), b);
            }
        } else {
            const float scale = rsqrtf(float(R));
            for (int t0 = V * tid; t0 < M; t0 += V * SLOT_THREADS) {
                float xr[R / 2][V], xi[R / 2][V];
#pragma unroll
                for (int k = 0; k < R / 2; k++) {
                    input_v(raw, g, src, rows, 0, k * M + t0, xr[k]);
                    input_v(raw, g, src, rows, 1, k * M + t0, xi[k]);
                }
                float zr[R][V], zi[R][V];
                float2 w1[V];
                outer_twiddles(s, t0, w1);
#pragma unroll
                for (int e = 0; e < V; e++) {
                    // Y_2j = DFT_{R/2}(x)_j, Y_2j+1 = DFT_{R/2}(x_k e^(-2 pi i k / R))_j.
                    float2 even[R / 2], odd[R / 2];
#pragma unroll
                    for (int k = 0; k < R / 2; k++) {
                        even[k] = make_float2(scale * xr[k][e], scale * xi[k][e]);
                        odd[k] = k ? cmul(even[k], small_root<-1>(k)) : even[k];
                    }
                    small_dft<R / 2, -1>(even);
                    small_dft<R / 2, -1>(odd);
                    float2 w = w1[e]; // e^(-2 pi i j t / L) for j = 1, 2, ..
#pragma unroll
                    for (int j = 0; j < R; j++) {
                        float2 y = j % 2 ? odd[j / 2] : even[j / 2];
                        if (j) {
                            y = cmul(y, w);
                            if (j + 1 < R) w = cmul(w, w1[e]);
                        }
                        zr[j][e] = y.x;
                        zi[j][e] = y.y;
                    }
                }
#pragma unroll
                for (int j = 0; j < R; j++) {
                    store_v(plane_at(m.re, j * M + t0), zr[j]);
                    store_v(plane_at(m.im, j * M + t0), zi[j]);
                }
            }
        }
    }

    // Samples n0 .. n0 + V - 1 of a row's sequence (n0 a multiple of V), those before `end`, times their postgates
    // (none where postgate is null), into y: one vector store (and postgate load) where the layout allows.
    __device__ static inline void output_v(const layout &g, T *y, const T *postgate, size_t row, int n0, int end,
                                           const float (&v)[V]) {
        if (g.vectors && n0 + V <= end) { // lengths (and blocks) are multiples of 8: one aligned vector
            const size_t at = row + first_element(g, n0, V);
            float out[V];
#pragma unroll
            for (int e = 0; e < V; e++) out[e] = v[e];
            orient(g, out);
            if (postgate) {
                float p[V];
                unpack_words(*reinterpret_cast<const vec *>(postgate + at), p);
#pragma unroll
                for (int e = 0; e < V; e++) out[e] *= p[e];
            }
            *reinterpret_cast<vec *>(y + at) = pack_words(out);
            return;
        }
        for (int e = 0; e < V && n0 + e < end; e++) {
            const size_t at = row + element(g, n0 + e);
            const float p = postgate ? S::to_float(postgate[at]) : 1.f;
            y[at] = base_types::convertor<T, float>::convert(v[e] * p);
        }
    }

    // The planes back to samples n < limit, through the inverse outer step when R > 1: emit(n0, re, im) for each V
    // samples from n0 (a multiple of V) that start before the limit. The limit is at most L / 2 (the kept half) unless
    // ALL, which computes every sample (the planes' inverse steps must then have kept every digit).
    template <bool ALL = false, typename EMIT>
    __device__ static inline void store_output(const tables &s, const planes &m, int limit, int tid, EMIT &&emit) {
        constexpr int OUT = ALL ? R : (R > 1 ? R / 2 : 1); // outer digits computed
        if constexpr (R == 1) {
            for (int n0 = V * tid; n0 < limit; n0 += V * SLOT_THREADS) {
                float a[V], b[V];
                load_v(plane_at(m.re, n0), a);
                load_v(plane_at(m.im, n0), b);
                emit(n0, a, b);
            }
        } else {
            const float scale = rsqrtf(float(R));
            for (int t0 = V * tid; t0 < M && t0 < limit; t0 += V * SLOT_THREADS) {
                float zr[R][V], zi[R][V];
#pragma unroll
                for (int j = 0; j < R; j++) {
                    load_v(plane_at(m.re, j * M + t0), zr[j]);
                    load_v(plane_at(m.im, j * M + t0), zi[j]);
                }
                float yr[OUT][V], yi[OUT][V];
                float2 w1[V];
                outer_twiddles(s, t0, w1);
#pragma unroll
                for (int e = 0; e < V; e++) {
                    // y_k = E_k + e^(2 pi i k / R) O_k, y_(k + R/2) = E_k - e^(2 pi i k / R) O_k (k < R / 2), E and O the
                    // inverse DFTs of the even and odd inputs, each times e^(2 pi i j t / L) first.
                    float2 even[R / 2], odd[R / 2], w = w1[e];
#pragma unroll
                    for (int j = 0; j < R; j++) {
                        float2 z = make_float2(scale * zr[j][e], scale * zi[j][e]);
                        if (j) {
                            z = cmul_conj(z, w);
                            if (j + 1 < R) w = cmul(w, w1[e]);
                        }
                        (j % 2 ? odd : even)[j / 2] = z;
                    }
                    small_dft<R / 2, 1>(even);
                    small_dft<R / 2, 1>(odd);
#pragma unroll
                    for (int k = 0; k < R / 2; k++) {
                        const float2 o = k ? cmul(odd[k], small_root<1>(k)) : odd[k];
                        yr[k][e] = even[k].x + o.x;
                        yi[k][e] = even[k].y + o.y;
                        if constexpr (ALL) {
                            yr[k + R / 2][e] = even[k].x - o.x;
                            yi[k + R / 2][e] = even[k].y - o.y;
                        }
                    }
                }
#pragma unroll
                for (int k = 0; k < OUT; k++)
                    if (k * M + t0 < limit) emit(k * M + t0, yr[k], yi[k]);
            }
        }
    }
};

} // namespace tk_fftconv
