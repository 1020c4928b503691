// Based backward in quadratic form (the forward: based_quad_fwd_kernel.cuh; the math: based_bwd_kernel.cuh's header
// and docs/based.md). With rinv_i and dD_i from the preparation kernel (zero on rows past the end),
// dN_i = rinv_i dO_i, and for visible pairs (j <= i), s_ij = scale q_i . k_j:
//   dS_ij = (dN_i . v_j + dD_i) (1 + s_ij),
//   dq_i = scale sum_j dS_ij k_j,   dk_j = scale sum_i dS_ij q_i,   dv_j = sum_i w_ij dN_i.
// Two passes built like attention's backward without atomics, since dq is only 16 wide:
//  * based_quad_dq: one task per block of 128 query rows, walking key tiles 0 .. block as the forward does. Each
//    consumer holds its 64 rows of Q and dO in registers as A operands: S = Q K^T and P = dO V^T (wgmma), dS in
//    registers with dN . v_j = rinv_i P_ij in fp32, dq += dS K. (dN rounded to 16 bits before the product would
//    leave its rounding in dN . v + dD, which cancels to about eps / den where a row sees few keys.)
//  * based_quad_dkv: one task per block of 128 keys, walking query tiles block .. end. Each consumer holds its 64
//    keys' K and V in registers: per 64-query half, S^T = K Q^T and dP^T = V dO^T, then dv += (W^T rinv) dO and
//    dk += dS^T Q, rinv and dD read per query column from the stage.
// Padded queries have rinv = dD = 0 and contribute nothing; padded keys are later than every real query.
#pragma once

#include "based.h"
#include "based_quad_fwd_kernel.cuh"
#include "kittens.cuh"

namespace tk_based {
using namespace kittens;

// What both passes share: shapes, tile types, task layout.
template <typename T, int DV> struct based_quad_bwd_base {
    static_assert(DV == 64 || DV == 128, "Based quadratic backward: value tiles of 64 or 128 columns");
    static constexpr int DK = FEATURE_DIM;
    static constexpr int HALF = 64;
    static constexpr int BLOCK = QUAD_BLOCK;
    static constexpr int NUM_CONSUMERS = 2;
    static constexpr int INPUT_STAGES = 2;
    static constexpr int PRODUCER_REGISTERS = 24, CONSUMER_REGISTERS = 240;
    using T2 = typename base_types::packing<T>::packed_type;

    using qk_half = st<T, HALF, DK>;
    using v_half = st<T, HALF, DV>;
    using row_vec = sv<float, HALF>;
    using qk_half_gl = gl<T, -1, -1, -1, DK, qk_half>;
    using v_half_gl = gl<T, -1, -1, -1, -1, v_half>;
    using row_gl = gl<float, 1, -1, -1, -1, row_vec>; // (1, batch, heads, padded len): the preparation's rinv, dD

    struct task {
        int b, h, block, iters;
    };

    static constexpr bool DYNAMIC_TASKS = true;
    // Task id to (batch, head, block) in quad_task_at's order; `rank` 0 is the heaviest block: the last query block
    // (dq) or the first key block (dkv).
    template <bool LAST_HEAVIEST, typename G> __device__ static inline bool place(const G &g, int id, task &t) {
        if (id >= g.num_tasks) return false;
        const quad_task_place at = quad_task_at(id, g.blocks, g.num_tasks / g.blocks, g.heads_per_group);
        t.block = LAST_HEAVIEST ? g.blocks - 1 - at.rank : at.rank;
        t.b = at.bh / g.heads;
        t.h = at.bh - t.b * g.heads;
        t.iters = LAST_HEAVIEST ? t.block + 1 : g.blocks - t.block;
        return true;
    }

    // The gradient rows of this consumer's 64 tokens out through `staging` by TMA (rows past the end are clipped).
    template <typename ST, typename GL, typename RT>
    __device__ static inline void store_rows(const GL &dst, ST &staging, const RT &grad, const task &t, int me) {
        rt<T, TILE_DIM, ST::cols> out;
        copy(out, grad);
        warpgroup::store(staging, out);
        async_proxy_fence();
        warpgroup::sync();
        if (warpgroup::laneid() == 0) tma::store_async(dst, staging, {t.b, t.h, 2 * t.block + me, 0});
    }
};

// ---------------------------------------------------------------- dq

template <typename T, int DV> struct based_quad_dq : based_quad_bwd_base<T, DV> {
    using base = based_quad_bwd_base<T, DV>;
    using typename base::T2;
    using typename base::task;
    using typename base::qk_half;
    using typename base::v_half;
    using typename base::row_vec;
    using typename base::qk_half_gl;
    using typename base::v_half_gl;
    using typename base::row_gl;
    static constexpr int DK = base::DK, HALF = base::HALF, BLOCK = base::BLOCK;

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

    __device__ static inline void load(lcsf::producer_args<based_quad_dq> &p) {
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

    __device__ static inline void setup(lcsf::consumer_args<based_quad_dq> &c) { zero(c.state.dq); }

    // The query side into registers: Q, dO, rinv, dD.
    __device__ static inline void load_queries(lcsf::consumer_args<based_quad_dq> &c) {
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

    __device__ static inline void compute(lcsf::consumer_args<based_quad_dq> &c) {
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

    __device__ static inline void finish(lcsf::consumer_args<based_quad_dq> &c) {
        const int me = c.consumer;
        if (c.task.block * BLOCK + me * HALF >= c.g.len) return;
        const float scale = c.g.scale;
        for_each_pair([&](pair_pos, float2 &d) {
            d.x *= scale;
            d.y *= scale;
        }, c.state.dq);
        if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
        warpgroup::sync();
        base::store_rows(c.g.dq, c.output.staging[me], c.state.dq, c.task, me);
        if (warpgroup::laneid() == 0) tma::store_commit_group();
    }
};

// ---------------------------------------------------------------- dk, dv

template <typename T, int DV> struct based_quad_dkv : based_quad_bwd_base<T, DV> {
    using base = based_quad_bwd_base<T, DV>;
    using typename base::T2;
    using typename base::task;
    using typename base::qk_half;
    using typename base::v_half;
    using typename base::row_vec;
    using typename base::qk_half_gl;
    using typename base::v_half_gl;
    using typename base::row_gl;
    static constexpr int DK = base::DK, HALF = base::HALF, BLOCK = base::BLOCK;

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

    __device__ static inline void load(lcsf::producer_args<based_quad_dkv> &p) {
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

    __device__ static inline void setup(lcsf::consumer_args<based_quad_dkv> &c) {
        zero(c.state.dk);
        zero(c.state.dv);
    }

    __device__ static inline void compute(lcsf::consumer_args<based_quad_dkv> &c) {
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
    __device__ static inline void key_grads(lcsf::consumer_args<based_quad_dkv> &c, int h, rt_fl<TILE_DIM, HALF> &s,
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

    __device__ static inline void finish(lcsf::consumer_args<based_quad_dkv> &c) {
        const int me = c.consumer;
        if (c.task.block * BLOCK + me * HALF >= c.g.len) return;
        const float scale = c.g.scale;
        for_each_pair([&](pair_pos, float2 &d) {
            d.x *= scale;
            d.y *= scale;
        }, c.state.dk);
        if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
        warpgroup::sync();
        base::store_rows(c.g.dk, c.output.dk_staging[me], c.state.dk, c.task, me);
        base::store_rows(c.g.dv, c.output.dv_staging[me], c.state.dv, c.task, me);
        if (warpgroup::laneid() == 0) tma::store_commit_group();
    }
};

} // namespace tk_based
