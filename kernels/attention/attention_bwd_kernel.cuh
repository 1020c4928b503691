// Attention backward (flash attention 2/3 style) on the LCSF template, for head dimension D (attention.h lists
// those built).
//
// Given Q, K, V, dO, the forward's LSE and delta = rowsum(dO * O) (both prepared per query row by
// attention_bwd_prep.cu), with P = softmax(scale Q K^T):
//   dV = P^T dO,   dP = dO V^T,   dS = P * (dP - delta) * scale,   dK = dS^T Q,   dQ = dS K.
// The kernel leaves `scale` out of dS (one multiply less per element) and applies it once: to dK at the end of a
// task, and to dQ in the conversion of its accumulator.
//
// A task is one block of BLOCK_K = 128 keys of one (batch, kv head). Each of the two consumer warpgroups owns
// 64 of those keys: their K and V rows stay in shared memory for the whole task and their dK and dV
// accumulate in fp32 registers. The producer streams (Q, dO, LSE, delta) tiles of BLOCK_Q query rows, for
// every query head of the kv head's group (GQA sums over them for free) and every query tile that sees
// the block. Per tile, a consumer works in the transposed frame, keys as rows, so that its softmax rows
// are the wgmma accumulator rows it owns:
//   S^T = K Q^T, dP^T = V dO^T         (wgmma, both operands in shared memory)
//   P^T, dS^T                          (registers; P from the saved LSE, so no running statistics)
//   dV += P^T dO, dK += dS^T Q         (wgmma, A from registers)
// dQ needs every key of the block, so both consumers write their dS^T to shared memory, and the consumers
// take turns computing a tile's dQ = dS K: consumer (step % 2) owns step `step`. The owner computes the whole
// BLOCK_Q x D product one step late (at the end of its next step, or in finish after a task's last step, by
// which time the other consumer's dS^T of that step is long written) and adds it into a global fp32 dQ
// accumulator with TMA reduce-adds from staging tiles of its own (other blocks add the other key blocks'
// shares). The other consumer only signals, so no barrier of both warpgroups holds them in step.
// At D = 128 (attention_configs.cuh's converts_dq), the blocks that run out of tasks turn the accumulator of every
// finished (batch, kv head) into the output dtype (after_tasks, run by the kernel's own entry, attn_bwd_kernel at
// the end of this file); attention_bwd_convert.cu converts what is left afterwards (all of it at other head
// dimensions).
//
// D = 256 (attention_configs.cuh's split_head_dims): dK and dV of 64 keys would take 2 x 128 fp32 registers per thread,
// so a task is 64 keys and both consumers work on all of them, consumer e accumulating columns 128 e .. 128 e + 127
// of dK, dV and dQ. S^T and dP^T are split by query halves instead: consumer e computes the 32 query columns
// 32 e .. of both, forms its half of P^T and dS^T, and writes it into two exchange tiles in shared memory; after a
// barrier of both consumers each runs its columns of dV += P^T dO, dK += dS^T Q and dQ = dS K over all 64 queries
// from those tiles (5 products of 64 x 64 x 256 per step; split_step has the synchronisation). dQ is added at once,
// through one staging tile per consumer (shared memory has no room for more). The other designs, and why they were
// not taken, are in docs/attention.md.
//
// Masking: padded query rows (past q_len) carry LSE = +inf from the preparation, so their P is 0; key rows
// past kv_len and, for banded attention (causal, sliding windows: attention.h's band), keys outside a row's band get
// P = 0 on the tiles where that can happen, and a task walks only the query tiles that see its keys. Rows past the
// sequence are TMA's zeros; for packed documents they are the next document's rows (or rows past the last offset),
// which may hold anything, and the products would multiply them by P = 0 or dS = 0 (0 x NaN is NaN): so they are
// zeroed in shared memory first (zero_keys_past_document, zero_queries_past_document). With a softcap, P comes from
// the capped scores and dS picks up the cap's derivative: d(softcap * tanh(x / softcap)) / dx = 1 - tanh^2.
#pragma once

#include "attention.h"
#include "kittens.cuh"
#include "attention_masking.cuh"
#include "attention_online_softmax.cuh"

namespace tk_attention {
using namespace kittens;

template <typename T, int D, variant V> struct attn_bwd {
    static_assert(supported_head_dim(D), "attention backward: D must be one of attention.h's HEAD_DIMS");
    // Task shape, query tile, ring, registers and the form of dQ per head dimension: attention_configs.cuh.
    static constexpr bwd_config CONFIG = bwd_config_for(D);
    static constexpr int NUM_CONSUMERS = bwd_config::CONSUMERS;
    static constexpr int KEYS = 64; // per consumer: one wgmma row slab
    // SPLIT_HEAD_DIMS (D = 256): both consumers work on the task's one slab of 64 keys, consumer e on columns
    // e * OUT_COLS .. of dK, dV and dQ and on query half e of S^T and dP^T (see split_step). Otherwise each consumer
    // owns a slab of its own.
    static constexpr bool SPLIT_HEAD_DIMS = CONFIG.split_head_dims;
    static constexpr int KV_TILES = SPLIT_HEAD_DIMS ? 1 : NUM_CONSUMERS; // key slabs per task
    static constexpr int BLOCK_K = KEYS * KV_TILES;
    static constexpr int OUT_COLS = SPLIT_HEAD_DIMS ? D / NUM_CONSUMERS : D; // a consumer's columns of dK and dV
    static_assert(BLOCK_K == CONFIG.block_k(), "attention.h's task rules (bwd_block_k) assume BLOCK_K keys per task");
    static constexpr int BLOCK_Q = CONFIG.block_q;
    static constexpr int INPUT_STAGES = CONFIG.stages;
    static constexpr int PRODUCER_REGISTERS = CONFIG.producer_registers, CONSUMER_REGISTERS = CONFIG.consumer_registers;
    static_assert(registers_fit(NUM_CONSUMERS, PRODUCER_REGISTERS, CONSUMER_REGISTERS),
                  "attention backward: the register split exceeds the block's pool");
    // Named barriers of the two consumer warpgroups (ids 1-2 are each warpgroup's own). Step parity p is owned by
    // consumer p, and the other consumer arrives where the owner syncs: DS_READY + p, the other's dS^T is in
    // shared memory. One id per parity, so that an arrival can never pair with the same consumer's next one: a
    // consumer arrives on a parity's barrier again only after the owner has passed it.
    // A step's dQ waits until the end of its owner's next step, so that the other consumer's dS^T is long written
    // (faster than running it at once, given each consumer's own staging tiles: docs/attention.md).
    static constexpr int CONSUMERS_BARRIER = 5, DS_READY = 6;
    // ds_free[p] (an mbarrier: its last arrival may have no waiter) completes once per step of parity p, when that
    // step's dQ product has read both consumers' dS^T: the non-owner waits on it before reusing its ds tile. With
    // split head dimensions ds_free[e] completes once per step, when consumer e's products have read the exchange
    // tiles (split_step).

    using q_tile = st<T, BLOCK_Q, D>;   // Q and dO
    using kv_tile = st<T, KEYS, D>;     // one key slab's K or V rows
    using ds_tile = st<T, KEYS, BLOCK_Q>; // one consumer's dS^T
    using row_vec = sv<float, BLOCK_Q>;  // LSE or delta of a query tile
    using q_gl = gl<T, -1, -1, -1, D, q_tile>;
    using kv_gl = gl<T, -1, -1, -1, D, kv_tile>;
    using row_gl = gl<float, 1, -1, -1, -1, row_vec>; // (1, batch, q_heads, q_len padded to BLOCK_Q)
    // D = 64 computes dQ transposed (dQ^T = K^T dS^T, one m64n128 product: 48 KB of shared operands per tile
    // instead of 64 KB for two m64n64 halves of dS K), so its accumulator is (batch, q_heads, D, padded q_len);
    // D = 128 keeps (batch, q_heads, q_len, D). Either way a dense fp32 scratch that the preparation zeroes and
    // backward_convert_dq turns into dQ.
    static constexpr bool DQ_TRANSPOSED = dq_accum_transposed(D); // the accumulator holds dQ / scale (see the top)
    // A dQ product (the owner's dQ tile, or dQ^T at D = 64, or a consumer's columns of dQ with split head dimensions)
    // goes to global memory in pieces of DQ_PIECE columns.
    static constexpr int DQ_COLS = DQ_TRANSPOSED ? BLOCK_Q : OUT_COLS;
    static constexpr int DQ_PIECE = CONFIG.dq_piece_cols, DQ_PIECES = DQ_COLS / DQ_PIECE;
    static_assert(DQ_PIECES * DQ_PIECE == DQ_COLS && DQ_PIECE % 16 == 0, "attention backward: dQ pieces must tile dQ");
    using dq_piece = st<float, 64, DQ_PIECE>; // columns DQ_PIECE * j .. of a dQ product
    using dq_gl =
        std::conditional_t<DQ_TRANSPOSED, gl<float, -1, -1, D, -1, dq_piece>, gl<float, -1, -1, -1, D, dq_piece>>;
    // Blocks that run out of tasks convert dQ of the (batch, kv head)s whose tasks have all finished (attention.h):
    // the conversion pass then reads only what is left, and the tail of the grid, where SMs wait for the last tasks,
    // does the rest. Rows only: the transposed accumulator (D = 64) would need its own pass through shared memory.
    static constexpr bool CONVERT_IN_KERNEL = bwd_kernel_converts_dq(D) && !V.varlen;
    struct dq_conversion {
        bwd_sync sync; // the int scratch (attention.h); sync.done null: this call converts nothing in the kernel
        const float *accum = nullptr;
        T *out = nullptr;
        int64_t stride_b = 0, stride_h = 0, stride_n = 0; // of the output, in elements
        int items = 0, items_per_head = 0;
    };

    struct globals {
        q_gl q, dout;
        kv_gl k, v;
        row_gl lse2, delta; // lse2: LSE * log2(e), +inf on padded rows and rows that see no key
        dq_gl dq;           // fp32 accumulator, zeroed by the preparation
        kv_gl dk, dv;       // (batch, kv_heads, kv_len, D), any TMA-legal strides
        int kv_heads, group; // group: query heads per kv head
        int q_len, kv_len, q_tiles, k_blocks, num_tasks;
        bool heaviest_first; // causal task order, see get_task
        band window;
        float scale;
        float scale_log2; // scale * log2(e); with a softcap, softcap * log2(e)
        float inv_cap;    // with a softcap: scale / softcap
        dq_conversion convert;
        varlen_layout docs; // variant::varlen: the packed documents (q_len, kv_len: the total rows; k_blocks a bound)
    };
    struct input_block {
        q_tile q, dout;
        row_vec lse2, delta;
    };
    // With split head dimensions one slab of K and V serves both consumers, the two ds tiles of slot 0 are the step's
    // P^T and dS^T that both consumers fill and read (p_exchange, ds_exchange), and one staging tile per consumer is
    // what shared memory has room for.
    static constexpr int DS_SLOTS = SPLIT_HEAD_DIMS ? 1 : 2, DQ_STAGING = SPLIT_HEAD_DIMS ? 1 : DQ_PIECES;
    struct output_block {
        kv_tile k[KV_TILES], v[KV_TILES];
        ds_tile ds[DS_SLOTS][NUM_CONSUMERS]; // [step parity][consumer]: read by that parity's owner
        // [consumer][piece]: a consumer's dQ tile on its way to global memory. Each consumer stages in tiles of its
        // own, so it waits only for its own previous reduce-adds (issued a step or more earlier): with one staging
        // tile pair shared by both, the owner waited for the other's adds to be read. This fills shared memory to the
        // last kilobyte, so the semaphores below live in static shared memory.
        dq_piece dq[NUM_CONSUMERS][DQ_STAGING];
    };
    struct block_semaphores {
        semaphore kv_arrived[NUM_CONSUMERS];
        semaphore ds_free[2]; // [step parity], one arrival per warp of the owner
    };
    __device__ static inline block_semaphores &semaphores() {
        __shared__ block_semaphores sems;
        return sems;
    }
    struct consumer_state {
        rt_fl<16, OUT_COLS> dk, dv;
        int tasks = 0; // tasks started: the phase of kv_arrived
        int steps = 0; // query tiles consumed: the parity of the ds buffer
        bool dq_pending = false; // this task's previous step still owes its dQ (see dq_step)
        int pending_head = 0, pending_q_tile = 0;
        int last_kv_head = -1; // (batch, kv head) of the task this consumer finished last: its completion is still due
    };
    struct task {
        int id, b, kv_head, k_block, first_q_tile, q_tiles_seen, iters;
        int q_len, kv_len;    // of this task's sequence (a packed document's own lengths)
        int q_start, k_start; // its first query and key rows in the packed rows (0 unless varlen)
        int q_pad_tile;       // its first query tile in the row buffers and the dQ accumulator (0 unless varlen)
    };

    // Block x runs tasks x, x + grid, ... and every other round of `grid` tasks runs backwards (as in the
    // forward). Tasks go (batch, kv head)-major with a head's key blocks adjacent, so the tasks running at one
    // moment are the key blocks of a few heads: they stream the same Q and dO tiles and add into the same dQ
    // accumulator, which then stays in L2. Causal key blocks differ in weight (block j is seen from query row
    // j * BLOCK_K on); with few blocks per head the serpentine evens the grid blocks' totals out, but when one
    // head's blocks fill a whole round (N >= 8K) the blocks that drew a head's first key blocks carry most of
    // the work, so there (heaviest_first) the order is by key block across heads: block 0 of every head, then
    // block 1, ... Short sequences keep the head-major order, and with many heads the heaviest-first order loses
    // again, so the launch uses it only for fewer than 32 (batch, kv head)s (attention.h; docs/attention.md).
    // Packed documents: the key blocks of all documents, in order, stand where one sequence's blocks would (their
    // count is on the device; the host's num_tasks bounds it).
    __device__ static inline bool get_task(const globals &g, int id, task &t) {
        const int k_blocks = V.varlen ? g.docs.blocks_k[g.docs.count] : g.k_blocks;
        const int num_tasks = V.varlen ? k_blocks * g.kv_heads : g.num_tasks;
        if (id >= num_tasks) return false;
        const int grid = gridDim.x, round = id / grid;
        int slot = id - round * grid;
        if (round & 1) slot = min(grid, num_tasks - round * grid) - 1 - slot;
        const int order = round * grid + slot;
        int bh;
        if (V.banded && g.heaviest_first) {
            const int heads = num_tasks / k_blocks;
            t.k_block = order / heads;
            bh = order - t.k_block * heads;
        } else {
            bh = order / k_blocks;
            t.k_block = order - bh * k_blocks;
        }
        t.id = id;
        t.b = bh / g.kv_heads;
        t.kv_head = bh - t.b * g.kv_heads;
        t.q_len = g.q_len;
        t.kv_len = g.kv_len;
        t.q_start = t.k_start = t.q_pad_tile = 0;
        if constexpr (V.varlen) {
            const int doc = g.docs.doc_of(g.docs.blocks_k, t.k_block);
            t.k_block -= g.docs.blocks_k[doc];
            t.q_start = g.docs.q[doc];
            t.q_len = g.docs.q[doc + 1] - t.q_start;
            t.k_start = g.docs.k[doc];
            t.kv_len = g.docs.k[doc + 1] - t.k_start;
            t.q_pad_tile = g.docs.blocks_q[doc] * (BWD_ROW_PAD / BLOCK_Q);
        }
        t.first_q_tile = 0;
        t.q_tiles_seen = (t.q_len + BLOCK_Q - 1) / BLOCK_Q;
        if constexpr (V.banded) {
            const index_range rows =
                rows_seeing(t.k_block * BLOCK_K, (t.k_block + 1) * BLOCK_K - 1, t.q_len, t.kv_len, g.window);
            t.first_q_tile = rows.empty() ? 0 : rows.first / BLOCK_Q;
            t.q_tiles_seen = rows.empty() ? 0 : rows.last / BLOCK_Q - t.first_q_tile + 1;
        }
        t.iters = t.q_tiles_seen * g.group;
        return true;
    }

    __device__ static inline void tile_of(const globals &g, const task &t, int iter, int &q_head, int &q_tile_index) {
        const int in_group = iter / t.q_tiles_seen;
        q_head = t.kv_head * g.group + in_group;
        q_tile_index = t.first_q_tile + (iter - in_group * t.q_tiles_seen);
    }

    __device__ static inline void load(lcsf::producer_args<attn_bwd> &p) {
        int h, qt;
        tile_of(p.g, p.task, p.iter, h, qt);
        tma::expect<q_tile, q_tile, row_vec, row_vec>(p.arrived);
        const row_coord rows{p.task.b, h, p.task.q_start + qt * BLOCK_Q, 0};
        tma::load_async(p.input.q, p.g.q, rows, p.arrived);
        tma::load_async(p.input.dout, p.g.dout, rows, p.arrived);
        tma::load_async(p.input.lse2, p.g.lse2, {0, p.task.b, h, p.task.q_pad_tile + qt}, p.arrived);
        tma::load_async(p.input.delta, p.g.delta, {0, p.task.b, h, p.task.q_pad_tile + qt}, p.arrived);
    }

    __device__ static inline void consumers_sync() { group<2 * WARPGROUP_WARPS>::sync(CONSUMERS_BARRIER); }

    // Load this consumer's K and V rows of the task. The other consumer's dQ products read them too, so
    // both consumers first pass a barrier that follows the previous task's last dQ product.
    __device__ static inline void setup(lcsf::consumer_args<attn_bwd> &c) {
        semaphore &arrived = semaphores().kv_arrived[c.consumer];
        const bool leader = warpgroup::laneid() == 0;
        if (c.state.tasks == 0 && leader) {
            init_semaphore(arrived, 1);
            init_semaphore(semaphores().ds_free[c.consumer], WARPGROUP_WARPS);
        }
        consumers_sync();
        if (leader) {
            const int row_tile = c.task.k_block * KV_TILES + slab_of(c.consumer);
            tma::store_async_read_wait(); // the previous task's dK and dV stores have read these tiles
            const row_coord at{c.task.b, c.task.kv_head, c.task.k_start + row_tile * KEYS, 0};
            if constexpr (SPLIT_HEAD_DIMS) { // the one slab: consumer 0 loads K, consumer 1 V (see finish)
                tma::expect<kv_tile>(arrived);
                if (c.consumer == 0) tma::load_async(c.output.k[0], c.g.k, at, arrived);
                else tma::load_async(c.output.v[0], c.g.v, at, arrived);
            } else {
                tma::expect<kv_tile, kv_tile>(arrived);
                tma::load_async(c.output.k[c.consumer], c.g.k, at, arrived);
                tma::load_async(c.output.v[c.consumer], c.g.v, at, arrived);
            }
            if constexpr (CONVERT_IN_KERNEL) count_done(c.g, c.state); // while K and V are on their way
        }
        c.state.last_kv_head = c.task.b * c.g.kv_heads + c.task.kv_head;
        zero(c.state.dk);
        zero(c.state.dv);
        if constexpr (SPLIT_HEAD_DIMS) {
#pragma unroll
            for (int i = 0; i < NUM_CONSUMERS; i++) wait(semaphores().kv_arrived[i], c.state.tasks & 1);
        } else {
            wait(arrived, c.state.tasks & 1);
        }
        c.state.tasks++;
        if constexpr (V.varlen) zero_keys_past_document(c);
    }

    // Packed documents: a document's last key slab is loaded whole, so its rows past kv_len are the next document's
    // (or rows past the last offset), which may hold NaN or inf. Their P is masked to 0, but dP^T = V dO^T would
    // carry V's garbage into dS^T = P^T * (dP^T - delta) as 0 x NaN, and dQ = dS K multiplies K's rows by dS = 0: so
    // the slab's rows past the document become zeros, once per task, before any product reads them. The slab is
    // this consumer's own, and the other consumer's dQ products, which read its K too, come after this consumer's
    // DS_READY arrivals (or, in the previous task, before the consumers_sync that precedes the load). With split head
    // dimensions both consumers read the one slab: consumer 0 zeroes K and consumer 1 V (the tiles each loaded), and
    // a barrier of both follows. Each writer fences first: generic stores, read by wgmma in the async proxy.
    __device__ static inline void zero_keys_past_document(lcsf::consumer_args<attn_bwd> &c) {
        const int e = c.consumer, slab = slab_of(e);
        const int valid = c.task.kv_len - (c.task.k_block * KV_TILES + slab) * KEYS; // may be <= 0: a slab past the end
        if (valid >= KEYS) return;
        const int first = max(valid, 0), thread = warpgroup::laneid();
        if constexpr (SPLIT_HEAD_DIMS) {
            zero_rows<WARPGROUP_THREADS>(e == 0 ? c.output.k[0] : c.output.v[0], first, KEYS, thread);
            async_proxy_fence();
            named_barrier_sync<2 * WARPGROUP_THREADS>(CONSUMERS_BARRIER);
        } else {
            zero_rows<WARPGROUP_THREADS>(c.output.k[slab], first, KEYS, thread);
            zero_rows<WARPGROUP_THREADS>(c.output.v[slab], first, KEYS, thread);
            async_proxy_fence();
            warpgroup::sync(e + 1);
        }
    }

    // Packed documents: a document's last query tile (of each query head) reaches past q_len into the next document's
    // rows. Their LSE is +inf (the preparation's padding), but S^T = K Q^T of a NaN row is NaN and exp2(NaN) is not
    // 0; and dV += P^T dO, dK += dS^T Q multiply those Q and dO rows by 0. So they become zeros before S^T. The ring
    // stage is read by both consumers: consumer e zeroes the rows of query half e (its own rows of S^T and dP^T with
    // split head dimensions), so each address has one writer (zero_rows), and each fences its stores (read by wgmma
    // in the async proxy) before the barrier that orders them before the products: without split head dimensions
    // both consumers' S^T reads every row, so a barrier of both, only on these tiles (both run the same steps, so
    // both reach it); with split head dimensions a consumer's S^T and dP^T read its own half only (its warpgroup's
    // barrier), and the other half's zeros precede the EXCHANGE barrier before the products over all rows. The
    // writes come before the consumer's release of the stage (LCSF arrives on `finished` after compute), so none
    // can follow the next TMA load into it.
    __device__ static inline void zero_queries_past_document(lcsf::consumer_args<attn_bwd> &c, int qt) {
        const int valid = c.task.q_len - qt * BLOCK_Q;
        if (valid >= BLOCK_Q) return;
        const int e = c.consumer, half0 = e * Q_HALF, first = max(valid, half0), thread = warpgroup::laneid();
        zero_rows<WARPGROUP_THREADS>(c.input.q, first, half0 + Q_HALF, thread);
        zero_rows<WARPGROUP_THREADS>(c.input.dout, first, half0 + Q_HALF, thread);
        async_proxy_fence();
        if constexpr (SPLIT_HEAD_DIMS) warpgroup::sync(e + 1);
        else named_barrier_sync<2 * WARPGROUP_THREADS>(CONSUMERS_BARRIER);
    }

    // P^T and dS^T / scale = P^T * (dP^T - delta) of this warp's 16 keys x W queries, from S^T and dP^T, straight to
    // the 16-bit operands of dV += P^T dO and dK += dS^T Q. `key0` is the key of the warp's first row, `q0` the query
    // of column 0, `col0` its row in the tile's LSE and delta (W = BLOCK_Q and col0 = 0, except for a consumer's
    // query half with split head dimensions). With MASK, keys past kv_len and keys outside a query's band get P = 0.
    // The product dS = P * (dP - delta) needs no select of its own: every row it reads is finite (rows past the
    // sequence are zeros, TMA's or zero_*_past_document's).
    template <bool MASK, int W>
    __device__ static inline void gradients(const globals &g, const task &t, const input_block &in, const rt_fl<16, W> &s,
                                            const rt_fl<16, W> &dp, rt<T, 16, W> &p_out, rt<T, 16, W> &ds_out, int key0,
                                            int q0, int col0) {
        using T2 = typename rt<T, 16, W>::T2;
        // Per key (this lane's two rows, by pair_pos::half): the query columns that see it; none past kv_len.
        index_range seen_by[2];
        if constexpr (MASK) {
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int key = key0 + lane_row(0, half);
                seen_by[half] = key >= t.kv_len ? index_range{1, 0}
                              : V.banded        ? rows_seeing(key, key, t.q_len, t.kv_len, g.window)
                                                : index_range{0, t.q_tiles_seen * BLOCK_Q};
                seen_by[half].first -= q0;
                seen_by[half].last -= q0;
            }
        }
        for_each_pair(
            [&](pair_pos at, const float2 &sv, const float2 &dpv, T2 &p16, T2 &ds16) {
                const float2 lse = *reinterpret_cast<const float2 *>(&in.lse2.data[col0 + at.col]);
                const float2 delta = *reinterpret_cast<const float2 *>(&in.delta.data[col0 + at.col]);
                float2 x = sv; // the scores as the softmax saw them (up to its scale)
                if constexpr (V.softcap) x = {fast_tanh(sv.x * g.inv_cap), fast_tanh(sv.y * g.inv_cap)};
                float2 p = {fast_exp2(fmaf(x.x, g.scale_log2, -lse.x)), fast_exp2(fmaf(x.y, g.scale_log2, -lse.y))};
                if constexpr (MASK) {
                    const index_range seen = seen_by[at.half];
                    if (at.col < seen.first || at.col > seen.last) p.x = 0.f;
                    if (at.col + 1 < seen.first || at.col + 1 > seen.last) p.y = 0.f;
                }
                float2 ds = {p.x * (dpv.x - delta.x), p.y * (dpv.y - delta.y)};
                if constexpr (V.softcap) ds = {ds.x * fmaf(-x.x, x.x, 1.f), ds.y * fmaf(-x.y, x.y, 1.f)};
                p16 = convert<T2>(p);
                ds16 = convert<T2>(ds);
            },
            s, dp, p_out, ds_out);
    }

    // The owner's dQ tile summed over both consumers' keys, one product whose DQ_PIECE-column pieces are staged
    // and added separately: D = 64, dQ^T = K^T dS^T (rows: head dims, columns: the tile's 128 queries); D = 96 and
    // 128, dQ = dS K (rows: the tile's 64 queries, columns: head dims).
    using dq_acc = rt_fl<16, DQ_COLS>;
    __device__ static inline void dq_product(lcsf::consumer_args<attn_bwd> &c, dq_acc &acc, int parity) {
        auto &ds = c.output.ds[parity];
        auto &k = c.output.k;
        if constexpr (DQ_TRANSPOSED) {
            warpgroup::mm_AtB(acc, k[0], ds[0]);
            warpgroup::mma_AtB(acc, k[1], ds[1], wgmma::chained);
        } else {
            warpgroup::mm_AtB(acc, ds[0], k[0]);
            warpgroup::mma_AtB(acc, ds[1], k[1], wgmma::chained);
        }
        warpgroup::mma_async_wait(acc);
    }
    __device__ static inline void piece_of(const dq_acc &acc, rt_fl<16, DQ_PIECE> &piece, int j) {
#pragma unroll
        for (int t = 0; t < DQ_PIECE / 16; t++) piece.tiles[0][t] = acc.tiles[0][DQ_PIECE / 16 * j + t];
    }
    // The key slab a consumer reads: its own, or with split head dimensions the task's one slab.
    __device__ static inline int slab_of(int consumer) { return SPLIT_HEAD_DIMS ? 0 : consumer; }
    // A consumer's columns of a D-wide tile: all of them, or with split head dimensions its share.
    template <typename ST> __device__ static inline auto &own_cols(ST &t, int consumer) {
        if constexpr (SPLIT_HEAD_DIMS) return t.template col_block<OUT_COLS>(consumer);
        else return t;
    }

    // The wgmma groups of one step, in issue order: S and dP | dV, dK | (owner) dQ. dV and dK are queued before
    // dS^T goes to shared memory. (Variants that issued dV before computing dS, or dK later, measured slower.)
    __device__ static inline void compute(lcsf::consumer_args<attn_bwd> &c) {
        if constexpr (SPLIT_HEAD_DIMS) {
            split_step(c);
        } else {
            const int e = c.consumer, step = c.state.steps, parity = step & 1;
            c.state.steps++;
            int h, qt;
            tile_of(c.g, c.task, c.iter, h, qt);
            if constexpr (V.varlen) zero_queries_past_document(c, qt);

            rt_fl<16, BLOCK_Q> s, dp;
            warpgroup::mm_ABt(s, c.output.k[slab_of(e)], c.input.q);
            warpgroup::mm_ABt(dp, c.output.v[slab_of(e)], c.input.dout);
            warpgroup::mma_async_wait(s, dp);

            const int key0 = c.task.k_block * BLOCK_K + slab_of(e) * KEYS;
            const int q0 = qt * BLOCK_Q;
            const bool ragged = key0 + KEYS > c.task.kv_len;
            const bool edge = V.banded && tile_needs_mask(q0, q0 + BLOCK_Q - 1, key0, key0 + KEYS - 1, c.task.q_len, c.task.kv_len, c.g.window);
            rt<T, 16, BLOCK_Q> p, ds;
            const int warp_key0 = key0 + warpgroup::warp_row0();
            if (ragged || edge) gradients<true>(c.g, c.task, c.input, s, dp, p, ds, warp_key0, q0, 0);
            else gradients<false>(c.g, c.task, c.input, s, dp, p, ds, warp_key0, q0, 0);
            warpgroup::mma_AB(c.state.dv, p, c.input.dout);
            warpgroup::mma_AB(c.state.dk, ds, c.input.q);
            // ds[parity][e] was last read by dQ(step - 2): this consumer's own product (program order) or the other's.
            if (step >= 2 && parity != e) wait(semaphores().ds_free[parity], ((step - 2) >> 1) & 1);
            warpgroup::store(c.output.ds[parity][e], ds);
            tma::store_fence(); // dS^T is read by wgmma (async proxy) after the barrier
            if (parity != e) group<2 * WARPGROUP_WARPS>::arrive(DS_READY + parity); // the owner may take it
            warpgroup::mma_async_wait(c.state.dk, c.state.dv);
            if (c.state.dq_pending) dq_step(c, step - 1, c.state.pending_head, c.state.pending_q_tile);
            c.state.dq_pending = true;
            c.state.pending_head = h;
            c.state.pending_q_tile = qt;
        }
    }

    // Split head dimensions (D = 256), one step. Consumer e computes S^T and dP^T of the tile's query half e (all 64
    // keys x queries Q_HALF e ..), turns them into its half of P^T and dS^T, and writes the halves into the exchange
    // tiles; once both halves are there (the EXCHANGE barrier), each runs its columns of dQ = dS K, dV += P^T dO and
    // dK += dS^T Q over all BLOCK_Q queries, reading P^T and dS^T from those tiles. Per step the block then runs 5
    // products of 64 x 64 x 256 (S^T and dP^T once, dV, dK and dQ), where computing S^T and dP^T in both consumers
    // took 7.
    //
    // Synchronisation, per step t (both consumers run the same steps: the same tasks, the same iterations):
    //  * exchange tiles, write after read: consumer e overwrites its halves at step t only once both consumers' step
    //    t - 1 products have read them: its own by program order (it waited for them in step t - 1), the other's
    //    through ds_free[other], an mbarrier that completes once per step after all four of the other's warps have
    //    waited for their products. The other arrives at step t - 1 only after passing EXCHANGE(t - 1), which needed
    //    this consumer there, so it can never be two phases ahead of the parity waited on.
    //  * exchange tiles, read after write: each consumer's stores, then fence.proxy.async (generic stores, read by
    //    wgmma), then EXCHANGE, a barrier of both warpgroups; the products are issued after it.
    //  * the ring stage: every product that reads Q or dO has completed before compute returns (LCSF then releases
    //    the stage), and so has every read of the exchange tiles.
    // EXCHANGE is reached from this one place by both consumers, yet through barrier.sync (not the aligned bar.sync),
    // which stays correct should the compiler specialise the code per consumer.
    static constexpr int Q_HALF = BLOCK_Q / NUM_CONSUMERS; // query columns of S^T and dP^T per consumer
    static constexpr int EXCHANGE = 8;                      // named barrier id (see CONSUMERS_BARRIER, DS_READY)
    __device__ static inline void split_step(lcsf::consumer_args<attn_bwd> &c) {
        const int e = c.consumer, step = c.state.steps;
        c.state.steps++;
        int h, qt;
        tile_of(c.g, c.task, c.iter, h, qt);
        if constexpr (V.varlen) zero_queries_past_document(c, qt);
        kv_tile &k = c.output.k[0], &v = c.output.v[0];
        q_tile &q = c.input.q, &dout = c.input.dout;

        // S^T = K Q_e^T and dP^T = V dO_e^T, one swizzle chunk of D at a time: the half's rows are contiguous inside
        // a chunk (row_block), not across the tile's chunks. N = Q_HALF per product.
        rt_fl<16, Q_HALF> s, dp;
        warpgroup::mm_ABt(s, k.chunk(0), q.chunk(0).template row_block<Q_HALF>(e));
#pragma unroll
        for (int j = 1; j < q_tile::chunks; j++)
            warpgroup::mma_ABt(s, k.chunk(j), q.chunk(j).template row_block<Q_HALF>(e), wgmma::chained);
        warpgroup::mm_ABt(dp, v.chunk(0), dout.chunk(0).template row_block<Q_HALF>(e));
#pragma unroll
        for (int j = 1; j < q_tile::chunks; j++)
            warpgroup::mma_ABt(dp, v.chunk(j), dout.chunk(j).template row_block<Q_HALF>(e), wgmma::chained);
        warpgroup::mma_async_wait(s, dp);

        const int key0 = c.task.k_block * BLOCK_K;
        const int q0 = qt * BLOCK_Q + e * Q_HALF; // the half's first query
        const bool ragged = key0 + KEYS > c.task.kv_len;
        const bool edge = V.banded && tile_needs_mask(q0, q0 + Q_HALF - 1, key0, key0 + KEYS - 1, c.task.q_len, c.task.kv_len, c.g.window);
        rt<T, 16, Q_HALF> p, ds;
        const int warp_key0 = key0 + warpgroup::warp_row0();
        if (ragged || edge) gradients<true>(c.g, c.task, c.input, s, dp, p, ds, warp_key0, q0, e * Q_HALF);
        else gradients<false>(c.g, c.task, c.input, s, dp, p, ds, warp_key0, q0, e * Q_HALF);

        ds_tile &pt = p_exchange(c), &dst = ds_exchange(c);
        if (step > 0) wait(semaphores().ds_free[e ^ 1], (step - 1) & 1); // the other's step t - 1 products are done
        kittens::store(pt, p, warpgroup::warp_row0(), e * Q_HALF);
        kittens::store(dst, ds, warpgroup::warp_row0(), e * Q_HALF);
        async_proxy_fence(); // the stores before the barrier, read by wgmma (async proxy) after it
        named_barrier_sync<2 * WARPGROUP_THREADS>(EXCHANGE);

        // dQ first, so that it completes first: its pieces are staged while dV and dK still run.
        dq_acc dq;
        warpgroup::mm_AtB(dq, dst, own_cols(k, e));
        warpgroup::mma_AB(c.state.dv, pt, own_cols(dout, e));
        warpgroup::mma_AB(c.state.dk, dst, own_cols(q, e));
        warpgroup::mma_async_wait<2>(dq);
        dq_piece &staging = c.output.dq[e][0];
#pragma unroll
        for (int j = 0; j < DQ_PIECES; j++) {
            // The staging tile is free once the previous reduce-add has read it; the barrier passes that on.
            if (warpgroup::laneid() == 0) tma::store_async_read_wait();
            warpgroup::sync(e + 1);
            rt_fl<16, DQ_PIECE> piece;
            piece_of(dq, piece, j);
            warpgroup::store(staging, piece);
            tma::store_fence();
            warpgroup::sync(e + 1);
            if (warpgroup::laneid() == 0) {
                tma::store_add_async(c.g.dq, staging, {c.task.b, h, c.task.q_pad_tile + qt, e * DQ_PIECES + j});
                tma::store_commit_group();
            }
        }
        warpgroup::mma_async_wait(c.state.dk, c.state.dv);
        if (laneid() == 0) arrive(semaphores().ds_free[e]); // this warp's reads of the exchange tiles are done
    }
    // The exchange tiles of split head dimensions: P^T and dS^T of the step (keys x BLOCK_Q queries), consumer e
    // writing columns Q_HALF e .. of each. They take the place of the other head dimensions' per-consumer dS^T tiles.
    __device__ static inline ds_tile &p_exchange(lcsf::consumer_args<attn_bwd> &c) { return c.output.ds[0][0]; }
    __device__ static inline ds_tile &ds_exchange(lcsf::consumer_args<attn_bwd> &c) { return c.output.ds[0][1]; }

    // dQ of the task's step `step` (query tile qt of head h), from both consumers' dS^T of it. Its owner waits for
    // the other's dS^T (DS_READY + p pairs the other's arrival at the step with this sync), computes the product,
    // releases the dS^T tiles, and adds the tile through its own staging tiles; the other consumer has nothing to do.
    __device__ static inline void dq_step(lcsf::consumer_args<attn_bwd> &c, int step, int h, int qt) {
        const int e = c.consumer, parity = step & 1;
        if (parity != e) return;
        // The staging tiles are free once this consumer's previous reduce-adds have read them (a step or more ago);
        // the barrier below passes that on to the warpgroup's other threads.
        if (warpgroup::laneid() == 0) tma::store_async_read_wait();
        group<2 * WARPGROUP_WARPS>::sync(DS_READY + parity);
        dq_acc dq;
        dq_product(c, dq, parity);
        if (laneid() == 0) arrive(semaphores().ds_free[parity]);
#pragma unroll
        for (int j = 0; j < DQ_PIECES; j++) {
            rt_fl<16, DQ_PIECE> piece;
            piece_of(dq, piece, j);
            warpgroup::store(c.output.dq[e][j], piece);
        }
        tma::store_fence();
        warpgroup::sync(e + 1);
        if (warpgroup::laneid() == 0) {
#pragma unroll
            for (int j = 0; j < DQ_PIECES; j++) {
                const int tile = c.task.q_pad_tile + qt;
                const coord at = DQ_TRANSPOSED ? coord{c.task.b, h, 0, tile * DQ_PIECES + j} : coord{c.task.b, h, tile, j};
                tma::store_add_async(c.g.dq, c.output.dq[e][j], at);
            }
            tma::store_commit_group();
        }
    }

    // One thread per consumer warpgroup, the one that issued all of its reduce-adds and stores: once they have
    // landed, count the last task finished for its (batch, kv head). The wait for the previous task's last adds
    // overlaps the next task's K and V loads.
    __device__ static inline void count_done(const globals &g, const consumer_state &state) {
        if (!g.convert.sync.done || state.last_kv_head < 0) return;
        tma::store_async_wait<0>();
        fence_async_global(); // the TMA adds before the release below
        release_add(g.convert.sync.done + state.last_kv_head, 1);
    }

    // Every thread of a consumer warpgroup, after the block's last task (its TMA stores complete): count that task,
    // then convert items (BWD_CONVERT_ROWS rows of one head each, claimed in order, which is the order in which
    // (batch, kv head)s finish) while their (batch, kv head) is complete; the first item that is not stops this warp,
    // and backward_convert_dq converts whatever is left unflagged. Never waiting keeps this safe when not every block
    // of the grid is resident at once.
    __device__ static inline void after_tasks(const globals &g, const consumer_state &state) {
        if constexpr (CONVERT_IN_KERNEL) {
            const dq_conversion &cv = g.convert;
            if (warpgroup::laneid() == 0) count_done(g, state);
            if (!cv.sync.done) return;
            const int lane = laneid(), target = 2 * g.k_blocks;
            while (true) {
                int item = lane == 0 ? atomicAdd(cv.sync.next_item, 1) : 0;
                item = __shfl_sync(0xffffffffu, item, 0);
                if (item >= cv.items) return;
                const int head = item / cv.items_per_head; // batch * q_heads + q_head
                int ready = 0;
                if (lane == 0) ready = acquire_load(cv.sync.done + head / g.group) >= target;
                if (!__shfl_sync(0xffffffffu, ready, 0)) return;
                convert_item(g, head, (item - head * cv.items_per_head) * BWD_CONVERT_ROWS);
                __syncwarp();
                if (lane == 0) cv.sync.converted[item] = 1;
            }
        }
    }
    // One warp: rows row0 .. row0 + BWD_CONVERT_ROWS of one head's dQ, times the softmax scale, in the output dtype.
    __device__ static inline void convert_item(const globals &g, int head, int row0) {
        static_assert(D == 4 * 32, "one float4 per lane covers a row (attention.h's bwd_kernel_converts_dq)");
        using T2 = typename base_types::packing<T>::packed_type;
        const dq_conversion &cv = g.convert;
        const int rows = min(BWD_CONVERT_ROWS, g.q_len - row0), lane = laneid();
        const int b = head / (g.kv_heads * g.group), h = head - b * g.kv_heads * g.group;
        const float4 *src = reinterpret_cast<const float4 *>(cv.accum + (int64_t(head) * g.q_tiles * BLOCK_Q + row0) * D) + lane;
        T *dst = cv.out + b * cv.stride_b + h * cv.stride_h + int64_t(row0) * cv.stride_n + 4 * lane;
        constexpr int UNROLL = 8; // loads in flight per lane
        for (int r0 = 0; r0 < rows; r0 += UNROLL) {
            float4 x[UNROLL];
#pragma unroll
            for (int r = 0; r < UNROLL; r++)
                if (r0 + r < rows) x[r] = src[(r0 + r) * (D / 4)];
#pragma unroll
            for (int r = 0; r < UNROLL; r++)
                if (r0 + r < rows) {
                    T2 pair[2] = {convert<T2>(float2{x[r].x * g.scale, x[r].y * g.scale}),
                                  convert<T2>(float2{x[r].z * g.scale, x[r].w * g.scale})};
                    *reinterpret_cast<uint2 *>(dst + (r0 + r) * cv.stride_n) = *reinterpret_cast<const uint2 *>(pair);
                }
        }
    }

    // dK and dV of this consumer's 64 keys, staged in its K and V tiles and written by two TMA stores (which clip
    // rows past kv_len; a packed document's last rows go by plain stores that stop at its end). The barrier first:
    // the other consumer's last dQ product reads this consumer's K. With split head dimensions both consumers stage
    // their columns in the one K and V tile, and once both have, consumer 0 stores dK and consumer 1 dV (the tiles
    // each loads in setup after its store has read it).
    __device__ static inline void finish(lcsf::consumer_args<attn_bwd> &c) {
        const int e = c.consumer, slab = slab_of(e), row_tile = c.task.k_block * KV_TILES + slab;
        if constexpr (!SPLIT_HEAD_DIMS) {
            if (c.state.dq_pending) dq_step(c, c.state.steps - 1, c.state.pending_head, c.state.pending_q_tile);
            c.state.dq_pending = false;
        }
        consumers_sync();
        rt<T, 16, OUT_COLS> out;
        mul(c.state.dk, c.state.dk, c.g.scale); // dS^T was formed without the softmax scale
        copy(out, c.state.dk);
        warpgroup::store(own_cols(c.output.k[slab], e), out);
        copy(out, c.state.dv);
        warpgroup::store(own_cols(c.output.v[slab], e), out);
        tma::store_fence();
        if constexpr (SPLIT_HEAD_DIMS) consumers_sync();
        else warpgroup::sync(e + 1);
        const int key0 = row_tile * KEYS;
        if (key0 >= c.task.kv_len) return;
        const row_coord at{c.task.b, c.task.kv_head, c.task.k_start + key0, 0};
        const bool stores_dk = !SPLIT_HEAD_DIMS || e == 0, stores_dv = !SPLIT_HEAD_DIMS || e == 1;
        if (V.varlen && key0 + KEYS > c.task.kv_len) {
            if (stores_dk) warpgroup::store_rows(c.g.dk, c.output.k[slab], at, c.task.kv_len - key0);
            if (stores_dv) warpgroup::store_rows(c.g.dv, c.output.v[slab], at, c.task.kv_len - key0);
            async_proxy_fence(); // these reads of the tiles before the next task's TMA loads into them
            return;
        }
        if (warpgroup::laneid() == 0) {
            if (stores_dk) tma::store_async(c.g.dk, c.output.k[slab], at);
            if (stores_dv) tma::store_async(c.g.dv, c.output.v[slab], at);
            tma::store_commit_group();
        }
    }
};

// The backward's kernel: LCSF's block (ring, producer, consumers), then each consumer warpgroup's after_tasks once
// its block has no task left.
template <typename K>
__global__ __launch_bounds__(lcsf::num_threads<K>(), 1) void attn_bwd_kernel(const __grid_constant__ typename K::globals g) {
    lcsf::block<K> b = lcsf::make_block<K>(g);
    if (b.is_producer()) {
        b.produce();
    } else {
        typename K::consumer_state state;
        typename K::task last;
        b.consume(state, last);
        K::after_tasks(g, state);
    }
}

} // namespace tk_attention
