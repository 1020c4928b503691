// Based linear-attention backward on the LCSF template (docs/based.md, "The backward", has the math).
//
// With dN_i = dO_i / (den_i + eps) and dD_i = -(dO_i . o_i) / (den_i + eps) (dN = dO, dD = 0 unnormalized), the
// gradient of w_ij = 1 + s + s^2 / 2 is dW_ij = dN_i . v_j + dD_i and that of s_ij is dS_ij = dW_ij (1 + s_ij).
// A small preparation kernel turns den, o and dO into two per-row numbers, rinv_i = 1 / (den_i + eps) and dD_i (both
// zero on rows past the end), so no kernel below reads o.
//
// Two passes built like the forward kernel (based_fwd_kernel.cuh): one LCSF task per (batch, head, value split)
// walking the sequence in chunks of 128 tokens, two consumer warpgroups each owning 64 rows of the chunk, the fp32
// state split across them by feature rows, feature tiles built in shared memory with packed multiplies, every state
// product an ss-wgmma against 16-bit images of the state:
//  * based_bwd_dq walks forward with the forward's state S = sum_j phi(k_j) v_j^T and z = sum_j phi(k_j) (kernel
//    features, based_features.cuh; kv0 included) and gives dq_i = scale sum_{j <= i} dS_ij k_j + J(q_i)^T G_i,
//    G_i = omega (S dN_i + z dD_i), J the Jacobian of the features;
//  * based_bwd_dkv walks backward with R = dL/dS and RD = dL/dz of the later chunks (seeded with the final state's
//    gradient): dv_j = R^T phi(k_j) + sum_{i >= j} w_ij dN_i, dk_j = J(k_j)^T (R v_j + RD) + scale sum_i dS_ij q_i;
//    after the first chunk R and RD give the initial state's gradient.
// J^T y for a 160-vector y of kernel features is a symmetric 16 x 16 matrix times x plus the linear block: with the
// quadratic features expanded to all 256 pairs (a, c) in row-major order, (J^T y)_c = sum_a x_a Y_ac + y_lin c. The
// passes therefore keep a second image of their state, expanded (256 + 16 rows), whose products with dN (or v) come
// out with column c of slice a in the lane that holds column c of dq (or dk): the contraction is one FMA per element
// with the row's own x_a. The feature weights live in these images (scale^2 and scale for the forward state; R holds
// dL/dS, so its expanded diagonal is doubled), the row-independent feature sums in a 16 x 16 matrix.
//
// Value splits: the fp32 state takes 2.5 VT registers per thread, so VT (the value columns of one task) is at most
// 64; a wider v (Dv > 64) is cut into two tasks of 64 columns, the second zero-filled by TMA past Dv. dq and dk sum
// over all value columns, so then (SPLIT) each task adds its share into an fp32 accumulator by TMA reduce-adds and
// a conversion kernel writes them out; the dD terms, which do not depend on value columns, are counted by split 0.
//
// Ragged length: TMA zero-fills q, k, v, dO past the end and the preparation leaves rinv = dD = 0 there, so padded
// queries carry no gradient and add nothing to R; a padded key is later than every real query (causal mask) and its
// features never reach a product that dq reads (the constant feature is not differentiated).
#pragma once

#include "based.h"
#include "based_features.cuh"
#include "kittens.cuh"

namespace tk_based {
using namespace kittens;

inline constexpr int BWD_CHUNK = 128; // tokens per chunk: two consumers of 64 rows

// What both passes share: shapes, tiles, globals, loads, feature tiles, the expanded images and the contraction.
template <typename T, int VT, bool SPLIT> struct based_bwd_base : feature_tiles<T> {
    static_assert(VT == 16 || VT == 32 || VT == 48 || VT == 64, "Based backward: a task holds 16 to 64 value columns");
    static_assert(!SPLIT || VT == 64, "Based backward: only value dimensions over 64 are split, into tasks of 64");
    static constexpr int DK = FEATURE_DIM;
    static constexpr int HALF = 64;
    static constexpr int CHUNK = BWD_CHUNK;
    static constexpr int NUM_CONSUMERS = 2;
    static constexpr int INPUT_STAGES = 2;
    // 384 threads: ptxas fits each in 168 registers, so the fp32 state is split across the consumers.
    static constexpr int PRODUCER_REGISTERS = 24, CONSUMER_REGISTERS = 240;
    static constexpr int FEATURES = KERNEL_FEATURES;
    static constexpr int PIECE = 32;                     // expanded rows per product: two slices a
    static constexpr int PIECES = DK * DK / PIECE;       // 8
    static constexpr float SQRT2 = 1.41421356237309515f;

    using features = feature_tiles<T>;
    using typename features::T2;
    using features::to_pair;
    using features::from_pair;
    using features::store_word;
    using features::load_row;
    using qk_tile = st<T, HALF, DK>;
    using v_tile = st<T, HALF, VT>;
    using row_vec = sv<float, HALF>;
    using acc_tile = st<float, HALF, DK>;       // a half chunk's share of dq or dk (SPLIT)
    using pair_tile = st<T, HALF, CHUNK>;        // Phi(X)^T: 64 state rows x the chunk's tokens (K-major A)
    using row_features_tile = st<T, HALF, FEATURES>; // Phi(X): 64 tokens x features (K-major A)
    using piece_tile = st<T, PIECE, VT>;         // expanded image rows 32 p .. 32 p + 31
    using lin_tile = st<T, DK, VT>;              // expanded image: the linear block
    using matrix_tile = st<T, DK, DK>;           // the feature sums as a symmetric matrix
    using qk_gl = gl<T, -1, -1, -1, DK, qk_tile>;
    using v_gl = gl<T, -1, -1, -1, -1, v_tile>;  // columns: the whole Dv (a split's tile may reach past it)
    using row_gl = gl<float, 1, -1, -1, -1, row_vec>; // (1, batch, heads, chunks * CHUNK)
    using acc_gl = gl<float, -1, -1, -1, DK, acc_tile>; // (batch, heads, chunks * CHUNK, DK), dense
    using grad_gl = std::conditional_t<SPLIT, acc_gl, qk_gl>;
    using grad_tile = std::conditional_t<SPLIT, acc_tile, qk_tile>;

    struct globals {
        qk_gl q, k;
        v_gl v, dout;
        row_gl rinv, dd;
        grad_gl grad;   // dq (first pass) or dk (second pass): the output, or the fp32 accumulator (SPLIT)
        v_gl dv;        // second pass only
        const float *state0, *sum0; // first pass: kv0, k_sum0; second pass: d kv_final, d k_sum_final (or null)
        float *d_kv0, *d_k_sum0;     // second pass only, or null
        int heads, splits, len, chunks, value_dim, num_tasks;
        float scale;
    };
    struct input_block {
        qk_tile q[2], k[2];
        v_tile v[2], dout[2]; // dout becomes dN = rinv dO in place, each consumer its half
        row_vec rinv[2], dd[2];
    };
    struct task {
        int b, h, split, iters;
    };

    static constexpr int CONSUMERS_BARRIER = 4; // ids 1 .. 3 are the warpgroups' own
    __device__ static inline void consumers_sync() {
        named_barrier_sync<NUM_CONSUMERS * WARPGROUP_THREADS>(CONSUMERS_BARRIER);
    }

    __device__ static inline bool get_task(const globals &g, int id, task &t) {
        if (id >= g.num_tasks) return false;
        const int bh = id / g.splits;
        t.split = id - bh * g.splits;
        t.b = bh / g.heads;
        t.h = bh - t.b * g.heads;
        t.iters = g.chunks;
        return true;
    }

    __device__ static inline void load_chunk(const globals &g, input_block &in, semaphore &arrived, const task &t,
                                             int chunk) {
        tma::expect<qk_tile, qk_tile, qk_tile, qk_tile, v_tile, v_tile, v_tile, v_tile, row_vec, row_vec, row_vec,
                    row_vec>(arrived);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int rows = 2 * chunk + h; // in units of HALF
            tma::load_async(in.q[h], g.q, {t.b, t.h, rows, 0}, arrived);
            tma::load_async(in.k[h], g.k, {t.b, t.h, rows, 0}, arrived);
            tma::load_async(in.v[h], g.v, {t.b, t.h, rows, t.split}, arrived);
            tma::load_async(in.dout[h], g.dout, {t.b, t.h, rows, t.split}, arrived);
            tma::load_async(in.rinv[h], g.rinv, {0, t.b, t.h, rows}, arrived);
            tma::load_async(in.dd[h], g.dd, {0, t.b, t.h, rows}, arrived);
        }
    }

    // State rows (kernel features) per consumer in blocks of 64: the consumer BIG holds rows 0..127, the other rows
    // 128..191 (of which 160.. are padding). BIG is the consumer with the smaller intra-chunk share.
    template <int BIG> __device__ static inline int blocks_of(int me) { return me == BIG ? 2 : 1; }
    template <int BIG> __device__ static inline int block_row0(int me, int m) { return me == BIG ? HALF * m : 2 * HALF; }

    // Consumer me's fp32 state rows and feature sums before the first chunk, read by row_of from the exchanged layout
    // at state0 and sum0 (zeros without them; the sums also zero where !with_sums).
    template <int BIG, typename RT, int BLOCKS, typename RowOf>
    __device__ static inline void load_state(RT (&s)[BLOCKS], float *sums, const globals &g, const task &t, int me,
                                             bool with_sums, RowOf &&row_of) {
        const size_t head = size_t(t.b) * g.heads + t.h;
        const int col0 = t.split * VT;
#pragma unroll
        for (int m = 0; m < BLOCKS; m++)
            load_state_rows(s[m], g.state0, head, g.value_dim, col0, block_row0<BIG>(me, m) + warpgroup::warp_row0(), row_of);
        const int r0 = block_row0<BIG>(me, 0);
        for (int i = warpgroup::laneid(); i < blocks_of<BIG>(me) * HALF; i += WARPGROUP_THREADS)
            sums[r0 + i] = g.sum0 && with_sums ? row_of(feature_at(r0 + i), g.sum0 + head * STATE_FEATURES) : 0.f;
    }

    // dN = rinv dO in place for this consumer's half: two threads per row, 16 bytes at a time.
    __device__ static inline void scale_dout(input_block &in, int me) {
        const int t = warpgroup::laneid(), r = t / 2;
        const float ri = in.rinv[me].data[r];
        v_tile &d = in.dout[me];
#pragma unroll
        for (int u = 0; u < VT / 16; u++) {
            const uint32_t addr = d.idx(r, (t % 2) * (VT / 2) + 8 * u);
            uint32_t w[4];
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "r"(addr));
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float2 x = from_pair(w[i]);
                w[i] = detail::memory::bitcast<uint32_t>(to_pair(ri * x.x, ri * x.y));
            }
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
        }
    }

    // Phi(X)^T for the state rows of consumer `me` (BIG: rows 0..127, the other: 128..159), 256 threads x 64 pairs.
    template <int BIG, typename TileOf>
    __device__ static inline void build_state_features(TileOf &&tile_of, const qk_tile (&x16)[2], int me) {
        const int t = warpgroup::laneid();
        const int p = t % (CHUNK / 2), part = t / (CHUNK / 2);
        const auto one = [] { return base_types::constants<T2>::one(); };
        if (me == BIG) {
            if (part == 0) features::template build_pair_features<0, HALF>(tile_of, x16, p, one);
            else features::template build_pair_features<HALF, HALF>(tile_of, x16, p, one);
        } else {
            constexpr int N = (FEATURES - 2 * HALF) / 2; // rows 128 .. 159; 160 .. 191 stay zero from setup
            if (part == 0) features::template build_pair_features<2 * HALF, N>(tile_of, x16, p, one);
            else features::template build_pair_features<2 * HALF + N, N>(tile_of, x16, p, one);
        }
    }

    // The expanded image: 8 pieces of 32 rows (pair (a, c) at row 16 a + c) and the linear block, written from this
    // warp's 16 rows of an fp32 state block (kernel features row0 ..), each value times its kind's factor.
    template <typename RT>
    __device__ static inline void write_expanded(piece_tile *pieces, lin_tile &lin, const RT &s, int row0, float off_diagonal,
                                                 float diagonal, float linear) {
        feature_def d[2];
#pragma unroll
        for (int h = 0; h < 2; h++) d[h] = feature_at(row0 + lane_row(0, h));
        for_each_pair([&](pair_pos p, const float2 &v) {
            const feature_def &f = d[p.half];
            if (f.kind == feature_kind::quadratic) {
                const float w = f.a == f.b ? diagonal : off_diagonal;
                const uint32_t word = detail::memory::bitcast<uint32_t>(to_pair(w * v.x, w * v.y));
                const int e = DK * f.a + f.b, e2 = DK * f.b + f.a;
                store_word(pieces[e / PIECE].idx(e % PIECE, p.col), word);
                if (f.a != f.b) store_word(pieces[e2 / PIECE].idx(e2 % PIECE, p.col), word);
            } else if (f.kind == feature_kind::linear) {
                store_word(lin.idx(f.b, p.col), detail::memory::bitcast<uint32_t>(to_pair(linear * v.x, linear * v.y)));
            }
        }, const_cast<RT &>(s));
    }
    // The feature sums of rows [row_begin, row_end) into the symmetric matrix (quadratic) and the linear vector.
    __device__ static inline void write_sums(matrix_tile &m, float *lin, const float *sums, int row_begin, int row_end,
                                             float off_diagonal, float diagonal, float linear) {
        for (int row = row_begin + warpgroup::laneid(); row < row_end; row += WARPGROUP_THREADS) {
            const feature_def f = feature_at(row);
            if (f.kind == feature_kind::quadratic) {
                const T x = base_types::convertor<T, float>::convert((f.a == f.b ? diagonal : off_diagonal) * sums[row]);
                m(f.a, f.b) = x;
                m(f.b, f.a) = x;
            } else if (f.kind == feature_kind::linear) {
                lin[f.b] = linear * sums[row];
            }
        }
    }

    // acc += J(x)^T (lhs expanded^T) for this warp's 16 rows: the expanded image's products, two slices at a time
    // with two accumulators in flight, folded with the row's own x_a (x16: the rows' tile, rows of this consumer's
    // half); plus the linear block. `extra` (issued first, 16 x 16) is returned for the caller's own sums term.
    template <typename LHS>
    __device__ static inline void contract(rt_fl<TILE_DIM, DK> &acc, rt_fl<TILE_DIM, DK> &extra, const LHS &lhs,
                                           const qk_tile &x16, const qk_tile &extra_a, const matrix_tile &extra_b,
                                           const piece_tile *pieces, const lin_tile &lin) {
        rt_fl<TILE_DIM, DK> linear;
        rt_fl<TILE_DIM, PIECE> g[2];
        warpgroup::mm_ABt(extra, extra_a, extra_b);
        warpgroup::mm_ABt(linear, lhs, lin);
        warpgroup::mm_ABt(g[0], lhs, pieces[0]);
        warpgroup::mm_ABt(g[1], lhs, pieces[1]);
        uint32_t xw[2][8];
#pragma unroll
        for (int h = 0; h < 2; h++) load_row(xw[h], x16, warpgroup::warp_row0() + lane_row(0, h));
#pragma unroll
        for (int P = 0; P < PIECES; P++) {
            rt_fl<TILE_DIM, PIECE> &gp = g[P % 2];
            if (P + 1 < PIECES) warpgroup::mma_async_wait<1>(gp);
            else warpgroup::mma_async_wait<0>(gp);
#pragma unroll
            for (int j = 0; j < PIECE / DK; j++) {
                const int a = (PIECE / DK) * P + j;
                float xa[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float2 x = from_pair(xw[h][a / 2]);
                    xa[h] = a % 2 ? x.y : x.x;
                }
                for_each_pair([&](pair_pos p, float2 &d) {
                    const float2 v = gp.tiles[0][j].data[p.k];
                    d.x = fmaf(xa[p.half], v.x, d.x);
                    d.y = fmaf(xa[p.half], v.y, d.y);
                }, acc);
            }
            if (P + 2 < PIECES) warpgroup::mm_ABt(gp, lhs, pieces[P + 2]);
        }
        warpgroup::mma_async_wait<0>(linear, extra);
        for_each_pair([&](pair_pos, float2 &d, const float2 &l) {
            d.x += l.x;
            d.y += l.y;
        }, acc, linear);
    }

    // A half chunk's dq or dk (rows: this consumer's 64 tokens) through `staging`: stored in the output dtype (TMA
    // clips rows past the end), or added into the fp32 accumulator (SPLIT). The caller has waited for the staging
    // tile's previous store and synchronised the warpgroup.
    __device__ static inline void stage_grad(grad_tile &staging, const rt_fl<TILE_DIM, DK> &grad) {
        if constexpr (SPLIT) {
            warpgroup::store(staging, grad);
        } else {
            rt<T, TILE_DIM, DK> out;
            copy(out, grad);
            warpgroup::store(staging, out);
        }
    }
    __device__ static inline void issue_grad(const globals &g, grad_tile &staging, const task &t, int rows) {
        if constexpr (SPLIT) tma::store_add_async(g.grad, staging, {t.b, t.h, rows, 0});
        else tma::store_async(g.grad, staging, {t.b, t.h, rows, 0});
    }
};

// ---------------------------------------------------------------- the first pass: dq

// Consumer c owns query rows 64 c .. of the chunk and sees key halves h <= c; consumer 0 (one key half) holds state
// rows 0..127, consumer 1 rows 128..191, as in the forward. Per chunk:
//  1. dN of its half in place, Phi(K)^T of its state rows (shared memory); intra-chunk S = Q K_h^T, dP = dN V_h^T,
//     dS in registers, dq = scale dS K_h;
//  2. the chunk barrier (the images of the state before this chunk are complete), then dq += J(q)^T (dN E^T) from
//     the expanded image E and dq += dD (Q Z + z_lin) from the feature sums;
//  3. dq out; the state update S^T += Phi(K)^T V (and the sums), then its images, double-buffered by chunk parity so
//     that one barrier per chunk orders writers and readers.
template <typename T, int VT, bool SPLIT> struct based_bwd_dq : based_bwd_base<T, VT, SPLIT> {
    using base = based_bwd_base<T, VT, SPLIT>;
    using typename base::globals;
    using typename base::input_block;
    using typename base::task;
    using typename base::grad_tile;
    using typename base::pair_tile;
    using typename base::piece_tile;
    using typename base::lin_tile;
    using typename base::matrix_tile;
    using typename base::qk_tile;
    using base::CHUNK;
    using base::DK;
    using base::FEATURES;
    using base::HALF;
    using base::PIECES;
    static constexpr int BIG = 0;
    static constexpr int STATE_BLOCKS = 2, STATE_ROWS = 3 * HALF;

    struct output_block {
        pair_tile k_features[3];           // Phi(K)^T, state rows 0..63, 64..127, 128..191
        piece_tile pieces[2][PIECES];      // the expanded image (scale^2 S, pairs (a, c)), by chunk parity
        lin_tile lin[2];                   // scale S_lin, likewise
        matrix_tile sums_matrix[2];        // scale^2 z as a symmetric matrix, likewise
        st<T, HALF, TILE_DIM> ones;        // B operand of the feature sums
        grad_tile staging[2];
        float z[STATE_ROWS];               // fp32 running feature sums
        float z_lin[2][DK];                // scale z_lin, by chunk parity
    };
    struct consumer_state {
        rt_fl<TILE_DIM, VT> s[STATE_BLOCKS]; // warp w of block m: state rows block_row0(c, m) + 16 w .., x VT
    };

    __device__ static inline void load(lcsf::producer_args<based_bwd_dq> &p) {
        base::load_chunk(p.g, p.input, p.arrived, p.task, p.iter);
    }

    __device__ static inline void write_images(lcsf::consumer_args<based_bwd_dq> &c, int m, int parity) {
        const float scale = c.g.scale;
        const int row0 = base::template block_row0<BIG>(c.consumer, m) + warpgroup::warp_row0();
        if (row0 < FEATURES)
            base::write_expanded(c.output.pieces[parity], c.output.lin[parity], c.state.s[m], row0, scale * scale,
                                 scale * scale, scale);
    }
    __device__ static inline void write_sums(lcsf::consumer_args<based_bwd_dq> &c, int parity) {
        const float scale = c.g.scale;
        const int r0 = base::template block_row0<BIG>(c.consumer, 0);
        const int r1 = r0 + base::template blocks_of<BIG>(c.consumer) * HALF;
        base::write_sums(c.output.sums_matrix[parity], c.output.z_lin[parity], c.output.z, r0, r1 < FEATURES ? r1 : FEATURES,
                         scale * scale, scale * scale, scale);
    }

    __device__ static inline void setup(lcsf::consumer_args<based_bwd_dq> &c) {
        const globals &g = c.g;
        const int me = c.consumer;
        base::consumers_sync(); // the previous task's last chunk may still read what this rewrites
        base::template load_state<BIG>(c.state.s, c.output.z, g, c.task, me, true, from_state);
        rt<T, TILE_DIM, TILE_DIM> one, zero;
        for_each_pair([&](pair_pos, typename base::T2 &a, typename base::T2 &b) {
            a = base::to_pair(1.f, 1.f);
            b = base::to_pair(0.f, 0.f);
        }, one, zero);
        const int warp_row0 = warpgroup::warp_row0();
        if (me == 0) store(c.output.ones, one, warp_row0, 0);
        if (me == 1 && warp_row0 >= FEATURES - 2 * HALF) {
#pragma unroll
            for (int j = 0; j < CHUNK / TILE_DIM; j++) store(c.output.k_features[2], zero, warp_row0, j * TILE_DIM);
        }
        warpgroup::sync(); // z rows written by other warps of this consumer
        if (g.state0 || g.sum0) { // the state before the first chunk is image parity 1
#pragma unroll
            for (int m = 0; m < STATE_BLOCKS; m++)
                if (m < base::template blocks_of<BIG>(me)) write_images(c, m, 1);
            write_sums(c, 1);
        }
        async_proxy_fence();
    }

    // The forward's state update of block m (S^T += Phi(K)^T V and the feature sums against a tile of ones), issued.
    __device__ static inline void update_block(lcsf::consumer_args<based_bwd_dq> &c, int m, rt_fl<TILE_DIM, TILE_DIM> &sums) {
        pair_tile &kf = c.output.k_features[c.consumer == 0 ? m : 2];
        warpgroup::mma_AB(c.state.s[m], kf.template chunk<0>(), c.input.v[0]);
        warpgroup::mma_AB(c.state.s[m], kf.template chunk<1>(), c.input.v[1], wgmma::chained);
        warpgroup::mm_AB(sums, kf.template chunk<0>(), c.output.ones);
        warpgroup::mma_AB(sums, kf.template chunk<1>(), c.output.ones, wgmma::chained);
    }
    // Block m's feature sums into z and its rows of the images, once its update has completed.
    __device__ static inline void finish_block(lcsf::consumer_args<based_bwd_dq> &c, int m, const rt_fl<TILE_DIM, TILE_DIM> &sums,
                                               int parity) {
        const int row0 = base::template block_row0<BIG>(c.consumer, m) + warpgroup::warp_row0();
        for_each_pair([&](pair_pos p, const float2 &d) {
            if (p.col == 0) c.output.z[row0 + p.row] += d.x;
        }, const_cast<rt_fl<TILE_DIM, TILE_DIM> &>(sums));
        write_images(c, m, parity);
    }

    __device__ static inline void compute(lcsf::consumer_args<based_bwd_dq> &c) {
        using T2 = typename base::T2;
        const globals &g = c.g;
        const int me = c.consumer;
        const float scale = g.scale;
        const float first = c.task.split == 0 ? 1.f : 0.f; // the dD terms are counted once
        const int warp_row0 = warpgroup::warp_row0();
        float dd[2];
#pragma unroll
        for (int h = 0; h < 2; h++) dd[h] = first * c.input.dd[me].data[warp_row0 + lane_row(0, h)];

        // 1. dN; the first key half's S and dP run while the key features are built; the intra-chunk dq.
        base::scale_dout(c.input, me);
        async_proxy_fence();
        warpgroup::sync();
        rt_fl<TILE_DIM, DK> dq;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (h > me) break;
            rt_fl<TILE_DIM, HALF> s, dp;
            warpgroup::mm_ABt(s, c.input.q[me], c.input.k[h]);
            warpgroup::mm_ABt(dp, c.input.dout[me], c.input.v[h]);
            if (h == 0) {
                base::template build_state_features<BIG>(
                    [&]<int F>() -> pair_tile & { return c.output.k_features[F / HALF]; }, c.input.k, me);
                async_proxy_fence();
            }
            warpgroup::mma_async_wait(s, dp);
            const bool diagonal = h == me;
            rt<T, TILE_DIM, HALF> ds;
            for_each_pair([&](pair_pos p, const float2 &sv, const float2 &dpv, T2 &out) {
                const int row = warp_row0 + p.row;
                const float x = !diagonal || p.col <= row ? scale * (dpv.x + dd[p.half]) * fmaf(scale, sv.x, 1.f) : 0.f;
                const float y = !diagonal || p.col + 1 <= row ? scale * (dpv.y + dd[p.half]) * fmaf(scale, sv.y, 1.f) : 0.f;
                out = base::to_pair(x, y);
            }, s, dp, ds);
            if (h == 0) warpgroup::mm_AB(dq, ds, c.input.k[h]);
            else warpgroup::mma_AB(dq, ds, c.input.k[h]);
            warpgroup::mma_async_wait(dq);
        }

        // 2. The barrier: the images of the state before this chunk are complete, and so are this consumer's key
        // features. The state update of the first block (the forward's S^T += Phi(K)^T V and the feature sums) is
        // issued first and runs under the inter-chunk contraction, which neither reads nor writes what it touches.
        base::consumers_sync();
        rt_fl<TILE_DIM, TILE_DIM> sums[STATE_BLOCKS];
        update_block(c, 0, sums[0]);
        if (c.iter > 0 || g.state0 || g.sum0) {
            const int parity = (c.iter + 1) & 1;
            rt_fl<TILE_DIM, DK> u; // Q (scale^2 Z): the dD term's quadratic part
            base::contract(dq, u, c.input.dout[me], c.input.q[me], c.input.q[me], c.output.sums_matrix[parity],
                           c.output.pieces[parity], c.output.lin[parity]);
            const float *z_lin = c.output.z_lin[parity];
            for_each_pair([&](pair_pos p, float2 &d, const float2 &uv) {
                d.x = fmaf(dd[p.half], uv.x + z_lin[p.col], d.x);
                d.y = fmaf(dd[p.half], uv.y + z_lin[p.col + 1], d.y);
            }, dq, u);
        }

        // 3. dq out (rows past the end are clipped by the store, or added as zeros).
        if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
        warpgroup::sync();
        base::stage_grad(c.output.staging[me], dq);
        async_proxy_fence();
        warpgroup::sync();
        if (warpgroup::laneid() == 0) {
            base::issue_grad(g, c.output.staging[me], c.task, 2 * c.iter + me);
            tma::store_commit_group();
        }

        // 4. The updated state's images, of this chunk's parity; consumer 0's second block is updated after the first
        // one's images are written (with its product in flight over them, or over the contraction, ptxas serialises
        // every wgmma).
        const int parity = c.iter & 1;
        warpgroup::mma_async_wait(c.state.s[0], sums[0]);
        finish_block(c, 0, sums[0], parity);
        if (me == 0) {
            update_block(c, 1, sums[1]);
            warpgroup::mma_async_wait(c.state.s[1], sums[1]);
            finish_block(c, 1, sums[1], parity);
        }
        warpgroup::sync(); // z rows of the other warps
        write_sums(c, parity);
        async_proxy_fence(); // read by the next chunk's wgmmas, after its barrier
    }

    __device__ static inline void finish(lcsf::consumer_args<based_bwd_dq> &) {}
};

// ---------------------------------------------------------------- the second pass: dk, dv, d initial state

// Chunks from the last to the first. Consumer c owns key rows 64 c .. of the chunk and sees query halves h >= c;
// consumer 1 (one query half) holds state rows 0..127 of R, consumer 0 rows 128..191. Per chunk:
//  1. dN of its half in place, Phi(K) of its keys (shared memory), the dD column tile; the chunk barrier (dN of both
//     halves and the images of R after this chunk are complete);
//  2. intra-chunk, keys as rows: S^T = K Q_h^T, dP^T = V dN_h^T, dk = scale dS^T Q_h, dv = W^T dN_h;
//  3. dv += Phi(K) R (the compact image), dk += J(k)^T (V E^T) + K RDm + RD_lin (the expanded image and sums);
//  4. dk, dv out; R^T += omega Phi(Q)^T dN and RD += omega Phi(Q)^T dD (Phi(Q)^T built where Phi(K) was); a second
//     barrier (every read of the images is over), then the images. The images are single-buffered: two barriers per
//     chunk cost less than the shared memory of a second copy.
template <typename T, int VT, bool SPLIT> struct based_bwd_dkv : based_bwd_base<T, VT, SPLIT> {
    using base = based_bwd_base<T, VT, SPLIT>;
    using typename base::globals;
    using typename base::input_block;
    using typename base::task;
    using typename base::grad_tile;
    using typename base::pair_tile;
    using typename base::piece_tile;
    using typename base::lin_tile;
    using typename base::matrix_tile;
    using typename base::qk_tile;
    using typename base::v_tile;
    using typename base::row_features_tile;
    using typename base::features;
    using base::CHUNK;
    using base::DK;
    using base::FEATURES;
    using base::HALF;
    using base::PIECES;
    using base::SQRT2;
    static constexpr int BIG = 1;
    static constexpr int STATE_BLOCKS = 2, STATE_ROWS = 3 * HALF;
    using dd_tile = st<T, HALF, TILE_DIM>; // column 0: dD of a half's queries, the rest zero

    // Per consumer, Phi(K) of its keys and Phi(Q)^T of its state rows share memory: the first is read before the
    // second is built.
    union features_small {
        row_features_tile keys;
        pair_tile queries[1]; // state rows 128..191
    };
    union features_big {
        row_features_tile keys;
        pair_tile queries[2]; // state rows 0..127
    };
    struct output_block {
        features_big big;                  // consumer 1
        features_small small;              // consumer 0
        st<T, FEATURES, VT> image;         // R in 16 bits (dv's B operand)
        piece_tile pieces[PIECES];         // R expanded, diagonal doubled (dk)
        lin_tile lin;                      // R_lin
        matrix_tile sums_matrix;           // RD as a symmetric matrix, diagonal doubled
        dd_tile dd[2][2];                  // by chunk parity, per query half
        v_tile dv_staging[2];
        grad_tile dk_staging[2];
        float rd[STATE_ROWS];              // fp32 RD
        float rd_lin[DK];
    };
    struct consumer_state {
        rt_fl<TILE_DIM, VT> r[STATE_BLOCKS]; // R (dL/dS): warp w of block m holds rows block_row0(c, m) + 16 w ..
    };

    __device__ static inline row_features_tile &key_features(output_block &o, int me) {
        return me == BIG ? o.big.keys : o.small.keys;
    }
    __device__ static inline pair_tile &query_features(output_block &o, int me, int m) {
        return me == BIG ? o.big.queries[m] : o.small.queries[0];
    }

    __device__ static inline void load(lcsf::producer_args<based_bwd_dkv> &p) {
        base::load_chunk(p.g, p.input, p.arrived, p.task, p.g.chunks - 1 - p.iter);
    }

    // This warp's rows of R into the compact and expanded images.
    __device__ static inline void write_images(lcsf::consumer_args<based_bwd_dkv> &c, int m) {
        const int row0 = base::template block_row0<BIG>(c.consumer, m) + warpgroup::warp_row0();
        if (row0 >= FEATURES) return;
        rt<T, TILE_DIM, VT> image;
        copy(image, c.state.r[m]);
        store(c.output.image, image, row0, 0);
        base::write_expanded(c.output.pieces, c.output.lin, c.state.r[m], row0, 1.f, 2.f, 1.f);
    }
    __device__ static inline void write_sums(lcsf::consumer_args<based_bwd_dkv> &c) {
        const int r0 = base::template block_row0<BIG>(c.consumer, 0);
        const int r1 = r0 + base::template blocks_of<BIG>(c.consumer) * HALF;
        base::write_sums(c.output.sums_matrix, c.output.rd_lin, c.output.rd, r0, r1 < FEATURES ? r1 : FEATURES, 1.f, 2.f, 1.f);
    }

    // R from the final state's gradient (dL/dS of kernel feature f: the columns it stands for, each / sqrt(2) for
    // a quadratic feature), or zeros.
    __device__ static inline float seed_row(const feature_def &d, const float *row) {
        const int c0 = state_column(d, 0), c1 = state_column(d, 1);
        if (c0 < 0) return 0.f;
        if (d.kind != feature_kind::quadratic) return row[c0];
        return (1.f / SQRT2) * (c1 < 0 ? row[c0] : row[c0] + row[c1]);
    }

    __device__ static inline void setup(lcsf::consumer_args<based_bwd_dkv> &c) {
        const globals &g = c.g;
        const int me = c.consumer;
        base::consumers_sync(); // the previous task's last chunk may still read what this rewrites
        base::template load_state<BIG>(c.state.r, c.output.rd, g, c.task, me, c.task.split == 0, seed_row);
        warpgroup::sync();
        if (g.state0 || g.sum0) {
#pragma unroll
            for (int m = 0; m < STATE_BLOCKS; m++)
                if (m < base::template blocks_of<BIG>(me)) write_images(c, m);
            write_sums(c);
        }
        async_proxy_fence();
    }

    __device__ static inline void compute(lcsf::consumer_args<based_bwd_dkv> &c) {
        using T2 = typename base::T2;
        const globals &g = c.g;
        const int me = c.consumer;
        const int chunk = g.chunks - 1 - c.iter;
        const float scale = g.scale;
        const float first = c.task.split == 0 ? 1.f : 0.f;
        const int warp_row0 = warpgroup::warp_row0(); // this warp's first key row in the consumer's half
        const int parity = c.iter & 1;

        // 1-2. dN of this consumer's half; intra-chunk, keys as rows, the diagonal half's S^T and dP^T running while
        // Phi(K) and the dD column tile are built; then the barrier (dN of the other half, the images of R).
        base::scale_dout(c.input, me);
        async_proxy_fence();
        warpgroup::sync();
        rt_fl<TILE_DIM, DK> dk;
        rt_fl<TILE_DIM, VT> dv;
        // The diagonal half (both consumers), then consumer 0's second half. One call site for the diagonal step, so
        // that the barrier inside it is one instruction that both consumers execute (bar.sync wants every participant
        // at the same one).
        const auto half_step = [&]<bool DIAGONAL>(int h) {
            rt<T, TILE_DIM, HALF> ds, w;
            {
                rt_fl<TILE_DIM, HALF> s, dp;
                warpgroup::mm_ABt(s, c.input.k[me], c.input.q[h]);
                warpgroup::mm_ABt(dp, c.input.v[me], c.input.dout[h]);
                if constexpr (DIAGONAL) {
                    const int t = warpgroup::laneid();
                    row_features_tile &kf = key_features(c.output, me);
                    if (t % 2 == 0) features::template build_row_features<0, FEATURES / 2>(kf, c.input.k[me], t / 2);
                    else features::template build_row_features<FEATURES / 2, FEATURES / 2>(kf, c.input.k[me], t / 2);
                    if (t < HALF) {
                        dd_tile &d = c.output.dd[parity][me];
                        const T x = base_types::convertor<T, float>::convert(first * c.input.dd[me].data[t]);
#pragma unroll
                        for (int j = 0; j < TILE_DIM; j++) d(t, j) = j == 0 ? x : base_types::constants<T>::zero();
                    }
                    async_proxy_fence();
                    base::consumers_sync();
                }
                warpgroup::mma_async_wait(s, dp);
                const float *dd = c.input.dd[h].data;
                for_each_pair([&](pair_pos p, const float2 &sv, const float2 &dpv, T2 &ds16, T2 &w16) {
                    const int key = warp_row0 + p.row;
                    const bool vx = !DIAGONAL || p.col >= key, vy = !DIAGONAL || p.col + 1 >= key;
                    const float sx = scale * sv.x, sy = scale * sv.y;
                    ds16 = base::to_pair(vx ? scale * (dpv.x + first * dd[p.col]) * (1.f + sx) : 0.f,
                                         vy ? scale * (dpv.y + first * dd[p.col + 1]) * (1.f + sy) : 0.f);
                    w16 = base::to_pair(vx ? fmaf(0.5f * sx, sx, 1.f + sx) : 0.f, vy ? fmaf(0.5f * sy, sy, 1.f + sy) : 0.f);
                }, s, dp, ds, w);
            }
            if constexpr (DIAGONAL) {
                warpgroup::mm_AB(dk, ds, c.input.q[h]);
                warpgroup::mm_AB(dv, w, c.input.dout[h]);
            } else {
                warpgroup::mma_AB(dk, ds, c.input.q[h]);
                warpgroup::mma_AB(dv, w, c.input.dout[h]);
            }
            warpgroup::mma_async_wait(dk, dv);
        };
        half_step.template operator()<true>(me);
        if (me == 0) half_step.template operator()<false>(1);

        // 3. Inter-chunk, from R of the later chunks.
        if (c.iter > 0 || g.state0 || g.sum0) {
            warpgroup::mma_AB(dv, key_features(c.output, me), c.output.image);
            rt_fl<TILE_DIM, DK> u; // K RDm
            base::contract(dk, u, c.input.v[me], c.input.k[me], c.input.k[me], c.output.sums_matrix, c.output.pieces,
                           c.output.lin);
            warpgroup::mma_async_wait(dv); // done already (issued before the contraction's last wait)
            const float *rd_lin = c.output.rd_lin;
            for_each_pair([&](pair_pos p, float2 &d, const float2 &uv) {
                d.x += uv.x + rd_lin[p.col];
                d.y += uv.y + rd_lin[p.col + 1];
            }, dk, u);
        }

        // 4. dk and dv out.
        {
            rt<T, TILE_DIM, VT> out;
            copy(out, dv);
            if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
            warpgroup::sync(); // also: every warp's products have read Phi(K), which Phi(Q)^T overwrites below
            warpgroup::store(c.output.dv_staging[me], out);
            base::stage_grad(c.output.dk_staging[me], dk);
            async_proxy_fence();
        }

        // 5. R^T += omega Phi(Q)^T dN and RD += omega Phi(Q)^T dD over the chunk's 128 queries, per block of 64 rows.
        base::template build_state_features<BIG>(
            [&]<int F>() -> pair_tile & { return query_features(c.output, me, F < 2 * HALF ? F / HALF : 0); }, c.input.q,
            me);
        async_proxy_fence();
        warpgroup::sync();
        if (warpgroup::laneid() == 0) {
            tma::store_async(g.dv, c.output.dv_staging[me], {c.task.b, c.task.h, 2 * chunk + me, c.task.split});
            base::issue_grad(g, c.output.dk_staging[me], c.task, 2 * chunk + me);
            tma::store_commit_group();
        }
        const float scale2 = scale * scale;
#pragma unroll
        for (int m = 0; m < STATE_BLOCKS; m++) {
            if (m >= base::template blocks_of<BIG>(me)) break;
            pair_tile &qf = query_features(c.output, me, m);
            rt_fl<TILE_DIM, VT> upd;
            rt_fl<TILE_DIM, TILE_DIM> sums;
            warpgroup::mm_AB(upd, qf.template chunk<0>(), c.input.dout[0]);
            warpgroup::mma_AB(upd, qf.template chunk<1>(), c.input.dout[1], wgmma::chained);
            warpgroup::mm_AB(sums, qf.template chunk<0>(), c.output.dd[parity][0]);
            warpgroup::mma_AB(sums, qf.template chunk<1>(), c.output.dd[parity][1], wgmma::chained);
            warpgroup::mma_async_wait(upd, sums);
            const int row0 = base::template block_row0<BIG>(me, m) + warp_row0;
            float omega[2];
#pragma unroll
            for (int h = 0; h < 2; h++) omega[h] = feature_weight(feature_at(row0 + lane_row(0, h)), scale);
            (void)scale2;
            for_each_pair([&](pair_pos p, float2 &r, const float2 &d) {
                r.x = fmaf(omega[p.half], d.x, r.x);
                r.y = fmaf(omega[p.half], d.y, r.y);
            }, c.state.r[m], upd);
            for_each_pair([&](pair_pos p, const float2 &d) {
                if (p.col == 0) c.output.rd[row0 + p.row] += omega[p.half] * d.x;
            }, sums);
        }
        // Every consumer's reads of the images are over; then the images of R after this chunk.
        base::consumers_sync();
#pragma unroll
        for (int m = 0; m < STATE_BLOCKS; m++)
            if (m < base::template blocks_of<BIG>(me)) write_images(c, m);
        warpgroup::sync(); // rd rows of the other warps
        write_sums(c);
        async_proxy_fence();
    }

    // d kv0 = R and d k_sum0 = RD in the 273 layout: a quadratic column holds R / sqrt(2) (sqrt(2) R on the diagonal)
    // plus the antisymmetric part of the seed, which passes to the initial state unchanged but never entered R.
    __device__ static inline void put(float *out, const float *seed, const feature_def &d, float x) {
        const int c0 = state_column(d, 0), c1 = state_column(d, 1);
        if (c0 < 0) return;
        if (d.kind != feature_kind::quadratic) {
            out[c0] = x;
        } else if (c1 < 0) {
            out[c0] = SQRT2 * x;
        } else {
            const float anti = seed ? 0.5f * (seed[c0] - seed[c1]) : 0.f;
            out[c0] = x / SQRT2 + anti;
            out[c1] = x / SQRT2 - anti;
        }
    }
    __device__ static inline void finish(lcsf::consumer_args<based_bwd_dkv> &c) {
        const globals &g = c.g;
        const task &t = c.task;
        const int me = c.consumer;
        const size_t head = size_t(t.b) * g.heads + t.h;
        if (g.d_kv0) {
#pragma unroll
            for (int m = 0; m < STATE_BLOCKS; m++) {
                if (m >= base::template blocks_of<BIG>(me)) break;
                const int row0 = base::template block_row0<BIG>(me, m) + warpgroup::warp_row0();
                for_each_pair([&](pair_pos p, float2 &v) {
                    const feature_def d = feature_at(row0 + p.row);
                    const int c0 = t.split * VT + p.col;
                    const size_t at0 = (head * g.value_dim + c0) * STATE_FEATURES;
                    if (c0 < g.value_dim) put(g.d_kv0 + at0, g.state0 ? g.state0 + at0 : nullptr, d, v.x);
                    if (c0 + 1 < g.value_dim)
                        put(g.d_kv0 + at0 + STATE_FEATURES, g.state0 ? g.state0 + at0 + STATE_FEATURES : nullptr, d, v.y);
                }, c.state.r[m]);
            }
        }
        if (g.d_k_sum0 && t.split == 0) {
            float *out = g.d_k_sum0 + head * STATE_FEATURES;
            const float *seed = g.sum0 ? g.sum0 + head * STATE_FEATURES : nullptr;
            const int r0 = base::template block_row0<BIG>(me, 0);
            for (int i = warpgroup::laneid(); i < base::template blocks_of<BIG>(me) * HALF; i += WARPGROUP_THREADS)
                if (r0 + i < FEATURES) put(out, seed, feature_at(r0 + i), c.output.rd[r0 + i]);
        }
    }
};

// ---------------------------------------------------------------- the small kernels around the passes

// rinv = 1 / (den + eps) and dD = -rinv (dO . o) when normalizing, rinv = 1 and dD = 0 otherwise,
// both 0 on the padding rows up to chunks * BWD_CHUNK; (batch, heads, padded len) dense.
template <typename T> struct row_prep_args {
    const T *o, *dout;
    int64_t o_sb, o_sh, o_sn, d_sb, d_sh, d_sn;
    const float *den;
    float *rinv, *dd;
    int heads, len, padded_len, value_dim;
    int64_t rows; // batch * heads * padded_len
    float eps;
    bool normalize;
};

// Eight lanes per row, 16 bytes (8 values) of o and dO per lane and step: o and dO are TMA-readable views (16-byte
// aligned base and row strides, contiguous value columns), so every load is a full vector.
inline constexpr int BWD_ROW_LANES = 8;
template <typename T> __global__ void based_bwd_rows(const __grid_constant__ row_prep_args<T> a) {
    using T2 = typename base_types::packing<T>::packed_type;
    const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / BWD_ROW_LANES;
    const int lane = threadIdx.x % BWD_ROW_LANES;
    const bool exists = row < a.rows;
    int bh = 0, i = a.len;
    if (exists) {
        bh = int(row / a.padded_len);
        i = int(row - int64_t(bh) * a.padded_len);
    }
    float dot = 0.f;
    if (a.normalize && i < a.len) {
        const int b = bh / a.heads, h = bh - b * a.heads;
        const T *o = a.o + b * a.o_sb + h * a.o_sh + int64_t(i) * a.o_sn;
        const T *d = a.dout + b * a.d_sb + h * a.d_sh + int64_t(i) * a.d_sn;
        for (int c = 8 * lane; c < a.value_dim; c += 8 * BWD_ROW_LANES) {
            const uint4 ov = *reinterpret_cast<const uint4 *>(o + c), dv = *reinterpret_cast<const uint4 *>(d + c);
            const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 x = base_types::convertor<float2, T2>::convert(detail::memory::bitcast<T2>(ow[k]));
                const float2 y = base_types::convertor<float2, T2>::convert(detail::memory::bitcast<T2>(dw[k]));
                dot = fmaf(x.x, y.x, dot);
                dot = fmaf(x.y, y.y, dot);
            }
        }
    }
    // The eight lanes of a row are aligned in the warp (blockDim is a multiple of 32).
#pragma unroll
    for (int s = BWD_ROW_LANES / 2; s > 0; s /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, s);
    if (!exists || lane != 0) return;
    float rinv = 0.f, dd = 0.f;
    if (i < a.len) {
        rinv = 1.f;
        if (a.normalize) {
            rinv = 1.f / (a.den[int64_t(bh) * a.len + i] + a.eps);
            dd = -rinv * dot;
        }
    }
    a.rinv[row] = rinv;
    a.dd[row] = dd;
}

// SPLIT: dq and dk from their fp32 accumulators (batch, heads, padded len, 16) to the outputs, 8 columns per thread.
template <typename T> struct grad_convert_args {
    const float *acc;
    T *out;
    int64_t sb, sh, sn;
    int heads, len, padded_len;
    int64_t items; // batch * heads * len * 2
};

template <typename T> __global__ void based_bwd_convert(const __grid_constant__ grad_convert_args<T> a) {
    using T2 = typename base_types::packing<T>::packed_type;
    const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (item >= a.items) return;
    const int half_row = int(item & 1);
    const int64_t row = item >> 1; // over (batch, heads, len)
    const int bh = int(row / a.len), i = int(row - int64_t(bh) * a.len);
    const int b = bh / a.heads, h = bh - b * a.heads;
    const float4 *src = reinterpret_cast<const float4 *>(a.acc + (int64_t(bh) * a.padded_len + i) * FEATURE_DIM + 8 * half_row);
    const float4 x = src[0], y = src[1];
    T2 packed[4] = {convert<T2>(float2{x.x, x.y}),
                    convert<T2>(float2{x.z, x.w}),
                    convert<T2>(float2{y.x, y.y}),
                    convert<T2>(float2{y.z, y.w})};
    T *dst = a.out + b * a.sb + h * a.sh + int64_t(i) * a.sn + 8 * half_row;
    *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(packed);
}

} // namespace tk_based
