// The chunked Based backward's first pass, dq (the shared part and the math: based_bwd_common.cuh).
#pragma once

#include "based_bwd_common.cuh"

namespace tk_based {
using namespace kittens;

// Consumer c owns query rows 64 c .. of the chunk and sees key halves h <= c; consumer 0 (one key half) holds state
// rows 0..127, consumer 1 rows 128..191, as in the forward. Per chunk:
//  1. dN of its half in place, Phi(K)^T of its state rows (shared memory); intra-chunk S = Q K_h^T, dP = dN V_h^T,
//     dS in registers, dq = scale dS K_h;
//  2. the chunk barrier (the images of the state before this chunk are complete), then dq += J(q)^T (dN E^T) from
//     the expanded image E and dq += dD (Q Z + z_lin) from the feature sums;
//  3. dq out; the state update S^T += Phi(K)^T V (and the sums), then its images, double-buffered by chunk parity so
//     that one barrier per chunk orders writers and readers.
template <typename T, int VT, bool SPLIT> struct based_bwd<T, VT, SPLIT>::dq_pass : based_bwd<T, VT, SPLIT> {
    using base = based_bwd<T, VT, SPLIT>;
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

    __device__ static inline void load(lcsf::producer_args<dq_pass> &p) {
        base::load_chunk(p.g, p.input, p.arrived, p.task, p.iter);
    }

    __device__ static inline void write_images(lcsf::consumer_args<dq_pass> &c, int m, int parity) {
        const float scale = c.g.scale;
        const int row0 = base::template block_row0<BIG>(c.consumer, m) + warpgroup::warp_row0();
        if (row0 < FEATURES)
            base::write_expanded(c.output.pieces[parity], c.output.lin[parity], c.state.s[m], row0, scale * scale,
                                 scale * scale, scale);
    }
    __device__ static inline void write_sums(lcsf::consumer_args<dq_pass> &c, int parity) {
        const float scale = c.g.scale;
        const int r0 = base::template block_row0<BIG>(c.consumer, 0);
        const int r1 = r0 + base::template blocks_of<BIG>(c.consumer) * HALF;
        base::write_sums(c.output.sums_matrix[parity], c.output.z_lin[parity], c.output.z, r0, r1 < FEATURES ? r1 : FEATURES,
                         scale * scale, scale * scale, scale);
    }

    __device__ static inline void setup(lcsf::consumer_args<dq_pass> &c) {
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
    __device__ static inline void update_block(lcsf::consumer_args<dq_pass> &c, int m, rt_fl<TILE_DIM, TILE_DIM> &sums) {
        pair_tile &kf = c.output.k_features[c.consumer == 0 ? m : 2];
        warpgroup::mma_AB(c.state.s[m], kf.template chunk<0>(), c.input.v[0]);
        warpgroup::mma_AB(c.state.s[m], kf.template chunk<1>(), c.input.v[1], wgmma::chained);
        warpgroup::mm_AB(sums, kf.template chunk<0>(), c.output.ones);
        warpgroup::mma_AB(sums, kf.template chunk<1>(), c.output.ones, wgmma::chained);
    }
    // Block m's feature sums into z and its rows of the images, once its update has completed.
    __device__ static inline void finish_block(lcsf::consumer_args<dq_pass> &c, int m, const rt_fl<TILE_DIM, TILE_DIM> &sums,
                                               int parity) {
        const int row0 = base::template block_row0<BIG>(c.consumer, m) + warpgroup::warp_row0();
        for_each_pair([&](pair_pos p, const float2 &d) {
            if (p.col == 0) c.output.z[row0 + p.row] += d.x;
        }, const_cast<rt_fl<TILE_DIM, TILE_DIM> &>(sums));
        write_images(c, m, parity);
    }

    __device__ static inline void compute(lcsf::consumer_args<dq_pass> &c) {
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

    __device__ static inline void finish(lcsf::consumer_args<dq_pass> &) {}
};

} // namespace tk_based
