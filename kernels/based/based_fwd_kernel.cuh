// Based linear-attention forward on the LCSF template: o_i = num_i / (den_i + eps) (or num_i), with
// num_i = kv0 phi(scale q_i) + sum_{j <= i} w_ij v_j, den_i = k_sum0 . phi(scale q_i) + sum_{j <= i} w_ij,
// w_ij = phi(scale q_i) . phi(k_j) = 1 + s + s^2 / 2, s = scale q_i . k_j (docs/based.md: the semantics, the
// decomposition and the measurements behind the choices below).
//
// A task is one (batch, head, block of up to 64 value columns): the state is sequential along the sequence, so the
// block walks the whole sequence in chunks of 128 tokens while the producer streams each chunk's Q, K and V through
// the ring by TMA, as two 64-row halves. Two consumer warpgroups share the chunk: consumer c owns query rows
// 64c .. 64c + 63 of it, and state rows (kernel features, based_features.cuh) 0..63 and 128..159 (c = 0) or 64..127
// (c = 1).
// Per chunk, each consumer:
//  1. issues S = Q_c K_h^T for the key halves h <= c, and while the tensor cores run, builds its feature tiles in
//     shared memory with packed multiplies: Phi(Q_c) (its 64 queries x 160 features) and Phi(K)^T (its state rows x
//     the chunk's 128 keys);
//  2. intra-chunk: W = 1 + s + s^2 / 2 with s = scale S (causal mask on the diagonal half), den += row sums of W,
//     O += W V_h (A = W from registers);
//  3. waits at the chunk barrier (both consumers have written the state image of the chunk before), then adds the
//     inter-chunk terms: O += Phi(Q_c) image, den += Phi(Q_c) sum_image (K = 160). The images hold the state times
//     each feature's weight, so the query features need none;
//  4. stores O (divided by den + eps when normalizing) through one TMA store of its 64 rows;
//  5. updates its state rows: kv^T += Phi(K)^T V (fp32 accumulators in registers) and the feature sums against a
//     tile of ones, then writes its rows of the 16-bit images, double-buffered by chunk parity so that the one
//     barrier per chunk orders writers and readers.
// Ragged length: TMA zero-fills Q, K, V rows past the end, so the quadratic and linear features and v of a padded
// token are zero; its constant feature is masked explicitly. Rows past the end are computed and never stored.
#pragma once

#include "based.h"
#include "based_configs.cuh"
#include "based_features.cuh"
#include "based_rows_out.cuh"
#include "kittens.cuh"

namespace tk_based {
using namespace kittens;

template <typename T, int DVT> struct based_fwd : feature_tiles<T>, lcsf_numbers<CHUNKED_FORWARD> {
    static_assert(DVT % 16 == 0 && DVT >= 16 && DVT <= CHUNKED_MAX_VALUE_COLUMNS,
                  "Based forward: a task's value block is 16..64 columns");
    static constexpr int DK = FEATURE_DIM;
    static constexpr int DV_BLOCK = DVT;                        // value columns per task
    static constexpr int HALF = CHUNKED_FORWARD.consumer_rows; // query rows per consumer
    static constexpr int CHUNK = CHUNKED_FORWARD.block_rows(); // tokens per chunk

    static constexpr int FEATURES = KERNEL_FEATURES;
    using features = feature_tiles<T>;
    using typename features::T2;
    using features::to_pair;
    // State rows per consumer, in blocks of 64 (one wgmma row slab): consumer 0 rows 0..63 and 128..191 (two blocks,
    // of which rows 160.. are padding), consumer 1 rows 64..127. Consumer 1 has the larger intra-chunk share (two key
    // halves), which this balances; each consumer builds the key features of its own rows.
    static constexpr int STATE_BLOCKS = 2;
    static constexpr int STATE_ROWS = 3 * HALF;

    using qk_tile = st<T, HALF, DK>;
    using v_tile = st<T, HALF, DVT>;
    using q_features_tile = st<T, HALF, FEATURES>; // Phi(Q): queries x features (K-major A)
    using k_features_tile = st<T, HALF, CHUNK>;    // Phi(K)^T: 64 state rows x the chunk's keys (K-major A)
    using image_tile = st<T, FEATURES, DVT>;
    using sum_image_tile = st<T, FEATURES, TILE_DIM>;
    using ones_tile = st<T, HALF, TILE_DIM>;
    using qk_gl = gl<T, -1, -1, -1, DK, qk_tile>;
    using v_gl = gl<T, -1, -1, -1, -1, v_tile>;

    struct globals {
        qk_gl q, k;
        v_gl v, o;
        int heads, len, chunks, value_dim, value_blocks, num_tasks;
        float scale, eps;
        int normalize;
        const float *kv0, *k_sum0;     // initial state or null
        float *kv_final, *k_sum_final; // final state or null
        float *den;                    // (B, H, N) or null
    };
    struct input_block {
        qk_tile q[2], k[2]; // the chunk's two halves
        v_tile v[2];
    };
    struct output_block {
        k_features_tile k_features[3];       // state rows 0..63, 64..127, 128..191
        q_features_tile q_features[NUM_CONSUMERS];
        image_tile image[2];                 // the weighted state in 16 bits, by chunk parity
        sum_image_tile sum_image[2];         // the weighted feature sums, every column equal, likewise
        ones_tile ones[NUM_CONSUMERS];       // B operand of the feature sums
        v_tile staging[NUM_CONSUMERS];       // O on its way to the TMA store
        float k_sum[STATE_ROWS];             // fp32 running feature sums
        float row_weight[STATE_ROWS];        // feature_weight of each state row, written at setup
    };
    struct consumer_state {
        rt_fl<TILE_DIM, DVT> kv[STATE_BLOCKS]; // warp w of block m: state rows row0(c, m) + 16w .. +15, x DVT
    };
    struct task {
        int b, h, vb, iters;
    };

    // Named barrier of the two consumers (ids 1 .. 3 are the warpgroups' own, warpgroup::sync()).
    static constexpr int CONSUMERS_BARRIER = 4;
    __device__ static inline void consumers_sync() {
        named_barrier_sync<NUM_CONSUMERS * WARPGROUP_THREADS>(CONSUMERS_BARRIER);
    }

    __device__ static inline int blocks_of(int consumer) { return consumer == 0 ? 2 : 1; }
    __device__ static inline int block_row0(int consumer, int m) { return consumer == 0 ? 2 * HALF * m : HALF; }
    __device__ static inline k_features_tile &k_features(typename based_fwd::output_block &out, int consumer, int m) {
        return out.k_features[block_row0(consumer, m) / HALF];
    }

    __device__ static inline bool get_task(const globals &g, int id, task &t) {
        if (id >= g.num_tasks) return false;
        t.vb = id % g.value_blocks;
        const int bh = id / g.value_blocks;
        t.b = bh / g.heads;
        t.h = bh - t.b * g.heads;
        t.iters = g.chunks;
        return true;
    }

    __device__ static inline void load(lcsf::producer_args<based_fwd> &p) {
        tma::expect<qk_tile, qk_tile, qk_tile, qk_tile, v_tile, v_tile>(p.arrived);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int rows = 2 * p.iter + h; // in units of HALF
            tma::load_async(p.input.q[h], p.g.q, {p.task.b, p.task.h, rows, 0}, p.arrived);
            tma::load_async(p.input.k[h], p.g.k, {p.task.b, p.task.h, rows, 0}, p.arrived);
            tma::load_async(p.input.v[h], p.g.v, {p.task.b, p.task.h, rows, p.task.vb}, p.arrived);
        }
    }

    // ---------------------------------------------------------------- feature tiles

    // This consumer's feature tiles for the chunk: Phi(Q) two threads per query, Phi(K)^T two threads per key pair.
    __device__ static inline void build_features(lcsf::consumer_args<based_fwd> &c) {
        const int t = warpgroup::laneid(), me = c.consumer;
        const int query = t / 2;
        if (t % 2 == 0) features::template build_row_features<0, FEATURES / 2>(c.output.q_features[me], c.input.q[me], query);
        else features::template build_row_features<FEATURES / 2, FEATURES / 2>(c.output.q_features[me], c.input.q[me], query);
        const int p = t % (CHUNK / 2), part = t / (CHUNK / 2);
        const int key = c.iter * CHUNK + 2 * p;
        const bool v0 = key < c.g.len, v1 = key + 1 < c.g.len;
        // The constant feature of keys past the end is masked.
        const auto ones = [&] { return to_pair(v0 ? 1.f : 0.f, v1 ? 1.f : 0.f); };
        const auto tile_of = [&]<int F>() -> k_features_tile & { return c.output.k_features[F / HALF]; };
        // 96 rows (0..63, 128..159; 160..191 stay zero from setup) or 64 rows (64..127), half per thread.
        constexpr int TAIL = FEATURES - 2 * HALF;
        if (me == 0) {
            if (part == 0) {
                features::template build_pair_features<0, HALF - TAIL / 2>(tile_of, c.input.k, p, ones);
            } else {
                features::template build_pair_features<HALF - TAIL / 2, TAIL / 2>(tile_of, c.input.k, p, ones);
                features::template build_pair_features<2 * HALF, TAIL>(tile_of, c.input.k, p, ones);
            }
        } else {
            if (part == 0) features::template build_pair_features<HALF, HALF / 2>(tile_of, c.input.k, p, ones);
            else features::template build_pair_features<3 * HALF / 2, HALF / 2>(tile_of, c.input.k, p, ones);
        }
        async_proxy_fence(); // read by wgmma (the async proxy) after the consumer's barrier
    }

    // ---------------------------------------------------------------- state images

    // This warp's 16 rows of state block m into image buffer `parity`: the fp32 state times each row's weight in 16
    // bits, and the weighted feature sums (from shared k_sum) in every column of the sum image.
    __device__ static inline void write_image(lcsf::consumer_args<based_fwd> &c, int m, int parity) {
        const int row0 = block_row0(c.consumer, m) + warpgroup::warp_row0();
        if (row0 >= FEATURES) return;
        float weight[2];
#pragma unroll
        for (int r = 0; r < 2; r++) weight[r] = c.output.row_weight[row0 + lane_row(0, r)];
        rt<T, TILE_DIM, DVT> image;
        for_each_pair([&](pair_pos p, const float2 &s, T2 &d) { d = to_pair(weight[p.half] * s.x, weight[p.half] * s.y); },
                      c.state.kv[m], image);
        store(c.output.image[parity], image, row0, 0);
        rt<T, TILE_DIM, TILE_DIM> sums;
        for_each_pair([&](pair_pos p, T2 &d) {
            const float x = weight[p.half] * c.output.k_sum[row0 + p.row];
            d = to_pair(x, x);
        }, sums);
        store(c.output.sum_image[parity], sums, row0, 0);
    }

    __device__ static inline void setup(lcsf::consumer_args<based_fwd> &c) {
        const globals &g = c.g;
        const int me = c.consumer;
        // The previous task's last chunk may still be reading the images this rewrites.
        consumers_sync();
        const size_t head = size_t(c.task.b) * g.heads + c.task.h;
        const int col0 = c.task.vb * DVT;
#pragma unroll
        for (int m = 0; m < STATE_BLOCKS; m++) {
            load_state_rows(c.state.kv[m], g.kv0, head, g.value_dim, col0, block_row0(me, m) + warpgroup::warp_row0(),
                            from_state);
        }
        // This consumer's feature sums, one thread per state row.
        for (int i = warpgroup::laneid(); i < blocks_of(me) * HALF; i += WARPGROUP_THREADS) {
            const int row = block_row0(me, i / HALF) + i % HALF;
            const feature_def d = feature_at(row);
            c.output.k_sum[row] = g.k_sum0 ? from_state(d, g.k_sum0 + head * STATE_FEATURES) : 0.f;
            c.output.row_weight[row] = feature_weight(d, g.scale);
        }
        // The ones of the feature sums, and the padding rows of consumer 0's last key features (never rebuilt).
        rt<T, TILE_DIM, TILE_DIM> one, zero;
        for_each_pair([&](pair_pos, T2 &a, T2 &b) {
            a = to_pair(1.f, 1.f);
            b = to_pair(0.f, 0.f);
        }, one, zero);
        const int warp_row0 = warpgroup::warp_row0();
        store(c.output.ones[me], one, warp_row0, 0);
        if (me == 0 && warp_row0 >= FEATURES - 2 * HALF) {
#pragma unroll
            for (int j = 0; j < CHUNK / TILE_DIM; j++) store(c.output.k_features[2], zero, warp_row0, j * TILE_DIM);
        }
        warpgroup::sync(); // k_sum and row_weight rows written by other warps of this consumer
        // The state before the first chunk is image buffer 1 (chunk -1's parity).
        if (g.kv0) {
#pragma unroll
            for (int m = 0; m < STATE_BLOCKS; m++)
                if (m < blocks_of(me)) write_image(c, m, 1);
        }
        async_proxy_fence(); // the images, ones and zeros are read by wgmma (the async proxy)
    }

    __device__ static inline void compute(lcsf::consumer_args<based_fwd> &c) {
        const globals &g = c.g;
        const int me = c.consumer;
        const int chunk0 = c.iter * CHUNK;
        const float scale = g.scale;
        const int warp_row0 = warpgroup::warp_row0(); // this warp's first query row among the consumer's 64
        float den[2] = {0.f, 0.f};                    // this lane's share of its two rows' den

        // 1-2. The feature tiles; intra-chunk: S = Q K_h^T, W = 1 + s + s^2 / 2 (masked on the diagonal half),
        // O += W V_h.
        build_features(c);
        rt_fl<TILE_DIM, DVT> o;
#pragma unroll
        for (int h = 0; h < NUM_CONSUMERS; h++) {
            if (h > me) break;
            rt_fl<TILE_DIM, HALF> s;
            warpgroup::mm_ABt(s, c.input.q[me], c.input.k[h]);
            warpgroup::mma_async_wait(s);
            const bool diagonal = h == me;
            for_each_pair([&](pair_pos p, float2 &v) {
                const int row = warp_row0 + p.row; // both relative to the half
                const float sx = scale * v.x, sy = scale * v.y;
                v.x = !diagonal || p.col <= row ? fmaf(0.5f * sx, sx, 1.f + sx) : 0.f;
                v.y = !diagonal || p.col + 1 <= row ? fmaf(0.5f * sy, sy, 1.f + sy) : 0.f;
                den[p.half] += v.x + v.y;
            }, s);
            rt<T, TILE_DIM, HALF> w;
            copy(w, s);
            if (h == 0) warpgroup::mm_AB(o, w, c.input.v[h]);
            else warpgroup::mma_AB(o, w, c.input.v[h]);
            warpgroup::mma_async_wait(o);
        }
#pragma unroll
        for (int r = 0; r < 2; r++) den[r] = row_lanes_sum(den[r]);

        // 3. Inter-chunk: O += Phi(Q) image, den += Phi(Q) sum_image. The images of the previous chunk (parity
        // iter - 1) are complete once both consumers pass the barrier, which also publishes this chunk's features.
        consumers_sync();
        if (c.iter > 0 || g.kv0) {
            const int parity = (c.iter + 1) & 1;
            rt_fl<TILE_DIM, TILE_DIM> den_inter;
            // Chained: the last W V product on o may still run (pinning o would make ptxas serialize every wgmma).
            warpgroup::mma_AB(o, c.output.q_features[me], c.output.image[parity], wgmma::chained);
            warpgroup::mm_AB(den_inter, c.output.q_features[me], c.output.sum_image[parity]);
            warpgroup::mma_async_wait(o, den_inter);
            // Every column of den_inter holds the row's value: take this lane's first one.
            for_each_pair([&](pair_pos p, const float2 &d) {
                if (p.j == 0 && p.k < 2) den[p.half] += d.x;
            }, den_inter);
        } else {
            warpgroup::mma_async_wait(o);
        }

        // 4. The output (and den for the backward); rows past the end are clipped by the store and never written.
        const int rows0 = chunk0 + me * HALF; // this consumer's first row in the sequence
        finish_rows(o, den, c.task.vb == 0 ? g.den : nullptr, (size_t(c.task.b) * g.heads + c.task.h) * g.len,
                    rows0 + warp_row0, g.len, g.normalize, g.eps);
        if (rows0 < g.len) {
            rt<T, TILE_DIM, DVT> out;
            copy(out, o);
            // The previous chunk's store must have finished reading the staging tile.
            if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
            warpgroup::sync();
            warpgroup::store(c.output.staging[me], out);
            async_proxy_fence();
            warpgroup::sync();
            if (warpgroup::laneid() == 0) {
                tma::store_async(g.o, c.output.staging[me], {c.task.b, c.task.h, 2 * c.iter + me, c.task.vb});
                tma::store_commit_group();
            }
        }

        // 5. State update: kv^T += Phi(K)^T V and the feature sums, per block of 64 state rows, then the images.
        const int parity = c.iter & 1;
#pragma unroll
        for (int m = 0; m < STATE_BLOCKS; m++) {
            if (m >= blocks_of(me)) break;
            k_features_tile &kf = k_features(c.output, me, m);
            rt_fl<TILE_DIM, TILE_DIM> sums;
            warpgroup::mma_AB(c.state.kv[m], kf.template chunk<0>(), c.input.v[0]);
            warpgroup::mma_AB(c.state.kv[m], kf.template chunk<1>(), c.input.v[1], wgmma::chained);
            warpgroup::mm_AB(sums, kf.template chunk<0>(), c.output.ones[me]);
            warpgroup::mma_AB(sums, kf.template chunk<1>(), c.output.ones[me], wgmma::chained);
            warpgroup::mma_async_wait(c.state.kv[m], sums);
            // Every column of `sums` is the row's feature sum over the chunk: the lane holding column 0 adds it.
            const int row0 = block_row0(me, m) + warp_row0;
            for_each_pair([&](pair_pos p, const float2 &d) {
                if (p.col == 0) c.output.k_sum[row0 + p.row] += d.x;
            }, sums);
            __syncwarp();
            write_image(c, m, parity);
        }
        // The next chunk's wgmmas read the images through the async proxy (ordered by that chunk's barrier).
        async_proxy_fence();
    }

    // The final state, if asked for: the fp32 accumulators and sums in the exchanged layout.
    __device__ static inline void finish(lcsf::consumer_args<based_fwd> &c) {
        const globals &g = c.g;
        if (!g.kv_final) return;
        const int me = c.consumer;
        const size_t head = size_t(c.task.b) * g.heads + c.task.h;
        const int col0 = c.task.vb * DVT;
#pragma unroll
        for (int m = 0; m < STATE_BLOCKS; m++) {
            if (m >= blocks_of(me)) break;
            const int row0 = block_row0(me, m) + warpgroup::warp_row0();
            for_each_pair([&](pair_pos p, const float2 &s) {
                const feature_def d = feature_at(row0 + p.row);
                float *dst = g.kv_final + (head * g.value_dim + col0 + p.col) * STATE_FEATURES;
                if (col0 + p.col < g.value_dim) to_state(d, s.x, dst);
                if (col0 + p.col + 1 < g.value_dim) to_state(d, s.y, dst + STATE_FEATURES);
            }, c.state.kv[m]);
        }
        if (c.task.vb == 0) {
            warpgroup::sync(); // the last chunk's k_sum rows were added by the warps that own them
            for (int i = warpgroup::laneid(); i < blocks_of(me) * HALF; i += WARPGROUP_THREADS) {
                const int row = block_row0(me, i / HALF) + i % HALF;
                to_state(feature_at(row), c.output.k_sum[row], g.k_sum_final + head * STATE_FEATURES);
            }
        }
    }
};

} // namespace tk_based
