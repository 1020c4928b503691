// FFT convolution forward on tensor cores (docs/fftconv.md: the factorisation, the precision and the choices below).
//
// A block owns SLOTS independent workers ("slots"), each a group of warps with its own shared memory, and a slot
// convolves one pair of batch rows of one head at a time: rows b and b + 1 share the (real) filter, so the complex
// sequence x = u_b + i u_(b+1) convolves both at once (real part -> y_b, imaginary part -> y_(b+1)).
//
// The L-point FFT, L = R * 16^A (R in 1, 2, 4, 8; A >= 2), runs in place on the pair's two planes (real, imaginary),
// decimation in frequency, level by level: the outer radix-R step on the CUDA cores while the input is loaded, then
// one radix-16 step per level of length LS = 16^A .. 16, each a product of the 16-point DFT matrix with 16-digit
// columns of the planes (mma.sync; the matrix lives in registers, the columns arrive by ldmatrix) and a twiddle
// e^(-2 pi i j t / LS) per output. The frequencies end in digit-reversed positions, where the filter's spectrum is
// stored in the same order; the inverse runs the levels back (conjugate matrices and twiddles) and the outer radix-R
// step returns the samples in natural order as they are stored. The complex products are real ones on stacked
// operands, [Yr; Yi] = [[Fr, -Fi], [Fi, Fr]] [Xr; Xi], so nothing is recombined after the tensor cores. The DFT
// matrices carry 1 / sqrt(16) (and the radix-R steps 1 / sqrt(R)): every stage is unitary, so every 16-bit
// intermediate stays at the scale of the data and no 1 / L is needed at the end.
//
// Zero padding: samples n >= L / 2 are zero, so with R = 1 the first radix-16 step reads only digits 0..7 (half the
// k-steps) and the last inverse step computes only digits 0..7 (the kept half); with R > 1 the radix-R step adds
// only its first R / 2 inputs and keeps its first R / 2 outputs.
#pragma once

#include "fftconv.h"
#include "kittens.cuh"

namespace tk_fftconv {
using namespace kittens;

// The outer radix R of L = R * 16^A, A >= 2: the smallest power of two leaving a power of 16.
constexpr int outer_radix(int l) {
    for (int r = 1;; r *= 2) {
        int m = l / r;
        while (m % 16 == 0) m /= 16;
        if (m == 1) return r;
    }
}

// Byte offset of element p of a 16-bit plane: the 16-byte chunk within each 128-byte line is XORed with a hash of the
// line, so that the eight 16-byte rows one ldmatrix / stmatrix matrix touches (digits at a stride of 16^k elements,
// or 8 consecutive 16-element columns) fall in eight different bank groups at every level (docs/fftconv.md).
__device__ __forceinline__ uint32_t plane_offset(uint32_t p) {
    const uint32_t b = 2 * p, line = b >> 7;
    return b ^ (((line ^ (line >> 2) ^ (line >> 5) ^ (line >> 8)) & 7) << 4);
}

// e^(sign 2 pi i e / m) for an integer exponent, m a power of two (exact argument reduction, then sincospif).
template <int SIGN> __device__ inline float2 root_of_unity(int e, int m) {
    e &= m - 1;
    float s, c;
    sincospif(float(SIGN) * 2.f * float(e) / float(m), &s, &c);
    return make_float2(c, s);
}

__device__ __forceinline__ float2 cmul(float2 a, float2 b) { return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }
__device__ __forceinline__ float2 cadd(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 cmul_conj(float2 a, float2 b) { return make_float2(a.x * b.x + a.y * b.y, a.y * b.x - a.x * b.y); }

template <typename T, int L> struct fftconv_fwd {
    static constexpr int R = outer_radix(L), M = L / R; // M = 16^A
    static_assert(M >= 256, "fftconv: at least two radix-16 levels");
    using T2 = base_types::packed_t<T>;

    // Every radix-16 step is L / 16 columns of 16 digits, dealt to the slot's warps in 16-column units (two n = 8
    // tiles of the mma). Enough warps per slot for two units each at the largest sizes; 16 warps per block.
    static constexpr int UNITS = L / 256;
    static constexpr int SLOT_WARPS = UNITS >= 4 ? (UNITS / 2 < 16 ? UNITS / 2 : 16) : 1;
    static constexpr int WARPS = 16, THREADS = WARPS * WARP_THREADS, SLOTS = WARPS / SLOT_WARPS;
    static constexpr int SLOT_THREADS = SLOT_WARPS * WARP_THREADS;
    static_assert(UNITS % SLOT_WARPS == 0, "fftconv: every warp of a slot takes the same number of units");
    static constexpr int MAX_LEN = L / 2;

    // Twiddle tables of the radix-16 levels 256 and 4096 (where M reaches them), each in the fragment order of the
    // stage that reads it, so that a thread's four values are two 16-byte loads: FWD[lv] multiplies the outputs of the
    // forward step at that level, INV[lv] the outputs of the inverse step one level below (the next one's inputs).
    static constexpr int TW_LEVELS = M >= 4096 ? 2 : 1;
    static constexpr int tw_level_len(int lv) { return lv == 0 ? 256 : 4096; }
    static constexpr int tw_offset(int lv, bool inv) { return (lv == 0 ? 0 : 512) + (inv ? tw_level_len(lv) : 0); }
    static constexpr int TW_LEN = TW_LEVELS == 2 ? 512 + 8192 : 512;
    // The outer radix's twiddles e^(-2 pi i e / L) = HI[e / 64] LO[e % 64].
    static constexpr int OUTER_TW = R > 1 ? L / 64 + 64 : 1;

    struct alignas(128) slot_memory {
        T re[L], im[L];   // the pair, in place through every stage (plane_offset order)
        float2 spectrum[L]; // the head's spectrum in the middle stage's fragment order
        T raw[2][2][MAX_LEN]; // the next pair's rows as they are in global memory: [u, pregate][row]
    };
    struct shared_block {
        float2 tw[TW_LEN];
        float2 outer_tw[OUTER_TW];
        slot_memory slot[SLOTS];
    };
    static constexpr int SHARED_BYTES = int(sizeof(shared_block));
    static_assert(SHARED_BYTES + 1024 <= MAX_SHARED_MEMORY, "fftconv: a block's shared memory exceeds the SM's");

    struct globals {
        const T *u, *pregate, *postgate; // gates may be null
        const float2 *k_f;               // (heads, L / 2 + 1)
        T *y;
        int batch, heads, len;
        int paired; // an even length and 4-byte aligned u, gates and y: two neighbouring samples are one access
        int staged; // a length that is a multiple of 8 and 16-byte aligned u and pregate: inputs arrive by cp.async
        int vectors; // a length that is a multiple of 8 and 16-byte aligned y and postgate: outputs leave 8 at a time
    };

    __device__ static inline float to_float(T x) { return base_types::convertor<float, T>::convert(x); }
    __device__ static inline uint32_t pack(float2 v) {
        return detail::memory::bitcast<uint32_t>(base_types::convertor<T2, float2>::convert(v));
    }
    __device__ static inline float2 unpack(uint32_t v) {
        return base_types::convertor<float2, T2>::convert(detail::memory::bitcast<T2>(v));
    }
    __device__ static inline void slot_sync(int q) {
        if constexpr (SLOT_WARPS == 1) __syncwarp();
        else asm volatile("bar.sync %0, %1;\n" ::"r"(q + 1), "n"(SLOT_THREADS) : "memory");
    }

    // ---------------------------------------------------------------------------------------------------------------
    // The 16-point DFT / 4 as A fragments (rows j, columns k): real part, imaginary part and its negative.
    struct dft16 {
        uint32_t re[4], im[4], neg_im[4];
    };
    __device__ static inline dft16 make_dft16(int lane) {
        dft16 f;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int j = lane / 4 + 8 * (r % 2), k = 2 * (lane % 4) + 8 * (r / 2);
            float2 c[2];
#pragma unroll
            for (int e = 0; e < 2; e++) c[e] = root_of_unity<-1>(j * (k + e), 16);
            f.re[r] = pack(make_float2(0.25f * c[0].x, 0.25f * c[1].x));
            f.im[r] = pack(make_float2(0.25f * c[0].y, 0.25f * c[1].y));
            f.neg_im[r] = pack(make_float2(-0.25f * c[0].y, -0.25f * c[1].y));
        }
        return f;
    }

    __device__ static inline void mma(float2 (&d)[2], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        detail::reg::mma_16x8x16<T>(d[0], d[1], a, b0, b1, d[0], d[1]);
    }
    // Y = F X (forward) or conj(F) X, X = (re: b[0], b[1]; im: b[2], b[3]) the two 8-digit halves of an n = 8 tile.
    template <bool INVERSE> __device__ static inline void dft_tile(float2 (&yr)[2], float2 (&yi)[2], const dft16 &f,
                                                                 const uint32_t (&b)[4]) {
        yr[0] = yr[1] = yi[0] = yi[1] = make_float2(0.f, 0.f);
        mma(yr, f.re, b[0], b[1]);
        mma(yr, INVERSE ? f.im : f.neg_im, b[2], b[3]);
        mma(yi, INVERSE ? f.neg_im : f.im, b[0], b[1]);
        mma(yi, f.re, b[2], b[3]);
    }

    // One 16-column unit's ldmatrix / stmatrix row address for this lane: matrix lane / 8 of the x4, row lane % 8.
    // Full units: two n = 8 tiles (c = 0, 1), matrices (re digits 0-7, re 8-15, im 0-7, im 8-15) per tile; at S = 1
    // the columns are 16 contiguous digits each (non-transposed access), otherwise the digits are S apart.
    template <int LS> __device__ static inline uint32_t tile_address(const slot_memory &m, int tile, int lane) {
        constexpr int S = LS / 16;
        const int q = lane / 8, row = lane % 8;
        const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(q >= 2 ? m.im : m.re));
        if constexpr (S == 1) return base + plane_offset(16 * (8 * tile + row) + 8 * (q % 2));
        else {
            const int o = tile / (S / 8), i0 = tile % (S / 8) * 8;
            return base + plane_offset(o * LS + (8 * (q % 2) + row) * S + i0);
        }
    }
    // Half units (the top level when R = 1): matrices (re digits 0-7, im 0-7) of tile 2u, then of tile 2u + 1.
    template <int LS> __device__ static inline uint32_t half_address(const slot_memory &m, int unit, int lane) {
        constexpr int S = LS / 16;
        const int q = lane / 8, row = lane % 8, tile = 2 * unit + q / 2;
        const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(q % 2 ? m.im : m.re));
        const int o = tile / (S / 8), i0 = tile % (S / 8) * 8;
        return base + plane_offset(o * LS + row * S + i0);
    }

    // Where value v (0..3: rows lane / 4 and + 8, columns 2 (lane % 4) and + 1) of a tile's output fragment sits in a
    // table stored in fragment order: each of a warp's two 16-byte loads reads 512 contiguous bytes.
    __device__ static inline int fragment_slot(int tile, int lane, int v) { return ((2 * tile + v / 2) * WARP_THREADS + lane) * 2 + v % 2; }

    // Multiplies a tile's outputs by twiddles stored in its fragment order (index: tile within the table's period).
    __device__ static inline void twiddle(float2 (&yr)[2], float2 (&yi)[2], const float2 *tw, int tile, int lane) {
        const float4 w01 = *reinterpret_cast<const float4 *>(tw + fragment_slot(tile, lane, 0));
        const float4 w23 = *reinterpret_cast<const float4 *>(tw + fragment_slot(tile, lane, 2));
        const float2 w[4] = {make_float2(w01.x, w01.y), make_float2(w01.z, w01.w), make_float2(w23.x, w23.y),
                             make_float2(w23.z, w23.w)};
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float2 a = make_float2(yr[h].x, yi[h].x), b = make_float2(yr[h].y, yi[h].y);
            a = cmul(a, w[2 * h]);
            b = cmul(b, w[2 * h + 1]);
            yr[h] = make_float2(a.x, b.x);
            yi[h] = make_float2(a.y, b.y);
        }
    }
    __device__ static inline void store_tile(uint32_t addr, const float2 (&yr)[2], const float2 (&yi)[2], bool trans) {
        const uint32_t v[4] = {pack(yr[0]), pack(yr[1]), pack(yi[0]), pack(yi[1])};
        if (trans) detail::memory::stmatrix_x4<true>(addr, v);
        else detail::memory::stmatrix_x4<false>(addr, v);
    }

    // Each warp's units of a step, all loaded before any is computed and all computed before any is stored, so that
    // the loads' latencies overlap (units wq, wq + SLOT_WARPS, ..; tiles 2 unit, 2 unit + 1).
    static constexpr int WARP_UNITS = UNITS / SLOT_WARPS, WARP_TILES = 2 * WARP_UNITS;
    __device__ static inline int tile_of(int wq, int i) { return 2 * (wq + i / 2 * SLOT_WARPS) + i % 2; }

    // A forward radix-16 step at level LS (> 16): DFT down each column, twiddles e^(-2 pi i j t / LS).
    // TOP_HALF: the top level with R = 1, whose digits 8..15 are zero padding.
    template <int LS, bool TOP_HALF> __device__ static inline void forward_step(slot_memory &m, const dft16 &f,
                                                                              const float2 *tw, int wq, int lane) {
        constexpr int PERIOD = LS / 128; // tiles per LS-block: the twiddles' period
        uint32_t b[WARP_TILES][4];
        float2 yr[WARP_TILES][2], yi[WARP_TILES][2];
        if constexpr (TOP_HALF) {
#pragma unroll
            for (int u = 0; u < WARP_UNITS; u++) { // b[2u] = (tile 2u re, im; tile 2u+1 re, im) digits 0..7
                detail::memory::ldmatrix_x4<true>(b[2 * u], half_address<LS>(m, wq + u * SLOT_WARPS, lane));
            }
            // [Yr; Yi] = [[Fr, -Fi], [Fi, Fr]] restricted to the input digits 0..7 (k-columns 0..7 of each block).
            const uint32_t a_re[4] = {f.re[0], f.re[1], f.neg_im[0], f.neg_im[1]};
            const uint32_t a_im[4] = {f.im[0], f.im[1], f.re[0], f.re[1]};
#pragma unroll
            for (int i = 0; i < WARP_TILES; i++) {
                const uint32_t *x = b[i / 2 * 2] + 2 * (i % 2);
                yr[i][0] = yr[i][1] = yi[i][0] = yi[i][1] = make_float2(0.f, 0.f);
                mma(yr[i], a_re, x[0], x[1]);
                mma(yi[i], a_im, x[0], x[1]);
            }
        } else {
#pragma unroll
            for (int i = 0; i < WARP_TILES; i++) detail::memory::ldmatrix_x4<true>(b[i], tile_address<LS>(m, tile_of(wq, i), lane));
#pragma unroll
            for (int i = 0; i < WARP_TILES; i++) dft_tile<false>(yr[i], yi[i], f, b[i]);
        }
#pragma unroll
        for (int i = 0; i < WARP_TILES; i++) twiddle(yr[i], yi[i], tw, tile_of(wq, i) % PERIOD, lane);
#pragma unroll
        for (int i = 0; i < WARP_TILES; i++) store_tile(tile_address<LS>(m, tile_of(wq, i), lane), yr[i], yi[i], false);
    }

    // The level-16 steps: forward DFT of each 16-element column, the spectrum, the inverse DFT, all in registers
    // (movmatrix turns the product's output fragments into the next product's B fragments), then the twiddles of the
    // inverse step at level 256 (its inputs).
    __device__ static inline void middle_step(slot_memory &m, const dft16 &f, const float2 *tw_inv256, int wq, int lane) {
        uint32_t b[WARP_TILES][4];
        float2 yr[WARP_TILES][2], yi[WARP_TILES][2];
#pragma unroll
        for (int i = 0; i < WARP_TILES; i++) detail::memory::ldmatrix_x4<false>(b[i], tile_address<16>(m, tile_of(wq, i), lane));
#pragma unroll
        for (int i = 0; i < WARP_TILES; i++) dft_tile<false>(yr[i], yi[i], f, b[i]);
#pragma unroll
        for (int i = 0; i < WARP_TILES; i++) {
            twiddle(yr[i], yi[i], m.spectrum, tile_of(wq, i), lane); // the spectrum, stored like a twiddle table
            b[i][0] = detail::reg::movmatrix_trans(pack(yr[i][0]));
            b[i][1] = detail::reg::movmatrix_trans(pack(yr[i][1]));
            b[i][2] = detail::reg::movmatrix_trans(pack(yi[i][0]));
            b[i][3] = detail::reg::movmatrix_trans(pack(yi[i][1]));
        }
#pragma unroll
        for (int i = 0; i < WARP_TILES; i++) dft_tile<true>(yr[i], yi[i], f, b[i]);
#pragma unroll
        for (int i = 0; i < WARP_TILES; i++) twiddle(yr[i], yi[i], tw_inv256, tile_of(wq, i) % 2, lane);
#pragma unroll
        for (int i = 0; i < WARP_TILES; i++) store_tile(tile_address<16>(m, tile_of(wq, i), lane), yr[i], yi[i], true);
    }

    // An inverse radix-16 step at level LS (> 16): conjugate DFT down each column (its inputs already twiddled), then
    // the next level's input twiddles (TW_NEXT) or, at the top with R = 1 (TOP_HALF), only the kept digits 0..7.
    template <int LS, bool TOP_HALF, bool TW_NEXT> __device__ static inline void inverse_step(slot_memory &m, const dft16 &f,
                                                                                           const float2 *tw_next, int wq,
                                                                                           int lane) {
        constexpr int NEXT_PERIOD = LS / 8; // tiles per 16 LS-block
        uint32_t b[WARP_TILES][4];
        float2 yr[WARP_TILES][2], yi[WARP_TILES][2];
#pragma unroll
        for (int i = 0; i < WARP_TILES; i++) detail::memory::ldmatrix_x4<true>(b[i], tile_address<LS>(m, tile_of(wq, i), lane));
        if constexpr (TOP_HALF) {
            // Rows 0..7: Yr of digits 0..7 = Fr Xr + Fi Xi; rows 8..15: Yi = -Fi Xr + Fr Xi.
            const uint32_t a_r[4] = {f.re[0], f.neg_im[0], f.re[2], f.neg_im[2]};
            const uint32_t a_i[4] = {f.im[0], f.re[0], f.im[2], f.re[2]};
#pragma unroll
            for (int i = 0; i < WARP_TILES; i++) {
                yr[i][0] = yr[i][1] = make_float2(0.f, 0.f);
                mma(yr[i], a_r, b[i][0], b[i][1]);
                mma(yr[i], a_i, b[i][2], b[i][3]);
            }
#pragma unroll
            for (int u = 0; u < WARP_UNITS; u++) {
                const uint32_t v[4] = {pack(yr[2 * u][0]), pack(yr[2 * u][1]), pack(yr[2 * u + 1][0]), pack(yr[2 * u + 1][1])};
                detail::memory::stmatrix_x4<false>(half_address<LS>(m, wq + u * SLOT_WARPS, lane), v);
            }
        } else {
#pragma unroll
            for (int i = 0; i < WARP_TILES; i++) dft_tile<true>(yr[i], yi[i], f, b[i]);
            if constexpr (TW_NEXT) {
#pragma unroll
                for (int i = 0; i < WARP_TILES; i++) twiddle(yr[i], yi[i], tw_next, tile_of(wq, i) % NEXT_PERIOD, lane);
            }
#pragma unroll
            for (int i = 0; i < WARP_TILES; i++) store_tile(tile_address<LS>(m, tile_of(wq, i), lane), yr[i], yi[i], false);
        }
    }

    // ---------------------------------------------------------------------------------------------------------------
    // Block setup: the twiddle tables (shared by the slots).
    __device__ static inline void build_twiddles(shared_block &s) {
        for (int idx = threadIdx.x; idx < TW_LEN; idx += THREADS) {
            const int lv = idx < 512 ? 0 : 1, base = lv == 0 ? 0 : 512, len = tw_level_len(lv);
            const bool inv = idx - base >= len;
            const int local = idx - base - (inv ? len : 0);
            const int tile = local / 128, lane = local / 2 % 32, v = local / 64 % 2 * 2 + local % 2; // fragment_slot
            const int hi = lane / 4 + 8 * (v / 2), col = 2 * (lane % 4) + v % 2; // output digit, column in the tile
            const int ls = len, st = ls / 16;                                   // the level the twiddle belongs to
            int e;
            if (!inv) e = hi * (8 * tile + col); // forward step at level ls: digit j = hi, position 8 tile + col
            else if (st / 16 == 1) e = (8 * tile + col) * hi; // inverse step at level 16: column o < 16, digit hi
            else {                                            // inverse step at level ls / 16, digit stride st / 16
                const int s_below = st / 16, per = s_below / 8;
                e = (tile / per) * (hi * s_below + tile % per * 8 + col);
            }
            s.tw[idx] = inv ? root_of_unity<1>(e, ls) : root_of_unity<-1>(e, ls);
        }
        if constexpr (R > 1) {
            for (int i = threadIdx.x; i < OUTER_TW; i += THREADS)
                s.outer_tw[i] = i < 64 ? root_of_unity<-1>(i, L) : root_of_unity<-1>(64 * (i - 64), L);
        }
    }
    __device__ static inline float2 outer_twiddle(const shared_block &s, int e) {
        e &= L - 1;
        return cmul(s.outer_tw[64 + e / 64], s.outer_tw[e % 64]);
    }

    // Frequency at plane position p (p = j_0 M + j_1 M / 16 + .. + j_A): j_0 + R (j_1 + 16 j_2 + ..), the digits reversed.
    __device__ static inline int frequency_at(int p) {
        int f = p / M, scale = R;
        p %= M;
        for (int stride = M / 16; stride >= 1; stride /= 16) {
            f += (p / stride) * scale;
            p %= stride;
            scale *= 16;
        }
        return f;
    }
    // The head's spectrum in the middle step's fragment order (each slot written in order, the rfft half gathered:
    // it is read from L2 by every slot working on the head), with K[L - j] = conj K[j] for the other half.
    __device__ static inline void load_spectrum(slot_memory &m, const float2 *k_f, int tid) {
        for (int idx = tid; idx < L; idx += SLOT_THREADS) {
            const int tile = idx / 128, lane = idx / 2 % 32, v = idx / 64 % 2 * 2 + idx % 2; // fragment_slot inverted
            const int o = 8 * tile + 2 * (lane % 4) + v % 2, j = lane / 4 + 8 * (v / 2);
            const int f = frequency_at(16 * o + j);
            const float2 c = k_f[f <= L / 2 ? f : L - f];
            m.spectrum[idx] = f <= L / 2 ? c : make_float2(c.x, -c.y);
        }
    }

    // ---------------------------------------------------------------------------------------------------------------
    // Input and output.
    struct pair_rows {
        size_t row0, row1; // element offsets of rows b and b + 1 (row1 = row0 where b + 1 does not exist)
        bool second;
    };
    __device__ static inline pair_rows rows_of(const globals &g, int item) {
        const int pairs = (g.batch + 1) / 2, h = item / pairs, b0 = 2 * (item % pairs);
        pair_rows r;
        r.second = b0 + 1 < g.batch;
        r.row0 = (size_t(b0) * g.heads + h) * g.len;
        r.row1 = r.second ? r.row0 + size_t(g.heads) * g.len : r.row0;
        return r;
    }

    // Copy the pair's rows (and pregates) into the raw buffers (g.staged): 16-byte pieces, a missing second row
    // zero-filled. Waited for by the next input load.
    __device__ static inline void prefetch(slot_memory &m, const globals &g, int item, int tid) {
        const pair_rows rows = rows_of(g, item);
        const int pieces = g.len / 8;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const size_t row = r ? rows.row1 : rows.row0;
            const uint32_t bytes = (r == 0 || rows.second) ? 16 : 0;
            for (int at = 8 * tid; at < 8 * pieces; at += 8 * SLOT_THREADS) {
                detail::memory::cp_async_16(static_cast<uint32_t>(__cvta_generic_to_shared(&m.raw[0][r][at])), g.u + row + at, bytes);
                if (g.pregate)
                    detail::memory::cp_async_16(static_cast<uint32_t>(__cvta_generic_to_shared(&m.raw[1][r][at])),
                                                g.pregate + row + at, bytes);
            }
        }
        detail::memory::cp_async_commit();
    }

    // Samples n, n + 1 (n even) of row r of the pair from global memory, times their pregates, zero past the sequence
    // or the batch.
    __device__ static inline float2 input_pair(const globals &g, const pair_rows &rows, int r, int n) {
        if (n >= g.len || (r == 1 && !rows.second)) return make_float2(0.f, 0.f);
        const size_t row = r ? rows.row1 : rows.row0;
        if (g.paired) {
            float2 x = base_types::convertor<float2, T2>::convert(*reinterpret_cast<const T2 *>(g.u + row + n));
            if (g.pregate) {
                const float2 p = base_types::convertor<float2, T2>::convert(*reinterpret_cast<const T2 *>(g.pregate + row + n));
                x = make_float2(x.x * p.x, x.y * p.y);
            }
            return x;
        }
        const auto one = [&](int i) {
            if (i >= g.len) return 0.f;
            const float x = to_float(g.u[row + i]);
            return g.pregate ? x * to_float(g.pregate[row + i]) : x;
        };
        return make_float2(one(n), one(n + 1));
    }

    // The outer radix-R steps move V consecutive positions (one 16-byte chunk of each plane, half of one at R = 8,
    // where a thread holds R / 2 inputs or outputs of every position) per thread at a time.
    static constexpr int V = R == 8 ? 4 : 8;
    template <int N> struct alignas(4 * N) words { uint32_t w[N]; }; // one vector access
    __device__ static inline words<V / 2> load_words(uint32_t addr) {
        words<V / 2> r;
        if constexpr (V == 8)
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(r.w[0]), "=r"(r.w[1]), "=r"(r.w[2]), "=r"(r.w[3]) : "r"(addr) : "memory");
        else asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(r.w[0]), "=r"(r.w[1]) : "r"(addr) : "memory");
        return r;
    }
    __device__ static inline void unpack_words(const words<V / 2> &w, float (&v)[V]) {
#pragma unroll
        for (int e = 0; e < V / 2; e++) {
            const float2 p = unpack(w.w[e]);
            v[2 * e] = p.x;
            v[2 * e + 1] = p.y;
        }
    }

    // Samples n0 .. n0 + V - 1 (n0 a multiple of V) of row r of the pair, times their pregates, zero past the sequence
    // or the batch: vector shared loads when staged.
    __device__ static inline void input_v(const slot_memory &m, const globals &g, const pair_rows &rows, int r, int n0,
                                          float (&x)[V]) {
        if (n0 >= g.len || (r == 1 && !rows.second)) {
#pragma unroll
            for (int e = 0; e < V; e++) x[e] = 0.f;
            return;
        }
        if (g.staged) { // g.len is a multiple of 8: all V exist
            unpack_words(load_words(static_cast<uint32_t>(__cvta_generic_to_shared(&m.raw[0][r][n0]))), x);
            if (g.pregate) {
                float p[V];
                unpack_words(load_words(static_cast<uint32_t>(__cvta_generic_to_shared(&m.raw[1][r][n0]))), p);
#pragma unroll
                for (int e = 0; e < V; e++) x[e] *= p[e];
            }
            return;
        }
#pragma unroll
        for (int e = 0; e < V / 2; e++) {
            const float2 p = input_pair(g, rows, r, n0 + 2 * e);
            x[2 * e] = p.x;
            x[2 * e + 1] = p.y;
        }
    }
    __device__ static inline uint32_t plane_at(const T *plane, int p0) { // positions p0 .. p0 + V - 1, p0 % V == 0
        return static_cast<uint32_t>(__cvta_generic_to_shared(plane)) + plane_offset(p0);
    }
    __device__ static inline void store_v(uint32_t addr, const float (&v)[V]) {
        if constexpr (V == 8)
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(pack(make_float2(v[0], v[1]))),
                         "r"(pack(make_float2(v[2], v[3]))), "r"(pack(make_float2(v[4], v[5]))), "r"(pack(make_float2(v[6], v[7])))
                         : "memory");
        else
            asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(addr), "r"(pack(make_float2(v[0], v[1]))),
                         "r"(pack(make_float2(v[2], v[3]))) : "memory");
    }
    __device__ static inline void load_v(uint32_t addr, float (&v)[V]) { unpack_words(load_words(addr), v); }
    // e^(-2 pi i (t0 + e) / L), e < V, for t0 a multiple of V.
    __device__ static inline void outer_twiddles(const shared_block &s, int t0, float2 (&w)[V]) {
        const float2 base = outer_twiddle(s, t0);
#pragma unroll
        for (int e = 0; e < V; e++) w[e] = cmul(base, s.outer_tw[e]);
    }

    // The pair into the planes, through the outer radix-R step when R > 1: for each position t < M, outputs
    // j < R of (1 / sqrt R) sum_{k < R/2} x[k M + t] e^(-2 pi i j k / R), times e^(-2 pi i j t / L). V positions per
    // thread at a time.
    __device__ static inline void load_input(const shared_block &s, slot_memory &m, const globals &g,
                                             const pair_rows &rows, int tid) {
        if constexpr (R == 1) {
            for (int n0 = V * tid; n0 < L / 2; n0 += V * SLOT_THREADS) {
                float a[V], b[V];
                input_v(m, g, rows, 0, n0, a);
                input_v(m, g, rows, 1, n0, b);
                store_v(plane_at(m.re, n0), a);
                store_v(plane_at(m.im, n0), b);
            }
        } else {
            const float scale = rsqrtf(float(R));
            for (int t0 = V * tid; t0 < M; t0 += V * SLOT_THREADS) {
                float xr[R / 2][V], xi[R / 2][V];
#pragma unroll
                for (int k = 0; k < R / 2; k++) {
                    input_v(m, g, rows, 0, k * M + t0, xr[k]);
                    input_v(m, g, rows, 1, k * M + t0, xi[k]);
                }
                float zr[R][V], zi[R][V];
                float2 w1[V];
                outer_twiddles(s, t0, w1);
#pragma unroll
                for (int e = 0; e < V; e++) {
                    // Y_2j = DFT_{R/2}(x)_j, Y_2j+1 = DFT_{R/2}(x_k e^(-2 pi i k / R))_j: only x_k, k < R / 2, exist.
                    float2 even[R / 2], odd[R / 2];
#pragma unroll
                    for (int k = 0; k < R / 2; k++) {
                        even[k] = make_float2(scale * xr[k][e], scale * xi[k][e]);
                        odd[k] = k ? cmul(even[k], small_root<-1>(k)) : even[k];
                    }
                    small_dft<R / 2, -1>(even);
                    small_dft<R / 2, -1>(odd);
                    float2 w = w1[e]; // e^(-2 pi i j t / L) for j = 1, 2, ..: successive powers
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
    // e^(sign 2 pi i m / R), m any integer (R <= 8: constants).
    template <int SIGN> __device__ static inline float2 small_root(int m) {
        constexpr float H = 0.70710678118654752f;
        constexpr float C8[8] = {1.f, H, 0.f, -H, -1.f, -H, 0.f, H};
        constexpr float S8[8] = {0.f, H, 1.f, H, 0.f, -H, -1.f, -H};
        const int i = (m * (8 / R)) & 7;
        return make_float2(C8[i], float(SIGN) * S8[i]);
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

    // Outputs n0 .. n0 + V - 1 (n0 a multiple of V) of a row, those before the sequence's end: one vector store (and
    // postgate load) when g.vectors.
    __device__ static inline void output_v(const globals &g, size_t row, int n0, const float (&v)[V]) {
        if (n0 >= g.len) return;
        if (g.vectors) { // g.len is a multiple of 8: all V exist
            using vec = words<V / 2>;
            float y[V];
#pragma unroll
            for (int e = 0; e < V; e++) y[e] = v[e];
            if (g.postgate) {
                float p[V];
                unpack_words(*reinterpret_cast<const vec *>(g.postgate + row + n0), p);
#pragma unroll
                for (int e = 0; e < V; e++) y[e] *= p[e];
            }
            vec out;
#pragma unroll
            for (int e = 0; e < V / 2; e++) out.w[e] = pack(make_float2(y[2 * e], y[2 * e + 1]));
            *reinterpret_cast<vec *>(g.y + row + n0) = out;
            return;
        }
#pragma unroll
        for (int e = 0; e < V / 2; e++) put_pair(g, row, n0 + 2 * e, make_float2(v[2 * e], v[2 * e + 1]));
    }

    // The planes out to y, through the inverse outer step when R > 1: sample k M + t (k < R / 2) is
    // (1 / sqrt R) sum_j Z[j M + t] e^(2 pi i j t / L) e^(2 pi i j k / R). Real parts to row b, imaginary to b + 1.
    __device__ static inline void store_output(const shared_block &s, const slot_memory &m, const globals &g,
                                               const pair_rows &rows, int tid) {
        const int kept = g.len < L / 2 ? g.len : L / 2;
        if constexpr (R == 1) {
            for (int n0 = V * tid; n0 < kept; n0 += V * SLOT_THREADS) {
                float a[V], b[V];
                load_v(plane_at(m.re, n0), a);
                load_v(plane_at(m.im, n0), b);
                output_v(g, rows.row0, n0, a);
                if (rows.second) output_v(g, rows.row1, n0, b);
            }
        } else {
            const float scale = rsqrtf(float(R));
            for (int t0 = V * tid; t0 < M && t0 < kept; t0 += V * SLOT_THREADS) {
                float zr[R][V], zi[R][V];
#pragma unroll
                for (int j = 0; j < R; j++) {
                    load_v(plane_at(m.re, j * M + t0), zr[j]);
                    load_v(plane_at(m.im, j * M + t0), zi[j]);
                }
                float yr[R / 2][V], yi[R / 2][V];
                float2 w1[V];
                outer_twiddles(s, t0, w1);
#pragma unroll
                for (int e = 0; e < V; e++) {
                    // y_k = E_k + e^(2 pi i k / R) O_k (k < R / 2) with E, O the inverse DFTs of the even and odd
                    // inputs, each times e^(2 pi i j t / L) first.
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
                        const float2 y = cadd(even[k], k ? cmul(odd[k], small_root<1>(k)) : odd[k]);
                        yr[k][e] = y.x;
                        yi[k][e] = y.y;
                    }
                }
#pragma unroll
                for (int k = 0; k < R / 2; k++) {
                    output_v(g, rows.row0, k * M + t0, yr[k]);
                    if (rows.second) output_v(g, rows.row1, k * M + t0, yi[k]);
                }
            }
        }
    }

    // ---------------------------------------------------------------------------------------------------------------
    // Forward levels M .. 256 (recursively: level LS, then LS / 16).
    template <int LS> __device__ static inline void forward_levels(slot_memory &m, const shared_block &s, const dft16 &f,
                                                                 int q, int wq, int lane) {
        if constexpr (LS >= 256) {
            constexpr int lv = LS == 256 ? 0 : 1;
            static_assert(LS == 256 || LS == 4096, "fftconv: twiddle tables exist for levels 256 and 4096");
            forward_step<LS, R == 1 && LS == M>(m, f, s.tw + tw_offset(lv, false), wq, lane);
            slot_sync(q);
            forward_levels<LS / 16>(m, s, f, q, wq, lane);
        }
    }
    // Inverse levels 256 .. M.
    template <int LS> __device__ static inline void inverse_levels(slot_memory &m, const shared_block &s, const dft16 &f,
                                                                 int q, int wq, int lane) {
        if constexpr (LS <= M) {
            constexpr bool top = LS == M;
            inverse_step<LS, R == 1 && top, !top>(m, f, top ? nullptr : s.tw + tw_offset(1, true), wq, lane);
            slot_sync(q);
            inverse_levels<LS * 16>(m, s, f, q, wq, lane);
        }
    }

    // Each slot takes its share of the items (head-major pairs), loading its head's spectrum when the head changes.
    __device__ static inline void run(const globals &g) {
        extern __shared__ alignment_dummy shm[];
        if (smem_addr(shm) % 128 != 0) __trap(); // plane_offset's swizzle assumes 128-byte aligned planes
        shared_block &s = *reinterpret_cast<shared_block *>(shm);
        const int warp = threadIdx.x / WARP_THREADS, lane = threadIdx.x % WARP_THREADS;
        const int q = warp / SLOT_WARPS, wq = warp % SLOT_WARPS, tid = threadIdx.x % SLOT_THREADS;
        slot_memory &m = s.slot[q];
        const int pairs = (g.batch + 1) / 2;
        const int64_t items = int64_t(pairs) * g.heads, workers = int64_t(gridDim.x) * SLOTS;
        const int64_t worker = int64_t(blockIdx.x) * SLOTS + q;
        const int first = int(items * worker / workers), last = int(items * (worker + 1) / workers);
        if (g.staged && first < last) prefetch(m, g, first, tid);
        build_twiddles(s);
        const dft16 f = make_dft16(lane);
        __syncthreads();
        int head = -1;
        for (int item = first; item < last; item++) {
            const pair_rows rows = rows_of(g, item);
            if (item / pairs != head) {
                head = item / pairs;
                load_spectrum(m, g.k_f + size_t(head) * (L / 2 + 1), tid);
            }
            if (g.staged) detail::memory::cp_async_wait<0>();
            slot_sync(q); // the raw buffers landed (every thread's pieces); the previous pair's output was read
            load_input(s, m, g, rows, tid);
            slot_sync(q);
            if (g.staged && item + 1 < last) prefetch(m, g, item + 1, tid);
            forward_levels<M>(m, s, f, q, wq, lane);
            middle_step(m, f, s.tw + tw_offset(0, true), wq, lane);
            slot_sync(q);
            inverse_levels<256>(m, s, f, q, wq, lane);
            store_output(s, m, g, rows, tid);
        }
    }
};

template <typename K> __global__ __launch_bounds__(K::THREADS, 1) void fftconv_fwd_kernel(const __grid_constant__ typename K::globals g) {
    K::run(g);
}

} // namespace tk_fftconv
