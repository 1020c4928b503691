// The GEMM's epilogue, in two steps the pipeline runs apart (gemm_pipeline.cuh): finish() turns a task's fp32
// accumulators into the output type in registers, as soon as its last wgmma is done; store() writes that block out
// piece by piece while the next task's first wgmma groups run.
#pragma once

#include "kittens.cuh"
#include "gemm_pipeline.cuh"

namespace tk_gemm {
using namespace kittens;

template <typename G> struct epilogue {
    using out_pair = typename G::c_tile::T2; // a packed pair of the output type

    // Accumulators -> output type: times the fp8 scales (one per tensor, or one per row of A and per column of B),
    // plus the bias added in fp32 before the one rounding, as a fused GEMM epilogue does.
    __device__ static inline void finish(consumer_args<G> &c) {
        float scale = 1.f;
        if constexpr (G::FP8 && !G::VECTOR_SCALES) {
            if (c.g.scale_a) scale *= *c.g.scale_a;
            if (c.g.scale_b) scale *= *c.g.scale_b;
        }
        // Vector scales: those of the two rows this lane holds (a step of 0 broadcasts one value to every row).
        float row_scale[2] = {1.f, 1.f};
        if constexpr (G::VECTOR_SCALES) {
            const int warp_row = // this warp's first row of C: each warp of a consumer holds TILE_DIM rows of its 64
                ((c.task.m * G::NUM_CONSUMERS + c.consumer) * WARPGROUP_WARPS + warpgroup::warpid()) * TILE_DIM;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = warp_row + lane_row(0, h);
                if (row < c.g.c.rows()) row_scale[h] = c.g.scale_a[row * c.g.scale_a_step];
            }
        }
        // The task's bias or column scales were staged in shared memory by setup(): wait for them, in every lane.
        if constexpr (G::BIAS || G::VECTOR_SCALES) {
            detail::memory::cp_async_wait<0>();
            warpgroup::sync(c.consumer + 1);
        }
        // Columns past N were zero-filled and are not stored.
        for_each_pair(
            [&](const pair_pos &p, const float2 &acc, out_pair &out) {
                float2 v = acc;
                if constexpr (G::VECTOR_SCALES) {
                    const float2 sb = *reinterpret_cast<const float2 *>(&c.output.col_scale[c.consumer].data[p.col]);
                    const float sa = row_scale[p.half];
                    v = float2{v.x * sa * sb.x, v.y * sa * sb.y};
                } else if constexpr (G::FP8) {
                    v = float2{v.x * scale, v.y * scale};
                }
                if constexpr (G::BIAS) {
                    const float2 b = convert<float2>(*reinterpret_cast<const out_pair *>(&c.output.bias[c.consumer].data[p.col]));
                    v = float2{v.x + b.x, v.y + b.y};
                }
                out = convert<out_pair>(v);
            },
            c.state.acc, c.state.out);
        // Pin the converted values here: otherwise the compiler may sink the conversion past the next task's first
        // wgmma, which overwrites the accumulators (ptxas then has to wait for that wgmma to finish).
        static_assert(sizeof(c.state.out) % 4 == 0);
        uint32_t *words = reinterpret_cast<uint32_t *>(&c.state.out);
#pragma unroll
        for (int w = 0; w < int(sizeof(c.state.out) / 4); w++) asm volatile("" : "+r"(words[w])::"memory");
    }

    // The finished block -> shared memory -> global memory, C_COLS columns at a time: pieces [first, last) of it.
    // Each warp moves its own 16 rows (stmatrix, then a TMA store it issues and waits for itself), so no barrier
    // across the warpgroup holds a piece up: the two warpgroup barriers that 64-row pieces need took more of a
    // piece's time than its shared-memory writes.
    __device__ static inline void store(consumer_args<G> &c, int first, int last) {
        constexpr int PIECES = G::PIECES, C_COLS = G::C_COLS, C_BUFFERS = G::C_BUFFERS;
        const int w = warpgroup::warpid();
        const bool leader = laneid() == 0;
        rt<typename G::c_tile::T, 16, C_COLS> piece;
#pragma unroll
        for (int j = 0; j < PIECES; j++) {
            if (j < first || j >= last) continue; // j stays a compile-time index into the finished block
            typename G::c_tile &buf = c.output.c[c.consumer][j % C_BUFFERS][w];
            if (leader) tma::store_async_read_wait<C_BUFFERS - 1>(); // this warp's store that last used `buf` has read it
            __syncwarp();
#pragma unroll
            for (int t = 0; t < C_COLS / 16; t++) piece.tiles[0][t] = c.state.out.tiles[0][j * (C_COLS / 16) + t];
            kittens::store(buf, piece);
            async_proxy_fence(); // generic writes -> TMA reads
            __syncwarp();
            if (leader) {
                const coord at{(c.task.m * G::NUM_CONSUMERS + c.consumer) * WARPGROUP_WARPS + w, c.task.n * PIECES + j};
                if constexpr (G::CFG.split_k) tma::store_add_async(c.g.c, buf, at);
                else if constexpr (G::CFG.l2_hints) tma::store_async(c.g.c, buf, at, tma::l2::evict_first);
                else tma::store_async(c.g.c, buf, at);
                tma::store_commit_group();
            }
        }
    }
};

} // namespace tk_gemm
