// GEMM: C (M x N) = A (M x K) @ B (K x N), fp32 accumulation, configured by a gemm_config (gemm_configs.cuh).
//
// Each task is a (64 * consumers) x block_n block of C. The producer streams K-slices of A and B through the
// shared-memory ring with TMA; each consumer warpgroup owns 64 rows and runs wgmma straight from the swizzled
// tiles, keeping one stage's wgmma group in flight while it waits for the next stage. The main loop
// (gemm_pipeline.cuh) overlaps a task's output with the next task's tensor-core work; the task order is in
// gemm_schedule.cuh, the epilogue in gemm_epilogue.cuh. This struct holds the data layout and the hooks the main
// loop calls.
//
// Operands may sit in memory either way round ("K-major": K is the contiguous axis, as in an (M, K) row-major A or
// an nn.Linear weight (N, K); "MN-major": the other way). wgmma reads both from shared memory (16-bit types only for
// MN-major: the hardware has no transpose for fp8).
#pragma once

#include <type_traits>

#include "kittens.cuh"
#include "gemm_configs.cuh"
#include "gemm_epilogue.cuh"
#include "gemm_pipeline.cuh"
#include "gemm_schedule.cuh"

namespace tk_gemm {
using namespace kittens;

enum class major { k, mn };

template <typename T_IN, typename T_OUT, major A_MAJOR, major B_MAJOR, gemm_config CFG_> struct gemm {
    static constexpr gemm_config CFG = CFG_;
    static constexpr bool FP8 = base_types::fp8<T_IN>;
    static constexpr bool BIAS = CFG.bias, VECTOR_SCALES = CFG.vector_scales, RESIDENT = CFG.resident_b;
    static_assert(!FP8 || (A_MAJOR == major::k && B_MAJOR == major::k), "fp8 wgmma reads both operands K-major only");
    static_assert(!CFG.split_k || (std::same_as<T_OUT, float> && !BIAS), "split-K adds fp32 partial sums, without a bias");
    static_assert(!(CFG.split_k && RESIDENT), "the resident B panel holds a whole contraction");
    static_assert(!VECTOR_SCALES || (FP8 && !BIAS && !CFG.split_k), "vector scales are an fp8 epilogue");

    static constexpr bool A_KMAJOR = A_MAJOR == major::k, B_KMAJOR = B_MAJOR == major::k;
    static constexpr int NUM_CONSUMERS = CFG.consumers, INPUT_STAGES = CFG.stages;
    static constexpr int PRODUCER_REGISTERS = 40, CONSUMER_REGISTERS = 232;
    static constexpr int BM = block_m(CFG), BN = CFG.block_n;
    static constexpr int BK = slice_k(sizeof(T_IN)); // one 128-byte swizzle row per K-slice
    static constexpr int C_COLS = CFG.c_piece;       // epilogue piece width
    static constexpr int PIECES = BN / C_COLS, STORE_PIECES = PIECES, STORE_PHASES = CFG.phases;
    // Double-buffered pieces; a piece that is the whole block needs one buffer.
    static constexpr int C_BUFFERS = CFG.buffers > 0 ? CFG.buffers : PIECES > 1 ? 2 : 1;
    static constexpr int RESIDENT_SLICES = RESIDENT ? RESIDENT_B_SLICES : 0; // K-slices of the resident B panel
    static_assert(BN % C_COLS == 0, "the epilogue piece width must divide the block width");
    static_assert(PIECES % C_BUFFERS == 0, "pieces take the buffers in turn across tasks: their count must divide the pieces'");

    using a_tile = std::conditional_t<A_MAJOR == major::k, st<T_IN, 64, BK>, st<T_IN, BK, 64>>;
    // One K-slice of B for a block BN wide, in B's memory order.
    using b_tile = std::conditional_t<B_MAJOR == major::k, st<T_IN, BN, BK>, st<T_IN, BK, BN>>;
    using c_tile = st<T_OUT, 16, C_COLS>; // one warp's rows of an epilogue piece: each warp stores its own
    using a_gl = gl<T_IN, 1, 1, -1, -1, a_tile>;
    using b_gl = gl<T_IN, 1, 1, -1, -1, b_tile>;
    using c_gl = gl<T_OUT, 1, 1, -1, -1, c_tile>;
    using bias_vec = sv<T_OUT, BN>;
    using bias_gl = gl<T_OUT, 1, 1, 1, -1>;
    using scale_vec = sv<float, BN>;
    using scale_gl = gl<float, 1, 1, 1, -1>;

    struct globals {
        a_gl a;
        b_gl b;
        c_gl c;
        int tiles_m, tiles_n, k_iters;
        int splits, k_per_split;        // contraction ranges (1 and k_iters unless split-K)
        const float *scale_a, *scale_b; // per-tensor scales (fp8); null means 1
        bias_gl bias;                   // (N) added to every row of C with a bias
        int scale_a_step = 0;                    // vector scales: element stride of scale_a (0: one value for every row)
        scale_gl col_scale{nullptr, 1, 1, 1, 1}; // vector scales: (N) scales of B's columns
    };
    struct streamed_ab {
        a_tile a[NUM_CONSUMERS];
        b_tile b;
    };
    struct streamed_a {
        a_tile a[NUM_CONSUMERS];
    };
    using input_block = std::conditional_t<RESIDENT, streamed_a, streamed_ab>;
    struct b_panel {
        b_tile b[RESIDENT_B_SLICES];
    };
    struct no_panel {};
    using resident_block = std::conditional_t<RESIDENT, b_panel, no_panel>;
    struct plain_output {
        c_tile c[NUM_CONSUMERS][C_BUFFERS][WARPGROUP_WARPS];
    };
    struct biased_output : plain_output {
        bias_vec bias[NUM_CONSUMERS]; // the task's BN bias values, one copy per consumer
    };
    struct scaled_output : plain_output {
        scale_vec col_scale[NUM_CONSUMERS]; // the task's BN column scales, one copy per consumer
    };
    using output_block = std::conditional_t<BIAS, biased_output, std::conditional_t<VECTOR_SCALES, scaled_output, plain_output>>;
    struct consumer_state {
        rt_fl<16, BN> acc;
        rt<T_OUT, 16, BN> out; // the finished block, waiting for store()
    };
    using task = gemm_task;

    // ---- task order (gemm_schedule.cuh)
    __device__ static inline bool get_task(const globals &g, int id, task &t) {
        if constexpr (RESIDENT) return resident_run_task(g, id, t);
        else return banded_task<CFG.super_m>(g, id, t);
    }
    __device__ static inline bool same_resident(const task &a, const task &b) { return same_b_panel(a, b); }

    // ---- producer
    // The three tensor maps fetched at launch, while the block sets its semaphores up: a first load otherwise waits
    // for its map.
    __device__ static inline void prepare(const globals &g) {
        tma::prefetch_maps(g.a);
        tma::prefetch_maps(g.b);
        tma::prefetch_maps(g.c);
        if constexpr (RESIDENT) a_row_prefetch<gemm>::prepare(g);
    }
    __device__ static inline void before_loads(const globals &g, const task &t) {
        if constexpr (RESIDENT) a_row_prefetch<gemm>::before_loads(g, t);
    }

    template <typename DST, typename SRC> __device__ static inline void load_tile(DST &dst, const SRC &src, coord idx, semaphore &bar) {
        if constexpr (CFG.l2_hints) tma::load_async(dst, src, idx, bar, tma::l2::evict_last);
        else tma::load_async(dst, src, idx, bar);
    }
    __device__ static inline void load_b(b_tile &dst, const globals &g, int n, int k, semaphore &bar) {
        if constexpr (B_MAJOR == major::k) load_tile(dst, g.b, {n, k}, bar);
        else load_tile(dst, g.b, {k, n}, bar);
    }
    // Consumer c's A slice k of block row m.
    __device__ static inline coord a_coord(int m, int c, int k) {
        if constexpr (A_MAJOR == major::k) return {m * NUM_CONSUMERS + c, k};
        else return {k, m * NUM_CONSUMERS + c};
    }

    // Stage `iter`: every consumer's A slice, and B's (resident B: into the panel, only while a new column's first
    // task fills it).
    __device__ static inline void load(producer_args<gemm> &p) {
        const int k = p.task.k0 + p.iter;
        const bool with_b = !RESIDENT || p.fill_resident;
        tma::expect_bytes(p.arrived, NUM_CONSUMERS * tma::transfer_bytes<a_tile>::value + (with_b ? tma::transfer_bytes<b_tile>::value : 0));
        for (int c = 0; c < NUM_CONSUMERS; c++) load_tile(p.input.a[c], p.g.a, a_coord(p.task.m, c, k), p.arrived);
        if constexpr (RESIDENT) {
            if (p.fill_resident) load_b(p.resident->b[p.iter], p.g, p.task.n, k, p.arrived);
        } else {
            load_b(p.input.b, p.g, p.task.n, k, p.arrived);
        }
    }

    // ---- consumers
    // The task's bias (or column scale) slice goes to shared memory by cp.async, which needs no registers (the
    // accumulators leave none to spare) and lands long before finish() reads it. The barrier first: every lane of
    // this consumer has finished reading the previous task's slice.
    __device__ static inline void setup(consumer_args<gemm> &c) {
        if constexpr (BIAS || VECTOR_SCALES) warpgroup::sync(c.consumer + 1);
        if constexpr (BIAS) warpgroup::load_async(c.output.bias[c.consumer], c.g.bias, {0, 0, 0, c.task.n});
        if constexpr (VECTOR_SCALES) warpgroup::load_async(c.output.col_scale[c.consumer], c.g.col_scale, {0, 0, 0, c.task.n});
    }

    // Issue this stage's wgmma group (overwriting the accumulators on the first stage), then wait for the previous
    // stage's group, whose stage the main loop hands back.
    __device__ static inline void compute(consumer_args<gemm> &c) {
        auto &a = c.input.a[c.consumer];
        auto &b = [&]() -> b_tile & {
            if constexpr (RESIDENT) return c.resident->b[c.iter];
            else return c.input.b;
        }();
        auto &acc = c.state.acc;
        if (c.iter == 0) {
            if constexpr (A_KMAJOR && B_KMAJOR) warpgroup::mm_ABt(acc, a, b);
            else if constexpr (A_KMAJOR) warpgroup::mm_AB(acc, a, b);
            else if constexpr (B_KMAJOR) warpgroup::mm_AtBt(acc, a, b);
            else warpgroup::mm_AtB(acc, a, b);
        } else {
            if constexpr (A_KMAJOR && B_KMAJOR) warpgroup::mma_ABt(acc, a, b, wgmma::chained);
            else if constexpr (A_KMAJOR) warpgroup::mma_AB(acc, a, b, wgmma::chained);
            else if constexpr (B_KMAJOR) warpgroup::mma_AtBt(acc, a, b, wgmma::chained);
            else warpgroup::mma_AtB(acc, a, b, wgmma::chained);
        }
        warpgroup::mma_async_wait<1>();
    }
    __device__ static inline void drain(consumer_args<gemm> &c) { warpgroup::mma_async_wait<0>(c.state.acc); }

    // ---- epilogue (gemm_epilogue.cuh)
    __device__ static inline void finish(consumer_args<gemm> &c) { epilogue<gemm>::finish(c); }
    __device__ static inline void store(consumer_args<gemm> &c, int first, int last) { epilogue<gemm>::store(c, first, last); }
};

} // namespace tk_gemm
