// GEMM on the LCSF template: C (M x N) = A (M x K) @ B (K x N), fp32 accumulation.
//
// Each task is a (64 * NUM_CONSUMERS) x BN block of C. The producer streams K-slices of A and B through the
// shared-memory ring with TMA; each consumer warpgroup owns 64 rows and runs wgmma straight from the
// swizzled tiles, keeping one stage's wgmma group in flight while it waits for the next stage.
// At the end of a task the accumulators are converted to the output type in registers (finish); the block is
// written out (store: shared tile, then TMA) in pieces after the next task's first wgmma issues (spread over
// its first stages when it has enough of them), so the tensor cores keep working through the epilogue.
//
// Operands may sit in memory either way round ("K-major": K is the contiguous axis, as in an (M, K)
// row-major A or an nn.Linear weight (N, K); "MN-major": the other way). wgmma reads both from shared
// memory (16-bit types only for MN-major: the hardware has no transpose for fp8).
#pragma once

#include "kittens.cuh"

namespace tk_gemm {
using namespace kittens;

enum class major { k, mn };

// L2_HINTS: operands are loaded with L2 evict_last and C is stored with evict_first, so the output streaming
// through L2 does not push out the A and B panels other blocks are about to read.
// CONSUMERS: consumer warpgroups per block, 64 rows each (one for problems too small to fill the GPU).
// BIAS: C = A @ B + bias, a row vector of N values added in fp32 before the one rounding to T_OUT, as a fused
// GEMM epilogue does (nn.Linear). Its BN values per task go to shared memory, which costs the big configuration
// half of its epilogue buffer: give it C_PIECE = 32 there.
// SPLIT_K: for outputs too small to give every SM a block, the contraction is cut into g.splits ranges of
// g.k_per_split iterations; each task adds its fp32 partial block into C (T_OUT = float, zeroed by the host)
// with a TMA reduce-add.
// PHASES: blocks write their output PHASES ways apart within a task (LCSF STORE_PHASES). The blocks otherwise run in
// near lockstep and all write a task's block at the same moment, a burst the memory system drains slower than the
// same bytes spread out.
// RESIDENT_B: for contractions of at most RESIDENT_SLICES K-slices, the whole B panel of a block column (BN x K) stays
// in shared memory (an LCSF resident block) while the block works down that column; the ring then streams A alone.
// Each block takes a contiguous run of tasks down the columns, so it loads B once (or twice where its run crosses
// into the next column). A stage is a third of the bytes; the panel takes the shared memory the B tiles of the ring
// had (4 A stages + panel + 2 epilogue buffers per warp: 224 KB, as the hinted blocks), and streaming a third of the
// bytes is what made it 9-12% faster at K = 256 on warm inputs (on fresh ones only with PREFETCH_AHEAD below; trading
// stages for epilogue buffers lost, perf notes).
// BUFFERS: epilogue pieces a warp may have in flight (0: two, or one where a piece is the whole block).
// VECTOR_SCALES (fp8): the scales are vectors: one per row of A (scale_a[row * scale_a_step], a step of 0 broadcasts
// one value) and one per column of B (g.col_scale). A task's BN column scales go to shared memory as the bias does
// (read straight from global memory in the epilogue, they made ptxas spill in the 128 x 256 blocks).
// PREFETCH_AHEAD (RESIDENT_B): the blocks warm L2 with the A rows of their tasks that many rounds ahead. When the inputs
// come from DRAM (fresh inputs each call, as the bench times them) a new round's A reads otherwise wait behind the
// output writes that keep DRAM busy, and the resident panel's gain was gone: measured 5-10% at K = 256 on fresh inputs,
// within 1% on warm ones (docs/perf-notes.md).
// One K-slice of B (a 128-byte swizzle row of K) for a block BN wide, in B's memory order.
template <typename T_IN, major B_MAJOR, int BN>
using b_slice = std::conditional_t<B_MAJOR == major::k, st<T_IN, BN, 128 / int(sizeof(T_IN))>, st<T_IN, 128 / int(sizeof(T_IN)), BN>>;
inline constexpr int RESIDENT_B_SLICES = 4; // the resident panel holds K <= 4 slices (256 for 16-bit inputs)

template <bool ON, typename B_TILE, int SLICES> struct resident_operand {};
template <typename B_TILE, int SLICES> struct resident_operand<true, B_TILE, SLICES> {
    struct resident_block {
        B_TILE b[SLICES];
    };
};

template <typename T_IN, typename T_OUT, major A_MAJOR, major B_MAJOR, int BN = 256, int STAGES = 4, int C_PIECE = 64,
          bool L2_HINTS = false, int CONSUMERS = 2, int SUPER_M = 16, bool BIAS = false, bool SPLIT_K = false,
          int PHASES = 1, bool RESIDENT_B = false, int BUFFERS = 0, bool VECTOR_SCALES = false>
struct gemm : resident_operand<RESIDENT_B, b_slice<T_IN, B_MAJOR, BN>, RESIDENT_B_SLICES> {
    static constexpr bool FP8 = base_types::fp8<T_IN>;
    static_assert(!FP8 || (A_MAJOR == major::k && B_MAJOR == major::k), "fp8 wgmma reads both operands K-major only");
    static_assert(!SPLIT_K || (std::same_as<T_OUT, float> && !BIAS), "split-K adds fp32 partial sums, without a bias");
    static_assert(!(SPLIT_K && RESIDENT_B), "the resident B panel holds a whole contraction");
    static_assert(!VECTOR_SCALES || (FP8 && !BIAS && !SPLIT_K), "vector scales are an fp8 epilogue");

    static constexpr bool A_KMAJOR = A_MAJOR == major::k, B_KMAJOR = B_MAJOR == major::k;
    static constexpr bool VECTOR_SCALES_ON = VECTOR_SCALES;
    static constexpr int NUM_CONSUMERS = CONSUMERS, INPUT_STAGES = STAGES, RELEASE_LAG = 1;
    static constexpr int STORE_PHASES = PHASES;
    static constexpr int PRODUCER_REGISTERS = 40, CONSUMER_REGISTERS = 232;
    static constexpr int BM = 64 * NUM_CONSUMERS, BLOCK_N = BN;
    static constexpr int BK = 128 / int(sizeof(T_IN)); // one 128-byte swizzle row per K-slice
    static constexpr int C_COLS = C_PIECE;               // epilogue piece width
    static constexpr int PIECES = BN / C_COLS;
    static constexpr int C_BUFFERS = BUFFERS > 0 ? BUFFERS : PIECES > 1 ? 2 : 1; // double-buffer pieces; a whole tile needs one
    static constexpr int RESIDENT_SLICES = RESIDENT_B ? RESIDENT_B_SLICES : 0; // K-slices of the resident B panel
#ifdef GEMM_PREFETCH_AHEAD
    static constexpr int PREFETCH_AHEAD = GEMM_PREFETCH_AHEAD;
#else
    static constexpr int PREFETCH_AHEAD = 2;
#endif
    static_assert(BN % C_COLS == 0, "the epilogue piece width must divide the block width");
    static_assert(PIECES % C_BUFFERS == 0, "pieces take the buffers in turn across tasks: their count must divide the pieces'");

    using a_tile = std::conditional_t<A_MAJOR == major::k, st<T_IN, 64, BK>, st<T_IN, BK, 64>>;
    using b_tile = b_slice<T_IN, B_MAJOR, BN>;
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
        int splits, k_per_split;        // contraction ranges (1 and k_iters unless SPLIT_K)
        const float *scale_a, *scale_b; // per-tensor scales (fp8); null means 1
        bias_gl bias;                   // (N) added to every row of C when BIAS
        int scale_a_step = 0; // VECTOR_SCALES: element stride of scale_a (0: one value for every row)
        scale_gl col_scale{nullptr, 1, 1, 1, 1}; // VECTOR_SCALES: (N) scales of B's columns
    };
    struct streamed_ab {
        a_tile a[NUM_CONSUMERS];
        b_tile b;
    };
    struct streamed_a {
        a_tile a[NUM_CONSUMERS];
    };
    using input_block = std::conditional_t<RESIDENT_B, streamed_a, streamed_ab>;
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
    struct task {
        int m, n, k0, iters; // k0: the first K-slice of this task's contraction range
    };

    static int num_tasks(int M, int N) { return ((M + BM - 1) / BM) * ((N + BN - 1) / BN); }

    // Bands of SUPER_M block-rows walked column by column: the blocks running at one moment share a few
    // A row-panels and B column-panels, which then stay in L2. Split-K repeats the walk once per range.
    __device__ static inline bool get_task(const globals &g, int id, task &t) {
        const int tiles = g.tiles_m * g.tiles_n;
        if constexpr (RESIDENT_B) {
            // Block x runs tasks [x * run, (x + 1) * run) in column-major order (run = ceil(tiles / blocks): no more
            // rounds than any order), so consecutive tasks share their B panel.
            const int blocks = gridDim.x, run = (tiles + blocks - 1) / blocks;
            const int round = id / blocks, linear = (id - round * blocks) * run + round;
            if (round >= run || linear >= tiles) return false;
            t.n = linear / g.tiles_m;
            t.m = linear - t.n * g.tiles_m;
            t.k0 = 0;
            t.iters = g.k_iters;
            return true;
        }
        if (id >= tiles * g.splits) return false;
        const int split = id / tiles;
        id -= split * tiles;
        int band = id / (SUPER_M * g.tiles_n);
        int first_m = band * SUPER_M;
        int rows = min(SUPER_M, g.tiles_m - first_m);
        int in_band = id - band * SUPER_M * g.tiles_n;
        t.m = first_m + in_band % rows;
        t.n = in_band / rows;
        t.k0 = split * g.k_per_split;
        t.iters = min(g.k_per_split, g.k_iters - t.k0);
        return true;
    }

    template <typename DST, typename SRC> __device__ static inline void load_tile(DST &dst, const SRC &src, coord idx, semaphore &bar) {
        if constexpr (L2_HINTS) tma::load_async(dst, src, idx, bar, tma::l2::evict_last);
        else tma::load_async(dst, src, idx, bar);
    }
    __device__ static inline void load_b(b_tile &dst, const globals &g, int n, int k, semaphore &bar) {
        if constexpr (B_MAJOR == major::k) load_tile(dst, g.b, {n, k}, bar);
        else load_tile(dst, g.b, {k, n}, bar);
    }

    // Stage `iter`: both consumers' A slices, and B's (with RESIDENT_B: into the resident panel, only while a new
    // column's first task fills it).
    __device__ static inline void load(lcsf::producer_args<gemm> &p) {
        const int k = p.task.k0 + p.iter;
        const bool with_b = !RESIDENT_B || p.fill_resident;
        tma::expect_bytes(p.arrived, NUM_CONSUMERS * tma::transfer_bytes<a_tile>::value + (with_b ? tma::transfer_bytes<b_tile>::value : 0));
        for (int c = 0; c < NUM_CONSUMERS; c++) load_tile(p.input.a[c], p.g.a, a_coord(p.task.m, c, k), p.arrived);
        if constexpr (RESIDENT_B) {
            if (p.fill_resident) load_b(p.resident->b[p.iter], p.g, p.task.n, k, p.arrived);
        } else {
            load_b(p.input.b, p.g, p.task.n, k, p.arrived);
        }
    }
    __device__ static inline bool same_resident(const task &a, const task &b) { return a.n == b.n; }

    // Consumer c's A slice k of block row m.
    __device__ static inline coord a_coord(int m, int c, int k) {
        if constexpr (A_MAJOR == major::k) return {m * NUM_CONSUMERS + c, k};
        else return {k, m * NUM_CONSUMERS + c};
    }
    // RESIDENT_B: L2 prefetches of the A row that this block's run reaches PREFETCH_AHEAD tasks on (on the run's first
    // task, of every row up to there), issued while the producer waits for the task's first stage. A row is read in
    // the same round by the blocks of every block column (each run covers the same rows of its column), so the
    // prefetch of its boxes (K-slices x consumers) is shared out: column n takes boxes n, n + tiles_n, ...; one TMA
    // request per block and task in the common case. (Issued from load(), the same requests cost 4-7% on warm inputs:
    // the producer's stage loop no longer unrolled.)
    __device__ static inline void before_loads(const globals &g, const task &t) {
        if constexpr (RESIDENT_B) {
            const int run = prefetch_run(), first = blockIdx.x * run, linear = t.n * g.tiles_m + t.m;
            if (run == 0) return;
            const int last = min(first + run, g.tiles_m * g.tiles_n) - 1; // the run's last task
            const int boxes = g.k_iters * NUM_CONSUMERS;
            for (int ahead = linear == first ? 1 : PREFETCH_AHEAD; ahead <= PREFETCH_AHEAD; ahead++) {
                const int m = t.m + ahead;
                if (linear + ahead > last || m >= g.tiles_m) return; // past the run, or in the next column
                for (int box = t.n; box < boxes; box += g.tiles_n)
                    tma::prefetch<a_tile>(g.a, a_coord(m, box % NUM_CONSUMERS, box / NUM_CONSUMERS));
            }
        }
    }

    // The three tensor maps fetched at launch, while the block sets its semaphores up (measured: ~0.1 us of a
    // 17 us 4096x4096x256 call, within noise elsewhere; a first load otherwise waits for its map).
    __device__ static inline void prepare(const globals &g) {
        tma::prefetch_maps(g.a);
        tma::prefetch_maps(g.b);
        tma::prefetch_maps(g.c);
        if constexpr (RESIDENT_B) {
            const int run = (g.tiles_m * g.tiles_n + gridDim.x - 1) / gridDim.x;
            prefetch_run() = g.tiles_m % run == 0 && g.k_iters >= INPUT_STAGES ? run : 0;
        }
    }
    // RESIDENT_B: the length of every block's run of tasks where the A prefetch pays, else 0 (set at launch, so the
    // producer divides nothing per task). It pays where every column's runs cover the same rows (otherwise a row's
    // boxes are not all prefetched by someone) and where the ring cannot hold a whole task ahead (K = 128: 3-5% slower
    // on fresh inputs with it, 4000x3000x200, whose runs cross columns, up to 5%).
    __device__ static inline int &prefetch_run() {
        __shared__ int run;
        return run;
    }

    // The task's bias (or column scale) slice goes to shared memory by cp.async, which needs no registers (the
    // accumulators leave none to spare) and lands long before finish() reads it. The barrier first: every lane of
    // this consumer has finished reading the previous task's slice.
    __device__ static inline void setup(lcsf::consumer_args<gemm> &c) {
        if constexpr (BIAS || VECTOR_SCALES) warpgroup::sync(c.consumer + 1);
        if constexpr (BIAS) warpgroup::load_async(c.output.bias[c.consumer], c.g.bias, {0, 0, 0, c.task.n});
        if constexpr (VECTOR_SCALES) warpgroup::load_async(c.output.col_scale[c.consumer], c.g.col_scale, {0, 0, 0, c.task.n});
    }

    // Issue this stage's wgmma group (overwriting the accumulators on the first stage), then wait for the
    // previous stage's group, whose stage the template hands back.
    __device__ static inline void compute(lcsf::consumer_args<gemm> &c) {
        auto &a = c.input.a[c.consumer];
        auto &b = [&]() -> b_tile & {
            if constexpr (RESIDENT_B) return c.resident->b[c.iter];
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

    __device__ static inline void drain(lcsf::consumer_args<gemm> &c) { warpgroup::mma_async_wait<0>(c.state.acc); }

    // Accumulators -> output type (with the fp8 scales, or plus the bias in fp32 before the one rounding, as a
    // fused GEMM epilogue does), in registers.
    __device__ static inline void finish(lcsf::consumer_args<gemm> &c) {
        float scale = 1.f;
        if constexpr (FP8 && !VECTOR_SCALES) {
            if (c.g.scale_a) scale *= *c.g.scale_a;
            if (c.g.scale_b) scale *= *c.g.scale_b;
        }
        // VECTOR_SCALES: the scales of this lane's two rows (g and g + 8 of its warp's 16).
        float row_scale[2] = {1.f, 1.f};
        if constexpr (VECTOR_SCALES) {
            const int row = ((c.task.m * NUM_CONSUMERS + c.consumer) * WARPGROUP_WARPS + warpgroup::warpid()) * 16 + laneid() / 4;
#pragma unroll
            for (int h = 0; h < 2; h++)
                if (row + 8 * h < c.g.c.rows()) row_scale[h] = c.g.scale_a[(row + 8 * h) * c.g.scale_a_step];
        }
        // This lane's bias (or column scale) columns in base tile t: 16 t + 2 (lane % 4), and 8 further for pairs
        // k = 2, 3. Columns past N were zero-filled and are not stored.
        const T_OUT *bias_row = nullptr;
        const float *scale_col = nullptr;
        if constexpr (BIAS || VECTOR_SCALES) {
            detail::memory::cp_async_wait<0>();
            warpgroup::sync(c.consumer + 1);
        }
        if constexpr (BIAS) bias_row = &c.output.bias[c.consumer].data[2 * (laneid() % 4)];
        if constexpr (VECTOR_SCALES) scale_col = &c.output.col_scale[c.consumer].data[2 * (laneid() % 4)];
#pragma unroll
        for (int t = 0; t < BN / 16; t++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 v = c.state.acc.tiles[0][t].data[k];
                if constexpr (VECTOR_SCALES) { // pair k: row g (k even) or g + 8
                    const float2 sb = *reinterpret_cast<const float2 *>(scale_col + 16 * t + 8 * (k >> 1));
                    const float sa = row_scale[k & 1];
                    v = float2{v.x * sa * sb.x, v.y * sa * sb.y};
                } else if constexpr (FP8) {
                    v = float2{v.x * scale, v.y * scale};
                }
                if constexpr (BIAS) {
                    using pair = typename rt<T_OUT, 16, BN>::T2;
                    const float2 b = convert<float2>(*reinterpret_cast<const pair *>(bias_row + 16 * t + 8 * (k >> 1)));
                    v = float2{v.x + b.x, v.y + b.y};
                }
                c.state.out.tiles[0][t].data[k] = convert<typename rt<T_OUT, 16, BN>::T2>(v);
            }
        // Pin the converted values here: otherwise the compiler may sink the conversion past the next task's
        // first wgmma, which overwrites the accumulators (ptxas then has to wait for that wgmma to finish).
        static_assert(sizeof(c.state.out) % 4 == 0);
        uint32_t *words = reinterpret_cast<uint32_t *>(&c.state.out);
#pragma unroll
        for (int w = 0; w < int(sizeof(c.state.out) / 4); w++) asm volatile("" : "+r"(words[w])::"memory");
    }

    // The finished block -> shared memory -> global memory, C_COLS columns at a time: pieces [first, last) of it.
    // Each warp moves its own 16 rows (stmatrix, then a TMA store it issues and waits for itself), so no barrier
    // across the warpgroup holds a piece up: in a stamped timeline the two warpgroup barriers of the former
    // 64-row pieces took more of a piece's ~700 cycles than the shared-memory writes (tools/gemm_timeline.cu).
    static constexpr int STORE_PIECES = PIECES;
    __device__ static inline void store(lcsf::consumer_args<gemm> &c, int first, int last) {
        const int w = warpgroup::warpid();
        const bool leader = laneid() == 0;
        rt<T_OUT, 16, C_COLS> piece;
#pragma unroll
        for (int j = 0; j < PIECES; j++) {
            if (j < first || j >= last) continue; // j stays a compile-time index into the stash
            c_tile &buf = c.output.c[c.consumer][j % C_BUFFERS][w];
            if (leader) tma::store_async_read_wait<C_BUFFERS - 1>(); // this warp's store that last used `buf` has read it
            __syncwarp();
#pragma unroll
            for (int t = 0; t < C_COLS / 16; t++) piece.tiles[0][t] = c.state.out.tiles[0][j * (C_COLS / 16) + t];
            kittens::store(buf, piece);
            async_proxy_fence(); // generic writes -> TMA reads
            __syncwarp();
            if (leader) {
                const coord at{(c.task.m * NUM_CONSUMERS + c.consumer) * WARPGROUP_WARPS + w, c.task.n * PIECES + j};
                if constexpr (SPLIT_K) tma::store_add_async(c.g.c, buf, at);
                else if constexpr (L2_HINTS) tma::store_async(c.g.c, buf, at, tma::l2::evict_first);
                else tma::store_async(c.g.c, buf, at);
                tma::store_commit_group();
            }
        }
    }
};

} // namespace tk_gemm
