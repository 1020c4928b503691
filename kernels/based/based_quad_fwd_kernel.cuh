// Based forward in quadratic form, for sequences short enough that the N x N pair weights cost less than the
// 160-feature state (docs/based.md, "Two algorithms"): o_i = sum_{j <= i} w_ij v_j / (sum_{j <= i} w_ij + eps), with
// w_ij = 1 + s + s^2 / 2, s = scale q_i . k_j, computed like attention without the softmax's running maximum
// (w >= 1/2 needs no rescaling). No state enters or leaves: the caller takes the chunked kernel
// (based_fwd_kernel.cuh) when one does.
//
// A task is one block of 128 query rows of one (batch, head); consumer c owns rows 64c .. 64c + 63. The producer
// streams the head's key tiles 0 .. block (128 keys each, K and V) through the ring; the block's Q rides along with
// its first tile, and each consumer keeps its 64 x 16 rows in registers as the A operand of S = Q K^T. Per tile, in
// two halves of 64 keys: S of both halves (wgmma, K = 16), then per half W in registers (two FMAs per element, the
// row sums into den, the causal mask on the diagonal tile only) and O += W V (A = W from registers), the second half's
// W computed while the first half's product runs. Consumer 0 sees only the first half of its diagonal tile. At the
// end O / (den + eps) (or O) leaves through one TMA store of the consumer's 64 rows, and den (without eps) is written
// for the backward when asked for.
// Ragged length: TMA zero-fills rows past the end; a padded key is later than every real query, so the causal mask
// hides it, and padded query rows are never stored.
#pragma once

#include "based.h"
#include "based_configs.cuh"
#include "based_quad_common.cuh"
#include "based_rows_out.cuh"
#include "kittens.cuh"

namespace tk_based {
using namespace kittens;

template <typename T, int DV> struct based_quad_fwd : lcsf_numbers<QUADRATIC_FORWARD> {
    static_assert(DV == 64 || DV == 128, "Based quadratic forward: value tiles of 64 or 128 columns");
    static constexpr int DK = FEATURE_DIM;
    static constexpr int HALF = QUADRATIC_FORWARD.consumer_rows; // query rows per consumer
    static constexpr int BLOCK = QUAD_BLOCK;

    using qk_tile = st<T, BLOCK, DK>;
    using v_half = st<T, HALF, DV>; // a key tile's values in two halves, each the B operand of one half's product
    using out_tile = st<T, HALF, DV>;
    using qk_gl = gl<T, -1, -1, -1, DK, qk_tile>;
    using v_gl = gl<T, -1, -1, -1, -1, v_half>;

    struct globals {
        qk_gl q, k;
        v_gl v, o;
        float *den; // (B, H, N) or null
        int heads, len, blocks, num_tasks; // blocks: query blocks (and key tiles) per head
        float scale, eps;
        int normalize;
        int heads_per_group; // quad_task_at
        int *task_counter;   // LCSF's dynamic schedule: 2 ints, zero at launch and left zero
    };
    struct input_block {
        qk_tile k;
        v_half v[2];
        qk_tile q; // the task's query rows: loaded with its first key tile only
    };
    struct output_block {
        out_tile staging[NUM_CONSUMERS];
    };
    struct consumer_state {
        rt<T, TILE_DIM, DK> q; // this warp's 16 query rows
        rt_fl<TILE_DIM, DV> o;
        float den[2]; // this lane's share of its two rows' den
    };
    struct task {
        int b, h, block, iters;
    };

    static constexpr bool DYNAMIC_TASKS = true;
    // The last block of a head is the heaviest (it sees every key tile).
    __device__ static inline bool get_task(const globals &g, int id, task &t) {
        if (id >= g.num_tasks) return false;
        const quad_task_place at = quad_task_at(id, g.blocks, g.num_tasks / g.blocks, g.heads_per_group);
        t.block = g.blocks - 1 - at.rank;
        t.b = at.bh / g.heads;
        t.h = at.bh - t.b * g.heads;
        t.iters = t.block + 1;
        return true;
    }

    __device__ static inline void load(lcsf::producer_args<based_quad_fwd> &p) {
        const bool first = p.iter == 0;
        constexpr uint32_t TILE_BYTES = tma::transfer_bytes<qk_tile>::value + 2 * tma::transfer_bytes<v_half>::value;
        tma::expect_bytes(p.arrived, TILE_BYTES + (first ? tma::transfer_bytes<qk_tile>::value : 0u));
        tma::load_async(p.input.k, p.g.k, {p.task.b, p.task.h, p.iter, 0}, p.arrived);
#pragma unroll
        for (int h = 0; h < 2; h++) tma::load_async(p.input.v[h], p.g.v, {p.task.b, p.task.h, 2 * p.iter + h, 0}, p.arrived);
        if (first) tma::load_async(p.input.q, p.g.q, {p.task.b, p.task.h, p.task.block, 0}, p.arrived);
    }

    __device__ static inline void setup(lcsf::consumer_args<based_quad_fwd> &c) {
        zero(c.state.o);
        c.state.den[0] = c.state.den[1] = 0.f;
    }

    // One key half's weights W = w(S) in 16 bits, masked to the causal triangle where MASKED (the half and this
    // consumer's rows then start at the same position; warp_row0 is this warp's first row there), and their fp32 row
    // sums into den. (Summing the 16-bit weights instead, so that numerator and den see the same W, cost 15 % of the
    // forward: docs/based.md.)
    template <bool MASKED>
    __device__ static inline void weights(rt_fl<TILE_DIM, HALF> &s, rt<T, TILE_DIM, HALF> &w16, float (&den)[2],
                                          const pair_weight_of &w, int warp_row0) {
        using T2 = typename base_types::packing<T>::packed_type;
        for_each_pair([&](pair_pos p, const float2 &v, T2 &out) {
            float x = w(v.x), y = w(v.y);
            if constexpr (MASKED) {
                const int row = warp_row0 + p.row;
                x = p.col <= row ? x : 0.f;
                y = p.col + 1 <= row ? y : 0.f;
            }
            out = base_types::convertor<T2, float2>::convert(float2{x, y});
            den[p.half] += x + y;
        }, s, w16);
    }

    // Both key halves of a tile (the second masked on the diagonal tile of consumer 1). S of both halves is issued at
    // once, and the second half's weights are computed while the first half's O product runs.
    template <bool MASK_SECOND> __device__ static inline void both_halves(lcsf::consumer_args<based_quad_fwd> &c) {
        const pair_weight_of w(c.g.scale);
        rt_fl<TILE_DIM, HALF> s0, s1;
        warpgroup::mm_ABt(s0, c.state.q, c.input.k.template row_block<HALF>(0));
        warpgroup::mm_ABt(s1, c.state.q, c.input.k.template row_block<HALF>(1));
        warpgroup::mma_async_wait<1>(s0);
        rt<T, TILE_DIM, HALF> w0, w1;
        weights<false>(s0, w0, c.state.den, w, 0);
        warpgroup::mma_AB(c.state.o, w0, c.input.v[0]);
        warpgroup::mma_async_wait<1>(s1); // S1 done; the O product of half 0 may still run
        weights<MASK_SECOND>(s1, w1, c.state.den, w, warpgroup::warp_row0());
        // O must be complete before the next product on it is issued (a product in flight on an accumulator that
        // another wgmma names makes ptxas serialise every wgmma of the kernel).
        warpgroup::mma_async_wait(c.state.o);
        warpgroup::mma_AB(c.state.o, w1, c.input.v[1]);
        warpgroup::mma_async_wait(c.state.o);
    }

    // Consumer 0's diagonal tile: only the first key half, masked.
    __device__ static inline void first_half_masked(lcsf::consumer_args<based_quad_fwd> &c) {
        rt_fl<TILE_DIM, HALF> s0;
        warpgroup::mm_ABt(s0, c.state.q, c.input.k.template row_block<HALF>(0));
        warpgroup::mma_async_wait(s0);
        rt<T, TILE_DIM, HALF> w0;
        weights<true>(s0, w0, c.state.den, pair_weight_of(c.g.scale), warpgroup::warp_row0());
        warpgroup::mma_AB(c.state.o, w0, c.input.v[0]);
        warpgroup::mma_async_wait(c.state.o);
    }

    __device__ static inline void compute(lcsf::consumer_args<based_quad_fwd> &c) {
        const int me = c.consumer;
        if (c.iter == 0) warpgroup::load(c.state.q, c.input.q.template row_block<HALF>(me));
        if (c.iter < c.task.block) both_halves<false>(c);
        else if (me == 1) both_halves<true>(c);
        else first_half_masked(c);
    }

    __device__ static inline void finish(lcsf::consumer_args<based_quad_fwd> &c) {
        const globals &g = c.g;
        const int me = c.consumer;
        const int rows0 = c.task.block * BLOCK + me * HALF; // this consumer's first row in the sequence
        float den[2];
#pragma unroll
        for (int r = 0; r < 2; r++) den[r] = row_lanes_sum(c.state.den[r]);
        finish_rows(c.state.o, den, g.den, (size_t(c.task.b) * g.heads + c.task.h) * g.len, rows0 + warpgroup::warp_row0(),
                    g.len, g.normalize, g.eps);
        if (rows0 >= g.len) return; // the second consumer of a ragged last block: nothing to store
        rt<T, TILE_DIM, DV> out;
        copy(out, c.state.o);
        // The previous task's store must have finished reading the staging tile.
        if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
        warpgroup::sync();
        warpgroup::store(c.output.staging[me], out);
        async_proxy_fence();
        warpgroup::sync();
        if (warpgroup::laneid() == 0) {
            tma::store_async(g.o, c.output.staging[me], {c.task.b, c.task.h, 2 * c.task.block + me, 0});
            tma::store_commit_group();
        }
    }
};

} // namespace tk_based
