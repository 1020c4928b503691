// FFT convolution forward on tensor cores (docs/fftconv.md: the factorisation, the precision and the choices below).
//
// The L-point DFT (L = N1 * N2) of a sequence viewed as the N1 x N2 matrix X (row n1 holds samples N2 n1 ..) is
//     DFT(x) = ((F_N1 X) .* T) F_N2   read column-major (element (j1, j2) is frequency j1 + N1 j2),
// with F_n the n-point DFT matrix and T[j1, n2] = e^(-2 pi i j1 n2 / L). The inverse runs the steps backwards on the
// (j1, j2) matrix with conjugates, which leaves the samples in natural row-major order, so the spectrum is never
// reordered. The DFT matrices are scaled by 1 / sqrt(n) (unitary), which keeps every 16-bit intermediate at the
// scale of the data (fp16 has no exponent range to spare) and makes the forward-inverse pair need no 1 / L.
//
// A block owns one head and a slab of batch rows, taken two at a time: rows b and b + 1 share the (real) filter, so
// the complex sequence u_b + i u_(b+1) convolves both at once (real part -> y_b, imaginary part -> y_(b+1)). Per
// pair, four complex matrix products, each a set of 16 x 16 output tiles spread over the warps (mma.sync), operands
// from shared memory, fp32 accumulation, one rounding to 16 bits per stage:
//   1. A = (F_N1 X) .* T          X: the pair, zero past N (rows n1 >= N1 / 2 are all zero: half the k-steps)
//   2. C = (A F_N2) .* K          K: the head's spectrum in (j1, j2) order, fp32, loaded once per block
//   3. D = (C conj(F_N2)) .* conj(T)
//   4. E = conj(F_N1) D           only rows n1 < N1 / 2 (outputs n < L / 2 >= N), straight to global memory
// Stages alternate between two pairs of shared planes (real, imaginary), with a block barrier between them.
#pragma once

#include "fftconv.h"
#include "kittens.cuh"

namespace tk_fftconv {
using namespace kittens;

// The factorisation of each built FFT size: N1 >= N2, since stages 1 and 4 cost half of stages 2 and 3 per row.
template <int L> struct factors;
template <> struct factors<256> { static constexpr int N1 = 16, N2 = 16; };
template <> struct factors<512> { static constexpr int N1 = 32, N2 = 16; };
template <> struct factors<1024> { static constexpr int N1 = 32, N2 = 32; };
template <> struct factors<2048> { static constexpr int N1 = 64, N2 = 32; };
template <> struct factors<4096> { static constexpr int N1 = 64, N2 = 64; };
template <> struct factors<8192> { static constexpr int N1 = 128, N2 = 64; };

template <typename T, int L> struct fftconv_fwd {
    static constexpr int N1 = factors<L>::N1, N2 = factors<L>::N2;
    // Rows of X that can hold samples (N <= L / 2 fills at most the first N1 / 2), which are also the rows of E that
    // hold kept outputs; a whole tile of 16 at the smallest size.
    static constexpr int HALF_ROWS = N1 / 2 >= TILE_DIM ? N1 / 2 : N1;

    using T2 = base_types::packed_t<T>;
    using plane = st<T, N1, N2>;
    using tile = rt<T, TILE_DIM, TILE_DIM>;            // an A operand (row layout)
    using tile_b = rt<T, TILE_DIM, TILE_DIM, col_l>;  // a B operand
    using acc = rt_fl<TILE_DIM, TILE_DIM>;

    // Output tiles of one pair's stages 1 to 3, and of stage 4 (the kept half of the rows only).
    static constexpr int TILES = (N1 / TILE_DIM) * (N2 / TILE_DIM);
    static constexpr int KEPT_TILES = (HALF_ROWS / TILE_DIM) * (N2 / TILE_DIM);
    // A block has 8 warps (16 at L = 8192, below); where one pair's stage 4 has fewer tiles than that (L <= 2048), the
    // block transforms SLOTS pairs side by side, each on its own planes and WARPS / SLOTS warps, so that no warp idles
    // in stage 4 while the others finish (the stages are separated by block barriers).
    static constexpr int SLOTS = KEPT_TILES >= 8 ? 1 : 8 / KEPT_TILES;

    // The next pairs' raw rows (u, and the pregate where there is room), copied by cp.async while the current ones
    // transform: a pair's input then no longer waits on global memory at the start of its stage 1.
    static constexpr int MAX_LEN = L / 2;
    struct core_block {
        plane xr[SLOTS], xi[SLOTS], yr[SLOTS], yi[SLOTS]; // each slot's pair, ping-pong between stages
        st<T, N1, N1> f1r, f1i;                           // F_N1 / sqrt(N1)
        st<T, N2, N2> f2r, f2i;                           // F_N2 / sqrt(N2)
        float kr[N1 * N2], ki[N1 * N2];                   // the head's spectrum K[j1 + N1 j2] at [j1 * N2 + j2]
        T raw_u[SLOTS][2][MAX_LEN];                       // rows b0, b0 + 1 of each slot's next pair
    };
    // A block works on one group of pairs at a time, stage after stage with a barrier between: warps of a second block
    // (or twice the warps, where shared memory holds one block only) fill the gaps. Two 8-warp blocks per SM, or one of
    // 16 warps; either way 128 registers a thread. (Each block also reserves 1 KB of the SM's shared memory.)
    static constexpr int BLOCKS_PER_SM = 2 * (sizeof(core_block) + 1024) <= MAX_SHARED_MEMORY ? 2 : 1;
    static constexpr int WARPS = BLOCKS_PER_SM == 2 ? 8 : 16, THREADS = WARPS * WARP_THREADS;
    static constexpr int SLOT_WARPS = WARPS / SLOTS;
    static_assert(SLOTS == 1 || BLOCKS_PER_SM == 2, "fftconv: slots are for the small sizes' 8-warp blocks");
    static constexpr bool STAGE_PREGATE =
        BLOCKS_PER_SM * (sizeof(core_block) + sizeof(T) * SLOTS * 2 * MAX_LEN + 1024) <= MAX_SHARED_MEMORY;
    struct shared_block : core_block {
        T raw_gate[STAGE_PREGATE ? SLOTS : 1][2][STAGE_PREGATE ? MAX_LEN : 8];
    };
    static constexpr int SHARED_BYTES = int(sizeof(shared_block));
    static_assert(SHARED_BYTES <= MAX_SHARED_MEMORY, "fftconv: a block's planes, DFT matrices and spectrum exceed shared memory");

    struct globals {
        const T *u, *pregate, *postgate; // gates may be null
        const float2 *k_f;               // (heads, L / 2 + 1)
        T *y;
        int batch, heads, len;
        int pairs_per_block, slabs;
        int paired; // an even length and 4-byte aligned u, gates and y: two neighbouring samples are one access
        int staged; // a length that is a multiple of 8 and 16-byte aligned u and pregate: inputs arrive by cp.async
    };

    __device__ static inline void store_pair(uint32_t addr, float x, float y) {
        const T2 v = base_types::convertor<T2, float2>::convert(make_float2(x, y));
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(detail::memory::bitcast<uint32_t>(v)) : "memory");
    }
    __device__ static inline float to_float(T x) { return base_types::convertor<float, T>::convert(x); }

    // e^(sign 2 pi i e / m) for an integer exponent e: reduced mod m (a power of two) into [-m/2, m/2) in integers,
    // so the fast sine and cosine see |angle| <= pi, where their absolute error is about 4e-7.
    template <int m, int SIGN> __device__ static inline float2 unit_root(int e) {
        e &= m - 1;
        if (e >= m / 2) e -= m;
        float s, c;
        __sincosf(float(SIGN) * (2.f * 3.14159265358979f / float(m)) * float(e), &s, &c);
        return make_float2(c, s);
    }

    // F_n / sqrt(n) into two planes (rounded to 16 bits once, well above the sine's error).
    template <int n> __device__ static inline void build_dft(st<T, n, n> &re, st<T, n, n> &im) {
        const float scale = rsqrtf(float(n));
        for (int i = threadIdx.x; i < n * n / 2; i += THREADS) {
            const int j = 2 * i / n, m = 2 * i % n;
            const float2 w0 = unit_root<n, -1>(j * m), w1 = unit_root<n, -1>(j * (m + 1));
            store_pair(re.idx(j, m), scale * w0.x, scale * w1.x);
            store_pair(im.idx(j, m), scale * w0.y, scale * w1.y);
        }
    }

    // The head's spectrum in (j1, j2) order from its rfft half, read once in order (coalesced): frequency j sits at
    // [(j % N1) * N2 + j / N1], and K[L - j] = conj K[j] (the filter is real) fills the other half.
    __device__ static inline void load_spectrum(shared_block &s, const float2 *k_f) {
        const auto at = [](int j) { return (j % N1) * N2 + j / N1; };
        for (int j = threadIdx.x; j <= L / 2; j += THREADS) {
            const float2 c = k_f[j];
            s.kr[at(j)] = c.x;
            s.ki[at(j)] = c.y;
            if (j > 0 && j < L / 2) {
                s.kr[at(L - j)] = c.x;
                s.ki[at(L - j)] = -c.y;
            }
        }
    }

    // Sample n of row b (times its pregate), zero past the sequence or the batch.
    __device__ static inline float sample(const globals &g, size_t row, bool valid_row, int n) {
        if (!valid_row || n >= g.len) return 0.f;
        const float x = to_float(g.u[row + n]);
        return g.pregate ? x * to_float(g.pregate[row + n]) : x;
    }

    // Samples n and n + 1 (n even) of row b (times their pregates), zero past the sequence or the batch; one 4-byte
    // load each when g.paired.
    __device__ static inline float2 sample_pair(const globals &g, size_t row, bool valid_row, int n) {
        if (!valid_row || n >= g.len) return make_float2(0.f, 0.f);
        if (g.paired) {
            float2 x = base_types::convertor<float2, T2>::convert(*reinterpret_cast<const T2 *>(g.u + row + n));
            if (g.pregate) {
                const float2 p = base_types::convertor<float2, T2>::convert(*reinterpret_cast<const T2 *>(g.pregate + row + n));
                x = make_float2(x.x * p.x, x.y * p.y);
            }
            return x;
        }
        return make_float2(sample(g, row, true, n), sample(g, row, true, n + 1));
    }

    // Global offsets of the rows of slot q's pair in the group starting at pair0 (b0 = 2 (pair0 + q)), and whether they
    // exist: the pair may lie past the block's last (a short final group), its second row past the batch.
    struct slot_rows {
        size_t row0, row1;
        bool first, second;
    };
    __device__ static inline slot_rows rows_of(const globals &g, int pair0, int q, int last, int h) {
        const int b0 = 2 * (pair0 + q);
        slot_rows r;
        r.first = pair0 + q < last;
        r.second = r.first && b0 + 1 < g.batch;
        r.row0 = r.first ? (size_t(b0) * g.heads + h) * g.len : 0;
        r.row1 = r.second ? r.row0 + size_t(g.heads) * g.len : r.row0;
        return r;
    }

    // Start copying the rows of the group's pairs into the raw buffers (g.staged): 16-byte pieces, rows that do not
    // exist zero-filled. Waited for by load_staged.
    __device__ static inline void prefetch(shared_block &s, const globals &g, int pair0, int last, int h) {
        const int pieces = g.len / 8; // per row
#pragma unroll
        for (int q = 0; q < SLOTS; q++) {
            const slot_rows rows = rows_of(g, pair0, q, last, h);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const size_t row = r ? rows.row1 : rows.row0; // row 0 of the tensor where the row does not exist
                const T *u = g.u + row, *gate = g.pregate ? g.pregate + row : nullptr;
                const uint32_t bytes = (r ? rows.second : rows.first) ? 16 : 0;
                for (int at = 8 * threadIdx.x; at < 8 * pieces; at += 8 * THREADS) {
                    detail::memory::cp_async_16(smem_addr(&s.raw_u[q][r][at]), u + at, bytes);
                    if (STAGE_PREGATE && gate) detail::memory::cp_async_16(smem_addr(&s.raw_gate[q][r][at]), gate + at, bytes);
                }
            }
        }
        detail::memory::cp_async_commit();
    }

    // load_input from the raw buffers that prefetch filled (the pregate from global memory where it is not staged).
    __device__ static inline void load_staged(shared_block &s, const globals &g, int pair0, int last, int h) {
        detail::memory::cp_async_wait<0>();
        __syncthreads(); // every thread's pieces have landed
        const auto raw = [&](const T *p, int n) { return base_types::convertor<float2, T2>::convert(*reinterpret_cast<const T2 *>(p + n)); };
        constexpr int PER_SLOT = HALF_ROWS * N2 / 2;
        for (int i = threadIdx.x; i < SLOTS * PER_SLOT; i += THREADS) {
            const int q = i / PER_SLOT, n = 2 * (i - q * PER_SLOT), n1 = n / N2, n2 = n % N2;
            float2 a = make_float2(0.f, 0.f), b = a;
            if (n < g.len) { // g.len is even: n + 1 < g.len too
                a = raw(s.raw_u[q][0], n);
                b = raw(s.raw_u[q][1], n);
                if (g.pregate) {
                    float2 pa, pb;
                    if constexpr (STAGE_PREGATE) {
                        pa = raw(s.raw_gate[q][0], n);
                        pb = raw(s.raw_gate[q][1], n);
                    } else {
                        const slot_rows rows = rows_of(g, pair0, q, last, h);
                        pa = rows.first ? raw(g.pregate + rows.row0, n) : make_float2(0.f, 0.f);
                        pb = rows.second ? raw(g.pregate + rows.row1, n) : make_float2(0.f, 0.f);
                    }
                    a = make_float2(a.x * pa.x, a.y * pa.y);
                    b = make_float2(b.x * pb.x, b.y * pb.y);
                }
            }
            store_pair(s.xr[q].idx(n1, n2), a.x, a.y);
            store_pair(s.xi[q].idx(n1, n2), b.x, b.y);
        }
    }

    // The group's pairs as X = u_b0 + i u_b0+1 (rows n1 < HALF_ROWS; the others are never read), from global memory.
    __device__ static inline void load_input(shared_block &s, const globals &g, int pair0, int last, int h) {
        constexpr int PER_SLOT = HALF_ROWS * N2 / 2;
        for (int i = threadIdx.x; i < SLOTS * PER_SLOT; i += THREADS) {
            const int q = i / PER_SLOT, n = 2 * (i - q * PER_SLOT), n1 = n / N2, n2 = n % N2;
            const slot_rows rows = rows_of(g, pair0, q, last, h);
            const float2 a = sample_pair(g, rows.row0, rows.first, n), b = sample_pair(g, rows.row1, rows.second, n);
            store_pair(s.xr[q].idx(n1, n2), a.x, a.y);
            store_pair(s.xi[q].idx(n1, n2), b.x, b.y);
        }
    }

    // One 16 x 16 tile of the complex product (Ar + i sa Ai)(Br + i sb Bi), sa = -1 for CONJ_A (sb for CONJ_B):
    // A's rows a_row0 .., B's columns b_col0 .., K_TILES k-steps of 16. Four real products in fp32 accumulators:
    // re = rr - sa sb ii, im = sb ri + sa ir.
    template <bool CONJ_A, bool CONJ_B, int K_TILES, typename SA, typename SB>
    __device__ static inline void complex_tile(acc &re, acc &im, const SA &ar, const SA &ai, int a_row0, const SB &br,
                                               const SB &bi, int b_col0) {
        acc rr, ii, ri, ir;
        zero(rr);
        zero(ii);
        zero(ri);
        zero(ir);
#pragma unroll 2
        for (int k = 0; k < K_TILES; k++) {
            tile a_r, a_i;
            tile_b b_r, b_i;
            load(a_r, ar, a_row0, k * TILE_DIM);
            load(a_i, ai, a_row0, k * TILE_DIM);
            load(b_r, br, k * TILE_DIM, b_col0);
            load(b_i, bi, k * TILE_DIM, b_col0);
            mma_AB(rr, a_r, b_r, rr);
            mma_AB(ii, a_i, b_i, ii);
            mma_AB(ri, a_r, b_i, ri);
            mma_AB(ir, a_i, b_r, ir);
        }
        constexpr float sab = CONJ_A != CONJ_B ? 1.f : -1.f; // -sa sb
        constexpr float sa = CONJ_A ? -1.f : 1.f, sb = CONJ_B ? -1.f : 1.f;
        for_each_pair([&](pair_pos, float2 &r, float2 &i, const float2 &p_rr, const float2 &p_ii, const float2 &p_ri,
                          const float2 &p_ir) {
            r = make_float2(p_rr.x + sab * p_ii.x, p_rr.y + sab * p_ii.y);
            i = make_float2(sb * p_ri.x + sa * p_ir.x, sb * p_ri.y + sa * p_ir.y);
        }, re, im, rr, ii, ri, ir);
    }

    // (re, im) *= e^(sign 2 pi i j1 n2 / L) with j1 = row0 + row, n2 = col0 + col: the twiddles.
    template <int SIGN> __device__ static inline void twiddle(acc &re, acc &im, int row0, int col0) {
        auto rotate = [](float &x, float &y, int e) {
            const float2 w = unit_root<L, SIGN>(e);
            const float xr = x * w.x - y * w.y;
            y = x * w.y + y * w.x;
            x = xr;
        };
        for_each_pair([&](pair_pos p, float2 &r, float2 &i) {
            const int j1 = row0 + p.row, n2 = col0 + p.col;
            rotate(r.x, i.x, j1 * n2);
            rotate(r.y, i.y, j1 * (n2 + 1));
        }, re, im);
    }

    __device__ static inline void store_tile(plane &dst_r, plane &dst_i, const acc &re, const acc &im, int row0, int col0) {
        tile r16, i16;
        copy(r16, re);
        copy(i16, im);
        store(dst_r, r16, row0, col0);
        store(dst_i, i16, row0, col0);
    }

    // Stages 1 to 4 of slot q's pair; `warp` counts the slot's warps (0 .. SLOT_WARPS - 1).
    // 1. A = (F_N1 X) .* T into y.
    __device__ static inline void stage1(shared_block &s, int q, int warp) {
        for (int t = warp; t < TILES; t += SLOT_WARPS) {
            const int row0 = t / (N2 / TILE_DIM) * TILE_DIM, col0 = t % (N2 / TILE_DIM) * TILE_DIM;
            acc re, im;
            complex_tile<false, false, HALF_ROWS / TILE_DIM>(re, im, s.f1r, s.f1i, row0, s.xr[q], s.xi[q], col0);
            twiddle<-1>(re, im, row0, col0);
            store_tile(s.yr[q], s.yi[q], re, im, row0, col0);
        }
    }

    // 2. C = (A F_N2) .* K into x.
    __device__ static inline void stage2(shared_block &s, int q, int warp) {
        for (int t = warp; t < TILES; t += SLOT_WARPS) {
            const int row0 = t / (N2 / TILE_DIM) * TILE_DIM, col0 = t % (N2 / TILE_DIM) * TILE_DIM;
            acc re, im;
            complex_tile<false, false, N2 / TILE_DIM>(re, im, s.yr[q], s.yi[q], row0, s.f2r, s.f2i, col0);
            for_each_pair([&](pair_pos p, float2 &r, float2 &i) {
                const int at = (row0 + p.row) * N2 + col0 + p.col;
                const float2 kr = *reinterpret_cast<const float2 *>(&s.kr[at]);
                const float2 ki = *reinterpret_cast<const float2 *>(&s.ki[at]);
                const float2 a = r, b = i;
                r = make_float2(a.x * kr.x - b.x * ki.x, a.y * kr.y - b.y * ki.y);
                i = make_float2(a.x * ki.x + b.x * kr.x, a.y * ki.y + b.y * kr.y);
            }, re, im);
            store_tile(s.xr[q], s.xi[q], re, im, row0, col0);
        }
    }

    // 3. D = (C conj(F_N2)) .* conj(T) into y.
    __device__ static inline void stage3(shared_block &s, int q, int warp) {
        for (int t = warp; t < TILES; t += SLOT_WARPS) {
            const int row0 = t / (N2 / TILE_DIM) * TILE_DIM, col0 = t % (N2 / TILE_DIM) * TILE_DIM;
            acc re, im;
            complex_tile<false, true, N2 / TILE_DIM>(re, im, s.xr[q], s.xi[q], row0, s.f2r, s.f2i, col0);
            twiddle<1>(re, im, row0, col0);
            store_tile(s.yr[q], s.yi[q], re, im, row0, col0);
        }
    }

    // 4. E = conj(F_N1) D, rows n1 < HALF_ROWS: the real part is y_b0, the imaginary part y_b0+1 (times the
    // postgates), sample n = N2 n1 + n2 kept while n < N.
    __device__ static inline void stage4(shared_block &s, const globals &g, const slot_rows &rows, int q, int warp) {
        if (!rows.first) return; // a slot past the block's last pair
        for (int t = warp; t < KEPT_TILES; t += SLOT_WARPS) {
            const int tr = t / (N2 / TILE_DIM) * TILE_DIM, tc = t % (N2 / TILE_DIM) * TILE_DIM;
            acc re, im;
            complex_tile<true, false, N1 / TILE_DIM>(re, im, s.f1r, s.f1i, tr, s.yr[q], s.yi[q], tc);
            for_each_pair([&](pair_pos p, const float2 &r, const float2 &i) {
                const int n = N2 * (tr + p.row) + tc + p.col; // even
                put_pair(g, rows.row0, n, r);
                if (rows.second) put_pair(g, rows.row1, n, i);
            }, re, im);
        }
    }
    __device__ static inline void put(const globals &g, size_t at, float v) {
        if (g.postgate) v *= to_float(g.postgate[at]);
        g.y[at] = base_types::convertor<T, float>::convert(v);
    }
    // Outputs n and n + 1 (n even) of a row, those before the sequence's end: one 4-byte store when g.paired.
    __device__ static inline void put_pair(const globals &g, size_t row, int n, float2 v) {
        if (g.paired && n + 1 < g.len) {
            if (g.postgate) {
                const float2 q = base_types::convertor<float2, T2>::convert(*reinterpret_cast<const T2 *>(g.postgate + row + n));
                v = make_float2(v.x * q.x, v.y * q.y);
            }
            *reinterpret_cast<T2 *>(g.y + row + n) = base_types::convertor<T2, float2>::convert(v);
            return;
        }
        if (n < g.len) put(g, row + n, v.x);
        if (n + 1 < g.len) put(g, row + n + 1, v.y);
    }

    // The slab of pairs of one head: the DFT matrices and the spectrum once, then each group of SLOTS pairs through the
    // four stages, slot q on warps q SLOT_WARPS ...
    __device__ static inline void run(const globals &g) {
        extern __shared__ alignment_dummy shm[];
        if (smem_addr(shm) % 1024 != 0) __trap(); // the swizzled planes need 1 KB alignment
        shared_block &s = *reinterpret_cast<shared_block *>(shm);
        const int h = blockIdx.x % g.heads, slab = blockIdx.x / g.heads;
        const int q = threadIdx.x / WARP_THREADS / SLOT_WARPS, warp = threadIdx.x / WARP_THREADS % SLOT_WARPS;
        const int pairs = (g.batch + 1) / 2;
        const int first = slab * g.pairs_per_block;
        const int last = min(pairs, first + g.pairs_per_block);
        if (g.staged && first < last) prefetch(s, g, first, last, h);
        build_dft<N1>(s.f1r, s.f1i);
        build_dft<N2>(s.f2r, s.f2i);
        load_spectrum(s, g.k_f + size_t(h) * (L / 2 + 1));
        for (int pair0 = first; pair0 < last; pair0 += SLOTS) {
            if (g.staged) load_staged(s, g, pair0, last, h);
            else load_input(s, g, pair0, last, h);
            __syncthreads(); // also orders the previous group's stage 4 (reads y) before this stage 1 (writes y), and
                             // this group's reads of the raw buffers before the next group's copies into them
            if (g.staged && pair0 + SLOTS < last) prefetch(s, g, pair0 + SLOTS, last, h);
            stage1(s, q, warp);
            __syncthreads();
            stage2(s, q, warp);
            __syncthreads();
            stage3(s, q, warp);
            __syncthreads(); // the next group's load rewrites x, which stage 3 read
            stage4(s, g, rows_of(g, pair0, q, last, h), q, warp);
        }
    }
};

template <typename K> __global__ __launch_bounds__(K::THREADS, K::BLOCKS_PER_SM) void fftconv_fwd_kernel(const __grid_constant__ typename K::globals g) {
    K::run(g);
}

} // namespace tk_fftconv
