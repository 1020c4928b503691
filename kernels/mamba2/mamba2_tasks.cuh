// The task layout of the Mamba-2 scan kernels, one for the forward (mamba2_fwd_kernel.cuh) and both walks of the
// backward (mamba2_bwd_kernel.cuh): the backward's carried terms cancel only if its walks split the work exactly as
// the forward does. A task is a (batch row, heads) pair walked chunk by chunk; each consumer warpgroup owns one block
// of COLS head-dimension columns of one head (scan_config, mamba2_configs.cuh) and keeps that block's state transposed
// (n x COLS) in fp32 accumulators. Here: the tiles of a chunk's stage, which head and columns a consumer owns, where
// its state sits in a (b, h, p, n) tensor, and the producer's loads of a stage.
#pragma once

#include "mamba2_chunk.cuh"
#include "mamba2_configs.cuh"

namespace tk_mamba2 {
using namespace kittens;

template <typename T, int P, int N, scan_config CFG> struct scan_tasks {
    static_assert(supported_dim(P) && supported_dim(N), "Mamba-2 scan: p and n are 64 or 128");
    static_assert(!CFG.head_pair || P == 64, "Mamba-2 scan: a consumer holds a whole head's state only for p = 64");
    static constexpr int CHUNK = KERNEL_CHUNK;
    static constexpr int NUM_CONSUMERS = CFG.consumers;
    static constexpr int PRODUCER_REGISTERS = CFG.producer_registers, CONSUMER_REGISTERS = CFG.consumer_registers;
    static constexpr int HEADS_PER_TASK = CFG.head_pair ? NUM_CONSUMERS : 1;
    static constexpr int COLS = CFG.head_pair ? P : P / NUM_CONSUMERS; // head-dimension columns per consumer

    using x_tile = st<T, CHUNK, COLS>; // one consumer's columns of a (b, h, l, p) tensor in one chunk
    using bc_tile = st<T, CHUNK, N>;
    using vec = chunk::vec;
    using image_tile = st<T, N, COLS>;     // a state's transpose in 16 bits: the B operand of a product with it
    using state_tile = rt_fl<N / 4, COLS>; // a state's transpose: warp w holds rows 64 i + 16 w .. of slab i
    using x_gl = gl<T, -1, -1, -1, -1, x_tile>;
    using bc_gl = gl<T, -1, -1, -1, -1, bc_tile>;
    using vec_gl = gl<float, -1, -1, -1, -1, vec>;
    using T2 = typename base_types::packed_t<T>;

    struct task {
        int b, h, iters; // h: the task's first head
    };

    // Ring stages of In that fit next to Out and the ring's semaphores in shared memory, at most CFG.max_stages.
    template <typename In, typename Out> static constexpr int ring_stages() {
        const int fit = int((MAX_SHARED_MEMORY - sizeof(Out) - 2048) / sizeof(In));
        return fit < CFG.max_stages ? fit : CFG.max_stages;
    }

    // G: a kernel's globals, with num_tasks, task_heads (heads / HEADS_PER_TASK), chunks, heads.
    template <typename G> __device__ static inline bool get_task(const G &g, int id, task &t) {
        if (id >= g.num_tasks) return false;
        // Heads of one group are neighbours in time, so their B and C tiles come from L2.
        t.b = id / g.task_heads;
        t.h = (id - t.b * g.task_heads) * HEADS_PER_TASK;
        t.iters = g.chunks;
        return true;
    }

    // The head consumer c works on, its block of columns among the head's p, and its index among the task's heads.
    __device__ static inline int head_of(const task &t, int consumer) { return t.h + (CFG.head_pair ? consumer : 0); }
    __device__ static inline int column_block(int consumer) { return CFG.head_pair ? 0 : consumer; }
    __device__ static inline int head_slot(int consumer) { return CFG.head_pair ? consumer : 0; }

    // The state row (index into n) of a pair of the state accumulator: slab i, this warp's 16 rows.
    __device__ static inline int state_row(const pair_pos &p) {
        return 64 * p.i + warpgroup::warp_row0() + (p.row - TILE_DIM * p.i);
    }
    // Where this consumer's columns of the (b, h, p, n) state of the task start.
    template <typename G> __device__ static inline size_t state_offset(const G &g, const task &t, int consumer) {
        return (size_t(t.b) * g.heads + head_of(t, consumer)) * size_t(P) * N + size_t(column_block(consumer)) * COLS * N;
    }

    // A state accumulator from (b, h, p, n) fp32 at `src` (this consumer's columns), or zeros.
    __device__ static inline void read_state(state_tile &state, const float *src) {
        for_each_pair([&](pair_pos p, float2 &s) {
            const int n = state_row(p);
            s.x = src ? src[size_t(p.col) * N + n] : 0.f;
            s.y = src ? src[size_t(p.col + 1) * N + n] : 0.f;
        }, state);
    }
    // A state accumulator into (b, h, p, n) fp32 at `dst` (this consumer's columns).
    __device__ static inline void write_state(float *dst, const state_tile &state) {
        for_each_pair([&](pair_pos p, const float2 &s) {
            const int n = state_row(p);
            dst[size_t(p.col) * N + n] = s.x;
            dst[size_t(p.col + 1) * N + n] = s.y;
        }, state);
    }

    // Chunk `chunk`'s stage: both consumers' columns of x and, where second_present() says so, of a second
    // (b, h, l, p) tensor (the forward's gate, when there is one; the backward's dy), B, C, the task's heads' dt and
    // cum, and the ids when there are any.
    template <typename K, typename PRESENT>
    __device__ static inline void load_stage(lcsf::producer_args<K> &p, int chunk, const x_gl &second_src,
                                             x_tile (&second)[NUM_CONSUMERS], const PRESENT &second_present) {
        const auto &g = p.g;
        const int b = p.task.b, h = p.task.h, grp = h / g.heads_per_group;
        constexpr uint32_t x_bytes = tma::transfer_bytes<x_tile>::value, bc_bytes = tma::transfer_bytes<bc_tile>::value,
                           v_bytes = tma::transfer_bytes<vec>::value;
        uint32_t bytes = NUM_CONSUMERS * x_bytes + 2 * bc_bytes + 2 * HEADS_PER_TASK * v_bytes;
        if (second_present()) bytes += NUM_CONSUMERS * x_bytes;
        if (g.has_seq) bytes += v_bytes;
        tma::expect_bytes(p.arrived, bytes);
#pragma unroll
        for (int c = 0; c < NUM_CONSUMERS; c++) {
            tma::load_async(p.input.x[c], g.x, {b, head_of(p.task, c), chunk, column_block(c)}, p.arrived);
            if (second_present())
                tma::load_async(second[c], second_src, {b, head_of(p.task, c), chunk, column_block(c)}, p.arrived);
        }
        tma::load_async(p.input.B, g.B, {b, grp, chunk, 0}, p.arrived);
        tma::load_async(p.input.C, g.C, {b, grp, chunk, 0}, p.arrived);
#pragma unroll
        for (int k = 0; k < HEADS_PER_TASK; k++) {
            tma::load_async(p.input.dt[k], g.dt, {b, h + k, 0, chunk}, p.arrived);
            tma::load_async(p.input.cum[k], g.cum, {b, h + k, 0, chunk}, p.arrived);
        }
        if (g.has_seq) tma::load_async(p.input.seq, g.seq, {b, 0, 0, chunk}, p.arrived);
    }
};

} // namespace tk_mamba2
