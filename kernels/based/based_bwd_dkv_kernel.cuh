// The chunked Based backward's second pass: dk, dv and the initial state's gradient (the shared part and the math:
// based_bwd_common.cuh).
#pragma once

#include "based_bwd_common.cuh"

namespace tk_based {
using namespace kittens;

// Chunks from the last to the first. Consumer c owns key rows 64 c .. of the chunk and sees query halves h >= c;
// consumer 1 (one query half) holds state rows 0..127 of R, consumer 0 rows 128..191. Per chunk:
//  1. dN of its half in place, Phi(K) of its keys (shared memory), the dD column tile; the chunk barrier (dN of both
//     halves and the images of R after this chunk are complete);
//  2. intra-chunk, keys as rows: S^T = K Q_h^T, dP^T = V dN_h^T, dk = scale dS^T Q_h, dv = W^T dN_h;
//  3. dv += Phi(K) R (the compact image), dk += J(k)^T (V E^T) + K RDm + RD_lin (the expanded image and sums);
//  4. dk, dv out; R^T += omega Phi(Q)^T dN and RD += omega Phi(Q)^T dD (Phi(Q)^T built where Phi(K) was); a second
//     barrier (every read of the images is over), then the images. The images are single-buffered: two barriers per
//     chunk cost less than the shared memory of a second copy.
template <typename T, int VT, bool SPLIT> struct based_bwd<T, VT, SPLIT>::dkv_pass : based_bwd<T, VT, SPLIT> {
    using base = based_bwd<T, VT, SPLIT>;
    static constexpr int BIG = 1;
    static constexpr int STATE_BLOCKS = 2, STATE_ROWS = 3 * HALF;
    using dd_tile = st<T, HALF, TILE_DIM>; // column 0: dD of a half's queries, the rest zero

    // Per consumer, Phi(K) of its keys and Phi(Q)^T of its state rows share memory: the first is read before the
    // second is built.
    union features_small {
        row_features_tile keys;
        pair_tile queries[1]; // state rows 128..191
    };
    union features_big {
        row_features_tile keys;
        pair_tile queries[2]; // state rows 0..127
    };
    struct output_block {
        features_big big;                  // consumer 1
        features_small small;              // consumer 0
        st<T, FEATURES, VT> image;         // R in 16 bits (dv's B operand)
        piece_tile pieces[PIECES];         // R expanded, diagonal doubled (dk)
        lin_tile lin;                      // R_lin
        matrix_tile sums_matrix;           // RD as a symmetric matrix, diagonal doubled
        dd_tile dd[2][2];                  // by chunk parity, per query half
        v_tile dv_staging[2];
        grad_tile dk_staging[2];
        float rd[STATE_ROWS];              // fp32 RD
        float rd_lin[DK];
    };
    struct consumer_state {
        rt_fl<TILE_DIM, VT> r[STATE_BLOCKS]; // R (dL/dS): warp w of block m holds rows block_row0(c, m) + 16 w ..
    };

    __device__ static inline row_features_tile &key_features(output_block &o, int me) {
        return me == BIG ? o.big.keys : o.small.keys;
    }
    __device__ static inline pair_tile &query_features(output_block &o, int me, int m) {
        return me == BIG ? o.big.queries[m] : o.small.queries[0];
    }

    __device__ static inline void load(lcsf::producer_args<dkv_pass> &p) {
        base::load_chunk(p.g, p.input, p.arrived, p.task, p.g.chunks - 1 - p.iter);
    }

    // This warp's rows of R into the compact and expanded images.
    __device__ static inline void write_images(lcsf::consumer_args<dkv_pass> &c, int m) {
        const int row0 = base::template block_row0<BIG>(c.consumer, m) + warpgroup::warp_row0();
        if (row0 >= FEATURES) return;
        rt<T, TILE_DIM, VT> image;
        copy(image, c.state.r[m]);
        store(c.output.image, image, row0, 0);
        base::write_expanded(c.output.pieces, c.output.lin, c.state.r[m], row0, 1.f, 2.f, 1.f);
    }
    __device__ static inline void write_sums(lcsf::consumer_args<dkv_pass> &c) {
        const int r0 = base::template block_row0<BIG>(c.consumer, 0);
        const int r1 = r0 + base::template blocks_of<BIG>(c.consumer) * HALF;
        base::write_sums(c.output.sums_matrix, c.output.rd_lin, c.output.rd, r0, r1 < FEATURES ? r1 : FEATURES, 1.f, 2.f, 1.f);
    }

    // R from the final state's gradient (dL/dS of kernel feature f: the columns it stands for, each / sqrt(2) for
    // a quadratic feature), or zeros.
    __device__ static inline float seed_row(const feature_def &d, const float *row) {
        const int c0 = state_column(d, 0), c1 = state_column(d, 1);
        if (c0 < 0) return 0.f;
        if (d.kind != feature_kind::quadratic) return row[c0];
        return (1.f / SQRT2) * (c1 < 0 ? row[c0] : row[c0] + row[c1]);
    }

    __device__ static inline void setup(lcsf::consumer_args<dkv_pass> &c) {
        const globals &g = c.g;
        const int me = c.consumer;
        base::consumers_sync(); // the previous task's last chunk may still read what this rewrites
        base::template load_state<BIG>(c.state.r, c.output.rd, g, c.task, me, c.task.split == 0, seed_row);
        warpgroup::sync();
        if (g.state0 || g.sum0) {
#pragma unroll
            for (int m = 0; m < STATE_BLOCKS; m++)
                if (m < base::template blocks_of<BIG>(me)) write_images(c, m);
            write_sums(c);
        }
        async_proxy_fence();
    }

    __device__ static inline void compute(lcsf::consumer_args<dkv_pass> &c) {
        using T2 = typename base::T2;
        const globals &g = c.g;
        const int me = c.consumer;
        const int chunk = g.chunks - 1 - c.iter;
        const float scale = g.scale;
        const float first = c.task.split == 0 ? 1.f : 0.f;
        const int warp_row0 = warpgroup::warp_row0(); // this warp's first key row in the consumer's half
        const int parity = c.iter & 1;

        // 1-2. dN of this consumer's half; intra-chunk, keys as rows, the diagonal half's S^T and dP^T running while
        // Phi(K) and the dD column tile are built; then the barrier (dN of the other half, the images of R).
        base::scale_dout(c.input, me);
        async_proxy_fence();
        warpgroup::sync();
        rt_fl<TILE_DIM, DK> dk;
        rt_fl<TILE_DIM, VT> dv;
        // The diagonal half (both consumers), then consumer 0's second half. One call site for the diagonal step, so
        // that the barrier inside it is one instruction that both consumers execute (bar.sync wants every participant
        // at the same one).
        const auto half_step = [&]<bool DIAGONAL>(int h) {
            rt<T, TILE_DIM, HALF> ds, w;
            {
                rt_fl<TILE_DIM, HALF> s, dp;
                warpgroup::mm_ABt(s, c.input.k[me], c.input.q[h]);
                warpgroup::mm_ABt(dp, c.input.v[me], c.input.dout[h]);
                if constexpr (DIAGONAL) {
                    const int t = warpgroup::laneid();
                    row_features_tile &kf = key_features(c.output, me);
                    if (t % 2 == 0) features::template build_row_features<0, FEATURES / 2>(kf, c.input.k[me], t / 2);
                    else features::template build_row_features<FEATURES / 2, FEATURES / 2>(kf, c.input.k[me], t / 2);
                    if (t < HALF) {
                        dd_tile &d = c.output.dd[parity][me];
                        const T x = base_types::convertor<T, float>::convert(first * c.input.dd[me].data[t]);
#pragma unroll
                        for (int j = 0; j < TILE_DIM; j++) d(t, j) = j == 0 ? x : base_types::constants<T>::zero();
                    }
                    async_proxy_fence();
                    base::consumers_sync();
                }
                warpgroup::mma_async_wait(s, dp);
                const float *dd = c.input.dd[h].data;
                for_each_pair([&](pair_pos p, const float2 &sv, const float2 &dpv, T2 &ds16, T2 &w16) {
                    const int key = warp_row0 + p.row;
                    const bool vx = !DIAGONAL || p.col >= key, vy = !DIAGONAL || p.col + 1 >= key;
                    const float sx = scale * sv.x, sy = scale * sv.y;
                    ds16 = base::to_pair(vx ? scale * (dpv.x + first * dd[p.col]) * (1.f + sx) : 0.f,
                                         vy ? scale * (dpv.y + first * dd[p.col + 1]) * (1.f + sy) : 0.f);
                    w16 = base::to_pair(vx ? fmaf(0.5f * sx, sx, 1.f + sx) : 0.f, vy ? fmaf(0.5f * sy, sy, 1.f + sy) : 0.f);
                }, s, dp, ds, w);
            }
            if constexpr (DIAGONAL) {
                warpgroup::mm_AB(dk, ds, c.input.q[h]);
                warpgroup::mm_AB(dv, w, c.input.dout[h]);
            } else {
                warpgroup::mma_AB(dk, ds, c.input.q[h]);
                warpgroup::mma_AB(dv, w, c.input.dout[h]);
            }
            warpgroup::mma_async_wait(dk, dv);
        };
        half_step.template operator()<true>(me);
        if (me == 0) half_step.template operator()<false>(1);

        // 3. Inter-chunk, from R of the later chunks.
        if (c.iter > 0 || g.state0 || g.sum0) {
            warpgroup::mma_AB(dv, key_features(c.output, me), c.output.image);
            rt_fl<TILE_DIM, DK> u; // K RDm
            base::contract(dk, u, c.input.v[me], c.input.k[me], c.input.k[me], c.output.sums_matrix, c.output.pieces,
                           c.output.lin);
            warpgroup::mma_async_wait(dv); // done already (issued before the contraction's last wait)
            const float *rd_lin = c.output.rd_lin;
            for_each_pair([&](pair_pos p, float2 &d, const float2 &uv) {
                d.x += uv.x + rd_lin[p.col];
                d.y += uv.y + rd_lin[p.col + 1];
            }, dk, u);
        }

        // 4. dk and dv out.
        {
            rt<T, TILE_DIM, VT> out;
            copy(out, dv);
            if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
            warpgroup::sync(); // also: every warp's products have read Phi(K), which Phi(Q)^T overwrites below
            warpgroup::store(c.output.dv_staging[me], out);
            base::stage_grad(c.output.dk_staging[me], dk);
            async_proxy_fence();
        }

        // 5. R^T += omega Phi(Q)^T dN and RD += omega Phi(Q)^T dD over the chunk's 128 queries, per block of 64 rows.
        base::template build_state_features<BIG>(
            [&]<int F>() -> pair_tile & { return query_features(c.output, me, F < 2 * HALF ? F / HALF : 0); }, c.input.q,
            me);
        async_proxy_fence();
        warpgroup::sync();
        if (warpgroup::laneid() == 0) {
            tma::store_async(g.dv, c.output.dv_staging[me], {c.task.b, c.task.h, 2 * chunk + me, c.task.split});
            base::issue_grad(g, c.output.dk_staging[me], c.task, 2 * chunk + me);
            tma::store_commit_group();
        }
        const float scale2 = scale * scale;
#pragma unroll
        for (int m = 0; m < STATE_BLOCKS; m++) {
            if (m >= base::template blocks_of<BIG>(me)) break;
            pair_tile &qf = query_features(c.output, me, m);
            rt_fl<TILE_DIM, VT> upd;
            rt_fl<TILE_DIM, TILE_DIM> sums;
            warpgroup::mm_AB(upd, qf.template chunk<0>(), c.input.dout[0]);
            warpgroup::mma_AB(upd, qf.template chunk<1>(), c.input.dout[1], wgmma::chained);
            warpgroup::mm_AB(sums, qf.template chunk<0>(), c.output.dd[parity][0]);
            warpgroup::mma_AB(sums, qf.template chunk<1>(), c.output.dd[parity][1], wgmma::chained);
            warpgroup::mma_async_wait(upd, sums);
            const int row0 = base::template block_row0<BIG>(me, m) + warp_row0;
            float omega[2];
#pragma unroll
            for (int h = 0; h < 2; h++) omega[h] = feature_weight(feature_at(row0 + lane_row(0, h)), scale);
            (void)scale2;
            for_each_pair([&](pair_pos p, float2 &r, const float2 &d) {
                r.x = fmaf(omega[p.half], d.x, r.x);
                r.y = fmaf(omega[p.half], d.y, r.y);
            }, c.state.r[m], upd);
            for_each_pair([&](pair_pos p, const float2 &d) {
                if (p.col == 0) c.output.rd[row0 + p.row] += omega[p.half] * d.x;
            }, sums);
        }
        // Every consumer's reads of the images are over; then the images of R after this chunk.
        base::consumers_sync();
#pragma unroll
        for (int m = 0; m < STATE_BLOCKS; m++)
            if (m < base::template blocks_of<BIG>(me)) write_images(c, m);
        warpgroup::sync(); // rd rows of the other warps
        write_sums(c);
        async_proxy_fence();
    }

    // d kv0 = R and d k_sum0 = RD in the 273 layout: a quadratic column holds R / sqrt(2) (sqrt(2) R on the diagonal)
    // plus the antisymmetric part of the seed, which passes to the initial state unchanged but never entered R.
    __device__ static inline void put(float *out, const float *seed, const feature_def &d, float x) {
        const int c0 = state_column(d, 0), c1 = state_column(d, 1);
        if (c0 < 0) return;
        if (d.kind != feature_kind::quadratic) {
            out[c0] = x;
        } else if (c1 < 0) {
            out[c0] = SQRT2 * x;
        } else {
            const float anti = seed ? 0.5f * (seed[c0] - seed[c1]) : 0.f;
            out[c0] = x / SQRT2 + anti;
            out[c1] = x / SQRT2 - anti;
        }
    }
    __device__ static inline void finish(lcsf::consumer_args<dkv_pass> &c) {
        const globals &g = c.g;
        const task &t = c.task;
        const int me = c.consumer;
        const size_t head = size_t(t.b) * g.heads + t.h;
        if (g.d_kv0) {
#pragma unroll
            for (int m = 0; m < STATE_BLOCKS; m++) {
                if (m >= base::template blocks_of<BIG>(me)) break;
                const int row0 = base::template block_row0<BIG>(me, m) + warpgroup::warp_row0();
                for_each_pair([&](pair_pos p, float2 &v) {
                    const feature_def d = feature_at(row0 + p.row);
                    const int c0 = t.split * VT + p.col;
                    const size_t at0 = (head * g.value_dim + c0) * STATE_FEATURES;
                    if (c0 < g.value_dim) put(g.d_kv0 + at0, g.state0 ? g.state0 + at0 : nullptr, d, v.x);
                    if (c0 + 1 < g.value_dim)
                        put(g.d_kv0 + at0 + STATE_FEATURES, g.state0 ? g.state0 + at0 + STATE_FEATURES : nullptr, d, v.y);
                }, c.state.r[m]);
            }
        }
        if (g.d_k_sum0 && t.split == 0) {
            float *out = g.d_k_sum0 + head * STATE_FEATURES;
            const float *seed = g.sum0 ? g.sum0 + head * STATE_FEATURES : nullptr;
            const int r0 = base::template block_row0<BIG>(me, 0);
            for (int i = warpgroup::laneid(); i < base::template blocks_of<BIG>(me) * HALF; i += WARPGROUP_THREADS)
                if (r0 + i < FEATURES) put(out, seed, feature_at(r0 + i), c.output.rd[r0 + i]);
        }
    }
};

} // namespace tk_based
