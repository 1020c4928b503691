// The Mamba-2 SSD backward: two scans over the chunks on the LCSF template, with the forward's task and consumer
// layout (mamba2_tasks.cuh; docs/mamba2.md, "The backward": the derivation, the choices below and what they cost).
//
// With dy the gradient of the scan's output before D and the gate, g_t = dL/dh_t (p x n) obeys the reversed
// recurrence g_t = dy_t C_t^T + exp(dt_{t+1} A) g_{t+1}, seeded with the final states' gradient. Then
//     dx_t = dt_t g_t B_t + D dy_t,   dB_t = dt_t g_t^T x_t,   dC_t = h_t^T dy_t,
// and the log-decays take dL/dcum_t = dy_t . (h_t C_t) - dt_t x_t . (g_t B_t) (+ <dh_final, h_final> at the last
// token), whose reverse cumulative sum is dL/d(dt_t A) (finished on the host side with the dt chain). Both terms sum
// over pairs (output token i, input token j): Q_ij = exp(cum_i - cum_j) dt_j (dy_i . x_j)(C_i . B_j), the first over
// the pair's output token, the second over its input token, so that the exact dL/dcum sums to zero over a sequence and
// its reverse cumulative sum is a difference of nearly equal sums. Pairs inside a chunk therefore enter through one
// fp32 matrix Q, as rowsum - colsum (exactly antisymmetric); pairs across chunks come from the two walks' carried
// states, which each walk hands to its products as 16-bit hi + lo images (the fp32 state to about 2^-16), with each
// pair's weighted rows rounded the same way on both walks, so that their roundings cancel too.
//
// 1. mamba2_bwd_dc walks the chunks forward carrying h exactly as the forward does (H^T, x weighted into Xw) and per
//    chunk computes dC = diag(exp cum) dY H + (L o dY X^T) B, with L the forward's causal weights (dt_j included), and
//    the carried states' part of dy . (h C), rowsum(diag(exp cum) dY H o C).
// 2. mamba2_bwd_dx walks them backward carrying G^T = (dL/dh at the chunk's end)^T (n x columns), and per chunk:
//      GB = (M o B C^T) dY + diag(w) B G^T  (M_ts = exp(cum_s - cum_t), s >= t; w_t = exp(cum_last - cum_t))
//      dx = diag(dt) GB + D dy,   x . (g B) = rowsum(X o GB), its carried part rowsum(X o diag(w) B G^T)
//      dB = diag(dt) [(M o X dY^T) C + diag(w) X G],   Q^T = (M o B C^T) o (dt M o X dY^T)
//      G^T <- exp(cum_last) G^T + C^T diag(exp cum) dY      (the end of the previous chunk)
// Each consumer owns the forward's block of columns of one head, so the per-head sums over p and the sums over the
// heads of a group (dB, dC) meet in fp32 accumulators in global memory: TMA reduce-adds of 64-column blocks for dB
// and dC, atomic adds for the per-token vectors and dD. Everything else is computed exactly once.
// seq_idx masks as in the forward: pairs of different ids drop out of M and L, and the carried part reaches only the
// tokens of the sequence it belongs to.
#pragma once

#include "mamba2_tasks.cuh"

namespace tk_mamba2 {
using namespace kittens;

// What both walks share, on top of the forward's task layout: their globals, the chunk's input stage (x, dy, B, C and
// the prepared vectors) and the ways their results leave.
template <typename T, int P, int N, scan_config CFG> struct mamba2_bwd_base : scan_tasks<T, P, N, CFG> {
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

    using acc_tile = st_fl<CHUNK, 64>;  // 64 columns of a chunk's dB or dC, on their way into the fp32 sum
    using acc_gl = gl<float, -1, -1, -1, -1, acc_tile>; // (b, g, padded_len, n)

    struct globals {
        x_gl x, dy;       // (b, h, l, p) views
        bc_gl B, C;       // (b, g, l, n) views
        vec_gl dt, cum;   // (b, h, 1, padded_len)
        vec_gl seq;       // (b, 1, 1, padded_len)
        acc_gl grad_bc;   // dC (first walk) or dB (second), fp32, summed over heads and columns
        float *d_cum;     // (b, h, padded_len) fp32: dL/dcum, both walks add their parts
        float *x_dot;     // (b, h, padded_len) fp32: x . (g B) (second walk)
        const float *seq_ids; // the ids' bits, (b, padded_len): the token before a chunk (second walk)
        const float *state_in;  // (b, h, p, n) fp32 or null: initial states (first walk), their gradient's seed,
                                // the final states' gradient (second walk)
        const float *d_final;   // first walk: the final states' gradient, for <dh_final, h_final>; or null
        float *state_out;       // second walk: the initial states' gradient, or null
        const float *D;         // (h,) or (h, p), or null
        float *dD;              // (h, p) fp32, summed into, or null
        T *dx;                  // (b, l, h, p) contiguous
        int D_per_channel, heads, heads_per_group, chunks, len, padded_len, num_tasks, has_seq, task_heads;
    };
    struct input_block {
        x_tile x[NUM_CONSUMERS], dy[NUM_CONSUMERS];
        bc_tile B, C;
        vec dt[HEADS_PER_TASK], cum[HEADS_PER_TASK];
        vec seq;
    };
    struct output_block {
        x_tile weighted[NUM_CONSUMERS]; // rows of dy or x weighted per token, an operand of the next product
        image_tile image[NUM_CONSUMERS];
        acc_tile staging[NUM_CONSUMERS];
    };
    static constexpr int INPUT_STAGES = tasks::template ring_stages<input_block, output_block>();
    static_assert(INPUT_STAGES >= 2, "Mamba-2 backward: the ring needs two stages at least");

    __device__ static inline size_t token_row(const globals &g, const task &t, int consumer) {
        return (size_t(t.b) * g.heads + head_of(t, consumer)) * g.padded_len;
    }

    // Chunk `chunk`'s stage: both consumers' x and dy columns, B, C, the task's heads' dt and cum, the ids.
    template <typename K> __device__ static inline void load_chunk(lcsf::producer_args<K> &p, int chunk) {
        tasks::load_stage(p, chunk, p.g.dy, p.input.dy, [] { return true; });
    }

    // A state accumulator for the next chunk's products in two 16-bit images, hi = 16-bit(state) and
    // lo = 16-bit(state - hi): hi + lo carries the fp32 state to about 2^-16, so that the two walks see the same state
    // (dL/dcum's terms across chunks come from both and must cancel). `lo` lives in the staging tile (below), which
    // must have been read by its last TMA reduce-add.
    __device__ static inline void write_image(image_tile &hi, image_tile &lo, const state_tile &state) {
        rt<T, N / 4, COLS> bits;
        copy(bits, state);
        warpgroup::store(hi, bits);
        for_each_pair([&](pair_pos, const float2 &v, T2 &b) { // the remainder, in place
            const float2 h = base_types::convertor<float2, T2>::convert(b);
            b = base_types::convertor<T2, float2>::convert(make_float2(v.x - h.x, v.y - h.y));
        }, state, bits);
        if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
        warpgroup::sync();
        warpgroup::store(lo, bits);
        async_proxy_fence();
        warpgroup::sync();
    }
    // The low image shares the staging tile: it is read by the chunk's first products, the staging tile is written
    // only after they are waited for.
    static_assert(sizeof(image_tile) <= sizeof(acc_tile), "Mamba-2 backward: the low image must fit the staging tile");
    __device__ static inline image_tile &image_lo(acc_tile &staging) { return *reinterpret_cast<image_tile *>(&staging); }

    // Adds 64 columns (block k) of a chunk's fp32 dB or dC into g.grad_bc through `staging`, once the previous block's
    // reduce-add has read it.
    __device__ static inline void add_grad_block(const globals &g, acc_tile &staging, const rt_fl<TILE_DIM, 64> &block,
                                                 const task &t, int chunk, int k) {
        if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
        warpgroup::sync();
        warpgroup::store(staging, block);
        async_proxy_fence();
        warpgroup::sync();
        if (warpgroup::laneid() == 0) {
            tma::store_add_async(g.grad_bc, staging, {t.b, t.h / g.heads_per_group, chunk, k});
            tma::store_commit_group();
        }
    }

    // Adds this lane's two row sums into dst, a (b, h, padded_len) buffer (one lane of each row's four).
    __device__ static inline void add_token_sums(const globals &g, float *dst_rows, const task &t, int consumer,
                                                 int chunk, const chunk::lane_rows &r, const float (&sum)[2]) {
        float *dst = dst_rows + token_row(g, t, consumer) + size_t(chunk) * CHUNK;
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const float v = chunk::row_quad_sum(sum[k]);
            if (leads_row()) atomicAdd(dst + r.t[k], v);
        }
    }
};

// ---------------------------------------------------------------- the forward walk: dC and dy . (h C)

template <typename T, int P, int N, scan_config CFG> struct mamba2_bwd_dc : mamba2_bwd_base<T, P, N, CFG> {
    using base = mamba2_bwd_base<T, P, N, CFG>;
    using typename base::globals;
    using typename base::input_block;
    using typename base::task;
    using typename base::state_tile;
    using typename base::T2;
    using base::CHUNK;
    using base::COLS;

    struct consumer_state {
        state_tile h; // H^T, as in the forward
        int prev_seq;
        float2 dD[COLS / 8];  // this lane's column pairs of sum_t dy o x, over its rows and chunks
    };

    __device__ static inline void load(lcsf::producer_args<mamba2_bwd_dc> &p) { base::load_chunk(p, p.iter); }

    __device__ static inline void setup(lcsf::consumer_args<mamba2_bwd_dc> &c) {
        const globals &g = c.g;
        c.state.prev_seq = 0;
        base::read_state(c.state.h, g.state_in ? g.state_in + base::state_offset(g, c.task, c.consumer) : nullptr);
        base::write_image(c.output.image[c.consumer], base::image_lo(c.output.staging[c.consumer]), c.state.h);
#pragma unroll
        for (int k = 0; k < COLS / 8; k++) c.state.dD[k] = make_float2(0.f, 0.f);
    }

    __device__ static inline void compute(lcsf::consumer_args<mamba2_bwd_dc> &c) {
        const globals &g = c.g;
        input_block &in = c.input;
        auto &out = c.output;
        const int me = c.consumer;
        const bool has_seq = g.has_seq;
        const chunk::vec &dt_v = in.dt[base::head_slot(me)], &cum_v = in.cum[base::head_slot(me)];

        // This lane's rows: exp(cum) for the carried state (0 in another sequence), w = exp(cum_last - cum) dt for the
        // state update.
        const float cum_last = cum_v.data[CHUNK - 1];
        const int seq_last = chunk::seq_at(in.seq, has_seq, CHUNK - 1);
        const int prev_seq = c.state.prev_seq;
        const chunk::lane_rows r = chunk::rows_of_lane(cum_v, in.seq, has_seq);
        const chunk::row_weights w = chunk::weights_of_rows(r, dt_v, cum_last, prev_seq, seq_last);

        // S = dY X^T and the carried state's part diag(exp cum) dY H (hi + lo images), on the tensor cores; the
        // weighted dY (in the weighted tile until Xw replaces it) is rounded exactly as the backward walk rounds it into
        // its state.
        {
            rt<T, TILE_DIM, COLS> dy;
            warpgroup::load(dy, in.dy[me]);
            chunk::store_weighted_rows(out.weighted[me], dy, w.from_prev);
        }
        warpgroup::sync();
        rt_fl<TILE_DIM, CHUNK> s;
        rt_fl<TILE_DIM, N> dc;
        warpgroup::mm_ABt(dc, out.weighted[me], out.image[me]);
        warpgroup::mma_ABt(dc, out.weighted[me], base::image_lo(out.staging[me]), wgmma::chained);
        warpgroup::mm_ABt(s, in.dy[me], in.x[me]);
        warpgroup::mma_async_wait(s, dc);
        warpgroup::sync(); // every warp's share of the products has read the weighted dY

        // Xw for the state update, as in the forward.
        {
            rt<T, TILE_DIM, COLS> x;
            warpgroup::load(x, in.x[me]);
            chunk::store_weighted_rows(out.weighted[me], x, w.to_end_dt);
        }

        // dC = diag(exp cum) dY H + (L o dY X^T) B, and the carried part's dy . (h C) = rowsum(diag(exp cum) dY H o C).
        chunk::causal_decay(s, cum_v, dt_v, in.seq, has_seq, r);
        rt<T, TILE_DIM, CHUNK> pt;
        copy(pt, s);
        float sum[2] = {0.f, 0.f};
        auto dot_rows = [&](const rt_fl<TILE_DIM, 64> &block, const auto &c_block) {
            rt<T, TILE_DIM, 64> cr;
            warpgroup::load(cr, c_block);
            for_each_pair([&](pair_pos p, const float2 &v, const T2 &cv) {
                const float2 cf = base_types::convertor<float2, T2>::convert(cv);
                sum[p.half] = fmaf(v.x, cf.x, fmaf(v.y, cf.y, sum[p.half]));
            }, block, cr);
        };
        if constexpr (N == 64) {
            dot_rows(dc, in.C);
        } else {
            dot_rows(chunk::column_block<0>(dc), in.C.template chunk<0>());
            dot_rows(chunk::column_block<1>(dc), in.C.template chunk<1>());
        }
        base::add_token_sums(g, g.d_cum, c.task, me, c.iter, r, sum);
        warpgroup::mma_AB(dc, pt, in.B);

        // The state update, as in the forward.
        chunk::carry_across(c.state.h, cum_last, seq_last, prev_seq);
        c.state.prev_seq = seq_last;
        warpgroup::sync(); // every warp's rows of Xw are written
        warpgroup::mma_AtB(c.state.h, in.B, out.weighted[me]);

        // While it runs: dC into the group's sum, and dD's sums (here, where few registers are live).
        warpgroup::mma_async_wait<1>(dc);
        base::add_grad_block(g, out.staging[me], chunk::column_block<0>(dc), c.task, c.iter, 0);
        if constexpr (N == 128) base::add_grad_block(g, out.staging[me], chunk::column_block<1>(dc), c.task, c.iter, 1);
        if (g.dD) {
            rt<T, TILE_DIM, COLS> x, dy;
            warpgroup::load(x, in.x[me]);
            warpgroup::load(dy, in.dy[me]);
            for_each_pair([&](pair_pos p, const T2 &xv, const T2 &dv) {
                const float2 xf = base_types::convertor<float2, T2>::convert(xv);
                const float2 df = base_types::convertor<float2, T2>::convert(dv);
                float2 &acc = c.state.dD[2 * p.j + (p.k >> 1)];
                acc.x = fmaf(df.x, xf.x, acc.x);
                acc.y = fmaf(df.y, xf.y, acc.y);
            }, x, dy);
        }

        warpgroup::mma_async_wait(c.state.h);
        base::write_image(out.image[me], base::image_lo(out.staging[me]), c.state.h);
    }

    // <dh_final, h_final> joins dL/dcum at the last token.
    __device__ static inline void finish(lcsf::consumer_args<mamba2_bwd_dc> &c) {
        const globals &g = c.g;
        if (warpgroup::laneid() == 0) tma::store_async_wait<0>(); // the last reduce-adds are complete
        if (g.dD) add_dD(g, c.state, c.task, c.consumer);
        if (!g.d_final) return;
        const float *d = g.d_final + base::state_offset(g, c.task, c.consumer);
        float sum = 0.f;
        for_each_pair([&](pair_pos p, const float2 &s) {
            const int n = base::state_row(p);
            sum = fmaf(s.x, d[size_t(p.col) * N + n], fmaf(s.y, d[size_t(p.col + 1) * N + n], sum));
        }, c.state.h);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (laneid() == 0) atomicAdd(g.d_cum + base::token_row(g, c.task, c.consumer) + (g.len - 1), sum);
    }

    // This consumer's share of dD: the lanes of one column pair differ in bits 2..4, then one lane per pair adds the
    // warp's sum.
    __device__ static inline void add_dD(const globals &g, const consumer_state &state, const task &t, int consumer) {
        float *dst = g.dD + size_t(base::head_of(t, consumer)) * P + base::column_block(consumer) * COLS;
#pragma unroll
        for (int k = 0; k < COLS / 8; k++) {
            float2 v = state.dD[k];
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) {
                v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
                v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
            }
            const int col = lane_col(k >> 1, k & 1);
            if (leads_col()) {
                atomicAdd(dst + col, v.x);
                atomicAdd(dst + col + 1, v.y);
            }
        }
    }
};

// ---------------------------------------------------------------- the backward walk: dx, dB, x . (g B), dD

template <typename T, int P, int N, scan_config CFG> struct mamba2_bwd_dx : mamba2_bwd_base<T, P, N, CFG> {
    using base = mamba2_bwd_base<T, P, N, CFG>;
    using typename base::globals;
    using typename base::input_block;
    using typename base::task;
    using typename base::state_tile;
    using typename base::T2;
    using base::CHUNK;
    using base::COLS;

    struct consumer_state {
        state_tile g; // G^T: (dL/dh at the end of the chunk being walked)^T
    };

    __device__ static inline int chunk_of(const globals &g, int iter) { return g.chunks - 1 - iter; }

    __device__ static inline void load(lcsf::producer_args<mamba2_bwd_dx> &p) {
        base::load_chunk(p, chunk_of(p.g, p.iter));
    }

    __device__ static inline void setup(lcsf::consumer_args<mamba2_bwd_dx> &c) {
        const globals &g = c.g;
        base::read_state(c.state.g, g.state_in ? g.state_in + base::state_offset(g, c.task, c.consumer) : nullptr);
        base::write_image(c.output.image[c.consumer], base::image_lo(c.output.staging[c.consumer]), c.state.g);
    }

    __device__ static inline void compute(lcsf::consumer_args<mamba2_bwd_dx> &c) {
        const globals &g = c.g;
        input_block &in = c.input;
        auto &out = c.output;
        const int me = c.consumer, ci = chunk_of(g, c.iter);
        const bool has_seq = g.has_seq;
        const chunk::vec &dt_v = in.dt[base::head_slot(me)], &cum_v = in.cum[base::head_slot(me)];

        // The carried state decays over the chunk towards its start, and is dropped when the chunk's last token is in
        // another sequence than the token before the chunk (done before any product is in flight: the image keeps
        // the old value for this chunk's products).
        const float cum_last = cum_v.data[CHUNK - 1];
        const int seq_last = chunk::seq_at(in.seq, has_seq, CHUNK - 1);
        const int prev_seq =
            has_seq && ci > 0 ? __float_as_int(g.seq_ids[size_t(c.task.b) * g.padded_len + ci * CHUNK - 1]) : 0;
        chunk::carry_across(c.state.g, cum_last, seq_last, prev_seq);
        wgmma::detail::pin_tile(c.state.g); // scaled here, before any product is in flight (not sunk to its use)

        // S = B C^T and the carried part B G^T.
        rt_fl<TILE_DIM, CHUNK> s;
        rt_fl<TILE_DIM, COLS> gb;
        warpgroup::mm_ABt(s, in.B, in.C);
        warpgroup::mm_AB(gb, in.B, out.image[me]);
        warpgroup::mma_AB(gb, in.B, base::image_lo(out.staging[me]));

        // Meanwhile the weights of this lane's rows, and diag(exp cum) dY for the state update.
        const chunk::lane_rows r = chunk::rows_of_lane(cum_v, in.seq, has_seq);
        const chunk::row_weights w = chunk::weights_of_rows(r, dt_v, cum_last, prev_seq, seq_last);
        const float dt_row[2] = {dt_v.data[r.t[0]], dt_v.data[r.t[1]]};
        const float one[2] = {1.f, 1.f};
        {
            rt<T, TILE_DIM, COLS> dy;
            warpgroup::load(dy, in.dy[me]);
            chunk::store_weighted_rows(out.weighted[me], dy, w.from_prev);
        }

        // The state for the previous chunk, G^T = exp(cum_last) G^T + C^T diag(exp cum) dY (scaled above).
        warpgroup::sync(); // every warp's rows of diag(exp cum) dY are written
        warpgroup::mma_AtB(c.state.g, in.C, out.weighted[me]);

        // GB = (M o S) dY + diag(w) B G^T. First the carried part's share of dL/dcum, -dt x . (w B G^T), with
        // diag(dt w) X rounded exactly as the forward walk rounds it into its state.
        warpgroup::mma_async_wait<1>(s, gb);
        chunk::anticausal_decay(s, cum_v, in.seq, has_seq, r, one);
        rt<T, TILE_DIM, CHUNK> pt;
        copy(pt, s);
        float d_cum[2] = {0.f, 0.f};
        {
            rt<T, TILE_DIM, COLS> x;
            warpgroup::load(x, in.x[me]);
            for_each_pair([&](pair_pos p, const float2 &v, const T2 &xv) {
                const float2 xw = chunk::weighted_pair(xv, w.to_end_dt[p.half]);
                d_cum[p.half] = fmaf(-v.x, xw.x, fmaf(-v.y, xw.y, d_cum[p.half]));
            }, gb, x);
        }
        chunk::scale_rows(gb, w.to_end);
        warpgroup::mma_AB(gb, pt, in.dy[me]);
        warpgroup::mma_async_wait(gb, c.state.g); // the state update has read `weighted`: it is free again

        // dx = diag(dt) GB + D dy and x . (g B) per token; diag(dt w) X, the operand of dB's carried part.
        {
            rt<T, TILE_DIM, COLS> x, dy, dx;
            warpgroup::load(x, in.x[me]);
            warpgroup::load(dy, in.dy[me]);
            const int head = base::head_of(c.task, me);
            const float *d = g.D ? g.D + (g.D_per_channel ? size_t(head) * P + base::column_block(me) * COLS : size_t(head))
                                 : nullptr;
            const int per_channel = g.D_per_channel;
            float sum[2] = {0.f, 0.f};
            for_each_pair([&](pair_pos p, const float2 &v, const T2 &xv, const T2 &dv, T2 &o) {
                const float2 xf = base_types::convertor<float2, T2>::convert(xv);
                sum[p.half] = fmaf(v.x, xf.x, fmaf(v.y, xf.y, sum[p.half]));
                float2 r2 = make_float2(v.x * dt_row[p.half], v.y * dt_row[p.half]);
                if (d) {
                    const float2 df = base_types::convertor<float2, T2>::convert(dv);
                    const float d0 = per_channel ? __ldg(d + p.col) : __ldg(d);
                    const float d1 = per_channel ? __ldg(d + p.col + 1) : d0;
                    r2.x = fmaf(d0, df.x, r2.x);
                    r2.y = fmaf(d1, df.y, r2.y);
                }
                o = base_types::convertor<T2, float2>::convert(r2);
            }, gb, x, dy, dx);
            base::add_token_sums(g, g.x_dot, c.task, me, ci, r, sum);
            store_dx(g, c.task, me, ci, dx);
            warpgroup::sync(); // every warp's share of the state update has read `weighted`
            chunk::store_weighted_rows(out.weighted[me], x, w.to_end_dt);
        }

        // dB = (dt M o X dY^T) C + diag(dt w) X G, 64 state columns at a time, into the group's sum. Before that, the
        // chunk's pairs Q^T = (M o B C^T) o (dt M o X dY^T): dL/dcum gains their column sums (output tokens) and loses
        // their row sums (input tokens).
        warpgroup::mm_ABt(s, in.x[me], in.dy[me]);
        warpgroup::mma_async_wait(s);
        {
            // pt holds M o B C^T (masked and decayed): Q^T = pt o X dY^T o dt_t.
            rt_fl<TILE_DIM, CHUNK> q;
            copy(q, pt);
            for_each_pair([&](pair_pos p, float2 &v, const float2 &sv) {
                v.x *= sv.x * dt_row[p.half];
                v.y *= sv.y * dt_row[p.half];
                d_cum[p.half] -= v.x + v.y;
            }, q, s);
            float *rows = g.d_cum + base::token_row(g, c.task, me) + size_t(ci) * CHUNK;
            chunk::add_column_sums(rows, q);
            base::add_token_sums(g, g.d_cum, c.task, me, ci, r, d_cum);
        }
        chunk::anticausal_decay(s, cum_v, in.seq, has_seq, r, dt_row);
        copy(pt, s);
        warpgroup::sync(); // every warp's rows of diag(dt w) X are written
        auto db_block = [&](const auto &g_rows, const auto &c_cols, int k) {
            rt_fl<TILE_DIM, 64> db;
            warpgroup::mm_ABt(db, out.weighted[me], g_rows);
            warpgroup::mma_AB(db, pt, c_cols);
            warpgroup::mma_async_wait(db);
            base::add_grad_block(g, out.staging[me], db, c.task, ci, k);
        };
        if constexpr (N == 64) {
            db_block(out.image[me], in.C, 0);
        } else {
            db_block(out.image[me].template row_block<64, 0>(), in.C.template chunk<0>(), 0);
            db_block(out.image[me].template row_block<64, 1>(), in.C.template chunk<1>(), 1);
        }

        base::write_image(out.image[me], base::image_lo(out.staging[me]), c.state.g);
    }

    // dx rows of this chunk (rows past the end skipped) straight from registers: (b, l, h, p) contiguous.
    __device__ static inline void store_dx(const globals &g, const task &t, int consumer, int ci,
                                           const rt<T, TILE_DIM, COLS> &dx) {
        const int head = base::head_of(t, consumer);
        T *dst = g.dx + (size_t(t.b) * g.len * g.heads + head) * P + base::column_block(consumer) * COLS;
        for_each_pair([&](pair_pos p, const T2 &v) {
            const int tok = ci * CHUNK + warpgroup::warp_row0() + p.row;
            if (tok < g.len) *reinterpret_cast<T2 *>(dst + size_t(tok) * g.heads * P + p.col) = v;
        }, dx);
    }

    // The initial states' gradient.
    __device__ static inline void finish(lcsf::consumer_args<mamba2_bwd_dx> &c) {
        const globals &g = c.g;
        if (warpgroup::laneid() == 0) tma::store_async_wait<0>();
        if (!g.state_out) return;
        base::write_state(g.state_out + base::state_offset(g, c.task, c.consumer), c.state.g);
    }
};

} // namespace tk_mamba2
