// The Mamba-2 SSD forward: two kernels (docs/mamba2.md: the decomposition, the choices below and what they cost).
//
// 1. prepare_dt (mamba2_prepare_kernel.cuh, shared with the backward): dt as the scan uses it (bias, softplus, clamp)
//    and its cumulative log-decay cum_t = sum dt A from the start of each chunk of KERNEL_CHUNK tokens, per
//    (batch, head), in fp32 rows padded to whole chunks, plus the sequence ids padded with the last one.
// 2. mamba2_fwd: the scan on the LCSF template. A task walks the sequence chunk by chunk while the producer streams
//    x, z, B, C and the prepared vectors of the next chunks through the ring. Each of the two consumer warpgroups owns
//    one block of COLS head-dimension columns of one head and keeps its state H^T (n x COLS) in fp32 accumulators
//    (the task layout, head pairs or halves: mamba2_tasks.cuh and mamba2_configs.cuh).
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

#include "mamba2_tasks.cuh"

namespace tk_mamba2 {
using namespace kittens;

// ---------------------------------------------------------------- the scan

template <typename T, int P, int N, scan_config CFG> struct mamba2_fwd : scan_tasks<T, P, N, CFG> {
    using tasks = scan_tasks<T, P, N, CFG>;
    using typename tasks::x_tile;
    using typename tasks::bc_tile;
    using typename tasks::vec;
    using typename tasks::image_tile;
    using typename tasks::state_tile;
    using typename tasks::x_gl;
    using typename tasks::bc_gl;
    using typename tasks::vec_gl;
    using typename tasks::T2;
    using typename tasks::task;
    using tasks::CHUNK;
    using tasks::COLS;
    using tasks::HEADS_PER_TASK;
    using tasks::NUM_CONSUMERS;
    using tasks::head_of;
    using tasks::column_block;
    using tasks::head_slot;
    using tasks::state_offset;

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
    static constexpr int INPUT_STAGES = tasks::template ring_stages<input_block, output_block>();
    static_assert(INPUT_STAGES >= 2, "Mamba-2 forward: the ring needs two stages at least");

    struct consumer_state {
        state_tile h; // H^T: this consumer's p columns
        int prev_seq; // the id of the token before the chunk (0 before the first)
    };

    __device__ static inline void load(lcsf::producer_args<mamba2_fwd> &p) {
        tasks::load_stage(p, p.iter, p.g.z, p.input.z, [&] { return p.g.has_z != 0; });
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
        tasks::read_state(c.state.h, init);
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
        chunk::carry_across(c.state.h, cum_last, seq_last, prev_seq);
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
        tasks::write_state(g.final_states + state_offset(g, c.task, c.consumer), c.state.h);
    }
};

} // namespace tk_mamba2
