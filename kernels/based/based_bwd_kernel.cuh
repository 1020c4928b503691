// Based linear-attention backward on the LCSF template (docs/based.md, "The backward", has the math and the plan).
//
// With dN_i = dO_i / (den_i + eps) and dD_i = -(dO_i . o_i) / (den_i + eps) (dN = dO, dD = 0 unnormalized), the
// gradient of w_ij = 1 + s + s^2 / 2 is dW_ij = dN_i . v_j + dD_i and that of s_ij is dS_ij = dW_ij (1 + s_ij).
// A small preparation kernel turns den, o and dO into two per-row numbers, rinv_i = 1 / (den_i + eps) and dD_i (both
// zero on rows past the end), so dN_i = rinv_i dO_i is formed where it is used and no kernel below reads o.
//
// Two kernels, each one LCSF task per (batch, head, value split) walking the sequence in chunks of 64 tokens, one
// consumer warpgroup, warp w owning rows 16w .. 16w + 15 of every 64-row product:
//  * based_bwd_dq walks forward, rebuilding the forward's state of the earlier chunks (kv0 included), and produces
//    dq_i = scale sum_{j <= i} dS_ij k_j + d/dq_i [phi(scale q_i) . G_i], G_i = (state)^T dN_i + k_sum dD_i;
//  * based_bwd_dkv walks backward, carrying R = sum_i dN_i phi(scale q_i)^T and RD = sum_i dD_i phi(scale q_i) over
//    the later rows (seeded with the final state's gradient), and produces dv_j = R phi(k_j) + sum_{i >= j} w_ij dN_i,
//    dk_j = d/dk_j [v_j^T R phi(k_j) + RD . phi(k_j)] + scale sum_{i >= j} dS_ij q_i, and in the end d kv0 = R,
//    d k_sum0 = RD.
// Both keep their state as the forward does: SLICES slices of 16 feature rows x VT value columns, fp32 wgmma
// accumulators in registers, and a 16-bit image of it in shared memory as a wgmma operand. Slice a < 16 holds the
// quadratic features (a, b) without the 1/sqrt(2) (the unscaled k_a k_b for the forward state; for R the
// coefficient of k_a k_b), slice 16 the linear features, slice 17 the constant one in its first row.
//
// Value splits: the fp32 state takes 2.5 VT registers per thread, so VT (the value columns of one task) is at most
// 64; a wider v (Dv > 64) is cut into two tasks of 64 columns, the second zero-filled by TMA past Dv. dq and dk sum
// over all value columns, so then (SPLIT) each task adds its share into an fp32 accumulator by TMA reduce-adds and
// a conversion kernel writes them out; the dD terms, which do not depend on value columns, are counted by split 0.
//
// Ragged length: TMA zero-fills q, k, v, dO past the end and the preparation leaves rinv = dD = 0 there, so padded
// rows carry no gradient; padded keys are masked out of dS and W and out of the constant feature.
#pragma once

#include "based.h"
#include "kittens.cuh"

namespace tk_based {
using namespace kittens;

inline constexpr int BWD_CHUNK = 64; // tokens per chunk: one wgmma row slab

// What both passes share: shapes, tiles, globals, and the features of a row.
template <typename T, int VT, bool SPLIT> struct based_bwd_base {
    static_assert(VT == 16 || VT == 32 || VT == 48 || VT == 64, "Based backward: a task holds 16 to 64 value columns");
    static_assert(!SPLIT || VT == 64, "Based backward: only value dimensions over 64 are split, into tasks of 64");
    static constexpr int DK = FEATURE_DIM;
    static constexpr int CHUNK = BWD_CHUNK;
    static constexpr int NUM_CONSUMERS = 1;
    static constexpr int INPUT_STAGES = 3;
    // One consumer holds the fp32 state (160 registers at VT = 64) next to two 64-column products.
    static constexpr int PRODUCER_REGISTERS = 24, CONSUMER_REGISTERS = 256;
    static constexpr int QUAD_SLICES = DK, LINEAR_SLICE = DK, CONSTANT_SLICE = DK + 1, SLICES = DK + 2;
    static constexpr int FEATURES = SLICES * TILE_DIM;
    static constexpr int STATE_BLOCKS = (SLICES + WARPGROUP_WARPS - 1) / WARPGROUP_WARPS;
    static constexpr float SQRT2 = 1.41421356237309515f;

    using qk_tile = st<T, CHUNK, DK>;
    using v_tile = st<T, CHUNK, VT>;
    using slice_tile = st<T, TILE_DIM, VT>;
    using row_vec = sv<float, CHUNK>;
    using acc_tile = st<float, CHUNK, DK>; // a chunk's share of dq or dk (SPLIT)
    using qk_gl = gl<T, -1, -1, -1, DK, qk_tile>;
    using v_gl = gl<T, -1, -1, -1, -1, v_tile>; // columns: the whole Dv (a split's tile may reach past it)
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
        qk_tile q, k;
        v_tile v, dout;
        row_vec rinv, dd;
    };
    struct task {
        int b, h, split, iters;
    };

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
        tma::expect<qk_tile, qk_tile, v_tile, v_tile, row_vec, row_vec>(arrived);
        tma::load_async(in.q, g.q, {t.b, t.h, chunk, 0}, arrived);
        tma::load_async(in.k, g.k, {t.b, t.h, chunk, 0}, arrived);
        tma::load_async(in.v, g.v, {t.b, t.h, chunk, t.split}, arrived);
        tma::load_async(in.dout, g.dout, {t.b, t.h, chunk, t.split}, arrived);
        tma::load_async(in.rinv, g.rinv, {0, t.b, t.h, chunk}, arrived);
        tma::load_async(in.dd, g.dd, {0, t.b, t.h, chunk}, arrived);
    }

    __device__ static inline float element(const qk_tile &t, int row, int col) {
        return base_types::convertor<float, T>::convert(t(row, col));
    }
    // Feature (slice, col) of row `row` of a Q or K tile scaled by f, as in the forward kernel: f^2 x_slice x_col,
    // f x_col, `one` in column 0 of the constant slice, 0 in the padding slices.
    __device__ static inline float feature(const qk_tile &t, int row, int slice, int col, float f, float one) {
        if (slice < QUAD_SLICES) return f * f * element(t, row, slice) * element(t, row, col);
        if (slice == LINEAR_SLICE) return f * element(t, row, col);
        if (slice == CONSTANT_SLICE) return col == 0 ? one : 0.f;
        return 0.f;
    }

    // Feature (slice, row) of the kernel's slice layout from one row of a state in the 273 layout (a value column's
    // row of kv, or k_sum). The quadratic features enter symmetrized, (x_ab + x_ba) * quad, because the kernels
    // differentiate the quadratic form as if it were symmetric (docs/based.md, "The backward").
    __device__ static inline float external(const float *base, int slice, int row, float quad) {
        if (slice < QUAD_SLICES)
            return quad * (base[1 + DK + slice * DK + row] + base[1 + DK + row * DK + slice]);
        if (slice == LINEAR_SLICE) return base[1 + row];
        if (slice == CONSTANT_SLICE) return row == 0 ? base[0] : 0.f;
        return 0.f;
    }

    // The fp32 state's registers from a state in the 273 layout (or zeros), and its 16-bit image.
    template <typename State>
    __device__ static inline void state_from(State &kv, slice_tile *image, const globals &g, const task &t,
                                             const float *kv_ext, float quad) {
        const int warp = warpgroup::warpid();
#pragma unroll
        for (int m = 0; m < STATE_BLOCKS; m++) {
            const int slice = m * WARPGROUP_WARPS + warp;
            if (kv_ext) {
                for_each_pair(
                    [&](pair_pos p, float2 &v) {
                        const int c0 = t.split * VT + p.col;
                        const float *base = kv_ext + (int64_t(t.b) * g.heads + t.h) * g.value_dim * STATE_FEATURES;
                        v.x = c0 < g.value_dim ? external(base + int64_t(c0) * STATE_FEATURES, slice, p.row, quad) : 0.f;
                        v.y = c0 + 1 < g.value_dim ? external(base + int64_t(c0 + 1) * STATE_FEATURES, slice, p.row, quad)
                                                   : 0.f;
                    },
                    kv[m]);
            } else {
                zero(kv[m]);
            }
            if (slice < SLICES) {
                rt<T, TILE_DIM, VT> im;
                copy(im, kv[m]);
                store(image[slice], im);
            }
        }
    }
    // The fp32 feature sums (k_sum or RD) from a vector in the 273 layout (or zeros).
    __device__ static inline void sums_from(float *sums, const globals &g, const task &t, const float *ext, float quad) {
        const float *base = ext ? ext + (int64_t(t.b) * g.heads + t.h) * STATE_FEATURES : nullptr;
        for (int f = warpgroup::laneid(); f < FEATURES; f += WARPGROUP_THREADS)
            sums[f] = base && t.split == 0 ? external(base, f / TILE_DIM, f % TILE_DIM, quad) : 0.f;
    }

    // A chunk's dq or dk (rows: this warp's 16 tokens) to global memory through `staging`: stored in the output
    // dtype (TMA clips rows past the end), or added into the fp32 accumulator (SPLIT). The barrier at the start also
    // ends every warp's reads of the state's image and sums before the caller rewrites them.
    __device__ static inline void store_grad(const globals &g, grad_tile &staging, const rt_fl<TILE_DIM, DK> &grad,
                                             const task &t, int chunk) {
        if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
        warpgroup::sync();
        if constexpr (SPLIT) {
            warpgroup::store(staging, grad);
        } else {
            rt<T, TILE_DIM, DK> out;
            copy(out, grad);
            warpgroup::store(staging, out);
        }
        async_proxy_fence();
        warpgroup::sync();
        if (warpgroup::laneid() == 0) {
            if constexpr (SPLIT) tma::store_add_async(g.grad, staging, {t.b, t.h, chunk, 0});
            else tma::store_async(g.grad, staging, {t.b, t.h, chunk, 0});
            tma::store_commit_group();
        }
    }
};

// ---------------------------------------------------------------- the first pass: dq

template <typename T, int VT, bool SPLIT> struct based_bwd_dq : based_bwd_base<T, VT, SPLIT> {
    using base = based_bwd_base<T, VT, SPLIT>;
    using typename base::globals;
    using typename base::input_block;
    using typename base::task;
    using typename base::slice_tile;
    using typename base::grad_tile;
    using base::CHUNK;
    using base::DK;
    using base::FEATURES;
    using base::QUAD_SLICES;
    using base::SLICES;
    using base::STATE_BLOCKS;
    using base::feature;
    using base::element;

    struct output_block {
        slice_tile image[SLICES]; // the forward's state of the earlier chunks, 16 bits
        grad_tile staging;
        float k_sum[FEATURES];
    };
    struct consumer_state {
        rt_fl<TILE_DIM, VT> kv[STATE_BLOCKS];
    };

    __device__ static inline void load(lcsf::producer_args<based_bwd_dq> &p) {
        base::load_chunk(p.g, p.input, p.arrived, p.task, p.iter);
    }

    __device__ static inline void setup(lcsf::consumer_args<based_bwd_dq> &c) {
        // kv0 stores the quadratic features as x_a x_b / sqrt(2): the kernel's slices hold x_a x_b.
        const float quad = 1.f / base::SQRT2; // sqrt(2) (x_ab + x_ba) / 2
        base::state_from(c.state.kv, c.output.image, c.g, c.task, c.g.state0, quad);
        base::sums_from(c.output.k_sum, c.g, c.task, c.g.sum0, quad);
        async_proxy_fence();
        warpgroup::sync();
    }

    __device__ static inline void compute(lcsf::consumer_args<based_bwd_dq> &c) {
        using T2 = typename rt<T, TILE_DIM, CHUNK>::T2;
        const int chunk0 = c.iter * CHUNK;
        const int len = c.g.len;
        const float scale = c.g.scale;
        const int warp_row0 = warpgroup::warp_row0();
        const float first = c.task.split == 0 ? 1.f : 0.f; // the dD terms are counted once
        const float *rinv = c.input.rinv.data, *dd = c.input.dd.data;

        // 1. Intra-chunk: dS = (rinv dO V^T + dD) (1 + s) masked, dq = scale dS K.
        rt_fl<TILE_DIM, DK> dq;
        {
            rt_fl<TILE_DIM, CHUNK> s, dp;
            warpgroup::mm_ABt(s, c.input.q, c.input.k);
            warpgroup::mm_ABt(dp, c.input.dout, c.input.v);
            warpgroup::mma_async_wait(s, dp);
            rt<T, TILE_DIM, CHUNK> ds;
            for_each_pair(
                [&](pair_pos p, const float2 &sv, const float2 &dpv, T2 &out) {
                    const int row = warp_row0 + p.row, query = chunk0 + row, key = chunk0 + p.col;
                    const float ri = rinv[row], di = first * dd[row];
                    const float x = key <= query && key < len ? scale * fmaf(ri, dpv.x, di) * fmaf(scale, sv.x, 1.f) : 0.f;
                    const float y =
                        key + 1 <= query && key + 1 < len ? scale * fmaf(ri, dpv.y, di) * fmaf(scale, sv.y, 1.f) : 0.f;
                    out = convert<T2>(float2{x, y});
                },
                s, dp, ds);
            warpgroup::mm_AB(dq, ds, c.input.k);
            warpgroup::mma_async_wait(dq);
        }

        // 2. Inter-chunk: G_a = dN image_a^T (+ dD k_sum_a), dq_b += scale^2 q_a G_ab (quadratic), scale G_b (linear).
        if (c.iter > 0 || c.g.state0 || c.g.sum0) {
            rt<T, TILE_DIM, VT> dn;
            warpgroup::load(dn, c.input.dout);
            for_each_pair(
                [&](pair_pos p, T2 &v) {
                    const float ri = rinv[warp_row0 + p.row];
                    const float2 x = convert<float2>(v);
                    v = convert<T2>(float2{ri * x.x, ri * x.y});
                },
                dn);
#pragma unroll 1
            for (int a = 0; a < QUAD_SLICES + 1; a++) {
                rt_fl<TILE_DIM, DK> ga;
                warpgroup::mm_ABt(ga, dn, c.output.image[a]);
                warpgroup::mma_async_wait(ga);
                const float *k_sum = c.output.k_sum + a * TILE_DIM;
                for_each_pair(
                    [&](pair_pos p, const float2 &gv, float2 &dqv) {
                        const int row = warp_row0 + p.row;
                        const float di = first * dd[row];
                        const float coef = a < QUAD_SLICES ? scale * scale * element(c.input.q, row, a) : scale;
                        dqv.x += coef * fmaf(di, k_sum[p.col], gv.x);
                        dqv.y += coef * fmaf(di, k_sum[p.col + 1], gv.y);
                    },
                    ga, dq);
            }
        }

        // 3. dq out (its barrier ends the reads of the image and k_sum above).
        base::store_grad(c.g, c.output.staging, dq, c.task, c.iter);

        // 4. The forward's state update: state^T += Phi(K)^T V, then its image and k_sum.
        const int warp = warpgroup::warpid();
#pragma unroll
        for (int m = 0; m < STATE_BLOCKS; m++) {
            const int slice = m * WARPGROUP_WARPS + warp;
            rt_fl<TILE_DIM, CHUNK> kf;
            for_each_pair(
                [&](pair_pos p, float2 &v) {
                    const float one_x = chunk0 + p.col < len ? 1.f : 0.f, one_y = chunk0 + p.col + 1 < len ? 1.f : 0.f;
                    v.x = feature(c.input.k, p.col, slice, p.row, 1.f, one_x);
                    v.y = feature(c.input.k, p.col + 1, slice, p.row, 1.f, one_y);
                },
                kf);
            rt<T, TILE_DIM, CHUNK> k16;
            copy(k16, kf);
            warpgroup::mma_AB(c.state.kv[m], k16, c.input.v);
            warpgroup::mma_async_wait(c.state.kv[m]);
            if (slice < SLICES) {
                rt<T, TILE_DIM, VT> image;
                copy(image, c.state.kv[m]);
                store(c.output.image[slice], image);
            }
        }
        for (int f = warpgroup::laneid(); f < FEATURES; f += WARPGROUP_THREADS) {
            const int slice = f / TILE_DIM, col = f % TILE_DIM;
            float sum = 0.f;
            for (int j = 0; j < CHUNK; j++) sum += feature(c.input.k, j, slice, col, 1.f, chunk0 + j < len ? 1.f : 0.f);
            c.output.k_sum[f] += sum;
        }
        async_proxy_fence();
        warpgroup::sync();
    }

    __device__ static inline void finish(lcsf::consumer_args<based_bwd_dq> &) {}
};

// ---------------------------------------------------------------- the second pass: dk, dv, d initial state

template <typename T, int VT, bool SPLIT> struct based_bwd_dkv : based_bwd_base<T, VT, SPLIT> {
    using base = based_bwd_base<T, VT, SPLIT>;
    using typename base::globals;
    using typename base::input_block;
    using typename base::task;
    using typename base::slice_tile;
    using typename base::grad_tile;
    using typename base::v_tile;
    using base::CHUNK;
    using base::CONSTANT_SLICE;
    using base::DK;
    using base::FEATURES;
    using base::LINEAR_SLICE;
    using base::QUAD_SLICES;
    using base::SLICES;
    using base::STATE_BLOCKS;
    using base::feature;
    using base::element;

    struct output_block {
        slice_tile image[SLICES]; // R of the later chunks, 16 bits
        v_tile dv_staging;
        grad_tile staging;
        float rd[FEATURES];
    };
    struct consumer_state {
        rt_fl<TILE_DIM, VT> r[STATE_BLOCKS]; // R^T: feature rows x value columns
    };

    // Slice a of Phi(K) for this warp's 16 keys in 16 bits (the constant feature 0 on keys past the end).
    __device__ static inline void key_features(lcsf::consumer_args<based_bwd_dkv> &c, rt<T, TILE_DIM, DK> &out, int a,
                                               int chunk0) {
        const int warp_row0 = warpgroup::warp_row0();
        rt_fl<TILE_DIM, DK> af;
        for_each_pair(
            [&](pair_pos p, float2 &v) {
                const int row = warp_row0 + p.row;
                const float one = chunk0 + row < c.g.len ? 1.f : 0.f;
                v.x = feature(c.input.k, row, a, p.col, 1.f, one);
                v.y = feature(c.input.k, row, a, p.col + 1, 1.f, one);
            },
            af);
        copy(out, af);
    }

    // The chunks go from the last to the first.
    __device__ static inline void load(lcsf::producer_args<based_bwd_dkv> &p) {
        base::load_chunk(p.g, p.input, p.arrived, p.task, p.g.chunks - 1 - p.iter);
    }

    __device__ static inline void setup(lcsf::consumer_args<based_bwd_dkv> &c) {
        // The final state's gradient is taken per feature x_a x_b / sqrt(2); R holds the coefficient of x_a x_b,
        // symmetrized: (g_ab + g_ba) / (2 sqrt(2)). finish() gives the antisymmetric part back to d kv0.
        const float quad = 0.5f / base::SQRT2;
        base::state_from(c.state.r, c.output.image, c.g, c.task, c.g.state0, quad);
        base::sums_from(c.output.rd, c.g, c.task, c.g.sum0, quad);
        async_proxy_fence();
        warpgroup::sync();
    }

    __device__ static inline void compute(lcsf::consumer_args<based_bwd_dkv> &c) {
        using T2 = typename rt<T, TILE_DIM, CHUNK>::T2;
        const int chunk = c.g.chunks - 1 - c.iter, chunk0 = chunk * CHUNK;
        const int len = c.g.len;
        const float scale = c.g.scale;
        const int warp_row0 = warpgroup::warp_row0(); // this warp's first key row
        const float first = c.task.split == 0 ? 1.f : 0.f;
        const float *rinv = c.input.rinv.data, *dd = c.input.dd.data;

        // 1. Intra-chunk, keys as rows: S^T = K Q^T and dP^T = V dO^T, dk = scale dS^T Q; then dv = (W^T rinv) dO with
        //    S^T computed again (one k-step) rather than held next to dv, dP^T and the state. Each accumulator starts
        //    fresh here, with nothing else held: added to after the inter-chunk terms, they made ptxas spill.
        const int key0 = chunk0 + warp_row0;
        rt_fl<TILE_DIM, VT> dv;
        rt_fl<TILE_DIM, DK> dk;
        {
            rt<T, TILE_DIM, CHUNK> ds;
            {
                rt_fl<TILE_DIM, CHUNK> s, dp;
                warpgroup::mm_ABt(s, c.input.k, c.input.q);
                warpgroup::mm_ABt(dp, c.input.v, c.input.dout);
                warpgroup::mma_async_wait(s, dp);
                for_each_pair(
                    [&](pair_pos p, const float2 &sv, const float2 &dpv, T2 &ds16) {
                        const int key = key0 + p.row, query = chunk0 + p.col;
                        const float sx = scale * sv.x, sy = scale * sv.y;
                        const float dx = query >= key && key < len
                                             ? scale * fmaf(rinv[p.col], dpv.x, first * dd[p.col]) * (1.f + sx)
                                             : 0.f;
                        const float dy = query + 1 >= key && key < len
                                             ? scale * fmaf(rinv[p.col + 1], dpv.y, first * dd[p.col + 1]) * (1.f + sy)
                                             : 0.f;
                        ds16 = convert<T2>(float2{dx, dy});
                    },
                    s, dp, ds);
            }
            warpgroup::mm_AB(dk, ds, c.input.q);
            warpgroup::mma_async_wait(dk);
        }

        {
            rt<T, TILE_DIM, CHUNK> w;
            {
                rt_fl<TILE_DIM, CHUNK> s;
                warpgroup::mm_ABt(s, c.input.k, c.input.q);
                warpgroup::mma_async_wait(s);
                for_each_pair(
                    [&](pair_pos p, const float2 &sv, T2 &w16) {
                        const int key = key0 + p.row, query = chunk0 + p.col;
                        const float sx = scale * sv.x, sy = scale * sv.y;
                        const float wx = query >= key && key < len ? rinv[p.col] * fmaf(0.5f * sx, sx, 1.f + sx) : 0.f;
                        const float wy =
                            query + 1 >= key && key < len ? rinv[p.col + 1] * fmaf(0.5f * sy, sy, 1.f + sy) : 0.f;
                        w16 = convert<T2>(float2{wx, wy});
                    },
                    s, w);
            }
            warpgroup::mm_AB(dv, w, c.input.dout);
            warpgroup::mma_async_wait(dv);
        }
        // 2. Inter-chunk, from R of the later chunks: dv += sum_a Phi(K)_a image_a over the slices; dk_b += 2 k_a H_ab
        //    (quadratic) + H_b (linear), H_a = V image_a^T + RD_a.
        if (c.iter > 0 || c.g.state0 || c.g.sum0) {
#pragma unroll 1
            for (int a = 0; a < QUAD_SLICES + 1; a++) {
                rt<T, TILE_DIM, DK> a16;
                key_features(c, a16, a, chunk0);
                warpgroup::mma_AB(dv, a16, c.output.image[a]);
                rt_fl<TILE_DIM, DK> h;
                warpgroup::mm_ABt(h, c.input.v, c.output.image[a]);
                warpgroup::mma_async_wait(dv, h);
                const float *rd = c.output.rd + a * TILE_DIM;
                for_each_pair(
                    [&](pair_pos p, const float2 &hv, float2 &dkv) {
                        const float coef = a < QUAD_SLICES ? 2.f * element(c.input.k, warp_row0 + p.row, a) : 1.f;
                        dkv.x += coef * (hv.x + rd[p.col]);
                        dkv.y += coef * (hv.y + rd[p.col + 1]);
                    },
                    h, dk);
            }
            rt<T, TILE_DIM, DK> a16;
            key_features(c, a16, CONSTANT_SLICE, chunk0);
            warpgroup::mma_AB(dv, a16, c.output.image[CONSTANT_SLICE]);
            warpgroup::mma_async_wait(dv);
        }

        {
            // dv to its staging tile (the barrier in store_grad below publishes it).
            rt<T, TILE_DIM, VT> out;
            copy(out, dv);
            if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
            warpgroup::sync();
            warpgroup::store(c.output.dv_staging, out);
        }

        // 3. dk and dv out (the barriers in store_grad also end the reads of the image and RD above, and its proxy
        //    fence covers the dv staging tile written above).
        base::store_grad(c.g, c.output.staging, dk, c.task, chunk);
        if (warpgroup::laneid() == 0) {
            tma::store_async(c.g.dv, c.output.dv_staging, {c.task.b, c.task.h, chunk, c.task.split});
            tma::store_commit_group();
        }

        // 4. R^T += (rinv Phi(scale Q))^T dO per block of 64 feature rows (the 1/2 of the quadratic features folded
        //    in), then its image; RD += dD Phi(scale Q) on CUDA cores.
        const int warp = warpgroup::warpid();
#pragma unroll
        for (int m = 0; m < STATE_BLOCKS; m++) {
            const int slice = m * WARPGROUP_WARPS + warp;
            const float half_weight = slice < QUAD_SLICES ? 0.5f : 1.f;
            rt_fl<TILE_DIM, CHUNK> qf; // rows: the slice's 16 features; columns: the chunk's queries
            for_each_pair(
                [&](pair_pos p, float2 &v) {
                    v.x = half_weight * rinv[p.col] * feature(c.input.q, p.col, slice, p.row, scale, 1.f);
                    v.y = half_weight * rinv[p.col + 1] * feature(c.input.q, p.col + 1, slice, p.row, scale, 1.f);
                },
                qf);
            rt<T, TILE_DIM, CHUNK> q16;
            copy(q16, qf);
            warpgroup::mma_AB(c.state.r[m], q16, c.input.dout);
            warpgroup::mma_async_wait(c.state.r[m]);
            if (slice < SLICES) {
                rt<T, TILE_DIM, VT> image;
                copy(image, c.state.r[m]);
                store(c.output.image[slice], image);
            }
        }
        if (c.task.split == 0) {
            for (int f = warpgroup::laneid(); f < FEATURES; f += WARPGROUP_THREADS) {
                const int slice = f / TILE_DIM, col = f % TILE_DIM;
                const float half_weight = slice < QUAD_SLICES ? 0.5f : 1.f;
                float sum = 0.f;
                for (int i = 0; i < CHUNK; i++) sum += dd[i] * feature(c.input.q, i, slice, col, scale, 1.f);
                c.output.rd[f] += half_weight * sum;
            }
        }
        async_proxy_fence();
        warpgroup::sync();
    }

    // d kv0 = R and d k_sum0 = RD in the 273 layout: the quadratic features times sqrt(2) (R holds the coefficient
    // of x_a x_b, the layout's feature is x_a x_b / sqrt(2)), plus the antisymmetric part of the seed, which passes
    // to the initial state unchanged but was left out of R.
    __device__ static inline void finish(lcsf::consumer_args<based_bwd_dkv> &c) {
        const globals &g = c.g;
        const task &t = c.task;
        const int64_t head = int64_t(t.b) * g.heads + t.h;
        auto put = [&](float *out, const float *seed, int slice, int row, float x) {
            if (slice < QUAD_SLICES) {
                const int ab = 1 + DK + slice * DK + row, ba = 1 + DK + row * DK + slice;
                out[ab] = base::SQRT2 * x + (seed ? 0.5f * (seed[ab] - seed[ba]) : 0.f);
            } else if (slice == LINEAR_SLICE) {
                out[1 + row] = x;
            } else if (slice == CONSTANT_SLICE && row == 0) {
                out[0] = x;
            }
        };
        if (g.d_kv0) {
            const int warp = warpgroup::warpid();
#pragma unroll
            for (int m = 0; m < STATE_BLOCKS; m++) {
                const int slice = m * WARPGROUP_WARPS + warp;
                for_each_pair(
                    [&](pair_pos p, float2 &v) {
                        const int c0 = t.split * VT + p.col;
                        const int64_t at0 = (head * g.value_dim + c0) * STATE_FEATURES;
                        const float *seed = g.state0;
                        if (c0 < g.value_dim) put(g.d_kv0 + at0, seed ? seed + at0 : nullptr, slice, p.row, v.x);
                        if (c0 + 1 < g.value_dim)
                            put(g.d_kv0 + at0 + STATE_FEATURES, seed ? seed + at0 + STATE_FEATURES : nullptr, slice, p.row,
                                v.y);
                    },
                    c.state.r[m]);
            }
        }
        if (g.d_k_sum0 && t.split == 0) {
            float *out = g.d_k_sum0 + head * STATE_FEATURES;
            const float *seed = g.sum0 ? g.sum0 + head * STATE_FEATURES : nullptr;
            for (int f = warpgroup::laneid(); f < FEATURES; f += WARPGROUP_THREADS)
                put(out, seed, f / TILE_DIM, f % TILE_DIM, c.output.rd[f]);
        }
        // The next task's setup rewrites RD and the image.
        warpgroup::sync();
    }
};

// ---------------------------------------------------------------- the small kernels around the passes

// One warp per row: rinv = 1 / (den + eps) and dD = -rinv (dO . o) when normalizing, rinv = 1 and dD = 0 otherwise,
// both 0 on the padding rows up to chunks * 64; (batch, heads, padded len) dense.
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

template <typename T> __global__ void based_bwd_rows(const __grid_constant__ row_prep_args<T> a) {
    const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= a.rows) return;
    const int bh = int(row / a.padded_len), i = int(row - int64_t(bh) * a.padded_len);
    const int b = bh / a.heads, h = bh - b * a.heads;
    float rinv = 0.f, dd = 0.f;
    if (i < a.len) {
        rinv = 1.f;
        if (a.normalize) {
            const T *o = a.o + b * a.o_sb + h * a.o_sh + int64_t(i) * a.o_sn;
            const T *d = a.dout + b * a.d_sb + h * a.d_sh + int64_t(i) * a.d_sn;
            float dot = 0.f;
            for (int c = lane; c < a.value_dim; c += 32)
                dot += base_types::convertor<float, T>::convert(o[c]) * base_types::convertor<float, T>::convert(d[c]);
#pragma unroll
            for (int s = 16; s > 0; s /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, s);
            rinv = 1.f / (a.den[int64_t(bh) * a.len + i] + a.eps);
            dd = -rinv * dot;
        }
    }
    if (lane == 0) {
        a.rinv[row] = rinv;
        a.dd[row] = dd;
    }
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
