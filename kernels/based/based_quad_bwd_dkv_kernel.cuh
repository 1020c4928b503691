// The quadratic Based backward's dk/dv pass (the shared part and the math: based_quad_bwd_common.cuh).
#pragma once

#include "based_quad_bwd_common.cuh"

namespace tk_based {
using namespace kittens;

template <typename T, int DV> struct based_quad_bwd<T, DV>::dkv_pass : based_quad_bwd<T, DV> {
    using base = based_quad_bwd<T, DV>;

    struct globals {
        qk_half_gl q, k;
        v_half_gl v, dout;
        row_gl rinv, dd;
        qk_half_gl dk;
        v_half_gl dv;
        int heads, len, blocks, num_tasks;
        float scale;
        int heads_per_group; // quad_task_at
        int *task_counter;   // LCSF's dynamic schedule
    };
    struct input_block {
        qk_half q[2];
        v_half dout[2];
        row_vec rinv[2], dd[2];
        // The task's keys, loaded with its first query tile only.
        qk_half k[2];
        v_half v[2];
    };
    struct output_block {
        qk_half dk_staging[base::NUM_CONSUMERS];
        v_half dv_staging[base::NUM_CONSUMERS];
    };
    struct consumer_state {
        rt<T, TILE_DIM, DK> k;
        rt<T, TILE_DIM, DV> v;
        rt_fl<TILE_DIM, DK> dk;
        rt_fl<TILE_DIM, DV> dv;
    };

    // Key block 0 is the heaviest: it sees every query tile.
    __device__ static inline bool get_task(const globals &g, int id, task &t) { return base::template place<false>(g, id, t); }

    __device__ static inline void load(lcsf::producer_args<dkv_pass> &p) {
        const bool first = p.iter == 0;
        constexpr uint32_t TILE_BYTES =
            2 * (tma::transfer_bytes<qk_half>::value + tma::transfer_bytes<v_half>::value + 2 * tma::transfer_bytes<row_vec>::value);
        constexpr uint32_t KEY_BYTES = 2 * (tma::transfer_bytes<qk_half>::value + tma::transfer_bytes<v_half>::value);
        const task &t = p.task;
        tma::expect_bytes(p.arrived, TILE_BYTES + (first ? KEY_BYTES : 0u));
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int rows = 2 * (t.block + p.iter) + h; // query rows, in units of HALF
            tma::load_async(p.input.q[h], p.g.q, {t.b, t.h, rows, 0}, p.arrived);
            tma::load_async(p.input.dout[h], p.g.dout, {t.b, t.h, rows, 0}, p.arrived);
            tma::load_async(p.input.rinv[h], p.g.rinv, {0, t.b, t.h, rows}, p.arrived);
            tma::load_async(p.input.dd[h], p.g.dd, {0, t.b, t.h, rows}, p.arrived);
            if (first) {
                tma::load_async(p.input.k[h], p.g.k, {t.b, t.h, 2 * t.block + h, 0}, p.arrived);
                tma::load_async(p.input.v[h], p.g.v, {t.b, t.h, 2 * t.block + h, 0}, p.arrived);
            }
        }
    }

    __device__ static inline void setup(lcsf::consumer_args<dkv_pass> &c) {
        zero(c.state.dk);
        zero(c.state.dv);
    }

    __device__ static inline void compute(lcsf::consumer_args<dkv_pass> &c) {
        const int me = c.consumer;
        if (c.iter == 0) {
            warpgroup::load(c.state.k, c.input.k[me]);
            warpgroup::load(c.state.v, c.input.v[me]);
        }
        const bool diagonal = c.iter == 0;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            // On the diagonal tile, query half h < me lies wholly before this consumer's keys.
            if (diagonal && h < me) continue;
            rt_fl<TILE_DIM, HALF> s, dp;
            warpgroup::mm_ABt(s, c.state.k, c.input.q[h]);
            warpgroup::mm_ABt(dp, c.state.v, c.input.dout[h]);
            warpgroup::mma_async_wait(s, dp);
            rt<T, TILE_DIM, HALF> a, ds;
            // Keys and queries both relative to the same 64 positions on the diagonal half.
            if (diagonal && h == me) key_grads<true>(c, h, s, dp, a, ds);
            else key_grads<false>(c, h, s, dp, a, ds);
            warpgroup::mma_AB(c.state.dv, a, c.input.dout[h]);
            warpgroup::mma_AB(c.state.dk, ds, c.input.q[h]);
            warpgroup::mma_async_wait(c.state.dv, c.state.dk);
        }
    }

    // For query half h: A = W^T rinv (dv's weights) and dS^T / scale = (rinv P^T + dD) (1 + scale S^T), in 16 bits,
    // rinv and dD per query column from the stage; masked to key <= query where the half is this consumer's diagonal.
    template <bool MASKED>
    __device__ static inline void key_grads(lcsf::consumer_args<dkv_pass> &c, int h, rt_fl<TILE_DIM, HALF> &s,
                                            rt_fl<TILE_DIM, HALF> &dp, rt<T, TILE_DIM, HALF> &a, rt<T, TILE_DIM, HALF> &ds) {
        const float *rinv = c.input.rinv[h].data, *dd = c.input.dd[h].data;
        const float scale = c.g.scale;
        const pair_weight_of w(scale);
        const int key0 = warpgroup::warp_row0(); // this warp's first key among the consumer's 64
        for_each_pair([&](pair_pos p, const float2 &sv, const float2 &pv, T2 &av, T2 &dsv) {
            const float2 r = *reinterpret_cast<const float2 *>(rinv + p.col);
            const float2 d = *reinterpret_cast<const float2 *>(dd + p.col);
            float ax = w(sv.x) * r.x, ay = w(sv.y) * r.y;
            float gx = fmaf(pv.x, r.x, d.x) * fmaf(scale, sv.x, 1.f), gy = fmaf(pv.y, r.y, d.y) * fmaf(scale, sv.y, 1.f);
            if constexpr (MASKED) {
                const int key = key0 + p.row;
                const bool vx = p.col >= key, vy = p.col + 1 >= key;
                ax = vx ? ax : 0.f;
                ay = vy ? ay : 0.f;
                gx = vx ? gx : 0.f;
                gy = vy ? gy : 0.f;
            }
            av = base_types::convertor<T2, float2>::convert(float2{ax, ay});
            dsv = base_types::convertor<T2, float2>::convert(float2{gx, gy});
        }, s, dp, a, ds);
    }

    __device__ static inline void finish(lcsf::consumer_args<dkv_pass> &c) {
        const int me = c.consumer;
        base::finish_gradients(c.state.dk, c.task, me, c.g.len, c.g.scale, [&] {
            base::store_rows(c.g.dk, c.output.dk_staging[me], c.state.dk, c.task, me);
            base::store_rows(c.g.dv, c.output.dv_staging[me], c.state.dv, c.task, me);
        });
    }
};

} // namespace tk_based
