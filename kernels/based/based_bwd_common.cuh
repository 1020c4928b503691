// What the two passes of the chunked Based backward share (docs/based.md, "The backward", has the math): the
// passes themselves are based_bwd_dq_kernel.cuh and based_bwd_dkv_kernel.cuh, members of based_bwd below.
//
// With dN_i = dO_i / (den_i + eps) and dD_i = -(dO_i . o_i) / (den_i + eps) (dN = dO, dD = 0 unnormalized), the
// gradient of w_ij = 1 + s + s^2 / 2 is dW_ij = dN_i . v_j + dD_i and that of s_ij is dS_ij = dW_ij (1 + s_ij).
// A small preparation kernel (based_bwd_prep_kernel.cuh) turns den, o and dO into two per-row numbers,
// rinv_i = 1 / (den_i + eps) and dD_i (both zero on rows past the end), so no pass reads o.
//
// Two passes built like the forward kernel (based_fwd_kernel.cuh): one LCSF task per (batch, head, value split)
// walking the sequence in chunks of 128 tokens, two consumer warpgroups each owning 64 rows of the chunk, the fp32
// state split across them by feature rows, feature tiles built in shared memory with packed multiplies, every state
// product an ss-wgmma against 16-bit images of the state:
//  * the dq pass walks forward with the forward's state S = sum_j phi(k_j) v_j^T and z = sum_j phi(k_j) (kernel
//    features, based_features.cuh; kv0 included) and gives dq_i = scale sum_{j <= i} dS_ij k_j + J(q_i)^T G_i,
//    G_i = omega (S dN_i + z dD_i), J the Jacobian of the features;
//  * the dkv pass walks backward with R = dL/dS and RD = dL/dz of the later chunks (seeded with the final state's
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
// a conversion kernel (based_bwd_convert_kernel.cuh) writes them out; the dD terms, which do not depend on value
// columns, are counted by split 0.
//
// Ragged length: TMA zero-fills q, k, v, dO past the end and the preparation leaves rinv = dD = 0 there, so padded
// queries carry no gradient and add nothing to R; a padded key is later than every real query (causal mask) and its
// features never reach a product that dq reads (the constant feature is not differentiated).
#pragma once

#include "based.h"
#include "based_configs.cuh"
#include "based_features.cuh"
#include "kittens.cuh"

namespace tk_based {
using namespace kittens;

// What both passes share: shapes, tiles, globals, loads, feature tiles, the expanded images and the contraction. The
// passes are its members dq_pass and dkv_pass, which derive from it and launch as LCSF kernels.
template <typename T, int VT, bool SPLIT> struct based_bwd : feature_tiles<T>, lcsf_numbers<CHUNKED_BACKWARD> {
    static_assert(VT == 16 || VT == 32 || VT == 48 || VT == 64, "Based backward: a task holds 16 to 64 value columns");
    static_assert(!SPLIT || VT == CHUNKED_MAX_VALUE_COLUMNS,
                  "Based backward: only value dimensions over 64 are split, into tasks of 64");
    static constexpr int DK = FEATURE_DIM;
    static constexpr int HALF = CHUNKED_BACKWARD.consumer_rows;
    static constexpr int CHUNK = CHUNKED_BACKWARD.block_rows();
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
            load_shared_words<4>(w, addr);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float2 x = from_pair(w[i]);
                w[i] = detail::memory::bitcast<uint32_t>(to_pair(ri * x.x, ri * x.y));
            }
            store_shared_words<4>(addr, w);
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

    struct dq_pass;  // based_bwd_dq_kernel.cuh
    struct dkv_pass; // based_bwd_dkv_kernel.cuh
};

} // namespace tk_based
