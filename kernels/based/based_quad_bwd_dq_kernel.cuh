// The quadratic Based backward's dq pass (the shared part and the math: based_quad_bwd_common.cuh).
#pragma once

#include "based_quad_bwd_common.cuh"

namespace tk_based {
using namespace kittens;

template <typename T, int DV> struct based_quad_bwd<T, DV>::dq_pass : based_quad_bwd<T, DV> {
    using base = based_quad_bwd<T, DV>;

    using k_tile = st<T, BLOCK, DK>;
    using v_tile = st<T, BLOCK, DV>;
    using k_gl = gl<T, -1, -1, -1, DK, k_tile>;
    using v_gl = gl<T, -1, -1, -1, -1, v_tile>;

    struct globals {
        qk_half_gl q;
        k_gl k;
        v_gl v;
        v_half_gl dout;
        row_gl rinv, dd;
        qk_half_gl dq;
        int heads, len, blocks, num_tasks;
        float scale;
        int heads_per_group; // quad_task_at
        int *task_counter;   // LCSF's dynamic schedule
    };
    struct input_block {
        k_tile k;
        v_tile v;
        // The task's query side, loaded with its first key tile only.
        qk_half q[2];
        v_half dout[2];
        row_vec rinv[2], dd[2];
    };
    struct output_block {
        qk_half staging[base::NUM_CONSUMERS];
    };
    struct consumer_state {
        rt<T, TILE_DIM, DK> q;
        rt<T, TILE_DIM, DV> dout; // dO as it stands: dP = rinv (dO V^T) keeps dP + dD's cancellation in fp32
        rt_fl<TILE_DIM, DK> dq;
        float rinv[2], dd[2]; // of this lane's two rows
    };

    __device__ static inline bool get_task(const globals &g, int id, task &t) { return base::template place<true>(g, id, t); }

    __device__ static inline void load(lcsf::producer_args<dq_pass> &p) {
        const bool first = p.iter == 0;
        constexpr uint32_t TILE_BYTES = tma::transfer_bytes<k_tile>::value + tma::transfer_bytes<v_tile>::value;
        constexpr uint32_t QUERY_BYTES =
            2 * (tma::transfer_bytes<qk_half>::value + tma::transfer_bytes<v_half>::value + 2 * tma::transfer_bytes<row_vec>::value);
        const task &t = p.task;
        tma::expect_bytes(p.arrived, TILE_BYTES + (first ? QUERY_BYTES : 0u));
        tma::load_async(p.input.k, p.g.k, {t.b, t.h, p.iter, 0}, p.arrived);
        tma::load_async(p.input.v, p.g.v, {t.b, t.h, p.iter, 0}, p.arrived);
        if (!first) return;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int rows = 2 * t.block + h; // in units of HALF
            tma::load_async(p.input.q[h], p.g.q, {t.b, t.h, rows, 0}, p.arrived);
            tma::load_async(p.input.dout[h], p.g.dout, {t.b, t.h, rows, 0}, p.arrived);
            tma::load_async(p.input.rinv[h], p.g.rinv, {0, t.b, t.h, rows}, p.arrived);
            tma::load_async(p.input.dd[h], p.g.dd, {0, t.b, t.h, rows}, p.arrived);
        }
    }

    __device__ static inline void setup(lcsf::consumer_args<dq_pass> &c) { zero(c.state.dq); }

    // The query side into registers: Q, dO, rinv, dD.
    __device__ static inline void load_queries(lcsf::consumer_args<dq_pass> &c) {
        const int me = c.consumer, warp_row0 = warpgroup::warp_row0();
        warpgroup::load(c.state.q, c.input.q[me]);
        warpgroup::load(c.state.dout, c.input.dout[me]);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            c.state.rinv[h] = c.input.rinv[me].data[warp_row0 + lane_row(0, h)];
            c.state.dd[h] = c.input.dd[me].data[warp_row0 + lane_row(0, h)];
        }
    }

    // dS / scale = (rinv P + dD) (1 + scale S) in 16 bits, masked to the causal triangle on the diagonal tile (row0:
    // this warp's first query row in the block, the tile's first key there).
    template <bool MASKED>
    __device__ static inline void score_grads(const consumer_state &st, rt_fl<TILE_DIM, BLOCK> &s,
                                              rt_fl<TILE_DIM, BLOCK> &dp, rt<T, TILE_DIM, BLOCK> &ds, float scale, int row0) {
        for_each_pair([&](pair_pos p, const float2 &sv, const float2 &pv, T2 &d) {
            const float r = st.rinv[p.half], dd = st.dd[p.half];
            float x = fmaf(pv.x, r, dd) * fmaf(scale, sv.x, 1.f), y = fmaf(pv.y, r, dd) * fmaf(scale, sv.y, 1.f);
            if constexpr (MASKED) {
                const int row = row0 + p.row;
                x = p.col <= row ? x : 0.f;
                y = p.col + 1 <= row ? y : 0.f;
            }
            d = base_types::convertor<T2, float2>::convert(float2{x, y});
        }, s, dp, ds);
    }

    __device__ static inline void compute(lcsf::consumer_args<dq_pass> &c) {
        const int me = c.consumer;
        if (c.iter == 0) load_queries(c);
        rt_fl<TILE_DIM, BLOCK> s, dp;
        warpgroup::mm_ABt(s, c.state.q, c.input.k);
        warpgroup::mm_ABt(dp, c.state.dout, c.input.v);
        warpgroup::mma_async_wait(s, dp);
        rt<T, TILE_DIM, BLOCK> ds;
        if (c.iter == c.task.block) score_grads<true>(c.state, s, dp, ds, c.g.scale, me * HALF + warpgroup::warp_row0());
        else score_grads<false>(c.state, s, dp, ds, c.g.scale, 0);
        warpgroup::mma_AB(c.state.dq, ds, c.input.k);
        warpgroup::mma_async_wait(c.state.dq);
    }

    __device__ static inline void finish(lcsf::consumer_args<dq_pass> &c) {
        const int me = c.consumer;
        base::finish_gradients(c.state.dq, c.task, me, c.g.len, c.g.scale,
                               [&] { base::store_rows(c.g.dq, c.output.staging[me], c.state.dq, c.task, me); });
    }
};

} // namespace tk_based
