// Attention forward (flash attention) on the LCSF template: O = softmax(scale * Q K^T) V, plus the row
// log-sum-exp, for one head dimension D (attention.h lists those built).
//
// A task is one block of BLOCK_Q = 64 * NUM_CONSUMERS query rows of one (batch, head). Each consumer
// warpgroup owns 64 rows of Q, loaded by TMA into one of its shared slots: while a task runs on one slot,
// the next task's Q is already loading into the other (issued in setup). Meanwhile the producer streams
// the head's K and V tiles (KV rows each) through the ring. Per tile a consumer computes S = Q K^T (wgmma,
// both operands in shared memory), folds S into its running softmax in fp32 registers, converts P to 16 bits
// in registers and runs O += P V (wgmma with A in registers, B = the V tile as stored: keys x D). The
// consumers work on different phases at once, so one's softmax overlaps another's tensor-core work.
// At the end O is divided by the row sums, staged in the consumer's Q slot (free once the task's last S is
// computed) and written by one TMA store, which clips rows past the sequence end. TMA zero-fills Q rows past
// q_len and K/V rows past kv_len, and those keys are masked. Packed documents: a document's last tiles hold the
// next document's rows (or rows past the last offset) instead, which may hold anything; see zero_past_document.
//
// When q_len is not a multiple of BLOCK_Q one block is ragged, and a consumer whose 64 rows lie wholly outside
// the sequence computes nothing. That is the last block, except causal with q_len mod BLOCK_Q in 1..64: there
// the blocks start q_shift = BLOCK_Q - 64 rows above row 0 (Q coordinates below 0 read zeros), so the one-consumer block
// is the first, which sees the fewest keys; at the end it would be the heaviest task, run by one consumer
// without the others' overlap.
//
// Banded attention (causal, sliding windows: the band of attention.h, bottom-right aligned as in FlashAttention)
// walks only the key tiles some row of the task sees; a consumer skips the tiles none of its rows sees, and masks
// are applied only to the tiles that straddle an edge of the band or the ragged end. With a softcap, S becomes
// tanh(scale / softcap * S) before the softmax, which then runs at scale softcap.
#pragma once

#include "attention.h"
#include "kittens.cuh"
#include "attention_masking.cuh"
#include "attention_online_softmax.cuh"

namespace tk_attention {
using namespace kittens;

// Narrow tail tiles (variant::narrow_tail) need key tiles one swizzle chunk wide: D = 64.
constexpr bool fwd_narrow_tails_fit(int head_dim) { return head_dim == 64; }

template <typename T, int D, variant V> struct attn_fwd {
    static_assert(supported_head_dim(D), "attention forward: D must be one of attention.h's HEAD_DIMS");
    // Consumers, key tile, ring depth, Q slots and registers per head dimension: attention_configs.cuh.
    static constexpr fwd_config CONFIG = fwd_config_for(D);
    static constexpr int NUM_CONSUMERS = CONFIG.consumers;
    static constexpr int Q_ROWS = 64; // per consumer: one wgmma row slab
    static constexpr int BLOCK_Q = Q_ROWS * NUM_CONSUMERS;
    static_assert(BLOCK_Q == fwd_block_q(D), "attention.h's fwd_block_q sizes the packed documents' blocks");
    static constexpr int KV = V.short_window ? CONFIG.kv_window : V.softcap ? CONFIG.kv_softcap : CONFIG.kv;
    static_assert(!V.short_window || (V.left_edge && CONFIG.kv_window > 0 && fwd_narrow_tails_fit(D)),
                  "attention forward: short windows need a left edge, kv_window and narrow tails");
    static constexpr int INPUT_STAGES = CONFIG.stages;
    static constexpr int Q_SLOTS = CONFIG.q_slots;
    static_assert(Q_SLOTS == 1 || Q_SLOTS == 2, "attention forward: one or two Q slots per consumer");
    // (ptxas reports the registers per thread that the block size allows at entry; the consumers' code fits the
    // count setmaxnreg gives them without spills.)
    static constexpr int PRODUCER_REGISTERS = CONFIG.producer_registers, CONSUMER_REGISTERS = CONFIG.consumer_registers;
    static_assert(registers_fit(NUM_CONSUMERS, PRODUCER_REGISTERS, CONSUMER_REGISTERS),
                  "attention forward: the register split exceeds the block's pool");
    // narrow_tail: a consumer's last tile (cut by its diagonal, a window's right edge or the sequence end) runs as a
    // 64-, 128- or KV-key product, whichever is the narrowest that holds the keys it sees. It pays only where such
    // tiles are many: the narrow bodies make the kernel longer, and that alone costs time on every tile (see
    // attention_fwd_launch.cuh for where it is used).
    static_assert(!V.narrow_tail || fwd_narrow_tails_fit(D), "attention forward: narrow tail tiles need D = 64");
    // Dynamic tasks: LCSF's producer looks each block's next task up, and setup prefetches that task's Q.
    static constexpr bool DYNAMIC_TASKS = true;
    // Named barriers: 1 + consumer is each consumer warpgroup's own (warpgroup::sync); this one is all consumers'.
    static constexpr int CONSUMERS_BARRIER = 4;

    using q_tile = st<T, Q_ROWS, D>;
    using kv_tile = st<T, KV, D>;
    using q_gl = gl<T, -1, -1, -1, D, q_tile>;
    using kv_gl = gl<T, -1, -1, -1, D, kv_tile>;

    struct globals {
        q_gl q;
        kv_gl k, v;
        q_gl o; // (batch, q_heads, q_len, D), any TMA-legal strides
        float *lse; // (batch, q_heads, q_len), contiguous
        int q_heads, group; // group: query heads per kv head (GQA)
        int q_len, kv_len, q_blocks, kv_tiles, num_tasks;
        int q_shift;         // block qb covers rows qb * BLOCK_Q - q_shift ..: 0 or BLOCK_Q - Q_ROWS, see the top
        int heads_per_group; // task order: see get_task
        int *task_counter;   // LCSF's dynamic schedule: 2 ints, zero at launch and left zero
        band window;
        float scale_log2; // softmax scale * log2(e), > 0 (the host folds other signs into q); with a softcap, softcap * log2(e)
        float inv_cap;    // with a softcap: scale / softcap
        varlen_layout docs; // variant::varlen: the packed documents (q_len, kv_len: the total rows; q_blocks a bound)
    };
    struct input_block {
        kv_tile k, v;
    };
    struct output_block {
        q_tile q[Q_SLOTS][NUM_CONSUMERS]; // [task number % Q_SLOTS][consumer]
        semaphore q_arrived[Q_SLOTS][NUM_CONSUMERS];
    };
    struct consumer_state {
        rt_fl<16, D> o;
        row_stats stats;
        int tasks = 0; // tasks this consumer has started: selects the Q slot and its barrier phase
        int partial_tiles = 0; // variant::varlen: key tiles seen that reach past their document (zero_past_document)
    };
    struct task {
        int id, b, h, q_block;
        int first_key, iters; // the key tiles start at first_key, KV keys apart
        int q_len, kv_len;     // of this task's sequence (a packed document's own lengths)
        int q_start, k_start;  // its first row in the packed rows (0 unless varlen)
    };

    // Tasks are drawn dynamically (LCSF's DYNAMIC_TASKS): each block takes the next id when it starts a task, so
    // the id order below is the order in which tasks start, and blocks that drew short tasks take more.
    // Heads go in groups of `heads_per_group`, as many as keep their K and V within about a quarter of L2 (set
    // by the host); inside a group, by query block from the last, then by head. So the tasks running at one
    // moment are a few query blocks of a few heads streaming the same K/V tiles (and the query heads of one kv
    // head run back to back), and causal tasks start heaviest first within each group, which keeps the blocks'
    // loads even at the end of the grid. (All heads in one group walked more K/V at once than L2 holds; groups
    // on a static round-robin schedule lost at long sequences to the uneven per-block loads that the dynamic draw
    // removes.)
    // Packed documents: the blocks of all documents, in order, stand where one sequence's blocks would.
    __device__ static inline bool get_task(const globals &g, int id, task &t) {
        if (id >= g.num_tasks) return false;
        const int q_blocks = V.varlen ? g.docs.blocks_q[g.docs.count] : g.q_blocks;
        const int total_heads = V.varlen ? g.q_heads : g.num_tasks / g.q_blocks;
        if (V.varlen && id >= q_blocks * total_heads) return false; // past the last block (the host's count bounds it)
        const int group_tasks = g.heads_per_group * q_blocks;
        const int group = id / group_tasks;
        const int in_group = id - group * group_tasks;
        const int heads = min(g.heads_per_group, total_heads - group * g.heads_per_group); // the last group may be short
        const int qb = q_blocks - 1 - in_group / heads;
        const int bh = group * g.heads_per_group + in_group % heads;
        t.id = id;
        t.b = bh / g.q_heads;
        t.h = bh - t.b * g.q_heads;
        t.q_block = qb;
        t.q_len = g.q_len;
        t.kv_len = g.kv_len;
        t.q_start = t.k_start = 0;
        if constexpr (V.varlen) {
            const int doc = g.docs.doc_of_block(qb);
            t.q_block = qb - g.docs.blocks_q[doc];
            t.q_start = g.docs.q[doc];
            t.q_len = g.docs.q[doc + 1] - t.q_start;
            t.k_start = g.docs.k[doc];
            t.kv_len = g.docs.k[doc + 1] - t.k_start;
        }
        t.first_key = 0;
        t.iters = (t.kv_len + KV - 1) / KV;
        if constexpr (V.banded) {
            const int first_row = max(t.q_block * BLOCK_Q - g.q_shift, 0);
            const int last_row = min((t.q_block + 1) * BLOCK_Q - g.q_shift, t.q_len) - 1;
            const index_range keys = keys_seen(first_row, last_row, t.q_len, t.kv_len, g.window);
            // A window's tiles start at its first key, not at a multiple of KV, so they waste no keys before it.
            t.first_key = keys.empty() || !V.left_edge ? 0 : keys.first;
            t.iters = keys.empty() ? 0 : (keys.last - t.first_key) / KV + 1;
        }
        return true;
    }

    __device__ static inline void load(lcsf::producer_args<attn_fwd> &p) {
        const int kv_head = p.task.h / p.g.group;
        tma::expect<kv_tile, kv_tile>(p.arrived);
        const row_coord at{p.task.b, kv_head, p.task.k_start + first_key(p.task) + p.iter * KV, 0};
        tma::load_async(p.input.k, p.g.k, at, p.arrived);
        tma::load_async(p.input.v, p.g.v, at, p.arrived);
    }

    // Where a task's key tiles start: 0 (a constant the compiler folds) unless the band has a left edge.
    __device__ static inline int first_key(const task &t) { return V.left_edge ? t.first_key : 0; }

    __device__ static inline int first_row(const globals &g, const task &t, int consumer) {
        return t.q_block * BLOCK_Q + consumer * Q_ROWS - g.q_shift;
    }
    // A consumer of the ragged block whose rows are all outside the sequence.
    __device__ static inline bool idle(const task &t, int row0) { return row0 < 0 || row0 >= t.q_len; }

    // One thread: start loading this consumer's Q rows of task t into slot `slot`.
    __device__ static inline void load_q(lcsf::consumer_args<attn_fwd> &c, const task &t, int slot) {
        semaphore &arrived = c.output.q_arrived[slot][c.consumer];
        tma::expect<q_tile>(arrived);
        tma::load_async(c.output.q[slot][c.consumer], c.g.q, row_coord{t.b, t.h, t.q_start + first_row(c.g, t, c.consumer), 0}, arrived);
    }

    __device__ static inline q_tile &q_of(lcsf::consumer_args<attn_fwd> &c) {
        return c.output.q[c.state.tasks % Q_SLOTS][c.consumer];
    }

    // With two slots, this task's Q is in slot (tasks & 1), loaded during the previous task (or now, for the first),
    // and the next task's Q (LCSF looked that task up already) goes into the other slot once the previous task's O
    // store, staged there, has read it. (Issuing it on the first tile instead, after S, measured slower.) With one
    // slot (D = 256, for shared memory), this task's Q loads into it once that store has read it.
    __device__ static inline void setup(lcsf::consumer_args<attn_fwd> &c) {
        const int slot = c.state.tasks % Q_SLOTS;
        if (c.state.tasks == 0 && warpgroup::laneid() == 0) {
#pragma unroll
            for (int s = 0; s < Q_SLOTS; s++) init_semaphore(c.output.q_arrived[s][c.consumer], 1);
            if constexpr (Q_SLOTS == 2) load_q(c, c.task, slot);
            if constexpr (V.varlen) {
                if (c.consumer == 0)
                    for (int s = 0; s < INPUT_STAGES; s++) init_semaphore(v_zeroed()[s], WARPGROUP_THREADS);
            }
        }
        // Every consumer waits on v_zeroed, which consumer 0 initialises: once per block, before any compute.
        if constexpr (V.varlen) {
            if (c.state.tasks == 0) named_barrier_sync<NUM_CONSUMERS * WARPGROUP_THREADS>(CONSUMERS_BARRIER);
        }
        // First task: nobody waits on a barrier before its init. Later: every warp's wgmma reads of the slot TMA
        // overwrites (the previous task's Q) are over.
        warpgroup::sync(c.consumer + 1);
        if (warpgroup::laneid() == 0) {
            if constexpr (Q_SLOTS == 2) {
                if (c.has_next) {
                    tma::store_async_read_wait<0>();
                    load_q(c, c.next, slot ^ 1);
                }
            } else {
                tma::store_async_read_wait<0>();
                load_q(c, c.task, slot);
            }
        }
        zero(c.state.o);
        c.state.stats.reset();
        wait(c.output.q_arrived[slot][c.consumer], (c.state.tasks / Q_SLOTS) & 1);
    }

    // The first W keys of a key (or value) tile as a wgmma operand.
    template <int W> __device__ static inline const st<T, W, D> &leading(const kv_tile &t) {
        if constexpr (W == KV) return t;
        else return t.template top_rows<W>();
    }

    // One tile's step for this consumer over its first W keys (the rest, if any, are masked for all its rows).
    // zeroed: from zero_past_document, or -1 where the tile lies inside its document.
    template <int W> __device__ static inline void tile_step(lcsf::consumer_args<attn_fwd> &c, int key0, int row0, int zeroed) {
        const globals &g = c.g;
        const int q_len = c.task.q_len, kv_len = c.task.kv_len;
        rt_fl<16, W> s;
        warpgroup::mm_ABt(s, q_of(c), leading<W>(c.input.k));
        warpgroup::mma_async_wait(s);
        if constexpr (V.softcap) softcap_scores(s, g.inv_cap); // before masking: tanh would undo a -inf

        const bool ragged = key0 + W > kv_len;
        if (ragged || (V.banded && tile_needs_mask<V.left_edge>(row0, row0 + Q_ROWS - 1, key0, key0 + W - 1, q_len, kv_len, g.window))) {
            const int warp_row0 = row0 + warpgroup::warp_row0();
            index_range keys[2];
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int row = warp_row0 + lane_row(0, half);
                keys[half] = V.banded ? keys_seen(row, row, q_len, kv_len, g.window) : index_range{0, kv_len - 1};
            }
            mask_scores<V.left_edge>(s, key0, keys);
        }
        float rescale[2];
        if (softmax_step(s, c.state.stats, c.g.scale_log2, rescale)) scale_rows(c.state.o, rescale);
        rt<T, 16, W> p;
        copy(p, s);
        if (V.varlen && zeroed >= 0) wait(v_zeroed()[zeroed >> 1], zeroed & 1); // V's rows past the document are zeros
        warpgroup::mma_AB(c.state.o, p, leading<W>(c.input.v));
        // Waited at once: leaving it in flight past this call (to overlap it with the next tile) makes ptxas
        // serialise every wgmma of the kernel, since P's registers die here. The other consumers fill the gap.
        warpgroup::mma_async_wait(c.state.o);
    }

    // The narrowest of the widths W, Ws... (ascending, the last = KV) that holds the `seen` leading keys.
    template <int W, int... Ws>
    __device__ static inline void narrowest_step(lcsf::consumer_args<attn_fwd> &c, int seen, int key0, int row0, int zeroed) {
        if constexpr (sizeof...(Ws) == 0) tile_step<W>(c, key0, row0, zeroed);
        else if (seen <= W) tile_step<W>(c, key0, row0, zeroed);
        else narrowest_step<Ws...>(c, seen, key0, row0, zeroed);
    }

    __device__ static inline void compute(lcsf::consumer_args<attn_fwd> &c) {
        const globals &g = c.g;
        const int key0 = first_key(c.task) + c.iter * KV;
        const int row0 = first_row(g, c.task, c.consumer), row1 = row0 + Q_ROWS - 1;
        const int q_len = c.task.q_len, kv_len = c.task.kv_len;
        int zeroed = -1;
        if constexpr (V.varlen) {
            if (key0 + KV > kv_len) zeroed = zero_past_document(c, key0); // before the return: consumer 0 zeroes
        }
        // Nothing to do: an idle consumer of the ragged block, or (banded) a tile that none of its rows sees.
        if (idle(c.task, row0) || (V.banded && tile_outside_band<V.left_edge>(row0, row1, key0, key0 + KV - 1, q_len, kv_len, g.window))) return;
        if constexpr (V.narrow_tail) {
            // Keys of this tile that some row of this consumer sees: a tile cut by the band's right edge or the
            // sequence end runs as the narrowest product that holds them.
            const index_range keys = keys_seen(row0, row1, q_len, kv_len, g.window);
            if constexpr (KV > 128) narrowest_step<64, 128, KV>(c, keys.last + 1 - key0, key0, row0, zeroed);
            else narrowest_step<64, KV>(c, keys.last + 1 - key0, key0, row0, zeroed);
        } else {
            tile_step<KV>(c, key0, row0, zeroed);
        }
    }

    // Packed documents: a document's last key tile is loaded whole, so its rows past kv_len are the next document's (or
    // rows past the last offset). Their keys are masked (mask_scores selects -inf, whatever K held), but O += P V still
    // multiplies those V rows by P = 0, and 0 x NaN or 0 x inf is NaN: so those V rows become zeros first. The stage is
    // read by every consumer, and consumer 0 alone zeroes it (every consumer, idle or not, runs compute for every
    // stage). Had every consumer written the same zeros, each would still have to order the others' writes before
    // its product, and racecheck would see three warpgroups store to one address unordered; with one writer (and
    // zero_rows' fixed thread per address) no address has two. Each writing thread fences (generic stores, read by
    // wgmma in the async proxy) and arrives on v_zeroed; every consumer that computes waits there before its P V
    // product (its S and softmax run meanwhile), and only on these tiles. The writes land before consumer 0 releases
    // the stage to the producer (LCSF arrives on the stage's `finished` after compute), so none can follow the next
    // TMA load into it.
    //
    // Phases: every consumer counts the partial tiles it has seen (the same sequence: they follow the same tasks);
    // the n-th uses v_zeroed[n % INPUT_STAGES] at parity (n / INPUT_STAGES) & 1. A consumer waiting at its n-th
    // partial tile holds that stage, so the producer cannot have refilled the ring more than INPUT_STAGES - 1 stages
    // past it: consumer 0 can be at most INPUT_STAGES - 1 partial tiles ahead, and the barrier of the n-th has not
    // moved on to the (n + INPUT_STAGES)-th. Returns the barrier and parity to wait on, as 2 * index + parity.
    __device__ static inline semaphore *v_zeroed() {
        __shared__ semaphore sems[INPUT_STAGES];
        return sems;
    }
    __device__ static inline int zero_past_document(lcsf::consumer_args<attn_fwd> &c, int key0) {
        const int n = c.state.partial_tiles++, index = n % INPUT_STAGES;
        if (c.consumer == 0) {
            zero_rows<WARPGROUP_THREADS>(c.input.v, c.task.kv_len - key0, KV, warpgroup::laneid());
            async_proxy_fence();
            arrive(v_zeroed()[index]);
        }
        return 2 * index + ((n / INPUT_STAGES) & 1);
    }

    // O / l through the consumer's Q slot and one TMA store (or, for a packed document's last rows, plain stores that
    // stop at its end: the rows after it are the next document's); the LSE straight from registers.
    __device__ static inline void finish(lcsf::consumer_args<attn_fwd> &c) {
        q_tile &staging = q_of(c); // every wgmma of this task that read it has completed
        c.state.tasks++;
        constexpr float LN2 = 0.6931471805599453f;
        float inv[2], lse[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float l = row_lanes_sum(c.state.stats.sum[r]);
            const bool seen = l > 0.f; // a row that sees no key: O = 0, LSE = -inf
            inv[r] = seen ? 1.f / l : 0.f;
            lse[r] = seen ? (c.state.stats.max[r] + __log2f(l)) * LN2 : -INFINITY;
        }
        scale_rows(c.state.o, inv);

        const int row0 = first_row(c.g, c.task, c.consumer);
        if (idle(c.task, row0)) return;
        const int warp_row0 = row0 + warpgroup::warp_row0();
        const int rows[2] = {warp_row0 + lane_row(0, 0), warp_row0 + lane_row(0, 1)};
        if (leads_row()) { // (batch, heads, q_len); packed: (heads, total rows)
            const int64_t head = int64_t(c.task.b) * c.g.q_heads + c.task.h;
            float *dst = c.g.lse + head * c.g.q_len + c.task.q_start;
#pragma unroll
            for (int half = 0; half < 2; half++)
                if (rows[half] < c.task.q_len) dst[rows[half]] = lse[half];
        }
        // The tile in one bulk store instead of many four-byte stores per thread. The next setup waits for the store
        // to have read the slot before TMA loads the task after next into it.
        rt<T, 16, D> out;
        copy(out, c.state.o);
        warpgroup::store(staging, out);
        const row_coord at{c.task.b, c.task.h, c.task.q_start + row0, 0};
        if (V.varlen && row0 + Q_ROWS > c.task.q_len) {
            warpgroup::sync(c.consumer + 1);
            warpgroup::store_rows(c.g.o, staging, at, c.task.q_len - row0);
            async_proxy_fence(); // these reads of the slot before TMA loads into it again (after the next setup's barrier)
            return;
        }
        async_proxy_fence();
        warpgroup::sync(c.consumer + 1);
        if (warpgroup::laneid() == 0) {
            tma::store_async(c.g.o, staging, at);
            tma::store_commit_group();
        }
    }
};

} // namespace tk_attention
