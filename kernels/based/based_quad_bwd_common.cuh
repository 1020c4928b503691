// What the two passes of the quadratic Based backward share (the passes: based_quad_bwd_dq_kernel.cuh and
// based_quad_bwd_dkv_kernel.cuh; the forward: based_quad_fwd_kernel.cuh; the math: based_bwd_common.cuh's header and
// docs/based.md). With rinv_i and dD_i from the preparation kernel (zero on rows past the end),
// dN_i = rinv_i dO_i, and for visible pairs (j <= i), s_ij = scale q_i . k_j:
//   dS_ij = (dN_i . v_j + dD_i) (1 + s_ij),
//   dq_i = scale sum_j dS_ij k_j,   dk_j = scale sum_i dS_ij q_i,   dv_j = sum_i w_ij dN_i.
// Two passes built like attention's backward without atomics, since dq is only 16 wide:
//  * dq_pass: one task per block of 128 query rows, walking key tiles 0 .. block as the forward does. Each
//    consumer holds its 64 rows of Q and dO in registers as A operands: S = Q K^T and P = dO V^T (wgmma), dS in
//    registers with dN . v_j = rinv_i P_ij in fp32, dq += dS K. (dN rounded to 16 bits before the product would
//    leave its rounding in dN . v + dD, which cancels to about eps / den where a row sees few keys.)
//  * dkv_pass: one task per block of 128 keys, walking query tiles block .. end. Each consumer holds its 64
//    keys' K and V in registers: per 64-query half, S^T = K Q^T and dP^T = V dO^T, then dv += (W^T rinv) dO and
//    dk += dS^T Q, rinv and dD read per query column from the stage.
// Padded queries have rinv = dD = 0 and contribute nothing; padded keys are later than every real query.
#pragma once

#include "based.h"
#include "based_configs.cuh"
#include "based_quad_common.cuh"
#include "kittens.cuh"

namespace tk_based {
using namespace kittens;

// What both passes share: shapes, tile types, task layout, the stores at the end. The passes are its members dq_pass
// and dkv_pass, which derive from it and launch as LCSF kernels.
template <typename T, int DV> struct based_quad_bwd : lcsf_numbers<QUADRATIC_BACKWARD> {
    static_assert(DV == 64 || DV == 128, "Based quadratic backward: value tiles of 64 or 128 columns");
    static constexpr int DK = FEATURE_DIM;
    static constexpr int HALF = QUADRATIC_BACKWARD.consumer_rows;
    static constexpr int BLOCK = QUAD_BLOCK;
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

    // The end of a task: this consumer's gradient rows out, where its 64 tokens exist. The products gave dS / scale
    // for dq or dk (`scaled`), which takes the scale here; `stores` issues store_rows for every output tile, once the
    // previous task's stores have read the staging tiles.
    template <typename Stores>
    __device__ static inline void finish_gradients(rt_fl<TILE_DIM, DK> &scaled, const task &t, int me, int len,
                                                   float scale, Stores &&stores) {
        if (t.block * BLOCK + me * HALF >= len) return;
        for_each_pair([&](pair_pos, float2 &d) {
            d.x *= scale;
            d.y *= scale;
        }, scaled);
        if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
        warpgroup::sync();
        stores();
        if (warpgroup::laneid() == 0) tma::store_commit_group();
    }

    struct dq_pass;  // based_quad_bwd_dq_kernel.cuh
    struct dkv_pass; // based_quad_bwd_dkv_kernel.cuh
};

} // namespace tk_based
