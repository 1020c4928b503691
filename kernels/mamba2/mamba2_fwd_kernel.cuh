// The Mamba-2 SSD forward: two kernels (docs/mamba2.md: the decomposition, the choices below and what they cost).
//
// 1. prepare_dt (mamba2_prepare.cu, shared with the backward): dt as the scan uses it (bias, softplus, clamp) and its cumulative log-decay cum_t = sum dt A from
//    the start of each chunk of KERNEL_CHUNK tokens, per (batch, head), in fp32 rows padded to whole chunks (dt = 0
//    past the end, so a padded token decays nothing and adds nothing), plus the sequence ids padded with the last
//    one. dt arrives (b, l, h) with the heads innermost; the scan wants each head's tokens contiguous for TMA.
// 2. mamba2_fwd: the scan on the LCSF template. A task walks the sequence chunk by chunk while the producer streams
//    x, z, B, C and the prepared vectors of the next chunks through the ring. Each of the two consumer warpgroups owns
//    one block of COLS head-dimension columns of one head and keeps its state H^T (n x COLS) in fp32 accumulators:
//    with HEAD_PAIR (p = 64, an even number of heads per group) a task is two heads of one group, one per consumer,
//    all p columns each; otherwise a task is one head whose p columns the consumers split in halves. Either way a
//    consumer needs nothing from the other (no barrier between them); the price is that C B^T, which the heads of a
//    group share, is computed once per consumer.
//    Per chunk of T = 64 tokens, with L_ij = exp(cum_i - cum_j) for j <= i:
//      a. issue S = C B^T and Y = C H^T (the carried state, from its 16-bit image in shared memory);
//      b. meanwhile Xw = x diag(w), w_j = exp(cum_last - cum_j) dt_j, into shared memory (the chunk-state operand);
//      c. P = S o L o dt_j (in registers, like attention's probabilities), Y = diag(exp(cum_i)) Y + P x;
//      d. issue H^T = exp(cum_last) H^T + B^T Xw, and while it runs finish Y: + D x, * silu(z), TMA store;
//      e. the 16-bit image of the new state for the next chunk.
//    seq_idx (packed sequences): pairs (i, j) of different ids drop out of P, rows whose id differs from the token
//    before the chunk get no carried state, tokens whose id differs from the chunk's last add nothing to the state,
//    and the carried state is dropped when the chunk's last token is in another sequence than the token before it:
//    exactly the reference's chunked form, compared on ids held next to the decays.
// Ragged length: TMA zero-fills x, z, B, C past the end and the prepared dt there is 0; rows past the end are
// computed and never stored (the TMA store clips them).
#pragma once

#include "mamba2_chunk.cuh"

namespace tk_mamba2 {
using namespace kittens;

// ---------------------------------------------------------------- the scan

template <typename T, int P, int N, bool HEAD_PAIR> struct mamba2_fwd {
    static_assert(supported_dim(P) && supported_dim(N), "Mamba-2 forward: p and n are 64 or 128");
    static_assert(!HEAD_PAIR || P == 64, "Mamba-2 forward: a consumer holds a whole head's state only for p = 64");
    static constexpr int CHUNK = KERNEL_CHUNK;
    // Head pairs: a task takes two heads of one group, one per consumer, each with all p columns. Otherwise a task is
    // one head and the consumers split its p columns.
    static constexpr int HEADS_PER_TASK = HEAD_PAIR ? 2 : 1;
    static constexpr int COLS = HEAD_PAIR ? P : P / 2; // head-dimension columns per consumer
    static constexpr int NUM_CONSUMERS = 2;
    // Two consumers and a producer: 384 threads, so ptxas fits each thread in 168 registers.
    static constexpr int PRODUCER_REGISTERS = 24, CONSUMER_REGISTERS = 240;

    using x_tile = st<T, CHUNK, COLS>; // one consumer's columns of x, z, Xw and the output
    using bc_tile = st<T, CHUNK, N>;
    using vec = sv_fl<CHUNK>;
    using image_tile = st<T, N, COLS>; // H^T in 16 bits: the B operand of C H^T
    using x_gl = gl<T, -1, -1, -1, -1, x_tile>;
    using bc_gl = gl<T, -1, -1, -1, -1, bc_tile>;
    using vec_gl = gl<float, -1, -1, -1, -1, vec>;
    using T2 = typename base_types::packed_t<T>;

    struct globals {
        x_gl x, z, out;     // (b, h, l, p) views
        bc_gl B, C;         // (b, g, l, n) views
        vec_gl dt, cum;     // (b, h, 1, padded_len)
        vec_gl seq;         // (b, 1, 1, padded_len)
        const float *D;     // (h,) or (h, p), or null
        const float *initial_states;
        float *final_states;
        int D_per_channel, heads, heads_per_group, chunks, num_tasks, has_z, has_seq;
        int task_heads; // heads / HEADS_PER_TASK
    };
    struct input_block {
        x_tile x[NUM_CONSUMERS], z[NUM_CONSUMERS];
        bc_tile B, C;
        vec dt[HEADS_PER_TASK], cum[HEADS_PER_TASK]; // per head of the task
        vec seq;
    };
    struct output_block {
        x_tile xw[NUM_CONSUMERS];
        image_tile image[NUM_CONSUMERS];
        x_tile staging[NUM_CONSUMERS]; // the output on its way to the TMA store
    };
    static constexpr int INPUT_STAGES = chunk::ring_stages<input_block, output_block>();
    static_assert(INPUT_STAGES >= 2, "Mamba-2 forward: the ring needs two stages at least");

    struct consumer_state {
        rt_fl<N / 4, COLS> h; // H^T: warp w holds state rows 64 i + 16 w .. of slab i, this consumer's p columns
        int prev_seq;           // the id of the token before the chunk (0 before the first)
    };
    struct task {
        int b, h, iters; // h: the task's first head
    };

    __device__ static inline bool get_task(const globals &g, int id, task &t) {
        if (id >= g.num_tasks) return false;
        // Heads of one group are neighbours in time, so their B and C tiles come from L2.
        t.b = id / g.task_heads;
        t.h = (id - t.b * g.task_heads) * HEADS_PER_TASK;
        t.iters = g.chunks;
        return true;
    }

    __device__ static inline void load(lcsf::producer_args<mamba2_fwd> &p) {
        const globals &g = p.g;
        const int b = p.task.b, h = p.task.h, grp = h / g.heads_per_group, i = p.iter;
        constexpr uint32_t x_bytes = tma::transfer_bytes<x_tile>::value, bc_bytes = tma::transfer_bytes<bc_tile>::value,
                           v_bytes = tma::transfer_bytes<vec>::value;
        uint32_t bytes = NUM_CONSUMERS * x_bytes + 2 * bc_bytes + 2 * HEADS_PER_TASK * v_bytes;
        if (g.has_z) bytes += NUM_CONSUMERS * x_bytes;
        if (g.has_seq) bytes += v_bytes;
        tma::expect_bytes(p.arrived, bytes);
#pragma unroll
        for (int c = 0; c < NUM_CONSUMERS; c++) {
            tma::load_async(p.input.x[c], g.x, {b, head_of(p.task, c), i, column_block(c)}, p.arrived);
            if (g.has_z) tma::load_async(p.input.z[c], g.z, {b, head_of(p.task, c), i, column_block(c)}, p.arrived);
        }
        tma::load_async(p.input.B, g.B, {b, grp, i, 0}, p.arrived);
        tma::load_async(p.input.C, g.C, {b, grp, i, 0}, p.arrived);
#pragma unroll
        for (int k = 0; k < HEADS_PER_TASK; k++) {
            tma::load_async(p.input.dt[k], g.dt, {b, h + k, 0, i}, p.arrived);
            tma::load_async(p.input.cum[k], g.cum, {b, h + k, 0, i}, p.arrived);
        }
        if (g.has_seq) tma::load_async(p.input.seq, g.seq, {b, 0, 0, i}, p.arrived);
    }

    // The head consumer c works on, its first column among the head's p, and its index among the task's heads.
    __device__ static inline int head_of(const task &t, int consumer) { return t.h + (HEAD_PAIR ? consumer : 0); }
    __device__ static inline int column_block(int consumer) { return HEAD_PAIR ? 0 : consumer; }
    __device__ static inline int head_slot(int consumer) { return HEAD_PAIR ? consumer : 0; }

    // The state row (index into n) of a pair of the state accumulator: slab i, this warp's 16 rows.
    __device__ static inline int state_row(const pair_pos &p) {
        return 64 * p.i + warpgroup::warp_row0() + (p.row - TILE_DIM * p.i);
    }
    // Where this consumer's columns of the (b, h, p, n) state of the task start.
    __device__ static inline size_t state_offset(const globals &g, const task &t, int consumer) {
        return (size_t(t.b) * g.heads + head_of(t, consumer)) * size_t(P) * N + size_t(column_block(consumer)) * COLS * N;
    }

    // The 16-bit image of this consumer's state, for the next chunk's C H^T.
    __device__ static inline void write_image(lcsf::consumer_args<mamba2_fwd> &c) {
        rt<T, N / 4, COLS> image;
        copy(image, c.state.h);
        warpgroup::store(c.output.image[c.consumer], image);
        async_proxy_fence(); // read by wgmma (the async proxy) after the barrier
        warpgroup::sync();
    }

    __device__ static inline void setup(lcsf::consumer_args<mamba2_fwd> &c) {
        const globals &g = c.g;
        c.state.prev_seq = 0;
        const float *init = g.initial_states ? g.initial_states + state_offset(g, c.task, c.consumer) : nullptr;
        for_each_pair([&](pair_pos p, float2 &s) {
            const int n = state_row(p);
            s.x = init ? init[size_t(p.col) * N + n] : 0.f;
            s.y = init ? init[size_t(p.col + 1) * N + n] : 0.f;
        }, c.state.h);
        write_image(c);
    }

    __device__ static inline void compute(lcsf::consumer_args<mamba2_fwd> &c) {
        const globals &g = c.g;
        input_block &in = c.input;
        output_block &out = c.output;
        const int me = c.consumer;
        const bool has_seq = g.has_seq;
        const vec &dt_v = in.dt[head_slot(me)], &cum_v = in.cum[head_slot(me)];

        // a. The tensor cores start on S = C B^T and on the carried state's part of the output, C H^T.
        rt_fl<TILE_DIM, CHUNK> s;
        rt_fl<TILE_DIM, COLS> y;
        warpgroup::mm_ABt(s, in.C, in.B);
        warpgroup::mm_AB(y, in.C, out.image[me]);

        // b. Meanwhile: this lane's two rows (tokens) and Xw = x diag(w) for the chunk state.
        const float cum_last = cum_v.data[CHUNK - 1];
        const int seq_last = chunk::seq_at(in.seq, has_seq, CHUNK - 1);
        const int prev_seq = c.state.prev_seq;
        const chunk::lane_rows r = chunk::rows_of_lane(cum_v, in.seq, has_seq);
        const chunk::row_weights w = chunk::weights_of_rows(r, dt_v, cum_last, prev_seq, seq_last);
        rt<T, TILE_DIM, COLS> x;
        warpgroup::load(x, in.x[me]);
        chunk::store_weighted_rows(out.xw[me], x, w.to_end_dt); // read by wgmma after the barrier below

        // c. P = S o L o dt (causal, same sequence), then Y = diag(exp(cum_i)) C H^T + P x.
        warpgroup::mma_async_wait(s, y);
        chunk::causal_decay(s, cum_v, dt_v, in.seq, has_seq, r);
        rt<T, TILE_DIM, CHUNK> pt;
        copy(pt, s);
        chunk::scale_rows(y, w.from_prev);
        warpgroup::mma_AB(y, pt, in.x[me]);

        // d. The state: H^T = exp(cum_last) H^T + B^T Xw, the carried part dropped when the chunk's last token starts
        // another sequence than the token before the chunk.
        const bool carry = seq_last == prev_seq;
        const float decay = chunk::decay_exp(cum_last);
        for_each_pair([&](pair_pos, float2 &v) {
            v.x = carry ? v.x * decay : 0.f;
            v.y = carry ? v.y * decay : 0.f;
        }, c.state.h);
        c.state.prev_seq = seq_last;
        warpgroup::sync(); // every warp's rows of Xw are written
        warpgroup::mma_AtB(c.state.h, in.B, out.xw[me]);

        // While the state product runs, finish the output: + D x, * silu(z), in fp32 until the store.
        warpgroup::mma_async_wait<1>(y);
        if (g.D) {
            const int head = head_of(c.task, me);
            if (g.D_per_channel) {
                const float *d = g.D + size_t(head) * P + column_block(me) * COLS;
                for_each_pair([&](pair_pos p, float2 &v, const T2 &xv) {
                    const float2 xf = base_types::convertor<float2, T2>::convert(xv);
                    v.x = fmaf(__ldg(d + p.col), xf.x, v.x);
                    v.y = fmaf(__ldg(d + p.col + 1), xf.y, v.y);
                }, y, x);
            } else {
                const float d = __ldg(g.D + head);
                for_each_pair([&](pair_pos, float2 &v, const T2 &xv) {
                    const float2 xf = base_types::convertor<float2, T2>::convert(xv);
                    v.x = fmaf(d, xf.x, v.x);
                    v.y = fmaf(d, xf.y, v.y);
                }, y, x);
            }
        }
        if (g.has_z) {
            rt<T, TILE_DIM, COLS> z;
            warpgroup::load(z, in.z[me]);
            // z sigmoid(z) = z / (1 + exp(-z)); the approximate division returns 0 where exp(-z) overflows.
            for_each_pair([&](pair_pos, float2 &v, const T2 &zv) {
                const float2 zf = base_types::convertor<float2, T2>::convert(zv);
                v.x *= __fdividef(zf.x, 1.f + chunk::decay_exp(-zf.x));
                v.y *= __fdividef(zf.y, 1.f + chunk::decay_exp(-zf.y));
            }, y, z);
        }
        rt<T, TILE_DIM, COLS> o;
        copy(o, y);
        // The previous chunk's store must have finished reading the staging tile.
        if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
        warpgroup::sync();
        warpgroup::store(out.staging[me], o);
        async_proxy_fence();
        warpgroup::sync();
        if (warpgroup::laneid() == 0) {
            tma::store_async(g.out, out.staging[me], {c.task.b, head_of(c.task, me), c.iter, column_block(me)});
            tma::store_commit_group();
        }

        // e. The new state's image; the barrier in write_image also keeps the next chunk's Xw writes behind this
        // chunk's state product on every warp.
        warpgroup::mma_async_wait(c.state.h);
        write_image(c);
    }

    // The final state, if asked for: this consumer's p columns of (b, h, p, n).
    __device__ static inline void finish(lcsf::consumer_args<mamba2_fwd> &c) {
        const globals &g = c.g;
        if (!g.final_states) return;
        float *dst = g.final_states + state_offset(g, c.task, c.consumer);
        for_each_pair([&](pair_pos p, const float2 &s) {
            const int n = state_row(p);
            dst[size_t(p.col) * N + n] = s.x;
            dst[size_t(p.col + 1) * N + n] = s.y;
        }, c.state.h);
    }
};

} // namespace tk_mamba2
