// The FFT engine of the FFT convolution kernels (docs/fftconv.md, "The FFT engine"): an L-point FFT in place on a
// pair of shared-memory planes, L = R * 16^A (R in 1, 2, 4, 8; A >= 2), decimation in frequency, level by level. The
// outer radix-R step runs on the CUDA cores as the input is loaded (fftconv_io_kernel.cuh); then one radix-16 step per
// level of length LS = 16^A .. 16, each a product of the 16-point DFT matrix with 16-digit columns of the planes
// (mma.sync; the matrix lives in registers, the columns arrive by ldmatrix) and a twiddle e^(-2 pi i j t / LS) per
// output. The frequencies end in digit-reversed positions; the inverse runs the levels back (conjugate matrices and
// twiddles) and leaves the samples in natural order. Complex products are real ones on stacked operands,
// [Yr; Yi] = [[Fr, -Fi], [Fi, Fr]] [Xr; Xi], so nothing is recombined after the tensor cores. The DFT matrices carry
// 1 / sqrt(16) (the radix-R steps 1 / sqrt(R)): every step is unitary, so every 16-bit intermediate stays at the scale
// of the data and no 1 / L is needed at the end.
//
// Zero padding: samples n >= L / 2 are zero, so with R = 1 the first radix-16 step reads only digits 0..7 (half the
// k-steps) and the last inverse step computes only digits 0..7 (the kept half).
//
// The work is dealt to "slots": groups of SLOT_WARPS warps, each transforming one pair of planes at a time
// (engine_config, fftconv_configs.cuh).
#pragma once

#include "fftconv_complex.cuh"
#include "fftconv_configs.cuh"
#include "kittens.cuh"

namespace tk_fftconv {
using namespace kittens;

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

template <typename T, int L> struct fftconv_engine {
    static constexpr engine_config CONFIG = engine_config_of(L);
    static constexpr int R = CONFIG.outer_radix, M = L / R; // M = 16^A
    static_assert(M >= 256, "fftconv: at least two radix-16 levels");
    using T2 = base_types::packed_t<T>;

    // Every radix-16 step is L / 16 columns of 16 digits, dealt to the slot's warps in 16-column units (two n = 8
    // tiles of the mma).
    static constexpr int UNITS = L / 256;
    static constexpr int SLOT_WARPS = CONFIG.slot_warps;
    static constexpr int WARPS = CONFIG.warps, THREADS = WARPS * WARP_THREADS, SLOTS = WARPS / SLOT_WARPS;
    static constexpr int SLOT_THREADS = SLOT_WARPS * WARP_THREADS;
    static_assert(UNITS % SLOT_WARPS == 0, "fftconv: every warp of a slot takes the same number of units");

    // Twiddle tables of the radix-16 levels 256 and 4096 (where M reaches them), each in the fragment order of the
    // step that reads it, so that a thread's four values are two 16-byte loads: FWD[lv] multiplies the outputs of the
    // forward step at that level, INV[lv] the outputs of the inverse step one level below (the next one's inputs).
    static constexpr int TW_LEVELS = M >= 4096 ? 2 : 1;
    static constexpr int tw_level_len(int lv) { return lv == 0 ? 256 : 4096; }
    static constexpr int tw_offset(int lv, bool inv) { return (lv == 0 ? 0 : 512) + (inv ? tw_level_len(lv) : 0); }
    static constexpr int TW_LEN = TW_LEVELS == 2 ? 512 + 8192 : 512;
    // The outer radix's twiddles e^(-2 pi i e / L) = HI[e / 64] LO[e % 64].
    static constexpr int OUTER_TW = R > 1 ? L / 64 + 64 : 1;

    struct alignas(128) planes {
        T re[L], im[L]; // one complex sequence, in place through every step (plane_offset order)
    };
    struct tables { // shared by a block's slots, built once
        float2 tw[TW_LEN];
        float2 outer_tw[OUTER_TW];
    };

    __device__ static inline float to_float(T x) { return base_types::convertor<float, T>::convert(x); }
    __device__ static inline uint32_t pack(float2 v) {
        return detail::memory::bitcast<uint32_t>(base_types::convertor<T2, float2>::convert(v));
    }
    __device__ static inline float2 unpack(uint32_t v) {
        return base_types::convertor<float2, T2>::convert(detail::memory::bitcast<T2>(v));
    }
    // The barrier of slot q's warps (named barrier q + 1: 0 stays __syncthreads).
    __device__ static inline void slot_sync(int q) {
        if constexpr (SLOT_WARPS == 1) __syncwarp();
        else group<SLOT_WARPS>::sync(q + 1);
    }

    // Where the calling thread works: its slot q, its warp wq in the slot, its lane and its thread index in the slot,
    // and the slot's share [first, last) of a kernel's `items`, dealt evenly over every slot of the grid.
    struct slot_place {
        int q, wq, lane, tid, first, last;
    };
    __device__ static inline slot_place place_in_grid(int64_t items) {
        const int warp = threadIdx.x / WARP_THREADS;
        slot_place p;
        p.q = warp / SLOT_WARPS;
        p.wq = warp % SLOT_WARPS;
        p.lane = threadIdx.x % WARP_THREADS;
        p.tid = threadIdx.x % SLOT_THREADS;
        const int64_t workers = int64_t(gridDim.x) * SLOTS, worker = int64_t(blockIdx.x) * SLOTS + p.q;
        p.first = int(items * worker / workers);
        p.last = int(items * (worker + 1) / workers);
        return p;
    }
    // A block's shared memory: the twiddle tables, then each slot's own (SLOT_MEMORY: its planes and what the
    // kernel keeps beside them).
    template <typename SLOT_MEMORY> struct block_memory {
        using slot_memory = SLOT_MEMORY;
        tables t;
        SLOT_MEMORY slot[SLOTS];
    };
    // The dynamic shared memory a kernel of block layout B asks for.
    template <typename B> static constexpr int shared_bytes() {
        static_assert(sizeof(B) + 1024 <= MAX_SHARED_MEMORY, "fftconv: a block's shared memory exceeds the SM's");
        return int(sizeof(B));
    }
    // The block's dynamic shared memory as a kernel's layout B.
    template <typename B> __device__ static inline B &shared_block_as() {
        extern __shared__ alignment_dummy shm[];
        if (smem_addr(shm) % 128 != 0) __trap(); // plane_offset's swizzle assumes 128-byte aligned planes
        return *reinterpret_cast<B *>(shm);
    }

    // ---------------------------------------------------------------------------------------------------------------
    // The 16-point DFT / 4 as A fragments (rows j, columns k): real part, imaginary part and its negative.
    struct dft16 {
        uint32_t re[4], im[4], neg_im[4];
    };
    __device__ static inline dft16 make_dft16() {
        dft16 f;
        rt<T, 16, 16> a; // the A operand's layout, whose pairs for_each_pair places (row j, columns k and k + 1)
        for_each_pair(
            [&](pair_pos p, T2 &) {
                float2 c[2];
#pragma unroll
                for (int e = 0; e < 2; e++) c[e] = root_of_unity<-1>(p.row * (p.col + e), 16);
                f.re[p.k] = pack(make_float2(0.25f * c[0].x, 0.25f * c[1].x));
                f.im[p.k] = pack(make_float2(0.25f * c[0].y, 0.25f * c[1].y));
                f.neg_im[p.k] = pack(make_float2(-0.25f * c[0].y, -0.25f * c[1].y));
            },
            a);
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

    // An n = 8 tile's ldmatrix / stmatrix row address for this lane at level LS >= 256 (digits S = LS / 16 apart, the
    // tile's 8 columns contiguous): matrix lane / 8 of the x4, row lane % 8; matrices (re digits 0-7, re 8-15, im 0-7,
    // im 8-15), so transposed loads give the B fragments. (Level 16 is never read from the planes: see forward_block.)
    template <int LS> __device__ static inline uint32_t tile_address(const planes &m, int tile, int lane) {
        constexpr int S = LS / 16;
        static_assert(S >= 16, "fftconv: tiles are read from the planes at levels of 256 and more");
        const int q = lane / 8, row = lane % 8;
        const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(q >= 2 ? m.im : m.re));
        const int o = tile / (S / 8), i0 = tile % (S / 8) * 8;
        return base + plane_offset(o * LS + (8 * (q % 2) + row) * S + i0);
    }
    // Half units (the top level when R = 1): matrices (re digits 0-7, im 0-7) of tile 2u, then of tile 2u + 1.
    template <int LS> __device__ static inline uint32_t half_address(const planes &m, int unit, int lane) {
        constexpr int S = LS / 16;
        const int q = lane / 8, row = lane % 8, tile = 2 * unit + q / 2;
        const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(q % 2 ? m.im : m.re));
        const int o = tile / (S / 8), i0 = tile % (S / 8) * 8;
        return base + plane_offset(o * LS + row * S + i0);
    }

    // Where value v of lane `lane` in a tile's output fragment sits in a table stored in fragment order: each of a
    // warp's two 16-byte loads reads 512 contiguous bytes. Value v is mma_16x8x16's output value v (its row and column:
    // detail::reg::mma_16x8_output_row and _col).
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
    __device__ static inline void store_tile(uint32_t addr, const float2 (&yr)[2], const float2 (&yi)[2]) {
        const uint32_t v[4] = {pack(yr[0]), pack(yr[1]), pack(yi[0]), pack(yi[1])};
        detail::memory::stmatrix_x4<false>(addr, v);
    }

    // Each warp's units of a step, all loaded before any is computed and all computed before any is stored, so that
    // the loads' latencies overlap (units wq, wq + SLOT_WARPS, ..; tiles 2 unit, 2 unit + 1).
    static constexpr int WARP_UNITS = UNITS / SLOT_WARPS, WARP_TILES = 2 * WARP_UNITS;
    __device__ static inline int tile_of(int wq, int i) { return 2 * (wq + i / 2 * SLOT_WARPS) + i % 2; }

    // A forward radix-16 step at level LS (> 16): DFT down each column, twiddles e^(-2 pi i j t / LS).
    // TOP_HALF: the top level with R = 1, whose digits 8..15 are zero padding.
    template <int LS, bool TOP_HALF> __device__ static inline void forward_step(planes &m, const dft16 &f,
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
        for (int i = 0; i < WARP_TILES; i++) store_tile(tile_address<LS>(m, tile_of(wq, i), lane), yr[i], yi[i]);
    }

    // The levels 256 and 16 of one 256-element block (unit u of the warp: elements 256 unit ..), in registers. A
    // level-256 step's output tile holds rows j (output digits) by columns t (positions within 16): exactly the B
    // fragments (k = t, n = j) of the level-16 step, whose columns are the j's 16 contiguous elements, so it feeds the
    // level-16 product as it stands. The level-16 outputs are fragments yr, yi [h]: the block's columns j = 8h ..
    // 8h + 7, i.e. tile tile_of(wq, 2u + h), values in fragment_slot order. TOP_HALF: level 256 is the top with R = 1.
    using tile_fragments = float2[2][2]; // [h][row half]
    template <bool TOP_HALF> __device__ static inline void forward_block(const planes &m, const tables &s, const dft16 &f,
                                                                       int wq, int lane, int u, tile_fragments &yr,
                                                                       tile_fragments &yi) {
        float2 ar[2][2], ai[2][2];
        if constexpr (TOP_HALF) {
            uint32_t b[4];
            detail::memory::ldmatrix_x4<true>(b, half_address<256>(m, wq + u * SLOT_WARPS, lane));
            const uint32_t a_re[4] = {f.re[0], f.re[1], f.neg_im[0], f.neg_im[1]}; // as in forward_step
            const uint32_t a_im[4] = {f.im[0], f.im[1], f.re[0], f.re[1]};
#pragma unroll
            for (int c = 0; c < 2; c++) {
                ar[c][0] = ar[c][1] = ai[c][0] = ai[c][1] = make_float2(0.f, 0.f);
                mma(ar[c], a_re, b[2 * c], b[2 * c + 1]);
                mma(ai[c], a_im, b[2 * c], b[2 * c + 1]);
            }
        } else {
            uint32_t b[2][4];
#pragma unroll
            for (int c = 0; c < 2; c++) detail::memory::ldmatrix_x4<true>(b[c], tile_address<256>(m, tile_of(wq, 2 * u + c), lane));
#pragma unroll
            for (int c = 0; c < 2; c++) dft_tile<false>(ar[c], ai[c], f, b[c]);
        }
#pragma unroll
        for (int c = 0; c < 2; c++) twiddle(ar[c], ai[c], s.tw + tw_offset(0, false), tile_of(wq, 2 * u + c) % 2, lane);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t x[4] = {pack(ar[0][h]), pack(ar[1][h]), pack(ai[0][h]), pack(ai[1][h])};
            dft_tile<false>(yr[h], yi[h], f, x);
        }
    }
    // Back from a block's level-16 fragments: the inverse level-16 DFT (movmatrix turns the forward product's output
    // fragments into B fragments of the same columns), the level-256 input twiddles, and the inverse level-256 step fed
    // by the level-16 output fragments as they stand; then the next level's input twiddles (TW_NEXT) and the store, or
    // at the top with R = 1 (TOP_HALF) only the kept digits 0..7.
    template <bool TOP_HALF, bool TW_NEXT> __device__ static inline void inverse_block(planes &m, const tables &s,
                                                                                     const dft16 &f, int wq, int lane,
                                                                                     int u, tile_fragments &yr,
                                                                                     tile_fragments &yi) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t b[4] = {detail::reg::movmatrix_trans(pack(yr[h][0])), detail::reg::movmatrix_trans(pack(yr[h][1])),
                                   detail::reg::movmatrix_trans(pack(yi[h][0])), detail::reg::movmatrix_trans(pack(yi[h][1]))};
            dft_tile<true>(yr[h], yi[h], f, b);
            twiddle(yr[h], yi[h], s.tw + tw_offset(0, true), tile_of(wq, 2 * u + h) % 2, lane);
        }
        // Level-256 tile 2u + c (positions t = 8c ..): k = j from the level-16 tiles h = 0 (j < 8) and 1.
        uint32_t b[2][4];
#pragma unroll
        for (int c = 0; c < 2; c++) {
            b[c][0] = pack(yr[0][c]);
            b[c][1] = pack(yr[1][c]);
            b[c][2] = pack(yi[0][c]);
            b[c][3] = pack(yi[1][c]);
        }
        if constexpr (TOP_HALF) {
            const uint32_t a_r[4] = {f.re[0], f.neg_im[0], f.re[2], f.neg_im[2]}; // as in inverse_step
            const uint32_t a_i[4] = {f.im[0], f.re[0], f.im[2], f.re[2]};
            float2 o[2][2];
#pragma unroll
            for (int c = 0; c < 2; c++) {
                o[c][0] = o[c][1] = make_float2(0.f, 0.f);
                mma(o[c], a_r, b[c][0], b[c][1]);
                mma(o[c], a_i, b[c][2], b[c][3]);
            }
            const uint32_t v[4] = {pack(o[0][0]), pack(o[0][1]), pack(o[1][0]), pack(o[1][1])};
            detail::memory::stmatrix_x4<false>(half_address<256>(m, wq + u * SLOT_WARPS, lane), v);
        } else {
#pragma unroll
            for (int c = 0; c < 2; c++) {
                float2 orr[2], oi[2];
                dft_tile<true>(orr, oi, f, b[c]);
                if constexpr (TW_NEXT) twiddle(orr, oi, s.tw + tw_offset(1, true), tile_of(wq, 2 * u + c) % 32, lane);
                store_tile(tile_address<256>(m, tile_of(wq, 2 * u + c), lane), orr, oi);
            }
        }
    }

    // An inverse radix-16 step at level LS (> 16): conjugate DFT down each column (its inputs already twiddled), then
    // the next level's input twiddles (TW_NEXT) or, at the top with R = 1 (TOP_HALF), only the kept digits 0..7.
    template <int LS, bool TOP_HALF, bool TW_NEXT> __device__ static inline void inverse_step(planes &m, const dft16 &f,
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
            for (int i = 0; i < WARP_TILES; i++) store_tile(tile_address<LS>(m, tile_of(wq, i), lane), yr[i], yi[i]);
        }
    }

    // ---------------------------------------------------------------------------------------------------------------
    // The twiddle tables, by the whole block.
    __device__ static inline void build_twiddles(tables &s) {
        for (int idx = threadIdx.x; idx < TW_LEN; idx += THREADS) {
            const int lv = idx < 512 ? 0 : 1, base = lv == 0 ? 0 : 512, len = tw_level_len(lv);
            const bool inv = idx - base >= len;
            const int local = idx - base - (inv ? len : 0);
            const int tile = local / 128, lane = local / 2 % 32, v = local / 64 % 2 * 2 + local % 2; // fragment_slot
            const int hi = detail::reg::mma_16x8_output_row(lane, v);       // output digit
            const int col = detail::reg::mma_16x8_output_col(lane) + v % 2; // column in the tile
            const int ls = len, st = ls / 16;                               // the level the twiddle belongs to
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
    __device__ static inline float2 outer_twiddle(const tables &s, int e) {
        e &= L - 1;
        return cmul(s.outer_tw[64 + e / 64], s.outer_tw[e % 64]);
    }

    // The start of a slot kernel of block layout B (a block_memory): the calling thread's place among `items` and its
    // slot's memory, the twiddle tables built by the whole block, the DFT matrix, and prepare(slot memory, place) (the
    // thread's own setup) before the barrier that publishes the tables.
    template <typename B> struct slot_start {
        B &shared;
        typename B::slot_memory &slot;
        slot_place at;
        dft16 f;
    };
    template <typename B, typename PREPARE> __device__ static inline slot_start<B> start(int64_t items, PREPARE &&prepare) {
        B &s = shared_block_as<B>();
        const slot_place at = place_in_grid(items);
        typename B::slot_memory &m = s.slot[at.q];
        build_twiddles(s.t);
        const dft16 f = make_dft16();
        prepare(m, at);
        __syncthreads();
        return {s, m, at, f};
    }
    template <typename B> __device__ static inline slot_start<B> start(int64_t items) {
        return start<B>(items, [](typename B::slot_memory &, const slot_place &) {});
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
    // Forward levels M .. 4096 (recursively: level LS, then LS / 16), each followed by the slot's barrier.
    template <int LS> __device__ static inline void forward_levels(planes &m, const tables &s, const dft16 &f, int q,
                                                                 int wq, int lane) {
        if constexpr (LS > 256) {
            static_assert(LS == 4096, "fftconv: twiddle tables exist for levels 256 and 4096");
            forward_step<LS, R == 1 && LS == M>(m, f, s.tw + tw_offset(1, false), wq, lane);
            slot_sync(q);
            forward_levels<LS / 16>(m, s, f, q, wq, lane);
        }
    }
    // Inverse levels 4096 .. M, each followed by the slot's barrier.
    template <int LS> __device__ static inline void inverse_levels(planes &m, const tables &s, const dft16 &f, int q,
                                                                 int wq, int lane) {
        if constexpr (LS <= M) {
            inverse_step<LS, R == 1 && LS == M, LS < M>(m, f, nullptr, wq, lane); // no level above 4096 is built
            slot_sync(q);
            inverse_levels<LS * 16>(m, s, f, q, wq, lane);
        }
    }

    // The whole transform of the planes (loaded, with the outer step): the forward levels above 256, then block by
    // block (the warp's units) the levels 256 and 16 forward, at_spectrum(u, yr, yi) on the block's level-16 fragments,
    // and back; then the inverse levels above 256 (the samples are in the planes after the last barrier).
    // at_spectrum may change the fragments (times the filter's spectrum) and returns whether to transform back.
    template <bool BACK = true, typename AT_SPECTRUM>
    __device__ static inline void transform(planes &m, const tables &s, const dft16 &f, int q, int wq, int lane,
                                            AT_SPECTRUM &&at_spectrum) {
        forward_levels<M>(m, s, f, q, wq, lane);
#pragma unroll
        for (int u = 0; u < WARP_UNITS; u++) {
            tile_fragments yr, yi;
            forward_block<R == 1 && M == 256>(m, s, f, wq, lane, u, yr, yi);
            at_spectrum(u, yr, yi);
            if constexpr (BACK) inverse_block<R == 1 && M == 256, (M > 256)>(m, s, f, wq, lane, u, yr, yi);
        }
        if constexpr (BACK) {
            slot_sync(q);
            inverse_levels<4096>(m, s, f, q, wq, lane);
        }
    }
    // Only back, from level-16 fragments that fetch(u, yr, yi) provides per block. The forward's blocks and these
    // write only the calling warp's own elements at levels 256 and 16; other warps may still read the planes (the
    // caller's barrier before).
    template <typename FETCH> __device__ static inline void inverse_from(planes &m, const tables &s, const dft16 &f, int q,
                                                                       int wq, int lane, FETCH &&fetch) {
#pragma unroll
        for (int u = 0; u < WARP_UNITS; u++) {
            tile_fragments yr, yi;
            fetch(u, yr, yi);
            inverse_block<R == 1 && M == 256, (M > 256)>(m, s, f, wq, lane, u, yr, yi);
        }
        slot_sync(q);
        inverse_levels<4096>(m, s, f, q, wq, lane);
    }
};

} // namespace tk_fftconv
