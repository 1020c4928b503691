// Based linear-attention forward on the LCSF template: o_i = num_i / (den_i + eps) (or num_i), with
// num_i = sum_{j <= i} w_ij v_j, den_i = sum_{j <= i} w_ij, w_ij = phi(scale q_i) . phi(k_j) = 1 + s + s^2 / 2,
// s = scale q_i . k_j (docs/based.md has the semantics and the plan this kernel follows).
//
// A task is one (batch, head): the state is sequential along the sequence, so one consumer warpgroup walks the
// whole sequence chunk by chunk while the producer streams each chunk's Q, K (CHUNK x 16) and V (CHUNK x DV) tiles
// through the ring by TMA. Per chunk, warp w of the consumer owns query rows 16w .. 16w + 15:
//  1. intra-chunk, on tensor cores: S = Q K^T (wgmma, one k-step of 16), W = 1 + s + s^2 / 2 with s = scale S,
//     masked to keys j <= i that lie inside the sequence; den += row sums of W; O = W V (wgmma, A = W in 16 bits
//     from registers, as the attention forward's P V);
//  2. inter-chunk, from the state of the earlier chunks, as SLICES wgmmas of one k-step each: O += A_a image_a,
//     where A_a (16 features of every query row) is built in registers from the Q tile and image_a is a 16 x DV
//     slice of the state's 16-bit copy in shared memory. Slice a < 16 holds sum_j k_ja k_j v_j^T (the quadratic
//     features k_a k_b, without the 1/sqrt(2): the 1/2 is put into A_a = q_a q / 2 instead), slice 16 the linear
//     features (sum_j k_j v_j^T), slice 17 the constant feature in its first row (sum_j v_j). den gets the same
//     A_a times k_sum, the fp32 sum of the keys' features, on CUDA cores;
//  3. O (divided by den + eps when normalizing) goes out through one TMA store, which clips rows past the end;
//  4. state update on tensor cores: state^T += Phi(K)^T V, the fp32 accumulator (SLICES * 16 feature rows,
//     padded to STATE_BLOCKS blocks of 64) in the consumer's registers, Phi(K)^T built in registers from the K
//     tile; then the 16-bit image and k_sum (on CUDA cores) for the next chunk.
// Ragged length: TMA zero-fills Q, K, V rows past the end, so the quadratic and linear features and v of a padded
// key are zero; its constant feature and its W entries are masked explicitly, so nothing padded reaches the state,
// k_sum or den.
//
// Simplifications of this first version (correct for any length; speed comes later): one consumer warpgroup, so
// a block runs one sequence at a time and nothing overlaps its CUDA-core work; every wgmma is waited at once; the
// quadratic features use all 16 x 16 products (not the 136 distinct ones); A operands are built from single
// elements of the swizzled shared tiles; the constant and linear features ride the tensor cores as extra 16-row
// slices (the last state block is mostly padding). DV is one of based.h's VALUE_DIMS (the fp32 state takes
// 5 x DV / 2 registers per thread, so 64 is the largest that fits one warpgroup).
#pragma once

#include "based.h"
#include "kittens.cuh"

namespace tk_based {
using namespace kittens;

template <typename T, int DV> struct based_fwd {
    static_assert(supported_value_dim(DV), "Based forward: DV must be one of based.h's VALUE_DIMS");
    static constexpr int DK = FEATURE_DIM;
    static constexpr int CHUNK = 64; // tokens per chunk: one wgmma row slab
    static constexpr int NUM_CONSUMERS = 1;
    static constexpr int INPUT_STAGES = 4;
    // One consumer and a producer: 256 threads, whose launch pool is the whole register file. The consumer takes
    // the most a thread may hold, for the fp32 state next to O and S (at 240, ptxas spilled at DV = 64).
    static constexpr int PRODUCER_REGISTERS = 24, CONSUMER_REGISTERS = 256;

    // Feature slices of 16 (docs/based.md's phi, reordered): DK quadratic slices, one linear, one constant.
    static constexpr int QUAD_SLICES = DK, LINEAR_SLICE = DK, CONSTANT_SLICE = DK + 1, SLICES = DK + 2;
    static constexpr int FEATURES = SLICES * TILE_DIM; // padded feature rows of the state
    // The fp32 state as wgmma accumulators: block m holds slices 4m .. 4m + 3, one per warp.
    static constexpr int STATE_BLOCKS = (SLICES + WARPGROUP_WARPS - 1) / WARPGROUP_WARPS;

    using qk_tile = st<T, CHUNK, DK>;
    using v_tile = st<T, CHUNK, DV>;
    using slice_tile = st<T, TILE_DIM, DV>;
    using qk_gl = gl<T, -1, -1, -1, DK, qk_tile>;
    using v_gl = gl<T, -1, -1, -1, DV, v_tile>;

    struct globals {
        qk_gl q, k;
        v_gl v, o;
        int heads, len, chunks, num_tasks;
        float scale, eps;
        int normalize;
    };
    struct input_block {
        qk_tile q, k;
        v_tile v;
    };
    struct output_block {
        slice_tile image[SLICES]; // the state in 16 bits: the inter-chunk product's B operand
        v_tile staging;           // O on its way to the TMA store
        float k_sum[FEATURES];    // fp32 sum of the features of every key so far, in the slices' order
    };
    struct consumer_state {
        rt_fl<TILE_DIM, DV> kv[STATE_BLOCKS]; // warp w of block m: feature slice 4m + w (rows) x DV
    };
    struct task {
        int b, h, iters;
    };

    __device__ static inline bool get_task(const globals &g, int id, task &t) {
        if (id >= g.num_tasks) return false;
        t.b = id / g.heads;
        t.h = id - t.b * g.heads;
        t.iters = g.chunks;
        return true;
    }

    __device__ static inline void load(lcsf::producer_args<based_fwd> &p) {
        tma::expect<qk_tile, qk_tile, v_tile>(p.arrived);
        tma::load_async(p.input.q, p.g.q, {p.task.b, p.task.h, p.iter, 0}, p.arrived);
        tma::load_async(p.input.k, p.g.k, {p.task.b, p.task.h, p.iter, 0}, p.arrived);
        tma::load_async(p.input.v, p.g.v, {p.task.b, p.task.h, p.iter, 0}, p.arrived);
    }

    __device__ static inline float element(const qk_tile &t, int row, int col) {
        return base_types::convertor<float, T>::convert(t(row, col));
    }

    // Feature (slice, column) of row `row` of a Q or K tile, x = f * that row: the quadratic slices give
    // x_slice x_col (times f twice), the linear slice x_col, the constant slice `one` in column 0, padding 0.
    __device__ static inline float feature(const qk_tile &t, int row, int slice, int col, float f, float one) {
        if (slice < QUAD_SLICES) return f * f * element(t, row, slice) * element(t, row, col);
        if (slice == LINEAR_SLICE) return f * element(t, row, col);
        if (slice == CONSTANT_SLICE) return col == 0 ? one : 0.f;
        return 0.f;
    }

    __device__ static inline void setup(lcsf::consumer_args<based_fwd> &c) {
#pragma unroll
        for (int m = 0; m < STATE_BLOCKS; m++) zero(c.state.kv[m]);
        for (int f = warpgroup::laneid(); f < FEATURES; f += WARPGROUP_THREADS) c.output.k_sum[f] = 0.f;
        warpgroup::sync();
    }

    __device__ static inline void compute(lcsf::consumer_args<based_fwd> &c) {
        const int chunk0 = c.iter * CHUNK;
        const int len = c.g.len;
        const float scale = c.g.scale;
        const int warp_row0 = warpgroup::warp_row0(); // this warp's first query row in the chunk
        float den[2] = {0.f, 0.f};                    // this lane's share of its two rows' den

        // 1. Intra-chunk: S = Q K^T, W = 1 + s + s^2 / 2 masked, O = W V.
        rt_fl<TILE_DIM, DV> o;
        {
            rt_fl<TILE_DIM, CHUNK> s;
            warpgroup::mm_ABt(s, c.input.q, c.input.k);
            warpgroup::mma_async_wait(s);
            for_each_pair(
                [&](pair_pos p, float2 &v) {
                    const int row = chunk0 + warp_row0 + p.row, key = chunk0 + p.col;
                    const float sx = scale * v.x, sy = scale * v.y;
                    v.x = key <= row && key < len ? fmaf(0.5f * sx, sx, 1.f + sx) : 0.f;
                    v.y = key + 1 <= row && key + 1 < len ? fmaf(0.5f * sy, sy, 1.f + sy) : 0.f;
                    den[p.half] += v.x + v.y;
                },
                s);
            rt<T, TILE_DIM, CHUNK> w;
            copy(w, s);
            warpgroup::mm_AB(o, w, c.input.v);
            warpgroup::mma_async_wait(o);
        }

        // 2. Inter-chunk: O += A_a image_a for every feature slice a, den += A_a k_sum_a.
        if (c.iter > 0) {
#pragma unroll 1
            for (int a = 0; a < SLICES; a++) {
                rt_fl<TILE_DIM, TILE_DIM> af;
                const float half_weight = a < QUAD_SLICES ? 0.5f : 1.f; // (q.k)^2 / 2
                const float *k_sum = c.output.k_sum + a * TILE_DIM;
                for_each_pair(
                    [&](pair_pos p, float2 &v) {
                        const int row = warp_row0 + p.row;
                        v.x = half_weight * feature(c.input.q, row, a, p.col, scale, 1.f);
                        v.y = half_weight * feature(c.input.q, row, a, p.col + 1, scale, 1.f);
                        den[p.half] += v.x * k_sum[p.col] + v.y * k_sum[p.col + 1];
                    },
                    af);
                rt<T, TILE_DIM, TILE_DIM> a16;
                copy(a16, af);
                warpgroup::mma_AB(o, a16, c.output.image[a]);
                warpgroup::mma_async_wait(o);
            }
        }

        // 3. The output. When normalizing, each row's den is combined over the four lanes that hold it.
        if (c.g.normalize) {
            float inv[2];
#pragma unroll
            for (int r = 0; r < 2; r++) inv[r] = 1.f / (row_lanes_sum(den[r]) + c.g.eps);
            for_each_pair(
                [&](pair_pos p, float2 &v) {
                    v.x *= inv[p.half];
                    v.y *= inv[p.half];
                },
                o);
        }
        {
            rt<T, TILE_DIM, DV> out;
            copy(out, o);
            // The previous chunk's store must have read the staging tile; this barrier also ends every warp's reads
            // of the image and k_sum (step 2) before step 4 rewrites them.
            if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
            warpgroup::sync();
            warpgroup::store(c.output.staging, out);
            async_proxy_fence();
            warpgroup::sync();
            if (warpgroup::laneid() == 0) {
                tma::store_async(c.g.o, c.output.staging, {c.task.b, c.task.h, c.iter, 0});
                tma::store_commit_group();
            }
        }

        // 4. State update: state^T += Phi(K)^T V per block of 64 feature rows, then its 16-bit image.
        const int warp = warpgroup::warpid();
#pragma unroll
        for (int m = 0; m < STATE_BLOCKS; m++) {
            const int slice = m * WARPGROUP_WARPS + warp;
            rt_fl<TILE_DIM, CHUNK> kf; // rows: the slice's 16 features; columns: the chunk's keys
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
                rt<T, TILE_DIM, DV> image;
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
        // The next chunk's wgmmas read the image through the async proxy.
        async_proxy_fence();
        warpgroup::sync();
    }

    __device__ static inline void finish(lcsf::consumer_args<based_fwd> &) {}
};

} // namespace tk_based
